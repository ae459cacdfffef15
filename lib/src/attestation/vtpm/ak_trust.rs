//! [`AkTrust`]: which attestation keys a validator trusts, how an operator
//! names them (`ca:FILE`, `pinned:PATH`, `pinned:HEX[,HEX...]`,
//! `insecure-any-ak`), the check of an AK against them, and
//! [`issue_ak_certificate`] for whoever plays the cloud provider.

use std::path::Path;

use x509_parser::prelude::{FromDer as _, X509Certificate};

use crate::attestation::AttestationError;
use crate::hex;

/// Which attestation keys a [`VtpmValidator`](super::VtpmValidator) trusts.
#[derive(Clone, Debug)]
pub enum AkTrust {
    /// AKs with a certificate (carried in the evidence) signed directly by one
    /// of these CA certificates (DER), whose key is the AK. See
    /// [`load_ca_certificates`].
    CertificateRoots(Vec<Vec<u8>>),
    /// AKs whose public key (SEC1 uncompressed P-256 point, 65 bytes; see
    /// [`VtpmIssuer::ak_public_key`](super::VtpmIssuer::ak_public_key)) is in this list.
    Pinned(Vec<Vec<u8>>),
    /// Any AK (`insecure-any-ak`): for local QEMU only. Logs a warning every
    /// time it is used; proves nothing about who signed the quote.
    InsecureAnyAk,
}

impl AkTrust {
    /// Parses AK trust from a configuration string:
    /// `ca:PATH` (CA certificates, PEM or DER, see [`load_ca_certificates`]),
    /// `pinned:HEX[,HEX...]` (65-byte SEC1 points in hex, as
    /// `confboot-tpm-provision` writes to `ak-pubkey.hex`), `pinned:PATH`
    /// (a file with one such key per line, `#` comments; a PATH contains a
    /// `/`), or `insecure-any-ak`.
    pub fn parse(spec: &str) -> Result<AkTrust, AttestationError> {
        let bad = |m: String| AttestationError::Policy(format!("AK trust {spec:?}: {m}"));
        if spec == "insecure-any-ak" {
            return Ok(AkTrust::InsecureAnyAk);
        }
        if let Some(path) = spec.strip_prefix("ca:") {
            return load_ca_certificates(Path::new(path)).map(AkTrust::CertificateRoots);
        }
        if let Some(list) = spec.strip_prefix("pinned:") {
            let from_file;
            let hex_keys: Vec<&str> = if list.contains('/') {
                from_file = std::fs::read_to_string(list)
                    .map_err(|e| bad(format!("cannot read {list}: {e}")))?;
                from_file
                    .lines()
                    .map(str::trim)
                    .filter(|l| !l.is_empty() && !l.starts_with('#'))
                    .collect()
            } else {
                list.split(',').collect()
            };
            if hex_keys.is_empty() {
                return Err(bad("no key given".into()));
            }
            let keys = hex_keys
                .into_iter()
                .map(|h| {
                    let key = hex::decode(h.trim()).map_err(|e| bad(e.to_string()))?;
                    if key.len() != 65 || key[0] != 4 {
                        return Err(bad(format!(
                            "{} bytes is not an uncompressed P-256 point (65 bytes, 04...)",
                            key.len()
                        )));
                    }
                    Ok(key)
                })
                .collect::<Result<Vec<_>, _>>()?;
            return Ok(AkTrust::Pinned(keys));
        }
        Err(bad(
            "want ca:PATH, pinned:HEX[,HEX...] or insecure-any-ak".into()
        ))
    }

    /// Checks that the AK (`ak_point`, a SEC1 uncompressed P-256 point) is
    /// trusted; `ak_certificate` is the evidence's (empty when it has none).
    pub(super) fn check(
        &self,
        ak_point: &[u8],
        ak_certificate: &[u8],
    ) -> Result<(), AttestationError> {
        let trust = |m: String| AttestationError::Trust(m);
        match self {
            AkTrust::InsecureAnyAk => {
                log::warn!(
                    "insecure-any-ak: accepting AK {} without any proof of origin (local QEMU only)",
                    hex::encode(ak_point)
                );
                Ok(())
            }
            AkTrust::Pinned(keys) => {
                if keys.iter().any(|k| k.as_slice() == ak_point) {
                    Ok(())
                } else {
                    Err(trust(format!(
                        "AK {} is not among the {} pinned AK keys",
                        hex::encode(ak_point),
                        keys.len()
                    )))
                }
            }
            AkTrust::CertificateRoots(roots) => {
                if ak_certificate.is_empty() {
                    return Err(trust(
                        "evidence carries no AK certificate, and the policy requires one".into(),
                    ));
                }
                let (rest, cert) = X509Certificate::from_der(ak_certificate)
                    .map_err(|e| AttestationError::Decode(format!("AK certificate: {e}")))?;
                if !rest.is_empty() {
                    return Err(AttestationError::Decode(format!(
                        "AK certificate: {} trailing bytes",
                        rest.len()
                    )));
                }
                let mut failures = Vec::new();
                let mut signed_by_root = false;
                for root_der in roots {
                    let Ok((_, root)) = X509Certificate::from_der(root_der) else {
                        continue;
                    };
                    if root.subject() != cert.issuer() {
                        continue;
                    }
                    match verify_certificate_signature(&cert, &root) {
                        Ok(()) => {
                            signed_by_root = true;
                            break;
                        }
                        Err(e) => failures.push(format!("{}: {e}", root.subject())),
                    }
                }
                if !signed_by_root {
                    return Err(trust(format!(
                        "AK certificate (issuer \"{}\") is not signed by any of the {} configured CAs{}",
                        cert.issuer(),
                        roots.len(),
                        if failures.is_empty() {
                            String::new()
                        } else {
                            format!(" ({})", failures.join("; "))
                        }
                    )));
                }
                if !cert.validity().is_valid() {
                    return Err(trust(format!(
                        "AK certificate is outside its validity period ({} to {})",
                        cert.validity().not_before,
                        cert.validity().not_after
                    )));
                }
                let cert_key = &cert.public_key().subject_public_key.data;
                if cert_key.as_ref() != ak_point {
                    return Err(trust(format!(
                        "AK certificate is for another key: certificate key {}, AK {}",
                        hex::encode(cert_key),
                        hex::encode(ak_point)
                    )));
                }
                Ok(())
            }
        }
    }
}

/// Reads CA certificates from a file: one or more PEM `CERTIFICATE` blocks,
/// or one DER certificate. Each must parse.
pub fn load_ca_certificates(path: &Path) -> Result<Vec<Vec<u8>>, AttestationError> {
    let bytes = std::fs::read(path)
        .map_err(|e| AttestationError::Policy(format!("cannot read {}: {e}", path.display())))?;
    let ders: Vec<Vec<u8>> = if bytes.starts_with(b"-----BEGIN") {
        let mut ders = Vec::new();
        for pem in x509_parser::pem::Pem::iter_from_buffer(&bytes) {
            let pem = pem.map_err(|e| {
                AttestationError::Policy(format!("{}: bad PEM: {e}", path.display()))
            })?;
            if pem.label == "CERTIFICATE" {
                ders.push(pem.contents);
            }
        }
        ders
    } else {
        vec![bytes]
    };
    if ders.is_empty() {
        return Err(AttestationError::Policy(format!(
            "{}: no certificate",
            path.display()
        )));
    }
    for der in &ders {
        X509Certificate::from_der(der).map_err(|e| {
            AttestationError::Policy(format!("{}: bad certificate: {e}", path.display()))
        })?;
    }
    Ok(ders)
}

/// Verifies a certificate's signature with an issuer's public key (ring).
fn verify_certificate_signature(
    cert: &X509Certificate<'_>,
    issuer: &X509Certificate<'_>,
) -> Result<(), String> {
    use ring::signature as sig;
    use x509_parser::oid_registry::{
        OID_EC_P256, OID_NIST_EC_P384, OID_PKCS1_SHA256WITHRSA, OID_PKCS1_SHA384WITHRSA,
        OID_PKCS1_SHA512WITHRSA, OID_SIG_ECDSA_WITH_SHA256, OID_SIG_ECDSA_WITH_SHA384,
    };
    let alg = &cert.signature_algorithm.algorithm;
    let key_info = issuer.public_key();
    let curve = key_info
        .algorithm
        .parameters
        .as_ref()
        .and_then(|p| p.as_oid().ok());
    let is_p256 = curve.as_ref() == Some(&OID_EC_P256);
    let is_p384 = curve.as_ref() == Some(&OID_NIST_EC_P384);
    let verification: &dyn sig::VerificationAlgorithm =
        if *alg == OID_SIG_ECDSA_WITH_SHA256 && is_p256 {
            &sig::ECDSA_P256_SHA256_ASN1
        } else if *alg == OID_SIG_ECDSA_WITH_SHA384 && is_p256 {
            &sig::ECDSA_P256_SHA384_ASN1
        } else if *alg == OID_SIG_ECDSA_WITH_SHA256 && is_p384 {
            &sig::ECDSA_P384_SHA256_ASN1
        } else if *alg == OID_SIG_ECDSA_WITH_SHA384 && is_p384 {
            &sig::ECDSA_P384_SHA384_ASN1
        } else if *alg == OID_PKCS1_SHA256WITHRSA {
            &sig::RSA_PKCS1_2048_8192_SHA256
        } else if *alg == OID_PKCS1_SHA384WITHRSA {
            &sig::RSA_PKCS1_2048_8192_SHA384
        } else if *alg == OID_PKCS1_SHA512WITHRSA {
            &sig::RSA_PKCS1_2048_8192_SHA512
        } else {
            return Err(format!("unsupported signature algorithm {alg}"));
        };
    sig::UnparsedPublicKey::new(verification, &key_info.subject_public_key.data)
        .verify(cert.tbs_certificate.as_ref(), &cert.signature_value.data)
        .map_err(|_| "signature does not verify".to_string())
}

/// An AK public key (SEC1 uncompressed P-256 point) as rcgen wants a subject
/// key for a certificate whose private key it does not hold.
struct AkSubjectKey<'a>(&'a [u8]);

impl rcgen::PublicKeyData for AkSubjectKey<'_> {
    fn der_bytes(&self) -> &[u8] {
        self.0
    }

    fn algorithm(&self) -> &'static rcgen::SignatureAlgorithm {
        &rcgen::PKCS_ECDSA_P256_SHA256
    }
}

/// Issues an AK certificate (DER) for `ak_public_key` (SEC1 uncompressed
/// P-256 point, see [`VtpmIssuer::ak_public_key`](super::VtpmIssuer::ak_public_key)) signed by `ca`, as a
/// cloud provider does. Used by `confboot-tpm-provision` and by tests.
pub fn issue_ak_certificate(
    ak_public_key: &[u8],
    common_name: &str,
    ca: &rcgen::Issuer<'_, impl rcgen::SigningKey>,
) -> Result<Vec<u8>, AttestationError> {
    if ak_public_key.len() != 65 || ak_public_key[0] != 4 {
        return Err(AttestationError::Issue(format!(
            "AK public key of {} bytes is not an uncompressed P-256 point",
            ak_public_key.len()
        )));
    }
    let mut params = rcgen::CertificateParams::default();
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, common_name);
    params.is_ca = rcgen::IsCa::ExplicitNoCa;
    params.key_usages = vec![rcgen::KeyUsagePurpose::DigitalSignature];
    params
        .signed_by(&AkSubjectKey(ak_public_key), ca)
        .map(|c| c.der().to_vec())
        .map_err(|e| AttestationError::Issue(format!("cannot issue the AK certificate: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ak_trust_parses_each_form_and_refuses_others() {
        assert!(matches!(
            AkTrust::parse("insecure-any-ak"),
            Ok(AkTrust::InsecureAnyAk)
        ));
        let a = format!("04{}", "ab".repeat(64));
        let b = format!("04{}", "cd".repeat(64));
        match AkTrust::parse(&format!("pinned:{a}, {b}")) {
            Ok(AkTrust::Pinned(keys)) => {
                assert_eq!(
                    keys,
                    vec![hex::decode(&a).unwrap(), hex::decode(&b).unwrap()]
                )
            }
            other => panic!("{other:?}"),
        }
        for bad in [
            "pinned:04ab",
            "pinned:zz",
            &format!("pinned:05{}", "ab".repeat(64)),
            "ca:/nonexistent/ca.pem",
            "any",
        ] {
            assert!(
                matches!(AkTrust::parse(bad), Err(AttestationError::Policy(_))),
                "{bad}"
            );
        }
    }

    #[test]
    fn ca_certificates_load_from_pem_and_der() {
        let key = rcgen::KeyPair::generate().unwrap();
        let mut params = rcgen::CertificateParams::default();
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        let cert = params.self_signed(&key).unwrap();
        let dir = std::env::temp_dir().join(format!("confboot-vtpm-ca-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let pem = dir.join("ca.pem");
        let der = dir.join("ca.der");
        let junk = dir.join("junk");
        std::fs::write(&pem, format!("{}{}", cert.pem(), cert.pem())).unwrap();
        std::fs::write(&der, cert.der()).unwrap();
        std::fs::write(&junk, b"not a certificate").unwrap();
        assert_eq!(load_ca_certificates(&pem).unwrap().len(), 2);
        assert_eq!(
            load_ca_certificates(&der).unwrap(),
            vec![cert.der().to_vec()]
        );
        assert!(matches!(
            AkTrust::parse(&format!("ca:{}", pem.display())),
            Ok(AkTrust::CertificateRoots(r)) if r.len() == 2
        ));
        assert!(matches!(
            load_ca_certificates(&junk),
            Err(AttestationError::Policy(_))
        ));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
