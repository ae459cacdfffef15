//! A netlink socket that sends one request at a time and collects its
//! answer ([`NetlinkReply`]), each read waiting at most
//! [`RECEIVE_TIMEOUT`] and only the kernel's datagrams taken.

use std::os::fd::{AsRawFd, OwnedFd};

use nix::errno::Errno;
use nix::sys::socket::{
    AddressFamily, MsgFlags, NetlinkAddr, SockFlag, SockProtocol, SockType, bind, recvfrom, sendto,
    setsockopt, socket, sockopt,
};
use nix::sys::time::TimeVal;
use zeroize::Zeroizing;

use super::message::{NLM_F_REQUEST, message};
use super::reply::{MAX_DATAGRAM_BYTES, MAX_REPLY_MESSAGES, NetlinkReply};
use super::{NetlinkError, RECEIVE_TIMEOUT};

/// A bound netlink socket of one protocol (route or generic).
#[derive(Debug)]
pub struct NetlinkSocket {
    fd: OwnedFd,
    seq: u32,
}

impl NetlinkSocket {
    /// Opens, binds and sets the read timeout of a socket of `protocol`.
    pub fn open(protocol: SockProtocol) -> Result<NetlinkSocket, NetlinkError> {
        let fd = socket(
            AddressFamily::Netlink,
            SockType::Raw,
            SockFlag::SOCK_CLOEXEC,
            protocol,
        )
        .map_err(NetlinkError::Socket)?;
        let seconds = RECEIVE_TIMEOUT
            .as_secs()
            .try_into()
            .unwrap_or(nix::libc::time_t::MAX);
        let timeout = TimeVal::new(seconds, 0);
        setsockopt(&fd, sockopt::ReceiveTimeout, &timeout).map_err(NetlinkError::Socket)?;
        bind(fd.as_raw_fd(), &NetlinkAddr::new(0, 0)).map_err(NetlinkError::Socket)?;
        Ok(NetlinkSocket { fd, seq: 0 })
    }

    /// Sends one request (`NLM_F_REQUEST` is added to `flags`) and returns
    /// its whole answer: it ends with an acknowledgement (ask for one with
    /// `NLM_F_ACK`) or, for a dump, with `NLMSG_DONE`.
    pub fn request(
        &mut self,
        kind: u16,
        flags: u16,
        body: &[u8],
    ) -> Result<NetlinkReply, NetlinkError> {
        self.seq = self.seq.wrapping_add(1);
        let request = Zeroizing::new(message(kind, NLM_F_REQUEST | flags, self.seq, body));
        let sent = sendto(
            self.fd.as_raw_fd(),
            &request,
            &NetlinkAddr::new(0, 0),
            MsgFlags::empty(),
        )
        .map_err(NetlinkError::Socket)?;
        if sent != request.len() {
            return Err(NetlinkError::Socket(Errno::EMSGSIZE));
        }
        let mut reply = NetlinkReply::new(self.seq);
        let mut buf = Zeroizing::new(vec![0u8; MAX_DATAGRAM_BYTES]);
        // Each datagram holds at least one message, so this many reads
        // always reach the answer's bound.
        for _ in 0..=MAX_REPLY_MESSAGES {
            // The kernel's datagrams are at most 32 KiB and a page; a longer
            // one would be cut and then refused by its message lengths.
            let (n, from) =
                recvfrom::<NetlinkAddr>(self.fd.as_raw_fd(), &mut buf).map_err(|e| match e {
                    Errno::EAGAIN => NetlinkError::Timeout,
                    e => NetlinkError::Socket(e),
                })?;
            if from.is_none_or(|a| a.pid() != 0) {
                continue;
            }
            if reply.take(&buf[..n])? {
                return Ok(reply);
            }
        }
        Err(NetlinkError::TooLarge("messages in one answer"))
    }
}
