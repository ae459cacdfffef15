//! The one place of the crate that calls into the kernel unchecked by the
//! compiler: `ioctl(2)` on `/dev/mapper/control` with a device-mapper
//! request buffer ([`super::wire::Request`]).

use std::os::fd::{AsRawFd, BorrowedFd};

use nix::errno::Errno;

use super::wire::{BUFFER_SIZE, Command, DM_IOCTL_SIZE, DM_IOCTL_TYPE, Request};

/// `_IOWR(DM_IOCTL, cmd, struct dm_ioctl)`: the size in the request code
/// is the header's; the buffer's real size is in its data_size field.
pub fn request_code(command: Command) -> nix::sys::ioctl::ioctl_num_type {
    nix::request_code_readwrite!(DM_IOCTL_TYPE, command as u8, DM_IOCTL_SIZE)
}

/// Runs `command` with `request` on the control device `control`; the
/// kernel writes its reply into `request`'s buffer.
#[allow(unsafe_code)]
pub fn dm_ioctl(
    control: BorrowedFd<'_>,
    command: Command,
    request: &mut Request,
) -> Result<(), Errno> {
    let code = request_code(command);
    let buf = request.bytes_mut();
    // The kernel reads and writes at most data_size bytes from the
    // pointer; Request::new sets data_size to BUFFER_SIZE and the buffer
    // is exactly that long (checked here, so a future change to Request
    // cannot make the kernel write past it).
    assert_eq!(buf.len(), BUFFER_SIZE);
    let ptr = buf.as_mut_ptr();
    // SAFETY: `control` is an open descriptor borrowed for the call; `ptr`
    // points to BUFFER_SIZE writable bytes owned by `request`, which is
    // borrowed mutably for the whole call, and the header's data_size
    // (BUFFER_SIZE) bounds what the kernel touches. The kernel copies the
    // buffer in and out (copy_from_user/copy_to_user): it keeps no pointer
    // to it after the call, and no alignment is required of it.
    let ret = unsafe { nix::libc::ioctl(control.as_raw_fd(), code, ptr) };
    Errno::result(ret).map(drop)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_codes_are_the_kernels() {
        // From linux/dm-ioctl.h on x86_64: DM_VERSION, DM_DEV_CREATE,
        // DM_DEV_SUSPEND, DM_TABLE_LOAD.
        assert_eq!(request_code(Command::Version) as u32, 0xc138_fd00);
        assert_eq!(request_code(Command::DevCreate) as u32, 0xc138_fd03);
        assert_eq!(request_code(Command::DevRemove) as u32, 0xc138_fd04);
        assert_eq!(request_code(Command::DevSuspend) as u32, 0xc138_fd06);
        assert_eq!(request_code(Command::DevStatus) as u32, 0xc138_fd07);
        assert_eq!(request_code(Command::TableLoad) as u32, 0xc138_fd09);
        assert_eq!(request_code(Command::TableStatus) as u32, 0xc138_fd0c);
    }
}
