//! The file system on the opened state disk: made once, when the LUKS
//! header does not record it yet ([`super::StateDisk::ensure_filesystem`]
//! decides; a freshly mapped disk reads as noise, not zeros, so its content
//! cannot tell).

use std::path::{Path, PathBuf};
use std::time::Duration;

use super::DiskError;
use crate::process::{CommandRunner, ProcessRunner, Stream};

/// The file system made: ext4.
pub const FS_TYPE: &str = "ext4";

/// The label the state disk's file system carries.
pub const LABEL: &str = "confboot-state";

/// How long `mke2fs` may take (with lazy inode-table and journal
/// initialization it writes only metadata: seconds even on large disks).
pub const MKFS_TIMEOUT: Duration = Duration::from_secs(10 * 60);

/// Makes ext4 file systems with `mke2fs`.
pub struct Mkfs {
    program: PathBuf,
    runner: Box<dyn CommandRunner>,
}

/// What [`super::StateDisk::ensure_filesystem`] did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FilesystemAction {
    /// The device was blank; it has an ext4 file system now.
    Made,
    /// The device holds data already (a file system, we trust); untouched.
    Kept,
}

impl Mkfs {
    /// `program` (`mke2fs`, found in `PATH`, or a path), run with a
    /// [`MKFS_TIMEOUT`] limit.
    pub fn new(program: impl Into<PathBuf>) -> Mkfs {
        Mkfs::with_runner(
            program,
            Box::new(ProcessRunner::new(
                Some(MKFS_TIMEOUT),
                crate::rpc::Stop::new(),
            )),
        )
    }

    /// With another runner (tests record calls).
    pub fn with_runner(program: impl Into<PathBuf>, runner: Box<dyn CommandRunner>) -> Mkfs {
        Mkfs {
            program: program.into(),
            runner,
        }
    }

    /// Makes an ext4 file system labelled [`LABEL`] on `device`, over
    /// whatever is there (`-F`: the caller knows the device holds no data).
    pub fn make(&self, device: &Path) -> Result<(), DiskError> {
        let args: Vec<String> = [
            "-t",
            FS_TYPE,
            "-F",
            "-q",
            "-L",
            LABEL,
            "-E",
            "lazy_itable_init=1,lazy_journal_init=1",
        ]
        .iter()
        .map(|a| a.to_string())
        .chain([device.to_string_lossy().into_owned()])
        .collect();
        let out = self
            .runner
            .run(
                &self.program,
                &args,
                None,
                &mut |stream, line| match stream {
                    Stream::Stdout => log::debug!("mke2fs: {line}"),
                    Stream::Stderr => log::warn!("mke2fs: {line}"),
                },
            )
            .map_err(|e| DiskError::Filesystem(format!("{}: {e}", self.program.display())))?;
        if !out.success() {
            return Err(DiskError::Filesystem(format!(
                "{} exited with {:?}: {}",
                self.program.display(),
                out.status,
                out.stderr_tail.join(" | ")
            )));
        }
        log::info!("state file system on {}: ext4 made", device.display());
        Ok(())
    }
}
