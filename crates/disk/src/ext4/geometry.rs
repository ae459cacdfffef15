//! Where everything goes: the size of the file system, its block groups,
//! the inode count, and each group's metadata blocks (no `flex_bg`: a
//! group's superblock copy, descriptor-table copy, bitmaps and inode table
//! all lie at its start).

use super::Ext4Error;

/// Bytes per block (4 KiB, mke2fs's choice for every size but tiny ones).
pub const BLOCK_SIZE: u64 = 4096;
/// Blocks per group: one bitmap block's bits.
pub const BLOCKS_PER_GROUP: u64 = 8 * BLOCK_SIZE;
/// Bytes per on-disk inode (mke2fs's default: room for extra fields and
/// in-inode extended attributes).
pub const INODE_SIZE: u64 = 256;
/// Bytes per group descriptor (the `64bit` feature's size).
pub const DESC_SIZE: u64 = 64;
/// One inode per this many bytes of disk (mke2fs's default `inode_ratio`).
pub const BYTES_PER_INODE: u64 = 16384;
/// Inodes per inode-table block.
pub const INODES_PER_BLOCK: u64 = BLOCK_SIZE / INODE_SIZE;
/// Most inodes a group can have: one bitmap block's bits.
pub const MAX_INODES_PER_GROUP: u64 = 8 * BLOCK_SIZE;
/// The first inode a file may use; 1 to 10 are reserved, 11 is lost+found.
pub const FIRST_INO: u32 = 11;
/// The smallest file system made: 8 MiB, where mke2fs's default journal
/// (1,024 blocks) still fits with room for data.
pub const MIN_BYTES: u64 = 2048 * BLOCK_SIZE;
/// The largest: 64 TiB. Without `meta_bg` the descriptor table and each
/// of its sparse copies grow with the disk (32 MiB each at this size);
/// beyond it they would no longer be "only metadata" to write.
pub const MAX_BYTES: u64 = 64 << 40;
/// A last, partial group smaller than its metadata plus this many blocks
/// is left out (as mke2fs does): the file system ends before the device.
const MIN_LAST_GROUP_DATA: u64 = 50;

/// The layout of one file system.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Geometry {
    /// Blocks in the file system (may be fewer than the device holds).
    pub blocks: u64,
    /// Block groups.
    pub groups: u64,
    /// Inodes per group (a multiple of [`INODES_PER_BLOCK`]).
    pub inodes_per_group: u64,
    /// Blocks of one group's inode table.
    pub itable_blocks: u64,
    /// Blocks of the group descriptor table (and of each copy).
    pub gdt_blocks: u64,
}

impl Geometry {
    /// The layout for a device of `bytes` bytes: every whole 4 KiB block,
    /// less a last group too small to be worth its metadata.
    pub fn for_device(bytes: u64) -> Result<Geometry, Ext4Error> {
        if bytes < MIN_BYTES {
            return Err(Ext4Error::TooSmall {
                bytes,
                min: MIN_BYTES,
            });
        }
        if bytes > MAX_BYTES {
            return Err(Ext4Error::TooLarge {
                bytes,
                max: MAX_BYTES,
            });
        }
        let geometry = Geometry::for_blocks(bytes / BLOCK_SIZE);
        let last = geometry.groups - 1;
        let last_blocks = geometry.group_blocks(last);
        if last > 0 && last_blocks < geometry.overhead(last) + MIN_LAST_GROUP_DATA {
            return Ok(Geometry::for_blocks(geometry.blocks - last_blocks));
        }
        Ok(geometry)
    }

    /// The layout of exactly `blocks` blocks (bounded by [`for_device`](Self::for_device)).
    fn for_blocks(blocks: u64) -> Geometry {
        let groups = blocks.div_ceil(BLOCKS_PER_GROUP);
        let inodes = blocks * BLOCK_SIZE / BYTES_PER_INODE;
        let most_per_group = (u64::from(u32::MAX) / groups) / INODES_PER_BLOCK * INODES_PER_BLOCK;
        let inodes_per_group = inodes
            .div_ceil(groups)
            .next_multiple_of(INODES_PER_BLOCK)
            .clamp(INODES_PER_BLOCK, MAX_INODES_PER_GROUP)
            .min(most_per_group);
        Geometry {
            blocks,
            groups,
            inodes_per_group,
            itable_blocks: inodes_per_group / INODES_PER_BLOCK,
            gdt_blocks: (groups * DESC_SIZE).div_ceil(BLOCK_SIZE),
        }
    }

    /// Whether group `g` holds a superblock and descriptor-table copy
    /// (`sparse_super`: groups 0, 1 and the powers of 3, 5 and 7).
    pub fn has_super(g: u64) -> bool {
        let power_of = |base: u64| {
            let mut n = g;
            while n > 1 && n.is_multiple_of(base) {
                n /= base;
            }
            n == 1
        };
        g <= 1 || power_of(3) || power_of(5) || power_of(7)
    }

    /// The first block of group `g`.
    pub fn group_start(&self, g: u64) -> u64 {
        g * BLOCKS_PER_GROUP
    }

    /// The blocks group `g` spans (the last one may be short).
    pub fn group_blocks(&self, g: u64) -> u64 {
        BLOCKS_PER_GROUP.min(self.blocks - self.group_start(g))
    }

    /// Blocks of the superblock and descriptor-table copy at the start of
    /// group `g` (0 if it has none).
    pub fn super_blocks(&self, g: u64) -> u64 {
        if Geometry::has_super(g) {
            1 + self.gdt_blocks
        } else {
            0
        }
    }

    /// Group `g`'s block bitmap.
    pub fn block_bitmap(&self, g: u64) -> u64 {
        self.group_start(g) + self.super_blocks(g)
    }

    /// Group `g`'s inode bitmap.
    pub fn inode_bitmap(&self, g: u64) -> u64 {
        self.block_bitmap(g) + 1
    }

    /// The first block of group `g`'s inode table.
    pub fn inode_table(&self, g: u64) -> u64 {
        self.block_bitmap(g) + 2
    }

    /// Metadata blocks at the start of group `g`: superblock and
    /// descriptor copy, two bitmaps, the inode table.
    pub fn overhead(&self, g: u64) -> u64 {
        self.super_blocks(g) + 2 + self.itable_blocks
    }

    /// Inodes in the file system.
    pub fn inodes(&self) -> u64 {
        self.groups * self.inodes_per_group
    }

    /// The journal's blocks: mke2fs's default for this size
    /// (`ext2fs_default_journal_size`: 4 MiB up to 1 GiB).
    pub fn journal_blocks(&self) -> u64 {
        const STEPS: [(u64, u64); 8] = [
            (32_768, 1024),
            (262_144, 4096),
            (524_288, 8192),
            (4_194_304, 16_384),
            (8_388_608, 32_768),
            (16_777_216, 65_536),
            (33_554_432, 131_072),
            (u64::MAX, 262_144),
        ];
        STEPS
            .iter()
            .find(|(below, _)| self.blocks < *below)
            .map_or(262_144, |&(_, journal)| journal)
    }

    /// Blocks reserved for root: 5 %, mke2fs's default.
    pub fn reserved_blocks(&self) -> u64 {
        self.blocks / 20
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refuses_sizes_the_layout_cannot_hold() {
        assert!(matches!(
            Geometry::for_device(MIN_BYTES - 1),
            Err(Ext4Error::TooSmall { .. })
        ));
        assert!(Geometry::for_device(MIN_BYTES).is_ok());
        assert!(Geometry::for_device(MAX_BYTES).is_ok());
        assert!(matches!(
            Geometry::for_device(MAX_BYTES + 1),
            Err(Ext4Error::TooLarge { .. })
        ));
    }

    #[test]
    fn uses_whole_blocks_and_groups() {
        let g = Geometry::for_device(MIN_BYTES + 4095).unwrap();
        assert_eq!((g.blocks, g.groups), (2048, 1));
        let g = Geometry::for_device(1 << 30).unwrap();
        assert_eq!((g.blocks, g.groups, g.gdt_blocks), (262_144, 8, 1));
        assert_eq!(g.group_blocks(7), BLOCKS_PER_GROUP);
        let t = Geometry::for_device(1 << 40).unwrap();
        assert_eq!((t.groups, t.gdt_blocks), (8192, 128));
    }

    #[test]
    fn a_last_group_too_small_for_its_metadata_is_left_out() {
        // One group and 100 blocks: the 100 cannot hold bitmaps and a
        // 512-block inode table.
        let g = Geometry::for_device((BLOCKS_PER_GROUP + 100) * BLOCK_SIZE).unwrap();
        assert_eq!((g.blocks, g.groups), (BLOCKS_PER_GROUP, 1));
        // 3,000 blocks more can: a short last group.
        let g = Geometry::for_device((BLOCKS_PER_GROUP + 3000) * BLOCK_SIZE).unwrap();
        assert_eq!((g.blocks, g.groups), (BLOCKS_PER_GROUP + 3000, 2));
        assert_eq!(g.group_blocks(1), 3000);
        assert!(g.overhead(1) + MIN_LAST_GROUP_DATA <= 3000);
    }

    #[test]
    fn one_inode_per_16_kib_and_no_more_than_32_bits_of_them() {
        let g = Geometry::for_device(1 << 30).unwrap();
        assert_eq!(g.inodes(), (1 << 30) / BYTES_PER_INODE);
        assert_eq!(g.inodes_per_group % INODES_PER_BLOCK, 0);
        let big = Geometry::for_device(MAX_BYTES).unwrap();
        assert!(big.inodes() <= u64::from(u32::MAX));
        assert!(big.overhead(0) < BLOCKS_PER_GROUP);
    }

    #[test]
    fn sparse_super_copies_in_0_1_and_powers_of_3_5_7() {
        let with: Vec<u64> = (0..50).filter(|&g| Geometry::has_super(g)).collect();
        assert_eq!(with, [0, 1, 3, 5, 7, 9, 25, 27, 49]);
    }

    #[test]
    fn metadata_lies_at_the_start_of_each_group() {
        let g = Geometry::for_device(1 << 30).unwrap();
        assert_eq!(g.block_bitmap(0), 1 + g.gdt_blocks);
        assert_eq!(g.block_bitmap(2), 2 * BLOCKS_PER_GROUP);
        assert_eq!(
            g.inode_table(3),
            3 * BLOCKS_PER_GROUP + 1 + g.gdt_blocks + 2
        );
        assert_eq!(g.overhead(2), 2 + g.itable_blocks);
    }

    #[test]
    fn journal_size_follows_mke2fs() {
        let j = |bytes: u64| Geometry::for_device(bytes).unwrap().journal_blocks();
        assert_eq!(j(MIN_BYTES), 1024);
        assert_eq!(j(1 << 30), 8192);
        assert_eq!(j(1 << 40), 262_144);
    }
}
