//! Plain-HTTP health and metrics endpoints (tiny_http): `/healthz`,
//! `/readyz`, and Prometheus text at `/metrics`.

use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use confboot::stop::Stop;

use crate::metrics::Metrics;

/// A running health server.
pub struct HealthServer {
    addr: std::net::SocketAddr,
    stop: Stop,
    thread: JoinHandle<()>,
}

impl HealthServer {
    /// Listens on `addr` and answers from a thread until stopped.
    pub fn start(addr: &str, metrics: Arc<Metrics>) -> std::io::Result<HealthServer> {
        let server = tiny_http::Server::http(addr).map_err(std::io::Error::other)?;
        let local = server
            .server_addr()
            .to_ip()
            .ok_or_else(|| std::io::Error::other("health server has no IP address"))?;
        let stop = Stop::new();
        let thread = {
            let stop = stop.clone();
            std::thread::Builder::new()
                .name("health-http".into())
                .spawn(move || {
                    while !stop.is_raised() {
                        match server.recv_timeout(Duration::from_millis(100)) {
                            Ok(Some(req)) => respond(req, &metrics),
                            Ok(None) => {}
                            Err(e) => log::warn!("health server: {e}"),
                        }
                    }
                })?
        };
        Ok(HealthServer {
            addr: local,
            stop,
            thread,
        })
    }

    /// The address it listens on.
    pub fn local_addr(&self) -> std::net::SocketAddr {
        self.addr
    }

    /// Stops answering and waits for the thread.
    pub fn stop(self) {
        self.stop.raise();
        let _ = self.thread.join();
    }
}

fn respond(req: tiny_http::Request, metrics: &Metrics) {
    let (code, body, content_type) = match (req.method(), req.url()) {
        (tiny_http::Method::Get, "/healthz") => (200, "ok\n".to_string(), "text/plain"),
        (tiny_http::Method::Get, "/readyz") => (200, "ready\n".to_string(), "text/plain"),
        (tiny_http::Method::Get, "/metrics") => {
            (200, metrics.render(), "text/plain; version=0.0.4")
        }
        _ => (404, "not found\n".to_string(), "text/plain"),
    };
    // The path is the caller's: only the known ones are named.
    let path = if code == 200 { req.url() } else { "(other)" };
    log::trace!("http {} {path} -> {code}", req.method());
    let header = tiny_http::Header::from_bytes("Content-Type", content_type).expect("valid header");
    let resp = tiny_http::Response::from_string(body)
        .with_status_code(code)
        .with_header(header);
    if let Err(e) = req.respond(resp) {
        log::debug!("health server: cannot answer: {e}");
    }
}
