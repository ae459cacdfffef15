//! Admission: the connections a server holds (at the gate, queued or
//! served), each registered with its peer address, its waiting mark and
//! the server's own handle on its socket. A peer address holds at most its
//! share of them ([`PoolConfig::max_per_peer`](crate::PoolConfig::max_per_peer)); the handle lets the server
//! shut the connection that has waited longest for its peer (for the
//! pool's preemption) and, at a stop, every one still open.

use std::collections::HashMap;
use std::net::{IpAddr, Shutdown, TcpStream};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use crate::peer_stream::{WaitingMark, now_micros};

/// One connection a server holds.
struct Open {
    peer: IpAddr,
    /// The server's handle on the socket, to shut it; taken only once the
    /// connection leaves the gate (the gate shuts those it holds itself).
    stream: Option<TcpStream>,
    waiting: Arc<WaitingMark>,
}

/// Why a connection was not admitted.
pub(crate) enum AdmitError {
    /// Its peer address holds its share already.
    PeerFull,
    /// No descriptor for the server's handle on it.
    Clone,
}

/// The connections a server holds, to count them per peer, to preempt one
/// whose handler waits for its peer, and to shut them when the server
/// stops.
#[derive(Default)]
pub(crate) struct OpenConnections {
    next_id: AtomicU64,
    by_id: Mutex<HashMap<u64, Open>>,
}

impl OpenConnections {
    fn lock(&self) -> MutexGuard<'_, HashMap<u64, Open>> {
        self.by_id.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Registers a connection from `peer` unless that peer holds `max`
    /// already, with a handle on `stream` when given (see [`Self::attach`]).
    pub(crate) fn admit(
        &self,
        peer: IpAddr,
        stream: Option<&TcpStream>,
        max: usize,
    ) -> Result<u64, AdmitError> {
        let clone = stream
            .map(TcpStream::try_clone)
            .transpose()
            .map_err(|_| AdmitError::Clone)?;
        let mut open = self.lock();
        if open.values().filter(|o| o.peer == peer).count() >= max {
            return Err(AdmitError::PeerFull);
        }
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        open.insert(
            id,
            Open {
                peer,
                stream: clone,
                waiting: Arc::default(),
            },
        );
        Ok(id)
    }

    /// Keeps a handle on `stream`, registered as `id` without one, to shut
    /// it when it is preempted or the server stops.
    pub(crate) fn attach(&self, id: u64, stream: &TcpStream) -> Result<(), AdmitError> {
        let clone = stream.try_clone().map_err(|_| AdmitError::Clone)?;
        match self.lock().get_mut(&id) {
            Some(o) => {
                o.stream = Some(clone);
                Ok(())
            }
            None => Err(AdmitError::Clone),
        }
    }

    /// The waiting mark of connection `id`, for the stream its handler gets.
    pub(crate) fn waiting(&self, id: u64) -> Option<Arc<WaitingMark>> {
        self.lock().get(&id).map(|o| Arc::clone(&o.waiting))
    }

    /// Forgets connection `id` (closed, or its handler returned).
    pub(crate) fn remove(&self, id: u64) {
        self.lock().remove(&id);
    }

    /// Whether no connection is open.
    pub(crate) fn is_empty(&self) -> bool {
        self.lock().is_empty()
    }

    /// Shuts the connection whose handler has waited longest for its peer,
    /// if that is `at_least`; returns its peer and how long it waited. Only
    /// a handler blocked in a read of its connection waits: one at work is
    /// never chosen.
    pub(crate) fn shut_longest_waiting(&self, at_least: Duration) -> Option<(IpAddr, Duration)> {
        let open = self.lock();
        let now = now_micros();
        let (o, stream, waited) = open
            .values()
            .filter_map(|o| Some((o, o.stream.as_ref()?, o.waiting.waited(now)?)))
            .filter(|(_, _, waited)| *waited >= at_least)
            .max_by_key(|(_, _, waited)| *waited)?;
        // Not chosen twice: its worker is about to be free.
        o.waiting.clear();
        let _ = stream.shutdown(Shutdown::Both);
        Some((o.peer, waited))
    }

    /// Shuts every open connection: blocked reads and writes end at once.
    pub(crate) fn shut_all(&self) -> usize {
        let open = self.lock();
        for stream in open.values().filter_map(|o| o.stream.as_ref()) {
            let _ = stream.shutdown(Shutdown::Both);
        }
        open.len()
    }
}
