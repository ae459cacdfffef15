//! The volume-key digest: PBKDF2 of the volume key with the digest's salt
//! and iterations; a key slot's merged key is the volume key only if its
//! PBKDF2 equals the stored digest.

use std::num::NonZeroU32;

use super::error::Luks2Error;
use super::hash::Hash;
use super::kdf::KdfLimits;
use super::metadata::Digest;
use super::secret::constant_time_eq;

/// PBKDF2-HMAC(`hash`) of `key`, `len` bytes.
pub fn compute(key: &[u8], hash: Hash, iterations: NonZeroU32, salt: &[u8], len: usize) -> Vec<u8> {
    let mut out = vec![0u8; len];
    ring::pbkdf2::derive(hash.pbkdf2(), iterations, salt, key, &mut out);
    out
}

/// Whether `key` matches `digest`, its iterations bounded by `limits`.
pub fn matches(digest: &Digest, key: &[u8], limits: &KdfLimits) -> Result<bool, Luks2Error> {
    if digest.iterations > limits.pbkdf2_iterations {
        return Err(Luks2Error::CostTooHigh {
            field: format!("digests.{}.iterations", digest.id),
            value: digest.iterations.into(),
            limit: limits.pbkdf2_iterations.into(),
        });
    }
    let iterations = NonZeroU32::new(digest.iterations).ok_or_else(|| {
        super::error::meta(
            format!("digests.{}.iterations", digest.id),
            super::error::MetadataProblem::Range,
        )
    })?;
    let got = compute(
        key,
        digest.hash,
        iterations,
        &digest.salt,
        digest.digest.len(),
    );
    Ok(constant_time_eq(&got, &digest.digest))
}
