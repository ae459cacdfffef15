//! Pieces the admin commands share: how a node is verified, and how its
//! address is completed.

use std::sync::Arc;

use confboot_attest::Validator;
use confboot_attest::options::{
    DEFAULT_VARIANTS, EXPECTED_EVENTS_HELP, InsecureAnyAk, SNP_POLICY_HELP, VARIANTS_HELP,
    ValidatorOptions, VariantOptions,
};
use confboot_util::args::{Matches, Opt};

/// Parses `args` for `cmd`, sets up logging, runs `f`, and turns its result
/// into an exit code (0, or 1 with the error on stderr).
pub fn run_command(
    cmd: &confboot_util::args::Command,
    args: Vec<String>,
    f: impl FnOnce(&Matches) -> Result<(), String>,
) -> i32 {
    let m = confboot_util::args::parse_or_exit(cmd, args);
    confboot_util::logging::init("confboot", m.verbosity().unwrap_or(2));
    match f(&m) {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("{}: {e}", cmd.name);
            1
        }
    }
}

/// `--measurements FILE`: the expected measurements of the node.
pub const MEASUREMENTS: Opt = Opt::value(
    "measurements",
    "FILE",
    "Expected measurements of the node (Constellation's JSON format)",
);
/// `--ak-trust MODE`: which vTPM attestation keys are trusted.
pub const AK_TRUST: Opt = Opt::value(
    "ak-trust",
    "MODE",
    "Trusted vTPM attestation keys: ca:FILE, pinned:FILE|HEX[,HEX], or insecure-any-ak (local QEMU only)",
);

/// `--expected-events FILE`: the predicted event log, to explain a PCR
/// that differs.
pub const EXPECTED_EVENTS: Opt = Opt::value("expected-events", "FILE", EXPECTED_EVENTS_HELP);

/// `--variants LIST`: the attestation variants a node may present.
pub const VARIANTS: Opt = Opt::value("variants", "LIST", VARIANTS_HELP).default(DEFAULT_VARIANTS);

/// `--snp-policy FILE`: the SEV-SNP policy, for `sev-snp`.
pub const SNP_POLICY: Opt = Opt::value("snp-policy", "FILE", SNP_POLICY_HELP);

/// Which variants the admin's commands accept: [`VARIANTS`], [`SNP_POLICY`].
pub const VARIANT_OPTIONS: VariantOptions = VariantOptions {
    variants: VARIANTS.long,
    snp_policy: SNP_POLICY.long,
};

/// How the admin's commands check a node: [`MEASUREMENTS`] and [`AK_TRUST`];
/// `insecure-any-ak` is warned about.
pub const VALIDATOR_OPTIONS: ValidatorOptions = ValidatorOptions {
    measurements: MEASUREMENTS.long,
    ak_trust: AK_TRUST.long,
    expected_events: Some(EXPECTED_EVENTS.long),
    insecure_any_ak: InsecureAnyAk::Warn,
};

/// The validators for a node that is not bootstrapped yet, one per
/// accepted variant (vTPM: PCR 15 all-zero; the measurements and AK-trust
/// options are needed only when `qemu-vtpm` is accepted).
pub fn node_validators(m: &Matches) -> Result<Vec<Arc<dyn Validator>>, String> {
    VARIANT_OPTIONS
        .validators(m, || VALIDATOR_OPTIONS.validator(m))
        .map_err(|e| e.to_string())
}

/// The policy files the node is checked against, for messages.
pub fn policy_files(m: &Matches) -> String {
    let files: Vec<&str> = [MEASUREMENTS.long, SNP_POLICY.long]
        .into_iter()
        .filter_map(|o| m.value(o))
        .collect();
    if files.is_empty() {
        "the policy".into()
    } else {
        files.join(" and ")
    }
}

/// Adds the default port if `endpoint` has none.
pub fn with_port(endpoint: &str, port: u16) -> String {
    if endpoint
        .rsplit_once(':')
        .is_some_and(|(_, p)| p.parse::<u16>().is_ok())
    {
        endpoint.to_string()
    } else {
        format!("{endpoint}:{port}")
    }
}

/// Writes a new file with mode 0600; refuses to overwrite an existing one.
pub fn write_secret_file(path: &std::path::Path, bytes: &[u8]) -> Result<(), String> {
    confboot_util::fs::write_new_private(path, bytes).map_err(|e| e.to_string())
}

/// Explains an aTLS failure to the admin.
pub fn explain_connect_error(
    node: &str,
    e: &confboot_atls::AtlsError,
    measurements: &str,
) -> String {
    use confboot_atls::AtlsError;
    match e {
        AtlsError::Io(m) => format!("cannot reach the node at {node}: {m}"),
        AtlsError::Timeout => format!("the node at {node} did not answer in time"),
        AtlsError::Attestation(a) => {
            format!("the node at {node} failed verification against {measurements}: {a}")
        }
        other => format!("cannot establish attested TLS with {node}: {other}"),
    }
}
