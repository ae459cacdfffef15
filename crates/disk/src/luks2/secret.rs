//! Key material: the volume key and the keys derived from a passphrase.
//! Zeroized on drop; `Debug` prints only the length.

use std::fmt;

use zeroize::Zeroizing;

/// A secret byte string (a volume key, a key-slot key, an AF-split key):
/// zeroized when dropped, never printed.
pub struct Secret(Zeroizing<Vec<u8>>);

impl Secret {
    /// `len` zero bytes, to be filled.
    pub fn zeroed(len: usize) -> Secret {
        Secret(Zeroizing::new(vec![0; len]))
    }

    /// Takes ownership of `bytes` (zeroized when dropped).
    pub fn new(bytes: Vec<u8>) -> Secret {
        Secret(Zeroizing::new(bytes))
    }

    /// The secret bytes.
    pub fn expose(&self) -> &[u8] {
        &self.0
    }

    /// The secret bytes, to fill.
    pub fn expose_mut(&mut self) -> &mut [u8] {
        &mut self.0
    }

    /// Its length in bytes.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether it has no bytes.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Secret(<{} bytes redacted>)", self.0.len())
    }
}

/// The volume key: what dm-crypt encrypts the data segment with.
pub type VolumeKey = Secret;

/// Equality in time independent of where the first difference is.
pub(crate) fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// `len` random bytes from the system's source.
pub(crate) fn random(len: usize) -> Result<Secret, super::Luks2Error> {
    use ring::rand::SecureRandom;
    let mut s = Secret::zeroed(len);
    ring::rand::SystemRandom::new()
        .fill(s.expose_mut())
        .map_err(|_| super::Luks2Error::Random)?;
    Ok(s)
}
