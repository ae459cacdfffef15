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
//!
//! # The admin's secrets go only to a node not yet bootstrapped
//!
//! `init` and `recover` send the master secret and the init secret, which
//! only a node that has not been bootstrapped since it booted needs: a
//! bootstrapped member (compromised, or one the host diverts the admin's
//! call to) must not receive them. Each variant proves it in a register
//! its evidence covers and its software cannot set back
//! ([`NodeCheck::read_unbootstrapped`], [`NodeCheck::validators`]):
//!
//! | variant | proof the node is not bootstrapped |
//! |---|---|
//! | `qemu-vtpm` | PCR 15 (the cluster mark) all zero, quoted |
//! | `tdx` | `RTMR3` (the cluster mark) all zero, quoted |
//! | `sev-snp` | none: refused |
//!
//! SEV-SNP has no register the guest extends at run time: the report's
//! measurement is fixed at launch, `REPORT_DATA` is whatever the guest asks
//! for, and `HOST_DATA` is the host's. A bootstrapped SNP member produces
//! the same report as a node that has not been bootstrapped, so nothing in
//! its evidence tells the two apart; `init` and `recover` refuse
//! `--variants` naming `sev-snp`
//! ([`OptionsError::SnpCannotProveUnbootstrapped`]) until a variant with
//! such a register (an SVSM vTPM's PCR 15) is added.

use std::path::PathBuf;
use std::sync::Arc;

use confboot_attest::{Validator, Variant};
use confboot_util::args::{ArgsError, Command, Matches, Opt};
use confboot_verifier::config::{
    AttestationSettings, ConfigError, DEFAULT_VARIANTS, GivenSettings, INSECURE_ANY_AK_WARNING,
    InsecureAnyAk, Setting, VariantConfig, parse_variants,
};
use confboot_verifier::help::{AZURE_POLICY_HELP, SNP_POLICY_HELP, TDX_POLICY_HELP, VARIANTS_HELP};

/// Parses `args` for `cmd`, sets up logging, reads the command's
/// configuration with `read` (an error there is a usage error: exit 2),
/// runs `f` with it, and turns the result into an exit code (0, or 1 with
/// the error on stderr).
pub fn run_command<C, R: std::fmt::Display, E: std::fmt::Display>(
    cmd: &Command,
    args: Vec<String>,
    read: fn(&Matches) -> Result<C, R>,
    f: impl FnOnce(&C) -> Result<(), E>,
) -> i32 {
    let m = confboot_util::args::parse_or_exit(cmd, args);
    confboot_util::logging::init("confboot", m.verbosity().unwrap_or(2));
    let config = read(&m).unwrap_or_else(|e| confboot_util::args::exit_usage(cmd, &e));
    match f(&config) {
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

/// `--tdx-policy FILE`: the TDX policy (and through it the collateral
/// files), for `tdx`.
pub const TDX_POLICY: Opt = Opt::value("tdx-policy", "FILE", TDX_POLICY_HELP);

/// `--azure-policy FILE`: the `azure-sev-snp` policy.
pub const AZURE_POLICY: Opt = Opt::value("azure-policy", "FILE", AZURE_POLICY_HELP);

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
    /// [`VARIANTS`], [`SNP_POLICY`] and [`TDX_POLICY`] (the measurements
    /// and AK trust are needed only when `qemu-vtpm` is accepted, the SNP
    /// policy only when `sev-snp` is, the TDX policy only when `tdx` is);
    /// `insecure-any-ak` is warned about.
    pub fn read(m: &Matches) -> Result<NodeCheck, NodeCheckError> {
        NodeCheck::read_with(m, true)
    }

    /// As [`NodeCheck::read`], with `measurements_required` false when the
    /// vTPM reference values come from elsewhere (signed sets): then
    /// `--measurements` may be left out.
    pub fn read_with(
        m: &Matches,
        measurements_required: bool,
    ) -> Result<NodeCheck, NodeCheckError> {
        let variants = m.value(&VARIANTS).expect("has a default");
        let measurements = m.value(&MEASUREMENTS);
        let snp_policy = m.value(&SNP_POLICY);
        let tdx_policy = m.value(&TDX_POLICY);
        let azure_policy = m.value(&AZURE_POLICY);
        let files: Vec<&str> = [measurements, snp_policy, tdx_policy, azure_policy]
            .into_iter()
            .flatten()
            .collect();
        let given = GivenSettings {
            measurements: measurements.map(PathBuf::from),
            measurements_required,
            ak_trust: m.value(&AK_TRUST).map(str::to_string),
            insecure_any_ak: InsecureAnyAk::Accepted,
            expected_events: m.value(&EXPECTED_EVENTS).map(PathBuf::from),
            snp_policy: snp_policy.map(PathBuf::from),
            tdx_policy: tdx_policy.map(PathBuf::from),
            azure_policy: azure_policy.map(PathBuf::from),
        };
        let variants =
            parse_variants(variants).map_err(|e| NodeCheckError(ConfigError::Variants(e)))?;
        Ok(NodeCheck {
            settings: AttestationSettings::new(variants, given).map_err(NodeCheckError)?,
            policy_files: if files.is_empty() {
                "the policy".into()
            } else {
                files.join(" and ")
            },
        })
    }

    /// As [`NodeCheck::read`], for a command that sends the admin's
    /// secrets (`init`, `recover`): `sev-snp` is refused, since its
    /// evidence cannot show that a node is not bootstrapped (see the
    /// module documentation).
    pub fn read_unbootstrapped(m: &Matches) -> Result<NodeCheck, OptionsError> {
        let check = NodeCheck::read(m)?;
        if check.settings.accepts(Variant::SevSnp) {
            return Err(OptionsError::SnpCannotProveUnbootstrapped);
        }
        Ok(check)
    }

    /// The validators for a node that is not bootstrapped yet, one per
    /// accepted variant that can show it: vTPM with PCR 15 all zero, TDX
    /// with `RTMR3` all zero ([`TdxValidator::require_unmarked`](confboot_tdx::TdxValidator::require_unmarked)). SEV-SNP,
    /// which cannot, gets no validator, so an SNP node is refused (as a
    /// variant not accepted) even where [`NodeCheck::read_unbootstrapped`]
    /// was not the reader.
    pub fn validators(&self) -> Result<Vec<Arc<dyn Validator>>, NodeCheckError> {
        let mut config = self.settings.load().map_err(NodeCheckError)?;
        if let Some(vtpm) = config.vtpm_mut() {
            vtpm.validators = vtpm
                .validators
                .clone()
                .announce_insecure_with(announce_insecure_any_ak);
        }
        let mut validators = Vec::new();
        for variant in config.into_configs() {
            match variant {
                VariantConfig::SevSnp(_) => {
                    log::warn!("{}", OptionsError::SnpCannotProveUnbootstrapped);
                }
                VariantConfig::Tdx(tdx) => {
                    validators.push(Arc::new((*tdx).require_unmarked(true)) as Arc<dyn Validator>)
                }
                VariantConfig::AzureSevSnp(azure) => {
                    validators.push(Arc::new((*azure).require_unmarked(true)) as Arc<dyn Validator>)
                }
                vtpm @ VariantConfig::QemuVtpm(_) => {
                    validators.push(vtpm.validator().map_err(NodeCheckError)?)
                }
            }
        }
        Ok(validators)
    }
}

/// Why the options of a command that attests a node (`init`, `recover`)
/// cannot be used (exit 2).
#[derive(Debug, thiserror::Error)]
pub enum OptionsError {
    /// An option is missing or not of its type.
    #[error(transparent)]
    Args(#[from] ArgsError),
    /// The attestation options check no node.
    #[error(transparent)]
    Check(#[from] NodeCheckError),
    /// The accepted variants include `sev-snp`, whose evidence cannot show
    /// that a node is not bootstrapped, for a command that sends the
    /// admin's secrets.
    #[error(
        "--variants accepts sev-snp, but an SEV-SNP node cannot prove it is not bootstrapped \
         (SEV-SNP has no register the guest extends at run time, so a bootstrapped member \
         attests exactly as a fresh node does): the master secret and the init secret are not \
         sent to one; refused"
    )]
    SnpCannotProveUnbootstrapped,
}

/// Why the attestation options check no node: the settings, their files or
/// the validators; the message names the option.
#[derive(Debug, thiserror::Error)]
#[error("{}", describe(.0))]
pub struct NodeCheckError(pub ConfigError);

/// Why a cluster file gives no field.
#[derive(Debug, thiserror::Error)]
pub enum ClusterFileError {
    /// The file cannot be read.
    #[error("the cluster file cannot be read: {0}")]
    Read(confboot_util::fs::FileError),
    /// The file is not JSON.
    #[error("cluster file {}: not JSON: {error}", path.display())]
    NotJson {
        /// The file.
        path: PathBuf,
        /// Why.
        error: serde_json::Error,
    },
    /// The file has no such string field.
    #[error("cluster file {}: no \"{field}\" string", path.display())]
    NoField {
        /// The file.
        path: PathBuf,
        /// The field.
        field: String,
    },
    /// The field is not hex.
    #[error("cluster file {}: {field}: {error}", path.display())]
    NotHex {
        /// The file.
        path: PathBuf,
        /// The field.
        field: String,
        /// Why.
        error: confboot_util::hex::HexError,
    },
}

/// The option that gives a setting of a node's attestation.
fn option(setting: Setting) -> Option<&'static Opt> {
    match setting {
        Setting::Variants => Some(&VARIANTS),
        Setting::Measurements => Some(&MEASUREMENTS),
        Setting::AkTrust => Some(&AK_TRUST),
        Setting::ExpectedEvents => Some(&EXPECTED_EVENTS),
        Setting::SnpPolicy => Some(&SNP_POLICY),
        Setting::TdxPolicy => Some(&TDX_POLICY),
        Setting::AzurePolicy => Some(&AZURE_POLICY),
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

/// The cluster file `confboot init` writes (`--state-out`): the cluster id,
/// the owner id and the measurement salt, in hex.
pub const DEFAULT_CLUSTER_FILE: &str = "confboot-cluster.json";

/// One hex field of a cluster file (`clusterId`, `measurementSalt`), read
/// from a bounded file; the error names the file and the field.
pub fn cluster_file_field(
    path: &std::path::Path,
    field: &str,
) -> Result<Vec<u8>, ClusterFileError> {
    use confboot_util::fs::{MAX_CONFIG_FILE_BYTES, read_bounded_text};
    let text = read_bounded_text(path, MAX_CONFIG_FILE_BYTES).map_err(ClusterFileError::Read)?;
    let value: serde_json::Value =
        serde_json::from_str(&text).map_err(|error| ClusterFileError::NotJson {
            path: path.to_path_buf(),
            error,
        })?;
    let hex =
        value
            .get(field)
            .and_then(|v| v.as_str())
            .ok_or_else(|| ClusterFileError::NoField {
                path: path.to_path_buf(),
                field: field.to_string(),
            })?;
    confboot_util::hex::decode(hex).map_err(|error| ClusterFileError::NotHex {
        path: path.to_path_buf(),
        field: field.to_string(),
        error,
    })
}

/// Writes a new file with mode 0600; refuses to overwrite an existing one.
pub fn write_secret_file(
    path: &std::path::Path,
    bytes: &[u8],
) -> Result<(), confboot_util::fs::FileError> {
    confboot_util::fs::write_new_private(path, bytes)
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

#[cfg(test)]
mod tests {
    use super::*;
    use confboot_attest::measurements::MAX_POLICY_BYTES;
    use confboot_tpm::event_log::EventList;
    use confboot_util::args::VERBOSITY;
    use confboot_vtpm::AkTrust;
    use std::path::{Path, PathBuf};

    /// A command with the options `init`, `recover` and `verify` share.
    const CMD: Command = Command {
        name: "t",
        about: "Test command.",
        usage: "t [OPTIONS]",
        opts: &[
            MEASUREMENTS,
            AK_TRUST,
            EXPECTED_EVENTS,
            VARIANTS,
            SNP_POLICY,
            TDX_POLICY,
            AZURE_POLICY,
            VERBOSITY,
        ],
    };

    fn check(args: &[&str]) -> Result<NodeCheck, String> {
        let m = CMD.parse(args.iter().map(|s| s.to_string())).unwrap();
        NodeCheck::read(&m).map_err(|e| e.to_string())
    }

    /// The validator builder of a node check's vTPM settings.
    fn builder(args: &[&str]) -> Result<confboot_verifier::config::ValidatorBuilder, String> {
        let vtpm = check(args)?
            .settings
            .vtpm()
            .cloned()
            .expect("qemu-vtpm is accepted");
        vtpm.validator_builder().map_err(|e| describe(&e))
    }

    #[test]
    fn insecure_any_ak_is_taken_with_a_warning_only() {
        let b = builder(&["--measurements", "m.json", "--ak-trust", "insecure-any-ak"]).unwrap();
        assert!(b.is_insecure());
        let key = format!("04{}", "ab".repeat(64));
        let trust = format!("pinned:{key}");
        let b = builder(&["--measurements", "m.json", "--ak-trust", &trust]).unwrap();
        assert!(!b.is_insecure());
        assert!(matches!(b.ak_trust(), AkTrust::Pinned(keys) if keys.len() == 1));
    }

    #[test]
    fn both_options_make_a_validator_and_errors_name_the_option() {
        let tmp = confboot_testkit::TempDir::new("validator");
        let dir = tmp.path();
        let policy = confboot_testkit::write_image_policy(dir);
        let policy_arg = policy.display().to_string();
        let key = format!("pinned:04{}", "ab".repeat(64));
        let c = check(&["--measurements", &policy_arg, "--ak-trust", &key]).unwrap();
        assert_eq!(c.validators().unwrap().len(), 1);
        let loaded = c.settings.load().unwrap();
        assert_eq!(
            loaded.vtpm().unwrap().policy.entries()[&4].value,
            vec![0xab; 32]
        );
        assert_eq!(c.policy_files, policy_arg);

        assert_eq!(
            check(&["--ak-trust", &key]).unwrap_err(),
            "option --measurements is required"
        );
        assert_eq!(
            check(&["--measurements", &policy_arg]).unwrap_err(),
            "option --ak-trust is required"
        );
        let e = builder(&["--measurements", &policy_arg, "--ak-trust", "trust-me"]).unwrap_err();
        assert!(e.starts_with("--ak-trust: "), "{e}");

        std::fs::write(&policy, "{ broken").unwrap();
        let e = c.validators().err().unwrap().to_string();
        assert!(
            e.starts_with(&format!("--measurements {policy_arg}: ")),
            "{e}"
        );
        let missing = dir.join("missing.json").display().to_string();
        let e = check(&["--measurements", &missing, "--ak-trust", &key])
            .unwrap()
            .validators()
            .err()
            .unwrap()
            .to_string();
        assert!(
            e.starts_with("--measurements: ") && e.contains(&missing),
            "{e}"
        );
    }

    #[test]
    fn an_oversized_policy_file_is_refused_naming_the_option_the_file_and_the_limit() {
        let tmp = confboot_testkit::TempDir::new("oversized");
        let dir = tmp.path();
        let policy = confboot_testkit::write_image_policy(dir);
        let mut text = std::fs::read_to_string(&policy).unwrap();
        text.push_str(&" ".repeat(MAX_POLICY_BYTES as usize));
        std::fs::write(&policy, text).unwrap();
        let arg = policy.display().to_string();
        let e = check(&["--measurements", &arg, "--ak-trust", "insecure-any-ak"])
            .unwrap()
            .validators()
            .err()
            .unwrap()
            .to_string();
        assert!(
            e.starts_with("--measurements: ")
                && e.contains(&arg)
                && e.contains(&MAX_POLICY_BYTES.to_string()),
            "{e}"
        );
    }

    #[test]
    fn the_expected_event_log_is_read_and_its_errors_name_the_option() {
        let tmp = confboot_testkit::TempDir::new("events");
        let dir = tmp.path();
        let good = dir.join("good.json");
        std::fs::write(&good, EventList::default().to_json()).unwrap();
        let vtpm = ["--measurements", "m.json", "--ak-trust", "insecure-any-ak"];
        let with = |events: &Path| {
            let arg = events.display().to_string();
            builder(&[&vtpm[..], &["--expected-events", &arg]].concat())
        };
        assert_eq!(
            with(&good).unwrap().expected_events(),
            Some(&EventList::default())
        );
        assert_eq!(builder(&vtpm).unwrap().expected_events(), None);
        let bad = dir.join("bad.json");
        std::fs::write(&bad, r#"{"events": [], "extra": 1}"#).unwrap();
        let e = with(&bad).unwrap_err();
        assert!(e.starts_with("--expected-events "), "{e}");
    }

    /// Writes the test Intel's root and collateral and a TDX policy naming
    /// them into `dir`, pinning `td`'s MRTD and RTMRs 0 to 2 (or, with
    /// `mrtd_only`, its MRTD alone); returns the policy file.
    fn tdx_policy(
        dir: &Path,
        intel: &confboot_tests::tdx::TestIntel,
        td: &confboot_tests::tdx::Td,
        mrtd_only: bool,
    ) -> PathBuf {
        let write = |name: &str, bytes: &[u8]| std::fs::write(dir.join(name), bytes).unwrap();
        write("root.pem", intel.root_pem().as_bytes());
        write("tcb_info.json", intel.tcb_info().as_bytes());
        write("qe_identity.json", intel.qe_identity().as_bytes());
        write("tcb_chain.pem", intel.tcb_info_issuer_chain().as_bytes());
        write("pck_crl.der", &intel.pck_crl(&[]));
        write("root_crl.der", &intel.root_crl());
        let hex = confboot_util::hex::encode;
        let rtmrs = if mrtd_only {
            String::new()
        } else {
            format!(
                r#", "rtmrs": {{"0": "{}", "1": "{}", "2": "{}"}}"#,
                hex(&td.rtmrs[0]),
                hex(&td.rtmrs[1]),
                hex(&td.rtmrs[2])
            )
        };
        let file = dir.join("tdx.json");
        std::fs::write(
            &file,
            format!(
                r#"{{"mrtd": "{}"{rtmrs}, "rootCertificates": ["root.pem"],
                    "collateral": {{"tcbInfo": "tcb_info.json", "qeIdentity": "qe_identity.json",
                        "pckCrl": "pck_crl.der", "rootCrl": "root_crl.der",
                        "tcbInfoIssuerChain": "tcb_chain.pem"}}}}"#,
                hex(&td.mr_td)
            ),
        )
        .unwrap();
        file
    }

    #[test]
    fn init_and_recover_refuse_a_bootstrapped_td() {
        use confboot_attest::{AttestationError, Issuer};
        use confboot_tdx::{TdxIssuer, TdxRefusal};
        use confboot_tests::tdx::{Td, TestIntel, TestQuoteSource};
        let intel = TestIntel::new();
        let platform = Arc::new(intel.platform(1));
        let fresh = Td {
            mr_td: [0x7d; 48],
            rtmrs: [[1; 48], [2; 48], [3; 48], [0; 48]],
            debug: false,
        };
        let tmp = confboot_testkit::TempDir::new("cli-tdx-unmarked");
        let policy = tdx_policy(tmp.path(), &intel, &fresh, false);
        let arg = policy.display().to_string();
        let c = check(&["--variants", "tdx", "--tdx-policy", &arg]).unwrap();
        let validators = c.validators().unwrap();
        assert_eq!(validators.len(), 1);
        let extra = [0x5a; 32];
        let evidence = |td: &Td| {
            TdxIssuer::new(TestQuoteSource::honest(platform.clone(), td.clone()))
                .issue(&extra)
                .unwrap()
        };
        // A TD that has not been bootstrapped since it booted: RTMR3 zero.
        let attested = validators[0].validate(&evidence(&fresh), &extra).unwrap();
        assert_eq!(attested.measurements[&4], vec![0; 48]);
        // A bootstrapped member (RTMR3 holds a cluster mark), genuine
        // evidence and the same image: refused before any secret is sent.
        let mut member = fresh.clone();
        member.rtmrs[3] = confboot_tdx::extend(&[0; 48], &[0x42; 48]);
        let e = validators[0]
            .validate(&evidence(&member), &extra)
            .unwrap_err();
        assert!(
            matches!(&e, AttestationError::Policy(d) if d.is(&TdxRefusal::ClusterMarked)),
            "{e:?}"
        );
        assert!(e.to_string().contains("already bootstrapped"), "{e}");
    }

    #[test]
    fn a_tdx_policy_that_pins_only_mrtd_is_refused() {
        let intel = confboot_tests::tdx::TestIntel::new();
        let td = confboot_tests::tdx::Td {
            mr_td: [0x7d; 48],
            rtmrs: [[1; 48], [2; 48], [3; 48], [0; 48]],
            debug: false,
        };
        let tmp = confboot_testkit::TempDir::new("cli-tdx-mrtd-only");
        let policy = tdx_policy(tmp.path(), &intel, &td, true);
        let arg = policy.display().to_string();
        let e = check(&["--variants", "tdx", "--tdx-policy", &arg])
            .unwrap()
            .validators()
            .err()
            .unwrap()
            .to_string();
        assert!(
            e.starts_with(&format!(
                "--tdx-policy {arg}: TDX policy does not pin the image"
            )) && e.contains("RTMR0, RTMR1, RTMR2"),
            "{e}"
        );
    }

    #[test]
    fn variants_are_checked_and_each_needs_its_options() {
        assert_eq!(
            check(&["--measurements", "m", "--ak-trust", "x"])
                .unwrap()
                .settings
                .variants(),
            vec![Variant::QemuVtpm]
        );
        let e = check(&["--variants", "tpm"]).unwrap_err();
        assert!(e.starts_with("--variants: unknown variant"), "{e}");
        // sev-snp needs its policy; the vTPM options are not asked for.
        assert_eq!(
            check(&["--variants", "sev-snp"]).unwrap_err(),
            "--variants accepts sev-snp, which needs --snp-policy (the SEV-SNP policy)"
        );
        let tmp = confboot_testkit::TempDir::new("variants");
        let dir = tmp.path();
        let snp = dir.join("snp.json");
        std::fs::write(&snp, "{}").unwrap();
        let arg = snp.display().to_string();
        let c = check(&["--variants", "sev-snp", "--snp-policy", &arg]).unwrap();
        assert_eq!(c.policy_files, arg);
        let e = c.validators().err().unwrap().to_string();
        assert!(e.starts_with(&format!("--snp-policy {arg}: ")), "{e}");
    }
}
