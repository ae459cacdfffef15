//! `confboot verify-azure`: verifies the evidence of an Azure confidential
//! VM (SEV-SNP or TDX) offline and prints each check (✓ passed, ✗ failed,
//! `-` skipped), one line each, or with `-o json` one JSON object. Exits 0
//! when no check failed, 1 when one did, 2 on bad arguments or unreadable
//! inputs. The checks live in the library (`confboot_azure`); this only
//! reads files and prints.

use std::path::Path;

use confboot_attest::measurements::{MAX_POLICY_BYTES, MeasurementPolicy, PolicyError};
use confboot_azure::{
    AzureEvidence, AzureValidator, EvidenceError, Hardware, HardwareKind, HclReport, MAX_BLOB_LEN,
    MAX_EVIDENCE_JSON_LEN, MAX_HCL_REPORT_LEN, Nonce, TpmQuote, read_evidence_json,
};
use confboot_snp::{SnpPolicy, SnpValidator};
use confboot_tdx::{TdxPolicy, TdxRoots, TdxValidator};
use confboot_util::args::{Command, Matches, Opt, VERBOSITY, parse_or_exit};
use confboot_util::fs::{FileError, read_bounded, read_bounded_text};

const EVIDENCE: Opt = Opt::value(
    "evidence",
    "FILE",
    "Recorded evidence JSON (the Confidential Containers verifier's az-snp-vtpm or az-tdx-vtpm \
     layout, versions 0 to 2): HCL report, vTPM quote, VCEK or TD quote",
);
const HCL_REPORT: Opt = Opt::value(
    "hcl-report",
    "FILE",
    "The HCL report: the contents of vTPM NV index 0x01400001",
);
const TPM_QUOTE: Opt = Opt::value(
    "tpm-quote",
    "FILE",
    "The vTPM quote: JSON {signature, message, pcrs} in hex, or the length-prefixed binary form",
);
const VCEK: Opt = Opt::value(
    "vcek",
    "FILE",
    "SEV-SNP: the VCEK, alone (DER or PEM) or with its chain (PEM: VCEK, ASK, ARK)",
);
const TD_QUOTE: Opt = Opt::value(
    "td-quote",
    "FILE",
    "TDX: the TD quote whose report data binds the HCL report's runtime claims",
);
const SNP_POLICY: Opt = Opt::value(
    "snp-policy",
    "FILE",
    "SEV-SNP policy JSON for the hardware report (measurement or idKeyDigests, minimumTcb, \
     rootBundles, ...); the evidence must then be SEV-SNP",
);
const TDX_POLICY: Opt = Opt::value(
    "tdx-policy",
    "FILE",
    "TDX policy JSON for the TD quote (mrtd, collateral, ...); the evidence must then be TDX",
);
const PCRS: Opt = Opt::value(
    "pcrs",
    "FILE",
    "Expected vTPM PCRs, the measurements file's format ({\"4\": {\"expected\": HEX}, ...})",
);
const NONCE: Opt = Opt::value(
    "nonce",
    "HEX",
    "The nonce the vTPM quote's extraData must hold (without it the check is skipped)",
);
const AT: Opt = Opt::value(
    "at",
    "TIME",
    "Check certificates and collateral at TIME (Unix seconds, YYYY-MM-DD or \
     YYYY-MM-DDTHH:MM:SSZ) instead of now, to examine recorded evidence",
);
const OUTPUT: Opt = Opt::value("output", "FORMAT", crate::check_report::JSON_HELP)
    .short('o')
    .default("text");

/// The command's options and help.
pub const CMD: Command = Command {
    name: "confboot verify-azure",
    about: "Verifies the evidence of an Azure confidential VM (SEV-SNP or TDX) offline and prints \
every check on its own line (✓ passed, ✗ failed, - skipped): the HCL report, the hardware \
report's own checks (SEV-SNP: VCEK chain to a pinned ARK, signature, TCB, policy; TDX: PCK chain \
to the pinned Intel root, quote signature, collateral, policy), the binding of the runtime claims \
by the report data, the attestation key HCLAkPub, the vTPM quote's signature under it, its nonce, \
its PCR digest and the PCRs against --pcrs. The hardware kind is the policy's (--snp-policy or \
--tdx-policy), else the HCL report's, checked with a default policy that pins nothing (those \
checks are then skipped). Nothing is fetched. \
Exit status: 0 no check failed, 1 a check failed, 2 bad arguments or unreadable input.",
    usage: "confboot verify-azure (--evidence FILE | --hcl-report FILE --tpm-quote FILE \
[--vcek FILE | --td-quote FILE]) [--snp-policy FILE | --tdx-policy FILE] [--pcrs FILE] \
[--nonce HEX] [--at TIME] [-o text|json]",
    opts: &[
        EVIDENCE, HCL_REPORT, TPM_QUOTE, VCEK, TD_QUOTE, SNP_POLICY, TDX_POLICY, PCRS, NONCE, AT,
        OUTPUT, VERBOSITY,
    ],
};

/// How the result is printed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Output {
    Text,
    Json,
}

/// Where the evidence comes from.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Source {
    /// One recorded evidence JSON.
    Evidence(String),
    /// The parts, each in its file.
    Parts {
        hcl_report: String,
        tpm_quote: String,
        vcek: Option<String>,
        td_quote: Option<String>,
    },
}

/// Which policy the hardware report is checked with.
#[derive(Clone, Debug, PartialEq, Eq)]
enum HardwarePolicy {
    Snp(String),
    Tdx(String),
    /// Neither given: the HCL report's kind, with a default policy.
    FromReport,
}

/// What `confboot verify-azure` runs with.
#[derive(Clone, Debug)]
struct Config {
    source: Source,
    hardware: HardwarePolicy,
    pcrs: Option<String>,
    nonce: Nonce,
    at: Option<i64>,
    output: Output,
}

/// Why `verify-azure` gave no verdict (exit 2).
#[derive(Debug, thiserror::Error)]
enum VerifyAzureError {
    /// A positional argument.
    #[error("unexpected argument {0:?}")]
    Unexpected(String),
    /// Neither `--evidence` nor the parts, or both.
    #[error("give --evidence FILE, or --hcl-report FILE and --tpm-quote FILE (not both)")]
    Source,
    /// `--vcek` or `--td-quote` with `--evidence`.
    #[error("--vcek and --td-quote go with --hcl-report, not --evidence")]
    PartWithEvidence,
    /// Both hardware policies.
    #[error("give --snp-policy or --tdx-policy, not both")]
    BothPolicies,
    /// `--nonce` is not hex.
    #[error("--nonce {0}")]
    Nonce(confboot_util::hex::HexError),
    /// `--at` is not an instant.
    #[error("--at {0}")]
    At(confboot_util::time::InstantError),
    /// `-o` names no output.
    #[error("-o {0:?}: want text or json")]
    Output(String),
    /// An input file cannot be read.
    #[error("{what}: {error}")]
    Read {
        /// What the file holds.
        what: &'static str,
        /// Why.
        error: FileError,
    },
    /// Recorded evidence or a quote file is not of a known form.
    #[error("{path}: {error}")]
    Evidence {
        /// The file.
        path: String,
        /// Why.
        error: EvidenceError,
    },
    /// A certificate file holds no certificate.
    #[error("{path}: {error}")]
    Certificates {
        /// The file.
        path: String,
        /// Why.
        error: confboot_snp::PemError,
    },
    /// A policy file is refused, or gives no validator.
    #[error("{path}: {error}")]
    Policy {
        /// The file.
        path: String,
        /// Why.
        error: PolicyError,
    },
    /// The HCL report does not even say its kind (no policy chosen one).
    #[error("the HCL report names no hardware kind: {0}")]
    Kind(confboot_azure::HclError),
}

impl Config {
    /// Reads every option.
    fn from_matches(m: &Matches) -> Result<Config, VerifyAzureError> {
        let given = |opt: &Opt| m.value(opt).map(str::to_string);
        if let Some(first) = m.positional().first() {
            return Err(VerifyAzureError::Unexpected(first.clone()));
        }
        let (vcek, td_quote) = (given(&VCEK), given(&TD_QUOTE));
        let source = match (given(&EVIDENCE), given(&HCL_REPORT), given(&TPM_QUOTE)) {
            (Some(path), None, None) => {
                if vcek.is_some() || td_quote.is_some() {
                    return Err(VerifyAzureError::PartWithEvidence);
                }
                Source::Evidence(path)
            }
            (None, Some(hcl_report), Some(tpm_quote)) => Source::Parts {
                hcl_report,
                tpm_quote,
                vcek,
                td_quote,
            },
            _ => return Err(VerifyAzureError::Source),
        };
        let hardware = match (given(&SNP_POLICY), given(&TDX_POLICY)) {
            (Some(_), Some(_)) => return Err(VerifyAzureError::BothPolicies),
            (Some(p), None) => HardwarePolicy::Snp(p),
            (None, Some(p)) => HardwarePolicy::Tdx(p),
            (None, None) => HardwarePolicy::FromReport,
        };
        let nonce = match given(&NONCE) {
            Some(h) => {
                Nonce::Expected(confboot_util::hex::decode(&h).map_err(VerifyAzureError::Nonce)?)
            }
            None => Nonce::NotChecked,
        };
        let at = given(&AT)
            .map(|at| confboot_util::time::parse_instant(&at).map_err(VerifyAzureError::At))
            .transpose()?;
        let output = match m.value(&OUTPUT).unwrap_or("text") {
            "text" => Output::Text,
            "json" => Output::Json,
            other => return Err(VerifyAzureError::Output(other.to_string())),
        };
        Ok(Config {
            source,
            hardware,
            pcrs: given(&PCRS),
            nonce,
            at,
            output,
        })
    }
}

/// Runs the command on the arguments that follow `verify-azure`; returns
/// the exit status.
pub fn run(args: Vec<String>) -> i32 {
    let m = parse_or_exit(&CMD, args);
    let verbosity = match m.verbosity() {
        Ok(v) => v,
        Err(e) => return usage_error(&e.to_string()),
    };
    confboot_util::logging::init("verify-azure", verbosity);
    match Config::from_matches(&m).and_then(|config| verify_azure(&config)) {
        Ok(status) => status,
        Err(e) => usage_error(&e.to_string()),
    }
}

fn usage_error(msg: &str) -> i32 {
    eprintln!("verify-azure: {msg}\nTry 'confboot verify-azure --help'.");
    2
}

/// Reads an input file of at most `limit` bytes.
fn read(path: &str, what: &'static str, limit: usize) -> Result<Vec<u8>, VerifyAzureError> {
    read_bounded(Path::new(path), limit as u64)
        .map(|mut bytes| std::mem::take(&mut *bytes))
        .map_err(|error| VerifyAzureError::Read { what, error })
}

fn evidence_error(path: &str) -> impl FnOnce(EvidenceError) -> VerifyAzureError {
    let path = path.to_string();
    move |error| VerifyAzureError::Evidence { path, error }
}

/// The evidence, from its files.
fn read_evidence(source: &Source) -> Result<AzureEvidence, VerifyAzureError> {
    match source {
        Source::Evidence(path) => {
            read_evidence_json(&read(path, "evidence", MAX_EVIDENCE_JSON_LEN)?)
                .map_err(evidence_error(path))
        }
        Source::Parts {
            hcl_report,
            tpm_quote,
            vcek,
            td_quote,
        } => {
            let quote_bytes = read(tpm_quote, "vTPM quote", MAX_EVIDENCE_JSON_LEN)?;
            let quote = if quote_bytes.trim_ascii_start().starts_with(b"{") {
                TpmQuote::from_json(&quote_bytes)
            } else {
                TpmQuote::from_length_prefixed(&quote_bytes)
            }
            .map_err(evidence_error(tpm_quote))?;
            let vcek_chain = match vcek {
                Some(path) => {
                    confboot_snp::certificates_from_pem_or_der(&read(path, "VCEK", MAX_BLOB_LEN)?)
                        .map_err(|error| VerifyAzureError::Certificates {
                        path: path.clone(),
                        error,
                    })?
                }
                None => Vec::new(),
            };
            let td_quote = td_quote
                .as_ref()
                .map(|path| read(path, "TD quote", MAX_BLOB_LEN))
                .transpose()?;
            Ok(AzureEvidence {
                hcl_report: read(hcl_report, "HCL report", MAX_HCL_REPORT_LEN)?,
                tpm_quote: quote,
                vcek_chain,
                td_quote,
            })
        }
    }
}

fn policy_text(path: &str) -> Result<String, VerifyAzureError> {
    read_bounded_text(Path::new(path), MAX_POLICY_BYTES)
        .map(|t| t.to_string())
        .map_err(|error| VerifyAzureError::Read {
            what: "policy",
            error,
        })
}

fn policy_error(path: &str) -> impl FnOnce(PolicyError) -> VerifyAzureError {
    let path = path.to_string();
    move |error| VerifyAzureError::Policy { path, error }
}

/// The hardware report's validator: the policy's kind, else the report's.
fn hardware(config: &Config, evidence: &AzureEvidence) -> Result<Hardware, VerifyAzureError> {
    let kind = match &config.hardware {
        HardwarePolicy::Snp(_) => HardwareKind::SevSnp,
        HardwarePolicy::Tdx(_) => HardwareKind::Tdx,
        HardwarePolicy::FromReport => {
            HclReport::parse(&evidence.hcl_report)
                .map_err(VerifyAzureError::Kind)?
                .kind
        }
    };
    Ok(match kind {
        HardwareKind::SevSnp => {
            let policy = match &config.hardware {
                HardwarePolicy::Snp(path) => {
                    SnpPolicy::from_json_at(&policy_text(path)?, Path::new(path).parent())
                        .map_err(policy_error(path))?
                }
                _ => SnpPolicy::default(),
            };
            let v = SnpValidator::new(policy).map_err(policy_error("--snp-policy"))?;
            Hardware::SevSnp(Box::new(match config.at {
                Some(at) => v.as_of(at),
                None => v,
            }))
        }
        HardwareKind::Tdx => {
            // With a policy, it must pin the image; without one this is an
            // offline look, as in verify-quote: the image checks are
            // skipped, and say so.
            let v = match &config.hardware {
                HardwarePolicy::Tdx(path) => TdxValidator::new(
                    TdxPolicy::from_json_at(&policy_text(path)?, Path::new(path).parent())
                        .map_err(policy_error(path))?,
                )
                .map_err(policy_error(path))?,
                _ => TdxValidator::with_roots(TdxPolicy::default(), TdxRoots::intel()),
            };
            Hardware::Tdx(Box::new(match config.at {
                Some(at) => v.as_of(at),
                None => v,
            }))
        }
    })
}

fn verify_azure(config: &Config) -> Result<i32, VerifyAzureError> {
    let evidence = read_evidence(&config.source)?;
    let hardware = hardware(config, &evidence)?;
    let kind = hardware.kind();
    let pcrs = match &config.pcrs {
        Some(path) => {
            MeasurementPolicy::from_json(&policy_text(path)?).map_err(policy_error(path))?
        }
        None => MeasurementPolicy::default(),
    };
    let checks = AzureValidator::new(hardware, pcrs).verify_detailed(&evidence, &config.nonce);
    let subject = crate::check_report::Subject {
        command: "verify-azure",
        variant: match kind {
            HardwareKind::SevSnp => "azure-sev-snp",
            HardwareKind::Tdx => "azure-tdx",
        },
        header: format!("Azure confidential VM, {} hardware report", kind.name()),
        at: config.at,
    };
    let json = config.output == Output::Json;
    Ok(crate::check_report::print(
        &subject,
        &checks,
        |_| None,
        json,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_option_the_config_reads_is_declared() {
        let m = CMD
            .parse(
                [
                    "--hcl-report",
                    "h",
                    "--tpm-quote",
                    "q",
                    "--nonce",
                    "00",
                    "-o",
                    "json",
                ]
                .into_iter()
                .map(String::from),
            )
            .unwrap();
        let c = Config::from_matches(&m).unwrap();
        assert_eq!(c.nonce, Nonce::Expected(vec![0]));
        assert_eq!(c.output, Output::Json);
        assert_eq!(c.hardware, HardwarePolicy::FromReport);
    }
}
