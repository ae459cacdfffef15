//! The AMD SEV-SNP variant ([`Variant::SevSnp`], aTLS OID 1.3.9900.5.3):
//! a bare attestation report whose `REPORT_DATA` is `extra_data`
//! zero-padded to 64 bytes, plus the extended report's certificate table
//! when the host provides one.
//!
//! - [`SnpIssuer`] asks an [`SnpReportSource`] (in a guest: the kernel's
//!   configfs-tsm, [`ConfigfsTsmSource`]; why not `/dev/sev-guest`: see
//!   `issuer.rs`) for a report and the host's certificate table
//!   ([`cert_table`]), and encodes [`SnpEvidence`] (prost
//!   `confboot.snp.Evidence`).
//! - [`SnpValidator`] checks, failing closed: VCEK → ASK → ARK (or VLEK →
//!   ASVK → ARK) with the ARK pinned ([`TrustRoots`]: the `sev` crate's
//!   Milan/Genoa/Turin roots unless configured); every certificate of the
//!   chain inside its validity window (now, or [`SnpValidator::as_of`]);
//!   the report signature over
//!   its raw signed bytes; the report version; `KEY_INFO` against the key
//!   kind, and that kind against those the policy accepts (`signingKeys`:
//!   VCEK by default, VLEK for AWS); CPUID against the chain's product; the VCEK's hwID against the
//!   chip id (unless masked); the VEK's TCB extensions against
//!   `REPORTED_TCB`; the `REPORT_DATA` binding; the DEBUG bit; the VMPL;
//!   reported and launch TCB against the minimums; the measurement; and
//!   optionally `HOST_DATA`, `ID_KEY_DIGEST` and the chip id against the
//!   chips the policy allows ([`SnpPolicy`]).
//! - [`SnpValidator::verify_report_detailed`] returns every check with its
//!   outcome, for `confboot verify-report`.
//!
//! Verification needs no network: the VCEK comes from the evidence, else
//! from a cache directory ([`vcek_cache_path`]); fetching it from AMD's KDS
//! is opt-in (cargo feature `kds` and policy `kdsFetch`; [`kds_vcek_url`]
//! names the address either way). Revocation lists are not consulted (AMD
//! publishes one per product for ASKs/ASVKs; an offline validator would
//! need it configured).

pub mod cert_table;
mod certs;
mod evidence;
mod issuer;
#[cfg(feature = "kds")]
mod kds;
mod policy;
mod refusal;
mod report;
mod vek_lookup;
mod verify;

pub use certs::{
    AmdCert, CertRole, OID_HW_ID, OID_PRODUCT_NAME, OID_TCB_BOOTLOADER, OID_TCB_FMC,
    OID_TCB_MICROCODE, OID_TCB_SNP, OID_TCB_TEE, PemError, ProductRoot, ProductRootError,
    TrustRoots, VERIFIED_VEK_CACHE_LEN, VekInfo, VerifiedChain, certificates_from_pem_or_der,
};
pub use evidence::{
    CertEntry, CertKind, MAX_CERTIFICATE_LEN, MAX_CERTIFICATES, MAX_EVIDENCE_LEN, SnpEvidence,
};
pub use issuer::{ConfigfsTsmSource, RawReport, SnpIssuer, SnpReportSource, TSM_REPORT_DIR};
#[cfg(feature = "kds")]
pub use kds::{KDS_TIMEOUT, fetch_certificate};
pub use policy::{
    CHIP_ID_LEN, KernelHashes, MAX_ALLOWED_CHIP_IDS, MinimumTcb, SnpLaunch, SnpPolicy,
};
pub use refusal::SnpRefusal;
pub use report::{Product, REPORT_LEN, SIGNED_LEN, SigningKey, SnpReport, TcbVersion, offset};
pub use vek_lookup::{KDS_BASE_URL, kds_vcek_url, vcek_cache_path};
/// The index under which [`SnpValidator`] passes on the identity of the
/// launch that made a verified report, in [`confboot_attest::Attested::measurements`]
/// beside the launch measurement (index 0): `CHIP_ID` (64 bytes, zero when
/// masked) followed by `REPORT_ID` (32 bytes). The firmware draws
/// `REPORT_ID` once when it launches a guest and puts it in every report of
/// that launch; a new launch of the same image on the same chip has another.
/// It is an identity, not a measurement: no policy compares it, and a
/// service that must remember what each launch was given keys on it.
pub const LAUNCH_IDENTITY_INDEX: u32 = 0x8000_0000;

/// The length of the launch identity: `CHIP_ID` and `REPORT_ID`.
pub const LAUNCH_IDENTITY_LEN: usize = 64 + 32;

pub use verify::{check, run_checks, verify_signature};

use confboot_attest::check::{CheckResult, ReportDataCheck};
use confboot_attest::{
    AttestationError, Attested, EXTRA_DATA_LEN, PolicyError, Validator, Variant,
};

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
        self.as_of.unwrap_or_else(confboot_util::time::unix_now)
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
            confboot_util::hex::encode(evidence.report.measurement())
        );
        Ok(attested)
    }
}
