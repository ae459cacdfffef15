//! VtpmIssuer and VtpmValidator against a real swtpm (one per test).
//!
//! Each refusal test changes exactly one thing in otherwise valid evidence,
//! so it fails if the check it targets is removed.

use std::collections::BTreeMap;

use confboot_attest::{AttestationError, Detail, Issuer, MeasurementPolicy, Validator, Variant};
use confboot_proto::Message as _;
use confboot_proto::vtpm::{PcrValue, QuoteEvidence};
use confboot_tpm::event_log::synthetic_log;
use confboot_tpm::pcr_digest;
use confboot_tpm::structures::{self, Writer};
use confboot_tpm::swtpm::Swtpm;
use confboot_util::hex;
use confboot_vtpm::{
    AkTrust, MAX_AK_CERT_LEN, MAX_EVIDENCE_LEN, VtpmIssuer, VtpmRefusal, VtpmValidator,
    encode_evidence, issue_ak_certificate, quoted_pcrs,
};

/// The digest a bootstrapped node extends PCR 15 with: SHA-256 of its
/// cluster id (the mark of `confboot_cluster::mark`, which sits above this
/// crate and is tested there).
fn mark_digest(cluster_id: &[u8]) -> [u8; 32] {
    let mut out = [0u8; 32];
    out.copy_from_slice(ring::digest::digest(&ring::digest::SHA256, cluster_id).as_ref());
    out
}

/// Marks the TPM as a bootstrapped node of `cluster_id` does.
fn mark(tpm: &mut confboot_tpm::Tpm, cluster_id: &[u8]) -> Result<(), confboot_tpm::TpmError> {
    tpm.pcr_extend(15, &mark_digest(cluster_id))
}

/// PCR 15 of a node marked once on a fresh boot.
fn marked_pcr15(cluster_id: &[u8]) -> [u8; 32] {
    pcr_digest([&[0u8; 32][..], &mark_digest(cluster_id)[..]])
}

const EXTRA: [u8; 32] = [0x11; 32];

fn no_policy() -> MeasurementPolicy {
    MeasurementPolicy::new(BTreeMap::new())
}

fn started() -> (Swtpm, VtpmIssuer) {
    let swtpm = Swtpm::start().expect("swtpm starts");
    let issuer = VtpmIssuer::new(swtpm.connect().unwrap()).unwrap();
    (swtpm, issuer)
}

fn pinned(issuer: &VtpmIssuer) -> VtpmValidator {
    VtpmValidator::new(AkTrust::Pinned(vec![issuer.ak_public_key()]), no_policy())
}

fn decoded(evidence: &[u8]) -> QuoteEvidence {
    QuoteEvidence::decode(evidence).unwrap()
}

fn modified(evidence: &[u8], f: impl FnOnce(&mut QuoteEvidence)) -> Vec<u8> {
    let mut e = decoded(evidence);
    f(&mut e);
    e.encode_to_vec()
}

fn message(r: Result<impl std::fmt::Debug, AttestationError>) -> AttestationError {
    r.expect_err("evidence must be refused")
}

struct TestCa {
    issuer: rcgen::Issuer<'static, rcgen::KeyPair>,
    der: Vec<u8>,
}

fn test_ca(name: &str) -> TestCa {
    let key = rcgen::KeyPair::generate().unwrap();
    let params = ca_params(name, &[rcgen::KeyUsagePurpose::KeyCertSign]);
    let der = params.self_signed(&key).unwrap().der().to_vec();
    TestCa {
        issuer: rcgen::Issuer::new(params, key),
        der,
    }
}

fn ca_params(name: &str, usages: &[rcgen::KeyUsagePurpose]) -> rcgen::CertificateParams {
    let mut params = rcgen::CertificateParams::default();
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, name);
    params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    params.key_usages = usages.to_vec();
    params
}

/// A CA certificate for `name` issued by `parent` (an intermediate).
fn intermediate_ca(name: &str, parent: &TestCa, usages: &[rcgen::KeyUsagePurpose]) -> TestCa {
    let key = rcgen::KeyPair::generate().unwrap();
    let params = ca_params(name, usages);
    let der = params
        .signed_by(&key, &parent.issuer)
        .unwrap()
        .der()
        .to_vec();
    TestCa {
        issuer: rcgen::Issuer::new(params, key),
        der,
    }
}

#[test]
fn valid_quote_verifies_and_reports_all_pcrs() {
    let (_swtpm, issuer) = started();
    let evidence = issuer.issue(&EXTRA).unwrap();
    let pcrs = issuer.with_tpm(|t| t.pcr_read_all()).unwrap();
    // A policy that pins two real values, one warnOnly mismatch.
    let mut policy = no_policy();
    policy.set(0, pcrs[0].1.to_vec(), false);
    policy.set(15, vec![0; 32], false);
    policy.set(9, vec![0xee; 32], true);
    let validator = VtpmValidator::new(AkTrust::Pinned(vec![issuer.ak_public_key()]), policy);
    let attested = validator.validate(&evidence, &EXTRA).unwrap();
    assert_eq!(attested.variant, Variant::QemuVtpm);
    let expected: BTreeMap<u32, Vec<u8>> = pcrs.iter().map(|(i, v)| (*i, v.to_vec())).collect();
    assert_eq!(attested.measurements, expected);
    assert_eq!(validator.variant(), Variant::QemuVtpm);
    // The evidence carries what the design says.
    let e = decoded(&evidence);
    assert_eq!(e.ak_public, issuer.ak_public());
    assert_eq!(e.pcrs.len(), 24);
    assert!(
        e.ak_certificate.is_empty(),
        "no certificate provisioned in NV"
    );
}

#[test]
fn enforced_measurement_mismatch_is_refused() {
    let (_swtpm, issuer) = started();
    let evidence = issuer.issue(&EXTRA).unwrap();
    let mut policy = no_policy();
    policy.set(4, vec![0xaa; 32], false);
    let validator = VtpmValidator::new(AkTrust::Pinned(vec![issuer.ak_public_key()]), policy);
    assert_eq!(
        message(validator.validate(&evidence, &EXTRA)),
        AttestationError::Measurement {
            index: 4,
            expected: "aa".repeat(32),
            actual: "00".repeat(32),
            event: None,
        }
    );
}

#[test]
fn wrong_extra_data_is_refused() {
    let (_swtpm, issuer) = started();
    let evidence = issuer.issue(&EXTRA).unwrap();
    let err = message(pinned(&issuer).validate(&evidence, &[0x22; 32]));
    assert_eq!(
        err,
        AttestationError::Binding(Detail::with(
            &VtpmRefusal::Binding,
            format!(
                "quote qualifying data {} differs from the expected extra_data {}",
                "11".repeat(32),
                "22".repeat(32)
            )
        ))
    );
}

/// A replayed or misbound quote is refused before its signature is looked
/// at (a refusal that costs no ECDSA verification): with a broken signature
/// as well, the binding is what is reported.
#[test]
fn misbound_quote_is_refused_before_its_signature_is_verified() {
    let (_swtpm, issuer) = started();
    let evidence = issuer.issue(&EXTRA).unwrap();
    let sig_len = decoded(&evidence).signature.len();
    let forged = modified(&evidence, |e| e.signature[sig_len - 1] ^= 0x80);
    assert!(matches!(
        message(pinned(&issuer).validate(&forged, &[0x22; 32])),
        e @ AttestationError::Binding(_) if e.is(&VtpmRefusal::Binding)
    ));
    // Bound right, the broken signature is what refuses it.
    assert!(matches!(
        message(pinned(&issuer).validate(&forged, &EXTRA)),
        e @ AttestationError::Signature(_) if e.is(&VtpmRefusal::QuoteSignature)
    ));
}

#[test]
fn pcr_extended_after_the_quote_is_refused() {
    let swtpm = Swtpm::start().unwrap();
    let mut tpm = swtpm.connect().unwrap();
    let ak = tpm.create_ak().unwrap();
    let pcrs = quoted_pcrs();
    let quote = tpm.quote(&ak, &EXTRA, &pcrs).unwrap();
    let before = tpm.pcr_read_all().unwrap();
    // Sanity: the untouched evidence verifies.
    let point = structures::parse_ecc_public(&ak.public_area).unwrap().point;
    let validator = VtpmValidator::new(AkTrust::Pinned(vec![point]), no_policy());
    let good = encode_evidence(&quote, &before, &ak.public_area, None);
    validator.validate(&good, &EXTRA).unwrap();

    tpm.pcr_extend(10, &[0x33; 32]).unwrap();
    let after = tpm.pcr_read_all().unwrap();
    assert_ne!(before[10], after[10]);
    let stale = encode_evidence(&quote, &after, &ak.public_area, None);
    let err = message(validator.validate(&stale, &EXTRA));
    let AttestationError::Signature(d) = &err else {
        panic!("wrong variant: {err:?}")
    };
    assert!(d.is(&VtpmRefusal::PcrDigest), "{d}");
    let m = d.text();
    assert!(
        m.contains(&hex::encode(&pcr_digest(
            before.iter().map(|(_, v)| &v[..])
        ))),
        "{m}"
    );
}

#[test]
fn evidence_carrying_fewer_pcrs_than_quoted_is_refused() {
    let (_swtpm, issuer) = started();
    let evidence = issuer.issue(&EXTRA).unwrap();
    let fewer = modified(&evidence, |e| {
        e.pcrs.pop();
    });
    let err = message(pinned(&issuer).validate(&fewer, &EXTRA));
    let AttestationError::Signature(d) = &err else {
        panic!("wrong variant: {err:?}")
    };
    assert!(d.is(&VtpmRefusal::PcrSelection), "{d}");
}

#[test]
fn marked_node_is_refused_at_join_and_accepted_when_allowed() {
    let (_swtpm, issuer) = started();
    // Unmarked: accepted.
    pinned(&issuer)
        .validate(&issuer.issue(&EXTRA).unwrap(), &EXTRA)
        .unwrap();
    issuer.with_tpm(|t| mark(t, b"cluster-id-1")).unwrap();
    let evidence = issuer.issue(&EXTRA).unwrap();
    let err = message(pinned(&issuer).validate(&evidence, &EXTRA));
    assert_eq!(
        err,
        AttestationError::Policy(Detail::with(
            &VtpmRefusal::ClusterMarked,
            format!(
                "PCR 15 is {}, not all-zero: the node is already bootstrapped (marked with a cluster id)",
                hex::encode(&marked_pcr15(b"cluster-id-1"))
            )
        ))
    );
    // Verifying a running node (not a join) may allow it.
    let attested = pinned(&issuer)
        .require_unmarked(false)
        .validate(&evidence, &EXTRA)
        .unwrap();
    assert_eq!(
        attested.measurements[&15],
        marked_pcr15(b"cluster-id-1").to_vec()
    );
}

#[test]
fn flipped_byte_in_tpms_attest_is_refused() {
    let (_swtpm, issuer) = started();
    let evidence = issuer.issue(&EXTRA).unwrap();
    let attest_len = decoded(&evidence).attest.len();
    let validator = pinned(&issuer);
    // Every single-byte flip is refused.
    for i in 0..attest_len {
        let bad = modified(&evidence, |e| e.attest[i] ^= 0x01);
        assert!(
            validator.validate(&bad, &EXTRA).is_err(),
            "flip at {i} accepted"
        );
    }
    // A flip in the clock (offset 4+2+2+34+2+32 = 76) breaks only the signature.
    let bad = modified(&evidence, |e| e.attest[76] ^= 0x01);
    assert_eq!(
        message(validator.validate(&bad, &EXTRA)),
        AttestationError::Signature(Detail::with(
            &VtpmRefusal::QuoteSignature,
            "the quote's ECDSA signature does not verify with the AK in the evidence"
        ))
    );
    // A flip in the magic is found by the parser.
    let bad = modified(&evidence, |e| e.attest[0] ^= 0x01);
    let err = message(validator.validate(&bad, &EXTRA));
    assert!(
        matches!(&err, AttestationError::Decode(d)
            if d.is(&VtpmRefusal::Quote) && d.text().contains("magic 0xfe544347")),
        "{err:?}"
    );
}

#[test]
fn flipped_signature_byte_is_refused() {
    let (_swtpm, issuer) = started();
    let evidence = issuer.issue(&EXTRA).unwrap();
    let sig_len = decoded(&evidence).signature.len();
    // Last byte: inside s.
    let bad = modified(&evidence, |e| e.signature[sig_len - 1] ^= 0x80);
    assert_eq!(
        message(pinned(&issuer).validate(&bad, &EXTRA)),
        AttestationError::Signature(Detail::with(
            &VtpmRefusal::QuoteSignature,
            "the quote's ECDSA signature does not verify with the AK in the evidence"
        ))
    );
}

#[test]
fn ak_outside_the_pinned_list_is_refused() {
    let (_swtpm, issuer) = started();
    let (_other_swtpm, other) = started();
    let evidence = issuer.issue(&EXTRA).unwrap();
    assert_ne!(issuer.ak_public_key(), other.ak_public_key());
    let validator = VtpmValidator::new(AkTrust::Pinned(vec![other.ak_public_key()]), no_policy());
    assert_eq!(
        message(validator.validate(&evidence, &EXTRA)),
        AttestationError::Trust(Detail::with(
            &VtpmRefusal::AkNotPinned,
            format!(
                "AK {} is not among the 1 pinned AK keys",
                hex::encode(&issuer.ak_public_key())
            )
        ))
    );
}

#[test]
fn ak_certificate_from_a_configured_ca_is_trusted() {
    let (_swtpm, issuer) = started();
    let ca = test_ca("Test AK CA");
    let cert = issue_ak_certificate(&issuer.ak_public_key(), "node-1 AK", &ca.issuer).unwrap();
    let evidence = modified(&issuer.issue(&EXTRA).unwrap(), |e| e.ak_certificate = cert);
    let validator =
        VtpmValidator::new(AkTrust::CertificateRoots(vec![ca.der.clone()]), no_policy());
    validator.validate(&evidence, &EXTRA).unwrap();
}

#[test]
fn ak_certificate_from_another_ca_is_refused() {
    let (_swtpm, issuer) = started();
    let trusted = test_ca("Trusted AK CA");
    let other = test_ca("Other AK CA");
    let validator = VtpmValidator::new(
        AkTrust::CertificateRoots(vec![trusted.der.clone()]),
        no_policy(),
    );
    let evidence = issuer.issue(&EXTRA).unwrap();

    let cert = issue_ak_certificate(&issuer.ak_public_key(), "node-1 AK", &other.issuer).unwrap();
    let bad = modified(&evidence, |e| e.ak_certificate = cert);
    assert_eq!(
        message(validator.validate(&bad, &EXTRA)),
        AttestationError::Trust(Detail::with(
            &VtpmRefusal::AkChain,
            "AK certificate (issuer \"CN=Other AK CA\") is not signed by any of the 1 configured CAs"
        ))
    );

    // Another CA that copies the trusted CA's name: the signature decides.
    let impostor = test_ca("Trusted AK CA");
    let cert =
        issue_ak_certificate(&issuer.ak_public_key(), "node-1 AK", &impostor.issuer).unwrap();
    let bad = modified(&evidence, |e| e.ak_certificate = cert);
    assert_eq!(
        message(validator.validate(&bad, &EXTRA)),
        AttestationError::Trust(Detail::with(
            &VtpmRefusal::AkChain,
            "AK certificate (issuer \"CN=Trusted AK CA\") is not signed by any of the 1 configured CAs (CN=Trusted AK CA: signature does not verify)"
        ))
    );

    // No certificate at all.
    assert_eq!(
        message(validator.validate(&evidence, &EXTRA)),
        AttestationError::Trust(Detail::with(
            &VtpmRefusal::NoAkCertificate,
            "evidence carries no AK certificate, and the policy requires one"
        ))
    );
}

#[test]
fn ak_certificate_for_another_key_is_refused() {
    let (_swtpm, issuer) = started();
    let (_other_swtpm, other) = started();
    let ca = test_ca("Test AK CA");
    let cert = issue_ak_certificate(&other.ak_public_key(), "node-2 AK", &ca.issuer).unwrap();
    let evidence = modified(&issuer.issue(&EXTRA).unwrap(), |e| e.ak_certificate = cert);
    let validator =
        VtpmValidator::new(AkTrust::CertificateRoots(vec![ca.der.clone()]), no_policy());
    assert_eq!(
        message(validator.validate(&evidence, &EXTRA)),
        AttestationError::Trust(Detail::with(
            &VtpmRefusal::AkCertificateKey,
            format!(
                "AK certificate is for another key: certificate key {}, AK {}",
                hex::encode(&other.ak_public_key()),
                hex::encode(&issuer.ak_public_key())
            )
        ))
    );
}

/// A software key can sign anything that looks like a quote: only the AK's
/// restricted attribute (checked even under insecure-any-ak) and trust stop it.
#[test]
fn software_signed_quote_from_unrestricted_key_is_refused() {
    use ring::rand::SystemRandom;
    use ring::signature::{ECDSA_P256_SHA256_FIXED_SIGNING, EcdsaKeyPair, KeyPair as _};
    let rng = SystemRandom::new();
    let pkcs8 = EcdsaKeyPair::generate_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, &rng).unwrap();
    let key =
        EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, pkcs8.as_ref(), &rng).unwrap();
    let point = key.public_key().as_ref().to_vec();
    let public_area = |attributes: u32| {
        let mut w = Writer::default();
        w.u16(structures::TPM_ALG_ECC)
            .u16(structures::TPM_ALG_SHA256)
            .u32(attributes)
            .tpm2b(&[])
            .u16(structures::TPM_ALG_NULL)
            .u16(structures::TPM_ALG_ECDSA)
            .u16(structures::TPM_ALG_SHA256)
            .u16(structures::TPM_ECC_NIST_P256)
            .u16(structures::TPM_ALG_NULL)
            .tpm2b(&point[1..33])
            .tpm2b(&point[33..]);
        w.bytes
    };
    let pcr_values: Vec<(u32, [u8; 32])> = (0..24).map(|i| (i, [0u8; 32])).collect();
    // A quote as a TPM would make it for the key with `public` (its
    // Qualified Name as a primary of the owner hierarchy), signed in software.
    let quote_for = |public: &[u8], safe: bool| {
        let mut w = Writer::default();
        w.u32(structures::TPM_GENERATED_VALUE)
            .u16(structures::TPM_ST_ATTEST_QUOTE)
            .tpm2b(&confboot_tpm::primary_qualified_name(
                confboot_tpm::TPM_RH_OWNER,
                public,
            ))
            .tpm2b(&EXTRA)
            .raw(&[0; 16])
            .u8(u8::from(safe))
            .raw(&[0; 8])
            .u32(1)
            .u16(structures::TPM_ALG_SHA256)
            .u8(3)
            .raw(&[0xff; 3])
            .tpm2b(&pcr_digest(pcr_values.iter().map(|(_, v)| &v[..])));
        let attest = w.bytes;
        let sig = key.sign(&rng, &attest).unwrap();
        confboot_tpm::Quote {
            attest,
            signature: structures::ecdsa_signature_bytes(&sig.as_ref()[..32], &sig.as_ref()[32..]),
        }
    };
    let any = VtpmValidator::new(AkTrust::InsecureAnyAk, no_policy());
    let sign_only =
        structures::object_attributes::SIGN | structures::object_attributes::USER_WITH_AUTH;
    let forged = encode_evidence(
        &quote_for(&public_area(sign_only), true),
        &pcr_values,
        &public_area(sign_only),
        None,
    );
    assert_eq!(
        message(any.validate(&forged, &EXTRA)),
        AttestationError::Trust(Detail::with(
            &VtpmRefusal::AkAttributes,
            format!(
                "the AK's attributes {sign_only:#010x} lack 0x00050022 (restricted signing key created in the TPM)"
            )
        ))
    );
    // The same forgery claiming AK attributes passes insecure-any-ak (that is
    // what "insecure" means) but not a pinned list.
    let ak_area = public_area(structures::object_attributes::AK);
    let claimed = encode_evidence(&quote_for(&ak_area, true), &pcr_values, &ak_area, None);
    any.validate(&claimed, &EXTRA).unwrap();
    // A clock that is not safe (an unorderly shutdown before this boot) is
    // no reason to refuse: freshness is the nonce's, not the clock's.
    let unsafe_clock = encode_evidence(&quote_for(&ak_area, false), &pcr_values, &ak_area, None);
    any.validate(&unsafe_clock, &EXTRA).unwrap();
    let other_point = {
        let mut p = point.clone();
        p[64] ^= 1;
        p
    };
    let pinned = VtpmValidator::new(AkTrust::Pinned(vec![other_point]), no_policy());
    assert!(matches!(
        pinned.validate(&claimed, &EXTRA),
        Err(e @ AttestationError::Trust(_)) if e.is(&VtpmRefusal::AkNotPinned)
    ));
}

#[test]
fn missing_or_oversized_fields_are_refused() {
    let (_swtpm, issuer) = started();
    let evidence = issuer.issue(&EXTRA).unwrap();
    let validator = pinned(&issuer);
    let decode = |bad: Vec<u8>| match validator.validate(&bad, &EXTRA) {
        Err(AttestationError::Decode(d)) => d,
        other => panic!("want a Decode error, got {other:?}"),
    };
    let cases: Vec<(Vec<u8>, &str)> = vec![
        (
            modified(&evidence, |e| e.attest.clear()),
            "quote (TPMS_ATTEST) is missing",
        ),
        (
            modified(&evidence, |e| e.signature.clear()),
            "quote signature is missing",
        ),
        (
            modified(&evidence, |e| e.ak_public.clear()),
            "AK public area is missing",
        ),
        (
            modified(&evidence, |e| e.pcrs.clear()),
            "evidence carries 0 PCR values, want 1 to 24",
        ),
        (
            modified(&evidence, |e| e.attest.resize(1025, 0)),
            "quote (TPMS_ATTEST) has 1025 bytes, at most 1024 allowed",
        ),
        (
            modified(&evidence, |e| e.signature.resize(513, 0)),
            "quote signature has 513 bytes, at most 512 allowed",
        ),
        (
            modified(&evidence, |e| e.ak_public.resize(1025, 0)),
            "AK public area has 1025 bytes, at most 1024 allowed",
        ),
        (
            modified(&evidence, |e| {
                e.ak_certificate = vec![0x30; MAX_AK_CERT_LEN + 1]
            }),
            "AK certificate has 8193 bytes, at most 8192 allowed",
        ),
        (
            modified(&evidence, |e| {
                e.pcrs.push(PcrValue {
                    index: 23,
                    digest: vec![0; 32],
                })
            }),
            "evidence carries 25 PCR values, want 1 to 24",
        ),
        (
            modified(&evidence, |e| e.pcrs[3].digest.pop().map(|_| ()).unwrap()),
            "PCR 3 value has 31 bytes, want 32",
        ),
        (
            modified(&evidence, |e| e.pcrs[23].index = 24),
            "PCR index 24 out of range",
        ),
        (
            modified(&evidence, |e| e.pcrs.swap(1, 2)),
            "PCR 1 follows PCR 2: values must be ascending and unique",
        ),
        (
            vec![0u8; MAX_EVIDENCE_LEN + 1],
            "evidence has 49153 bytes, at most 49152 allowed",
        ),
    ];
    for (bad, want) in cases {
        assert_eq!(decode(bad), Detail::with(&VtpmRefusal::Evidence, want));
    }
    // Trailing bytes after the TPMS_ATTEST are refused by the parser.
    let d = decode(modified(&evidence, |e| e.attest.push(0)));
    assert!(
        d.is(&VtpmRefusal::Quote) && d.text().contains("trailing"),
        "{d}"
    );
    // Not a protobuf message at all.
    let d = decode(vec![0xff; 10]);
    assert!(
        d.is(&VtpmRefusal::Evidence) && d.text().starts_with("not a vTPM QuoteEvidence message"),
        "{d}"
    );
}

/// A small deterministic PRNG (xorshift64*), so failures reproduce.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
}

#[test]
fn decoding_random_or_truncated_evidence_never_panics() {
    let (_swtpm, issuer) = started();
    let ca = test_ca("Fuzz CA");
    let cert = issue_ak_certificate(&issuer.ak_public_key(), "fuzz AK", &ca.issuer).unwrap();
    let evidence = modified(&issuer.issue(&EXTRA).unwrap(), |e| e.ak_certificate = cert);
    let validators = [
        pinned(&issuer),
        VtpmValidator::new(AkTrust::CertificateRoots(vec![ca.der.clone()]), no_policy()),
        VtpmValidator::new(AkTrust::InsecureAnyAk, no_policy()),
    ];
    for v in &validators {
        v.validate(&evidence, &EXTRA).unwrap();
    }
    // Every truncation is refused when the certificate (the last field) is
    // required; without it a cut exactly before the certificate leaves valid
    // evidence, so the other validators only must not panic.
    for cut in 0..evidence.len() {
        assert!(
            validators[1].validate(&evidence[..cut], &EXTRA).is_err(),
            "cut at {cut}"
        );
        let _ = validators[0].validate(&evidence[..cut], &EXTRA);
        let _ = validators[2].validate(&evidence[..cut], &EXTRA);
    }
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    // Random bytes, and valid evidence with random bytes changed or inserted.
    for round in 0..3000 {
        let input = match round % 3 {
            0 => {
                let n = (rng.next() % 4096) as usize;
                (0..n).map(|_| rng.next() as u8).collect::<Vec<u8>>()
            }
            1 => {
                let mut e = evidence.clone();
                for _ in 0..=(rng.next() % 8) {
                    let i = (rng.next() as usize) % e.len();
                    e[i] = rng.next() as u8;
                }
                e
            }
            _ => {
                let mut e = evidence.clone();
                let i = (rng.next() as usize) % e.len();
                let junk: Vec<u8> = (0..rng.next() % 16).map(|_| rng.next() as u8).collect();
                e.splice(i..i, junk);
                e
            }
        };
        for v in &validators {
            let _ = v.validate(&input, &EXTRA);
        }
    }
    // Inner structures: every truncation of each field is refused, not a panic.
    let e = decoded(&evidence);
    for field in 0..4 {
        let len = [
            e.attest.len(),
            e.signature.len(),
            e.ak_public.len(),
            e.ak_certificate.len(),
        ][field];
        for cut in 1..len {
            let bad = modified(&evidence, |e| match field {
                0 => e.attest.truncate(cut),
                1 => e.signature.truncate(cut),
                2 => e.ak_public.truncate(cut),
                _ => e.ak_certificate.truncate(cut),
            });
            assert!(
                validators[1].validate(&bad, &EXTRA).is_err(),
                "field {field} cut at {cut}"
            );
        }
    }
}

#[test]
fn evidence_stays_consistent_when_pcrs_change_between_quotes() {
    // The issuer reuses the last PCR values while the quoted digest matches
    // them; an extend between two quotes must make it read them again.
    let (_swtpm, issuer) = started();
    let validator = pinned(&issuer);
    let extra = [7u8; 32];
    let first = validator
        .validate(&issuer.issue(&extra).unwrap(), &extra)
        .unwrap();
    issuer.with_tpm(|t| t.pcr_extend(9, &[0x99; 32])).unwrap();
    let second = validator
        .validate(&issuer.issue(&extra).unwrap(), &extra)
        .unwrap();
    assert_ne!(
        first.measurements[&9], second.measurements[&9],
        "the new PCR 9 is reported"
    );
    let third = validator
        .validate(&issuer.issue(&extra).unwrap(), &extra)
        .unwrap();
    assert_eq!(second.measurements, third.measurements);
}

/// The quote names its signer (qualifiedSigner): a public area with the
/// AK's point but other attributes than the TPM's key is not that signer.
#[test]
fn an_ak_public_area_that_is_not_the_quotes_signer_is_refused() {
    let (_swtpm, issuer) = started();
    let evidence = issuer.issue(&EXTRA).unwrap();
    let validator = pinned(&issuer);
    validator.validate(&evidence, &EXTRA).unwrap();
    let altered = modified(&evidence, |e| {
        // objectAttributes follow type and nameAlg: add noDA (bit 10).
        let attributes = u32::from_be_bytes(e.ak_public[4..8].try_into().unwrap()) ^ 0x400;
        e.ak_public[4..8].copy_from_slice(&attributes.to_be_bytes());
    });
    match validator.validate(&altered, &EXTRA) {
        Err(e @ AttestationError::Signature(_)) => assert!(e.is(&VtpmRefusal::Signer), "{e}"),
        other => panic!("{other:?}"),
    }
}

#[test]
fn an_ak_certificate_chains_through_intermediates_to_a_root_that_signs_certificates() {
    use rcgen::KeyUsagePurpose::{DigitalSignature, KeyCertSign};
    let (_swtpm, issuer) = started();
    let evidence = issuer.issue(&EXTRA).unwrap();
    let root = test_ca("AK Root CA");
    let intermediate = intermediate_ca("AK Issuing CA 01", &root, &[KeyCertSign]);
    let cert =
        issue_ak_certificate(&issuer.ak_public_key(), "node-1 AK", &intermediate.issuer).unwrap();
    let with_cert = modified(&evidence, |e| e.ak_certificate = cert.clone());
    let trusting =
        |cas: Vec<Vec<u8>>| VtpmValidator::new(AkTrust::CertificateRoots(cas), no_policy());

    // Root and intermediate configured: the chain is walked to the root.
    trusting(vec![root.der.clone(), intermediate.der.clone()])
        .validate(&with_cert, &EXTRA)
        .unwrap();
    // The intermediate alone is no root: nothing it signs is trusted.
    match trusting(vec![intermediate.der.clone()]).validate(&with_cert, &EXTRA) {
        Err(AttestationError::Trust(d)) => assert!(
            d.is(&VtpmRefusal::AkChain)
                && d.text().contains("intermediate CA \"CN=AK Issuing CA 01\""),
            "{d}"
        ),
        other => panic!("{other:?}"),
    }
    // A CA certificate without keyCertSign issues nothing.
    let signer_only = intermediate_ca("AK Issuing CA 02", &root, &[DigitalSignature]);
    let cert =
        issue_ak_certificate(&issuer.ak_public_key(), "node-1 AK", &signer_only.issuer).unwrap();
    let bad = modified(&evidence, |e| e.ak_certificate = cert);
    match trusting(vec![root.der.clone(), signer_only.der.clone()]).validate(&bad, &EXTRA) {
        Err(AttestationError::Trust(d)) => assert!(
            d.is(&VtpmRefusal::AkChain) && d.text().contains("keyCertSign"),
            "{d}"
        ),
        other => panic!("{other:?}"),
    }
    // Nor does a root that is not a CA with keyCertSign.
    let key = rcgen::KeyPair::generate().unwrap();
    let plain_params = ca_params("Plain Root", &[]);
    let plain_der = plain_params.self_signed(&key).unwrap().der().to_vec();
    let plain = TestCa {
        issuer: rcgen::Issuer::new(plain_params, key),
        der: plain_der,
    };
    let cert = issue_ak_certificate(&issuer.ak_public_key(), "node-1 AK", &plain.issuer).unwrap();
    let bad = modified(&evidence, |e| e.ak_certificate = cert);
    match trusting(vec![plain.der.clone()]).validate(&bad, &EXTRA) {
        Err(AttestationError::Trust(d)) => assert!(
            d.is(&VtpmRefusal::AkChain) && d.text().contains("keyCertSign"),
            "{d}"
        ),
        other => panic!("{other:?}"),
    }
}

fn sha256(data: &[u8]) -> [u8; 32] {
    ring::digest::digest(&ring::digest::SHA256, data)
        .as_ref()
        .try_into()
        .unwrap()
}

/// A TPM measured as the boot of `events` would measure it, and an issuer
/// that sends their log.
fn measured_by(events: &[(u32, u32, &[u8])]) -> (Swtpm, VtpmIssuer, Vec<u8>) {
    let swtpm = Swtpm::start().expect("swtpm starts");
    let mut tpm = swtpm.connect().unwrap();
    let log = synthetic_log(events);
    confboot_tpm::event_log::EventLog::parse(&log)
        .unwrap()
        .extend_into(&mut tpm)
        .unwrap();
    let issuer = VtpmIssuer::new(tpm)
        .unwrap()
        .with_event_log(log.clone())
        .unwrap();
    (swtpm, issuer, log)
}

const BOOT: [(u32, u32, &[u8]); 3] = [
    (4, 0x8000_0003, b"the kernel"),
    (9, 0x6, b"LOADED_IMAGE::LoadOptions\0"),
    (9, 0x6, b"Linux initrd\0"),
];

#[test]
fn an_event_log_is_accepted_only_when_it_replays_to_the_quoted_pcrs() {
    let (_swtpm, issuer, log) = measured_by(&BOOT);
    let v = pinned(&issuer);
    let evidence = issuer.issue(&EXTRA).unwrap();
    assert_eq!(decoded(&evidence).event_log, log, "the log travels");
    v.validate(&evidence, &EXTRA).expect("a log that replays");

    // The host swaps the log for one that claims another initrd: it no
    // longer replays to the quoted PCR 9.
    let other = synthetic_log(&[BOOT[0], BOOT[1], (9, 0x6, b"another initrd\0")]);
    let err = message(v.validate(&modified(&evidence, |e| e.event_log = other), &EXTRA));
    assert!(
        matches!(&err, AttestationError::EventLog(d)
            if d.is(&VtpmRefusal::EventLogReplay) && d.text().contains("PCR 9")),
        "{err}"
    );
    // A log that leaves an event out, or adds one, does not replay either.
    let short = synthetic_log(&BOOT[..2]);
    assert!(matches!(
        message(v.validate(&modified(&evidence, |e| e.event_log = short), &EXTRA)),
        e @ AttestationError::EventLog(_) if e.is(&VtpmRefusal::EventLogReplay)
    ));
    let extra = synthetic_log(&[BOOT[0], BOOT[1], BOOT[2], (7, 0x4, b"sep")]);
    assert!(matches!(
        message(v.validate(&modified(&evidence, |e| e.event_log = extra), &EXTRA)),
        e @ AttestationError::EventLog(_) if e.is(&VtpmRefusal::EventLogReplay)
    ));
    // Garbage and oversized logs are refused with the reason.
    let err = message(v.validate(&modified(&evidence, |e| e.event_log = vec![1; 100]), &EXTRA));
    assert!(
        matches!(&err, AttestationError::EventLog(d)
            if d.is(&VtpmRefusal::EventLogFormat) && d.text().contains("crypto-agile")),
        "{err}"
    );
    let huge = vec![0; confboot_vtpm::MAX_EVIDENCE_EVENT_LOG_LEN + 1];
    assert!(matches!(
        message(v.validate(&modified(&evidence, |e| e.event_log = huge), &EXTRA)),
        AttestationError::Decode(d) if d.is(&VtpmRefusal::Evidence) && d.text().contains("event log")
    ));
    // Without a log the quote still verifies: the log only explains.
    v.validate(&modified(&evidence, |e| e.event_log.clear()), &EXTRA)
        .expect("no log");
}

#[test]
fn an_enforced_pcr_that_differs_is_explained_by_the_first_event_that_differs() {
    use confboot_tpm::event_log::{EventList, EventLog};
    let (_swtpm, issuer, _) = measured_by(&BOOT);
    // What the node should have booted: another initrd.
    let mut expected = EventLog::parse(&synthetic_log(&BOOT))
        .unwrap()
        .to_event_list();
    expected.events[2].sha256 = sha256(b"the initrd that should have booted");
    let expected = EventList::from_json(&expected.to_json()).unwrap();
    let mut policy = MeasurementPolicy::default();
    for (pcr, value) in expected.replay() {
        policy.set(pcr, value.to_vec(), false);
    }
    let v = VtpmValidator::new(AkTrust::Pinned(vec![issuer.ak_public_key()]), policy)
        .expected_events(expected);
    let evidence = issuer.issue(&EXTRA).unwrap();
    match message(v.validate(&evidence, &EXTRA)) {
        AttestationError::Measurement {
            index: 9,
            event: Some(event),
            ..
        } => {
            assert!(
                event.starts_with("PCR 9, event 2 (Linux initrd): sha256 ")
                    && event.contains(" expected "),
                "{event}"
            );
        }
        other => panic!("want PCR 9 explained, got {other}"),
    }
    // Without a log in the evidence the mismatch is still refused, unexplained.
    assert!(matches!(
        message(v.validate(&modified(&evidence, |e| e.event_log.clear()), &EXTRA)),
        AttestationError::Measurement {
            index: 9,
            event: None,
            ..
        }
    ));
}

#[test]
fn an_issuer_reconnects_to_a_tpm_that_restarted_under_it() {
    let mut swtpm = Swtpm::start().unwrap();
    let addr = swtpm.addr();
    let reopen = move || confboot_tpm::Tpm::connect_tcp(addr);
    let issuer = VtpmIssuer::new(reopen().unwrap())
        .unwrap()
        .reconnecting(Box::new(reopen));
    let ak = issuer.ak_public_key();
    issuer.issue(&[1; 32]).unwrap();
    // Restarted with its state (PCRs and all), then reset (PCRs cleared,
    // the transient AK gone): both times the next quote is served, with
    // the same key, on a new connection.
    for keep in [true, false] {
        issuer.with_tpm(|t| mark(t, b"cluster")).unwrap();
        swtpm.stop(keep).unwrap();
        assert!(issuer.issue(&[2; 32]).is_err(), "the TPM is away");
        swtpm.start_again().unwrap();
        issuer.issue(&[3; 32]).unwrap();
        assert_eq!(issuer.ak_public_key(), ak);
        let pcr15 = issuer.with_tpm(|t| t.pcr_read(&[15])).unwrap()[0].1;
        assert_eq!(pcr15 != [0; 32], keep, "PCR 15 kept: {keep}");
    }
}
