//! A native ext4 formatter for the state disk: the file system mke2fs
//! would make, written in Rust, writing only metadata (a 1 TiB disk
//! formats in well under a second), so the production image needs no C
//! program for it.
//!
//! What it makes, deliberately:
//! - 4 KiB blocks, 32,768 blocks per group, 256-byte inodes, one inode per
//!   16 KiB (mke2fs's `ext4` defaults), 5 % reserved for root, label
//!   [`super::filesystem::LABEL`], a random UUID and directory-hash seed
//!   (ring's `SystemRandom`);
//! - features `has_journal ext_attr dir_index filetype extent 64bit
//!   sparse_super large_file huge_file dir_nlink extra_isize
//!   metadata_csum`: mke2fs's default ext4 set less three:
//!   - `flex_bg`: packs the metadata of 16 groups together (fewer seeks on
//!     spinning disks). Without it every group is self-contained, so every
//!     group that holds nothing but its own metadata can stay
//!     `BLOCK_UNINIT` and its bitmap is never written, and no placement
//!     search is needed for a short last group;
//!   - `resize_inode`: reserves descriptor blocks and an indirect-mapped
//!     inode for growing the file system offline; the state disk is never
//!     grown, and that inode is the one part of mke2fs's layout that is
//!     neither extents nor plain metadata;
//!   - `metadata_csum_seed`, `orphan_file` and the like: newer than what
//!     the Debian 12 e2fsprogs enables by default.
//! - lazy initialization as mke2fs's `lazy_itable_init=1,lazy_journal_init=1`:
//!   every group but the first is `INODE_UNINIT` (its inode table is not
//!   touched; the kernel zeroes it in the background), groups with no
//!   allocation but their own metadata are `BLOCK_UNINIT` (bitmap not
//!   written), only group 0's inode table is zeroed (`ITABLE_ZEROED`), and
//!   of the journal only its superblock is written (empty: `s_start = 0`);
//! - a journal in inode 8 of mke2fs's default size (4 MiB below 128 MiB up
//!   to 1 GiB from 128 GiB), the root directory (inode 2) and `lost+found`
//!   (inode 11, 16 KiB as mke2fs makes it);
//! - checksums (CRC32C, [`crc`]) on the superblock, every descriptor, the
//!   written bitmaps, inodes, directory blocks and extent blocks.
//!
//! Sizes from [`geometry::MIN_BYTES`] (8 MiB) to [`geometry::MAX_BYTES`]
//! (64 TiB); others are refused ([`Ext4Error::TooSmall`],
//! [`Ext4Error::TooLarge`]). A file system below 128 MiB has one group and
//! so no superblock copy. Superblocks are written last, after a sync of
//! everything else, the primary first: a format cut short before it leaves
//! no superblock anywhere, which [`super::StateDisk::ensure_filesystem`]
//! reads as "make it again".

use std::fs::File;
use std::io::{Seek, SeekFrom};
use std::os::unix::fs::FileExt;
use std::path::Path;

pub mod alloc;
pub mod crc;
pub mod dir;
pub mod geometry;
pub mod group;
pub mod inode;
pub mod journal;
pub mod superblock;

use alloc::BlockAllocator;
use geometry::{BLOCK_SIZE, FIRST_INO, Geometry, INODE_SIZE};
use group::GroupDesc;
use inode::{Extent, Inode};

/// Why a format failed.
#[derive(Debug, thiserror::Error)]
pub enum Ext4Error {
    /// The device is smaller than the smallest file system made.
    #[error("the device has {bytes} bytes; an ext4 file system needs at least {min}")]
    TooSmall {
        /// The device's size.
        bytes: u64,
        /// The smallest size formatted.
        min: u64,
    },
    /// The device is larger than the largest file system made.
    #[error("the device has {bytes} bytes; this formatter makes at most {max}")]
    TooLarge {
        /// The device's size.
        bytes: u64,
        /// The largest size formatted.
        max: u64,
    },
    /// The metadata does not fit the device (a layout that leaves no room
    /// for the journal).
    #[error("no room for {blocks} blocks of journal and directories")]
    NoSpace {
        /// Blocks that could not be placed.
        blocks: u64,
    },
    /// The system's random source failed.
    #[error("the system's random source failed")]
    Random,
    /// Reading or writing the device failed.
    #[error("{action}: {source}")]
    Io {
        /// What was being done.
        action: &'static str,
        /// The error.
        source: std::io::Error,
    },
}

/// Writes `v` little-endian at `at`.
fn put16(buf: &mut [u8], at: usize, v: u16) {
    buf[at..at + 2].copy_from_slice(&v.to_le_bytes());
}

/// Writes `v` little-endian at `at`.
fn put32(buf: &mut [u8], at: usize, v: u32) {
    buf[at..at + 4].copy_from_slice(&v.to_le_bytes());
}

/// Writes `v` little-endian at `at`.
fn put64(buf: &mut [u8], at: usize, v: u64) {
    buf[at..at + 8].copy_from_slice(&v.to_le_bytes());
}

/// The root directory's inode.
const ROOT_INO: u32 = 2;
/// lost+found's inode.
const LOST_FOUND_INO: u32 = FIRST_INO;
/// lost+found's blocks (16 KiB, as mke2fs makes it).
const LOST_FOUND_BLOCKS: u64 = 4;

/// What [`format_file`] made.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Formatted {
    /// The layout.
    pub geometry: Geometry,
    /// The file system's UUID, lowercase with dashes.
    pub uuid: String,
    /// The journal's blocks.
    pub journal_blocks: u64,
}

/// Random bytes from ring's `SystemRandom`.
fn random16() -> Result<[u8; 16], Ext4Error> {
    use ring::rand::SecureRandom;
    let mut b = [0u8; 16];
    ring::rand::SystemRandom::new()
        .fill(&mut b)
        .map_err(|_| Ext4Error::Random)?;
    Ok(b)
}

/// Makes an ext4 file system labelled `label` on the device at `path`
/// (a block device or a file), over whatever is there.
pub fn format_path(path: &Path, label: &str) -> Result<Formatted, Ext4Error> {
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .map_err(|source| Ext4Error::Io {
            action: "opening the device",
            source,
        })?;
    format_file(&file, label)
}

/// Makes an ext4 file system labelled `label` (at most 16 bytes used) on
/// `file`, using all of it that the layout can.
pub fn format_file(mut file: &File, label: &str) -> Result<Formatted, Ext4Error> {
    let io = |action: &'static str| move |source| Ext4Error::Io { action, source };
    let bytes = file
        .seek(SeekFrom::End(0))
        .map_err(io("sizing the device"))?;
    let geometry = Geometry::for_device(bytes)?;
    let g = &geometry;
    let mut uuid = random16()?;
    uuid[6] = (uuid[6] & 0x0f) | 0x40;
    uuid[8] = (uuid[8] & 0x3f) | 0x80;
    let hash_seed = random16()?;
    let seed = superblock::checksum_seed(&uuid);
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs().min(u64::from(u32::MAX)) as u32)
        .unwrap_or(0);
    let write = |buf: &[u8], block: u64, action: &'static str| {
        file.write_all_at(buf, block * BLOCK_SIZE)
            .map_err(io(action))
    };

    // Data: the directories, then the journal (and its extent leaf when
    // the journal needs more extents than the inode holds).
    let mut alloc = BlockAllocator::new(g);
    let root_block = alloc.one()?;
    let lost_found = alloc.take(LOST_FOUND_BLOCKS)?;
    let journal_blocks = g.journal_blocks();
    let journal_runs = alloc.take(journal_blocks)?;
    let journal_extents = inode::extents_of(&journal_runs);
    let (journal_root, journal_leaf) = if journal_extents.len() <= inode::INLINE_EXTENTS {
        (inode::inline_root(&journal_extents), None)
    } else {
        if journal_extents.len() > inode::LEAF_EXTENTS {
            return Err(Ext4Error::NoSpace {
                blocks: journal_blocks,
            });
        }
        let leaf = alloc.one()?;
        (inode::index_root(leaf), Some(leaf))
    };

    // Inodes.
    let dir = |links, size_blocks: u64, block| Inode {
        mode: inode::S_IFDIR,
        links,
        size: size_blocks * BLOCK_SIZE,
        sectors: size_blocks * BLOCK_SIZE / 512,
        block,
        now,
    };
    let root = Inode {
        mode: inode::S_IFDIR | 0o755,
        ..dir(
            3,
            1,
            inode::inline_root(&[Extent {
                file_block: 0,
                len: 1,
                start: root_block,
            }]),
        )
    };
    let lost_found_inode = Inode {
        mode: inode::S_IFDIR | 0o700,
        ..dir(
            2,
            LOST_FOUND_BLOCKS,
            inode::inline_root(&inode::extents_of(&lost_found)),
        )
    };
    let journal_sectors = (journal_blocks + u64::from(journal_leaf.is_some())) * BLOCK_SIZE / 512;
    let journal_inode = Inode {
        mode: inode::S_IFREG | 0o600,
        links: 1,
        size: journal_blocks * BLOCK_SIZE,
        sectors: journal_sectors,
        block: journal_root,
        now,
    };
    let mut journal_backup = [0u32; 17];
    for (n, word) in journal_root.chunks(4).enumerate() {
        journal_backup[n] = u32::from_le_bytes([word[0], word[1], word[2], word[3]]);
    }
    journal_backup[15] = (journal_inode.size >> 32) as u32;
    journal_backup[16] = journal_inode.size as u32;

    // Group 0's inode table: zeroed whole, then the reserved inodes.
    let mut itable = vec![0u8; (g.itable_blocks * BLOCK_SIZE) as usize];
    for ino in 1..=FIRST_INO {
        let bytes = match ino {
            ROOT_INO => root.encode(ino, seed),
            superblock::JOURNAL_INO => journal_inode.encode(ino, seed),
            LOST_FOUND_INO => lost_found_inode.encode(ino, seed),
            _ => inode::encode_empty(ino, seed),
        };
        let at = ((ino - 1) as u64 * INODE_SIZE) as usize;
        itable[at..at + INODE_SIZE as usize].copy_from_slice(&bytes);
    }

    // Wipe the boot block's first KiB, then write what is not a superblock.
    write(&[0u8; 1024], 0, "clearing the boot block")?;
    write(&itable, g.inode_table(0), "writing the inode table")?;
    let root_dir = dir::dir_block(
        &[
            (ROOT_INO, ".", dir::FT_DIR),
            (ROOT_INO, "..", dir::FT_DIR),
            (LOST_FOUND_INO, "lost+found", dir::FT_DIR),
        ],
        ROOT_INO,
        seed,
    );
    write(&root_dir, root_block, "writing the root directory")?;
    let mut lost_found_blocks = inode::extents_of(&lost_found)
        .iter()
        .flat_map(|e| (0..u64::from(e.len)).map(move |i| e.start + i))
        .collect::<Vec<_>>()
        .into_iter();
    if let Some(first) = lost_found_blocks.next() {
        let block = dir::dir_block(
            &[
                (LOST_FOUND_INO, ".", dir::FT_DIR),
                (ROOT_INO, "..", dir::FT_DIR),
            ],
            LOST_FOUND_INO,
            seed,
        );
        write(&block, first, "writing lost+found")?;
    }
    let empty = dir::dir_block(&[], LOST_FOUND_INO, seed);
    for block in lost_found_blocks {
        write(&empty, block, "writing lost+found")?;
    }
    if let Some(leaf) = journal_leaf {
        let block = inode::leaf_block(&journal_extents, superblock::JOURNAL_INO, seed);
        write(&block, leaf, "writing the journal's extents")?;
    }
    write(
        &journal::superblock(journal_blocks, &uuid),
        journal_runs[0].0,
        "writing the journal superblock",
    )?;

    // Bitmaps and descriptors.
    let last = g.groups - 1;
    let mut gdt = vec![0u8; (g.gdt_blocks * BLOCK_SIZE) as usize];
    let mut free_blocks = 0;
    for group in 0..g.groups {
        let used = alloc.used.get(&group).map(Vec::as_slice).unwrap_or(&[]);
        let used_blocks: u64 = used.iter().map(|r| r.1).sum();
        let mut desc = GroupDesc {
            block_bitmap: g.block_bitmap(group),
            inode_bitmap: g.inode_bitmap(group),
            inode_table: g.inode_table(group),
            free_blocks: g.group_blocks(group) - g.overhead(group) - used_blocks,
            free_inodes: g.inodes_per_group,
            itable_unused: g.inodes_per_group,
            flags: group::INODE_UNINIT,
            ..GroupDesc::default()
        };
        if group == 0 || group == last || !used.is_empty() {
            let bitmap = group::block_bitmap(g, group, used);
            desc.block_bitmap_csum = group::block_bitmap_csum(seed, &bitmap);
            write(&bitmap, desc.block_bitmap, "writing a block bitmap")?;
        } else {
            desc.flags |= group::BLOCK_UNINIT;
        }
        if group == 0 {
            let bitmap = group::inode_bitmap(g, u64::from(FIRST_INO));
            desc.inode_bitmap_csum = group::inode_bitmap_csum(g, seed, &bitmap);
            write(&bitmap, desc.inode_bitmap, "writing an inode bitmap")?;
            desc.flags = group::ITABLE_ZEROED;
            desc.free_inodes = g.inodes_per_group - u64::from(FIRST_INO);
            desc.itable_unused = desc.free_inodes;
            desc.used_dirs = 2;
        }
        free_blocks += desc.free_blocks;
        let at = (group * geometry::DESC_SIZE) as usize;
        gdt[at..at + geometry::DESC_SIZE as usize].copy_from_slice(&desc.encode(group, seed));
    }
    let copies: Vec<u64> = (0..g.groups).filter(|&n| Geometry::has_super(n)).collect();
    for &group in &copies {
        write(&gdt, g.group_start(group) + 1, "writing a descriptor table")?;
    }
    file.sync_all().map_err(io("syncing the metadata"))?;

    // Superblocks last: the primary, synced, then the copies. A format cut
    // short before the primary leaves no superblock anywhere (the next
    // boot makes the file system again); after it, a complete file system
    // that may lack some copies.
    let fields = superblock::SuperblockFields {
        uuid,
        hash_seed,
        label,
        now,
        free_blocks,
        free_inodes: g.inodes() - u64::from(FIRST_INO),
        journal_backup,
    };
    file.write_all_at(&superblock::encode(g, &fields, 0), 1024)
        .map_err(io("writing the superblock"))?;
    file.sync_all().map_err(io("syncing the superblock"))?;
    for &group in copies.iter().filter(|&&n| n > 0) {
        let mut block = vec![0u8; BLOCK_SIZE as usize];
        block[..1024].copy_from_slice(&superblock::encode(g, &fields, group));
        write(&block, g.group_start(group), "writing a superblock copy")?;
    }
    file.sync_all()
        .map_err(io("syncing the superblock copies"))?;
    Ok(Formatted {
        geometry,
        uuid: super::uuid_text(&uuid),
        journal_blocks,
    })
}
