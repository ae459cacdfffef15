//! The runtime claims: the HCL report's variable data, a JSON object that
//! the paravisor writes and the hardware report binds by its hash.
//!
//! ```json
//! {"keys": [{"kid": "HCLAkPub", "key_ops": ["sign"], "kty": "RSA", "e": "AQAB", "n": "…"},
//!           {"kid": "HCLEkPub", "key_ops": ["encrypt"], "kty": "RSA", "e": "AQAB", "n": "…"}],
//!  "vm-configuration": {"console-enabled": true, "secure-boot": true, "tpm-enabled": true,
//!                       "vmUniqueId": "…"},
//!  "user-data": "<128 hex digits>"}
//! ```
//!
//! Read with [`confboot_util::json::object`]: valid JSON as a whole, an
//! object, no repeated key. The top level and each key (JWK) admit only
//! the members above, so nothing the verifier reads can be said twice or
//! hidden in a member it does not know. `vm-configuration` admits members
//! it does not name: Azure adds some between paravisor versions (the
//! Genoa and TDX samples carry `root-cert-thumbprint` and
//! `tpm-persisted`), and the whole document is bound by its hash anyway.
//! Bounds: the document is at most [`MAX_CLAIMS_LEN`] bytes, at most
//! [`MAX_KEYS`] keys, RSA moduli of 2048 to 4096 bits, the exponent at
//! most 4 bytes, and exactly one key named `HCLAkPub`.

use serde::Deserialize;

use confboot_util::json::{JsonError, object};

/// The largest runtime-claims document read.
pub const MAX_CLAIMS_LEN: usize = 8 * 1024;
/// The most keys the document may carry.
pub const MAX_KEYS: usize = 8;
/// The key id of the vTPM's attestation key.
pub const AK_KID: &str = "HCLAkPub";
/// The smallest RSA modulus accepted, in bytes.
pub const MIN_RSA_MODULUS_LEN: usize = 256;
/// The largest RSA modulus accepted, in bytes.
pub const MAX_RSA_MODULUS_LEN: usize = 512;

/// Why the runtime claims, or the attestation key in them, are refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ClaimsError {
    /// The document is larger than [`MAX_CLAIMS_LEN`].
    #[error("runtime claims of {0} bytes exceed {max}", max = MAX_CLAIMS_LEN)]
    TooLarge(usize),
    /// Not a JSON object of the expected shape.
    #[error("runtime claims: {0}")]
    Json(#[from] JsonError),
    /// More than [`MAX_KEYS`] keys.
    #[error("runtime claims carry {0} keys, at most {max}", max = MAX_KEYS)]
    TooManyKeys(usize),
    /// No key named `HCLAkPub`.
    #[error("runtime claims carry no HCLAkPub key")]
    NoAttestationKey,
    /// Two keys named `HCLAkPub`.
    #[error("runtime claims carry more than one HCLAkPub key")]
    SeveralAttestationKeys,
    /// `HCLAkPub` is not an RSA signing key.
    #[error("HCLAkPub is not an RSA signing key (kty {kty:?}, key_ops {key_ops:?})")]
    NotRsaSigning {
        /// The key type it names.
        kty: String,
        /// Its key operations.
        key_ops: Vec<String>,
    },
    /// `n` or `e` is not base64url.
    #[error("HCLAkPub: {0} is not base64url")]
    Encoding(&'static str),
    /// The modulus or exponent has a size outside the bounds.
    #[error("HCLAkPub: {field} of {len} bytes, want {min} to {max}")]
    KeySize {
        /// `n` or `e`.
        field: &'static str,
        /// Its length without leading zeros.
        len: usize,
        /// The least accepted.
        min: usize,
        /// The most accepted.
        max: usize,
    },
}

/// A JSON Web Key of the runtime claims.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Jwk {
    /// The key id (`HCLAkPub`, `HCLEkPub`).
    pub kid: String,
    /// What the key may do (`sign`, `encrypt`).
    #[serde(default)]
    pub key_ops: Vec<String>,
    /// The key type (`RSA`).
    pub kty: String,
    /// The RSA public exponent, base64url.
    pub e: String,
    /// The RSA modulus, base64url.
    pub n: String,
}

/// The Azure VM's configuration as the paravisor reports it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
pub struct VmConfiguration {
    /// Whether the serial console is enabled.
    #[serde(rename = "console-enabled")]
    pub console_enabled: Option<bool>,
    /// Whether UEFI Secure Boot is on.
    #[serde(rename = "secure-boot")]
    pub secure_boot: Option<bool>,
    /// Whether the vTPM is enabled.
    #[serde(rename = "tpm-enabled")]
    pub tpm_enabled: Option<bool>,
    /// Whether the vTPM's state persists.
    #[serde(rename = "tpm-persisted")]
    pub tpm_persisted: Option<bool>,
    /// The VM's unique id.
    #[serde(rename = "vmUniqueId")]
    pub vm_unique_id: Option<String>,
}

/// The runtime claims document.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RuntimeClaims {
    /// The keys (JWK): the attestation key `HCLAkPub`, the EK `HCLEkPub`.
    pub keys: Vec<Jwk>,
    /// The VM's configuration.
    #[serde(rename = "vm-configuration")]
    pub vm_configuration: Option<VmConfiguration>,
    /// 64 bytes of hex the guest wrote when it asked for the report.
    #[serde(rename = "user-data")]
    pub user_data: Option<String>,
}

/// An RSA public key: modulus and exponent, big-endian, no leading zeros.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RsaPublicKey {
    /// The modulus.
    pub n: Vec<u8>,
    /// The public exponent.
    pub e: Vec<u8>,
}

impl RsaPublicKey {
    /// The modulus length in bits.
    pub fn bits(&self) -> usize {
        self.n.len() * 8 - self.n.first().map_or(8, |b| b.leading_zeros() as usize)
    }
}

fn strip_zeros(b: Vec<u8>) -> Vec<u8> {
    let at = b.iter().position(|x| *x != 0).unwrap_or(b.len());
    b[at..].to_vec()
}

impl RuntimeClaims {
    /// Parses the runtime claims (see the module documentation).
    pub fn parse(bytes: &[u8]) -> Result<RuntimeClaims, ClaimsError> {
        if bytes.len() > MAX_CLAIMS_LEN {
            return Err(ClaimsError::TooLarge(bytes.len()));
        }
        let claims: RuntimeClaims = object(bytes)?;
        if claims.keys.len() > MAX_KEYS {
            return Err(ClaimsError::TooManyKeys(claims.keys.len()));
        }
        Ok(claims)
    }

    /// The attestation key `HCLAkPub`: exactly one, RSA, for signing, of
    /// 2048 to 4096 bits.
    pub fn attestation_key(&self) -> Result<RsaPublicKey, ClaimsError> {
        let mut aks = self.keys.iter().filter(|k| k.kid == AK_KID);
        let ak = aks.next().ok_or(ClaimsError::NoAttestationKey)?;
        if aks.next().is_some() {
            return Err(ClaimsError::SeveralAttestationKeys);
        }
        if ak.kty != "RSA" || !ak.key_ops.iter().any(|o| o == "sign") {
            return Err(ClaimsError::NotRsaSigning {
                kty: ak.kty.clone(),
                key_ops: ak.key_ops.clone(),
            });
        }
        if ak.n.len() > 2 * MAX_RSA_MODULUS_LEN || ak.e.len() > 16 {
            return Err(ClaimsError::KeySize {
                field: "n or e",
                len: ak.n.len().max(ak.e.len()),
                min: 1,
                max: 2 * MAX_RSA_MODULUS_LEN,
            });
        }
        let decode = |text: &str, field| {
            confboot_util::base64::decode_url(text)
                .map(strip_zeros)
                .map_err(|_| ClaimsError::Encoding(field))
        };
        let n = decode(&ak.n, "n")?;
        let e = decode(&ak.e, "e")?;
        if !(MIN_RSA_MODULUS_LEN..=MAX_RSA_MODULUS_LEN).contains(&n.len()) {
            return Err(ClaimsError::KeySize {
                field: "n",
                len: n.len(),
                min: MIN_RSA_MODULUS_LEN,
                max: MAX_RSA_MODULUS_LEN,
            });
        }
        if !(1..=4).contains(&e.len()) {
            return Err(ClaimsError::KeySize {
                field: "e",
                len: e.len(),
                min: 1,
                max: 4,
            });
        }
        Ok(RsaPublicKey { n, e })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const N: &str = "qR7LqAABDczZDIJxh4YuOOp_0EiqZ0TvLsy8ZoLd3OMHs-1mLF4rNkW4d5vHgF5UwOHcLIMWnrjHr5cPop_pvnapqYvv1hQVBwhfOV4EedT27Fp2N2Jrj54JVc500a5s8ogiOTTm3bJ86VCoKGn3Ou2WMPWGYbIOTInVfJYsASUXeihOBO6r_DFDjzNP-XOW_YinXf7Xj_Gbcp0Pngwz8OHqnQrb9cyMe-sSbcUVdHoaj3CcAmjGvvhpyIzKxCjHg_LqUBmVx5xtKfZSreeerQvOsoDRKcx2_S-oDt6eP1jsXFldIpqbSM34qA3gBkve6xy1jVEUrclNgxFtMI5PDQ";

    fn doc(keys: &str) -> String {
        format!(r#"{{"keys":[{keys}],"user-data":"00"}}"#)
    }

    fn ak(kid: &str, kty: &str, ops: &str) -> String {
        format!(r#"{{"kid":"{kid}","key_ops":[{ops}],"kty":"{kty}","e":"AQAB","n":"{N}"}}"#)
    }

    #[test]
    fn the_attestation_key_is_read() {
        let c = RuntimeClaims::parse(doc(&ak("HCLAkPub", "RSA", r#""sign""#)).as_bytes()).unwrap();
        let k = c.attestation_key().unwrap();
        assert_eq!(k.bits(), 2048);
        assert_eq!(k.e, [1, 0, 1]);
    }

    #[test]
    fn ambiguous_or_wrong_keys_are_refused() {
        let one = ak("HCLAkPub", "RSA", r#""sign""#);
        let two = format!("{one},{one}");
        let parse = |s: String| {
            RuntimeClaims::parse(s.as_bytes())
                .unwrap()
                .attestation_key()
        };
        assert_eq!(parse(doc(&two)), Err(ClaimsError::SeveralAttestationKeys));
        assert_eq!(
            parse(doc(&ak("HCLEkPub", "RSA", r#""sign""#))),
            Err(ClaimsError::NoAttestationKey)
        );
        assert!(matches!(
            parse(doc(&ak("HCLAkPub", "EC", r#""sign""#))),
            Err(ClaimsError::NotRsaSigning { .. })
        ));
        assert!(matches!(
            parse(doc(&ak("HCLAkPub", "RSA", r#""encrypt""#))),
            Err(ClaimsError::NotRsaSigning { .. })
        ));
        let short = doc(&one.replace(N, "AQAB"));
        assert!(matches!(
            parse(short),
            Err(ClaimsError::KeySize { field: "n", .. })
        ));
        let bad = doc(&one.replace(N, "!!!!"));
        assert_eq!(parse(bad), Err(ClaimsError::Encoding("n")));
    }

    #[test]
    fn the_document_is_strict() {
        let one = ak("HCLAkPub", "RSA", r#""sign""#);
        let repeated = format!(r#"{{"keys":[{one}],"keys":[]}}"#);
        assert!(matches!(
            RuntimeClaims::parse(repeated.as_bytes()),
            Err(ClaimsError::Json(JsonError::DuplicateKey { .. }))
        ));
        let unknown = format!(r#"{{"keys":[{one}],"extra":1}}"#);
        assert!(RuntimeClaims::parse(unknown.as_bytes()).is_err());
        let extra_in_key = doc(&one.replace(r#""kty""#, r#""alg":"RS256","kty""#));
        assert!(RuntimeClaims::parse(extra_in_key.as_bytes()).is_err());
        assert!(matches!(
            RuntimeClaims::parse(b"[1]"),
            Err(ClaimsError::Json(JsonError::NotObject))
        ));
        assert!(matches!(
            RuntimeClaims::parse(&vec![b' '; MAX_CLAIMS_LEN + 1]),
            Err(ClaimsError::TooLarge(_))
        ));
        let many = doc(&vec![ak("HCLEkPub", "RSA", ""); MAX_KEYS + 1].join(","));
        assert!(matches!(
            RuntimeClaims::parse(many.as_bytes()),
            Err(ClaimsError::TooManyKeys(_))
        ));
    }
}
