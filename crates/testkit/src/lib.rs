//! The small helpers every confboot test shares, with no confboot type in
//! them: temporary directories ([`TempDir`]), free ports ([`free_port`]),
//! polling ([`wait_for_count`]), a deterministic generator for property
//! tests ([`XorShift`]), child processes that are always ended
//! ([`ChildProcess`]), the programs a test needs ([`installed_program`]),
//! the bounds of the deadline tests ([`deadlines`]), and behind features a
//! TLS client that checks no server (`tls`) and the test AMD and Intel
//! chains as bytes and keys (`snp`, `tdx`).
//!
//! It depends on no confboot crate but `confboot-util`, so that a library
//! crate's tests (unit and integration) build only that crate, its
//! dependencies and this kit: a unit test never sees a second copy of its
//! own crate. What needs confboot types (report sources, issuers, the
//! project's processes, VMs) stays in `confboot-tests`, the end-to-end
//! suite.
//!
//! A test that needs something a fresh checkout lacks (a tool
//! `scripts/setup.sh` installs) ends the whole test process with one line
//! naming what to run first ([`stop_for_missing_setup`]), instead of every
//! test panicking alike.

pub mod deadlines;
pub mod ovmf;
#[cfg(feature = "snp")]
pub mod snp;
#[cfg(feature = "tdx")]
pub mod tdx;
#[cfg(feature = "tls")]
pub mod tls;
pub mod usage;

use std::io::{BufRead, BufReader, Write as _};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

/// Ends this test process at once with `line` alone on stderr and exit
/// status 1: for what a fresh checkout lacks and no test can do without
/// (the static release binaries, a program `scripts/setup.sh` installs).
///
/// A panic would fail every test of the binary that needs the missing
/// thing, each with the same message and a backtrace note. The exit fails
/// the test binary once instead, and plain `cargo test --workspace` stops
/// there ("process didn't exit successfully"), this line just above
/// cargo's. The line is written to the process's stderr itself, past the
/// test harness's capture, and once: a second test that gets here
/// meanwhile waits for the exit. The processes this one started (another
/// test's bootstrapper, say, whose owner's `Drop` will not run now) are
/// killed first, with the process groups they lead.
pub fn stop_for_missing_setup(line: &str) -> ! {
    static STOPPING: Mutex<()> = Mutex::new(());
    let _only_one = STOPPING.lock();
    let _ = writeln!(std::io::stderr(), "{line}");
    kill_children();
    std::process::exit(1)
}

/// Kills (SIGKILL) every child of this process, and the process group of
/// each child that leads its own; found in `/proc`.
fn kill_children() {
    use nix::sys::signal::{Signal, kill, killpg};
    use nix::unistd::Pid;
    let me = std::process::id() as i32;
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return;
    };
    for pid in entries
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
    {
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        // After the command name in parentheses: state, ppid, pgrp.
        let Some((_, rest)) = stat.rsplit_once(") ") else {
            continue;
        };
        let fields: Vec<i32> = rest
            .split_whitespace()
            .skip(1)
            .take(2)
            .filter_map(|f| f.parse().ok())
            .collect();
        let [ppid, pgrp] = fields[..] else {
            continue;
        };
        if ppid != me {
            continue;
        }
        if pgrp == pid {
            let _ = killpg(Pid::from_raw(pid), Signal::SIGKILL);
        }
        let _ = kill(Pid::from_raw(pid), Signal::SIGKILL);
    }
}

/// What to run when a Debian package the tests need is missing.
pub const INSTALL_PACKAGES: &str =
    "run `bash scripts/setup.sh` first (it installs every package the tests need)";

/// Where `program` is installed: on `PATH`, or in `/usr/sbin` or `/sbin`,
/// where the Debian package `package` (one `scripts/setup.sh` installs)
/// puts it. When it is not, the test process stops
/// ([`stop_for_missing_setup`]) naming the package and the script.
pub fn installed_program(program: &str, package: &str) -> PathBuf {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(["/usr/sbin".into(), "/sbin".into()])
        .map(|dir| dir.join(program))
        .find(|p| p.is_file())
        .unwrap_or_else(|| {
            stop_for_missing_setup(&format!(
                "{program} is missing (Debian package {package}): {INSTALL_PACKAGES}"
            ))
        })
}

/// [`installed_program`] for a program that is run by name (through
/// `PATH`) or by another program.
pub fn require_program(program: &str, package: &str) {
    installed_program(program, package);
}

/// A child process that is killed and reaped when dropped, with its stderr
/// collected line by line.
pub struct ChildProcess {
    name: String,
    child: Mutex<Option<Child>>,
    lines: Arc<Mutex<Vec<String>>>,
    reader: Option<JoinHandle<()>>,
}

impl ChildProcess {
    /// Starts `command` with stderr captured (stdout inherited).
    pub fn spawn(name: &str, mut command: Command) -> ChildProcess {
        command.stderr(Stdio::piped()).stdin(Stdio::null());
        let mut child = command
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {name}: {e}"));
        let stderr = child.stderr.take().expect("stderr is piped");
        let lines = Arc::new(Mutex::new(Vec::new()));
        let reader = {
            let lines = Arc::clone(&lines);
            std::thread::spawn(move || {
                for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                    lines.lock().unwrap().push(line);
                }
            })
        };
        ChildProcess {
            name: name.to_string(),
            child: Mutex::new(Some(child)),
            lines,
            reader: Some(reader),
        }
    }

    /// The process id.
    pub fn id(&self) -> u32 {
        self.child.lock().unwrap().as_ref().expect("running").id()
    }

    /// Every stderr line so far.
    pub fn log(&self) -> Vec<String> {
        self.lines.lock().unwrap().clone()
    }

    /// Waits (polling, at most `tries` × 10 ms) for a stderr line containing
    /// `needle`; returns it, or panics with the log so far.
    pub fn wait_for_line(&self, needle: &str, tries: u32) -> String {
        for _ in 0..tries {
            if let Some(l) = self.log().into_iter().find(|l| l.contains(needle)) {
                return l;
            }
            if let Some(status) = self.exited() {
                panic!(
                    "{} exited ({status}) before logging {needle:?}:\n{}",
                    self.name,
                    self.log().join("\n")
                );
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        panic!(
            "{} never logged {needle:?}:\n{}",
            self.name,
            self.log().join("\n")
        );
    }

    /// The process's exit status once it has exited (`None`: it runs).
    pub fn exited(&self) -> Option<std::process::ExitStatus> {
        self.child
            .lock()
            .unwrap()
            .as_mut()
            .and_then(|c| c.try_wait().ok().flatten())
    }

    /// Sends a signal to the process.
    pub fn signal(&self, sig: nix::sys::signal::Signal) {
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(self.id() as i32), sig)
            .unwrap_or_else(|e| panic!("cannot signal {}: {e}", self.name));
    }

    /// Kills the process (SIGKILL) if it still runs and reaps it; its log
    /// stays readable. Does nothing if it was already reaped.
    pub fn kill(&self) {
        if let Some(mut c) = self.child.lock().unwrap().take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Waits for the process to end and returns its status and full log.
    pub fn wait(mut self) -> (std::process::ExitStatus, Vec<String>) {
        let child = self.child.lock().unwrap().take();
        let status = child.expect("running").wait().expect("wait");
        if let Some(r) = self.reader.take() {
            let _ = r.join();
        }
        (status, self.log())
    }
}

impl Drop for ChildProcess {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.lock().unwrap().take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// The address after `marker` in a log line, e.g. `"listening on "` →
/// `127.0.0.1:4242`.
pub fn addr_after(line: &str, marker: &str) -> std::net::SocketAddr {
    let rest = &line[line
        .find(marker)
        .unwrap_or_else(|| panic!("{marker:?} not in {line:?}"))
        + marker.len()..];
    let word = rest.split_whitespace().next().expect("an address follows");
    word.trim_start_matches("http://")
        .parse()
        .unwrap_or_else(|e| panic!("{word:?}: {e}"))
}

/// A directory removed when dropped.
pub struct TempDir(PathBuf);

impl TempDir {
    /// A fresh directory under the system's temp dir.
    pub fn new(label: &str) -> TempDir {
        static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("confboot-{label}-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("create temp dir");
        TempDir(dir)
    }

    /// Its path.
    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Writes an executable script (mode 0755) at `path` holding `contents`.
///
/// The file is written by a child `sh`, never opened for writing in this
/// process: a test binary runs its tests on threads, and a file this
/// process held open for writing would be inherited by another thread's
/// child between its fork and its exec, so executing the script could fail
/// with `ETXTBSY` ("Text file busy").
pub fn write_executable(path: &Path, contents: impl AsRef<[u8]>) {
    let mut child = Command::new("sh")
        .args(["-c", "cat > \"$0\" && chmod 755 \"$0\""])
        .arg(path)
        .stdin(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("start sh to write {}: {e}", path.display()));
    child
        .stdin
        .take()
        .expect("piped stdin")
        .write_all(contents.as_ref())
        .unwrap_or_else(|e| panic!("write {}: {e}", path.display()));
    let status = child.wait().expect("wait for sh");
    assert!(
        status.success(),
        "writing {} failed: {status}",
        path.display()
    );
}

/// Writes `measurements.json` into `dir`: a measurement policy (the
/// Constellation format) that pins an image, enforcing PCR 4 (the boot
/// chain) = `ab` × 32 and PCR 9 (the initrd and command line) = `cd` × 32
/// and nothing else, for tests of the policy's loading; returns its path.
pub fn write_image_policy(dir: &Path) -> PathBuf {
    let file = dir.join("measurements.json");
    let policy = format!(
        r#"{{"4": {{"expected": "{}", "warnOnly": false}}, "9": {{"expected": "{}", "warnOnly": false}}}}"#,
        "ab".repeat(32),
        "cd".repeat(32)
    );
    std::fs::write(&file, policy).unwrap_or_else(|e| panic!("write {}: {e}", file.display()));
    file
}

/// A loopback TCP port that was free a moment ago (nothing listens on it).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// The LUKS UUID of the disk image at `disk`, if it has a LUKS header
/// (host cryptsetup).
pub fn luks_uuid(disk: &Path) -> Option<String> {
    require_program("cryptsetup", "cryptsetup-bin");
    let out = Command::new("cryptsetup")
        .arg("luksUUID")
        .arg(disk)
        .output()
        .expect("host cryptsetup (Debian cryptsetup-bin)");
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// Whether `key` opens the LUKS2 header of the disk image at `disk` (host
/// cryptsetup, key on stdin).
pub fn key_opens_disk(disk: &Path, key: &[u8]) -> bool {
    require_program("cryptsetup", "cryptsetup-bin");
    let mut child = Command::new("cryptsetup")
        .args(["open", "--test-passphrase", "--key-file", "-"])
        .arg(disk)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(key).unwrap();
    child.wait().unwrap().success()
}

/// xorshift64* (Vigna): a deterministic pseudo-random generator for
/// property tests and garbage inputs, without crates. A fixed seed gives
/// every run the same inputs, so a failing one can be replayed.
#[derive(Clone, Debug)]
pub struct XorShift(u64);

impl XorShift {
    /// A generator starting from `seed`, which must not be zero (zero is
    /// xorshift's fixed point).
    pub fn new(seed: u64) -> XorShift {
        assert_ne!(seed, 0, "xorshift's seed must not be zero");
        XorShift(seed)
    }

    /// The next 64 bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// A number in `0..n` (`n` > 0).
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n as u64) as usize
    }

    /// `len` pseudo-random bytes.
    pub fn bytes(&mut self, len: usize) -> Vec<u8> {
        (0..len).map(|_| self.next_u64() as u8).collect()
    }

    /// A non-zero byte to XOR with, so that a mutation always changes
    /// something.
    pub fn flip(&mut self) -> u8 {
        (self.below(255) + 1) as u8
    }
}

/// Waits until `counter` (a server's statistic, say) reaches `want`:
/// polled every millisecond at most 10,000 times, so the bound is a count,
/// not a clock assertion. Panics if it never does.
pub fn wait_for_count(counter: &AtomicU64, want: u64) {
    for _ in 0..10_000 {
        if counter.load(Ordering::SeqCst) >= want {
            return;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    panic!("counter never reached {want}");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn xorshift_is_the_same_sequence_for_the_same_seed() {
        let (mut a, mut b) = (XorShift::new(0x5eed), XorShift::new(0x5eed));
        let first = a.bytes(64);
        assert_eq!(first, b.bytes(64));
        assert_ne!(first, a.bytes(64), "it moves on");
        for _ in 0..1000 {
            assert!(a.below(7) < 7);
            assert_ne!(a.flip(), 0);
        }
    }
}
