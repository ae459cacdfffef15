//! A node's WireGuard interface: created (or taken over) with its key,
//! port and VPN address, given exactly the cluster's peers, read back.

use std::net::Ipv4Addr;

use super::wireguard::{AllowedIp, WireGuardDevice, WireGuardNetlink, WireGuardPeerConfig};
use crate::{PeerList, PeerSink, VpnPrivateKey, VpnPublicKey};
use confboot_sys::netlink::{NetlinkError, Rtnetlink};

/// The link kind of a WireGuard interface.
const WIREGUARD_KIND: &str = "wireguard";
/// Seconds between keepalives to each peer, so that a peer behind NAT
/// stays reachable.
pub const PERSISTENT_KEEPALIVE_SECS: u16 = 25;

/// A WireGuard interface the node owns; as a [`PeerSink`] it makes its
/// peers exactly a [`PeerList`] (less the node itself).
#[derive(Debug)]
pub struct WireGuardInterface {
    route: Rtnetlink,
    wireguard: WireGuardNetlink,
    index: u32,
    name: String,
    private_key: VpnPrivateKey,
    public_key: VpnPublicKey,
    listen_port: u16,
    address: Ipv4Addr,
    prefix: u8,
}

impl WireGuardInterface {
    /// Creates the interface `name` (or takes over a WireGuard interface
    /// of that name; another kind is refused with
    /// [`NetlinkError::WrongLinkKind`]), gives it the key and the UDP port
    /// and no peers, then `address/prefix`, and sets it up.
    pub fn up(
        name: &str,
        private_key: VpnPrivateKey,
        listen_port: u16,
        address: Ipv4Addr,
        prefix: u8,
    ) -> Result<WireGuardInterface, NetlinkError> {
        let mut route = Rtnetlink::open()?;
        let link = match route.link(name)? {
            Some(link) => link,
            None => {
                route.create_link(name, WIREGUARD_KIND)?;
                route
                    .link(name)?
                    .ok_or(NetlinkError::Malformed("the new link is not there"))?
            }
        };
        if link.kind.as_deref() != Some(WIREGUARD_KIND) {
            return Err(NetlinkError::WrongLinkKind);
        }
        let mut wireguard = WireGuardNetlink::open()?;
        wireguard.set_device(link.index, &private_key, listen_port, &[])?;
        route.add_address(link.index, address, prefix)?;
        route.link_up(link.index)?;
        Ok(WireGuardInterface {
            route,
            wireguard,
            index: link.index,
            name: link.name,
            public_key: private_key.public_key(),
            private_key,
            listen_port,
            address,
            prefix,
        })
    }

    /// The node's VPN address on the interface (as [`WireGuardInterface::up`]
    /// or the last [`WireGuardInterface::set_address`] gave it).
    pub fn address(&self) -> Ipv4Addr {
        self.address
    }

    /// Moves the interface to `address/prefix`: the old address is removed
    /// first (deleting a primary address would take a secondary of the
    /// same range with it), then the new one added. Nothing happens when
    /// both are what the interface has.
    pub fn set_address(&mut self, address: Ipv4Addr, prefix: u8) -> Result<(), NetlinkError> {
        if (address, prefix) == (self.address, self.prefix) {
            return Ok(());
        }
        self.route
            .delete_address(self.index, self.address, self.prefix)?;
        self.route.add_address(self.index, address, prefix)?;
        self.address = address;
        self.prefix = prefix;
        Ok(())
    }

    /// The interface's link index.
    pub fn index(&self) -> u32 {
        self.index
    }

    /// The interface's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The node's public key on this interface.
    pub fn public_key(&self) -> VpnPublicKey {
        self.public_key
    }

    /// What the kernel holds for the interface.
    pub fn device(&mut self) -> Result<WireGuardDevice, NetlinkError> {
        self.wireguard.get_device(self.index)
    }

    /// Deletes the interface.
    pub fn delete(mut self) -> Result<(), NetlinkError> {
        self.route.delete_link(self.index)
    }
}

/// The peers a list gives the interface whose key is `own`: every other
/// node, reached at its public endpoint, allowed to send from its VPN IP
/// alone, kept alive every [`PERSISTENT_KEEPALIVE_SECS`].
pub fn peer_configs(peers: &PeerList, own: &VpnPublicKey) -> Vec<WireGuardPeerConfig> {
    peers
        .peers()
        .iter()
        .filter(|p| p.vpn_pub_key != *own)
        .map(|p| WireGuardPeerConfig {
            public_key: p.vpn_pub_key,
            endpoint: p.public_endpoint,
            allowed_ips: vec![AllowedIp::host(p.vpn_ip)],
            persistent_keepalive_secs: PERSISTENT_KEEPALIVE_SECS,
        })
        .collect()
}

impl PeerSink for WireGuardInterface {
    type Error = NetlinkError;

    /// Replaces the interface's peers with `peers` (the node's own entry
    /// skipped). Over several messages (more than about 150 peers) the
    /// later peers appear a moment after the first.
    fn apply(&mut self, peers: &PeerList) -> Result<(), NetlinkError> {
        let configs = peer_configs(peers, &self.public_key);
        self.wireguard
            .set_device(self.index, &self.private_key, self.listen_port, &configs)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Peer, VpnPublicKey};

    fn peer(i: u8) -> Peer {
        Peer {
            name: format!("node-{i}"),
            public_endpoint: ([192, 0, 2, i], 51820).into(),
            vpn_ip: Ipv4Addr::new(10, 118, 0, i),
            vpn_pub_key: VpnPublicKey::from_bytes(&[i; 32]).unwrap(),
        }
    }

    #[test]
    fn the_node_itself_is_skipped_and_each_peer_allowed_its_vpn_ip_alone() {
        let list = PeerList::new(vec![peer(1), peer(2), peer(3)]).unwrap();
        let own = VpnPublicKey::from_bytes(&[2; 32]).unwrap();
        let configs = peer_configs(&list, &own);
        assert_eq!(configs.len(), 2);
        assert_eq!(configs[0].public_key, peer(1).vpn_pub_key);
        assert_eq!(configs[1].endpoint, peer(3).public_endpoint);
        assert_eq!(
            configs[1].allowed_ips,
            vec![AllowedIp::host(Ipv4Addr::new(10, 118, 0, 3))]
        );
        assert!(configs.iter().all(|c| c.persistent_keepalive_secs == 25));
    }
}
