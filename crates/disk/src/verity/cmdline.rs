//! The verity root's parameters on the kernel command line (measured into
//! PCR 9 with it):
//!
//! ```text
//! confboot.root=/dev/vdb                 the data device
//! confboot.root.hashdev=/dev/vdc         the hash device (optional; default the data device)
//! confboot.root.hash=HEX64               the root hash
//! confboot.root.salt=HEX                 the salt, `-` for none
//! confboot.root.blocks=N                 data blocks
//! confboot.root.datablock=4096           data block size
//! confboot.root.hashblock=4096           hash block size
//! confboot.root.hashoffset=BYTES         where the hash area starts on the hash device
//! confboot.root.superblock=0             (optional) no superblock at the hash offset;
//!                                        default 1, veritysetup's default
//! ```
//!
//! Parsed strictly: each key at most once (a second one is an error, not
//! "the last wins"), an unknown `confboot.root.*` key is an error, every
//! key but the optional two is required once `confboot.root*` appears at
//! all, numbers are plain decimal without leading zeros (one spelling per
//! value), and the whole line is bounded ([`MAX_CMDLINE_LEN`]).

use std::path::PathBuf;

use super::{DIGEST_LEN, MAX_SALT_LEN, VerityError, VerityParams, hash_start_block};

/// The longest command line read (the kernel's own limit on x86 is 2048
/// bytes).
pub const MAX_CMDLINE_LEN: usize = 4096;
/// The longest device path accepted.
const MAX_DEVICE_LEN: usize = 255;

const PREFIX: &str = "confboot.root";

/// The keys after `confboot.root`, in the order they are written.
const KEYS: [&str; 9] = [
    "",
    ".hashdev",
    ".hash",
    ".salt",
    ".blocks",
    ".datablock",
    ".hashblock",
    ".hashoffset",
    ".superblock",
];

fn err(m: String) -> VerityError {
    VerityError::Cmdline(m)
}

/// A device path: absolute, printable ASCII without quotes, bounded.
fn device(key: &str, v: &str) -> Result<PathBuf, VerityError> {
    if v.starts_with('/')
        && v.len() <= MAX_DEVICE_LEN
        && v.bytes().all(|b| b.is_ascii_graphic() && b != b'"')
    {
        Ok(PathBuf::from(v))
    } else {
        Err(err(format!(
            "{key}: want an absolute device path of printable characters (at most {MAX_DEVICE_LEN})"
        )))
    }
}

/// A decimal number without sign or leading zeros.
fn decimal(key: &str, v: &str) -> Result<u64, VerityError> {
    let canonical = !v.is_empty()
        && v.len() <= 20
        && v.bytes().all(|b| b.is_ascii_digit())
        && (v == "0" || !v.starts_with('0'));
    canonical
        .then(|| v.parse::<u64>().ok())
        .flatten()
        .ok_or_else(|| err(format!("{key}={v:?}: want a decimal number")))
}

fn block_size(key: &str, v: &str) -> Result<u32, VerityError> {
    let n = decimal(key, v)?;
    u32::try_from(n).map_err(|_| err(format!("{key}={v}: too large")))
}

impl VerityParams {
    /// Reads the `confboot.root*` words of a kernel command line
    /// (`/proc/cmdline`): `Ok(None)` when there is none, the checked
    /// parameters ([`validate`](Self::validate)) when they are all there
    /// and well-formed, an error otherwise. Other words are ignored.
    pub fn from_cmdline(cmdline: &str) -> Result<Option<VerityParams>, VerityError> {
        if cmdline.len() > MAX_CMDLINE_LEN {
            return Err(err(format!(
                "{} bytes (at most {MAX_CMDLINE_LEN})",
                cmdline.len()
            )));
        }
        let mut values: [Option<&str>; KEYS.len()] = [None; KEYS.len()];
        let mut any = false;
        for word in cmdline.split_ascii_whitespace() {
            let (key, value) = match word.split_once('=') {
                Some((k, v)) => (k, Some(v)),
                None => (word, None),
            };
            let Some(rest) = key.strip_prefix(PREFIX) else {
                continue;
            };
            if !rest.is_empty() && !rest.starts_with('.') {
                continue; // another parameter, e.g. `confboot.rootwait`
            }
            any = true;
            let i = KEYS
                .iter()
                .position(|k| *k == rest)
                .ok_or_else(|| err(format!("unknown parameter {key}")))?;
            let value = value.ok_or_else(|| err(format!("{key} without a value")))?;
            if values[i].replace(value).is_some() {
                return Err(err(format!("{key} given twice")));
            }
        }
        if !any {
            return Ok(None);
        }
        let get =
            |i: usize| values[i].ok_or_else(|| err(format!("{PREFIX}{} is missing", KEYS[i])));
        let key = |i: usize| format!("{PREFIX}{}", KEYS[i]);
        let data_device = device(&key(0), get(0)?)?;
        let hash_device = match values[1] {
            Some(v) => device(&key(1), v)?,
            None => data_device.clone(),
        };
        let hash = get(2)?;
        let root_hash: [u8; DIGEST_LEN] = confboot_util::hex::decode(hash)
            .ok()
            .and_then(|h| h.try_into().ok())
            .ok_or_else(|| err(format!("{}: want {} hex digits", key(2), 2 * DIGEST_LEN)))?;
        let salt = match get(3)? {
            "-" => Vec::new(),
            hex => confboot_util::hex::decode(hex)
                .ok()
                .filter(|s| !s.is_empty() && s.len() <= MAX_SALT_LEN)
                .ok_or_else(|| {
                    err(format!(
                        "{}: want 1 to {MAX_SALT_LEN} bytes in hex, or - for none",
                        key(3)
                    ))
                })?,
        };
        let data_blocks = decimal(&key(4), get(4)?)?;
        let data_block_size = block_size(&key(5), get(5)?)?;
        let hash_block_size = block_size(&key(6), get(6)?)?;
        let hash_offset = decimal(&key(7), get(7)?)?;
        let superblock = match values[8] {
            None | Some("1") => true,
            Some("0") => false,
            Some(v) => return Err(err(format!("{}={v:?}: want 0 or 1", key(8)))),
        };
        let params = VerityParams {
            data_device,
            hash_device,
            data_block_size,
            hash_block_size,
            data_blocks,
            hash_offset,
            superblock,
            hash_start_block: hash_start_block(hash_offset, hash_block_size, superblock),
            root_hash,
            salt,
        };
        params
            .validate()
            .map_err(|e| err(format!("confboot.root*: {e}")))?;
        Ok(Some(params))
    }

    /// The kernel command-line words that [`from_cmdline`](Self::from_cmdline)
    /// reads back as these parameters: `confboot.root.hashdev` only when the
    /// hash device differs from the data device, `confboot.root.superblock=0`
    /// only without a superblock. The device paths must be words (no
    /// spaces) for the round trip.
    pub fn cmdline_words(&self) -> String {
        let mut words = vec![format!("{PREFIX}={}", self.data_device.display())];
        if self.hash_device != self.data_device {
            words.push(format!("{PREFIX}.hashdev={}", self.hash_device.display()));
        }
        words.push(format!(
            "{PREFIX}.hash={}",
            confboot_util::hex::encode(&self.root_hash)
        ));
        words.push(format!(
            "{PREFIX}.salt={}",
            if self.salt.is_empty() {
                "-".to_string()
            } else {
                confboot_util::hex::encode(&self.salt)
            }
        ));
        words.push(format!("{PREFIX}.blocks={}", self.data_blocks));
        words.push(format!("{PREFIX}.datablock={}", self.data_block_size));
        words.push(format!("{PREFIX}.hashblock={}", self.hash_block_size));
        words.push(format!("{PREFIX}.hashoffset={}", self.hash_offset));
        if !self.superblock {
            words.push(format!("{PREFIX}.superblock=0"));
        }
        words.join(" ")
    }
}
