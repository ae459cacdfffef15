//! joinsvc: the join service of a confboot cluster. It runs on every
//! control-plane node, verifies joining nodes (client attestation inside the
//! aTLS handshake) and issues their join tickets. It serves the join API on
//! one port and plain-HTTP health and metrics on another.

mod config;
mod http;
mod kube_api;
mod metrics;
mod server;
mod ticket;
mod token;
mod vpn;
mod watcher;

use std::net::TcpListener;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use confboot_atls::{Accepted, AtlsServer};
use confboot_attest::options::{
    DEFAULT_VARIANTS, EXPECTED_EVENTS_HELP, SNP_POLICY_HELP, VARIANTS_HELP,
};
use confboot_attest::vtpm::EVENT_LOG_OPTION_HELP;
use confboot_attest::{SwappableValidator, Validator};
use confboot_net::listener;
use confboot_proto::{DEFAULT_JOIN_LISTEN, DEFAULT_JOINSVC_HEALTH_LISTEN};
use confboot_sys::signals::TerminationSignals;
use confboot_util::args::{Command, Opt, VERBOSITY, start_daemon};
use confboot_wire::{ServerLimits, serve_connection_as};

use crate::metrics::Metrics;
use crate::ticket::TicketService;

const CMD: Command = Command {
    name: "joinsvc",
    about: "joinsvc: the join service of a confboot cluster. Runs on every control-plane node.\n\
            A joining node connects over attested TLS and proves what it runs inside the handshake:\n\
            a vTPM quote (checked against --ak-trust and --measurements) or an SEV-SNP report\n\
            (checked against --snp-policy), as --variants accepts; other variants are refused.\n\
            joinsvc then derives the node's state-disk key from the master secret, creates a\n\
            Kubernetes bootstrap token and returns the join ticket. The measurements file is watched\n\
            and reloaded without a restart (the SNP policy is read at start-up). With --tpm, joinsvc\n\
            attests itself too, so nodes can refuse an unattested join service. Plain-HTTP /healthz,\n\
            /readyz and Prometheus /metrics are on --health-listen.\n\
            Options come from flags, environment variables, or a JSON --config file (keys are the\n\
            long option names), in that order of precedence. SIGTERM or SIGINT stop it cleanly:\n\
            in-flight calls finish, new ones are refused.",
    usage: "joinsvc --master-secret FILE --measurement-salt HEX --measurements FILE --ak-trust MODE \\\n       \
            --api-server-endpoint HOST:PORT [OPTIONS]\n       \
            joinsvc --variants sev-snp --snp-policy FILE --master-secret FILE ... [OPTIONS]",
    opts: &[
        Opt::value("config", "FILE", "JSON file with option values"),
        Opt::value("listen", "ADDR", "Address of the join API")
            .default(DEFAULT_JOIN_LISTEN)
            .env("JOINSVC_LISTEN"),
        Opt::value(
            "health-listen",
            "ADDR",
            "Address of the HTTP health and metrics endpoints",
        )
        .default(DEFAULT_JOINSVC_HEALTH_LISTEN)
        .env("JOINSVC_HEALTH_LISTEN"),
        Opt::value(
            "master-secret",
            "FILE",
            "The cluster's master secret: JSON {\"key\": base64, \"salt\": base64}",
        )
        .env("JOINSVC_MASTER_SECRET"),
        Opt::value("measurement-salt", "HEX", "The cluster's measurement salt")
            .env("JOINSVC_MEASUREMENT_SALT"),
        Opt::value(
            "measurements",
            "FILE",
            "Expected measurements of joining nodes (Constellation's JSON format); reloaded on change",
        )
        .env("JOINSVC_MEASUREMENTS")
        .aliases(&["policy"])
        .env_aliases(&["JOINSVC_POLICY"]),
        Opt::value(
            "ak-trust",
            "MODE",
            "Which vTPM attestation keys to trust: ca:FILE (AK certificates from these CAs), \
             pinned:FILE (hex public keys, one per line), or insecure-any-ak (local QEMU only; \
             needs --i-understand-insecure-any-ak)",
        )
        .env("JOINSVC_AK_TRUST"),
        Opt::flag(
            config::INSECURE_ANY_AK_CONFIRMATION,
            "INSECURE: confirms --ak-trust insecure-any-ak, which trusts any attestation key, so \
             any machine can claim any measurements and get a join ticket with its disk key; for \
             local QEMU only. Without it joinsvc refuses to start with insecure-any-ak",
        ),
        Opt::value("variants", "LIST", VARIANTS_HELP)
            .default(DEFAULT_VARIANTS)
            .env("JOINSVC_VARIANTS"),
        Opt::value("snp-policy", "FILE", SNP_POLICY_HELP).env("JOINSVC_SNP_POLICY"),
        Opt::value(
            "tpm",
            "DEVICE|HOST:PORT",
            "Attest joinsvc itself with this TPM (a device or a swtpm socket)",
        ),
        Opt::value("event-log", "FILE|none", EVENT_LOG_OPTION_HELP),
        Opt::value("expected-events", "FILE", EXPECTED_EVENTS_HELP),
        Opt::value(
            "api-server-endpoint",
            "HOST:PORT",
            "The Kubernetes API server nodes join",
        )
        .env("JOINSVC_API_SERVER_ENDPOINT"),
        Opt::value(
            "kubernetes-version",
            "VERSION",
            "Kubernetes version nodes install",
        )
        .default("v1.31.1"),
        Opt::value(
            "kubernetes-ca",
            "FILE",
            "The cluster CA certificate (for the kubeadm discovery hash)",
        )
        .default("/etc/kubernetes/pki/ca.crt"),
        Opt::value(
            "pki-dir",
            "DIR",
            "Kubernetes PKI sent to joining control-plane nodes; its ca.key signs the kubelet \
             certificates nodes ask for (with the --kubernetes-ca certificate)",
        )
        .default("/etc/kubernetes/pki"),
        Opt::value(
            "kubelet-cert-validity",
            "DAYS",
            "How long a kubelet serving certificate signed for a joining node is valid",
        )
        .default("365"),
        Opt::value(
            "kube-api",
            "URL",
            "Kubernetes API for bootstrap tokens and the VPN peer registry [default: in-cluster]",
        ),
        Opt::value("kube-api-ca", "FILE", "CA bundle of --kube-api"),
        Opt::value(
            "remove-vpn-peer",
            "NAME",
            "Remove the node NAME from the VPN peer registry of --vpn-cidr (through the Kubernetes \
             API options; nothing else is needed) and exit: 0 removed, 1 not registered, 2 error. \
             Nodes drop it from their peers at their next poll",
        ),
        Opt::value(
            "vpn-cidr",
            "CIDR",
            "The cluster's VPN range (e.g. 10.118.0.0/16): nodes that send a WireGuard key get an \
             address in it, kept in the ConfigMap confboot-vpn-peers (kube-system), and \
             vpn.API/GetUpdate serves the peer list [default: no VPN]",
        ),
        Opt::value(
            "kube-api-token-file",
            "FILE",
            "Bearer token file for --kube-api",
        ),
        Opt::value("workers", "N", "Connections served at once").default("16"),
        Opt::value(
            "queue",
            "N",
            "Accepted connections that may wait for a worker",
        )
        .default("64"),
        Opt::value(
            "pending",
            "N",
            "Connections that may wait for their TLS ClientHello without holding a worker; \
             a new one evicts the one waiting longest (two open files each; the open-file limit is \
             raised to fit, or --pending lowered)",
        )
        .default("1024"),
        VERBOSITY,
    ],
};

fn main() {
    let m = start_daemon(&CMD, "joinsvc");
    if let Some(name) = m.value("remove-vpn-peer") {
        std::process::exit(remove_vpn_peer(&m, name));
    }
    if let Err(e) = run(&m) {
        log::error!("{e}");
        std::process::exit(1);
    }
}

/// `--remove-vpn-peer NAME`: removes a node from the VPN peer registry and
/// exits 0 (removed), 1 (not registered) or 2 (error).
fn remove_vpn_peer(m: &confboot_util::args::Matches, name: &str) -> i32 {
    let registry = config::kube_api(m).and_then(|api| config::vpn_registry(m, &api));
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

fn run(m: &confboot_util::args::Matches) -> Result<(), String> {
    let signals = TerminationSignals::block().map_err(|e| format!("cannot block signals: {e}"))?;
    let cfg = config::Config::from_matches(m)?;

    // One validator per accepted variant; the vTPM one follows its
    // measurement-policy file.
    let mut validators: Vec<Arc<dyn Validator>> = Vec::new();
    let mut watcher = None;
    for check in &cfg.checks {
        match check {
            config::NodeCheck::Vtpm(vtpm) => {
                let validator =
                    SwappableValidator::new(vtpm.validators.build(vtpm.initial_policy.clone()));
                let (builder, swapped) = (vtpm.validators.clone(), validator.clone());
                watcher = Some(
                    watcher::PolicyWatcher::spawn(&vtpm.policy_path, move |policy| {
                        swapped.swap(builder.build(policy));
                        Ok(())
                    })
                    .map_err(|e| format!("cannot watch {}: {e}", vtpm.policy_path.display()))?,
                );
                validators.push(Arc::new(validator));
            }
            config::NodeCheck::Snp(snp) => validators.push(Arc::clone(snp)),
        }
    }

    let metrics = Arc::new(Metrics::default());
    let tickets = Arc::new(TicketService::new(cfg.ticket_config, cfg.token_issuer));
    let router = Arc::new(server::router(tickets, Arc::clone(&metrics)));
    // One ticket per attested connection: every admission is checked
    // against the policy in force when it is made (a policy change applies
    // to every later ticket, a node admitted before cannot keep pulling).
    let limits = ServerLimits {
        max_calls_per_connection: Some(1),
        ..ServerLimits::default()
    };
    let atls =
        AtlsServer::new(cfg.issuer, validators).map_err(|e| format!("cannot set up aTLS: {e}"))?;
    let rpc_listener = TcpListener::bind(&cfg.listen)
        .map_err(|e| format!("cannot listen on {}: {e}", cfg.listen))?;
    let rpc = {
        let metrics = Arc::clone(&metrics);
        listener::spawn(rpc_listener, cfg.pool, move |sock, stop| {
            let peer_addr = sock.peer_addr().ok();
            match atls.accept(sock, limits.io_timeout) {
                Ok(Accepted { mut stream, peer }) => {
                    let peer = peer.map(|p| Arc::new(p) as confboot_wire::PeerIdentity);
                    let end = serve_connection_as(&mut stream, &router, &limits, stop, peer);
                    log::debug!("connection from {peer_addr:?} ended: {end:?}");
                    stream.conn.send_close_notify();
                    let _ = stream.conn.write_tls(&mut stream.sock);
                }
                Err(e) => {
                    metrics.handshake_failures.fetch_add(1, Ordering::Relaxed);
                    metrics.refused(server::handshake_reason(&e));
                    log::warn!("refused {peer_addr:?}: {e}");
                }
            }
        })
        .map_err(|e| format!("cannot start the join API: {e}"))?
    };
    log::info!("join API listening on {}", rpc.local_addr());

    metrics.attach_rpc_stats(rpc.stats_handle());
    let health = http::HealthServer::start(&cfg.health_listen, Arc::clone(&metrics))
        .map_err(|e| format!("cannot listen on {}: {e}", cfg.health_listen))?;
    log::info!(
        "health and metrics listening on http://{}",
        health.local_addr()
    );

    let sig = signals
        .wait()
        .map_err(|e| format!("waiting for signals failed: {e}"))?;
    log::info!("{sig} received: stopping (in-flight calls finish)");
    rpc.stop();
    if let Some(watcher) = watcher {
        watcher.stop();
    }
    health.stop();
    log::info!("stopped");
    Ok(())
}
