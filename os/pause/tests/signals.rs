//! The pause binary as kubelet's runtime sees it: it keeps running until
//! SIGTERM (or SIGINT) and then exits with status 0, not killed by the signal.

use std::process::{Child, Command};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

/// Starts pause and waits until it takes SIGTERM itself: either it has
/// blocked it (its `SigBlk` mask in /proc) or it is in `sigtimedwait`, which
/// unblocks the waited signals while it sleeps. The signal sent next is then
/// the one it waits for, not the default action that would kill it.
fn start() -> Child {
    let child = Command::new(env!("CARGO_BIN_EXE_pause"))
        .spawn()
        .expect("start pause");
    wait_until_it_takes_sigterm(child.id());
    child
}

fn wait_until_it_takes_sigterm(pid: u32) {
    let proc_dir = format!("/proc/{pid}");
    loop {
        let status = std::fs::read_to_string(format!("{proc_dir}/status")).expect("read status");
        let blocked = status
            .lines()
            .find_map(|l| l.strip_prefix("SigBlk:"))
            .map(|m| u64::from_str_radix(m.trim(), 16).expect("hex mask"))
            .expect("SigBlk line");
        let wchan = std::fs::read_to_string(format!("{proc_dir}/wchan")).unwrap_or_default();
        // SIGTERM is signal 15: bit 14.
        if blocked & (1 << 14) != 0 || wchan.contains("sigtimedwait") {
            return;
        }
        std::thread::yield_now();
    }
}

fn stops_cleanly_on(signal: Signal) {
    let mut child = start();
    let pid = Pid::from_raw(i32::try_from(child.id()).expect("pid"));
    // SIGCHLD (a child died) is taken and reaped, not an exit.
    kill(pid, Signal::SIGCHLD).expect("send SIGCHLD");
    kill(pid, signal).expect("send signal");
    let status = child.wait().expect("wait for pause");
    assert_eq!(
        status.code(),
        Some(0),
        "pause must exit 0 on {signal}, got {status}"
    );
}

#[test]
fn sigterm_ends_pause_with_status_zero() {
    stops_cleanly_on(Signal::SIGTERM);
}

#[test]
fn sigint_ends_pause_with_status_zero() {
    stops_cleanly_on(Signal::SIGINT);
}

#[test]
fn dash_v_prints_the_version() {
    let out = Command::new(env!("CARGO_BIN_EXE_pause"))
        .arg("-v")
        .output()
        .expect("run pause -v");
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).starts_with("pause (confboot) "));
}
