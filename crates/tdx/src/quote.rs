//! The TDX quote, versions 4 and 5 (Intel DCAP, ECDSA P-256 attestation
//! key), read field by field from its bytes.
//!
//! Layout: a 48-byte header; for version 5 a body type (2 bytes) and body
//! size (4 bytes); the TD report body (584 bytes for TD 1.0, 648 for TD
//! 1.5); the signature data length (4 bytes) and the signature data: the
//! quote signature (64 bytes, `r ‖ s`), the attestation key (64 bytes,
//! `x ‖ y`), and certification data of type 6 holding the QE report (384
//! bytes), its signature (64 bytes), the QE authentication data (2-byte
//! length, then the data) and nested certification data of type 5: the PCK
//! certificate chain as PEM.
//!
//! Every length is checked against what is left before anything is read;
//! the whole quote is at most [`MAX_QUOTE_LEN`] bytes. Bytes after the
//! signature data (quote generators pad their buffer) are not signed; they
//! are counted ([`Quote::trailing_len`]) and never read.

#![deny(
    clippy::cast_possible_truncation,
    clippy::cast_sign_loss,
    clippy::cast_possible_wrap
)]

use std::fmt;

use confboot_util::bytes;

/// The largest quote read (a real one is about 5 KB, most of it the PCK
/// chain; a generator's buffer may be padded to 8 KB).
pub const MAX_QUOTE_LEN: usize = 32 * 1024;
/// Length of the quote header.
pub const HEADER_LEN: usize = 48;
/// Length of a TD 1.0 report body.
pub const TD10_BODY_LEN: usize = 584;
/// Length of a TD 1.5 report body (TD 1.0 and `TEE_TCB_SVN_2`, `MRSERVICETD`).
pub const TD15_BODY_LEN: usize = 648;
/// Length of an SGX enclave report body (the QE report).
pub const QE_REPORT_LEN: usize = 384;
/// `TEE_TYPE` of a TDX quote.
pub const TEE_TYPE_TDX: u32 = 0x81;
/// Attestation key type 2: ECDSA with P-256.
pub const ATTESTATION_KEY_ECDSA_P256: u16 = 2;
/// Certification data type 5: the PCK certificate chain, PEM.
pub const CERT_DATA_PCK_CHAIN: u16 = 5;
/// Certification data type 6: QE report certification data.
pub const CERT_DATA_QE_REPORT: u16 = 6;
/// Intel's QE vendor id (`939A7233-F79C-4CA9-940A-0DB3957F0607`).
pub const INTEL_QE_VENDOR_ID: [u8; 16] = [
    0x93, 0x9a, 0x72, 0x33, 0xf7, 0x9c, 0x4c, 0xa9, 0x94, 0x0a, 0x0d, 0xb3, 0x95, 0x7f, 0x06, 0x07,
];

/// Why bytes are not a TDX quote this parser reads.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum QuoteError {
    /// The quote is longer than [`MAX_QUOTE_LEN`].
    #[error("quote has {0} bytes, at most {MAX_QUOTE_LEN} are read")]
    TooLong(usize),
    /// A field runs past the end of the quote (or of its enclosing field).
    #[error("quote truncated: {field} needs {need} bytes, {have} are left")]
    Truncated {
        /// The field being read.
        field: &'static str,
        /// Bytes it needs.
        need: usize,
        /// Bytes left.
        have: usize,
    },
    /// A quote version other than 4 or 5.
    #[error("quote version {0} is not read (4 and 5 are)")]
    Version(u16),
    /// An attestation key type other than ECDSA P-256.
    #[error("attestation key type {0} is not ECDSA P-256 (2)")]
    KeyType(u16),
    /// A TEE type other than TDX.
    #[error("TEE type {0:#x} is not TDX (0x81)")]
    TeeType(u32),
    /// A version-5 body type other than TD 1.0 (2) or TD 1.5 (3).
    #[error("quote body type {0} is not a TD report (2: TD 1.0, 3: TD 1.5)")]
    BodyType(u16),
    /// A version-5 body size that is not its type's.
    #[error("quote body of type {body_type} has {size} bytes, want {want}")]
    BodySize {
        /// The body type.
        body_type: u16,
        /// The size the quote states.
        size: u32,
        /// The size of that type.
        want: usize,
    },
    /// Certification data of another type than expected.
    #[error("certification data type {actual}, want {expected}")]
    CertificationDataType {
        /// The type expected there.
        expected: u16,
        /// The type found.
        actual: u16,
    },
    /// Bytes left over inside the signature data.
    #[error("{0} unexplained bytes at the end of the signature data")]
    SignatureDataTrailing(usize),
}

/// The TD report body layout.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BodyType {
    /// TD 1.0 (584 bytes; every version-4 quote).
    Td10,
    /// TD 1.5 (648 bytes: adds `TEE_TCB_SVN_2` and `MRSERVICETD`).
    Td15,
}

impl BodyType {
    /// The body's length.
    pub fn len(self) -> usize {
        match self {
            BodyType::Td10 => TD10_BODY_LEN,
            BodyType::Td15 => TD15_BODY_LEN,
        }
    }

    /// Always false: a body has a length (for clippy's `len` convention).
    pub fn is_empty(self) -> bool {
        false
    }
}

impl fmt::Display for BodyType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            BodyType::Td10 => "TD 1.0",
            BodyType::Td15 => "TD 1.5",
        })
    }
}

/// The quote header.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Header {
    /// Quote version (4 or 5).
    pub version: u16,
    /// Attestation key type (2: ECDSA P-256).
    pub attestation_key_type: u16,
    /// TEE type (0x81: TDX).
    pub tee_type: u32,
    /// The QE vendor id (Intel's: [`INTEL_QE_VENDOR_ID`]).
    pub qe_vendor_id: [u8; 16],
    /// User data (the first 16 bytes: the platform's QE identity).
    pub user_data: [u8; 20],
}

/// The TD report body: what the TDX module measured and the TD asked to
/// be signed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TdReport {
    /// The layout.
    pub body_type: BodyType,
    /// `TEE_TCB_SVN`: the TDX module's SVNs.
    pub tee_tcb_svn: [u8; 16],
    /// `MRSEAM`: the TDX module's measurement.
    pub mr_seam: [u8; 48],
    /// `MRSIGNERSEAM`: the TDX module signer (zero for Intel's).
    pub mr_signer_seam: [u8; 48],
    /// `SEAMATTRIBUTES`.
    pub seam_attributes: [u8; 8],
    /// `TDATTRIBUTES` (little-endian bit field; [`td_attributes`]).
    pub td_attributes: [u8; 8],
    /// `XFAM`: the extended features the TD may use.
    pub xfam: [u8; 8],
    /// `MRTD`: the TD's initial contents (its firmware).
    pub mr_td: [u8; 48],
    /// `MRCONFIGID`: set by the host at creation.
    pub mr_config_id: [u8; 48],
    /// `MROWNER`: set by the host at creation.
    pub mr_owner: [u8; 48],
    /// `MROWNERCONFIG`: set by the host at creation.
    pub mr_owner_config: [u8; 48],
    /// `RTMR0` to `RTMR3`: run-time measurement registers.
    pub rtmr: [[u8; 48]; 4],
    /// `REPORTDATA`: the 64 bytes the TD chose.
    pub report_data: [u8; 64],
    /// `TEE_TCB_SVN_2` (TD 1.5 only).
    pub tee_tcb_svn_2: Option<[u8; 16]>,
    /// `MRSERVICETD` (TD 1.5 only).
    pub mr_service_td: Option<[u8; 48]>,
}

/// Names of the `TDATTRIBUTES` bits, and their masks.
pub mod td_attributes {
    /// Bit 0: the TD is debuggable (the host can read and change its state).
    pub const DEBUG: u64 = 1 << 0;
    /// Bit 28: EPT violations are not converted into #VE for the TD.
    pub const SEPT_VE_DISABLE: u64 = 1 << 28;
    /// Bit 29: the TD may be migrated.
    pub const MIGRATABLE: u64 = 1 << 29;
    /// Bit 30: the TD may use protection keys for supervisor pages.
    pub const PKS: u64 = 1 << 30;
    /// Bit 31: the TD may use Key Locker.
    pub const KL: u64 = 1 << 31;
    /// Bit 63: the TD may use the performance monitoring counters.
    pub const PERFMON: u64 = 1 << 63;

    /// Every named bit with its name.
    pub const NAMED: [(u64, &str); 6] = [
        (DEBUG, "DEBUG"),
        (SEPT_VE_DISABLE, "SEPT_VE_DISABLE"),
        (MIGRATABLE, "MIGRATABLE"),
        (PKS, "PKS"),
        (KL, "KL"),
        (PERFMON, "PERFMON"),
    ];

    /// The names of the bits set in `attributes`; a bit without a name is
    /// `bit N`.
    pub fn names(attributes: u64) -> Vec<String> {
        (0..64)
            .filter(|bit| attributes & (1u64 << bit) != 0)
            .map(|bit| {
                NAMED
                    .iter()
                    .find(|(mask, _)| *mask == 1u64 << bit)
                    .map(|(_, name)| (*name).to_string())
                    .unwrap_or_else(|| format!("bit {bit}"))
            })
            .collect()
    }
}

impl TdReport {
    /// `TDATTRIBUTES` as a number.
    pub fn td_attributes(&self) -> u64 {
        u64::from_le_bytes(self.td_attributes)
    }

    /// `XFAM` as a number.
    pub fn xfam(&self) -> u64 {
        u64::from_le_bytes(self.xfam)
    }

    /// Whether the TD is debuggable (`TDATTRIBUTES.DEBUG`).
    pub fn debug(&self) -> bool {
        self.td_attributes() & td_attributes::DEBUG != 0
    }

    fn parse(body_type: BodyType, b: &[u8]) -> TdReport {
        let mut r = Reader::new(b);
        // The caller checked the length: every read below is in bounds.
        fn next<const N: usize>(r: &mut Reader<'_>) -> [u8; N] {
            r.array("TD report").unwrap_or([0; N])
        }
        let tee_tcb_svn = next(&mut r);
        let mr_seam = next(&mut r);
        let mr_signer_seam = next(&mut r);
        let seam_attributes = next(&mut r);
        let td_attributes = next(&mut r);
        let xfam = next(&mut r);
        let mr_td = next(&mut r);
        let mr_config_id = next(&mut r);
        let mr_owner = next(&mut r);
        let mr_owner_config = next(&mut r);
        let rtmr = [next(&mut r), next(&mut r), next(&mut r), next(&mut r)];
        let report_data = next(&mut r);
        let (tee_tcb_svn_2, mr_service_td) = match body_type {
            BodyType::Td10 => (None, None),
            BodyType::Td15 => (Some(next(&mut r)), Some(next(&mut r))),
        };
        TdReport {
            body_type,
            tee_tcb_svn,
            mr_seam,
            mr_signer_seam,
            seam_attributes,
            td_attributes,
            xfam,
            mr_td,
            mr_config_id,
            mr_owner,
            mr_owner_config,
            rtmr,
            report_data,
            tee_tcb_svn_2,
            mr_service_td,
        }
    }
}

/// The Quoting Enclave's report (an SGX enclave report body), signed by
/// the PCK key.
#[derive(Clone, PartialEq, Eq)]
pub struct QeReport {
    raw: [u8; QE_REPORT_LEN],
}

impl fmt::Debug for QeReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("QeReport")
            .field("mr_signer", &confboot_util::hex::encode(&self.mr_signer()))
            .field("isv_prod_id", &self.isv_prod_id())
            .field("isv_svn", &self.isv_svn())
            .finish_non_exhaustive()
    }
}

impl QeReport {
    /// The 384 raw bytes (what the PCK key signed).
    pub fn as_bytes(&self) -> &[u8; QE_REPORT_LEN] {
        &self.raw
    }

    /// `CPUSVN`.
    pub fn cpu_svn(&self) -> [u8; 16] {
        array(&self.raw[0..16])
    }

    /// `MISCSELECT`.
    pub fn misc_select(&self) -> u32 {
        u32::from_le_bytes(array(&self.raw[16..20]))
    }

    /// `ATTRIBUTES` (16 bytes, in report order).
    pub fn attributes(&self) -> [u8; 16] {
        array(&self.raw[48..64])
    }

    /// `MRENCLAVE`.
    pub fn mr_enclave(&self) -> [u8; 32] {
        array(&self.raw[64..96])
    }

    /// `MRSIGNER`.
    pub fn mr_signer(&self) -> [u8; 32] {
        array(&self.raw[128..160])
    }

    /// `ISVPRODID`.
    pub fn isv_prod_id(&self) -> u16 {
        u16::from_le_bytes(array(&self.raw[256..258]))
    }

    /// `ISVSVN`.
    pub fn isv_svn(&self) -> u16 {
        u16::from_le_bytes(array(&self.raw[258..260]))
    }

    /// `REPORTDATA`.
    pub fn report_data(&self) -> [u8; 64] {
        array(&self.raw[320..384])
    }
}

/// A parsed TDX quote. It keeps the signed bytes as they came.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Quote {
    signed: Vec<u8>,
    /// The header.
    pub header: Header,
    /// The TD report body.
    pub report: TdReport,
    /// The quote signature, `r ‖ s` (32 bytes each, big-endian).
    pub signature: [u8; 64],
    /// The attestation key, `x ‖ y` (32 bytes each, big-endian).
    pub attestation_key: [u8; 64],
    /// The QE report.
    pub qe_report: QeReport,
    /// The QE report's signature by the PCK key, `r ‖ s`.
    pub qe_report_signature: [u8; 64],
    /// The QE authentication data.
    pub qe_auth_data: Vec<u8>,
    /// The PCK certificate chain (PEM: leaf, intermediate CA, root).
    pub pck_chain_pem: Vec<u8>,
    trailing_len: usize,
}

/// The shared bounded reader ([`bytes::Reader`]) with each field's name in
/// the quote's error.
struct Reader<'a> {
    inner: bytes::Reader<'a>,
}

impl<'a> Reader<'a> {
    fn new(bytes: &'a [u8]) -> Reader<'a> {
        Reader {
            inner: bytes::Reader::new(bytes),
        }
    }

    fn truncated(field: &'static str, e: bytes::ReadError) -> QuoteError {
        match e {
            bytes::ReadError::Short {
                needed, remaining, ..
            } => QuoteError::Truncated {
                field,
                need: needed,
                have: remaining,
            },
            bytes::ReadError::Trailing { trailing, .. } => QuoteError::Truncated {
                field,
                need: 0,
                have: trailing,
            },
        }
    }

    fn take(&mut self, field: &'static str, n: usize) -> Result<&'a [u8], QuoteError> {
        self.inner.take(n).map_err(|e| Self::truncated(field, e))
    }

    fn array<const N: usize>(&mut self, field: &'static str) -> Result<[u8; N], QuoteError> {
        self.inner.array().map_err(|e| Self::truncated(field, e))
    }

    fn u16(&mut self, field: &'static str) -> Result<u16, QuoteError> {
        self.inner.u16_le().map_err(|e| Self::truncated(field, e))
    }

    fn u32(&mut self, field: &'static str) -> Result<u32, QuoteError> {
        self.inner.u32_le().map_err(|e| Self::truncated(field, e))
    }

    fn left(&self) -> usize {
        self.inner.remaining()
    }
}

/// The first `N` bytes of `b` (callers pass exactly `N`; shorter input is
/// zero-filled rather than a panic).
fn array<const N: usize>(b: &[u8]) -> [u8; N] {
    let mut out = [0u8; N];
    let n = b.len().min(N);
    out[..n].copy_from_slice(&b[..n]);
    out
}

impl Quote {
    /// Parses a quote; see the module documentation for the layout.
    pub fn parse(bytes: &[u8]) -> Result<Quote, QuoteError> {
        if bytes.len() > MAX_QUOTE_LEN {
            return Err(QuoteError::TooLong(bytes.len()));
        }
        let mut r = Reader::new(bytes);
        let header_bytes = r.take("header", HEADER_LEN)?;
        let mut h = Reader::new(header_bytes);
        let version = h.u16("version")?;
        let attestation_key_type = h.u16("attestation key type")?;
        let tee_type = h.u32("TEE type")?;
        h.take("reserved", 4)?;
        let qe_vendor_id = h.array("QE vendor id")?;
        let user_data = h.array("user data")?;
        if version != 4 && version != 5 {
            return Err(QuoteError::Version(version));
        }
        if attestation_key_type != ATTESTATION_KEY_ECDSA_P256 {
            return Err(QuoteError::KeyType(attestation_key_type));
        }
        if tee_type != TEE_TYPE_TDX {
            return Err(QuoteError::TeeType(tee_type));
        }
        let body_type = if version == 5 {
            let body_type = r.u16("body type")?;
            let size = r.u32("body size")?;
            let kind = match body_type {
                2 => BodyType::Td10,
                3 => BodyType::Td15,
                other => return Err(QuoteError::BodyType(other)),
            };
            if bytes::len_of(size) != kind.len() {
                return Err(QuoteError::BodySize {
                    body_type,
                    size,
                    want: kind.len(),
                });
            }
            kind
        } else {
            BodyType::Td10
        };
        let body = r.take("TD report body", body_type.len())?;
        let signed_len = bytes.len() - r.left();
        let report = TdReport::parse(body_type, body);

        let sig_len = bytes::len_of(r.u32("signature data length")?);
        let sig_data = r.take("signature data", sig_len)?;
        let trailing_len = r.left();

        let mut s = Reader::new(sig_data);
        let signature = s.array("quote signature")?;
        let attestation_key = s.array("attestation key")?;
        let cert_type = s.u16("certification data type")?;
        if cert_type != CERT_DATA_QE_REPORT {
            return Err(QuoteError::CertificationDataType {
                expected: CERT_DATA_QE_REPORT,
                actual: cert_type,
            });
        }
        let cert_len = bytes::len_of(s.u32("certification data length")?);
        let cert_data = s.take("certification data", cert_len)?;
        if s.left() != 0 {
            return Err(QuoteError::SignatureDataTrailing(s.left()));
        }

        let mut c = Reader::new(cert_data);
        let qe_report = QeReport {
            raw: c.array("QE report")?,
        };
        let qe_report_signature = c.array("QE report signature")?;
        let auth_len = usize::from(c.u16("QE authentication data length")?);
        let qe_auth_data = c.take("QE authentication data", auth_len)?.to_vec();
        let inner_type = c.u16("PCK certification data type")?;
        if inner_type != CERT_DATA_PCK_CHAIN {
            return Err(QuoteError::CertificationDataType {
                expected: CERT_DATA_PCK_CHAIN,
                actual: inner_type,
            });
        }
        let inner_len = bytes::len_of(c.u32("PCK certification data length")?);
        let pck_chain_pem = c.take("PCK certificate chain", inner_len)?.to_vec();
        if c.left() != 0 {
            return Err(QuoteError::SignatureDataTrailing(c.left()));
        }

        Ok(Quote {
            signed: bytes[..signed_len].to_vec(),
            header: Header {
                version,
                attestation_key_type,
                tee_type,
                qe_vendor_id,
                user_data,
            },
            report,
            signature,
            attestation_key,
            qe_report,
            qe_report_signature,
            qe_auth_data,
            pck_chain_pem,
            trailing_len,
        })
    }

    /// The bytes the attestation key signed: the header and the body (for
    /// version 5 with the body type and size between them).
    pub fn signed_bytes(&self) -> &[u8] {
        &self.signed
    }

    /// How many bytes followed the signature data (unsigned; ignored).
    pub fn trailing_len(&self) -> usize {
        self.trailing_len
    }

    /// The attestation key as a SEC1 uncompressed point (`04 ‖ x ‖ y`).
    pub fn attestation_key_sec1(&self) -> [u8; 65] {
        let mut out = [0u8; 65];
        out[0] = 4;
        out[1..].copy_from_slice(&self.attestation_key);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn attribute_names() {
        assert_eq!(
            td_attributes::names(td_attributes::DEBUG | td_attributes::SEPT_VE_DISABLE | 1 << 5),
            vec!["DEBUG", "bit 5", "SEPT_VE_DISABLE"]
        );
        assert!(td_attributes::names(0).is_empty());
    }

    #[test]
    fn short_and_long_inputs_are_refused() {
        assert!(matches!(
            Quote::parse(&[]),
            Err(QuoteError::Truncated {
                field: "header",
                ..
            })
        ));
        assert_eq!(
            Quote::parse(&vec![0; MAX_QUOTE_LEN + 1]),
            Err(QuoteError::TooLong(MAX_QUOTE_LEN + 1))
        );
        let mut header = vec![0u8; HEADER_LEN];
        header[0] = 3;
        assert_eq!(Quote::parse(&header), Err(QuoteError::Version(3)));
    }
}
