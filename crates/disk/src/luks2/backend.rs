//! [`Luks2Backend`]: the pure-Rust LUKS2 behind the state disk's
//! [`DiskBackend`] trait, so [`crate::StateDisk`] keeps its
//! never-format rules on it unchanged. It keeps the same tokens as
//! [`crate::CryptsetupBackend`] (read through the same
//! [`HeaderMetadata`]), and the same key meaning (the state-disk key is
//! the passphrase), so either backend opens what the other wrote.
//!
//! Every use of the header (opening, checking a key, reading or writing a
//! token) first refuses a header that is not exactly the one this backend
//! writes ([`ExpectedHeader`]: segment, cipher, key sizes, sector size,
//! offsets, KDF and costs, digest). Opening then unlocks key slot 0 to the
//! volume key and maps the data segment with a `crypt` table
//! through device-mapper ([`crate::dm`]) at `/dev/mapper/NAME`, as
//! `cryptsetup open` does; [`Luks2Backend::header_only`] only checks keys
//! (the build-machine mode, like [`crate::OpenMode::HeaderOnly`]).

use std::fs::File;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::time::Instant;

use serde_json::{Map, Value};

use super::{ExpectedHeader, FormatOptions, KdfLimits, Luks2, Luks2Error, probe};
use crate::cryptsetup::{
    BOOTSTRAPPED_TOKEN_TYPE, FILESYSTEM_TOKEN_TYPE, HeaderMetadata, SALT_TOKEN_TYPE,
};
use crate::dm::crypt::{CryptLayout, CryptTable};
use crate::dm::{self, DeviceMapper, DmError};
use crate::{DiskBackend, DiskError, DiskState, MetadataFault};
use confboot_kms::{SecretBytes, is_uuid};
use confboot_util::IoFailure;

/// The state-disk backend on the pure-Rust LUKS2 and device-mapper.
#[derive(Clone, Debug)]
pub struct Luks2Backend {
    /// The block device (or, header only, an image file).
    pub device: PathBuf,
    /// How new headers are made (the UUID is the one `format` is given).
    pub options: FormatOptions,
    /// The KDF cost limits for unlocking.
    pub limits: KdfLimits,
    /// The mapping's name (`/dev/mapper/NAME`); `None`: header only.
    pub mapper_name: Option<String>,
    /// The device-mapper control device ([`dm::CONTROL`]).
    pub control: PathBuf,
    /// Where the mapping's node is made ([`dm::DEV_DIR`]).
    pub dev_dir: PathBuf,
    mapped: Option<PathBuf>,
}

impl Luks2Backend {
    /// A backend mapping `device` as `/dev/mapper/<mapper_name>` on
    /// [`Luks2Backend::open`](DiskBackend::open), with the default format
    /// options and limits.
    pub fn new(device: impl Into<PathBuf>, mapper_name: impl Into<String>) -> Self {
        Luks2Backend {
            mapper_name: Some(mapper_name.into()),
            ..Luks2Backend::header_only(device)
        }
    }

    /// A backend on `device` that checks keys against the header and maps
    /// nothing, with the default format options and limits.
    pub fn header_only(device: impl Into<PathBuf>) -> Self {
        Luks2Backend {
            device: device.into(),
            options: FormatOptions::default(),
            limits: KdfLimits::default(),
            mapper_name: None,
            control: PathBuf::from(dm::CONTROL),
            dev_dir: PathBuf::from(dm::DEV_DIR),
            mapped: None,
        }
    }

    /// Uses `options` for new headers (PBKDF choice and costs).
    pub fn with_options(mut self, options: FormatOptions) -> Self {
        self.options = options;
        self
    }

    /// Removes the mapping made by [`open`](DiskBackend::open) (nothing if
    /// none was made); [`DiskError::DeviceMapper`] (`EBUSY`) while it is
    /// in use (mounted).
    pub fn close(&mut self) -> Result<(), DiskError> {
        let (Some(name), Some(_)) = (&self.mapper_name, &self.mapped) else {
            return Ok(());
        };
        let dm = DeviceMapper::open(&self.control, &self.dev_dir).map_err(dm_error("close"))?;
        dm.remove(name).map_err(dm_error("close"))?;
        self.mapped = None;
        Ok(())
    }

    /// Unlocks a key slot with `key` and maps the data segment as `name`.
    fn map(&self, name: &str, key: &SecretBytes) -> Result<PathBuf, DiskError> {
        dm::check_name(name).map_err(|e| DiskError::Config(e.to_string()))?;
        if key.expose().is_empty() {
            return Err(DiskError::KeyUnavailable("the key is empty".into()));
        }
        let started = Instant::now();
        let disk = self.read()?;
        let volume_key = disk.unlock(key.expose()).map_err(to_disk_error)?;
        let unlocked = started.elapsed();
        let device = block_device(&self.device)?;
        let table = data_segment_table(disk.header(), volume_key.expose(), device)?;
        drop(volume_key);
        let dm = DeviceMapper::open(&self.control, &self.dev_dir).map_err(dm_error("open"))?;
        let dm_uuid = format!("CRYPT-LUKS2-{}-{name}", disk.uuid().replace('-', ""));
        let node = dm
            .create(name, &dm_uuid, &table.target())
            .map_err(dm_error("open"))?;
        log::info!(
            "mapped {} as {} ({DATA_CIPHER}, {} B sectors) in {} ms (key slot {} ms)",
            self.device.display(),
            node.display(),
            disk.header()
                .metadata
                .segments
                .first()
                .map_or(0, |s| s.sector_size),
            started.elapsed().as_millis(),
            unlocked.as_millis()
        );
        Ok(node)
    }

    /// Reads the header, once, and refuses it unless it is exactly the
    /// one this backend writes ([`ExpectedHeader`]): before any key
    /// derivation, mapping or token use.
    fn read(&self) -> Result<Luks2, DiskError> {
        let disk = Luks2::read(&self.device)
            .map_err(to_disk_error)?
            .with_limits(self.limits);
        self.expected()
            .check(disk.header())
            .map_err(to_disk_error)?;
        Ok(disk)
    }

    /// The header this backend writes, the only one it opens.
    pub fn expected(&self) -> ExpectedHeader {
        ExpectedHeader::written_with(&self.options)
    }

    fn metadata(&self) -> Result<HeaderMetadata, DiskError> {
        HeaderMetadata::parse(self.read()?.metadata_json().as_bytes())
    }

    /// Writes a token of `token_type` bound to no key slot with `fields`,
    /// replacing the header's token of that type if it has one.
    fn put_token(
        &mut self,
        token_type: &str,
        mut fields: Map<String, Value>,
    ) -> Result<(), DiskError> {
        fields.insert("type".into(), token_type.into());
        fields.insert("keyslots".into(), Value::Array(Vec::new()));
        log::debug!(
            "writing the {token_type} token to {}",
            self.device.display()
        );
        let mut disk = self.read()?;
        let meta = HeaderMetadata::parse(disk.metadata_json().as_bytes())?;
        let existing = match meta.token(token_type)? {
            Some((id, _)) => Some(
                id.parse::<u32>()
                    .map_err(|_| DiskError::Metadata(MetadataFault::TokenId(id.to_string())))?,
            ),
            None => None,
        };
        disk.set_token(existing, fields).map_err(to_disk_error)?;
        Ok(())
    }

    fn check(&self, key: &SecretBytes) -> Result<(), DiskError> {
        if key.expose().is_empty() {
            return Err(DiskError::KeyUnavailable("the key is empty".into()));
        }
        self.read()?.unlock(key.expose()).map_err(to_disk_error)?;
        Ok(())
    }
}

/// The one cipher a node maps its state disk's data with: the one it
/// formats it with. The header's JSON is not authenticated, so its
/// `segments.0.encryption` names the cipher the node expects or the disk is
/// refused; a host that rewrote it (say to `aes-xts-null`, a zero IV for
/// every sector) between the node's format and its open cannot choose how
/// the node's data is encrypted.
pub const DATA_CIPHER: &str = super::area::CIPHER;

/// The `crypt` table of `header`'s data segment with `volume_key`, on the
/// block device `(device number, size in bytes)`: the segment's offset,
/// size and sector size from the header (checked against the device), the
/// cipher and key length the node's own ([`DATA_CIPHER`],
/// [`super::format::VOLUME_KEY_LEN`]) whatever the header says.
pub fn data_segment_table(
    header: &super::Header,
    volume_key: &[u8],
    (device, size): (u64, u64),
) -> Result<CryptTable, DiskError> {
    let segment = header
        .metadata
        .segments
        .first()
        .ok_or(DiskError::Metadata(MetadataFault::NoSegment))?;
    if segment.encryption != DATA_CIPHER {
        return Err(DiskError::Metadata(MetadataFault::Cipher {
            segment: segment.id,
            cipher: segment.encryption.escape_debug().to_string(),
        }));
    }
    if volume_key.len() != super::format::VOLUME_KEY_LEN {
        return Err(DiskError::Metadata(MetadataFault::VolumeKeyLength {
            segment: segment.id,
            len: volume_key.len(),
        }));
    }
    if segment.iv_tweak != 0 {
        return Err(DiskError::Metadata(MetadataFault::IvTweak {
            segment: segment.id,
            iv_tweak: segment.iv_tweak,
        }));
    }
    let end = match segment.size {
        Some(len) => segment.offset.checked_add(len),
        None => Some(size),
    };
    let length = match end {
        Some(end) if end <= size && end > segment.offset => end - segment.offset,
        _ => {
            return Err(DiskError::Metadata(MetadataFault::DoesNotFit {
                segment: segment.id,
                size: segment.size,
                offset: segment.offset,
                device_size: size,
            }));
        }
    };
    let layout = CryptLayout {
        cipher: DATA_CIPHER,
        iv_offset: 0,
        device,
        offset: segment.offset,
        length,
        sector_size: segment.sector_size,
    };
    CryptTable::new(&layout, volume_key).map_err(|e| DiskError::Metadata(MetadataFault::Table(e)))
}

/// The device number and size of the block device at `path`.
pub(crate) fn block_device(path: &Path) -> Result<(u64, u64), DiskError> {
    let io = |e: std::io::Error| DiskError::Io(IoFailure::new(path.display().to_string(), e));
    let meta = std::fs::metadata(path).map_err(io)?;
    if !meta.file_type().is_block_device() {
        return Err(DiskError::NotABlockDevice {
            device: path.to_path_buf(),
        });
    }
    let mut file = File::open(path).map_err(io)?;
    let size = super::header::device_size(&mut file).map_err(to_disk_error)?;
    Ok((meta.rdev(), size))
}

/// The state disk's error for a device-mapper one during `action`.
fn dm_error(action: &'static str) -> impl Fn(DmError) -> DiskError {
    move |e| match e {
        DmError::Busy(_) => DiskError::Busy(e.to_string()),
        e => DiskError::DeviceMapper {
            action: action.to_string(),
            message: e.to_string(),
        },
    }
}

/// The state disk's error for a LUKS2 one (a header of another LUKS version
/// is [`DiskError::Header`] naming it: the disk is LUKS, just not a
/// header the node writes).
pub fn to_disk_error(e: Luks2Error) -> DiskError {
    match e {
        Luks2Error::WrongPassphrase => DiskError::WrongKey,
        Luks2Error::AlreadyLuks { uuid } => DiskError::AlreadyFormatted { uuid },
        Luks2Error::Io(m) => DiskError::Io(m),
        Luks2Error::Probe(e) => *e,
        Luks2Error::InvalidOption(m) => DiskError::Config(m),
        Luks2Error::NoValidHeader { .. } => DiskError::NotLuks,
        other => DiskError::Header(other),
    }
}

impl DiskBackend for Luks2Backend {
    fn inspect(&self) -> Result<DiskState, DiskError> {
        probe(&self.device)
    }

    fn format(&mut self, uuid: &str, key: &SecretBytes) -> Result<(), DiskError> {
        if !is_uuid(uuid) {
            return Err(DiskError::BadUuid(format!("{uuid:?} is not a UUID")));
        }
        if key.expose().is_empty() {
            return Err(DiskError::KeyUnavailable("the key is empty".into()));
        }
        let options = FormatOptions {
            uuid: Some(uuid.to_string()),
            ..self.options.clone()
        };
        Luks2::format(&self.device, key.expose(), &options).map_err(to_disk_error)?;
        Ok(())
    }

    fn open(&mut self, key: &SecretBytes) -> Result<(), DiskError> {
        match self.mapper_name.clone() {
            None => self.check(key),
            Some(name) => {
                self.mapped = Some(self.map(&name, key)?);
                Ok(())
            }
        }
    }

    fn check_key(&self, key: &SecretBytes) -> Result<(), DiskError> {
        self.check(key)
    }

    fn describe(&self) -> String {
        match &self.mapper_name {
            Some(name) => format!(
                "{} (as /dev/mapper/{name}, native LUKS2)",
                self.device.display()
            ),
            None => format!("{} (pure-Rust LUKS2, header only)", self.device.display()),
        }
    }

    fn mapped_device(&self) -> Option<PathBuf> {
        self.mapped.clone()
    }

    fn store_measurement_salt(&mut self, salt: &[u8]) -> Result<(), DiskError> {
        let mut fields = Map::new();
        fields.insert("salt".into(), confboot_util::hex::encode(salt).into());
        self.put_token(SALT_TOKEN_TYPE, fields)
    }

    fn measurement_salt(&self) -> Result<Option<Vec<u8>>, DiskError> {
        self.metadata()?.measurement_salt()
    }

    fn record_filesystem(&mut self, fs: &str) -> Result<(), DiskError> {
        let mut fields = Map::new();
        fields.insert("fs".into(), fs.into());
        self.put_token(FILESYSTEM_TOKEN_TYPE, fields)
    }

    fn filesystem(&self) -> Result<Option<String>, DiskError> {
        self.metadata()?.filesystem()
    }

    fn record_bootstrapped(&mut self) -> Result<(), DiskError> {
        let mut fields = Map::new();
        fields.insert("complete".into(), true.into());
        self.put_token(BOOTSTRAPPED_TOKEN_TYPE, fields)
    }

    fn bootstrapped(&self) -> Result<bool, DiskError> {
        self.metadata()?.bootstrapped()
    }
}
