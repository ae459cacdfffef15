//! Clean stop on SIGTERM and SIGINT without signal handlers: the signals are
//! blocked in every thread and one thread waits for them with `sigwait`.

use nix::sys::signal::{SigSet, Signal};

/// SIGTERM and SIGINT, blocked so that a thread can wait for them.
pub struct TerminationSignals(SigSet);

impl TerminationSignals {
    /// Blocks SIGTERM and SIGINT in the calling thread and in every thread it
    /// spawns afterwards. Call it first in `main`, before any thread starts.
    pub fn block() -> std::io::Result<TerminationSignals> {
        let mut set = SigSet::empty();
        set.add(Signal::SIGTERM);
        set.add(Signal::SIGINT);
        set.thread_block().map_err(std::io::Error::from)?;
        Ok(TerminationSignals(set))
    }

    /// Waits until SIGTERM or SIGINT arrives and returns its name.
    pub fn wait(&self) -> std::io::Result<&'static str> {
        let sig = self.0.wait().map_err(std::io::Error::from)?;
        Ok(sig.as_str())
    }
}
