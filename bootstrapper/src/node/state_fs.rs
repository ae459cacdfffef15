//! The state disk's file system as the bootstrapper uses it: mounted for a
//! moment (to keep or read the node's SSH users) and unmounted again, so
//! the file system is not mounted when the bootstrapper exits (the
//! initramfs mounts it itself afterwards).
//!
//! [`StateFsMount`] is the seam: [`NixStateMount`] mounts the decrypted
//! device with mount(2); the node core's tests use a plain directory.

use std::path::{Path, PathBuf};

/// Why the state file system could not be mounted or unmounted.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{action}: {reason}")]
pub struct StateFsError {
    /// What was tried (`mount /dev/mapper/state on /state`).
    pub action: String,
    /// What the system said.
    pub reason: String,
}

/// Mounts the decrypted state disk somewhere and unmounts it again.
pub trait StateFsMount: Send + Sync {
    /// Mounts the ext4 on `device`; returns the directory it is mounted on.
    fn mount(&self, device: &Path) -> Result<PathBuf, StateFsError>;
    /// Unmounts what [`mount`](Self::mount) mounted on `dir`.
    fn unmount(&self, dir: &Path) -> Result<(), StateFsError>;
}

/// mount(2) of the decrypted device's ext4 on a directory (created if
/// missing), `nosuid,nodev,noexec`; umount(2) afterwards.
#[derive(Clone, Debug)]
pub struct NixStateMount {
    dir: PathBuf,
}

impl NixStateMount {
    /// Mounts on `dir`.
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        NixStateMount { dir: dir.into() }
    }
}

impl StateFsMount for NixStateMount {
    fn mount(&self, device: &Path) -> Result<PathBuf, StateFsError> {
        use nix::mount::{MsFlags, mount};
        let failed = |reason: String| StateFsError {
            action: format!("mount {} on {}", device.display(), self.dir.display()),
            reason,
        };
        std::fs::create_dir_all(&self.dir).map_err(|e| failed(e.to_string()))?;
        mount(
            Some(device),
            &self.dir,
            Some("ext4"),
            MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC,
            None::<&str>,
        )
        .map_err(|e| failed(e.desc().to_string()))?;
        Ok(self.dir.clone())
    }

    fn unmount(&self, dir: &Path) -> Result<(), StateFsError> {
        nix::mount::umount(dir).map_err(|e| StateFsError {
            action: format!("umount {}", dir.display()),
            reason: e.desc().to_string(),
        })
    }
}

/// Runs `f` on the mounted file system of `device`, then unmounts it,
/// whatever `f` returned.
pub fn with_mounted<T>(
    mounter: &dyn StateFsMount,
    device: &Path,
    f: impl FnOnce(&Path) -> T,
) -> Result<T, StateFsError> {
    let dir = mounter.mount(device)?;
    let out = f(&dir);
    mounter.unmount(&dir)?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_error_prints_what_was_tried_and_what_the_system_said() {
        let error = StateFsError {
            action: "umount /state".into(),
            reason: "Device or resource busy".into(),
        };
        assert_eq!(error.to_string(), "umount /state: Device or resource busy");
    }
}
