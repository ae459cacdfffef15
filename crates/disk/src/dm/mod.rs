//! device-mapper without libdevmapper: create a mapping, load a table,
//! resume it, remove it, through the device-mapper ioctls on
//! `/dev/mapper/control`, and make its `/dev/mapper/NAME` node (the boot
//! path has no udev; libdevmapper does the same with `DM_DISABLE_UDEV`).
//!
//! - [`wire`]: the request and reply bytes, bounded and checked (safe,
//!   tested on any host; the reply header is fuzzed);
//! - [`ioctl`]: the crate's only `unsafe`, the `ioctl(2)` call itself;
//! - [`crypt`]: the `crypt` target's parameter line, built in a zeroized
//!   buffer (it carries the volume key) and never logged;
//! - [`verity`]: the `verity` target's parameter line and the read-only
//!   mapping of a dm-verity root ([`verity::open_verity`]).
//!
//! Mapping works on a kernel with `dm-mod`, `dm-crypt` and `dm-verity` (the QEMU guests);
//! the build machines have neither, so mapping is proven in the VM tests.

use std::fs::{File, OpenOptions};
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};

use confboot_util::IoFailure;
use nix::errno::Errno;

pub mod crypt;
pub mod ioctl;
pub mod verity;
pub mod wire;

use wire::{
    Command, FLAG_READONLY, FLAG_SECURE_DATA, FLAG_STATUS_TABLE, Reply, Request, TableTarget,
    Target,
};

/// The control device.
pub const CONTROL: &str = "/dev/mapper/control";
/// Where mapping nodes are made.
pub const DEV_DIR: &str = "/dev/mapper";

/// Why a device-mapper operation failed. No variant carries key material.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DmError {
    /// Opening the control device, or making or removing a node, failed.
    #[error("device-mapper: {0}")]
    Io(#[source] IoFailure),
    /// Making a device node failed.
    #[error("device-mapper: mknod {}: {}", node.display(), errno.desc())]
    Mknod {
        /// The node.
        node: PathBuf,
        /// The errno.
        errno: Errno,
    },
    /// The mapping was given, not made through device-mapper, so it is not
    /// removed through it.
    #[error("device-mapper: the mapping was given")]
    MappingGiven,
    /// The kernel refused an ioctl.
    #[error("device-mapper {command} on {name:?}: {}", errno.desc())]
    Ioctl {
        /// The command (`DM_DEV_CREATE`, ...).
        command: &'static str,
        /// The device's name.
        name: String,
        /// The errno.
        errno: Errno,
    },
    /// A device of that name exists already.
    #[error("device-mapper device {0:?} exists already")]
    Busy(String),
    /// No device of that name.
    #[error("no device-mapper device {0:?}")]
    NoDevice(String),
    /// A request this module refuses to encode (a name too long, ...).
    #[error("device-mapper request refused: {0}")]
    Invalid(String),
    /// The kernel's reply is out of bounds or malformed.
    #[error("device-mapper reply: {0}")]
    Reply(String),
}

/// The device-mapper control device, checked to speak interface version 4.
#[derive(Debug)]
pub struct DeviceMapper {
    control: File,
    dev_dir: PathBuf,
    /// The kernel's interface version.
    pub version: [u32; 3],
}

impl DeviceMapper {
    /// Opens [`CONTROL`] and makes nodes in [`DEV_DIR`].
    pub fn open_default() -> Result<DeviceMapper, DmError> {
        DeviceMapper::open(Path::new(CONTROL), Path::new(DEV_DIR))
    }

    /// Opens the control device `control` (and asks its version); nodes
    /// are made in `dev_dir`.
    pub fn open(control: &Path, dev_dir: &Path) -> Result<DeviceMapper, DmError> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .open(control)
            .map_err(|e| {
                DmError::Io(IoFailure::new(format!("opening {}", control.display()), e))
            })?;
        let mut dm = DeviceMapper {
            control: file,
            dev_dir: dev_dir.to_path_buf(),
            version: [0; 3],
        };
        let mut req = Request::new("", "", 0)?;
        dm.version = dm.call(Command::Version, "", &mut req)?.version;
        Ok(dm)
    }

    fn call(&self, command: Command, name: &str, req: &mut Request) -> Result<Reply, DmError> {
        ioctl::dm_ioctl(self.control.as_fd(), command, req).map_err(|errno| match errno {
            Errno::EBUSY if command == Command::DevCreate => DmError::Busy(name.to_string()),
            Errno::ENXIO => DmError::NoDevice(name.to_string()),
            errno => DmError::Ioctl {
                command: command.name(),
                name: name.to_string(),
                errno,
            },
        })?;
        Reply::parse(req.bytes())
    }

    /// The node of the mapping `name`.
    pub fn node(&self, name: &str) -> PathBuf {
        self.dev_dir.join(name)
    }

    /// Creates the mapping `name` (device UUID `uuid`) with one `target`,
    /// makes it live and makes its node; returns the node. On a failure
    /// after the device was created, it is removed again. The table
    /// travels with [`FLAG_SECURE_DATA`] (the kernel wipes its copies) in
    /// a buffer zeroized when dropped.
    pub fn create(&self, name: &str, uuid: &str, target: &Target<'_>) -> Result<PathBuf, DmError> {
        self.create_with_flags(name, uuid, target, 0)
    }

    /// [`create`](Self::create) for a read-only mapping: the device and its
    /// table are made with [`FLAG_READONLY`], so the kernel opens the
    /// backing devices for reading only and the mapped device refuses
    /// writes.
    pub fn create_read_only(
        &self,
        name: &str,
        uuid: &str,
        target: &Target<'_>,
    ) -> Result<PathBuf, DmError> {
        self.create_with_flags(name, uuid, target, FLAG_READONLY)
    }

    fn create_with_flags(
        &self,
        name: &str,
        uuid: &str,
        target: &Target<'_>,
        flags: u32,
    ) -> Result<PathBuf, DmError> {
        check_name(name)?;
        // Encode everything first: a refused request creates nothing.
        let mut load = Request::table_load(name, FLAG_SECURE_DATA | flags, target)?;
        let mut create = Request::new(name, uuid, flags)?;
        self.call(Command::DevCreate, name, &mut create)?;
        let made = self
            .call(Command::TableLoad, name, &mut load)
            .and_then(|_| {
                drop(load);
                let mut resume = Request::new(name, "", 0)?;
                self.call(Command::DevSuspend, name, &mut resume)
            })
            .and_then(|reply| self.make_node(name, reply.dev));
        match made {
            Ok(node) => Ok(node),
            Err(e) => {
                if let Err(undo) = self.remove(name) {
                    log::warn!("removing half-made mapping {name}: {undo}");
                }
                Err(e)
            }
        }
    }

    /// `/dev/mapper/NAME` as a block node for `dev` (replacing a stale
    /// one).
    fn make_node(&self, name: &str, dev: u64) -> Result<PathBuf, DmError> {
        use nix::sys::stat::{Mode, SFlag, mknod};
        if dev == 0 {
            return Err(DmError::Reply(format!("no device number for {name}")));
        }
        std::fs::create_dir_all(&self.dev_dir).map_err(|e| {
            DmError::Io(IoFailure::new(
                format!("creating {}", self.dev_dir.display()),
                e,
            ))
        })?;
        let node = self.node(name);
        match std::fs::remove_file(&node) {
            Ok(()) => log::warn!("replaced a stale {}", node.display()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => {
                return Err(DmError::Io(IoFailure::new(
                    format!("removing {}", node.display()),
                    e,
                )));
            }
        }
        mknod(
            &node,
            SFlag::S_IFBLK,
            Mode::from_bits_truncate(0o600),
            dev as nix::libc::dev_t,
        )
        .map_err(|errno| DmError::Mknod {
            node: node.clone(),
            errno,
        })?;
        Ok(node)
    }

    /// Removes the mapping `name` and its node ([`DmError::NoDevice`] if
    /// there is no such mapping; [`DmError::Ioctl`] with `EBUSY` while it
    /// is open, e.g. mounted).
    pub fn remove(&self, name: &str) -> Result<(), DmError> {
        check_name(name)?;
        let mut req = Request::new(name, "", 0)?;
        self.call(Command::DevRemove, name, &mut req)?;
        let node = self.node(name);
        match std::fs::remove_file(&node) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(DmError::Io(IoFailure::new(
                format!("removing {}", node.display()),
                e,
            ))),
            _ => Ok(()),
        }
    }

    /// The state of the mapping `name`; `None` if there is none.
    pub fn status(&self, name: &str) -> Result<Option<Reply>, DmError> {
        check_name(name)?;
        let mut req = Request::new(name, "", 0)?;
        match self.call(Command::DevStatus, name, &mut req) {
            Ok(reply) => Ok(Some(reply)),
            Err(DmError::NoDevice(_)) => Ok(None),
            Err(e) => Err(e),
        }
    }
}

impl DeviceMapper {
    /// The live table of the mapping `name`, one [`TableTarget`] per
    /// target ([`wire::table_targets`]). A crypt line may carry the key in
    /// hex: the request travels with [`FLAG_SECURE_DATA`] (the kernel
    /// wipes its copies), its buffer and the lines are zeroized when
    /// dropped.
    pub fn table(&self, name: &str) -> Result<Vec<TableTarget>, DmError> {
        check_name(name)?;
        let mut req = Request::new(name, "", FLAG_STATUS_TABLE | FLAG_SECURE_DATA)?;
        self.call(Command::TableStatus, name, &mut req)?;
        wire::table_targets(req.bytes())
    }
}

/// A mapping name: 1 to 127 bytes of letters, digits, `_`, `-`, `.`, not
/// `.` or `..` (it becomes a file name in [`DEV_DIR`]).
pub fn check_name(name: &str) -> Result<(), DmError> {
    let ok = !name.is_empty()
        && name.len() < wire::NAME_LEN
        && name != "."
        && name != ".."
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"_-.".contains(&b));
    if ok {
        Ok(())
    } else {
        Err(DmError::Invalid(format!("mapping name {name:?}")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_checked() {
        for bad in ["", ".", "..", "a/b", "x y", "\u{e9}", &"n".repeat(128)] {
            assert!(check_name(bad).is_err(), "{bad:?}");
        }
        for good in ["state", "confboot-probe", "a.b_c", &"n".repeat(127)] {
            assert!(check_name(good).is_ok(), "{good:?}");
        }
    }

    #[test]
    fn no_control_device_is_an_io_error() {
        let e =
            DeviceMapper::open(Path::new("/nonexistent/control"), Path::new("/tmp")).unwrap_err();
        assert!(
            matches!(&e, DmError::Io(f) if f.op() == "opening /nonexistent/control"
                && f.kind() == std::io::ErrorKind::NotFound),
            "{e}"
        );
    }
}
