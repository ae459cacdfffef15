//! `confboot verify-quote`: verifies an Intel TDX quote offline and prints
//! each check (✓ passed, ✗ failed, - skipped), one line each. Exits 0 when
//! no check failed, 1 when one did, 2 on bad arguments or unreadable
//! inputs. The checks live in the library (`TdxValidator`); this only reads
//! files and prints. With `-o ear --ear-key KEY.pem` it prints the verdict
//! as a signed attestation result instead ([`crate::ear_output`]).

use std::path::Path;

use confboot_attest::check::{CheckOutcome, CheckResult, ReportDataCheck};
use confboot_attest::measurements::MAX_POLICY_BYTES;
use confboot_attest::{AttestationError, Detail};
use confboot_tdx::{
    CcelLog, Crl, MAX_CCEL_AREA_LEN, MAX_COLLATERAL_LEN, MAX_CRL_LEN, MAX_QUOTE_LEN, Quote,
    SignedQeIdentity, SignedTcbInfo, TdxPolicy, TdxRefusal, TdxRoots, TdxValidator, td_attributes,
};
use confboot_util::args::{Command, Matches, Opt, VERBOSITY, parse_or_exit};
use confboot_util::fs::{read_bounded, read_bounded_text};

use crate::ear_output::{self, EAR_KEY, EarOutputError, EarSigner, OUTPUT, OutputError};
use crate::hex_option::{HexOptionError, hex_array};
use confboot_appraisal::ear::{TDX_EVENT_LOG_CHECK, TrustVector, Verdict};
use confboot_util::fs::FileError;

const QUOTE: Opt = Opt::value(
    "quote",
    "FILE",
    "The raw TDX quote (version 4 or 5), as configfs-tsm or a quote generator writes it",
);
const TCB_INFO: Opt = Opt::value(
    "tcb-info",
    "FILE",
    "Intel PCS TCB info for the platform's FMSPC, as served (tdx/certification/v4/tcb?fmspc=…)",
);
const QE_IDENTITY: Opt = Opt::value(
    "qe-identity",
    "FILE",
    "Intel PCS TD QE identity, as served (tdx/certification/v4/qe/identity)",
);
const PCK_CRL: Opt = Opt::value(
    "pck-crl",
    "FILE",
    "The CRL of the PCK CA that issued the quote's PCK certificate (DER or PEM)",
);
const ROOT_CRL: Opt = Opt::value(
    "root-crl",
    "FILE",
    "The Intel SGX Root CA's CRL (DER or PEM)",
);
const TCB_SIGNING_CHAIN: Opt = Opt::value(
    "tcb-signing-chain",
    "FILE",
    "The PCS TCB-Info-Issuer-Chain header (PEM, URL-encoded or not) naming the TCB signing \
     certificate; without it the built-in 2018 certificate is tried",
);
const EVENT_LOG: Opt = Opt::value(
    "event-log",
    "FILE",
    "The TD's CCEL log area (/sys/firmware/acpi/tables/data/CCEL): replayed, it must give the \
     quoted RTMRs; its events are printed",
);
const POLICY: Opt = Opt::value(
    "policy",
    "FILE",
    "TDX policy JSON (mrtd, rtmrs, tdAttributes, xfam, acceptedTcbStatuses, ...)",
);
const EXTRA_DATA: Opt = Opt::value(
    "extra-data",
    "HEX",
    "Expect confboot's binding: REPORTDATA = these 32 bytes, then 32 zero bytes",
);
const REPORT_DATA: Opt = Opt::value(
    "report-data",
    "HEX",
    "Expect REPORTDATA to equal these 64 bytes exactly",
);
const AT: Opt = Opt::value(
    "at",
    "TIME",
    "Check certificates, CRLs and collateral at TIME (Unix seconds, YYYY-MM-DD or \
     YYYY-MM-DDTHH:MM:SSZ) instead of now, to examine recorded collateral",
);

/// The command's options and help.
pub const CMD: Command = Command {
    name: "confboot verify-quote",
    about: "Verifies an Intel TDX quote offline and prints every check on its own line \
(✓ passed, ✗ failed, - skipped): the PCK chain to the pinned Intel SGX Root CA, the CRLs when \
given, the QE report and its binding of the attestation key, the quote signature, TCB info and \
QE identity (Intel's PCS answers as served) with the TCB status by Intel's algorithm, then the \
policy. Without --policy nothing is pinned (the measurements are shown), debug is refused and \
only the UpToDate TCB status is accepted. Collateral files the policy names are used unless \
an option names that piece. With --event-log the CCEL log is replayed and compared with the \
quoted RTMRs. Nothing is fetched. With -o json, prints one JSON object (the layout of every \
verify-* command). With -o ear, prints the verdict as an EAT attestation result \
(draft-ietf-rats-ear): one JWT signed with --ear-key (ES256). \
Exit status: 0 all checks passed, 1 a check failed, 2 bad arguments or unreadable input.",
    usage: "confboot verify-quote --quote FILE [--tcb-info FILE] [--qe-identity FILE] \
[--pck-crl FILE] [--root-crl FILE] [--event-log FILE] [--policy FILE] [--at RFC3339] [OPTIONS]",
    opts: &[
        QUOTE,
        TCB_INFO,
        QE_IDENTITY,
        PCK_CRL,
        ROOT_CRL,
        TCB_SIGNING_CHAIN,
        EVENT_LOG,
        POLICY,
        EXTRA_DATA,
        REPORT_DATA,
        AT,
        OUTPUT,
        EAR_KEY,
        VERBOSITY,
    ],
};

/// What `confboot verify-quote` runs with.
#[derive(Clone, Debug)]
struct Config {
    quote: String,
    tcb_info: Option<String>,
    qe_identity: Option<String>,
    pck_crl: Option<String>,
    root_crl: Option<String>,
    tcb_signing_chain: Option<String>,
    event_log: Option<String>,
    policy: Option<String>,
    at: Option<i64>,
    report_data: ReportDataCheck,
    /// What is printed: text, JSON or a signed result.
    output: ear_output::Output,
}

/// A TDX parser's error: the crate does not name its types, so it is held
/// whole behind the error trait.
type TdxParseError = Box<dyn std::error::Error + Send + Sync>;

/// Why `verify-quote` gave no verdict (exit 2): an option, or a file it
/// names.
#[derive(Debug, thiserror::Error)]
enum VerifyQuoteError {
    /// A positional argument.
    #[error("unexpected argument {0:?}")]
    Unexpected(String),
    /// No `--quote`.
    #[error("--quote FILE is required")]
    QuoteRequired,
    /// `--at` is not an instant.
    #[error("--{option} {0}", option = AT.long)]
    At(confboot_util::time::InstantError),
    /// Both report-data options.
    #[error("give --extra-data or --report-data, not both")]
    BothReportData,
    /// A hex option is not the hex it wants.
    #[error(transparent)]
    Hex(#[from] HexOptionError),
    /// `-o` and `--ear-key` do not go together.
    #[error(transparent)]
    Output(#[from] OutputError),
    /// The attestation result cannot be signed.
    #[error(transparent)]
    Ear(#[from] EarOutputError),
    /// An input file cannot be read.
    #[error("{what} {path}: {error}")]
    Read {
        /// What the file holds (`quote`, `TCB info`).
        what: &'static str,
        /// The file.
        path: String,
        /// Why.
        error: FileError,
    },
    /// The `--policy` file cannot be read.
    #[error("{0}")]
    PolicyFile(FileError),
    /// A file is not what it should hold, or the policy is not usable.
    #[error("{path}: {error}")]
    Parse {
        /// The file.
        path: String,
        /// Why.
        error: TdxParseError,
    },
    /// The policy gives no validator.
    #[error("{0}")]
    Validator(TdxParseError),
}

impl Config {
    /// Reads every option (each once, whatever the others say).
    fn from_matches(m: &Matches) -> Result<Config, VerifyQuoteError> {
        let given = |opt: &Opt| m.value(opt).map(str::to_string);
        let quote = given(&QUOTE);
        let tcb_info = given(&TCB_INFO);
        let qe_identity = given(&QE_IDENTITY);
        let pck_crl = given(&PCK_CRL);
        let root_crl = given(&ROOT_CRL);
        let tcb_signing_chain = given(&TCB_SIGNING_CHAIN);
        let event_log = given(&EVENT_LOG);
        let policy = given(&POLICY);
        let at = given(&AT);
        let (extra_data, report_data) = (given(&EXTRA_DATA), given(&REPORT_DATA));
        let output = ear_output::output(m);
        if !m.positional().is_empty() {
            return Err(VerifyQuoteError::Unexpected(m.positional()[0].clone()));
        }
        let quote = quote.ok_or(VerifyQuoteError::QuoteRequired)?;
        let at = at
            .map(|at| confboot_util::time::parse_instant(&at).map_err(VerifyQuoteError::At))
            .transpose()?;
        let report_data = match (extra_data, report_data) {
            (Some(_), Some(_)) => return Err(VerifyQuoteError::BothReportData),
            (Some(h), None) => ReportDataCheck::ExtraData(hex_array(&h, "--extra-data")?),
            (None, Some(h)) => ReportDataCheck::Exact(hex_array(&h, "--report-data")?),
            (None, None) => ReportDataCheck::NotChecked,
        };
        let output = output?;
        Ok(Config {
            quote,
            tcb_info,
            qe_identity,
            pck_crl,
            root_crl,
            tcb_signing_chain,
            event_log,
            policy,
            at,
            report_data,
            output,
        })
    }
}

/// Runs the command on the arguments that follow `verify-quote`; returns
/// the exit status.
pub fn run(args: Vec<String>) -> i32 {
    let m = parse_or_exit(&CMD, args);
    let verbosity = match m.verbosity() {
        Ok(v) => v,
        Err(e) => return usage_error(&e.to_string()),
    };
    confboot_util::logging::init("verify-quote", verbosity);
    match Config::from_matches(&m).and_then(|config| verify_quote(&config)) {
        Ok(status) => status,
        Err(e) => usage_error(&e.to_string()),
    }
}

fn usage_error(msg: &str) -> i32 {
    eprintln!("verify-quote: {msg}\nTry 'confboot verify-quote --help'.");
    2
}

/// Reads an input file of at most `limit` bytes.
fn read(path: &str, what: &'static str, limit: usize) -> Result<Vec<u8>, VerifyQuoteError> {
    read_bounded(Path::new(path), limit as u64)
        .map(|mut bytes| std::mem::take(&mut *bytes))
        .map_err(|error| VerifyQuoteError::Read {
            what,
            path: path.to_string(),
            error,
        })
}

/// `path: ERROR` for a file a TDX parser refused.
fn refused<E: std::error::Error + Send + Sync + 'static>(
    path: &str,
) -> impl FnOnce(E) -> VerifyQuoteError {
    let path = path.to_string();
    move |error| VerifyQuoteError::Parse {
        path,
        error: Box::new(error),
    }
}

/// The refusal's name of a failed check, for `-o json`.
fn reason(c: &CheckResult) -> Option<String> {
    match &c.outcome {
        CheckOutcome::Failed(e) => e
            .detail()
            .and_then(|d| d.reason::<confboot_tdx::TdxRefusal>())
            .map(|r| format!("{r:?}")),
        _ => None,
    }
}

fn verify_quote(config: &Config) -> Result<i32, VerifyQuoteError> {
    let ear = match &config.output {
        ear_output::Output::Ear(key) => {
            let id = ear_output::policy_id(config.policy.as_deref().map(Path::new))?;
            Some(EarSigner::load(key, "confboot verify-quote", id)?)
        }
        ear_output::Output::Text | ear_output::Output::Json => None,
    };
    let raw_quote = read(&config.quote, "quote", MAX_QUOTE_LEN)?;
    let quote = Quote::parse(&raw_quote).map_err(refused(&config.quote))?;
    let validator = match &config.policy {
        Some(path) => {
            let path = Path::new(path);
            let text =
                read_bounded_text(path, MAX_POLICY_BYTES).map_err(VerifyQuoteError::PolicyFile)?;
            // A policy must pin the image (MRTD, RTMR0 to RTMR2), as
            // everywhere a TDX policy is read.
            let policy = TdxPolicy::from_json_at(&text, path.parent())
                .map_err(refused(&path.display().to_string()))?;
            TdxValidator::new(policy).map_err(|e| VerifyQuoteError::Validator(Box::new(e)))?
        }
        // No policy: the measurement registers' checks are skipped (shown,
        // not asked for), under Intel's root.
        None => TdxValidator::with_roots(TdxPolicy::default(), TdxRoots::intel()),
    };
    // The policy's collateral files, each replaced by the option that
    // names that piece.
    let mut collateral = validator.collateral().clone();
    if let Some(path) = &config.tcb_info {
        let bytes = read(path, "TCB info", MAX_COLLATERAL_LEN)?;
        collateral.tcb_info = Some(SignedTcbInfo::parse(&bytes).map_err(refused(path))?);
    }
    if let Some(path) = &config.qe_identity {
        let bytes = read(path, "QE identity", MAX_COLLATERAL_LEN)?;
        collateral.qe_identity = Some(SignedQeIdentity::parse(&bytes).map_err(refused(path))?);
    }
    if let Some(path) = &config.pck_crl {
        let bytes = read(path, "PCK CRL", MAX_CRL_LEN)?;
        collateral.pck_crl = Some(Crl::parse(&bytes).map_err(refused(path))?);
    }
    if let Some(path) = &config.root_crl {
        let bytes = read(path, "root CRL", MAX_CRL_LEN)?;
        collateral.root_crl = Some(Crl::parse(&bytes).map_err(refused(path))?);
    }
    if let Some(path) = &config.tcb_signing_chain {
        let bytes = read(path, "TCB signing chain", MAX_COLLATERAL_LEN)?;
        collateral
            .add_tcb_signing_chain(&bytes)
            .map_err(refused(path))?;
    }
    let validator = validator.with_collateral(collateral);
    let event_log = match &config.event_log {
        Some(path) => Some(
            CcelLog::parse(&read(path, "event log", MAX_CCEL_AREA_LEN)?).map_err(refused(path))?,
        ),
        None => None,
    };
    let validator = match config.at {
        Some(at) => validator.as_of(at),
        None => validator,
    };

    let r = &quote.report;
    if let Some(ear) = &ear {
        let mut checks = Vec::new();
        if let Some(log) = &event_log {
            checks.push(event_log_check(log, &quote));
        }
        checks.extend(validator.verify_quote_detailed(&quote, &config.report_data));
        let verdict = Verdict {
            // The command's verdict: no check failed (a skipped one was
            // not asked for).
            passed: !checks
                .iter()
                .any(|c| matches!(c.outcome, CheckOutcome::Failed(_))),
            debuggable: r.debug(),
        };
        let vector = TrustVector::of_tdx_checks(&checks, verdict);
        return Ok(ear.print(
            confboot_attest::Variant::Tdx,
            &raw_quote,
            verdict.passed,
            vector,
        ));
    }
    let header = format!(
        "TDX quote: version {}, {} body, MRTD {}, TD attributes {:#018x} ({})",
        quote.header.version,
        r.body_type,
        confboot_util::hex::encode(&r.mr_td),
        r.td_attributes(),
        td_attributes::names(r.td_attributes()).join(", ")
    );
    if config.output == ear_output::Output::Json {
        let mut checks = Vec::new();
        if let Some(log) = &event_log {
            checks.push(event_log_check(log, &quote));
        }
        checks.extend(validator.verify_quote_detailed(&quote, &config.report_data));
        let subject = crate::check_report::Subject {
            command: "verify-quote",
            variant: "tdx",
            header,
            at: Some(config.at.unwrap_or_else(confboot_util::time::unix_now)),
        };
        return Ok(crate::check_report::print(&subject, &checks, reason, true));
    }
    println!("{header}");
    if quote.trailing_len() > 0 {
        println!(
            "note: {} unsigned bytes after the signature data are ignored",
            quote.trailing_len()
        );
    }
    let mut checks = Vec::new();
    if let Some(log) = &event_log {
        for line in log.lines() {
            println!("  event {line}");
        }
        checks.push(event_log_check(log, &quote));
    }
    checks.extend(validator.verify_quote_detailed(&quote, &config.report_data));
    let (mut passed, mut failed, mut skipped) = (0, 0, 0);
    for c in &checks {
        println!("{c}");
        match c.outcome {
            CheckOutcome::Passed(_) => passed += 1,
            CheckOutcome::Failed(_) => failed += 1,
            CheckOutcome::Skipped(_) => skipped += 1,
        }
    }
    if failed == 0 {
        println!("VERIFIED: {passed} checks passed, {skipped} skipped");
        Ok(0)
    } else {
        println!("FAILED: {failed} of {} checks failed", checks.len());
        Ok(1)
    }
}

/// The replay of the CCEL log against the quoted RTMRs, as a check.
fn event_log_check(log: &CcelLog, quote: &Quote) -> CheckResult {
    CheckResult {
        name: TDX_EVENT_LOG_CHECK,
        outcome: match log.check_replay(&quote.report.rtmr) {
            Ok(()) => CheckOutcome::Passed(format!(
                "{} events replay to the quoted RTMRs",
                log.events().len()
            )),
            Err(e) => CheckOutcome::Failed(AttestationError::EventLog(Detail::with(
                &TdxRefusal::EventLog,
                e.to_string(),
            ))),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_option_the_config_reads_is_declared() {
        let m = CMD
            .parse(["--quote", "q.dat"].into_iter().map(String::from))
            .unwrap();
        let c = Config::from_matches(&m).unwrap();
        assert_eq!(c.quote, "q.dat");
        assert_eq!(c.report_data, ReportDataCheck::NotChecked);
    }
}
