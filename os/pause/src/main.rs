//! The pause program: the first process of every pod sandbox on a node.
//!
//! It does what Kubernetes' own `pause` does (`build/pause/linux/pause.c`),
//! from a binary built here so that no image is pulled from a registry
//! (`os/build.sh --production` packs it as `registry.k8s.io/pause:<ver>`):
//! it holds the pod's namespaces by sleeping until SIGINT or SIGTERM, then
//! exits 0, and it reaps every child that dies (in a pod that shares its
//! PID namespace the orphans are re-parented to it). As PID 1 of a PID
//! namespace a signal without a handler is ignored, so the signals are
//! blocked and taken with `sigwait` rather than left at their defaults.
//!
//! `pause -v` prints the version and exits, as the original does.

use nix::sys::signal::{SigSet, Signal};
use nix::sys::wait::{WaitPidFlag, WaitStatus, waitpid};
use nix::unistd::{Pid, getpid};

/// What one received signal asks of the program.
#[derive(Debug, PartialEq, Eq)]
enum Step {
    /// Keep sleeping (after reaping, for SIGCHLD).
    Continue,
    /// Leave with status 0.
    Exit,
}

/// Decides what a signal means: SIGINT and SIGTERM end the sandbox,
/// SIGCHLD asks for a reap, anything else (not in the waited set) is ignored.
fn step(signal: Signal) -> Step {
    match signal {
        Signal::SIGINT | Signal::SIGTERM => Step::Exit,
        _ => Step::Continue,
    }
}

/// Reaps every child that has exited, without blocking; returns how many.
fn reap() -> usize {
    let mut reaped = 0;
    loop {
        match waitpid(Pid::from_raw(-1), Some(WaitPidFlag::WNOHANG)) {
            Ok(WaitStatus::StillAlive) | Err(_) => return reaped,
            Ok(_) => reaped += 1,
        }
    }
}

fn main() {
    if std::env::args().nth(1).as_deref() == Some("-v") {
        println!("pause (confboot) {}", env!("CARGO_PKG_VERSION"));
        return;
    }
    if getpid().as_raw() != 1 {
        eprintln!("Warning: pause should be the first process");
    }
    let mut set = SigSet::empty();
    for signal in [Signal::SIGINT, Signal::SIGTERM, Signal::SIGCHLD] {
        set.add(signal);
    }
    if let Err(e) = set.thread_block() {
        eprintln!("pause: cannot block signals: {e}");
        std::process::exit(1);
    }
    loop {
        match set.wait() {
            Ok(Signal::SIGCHLD) => {
                reap();
            }
            Ok(signal) => {
                if step(signal) == Step::Exit {
                    eprintln!("Shutting down, got signal: {signal}");
                    std::process::exit(0);
                }
            }
            Err(e) => {
                eprintln!("pause: sigwait failed: {e}");
                std::process::exit(2);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn interrupt_and_terminate_end_the_sandbox_and_a_child_does_not() {
        assert_eq!(step(Signal::SIGTERM), Step::Exit);
        assert_eq!(step(Signal::SIGINT), Step::Exit);
        assert_eq!(step(Signal::SIGCHLD), Step::Continue);
    }
}
