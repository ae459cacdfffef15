//! Plain-HTTP health and metrics endpoints: `/healthz`, `/readyz`, and
//! Prometheus text at `/metrics`. Served with the project's bounded HTTP
//! ([`confboot_net::http`]: one request per connection, an 8 KiB head within
//! 5 s) on a small bounded pool: the port is on the node's network, which
//! the host controls.

use std::net::TcpListener;
use std::sync::Arc;
use std::time::Duration;

use confboot_net::http::{HttpLimits, read_request, respond, respond_to_error};
use confboot_net::listener::{self, PoolConfig, ServerHandle};

use crate::metrics::Metrics;

/// A running health server.
pub struct HealthServer {
    server: ServerHandle,
}

impl HealthServer {
    /// Listens on `addr` and answers on a pool of two workers (probes and
    /// scrapes are short) until stopped.
    pub fn start(addr: &str, metrics: Arc<Metrics>) -> std::io::Result<HealthServer> {
        let socket = TcpListener::bind(addr)?;
        let pool = PoolConfig {
            workers: 2,
            queue: 16,
            socket_timeout: Duration::from_secs(5),
            // Silent or trickling clients wait at the gate, not on a worker.
            gate: Some(confboot_net::http::gate(256, Duration::from_secs(5))),
            ..PoolConfig::default()
        };
        let limits = HttpLimits::default();
        let server = listener::spawn(socket, pool, move |mut sock, stop| {
            let request = match read_request(&mut sock, &limits, stop) {
                Ok(request) => request,
                Err(e) => {
                    respond_to_error(&mut sock, &limits, &e);
                    log::debug!("health server: {e}");
                    return;
                }
            };
            let (code, body, content_type) =
                match (request.method.as_str(), request.target.as_str()) {
                    ("GET", "/healthz") => (200, "ok\n".to_string(), "text/plain"),
                    ("GET", "/readyz") => (200, "ready\n".to_string(), "text/plain"),
                    ("GET", "/metrics") => (200, metrics.render(), "text/plain; version=0.0.4"),
                    _ => (404, "not found\n".to_string(), "text/plain"),
                };
            // The path is the caller's: only the known ones are named.
            let path = if code == 200 {
                request.target.as_str()
            } else {
                "(other)"
            };
            log::trace!("http {} {path} -> {code}", request.method);
            if let Err(e) = respond(&mut sock, &limits, code, content_type, body.as_bytes()) {
                log::debug!("health server: cannot answer: {e}");
            }
        })?;
        Ok(HealthServer { server })
    }

    /// The address it listens on.
    pub fn local_addr(&self) -> std::net::SocketAddr {
        self.server.local_addr()
    }

    /// Stops answering and waits for its threads.
    pub fn stop(self) {
        self.server.stop();
    }
}
