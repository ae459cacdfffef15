//! The pool: worker threads that serve connections, fed by a bounded queue
//! ([`HandOff`]) that parks an idle worker at once. A connection handed
//! over when every worker is busy waits in the queue; when the queue is
//! full, or while connections wait in it, the connection whose handler has
//! waited longest for its peer (at least
//! [`PoolConfig::preempt_after`]) is shut to make room: peers that
//! hold their worker idle or trickling cannot keep a busy server from
//! serving others. A handler at work is never preempted (see
//! [`PeerStream`]).

use std::io;
use std::net::{IpAddr, TcpStream};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::thread::JoinHandle;
use std::time::Duration;

use confboot_util::stop::Stop;

use crate::admission::OpenConnections;
use crate::gate::half_closed;
use crate::handoff::HandOff;
use crate::listener::{PoolConfig, ServerStats};
use crate::peer_stream::PeerStream;

/// A registered connection on its way to a worker.
type Queued = (u64, TcpStream);

/// The accepting side of the pool: hands connections to the workers, and
/// preempts to make room. Dropping it closes the queue: the workers end
/// once it is empty.
pub(crate) struct Pool {
    queue: Arc<HandOff<Queued>>,
    /// Connections that may wait for a worker.
    capacity: usize,
    preempt_after: Option<Duration>,
    open: Arc<OpenConnections>,
    stats: Arc<ServerStats>,
}

/// Starts the workers of a pool sized by `config`, each running `handler`
/// for the connections it takes; returns the pool's accepting side and the
/// workers.
pub(crate) fn start<H>(
    config: &PoolConfig,
    handler: H,
    stop: &Stop,
    open: &Arc<OpenConnections>,
    stats: &Arc<ServerStats>,
) -> io::Result<(Pool, Vec<JoinHandle<()>>)>
where
    H: Fn(PeerStream, &Stop) + Send + Sync + 'static,
{
    let handler = Arc::new(handler);
    // Room for one more per worker: a connection queued after its worker's
    // was preempted (see `Pool::try_dispatch`).
    let queue = Arc::new(HandOff::<Queued>::new(config.queue + config.workers.max(1)));
    let drop_half_closed = config.gate.as_ref().is_some_and(|g| g.drop_half_closed);
    let mut workers = Vec::with_capacity(config.workers.max(1));
    for i in 0..config.workers.max(1) {
        let queue = Arc::clone(&queue);
        let handler = Arc::clone(&handler);
        let stop = stop.clone();
        let stats = Arc::clone(stats);
        let open = Arc::clone(open);
        workers.push(
            std::thread::Builder::new()
                .name(format!("rpc-worker-{i}"))
                .spawn(move || {
                    while let Some((id, stream)) = queue.pop() {
                        if drop_half_closed && half_closed(&stream) {
                            stats.gate_closed.fetch_add(1, Ordering::Relaxed);
                        } else if !stop.is_raised() {
                            let mark = open.waiting(id).unwrap_or_default();
                            handler(PeerStream::new(stream, mark), &stop);
                            stats.served.fetch_add(1, Ordering::Relaxed);
                        } // else drain: close queued connections unserved
                        open.remove(id);
                    }
                })?,
        );
    }
    let pool = Pool {
        queue,
        capacity: config.queue,
        preempt_after: config.preempt_after,
        open: Arc::clone(open),
        stats: Arc::clone(stats),
    };
    Ok((pool, workers))
}

impl Pool {
    /// Shuts the connection whose handler has waited longest for its peer,
    /// at least [`PoolConfig::preempt_after`]; whether there was one.
    fn preempt(&self, why: &str) -> bool {
        let Some(after) = self.preempt_after else {
            return false;
        };
        let Some((victim, waited)) = self.open.shut_longest_waiting(after) else {
            return false;
        };
        self.stats.preempted.fetch_add(1, Ordering::Relaxed);
        log::warn!(
            "{why}: shut the connection from {victim}, which waited {} ms for its peer",
            waited.as_millis()
        );
        true
    }

    /// While connections wait in the queue, shuts those (one per queued
    /// connection at most) whose handler has waited for its peer at least
    /// [`PoolConfig::preempt_after`], so the queue moves on.
    pub(crate) fn preempt_for_queued(&self) {
        if self.preempt_after.is_none() {
            return;
        }
        for _ in 0..self.queue.len() {
            if !self.preempt("connections queued") {
                return;
            }
        }
    }

    /// Hands a registered connection to a worker. When the queue is full,
    /// the connection whose handler has waited longest for its peer (at
    /// least [`PoolConfig::preempt_after`]) is shut to make room; when
    /// there is none, the connection is given back.
    pub(crate) fn try_dispatch(&self, id: u64, stream: TcpStream) -> Result<(), TcpStream> {
        if self.queue.len() >= self.capacity && !self.preempt("every worker busy") {
            return Err(stream);
        }
        // Counted before a worker can take it: once it is queued, its
        // handler may answer before this thread runs again.
        self.stats.accepted.fetch_add(1, Ordering::Relaxed);
        self.queue.try_push((id, stream)).map_err(|(_, (_, s))| {
            self.stats.accepted.fetch_sub(1, Ordering::Relaxed);
            s
        })
    }

    /// Hands a registered connection to a worker, or closes it when there
    /// is no room.
    pub(crate) fn dispatch(&self, id: u64, stream: TcpStream, peer: IpAddr) {
        if let Err(s) = self.try_dispatch(id, stream) {
            self.open.remove(id);
            self.stats.refused.fetch_add(1, Ordering::Relaxed);
            log::warn!("refusing connection from {peer}: all workers busy");
            let _ = s.shutdown(std::net::Shutdown::Both);
        }
    }
}

impl Drop for Pool {
    /// The accepting thread has ended: the workers end once the queue is
    /// empty.
    fn drop(&mut self) {
        self.queue.close();
    }
}
