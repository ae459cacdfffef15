//! The vTPM variant (`qemu-vtpm`): a TPM2_Quote over the SHA-256 PCRs with
//! an attestation key (AK), qualifying data = the 32-byte `extra_data`.
//!
//! - [`VtpmIssuer`] holds one TPM connection (in a `Mutex`), the AK (loaded
//!   from a persistent handle, default 0x81000003, or created in the owner
//!   hierarchy) and the AK certificate from NV 0x01C101D0 when present.
//! - [`VtpmValidator`] needs no TPM: it decodes the evidence with every length
//!   checked, parses `TPMS_ATTEST`, verifies the ECDSA signature with the AK,
//!   the qualifying data, the PCR digest, then trust in the AK ([`AkTrust`]),
//!   that PCR 15 is unmarked (by default), and the measurement policy.
//!
//! ```no_run
//! use std::collections::BTreeMap;
//! use confboot::attestation::{Issuer, Validator, MeasurementPolicy};
//! use confboot::attestation::vtpm::{AkTrust, VtpmIssuer, VtpmValidator};
//! let issuer = VtpmIssuer::new(confboot::tpm::Tpm::open_device()?)?;
//! let validator = VtpmValidator::new(
//!     AkTrust::Pinned(vec![issuer.ak_public_key().to_vec()]),
//!     MeasurementPolicy::new(BTreeMap::new()),
//! );
//! let evidence = issuer.issue(&[7; 32])?;
//! let attested = validator.validate(&evidence, &[7; 32])?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::{Mutex, MutexGuard};

use confboot_proto::Message as _;
use confboot_proto::vtpm::{PcrValue, QuoteEvidence};
use x509_parser::prelude::{FromDer as _, X509Certificate};

use super::{
    AttestationError, Attested, EXTRA_DATA_LEN, Issuer, MeasurementPolicy, Validator, Variant,
};
use crate::hex;
use crate::tpm::structures::{
    self, MAX_ATTEST_LEN, MAX_PUBLIC_LEN, MAX_SIGNATURE_LEN, PCR_COUNT, SHA256_LEN, TPM_ALG_SHA256,
};
use crate::tpm::{self, AK_CERT_NV_INDEX, AttestationKey, CLUSTER_ID_PCR, DEFAULT_AK_HANDLE, Tpm};

/// Largest encoded evidence accepted (a quote over 24 PCRs with an AK
/// certificate is about 2.5 KiB).
pub const MAX_EVIDENCE_LEN: usize = 16 * 1024;
/// Largest AK certificate accepted (DER).
pub const MAX_AK_CERT_LEN: usize = 8 * 1024;
/// How often [`VtpmIssuer::issue`] retries when a PCR changed between the
/// quote and the PCR read.
pub const ISSUE_ATTEMPTS: usize = 3;

/// The PCRs the vTPM variant quotes: all 24 of the SHA-256 bank.
pub fn quoted_pcrs() -> Vec<u32> {
    (0..PCR_COUNT as u32).collect()
}

fn issue_err(e: tpm::TpmError) -> AttestationError {
    AttestationError::Issue(e.to_string())
}

/// PCR values by index, as [`Tpm::pcr_read`] returns them.
type PcrValues = Vec<(u32, [u8; 32])>;

/// Produces vTPM evidence with one persistent TPM connection.
pub struct VtpmIssuer {
    tpm: Mutex<Tpm>,
    ak: AttestationKey,
    ak_certificate: Option<Vec<u8>>,
    pcr_indices: Vec<u32>,
    /// The PCR values of the last quote: reused while a new quote's PCR
    /// digest still matches them, so a quote usually needs no PCR read.
    last_pcr_values: Mutex<Option<PcrValues>>,
}

impl VtpmIssuer {
    /// Loads the AK from [`DEFAULT_AK_HANDLE`] (or creates one in the owner
    /// hierarchy) and reads the AK certificate from NV, if provisioned.
    pub fn new(tpm: Tpm) -> Result<Self, AttestationError> {
        Self::with_ak_handle(tpm, DEFAULT_AK_HANDLE)
    }

    /// Like [`VtpmIssuer::new`] with another persistent AK handle.
    pub fn with_ak_handle(mut tpm: Tpm, ak_handle: u32) -> Result<Self, AttestationError> {
        let ak = tpm.load_or_create_ak(ak_handle).map_err(issue_err)?;
        let ak_certificate = match tpm.nv_read(AK_CERT_NV_INDEX) {
            Ok(der) => Some(der),
            Err(e) if e.is_handle_missing() => None,
            Err(e) => {
                log::warn!("cannot read the AK certificate at NV {AK_CERT_NV_INDEX:#010x}: {e}");
                None
            }
        };
        log::info!(
            "vTPM issuer on {}: AK at {:#010x} ({}), AK certificate {}",
            tpm.describe(),
            ak.handle,
            if ak.transient {
                "created"
            } else {
                "persistent"
            },
            if ak_certificate.is_some() {
                "present"
            } else {
                "absent"
            }
        );
        Ok(VtpmIssuer {
            tpm: Mutex::new(tpm),
            ak,
            ak_certificate,
            pcr_indices: quoted_pcrs(),
            last_pcr_values: Mutex::new(None),
        })
    }

    /// The AK's public area (`TPMT_PUBLIC` bytes).
    pub fn ak_public(&self) -> &[u8] {
        &self.ak.public_area
    }

    /// The AK's public key as a SEC1 uncompressed P-256 point (65 bytes), the
    /// form [`AkTrust::Pinned`] takes.
    pub fn ak_public_key(&self) -> Vec<u8> {
        structures::parse_ecc_public(&self.ak.public_area)
            .map(|p| p.point)
            .expect("the AK's public area was checked when it was loaded")
    }

    /// The AK certificate read from NV, if any.
    pub fn ak_certificate(&self) -> Option<&[u8]> {
        self.ak_certificate.as_deref()
    }

    fn lock(&self) -> MutexGuard<'_, Tpm> {
        self.tpm.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Runs `f` with the issuer's TPM connection (e.g. to read PCRs).
    pub fn with_tpm<T>(&self, f: impl FnOnce(&mut Tpm) -> T) -> T {
        f(&mut self.lock())
    }

    /// Marks this node as bootstrapped: extends PCR 15 with the cluster id
    /// (see [`tpm::mark_node`]). Validators that require an unmarked node
    /// refuse every quote afterwards.
    pub fn mark_node(&self, cluster_id: &[u8]) -> Result<(), AttestationError> {
        tpm::mark_node(&mut self.lock(), cluster_id).map_err(issue_err)
    }
}

impl Drop for VtpmIssuer {
    fn drop(&mut self) {
        if self.ak.transient {
            let handle = self.ak.handle;
            if let Err(e) = self.lock().flush(handle) {
                log::debug!("flushing the transient AK {handle:#010x}: {e}");
            }
        }
    }
}

/// Builds the encoded evidence from a quote and what goes with it.
pub fn encode_evidence(
    quote: &tpm::Quote,
    pcr_values: &[(u32, [u8; 32])],
    ak_public: &[u8],
    ak_certificate: Option<&[u8]>,
) -> Vec<u8> {
    QuoteEvidence {
        attest: quote.attest.clone(),
        signature: quote.signature.clone(),
        pcrs: pcr_values
            .iter()
            .map(|(index, digest)| PcrValue {
                index: *index,
                digest: digest.to_vec(),
            })
            .collect(),
        ak_public: ak_public.to_vec(),
        ak_certificate: ak_certificate.map(<[u8]>::to_vec).unwrap_or_default(),
    }
    .encode_to_vec()
}

impl Issuer for VtpmIssuer {
    fn variant(&self) -> Variant {
        Variant::QemuVtpm
    }

    fn issue(&self, extra_data: &[u8; EXTRA_DATA_LEN]) -> Result<Vec<u8>, AttestationError> {
        let mut tpm = self.lock();
        for attempt in 1..=ISSUE_ATTEMPTS {
            let quote = tpm
                .quote(&self.ak, extra_data, &self.pcr_indices)
                .map_err(issue_err)?;
            let info = structures::parse_quote_attest(&quote.attest)
                .map_err(|e| AttestationError::Issue(e.0))?;
            let digest_of =
                |values: &[(u32, [u8; 32])]| tpm::pcr_digest(values.iter().map(|(_, v)| &v[..]));
            let mut last = self
                .last_pcr_values
                .lock()
                .unwrap_or_else(|p| p.into_inner());
            // The evidence's PCR values must hash to the quoted digest: the
            // cached ones are used only when they do, else the PCRs are read.
            let pcr_values = match last.take() {
                Some(cached) if info.pcr_digest == digest_of(&cached) => cached,
                _ => tpm.pcr_read(&self.pcr_indices).map_err(issue_err)?,
            };
            let digest = digest_of(&pcr_values);
            *last = Some(pcr_values.clone());
            drop(last);
            if info.pcr_digest == digest {
                log::debug!("issued a vTPM quote over {} PCRs", pcr_values.len());
                return Ok(encode_evidence(
                    &quote,
                    &pcr_values,
                    &self.ak.public_area,
                    self.ak_certificate.as_deref(),
                ));
            }
            log::warn!(
                "a PCR changed between quote and PCR read (attempt {attempt}); quoting again"
            );
        }
        Err(AttestationError::Issue(format!(
            "PCRs kept changing during {ISSUE_ATTEMPTS} quote attempts"
        )))
    }
}

/// Which attestation keys a [`VtpmValidator`] trusts.
#[derive(Clone, Debug)]
pub enum AkTrust {
    /// AKs with a certificate (carried in the evidence) signed directly by one
    /// of these CA certificates (DER), whose key is the AK. See
    /// [`load_ca_certificates`].
    CertificateRoots(Vec<Vec<u8>>),
    /// AKs whose public key (SEC1 uncompressed P-256 point, 65 bytes; see
    /// [`VtpmIssuer::ak_public_key`]) is in this list.
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

/// Checks vTPM evidence without a TPM. Built from AK trust and a measurement
/// policy; by default it requires PCR 15 to be all-zero (the node is not
/// yet bootstrapped), which is right for join.
#[derive(Clone, Debug)]
pub struct VtpmValidator {
    ak_trust: AkTrust,
    policy: MeasurementPolicy,
    require_unmarked: bool,
}

/// The decoded, size-checked evidence.
struct Decoded {
    attest: Vec<u8>,
    signature: Vec<u8>,
    pcr_values: Vec<(u32, Vec<u8>)>,
    ak_public: Vec<u8>,
    ak_certificate: Vec<u8>,
}

fn decode_err(m: impl Into<String>) -> AttestationError {
    AttestationError::Decode(m.into())
}

fn check_len(field: &str, bytes: &[u8], max: usize) -> Result<(), AttestationError> {
    if bytes.is_empty() {
        return Err(decode_err(format!("{field} is missing")));
    }
    if bytes.len() > max {
        return Err(decode_err(format!(
            "{field} has {} bytes, at most {max} allowed",
            bytes.len()
        )));
    }
    Ok(())
}

/// Decodes evidence and checks every count and field size before use.
fn decode_evidence(evidence: &[u8]) -> Result<Decoded, AttestationError> {
    if evidence.len() > MAX_EVIDENCE_LEN {
        return Err(decode_err(format!(
            "evidence has {} bytes, at most {MAX_EVIDENCE_LEN} allowed",
            evidence.len()
        )));
    }
    let e = QuoteEvidence::decode(evidence)
        .map_err(|e| decode_err(format!("not a vTPM QuoteEvidence message: {e}")))?;
    check_len("quote (TPMS_ATTEST)", &e.attest, MAX_ATTEST_LEN)?;
    check_len("quote signature", &e.signature, MAX_SIGNATURE_LEN)?;
    check_len("AK public area", &e.ak_public, MAX_PUBLIC_LEN)?;
    if e.ak_certificate.len() > MAX_AK_CERT_LEN {
        return Err(decode_err(format!(
            "AK certificate has {} bytes, at most {MAX_AK_CERT_LEN} allowed",
            e.ak_certificate.len()
        )));
    }
    if e.pcrs.is_empty() || e.pcrs.len() > PCR_COUNT {
        return Err(decode_err(format!(
            "evidence carries {} PCR values, want 1 to {PCR_COUNT}",
            e.pcrs.len()
        )));
    }
    let mut pcr_values = Vec::with_capacity(e.pcrs.len());
    for p in e.pcrs {
        if p.index as usize >= PCR_COUNT {
            return Err(decode_err(format!("PCR index {} out of range", p.index)));
        }
        if let Some((last, _)) = pcr_values.last()
            && *last >= p.index
        {
            return Err(decode_err(format!(
                "PCR {} follows PCR {last}: values must be ascending and unique",
                p.index
            )));
        }
        if p.digest.len() != SHA256_LEN {
            return Err(decode_err(format!(
                "PCR {} value has {} bytes, want {SHA256_LEN}",
                p.index,
                p.digest.len()
            )));
        }
        pcr_values.push((p.index, p.digest));
    }
    Ok(Decoded {
        attest: e.attest,
        signature: e.signature,
        pcr_values,
        ak_public: e.ak_public,
        ak_certificate: e.ak_certificate,
    })
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

impl VtpmValidator {
    /// A validator with this AK trust and policy that requires PCR 15 to be
    /// all-zero (join-time default).
    pub fn new(ak_trust: AkTrust, policy: MeasurementPolicy) -> Self {
        VtpmValidator {
            ak_trust,
            policy,
            require_unmarked: true,
        }
    }

    /// Whether PCR 15 must be all-zero (unmarked node). Turn it off to verify
    /// nodes that are already bootstrapped (the CLI's `verify`).
    pub fn require_unmarked(mut self, required: bool) -> Self {
        self.require_unmarked = required;
        self
    }

    /// The measurement policy.
    pub fn policy(&self) -> &MeasurementPolicy {
        &self.policy
    }

    /// The AK trust.
    pub fn ak_trust(&self) -> &AkTrust {
        &self.ak_trust
    }

    /// Checks that the AK is trusted under [`AkTrust`].
    fn check_ak_trust(
        &self,
        ak_point: &[u8],
        ak_certificate: &[u8],
    ) -> Result<(), AttestationError> {
        let trust = |m: String| AttestationError::Trust(m);
        match &self.ak_trust {
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
                    .map_err(|e| decode_err(format!("AK certificate: {e}")))?;
                if !rest.is_empty() {
                    return Err(decode_err(format!(
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

impl Validator for VtpmValidator {
    fn variant(&self) -> Variant {
        Variant::QemuVtpm
    }

    fn validate(
        &self,
        evidence: &[u8],
        extra_data: &[u8; EXTRA_DATA_LEN],
    ) -> Result<Attested, AttestationError> {
        let e = decode_evidence(evidence)?;
        let info = structures::parse_quote_attest(&e.attest).map_err(|p| decode_err(p.0))?;
        let ak = structures::parse_ecc_public(&e.ak_public)
            .map_err(|p| decode_err(format!("AK public area: {}", p.0)))?;
        let signature =
            structures::parse_ecdsa_signature(&e.signature).map_err(|p| decode_err(p.0))?;

        // 1. The AK signed exactly these TPMS_ATTEST bytes.
        if signature.hash_alg != TPM_ALG_SHA256 {
            return Err(AttestationError::Signature(format!(
                "quote signed with hash {:#06x}, want SHA-256",
                signature.hash_alg
            )));
        }
        ring::signature::UnparsedPublicKey::new(
            &ring::signature::ECDSA_P256_SHA256_FIXED,
            &ak.point,
        )
        .verify(&e.attest, &signature.r_s)
        .map_err(|_| {
            AttestationError::Signature(
                "the quote's ECDSA signature does not verify with the AK in the evidence".into(),
            )
        })?;

        // 2. Bound to this handshake.
        if info.extra_data.as_slice() != extra_data.as_slice() {
            return Err(AttestationError::Binding(format!(
                "quote qualifying data {} differs from the expected extra_data {}",
                hex::encode(&info.extra_data),
                hex::encode(extra_data)
            )));
        }

        // 3. The PCR values are the quoted ones.
        let carried: Vec<u32> = e.pcr_values.iter().map(|(i, _)| *i).collect();
        match info.pcr_selections.as_slice() {
            [sel] if sel.hash_alg == TPM_ALG_SHA256 && sel.pcr_indices == carried => {}
            other => {
                return Err(AttestationError::Signature(format!(
                    "the quote covers {other:?}, but the evidence carries SHA-256 PCRs {carried:?}"
                )));
            }
        }
        let digest = tpm::pcr_digest(e.pcr_values.iter().map(|(_, v)| v.as_slice()));
        if info.pcr_digest.as_slice() != digest.as_slice() {
            return Err(AttestationError::Signature(format!(
                "the PCR values do not match the quoted PCR digest: quoted {}, computed {}",
                hex::encode(&info.pcr_digest),
                hex::encode(&digest)
            )));
        }

        // 4. The AK is a real AK and trusted.
        let required = structures::object_attributes::REQUIRED_FOR_AK;
        if ak.object_attributes & required != required {
            return Err(AttestationError::Trust(format!(
                "the AK's attributes {:#010x} lack {required:#010x} (restricted signing key created in the TPM)",
                ak.object_attributes
            )));
        }
        self.check_ak_trust(&ak.point, &e.ak_certificate)?;

        let measurements: BTreeMap<u32, Vec<u8>> = e.pcr_values.into_iter().collect();

        // 5. Not yet bootstrapped.
        if self.require_unmarked {
            let zero = [0u8; SHA256_LEN];
            match measurements.get(&CLUSTER_ID_PCR) {
                Some(v) if v.as_slice() == zero => {}
                Some(v) => {
                    return Err(AttestationError::Policy(format!(
                        "PCR {CLUSTER_ID_PCR} is {}, not all-zero: the node is already bootstrapped (marked with a cluster id)",
                        hex::encode(v)
                    )));
                }
                None => {
                    return Err(AttestationError::Policy(format!(
                        "PCR {CLUSTER_ID_PCR} is not quoted; it must be, and all-zero, for an unbootstrapped node"
                    )));
                }
            }
        }

        // 6. The measurement policy.
        self.policy.check(&measurements)?;
        Ok(Attested {
            variant: Variant::QemuVtpm,
            measurements,
        })
    }
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
/// P-256 point, see [`VtpmIssuer::ak_public_key`]) signed by `ca`, as a
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
