//! [`Luks2Backend`]: the pure-Rust LUKS2 behind the state disk's
//! [`DiskBackend`] trait, so [`crate::disk::StateDisk`] keeps its
//! never-format rules on it unchanged. It keeps the same tokens as
//! [`crate::disk::CryptsetupBackend`] (read through the same
//! [`HeaderMetadata`]), and the same key meaning (the state-disk key is
//! the passphrase), so either backend opens what the other wrote.
//!
//! It checks keys and keeps tokens; it maps nothing (the build-machine
//! mode of the cryptsetup backend, [`crate::disk::OpenMode::HeaderOnly`]):
//! mapping the volume key through device-mapper is a separate step.

use std::path::PathBuf;

use serde_json::{Map, Value};

use super::{FormatOptions, KdfLimits, Luks2, Luks2Error, probe};
use crate::disk::cryptsetup::{
    BOOTSTRAPPED_TOKEN_TYPE, FILESYSTEM_TOKEN_TYPE, HeaderMetadata, SALT_TOKEN_TYPE,
};
use crate::disk::{DiskBackend, DiskError, DiskState};
use crate::kms::{SecretBytes, is_uuid};

/// The state-disk backend on the pure-Rust LUKS2, header only.
#[derive(Clone, Debug)]
pub struct Luks2Backend {
    /// The block device or image file.
    pub device: PathBuf,
    /// How new headers are made (the UUID is the one `format` is given).
    pub options: FormatOptions,
    /// The KDF cost limits for unlocking.
    pub limits: KdfLimits,
}

impl Luks2Backend {
    /// A backend on `device` with the default format options and limits.
    pub fn header_only(device: impl Into<PathBuf>) -> Self {
        Luks2Backend {
            device: device.into(),
            options: FormatOptions::default(),
            limits: KdfLimits::default(),
        }
    }

    fn read(&self) -> Result<Luks2, DiskError> {
        Ok(Luks2::read(&self.device)
            .map_err(to_disk_error)?
            .with_limits(self.limits))
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
        let mut disk = self.read()?;
        let meta = HeaderMetadata::parse(disk.metadata_json().as_bytes())?;
        let existing = match meta.token(token_type)? {
            Some((id, _)) => Some(
                id.parse::<u32>()
                    .map_err(|_| DiskError::Metadata(format!("token id {id:?}")))?,
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

/// The state disk's error for a LUKS2 one.
pub fn to_disk_error(e: Luks2Error) -> DiskError {
    match e {
        Luks2Error::WrongPassphrase => DiskError::WrongKey,
        Luks2Error::AlreadyLuks { uuid } => DiskError::AlreadyFormatted { uuid },
        Luks2Error::Io(m) => DiskError::Io(m),
        Luks2Error::InvalidOption(m) => DiskError::Config(m),
        Luks2Error::NoValidHeader { .. } | Luks2Error::Version(_) => DiskError::NotLuks,
        other => DiskError::Metadata(other.to_string()),
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
        self.check(key)
    }

    fn check_key(&self, key: &SecretBytes) -> Result<(), DiskError> {
        self.check(key)
    }

    fn describe(&self) -> String {
        format!("{} (pure-Rust LUKS2, header only)", self.device.display())
    }

    fn store_measurement_salt(&mut self, salt: &[u8]) -> Result<(), DiskError> {
        let mut fields = Map::new();
        fields.insert("salt".into(), crate::hex::encode(salt).into());
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
