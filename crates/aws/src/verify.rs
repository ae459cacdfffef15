//! The NitroTPM checks, one by one, so that a command can print each and a
//! validator can stop at the first failure.
//!
//! The NSM attestation document vouches, under a certificate chained to a
//! pinned AWS Nitro root, for the TPM's attestation key (`public_key`),
//! the nonce and the TPM's SHA-384 PCRs (`nitrotpm_pcrs`); the quote that
//! key signed covers the same PCRs and the same nonce.

use std::collections::BTreeMap;

use confboot_attest::check::{CheckOutcome, CheckResult, first_failure};
use confboot_attest::{AttestationError, Detail};
use confboot_tpm::structures::{PCR_COUNT, QuoteInfo, parse_quote_attest};
use confboot_util::hex;
use ring::digest::{SHA256, digest};
use ring::signature::{ECDSA_P256_SHA256_ASN1, ECDSA_P384_SHA384_FIXED, UnparsedPublicKey};

use crate::AwsRefusal;
use crate::certs::{ChainCert, verify_chain};
use crate::document::{COSE_ES384, CoseSign1, NsmDocument};
use crate::evidence::{NitroEvidence, PcrBank, TPM_ALG_SHA384, bank_name};

/// Names of the checks, in the order they run.
pub mod check {
    /// The COSE_Sign1 and its NSM document decode; ES384, SHA384.
    pub const DOCUMENT: &str = "attestation document";
    /// The bundle's first certificate is a pinned AWS Nitro root.
    pub const ROOT: &str = "Nitro root";
    /// Root → intermediates → leaf, ECDSA P-384 at every link.
    pub const CHAIN: &str = "certificate chain";
    /// Every certificate is valid at the verification time.
    pub const VALIDITY: &str = "certificate validity";
    /// The document's timestamp lies within every certificate's window.
    pub const DOCUMENT_TIME: &str = "document time";
    /// The COSE signature under the leaf's key.
    pub const DOCUMENT_SIGNATURE: &str = "document signature";
    /// The quote's ECDSA P-256 signature under the attestation key.
    pub const QUOTE_SIGNATURE: &str = "quote signature";
    /// The `TPMS_ATTEST` is a quote of the SHA-384 bank's PCRs 0 to 23.
    pub const QUOTE: &str = "quote";
    /// The document's `public_key` is the attestation key.
    pub const ATTESTATION_KEY: &str = "attestation key";
    /// The document's nonce and the quote's `extraData` are the expected
    /// nonce.
    pub const NONCE: &str = "nonce";
    /// The evidence's PCRs are the quoted bank, every selected PCR.
    pub const PCR_BANK: &str = "PCR bank";
    /// The quote's `pcrDigest` is the SHA-256 of the PCR values.
    pub const PCR_DIGEST: &str = "PCR digest";
    /// The document's `nitrotpm_pcrs` are the quoted PCRs.
    pub const NITRO_PCRS: &str = "Nitro PCRs";
}

/// The length of the nonce a NitroTPM attester answers (the session's
/// 32 bytes).
pub const NONCE_LEN: usize = 32;
/// The length of a SHA-384 PCR.
const SHA384_LEN: usize = 48;

/// The pinned AWS Nitro roots (DER), compared byte for byte with the first
/// certificate of a document's bundle; more than one while a root rotates.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NitroRoots {
    roots: Vec<Vec<u8>>,
}

impl NitroRoots {
    /// The published AWS Nitro root G1 ([`crate::AWS_NITRO_ROOT_G1_PEM`]).
    pub fn aws() -> NitroRoots {
        let der = x509_parser::pem::parse_x509_pem(crate::AWS_NITRO_ROOT_G1_PEM.as_bytes())
            .map(|(_, pem)| pem.contents)
            .unwrap_or_default();
        NitroRoots { roots: vec![der] }
    }

    /// These roots (DER) and no others.
    pub fn from_ders(roots: Vec<Vec<u8>>) -> NitroRoots {
        NitroRoots { roots }
    }

    /// Adds a root (a replacement that rotates in).
    pub fn add(&mut self, der: Vec<u8>) {
        self.roots.push(der);
    }

    /// The pinned roots (DER).
    pub fn ders(&self) -> &[Vec<u8>] {
        &self.roots
    }
}

/// What verified NitroTPM evidence establishes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NitroVerified {
    /// The NSM module id (the instance and its TPM).
    pub module_id: String,
    /// When the NSM signed, in milliseconds since the epoch.
    pub timestamp_ms: u64,
    /// The quoted SHA-384 PCRs, by index.
    pub pcrs: BTreeMap<u32, Vec<u8>>,
    /// When the first certificate of the chain expires (Unix seconds).
    pub chain_not_after: i64,
}

fn fail(
    category: fn(Detail) -> AttestationError,
    reason: &'static AwsRefusal,
    text: impl Into<String>,
) -> CheckOutcome {
    CheckOutcome::Failed(category(Detail::with(reason, text)))
}

fn skipped(why: &str) -> CheckOutcome {
    CheckOutcome::Skipped(why.to_string())
}

/// The decoded document: its envelope and payload.
struct Decoded<'a> {
    cose: CoseSign1<'a>,
    doc: NsmDocument,
}

/// Runs every check on `evidence` at time `now` (Unix seconds), in the
/// order of [`check`]. `expected_nonce` is the nonce this verifier asked
/// for; without one the nonce check is skipped (and the verdict of
/// [`first_failure`] refuses).
pub fn run_checks(
    evidence: &NitroEvidence,
    expected_nonce: Option<&[u8]>,
    roots: &NitroRoots,
    now: i64,
) -> Vec<CheckResult> {
    run(evidence, expected_nonce, roots, now).0
}

/// Verifies `evidence` against `expected_nonce` at `now`: every check of
/// [`run_checks`] must pass.
pub fn verify(
    evidence: &NitroEvidence,
    expected_nonce: &[u8],
    roots: &NitroRoots,
    now: i64,
) -> Result<NitroVerified, AttestationError> {
    let (checks, verified) = run(evidence, Some(expected_nonce), roots, now);
    match (first_failure(&checks), verified) {
        (None, Some(v)) => Ok(v),
        (Some(e), _) => Err(e),
        (None, None) => Err(AttestationError::Decode(Detail::with(
            &AwsRefusal::Document,
            "no verdict",
        ))),
    }
}

fn run(
    evidence: &NitroEvidence,
    expected_nonce: Option<&[u8]>,
    roots: &NitroRoots,
    now: i64,
) -> (Vec<CheckResult>, Option<NitroVerified>) {
    let (document_outcome, decoded) = check_document(evidence);
    let doc = decoded.as_ref().map(|d| &d.doc);
    let (chain_outcome, chain) = check_chain(doc);
    let (quote_outcome, quote) = check_quote(evidence);
    let (bank_outcome, bank) = check_pcr_bank(evidence, quote.as_ref());
    let checks = [
        (check::DOCUMENT, document_outcome),
        (check::ROOT, check_root(doc, roots)),
        (check::CHAIN, chain_outcome),
        (check::VALIDITY, check_validity(chain.as_deref(), now)),
        (
            check::DOCUMENT_TIME,
            check_document_time(chain.as_deref(), doc),
        ),
        (
            check::DOCUMENT_SIGNATURE,
            check_document_signature(decoded.as_ref().map(|d| &d.cose), chain.as_deref()),
        ),
        (check::QUOTE_SIGNATURE, check_quote_signature(evidence)),
        (check::QUOTE, quote_outcome),
        (check::ATTESTATION_KEY, check_attestation_key(doc, evidence)),
        (
            check::NONCE,
            check_nonce(doc, quote.as_ref(), expected_nonce),
        ),
        (check::PCR_BANK, bank_outcome),
        (check::PCR_DIGEST, check_pcr_digest(quote.as_ref(), bank)),
        (check::NITRO_PCRS, check_nitro_pcrs(doc, bank)),
    ]
    .into_iter()
    .map(|(name, outcome)| CheckResult { name, outcome })
    .collect();
    let verified = match (doc, bank, chain) {
        (Some(doc), Some(bank), Some(chain)) => Some(NitroVerified {
            module_id: doc.module_id.clone(),
            timestamp_ms: doc.timestamp_ms,
            pcrs: bank.values.clone(),
            chain_not_after: chain.iter().map(|c| c.not_after).min().unwrap_or(i64::MIN),
        }),
        _ => None,
    };
    (checks, verified)
}

/// [`check::DOCUMENT`]: the COSE_Sign1 and its payload decode, the
/// algorithm is ES384 and the PCR digest SHA384.
fn check_document(evidence: &NitroEvidence) -> (CheckOutcome, Option<Decoded<'_>>) {
    let decoded = CoseSign1::parse(&evidence.document)
        .and_then(|cose| NsmDocument::parse(cose.payload).map(|doc| Decoded { cose, doc }));
    let d = match decoded {
        Ok(d) => d,
        Err(e) => {
            return (
                fail(
                    AttestationError::Decode,
                    &AwsRefusal::Document,
                    e.to_string(),
                ),
                None,
            );
        }
    };
    if d.cose.alg != Some(COSE_ES384) {
        let text = format!(
            "the document is signed with COSE algorithm {:?}, not ES384 (-35)",
            d.cose.alg
        );
        return (
            fail(AttestationError::Decode, &AwsRefusal::Algorithm, text),
            None,
        );
    }
    if d.doc.digest != "SHA384" {
        let text = format!(
            "the document's PCR digest is {:?}, not SHA384",
            d.doc.digest
        );
        return (
            fail(AttestationError::Decode, &AwsRefusal::Algorithm, text),
            None,
        );
    }
    let outcome = CheckOutcome::Passed(format!(
        "COSE_Sign1 ES384 from {}, {} PCRs, {} certificates",
        d.doc.module_id,
        d.doc.pcrs.len(),
        d.doc.cabundle.len() + 1
    ));
    (outcome, Some(d))
}

/// [`check::ROOT`]: `cabundle[0]` is a pinned root, byte for byte.
fn check_root(doc: Option<&NsmDocument>, roots: &NitroRoots) -> CheckOutcome {
    let Some(doc) = doc else {
        return skipped("no document");
    };
    let first = doc.cabundle.first().map(Vec::as_slice).unwrap_or_default();
    if roots.ders().iter().any(|r| r.as_slice() == first) {
        CheckOutcome::Passed(format!(
            "the bundle's root is pinned (SHA-256 {})",
            hex::encode(digest(&SHA256, first).as_ref())
        ))
    } else {
        fail(
            AttestationError::Trust,
            &AwsRefusal::Root,
            "the bundle's first certificate is no pinned AWS Nitro root",
        )
    }
}

/// [`check::CHAIN`]: root → each intermediate → leaf, ECDSA P-384.
fn check_chain(doc: Option<&NsmDocument>) -> (CheckOutcome, Option<Vec<ChainCert>>) {
    let Some(doc) = doc else {
        return (skipped("no document"), None);
    };
    let ders: Vec<&[u8]> = doc
        .cabundle
        .iter()
        .map(Vec::as_slice)
        .chain([doc.certificate.as_slice()])
        .collect();
    match verify_chain(&ders) {
        Ok(chain) => {
            let names: Vec<&str> = chain.iter().map(|c| c.common_name.as_str()).collect();
            (CheckOutcome::Passed(names.join(" → ")), Some(chain))
        }
        Err(e) => (
            fail(AttestationError::Trust, &AwsRefusal::Chain, e.to_string()),
            None,
        ),
    }
}

/// [`check::VALIDITY`]: every certificate is valid at `now`.
fn check_validity(chain: Option<&[ChainCert]>, now: i64) -> CheckOutcome {
    let Some(chain) = chain else {
        return skipped("no verified chain");
    };
    if let Some(c) = chain.iter().find(|c| now < c.not_before) {
        return fail(
            AttestationError::Trust,
            &AwsRefusal::NotYetValid,
            format!(
                "{} is valid from {} (Unix seconds), not yet at {now}",
                c.common_name, c.not_before
            ),
        );
    }
    if let Some(c) = chain.iter().find(|c| now > c.not_after) {
        return fail(
            AttestationError::Trust,
            &AwsRefusal::Expired,
            format!(
                "{} expired at {} (Unix seconds), before {now}",
                c.common_name, c.not_after
            ),
        );
    }
    let not_after = chain.iter().map(|c| c.not_after).min().unwrap_or(now);
    CheckOutcome::Passed(format!(
        "valid at {now} for {} more seconds (until {not_after})",
        not_after - now
    ))
}

/// [`check::DOCUMENT_TIME`]: the document was signed while every
/// certificate was valid.
fn check_document_time(chain: Option<&[ChainCert]>, doc: Option<&NsmDocument>) -> CheckOutcome {
    let (Some(chain), Some(doc)) = (chain, doc) else {
        return skipped("no verified chain");
    };
    let signed = i64::try_from(doc.timestamp_ms / 1000).unwrap_or(i64::MAX);
    match chain
        .iter()
        .find(|c| signed < c.not_before || signed > c.not_after)
    {
        Some(c) => fail(
            AttestationError::Trust,
            &AwsRefusal::DocumentTime,
            format!(
                "signed at {signed} (Unix seconds), outside {}'s window {} to {}",
                c.common_name, c.not_before, c.not_after
            ),
        ),
        None => CheckOutcome::Passed(format!("signed at {signed} (Unix seconds)")),
    }
}

/// [`check::DOCUMENT_SIGNATURE`]: ES384 over the `Sig_structure`, under
/// the verified leaf's key.
fn check_document_signature(
    cose: Option<&CoseSign1<'_>>,
    chain: Option<&[ChainCert]>,
) -> CheckOutcome {
    let (Some(cose), Some(leaf)) = (cose, chain.and_then(<[ChainCert]>::last)) else {
        return skipped("no verified chain");
    };
    match UnparsedPublicKey::new(&ECDSA_P384_SHA384_FIXED, &leaf.public_key)
        .verify(&cose.sig_structure(), cose.signature)
    {
        Ok(()) => CheckOutcome::Passed(format!("ES384 by {}", leaf.common_name)),
        Err(_) => fail(
            AttestationError::Signature,
            &AwsRefusal::DocumentSignature,
            format!(
                "the COSE signature does not verify under {}'s key",
                leaf.common_name
            ),
        ),
    }
}

/// [`check::QUOTE_SIGNATURE`]: ECDSA P-256 with SHA-256 over the
/// `TPMS_ATTEST`, under the attestation key.
fn check_quote_signature(evidence: &NitroEvidence) -> CheckOutcome {
    match UnparsedPublicKey::new(&ECDSA_P256_SHA256_ASN1, &evidence.ak_point())
        .verify(&evidence.attest, &evidence.quote_signature)
    {
        Ok(()) => CheckOutcome::Passed("ECDSA P-256 SHA-256 by the attestation key".into()),
        Err(_) => fail(
            AttestationError::Signature,
            &AwsRefusal::QuoteSignature,
            "the quote's signature does not verify under the attestation key",
        ),
    }
}

/// [`check::QUOTE`]: a `TPMS_ATTEST` quote of the SHA-384 bank's PCRs 0
/// to 23.
fn check_quote(evidence: &NitroEvidence) -> (CheckOutcome, Option<QuoteInfo>) {
    let quote = match parse_quote_attest(&evidence.attest) {
        Ok(q) => q,
        Err(e) => {
            return (
                fail(AttestationError::Decode, &AwsRefusal::Quote, e.to_string()),
                None,
            );
        }
    };
    let all: Vec<u32> = (0..PCR_COUNT)
        .filter_map(|i| u32::try_from(i).ok())
        .collect();
    match quote.pcr_selections.as_slice() {
        [s] if s.hash_alg == TPM_ALG_SHA384 && s.pcr_indices == all => (
            CheckOutcome::Passed(format!(
                "SHA-384 PCRs 0 to 23, firmware {:#018x}",
                quote.firmware_version
            )),
            Some(quote),
        ),
        _ => (
            fail(
                AttestationError::Decode,
                &AwsRefusal::Quote,
                "the quote does not select exactly the SHA-384 bank's PCRs 0 to 23",
            ),
            None,
        ),
    }
}

/// [`check::ATTESTATION_KEY`]: the document binds the attestation key.
fn check_attestation_key(doc: Option<&NsmDocument>, evidence: &NitroEvidence) -> CheckOutcome {
    let Some(doc) = doc else {
        return skipped("no document");
    };
    match &doc.public_key {
        Some(k) if k.as_slice() == evidence.ak_point().as_slice() => {
            CheckOutcome::Passed("the document binds the P-256 attestation key".into())
        }
        Some(_) => fail(
            AttestationError::Trust,
            &AwsRefusal::AttestationKey,
            "the document binds another key than the attestation key",
        ),
        None => fail(
            AttestationError::Trust,
            &AwsRefusal::AttestationKey,
            "the document binds no public key",
        ),
    }
}

/// [`check::NONCE`]: the expected nonce is 32 bytes, and both the
/// document's nonce and the quote's `extraData` are it.
fn check_nonce(
    doc: Option<&NsmDocument>,
    quote: Option<&QuoteInfo>,
    expected: Option<&[u8]>,
) -> CheckOutcome {
    let Some(expected) = expected else {
        return skipped("no nonce expected");
    };
    if expected.len() != NONCE_LEN {
        return fail(
            AttestationError::Binding,
            &AwsRefusal::NonceLength,
            format!(
                "the expected nonce is {} bytes, not {NONCE_LEN}",
                expected.len()
            ),
        );
    }
    let (Some(doc), Some(quote)) = (doc, quote) else {
        return skipped("no document or no quote");
    };
    if doc.nonce.as_deref() != Some(expected) {
        return fail(
            AttestationError::Binding,
            &AwsRefusal::Nonce,
            "the document's nonce is not the expected nonce",
        );
    }
    if quote.extra_data != expected {
        return fail(
            AttestationError::Binding,
            &AwsRefusal::Nonce,
            "the quote's extraData is not the expected nonce",
        );
    }
    CheckOutcome::Passed(format!(
        "{} in the document and the quote",
        hex::encode(expected)
    ))
}

/// [`check::PCR_BANK`]: the evidence gives one bank, the quoted one, with
/// every selected PCR.
fn check_pcr_bank<'a>(
    evidence: &'a NitroEvidence,
    quote: Option<&QuoteInfo>,
) -> (CheckOutcome, Option<&'a PcrBank>) {
    let bank = match evidence.banks.as_slice() {
        [bank] => bank,
        [] => {
            return (
                fail(
                    AttestationError::Decode,
                    &AwsRefusal::PcrBank,
                    "the evidence gives no PCRs",
                ),
                None,
            );
        }
        banks => {
            let names: Vec<&str> = banks.iter().map(|b| bank_name(b.alg)).collect();
            return (
                fail(
                    AttestationError::Decode,
                    &AwsRefusal::PcrBankMixed,
                    format!(
                        "the evidence gives PCRs of {} banks: {}",
                        banks.len(),
                        names.join(", ")
                    ),
                ),
                None,
            );
        }
    };
    let Some(quote) = quote else {
        return (skipped("no quote"), None);
    };
    let Some(selection) = quote.pcr_selections.first() else {
        return (skipped("no quote"), None);
    };
    if bank.alg != selection.hash_alg {
        let text = format!(
            "the evidence's PCRs are {} where the quote selects {}",
            bank_name(bank.alg),
            bank_name(selection.hash_alg)
        );
        return (
            fail(AttestationError::Decode, &AwsRefusal::PcrBank, text),
            None,
        );
    }
    let indices: Vec<u32> = bank.values.keys().copied().collect();
    if indices != selection.pcr_indices {
        return (
            fail(
                AttestationError::Decode,
                &AwsRefusal::PcrBank,
                "the evidence's PCRs are not the ones the quote selects",
            ),
            None,
        );
    }
    (
        CheckOutcome::Passed(format!("{} PCRs of {}", indices.len(), bank_name(bank.alg))),
        Some(bank),
    )
}

/// [`check::PCR_DIGEST`]: `pcrDigest` is the SHA-256 (the attestation
/// key's scheme hash, not the bank's) of the PCR values in selection
/// order.
fn check_pcr_digest(quote: Option<&QuoteInfo>, bank: Option<&PcrBank>) -> CheckOutcome {
    let (Some(quote), Some(bank)) = (quote, bank) else {
        return skipped("no quote or no PCR bank");
    };
    let concat: Vec<u8> = bank.values.values().flatten().copied().collect();
    let d = digest(&SHA256, &concat);
    if d.as_ref() == quote.pcr_digest.as_slice() {
        CheckOutcome::Passed(format!("SHA-256 {}", hex::encode(d.as_ref())))
    } else {
        fail(
            AttestationError::Signature,
            &AwsRefusal::PcrDigest,
            format!(
                "the quote's pcrDigest is {}, the PCRs' digest {}",
                hex::encode(&quote.pcr_digest),
                hex::encode(d.as_ref())
            ),
        )
    }
}

/// [`check::NITRO_PCRS`]: the document's `nitrotpm_pcrs` are the quoted
/// PCRs, all 24.
fn check_nitro_pcrs(doc: Option<&NsmDocument>, bank: Option<&PcrBank>) -> CheckOutcome {
    let (Some(doc), Some(bank)) = (doc, bank) else {
        return skipped("no document or no PCR bank");
    };
    if doc.pcrs.values().any(|v| v.len() != SHA384_LEN) {
        return fail(
            AttestationError::Trust,
            &AwsRefusal::NitroPcrs,
            "a PCR of the document is not 48 bytes",
        );
    }
    match (0..PCR_COUNT)
        .filter_map(|i| u32::try_from(i).ok())
        .find(|i| doc.pcrs.get(i) != bank.values.get(i))
    {
        Some(i) => fail(
            AttestationError::Trust,
            &AwsRefusal::NitroPcrs,
            format!("PCR {i} of the document is not the quoted one"),
        ),
        None => CheckOutcome::Passed("the document's 24 PCRs are the quoted ones".into()),
    }
}
