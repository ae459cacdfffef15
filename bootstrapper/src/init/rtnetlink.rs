//! Just enough rtnetlink to bring a link up, give it an IPv4 address and
//! add a default route: the requests (built as bytes) and their
//! acknowledgements, over a `NETLINK_ROUTE` socket.

use std::net::Ipv4Addr;
use std::os::fd::{AsRawFd, OwnedFd};

use nix::errno::Errno;
use nix::sys::socket::{
    AddressFamily, MsgFlags, NetlinkAddr, SockFlag, SockProtocol, SockType, bind, recv, sendto,
    socket,
};

const NLMSG_ERROR: u16 = 2;
const RTM_NEWLINK: u16 = 16;
const RTM_NEWADDR: u16 = 20;
const RTM_NEWROUTE: u16 = 24;
const NLM_F_REQUEST: u16 = 0x1;
const NLM_F_ACK: u16 = 0x4;
const NLM_F_REPLACE: u16 = 0x100;
const NLM_F_CREATE: u16 = 0x400;
const AF_INET: u8 = 2;
const IFF_UP: u32 = 1;
const IFA_ADDRESS: u16 = 1;
const IFA_LOCAL: u16 = 2;
const RTA_OIF: u16 = 4;
const RTA_GATEWAY: u16 = 5;
const RT_TABLE_MAIN: u8 = 254;
const RTPROT_DHCP: u8 = 16;
const RT_SCOPE_UNIVERSE: u8 = 0;
const RTN_UNICAST: u8 = 1;
const NLMSG_HEADER_LEN: usize = 16;

/// A failed rtnetlink request.
#[derive(Debug)]
pub enum RtnetlinkError {
    /// The socket could not be made, or sending/receiving failed.
    Socket(Errno),
    /// The kernel refused the request (its errno).
    Refused(Errno),
    /// The answer is not an acknowledgement of the request.
    BadAnswer,
}

impl std::fmt::Display for RtnetlinkError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RtnetlinkError::Socket(e) => write!(f, "netlink socket: {e}"),
            RtnetlinkError::Refused(e) => write!(f, "refused: {e}"),
            RtnetlinkError::BadAnswer => f.write_str("no acknowledgement"),
        }
    }
}

/// A `NETLINK_ROUTE` socket that sends one request at a time and waits
/// for its acknowledgement.
pub struct Rtnetlink {
    fd: OwnedFd,
    seq: u32,
}

impl Rtnetlink {
    /// Opens and binds the socket.
    pub fn open() -> Result<Rtnetlink, RtnetlinkError> {
        let fd = socket(
            AddressFamily::Netlink,
            SockType::Raw,
            SockFlag::SOCK_CLOEXEC,
            SockProtocol::NetlinkRoute,
        )
        .map_err(RtnetlinkError::Socket)?;
        bind(fd.as_raw_fd(), &NetlinkAddr::new(0, 0)).map_err(RtnetlinkError::Socket)?;
        Ok(Rtnetlink { fd, seq: 0 })
    }

    /// Sets the link up.
    pub fn link_up(&mut self, index: u32) -> Result<(), RtnetlinkError> {
        self.request(RTM_NEWLINK, 0, &link_up_body(index))
    }

    /// Adds (or replaces) `address/prefix` on the link.
    pub fn add_address(
        &mut self,
        index: u32,
        address: Ipv4Addr,
        prefix: u8,
    ) -> Result<(), RtnetlinkError> {
        let flags = NLM_F_CREATE | NLM_F_REPLACE;
        self.request(RTM_NEWADDR, flags, &address_body(index, address, prefix))
    }

    /// Adds (or replaces) the default route via `gateway` on the link.
    pub fn add_default_route(
        &mut self,
        index: u32,
        gateway: Ipv4Addr,
    ) -> Result<(), RtnetlinkError> {
        let flags = NLM_F_CREATE | NLM_F_REPLACE;
        self.request(RTM_NEWROUTE, flags, &default_route_body(index, gateway))
    }

    fn request(&mut self, kind: u16, flags: u16, body: &[u8]) -> Result<(), RtnetlinkError> {
        self.seq = self.seq.wrapping_add(1);
        let message = message(kind, NLM_F_REQUEST | NLM_F_ACK | flags, self.seq, body);
        sendto(
            self.fd.as_raw_fd(),
            &message,
            &NetlinkAddr::new(0, 0),
            MsgFlags::empty(),
        )
        .map_err(RtnetlinkError::Socket)?;
        let mut buf = vec![0u8; 8192];
        // Answers to earlier requests (none are pending) would be skipped.
        for _ in 0..16 {
            let n = recv(self.fd.as_raw_fd(), &mut buf, MsgFlags::empty())
                .map_err(RtnetlinkError::Socket)?;
            match ack_status(&buf[..n], self.seq) {
                Some(0) => return Ok(()),
                Some(e) => return Err(RtnetlinkError::Refused(Errno::from_raw(-e))),
                None => continue,
            }
        }
        Err(RtnetlinkError::BadAnswer)
    }
}

/// A netlink message: header then body (the body's length a multiple of 4).
fn message(kind: u16, flags: u16, seq: u32, body: &[u8]) -> Vec<u8> {
    let len = NLMSG_HEADER_LEN + body.len();
    let mut m = Vec::with_capacity(len);
    m.extend_from_slice(&(len as u32).to_ne_bytes());
    m.extend_from_slice(&kind.to_ne_bytes());
    m.extend_from_slice(&flags.to_ne_bytes());
    m.extend_from_slice(&seq.to_ne_bytes());
    m.extend_from_slice(&0u32.to_ne_bytes());
    m.extend_from_slice(body);
    m
}

/// An attribute, padded to 4 bytes.
fn attribute(out: &mut Vec<u8>, kind: u16, value: &[u8]) {
    out.extend_from_slice(&((4 + value.len()) as u16).to_ne_bytes());
    out.extend_from_slice(&kind.to_ne_bytes());
    out.extend_from_slice(value);
    while !out.len().is_multiple_of(4) {
        out.push(0);
    }
}

/// `struct ifinfomsg` with IFF_UP set and changed.
fn link_up_body(index: u32) -> Vec<u8> {
    let mut b = vec![0u8; 16];
    b[4..8].copy_from_slice(&index.to_ne_bytes());
    b[8..12].copy_from_slice(&IFF_UP.to_ne_bytes());
    b[12..16].copy_from_slice(&IFF_UP.to_ne_bytes());
    b
}

/// `struct ifaddrmsg` and IFA_LOCAL, IFA_ADDRESS.
fn address_body(index: u32, address: Ipv4Addr, prefix: u8) -> Vec<u8> {
    let mut b = vec![AF_INET, prefix, 0, RT_SCOPE_UNIVERSE];
    b.extend_from_slice(&index.to_ne_bytes());
    attribute(&mut b, IFA_LOCAL, &address.octets());
    attribute(&mut b, IFA_ADDRESS, &address.octets());
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
    attribute(&mut b, RTA_GATEWAY, &gateway.octets());
    attribute(&mut b, RTA_OIF, &index.to_ne_bytes());
    b
}

/// The error code (0: success, else a negative errno) of the NLMSG_ERROR
/// answering `seq` among the messages in `buf`; `None` if there is none.
fn ack_status(buf: &[u8], seq: u32) -> Option<i32> {
    let mut rest = buf;
    while rest.len() >= NLMSG_HEADER_LEN {
        let len = u32::from_ne_bytes(rest[0..4].try_into().ok()?) as usize;
        if len < NLMSG_HEADER_LEN || len > rest.len() {
            return None;
        }
        let kind = u16::from_ne_bytes(rest[4..6].try_into().ok()?);
        let got_seq = u32::from_ne_bytes(rest[8..12].try_into().ok()?);
        if kind == NLMSG_ERROR && got_seq == seq && len >= NLMSG_HEADER_LEN + 4 {
            let code = &rest[NLMSG_HEADER_LEN..NLMSG_HEADER_LEN + 4];
            return Some(i32::from_ne_bytes(code.try_into().ok()?));
        }
        let aligned = (len + 3) & !3;
        rest = rest.get(aligned..)?;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_have_the_kernels_layout() {
        let m = message(RTM_NEWLINK, NLM_F_REQUEST | NLM_F_ACK, 7, &link_up_body(2));
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
    fn acknowledgements_are_matched_by_sequence() {
        let ack = |seq: u32, code: i32| {
            let mut body = code.to_ne_bytes().to_vec();
            body.extend_from_slice(&[0u8; 16]);
            message(NLMSG_ERROR, 0, seq, &body)
        };
        assert_eq!(ack_status(&ack(3, 0), 3), Some(0));
        assert_eq!(ack_status(&ack(3, -17), 3), Some(-17));
        assert_eq!(ack_status(&ack(2, 0), 3), None);
        let mut two = ack(2, -1);
        two.extend_from_slice(&ack(3, 0));
        assert_eq!(ack_status(&two, 3), Some(0));
        // Lengths that do not fit are no answer.
        let mut bad = ack(3, 0);
        bad[0] = 200;
        assert_eq!(ack_status(&bad, 3), None);
        assert_eq!(ack_status(&[1, 2, 3], 3), None);
    }
}
