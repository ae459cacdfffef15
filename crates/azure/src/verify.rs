//! The Azure checks, one function each: the hardware report's own checks
//! (the SEV-SNP or TDX crate's), then those that tie the vTPM to it.

use std::collections::BTreeMap;

use ring::signature::{RSA_PKCS1_2048_8192_SHA256, RsaPublicKeyComponents};

use crate::AzureRefusal;
use crate::claims::{RsaPublicKey, RuntimeClaims};
use crate::evidence::{AzureEvidence, TpmQuote};
use crate::hcl::{HardwareKind, HclReport, TD_REPORT_LEN, td_report};
use confboot_attest::check::{CheckOutcome, CheckResult, ReportDataCheck, WARNING_MARK};
use confboot_attest::measurements::MeasurementPolicy;
use confboot_attest::{AttestationError, Detail};
use confboot_snp::{AmdCert, CertEntry, CertKind, CertRole, SnpEvidence, SnpReport, SnpValidator};
use confboot_tdx::{Quote, TdxValidator};
use confboot_tpm::structures::{QuoteInfo, TPM_ALG_SHA256, parse_quote_attest};
use confboot_util::hex;

/// Names of the checks this crate adds, in the order they run; the
/// hardware report's checks (named by `confboot_snp::check` or
/// `confboot_tdx::check`, less their report-data check, which
/// [`CLAIMS_BINDING`](check::CLAIMS_BINDING) replaces) run after [`HARDWARE_REPORT`](check::HARDWARE_REPORT).
pub mod check {
    /// The HCL report parses and carries the variant's hardware report.
    pub const HCL_REPORT: &str = "HCL report";
    /// The hardware report (SEV-SNP report, or TD quote) parses.
    pub const HARDWARE_REPORT: &str = "hardware report";
    /// `REPORT_DATA` = SHA-256(runtime claims) ‖ 32 zero bytes.
    pub const CLAIMS_BINDING: &str = "runtime claims binding";
    /// TDX: the HCL report's TDREPORT has the TD quote's `REPORTDATA` and `MRTD`.
    pub const TD_REPORT: &str = "TD report";
    /// `HCLAkPub`: one RSA signing key in the runtime claims.
    pub const ATTESTATION_KEY: &str = "attestation key";
    /// The quote's `TPMS_ATTEST` parses and selects the PCRs sent (SHA-256).
    pub const QUOTE: &str = "vTPM quote";
    /// RSASSA-PKCS1-v1_5 SHA-256 by `HCLAkPub` over the `TPMS_ATTEST`.
    pub const QUOTE_SIGNATURE: &str = "vTPM quote signature";
    /// `extraData` is the session's nonce.
    pub const NONCE: &str = "nonce";
    /// SHA-256 of the PCR values is the quote's `pcrDigest`.
    pub const PCR_DIGEST: &str = "PCR digest";
    /// The PCRs against the policy.
    pub const PCRS: &str = "PCRs";
}

/// What verifies the hardware report.
#[derive(Clone, Debug)]
pub enum Hardware {
    /// Azure SEV-SNP: the SEV-SNP validator (its policy and pinned ARKs).
    SevSnp(Box<SnpValidator>),
    /// Azure TDX: the TDX validator (its policy, pinned root and collateral).
    Tdx(Box<TdxValidator>),
}

impl Hardware {
    /// The kind of hardware report it verifies.
    pub fn kind(&self) -> HardwareKind {
        match self {
            Hardware::SevSnp(_) => HardwareKind::SevSnp,
            Hardware::Tdx(_) => HardwareKind::Tdx,
        }
    }
}

/// The nonce the quote's `extraData` must be.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Nonce {
    /// Exactly these bytes.
    Expected(Vec<u8>),
    /// Not checked (an offline look): reported as skipped, so no verdict admits.
    NotChecked,
}

fn skipped(why: &str) -> CheckOutcome {
    CheckOutcome::Skipped(why.to_string())
}

fn fail(
    kind: fn(Detail) -> AttestationError,
    reason: &'static AzureRefusal,
    text: impl Into<String>,
) -> CheckOutcome {
    CheckOutcome::Failed(kind(Detail::with(reason, text)))
}

/// Runs every check on `evidence` (see [`check`]): nothing is
/// short-circuited; a check whose input is missing is skipped with the
/// reason.
pub fn run_checks(
    evidence: &AzureEvidence,
    hardware: &Hardware,
    nonce: &Nonce,
    pcrs: &MeasurementPolicy,
) -> Vec<CheckResult> {
    let mut out = Vec::new();
    let mut push = |name: &'static str, outcome: CheckOutcome| {
        out.push(CheckResult { name, outcome });
    };
    let (hcl_outcome, hcl) = check_hcl_report(&evidence.hcl_report, hardware.kind());
    push(check::HCL_REPORT, hcl_outcome);
    let mut report_data = None;
    match (&hcl, hardware) {
        (None, _) => push(check::HARDWARE_REPORT, skipped("no HCL report")),
        (Some(hcl), Hardware::SevSnp(v)) => match snp_evidence(hcl, &evidence.vcek_chain) {
            Err(e) => push(check::HARDWARE_REPORT, CheckOutcome::Failed(e)),
            Ok(snp) => {
                push(
                    check::HARDWARE_REPORT,
                    CheckOutcome::Passed(format!(
                        "SEV-SNP report version {}",
                        snp.report.version()
                    )),
                );
                for c in v.verify_report_detailed(&snp, &ReportDataCheck::NotChecked) {
                    if c.name != confboot_snp::check::REPORT_DATA {
                        out.push(c);
                    }
                }
                report_data = Some(<[u8; 64]>::try_from(snp.report.report_data()).ok());
            }
        },
        (Some(hcl), Hardware::Tdx(v)) => match td_quote(evidence) {
            Err(e) => push(check::HARDWARE_REPORT, CheckOutcome::Failed(e)),
            Ok(quote) => {
                push(
                    check::HARDWARE_REPORT,
                    CheckOutcome::Passed(format!("TD quote version {}", quote.header.version)),
                );
                for c in v.verify_quote_detailed(&quote, &ReportDataCheck::NotChecked) {
                    if c.name != confboot_tdx::check::REPORT_DATA {
                        out.push(c);
                    }
                }
                out.push(CheckResult {
                    name: check::TD_REPORT,
                    outcome: check_td_report(hcl, &quote),
                });
                report_data = Some(Some(quote.report.report_data));
            }
        },
    }
    let mut push = |name: &'static str, outcome: CheckOutcome| {
        out.push(CheckResult { name, outcome });
    };
    push(
        check::CLAIMS_BINDING,
        match (&hcl, report_data.flatten()) {
            (Some(hcl), Some(rd)) => check_claims_binding(hcl, &rd),
            _ => skipped("no hardware report"),
        },
    );
    let (ak_outcome, ak) = match &hcl {
        Some(hcl) => check_attestation_key(hcl),
        None => (skipped("no HCL report"), None),
    };
    push(check::ATTESTATION_KEY, ak_outcome);
    let (quote_outcome, info) = check_quote(&evidence.tpm_quote);
    push(check::QUOTE, quote_outcome);
    push(
        check::QUOTE_SIGNATURE,
        match &ak {
            Some(ak) => check_quote_signature(&evidence.tpm_quote, ak),
            None => skipped("no attestation key"),
        },
    );
    push(
        check::NONCE,
        match &info {
            Some(info) => check_nonce(info, nonce),
            None => skipped("no quote"),
        },
    );
    push(
        check::PCR_DIGEST,
        match &info {
            Some(info) => check_pcr_digest(info, &evidence.tpm_quote),
            None => skipped("no quote"),
        },
    );
    push(
        check::PCRS,
        match &info {
            Some(info) => check_pcrs(info, &evidence.tpm_quote, pcrs),
            None => skipped("no quote"),
        },
    );
    out
}

/// [`check::HCL_REPORT`]: the HCL report parses and carries `want`.
fn check_hcl_report(bytes: &[u8], want: HardwareKind) -> (CheckOutcome, Option<HclReport<'_>>) {
    match HclReport::parse(bytes) {
        Err(e) => (
            fail(
                AttestationError::Decode,
                &AzureRefusal::HclReport,
                e.to_string(),
            ),
            None,
        ),
        Ok(r) if r.kind != want => (
            fail(
                AttestationError::Policy,
                &AzureRefusal::HardwareKind,
                format!(
                    "the HCL report carries a {} report, the variant wants {}",
                    r.kind.name(),
                    want.name()
                ),
            ),
            None,
        ),
        Ok(r) => (
            CheckOutcome::Passed(format!(
                "version {}, {} report, {} bytes of runtime claims",
                r.version,
                r.kind.name(),
                r.runtime_claims.len()
            )),
            Some(r),
        ),
    }
}

/// The SEV-SNP evidence: the HCL report's SNP report and the certificates
/// sent, each filed by the role its subject names.
fn snp_evidence(hcl: &HclReport<'_>, chain: &[Vec<u8>]) -> Result<SnpEvidence, AttestationError> {
    let report = SnpReport::from_bytes(hcl.hardware_report).map_err(|e| {
        AttestationError::Decode(Detail::with(
            &AzureRefusal::HardwareReport,
            format!("SEV-SNP report: {e}"),
        ))
    })?;
    let certificates = chain
        .iter()
        .take(confboot_snp::MAX_CERTIFICATES)
        .filter_map(|der| {
            let kind = match AmdCert::from_der(der).ok()?.role() {
                CertRole::Vcek => CertKind::Vcek,
                CertRole::Vlek => CertKind::Vlek,
                CertRole::Ask => CertKind::Ask,
                CertRole::Asvk => CertKind::Asvk,
                CertRole::Ark => CertKind::Ark,
            };
            Some(CertEntry {
                kind,
                der: der.clone(),
            })
        })
        .collect();
    Ok(SnpEvidence {
        report,
        certificates,
    })
}

/// The TD quote the evidence carries, parsed.
fn td_quote(evidence: &AzureEvidence) -> Result<Quote, AttestationError> {
    let bytes = evidence.td_quote.as_deref().ok_or_else(|| {
        AttestationError::Decode(Detail::with(
            &AzureRefusal::HardwareReport,
            "no TD quote: the TDREPORT alone cannot be verified off the platform",
        ))
    })?;
    Quote::parse(bytes).map_err(|e| {
        AttestationError::Decode(Detail::with(
            &AzureRefusal::HardwareReport,
            format!("TD quote: {e}"),
        ))
    })
}

/// [`check::CLAIMS_BINDING`]: `REPORT_DATA` is SHA-256 of the runtime
/// claims, then 32 zero bytes.
fn check_claims_binding(hcl: &HclReport<'_>, report_data: &[u8; 64]) -> CheckOutcome {
    let digest = hcl.claims_digest();
    if report_data[..32] != digest {
        return fail(
            AttestationError::Binding,
            &AzureRefusal::ClaimsBinding,
            format!(
                "report data starts with {}, SHA-256 of the runtime claims is {}",
                hex::encode(&report_data[..32]),
                hex::encode(&digest)
            ),
        );
    }
    if report_data[32..].iter().any(|b| *b != 0) {
        return fail(
            AttestationError::Binding,
            &AzureRefusal::ClaimsBinding,
            format!(
                "report data bytes 32..64 are not zero: {}",
                hex::encode(&report_data[32..])
            ),
        );
    }
    CheckOutcome::Passed(format!("SHA-256 {}", hex::encode(&digest)))
}

/// [`check::TD_REPORT`]: the HCL report's TDREPORT (whose MAC only the
/// platform can check) names the TD quote's `REPORTDATA` and `MRTD`.
fn check_td_report(hcl: &HclReport<'_>, quote: &Quote) -> CheckOutcome {
    let td = hcl.hardware_report;
    if td.len() != TD_REPORT_LEN {
        return fail(
            AttestationError::Decode,
            &AzureRefusal::TdReport,
            format!("TDREPORT of {} bytes", td.len()),
        );
    }
    let rd = &td[td_report::REPORT_DATA..td_report::REPORT_DATA + 64];
    let mrtd = &td[td_report::MRTD..td_report::MRTD + 48];
    if rd != quote.report.report_data {
        return fail(
            AttestationError::Binding,
            &AzureRefusal::TdReport,
            "the HCL report's TDREPORT has another REPORTDATA than the TD quote",
        );
    }
    if mrtd != quote.report.mr_td {
        return fail(
            AttestationError::Binding,
            &AzureRefusal::TdReport,
            "the HCL report's TDREPORT has another MRTD than the TD quote",
        );
    }
    CheckOutcome::Passed("REPORTDATA and MRTD are the TD quote's".into())
}

/// [`check::ATTESTATION_KEY`]: the runtime claims parse and carry one RSA
/// signing key `HCLAkPub`.
fn check_attestation_key(hcl: &HclReport<'_>) -> (CheckOutcome, Option<RsaPublicKey>) {
    match RuntimeClaims::parse(hcl.runtime_claims).and_then(|c| c.attestation_key()) {
        Ok(k) => (
            CheckOutcome::Passed(format!("HCLAkPub, RSA-{}", k.bits())),
            Some(k),
        ),
        Err(e) => (
            fail(
                AttestationError::Trust,
                &AzureRefusal::AttestationKey,
                e.to_string(),
            ),
            None,
        ),
    }
}

/// [`check::QUOTE`]: the `TPMS_ATTEST` is a quote over one SHA-256 bank
/// whose PCRs are as many as the values sent.
fn check_quote(quote: &TpmQuote) -> (CheckOutcome, Option<QuoteInfo>) {
    let info = match parse_quote_attest(&quote.message) {
        Ok(i) => i,
        Err(e) => {
            return (
                fail(
                    AttestationError::Decode,
                    &AzureRefusal::Quote,
                    e.to_string(),
                ),
                None,
            );
        }
    };
    let [sel] = info.pcr_selections.as_slice() else {
        return (
            fail(
                AttestationError::Decode,
                &AzureRefusal::Quote,
                format!(
                    "the quote selects {} PCR banks, want one",
                    info.pcr_selections.len()
                ),
            ),
            None,
        );
    };
    if sel.hash_alg != TPM_ALG_SHA256 {
        return (
            fail(
                AttestationError::Decode,
                &AzureRefusal::Quote,
                format!("the quote's bank is {:#06x}, want SHA-256", sel.hash_alg),
            ),
            None,
        );
    }
    if sel.pcr_indices.len() != quote.pcrs.len() {
        return (
            fail(
                AttestationError::Decode,
                &AzureRefusal::Quote,
                format!(
                    "the quote selects {} PCRs, {} values were sent",
                    sel.pcr_indices.len(),
                    quote.pcrs.len()
                ),
            ),
            None,
        );
    }
    let text = format!("SHA-256 PCRs {:?}", sel.pcr_indices);
    (CheckOutcome::Passed(text), Some(info))
}

/// [`check::QUOTE_SIGNATURE`]: RSASSA-PKCS1-v1_5 with SHA-256 by `HCLAkPub`.
fn check_quote_signature(quote: &TpmQuote, ak: &RsaPublicKey) -> CheckOutcome {
    let key = RsaPublicKeyComponents {
        n: ak.n.as_slice(),
        e: ak.e.as_slice(),
    };
    match key.verify(
        &RSA_PKCS1_2048_8192_SHA256,
        &quote.message,
        &quote.signature,
    ) {
        Ok(()) => CheckOutcome::Passed("RSASSA-PKCS1-v1_5 SHA-256 by HCLAkPub".into()),
        Err(_) => fail(
            AttestationError::Signature,
            &AzureRefusal::QuoteSignature,
            "the quote's signature does not verify under HCLAkPub",
        ),
    }
}

/// [`check::NONCE`]: `extraData` is the nonce.
fn check_nonce(info: &QuoteInfo, nonce: &Nonce) -> CheckOutcome {
    match nonce {
        Nonce::NotChecked => skipped(&format!(
            "no nonce given (extraData {})",
            hex::encode(&info.extra_data)
        )),
        Nonce::Expected(want) if *want == info.extra_data => {
            CheckOutcome::Passed(hex::encode(want))
        }
        Nonce::Expected(want) => fail(
            AttestationError::Binding,
            &AzureRefusal::Nonce,
            format!(
                "extraData {}, expected {}",
                hex::encode(&info.extra_data),
                hex::encode(want)
            ),
        ),
    }
}

/// [`check::PCR_DIGEST`]: the values sent hash to `pcrDigest`.
fn check_pcr_digest(info: &QuoteInfo, quote: &TpmQuote) -> CheckOutcome {
    let digest = confboot_tpm::pcr_digest(quote.pcrs.iter().map(|p| p.as_slice()));
    if digest.as_slice() == info.pcr_digest {
        CheckOutcome::Passed(hex::encode(&digest))
    } else {
        fail(
            AttestationError::Signature,
            &AzureRefusal::PcrDigest,
            format!(
                "the PCR values hash to {}, the quote's pcrDigest is {}",
                hex::encode(&digest),
                hex::encode(&info.pcr_digest)
            ),
        )
    }
}

/// The PCR values by index, as the quote selects them.
pub(crate) fn pcr_map(info: &QuoteInfo, quote: &TpmQuote) -> BTreeMap<u32, Vec<u8>> {
    info.pcr_selections
        .first()
        .map(|sel| {
            sel.pcr_indices
                .iter()
                .zip(&quote.pcrs)
                .map(|(i, v)| (*i, v.to_vec()))
                .collect()
        })
        .unwrap_or_default()
}

/// [`check::PCRS`]: the quoted PCRs against the policy (skipped when it
/// names none).
fn check_pcrs(info: &QuoteInfo, quote: &TpmQuote, policy: &MeasurementPolicy) -> CheckOutcome {
    if policy.entries().is_empty() {
        return skipped("no expected PCRs in the policy");
    }
    match policy.check(&pcr_map(info, quote)) {
        Ok(w) if w.is_empty() => {
            let pinned: Vec<u32> = policy.entries().keys().copied().collect();
            CheckOutcome::Passed(format!("PCRs {pinned:?} as expected"))
        }
        Ok(w) => CheckOutcome::Passed(format!("{WARNING_MARK}{}", w.join("; "))),
        Err(e) => CheckOutcome::Failed(e),
    }
}
