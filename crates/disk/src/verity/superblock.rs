//! veritysetup's superblock: 512 bytes at the hash offset, little-endian.
//!
//! ```text
//! offset size field
//!      0    8 magic "verity\0\0"
//!      8    4 version (1)
//!     12    4 hash type (1: salt first; 0, Chrome OS's, is refused)
//!     16   16 UUID
//!     32   32 hash algorithm, NUL-padded ("sha256")
//!     64    4 data block size
//!     68    4 hash block size
//!     72    8 data blocks
//!     80    2 salt size (at most 256)
//!     82    6 padding
//!     88  256 salt, zero after its size
//!    344  168 padding
//! ```
//!
//! The superblock is not authenticated (the root hash covers the tree,
//! not it): it never decides a parameter, it can only be refused for
//! disagreeing with the parameters that come from the measured command
//! line.

use super::{HASH_ALGORITHM, MAX_SALT_LEN, VerityError, VerityParams, check_block_size};

/// The superblock's size.
pub const SUPERBLOCK_SIZE: usize = 512;
/// Its first 8 bytes.
pub const MAGIC: &[u8; 8] = b"verity\0\0";
/// The only superblock version.
pub const VERSION: u32 = 1;
/// The only hash type: format version 1 (salt first).
pub const HASH_TYPE: u32 = 1;

const OFF_VERSION: usize = 8;
const OFF_HASH_TYPE: usize = 12;
const OFF_UUID: usize = 16;
const OFF_ALGORITHM: usize = 32;
const ALGORITHM_LEN: usize = 32;
const OFF_DATA_BLOCK_SIZE: usize = 64;
const OFF_HASH_BLOCK_SIZE: usize = 68;
const OFF_DATA_BLOCKS: usize = 72;
const OFF_SALT_SIZE: usize = 80;
const OFF_SALT: usize = 88;

/// What a superblock says (version 1, hash type 1, SHA-256: the only
/// values read or written).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Superblock {
    /// The hash device's UUID.
    pub uuid: [u8; 16],
    /// The data block size, bytes.
    pub data_block_size: u32,
    /// The hash block size, bytes.
    pub hash_block_size: u32,
    /// The number of data blocks.
    pub data_blocks: u64,
    /// The salt (at most [`MAX_SALT_LEN`] bytes).
    pub salt: Vec<u8>,
}

fn le32(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}

impl Superblock {
    /// Whether `bytes` start with the superblock magic.
    pub fn has_magic(bytes: &[u8]) -> bool {
        bytes.starts_with(MAGIC)
    }

    /// Reads the first [`SUPERBLOCK_SIZE`] bytes of `bytes`, checked:
    /// magic, version 1, hash type 1, algorithm exactly `sha256`
    /// (NUL-padded), block sizes powers of two in range, at least one data
    /// block, a salt of at most 256 bytes.
    pub fn parse(bytes: &[u8]) -> Result<Superblock, VerityError> {
        let bad = |m: String| Err(VerityError::Superblock(m));
        let Some(b) = bytes.get(..SUPERBLOCK_SIZE) else {
            return bad(format!(
                "{} bytes (a superblock has {SUPERBLOCK_SIZE})",
                bytes.len()
            ));
        };
        if !Self::has_magic(b) {
            return bad("no verity magic".into());
        }
        let version = le32(b, OFF_VERSION);
        if version != VERSION {
            return bad(format!("version {version} (want {VERSION})"));
        }
        let hash_type = le32(b, OFF_HASH_TYPE);
        if hash_type != HASH_TYPE {
            return bad(format!("hash type {hash_type} (want {HASH_TYPE})"));
        }
        let algorithm = &b[OFF_ALGORITHM..OFF_ALGORITHM + ALGORITHM_LEN];
        let name_len = algorithm
            .iter()
            .position(|&c| c == 0)
            .unwrap_or(ALGORITHM_LEN);
        if &algorithm[..name_len] != HASH_ALGORITHM.as_bytes()
            || algorithm[name_len..].iter().any(|&c| c != 0)
        {
            return bad(format!(
                "hash algorithm {:?} (want {HASH_ALGORITHM})",
                String::from_utf8_lossy(&algorithm[..name_len])
            ));
        }
        let data_block_size = le32(b, OFF_DATA_BLOCK_SIZE);
        let hash_block_size = le32(b, OFF_HASH_BLOCK_SIZE);
        check_block_size("data block size", data_block_size)
            .and_then(|()| check_block_size("hash block size", hash_block_size))
            .map_err(|e| VerityError::Superblock(e.to_string()))?;
        let data_blocks = u64::from_le_bytes(
            b[OFF_DATA_BLOCKS..OFF_DATA_BLOCKS + 8]
                .try_into()
                .expect("8 bytes"),
        );
        if data_blocks == 0 {
            return bad("no data blocks".into());
        }
        let salt_size = usize::from(u16::from_le_bytes([b[OFF_SALT_SIZE], b[OFF_SALT_SIZE + 1]]));
        if salt_size > MAX_SALT_LEN {
            return bad(format!(
                "a salt of {salt_size} bytes (at most {MAX_SALT_LEN})"
            ));
        }
        Ok(Superblock {
            uuid: b[OFF_UUID..OFF_UUID + 16].try_into().expect("16 bytes"),
            data_block_size,
            hash_block_size,
            data_blocks,
            salt: b[OFF_SALT..OFF_SALT + salt_size].to_vec(),
        })
    }

    /// The 512 bytes veritysetup writes for it (the salt must be at most
    /// [`MAX_SALT_LEN`] bytes: the caller checked).
    pub fn encode(&self) -> [u8; SUPERBLOCK_SIZE] {
        assert!(self.salt.len() <= MAX_SALT_LEN, "salt length checked");
        let mut b = [0u8; SUPERBLOCK_SIZE];
        b[..8].copy_from_slice(MAGIC);
        b[OFF_VERSION..OFF_VERSION + 4].copy_from_slice(&VERSION.to_le_bytes());
        b[OFF_HASH_TYPE..OFF_HASH_TYPE + 4].copy_from_slice(&HASH_TYPE.to_le_bytes());
        b[OFF_UUID..OFF_UUID + 16].copy_from_slice(&self.uuid);
        b[OFF_ALGORITHM..OFF_ALGORITHM + HASH_ALGORITHM.len()]
            .copy_from_slice(HASH_ALGORITHM.as_bytes());
        b[OFF_DATA_BLOCK_SIZE..OFF_DATA_BLOCK_SIZE + 4]
            .copy_from_slice(&self.data_block_size.to_le_bytes());
        b[OFF_HASH_BLOCK_SIZE..OFF_HASH_BLOCK_SIZE + 4]
            .copy_from_slice(&self.hash_block_size.to_le_bytes());
        b[OFF_DATA_BLOCKS..OFF_DATA_BLOCKS + 8].copy_from_slice(&self.data_blocks.to_le_bytes());
        b[OFF_SALT_SIZE..OFF_SALT_SIZE + 2]
            // At most MAX_SALT_LEN (asserted above): always a u16.
            .copy_from_slice(
                &u16::try_from(self.salt.len())
                    .unwrap_or(u16::MAX)
                    .to_le_bytes(),
            );
        b[OFF_SALT..OFF_SALT + self.salt.len()].copy_from_slice(&self.salt);
        b
    }

    /// `Ok` if it says what `params` say (block sizes, data blocks, salt);
    /// else what differs.
    pub fn agrees_with(&self, params: &VerityParams) -> Result<(), Disagreements> {
        let mut differ = Vec::new();
        if self.data_block_size != params.data_block_size {
            differ.push(Disagreement::DataBlockSize {
                found: self.data_block_size,
                want: params.data_block_size,
            });
        }
        if self.hash_block_size != params.hash_block_size {
            differ.push(Disagreement::HashBlockSize {
                found: self.hash_block_size,
                want: params.hash_block_size,
            });
        }
        if self.data_blocks != params.data_blocks {
            differ.push(Disagreement::DataBlocks {
                found: self.data_blocks,
                want: params.data_blocks,
            });
        }
        if self.salt != params.salt {
            differ.push(Disagreement::Salt);
        }
        if differ.is_empty() {
            Ok(())
        } else {
            Err(Disagreements(differ))
        }
    }
}

/// A field in which a superblock disagrees with the parameters.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Disagreement {
    /// The data block size (the superblock's, the parameters').
    #[error("data block size {found} (want {want})")]
    DataBlockSize {
        /// The superblock's.
        found: u32,
        /// The parameters'.
        want: u32,
    },
    /// The hash block size.
    #[error("hash block size {found} (want {want})")]
    HashBlockSize {
        /// The superblock's.
        found: u32,
        /// The parameters'.
        want: u32,
    },
    /// The number of data blocks.
    #[error("data blocks {found} (want {want})")]
    DataBlocks {
        /// The superblock's.
        found: u64,
        /// The parameters'.
        want: u64,
    },
    /// The salt (not quoted).
    #[error("the salt")]
    Salt,
}

/// Every field in which a superblock disagrees with the parameters (at
/// least one), in the superblock's order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Disagreements(pub Vec<Disagreement>);

impl std::fmt::Display for Disagreements {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for (n, d) in self.0.iter().enumerate() {
            if n > 0 {
                f.write_str(", ")?;
            }
            write!(f, "{d}")?;
        }
        Ok(())
    }
}
