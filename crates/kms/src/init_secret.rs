//! The init secret: proof that whoever sends Init to the first node is the
//! admin who created it. The node knows only a slow hash of it (PBKDF2-
//! HMAC-SHA256, never a plain digest) in the form
//! `pbkdf2-sha256$<iterations>$<salt, base64>$<hash, base64>`; the check is
//! constant-time. The admin keeps the secret in a file ([`read_file`]).
//!
//! The hash is on the node's kernel command line, which the host supplies
//! (and can read): a secret that can be guessed from its hash gives the
//! host the node's Init and Recover. A node sees only the hash, so it
//! cannot judge the secret; the admin's tools refuse a weak one before
//! they hash or send it ([`check_strength`]).

use std::num::NonZeroU32;
use std::path::Path;

use ring::pbkdf2;
use ring::rand::SecureRandom;
use zeroize::Zeroizing;

use confboot_util::fs::{FileError, read_bounded};

/// Iterations used by [`hash`] (OWASP's recommendation for PBKDF2-HMAC-SHA256).
pub const DEFAULT_ITERATIONS: u32 = 600_000;
/// Fewest iterations [`InitSecretHash::verify`] accepts in a hash.
pub const MIN_ITERATIONS: u32 = 10_000;
/// Most iterations [`InitSecretHash::verify`] accepts (bounds the work a bad config can cause).
pub const MAX_ITERATIONS: u32 = 10_000_000;
/// Longest init secret accepted.
pub const MAX_INIT_SECRET_LEN: usize = 1024;
/// Largest init-secret file read: the longest secret, with room for
/// surrounding white space.
pub const MAX_SECRET_FILE_BYTES: u64 = 4 * MAX_INIT_SECRET_LEN as u64;
/// Fewest bytes an init secret may have ([`check_strength`]).
pub const MIN_SECRET_LEN: usize = 16;
/// Fewest bits [`estimated_bits`] must give an init secret ([`check_strength`]).
pub const MIN_ESTIMATED_BITS: u32 = 80;
/// How to make a strong init secret (for messages and help texts).
pub const MAKE_ONE: &str = "head -c 24 /dev/urandom | base64 > init-secret";
const PREFIX: &str = "pbkdf2-sha256";
const HASH_LEN: usize = 32;

/// Why an init-secret hash is unusable.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("invalid init-secret hash: {0}")]
pub struct HashFormatError(pub String);

/// Why an init secret is refused as too weak ([`check_strength`]).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "the init secret is too weak: {len} bytes, about {bits} bits by the estimate \
     (length, with repeated characters counting little, times log2 of the alphabet \
     of the character classes it uses); want at least {MIN_SECRET_LEN} bytes and \
     {MIN_ESTIMATED_BITS} bits; make one with `{MAKE_ONE}`"
)]
pub struct WeakSecretError {
    /// The secret's length in bytes.
    pub len: usize,
    /// Its [`estimated_bits`].
    pub bits: u32,
}

/// The sizes of the classes a byte falls in ([`class_of`]): lowercase,
/// uppercase, digits, the other printable ASCII characters (space
/// included), and every other byte. They partition the 256 byte values.
const CLASS_SIZES: [u32; 5] = [26, 26, 10, 33, 161];

/// The class of `b`, an index into [`CLASS_SIZES`].
fn class_of(b: u8) -> usize {
    match b {
        b'a'..=b'z' => 0,
        b'A'..=b'Z' => 1,
        b'0'..=b'9' => 2,
        b' '..=b'~' => 3,
        _ => 4,
    }
}

/// An upper estimate of the bits of entropy in `secret`, for refusing the
/// weak ones (it cannot see words or patterns: a secret that passes may
/// still be guessable, one that fails surely is): the length, where
/// repeated characters count little (at most twice the number of distinct
/// bytes), times log2 of the alphabet, the sum of the sizes of the
/// character classes used (lowercase 26, uppercase 26, digits 10, other
/// printable ASCII 33, any other byte 161).
pub fn estimated_bits(secret: &[u8]) -> u32 {
    let mut seen = [false; 256];
    let mut distinct = 0usize;
    let mut used = [false; CLASS_SIZES.len()];
    for &b in secret {
        if !seen[b as usize] {
            seen[b as usize] = true;
            distinct += 1;
        }
        used[class_of(b)] = true;
    }
    let alphabet: u32 = CLASS_SIZES
        .iter()
        .zip(used)
        .filter(|(_, used)| *used)
        .map(|(size, _)| size)
        .sum();
    if alphabet == 0 {
        return 0;
    }
    let length = secret.len().min(2 * distinct) as f64;
    (length * f64::from(alphabet).log2()).floor() as u32
}

/// Refuses an init secret shorter than [`MIN_SECRET_LEN`] bytes or whose
/// [`estimated_bits`] are below [`MIN_ESTIMATED_BITS`]. Only the admin's
/// tools can check this: a node knows only the secret's hash.
pub fn check_strength(secret: &[u8]) -> Result<(), WeakSecretError> {
    let bits = estimated_bits(secret);
    if secret.len() < MIN_SECRET_LEN || bits < MIN_ESTIMATED_BITS {
        return Err(WeakSecretError {
            len: secret.len(),
            bits,
        });
    }
    Ok(())
}

/// A parsed init-secret hash.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InitSecretHash {
    iterations: NonZeroU32,
    salt: Vec<u8>,
    hash: Vec<u8>,
}

/// Reads an init-secret file (at most [`MAX_SECRET_FILE_BYTES`]): the
/// secret is its contents without leading and trailing ASCII white space
/// (so a trailing newline is not part of it).
pub fn read_file(path: &Path) -> Result<Zeroizing<Vec<u8>>, FileError> {
    let bytes = read_bounded(path, MAX_SECRET_FILE_BYTES)?;
    Ok(Zeroizing::new(bytes.trim_ascii().to_vec()))
}

/// Hashes `secret` with a fresh random salt and `iterations`.
pub fn hash(secret: &[u8], iterations: u32) -> String {
    let mut salt = [0u8; 16];
    ring::rand::SystemRandom::new()
        .fill(&mut salt)
        .expect("system randomness");
    let iterations = NonZeroU32::new(iterations.max(1)).expect("at least 1");
    let mut out = [0u8; HASH_LEN];
    pbkdf2::derive(
        pbkdf2::PBKDF2_HMAC_SHA256,
        iterations,
        &salt,
        secret,
        &mut out,
    );
    format!(
        "{PREFIX}${iterations}${}${}",
        confboot_util::base64::encode(&salt),
        confboot_util::base64::encode(&out)
    )
}

impl InitSecretHash {
    /// Parses the `pbkdf2-sha256$...` form.
    pub fn parse(text: &str) -> Result<InitSecretHash, HashFormatError> {
        let bad = |m: &str| HashFormatError(m.to_string());
        let parts: Vec<&str> = text.trim().split('$').collect();
        let [prefix, iterations, salt, hash] = parts[..] else {
            return Err(bad("want pbkdf2-sha256$<iterations>$<salt>$<hash>"));
        };
        if prefix != PREFIX {
            return Err(bad("only pbkdf2-sha256 is supported"));
        }
        let iterations: u32 = iterations
            .parse()
            .map_err(|_| bad("iterations is not a number"))?;
        if !(MIN_ITERATIONS..=MAX_ITERATIONS).contains(&iterations) {
            return Err(bad(&format!(
                "iterations must be {MIN_ITERATIONS} to {MAX_ITERATIONS}"
            )));
        }
        let salt = confboot_util::base64::decode(salt).map_err(|e| bad(&format!("salt: {e}")))?;
        let hash = confboot_util::base64::decode(hash).map_err(|e| bad(&format!("hash: {e}")))?;
        if salt.len() < 8 || hash.len() != HASH_LEN {
            return Err(bad("salt must be at least 8 bytes and the hash 32"));
        }
        Ok(InitSecretHash {
            iterations: NonZeroU32::new(iterations).expect("checked"),
            salt,
            hash,
        })
    }

    /// Whether `secret` matches (constant-time comparison).
    pub fn verify(&self, secret: &[u8]) -> bool {
        secret.len() <= MAX_INIT_SECRET_LEN
            && pbkdf2::verify(
                pbkdf2::PBKDF2_HMAC_SHA256,
                self.iterations,
                &self.salt,
                secret,
                &self.hash,
            )
            .is_ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_wrong_secret() {
        let h = hash(b"correct horse", MIN_ITERATIONS);
        let parsed = InitSecretHash::parse(&h).unwrap();
        assert!(parsed.verify(b"correct horse"));
        assert!(!parsed.verify(b"correct horse "));
        assert!(!parsed.verify(b""));
        assert_ne!(
            hash(b"correct horse", MIN_ITERATIONS),
            h,
            "a fresh salt every time"
        );
    }

    #[test]
    fn weak_init_secrets_are_refused_and_random_ones_taken() {
        for weak in [
            &b""[..],
            b"s3cret",
            b"wrong",
            // Long but repetitive, or one class only.
            b"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
            b"abababababababababababababababab",
            b"0123456789012345678901",
            b"passwordpassword",
            // 15 bytes of every class: too short whatever the estimate.
            b"Aa1!Bb2@Cc3#Dd4",
        ] {
            let e = check_strength(weak).unwrap_err();
            assert_eq!(e.len, weak.len());
            assert!(
                e.to_string().contains("at least 16 bytes and 80 bits"),
                "{e}"
            );
        }
        for strong in [
            &b"correct horse battery staple"[..],
            // `head -c 24 /dev/urandom | base64`
            b"q8Jm2vQx7ZP0cW1nR5tLkY3eHs9aFbUd",
            // 32 hex digits (128 bits).
            b"9f86d081884c7d659a2feaa0c55ad015",
            // Random bytes, not text.
            &[
                0x8e, 0x01, 0xf3, 0x7a, 0x22, 0xc9, 0x10, 0x5d, 0xee, 0x93, 0x47, 0x0b, 0xb8, 0x6c,
                0xd4, 0x31,
            ],
        ] {
            check_strength(strong).unwrap();
        }
        assert_eq!(estimated_bits(b""), 0);
        assert_eq!(estimated_bits(b"aaaa"), 9, "2 × 1 distinct, × log2 26");
        assert_eq!(estimated_bits(b"abcdefgh"), 37, "8 × log2 26");
        assert_eq!(estimated_bits(b"aB3!"), 26, "4 × log2 95");
        assert_eq!(CLASS_SIZES.iter().sum::<u32>(), 256);
        let mut sizes = [0u32; CLASS_SIZES.len()];
        for b in 0..=255u8 {
            sizes[class_of(b)] += 1;
        }
        assert_eq!(sizes, CLASS_SIZES, "the classes partition the bytes");
    }

    #[test]
    fn matches_an_independent_pbkdf2() {
        // Python: hashlib.pbkdf2_hmac("sha256", b"secret", b"saltsalt", 10000).
        let text = format!(
            "pbkdf2-sha256$10000${}${}",
            confboot_util::base64::encode(b"saltsalt"),
            confboot_util::base64::encode(&confboot_util::hex::decode(PBKDF2_VECTOR).unwrap())
        );
        assert!(InitSecretHash::parse(&text).unwrap().verify(b"secret"));
    }

    const PBKDF2_VECTOR: &str = include_str!("pbkdf2_vector.hex");

    #[test]
    fn secret_files_are_trimmed_and_bounded() {
        let dir = std::env::temp_dir().join(format!("confboot-initsecret-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let f = dir.join("init-secret");
        std::fs::write(&f, " correct horse\n").unwrap();
        assert_eq!(read_file(&f).unwrap().as_slice(), b"correct horse");
        std::fs::write(&f, vec![b'x'; MAX_SECRET_FILE_BYTES as usize + 1]).unwrap();
        let e = read_file(&f).unwrap_err();
        assert!(
            matches!(
                e,
                FileError::TooLarge {
                    limit: MAX_SECRET_FILE_BYTES,
                    ..
                }
            ),
            "{e:?}"
        );
        assert!(
            e.to_string().contains("init-secret")
                && e.to_string().contains(&MAX_SECRET_FILE_BYTES.to_string()),
            "{e}"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn refuses_malformed_or_weak_hashes() {
        let salt = confboot_util::base64::encode(&[1; 16]);
        let h = confboot_util::base64::encode(&[2; 32]);
        for bad in [
            String::new(),
            format!("sha256$10000${salt}${h}"),
            format!("pbkdf2-sha256$1${salt}${h}"),
            format!("pbkdf2-sha256$99999999999${salt}${h}"),
            format!("pbkdf2-sha256$10000$!!${h}"),
            format!(
                "pbkdf2-sha256$10000${salt}${}",
                confboot_util::base64::encode(&[2; 16])
            ),
            format!("pbkdf2-sha256$10000${salt}"),
        ] {
            assert!(InitSecretHash::parse(&bad).is_err(), "{bad}");
        }
    }
}
