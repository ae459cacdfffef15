//! What the WireGuard probe (`confboot-wg-probe`, in a test guest) gives
//! its interface, made the same way by the probe and by the VM test that
//! checks it (`tests/tests/vm_wireguard.rs`): a fixed node key, lists of
//! made-up peers, and a digest of peers as a WireGuard device holds them.

use std::net::{Ipv4Addr, SocketAddr};

use confboot_vpn::{AllowedIp, WireGuardPeerConfig};
use confboot_vpn::{Peer, PeerList, VpnPrivateKey, VpnPublicKey};

/// The probe's interface.
pub const INTERFACE: &str = "wg0";
/// Its UDP port.
pub const LISTEN_PORT: u16 = 51820;
/// Its VPN address and prefix.
pub const ADDRESS: (Ipv4Addr, u8) = (Ipv4Addr::new(10, 118, 0, 1), 16);

/// The probe node's private key (fixed: the test knows its public key).
pub fn node_key() -> VpnPrivateKey {
    VpnPrivateKey::from_bytes(&[0x5a; 32]).expect("a valid key")
}

/// Peer `i`: its key, endpoint and VPN IP all derived from `i`.
pub fn peer(i: u16) -> Peer {
    let mut key = [0x77u8; 32];
    key[..2].copy_from_slice(&i.to_be_bytes());
    let host = i + 2;
    Peer {
        name: format!("peer-{i}"),
        public_endpoint: SocketAddr::from(([192, 0, 2, (i % 250) as u8 + 1], 40000 + i)),
        vpn_ip: Ipv4Addr::new(10, 118, (host >> 8) as u8, host as u8),
        vpn_pub_key: VpnPublicKey::from_bytes(&key).expect("a valid key"),
    }
}

/// The node itself as its list names it (the interface skips it).
pub fn node_itself() -> Peer {
    Peer {
        name: "probe-node".into(),
        public_endpoint: SocketAddr::from(([192, 0, 2, 254], LISTEN_PORT)),
        vpn_ip: ADDRESS.0,
        vpn_pub_key: node_key().public_key(),
    }
}

/// Peers `range`, plus the node itself if `with_itself`.
pub fn peer_list(range: std::ops::Range<u16>, with_itself: bool) -> PeerList {
    let mut peers: Vec<Peer> = range.map(peer).collect();
    if with_itself {
        peers.push(node_itself());
    }
    PeerList::new(peers).expect("a valid list")
}

/// A digest of peers, independent of their order: SHA-256 over one sorted
/// line per peer (key, endpoint, allowed IPs, keepalive), in hex.
pub fn peers_digest(peers: &[WireGuardPeerConfig]) -> String {
    let mut lines: Vec<String> = peers
        .iter()
        .map(|p| {
            let mut ips: Vec<AllowedIp> = p.allowed_ips.clone();
            ips.sort();
            let ips: Vec<String> = ips
                .iter()
                .map(|a| format!("{}/{}", a.address, a.prefix))
                .collect();
            format!(
                "{} {} {} {}\n",
                p.public_key,
                p.endpoint,
                ips.join(","),
                p.persistent_keepalive_secs
            )
        })
        .collect();
    lines.sort();
    let digest = ring::digest::digest(&ring::digest::SHA256, lines.concat().as_bytes());
    confboot_util::hex::encode(digest.as_ref())
}
