//! nodeagent: the one small daemon that keeps running on a confboot node
//! once the bootstrapper has stopped. Today it serves the verify service:
//! anyone who can reach the node asks `GET /?nonce=<base64url>` and gets a
//! fresh quote of the node's TPM bound to that nonce
//! ([`crate::verify`]), so an admin can check at any time what the node
//! runs and that it is marked with the cluster's id (`confboot verify`).
//!
//! With `--vpn-cidr` it also polls the control planes for the cluster's
//! VPN peer list (`vpn.API/GetUpdate` over aTLS, both sides attesting;
//! [`confboot_vpn::poll_once`]) with the node's own record, and applies
//! each new list.
//!
//! The crate is a library so that one static binary can carry both the
//! bootstrapper and the node agent (the initramfs ships that one); the
//! `nodeagent` binary is the same [`main`] on its own, for a node's OS.

pub mod verify;
mod vpn;

use std::net::TcpListener;
use std::sync::Arc;
use std::time::Duration;

use crate::verify::http::{Served, serve_connection};
use confboot_attest::Issuer;
use confboot_attest::join_service::{
    JOINSVC_AK_TRUST_OPT, JOINSVC_MEASUREMENTS_OPT, JOINSVC_SNP_POLICY_OPT, JOINSVC_VARIANTS_OPT,
};
use confboot_attest::tpm::Tpm;
use confboot_attest::vtpm::{EVENT_LOG_OPTION_HELP, VtpmIssuer};
use confboot_net::http::HttpLimits;
use confboot_net::listener::{self, PoolConfig};
use confboot_proto::DEFAULT_VERIFY_LISTEN;
use confboot_sys::signals::TerminationSignals;
use confboot_util::args::{Command, Opt, VERBOSITY, exit_usage, start_daemon};

const CMD: Command = Command {
    name: "nodeagent",
    about: "nodeagent: runs on every confboot node after the bootstrapper has stopped (a systemd\n\
            service on a node's OS, or started by the initramfs' /init). It serves the verify\n\
            service on --verify-listen: plain HTTP `GET /?nonce=<base64url of 32 random bytes>`\n\
            answers a JSON attestation document {\"variant\", \"attestation\"} whose vTPM quote\n\
            (with the firmware's event log) is bound to that nonce; `confboot verify --node HOST`\n\
            asks and checks it. Requests are bounded (8 KiB head, 5 s to send it, a few at a time,\n\
            per client address too); nothing it answers is secret. SIGTERM or SIGINT stop it.\n\
            With --vpn-cidr it polls the control planes (vpn.API/GetUpdate over aTLS: this node\n\
            attests with its vTPM, each control plane must pass the --joinsvc-* checks and carry\n\
            the cluster's mark in PCR 15) every --vpn-poll-interval seconds (with jitter; backoff\n\
            after failures), sends this node's own peer record from --vpn-file, and applies each\n\
            new checked list to the WireGuard interface --vpn-interface and --vpn-peers-file; a\n\
            refused update keeps the last good list.",
    usage: "nodeagent [OPTIONS]",
    opts: &[
        Opt::value("config", "FILE", "JSON file with option values"),
        Opt::value(
            "tpm",
            "DEVICE|HOST:PORT",
            "The node's TPM: `device` (/dev/tpmrm0) or a swtpm socket",
        )
        .default("device"),
        Opt::value("event-log", "FILE|none", EVENT_LOG_OPTION_HELP),
        Opt::value(
            "verify-listen",
            "ADDR",
            "Address of the verify service (plain HTTP)",
        )
        .default(DEFAULT_VERIFY_LISTEN)
        .env("NODEAGENT_VERIFY_LISTEN"),
        Opt::value(
            "verify-workers",
            "N",
            "Verify requests served at once (each one quotes the TPM)",
        )
        .default("4"),
        Opt::value(
            "verify-per-client",
            "N",
            "Connections one client address may hold at once",
        )
        .default("2"),
        Opt::value(
            "vpn-cidr",
            "CIDR",
            "The cluster's VPN range (a.b.c.d/prefix, as joinsvc's --vpn-cidr); given: poll the \
             control planes for the peer list [default: no VPN]",
        ),
        Opt::value(
            "vpn-file",
            "FILE",
            "The node's VPN file the bootstrapper wrote (0600 JSON: name, WireGuard private key, \
             own-record key, disk UUID, public endpoint, listen port, control planes, cluster id)",
        )
        .default(vpn::DEFAULT_VPN_FILE),
        Opt::value(
            "vpn-control-plane",
            "HOST:PORT",
            "A control plane's vpn.API (repeatable; replaces the VPN file's list)",
        ),
        Opt::value(
            "vpn-poll-interval",
            "SECONDS",
            "Seconds between polls (1 to 3600; each wait is 90-100 % of it)",
        )
        .default("10"),
        Opt::value(
            "vpn-interface",
            "NAME|none",
            "The node's WireGuard interface, created once the node's own VPN address is in the \
             list (kernel module wireguard; netlink, no shell); none: only --vpn-peers-file",
        )
        .default("wg0"),
        Opt::value(
            "vpn-peers-file",
            "FILE",
            "Where each applied peer list is written (JSON, replaced atomically)",
        )
        .default(vpn::DEFAULT_PEERS_FILE),
        JOINSVC_MEASUREMENTS_OPT,
        JOINSVC_AK_TRUST_OPT,
        JOINSVC_VARIANTS_OPT,
        JOINSVC_SNP_POLICY_OPT,
        VERBOSITY,
    ],
};

/// The node agent's whole life, from `std::env::args()`: the `nodeagent`
/// binary's `main`, and the bootstrapper's when it is started under the
/// name `nodeagent` (the initramfs links `/usr/bin/nodeagent` to the
/// bootstrapper, so one binary carries both). Exits the process with 1 on
/// a failure it cannot go on from.
pub fn main() {
    let m = start_daemon(&CMD, "nodeagent");
    if let Err(e) = run(&m) {
        log::error!("cannot go on: {e}");
        std::process::exit(1);
    }
}

/// A count option: a whole number from 1 to 64.
fn count(m: &confboot_util::args::Matches, option: &str) -> usize {
    let value = m.value(option).expect("has a default");
    match value.parse::<usize>() {
        Ok(n) if (1..=64).contains(&n) => n,
        _ => exit_usage(
            &CMD,
            &format!("--{option} {value:?}: want a whole number from 1 to 64"),
        ),
    }
}

fn run(m: &confboot_util::args::Matches) -> Result<(), String> {
    let signals = TerminationSignals::block().map_err(|e| format!("cannot block signals: {e}"))?;
    let workers = count(m, "verify-workers");
    let per_client = count(m, "verify-per-client");
    let spec = m.value("tpm").expect("default");
    let tpm = Tpm::open_for_option("tpm", spec).map_err(|e| e.to_string())?;
    log::info!(
        "nodeagent {} starting; TPM: {}",
        env!("CARGO_PKG_VERSION"),
        tpm.describe()
    );
    let vtpm = Arc::new(
        VtpmIssuer::new(tpm)
            .map_err(|e| format!("attestation key: {e}"))?
            .with_event_log_option(m.value("event-log"), Tpm::is_device_spec(spec))
            .map_err(|e| e.to_string())?,
    );
    let issuer: Arc<dyn Issuer> = Arc::clone(&vtpm) as Arc<dyn Issuer>;
    let vpn_poller = match m.value("vpn-cidr") {
        Some(_) => Some(vpn::start(m, &vtpm)?),
        None => None,
    };

    let addr = m.value("verify-listen").expect("default");
    let socket = TcpListener::bind(addr).map_err(|e| format!("--verify-listen {addr}: {e}"))?;
    let pool = PoolConfig {
        workers,
        queue: workers * 4,
        socket_timeout: Duration::from_secs(10),
        max_per_peer: per_client,
        // Silent or trickling clients wait at the gate, not on a worker.
        gate: Some(confboot_net::http::gate(256, Duration::from_secs(5))),
        ..PoolConfig::default()
    };
    let limits = HttpLimits::default();
    let server = listener::spawn(socket, pool, move |mut sock, stop| {
        let peer = sock.peer_addr().ok();
        match serve_connection(&mut sock, issuer.as_ref(), &limits, stop) {
            Served::Answered(status) => log::info!("verify request from {peer:?}: {status}"),
            other => log::debug!("verify connection from {peer:?}: {other:?}"),
        }
    })
    .map_err(|e| format!("verify service: {e}"))?;
    log::info!(
        "verify service listening on {} (GET /?nonce=)",
        server.local_addr()
    );

    let sig = signals
        .wait()
        .map_err(|e| format!("waiting for signals failed: {e}"))?;
    log::info!("{sig} received: stopping");
    server.stop();
    if let Some(poller) = vpn_poller {
        poller.stop();
    }
    log::info!("stopped");
    Ok(())
}
