//! DHCPv4 messages (RFC 2131/2132) for the node's PID 1: the DISCOVER and
//! REQUEST it sends and a bounded parser of the OFFER/ACK/NAK it gets back.
//!
//! Replies come from the network, so they are untrusted: every length is
//! checked against the datagram, options are walked with bounds, and only
//! the few options the client uses are kept. The socket and the retries
//! live with the caller (the bootstrapper's `init` module).
// Every length and offset here comes from the host (a disk, a datagram,
// a socket): a cast that could truncate, wrap or drop a sign is refused
// at compile time, so each conversion is checked where it happens.
#![deny(
    clippy::cast_possible_truncation,
    clippy::cast_sign_loss,
    clippy::cast_possible_wrap,
    clippy::cast_lossless
)]

use std::net::Ipv4Addr;

/// UDP port a DHCP server listens on.
pub const SERVER_PORT: u16 = 67;
/// UDP port a DHCP client listens on.
pub const CLIENT_PORT: u16 = 68;
/// Longest host name kept (one DNS label).
pub const MAX_HOST_NAME_LEN: usize = 63;
/// Largest datagram the client reads (a reply longer than this is cut and
/// then usually fails to parse).
pub const MAX_MESSAGE_LEN: usize = 1500;

/// The fixed part: op .. file (236 bytes) and the magic cookie (4).
const FIXED_LEN: usize = 236;
const MAGIC: [u8; 4] = [99, 130, 83, 99];
const OP_REQUEST: u8 = 1;
const OP_REPLY: u8 = 2;
const HTYPE_ETHERNET: u8 = 1;
const FLAG_BROADCAST: u16 = 0x8000;

const OPT_PAD: u8 = 0;
const OPT_SUBNET_MASK: u8 = 1;
const OPT_ROUTER: u8 = 3;
const OPT_HOST_NAME: u8 = 12;
const OPT_REQUESTED_IP: u8 = 50;
const OPT_LEASE_TIME: u8 = 51;
const OPT_MESSAGE_TYPE: u8 = 53;
const OPT_SERVER_ID: u8 = 54;
const OPT_PARAMETER_LIST: u8 = 55;
const OPT_END: u8 = 255;

/// DHCP message types (option 53) the client sends or understands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DhcpMessageType {
    /// DHCPDISCOVER (1), client → server.
    Discover,
    /// DHCPOFFER (2), server → client.
    Offer,
    /// DHCPREQUEST (3), client → server.
    Request,
    /// DHCPACK (5), server → client.
    Ack,
    /// DHCPNAK (6), server → client.
    Nak,
}

impl DhcpMessageType {
    fn code(self) -> u8 {
        match self {
            DhcpMessageType::Discover => 1,
            DhcpMessageType::Offer => 2,
            DhcpMessageType::Request => 3,
            DhcpMessageType::Ack => 5,
            DhcpMessageType::Nak => 6,
        }
    }

    fn from_code(code: u8) -> Option<DhcpMessageType> {
        match code {
            1 => Some(DhcpMessageType::Discover),
            2 => Some(DhcpMessageType::Offer),
            3 => Some(DhcpMessageType::Request),
            5 => Some(DhcpMessageType::Ack),
            6 => Some(DhcpMessageType::Nak),
            _ => None,
        }
    }
}

/// Why a datagram is not a usable reply.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DhcpParseError {
    /// Shorter than the fixed header and the magic cookie.
    #[error("DHCP message of {0} bytes is too short")]
    TooShort(usize),
    /// Not a BOOTREPLY, or not Ethernet with 6-byte addresses.
    #[error("not an Ethernet BOOTREPLY")]
    NotAReply,
    /// The magic cookie is not 99.130.83.99.
    #[error("no DHCP magic cookie")]
    BadMagic,
    /// An option's length runs past the end of the datagram.
    #[error("option {0} runs past the end")]
    TruncatedOption(u8),
    /// An option the client uses has the wrong length.
    #[error("option {0} has length {1}")]
    BadOptionLength(u8, usize),
    /// No option 53, or one naming a type a server does not send.
    #[error("bad DHCP message type {0:?}")]
    BadMessageType(Option<u8>),
    /// An option appears twice.
    #[error("option {0} appears twice")]
    DuplicateOption(u8),
}

/// A DHCP message the client sends: a DISCOVER, or a REQUEST for the
/// address an OFFER named.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DhcpRequest {
    /// DISCOVER or REQUEST.
    pub kind: DhcpMessageType,
    /// Transaction id the replies must carry.
    pub xid: u32,
    /// The client's MAC address.
    pub mac: [u8; 6],
    /// For a REQUEST: the offered address and the offering server.
    pub selected: Option<(Ipv4Addr, Ipv4Addr)>,
}

impl DhcpRequest {
    /// The datagram: broadcast flag set (the client has no address yet),
    /// asking for the subnet mask, router and lease time.
    pub fn encode(&self) -> Vec<u8> {
        let mut m = vec![0u8; FIXED_LEN];
        m[0] = OP_REQUEST;
        m[1] = HTYPE_ETHERNET;
        m[2] = 6;
        m[4..8].copy_from_slice(&self.xid.to_be_bytes());
        m[10..12].copy_from_slice(&FLAG_BROADCAST.to_be_bytes());
        m[28..34].copy_from_slice(&self.mac);
        m.extend_from_slice(&MAGIC);
        m.extend_from_slice(&[OPT_MESSAGE_TYPE, 1, self.kind.code()]);
        if let Some((address, server)) = self.selected {
            m.extend_from_slice(&[OPT_REQUESTED_IP, 4]);
            m.extend_from_slice(&address.octets());
            m.extend_from_slice(&[OPT_SERVER_ID, 4]);
            m.extend_from_slice(&server.octets());
        }
        m.extend_from_slice(&[
            OPT_PARAMETER_LIST,
            4,
            OPT_SUBNET_MASK,
            OPT_ROUTER,
            OPT_HOST_NAME,
            OPT_LEASE_TIME,
        ]);
        m.push(OPT_END);
        // Some servers ignore BOOTP messages under 300 bytes.
        if m.len() < 300 {
            m.resize(300, OPT_PAD);
        }
        m
    }
}

/// A server's reply, as far as the client uses it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DhcpReply {
    /// OFFER, ACK or NAK.
    pub kind: DhcpMessageType,
    /// The transaction id (the caller compares it with its own).
    pub xid: u32,
    /// The client hardware address the reply is for.
    pub mac: [u8; 6],
    /// `yiaddr`: the address offered or acknowledged.
    pub address: Ipv4Addr,
    /// Option 54, the server's identifier.
    pub server: Option<Ipv4Addr>,
    /// Option 1.
    pub netmask: Option<Ipv4Addr>,
    /// Option 3, its first router.
    pub router: Option<Ipv4Addr>,
    /// Option 51, in seconds.
    pub lease_secs: Option<u32>,
    /// Option 12, the client's host name, lower-cased: kept only when it is
    /// one DNS label (1 to [`MAX_HOST_NAME_LEN`] letters, digits and inner
    /// hyphens); any other value is ignored, not an error (the lease is
    /// still good).
    pub host_name: Option<String>,
}

impl DhcpReply {
    /// Parses a datagram (at most [`MAX_MESSAGE_LEN`] bytes are looked at).
    /// The `file` and `sname` fields are never read as options (option 52
    /// overloads are ignored).
    pub fn parse(data: &[u8]) -> Result<DhcpReply, DhcpParseError> {
        let data = &data[..data.len().min(MAX_MESSAGE_LEN)];
        if data.len() < FIXED_LEN + MAGIC.len() {
            return Err(DhcpParseError::TooShort(data.len()));
        }
        if data[0] != OP_REPLY || data[1] != HTYPE_ETHERNET || data[2] != 6 {
            return Err(DhcpParseError::NotAReply);
        }
        if data[FIXED_LEN..FIXED_LEN + 4] != MAGIC {
            return Err(DhcpParseError::BadMagic);
        }
        let xid = u32::from_be_bytes([data[4], data[5], data[6], data[7]]);
        let address = Ipv4Addr::new(data[16], data[17], data[18], data[19]);
        let mut mac = [0u8; 6];
        mac.copy_from_slice(&data[28..34]);

        let mut kind = None;
        let mut server = None;
        let mut netmask = None;
        let mut router = None;
        let mut lease_secs = None;
        let mut host_name: Option<Option<String>> = None;
        let mut rest = &data[FIXED_LEN + 4..];
        while let Some((&code, after)) = rest.split_first() {
            match code {
                OPT_PAD => {
                    rest = after;
                    continue;
                }
                OPT_END => break,
                _ => {}
            }
            let Some((&len, after)) = after.split_first() else {
                return Err(DhcpParseError::TruncatedOption(code));
            };
            let len = usize::from(len);
            if after.len() < len {
                return Err(DhcpParseError::TruncatedOption(code));
            }
            let (value, after) = after.split_at(len);
            rest = after;
            match code {
                OPT_MESSAGE_TYPE => {
                    if value.len() != 1 {
                        return Err(DhcpParseError::BadOptionLength(code, value.len()));
                    }
                    set_once(&mut kind, value[0], code)?;
                }
                OPT_SERVER_ID => set_once(&mut server, ipv4(code, value, false)?, code)?,
                OPT_SUBNET_MASK => set_once(&mut netmask, ipv4(code, value, false)?, code)?,
                // A list of routers: the first is the default route.
                OPT_ROUTER => set_once(&mut router, ipv4(code, value, true)?, code)?,
                OPT_LEASE_TIME => {
                    let v = ipv4(code, value, false)?;
                    set_once(&mut lease_secs, u32::from(v), code)?;
                }
                OPT_HOST_NAME => set_once(&mut host_name, host_label(value), code)?,
                _ => {}
            }
        }
        let kind = match kind.map(DhcpMessageType::from_code) {
            Some(Some(
                k @ (DhcpMessageType::Offer | DhcpMessageType::Ack | DhcpMessageType::Nak),
            )) => k,
            _ => return Err(DhcpParseError::BadMessageType(kind)),
        };
        Ok(DhcpReply {
            kind,
            xid,
            mac,
            address,
            server,
            netmask,
            router,
            lease_secs,
            host_name: host_name.flatten(),
        })
    }
}

/// Option 12's value as a host name, if it is one DNS label.
fn host_label(value: &[u8]) -> Option<String> {
    let ok = (1..=MAX_HOST_NAME_LEN).contains(&value.len())
        && value
            .iter()
            .all(|b| b.is_ascii_alphanumeric() || *b == b'-')
        && value.first() != Some(&b'-')
        && value.last() != Some(&b'-');
    ok.then(|| String::from_utf8_lossy(value).to_ascii_lowercase())
}

/// A 4-byte option as an address; `list` takes the first of several.
fn ipv4(code: u8, value: &[u8], list: bool) -> Result<Ipv4Addr, DhcpParseError> {
    let ok = if list {
        !value.is_empty() && value.len().is_multiple_of(4)
    } else {
        value.len() == 4
    };
    if !ok {
        return Err(DhcpParseError::BadOptionLength(code, value.len()));
    }
    Ok(Ipv4Addr::new(value[0], value[1], value[2], value[3]))
}

fn set_once<T>(slot: &mut Option<T>, value: T, code: u8) -> Result<(), DhcpParseError> {
    if slot.replace(value).is_some() {
        return Err(DhcpParseError::DuplicateOption(code));
    }
    Ok(())
}

/// The prefix length of a contiguous netmask (255.255.255.0 → 24); `None`
/// for a mask with holes.
pub fn prefix_len(netmask: Ipv4Addr) -> Option<u8> {
    let m = u32::from(netmask);
    let ones = m.leading_ones();
    let prefix = u8::try_from(ones).ok()?;
    (m.checked_shl(ones).unwrap_or(0) == 0).then_some(prefix)
}

#[cfg(test)]
mod tests {
    use super::*;

    const MAC: [u8; 6] = [0x52, 0x54, 0, 0x12, 0x34, 0x56];

    /// A reply as QEMU's user networking sends it.
    fn reply(kind: u8, xid: u32, options: &[u8]) -> Vec<u8> {
        let mut m = vec![0u8; FIXED_LEN];
        m[0] = OP_REPLY;
        m[1] = 1;
        m[2] = 6;
        m[4..8].copy_from_slice(&xid.to_be_bytes());
        m[16..20].copy_from_slice(&[10, 0, 2, 15]);
        m[28..34].copy_from_slice(&MAC);
        m.extend_from_slice(&MAGIC);
        m.extend_from_slice(&[53, 1, kind]);
        m.extend_from_slice(options);
        m.push(255);
        m
    }

    const QEMU_OPTIONS: &[u8] = &[
        54, 4, 10, 0, 2, 2, // server id
        1, 4, 255, 255, 255, 0, // netmask
        3, 4, 10, 0, 2, 2, // router
        51, 4, 0, 1, 81, 128, // lease 86400
    ];

    #[test]
    fn a_qemu_offer_parses() {
        let r = DhcpReply::parse(&reply(2, 7, QEMU_OPTIONS)).unwrap();
        assert_eq!(r.kind, DhcpMessageType::Offer);
        assert_eq!(r.xid, 7);
        assert_eq!(r.mac, MAC);
        assert_eq!(r.address, Ipv4Addr::new(10, 0, 2, 15));
        assert_eq!(r.server, Some(Ipv4Addr::new(10, 0, 2, 2)));
        assert_eq!(r.router, Some(Ipv4Addr::new(10, 0, 2, 2)));
        assert_eq!(r.netmask, Some(Ipv4Addr::new(255, 255, 255, 0)));
        assert_eq!(r.lease_secs, Some(86400));
        assert_eq!(r.host_name, None);
    }

    #[test]
    fn a_host_name_is_kept_when_it_is_one_label() {
        let named = |name: &[u8]| {
            let mut o = vec![12, u8::try_from(name.len()).unwrap()];
            o.extend_from_slice(name);
            DhcpReply::parse(&reply(5, 1, &o)).map(|r| r.host_name)
        };
        assert_eq!(named(b"VM-2"), Ok(Some("vm-2".to_string())));
        assert_eq!(named(&[b'a'; 63]), Ok(Some("a".repeat(63))));
        // Anything else is ignored, the lease kept.
        for bad in [
            &b""[..],
            &[b'a'; 64],
            b"-vm",
            b"vm-",
            b"vm.example",
            b"vm 2",
            b"vm\0",
        ] {
            assert_eq!(named(bad), Ok(None), "{bad:?}");
        }
        assert_eq!(
            DhcpReply::parse(&reply(5, 1, &[12, 1, b'a', 12, 1, b'b'])),
            Err(DhcpParseError::DuplicateOption(12))
        );
    }

    #[test]
    fn malformed_replies_are_refused() {
        assert!(matches!(
            DhcpReply::parse(&[2; 100]),
            Err(DhcpParseError::TooShort(100))
        ));
        let mut request = reply(2, 7, QEMU_OPTIONS);
        request[0] = OP_REQUEST;
        assert_eq!(DhcpReply::parse(&request), Err(DhcpParseError::NotAReply));
        let mut magic = reply(2, 7, &[]);
        magic[FIXED_LEN] = 0;
        assert_eq!(DhcpReply::parse(&magic), Err(DhcpParseError::BadMagic));
        // An option whose length runs past the end.
        let mut cut = reply(2, 7, &[]);
        cut.pop();
        cut.extend_from_slice(&[3, 200, 10, 0]);
        assert_eq!(
            DhcpReply::parse(&cut),
            Err(DhcpParseError::TruncatedOption(3))
        );
        assert_eq!(
            DhcpReply::parse(&reply(2, 7, &[1, 3, 255, 255, 255])),
            Err(DhcpParseError::BadOptionLength(1, 3))
        );
        assert_eq!(
            DhcpReply::parse(&reply(2, 7, &[53, 1, 5])),
            Err(DhcpParseError::DuplicateOption(53))
        );
        // A client's message type is no reply.
        assert_eq!(
            DhcpReply::parse(&reply(1, 7, &[])),
            Err(DhcpParseError::BadMessageType(Some(1)))
        );
        let mut no_type = reply(2, 7, &[]);
        no_type.truncate(FIXED_LEN + 4);
        assert_eq!(
            DhcpReply::parse(&no_type),
            Err(DhcpParseError::BadMessageType(None))
        );
    }

    #[test]
    fn several_routers_give_the_first_and_pads_are_skipped() {
        let r = DhcpReply::parse(&reply(5, 1, &[0, 0, 3, 8, 1, 2, 3, 4, 5, 6, 7, 8])).unwrap();
        assert_eq!(r.kind, DhcpMessageType::Ack);
        assert_eq!(r.router, Some(Ipv4Addr::new(1, 2, 3, 4)));
        assert_eq!(r.server, None);
    }

    #[test]
    fn a_request_encodes_what_a_server_reads() {
        let d = DhcpRequest {
            kind: DhcpMessageType::Discover,
            xid: 0xdeadbeef,
            mac: MAC,
            selected: None,
        }
        .encode();
        assert_eq!(d.len(), 300);
        assert_eq!(&d[..3], &[1, 1, 6]);
        assert_eq!(&d[4..8], &[0xde, 0xad, 0xbe, 0xef]);
        assert_eq!(&d[10..12], &[0x80, 0]);
        assert_eq!(&d[28..34], &MAC);
        assert_eq!(&d[236..243], &[99, 130, 83, 99, 53, 1, 1]);
        let r = DhcpRequest {
            kind: DhcpMessageType::Request,
            xid: 1,
            mac: MAC,
            selected: Some((Ipv4Addr::new(10, 0, 2, 15), Ipv4Addr::new(10, 0, 2, 2))),
        }
        .encode();
        assert_eq!(
            &r[240..255],
            &[53, 1, 3, 50, 4, 10, 0, 2, 15, 54, 4, 10, 0, 2, 2]
        );
    }

    #[test]
    fn prefix_lengths() {
        assert_eq!(prefix_len(Ipv4Addr::new(255, 255, 255, 0)), Some(24));
        assert_eq!(prefix_len(Ipv4Addr::new(255, 255, 255, 255)), Some(32));
        assert_eq!(prefix_len(Ipv4Addr::new(0, 0, 0, 0)), Some(0));
        assert_eq!(prefix_len(Ipv4Addr::new(255, 0, 255, 0)), None);
    }
}
