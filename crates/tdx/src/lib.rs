//! Intel TDX quotes (DCAP quote versions 4 and 5, ECDSA P-256 attestation
//! key), verified offline against Intel's chain and collateral: the `tdx`
//! variant ([`Variant::Tdx`], aTLS OID 1.3.9900.5.4).
//!
//! - Evidence ([`TdxEvidence`], prost `confboot.tdx.Evidence`) is the raw
//!   quote, whose `REPORTDATA` is `extra_data` zero-padded to 64 bytes,
//!   and the TD's CCEL event log ([`CcelLog`]) when it has one.
//! - [`TdxIssuer`] gets quotes through the kernel's configfs-tsm
//!   ([`ConfigfsTsmQuoteSource`]) and sends the CCEL log read at start.
//! - [`TdxValidator`] implements [`Validator`]: the quote's checks below;
//!   a CCEL log sent along must replay to the quoted RTMRs
//!   ([`CcelLog::check_replay`]); an RTMR that differs from the policy is
//!   named with its first differing event when the policy names an
//!   expected log. It passes on `MRTD` (index 0) and `RTMR0`–`RTMR3`
//!   (indexes 1 to 4, the CCEL's register indexes). Its policy must pin
//!   the image: `MRTD`, `RTMR0`, `RTMR1` and `RTMR2`
//!   ([`TdxPolicy::check_pins_image`]). For the admin's Init and Recover
//!   it also requires `RTMR3`, the cluster mark, all zero
//!   ([`TdxValidator::require_unmarked`]): a TD already bootstrapped is
//!   refused before it receives a secret.
//!
//! - [`Quote`] reads a quote with bounded, panic-free parsing: header, TD
//!   report body (TD 1.0, and TD 1.5 with `TEE_TCB_SVN_2` and
//!   `MRSERVICETD`), the signature data and its QE report certification
//!   data with the PCK chain.
//! - [`TdxValidator`] checks, failing closed ([`check`] names them): the
//!   PCK chain to the pinned Intel SGX Root CA ([`TdxRoots`]; another root
//!   only by configuration) and its validity; the root and PCK CRLs when
//!   given; the QE report's signature by the PCK key and its `REPORTDATA`
//!   binding the attestation key; the quote's signature by that key; TCB
//!   info and QE identity ([`Collateral`]: signed by a TCB signing
//!   certificate of the pinned root, current) with the platform's and the
//!   QE's TCB status by Intel's algorithm; then the [`TdxPolicy`]: report
//!   data, debug, TD attributes, XFAM, minimum TEE TCB SVN, MRTD, RTMRs,
//!   MRCONFIGID, MROWNER and MROWNERCONFIG.
//! - Checks run as of a given time ([`TdxValidator::as_of`]) so that
//!   recorded collateral stays testable after its next update.
//!
//! Nothing is fetched by default: collateral comes from files (Intel's PCS
//! answers as served); the cargo feature `pcs` fetches them into a cache
//! directory, kept and loaded as those files ([`pcs`](PcsRequest)). The TCB signing certificate comes from Intel's issuer-chain
//! header when given ([`Collateral::add_tcb_signing_chain`]), else the one
//! built in ([`INTEL_SGX_TCB_SIGNING_2018_DER`]); either counts only under
//! a pinned root.

mod ccel;
mod certs;
mod collateral;
mod evidence;
mod issuer;
mod pcs;
mod policy;
mod quote;
mod refusal;
mod rtmr;
mod verify;

pub use ccel::{
    CC_TYPE_TDX, CCEL_TABLE_LEN, CcelError, CcelEvent, CcelLog, CcelTable, MAX_CCEL_AREA_LEN,
    MAX_CCEL_EVENTS, MAX_CCEL_LOG_LEN, MAX_CCEL_TABLE_LEN, RTMR_LEN, TPM_ALG_SHA384, extend,
    synthetic_ccel_log,
};
pub use certs::{
    CertError, Crl, INTEL_SGX_ROOT_CA_DER, INTEL_SGX_TCB_SIGNING_2018_DER, IntelCert,
    MAX_CERTIFICATE_LEN, MAX_CHAIN_CERTIFICATES, MAX_CRL_LEN, OID_SGX_EXTENSIONS, PckChain,
    SgxExtensions, TdxRoots, certificates_from_pem_or_der,
};
pub use collateral::{
    CollateralError, IsvLevel, MAX_COLLATERAL_LEN, MAX_MODULE_IDENTITIES, MAX_TCB_LEVELS,
    QeIdentity, SignedQeIdentity, SignedTcbInfo, TcbInfo, TcbLevel, TcbMatch, TcbStatus,
    TdxModuleIdentity,
};
pub use evidence::{MAX_EVIDENCE_LEN, TdxEvidence};
pub use issuer::{
    CCEL_DATA_PATH, CCEL_TABLE_PATH, ConfigfsTsmQuoteSource, TDX_PROVIDER, TSM_REPORT_DIR,
    TdxIssuer, TdxQuoteSource, read_ccel_log,
};
pub use pcs::{
    MAX_ISSUER_CHAIN_LEN, PCS_BASE_URL, PCS_TIMEOUT, PckCa, PcsAnswer, PcsError, PcsRequest,
    pcs_requests, store_answers,
};
#[cfg(feature = "pcs")]
pub use pcs::{fetch, fetch_collateral};
pub use policy::{CollateralFiles, TDX_IMAGE_REGISTERS, TdxPolicy};
pub use quote::{
    ATTESTATION_KEY_ECDSA_P256, BodyType, CERT_DATA_PCK_CHAIN, CERT_DATA_QE_REPORT, HEADER_LEN,
    Header, INTEL_QE_VENDOR_ID, MAX_QUOTE_LEN, QE_REPORT_LEN, QeReport, Quote, QuoteError,
    TD10_BODY_LEN, TD15_BODY_LEN, TEE_TYPE_TDX, TdReport, td_attributes,
};
pub use refusal::TdxRefusal;
pub use rtmr::{RTMR3_SYSFS_PATH, Rtmr3Marker, RtmrError};
pub use verify::{Collateral, check, run_checks};

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::{Arc, Mutex};

use confboot_util::floor::TimeFloor;

use confboot_attest::check::{CheckOutcome, CheckResult, ReportDataCheck, first_failure};
use confboot_attest::{
    AttestationError, Attested, Detail, EXTRA_DATA_LEN, PolicyError, Validator, Variant,
};

/// Verifies TDX quotes against a policy, pinned roots and collateral.
#[derive(Clone, Debug)]
pub struct TdxValidator {
    policy: TdxPolicy,
    roots: TdxRoots,
    collateral: Collateral,
    /// The policy's expected CCEL log, explaining an RTMR that differs.
    expected_log: Option<CcelLog>,
    /// Verify as of this time (Unix seconds) instead of now.
    as_of: Option<i64>,
    /// The latest time seen: the checks read it, not the clock alone.
    floor: Arc<TimeFloor>,
    /// Collateral fetched from the PCS (policy `pcsFetch`), reused while
    /// current for the platform asked about.
    fetched: Arc<Mutex<Option<Collateral>>>,
    /// Whether `RTMR3`, the cluster mark, must be all zero (a TD not
    /// bootstrapped since it booted).
    require_unmarked: bool,
}

impl TdxValidator {
    /// A validator for `policy`, with the roots it names
    /// (`rootCertificates`), else Intel's; the collateral files and the
    /// expected event log it names are read (bounded) and parsed. A policy
    /// that does not pin the image is refused
    /// ([`TdxPolicy::check_pins_image`]), whether it was read or built in
    /// code.
    pub fn new(policy: TdxPolicy) -> Result<TdxValidator, PolicyError> {
        policy.check_pins_image()?;
        if policy.pcs_fetch && !cfg!(feature = "pcs") {
            return Err(PolicyError::Format(
                "pcsFetch: confboot was built without the cargo feature `pcs`".into(),
            ));
        }
        let roots = if policy.root_certificates.is_empty() {
            TdxRoots::intel()
        } else {
            let mut certs = Vec::new();
            for path in &policy.root_certificates {
                certs.push(std::fs::read(path).map_err(PolicyError::Io)?);
            }
            TdxRoots::new(&certs)
                .map_err(|e| PolicyError::Format(format!("rootCertificates: {e}")))?
        };
        let collateral = load_collateral(&policy.collateral)?;
        let expected_log = match &policy.expected_event_log {
            None => None,
            Some(path) => {
                let bytes = read_file(path, MAX_CCEL_AREA_LEN)?;
                Some(CcelLog::parse(&bytes).map_err(|e| {
                    PolicyError::Format(format!("expectedEventLog {}: {e}", path.display()))
                })?)
            }
        };
        let mut validator = TdxValidator::with_roots(policy, roots).with_collateral(collateral);
        validator.expected_log = expected_log;
        Ok(validator)
    }

    /// The policy file at `path`, its roots, collateral and expected log.
    pub fn load(path: &Path) -> Result<TdxValidator, PolicyError> {
        TdxValidator::new(TdxPolicy::load(path)?)
    }

    /// A validator with explicit roots (the policy's `rootCertificates`
    /// are ignored).
    pub fn with_roots(policy: TdxPolicy, roots: TdxRoots) -> TdxValidator {
        TdxValidator {
            policy,
            roots,
            collateral: Collateral::default(),
            expected_log: None,
            as_of: None,
            floor: Arc::new(TimeFloor::in_memory(0)),
            fetched: Arc::default(),
            require_unmarked: false,
        }
    }

    /// Whether the TD's `RTMR3` must be all zero: a TD that has not been
    /// bootstrapped since it booted, as the admin's Init and Recover need
    /// (a bootstrapped TD extends `RTMR3` with the cluster mark,
    /// `confboot_cluster::mark`). Off by default: a join service checks
    /// the mark itself, per call.
    pub fn require_unmarked(mut self, required: bool) -> TdxValidator {
        self.require_unmarked = required;
        self
    }

    /// Whether this validator requires an all-zero `RTMR3`
    /// ([`TdxValidator::require_unmarked`]).
    pub fn requires_unmarked(&self) -> bool {
        self.require_unmarked
    }

    /// Uses this collateral.
    pub fn with_collateral(mut self, collateral: Collateral) -> TdxValidator {
        self.collateral = collateral;
        self
    }

    /// The collateral in use.
    pub fn collateral(&self) -> &Collateral {
        &self.collateral
    }

    /// Checks validity and currency as of `unix_secs` instead of now.
    pub fn as_of(mut self, unix_secs: i64) -> TdxValidator {
        self.as_of = Some(unix_secs);
        self
    }

    /// Reads the time from `floor` (by default a floor of its own, for
    /// as long as the validator lives): every check of a window (the PCK
    /// chain's certificates, the CRLs, the TCB info and QE identity's
    /// `issueDate`..`nextUpdate`) compares with the latest time seen, not
    /// with the guest's clock alone, which the host sets. A TCB info or
    /// QE identity that verified raises the floor to its `issueDate`
    /// (Intel signed that it was issued then).
    pub fn with_time_floor(mut self, floor: Arc<TimeFloor>) -> TdxValidator {
        self.floor = floor;
        self
    }

    /// The time the checks read: the floor, raised to the wall clock (or
    /// to [`TdxValidator::as_of`]).
    fn now(&self) -> i64 {
        let wall = self.as_of.unwrap_or_else(confboot_util::time::unix_now);
        self.floor.observe(wall)
    }

    /// Raises the floor to the `issueDate` of collateral whose check
    /// passed (its signature verified).
    fn advance_floor(&self, collateral: &Collateral, checks: &[CheckResult]) {
        let passed = |name: &str| {
            checks
                .iter()
                .any(|c| c.name == name && matches!(c.outcome, CheckOutcome::Passed(_)))
        };
        let mut seen = Vec::new();
        if let Some(info) = collateral
            .tcb_info
            .as_ref()
            .filter(|_| passed(check::TCB_INFO))
        {
            seen.push(info.claimed_issue_date());
        }
        if let Some(qe) = collateral
            .qe_identity
            .as_ref()
            .filter(|_| passed(check::QE_IDENTITY))
        {
            seen.push(qe.claimed_issue_date());
        }
        if let Some(t) = seen.into_iter().max()
            && let Err(e) = self.floor.advance(t)
        {
            log::error!("{e}; the floor holds for this run only");
        }
    }

    /// The policy in force.
    pub fn policy(&self) -> &TdxPolicy {
        &self.policy
    }

    /// The roots.
    pub fn roots(&self) -> &TdxRoots {
        &self.roots
    }

    /// Every check with its outcome; nothing is short-circuited.
    pub fn verify_quote_detailed(
        &self,
        quote: &Quote,
        report_data: &ReportDataCheck,
    ) -> Vec<CheckResult> {
        let fetched = self.fetched_collateral(quote);
        let collateral = fetched.as_ref().unwrap_or(&self.collateral);
        let checks = run_checks(
            quote,
            report_data,
            &self.policy,
            &self.roots,
            collateral,
            self.now(),
        );
        self.advance_floor(collateral, &checks);
        checks
    }

    /// With policy `pcsFetch`, collateral for `quote` when the policy's own
    /// lacks a piece or is past its `nextUpdate`: the last fetched while it
    /// is current, else fetched now (the policy's root CRL and TCB signing
    /// certificates kept). `None`: the policy's collateral, as it is (a
    /// fetch that failed is logged, and the checks then fail as without
    /// it).
    fn fetched_collateral(&self, quote: &Quote) -> Option<Collateral> {
        if !self.policy.pcs_fetch {
            return None;
        }
        let fmspc = match pcs_requests(quote, &self.roots) {
            Ok([PcsRequest::TcbInfo { fmspc }, ..]) => fmspc,
            _ => return None,
        };
        let now = self.now();
        let current = |c: &Collateral| {
            c.tcb_info
                .as_ref()
                .is_some_and(|t| t.claimed_fmspc() == fmspc && now <= t.claimed_next_update())
                && c.qe_identity
                    .as_ref()
                    .is_some_and(|q| now <= q.claimed_next_update())
                && c.pck_crl.is_some()
        };
        if current(&self.collateral) {
            return None;
        }
        let mut held = self.fetched.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(c) = held.as_ref().filter(|c| current(c)) {
            return Some(c.clone());
        }
        let fetched = self.fetch_collateral(quote)?;
        let mut tcb_signing = self.collateral.tcb_signing.clone();
        tcb_signing.extend(fetched.tcb_signing.iter().cloned());
        let merged = Collateral {
            root_crl: self.collateral.root_crl.clone(),
            tcb_signing,
            ..fetched
        };
        *held = Some(merged.clone());
        Some(merged)
    }

    #[cfg(feature = "pcs")]
    fn fetch_collateral(&self, quote: &Quote) -> Option<Collateral> {
        let base = self.policy.pcs_base_url.as_deref().unwrap_or(PCS_BASE_URL);
        let cache = self.policy.collateral_cache.as_deref()?;
        // Three requests, each within PCS_TIMEOUT, all within this.
        let deadline = std::time::Instant::now() + 3 * PCS_TIMEOUT;
        match fetch_collateral(base, quote, &self.roots, cache, deadline) {
            Ok((_, collateral)) => Some(collateral),
            Err(e) => {
                log::warn!("TDX collateral could not be fetched: {e}");
                None
            }
        }
    }

    #[cfg(not(feature = "pcs"))]
    fn fetch_collateral(&self, _quote: &Quote) -> Option<Collateral> {
        None
    }

    /// Verifies a quote: every check must pass (a skipped one fails, so
    /// TCB info and QE identity are required).
    pub fn verify(
        &self,
        quote: &Quote,
        report_data: &ReportDataCheck,
    ) -> Result<(), AttestationError> {
        match first_failure(&self.verify_quote_detailed(quote, report_data)) {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }
}

/// Reads a file a policy names, at most `limit` bytes.
fn read_file(path: &Path, limit: usize) -> Result<Vec<u8>, PolicyError> {
    confboot_util::fs::read_bounded(path, limit as u64)
        .map(|mut b| std::mem::take(&mut *b))
        .map_err(|e| PolicyError::Format(e.to_string()))
}

/// Reads and parses the collateral files a policy names.
pub fn load_collateral(files: &CollateralFiles) -> Result<Collateral, PolicyError> {
    let bad = |key: &str, path: &Path, e: &dyn std::fmt::Display| {
        PolicyError::Format(format!("collateral.{key} {}: {e}", path.display()))
    };
    let mut c = Collateral::default();
    if let Some(path) = &files.tcb_info {
        let bytes = read_file(path, MAX_COLLATERAL_LEN)?;
        c.tcb_info = Some(SignedTcbInfo::parse(&bytes).map_err(|e| bad("tcbInfo", path, &e))?);
    }
    if let Some(path) = &files.qe_identity {
        let bytes = read_file(path, MAX_COLLATERAL_LEN)?;
        c.qe_identity =
            Some(SignedQeIdentity::parse(&bytes).map_err(|e| bad("qeIdentity", path, &e))?);
    }
    if let Some(path) = &files.pck_crl {
        let bytes = read_file(path, MAX_CRL_LEN)?;
        c.pck_crl = Some(Crl::parse(&bytes).map_err(|e| bad("pckCrl", path, &e))?);
    }
    if let Some(path) = &files.root_crl {
        let bytes = read_file(path, MAX_CRL_LEN)?;
        c.root_crl = Some(Crl::parse(&bytes).map_err(|e| bad("rootCrl", path, &e))?);
    }
    if let Some(path) = &files.tcb_info_issuer_chain {
        let bytes = read_file(path, MAX_COLLATERAL_LEN)?;
        c.add_tcb_signing_chain(&bytes)
            .map_err(|e| bad("tcbInfoIssuerChain", path, &e))?;
    }
    Ok(c)
}

impl TdxValidator {
    /// Validates decoded evidence bound to `report_data`: the CCEL log, when
    /// sent, must replay to the quoted RTMRs; then every check of the quote
    /// must pass. A differing `MRTD` or RTMR is a
    /// [`AttestationError::Measurement`] (index 0, or 1 to 4), the RTMR's
    /// first differing event named when the policy has an expected log.
    pub fn validate_evidence(
        &self,
        evidence: &TdxEvidence,
        report_data: &ReportDataCheck,
    ) -> Result<Attested, AttestationError> {
        let quote = Quote::parse(&evidence.quote).map_err(|e| {
            AttestationError::Decode(Detail::with(&TdxRefusal::Quote, format!("TDX quote: {e}")))
        })?;
        let log = if evidence.ccel_log.is_empty() {
            None
        } else {
            let log = CcelLog::parse(&evidence.ccel_log).map_err(|e| {
                AttestationError::EventLog(Detail::with(&TdxRefusal::EventLog, e.to_string()))
            })?;
            log.check_replay(&quote.report.rtmr).map_err(|e| {
                AttestationError::EventLog(Detail::with(&TdxRefusal::EventLog, e.to_string()))
            })?;
            Some(log)
        };
        let checks = self.verify_quote_detailed(&quote, report_data);
        if let Some(e) = first_failure(&checks) {
            return Err(self
                .measurement_error(&checks, &quote, log.as_ref())
                .unwrap_or(e));
        }
        let r = &quote.report;
        if self.require_unmarked {
            verify::check_unmarked(r)?;
        }
        let mut measurements = BTreeMap::from([(0, r.mr_td.to_vec())]);
        for (i, rtmr) in r.rtmr.iter().enumerate() {
            measurements.insert(1 + i as u32, rtmr.to_vec());
        }
        Ok(Attested {
            set_verdict: None,
            warnings: Vec::new(),
            variant: Variant::Tdx,
            measurements,
        })
    }

    /// The first failed check as a measurement error, when it is `MRTD` or
    /// an RTMR.
    fn measurement_error(
        &self,
        checks: &[CheckResult],
        quote: &Quote,
        log: Option<&CcelLog>,
    ) -> Option<AttestationError> {
        let failed = checks
            .iter()
            .find(|c| matches!(c.outcome, CheckOutcome::Failed(_)))?;
        let hex = confboot_util::hex::encode;
        if failed.name == check::MRTD {
            return Some(AttestationError::Measurement {
                index: 0,
                expected: hex(self.policy.mr_td.as_ref()?),
                actual: hex(&quote.report.mr_td),
                event: None,
            });
        }
        let rtmr = check::RTMR.iter().position(|n| *n == failed.name)?;
        let event = match (&self.expected_log, log) {
            (Some(expected), Some(actual)) => expected.explain(rtmr, actual),
            (Some(_), None) => Some("the TD sent no event log".into()),
            _ => None,
        };
        Some(AttestationError::Measurement {
            index: 1 + rtmr as u32,
            expected: hex(self.policy.rtmrs[rtmr].as_ref()?),
            actual: hex(&quote.report.rtmr[rtmr]),
            event,
        })
    }
}

impl Validator for TdxValidator {
    fn variant(&self) -> Variant {
        Variant::Tdx
    }

    fn validate(
        &self,
        evidence: &[u8],
        extra_data: &[u8; EXTRA_DATA_LEN],
    ) -> Result<Attested, AttestationError> {
        let evidence = TdxEvidence::decode(evidence)?;
        let attested =
            self.validate_evidence(&evidence, &ReportDataCheck::ExtraData(*extra_data))?;
        log::debug!(
            "TDX evidence verified: MRTD {}",
            confboot_util::hex::encode(&attested.measurements[&0])
        );
        Ok(attested)
    }
}
