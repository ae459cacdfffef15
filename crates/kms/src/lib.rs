//! Key derivation as Constellation's keyservice does it, so the same master
//! secret gives the same keys:
//!
//! `key = HKDF-SHA256(secret = master secret, salt = master salt, info = "key-" ‖ id)`, 32 bytes,
//! for ids such as a state disk's UUID or `measurementSecret`;
//! `cluster_id = HKDF-SHA256(secret = measurement secret, salt = measurement salt, info = "key-clusterID")`;
//! `owner_id` likewise with `info = "key-ownerID"`.
//!
//! The master secret travels inside a `kms://cluster-kms?key=<base64url>&salt=<base64url>`
//! URI; `storage://no-store` is the only storage backend. The admin keeps it
//! in the master-secret file ([`master_secret_file`]). Secrets are zeroized
//! when dropped and never printed (their `Debug` is redacted).
//!
//! Sealing ([`seal`]): secrets for one recipient, sealed with HPKE (RFC 9180,
//! mode base, DHKEM(X25519, HKDF-SHA256), HKDF-SHA256, ChaCha20Poly1305) to
//! an X25519 key the recipient made for one use, with an `info` that names
//! what is sealed (a join or a rejoin ticket's secrets). joinsvc seals a
//! ticket's secrets to the key the node's attestation bound, so only that
//! VM opens them.

use std::fmt;

pub mod init_secret;
pub mod master_secret_file;
mod measurement_salt;
pub mod seal;
pub mod state_mac;

pub use measurement_salt::{MEASUREMENT_SALT_LEN, MeasurementSalt, MeasurementSaltError};

pub use master_secret_file::{MAX_MASTER_SECRET_FILE_BYTES, MasterSecretFileError};

use ring::hkdf;
use zeroize::Zeroizing;

/// Prefix of every derived key's id.
pub const KEY_PREFIX: &str = "key-";
/// Id of the measurement secret.
pub const MEASUREMENT_SECRET_ID: &str = "measurementSecret";
/// Id of the cluster id (derived from the measurement secret).
pub const CLUSTER_ID_ID: &str = "clusterID";
/// Id of the owner id (derived from the measurement secret).
pub const OWNER_ID_ID: &str = "ownerID";
/// Length of every derived key.
pub const DERIVED_KEY_LEN: usize = 32;
/// Shortest master secret accepted.
pub const MIN_MASTER_SECRET_LEN: usize = 16;
/// Length of a generated master secret.
pub const DEFAULT_MASTER_SECRET_LEN: usize = 32;
/// Shortest salt accepted.
pub const MIN_SALT_LEN: usize = 32;
/// Longest master secret or master salt accepted (bounds input from the
/// network).
pub const MAX_MASTER_SECRET_LEN: usize = 256;

/// Secret bytes: zeroized on drop, redacted in `Debug`.
#[derive(Clone, PartialEq, Eq, Default)]
pub struct SecretBytes(Zeroizing<Vec<u8>>);

impl SecretBytes {
    /// Wraps bytes (they are zeroized when the value is dropped).
    pub fn new(bytes: Vec<u8>) -> SecretBytes {
        SecretBytes(Zeroizing::new(bytes))
    }

    /// The secret bytes.
    pub fn expose(&self) -> &[u8] {
        &self.0
    }
}

impl fmt::Debug for SecretBytes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SecretBytes(<{} bytes redacted>)", self.0.len())
    }
}

/// Why a URI or secret was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum KmsError {
    /// The URI's scheme or host names a backend this build does not have.
    #[error("unsupported key backend {0:?}")]
    UnsupportedBackend(String),
    /// The URI is not of the expected shape.
    #[error("malformed URI: {0}")]
    MalformedUri(String),
    /// The master secret or salt is too short or too long.
    #[error("{what} has {len} bytes, want {min} to {}", MAX_MASTER_SECRET_LEN)]
    BadLength {
        /// `key` or `salt`.
        what: &'static str,
        /// Its length.
        len: usize,
        /// The least accepted.
        min: usize,
    },
    /// Randomness was not available.
    #[error("no randomness available")]
    Random,
}

/// HKDF-SHA256 of `secret` with `salt` and `info`, `len` bytes (at most 8160).
pub fn hkdf_sha256(secret: &[u8], salt: &[u8], info: &[u8], len: usize) -> SecretBytes {
    struct Len(usize);
    impl hkdf::KeyType for Len {
        fn len(&self) -> usize {
            self.0
        }
    }
    let prk = hkdf::Salt::new(hkdf::HKDF_SHA256, salt).extract(secret);
    let mut out = Zeroizing::new(vec![0u8; len]);
    let info = [info];
    prk.expand(&info, Len(len))
        .and_then(|okm| okm.fill(&mut out))
        .expect("HKDF output length is at most 255 hash lengths");
    SecretBytes(out)
}

/// The cluster's master secret and salt: the root of every node key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MasterSecret {
    key: SecretBytes,
    salt: SecretBytes,
}

impl MasterSecret {
    /// A master secret from its parts, checking their lengths.
    pub fn new(key: Vec<u8>, salt: Vec<u8>) -> Result<MasterSecret, KmsError> {
        let check = |what, len: usize, min| {
            if (min..=MAX_MASTER_SECRET_LEN).contains(&len) {
                Ok(())
            } else {
                Err(KmsError::BadLength { what, len, min })
            }
        };
        check("key", key.len(), MIN_MASTER_SECRET_LEN)?;
        check("salt", salt.len(), MIN_SALT_LEN)?;
        Ok(MasterSecret {
            key: SecretBytes::new(key),
            salt: SecretBytes::new(salt),
        })
    }

    /// A fresh random master secret (32 bytes) and salt (32 bytes).
    pub fn generate() -> Result<MasterSecret, KmsError> {
        use ring::rand::SecureRandom;
        let rng = ring::rand::SystemRandom::new();
        let mut key = vec![0u8; DEFAULT_MASTER_SECRET_LEN];
        let mut salt = vec![0u8; MIN_SALT_LEN];
        rng.fill(&mut key).map_err(|_| KmsError::Random)?;
        rng.fill(&mut salt).map_err(|_| KmsError::Random)?;
        MasterSecret::new(key, salt)
    }

    /// Parses `kms://cluster-kms?key=<base64url>&salt=<base64url>`.
    pub fn from_kms_uri(uri: &str) -> Result<MasterSecret, KmsError> {
        let (scheme, rest) = uri
            .split_once("://")
            .ok_or_else(|| KmsError::MalformedUri("no scheme".into()))?;
        if scheme != "kms" {
            return Err(KmsError::UnsupportedBackend(format!("{scheme}://")));
        }
        let (host, query) = rest.split_once('?').unwrap_or((rest, ""));
        match host.trim_end_matches('/') {
            "cluster-kms" => {}
            other => return Err(KmsError::UnsupportedBackend(format!("kms://{other}"))),
        }
        let (mut key, mut salt) = (None, None);
        for pair in query.split('&').filter(|p| !p.is_empty()) {
            // Never echo the part itself: it may hold key material.
            let (name, value) = pair
                .split_once('=')
                .ok_or_else(|| KmsError::MalformedUri("a query part has no '='".into()))?;
            // Values are base64url; percent-encoded padding is accepted too.
            let value = value.replace("%3D", "=").replace("%3d", "=");
            let decoded = confboot_util::base64::decode_url(&value)
                .map_err(|e| KmsError::MalformedUri(format!("{name}: {e}")))?;
            let slot = match name {
                "key" => &mut key,
                "salt" => &mut salt,
                _ => {
                    return Err(KmsError::MalformedUri(format!(
                        "unknown query parameter {name:?}"
                    )));
                }
            };
            if slot.replace(decoded).is_some() {
                return Err(KmsError::MalformedUri(format!("{name} given twice")));
            }
        }
        MasterSecret::new(
            key.ok_or_else(|| KmsError::MalformedUri("no key".into()))?,
            salt.ok_or_else(|| KmsError::MalformedUri("no salt".into()))?,
        )
    }

    /// The `kms://cluster-kms?...` URI carrying this secret. It is a secret itself.
    pub fn to_kms_uri(&self) -> Zeroizing<String> {
        Zeroizing::new(format!(
            "kms://cluster-kms?key={}&salt={}",
            confboot_util::base64::encode_url(self.key.expose()),
            confboot_util::base64::encode_url(self.salt.expose())
        ))
    }

    /// The master key bytes.
    pub fn key(&self) -> &SecretBytes {
        &self.key
    }

    /// The master salt bytes.
    pub fn salt(&self) -> &SecretBytes {
        &self.salt
    }

    /// The 32-byte key with id `id` (info = `"key-" ‖ id`).
    pub fn derive_key(&self, id: &str) -> SecretBytes {
        let info = format!("{KEY_PREFIX}{id}");
        hkdf_sha256(
            self.key.expose(),
            self.salt.expose(),
            info.as_bytes(),
            DERIVED_KEY_LEN,
        )
    }

    /// The key of the state disk with this UUID.
    pub fn state_disk_key(&self, disk_uuid: &str) -> SecretBytes {
        self.derive_key(disk_uuid)
    }

    /// The cluster's measurement secret.
    pub fn measurement_secret(&self) -> SecretBytes {
        self.derive_key(MEASUREMENT_SECRET_ID)
    }
}

/// The cluster id: HKDF(measurement secret, measurement salt, "key-clusterID").
pub fn derive_cluster_id(
    measurement_secret: &[u8],
    measurement_salt: &MeasurementSalt,
) -> [u8; DERIVED_KEY_LEN] {
    measurement_id(
        measurement_secret,
        measurement_salt.as_bytes(),
        CLUSTER_ID_ID,
    )
}

/// The owner id the admin's Init gets back: HKDF(measurement secret,
/// measurement salt, "key-ownerID"), as Constellation derives it.
pub fn owner_id(
    measurement_secret: &[u8],
    measurement_salt: &MeasurementSalt,
) -> [u8; DERIVED_KEY_LEN] {
    measurement_id(measurement_secret, measurement_salt.as_bytes(), OWNER_ID_ID)
}

/// An id derived from the measurement secret: info = `"key-" ‖ id`.
fn measurement_id(
    measurement_secret: &[u8],
    measurement_salt: &[u8],
    id: &str,
) -> [u8; DERIVED_KEY_LEN] {
    let info = format!("{KEY_PREFIX}{id}");
    let derived = hkdf_sha256(
        measurement_secret,
        measurement_salt,
        info.as_bytes(),
        DERIVED_KEY_LEN,
    );
    derived.expose().try_into().expect("32 bytes")
}

/// Where keys are stored: only `storage://no-store` (keys are derived, never stored).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StorageUri {
    /// Nothing is stored.
    NoStore,
}

impl StorageUri {
    /// Parses a storage URI; other backends are refused by name.
    pub fn parse(uri: &str) -> Result<StorageUri, KmsError> {
        match uri {
            "storage://no-store" => Ok(StorageUri::NoStore),
            _ if uri.starts_with("storage://") => {
                Err(KmsError::UnsupportedBackend(uri.to_string()))
            }
            _ => Err(KmsError::MalformedUri(format!(
                "not a storage:// URI: {uri:?}"
            ))),
        }
    }
}

/// Whether `s` is a UUID in its canonical textual form (8-4-4-4-12 hex digits).
pub fn is_uuid(s: &str) -> bool {
    let groups: Vec<&str> = s.split('-').collect();
    groups.len() == 5
        && groups
            .iter()
            .zip([8, 4, 4, 4, 12])
            .all(|(g, n)| g.len() == n && g.bytes().all(|b| b.is_ascii_hexdigit()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use confboot_util::hex;

    fn test_secret() -> MasterSecret {
        MasterSecret::new((0..32).collect(), (100..132).collect()).unwrap()
    }

    #[test]
    fn rfc5869_sha256_vectors() {
        // Test cases 1, 2 and 3 of RFC 5869.
        let ikm = [0x0b; 22];
        let okm = hkdf_sha256(
            &ikm,
            &hex::decode("000102030405060708090a0b0c").unwrap(),
            &hex::decode("f0f1f2f3f4f5f6f7f8f9").unwrap(),
            42,
        );
        assert_eq!(
            hex::encode(okm.expose()),
            "3cb25f25faacd57a90434f64d0362f2a2d2d0a90cf1a5a4c5db02d56ecc4c5bf34007208d5b887185865"
        );
        let ikm: Vec<u8> = (0x00..=0x4f).collect();
        let salt: Vec<u8> = (0x60..=0xaf).collect();
        let info: Vec<u8> = (0xb0..=0xff).collect();
        let okm = hkdf_sha256(&ikm, &salt, &info, 82);
        assert_eq!(
            hex::encode(okm.expose()),
            "b11e398dc80327a1c8e7f78c596a49344f012eda2d4efad8a050cc4c19afa97c59045a99cac7827271cb41c65e590e09da3275600c2f09b8367793a9aca3db71cc30c58179ec3e87c14c01d5c1f3434f1d87"
        );
        let okm = hkdf_sha256(&[0x0b; 22], &[], &[], 42);
        assert_eq!(
            hex::encode(okm.expose()),
            "8da4e775a563c18f715f802a063c5a31b8a11f5c5ee1879ec3454e5f3c738d2d9d201395faa4b61a96c8"
        );
    }

    #[test]
    fn derived_keys_match_an_independent_hkdf() {
        // Pinned with Python's hmac module (an independent HKDF), master key
        // 00..1f, salt 64..83.
        let m = test_secret();
        assert_eq!(
            hex::encode(
                m.state_disk_key("8d0b4a7e-3c4f-4b8e-9a51-0f6e2c1d7b93")
                    .expose()
            ),
            "86124f93eb5e9e23523430ecc102bb5a52a7b254ee939b3c0a5ece14b62f36b6"
        );
        let ms = m.measurement_secret();
        assert_eq!(
            hex::encode(ms.expose()),
            "c30c200260ed90ce250e5f3b324fa1b1b91f3a6caaa882fb5a536161fb5c31f2"
        );
        assert_eq!(
            hex::encode(&derive_cluster_id(
                ms.expose(),
                &MeasurementSalt::new(vec![7; 32]).unwrap()
            )),
            "5b102afc210960244fbc6f4c24b8368f2c4db0ce2cacd9b29196413e9e7c2107"
        );
        assert_eq!(
            hex::encode(&owner_id(
                ms.expose(),
                &MeasurementSalt::new(vec![7; 32]).unwrap()
            )),
            "2fba11dc53645bd039142ef7fdd9be085ca2e94061cac56ceb5b12a6a2e39e08"
        );
    }

    #[test]
    fn kms_uri_round_trips_and_refuses_bad_input() {
        let m = test_secret();
        let uri = m.to_kms_uri();
        assert!(uri.starts_with("kms://cluster-kms?key="));
        assert_eq!(MasterSecret::from_kms_uri(&uri).unwrap(), m);
        // Unpadded and percent-encoded padding are accepted.
        let k = confboot_util::base64::encode_url(m.key().expose());
        let s = confboot_util::base64::encode_url(m.salt().expose());
        let unpadded = format!(
            "kms://cluster-kms?key={}&salt={}",
            k.trim_end_matches('='),
            s.trim_end_matches('=')
        );
        assert_eq!(MasterSecret::from_kms_uri(&unpadded).unwrap(), m);
        let percent = format!(
            "kms://cluster-kms?key={}&salt={}",
            k.replace('=', "%3D"),
            s.replace('=', "%3D")
        );
        assert_eq!(MasterSecret::from_kms_uri(&percent).unwrap(), m);

        let key = confboot_util::base64::encode_url(&[1; 32]);
        let salt = confboot_util::base64::encode_url(&[2; 32]);
        let short = confboot_util::base64::encode_url(&[1; 8]);
        for (bad, want) in [
            (
                "kms://gcp-kms?project=x".to_string(),
                KmsError::UnsupportedBackend("kms://gcp-kms".into()),
            ),
            (
                "awskms://x".to_string(),
                KmsError::UnsupportedBackend("awskms://".into()),
            ),
            (
                format!("kms://cluster-kms?key={key}"),
                KmsError::MalformedUri("no salt".into()),
            ),
            (
                format!("kms://cluster-kms?salt={salt}"),
                KmsError::MalformedUri("no key".into()),
            ),
            (
                format!("kms://cluster-kms?key={short}&salt={salt}"),
                KmsError::BadLength {
                    what: "key",
                    len: 8,
                    min: 16,
                },
            ),
            (
                format!("kms://cluster-kms?key={key}&salt={short}"),
                KmsError::BadLength {
                    what: "salt",
                    len: 8,
                    min: 32,
                },
            ),
        ] {
            assert_eq!(MasterSecret::from_kms_uri(&bad), Err(want), "{bad}");
        }
        for bad in [
            "cluster-kms",
            "kms://cluster-kms?key=!!&salt=AA",
            "kms://cluster-kms?key=AA&key=AA&salt=AA",
            "kms://cluster-kms?x=1",
        ] {
            assert!(
                matches!(
                    MasterSecret::from_kms_uri(bad),
                    Err(KmsError::MalformedUri(_))
                ),
                "{bad}"
            );
        }
    }

    #[test]
    fn storage_uri() {
        assert_eq!(
            StorageUri::parse("storage://no-store"),
            Ok(StorageUri::NoStore)
        );
        assert_eq!(
            StorageUri::parse("storage://aws-s3?bucket=x"),
            Err(KmsError::UnsupportedBackend(
                "storage://aws-s3?bucket=x".into()
            ))
        );
        assert!(matches!(
            StorageUri::parse("s3://x"),
            Err(KmsError::MalformedUri(_))
        ));
    }

    #[test]
    fn secrets_are_redacted_and_generated_fresh() {
        let m = MasterSecret::generate().unwrap();
        let shown = format!("{m:?}");
        assert!(
            shown.contains("redacted") && !shown.contains(&format!("{:?}", m.key().expose())),
            "{shown}"
        );
        assert_ne!(MasterSecret::generate().unwrap(), m);
        assert_eq!(m.key().expose().len(), 32);
        assert_eq!(m.salt().expose().len(), 32);
    }

    #[test]
    fn uuid_shape() {
        assert!(is_uuid("8d0b4a7e-3c4f-4b8e-9a51-0f6e2c1d7b93"));
        assert!(is_uuid("8D0B4A7E-3C4F-4B8E-9A51-0F6E2C1D7B93"));
        for bad in [
            "",
            "8d0b4a7e3c4f4b8e9a510f6e2c1d7b93",
            "8d0b4a7e-3c4f-4b8e-9a51-0f6e2c1d7b9",
            "8d0b4a7e-3c4f-4b8e-9a51-0f6e2c1d7b9g",
            "../../etc/passwd",
        ] {
            assert!(!is_uuid(bad), "{bad}");
        }
    }
}
