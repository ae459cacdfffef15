//! The AMD SEV-SNP variant ([`Variant::SevSnp`], aTLS OID 1.3.9900.5.3):
//! a bare attestation report from `/dev/sev-guest` whose `REPORT_DATA` is
//! `extra_data` zero-padded to 64 bytes, plus the extended report's
//! certificate table when the host provides one.
//!
//! - [`SnpIssuer`] asks an [`SnpDevice`] (in a guest: [`SevGuestDevice`])
//!   for a report and encodes [`SnpEvidence`] (prost `confboot.snp.Evidence`).
//! - [`SnpValidator`] checks, failing closed: VCEK → ASK → ARK (or VLEK →
//!   ASVK → ARK) with the ARK pinned ([`TrustRoots`]: the `sev` crate's
//!   Milan/Genoa/Turin roots unless configured); every certificate of the
//!   chain inside its validity window (now, or [`SnpValidator::as_of`]);
//!   the report signature over
//!   its raw signed bytes; the report version; `KEY_INFO` against the key
//!   kind; CPUID against the chain's product; the VCEK's hwID against the
//!   chip id (unless masked); the VEK's TCB extensions against
//!   `REPORTED_TCB`; the `REPORT_DATA` binding; the DEBUG bit; the VMPL;
//!   reported and launch TCB against the minimums; the measurement; and
//!   optionally `HOST_DATA` and `ID_KEY_DIGEST` ([`SnpPolicy`]).
//! - [`SnpValidator::verify_report_detailed`] returns every check with its
//!   outcome, for `confboot verify-report`.
//!
//! Verification needs no network: the VCEK comes from the evidence, else
//! from a cache directory ([`vcek_cache_path`]); fetching it from AMD's KDS
//! is opt-in (cargo feature `kds` and policy `kdsFetch`; [`kds_vcek_url`]
//! names the address either way). Revocation lists are not consulted (AMD
//! publishes one per product for ASKs/ASVKs; an offline validator would
//! need it configured).

mod certs;
mod evidence;
#[cfg(feature = "kds")]
mod kds;
mod policy;
mod report;
mod vek_lookup;
mod verify;

use std::sync::Mutex;

pub use certs::{
    AmdCert, CertRole, OID_HW_ID, OID_PRODUCT_NAME, OID_TCB_BOOTLOADER, OID_TCB_FMC,
    OID_TCB_MICROCODE, OID_TCB_SNP, OID_TCB_TEE, ProductRoot, TrustRoots, VERIFIED_VEK_CACHE_LEN,
    VekInfo, VerifiedChain, certificates_from_pem_or_der,
};
pub use evidence::{
    CertEntry, CertKind, MAX_CERTIFICATE_LEN, MAX_CERTIFICATES, MAX_EVIDENCE_LEN, SnpEvidence,
};
#[cfg(feature = "kds")]
pub use kds::{KDS_TIMEOUT, fetch_certificate};
pub use policy::{MinimumTcb, SnpPolicy};
pub use report::{Product, REPORT_LEN, SIGNED_LEN, SigningKey, SnpReport, TcbVersion, offset};
pub use vek_lookup::{KDS_BASE_URL, kds_vcek_url, vcek_cache_path};
pub use verify::{
    CheckOutcome, CheckResult, ReportDataCheck, check, first_failure, run_checks, verify_signature,
};

use super::{AttestationError, Attested, EXTRA_DATA_LEN, Issuer, PolicyError, Validator, Variant};

/// Access to the SNP guest device: a report for given `REPORT_DATA` at a
/// VMPL, with the host's certificate table when it provides one.
pub trait SnpDevice: Send + Sync {
    /// Requests a report. Returns the raw report and the certificate table
    /// (empty when the host provides none).
    fn report(
        &self,
        report_data: [u8; 64],
        vmpl: u32,
    ) -> Result<(Vec<u8>, Vec<CertEntry>), AttestationError>;
}

/// `/dev/sev-guest` through the `sev` crate's guest firmware API.
#[derive(Debug)]
pub struct SevGuestDevice {
    firmware: Mutex<sev::firmware::guest::Firmware>,
}

impl SevGuestDevice {
    /// Opens `/dev/sev-guest`.
    pub fn open() -> Result<SevGuestDevice, AttestationError> {
        let firmware = sev::firmware::guest::Firmware::open()
            .map_err(|e| AttestationError::Issue(format!("cannot open /dev/sev-guest: {e}")))?;
        Ok(SevGuestDevice {
            firmware: Mutex::new(firmware),
        })
    }
}

impl SnpDevice for SevGuestDevice {
    fn report(
        &self,
        report_data: [u8; 64],
        vmpl: u32,
    ) -> Result<(Vec<u8>, Vec<CertEntry>), AttestationError> {
        use sev::firmware::host::CertType;
        let mut fw = self
            .firmware
            .lock()
            .map_err(|_| AttestationError::Issue("SNP device lock poisoned".into()))?;
        // The extended report carries the host's certificate table; a host
        // without one (or an old kernel) fails it, then the plain report serves.
        match fw.get_ext_report(None, Some(report_data), Some(vmpl)) {
            Ok((report, table)) => {
                let certs = table
                    .unwrap_or_default()
                    .into_iter()
                    .filter_map(|entry| {
                        let kind = match entry.cert_type {
                            CertType::VCEK => CertKind::Vcek,
                            CertType::VLEK => CertKind::Vlek,
                            CertType::ASK => CertKind::Ask,
                            CertType::ARK => CertKind::Ark,
                            _ => return None,
                        };
                        Some(CertEntry {
                            kind,
                            der: entry.data,
                        })
                    })
                    .collect();
                Ok((report, certs))
            }
            Err(ext_err) => {
                log::debug!("SNP extended report failed ({ext_err}); asking for a plain report");
                let report = fw
                    .get_report(None, Some(report_data), Some(vmpl))
                    .map_err(|e| AttestationError::Issue(format!("SNP_GET_REPORT: {e}")))?;
                Ok((report, Vec::new()))
            }
        }
    }
}

/// Issues `sev-snp` evidence from an [`SnpDevice`].
pub struct SnpIssuer<D: SnpDevice> {
    device: D,
    vmpl: u32,
}

impl<D: SnpDevice> SnpIssuer<D> {
    /// An issuer asking `device` for reports at `vmpl` (a guest's kernel
    /// usually runs at VMPL 0).
    pub fn new(device: D, vmpl: u32) -> Self {
        SnpIssuer { device, vmpl }
    }
}

impl SnpIssuer<SevGuestDevice> {
    /// An issuer on `/dev/sev-guest` at VMPL 0.
    pub fn open_default() -> Result<Self, AttestationError> {
        Ok(SnpIssuer::new(SevGuestDevice::open()?, 0))
    }
}

impl<D: SnpDevice> Issuer for SnpIssuer<D> {
    fn variant(&self) -> Variant {
        Variant::SevSnp
    }

    fn issue(&self, extra_data: &[u8; EXTRA_DATA_LEN]) -> Result<Vec<u8>, AttestationError> {
        let mut report_data = [0u8; 64];
        report_data[..EXTRA_DATA_LEN].copy_from_slice(extra_data);
        let (raw, certificates) = self.device.report(report_data, self.vmpl)?;
        let report = SnpReport::from_bytes(&raw)
            .map_err(|e| AttestationError::Issue(format!("the SNP device answered: {e}")))?;
        if report.report_data() != report_data.as_slice() {
            return Err(AttestationError::Issue(
                "the SNP device returned a report for other report data".into(),
            ));
        }
        SnpEvidence {
            report,
            certificates,
        }
        .encode()
    }
}

/// Validates `sev-snp` evidence against a policy and pinned roots.
#[derive(Clone, Debug)]
pub struct SnpValidator {
    policy: SnpPolicy,
    roots: TrustRoots,
    /// Validate as of this time (Unix seconds) instead of now.
    as_of: Option<i64>,
}

impl SnpValidator {
    /// A validator for `policy`, with the roots it names (its
    /// `rootBundles`), else the built-in roots.
    pub fn new(policy: SnpPolicy) -> Result<SnpValidator, PolicyError> {
        let roots = if policy.root_bundles.is_empty() {
            TrustRoots::builtin()
        } else {
            let mut roots = Vec::new();
            for path in &policy.root_bundles {
                let pem = std::fs::read(path).map_err(PolicyError::Io)?;
                roots.push(ProductRoot::from_pem_bundle(&pem).map_err(|e| {
                    PolicyError::Format(format!("root bundle {}: {e}", path.display()))
                })?);
            }
            TrustRoots::new(roots)
        };
        Ok(SnpValidator {
            policy,
            roots,
            as_of: None,
        })
    }

    /// A validator with explicit roots (the policy's `rootBundles` are ignored).
    pub fn with_roots(policy: SnpPolicy, roots: TrustRoots) -> SnpValidator {
        SnpValidator {
            policy,
            roots,
            as_of: None,
        }
    }

    /// Checks certificate validity as of `unix_secs` instead of the current
    /// time (to examine an old report; tests).
    pub fn as_of(mut self, unix_secs: i64) -> SnpValidator {
        self.as_of = Some(unix_secs);
        self
    }

    fn now(&self) -> i64 {
        self.as_of.unwrap_or_else(crate::time::unix_now)
    }

    /// The policy in force.
    pub fn policy(&self) -> &SnpPolicy {
        &self.policy
    }

    /// The pinned roots.
    pub fn roots(&self) -> &TrustRoots {
        &self.roots
    }

    /// Every check with its outcome (see [`run_checks`]); nothing is
    /// short-circuited, so an operator sees all that is wrong.
    pub fn verify_report_detailed(
        &self,
        evidence: &SnpEvidence,
        report_data: &ReportDataCheck,
    ) -> Vec<CheckResult> {
        run_checks(evidence, report_data, &self.policy, &self.roots, self.now())
    }

    /// Verifies decoded evidence: every check must pass (a skipped check fails).
    pub fn verify(
        &self,
        evidence: &SnpEvidence,
        report_data: &ReportDataCheck,
    ) -> Result<Attested, AttestationError> {
        verify::verify(evidence, report_data, &self.policy, &self.roots, self.now())
    }
}

impl Validator for SnpValidator {
    fn variant(&self) -> Variant {
        Variant::SevSnp
    }

    fn validate(
        &self,
        evidence: &[u8],
        extra_data: &[u8; EXTRA_DATA_LEN],
    ) -> Result<Attested, AttestationError> {
        let evidence = SnpEvidence::decode(evidence)?;
        let attested = self.verify(&evidence, &ReportDataCheck::ExtraData(*extra_data))?;
        log::debug!(
            "SEV-SNP evidence verified: measurement {}",
            crate::hex::encode(evidence.report.measurement())
        );
        Ok(attested)
    }
}
