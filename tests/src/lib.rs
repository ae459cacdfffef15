//! Helpers for confboot's end-to-end tests: running the project's binaries
//! as child processes that are always ended, and reading their
//! logs; and doubles of what cannot run here (the Kubernetes API).

pub mod cluster;
pub mod hostile;
pub mod kube_double;
pub mod qemu;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

/// The workspace's `target/` directory.
pub fn target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../target"))
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

    fn exited(&self) -> Option<std::process::ExitStatus> {
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
