//! The evidence of an Azure confidential VM, and readers for the forms it
//! is recorded in.
//!
//! [`AzureEvidence`] is the HCL report (NV index `0x01400001`), the vTPM
//! quote ([`TpmQuote`]: `TPMS_ATTEST`, the raw RSA signature and the PCR
//! values), and what verifies the hardware report: the VCEK and its chain
//! for SEV-SNP, the TD quote for TDX.
//!
//! Readers, all bounded ([`MAX_EVIDENCE_JSON_LEN`], [`MAX_QUOTE_PART_LEN`],
//! [`MAX_PCRS`]):
//! - [`read_evidence_json`]: the evidence JSON of the Confidential
//!   Containers verifier (the recorded samples): version 0 with byte
//!   arrays (`quote` or `tpm_quote`, `report` or `hcl_report`, `vcek` as
//!   PEM, `td_quote`), versions 1 and 2 with hex quote parts and base64url
//!   report, VCEK (DER) and TD quote.
//! - [`TpmQuote::from_json`]: `{signature, message, pcrs}` in hex.
//! - [`TpmQuote::from_length_prefixed`]: u64-LE length-prefixed signature,
//!   message and PCR list (a serde bincode encoding).

use serde::Deserialize;

use confboot_util::json::{JsonError, object};

/// The largest evidence JSON read.
pub const MAX_EVIDENCE_JSON_LEN: usize = 128 * 1024;
/// The largest quote message or signature.
pub const MAX_QUOTE_PART_LEN: usize = confboot_tpm::structures::MAX_ATTEST_LEN;
/// The most PCR values a quote carries.
pub const MAX_PCRS: usize = 24;
/// The largest certificate or TD quote carried.
pub const MAX_BLOB_LEN: usize = 32 * 1024;

/// Why recorded evidence cannot be read.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum EvidenceError {
    /// The input is larger than its bound.
    #[error("{what} of {len} bytes exceeds {max}")]
    TooLarge {
        /// What was read.
        what: &'static str,
        /// Its length.
        len: usize,
        /// The bound.
        max: usize,
    },
    /// The JSON is not of the expected shape.
    #[error("evidence JSON: {0}")]
    Json(#[from] JsonError),
    /// A member is missing, of the wrong form or encoding.
    #[error("evidence: {0}")]
    Member(&'static str),
    /// A PCR value is not 32 bytes.
    #[error("PCR {index} has {len} bytes, want 32")]
    PcrLength {
        /// Its position.
        index: usize,
        /// Its length.
        len: usize,
    },
    /// A length-prefixed quote is truncated or has trailing bytes.
    #[error("length-prefixed quote: {0}")]
    Encoding(&'static str),
}

/// A vTPM quote: the signed `TPMS_ATTEST`, its signature (RSASSA-PKCS1-v1_5
/// with SHA-256 by `HCLAkPub`, the raw 256 or 512 bytes) and the values of
/// the PCRs it selects, in selection order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TpmQuote {
    /// The marshalled `TPMS_ATTEST`.
    pub message: Vec<u8>,
    /// The raw signature.
    pub signature: Vec<u8>,
    /// The PCR values (SHA-256), in selection order.
    pub pcrs: Vec<[u8; 32]>,
}

/// Evidence of an Azure confidential VM.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AzureEvidence {
    /// The HCL report.
    pub hcl_report: Vec<u8>,
    /// The vTPM quote.
    pub tpm_quote: TpmQuote,
    /// SEV-SNP: the VCEK and the chain sent with it (DER, VCEK first).
    pub vcek_chain: Vec<Vec<u8>>,
    /// TDX: the TD quote whose report data binds the runtime claims.
    pub td_quote: Option<Vec<u8>>,
}

fn check_len(what: &'static str, len: usize, max: usize) -> Result<(), EvidenceError> {
    if len > max {
        Err(EvidenceError::TooLarge { what, len, max })
    } else {
        Ok(())
    }
}

fn pcr_values(raw: Vec<Vec<u8>>) -> Result<Vec<[u8; 32]>, EvidenceError> {
    check_len("PCR list", raw.len(), MAX_PCRS)?;
    raw.into_iter()
        .enumerate()
        .map(|(index, v)| {
            <[u8; 32]>::try_from(v.as_slice()).map_err(|_| EvidenceError::PcrLength {
                index,
                len: v.len(),
            })
        })
        .collect()
}

impl TpmQuote {
    /// A quote from its parts, bounded.
    pub fn new(
        message: Vec<u8>,
        signature: Vec<u8>,
        pcrs: Vec<Vec<u8>>,
    ) -> Result<TpmQuote, EvidenceError> {
        check_len("quote message", message.len(), MAX_QUOTE_PART_LEN)?;
        check_len("quote signature", signature.len(), MAX_QUOTE_PART_LEN)?;
        Ok(TpmQuote {
            message,
            signature,
            pcrs: pcr_values(pcrs)?,
        })
    }

    /// `{"signature": hex, "message": hex, "pcrs": [hex, ...]}`.
    pub fn from_json(bytes: &[u8]) -> Result<TpmQuote, EvidenceError> {
        check_len("quote JSON", bytes.len(), MAX_EVIDENCE_JSON_LEN)?;
        let raw: RawQuote = object(bytes)?;
        raw.decode(Encoding::Hex)
    }

    /// The length-prefixed form: u64-LE length and signature bytes, u64-LE
    /// length and message bytes, u64-LE count and that many 32-byte PCRs
    /// (fixed arrays, no prefix of their own), nothing after.
    pub fn from_length_prefixed(bytes: &[u8]) -> Result<TpmQuote, EvidenceError> {
        let mut rest = bytes;
        let len = |rest: &mut &[u8], max: usize| -> Result<usize, EvidenceError> {
            let (head, tail) = rest
                .split_at_checked(8)
                .ok_or(EvidenceError::Encoding("truncated length"))?;
            let n = u64::from_le_bytes(head.try_into().expect("8 bytes"));
            *rest = tail;
            usize::try_from(n)
                .ok()
                .filter(|n| *n <= max)
                .ok_or(EvidenceError::Encoding("length out of bounds"))
        };
        let take = |rest: &mut &[u8], n: usize| -> Result<Vec<u8>, EvidenceError> {
            let (head, tail) = rest
                .split_at_checked(n)
                .ok_or(EvidenceError::Encoding("truncated bytes"))?;
            *rest = tail;
            Ok(head.to_vec())
        };
        let n = len(&mut rest, MAX_QUOTE_PART_LEN)?;
        let signature = take(&mut rest, n)?;
        let n = len(&mut rest, MAX_QUOTE_PART_LEN)?;
        let message = take(&mut rest, n)?;
        let count = len(&mut rest, MAX_PCRS)?;
        let mut pcrs = Vec::with_capacity(count);
        for _ in 0..count {
            // A PCR is a fixed 32-byte array: no length prefix of its own.
            pcrs.push(take(&mut rest, 32)?);
        }
        if !rest.is_empty() {
            return Err(EvidenceError::Encoding("trailing bytes"));
        }
        TpmQuote::new(message, signature, pcrs)
    }
}

/// Bytes as the recorded forms write them: a JSON array of numbers, or text.
#[derive(Deserialize)]
#[serde(untagged)]
enum Bytes {
    Array(Vec<u8>),
    Text(String),
}

#[derive(Clone, Copy)]
enum Encoding {
    Array,
    Hex,
    Base64Url,
}

impl Bytes {
    fn decode(
        self,
        encoding: Encoding,
        what: &'static str,
        max: usize,
    ) -> Result<Vec<u8>, EvidenceError> {
        let out = match (self, encoding) {
            (Bytes::Array(a), Encoding::Array) => a,
            (Bytes::Text(t), Encoding::Hex) => {
                confboot_util::hex::decode(&t).map_err(|_| EvidenceError::Member(what))?
            }
            (Bytes::Text(t), Encoding::Base64Url) => {
                confboot_util::base64::decode_url(&t).map_err(|_| EvidenceError::Member(what))?
            }
            _ => return Err(EvidenceError::Member(what)),
        };
        check_len(what, out.len(), max)?;
        Ok(out)
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawQuote {
    signature: Bytes,
    message: Bytes,
    pcrs: Vec<Bytes>,
}

impl RawQuote {
    fn decode(self, encoding: Encoding) -> Result<TpmQuote, EvidenceError> {
        check_len("PCR list", self.pcrs.len(), MAX_PCRS)?;
        let pcrs = self
            .pcrs
            .into_iter()
            .map(|p| p.decode(encoding, "PCR value", 64))
            .collect::<Result<Vec<_>, _>>()?;
        TpmQuote::new(
            self.message
                .decode(encoding, "quote message", MAX_QUOTE_PART_LEN)?,
            self.signature
                .decode(encoding, "quote signature", MAX_QUOTE_PART_LEN)?,
            pcrs,
        )
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawEvidence {
    version: Option<u32>,
    quote: Option<RawQuote>,
    tpm_quote: Option<RawQuote>,
    report: Option<Bytes>,
    hcl_report: Option<Bytes>,
    vcek: Option<String>,
    td_quote: Option<Bytes>,
}

/// Reads recorded evidence JSON (see the module documentation).
pub fn read_evidence_json(bytes: &[u8]) -> Result<AzureEvidence, EvidenceError> {
    check_len("evidence JSON", bytes.len(), MAX_EVIDENCE_JSON_LEN)?;
    let raw: RawEvidence = object(bytes)?;
    let (quote_enc, blob_enc) = match raw.version {
        None | Some(0) => (Encoding::Array, Encoding::Array),
        Some(1 | 2) => (Encoding::Hex, Encoding::Base64Url),
        Some(_) => return Err(EvidenceError::Member("version (0, 1 or 2)")),
    };
    let quote = match (raw.quote, raw.tpm_quote) {
        (Some(q), None) | (None, Some(q)) => q.decode(quote_enc)?,
        _ => return Err(EvidenceError::Member("exactly one of quote and tpm_quote")),
    };
    let hcl_report = match (raw.report, raw.hcl_report) {
        (Some(r), None) | (None, Some(r)) => {
            r.decode(blob_enc, "HCL report", crate::MAX_HCL_REPORT_LEN)?
        }
        _ => {
            return Err(EvidenceError::Member(
                "exactly one of report and hcl_report",
            ));
        }
    };
    let vcek_chain = match raw.vcek {
        None => Vec::new(),
        Some(text) => {
            check_len("VCEK", text.len(), MAX_BLOB_LEN)?;
            if text.trim_start().starts_with("-----BEGIN") {
                confboot_snp::certificates_from_pem_or_der(text.as_bytes())
                    .map_err(|_| EvidenceError::Member("vcek (PEM)"))?
            } else {
                vec![Bytes::Text(text).decode(blob_enc, "vcek (base64url DER)", MAX_BLOB_LEN)?]
            }
        }
    };
    let td_quote = raw
        .td_quote
        .map(|q| q.decode(blob_enc, "td_quote", MAX_BLOB_LEN))
        .transpose()?;
    Ok(AzureEvidence {
        hcl_report,
        tpm_quote: quote,
        vcek_chain,
        td_quote,
    })
}

/// Encodes evidence as [`read_evidence_json`] reads it back: version 1,
/// the quote's parts in hex, the HCL report in base64url, the VCEK and
/// its chain as PEM (the form `azure-sev-snp` evidence takes in aTLS).
pub fn encode_evidence(evidence: &AzureEvidence) -> Vec<u8> {
    use confboot_util::{base64, hex};
    let pcrs: Vec<String> = evidence
        .tpm_quote
        .pcrs
        .iter()
        .map(|p| format!("\"{}\"", hex::encode(p)))
        .collect();
    let mut out = format!(
        r#"{{"version":1,"tpm_quote":{{"signature":"{}","message":"{}","pcrs":[{}]}},"hcl_report":"{}""#,
        hex::encode(&evidence.tpm_quote.signature),
        hex::encode(&evidence.tpm_quote.message),
        pcrs.join(","),
        base64::encode_url(&evidence.hcl_report),
    );
    if !evidence.vcek_chain.is_empty() {
        let pem: String = evidence
            .vcek_chain
            .iter()
            .map(|der| base64::pem("CERTIFICATE", der))
            .collect();
        out.push_str(&format!(r#","vcek":"{}""#, pem.replace('\n', "\\n")));
    }
    if let Some(td) = &evidence.td_quote {
        out.push_str(&format!(r#","td_quote":"{}""#, base64::encode_url(td)));
    }
    out.push('}');
    out.into_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn length_prefixed_bounds() {
        let mut b = Vec::new();
        b.extend_from_slice(&2u64.to_le_bytes());
        b.extend_from_slice(&[1, 2]);
        b.extend_from_slice(&1u64.to_le_bytes());
        b.push(3);
        b.extend_from_slice(&1u64.to_le_bytes());
        b.extend_from_slice(&[7; 32]);
        let q = TpmQuote::from_length_prefixed(&b).unwrap();
        assert_eq!(
            (q.signature, q.message, q.pcrs),
            (vec![1, 2], vec![3], vec![[7; 32]])
        );
        let mut long = b.clone();
        long.push(0);
        assert_eq!(
            TpmQuote::from_length_prefixed(&long),
            Err(EvidenceError::Encoding("trailing bytes"))
        );
        assert!(TpmQuote::from_length_prefixed(&b[..b.len() - 1]).is_err());
        let mut huge = b;
        huge[..8].copy_from_slice(&u64::MAX.to_le_bytes());
        assert_eq!(
            TpmQuote::from_length_prefixed(&huge),
            Err(EvidenceError::Encoding("length out of bounds"))
        );
    }

    #[test]
    fn encoded_evidence_reads_back() {
        let evidence = AzureEvidence {
            hcl_report: vec![1, 2, 3],
            tpm_quote: TpmQuote::new(vec![4; 10], vec![5; 256], vec![vec![6; 32]; 24]).unwrap(),
            vcek_chain: vec![vec![0x30, 3, 2, 1, 7], vec![0x30, 3, 2, 1, 8]],
            td_quote: None,
        };
        assert_eq!(
            read_evidence_json(&encode_evidence(&evidence)),
            Ok(evidence)
        );
    }

    #[test]
    fn evidence_json_is_strict() {
        assert!(matches!(
            read_evidence_json(br#"{"version":1,"extra":0}"#),
            Err(EvidenceError::Json(_))
        ));
        assert_eq!(
            read_evidence_json(br#"{"version":7}"#),
            Err(EvidenceError::Member("version (0, 1 or 2)"))
        );
        let q = r#"{"signature":"00","message":"00","pcrs":[]}"#;
        let both = format!(r#"{{"version":1,"quote":{q},"tpm_quote":{q},"hcl_report":""}}"#);
        assert_eq!(
            read_evidence_json(both.as_bytes()),
            Err(EvidenceError::Member("exactly one of quote and tpm_quote"))
        );
        let arrays_in_v1 = r#"{"version":1,"tpm_quote":{"signature":[0],"message":"00","pcrs":[]},"hcl_report":""}"#;
        assert_eq!(
            read_evidence_json(arrays_in_v1.as_bytes()),
            Err(EvidenceError::Member("quote signature"))
        );
    }
}
