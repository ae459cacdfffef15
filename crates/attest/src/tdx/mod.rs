//! Intel TDX quotes (DCAP quote versions 4 and 5, ECDSA P-256 attestation
//! key), verified offline against Intel's chain and collateral.
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
//! Nothing is fetched: collateral comes from files (Intel's PCS answers as
//! served). The TCB signing certificate comes from Intel's issuer-chain
//! header when given ([`Collateral::add_tcb_signing_chain`]), else the one
//! built in ([`INTEL_SGX_TCB_SIGNING_2018_DER`]); either counts only under
//! a pinned root.

mod certs;
mod collateral;
mod policy;
mod quote;
mod verify;

pub use certs::{
    CertError, Crl, INTEL_SGX_ROOT_CA_DER, INTEL_SGX_TCB_SIGNING_2018_DER, IntelCert,
    MAX_CERTIFICATE_LEN, MAX_CHAIN_CERTIFICATES, MAX_CRL_LEN, OID_SGX_EXTENSIONS, PckChain,
    SgxExtensions, TdxRoots, certificates_from_pem_or_der,
};
pub use collateral::{
    CollateralError, IsvLevel, MAX_COLLATERAL_LEN, MAX_MODULE_IDENTITIES, MAX_TCB_LEVELS,
    QeIdentity, TcbInfo, TcbLevel, TcbMatch, TcbStatus, TdxModuleIdentity,
};
pub use policy::TdxPolicy;
pub use quote::{
    ATTESTATION_KEY_ECDSA_P256, BodyType, CERT_DATA_PCK_CHAIN, CERT_DATA_QE_REPORT, HEADER_LEN,
    Header, INTEL_QE_VENDOR_ID, MAX_QUOTE_LEN, QE_REPORT_LEN, QeReport, Quote, QuoteError,
    TD10_BODY_LEN, TD15_BODY_LEN, TEE_TYPE_TDX, TdReport, td_attributes,
};
pub use verify::{Collateral, check, run_checks};

use crate::snp::{CheckResult, ReportDataCheck, first_failure};
use crate::{AttestationError, PolicyError};

/// Verifies TDX quotes against a policy, pinned roots and collateral.
#[derive(Clone, Debug)]
pub struct TdxValidator {
    policy: TdxPolicy,
    roots: TdxRoots,
    collateral: Collateral,
    /// Verify as of this time (Unix seconds) instead of now.
    as_of: Option<i64>,
}

impl TdxValidator {
    /// A validator for `policy`, with the roots it names
    /// (`rootCertificates`), else Intel's; no collateral yet.
    pub fn new(policy: TdxPolicy) -> Result<TdxValidator, PolicyError> {
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
        Ok(TdxValidator::with_roots(policy, roots))
    }

    /// A validator with explicit roots (the policy's `rootCertificates`
    /// are ignored).
    pub fn with_roots(policy: TdxPolicy, roots: TdxRoots) -> TdxValidator {
        TdxValidator {
            policy,
            roots,
            collateral: Collateral::default(),
            as_of: None,
        }
    }

    /// Uses this collateral.
    pub fn with_collateral(mut self, collateral: Collateral) -> TdxValidator {
        self.collateral = collateral;
        self
    }

    /// Checks validity and currency as of `unix_secs` instead of now.
    pub fn as_of(mut self, unix_secs: i64) -> TdxValidator {
        self.as_of = Some(unix_secs);
        self
    }

    fn now(&self) -> i64 {
        self.as_of.unwrap_or_else(confboot_util::time::unix_now)
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
        run_checks(
            quote,
            report_data,
            &self.policy,
            &self.roots,
            &self.collateral,
            self.now(),
        )
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
