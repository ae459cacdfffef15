//! The TDX checks, one function each, so that a command can print every
//! outcome and a validator can require them all.

use ring::digest::{SHA256, digest};

use super::certs::{
    CertError, Crl, INTEL_SGX_TCB_SIGNING_2018_DER, IntelCert, PckChain, SgxExtensions, TdxRoots,
    certificates_from_pem_or_der,
};
use super::collateral::{
    CollateralError, QeIdentity, SignedQeIdentity, SignedTcbInfo, TcbInfo, TcbStatus,
};
use super::policy::TdxPolicy;
use super::quote::{INTEL_QE_VENDOR_ID, Quote, TdReport, td_attributes};
use crate::TdxRefusal;
use confboot_attest::check::{CheckOutcome, CheckResult, ReportDataCheck};
use confboot_attest::{AttestationError, Detail};
use confboot_util::hex;

/// Names of the checks, in the order they run.
pub mod check {
    /// The QE vendor is Intel.
    pub const QE_VENDOR: &str = "QE vendor";
    /// PCK certificate → PCK CA → pinned root.
    pub const PCK_CHAIN: &str = "PCK certificate chain";
    /// Every certificate of the chain is valid at the time of the check.
    pub const VALIDITY: &str = "certificate validity";
    /// The root CRL (when given): signed by the root, current, the PCK CA
    /// not revoked.
    pub const ROOT_CRL: &str = "root CRL";
    /// The PCK CRL (when given): signed by the PCK CA, current, the PCK
    /// certificate not revoked.
    pub const PCK_CRL: &str = "PCK CRL";
    /// The QE report's signature by the PCK key.
    pub const QE_REPORT_SIGNATURE: &str = "QE report signature";
    /// The QE report's `REPORTDATA` binds the attestation key and the QE
    /// authentication data.
    pub const QE_REPORT_DATA: &str = "QE report data";
    /// The quote's signature by the attestation key over header and body.
    pub const QUOTE_SIGNATURE: &str = "quote signature";
    /// TCB info: signed by a TCB signing certificate of a pinned root,
    /// current, for the PCK certificate's FMSPC and PCE id.
    pub const TCB_INFO: &str = "TCB info";
    /// `MRSIGNERSEAM` and `SEAMATTRIBUTES` are the TDX module's the TCB
    /// info names.
    pub const TDX_MODULE: &str = "TDX module";
    /// The platform's TCB status is one the policy accepts.
    pub const TCB_STATUS: &str = "TCB status";
    /// QE identity: signed, current, and the QE report matches it.
    pub const QE_IDENTITY: &str = "QE identity";
    /// The QE's TCB status is one the policy accepts.
    pub const QE_TCB_STATUS: &str = "QE TCB status";
    /// The TD's `REPORTDATA`.
    pub const REPORT_DATA: &str = "report data";
    /// `TDATTRIBUTES.DEBUG`.
    pub const DEBUG: &str = "debug";
    /// The other `TDATTRIBUTES` bits.
    pub const TD_ATTRIBUTES: &str = "TD attributes";
    /// `XFAM`.
    pub const XFAM: &str = "XFAM";
    /// `TEE_TCB_SVN` against the policy's minimum.
    pub const MIN_TEE_TCB_SVN: &str = "minimum TEE TCB SVN";
    /// `MRTD`.
    pub const MRTD: &str = "MRTD";
    /// `RTMR0` to `RTMR3`.
    pub const RTMR: [&str; 4] = ["RTMR0", "RTMR1", "RTMR2", "RTMR3"];
    /// `MRCONFIGID`.
    pub const MRCONFIGID: &str = "MRCONFIGID";
    /// `MROWNER`.
    pub const MROWNER: &str = "MROWNER";
    /// `MROWNERCONFIG`.
    pub const MROWNERCONFIG: &str = "MROWNERCONFIG";
}

/// Intel's collateral for a quote, each piece optional (a missing piece
/// makes its checks skipped, which a validator counts as a failure).
#[derive(Clone, Debug, Default)]
pub struct Collateral {
    /// TCB info for the platform's FMSPC (its signature is checked with
    /// the quote).
    pub tcb_info: Option<SignedTcbInfo>,
    /// The TD QE identity (its signature is checked with the quote).
    pub qe_identity: Option<SignedQeIdentity>,
    /// The CRL of the PCK CA that issued the PCK certificate.
    pub pck_crl: Option<Crl>,
    /// The root CA's CRL.
    pub root_crl: Option<Crl>,
    /// TCB signing certificates to try besides the built-in one (Intel's
    /// `TCB-Info-Issuer-Chain`); each counts only if a pinned root issued it.
    pub tcb_signing: Vec<IntelCert>,
}

impl Collateral {
    /// Adds the certificates of a PEM issuer chain (or one DER
    /// certificate) as TCB signing candidates; a root in the chain is
    /// ignored (only pinned roots anchor). URL-encoded PEM, as the PCS
    /// header carries it, is accepted too.
    pub fn add_tcb_signing_chain(&mut self, bytes: &[u8]) -> Result<(), CertError> {
        let decoded = percent_decode(bytes);
        for der in certificates_from_pem_or_der(&decoded)? {
            let cert = IntelCert::from_der(&der)?;
            self.tcb_signing.push(cert);
        }
        Ok(())
    }
}

/// `%XX` decoded (other bytes as they are).
fn percent_decode(bytes: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex_at = |j: usize| bytes.get(j).and_then(|c| (*c as char).to_digit(16));
        match (bytes[i], hex_at(i + 1), hex_at(i + 2)) {
            (b'%', Some(h), Some(l)) => {
                out.push((h * 16 + l) as u8);
                i += 3;
            }
            (b, _, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    out
}

/// A certificate refusal of the check `reason`: a bad signature, a
/// malformed certificate or any other trust failure.
fn trust(reason: &'static TdxRefusal) -> impl Fn(CertError) -> AttestationError {
    move |e| {
        let detail = Detail::with(reason, e.to_string());
        match e {
            CertError::Signature { .. } => AttestationError::Signature(detail),
            CertError::Malformed { .. } | CertError::TooLarge { .. } => {
                AttestationError::Decode(detail)
            }
            _ => AttestationError::Trust(detail),
        }
    }
}

fn collateral_err(reason: &'static TdxRefusal, e: CollateralError) -> AttestationError {
    let detail = Detail::with(reason, e.to_string());
    match e {
        CollateralError::NoMatchingLevel { .. } => AttestationError::Policy(detail),
        _ => AttestationError::Decode(detail),
    }
}

fn skipped(why: &str) -> CheckOutcome {
    CheckOutcome::Skipped(why.to_string())
}

/// What the checks share: the chain (when it verified) and the PCK
/// certificate (parsed even when it did not, for the informative checks).
struct Chain {
    verified: Option<PckChain>,
    leaf: Option<IntelCert>,
    sgx: Option<SgxExtensions>,
}

/// Runs every check at time `at` (Unix seconds) in the order of [`check`].
pub fn run_checks(
    quote: &Quote,
    report_data: &ReportDataCheck,
    policy: &TdxPolicy,
    roots: &TdxRoots,
    collateral: &Collateral,
    at: i64,
) -> Vec<CheckResult> {
    let report = &quote.report;
    let (chain_outcome, chain) = check_pck_chain(quote, roots);
    let (tcb_info_outcome, tcb_info) = check_tcb_info(collateral, &chain, roots, at);
    let (qe_identity_outcome, qe_identity) = check_qe_identity(quote, collateral, roots, at);
    let mut checks = vec![
        (check::QE_VENDOR, check_qe_vendor(quote)),
        (check::PCK_CHAIN, chain_outcome),
        (check::VALIDITY, check_validity(&chain, at)),
        (check::ROOT_CRL, check_root_crl(&chain, collateral, at)),
        (check::PCK_CRL, check_pck_crl(&chain, collateral, at)),
        (
            check::QE_REPORT_SIGNATURE,
            check_qe_report_signature(quote, &chain),
        ),
        (check::QE_REPORT_DATA, check_qe_report_data(quote)),
        (check::QUOTE_SIGNATURE, check_quote_signature(quote)),
        (check::TCB_INFO, tcb_info_outcome),
        (
            check::TDX_MODULE,
            check_tdx_module(report, tcb_info.as_ref()),
        ),
        (
            check::TCB_STATUS,
            check_tcb_status(report, tcb_info.as_ref(), &chain, policy),
        ),
        (check::QE_IDENTITY, qe_identity_outcome),
        (
            check::QE_TCB_STATUS,
            check_qe_tcb_status(quote, qe_identity.as_ref(), policy),
        ),
        (check::REPORT_DATA, check_report_data(report, report_data)),
        (check::DEBUG, check_debug(report, policy)),
        (check::TD_ATTRIBUTES, check_td_attributes(report, policy)),
        (check::XFAM, check_xfam(report, policy)),
        (check::MIN_TEE_TCB_SVN, check_minimum_svn(report, policy)),
        (
            check::MRTD,
            check_value(
                &TdxRefusal::Mrtd,
                &report.mr_td,
                policy.mr_td.as_ref(),
                !policy.insecure_any_image,
            ),
        ),
    ];
    for (i, name) in check::RTMR.iter().enumerate() {
        checks.push((
            name,
            check_value(
                &TdxRefusal::Rtmr,
                &report.rtmr[i],
                policy.rtmrs[i].as_ref(),
                i < IMAGE_RTMRS && !policy.insecure_any_image,
            ),
        ));
    }
    checks.extend([
        (
            check::MRCONFIGID,
            check_value(
                &TdxRefusal::MrConfigId,
                &report.mr_config_id,
                policy.mr_config_id.as_ref(),
                false,
            ),
        ),
        (
            check::MROWNER,
            check_value(
                &TdxRefusal::MrOwner,
                &report.mr_owner,
                policy.mr_owner.as_ref(),
                false,
            ),
        ),
        (
            check::MROWNERCONFIG,
            check_value(
                &TdxRefusal::MrOwnerConfig,
                &report.mr_owner_config,
                policy.mr_owner_config.as_ref(),
                false,
            ),
        ),
    ]);
    checks
        .into_iter()
        .map(|(name, outcome)| CheckResult { name, outcome })
        .collect()
}

/// [`check::QE_VENDOR`].
fn check_qe_vendor(quote: &Quote) -> CheckOutcome {
    if quote.header.qe_vendor_id == INTEL_QE_VENDOR_ID {
        CheckOutcome::Passed("Intel".into())
    } else {
        CheckOutcome::Failed(AttestationError::Trust(Detail::with(
            &TdxRefusal::QeVendor,
            format!(
                "QE vendor id {} is not Intel's",
                hex::encode(&quote.header.qe_vendor_id)
            ),
        )))
    }
}

/// [`check::PCK_CHAIN`]: the quote's PCK chain to a pinned root.
fn check_pck_chain(quote: &Quote, roots: &TdxRoots) -> (CheckOutcome, Chain) {
    let leaf = certificates_from_pem_or_der(&quote.pck_chain_pem)
        .ok()
        .and_then(|ders| ders.first().and_then(|d| IntelCert::from_der(d).ok()));
    let sgx = leaf.as_ref().and_then(|l| l.sgx_extensions().ok());
    match roots.verify_pck_chain(&quote.pck_chain_pem) {
        Ok(chain) => {
            let outcome = match chain.leaf.sgx_extensions() {
                Ok(sgx) => CheckOutcome::Passed(format!(
                    "{:?} → {:?} → {:?} (pinned); FMSPC {}",
                    chain.leaf.common_name(),
                    chain.intermediate.common_name(),
                    chain.root.common_name(),
                    hex::encode(&sgx.fmspc)
                )),
                Err(e) => CheckOutcome::Failed(trust(&TdxRefusal::PckChain)(e)),
            };
            let verified = matches!(outcome, CheckOutcome::Passed(_)).then_some(chain);
            (
                outcome,
                Chain {
                    verified,
                    leaf,
                    sgx,
                },
            )
        }
        Err(e) => (
            CheckOutcome::Failed(trust(&TdxRefusal::PckChain)(e)),
            Chain {
                verified: None,
                leaf,
                sgx,
            },
        ),
    }
}

/// [`check::VALIDITY`].
fn check_validity(chain: &Chain, at: i64) -> CheckOutcome {
    let Some(c) = &chain.verified else {
        return skipped("no verified chain");
    };
    match c.check_validity(at) {
        Ok(()) => CheckOutcome::Passed(format!(
            "valid for {} more days",
            (c.not_after() - at) / 86_400
        )),
        Err(e) => CheckOutcome::Failed(trust(&TdxRefusal::Validity)(e)),
    }
}

/// [`check::ROOT_CRL`].
fn check_root_crl(chain: &Chain, collateral: &Collateral, at: i64) -> CheckOutcome {
    let Some(crl) = &collateral.root_crl else {
        return skipped("no root CRL given");
    };
    let Some(c) = &chain.verified else {
        return skipped("no verified chain");
    };
    match crl
        .check(&c.root, at)
        .and_then(|()| crl.check_not_revoked(&c.intermediate))
    {
        Ok(()) => CheckOutcome::Passed(format!(
            "{:?} not revoked ({} revoked certificates listed)",
            c.intermediate.common_name(),
            crl.revoked_count()
        )),
        Err(e) => CheckOutcome::Failed(trust(&TdxRefusal::RootCrl)(e)),
    }
}

/// [`check::PCK_CRL`].
fn check_pck_crl(chain: &Chain, collateral: &Collateral, at: i64) -> CheckOutcome {
    let Some(crl) = &collateral.pck_crl else {
        return skipped("no PCK CRL given");
    };
    let Some(c) = &chain.verified else {
        return skipped("no verified chain");
    };
    match crl
        .check(&c.intermediate, at)
        .and_then(|()| crl.check_not_revoked(&c.leaf))
    {
        Ok(()) => CheckOutcome::Passed(format!(
            "PCK certificate not revoked ({} revoked certificates listed)",
            crl.revoked_count()
        )),
        Err(e) => CheckOutcome::Failed(trust(&TdxRefusal::PckCrl)(e)),
    }
}

/// [`check::QE_REPORT_SIGNATURE`].
fn check_qe_report_signature(quote: &Quote, chain: &Chain) -> CheckOutcome {
    let Some(leaf) = chain
        .verified
        .as_ref()
        .map(|c| &c.leaf)
        .or(chain.leaf.as_ref())
    else {
        return skipped("no PCK certificate");
    };
    match leaf.verify_fixed(
        "the QE report",
        quote.qe_report.as_bytes(),
        &quote.qe_report_signature,
    ) {
        Ok(()) => CheckOutcome::Passed(format!(
            "ECDSA P-256 by the PCK key{}",
            if chain.verified.is_some() {
                ""
            } else {
                " (an untrusted key)"
            }
        )),
        Err(e) => CheckOutcome::Failed(trust(&TdxRefusal::QeReportSignature)(e)),
    }
}

/// [`check::QE_REPORT_DATA`]: `REPORTDATA` = SHA-256(attestation key ‖
/// QE authentication data) ‖ 32 zero bytes.
fn check_qe_report_data(quote: &Quote) -> CheckOutcome {
    let mut bound = quote.attestation_key.to_vec();
    bound.extend_from_slice(&quote.qe_auth_data);
    let hash = digest(&SHA256, &bound);
    let data = quote.qe_report.report_data();
    if data[..32] == *hash.as_ref() && data[32..].iter().all(|b| *b == 0) {
        CheckOutcome::Passed("binds the attestation key and QE authentication data".into())
    } else {
        CheckOutcome::Failed(AttestationError::Binding(Detail::with(
            &TdxRefusal::QeReportData,
            format!(
                "QE report data {} is not SHA-256(attestation key ‖ QE authentication data) {} \
             followed by zeros",
                hex::encode(&data),
                hex::encode(hash.as_ref())
            ),
        )))
    }
}

/// [`check::QUOTE_SIGNATURE`].
fn check_quote_signature(quote: &Quote) -> CheckOutcome {
    let key = quote.attestation_key_sec1();
    match ring::signature::UnparsedPublicKey::new(&ring::signature::ECDSA_P256_SHA256_FIXED, &key)
        .verify(quote.signed_bytes(), &quote.signature)
    {
        Ok(()) => CheckOutcome::Passed(format!(
            "ECDSA P-256 by the attestation key over {} bytes",
            quote.signed_bytes().len()
        )),
        Err(_) => CheckOutcome::Failed(AttestationError::Signature(Detail::with(
            &TdxRefusal::QuoteSignature,
            "the quote signature does not verify with the attestation key",
        ))),
    }
}

/// The TCB signing certificate that verifies a collateral document:
/// issued by a pinned root, valid at `at`, not on the root CRL, and its
/// key verifies `verify`'s signature. Returns its description and what
/// `verify` made of the document (the checked value).
fn collateral_signer<T>(
    collateral: &Collateral,
    roots: &TdxRoots,
    at: i64,
    verify: impl Fn(&IntelCert) -> Result<T, CertError>,
) -> Result<(String, T), CertError> {
    let builtin = IntelCert::from_der(INTEL_SGX_TCB_SIGNING_2018_DER)?;
    let mut last = None;
    for cert in collateral.tcb_signing.iter().chain([&builtin]) {
        let outcome = roots.verify_issued_by_root(cert).and_then(|root| {
            cert.check_validity(at)?;
            if let Some(crl) = &collateral.root_crl {
                crl.check(root, at)?;
                crl.check_not_revoked(cert)?;
            }
            verify(cert)
        });
        match outcome {
            Ok(checked) => {
                let signer = format!(
                    "{:?} (serial {})",
                    cert.common_name(),
                    hex::encode(cert.serial())
                );
                return Ok((signer, checked));
            }
            // A signature failure tells more than a failure to chain.
            Err(e) => {
                if !matches!(last, Some(CertError::Signature { .. })) {
                    last = Some(e);
                }
            }
        }
    }
    Err(last.unwrap_or(CertError::UnknownRoot(String::new())))
}

fn check_dates(
    reason: &'static TdxRefusal,
    what: &str,
    issue: i64,
    next: i64,
    at: i64,
) -> Result<(), AttestationError> {
    if at < issue || at > next {
        return Err(AttestationError::Trust(Detail::with(
            reason,
            format!(
                "the {what} was issued at {issue} and is due for update at {next} (Unix \
             seconds), not current at {at}"
            ),
        )));
    }
    Ok(())
}

/// [`check::TCB_INFO`]; the TCB info when it passed.
fn check_tcb_info(
    collateral: &Collateral,
    chain: &Chain,
    roots: &TdxRoots,
    at: i64,
) -> (CheckOutcome, Option<TcbInfo>) {
    let Some(signed) = &collateral.tcb_info else {
        return (skipped("no TCB info given"), None);
    };
    let outcome = (|| {
        let (signer, info) = collateral_signer(collateral, roots, at, |c| signed.verify(c))
            .map_err(trust(&TdxRefusal::TcbInfo))?;
        check_dates(
            &TdxRefusal::TcbInfo,
            "TCB info",
            info.issue_date(),
            info.next_update(),
            at,
        )?;
        let sgx = chain.sgx.as_ref().ok_or_else(|| {
            AttestationError::Trust(Detail::with(
                &TdxRefusal::TcbInfo,
                "no PCK certificate to compare",
            ))
        })?;
        if sgx.fmspc != info.fmspc() || sgx.pce_id != info.pce_id() {
            return Err(AttestationError::Trust(Detail::with(
                &TdxRefusal::TcbInfo,
                format!(
                    "the TCB info is for FMSPC {} PCE id {}, the PCK certificate's are {} and {}",
                    hex::encode(&info.fmspc()),
                    hex::encode(&info.pce_id()),
                    hex::encode(&sgx.fmspc),
                    hex::encode(&sgx.pce_id)
                ),
            )));
        }
        let text = format!(
            "FMSPC {}, evaluation data {}, signed by {signer}",
            hex::encode(&info.fmspc()),
            info.tcb_evaluation_data_number()
        );
        Ok((text, info))
    })();
    match outcome {
        Ok((text, info)) => (CheckOutcome::Passed(text), Some(info)),
        Err(e) => (CheckOutcome::Failed(e), None),
    }
}

/// [`check::TDX_MODULE`].
fn check_tdx_module(report: &TdReport, info: Option<&TcbInfo>) -> CheckOutcome {
    let Some(info) = info else {
        return skipped("no verified TCB info");
    };
    let Some(module) = info.module_for(&report.tee_tcb_svn) else {
        return CheckOutcome::Failed(AttestationError::Trust(Detail::with(
            &TdxRefusal::TdxModule,
            "the TCB info names no TDX module",
        )));
    };
    if module.matches(&report.mr_signer_seam, &report.seam_attributes) {
        CheckOutcome::Passed(format!(
            "MRSIGNERSEAM and SEAMATTRIBUTES are {}'s",
            if module.id.is_empty() {
                "tdxModule"
            } else {
                &module.id
            }
        ))
    } else {
        CheckOutcome::Failed(AttestationError::Trust(Detail::with(
            &TdxRefusal::TdxModule,
            format!(
                "MRSIGNERSEAM {} / SEAMATTRIBUTES {} are not the TDX module's the TCB info names",
                hex::encode(&report.mr_signer_seam),
                hex::encode(&report.seam_attributes)
            ),
        )))
    }
}

fn accepted(
    reason: &'static TdxRefusal,
    status: TcbStatus,
    policy: &TdxPolicy,
    what: &str,
    advisories: &[String],
) -> CheckOutcome {
    let advice = if advisories.is_empty() {
        String::new()
    } else {
        format!(" (advisories {})", advisories.join(", "))
    };
    if policy.accepted_tcb_statuses.contains(&status) {
        CheckOutcome::Passed(format!("{status}{advice}"))
    } else {
        CheckOutcome::Failed(AttestationError::Policy(Detail::with(
            reason,
            format!(
                "{what} TCB status {status}{advice} is not accepted (the policy accepts {})",
                policy
                    .accepted_tcb_statuses
                    .iter()
                    .map(|s| s.name())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        )))
    }
}

/// [`check::TCB_STATUS`].
fn check_tcb_status(
    report: &TdReport,
    info: Option<&TcbInfo>,
    chain: &Chain,
    policy: &TdxPolicy,
) -> CheckOutcome {
    let (Some(info), Some(sgx)) = (info, chain.sgx.as_ref()) else {
        return skipped("no verified TCB info");
    };
    match info.tcb_status(sgx, &report.tee_tcb_svn) {
        Ok(m) => {
            let mut advisories = m.platform.advisory_ids.clone();
            if let Some(module) = &m.module {
                advisories.extend(module.advisory_ids.iter().cloned());
            }
            accepted(
                &TdxRefusal::TcbStatus,
                m.status,
                policy,
                "the platform's",
                &advisories,
            )
        }
        Err(e) => CheckOutcome::Failed(collateral_err(&TdxRefusal::TcbStatus, e)),
    }
}

/// [`check::QE_IDENTITY`]; the QE identity when it passed.
fn check_qe_identity(
    quote: &Quote,
    collateral: &Collateral,
    roots: &TdxRoots,
    at: i64,
) -> (CheckOutcome, Option<QeIdentity>) {
    let Some(signed) = &collateral.qe_identity else {
        return (skipped("no QE identity given"), None);
    };
    let outcome = (|| {
        let (signer, identity) = collateral_signer(collateral, roots, at, |c| signed.verify(c))
            .map_err(trust(&TdxRefusal::QeIdentity))?;
        check_dates(
            &TdxRefusal::QeIdentity,
            "QE identity",
            identity.issue_date(),
            identity.next_update(),
            at,
        )?;
        let wrong = identity.mismatches(&quote.qe_report);
        if !wrong.is_empty() {
            return Err(AttestationError::Trust(Detail::with(
                &TdxRefusal::QeIdentity,
                format!(
                    "the QE report is not the QE identity's: {}",
                    wrong.join("; ")
                ),
            )));
        }
        let text = format!(
            "{}, MRSIGNER {}…, signed by {signer}",
            identity.id(),
            hex::encode(&identity.mr_signer()[..8])
        );
        Ok((text, identity))
    })();
    match outcome {
        Ok((text, identity)) => (CheckOutcome::Passed(text), Some(identity)),
        Err(e) => (CheckOutcome::Failed(e), None),
    }
}

/// [`check::QE_TCB_STATUS`].
fn check_qe_tcb_status(
    quote: &Quote,
    identity: Option<&QeIdentity>,
    policy: &TdxPolicy,
) -> CheckOutcome {
    let Some(identity) = identity else {
        return skipped("no verified QE identity");
    };
    match identity.tcb_level(quote.qe_report.isv_svn()) {
        Ok(level) => accepted(
            &TdxRefusal::QeTcbStatus,
            level.status,
            policy,
            "the QE's",
            &level.advisory_ids,
        ),
        Err(e) => CheckOutcome::Failed(collateral_err(&TdxRefusal::QeTcbStatus, e)),
    }
}

/// [`check::REPORT_DATA`].
fn check_report_data(report: &TdReport, want: &ReportDataCheck) -> CheckOutcome {
    let got = &report.report_data;
    match want {
        ReportDataCheck::NotChecked => skipped(&format!(
            "no expected value given (actual {})",
            hex::encode(got)
        )),
        ReportDataCheck::ExtraData(extra) => {
            if got[..extra.len()] == extra[..] && got[extra.len()..].iter().all(|b| *b == 0) {
                CheckOutcome::Passed("extra data, zero-padded".into())
            } else {
                CheckOutcome::Failed(AttestationError::Binding(Detail::with(
                    &TdxRefusal::ReportData,
                    format!(
                        "report data {}, expected extra data {} then zeros",
                        hex::encode(got),
                        hex::encode(extra)
                    ),
                )))
            }
        }
        ReportDataCheck::Exact(bytes) => {
            if got == bytes {
                CheckOutcome::Passed("equals the expected 64 bytes".into())
            } else {
                CheckOutcome::Failed(AttestationError::Binding(Detail::with(
                    &TdxRefusal::ReportData,
                    format!(
                        "report data {}, expected {}",
                        hex::encode(got),
                        hex::encode(bytes)
                    ),
                )))
            }
        }
    }
}

/// [`check::DEBUG`].
fn check_debug(report: &TdReport, policy: &TdxPolicy) -> CheckOutcome {
    match (report.debug(), policy.allow_debug) {
        (true, false) => CheckOutcome::Failed(AttestationError::Policy(Detail::with(
            &TdxRefusal::Debug,
            "the TD is debuggable (TDATTRIBUTES.DEBUG): the host can read and change it",
        ))),
        (true, true) => CheckOutcome::Passed("debuggable (the policy permits it)".into()),
        (false, _) => CheckOutcome::Passed("not debuggable".into()),
    }
}

fn names(bits: u64) -> String {
    let n = td_attributes::names(bits);
    if n.is_empty() {
        "none".into()
    } else {
        n.join(", ")
    }
}

/// [`check::TD_ATTRIBUTES`]: the bits other than DEBUG are the policy's
/// exactly, when it names them.
fn check_td_attributes(report: &TdReport, policy: &TdxPolicy) -> CheckOutcome {
    let have = report.td_attributes() & !td_attributes::DEBUG;
    match policy.td_attributes {
        None => CheckOutcome::Passed(format!("{} (not constrained by the policy)", names(have))),
        Some(want) if want == have => CheckOutcome::Passed(names(have)),
        Some(want) => CheckOutcome::Failed(AttestationError::Policy(Detail::with(
            &TdxRefusal::TdAttributes,
            format!(
                "TD attributes {}; the policy requires {}",
                names(have),
                names(want)
            ),
        ))),
    }
}

/// [`check::XFAM`].
fn check_xfam(report: &TdReport, policy: &TdxPolicy) -> CheckOutcome {
    match policy.xfam {
        None => CheckOutcome::Passed(format!(
            "{} (not constrained by the policy)",
            hex::encode(&report.xfam)
        )),
        Some(want) if want == report.xfam => CheckOutcome::Passed(hex::encode(&want)),
        Some(want) => CheckOutcome::Failed(AttestationError::Policy(Detail::with(
            &TdxRefusal::Xfam,
            format!(
                "XFAM {}, the policy requires {}",
                hex::encode(&report.xfam),
                hex::encode(&want)
            ),
        ))),
    }
}

/// [`check::MIN_TEE_TCB_SVN`].
fn check_minimum_svn(report: &TdReport, policy: &TdxPolicy) -> CheckOutcome {
    let have = &report.tee_tcb_svn;
    let Some(min) = &policy.minimum_tee_tcb_svn else {
        return CheckOutcome::Passed(format!("{} (no minimum in the policy)", hex::encode(have)));
    };
    let short: Vec<String> = have
        .iter()
        .zip(min)
        .enumerate()
        .filter(|(_, (h, m))| h < m)
        .map(|(i, (h, m))| format!("byte {i}: {h} < {m}"))
        .collect();
    if short.is_empty() {
        CheckOutcome::Passed(hex::encode(have))
    } else {
        CheckOutcome::Failed(AttestationError::Policy(Detail::with(
            &TdxRefusal::MinimumTeeTcbSvn,
            format!(
                "TEE TCB SVN {} below the minimum {}: {}",
                hex::encode(have),
                hex::encode(min),
                short.join(", ")
            ),
        )))
    }
}

/// `RTMR3` all zero: the TD has not extended the cluster mark since it
/// booted, so it is not bootstrapped (for a validator that
/// [requires it](crate::TdxValidator::require_unmarked)).
pub(crate) fn check_unmarked(report: &TdReport) -> Result<(), AttestationError> {
    let rtmr3 = &report.rtmr[3];
    if rtmr3.iter().all(|b| *b == 0) {
        return Ok(());
    }
    Err(AttestationError::Policy(Detail::with(
        &TdxRefusal::ClusterMarked,
        format!(
            "RTMR3 is {}, not all zero: the TD is already bootstrapped (marked with a cluster id)",
            hex::encode(rtmr3)
        ),
    )))
}

/// How many RTMRs, from `RTMR0`, measure the image (firmware configuration,
/// kernel, command line and initrd) and must be pinned; `RTMR3` is the
/// cluster mark.
const IMAGE_RTMRS: usize = 3;

/// A measurement register against the policy's value. Without one it
/// passes, except the registers that measure the image (`required`:
/// `MRTD`, `RTMR0` to `RTMR2`), which are skipped: a validator then
/// refuses, unless the policy says `insecureAnyImage` (its value is shown).
fn check_value(
    reason: &'static TdxRefusal,
    have: &[u8; 48],
    want: Option<&[u8; 48]>,
    required: bool,
) -> CheckOutcome {
    match want {
        None if required => skipped(&format!(
            "no expected value in the policy (actual {})",
            hex::encode(have)
        )),
        None => CheckOutcome::Passed(format!(
            "{} (not constrained by the policy)",
            hex::encode(have)
        )),
        Some(w) if w == have => CheckOutcome::Passed(hex::encode(have)),
        Some(w) => CheckOutcome::Failed(AttestationError::Policy(Detail::with(
            reason,
            format!(
                "{}, the policy requires {}",
                hex::encode(have),
                hex::encode(w)
            ),
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_marked_rtmr3_is_a_bootstrapped_td() {
        let raw = include_bytes!("../testdata/quote_v4_spr_e4.dat");
        let mut q = Quote::parse(raw).unwrap();
        assert_eq!(q.report.rtmr[3], [0; 48], "the fixture's TD is unmarked");
        assert!(check_unmarked(&q.report).is_ok());
        for byte in [0, 47] {
            q.report.rtmr[3] = [0; 48];
            q.report.rtmr[3][byte] = 1;
            let e = check_unmarked(&q.report).unwrap_err();
            assert!(
                matches!(&e, AttestationError::Policy(d) if d.is(&TdxRefusal::ClusterMarked)),
                "{e:?}"
            );
            assert!(e.to_string().contains("already bootstrapped"), "{e}");
        }
    }

    #[test]
    fn percent_decoding() {
        assert_eq!(
            percent_decode(b"-----BEGIN%20CERT%0A%zz%4"),
            b"-----BEGIN CERT\n%zz%4"
        );
    }
}
