//! The hash tree builder: `veritysetup format` (format version 1, SHA-256),
//! byte for byte.
//!
//! One pass over the data, one block at a time: each level keeps one hash
//! block being filled; a full block is written at its place in its level,
//! hashed, and its digest goes into the level above. At the end the
//! partly filled blocks are written zero-padded, lowest level first, and
//! the top block's digest is the root hash. Memory: one data block, one
//! hash block per level (at most 16 with SHA-256) and a read buffer.
//!
//! Like veritysetup, nothing is written outside the superblock's 512
//! bytes and the tree: the hash file is created (mode 0600) if missing,
//! extended to the tree's end if shorter, never truncated, and bytes
//! between the superblock and the tree's first block keep what they held.

use std::fs::{File, OpenOptions};
use std::io::{BufReader, Read, Seek, SeekFrom};
use std::os::unix::fs::{FileExt, MetadataExt, OpenOptionsExt};
use std::path::Path;

use super::superblock::Superblock;
use super::{
    DIGEST_LEN, MAX_SALT_LEN, VerityError, VerityParams, block_digest, check_block_size,
    hash_start_block, tree_levels,
};

/// How [`format()`] builds a tree; the defaults are veritysetup's.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FormatOptions {
    /// The salt, at most [`MAX_SALT_LEN`] bytes (empty: none). Default: 32
    /// random bytes.
    pub salt: Vec<u8>,
    /// The data block size. Default 4096.
    pub data_block_size: u32,
    /// The hash block size. Default 4096.
    pub hash_block_size: u32,
    /// Where the hash area starts in the hash file, bytes: a multiple of
    /// 512 (of the hash block size without a superblock). Default 0.
    pub hash_offset: u64,
    /// How many data blocks to cover. Default: the whole data file, in
    /// whole blocks.
    pub data_blocks: Option<u64>,
    /// Whether to write a superblock at the hash offset. Default true.
    pub superblock: bool,
    /// The superblock's UUID. Default: a random (version 4) one.
    pub uuid: Option<[u8; 16]>,
}

impl Default for FormatOptions {
    /// veritysetup's defaults, with a fresh random 32-byte salt.
    fn default() -> Self {
        FormatOptions {
            salt: random_bytes(32).expect("the system's random source works"),
            data_block_size: 4096,
            hash_block_size: 4096,
            hash_offset: 0,
            data_blocks: None,
            superblock: true,
            uuid: None,
        }
    }
}

/// What [`format()`] built.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FormatResult {
    /// The root hash.
    pub root_hash: [u8; DIGEST_LEN],
    /// The parameters that map it: `data_device` is the data path given to
    /// [`format()`], `hash_device` the hash path, or the data path when both
    /// name one file.
    pub params: VerityParams,
    /// The bytes of the hash file the tree needs: up to the end of its
    /// last block.
    pub hash_device_size: u64,
    /// The number of hash blocks in the tree (veritysetup's `Hash blocks`).
    pub hash_blocks: u64,
    /// The superblock's UUID, when one was written.
    pub uuid: Option<[u8; 16]>,
}

fn random_bytes(len: usize) -> Result<Vec<u8>, VerityError> {
    use ring::rand::SecureRandom;
    let mut b = vec![0u8; len];
    ring::rand::SystemRandom::new()
        .fill(&mut b)
        .map_err(|_| VerityError::Random)?;
    Ok(b)
}

/// A random version 4 UUID.
fn random_uuid() -> Result<[u8; 16], VerityError> {
    let mut u: [u8; 16] = random_bytes(16)?.try_into().expect("16 bytes");
    u[6] = (u[6] & 0x0f) | 0x40;
    u[8] = (u[8] & 0x3f) | 0x80;
    Ok(u)
}

/// Whether two open files are the same file or block device.
fn same_file(a: &File, b: &File) -> Result<bool, std::io::Error> {
    let (a, b) = (a.metadata()?, b.metadata()?);
    use std::os::unix::fs::FileTypeExt;
    if a.file_type().is_block_device() && b.file_type().is_block_device() {
        return Ok(a.rdev() == b.rdev());
    }
    Ok(a.dev() == b.dev() && a.ino() == b.ino())
}

/// Builds the dm-verity hash tree of `data` into `hash` (which may be the
/// same file, the tree after the data: `hash_offset >= data size`), as
/// `veritysetup format` does, and returns the root hash and the
/// parameters. Reads `data` block by block; checks every size first.
pub fn format(data: &Path, hash: &Path, opts: &FormatOptions) -> Result<FormatResult, VerityError> {
    let invalid = |m: String| Err(VerityError::Invalid(m));
    check_block_size("data block size", opts.data_block_size)?;
    check_block_size("hash block size", opts.hash_block_size)?;
    if opts.salt.len() > MAX_SALT_LEN {
        return invalid(format!(
            "a salt of {} bytes (at most {MAX_SALT_LEN})",
            opts.salt.len()
        ));
    }
    let io = |path: &Path, what: &str| {
        let path = path.display().to_string();
        let what = what.to_string();
        move |e: std::io::Error| VerityError::Io(format!("{what} {path}: {e}"))
    };
    let mut data_file = File::open(data).map_err(io(data, "opening"))?;
    let data_size = data_file
        .seek(SeekFrom::End(0))
        .map_err(io(data, "sizing"))?;
    data_file
        .seek(SeekFrom::Start(0))
        .map_err(io(data, "seeking"))?;
    let dbs = u64::from(opts.data_block_size);
    let whole = data_size / dbs;
    let data_blocks = opts.data_blocks.unwrap_or(whole);
    if data_blocks == 0 {
        return invalid(format!(
            "{} holds no whole data block ({data_size} bytes, blocks of {dbs})",
            data.display()
        ));
    }
    if data_blocks > whole {
        return invalid(format!(
            "{} holds {whole} data blocks of {dbs} bytes, not {data_blocks}",
            data.display()
        ));
    }
    let hash_file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        // The data may be in this file (the tree after it).
        .truncate(false)
        .mode(0o600)
        .open(hash)
        .map_err(io(hash, "opening"))?;
    let same = same_file(&data_file, &hash_file).map_err(io(hash, "inspecting"))?;
    let params = VerityParams {
        data_device: data.to_path_buf(),
        hash_device: if same {
            data.to_path_buf()
        } else {
            hash.to_path_buf()
        },
        data_block_size: opts.data_block_size,
        hash_block_size: opts.hash_block_size,
        data_blocks,
        hash_offset: opts.hash_offset,
        superblock: opts.superblock,
        hash_start_block: hash_start_block(opts.hash_offset, opts.hash_block_size, opts.superblock),
        root_hash: [0; DIGEST_LEN],
        salt: opts.salt.clone(),
    };
    // One file under two names is one device: the hash device is the data
    // device's path, so validate() sees an overlap.
    params.validate()?;
    let mut params = params;
    let levels = tree_levels(data_blocks, opts.hash_block_size, params.hash_start_block)?;
    let hash_blocks: u64 = levels.iter().map(|l| l.blocks).sum();
    let hbs = u64::from(opts.hash_block_size);
    let hash_device_size = (params.hash_start_block + hash_blocks) * hbs;

    let uuid = if opts.superblock {
        let uuid = match opts.uuid {
            Some(u) => u,
            None => random_uuid()?,
        };
        let sb = Superblock {
            uuid,
            data_block_size: opts.data_block_size,
            hash_block_size: opts.hash_block_size,
            data_blocks,
            salt: opts.salt.clone(),
        };
        hash_file
            .write_all_at(&sb.encode(), opts.hash_offset)
            .map_err(io(hash, "writing the superblock to"))?;
        Some(uuid)
    } else {
        None
    };

    let mut reader = BufReader::with_capacity(1 << 20, data_file);
    let mut block = vec![0u8; opts.data_block_size as usize];
    let root_hash = if levels.is_empty() {
        reader.read_exact(&mut block).map_err(io(data, "reading"))?;
        block_digest(&opts.salt, &block)
    } else {
        let mut tree = TreeWriter::new(&hash_file, &levels, opts, hash);
        for _ in 0..data_blocks {
            reader.read_exact(&mut block).map_err(io(data, "reading"))?;
            tree.push(0, block_digest(&opts.salt, &block))?;
        }
        tree.finish()?
    };
    // Like veritysetup: the hash file reaches at least the tree's end
    // (with one data block and a superblock, the block the superblock
    // starts), never shrinks.
    let meta = hash_file.metadata().map_err(io(hash, "inspecting"))?;
    if meta.is_file() && meta.len() < hash_device_size {
        hash_file
            .set_len(hash_device_size)
            .map_err(io(hash, "extending"))?;
    }
    hash_file.sync_data().map_err(io(hash, "syncing"))?;
    params.root_hash = root_hash;
    Ok(FormatResult {
        root_hash,
        params,
        hash_device_size,
        hash_blocks,
        uuid,
    })
}

/// The levels' blocks being filled, written as they fill.
struct TreeWriter<'a> {
    file: &'a File,
    path: &'a Path,
    salt: &'a [u8],
    levels: &'a [super::Level],
    /// Per level: the block being filled, how many digests it holds, how
    /// many blocks of the level are written.
    pending: Vec<(Vec<u8>, usize, u64)>,
    per_block: usize,
    hash_block_size: u64,
    root: Option<[u8; DIGEST_LEN]>,
}

impl<'a> TreeWriter<'a> {
    fn new(
        file: &'a File,
        levels: &'a [super::Level],
        opts: &'a FormatOptions,
        path: &'a Path,
    ) -> Self {
        let hbs = opts.hash_block_size as usize;
        TreeWriter {
            file,
            path,
            salt: &opts.salt,
            levels,
            pending: vec![(vec![0u8; hbs], 0, 0); levels.len()],
            per_block: hbs / DIGEST_LEN,
            hash_block_size: hbs as u64,
            root: None,
        }
    }

    /// Adds a digest to `level`; a block that fills is written and its
    /// digest goes up (the top block's is the root hash).
    fn push(&mut self, mut level: usize, mut digest: [u8; DIGEST_LEN]) -> Result<(), VerityError> {
        loop {
            if level == self.levels.len() {
                self.root = Some(digest);
                return Ok(());
            }
            let (buf, count, _) = &mut self.pending[level];
            buf[*count * DIGEST_LEN..(*count + 1) * DIGEST_LEN].copy_from_slice(&digest);
            *count += 1;
            if *count < self.per_block {
                return Ok(());
            }
            digest = self.flush(level)?;
            level += 1;
        }
    }

    /// Writes the block being filled at `level` (zero after its digests),
    /// empties it and returns its digest.
    fn flush(&mut self, level: usize) -> Result<[u8; DIGEST_LEN], VerityError> {
        let at = self.levels[level];
        let (buf, count, written) = &mut self.pending[level];
        if *written >= at.blocks {
            return Err(VerityError::Invalid(format!(
                "level {level} of the tree overflows its {} blocks",
                at.blocks
            )));
        }
        buf[*count * DIGEST_LEN..].fill(0);
        self.file
            .write_all_at(buf, (at.start + *written) * self.hash_block_size)
            .map_err(|e| VerityError::Io(format!("writing {}: {e}", self.path.display())))?;
        *written += 1;
        *count = 0;
        Ok(block_digest(self.salt, buf))
    }

    /// Writes the partly filled blocks, lowest level first, and returns
    /// the root hash.
    fn finish(mut self) -> Result<[u8; DIGEST_LEN], VerityError> {
        for level in 0..self.levels.len() {
            if self.pending[level].1 > 0 {
                let digest = self.flush(level)?;
                self.push(level + 1, digest)?;
            }
        }
        let complete = self
            .levels
            .iter()
            .zip(&self.pending)
            .all(|(l, (_, _, written))| *written == l.blocks);
        match self.root {
            Some(root) if complete => Ok(root),
            _ => Err(VerityError::Invalid(
                "the tree's levels did not come out whole".into(),
            )),
        }
    }
}
