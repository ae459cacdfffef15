//! WireGuard's generic netlink family (linux/wireguard.h): a device's key,
//! port and peers set (`WG_CMD_SET_DEVICE`, split over as many messages as
//! the peers need) and read back (`WG_CMD_GET_DEVICE`, a dump whose
//! messages are merged into one [`WireGuardDevice`]).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};
use std::time::Duration;

use zeroize::Zeroizing;

use crate::{VpnPrivateKey, VpnPublicKey};
use confboot_sys::netlink::NetlinkError;
use confboot_sys::netlink::generic::{GenericNetlink, genl_body, genl_payload};
use confboot_sys::netlink::message::{
    Attribute, NLM_F_ACK, NLM_F_DUMP, begin_nest, end_nest, put_attribute,
};

/// `WG_GENL_NAME`.
const WG_GENL_NAME: &str = "wireguard";
const WG_GENL_VERSION: u8 = 1;
const WG_CMD_GET_DEVICE: u8 = 0;
const WG_CMD_SET_DEVICE: u8 = 1;
const WGDEVICE_F_REPLACE_PEERS: u32 = 1;
const WGDEVICE_A_IFINDEX: u16 = 1;
const WGDEVICE_A_IFNAME: u16 = 2;
const WGDEVICE_A_PRIVATE_KEY: u16 = 3;
const WGDEVICE_A_PUBLIC_KEY: u16 = 4;
const WGDEVICE_A_FLAGS: u16 = 5;
const WGDEVICE_A_LISTEN_PORT: u16 = 6;
const WGDEVICE_A_FWMARK: u16 = 7;
const WGDEVICE_A_PEERS: u16 = 8;
const WGPEER_F_REPLACE_ALLOWEDIPS: u32 = 2;
const WGPEER_A_PUBLIC_KEY: u16 = 1;
const WGPEER_A_FLAGS: u16 = 3;
const WGPEER_A_ENDPOINT: u16 = 4;
const WGPEER_A_PERSISTENT_KEEPALIVE_INTERVAL: u16 = 5;
const WGPEER_A_LAST_HANDSHAKE_TIME: u16 = 6;
const WGPEER_A_RX_BYTES: u16 = 7;
const WGPEER_A_TX_BYTES: u16 = 8;
const WGPEER_A_ALLOWEDIPS: u16 = 9;
const WGALLOWEDIP_A_FAMILY: u16 = 1;
const WGALLOWEDIP_A_IPADDR: u16 = 2;
const WGALLOWEDIP_A_CIDR_MASK: u16 = 3;
const AF_INET: u16 = 2;
const AF_INET6: u16 = 10;

/// The most bytes of one `WG_CMD_SET_DEVICE` message's body: peers beyond
/// it go in the next message (a nest's length is 16 bits, and the kernel
/// takes a request whole into one buffer).
pub const MAX_SET_DEVICE_BYTES: usize = 16 * 1024;
/// The most peers a device may be given or read back with.
pub const MAX_DEVICE_PEERS: usize = 2 * crate::MAX_PEERS;
/// The most allowed IPs of one peer, given or read back.
pub const MAX_ALLOWED_IPS_PER_PEER: usize = 64;

/// An address range a peer may send from and is sent to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct AllowedIp {
    /// The range's address.
    pub address: IpAddr,
    /// Its prefix length (at most 32 for IPv4, 128 for IPv6).
    pub prefix: u8,
}

impl AllowedIp {
    /// One IPv4 address: `address/32`.
    pub fn host(address: Ipv4Addr) -> AllowedIp {
        AllowedIp {
            address: IpAddr::V4(address),
            prefix: 32,
        }
    }
}

/// A peer as it is given to a device.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WireGuardPeerConfig {
    /// Its public key.
    pub public_key: VpnPublicKey,
    /// Where it is reached.
    pub endpoint: SocketAddr,
    /// What it may send from (replacing what it had).
    pub allowed_ips: Vec<AllowedIp>,
    /// Seconds between keepalives (0: none).
    pub persistent_keepalive_secs: u16,
}

/// A peer as the kernel holds it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WireGuardPeer {
    /// Its public key.
    pub public_key: VpnPublicKey,
    /// Where it is reached, if known.
    pub endpoint: Option<SocketAddr>,
    /// What it may send from.
    pub allowed_ips: Vec<AllowedIp>,
    /// Seconds between keepalives (0: none).
    pub persistent_keepalive_secs: u16,
    /// The last handshake, since the Unix epoch (`None`: never).
    pub last_handshake: Option<Duration>,
    /// Bytes received from it.
    pub rx_bytes: u64,
    /// Bytes sent to it.
    pub tx_bytes: u64,
}

/// A WireGuard device as the kernel holds it (the private key is never
/// printed and is zeroized when dropped).
#[derive(Debug)]
pub struct WireGuardDevice {
    /// Its link index.
    pub index: u32,
    /// Its name.
    pub name: String,
    /// Its private key, if set (and the reader may see it).
    pub private_key: Option<VpnPrivateKey>,
    /// Its public key, if a private key is set.
    pub public_key: Option<VpnPublicKey>,
    /// Its UDP port.
    pub listen_port: u16,
    /// Its firewall mark.
    pub fwmark: u32,
    /// Its peers, in the kernel's order.
    pub peers: Vec<WireGuardPeer>,
}

/// The bodies (generic netlink header and attributes) of the
/// `WG_CMD_SET_DEVICE` messages that give the device `index` the private
/// key, the port and exactly `peers`: the first sets the key and port and
/// replaces all peers (`WGDEVICE_F_REPLACE_PEERS`), the later ones only
/// add, each at most [`MAX_SET_DEVICE_BYTES`]. Each peer replaces its
/// allowed IPs (`WGPEER_F_REPLACE_ALLOWEDIPS`).
pub fn set_device_requests(
    index: u32,
    private_key: &VpnPrivateKey,
    listen_port: u16,
    peers: &[WireGuardPeerConfig],
) -> Result<Vec<Zeroizing<Vec<u8>>>, NetlinkError> {
    if peers.len() > MAX_DEVICE_PEERS {
        return Err(NetlinkError::TooLarge("peers of one device"));
    }
    let mut first = Zeroizing::new(Vec::with_capacity(MAX_SET_DEVICE_BYTES));
    put_attribute(&mut first, WGDEVICE_A_IFINDEX, &index.to_ne_bytes());
    put_attribute(&mut first, WGDEVICE_A_PRIVATE_KEY, private_key.expose());
    put_attribute(
        &mut first,
        WGDEVICE_A_LISTEN_PORT,
        &listen_port.to_ne_bytes(),
    );
    put_attribute(
        &mut first,
        WGDEVICE_A_FLAGS,
        &WGDEVICE_F_REPLACE_PEERS.to_ne_bytes(),
    );
    let mut messages = Vec::new();
    let mut current = first;
    let mut nest = begin_nest(&mut current, WGDEVICE_A_PEERS);
    let mut in_current = 0usize;
    for peer in peers {
        let encoded = encode_peer(peer)?;
        if in_current > 0 && 4 + current.len() + encoded.len() > MAX_SET_DEVICE_BYTES {
            end_nest(&mut current, nest);
            messages.push(Zeroizing::new(genl_body(
                WG_CMD_SET_DEVICE,
                WG_GENL_VERSION,
                &current,
            )));
            current = Zeroizing::new(Vec::with_capacity(MAX_SET_DEVICE_BYTES));
            put_attribute(&mut current, WGDEVICE_A_IFINDEX, &index.to_ne_bytes());
            nest = begin_nest(&mut current, WGDEVICE_A_PEERS);
            in_current = 0;
        }
        current.extend_from_slice(&encoded);
        in_current += 1;
    }
    end_nest(&mut current, nest);
    messages.push(Zeroizing::new(genl_body(
        WG_CMD_SET_DEVICE,
        WG_GENL_VERSION,
        &current,
    )));
    Ok(messages)
}

/// One peer's nest: key, flags, endpoint, keepalive, allowed IPs.
fn encode_peer(peer: &WireGuardPeerConfig) -> Result<Vec<u8>, NetlinkError> {
    if peer.allowed_ips.len() > MAX_ALLOWED_IPS_PER_PEER {
        return Err(NetlinkError::TooLarge("allowed IPs of one peer"));
    }
    let mut b = Vec::with_capacity(128);
    let nest = begin_nest(&mut b, 0);
    put_attribute(&mut b, WGPEER_A_PUBLIC_KEY, peer.public_key.as_bytes());
    put_attribute(
        &mut b,
        WGPEER_A_FLAGS,
        &WGPEER_F_REPLACE_ALLOWEDIPS.to_ne_bytes(),
    );
    put_attribute(&mut b, WGPEER_A_ENDPOINT, &sockaddr(peer.endpoint));
    put_attribute(
        &mut b,
        WGPEER_A_PERSISTENT_KEEPALIVE_INTERVAL,
        &peer.persistent_keepalive_secs.to_ne_bytes(),
    );
    let ips = begin_nest(&mut b, WGPEER_A_ALLOWEDIPS);
    for ip in &peer.allowed_ips {
        let one = begin_nest(&mut b, 0);
        let (family, octets): (u16, Vec<u8>) = match ip.address {
            IpAddr::V4(a) => (AF_INET, a.octets().to_vec()),
            IpAddr::V6(a) => (AF_INET6, a.octets().to_vec()),
        };
        put_attribute(&mut b, WGALLOWEDIP_A_FAMILY, &family.to_ne_bytes());
        put_attribute(&mut b, WGALLOWEDIP_A_IPADDR, &octets);
        put_attribute(&mut b, WGALLOWEDIP_A_CIDR_MASK, &[ip.prefix]);
        end_nest(&mut b, one);
    }
    end_nest(&mut b, ips);
    end_nest(&mut b, nest);
    Ok(b)
}

/// `struct sockaddr_in` (16 bytes) or `struct sockaddr_in6` (28 bytes):
/// family in host order, port and address in network order.
fn sockaddr(endpoint: SocketAddr) -> Vec<u8> {
    let mut b = Vec::with_capacity(28);
    match endpoint {
        SocketAddr::V4(a) => {
            b.extend_from_slice(&AF_INET.to_ne_bytes());
            b.extend_from_slice(&a.port().to_be_bytes());
            b.extend_from_slice(&a.ip().octets());
            b.extend_from_slice(&[0; 8]);
        }
        SocketAddr::V6(a) => {
            b.extend_from_slice(&AF_INET6.to_ne_bytes());
            b.extend_from_slice(&a.port().to_be_bytes());
            b.extend_from_slice(&a.flowinfo().to_be_bytes());
            b.extend_from_slice(&a.ip().octets());
            b.extend_from_slice(&a.scope_id().to_ne_bytes());
        }
    }
    b
}

fn parse_sockaddr(value: &[u8]) -> Result<SocketAddr, NetlinkError> {
    let bad = NetlinkError::Malformed("peer endpoint");
    let family = match value {
        [a, b, ..] => u16::from_ne_bytes([*a, *b]),
        _ => return Err(bad),
    };
    match (family, value.len()) {
        (AF_INET, 16) => {
            let port = u16::from_be_bytes([value[2], value[3]]);
            let ip = Ipv4Addr::new(value[4], value[5], value[6], value[7]);
            Ok(SocketAddr::V4(SocketAddrV4::new(ip, port)))
        }
        (AF_INET6, 28) => {
            let port = u16::from_be_bytes([value[2], value[3]]);
            let flow = u32::from_be_bytes([value[4], value[5], value[6], value[7]]);
            let octets: [u8; 16] = value[8..24].try_into().map_err(|_| bad.clone())?;
            let scope = u32::from_ne_bytes([value[24], value[25], value[26], value[27]]);
            Ok(SocketAddr::V6(SocketAddrV6::new(
                Ipv6Addr::from(octets),
                port,
                flow,
                scope,
            )))
        }
        _ => Err(bad),
    }
}

/// Parses the bodies of a `WG_CMD_GET_DEVICE` dump into one device: the
/// device's attributes come with the first message, its peers are spread
/// over all of them, and a peer whose allowed IPs did not fit continues
/// (same key) at the start of the next message. At most
/// [`MAX_DEVICE_PEERS`] peers and [`MAX_ALLOWED_IPS_PER_PEER`] allowed IPs
/// each.
pub fn parse_device<'a>(
    bodies: impl IntoIterator<Item = &'a [u8]>,
) -> Result<WireGuardDevice, NetlinkError> {
    let mut device = WireGuardDevice {
        index: 0,
        name: String::new(),
        private_key: None,
        public_key: None,
        listen_port: 0,
        fwmark: 0,
        peers: Vec::new(),
    };
    let mut messages = 0usize;
    for body in bodies {
        messages += 1;
        for a in confboot_sys::netlink::message::attributes(genl_payload(body, WG_CMD_GET_DEVICE)?)?
        {
            match a.kind {
                WGDEVICE_A_IFINDEX => device.index = a.u32()?,
                WGDEVICE_A_IFNAME => device.name = a.string()?.to_string(),
                WGDEVICE_A_PRIVATE_KEY => {
                    let key = Zeroizing::new(a.array::<32>()?);
                    // An all-zero key is the kernel's "none".
                    device.private_key = VpnPrivateKey::from_bytes(key.as_slice()).ok();
                }
                WGDEVICE_A_PUBLIC_KEY => {
                    device.public_key = VpnPublicKey::from_bytes(&a.array::<32>()?).ok()
                }
                WGDEVICE_A_LISTEN_PORT => device.listen_port = a.u16()?,
                WGDEVICE_A_FWMARK => device.fwmark = a.u32()?,
                WGDEVICE_A_PEERS => {
                    for p in a.nested()? {
                        merge_peer(&mut device.peers, parse_peer(&p)?)?;
                    }
                }
                _ => {}
            }
        }
    }
    if messages == 0 || device.index == 0 {
        return Err(NetlinkError::Malformed("no WireGuard device"));
    }
    Ok(device)
}

/// Adds `peer`, or continues the last peer if it has the same key.
fn merge_peer(peers: &mut Vec<WireGuardPeer>, peer: WireGuardPeer) -> Result<(), NetlinkError> {
    match peers.last_mut() {
        Some(last) if last.public_key == peer.public_key => {
            if last.allowed_ips.len() + peer.allowed_ips.len() > MAX_ALLOWED_IPS_PER_PEER {
                return Err(NetlinkError::TooLarge("allowed IPs of one peer"));
            }
            last.allowed_ips.extend(peer.allowed_ips);
        }
        _ => {
            if peers.len() == MAX_DEVICE_PEERS {
                return Err(NetlinkError::TooLarge("peers of one device"));
            }
            peers.push(peer);
        }
    }
    Ok(())
}

fn parse_peer(nest: &Attribute<'_>) -> Result<WireGuardPeer, NetlinkError> {
    let mut key = None;
    let mut endpoint = None;
    let mut allowed_ips = Vec::new();
    let mut persistent_keepalive_secs = 0;
    let mut last_handshake = None;
    let (mut rx_bytes, mut tx_bytes) = (0, 0);
    for a in nest.nested()? {
        match a.kind {
            WGPEER_A_PUBLIC_KEY => {
                key = Some(
                    VpnPublicKey::from_bytes(a.value)
                        .map_err(|_| NetlinkError::Malformed("peer public key"))?,
                )
            }
            WGPEER_A_ENDPOINT => endpoint = Some(parse_sockaddr(a.value)?),
            WGPEER_A_PERSISTENT_KEEPALIVE_INTERVAL => persistent_keepalive_secs = a.u16()?,
            WGPEER_A_LAST_HANDSHAKE_TIME => last_handshake = parse_timespec(&a)?,
            WGPEER_A_RX_BYTES => rx_bytes = a.u64()?,
            WGPEER_A_TX_BYTES => tx_bytes = a.u64()?,
            WGPEER_A_ALLOWEDIPS => {
                for ip in a.nested()? {
                    if allowed_ips.len() == MAX_ALLOWED_IPS_PER_PEER {
                        return Err(NetlinkError::TooLarge("allowed IPs of one peer"));
                    }
                    allowed_ips.push(parse_allowed_ip(&ip)?);
                }
            }
            _ => {}
        }
    }
    Ok(WireGuardPeer {
        public_key: key.ok_or(NetlinkError::Malformed("peer without a key"))?,
        endpoint,
        allowed_ips,
        persistent_keepalive_secs,
        last_handshake,
        rx_bytes,
        tx_bytes,
    })
}

/// `struct __kernel_timespec`; all zeros is "never".
fn parse_timespec(a: &Attribute<'_>) -> Result<Option<Duration>, NetlinkError> {
    let t = a.array::<16>()?;
    let secs = i64::from_ne_bytes(t[..8].try_into().unwrap_or([0; 8]));
    let nanos = i64::from_ne_bytes(t[8..].try_into().unwrap_or([0; 8]));
    if secs == 0 && nanos == 0 {
        return Ok(None);
    }
    match (u64::try_from(secs), u32::try_from(nanos)) {
        (Ok(s), Ok(n)) if n < 1_000_000_000 => Ok(Some(Duration::new(s, n))),
        _ => Err(NetlinkError::Malformed("handshake time")),
    }
}

fn parse_allowed_ip(nest: &Attribute<'_>) -> Result<AllowedIp, NetlinkError> {
    let (mut family, mut address, mut prefix) = (None, None, None);
    for a in nest.nested()? {
        match a.kind {
            WGALLOWEDIP_A_FAMILY => family = Some(a.u16()?),
            WGALLOWEDIP_A_IPADDR => address = Some(a.value),
            WGALLOWEDIP_A_CIDR_MASK => prefix = Some(a.u8()?),
            _ => {}
        }
    }
    let bad = NetlinkError::Malformed("allowed IP");
    let prefix = prefix.ok_or(bad.clone())?;
    let address = match (family, address) {
        (Some(AF_INET), Some(a)) if prefix <= 32 => IpAddr::V4(Ipv4Addr::from(
            <[u8; 4]>::try_from(a).map_err(|_| bad.clone())?,
        )),
        (Some(AF_INET6), Some(a)) if prefix <= 128 => IpAddr::V6(Ipv6Addr::from(
            <[u8; 16]>::try_from(a).map_err(|_| bad.clone())?,
        )),
        _ => return Err(bad),
    };
    Ok(AllowedIp { address, prefix })
}

/// WireGuard's generic netlink family, its id resolved.
#[derive(Debug)]
pub struct WireGuardNetlink {
    socket: GenericNetlink,
    family: u16,
}

impl WireGuardNetlink {
    /// Opens a generic netlink socket and resolves the `wireguard` family
    /// (`Refused(ENOENT)` without the module).
    pub fn open() -> Result<WireGuardNetlink, NetlinkError> {
        let mut socket = GenericNetlink::open()?;
        let family = socket.family_id(WG_GENL_NAME)?;
        Ok(WireGuardNetlink { socket, family })
    }

    /// Gives the device `index` the key, the port and exactly `peers`
    /// ([`set_device_requests`]), one acknowledged message after another.
    pub fn set_device(
        &mut self,
        index: u32,
        private_key: &VpnPrivateKey,
        listen_port: u16,
        peers: &[WireGuardPeerConfig],
    ) -> Result<(), NetlinkError> {
        for body in set_device_requests(index, private_key, listen_port, peers)? {
            self.socket.request(self.family, NLM_F_ACK, &body)?;
        }
        Ok(())
    }

    /// What the kernel holds for the device `index`.
    pub fn get_device(&mut self, index: u32) -> Result<WireGuardDevice, NetlinkError> {
        let mut attrs = Vec::new();
        put_attribute(&mut attrs, WGDEVICE_A_IFINDEX, &index.to_ne_bytes());
        let body = genl_body(WG_CMD_GET_DEVICE, WG_GENL_VERSION, &attrs);
        let reply = self.socket.request(self.family, NLM_F_DUMP, &body)?;
        let device = parse_device(
            reply
                .bodies()
                .filter(|(k, _)| *k == self.family)
                .map(|(_, b)| b),
        )?;
        if device.index != index {
            return Err(NetlinkError::Malformed("not the device asked for"));
        }
        Ok(device)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use confboot_sys::netlink::message::attributes;

    fn key(b: u8) -> VpnPublicKey {
        VpnPublicKey::from_bytes(&[b; 32]).unwrap()
    }

    fn config(i: u16) -> WireGuardPeerConfig {
        let mut k = [0u8; 32];
        k[..2].copy_from_slice(&(i + 1).to_be_bytes());
        WireGuardPeerConfig {
            public_key: VpnPublicKey::from_bytes(&k).unwrap(),
            endpoint: SocketAddr::from(([192, 0, 2, 10], 51820)),
            allowed_ips: vec![AllowedIp::host(Ipv4Addr::new(
                10,
                118,
                (i >> 8) as u8,
                i as u8,
            ))],
            persistent_keepalive_secs: 25,
        }
    }

    fn ne16(v: u16) -> [u8; 2] {
        v.to_ne_bytes()
    }

    /// One peer, byte by byte as linux/wireguard.h lays it out.
    #[test]
    fn a_peer_has_the_layout_of_wireguard_h() {
        let peer = WireGuardPeerConfig {
            public_key: key(0x11),
            endpoint: SocketAddr::from(([192, 0, 2, 10], 51820)),
            allowed_ips: vec![AllowedIp::host(Ipv4Addr::new(10, 118, 0, 2))],
            persistent_keepalive_secs: 25,
        };
        let mut want = Vec::new();
        // The peer's nest (type 0 | NLA_F_NESTED), 108 bytes.
        want.extend_from_slice(&ne16(108));
        want.extend_from_slice(&ne16(0x8000));
        // WGPEER_A_PUBLIC_KEY.
        want.extend_from_slice(&ne16(36));
        want.extend_from_slice(&ne16(1));
        want.extend_from_slice(&[0x11; 32]);
        // WGPEER_A_FLAGS = WGPEER_F_REPLACE_ALLOWEDIPS.
        want.extend_from_slice(&ne16(8));
        want.extend_from_slice(&ne16(3));
        want.extend_from_slice(&2u32.to_ne_bytes());
        // WGPEER_A_ENDPOINT: sockaddr_in, AF_INET, port 51820 = 0xca6c
        // big-endian, 192.0.2.10, 8 bytes of zero.
        want.extend_from_slice(&ne16(20));
        want.extend_from_slice(&ne16(4));
        want.extend_from_slice(&ne16(2));
        want.extend_from_slice(&[0xca, 0x6c, 192, 0, 2, 10, 0, 0, 0, 0, 0, 0, 0, 0]);
        // WGPEER_A_PERSISTENT_KEEPALIVE_INTERVAL = 25, padded.
        want.extend_from_slice(&ne16(6));
        want.extend_from_slice(&ne16(5));
        want.extend_from_slice(&ne16(25));
        want.extend_from_slice(&[0, 0]);
        // WGPEER_A_ALLOWEDIPS { { FAMILY AF_INET, IPADDR, CIDR_MASK 32 } }.
        want.extend_from_slice(&ne16(32));
        want.extend_from_slice(&ne16(0x8009));
        want.extend_from_slice(&ne16(28));
        want.extend_from_slice(&ne16(0x8000));
        want.extend_from_slice(&ne16(6));
        want.extend_from_slice(&ne16(1));
        want.extend_from_slice(&ne16(2));
        want.extend_from_slice(&[0, 0]);
        want.extend_from_slice(&ne16(8));
        want.extend_from_slice(&ne16(2));
        want.extend_from_slice(&[10, 118, 0, 2]);
        want.extend_from_slice(&ne16(5));
        want.extend_from_slice(&ne16(3));
        want.extend_from_slice(&[32, 0, 0, 0]);
        assert_eq!(encode_peer(&peer).unwrap(), want);
    }

    #[test]
    fn the_first_message_sets_key_port_and_replaces_the_peers() {
        let private = VpnPrivateKey::from_bytes(&[0x42; 32]).unwrap();
        let bodies = set_device_requests(7, &private, 51820, &[]).unwrap();
        assert_eq!(bodies.len(), 1);
        let mut want = vec![WG_CMD_SET_DEVICE, 1, 0, 0];
        want.extend_from_slice(&ne16(8));
        want.extend_from_slice(&ne16(1));
        want.extend_from_slice(&7u32.to_ne_bytes());
        want.extend_from_slice(&ne16(36));
        want.extend_from_slice(&ne16(3));
        want.extend_from_slice(&[0x42; 32]);
        want.extend_from_slice(&ne16(6));
        want.extend_from_slice(&ne16(6));
        want.extend_from_slice(&ne16(51820));
        want.extend_from_slice(&[0, 0]);
        want.extend_from_slice(&ne16(8));
        want.extend_from_slice(&ne16(5));
        want.extend_from_slice(&1u32.to_ne_bytes());
        // An empty WGDEVICE_A_PEERS nest.
        want.extend_from_slice(&ne16(4));
        want.extend_from_slice(&ne16(0x8008));
        assert_eq!(bodies[0].as_slice(), want.as_slice());
    }

    /// The peers of each message, and whether it replaces the device's.
    fn split(bodies: &[Zeroizing<Vec<u8>>]) -> Vec<(bool, Vec<VpnPublicKey>)> {
        bodies
            .iter()
            .map(|b| {
                assert!(b.len() <= MAX_SET_DEVICE_BYTES + 4);
                let attrs = attributes(genl_payload(b, WG_CMD_SET_DEVICE).unwrap()).unwrap();
                assert_eq!(attrs[0].kind, WGDEVICE_A_IFINDEX);
                let replaces = attrs.iter().any(|a| {
                    a.kind == WGDEVICE_A_FLAGS && a.u32().unwrap() == WGDEVICE_F_REPLACE_PEERS
                });
                let has_key = attrs.iter().any(|a| a.kind == WGDEVICE_A_PRIVATE_KEY);
                assert_eq!(replaces, has_key);
                let peers = attrs
                    .iter()
                    .find(|a| a.kind == WGDEVICE_A_PEERS)
                    .unwrap()
                    .nested()
                    .unwrap()
                    .iter()
                    .map(|p| parse_peer(p).unwrap().public_key)
                    .collect();
                (replaces, peers)
            })
            .collect()
    }

    #[test]
    fn many_peers_are_split_and_only_the_first_message_replaces() {
        let private = VpnPrivateKey::from_bytes(&[0x42; 32]).unwrap();
        let peers: Vec<_> = (0..1024).map(config).collect();
        let bodies = set_device_requests(7, &private, 51820, &peers).unwrap();
        assert!(bodies.len() >= 7, "{} messages", bodies.len());
        let parts = split(&bodies);
        assert!(parts[0].0);
        assert!(parts[1..].iter().all(|(r, _)| !r));
        let all: Vec<_> = parts.into_iter().flat_map(|(_, p)| p).collect();
        let want: Vec<_> = peers.iter().map(|p| p.public_key).collect();
        assert_eq!(all, want);
        let too_many: Vec<_> = (0..=MAX_DEVICE_PEERS as u16).map(config).collect();
        assert!(set_device_requests(7, &private, 1, &too_many).is_err());
    }

    /// A dump as the kernel sends it: device attributes, then peers, the
    /// last one continued in the next message.
    fn dump(peers: &[WireGuardPeerConfig], split_last: bool) -> Vec<Vec<u8>> {
        let mut device = Vec::new();
        put_attribute(&mut device, WGDEVICE_A_IFINDEX, &7u32.to_ne_bytes());
        put_attribute(&mut device, WGDEVICE_A_IFNAME, b"wg0\0");
        put_attribute(&mut device, WGDEVICE_A_PRIVATE_KEY, &[0x40; 32]);
        put_attribute(&mut device, WGDEVICE_A_PUBLIC_KEY, &[0x22; 32]);
        put_attribute(&mut device, WGDEVICE_A_LISTEN_PORT, &51820u16.to_ne_bytes());
        put_attribute(&mut device, WGDEVICE_A_FWMARK, &0u32.to_ne_bytes());
        let nest = begin_nest(&mut device, WGDEVICE_A_PEERS);
        for p in peers {
            let mut e = encode_peer(p).unwrap();
            // What the kernel adds: a zero preshared key, a handshake time,
            // counters.
            let mut extra = Vec::new();
            put_attribute(&mut extra, 2, &[0; 32]);
            put_attribute(&mut extra, WGPEER_A_LAST_HANDSHAKE_TIME, &[0; 16]);
            put_attribute(&mut extra, WGPEER_A_RX_BYTES, &5u64.to_ne_bytes());
            put_attribute(&mut extra, WGPEER_A_TX_BYTES, &6u64.to_ne_bytes());
            e.extend_from_slice(&extra);
            end_nest(&mut e, 0);
            device.extend_from_slice(&e);
        }
        end_nest(&mut device, nest);
        let mut bodies = vec![genl_body(WG_CMD_GET_DEVICE, 1, &device)];
        if split_last {
            let last = peers.last().unwrap();
            let more = WireGuardPeerConfig {
                allowed_ips: vec![AllowedIp::host(Ipv4Addr::new(10, 9, 9, 9))],
                ..last.clone()
            };
            let mut next = Vec::new();
            put_attribute(&mut next, WGDEVICE_A_IFINDEX, &7u32.to_ne_bytes());
            let nest = begin_nest(&mut next, WGDEVICE_A_PEERS);
            next.extend_from_slice(&encode_peer(&more).unwrap());
            end_nest(&mut next, nest);
            bodies.push(genl_body(WG_CMD_GET_DEVICE, 1, &next));
        }
        bodies
    }

    #[test]
    fn a_dump_reads_back_what_was_set() {
        let peers: Vec<_> = (0..3).map(config).collect();
        let bodies = dump(&peers, false);
        let device = parse_device(bodies.iter().map(|b| b.as_slice())).unwrap();
        assert_eq!((device.index, device.name.as_str()), (7, "wg0"));
        assert_eq!(device.listen_port, 51820);
        assert_eq!(device.public_key, Some(key(0x22)));
        assert_eq!(
            device.private_key.as_ref().map(|k| *k.expose()),
            Some([0x40; 32])
        );
        assert!(!format!("{device:?}").contains("64, 64"));
        let got: Vec<_> = device
            .peers
            .iter()
            .map(|p| WireGuardPeerConfig {
                public_key: p.public_key,
                endpoint: p.endpoint.unwrap(),
                allowed_ips: p.allowed_ips.clone(),
                persistent_keepalive_secs: p.persistent_keepalive_secs,
            })
            .collect();
        assert_eq!(got, peers);
        assert_eq!((device.peers[0].rx_bytes, device.peers[0].tx_bytes), (5, 6));
        assert_eq!(device.peers[0].last_handshake, None);
    }

    #[test]
    fn a_peer_continued_in_the_next_message_is_merged() {
        let peers: Vec<_> = (0..2).map(config).collect();
        let bodies = dump(&peers, true);
        let device = parse_device(bodies.iter().map(|b| b.as_slice())).unwrap();
        assert_eq!(device.peers.len(), 2);
        assert_eq!(
            device.peers[1].allowed_ips,
            vec![
                peers[1].allowed_ips[0],
                AllowedIp::host(Ipv4Addr::new(10, 9, 9, 9))
            ]
        );
    }

    #[test]
    fn malformed_dumps_are_refused() {
        assert!(parse_device(std::iter::empty()).is_err());
        let peers: Vec<_> = (0..1).map(config).collect();
        let good = dump(&peers, false).remove(0);
        // A wrong command, a short header, a cut attribute.
        let mut wrong = good.clone();
        wrong[0] = WG_CMD_SET_DEVICE;
        assert!(parse_device([wrong.as_slice()]).is_err());
        assert!(parse_device([&good[..3]]).is_err());
        assert!(parse_device([&good[..good.len() - 2]]).is_err());
        // An IPv4 allowed IP of /33.
        let mut bad = config(0);
        bad.allowed_ips[0].prefix = 33;
        let mut attrs = Vec::new();
        put_attribute(&mut attrs, WGDEVICE_A_IFINDEX, &7u32.to_ne_bytes());
        let nest = begin_nest(&mut attrs, WGDEVICE_A_PEERS);
        attrs.extend_from_slice(&encode_peer(&bad).unwrap());
        end_nest(&mut attrs, nest);
        let body = genl_body(WG_CMD_GET_DEVICE, 1, &attrs);
        assert!(parse_device([body.as_slice()]).is_err());
    }

    #[test]
    fn read_back_peers_are_bounded() {
        // One nest's 16-bit length cannot hold them all: spread them over
        // messages of one peer each, as the kernel may.
        let bodies: Vec<Vec<u8>> = (0..=MAX_DEVICE_PEERS as u16)
            .map(|i| {
                let mut a = Vec::new();
                put_attribute(&mut a, WGDEVICE_A_IFINDEX, &7u32.to_ne_bytes());
                let nest = begin_nest(&mut a, WGDEVICE_A_PEERS);
                a.extend_from_slice(&encode_peer(&config(i)).unwrap());
                end_nest(&mut a, nest);
                genl_body(WG_CMD_GET_DEVICE, 1, &a)
            })
            .collect();
        assert_eq!(
            parse_device(bodies.iter().map(|b| b.as_slice())).unwrap_err(),
            NetlinkError::TooLarge("peers of one device")
        );
        assert_eq!(
            parse_device(bodies[..MAX_DEVICE_PEERS].iter().map(|b| b.as_slice()))
                .unwrap()
                .peers
                .len(),
            MAX_DEVICE_PEERS
        );
        let mut many = config(0);
        many.allowed_ips = (0..=MAX_ALLOWED_IPS_PER_PEER as u8)
            .map(|i| AllowedIp::host(Ipv4Addr::new(10, 0, 0, i)))
            .collect();
        assert!(encode_peer(&many).is_err());
    }

    #[test]
    fn ipv6_endpoints_round_trip() {
        let a: SocketAddr = "[2001:db8::1]:51820".parse().unwrap();
        let b = sockaddr(a);
        assert_eq!(b.len(), 28);
        assert_eq!(&b[2..4], &[0xca, 0x6c]);
        assert_eq!(parse_sockaddr(&b).unwrap(), a);
        let v4: SocketAddr = "192.0.2.1:1".parse().unwrap();
        assert_eq!(parse_sockaddr(&sockaddr(v4)).unwrap(), v4);
        assert!(parse_sockaddr(&sockaddr(v4)[..15]).is_err());
        assert!(parse_sockaddr(&[2]).is_err());
    }
}
