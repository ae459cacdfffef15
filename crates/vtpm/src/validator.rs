//! [`VtpmValidator`]: the evidence format (encoded by the issuer, decoded
//! here with every length checked) and the checks on a quote; no TPM needed.

use std::collections::BTreeMap;

use confboot_proto::Message as _;
use confboot_proto::vtpm::{PcrValue, QuoteEvidence};

use super::ak_trust::AkTrust;
use crate::VtpmRefusal;
use confboot_attest::{
    AttestationError, Attested, Detail, EXTRA_DATA_LEN, MeasurementPolicy, Validator, Variant,
};
use confboot_tpm::event_log::{EventList, EventLog};
use confboot_tpm::structures::{
    self, EccPublic, EcdsaSignature, MAX_ATTEST_LEN, MAX_PUBLIC_LEN, MAX_SIGNATURE_LEN, PCR_COUNT,
    QuoteInfo, SHA256_LEN, TPM_ALG_SHA256,
};
use confboot_tpm::{self as tpm, CLUSTER_ID_PCR};
use confboot_util::hex;

/// Largest event log carried in evidence (OVMF's for a direct-kernel boot
/// is about 4 KiB); the evidence travels in a TLS certificate, which
/// rustls bounds at 64 KiB with everything else in the handshake message.
pub const MAX_EVIDENCE_EVENT_LOG_LEN: usize = 32 * 1024;
/// Largest encoded evidence accepted (a quote over 24 PCRs with an AK
/// certificate is about 2.5 KiB, plus the event log).
pub const MAX_EVIDENCE_LEN: usize = 16 * 1024 + MAX_EVIDENCE_EVENT_LOG_LEN;
/// Largest AK certificate accepted (DER).
pub const MAX_AK_CERT_LEN: usize = 8 * 1024;

/// Builds the encoded evidence from a quote and what goes with it, without
/// an event log.
pub fn encode_evidence(
    quote: &tpm::Quote,
    pcr_values: &[(u32, [u8; 32])],
    ak_public: &[u8],
    ak_certificate: Option<&[u8]>,
) -> Vec<u8> {
    encode_evidence_with_log(quote, pcr_values, ak_public, ak_certificate, &[])
}

/// [`encode_evidence`] with the firmware's event log (empty: none).
pub fn encode_evidence_with_log(
    quote: &tpm::Quote,
    pcr_values: &[(u32, [u8; 32])],
    ak_public: &[u8],
    ak_certificate: Option<&[u8]>,
    event_log: &[u8],
) -> Vec<u8> {
    QuoteEvidence {
        attest: quote.attest.clone(),
        signature: quote.signature.clone(),
        pcrs: pcr_values
            .iter()
            .map(|(index, digest)| PcrValue {
                index: *index,
                digest: digest.to_vec(),
            })
            .collect(),
        ak_public: ak_public.to_vec(),
        ak_certificate: ak_certificate.map(<[u8]>::to_vec).unwrap_or_default(),
        event_log: event_log.to_vec(),
    }
    .encode_to_vec()
}

/// Checks vTPM evidence without a TPM. Built from AK trust and a measurement
/// policy; by default it requires PCR 15 to be all-zero (the node is not
/// yet bootstrapped), which is right for join.
#[derive(Clone, Debug)]
pub struct VtpmValidator {
    ak_trust: AkTrust,
    policy: MeasurementPolicy,
    require_unmarked: bool,
    expected_events: Option<EventList>,
}

/// The decoded, size-checked evidence.
struct Decoded {
    attest: Vec<u8>,
    signature: Vec<u8>,
    pcr_values: Vec<(u32, Vec<u8>)>,
    ak_public: Vec<u8>,
    ak_certificate: Vec<u8>,
    event_log: Vec<u8>,
}

fn decode_err(m: impl Into<String>) -> AttestationError {
    decode_as(&VtpmRefusal::Evidence, m)
}

fn decode_as(reason: &'static VtpmRefusal, m: impl Into<String>) -> AttestationError {
    AttestationError::Decode(Detail::with(reason, m))
}

fn check_len(field: &str, bytes: &[u8], max: usize) -> Result<(), AttestationError> {
    if bytes.is_empty() {
        return Err(decode_err(format!("{field} is missing")));
    }
    if bytes.len() > max {
        return Err(decode_err(format!(
            "{field} has {} bytes, at most {max} allowed",
            bytes.len()
        )));
    }
    Ok(())
}

/// Decodes evidence and checks every count and field size before use.
fn decode_evidence(evidence: &[u8]) -> Result<Decoded, AttestationError> {
    if evidence.len() > MAX_EVIDENCE_LEN {
        return Err(decode_err(format!(
            "evidence has {} bytes, at most {MAX_EVIDENCE_LEN} allowed",
            evidence.len()
        )));
    }
    let e = QuoteEvidence::decode(evidence)
        .map_err(|e| decode_err(format!("not a vTPM QuoteEvidence message: {e}")))?;
    check_len("quote (TPMS_ATTEST)", &e.attest, MAX_ATTEST_LEN)?;
    check_len("quote signature", &e.signature, MAX_SIGNATURE_LEN)?;
    check_len("AK public area", &e.ak_public, MAX_PUBLIC_LEN)?;
    if e.ak_certificate.len() > MAX_AK_CERT_LEN {
        return Err(decode_err(format!(
            "AK certificate has {} bytes, at most {MAX_AK_CERT_LEN} allowed",
            e.ak_certificate.len()
        )));
    }
    if e.event_log.len() > MAX_EVIDENCE_EVENT_LOG_LEN {
        return Err(decode_err(format!(
            "event log has {} bytes, at most {MAX_EVIDENCE_EVENT_LOG_LEN} allowed",
            e.event_log.len()
        )));
    }
    if e.pcrs.is_empty() || e.pcrs.len() > PCR_COUNT {
        return Err(decode_err(format!(
            "evidence carries {} PCR values, want 1 to {PCR_COUNT}",
            e.pcrs.len()
        )));
    }
    let mut pcr_values = Vec::with_capacity(e.pcrs.len());
    for p in e.pcrs {
        if p.index as usize >= PCR_COUNT {
            return Err(decode_err(format!("PCR index {} out of range", p.index)));
        }
        if let Some((last, _)) = pcr_values.last()
            && *last >= p.index
        {
            return Err(decode_err(format!(
                "PCR {} follows PCR {last}: values must be ascending and unique",
                p.index
            )));
        }
        if p.digest.len() != SHA256_LEN {
            return Err(decode_err(format!(
                "PCR {} value has {} bytes, want {SHA256_LEN}",
                p.index,
                p.digest.len()
            )));
        }
        pcr_values.push((p.index, p.digest));
    }
    Ok(Decoded {
        attest: e.attest,
        signature: e.signature,
        pcr_values,
        ak_public: e.ak_public,
        ak_certificate: e.ak_certificate,
        event_log: e.event_log,
    })
}

/// The event log carried in vTPM `evidence`, as an event list; `None`
/// when it carries none. Only the log's own format is checked here: call it
/// on evidence a [`VtpmValidator`] accepted, which has replayed that log to
/// the quoted PCRs.
pub fn carried_event_list(evidence: &[u8]) -> Result<Option<EventList>, AttestationError> {
    let e = decode_evidence(evidence)?;
    if e.event_log.is_empty() {
        return Ok(None);
    }
    EventLog::parse(&e.event_log)
        .map(|log| Some(log.to_event_list()))
        .map_err(|e| {
            AttestationError::EventLog(Detail::with(&VtpmRefusal::EventLogFormat, e.to_string()))
        })
}

impl VtpmValidator {
    /// A validator with this AK trust and policy that requires PCR 15 to be
    /// all-zero (join-time default).
    pub fn new(ak_trust: AkTrust, policy: MeasurementPolicy) -> Self {
        VtpmValidator {
            ak_trust,
            policy,
            require_unmarked: true,
            expected_events: None,
        }
    }

    /// The event log the node should have (predicted by `confboot measure`
    /// or taken from a golden boot): when an enforced PCR differs and the
    /// evidence carries a log, the error names the first event that
    /// differs ([`EventList::explain`]).
    pub fn expected_events(mut self, events: EventList) -> Self {
        self.expected_events = Some(events);
        self
    }

    /// Whether PCR 15 must be all-zero (unmarked node). Turn it off to verify
    /// nodes that are already bootstrapped (the CLI's `verify`).
    pub fn require_unmarked(mut self, required: bool) -> Self {
        self.require_unmarked = required;
        self
    }

    /// The measurement policy.
    pub fn policy(&self) -> &MeasurementPolicy {
        &self.policy
    }

    /// The AK trust.
    pub fn ak_trust(&self) -> &AkTrust {
        &self.ak_trust
    }
}

/// Parses a carried event log and checks that it replays to the quoted
/// PCRs (every PCR it extends).
fn replayed_event_log(
    bytes: &[u8],
    quoted: &BTreeMap<u32, Vec<u8>>,
) -> Result<EventList, AttestationError> {
    let log = EventLog::parse(bytes).map_err(|e| {
        AttestationError::EventLog(Detail::with(&VtpmRefusal::EventLogFormat, e.to_string()))
    })?;
    for (pcr, replayed) in log.replay() {
        match quoted.get(&pcr) {
            Some(q) if q.as_slice() == replayed.as_slice() => {}
            Some(q) => {
                return Err(AttestationError::EventLog(Detail::with(
                    &VtpmRefusal::EventLogReplay,
                    format!(
                        "replaying it gives PCR {pcr} = {}, the quote says {}",
                        hex::encode(&replayed),
                        hex::encode(q)
                    ),
                )));
            }
            None => {
                return Err(AttestationError::EventLog(Detail::with(
                    &VtpmRefusal::EventLogCoverage,
                    format!("it extends PCR {pcr}, which the quote does not cover"),
                )));
            }
        }
    }
    Ok(log.to_event_list())
}

/// Evidence decoded ([`decode_evidence`]) with its TPM structures parsed:
/// what the checks read.
struct ParsedEvidence {
    /// The decoded evidence: the quote's bytes, the PCR values, the AK's
    /// public area and certificate, the event log.
    decoded: Decoded,
    /// The quote (`TPMS_ATTEST`).
    quote: QuoteInfo,
    /// The AK's public area.
    ak: EccPublic,
    /// The quote's signature.
    signature: EcdsaSignature,
}

/// Decodes the evidence, then parses the quote, the AK's public area and
/// the quote's signature, in that order. Every failure is
/// [`AttestationError::Decode`].
fn parse_evidence(evidence: &[u8]) -> Result<ParsedEvidence, AttestationError> {
    let decoded = decode_evidence(evidence)?;
    let quote = structures::parse_quote_attest(&decoded.attest)
        .map_err(|p| decode_as(&VtpmRefusal::Quote, p.0))?;
    let ak = structures::parse_ecc_public(&decoded.ak_public)
        .map_err(|p| decode_as(&VtpmRefusal::AkPublic, format!("AK public area: {}", p.0)))?;
    let signature = structures::parse_ecdsa_signature(&decoded.signature)
        .map_err(|p| decode_as(&VtpmRefusal::SignatureFormat, p.0))?;
    Ok(ParsedEvidence {
        decoded,
        quote,
        ak,
        signature,
    })
}

/// The binding: the quote's qualifying data is this handshake's
/// `extra_data`, so the quote is neither stale nor replayed
/// ([`AttestationError::Binding`]).
fn check_binding(
    quote: &QuoteInfo,
    extra_data: &[u8; EXTRA_DATA_LEN],
) -> Result<(), AttestationError> {
    if quote.extra_data.as_slice() != extra_data.as_slice() {
        return Err(AttestationError::Binding(Detail::with(
            &VtpmRefusal::Binding,
            format!(
                "quote qualifying data {} differs from the expected extra_data {}",
                hex::encode(&quote.extra_data),
                hex::encode(extra_data)
            ),
        )));
    }
    Ok(())
}

/// The PCR values are the quoted ones: the quote selects exactly the
/// evidence's PCRs in the SHA-256 bank, and its PCR digest is the digest of
/// their values ([`AttestationError::Signature`]: the values are not what
/// the TPM signed).
fn check_quoted_pcrs(
    quote: &QuoteInfo,
    pcr_values: &[(u32, Vec<u8>)],
) -> Result<(), AttestationError> {
    let carried: Vec<u32> = pcr_values.iter().map(|(i, _)| *i).collect();
    match quote.pcr_selections.as_slice() {
        [sel] if sel.hash_alg == TPM_ALG_SHA256 && sel.pcr_indices == carried => {}
        other => {
            return Err(AttestationError::Signature(Detail::with(
                &VtpmRefusal::PcrSelection,
                format!(
                    "the quote covers {other:?}, but the evidence carries SHA-256 PCRs {carried:?}"
                ),
            )));
        }
    }
    let digest = tpm::pcr_digest(pcr_values.iter().map(|(_, v)| v.as_slice()));
    if quote.pcr_digest.as_slice() != digest.as_slice() {
        return Err(AttestationError::Signature(Detail::with(
            &VtpmRefusal::PcrDigest,
            format!(
                "the PCR values do not match the quoted PCR digest: quoted {}, computed {}",
                hex::encode(&quote.pcr_digest),
                hex::encode(&digest)
            ),
        )));
    }
    Ok(())
}

/// The AK is a real AK: a restricted signing key created in the TPM
/// ([`REQUIRED_FOR_AK`](structures::object_attributes::REQUIRED_FOR_AK);
/// [`AttestationError::Trust`]).
fn check_ak_attributes(ak: &EccPublic) -> Result<(), AttestationError> {
    let required = structures::object_attributes::REQUIRED_FOR_AK;
    if ak.object_attributes & required != required {
        return Err(AttestationError::Trust(Detail::with(
            &VtpmRefusal::AkAttributes,
            format!(
                "the AK's attributes {:#010x} lack {required:#010x} (restricted signing key created in the TPM)",
                ak.object_attributes
            ),
        )));
    }
    Ok(())
}

/// The key that signed is the AK of the evidence. The TPM names it in the
/// quote itself: the public area in the evidence (attributes included) must
/// be that key's, a primary key of the owner or endorsement hierarchy
/// ([`AttestationError::Signature`]).
fn check_signer_is_ak(quote: &QuoteInfo, ak_public: &[u8]) -> Result<(), AttestationError> {
    let signer_is_this_ak = [tpm::TPM_RH_OWNER, tpm::TPM_RH_ENDORSEMENT]
        .iter()
        .any(|&h| quote.qualified_signer == tpm::primary_qualified_name(h, ak_public));
    if !signer_is_this_ak {
        return Err(AttestationError::Signature(Detail::with(
            &VtpmRefusal::Signer,
            format!(
                "the quote's qualifiedSigner {} is not the Qualified Name of the AK in the evidence \
             (a primary key of the owner or endorsement hierarchy)",
                hex::encode(&quote.qualified_signer)
            ),
        )));
    }
    Ok(())
}

/// Logs (at debug level) a quote whose clock is not `safe`; never refuses
/// it. Freshness comes from the handshake's nonce in the qualifying data,
/// never from the clock, and a TPM reports `safe = NO` after every
/// unorderly shutdown (a power loss the host can cause) until it next saves
/// its clock, up to about 70 minutes, which would lock a crashed node out of
/// its rejoin and recovery.
fn note_unsafe_clock(quote: &QuoteInfo) {
    if !quote.safe {
        log::debug!("the quote's clock is not safe (an unorderly shutdown before this boot)");
    }
}

/// The AK signed exactly these `TPMS_ATTEST` bytes, with SHA-256
/// ([`AttestationError::Signature`]).
fn check_quote_signature(
    attest: &[u8],
    signature: &EcdsaSignature,
    ak: &EccPublic,
) -> Result<(), AttestationError> {
    if signature.hash_alg != TPM_ALG_SHA256 {
        return Err(AttestationError::Signature(Detail::with(
            &VtpmRefusal::SignatureHash,
            format!(
                "quote signed with hash {:#06x}, want SHA-256",
                signature.hash_alg
            ),
        )));
    }
    ring::signature::UnparsedPublicKey::new(&ring::signature::ECDSA_P256_SHA256_FIXED, &ak.point)
        .verify(attest, &signature.r_s)
        .map_err(|_| {
            AttestationError::Signature(Detail::with(
                &VtpmRefusal::QuoteSignature,
                "the quote's ECDSA signature does not verify with the AK in the evidence",
            ))
        })
}

/// The carried event log, replayed to the quoted PCRs
/// ([`replayed_event_log`]): only then can it explain them. `None` when the
/// evidence carries no log.
fn carried_events(
    event_log: &[u8],
    measurements: &BTreeMap<u32, Vec<u8>>,
) -> Result<Option<EventList>, AttestationError> {
    if event_log.is_empty() {
        Ok(None)
    } else {
        replayed_event_log(event_log, measurements).map(Some)
    }
}

/// The node is not yet bootstrapped: PCR 15 ([`CLUSTER_ID_PCR`]) is quoted
/// and all-zero, not marked with a cluster id ([`AttestationError::Policy`]).
fn check_unmarked(measurements: &BTreeMap<u32, Vec<u8>>) -> Result<(), AttestationError> {
    let zero = [0u8; SHA256_LEN];
    match measurements.get(&CLUSTER_ID_PCR) {
        Some(v) if v.as_slice() == zero => Ok(()),
        Some(v) => Err(AttestationError::Policy(Detail::with(
            &VtpmRefusal::ClusterMarked,
            format!(
                "PCR {CLUSTER_ID_PCR} is {}, not all-zero: the node is already bootstrapped (marked with a cluster id)",
                hex::encode(v)
            ),
        ))),
        None => Err(AttestationError::Policy(Detail::with(
            &VtpmRefusal::ClusterMarkNotQuoted,
            format!(
                "PCR {CLUSTER_ID_PCR} is not quoted; it must be, and all-zero, for an unbootstrapped node"
            ),
        ))),
    }
}

impl VtpmValidator {
    /// The measurement policy ([`AttestationError::Measurement`]; the
    /// policy logs the `warnOnly` entries that differ). A differing PCR is
    /// explained by the first event that differs from the expected log,
    /// when both logs are known.
    fn check_policy(
        &self,
        measurements: &BTreeMap<u32, Vec<u8>>,
        events: Option<&EventList>,
    ) -> Result<(), AttestationError> {
        let _logged_warnings = self.policy.check(measurements).map_err(|err| match err {
            AttestationError::Measurement {
                index,
                expected,
                actual,
                event: None,
            } => AttestationError::Measurement {
                event: self
                    .expected_events
                    .as_ref()
                    .zip(events)
                    .and_then(|(want, got)| want.explain(index, got)),
                index,
                expected,
                actual,
            },
            other => other,
        })?;
        Ok(())
    }
}

impl Validator for VtpmValidator {
    fn variant(&self) -> Variant {
        Variant::QemuVtpm
    }

    /// Runs the checks in order and stops at the first that fails: decode,
    /// binding, quoted PCRs, AK attributes, signer, quote signature, AK
    /// trust, event log replay, unmarked node (when required), measurement
    /// policy. The checks that cost no signature come first, so evidence
    /// that is stale (a replayed certificate), bound to another handshake or
    /// inconsistent is refused for the price of comparisons; the result is
    /// the same, as every check must pass.
    fn validate(
        &self,
        evidence: &[u8],
        extra_data: &[u8; EXTRA_DATA_LEN],
    ) -> Result<Attested, AttestationError> {
        let ParsedEvidence {
            decoded,
            quote,
            ak,
            signature,
        } = parse_evidence(evidence)?;
        check_binding(&quote, extra_data)?;
        check_quoted_pcrs(&quote, &decoded.pcr_values)?;
        check_ak_attributes(&ak)?;
        check_signer_is_ak(&quote, &decoded.ak_public)?;
        note_unsafe_clock(&quote);
        check_quote_signature(&decoded.attest, &signature, &ak)?;
        self.ak_trust.check(&ak.point, &decoded.ak_certificate)?;
        let measurements: BTreeMap<u32, Vec<u8>> = decoded.pcr_values.into_iter().collect();
        let events = carried_events(&decoded.event_log, &measurements)?;
        if self.require_unmarked {
            check_unmarked(&measurements)?;
        }
        self.check_policy(&measurements, events.as_ref())?;
        Ok(Attested {
            set_verdict: None,
            warnings: Vec::new(),
            variant: Variant::QemuVtpm,
            measurements,
        })
    }
}
