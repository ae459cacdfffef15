//! The accept loop: one thread accepts, a bounded pool of worker threads
//! serves connections. When every worker is busy and the queue is full, a new
//! connection is closed at once instead of waiting without bound.

use std::io;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

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
}

impl Default for PoolConfig {
    fn default() -> Self {
        PoolConfig {
            workers: 16,
            queue: 64,
            socket_timeout: Duration::from_secs(10),
        }
    }
}

/// Counters of a running server.
#[derive(Debug, Default)]
pub struct ServerStats {
    /// Connections accepted and handed to the pool.
    pub accepted: AtomicU64,
    /// Connections closed at once because the pool was full.
    pub refused: AtomicU64,
    /// Connections whose handler returned.
    pub served: AtomicU64,
}

/// A running server; [`ServerHandle::stop`] ends it.
pub struct ServerHandle {
    local_addr: SocketAddr,
    stop: Stop,
    stats: Arc<ServerStats>,
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
    let (tx, rx) = bounded::<TcpStream>(config.queue);

    let mut workers = Vec::with_capacity(config.workers);
    for i in 0..config.workers.max(1) {
        let rx = rx.clone();
        let handler = Arc::clone(&handler);
        let stop = stop.clone();
        let stats = Arc::clone(&stats);
        workers.push(
            std::thread::Builder::new()
                .name(format!("rpc-worker-{i}"))
                .spawn(move || {
                    for stream in rx.iter() {
                        if stop.is_raised() {
                            continue; // drain: close queued connections unserved
                        }
                        handler(stream, &stop);
                        stats.served.fetch_add(1, Ordering::Relaxed);
                    }
                })?,
        );
    }

    let acceptor = {
        let stop = stop.clone();
        let stats = Arc::clone(&stats);
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
                    match tx.try_send(stream) {
                        Ok(()) => {
                            stats.accepted.fetch_add(1, Ordering::Relaxed);
                        }
                        Err(TrySendError::Full(s)) | Err(TrySendError::Disconnected(s)) => {
                            stats.refused.fetch_add(1, Ordering::Relaxed);
                            log::warn!(
                                "refusing connection from {:?}: all workers busy",
                                s.peer_addr().ok()
                            );
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

    /// Stops accepting, lets in-flight calls finish, closes idle connections,
    /// and waits for every thread.
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
