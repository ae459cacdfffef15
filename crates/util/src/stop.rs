//! The stop signal every loop watches: servers, workers, watchers, the join
//! loop and the programs a process runner waits for. Once raised, they finish
//! what they are doing and end; a wait on the signal ends at once.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

/// A stop signal shared by threads (clones share it): raised once, never lowered.
#[derive(Clone, Debug, Default)]
pub struct Stop(Arc<Inner>);

#[derive(Debug, Default)]
struct Inner {
    raised: AtomicBool,
    /// Held while a sleeper checks the flag and while the raiser notifies,
    /// so no wake-up is lost between the two.
    lock: Mutex<()>,
    woken: Condvar,
}

impl Stop {
    /// A signal not yet raised.
    pub fn new() -> Stop {
        Stop::default()
    }

    /// Raises the signal and wakes every [`Stop::sleep`].
    pub fn raise(&self) {
        self.0.raised.store(true, Ordering::SeqCst);
        let _guard = self.0.lock.lock().unwrap_or_else(|p| p.into_inner());
        self.0.woken.notify_all();
    }

    /// Whether the signal was raised.
    pub fn is_raised(&self) -> bool {
        self.0.raised.load(Ordering::SeqCst)
    }

    /// Sleeps for `duration`, or less if the signal is raised meanwhile.
    /// Returns whether it was raised (`false`: the whole time passed).
    pub fn sleep(&self, duration: Duration) -> bool {
        let until = Instant::now() + duration;
        let mut guard = self.0.lock.lock().unwrap_or_else(|p| p.into_inner());
        while !self.is_raised() {
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return false;
            }
            guard = self
                .0
                .woken
                .wait_timeout(guard, left)
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sleeping_ends_when_stopped() {
        let stop = Stop::new();
        let s2 = stop.clone();
        let t = std::thread::spawn(move || s2.sleep(Duration::from_secs(3600)));
        stop.raise();
        assert!(t.join().unwrap(), "the sleep reports the signal");
        assert!(stop.is_raised());
        assert!(stop.sleep(Duration::from_secs(3600)), "raised stays raised");
    }

    #[test]
    fn sleeping_without_a_signal_takes_the_whole_time() {
        let stop = Stop::new();
        let started = Instant::now();
        assert!(!stop.sleep(Duration::from_millis(30)));
        assert!(started.elapsed() >= Duration::from_millis(30));
        assert!(!stop.is_raised());
    }
}
