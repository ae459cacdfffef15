//! What a NitroTPM attester hands over: the NSM attestation document that
//! binds its attestation key, the TPM quote that key signed, and the PCR
//! values the quote covers; read from the JSON layout that records them
//! (`{nonce, pcrs: {sha384: {"0": hex, …}}, ak_pubkeys: {ecc_p256: {x, y}},
//! attestation: {tpm: {ecc_p256: {attest_data, signature}}, nitro: {document}}}`).

use std::collections::BTreeMap;

use confboot_tpm::structures::{MAX_ATTEST_LEN, MAX_SIGNATURE_LEN, PCR_COUNT};
use confboot_util::hex;
use serde_json::Value;

use crate::document::MAX_DOCUMENT_LEN;

/// Largest evidence JSON accepted (the recorded one is 13.5 KB).
pub const MAX_EVIDENCE_JSON_LEN: usize = 64 * 1024;
/// Most PCR banks the evidence may list.
pub const MAX_BANKS: usize = 4;
/// Largest nonce accepted from the file.
pub const MAX_NONCE_LEN: usize = 64;

/// `TPM_ALG_SHA1`.
pub const TPM_ALG_SHA1: u16 = 0x0004;
/// `TPM_ALG_SHA256`.
pub const TPM_ALG_SHA256: u16 = 0x000b;
/// `TPM_ALG_SHA384`.
pub const TPM_ALG_SHA384: u16 = 0x000c;
/// `TPM_ALG_SHA512`.
pub const TPM_ALG_SHA512: u16 = 0x000d;

/// The TCG algorithm of a bank's JSON name, and its digest length.
fn bank_alg(name: &str) -> Option<(u16, usize)> {
    match name {
        "sha1" => Some((TPM_ALG_SHA1, 20)),
        "sha256" => Some((TPM_ALG_SHA256, 32)),
        "sha384" => Some((TPM_ALG_SHA384, 48)),
        "sha512" => Some((TPM_ALG_SHA512, 64)),
        _ => None,
    }
}

/// The name of a bank's algorithm, for messages.
pub fn bank_name(alg: u16) -> &'static str {
    match alg {
        TPM_ALG_SHA1 => "SHA-1",
        TPM_ALG_SHA256 => "SHA-256",
        TPM_ALG_SHA384 => "SHA-384",
        TPM_ALG_SHA512 => "SHA-512",
        _ => "an unknown algorithm",
    }
}

/// Why a file is not NitroTPM evidence.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum EvidenceError {
    /// The file exceeds [`MAX_EVIDENCE_JSON_LEN`].
    #[error("evidence of {0} bytes exceeds {MAX_EVIDENCE_JSON_LEN}")]
    TooLarge(usize),
    /// Not JSON.
    #[error("not JSON: {0}")]
    Json(String),
    /// A field is missing, not of its type, not hex or beyond its bound.
    #[error("field {0} is missing, not hex of its length, or out of bounds")]
    Field(&'static str),
    /// A PCR bank of an unknown algorithm.
    #[error("PCR bank {0:?} is not sha1, sha256, sha384 or sha512")]
    Bank(String),
}

/// The values of one PCR bank, by index.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PcrBank {
    /// Its algorithm (`TPM_ALG_*`).
    pub alg: u16,
    /// The values, by PCR index.
    pub values: BTreeMap<u32, Vec<u8>>,
}

/// NitroTPM evidence.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NitroEvidence {
    /// The nonce the attester says it answered (the verifier compares its
    /// own).
    pub nonce: Vec<u8>,
    /// The PCR banks it reports, in the file's order.
    pub banks: Vec<PcrBank>,
    /// The attestation key, a P-256 point (`x`, `y`).
    pub ak: ([u8; 32], [u8; 32]),
    /// The quote's `TPMS_ATTEST`.
    pub attest: Vec<u8>,
    /// The quote's signature, DER-encoded ECDSA.
    pub quote_signature: Vec<u8>,
    /// The NSM attestation document (COSE_Sign1).
    pub document: Vec<u8>,
}

fn hex_field(
    v: &Value,
    path: &[&str],
    name: &'static str,
    max: usize,
) -> Result<Vec<u8>, EvidenceError> {
    let mut at = v;
    for key in path {
        at = at.get(key).ok_or(EvidenceError::Field(name))?;
    }
    let text = at.as_str().ok_or(EvidenceError::Field(name))?;
    if text.len() > max * 2 {
        return Err(EvidenceError::Field(name));
    }
    hex::decode(text).map_err(|_| EvidenceError::Field(name))
}

fn point(v: &Value, coordinate: &'static str) -> Result<[u8; 32], EvidenceError> {
    let name = if coordinate == "x" {
        "ak_pubkeys.ecc_p256.x"
    } else {
        "ak_pubkeys.ecc_p256.y"
    };
    hex_field(v, &["ak_pubkeys", "ecc_p256", coordinate], name, 32)?
        .try_into()
        .map_err(|_| EvidenceError::Field(name))
}

impl NitroEvidence {
    /// Reads the JSON layout above.
    pub fn from_json(text: &str) -> Result<NitroEvidence, EvidenceError> {
        if text.len() > MAX_EVIDENCE_JSON_LEN {
            return Err(EvidenceError::TooLarge(text.len()));
        }
        let v: Value =
            serde_json::from_str(text).map_err(|e| EvidenceError::Json(e.to_string()))?;
        let nonce = hex_field(&v, &["nonce"], "nonce", MAX_NONCE_LEN)?;
        let Some(Value::Object(banks_json)) = v.get("pcrs") else {
            return Err(EvidenceError::Field("pcrs"));
        };
        if banks_json.len() > MAX_BANKS {
            return Err(EvidenceError::Field("pcrs"));
        }
        let mut banks = Vec::new();
        for (name, values_json) in banks_json {
            let (alg, len) = bank_alg(name).ok_or_else(|| EvidenceError::Bank(name.clone()))?;
            let Value::Object(values_json) = values_json else {
                return Err(EvidenceError::Field("pcrs"));
            };
            if values_json.len() > PCR_COUNT {
                return Err(EvidenceError::Field("pcrs"));
            }
            let mut values = BTreeMap::new();
            for (index, value) in values_json {
                let index: u32 = index.parse().map_err(|_| EvidenceError::Field("pcrs"))?;
                let value = value
                    .as_str()
                    .and_then(|t| hex::decode(t).ok())
                    .filter(|b| b.len() == len)
                    .ok_or(EvidenceError::Field("pcrs"))?;
                values.insert(index, value);
            }
            banks.push(PcrBank { alg, values });
        }
        let ak = (point(&v, "x")?, point(&v, "y")?);
        let quote = ["attestation", "tpm", "ecc_p256"];
        Ok(NitroEvidence {
            nonce,
            banks,
            ak,
            attest: hex_field(
                &v,
                &[&quote[..], &["attest_data"]].concat(),
                "attest_data",
                MAX_ATTEST_LEN,
            )?,
            quote_signature: hex_field(
                &v,
                &[&quote[..], &["signature"]].concat(),
                "signature",
                MAX_SIGNATURE_LEN,
            )?,
            document: hex_field(
                &v,
                &["attestation", "nitro", "document"],
                "document",
                MAX_DOCUMENT_LEN,
            )?,
        })
    }

    /// The attestation key as an uncompressed SEC1 point (`04 ‖ x ‖ y`).
    pub fn ak_point(&self) -> [u8; 65] {
        let mut p = [4u8; 65];
        p[1..33].copy_from_slice(&self.ak.0);
        p[33..].copy_from_slice(&self.ak.1);
        p
    }
}
