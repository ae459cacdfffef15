//! The node's state disk: dm-crypt with a LUKS2 header, keyed with the key
//! derived for the disk's UUID (see [`confboot_kms`]).
//!
//! Security posture:
//! - A disk that carries a LUKS header is **never** formatted: a wrong key is
//!   an error ([`DiskError::WrongKey`]), not a reason to wipe.
//! - A disk without a LUKS header is formatted only if it is blank (all zeros
//!   where headers and file-system signatures live, see [`cryptsetup::is_blank`]).
//!   A disk with other content is refused as [`DiskState::Unrecognized`]
//!   unless the caller explicitly allows it ([`StateDisk::allow_formatting_unrecognized`]).
//!   Reason: Constellation formats any disk without a LUKS header, which turns
//!   a damaged header or a wrongly attached data disk into silent data loss;
//!   fresh cloud disks read as zeros, so refusing non-zero content costs
//!   nothing in the normal flow and stops the irreversible mistake.
//! - The key goes to cryptsetup through a pipe on its stdin, never in argv,
//!   the environment or a file, and is never logged; the native backend
//!   keeps the volume key and the dm table that carries it in zeroized
//!   buffers and never logs them.
//!
//! [`StateDisk`] holds the decision (format or open); a [`DiskBackend`] does
//! the work. [`luks2::Luks2Backend`] is the native one (LUKS2 in Rust,
//! device-mapper through [`dm`], no cryptsetup); [`CryptsetupBackend`]
//! drives the cryptsetup program. Both have a header-only mode for
//! machines without device-mapper.
//!
//! [`verity`] is the other disk of a node: its read-only root under
//! dm-verity (the hash tree, veritysetup's superblock, the parameters on
//! the measured kernel command line, the top-level check before mapping),
//! mapped through [`dm::verity`].
//!
//! ```no_run
//! use confboot_disk::{CryptsetupBackend, DiskAction, StateDisk, new_disk_uuid};
//! use confboot_kms::MasterSecret;
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let master = MasterSecret::generate()?; // on a node: from Init's kmsURI or the join ticket
//! let backend = CryptsetupBackend::new("/dev/vdb", "state").with_program("/sbin/cryptsetup");
//! let mut disk = StateDisk::new(backend);
//! match disk.format_or_open(&new_disk_uuid(), |uuid| Ok(master.state_disk_key(uuid)))? {
//!     DiskAction::Formatted { uuid } => println!("new state disk {uuid}: make a file system"),
//!     DiskAction::Opened { uuid } => println!("state disk {uuid} opened"),
//! }
//! let _device = disk.mapped_device(); // Some("/dev/mapper/state")
//! # Ok(())
//! # }
//! ```

use std::path::PathBuf;
use std::sync::OnceLock;

use confboot_kms::{MeasurementSalt, SecretBytes, is_uuid};
use confboot_sys::process::ProcessError;
use confboot_util::IoFailure;

pub mod cryptsetup;
pub mod dm;
pub mod ext4;
pub mod filesystem;
pub mod luks2;
pub mod verity;

pub use cryptsetup::{CryptsetupBackend, MappingSource, OpenMode, Pbkdf};
pub use filesystem::{FilesystemAction, FilesystemMaker, Mkfs, NativeExt4};

/// What a state disk holds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DiskState {
    /// No LUKS header and all zeros where headers live: safe to format.
    Blank,
    /// A LUKS header.
    Luks {
        /// The header's UUID, lowercase.
        uuid: String,
    },
    /// No LUKS header but other content (a damaged header, a file system, a
    /// partition table, random data): not formatted unless explicitly allowed.
    Unrecognized {
        /// What was found (no disk content is quoted).
        reason: String,
    },
}

/// What [`StateDisk::format_or_open`] did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DiskAction {
    /// The disk was blank: it was formatted with this UUID and opened. It holds
    /// no file system yet.
    Formatted {
        /// The new header's UUID, lowercase.
        uuid: String,
    },
    /// The disk had a LUKS header and was opened with the key for its UUID.
    Opened {
        /// The header's UUID, lowercase.
        uuid: String,
    },
}

impl DiskAction {
    /// The disk's UUID, whatever was done.
    pub fn uuid(&self) -> &str {
        match self {
            DiskAction::Formatted { uuid } | DiskAction::Opened { uuid } => uuid,
        }
    }
}

/// What is wrong with a header's metadata where the node reads it: its
/// tokens (the measurement salt, the file system) and its data segment.
/// The header is the host's to write; nothing here quotes key material.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum MetadataFault {
    /// The metadata is larger than LUKS2's largest JSON area (its length).
    #[error("{0} bytes of header metadata")]
    TooLarge(usize),
    /// The metadata is not JSON (the parser's message).
    #[error("the header's JSON: {0}")]
    Json(String),
    /// More than one token of a type (which one is meant is unknown).
    #[error("more than one {0} token")]
    DuplicateToken(String),
    /// A token's id is not a number.
    #[error("token id {0:?}")]
    TokenId(String),
    /// The salt token's salt is not hex (the token's id).
    #[error("token {0}: the salt is not hex")]
    SaltNotHex(String),
    /// The file-system token names none (the token's id).
    #[error("token {0}: no file system named")]
    NoFilesystem(String),
    /// The header keeps no measurement salt where it must.
    #[error("the header keeps no measurement salt")]
    NoSalt,
    /// The kept salt's length is out of bounds.
    #[error("{0}")]
    Salt(#[source] confboot_kms::MeasurementSaltError),
    /// The header has no data segment.
    #[error("the header has no crypt segment")]
    NoSegment,
    /// The segment's cipher is not the node's (it is quoted escaped).
    #[error(
        "segment {segment}: cipher {cipher:?} is not the node's {} (the header is not trusted to choose it)",
        luks2::backend::DATA_CIPHER
    )]
    Cipher {
        /// The segment's id.
        segment: u32,
        /// Its cipher, escaped.
        cipher: String,
    },
    /// The volume key is not of the node's length.
    #[error(
        "segment {segment}: a {len}-byte volume key, not the node's {}",
        luks2::format::VOLUME_KEY_LEN
    )]
    VolumeKeyLength {
        /// The segment's id.
        segment: u32,
        /// The key's length.
        len: usize,
    },
    /// The segment's IV tweak is not 0.
    #[error("segment {segment}: iv_tweak {iv_tweak} (only 0 is mapped)")]
    IvTweak {
        /// The segment's id.
        segment: u32,
        /// Its IV tweak.
        iv_tweak: u64,
    },
    /// The segment does not fit the device.
    #[error(
        "segment {segment} ({} bytes from {offset}) does not fit the {device_size}-byte device",
        size.map_or("dynamic".into(), |s| s.to_string())
    )]
    DoesNotFit {
        /// The segment's id.
        segment: u32,
        /// Its size (`None`: dynamic).
        size: Option<u64>,
        /// Its offset.
        offset: u64,
        /// The device's size.
        device_size: u64,
    },
    /// The segment's table is refused.
    #[error("{0}")]
    Table(#[source] dm::DmError),
}

/// Why a state disk operation failed. No variant carries key material.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DiskError {
    /// Reading or writing the device failed.
    #[error("state disk I/O: {0}")]
    Io(#[source] IoFailure),
    /// cryptsetup could not be run to its end: not started, killed after
    /// its time, or stopped.
    #[error("state disk I/O: cryptsetup {action}: {error}")]
    Run {
        /// The cryptsetup action (`luksFormat`, `open`, ...).
        action: String,
        /// Why it did not run to its end.
        #[source]
        error: ProcessError,
    },
    /// The device's LUKS header could not be read for what it holds.
    #[error("state disk I/O: {}: {error}", device.display())]
    Unreadable {
        /// The device.
        device: PathBuf,
        /// Why its header could not be read.
        #[source]
        error: luks2::Luks2Error,
    },
    /// The LUKS header is not one the node reads: another version, a field
    /// not as the node writes it, a bound broken.
    #[error("state disk header metadata: {0}")]
    Header(#[source] luks2::Luks2Error),
    /// cryptsetup failed for another reason than a wrong key.
    #[error("cryptsetup {action} {}: {stderr}", how_it_ended(*status))]
    Cryptsetup {
        /// The cryptsetup action (`luksFormat`, `open`, ...).
        action: String,
        /// Its exit status (`None` if killed by a signal).
        status: Option<i32>,
        /// The tail of its stderr, with control characters replaced.
        stderr: String,
    },
    /// A device-mapper operation failed (the native backend).
    #[error("{action}: {message}")]
    DeviceMapper {
        /// What the backend was doing (`open`, `close`).
        action: String,
        /// What failed.
        message: String,
    },
    /// The mapping cryptsetup made is not the one the node expects (the
    /// host changed the header between the node's check and cryptsetup's
    /// read); it was removed and never used.
    #[error("refusing the mapping cryptsetup made (removed): {0}")]
    MappingRefused(crate::dm::crypt::MappingMismatch),
    /// The key does not open any key slot of the header.
    #[error("the key does not open the state disk")]
    WrongKey,
    /// Formatting was refused: the disk already carries a LUKS header.
    #[error("refusing to format: the disk has a LUKS header ({uuid})")]
    AlreadyFormatted {
        /// The existing header's UUID.
        uuid: String,
    },
    /// Opening was refused: the disk carries no LUKS header.
    #[error("the disk has no LUKS header")]
    NotLuks,
    /// The disk holds data that is not a LUKS header; it is not formatted.
    #[error("refusing to format a disk that is neither blank nor LUKS: {reason}")]
    Unrecognized {
        /// What was found.
        reason: String,
    },
    /// A UUID is malformed, or a freshly written header does not carry the
    /// requested one.
    #[error("bad disk UUID: {0}")]
    BadUuid(String),
    /// The mapping name is in use (cryptsetup exit status 5).
    #[error("device or mapping busy: {0}")]
    Busy(String),
    /// The caller could not provide the key (returned by `key_for` closures).
    #[error("no key for the state disk: {0}")]
    KeyUnavailable(String),
    /// The backend's configuration is invalid (e.g. a mapper name with `/`).
    #[error("state disk configuration: {0}")]
    Config(String),
    /// The device-mapper backend was given a device that is not a block
    /// device (an image file is for the header-only backend).
    #[error(
        "state disk configuration: {} is not a block device (device-mapper maps block devices; use header-only for image files)",
        device.display()
    )]
    NotABlockDevice {
        /// The device.
        device: PathBuf,
    },
    /// The header's metadata (the measurement salt token) is missing where it
    /// must be, or malformed.
    #[error("state disk header metadata: {0}")]
    Metadata(MetadataFault),
    /// Making the file system on the opened disk failed.
    #[error("state file system: {0}")]
    Filesystem(String),
}

/// How cryptsetup ended, for [`DiskError::Cryptsetup`]: its exit status,
/// or that a signal killed it.
fn how_it_ended(status: Option<i32>) -> String {
    match status {
        Some(s) => format!("exited with {s}"),
        None => "was killed".to_string(),
    }
}

/// Does the work on one disk. Implementations must refuse to [`format`](Self::format)
/// a disk that already has a LUKS header, whatever the caller decided.
pub trait DiskBackend: Send {
    /// What the disk holds.
    fn inspect(&self) -> Result<DiskState, DiskError>;
    /// Writes a new LUKS2 header with `uuid` and one key slot for `key`.
    /// Refuses ([`DiskError::AlreadyFormatted`]) if there is a LUKS header.
    fn format(&mut self, uuid: &str, key: &SecretBytes) -> Result<(), DiskError>;
    /// Opens the disk with `key`; a key that opens no slot is [`DiskError::WrongKey`].
    fn open(&mut self, key: &SecretBytes) -> Result<(), DiskError>;
    /// Checks that `key` opens a key slot of the LUKS header, changing
    /// nothing (no mapping); a key that opens no slot is [`DiskError::WrongKey`].
    fn check_key(&self, key: &SecretBytes) -> Result<(), DiskError>;
    /// The device, for messages.
    fn describe(&self) -> String;
    /// After a successful [`open`](Self::open): the decrypted block device, if
    /// this backend maps one.
    fn mapped_device(&self) -> Option<std::path::PathBuf> {
        None
    }
    /// Keeps the cluster's measurement salt in the LUKS header (replacing
    /// one kept before), so that after a reboot a rejoin or a recovery can
    /// mark the node again: PCR 15 ← HKDF(measurement secret, salt). The salt
    /// is not secret (the admin's cluster state holds it too); a changed one
    /// only gives the node a PCR 15 its attestation is then refused for.
    fn store_measurement_salt(&mut self, salt: &[u8]) -> Result<(), DiskError>;
    /// The measurement salt kept in the header; `None` if there is none.
    fn measurement_salt(&self) -> Result<Option<Vec<u8>>, DiskError>;
    /// Records in the header that the file system `fs` was made on the
    /// opened disk (after `mkfs` succeeded).
    fn record_filesystem(&mut self, fs: &str) -> Result<(), DiskError>;
    /// The file system recorded by [`record_filesystem`](Self::record_filesystem);
    /// `None` if none was made (yet).
    fn filesystem(&self) -> Result<Option<String>, DiskError>;
    /// Records in the header that the node's first boot on this disk
    /// completed (see [`StateDisk::record_bootstrapped`]).
    fn record_bootstrapped(&mut self) -> Result<(), DiskError>;
    /// Whether [`record_bootstrapped`](Self::record_bootstrapped) was done.
    fn bootstrapped(&self) -> Result<bool, DiskError>;
}

/// A boxed backend is a backend: the caller picks one at run time (the
/// bootstrapper's `--disk-backend`).
impl<B: DiskBackend + ?Sized> DiskBackend for Box<B> {
    fn inspect(&self) -> Result<DiskState, DiskError> {
        (**self).inspect()
    }
    fn format(&mut self, uuid: &str, key: &SecretBytes) -> Result<(), DiskError> {
        (**self).format(uuid, key)
    }
    fn open(&mut self, key: &SecretBytes) -> Result<(), DiskError> {
        (**self).open(key)
    }
    fn check_key(&self, key: &SecretBytes) -> Result<(), DiskError> {
        (**self).check_key(key)
    }
    fn describe(&self) -> String {
        (**self).describe()
    }
    fn mapped_device(&self) -> Option<std::path::PathBuf> {
        (**self).mapped_device()
    }
    fn store_measurement_salt(&mut self, salt: &[u8]) -> Result<(), DiskError> {
        (**self).store_measurement_salt(salt)
    }
    fn measurement_salt(&self) -> Result<Option<Vec<u8>>, DiskError> {
        (**self).measurement_salt()
    }
    fn record_filesystem(&mut self, fs: &str) -> Result<(), DiskError> {
        (**self).record_filesystem(fs)
    }
    fn filesystem(&self) -> Result<Option<String>, DiskError> {
        (**self).filesystem()
    }
    fn record_bootstrapped(&mut self) -> Result<(), DiskError> {
        (**self).record_bootstrapped()
    }
    fn bootstrapped(&self) -> Result<bool, DiskError> {
        (**self).bootstrapped()
    }
}

/// A measurement salt read from a header, checked: its length in
/// [`MEASUREMENT_SALT_LEN`](confboot_kms::MEASUREMENT_SALT_LEN) (the host
/// can write anything there).
fn checked_salt(salt: Vec<u8>) -> Result<MeasurementSalt, DiskError> {
    MeasurementSalt::new(salt).map_err(|e| DiskError::Metadata(MetadataFault::Salt(e)))
}

/// A node's state disk and the format-or-open decision.
pub struct StateDisk<B: DiskBackend> {
    backend: B,
    format_unrecognized: bool,
    /// The measurement salt as first read from the header, or as last
    /// stored: the header is read for it once ([`StateDisk::measurement_salt`]).
    salt: OnceLock<MeasurementSalt>,
}

impl<B: DiskBackend> StateDisk<B> {
    /// A state disk on `backend` that refuses to format unrecognized content.
    pub fn new(backend: B) -> Self {
        StateDisk {
            backend,
            format_unrecognized: false,
            salt: OnceLock::new(),
        }
    }

    /// Lets [`format_or_open`](Self::format_or_open) format a disk in the
    /// [`DiskState::Unrecognized`] state (destroying what is on it). A disk
    /// with a LUKS header is still never formatted. For operators who know the
    /// disk is theirs to wipe.
    pub fn allow_formatting_unrecognized(mut self) -> Self {
        self.format_unrecognized = true;
        self
    }

    /// What the disk holds.
    pub fn state(&self) -> Result<DiskState, DiskError> {
        self.backend.inspect()
    }

    /// The decision the bootstrapper needs: a blank disk is formatted with
    /// `blank_uuid` and the key, then opened; a LUKS disk is opened with the
    /// key (never formatted; a wrong key is [`DiskError::WrongKey`]).
    /// `key_for` gets the UUID that is used (the header's, or `blank_uuid`
    /// lowercased) so the caller derives the key for exactly that disk.
    pub fn format_or_open(
        &mut self,
        blank_uuid: &str,
        key_for: impl FnOnce(&str) -> Result<SecretBytes, DiskError>,
    ) -> Result<DiskAction, DiskError> {
        let device = self.backend.describe();
        match self.backend.inspect()? {
            DiskState::Luks { uuid } => {
                log::info!("state disk {device} has a LUKS header ({uuid}); opening it");
                let key = key_for(&uuid)?;
                self.backend.open(&key)?;
                Ok(DiskAction::Opened { uuid })
            }
            DiskState::Unrecognized { reason } if !self.format_unrecognized => {
                log::error!("state disk {device} is neither blank nor LUKS: {reason}");
                Err(DiskError::Unrecognized { reason })
            }
            state => {
                if let DiskState::Unrecognized { reason } = state {
                    log::warn!("formatting state disk {device} despite its content: {reason}");
                }
                if !is_uuid(blank_uuid) {
                    return Err(DiskError::BadUuid(format!("{blank_uuid:?} is not a UUID")));
                }
                let uuid = blank_uuid.to_ascii_lowercase();
                let key = key_for(&uuid)?;
                log::info!("formatting state disk {device} as {uuid}");
                self.salt = OnceLock::new();
                self.backend.format(&uuid, &key)?;
                match self.backend.inspect()? {
                    DiskState::Luks { uuid: written } if written == uuid => {}
                    other => {
                        return Err(DiskError::BadUuid(format!(
                            "after formatting as {uuid} the disk reads as {other:?}"
                        )));
                    }
                }
                self.backend.open(&key)?;
                Ok(DiskAction::Formatted { uuid })
            }
        }
    }

    /// Checks, changing nothing, that the key for the LUKS disk's UUID
    /// (`key_for` gets it) opens it: [`DiskError::NotLuks`] for a disk without
    /// a header, [`DiskError::WrongKey`] for a key that opens no slot. Lets a
    /// caller refuse a wrong key before it commits to opening the disk.
    pub fn check_key(
        &self,
        key_for: impl FnOnce(&str) -> Result<SecretBytes, DiskError>,
    ) -> Result<(), DiskError> {
        let DiskState::Luks { uuid } = self.backend.inspect()? else {
            return Err(DiskError::NotLuks);
        };
        self.backend.check_key(&key_for(&uuid)?)
    }

    /// The decrypted block device after a successful open, if the backend maps one.
    pub fn mapped_device(&self) -> Option<std::path::PathBuf> {
        self.backend.mapped_device()
    }

    /// See [`DiskBackend::store_measurement_salt`] (the salt's length was
    /// checked when it was made).
    /// From then on [`measurement_salt`](Self::measurement_salt) is `salt`.
    pub fn store_measurement_salt(&mut self, salt: &MeasurementSalt) -> Result<(), DiskError> {
        // Until the write is known to have landed, the header is read again.
        self.salt = OnceLock::new();
        self.backend.store_measurement_salt(salt.as_bytes())?;
        self.salt = OnceLock::from(salt.clone());
        Ok(())
    }

    /// Makes sure of the state file system on the opened, mapped disk. The
    /// rule (the header is not authenticated, so it never decides alone to
    /// destroy data): a file system is made when `action` says the disk
    /// was formatted in this boot, or when the disk's first boot was cut
    /// short before making one (the header records no completed first
    /// boot, and the decrypted device holds no ext4 superblock, primary or
    /// copy: [`filesystem::ext4_superblock_copy`]). Any other time a header
    /// that records none means: probe the decrypted device, keep what is
    /// there, report it (and record a file system found). Without a mapped
    /// device (header-only mode) nothing happens. `mkfs` makes it:
    /// [`NativeExt4`], or [`Mkfs`] running mke2fs.
    pub fn ensure_filesystem(
        &mut self,
        mkfs: &dyn filesystem::FilesystemMaker,
        action: &DiskAction,
    ) -> Result<Option<FilesystemAction>, DiskError> {
        let Some(device) = self.backend.mapped_device() else {
            return Ok(None);
        };
        if let Some(fs) = self.backend.filesystem()? {
            log::info!("state file system on {}: {fs}, kept", device.display());
            return Ok(Some(FilesystemAction::Kept));
        }
        if let DiskAction::Formatted { .. } = action {
            mkfs.make(&device)?;
            self.backend.record_filesystem(filesystem::FS_TYPE)?;
            return Ok(Some(FilesystemAction::Made));
        }
        match filesystem::probe(&device)? {
            Some(fs) => {
                log::warn!(
                    "state file system on {}: {fs}, kept (the header did not record it; recorded now)",
                    device.display()
                );
                self.backend.record_filesystem(fs)?;
                Ok(Some(FilesystemAction::Found(fs)))
            }
            // A first boot cut short between the format and mke2fs (a
            // power-off) leaves a LUKS disk that never held a file system:
            // finishing that boot makes it. Not when the header records a
            // completed first boot, and not when any copy of an ext4
            // superblock is there (a damaged file system is data).
            None if !self.backend.bootstrapped()? => {
                match filesystem::ext4_superblock_copy(&device)? {
                    None => {
                        log::warn!(
                            "state file system on {}: none, and no ext4 superblock anywhere on \
                             the device: the first boot that formatted this disk was cut short \
                             before making it; making it now",
                            device.display()
                        );
                        mkfs.make(&device)?;
                        self.backend.record_filesystem(filesystem::FS_TYPE)?;
                        Ok(Some(FilesystemAction::Made))
                    }
                    Some(offset) => {
                        log::warn!(
                            "state file system on {}: none at its start, but an ext4 superblock \
                             copy at byte {offset}: a damaged file system, kept (e2fsck -b can \
                             repair it); nothing is made over it",
                            device.display()
                        );
                        Ok(Some(FilesystemAction::Absent))
                    }
                }
            }
            None => {
                log::warn!(
                    "state file system on {}: the header records none and none was found; \
                     nothing is made on a disk whose first boot completed",
                    device.display()
                );
                Ok(Some(FilesystemAction::Absent))
            }
        }
    }

    /// Records in the header that this disk's first boot completed (the
    /// cluster step succeeded). Until then a LUKS disk is a first boot to
    /// finish, not a node to rejoin.
    pub fn record_bootstrapped(&mut self) -> Result<(), DiskError> {
        self.backend.record_bootstrapped()
    }

    /// Whether the header records a completed first boot.
    pub fn bootstrapped(&self) -> Result<bool, DiskError> {
        self.backend.bootstrapped()
    }

    /// The measurement salt kept in the header; an error if there is none
    /// or it is malformed (the node cannot be marked without it).
    ///
    /// Read once: the first salt read (or the one
    /// [`store_measurement_salt`](Self::store_measurement_salt) wrote since)
    /// is what every later call returns, without reading the header again.
    /// The header is the host's to rewrite at any time, so a decision that
    /// checks the salt (a rejoin's join service proving membership of the
    /// cluster it marks) and the step that uses it (the mark) get one value,
    /// whatever the header says in between.
    pub fn measurement_salt(&self) -> Result<MeasurementSalt, DiskError> {
        if let Some(salt) = self.salt.get() {
            return Ok(salt.clone());
        }
        let salt = self
            .backend
            .measurement_salt()?
            .ok_or(DiskError::Metadata(MetadataFault::NoSalt))?;
        let salt = checked_salt(salt)?;
        Ok(self.salt.get_or_init(|| salt).clone())
    }

    /// The backend.
    pub fn backend(&self) -> &B {
        &self.backend
    }

    /// Gives the backend back.
    pub fn into_backend(self) -> B {
        self.backend
    }
}

/// A fresh random (version 4) UUID, lowercase, from ring's `SystemRandom`.
pub fn new_disk_uuid() -> String {
    use ring::rand::SecureRandom;
    let mut b = [0u8; 16];
    ring::rand::SystemRandom::new()
        .fill(&mut b)
        .expect("the system's random source works");
    b[6] = (b[6] & 0x0f) | 0x40;
    b[8] = (b[8] & 0x3f) | 0x80;
    uuid_text(&b)
}

/// 16 bytes as a UUID's text: lowercase hex in groups of 8-4-4-4-12.
pub(crate) fn uuid_text(bytes: &[u8; 16]) -> String {
    let h = confboot_util::hex::encode(bytes);
    format!(
        "{}-{}-{}-{}-{}",
        &h[0..8],
        &h[8..12],
        &h[12..16],
        &h[16..20],
        &h[20..32]
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A LUKS disk whose header's salt the host rewrites before every read.
    struct RewrittenSalt {
        reads: std::sync::atomic::AtomicU8,
        stored: Option<Vec<u8>>,
    }

    impl DiskBackend for RewrittenSalt {
        fn inspect(&self) -> Result<DiskState, DiskError> {
            Ok(DiskState::Luks {
                uuid: "0a1b2c3d-0000-4000-8000-000000000001".into(),
            })
        }
        fn format(&mut self, _: &str, _: &SecretBytes) -> Result<(), DiskError> {
            unreachable!("a LUKS disk is never formatted")
        }
        fn open(&mut self, _: &SecretBytes) -> Result<(), DiskError> {
            Ok(())
        }
        fn check_key(&self, _: &SecretBytes) -> Result<(), DiskError> {
            Ok(())
        }
        fn describe(&self) -> String {
            "a disk whose salt changes".into()
        }
        fn store_measurement_salt(&mut self, salt: &[u8]) -> Result<(), DiskError> {
            self.stored = Some(salt.to_vec());
            Ok(())
        }
        fn measurement_salt(&self) -> Result<Option<Vec<u8>>, DiskError> {
            let n = self.reads.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            Ok(Some(vec![n; 32]))
        }
        fn record_filesystem(&mut self, _: &str) -> Result<(), DiskError> {
            Ok(())
        }
        fn filesystem(&self) -> Result<Option<String>, DiskError> {
            Ok(None)
        }
        fn record_bootstrapped(&mut self) -> Result<(), DiskError> {
            Ok(())
        }
        fn bootstrapped(&self) -> Result<bool, DiskError> {
            Ok(true)
        }
    }

    #[test]
    fn the_measurement_salt_is_read_from_the_header_once() {
        let mut disk = StateDisk::new(RewrittenSalt {
            reads: 0.into(),
            stored: None,
        });
        // A check and a use, with the header rewritten in between: one value.
        assert_eq!(disk.measurement_salt().unwrap().as_bytes(), [0; 32]);
        assert_eq!(disk.measurement_salt().unwrap().as_bytes(), [0; 32]);
        assert_eq!(
            disk.backend()
                .reads
                .load(std::sync::atomic::Ordering::SeqCst),
            1
        );
        // What the node stores is what it uses from then on.
        disk.store_measurement_salt(&MeasurementSalt::new(vec![7; 32]).unwrap())
            .unwrap();
        assert_eq!(disk.measurement_salt().unwrap().as_bytes(), [7; 32]);
        assert_eq!(disk.backend().stored, Some(vec![7; 32]));
        assert_eq!(
            disk.backend()
                .reads
                .load(std::sync::atomic::Ordering::SeqCst),
            1
        );
    }

    #[test]
    fn new_uuids_are_v4_and_fresh() {
        let a = new_disk_uuid();
        let b = new_disk_uuid();
        assert_ne!(a, b);
        for u in [&a, &b] {
            assert!(is_uuid(u), "{u}");
            assert_eq!(u.to_ascii_lowercase(), *u);
            assert_eq!(&u[14..15], "4", "{u}");
            assert!("89ab".contains(&u[19..20]), "{u}");
        }
    }
}
