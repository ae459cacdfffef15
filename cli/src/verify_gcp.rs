//! `confboot verify-gcp`: verifies a GCE vTPM attestation offline (the AK
//! certificate, the quotes and the event log) and prints each check
//! (✓ passed, ✗ failed, - skipped), one line each, or with `-o json` one
//! JSON object. Exits 0 when no check failed, 1 when one did, 2 on bad
//! arguments or unreadable inputs. The checks live in the library
//! (`confboot_gcp::verify`); this only reads files and prints.

use std::path::Path;

use confboot_attest::check::{CheckOutcome, CheckResult};
use confboot_gcp::attestation::MAX_ATTESTATION_LEN;
use confboot_gcp::certs::Cert;
use confboot_gcp::{GcpRefusal, GcpRoots, run_checks};
use confboot_util::args::{Command, Matches, Opt, VERBOSITY, parse_or_exit};
use confboot_util::fs::{FileError, read_bounded};
use confboot_util::hex::{self, HexError};

const ATTESTATION: Opt = Opt::value(
    "attestation",
    "FILE",
    "The attestation: a go-tpm-tools Attestation protobuf (AK public area and certificate, one \
     quote per PCR bank, the event log)",
);
const NONCE: Opt = Opt::value(
    "nonce",
    "HEX",
    "The nonce this verifier asked for (the quotes' extraData; \"\" for none); without it the \
     nonce check is skipped",
);
const INTERMEDIATE: Opt = Opt::value(
    "intermediate",
    "FILE",
    "Accept this intermediate of the AK certificate too (PEM or DER; repeatable)",
);
const ROOT: Opt = Opt::value(
    "root",
    "FILE",
    "Pin this EK/AK CA root too (PEM or DER; repeatable), beside Google's built-in roots",
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
    name: "confboot verify-gcp",
    about: "Verifies a GCE vTPM attestation offline and prints every check on its own line \
(✓ passed, ✗ failed, - skipped): the attestation key (an RSA restricted signing key), its \
certificate and the chain to a pinned root of Google's EK/AK CA, the validity at the given \
time, every quote's signature under the AK, the quotes' PCR selections, the nonce, the PCR \
digests and the event log replayed against every quoted bank. Nothing is fetched. Exit status: \
0 no check failed, 1 a check failed, 2 bad arguments or unreadable input.",
    usage: "confboot verify-gcp --attestation FILE [--nonce HEX] [--root FILE]... \
[--intermediate FILE]... [--at TIME] [-o text|json]",
    opts: &[
        ATTESTATION,
        NONCE,
        ROOT,
        INTERMEDIATE,
        AT,
        OUTPUT,
        VERBOSITY,
    ],
};

/// Largest root certificate file read.
const MAX_ROOT_FILE: u64 = 16 * 1024;

/// What `confboot verify-gcp` runs with.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Config {
    attestation: String,
    nonce: Option<Vec<u8>>,
    roots: Vec<String>,
    intermediates: Vec<String>,
    at: Option<i64>,
    json: bool,
}

/// Why `verify-gcp` gave no verdict (exit 2).
#[derive(Debug, thiserror::Error)]
enum VerifyGcpError {
    #[error("unexpected argument {0:?}")]
    Unexpected(String),
    #[error("--attestation FILE is required")]
    AttestationRequired,
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
    #[error("{0} is neither a PEM nor a DER certificate")]
    Cert(String),
}

impl Config {
    fn from_matches(m: &Matches) -> Result<Config, VerifyGcpError> {
        if let Some(p) = m.positional().first() {
            return Err(VerifyGcpError::Unexpected(p.clone()));
        }
        let attestation = m
            .value(&ATTESTATION)
            .ok_or(VerifyGcpError::AttestationRequired)?
            .to_string();
        let nonce = m
            .value(&NONCE)
            .map(|h| hex::decode(h).map_err(VerifyGcpError::Nonce))
            .transpose()?;
        let at = m
            .value(&AT)
            .map(|t| confboot_util::time::parse_instant(t).map_err(VerifyGcpError::At))
            .transpose()?;
        let json = match m.value(&OUTPUT).unwrap_or("text") {
            "text" => false,
            "json" => true,
            other => return Err(VerifyGcpError::Output(other.to_string())),
        };
        Ok(Config {
            attestation,
            nonce,
            roots: m.values(&ROOT).into_iter().map(str::to_string).collect(),
            intermediates: m
                .values(&INTERMEDIATE)
                .into_iter()
                .map(str::to_string)
                .collect(),
            at,
            json,
        })
    }
}

/// Runs the command on the arguments that follow `verify-gcp`; returns
/// the exit status.
pub fn run(args: Vec<String>) -> i32 {
    let m = parse_or_exit(&CMD, args);
    let verbosity = match m.verbosity() {
        Ok(v) => v,
        Err(e) => return usage_error(&e.to_string()),
    };
    confboot_util::logging::init("verify-gcp", verbosity);
    match Config::from_matches(&m).and_then(|c| verify_gcp(&c)) {
        Ok(status) => status,
        Err(e) => usage_error(&e.to_string()),
    }
}

fn usage_error(msg: &str) -> i32 {
    eprintln!("verify-gcp: {msg}\nTry 'confboot verify-gcp --help'.");
    2
}

/// A certificate file: PEM, else DER.
fn read_cert(path: &str, what: &'static str) -> Result<Cert, VerifyGcpError> {
    let bytes =
        read_bounded(Path::new(path), MAX_ROOT_FILE).map_err(|error| VerifyGcpError::Read {
            what,
            path: path.to_string(),
            error,
        })?;
    let der = match x509_parser::pem::parse_x509_pem(&bytes) {
        Ok((_, pem)) => pem.contents,
        Err(_) => bytes.to_vec(),
    };
    Cert::from_der(&der, what).map_err(|_| VerifyGcpError::Cert(path.to_string()))
}

fn verify_gcp(config: &Config) -> Result<i32, VerifyGcpError> {
    let bytes = read_bounded(Path::new(&config.attestation), MAX_ATTESTATION_LEN as u64).map_err(
        |error| VerifyGcpError::Read {
            what: "attestation",
            path: config.attestation.clone(),
            error,
        },
    )?;
    let mut roots = GcpRoots::google();
    for r in &config.roots {
        roots.add_root(read_cert(r, "root")?);
    }
    for i in &config.intermediates {
        roots.add_intermediate(read_cert(i, "intermediate")?);
    }
    let at = config.at.unwrap_or_else(confboot_util::time::unix_now);
    let checks = run_checks(&bytes, config.nonce.as_deref(), &roots, at);
    Ok(report(&checks, at, config.json))
}

/// The reason's name of a failed check.
fn reason(c: &CheckResult) -> Option<String> {
    match &c.outcome {
        CheckOutcome::Failed(e) => e
            .detail()
            .and_then(|d| d.reason::<GcpRefusal>())
            .map(|r| format!("{r:?}")),
        _ => None,
    }
}

/// Prints the checks ([`crate::check_report`]) and returns the exit status.
fn report(checks: &[CheckResult], at: i64, json: bool) -> i32 {
    let subject = crate::check_report::Subject {
        command: "verify-gcp",
        variant: "gcp-vtpm",
        header: format!("GCE vTPM attestation, checked at {at} (Unix seconds)"),
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
                    "--attestation",
                    "a.pb",
                    "--nonce",
                    "9009",
                    "--root",
                    "r.der",
                    "--intermediate",
                    "i.der",
                    "--at",
                    "2026-01-01",
                ]
                .into_iter()
                .map(String::from),
            )
            .unwrap();
        let c = Config::from_matches(&m).unwrap();
        assert_eq!(c.attestation, "a.pb");
        assert_eq!(c.nonce, Some(vec![0x90, 0x09]));
        assert_eq!(c.intermediates, vec!["i.der".to_string()]);
        assert_eq!(c.at, Some(1_767_225_600));
        assert!(!c.json);
    }
}
