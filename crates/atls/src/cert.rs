//! A server's certificates: self-signed, a P-256 key, valid from two hours
//! before to two hours after their creation, with no extension of
//! aTLS' own. They authenticate nothing: a client takes any (rustls checks
//! that the server holds the key); the attestation after the handshake,
//! bound to the session's exporter ([`super::binding`]), is what counts.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use rcgen::{CertificateParams, DnType, KeyPair, PKCS_ECDSA_P256_SHA256};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use rustls::sign::{CertifiedKey, Signer, SigningKey};
use rustls::{SignatureAlgorithm, SignatureScheme};

use super::error::AtlsError;

/// How far before and after its creation a certificate is valid.
pub const VALIDITY_MARGIN: Duration = Duration::from_secs(2 * 3600);

/// A freshly made certificate and its private key.
pub struct NewCertificate {
    /// The certificate, DER.
    pub cert: CertificateDer<'static>,
    /// Its private key, PKCS#8 DER.
    pub key: PrivatePkcs8KeyDer<'static>,
    /// The key pair as made here, already parsed: it signs the handshake
    /// without parsing the PKCS#8 again (a P-256 scalar multiplication less
    /// per attested handshake).
    pair: Option<Arc<KeyPair>>,
}

impl NewCertificate {
    /// A certificate and its PKCS#8 key (parsed when loaded).
    pub fn from_parts(cert: CertificateDer<'static>, key: PrivatePkcs8KeyDer<'static>) -> Self {
        NewCertificate {
            cert,
            key,
            pair: None,
        }
    }

    /// The key, ready for a handshake: the key pair made with the
    /// certificate, else the PKCS#8 key loaded with `provider`.
    pub fn into_certified_key(
        self,
        provider: &CryptoProvider,
    ) -> Result<Arc<CertifiedKey>, AtlsError> {
        let key: Arc<dyn SigningKey> = match self.pair {
            Some(pair) => Arc::new(P256Signer(pair)),
            None => provider
                .key_provider
                .load_private_key(PrivateKeyDer::Pkcs8(self.key))
                .map_err(|e| AtlsError::Certificate(format!("cannot load the new key: {e}")))?,
        };
        Ok(Arc::new(CertifiedKey::new(vec![self.cert], key)))
    }
}

/// An ECDSA P-256 SHA-256 handshake signer over an rcgen key pair (ring
/// underneath; DER signatures, as TLS wants them).
struct P256Signer(Arc<KeyPair>);

impl std::fmt::Debug for P256Signer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("P256Signer")
    }
}

impl SigningKey for P256Signer {
    fn choose_scheme(&self, offered: &[SignatureScheme]) -> Option<Box<dyn Signer>> {
        offered
            .contains(&SignatureScheme::ECDSA_NISTP256_SHA256)
            .then(|| Box::new(P256Signer(Arc::clone(&self.0))) as Box<dyn Signer>)
    }

    fn algorithm(&self) -> SignatureAlgorithm {
        SignatureAlgorithm::ECDSA
    }
}

impl Signer for P256Signer {
    fn sign(&self, message: &[u8]) -> Result<Vec<u8>, rustls::Error> {
        rcgen::SigningKey::sign(&*self.0, message)
            .map_err(|e| rustls::Error::General(format!("cannot sign: {e}")))
    }

    fn scheme(&self) -> SignatureScheme {
        SignatureScheme::ECDSA_NISTP256_SHA256
    }
}

/// A fresh P-256 key pair.
pub fn new_key() -> Result<KeyPair, AtlsError> {
    KeyPair::generate_for(&PKCS_ECDSA_P256_SHA256)
        .map_err(|e| AtlsError::Certificate(format!("cannot generate a key: {e}")))
}

/// Self-signs a certificate for `key`, valid now ± [`VALIDITY_MARGIN`].
pub fn self_signed(key: &KeyPair) -> Result<NewCertificate, AtlsError> {
    let now = SystemTime::now();
    let mut params = CertificateParams::default();
    params
        .distinguished_name
        .push(DnType::CommonName, "confboot aTLS");
    params.not_before = (now - VALIDITY_MARGIN).into();
    params.not_after = (now + VALIDITY_MARGIN).into();
    let cert = params
        .self_signed(key)
        .map_err(|e| AtlsError::Certificate(format!("cannot sign the certificate: {e}")))?;
    Ok(NewCertificate::from_parts(
        cert.der().clone(),
        PrivatePkcs8KeyDer::from(key.serialize_der()),
    ))
}

/// A fresh P-256 key and its self-signed certificate, the key kept parsed
/// for the handshake.
pub fn fresh() -> Result<NewCertificate, AtlsError> {
    let key = new_key()?;
    let mut made = self_signed(&key)?;
    made.pair = Some(Arc::new(key));
    Ok(made)
}
