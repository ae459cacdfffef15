//! [`AkTrust`]: which attestation keys a validator trusts, how an operator
//! names them (`ca:FILE`, `pinned:FILE`, `pinned:HEX[,HEX...]`,
//! `insecure-any-ak`), the check of an AK against them, and
//! [`issue_ak_certificate`] for whoever plays the cloud provider.

use std::io::{self, Read as _};
use std::path::{Path, PathBuf};

use x509_parser::prelude::{FromDer as _, X509Certificate};

use confboot_attest::{AttestationError, Detail};

use crate::VtpmRefusal;
use confboot_util::hex::{self, HexError};

/// Largest `ca:FILE` file read (a bundle of a few dozen certificates).
pub const MAX_CA_FILE_LEN: u64 = 256 * 1024;

/// Largest `pinned:FILE` file read (a key is a line of 131 bytes).
pub const MAX_PINNED_KEYS_LEN: u64 = 64 * 1024;

/// Which attestation keys a [`VtpmValidator`](super::VtpmValidator) trusts.
#[derive(Clone, Debug)]
pub enum AkTrust {
    /// AKs with a certificate (carried in the evidence) whose key is the AK
    /// and that chains to one of these CA certificates (DER) that is
    /// self-signed, through at most `MAX_AK_CHAIN_DEPTH` of them (the ones
    /// that are not self-signed serve as intermediates). Every CA on the way
    /// must be a CA with keyCertSign. See [`load_ca_certificates`].
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
    /// `pinned:FILE` (a file with one key per line, `#` comments, at most
    /// [`MAX_PINNED_KEYS_LEN`] bytes), `pinned:HEX[,HEX...]` (65-byte SEC1
    /// points in hex, as `confboot-tpm-provision` writes to `ak-pubkey.hex`),
    /// or `insecure-any-ak`. After `pinned:`, a name of an existing file (with
    /// or without a `/`) is read; anything else must be hex keys.
    pub fn parse(spec: &str) -> Result<AkTrust, AttestationError> {
        AkTrust::parse_in(spec, Path::new(""))
    }

    /// [`AkTrust::parse`] with relative file names taken from `base` (the
    /// empty path: the current directory).
    fn parse_in(spec: &str, base: &Path) -> Result<AkTrust, AttestationError> {
        if spec == "insecure-any-ak" {
            return Ok(AkTrust::InsecureAnyAk);
        }
        if let Some(path) = spec.strip_prefix("ca:") {
            return load_ca_certificates(&base.join(path)).map(AkTrust::CertificateRoots);
        }
        let pinned = match spec.strip_prefix("pinned:") {
            Some(text) => pinned_keys(text, base),
            None => Err(AkTrustError::UnknownForm),
        };
        pinned.map(AkTrust::Pinned).map_err(|e| {
            AttestationError::Policy(Detail::with(
                &VtpmRefusal::AkTrustSpec,
                format!("AK trust {spec:?}: {e}"),
            ))
        })
    }

    /// Checks that the AK (`ak_point`, a SEC1 uncompressed P-256 point) is
    /// trusted; `ak_certificate` is the evidence's (empty when it has none).
    pub(super) fn check(
        &self,
        ak_point: &[u8],
        ak_certificate: &[u8],
    ) -> Result<(), AttestationError> {
        let trust = |reason: &'static VtpmRefusal, m: String| {
            AttestationError::Trust(Detail::with(reason, m))
        };
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
                    Err(trust(
                        &VtpmRefusal::AkNotPinned,
                        format!(
                            "AK {} is not among the {} pinned AK keys",
                            hex::encode(ak_point),
                            keys.len()
                        ),
                    ))
                }
            }
            AkTrust::CertificateRoots(roots) => {
                if ak_certificate.is_empty() {
                    return Err(trust(
                        &VtpmRefusal::NoAkCertificate,
                        "evidence carries no AK certificate, and the policy requires one".into(),
                    ));
                }
                let (rest, cert) = X509Certificate::from_der(ak_certificate).map_err(|e| {
                    AttestationError::Decode(Detail::with(
                        &VtpmRefusal::AkCertificateFormat,
                        format!("AK certificate: {e}"),
                    ))
                })?;
                if !rest.is_empty() {
                    return Err(AttestationError::Decode(Detail::with(
                        &VtpmRefusal::AkCertificateFormat,
                        format!("AK certificate: {} trailing bytes", rest.len()),
                    )));
                }
                let configured: Vec<X509Certificate<'_>> = roots
                    .iter()
                    .filter_map(|der| X509Certificate::from_der(der).ok().map(|(_, c)| c))
                    .collect();
                chain_to_root(&cert, &configured)
                    .map_err(|e| trust(&VtpmRefusal::AkChain, e.to_string()))?;
                if !cert.validity().is_valid() {
                    return Err(trust(
                        &VtpmRefusal::AkCertificateValidity,
                        format!(
                            "AK certificate is outside its validity period ({} to {})",
                            cert.validity().not_before,
                            cert.validity().not_after
                        ),
                    ));
                }
                let cert_key = &cert.public_key().subject_public_key.data;
                if cert_key.as_ref() != ak_point {
                    return Err(trust(
                        &VtpmRefusal::AkCertificateKey,
                        format!(
                            "AK certificate is for another key: certificate key {}, AK {}",
                            hex::encode(cert_key),
                            hex::encode(ak_point)
                        ),
                    ));
                }
                Ok(())
            }
        }
    }
}

/// Most CA certificates between an AK certificate and its root.
pub const MAX_AK_CHAIN_DEPTH: usize = 4;

/// Why an AK certificate does not chain to a configured root CA.
#[derive(Debug, thiserror::Error)]
enum ChainError {
    /// No configured CA of the issuer's name signs the certificate.
    #[error(
        "{what} (issuer \"{issuer}\") is not signed by any of the {configured} configured CAs{}",
        failure_list(failures)
    )]
    NoIssuer {
        /// The certificate: the AK certificate, or an intermediate CA.
        what: String,
        /// The issuer it names.
        issuer: String,
        /// How many CAs are configured.
        configured: usize,
        /// The CAs of that name whose signature check failed, and why.
        failures: Vec<(String, SignatureError)>,
    },
    /// The issuer is not a CA, or its key may not sign certificates.
    #[error(
        "\"{subject}\" is not a CA certificate with keyCertSign (basic constraints CA: {is_ca}, \
         keyCertSign: {signs_certs})"
    )]
    NotAnIssuingCa {
        /// The CA's subject.
        subject: String,
        /// Whether its basic constraints make it a CA.
        is_ca: bool,
        /// Whether its key usage includes keyCertSign.
        signs_certs: bool,
    },
    /// The issuer is outside its validity period.
    #[error("CA \"{subject}\" is outside its validity period ({not_before} to {not_after})")]
    CaOutsideValidity {
        /// The CA's subject.
        subject: String,
        /// Start of its validity.
        not_before: String,
        /// End of its validity.
        not_after: String,
    },
    /// No self-signed root within [`MAX_AK_CHAIN_DEPTH`] CAs.
    #[error(
        "the AK certificate's chain is longer than {} CAs or reaches no self-signed root",
        MAX_AK_CHAIN_DEPTH
    )]
    NoRoot,
}

/// ` (SUBJECT: WHY; ...)` for the CAs whose signature check failed, or
/// nothing when none did.
fn failure_list(failures: &[(String, SignatureError)]) -> String {
    if failures.is_empty() {
        return String::new();
    }
    let failures: Vec<String> = failures
        .iter()
        .map(|(subject, error)| format!("{subject}: {error}"))
        .collect();
    format!(" ({})", failures.join("; "))
}

/// Why a certificate's signature was not verified with an issuer's key.
#[derive(Debug, thiserror::Error)]
enum SignatureError {
    /// The certificate's signature algorithm (its OID) is not one checked here.
    #[error("unsupported signature algorithm {0}")]
    UnsupportedAlgorithm(String),
    /// The signature is not the issuer key's over the certificate.
    #[error("signature does not verify")]
    DoesNotVerify,
}

/// Whether `ca` may issue certificates: a CA (basic constraints) whose key
/// usage includes keyCertSign.
fn check_is_issuing_ca(ca: &X509Certificate<'_>) -> Result<(), ChainError> {
    let is_ca = matches!(ca.basic_constraints(), Ok(Some(bc)) if bc.value.ca);
    let signs_certs = matches!(ca.key_usage(), Ok(Some(ku)) if ku.value.key_cert_sign());
    if is_ca && signs_certs {
        Ok(())
    } else {
        Err(ChainError::NotAnIssuingCa {
            subject: ca.subject().to_string(),
            is_ca,
            signs_certs,
        })
    }
}

/// Walks from `cert` up through the `configured` certificates until a
/// self-signed one (a root): each step's issuer must sign it, be an issuing
/// CA and be within its validity period. Configured certificates that are
/// not self-signed serve as intermediates only.
fn chain_to_root(
    cert: &X509Certificate<'_>,
    configured: &[X509Certificate<'_>],
) -> Result<(), ChainError> {
    let mut current = cert;
    for depth in 0..=MAX_AK_CHAIN_DEPTH {
        let what = if depth == 0 {
            "AK certificate".to_string()
        } else {
            format!("intermediate CA \"{}\"", current.subject())
        };
        let mut failures = Vec::new();
        let issuer = configured.iter().find(|ca| {
            if ca.subject() != current.issuer() {
                return false;
            }
            match verify_certificate_signature(current, ca) {
                Ok(()) => true,
                Err(e) => {
                    failures.push((ca.subject().to_string(), e));
                    false
                }
            }
        });
        let Some(issuer) = issuer else {
            return Err(ChainError::NoIssuer {
                what,
                issuer: current.issuer().to_string(),
                configured: configured.len(),
                failures,
            });
        };
        check_is_issuing_ca(issuer)?;
        if !issuer.validity().is_valid() {
            return Err(ChainError::CaOutsideValidity {
                subject: issuer.subject().to_string(),
                not_before: issuer.validity().not_before.to_string(),
                not_after: issuer.validity().not_after.to_string(),
            });
        }
        if issuer.subject() == issuer.issuer() {
            return Ok(());
        }
        current = issuer;
    }
    Err(ChainError::NoRoot)
}

/// Why one pinned AK key was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum AkKeyError {
    /// It is not hex.
    #[error("{0}")]
    NotHex(HexError),
    /// It is not a SEC1 uncompressed P-256 point (65 bytes, `04...`).
    #[error("{len} bytes is not an uncompressed P-256 point (65 bytes, 04...)")]
    NotAPoint {
        /// How many bytes it has.
        len: usize,
    },
}

/// Why a `pinned:` AK trust (or an unknown form) was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum AkTrustError {
    /// Not one of `ca:`, `pinned:` or `insecure-any-ak`.
    #[error("want ca:PATH, pinned:FILE, pinned:HEX[,HEX...] or insecure-any-ak")]
    UnknownForm,
    /// A `pinned:FILE` file without a key (empty, or only comments).
    #[error("no key given")]
    NoKey,
    /// A key of a `pinned:HEX[,HEX...]` list is refused.
    #[error("key {position}: {error}")]
    ListKey {
        /// Its position in the list, from 1.
        position: usize,
        /// Why.
        error: AkKeyError,
    },
    /// A key of a `pinned:FILE` file is refused.
    #[error("{} line {line}: {error}", path.display())]
    FileKey {
        /// The file.
        path: PathBuf,
        /// Its line, from 1.
        line: usize,
        /// Why.
        error: AkKeyError,
    },
    /// The `pinned:FILE` file exists but cannot be read as text.
    #[error("cannot read {}: {kind}", path.display())]
    UnreadableFile {
        /// The file.
        path: PathBuf,
        /// What reading it gave.
        kind: io::ErrorKind,
    },
    /// The `pinned:FILE` file is larger than [`MAX_PINNED_KEYS_LEN`].
    #[error("{} is larger than {} bytes", path.display(), MAX_PINNED_KEYS_LEN)]
    FileTooLarge {
        /// The file.
        path: PathBuf,
    },
    /// The text after `pinned:` names no existing file and is not a list of
    /// hex keys either.
    #[error("{}, and not hex keys: {keys}", not_a_file(*file))]
    NeitherFileNorKeys {
        /// Why it is not a file (`NotFound`: there is none).
        file: io::ErrorKind,
        /// Why it is not a list of keys.
        keys: Box<AkTrustError>,
    },
}

/// Why the text after `pinned:` is not a file, for
/// [`AkTrustError::NeitherFileNorKeys`].
fn not_a_file(kind: io::ErrorKind) -> String {
    if kind == io::ErrorKind::NotFound {
        "no such file".to_string()
    } else {
        format!("not a file ({kind})")
    }
}

/// The keys of `pinned:TEXT`: the lines of the file TEXT names (relative to
/// `base`) when it exists, else TEXT as a comma-separated list of hex keys.
fn pinned_keys(text: &str, base: &Path) -> Result<Vec<Vec<u8>>, AkTrustError> {
    let path = base.join(text);
    let not_a_file = match std::fs::metadata(&path) {
        Ok(_) if !text.is_empty() => return pinned_keys_from_file(&path),
        Ok(_) => io::ErrorKind::NotFound,
        Err(e) => e.kind(),
    };
    pinned_keys_from_list(text).map_err(|keys| AkTrustError::NeitherFileNorKeys {
        file: not_a_file,
        keys: Box::new(keys),
    })
}

/// `HEX[,HEX...]`.
fn pinned_keys_from_list(list: &str) -> Result<Vec<Vec<u8>>, AkTrustError> {
    list.split(',')
        .enumerate()
        .map(|(i, h)| {
            ak_key(h).map_err(|error| AkTrustError::ListKey {
                position: i + 1,
                error,
            })
        })
        .collect()
}

/// One key per line, blank lines and `#` comments skipped.
fn pinned_keys_from_file(path: &Path) -> Result<Vec<Vec<u8>>, AkTrustError> {
    let unreadable = |e: io::Error| AkTrustError::UnreadableFile {
        path: path.to_path_buf(),
        kind: e.kind(),
    };
    let mut text = String::new();
    std::fs::File::open(path)
        .map_err(unreadable)?
        .take(MAX_PINNED_KEYS_LEN + 1)
        .read_to_string(&mut text)
        .map_err(unreadable)?;
    if text.len() as u64 > MAX_PINNED_KEYS_LEN {
        return Err(AkTrustError::FileTooLarge {
            path: path.to_path_buf(),
        });
    }
    let keys = text
        .lines()
        .enumerate()
        .map(|(i, l)| (i + 1, l.trim()))
        .filter(|(_, l)| !l.is_empty() && !l.starts_with('#'))
        .map(|(line, l)| {
            ak_key(l).map_err(|error| AkTrustError::FileKey {
                path: path.to_path_buf(),
                line,
                error,
            })
        })
        .collect::<Result<Vec<_>, _>>()?;
    if keys.is_empty() {
        return Err(AkTrustError::NoKey);
    }
    Ok(keys)
}

/// One AK public key: hex of a SEC1 uncompressed P-256 point.
fn ak_key(text: &str) -> Result<Vec<u8>, AkKeyError> {
    let key = hex::decode(text.trim()).map_err(AkKeyError::NotHex)?;
    if key.len() != 65 || key[0] != 4 {
        return Err(AkKeyError::NotAPoint { len: key.len() });
    }
    Ok(key)
}

/// Reads CA certificates from a file: one or more PEM `CERTIFICATE` blocks,
/// or one DER certificate. Each must parse.
pub fn load_ca_certificates(path: &Path) -> Result<Vec<Vec<u8>>, AttestationError> {
    let bytes = confboot_util::fs::read_bounded(path, MAX_CA_FILE_LEN)
        .map_err(|e| AttestationError::Policy(Detail::with(&VtpmRefusal::CaFile, e.to_string())))?;
    let ders: Vec<Vec<u8>> = if bytes.starts_with(b"-----BEGIN") {
        let mut ders = Vec::new();
        for pem in x509_parser::pem::Pem::iter_from_buffer(&bytes) {
            let pem = pem.map_err(|e| {
                AttestationError::Policy(Detail::with(
                    &VtpmRefusal::CaFile,
                    format!("{}: bad PEM: {e}", path.display()),
                ))
            })?;
            if pem.label == "CERTIFICATE" {
                ders.push(pem.contents);
            }
        }
        ders
    } else {
        vec![bytes.to_vec()]
    };
    if ders.is_empty() {
        return Err(AttestationError::Policy(Detail::with(
            &VtpmRefusal::CaFile,
            format!("{}: no certificate", path.display()),
        )));
    }
    for der in &ders {
        X509Certificate::from_der(der).map_err(|e| {
            AttestationError::Policy(Detail::with(
                &VtpmRefusal::CaFile,
                format!("{}: bad certificate: {e}", path.display()),
            ))
        })?;
    }
    Ok(ders)
}

/// Verifies a certificate's signature with an issuer's public key (ring).
fn verify_certificate_signature(
    cert: &X509Certificate<'_>,
    issuer: &X509Certificate<'_>,
) -> Result<(), SignatureError> {
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
            return Err(SignatureError::UnsupportedAlgorithm(alg.to_string()));
        };
    sig::UnparsedPublicKey::new(verification, &key_info.subject_public_key.data)
        .verify(cert.tbs_certificate.as_ref(), &cert.signature_value.data)
        .map_err(|_| SignatureError::DoesNotVerify)
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
        return Err(AttestationError::Issue(Detail::with(
            &VtpmRefusal::AkCertificateIssue,
            format!(
                "AK public key of {} bytes is not an uncompressed P-256 point",
                ak_public_key.len()
            ),
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
        .map_err(|e| {
            AttestationError::Issue(Detail::with(
                &VtpmRefusal::AkCertificateIssue,
                format!("cannot issue the AK certificate: {e}"),
            ))
        })
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
        for (bad, reason) in [
            ("pinned:04ab", VtpmRefusal::AkTrustSpec),
            ("pinned:zz", VtpmRefusal::AkTrustSpec),
            (
                &format!("pinned:05{}", "ab".repeat(64)),
                VtpmRefusal::AkTrustSpec,
            ),
            ("ca:/nonexistent/ca.pem", VtpmRefusal::CaFile),
            ("any", VtpmRefusal::AkTrustSpec),
        ] {
            assert!(
                matches!(AkTrust::parse(bad), Err(e @ AttestationError::Policy(_)) if e.is(&reason)),
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
            Err(e @ AttestationError::Policy(_)) if e.is(&VtpmRefusal::CaFile)
        ));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// A fresh empty directory for one test.
    fn scratch_dir(test: &str) -> PathBuf {
        let dir =
            std::env::temp_dir().join(format!("confboot-ak-trust-{test}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    fn key(byte: &str) -> String {
        format!("04{}", byte.repeat(64))
    }

    #[test]
    fn pinned_file_named_without_a_slash_is_read() {
        let dir = scratch_dir("no-slash");
        let (a, b) = (key("ab"), key("cd"));
        std::fs::write(
            dir.join("aks.txt"),
            format!("# node keys\n{a}\n\n  {b}  \n"),
        )
        .unwrap();
        let want = vec![hex::decode(&a).unwrap(), hex::decode(&b).unwrap()];
        assert_eq!(pinned_keys("aks.txt", &dir), Ok(want.clone()));
        match AkTrust::parse_in("pinned:aks.txt", &dir) {
            Ok(AkTrust::Pinned(keys)) => assert_eq!(keys, want),
            other => panic!("{other:?}"),
        }
        // The public parse resolves against the current directory: cargo runs
        // unit tests in the crate directory, where Cargo.toml is a file (not
        // keys), so it is read and refused by line, not taken for hex.
        assert_eq!(
            pinned_keys("Cargo.toml", Path::new("")),
            Err(AkTrustError::FileKey {
                path: PathBuf::from("Cargo.toml"),
                line: 1,
                error: AkKeyError::NotHex(HexError::OddLength(9)),
            })
        );
        assert!(matches!(
            AkTrust::parse("pinned:Cargo.toml"),
            Err(AttestationError::Policy(d))
                if d.is(&VtpmRefusal::AkTrustSpec) && d.text().contains("Cargo.toml line 1")
        ));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn pinned_text_that_is_neither_file_nor_keys_names_both() {
        let dir = scratch_dir("neither");
        assert_eq!(
            pinned_keys("aks.txt", &dir),
            Err(AkTrustError::NeitherFileNorKeys {
                file: io::ErrorKind::NotFound,
                keys: Box::new(AkTrustError::ListKey {
                    position: 1,
                    error: AkKeyError::NotHex(HexError::OddLength(7)),
                }),
            })
        );
        match AkTrust::parse_in("pinned:aks.txt", &dir) {
            Err(e) => assert_eq!(
                e,
                AttestationError::Policy(Detail::with(
                    &VtpmRefusal::AkTrustSpec,
                    "AK trust \"pinned:aks.txt\": no such file, and not hex keys: key 1: hex string has an odd length (7)"
                ))
            ),
            other => panic!("{other:?}"),
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn pinned_hex_lists_longer_than_a_file_name_are_keys() {
        // Far beyond NAME_MAX: looking for such a file fails with "name too
        // long", which must not stop the list from being read as keys.
        let keys: Vec<String> = ["01", "02", "03", "04"].iter().map(|b| key(b)).collect();
        match AkTrust::parse(&format!("pinned:{}", keys.join(","))) {
            Ok(AkTrust::Pinned(parsed)) => assert_eq!(parsed.len(), 4),
            other => panic!("{other:?}"),
        }
        assert_eq!(
            pinned_keys(&format!("{},05", keys[0]), Path::new("")),
            Err(AkTrustError::NeitherFileNorKeys {
                file: io::ErrorKind::NotFound,
                keys: Box::new(AkTrustError::ListKey {
                    position: 2,
                    error: AkKeyError::NotAPoint { len: 1 },
                }),
            })
        );
    }

    #[test]
    fn pinned_files_are_bounded_and_checked_line_by_line() {
        let dir = scratch_dir("file-errors");
        std::fs::write(dir.join("empty"), "# nothing\n\n").unwrap();
        assert_eq!(pinned_keys("empty", &dir), Err(AkTrustError::NoKey));
        std::fs::write(dir.join("short"), format!("{}\n# c\n04aabb\n", key("ab"))).unwrap();
        assert_eq!(
            pinned_keys("short", &dir),
            Err(AkTrustError::FileKey {
                path: dir.join("short"),
                line: 3,
                error: AkKeyError::NotAPoint { len: 3 },
            })
        );
        let big = format!("{}\n", key("ab")).repeat(MAX_PINNED_KEYS_LEN as usize / 131 + 1);
        std::fs::write(dir.join("big"), big).unwrap();
        assert_eq!(
            pinned_keys("big", &dir),
            Err(AkTrustError::FileTooLarge {
                path: dir.join("big")
            })
        );
        std::fs::create_dir(dir.join("sub")).unwrap();
        assert_eq!(
            pinned_keys("sub", &dir),
            Err(AkTrustError::UnreadableFile {
                path: dir.join("sub"),
                kind: io::ErrorKind::IsADirectory,
            })
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
