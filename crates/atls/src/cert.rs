//! Attested certificates: making one per handshake, and checking one.
//!
//! An attested certificate is self-signed, has a fresh P-256 key, is valid
//! from two hours before to two hours after its creation, and carries one
//! **non-critical** extension whose OID is the evidence's variant OID
//! ([`Variant::oid`]) and whose value is the evidence itself. The evidence is
//! bound to the certificate key and the handshake's nonce through
//! [`extra_data`].

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use rcgen::{CertificateParams, CustomExtension, DnType, KeyPair, PKCS_ECDSA_P256_SHA256};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use rustls::sign::{CertifiedKey, Signer, SigningKey};
use rustls::{SignatureAlgorithm, SignatureScheme};
use x509_parser::nom::Parser;
use x509_parser::prelude::{X509CertificateParser, X509Extension};

use super::error::AtlsError;
use super::nonce::{Nonce, extra_data};
use confboot_attest::{Attested, Issuer, Validator, Variant};

/// How far before and after its creation an attested certificate is valid.
pub const VALIDITY_MARGIN: Duration = Duration::from_secs(2 * 3600);

/// Extensions that may be marked critical in a peer's certificate: standard
/// ones whose meaning is known. Every other critical extension — the
/// evidence extension included — is refused.
const ALLOWED_CRITICAL: [&str; 3] = [
    "2.5.29.15", // keyUsage
    "2.5.29.19", // basicConstraints
    "2.5.29.37", // extKeyUsage
];

/// Standard arcs whose extensions are not taken for (unknown) evidence.
const STANDARD_ARCS: [&str; 2] = ["2.5.29.", "1.3.6.1.5.5.7."];

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

/// Self-signs a certificate for `key`, valid now ± [`VALIDITY_MARGIN`],
/// carrying `evidence` (if any) in a non-critical extension with the
/// variant's OID.
pub fn self_signed(
    key: &KeyPair,
    evidence: Option<(Variant, Vec<u8>)>,
) -> Result<NewCertificate, AtlsError> {
    let now = SystemTime::now();
    let mut params = CertificateParams::default();
    params
        .distinguished_name
        .push(DnType::CommonName, "confboot aTLS");
    params.not_before = (now - VALIDITY_MARGIN).into();
    params.not_after = (now + VALIDITY_MARGIN).into();
    if let Some((variant, evidence)) = evidence {
        let mut ext = CustomExtension::from_oid_content(variant.oid_arcs(), evidence);
        ext.set_criticality(false);
        params.custom_extensions.push(ext);
    }
    let cert = params
        .self_signed(key)
        .map_err(|e| AtlsError::Certificate(format!("cannot sign the certificate: {e}")))?;
    Ok(NewCertificate::from_parts(
        cert.der().clone(),
        PrivatePkcs8KeyDer::from(key.serialize_der()),
    ))
}

/// Makes the attested certificate for one handshake: a fresh P-256 key, the
/// issuer's evidence over `extra_data(SPKI, nonce)`, and the self-signed
/// certificate carrying it.
pub fn attested(issuer: &dyn Issuer, nonce: &Nonce) -> Result<NewCertificate, AtlsError> {
    let key = new_key()?;
    let spki = rcgen::PublicKeyData::subject_public_key_info(&key);
    let evidence = issuer
        .issue(&extra_data(&spki, nonce))
        .map_err(AtlsError::Issue)?;
    let mut made = self_signed(&key, Some((issuer.variant(), evidence)))?;
    made.pair = Some(Arc::new(key));
    Ok(made)
}

/// Checks a peer's attested certificate for this handshake's `nonce` at time
/// `now` (seconds since the Unix epoch), with the first of `validators` whose
/// variant OID the certificate carries. Returns what the validator
/// established. Evidence of a known variant that none of `validators`
/// accepts is [`AtlsError::VariantNotAccepted`]; an unknown OID is
/// [`AtlsError::UnknownVariant`].
///
/// In order: the certificate parses; `now` is inside its validity window;
/// no extension other than a few standard ones is critical; it carries
/// evidence under the OID of one of `validators`; the evidence validates
/// against `extra_data(SPKI of this certificate, nonce)` and the policy.
/// The handshake signature (proof the peer holds the key) is checked
/// separately, by rustls.
pub fn verify(
    cert_der: &[u8],
    nonce: &Nonce,
    validators: &[Arc<dyn Validator>],
    now: u64,
) -> Result<Attested, AtlsError> {
    // Extensions are looked at by OID, criticality and raw value only:
    // their contents are not parsed (`deep_parse_extensions` off).
    let (rest, cert) = X509CertificateParser::new()
        .with_deep_parse_extensions(false)
        .parse(cert_der)
        .map_err(|e| AtlsError::Certificate(format!("cannot parse the certificate: {e}")))?;
    if !rest.is_empty() {
        return Err(AtlsError::Certificate(
            "trailing bytes after the certificate".into(),
        ));
    }

    let not_before = cert.validity().not_before.timestamp();
    let not_after = cert.validity().not_after.timestamp();
    let now = i64::try_from(now).unwrap_or(i64::MAX);
    if now < not_before || now > not_after {
        return Err(AtlsError::OutsideValidity {
            not_before,
            not_after,
            now,
        });
    }

    // Each extension's dotted OID, made once.
    let extensions: Vec<(String, &X509Extension<'_>)> = cert
        .extensions()
        .iter()
        .map(|e| (e.oid.to_id_string(), e))
        .collect();
    for (oid, ext) in &extensions {
        if ext.critical && !ALLOWED_CRITICAL.contains(&oid.as_str()) {
            return Err(AtlsError::CriticalExtension { oid: oid.clone() });
        }
    }

    // One validator per handshake: take each variant once.
    let chosen = validators.iter().find_map(|v| {
        let oid = v.variant().oid();
        extensions
            .iter()
            .find(|(o, _)| o == oid)
            .map(|(_, e)| (v, e.value))
    });
    let Some((validator, evidence)) = chosen else {
        // A variant this build knows but the validators do not accept.
        if let Some(variant) = extensions
            .iter()
            .find_map(|(oid, _)| Variant::from_oid(oid))
        {
            return Err(AtlsError::VariantNotAccepted {
                variant,
                accepted: validators.iter().map(|v| v.variant()).collect(),
            });
        }
        let foreign = extensions.iter().find_map(|(oid, _)| {
            (!STANDARD_ARCS.iter().any(|arc| oid.starts_with(arc))).then(|| oid.clone())
        });
        return Err(match foreign {
            Some(oid) => AtlsError::UnknownVariant { oid },
            None => AtlsError::MissingEvidence,
        });
    };

    let extra = extra_data(cert.tbs_certificate.subject_pki.raw, nonce);
    validator
        .validate(evidence, &extra)
        .map_err(AtlsError::Attestation)
}
