//! Generic netlink (linux/genetlink.h): a family's id by its name
//! (`CTRL_CMD_GETFAMILY`), and requests to a family (`struct genlmsghdr`
//! then attributes).

use nix::sys::socket::SockProtocol;

use super::NetlinkError;
use super::message::{NLM_F_ACK, attributes, put_attribute};
use super::reply::NetlinkReply;
use super::socket::NetlinkSocket;

/// `GENL_ID_CTRL`: the controller's family id.
const GENL_ID_CTRL: u16 = 0x10;
const CTRL_CMD_NEWFAMILY: u8 = 1;
const CTRL_CMD_GETFAMILY: u8 = 3;
const CTRL_ATTR_FAMILY_ID: u16 = 1;
const CTRL_ATTR_FAMILY_NAME: u16 = 2;
const CTRL_VERSION: u8 = 1;
/// `sizeof(struct genlmsghdr)`.
pub const GENL_HEADER_LEN: usize = 4;

/// `struct genlmsghdr` then `attributes` (already encoded).
pub fn genl_body(command: u8, version: u8, attributes: &[u8]) -> Vec<u8> {
    let mut b = vec![command, version, 0, 0];
    b.extend_from_slice(attributes);
    b
}

/// The attributes of a generic netlink message of `command`.
pub fn genl_payload(body: &[u8], command: u8) -> Result<&[u8], NetlinkError> {
    let header = body
        .get(..GENL_HEADER_LEN)
        .ok_or(NetlinkError::Malformed("short genlmsghdr"))?;
    if header[0] != command {
        return Err(NetlinkError::Malformed(
            "unexpected generic netlink command",
        ));
    }
    Ok(&body[GENL_HEADER_LEN..])
}

/// Parses the controller's `CTRL_CMD_NEWFAMILY` answer about `name`: its
/// `CTRL_ATTR_FAMILY_ID`.
pub fn parse_family_id(body: &[u8], name: &str) -> Result<u16, NetlinkError> {
    let mut id = None;
    let mut named = None;
    for a in attributes(genl_payload(body, CTRL_CMD_NEWFAMILY)?)? {
        match a.kind {
            CTRL_ATTR_FAMILY_ID => id = Some(a.u16()?),
            CTRL_ATTR_FAMILY_NAME => named = Some(a.string()?),
            _ => {}
        }
    }
    if named != Some(name) {
        return Err(NetlinkError::Malformed("not the family asked for"));
    }
    match id {
        Some(id) if id > GENL_ID_CTRL => Ok(id),
        _ => Err(NetlinkError::Malformed("family id")),
    }
}

/// A `NETLINK_GENERIC` socket.
#[derive(Debug)]
pub struct GenericNetlink {
    socket: NetlinkSocket,
}

impl GenericNetlink {
    /// Opens and binds the socket.
    pub fn open() -> Result<GenericNetlink, NetlinkError> {
        Ok(GenericNetlink {
            socket: NetlinkSocket::open(SockProtocol::NetlinkGeneric)?,
        })
    }

    /// The id of the family `name` (`ENOENT` if its module is not loaded).
    pub fn family_id(&mut self, name: &str) -> Result<u16, NetlinkError> {
        let mut name_z = name.as_bytes().to_vec();
        name_z.push(0);
        let mut attrs = Vec::new();
        put_attribute(&mut attrs, CTRL_ATTR_FAMILY_NAME, &name_z);
        let reply = self.request(
            GENL_ID_CTRL,
            NLM_F_ACK,
            &genl_body(CTRL_CMD_GETFAMILY, CTRL_VERSION, &attrs),
        )?;
        let mut bodies = reply.bodies().filter(|(k, _)| *k == GENL_ID_CTRL);
        let (_, body) = bodies.next().ok_or(NetlinkError::Malformed("no family"))?;
        parse_family_id(body, name)
    }

    /// Sends a request to `family` (its body from [`genl_body`]) and
    /// returns its answer.
    pub fn request(
        &mut self,
        family: u16,
        flags: u16,
        body: &[u8],
    ) -> Result<NetlinkReply, NetlinkError> {
        self.socket.request(family, flags, body)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn family_answer(id: u16, name: &[u8]) -> Vec<u8> {
        let mut attrs = Vec::new();
        put_attribute(&mut attrs, CTRL_ATTR_FAMILY_NAME, name);
        put_attribute(&mut attrs, CTRL_ATTR_FAMILY_ID, &id.to_ne_bytes());
        put_attribute(&mut attrs, 3, &1u32.to_ne_bytes());
        genl_body(CTRL_CMD_NEWFAMILY, 2, &attrs)
    }

    #[test]
    fn the_family_request_has_the_layout_of_genetlink_h() {
        let mut attrs = Vec::new();
        put_attribute(&mut attrs, CTRL_ATTR_FAMILY_NAME, b"wireguard\0");
        let body = genl_body(CTRL_CMD_GETFAMILY, CTRL_VERSION, &attrs);
        let mut want = vec![3u8, 1, 0, 0];
        want.extend_from_slice(&14u16.to_ne_bytes());
        want.extend_from_slice(&2u16.to_ne_bytes());
        want.extend_from_slice(b"wireguard\0\0\0");
        assert_eq!(body, want);
    }

    #[test]
    fn the_family_id_is_read_from_the_controllers_answer() {
        assert_eq!(
            parse_family_id(&family_answer(29, b"wireguard\0"), "wireguard"),
            Ok(29)
        );
        assert!(parse_family_id(&family_answer(29, b"nl80211\0"), "wireguard").is_err());
        assert!(parse_family_id(&family_answer(0x10, b"wireguard\0"), "wireguard").is_err());
        let mut wrong_command = family_answer(29, b"wireguard\0");
        wrong_command[0] = CTRL_CMD_GETFAMILY;
        assert!(parse_family_id(&wrong_command, "wireguard").is_err());
        assert!(parse_family_id(&[1, 2], "wireguard").is_err());
    }
}
