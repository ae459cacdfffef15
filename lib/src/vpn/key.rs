//! A node's WireGuard public key.

use std::fmt;

use super::VpnError;

/// The length of a WireGuard (Curve25519) public key.
pub const VPN_KEY_BYTES: usize = 32;

/// A WireGuard public key: 32 bytes, not all zeros (an all-zero key is what
/// an unset field decodes to, and no peer can complete a handshake with it).
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct VpnPublicKey([u8; VPN_KEY_BYTES]);

impl VpnPublicKey {
    /// Checks a key's bytes.
    pub fn from_bytes(bytes: &[u8]) -> Result<VpnPublicKey, VpnError> {
        let key: [u8; VPN_KEY_BYTES] = bytes
            .try_into()
            .map_err(|_| VpnError::InvalidKey { len: bytes.len() })?;
        if key == [0; VPN_KEY_BYTES] {
            return Err(VpnError::InvalidKey { len: bytes.len() });
        }
        Ok(VpnPublicKey(key))
    }

    /// The key's bytes.
    pub fn as_bytes(&self) -> &[u8; VPN_KEY_BYTES] {
        &self.0
    }
}

/// Base64, as `wg` shows keys.
impl fmt::Display for VpnPublicKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&crate::base64::encode(&self.0))
    }
}

impl fmt::Debug for VpnPublicKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "VpnPublicKey({self})")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_32_bytes_and_not_all_zeros() {
        assert!(VpnPublicKey::from_bytes(&[1; 32]).is_ok());
        for bad in [&[][..], &[1; 31][..], &[1; 33][..], &[0; 32][..]] {
            assert_eq!(
                VpnPublicKey::from_bytes(bad),
                Err(VpnError::InvalidKey { len: bad.len() })
            );
        }
        let k = VpnPublicKey::from_bytes(&[0xff; 32]).unwrap();
        assert_eq!(
            k.to_string(),
            "//////////////////////////////////////////8="
        );
    }
}
