//! The TPM structures of a GCE attestation that confboot-tpm does not
//! read: an RSA key's `TPMT_PUBLIC` and an RSASSA `TPMT_SIGNATURE`.

use confboot_tpm::structures::{ParseError, Reader, TPM_ALG_NULL, TPM_ALG_SHA256};

/// `TPM_ALG_RSA`.
pub const TPM_ALG_RSA: u16 = 0x0001;
/// `TPM_ALG_RSASSA`.
pub const TPM_ALG_RSASSA: u16 = 0x0014;
/// Largest RSA modulus read (4096 bits).
pub const MAX_MODULUS_LEN: usize = 512;
/// Largest `TPMT_PUBLIC` read.
pub const MAX_PUBLIC_LEN: usize = 1024;
/// `fixedTPM`.
pub const FIXED_TPM: u32 = 1 << 1;
/// `restricted`.
pub const RESTRICTED: u32 = 1 << 16;
/// `sign`.
pub const SIGN: u32 = 1 << 18;

/// An RSA attestation key's public area.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RsaPublic {
    /// The name algorithm.
    pub name_alg: u16,
    /// `TPMA_OBJECT`.
    pub attributes: u32,
    /// The signing scheme (`TPM_ALG_RSASSA` or `TPM_ALG_NULL`).
    pub scheme: u16,
    /// The scheme's hash (`TPM_ALG_NULL` without a scheme).
    pub scheme_hash: u16,
    /// The modulus, big-endian.
    pub modulus: Vec<u8>,
    /// The public exponent (65537 when the structure says 0).
    pub exponent: u32,
}

/// Parses an RSA `TPMT_PUBLIC` (nothing may follow it).
pub fn parse_rsa_public(public: &[u8]) -> Result<RsaPublic, ParseError> {
    if public.len() > MAX_PUBLIC_LEN {
        return Err(ParseError(format!(
            "TPMT_PUBLIC of {} bytes exceeds {MAX_PUBLIC_LEN}",
            public.len()
        )));
    }
    let mut r = Reader::new(public, "TPMT_PUBLIC");
    let kind = r.u16()?;
    if kind != TPM_ALG_RSA {
        return Err(ParseError(format!(
            "TPMT_PUBLIC of type {kind:#06x}, not RSA"
        )));
    }
    let name_alg = r.u16()?;
    let attributes = r.u32()?;
    r.tpm2b(64, "authPolicy")?;
    let symmetric = r.u16()?;
    if symmetric != TPM_ALG_NULL {
        // keyBits and mode of a storage key's symmetric definition.
        r.u16()?;
        r.u16()?;
    }
    let scheme = r.u16()?;
    let scheme_hash = if scheme == TPM_ALG_NULL {
        TPM_ALG_NULL
    } else {
        r.u16()?
    };
    let _key_bits = r.u16()?;
    let exponent = match r.u32()? {
        0 => 65_537,
        e => e,
    };
    let modulus = r.tpm2b(MAX_MODULUS_LEN, "unique")?.to_vec();
    r.finish()?;
    Ok(RsaPublic {
        name_alg,
        attributes,
        scheme,
        scheme_hash,
        modulus,
        exponent,
    })
}

/// Parses an RSASSA-with-SHA-256 `TPMT_SIGNATURE`; returns the signature.
pub fn parse_rsassa_sha256(signature: &[u8]) -> Result<Vec<u8>, ParseError> {
    let mut r = Reader::new(signature, "TPMT_SIGNATURE");
    let alg = r.u16()?;
    let hash = r.u16()?;
    if alg != TPM_ALG_RSASSA || hash != TPM_ALG_SHA256 {
        return Err(ParseError(format!(
            "TPMT_SIGNATURE of scheme {alg:#06x} hash {hash:#06x}, not RSASSA SHA-256"
        )));
    }
    let sig = r.tpm2b(MAX_MODULUS_LEN, "signature")?.to_vec();
    r.finish()?;
    Ok(sig)
}
