//! Netlink without a shell and without `unsafe`: rtnetlink for links,
//! addresses and routes ([`Rtnetlink`]), generic netlink's family lookup
//! ([`GenericNetlink`]), on which the `vpn` crate builds WireGuard's
//! device commands and a node's WireGuard interface.
//!
//! Requests are built as bytes with the layouts of linux/netlink.h,
//! linux/rtnetlink.h, linux/genetlink.h and linux/wireguard.h; sockets are
//! nix's. Every answer is bounded: a datagram's size, the messages and
//! bytes of one answer, the attributes of one payload, the peers and
//! allowed IPs of one device; each is matched to its request by sequence
//! number and sender (the kernel, port 0), and each read waits at most
//! [`RECEIVE_TIMEOUT`]. The kernel's refusals come back as their errno
//! ([`NetlinkError::Refused`]).
// Every length and offset here comes from the host (a disk, a datagram,
// a socket): a cast that could truncate, wrap or drop a sign is refused
// at compile time, so each conversion is checked where it happens.
#![deny(
    clippy::cast_possible_truncation,
    clippy::cast_sign_loss,
    clippy::cast_possible_wrap,
    clippy::cast_lossless
)]

pub mod generic;
pub mod message;
mod reply;
mod route;
mod socket;

use std::time::Duration;

use nix::errno::Errno;

pub use generic::{GenericNetlink, parse_family_id};
pub use reply::{MAX_DATAGRAM_BYTES, MAX_REPLY_BYTES, MAX_REPLY_MESSAGES, NetlinkReply};
pub use route::{Link, Rtnetlink, check_interface_name, parse_link};
pub use socket::NetlinkSocket;

/// How long one read of an answer waits.
pub const RECEIVE_TIMEOUT: Duration = Duration::from_secs(5);

/// Why a netlink request failed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum NetlinkError {
    /// The socket could not be made, or sending or receiving failed.
    #[error("netlink socket: {0}")]
    Socket(Errno),
    /// No answer within [`RECEIVE_TIMEOUT`].
    #[error("no netlink answer within {:?}", RECEIVE_TIMEOUT)]
    Timeout,
    /// The kernel refused the request (its errno).
    #[error("refused: {0}")]
    Refused(Errno),
    /// The answer is not what the request asks for (what is wrong).
    #[error("malformed netlink answer: {0}")]
    Malformed(&'static str),
    /// The answer exceeds a bound (which one).
    #[error("netlink answer too large: {0}")]
    TooLarge(&'static str),
    /// A link of that name exists and is not a WireGuard interface.
    #[error("the link exists and is of another kind")]
    WrongLinkKind,
    /// An interface name that is empty, longer than 15 bytes or holds a
    /// `/`, whitespace or NUL.
    #[error("interface name: want 1 to 15 bytes without '/', space or NUL")]
    InvalidName,
}
