//! Files that configuration names: option values, `--config` files, policy,
//! certificate and secret files. Each is read whole but never beyond a
//! stated limit, so a wrong path (a log, a device, `/dev/zero`) fails at once
//! with an error that names the file and the limit instead of filling
//! memory. Secret files are written as new files readable only by their owner.

use std::io::{self, Read, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use zeroize::Zeroizing;

/// The limit for a configuration file whose format states none of its own.
pub const MAX_CONFIG_FILE_BYTES: u64 = 1 << 20;

/// Why a file could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum FileError {
    /// The file could not be opened or read.
    #[error("cannot read {}: {error}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// What the system said.
        #[source]
        error: io::Error,
    },
    /// The file holds more than the limit.
    #[error("{} is larger than the limit of {limit} bytes", path.display())]
    TooLarge {
        /// The file.
        path: PathBuf,
        /// The most bytes accepted.
        limit: u64,
    },
    /// The file was read as text but is not UTF-8.
    #[error("{} is not UTF-8 text", path.display())]
    NotText {
        /// The file.
        path: PathBuf,
    },
    /// A new file could not be created or written (an existing one is
    /// never overwritten).
    #[error("cannot write {}: {error}", path.display())]
    Write {
        /// The file.
        path: PathBuf,
        /// What the system said.
        #[source]
        error: io::Error,
    },
}

impl FileError {
    /// The file the error is about.
    pub fn path(&self) -> &Path {
        match self {
            FileError::Read { path, .. }
            | FileError::TooLarge { path, .. }
            | FileError::NotText { path }
            | FileError::Write { path, .. } => path,
        }
    }
}

/// Reads the whole file at `path`, refusing one of more than `limit` bytes
/// (without reading further than one byte past the limit). The bytes are
/// zeroized when dropped, as some configuration files hold secrets.
pub fn read_bounded(path: &Path, limit: u64) -> Result<Zeroizing<Vec<u8>>, FileError> {
    let read_error = |error| FileError::Read {
        path: path.to_path_buf(),
        error,
    };
    let too_large = || FileError::TooLarge {
        path: path.to_path_buf(),
        limit,
    };
    let file = std::fs::File::open(path).map_err(read_error)?;
    // A regular file's size is known: refuse before reading. Devices and
    // pipes report 0 and are caught by the bounded read below.
    let size = file.metadata().map_err(read_error)?.len();
    if size > limit {
        return Err(too_large());
    }
    // Room for the whole file up front, so a secret is not left behind in
    // a buffer that was outgrown and freed.
    let capacity = usize::try_from(size.saturating_add(1)).unwrap_or(usize::MAX);
    let mut bytes = Zeroizing::new(Vec::with_capacity(capacity));
    file.take(limit.saturating_add(1))
        .read_to_end(&mut bytes)
        .map_err(read_error)?;
    if bytes.len() as u64 > limit {
        return Err(too_large());
    }
    Ok(bytes)
}

/// [`read_bounded`] for a text file: the same limit, and the bytes must be UTF-8.
pub fn read_bounded_text(path: &Path, limit: u64) -> Result<Zeroizing<String>, FileError> {
    let mut bytes = read_bounded(path, limit)?;
    match String::from_utf8(std::mem::take(&mut *bytes)) {
        Ok(text) => Ok(Zeroizing::new(text)),
        Err(e) => {
            drop(Zeroizing::new(e.into_bytes()));
            Err(FileError::NotText {
                path: path.to_path_buf(),
            })
        }
    }
}

/// Writes `bytes` to a new file at `path`, readable and writable by its
/// owner only (mode 0600), and syncs it. An existing file is never
/// overwritten: that is an error.
pub fn write_new_private(path: &Path, bytes: &[u8]) -> Result<(), FileError> {
    let write_error = |error| FileError::Write {
        path: path.to_path_buf(),
        error,
    };
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .map_err(write_error)?;
    file.write_all(bytes)
        .and_then(|()| file.sync_all())
        .map_err(write_error)
}

/// Replaces the file at `path` with `bytes`, all or nothing: written to a
/// new temporary file beside it (mode 0600), synced, renamed over `path`,
/// and the directory synced, so a crash leaves the old file or the new
/// one, never a torn one. Durable state (a time floor, retired sets) is
/// written this way.
pub fn replace_private(path: &Path, bytes: &[u8]) -> Result<(), FileError> {
    let write_error = |error| FileError::Write {
        path: path.to_path_buf(),
        error,
    };
    let name = path
        .file_name()
        .ok_or_else(|| write_error(io::Error::from(io::ErrorKind::InvalidInput)))?;
    let dir = path
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let mut tmp_name = std::ffi::OsString::from(".");
    tmp_name.push(name);
    tmp_name.push(".tmp");
    let tmp = dir.join(tmp_name);
    let result = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&tmp)
        .and_then(|mut file| {
            file.write_all(bytes)?;
            file.sync_all()
        })
        .and_then(|()| std::fs::rename(&tmp, path))
        .and_then(|()| std::fs::File::open(dir)?.sync_all());
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result.map_err(write_error)
}

#[cfg(test)]
mod tests {
    use super::*;
    use confboot_testkit::TempDir;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn a_file_within_the_limit_is_read_whole() {
        let dir = TempDir::new("fs-within");
        let f = dir.path().join("f");
        std::fs::write(&f, b"0123456789").unwrap();
        assert_eq!(read_bounded(&f, 10).unwrap().as_slice(), b"0123456789");
        assert_eq!(read_bounded_text(&f, 100).unwrap().as_str(), "0123456789");
        std::fs::write(&f, b"").unwrap();
        assert!(read_bounded(&f, 0).unwrap().is_empty());
    }

    #[test]
    fn an_oversized_file_is_refused_naming_the_file_and_the_limit() {
        let dir = TempDir::new("fs-oversized");
        let f = dir.path().join("too-big.json");
        std::fs::write(&f, vec![b'x'; 11]).unwrap();
        let e = read_bounded(&f, 10).unwrap_err();
        assert!(
            matches!(&e, FileError::TooLarge { path, limit: 10 } if path == &f),
            "{e:?}"
        );
        let shown = e.to_string();
        assert!(
            shown.contains(&f.display().to_string()) && shown.contains("limit of 10 bytes"),
            "{shown}"
        );
        assert!(matches!(
            read_bounded_text(&f, 10),
            Err(FileError::TooLarge { limit: 10, .. })
        ));
    }

    #[test]
    fn an_endless_file_is_cut_off_at_the_limit() {
        // A device reports no size; the read stops one byte past the limit.
        let e = read_bounded(Path::new("/dev/zero"), 4096).unwrap_err();
        assert!(matches!(e, FileError::TooLarge { limit: 4096, .. }), "{e}");
        assert!(e.to_string().contains("/dev/zero"), "{e}");
    }

    #[test]
    fn missing_and_binary_files_name_the_file() {
        let dir = TempDir::new("fs-missing");
        let missing = dir.path().join("nope");
        let e = read_bounded(&missing, 10).unwrap_err();
        assert!(matches!(e, FileError::Read { .. }), "{e:?}");
        assert_eq!(e.path(), missing);
        assert!(e.to_string().starts_with("cannot read "), "{e}");
        let binary = dir.path().join("bin");
        std::fs::write(&binary, [0xff, 0xfe]).unwrap();
        let e = read_bounded_text(&binary, 10).unwrap_err();
        assert!(matches!(e, FileError::NotText { .. }), "{e:?}");
        assert!(e.to_string().contains("bin"), "{e}");
    }

    #[test]
    fn a_replaced_file_holds_the_new_bytes_owner_only_and_no_temporary_is_left() {
        let dir = TempDir::new("fs-replace");
        let f = dir.path().join("state");
        replace_private(&f, b"one").unwrap();
        replace_private(&f, b"two").unwrap();
        assert_eq!(std::fs::read(&f).unwrap(), b"two");
        let mode = std::fs::metadata(&f).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        let names: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, [std::ffi::OsString::from("state")]);
        let e = replace_private(&dir.path().join("no-such-dir/state"), b"x").unwrap_err();
        assert!(matches!(e, FileError::Write { .. }), "{e}");
    }

    #[test]
    fn private_files_are_new_and_owner_only() {
        let dir = TempDir::new("fs-private");
        let f = dir.path().join("secret");
        write_new_private(&f, b"s3cret").unwrap();
        assert_eq!(std::fs::read(&f).unwrap(), b"s3cret");
        let mode = std::fs::metadata(&f).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        let e = write_new_private(&f, b"other").unwrap_err();
        assert!(
            matches!(&e, FileError::Write { error, .. } if error.kind() == io::ErrorKind::AlreadyExists)
        );
        assert_eq!(std::fs::read(&f).unwrap(), b"s3cret", "never overwritten");
    }
}
