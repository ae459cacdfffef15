//! Key-slot password hashing: PBKDF2 (ring) and Argon2i/Argon2id (RustCrypto
//! `argon2`), with the costs bounded *before* anything runs: the costs come
//! from the header, which the host writes.

use std::num::NonZeroU32;

use super::error::Luks2Error;
use super::hash::Hash;
use super::secret::Secret;

/// The Argon2 variants LUKS2 names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Argon2Variant {
    /// `argon2i`.
    Argon2i,
    /// `argon2id`, cryptsetup's default.
    Argon2id,
}

impl Argon2Variant {
    /// The name in a header.
    pub fn name(self) -> &'static str {
        match self {
            Argon2Variant::Argon2i => "argon2i",
            Argon2Variant::Argon2id => "argon2id",
        }
    }
}

/// A key slot's (or, for PBKDF2, a digest's) key derivation and its costs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Kdf {
    /// PBKDF2-HMAC.
    Pbkdf2 {
        /// The HMAC hash.
        hash: Hash,
        /// Iterations.
        iterations: u32,
        /// Salt.
        salt: Vec<u8>,
    },
    /// Argon2 (version 0x13).
    Argon2 {
        /// Argon2i or Argon2id.
        variant: Argon2Variant,
        /// Time cost (passes).
        time: u32,
        /// Memory cost in KiB.
        memory_kib: u32,
        /// Lanes (`cpus` in the header).
        cpus: u32,
        /// Salt.
        salt: Vec<u8>,
    },
}

/// The most a header may make a node spend on one key derivation. Checked
/// before the derivation runs; a header above them is refused
/// ([`Luks2Error::CostTooHigh`]), not run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KdfLimits {
    /// Most PBKDF2 iterations (key slots and digests).
    pub pbkdf2_iterations: u32,
    /// Most Argon2 passes.
    pub argon2_time: u32,
    /// Most Argon2 memory, KiB.
    pub argon2_memory_kib: u32,
    /// Most Argon2 lanes.
    pub argon2_cpus: u32,
    /// Most key-slot unlock attempts per unlock (each runs a KDF).
    pub keyslot_attempts: usize,
}

impl Default for KdfLimits {
    /// Ten million PBKDF2 iterations (cryptsetup's 2 s benchmark gives a few
    /// million on fast machines); Argon2 up to 1 GiB (cryptsetup's default
    /// ceiling), 32 passes, 16 lanes; 4 key slots tried. A header asking for
    /// 4 GiB or 10^9 iterations is refused.
    fn default() -> Self {
        KdfLimits {
            pbkdf2_iterations: 10_000_000,
            argon2_time: 32,
            argon2_memory_kib: 1 << 20,
            argon2_cpus: 16,
            keyslot_attempts: 4,
        }
    }
}

/// Salt lengths accepted (cryptsetup writes 32 bytes).
pub const SALT_LEN: std::ops::RangeInclusive<usize> = 16..=64;

fn too_high(field: &str, value: u32, limit: u32) -> Result<(), Luks2Error> {
    if value > limit {
        return Err(Luks2Error::CostTooHigh {
            field: field.to_string(),
            value: value.into(),
            limit: limit.into(),
        });
    }
    Ok(())
}

impl Kdf {
    /// Checks the costs against `limits` (and the minimums the functions
    /// need); `field` names the KDF's place in the header for errors.
    pub fn check(&self, limits: &KdfLimits, field: &str) -> Result<(), Luks2Error> {
        let range = |f: &str| {
            super::error::meta(format!("{field}.{f}"), super::error::MetadataProblem::Range)
        };
        match self {
            Kdf::Pbkdf2 {
                iterations, salt, ..
            } => {
                too_high(
                    &format!("{field}.iterations"),
                    *iterations,
                    limits.pbkdf2_iterations,
                )?;
                if *iterations == 0 {
                    return Err(range("iterations"));
                }
                if !SALT_LEN.contains(&salt.len()) {
                    return Err(range("salt"));
                }
            }
            Kdf::Argon2 {
                time,
                memory_kib,
                cpus,
                salt,
                ..
            } => {
                too_high(
                    &format!("{field}.memory"),
                    *memory_kib,
                    limits.argon2_memory_kib,
                )?;
                too_high(&format!("{field}.time"), *time, limits.argon2_time)?;
                too_high(&format!("{field}.cpus"), *cpus, limits.argon2_cpus)?;
                if *time == 0 {
                    return Err(range("time"));
                }
                if *cpus == 0 {
                    return Err(range("cpus"));
                }
                if *memory_kib < 8 * cpus {
                    return Err(range("memory"));
                }
                if !SALT_LEN.contains(&salt.len()) {
                    return Err(range("salt"));
                }
            }
        }
        Ok(())
    }

    /// Derives `len` bytes from `passphrase`, after [`check`](Self::check).
    pub fn derive(
        &self,
        passphrase: &[u8],
        len: usize,
        limits: &KdfLimits,
        field: &str,
    ) -> Result<Secret, Luks2Error> {
        self.check(limits, field)?;
        let mut out = Secret::zeroed(len);
        match self {
            Kdf::Pbkdf2 {
                hash,
                iterations,
                salt,
            } => {
                let iterations = NonZeroU32::new(*iterations)
                    .ok_or_else(|| Luks2Error::Kdf("zero iterations".into()))?;
                ring::pbkdf2::derive(
                    hash.pbkdf2(),
                    iterations,
                    salt,
                    passphrase,
                    out.expose_mut(),
                );
            }
            Kdf::Argon2 {
                variant,
                time,
                memory_kib,
                cpus,
                salt,
            } => {
                let params = argon2::Params::new(*memory_kib, *time, *cpus, Some(len))
                    .map_err(|e| Luks2Error::Kdf(e.to_string()))?;
                let algorithm = match variant {
                    Argon2Variant::Argon2i => argon2::Algorithm::Argon2i,
                    Argon2Variant::Argon2id => argon2::Algorithm::Argon2id,
                };
                argon2::Argon2::new(algorithm, argon2::Version::V0x13, params)
                    .hash_password_into(passphrase, salt, out.expose_mut())
                    .map_err(|e| Luks2Error::Kdf(e.to_string()))?;
            }
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_chosen_costs_above_the_limits_are_refused_before_running() {
        let limits = KdfLimits::default();
        let argon = Kdf::Argon2 {
            variant: Argon2Variant::Argon2id,
            time: 4,
            memory_kib: 4 << 20,
            cpus: 4,
            salt: vec![0; 32],
        };
        assert!(matches!(
            argon.derive(b"pw", 64, &limits, "keyslots.0.kdf"),
            Err(Luks2Error::CostTooHigh { value, .. }) if value == 4 << 20
        ));
        let pbkdf2 = Kdf::Pbkdf2 {
            hash: Hash::Sha256,
            iterations: 1_000_000_000,
            salt: vec![0; 32],
        };
        assert!(matches!(
            pbkdf2.derive(b"pw", 64, &limits, "keyslots.0.kdf"),
            Err(Luks2Error::CostTooHigh {
                value: 1_000_000_000,
                ..
            })
        ));
    }

    #[test]
    fn derived_keys_depend_on_the_passphrase() {
        let kdf = Kdf::Pbkdf2 {
            hash: Hash::Sha256,
            iterations: 1,
            salt: b"salt-of-16-bytes".to_vec(),
        };
        let a = kdf
            .derive(b"passwd", 64, &KdfLimits::default(), "k")
            .unwrap();
        let b = kdf
            .derive(b"passwe", 64, &KdfLimits::default(), "k")
            .unwrap();
        assert_ne!(a.expose(), b.expose());
        assert_eq!(a.len(), 64);
    }
}
