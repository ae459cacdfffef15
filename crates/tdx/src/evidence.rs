//! The evidence encoding of the `tdx` variant: a prost message
//! `confboot.tdx.Evidence` (see `proto/proto/tdx.proto`) holding the raw
//! quote and, optionally, the TD's CCEL log area.
//!
//! Bounds, checked before anything is parsed: the encoded evidence is at
//! most [`MAX_EVIDENCE_LEN`] bytes, the quote 1 to
//! [`MAX_QUOTE_LEN`](super::MAX_QUOTE_LEN) bytes, the log at most
//! [`MAX_CCEL_LOG_LEN`](super::MAX_CCEL_LOG_LEN) bytes. What the fields
//! hold is parsed by [`Quote`](super::Quote) and
//! [`CcelLog`](super::CcelLog).

use confboot_proto::Message;
use confboot_proto::tdx as pb;

use super::ccel::MAX_CCEL_LOG_LEN;
use super::quote::MAX_QUOTE_LEN;
use crate::TdxRefusal;
use confboot_attest::{AttestationError, Detail};

/// Largest encoded evidence accepted: it travels in a TLS certificate,
/// which must stay below TLS's 64 KiB handshake message (a real quote is
/// about 5 KB, a direct-kernel boot's log a few KB).
pub const MAX_EVIDENCE_LEN: usize = 56 * 1024;

/// Decoded evidence: the quote and the CCEL log (possibly empty), as bytes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TdxEvidence {
    /// The raw quote.
    pub quote: Vec<u8>,
    /// The CCEL log area, its padding cut; empty when none was sent.
    pub ccel_log: Vec<u8>,
}

fn check_bounds(quote: &[u8], ccel_log: &[u8]) -> Result<(), String> {
    if quote.is_empty() || quote.len() > MAX_QUOTE_LEN {
        return Err(format!(
            "TDX evidence quote has {} bytes, want 1 to {MAX_QUOTE_LEN}",
            quote.len()
        ));
    }
    if ccel_log.len() > MAX_CCEL_LOG_LEN {
        return Err(format!(
            "TDX evidence CCEL log has {} bytes, at most {MAX_CCEL_LOG_LEN}",
            ccel_log.len()
        ));
    }
    Ok(())
}

impl TdxEvidence {
    /// Encodes the evidence. Fails if it would break a bound the decoder enforces.
    pub fn encode(&self) -> Result<Vec<u8>, AttestationError> {
        check_bounds(&self.quote, &self.ccel_log)
            .map_err(|m| AttestationError::Issue(Detail::with(&TdxRefusal::EvidenceBounds, m)))?;
        Ok(pb::Evidence {
            quote: self.quote.clone(),
            ccel_log: self.ccel_log.clone(),
        }
        .encode_to_vec())
    }

    /// Decodes evidence, enforcing every bound.
    pub fn decode(bytes: &[u8]) -> Result<TdxEvidence, AttestationError> {
        if bytes.len() > MAX_EVIDENCE_LEN {
            return Err(AttestationError::Decode(Detail::with(
                &TdxRefusal::Evidence,
                format!(
                    "TDX evidence of {} bytes exceeds {MAX_EVIDENCE_LEN}",
                    bytes.len()
                ),
            )));
        }
        let msg = pb::Evidence::decode(bytes).map_err(|e| {
            AttestationError::Decode(Detail::with(
                &TdxRefusal::Evidence,
                format!("TDX evidence: {e}"),
            ))
        })?;
        check_bounds(&msg.quote, &msg.ccel_log)
            .map_err(|m| AttestationError::Decode(Detail::with(&TdxRefusal::Evidence, m)))?;
        Ok(TdxEvidence {
            quote: msg.quote,
            ccel_log: msg.ccel_log,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_bounds_are_enforced() {
        let e = TdxEvidence {
            quote: vec![4; 100],
            ccel_log: vec![1; 10],
        };
        assert_eq!(TdxEvidence::decode(&e.encode().unwrap()).unwrap(), e);
        for (quote, log) in [
            (vec![], vec![]),
            (vec![1; MAX_QUOTE_LEN + 1], vec![]),
            (vec![1], vec![0; MAX_CCEL_LOG_LEN + 1]),
        ] {
            let bad = TdxEvidence {
                quote: quote.clone(),
                ccel_log: log.clone(),
            };
            assert!(
                matches!(bad.encode(), Err(e @ AttestationError::Issue(_)) if e.is(&TdxRefusal::EvidenceBounds))
            );
            let raw = pb::Evidence {
                quote,
                ccel_log: log,
            }
            .encode_to_vec();
            assert!(matches!(
                TdxEvidence::decode(&raw),
                Err(e @ AttestationError::Decode(_)) if e.is(&TdxRefusal::Evidence)
            ));
        }
        assert!(matches!(
            TdxEvidence::decode(&vec![0; MAX_EVIDENCE_LEN + 1]),
            Err(AttestationError::Decode(d)) if d.is(&TdxRefusal::Evidence) && d.text().contains("exceeds")
        ));
        assert!(TdxEvidence::decode(b"\xff\xff").is_err());
    }
}
