//! AMD's certificates: the pinned roots (ARK, with their ASK and ASVK), the
//! versioned endorsement key (VCEK or VLEK) and its extensions, and the
//! chain VCEK → ASK → ARK (or VLEK → ASVK → ARK).
//!
//! Signatures of the chain are checked by the `sev` crate (RSA-PSS with
//! SHA-384, pure Rust); the extensions are read with x509-parser. The ARK
//! is never taken from evidence: only the pinned ARKs are roots, and an
//! intermediate (from configuration or evidence) counts only once it
//! verifies under one of them.

#![deny(
    clippy::cast_possible_truncation,
    clippy::cast_sign_loss,
    clippy::cast_possible_wrap
)]

use std::fmt;
use std::sync::{Arc, Mutex};

use sev::certs::snp::{Certificate as SevCertificate, Verifiable};
use x509_parser::prelude::{FromDer, X509Certificate};

use super::report::{Product, TcbVersion};
use crate::SnpRefusal;
use confboot_attest::{AttestationError, Detail};

/// OID of the VCEK's hardware-id extension (the chip id it belongs to).
pub const OID_HW_ID: &str = "1.3.6.1.4.1.3704.1.4";
/// OID of the product-name extension (an IA5String such as `Milan-B0`).
pub const OID_PRODUCT_NAME: &str = "1.3.6.1.4.1.3704.1.2";
/// OID of the bootloader SVN extension.
pub const OID_TCB_BOOTLOADER: &str = "1.3.6.1.4.1.3704.1.3.1";
/// OID of the TEE SVN extension.
pub const OID_TCB_TEE: &str = "1.3.6.1.4.1.3704.1.3.2";
/// OID of the SNP firmware SVN extension.
pub const OID_TCB_SNP: &str = "1.3.6.1.4.1.3704.1.3.3";
/// OID of the microcode SVN extension.
pub const OID_TCB_MICROCODE: &str = "1.3.6.1.4.1.3704.1.3.8";
/// OID of the FMC SVN extension (Turin and later).
pub const OID_TCB_FMC: &str = "1.3.6.1.4.1.3704.1.3.9";

/// The role of an AMD certificate, from its subject common name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CertRole {
    /// `ARK-<product>`: the AMD root key.
    Ark,
    /// `SEV-<product>`: the ASK, signs VCEKs.
    Ask,
    /// `SEV-VLEK-<product>`: the ASVK, signs VLEKs.
    Asvk,
    /// `SEV-VCEK`.
    Vcek,
    /// `SEV-VLEK`.
    Vlek,
}

impl CertRole {
    /// Name used in messages.
    pub fn name(self) -> &'static str {
        match self {
            CertRole::Ark => "ARK",
            CertRole::Ask => "ASK",
            CertRole::Asvk => "ASVK",
            CertRole::Vcek => "VCEK",
            CertRole::Vlek => "VLEK",
        }
    }

    /// The role named by a subject common name, and the product it names (if any).
    pub fn from_common_name(cn: &str) -> Option<(CertRole, Option<Product>)> {
        match cn {
            "SEV-VCEK" => return Some((CertRole::Vcek, None)),
            "SEV-VLEK" => return Some((CertRole::Vlek, None)),
            _ => {}
        }
        if let Some(p) = cn.strip_prefix("ARK-") {
            return Some((CertRole::Ark, Some(Product::from_name(p)?)));
        }
        if let Some(p) = cn.strip_prefix("SEV-VLEK-") {
            return Some((CertRole::Asvk, Some(Product::from_name(p)?)));
        }
        if let Some(p) = cn.strip_prefix("SEV-") {
            return Some((CertRole::Ask, Some(Product::from_name(p)?)));
        }
        None
    }
}

impl fmt::Display for CertRole {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// An AMD certificate parsed both ways: x509-parser for names and
/// extensions, the `sev` crate for signature checks.
#[derive(Clone, Debug)]
pub struct AmdCert {
    der: Vec<u8>,
    sev: SevCertificate,
    role: CertRole,
    product: Option<Product>,
    common_name: String,
    issuer_common_name: String,
    not_before: i64,
    not_after: i64,
}

impl AmdCert {
    /// Parses a DER certificate; its subject common name must name an AMD role.
    pub fn from_der(der: &[u8]) -> Result<AmdCert, AttestationError> {
        let (rest, x509) = X509Certificate::from_der(der).map_err(|e| {
            AttestationError::Decode(Detail::with(
                &SnpRefusal::Certificate,
                format!("certificate: {e}"),
            ))
        })?;
        if !rest.is_empty() {
            return Err(AttestationError::Decode(Detail::with(
                &SnpRefusal::Certificate,
                format!("certificate: {} trailing bytes after the DER", rest.len()),
            )));
        }
        let common_name = x509
            .subject()
            .iter_common_name()
            .next()
            .and_then(|cn| cn.as_str().ok())
            .unwrap_or("")
            .to_string();
        let issuer_common_name = x509
            .issuer()
            .iter_common_name()
            .next()
            .and_then(|cn| cn.as_str().ok())
            .unwrap_or("")
            .to_string();
        let (role, product) = CertRole::from_common_name(&common_name).ok_or_else(|| {
            AttestationError::Trust(Detail::with(
                &SnpRefusal::CertificateName,
                format!("certificate subject CN {common_name:?} is not an AMD SEV-SNP certificate"),
            ))
        })?;
        let sev = SevCertificate::from_der(der).map_err(|e| {
            AttestationError::Decode(Detail::with(
                &SnpRefusal::Certificate,
                format!("certificate: {e}"),
            ))
        })?;
        Ok(AmdCert {
            der: der.to_vec(),
            sev,
            role,
            product,
            common_name,
            issuer_common_name,
            not_before: x509.validity().not_before.timestamp(),
            not_after: x509.validity().not_after.timestamp(),
        })
    }

    /// The validity window: not before, not after (Unix seconds).
    pub fn validity(&self) -> (i64, i64) {
        (self.not_before, self.not_after)
    }

    /// The DER bytes.
    pub fn der(&self) -> &[u8] {
        &self.der
    }

    /// The role its subject names.
    pub fn role(&self) -> CertRole {
        self.role
    }

    /// The product its subject names (ARK, ASK, ASVK).
    pub fn product(&self) -> Option<Product> {
        self.product
    }

    /// The subject common name.
    pub fn common_name(&self) -> &str {
        &self.common_name
    }

    /// The issuer common name.
    pub fn issuer_common_name(&self) -> &str {
        &self.issuer_common_name
    }

    /// Whether `self`'s key signed `signee` (RSA-PSS SHA-384); the error
    /// is the `sev` crate's account of why not.
    pub fn signs(&self, signee: &AmdCert) -> Result<(), std::io::Error> {
        (&self.sev, &signee.sev).verify()
    }
}

/// What a VCEK or VLEK certifies: its public key, the chip it belongs to
/// (VCEK) and the TCB it was derived for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VekInfo {
    /// The P-384 public key, SEC1 uncompressed.
    pub public_key: Vec<u8>,
    /// The hwID extension (VCEK only): 64 bytes before Turin, 8 from Turin on.
    pub hw_id: Option<Vec<u8>>,
    /// The bootloader SVN extension.
    pub bootloader: Option<u8>,
    /// The TEE SVN extension.
    pub tee: Option<u8>,
    /// The SNP SVN extension.
    pub snp: Option<u8>,
    /// The microcode SVN extension.
    pub microcode: Option<u8>,
    /// The FMC SVN extension (Turin).
    pub fmc: Option<u8>,
    /// The product the productName extension names (`Milan-B0` → Milan).
    pub product: Option<Product>,
}

impl VekInfo {
    /// Reads the extensions of a VCEK or VLEK.
    pub fn from_der(der: &[u8]) -> Result<VekInfo, AttestationError> {
        let (_, x509) = X509Certificate::from_der(der).map_err(|e| {
            AttestationError::Decode(Detail::with(
                &SnpRefusal::VekCertificate,
                format!("VEK certificate: {e}"),
            ))
        })?;
        let mut info = VekInfo {
            public_key: x509.public_key().subject_public_key.data.to_vec(),
            hw_id: None,
            bootloader: None,
            tee: None,
            snp: None,
            microcode: None,
            fmc: None,
            product: None,
        };
        for ext in x509.extensions() {
            let oid = ext.oid.to_id_string();
            let slot = match oid.as_str() {
                OID_HW_ID => {
                    if info.hw_id.is_some() {
                        return Err(duplicate(&oid));
                    }
                    info.hw_id = Some(ext.value.to_vec());
                    continue;
                }
                OID_PRODUCT_NAME => {
                    // DER IA5String: tag 0x16, short length, text.
                    if let [0x16, len, text @ ..] = ext.value
                        && usize::from(*len) == text.len()
                    {
                        let name = std::str::from_utf8(text).unwrap_or("");
                        info.product = Product::from_name(name.split('-').next().unwrap_or(""));
                    }
                    continue;
                }
                OID_TCB_BOOTLOADER => &mut info.bootloader,
                OID_TCB_TEE => &mut info.tee,
                OID_TCB_SNP => &mut info.snp,
                OID_TCB_MICROCODE => &mut info.microcode,
                OID_TCB_FMC => &mut info.fmc,
                _ => continue,
            };
            if slot.is_some() {
                return Err(duplicate(&oid));
            }
            *slot = Some(der_small_integer(ext.value).ok_or_else(|| {
                AttestationError::Decode(Detail::with(
                    &SnpRefusal::VekCertificate,
                    format!("VEK certificate: extension {oid} is not an INTEGER 0..=255"),
                ))
            })?);
        }
        Ok(info)
    }

    /// Compares the TCB extensions with a report's `reported_tcb`: every
    /// component must be present and equal (FMC only for products that have it).
    pub fn tcb_mismatches(&self, reported: &TcbVersion) -> Vec<String> {
        let mut out = Vec::new();
        let mut cmp = |name: &str, cert: Option<u8>, rep: u8| match cert {
            Some(c) if c == rep => {}
            Some(c) => out.push(format!("{name}: certificate {c}, report {rep}")),
            None => out.push(format!(
                "{name}: certificate has no extension, report {rep}"
            )),
        };
        if let Some(fmc) = reported.fmc {
            cmp("fmc", self.fmc, fmc);
        }
        cmp("bootloader", self.bootloader, reported.bootloader);
        cmp("tee", self.tee, reported.tee);
        cmp("snp", self.snp, reported.snp);
        cmp("microcode", self.microcode, reported.microcode);
        out
    }
}

fn duplicate(oid: &str) -> AttestationError {
    AttestationError::Decode(Detail::with(
        &SnpRefusal::VekCertificate,
        format!("VEK certificate: extension {oid} appears twice"),
    ))
}

/// Decodes a DER INTEGER holding 0..=255 (one byte, or two with a leading zero).
fn der_small_integer(v: &[u8]) -> Option<u8> {
    match v {
        [0x02, 0x01, b] if *b < 0x80 => Some(*b),
        [0x02, 0x02, 0x00, b] if *b >= 0x80 => Some(*b),
        _ => None,
    }
}

/// Why PEM text yields no certificates.
#[derive(Debug, thiserror::Error)]
pub enum PemError {
    /// A PEM block does not parse.
    #[error("PEM: {0}")]
    Malformed(#[source] x509_parser::error::PEMError),
    /// The text holds no `CERTIFICATE` block.
    #[error("no CERTIFICATE in the PEM text")]
    NoCertificate,
}

/// The certificates in `bytes`: every `CERTIFICATE` block of PEM text, or
/// the bytes themselves as one DER certificate.
pub fn certificates_from_pem_or_der(bytes: &[u8]) -> Result<Vec<Vec<u8>>, PemError> {
    if !bytes.trim_ascii_start().starts_with(b"-----BEGIN") {
        return Ok(vec![bytes.to_vec()]);
    }
    let mut ders = Vec::new();
    for part in x509_parser::pem::Pem::iter_from_buffer(bytes) {
        let part = part.map_err(PemError::Malformed)?;
        if part.label == "CERTIFICATE" {
            ders.push(part.contents);
        }
    }
    if ders.is_empty() {
        return Err(PemError::NoCertificate);
    }
    Ok(ders)
}

/// Why certificates are not the pinned root of a product.
#[derive(Debug, thiserror::Error)]
pub enum ProductRootError {
    /// The bundle's PEM text yields no certificates.
    #[error("{0}")]
    Pem(#[from] PemError),
    /// A certificate of the bundle is not an AMD certificate.
    #[error("{0}")]
    Certificate(#[source] AttestationError),
    /// The bundle holds more than one ARK.
    #[error("PEM bundle holds more than one ARK")]
    SeveralArks,
    /// The bundle holds no ARK.
    #[error("PEM bundle holds no ARK")]
    NoArk,
    /// The ARK is not an AMD certificate.
    #[error("ARK: {0}")]
    Ark(#[source] AttestationError),
    /// The certificate given as the ARK is of another role (its subject
    /// common name).
    #[error("certificate {0:?} is not an ARK")]
    NotAnArk(String),
    /// The ARK's signature is not its own.
    #[error("{product} ARK is not self-signed: {error}")]
    ArkNotSelfSigned {
        /// The ARK's product.
        product: Product,
        /// Why the signature does not verify.
        #[source]
        error: std::io::Error,
    },
    /// An intermediate is not an AMD certificate.
    #[error("intermediate: {0}")]
    Intermediate(#[source] AttestationError),
    /// An intermediate is neither an ASK nor an ASVK of the ARK's product.
    #[error("certificate {common_name:?} is not an ASK or ASVK of {product}")]
    NotAnIntermediate {
        /// The intermediate's subject common name.
        common_name: String,
        /// The ARK's product.
        product: Product,
    },
    /// An intermediate is not signed by the ARK.
    #[error("{product} {role} is not signed by the ARK: {error}")]
    IntermediateNotSigned {
        /// The ARK's product.
        product: Product,
        /// The intermediate's role (ASK or ASVK).
        role: CertRole,
        /// Why the signature does not verify.
        #[source]
        error: std::io::Error,
    },
}

/// The pinned root of one product: its ARK, and the ASK and ASVK it signed
/// (each optional; evidence may supply them).
#[derive(Clone, Debug)]
pub struct ProductRoot {
    /// The product.
    pub product: Product,
    ark_pinned: AmdCert,
    intermediates: Vec<AmdCert>,
}

impl ProductRoot {
    /// A root from an ARK and intermediates (ASK, ASVK), all DER. The ARK
    /// must be self-signed and each intermediate signed by it.
    pub fn new(
        ark_der: &[u8],
        intermediates_der: &[&[u8]],
    ) -> Result<ProductRoot, ProductRootError> {
        let ark = AmdCert::from_der(ark_der).map_err(ProductRootError::Ark)?;
        let product = match (ark.role(), ark.product()) {
            (CertRole::Ark, Some(p)) => p,
            _ => {
                return Err(ProductRootError::NotAnArk(ark.common_name().to_string()));
            }
        };
        ark.signs(&ark)
            .map_err(|error| ProductRootError::ArkNotSelfSigned { product, error })?;
        let mut intermediates = Vec::new();
        for der in intermediates_der {
            let cert = AmdCert::from_der(der).map_err(ProductRootError::Intermediate)?;
            if !matches!(cert.role(), CertRole::Ask | CertRole::Asvk)
                || cert.product() != Some(product)
            {
                return Err(ProductRootError::NotAnIntermediate {
                    common_name: cert.common_name().to_string(),
                    product,
                });
            }
            ark.signs(&cert)
                .map_err(|error| ProductRootError::IntermediateNotSigned {
                    product,
                    role: cert.role(),
                    error,
                })?;
            intermediates.push(cert);
        }
        Ok(ProductRoot {
            product,
            ark_pinned: ark,
            intermediates,
        })
    }

    /// A root from a PEM bundle holding the ARK and optionally the ASK and
    /// ASVK, in any order (AMD KDS's `cert_chain` and `ask_ark_asvk` files).
    pub fn from_pem_bundle(pem: &[u8]) -> Result<ProductRoot, ProductRootError> {
        let ders = certificates_from_pem_or_der(pem)?;
        let mut ark = None;
        let mut rest: Vec<&[u8]> = Vec::new();
        for der in &ders {
            let cert = AmdCert::from_der(der).map_err(ProductRootError::Certificate)?;
            if cert.role() == CertRole::Ark {
                if ark.is_some() {
                    return Err(ProductRootError::SeveralArks);
                }
                ark = Some(der.as_slice());
            } else {
                rest.push(der);
            }
        }
        let ark = ark.ok_or(ProductRootError::NoArk)?;
        ProductRoot::new(ark, &rest)
    }

    /// The pinned ARK.
    pub fn ark(&self) -> &AmdCert {
        &self.ark_pinned
    }

    /// The configured intermediates (ASK, ASVK).
    pub fn intermediates(&self) -> &[AmdCert] {
        &self.intermediates
    }
}

/// Endorsement keys (DER) that chained to a pinned ARK, oldest first.
type VerifiedVeks = Vec<(Vec<u8>, VerifiedChain)>;

/// How many endorsement keys a [`TrustRoots`] remembers as verified.
pub const VERIFIED_VEK_CACHE_LEN: usize = 64;

/// The set of pinned roots a verifier trusts.
///
/// It remembers the last [`VERIFIED_VEK_CACHE_LEN`](crate::VERIFIED_VEK_CACHE_LEN) endorsement keys (by
/// their exact DER) that chained to one of its ARKs, so that the RSA chain
/// is checked once per VCEK rather than once per handshake. Only successes
/// are remembered, and only for these roots (clones share the memory).
#[derive(Clone, Debug)]
pub struct TrustRoots {
    roots: Vec<ProductRoot>,
    verified: Arc<Mutex<VerifiedVeks>>,
}

impl TrustRoots {
    /// The ARKs and ASKs of Milan, Genoa and Turin that the `sev` crate ships
    /// (no ASVK: VLEK reports need one from configuration or evidence).
    pub fn builtin() -> TrustRoots {
        use sev::certs::snp::builtin::{genoa, milan, turin};
        let bundles: [(&[u8], &[u8]); 3] = [
            (milan::ARK, milan::ASK),
            (genoa::ARK, genoa::ASK),
            (turin::ARK, turin::ASK),
        ];
        let roots = bundles
            .iter()
            .map(|(ark, ask)| {
                let mut pem = ark.to_vec();
                pem.extend_from_slice(ask);
                ProductRoot::from_pem_bundle(&pem).expect("the sev crate's built-in roots verify")
            })
            .collect();
        TrustRoots::new(roots)
    }

    /// Exactly these roots.
    pub fn new(roots: Vec<ProductRoot>) -> TrustRoots {
        TrustRoots {
            roots,
            verified: Arc::new(Mutex::new(Vec::new())),
        }
    }

    /// The roots.
    pub fn roots(&self) -> &[ProductRoot] {
        &self.roots
    }

    /// Verifies `vek` up to a pinned ARK, trying the configured intermediates
    /// and those from evidence (which must themselves verify under the ARK).
    /// A VCEK must be signed by an ASK, a VLEK by an ASVK.
    pub fn verify_vek(
        &self,
        vek: &AmdCert,
        evidence_intermediates: &[AmdCert],
    ) -> Result<VerifiedChain, AttestationError> {
        let wanted = match vek.role() {
            CertRole::Vcek => CertRole::Ask,
            CertRole::Vlek => CertRole::Asvk,
            other => {
                return Err(AttestationError::Trust(Detail::with(
                    &SnpRefusal::ChainRole,
                    format!("the report's signing certificate is an {other}, not a VCEK or VLEK"),
                )));
            }
        };
        if let Some(hit) = self.remembered(vek.der()) {
            return Ok(hit);
        }
        let mut tried = Vec::new();
        for root in &self.roots {
            // Configured intermediates were verified under the ARK when the
            // root was built; those from evidence are verified here.
            let configured = root.intermediates.iter().map(|c| (c, true));
            let sent = evidence_intermediates
                .iter()
                .filter(|c| c.product() == Some(root.product))
                .map(|c| (c, false));
            for (inter, verified) in configured.chain(sent).filter(|(c, _)| c.role() == wanted) {
                tried.push(format!("{} {wanted}", root.product));
                // A cheap pre-filter before the RSA checks: the issuer must be named.
                if vek.issuer_common_name() != inter.common_name() {
                    continue;
                }
                if !verified && root.ark_pinned.signs(inter).is_err() {
                    continue;
                }
                if inter.signs(vek).is_ok() {
                    let windows = [vek.validity(), inter.validity(), root.ark_pinned.validity()];
                    let chain = VerifiedChain {
                        product: root.product,
                        vek_role: vek.role(),
                        not_before: windows.iter().map(|w| w.0).max().unwrap_or(i64::MAX),
                        not_after: windows.iter().map(|w| w.1).min().unwrap_or(i64::MIN),
                    };
                    self.remember(vek.der(), chain);
                    return Ok(chain);
                }
            }
        }
        let products: Vec<&str> = self.roots.iter().map(|r| r.product.name()).collect();
        if tried.is_empty() {
            return Err(AttestationError::Trust(Detail::with(
                &SnpRefusal::ChainIntermediate,
                format!(
                    "no {wanted} to verify the {} under the pinned ARKs ({}): configure one or send it in the evidence",
                    vek.role(),
                    products.join(", ")
                ),
            )));
        }
        tried.dedup();
        Err(AttestationError::Trust(Detail::with(
            &SnpRefusal::Chain,
            format!(
                "the {} does not chain to a pinned ARK (tried {})",
                vek.role(),
                tried.join(", ")
            ),
        )))
    }
}

impl TrustRoots {
    fn remembered(&self, vek_der: &[u8]) -> Option<VerifiedChain> {
        let cache = self.verified.lock().ok()?;
        cache.iter().find(|(d, _)| d == vek_der).map(|(_, c)| *c)
    }

    fn remember(&self, vek_der: &[u8], chain: VerifiedChain) {
        if let Ok(mut cache) = self.verified.lock() {
            if cache.len() >= VERIFIED_VEK_CACHE_LEN {
                cache.remove(0);
            }
            cache.push((vek_der.to_vec(), chain));
        }
    }
}

/// The outcome of a verified chain.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct VerifiedChain {
    /// The product whose ARK anchors the chain.
    pub product: Product,
    /// VCEK or VLEK.
    pub vek_role: CertRole,
    /// When the chain becomes valid: the latest `notBefore` of its three
    /// certificates (Unix seconds).
    pub not_before: i64,
    /// When the chain expires: the earliest `notAfter` of its three
    /// certificates (Unix seconds).
    pub not_after: i64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_integers() {
        assert_eq!(der_small_integer(&[2, 1, 0x73]), Some(0x73));
        assert_eq!(der_small_integer(&[2, 2, 0, 0xd9]), Some(0xd9));
        assert_eq!(der_small_integer(&[2, 2, 0, 0x10]), None);
        assert_eq!(der_small_integer(&[2, 1, 0x80]), None);
        assert_eq!(der_small_integer(&[4, 1, 1]), None);
        assert_eq!(der_small_integer(&[]), None);
    }

    #[test]
    fn roles_from_names() {
        assert_eq!(
            CertRole::from_common_name("SEV-VLEK-Milan"),
            Some((CertRole::Asvk, Some(Product::Milan)))
        );
        assert_eq!(
            CertRole::from_common_name("ARK-Genoa"),
            Some((CertRole::Ark, Some(Product::Genoa)))
        );
        assert_eq!(
            CertRole::from_common_name("SEV-Turin"),
            Some((CertRole::Ask, Some(Product::Turin)))
        );
        assert_eq!(
            CertRole::from_common_name("SEV-VCEK"),
            Some((CertRole::Vcek, None))
        );
        assert_eq!(CertRole::from_common_name("SEV-Zen9"), None);
    }

    #[test]
    fn builtin_roots_load() {
        let roots = TrustRoots::builtin();
        let products: Vec<Product> = roots.roots().iter().map(|r| r.product).collect();
        assert_eq!(products, Product::ALL);
    }
}
