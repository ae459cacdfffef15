//! A real software TPM for tests: [`Swtpm`] starts `swtpm socket --tpm2` on
//! free loopback ports with its own state directory, waits until it answers
//! a TPM command, and stops it (and removes the state) when dropped, also
//! when a test panics; a supervising shell stops it even when the test
//! process is killed or aborts (the pipe to its stdin closes).
//!
//! ```no_run
//! use confboot_tpm::swtpm::Swtpm;
//! let swtpm = Swtpm::start().expect("swtpm starts (Debian package swtpm)");
//! let mut tpm = swtpm.connect().unwrap();     // a confboot_tpm::Tpm
//! let pcrs = tpm.pcr_read_all().unwrap();
//! assert_eq!(pcrs.len(), 24);
//! // swtpm.tcti() is "swtpm:host=127.0.0.1,port=P" for tss-esapi / tpm2-tools.
//! ```
//!
//! swtpm serves one client connection at a time: close a [`super::Tpm`]
//! before another client (tss-esapi, tpm2-tools) talks to the same swtpm.

use std::net::{Ipv4Addr, SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use super::{Tpm, TpmError};

/// How long [`Swtpm::start`] waits for swtpm to answer before giving up.
pub const START_DEADLINE: Duration = Duration::from_secs(30);
/// How many port pairs [`Swtpm::start`] tries (another process may take a port
/// between the probe and swtpm's bind).
pub const PORT_ATTEMPTS: usize = 8;

static INSTANCE: AtomicU32 = AtomicU32::new(0);

/// Runs swtpm ("$@" are its arguments) under a small shell supervisor that
/// stops it (SIGTERM) as soon as its stdin reaches end-of-file: when
/// [`Swtpm`] is dropped, and also when the test process dies without
/// unwinding (abort, a signal), because the kernel then closes the pipe.
/// The supervisor exits with swtpm's status, so a failed start is seen.
const SUPERVISOR: &str = r#"
exec 3<&0 </dev/null
swtpm "$@" >/dev/null 2>&1 &
tpm=$!
{ read -r _ <&3; kill "$tpm" 2>/dev/null; } &
watcher=$!
wait "$tpm"
status=$?
kill "$watcher" 2>/dev/null
exit "$status"
"#;

/// A running swtpm process with its own state directory and ports.
pub struct Swtpm {
    /// Write end of the supervisor's stdin; closing it stops swtpm.
    lifeline: Option<ChildStdin>,
    child: Child,
    server_port: u16,
    state_dir: PathBuf,
    remove_state: bool,
}

/// A fresh, empty directory under the system temp dir.
fn fresh_state_dir() -> std::io::Result<PathBuf> {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    let dir = std::env::temp_dir().join(format!(
        "confboot-swtpm-{}-{}-{nanos}",
        std::process::id(),
        INSTANCE.fetch_add(1, Ordering::Relaxed)
    ));
    std::fs::create_dir(&dir)?;
    Ok(dir)
}

/// A port P such that P and P+1 are both free on 127.0.0.1 right now, taken
/// below the kernel's ephemeral range. Outgoing connections take their ports
/// from that range, so after many short connections it is full of sockets in
/// TIME_WAIT, which keep a listener from binding the port next to a free one.
fn free_port_pair() -> std::io::Result<u16> {
    let ephemeral_low = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|r| r.split_whitespace().next()?.parse::<u16>().ok())
        .unwrap_or(32768)
        .max(4096);
    let rng = ring::rand::SystemRandom::new();
    for _ in 0..256 {
        let mut r = [0u8; 2];
        ring::rand::SecureRandom::fill(&rng, &mut r)
            .map_err(|_| std::io::Error::other("no randomness"))?;
        // P and P + 1 both in [1024, ephemeral_low).
        let p = 1024 + u16::from_le_bytes(r) % (ephemeral_low - 1025);
        let a = TcpListener::bind((Ipv4Addr::LOCALHOST, p));
        if a.is_ok() && TcpListener::bind((Ipv4Addr::LOCALHOST, p + 1)).is_ok() {
            return Ok(p);
        }
    }
    Err(std::io::Error::other("no free pair of adjacent ports"))
}

impl Swtpm {
    /// Starts swtpm with a fresh state directory (removed on drop).
    pub fn start() -> Result<Swtpm, TpmError> {
        let dir =
            fresh_state_dir().map_err(|e| TpmError::Transport(format!("swtpm state dir: {e}")))?;
        let mut s = Self::start_in(&dir)?;
        s.remove_state = true;
        Ok(s)
    }

    /// Starts swtpm on an existing state directory, which is kept on drop
    /// (to restart a "node" with the same TPM, e.g. after provisioning).
    pub fn start_in(state_dir: &Path) -> Result<Swtpm, TpmError> {
        let mut last_error = String::new();
        for _ in 0..PORT_ATTEMPTS {
            let port =
                free_port_pair().map_err(|e| TpmError::Transport(format!("free port: {e}")))?;
            match Self::spawn(state_dir, port) {
                Ok(s) => return Ok(s),
                Err(e) => last_error = e.to_string(),
            }
        }
        Err(TpmError::Transport(format!(
            "swtpm did not start after {PORT_ATTEMPTS} attempts: {last_error}"
        )))
    }

    fn spawn(state_dir: &Path, port: u16) -> Result<Swtpm, TpmError> {
        let mut child = Command::new("sh")
            .arg("-c")
            .arg(SUPERVISOR)
            .arg("sh")
            .arg("socket")
            .arg("--tpm2")
            .arg("--server")
            .arg(format!("type=tcp,port={port},bindaddr=127.0.0.1"))
            .arg("--ctrl")
            .arg(format!("type=tcp,port={},bindaddr=127.0.0.1", port + 1))
            .arg("--tpmstate")
            .arg(format!("dir={}", state_dir.display()))
            .arg("--flags")
            .arg("not-need-init,startup-clear")
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| TpmError::Transport(format!("cannot run sh for swtpm: {e}")))?;
        // From here on, Drop stops swtpm whatever happens.
        let mut s = Swtpm {
            lifeline: child.stdin.take(),
            child,
            server_port: port,
            state_dir: state_dir.to_path_buf(),
            remove_state: false,
        };
        let deadline = Instant::now() + START_DEADLINE;
        loop {
            if let Ok(Some(status)) = s.child.try_wait() {
                return Err(TpmError::Transport(if status.code() == Some(127) {
                    "swtpm not found (install the Debian package swtpm)".to_string()
                } else {
                    format!("swtpm exited at start ({status}); port {port} taken?")
                }));
            }
            // "Answers" means: a TPM command gets a TPM response.
            if let Ok(mut tpm) = Tpm::connect_tcp(s.addr())
                && tpm.pcr_read(&[0]).is_ok()
            {
                log::debug!("swtpm ready on 127.0.0.1:{port}");
                return Ok(s);
            }
            if Instant::now() > deadline {
                return Err(TpmError::Transport(format!(
                    "swtpm on port {port} did not answer within {START_DEADLINE:?}"
                )));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// The TPM data port's address (raw TPM command frames).
    pub fn addr(&self) -> SocketAddr {
        SocketAddr::from((Ipv4Addr::LOCALHOST, self.server_port))
    }

    /// The control port (swtpm's ctrl channel), data port + 1.
    pub fn ctrl_port(&self) -> u16 {
        self.server_port + 1
    }

    /// The TCTI string for tpm2-tss based tools (tss-esapi, tpm2-tools).
    pub fn tcti(&self) -> String {
        format!("swtpm:host=127.0.0.1,port={}", self.server_port)
    }

    /// Process id of the supervisor (a shell whose child is swtpm).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The state directory.
    pub fn state_dir(&self) -> &Path {
        &self.state_dir
    }

    /// Stops swtpm, as a TPM whose process dies under its clients (their
    /// connections break). With `keep_volatile_state`, swtpm first stores
    /// its volatile state (PCRs, loaded objects; `swtpm_ioctl -v`, what
    /// QEMU's vTPM does across a migration), which [`Swtpm::start_again`]
    /// resumes; without it, that state is lost as in a TPM reset. The
    /// permanent state (seeds, NV, persistent keys) stays in the state
    /// directory either way.
    pub fn stop(&mut self, keep_volatile_state: bool) -> Result<(), TpmError> {
        if keep_volatile_state {
            let status = Command::new("swtpm_ioctl")
                .arg("--tcp")
                .arg(format!("127.0.0.1:{}", self.ctrl_port()))
                .arg("-v")
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .map_err(|e| TpmError::Transport(format!("cannot run swtpm_ioctl: {e}")))?;
            if !status.success() {
                return Err(TpmError::Transport(format!(
                    "swtpm_ioctl -v (store the volatile state) failed: {status}"
                )));
            }
        }
        drop(self.lifeline.take());
        let _ = self.child.wait();
        Ok(())
    }

    /// Starts swtpm again on the same ports and state directory after
    /// [`Swtpm::stop`] (a no-op stop first if it still runs). A volatile
    /// state stored by `stop` is resumed once, then removed, so that a
    /// later start is a reset.
    pub fn start_again(&mut self) -> Result<(), TpmError> {
        if self.lifeline.is_some() {
            self.stop(false)?;
        }
        let mut last_error = String::new();
        // The old process's sockets may hold the port for a moment.
        for _ in 0..PORT_ATTEMPTS {
            match Self::spawn(&self.state_dir, self.server_port) {
                Ok(mut fresh) => {
                    fresh.remove_state = self.remove_state;
                    // The stopped one must not remove the state it shares.
                    self.remove_state = false;
                    *self = fresh;
                    let _ = std::fs::remove_file(self.state_dir.join("tpm2-00.volatilestate"));
                    return Ok(());
                }
                Err(e) => last_error = e.to_string(),
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        Err(TpmError::Transport(format!(
            "swtpm did not start again on port {}: {last_error}",
            self.server_port
        )))
    }

    /// Opens a persistent connection to this swtpm.
    pub fn connect(&self) -> Result<Tpm, TpmError> {
        Tpm::connect_tcp(self.addr())
    }
}

impl Drop for Swtpm {
    fn drop(&mut self) {
        // End-of-file on the supervisor's stdin: it stops swtpm and exits
        // once swtpm has exited.
        drop(self.lifeline.take());
        let _ = self.child.wait();
        if self.remove_state {
            let _ = std::fs::remove_dir_all(&self.state_dir);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn port_pairs_are_free_and_below_the_ephemeral_range() {
        let low: u16 = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
            .unwrap()
            .split_whitespace()
            .next()
            .unwrap()
            .parse()
            .unwrap();
        for _ in 0..20 {
            let p = free_port_pair().unwrap();
            assert!((1024..low.max(4096) - 1).contains(&p), "{p}");
            let _a = TcpListener::bind((Ipv4Addr::LOCALHOST, p)).unwrap();
            let _b = TcpListener::bind((Ipv4Addr::LOCALHOST, p + 1)).unwrap();
        }
    }
}
