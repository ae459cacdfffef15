//! The file system on the opened state disk: made only in the boot that
//! formatted the disk, recorded in the LUKS header, and otherwise probed and
//! kept ([`super::StateDisk::ensure_filesystem`] decides; a freshly mapped
//! disk reads as noise, not zeros, and a header is not authenticated, so
//! neither tells alone).

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
    /// The disk was formatted in this boot; it has an ext4 file system now.
    Made,
    /// The header records the file system; untouched.
    Kept,
    /// The header records none, but the probe found one (named): untouched,
    /// and now recorded.
    Found(&'static str),
    /// The header records none and the probe found none: nothing is made
    /// outside the boot that formatted the disk, whatever the header says.
    Absent,
}

/// How much of a device [`probe`] reads.
pub const PROBE_BYTES: usize = 128 << 10;

/// Looks for a file-system signature at the start of `device` (the opened,
/// decrypted state disk): ext2/3/4, XFS, btrfs. `None` if there is none.
/// Reads at most [`PROBE_BYTES`].
pub fn probe(device: &Path) -> Result<Option<&'static str>, DiskError> {
    use std::io::Read;
    let mut head = Vec::with_capacity(PROBE_BYTES);
    std::fs::File::open(device)
        .and_then(|f| f.take(PROBE_BYTES as u64).read_to_end(&mut head))
        .map_err(|e| DiskError::Io(format!("probing {}: {e}", device.display())))?;
    let at = |offset: usize, magic: &[u8]| head.get(offset..offset + magic.len()) == Some(magic);
    Ok(if at(1024 + 56, &[0x53, 0xef]) {
        Some("ext4")
    } else if at(0, b"XFSB") {
        Some("xfs")
    } else if at(65536 + 64, b"_BHRfS_M") {
        Some("btrfs")
    } else {
        None
    })
}

impl Mkfs {
    /// `program` (`mke2fs`, found in `PATH`, or a path), run with a
    /// [`MKFS_TIMEOUT`] limit.
    pub fn new(program: impl Into<PathBuf>) -> Mkfs {
        Mkfs::with_runner(
            program,
            Box::new(ProcessRunner::new(
                Some(MKFS_TIMEOUT),
                crate::stop::Stop::new(),
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
