//! The certificates of an NSM attestation document: each parsed once, the
//! chain from a pinned AWS Nitro root to the signing leaf verified link by
//! link (ECDSA P-384 with SHA-384), and the validity windows kept for the
//! caller's time.

use ring::signature::{ECDSA_P384_SHA384_ASN1, UnparsedPublicKey};
use x509_parser::prelude::{FromDer, X509Certificate};

/// `ecdsa-with-SHA384`.
const OID_ECDSA_SHA384: &str = "1.2.840.10045.4.3.3";

/// Why a certificate of the document is unusable or a link of its chain
/// does not hold.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum CertError {
    /// The bytes are not one DER certificate.
    #[error("certificate {index} does not parse: {why}")]
    Malformed {
        /// Its place in the chain (0 is the root, the last the leaf).
        index: usize,
        /// The parser's words.
        why: String,
    },
    /// A certificate is signed with another algorithm than ECDSA P-384.
    #[error("certificate {index} is signed with {oid}, not ecdsa-with-SHA384")]
    Algorithm {
        /// Its place in the chain.
        index: usize,
        /// The signature algorithm's OID.
        oid: String,
    },
    /// A certificate's issuer is not the subject of the one before it.
    #[error("certificate {index}'s issuer is not the subject of certificate {}", index - 1)]
    Issuer {
        /// Its place in the chain.
        index: usize,
    },
    /// A certificate that issues another is not a CA.
    #[error("certificate {index} issues the next but is not a CA")]
    NotCa {
        /// Its place in the chain.
        index: usize,
    },
    /// A signature of the chain does not verify.
    #[error("certificate {index}'s signature does not verify under its issuer's key")]
    Signature {
        /// Its place in the chain.
        index: usize,
    },
}

/// One certificate of the chain, as the checks need it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChainCert {
    /// The DER bytes.
    pub der: Vec<u8>,
    /// The subject's common name.
    pub common_name: String,
    /// Not before, Unix seconds.
    pub not_before: i64,
    /// Not after, Unix seconds.
    pub not_after: i64,
    /// The subject public key (SEC1 point for an EC key).
    pub public_key: Vec<u8>,
    tbs: Vec<u8>,
    signature_oid: String,
    signature: Vec<u8>,
    subject: Vec<u8>,
    issuer: Vec<u8>,
    is_ca: bool,
}

impl ChainCert {
    /// Parses one DER certificate; `index` names it in errors.
    pub fn from_der(der: &[u8], index: usize) -> Result<ChainCert, CertError> {
        let malformed = |why: String| CertError::Malformed { index, why };
        let (rest, x509) = X509Certificate::from_der(der).map_err(|e| malformed(e.to_string()))?;
        if !rest.is_empty() {
            return Err(malformed(format!("{} bytes after the DER", rest.len())));
        }
        let is_ca = x509
            .basic_constraints()
            .map_err(|e| malformed(e.to_string()))?
            .is_some_and(|bc| bc.value.ca);
        Ok(ChainCert {
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
            public_key: x509.public_key().subject_public_key.data.to_vec(),
            tbs: x509.tbs_certificate.as_ref().to_vec(),
            signature_oid: x509.signature_algorithm.algorithm.to_id_string(),
            signature: x509.signature_value.data.to_vec(),
            subject: x509.subject().as_raw().to_vec(),
            issuer: x509.issuer().as_raw().to_vec(),
            is_ca,
        })
    }
}

/// Parses `root ‖ intermediates ‖ leaf` (the document's `cabundle` then
/// its `certificate`) and verifies every link: each certificate is issued
/// by the one before it, a CA, with ECDSA P-384; the root signs itself.
pub fn verify_chain(ders: &[&[u8]]) -> Result<Vec<ChainCert>, CertError> {
    let certs = ders
        .iter()
        .enumerate()
        .map(|(i, der)| ChainCert::from_der(der, i))
        .collect::<Result<Vec<_>, _>>()?;
    for (index, cert) in certs.iter().enumerate() {
        let issuer = if index == 0 { cert } else { &certs[index - 1] };
        if cert.signature_oid != OID_ECDSA_SHA384 {
            return Err(CertError::Algorithm {
                index,
                oid: cert.signature_oid.clone(),
            });
        }
        if index > 0 && cert.issuer != issuer.subject {
            return Err(CertError::Issuer { index });
        }
        if !issuer.is_ca {
            return Err(CertError::NotCa {
                index: index.saturating_sub(1),
            });
        }
        UnparsedPublicKey::new(&ECDSA_P384_SHA384_ASN1, &issuer.public_key)
            .verify(&cert.tbs, &cert.signature)
            .map_err(|_| CertError::Signature { index })?;
    }
    Ok(certs)
}
