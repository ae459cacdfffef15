//! The evidence encoding of the `sev-snp` variant: a prost message
//! `confboot.snp.Evidence` (see `proto/proto/snp.proto`) holding the raw
//! report and the extended report's certificate table.
//!
//! Bounds, checked before anything is decoded or allocated per entry:
//! the encoded evidence is at most [`MAX_EVIDENCE_LEN`] bytes, the report
//! exactly [`REPORT_LEN`](super::report::REPORT_LEN), at most
//! [`MAX_CERTIFICATES`] certificates of at most [`MAX_CERTIFICATE_LEN`]
//! bytes each.

use confboot_proto::Message;
use confboot_proto::snp as pb;

use super::report::{REPORT_LEN, SnpReport};
use crate::SnpRefusal;
use confboot_attest::{AttestationError, Detail};

/// Largest encoded evidence accepted.
pub const MAX_EVIDENCE_LEN: usize = 64 * 1024;
/// Most certificates an evidence may carry.
pub const MAX_CERTIFICATES: usize = 8;
/// Largest DER certificate accepted.
pub const MAX_CERTIFICATE_LEN: usize = 8 * 1024;

/// What a certificate of the table is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CertKind {
    /// Versioned Chip Endorsement Key.
    Vcek,
    /// Versioned Loaded Endorsement Key.
    Vlek,
    /// AMD SEV Signing Key (signs VCEKs).
    Ask,
    /// AMD SEV VLEK Signing Key (signs VLEKs).
    Asvk,
    /// AMD Root Key.
    Ark,
}

impl CertKind {
    /// The name used in messages.
    pub fn name(self) -> &'static str {
        match self {
            CertKind::Vcek => "VCEK",
            CertKind::Vlek => "VLEK",
            CertKind::Ask => "ASK",
            CertKind::Asvk => "ASVK",
            CertKind::Ark => "ARK",
        }
    }

    fn to_proto(self) -> pb::CertificateKind {
        match self {
            CertKind::Vcek => pb::CertificateKind::Vcek,
            CertKind::Vlek => pb::CertificateKind::Vlek,
            CertKind::Ask => pb::CertificateKind::Ask,
            CertKind::Asvk => pb::CertificateKind::Asvk,
            CertKind::Ark => pb::CertificateKind::Ark,
        }
    }

    fn from_proto(kind: i32) -> Option<CertKind> {
        match pb::CertificateKind::try_from(kind).ok()? {
            pb::CertificateKind::Vcek => Some(CertKind::Vcek),
            pb::CertificateKind::Vlek => Some(CertKind::Vlek),
            pb::CertificateKind::Ask => Some(CertKind::Ask),
            pb::CertificateKind::Asvk => Some(CertKind::Asvk),
            pb::CertificateKind::Ark => Some(CertKind::Ark),
            pb::CertificateKind::Unspecified => None,
        }
    }
}

/// One certificate of the table.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CertEntry {
    /// What it is.
    pub kind: CertKind,
    /// The certificate, DER.
    pub der: Vec<u8>,
}

/// Decoded evidence: the report and the certificates that came with it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SnpEvidence {
    /// The raw report.
    pub report: SnpReport,
    /// The certificate table (possibly empty).
    pub certificates: Vec<CertEntry>,
}

impl SnpEvidence {
    /// The first certificate of a kind.
    pub fn certificate(&self, kind: CertKind) -> Option<&[u8]> {
        self.certificates
            .iter()
            .find(|c| c.kind == kind)
            .map(|c| c.der.as_slice())
    }

    /// Encodes the evidence. Fails if it would break a bound the decoder enforces.
    pub fn encode(&self) -> Result<Vec<u8>, AttestationError> {
        check_certificate_bounds(&self.certificates)?;
        let msg = pb::Evidence {
            report: self.report.as_bytes().to_vec(),
            certificates: self
                .certificates
                .iter()
                .map(|c| pb::Certificate {
                    kind: c.kind.to_proto() as i32,
                    der: c.der.clone(),
                })
                .collect(),
        };
        let bytes = msg.encode_to_vec();
        if bytes.len() > MAX_EVIDENCE_LEN {
            return Err(AttestationError::Issue(Detail::with(
                &SnpRefusal::Evidence,
                format!(
                    "SNP evidence of {} bytes exceeds {MAX_EVIDENCE_LEN}",
                    bytes.len()
                ),
            )));
        }
        Ok(bytes)
    }

    /// Decodes evidence, enforcing every bound. Certificates of an
    /// unspecified or unknown kind are refused.
    pub fn decode(bytes: &[u8]) -> Result<SnpEvidence, AttestationError> {
        if bytes.len() > MAX_EVIDENCE_LEN {
            return Err(AttestationError::Decode(Detail::with(
                &SnpRefusal::Evidence,
                format!(
                    "SNP evidence of {} bytes exceeds {MAX_EVIDENCE_LEN}",
                    bytes.len()
                ),
            )));
        }
        let msg = pb::Evidence::decode(bytes).map_err(|e| {
            AttestationError::Decode(Detail::with(
                &SnpRefusal::Evidence,
                format!("SNP evidence: {e}"),
            ))
        })?;
        if msg.report.len() != REPORT_LEN {
            return Err(AttestationError::Decode(Detail::with(
                &SnpRefusal::Evidence,
                format!(
                    "SNP report has {} bytes, want exactly {REPORT_LEN}",
                    msg.report.len()
                ),
            )));
        }
        let report = SnpReport::from_bytes(&msg.report)?;
        if msg.certificates.len() > MAX_CERTIFICATES {
            return Err(AttestationError::Decode(Detail::with(
                &SnpRefusal::Evidence,
                format!(
                    "SNP evidence carries {} certificates, at most {MAX_CERTIFICATES} allowed",
                    msg.certificates.len()
                ),
            )));
        }
        let mut certificates = Vec::with_capacity(msg.certificates.len());
        for (i, c) in msg.certificates.into_iter().enumerate() {
            let kind = CertKind::from_proto(c.kind).ok_or_else(|| {
                AttestationError::Decode(Detail::with(
                    &SnpRefusal::Evidence,
                    format!("SNP evidence certificate {i} has unknown kind {}", c.kind),
                ))
            })?;
            certificates.push(CertEntry { kind, der: c.der });
        }
        check_certificate_bounds(&certificates).map_err(|e| match e {
            AttestationError::Issue(m) => AttestationError::Decode(m),
            other => other,
        })?;
        Ok(SnpEvidence {
            report,
            certificates,
        })
    }
}

fn check_certificate_bounds(certs: &[CertEntry]) -> Result<(), AttestationError> {
    if certs.len() > MAX_CERTIFICATES {
        return Err(AttestationError::Issue(Detail::with(
            &SnpRefusal::Evidence,
            format!(
                "SNP evidence carries {} certificates, at most {MAX_CERTIFICATES} allowed",
                certs.len()
            ),
        )));
    }
    for c in certs {
        if c.der.is_empty() || c.der.len() > MAX_CERTIFICATE_LEN {
            return Err(AttestationError::Issue(Detail::with(
                &SnpRefusal::Evidence,
                format!(
                    "SNP evidence {} certificate has {} bytes, want 1 to {MAX_CERTIFICATE_LEN}",
                    c.kind.name(),
                    c.der.len()
                ),
            )));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> SnpEvidence {
        SnpEvidence {
            report: SnpReport::from_bytes(&[7; REPORT_LEN]).unwrap(),
            certificates: vec![CertEntry {
                kind: CertKind::Vcek,
                der: vec![0x30, 0x00],
            }],
        }
    }

    #[test]
    fn round_trips() {
        let e = sample();
        assert_eq!(SnpEvidence::decode(&e.encode().unwrap()).unwrap(), e);
    }

    #[test]
    fn bounds_are_enforced() {
        let mut e = sample();
        e.certificates = vec![e.certificates[0].clone(); MAX_CERTIFICATES + 1];
        assert!(
            matches!(e.encode(), Err(e @ AttestationError::Issue(_)) if e.is(&SnpRefusal::Evidence))
        );
        let msg = pb::Evidence {
            report: vec![0; REPORT_LEN],
            certificates: vec![
                pb::Certificate {
                    kind: 1,
                    der: vec![1]
                };
                MAX_CERTIFICATES + 1
            ],
        };
        assert_eq!(
            SnpEvidence::decode(&msg.encode_to_vec()),
            Err(AttestationError::Decode(Detail::with(
                &SnpRefusal::Evidence,
                format!(
                    "SNP evidence carries {} certificates, at most {MAX_CERTIFICATES} allowed",
                    MAX_CERTIFICATES + 1
                )
            )))
        );
        let big = pb::Evidence {
            report: vec![0; REPORT_LEN],
            certificates: vec![pb::Certificate {
                kind: 1,
                der: vec![1; MAX_CERTIFICATE_LEN + 1],
            }],
        };
        assert!(matches!(
            SnpEvidence::decode(&big.encode_to_vec()),
            Err(AttestationError::Decode(d))
                if d.is(&SnpRefusal::Evidence) && d.text().contains("VCEK certificate has 8193 bytes")
        ));
        assert!(matches!(
            SnpEvidence::decode(&vec![0; MAX_EVIDENCE_LEN + 1]),
            Err(AttestationError::Decode(d)) if d.is(&SnpRefusal::Evidence) && d.text().contains("exceeds")
        ));
        let unknown = pb::Evidence {
            report: vec![0; REPORT_LEN],
            certificates: vec![pb::Certificate {
                kind: 99,
                der: vec![1],
            }],
        };
        assert!(matches!(
            SnpEvidence::decode(&unknown.encode_to_vec()),
            Err(AttestationError::Decode(d))
                if d.is(&SnpRefusal::Evidence) && d.text().contains("unknown kind 99")
        ));
    }
}
