//! Intel's certificates: the pinned Intel SGX Root CA, the PCK chain a
//! quote carries (PCK leaf → PCK Platform or Processor CA → root), the
//! TCB signing certificate of the collateral, the SGX extensions of a PCK
//! certificate, and revocation lists.
//!
//! Signatures are ECDSA P-256 with SHA-256, checked with ring over the raw
//! to-be-signed bytes; certificates and CRLs are read with x509-parser.
//! The root is never taken from a quote or from collateral: only
//! [`TdxRoots`] anchors a chain, and a certificate counts only once it
//! verifies under it.

#![deny(
    clippy::cast_possible_truncation,
    clippy::cast_sign_loss,
    clippy::cast_possible_wrap
)]

use ring::signature::{ECDSA_P256_SHA256_ASN1, ECDSA_P256_SHA256_FIXED, UnparsedPublicKey};
use x509_parser::prelude::{FromDer, X509Certificate};
use x509_parser::revocation_list::CertificateRevocationList;

/// Intel SGX Root CA (DER), pinned. SHA-256 of the DER:
/// `44a0196b2b99f889b8e149e95b807a350e7424964399e885a7cbb8ccfab674d3`
/// (valid 2018-05-21 to 2049-12-31; served at
/// `https://certificates.trustedservices.intel.com/Intel_SGX_Provisioning_Certification_RootCA.cer`).
pub const INTEL_SGX_ROOT_CA_DER: &[u8] = include_bytes!("intel_sgx_root_ca.der");

/// Intel SGX TCB Signing certificate of 2018 (DER; valid 2018-05-21 to
/// 2025-05-21), the signer of TCB info and QE identity collateral that
/// Intel's PCS names in its `TCB-Info-Issuer-Chain` header. SHA-256 of the
/// DER: `ec37d98107bfb7dab6ff8de4d4dda6fde30a6f50b0d7b03eefb5652f1e652969`.
/// It is a candidate signer, not a root: it counts only once it verifies
/// under the pinned root, and only within its validity.
pub const INTEL_SGX_TCB_SIGNING_2018_DER: &[u8] = include_bytes!("intel_sgx_tcb_signing_2018.der");

/// The largest certificate read.
pub const MAX_CERTIFICATE_LEN: usize = 8 * 1024;
/// The largest CRL read (Intel's PCK CRLs list some hundred serials).
pub const MAX_CRL_LEN: usize = 512 * 1024;
/// The most certificates a chain (or a PEM bundle) may hold.
pub const MAX_CHAIN_CERTIFICATES: usize = 8;

/// OID of ecdsa-with-SHA256.
const OID_ECDSA_SHA256: &str = "1.2.840.10045.4.3.2";
/// OID of the PCK certificate's SGX extensions.
pub const OID_SGX_EXTENSIONS: &str = "1.2.840.113741.1.13.1";

/// Why a certificate, chain or CRL is refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum CertError {
    /// The bytes are not a certificate (or CRL) this reader takes.
    #[error("{what}: {reason}")]
    Malformed {
        /// What was being read.
        what: &'static str,
        /// Why it does not parse.
        reason: String,
    },
    /// Too many bytes or too many certificates.
    #[error("{what}: {actual} exceeds the bound of {max}")]
    TooLarge {
        /// What was being read.
        what: &'static str,
        /// Its size or count.
        actual: usize,
        /// The bound.
        max: usize,
    },
    /// A signature algorithm other than ECDSA P-256 with SHA-256.
    #[error("{what} is signed with {oid}, not ecdsa-with-SHA256")]
    Algorithm {
        /// The signed object.
        what: String,
        /// The algorithm's OID.
        oid: String,
    },
    /// A signature does not verify.
    #[error("the signature of {what} does not verify with the key of {signer}")]
    Signature {
        /// The signed object.
        what: String,
        /// The certificate whose key was tried.
        signer: String,
    },
    /// A certificate's issuer is not the next certificate's subject.
    #[error("{what} is issued by {issuer:?}, not by {signer:?}")]
    Issuer {
        /// The certificate.
        what: String,
        /// Its issuer's common name.
        issuer: String,
        /// The common name of the certificate tried as its issuer.
        signer: String,
    },
    /// An issuing certificate is not a CA.
    #[error("{0} is not a CA certificate (basicConstraints)")]
    NotCa(String),
    /// The chain does not end in a pinned root.
    #[error("the chain ends in {0:?}, which is not a pinned root")]
    UnknownRoot(String),
    /// A certificate or CRL is not valid at the time of the check.
    #[error("{what} is valid from {not_before} to {not_after} (Unix seconds), not at {at}")]
    Expired {
        /// The certificate or CRL.
        what: String,
        /// Start of its validity.
        not_before: i64,
        /// End of its validity.
        not_after: i64,
        /// The time of the check.
        at: i64,
    },
    /// A certificate is on a CRL.
    #[error("{what} (serial {serial}) is revoked by the CRL of {issuer:?}")]
    Revoked {
        /// The certificate.
        what: String,
        /// Its serial, hex.
        serial: String,
        /// The CRL's issuer.
        issuer: String,
    },
    /// A PCK certificate's SGX extensions are missing or malformed.
    #[error("PCK certificate SGX extensions: {0}")]
    SgxExtensions(String),
}

fn malformed(what: &'static str, reason: impl ToString) -> CertError {
    CertError::Malformed {
        what,
        reason: reason.to_string(),
    }
}

/// A certificate parsed into what the checks need.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IntelCert {
    der: Vec<u8>,
    tbs: Vec<u8>,
    signature_oid: String,
    signature: Vec<u8>,
    subject: Vec<u8>,
    issuer: Vec<u8>,
    common_name: String,
    issuer_common_name: String,
    serial: Vec<u8>,
    public_key: Vec<u8>,
    is_ca: bool,
    not_before: i64,
    not_after: i64,
    sgx_extensions: Option<Vec<u8>>,
}

fn common_name(name: &x509_parser::x509::X509Name<'_>) -> String {
    name.iter_common_name()
        .next()
        .and_then(|cn| cn.as_str().ok())
        .unwrap_or("")
        .to_string()
}

impl IntelCert {
    /// Parses one DER certificate (nothing may follow it).
    pub fn from_der(der: &[u8]) -> Result<IntelCert, CertError> {
        if der.len() > MAX_CERTIFICATE_LEN {
            return Err(CertError::TooLarge {
                what: "certificate",
                actual: der.len(),
                max: MAX_CERTIFICATE_LEN,
            });
        }
        let (rest, x509) =
            X509Certificate::from_der(der).map_err(|e| malformed("certificate", e))?;
        if !rest.is_empty() {
            return Err(malformed(
                "certificate",
                format!("{} bytes after the DER", rest.len()),
            ));
        }
        let is_ca = x509
            .basic_constraints()
            .map_err(|e| malformed("certificate", e))?
            .is_some_and(|bc| bc.value.ca);
        let sgx_extensions = x509
            .extensions()
            .iter()
            .find(|e| e.oid.to_id_string() == OID_SGX_EXTENSIONS)
            .map(|e| e.value.to_vec());
        Ok(IntelCert {
            der: der.to_vec(),
            tbs: x509.tbs_certificate.as_ref().to_vec(),
            signature_oid: x509.signature_algorithm.algorithm.to_id_string(),
            signature: x509.signature_value.data.to_vec(),
            subject: x509.subject().as_raw().to_vec(),
            issuer: x509.issuer().as_raw().to_vec(),
            common_name: common_name(x509.subject()),
            issuer_common_name: common_name(x509.issuer()),
            serial: x509.raw_serial().to_vec(),
            public_key: x509.public_key().subject_public_key.data.to_vec(),
            is_ca,
            not_before: x509.validity().not_before.timestamp(),
            not_after: x509.validity().not_after.timestamp(),
            sgx_extensions,
        })
    }

    /// The DER bytes.
    pub fn der(&self) -> &[u8] {
        &self.der
    }

    /// The subject common name.
    pub fn common_name(&self) -> &str {
        &self.common_name
    }

    /// The serial number's raw bytes.
    pub fn serial(&self) -> &[u8] {
        &self.serial
    }

    /// The subject public key (SEC1 for an EC key).
    pub fn public_key(&self) -> &[u8] {
        &self.public_key
    }

    /// The validity window, Unix seconds.
    pub fn validity(&self) -> (i64, i64) {
        (self.not_before, self.not_after)
    }

    /// Whether `at` is inside the validity window.
    pub fn check_validity(&self, at: i64) -> Result<(), CertError> {
        if at < self.not_before || at > self.not_after {
            return Err(CertError::Expired {
                what: format!("certificate {:?}", self.common_name),
                not_before: self.not_before,
                not_after: self.not_after,
                at,
            });
        }
        Ok(())
    }

    /// Whether `issuer` signed this certificate: names chain, the issuer is
    /// a CA, and its key verifies the signature.
    pub fn check_issued_by(&self, issuer: &IntelCert) -> Result<(), CertError> {
        let what = format!("certificate {:?}", self.common_name);
        if self.issuer != issuer.subject {
            return Err(CertError::Issuer {
                what,
                issuer: self.issuer_common_name.clone(),
                signer: issuer.common_name.clone(),
            });
        }
        if !issuer.is_ca {
            return Err(CertError::NotCa(issuer.common_name.clone()));
        }
        verify_asn1(
            &what,
            &self.signature_oid,
            &self.tbs,
            &self.signature,
            issuer,
        )
    }

    /// Verifies a fixed-form (`r ‖ s`) ECDSA P-256 SHA-256 signature over
    /// `data` with this certificate's key.
    pub fn verify_fixed(&self, what: &str, data: &[u8], signature: &[u8]) -> Result<(), CertError> {
        UnparsedPublicKey::new(&ECDSA_P256_SHA256_FIXED, &self.public_key)
            .verify(data, signature)
            .map_err(|_| CertError::Signature {
                what: what.to_string(),
                signer: self.common_name.clone(),
            })
    }

    /// The raw SGX extensions (PCK certificates only).
    pub fn sgx_extensions(&self) -> Result<SgxExtensions, CertError> {
        let raw = self
            .sgx_extensions
            .as_deref()
            .ok_or_else(|| CertError::SgxExtensions("the certificate has none".into()))?;
        SgxExtensions::parse(raw)
    }
}

fn verify_asn1(
    what: &str,
    oid: &str,
    data: &[u8],
    signature: &[u8],
    signer: &IntelCert,
) -> Result<(), CertError> {
    if oid != OID_ECDSA_SHA256 {
        return Err(CertError::Algorithm {
            what: what.to_string(),
            oid: oid.to_string(),
        });
    }
    UnparsedPublicKey::new(&ECDSA_P256_SHA256_ASN1, &signer.public_key)
        .verify(data, signature)
        .map_err(|_| CertError::Signature {
            what: what.to_string(),
            signer: signer.common_name.clone(),
        })
}

/// The DER certificates in `bytes`: every `CERTIFICATE` block of PEM text,
/// or the bytes as one DER certificate. At most [`MAX_CHAIN_CERTIFICATES`].
pub fn certificates_from_pem_or_der(bytes: &[u8]) -> Result<Vec<Vec<u8>>, CertError> {
    // A PEM chain may end in a NUL (quote generators write C strings).
    let text = bytes.strip_suffix(&[0]).unwrap_or(bytes);
    if !text.trim_ascii_start().starts_with(b"-----BEGIN") {
        return Ok(vec![text.to_vec()]);
    }
    let mut ders = Vec::new();
    for part in x509_parser::pem::Pem::iter_from_buffer(text) {
        let part = part.map_err(|e| malformed("PEM certificates", e))?;
        if part.label == "CERTIFICATE" {
            if ders.len() == MAX_CHAIN_CERTIFICATES {
                return Err(CertError::TooLarge {
                    what: "PEM certificates",
                    actual: ders.len() + 1,
                    max: MAX_CHAIN_CERTIFICATES,
                });
            }
            ders.push(part.contents);
        }
    }
    if ders.is_empty() {
        return Err(malformed("PEM certificates", "no CERTIFICATE block"));
    }
    Ok(ders)
}

/// The roots a TDX verifier trusts: Intel's SGX Root CA unless configured
/// otherwise.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TdxRoots {
    roots: Vec<IntelCert>,
}

impl TdxRoots {
    /// Intel SGX Root CA only ([`INTEL_SGX_ROOT_CA_DER`]).
    pub fn intel() -> TdxRoots {
        let root = IntelCert::from_der(INTEL_SGX_ROOT_CA_DER).expect("the pinned root parses");
        TdxRoots { roots: vec![root] }
    }

    /// Exactly these roots (DER or PEM each); each must be a self-signed CA.
    pub fn new(certificates: &[Vec<u8>]) -> Result<TdxRoots, CertError> {
        let mut roots = Vec::new();
        for bytes in certificates {
            for der in certificates_from_pem_or_der(bytes)? {
                let root = IntelCert::from_der(&der)?;
                root.check_issued_by(&root)?;
                roots.push(root);
            }
        }
        if roots.is_empty() {
            return Err(malformed("roots", "no certificate"));
        }
        Ok(TdxRoots { roots })
    }

    /// The roots.
    pub fn roots(&self) -> &[IntelCert] {
        &self.roots
    }

    /// The pinned root that issued `cert`, if one did.
    fn issuer_of(&self, cert: &IntelCert) -> Result<&IntelCert, CertError> {
        let mut last = None;
        for root in &self.roots {
            match cert.check_issued_by(root) {
                Ok(()) => return Ok(root),
                Err(e) => last = Some(e),
            }
        }
        Err(match last {
            Some(CertError::Issuer { .. }) | None => {
                CertError::UnknownRoot(cert.issuer_common_name.clone())
            }
            Some(e) => e,
        })
    }

    /// Verifies a certificate issued directly by a pinned root (the TCB
    /// signing certificate); returns that root.
    pub fn verify_issued_by_root(&self, cert: &IntelCert) -> Result<&IntelCert, CertError> {
        self.issuer_of(cert)
    }

    /// Verifies a PCK chain (PEM: leaf, intermediate CA, and optionally a
    /// root, which is ignored: the pinned roots decide). Validity is not
    /// checked here ([`PckChain::check_validity`]).
    pub fn verify_pck_chain(&self, pem: &[u8]) -> Result<PckChain, CertError> {
        let ders = certificates_from_pem_or_der(pem)?;
        let mut certs = ders.iter().map(|d| IntelCert::from_der(d));
        let leaf = certs
            .next()
            .ok_or_else(|| malformed("PCK chain", "empty"))??;
        let intermediate = certs
            .next()
            .ok_or_else(|| malformed("PCK chain", "no intermediate CA"))??;
        // Anything after the intermediate must parse, but does not count.
        for c in certs {
            c?;
        }
        leaf.check_issued_by(&intermediate)?;
        let root = self.issuer_of(&intermediate)?.clone();
        Ok(PckChain {
            leaf,
            intermediate,
            root,
        })
    }
}

/// A PCK chain whose signatures verified up to a pinned root.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PckChain {
    /// The PCK certificate.
    pub leaf: IntelCert,
    /// The PCK Platform or Processor CA.
    pub intermediate: IntelCert,
    /// The pinned root it chains to.
    pub root: IntelCert,
}

impl PckChain {
    /// Every certificate of the chain is valid at `at`.
    pub fn check_validity(&self, at: i64) -> Result<(), CertError> {
        self.leaf.check_validity(at)?;
        self.intermediate.check_validity(at)?;
        self.root.check_validity(at)
    }

    /// The end of the chain's validity: the earliest `notAfter`.
    pub fn not_after(&self) -> i64 {
        self.leaf
            .not_after
            .min(self.intermediate.not_after)
            .min(self.root.not_after)
    }
}

/// A certificate revocation list.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Crl {
    tbs: Vec<u8>,
    signature_oid: String,
    signature: Vec<u8>,
    issuer: Vec<u8>,
    issuer_common_name: String,
    this_update: i64,
    next_update: Option<i64>,
    revoked: Vec<Vec<u8>>,
}

impl Crl {
    /// Parses a CRL, DER or PEM (`X509 CRL`), at most [`MAX_CRL_LEN`] bytes.
    pub fn parse(bytes: &[u8]) -> Result<Crl, CertError> {
        if bytes.len() > MAX_CRL_LEN {
            return Err(CertError::TooLarge {
                what: "CRL",
                actual: bytes.len(),
                max: MAX_CRL_LEN,
            });
        }
        let der = if bytes.trim_ascii_start().starts_with(b"-----BEGIN") {
            let (_, pem) =
                x509_parser::pem::parse_x509_pem(bytes).map_err(|e| malformed("CRL", e))?;
            if pem.label != "X509 CRL" {
                return Err(malformed("CRL", format!("PEM label {:?}", pem.label)));
            }
            pem.contents
        } else {
            bytes.to_vec()
        };
        let (rest, crl) =
            CertificateRevocationList::from_der(&der).map_err(|e| malformed("CRL", e))?;
        if !rest.is_empty() {
            return Err(malformed(
                "CRL",
                format!("{} bytes after the DER", rest.len()),
            ));
        }
        Ok(Crl {
            tbs: crl.tbs_cert_list.as_ref().to_vec(),
            signature_oid: crl.signature_algorithm.algorithm.to_id_string(),
            signature: crl.signature_value.data.to_vec(),
            issuer: crl.issuer().as_raw().to_vec(),
            issuer_common_name: common_name(crl.issuer()),
            this_update: crl.last_update().timestamp(),
            next_update: crl.next_update().map(|t| t.timestamp()),
            revoked: crl
                .iter_revoked_certificates()
                .map(|r| r.raw_serial().to_vec())
                .collect(),
        })
    }

    /// The issuer's common name.
    pub fn issuer_common_name(&self) -> &str {
        &self.issuer_common_name
    }

    /// How many certificates it revokes.
    pub fn revoked_count(&self) -> usize {
        self.revoked.len()
    }

    /// `issuer` signed this CRL, and it is current at `at` (`thisUpdate`
    /// ≤ `at` ≤ `nextUpdate`; a CRL without `nextUpdate` is refused).
    pub fn check(&self, issuer: &IntelCert, at: i64) -> Result<(), CertError> {
        let what = format!("the CRL of {:?}", self.issuer_common_name);
        if self.issuer != issuer.subject {
            return Err(CertError::Issuer {
                what,
                issuer: self.issuer_common_name.clone(),
                signer: issuer.common_name.clone(),
            });
        }
        verify_asn1(
            &what,
            &self.signature_oid,
            &self.tbs,
            &self.signature,
            issuer,
        )?;
        let next = self
            .next_update
            .ok_or_else(|| malformed("CRL", "no nextUpdate"))?;
        if at < self.this_update || at > next {
            return Err(CertError::Expired {
                what,
                not_before: self.this_update,
                not_after: next,
                at,
            });
        }
        Ok(())
    }

    /// Refuses `cert` if this CRL lists its serial.
    pub fn check_not_revoked(&self, cert: &IntelCert) -> Result<(), CertError> {
        if self.revoked.iter().any(|s| s == &cert.serial) {
            return Err(CertError::Revoked {
                what: format!("certificate {:?}", cert.common_name),
                serial: confboot_util::hex::encode(&cert.serial),
                issuer: self.issuer_common_name.clone(),
            });
        }
        Ok(())
    }
}

/// What a PCK certificate says about its platform (Intel's SGX extensions).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SgxExtensions {
    /// The SGX TCB components 1 to 16.
    pub sgx_tcb_components: [u8; 16],
    /// The PCE SVN.
    pub pce_svn: u16,
    /// The CPU SVN.
    pub cpu_svn: [u8; 16],
    /// The PCE id.
    pub pce_id: [u8; 2],
    /// The FMSPC: the platform's family, model and stepping, and its
    /// platform type.
    pub fmspc: [u8; 6],
}

/// A DER element: its tag and its contents.
type Tlv<'a> = (u8, &'a [u8]);

/// Reads one DER element from the front of `b` (definite lengths up to 4
/// bytes); returns it and what follows.
fn der_next(b: &[u8]) -> Result<(Tlv<'_>, &[u8]), CertError> {
    let bad = |m: &str| CertError::SgxExtensions(m.to_string());
    let (&tag, rest) = b.split_first().ok_or_else(|| bad("truncated element"))?;
    let (&first, rest) = rest.split_first().ok_or_else(|| bad("truncated length"))?;
    let (len, rest) = if first < 0x80 {
        (first as usize, rest)
    } else {
        let n = (first & 0x7f) as usize;
        if n == 0 || n > 4 || rest.len() < n {
            return Err(bad("bad length"));
        }
        let len = rest[..n].iter().fold(0usize, |a, b| (a << 8) | *b as usize);
        (len, &rest[n..])
    };
    if rest.len() < len {
        return Err(bad("element runs past its container"));
    }
    Ok(((tag, &rest[..len]), &rest[len..]))
}

/// The elements of a SEQUENCE's contents, at most `max`.
fn der_items(mut b: &[u8], max: usize) -> Result<Vec<Tlv<'_>>, CertError> {
    let mut out = Vec::new();
    while !b.is_empty() {
        if out.len() == max {
            return Err(CertError::SgxExtensions("too many elements".into()));
        }
        let (tlv, rest) = der_next(b)?;
        out.push(tlv);
        b = rest;
    }
    Ok(out)
}

/// The DER encoding of an OID under the SGX arc `1.2.840.113741.1.13.1`,
/// with `suffix` arcs (each below 128).
fn sgx_oid(suffix: &[u8]) -> Vec<u8> {
    let mut oid = vec![0x2a, 0x86, 0x48, 0x86, 0xf8, 0x4d, 0x01, 0x0d, 0x01];
    oid.extend_from_slice(suffix);
    oid
}

/// A small non-negative DER INTEGER.
fn der_uint(content: &[u8]) -> Option<u32> {
    match content {
        [] => None,
        [b, ..] if b & 0x80 != 0 => None,
        [0, rest @ ..] if rest.len() <= 4 => Some(rest.iter().fold(0, |a, b| (a << 8) | *b as u32)),
        c if c.len() <= 4 => Some(c.iter().fold(0, |a, b| (a << 8) | *b as u32)),
        _ => None,
    }
}

impl SgxExtensions {
    /// Parses the value of the extension [`OID_SGX_EXTENSIONS`]: a
    /// SEQUENCE of (OID, value) pairs. Each needed entry must appear once.
    pub fn parse(value: &[u8]) -> Result<SgxExtensions, CertError> {
        let bad = |m: String| CertError::SgxExtensions(m);
        let ((tag, outer), rest) = der_next(value)?;
        if tag != 0x30 || !rest.is_empty() {
            return Err(bad("not a single SEQUENCE".into()));
        }
        let mut tcb = None;
        let mut pce_id = None;
        let mut fmspc = None;
        for (tag, pair) in der_items(outer, 16)? {
            let items = der_items(pair, 2)?;
            let [(0x06, oid), (vtag, value)] = items[..] else {
                return Err(bad("an entry is not (OID, value)".into()));
            };
            if tag != 0x30 {
                return Err(bad("an entry is not a SEQUENCE".into()));
            }
            let slot = if oid == sgx_oid(&[2]).as_slice() && vtag == 0x30 {
                &mut tcb
            } else if oid == sgx_oid(&[3]).as_slice() && vtag == 0x04 {
                &mut pce_id
            } else if oid == sgx_oid(&[4]).as_slice() && vtag == 0x04 {
                &mut fmspc
            } else {
                continue;
            };
            if slot.replace(value).is_some() {
                return Err(bad("an entry appears twice".into()));
            }
        }
        let tcb = tcb.ok_or_else(|| bad("no TCB entry".into()))?;
        let pce_id: [u8; 2] = pce_id
            .ok_or_else(|| bad("no PCE-ID".into()))?
            .try_into()
            .map_err(|_| bad("PCE-ID is not 2 bytes".into()))?;
        let fmspc: [u8; 6] = fmspc
            .ok_or_else(|| bad("no FMSPC".into()))?
            .try_into()
            .map_err(|_| bad("FMSPC is not 6 bytes".into()))?;
        let mut components: [Option<u8>; 16] = [None; 16];
        let mut pce_svn = None;
        let mut cpu_svn = None;
        for (tag, pair) in der_items(tcb, 32)? {
            let items = der_items(pair, 2)?;
            let [(0x06, oid), (vtag, value)] = items[..] else {
                return Err(bad("a TCB entry is not (OID, value)".into()));
            };
            if tag != 0x30 {
                return Err(bad("a TCB entry is not a SEQUENCE".into()));
            }
            let Some(&[arc]) = oid.strip_prefix(sgx_oid(&[2]).as_slice()) else {
                continue;
            };
            match (arc, vtag) {
                (1..=16, 0x02) => {
                    let svn = der_uint(value)
                        .and_then(|v| u8::try_from(v).ok())
                        .ok_or_else(|| bad(format!("TCB component {arc} is not 0..=255")))?;
                    if components[arc as usize - 1].replace(svn).is_some() {
                        return Err(bad(format!("TCB component {arc} appears twice")));
                    }
                }
                (17, 0x02) => {
                    let svn = der_uint(value)
                        .and_then(|v| u16::try_from(v).ok())
                        .ok_or_else(|| bad("PCESVN is not 0..=65535".into()))?;
                    if pce_svn.replace(svn).is_some() {
                        return Err(bad("PCESVN appears twice".into()));
                    }
                }
                (18, 0x04) => {
                    let svn: [u8; 16] = value
                        .try_into()
                        .map_err(|_| bad("CPUSVN is not 16 bytes".into()))?;
                    if cpu_svn.replace(svn).is_some() {
                        return Err(bad("CPUSVN appears twice".into()));
                    }
                }
                _ => return Err(bad(format!("unexpected TCB entry {arc}"))),
            }
        }
        let mut sgx_tcb_components = [0u8; 16];
        for (i, c) in components.iter().enumerate() {
            sgx_tcb_components[i] =
                c.ok_or_else(|| bad(format!("TCB component {} missing", i + 1)))?;
        }
        Ok(SgxExtensions {
            sgx_tcb_components,
            pce_svn: pce_svn.ok_or_else(|| bad("PCESVN missing".into()))?,
            cpu_svn: cpu_svn.ok_or_else(|| bad("CPUSVN missing".into()))?,
            pce_id,
            fmspc,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_pinned_root_is_intels_and_self_signed() {
        let roots = TdxRoots::intel();
        let root = &roots.roots()[0];
        assert_eq!(root.common_name(), "Intel SGX Root CA");
        root.check_issued_by(root).unwrap();
        let digest = ring::digest::digest(&ring::digest::SHA256, INTEL_SGX_ROOT_CA_DER);
        assert_eq!(
            confboot_util::hex::encode(digest.as_ref()),
            "44a0196b2b99f889b8e149e95b807a350e7424964399e885a7cbb8ccfab674d3"
        );
        let signing = IntelCert::from_der(INTEL_SGX_TCB_SIGNING_2018_DER).unwrap();
        assert_eq!(signing.common_name(), "Intel SGX TCB Signing");
        roots.verify_issued_by_root(&signing).unwrap();
    }

    #[test]
    fn der_integers() {
        assert_eq!(der_uint(&[5]), Some(5));
        assert_eq!(der_uint(&[0, 0x80]), Some(0x80));
        assert_eq!(der_uint(&[0x80]), None);
        assert_eq!(der_uint(&[]), None);
        assert_eq!(der_uint(&[1, 2, 3, 4, 5]), None);
    }
}
