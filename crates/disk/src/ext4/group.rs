//! Group descriptors and the two bitmaps of a group, with their
//! `metadata_csum` checksums.

use super::crc::crc32c_raw;
use super::geometry::{BLOCK_SIZE, BLOCKS_PER_GROUP, DESC_SIZE, Geometry};
use super::{put16, put32};

/// `bg_flags`: the inode bitmap and table were never initialized.
pub const INODE_UNINIT: u16 = 0x1;
/// `bg_flags`: the block bitmap was never written; it follows from the
/// layout (the group's own metadata only).
pub const BLOCK_UNINIT: u16 = 0x2;
/// `bg_flags`: the inode table is zeroed.
pub const ITABLE_ZEROED: u16 = 0x4;
/// Offset of `bg_checksum` in a descriptor.
const CHECKSUM_AT: usize = 0x1e;

/// One group's descriptor.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct GroupDesc {
    /// The block bitmap's block.
    pub block_bitmap: u64,
    /// The inode bitmap's block.
    pub inode_bitmap: u64,
    /// The inode table's first block.
    pub inode_table: u64,
    /// Free blocks in the group.
    pub free_blocks: u64,
    /// Free inodes in the group.
    pub free_inodes: u64,
    /// Directories in the group.
    pub used_dirs: u64,
    /// [`INODE_UNINIT`], [`BLOCK_UNINIT`], [`ITABLE_ZEROED`].
    pub flags: u16,
    /// Inodes at the end of the table never used.
    pub itable_unused: u64,
    /// The block bitmap's checksum (0 when not written).
    pub block_bitmap_csum: u32,
    /// The inode bitmap's checksum (0 when not written).
    pub inode_bitmap_csum: u32,
}

impl GroupDesc {
    /// The 64-byte descriptor of group `group`, checksummed with `seed`.
    pub fn encode(&self, group: u64, seed: u32) -> [u8; DESC_SIZE as usize] {
        let mut d = [0u8; DESC_SIZE as usize];
        let lo = |v: u64| v as u32;
        let hi = |v: u64| (v >> 32) as u32;
        put32(&mut d, 0x00, lo(self.block_bitmap));
        put32(&mut d, 0x04, lo(self.inode_bitmap));
        put32(&mut d, 0x08, lo(self.inode_table));
        put16(&mut d, 0x0c, self.free_blocks as u16);
        put16(&mut d, 0x0e, self.free_inodes as u16);
        put16(&mut d, 0x10, self.used_dirs as u16);
        put16(&mut d, 0x12, self.flags);
        put16(&mut d, 0x18, self.block_bitmap_csum as u16);
        put16(&mut d, 0x1a, self.inode_bitmap_csum as u16);
        put16(&mut d, 0x1c, self.itable_unused as u16);
        put32(&mut d, 0x20, hi(self.block_bitmap));
        put32(&mut d, 0x24, hi(self.inode_bitmap));
        put32(&mut d, 0x28, hi(self.inode_table));
        put16(&mut d, 0x2c, (self.free_blocks >> 16) as u16);
        put16(&mut d, 0x2e, (self.free_inodes >> 16) as u16);
        put16(&mut d, 0x30, (self.used_dirs >> 16) as u16);
        put16(&mut d, 0x32, (self.itable_unused >> 16) as u16);
        put16(&mut d, 0x38, (self.block_bitmap_csum >> 16) as u16);
        put16(&mut d, 0x3a, (self.inode_bitmap_csum >> 16) as u16);
        let group = (group as u32).to_le_bytes();
        let crc = crc32c_raw(seed, &group);
        let crc = crc32c_raw(crc, &d[..CHECKSUM_AT]);
        let crc = crc32c_raw(crc, &[0, 0]);
        let crc = crc32c_raw(crc, &d[CHECKSUM_AT + 2..]);
        put16(&mut d, CHECKSUM_AT, crc as u16);
        d
    }
}

/// Sets bits `from..to` of `bitmap`.
fn set_bits(bitmap: &mut [u8], from: u64, to: u64) {
    for bit in from..to {
        bitmap[(bit / 8) as usize] |= 1 << (bit % 8);
    }
}

/// Group `g`'s block bitmap: its own metadata, the `used` runs (group-
/// relative `(start, len)`), and every bit past the end of a short last
/// group set.
pub fn block_bitmap(geometry: &Geometry, g: u64, used: &[(u64, u64)]) -> Vec<u8> {
    let mut bitmap = vec![0u8; BLOCK_SIZE as usize];
    set_bits(&mut bitmap, 0, geometry.overhead(g));
    for &(start, len) in used {
        set_bits(&mut bitmap, start, start + len);
    }
    set_bits(&mut bitmap, geometry.group_blocks(g), BLOCKS_PER_GROUP);
    bitmap
}

/// An inode bitmap with the first `used` inodes set and the padding past
/// `inodes_per_group` set (the block has more bits than the group inodes).
pub fn inode_bitmap(geometry: &Geometry, used: u64) -> Vec<u8> {
    let mut bitmap = vec![0u8; BLOCK_SIZE as usize];
    set_bits(&mut bitmap, 0, used);
    set_bits(&mut bitmap, geometry.inodes_per_group, 8 * BLOCK_SIZE);
    bitmap
}

/// A block bitmap's checksum: the whole block.
pub fn block_bitmap_csum(seed: u32, bitmap: &[u8]) -> u32 {
    crc32c_raw(seed, bitmap)
}

/// An inode bitmap's checksum: the bytes that cover the group's inodes.
pub fn inode_bitmap_csum(geometry: &Geometry, seed: u32, bitmap: &[u8]) -> u32 {
    crc32c_raw(seed, &bitmap[..(geometry.inodes_per_group / 8) as usize])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn descriptor_checksum_covers_group_number_and_fields() {
        let d = GroupDesc {
            block_bitmap: 5 << 32 | 1,
            free_blocks: 70_000,
            ..GroupDesc::default()
        };
        let a = d.encode(0, 42);
        assert_eq!(u32::from_le_bytes(a[0x20..0x24].try_into().unwrap()), 5);
        assert_eq!(u16::from_le_bytes([a[0x2c], a[0x2d]]), 1);
        assert_ne!(a[0x1e..0x20], d.encode(1, 42)[0x1e..0x20]);
        let mut other = d.clone();
        other.flags = INODE_UNINIT;
        assert_ne!(a[0x1e..0x20], other.encode(0, 42)[0x1e..0x20]);
    }

    #[test]
    fn bitmaps_mark_metadata_use_and_padding() {
        let g = Geometry::for_device((BLOCKS_PER_GROUP + 3000) * BLOCK_SIZE).unwrap();
        let bits = |b: &[u8], i: u64| b[(i / 8) as usize] >> (i % 8) & 1;
        let last = block_bitmap(&g, 1, &[(700, 3)]);
        assert_eq!(bits(&last, g.overhead(1) - 1), 1);
        assert_eq!(bits(&last, g.overhead(1)), 0);
        assert_eq!(
            (bits(&last, 700), bits(&last, 702), bits(&last, 703)),
            (1, 1, 0)
        );
        assert_eq!((bits(&last, 2999), bits(&last, 3000)), (0, 1));
        let inodes = inode_bitmap(&g, 11);
        assert_eq!((bits(&inodes, 10), bits(&inodes, 11)), (1, 0));
        assert_eq!(bits(&inodes, g.inodes_per_group), 1);
    }
}
