//! The node's network: `lo` up, then DHCP on every virtio NIC and each
//! lease applied over rtnetlink (address; the first NIC's default route).

use std::ffi::OsString;
use std::net::{Ipv4Addr, SocketAddrV4, UdpSocket};
use std::path::Path;
use std::time::{Duration, Instant};

use confboot_sys::dhcp::{self, DhcpMessageType, DhcpReply, DhcpRequest};
use confboot_sys::netlink::{NetlinkError, Rtnetlink};
use confboot_util::backoff::Backoff;
use nix::net::if_::if_nametoindex;
use nix::sys::socket::{setsockopt, sockopt};

/// Attempts of one DHCP exchange (DISCOVER or REQUEST) before giving up.
const DHCP_ATTEMPTS: u32 = 6;
/// The first wait for an answer; doubles (with jitter) up to the cap.
const DHCP_FIRST_WAIT: Duration = Duration::from_secs(1);
const DHCP_MAX_WAIT: Duration = Duration::from_secs(8);
/// Datagrams looked at per wait (others than the answer are dropped).
const MAX_DATAGRAMS_PER_WAIT: u32 = 64;

/// The kernel's host name.
const HOSTNAME: &str = "/proc/sys/kernel/hostname";

/// A lease as the client applies it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Lease {
    /// The address.
    pub address: Ipv4Addr,
    /// Its prefix length.
    pub prefix: u8,
    /// The default route, if the server named one.
    pub router: Option<Ipv4Addr>,
    /// The host name the server gave (option 12, one DNS label).
    pub host_name: Option<String>,
}

/// Sets `lo` up and configures every virtio NIC by DHCP; prints what it
/// did or why not.
pub fn configure() {
    match Rtnetlink::open() {
        Ok(mut nl) => {
            if let Err(e) = if_nametoindex("lo")
                .map_err(|e| e.to_string())
                .and_then(|i| nl.link_up(i).map_err(|e| e.to_string()))
            {
                println!("CONFBOOT-WARN lo up failed: {e}");
            }
            let nics = virtio_nics(Path::new("/sys/class/net"));
            if nics.is_empty() {
                println!("CONFBOOT-WARN no virtio NIC");
            }
            // Every NIC by DHCP (a second one: the network the nodes
            // share, for their VPN); only the first one's router becomes
            // the default route. The first host name a lease carries
            // becomes the node's (a node without --node-name takes it).
            let mut host_named = false;
            for (i, name) in nics.iter().enumerate() {
                match configure_nic(&mut nl, name, i == 0) {
                    Ok(l) => {
                        if let Some(host) = l.host_name.as_deref().filter(|_| !host_named) {
                            host_named = true;
                            match std::fs::write(HOSTNAME, host) {
                                Ok(()) => println!("CONFBOOT-NET host name {host}"),
                                Err(e) => println!("CONFBOOT-WARN host name {host}: {e}"),
                            }
                        }
                        println!(
                            "CONFBOOT-NET {} {}/{} router {}",
                            name.to_string_lossy(),
                            l.address,
                            l.prefix,
                            l.router.map_or("none".to_string(), |r| r.to_string())
                        )
                    }
                    Err(e) => println!("CONFBOOT-WARN {}: {e}", name.to_string_lossy()),
                }
            }
        }
        Err(e) => println!("CONFBOOT-WARN no network: {e}"),
    }
}

/// The interfaces in `class_net` whose driver is virtio_net, by name (at
/// most [`MAX_NICS`]).
pub fn virtio_nics(class_net: &Path) -> Vec<OsString> {
    let Ok(entries) = std::fs::read_dir(class_net) else {
        return Vec::new();
    };
    let mut names: Vec<OsString> = entries
        .filter_map(|e| e.ok())
        .map(|e| e.file_name())
        .filter(|n| {
            std::fs::read_link(class_net.join(n).join("device/driver"))
                .is_ok_and(|d| d.file_name().is_some_and(|f| f == "virtio_net"))
        })
        .collect();
    names.sort();
    names.truncate(MAX_NICS);
    names
}

/// The most NICs PID 1 configures.
const MAX_NICS: usize = 4;

/// Why a NIC was not configured (PID 1 prints it and goes on).
#[derive(Debug, thiserror::Error)]
enum NicError {
    /// The NIC has no interface index.
    #[error("no index: {0}")]
    Index(nix::Error),
    /// The link could not be brought up.
    #[error("link up: {0}")]
    LinkUp(NetlinkError),
    /// The NIC's MAC address could not be read.
    #[error("no MAC address: {0}")]
    MacUnreadable(std::io::Error),
    /// The NIC's MAC address is not six hex bytes.
    #[error("bad MAC address {0:?}")]
    BadMac(String),
    /// The leased address could not be set.
    #[error("address {address}/{prefix}: {error}")]
    Address {
        /// The address.
        address: Ipv4Addr,
        /// Its prefix length.
        prefix: u8,
        /// What the kernel said.
        error: NetlinkError,
    },
    /// The default route could not be set.
    #[error("default route via {router}: {error}")]
    DefaultRoute {
        /// The router.
        router: Ipv4Addr,
        /// What the kernel said.
        error: NetlinkError,
    },
    /// DHCP gave no lease.
    #[error(transparent)]
    Dhcp(#[from] DhcpError),
}

/// Why DHCP gave no lease.
#[derive(Debug, thiserror::Error)]
enum DhcpError {
    /// The client socket could not be opened.
    #[error("DHCP socket: {0}")]
    Socket(std::io::Error),
    /// The socket could not be bound to the NIC.
    #[error("bind to device: {0}")]
    BindToDevice(nix::Error),
    /// The socket could not broadcast.
    #[error("broadcast: {0}")]
    Broadcast(std::io::Error),
    /// An offer named no server.
    #[error("an offer without a server id")]
    OfferWithoutServer,
    /// The netmask is not a prefix.
    #[error("bad netmask {0}")]
    BadNetmask(Ipv4Addr),
    /// The server answered NAK twice.
    #[error("DHCP server refused twice (NAK)")]
    RefusedTwice,
    /// A message could not be sent.
    #[error("DHCP send: {0}")]
    Send(std::io::Error),
    /// The read timeout could not be set.
    #[error("DHCP timeout: {0}")]
    Timeout(std::io::Error),
    /// No reply of the kind waited for came.
    #[error("no DHCP {0:?} after {DHCP_ATTEMPTS} attempts")]
    NoReply(DhcpMessageType),
}

/// Configures `name` by DHCP: its address, and the default route through
/// its router when `default_route`.
fn configure_nic(
    nl: &mut Rtnetlink,
    name: &OsString,
    default_route: bool,
) -> Result<Lease, NicError> {
    let index = if_nametoindex(name.as_os_str()).map_err(NicError::Index)?;
    nl.link_up(index).map_err(NicError::LinkUp)?;
    let mac = read_mac(&Path::new("/sys/class/net").join(name).join("address"))?;
    let lease = dhcp_lease(name, mac)?;
    nl.add_address(index, lease.address, lease.prefix)
        .map_err(|error| NicError::Address {
            address: lease.address,
            prefix: lease.prefix,
            error,
        })?;
    if let Some(router) = lease.router.filter(|_| default_route) {
        nl.add_default_route(index, router)
            .map_err(|error| NicError::DefaultRoute { router, error })?;
    }
    Ok(lease)
}

/// `52:54:00:12:34:56` from sysfs.
fn read_mac(path: &Path) -> Result<[u8; 6], NicError> {
    let text = std::fs::read_to_string(path).map_err(NicError::MacUnreadable)?;
    parse_mac(text.trim()).ok_or_else(|| NicError::BadMac(text.trim().to_string()))
}

fn parse_mac(text: &str) -> Option<[u8; 6]> {
    let mut mac = [0u8; 6];
    let mut parts = text.split(':');
    for b in &mut mac {
        let p = parts.next()?;
        if p.len() != 2 {
            return None;
        }
        *b = u8::from_str_radix(p, 16).ok()?;
    }
    parts.next().is_none().then_some(mac)
}

/// DISCOVER → OFFER, REQUEST → ACK on a UDP socket bound to the NIC
/// (broadcast from 0.0.0.0; the server broadcasts its answers). Bounded:
/// [`DHCP_ATTEMPTS`] per step, each wait with backoff; a NAK starts over
/// once.
fn dhcp_lease(name: &OsString, mac: [u8; 6]) -> Result<Lease, DhcpError> {
    let socket = UdpSocket::bind(SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, dhcp::CLIENT_PORT))
        .map_err(DhcpError::Socket)?;
    setsockopt(&socket, sockopt::BindToDevice, name).map_err(DhcpError::BindToDevice)?;
    socket.set_broadcast(true).map_err(DhcpError::Broadcast)?;
    let mut xid = random_u32();
    for _round in 0..2 {
        let discover = DhcpRequest {
            kind: DhcpMessageType::Discover,
            xid,
            mac,
            selected: None,
        };
        let offer = exchange(&socket, &discover, DhcpMessageType::Offer)?;
        let server = offer.server.ok_or(DhcpError::OfferWithoutServer)?;
        let request = DhcpRequest {
            kind: DhcpMessageType::Request,
            xid,
            mac,
            selected: Some((offer.address, server)),
        };
        let ack = exchange(&socket, &request, DhcpMessageType::Ack)?;
        if ack.kind == DhcpMessageType::Nak {
            xid = xid.wrapping_add(1);
            continue;
        }
        let netmask = ack.netmask.or(offer.netmask);
        let prefix = match netmask {
            Some(m) => dhcp::prefix_len(m).ok_or(DhcpError::BadNetmask(m))?,
            None => 24,
        };
        return Ok(Lease {
            address: ack.address,
            prefix,
            router: ack.router.or(offer.router),
            host_name: ack.host_name.or(offer.host_name),
        });
    }
    Err(DhcpError::RefusedTwice)
}

/// Sends `message` and waits for a reply of kind `want` (or a NAK when
/// waiting for an ACK) with the same xid and MAC; resends with backoff.
fn exchange(
    socket: &UdpSocket,
    message: &DhcpRequest,
    want: DhcpMessageType,
) -> Result<DhcpReply, DhcpError> {
    let bytes = message.encode();
    let server = SocketAddrV4::new(Ipv4Addr::BROADCAST, dhcp::SERVER_PORT);
    let mut backoff = Backoff::new(DHCP_FIRST_WAIT, DHCP_MAX_WAIT);
    let mut buf = vec![0u8; dhcp::MAX_MESSAGE_LEN];
    for _ in 0..DHCP_ATTEMPTS {
        socket.send_to(&bytes, server).map_err(DhcpError::Send)?;
        let deadline = Instant::now() + backoff.next_delay();
        for _ in 0..MAX_DATAGRAMS_PER_WAIT {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            socket
                .set_read_timeout(Some(left))
                .map_err(DhcpError::Timeout)?;
            let Ok(n) = socket.recv(&mut buf) else {
                break;
            };
            match DhcpReply::parse(&buf[..n]) {
                Ok(r) if r.xid == message.xid && r.mac == message.mac => {
                    let nak = want == DhcpMessageType::Ack && r.kind == DhcpMessageType::Nak;
                    if r.kind == want || nak {
                        return Ok(r);
                    }
                }
                Ok(_) => {}
                Err(e) => println!("CONFBOOT-WARN DHCP: dropped a reply: {e}"),
            }
        }
    }
    Err(DhcpError::NoReply(want))
}

fn random_u32() -> u32 {
    let mut b = [0u8; 4];
    let _ = std::fs::File::open("/dev/urandom")
        .and_then(|mut f| std::io::Read::read_exact(&mut f, &mut b));
    u32::from_ne_bytes(b)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn macs_parse_strictly() {
        assert_eq!(
            parse_mac("52:54:00:12:34:5f"),
            Some([0x52, 0x54, 0, 0x12, 0x34, 0x5f])
        );
        assert_eq!(parse_mac("52:54:00:12:34"), None);
        assert_eq!(parse_mac("52:54:00:12:34:56:78"), None);
        assert_eq!(parse_mac("52:54:00:12:34:5"), None);
        assert_eq!(parse_mac("52:54:00:12:34:zz"), None);
    }

    #[test]
    fn every_virtio_nic_is_found_in_name_order() {
        let dir = confboot_testkit::TempDir::new("init-nics");
        let nic = |name: &str, driver: &str| {
            let drv = dir.path().join("drivers").join(driver);
            std::fs::create_dir_all(&drv).unwrap();
            let dev = dir.path().join("devices").join(name);
            std::fs::create_dir_all(&dev).unwrap();
            std::os::unix::fs::symlink(&drv, dev.join("driver")).unwrap();
            let class = dir.path().join("class");
            std::fs::create_dir_all(class.join(name)).unwrap();
            std::os::unix::fs::symlink(&dev, class.join(name).join("device")).unwrap();
        };
        nic("eth1", "virtio_net");
        nic("eth0", "e1000");
        nic("eth2", "virtio_net");
        std::fs::create_dir_all(dir.path().join("class/lo")).unwrap();
        let class = dir.path().join("class");
        assert_eq!(
            virtio_nics(&class),
            [OsString::from("eth1"), OsString::from("eth2")]
        );
        assert!(virtio_nics(&dir.path().join("none")).is_empty());
    }
}
