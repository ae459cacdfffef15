//! TPM 2.0 structures parsed and built by hand, without a TPM: the quote's
//! `TPMS_ATTEST`, an ECC `TPMT_PUBLIC`, an ECDSA `TPMT_SIGNATURE`, and the
//! attestation-key template. All big-endian; every length is checked against
//! the bytes that remain before it is used, and trailing bytes are refused.

#![deny(
    clippy::cast_possible_truncation,
    clippy::cast_sign_loss,
    clippy::cast_possible_wrap
)]

use confboot_util::bytes;

/// `TPM_GENERATED_VALUE`, the magic at the start of every `TPMS_ATTEST`.
pub const TPM_GENERATED_VALUE: u32 = 0xff54_4347;
/// `TPM_ST_ATTEST_QUOTE`.
pub const TPM_ST_ATTEST_QUOTE: u16 = 0x8018;
/// `TPM_ALG_SHA256`.
pub const TPM_ALG_SHA256: u16 = 0x000b;
/// `TPM_ALG_ECC`.
pub const TPM_ALG_ECC: u16 = 0x0023;
/// `TPM_ALG_ECDSA`.
pub const TPM_ALG_ECDSA: u16 = 0x0018;
/// `TPM_ALG_NULL`.
pub const TPM_ALG_NULL: u16 = 0x0010;
/// `TPM_ECC_NIST_P256`.
pub const TPM_ECC_NIST_P256: u16 = 0x0003;
/// Number of PCRs of a PC-client TPM.
pub const PCR_COUNT: usize = 24;
/// Size of a SHA-256 digest.
pub const SHA256_LEN: usize = 32;

/// `TPMA_OBJECT` bits of the attestation key.
pub mod object_attributes {
    /// The key cannot be duplicated.
    pub const FIXED_TPM: u32 = 1 << 1;
    /// The key's parent cannot change.
    pub const FIXED_PARENT: u32 = 1 << 4;
    /// The TPM generated the private part.
    pub const SENSITIVE_DATA_ORIGIN: u32 = 1 << 5;
    /// A password (empty here) authorizes use.
    pub const USER_WITH_AUTH: u32 = 1 << 6;
    /// Not subject to dictionary-attack lockout.
    pub const NO_DA: u32 = 1 << 10;
    /// Signs only TPM-generated structures (quotes), never outside data.
    pub const RESTRICTED: u32 = 1 << 16;
    /// A signing key.
    pub const SIGN: u32 = 1 << 18;
    /// What an attestation key must have: TPM-bound, TPM-generated, restricted signing.
    pub const REQUIRED_FOR_AK: u32 = FIXED_TPM | SENSITIVE_DATA_ORIGIN | RESTRICTED | SIGN;
    /// The attributes confboot creates AKs with.
    pub const AK: u32 = FIXED_TPM
        | FIXED_PARENT
        | SENSITIVE_DATA_ORIGIN
        | USER_WITH_AUTH
        | NO_DA
        | RESTRICTED
        | SIGN;
}

/// Why bytes could not be parsed as a TPM structure.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ParseError(pub String);

/// A bounded big-endian reader over a TPM structure: the shared byte reader
/// ([`confboot_util::bytes::Reader`]) with the structure's name in errors.
pub struct Reader<'a> {
    inner: bytes::Reader<'a>,
    what: &'static str,
}

impl<'a> Reader<'a> {
    /// A reader over `bytes`; `what` names the structure in errors.
    pub fn new(bytes: &'a [u8], what: &'static str) -> Self {
        Reader {
            inner: bytes::Reader::new(bytes),
            what,
        }
    }

    fn err(&self, msg: String) -> ParseError {
        ParseError(format!(
            "{} at offset {}: {msg}",
            self.what,
            self.inner.offset()
        ))
    }

    fn read_err(&self, e: bytes::ReadError) -> ParseError {
        match e {
            bytes::ReadError::Short {
                needed, remaining, ..
            } => self.err(format!("needs {needed} bytes, {remaining} remain")),
            bytes::ReadError::Trailing { trailing, .. } => {
                self.err(format!("{trailing} trailing bytes"))
            }
        }
    }

    /// Takes the next `n` bytes.
    pub fn take(&mut self, n: usize) -> Result<&'a [u8], ParseError> {
        self.inner.take(n).map_err(|e| self.read_err(e))
    }

    /// Reads a `u8`.
    pub fn u8(&mut self) -> Result<u8, ParseError> {
        self.inner.u8().map_err(|e| self.read_err(e))
    }

    /// Reads a big-endian `u16`.
    pub fn u16(&mut self) -> Result<u16, ParseError> {
        self.inner.u16_be().map_err(|e| self.read_err(e))
    }

    /// Reads a big-endian `u32`.
    pub fn u32(&mut self) -> Result<u32, ParseError> {
        self.inner.u32_be().map_err(|e| self.read_err(e))
    }

    /// Reads a big-endian `u64`.
    pub fn u64(&mut self) -> Result<u64, ParseError> {
        self.inner.u64_be().map_err(|e| self.read_err(e))
    }

    /// Reads a `TPM2B` (u16 size, then that many bytes) of at most `max` bytes.
    pub fn tpm2b(&mut self, max: usize, field: &str) -> Result<&'a [u8], ParseError> {
        let n = usize::from(self.u16()?);
        if n > max {
            return Err(self.err(format!("{field} has {n} bytes, at most {max} allowed")));
        }
        self.take(n)
    }

    /// Fails unless every byte was consumed.
    pub fn finish(&self) -> Result<(), ParseError> {
        self.inner.finish().map_err(|e| self.read_err(e))
    }

    /// Bytes not consumed yet.
    pub fn remaining(&self) -> usize {
        self.inner.remaining()
    }
}

/// A big-endian writer for building command frames and structures.
#[derive(Default)]
pub struct Writer {
    /// The bytes written so far.
    pub bytes: Vec<u8>,
}

impl Writer {
    /// Appends a `u8`.
    pub fn u8(&mut self, v: u8) -> &mut Self {
        self.bytes.push(v);
        self
    }
    /// Appends a big-endian `u16`.
    pub fn u16(&mut self, v: u16) -> &mut Self {
        self.bytes.extend_from_slice(&v.to_be_bytes());
        self
    }
    /// Appends a big-endian `u32`.
    pub fn u32(&mut self, v: u32) -> &mut Self {
        self.bytes.extend_from_slice(&v.to_be_bytes());
        self
    }
    /// Appends raw bytes.
    pub fn raw(&mut self, v: &[u8]) -> &mut Self {
        self.bytes.extend_from_slice(v);
        self
    }
    /// Appends a `TPM2B`: u16 length, then the bytes (which must fit a u16).
    pub fn tpm2b(&mut self, v: &[u8]) -> &mut Self {
        let n = u16::try_from(v.len()).expect("TPM2B payloads are built by us and small");
        self.u16(n).raw(v)
    }
}

/// One `TPMS_PCR_SELECTION` of a quote: a hash bank and the PCRs selected in it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PcrSelection {
    /// Hash algorithm of the bank (`TPM_ALG_*`).
    pub hash_alg: u16,
    /// Selected PCR indices, ascending.
    pub pcr_indices: Vec<u32>,
}

/// The bitmap of a `TPMS_PCR_SELECTION`: PCR i is bit (i mod 8) of byte i/8.
pub fn pcr_bitmap(pcr_indices: &[u32]) -> [u8; 3] {
    let mut bitmap = [0u8; 3];
    for &i in pcr_indices {
        if (i as usize) < PCR_COUNT {
            bitmap[i as usize / 8] |= 1 << (i % 8);
        }
    }
    bitmap
}

/// A parsed `TPMS_ATTEST` of type quote (`TPMS_QUOTE_INFO`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QuoteInfo {
    /// Qualified name of the signing key.
    pub qualified_signer: Vec<u8>,
    /// The caller's qualifying data (confboot: the 32-byte `extra_data`).
    pub extra_data: Vec<u8>,
    /// TPM clock in milliseconds.
    pub clock: u64,
    /// TPM resets since the clock was last cleared.
    pub reset_count: u32,
    /// TPM restarts since the last reset.
    pub restart_count: u32,
    /// Whether the clock is known not to have gone backwards.
    pub safe: bool,
    /// TPM firmware version.
    pub firmware_version: u64,
    /// The PCRs the quote covers.
    pub pcr_selections: Vec<PcrSelection>,
    /// Digest over the selected PCR values, in selection order.
    pub pcr_digest: Vec<u8>,
}

/// Largest `TPMS_ATTEST` accepted (a quote over 24 PCRs is about 150 bytes).
pub const MAX_ATTEST_LEN: usize = 1024;

/// Parses a `TPMS_ATTEST` that must be a quote: magic, type, every length.
pub fn parse_quote_attest(attest: &[u8]) -> Result<QuoteInfo, ParseError> {
    if attest.len() > MAX_ATTEST_LEN {
        return Err(ParseError(format!(
            "TPMS_ATTEST of {} bytes exceeds {MAX_ATTEST_LEN}",
            attest.len()
        )));
    }
    let mut r = Reader::new(attest, "TPMS_ATTEST");
    let magic = r.u32()?;
    if magic != TPM_GENERATED_VALUE {
        return Err(ParseError(format!(
            "TPMS_ATTEST magic {magic:#010x}, want {TPM_GENERATED_VALUE:#010x} (not TPM-generated)"
        )));
    }
    let attest_type = r.u16()?;
    if attest_type != TPM_ST_ATTEST_QUOTE {
        return Err(ParseError(format!(
            "TPMS_ATTEST type {attest_type:#06x}, want {TPM_ST_ATTEST_QUOTE:#06x} (quote)"
        )));
    }
    let qualified_signer = r.tpm2b(2 + 64, "qualifiedSigner")?.to_vec();
    let extra_data = r.tpm2b(64, "extraData")?.to_vec();
    let clock = r.u64()?;
    let reset_count = r.u32()?;
    let restart_count = r.u32()?;
    let safe = r.u8()? != 0;
    let firmware_version = r.u64()?;
    let count = r.u32()?;
    if count > 16 {
        return Err(ParseError(format!(
            "TPMS_ATTEST selects {count} PCR banks, at most 16 allowed"
        )));
    }
    let mut pcr_selections = Vec::with_capacity(count as usize);
    for _ in 0..count {
        let hash_alg = r.u16()?;
        let size = r.u8()? as usize;
        if size > 4 {
            return Err(ParseError(format!(
                "PCR select bitmap of {size} bytes, at most 4 allowed"
            )));
        }
        let bitmap = r.take(size)?;
        let pcr_indices = (0..size * 8)
            .filter(|i| bitmap[i / 8] & (1 << (i % 8)) != 0)
            .filter_map(|i| u32::try_from(i).ok())
            .collect();
        pcr_selections.push(PcrSelection {
            hash_alg,
            pcr_indices,
        });
    }
    let pcr_digest = r.tpm2b(64, "pcrDigest")?.to_vec();
    r.finish()?;
    Ok(QuoteInfo {
        qualified_signer,
        extra_data,
        clock,
        reset_count,
        restart_count,
        safe,
        firmware_version,
        pcr_selections,
        pcr_digest,
    })
}

/// An ECDSA signature from a `TPMT_SIGNATURE`, as fixed-width `r ‖ s`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EcdsaSignature {
    /// Hash algorithm the TPM signed with (`TPM_ALG_*`).
    pub hash_alg: u16,
    /// `r ‖ s`, each left-padded to 32 bytes.
    pub r_s: [u8; 64],
}

/// Largest `TPMT_SIGNATURE` accepted (ECDSA P-256 is 72 bytes).
pub const MAX_SIGNATURE_LEN: usize = 512;

/// Parses a `TPMT_SIGNATURE` that must be ECDSA over P-256 sized values.
pub fn parse_ecdsa_signature(signature: &[u8]) -> Result<EcdsaSignature, ParseError> {
    if signature.len() > MAX_SIGNATURE_LEN {
        return Err(ParseError(format!(
            "TPMT_SIGNATURE of {} bytes exceeds {MAX_SIGNATURE_LEN}",
            signature.len()
        )));
    }
    let mut r = Reader::new(signature, "TPMT_SIGNATURE");
    let sig_alg = r.u16()?;
    if sig_alg != TPM_ALG_ECDSA {
        return Err(ParseError(format!(
            "signature algorithm {sig_alg:#06x}, want ECDSA ({TPM_ALG_ECDSA:#06x})"
        )));
    }
    let hash_alg = r.u16()?;
    let sig_r = r.tpm2b(32, "signatureR")?;
    let sig_s = r.tpm2b(32, "signatureS")?;
    r.finish()?;
    let mut r_s = [0u8; 64];
    r_s[32 - sig_r.len()..32].copy_from_slice(sig_r);
    r_s[64 - sig_s.len()..].copy_from_slice(sig_s);
    Ok(EcdsaSignature { hash_alg, r_s })
}

/// Builds the `TPMT_SIGNATURE` of an ECDSA-SHA256 signature (used by tests
/// and by the provisioning tool's cross-check).
pub fn ecdsa_signature_bytes(r: &[u8], s: &[u8]) -> Vec<u8> {
    let mut w = Writer::default();
    w.u16(TPM_ALG_ECDSA).u16(TPM_ALG_SHA256).tpm2b(r).tpm2b(s);
    w.bytes
}

/// A parsed ECC `TPMT_PUBLIC` (the attestation key's public area).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EccPublic {
    /// Name algorithm (`TPM_ALG_*`).
    pub name_alg: u16,
    /// `TPMA_OBJECT` bits.
    pub object_attributes: u32,
    /// Signing scheme (`TPM_ALG_ECDSA` or `TPM_ALG_NULL`).
    pub scheme: u16,
    /// Hash of the signing scheme, if one is set.
    pub scheme_hash: Option<u16>,
    /// Curve (`TPM_ECC_*`).
    pub curve: u16,
    /// The public point, SEC1 uncompressed (`04 ‖ x ‖ y`, 65 bytes for P-256).
    pub point: Vec<u8>,
}

/// Largest `TPMT_PUBLIC` accepted.
pub const MAX_PUBLIC_LEN: usize = 1024;

/// Parses a `TPMT_PUBLIC` that must be an ECC P-256 key.
pub fn parse_ecc_public(public: &[u8]) -> Result<EccPublic, ParseError> {
    if public.len() > MAX_PUBLIC_LEN {
        return Err(ParseError(format!(
            "TPMT_PUBLIC of {} bytes exceeds {MAX_PUBLIC_LEN}",
            public.len()
        )));
    }
    let mut r = Reader::new(public, "TPMT_PUBLIC");
    let key_type = r.u16()?;
    if key_type != TPM_ALG_ECC {
        return Err(ParseError(format!(
            "key type {key_type:#06x}, want ECC ({TPM_ALG_ECC:#06x})"
        )));
    }
    let name_alg = r.u16()?;
    let object_attributes = r.u32()?;
    r.tpm2b(64, "authPolicy")?;
    let symmetric = r.u16()?;
    if symmetric != TPM_ALG_NULL {
        // keyBits and mode follow; a signing key has none.
        return Err(ParseError(format!(
            "symmetric algorithm {symmetric:#06x} on a signing key, want NULL"
        )));
    }
    let scheme = r.u16()?;
    let scheme_hash = if scheme == TPM_ALG_NULL {
        None
    } else {
        Some(r.u16()?)
    };
    let curve = r.u16()?;
    if curve != TPM_ECC_NIST_P256 {
        return Err(ParseError(format!(
            "curve {curve:#06x}, want NIST P-256 ({TPM_ECC_NIST_P256:#06x})"
        )));
    }
    let kdf = r.u16()?;
    if kdf != TPM_ALG_NULL {
        r.u16()?;
    }
    let x = r.tpm2b(32, "unique.x")?;
    let y = r.tpm2b(32, "unique.y")?;
    r.finish()?;
    let mut point = vec![0u8; 65];
    point[0] = 4;
    point[33 - x.len()..33].copy_from_slice(x);
    point[65 - y.len()..].copy_from_slice(y);
    Ok(EccPublic {
        name_alg,
        object_attributes,
        scheme,
        scheme_hash,
        curve,
        point,
    })
}

/// The `TPMT_PUBLIC` template of confboot's attestation key: a restricted
/// ECDSA-SHA256 P-256 signing key with an empty password. `CreatePrimary` is
/// deterministic, so the same template gives the same key under the same
/// owner seed.
pub fn ak_template() -> Vec<u8> {
    let mut w = Writer::default();
    w.u16(TPM_ALG_ECC)
        .u16(TPM_ALG_SHA256)
        .u32(object_attributes::AK)
        .tpm2b(&[]) // authPolicy
        .u16(TPM_ALG_NULL) // symmetric
        .u16(TPM_ALG_ECDSA) // scheme
        .u16(TPM_ALG_SHA256)
        .u16(TPM_ECC_NIST_P256)
        .u16(TPM_ALG_NULL) // kdf
        .tpm2b(&[]) // unique.x
        .tpm2b(&[]); // unique.y
    w.bytes
}

#[cfg(test)]
mod tests {
    use super::*;
    use tpm2_protocol::{TpmUnmarshal, data::TpmtPublic};

    #[test]
    fn ak_template_is_what_tpm2_protocol_reads() {
        let t = ak_template();
        let (public, rest) = TpmtPublic::unmarshal(&t).unwrap();
        assert!(rest.is_empty());
        assert_eq!(public.object_type.value(), TPM_ALG_ECC);
        assert_eq!(public.name_alg.value(), TPM_ALG_SHA256);
        assert_eq!(public.object_attributes.bits(), object_attributes::AK);
        let parsed = parse_ecc_public(&t).unwrap();
        assert_eq!(parsed.scheme, TPM_ALG_ECDSA);
        assert_eq!(parsed.scheme_hash, Some(TPM_ALG_SHA256));
        assert_eq!(parsed.point, {
            let mut p = vec![0; 65];
            p[0] = 4;
            p
        });
    }

    #[test]
    fn bitmap_puts_pcr_i_at_bit_i_mod_8_of_byte_i_div_8() {
        assert_eq!(pcr_bitmap(&[0, 7, 8, 23]), [0x81, 0x01, 0x80]);
        assert_eq!(pcr_bitmap(&(0..24).collect::<Vec<_>>()), [0xff; 3]);
    }

    #[test]
    fn signature_round_trips_and_pads() {
        let b = ecdsa_signature_bytes(&[1; 31], &[2; 32]);
        let s = parse_ecdsa_signature(&b).unwrap();
        assert_eq!(s.hash_alg, TPM_ALG_SHA256);
        assert_eq!(s.r_s[0], 0);
        assert_eq!(&s.r_s[1..32], &[1; 31]);
        assert_eq!(&s.r_s[32..], &[2; 32]);
        let long = ecdsa_signature_bytes(&[1; 33], &[2; 32]);
        assert!(parse_ecdsa_signature(&long).is_err());
        let mut trailing = b.clone();
        trailing.push(0);
        assert!(parse_ecdsa_signature(&trailing).is_err());
    }

    #[test]
    fn attest_parser_checks_magic_type_and_lengths() {
        let mut w = Writer::default();
        w.u32(TPM_GENERATED_VALUE)
            .u16(TPM_ST_ATTEST_QUOTE)
            .tpm2b(&[0; 34])
            .tpm2b(&[7; 32])
            .raw(&[0; 8])
            .u32(1)
            .u32(2)
            .u8(1)
            .raw(&[0; 8])
            .u32(1)
            .u16(TPM_ALG_SHA256)
            .u8(3)
            .raw(&[0xff, 0x80, 0])
            .tpm2b(&[9; 32]);
        let good = w.bytes;
        let q = parse_quote_attest(&good).unwrap();
        assert_eq!(q.extra_data, vec![7; 32]);
        assert_eq!(
            q.pcr_selections[0].pcr_indices,
            (0..8).chain([15]).collect::<Vec<u32>>()
        );
        assert_eq!(q.pcr_digest, vec![9; 32]);
        let mut bad = good.clone();
        bad[0] = 0;
        assert!(parse_quote_attest(&bad).unwrap_err().0.contains("magic"));
        let mut bad = good.clone();
        bad[5] = 0x17;
        assert!(parse_quote_attest(&bad).unwrap_err().0.contains("type"));
        for cut in 0..good.len() {
            assert!(parse_quote_attest(&good[..cut]).is_err(), "cut at {cut}");
        }
        let mut bad = good.clone();
        bad.push(0);
        assert!(parse_quote_attest(&bad).unwrap_err().0.contains("trailing"));
    }
}
