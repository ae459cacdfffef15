//! The node agent's VPN poller: one thread that asks the control planes
//! for the peer list ([`ControlPlaneSource`]), checks it, applies it to
//! the node's WireGuard interface and the peers file ([`NodeVpnSink`]),
//! and waits ([`PollTimer`]) until told to stop.

use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use crate::config::VpnConfig;
use crate::options::JoinServiceOptionsError;
use confboot_attest::Issuer;
use confboot_sys::netlink::NetlinkError;
use confboot_util::stop::Stop;
use confboot_vpn::WireGuardInterface;
use confboot_vpn::{
    ControlPlaneSource, NodeVpnFile, NodeVpnFileError, PeerList, PeerListFile, PeerListFileError,
    PeerSink, PeerUpdates, PollOutcome, PollTimer, VpnNetwork, VpnPrivateKey, poll_once,
};
use confboot_vtpm::VtpmIssuer;

/// Where the bootstrapper leaves the node's VPN file (a tmpfs).
pub const DEFAULT_VPN_FILE: &str = "/run/confboot/vpn.json";
/// Where the applied peer list is written.
pub const DEFAULT_PEERS_FILE: &str = "/run/confboot/vpn-peers.json";
/// Bound on one attempt against one control plane (connect, handshake,
/// call).
const ATTEMPT_TIMEOUT: Duration = Duration::from_secs(20);

/// The running poller.
pub struct VpnPoller {
    stop: Stop,
    thread: JoinHandle<()>,
}

impl VpnPoller {
    /// Stops the poller and waits for its thread.
    pub fn stop(self) {
        self.stop.raise();
        let _ = self.thread.join();
    }
}

/// Why the VPN poller did not start.
#[derive(Debug, thiserror::Error)]
pub enum VpnStartError {
    /// The node's VPN file cannot be read.
    #[error("--vpn-file: {0}")]
    File(NodeVpnFileError),
    /// The `--joinsvc-*` options give no validators.
    #[error(transparent)]
    JoinServices(#[from] JoinServiceOptionsError),
    /// The poller's thread cannot be started.
    #[error("cannot start the VPN poller: {0}")]
    Thread(std::io::Error),
}

/// Starts polling as `config` says (the `--vpn-*` and `--joinsvc-*`
/// options).
pub fn start(config: &VpnConfig, vtpm: &Arc<VtpmIssuer>) -> Result<VpnPoller, VpnStartError> {
    let network = config.network;
    let interval = config.poll_interval;
    let file = NodeVpnFile::read(&config.file).map_err(VpnStartError::File)?;
    let mut control_planes = config.control_planes.clone();
    if control_planes.is_empty() {
        control_planes = file.control_planes.clone();
    }
    let validators = crate::options::validators(
        &config.join_services,
        &config.join_service_release_keys,
        vtpm,
    )?;
    let own = file.own_record_key.record(
        &file.name,
        &file.public_endpoint.to_string(),
        &file.private_key.public_key(),
        &file.disk_uuid,
    );
    log::info!(
        "VPN: node {} (public key {}, endpoint {}) polls {} control plane(s) every {} s for {}",
        file.name,
        file.private_key.public_key(),
        file.public_endpoint,
        control_planes.len(),
        interval.as_secs(),
        network
    );
    let issuer: Arc<dyn Issuer> = Arc::clone(vtpm) as Arc<dyn Issuer>;
    let mut source = ControlPlaneSource::new(
        control_planes,
        validators,
        issuer,
        file.cluster_id.clone(),
        file.control_plane_key,
        Some(own),
        ATTEMPT_TIMEOUT,
    );
    let mut sink = NodeVpnSink {
        interface: config.interface.clone().map(|name| InterfaceState::Down {
            name,
            key: VpnPrivateKey::from_bytes(file.private_key.expose()).expect("a valid key"),
            listen_port: file.listen_port,
        }),
        node_name: file.name.clone(),
        network,
        file: PeerListFile::new(&config.peers_file),
    };
    let stop = Stop::new();
    let thread = {
        let stop = stop.clone();
        std::thread::Builder::new()
            .name("vpn-poller".into())
            .spawn(move || {
                let mut state = PeerUpdates::new(network);
                let mut timer = PollTimer::new(interval);
                while !stop.is_raised() {
                    let outcome = poll_once(&mut state, &mut source, &mut sink);
                    log_outcome(&outcome);
                    stop.sleep(timer.next_wait(&outcome));
                }
            })
            .map_err(VpnStartError::Thread)?
    };
    Ok(VpnPoller { stop, thread })
}

/// One line per poll that changed something or failed; an unchanged list
/// only at debug.
fn log_outcome(outcome: &PollOutcome) {
    match outcome {
        PollOutcome::Unchanged { .. } => log::debug!("VPN: {outcome}"),
        PollOutcome::Applied { .. } => log::info!("VPN: {outcome}"),
        _ => log::warn!("VPN: {outcome}"),
    }
}

/// The node's WireGuard interface: not there until the node's own address
/// is known (its entry in a list), then up.
enum InterfaceState {
    /// Not created yet.
    Down {
        name: String,
        key: VpnPrivateKey,
        listen_port: u16,
    },
    /// Created, with the node's key, port and address.
    Up(WireGuardInterface),
}

/// Where a checked list goes: the WireGuard interface (none with
/// `--vpn-interface none`), then the peers file.
struct NodeVpnSink {
    interface: Option<InterfaceState>,
    node_name: String,
    network: VpnNetwork,
    file: PeerListFile,
}

/// Why a list was not applied.
#[derive(Debug, thiserror::Error)]
enum NodeVpnSinkError {
    /// The list has no entry for this node yet (its own record is
    /// registered by the control plane with this very poll, and shows in
    /// the next answer).
    #[error("this node is not in the list yet (no VPN address for its interface)")]
    NoOwnAddress,
    /// The kernel refused.
    #[error("WireGuard interface: {0}")]
    Netlink(NetlinkError),
    /// The peers file could not be written.
    #[error("{0}")]
    File(PeerListFileError),
}

impl PeerSink for NodeVpnSink {
    type Error = NodeVpnSinkError;

    fn apply(&mut self, peers: &PeerList) -> Result<(), NodeVpnSinkError> {
        if let Some(InterfaceState::Down {
            name,
            key,
            listen_port,
        }) = &self.interface
        {
            let own = peers
                .get(&self.node_name)
                .ok_or(NodeVpnSinkError::NoOwnAddress)?;
            let key = VpnPrivateKey::from_bytes(key.expose()).expect("a valid key");
            let prefix = self.network.prefix();
            let up = WireGuardInterface::up(name, key, *listen_port, own.vpn_ip, prefix)
                .map_err(NodeVpnSinkError::Netlink)?;
            log::info!(
                "VPN: interface {} up with {}/{prefix}, port {listen_port}",
                up.name(),
                own.vpn_ip
            );
            self.interface = Some(InterfaceState::Up(up));
        }
        if let Some(InterfaceState::Up(interface)) = &mut self.interface {
            if let Some(moved) = moved_address(interface.address(), peers, &self.node_name) {
                let prefix = self.network.prefix();
                interface
                    .set_address(moved, prefix)
                    .map_err(NodeVpnSinkError::Netlink)?;
                log::info!(
                    "VPN: interface {} moved to {moved}/{prefix}",
                    interface.name()
                );
            }
            interface.apply(peers).map_err(NodeVpnSinkError::Netlink)?;
        }
        self.file.apply(peers).map_err(NodeVpnSinkError::File)
    }
}

/// The node's address in `peers` when it is no longer `current` (the
/// control plane moved its entry); `None` while it stays, and while the
/// list has no entry for the node (the interface keeps its address).
fn moved_address(
    current: std::net::Ipv4Addr,
    peers: &PeerList,
    name: &str,
) -> Option<std::net::Ipv4Addr> {
    peers
        .get(name)
        .map(|own| own.vpn_ip)
        .filter(|ip| *ip != current)
}

#[cfg(test)]
mod tests {
    use super::*;
    use confboot_vpn::{Peer, VpnPublicKey};
    use std::net::Ipv4Addr;

    fn list(own: Option<u8>) -> PeerList {
        let peer = |name: &str, i: u8| Peer {
            name: name.into(),
            public_endpoint: ([192, 0, 2, i], 51820).into(),
            vpn_ip: Ipv4Addr::new(10, 118, 0, i),
            vpn_pub_key: VpnPublicKey::from_bytes(&[i; 32]).unwrap(),
        };
        let mut peers = vec![peer("other", 9)];
        peers.extend(own.map(|i| peer("me", i)));
        PeerList::new(peers).unwrap()
    }

    #[test]
    fn the_interface_follows_a_moved_own_address_only() {
        let current = Ipv4Addr::new(10, 118, 0, 1);
        assert_eq!(moved_address(current, &list(Some(1)), "me"), None);
        assert_eq!(
            moved_address(current, &list(Some(5)), "me"),
            Some(Ipv4Addr::new(10, 118, 0, 5))
        );
        // No entry for the node: its address stays.
        assert_eq!(moved_address(current, &list(None), "me"), None);
    }

    #[test]
    fn a_sink_error_says_what_was_not_applied() {
        assert_eq!(
            NodeVpnSinkError::NoOwnAddress.to_string(),
            "this node is not in the list yet (no VPN address for its interface)"
        );
        let refused = NetlinkError::Timeout;
        assert_eq!(
            NodeVpnSinkError::Netlink(refused.clone()).to_string(),
            format!("WireGuard interface: {refused}")
        );
        let dir = confboot_testkit::TempDir::new("vpn-sink-error");
        let unwritable = dir.path().join("missing-dir").join("peers.json");
        let file_error = PeerListFile::new(unwritable)
            .apply(&list(None))
            .unwrap_err();
        let why = file_error.to_string();
        assert_eq!(NodeVpnSinkError::File(file_error).to_string(), why);
    }
}
