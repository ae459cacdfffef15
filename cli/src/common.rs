//! Pieces the admin commands share: their attestation options and how a
//! node is verified with them, and how its address is completed.
//!
//! `init`, `recover` and `verify` check a node with the same options:
//!
//! | option | setting |
//! |---|---|
//! | `--variants` | accepted variants (default `qemu-vtpm`) |
//! | `--measurements` | measurement policy, for `qemu-vtpm` |
//! | `--ak-trust` | AK trust, for `qemu-vtpm` (`insecure-any-ak` warned) |
//! | `--expected-events` | expected event log, to explain a differing PCR |
//! | `--snp-policy` | SEV-SNP policy, for `sev-snp` |
//!
//! The help of `--variants` and `--snp-policy` is the node binaries' (the
//! node agent's crate, which this one uses for the verify service too).

use std::path::PathBuf;
use std::sync::Arc;

use confboot_attest::Validator;
use confboot_attest::config::{
    AttestationSettings, ConfigError, DEFAULT_VARIANTS, GivenSettings, INSECURE_ANY_AK_WARNING,
    InsecureAnyAk, Setting, parse_variants,
};
use confboot_util::args::{ArgsError, Command, Matches, Opt};
use nodeagent::options::{SNP_POLICY_HELP, VARIANTS_HELP};

/// Parses `args` for `cmd`, sets up logging, reads the command's
/// configuration with `read`, runs `f` with it, and turns the result into
/// an exit code (0, or 1 with the error on stderr).
pub fn run_command<C>(
    cmd: &Command,
    args: Vec<String>,
    read: fn(&Matches) -> Result<C, String>,
    f: impl FnOnce(&C) -> Result<(), String>,
) -> i32 {
    let m = confboot_util::args::parse_or_exit(cmd, args);
    confboot_util::logging::init("confboot", m.verbosity().unwrap_or(2));
    match read(&m).and_then(|config| f(&config)) {
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
pub const EXPECTED_EVENTS: Opt = Opt::value(
    "expected-events",
    "FILE",
    "The predicted event log of the expected measurements (`confboot measure --events-out`): a PCR that differs is explained by the first event that differs, when the node sends its log",
);

/// `--variants LIST`: the attestation variants a node may present.
pub const VARIANTS: Opt = Opt::value("variants", "LIST", VARIANTS_HELP).default(DEFAULT_VARIANTS);

/// `--snp-policy FILE`: the SEV-SNP policy, for `sev-snp`.
pub const SNP_POLICY: Opt = Opt::value("snp-policy", "FILE", SNP_POLICY_HELP);

/// How the admin's commands check a node, from their options.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeCheck {
    /// The settings of each accepted variant.
    pub settings: AttestationSettings,
    /// The policy files given, for messages.
    pub policy_files: String,
}

impl NodeCheck {
    /// Reads [`MEASUREMENTS`], [`AK_TRUST`], [`EXPECTED_EVENTS`],
    /// [`VARIANTS`] and [`SNP_POLICY`] (the measurements and AK trust are
    /// needed only when `qemu-vtpm` is accepted, the SNP policy only when
    /// `sev-snp` is); `insecure-any-ak` is warned about.
    pub fn read(m: &Matches) -> Result<NodeCheck, String> {
        let variants = m.value(&VARIANTS).expect("has a default");
        let measurements = m.value(&MEASUREMENTS);
        let snp_policy = m.value(&SNP_POLICY);
        let files: Vec<&str> = [measurements, snp_policy].into_iter().flatten().collect();
        let given = GivenSettings {
            measurements: measurements.map(PathBuf::from),
            measurements_required: true,
            ak_trust: m.value(&AK_TRUST).map(str::to_string),
            insecure_any_ak: InsecureAnyAk::Accepted,
            expected_events: m.value(&EXPECTED_EVENTS).map(PathBuf::from),
            snp_policy: snp_policy.map(PathBuf::from),
        };
        let variants = parse_variants(variants).map_err(|e| describe(&ConfigError::Variants(e)))?;
        Ok(NodeCheck {
            settings: AttestationSettings::new(variants, given).map_err(|e| describe(&e))?,
            policy_files: if files.is_empty() {
                "the policy".into()
            } else {
                files.join(" and ")
            },
        })
    }

    /// The validators for a node that is not bootstrapped yet, one per
    /// accepted variant (vTPM: PCR 15 all-zero).
    pub fn validators(&self) -> Result<Vec<Arc<dyn Validator>>, String> {
        let mut config = self.settings.load().map_err(|e| describe(&e))?;
        if let Some(vtpm) = config.vtpm.as_mut() {
            vtpm.validators = vtpm
                .validators
                .clone()
                .announce_insecure_with(announce_insecure_any_ak);
        }
        Ok(config.validators())
    }
}

/// The option that gives a setting of a node's attestation.
fn option(setting: Setting) -> Option<&'static Opt> {
    match setting {
        Setting::Variants => Some(&VARIANTS),
        Setting::Measurements => Some(&MEASUREMENTS),
        Setting::AkTrust => Some(&AK_TRUST),
        Setting::ExpectedEvents => Some(&EXPECTED_EVENTS),
        Setting::SnpPolicy => Some(&SNP_POLICY),
        // insecure-any-ak is taken with a warning: never asked for.
        Setting::InsecureAnyAkConfirmation => None,
    }
}

/// An attestation error, naming the option it is about.
pub fn describe(e: &ConfigError) -> String {
    let name = |setting: Setting| {
        option(setting).map_or_else(|| setting.to_string(), |o| format!("--{}", o.long))
    };
    match (e, option(e.setting())) {
        (ConfigError::Missing(_), Some(opt)) => ArgsError::Required(opt.long.into()).to_string(),
        _ => e.describe(&name),
    }
}

/// The announcement of a validator built with `insecure-any-ak`.
pub fn announce_insecure_any_ak() {
    log::warn!("--{} {INSECURE_ANY_AK_WARNING}", AK_TRUST.long);
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
