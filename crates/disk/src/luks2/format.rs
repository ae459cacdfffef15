//! A new header as cryptsetup 2.6 writes one by default for a LUKS2
//! device: 16 KiB headers (4 KiB binary + 12 KiB JSON) at 0 and 16 KiB,
//! the key-slot region from 32 KiB to the data at 16 MiB, key slot 0's
//! area at 32 KiB, an `aes-xts-plain64` segment with a 512-bit volume key
//! and 4 KiB sectors, one PBKDF2-SHA256 digest.

use std::num::NonZeroU32;

use serde_json::{Value, json};

use super::af;
use super::area::{self, CIPHER, Direction};
use super::binary::{BINARY_SIZE, BinaryHeader};
use super::digest;
use super::error::Luks2Error;
use super::hash::Hash;
use super::header::Header;
use super::kdf::{Argon2Variant, Kdf, KdfLimits};
use super::metadata::{AF_STRIPES, AREA_ALIGN, Metadata};
use super::secret::{Secret, random};
use confboot_kms::is_uuid;

/// Header size (binary + JSON area).
pub const HEADER_SIZE: u64 = 16 << 10;
/// Where the data segment starts.
pub const DATA_OFFSET: u64 = 16 << 20;
/// The volume key's size (AES-256 in XTS: 512 bits).
pub const VOLUME_KEY_LEN: usize = 64;
/// Key-slot and digest salt size (the digest's output is as long).
pub const SALT_LEN: usize = 32;
/// The key-slot region's start (after both headers): key slot 0's area.
pub const KEYSLOTS_START: u64 = 2 * HEADER_SIZE;
/// The key-slot region's size (`config.keyslots_size`): up to the data.
pub const KEYSLOTS_SIZE: u64 = DATA_OFFSET - KEYSLOTS_START;
/// Key slot 0's area size: the volume key split into [`AF_STRIPES`]
/// stripes, in whole 512-byte sectors, rounded up to [`AREA_ALIGN`].
pub const KEYSLOT_AREA_SIZE: u64 = (((VOLUME_KEY_LEN * AF_STRIPES as usize)
    .div_ceil(area::AREA_SECTOR)
    * area::AREA_SECTOR) as u64)
    .div_ceil(AREA_ALIGN)
    * AREA_ALIGN;
/// The data segment's sector size a node writes (and maps) by default.
pub const SECTOR_SIZE: u32 = 4096;
/// The digest's PBKDF2 iterations a node writes by default: cryptsetup's
/// minimum, which is also what cryptsetup writes when the key slot's
/// costs are forced (`--pbkdf-force-iterations`).
pub const DIGEST_ITERATIONS: u32 = 1000;

/// The key-slot password hashing of a new header, with explicit costs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KdfChoice {
    /// PBKDF2-HMAC-SHA256.
    Pbkdf2 {
        /// Iterations (cryptsetup's minimum is 1000).
        iterations: u32,
    },
    /// Argon2id.
    Argon2id {
        /// Passes.
        time: u32,
        /// Memory, KiB.
        memory_kib: u32,
        /// Lanes.
        cpus: u32,
    },
    /// Argon2i.
    Argon2i {
        /// Passes.
        time: u32,
        /// Memory, KiB.
        memory_kib: u32,
        /// Lanes.
        cpus: u32,
    },
}

/// How to format.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FormatOptions {
    /// The header's UUID (lowercased); a fresh one if `None`.
    pub uuid: Option<String>,
    /// Key slot 0's password hashing.
    pub kdf: KdfChoice,
    /// The digest's PBKDF2 iterations (cryptsetup's minimum, 1000, is
    /// plenty for a 512-bit random key).
    pub digest_iterations: u32,
    /// The data segment's sector size: 512, 1024, 2048 or 4096.
    pub sector_size: u32,
    /// The header's label (at most 47 bytes).
    pub label: String,
}

impl Default for FormatOptions {
    /// PBKDF2 with 1000 iterations (as [`crate::Pbkdf`]'s default,
    /// for the same reason: the passphrase is a 32-byte random key), 4 KiB
    /// sectors, a fresh UUID, no label.
    fn default() -> Self {
        FormatOptions {
            uuid: None,
            kdf: KdfChoice::Pbkdf2 { iterations: 1000 },
            digest_iterations: DIGEST_ITERATIONS,
            sector_size: SECTOR_SIZE,
            label: String::new(),
        }
    }
}

/// What [`build`] made: the header and the key slot's encrypted area.
pub struct Formatted {
    /// The header to write (seqid 1).
    pub header: Header,
    /// Key slot 0's area content and where it goes.
    pub keyslot_area: (u64, Secret),
    /// The volume key.
    pub volume_key: Secret,
}

fn option(m: &str) -> Luks2Error {
    Luks2Error::InvalidOption(m.to_string())
}

/// Makes a header and key slot 0 for `passphrase` on a device of
/// `device_size` bytes.
pub fn build(
    passphrase: &[u8],
    options: &FormatOptions,
    device_size: u64,
) -> Result<Formatted, Luks2Error> {
    if passphrase.is_empty() {
        return Err(option("empty passphrase"));
    }
    if device_size <= DATA_OFFSET {
        return Err(Luks2Error::DeviceTooSmall {
            needed: DATA_OFFSET + 1,
            size: device_size,
        });
    }
    if ![512, 1024, 2048, 4096].contains(&options.sector_size) {
        return Err(option("sector size"));
    }
    if options.label.len() > 47 || options.label.contains('\0') {
        return Err(option("label"));
    }
    if options.digest_iterations < 1000 {
        return Err(option("digest iterations below 1000"));
    }
    let uuid = match &options.uuid {
        Some(u) if is_uuid(u) => u.to_ascii_lowercase(),
        Some(_) => return Err(option("UUID")),
        None => crate::new_disk_uuid(),
    };
    let volume_key = random(VOLUME_KEY_LEN)?;
    let slot_salt = random(SALT_LEN)?.expose().to_vec();
    let kdf = match options.kdf {
        KdfChoice::Pbkdf2 { iterations } => Kdf::Pbkdf2 {
            hash: Hash::Sha256,
            iterations,
            salt: slot_salt,
        },
        KdfChoice::Argon2id {
            time,
            memory_kib,
            cpus,
        } => Kdf::Argon2 {
            variant: Argon2Variant::Argon2id,
            time,
            memory_kib,
            cpus,
            salt: slot_salt,
        },
        KdfChoice::Argon2i {
            time,
            memory_kib,
            cpus,
        } => Kdf::Argon2 {
            variant: Argon2Variant::Argon2i,
            time,
            memory_kib,
            cpus,
            salt: slot_salt,
        },
    };
    // The admin chose the costs; they must still open under the default limits.
    let area_key = kdf.derive(
        passphrase,
        VOLUME_KEY_LEN,
        &KdfLimits::default(),
        "format.kdf",
    )?;

    let stripes = AF_STRIPES as usize;
    let randomness = random((stripes - 1) * VOLUME_KEY_LEN)?;
    let split = af::split(
        volume_key.expose(),
        stripes,
        Hash::Sha256,
        randomness.expose(),
    );
    let material_len = (VOLUME_KEY_LEN * stripes).div_ceil(area::AREA_SECTOR) * area::AREA_SECTOR;
    let mut material = Secret::zeroed(material_len);
    material.expose_mut()[..split.len()].copy_from_slice(split.expose());
    area::crypt(area_key.expose(), material.expose_mut(), Direction::Encrypt)?;
    let area_size = KEYSLOT_AREA_SIZE;

    let digest_salt = random(SALT_LEN)?.expose().to_vec();
    let digest_iterations =
        NonZeroU32::new(options.digest_iterations).ok_or_else(|| option("digest iterations"))?;
    let digest = digest::compute(
        volume_key.expose(),
        Hash::Sha256,
        digest_iterations,
        &digest_salt,
        32,
    );

    let kdf_json = match &kdf {
        Kdf::Pbkdf2 {
            iterations, salt, ..
        } => json!({
            "type": "pbkdf2",
            "hash": "sha256",
            "iterations": iterations,
            "salt": confboot_util::base64::encode(salt),
        }),
        Kdf::Argon2 {
            variant,
            time,
            memory_kib,
            cpus,
            salt,
        } => json!({
            "type": variant.name(),
            "time": time,
            "memory": memory_kib,
            "cpus": cpus,
            "salt": confboot_util::base64::encode(salt),
        }),
    };
    let json = json!({
        "keyslots": {
            "0": {
                "type": "luks2",
                "key_size": VOLUME_KEY_LEN,
                "af": {"type": "luks1", "stripes": AF_STRIPES, "hash": "sha256"},
                "area": {
                    "type": "raw",
                    "offset": KEYSLOTS_START.to_string(),
                    "size": area_size.to_string(),
                    "encryption": CIPHER,
                    "key_size": VOLUME_KEY_LEN,
                },
                "kdf": kdf_json,
            }
        },
        "tokens": {},
        "segments": {
            "0": {
                "type": "crypt",
                "offset": DATA_OFFSET.to_string(),
                "size": "dynamic",
                "iv_tweak": "0",
                "encryption": CIPHER,
                "sector_size": options.sector_size,
            }
        },
        "digests": {
            "0": {
                "type": "pbkdf2",
                "keyslots": ["0"],
                "segments": ["0"],
                "hash": "sha256",
                "iterations": options.digest_iterations,
                "salt": confboot_util::base64::encode(&digest_salt),
                "digest": confboot_util::base64::encode(&digest),
            }
        },
        "config": {
            "json_size": (HEADER_SIZE - BINARY_SIZE as u64).to_string(),
            "keyslots_size": KEYSLOTS_SIZE.to_string(),
        }
    });
    let Value::Object(json) = json else {
        unreachable!("json! of an object literal is an object")
    };
    let metadata = Metadata::from_json(json, HEADER_SIZE, device_size)?;
    Ok(Formatted {
        header: Header {
            binary: BinaryHeader {
                hdr_size: HEADER_SIZE,
                seqid: 1,
                label: options.label.clone(),
                uuid,
                subsystem: String::new(),
            },
            metadata,
        },
        keyslot_area: (KEYSLOTS_START, material),
        volume_key,
    })
}
