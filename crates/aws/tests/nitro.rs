//! The recorded NitroTPM evidence (`testdata/`, see its PROVENANCE.md)
//! verifies at the time it was made, and each mutation of its provenance
//! table, and each byte flipped in a signed part, is refused by name.

use std::collections::BTreeMap;

use confboot_attest::AttestationError;
use confboot_attest::check::CheckOutcome;
use confboot_aws::evidence::{TPM_ALG_SHA256, TPM_ALG_SHA384};
use confboot_aws::verify::verify;
use confboot_aws::{
    AwsRefusal, NitroEvidence, NitroRoots, NsmDocument, PcrBank, check, run_checks,
};

const FIXTURE: &str = include_str!("../testdata/test-nitro-fixture.json");
/// 2026-02-03T11:00:00Z, inside the leaf's three hours.
const AT: i64 = 1_770_116_400;
const NONCE: &str = "230af3f7c0ec43ccf99a4cab47ac61469a36ea74b1e79740fdf8ccfc8f56161a";

fn evidence() -> NitroEvidence {
    NitroEvidence::from_json(FIXTURE).unwrap()
}

fn nonce() -> Vec<u8> {
    confboot_util::hex::decode(NONCE).unwrap()
}

fn reason(e: &AttestationError) -> AwsRefusal {
    *e.detail()
        .and_then(|d| d.reason::<AwsRefusal>())
        .unwrap_or_else(|| panic!("no AWS reason in {e}"))
}

/// The reason the evidence is refused for (the first failing check).
fn refused(evidence: &NitroEvidence, nonce: &[u8], at: i64) -> AwsRefusal {
    let e = verify(evidence, nonce, &NitroRoots::aws(), at).expect_err("must be refused");
    reason(&e)
}

/// The reasons of every failing check.
fn failing(evidence: &NitroEvidence, nonce: &[u8], at: i64) -> Vec<AwsRefusal> {
    run_checks(evidence, Some(nonce), &NitroRoots::aws(), at)
        .iter()
        .filter_map(|c| match &c.outcome {
            CheckOutcome::Failed(e) => Some(reason(e)),
            _ => None,
        })
        .collect()
}

/// Flips the last byte of the first occurrence of `needle` in `hay`.
fn flip_in(hay: &mut [u8], needle: &[u8]) {
    let at = hay
        .windows(needle.len())
        .position(|w| w == needle)
        .expect("needle present");
    hay[at + needle.len() - 1] ^= 0x01;
}

fn document(evidence: &NitroEvidence) -> NsmDocument {
    let cose = confboot_aws::CoseSign1::parse(&evidence.document).unwrap();
    NsmDocument::parse(cose.payload).unwrap()
}

#[test]
fn the_recorded_evidence_verifies_at_the_time_it_was_made() {
    let e = evidence();
    let checks = run_checks(&e, Some(&nonce()), &NitroRoots::aws(), AT);
    for c in &checks {
        assert!(matches!(c.outcome, CheckOutcome::Passed(_)), "{c}");
    }
    assert_eq!(checks.len(), 13);
    let v = verify(&e, &nonce(), &NitroRoots::aws(), AT).unwrap();
    assert_eq!(v.module_id, "i-01cfb383223e42522-tpm0000000000000000");
    assert_eq!(v.timestamp_ms, 1_770_113_522_437);
    assert_eq!(v.pcrs.len(), 24);
    assert_eq!(
        confboot_util::hex::encode(&v.pcrs[&0]),
        "6e901b16932f6e036747d7a57696e4a2cc864008ebc016826ca1d7bd42ab5ac8286ccf49cde6c0284cbc4b63d978a2ec"
    );
    assert_eq!(v.pcrs[&17], vec![0xff; 48]);
    // The leaf's end: 2026-02-03T13:12:02Z.
    assert_eq!(v.chain_not_after, 1_770_124_322);
    let doc = document(&e);
    assert_eq!(doc.cabundle.len(), 4);
    assert_eq!(doc.user_data, None);
}

#[test]
fn the_pinned_root_is_the_published_one() {
    let roots = NitroRoots::aws();
    let der = &roots.ders()[0];
    let fingerprint = ring::digest::digest(&ring::digest::SHA256, der);
    assert_eq!(
        confboot_util::hex::encode(fingerprint.as_ref()),
        "641a0321a3e244efe456463195d606317ed7cdcc3c1756e09893f3c68f79bb5b"
    );
}

#[test]
fn at_the_real_current_time_the_chain_has_expired() {
    let now = confboot_util::time::unix_now();
    assert_eq!(refused(&evidence(), &nonce(), now), AwsRefusal::Expired);
}

#[test]
fn before_and_long_after_the_chain_is_refused() {
    // 2020-01-01 and 2100-01-01, as the source's tests.
    assert_eq!(
        refused(&evidence(), &nonce(), 1_577_836_800),
        AwsRefusal::NotYetValid
    );
    assert_eq!(
        refused(&evidence(), &nonce(), 4_102_444_800),
        AwsRefusal::Expired
    );
    // One second past the leaf's end.
    assert_eq!(
        refused(&evidence(), &nonce(), 1_770_124_323),
        AwsRefusal::Expired
    );
}

#[test]
fn a_tampered_attestation_key_is_refused() {
    let mut e = evidence();
    e.ak.0[5] ^= 0x01;
    assert_eq!(refused(&e, &nonce(), AT), AwsRefusal::QuoteSignature);
    assert!(failing(&e, &nonce(), AT).contains(&AwsRefusal::AttestationKey));
}

#[test]
fn a_nonce_of_another_length_is_refused() {
    assert_eq!(
        refused(&evidence(), &[0xde, 0xad, 0xbe, 0xef], AT),
        AwsRefusal::NonceLength
    );
}

#[test]
fn a_nonce_of_another_session_is_refused() {
    let mut other = nonce();
    other[31] ^= 0x01;
    assert_eq!(refused(&evidence(), &other, AT), AwsRefusal::Nonce);
    // Without a nonce, the verdict fails closed.
    let checks = run_checks(&evidence(), None, &NitroRoots::aws(), AT);
    assert!(confboot_attest::check::first_failure(&checks).is_some());
}

#[test]
fn a_tampered_pcr_is_refused() {
    let mut e = evidence();
    e.banks[0]
        .values
        .insert(0, [0xde, 0xad, 0xbe, 0xef].repeat(12));
    assert_eq!(refused(&e, &nonce(), AT), AwsRefusal::PcrDigest);
    assert!(failing(&e, &nonce(), AT).contains(&AwsRefusal::NitroPcrs));
}

#[test]
fn a_tampered_quote_signature_is_refused() {
    let mut e = evidence();
    let last = e.quote_signature.len() - 1;
    e.quote_signature[last] ^= 0x01;
    assert_eq!(refused(&e, &nonce(), AT), AwsRefusal::QuoteSignature);
}

#[test]
fn tampered_quote_data_is_refused() {
    let mut e = evidence();
    // A byte of the clock.
    e.attest[60] ^= 0x01;
    assert_eq!(refused(&e, &nonce(), AT), AwsRefusal::QuoteSignature);
}

#[test]
fn a_quote_for_another_nonce_is_refused() {
    // The quote's extraData alone differs (its signature breaks too).
    let mut e = evidence();
    flip_in(&mut e.attest, &nonce());
    assert_eq!(refused(&e, &nonce(), AT), AwsRefusal::QuoteSignature);
    assert!(failing(&e, &nonce(), AT).contains(&AwsRefusal::Nonce));
}

fn sha256_bank() -> PcrBank {
    PcrBank {
        alg: TPM_ALG_SHA256,
        values: (0..24)
            .map(|i| (i, vec![0; 32]))
            .collect::<BTreeMap<_, _>>(),
    }
}

#[test]
fn pcrs_of_another_bank_are_refused() {
    let mut e = evidence();
    e.banks = vec![sha256_bank()];
    assert_eq!(refused(&e, &nonce(), AT), AwsRefusal::PcrBank);
}

#[test]
fn pcrs_of_two_banks_are_refused() {
    let mut e = evidence();
    assert_eq!(e.banks[0].alg, TPM_ALG_SHA384);
    e.banks.push(sha256_bank());
    assert_eq!(refused(&e, &nonce(), AT), AwsRefusal::PcrBankMixed);
}

#[test]
fn an_empty_or_corrupted_document_is_refused() {
    let mut e = evidence();
    e.document.clear();
    assert_eq!(refused(&e, &nonce(), AT), AwsRefusal::Document);
    let mut e = evidence();
    e.document.truncate(100);
    assert_eq!(refused(&e, &nonce(), AT), AwsRefusal::Document);
    let mut e = evidence();
    e.document[0] = 0x85;
    assert_eq!(refused(&e, &nonce(), AT), AwsRefusal::Document);
}

#[test]
fn a_byte_flipped_in_the_signed_document_is_refused() {
    // In the payload's nonce: the signature no longer covers it.
    let mut e = evidence();
    flip_in(&mut e.document, &nonce());
    assert_eq!(refused(&e, &nonce(), AT), AwsRefusal::DocumentSignature);
    // The nonce check sees the document's nonce alone differ.
    assert!(failing(&e, &nonce(), AT).contains(&AwsRefusal::Nonce));
    // In the COSE signature itself (the document's last byte).
    let mut e = evidence();
    let last = e.document.len() - 1;
    e.document[last] ^= 0x01;
    assert_eq!(refused(&e, &nonce(), AT), AwsRefusal::DocumentSignature);
}

#[test]
fn a_document_signed_outside_its_chains_window_is_refused() {
    // The timestamp (1770113522437 ms) moved back by 2^24 ms, before the
    // leaf's start: the signature breaks, and the time is refused too.
    let mut e = evidence();
    let ts = [0x1b, 0, 0, 0x01, 0x9c, 0x22, 0xfc, 0xdb, 0x05];
    let at = e.document.windows(9).position(|w| w == ts).unwrap();
    e.document[at + 5] = 0x21;
    assert!(document(&e).timestamp_ms < 1_770_113_519_000);
    assert!(failing(&e, &nonce(), AT).contains(&AwsRefusal::DocumentTime));
}

#[test]
fn a_document_of_another_algorithm_is_refused() {
    // Protected header {1: -36} (ES512) instead of {1: -35}.
    let mut e = evidence();
    flip_in(&mut e.document, &[0x44, 0xa1, 0x01, 0x38, 0x22]);
    assert_eq!(refused(&e, &nonce(), AT), AwsRefusal::Algorithm);
}

#[test]
fn a_byte_flipped_in_a_certificate_is_refused() {
    let mut e = evidence();
    let leaf = document(&e).certificate;
    flip_in(&mut e.document, &leaf);
    assert_eq!(refused(&e, &nonce(), AT), AwsRefusal::Chain);
}

#[test]
fn a_bundle_under_a_root_that_is_not_pinned_is_refused() {
    let e = evidence();
    let intermediate = document(&e).cabundle[1].clone();
    let roots = NitroRoots::from_ders(vec![intermediate]);
    let err = verify(&e, &nonce(), &roots, AT).unwrap_err();
    assert_eq!(reason(&err), AwsRefusal::Root);
    // A second root that rotates in beside it is accepted.
    let mut roots = roots;
    roots.add(NitroRoots::aws().ders()[0].clone());
    assert!(verify(&e, &nonce(), &roots, AT).is_ok());
}

#[test]
fn the_checks_are_named_in_order() {
    let names: Vec<&str> = run_checks(&evidence(), Some(&nonce()), &NitroRoots::aws(), AT)
        .iter()
        .map(|c| c.name)
        .collect();
    assert_eq!(names[0], check::DOCUMENT);
    assert_eq!(names[12], check::NITRO_PCRS);
}
