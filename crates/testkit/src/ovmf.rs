//! OVMF firmware files for the SEV-SNP launch-digest tests, and the oracle
//! they are checked against.
//!
//! Debian's `ovmf` package ships `OVMF_CODE.fd` with the SEV-ES reset block
//! and the SEV metadata, but without the kernel hashes section a measured
//! direct boot needs (only edk2's `OvmfPkg/AmdSev` build has it, which
//! Debian does not ship). [`crafted_from`] adds that section and the
//! table's place to Debian's file; [`synthetic`] makes a firmware of any
//! layout from nothing. Neither boots: they are inputs whose launch digest
//! the prediction and `sev-snp-measure` ([`sev_snp_measure`]) compute
//! independently. The GUIDs here are written from their text form, apart
//! from the prediction's own constants, so that a wrong GUID in one is
//! not hidden by the same wrong GUID in the other.

use std::path::{Path, PathBuf};

use crate::{XorShift, stop_for_missing_setup};

/// Debian's OVMF build with the SEV metadata (the 2 MiB one; the 4 MiB
/// build carries none).
pub const DEBIAN_OVMF: &str = "/usr/share/OVMF/OVMF_CODE.fd";

/// The footer table's GUID.
pub const FOOTER_TABLE: &str = "96b582de-1fb2-45f7-baea-a366c55a082d";
/// The SEV-ES reset block's entry.
pub const RESET_BLOCK: &str = "00f771de-1a7e-4fcb-890e-68c77e2fb44e";
/// The entry pointing at the SEV metadata.
pub const SEV_METADATA: &str = "dc886566-984a-4798-a75e-5585a7bf67cc";
/// The entry naming the kernel hashes table's place.
pub const HASHES_TABLE: &str = "7255371f-3a3b-4b04-927b-1da6efa8d454";

/// A metadata section type: memory to accept.
pub const SECTION_MEMORY: u32 = 1;
/// A metadata section type: the secrets page.
pub const SECTION_SECRETS: u32 = 2;
/// A metadata section type: the CPUID page.
pub const SECTION_CPUID: u32 = 3;
/// A metadata section type: the kernel hashes page.
pub const SECTION_KERNEL_HASHES: u32 = 0x10;

/// The page [`crafted_from`] puts the kernel hashes section at (a gap in
/// Debian's metadata, between its first memory section and the next).
pub const CRAFTED_HASHES_PAGE: u32 = 0x0080_9000;
/// Where [`crafted_from`] says the table goes, inside that page.
pub const CRAFTED_TABLE_GPA: u32 = 0x0080_9c00;

/// The `sev-snp-measure` program `scripts/setup.sh` installs (a pinned
/// release from PyPI, in a virtual environment under `target/tools`), or
/// the end of the test process with what to run first.
pub fn sev_snp_measure() -> PathBuf {
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target"));
    let program = target.join("tools/sev-snp-measure/bin/sev-snp-measure");
    if !program.is_file() {
        stop_for_missing_setup(&format!(
            "{} is missing: run `bash scripts/setup.sh` first (it installs sev-snp-measure from PyPI)",
            program.display()
        ));
    }
    program
}

/// A GUID's bytes as firmware stores them (the first three fields little
/// endian), from its text form.
pub fn guid_le(text: &str) -> [u8; 16] {
    let hex: String = text.chars().filter(|c| *c != '-').collect();
    assert_eq!(hex.len(), 32, "a GUID: {text}");
    let mut b = [0u8; 16];
    for (i, byte) in b.iter_mut().enumerate() {
        *byte = u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).expect("hex");
    }
    b[..4].reverse();
    b[4..6].reverse();
    b[6..8].reverse();
    b
}

/// `len` bytes that differ from page to page and from `seed` to `seed`
/// ([`XorShift`]'s, from `seed` made non-zero).
pub fn filler(len: usize, seed: u64) -> Vec<u8> {
    XorShift::new(seed | 1 << 63).bytes(len)
}

/// A footer-table entry: its data, then its length and GUID.
fn entry(guid: &str, data: &[u8]) -> Vec<u8> {
    let mut e = data.to_vec();
    e.extend_from_slice(&((data.len() + 18) as u16).to_le_bytes());
    e.extend_from_slice(&guid_le(guid));
    e
}

/// A firmware of `pages` pages of filler whose footer table names the
/// reset block at `eip`, the SEV metadata listing `sections` (gpa,
/// length, type) and, when given, the hashes table at `hash_table_gpa`.
pub fn synthetic(
    pages: usize,
    sections: &[(u32, u32, u32)],
    hash_table_gpa: Option<u32>,
    eip: u32,
) -> Vec<u8> {
    assert!(pages >= 2, "the tables need the last page and one before");
    let len = pages * 4096;
    let mut fw = filler(len, pages as u64);
    // The metadata, in the page before the last.
    let metadata_at = len - 2 * 4096;
    let mut metadata = b"ASEV".to_vec();
    metadata.extend_from_slice(&((16 + 12 * sections.len()) as u32).to_le_bytes());
    metadata.extend_from_slice(&1u32.to_le_bytes());
    metadata.extend_from_slice(&(sections.len() as u32).to_le_bytes());
    for (gpa, size, kind) in sections {
        for v in [gpa, size, kind] {
            metadata.extend_from_slice(&v.to_le_bytes());
        }
    }
    fw[metadata_at..metadata_at + metadata.len()].copy_from_slice(&metadata);
    let mut table = entry(RESET_BLOCK, &eip.to_le_bytes());
    table.extend(entry(
        SEV_METADATA,
        &((len - metadata_at) as u32).to_le_bytes(),
    ));
    if let Some(gpa) = hash_table_gpa {
        let mut data = gpa.to_le_bytes().to_vec();
        data.extend_from_slice(&0x400u32.to_le_bytes());
        table.extend(entry(HASHES_TABLE, &data));
    }
    let footer = entry(FOOTER_TABLE, &[]);
    let footer_len = (table.len() + footer.len()) as u16;
    let end = len - 32;
    let start = end - footer.len() - table.len();
    fw[start..start + table.len()].copy_from_slice(&table);
    fw[end - footer.len()..end].copy_from_slice(&footer);
    fw[end - 18..end - 16].copy_from_slice(&footer_len.to_le_bytes());
    fw
}

/// Debian's `OVMF_CODE.fd` (`debian`, its bytes) with a kernel hashes
/// section at [`CRAFTED_HASHES_PAGE`] appended to its SEV metadata, and
/// its hashes-table entry naming [`CRAFTED_TABLE_GPA`]: what an `AmdSev`
/// build says, in Debian's firmware. The bytes after the metadata that the
/// new section overwrites are code: the file measures, it does not boot.
pub fn crafted_from(debian: &[u8]) -> Vec<u8> {
    let mut fw = debian.to_vec();
    let len = fw.len();
    let footer_at = len - 32 - 18;
    assert_eq!(fw[footer_at + 2..footer_at + 18], guid_le(FOOTER_TABLE));
    let table_len = u16::from_le_bytes([fw[footer_at], fw[footer_at + 1]]) as usize - 18;
    let mut end = footer_at;
    let (mut metadata, mut hashes) = (None, None);
    while end > footer_at - table_len {
        let size = u16::from_le_bytes([fw[end - 18], fw[end - 17]]) as usize;
        let guid = &fw[end - 16..end];
        if guid == guid_le(SEV_METADATA) {
            metadata = Some(u32::from_le_bytes(
                fw[end - 22..end - 18].try_into().unwrap(),
            ));
        } else if guid == guid_le(HASHES_TABLE) {
            hashes = Some(end - size);
        }
        end -= size;
    }
    let hashes = hashes.expect("Debian's OVMF names the hashes table (as zero)");
    fw[hashes..hashes + 4].copy_from_slice(&CRAFTED_TABLE_GPA.to_le_bytes());
    fw[hashes + 4..hashes + 8].copy_from_slice(&0x400u32.to_le_bytes());
    let at = len - metadata.expect("Debian's OVMF has SEV metadata") as usize;
    assert_eq!(&fw[at..at + 4], b"ASEV");
    let count = u32::from_le_bytes(fw[at + 12..at + 16].try_into().unwrap());
    let item = at + 16 + 12 * count as usize;
    for (i, v) in [CRAFTED_HASHES_PAGE, 0x1000, SECTION_KERNEL_HASHES]
        .into_iter()
        .enumerate()
    {
        fw[item + 4 * i..item + 4 * i + 4].copy_from_slice(&v.to_le_bytes());
    }
    fw[at + 4..at + 8].copy_from_slice(&(16 + 12 * (count + 1)).to_le_bytes());
    fw[at + 12..at + 16].copy_from_slice(&(count + 1).to_le_bytes());
    fw
}
