//! LUKS2 in pure Rust: format, read, unlock and token writes, interoperable
//! with cryptsetup 2.6 (the interop tests use it as the oracle), so that
//! the boot path needs no cryptsetup and none of its C libraries.
//!
//! # The format
//!
//! A LUKS2 device starts with two copies of a header (primary at 0,
//! secondary at the header size, 16 KiB by default): a 4 KiB binary header
//! ([`binary`]: magic, version, sizes, `seqid`, UUID, a SHA-256 checksum)
//! followed by a JSON area ([`metadata`]) describing key slots, data
//! segments, digests, tokens and the layout. Then the key-slot region: each
//! key slot's area holds the volume key split by the anti-forensic
//! splitter ([`af`]) into 4000 stripes and encrypted ([`area`],
//! `aes-xts-plain64`) with a key derived from the passphrase ([`kdf`]:
//! PBKDF2 or Argon2). A digest ([`digest`], PBKDF2 of the volume key) tells
//! the right volume key from a wrong one. The data follows (at 16 MiB).
//! Tokens are free JSON objects confboot uses to keep a few facts about the
//! disk (see [`crate::cryptsetup`]'s token types).
//!
//! # The threat: the host writes the header
//!
//! Every byte of the disk is the host's. Nothing in a LUKS2 header is
//! authenticated but the key slots' content (only a passphrase opens them)
//! and the volume key (the digest checks it): the checksum is a SHA-256 the
//! host can recompute, the JSON says whatever the host wants. So:
//! - every size, count, id, offset and integer is bounded before use
//!   ([`metadata`]), and offsets must lie inside the device;
//! - the KDF costs are bounded before anything runs ([`KdfLimits`]): a
//!   header asking for 4 GiB of Argon2 memory or 10^9 PBKDF2 iterations is
//!   refused, not run;
//! - a node's backends go further: they open only the header the node
//!   writes ([`ExpectedHeader`]: segment, cipher, key sizes, sector size,
//!   offsets, KDF kind and costs, digest), so the header chooses nothing;
//! - a damaged header is an error, never a blank disk ([`probe()`]): the
//!   never-format rules of [`crate::StateDisk`] keep holding;
//! - the volume key and every key derived on the way are zeroized when
//!   dropped and never printed ([`Secret`]); errors are typed
//!   ([`Luks2Error`]) and carry no key material.
//!
//! The passphrase is the node's state-disk key as bytes, exactly what
//! [`crate::CryptsetupBackend`] gives cryptsetup on stdin, so a disk
//! formatted by either opens with the other.
//!
//! ```no_run
//! use confboot_disk::luks2::{FormatOptions, Luks2};
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let key = [7u8; 32];
//! let disk = Luks2::format("/tmp/state.img", &key, &FormatOptions::default())?;
//! let volume_key = disk.unlock(&key)?; // for dm-crypt's table
//! assert_eq!(volume_key.len(), 64);
//! # Ok(())
//! # }
//! ```
// Every length and offset here comes from the host (a disk, a datagram,
// a socket): a cast that could truncate, wrap or drop a sign is refused
// at compile time, so each conversion is checked where it happens.
#![deny(
    clippy::cast_possible_truncation,
    clippy::cast_sign_loss,
    clippy::cast_possible_wrap,
    clippy::cast_lossless
)]
#![forbid(unsafe_code)]

use std::fs::{File, OpenOptions};
use std::io::{Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use serde_json::{Map, Value};

pub mod af;
pub mod area;
pub mod backend;
pub mod binary;
pub mod digest;
pub mod error;
pub mod expected;
pub mod format;
pub mod hash;
pub mod header;
pub mod kdf;
pub mod metadata;
pub mod probe;
pub mod secret;
pub mod unlock;

pub use backend::Luks2Backend;
pub use error::{BinaryFault, HeaderCopy, HeaderFault, Luks2Error, MetadataProblem};
pub use expected::{ExpectedHeader, ExpectedKdf};
pub use format::{FormatOptions, KdfChoice};
pub use header::{Header, Health};
pub use kdf::KdfLimits;
pub use probe::probe;
pub use secret::{Secret, VolumeKey};

/// A token: its id and its JSON object (with at least `type` and `keyslots`).
#[derive(Clone, Debug, PartialEq)]
pub struct Token {
    /// Its id, 0 to 31.
    pub id: u32,
    /// The JSON object.
    pub json: Map<String, Value>,
}

impl Token {
    /// Its `type`.
    pub fn kind(&self) -> &str {
        self.json.get("type").and_then(Value::as_str).unwrap_or("")
    }
}

/// A LUKS2 device (a block device or an image file) and its header as read.
#[derive(Debug)]
pub struct Luks2 {
    path: PathBuf,
    header: Header,
    health: Health,
    limits: KdfLimits,
}

impl Luks2 {
    /// Formats `path` with a new header and key slot 0 for `passphrase`.
    /// Refuses ([`Luks2Error::AlreadyLuks`]) a device that carries a LUKS
    /// header (LUKS1, or LUKS2 with a valid copy), whatever the caller
    /// decided; whether other content may be overwritten is the caller's
    /// decision ([`crate::StateDisk`]). Zeroes the headers and the
    /// key-slot region first (the data segment is left as it is).
    pub fn format(
        path: impl AsRef<Path>,
        passphrase: &[u8],
        options: &FormatOptions,
    ) -> Result<Luks2, Luks2Error> {
        let path = path.as_ref();
        match probe(path) {
            Ok(crate::DiskState::Luks { uuid }) => {
                return Err(Luks2Error::AlreadyLuks { uuid });
            }
            Ok(_) => {}
            Err(e) => return Err(Luks2Error::Probe(Box::new(e))),
        }
        let mut dev = OpenOptions::new().read(true).write(true).open(path)?;
        let size = header::device_size(&mut dev)?;
        let made = format::build(passphrase, options, size)?;
        dev.seek(SeekFrom::Start(0))?;
        let zeros = vec![0u8; 1 << 20];
        let mut left = format::DATA_OFFSET;
        while left > 0 {
            let n = usize::try_from(left).map_or(zeros.len(), |left| left.min(zeros.len()));
            dev.write_all(&zeros[..n])?;
            left -= n as u64;
        }
        let (offset, material) = &made.keyslot_area;
        dev.seek(SeekFrom::Start(*offset))?;
        dev.write_all(material.expose())?;
        header::write(&mut dev, &made.header)?;
        dev.sync_all()?;
        Ok(Luks2 {
            path: path.to_path_buf(),
            header: made.header,
            health: Health::Consistent,
            limits: KdfLimits::default(),
        })
    }

    /// Reads the header of `path` (both copies, see [`header`]).
    pub fn read(path: impl AsRef<Path>) -> Result<Luks2, Luks2Error> {
        let path = path.as_ref();
        let mut dev = File::open(path)?;
        let (header, health) = header::read(&mut dev)?;
        Ok(Luks2 {
            path: path.to_path_buf(),
            header,
            health,
            limits: KdfLimits::default(),
        })
    }

    /// Uses `limits` for KDF costs from now on (the default is
    /// [`KdfLimits::default`]).
    pub fn with_limits(mut self, limits: KdfLimits) -> Luks2 {
        self.limits = limits;
        self
    }

    /// The header as read (or last written).
    pub fn header(&self) -> &Header {
        &self.header
    }

    /// What reading found about the two copies.
    pub fn health(&self) -> &Health {
        &self.health
    }

    /// The header's UUID, lowercase.
    pub fn uuid(&self) -> String {
        self.header.binary.uuid.to_ascii_lowercase()
    }

    /// The JSON metadata as text (what `cryptsetup luksDump
    /// --dump-json-metadata` prints, modulo formatting), for
    /// [`crate::cryptsetup::HeaderMetadata::parse`].
    pub fn metadata_json(&self) -> String {
        self.header.metadata.to_text()
    }

    /// The volume key `passphrase` opens; [`Luks2Error::WrongPassphrase`]
    /// if it opens no key slot.
    pub fn unlock(&self, passphrase: &[u8]) -> Result<VolumeKey, Luks2Error> {
        let mut dev = File::open(&self.path)?;
        unlock::unlock(&mut dev, &self.header, passphrase, &self.limits)
    }

    /// The header's tokens, by id.
    pub fn tokens(&self) -> Vec<Token> {
        self.header
            .metadata
            .tokens()
            .into_iter()
            .map(|(id, json)| Token {
                id,
                json: json.clone(),
            })
            .collect()
    }

    /// Writes `token` (a JSON object with `type` and `keyslots`) as token
    /// `id`, or as the lowest free id if `None`; returns its id. Both copies
    /// are rewritten with a bumped `seqid`.
    pub fn set_token(
        &mut self,
        id: Option<u32>,
        token: Map<String, Value>,
    ) -> Result<u32, Luks2Error> {
        if Value::Object(token.clone()).to_string().len() > metadata::MAX_TOKEN_JSON {
            return Err(Luks2Error::TokenSpace("token too large".into()));
        }
        let mut tokens = self.token_map();
        let id = match id {
            Some(id) if usize::try_from(id).is_ok_and(|i| i < metadata::MAX_ENTRIES) => id,
            Some(id) => return Err(Luks2Error::TokenSpace(format!("token id {id}"))),
            None => (0u32..)
                .take(metadata::MAX_ENTRIES)
                .find(|i| !tokens.contains_key(&i.to_string()))
                .ok_or_else(|| Luks2Error::TokenSpace("no free token id".into()))?,
        };
        metadata::check_token(id, &token)?;
        tokens.insert(id.to_string(), Value::Object(token));
        self.write_tokens(tokens)?;
        Ok(id)
    }

    /// Removes token `id`; whether there was one.
    pub fn remove_token(&mut self, id: u32) -> Result<bool, Luks2Error> {
        let mut tokens = self.token_map();
        if tokens.remove(&id.to_string()).is_none() {
            return Ok(false);
        }
        self.write_tokens(tokens)?;
        Ok(true)
    }

    /// Rewrites both copies from the one read (as cryptsetup does when it
    /// loads a header with a damaged or older copy), with a bumped `seqid`.
    pub fn repair(&mut self) -> Result<(), Luks2Error> {
        let tokens = self.token_map();
        self.write_tokens(tokens)
    }

    fn token_map(&self) -> Map<String, Value> {
        self.header.metadata.json()["tokens"]
            .as_object()
            .cloned()
            .unwrap_or_default()
    }

    /// Writes the header with `tokens`: reads the device's header again
    /// first and refuses if it is not the one this value holds (someone
    /// else wrote in between).
    fn write_tokens(&mut self, tokens: Map<String, Value>) -> Result<(), Luks2Error> {
        let mut dev = OpenOptions::new().read(true).write(true).open(&self.path)?;
        let (current, _) = header::read(&mut dev)?;
        if current != self.header {
            return Err(Luks2Error::InvalidOption(
                "the header changed on the device since it was read".into(),
            ));
        }
        let size = header::device_size(&mut dev)?;
        let metadata =
            self.header
                .metadata
                .with_tokens(tokens, self.header.binary.hdr_size, size)?;
        let mut next = Header {
            binary: self.header.binary.clone(),
            metadata,
        };
        next.binary.seqid = next
            .binary
            .seqid
            .checked_add(1)
            .ok_or_else(|| Luks2Error::InvalidOption("seqid overflow".into()))?;
        header::write(&mut dev, &next)?;
        dev.sync_all()?;
        self.header = next;
        self.health = Health::Consistent;
        Ok(())
    }
}
