//! `confboot verify-report`: verifies an AMD SEV-SNP attestation report
//! offline and prints each check (✓ passed, ✗ failed, - skipped), one line
//! each. Exits 0 when no check failed, 1 when one did, 2 on bad arguments
//! or unreadable inputs. With `-o ear --ear-key KEY.pem` it prints the
//! verdict as a signed attestation result instead ([`crate::ear_output`]). The checks themselves live in the library
//! (`SnpValidator::verify_report_detailed`); this only reads files and prints.

use std::path::Path;

use confboot_attest::check::{CheckOutcome, ReportDataCheck};
use confboot_attest::measurements::MAX_POLICY_BYTES;
use confboot_snp::{
    AmdCert, CertEntry, CertKind, CertRole, KDS_BASE_URL, Product, ProductRoot, SigningKey,
    SnpEvidence, SnpPolicy, SnpRefusal, SnpReport, SnpValidator, TrustRoots,
    certificates_from_pem_or_der, check, kds_vcek_url,
};
use confboot_util::args::{Command, Matches, Opt, VERBOSITY, parse_or_exit};
use confboot_util::fs::{MAX_CONFIG_FILE_BYTES, read_bounded, read_bounded_text};

use crate::ear_output::{self, EAR_KEY, EarOutputError, EarSigner, OUTPUT, OutputError};
use crate::hex_option::{HexOptionError, hex_array};
use confboot_appraisal::ear::{TrustVector, Verdict};
use confboot_util::args::ArgsError;
use confboot_util::fs::FileError;

const REPORT: Opt = Opt::value(
    "report",
    "FILE",
    "The raw 1184-byte attestation report (as snpguest report writes it)",
);
const EVIDENCE: Opt = Opt::value(
    "evidence",
    "FILE",
    "Instead of --report: confboot sev-snp evidence (confboot.snp.Evidence, as carried in aTLS)",
);
const VCEK: Opt = Opt::value(
    "vcek",
    "FILE",
    "The VCEK or VLEK that signed the report (DER or PEM)",
);
const CERTS: Opt = Opt::value(
    "certs",
    "DIR",
    "A certificate-table directory (snpguest certificates): vcek/vlek/ask/asvk/ark .der or .pem",
);
const CHAIN: Opt = Opt::value(
    "chain",
    "FILE",
    "PEM with the ASK and/or ASVK (and ARK, which is ignored: roots are pinned)",
);
const ROOTS: Opt = Opt::value(
    "roots",
    "FILE",
    "Pin this PEM bundle (ARK, optional ASK/ASVK) instead of the built-in roots (repeatable)",
);
const POLICY: Opt = Opt::value(
    "policy",
    "FILE",
    "SEV-SNP policy JSON (measurement, minimumTcb, vmpl, ...); also --snp-policy, its name \
     on init, recover and verify",
)
.aliases(&["snp-policy"]);
const EXTRA_DATA: Opt = Opt::value(
    "extra-data",
    "HEX",
    "Expect confboot's binding: report_data = these 32 bytes, then 32 zero bytes",
);
const REPORT_DATA: Opt = Opt::value(
    "report-data",
    "HEX",
    "Expect report_data to equal these 64 bytes exactly",
);
const VMPL: Opt = Opt::value("vmpl", "N", "Require this VMPL (overrides the policy's)");
const AT: Opt = Opt::value(
    "at",
    "TIME",
    "Check certificate validity at TIME (Unix seconds, YYYY-MM-DD or YYYY-MM-DDTHH:MM:SSZ) instead of now, to examine an old report",
);
const VCEK_CACHE: Opt = Opt::value(
    "vcek-cache",
    "DIR",
    "Look the VCEK up in DIR/<chip_id hex>/<reported_tcb hex>.der (overrides the policy's)",
);

/// The command's options and help.
pub const CMD: Command = Command {
    name: "confboot verify-report",
    about: "Verifies an AMD SEV-SNP attestation report offline, like `snpguest verify`, and \
prints every check on its own line (✓ passed, ✗ failed, - skipped). The report's VCEK or VLEK \
comes from --vcek, --certs, the evidence, or a VCEK cache; the AMD root (ARK) is pinned: the \
Milan, Genoa and Turin roots built in, or --roots / the policy's rootBundles. Without --policy \
the measurement is not checked, a VCEK or a VLEK may sign, VMPL 0 is required, debug is refused and the safe default minimum TCB applies (Milan: bootloader 3, TEE 0, SNP 8, microcode 115; other products need a policy that names one). \
With -o json, prints one JSON object (the layout of every verify-* command). With -o ear, prints the verdict as an EAT attestation result (draft-ietf-rats-ear): one JWT \
signed with --ear-key (ES256). \
Exit status: 0 all checks passed, 1 a check failed, 2 bad arguments or unreadable input.",
    usage: "confboot verify-report --report FILE [--vcek FILE | --certs DIR] [--chain FILE] [--policy FILE] [OPTIONS]",
    opts: &[
        REPORT,
        EVIDENCE,
        VCEK,
        CERTS,
        CHAIN,
        ROOTS,
        POLICY,
        EXTRA_DATA,
        REPORT_DATA,
        VMPL,
        AT,
        VCEK_CACHE,
        OUTPUT,
        EAR_KEY,
        VERBOSITY,
    ],
};

/// Where the report comes from.
#[derive(Clone, Debug, PartialEq, Eq)]
enum ReportFile {
    /// `--report`: the raw report.
    Raw(String),
    /// `--evidence`: confboot's sev-snp evidence.
    Evidence(String),
}

/// What `confboot verify-report` runs with.
#[derive(Clone, Debug)]
struct Config {
    /// The report.
    report: ReportFile,
    /// The VCEK or VLEK file.
    vcek: Option<String>,
    /// A certificate-table directory.
    certs: Option<String>,
    /// A PEM file with the ASK and/or ASVK.
    chain: Option<String>,
    /// PEM bundles pinned instead of the built-in roots.
    roots: Vec<String>,
    /// The SEV-SNP policy file.
    policy: Option<String>,
    /// The VMPL required (0 to 3), over the policy's.
    vmpl: Option<u32>,
    /// The VCEK cache, over the policy's.
    vcek_cache: Option<String>,
    /// When certificates are checked (Unix seconds; `None`: now).
    at: Option<i64>,
    /// What the report data must hold.
    report_data: ReportDataCheck,
    /// What is printed: text, JSON or a signed result.
    output: ear_output::Output,
}

/// An SEV-SNP parser's error, held whole behind the error trait.
type SnpParseError = Box<dyn std::error::Error + Send + Sync>;

/// Why `verify-report` gave no verdict (exit 2): an option, or a file it
/// names.
#[derive(Debug, thiserror::Error)]
enum VerifyReportError {
    /// A positional argument.
    #[error("unexpected argument {0:?}")]
    Unexpected(String),
    /// Both `--report` and `--evidence`.
    #[error("give --report or --evidence, not both")]
    BothReports,
    /// Neither `--report` nor `--evidence`.
    #[error("--report FILE (or --evidence FILE) is required")]
    ReportRequired,
    /// An option is not of its type.
    #[error(transparent)]
    Args(#[from] ArgsError),
    /// `--vmpl` above 3.
    #[error("--{option} {0}: VMPL is 0 to 3", option = VMPL.long)]
    Vmpl(u32),
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
    #[error("{what}: {error}")]
    Read {
        /// What the file holds (`report`, `VCEK`).
        what: &'static str,
        /// Why.
        error: FileError,
    },
    /// A certificate file holds no certificate of AMD's.
    #[error("{what} {path}: {error}")]
    Certificate {
        /// What the file holds.
        what: &'static str,
        /// The file.
        path: String,
        /// Why.
        error: SnpParseError,
    },
    /// `--certs` holds no certificate.
    #[error("no certificates (vcek.der, vlek.pem, ...) in {0}")]
    NoCertificates(String),
    /// The `--policy` file cannot be read.
    #[error("{0}")]
    PolicyFile(FileError),
    /// A file is not what it should hold.
    #[error("{path}: {error}")]
    Parse {
        /// The file.
        path: String,
        /// Why.
        error: SnpParseError,
    },
    /// The policy gives no validator.
    #[error("{0}")]
    Validator(SnpParseError),
}

/// `path: ERROR` for a file an SEV-SNP parser refused.
fn refused<E: std::error::Error + Send + Sync + 'static>(
    path: &str,
) -> impl FnOnce(E) -> VerifyReportError {
    let path = path.to_string();
    move |error| VerifyReportError::Parse {
        path,
        error: Box::new(error),
    }
}

impl Config {
    /// Reads every option (each once, whatever the others say).
    fn from_matches(m: &Matches) -> Result<Config, VerifyReportError> {
        let given = |opt: &Opt| m.value(opt).map(str::to_string);
        let (report, evidence) = (given(&REPORT), given(&EVIDENCE));
        let vcek = given(&VCEK);
        let certs = given(&CERTS);
        let chain = given(&CHAIN);
        let roots: Vec<String> = m.values(&ROOTS).into_iter().map(str::to_string).collect();
        let policy = given(&POLICY);
        let vmpl = m.parsed::<u32>(&VMPL);
        let vcek_cache = given(&VCEK_CACHE);
        let at = given(&AT);
        let (extra_data, report_data) = (given(&EXTRA_DATA), given(&REPORT_DATA));
        let output = ear_output::output(m);
        if !m.positional().is_empty() {
            return Err(VerifyReportError::Unexpected(m.positional()[0].clone()));
        }
        let report = match (report, evidence) {
            (Some(_), Some(_)) => return Err(VerifyReportError::BothReports),
            (None, None) => return Err(VerifyReportError::ReportRequired),
            (Some(path), None) => ReportFile::Raw(path),
            (None, Some(path)) => ReportFile::Evidence(path),
        };
        let vmpl = match vmpl? {
            Some(v) if v > 3 => return Err(VerifyReportError::Vmpl(v)),
            v => v,
        };
        let at = at
            .map(|at| confboot_util::time::parse_instant(&at).map_err(VerifyReportError::At))
            .transpose()?;
        let report_data = match (extra_data, report_data) {
            (Some(_), Some(_)) => return Err(VerifyReportError::BothReportData),
            (Some(h), None) => ReportDataCheck::ExtraData(hex_array(&h, "--extra-data")?),
            (None, Some(h)) => ReportDataCheck::Exact(hex_array(&h, "--report-data")?),
            (None, None) => ReportDataCheck::NotChecked,
        };
        let output = output?;
        Ok(Config {
            report,
            vcek,
            certs,
            chain,
            roots,
            policy,
            vmpl,
            vcek_cache,
            at,
            report_data,
            output,
        })
    }
}

/// Runs the command on the arguments that follow `verify-report`; returns
/// the exit status.
pub fn run(args: Vec<String>) -> i32 {
    let m = parse_or_exit(&CMD, args);
    let verbosity = match m.verbosity() {
        Ok(v) => v,
        Err(e) => return usage_error(&e.to_string()),
    };
    confboot_util::logging::init("verify-report", verbosity);
    match Config::from_matches(&m).and_then(|config| verify_report(&config)) {
        Ok(status) => status,
        Err(e) => usage_error(&e.to_string()),
    }
}

fn usage_error(msg: &str) -> i32 {
    eprintln!("verify-report: {msg}\nTry 'confboot verify-report --help'.");
    2
}

/// Reads an input file (at most [`MAX_CONFIG_FILE_BYTES`]).
fn read(path: &str, what: &'static str) -> Result<Vec<u8>, VerifyReportError> {
    read_bounded(Path::new(path), MAX_CONFIG_FILE_BYTES)
        .map(|mut bytes| std::mem::take(&mut *bytes))
        .map_err(|error| VerifyReportError::Read { what, error })
}

/// Certificates from a file (DER or PEM), each with the kind its subject names.
fn certs_from_file(path: &str, what: &'static str) -> Result<Vec<CertEntry>, VerifyReportError> {
    let bytes = read(path, what)?;
    let refused = |error: SnpParseError| VerifyReportError::Certificate {
        what,
        path: path.to_string(),
        error,
    };
    let ders = certificates_from_pem_or_der(&bytes).map_err(|e| refused(Box::new(e)))?;
    ders.into_iter()
        .map(|der| {
            let cert = AmdCert::from_der(&der).map_err(|e| refused(Box::new(e)))?;
            let kind = match cert.role() {
                CertRole::Vcek => CertKind::Vcek,
                CertRole::Vlek => CertKind::Vlek,
                CertRole::Ask => CertKind::Ask,
                CertRole::Asvk => CertKind::Asvk,
                CertRole::Ark => CertKind::Ark,
            };
            Ok(CertEntry { kind, der })
        })
        .collect()
}

fn verify_report(config: &Config) -> Result<i32, VerifyReportError> {
    let ear = match &config.output {
        ear_output::Output::Ear(key) => {
            let id = ear_output::policy_id(config.policy.as_deref().map(Path::new))?;
            Some(EarSigner::load(key, "confboot verify-report", id)?)
        }
        ear_output::Output::Text | ear_output::Output::Json => None,
    };
    let input = match &config.report {
        ReportFile::Raw(path) => read(path, "report")?,
        ReportFile::Evidence(path) => read(path, "evidence")?,
    };
    let mut evidence = match &config.report {
        ReportFile::Raw(path) => SnpEvidence {
            report: SnpReport::from_bytes(&input).map_err(refused(path))?,
            certificates: Vec::new(),
        },
        ReportFile::Evidence(path) => SnpEvidence::decode(&input).map_err(refused(path))?,
    };

    // Certificates given on the command line come first, so they are the
    // ones used when the evidence also carries some.
    let mut given = Vec::new();
    if let Some(path) = &config.vcek {
        given.extend(certs_from_file(path, "VCEK")?);
    }
    if let Some(dir) = &config.certs {
        let mut found = 0;
        for name in ["vcek", "vlek", "ask", "asvk", "ark", "cert_chain"] {
            for ext in ["der", "pem"] {
                let path = Path::new(dir).join(format!("{name}.{ext}"));
                if path.is_file() {
                    given.extend(certs_from_file(&path.to_string_lossy(), "certificate")?);
                    found += 1;
                }
            }
        }
        if found == 0 {
            return Err(VerifyReportError::NoCertificates(dir.clone()));
        }
    }
    if let Some(path) = &config.chain {
        given.extend(certs_from_file(path, "chain")?);
    }
    given.append(&mut evidence.certificates);
    evidence.certificates = given;

    let mut policy = match &config.policy {
        Some(path) => {
            let path = Path::new(path);
            let text =
                read_bounded_text(path, MAX_POLICY_BYTES).map_err(VerifyReportError::PolicyFile)?;
            // Relative paths in the policy are relative to its file.
            SnpPolicy::from_json_direct_boot_at(&text, path.parent())
                .map_err(refused(&path.display().to_string()))?
        }
        // An offline look without a policy pins nothing: a report signed
        // by either kind of key is examined (a policy file names its own).
        None => SnpPolicy {
            signing_keys: vec![SigningKey::Vcek, SigningKey::Vlek],
            ..SnpPolicy::default()
        },
    };
    if let Some(v) = config.vmpl {
        policy.vmpl = v;
    }
    if let Some(dir) = &config.vcek_cache {
        policy.vcek_cache_dir = Some(dir.into());
    }
    let validator = if config.roots.is_empty() {
        SnpValidator::new(policy).map_err(|e| VerifyReportError::Validator(Box::new(e)))?
    } else {
        let mut roots = Vec::new();
        for path in &config.roots {
            let pem = read(path, "roots")?;
            roots.push(ProductRoot::from_pem_bundle(&pem).map_err(refused(path))?);
        }
        SnpValidator::with_roots(policy, TrustRoots::new(roots))
    };
    let validator = match config.at {
        Some(at) => validator.as_of(at),
        None => validator,
    };
    let report_data = config.report_data;

    let report = &evidence.report;
    let checks = validator.verify_report_detailed(&evidence, &report_data);
    if let Some(ear) = &ear {
        let verdict = Verdict {
            // The command's verdict: no check failed (a skipped one was
            // not asked for).
            passed: !checks
                .iter()
                .any(|c| matches!(c.outcome, CheckOutcome::Failed(_))),
            debuggable: report.debug_allowed(),
        };
        let vector = TrustVector::of_snp_checks(&checks, verdict);
        return Ok(ear.print(
            confboot_attest::Variant::SevSnp,
            &input,
            verdict.passed,
            vector,
        ));
    }
    let header = format!(
        "SEV-SNP report: version {}, VMPL {}, measurement {}",
        report.version(),
        report.vmpl(),
        confboot_util::hex::encode(report.measurement())
    );
    if config.output == ear_output::Output::Json {
        let subject = crate::check_report::Subject {
            command: "verify-report",
            variant: "sev-snp",
            header,
            at: Some(config.at.unwrap_or_else(confboot_util::time::unix_now)),
        };
        return Ok(crate::check_report::print(&subject, &checks, reason, true));
    }
    println!("{header}");
    let (mut passed, mut failed, mut skipped) = (0, 0, 0);
    for c in &checks {
        println!("{c}");
        match c.outcome {
            CheckOutcome::Passed(_) => passed += 1,
            CheckOutcome::Failed(_) => failed += 1,
            CheckOutcome::Skipped(_) => skipped += 1,
        }
    }
    let vek_missing = checks.iter().any(|c| {
        c.name == check::VEK
            && matches!(&c.outcome, CheckOutcome::Failed(e) if e.is(&SnpRefusal::NoVek))
    });
    if vek_missing {
        print_kds_hint(report);
    }
    if failed == 0 {
        println!("VERIFIED: {passed} checks passed, {skipped} skipped");
        Ok(0)
    } else {
        println!("FAILED: {failed} of {} checks failed", checks.len());
        Ok(1)
    }
}

/// The refusal's name of a failed check, for `-o json`.
fn reason(c: &confboot_attest::check::CheckResult) -> Option<String> {
    match &c.outcome {
        CheckOutcome::Failed(e) => e
            .detail()
            .and_then(|d| d.reason::<SnpRefusal>())
            .map(|r| format!("{r:?}")),
        _ => None,
    }
}

/// Where to fetch the missing VCEK (this command itself never goes online).
fn print_kds_hint(report: &SnpReport) {
    let products: Vec<Product> = match report.product_from_cpuid() {
        Some(p) => vec![p],
        // Version 2 names no CPU: a Turin chip id has only 8 bytes.
        None if report.chip_id()[8..].iter().all(|b| *b == 0) => vec![Product::Turin],
        None => vec![Product::Milan, Product::Genoa],
    };
    for p in products {
        if let Some(url) = kds_vcek_url(KDS_BASE_URL, p, report) {
            println!("hint: if this is a {p} chip, its VCEK is at {url} (pass it with --vcek)");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_option_the_config_reads_is_declared() {
        // Config::from_matches reads every option whatever the others say:
        // one parse reads them all (an undeclared one panics).
        let m = CMD
            .parse(
                ["--report", "r.bin", "--snp-policy", "p.json"]
                    .into_iter()
                    .map(String::from),
            )
            .unwrap();
        let c = Config::from_matches(&m).unwrap();
        assert_eq!(c.report, ReportFile::Raw("r.bin".into()));
        assert_eq!(c.policy.as_deref(), Some("p.json"));
        assert_eq!(c.report_data, ReportDataCheck::NotChecked);
    }
}
