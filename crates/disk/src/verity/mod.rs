//! dm-verity without veritysetup: the hash tree of a read-only image, its
//! superblock, the parameters the kernel command line carries, and the
//! check PID 1 makes before it trusts the tree's top.
//!
//! # The format
//!
//! The kernel describes the target and the tree in
//! `Documentation/admin-guide/device-mapper/verity.rst`; cryptsetup
//! describes veritysetup's on-disk format (the superblock, where the tree
//! starts) on its DMVerity wiki page and in `lib/verity/verity.h` (`struct
//! verity_sb`). In short, for format version 1 with SHA-256:
//!
//! - The **data** is cut into `data_blocks` blocks of `data_block_size`
//!   bytes. Each block's digest is `SHA-256(salt ‖ block)` (version 1
//!   puts the salt first; version 0, Chrome OS's, puts it last and is not
//!   supported here).
//! - Digests are packed into **hash blocks** of `hash_block_size` bytes,
//!   `hash_block_size / 32` per block, in data order, the rest of the
//!   last block of a level zero-filled. Those hash blocks form the lowest
//!   level; they are hashed the same way (salt first, whole block,
//!   padding included) into the level above, and so on until a level is
//!   one block: the **top level**. The **root hash** is the digest of
//!   that one block. One data block makes no level at all: the root hash
//!   is then that block's digest.
//! - On the hash device the levels are stored top first: the top block at
//!   `hash_start_block`, then the level below it, down to the lowest
//!   level, each level's blocks in order.
//! - The **superblock** (optional, on by default as in veritysetup) is
//!   512 bytes at the hash offset: magic `verity\0\0`, version 1, hash
//!   type 1, a UUID, the algorithm name, both block sizes, the number of
//!   data blocks and the salt ([`superblock`]). The tree then starts at
//!   the first hash block after it: `hash_start_block =
//!   ceil((hash_offset + 512) / hash_block_size)`. Without a superblock
//!   the tree starts at the hash offset (`hash_offset / hash_block_size`;
//!   here the offset must then be a multiple of the hash block size,
//!   where veritysetup would silently round it down). The kernel's table
//!   gets `hash_start_block`; the kernel never reads the superblock.
//! - Data and tree may share one file or device, the tree after the data
//!   (`hash_offset >= data_blocks * data_block_size`).
//!
//! # What is checked where
//!
//! The root hash comes from the measured kernel command line
//! ([`VerityParams::from_cmdline`]). [`check_top_level`] reads the top
//! block (and the superblock) and refuses a tree whose top does not hash
//! to the root hash before anything is mapped. Everything below the top
//! is the kernel's to check, block by block, when it is read through the
//! mapping ([`crate::dm::verity`]): a flipped byte in a lower level passes
//! [`check_top_level`] and fails the read of the data it covers, which by
//! default stops the node ([`crate::dm::verity::CorruptionMode::Panic`]).
//!
//! [`format()`] builds a tree equal, byte for byte, to `veritysetup format`'s
//! (tested against it), reading the data one block at a time.
// Every length and offset here comes from the host (a disk, a datagram,
// a socket): a cast that could truncate, wrap or drop a sign is refused
// at compile time, so each conversion is checked where it happens.
#![deny(
    clippy::cast_possible_truncation,
    clippy::cast_sign_loss,
    clippy::cast_possible_wrap,
    clippy::cast_lossless
)]

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

mod cmdline;
mod format;
pub mod superblock;

pub use cmdline::MAX_CMDLINE_LEN;
pub use format::{FormatOptions, FormatResult, format};
pub use superblock::Superblock;

/// The only hash algorithm: SHA-256.
pub const HASH_ALGORITHM: &str = "sha256";
/// The digest length of [`HASH_ALGORITHM`].
pub const DIGEST_LEN: usize = 32;
/// The smallest data or hash block size.
pub const MIN_BLOCK_SIZE: u32 = 512;
/// The largest data or hash block size accepted (veritysetup takes up to
/// 512 KiB; the kernel maps only block sizes up to its page size).
pub const MAX_BLOCK_SIZE: u32 = 65536;
/// The longest salt (the superblock's salt field).
pub const MAX_SALT_LEN: usize = 256;
/// The hash tree's deepest level count (the kernel's and cryptsetup's
/// bound; with SHA-256 and 512-byte hash blocks 16 levels already cover
/// 2^64 data blocks).
pub const MAX_LEVELS: usize = 63;

/// Why a dm-verity operation failed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum VerityError {
    /// Reading or writing a file or device failed.
    #[error("verity I/O: {0}")]
    Io(String),
    /// Parameters or options out of range or inconsistent.
    #[error("verity parameters: {0}")]
    Invalid(String),
    /// The kernel command line's `confboot.root*` words are malformed.
    #[error("kernel command line: {0}")]
    Cmdline(String),
    /// A superblock is malformed or not one this module reads.
    #[error("verity superblock: {0}")]
    Superblock(String),
    /// The superblock on the hash device disagrees with the parameters.
    #[error("verity superblock on {device} disagrees with the parameters: {what}")]
    SuperblockMismatch {
        /// The hash device.
        device: String,
        /// What differs.
        what: superblock::Disagreements,
    },
    /// The tree's top level does not hash to the root hash.
    #[error(
        "the top level of the hash tree ({what} {block} at byte {offset} of {device}) does not hash to the root hash"
    )]
    RootHashMismatch {
        /// The device read.
        device: String,
        /// `hash block` or `data block` (a one-block image has no tree).
        what: &'static str,
        /// The block's number, in blocks of its device's block size.
        block: u64,
        /// Its byte offset.
        offset: u64,
    },
    /// The system's random source failed.
    #[error("no random bytes for the salt or UUID")]
    Random,
}

/// Everything dm-verity needs to map a verified image: what the kernel
/// command line carries ([`from_cmdline`](Self::from_cmdline),
/// [`cmdline_words`](Self::cmdline_words)) and what [`format()`] returns.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VerityParams {
    /// The data device (the image).
    pub data_device: PathBuf,
    /// The device holding the hash tree (may be the data device).
    pub hash_device: PathBuf,
    /// The data block size, bytes.
    pub data_block_size: u32,
    /// The hash block size, bytes.
    pub hash_block_size: u32,
    /// The number of data blocks the tree covers (the mapping's size).
    pub data_blocks: u64,
    /// Where the hash area starts on the hash device, bytes: the
    /// superblock if there is one, else the tree.
    pub hash_offset: u64,
    /// Whether a superblock is at `hash_offset`.
    pub superblock: bool,
    /// Where the tree's top block is, in hash blocks from the start of the
    /// hash device (the kernel table's `hash_start_block`):
    /// [`hash_start_block`] of the three fields above.
    pub hash_start_block: u64,
    /// The root hash.
    pub root_hash: [u8; DIGEST_LEN],
    /// The salt (empty for none).
    pub salt: Vec<u8>,
}

/// Where the tree starts, in hash blocks, for a hash area at `hash_offset`
/// with or without a superblock (veritysetup's rule; see the module doc).
pub fn hash_start_block(hash_offset: u64, hash_block_size: u32, superblock: bool) -> u64 {
    let hbs = u64::from(hash_block_size.max(1));
    if superblock {
        (hash_offset.saturating_add(superblock::SUPERBLOCK_SIZE as u64)).div_ceil(hbs)
    } else {
        hash_offset / hbs
    }
}

/// Checks a block size: a power of two in [`MIN_BLOCK_SIZE`]..=[`MAX_BLOCK_SIZE`].
pub fn check_block_size(what: &str, size: u32) -> Result<(), VerityError> {
    if (MIN_BLOCK_SIZE..=MAX_BLOCK_SIZE).contains(&size) && size.is_power_of_two() {
        Ok(())
    } else {
        Err(VerityError::Invalid(format!(
            "{what} {size} (want a power of two from {MIN_BLOCK_SIZE} to {MAX_BLOCK_SIZE})"
        )))
    }
}

/// One level of the tree: where its first block is (hash blocks from the
/// start of the hash device) and how many blocks it has.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Level {
    pub(crate) start: u64,
    pub(crate) blocks: u64,
}

/// The tree's levels, lowest (the data's digests) first; the last is the
/// one-block top. Empty for one data block. Checked: no level count or
/// byte offset overflows.
pub(crate) fn tree_levels(
    data_blocks: u64,
    hash_block_size: u32,
    hash_start_block: u64,
) -> Result<Vec<Level>, VerityError> {
    let overflow = || VerityError::Invalid("the hash tree does not fit a 64-bit device".into());
    if data_blocks == 0 {
        return Err(VerityError::Invalid("no data blocks".into()));
    }
    let per_block = u64::from(hash_block_size) / DIGEST_LEN as u64;
    let mut sizes = Vec::new();
    let mut s = data_blocks;
    while s > 1 {
        s = s.div_ceil(per_block);
        sizes.push(s);
        if sizes.len() > MAX_LEVELS {
            return Err(overflow());
        }
    }
    // Stored top first.
    let mut levels = vec![
        Level {
            start: 0,
            blocks: 0
        };
        sizes.len()
    ];
    let mut at = hash_start_block;
    for (i, &blocks) in sizes.iter().enumerate().rev() {
        levels[i] = Level { start: at, blocks };
        at = at.checked_add(blocks).ok_or_else(overflow)?;
    }
    at.checked_mul(u64::from(hash_block_size))
        .ok_or_else(overflow)?;
    Ok(levels)
}

/// `SHA-256(salt ‖ block)`: format version 1's digest of a data or hash
/// block.
pub(crate) fn block_digest(salt: &[u8], block: &[u8]) -> [u8; DIGEST_LEN] {
    let mut ctx = ring::digest::Context::new(&ring::digest::SHA256);
    ctx.update(salt);
    ctx.update(block);
    let mut out = [0u8; DIGEST_LEN];
    out.copy_from_slice(ctx.finish().as_ref());
    out
}

/// Equality in time independent of where the first difference is.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

impl VerityParams {
    /// Checks the parameters: block sizes, salt length, data blocks, the
    /// hash offset's alignment (512 bytes; a hash block without a
    /// superblock), `hash_start_block` against [`hash_start_block`], a tree
    /// that fits, and no overlap of data and tree on one device.
    pub fn validate(&self) -> Result<(), VerityError> {
        let bad = |m: String| Err(VerityError::Invalid(m));
        check_block_size("data block size", self.data_block_size)?;
        check_block_size("hash block size", self.hash_block_size)?;
        if self.salt.len() > MAX_SALT_LEN {
            return bad(format!(
                "a salt of {} bytes (at most {MAX_SALT_LEN})",
                self.salt.len()
            ));
        }
        let data_bytes = self.data_bytes()?;
        if !self.hash_offset.is_multiple_of(512) {
            return bad(format!(
                "hash offset {} is not a multiple of 512",
                self.hash_offset
            ));
        }
        if !self.superblock
            && !self
                .hash_offset
                .is_multiple_of(u64::from(self.hash_block_size))
        {
            return bad(format!(
                "hash offset {} is not a multiple of the hash block size {} (no superblock)",
                self.hash_offset, self.hash_block_size
            ));
        }
        let start = hash_start_block(self.hash_offset, self.hash_block_size, self.superblock);
        if self.hash_start_block != start {
            return bad(format!(
                "hash start block {} (the hash offset {} {} a superblock puts it at {start})",
                self.hash_start_block,
                self.hash_offset,
                if self.superblock { "with" } else { "without" }
            ));
        }
        tree_levels(self.data_blocks, self.hash_block_size, start)?;
        if self.data_device == self.hash_device && data_bytes > self.hash_offset {
            return bad(format!(
                "data ({data_bytes} bytes) and hash area (from byte {}) overlap on {}",
                self.hash_offset,
                self.data_device.display()
            ));
        }
        Ok(())
    }

    /// The data area's size in bytes (`data_blocks * data_block_size`),
    /// checked: at least one block, no overflow.
    pub fn data_bytes(&self) -> Result<u64, VerityError> {
        if self.data_blocks == 0 {
            return Err(VerityError::Invalid("no data blocks".into()));
        }
        self.data_blocks
            .checked_mul(u64::from(self.data_block_size))
            .ok_or_else(|| {
                VerityError::Invalid(format!("{} data blocks overflow", self.data_blocks))
            })
    }
}

/// The check PID 1 makes before it maps the root: reads the hash tree's
/// top block from `hash_device` (at `params.hash_start_block`; for a
/// one-block image, the data block itself from `params.data_device`),
/// hashes it with the salt first and compares the digest with
/// `params.root_hash` in constant time. With `params.superblock`, the
/// superblock at `params.hash_offset` must be there and agree with the
/// parameters (block sizes, data blocks, salt); without, bytes there that
/// carry the superblock magic must agree too. Reads the superblock (512
/// bytes) and one block, nothing else.
///
/// Lower levels are not read: a tampered lower level passes this check
/// and is caught by the kernel when the data it covers is read through
/// the mapping.
pub fn check_top_level(hash_device: &Path, params: &VerityParams) -> Result<(), VerityError> {
    params.validate()?;
    let name = hash_device.display().to_string();
    let file =
        File::open(hash_device).map_err(|e| VerityError::Io(format!("opening {name}: {e}")))?;
    let mut sb = [0u8; superblock::SUPERBLOCK_SIZE];
    let read_sb = file.read_exact_at(&mut sb, params.hash_offset);
    if params.superblock || (read_sb.is_ok() && Superblock::has_magic(&sb)) {
        read_sb.map_err(|e| {
            VerityError::Io(format!(
                "reading the superblock at byte {} of {name}: {e}",
                params.hash_offset
            ))
        })?;
        let found = Superblock::parse(&sb)?;
        found
            .agrees_with(params)
            .map_err(|what| VerityError::SuperblockMismatch {
                device: name.clone(),
                what,
            })?;
    }
    let levels = tree_levels(
        params.data_blocks,
        params.hash_block_size,
        params.hash_start_block,
    )?;
    let (file, name, what, size, block) = match levels.last() {
        Some(top) => (file, name, "hash block", params.hash_block_size, top.start),
        None => {
            let data = params.data_device.display().to_string();
            let file = File::open(&params.data_device)
                .map_err(|e| VerityError::Io(format!("opening {data}: {e}")))?;
            (file, data, "data block", params.data_block_size, 0)
        }
    };
    let offset = block * u64::from(size);
    let mut buf = vec![0u8; size as usize];
    file.read_exact_at(&mut buf, offset)
        .map_err(|e| VerityError::Io(format!("reading {what} {block} of {name}: {e}")))?;
    if constant_time_eq(&block_digest(&params.salt, &buf), &params.root_hash) {
        Ok(())
    } else {
        Err(VerityError::RootHashMismatch {
            device: name,
            what,
            block,
            offset,
        })
    }
}

#[cfg(test)]
mod tests;
