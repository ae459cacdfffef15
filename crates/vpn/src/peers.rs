//! Peers of the VPN and a checked list of them.

use std::collections::BTreeSet;
use std::net::{Ipv4Addr, SocketAddr};

use confboot_proto::vpn as wire;

use super::{VpnError, VpnNetwork, VpnPublicKey, quote};
use confboot_cluster::kubelet_cert::check_node_name;

/// The most peers one update may carry.
pub const MAX_PEERS: usize = 1024;

/// The largest encoded `GetUpdateResponse` a node reads: [`MAX_PEERS`]
/// peers of the longest name (253), endpoint (47) and address (15), a key,
/// the control plane's signature (64 bytes) and field overhead.
pub const MAX_UPDATE_BYTES: usize = MAX_PEERS * 384 + 16 + 66;

/// Checks a peer's name: a Kubernetes node name.
pub fn check_peer_name(name: &str) -> Result<(), VpnError> {
    check_node_name(name).map_err(|_| VpnError::InvalidName(quote(name)))
}

/// Parses a peer's public endpoint: `IP:port`, the port not 0 and the
/// address not unspecified.
pub fn parse_public_endpoint(text: &str) -> Result<SocketAddr, VpnError> {
    text.parse()
        .ok()
        .filter(|a: &SocketAddr| a.port() != 0 && !a.ip().is_unspecified())
        .ok_or_else(|| VpnError::InvalidEndpoint(quote(text)))
}

/// One node of the VPN, checked.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Peer {
    /// The node's name (a Kubernetes node name).
    pub name: String,
    /// Where the node's WireGuard listens, as other nodes reach it.
    pub public_endpoint: SocketAddr,
    /// The node's address inside the VPN.
    pub vpn_ip: Ipv4Addr,
    /// The node's WireGuard public key.
    pub vpn_pub_key: VpnPublicKey,
}

impl Peer {
    /// Checks a peer as a control plane sends it, against the cluster's
    /// VPN range.
    pub fn from_wire(peer: &wire::Peer, network: &VpnNetwork) -> Result<Peer, VpnError> {
        check_peer_name(&peer.name)?;
        let public_endpoint = parse_public_endpoint(&peer.public_endpoint)?;
        let vpn_ip: Ipv4Addr = peer
            .vpn_ip
            .parse()
            .ok()
            .filter(|ip| network.is_host(*ip))
            .ok_or_else(|| VpnError::VpnIpOutsideRange(quote(&peer.vpn_ip)))?;
        let vpn_pub_key = VpnPublicKey::from_bytes(&peer.vpn_pub_key)?;
        Ok(Peer {
            name: peer.name.clone(),
            public_endpoint,
            vpn_ip,
            vpn_pub_key,
        })
    }

    /// The peer as it goes on the wire.
    pub fn to_wire(&self) -> wire::Peer {
        wire::Peer {
            name: self.name.clone(),
            public_endpoint: self.public_endpoint.to_string(),
            vpn_ip: self.vpn_ip.to_string(),
            vpn_pub_key: self.vpn_pub_key.as_bytes().to_vec(),
        }
    }
}

/// A checked peer list, sorted by name: at most [`MAX_PEERS`], each peer
/// valid, no two sharing a name, a VPN IP or a key.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PeerList {
    peers: Vec<Peer>,
}

impl PeerList {
    /// Checks the peers of an update; one bad peer refuses the whole list.
    pub fn from_update(peers: &[wire::Peer], network: &VpnNetwork) -> Result<PeerList, VpnError> {
        if peers.len() > MAX_PEERS {
            return Err(VpnError::TooManyPeers(peers.len()));
        }
        let checked = peers
            .iter()
            .map(|p| Peer::from_wire(p, network))
            .collect::<Result<Vec<_>, _>>()?;
        PeerList::new(checked)
    }

    /// Checks already parsed peers for bounds and duplicates.
    pub fn new(mut peers: Vec<Peer>) -> Result<PeerList, VpnError> {
        if peers.len() > MAX_PEERS {
            return Err(VpnError::TooManyPeers(peers.len()));
        }
        let (mut names, mut ips, mut keys) = (BTreeSet::new(), BTreeSet::new(), BTreeSet::new());
        for p in &peers {
            let duplicate = |what, value: String| VpnError::Duplicate { what, value };
            if !names.insert(p.name.as_str()) {
                return Err(duplicate("name", p.name.clone()));
            }
            if !ips.insert(p.vpn_ip) {
                return Err(duplicate("VPN IP", p.vpn_ip.to_string()));
            }
            if !keys.insert(p.vpn_pub_key) {
                return Err(duplicate("key", p.vpn_pub_key.to_string()));
            }
        }
        peers.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(PeerList { peers })
    }

    /// The peers, sorted by name.
    pub fn peers(&self) -> &[Peer] {
        &self.peers
    }

    /// The peer named `name`.
    pub fn get(&self, name: &str) -> Option<&Peer> {
        self.peers
            .binary_search_by(|p| p.name.as_str().cmp(name))
            .ok()
            .map(|i| &self.peers[i])
    }

    /// The VPN addresses in use (for [`VpnNetwork::allot`]).
    pub fn vpn_ips(&self) -> BTreeSet<Ipv4Addr> {
        self.peers.iter().map(|p| p.vpn_ip).collect()
    }

    /// The list as it goes on the wire.
    pub fn to_wire(&self) -> Vec<wire::Peer> {
        self.peers.iter().map(Peer::to_wire).collect()
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;

    pub fn wire_peer(i: u8) -> wire::Peer {
        wire::Peer {
            name: format!("node-{i}"),
            public_endpoint: format!("192.0.2.{i}:51820"),
            vpn_ip: format!("10.118.0.{i}"),
            vpn_pub_key: vec![i; 32],
        }
    }

    /// A change to one peer, and a word the refusal must contain.
    type Spoil = (fn(&mut wire::Peer), &'static str);

    fn network() -> VpnNetwork {
        "10.118.0.0/24".parse().unwrap()
    }

    #[test]
    fn a_valid_list_round_trips_sorted() {
        let wire = vec![wire_peer(3), wire_peer(1), wire_peer(2)];
        let list = PeerList::from_update(&wire, &network()).unwrap();
        let names: Vec<&str> = list.peers().iter().map(|p| p.name.as_str()).collect();
        assert_eq!(names, ["node-1", "node-2", "node-3"]);
        assert_eq!(
            list.get("node-2").unwrap().vpn_ip,
            Ipv4Addr::new(10, 118, 0, 2)
        );
        assert!(list.get("node-4").is_none());
        assert_eq!(
            PeerList::from_update(&list.to_wire(), &network()).unwrap(),
            list
        );
    }

    #[test]
    fn each_bad_field_refuses_the_whole_list() {
        let cases: Vec<Spoil> = vec![
            (|p| p.name = "Node_1".into(), "not a node name"),
            (|p| p.name = String::new(), "not a node name"),
            (|p| p.public_endpoint = "192.0.2.1".into(), "want IP:port"),
            (
                |p| p.public_endpoint = "example.com:51820".into(),
                "want IP:port",
            ),
            (|p| p.public_endpoint = "192.0.2.1:0".into(), "want IP:port"),
            (
                |p| p.public_endpoint = "0.0.0.0:51820".into(),
                "want IP:port",
            ),
            (|p| p.vpn_ip = "10.119.0.1".into(), "range"),
            (|p| p.vpn_ip = "10.118.0.0".into(), "range"),
            (|p| p.vpn_ip = "10.118.0.255".into(), "range"),
            (|p| p.vpn_ip = "10.118.0.1/24".into(), "range"),
            (|p| p.vpn_pub_key = vec![1; 31], "32"),
            (|p| p.vpn_pub_key = vec![0; 32], "32"),
        ];
        for (spoil, why) in cases {
            let mut wire = vec![wire_peer(1), wire_peer(2)];
            spoil(&mut wire[1]);
            let e = PeerList::from_update(&wire, &network()).unwrap_err();
            assert!(e.to_string().contains(why), "{e} lacks {why}");
        }
    }

    #[test]
    fn shared_names_addresses_and_keys_are_refused() {
        let cases: Vec<Spoil> = vec![
            (|p| p.name = "node-1".into(), "name"),
            (|p| p.vpn_ip = "10.118.0.1".into(), "VPN IP"),
            (|p| p.vpn_pub_key = vec![1; 32], "key"),
        ];
        for (spoil, what) in cases {
            let mut wire = vec![wire_peer(1), wire_peer(2)];
            spoil(&mut wire[1]);
            match PeerList::from_update(&wire, &network()) {
                Err(VpnError::Duplicate { what: w, .. }) => assert_eq!(w, what),
                other => panic!("{what}: {other:?}"),
            }
        }
    }

    #[test]
    fn lists_over_the_bound_are_refused() {
        let network: VpnNetwork = "10.0.0.0/16".parse().unwrap();
        let peer = |i: usize| wire::Peer {
            name: format!("node-{i}"),
            public_endpoint: "192.0.2.1:51820".into(),
            vpn_ip: Ipv4Addr::from(u32::from(Ipv4Addr::new(10, 0, 0, 1)) + i as u32).to_string(),
            vpn_pub_key: [(i as u32 + 1).to_le_bytes().as_slice(), &[9; 28]].concat(),
        };
        let full: Vec<wire::Peer> = (0..MAX_PEERS).map(peer).collect();
        assert_eq!(
            PeerList::from_update(&full, &network)
                .unwrap()
                .peers()
                .len(),
            MAX_PEERS
        );
        let over: Vec<wire::Peer> = (0..=MAX_PEERS).map(peer).collect();
        assert_eq!(
            PeerList::from_update(&over, &network),
            Err(VpnError::TooManyPeers(MAX_PEERS + 1))
        );
        let encoded = confboot_proto::Message::encoded_len(&wire::GetUpdateResponse {
            resource_version: u64::MAX,
            peers: (0..MAX_PEERS)
                .map(|i| wire::Peer {
                    name: format!("{}-{i:04}", "n".repeat(248)),
                    public_endpoint: "[ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff]:65535".into(),
                    vpn_ip: "255.255.255.255".into(),
                    vpn_pub_key: vec![1; 32],
                })
                .collect(),
            signature: vec![1; 64],
        });
        assert!(
            encoded <= MAX_UPDATE_BYTES,
            "{encoded} > {MAX_UPDATE_BYTES}"
        );
    }
}
