//! The superblock (1,024 bytes, little-endian), its feature set and its
//! checksum.

use super::crc::crc32c_raw;
use super::geometry::{BLOCK_SIZE, BLOCKS_PER_GROUP, DESC_SIZE, FIRST_INO, Geometry, INODE_SIZE};
use super::{put16, put32, put64};

/// `s_magic`.
pub const MAGIC: u16 = 0xef53;
/// Compatible features: `has_journal`, `ext_attr`, `dir_index`.
pub const FEATURE_COMPAT: u32 = 0x0004 | 0x0008 | 0x0020;
/// Incompatible features: `filetype`, `extent`, `64bit`.
pub const FEATURE_INCOMPAT: u32 = 0x0002 | 0x0040 | 0x0080;
/// Read-only-compatible features: `sparse_super`, `large_file`,
/// `huge_file`, `dir_nlink`, `extra_isize`, `metadata_csum`.
pub const FEATURE_RO_COMPAT: u32 = 0x0001 | 0x0002 | 0x0008 | 0x0020 | 0x0040 | 0x0400;
/// Extra inode bytes in use beyond the first 128 (mke2fs's default 32:
/// nanosecond times, creation time, the checksum's high half).
pub const EXTRA_ISIZE: u16 = 32;
/// The journal's inode.
pub const JOURNAL_INO: u32 = 8;
/// Offset of `s_checksum`.
const CHECKSUM_AT: usize = 0x3fc;

/// What a superblock says beside the geometry.
pub struct SuperblockFields<'a> {
    /// `s_uuid`.
    pub uuid: [u8; 16],
    /// `s_hash_seed` (directory hashing).
    pub hash_seed: [u8; 16],
    /// `s_volume_name` (at most 16 bytes).
    pub label: &'a str,
    /// Creation time, seconds since the epoch.
    pub now: u32,
    /// Free blocks in the whole file system.
    pub free_blocks: u64,
    /// Free inodes in the whole file system.
    pub free_inodes: u64,
    /// `s_jnl_blocks`: the journal inode's block map, size high and low.
    pub journal_backup: [u32; 17],
}

/// The superblock copy kept in group `group` (0: the primary).
pub fn encode(geometry: &Geometry, fields: &SuperblockFields<'_>, group: u64) -> [u8; 1024] {
    let mut s = [0u8; 1024];
    let lo = |v: u64| v as u32;
    let hi = |v: u64| (v >> 32) as u32;
    put32(&mut s, 0x00, geometry.inodes() as u32);
    put32(&mut s, 0x04, lo(geometry.blocks));
    put32(&mut s, 0x08, lo(geometry.reserved_blocks()));
    put32(&mut s, 0x0c, lo(fields.free_blocks));
    put32(&mut s, 0x10, fields.free_inodes as u32);
    put32(&mut s, 0x14, 0); // s_first_data_block
    put32(&mut s, 0x18, BLOCK_SIZE.trailing_zeros() - 10); // s_log_block_size
    put32(&mut s, 0x1c, BLOCK_SIZE.trailing_zeros() - 10); // s_log_cluster_size
    put32(&mut s, 0x20, BLOCKS_PER_GROUP as u32);
    put32(&mut s, 0x24, BLOCKS_PER_GROUP as u32);
    put32(&mut s, 0x28, geometry.inodes_per_group as u32);
    put32(&mut s, 0x30, fields.now); // s_wtime
    put16(&mut s, 0x36, 0xffff); // s_max_mnt_count: -1, no forced checks
    put16(&mut s, 0x38, MAGIC);
    put16(&mut s, 0x3a, 1); // s_state: clean
    put16(&mut s, 0x3c, 1); // s_errors: continue (mke2fs's default)
    put32(&mut s, 0x40, fields.now); // s_lastcheck
    put32(&mut s, 0x4c, 1); // s_rev_level: dynamic
    put32(&mut s, 0x54, FIRST_INO);
    put16(&mut s, 0x58, INODE_SIZE as u16);
    put16(&mut s, 0x5a, group as u16); // s_block_group_nr
    put32(&mut s, 0x5c, FEATURE_COMPAT);
    put32(&mut s, 0x60, FEATURE_INCOMPAT);
    put32(&mut s, 0x64, FEATURE_RO_COMPAT);
    s[0x68..0x78].copy_from_slice(&fields.uuid);
    let label = fields.label.as_bytes();
    let n = label.len().min(16);
    s[0x78..0x78 + n].copy_from_slice(&label[..n]);
    put32(&mut s, 0xe0, JOURNAL_INO);
    s[0xec..0xfc].copy_from_slice(&fields.hash_seed);
    s[0xfc] = 1; // s_def_hash_version: half_md4
    s[0xfd] = 1; // s_jnl_backup_type: s_jnl_blocks holds the inode's blocks
    put16(&mut s, 0xfe, DESC_SIZE as u16);
    put32(&mut s, 0x100, 0x0004 | 0x0008); // s_default_mount_opts: user_xattr, acl
    put32(&mut s, 0x108, fields.now); // s_mkfs_time
    for (i, word) in fields.journal_backup.iter().enumerate() {
        put32(&mut s, 0x10c + 4 * i, *word);
    }
    put32(&mut s, 0x150, hi(geometry.blocks));
    put32(&mut s, 0x154, hi(geometry.reserved_blocks()));
    put32(&mut s, 0x158, hi(fields.free_blocks));
    put16(&mut s, 0x15c, EXTRA_ISIZE); // s_min_extra_isize
    put16(&mut s, 0x15e, EXTRA_ISIZE); // s_want_extra_isize
    put32(&mut s, 0x160, 0x0001); // s_flags: signed directory hash (x86's char)
    s[0x175] = 1; // s_checksum_type: crc32c
    put64(&mut s, 0x178, 0); // s_kbytes_written
    let checksum = crc32c_raw(!0, &s[..CHECKSUM_AT]);
    put32(&mut s, CHECKSUM_AT, checksum);
    s
}

/// The seed of every metadata checksum: CRC32C of the UUID.
pub fn checksum_seed(uuid: &[u8; 16]) -> u32 {
    crc32c_raw(!0, uuid)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fields() -> SuperblockFields<'static> {
        SuperblockFields {
            uuid: [7; 16],
            hash_seed: [9; 16],
            label: "confboot-state",
            now: 1_800_000_000,
            free_blocks: 5 << 32 | 3,
            free_inodes: 100,
            journal_backup: [0; 17],
        }
    }

    #[test]
    fn fields_land_where_the_kernel_reads_them() {
        let g = Geometry::for_device(1 << 30).unwrap();
        let s = encode(&g, &fields(), 3);
        let le16 = |at: usize| u16::from_le_bytes([s[at], s[at + 1]]);
        let le32 = |at: usize| u32::from_le_bytes(s[at..at + 4].try_into().unwrap());
        assert_eq!(le16(0x38), MAGIC);
        assert_eq!(le32(0x04), 262_144);
        assert_eq!((le32(0x0c), le32(0x158)), (3, 5));
        assert_eq!(le16(0x5a), 3);
        assert_eq!(&s[0x78..0x86], b"confboot-state");
        assert_eq!(le32(0x18), 2);
        assert_eq!(le32(0x3fc), crc32c_raw(!0, &s[..0x3fc]));
    }
}
