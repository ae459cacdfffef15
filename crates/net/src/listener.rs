//! The accept loop and the server it runs: one thread accepts, a bounded
//! pool of worker threads serves connections (`pool.rs`: the queue, the
//! workers, preemption). Each accepted connection is first admitted
//! (`admission.rs`: a peer address that already holds its share of the
//! pool is closed at once), then, with a [`Gate`], held at the gate
//! (`gate.rs`) until its opening is there, then handed to the pool. When
//! every worker is busy and the queue is full, a new connection takes the
//! place of the one whose handler has waited longest for its peer, or is
//! closed at once instead of waiting without bound. Stopping the server
//! gives open connections a grace period, then shuts them.
//!
//! A handler gets its connection as a [`PeerStream`]: its blocking reads
//! mark the connection as waiting for its peer, so a protocol on top (TLS,
//! RPC, HTTP) is preempted when it holds its worker idle or trickling and
//! a busy server needs room, and never while it works.

use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use confboot_util::stop::Stop;

use crate::admission::{AdmitError, OpenConnections};
pub use crate::gate::{Gate, Opening};
pub use crate::peer_stream::PeerStream;
use crate::pool::{self, Pool};

/// Size of the worker pool and its queue.
#[derive(Clone, Debug)]
pub struct PoolConfig {
    /// Connections served at once (default 16).
    pub workers: usize,
    /// Accepted connections that may wait for a worker (default 64).
    pub queue: usize,
    /// Read/write timeout set on every accepted socket before a handler sees
    /// it (default 10 s); handlers may tighten it.
    pub socket_timeout: Duration,
    /// Connections one peer address may hold at once, served or queued
    /// (default: no limit); more are closed at once, so one peer cannot take
    /// the whole pool. Behind address translation many clients share one
    /// address: set it only where each client has its own.
    pub max_per_peer: usize,
    /// How long [`ServerHandle::stop`] lets open connections finish before
    /// it shuts them (default 2 s).
    pub stop_grace: Duration,
    /// What a connection must send before a worker takes it (default: none,
    /// every accepted connection goes to the queue at once).
    pub gate: Option<Gate>,
    /// When every worker is busy and the queue is full, a new connection
    /// takes the place of the one whose handler has waited longest for its
    /// peer's bytes (in a handshake, between calls or inside a frame), if
    /// that is at least this long (default 1 s; `None`: the new connection
    /// is closed instead). Such waits are the handler's blocked reads of
    /// its [`PeerStream`] (a wait lasts from a read to the handler's next
    /// write, the time it works taken out); a handler at work (a key
    /// derived, an Init streaming its log) is never preempted. So peers that hold a
    /// connection and say nothing, or trickle, cannot keep a busy server
    /// from serving others.
    pub preempt_after: Option<Duration>,
}

/// File descriptors a server with `config` holds at most for its
/// connections: two per connection (the socket, and the server's handle on
/// it to shut it at a stop), served, queued or at the gate.
pub fn descriptors_needed(config: &PoolConfig) -> u64 {
    let gate = config.gate.as_ref().map_or(0, |g| g.capacity.max(1));
    2 * (config.workers.max(1) + config.queue + gate) as u64
}

/// Makes room for the descriptors a server with `config` may hold
/// ([`descriptors_needed`]) beside `others` it keeps anyway: raises the soft
/// limit on open files (up to the hard limit) when it is too low, and where
/// even the hard limit is, lets fewer connections wait at the gate (with a
/// warning). A server out of descriptors cannot accept at all, so peers
/// holding connections would lock everyone else out.
pub fn fit_descriptors(config: &mut PoolConfig, others: u64) {
    use nix::sys::resource::{Resource, getrlimit, setrlimit};
    let want = descriptors_needed(config) + others;
    let Ok((soft, hard)) = getrlimit(Resource::RLIMIT_NOFILE) else {
        return;
    };
    let mut limit = soft;
    if soft < want {
        let raised = want.min(hard);
        if setrlimit(Resource::RLIMIT_NOFILE, raised, hard).is_ok() {
            limit = raised;
        }
    }
    if limit < want
        && let Some(gate) = config.gate.as_mut()
    {
        let fixed = others + 2 * (config.workers.max(1) + config.queue) as u64;
        let fits = (limit.saturating_sub(fixed) / 2).max(1) as usize;
        log::warn!(
            "open-file limit {limit}: {fits} connections may wait at the gate, not {}",
            gate.capacity
        );
        gate.capacity = fits;
    }
}

impl Default for PoolConfig {
    fn default() -> Self {
        PoolConfig {
            workers: 16,
            queue: 64,
            socket_timeout: Duration::from_secs(10),
            max_per_peer: usize::MAX,
            stop_grace: Duration::from_secs(2),
            gate: None,
            preempt_after: Some(Duration::from_secs(1)),
        }
    }
}

/// Counters of a running server.
#[derive(Debug, Default)]
pub struct ServerStats {
    /// Connections accepted and handed to the pool.
    pub accepted: AtomicU64,
    /// Connections closed at once because the pool was full or their peer
    /// held its share of it.
    pub refused: AtomicU64,
    /// Connections whose handler returned.
    pub served: AtomicU64,
    /// Connections the gate closed before a worker saw them: no complete
    /// opening in time, an opening that cannot be valid, the peer gone,
    /// evicted for a newer connection (counted in `evicted` too), or no
    /// worker free in time (counted in `refused` too).
    pub gate_closed: AtomicU64,
    /// Connections the gate evicted because it was full.
    pub evicted: AtomicU64,
    /// Most connections waiting at the gate at once.
    pub gate_peak: AtomicU64,
    /// Connections shut, with every worker busy, because their handler had
    /// waited longest for their peer (see [`PoolConfig::preempt_after`]).
    pub preempted: AtomicU64,
}

/// A running server; [`ServerHandle::stop`] ends it.
pub struct ServerHandle {
    local_addr: SocketAddr,
    stop: Stop,
    stats: Arc<ServerStats>,
    open: Arc<OpenConnections>,
    stop_grace: Duration,
    acceptor: Option<JoinHandle<()>>,
    workers: Vec<JoinHandle<()>>,
}

/// Accepts connections on `listener` and runs `handler` for each on a pool
/// thread. The handler gets the connection (timeouts already set; its reads
/// mark it as waiting for its peer) and the stop signal, which it should
/// watch between calls.
pub fn spawn<H>(listener: TcpListener, config: PoolConfig, handler: H) -> io::Result<ServerHandle>
where
    H: Fn(PeerStream, &Stop) + Send + Sync + 'static,
{
    let local_addr = listener.local_addr()?;
    let stop = Stop::new();
    let stats = Arc::new(ServerStats::default());
    let open = Arc::new(OpenConnections::default());

    if let Some(hold) = config.gate.as_ref().and_then(|g| g.defer_accept) {
        // Honest peers send their opening right after connecting: handed
        // over with it, they pass the gate in one look, with no watch added
        // and removed. A silent connection is held by the kernel for about
        // that long, then comes to the gate as before.
        let seconds = u32::try_from(hold.as_secs().max(1)).unwrap_or(u32::MAX);
        if let Err(e) = crate::sockopt::defer_accept(&listener, seconds) {
            log::warn!("gate: TCP_DEFER_ACCEPT not set: {e}");
        }
    }
    let (pool, workers) = pool::start(&config, handler, &stop, &open, &stats)?;

    let acceptor = {
        let accept = Acceptor {
            stop: stop.clone(),
            stats: Arc::clone(&stats),
            open: Arc::clone(&open),
            pool,
            max_per_peer: config.max_per_peer.max(1),
            socket_timeout: config.socket_timeout,
        };
        let gate = config.gate.clone();
        std::thread::Builder::new()
            .name("rpc-accept".into())
            .spawn(move || match gate {
                None => accept.run(listener),
                Some(gate) => {
                    if let Err(listener) = crate::gate::run(&accept, listener, &gate) {
                        accept.run(listener);
                    }
                }
            })?
    };

    Ok(ServerHandle {
        local_addr,
        stop,
        stats,
        open,
        stop_grace: config.stop_grace,
        acceptor: Some(acceptor),
        workers,
    })
}

/// The accepting thread's state. Dropping it (the thread ends) closes the
/// pool's queue: the workers end once it is empty.
pub(crate) struct Acceptor {
    pub(crate) stop: Stop,
    pub(crate) stats: Arc<ServerStats>,
    pub(crate) open: Arc<OpenConnections>,
    pub(crate) pool: Pool,
    max_per_peer: usize,
    socket_timeout: Duration,
}

impl Acceptor {
    /// Sets what a handler expects of its socket: no Nagle delay, and the
    /// server's read and write timeouts.
    pub(crate) fn prepare(&self, stream: &TcpStream) -> io::Result<()> {
        stream
            .set_nodelay(true)
            .and_then(|_| stream.set_read_timeout(Some(self.socket_timeout)))
            .and_then(|_| stream.set_write_timeout(Some(self.socket_timeout)))
    }

    /// Registers an accepted socket from `peer` (its peer's share allowing);
    /// `None` when it was refused and closed. Ungated, it is prepared for
    /// its handler at once; at the gate only once its opening is complete,
    /// so a connection the gate closes costs no more than its accept, a
    /// peek and its close.
    pub(crate) fn admit(
        &self,
        stream: TcpStream,
        peer: IpAddr,
        gated: bool,
    ) -> Option<(u64, TcpStream)> {
        if !gated && let Err(e) = self.prepare(&stream) {
            log::debug!("cannot prepare accepted socket: {e}");
            return None;
        }
        let handle = (!gated).then_some(&stream);
        match self.open.admit(peer, handle, self.max_per_peer) {
            Ok(id) => Some((id, stream)),
            Err(e) => {
                self.stats.refused.fetch_add(1, Ordering::Relaxed);
                if matches!(e, AdmitError::PeerFull) {
                    log::warn!(
                        "refusing connection from {peer}: it holds {} already",
                        self.max_per_peer
                    );
                }
                let _ = stream.shutdown(std::net::Shutdown::Both);
                None
            }
        }
    }

    /// Accepts and hands every connection to the pool at once.
    fn run(&self, listener: TcpListener) {
        loop {
            let conn = listener.accept();
            if self.stop.is_raised() {
                break;
            }
            let (stream, peer) = match conn {
                Ok((s, addr)) => (s, addr.ip()),
                Err(e) => {
                    log::warn!("accept failed: {e}");
                    std::thread::sleep(Duration::from_millis(10));
                    continue;
                }
            };
            if let Some((id, stream)) = self.admit(stream, peer, false) {
                self.pool.dispatch(id, stream, peer);
            }
        }
    }
}

impl ServerHandle {
    /// The address the server listens on.
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// The server's counters.
    pub fn stats(&self) -> &ServerStats {
        &self.stats
    }

    /// A shared handle on the counters that outlives the server.
    pub fn stats_handle(&self) -> Arc<ServerStats> {
        Arc::clone(&self.stats)
    }

    /// The stop signal handlers watch.
    pub fn stop_signal(&self) -> &Stop {
        &self.stop
    }

    /// Stops accepting, lets in-flight calls finish and closes idle
    /// connections; connections still open after the grace period
    /// ([`PoolConfig::stop_grace`]: a slow or hostile peer) are shut. Waits
    /// for every thread.
    pub fn stop(mut self) {
        self.shutdown();
    }

    fn shutdown(&mut self) {
        self.stop.raise();
        // Wake the acceptor blocked in accept().
        let mut wake = self.local_addr;
        if wake.ip().is_unspecified() {
            wake.set_ip(match wake {
                SocketAddr::V4(_) => Ipv4Addr::LOCALHOST.into(),
                SocketAddr::V6(_) => Ipv6Addr::LOCALHOST.into(),
            });
        }
        let _ = TcpStream::connect_timeout(&wake, Duration::from_secs(1));
        if let Some(a) = self.acceptor.take() {
            let _ = a.join();
        }
        let grace_until = Instant::now() + self.stop_grace;
        while !self.open.is_empty() && Instant::now() < grace_until {
            std::thread::sleep(Duration::from_millis(10));
        }
        let shut = self.open.shut_all();
        if shut > 0 {
            log::info!("stopping: {shut} connection(s) still open after the grace period, shut");
        }
        for w in self.workers.drain(..) {
            let _ = w.join();
        }
    }
}

impl Drop for ServerHandle {
    fn drop(&mut self) {
        if self.acceptor.is_some() {
            self.shutdown();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn any_opening(_: &[u8]) -> Opening {
        Opening::Complete
    }

    #[test]
    fn a_gate_that_asks_for_it_defers_accepting_until_the_first_bytes() {
        let gated = |defer_accept| PoolConfig {
            gate: Some(Gate {
                judge: any_opening,
                max_opening: 16,
                timeout: Duration::from_secs(1),
                capacity: 4,
                drop_half_closed: false,
                defer_accept,
            }),
            ..PoolConfig::default()
        };
        for (config, deferred) in [
            (gated(Some(Duration::from_secs(1))), 1),
            (gated(None), 0),
            (PoolConfig::default(), 0),
        ] {
            let listener = TcpListener::bind("127.0.0.1:0").unwrap();
            let probe = listener.try_clone().unwrap();
            let handle = spawn(listener, config, |_, _| {}).unwrap();
            assert_eq!(crate::sockopt::deferred_accept(&probe).unwrap(), deferred);
            handle.stop();
        }
    }
}
