//! Extending a TD's `RTMR3` from user space, the primitive the cluster
//! mark (`confboot_cluster::mark`) is made of, as a vTPM node's is of a PCR
//! extend.
//!
//! How a Linux TD extends an RTMR from user space: since Linux 6.16 the
//! `tdx_guest` driver exposes its measurement registers through the TSM
//! measurement-register library (`drivers/virt/coco/tsm-mr.c`, ABI in
//! `Documentation/ABI/testing/sysfs-devices-virtual-misc-tdx_guest`) as
//! files under `/sys/class/misc/tdx_guest/measurements/` (the same as
//! `/sys/devices/virtual/misc/tdx_guest/measurements/`): `mrtd:sha384`,
//! `rtmr0:sha384` to `rtmr3:sha384`, `mrconfigid`, `mrowner`,
//! `mrownerconfig`. Reading an RTMR file gives its current 48 bytes (read
//! live from a fresh TDREPORT); writing exactly 48 bytes (a SHA-384
//! digest) to it extends the register with them through the TDX module's
//! `TDG.MR.RTMR.EXTEND` call: `RTMR ← SHA-384(RTMR ‖ digest)`; a write of
//! another length is refused by the kernel. This is the upstream interface;
//! earlier proposals (a `TDX_CMD_EXTEND_RTMR` ioctl on `/dev/tdx_guest`,
//! posted in 2023–2024, and RTMR directories under configfs-tsm) were never
//! merged, and a kernel before 6.16 offers no way to extend an RTMR from
//! user space: [`Rtmr3Marker::open`] then refuses, naming the version.
//!
//! The marker reads `RTMR3` before and after its one write and checks the
//! value after is the extend of the value before by its digest: a kernel
//! that did not extend, or a second writer in between, is an error, never a
//! node that believes itself marked.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use super::ccel::{RTMR_LEN, extend};

/// Where Linux 6.16 and later expose a TD's `RTMR3` (read: its value;
/// write 48 bytes: extend it).
pub const RTMR3_SYSFS_PATH: &str = "/sys/class/misc/tdx_guest/measurements/rtmr3:sha384";

/// Why `RTMR3` could not be read or extended.
#[derive(Debug, thiserror::Error)]
pub enum RtmrError {
    /// The register file does not exist: no TDX guest driver, or a kernel
    /// before 6.16.
    #[error(
        "{} is missing: extending RTMR3 needs Linux 6.16 or later in a TDX guest (the \
         tdx_guest driver's measurement registers)",
        path.display()
    )]
    Missing {
        /// The register file.
        path: PathBuf,
    },
    /// Reading the register failed.
    #[error("reading {}: {error}", path.display())]
    Read {
        /// The register file.
        path: PathBuf,
        /// What failed.
        error: std::io::Error,
    },
    /// The register read as another length than an RTMR's 48 bytes
    /// (counted up to 49).
    #[error("{} read as {len} bytes, not an RTMR's 48", path.display())]
    Length {
        /// The register file.
        path: PathBuf,
        /// How many bytes it gave (at most 49 are read).
        len: usize,
    },
    /// Writing the digest failed or was short.
    #[error("extending {}: {error}", path.display())]
    Write {
        /// The register file.
        path: PathBuf,
        /// What failed.
        error: std::io::Error,
    },
    /// The value after the write is not the extend of the value before.
    #[error(
        "RTMR3 is {actual} after the extend, not {expected} (the kernel did not extend it, or \
         something else did too)"
    )]
    NotExtended {
        /// The expected value, hex.
        expected: String,
        /// The value read, hex.
        actual: String,
    },
}

/// Extends a TD's `RTMR3` through its sysfs file ([`RTMR3_SYSFS_PATH`]).
#[derive(Clone, Debug)]
pub struct Rtmr3Marker {
    path: PathBuf,
}

impl Rtmr3Marker {
    /// The marker on the register file at `path`; fails unless it exists.
    pub fn open(path: &Path) -> Result<Rtmr3Marker, RtmrError> {
        if !path.exists() {
            return Err(RtmrError::Missing {
                path: path.to_path_buf(),
            });
        }
        Ok(Rtmr3Marker {
            path: path.to_path_buf(),
        })
    }

    /// The marker on [`RTMR3_SYSFS_PATH`].
    pub fn open_default() -> Result<Rtmr3Marker, RtmrError> {
        Rtmr3Marker::open(Path::new(RTMR3_SYSFS_PATH))
    }

    /// `RTMR3`'s current value (at most 49 bytes read; exactly 48 taken).
    pub fn read(&self) -> Result<[u8; RTMR_LEN], RtmrError> {
        let read_error = |error| RtmrError::Read {
            path: self.path.clone(),
            error,
        };
        let mut bytes = Vec::with_capacity(RTMR_LEN + 1);
        std::fs::File::open(&self.path)
            .map_err(read_error)?
            .take(RTMR_LEN as u64 + 1)
            .read_to_end(&mut bytes)
            .map_err(read_error)?;
        bytes.as_slice().try_into().map_err(|_| RtmrError::Length {
            path: self.path.clone(),
            len: bytes.len(),
        })
    }

    /// Extends `RTMR3` with `digest` in one 48-byte write, and checks the
    /// value after is `SHA-384(before ‖ digest)`; returns it.
    pub fn extend(&self, digest: &[u8; RTMR_LEN]) -> Result<[u8; RTMR_LEN], RtmrError> {
        let before = self.read()?;
        let write_error = |error| RtmrError::Write {
            path: self.path.clone(),
            error,
        };
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .open(&self.path)
            .map_err(write_error)?;
        // One write of the whole digest: the kernel takes an attribute
        // write as one extend and refuses a partial one.
        let written = file.write(digest).map_err(write_error)?;
        if written != RTMR_LEN {
            return Err(write_error(std::io::Error::other(format!(
                "{written} of {RTMR_LEN} bytes written"
            ))));
        }
        drop(file);
        let after = self.read()?;
        let expected = extend(&before, digest);
        if after != expected {
            return Err(RtmrError::NotExtended {
                expected: confboot_util::hex::encode(&expected),
                actual: confboot_util::hex::encode(&after),
            });
        }
        Ok(after)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A digest to extend with: SHA-384 of `id` (the form of the cluster
    /// mark's).
    fn digest_of(id: &[u8]) -> [u8; RTMR_LEN] {
        ring::digest::digest(&ring::digest::SHA384, id)
            .as_ref()
            .try_into()
            .unwrap()
    }

    /// The sysfs file of an RTMR as the kernel serves it, in a temp
    /// directory: a FIFO whose other end answers a read with the value,
    /// takes a write as the digest, and answers the next read with
    /// `after(value, digest)`.
    struct FakeRtmrFile {
        dir: PathBuf,
        server: Option<std::thread::JoinHandle<Vec<u8>>>,
    }

    impl FakeRtmrFile {
        fn new(
            name: &str,
            value: Vec<u8>,
            after: impl FnOnce(&[u8], &[u8]) -> Vec<u8> + Send + 'static,
        ) -> FakeRtmrFile {
            let dir = std::env::temp_dir()
                .join(format!("confboot-fake-rtmr-{name}-{}", std::process::id()));
            let _ = std::fs::remove_dir_all(&dir);
            std::fs::create_dir_all(&dir).unwrap();
            let file = dir.join("rtmr3:sha384");
            nix::unistd::mkfifo(&file, nix::sys::stat::Mode::S_IRWXU).unwrap();
            let server = std::thread::spawn(move || {
                let serve = |bytes: &[u8]| {
                    let mut out = std::fs::OpenOptions::new().write(true).open(&file).unwrap();
                    let _ = out.write_all(bytes);
                };
                serve(&value);
                let mut digest = Vec::new();
                std::fs::File::open(&file)
                    .unwrap()
                    .read_to_end(&mut digest)
                    .unwrap();
                serve(&after(&value, &digest));
                digest
            });
            FakeRtmrFile {
                dir,
                server: Some(server),
            }
        }

        fn path(&self) -> PathBuf {
            self.dir.join("rtmr3:sha384")
        }

        /// What was written to the register.
        fn written(mut self) -> Vec<u8> {
            self.server.take().unwrap().join().unwrap()
        }
    }

    impl Drop for FakeRtmrFile {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }

    /// What the TDX module does on an extend.
    fn extends(value: &[u8], digest: &[u8]) -> Vec<u8> {
        extend(value.try_into().unwrap(), digest.try_into().unwrap()).to_vec()
    }

    #[test]
    fn extending_writes_the_digest_once_and_returns_the_value_after() {
        let fake = FakeRtmrFile::new("honest", vec![0; 48], extends);
        let marker = Rtmr3Marker::open(&fake.path()).unwrap();
        let after = marker.extend(&digest_of(b"cluster-1")).unwrap();
        assert_eq!(fake.written(), digest_of(b"cluster-1").to_vec());
        // What the register then holds is the extend of zero by the digest.
        assert_eq!(extends(&[0; 48], &digest_of(b"cluster-1")), after.to_vec());
    }

    #[test]
    fn a_register_that_did_not_extend_or_reads_another_length_is_an_error() {
        // A plain file's write replaces; a kernel that ignored the write.
        for (name, after) in [
            (
                "replaced",
                (|_: &[u8], digest: &[u8]| digest.to_vec()) as fn(&[u8], &[u8]) -> Vec<u8>,
            ),
            ("ignored", |value: &[u8], _: &[u8]| value.to_vec()),
            ("twice", |value: &[u8], digest: &[u8]| {
                extends(&extends(value, digest), digest)
            }),
        ] {
            let fake = FakeRtmrFile::new(name, vec![0; 48], after);
            let err = Rtmr3Marker::open(&fake.path())
                .unwrap()
                .extend(&digest_of(b"c"))
                .unwrap_err();
            assert!(
                matches!(err, RtmrError::NotExtended { .. }),
                "{name}: {err}"
            );
            drop(fake.written());
        }
        for len in [47, 49, 4096] {
            let fake = FakeRtmrFile::new("length", vec![0; len], |value, _| value.to_vec());
            let err = Rtmr3Marker::open(&fake.path())
                .unwrap()
                .extend(&digest_of(b"c"))
                .unwrap_err();
            assert!(
                matches!(err, RtmrError::Length { len: l, .. } if l == len.min(49)),
                "{err}"
            );
            // Nothing was written: release the double, which waits for a
            // writer and then a reader.
            drop(std::fs::OpenOptions::new().write(true).open(fake.path()));
            drop(std::fs::File::open(fake.path()));
            drop(fake.written());
        }
    }

    #[test]
    fn a_kernel_without_measurement_registers_is_named() {
        let err = Rtmr3Marker::open(Path::new("/nonexistent/tdx_guest/rtmr3:sha384")).unwrap_err();
        assert!(err.to_string().contains("Linux 6.16"), "{err}");
    }
}
