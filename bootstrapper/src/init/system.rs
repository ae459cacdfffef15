//! What only PID 1 does to the system: the early mounts, the console as
//! stdio, kernel modules, reaping and powering off.

use std::fs::{File, OpenOptions};
use std::io::Read;
use std::os::fd::AsRawFd;
use std::path::Path;
use std::process::Child;

use nix::errno::Errno;
use nix::kmod::{ModuleInitFlags, finit_module};
use nix::mount::{MsFlags, mount};
use nix::sys::reboot::{RebootMode, reboot};
use nix::sys::wait::{WaitStatus, waitpid};
use nix::unistd::Pid;

/// The file systems PID 1 mounts, in order: `(source/type, target, data)`.
/// devtmpfs first (the kernel does not mount it: DEVTMPFS_MOUNT is off).
const MOUNTS: &[(&str, &str, Option<&str>)] = &[
    ("devtmpfs", "/dev", None),
    ("proc", "/proc", None),
    ("sysfs", "/sys", None),
    ("tmpfs", "/run", Some("mode=0755")),
    ("tmpfs", "/tmp", None),
];

/// Where the firmware's event log is.
pub const SECURITYFS: &str = "/sys/kernel/security";

/// Mounts one file system of type `fstype` (also its source name) on
/// `target`.
pub fn mount_fs(fstype: &str, target: &str, data: Option<&str>) -> Result<(), Errno> {
    mount(Some(fstype), target, Some(fstype), MsFlags::empty(), data)
}

/// Mounts [`MOUNTS`]; each failure is printed, the rest still tried.
pub fn mount_early() {
    for (fstype, target, data) in MOUNTS {
        if let Err(e) = mount_fs(fstype, target, *data) {
            println!("CONFBOOT-WARN mount {fstype} on {target} failed: {e}");
        }
    }
}

/// Makes `/dev/console` stdin, stdout and stderr.
pub fn console_as_stdio() -> Result<(), std::io::Error> {
    let console = OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/console")?;
    nix::unistd::dup2_stdin(&console)?;
    nix::unistd::dup2_stdout(&console)?;
    nix::unistd::dup2_stderr(&console)?;
    if console.as_raw_fd() <= 2 {
        // It is one of the three now: keep it open.
        std::mem::forget(console);
    }
    Ok(())
}

/// Seconds since boot, as `/proc/uptime` has them.
pub fn uptime() -> String {
    let mut text = String::new();
    let _ = File::open("/proc/uptime").and_then(|f| f.take(128).read_to_string(&mut text));
    text.split_whitespace().next().unwrap_or("?").to_string()
}

/// Why a module did not load.
#[derive(Debug, thiserror::Error)]
pub enum ModuleLoadError {
    /// The module file cannot be opened.
    #[error("cannot open: {0}")]
    Open(std::io::Error),
    /// The kernel refused it.
    #[error("finit_module: {0}")]
    Init(Errno),
}

/// Loads one module file (already loaded counts as loaded).
pub fn load_module(path: &Path) -> Result<(), ModuleLoadError> {
    let file = File::open(path).map_err(ModuleLoadError::Open)?;
    match finit_module(&file, c"", ModuleInitFlags::empty()) {
        Ok(()) | Err(Errno::EEXIST) => Ok(()),
        Err(e) => Err(ModuleLoadError::Init(e)),
    }
}

/// Loads the modules named in `dir/load-order` (one file name a line,
/// dependencies first); each failure is printed and the rest still loaded.
pub fn load_modules(dir: &Path) {
    let order = match std::fs::read_to_string(dir.join("load-order")) {
        Ok(o) => o,
        Err(e) => {
            println!(
                "CONFBOOT-WARN no module load order in {}: {e}",
                dir.display()
            );
            return;
        }
    };
    for name in order.lines().map(str::trim).filter(|n| !n.is_empty()) {
        if name.contains('/') {
            println!("CONFBOOT-WARN insmod {name} failed: not a file name");
            continue;
        }
        if let Err(e) = load_module(&dir.join(name)) {
            println!("CONFBOOT-WARN insmod {name} failed: {e}");
        }
    }
}

/// Waits for `child`, reaping every other process that ends meanwhile (PID
/// 1 inherits orphans). Returns the status as a shell reports it: the exit
/// code, or 128 + the signal.
pub fn wait_reaping(child: Child) -> i32 {
    let pid = Pid::from_raw(child.id() as i32);
    loop {
        match waitpid(Option::<Pid>::None, None) {
            Ok(WaitStatus::Exited(p, code)) if p == pid => return code,
            Ok(WaitStatus::Signaled(p, sig, _)) if p == pid => return 128 + sig as i32,
            Ok(_) | Err(Errno::EINTR) => {}
            Err(e) => {
                println!("CONFBOOT-WARN waitpid: {e}");
                return 255;
            }
        }
    }
}

/// Peak resident sizes in KiB: PID 1's own and the largest among the
/// processes it has reaped and theirs (the bootstrapper, cryptsetup,
/// mke2fs, ...), as `init=<KiB> children=<KiB>`.
pub fn peak_rss_line() -> String {
    use nix::sys::resource::{UsageWho, getrusage};
    let kib = |who| getrusage(who).map_or(-1, |u| u.max_rss());
    format!(
        "init={} children={}",
        kib(UsageWho::RUSAGE_SELF),
        kib(UsageWho::RUSAGE_CHILDREN)
    )
}

/// Reaps the zombies there are now, without waiting.
pub fn reap_zombies() {
    use nix::sys::wait::WaitPidFlag;
    while let Ok(s) = waitpid(Option::<Pid>::None, Some(WaitPidFlag::WNOHANG)) {
        if s == WaitStatus::StillAlive {
            break;
        }
    }
}

/// Syncs and powers off (QEMU with `-no-reboot` exits 0). Never returns:
/// if the kernel refuses, it says so and waits, reaping.
pub fn power_off() -> ! {
    nix::unistd::sync();
    let e = reboot(RebootMode::RB_POWER_OFF).unwrap_err();
    println!("CONFBOOT-ERROR power off failed: {e}");
    loop {
        reap_zombies();
        std::thread::sleep(std::time::Duration::from_secs(1));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nix::sys::wait::WaitPidFlag;
    use std::process::Command;

    #[test]
    fn a_module_error_says_which_step_failed() {
        let missing = std::io::Error::from(std::io::ErrorKind::NotFound);
        let why = missing.to_string();
        assert_eq!(
            ModuleLoadError::Open(missing).to_string(),
            format!("cannot open: {why}")
        );
        assert_eq!(
            ModuleLoadError::Init(Errno::ENOEXEC).to_string(),
            format!("finit_module: {}", Errno::ENOEXEC)
        );
    }

    /// The slow child waits until the quick one is gone, and a zombie is
    /// gone only once reaped: it exits 3 only if waiting for it reaped the
    /// other on the way (4 after about 30 s otherwise).
    #[test]
    #[expect(
        clippy::zombie_processes,
        reason = "the quick child is reaped by wait_reaping: that is the test"
    )]
    fn waiting_for_a_child_reaps_the_others_and_reports_like_a_shell() {
        let quick = Command::new("true").spawn().unwrap();
        let quick_pid = quick.id();
        let slow = Command::new("sh")
            .arg("-c")
            .arg(format!(
                "i=0; while kill -0 {quick_pid} 2>/dev/null; do \
                 i=$((i + 1)); [ $i -lt 3000 ] || exit 4; sleep 0.01; done; exit 3"
            ))
            .spawn()
            .unwrap();
        assert_eq!(wait_reaping(slow), 3);
        assert_eq!(
            waitpid(Pid::from_raw(quick_pid as i32), Some(WaitPidFlag::WNOHANG)),
            Err(Errno::ECHILD),
            "the quick child was reaped"
        );
        let killed = Command::new("sh")
            .arg("-c")
            .arg("kill -9 $$")
            .spawn()
            .unwrap();
        assert_eq!(wait_reaping(killed), 128 + 9);
    }
}
