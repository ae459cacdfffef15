//! The binary LUKS2 header: 4096 bytes in front of the JSON area, twice on
//! the device (primary at 0, secondary at the header size), each with a
//! SHA-256 over itself (checksum field zeroed) and its JSON area.
//!
//! ```text
//! offset size field
//!      0    6 magic          "LUKS\xba\xbe" | "SKUL\xba\xbe"
//!      6    2 version        2 (big-endian, as every integer here)
//!      8    8 hdr_size       binary header + JSON area: 16 KiB .. 4 MiB, a power of two
//!     16    8 seqid          bumped on every write
//!     24   48 label          NUL-terminated
//!     72   32 checksum_alg   "sha256"
//!    104   64 salt           random per copy
//!    168   40 uuid           NUL-terminated text
//!    208   48 subsystem      NUL-terminated
//!    256    8 hdr_offset     where this copy lives
//!    448   64 csum           SHA-256, zero-padded
//! ```

use super::error::{BinaryFault, HeaderCopy};
use confboot_kms::is_uuid;

/// Size of the binary part of a header.
pub const BINARY_SIZE: usize = 4096;
/// The primary header's magic.
pub const MAGIC_PRIMARY: [u8; 6] = *b"LUKS\xba\xbe";
/// The secondary header's magic.
pub const MAGIC_SECONDARY: [u8; 6] = *b"SKUL\xba\xbe";
/// The header sizes LUKS2 allows (binary header + JSON area); the
/// secondary header lives at one of these offsets.
pub const HEADER_SIZES: [u64; 9] = [
    16 << 10,
    32 << 10,
    64 << 10,
    128 << 10,
    256 << 10,
    512 << 10,
    1 << 20,
    2 << 20,
    4 << 20,
];

const LABEL: std::ops::Range<usize> = 24..72;
const CSUM_ALG: std::ops::Range<usize> = 72..104;
const SALT: std::ops::Range<usize> = 104..168;
const UUID: std::ops::Range<usize> = 168..208;
const SUBSYSTEM: std::ops::Range<usize> = 208..256;
const CSUM: std::ops::Range<usize> = 448..512;

/// The fields of a binary header that mean something (the per-copy salt,
/// the magic and the offset follow from where it is written).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BinaryHeader {
    /// Binary header + JSON area, in bytes.
    pub hdr_size: u64,
    /// Sequence id: the copy with the higher one is the newer.
    pub seqid: u64,
    /// The label (may be empty).
    pub label: String,
    /// The UUID, as written (cryptsetup writes it lowercase).
    pub uuid: String,
    /// The subsystem (may be empty).
    pub subsystem: String,
}

fn be64(b: &[u8], at: usize) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[at..at + 8]);
    u64::from_be_bytes(a)
}

/// The NUL-terminated text of a fixed field; `None` if it has no NUL or is
/// not UTF-8.
fn text(field: &[u8]) -> Option<String> {
    let end = field.iter().position(|&b| b == 0)?;
    std::str::from_utf8(&field[..end]).ok().map(str::to_string)
}

/// Whether the 6 bytes at the start are a LUKS magic (of either copy), and
/// the version that follows.
pub fn magic_version(bytes: &[u8]) -> Option<(HeaderCopy, u16)> {
    if bytes.len() < 8 {
        return None;
    }
    let copy = if bytes[..6] == MAGIC_PRIMARY {
        HeaderCopy::Primary
    } else if bytes[..6] == MAGIC_SECONDARY {
        HeaderCopy::Secondary
    } else {
        return None;
    };
    Some((copy, u16::from_be_bytes([bytes[6], bytes[7]])))
}

/// The header size a binary header at `offset` announces, once its magic,
/// version and size are checked (what is needed to know how much to read).
/// `binary` shorter than [`BINARY_SIZE`] is refused as a bad size.
pub fn announced_size(binary: &[u8], copy: HeaderCopy) -> Result<u64, BinaryFault> {
    if binary.len() < BINARY_SIZE {
        return Err(BinaryFault::HeaderSize(binary.len() as u64));
    }
    match magic_version(binary) {
        Some((c, 2)) if c == copy => {}
        Some((c, v)) if c == copy => return Err(BinaryFault::Version(v)),
        _ => return Err(BinaryFault::Magic),
    }
    let size = be64(binary, 8);
    if !HEADER_SIZES.contains(&size) {
        return Err(BinaryFault::HeaderSize(size));
    }
    Ok(size)
}

/// SHA-256 over a header area (`hdr_size` bytes) with its checksum field
/// zeroed: what the checksum field must hold.
pub fn checksum(area: &[u8]) -> [u8; 32] {
    let mut ctx = ring::digest::Context::new(&ring::digest::SHA256);
    ctx.update(&area[..CSUM.start]);
    ctx.update(&[0u8; 64]);
    ctx.update(&area[CSUM.end..]);
    let mut out = [0u8; 32];
    out.copy_from_slice(ctx.finish().as_ref());
    out
}

/// Checks one copy: `area` is its whole header area (`hdr_size` bytes:
/// binary header and JSON area), read at `offset` as `copy`. Returns the
/// binary fields; the JSON area is `area[BINARY_SIZE..]`.
pub fn parse(area: &[u8], copy: HeaderCopy, offset: u64) -> Result<BinaryHeader, BinaryFault> {
    let hdr_size = announced_size(area, copy)?;
    if area.len() as u64 != hdr_size {
        return Err(BinaryFault::HeaderSize(hdr_size));
    }
    let hdr_offset = be64(area, 256);
    if hdr_offset != offset {
        return Err(BinaryFault::HeaderOffset(hdr_offset));
    }
    if text(&area[CSUM_ALG]).as_deref() != Some("sha256") {
        return Err(BinaryFault::ChecksumAlgorithm);
    }
    if checksum(area) != area[CSUM.start..CSUM.start + 32] {
        return Err(BinaryFault::Checksum);
    }
    let uuid = text(&area[UUID]).ok_or(BinaryFault::Uuid)?;
    if !is_uuid(&uuid) {
        return Err(BinaryFault::Uuid);
    }
    let label = text(&area[LABEL]).ok_or(BinaryFault::Text)?;
    let subsystem = text(&area[SUBSYSTEM]).ok_or(BinaryFault::Text)?;
    Ok(BinaryHeader {
        hdr_size,
        seqid: be64(area, 16),
        label,
        uuid,
        subsystem,
    })
}

fn put_text(field: &mut [u8], s: &str) {
    field.fill(0);
    let n = s.len().min(field.len() - 1);
    field[..n].copy_from_slice(&s.as_bytes()[..n]);
}

/// Writes one copy's header area (`hdr_size` bytes) from the binary fields,
/// the JSON text and a 64-byte salt, for `copy` at `offset`, checksummed.
/// The JSON must fit the area with its terminating NUL (checked by the
/// caller); a `hdr_size` this machine cannot hold in memory is refused.
pub fn serialize(
    header: &BinaryHeader,
    json: &[u8],
    salt: &[u8; 64],
    copy: HeaderCopy,
    offset: u64,
) -> Result<Vec<u8>, BinaryFault> {
    let len =
        usize::try_from(header.hdr_size).map_err(|_| BinaryFault::HeaderSize(header.hdr_size))?;
    let mut area = vec![0u8; len];
    area[..6].copy_from_slice(match copy {
        HeaderCopy::Primary => &MAGIC_PRIMARY,
        HeaderCopy::Secondary => &MAGIC_SECONDARY,
    });
    area[6..8].copy_from_slice(&2u16.to_be_bytes());
    area[8..16].copy_from_slice(&header.hdr_size.to_be_bytes());
    area[16..24].copy_from_slice(&header.seqid.to_be_bytes());
    put_text(&mut area[LABEL], &header.label);
    put_text(&mut area[CSUM_ALG], "sha256");
    area[SALT].copy_from_slice(salt);
    put_text(&mut area[UUID], &header.uuid);
    put_text(&mut area[SUBSYSTEM], &header.subsystem);
    area[256..264].copy_from_slice(&offset.to_be_bytes());
    area[BINARY_SIZE..BINARY_SIZE + json.len()].copy_from_slice(json);
    let sum = checksum(&area);
    area[CSUM.start..CSUM.start + 32].copy_from_slice(&sum);
    Ok(area)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header() -> BinaryHeader {
        BinaryHeader {
            hdr_size: 16 << 10,
            seqid: 7,
            label: "state".into(),
            uuid: "0a1b2c3d-0000-4000-8000-000000000001".into(),
            subsystem: String::new(),
        }
    }

    #[test]
    fn a_written_copy_reads_back_and_each_fault_is_named() {
        let h = header();
        let area = serialize(&h, b"{}", &[9; 64], HeaderCopy::Secondary, 16 << 10).unwrap();
        assert_eq!(parse(&area, HeaderCopy::Secondary, 16 << 10), Ok(h.clone()));
        assert_eq!(
            parse(&area, HeaderCopy::Primary, 16 << 10),
            Err(BinaryFault::Magic)
        );
        assert_eq!(
            parse(&area, HeaderCopy::Secondary, 0),
            Err(BinaryFault::HeaderOffset(16 << 10))
        );
        let mut bad = area.clone();
        bad[BINARY_SIZE + 1] ^= 1;
        assert_eq!(
            parse(&bad, HeaderCopy::Secondary, 16 << 10),
            Err(BinaryFault::Checksum)
        );
        let mut bad = area.clone();
        bad[7] = 1;
        assert_eq!(
            parse(&bad, HeaderCopy::Secondary, 16 << 10),
            Err(BinaryFault::Version(1))
        );
        let mut bad = area;
        bad[8..16].copy_from_slice(&(12345u64).to_be_bytes());
        assert_eq!(
            parse(&bad, HeaderCopy::Secondary, 16 << 10),
            Err(BinaryFault::HeaderSize(12345))
        );
    }
}
