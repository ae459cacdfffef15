//! joinsvc: the join service of a confboot cluster. It runs on every
//! control-plane node, verifies joining nodes and issues their join tickets.
//! It serves RPC on one port and plain-HTTP health and metrics on another.

mod http;
mod metrics;
// Wired into main() with the attested join API.
#[allow(dead_code)]
mod ticket;
#[allow(dead_code)]
mod token;
#[allow(dead_code)]
mod watcher;

use std::net::TcpListener;
use std::sync::Arc;

use confboot::args::{Command, Opt, VERBOSITY, parse_or_exit};
use confboot::rpc::listener::{self, PoolConfig};
use confboot::rpc::{Router, ServerLimits, serve_connection};
use confboot::signals::TerminationSignals;
use confboot_proto::health::{HealthCheckRequest, HealthCheckResponse, health_check_response};

const CMD: Command = Command {
    name: "joinsvc",
    about: "joinsvc: the join service of a confboot cluster. Runs on every control-plane node,\n\
            verifies the attestation of joining nodes and issues their join tickets (state-disk key,\n\
            bootstrap token). Serves the join API (RPC) on --listen and plain-HTTP /healthz, /readyz\n\
            and Prometheus /metrics on --health-listen. Stops cleanly on SIGTERM or SIGINT:\n\
            in-flight calls finish, new ones are refused.",
    usage: "joinsvc [OPTIONS]",
    opts: &[
        Opt::value("listen", "ADDR", "Address of the join API")
            .default("0.0.0.0:9090")
            .env("JOINSVC_LISTEN"),
        Opt::value(
            "health-listen",
            "ADDR",
            "Address of the HTTP health and metrics endpoints",
        )
        .default("0.0.0.0:9091")
        .env("JOINSVC_HEALTH_LISTEN"),
        Opt::value("workers", "N", "Connections served at once").default("16"),
        Opt::value(
            "queue",
            "N",
            "Accepted connections that may wait for a worker",
        )
        .default("64"),
        VERBOSITY,
    ],
};

/// The RPC method that reports whether the service answers.
pub const HEALTH_CHECK: &str = "/grpc.health.v1.Health/Check";

fn main() {
    let m = parse_or_exit(&CMD, std::env::args().skip(1));
    let verbosity = m.verbosity().unwrap_or_else(|e| exit_usage(&e));
    confboot::logging::init("joinsvc", verbosity);
    if let Err(e) = run(&m) {
        log::error!("{e}");
        std::process::exit(1);
    }
}

fn exit_usage(e: &dyn std::fmt::Display) -> ! {
    eprintln!("joinsvc: {e}\nTry 'joinsvc --help'.");
    std::process::exit(2);
}

fn run(m: &confboot::args::Matches) -> Result<(), String> {
    let signals = TerminationSignals::block().map_err(|e| format!("cannot block signals: {e}"))?;
    let listen = m.value("listen").expect("has a default");
    let health_listen = m.value("health-listen").expect("has a default");
    let pool = PoolConfig {
        workers: m
            .parsed("workers")
            .unwrap_or_else(|e| exit_usage(&e))
            .expect("default"),
        queue: m
            .parsed("queue")
            .unwrap_or_else(|e| exit_usage(&e))
            .expect("default"),
        ..PoolConfig::default()
    };

    let router = Arc::new(
        Router::new().unary(HEALTH_CHECK, |_ctx, _req: HealthCheckRequest| {
            Ok(HealthCheckResponse {
                status: health_check_response::ServingStatus::Serving as i32,
            })
        }),
    );
    let limits = ServerLimits::default();
    let rpc_listener =
        TcpListener::bind(listen).map_err(|e| format!("cannot listen on {listen}: {e}"))?;
    let rpc = listener::spawn(rpc_listener, pool, move |mut sock, stop| {
        let end = serve_connection(&mut sock, &router, &limits, stop);
        log::debug!("connection ended: {end:?}");
    })
    .map_err(|e| format!("cannot start the join API: {e}"))?;
    log::info!("join API listening on {}", rpc.local_addr());

    let metrics = Arc::new(metrics::Metrics::default());
    metrics.attach_rpc_stats(rpc.stats_handle());
    let health = http::HealthServer::start(health_listen, metrics)
        .map_err(|e| format!("cannot listen on {health_listen}: {e}"))?;
    log::info!(
        "health and metrics listening on http://{}",
        health.local_addr()
    );

    let sig = signals
        .wait()
        .map_err(|e| format!("waiting for signals failed: {e}"))?;
    log::info!("{sig} received: stopping (in-flight calls finish)");
    rpc.stop();
    health.stop();
    log::info!("stopped");
    Ok(())
}
