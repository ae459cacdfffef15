//! nodeagent: the one small daemon that keeps running on a confboot node
//! once the bootstrapper has stopped. It serves the verify service: anyone
//! who can reach the node opens an aTLS connection (ALPN `confboot/2`,
//! without attesting) and gets a fresh quote of the node's TPM bound to
//! that TLS session's exporter ([`confboot_verifier::verify`]), so an admin can check
//! at any time what the node runs and that it is marked with the cluster's
//! id (`confboot verify`).
//!
//! With `--vpn-cidr` it also polls the control planes for the cluster's
//! VPN peer list (`vpn.API/GetUpdate` over aTLS, both sides attesting;
//! [`confboot_vpn::poll_once`]) with the node's own record, and applies
//! each new list.
//!
//! The crate is a library so that one static binary can carry both the
//! bootstrapper and the node agent (the initramfs ships that one); the
//! `nodeagent` binary is the same [`main`] on its own, for a node's OS,
//! and has one subcommand more: `nodeagent cluster-step`
//! ([`cluster_step`]), the cluster step the bootstrapper handed over.

pub mod cluster_step;
mod config;
pub mod options;

mod vpn;

use std::net::TcpListener;
use std::sync::Arc;
use std::time::Duration;

use crate::config::{CMD, Config, ConfigError};
use crate::options::VtpmIssuerError;
use confboot_attest::Issuer;
use confboot_net::listener::PoolConfig;
use confboot_sys::signals::TerminationSignals;
use confboot_util::args::{exit_usage, start_daemon};

/// The node agent's whole life, from `std::env::args()`: the `nodeagent`
/// binary's `main`, and the bootstrapper's when it is started under the
/// name `nodeagent` (the initramfs links `/usr/bin/nodeagent` to the
/// bootstrapper, so one binary carries both). Exits the process with 1 on
/// a failure it cannot go on from.
pub fn main() {
    let m = start_daemon(&CMD, "nodeagent");
    let config = match Config::from_matches(&m) {
        Ok(config) => config,
        Err(ConfigError::Usage(e)) => exit_usage(&CMD, &e),
        Err(ConfigError::Unusable(e)) => {
            log::error!("cannot go on: {e}");
            std::process::exit(1);
        }
        Err(ConfigError::JoinServices(e)) => {
            log::error!("cannot go on: {e}");
            std::process::exit(1);
        }
    };
    if let Err(e) = run(&config) {
        log::error!("cannot go on: {e}");
        std::process::exit(1);
    }
}

/// Why the node agent cannot go on; the message names the option or the
/// step.
#[derive(Debug, thiserror::Error)]
enum RunError {
    /// The termination signals cannot be blocked.
    #[error("cannot block signals: {0}")]
    BlockSignals(std::io::Error),
    /// The vTPM issuer (`--tpm`, its key, `--event-log`) did not open.
    #[error(transparent)]
    Vtpm(#[from] VtpmIssuerError),
    /// The VPN poller did not start.
    #[error(transparent)]
    Vpn(#[from] vpn::VpnStartError),
    /// The `--verify-listen` address cannot be bound.
    #[error("--verify-listen {addr}: {error}")]
    Listen {
        /// The address.
        addr: String,
        /// Why it cannot be bound.
        error: std::io::Error,
    },
    /// The verify service did not start.
    #[error("verify service: {0}")]
    VerifyService(std::io::Error),
    /// Waiting for a termination signal failed.
    #[error("waiting for signals failed: {0}")]
    WaitSignals(std::io::Error),
}

fn run(config: &Config) -> Result<(), RunError> {
    let signals = TerminationSignals::block().map_err(RunError::BlockSignals)?;
    let (workers, per_client) = (config.verify_workers, config.verify_per_client);
    let vtpm = Arc::new(options::open_vtpm_issuer(
        &config.tpm,
        &config.event_log,
        |tpm| {
            log::info!(
                "nodeagent {} starting; TPM: {}",
                env!("CARGO_PKG_VERSION"),
                tpm.describe()
            );
        },
    )?);
    let issuer: Arc<dyn Issuer> = Arc::clone(&vtpm) as Arc<dyn Issuer>;
    let vpn_poller = match &config.vpn {
        Some(vpn) => Some(vpn::start(vpn, &vtpm)?),
        None => None,
    };

    let addr = config.verify_listen.as_str();
    let socket = TcpListener::bind(addr).map_err(|error| RunError::Listen {
        addr: addr.to_string(),
        error,
    })?;
    let pool = PoolConfig {
        workers,
        queue: workers * 4,
        socket_timeout: Duration::from_secs(10),
        max_per_peer: per_client,
        // Silent or trickling clients wait at the gate, not on a worker;
        // a connection reaches a worker with its ClientHello.
        gate: Some(confboot_atls::client_hello_gate(
            256,
            Duration::from_secs(5),
        )),
        ..PoolConfig::default()
    };
    let server = confboot_verifier::verify::service::serve(socket, pool, issuer)
        .map_err(RunError::VerifyService)?;
    log::info!(
        "verify service listening on {} (aTLS, evidence bound to the session)",
        server.local_addr()
    );

    let sig = signals.wait().map_err(RunError::WaitSignals)?;
    log::info!("{sig} received: stopping");
    server.stop();
    if let Some(poller) = vpn_poller {
        poller.stop();
    }
    log::info!("stopped");
    Ok(())
}
