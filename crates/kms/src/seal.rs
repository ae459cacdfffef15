//! Secrets sealed to one recipient's X25519 key with HPKE (RFC 9180), so
//! that only the holder of the private key reads them, whoever carries
//! the bytes.
//!
//! One suite, fixed here and never read from the input: mode base,
//! DHKEM(X25519, HKDF-SHA256), HKDF-SHA256, ChaCha20Poly1305. A sealed blob
//! is the encapsulated key followed by the ciphertext:
//!
//! ```text
//! sealed = enc (32 bytes) ‖ AEAD ciphertext (plaintext + 16-byte tag)
//! info   = "confboot sealed secrets v1: " ‖ kind label
//! ```
//!
//! The `info` names the [`SealedKind`], so a blob sealed as one kind (a
//! rejoin ticket's secrets) does not open as another (a join ticket's).
//! The recipient's key pair is made fresh for one use and zeroized when
//! dropped ([`SealingKeyPair`]).
//!
//! ```
//! use confboot_kms::seal::{SealedKind, SealingKeyPair, seal};
//!
//! let node = SealingKeyPair::generate();
//! let sealed = seal(&node.public_key(), SealedKind::JoinTicket, b"disk key").unwrap();
//! assert_eq!(node.open(SealedKind::JoinTicket, &sealed).unwrap().expose(), b"disk key");
//! assert!(node.open(SealedKind::RejoinTicket, &sealed).is_err());
//! ```

use std::fmt;

use hpke::aead::ChaCha20Poly1305;
use hpke::kdf::HkdfSha256;
use hpke::kem::X25519HkdfSha256;
use hpke::{Deserializable, Kem, OpModeR, OpModeS, Serializable};

use crate::SecretBytes;

/// Length of a sealing public key (an X25519 public key).
pub const SEALING_KEY_LEN: usize = 32;
/// Length of the encapsulated key that starts a sealed blob.
pub const ENCAPSULATED_KEY_LEN: usize = 32;
/// Length of the AEAD tag that ends a sealed blob.
pub const TAG_LEN: usize = 16;
/// The shortest sealed blob: an empty plaintext.
pub const MIN_SEALED_LEN: usize = ENCAPSULATED_KEY_LEN + TAG_LEN;
/// The longest sealed blob accepted (and sealed): 1 MiB, well above a
/// ticket with every control-plane file, well below a frame's bound.
pub const MAX_SEALED_LEN: usize = 1 << 20;

/// The prefix of every `info` string; the kind's label follows.
const INFO_PREFIX: &[u8] = b"confboot sealed secrets v1: ";

/// What a sealed blob holds; part of the HPKE `info`, so a blob opens only
/// as the kind it was sealed as.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SealedKind {
    /// The secrets of a join ticket.
    JoinTicket,
    /// The secrets of a rejoin ticket.
    RejoinTicket,
}

impl SealedKind {
    /// The kind's label in the HPKE `info`.
    pub fn label(self) -> &'static str {
        match self {
            SealedKind::JoinTicket => "join ticket",
            SealedKind::RejoinTicket => "rejoin ticket",
        }
    }

    /// The HPKE `info` of this kind.
    fn info(self) -> Vec<u8> {
        [INFO_PREFIX, self.label().as_bytes()].concat()
    }
}

impl fmt::Display for SealedKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.label())
    }
}

/// Why secrets could not be sealed or opened.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SealError {
    /// The blob is shorter than an encapsulated key and a tag.
    #[error("sealed secrets of {0} bytes, fewer than the {MIN_SEALED_LEN} of an empty one")]
    Truncated(usize),
    /// The blob, or the plaintext to seal, is over [`MAX_SEALED_LEN`].
    #[error("sealed secrets of {0} bytes, over the bound of {MAX_SEALED_LEN}")]
    TooLarge(usize),
    /// The recipient's public key is not one that can be sealed to (a
    /// low-order point gives no shared secret).
    #[error("cannot seal to the recipient's key: {0}")]
    Recipient(String),
    /// The blob does not open with this key pair as this kind: sealed to
    /// another key, as another kind, or altered.
    #[error("the sealed secrets do not open as a {0} with this key")]
    DoesNotOpen(SealedKind),
}

/// A recipient's X25519 key pair for one exchange: the public half is
/// offered, the private half opens what was sealed to it. Zeroized when
/// dropped; `Debug` shows only the public key.
pub struct SealingKeyPair {
    private: <X25519HkdfSha256 as Kem>::PrivateKey,
    public: [u8; SEALING_KEY_LEN],
}

impl SealingKeyPair {
    /// A fresh key pair from the system's random generator (the kernel's
    /// `getrandom`, which blocks until it is seeded rather than fail).
    pub fn generate() -> SealingKeyPair {
        let (private, public) = X25519HkdfSha256::gen_keypair();
        SealingKeyPair::from_parts(private, &public)
    }

    /// The key pair that `ikm` derives (RFC 9180's `DeriveKeyPair`): for
    /// fixed keys in tests and fuzzing; `ikm` must hold 32 random bytes
    /// for a key pair that is secret.
    pub fn derive(ikm: &[u8]) -> SealingKeyPair {
        let (private, public) = X25519HkdfSha256::derive_keypair(ikm);
        SealingKeyPair::from_parts(private, &public)
    }

    fn from_parts(
        private: <X25519HkdfSha256 as Kem>::PrivateKey,
        public: &<X25519HkdfSha256 as Kem>::PublicKey,
    ) -> SealingKeyPair {
        let mut bytes = [0u8; SEALING_KEY_LEN];
        bytes.copy_from_slice(&public.to_bytes());
        SealingKeyPair {
            private,
            public: bytes,
        }
    }

    /// The public key to offer.
    pub fn public_key(&self) -> [u8; SEALING_KEY_LEN] {
        self.public
    }

    /// Opens `sealed` as `kind`: the plaintext, zeroized when dropped.
    /// Refuses a blob outside [`MIN_SEALED_LEN`]`..=`[`MAX_SEALED_LEN`]
    /// from its length, and one that does not authenticate.
    pub fn open(&self, kind: SealedKind, sealed: &[u8]) -> Result<SecretBytes, SealError> {
        if sealed.len() > MAX_SEALED_LEN {
            return Err(SealError::TooLarge(sealed.len()));
        }
        if sealed.len() < MIN_SEALED_LEN {
            return Err(SealError::Truncated(sealed.len()));
        }
        let (enc, ciphertext) = sealed.split_at(ENCAPSULATED_KEY_LEN);
        let enc = <X25519HkdfSha256 as Kem>::EncappedKey::from_bytes(enc)
            .map_err(|_| SealError::DoesNotOpen(kind))?;
        hpke::single_shot_open::<ChaCha20Poly1305, HkdfSha256, X25519HkdfSha256>(
            &OpModeR::Base,
            &self.private,
            &enc,
            &kind.info(),
            ciphertext,
            &[],
        )
        .map(SecretBytes::new)
        .map_err(|_| SealError::DoesNotOpen(kind))
    }
}

impl fmt::Debug for SealingKeyPair {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SealingKeyPair")
            .field("public", &self.public)
            .finish_non_exhaustive()
    }
}

/// Seals `plaintext` as `kind` to the holder of `recipient`'s private key:
/// `enc ‖ ciphertext`, [`MIN_SEALED_LEN`] + `plaintext.len()` bytes. The
/// ephemeral key comes from the system's random generator.
pub fn seal(
    recipient: &[u8; SEALING_KEY_LEN],
    kind: SealedKind,
    plaintext: &[u8],
) -> Result<Vec<u8>, SealError> {
    if plaintext.len() > MAX_SEALED_LEN - MIN_SEALED_LEN {
        return Err(SealError::TooLarge(plaintext.len() + MIN_SEALED_LEN));
    }
    let recipient = <X25519HkdfSha256 as Kem>::PublicKey::from_bytes(recipient)
        .map_err(|e| SealError::Recipient(e.to_string()))?;
    let (enc, ciphertext) =
        hpke::single_shot_seal::<ChaCha20Poly1305, HkdfSha256, X25519HkdfSha256>(
            &OpModeS::Base,
            &recipient,
            &kind.info(),
            plaintext,
            &[],
        )
        .map_err(|e| SealError::Recipient(e.to_string()))?;
    let mut sealed = Vec::with_capacity(ENCAPSULATED_KEY_LEN + ciphertext.len());
    sealed.extend_from_slice(&enc.to_bytes());
    sealed.extend_from_slice(&ciphertext);
    Ok(sealed)
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECRET: &[u8] = b"a state disk key of thirty-two b";

    #[test]
    fn sealed_secrets_open_with_the_key_pair_as_their_kind() {
        let node = SealingKeyPair::generate();
        for kind in [SealedKind::JoinTicket, SealedKind::RejoinTicket] {
            let sealed = seal(&node.public_key(), kind, SECRET).unwrap();
            assert_eq!(sealed.len(), MIN_SEALED_LEN + SECRET.len());
            assert!(
                !sealed.windows(SECRET.len()).any(|w| w == SECRET),
                "the plaintext shows in the sealed bytes"
            );
            assert_eq!(node.open(kind, &sealed).unwrap().expose(), SECRET);
        }
        // An empty plaintext seals too (the shortest blob).
        let empty = seal(&node.public_key(), SealedKind::JoinTicket, &[]).unwrap();
        assert_eq!(empty.len(), MIN_SEALED_LEN);
        assert!(
            node.open(SealedKind::JoinTicket, &empty)
                .unwrap()
                .expose()
                .is_empty()
        );
    }

    #[test]
    fn another_key_another_kind_or_an_altered_blob_does_not_open() {
        let node = SealingKeyPair::generate();
        let relay = SealingKeyPair::generate();
        let sealed = seal(&node.public_key(), SealedKind::JoinTicket, SECRET).unwrap();
        assert_eq!(
            relay.open(SealedKind::JoinTicket, &sealed),
            Err(SealError::DoesNotOpen(SealedKind::JoinTicket))
        );
        assert_eq!(
            node.open(SealedKind::RejoinTicket, &sealed),
            Err(SealError::DoesNotOpen(SealedKind::RejoinTicket))
        );
        for at in [0, ENCAPSULATED_KEY_LEN, sealed.len() - 1] {
            let mut altered = sealed.clone();
            altered[at] ^= 1;
            assert_eq!(
                node.open(SealedKind::JoinTicket, &altered),
                Err(SealError::DoesNotOpen(SealedKind::JoinTicket)),
                "byte {at} flipped"
            );
        }
    }

    #[test]
    fn truncated_or_oversized_blobs_are_refused_from_their_length() {
        let node = SealingKeyPair::generate();
        let sealed = seal(&node.public_key(), SealedKind::RejoinTicket, SECRET).unwrap();
        for cut in 0..MIN_SEALED_LEN {
            assert_eq!(
                node.open(SealedKind::RejoinTicket, &sealed[..cut]),
                Err(SealError::Truncated(cut))
            );
        }
        for cut in MIN_SEALED_LEN..sealed.len() {
            assert_eq!(
                node.open(SealedKind::RejoinTicket, &sealed[..cut]),
                Err(SealError::DoesNotOpen(SealedKind::RejoinTicket)),
                "{cut} bytes"
            );
        }
        let huge = vec![0u8; MAX_SEALED_LEN + 1];
        assert_eq!(
            node.open(SealedKind::RejoinTicket, &huge),
            Err(SealError::TooLarge(MAX_SEALED_LEN + 1))
        );
        assert_eq!(
            seal(&node.public_key(), SealedKind::RejoinTicket, &huge),
            Err(SealError::TooLarge(MAX_SEALED_LEN + 1 + MIN_SEALED_LEN))
        );
    }

    #[test]
    fn a_low_order_recipient_key_is_refused() {
        // The all-zero point has order 1: every shared secret with it is
        // zero, so nothing sealed to it would be secret.
        assert!(matches!(
            seal(&[0; SEALING_KEY_LEN], SealedKind::JoinTicket, SECRET),
            Err(SealError::Recipient(_))
        ));
    }

    #[test]
    fn derived_key_pairs_are_fixed_and_redacted() {
        let a = SealingKeyPair::derive(&[7; 32]);
        assert_eq!(
            a.public_key(),
            SealingKeyPair::derive(&[7; 32]).public_key()
        );
        assert_ne!(
            a.public_key(),
            SealingKeyPair::derive(&[8; 32]).public_key()
        );
        let shown = format!("{a:?}");
        assert!(shown.starts_with("SealingKeyPair { public:"), "{shown}");
    }
}
