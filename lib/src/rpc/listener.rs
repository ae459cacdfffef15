//! The accept loop: one thread accepts, a bounded pool of worker threads
//! serves connections. When every worker is busy and the queue is full, a new
//! connection is closed at once instead of waiting without bound; so is one
//! from a peer address that already holds its share of the pool. Stopping
//! the server gives open connections a grace period, then shuts them.

use std::collections::HashMap;
use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::{TrySendError, bounded};

use crate::stop::Stop;

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
}

impl Default for PoolConfig {
    fn default() -> Self {
        PoolConfig {
            workers: 16,
            queue: 64,
            socket_timeout: Duration::from_secs(10),
            max_per_peer: usize::MAX,
            stop_grace: Duration::from_secs(2),
        }
    }
}

/// The connections a server holds (served or queued), to count them per
/// peer and to shut them when the server stops.
#[derive(Default)]
struct OpenConnections {
    next_id: AtomicU64,
    by_id: Mutex<HashMap<u64, (IpAddr, TcpStream)>>,
}

impl OpenConnections {
    fn lock(&self) -> MutexGuard<'_, HashMap<u64, (IpAddr, TcpStream)>> {
        self.by_id.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Registers `stream` from `peer` unless that peer holds `max` already.
    fn admit(&self, peer: IpAddr, stream: &TcpStream, max: usize) -> Result<u64, AdmitError> {
        let mut open = self.lock();
        if open.values().filter(|(ip, _)| *ip == peer).count() >= max {
            return Err(AdmitError::PeerFull);
        }
        let clone = stream.try_clone().map_err(|_| AdmitError::Clone)?;
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        open.insert(id, (peer, clone));
        Ok(id)
    }

    fn remove(&self, id: u64) {
        self.lock().remove(&id);
    }

    fn is_empty(&self) -> bool {
        self.lock().is_empty()
    }

    /// Shuts every open connection: blocked reads and writes end at once.
    fn shut_all(&self) -> usize {
        let open = self.lock();
        for (_, stream) in open.values() {
            let _ = stream.shutdown(std::net::Shutdown::Both);
        }
        open.len()
    }
}

enum AdmitError {
    PeerFull,
    Clone,
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
/// thread. The handler gets the socket (timeouts already set) and the stop
/// signal, which it should watch between calls.
pub fn spawn<H>(listener: TcpListener, config: PoolConfig, handler: H) -> io::Result<ServerHandle>
where
    H: Fn(TcpStream, &Stop) + Send + Sync + 'static,
{
    let local_addr = listener.local_addr()?;
    let stop = Stop::new();
    let stats = Arc::new(ServerStats::default());
    let handler = Arc::new(handler);
    let open = Arc::new(OpenConnections::default());
    let (tx, rx) = bounded::<(u64, TcpStream)>(config.queue);

    let mut workers = Vec::with_capacity(config.workers);
    for i in 0..config.workers.max(1) {
        let rx = rx.clone();
        let handler = Arc::clone(&handler);
        let stop = stop.clone();
        let stats = Arc::clone(&stats);
        let open = Arc::clone(&open);
        workers.push(
            std::thread::Builder::new()
                .name(format!("rpc-worker-{i}"))
                .spawn(move || {
                    for (id, stream) in rx.iter() {
                        if !stop.is_raised() {
                            handler(stream, &stop);
                            stats.served.fetch_add(1, Ordering::Relaxed);
                        } // else drain: close queued connections unserved
                        open.remove(id);
                    }
                })?,
        );
    }

    let acceptor = {
        let stop = stop.clone();
        let stats = Arc::clone(&stats);
        let open = Arc::clone(&open);
        let max_per_peer = config.max_per_peer.max(1);
        std::thread::Builder::new()
            .name("rpc-accept".into())
            .spawn(move || {
                for conn in listener.incoming() {
                    if stop.is_raised() {
                        break;
                    }
                    let stream = match conn {
                        Ok(s) => s,
                        Err(e) => {
                            log::warn!("accept failed: {e}");
                            std::thread::sleep(Duration::from_millis(10));
                            continue;
                        }
                    };
                    let prepared = stream
                        .set_nodelay(true)
                        .and_then(|_| stream.set_read_timeout(Some(config.socket_timeout)))
                        .and_then(|_| stream.set_write_timeout(Some(config.socket_timeout)));
                    if let Err(e) = prepared {
                        log::debug!("cannot prepare accepted socket: {e}");
                        continue;
                    }
                    let Ok(peer) = stream.peer_addr().map(|a| a.ip()) else {
                        continue;
                    };
                    let id = match open.admit(peer, &stream, max_per_peer) {
                        Ok(id) => id,
                        Err(e) => {
                            stats.refused.fetch_add(1, Ordering::Relaxed);
                            if matches!(e, AdmitError::PeerFull) {
                                log::warn!(
                                    "refusing connection from {peer}: it holds {max_per_peer} already"
                                );
                            }
                            let _ = stream.shutdown(std::net::Shutdown::Both);
                            continue;
                        }
                    };
                    match tx.try_send((id, stream)) {
                        Ok(()) => {
                            stats.accepted.fetch_add(1, Ordering::Relaxed);
                        }
                        Err(TrySendError::Full((id, s)))
                        | Err(TrySendError::Disconnected((id, s))) => {
                            open.remove(id);
                            stats.refused.fetch_add(1, Ordering::Relaxed);
                            log::warn!("refusing connection from {peer}: all workers busy");
                            let _ = s.shutdown(std::net::Shutdown::Both);
                        }
                    }
                }
                // Dropping the sender lets the workers end once the queue is empty.
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
