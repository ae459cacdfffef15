//! The hash names LUKS2 uses for PBKDF2, the AF splitter and digests, and
//! the few this implementation supports.

use super::error::Luks2Error;

/// A hash a LUKS2 header may name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Hash {
    /// `sha1` (LUKS1's default; old headers converted to LUKS2 carry it).
    Sha1,
    /// `sha256`, cryptsetup's LUKS2 default.
    Sha256,
    /// `sha512`.
    Sha512,
}

impl Hash {
    /// Parses a header's hash name.
    pub fn from_name(name: &str, field: &str) -> Result<Hash, Luks2Error> {
        match name {
            "sha1" => Ok(Hash::Sha1),
            "sha256" => Ok(Hash::Sha256),
            "sha512" => Ok(Hash::Sha512),
            other => Err(Luks2Error::Unsupported {
                field: field.to_string(),
                value: other.chars().take(32).collect(),
            }),
        }
    }

    /// The name in a header.
    pub fn name(self) -> &'static str {
        match self {
            Hash::Sha1 => "sha1",
            Hash::Sha256 => "sha256",
            Hash::Sha512 => "sha512",
        }
    }

    /// ring's digest algorithm.
    pub fn digest(self) -> &'static ring::digest::Algorithm {
        match self {
            Hash::Sha1 => &ring::digest::SHA1_FOR_LEGACY_USE_ONLY,
            Hash::Sha256 => &ring::digest::SHA256,
            Hash::Sha512 => &ring::digest::SHA512,
        }
    }

    /// ring's PBKDF2 algorithm (HMAC with this hash).
    pub fn pbkdf2(self) -> ring::pbkdf2::Algorithm {
        match self {
            Hash::Sha1 => ring::pbkdf2::PBKDF2_HMAC_SHA1,
            Hash::Sha256 => ring::pbkdf2::PBKDF2_HMAC_SHA256,
            Hash::Sha512 => ring::pbkdf2::PBKDF2_HMAC_SHA512,
        }
    }
}
