//! The measurement salt: the salt of the cluster id ([`crate::derive_cluster_id`])
//! and the owner id. The admin's Init draws it; joinsvc is configured with
//! it and sends it in every ticket; the node keeps it in its state disk's
//! header and marks itself with it; the admin's Recover carries it. It is
//! no secret (tickets carry it in the clear), but a host that chose it
//! would choose the cluster a node marks itself for, so every place it
//! enters checks it the same way: here.

use std::fmt;
use std::ops::RangeInclusive;

/// The lengths a measurement salt may have, in bytes: 32 to 256.
///
/// 32 is the least the admin's Init, the CLI's `recover`, joinsvc's
/// `--measurement-salt` and the node's Init and Recover accepted (and
/// what Init draws, as Constellation's is 32 bytes); 256 is the most a
/// ticket, a disk header or an Init accepted, which bounds what the node
/// reads from the network or from a header the host may rewrite.
pub const MEASUREMENT_SALT_LEN: RangeInclusive<usize> = 32..=256;

/// A measurement salt whose length is in [`MEASUREMENT_SALT_LEN`]; made
/// only by [`MeasurementSalt::new`] (or `TryFrom`), so holding one is the
/// proof that it was checked.
#[derive(Clone, PartialEq, Eq)]
pub struct MeasurementSalt(Vec<u8>);

/// Why bytes are no measurement salt: their length is outside
/// [`MEASUREMENT_SALT_LEN`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "a measurement salt of {len} bytes (want {} to {})",
    MEASUREMENT_SALT_LEN.start(),
    MEASUREMENT_SALT_LEN.end()
)]
pub struct MeasurementSaltError {
    /// The length that was given.
    pub len: usize,
}

impl MeasurementSalt {
    /// `bytes` as a measurement salt, if their length is in
    /// [`MEASUREMENT_SALT_LEN`].
    pub fn new(bytes: Vec<u8>) -> Result<MeasurementSalt, MeasurementSaltError> {
        if MEASUREMENT_SALT_LEN.contains(&bytes.len()) {
            Ok(MeasurementSalt(bytes))
        } else {
            Err(MeasurementSaltError { len: bytes.len() })
        }
    }

    /// A fresh random salt of 32 bytes (what the admin's Init draws), from
    /// the system's random generator.
    pub fn generate() -> Result<MeasurementSalt, crate::KmsError> {
        use ring::rand::SecureRandom;
        let mut salt = vec![0u8; *MEASUREMENT_SALT_LEN.start()];
        ring::rand::SystemRandom::new()
            .fill(&mut salt)
            .map_err(|_| crate::KmsError::Random)?;
        Ok(MeasurementSalt(salt))
    }

    /// The salt's bytes.
    pub fn as_bytes(&self) -> &[u8] {
        &self.0
    }

    /// The salt's bytes, owned (for a wire message or a header).
    pub fn to_vec(&self) -> Vec<u8> {
        self.0.clone()
    }
}

impl TryFrom<&[u8]> for MeasurementSalt {
    type Error = MeasurementSaltError;

    fn try_from(bytes: &[u8]) -> Result<MeasurementSalt, MeasurementSaltError> {
        MeasurementSalt::new(bytes.to_vec())
    }
}

impl TryFrom<Vec<u8>> for MeasurementSalt {
    type Error = MeasurementSaltError;

    fn try_from(bytes: Vec<u8>) -> Result<MeasurementSalt, MeasurementSaltError> {
        MeasurementSalt::new(bytes)
    }
}

impl AsRef<[u8]> for MeasurementSalt {
    fn as_ref(&self) -> &[u8] {
        &self.0
    }
}

impl fmt::Debug for MeasurementSalt {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "MeasurementSalt({})",
            confboot_util::hex::encode(&self.0)
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_set_of_bounds() {
        for len in [0, 15, 16, 31, 257, 1024] {
            assert_eq!(
                MeasurementSalt::new(vec![1; len]),
                Err(MeasurementSaltError { len })
            );
        }
        for len in [32, 48, 256] {
            let salt = MeasurementSalt::try_from(&vec![1; len][..]).unwrap();
            assert_eq!(salt.as_bytes(), &vec![1; len][..]);
        }
        assert_eq!(
            MeasurementSaltError { len: 15 }.to_string(),
            "a measurement salt of 15 bytes (want 32 to 256)"
        );
    }
}
