//! The queue between the accepting thread and the worker pool: bounded,
//! and a worker with nothing to do parks on a condition variable at once.
//!
//! A channel that spins and yields the processor before it parks (as
//! crossbeam's does) turns every idle wait of a worker into a few
//! `sched_yield` calls, each a context switch when other work is runnable:
//! on a loaded server that is CPU taken from every connection. Here the
//! accepting thread pushes under a mutex and wakes one parked worker; a
//! worker takes under the same mutex or sleeps until woken.

use std::collections::VecDeque;
use std::sync::{Condvar, Mutex, MutexGuard};

/// Why [`HandOff::try_push`] gave an item back.
#[derive(Debug, PartialEq, Eq)]
pub enum HandOffRefusal {
    /// The queue holds its capacity already.
    Full,
    /// The queue was closed: no worker takes anything any more.
    Closed,
}

struct State<T> {
    items: VecDeque<T>,
    closed: bool,
}

/// A bounded queue of connections handed from one thread to a pool.
pub struct HandOff<T> {
    capacity: usize,
    state: Mutex<State<T>>,
    ready: Condvar,
}

impl<T> HandOff<T> {
    /// An empty queue that holds at most `capacity` items (at least one).
    pub fn new(capacity: usize) -> HandOff<T> {
        let capacity = capacity.max(1);
        HandOff {
            capacity,
            state: Mutex::new(State {
                items: VecDeque::with_capacity(capacity),
                closed: false,
            }),
            ready: Condvar::new(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State<T>> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Queues `item` and wakes one waiting worker; gives it back when the
    /// queue is full or closed.
    pub fn try_push(&self, item: T) -> Result<(), (HandOffRefusal, T)> {
        let mut state = self.lock();
        if state.closed {
            return Err((HandOffRefusal::Closed, item));
        }
        if state.items.len() >= self.capacity {
            return Err((HandOffRefusal::Full, item));
        }
        state.items.push_back(item);
        drop(state);
        self.ready.notify_one();
        Ok(())
    }

    /// Takes the oldest item, sleeping until there is one; `None` once the
    /// queue is closed and empty.
    pub fn pop(&self) -> Option<T> {
        let mut state = self.lock();
        loop {
            if let Some(item) = state.items.pop_front() {
                return Some(item);
            }
            if state.closed {
                return None;
            }
            state = self.ready.wait(state).unwrap_or_else(|p| p.into_inner());
        }
    }

    /// Items waiting.
    pub fn len(&self) -> usize {
        self.lock().items.len()
    }

    /// Refuses further items and wakes every worker: they take what is
    /// queued, then [`HandOff::pop`] returns `None`.
    pub fn close(&self) {
        self.lock().closed = true;
        self.ready.notify_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn items_come_out_in_order_and_a_full_queue_gives_the_item_back() {
        let q = HandOff::new(2);
        assert_eq!(q.try_push(1), Ok(()));
        assert_eq!(q.try_push(2), Ok(()));
        assert_eq!(q.try_push(3), Err((HandOffRefusal::Full, 3)));
        assert_eq!(q.len(), 2);
        assert_eq!(q.pop(), Some(1));
        assert_eq!(q.try_push(3), Ok(()));
        assert_eq!(q.pop(), Some(2));
        assert_eq!(q.pop(), Some(3));
        assert_eq!(q.len(), 0);
    }

    #[test]
    fn a_closed_queue_is_drained_then_ends_and_refuses_more() {
        let q = HandOff::new(4);
        q.try_push("a").unwrap();
        q.close();
        assert_eq!(q.try_push("b"), Err((HandOffRefusal::Closed, "b")));
        assert_eq!(q.pop(), Some("a"));
        assert_eq!(q.pop(), None);
    }

    #[test]
    fn parked_workers_are_woken_by_a_push_and_by_close() {
        let q = Arc::new(HandOff::new(8));
        let workers: Vec<_> = (0..3)
            .map(|_| {
                let q = Arc::clone(&q);
                std::thread::spawn(move || {
                    let mut got = Vec::new();
                    while let Some(i) = q.pop() {
                        got.push(i);
                    }
                    got
                })
            })
            .collect();
        for i in 0..100 {
            // Workers drain it meanwhile; retry while it is full.
            let mut item = i;
            while let Err((HandOffRefusal::Full, back)) = q.try_push(item) {
                item = back;
                std::thread::yield_now();
            }
        }
        q.close();
        let mut all: Vec<i32> = workers
            .into_iter()
            .flat_map(|w| w.join().unwrap())
            .collect();
        all.sort_unstable();
        assert_eq!(all, (0..100).collect::<Vec<_>>());
    }
}
