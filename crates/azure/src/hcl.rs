//! The HCL report: what Azure's paravisor (the HCL) leaves in the vTPM's
//! NV index [`HCL_REPORT_NV_INDEX`], all integers little-endian:
//!
//! | bytes | field |
//! |---|---|
//! | `0x000..0x020` | header: `"HCLA"`, version, report size, request type, status, reserved |
//! | `0x020..0x4C0` | the hardware report: an SEV-SNP `ATTESTATION_REPORT` (1184 bytes) or a TDX `TDREPORT` (1024 bytes, then zeros) |
//! | `0x4C0..0x4D4` | the IGVM request-data header: data size, version, report type, hash type, variable data size |
//! | `0x4D4..` | the variable data: the runtime claims (JSON, [`RuntimeClaims`](crate::RuntimeClaims)) |
//!
//! The hardware report's `REPORT_DATA` starts with the hash of the
//! variable data; that hash is checked by the verifier, not here. Parsing
//! is bounded ([`MAX_HCL_REPORT_LEN`]) and checks every size against the
//! others: the header's report size is the end of the variable data, the
//! IGVM data size is its header plus the variable data, and every byte
//! after the report size (the NV index is larger than the report) is zero.

use confboot_snp::REPORT_LEN as SNP_REPORT_LEN;

/// The vTPM NV index that holds the HCL report.
pub const HCL_REPORT_NV_INDEX: u32 = 0x0140_0001;
/// The largest HCL report read (the NV index holds 2600 bytes).
pub const MAX_HCL_REPORT_LEN: usize = 8 * 1024;
/// The HCL header's magic.
pub const HCL_MAGIC: [u8; 4] = *b"HCLA";
/// Where the hardware report starts.
pub const HARDWARE_REPORT_OFFSET: usize = 0x20;
/// The room the hardware report has (an SNP report fills it).
pub const HARDWARE_REPORT_AREA: usize = SNP_REPORT_LEN;
/// Where the IGVM request-data header starts.
pub const IGVM_HEADER_OFFSET: usize = HARDWARE_REPORT_OFFSET + HARDWARE_REPORT_AREA;
/// The IGVM request-data header's length.
pub const IGVM_HEADER_LEN: usize = 20;
/// Where the variable data (the runtime claims) starts.
pub const VARIABLE_DATA_OFFSET: usize = IGVM_HEADER_OFFSET + IGVM_HEADER_LEN;
/// The length of a TDX `TDREPORT`.
pub const TD_REPORT_LEN: usize = 1024;
/// The IGVM report type of an SEV-SNP hardware report.
pub const REPORT_TYPE_SNP: u32 = 2;
/// The IGVM report type of a TDX hardware report.
pub const REPORT_TYPE_TDX: u32 = 4;
/// The IGVM hash type SHA-256 (the only one read).
pub const HASH_TYPE_SHA256: u32 = 1;

/// Why bytes are not an HCL report. No variant quotes the report.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum HclError {
    /// Fewer bytes than the fixed part, or more than [`MAX_HCL_REPORT_LEN`].
    #[error("HCL report of {len} bytes: want {min} to {max}")]
    Length {
        /// The length given.
        len: usize,
        /// The fixed part's length.
        min: usize,
        /// [`MAX_HCL_REPORT_LEN`].
        max: usize,
    },
    /// The header does not start with `"HCLA"`.
    #[error("HCL report: magic is not \"HCLA\"")]
    Magic,
    /// The header's status is not 0 (success).
    #[error("HCL report: status {0}, want 0")]
    Status(u32),
    /// The IGVM header names a report type other than SNP (2) or TDX (4).
    #[error("HCL report: hardware report type {0} is neither SEV-SNP (2) nor TDX (4)")]
    ReportType(u32),
    /// The IGVM header names a hash other than SHA-256 (1).
    #[error("HCL report: runtime claims hash type {0}, only SHA-256 (1) is read")]
    HashType(u32),
    /// A size field disagrees with the others or with the bytes.
    #[error("HCL report: {field} is {value}, want {want}")]
    Size {
        /// Which field.
        field: &'static str,
        /// What it says.
        value: u64,
        /// What the rest of the report implies.
        want: u64,
    },
    /// The variable data runs past the end of the bytes.
    #[error("HCL report: {size} bytes of runtime claims do not fit in {len} bytes")]
    Truncated {
        /// The variable data size.
        size: usize,
        /// The report's length.
        len: usize,
    },
    /// A byte after the report, or after a TDREPORT in the hardware area, is not zero.
    #[error("HCL report: non-zero byte at offset {0:#x} outside every field")]
    Padding(usize),
}

/// The kind of hardware report an HCL report carries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HardwareKind {
    /// An AMD SEV-SNP attestation report, signed by the VCEK.
    SevSnp,
    /// An Intel TDX `TDREPORT` (MACed, verifiable only on the platform:
    /// the TD quote is its remotely verifiable form).
    Tdx,
}

impl HardwareKind {
    /// Name used in messages.
    pub fn name(self) -> &'static str {
        match self {
            HardwareKind::SevSnp => "SEV-SNP",
            HardwareKind::Tdx => "TDX",
        }
    }
}

/// A parsed HCL report; the bytes are the caller's.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HclReport<'a> {
    /// The header's version (1 and 2 are seen).
    pub version: u32,
    /// The header's request type.
    pub request_type: u32,
    /// What kind of hardware report it carries.
    pub kind: HardwareKind,
    /// The hardware report: [`SNP_REPORT_LEN`] bytes for SEV-SNP,
    /// [`TD_REPORT_LEN`] for TDX.
    pub hardware_report: &'a [u8],
    /// The IGVM header's version.
    pub igvm_version: u32,
    /// The variable data: the runtime claims JSON, as hashed.
    pub runtime_claims: &'a [u8],
}

fn u32_at(bytes: &[u8], at: usize) -> u32 {
    let mut b = [0u8; 4];
    b.copy_from_slice(&bytes[at..at + 4]);
    u32::from_le_bytes(b)
}

impl<'a> HclReport<'a> {
    /// Parses an HCL report (see the module documentation for the layout
    /// and what is checked).
    pub fn parse(bytes: &'a [u8]) -> Result<HclReport<'a>, HclError> {
        if bytes.len() < VARIABLE_DATA_OFFSET || bytes.len() > MAX_HCL_REPORT_LEN {
            return Err(HclError::Length {
                len: bytes.len(),
                min: VARIABLE_DATA_OFFSET,
                max: MAX_HCL_REPORT_LEN,
            });
        }
        if bytes[..4] != HCL_MAGIC {
            return Err(HclError::Magic);
        }
        let version = u32_at(bytes, 4);
        let report_size = u32_at(bytes, 8);
        let request_type = u32_at(bytes, 12);
        let status = u32_at(bytes, 16);
        if status != 0 {
            return Err(HclError::Status(status));
        }
        let igvm = IGVM_HEADER_OFFSET;
        let data_size = u32_at(bytes, igvm);
        let igvm_version = u32_at(bytes, igvm + 4);
        let report_type = u32_at(bytes, igvm + 8);
        let hash_type = u32_at(bytes, igvm + 12);
        let variable_size = u32_at(bytes, igvm + 16);
        let kind = match report_type {
            REPORT_TYPE_SNP => HardwareKind::SevSnp,
            REPORT_TYPE_TDX => HardwareKind::Tdx,
            other => return Err(HclError::ReportType(other)),
        };
        if hash_type != HASH_TYPE_SHA256 {
            return Err(HclError::HashType(hash_type));
        }
        let size = variable_size as usize;
        let end = VARIABLE_DATA_OFFSET
            .checked_add(size)
            .filter(|end| *end <= bytes.len())
            .ok_or(HclError::Truncated {
                size,
                len: bytes.len(),
            })?;
        let want_data = u64::from(variable_size) + IGVM_HEADER_LEN as u64;
        if u64::from(data_size) != want_data {
            return Err(HclError::Size {
                field: "IGVM data size",
                value: u64::from(data_size),
                want: want_data,
            });
        }
        if report_size as usize != end {
            return Err(HclError::Size {
                field: "report size",
                value: u64::from(report_size),
                want: end as u64,
            });
        }
        if let Some(at) = bytes[end..].iter().position(|b| *b != 0) {
            return Err(HclError::Padding(end + at));
        }
        let area = &bytes[HARDWARE_REPORT_OFFSET..IGVM_HEADER_OFFSET];
        let hardware_report = match kind {
            HardwareKind::SevSnp => area,
            HardwareKind::Tdx => {
                if let Some(at) = area[TD_REPORT_LEN..].iter().position(|b| *b != 0) {
                    return Err(HclError::Padding(
                        HARDWARE_REPORT_OFFSET + TD_REPORT_LEN + at,
                    ));
                }
                &area[..TD_REPORT_LEN]
            }
        };
        Ok(HclReport {
            version,
            request_type,
            kind,
            hardware_report,
            igvm_version,
            runtime_claims: &bytes[VARIABLE_DATA_OFFSET..end],
        })
    }

    /// SHA-256 of the runtime claims: what the hardware report's
    /// `REPORT_DATA` must start with.
    pub fn claims_digest(&self) -> [u8; 32] {
        let d = ring::digest::digest(&ring::digest::SHA256, self.runtime_claims);
        let mut out = [0u8; 32];
        out.copy_from_slice(d.as_ref());
        out
    }
}

/// Offsets in a TDX `TDREPORT` (Intel TDX module ABI).
pub mod td_report {
    /// `REPORTMACSTRUCT.REPORTDATA` (64 bytes).
    pub const REPORT_DATA: usize = 128;
    /// `TDINFO.MRTD` (48 bytes).
    pub const MRTD: usize = 512 + 16;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn minimal(kind: u32, claims: &[u8]) -> Vec<u8> {
        let mut b = vec![0u8; VARIABLE_DATA_OFFSET];
        b[..4].copy_from_slice(b"HCLA");
        b[4..8].copy_from_slice(&1u32.to_le_bytes());
        let end = (VARIABLE_DATA_OFFSET + claims.len()) as u32;
        b[8..12].copy_from_slice(&end.to_le_bytes());
        b[12..16].copy_from_slice(&2u32.to_le_bytes());
        let h = IGVM_HEADER_OFFSET;
        b[h..h + 4].copy_from_slice(&(claims.len() as u32 + 20).to_le_bytes());
        b[h + 4..h + 8].copy_from_slice(&1u32.to_le_bytes());
        b[h + 8..h + 12].copy_from_slice(&kind.to_le_bytes());
        b[h + 12..h + 16].copy_from_slice(&1u32.to_le_bytes());
        b[h + 16..h + 20].copy_from_slice(&(claims.len() as u32).to_le_bytes());
        b.extend_from_slice(claims);
        b.extend_from_slice(&[0u8; 16]);
        b
    }

    #[test]
    fn sizes_are_checked_against_each_other() {
        let good = minimal(2, b"{}");
        let r = HclReport::parse(&good).unwrap();
        assert_eq!(r.runtime_claims, b"{}");
        assert_eq!(r.kind, HardwareKind::SevSnp);

        let mut b = good.clone();
        b[8] ^= 1;
        assert!(matches!(
            HclReport::parse(&b),
            Err(HclError::Size {
                field: "report size",
                ..
            })
        ));
        let mut b = good.clone();
        b[IGVM_HEADER_OFFSET] ^= 1;
        assert!(matches!(
            HclReport::parse(&b),
            Err(HclError::Size {
                field: "IGVM data size",
                ..
            })
        ));
        let mut b = good.clone();
        b[IGVM_HEADER_OFFSET + 16] = 0xff;
        assert!(matches!(
            HclReport::parse(&b),
            Err(HclError::Truncated { .. })
        ));
        let mut b = good.clone();
        *b.last_mut().unwrap() = 1;
        assert!(matches!(HclReport::parse(&b), Err(HclError::Padding(_))));
        let mut b = good.clone();
        b[IGVM_HEADER_OFFSET + 12] = 2;
        assert_eq!(HclReport::parse(&b), Err(HclError::HashType(2)));
        assert_eq!(
            HclReport::parse(&minimal(3, b"{}")),
            Err(HclError::ReportType(3))
        );
        let mut b = good.clone();
        b[0] = b'X';
        assert_eq!(HclReport::parse(&b), Err(HclError::Magic));
        let mut b = good;
        b[16] = 1;
        assert_eq!(HclReport::parse(&b), Err(HclError::Status(1)));
        assert!(matches!(
            HclReport::parse(&[0u8; 10]),
            Err(HclError::Length { .. })
        ));
        assert!(matches!(
            HclReport::parse(&vec![0u8; MAX_HCL_REPORT_LEN + 1]),
            Err(HclError::Length { .. })
        ));
    }

    #[test]
    fn a_td_report_leaves_the_rest_of_its_area_zero() {
        let mut b = minimal(4, b"{}");
        assert_eq!(
            HclReport::parse(&b).unwrap().hardware_report.len(),
            TD_REPORT_LEN
        );
        b[HARDWARE_REPORT_OFFSET + TD_REPORT_LEN] = 1;
        assert_eq!(
            HclReport::parse(&b),
            Err(HclError::Padding(HARDWARE_REPORT_OFFSET + TD_REPORT_LEN))
        );
    }
}
