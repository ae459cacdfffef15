//! Exponential backoff with jitter, for clients that retry: a node asking
//! join services for a ticket, and the load tests that play many nodes.

use std::time::Duration;

/// Exponential backoff with jitter: each delay is drawn uniformly from the
/// upper half of the current step, and the step doubles up to a cap.
pub struct Backoff {
    step: Duration,
    max: Duration,
}

impl Backoff {
    /// Starts at `initial`, doubling up to `max`.
    pub fn new(initial: Duration, max: Duration) -> Backoff {
        Backoff {
            step: initial.max(Duration::from_millis(1)),
            max: max.max(initial),
        }
    }

    /// The next delay to wait.
    pub fn next_delay(&mut self) -> Duration {
        let mut b = [0u8; 8];
        let r = match ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut b) {
            Ok(()) => u64::from_le_bytes(b),
            Err(_) => 0,
        };
        let half = self.step / 2;
        let jitter_ns = (half.as_nanos() as u64).checked_add(1).map_or(0, |n| r % n);
        let delay = half + Duration::from_nanos(jitter_ns);
        self.step = (self.step * 2).min(self.max);
        delay
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_grows_with_jitter_and_is_capped() {
        let mut b = Backoff::new(Duration::from_millis(100), Duration::from_millis(800));
        let delays: Vec<Duration> = (0..8).map(|_| b.next_delay()).collect();
        let steps = [100, 200, 400, 800, 800, 800, 800, 800];
        for (d, step) in delays.iter().zip(steps) {
            let step = Duration::from_millis(step);
            assert!(
                *d >= step / 2 && *d <= step,
                "{d:?} outside [{:?}, {step:?}]",
                step / 2
            );
        }
        // Jitter: a hundred draws of the capped step are not all the same.
        let draws: std::collections::BTreeSet<Duration> =
            (0..100).map(|_| b.next_delay()).collect();
        assert!(draws.len() > 1);
    }
}
