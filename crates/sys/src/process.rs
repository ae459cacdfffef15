//! Running external programs (kubeadm, cryptsetup, mke2fs) with their
//! output streamed line by line and kept bounded, in bounded time.

use std::io::{Read, Write};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crossbeam_channel::{RecvTimeoutError, bounded};
use zeroize::Zeroizing;

use confboot_util::IoFailure;
use confboot_util::stop::Stop;

/// Why a program could not be run to its end. (How it ended, when it did,
/// is in [`CommandOutput`].)
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ProcessError {
    /// Starting or waiting for the program failed.
    #[error("{0}")]
    Io(#[source] IoFailure),
    /// The program ran longer than allowed and was killed.
    #[error("{program} did not finish within {after:?}")]
    TimedOut {
        /// The program.
        program: String,
        /// How long it ran.
        after: Duration,
    },
    /// The stop signal was raised; the program was killed.
    #[error("stopped")]
    Stopped,
}

/// Longest output line handed on; the rest of a longer line is cut off.
pub const MAX_LINE_BYTES: usize = 4096;
/// How many of the last lines of each stream a [`CommandOutput`] keeps.
pub const TAIL_LINES: usize = 40;

/// Which of the program's output streams a line came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stream {
    /// Standard output.
    Stdout,
    /// Standard error.
    Stderr,
}

/// How a program ended, with the tails of its output.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CommandOutput {
    /// Exit status; `None` if a signal ended it.
    pub status: Option<i32>,
    /// The last [`TAIL_LINES`] lines of stdout.
    pub stdout_tail: Vec<String>,
    /// The last [`TAIL_LINES`] lines of stderr.
    pub stderr_tail: Vec<String>,
}

impl CommandOutput {
    /// Whether the program exited with status 0.
    pub fn success(&self) -> bool {
        self.status == Some(0)
    }
}

/// Runs programs. The real one is [`ProcessRunner`]; tests record calls.
pub trait CommandRunner: Send + Sync {
    /// Runs `program` with `args`, feeding `stdin` (if any, then EOF), and
    /// calls `on_line` for every output line as it arrives (both streams, in
    /// arrival order, lines cut at [`MAX_LINE_BYTES`]). Secrets belong in
    /// `stdin` or files, never in `args`.
    fn run(
        &self,
        program: &Path,
        args: &[String],
        stdin: Option<&[u8]>,
        on_line: &mut dyn FnMut(Stream, &str),
    ) -> Result<CommandOutput, ProcessError>;
}

/// Runs programs with `std::process::Command` (and `LC_ALL=C`): output read by one thread per
/// stream and handed to the caller's thread over a channel, bounded in line
/// length and in what is kept; killed when the timeout passes or the stop
/// signal is raised.
#[derive(Clone, Debug)]
pub struct ProcessRunner {
    /// How long a program may run; `None` for no limit.
    pub timeout: Option<Duration>,
    /// Raised, it kills the running program.
    pub stop: Stop,
}

/// How often the runner looks at the clock and the stop signal.
const TICK: Duration = Duration::from_millis(50);
/// How long the output of an exited program may keep arriving (a grandchild
/// holding the pipes open must not hang the caller).
const DRAIN_GRACE: Duration = Duration::from_secs(2);

impl Default for ProcessRunner {
    /// A 15-minute limit (kubeadm's own waits are a few minutes) and a fresh stop signal.
    fn default() -> Self {
        ProcessRunner {
            timeout: Some(Duration::from_secs(15 * 60)),
            stop: Stop::new(),
        }
    }
}

impl ProcessRunner {
    /// A runner with `timeout` that also ends programs when `stop` is raised.
    pub fn new(timeout: Option<Duration>, stop: Stop) -> Self {
        ProcessRunner { timeout, stop }
    }
}

fn kill(child: &mut Child) {
    let _ = child.kill();
    let _ = child.wait();
}

fn push_tail(tail: &mut Vec<String>, line: String) {
    if tail.len() == TAIL_LINES {
        tail.remove(0);
    }
    tail.push(line);
}

/// Reads `r` to its end, sending each line (without its newline, cut at
/// [`MAX_LINE_BYTES`]) on `tx`.
fn read_lines(mut r: impl Read, stream: Stream, tx: crossbeam_channel::Sender<(Stream, String)>) {
    let mut buf = [0u8; 8192];
    let mut line: Vec<u8> = Vec::new();
    let mut cut = false;
    let send = |line: &mut Vec<u8>| {
        let text = String::from_utf8_lossy(line)
            .trim_end_matches('\r')
            .to_string();
        line.clear();
        tx.send((stream, text)).is_ok()
    };
    loop {
        let n = match r.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        for &b in &buf[..n] {
            if b == b'\n' {
                if !send(&mut line) {
                    return;
                }
                cut = false;
            } else if line.len() < MAX_LINE_BYTES && !cut {
                line.push(b);
            } else {
                cut = true;
            }
        }
    }
    if !line.is_empty() {
        send(&mut line);
    }
}

impl CommandRunner for ProcessRunner {
    fn run(
        &self,
        program: &Path,
        args: &[String],
        stdin: Option<&[u8]>,
        on_line: &mut dyn FnMut(Stream, &str),
    ) -> Result<CommandOutput, ProcessError> {
        let started = Instant::now();
        let deadline = self.timeout.map(|t| started + t);
        // Kills the child and says why when the runner is stopped or the deadline passed.
        let abort_if_due = |child: &mut Child| -> Result<(), ProcessError> {
            if self.stop.is_raised() {
                kill(child);
                return Err(ProcessError::Stopped);
            }
            if deadline.is_some_and(|d| Instant::now() >= d) {
                kill(child);
                return Err(ProcessError::TimedOut {
                    program: program.display().to_string(),
                    after: started.elapsed(),
                });
            }
            Ok(())
        };
        let mut child = Command::new(program)
            .args(args)
            // Stable, untranslated messages (cryptsetup, mke2fs).
            .env("LC_ALL", "C")
            .stdin(if stdin.is_some() {
                Stdio::piped()
            } else {
                Stdio::null()
            })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| {
                ProcessError::Io(IoFailure::new(format!("starting {}", program.display()), e))
            })?;
        if let (Some(mut pipe), Some(data)) = (child.stdin.take(), stdin) {
            let data = Zeroizing::new(data.to_vec());
            std::thread::spawn(move || {
                // A program that exits without reading: its status tells.
                let _ = pipe.write_all(&data);
            });
        }
        let (tx, rx) = bounded::<(Stream, String)>(256);
        for (pipe, stream) in [
            (
                child
                    .stdout
                    .take()
                    .map(|p| Box::new(p) as Box<dyn Read + Send>),
                Stream::Stdout,
            ),
            (
                child
                    .stderr
                    .take()
                    .map(|p| Box::new(p) as Box<dyn Read + Send>),
                Stream::Stderr,
            ),
        ] {
            if let Some(pipe) = pipe {
                let tx = tx.clone();
                std::thread::spawn(move || read_lines(pipe, stream, tx));
            }
        }
        drop(tx);

        let mut out = CommandOutput::default();
        let mut exited_at: Option<(Instant, std::process::ExitStatus)> = None;
        loop {
            match rx.recv_timeout(TICK) {
                Ok((stream, line)) => {
                    on_line(stream, &line);
                    match stream {
                        Stream::Stdout => push_tail(&mut out.stdout_tail, line),
                        Stream::Stderr => push_tail(&mut out.stderr_tail, line),
                    }
                    continue;
                }
                Err(RecvTimeoutError::Disconnected) => break,
                Err(RecvTimeoutError::Timeout) => {}
            }
            abort_if_due(&mut child)?;
            match exited_at {
                None => {
                    if let Ok(Some(status)) = child.try_wait() {
                        exited_at = Some((Instant::now(), status));
                    }
                }
                Some((at, _)) if at.elapsed() >= DRAIN_GRACE => break,
                Some(_) => {}
            }
        }
        let status = match exited_at {
            Some((_, status)) => status,
            None => loop {
                if let Some(status) = child.try_wait().map_err(|e| {
                    ProcessError::Io(IoFailure::new(
                        format!("waiting for {}", program.display()),
                        e,
                    ))
                })? {
                    break status;
                }
                abort_if_due(&mut child)?;
                std::thread::sleep(TICK / 5);
            },
        };
        out.status = status.code();
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sh(
        script: &str,
        stdin: Option<&[u8]>,
        runner: &ProcessRunner,
    ) -> (Result<CommandOutput, ProcessError>, Vec<(Stream, String)>) {
        let mut lines = Vec::new();
        let got = runner.run(
            Path::new("/bin/sh"),
            &["-c".to_string(), script.to_string()],
            stdin,
            &mut |s, l| lines.push((s, l.to_string())),
        );
        (got, lines)
    }

    #[test]
    fn streams_lines_and_reports_status() {
        let r = ProcessRunner::default();
        let (got, lines) = sh(
            "echo one; echo two >&2; read x; echo \"got $x\"; printf 'no newline'; exit 3",
            Some(b"input\n"),
            &r,
        );
        let out = got.unwrap();
        assert_eq!(out.status, Some(3));
        assert!(!out.success());
        assert_eq!(out.stdout_tail, ["one", "got input", "no newline"]);
        assert_eq!(out.stderr_tail, ["two"]);
        assert_eq!(lines.len(), 4);
        assert!(lines.contains(&(Stream::Stderr, "two".to_string())));
        let stdout: Vec<_> = lines
            .iter()
            .filter(|l| l.0 == Stream::Stdout)
            .map(|l| l.1.as_str())
            .collect();
        assert_eq!(stdout, ["one", "got input", "no newline"], "in order");
    }

    #[test]
    fn output_is_bounded() {
        let r = ProcessRunner::default();
        let (got, lines) = sh(
            "i=0; while [ $i -lt 100 ]; do echo line$i; i=$((i+1)); done; head -c 10000 /dev/zero | tr '\\0' x; echo; echo after",
            None,
            &r,
        );
        let out = got.unwrap();
        assert!(out.success());
        assert_eq!(out.stdout_tail.len(), TAIL_LINES);
        assert_eq!(out.stdout_tail.last().unwrap(), "after");
        assert_eq!(lines.len(), 102, "every line is streamed");
        assert_eq!(lines[100].1.len(), MAX_LINE_BYTES, "long lines are cut");
    }

    #[test]
    fn timeout_and_stop_kill_the_program() {
        let r = ProcessRunner::new(Some(Duration::from_millis(200)), Stop::new());
        let (got, _) = sh("echo started; exec sleep 1000", None, &r);
        assert!(matches!(got, Err(ProcessError::TimedOut { .. })), "{got:?}");

        let stop = Stop::new();
        let r = ProcessRunner::new(None, stop.clone());
        let mut seen = Vec::new();
        let got = r.run(
            Path::new("/bin/sh"),
            &[
                "-c".to_string(),
                "echo started; exec sleep 1000".to_string(),
            ],
            None,
            &mut |_, l| {
                seen.push(l.to_string());
                stop.raise();
            },
        );
        assert_eq!(got, Err(ProcessError::Stopped));
        assert_eq!(seen, ["started"]);
    }

    #[test]
    fn a_missing_program_is_an_io_error() {
        let got = ProcessRunner::default().run(
            Path::new("/nonexistent/kubeadm"),
            &[],
            None,
            &mut |_, _| {},
        );
        assert!(matches!(got, Err(ProcessError::Io(_))), "{got:?}");
    }
}
