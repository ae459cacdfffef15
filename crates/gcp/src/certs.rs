//! The AK certificate's chain: the AK certificate, an intermediate (pinned,
//! or carried by the attestation) and a pinned root of Google's EK/AK CA,
//! each link an RSA PKCS#1 v1.5 signature with SHA-256.

use ring::signature::{RSA_PKCS1_2048_8192_SHA256, UnparsedPublicKey};
use x509_parser::prelude::{FromDer, X509Certificate};
use x509_parser::public_key::PublicKey;

/// `sha256WithRSAEncryption`.
const OID_RSA_SHA256: &str = "1.2.840.113549.1.1.11";
/// Largest certificate read.
pub const MAX_CERT_LEN: usize = 8192;

/// Why a certificate is unusable.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{what} does not parse: {why}")]
pub struct CertError {
    /// Which certificate.
    pub what: &'static str,
    /// The parser's words.
    pub why: String,
}

/// One certificate, as the chain and the checks need it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Cert {
    /// The DER bytes.
    pub der: Vec<u8>,
    /// The subject's common name (empty for a GCE AK certificate).
    pub common_name: String,
    /// Not before, Unix seconds.
    pub not_before: i64,
    /// Not after, Unix seconds.
    pub not_after: i64,
    /// The RSA key's modulus (no leading zero) and exponent, if RSA.
    pub rsa: Option<(Vec<u8>, Vec<u8>)>,
    spki: Vec<u8>,
    tbs: Vec<u8>,
    signature_oid: String,
    signature: Vec<u8>,
    subject: Vec<u8>,
    issuer: Vec<u8>,
    is_ca: bool,
}

fn strip_zeros(b: &[u8]) -> Vec<u8> {
    let first = b.iter().position(|x| *x != 0).unwrap_or(b.len());
    b[first..].to_vec()
}

impl Cert {
    /// Parses one DER certificate (nothing may follow it).
    pub fn from_der(der: &[u8], what: &'static str) -> Result<Cert, CertError> {
        let bad = |why: String| CertError { what, why };
        if der.len() > MAX_CERT_LEN {
            return Err(bad(format!("{} bytes exceed {MAX_CERT_LEN}", der.len())));
        }
        let (rest, x509) = X509Certificate::from_der(der).map_err(|e| bad(e.to_string()))?;
        if !rest.is_empty() {
            return Err(bad(format!("{} bytes after the DER", rest.len())));
        }
        let is_ca = x509
            .basic_constraints()
            .map_err(|e| bad(e.to_string()))?
            .is_some_and(|bc| bc.value.ca);
        let rsa = match x509.public_key().parsed() {
            Ok(PublicKey::RSA(k)) => Some((strip_zeros(k.modulus), strip_zeros(k.exponent))),
            _ => None,
        };
        Ok(Cert {
            der: der.to_vec(),
            common_name: x509
                .subject()
                .iter_common_name()
                .next()
                .and_then(|cn| cn.as_str().ok())
                .unwrap_or("")
                .to_string(),
            not_before: x509.validity().not_before.timestamp(),
            not_after: x509.validity().not_after.timestamp(),
            rsa,
            spki: x509.public_key().subject_public_key.data.to_vec(),
            tbs: x509.tbs_certificate.as_ref().to_vec(),
            signature_oid: x509.signature_algorithm.algorithm.to_id_string(),
            signature: x509.signature_value.data.to_vec(),
            subject: x509.subject().as_raw().to_vec(),
            issuer: x509.issuer().as_raw().to_vec(),
            is_ca,
        })
    }

    /// Whether `issuer` issued this certificate: names, CA flag and an RSA
    /// SHA-256 signature that verifies under its key.
    pub fn issued_by(&self, issuer: &Cert) -> bool {
        self.issuer == issuer.subject
            && issuer.is_ca
            && self.signature_oid == OID_RSA_SHA256
            && UnparsedPublicKey::new(&RSA_PKCS1_2048_8192_SHA256, &issuer.spki)
                .verify(&self.tbs, &self.signature)
                .is_ok()
    }

    /// A name for messages: the common name, or "(empty subject)".
    pub fn name(&self) -> &str {
        if self.common_name.is_empty() {
            "(empty subject)"
        } else {
            &self.common_name
        }
    }
}

/// Finds the chain `leaf ← intermediate ← root` (or `leaf ← root`) with a
/// root among `roots`; returns it leaf first.
pub fn build_chain<'a>(
    leaf: &'a Cert,
    intermediates: &'a [Cert],
    roots: &'a [Cert],
) -> Option<Vec<&'a Cert>> {
    if let Some(root) = roots.iter().find(|r| leaf.issued_by(r)) {
        return Some(vec![leaf, root]);
    }
    intermediates
        .iter()
        .filter(|i| leaf.issued_by(i))
        .find_map(|i| {
            roots
                .iter()
                .find(|r| i.issued_by(r))
                .map(|r| vec![leaf, i, r])
        })
}
