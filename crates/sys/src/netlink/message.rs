//! Netlink messages and attributes as bytes (linux/netlink.h): building a
//! request, splitting a datagram into messages and a payload into
//! attributes, each step bounded by the bytes it was given.

use super::NetlinkError;

/// `sizeof(struct nlmsghdr)`.
pub const HEADER_LEN: usize = 16;
/// `sizeof(struct nlattr)`.
pub const ATTRIBUTE_HEADER_LEN: usize = 4;

/// `NLMSG_NOOP`.
pub const NLMSG_NOOP: u16 = 1;
/// `NLMSG_ERROR`: an acknowledgement (code 0) or an error (a negative errno).
pub const NLMSG_ERROR: u16 = 2;
/// `NLMSG_DONE`: the end of a dump.
pub const NLMSG_DONE: u16 = 3;
/// `NLMSG_OVERRUN`.
pub const NLMSG_OVERRUN: u16 = 4;

/// `NLM_F_REQUEST`.
pub const NLM_F_REQUEST: u16 = 0x1;
/// `NLM_F_MULTI`: part of a multi-part answer.
pub const NLM_F_MULTI: u16 = 0x2;
/// `NLM_F_ACK`.
pub const NLM_F_ACK: u16 = 0x4;
/// `NLM_F_REPLACE`.
pub const NLM_F_REPLACE: u16 = 0x100;
/// `NLM_F_EXCL`.
pub const NLM_F_EXCL: u16 = 0x200;
/// `NLM_F_CREATE`.
pub const NLM_F_CREATE: u16 = 0x400;
/// `NLM_F_DUMP` (`NLM_F_ROOT | NLM_F_MATCH`).
pub const NLM_F_DUMP: u16 = 0x300;

/// `NLA_F_NESTED`: the attribute holds attributes.
pub const NLA_F_NESTED: u16 = 0x8000;
/// The bits of `nla_type` that are the type (`NLA_TYPE_MASK`).
pub const NLA_TYPE_MASK: u16 = 0x3fff;

/// The most attributes read from one payload (a nest or a message body).
pub const MAX_ATTRIBUTES: usize = 4096;

/// A netlink message: header then `body` (padded to 4 bytes).
pub fn message(kind: u16, flags: u16, seq: u32, body: &[u8]) -> Vec<u8> {
    let len = HEADER_LEN + align(body.len());
    let mut m = Vec::with_capacity(len);
    m.extend_from_slice(&header_len::<u32>(len).to_ne_bytes());
    m.extend_from_slice(&kind.to_ne_bytes());
    m.extend_from_slice(&flags.to_ne_bytes());
    m.extend_from_slice(&seq.to_ne_bytes());
    m.extend_from_slice(&0u32.to_ne_bytes());
    m.extend_from_slice(body);
    m.resize(len, 0);
    m
}

/// `n` rounded up to a multiple of 4 (`NLMSG_ALIGN`, `NLA_ALIGN`).
pub fn align(n: usize) -> usize {
    (n + 3) & !3
}

/// Appends an attribute, padded to 4 bytes.
pub fn put_attribute(out: &mut Vec<u8>, kind: u16, value: &[u8]) {
    out.extend_from_slice(&header_len::<u16>(ATTRIBUTE_HEADER_LEN + value.len()).to_ne_bytes());
    out.extend_from_slice(&kind.to_ne_bytes());
    out.extend_from_slice(value);
    pad(out);
}

/// Starts a nested attribute; [`end_nest`] writes its length.
pub fn begin_nest(out: &mut Vec<u8>, kind: u16) -> usize {
    let start = out.len();
    out.extend_from_slice(&0u16.to_ne_bytes());
    out.extend_from_slice(&(kind | NLA_F_NESTED).to_ne_bytes());
    start
}

/// Ends the nest begun at `start`.
pub fn end_nest(out: &mut [u8], start: usize) {
    let len = header_len::<u16>(out.len() - start);
    out[start..start + 2].copy_from_slice(&len.to_ne_bytes());
}

/// A length as a header field of type `T` (a message's `u32`, an
/// attribute's `u16`). What is built here (names, keys, addresses, a
/// device's peers) stays far below either; a length past the field's
/// maximum is written as that maximum, which the kernel refuses as a
/// length that does not match, instead of a wrapped one that might.
fn header_len<T: TryFrom<usize> + Bounded>(n: usize) -> T {
    T::try_from(n).unwrap_or(T::MAX)
}

/// An integer type's largest value.
trait Bounded {
    /// The largest value.
    const MAX: Self;
}

impl Bounded for u16 {
    const MAX: u16 = u16::MAX;
}

impl Bounded for u32 {
    const MAX: u32 = u32::MAX;
}

fn pad(out: &mut Vec<u8>) {
    while !out.len().is_multiple_of(4) {
        out.push(0);
    }
}

/// One message of a datagram, borrowed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NetlinkMessage<'a> {
    /// `nlmsg_type`.
    pub kind: u16,
    /// `nlmsg_flags`.
    pub flags: u16,
    /// `nlmsg_seq`.
    pub seq: u32,
    /// What follows the header, within `nlmsg_len`.
    pub body: &'a [u8],
}

impl<'a> NetlinkMessage<'a> {
    /// For an `NLMSG_ERROR` message, its code: 0 for an acknowledgement,
    /// else the kernel's (negative) errno.
    pub fn error_code(&self) -> Result<i32, NetlinkError> {
        let code = self
            .body
            .get(..4)
            .ok_or(NetlinkError::Malformed("short NLMSG_ERROR"))?;
        Ok(i32::from_ne_bytes([code[0], code[1], code[2], code[3]]))
    }
}

/// Splits a datagram into its messages; a length that does not fit
/// refuses the whole datagram.
pub fn messages(mut datagram: &[u8]) -> Result<Vec<NetlinkMessage<'_>>, NetlinkError> {
    let mut out = Vec::new();
    while !datagram.is_empty() {
        if datagram.len() < HEADER_LEN {
            return Err(NetlinkError::Malformed("short message header"));
        }
        let len = u32::from_ne_bytes([datagram[0], datagram[1], datagram[2], datagram[3]]) as usize;
        if len < HEADER_LEN || len > datagram.len() {
            return Err(NetlinkError::Malformed("message length"));
        }
        out.push(NetlinkMessage {
            kind: u16::from_ne_bytes([datagram[4], datagram[5]]),
            flags: u16::from_ne_bytes([datagram[6], datagram[7]]),
            seq: u32::from_ne_bytes([datagram[8], datagram[9], datagram[10], datagram[11]]),
            body: &datagram[HEADER_LEN..len],
        });
        datagram = datagram.get(align(len)..).unwrap_or(&[]);
    }
    Ok(out)
}

/// One attribute, borrowed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Attribute<'a> {
    /// The type, without the nested and byte-order flags.
    pub kind: u16,
    /// The value, without padding.
    pub value: &'a [u8],
}

impl<'a> Attribute<'a> {
    /// The value as a `u8`.
    pub fn u8(&self) -> Result<u8, NetlinkError> {
        Ok(self.array::<1>()?[0])
    }

    /// The value as a native-endian `u16`.
    pub fn u16(&self) -> Result<u16, NetlinkError> {
        Ok(u16::from_ne_bytes(self.array()?))
    }

    /// The value as a native-endian `u32`.
    pub fn u32(&self) -> Result<u32, NetlinkError> {
        Ok(u32::from_ne_bytes(self.array()?))
    }

    /// The value as a native-endian `u64`.
    pub fn u64(&self) -> Result<u64, NetlinkError> {
        Ok(u64::from_ne_bytes(self.array()?))
    }

    /// The value as exactly `N` bytes.
    pub fn array<const N: usize>(&self) -> Result<[u8; N], NetlinkError> {
        self.value
            .try_into()
            .map_err(|_| NetlinkError::Malformed("attribute length"))
    }

    /// The value as a NUL-terminated UTF-8 string.
    pub fn string(&self) -> Result<&'a str, NetlinkError> {
        let text = match self.value.iter().position(|&b| b == 0) {
            Some(end) => &self.value[..end],
            None => self.value,
        };
        std::str::from_utf8(text).map_err(|_| NetlinkError::Malformed("attribute string"))
    }

    /// The attributes nested in the value.
    pub fn nested(&self) -> Result<Vec<Attribute<'a>>, NetlinkError> {
        attributes(self.value)
    }
}

/// Splits a payload into attributes (at most [`MAX_ATTRIBUTES`]); a length
/// that does not fit refuses the whole payload.
pub fn attributes(mut payload: &[u8]) -> Result<Vec<Attribute<'_>>, NetlinkError> {
    let mut out = Vec::new();
    while payload.len() >= ATTRIBUTE_HEADER_LEN {
        if out.len() == MAX_ATTRIBUTES {
            return Err(NetlinkError::TooLarge("attributes in one payload"));
        }
        let len = u16::from_ne_bytes([payload[0], payload[1]]) as usize;
        if len < ATTRIBUTE_HEADER_LEN || len > payload.len() {
            return Err(NetlinkError::Malformed("attribute length"));
        }
        out.push(Attribute {
            kind: u16::from_ne_bytes([payload[2], payload[3]]) & NLA_TYPE_MASK,
            value: &payload[ATTRIBUTE_HEADER_LEN..len],
        });
        payload = payload.get(align(len)..).unwrap_or(&[]);
    }
    if !payload.is_empty() {
        return Err(NetlinkError::Malformed("trailing bytes after attributes"));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_message_has_the_header_of_linux_netlink_h() {
        let m = message(16, NLM_F_REQUEST | NLM_F_ACK, 7, &[1, 2, 3]);
        let mut want = Vec::new();
        want.extend_from_slice(&20u32.to_ne_bytes());
        want.extend_from_slice(&16u16.to_ne_bytes());
        want.extend_from_slice(&5u16.to_ne_bytes());
        want.extend_from_slice(&7u32.to_ne_bytes());
        want.extend_from_slice(&0u32.to_ne_bytes());
        want.extend_from_slice(&[1, 2, 3, 0]);
        assert_eq!(m, want);
        let parsed = messages(&m).unwrap();
        assert_eq!(parsed.len(), 1);
        assert_eq!((parsed[0].kind, parsed[0].flags, parsed[0].seq), (16, 5, 7));
        assert_eq!(parsed[0].body, &[1, 2, 3, 0]);
    }

    #[test]
    fn attributes_are_padded_and_nests_flagged() {
        let mut b = Vec::new();
        put_attribute(&mut b, 3, b"wg0\0");
        let nest = begin_nest(&mut b, 18);
        put_attribute(&mut b, 1, b"wireguard");
        end_nest(&mut b, nest);
        let mut want = Vec::new();
        want.extend_from_slice(&8u16.to_ne_bytes());
        want.extend_from_slice(&3u16.to_ne_bytes());
        want.extend_from_slice(b"wg0\0");
        want.extend_from_slice(&20u16.to_ne_bytes());
        want.extend_from_slice(&(18u16 | 0x8000).to_ne_bytes());
        want.extend_from_slice(&13u16.to_ne_bytes());
        want.extend_from_slice(&1u16.to_ne_bytes());
        want.extend_from_slice(b"wireguard\0\0\0");
        assert_eq!(b, want);
        let attrs = attributes(&b).unwrap();
        assert_eq!(attrs[0].string().unwrap(), "wg0");
        assert_eq!(attrs[1].kind, 18);
        assert_eq!(attrs[1].nested().unwrap()[0].string().unwrap(), "wireguard");
    }

    #[test]
    fn lengths_that_do_not_fit_are_refused() {
        let mut m = message(2, 0, 1, &[0; 4]);
        m[0] = 200;
        assert!(messages(&m).is_err());
        assert!(messages(&[1, 2, 3]).is_err());
        m[0] = 15;
        assert!(messages(&m).is_err());
        assert!(attributes(&[9, 0, 1, 0, 0]).is_err());
        assert!(attributes(&[3, 0, 1, 0]).is_err());
        assert!(attributes(&[8, 0, 1, 0, 0, 0, 0, 0, 1]).is_err());
        let one = Attribute {
            kind: 1,
            value: &[1, 2],
        };
        assert!(one.u32().is_err());
        assert_eq!(one.u16().unwrap(), u16::from_ne_bytes([1, 2]));
    }

    #[test]
    fn attribute_counts_are_bounded() {
        let mut b = Vec::new();
        for _ in 0..=MAX_ATTRIBUTES {
            put_attribute(&mut b, 1, &[]);
        }
        assert_eq!(
            attributes(&b),
            Err(NetlinkError::TooLarge("attributes in one payload"))
        );
        b.truncate(b.len() - 4);
        assert_eq!(attributes(&b).unwrap().len(), MAX_ATTRIBUTES);
    }
}
