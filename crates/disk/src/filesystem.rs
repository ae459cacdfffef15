//! The file system on the opened state disk: made only in the boot that
//! formatted the disk, recorded in the LUKS header, and otherwise probed and
//! kept ([`super::StateDisk::ensure_filesystem`] decides; a freshly mapped
//! disk reads as noise, not zeros, and a header is not authenticated, so
//! neither tells alone).

use std::path::{Path, PathBuf};
use std::time::Duration;

use super::DiskError;
use confboot_sys::process::{CommandRunner, ProcessRunner, Stream};
use confboot_util::IoFailure;

/// The file system made: ext4.
pub const FS_TYPE: &str = "ext4";

/// The label the state disk's file system carries.
pub const LABEL: &str = "confboot-state";

/// How long `mke2fs` may take (with lazy inode-table and journal
/// initialization it writes only metadata: seconds even on large disks).
pub const MKFS_TIMEOUT: Duration = Duration::from_secs(10 * 60);

/// Makes the state file system on an opened, mapped disk. The bootstrapper
/// uses [`NativeExt4`] unless told to run a program ([`Mkfs`]).
pub trait FilesystemMaker: Send + Sync {
    /// Makes an ext4 file system labelled [`LABEL`] on `device`, over
    /// whatever is there (the caller knows the device holds no data).
    fn make(&self, device: &Path) -> Result<(), DiskError>;
}

/// Makes ext4 file systems in this program ([`super::ext4`]): no
/// e2fsprogs, no C, only metadata written.
#[derive(Clone, Copy, Debug, Default)]
pub struct NativeExt4;

impl FilesystemMaker for NativeExt4 {
    fn make(&self, device: &Path) -> Result<(), DiskError> {
        let started = std::time::Instant::now();
        let made = super::ext4::format_path(device, LABEL)
            .map_err(|e| DiskError::Filesystem(format!("{}: {e}", device.display())))?;
        log::info!(
            "state file system on {}: ext4 made in {} ms ({} blocks of 4 KiB, {} groups, journal {} blocks)",
            device.display(),
            started.elapsed().as_millis(),
            made.geometry.blocks,
            made.geometry.groups,
            made.journal_blocks
        );
        Ok(())
    }
}

impl FilesystemMaker for Mkfs {
    fn make(&self, device: &Path) -> Result<(), DiskError> {
        Mkfs::make(self, device)
    }
}

/// Makes ext4 file systems with the `mke2fs` program (e2fsprogs): for a
/// bootstrapper running as a service on a full OS (`--mkfs PATH`).
pub struct Mkfs {
    program: PathBuf,
    runner: Box<dyn CommandRunner>,
}

/// What [`super::StateDisk::ensure_filesystem`] did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FilesystemAction {
    /// The disk was formatted in this boot, or in a first boot that was
    /// interrupted before its file system was made; it has an ext4 file
    /// system now.
    Made,
    /// The header records the file system; untouched.
    Kept,
    /// The header records none, but the probe found one (named): untouched,
    /// and now recorded.
    Found(&'static str),
    /// The header records none and the probe found none, on a disk whose
    /// first boot completed or that holds a copy of an ext4 superblock:
    /// nothing is made over it, whatever the header says.
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
        .map_err(|e| DiskError::Io(IoFailure::new(format!("probing {}", device.display()), e)))?;
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

/// Most groups whose superblock copy [`ext4_superblock_copy`] looks at per
/// block size (powers of 3, 5 and 7 grow fast: a 1 TiB disk has ~30).
const MAX_COPY_GROUPS: usize = 256;

/// The block groups that hold a superblock copy in an ext4 with
/// `sparse_super` (mke2fs's default): 1 and the powers of 3, 5 and 7,
/// ascending, below `groups`.
fn sparse_super_groups(groups: u64) -> Vec<u64> {
    let mut out = vec![1];
    for base in [3u64, 5, 7] {
        let mut g = base;
        while g < groups && out.len() < MAX_COPY_GROUPS {
            out.push(g);
            g = g.saturating_mul(base);
        }
    }
    out.retain(|&g| g < groups);
    out.sort_unstable();
    out
}

/// Looks for a copy of an ext2/3/4 superblock anywhere on `device` (the
/// opened, decrypted state disk): the primary at byte 1024, then the
/// backups at the start of every `sparse_super` block group, for block
/// sizes 1, 2 and 4 KiB. A copy counts when its magic, its block size and
/// its group number all say it is one. Returns its byte offset. On a disk
/// that never held ext4 (decrypted noise) a false match takes ~2^-50 per
/// place; a file system whose primary superblock was destroyed still has
/// its copies (repairable with `e2fsck -b`). Reads at most a few KiB.
pub fn ext4_superblock_copy(device: &Path) -> Result<Option<u64>, DiskError> {
    use std::io::{Read, Seek, SeekFrom};
    let io = |e: std::io::Error| {
        DiskError::Io(IoFailure::new(format!("probing {}", device.display()), e))
    };
    let mut f = std::fs::File::open(device).map_err(io)?;
    let size = f.seek(SeekFrom::End(0)).map_err(io)?;
    let mut read_at = |offset: u64| -> Result<Option<[u8; 96]>, DiskError> {
        if offset + 96 > size {
            return Ok(None);
        }
        let mut sb = [0u8; 96];
        f.seek(SeekFrom::Start(offset)).map_err(io)?;
        f.read_exact(&mut sb).map_err(io)?;
        Ok(Some(sb))
    };
    let le16 = |b: &[u8], at: usize| u16::from_le_bytes([b[at], b[at + 1]]);
    let le32 = |b: &[u8], at: usize| u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]]);
    if let Some(sb) = read_at(1024)?
        && le16(&sb, 56) == 0xef53
    {
        return Ok(Some(1024));
    }
    for log_block in 0u32..=2 {
        let block = 1024u64 << log_block;
        // A group spans 8 × block-size blocks (one bitmap block); with
        // 1 KiB blocks, block 0 is the boot block and groups start at 1.
        let first_data_block = u64::from(log_block == 0);
        let group_bytes = 8 * block * block;
        for g in sparse_super_groups(size / group_bytes + 1) {
            let offset = (g * 8 * block + first_data_block) * block;
            if let Some(sb) = read_at(offset)?
                && le16(&sb, 56) == 0xef53
                && le32(&sb, 24) == log_block
                && u64::from(le16(&sb, 0x5a)) == g
            {
                return Ok(Some(offset));
            }
        }
    }
    Ok(None)
}

impl Mkfs {
    /// `program` (`mke2fs`, found in `PATH`, or a path), run with a
    /// [`MKFS_TIMEOUT`] limit.
    pub fn new(program: impl Into<PathBuf>) -> Mkfs {
        Mkfs::with_runner(
            program,
            Box::new(ProcessRunner::new(
                Some(MKFS_TIMEOUT),
                confboot_util::stop::Stop::new(),
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
        log::info!(
            "state file system on {}: ext4 made by {}",
            device.display(),
            self.program.display()
        );
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn superblock_copies_are_in_group_1_and_powers_of_3_5_and_7() {
        assert_eq!(sparse_super_groups(50), vec![1, 3, 5, 7, 9, 25, 27, 49]);
        assert_eq!(sparse_super_groups(2), vec![1]);
        assert!(sparse_super_groups(1).is_empty());
        assert!(sparse_super_groups(u64::MAX).len() <= 3 * MAX_COPY_GROUPS);
    }
}
