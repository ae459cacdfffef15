//! Netlink without a shell and without `unsafe`: rtnetlink for links,
//! addresses and routes ([`Rtnetlink`]), generic netlink's family lookup
//! ([`GenericNetlink`]) and WireGuard's device commands over it
//! ([`WireGuardNetlink`]), and a node's WireGuard interface as a
//! [`confboot_vpn::PeerSink`] ([`WireGuardInterface`]).
//!
//! Requests are built as bytes with the layouts of linux/netlink.h,
//! linux/rtnetlink.h, linux/genetlink.h and linux/wireguard.h; sockets are
//! nix's. Every answer is bounded: a datagram's size, the messages and
//! bytes of one answer, the attributes of one payload, the peers and
//! allowed IPs of one device; each is matched to its request by sequence
//! number and sender (the kernel, port 0), and each read waits at most
//! [`RECEIVE_TIMEOUT`]. The kernel's refusals come back as their errno
//! ([`NetlinkError::Refused`]).

pub mod generic;
pub mod message;
mod reply;
mod route;
mod socket;

use std::fmt;
use std::time::Duration;

use nix::errno::Errno;

pub use generic::{GenericNetlink, parse_family_id};
pub use reply::{MAX_DATAGRAM_BYTES, MAX_REPLY_BYTES, MAX_REPLY_MESSAGES, NetlinkReply};
pub use route::{Link, Rtnetlink, check_interface_name, parse_link};
pub use socket::NetlinkSocket;

/// How long one read of an answer waits.
pub const RECEIVE_TIMEOUT: Duration = Duration::from_secs(5);

/// Why a netlink request failed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NetlinkError {
    /// The socket could not be made, or sending or receiving failed.
    Socket(Errno),
    /// No answer within [`RECEIVE_TIMEOUT`].
    Timeout,
    /// The kernel refused the request (its errno).
    Refused(Errno),
    /// The answer is not what the request asks for (what is wrong).
    Malformed(&'static str),
    /// The answer exceeds a bound (which one).
    TooLarge(&'static str),
    /// A link of that name exists and is not a WireGuard interface.
    WrongLinkKind,
    /// An interface name that is empty, longer than 15 bytes or holds a
    /// `/`, whitespace or NUL.
    InvalidName,
}

impl fmt::Display for NetlinkError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NetlinkError::Socket(e) => write!(f, "netlink socket: {e}"),
            NetlinkError::Timeout => write!(f, "no netlink answer within {RECEIVE_TIMEOUT:?}"),
            NetlinkError::Refused(e) => write!(f, "refused: {e}"),
            NetlinkError::Malformed(what) => write!(f, "malformed netlink answer: {what}"),
            NetlinkError::TooLarge(what) => write!(f, "netlink answer too large: {what}"),
            NetlinkError::WrongLinkKind => f.write_str("the link exists and is of another kind"),
            NetlinkError::InvalidName => {
                f.write_str("interface name: want 1 to 15 bytes without '/', space or NUL")
            }
        }
    }
}

impl std::error::Error for NetlinkError {}
