//! COSE_Sign1 (RFC 9052) around a reference-value set, as a signed CoRIM
//! (draft-ietf-rats-corim §4.2): ES256 with a P-256 release key.
//!
//! ```text
//! #6.18([
//!   protected:   bstr .cbor { 1: -7,                        ; alg: ES256
//!                             3: "application/rim+cbor",    ; content type
//!                             4: kid,                       ; SHA-256 of the key's SPKI (DER)
//!                             15: { 1: issuer } },          ; CWT claims: iss (the kid in hex)
//!   unprotected: {},
//!   payload:     bstr,                                      ; the #6.501 unsigned CoRIM
//!   signature:   bstr                                       ; r || s, 64 bytes
//! ])
//! ```
//!
//! The signature covers `["Signature1", protected, h'', payload]`
//! (Sig_structure, no external data). Only this shape is read: another
//! algorithm, an unprotected header, a detached payload or a key that is
//! not configured is refused, whatever the rest says.

#![deny(
    clippy::cast_possible_truncation,
    clippy::cast_sign_loss,
    clippy::cast_possible_wrap
)]

use ring::rand::SystemRandom;
use ring::signature::{
    ECDSA_P256_SHA256_FIXED, ECDSA_P256_SHA256_FIXED_SIGNING, EcdsaKeyPair, KeyPair,
    UnparsedPublicKey,
};
use zeroize::Zeroizing;

use super::cbor::{self, Value};
use super::{LIMITS, ReferenceError};

/// COSE_Sign1's CBOR tag.
pub const COSE_SIGN1_TAG: u64 = 18;
/// COSE's algorithm number for ES256 (ECDSA P-256 with SHA-256).
pub const ES256: i64 = -7;
/// The content type of a signed CoRIM's payload.
pub const CONTENT_TYPE: &str = "application/rim+cbor";
/// Length of a key id: the SHA-256 of the key's SubjectPublicKeyInfo.
pub const KID_LEN: usize = 32;
/// The DER of a P-256 SubjectPublicKeyInfo up to its point: SEQUENCE,
/// AlgorithmIdentifier (id-ecPublicKey, prime256v1), BIT STRING of 66 bytes.
const P256_SPKI_PREFIX: [u8; 26] = [
    0x30, 0x59, 0x30, 0x13, 0x06, 0x07, 0x2a, 0x86, 0x48, 0xce, 0x3d, 0x02, 0x01, 0x06, 0x08, 0x2a,
    0x86, 0x48, 0xce, 0x3d, 0x03, 0x01, 0x07, 0x03, 0x42, 0x00,
];
/// An uncompressed P-256 point: 0x04, x, y.
const P256_POINT_LEN: usize = 65;
/// Longest PEM text read for a key.
pub const MAX_KEY_PEM_BYTES: usize = 16 * 1024;

/// A release public key: a P-256 key whose signatures a reader accepts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReleaseKey {
    spki: Vec<u8>,
    kid: [u8; KID_LEN],
}

/// A release signing key (P-256, from PKCS#8). The PKCS#8 bytes are
/// zeroized when dropped; ring's own copy of the scalar is not.
pub struct SigningKey {
    pair: EcdsaKeyPair,
    release: ReleaseKey,
}

impl std::fmt::Debug for SigningKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SigningKey")
            .field("kid", &confboot_util::hex::encode(&self.release.kid))
            .finish_non_exhaustive()
    }
}

/// The one PEM block labelled `label` in `pem`, decoded; zeroized on drop.
fn pem_block(pem: &[u8], label: &str) -> Result<Zeroizing<Vec<u8>>, ReferenceError> {
    confboot_util::base64::pem_block(pem, label, MAX_KEY_PEM_BYTES)
        .map_err(|e| ReferenceError::Key(e.to_string()))
}

fn sha256(bytes: &[u8]) -> [u8; 32] {
    ring::digest::digest(&ring::digest::SHA256, bytes)
        .as_ref()
        .try_into()
        .expect("SHA-256 is 32 bytes")
}

impl ReleaseKey {
    /// A key from the DER of its SubjectPublicKeyInfo: P-256 only, the
    /// point uncompressed.
    pub fn from_spki_der(der: &[u8]) -> Result<ReleaseKey, ReferenceError> {
        if der.len() != P256_SPKI_PREFIX.len() + P256_POINT_LEN
            || der[..P256_SPKI_PREFIX.len()] != P256_SPKI_PREFIX
            || der[P256_SPKI_PREFIX.len()] != 0x04
        {
            return Err(ReferenceError::Key(
                "not a P-256 public key (SubjectPublicKeyInfo, uncompressed point)".into(),
            ));
        }
        Ok(ReleaseKey {
            spki: der.to_vec(),
            kid: sha256(der),
        })
    }

    /// A key from PEM text holding one `PUBLIC KEY` block (what `openssl
    /// pkey -pubout` and `confboot keygen` write).
    pub fn from_pem(pem: &[u8]) -> Result<ReleaseKey, ReferenceError> {
        ReleaseKey::from_spki_der(&pem_block(pem, "PUBLIC KEY")?)
    }

    /// Its key id: the SHA-256 of its SubjectPublicKeyInfo (DER).
    pub fn kid(&self) -> [u8; KID_LEN] {
        self.kid
    }

    /// Its SubjectPublicKeyInfo as PEM text.
    pub fn to_pem(&self) -> String {
        confboot_util::base64::pem("PUBLIC KEY", &self.spki)
    }

    fn point(&self) -> &[u8] {
        &self.spki[P256_SPKI_PREFIX.len()..]
    }
}

impl SigningKey {
    /// A key from PKCS#8 DER (P-256).
    pub fn from_pkcs8_der(der: &[u8]) -> Result<SigningKey, ReferenceError> {
        let pair =
            EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, der, &SystemRandom::new())
                .map_err(|e| ReferenceError::Key(format!("not a P-256 PKCS#8 key: {e}")))?;
        let spki = [&P256_SPKI_PREFIX[..], pair.public_key().as_ref()].concat();
        let release = ReleaseKey::from_spki_der(&spki)?;
        Ok(SigningKey { pair, release })
    }

    /// A key from PEM text holding one `PRIVATE KEY` (PKCS#8) block, as
    /// `openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256`
    /// and `confboot keygen` write.
    pub fn from_pem(pem: &[u8]) -> Result<SigningKey, ReferenceError> {
        SigningKey::from_pkcs8_der(&pem_block(pem, "PRIVATE KEY")?)
    }

    /// A new random key, and its PKCS#8 PEM text (zeroized on drop).
    pub fn generate() -> Result<(SigningKey, Zeroizing<String>), ReferenceError> {
        let rng = SystemRandom::new();
        let doc = EcdsaKeyPair::generate_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, &rng)
            .map_err(|e| ReferenceError::Key(format!("cannot generate a key: {e}")))?;
        let der = Zeroizing::new(doc.as_ref().to_vec());
        let pem = Zeroizing::new(confboot_util::base64::pem("PRIVATE KEY", &der));
        Ok((SigningKey::from_pkcs8_der(&der)?, pem))
    }

    /// The public half, as readers configure it.
    pub fn release_key(&self) -> &ReleaseKey {
        &self.release
    }

    fn sign(&self, message: &[u8]) -> Result<Vec<u8>, ReferenceError> {
        self.pair
            .sign(&SystemRandom::new(), message)
            .map(|s| s.as_ref().to_vec())
            .map_err(|e| ReferenceError::Key(format!("cannot sign: {e}")))
    }
}

/// The protected header of a set signed by the key with `kid`.
fn protected_header(kid: [u8; KID_LEN]) -> Vec<u8> {
    cbor::encode(&Value::int_map(vec![
        (1, Value::int(ES256)),
        (3, Value::text(CONTENT_TYPE)),
        (4, Value::Bytes(kid.to_vec())),
        (
            15,
            Value::int_map(vec![(1, Value::Text(confboot_util::hex::encode(&kid)))]),
        ),
    ]))
}

fn sig_structure(protected: &[u8], payload: &[u8]) -> Vec<u8> {
    cbor::encode(&Value::Array(vec![
        Value::text("Signature1"),
        Value::Bytes(protected.to_vec()),
        Value::Bytes(Vec::new()),
        Value::Bytes(payload.to_vec()),
    ]))
}

/// Wraps `payload` (an unsigned CoRIM's bytes) in COSE_Sign1 signed by `key`.
pub(crate) fn sign(payload: &[u8], key: &SigningKey) -> Result<Vec<u8>, ReferenceError> {
    let protected = protected_header(key.release.kid);
    let signature = key.sign(&sig_structure(&protected, payload))?;
    Ok(cbor::encode(&Value::Tag(
        COSE_SIGN1_TAG,
        Box::new(Value::Array(vec![
            Value::Bytes(protected),
            Value::Map(Vec::new()),
            Value::Bytes(payload.to_vec()),
            Value::Bytes(signature),
        ])),
    )))
}

/// Whether the decoded top-level item is a COSE_Sign1.
pub(crate) fn is_signed(top: &Value) -> bool {
    matches!(top, Value::Tag(COSE_SIGN1_TAG, _))
}

/// Checks a decoded COSE_Sign1 against `keys`: its shape, its header, that
/// its kid names one of them and that the signature verifies. Returns the
/// payload and the kid of the key that signed.
pub(crate) fn verify(
    top: Value,
    keys: &[ReleaseKey],
) -> Result<(Vec<u8>, [u8; KID_LEN]), ReferenceError> {
    let bad = |m: &str| ReferenceError::Envelope(m.to_string());
    let Value::Tag(COSE_SIGN1_TAG, body) = top else {
        return Err(bad("not a COSE_Sign1 (tag 18)"));
    };
    let Value::Array(parts) = *body else {
        return Err(bad("COSE_Sign1 is not an array"));
    };
    let [protected, unprotected, payload, signature]: [Value; 4] = parts
        .try_into()
        .map_err(|_| bad("COSE_Sign1 does not have four parts"))?;
    let Value::Bytes(protected) = protected else {
        return Err(bad("the protected header is not a byte string"));
    };
    if unprotected != Value::Map(Vec::new()) {
        return Err(bad("the unprotected header is not empty"));
    }
    let Value::Bytes(payload) = payload else {
        return Err(bad(
            "the payload is not a byte string (detached payloads are refused)",
        ));
    };
    let Value::Bytes(signature) = signature else {
        return Err(bad("the signature is not a byte string"));
    };
    let header = cbor::decode(&protected, LIMITS).map_err(ReferenceError::Cbor)?;
    let kid = header_kid(&header)?;
    if protected != protected_header(kid) {
        return Err(bad(
            "the protected header is not {1: -7 (ES256), 3: \"application/rim+cbor\", \
             4: kid, 15: {1: kid in hex}}",
        ));
    }
    let key = keys
        .iter()
        .find(|k| k.kid == kid)
        .ok_or_else(|| ReferenceError::UnknownKey(confboot_util::hex::encode(&kid)))?;
    UnparsedPublicKey::new(&ECDSA_P256_SHA256_FIXED, key.point())
        .verify(&sig_structure(&protected, &payload), &signature)
        .map_err(|_| ReferenceError::BadSignature(confboot_util::hex::encode(&kid)))?;
    Ok((payload, kid))
}

/// The kid of a protected header (the rest is compared whole afterwards).
fn header_kid(header: &Value) -> Result<[u8; KID_LEN], ReferenceError> {
    let Value::Map(entries) = header else {
        return Err(ReferenceError::Envelope(
            "the protected header is not a map".into(),
        ));
    };
    let kid = entries.iter().find(|(k, _)| k.as_int() == Some(4));
    match kid {
        Some((_, Value::Bytes(kid))) => kid.as_slice().try_into().map_err(|_| {
            ReferenceError::Envelope(format!("a kid of {} bytes, want {KID_LEN}", kid.len()))
        }),
        _ => Err(ReferenceError::Envelope(
            "the protected header names no kid (a byte string)".into(),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_generated_key_reads_back_from_its_pem_with_the_same_kid() {
        let (key, pem) = SigningKey::generate().unwrap();
        let again = SigningKey::from_pem(pem.as_bytes()).unwrap();
        assert_eq!(again.release_key(), key.release_key());
        let public = ReleaseKey::from_pem(key.release_key().to_pem().as_bytes()).unwrap();
        assert_eq!(&public, key.release_key());
        assert_eq!(public.kid(), sha256(&public.spki));
        assert!(!format!("{key:?}").contains("pair"));
    }

    #[test]
    fn keys_of_other_kinds_are_refused() {
        let (key, pem) = SigningKey::generate().unwrap();
        // A public key where a private one is wanted, and the reverse.
        assert!(SigningKey::from_pem(key.release_key().to_pem().as_bytes()).is_err());
        assert!(ReleaseKey::from_pem(pem.as_bytes()).is_err());
        // An Ed25519 key's SPKI.
        let ed = ring::signature::Ed25519KeyPair::generate_pkcs8(&SystemRandom::new()).unwrap();
        let ed_pem = confboot_util::base64::pem("PRIVATE KEY", ed.as_ref());
        assert!(SigningKey::from_pem(ed_pem.as_bytes()).is_err());
        let mut compressed = key.release_key().spki.clone();
        compressed[26] = 0x02;
        assert!(ReleaseKey::from_spki_der(&compressed).is_err());
        let two = format!(
            "{}{}",
            key.release_key().to_pem(),
            key.release_key().to_pem()
        );
        assert!(ReleaseKey::from_pem(two.as_bytes()).is_err());
        let sec1 = "-----BEGIN EC PRIVATE KEY-----\nAA==\n-----END EC PRIVATE KEY-----\n";
        let e = SigningKey::from_pem(sec1.as_bytes()).unwrap_err();
        assert!(e.to_string().contains("openssl pkcs8"), "{e}");
    }
}
