//! Collecting the answer to one request from the datagrams the kernel
//! sends: the messages carrying its sequence number, until its
//! acknowledgement, its error or the end of its dump. Bounded in
//! datagram size, messages and bytes; kept in zeroized buffers (a
//! WireGuard device's answer holds its private key).

use zeroize::Zeroizing;

use super::NetlinkError;
use super::message::{NLMSG_DONE, NLMSG_ERROR, NLMSG_NOOP, NLMSG_OVERRUN, messages};
use nix::errno::Errno;

/// The largest datagram read (the kernel sizes a dump's datagrams to the
/// reader's buffer, up to 32 KiB and a page).
pub const MAX_DATAGRAM_BYTES: usize = 64 * 1024;
/// The most messages (including other requests' stale ones) one answer
/// may span.
pub const MAX_REPLY_MESSAGES: usize = 4096;
/// The most bytes of message bodies one answer may hold (1,024 WireGuard
/// peers take about 200 KiB).
pub const MAX_REPLY_BYTES: usize = 4 * 1024 * 1024;

/// The answer to one request, as its datagrams arrive (its bodies may
/// hold a private key: `Debug` shows only their count and size).
pub struct NetlinkReply {
    seq: u32,
    seen: usize,
    bytes: usize,
    bodies: Vec<(u16, Zeroizing<Vec<u8>>)>,
}

impl std::fmt::Debug for NetlinkReply {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NetlinkReply")
            .field("seq", &self.seq)
            .field("messages", &self.bodies.len())
            .field("bytes", &self.bytes)
            .finish()
    }
}

impl NetlinkReply {
    /// An empty answer to the request numbered `seq`.
    pub fn new(seq: u32) -> NetlinkReply {
        NetlinkReply {
            seq,
            seen: 0,
            bytes: 0,
            bodies: Vec::new(),
        }
    }

    /// Takes one datagram; `Ok(true)` once the answer is complete (an
    /// acknowledgement or the end of a dump), an error if the kernel
    /// refused the request or the answer breaks a bound.
    pub fn take(&mut self, datagram: &[u8]) -> Result<bool, NetlinkError> {
        if datagram.len() > MAX_DATAGRAM_BYTES {
            return Err(NetlinkError::TooLarge("datagram"));
        }
        for m in messages(datagram)? {
            self.seen += 1;
            if self.seen > MAX_REPLY_MESSAGES {
                return Err(NetlinkError::TooLarge("messages in one answer"));
            }
            if m.seq != self.seq {
                continue;
            }
            match m.kind {
                NLMSG_ERROR | NLMSG_DONE => {
                    // NLMSG_DONE carries the dump's status, 0 if it is whole.
                    let code = if m.kind == NLMSG_DONE && m.body.is_empty() {
                        0
                    } else {
                        m.error_code()?
                    };
                    return match code {
                        0 => Ok(true),
                        // i32::MIN has no positive errno.
                        c if c < 0 => c
                            .checked_neg()
                            .map_or(Err(NetlinkError::Malformed("error code")), |e| {
                                Err(NetlinkError::Refused(Errno::from_raw(e)))
                            }),
                        _ => Err(NetlinkError::Malformed("error code")),
                    };
                }
                NLMSG_NOOP => {}
                NLMSG_OVERRUN => return Err(NetlinkError::Malformed("overrun")),
                kind => {
                    self.bytes += m.body.len();
                    if self.bytes > MAX_REPLY_BYTES {
                        return Err(NetlinkError::TooLarge("bytes in one answer"));
                    }
                    self.bodies.push((kind, Zeroizing::new(m.body.to_vec())));
                }
            }
        }
        Ok(false)
    }

    /// The bodies of the answer's messages other than its status, with
    /// their types.
    pub fn bodies(&self) -> impl Iterator<Item = (u16, &[u8])> {
        self.bodies.iter().map(|(k, b)| (*k, b.as_slice()))
    }
}

#[cfg(test)]
mod tests {
    use super::super::message::message;
    use super::*;

    fn ack(seq: u32, code: i32) -> Vec<u8> {
        let mut body = code.to_ne_bytes().to_vec();
        body.extend_from_slice(&[0u8; 16]);
        message(NLMSG_ERROR, 0, seq, &body)
    }

    #[test]
    fn acknowledgements_are_matched_by_sequence() {
        let mut r = NetlinkReply::new(3);
        assert_eq!(r.take(&ack(2, -1)), Ok(false));
        assert_eq!(r.take(&ack(3, 0)), Ok(true));
        let mut r = NetlinkReply::new(3);
        assert_eq!(
            r.take(&ack(3, -17)),
            Err(NetlinkError::Refused(Errno::EEXIST))
        );
        let mut two = ack(2, -1);
        two.extend_from_slice(&ack(3, 0));
        assert_eq!(NetlinkReply::new(3).take(&two), Ok(true));
        assert!(NetlinkReply::new(3).take(&ack(3, 5)).is_err());
        // The one negative code without a positive errno (found by fuzzing).
        assert_eq!(
            NetlinkReply::new(3).take(&ack(3, i32::MIN)),
            Err(NetlinkError::Malformed("error code"))
        );
        let mut bad = ack(3, 0);
        bad[0] = 200;
        assert!(NetlinkReply::new(3).take(&bad).is_err());
    }

    #[test]
    fn a_dump_collects_its_messages_until_done() {
        let mut r = NetlinkReply::new(9);
        let mut d = message(16, 2, 9, &[1, 2, 3, 4]);
        d.extend_from_slice(&message(16, 2, 8, &[5, 6, 7, 8]));
        assert_eq!(r.take(&d), Ok(false));
        assert_eq!(r.take(&message(21, 2, 9, &[9; 8])), Ok(false));
        assert_eq!(
            r.take(&message(NLMSG_DONE, 2, 9, &0i32.to_ne_bytes())),
            Ok(true)
        );
        let bodies: Vec<_> = r.bodies().collect();
        assert_eq!(bodies, vec![(16, &[1u8, 2, 3, 4][..]), (21, &[9u8; 8][..])]);
        // What it holds is not printed.
        assert_eq!(
            format!("{r:?}"),
            "NetlinkReply { seq: 9, messages: 2, bytes: 12 }"
        );
        let mut r = NetlinkReply::new(9);
        assert_eq!(
            r.take(&message(NLMSG_DONE, 2, 9, &(-19i32).to_ne_bytes())),
            Err(NetlinkError::Refused(Errno::ENODEV))
        );
    }

    #[test]
    fn answers_are_bounded() {
        let mut r = NetlinkReply::new(1);
        let stale = message(16, 2, 2, &[]);
        for _ in 0..MAX_REPLY_MESSAGES {
            assert_eq!(r.take(&stale), Ok(false));
        }
        assert!(matches!(r.take(&stale), Err(NetlinkError::TooLarge(_))));
        let mut r = NetlinkReply::new(1);
        let big = message(16, 2, 1, &vec![0; 60 * 1024]);
        let mut result = Ok(false);
        for _ in 0..=MAX_REPLY_BYTES / big.len() {
            result = r.take(&big);
        }
        assert!(matches!(result, Err(NetlinkError::TooLarge(_))));
        assert!(matches!(
            NetlinkReply::new(1).take(&vec![0; MAX_DATAGRAM_BYTES + 1]),
            Err(NetlinkError::TooLarge(_))
        ));
    }
}
