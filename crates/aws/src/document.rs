//! The NSM attestation document: a COSE_Sign1 (RFC 9052) whose payload is
//! a CBOR map that the Nitro Security Module signs with an instance
//! certificate chained to the AWS Nitro root.
//!
//! A NitroTPM's document carries `module_id`, `digest` (`"SHA384"`),
//! `timestamp` (milliseconds since the epoch), `nitrotpm_pcrs` (the TPM's
//! SHA-384 PCRs by index), `certificate` (the signing leaf, DER), `cabundle`
//! (the chain from the root, DER), and `public_key`, `user_data` and
//! `nonce` (each a byte string or `null`).

use std::collections::BTreeMap;

use crate::cbor::{self, CborError, Limits, Value};

/// Largest COSE_Sign1 accepted (the recorded one is under 5 KB; a chain of
/// four certificates stays far below this).
pub const MAX_DOCUMENT_LEN: usize = 16 * 1024;
/// Largest certificate of the document.
pub const MAX_CERT_LEN: usize = 4096;
/// Most certificates in `cabundle`.
pub const MAX_CABUNDLE: usize = 8;
/// Most PCRs in `nitrotpm_pcrs` (the TPM's 24).
pub const MAX_PCRS: usize = 32;
/// Largest `public_key`, `user_data` or `nonce`.
pub const MAX_FIELD_LEN: usize = 1024;
/// COSE algorithm ES384 (ECDSA P-384 with SHA-384).
pub const COSE_ES384: i64 = -35;
/// COSE header label of the algorithm.
const COSE_ALG: i64 = 1;
/// The CBOR tag of a COSE_Sign1 (optional before the array).
const COSE_SIGN1_TAG: u64 = 18;

const LIMITS: Limits = Limits {
    max_bytes: MAX_DOCUMENT_LEN,
    max_depth: 4,
    max_items: 256,
};

/// Why bytes are not an NSM attestation document.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DocumentError {
    /// The COSE_Sign1 or its payload is not CBOR of the kinds read.
    #[error("{what}: {error}")]
    Cbor {
        /// Which part (`COSE_Sign1`, `protected header`, `payload`).
        what: &'static str,
        /// Why.
        error: CborError,
    },
    /// The envelope is not a COSE_Sign1 of four members.
    #[error("not a COSE_Sign1 (an array of protected, unprotected, payload, signature)")]
    NotCoseSign1,
    /// A field is missing or of another type.
    #[error("field {0} is missing or not of its type")]
    Field(&'static str),
    /// A field is larger than its bound.
    #[error("field {0} exceeds its bound")]
    Bound(&'static str),
}

/// A decoded COSE_Sign1, borrowing the bytes that are signed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CoseSign1<'a> {
    /// The serialized protected header, as signed.
    pub protected: &'a [u8],
    /// The algorithm the protected header names (`None`: it names none).
    pub alg: Option<i64>,
    /// The payload, as signed.
    pub payload: &'a [u8],
    /// The signature (`r ‖ s` for ES384).
    pub signature: &'a [u8],
}

impl<'a> CoseSign1<'a> {
    /// Decodes a COSE_Sign1, tagged (18) or not, with an embedded payload.
    pub fn parse(bytes: &'a [u8]) -> Result<CoseSign1<'a>, DocumentError> {
        let value = cbor::decode(bytes, LIMITS).map_err(|error| DocumentError::Cbor {
            what: "COSE_Sign1",
            error,
        })?;
        let array = match value {
            Value::Tag(COSE_SIGN1_TAG, inner) => *inner,
            other => other,
        };
        let Value::Array(items) = array else {
            return Err(DocumentError::NotCoseSign1);
        };
        let [
            Value::Bytes(protected),
            Value::Map(_),
            Value::Bytes(payload),
            Value::Bytes(signature),
        ] = items.as_slice()
        else {
            return Err(DocumentError::NotCoseSign1);
        };
        let alg = if protected.is_empty() {
            None
        } else {
            let header = cbor::decode(protected, LIMITS).map_err(|error| DocumentError::Cbor {
                what: "protected header",
                error,
            })?;
            let Value::Map(entries) = header else {
                return Err(DocumentError::Field("protected header"));
            };
            entries
                .iter()
                .find(|(k, _)| k.as_int() == Some(COSE_ALG))
                .map(|(_, v)| v.as_int().ok_or(DocumentError::Field("alg")))
                .transpose()?
        };
        Ok(CoseSign1 {
            protected,
            alg,
            payload,
            signature,
        })
    }

    /// The COSE `Sig_structure` that was signed:
    /// `["Signature1", protected, h'', payload]`.
    pub fn sig_structure(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.payload.len() + self.protected.len() + 32);
        cbor::head(&mut out, 4, 4);
        cbor::text_item(&mut out, "Signature1");
        cbor::bytes_item(&mut out, self.protected);
        cbor::bytes_item(&mut out, &[]);
        cbor::bytes_item(&mut out, self.payload);
        out
    }
}

/// The NSM attestation document's payload.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NsmDocument {
    /// The module's id (`i-…-tpm…` for a NitroTPM).
    pub module_id: String,
    /// The PCR digest algorithm (`"SHA384"`).
    pub digest: String,
    /// When the NSM signed, in milliseconds since the epoch.
    pub timestamp_ms: u64,
    /// The PCRs by index (`nitrotpm_pcrs`, or `pcrs` for an enclave).
    pub pcrs: BTreeMap<u32, Vec<u8>>,
    /// The signing certificate (DER).
    pub certificate: Vec<u8>,
    /// The chain from the root to the leaf's issuer (DER), root first.
    pub cabundle: Vec<Vec<u8>>,
    /// The public key the document binds (the TPM's AK for a NitroTPM).
    pub public_key: Option<Vec<u8>>,
    /// Data of the requester's choice.
    pub user_data: Option<Vec<u8>>,
    /// The requester's nonce.
    pub nonce: Option<Vec<u8>>,
}

/// A byte string of at most `max` bytes.
fn bstr<'a>(
    v: Option<&Value<'a>>,
    name: &'static str,
    max: usize,
) -> Result<&'a [u8], DocumentError> {
    match v {
        Some(Value::Bytes(b)) if b.len() <= max => Ok(b),
        Some(Value::Bytes(_)) => Err(DocumentError::Bound(name)),
        _ => Err(DocumentError::Field(name)),
    }
}

/// A byte string of at most `max` bytes, or `null` (or absent).
fn optional_bstr(
    v: Option<&Value<'_>>,
    name: &'static str,
    max: usize,
) -> Result<Option<Vec<u8>>, DocumentError> {
    match v {
        None | Some(Value::Null) => Ok(None),
        other => bstr(other, name, max).map(|b| Some(b.to_vec())),
    }
}

fn text(v: Option<&Value<'_>>, name: &'static str) -> Result<String, DocumentError> {
    match v {
        Some(Value::Text(t)) if t.len() <= MAX_FIELD_LEN => Ok((*t).to_string()),
        Some(Value::Text(_)) => Err(DocumentError::Bound(name)),
        _ => Err(DocumentError::Field(name)),
    }
}

impl NsmDocument {
    /// Decodes the payload of the COSE_Sign1.
    pub fn parse(payload: &[u8]) -> Result<NsmDocument, DocumentError> {
        let doc = cbor::decode(payload, LIMITS).map_err(|error| DocumentError::Cbor {
            what: "payload",
            error,
        })?;
        if !matches!(doc, Value::Map(_)) {
            return Err(DocumentError::Field("payload map"));
        }
        let module_id = text(doc.get("module_id"), "module_id")?;
        let digest = text(doc.get("digest"), "digest")?;
        let Some(Value::Uint(timestamp_ms)) = doc.get("timestamp") else {
            return Err(DocumentError::Field("timestamp"));
        };
        let (name, pcr_map) = match (doc.get("nitrotpm_pcrs"), doc.get("pcrs")) {
            (Some(Value::Map(m)), None) => ("nitrotpm_pcrs", m),
            (None, Some(Value::Map(m))) => ("pcrs", m),
            _ => return Err(DocumentError::Field("nitrotpm_pcrs")),
        };
        if pcr_map.len() > MAX_PCRS {
            return Err(DocumentError::Bound(name));
        }
        let mut pcrs = BTreeMap::new();
        for (k, v) in pcr_map {
            let Value::Uint(index) = k else {
                return Err(DocumentError::Field(name));
            };
            let index = u32::try_from(*index).map_err(|_| DocumentError::Field(name))?;
            pcrs.insert(index, bstr(Some(v), name, 64)?.to_vec());
        }
        let certificate = bstr(doc.get("certificate"), "certificate", MAX_CERT_LEN)?.to_vec();
        let Some(Value::Array(bundle)) = doc.get("cabundle") else {
            return Err(DocumentError::Field("cabundle"));
        };
        if bundle.is_empty() || bundle.len() > MAX_CABUNDLE {
            return Err(DocumentError::Bound("cabundle"));
        }
        let cabundle = bundle
            .iter()
            .map(|c| bstr(Some(c), "cabundle", MAX_CERT_LEN).map(<[u8]>::to_vec))
            .collect::<Result<_, _>>()?;
        Ok(NsmDocument {
            module_id,
            digest,
            timestamp_ms: *timestamp_ms,
            pcrs,
            certificate,
            cabundle,
            public_key: optional_bstr(doc.get("public_key"), "public_key", MAX_FIELD_LEN)?,
            user_data: optional_bstr(doc.get("user_data"), "user_data", MAX_FIELD_LEN)?,
            nonce: optional_bstr(doc.get("nonce"), "nonce", MAX_FIELD_LEN)?,
        })
    }
}
