//! `confboot verify-nitro`: verifies AWS NitroTPM evidence offline (the NSM
//! attestation document, the TPM quote and its PCRs) and prints each check
//! (✓ passed, ✗ failed, - skipped), one line each, or with `-o json` one
//! JSON object. Exits 0 when no check failed, 1 when one did, 2 on bad
//! arguments or unreadable inputs. The checks live in the library
//! (`confboot_aws::verify`); this only reads files and prints.

use std::path::Path;

use confboot_attest::check::{CheckOutcome, CheckResult};
use confboot_aws::evidence::MAX_EVIDENCE_JSON_LEN;
use confboot_aws::{AwsRefusal, EvidenceError, NitroEvidence, NitroRoots, run_checks};
use confboot_util::args::{Command, Matches, Opt, VERBOSITY, parse_or_exit};
use confboot_util::fs::{FileError, read_bounded, read_bounded_text};
use confboot_util::hex::{self, HexError};

const EVIDENCE: Opt = Opt::value(
    "evidence",
    "FILE",
    "NitroTPM evidence JSON: {nonce, pcrs: {sha384: {...}}, ak_pubkeys: {ecc_p256: {x, y}}, \
     attestation: {tpm: {ecc_p256: {attest_data, signature}}, nitro: {document}}}",
);
const NONCE: Opt = Opt::value(
    "nonce",
    "HEX",
    "The nonce this verifier asked for (32 bytes); without it the nonce check is skipped",
);
const RECORDED_NONCE: Opt = Opt::flag(
    "recorded-nonce",
    "Expect the nonce the evidence file records (to examine recorded evidence)",
);
const ROOT: Opt = Opt::value(
    "root",
    "FILE",
    "Pin this AWS Nitro root too (PEM or DER; repeatable), beside the built-in root G1",
);
const AT: Opt = Opt::value(
    "at",
    "TIME",
    "Check the certificates at TIME (Unix seconds, YYYY-MM-DD or YYYY-MM-DDTHH:MM:SSZ) instead \
     of now, to examine recorded evidence",
);
const OUTPUT: Opt = Opt::value("output", "FORMAT", crate::check_report::JSON_HELP)
    .short('o')
    .default("text");

/// The command's options and help.
pub const CMD: Command = Command {
    name: "confboot verify-nitro",
    about: "Verifies AWS NitroTPM evidence offline and prints every check on its own line \
(✓ passed, ✗ failed, - skipped): the NSM attestation document (COSE_Sign1, ES384), its bundle's \
root against the pinned AWS Nitro root, the chain to the instance's leaf, the validity at the \
given time, the document's signature, the TPM quote's signature under the attestation key, the \
document's binding of that key, the nonce, the PCR bank, the quote's PCR digest and the \
document's PCRs. Nothing is fetched. Exit status: 0 no check failed, 1 a check failed, 2 bad \
arguments or unreadable input.",
    usage: "confboot verify-nitro --evidence FILE [--nonce HEX | --recorded-nonce] [--root FILE]... \
[--at TIME] [-o text|json]",
    opts: &[EVIDENCE, NONCE, RECORDED_NONCE, ROOT, AT, OUTPUT, VERBOSITY],
};

/// Largest root certificate file read.
const MAX_ROOT_FILE: u64 = 16 * 1024;

/// What `confboot verify-nitro` runs with.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Config {
    evidence: String,
    nonce: NonceChoice,
    roots: Vec<String>,
    at: Option<i64>,
    json: bool,
}

/// Which nonce the checks expect.
#[derive(Clone, Debug, PartialEq, Eq)]
enum NonceChoice {
    /// None: the nonce check is skipped.
    None,
    /// These bytes.
    Given(Vec<u8>),
    /// The one the file records.
    Recorded,
}

/// Why `verify-nitro` gave no verdict (exit 2).
#[derive(Debug, thiserror::Error)]
enum VerifyNitroError {
    #[error("unexpected argument {0:?}")]
    Unexpected(String),
    #[error("--evidence FILE is required")]
    EvidenceRequired,
    #[error("give --nonce or --recorded-nonce, not both")]
    BothNonces,
    #[error("--nonce: {0}")]
    Nonce(HexError),
    #[error("--at {0}")]
    At(confboot_util::time::InstantError),
    #[error("-o {0:?}: want text or json")]
    Output(String),
    #[error("{what} {path}: {error}")]
    Read {
        what: &'static str,
        path: String,
        error: FileError,
    },
    #[error("{path}: {error}")]
    Evidence { path: String, error: EvidenceError },
    #[error("root {0}: neither a PEM nor a DER certificate")]
    Root(String),
}

impl Config {
    fn from_matches(m: &Matches) -> Result<Config, VerifyNitroError> {
        if let Some(p) = m.positional().first() {
            return Err(VerifyNitroError::Unexpected(p.clone()));
        }
        let evidence = m
            .value(&EVIDENCE)
            .ok_or(VerifyNitroError::EvidenceRequired)?
            .to_string();
        let nonce = match (m.value(&NONCE), m.flag(&RECORDED_NONCE)) {
            (Some(_), true) => return Err(VerifyNitroError::BothNonces),
            (Some(h), false) => {
                NonceChoice::Given(hex::decode(h).map_err(VerifyNitroError::Nonce)?)
            }
            (None, true) => NonceChoice::Recorded,
            (None, false) => NonceChoice::None,
        };
        let at = m
            .value(&AT)
            .map(|t| confboot_util::time::parse_instant(t).map_err(VerifyNitroError::At))
            .transpose()?;
        let json = match m.value(&OUTPUT).unwrap_or("text") {
            "text" => false,
            "json" => true,
            other => return Err(VerifyNitroError::Output(other.to_string())),
        };
        Ok(Config {
            evidence,
            nonce,
            roots: m.values(&ROOT).into_iter().map(str::to_string).collect(),
            at,
            json,
        })
    }
}

/// Runs the command on the arguments that follow `verify-nitro`; returns
/// the exit status.
pub fn run(args: Vec<String>) -> i32 {
    let m = parse_or_exit(&CMD, args);
    let verbosity = match m.verbosity() {
        Ok(v) => v,
        Err(e) => return usage_error(&e.to_string()),
    };
    confboot_util::logging::init("verify-nitro", verbosity);
    match Config::from_matches(&m).and_then(|c| verify_nitro(&c)) {
        Ok(status) => status,
        Err(e) => usage_error(&e.to_string()),
    }
}

fn usage_error(msg: &str) -> i32 {
    eprintln!("verify-nitro: {msg}\nTry 'confboot verify-nitro --help'.");
    2
}

/// A root file: PEM, else DER.
fn read_root(path: &str) -> Result<Vec<u8>, VerifyNitroError> {
    let bytes =
        read_bounded(Path::new(path), MAX_ROOT_FILE).map_err(|error| VerifyNitroError::Read {
            what: "root",
            path: path.to_string(),
            error,
        })?;
    if let Ok((_, pem)) = x509_parser::pem::parse_x509_pem(&bytes) {
        return Ok(pem.contents);
    }
    x509_parser::parse_x509_certificate(&bytes)
        .map(|_| bytes.to_vec())
        .map_err(|_| VerifyNitroError::Root(path.to_string()))
}

fn verify_nitro(config: &Config) -> Result<i32, VerifyNitroError> {
    let path = Path::new(&config.evidence);
    let text = read_bounded_text(path, MAX_EVIDENCE_JSON_LEN as u64).map_err(|error| {
        VerifyNitroError::Read {
            what: "evidence",
            path: config.evidence.clone(),
            error,
        }
    })?;
    let evidence = NitroEvidence::from_json(&text).map_err(|error| VerifyNitroError::Evidence {
        path: config.evidence.clone(),
        error,
    })?;
    let mut roots = NitroRoots::aws();
    for r in &config.roots {
        roots.add(read_root(r)?);
    }
    let nonce = match &config.nonce {
        NonceChoice::None => None,
        NonceChoice::Given(n) => Some(n.as_slice()),
        NonceChoice::Recorded => Some(evidence.nonce.as_slice()),
    };
    let at = config.at.unwrap_or_else(confboot_util::time::unix_now);
    let checks = run_checks(&evidence, nonce, &roots, at);
    Ok(report(&checks, at, config.json))
}

/// The reason's name of a failed check.
fn reason(c: &CheckResult) -> Option<String> {
    match &c.outcome {
        CheckOutcome::Failed(e) => e
            .detail()
            .and_then(|d| d.reason::<AwsRefusal>())
            .map(|r| format!("{r:?}")),
        _ => None,
    }
}

/// Prints the checks ([`crate::check_report`]) and returns the exit status.
fn report(checks: &[CheckResult], at: i64, json: bool) -> i32 {
    let subject = crate::check_report::Subject {
        command: "verify-nitro",
        variant: "aws-nitrotpm",
        header: format!("AWS NitroTPM evidence, checked at {at} (Unix seconds)"),
        at: Some(at),
    };
    crate::check_report::print(&subject, checks, reason, json)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_option_the_config_reads_is_declared() {
        let m = CMD
            .parse(
                [
                    "--evidence",
                    "e.json",
                    "--recorded-nonce",
                    "--root",
                    "r.pem",
                    "-o",
                    "json",
                ]
                .into_iter()
                .map(String::from),
            )
            .unwrap();
        let c = Config::from_matches(&m).unwrap();
        assert_eq!(c.evidence, "e.json");
        assert_eq!(c.nonce, NonceChoice::Recorded);
        assert_eq!(c.roots, vec!["r.pem".to_string()]);
        assert!(c.json);
    }
}
