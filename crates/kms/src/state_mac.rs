//! A MAC over a file the node trusts on its state disk, bound to the disk's
//! generation.
//!
//! dm-crypt's AES-XTS has no integrity: the host cannot write chosen
//! plaintext, but it can put back any sector it saw before, so one file (the
//! SSH users, the VPN key) can be restored from an older copy while the
//! generation file stays current. Each such file therefore ends in a trailer
//! line that MACs its body, its name and the generation it was written at:
//!
//! ```text
//! body ‖ "confboot-mac v1 " ‖ generation (20 decimal digits) ‖ " " ‖ HMAC (64 hex) ‖ "\n"
//! ```
//!
//! `HMAC-SHA256(key, "confboot state file v1" ‖ 0 ‖ name ‖ 0 ‖ generation (u64 BE) ‖ body)`
//! with `key = HKDF-SHA256(secret = disk key, salt = "", info = "confboot-state-mac-v1")`,
//! a key of its own (no other use of the disk key gives it). Only the node,
//! which holds the disk key, makes a trailer; a copy from another generation
//! carries that generation, which the reader refuses ([`StateMacKey::open`]).

use ring::hmac;

use crate::hkdf_sha256;

/// The HKDF info of the state files' MAC key.
pub const STATE_MAC_INFO: &[u8] = b"confboot-state-mac-v1";
/// What a trailer line starts with.
pub const TRAILER_PREFIX: &[u8] = b"confboot-mac v1 ";
/// A trailer's length: prefix, 20 digits, a space, 64 hex digits, a newline.
pub const TRAILER_LEN: usize = TRAILER_PREFIX.len() + 20 + 1 + 64 + 1;
const DOMAIN: &[u8] = b"confboot state file v1";

/// Why a state file was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum StateMacError {
    /// The file carries no MAC trailer.
    #[error("it carries no MAC")]
    Unsealed,
    /// The trailer is not of the trailer's form.
    #[error("its MAC trailer is malformed")]
    Malformed,
    /// The MAC was made for another generation of the disk (an older copy
    /// put back).
    #[error("its MAC is for generation {found}, the disk is at generation {current}")]
    OtherGeneration {
        /// The generation the trailer names.
        found: u64,
        /// The disk's generation.
        current: u64,
    },
    /// The MAC does not match the body (changed bytes, another file's
    /// trailer, or a key that is not this disk's).
    #[error("its MAC does not match")]
    Mismatch,
}

/// The state files' MAC key, derived from the state disk's key.
pub struct StateMacKey(hmac::Key);

impl StateMacKey {
    /// The key for the state disk whose key is `disk_key`.
    pub fn derive(disk_key: &[u8]) -> StateMacKey {
        let okm = hkdf_sha256(disk_key, &[], STATE_MAC_INFO, 32);
        StateMacKey(hmac::Key::new(hmac::HMAC_SHA256, okm.expose()))
    }

    /// `body` with the trailer for the file `name` at `generation`.
    pub fn seal(&self, name: &str, generation: u64, body: &[u8]) -> Vec<u8> {
        let tag = hmac::sign(&self.0, &message(name, generation, body));
        let mut out = Vec::with_capacity(body.len() + TRAILER_LEN);
        out.extend_from_slice(body);
        out.extend_from_slice(TRAILER_PREFIX);
        out.extend_from_slice(format!("{generation:020} ").as_bytes());
        out.extend_from_slice(confboot_util::hex::encode(tag.as_ref()).as_bytes());
        out.push(b'\n');
        out
    }

    /// The body of the file `name` (its bytes `sealed`) when its MAC is this
    /// key's for a generation in `accepted`, with that generation.
    pub fn open<'a>(
        &self,
        name: &str,
        sealed: &'a [u8],
        accepted: std::ops::RangeInclusive<u64>,
    ) -> Result<(&'a [u8], u64), StateMacError> {
        let (body, generation, tag) = split(sealed)?;
        if !accepted.contains(&generation) {
            return Err(StateMacError::OtherGeneration {
                found: generation,
                current: *accepted.start(),
            });
        }
        hmac::verify(&self.0, &message(name, generation, body), &tag)
            .map_err(|_| StateMacError::Mismatch)?;
        Ok((body, generation))
    }
}

fn message(name: &str, generation: u64, body: &[u8]) -> Vec<u8> {
    let mut m = Vec::with_capacity(DOMAIN.len() + name.len() + 10 + body.len());
    for part in [
        DOMAIN,
        &[0],
        name.as_bytes(),
        &[0],
        &generation.to_be_bytes(),
        body,
    ] {
        m.extend_from_slice(part);
    }
    m
}

/// A sealed file's body, the generation and the MAC its trailer names
/// (nothing checked but the trailer's form).
pub fn split(sealed: &[u8]) -> Result<(&[u8], u64, [u8; 32]), StateMacError> {
    let Some(at) = sealed.len().checked_sub(TRAILER_LEN) else {
        return Err(StateMacError::Unsealed);
    };
    let (body, trailer) = sealed.split_at(at);
    let Some(rest) = trailer.strip_prefix(TRAILER_PREFIX) else {
        return Err(StateMacError::Unsealed);
    };
    let (digits, rest) = rest.split_at(20);
    if !digits.iter().all(u8::is_ascii_digit) || rest[0] != b' ' || rest[65] != b'\n' {
        return Err(StateMacError::Malformed);
    }
    let generation = std::str::from_utf8(digits)
        .ok()
        .and_then(|d| d.parse().ok())
        .ok_or(StateMacError::Malformed)?;
    let hex = std::str::from_utf8(&rest[1..65]).map_err(|_| StateMacError::Malformed)?;
    let tag = confboot_util::hex::decode(hex)
        .ok()
        .and_then(|t| <[u8; 32]>::try_from(t).ok())
        .ok_or(StateMacError::Malformed)?;
    Ok((body, generation, tag))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sealed_body_opens_at_its_generation_only_with_its_name_and_key() {
        let key = StateMacKey::derive(&[7; 32]);
        let sealed = key.seal("ssh-users.json", 5, b"{\"sshUsers\": []}\n");
        assert_eq!(sealed.len(), 17 + TRAILER_LEN);
        assert_eq!(
            key.open("ssh-users.json", &sealed, 5..=6),
            Ok((&b"{\"sshUsers\": []}\n"[..], 5))
        );
        assert_eq!(key.open("ssh-users.json", &sealed, 4..=5).unwrap().1, 5);
        assert_eq!(
            key.open("ssh-users.json", &sealed, 6..=7),
            Err(StateMacError::OtherGeneration {
                found: 5,
                current: 6
            })
        );
        assert_eq!(
            key.open("vpn-private-key", &sealed, 5..=5),
            Err(StateMacError::Mismatch)
        );
        assert_eq!(
            StateMacKey::derive(&[8; 32]).open("ssh-users.json", &sealed, 5..=5),
            Err(StateMacError::Mismatch)
        );
        // The trailer's generation rewritten: the MAC no longer matches.
        let mut moved = sealed.clone();
        let at = moved.len() - TRAILER_LEN + TRAILER_PREFIX.len() + 19;
        moved[at] = b'6';
        assert_eq!(
            key.open("ssh-users.json", &moved, 6..=6),
            Err(StateMacError::Mismatch)
        );
        let mut body = sealed.clone();
        body[0] = b'[';
        assert_eq!(
            key.open("ssh-users.json", &body, 5..=5),
            Err(StateMacError::Mismatch)
        );
        assert_eq!(
            key.open("ssh-users.json", b"{\"sshUsers\": []}\n", 0..=0),
            Err(StateMacError::Unsealed)
        );
        let mut spoilt = sealed.clone();
        let last = spoilt.len() - 2;
        spoilt[last] = b'g';
        assert_eq!(
            key.open("ssh-users.json", &spoilt, 5..=5),
            Err(StateMacError::Malformed)
        );
    }

    #[test]
    fn the_mac_matches_an_independent_hkdf_and_hmac() {
        // Python's hmac module: HKDF-SHA256(ikm = 32 × 0x07, salt = "",
        // info = "confboot-state-mac-v1"), then HMAC-SHA256 of
        // "confboot state file v1" 0 "f" 0 (1 as u64 BE) "x\n".
        let sealed = StateMacKey::derive(&[7; 32]).seal("f", 1, b"x\n");
        let (_, generation, tag) = split(&sealed).unwrap();
        assert_eq!(generation, 1);
        assert_eq!(
            confboot_util::hex::encode(&tag),
            "6891ea68bf62edb5100364e280f7b6a3d00ddc38a7398c693d88d58475ac7685"
        );
    }
}
