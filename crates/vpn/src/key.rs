//! A node's WireGuard key pair.

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
        f.write_str(&confboot_util::base64::encode(&self.0))
    }
}

impl fmt::Debug for VpnPublicKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "VpnPublicKey({self})")
    }
}

/// A node's WireGuard private key: 32 random bytes (clamped by X25519 when
/// used), zeroized on drop, never printed. The node keeps it on its
/// encrypted state disk ([`VpnPrivateKey::to_base64`] as `wg` writes keys)
/// and sends only [`VpnPrivateKey::public_key`].
pub struct VpnPrivateKey(x25519_dalek::StaticSecret);

impl VpnPrivateKey {
    /// A new random key.
    pub fn generate() -> Result<VpnPrivateKey, VpnError> {
        let mut bytes = zeroize::Zeroizing::new([0u8; VPN_KEY_BYTES]);
        ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut bytes[..])
            .map_err(|_| VpnError::NoRandomness)?;
        Ok(VpnPrivateKey(x25519_dalek::StaticSecret::from(*bytes)))
    }

    /// A key from its 32 bytes (not all zeros).
    pub fn from_bytes(bytes: &[u8]) -> Result<VpnPrivateKey, VpnError> {
        let key: zeroize::Zeroizing<[u8; VPN_KEY_BYTES]> =
            zeroize::Zeroizing::new(bytes.try_into().map_err(|_| VpnError::InvalidPrivateKey)?);
        if *key == [0; VPN_KEY_BYTES] {
            return Err(VpnError::InvalidPrivateKey);
        }
        Ok(VpnPrivateKey(x25519_dalek::StaticSecret::from(*key)))
    }

    /// A key as [`VpnPrivateKey::to_base64`] wrote it (surrounding white
    /// space allowed).
    pub fn from_base64(text: &str) -> Result<VpnPrivateKey, VpnError> {
        let text = text.trim();
        // 32 bytes are 44 base64 characters; refuse anything longer before
        // decoding it.
        if text.len() != 44 {
            return Err(VpnError::InvalidPrivateKey);
        }
        let bytes = zeroize::Zeroizing::new(
            confboot_util::base64::decode(text).map_err(|_| VpnError::InvalidPrivateKey)?,
        );
        VpnPrivateKey::from_bytes(&bytes)
    }

    /// The key in base64 (as `wg genkey` prints it), zeroized on drop.
    pub fn to_base64(&self) -> zeroize::Zeroizing<String> {
        zeroize::Zeroizing::new(confboot_util::base64::encode(self.0.as_bytes()))
    }

    /// The key's bytes, for the kernel's WireGuard device.
    pub fn expose(&self) -> &[u8; VPN_KEY_BYTES] {
        self.0.as_bytes()
    }

    /// The public key other nodes know this node by.
    pub fn public_key(&self) -> VpnPublicKey {
        VpnPublicKey(x25519_dalek::PublicKey::from(&self.0).to_bytes())
    }
}

impl fmt::Debug for VpnPrivateKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "VpnPrivateKey(<redacted>, public {})", self.public_key())
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

    #[test]
    fn public_keys_are_x25519_of_the_private_key() {
        // RFC 7748, section 6.1: Alice's and Bob's key pairs.
        for (private, public) in [
            (
                "77076d0a7318a57d3c16c17251b26645df4c2f87ebc0992ab177fba51db92c2a",
                "8520f0098930a754748b7ddcb43ef75a0dbf3a0d26381af4eba4a98eaa9b4e6a",
            ),
            (
                "5dab087e624a8a4b79e17f8b83800ee66f3bb1292618b6fd1c2f8b27ff88e0eb",
                "de9edb7d7b7dc1b4d35b61c2ece435373f8343c85b78674dadfc7e146f882b4f",
            ),
        ] {
            let key =
                VpnPrivateKey::from_bytes(&confboot_util::hex::decode(private).unwrap()).unwrap();
            assert_eq!(
                key.public_key().as_bytes().to_vec(),
                confboot_util::hex::decode(public).unwrap()
            );
        }
    }

    #[test]
    fn private_keys_are_random_round_trip_and_are_never_printed() {
        let key = VpnPrivateKey::generate().unwrap();
        assert_ne!(
            key.public_key(),
            VpnPrivateKey::generate().unwrap().public_key()
        );
        let text = key.to_base64();
        assert_eq!(text.len(), 44);
        let again = VpnPrivateKey::from_base64(&format!("{}\n", *text)).unwrap();
        assert_eq!(again.expose(), key.expose());
        assert!(!format!("{key:?}").contains(text.as_str()));
        assert!(format!("{key:?}").contains(&key.public_key().to_string()));
        let padded_wrong = format!("{}=", *text);
        for bad in ["", "AAAA", "!!", &"A".repeat(44), &padded_wrong] {
            assert!(VpnPrivateKey::from_base64(bad).is_err(), "{bad}");
        }
        assert!(VpnPrivateKey::from_bytes(&[1; 31]).is_err());
    }
}
