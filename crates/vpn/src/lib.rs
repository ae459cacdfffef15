//! The cluster's VPN as data: every node has a WireGuard key
//! pair and an address inside the cluster's VPN range; a control plane keeps
//! the list of peers `{name, public endpoint, VPN IP, VPN public key}` under
//! a version, and each node polls it (`vpn.API/GetUpdate`) and converges.
//!
//! This module knows no sockets and no netlink: it checks what a control
//! plane sends ([`PeerList::from_update`]), keeps a node's last good list
//! while updates are refused or not applied ([`PeerUpdates`],
//! [`poll_once`]), times the polls ([`PollTimer`]), makes a node's key pair
//! ([`VpnPrivateKey`]) and allots VPN addresses ([`VpnNetwork::allot`]). What the host may lie about is bounded here: a
//! list of more than [`MAX_PEERS`], a name that is not a node name, a key
//! that is not 32 bytes (or is all zeros), an endpoint that is not `IP:port`,
//! a VPN IP outside the cluster's range, or two peers sharing a name, an
//! address or a key are refused whole, and the node keeps the list it had.
//!
//! ```
//! use confboot_vpn::{PeerUpdates, VpnNetwork};
//! use confboot_proto::vpn::{GetUpdateResponse, Peer};
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let network: VpnNetwork = "10.118.0.0/16".parse()?;
//! let mut updates = PeerUpdates::new(network);
//! let response = GetUpdateResponse {
//!     resource_version: 7,
//!     peers: vec![Peer {
//!         name: "worker-1".into(),
//!         public_endpoint: "192.0.2.10:51820".into(),
//!         vpn_ip: "10.118.0.2".into(),
//!         vpn_pub_key: vec![7; 32],
//!     }],
//!     signature: Vec::new(),
//! };
//! // Checked, then (once the interface has it) recorded.
//! let list = updates.check(&response)?.expect("a new version");
//! assert_eq!(list.peers()[0].vpn_ip.to_string(), "10.118.0.2");
//! updates.commit(response.resource_version, list);
//! assert_eq!(updates.request().resource_version, 7);
//! // The same version again changes nothing.
//! let same = GetUpdateResponse { resource_version: 7, ..Default::default() };
//! assert!(updates.check(&same)?.is_none());
//! # Ok(())
//! # }
//! ```

mod control_plane;
mod key;
mod network;
mod node_file;
mod own;
mod peer_file;
mod peers;
mod poll;
mod update;
pub mod wireguard;
mod wireguard_interface;

pub use control_plane::{AttemptError, ControlPlaneError, ControlPlaneSource};
pub use key::{VPN_KEY_BYTES, VpnPrivateKey, VpnPublicKey};
pub use network::VpnNetwork;
pub use node_file::{
    MAX_CONTROL_PLANES, MAX_NODE_VPN_FILE_BYTES, NodeVpnFile, NodeVpnFileError,
    write_private_atomically,
};
pub use own::{OWN_RECORD_PROOF_BYTES, OwnRecordKey};
pub use peer_file::{PeerListFile, PeerListFileError};
pub use peers::{
    MAX_PEERS, MAX_UPDATE_BYTES, Peer, PeerList, check_peer_name, parse_public_endpoint,
};
pub use poll::{PeerSink, PollOutcome, PollTimer, UpdateSource, poll_once};
pub use update::PeerUpdates;
pub use wireguard::{
    AllowedIp, MAX_ALLOWED_IPS_PER_PEER, MAX_DEVICE_PEERS, MAX_SET_DEVICE_BYTES, WireGuardDevice,
    WireGuardNetlink, WireGuardPeer, WireGuardPeerConfig, parse_device, set_device_requests,
};
pub use wireguard_interface::{PERSISTENT_KEEPALIVE_SECS, WireGuardInterface, peer_configs};

/// The most bytes of a name or endpoint that an error message quotes.
const QUOTE_BYTES: usize = 64;

/// Why a VPN value or a peer list is refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum VpnError {
    /// A public key that is not 32 bytes, or is all zeros.
    #[error(
        "VPN public key of {len} bytes (want {}, not all zeros)",
        VPN_KEY_BYTES
    )]
    InvalidKey {
        /// The key's length in bytes.
        len: usize,
    },
    /// A VPN range that is not `a.b.c.d/prefix` with a prefix of 8 to 30
    /// and no host bits set.
    #[error("VPN range {0:?}: want a.b.c.d/8..30 with no host bits set")]
    InvalidNetwork(String),
    /// A peer's name is not a Kubernetes node name.
    #[error("peer name {0:?} is not a node name")]
    InvalidName(String),
    /// A peer's public endpoint is not `IP:port` with a port other than 0.
    #[error("peer endpoint {0:?}: want IP:port")]
    InvalidEndpoint(String),
    /// A peer's VPN IP does not parse, or is outside the range or is its
    /// network or broadcast address.
    #[error("VPN IP {0:?} is not a host address of the cluster's range")]
    VpnIpOutsideRange(String),
    /// More than [`MAX_PEERS`] peers.
    #[error("{0} peers (at most {max})", max = MAX_PEERS)]
    TooManyPeers(usize),
    /// Two peers share a name, a VPN IP or a key.
    #[error("two peers share the {what} {value}")]
    Duplicate {
        /// What is shared: `name`, `VPN IP` or `key`.
        what: &'static str,
        /// The shared value, for the log (public data).
        value: String,
    },
    /// No VPN address is left in the range.
    #[error("no VPN address is left in the range")]
    RangeExhausted,
    /// A private key that is not 32 bytes (44 base64 characters) or is all
    /// zeros (nothing of it is quoted).
    #[error("VPN private key: want 32 bytes (44 base64 characters), not all zeros")]
    InvalidPrivateKey,
    /// The system's random number generator failed.
    #[error("no randomness for a VPN key")]
    NoRandomness,
}

/// At most [`QUOTE_BYTES`] characters of `s`, for an error message.
fn quote(s: &str) -> String {
    s.chars().take(QUOTE_BYTES).collect()
}
