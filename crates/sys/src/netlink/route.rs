//! rtnetlink (linux/rtnetlink.h, linux/if_link.h, linux/if_addr.h): links
//! looked up, created (by kind), deleted and set up; IPv4 addresses and a
//! default route added.

use std::net::Ipv4Addr;

use nix::errno::Errno;
use nix::sys::socket::SockProtocol;

use super::NetlinkError;
use super::message::{
    NLM_F_ACK, NLM_F_CREATE, NLM_F_EXCL, NLM_F_REPLACE, attributes, begin_nest, end_nest,
    put_attribute,
};
use super::socket::NetlinkSocket;

const RTM_NEWLINK: u16 = 16;
const RTM_DELLINK: u16 = 17;
const RTM_GETLINK: u16 = 18;
const RTM_NEWADDR: u16 = 20;
const RTM_DELADDR: u16 = 21;
const RTM_NEWROUTE: u16 = 24;
const AF_INET: u8 = 2;
const IFF_UP: u32 = 1;
const IFLA_IFNAME: u16 = 3;
const IFLA_LINKINFO: u16 = 18;
const IFLA_INFO_KIND: u16 = 1;
const IFA_ADDRESS: u16 = 1;
const IFA_LOCAL: u16 = 2;
const RTA_OIF: u16 = 4;
const RTA_GATEWAY: u16 = 5;
const RT_TABLE_MAIN: u8 = 254;
const RTPROT_DHCP: u8 = 16;
const RT_SCOPE_UNIVERSE: u8 = 0;
const RTN_UNICAST: u8 = 1;
/// `sizeof(struct ifinfomsg)`.
const IFINFOMSG_LEN: usize = 16;
/// `IFNAMSIZ` less the NUL.
const MAX_INTERFACE_NAME: usize = 15;

/// A link as the kernel describes it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Link {
    /// Its index.
    pub index: u32,
    /// Its name.
    pub name: String,
    /// Its kind (`IFLA_INFO_KIND`: `wireguard`, `veth`, ...), if it has one.
    pub kind: Option<String>,
}

/// Checks an interface name: 1 to 15 bytes, no `/`, whitespace or NUL.
pub fn check_interface_name(name: &str) -> Result<(), NetlinkError> {
    let ok = !name.is_empty()
        && name.len() <= MAX_INTERFACE_NAME
        && name != "."
        && name != ".."
        && !name
            .bytes()
            .any(|b| b == b'/' || b == 0 || b.is_ascii_whitespace() || b == b':');
    ok.then_some(()).ok_or(NetlinkError::InvalidName)
}

/// Parses an `RTM_NEWLINK` message's body: `struct ifinfomsg`, then
/// `IFLA_IFNAME` and `IFLA_LINKINFO`/`IFLA_INFO_KIND`.
pub fn parse_link(body: &[u8]) -> Result<Link, NetlinkError> {
    let header = body
        .get(..IFINFOMSG_LEN)
        .ok_or(NetlinkError::Malformed("short ifinfomsg"))?;
    let index = u32::from_ne_bytes([header[4], header[5], header[6], header[7]]);
    let mut name = None;
    let mut kind = None;
    for a in attributes(&body[IFINFOMSG_LEN..])? {
        match a.kind {
            IFLA_IFNAME => name = Some(a.string()?.to_string()),
            IFLA_LINKINFO => {
                for i in a.nested()? {
                    if i.kind == IFLA_INFO_KIND {
                        kind = Some(i.string()?.to_string());
                    }
                }
            }
            _ => {}
        }
    }
    Ok(Link {
        index,
        name: name.ok_or(NetlinkError::Malformed("link without a name"))?,
        kind,
    })
}

/// A `NETLINK_ROUTE` socket.
#[derive(Debug)]
pub struct Rtnetlink {
    socket: NetlinkSocket,
}

impl Rtnetlink {
    /// Opens and binds the socket.
    pub fn open() -> Result<Rtnetlink, NetlinkError> {
        Ok(Rtnetlink {
            socket: NetlinkSocket::open(SockProtocol::NetlinkRoute)?,
        })
    }

    /// The link named `name`, or `None` if there is none.
    pub fn link(&mut self, name: &str) -> Result<Option<Link>, NetlinkError> {
        check_interface_name(name)?;
        let mut body = ifinfomsg(0, 0, 0);
        put_attribute(&mut body, IFLA_IFNAME, &nul_terminated(name));
        let reply = match self.socket.request(RTM_GETLINK, NLM_F_ACK, &body) {
            Err(NetlinkError::Refused(Errno::ENODEV)) => return Ok(None),
            r => r?,
        };
        let mut links = reply.bodies().filter(|(k, _)| *k == RTM_NEWLINK);
        let link = parse_link(links.next().ok_or(NetlinkError::Malformed("no link"))?.1)?;
        if links.next().is_some() || link.name != name {
            return Err(NetlinkError::Malformed("not the link asked for"));
        }
        Ok(Some(link))
    }

    /// Creates a link named `name` of `kind` (`wireguard`, ...); refused
    /// with `EEXIST` if the name is taken.
    pub fn create_link(&mut self, name: &str, kind: &str) -> Result<(), NetlinkError> {
        check_interface_name(name)?;
        self.ack(
            RTM_NEWLINK,
            NLM_F_CREATE | NLM_F_EXCL,
            &create_link_body(name, kind),
        )
    }

    /// Deletes the link.
    pub fn delete_link(&mut self, index: u32) -> Result<(), NetlinkError> {
        self.ack(RTM_DELLINK, 0, &ifinfomsg(index, 0, 0))
    }

    /// Sets the link up.
    pub fn link_up(&mut self, index: u32) -> Result<(), NetlinkError> {
        self.ack(RTM_NEWLINK, 0, &ifinfomsg(index, IFF_UP, IFF_UP))
    }

    /// Adds (or replaces) `address/prefix` on the link.
    pub fn add_address(
        &mut self,
        index: u32,
        address: Ipv4Addr,
        prefix: u8,
    ) -> Result<(), NetlinkError> {
        let flags = NLM_F_CREATE | NLM_F_REPLACE;
        self.ack(RTM_NEWADDR, flags, &address_body(index, address, prefix))
    }

    /// Removes `address/prefix` from the link.
    pub fn delete_address(
        &mut self,
        index: u32,
        address: Ipv4Addr,
        prefix: u8,
    ) -> Result<(), NetlinkError> {
        self.ack(RTM_DELADDR, 0, &address_body(index, address, prefix))
    }

    /// Adds (or replaces) the default route via `gateway` on the link.
    pub fn add_default_route(&mut self, index: u32, gateway: Ipv4Addr) -> Result<(), NetlinkError> {
        let flags = NLM_F_CREATE | NLM_F_REPLACE;
        self.ack(RTM_NEWROUTE, flags, &default_route_body(index, gateway))
    }

    fn ack(&mut self, kind: u16, flags: u16, body: &[u8]) -> Result<(), NetlinkError> {
        self.socket.request(kind, NLM_F_ACK | flags, body).map(drop)
    }
}

fn nul_terminated(name: &str) -> Vec<u8> {
    let mut v = name.as_bytes().to_vec();
    v.push(0);
    v
}

/// `struct ifinfomsg` (family AF_UNSPEC) for the link `index`.
fn ifinfomsg(index: u32, flags: u32, change: u32) -> Vec<u8> {
    let mut b = vec![0u8; IFINFOMSG_LEN];
    b[4..8].copy_from_slice(&index.to_ne_bytes());
    b[8..12].copy_from_slice(&flags.to_ne_bytes());
    b[12..16].copy_from_slice(&change.to_ne_bytes());
    b
}

/// `struct ifinfomsg`, `IFLA_IFNAME`, `IFLA_LINKINFO { IFLA_INFO_KIND }`.
fn create_link_body(name: &str, kind: &str) -> Vec<u8> {
    let mut b = ifinfomsg(0, 0, 0);
    put_attribute(&mut b, IFLA_IFNAME, &nul_terminated(name));
    let nest = begin_nest(&mut b, IFLA_LINKINFO);
    put_attribute(&mut b, IFLA_INFO_KIND, kind.as_bytes());
    end_nest(&mut b, nest);
    b
}

/// `struct ifaddrmsg` and IFA_LOCAL, IFA_ADDRESS.
fn address_body(index: u32, address: Ipv4Addr, prefix: u8) -> Vec<u8> {
    let mut b = vec![AF_INET, prefix, 0, RT_SCOPE_UNIVERSE];
    b.extend_from_slice(&index.to_ne_bytes());
    put_attribute(&mut b, IFA_LOCAL, &address.octets());
    put_attribute(&mut b, IFA_ADDRESS, &address.octets());
    b
}

/// `struct rtmsg` for 0.0.0.0/0 in the main table, RTA_GATEWAY and RTA_OIF.
fn default_route_body(index: u32, gateway: Ipv4Addr) -> Vec<u8> {
    let mut b = vec![
        AF_INET,
        0,
        0,
        0,
        RT_TABLE_MAIN,
        RTPROT_DHCP,
        RT_SCOPE_UNIVERSE,
        RTN_UNICAST,
    ];
    b.extend_from_slice(&0u32.to_ne_bytes());
    put_attribute(&mut b, RTA_GATEWAY, &gateway.octets());
    put_attribute(&mut b, RTA_OIF, &index.to_ne_bytes());
    b
}

#[cfg(test)]
mod tests {
    use super::super::message::{NLM_F_REQUEST, message};
    use super::*;

    #[test]
    fn requests_have_the_kernels_layout() {
        let m = message(
            RTM_NEWLINK,
            NLM_F_REQUEST | NLM_F_ACK,
            7,
            &ifinfomsg(2, IFF_UP, IFF_UP),
        );
        assert_eq!(m.len(), 32);
        assert_eq!(u32::from_ne_bytes(m[0..4].try_into().unwrap()), 32);
        assert_eq!(u16::from_ne_bytes(m[4..6].try_into().unwrap()), 16);
        assert_eq!(u16::from_ne_bytes(m[6..8].try_into().unwrap()), 5);
        assert_eq!(u32::from_ne_bytes(m[8..12].try_into().unwrap()), 7);
        assert_eq!(u32::from_ne_bytes(m[20..24].try_into().unwrap()), 2);

        let a = address_body(2, Ipv4Addr::new(10, 0, 2, 15), 24);
        assert_eq!(a.len(), 8 + 8 + 8);
        assert_eq!(&a[..4], &[2, 24, 0, 0]);
        assert_eq!(u16::from_ne_bytes(a[8..10].try_into().unwrap()), 8);
        assert_eq!(u16::from_ne_bytes(a[10..12].try_into().unwrap()), IFA_LOCAL);
        assert_eq!(&a[12..16], &[10, 0, 2, 15]);

        let r = default_route_body(2, Ipv4Addr::new(10, 0, 2, 2));
        assert_eq!(r.len(), 12 + 8 + 8);
        assert_eq!(&r[..8], &[2, 0, 0, 0, 254, 16, 0, 1]);
        assert_eq!(&r[16..20], &[10, 0, 2, 2]);
        assert_eq!(u32::from_ne_bytes(r[24..28].try_into().unwrap()), 2);
    }

    #[test]
    fn a_new_link_names_its_kind_in_a_nested_linkinfo() {
        let b = create_link_body("wg0", "wireguard");
        // ifinfomsg, IFLA_IFNAME "wg0\0" (8), IFLA_LINKINFO (4 + 16).
        let mut want = vec![0u8; 16];
        want.extend_from_slice(&8u16.to_ne_bytes());
        want.extend_from_slice(&3u16.to_ne_bytes());
        want.extend_from_slice(b"wg0\0");
        want.extend_from_slice(&20u16.to_ne_bytes());
        want.extend_from_slice(&0x8012u16.to_ne_bytes());
        want.extend_from_slice(&13u16.to_ne_bytes());
        want.extend_from_slice(&1u16.to_ne_bytes());
        want.extend_from_slice(b"wireguard\0\0\0");
        assert_eq!(b, want);
        // The kernel's answer about it has the same layout.
        let mut answer = ifinfomsg(5, 0, 0);
        answer.extend_from_slice(&b[16..]);
        assert_eq!(
            parse_link(&answer).unwrap(),
            Link {
                index: 5,
                name: "wg0".into(),
                kind: Some("wireguard".into())
            }
        );
        assert!(parse_link(&answer[..15]).is_err());
        assert!(parse_link(&ifinfomsg(5, 0, 0)).is_err());
    }

    #[test]
    fn interface_names_are_checked() {
        for good in ["wg0", "eth0", "a", "confboot-vpn123"] {
            check_interface_name(good).unwrap();
        }
        for bad in [
            "",
            "confboot-vpn1234",
            "a/b",
            "a b",
            "a\0",
            ".",
            "..",
            "a:b",
        ] {
            assert_eq!(check_interface_name(bad), Err(NetlinkError::InvalidName));
        }
    }
}
