//! The attestation a GCE vTPM attester hands over, decoded from its
//! protobuf (our own minimal definition, `proto/attestation.proto`) and
//! held to bounds before anything is verified.

use std::collections::BTreeMap;

use confboot_tpm::event_log::MAX_EVENT_LOG_LEN;
use confboot_tpm::structures::{MAX_ATTEST_LEN, PCR_COUNT};
use prost::Message;

use crate::certs::MAX_CERT_LEN;
use crate::pb;
use crate::tpm::MAX_PUBLIC_LEN;

/// Largest attestation accepted (the recorded ones are under 30 KB, most of
/// it the event log).
pub const MAX_ATTESTATION_LEN: usize = 512 * 1024;
/// Most quotes (one per PCR bank).
pub const MAX_QUOTES: usize = 8;
/// Most intermediate certificates it may carry.
pub const MAX_INTERMEDIATES: usize = 4;

/// Why bytes are not a GCE vTPM attestation.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum AttestationError {
    /// Larger than [`MAX_ATTESTATION_LEN`].
    #[error("attestation of {0} bytes exceeds {MAX_ATTESTATION_LEN}")]
    TooLarge(usize),
    /// Not the protobuf.
    #[error("not an Attestation protobuf: {0}")]
    Protobuf(String),
    /// A field beyond its bound.
    #[error("field {0} exceeds its bound")]
    Bound(&'static str),
    /// A required field is empty.
    #[error("field {0} is missing")]
    Missing(&'static str),
}

/// One quote: the `TPMS_ATTEST`, its `TPMT_SIGNATURE`, and the bank's
/// values.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Quote {
    /// The `TPMS_ATTEST`.
    pub attest: Vec<u8>,
    /// The `TPMT_SIGNATURE`.
    pub signature: Vec<u8>,
    /// The bank's algorithm (`TPM_ALG_*`).
    pub hash: u16,
    /// The quoted PCR values by index.
    pub pcrs: BTreeMap<u32, Vec<u8>>,
}

/// A decoded GCE vTPM attestation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GcpAttestation {
    /// The AK's `TPMT_PUBLIC`.
    pub ak_public: Vec<u8>,
    /// The quotes.
    pub quotes: Vec<Quote>,
    /// The TCG event log (may be empty).
    pub event_log: Vec<u8>,
    /// The AK certificate (DER; may be empty).
    pub ak_certificate: Vec<u8>,
    /// Intermediates it carries (DER).
    pub intermediates: Vec<Vec<u8>>,
}

impl GcpAttestation {
    /// Decodes and bounds an `Attestation` protobuf.
    pub fn decode(bytes: &[u8]) -> Result<GcpAttestation, AttestationError> {
        if bytes.len() > MAX_ATTESTATION_LEN {
            return Err(AttestationError::TooLarge(bytes.len()));
        }
        let a = pb::Attestation::decode(bytes)
            .map_err(|e| AttestationError::Protobuf(e.to_string()))?;
        let bound = |ok: bool, name| {
            if ok {
                Ok(())
            } else {
                Err(AttestationError::Bound(name))
            }
        };
        bound(a.ak_public.len() <= MAX_PUBLIC_LEN, "ak_public")?;
        bound(a.quotes.len() <= MAX_QUOTES, "quotes")?;
        bound(a.event_log.len() <= MAX_EVENT_LOG_LEN, "event_log")?;
        bound(a.ak_certificate.len() <= MAX_CERT_LEN, "ak_certificate")?;
        bound(
            a.intermediate_certificates.len() <= MAX_INTERMEDIATES,
            "intermediate_certificates",
        )?;
        bound(
            a.intermediate_certificates
                .iter()
                .all(|c| c.len() <= MAX_CERT_LEN),
            "intermediate_certificates",
        )?;
        if a.ak_public.is_empty() {
            return Err(AttestationError::Missing("ak_public"));
        }
        if a.quotes.is_empty() {
            return Err(AttestationError::Missing("quotes"));
        }
        let quotes = a
            .quotes
            .into_iter()
            .map(|q| {
                let pcrs = q.pcrs.unwrap_or_default();
                bound(q.attest.len() <= MAX_ATTEST_LEN, "quote")?;
                bound(q.signature.len() <= 1024, "raw_sig")?;
                bound(pcrs.values.len() <= PCR_COUNT, "pcrs")?;
                bound(pcrs.values.values().all(|v| v.len() <= 64), "pcrs")?;
                let hash = u16::try_from(pcrs.hash).map_err(|_| AttestationError::Bound("hash"))?;
                Ok(Quote {
                    attest: q.attest,
                    signature: q.signature,
                    hash,
                    pcrs: pcrs.values.into_iter().collect(),
                })
            })
            .collect::<Result<_, AttestationError>>()?;
        Ok(GcpAttestation {
            ak_public: a.ak_public,
            quotes,
            event_log: a.event_log,
            ak_certificate: a.ak_certificate,
            intermediates: a.intermediate_certificates,
        })
    }
}
