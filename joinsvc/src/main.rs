//! joinsvc: the join service of a confboot cluster. It runs on every
//! control-plane node, verifies joining nodes (client attestation inside the
//! aTLS handshake) and issues their join tickets. It serves the join API on
//! one port and plain-HTTP health and metrics on another.

mod config;
mod http;
mod metrics;
mod options;
mod server;
mod ticket;
mod watcher;

use joinsvc::{kube_api, ledger, token, vpn};

use std::net::TcpListener;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use confboot_appraisal::reference::sets::SetsValidator;
use confboot_atls::{Accepted, AtlsError, AtlsServer};
use confboot_attest::{Attested, PolicyError, SwappableValidator, Validator};
use confboot_net::listener;
use confboot_sys::signals::TerminationSignals;
use confboot_tpm::CLUSTER_ID_PCR;
use confboot_util::args::start_daemon;
use confboot_wire::{ServerLimits, serve_connection_as};

use crate::config::{Config, OptionsError, RemoveVpnPeerConfig, ServeConfig, Service};
use crate::metrics::Metrics;
use crate::options::CMD;
use crate::ticket::TicketService;

fn main() {
    let m = start_daemon(&CMD, "joinsvc");
    match Config::from_matches(&m) {
        Ok(Config::RemoveVpnPeer(config)) => std::process::exit(remove_vpn_peer(&config)),
        Ok(Config::Serve(config)) => {
            if let Err(e) = run(&config) {
                log::error!("{e}");
                std::process::exit(1);
            }
        }
        Err(OptionsError::RemoveVpnPeer(e)) => {
            log::error!("{e}");
            std::process::exit(2);
        }
        // Options that cannot be used are a usage error in both modes.
        Err(OptionsError::Serve(e)) => {
            log::error!("{e}");
            std::process::exit(2);
        }
    }
}

/// `--remove-vpn-peer NAME`: removes a node from the VPN peer registry and
/// exits 0 (removed), 1 (not registered) or 2 (error).
fn remove_vpn_peer(config: &RemoveVpnPeerConfig) -> i32 {
    let name = config.name.as_str();
    let registry = config::kube_api(&config.kube_api)
        .and_then(|api| config::vpn_registry(config.vpn_network, &api, &config.kube_api.namespace));
    let registry = match registry {
        Ok(Some(r)) => r,
        Ok(None) => {
            log::error!("--remove-vpn-peer needs --vpn-cidr (the cluster's VPN range)");
            return 2;
        }
        Err(e) => {
            log::error!("{e}");
            return 2;
        }
    };
    match registry.remove(name) {
        Ok(true) => {
            log::info!("VPN peer {name} removed: nodes drop it at their next poll");
            0
        }
        Ok(false) => {
            log::warn!("VPN peer {name} is not registered: nothing changed");
            1
        }
        Err(e) => {
            log::error!("{e}");
            2
        }
    }
}

/// What joinsvc tells of each admitted caller, from what its validator
/// appraised ([`Attested::set_verdict`], [`Attested::warnings`]): an
/// admission by a reference-value set is logged (a warning with its
/// reasons) and counted by status and set; a validator's warnings (an
/// SEV-SNP TCB within the policy's margin of its minimum) are logged with
/// their reasons.
fn admitted(metrics: &Metrics, attested: &Attested) {
    if let Some(verdict) = &attested.set_verdict {
        let set = verdict.set.to_string();
        if verdict.is_warning() {
            log::warn!(
                "node admitted by reference-value set {set} with a warning: {}",
                verdict.warnings.join("; ")
            );
            metrics.admitted("warning", &set);
        } else {
            log::info!("node admitted by reference-value set {set}");
            metrics.admitted("affirming", &set);
        }
    }
    if !attested.warnings.is_empty() {
        log::warn!(
            "{} evidence admitted with a warning: {}",
            attested.variant,
            attested.warnings.join("; ")
        );
    }
}

/// Why joinsvc cannot serve (exit 1); the message names the option, the
/// file or the step.
#[derive(Debug, thiserror::Error)]
enum RunError {
    /// The termination signals cannot be blocked.
    #[error("cannot block signals: {0}")]
    BlockSignals(std::io::Error),
    /// What the options name cannot be read or opened.
    #[error(transparent)]
    Load(#[from] config::LoadError),
    /// The reference-value sets cannot be watched.
    #[error("cannot read the reference-value sets: {0}")]
    Sets(std::io::Error),
    /// The first measurement policy is refused.
    #[error("{}: {error}", path.display())]
    Policy {
        /// The policy file.
        path: std::path::PathBuf,
        /// Why it is refused.
        error: PolicyError,
    },
    /// The measurement policy file cannot be watched.
    #[error("cannot watch {}: {error}", path.display())]
    Watch {
        /// The policy file.
        path: std::path::PathBuf,
        /// Why.
        error: std::io::Error,
    },
    /// The aTLS server cannot be set up.
    #[error("cannot set up aTLS: {0}")]
    Atls(AtlsError),
    /// An address cannot be bound.
    #[error("cannot listen on {addr}: {error}")]
    Listen {
        /// The address.
        addr: String,
        /// Why.
        error: std::io::Error,
    },
    /// The join API's listener did not start.
    #[error("cannot start the join API: {0}")]
    JoinApi(std::io::Error),
    /// Waiting for a termination signal failed.
    #[error("waiting for signals failed: {0}")]
    WaitSignals(std::io::Error),
}

fn run(config: &ServeConfig) -> Result<(), RunError> {
    let signals = TerminationSignals::block().map_err(RunError::BlockSignals)?;
    let cfg = Service::load(config)?;

    // One validator per accepted variant; the vTPM one follows its
    // measurement-policy file.
    let metrics = Arc::new(Metrics::default());
    let mut validators: Vec<Arc<dyn Validator>> = Vec::new();
    let mut watcher = None;
    let mut sets_watchers = Vec::new();
    for check in &cfg.checks {
        match check {
            config::NodeCheck::VtpmSets(vtpm) => {
                let warning = i64::try_from(vtpm.warning.as_secs()).unwrap_or(i64::MAX);
                let validator = SetsValidator::new(
                    vtpm.validators.build_evidence_only(),
                    Arc::clone(&vtpm.sets),
                    warning,
                    // PCR 15 is checked per call (crate::server::caller_check).
                    vec![CLUSTER_ID_PCR],
                )
                .with_time_floor(Arc::clone(&vtpm.floor));
                sets_watchers.push(
                    watcher::SetsWatcher::spawn(
                        Arc::clone(&vtpm.sets),
                        vtpm.reload,
                        Arc::clone(&vtpm.floor),
                    )
                    .map_err(RunError::Sets)?,
                );
                validators.push(Arc::new(validator));
            }
            config::NodeCheck::SnpSets(snp) => {
                let warning = i64::try_from(snp.warning.as_secs()).unwrap_or(i64::MAX);
                // The launch measurement (index 0) against each set's
                // launch digest; SEV-SNP has no mark register to leave out.
                let validator = SetsValidator::new(
                    Arc::clone(&snp.evidence),
                    Arc::clone(&snp.sets),
                    warning,
                    vec![],
                )
                .with_time_floor(Arc::clone(&snp.floor));
                sets_watchers.push(
                    watcher::SetsWatcher::spawn(
                        Arc::clone(&snp.sets),
                        snp.reload,
                        Arc::clone(&snp.floor),
                    )
                    .map_err(RunError::Sets)?,
                );
                validators.push(Arc::new(validator));
            }
            config::NodeCheck::Vtpm(vtpm) => {
                let first =
                    vtpm.validators
                        .build(vtpm.initial_policy.clone())
                        .map_err(|error| RunError::Policy {
                            path: vtpm.policy_path.clone(),
                            error,
                        })?;
                let validator = SwappableValidator::new(first);
                let (builder, swapped) = (vtpm.validators.clone(), validator.clone());
                watcher = Some(
                    watcher::PolicyWatcher::spawn(&vtpm.policy_path, move |policy| {
                        swapped.swap(builder.build(policy)?);
                        Ok(())
                    })
                    .map_err(|error| RunError::Watch {
                        path: vtpm.policy_path.clone(),
                        error,
                    })?,
                );
                validators.push(Arc::new(validator));
            }
            config::NodeCheck::Fixed(validator) => validators.push(Arc::clone(validator)),
        }
    }

    let tickets = Arc::new(TicketService::new(cfg.ticket_config, cfg.token_issuer));
    let router = Arc::new(server::router(tickets, Arc::clone(&metrics)));
    // One ticket per attested connection: every admission is checked
    // against the policy in force when it is made (a policy change applies
    // to every later ticket, a node admitted before cannot keep pulling).
    let limits = ServerLimits {
        max_calls_per_connection: Some(1),
        ..ServerLimits::default()
    };
    let mut atls = AtlsServer::requiring_clients(cfg.issuer, validators).map_err(RunError::Atls)?;
    if let Some(set) = cfg.presented_set {
        atls = atls.presenting(set).map_err(RunError::Atls)?;
    }
    let rpc_listener = TcpListener::bind(&config.listen).map_err(|error| RunError::Listen {
        addr: config.listen.clone(),
        error,
    })?;
    let rpc = {
        let metrics = Arc::clone(&metrics);
        listener::spawn(rpc_listener, cfg.pool, move |sock, stop| {
            let peer_addr = sock.peer_addr().ok();
            match atls.accept(sock, limits.io_timeout) {
                Ok(Accepted { mut stream, peer }) => {
                    // The caller's attestation, with what its validator
                    // appraised, and the sealing key it bound.
                    admitted(&metrics, peer.attested());
                    let end = serve_connection_as(&mut stream, &router, &limits, stop, &peer);
                    log::debug!("connection from {peer_addr:?} ended: {end:?}");
                    stream.conn.send_close_notify();
                    let _ = stream.conn.write_tls(&mut stream.sock);
                }
                Err(e) => {
                    metrics.handshake_failures.fetch_add(1, Ordering::Relaxed);
                    metrics.refused(server::handshake_reason(&e));
                    server::handshake_refused(&metrics, &e, &format!("refused {peer_addr:?}: {e}"));
                }
            }
        })
        .map_err(RunError::JoinApi)?
    };
    log::info!("join API listening on {}", rpc.local_addr());

    metrics.attach_rpc_stats(rpc.stats_handle());
    let health = http::HealthServer::start(&config.health_listen, Arc::clone(&metrics)).map_err(
        |error| RunError::Listen {
            addr: config.health_listen.clone(),
            error,
        },
    )?;
    log::info!(
        "health and metrics listening on http://{}",
        health.local_addr()
    );

    let sig = signals.wait().map_err(RunError::WaitSignals)?;
    log::info!("{sig} received: stopping (in-flight calls finish)");
    rpc.stop();
    if let Some(watcher) = watcher {
        watcher.stop();
    }
    for watcher in sets_watchers {
        watcher.stop();
    }
    health.stop();
    log::info!("stopped");
    Ok(())
}
