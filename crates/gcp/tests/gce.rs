//! The recorded GCE vTPM attestations (`testdata/`, see its PROVENANCE.md)
//! verify as their provenance says, and each byte flipped in a signed
//! part, a foreign key or chain, or a nonce of another session is refused
//! by name.

use confboot_attest::AttestationError;
use confboot_attest::check::CheckOutcome;
use confboot_gcp::certs::{Cert, build_chain};
use confboot_gcp::pb;
use confboot_gcp::verify::{TPM_ALG_SHA1, TPM_ALG_SHA384, replay, verify};
use confboot_gcp::{GcpAttestation, GcpRefusal, GcpRoots, run_checks};
use confboot_tpm::structures::TPM_ALG_SHA256;
use confboot_util::hex;
use prost::Message;

const NONCE9009: &[u8] = include_bytes!("../testdata/gce-cos-85-nonce9009.pb");
const NO_NONCE: &[u8] = include_bytes!("../testdata/gce-cos-85-no-nonce.pb");
/// 2026-05-28: any time between 2021-08-31 and 2051-08-24 will do.
const AT: i64 = 1_780_000_000;

fn reason(e: &AttestationError) -> GcpRefusal {
    *e.detail()
        .and_then(|d| d.reason::<GcpRefusal>())
        .unwrap_or_else(|| panic!("no GCP reason in {e}"))
}

fn refused(bytes: &[u8], nonce: &[u8]) -> GcpRefusal {
    refused_by(bytes, nonce, &GcpRoots::google(), AT)
}

fn refused_by(bytes: &[u8], nonce: &[u8], roots: &GcpRoots, at: i64) -> GcpRefusal {
    reason(&verify(bytes, nonce, roots, at).expect_err("must be refused"))
}

/// The attestation with `edit` applied to its protobuf.
fn edited(bytes: &[u8], edit: impl FnOnce(&mut pb::Attestation)) -> Vec<u8> {
    let mut a = pb::Attestation::decode(bytes).unwrap();
    edit(&mut a);
    a.encode_to_vec()
}

fn quote_of(a: &mut pb::Attestation, hash: u16) -> &mut pb::TpmQuote {
    a.quotes
        .iter_mut()
        .find(|q| q.pcrs.as_ref().unwrap().hash == u32::from(hash))
        .unwrap()
}

fn der(name: &str) -> Vec<u8> {
    std::fs::read(format!("{}/testdata/{name}", env!("CARGO_MANIFEST_DIR"))).unwrap()
}

fn pem(name: &str) -> Vec<u8> {
    x509_parser::pem::parse_x509_pem(&der(name))
        .unwrap()
        .1
        .contents
}

#[test]
fn both_recorded_attestations_verify() {
    for (bytes, nonce) in [(NONCE9009, &[0x90, 0x09][..]), (NO_NONCE, &[][..])] {
        let checks = run_checks(bytes, Some(nonce), &GcpRoots::google(), AT);
        for c in &checks {
            assert!(matches!(c.outcome, CheckOutcome::Passed(_)), "{c}");
        }
        let v = verify(bytes, nonce, &GcpRoots::google(), AT).unwrap();
        assert_eq!(
            hex::encode(&v.sha256_pcrs[&0]),
            "0f35c214608d93c7a6e68ae7359b4a8be5a0e99eea9107ece427c4dea4e439cf"
        );
        assert_eq!(
            hex::encode(&v.sha256_pcrs[&7]),
            "3365d7fa2b024c852913c06e04ffbfa6ea5289f743bbf1a76f7ffdf21ed84793"
        );
        // The log extends PCRs 0 to 9 and gives the quoted values.
        assert_eq!(
            v.replayed.keys().copied().collect::<Vec<_>>(),
            (0..10).collect::<Vec<u32>>()
        );
        assert!(
            v.replayed
                .iter()
                .all(|(i, value)| v.sha256_pcrs[i] == *value)
        );
        // The AK certificate ends 2051-08-24, before its roots.
        assert!(v.chain_not_after > 2_576_000_000);
    }
}

#[test]
fn the_log_replays_every_bank_to_the_recorded_values() {
    let att = GcpAttestation::decode(NO_NONCE).unwrap();
    assert_eq!(att.quotes.len(), 3);
    let sha1 = replay(&att.event_log, TPM_ALG_SHA1).unwrap().unwrap();
    assert_eq!(
        hex::encode(&sha1[&0]),
        "c032c3b51dbb6f96b047421512fd4b4dfde496f3"
    );
    assert_eq!(
        hex::encode(&sha1[&7]),
        "42e669233f0e826df5093abfd6998c020df2de88"
    );
    for q in &att.quotes {
        let replayed = replay(&att.event_log, q.hash).unwrap().unwrap();
        assert_eq!(replayed.len(), 10);
        assert!(
            replayed.iter().all(|(i, v)| q.pcrs[i] == *v),
            "bank {:#06x}",
            q.hash
        );
    }
    assert!(att.quotes.iter().any(|q| q.hash == TPM_ALG_SHA384));
}

#[test]
fn the_other_recorded_event_logs_replay_to_their_expected_pcrs() {
    let ubuntu = replay(&der("eventlogs/ubuntu-2404-amd-sevsnp.bin"), TPM_ALG_SHA256)
        .unwrap()
        .unwrap();
    for (pcr, value) in [
        (
            0,
            "50597a27846e91d025eef597abbc89f72bff9af849094db97b0684d8bc4c515e",
        ),
        (
            4,
            "abe8b3fa6aecb36c2fd93c6f6edde661c21b353d007410a2739d69bfa7e1b9be",
        ),
        (
            7,
            "33ad69850fb2c7f30b4f8b4bc10ed93fc954dc07fa726e84f50f3d192dc1c140",
        ),
        (
            9,
            "ce08798b283c7a0ddc5e9ad1d602304b945b741fc60c20e254eafa0f4782512b",
        ),
        (
            14,
            "306f9d8b94f17d93dc6e7cf8f5c79d652eb4c6c4d13de2dddc24af416e13ecaf",
        ),
    ] {
        assert_eq!(hex::encode(&ubuntu[&pcr]), value, "PCR {pcr}");
    }
    let ubuntu_sha1 = replay(&der("eventlogs/ubuntu-2404-amd-sevsnp.bin"), TPM_ALG_SHA1)
        .unwrap()
        .unwrap();
    assert_eq!(
        hex::encode(&ubuntu_sha1[&0]),
        "8124f09f069c7d2d9acf5ce4eab928a7103a0bb2"
    );
    let gke = replay(
        &der("eventlogs/confidential-gke-debug-251000_eventlog.bin"),
        TPM_ALG_SHA256,
    )
    .unwrap()
    .unwrap();
    assert_eq!(
        hex::encode(&gke[&0]),
        "d0c70a9310cd0b55767084333022ce53f42befbb69c059ee6c0a32766f160783"
    );
    assert_eq!(
        hex::encode(&gke[&9]),
        "4df4604236d15333b1a07acdb3c4655f3da5c0843b62e7a9df2f62844a9d92f1"
    );
}

#[test]
fn the_recorded_gce_certificates_chain_to_their_roots() {
    let ca = |name: &str| Cert::from_der(&der(&format!("ca-certs/{name}")), "CA").unwrap();
    let legacy = [ca("tpm_ek_root_1.cer")];
    let cas = [ca("gcp_ek_ak_ca_root.crt")];
    let inter = [
        ca("tpm_ek_intermediate_2.crt"),
        ca("tpm_ek_intermediate_3.crt"),
        ca("gcp_ek_ak_ca_intermediate_v3.crt"),
    ];
    for kind in ["ecc_enc", "ecc_sign", "rsa_enc", "rsa_sign"] {
        let pca = Cert::from_der(
            &pem(&format!("certificates/pca_tpm_{kind}_cert.pem")),
            "PCA",
        )
        .unwrap();
        let uca = Cert::from_der(
            &pem(&format!("certificates/uca_tpm_{kind}_cert.pem")),
            "UCA",
        )
        .unwrap();
        assert_eq!(
            build_chain(&pca, &inter, &cas).map(|c| c.len()),
            Some(3),
            "pca {kind}"
        );
        assert_eq!(
            build_chain(&uca, &inter, &legacy).map(|c| c.len()),
            Some(3),
            "uca {kind}"
        );
        // Not under the other hierarchy's root.
        assert!(build_chain(&pca, &inter, &legacy).is_none());
        assert!(build_chain(&uca, &inter, &cas).is_none());
    }
}

#[test]
fn a_nonce_of_another_session_is_refused() {
    assert_eq!(refused(NONCE9009, &[]), GcpRefusal::Nonce);
    assert_eq!(refused(NONCE9009, &[0x90, 0x08]), GcpRefusal::Nonce);
    assert_eq!(refused(NO_NONCE, &[0x90, 0x09]), GcpRefusal::Nonce);
    let checks = run_checks(NO_NONCE, None, &GcpRoots::google(), AT);
    assert!(confboot_attest::check::first_failure(&checks).is_some());
}

#[test]
fn an_ak_certificate_under_no_pinned_root_is_refused() {
    let ca = |name: &str| Cert::from_der(&der(&format!("ca-certs/{name}")), "CA").unwrap();
    let inter = vec![ca("tpm_ek_intermediate_2.crt")];
    // The other hierarchy's root only.
    let roots = GcpRoots::new(vec![ca("gcp_ek_ak_ca_root.crt")], inter.clone());
    assert_eq!(refused_by(NO_NONCE, &[], &roots, AT), GcpRefusal::Chain);
    // The right root without the intermediate.
    let roots = GcpRoots::new(vec![ca("tpm_ek_root_1.cer")], vec![]);
    assert_eq!(refused_by(NO_NONCE, &[], &roots, AT), GcpRefusal::Chain);
    // ... which the attestation may carry itself.
    let carried = edited(NO_NONCE, |a| {
        a.intermediate_certificates = vec![der("ca-certs/tpm_ek_intermediate_2.crt")]
    });
    assert!(verify(&carried, &[], &roots, AT).is_ok());
    // A root that rotates in beside another.
    let mut roots = GcpRoots::new(vec![ca("gcp_ek_ak_ca_root.crt")], inter);
    roots.add_root(ca("tpm_ek_root_1.cer"));
    assert!(verify(NO_NONCE, &[], &roots, AT).is_ok());
}

#[test]
fn an_ak_certificate_of_another_key_or_none_is_refused() {
    let other = edited(NO_NONCE, |a| {
        a.ak_certificate = pem("certificates/uca_tpm_rsa_sign_cert.pem")
    });
    assert_eq!(refused(&other, &[]), GcpRefusal::AkCertificate);
    let none = edited(NO_NONCE, |a| a.ak_certificate.clear());
    let e = verify(&none, &[], &GcpRoots::google(), AT).unwrap_err();
    assert_eq!(reason(&e), GcpRefusal::AkCertificate);
    assert!(e.to_string().contains("carries no AK certificate"), "{e}");
    let mut flipped = edited(NO_NONCE, |_| {});
    let cert = GcpAttestation::decode(NO_NONCE).unwrap().ak_certificate;
    let at = flipped.windows(cert.len()).position(|w| w == cert).unwrap();
    // The certificate's signature's last byte: the chain breaks.
    flipped[at + cert.len() - 1] ^= 1;
    assert_eq!(refused(&flipped, &[]), GcpRefusal::Chain);
}

#[test]
fn an_ak_that_is_no_restricted_signing_key_is_refused() {
    // TPMT_PUBLIC bytes 4..8 are the attributes; clear `restricted`.
    let unrestricted = edited(NO_NONCE, |a| a.ak_public[5] &= !0x01);
    assert_eq!(refused(&unrestricted, &[]), GcpRefusal::AkPublic);
    let ecc = edited(NO_NONCE, |a| a.ak_public[1] = 0x23);
    assert_eq!(refused(&ecc, &[]), GcpRefusal::AkPublic);
}

#[test]
fn the_certificates_are_checked_at_the_callers_time() {
    let roots = GcpRoots::google();
    // 2020-01-01, before the AK certificate; 2100-01-01, after it.
    assert_eq!(
        refused_by(NO_NONCE, &[], &roots, 1_577_836_800),
        GcpRefusal::NotYetValid
    );
    assert_eq!(
        refused_by(NO_NONCE, &[], &roots, 4_102_444_800),
        GcpRefusal::Expired
    );
    // Nothing expires before 2051: the real current time passes.
    assert!(verify(NO_NONCE, &[], &roots, confboot_util::time::unix_now()).is_ok());
}

#[test]
fn a_byte_flipped_in_a_quote_is_refused() {
    let sig = edited(NO_NONCE, |a| {
        let q = quote_of(a, TPM_ALG_SHA256);
        let last = q.signature.len() - 1;
        q.signature[last] ^= 1;
    });
    assert_eq!(refused(&sig, &[]), GcpRefusal::QuoteSignature);
    let attest = edited(NO_NONCE, |a| quote_of(a, TPM_ALG_SHA1).attest[40] ^= 1);
    assert_eq!(refused(&attest, &[]), GcpRefusal::QuoteSignature);
}

#[test]
fn a_pcr_value_that_is_not_the_quoted_one_is_refused() {
    let pcr = edited(NO_NONCE, |a| {
        let q = quote_of(a, TPM_ALG_SHA384);
        q.pcrs.as_mut().unwrap().values.get_mut(&15).unwrap()[0] ^= 1;
    });
    assert_eq!(refused(&pcr, &[]), GcpRefusal::PcrDigest);
    let missing = edited(NO_NONCE, |a| {
        quote_of(a, TPM_ALG_SHA256)
            .pcrs
            .as_mut()
            .unwrap()
            .values
            .remove(&23);
    });
    assert_eq!(refused(&missing, &[]), GcpRefusal::Quote);
    let no_sha256 = edited(NO_NONCE, |a| {
        a.quotes.retain(|q| q.pcrs.as_ref().unwrap().hash != 0x000b)
    });
    assert_eq!(refused(&no_sha256, &[]), GcpRefusal::Quote);
}

#[test]
fn an_event_log_that_does_not_replay_or_parse_is_refused() {
    let att = GcpAttestation::decode(NO_NONCE).unwrap();
    let log = confboot_tpm::event_log::EventLog::parse(&att.event_log).unwrap();
    let digest = log
        .events()
        .iter()
        .find(|e| e.pcr == 4)
        .unwrap()
        .sha256
        .unwrap();
    let tampered = edited(NO_NONCE, |a| {
        let at = a.event_log.windows(32).position(|w| w == digest).unwrap();
        a.event_log[at] ^= 1;
    });
    assert_eq!(refused(&tampered, &[]), GcpRefusal::EventLogReplay);
    let truncated = edited(NO_NONCE, |a| a.event_log.truncate(1000));
    assert_eq!(refused(&truncated, &[]), GcpRefusal::EventLog);
    let none = edited(NO_NONCE, |a| a.event_log.clear());
    assert_eq!(refused(&none, &[]), GcpRefusal::EventLog);
}

#[test]
fn bytes_that_are_no_attestation_are_refused() {
    assert_eq!(
        refused(b"not a protobuf \xff\xff\xff", &[]),
        GcpRefusal::Attestation
    );
    assert_eq!(refused(&[], &[]), GcpRefusal::Attestation);
    assert_eq!(refused(&NO_NONCE[..1000], &[]), GcpRefusal::Attestation);
}
