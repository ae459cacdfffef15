//! The `verity` target (the kernel's
//! `Documentation/admin-guide/device-mapper/verity.rst`): its table line
//!
//! ```text
//! 1 DATA_DEV HASH_DEV DATA_BLOCK_SIZE HASH_BLOCK_SIZE DATA_BLOCKS HASH_START_BLOCK sha256 ROOT_HASH SALT [1 MODE]
//! ```
//!
//! (devices as `MAJOR:MINOR` or a path, the salt `-` for none, `MODE` what
//! the kernel does on a block that does not match its hash) and the
//! read-only mapping of a verified root, [`open_verity`]. Nothing here is
//! secret; the mapping is removed with [`DeviceMapper::remove`].

use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};

use super::wire::Target;
use super::{DeviceMapper, DmError};
use crate::verity::{HASH_ALGORITHM, VerityParams};
use confboot_util::IoFailure;

/// The longest device name (path or `MAJOR:MINOR`) put in a table.
pub const MAX_DEVICE_LEN: usize = 255;

/// What the kernel does when a block read through the mapping does not
/// match the tree.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum CorruptionMode {
    /// The read fails with `EIO` (the kernel's default: no optional
    /// argument).
    IoError,
    /// The machine restarts (`restart_on_corruption`).
    Restart,
    /// The kernel panics (`panic_on_corruption`): the node stops rather
    /// than run bytes that are not the measured image's.
    #[default]
    Panic,
}

impl CorruptionMode {
    /// The optional arguments that select it (count first), or nothing.
    fn optional_args(self) -> &'static str {
        match self {
            CorruptionMode::IoError => "",
            CorruptionMode::Restart => " 1 restart_on_corruption",
            CorruptionMode::Panic => " 1 panic_on_corruption",
        }
    }
}

/// A `verity` table: one target covering the data blocks.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VerityTable {
    length: u64,
    params: String,
}

fn check_device(what: &str, device: &str) -> Result<(), DmError> {
    if device.is_empty()
        || device.len() > MAX_DEVICE_LEN
        || !device.bytes().all(|b| b.is_ascii_graphic())
    {
        return Err(DmError::Invalid(format!(
            "{what} {:?}: want 1 to {MAX_DEVICE_LEN} printable characters without spaces",
            device.escape_debug().to_string()
        )));
    }
    Ok(())
}

impl VerityTable {
    /// The table for `params` on `data_device` and `hash_device` (each a
    /// path or `MAJOR:MINOR`, as dm accepts them), with `mode`. Refuses
    /// parameters [`VerityParams::validate`] refuses, devices that are not
    /// one word, and data that overlaps the tree on one device.
    pub fn new(
        params: &VerityParams,
        data_device: &str,
        hash_device: &str,
        mode: CorruptionMode,
    ) -> Result<VerityTable, DmError> {
        params
            .validate()
            .map_err(|e| DmError::Invalid(e.to_string()))?;
        check_device("data device", data_device)?;
        check_device("hash device", hash_device)?;
        let data_bytes = params
            .data_bytes()
            .map_err(|e| DmError::Invalid(e.to_string()))?;
        if data_device == hash_device && data_bytes > params.hash_offset {
            return Err(DmError::Invalid(format!(
                "data ({data_bytes} bytes) and hash area (from byte {}) overlap on {data_device}",
                params.hash_offset
            )));
        }
        let salt = if params.salt.is_empty() {
            "-".to_string()
        } else {
            confboot_util::hex::encode(&params.salt)
        };
        Ok(VerityTable {
            length: data_bytes / 512,
            params: format!(
                "1 {data_device} {hash_device} {} {} {} {} {HASH_ALGORITHM} {} {salt}{}",
                params.data_block_size,
                params.hash_block_size,
                params.data_blocks,
                params.hash_start_block,
                confboot_util::hex::encode(&params.root_hash),
                mode.optional_args()
            ),
        })
    }

    /// The parameter line.
    pub fn line(&self) -> &str {
        &self.params
    }

    /// The mapped device's length, in 512-byte sectors.
    pub fn sectors(&self) -> u64 {
        self.length
    }

    /// Its one target, for [`DeviceMapper::create_read_only`].
    pub fn target(&self) -> Target<'_> {
        Target {
            sector_start: 0,
            length: self.length,
            target_type: "verity",
            params: self.params.as_bytes(),
        }
    }
}

/// A block device's `dev_t` as dm's `MAJOR:MINOR`.
pub fn device_number(dev: u64) -> String {
    let dev = dev as nix::libc::dev_t;
    format!(
        "{}:{}",
        nix::sys::stat::major(dev),
        nix::sys::stat::minor(dev)
    )
}

/// The `dev_t` of the block device at `path`.
fn block_device(path: &Path) -> Result<u64, DmError> {
    let meta = std::fs::metadata(path)
        .map_err(|e| DmError::Io(IoFailure::new(path.display().to_string(), e)))?;
    if !meta.file_type().is_block_device() {
        return Err(DmError::Invalid(format!(
            "{} is not a block device",
            path.display()
        )));
    }
    Ok(meta.rdev())
}

/// Maps `params`' data device, verified by its hash device, read-only as
/// `/dev/mapper/NAME` with `mode` on corruption; returns the node. The
/// devices go into the table as `MAJOR:MINOR`. Checks nothing on disk:
/// call [`crate::verity::check_top_level`] first. Remove the mapping with
/// [`DeviceMapper::remove`].
pub fn open_verity(
    name: &str,
    params: &VerityParams,
    mode: CorruptionMode,
) -> Result<PathBuf, DmError> {
    open_verity_with(&DeviceMapper::open_default()?, name, params, mode)
}

/// [`open_verity`] through `dm`.
pub fn open_verity_with(
    dm: &DeviceMapper,
    name: &str,
    params: &VerityParams,
    mode: CorruptionMode,
) -> Result<PathBuf, DmError> {
    let data = device_number(block_device(&params.data_device)?);
    let hash = device_number(block_device(&params.hash_device)?);
    let table = VerityTable::new(params, &data, &hash, mode)?;
    let uuid = format!(
        "CRYPT-VERITY-{}-{name}",
        confboot_util::hex::encode(&params.root_hash[..16])
    );
    let node = dm.create_read_only(name, &uuid, &table.target())?;
    log::info!(
        "mapped {} (tree on {}) read-only as {}: verity {}",
        params.data_device.display(),
        params.hash_device.display(),
        node.display(),
        table.line()
    );
    Ok(node)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The kernel documentation's example:
    /// `0 2097152 verity 1 /dev/sda1 /dev/sda2 4096 4096 262144 1 sha256 4392...076 1234000...000`.
    fn documented() -> VerityParams {
        let mut root_hash = [0u8; 32];
        root_hash.copy_from_slice(
            &confboot_util::hex::decode(
                "4392712ba01368efdf14b05c76f9e4df0d53664630b5d48632ed17a137f39076",
            )
            .unwrap(),
        );
        let mut salt = vec![0u8; 32];
        salt[..2].copy_from_slice(&[0x12, 0x34]);
        VerityParams {
            data_device: "/dev/sda1".into(),
            hash_device: "/dev/sda2".into(),
            data_block_size: 4096,
            hash_block_size: 4096,
            data_blocks: 262144,
            hash_offset: 0,
            superblock: true,
            hash_start_block: 1,
            root_hash,
            salt,
        }
    }

    #[test]
    fn the_line_is_the_kernels_example() {
        let p = documented();
        let t = VerityTable::new(&p, "/dev/sda1", "/dev/sda2", CorruptionMode::IoError).unwrap();
        let target = t.target();
        assert_eq!((target.sector_start, target.length), (0, 2097152));
        assert_eq!(target.target_type, "verity");
        assert_eq!(
            t.line(),
            "1 /dev/sda1 /dev/sda2 4096 4096 262144 1 sha256 \
             4392712ba01368efdf14b05c76f9e4df0d53664630b5d48632ed17a137f39076 \
             1234000000000000000000000000000000000000000000000000000000000000"
        );
        assert_eq!(target.params, t.line().as_bytes());
    }

    #[test]
    fn panic_is_the_default_and_modes_are_optional_args() {
        assert_eq!(CorruptionMode::default(), CorruptionMode::Panic);
        let p = VerityParams {
            salt: vec![],
            ..documented()
        };
        let line = |mode| {
            VerityTable::new(&p, "8:1", "8:2", mode)
                .unwrap()
                .line()
                .to_string()
        };
        let base = "1 8:1 8:2 4096 4096 262144 1 sha256 \
                    4392712ba01368efdf14b05c76f9e4df0d53664630b5d48632ed17a137f39076 -";
        assert_eq!(line(CorruptionMode::IoError), base);
        assert_eq!(
            line(CorruptionMode::Restart),
            format!("{base} 1 restart_on_corruption")
        );
        assert_eq!(
            line(CorruptionMode::Panic),
            format!("{base} 1 panic_on_corruption")
        );
        assert!(!line(CorruptionMode::Panic).contains("ignore_zero_blocks"));
    }

    #[test]
    fn one_device_puts_the_tree_after_the_data() {
        let p = VerityParams {
            data_device: "/dev/vdb".into(),
            hash_device: "/dev/vdb".into(),
            data_blocks: 1000,
            hash_offset: 1000 * 4096,
            hash_start_block: 1001,
            ..documented()
        };
        let t = VerityTable::new(&p, "254:16", "254:16", CorruptionMode::Panic).unwrap();
        assert!(
            t.line()
                .starts_with("1 254:16 254:16 4096 4096 1000 1001 sha256 ")
        );
        assert_eq!(t.sectors(), 8000);
        // The same device under two names the parameters do not know are one.
        let p = VerityParams {
            hash_device: "/dev/disk/by-id/x".into(),
            hash_offset: 4096,
            hash_start_block: 2,
            ..p
        };
        assert!(VerityTable::new(&p, "254:16", "254:16", CorruptionMode::Panic).is_err());
    }

    #[test]
    fn bad_tables_are_refused() {
        let p = documented();
        for (data, hash) in [("", "8:2"), ("/dev/a b", "8:2"), ("8:1", "x\ny")] {
            assert!(
                VerityTable::new(&p, data, hash, CorruptionMode::Panic).is_err(),
                "{data:?} {hash:?}"
            );
        }
        let bad = VerityParams {
            hash_start_block: 0,
            ..documented()
        };
        assert!(VerityTable::new(&bad, "8:1", "8:2", CorruptionMode::Panic).is_err());
        assert_eq!(device_number(nix::sys::stat::makedev(254, 16)), "254:16");
    }

    #[test]
    fn a_file_is_not_mapped() {
        let p = VerityParams {
            data_device: "/proc/self/status".into(),
            ..documented()
        };
        let e = block_device(&p.data_device).unwrap_err();
        assert!(e.to_string().contains("not a block device"), "{e}");
    }
}
