//! The test image's probe of WireGuard through netlink
//! (`confboot_sys::netlink`), run by `/init`'s probe task `wg-probe`
//! (initramfs/README.md) in a guest whose kernel has the `wireguard`
//! module. It brings up `wg0` as a node would and prints what the kernel
//! holds after each step, for `tests/tests/vm_wireguard.rs` to compare with
//! what it applied:
//!
//! - `CONFBOOT-WG-UP NAME INDEX`: the interface is up;
//! - `CONFBOOT-WG-HELD STEP PEERS DIGEST PORT PUBLIC-KEY APPLY-MS READ-MS`
//!   after each step: `full` (1,024 peers), `smaller` (5 peers and the node
//!   itself, so 1,019 removed), `takeover` (a second `up` of the same name:
//!   the same link, no peers), `again` (3 peers and the node itself);
//!   DIGEST is [`peers_digest`] of the peers read back;
//! - `CONFBOOT-WG-OTHER-KIND refused`: `up` of `lo` is refused.
//!
//! `confboot-wg-probe show NAME` only reads the interface NAME (as a node
//! agent made it) and prints `CONFBOOT-WG-PEERS NAME COUNT IPS`, IPS the
//! peers' allowed IPv4 addresses, sorted and comma-separated (`-` for
//! none), or `CONFBOOT-WG-PEERS NAME absent` while there is no such link
//! (the VPN test image's watcher, `initramfs/test/after-bootstrap-vpn`).
//!
//! A failure exits non-zero with its reason on stderr.

use std::process::ExitCode;
use std::time::Instant;

use confboot_sys::netlink::{NetlinkError, Rtnetlink};
use confboot_tests::wireguard_probe::{
    ADDRESS, INTERFACE, LISTEN_PORT, node_key, peer_list, peers_digest,
};
use confboot_vpn::{
    PeerList, PeerSink, WireGuardDevice, WireGuardInterface, WireGuardNetlink, WireGuardPeerConfig,
};

fn up(name: &str) -> Result<WireGuardInterface, NetlinkError> {
    WireGuardInterface::up(name, node_key(), LISTEN_PORT, ADDRESS.0, ADDRESS.1)
}

fn held(device: &WireGuardDevice) -> Vec<WireGuardPeerConfig> {
    device
        .peers
        .iter()
        .map(|p| WireGuardPeerConfig {
            public_key: p.public_key,
            endpoint: p.endpoint.unwrap_or_else(|| ([0, 0, 0, 0], 0).into()),
            allowed_ips: p.allowed_ips.clone(),
            persistent_keepalive_secs: p.persistent_keepalive_secs,
        })
        .collect()
}

/// Applies `list` (if any), reads the device back and prints the step.
fn step(wg: &mut WireGuardInterface, name: &str, list: Option<&PeerList>) -> Result<(), String> {
    let started = Instant::now();
    if let Some(list) = list {
        wg.apply(list).map_err(|e| format!("{name}: apply: {e}"))?;
    }
    let apply_ms = started.elapsed().as_millis();
    let started = Instant::now();
    let device = wg.device().map_err(|e| format!("{name}: read: {e}"))?;
    let read_ms = started.elapsed().as_millis();
    let public = device
        .public_key
        .map_or("none".to_string(), |k| k.to_string());
    // The kernel holds the key clamped; its public key is the same.
    let private_matches = device
        .private_key
        .as_ref()
        .is_some_and(|k| k.public_key() == wg.public_key());
    if !private_matches {
        return Err(format!(
            "{name}: the private key read back is not the node's"
        ));
    }
    println!(
        "CONFBOOT-WG-HELD {name} {} {} {} {public} {apply_ms} {read_ms}",
        device.peers.len(),
        peers_digest(&held(&device)),
        device.listen_port,
    );
    Ok(())
}

fn run() -> Result<(), String> {
    let mut wg = up(INTERFACE).map_err(|e| format!("up {INTERFACE}: {e}"))?;
    println!("CONFBOOT-WG-UP {} {}", wg.name(), wg.index());
    step(&mut wg, "full", Some(&peer_list(0..1024, false)))?;
    step(&mut wg, "smaller", Some(&peer_list(0..5, true)))?;
    let index = wg.index();
    drop(wg);
    let mut wg = up(INTERFACE).map_err(|e| format!("take over {INTERFACE}: {e}"))?;
    if wg.index() != index {
        return Err(format!("take over: index {} after {index}", wg.index()));
    }
    step(&mut wg, "takeover", None)?;
    step(&mut wg, "again", Some(&peer_list(0..3, true)))?;
    match up("lo") {
        Err(NetlinkError::WrongLinkKind) => println!("CONFBOOT-WG-OTHER-KIND refused"),
        Err(e) => return Err(format!("up lo: {e}")),
        Ok(_) => return Err("up lo: a loopback link was taken as WireGuard".into()),
    }
    wg.delete().map_err(|e| format!("delete: {e}"))?;
    Ok(())
}

/// `show NAME`: the peers the kernel holds for the WireGuard link NAME.
fn show(name: &str) -> Result<(), String> {
    let link = Rtnetlink::open()
        .and_then(|mut nl| nl.link(name))
        .map_err(|e| format!("link {name}: {e}"))?;
    let Some(link) = link else {
        println!("CONFBOOT-WG-PEERS {name} absent");
        return Ok(());
    };
    let device = WireGuardNetlink::open()
        .and_then(|mut wg| wg.get_device(link.index))
        .map_err(|e| format!("read {name}: {e}"))?;
    let mut ips: Vec<std::net::Ipv4Addr> = device
        .peers
        .iter()
        .flat_map(|p| &p.allowed_ips)
        .filter_map(|a| match a.address {
            std::net::IpAddr::V4(v4) => Some(v4),
            std::net::IpAddr::V6(_) => None,
        })
        .collect();
    ips.sort();
    let shown: Vec<String> = ips.iter().map(|ip| ip.to_string()).collect();
    println!(
        "CONFBOOT-WG-PEERS {name} {} {}",
        device.peers.len(),
        if shown.is_empty() {
            "-".to_string()
        } else {
            shown.join(",")
        }
    );
    Ok(())
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match args.as_slice() {
        [] => run(),
        [cmd, name] if cmd == "show" => show(name),
        _ => Err("usage: confboot-wg-probe [show NAME]".into()),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("confboot-wg-probe: {e}");
            ExitCode::FAILURE
        }
    }
}
