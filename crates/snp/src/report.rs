//! The SEV-SNP attestation report, read at the fixed offsets of AMD's SNP
//! firmware ABI ("ATTESTATION_REPORT", versions 2 to 5).
//!
//! confboot reads the raw bytes itself instead of the `sev` crate's
//! `AttestationReport`: that type re-encodes the report before hashing it
//! (so reserved bytes inside the signed range would escape the signature
//! check), refuses version-2 reports with a masked (all-zero) chip id
//! (`MaskedChipId`), and its API is announced to change. Parsing here only
//! checks the length; it never panics, whatever the input.

#![deny(
    clippy::cast_possible_truncation,
    clippy::cast_sign_loss,
    clippy::cast_possible_wrap
)]

use std::fmt;

use crate::SnpRefusal;
use confboot_attest::{AttestationError, Detail};

/// Length of an attestation report.
pub const REPORT_LEN: usize = 0x4A0;
/// The signed part of a report: bytes `0..0x2A0`.
pub const SIGNED_LEN: usize = 0x2A0;

/// Byte offsets of the report's fields.
pub mod offset {
    /// `VERSION` (u32).
    pub const VERSION: usize = 0x00;
    /// `GUEST_SVN` (u32).
    pub const GUEST_SVN: usize = 0x04;
    /// `POLICY` (u64).
    pub const POLICY: usize = 0x08;
    /// `FAMILY_ID` (16 bytes).
    pub const FAMILY_ID: usize = 0x10;
    /// `IMAGE_ID` (16 bytes).
    pub const IMAGE_ID: usize = 0x20;
    /// `VMPL` (u32).
    pub const VMPL: usize = 0x30;
    /// `SIGNATURE_ALGO` (u32).
    pub const SIGNATURE_ALGO: usize = 0x34;
    /// `CURRENT_TCB` (u64).
    pub const CURRENT_TCB: usize = 0x38;
    /// `PLATFORM_INFO` (u64).
    pub const PLATFORM_INFO: usize = 0x40;
    /// `KEY_INFO` (u32: bit 0 author key, bit 1 mask chip key, bits 4:2 signing key).
    pub const KEY_INFO: usize = 0x48;
    /// `REPORT_DATA` (64 bytes).
    pub const REPORT_DATA: usize = 0x50;
    /// `MEASUREMENT` (48 bytes).
    pub const MEASUREMENT: usize = 0x90;
    /// `HOST_DATA` (32 bytes).
    pub const HOST_DATA: usize = 0xC0;
    /// `ID_KEY_DIGEST` (48 bytes).
    pub const ID_KEY_DIGEST: usize = 0xE0;
    /// `AUTHOR_KEY_DIGEST` (48 bytes).
    pub const AUTHOR_KEY_DIGEST: usize = 0x110;
    /// `REPORT_ID` (32 bytes).
    pub const REPORT_ID: usize = 0x140;
    /// `REPORTED_TCB` (u64).
    pub const REPORTED_TCB: usize = 0x180;
    /// `CPUID_FAM_ID` (u8, version 3 and later).
    pub const CPUID_FAM_ID: usize = 0x188;
    /// `CPUID_MOD_ID` (u8, version 3 and later).
    pub const CPUID_MOD_ID: usize = 0x189;
    /// `CHIP_ID` (64 bytes).
    pub const CHIP_ID: usize = 0x1A0;
    /// `COMMITTED_TCB` (u64).
    pub const COMMITTED_TCB: usize = 0x1E0;
    /// `CURRENT_MINOR` (u8): the firmware's ABI minor version.
    pub const CURRENT_MINOR: usize = 0x1E9;
    /// `CURRENT_MAJOR` (u8): the firmware's ABI major version.
    pub const CURRENT_MAJOR: usize = 0x1EA;
    /// `LAUNCH_TCB` (u64).
    pub const LAUNCH_TCB: usize = 0x1F0;
    /// `SIGNATURE`: R (72 bytes little-endian), S (72 bytes little-endian), reserved.
    pub const SIGNATURE: usize = 0x2A0;
}

/// The AMD EPYC product line a report or certificate chain belongs to. It
/// decides the TCB layout and the root of trust.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Product {
    /// 3rd generation EPYC (family 19h, models 00h-0Fh).
    Milan,
    /// 4th generation EPYC (family 19h, models 10h-1Fh, A0h-AFh).
    Genoa,
    /// 5th generation EPYC (family 1Ah, models 00h-11h).
    Turin,
}

impl Product {
    /// Every product confboot knows.
    pub const ALL: [Product; 3] = [Product::Milan, Product::Genoa, Product::Turin];

    /// The name AMD uses (in certificate names and the KDS).
    pub fn name(self) -> &'static str {
        match self {
            Product::Milan => "Milan",
            Product::Genoa => "Genoa",
            Product::Turin => "Turin",
        }
    }

    /// Looks a product up by name (case-insensitive).
    pub fn from_name(name: &str) -> Option<Product> {
        Product::ALL
            .into_iter()
            .find(|p| p.name().eq_ignore_ascii_case(name))
    }

    /// The product of a CPUID family and model (as reports of version 3 and
    /// later carry them); `None` for a CPU confboot does not know.
    pub fn from_cpuid(family: u8, model: u8) -> Option<Product> {
        match (family, model) {
            (0x19, 0x00..=0x0F) => Some(Product::Milan),
            (0x19, 0x10..=0x1F) | (0x19, 0xA0..=0xAF) => Some(Product::Genoa),
            (0x1A, 0x00..=0x11) => Some(Product::Turin),
            _ => None,
        }
    }

    /// Whether TCB versions use the Turin layout (with an FMC component).
    pub fn has_fmc(self) -> bool {
        matches!(self, Product::Turin)
    }
}

impl fmt::Display for Product {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A TCB version: the security version numbers of the firmware components.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct TcbVersion {
    /// FMC (Turin and later; `None` before).
    pub fmc: Option<u8>,
    /// PSP bootloader SVN.
    pub bootloader: u8,
    /// PSP OS (TEE) SVN.
    pub tee: u8,
    /// SNP firmware SVN.
    pub snp: u8,
    /// CPU microcode SVN.
    pub microcode: u8,
}

impl TcbVersion {
    /// Decodes the 8 raw bytes of a TCB_VERSION in the layout of `product`:
    /// Milan/Genoa `[bootloader, tee, 0, 0, 0, 0, snp, microcode]`, Turin
    /// `[fmc, bootloader, tee, snp, 0, 0, 0, microcode]`.
    pub fn decode(raw: [u8; 8], product: Product) -> TcbVersion {
        if product.has_fmc() {
            TcbVersion {
                fmc: Some(raw[0]),
                bootloader: raw[1],
                tee: raw[2],
                snp: raw[3],
                microcode: raw[7],
            }
        } else {
            TcbVersion {
                fmc: None,
                bootloader: raw[0],
                tee: raw[1],
                snp: raw[6],
                microcode: raw[7],
            }
        }
    }

    /// The components as (name, value) pairs, FMC first when present.
    pub fn components(&self) -> Vec<(&'static str, u8)> {
        let mut v = Vec::with_capacity(5);
        if let Some(fmc) = self.fmc {
            v.push(("fmc", fmc));
        }
        v.extend([
            ("bootloader", self.bootloader),
            ("tee", self.tee),
            ("snp", self.snp),
            ("microcode", self.microcode),
        ]);
        v
    }
}

impl fmt::Display for TcbVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let parts: Vec<String> = self
            .components()
            .iter()
            .map(|(n, v)| format!("{n}={v}"))
            .collect();
        f.write_str(&parts.join(" "))
    }
}

/// Which key signed a report (`KEY_INFO.SIGNING_KEY`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SigningKey {
    /// The chip's VCEK (0).
    Vcek,
    /// A VLEK loaded by the cloud provider (1).
    Vlek,
    /// No key: the report is not signed (7).
    None,
    /// A reserved value.
    Reserved(u8),
}

impl fmt::Display for SigningKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SigningKey::Vcek => f.write_str("VCEK"),
            SigningKey::Vlek => f.write_str("VLEK"),
            SigningKey::None => f.write_str("none"),
            SigningKey::Reserved(v) => write!(f, "reserved ({v})"),
        }
    }
}

/// A view of a raw 1184-byte attestation report. Every accessor reads the
/// raw bytes, so what is checked is exactly what was signed.
#[derive(Clone, PartialEq, Eq)]
pub struct SnpReport {
    raw: Box<[u8; REPORT_LEN]>,
}

impl fmt::Debug for SnpReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SnpReport")
            .field("version", &self.version())
            .field("vmpl", &self.vmpl())
            .field(
                "measurement",
                &confboot_util::hex::encode(self.measurement()),
            )
            .finish_non_exhaustive()
    }
}

impl SnpReport {
    /// Takes the raw report; only its length is checked here.
    pub fn from_bytes(bytes: &[u8]) -> Result<SnpReport, AttestationError> {
        let raw: [u8; REPORT_LEN] = bytes.try_into().map_err(|_| {
            AttestationError::Decode(Detail::with(
                &SnpRefusal::Report,
                format!(
                    "SNP report has {} bytes, want exactly {REPORT_LEN}",
                    bytes.len()
                ),
            ))
        })?;
        Ok(SnpReport { raw: Box::new(raw) })
    }

    /// The raw report.
    pub fn as_bytes(&self) -> &[u8; REPORT_LEN] {
        &self.raw
    }

    /// The signed part (bytes `0..0x2A0`).
    pub fn signed_bytes(&self) -> &[u8] {
        &self.raw[..SIGNED_LEN]
    }

    fn array<const N: usize>(&self, at: usize) -> [u8; N] {
        let mut out = [0u8; N];
        out.copy_from_slice(&self.raw[at..at + N]);
        out
    }

    fn u32_at(&self, at: usize) -> u32 {
        u32::from_le_bytes(self.array(at))
    }

    fn u64_at(&self, at: usize) -> u64 {
        u64::from_le_bytes(self.array(at))
    }

    /// `VERSION`.
    pub fn version(&self) -> u32 {
        self.u32_at(offset::VERSION)
    }

    /// `GUEST_SVN`.
    pub fn guest_svn(&self) -> u32 {
        self.u32_at(offset::GUEST_SVN)
    }

    /// `POLICY`, the guest policy fixed at launch.
    pub fn guest_policy(&self) -> u64 {
        self.u64_at(offset::POLICY)
    }

    /// Whether the guest policy allows debugging (bit 19).
    pub fn debug_allowed(&self) -> bool {
        self.guest_policy() & (1 << 19) != 0
    }

    /// Whether the guest policy allows SMT on the host (bit 16).
    pub fn smt_allowed(&self) -> bool {
        self.guest_policy() & (1 << 16) != 0
    }

    /// The firmware's ABI version, `(major, minor)` (`CURRENT_MAJOR`,
    /// `CURRENT_MINOR`).
    pub fn firmware_abi(&self) -> (u8, u8) {
        let [major] = self.array(offset::CURRENT_MAJOR);
        let [minor] = self.array(offset::CURRENT_MINOR);
        (major, minor)
    }

    /// Whether the guest policy allows a migration agent (bit 18).
    pub fn migrate_ma_allowed(&self) -> bool {
        self.guest_policy() & (1 << 18) != 0
    }

    /// `FAMILY_ID`.
    pub fn family_id(&self) -> [u8; 16] {
        self.array(offset::FAMILY_ID)
    }

    /// `IMAGE_ID`.
    pub fn image_id(&self) -> [u8; 16] {
        self.array(offset::IMAGE_ID)
    }

    /// `VMPL` the report was requested at.
    pub fn vmpl(&self) -> u32 {
        self.u32_at(offset::VMPL)
    }

    /// `SIGNATURE_ALGO` (1 = ECDSA P-384 with SHA-384).
    pub fn signature_algo(&self) -> u32 {
        self.u32_at(offset::SIGNATURE_ALGO)
    }

    /// `PLATFORM_INFO`.
    pub fn platform_info(&self) -> u64 {
        self.u64_at(offset::PLATFORM_INFO)
    }

    /// `KEY_INFO`.
    pub fn key_info(&self) -> u32 {
        self.u32_at(offset::KEY_INFO)
    }

    /// The key that signed the report (`KEY_INFO` bits 4:2).
    pub fn signing_key(&self) -> SigningKey {
        // Bits 4:2 lie in the lowest byte.
        let [low, ..] = self.key_info().to_le_bytes();
        match (low >> 2) & 0x7 {
            0 => SigningKey::Vcek,
            1 => SigningKey::Vlek,
            7 => SigningKey::None,
            v => SigningKey::Reserved(v),
        }
    }

    /// `REPORT_DATA`: confboot puts `extra_data` zero-padded to 64 bytes here.
    pub fn report_data(&self) -> &[u8] {
        &self.raw[offset::REPORT_DATA..offset::REPORT_DATA + 64]
    }

    /// `MEASUREMENT`, the 48-byte launch digest.
    pub fn measurement(&self) -> &[u8] {
        &self.raw[offset::MEASUREMENT..offset::MEASUREMENT + 48]
    }

    /// `HOST_DATA`, set by the host at launch.
    pub fn host_data(&self) -> &[u8] {
        &self.raw[offset::HOST_DATA..offset::HOST_DATA + 32]
    }

    /// `ID_KEY_DIGEST`: SHA-384 of the ID key that signed the ID block (zero without one).
    pub fn id_key_digest(&self) -> &[u8] {
        &self.raw[offset::ID_KEY_DIGEST..offset::ID_KEY_DIGEST + 48]
    }

    /// `AUTHOR_KEY_DIGEST`.
    pub fn author_key_digest(&self) -> &[u8] {
        &self.raw[offset::AUTHOR_KEY_DIGEST..offset::AUTHOR_KEY_DIGEST + 48]
    }

    /// `REPORT_ID`.
    pub fn report_id(&self) -> &[u8] {
        &self.raw[offset::REPORT_ID..offset::REPORT_ID + 32]
    }

    /// `CHIP_ID` (all zero when the host masks it).
    pub fn chip_id(&self) -> &[u8] {
        &self.raw[offset::CHIP_ID..offset::CHIP_ID + 64]
    }

    /// Whether the chip id is masked (all zero).
    pub fn chip_id_masked(&self) -> bool {
        self.chip_id().iter().all(|b| *b == 0)
    }

    /// CPUID family and model, for reports of version 3 and later.
    pub fn cpuid(&self) -> Option<(u8, u8)> {
        (self.version() >= 3).then(|| {
            (
                self.raw[offset::CPUID_FAM_ID],
                self.raw[offset::CPUID_MOD_ID],
            )
        })
    }

    /// The product the report itself names: by CPUID for version 3 and
    /// later; `None` for version 2 or an unknown CPU.
    pub fn product_from_cpuid(&self) -> Option<Product> {
        self.cpuid().and_then(|(f, m)| Product::from_cpuid(f, m))
    }

    /// Raw `CURRENT_TCB`.
    pub fn current_tcb_raw(&self) -> [u8; 8] {
        self.array(offset::CURRENT_TCB)
    }

    /// Raw `REPORTED_TCB` (the TCB of the VCEK that signed the report).
    pub fn reported_tcb_raw(&self) -> [u8; 8] {
        self.array(offset::REPORTED_TCB)
    }

    /// Raw `COMMITTED_TCB`.
    pub fn committed_tcb_raw(&self) -> [u8; 8] {
        self.array(offset::COMMITTED_TCB)
    }

    /// Raw `LAUNCH_TCB` (the current TCB when the guest was launched).
    pub fn launch_tcb_raw(&self) -> [u8; 8] {
        self.array(offset::LAUNCH_TCB)
    }

    /// `REPORTED_TCB` in the layout of `product`.
    pub fn reported_tcb(&self, product: Product) -> TcbVersion {
        TcbVersion::decode(self.reported_tcb_raw(), product)
    }

    /// `LAUNCH_TCB` in the layout of `product`.
    pub fn launch_tcb(&self, product: Product) -> TcbVersion {
        TcbVersion::decode(self.launch_tcb_raw(), product)
    }

    /// `CURRENT_TCB` in the layout of `product`.
    pub fn current_tcb(&self, product: Product) -> TcbVersion {
        TcbVersion::decode(self.current_tcb_raw(), product)
    }

    /// The signature as the 96-byte fixed form `r ‖ s` (big-endian, 48
    /// bytes each) that ECDSA P-384 verifiers take. The report stores R and
    /// S as 72-byte little-endian numbers; their upper 24 bytes must be zero.
    pub fn signature_fixed(&self) -> Result<[u8; 96], AttestationError> {
        let mut out = [0u8; 96];
        for (i, name) in ["R", "S"].iter().enumerate() {
            let start = offset::SIGNATURE + 72 * i;
            let le = &self.raw[start..start + 72];
            if le[48..].iter().any(|b| *b != 0) {
                return Err(AttestationError::Signature(Detail::with(
                    &SnpRefusal::ReportSignature,
                    format!("report signature: component {name} exceeds 384 bits"),
                )));
            }
            for (j, b) in le[..48].iter().rev().enumerate() {
                out[48 * i + j] = *b;
            }
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tcb_layouts_follow_the_product() {
        let raw = [1, 2, 3, 4, 5, 6, 7, 8];
        let legacy = TcbVersion::decode(raw, Product::Milan);
        assert_eq!(
            legacy,
            TcbVersion {
                fmc: None,
                bootloader: 1,
                tee: 2,
                snp: 7,
                microcode: 8
            }
        );
        let turin = TcbVersion::decode(raw, Product::Turin);
        assert_eq!(
            turin,
            TcbVersion {
                fmc: Some(1),
                bootloader: 2,
                tee: 3,
                snp: 4,
                microcode: 8
            }
        );
        assert_eq!(legacy.to_string(), "bootloader=1 tee=2 snp=7 microcode=8");
    }

    #[test]
    fn length_must_be_exact() {
        assert!(SnpReport::from_bytes(&[0; REPORT_LEN]).is_ok());
        for len in [0, 1, REPORT_LEN - 1, REPORT_LEN + 1] {
            let err = SnpReport::from_bytes(&vec![0; len]).unwrap_err();
            assert_eq!(
                err,
                AttestationError::Decode(Detail::with(
                    &SnpRefusal::Report,
                    format!("SNP report has {len} bytes, want exactly {REPORT_LEN}")
                ))
            );
        }
    }

    #[test]
    fn products_by_cpuid_and_name() {
        assert_eq!(Product::from_cpuid(0x19, 0x01), Some(Product::Milan));
        assert_eq!(Product::from_cpuid(0x19, 0x11), Some(Product::Genoa));
        assert_eq!(Product::from_cpuid(0x1A, 0x02), Some(Product::Turin));
        assert_eq!(Product::from_cpuid(0x17, 0x01), None);
        assert_eq!(Product::from_name("genoa"), Some(Product::Genoa));
    }
}
