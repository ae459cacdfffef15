//! Predicts the SEV-SNP launch digest (the report's `MEASUREMENT`) of a
//! QEMU guest under an OVMF build, from the firmware file, the kernel
//! hashes a measured direct boot puts in it, the vCPU count and type and
//! the guest features: no boot, no AMD hardware.
//!
//! What the AMD secure processor folds into the digest, in order, each page
//! as one `PAGE_INFO` (SEV-SNP firmware ABI, `SNP_LAUNCH_UPDATE`):
//!
//! 1. every 4 KiB page of the firmware file, loaded so that it ends at
//!    4 GiB, as a normal page (its SHA-384);
//! 2. every section the firmware's SEV metadata (`ASEV`) lists, in its
//!    order: a memory or SVSM area as zero pages, the secrets and CPUID
//!    pages by type only, and the kernel hashes page as a normal page
//!    holding the table of the kernel's, the initrd's and the command
//!    line's SHA-256 at the place the firmware's footer table names (zero
//!    pages when the launch is no direct boot);
//! 3. one VMSA page per vCPU: the boot processor's at the reset vector,
//!    each other at the firmware's SEV-ES reset block, in the state QEMU
//!    gives a vCPU.
//!
//! Only QEMU's vCPU state is modelled (not another VMM's), and a firmware
//! without the footer table, the reset block or the SEV metadata is
//! refused: such a firmware cannot start an SEV-SNP guest. The result is
//! checked against `sev-snp-measure` (`crates/measure/tests/snp_oracle.rs`).

use std::fmt;
use std::str::FromStr;

use ring::digest::{SHA256, SHA384, digest};

/// A page, as the secure processor measures memory.
pub const PAGE_LEN: usize = 4096;
/// The largest firmware file read (OVMF builds are 2 to 4 MiB).
pub const MAX_FIRMWARE_LEN: usize = 16 << 20;
/// The most sections a firmware's SEV metadata may list.
pub const MAX_METADATA_SECTIONS: usize = 64;
/// The most vCPUs a launch may have (QEMU's limit for a q35 machine
/// with an SEV-SNP guest is lower still).
pub const MAX_VCPUS: u32 = 512;
/// The largest section the metadata may describe.
const MAX_SECTION_LEN: u32 = 64 << 20;
/// Where the firmware ends in guest-physical memory.
const FOUR_GIB: u64 = 1 << 32;
/// The guest-physical address the secure processor measures a VMSA page at.
const VMSA_GPA: u64 = 0xFFFF_FFFF_F000;
/// The boot processor's first instruction (the reset vector).
const BSP_EIP: u32 = 0xFFFF_FFF0;
/// The size of one footer-table entry's trailer: its length and GUID.
const ENTRY_HEADER_LEN: usize = 18;
/// The `PAGE_INFO` structure's length.
const PAGE_INFO_LEN: usize = 0x70;

/// A GUID as the firmware stores it (mixed-endian, `bytes_le`), from its
/// text form's fields.
const fn guid(a: u32, b: u16, c: u16, d: [u8; 8]) -> [u8; 16] {
    let a = a.to_le_bytes();
    let b = b.to_le_bytes();
    let c = c.to_le_bytes();
    [
        a[0], a[1], a[2], a[3], b[0], b[1], c[0], c[1], d[0], d[1], d[2], d[3], d[4], d[5], d[6],
        d[7],
    ]
}

/// The GUID that ends OVMF's footer table (`96b582de-1fb2-45f7-baea-a366c55a082d`).
pub const FOOTER_TABLE_GUID: [u8; 16] = guid(
    0x96b5_82de,
    0x1fb2,
    0x45f7,
    [0xba, 0xea, 0xa3, 0x66, 0xc5, 0x5a, 0x08, 0x2d],
);
/// The entry naming the SEV-ES reset block (`00f771de-1a7e-4fcb-890e-68c77e2fb44e`).
pub const RESET_BLOCK_GUID: [u8; 16] = guid(
    0x00f7_71de,
    0x1a7e,
    0x4fcb,
    [0x89, 0x0e, 0x68, 0xc7, 0x7e, 0x2f, 0xb4, 0x4e],
);
/// The entry pointing at the SEV metadata (`dc886566-984a-4798-a75e-5585a7bf67cc`).
pub const SEV_METADATA_GUID: [u8; 16] = guid(
    0xdc88_6566,
    0x984a,
    0x4798,
    [0xa7, 0x5e, 0x55, 0x85, 0xa7, 0xbf, 0x67, 0xcc],
);
/// The entry naming where the kernel hashes table goes (`7255371f-3a3b-4b04-927b-1da6efa8d454`).
pub const HASHES_TABLE_GUID: [u8; 16] = guid(
    0x7255_371f,
    0x3a3b,
    0x4b04,
    [0x92, 0x7b, 0x1d, 0xa6, 0xef, 0xa8, 0xd4, 0x54],
);
/// The kernel hashes table's own GUID (`9438d606-4f22-4cc9-b479-a793d411fd21`).
const TABLE_HEADER_GUID: [u8; 16] = guid(
    0x9438_d606,
    0x4f22,
    0x4cc9,
    [0xb4, 0x79, 0xa7, 0x93, 0xd4, 0x11, 0xfd, 0x21],
);
/// The table entry of the kernel (`4de79437-abd2-427f-b835-d5b172d2045b`).
const KERNEL_ENTRY_GUID: [u8; 16] = guid(
    0x4de7_9437,
    0xabd2,
    0x427f,
    [0xb8, 0x35, 0xd5, 0xb1, 0x72, 0xd2, 0x04, 0x5b],
);
/// The table entry of the initrd (`44baf731-3a2f-4bd7-9af1-41e29169781d`).
const INITRD_ENTRY_GUID: [u8; 16] = guid(
    0x44ba_f731,
    0x3a2f,
    0x4bd7,
    [0x9a, 0xf1, 0x41, 0xe2, 0x91, 0x69, 0x78, 0x1d],
);
/// The table entry of the command line (`97d02dd8-bd20-4c94-aa78-e7714d36ab2a`).
const CMDLINE_ENTRY_GUID: [u8; 16] = guid(
    0x97d0_2dd8,
    0xbd20,
    0x4c94,
    [0xaa, 0x78, 0xe7, 0x71, 0x4d, 0x36, 0xab, 0x2a],
);

/// Why a launch digest cannot be predicted.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum SnpMeasureError {
    /// The firmware file is empty, over [`MAX_FIRMWARE_LEN`] or not whole pages.
    #[error("the firmware is {0} bytes: not a whole number of 4 KiB pages up to 16 MiB")]
    FirmwareSize(usize),
    /// The firmware has no OVMF footer table (no SEV support).
    #[error("the firmware has no OVMF footer table (it is no OVMF build with SEV support)")]
    NoFooterTable,
    /// An entry of the footer table is malformed.
    #[error("the firmware's footer table is malformed: {0}")]
    FooterTable(&'static str),
    /// The footer table names no SEV-ES reset block: the vCPUs other than
    /// the first could not start.
    #[error("the firmware names no SEV-ES reset block")]
    NoResetBlock,
    /// The footer table points at no SEV metadata.
    #[error("the firmware has no SEV metadata (it cannot launch an SEV-SNP guest)")]
    NoMetadata,
    /// The SEV metadata is malformed.
    #[error("the firmware's SEV metadata is malformed: {0}")]
    Metadata(&'static str),
    /// A metadata section has a type this prediction does not know.
    #[error("the firmware's SEV metadata lists a section of unknown type {0:#x}")]
    UnknownSection(u32),
    /// A direct boot's hashes were given and the firmware has no section
    /// to hold them (an OVMF build without `AmdSev`'s kernel hashes).
    #[error(
        "a measured direct boot needs a firmware with a kernel hashes section (OvmfPkg/AmdSev); this one has none"
    )]
    NoKernelHashesSection,
    /// The hashes table's place is not inside the kernel hashes section's page.
    #[error("the firmware's kernel hashes table at {0:#x} is not inside its kernel hashes page")]
    HashesTableOutside(u64),
    /// The vCPU count is 0 or over [`MAX_VCPUS`].
    #[error("{0} vCPUs: a launch has 1 to 512")]
    Vcpus(u32),
}

/// The type of a section of the firmware's SEV metadata.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SectionKind {
    /// Memory the firmware wants accepted before it runs (zero pages).
    Memory,
    /// The secrets page the secure processor fills.
    Secrets,
    /// The CPUID page the secure processor checks.
    Cpuid,
    /// The SVSM's calling area (zero pages).
    SvsmCallingArea,
    /// The page that holds the kernel hashes table of a direct boot.
    KernelHashes,
}

impl SectionKind {
    fn from_raw(raw: u32) -> Result<SectionKind, SnpMeasureError> {
        Ok(match raw {
            1 => SectionKind::Memory,
            2 => SectionKind::Secrets,
            3 => SectionKind::Cpuid,
            4 => SectionKind::SvsmCallingArea,
            0x10 => SectionKind::KernelHashes,
            other => return Err(SnpMeasureError::UnknownSection(other)),
        })
    }
}

/// One section of the firmware's SEV metadata.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MetadataSection {
    /// Its guest-physical address (page aligned).
    pub gpa: u32,
    /// Its length in bytes (whole pages).
    pub len: u32,
    /// What it is.
    pub kind: SectionKind,
}

/// An OVMF firmware file, parsed for what an SEV-SNP launch measures.
#[derive(Clone, Debug)]
pub struct SnpFirmware {
    bytes: Vec<u8>,
    reset_eip: u32,
    sections: Vec<MetadataSection>,
    hashes_table_gpa: Option<u32>,
}

fn u16_at(bytes: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_le_bytes(bytes.get(at..at + 2)?.try_into().ok()?))
}

fn u32_at(bytes: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_le_bytes(bytes.get(at..at + 4)?.try_into().ok()?))
}

impl SnpFirmware {
    /// Parses a firmware file (OVMF's `OVMF.fd` or `OVMF_CODE.fd`, as QEMU
    /// maps it below 4 GiB): its footer table, its SEV-ES reset block and
    /// its SEV metadata, each bounded.
    pub fn parse(bytes: Vec<u8>) -> Result<SnpFirmware, SnpMeasureError> {
        let len = bytes.len();
        if len == 0 || len > MAX_FIRMWARE_LEN || !len.is_multiple_of(PAGE_LEN) {
            return Err(SnpMeasureError::FirmwareSize(len));
        }
        // The footer entry ends 32 bytes before the end of the file.
        let footer_at = len - 32 - ENTRY_HEADER_LEN;
        if bytes[footer_at + 2..footer_at + ENTRY_HEADER_LEN] != FOOTER_TABLE_GUID {
            return Err(SnpMeasureError::NoFooterTable);
        }
        let footer_len = usize::from(u16_at(&bytes, footer_at).unwrap_or(0));
        let table_len =
            footer_len
                .checked_sub(ENTRY_HEADER_LEN)
                .ok_or(SnpMeasureError::FooterTable(
                    "the footer is shorter than its header",
                ))?;
        let table_start = footer_at
            .checked_sub(table_len)
            .ok_or(SnpMeasureError::FooterTable(
                "the table starts before the file",
            ))?;
        let mut table = &bytes[table_start..footer_at];
        let (mut reset_eip, mut metadata_offset, mut hashes_table_gpa) = (None, None, None);
        // Entries are read from the end: each ends with its length and GUID.
        while table.len() >= ENTRY_HEADER_LEN {
            let trailer = table.len() - ENTRY_HEADER_LEN;
            let entry_len = usize::from(u16_at(table, trailer).unwrap_or(0));
            if entry_len < ENTRY_HEADER_LEN || entry_len > table.len() {
                return Err(SnpMeasureError::FooterTable(
                    "an entry's length is out of the table",
                ));
            }
            let guid = &table[trailer + 2..];
            let data = &table[table.len() - entry_len..trailer];
            let first_u32 = || {
                u32_at(data, 0).ok_or(SnpMeasureError::FooterTable(
                    "an entry is too short for its value",
                ))
            };
            if guid == RESET_BLOCK_GUID {
                reset_eip = Some(first_u32()?);
            } else if guid == SEV_METADATA_GUID {
                metadata_offset = Some(first_u32()?);
            } else if guid == HASHES_TABLE_GUID {
                hashes_table_gpa = Some(first_u32()?);
            }
            table = &table[..table.len() - entry_len];
        }
        let reset_eip = reset_eip.ok_or(SnpMeasureError::NoResetBlock)?;
        let offset = metadata_offset.ok_or(SnpMeasureError::NoMetadata)? as usize;
        let sections = Self::metadata(&bytes, offset)?;
        Ok(SnpFirmware {
            bytes,
            reset_eip,
            sections,
            hashes_table_gpa,
        })
    }

    /// The SEV metadata `offset` bytes before the end of the file.
    fn metadata(bytes: &[u8], offset: usize) -> Result<Vec<MetadataSection>, SnpMeasureError> {
        let start = bytes
            .len()
            .checked_sub(offset)
            .ok_or(SnpMeasureError::Metadata("it starts before the file"))?;
        let header = bytes
            .get(start..start + 16)
            .ok_or(SnpMeasureError::Metadata("its header is past the file"))?;
        if &header[..4] != b"ASEV" {
            return Err(SnpMeasureError::Metadata("no ASEV signature"));
        }
        if u32_at(header, 8) != Some(1) {
            return Err(SnpMeasureError::Metadata("not version 1"));
        }
        let declared = u32_at(header, 4).unwrap_or(0) as usize;
        let count = u32_at(header, 12).unwrap_or(0) as usize;
        if count > MAX_METADATA_SECTIONS {
            return Err(SnpMeasureError::Metadata("more than 64 sections"));
        }
        if declared < 16 + 12 * count {
            return Err(SnpMeasureError::Metadata(
                "its length does not hold its sections",
            ));
        }
        let mut sections = Vec::with_capacity(count);
        for i in 0..count {
            let at = start + 16 + 12 * i;
            let item = bytes
                .get(at..at + 12)
                .ok_or(SnpMeasureError::Metadata("a section is past the file"))?;
            let (gpa, len, kind) = (
                u32_at(item, 0).unwrap_or(0),
                u32_at(item, 4).unwrap_or(0),
                u32_at(item, 8).unwrap_or(0),
            );
            let kind = SectionKind::from_raw(kind)?;
            let one_page = matches!(
                kind,
                SectionKind::Secrets | SectionKind::Cpuid | SectionKind::KernelHashes
            );
            if one_page && len as usize != PAGE_LEN {
                return Err(SnpMeasureError::Metadata(
                    "a secrets, CPUID or kernel hashes section is not one page",
                ));
            }
            if !(gpa as usize).is_multiple_of(PAGE_LEN)
                || len == 0
                || !(len as usize).is_multiple_of(PAGE_LEN)
                || len > MAX_SECTION_LEN
                || u64::from(gpa) + u64::from(len) > FOUR_GIB
            {
                return Err(SnpMeasureError::Metadata(
                    "a section is not whole pages below 4 GiB",
                ));
            }
            sections.push(MetadataSection { gpa, len, kind });
        }
        Ok(sections)
    }

    /// Where the firmware starts in guest-physical memory (it ends at 4 GiB).
    pub fn gpa(&self) -> u64 {
        FOUR_GIB - self.bytes.len() as u64
    }

    /// The sections of its SEV metadata, in their order.
    pub fn sections(&self) -> &[MetadataSection] {
        &self.sections
    }

    /// The address the vCPUs other than the first start at.
    pub fn reset_eip(&self) -> u32 {
        self.reset_eip
    }

    /// Whether the firmware can take a measured direct boot: it has a
    /// kernel hashes section and names where the table goes.
    pub fn has_kernel_hashes(&self) -> bool {
        self.hashes_table_gpa.is_some()
            && self
                .sections
                .iter()
                .any(|s| s.kind == SectionKind::KernelHashes)
    }
}

/// The SHA-256 digests a measured direct boot's kernel hashes table holds,
/// as QEMU fills it: of the kernel file, of the initrd file (of no bytes
/// without one), and of the command line with its terminating NUL byte.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KernelHashes {
    /// SHA-256 of the kernel file.
    pub kernel: [u8; 32],
    /// SHA-256 of the initrd file, or of no bytes.
    pub initrd: [u8; 32],
    /// SHA-256 of the command line and its NUL.
    pub cmdline: [u8; 32],
}

/// The length of the table with its padding to 16 bytes.
pub const HASHES_TABLE_LEN: usize = 176;

impl KernelHashes {
    /// The hashes of a kernel, an initrd and a command line.
    pub fn of(kernel: &[u8], initrd: Option<&[u8]>, cmdline: &str) -> KernelHashes {
        let mut line = Vec::with_capacity(cmdline.len() + 1);
        line.extend_from_slice(cmdline.as_bytes());
        line.push(0);
        KernelHashes::of_digests(
            sha256(kernel),
            sha256(initrd.unwrap_or_default()),
            sha256(&line),
        )
    }

    /// The hashes from digests already taken (of files too large to hold).
    pub fn of_digests(kernel: [u8; 32], initrd: [u8; 32], cmdline: [u8; 32]) -> KernelHashes {
        KernelHashes {
            kernel,
            initrd,
            cmdline,
        }
    }

    /// The table as it lies in guest memory: its GUID and length, then the
    /// command line's, the initrd's and the kernel's entries (GUID, length,
    /// digest), padded with zeros to 16 bytes.
    pub fn table(&self) -> [u8; HASHES_TABLE_LEN] {
        const ENTRY_LEN: u16 = 16 + 2 + 32;
        const TABLE_LEN: u16 = 16 + 2 + 3 * ENTRY_LEN;
        let mut out = [0u8; HASHES_TABLE_LEN];
        out[..16].copy_from_slice(&TABLE_HEADER_GUID);
        out[16..18].copy_from_slice(&TABLE_LEN.to_le_bytes());
        let entries = [
            (CMDLINE_ENTRY_GUID, self.cmdline),
            (INITRD_ENTRY_GUID, self.initrd),
            (KERNEL_ENTRY_GUID, self.kernel),
        ];
        for (i, (guid, hash)) in entries.iter().enumerate() {
            let at = 18 + i * usize::from(ENTRY_LEN);
            out[at..at + 16].copy_from_slice(guid);
            out[at + 16..at + 18].copy_from_slice(&ENTRY_LEN.to_le_bytes());
            out[at + 18..at + 50].copy_from_slice(hash);
        }
        out
    }
}

fn sha256(bytes: &[u8]) -> [u8; 32] {
    digest(&SHA256, bytes)
        .as_ref()
        .try_into()
        .expect("SHA-256 is 32 bytes")
}

fn sha384(bytes: &[u8]) -> [u8; 48] {
    digest(&SHA384, bytes)
        .as_ref()
        .try_into()
        .expect("SHA-384 is 48 bytes")
}

/// A vCPU model QEMU offers for an SEV-SNP guest (`-cpu`), for the CPUID
/// signature (family, model, stepping) each vCPU's VMSA holds in `RDX`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum VcpuType {
    /// `EPYC` (and its versions `-v1` to `-v4`, `EPYC-IBPB`): family 23, model 1, stepping 2.
    Epyc,
    /// `EPYC-Rome` (`-v1` to `-v3`): family 23, model 49, stepping 0.
    EpycRome,
    /// `EPYC-Milan` (`-v1`, `-v2`): family 25, model 1, stepping 1.
    EpycMilan,
    /// `EPYC-Genoa` (`-v1`): family 25, model 17, stepping 0.
    EpycGenoa,
    /// `EPYC-Turin`: family 26, model 0, stepping 0.
    EpycTurin,
}

impl VcpuType {
    /// Every model, with the name QEMU gives it.
    pub const ALL: [(VcpuType, &'static str); 5] = [
        (VcpuType::Epyc, "EPYC"),
        (VcpuType::EpycRome, "EPYC-Rome"),
        (VcpuType::EpycMilan, "EPYC-Milan"),
        (VcpuType::EpycGenoa, "EPYC-Genoa"),
        (VcpuType::EpycTurin, "EPYC-Turin"),
    ];

    /// The CPUID family, model and stepping.
    pub fn family_model_stepping(self) -> (u32, u32, u32) {
        match self {
            VcpuType::Epyc => (23, 1, 2),
            VcpuType::EpycRome => (23, 49, 0),
            VcpuType::EpycMilan => (25, 1, 1),
            VcpuType::EpycGenoa => (25, 17, 0),
            VcpuType::EpycTurin => (26, 0, 0),
        }
    }

    /// The CPUID leaf 1 `EAX` signature of the model.
    pub fn signature(self) -> u32 {
        let (family, model, stepping) = self.family_model_stepping();
        let (family_low, family_high) = if family > 0xf {
            (0xf, (family - 0xf) & 0xff)
        } else {
            (family, 0)
        };
        (family_high << 20)
            | (((model >> 4) & 0xf) << 16)
            | (family_low << 8)
            | ((model & 0xf) << 4)
            | (stepping & 0xf)
    }
}

impl fmt::Display for VcpuType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let name = VcpuType::ALL
            .iter()
            .find(|(t, _)| t == self)
            .map_or("?", |(_, n)| n);
        f.write_str(name)
    }
}

/// A vCPU model name that is not one of [`VcpuType::ALL`].
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error(
    "unknown vCPU type {0:?}: one of EPYC (-v1 to -v4, EPYC-IBPB), EPYC-Rome (-v1 to -v3), EPYC-Milan (-v1, -v2), EPYC-Genoa (-v1), EPYC-Turin"
)]
pub struct UnknownVcpuType(pub String);

impl FromStr for VcpuType {
    type Err = UnknownVcpuType;

    /// A QEMU model name, with or without its version suffix (`-v2`).
    fn from_str(name: &str) -> Result<VcpuType, UnknownVcpuType> {
        let unknown = || UnknownVcpuType(name.to_string());
        let (base, version) = match name.rsplit_once("-v") {
            Some((base, v)) if !v.is_empty() && v.bytes().all(|b| b.is_ascii_digit()) => {
                (base, v.parse::<u32>().map_err(|_| unknown())?)
            }
            _ => (name, 0),
        };
        let (kind, versions) = match base {
            "EPYC" => (VcpuType::Epyc, 4),
            "EPYC-IBPB" if version == 0 => (VcpuType::Epyc, 0),
            "EPYC-Rome" => (VcpuType::EpycRome, 3),
            "EPYC-Milan" => (VcpuType::EpycMilan, 2),
            "EPYC-Genoa" => (VcpuType::EpycGenoa, 1),
            "EPYC-Turin" => (VcpuType::EpycTurin, 0),
            _ => return Err(unknown()),
        };
        if version > versions || (version == 0 && name.ends_with("-v0")) {
            return Err(unknown());
        }
        Ok(kind)
    }
}

/// One SEV-SNP launch of a QEMU guest: what its digest is computed from.
#[derive(Clone, Copy, Debug)]
pub struct SnpLaunch<'a> {
    /// The firmware QEMU maps below 4 GiB.
    pub firmware: &'a SnpFirmware,
    /// The kernel hashes of a measured direct boot (`-kernel` with
    /// `kernel-hashes=on`), or `None` for a launch of the firmware alone.
    pub hashes: Option<KernelHashes>,
    /// The number of vCPUs (`-smp`).
    pub vcpus: u32,
    /// The vCPUs' CPUID signature ([`VcpuType::signature`]).
    pub vcpu_signature: u32,
    /// The guest's SEV features (`SEV_FEATURES` in each VMSA; QEMU's
    /// default is 0x1, SNP active).
    pub guest_features: u64,
}

/// The launch digest as it is folded, page by page.
struct Digest([u8; 48]);

impl Digest {
    const NORMAL: u8 = 1;
    const VMSA: u8 = 2;
    const ZERO: u8 = 3;
    const SECRETS: u8 = 5;
    const CPUID: u8 = 6;

    fn update(&mut self, page_type: u8, gpa: u64, contents: &[u8; 48]) {
        let mut info = [0u8; PAGE_INFO_LEN];
        info[..48].copy_from_slice(&self.0);
        info[48..96].copy_from_slice(contents);
        info[96..98].copy_from_slice(&(PAGE_INFO_LEN as u16).to_le_bytes());
        info[98] = page_type;
        // imi_page, the VMPL permissions and the reserved byte stay zero.
        info[104..112].copy_from_slice(&gpa.to_le_bytes());
        self.0 = sha384(&info);
    }

    fn normal_pages(&mut self, gpa: u64, bytes: &[u8]) {
        for (i, page) in bytes.chunks(PAGE_LEN).enumerate() {
            self.update(Self::NORMAL, gpa + (i * PAGE_LEN) as u64, &sha384(page));
        }
    }

    fn zero_pages(&mut self, gpa: u64, len: u32) {
        for i in 0..len as usize / PAGE_LEN {
            self.update(Self::ZERO, gpa + (i * PAGE_LEN) as u64, &[0; 48]);
        }
    }
}

impl SnpLaunch<'_> {
    /// The launch digest the secure processor computes, the report's
    /// `MEASUREMENT`.
    pub fn launch_digest(&self) -> Result<[u8; 48], SnpMeasureError> {
        if self.vcpus == 0 || self.vcpus > MAX_VCPUS {
            return Err(SnpMeasureError::Vcpus(self.vcpus));
        }
        let fw = self.firmware;
        if self.hashes.is_some() && !fw.has_kernel_hashes() {
            return Err(SnpMeasureError::NoKernelHashesSection);
        }
        let mut d = Digest([0; 48]);
        d.normal_pages(fw.gpa(), &fw.bytes);
        for section in &fw.sections {
            let gpa = u64::from(section.gpa);
            match (section.kind, &self.hashes) {
                (SectionKind::Memory | SectionKind::SvsmCallingArea, _)
                | (SectionKind::KernelHashes, None) => d.zero_pages(gpa, section.len),
                (SectionKind::Secrets, _) => d.update(Digest::SECRETS, gpa, &[0; 48]),
                (SectionKind::Cpuid, _) => d.update(Digest::CPUID, gpa, &[0; 48]),
                (SectionKind::KernelHashes, Some(hashes)) => {
                    let table_gpa = u64::from(fw.hashes_table_gpa.unwrap_or(0));
                    let offset = table_gpa.wrapping_sub(gpa);
                    if table_gpa < gpa || offset as usize + HASHES_TABLE_LEN > PAGE_LEN {
                        return Err(SnpMeasureError::HashesTableOutside(table_gpa));
                    }
                    let mut page = [0u8; PAGE_LEN];
                    page[offset as usize..offset as usize + HASHES_TABLE_LEN]
                        .copy_from_slice(&hashes.table());
                    d.normal_pages(gpa, &page);
                }
            }
        }
        let bsp = vmsa_page(BSP_EIP, self.vcpu_signature, self.guest_features);
        let ap = vmsa_page(fw.reset_eip, self.vcpu_signature, self.guest_features);
        for i in 0..self.vcpus {
            let page = if i == 0 { &bsp } else { &ap };
            d.update(Digest::VMSA, VMSA_GPA, &sha384(page.as_slice()));
        }
        Ok(d.0)
    }
}

/// A segment register in the VMSA: selector, attributes, limit, base.
fn segment(page: &mut [u8], at: usize, selector: u16, attrib: u16, limit: u32, base: u64) {
    page[at..at + 2].copy_from_slice(&selector.to_le_bytes());
    page[at + 2..at + 4].copy_from_slice(&attrib.to_le_bytes());
    page[at + 4..at + 8].copy_from_slice(&limit.to_le_bytes());
    page[at + 8..at + 16].copy_from_slice(&base.to_le_bytes());
}

fn put_u64(page: &mut [u8], at: usize, value: u64) {
    page[at..at + 8].copy_from_slice(&value.to_le_bytes());
}

/// The VMSA page QEMU gives a vCPU that starts at `eip` in real mode (the
/// save-area offsets of the AMD64 manual, volume 2, table B-4).
fn vmsa_page(eip: u32, signature: u32, sev_features: u64) -> Box<[u8; PAGE_LEN]> {
    let mut p = Box::new([0u8; PAGE_LEN]);
    let data = 0x93;
    segment(&mut p[..], 0x000, 0, data, 0xffff, 0); // ES
    segment(
        &mut p[..],
        0x010,
        0xf000,
        0x9b,
        0xffff,
        u64::from(eip & 0xffff_0000),
    ); // CS
    segment(&mut p[..], 0x020, 0, data, 0xffff, 0); // SS
    segment(&mut p[..], 0x030, 0, data, 0xffff, 0); // DS
    segment(&mut p[..], 0x040, 0, data, 0xffff, 0); // FS
    segment(&mut p[..], 0x050, 0, data, 0xffff, 0); // GS
    segment(&mut p[..], 0x060, 0, 0, 0xffff, 0); // GDTR
    segment(&mut p[..], 0x070, 0, 0x82, 0xffff, 0); // LDTR
    segment(&mut p[..], 0x080, 0, 0, 0xffff, 0); // IDTR
    segment(&mut p[..], 0x090, 0, 0x8b, 0xffff, 0); // TR
    put_u64(&mut p[..], 0x0d0, 0x1000); // EFER: SVME
    put_u64(&mut p[..], 0x148, 0x40); // CR4: MCE
    put_u64(&mut p[..], 0x158, 0x10); // CR0: ET
    put_u64(&mut p[..], 0x160, 0x400); // DR7
    put_u64(&mut p[..], 0x168, 0xffff_0ff0); // DR6
    put_u64(&mut p[..], 0x170, 0x2); // RFLAGS
    put_u64(&mut p[..], 0x178, u64::from(eip & 0xffff)); // RIP
    put_u64(&mut p[..], 0x268, 0x0007_0406_0007_0406); // G_PAT
    put_u64(&mut p[..], 0x310, u64::from(signature)); // RDX
    put_u64(&mut p[..], 0x3b0, sev_features); // SEV_FEATURES
    put_u64(&mut p[..], 0x3e8, 0x1); // XCR0
    p[0x408..0x40c].copy_from_slice(&0x1f80u32.to_le_bytes()); // MXCSR
    p[0x410..0x412].copy_from_slice(&0x037fu16.to_le_bytes()); // x87 FCW
    p
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn guids_are_stored_mixed_endian() {
        // 96b582de-1fb2-45f7-baea-a366c55a082d as OVMF stores it.
        assert_eq!(
            FOOTER_TABLE_GUID,
            [
                0xde, 0x82, 0xb5, 0x96, 0xb2, 0x1f, 0xf7, 0x45, 0xba, 0xea, 0xa3, 0x66, 0xc5, 0x5a,
                0x08, 0x2d
            ]
        );
    }

    #[test]
    fn vcpu_signatures_are_cpuid_leaf_1() {
        // EPYC-Milan: family 0x19 (0xf + 0xa), model 1, stepping 1.
        assert_eq!(VcpuType::EpycMilan.signature(), 0x00a0_0f11);
        assert_eq!(VcpuType::EpycRome.signature(), 0x0083_0f10);
        assert_eq!(VcpuType::EpycGenoa.signature(), 0x00a1_0f10);
        assert_eq!(VcpuType::Epyc.signature(), 0x0080_0f12);
    }

    #[test]
    fn vcpu_types_parse_with_their_versions_only() {
        assert_eq!("EPYC-Milan-v2".parse(), Ok(VcpuType::EpycMilan));
        assert_eq!("EPYC-v4".parse(), Ok(VcpuType::Epyc));
        assert_eq!("EPYC-IBPB".parse(), Ok(VcpuType::Epyc));
        assert_eq!("EPYC-Turin".parse(), Ok(VcpuType::EpycTurin));
        for bad in [
            "EPYC-Milan-v3",
            "EPYC-Rome-v4",
            "EPYC-Turin-v1",
            "EPYC-v0",
            "epyc",
            "EPYC-Genoa-v",
            "",
            "EPYC-v99999999999",
        ] {
            assert!(bad.parse::<VcpuType>().is_err(), "{bad}");
        }
    }

    #[test]
    fn the_table_holds_command_line_initrd_and_kernel_in_that_order() {
        let h = KernelHashes::of(b"kernel", None, "console=ttyS0");
        let t = h.table();
        assert_eq!(&t[..16], &TABLE_HEADER_GUID);
        assert_eq!(u16::from_le_bytes([t[16], t[17]]), 168);
        assert_eq!(&t[18..34], &CMDLINE_ENTRY_GUID);
        assert_eq!(&t[36..68], &sha256(b"console=ttyS0\0"));
        assert_eq!(&t[86..118], &sha256(b""));
        assert_eq!(&t[118..134], &KERNEL_ENTRY_GUID);
        assert_eq!(&t[136..168], &sha256(b"kernel"));
        assert_eq!(&t[168..], &[0; 8]);
    }

    #[test]
    fn a_firmware_without_its_tables_is_refused() {
        assert_eq!(
            SnpFirmware::parse(vec![0; 4096]).unwrap_err(),
            SnpMeasureError::NoFooterTable
        );
        assert_eq!(
            SnpFirmware::parse(vec![0; 4095]).unwrap_err(),
            SnpMeasureError::FirmwareSize(4095)
        );
        assert_eq!(
            SnpFirmware::parse(Vec::new()).unwrap_err(),
            SnpMeasureError::FirmwareSize(0)
        );
    }
}
