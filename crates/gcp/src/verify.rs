//! The GCP vTPM checks, one by one, so that a command can print each and a
//! validator can stop at the first failure.
//!
//! The AK certificate, chained to a pinned root of Google's EK/AK CA,
//! vouches for the vTPM's attestation key; the quotes that key signed carry
//! the nonce and the PCRs of each bank; the firmware's event log, replayed,
//! must give the quoted PCRs (a firmware update moves PCR 0, so the log
//! says why a value is what it is).

use std::collections::BTreeMap;

use confboot_attest::check::{CheckOutcome, CheckResult, first_failure};
use confboot_attest::{AttestationError, Detail};
use confboot_tpm::event_log::{AgileLogReader, DigestBank, EV_NO_ACTION, EventLogError, TCG_LOG};
use confboot_tpm::structures::{PCR_COUNT, QuoteInfo, TPM_ALG_SHA256, parse_quote_attest};
use confboot_util::hex;
use ring::digest::{self, SHA1_FOR_LEGACY_USE_ONLY, SHA256, SHA384, SHA512};
use ring::signature::{RSA_PKCS1_2048_8192_SHA256, RsaPublicKeyComponents};

use crate::GcpRefusal;
use crate::attestation::{GcpAttestation, Quote};
use crate::certs::{Cert, build_chain};
use crate::tpm::{FIXED_TPM, RESTRICTED, RsaPublic, SIGN, parse_rsa_public, parse_rsassa_sha256};

/// Names of the checks, in the order they run.
pub mod check {
    /// The `Attestation` protobuf decodes within its bounds.
    pub const ATTESTATION: &str = "attestation";
    /// The AK is an RSA restricted signing key fixed to the TPM.
    pub const AK: &str = "attestation key";
    /// The AK certificate parses and certifies the AK.
    pub const AK_CERTIFICATE: &str = "AK certificate";
    /// AK certificate → intermediate → pinned root, RSA SHA-256.
    pub const CHAIN: &str = "certificate chain";
    /// Every certificate is valid at the verification time.
    pub const VALIDITY: &str = "certificate validity";
    /// Every quote's signature under the AK.
    pub const QUOTE_SIGNATURES: &str = "quote signatures";
    /// Every quote parses and selects the PCRs it gives; one is SHA-256.
    pub const QUOTES: &str = "quotes";
    /// Every quote's `extraData` is the expected nonce.
    pub const NONCE: &str = "nonce";
    /// Every quote's `pcrDigest` is the SHA-256 of its PCR values.
    pub const PCR_DIGEST: &str = "PCR digest";
    /// The event log replays to every quoted bank.
    pub const EVENT_LOG: &str = "event log";
}

/// `TPM_ALG_SHA1`.
pub const TPM_ALG_SHA1: u16 = 0x0004;
/// `TPM_ALG_SHA384`.
pub const TPM_ALG_SHA384: u16 = 0x000c;
/// `TPM_ALG_SHA512`.
pub const TPM_ALG_SHA512: u16 = 0x000d;

/// The name of a bank's algorithm, for messages.
pub fn bank_name(alg: u16) -> &'static str {
    match alg {
        TPM_ALG_SHA1 => "SHA-1",
        TPM_ALG_SHA256 => "SHA-256",
        TPM_ALG_SHA384 => "SHA-384",
        TPM_ALG_SHA512 => "SHA-512",
        _ => "an unknown bank",
    }
}

/// The pinned roots of the EK/AK CA and the intermediates confboot knows
/// (an attestation may carry its own intermediates too).
#[derive(Clone, Debug)]
pub struct GcpRoots {
    roots: Vec<Cert>,
    intermediates: Vec<Cert>,
}

impl GcpRoots {
    /// Google's roots and intermediates for GCE vTPM AK certificates: the
    /// legacy `tpm_ek_*` hierarchy and the EK/AK CA.
    pub fn google() -> GcpRoots {
        let parse = |ders: &[&[u8]], what| -> Vec<Cert> {
            ders.iter()
                .filter_map(|d| Cert::from_der(d, what).ok())
                .collect()
        };
        GcpRoots {
            roots: parse(
                &[
                    include_bytes!("../testdata/ca-certs/tpm_ek_root_1.cer"),
                    include_bytes!("../testdata/ca-certs/gcp_ek_ak_ca_root.crt"),
                ],
                "root",
            ),
            intermediates: parse(
                &[
                    include_bytes!("../testdata/ca-certs/tpm_ek_intermediate_2.crt"),
                    include_bytes!("../testdata/ca-certs/tpm_ek_intermediate_3.crt"),
                    include_bytes!("../testdata/ca-certs/gcp_ek_ak_ca_intermediate_v3.crt"),
                ],
                "intermediate",
            ),
        }
    }

    /// These roots and intermediates (parsed certificates) and no others.
    pub fn new(roots: Vec<Cert>, intermediates: Vec<Cert>) -> GcpRoots {
        GcpRoots {
            roots,
            intermediates,
        }
    }

    /// Adds a root (a replacement that rotates in).
    pub fn add_root(&mut self, root: Cert) {
        self.roots.push(root);
    }

    /// Adds an intermediate.
    pub fn add_intermediate(&mut self, intermediate: Cert) {
        self.intermediates.push(intermediate);
    }
}

/// What a verified GCP vTPM attestation establishes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GcpVerified {
    /// The quoted SHA-256 PCRs, by index.
    pub sha256_pcrs: BTreeMap<u32, Vec<u8>>,
    /// The PCRs the event log gives (SHA-256 bank), by index.
    pub replayed: BTreeMap<u32, Vec<u8>>,
    /// When the first certificate of the chain expires (Unix seconds).
    pub chain_not_after: i64,
}

fn fail(
    category: fn(Detail) -> AttestationError,
    reason: &'static GcpRefusal,
    text: impl Into<String>,
) -> CheckOutcome {
    CheckOutcome::Failed(category(Detail::with(reason, text)))
}

fn skipped(why: &str) -> CheckOutcome {
    CheckOutcome::Skipped(why.to_string())
}

/// Runs every check on the attestation `bytes` at time `now` (Unix
/// seconds), in the order of [`check`]. Without `expected_nonce` the nonce
/// check is skipped (and the verdict of [`first_failure`] refuses).
pub fn run_checks(
    bytes: &[u8],
    expected_nonce: Option<&[u8]>,
    roots: &GcpRoots,
    now: i64,
) -> Vec<CheckResult> {
    run(bytes, expected_nonce, roots, now).0
}

/// Verifies the attestation `bytes` against `expected_nonce` at `now`:
/// every check of [`run_checks`] must pass.
pub fn verify(
    bytes: &[u8],
    expected_nonce: &[u8],
    roots: &GcpRoots,
    now: i64,
) -> Result<GcpVerified, AttestationError> {
    let (checks, verified) = run(bytes, Some(expected_nonce), roots, now);
    match (first_failure(&checks), verified) {
        (None, Some(v)) => Ok(v),
        (Some(e), _) => Err(e),
        (None, None) => Err(AttestationError::Decode(Detail::with(
            &GcpRefusal::Attestation,
            "no verdict",
        ))),
    }
}

fn run(
    bytes: &[u8],
    expected_nonce: Option<&[u8]>,
    roots: &GcpRoots,
    now: i64,
) -> (Vec<CheckResult>, Option<GcpVerified>) {
    let (attestation_outcome, att) = check_attestation(bytes);
    let att = att.as_ref();
    let (ak_outcome, ak) = check_ak(att);
    let (cert_outcome, leaf) = check_ak_certificate(att, ak.as_ref());
    let (chain_outcome, chain) = check_chain(att, leaf.as_ref(), roots);
    let (quotes_outcome, quotes) = check_quotes(att);
    let (log_outcome, replayed) = check_event_log(att, quotes.as_deref());
    let checks = [
        (check::ATTESTATION, attestation_outcome),
        (check::AK, ak_outcome),
        (check::AK_CERTIFICATE, cert_outcome),
        (check::CHAIN, chain_outcome),
        (check::VALIDITY, check_validity(chain.as_deref(), now)),
        (
            check::QUOTE_SIGNATURES,
            check_quote_signatures(att, ak.as_ref()),
        ),
        (check::QUOTES, quotes_outcome),
        (check::NONCE, check_nonce(quotes.as_deref(), expected_nonce)),
        (check::PCR_DIGEST, check_pcr_digest(quotes.as_deref())),
        (check::EVENT_LOG, log_outcome),
    ]
    .into_iter()
    .map(|(name, outcome)| CheckResult { name, outcome })
    .collect();
    let verified = match (quotes, chain, replayed) {
        (Some(quotes), Some(chain), Some(replayed)) => quotes
            .iter()
            .find(|(q, _)| q.hash == TPM_ALG_SHA256)
            .map(|(q, _)| GcpVerified {
                sha256_pcrs: q.pcrs.clone(),
                replayed,
                chain_not_after: chain.iter().map(|c| c.not_after).min().unwrap_or(i64::MIN),
            }),
        _ => None,
    };
    (checks, verified)
}

/// [`check::ATTESTATION`]: the protobuf decodes within its bounds.
fn check_attestation(bytes: &[u8]) -> (CheckOutcome, Option<GcpAttestation>) {
    match GcpAttestation::decode(bytes) {
        Ok(a) => (
            CheckOutcome::Passed(format!(
                "{} quotes, an event log of {} bytes, an AK certificate of {} bytes",
                a.quotes.len(),
                a.event_log.len(),
                a.ak_certificate.len()
            )),
            Some(a),
        ),
        Err(e) => (
            fail(
                AttestationError::Decode,
                &GcpRefusal::Attestation,
                e.to_string(),
            ),
            None,
        ),
    }
}

/// [`check::AK`]: an RSA key, restricted, signing, fixed to the TPM.
fn check_ak(att: Option<&GcpAttestation>) -> (CheckOutcome, Option<RsaPublic>) {
    let Some(att) = att else {
        return (skipped("no attestation"), None);
    };
    let ak = match parse_rsa_public(&att.ak_public) {
        Ok(ak) => ak,
        Err(e) => {
            return (
                fail(
                    AttestationError::Decode,
                    &GcpRefusal::AkPublic,
                    e.to_string(),
                ),
                None,
            );
        }
    };
    let wanted = FIXED_TPM | RESTRICTED | SIGN;
    if ak.attributes & wanted != wanted {
        let text = format!(
            "the AK's attributes {:#010x} are not those of a restricted signing key fixed to the TPM",
            ak.attributes
        );
        return (
            fail(AttestationError::Trust, &GcpRefusal::AkPublic, text),
            None,
        );
    }
    let outcome = CheckOutcome::Passed(format!(
        "RSA-{} restricted signing key, attributes {:#010x}",
        ak.modulus.len() * 8,
        ak.attributes
    ));
    (outcome, Some(ak))
}

/// [`check::AK_CERTIFICATE`]: the AK certificate parses and holds the AK.
fn check_ak_certificate(
    att: Option<&GcpAttestation>,
    ak: Option<&RsaPublic>,
) -> (CheckOutcome, Option<Cert>) {
    let (Some(att), Some(ak)) = (att, ak) else {
        return (skipped("no attestation key"), None);
    };
    if att.ak_certificate.is_empty() {
        return (
            fail(
                AttestationError::Trust,
                &GcpRefusal::AkCertificate,
                "the attestation carries no AK certificate",
            ),
            None,
        );
    }
    let cert = match Cert::from_der(&att.ak_certificate, "the AK certificate") {
        Ok(c) => c,
        Err(e) => {
            return (
                fail(
                    AttestationError::Trust,
                    &GcpRefusal::AkCertificate,
                    e.to_string(),
                ),
                None,
            );
        }
    };
    let exponent = ak.exponent.to_be_bytes();
    let first = exponent
        .iter()
        .position(|b| *b != 0)
        .unwrap_or(exponent.len());
    let holds = cert
        .rsa
        .as_ref()
        .is_some_and(|(n, e)| *n == ak.modulus && e.as_slice() == &exponent[first..]);
    if !holds {
        return (
            fail(
                AttestationError::Trust,
                &GcpRefusal::AkCertificate,
                "the AK certificate is for another key than the AK",
            ),
            None,
        );
    }
    (CheckOutcome::Passed("certifies the AK".into()), Some(cert))
}

/// [`check::CHAIN`]: the AK certificate chains to a pinned root, through
/// a known intermediate or one the attestation carries.
fn check_chain(
    att: Option<&GcpAttestation>,
    leaf: Option<&Cert>,
    roots: &GcpRoots,
) -> (CheckOutcome, Option<Vec<Cert>>) {
    let (Some(att), Some(leaf)) = (att, leaf) else {
        return (skipped("no AK certificate"), None);
    };
    let mut intermediates = roots.intermediates.clone();
    intermediates.extend(
        att.intermediates
            .iter()
            .filter_map(|d| Cert::from_der(d, "an intermediate").ok()),
    );
    match build_chain(leaf, &intermediates, &roots.roots) {
        Some(chain) => {
            let names: Vec<&str> = chain.iter().map(|c| c.name()).collect();
            (
                CheckOutcome::Passed(format!("{} (pinned)", names.join(" → "))),
                Some(chain.into_iter().cloned().collect()),
            )
        }
        None => (
            fail(
                AttestationError::Trust,
                &GcpRefusal::Chain,
                "the AK certificate does not chain to a pinned root",
            ),
            None,
        ),
    }
}

/// [`check::VALIDITY`]: every certificate of the chain is valid at `now`.
fn check_validity(chain: Option<&[Cert]>, now: i64) -> CheckOutcome {
    let Some(chain) = chain else {
        return skipped("no verified chain");
    };
    if let Some(c) = chain.iter().find(|c| now < c.not_before) {
        let text = format!(
            "{} is valid from {} (Unix seconds), not yet at {now}",
            c.name(),
            c.not_before
        );
        return fail(AttestationError::Trust, &GcpRefusal::NotYetValid, text);
    }
    if let Some(c) = chain.iter().find(|c| now > c.not_after) {
        let text = format!(
            "{} expired at {} (Unix seconds), before {now}",
            c.name(),
            c.not_after
        );
        return fail(AttestationError::Trust, &GcpRefusal::Expired, text);
    }
    let not_after = chain.iter().map(|c| c.not_after).min().unwrap_or(now);
    CheckOutcome::Passed(format!(
        "valid at {now} for {} more days",
        (not_after - now) / 86_400
    ))
}

/// [`check::QUOTE_SIGNATURES`]: every quote is RSASSA SHA-256 by the AK.
fn check_quote_signatures(att: Option<&GcpAttestation>, ak: Option<&RsaPublic>) -> CheckOutcome {
    let (Some(att), Some(ak)) = (att, ak) else {
        return skipped("no attestation key");
    };
    let exponent = ak.exponent.to_be_bytes();
    let first = exponent
        .iter()
        .position(|b| *b != 0)
        .unwrap_or(exponent.len());
    let key = RsaPublicKeyComponents {
        n: ak.modulus.as_slice(),
        e: &exponent[first..],
    };
    for (i, q) in att.quotes.iter().enumerate() {
        let verified = parse_rsassa_sha256(&q.signature).ok().is_some_and(|sig| {
            key.verify(&RSA_PKCS1_2048_8192_SHA256, &q.attest, &sig)
                .is_ok()
        });
        if !verified {
            let text = format!(
                "quote {i} ({}) is not signed by the AK with RSASSA SHA-256",
                bank_name(q.hash)
            );
            return fail(
                AttestationError::Signature,
                &GcpRefusal::QuoteSignature,
                text,
            );
        }
    }
    CheckOutcome::Passed(format!(
        "{} quotes, RSASSA SHA-256 by the AK",
        att.quotes.len()
    ))
}

/// [`check::QUOTES`]: each `TPMS_ATTEST` is a quote of one bank, the
/// bank and PCRs its values are of; one quote is of the SHA-256 bank.
fn check_quotes(att: Option<&GcpAttestation>) -> (CheckOutcome, Option<Vec<(&Quote, QuoteInfo)>>) {
    let Some(att) = att else {
        return (skipped("no attestation"), None);
    };
    let mut parsed = Vec::new();
    for (i, q) in att.quotes.iter().enumerate() {
        let info = match parse_quote_attest(&q.attest) {
            Ok(info) => info,
            Err(e) => {
                return (
                    fail(
                        AttestationError::Decode,
                        &GcpRefusal::Quote,
                        format!("quote {i}: {e}"),
                    ),
                    None,
                );
            }
        };
        let indices: Vec<u32> = q.pcrs.keys().copied().collect();
        match info.pcr_selections.as_slice() {
            [s] if s.hash_alg == q.hash && s.pcr_indices == indices => {}
            _ => {
                let text = format!(
                    "quote {i} selects other PCRs than the {} values it gives",
                    bank_name(q.hash)
                );
                return (
                    fail(AttestationError::Decode, &GcpRefusal::Quote, text),
                    None,
                );
            }
        }
        parsed.push((q, info));
    }
    if !parsed.iter().any(|(q, _)| q.hash == TPM_ALG_SHA256) {
        return (
            fail(
                AttestationError::Decode,
                &GcpRefusal::Quote,
                "no quote of the SHA-256 bank",
            ),
            None,
        );
    }
    let banks: Vec<&str> = parsed.iter().map(|(q, _)| bank_name(q.hash)).collect();
    (
        CheckOutcome::Passed(format!("banks {}", banks.join(", "))),
        Some(parsed),
    )
}

/// [`check::NONCE`]: every quote's `extraData` is the expected nonce.
fn check_nonce(quotes: Option<&[(&Quote, QuoteInfo)]>, expected: Option<&[u8]>) -> CheckOutcome {
    let Some(expected) = expected else {
        return skipped("no nonce expected");
    };
    let Some(quotes) = quotes else {
        return skipped("no quotes");
    };
    match quotes.iter().find(|(_, info)| info.extra_data != expected) {
        Some((q, info)) => fail(
            AttestationError::Binding,
            &GcpRefusal::Nonce,
            format!(
                "the {} quote's extraData is {:?}, not the expected {:?}",
                bank_name(q.hash),
                hex::encode(&info.extra_data),
                hex::encode(expected)
            ),
        ),
        None => CheckOutcome::Passed(format!("{:?} in every quote", hex::encode(expected))),
    }
}

/// [`check::PCR_DIGEST`]: every quote's `pcrDigest` is the SHA-256 (the
/// signing scheme's hash, whatever the bank) of its values in order.
fn check_pcr_digest(quotes: Option<&[(&Quote, QuoteInfo)]>) -> CheckOutcome {
    let Some(quotes) = quotes else {
        return skipped("no quotes");
    };
    for (q, info) in quotes {
        let concat: Vec<u8> = q.pcrs.values().flatten().copied().collect();
        let d = digest::digest(&SHA256, &concat);
        if d.as_ref() != info.pcr_digest.as_slice() {
            let text = format!(
                "the {} quote's pcrDigest is not the digest of its PCR values",
                bank_name(q.hash)
            );
            return fail(AttestationError::Signature, &GcpRefusal::PcrDigest, text);
        }
    }
    CheckOutcome::Passed(format!("{} banks", quotes.len()))
}

/// Replays the log's bank `alg` (digests of `N` bytes, hashed with
/// `hash`): every extending event's digest into its PCR, from reset.
fn replay_bank<const N: usize>(
    log: &[u8],
    alg: u16,
    hash: &'static digest::Algorithm,
) -> Result<BTreeMap<u32, Vec<u8>>, EventLogError> {
    let mut reader = AgileLogReader::<N>::open(log, DigestBank::<N>::new(alg), TCG_LOG)?;
    let mut pcrs: BTreeMap<u32, Vec<u8>> = BTreeMap::new();
    let mut locality = 0u8;
    let in_range = |event: usize, pcr: u32| match usize::try_from(pcr) {
        Ok(p) if p < PCR_COUNT => Ok(()),
        _ => Err(EventLogError::PcrOutOfRange { event, pcr }),
    };
    let mut number = 0;
    while let Some(e) = reader.next_event(in_range)? {
        number += 1;
        if e.event_type == EV_NO_ACTION {
            if let [sig @ .., l] = e.data
                && e.index == 0
                && sig == b"StartupLocality\0"
            {
                locality = *l;
            }
            continue;
        }
        let Some(d) = e.digest else {
            return Err(EventLogError::MissingSha256 { event: number });
        };
        let value = pcrs.entry(e.index).or_insert_with(|| {
            let mut reset = vec![0u8; N];
            if e.index == 0 {
                reset[N - 1] = locality;
            }
            reset
        });
        let mut ctx = digest::Context::new(hash);
        ctx.update(value);
        ctx.update(&d);
        *value = ctx.finish().as_ref().to_vec();
    }
    Ok(pcrs)
}

/// Replays the event log's bank `alg` (SHA-1, SHA-256, SHA-384 or
/// SHA-512) from reset: the value of every PCR the log extends. `None` for
/// another algorithm.
pub fn replay(log: &[u8], alg: u16) -> Option<Result<BTreeMap<u32, Vec<u8>>, EventLogError>> {
    match alg {
        TPM_ALG_SHA1 => Some(replay_bank::<20>(log, alg, &SHA1_FOR_LEGACY_USE_ONLY)),
        TPM_ALG_SHA256 => Some(replay_bank::<32>(log, alg, &SHA256)),
        TPM_ALG_SHA384 => Some(replay_bank::<48>(log, alg, &SHA384)),
        TPM_ALG_SHA512 => Some(replay_bank::<64>(log, alg, &SHA512)),
        _ => None,
    }
}

/// [`check::EVENT_LOG`]: the log parses (confboot-tpm's reader) and its
/// replay of each quoted bank gives that bank's quoted value of every PCR
/// it extends.
fn check_event_log(
    att: Option<&GcpAttestation>,
    quotes: Option<&[(&Quote, QuoteInfo)]>,
) -> (CheckOutcome, Option<BTreeMap<u32, Vec<u8>>>) {
    let (Some(att), Some(quotes)) = (att, quotes) else {
        return (skipped("no quotes"), None);
    };
    let log = match confboot_tpm::event_log::EventLog::parse(&att.event_log) {
        Ok(log) => log,
        Err(e) => {
            return (
                fail(
                    AttestationError::EventLog,
                    &GcpRefusal::EventLog,
                    e.to_string(),
                ),
                None,
            );
        }
    };
    let mut sha256 = None;
    for (q, _) in quotes {
        let replayed = match replay(&att.event_log, q.hash) {
            Some(Ok(r)) => r,
            Some(Err(e)) => {
                let text = format!("the {} bank: {e}", bank_name(q.hash));
                return (
                    fail(AttestationError::EventLog, &GcpRefusal::EventLog, text),
                    None,
                );
            }
            None => {
                let text = format!(
                    "no replay of {} (algorithm {:#06x})",
                    bank_name(q.hash),
                    q.hash
                );
                return (
                    fail(AttestationError::EventLog, &GcpRefusal::EventLog, text),
                    None,
                );
            }
        };
        if let Some((pcr, value)) = replayed
            .iter()
            .find(|(pcr, value)| q.pcrs.get(pcr) != Some(*value))
        {
            let text = format!(
                "the log replays {} PCR {pcr} to {}, the quote says {}",
                bank_name(q.hash),
                hex::encode(value),
                q.pcrs
                    .get(pcr)
                    .map(|v| hex::encode(v))
                    .unwrap_or_else(|| "nothing".into())
            );
            return (
                fail(
                    AttestationError::EventLog,
                    &GcpRefusal::EventLogReplay,
                    text,
                ),
                None,
            );
        }
        if q.hash == TPM_ALG_SHA256 {
            sha256 = Some(replayed);
        }
    }
    let Some(replayed) = sha256 else {
        return (skipped("no SHA-256 quote"), None);
    };
    let pcrs: Vec<String> = replayed.keys().map(u32::to_string).collect();
    let outcome = CheckOutcome::Passed(format!(
        "{} events replay to PCRs {} of {} banks",
        log.events().len(),
        pcrs.join(","),
        quotes.len()
    ));
    (outcome, Some(replayed))
}
