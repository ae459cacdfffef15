//! Inodes (256 bytes) with their checksums, and extent trees (an inline
//! root of at most four extents, or a root pointing to one leaf block).

use super::crc::crc32c_raw;
use super::geometry::{BLOCK_SIZE, INODE_SIZE};
use super::superblock::EXTRA_ISIZE;
use super::{put16, put32};

/// `i_flags`: the inode maps its blocks with extents.
pub const EXTENTS_FL: u32 = 0x0008_0000;
/// A directory's mode type bits.
pub const S_IFDIR: u16 = 0o040000;
/// A regular file's mode type bits.
pub const S_IFREG: u16 = 0o100000;
/// The extent header's magic.
const EXTENT_MAGIC: u16 = 0xf30a;
/// Extents in the inode's own 60 bytes.
pub const INLINE_EXTENTS: usize = 4;
/// Extents in one leaf block (its last 4 bytes hold the checksum).
pub const LEAF_EXTENTS: usize = (BLOCK_SIZE as usize - 12) / 12;
/// The longest initialized extent.
pub const MAX_EXTENT_LEN: u64 = 32_768;
/// Offsets of the checksum halves.
const CSUM_LO_AT: usize = 0x7c;
const CSUM_HI_AT: usize = 0x82;

/// One extent: `len` blocks of the file from `file_block` on, at `start`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Extent {
    /// The first file block it maps.
    pub file_block: u32,
    /// Its length in blocks (at most [`MAX_EXTENT_LEN`]).
    pub len: u16,
    /// The first disk block.
    pub start: u64,
}

/// The checksum seed of inode `ino` (generation 0) under the file
/// system's seed: also the seed of its directory and extent blocks.
pub fn inode_seed(fs_seed: u32, ino: u32) -> u32 {
    crc32c_raw(crc32c_raw(fs_seed, &ino.to_le_bytes()), &0u32.to_le_bytes())
}

/// What an inode written by the formatter holds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Inode {
    /// `i_mode`: type and permissions.
    pub mode: u16,
    /// `i_links_count`.
    pub links: u16,
    /// `i_size` in bytes.
    pub size: u64,
    /// `i_blocks`: 512-byte sectors used, the extent leaf included.
    pub sectors: u64,
    /// `i_block`: the extent tree's root.
    pub block: [u8; 60],
    /// Times, seconds since the epoch.
    pub now: u32,
}

impl Inode {
    /// Inode `ino`'s 256 bytes with its checksum.
    pub fn encode(&self, ino: u32, fs_seed: u32) -> [u8; INODE_SIZE as usize] {
        let mut i = [0u8; INODE_SIZE as usize];
        put16(&mut i, 0x00, self.mode);
        put32(&mut i, 0x04, self.size as u32);
        for at in [0x08, 0x0c, 0x10, 0x90] {
            put32(&mut i, at, self.now); // atime, ctime, mtime, crtime
        }
        put16(&mut i, 0x1a, self.links);
        put32(&mut i, 0x1c, self.sectors as u32);
        put32(&mut i, 0x20, EXTENTS_FL);
        i[0x28..0x64].copy_from_slice(&self.block);
        put32(&mut i, 0x6c, (self.size >> 32) as u32);
        put16(&mut i, 0x74, (self.sectors >> 32) as u16);
        put16(&mut i, 0x80, EXTRA_ISIZE);
        let crc = crc32c_raw(inode_seed(fs_seed, ino), &i);
        put16(&mut i, CSUM_LO_AT, crc as u16);
        put16(&mut i, CSUM_HI_AT, (crc >> 16) as u16);
        i
    }
}

/// A reserved inode that holds nothing (1, 3 to 7, 9, 10): zeros, and the
/// low checksum half mke2fs writes (no extra fields, so no high half).
pub fn encode_empty(ino: u32, fs_seed: u32) -> [u8; INODE_SIZE as usize] {
    let mut i = [0u8; INODE_SIZE as usize];
    let crc = crc32c_raw(inode_seed(fs_seed, ino), &i);
    put16(&mut i, CSUM_LO_AT, crc as u16);
    i
}

/// An extent header.
fn header(out: &mut [u8], entries: usize, max: usize, depth: u16) {
    put16(out, 0, EXTENT_MAGIC);
    put16(out, 2, entries as u16);
    put16(out, 4, max as u16);
    put16(out, 6, depth);
}

/// Extent entries after a header.
fn entries(out: &mut [u8], extents: &[Extent]) {
    for (n, e) in extents.iter().enumerate() {
        let at = 12 + 12 * n;
        put32(out, at, e.file_block);
        put16(out, at + 4, e.len);
        put16(out, at + 6, (e.start >> 32) as u16);
        put32(out, at + 8, e.start as u32);
    }
}

/// An inline root holding at most [`INLINE_EXTENTS`] extents.
pub fn inline_root(extents: &[Extent]) -> [u8; 60] {
    assert!(extents.len() <= INLINE_EXTENTS, "caller splits the tree");
    let mut root = [0u8; 60];
    header(&mut root, extents.len(), INLINE_EXTENTS, 0);
    entries(&mut root, extents);
    root
}

/// A root of depth 1 whose one index points to the leaf at `leaf`.
pub fn index_root(leaf: u64) -> [u8; 60] {
    let mut root = [0u8; 60];
    header(&mut root, 1, INLINE_EXTENTS, 1);
    put32(&mut root, 12, 0); // ei_block
    put32(&mut root, 16, leaf as u32);
    put16(&mut root, 20, (leaf >> 32) as u16);
    root
}

/// A leaf block with at most [`LEAF_EXTENTS`] extents and its checksum
/// (the inode's seed over everything before the tail).
pub fn leaf_block(extents: &[Extent], ino: u32, fs_seed: u32) -> Vec<u8> {
    assert!(extents.len() <= LEAF_EXTENTS, "caller bounds the extents");
    let mut block = vec![0u8; BLOCK_SIZE as usize];
    header(&mut block, extents.len(), LEAF_EXTENTS, 0);
    entries(&mut block, extents);
    let tail = 12 + 12 * LEAF_EXTENTS;
    let crc = crc32c_raw(inode_seed(fs_seed, ino), &block[..tail]);
    put32(&mut block, tail, crc);
    block
}

/// Extents mapping `runs` (disk `(start, len)`, in file order) from file
/// block 0, each at most [`MAX_EXTENT_LEN`] long.
pub fn extents_of(runs: &[(u64, u64)]) -> Vec<Extent> {
    let mut out = Vec::new();
    let mut file_block = 0u64;
    for &(mut start, mut len) in runs {
        while len > 0 {
            let take = len.min(MAX_EXTENT_LEN);
            out.push(Extent {
                file_block: file_block as u32,
                len: take as u16,
                start,
            });
            file_block += take;
            start += take;
            len -= take;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn checksum_covers_the_inode_with_both_halves_zeroed() {
        let inode = Inode {
            mode: S_IFDIR | 0o755,
            links: 3,
            size: 4096,
            sectors: 8,
            block: inline_root(&[Extent {
                file_block: 0,
                len: 1,
                start: 99,
            }]),
            now: 1,
        };
        let bytes = inode.encode(2, 7);
        let mut zeroed = bytes;
        zeroed[CSUM_LO_AT..CSUM_LO_AT + 2].fill(0);
        zeroed[CSUM_HI_AT..CSUM_HI_AT + 2].fill(0);
        let crc = crc32c_raw(inode_seed(7, 2), &zeroed);
        assert_eq!(u16::from_le_bytes([bytes[0x7c], bytes[0x7d]]), crc as u16);
        assert_eq!(
            u16::from_le_bytes([bytes[0x82], bytes[0x83]]),
            (crc >> 16) as u16
        );
        assert_ne!(inode.encode(3, 7)[0x7c..0x7e], bytes[0x7c..0x7e]);
    }

    #[test]
    fn extents_split_at_the_longest_extent() {
        let e = extents_of(&[(100, 40_000), (50_000, 5)]);
        assert_eq!(e.len(), 3);
        assert_eq!((e[0].file_block, e[0].len, e[0].start), (0, 32_768, 100));
        assert_eq!(
            (e[1].file_block, e[1].len, e[1].start),
            (32_768, 7232, 32_868)
        );
        assert_eq!((e[2].file_block, e[2].start), (40_000, 50_000));
    }

    #[test]
    fn leaf_tail_is_the_checksum_of_what_precedes_it() {
        let leaf = leaf_block(&extents_of(&[(1 << 33, 8)]), 8, 5);
        assert_eq!(LEAF_EXTENTS, 340);
        assert_eq!(u16::from_le_bytes([leaf[18], leaf[19]]), 2); // ee_start_hi
        let tail = u32::from_le_bytes(leaf[4092..].try_into().unwrap());
        assert_eq!(tail, crc32c_raw(inode_seed(5, 8), &leaf[..4092]));
    }
}
