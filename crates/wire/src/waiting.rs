//! The mark by which a server knows that a connection's handler waits for
//! its peer (a handshake, the next call, a frame) rather than working: the
//! pool that serves the connection sets the mark's home for the worker
//! thread ([`set_serving`]); the protocol code wraps each wait for its peer
//! in [`waiting_for_peer`]. When the pool is full, the connection that has
//! waited longest for its peer is the one shut to make room.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

/// A connection's waiting mark: 0 while its handler works, else the
/// [`now_mark`] at which the outermost wait for its peer began.
pub type WaitingMark = Arc<AtomicU64>;

/// The instant waiting times are measured from.
fn epoch() -> Instant {
    static EPOCH: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
    *EPOCH.get_or_init(Instant::now)
}

/// Now, on the clock waiting marks are read on (milliseconds, never 0).
pub fn now_mark() -> u64 {
    epoch().elapsed().as_millis() as u64 + 1
}

thread_local! {
    /// The waiting mark of the connection this pool thread serves.
    static SERVING: std::cell::RefCell<Option<WaitingMark>> = const { std::cell::RefCell::new(None) };
}

/// Runs `wait`, in which the calling pool worker waits for the peer of the
/// connection it serves (a handshake, the next call, a frame), marking the
/// connection as waiting for its peer from the start of the outermost such
/// wait to its end: when every worker is busy and the queue is full, the
/// server shuts the connection that has waited longest (see
/// the pool's `preempt_after`). A peer that trickles bytes is still
/// waited for. Outside a pool worker it just runs `wait`.
pub fn waiting_for_peer<R>(wait: impl FnOnce() -> R) -> R {
    let mark = SERVING.with(|s| s.borrow().clone());
    let outermost = mark.as_ref().is_some_and(|m| {
        m.compare_exchange(0, now_mark(), Ordering::Relaxed, Ordering::Relaxed)
            .is_ok()
    });
    let r = wait();
    if outermost && let Some(m) = &mark {
        m.store(0, Ordering::Relaxed);
    }
    r
}

/// Sets (or clears, with `None`) the waiting mark of the connection the
/// calling thread now serves; [`waiting_for_peer`] in that thread updates it.
pub fn set_serving(mark: Option<WaitingMark>) {
    SERVING.with(|s| *s.borrow_mut() = mark);
}
