//! The options the node agent shares with the bootstrapper, which carries
//! it: how a node checks the control plane it asks (a join service for its
//! ticket, `vpn.API` for peer updates), read into the attestation library's
//! typed settings, and the help of the options every node binary has.
//!
//! | option | setting | default |
//! |---|---|---|
//! | `--joinsvc-variants` | accepted variants | `qemu-vtpm` |
//! | `--joinsvc-measurements` (formerly `--joinsvc-policy`) | measurement policy | this node's own image |
//! | `--joinsvc-ak-trust` | AK trust (`insecure-any-ak` warned) | [`DEFAULT_JOINSVC_AK_TRUST`] |
//! | `--joinsvc-snp-policy` | SEV-SNP policy, for `sev-snp` | — |
//! | `--joinsvc-release-key` | release keys whose signed sets a join service may present instead of running this image | none |
//!
//! The vTPM options are needed only when `qemu-vtpm` is accepted, the SNP
//! policy only when `sev-snp` is ([`AttestationSettings::new`]).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use confboot_appraisal::reference::{ReferenceError, ReleaseKey, cose};
use confboot_attest::AttestationError;
use confboot_attest::Validator;
use confboot_tpm::{Tpm, TpmError};
use confboot_util::args::{ArgsError, Matches, Opt};
use confboot_util::fs::FileError;
use confboot_verifier::config::{
    AttestationSettings, ConfigError, DEFAULT_VARIANTS, GivenSettings, INSECURE_ANY_AK_WARNING,
    InsecureAnyAk, Setting, parse_variants,
};
use confboot_verifier::help::{AZURE_POLICY_HELP, SNP_POLICY_HELP, TDX_POLICY_HELP, VARIANTS_HELP};
use confboot_verifier::join_service::{JoinServiceError, join_service_validators};
use confboot_vtpm::{EventLogSource, VtpmIssuer};

/// Where a node image keeps the CA of its platform's attestation keys.
pub const DEFAULT_JOINSVC_AK_TRUST: &str = "ca:/etc/confboot/ak-ca.pem";

/// The help of `--event-log`, the node binaries' (the bootstrapper's and
/// the node agent's).
pub const EVENT_LOG_HELP: &str = "The firmware's TCG event log sent with this node's evidence, for verifiers to replay and explain: a file, or `none` (default: the kernel's /sys/kernel/security/tpm0/binary_bios_measurements when --tpm is the device)";

/// Why a node binary's vTPM issuer did not open; each message names the
/// option it comes from.
#[derive(Debug, thiserror::Error)]
pub enum VtpmIssuerError {
    /// The `--tpm` cannot be opened.
    #[error("--tpm {spec}: {error}")]
    Tpm {
        /// The `--tpm` value.
        spec: String,
        /// Why it did not open.
        error: TpmError,
    },
    /// The TPM's attestation key is not usable.
    #[error("attestation key: {0}")]
    AttestationKey(AttestationError),
    /// The `--event-log` is not usable.
    #[error("--event-log: {0}")]
    EventLog(AttestationError),
}

/// Opens the TPM at `spec` (`--tpm`) and its attestation key, with the
/// event log of `event_log` (`--event-log`): the vTPM issuer of the
/// bootstrapper and of the node agent. `opened` sees the TPM before the
/// key is loaded (each binary logs what it opened its own way).
pub fn open_vtpm_issuer(
    spec: &str,
    event_log: &EventLogSource,
    opened: impl FnOnce(&Tpm),
) -> Result<VtpmIssuer, VtpmIssuerError> {
    let tpm = Tpm::open(spec).map_err(|error| VtpmIssuerError::Tpm {
        spec: spec.to_string(),
        error,
    })?;
    opened(&tpm);
    VtpmIssuer::new(tpm)
        .map_err(VtpmIssuerError::AttestationKey)?
        .with_event_log_from(event_log)
        .map_err(VtpmIssuerError::EventLog)
}

/// `--joinsvc-measurements`.
pub const JOINSVC_MEASUREMENTS: Opt = Opt::value(
    "joinsvc-measurements",
    "FILE",
    "Measurements join services must attest to (Constellation's JSON format; default: this node's own PCRs but 15 (the cluster mark) and 10 (IMA, run time): the same image)",
)
.aliases(&["joinsvc-policy"]);

/// `--joinsvc-release-key`.
pub const JOINSVC_RELEASE_KEY: Opt = Opt::value(
    "joinsvc-release-key",
    "PEM",
    "A release public key (`confboot keygen`) pinned in this node's measured configuration: a join \
     service that does not run this node's image is accepted when it presents a reference-value set \
     signed by it, valid now, that its evidence matches (a rolling upgrade); repeatable [default: \
     only this node's image]",
);

/// `--joinsvc-ak-trust`.
pub const JOINSVC_AK_TRUST: Opt = Opt::value(
    "joinsvc-ak-trust",
    "MODE",
    "AK trust for join services: ca:FILE, pinned:FILE|HEX, insecure-any-ak",
)
.default(DEFAULT_JOINSVC_AK_TRUST);

/// `--joinsvc-variants`.
pub const JOINSVC_VARIANTS: Opt =
    Opt::value("joinsvc-variants", "LIST", VARIANTS_HELP).default(DEFAULT_VARIANTS);

/// `--joinsvc-snp-policy`.
pub const JOINSVC_SNP_POLICY: Opt = Opt::value("joinsvc-snp-policy", "FILE", SNP_POLICY_HELP);

/// `--joinsvc-tdx-policy`.
pub const JOINSVC_TDX_POLICY: Opt = Opt::value("joinsvc-tdx-policy", "FILE", TDX_POLICY_HELP);

/// `--joinsvc-azure-policy`.
pub const JOINSVC_AZURE_POLICY: Opt = Opt::value("joinsvc-azure-policy", "FILE", AZURE_POLICY_HELP);

/// The `--joinsvc-*` options as given, before they are checked.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JoinServiceOptions {
    variants: String,
    given: GivenSettings,
    release_keys: Vec<PathBuf>,
}

impl JoinServiceOptions {
    /// Reads the `--joinsvc-*` options (the command must declare all six:
    /// [`JOINSVC_MEASUREMENTS`], [`JOINSVC_AK_TRUST`], [`JOINSVC_VARIANTS`],
    /// [`JOINSVC_SNP_POLICY`], [`JOINSVC_TDX_POLICY`], [`JOINSVC_AZURE_POLICY`],
    /// [`JOINSVC_RELEASE_KEY`]).
    pub fn read(m: &Matches) -> JoinServiceOptions {
        JoinServiceOptions {
            variants: m
                .value(&JOINSVC_VARIANTS)
                .unwrap_or(DEFAULT_VARIANTS)
                .to_string(),
            given: GivenSettings {
                measurements: m.value(&JOINSVC_MEASUREMENTS).map(PathBuf::from),
                // Without a file, join services must run this node's image.
                measurements_required: false,
                ak_trust: m.value(&JOINSVC_AK_TRUST).map(str::to_string),
                insecure_any_ak: InsecureAnyAk::Accepted,
                expected_events: None,
                snp_policy: m.value(&JOINSVC_SNP_POLICY).map(PathBuf::from),
                tdx_policy: m.value(&JOINSVC_TDX_POLICY).map(PathBuf::from),
                azure_policy: m.value(&JOINSVC_AZURE_POLICY).map(PathBuf::from),
            },
            release_keys: m
                .values(&JOINSVC_RELEASE_KEY)
                .into_iter()
                .map(PathBuf::from)
                .collect(),
        }
    }

    /// The files of `--joinsvc-release-key`, as given.
    pub fn release_keys(&self) -> Vec<PathBuf> {
        self.release_keys.clone()
    }

    /// The settings join services are checked with; the error names the
    /// option.
    pub fn settings(self) -> Result<AttestationSettings, JoinServiceOptionsError> {
        let variants = parse_variants(&self.variants)
            .map_err(|e| JoinServiceOptionsError::Settings(ConfigError::Variants(e)))?;
        AttestationSettings::new(variants, self.given).map_err(JoinServiceOptionsError::Settings)
    }
}

/// Why the `--joinsvc-*` options give no settings or no validators; each
/// message names the option it is about.
#[derive(Debug, thiserror::Error)]
pub enum JoinServiceOptionsError {
    /// The settings are not usable (an unknown variant, a missing file).
    #[error("{}", describe(.0))]
    Settings(ConfigError),
    /// A `--joinsvc-release-key` file cannot be read.
    #[error("--{option}: {0}", option = JOINSVC_RELEASE_KEY.long)]
    ReadReleaseKey(FileError),
    /// A `--joinsvc-release-key` file is not a release key.
    #[error("--{option} {}: {error}", path.display(), option = JOINSVC_RELEASE_KEY.long)]
    ReleaseKey {
        /// The file.
        path: PathBuf,
        /// Why it is no release key.
        error: ReferenceError,
    },
    /// The validators cannot be built from the settings.
    #[error("{}", .0.describe(&name))]
    Validators(JoinServiceError),
}

/// The option that gives a setting of join services' attestation.
fn option(setting: Setting) -> Option<&'static Opt> {
    match setting {
        Setting::Variants => Some(&JOINSVC_VARIANTS),
        Setting::Measurements => Some(&JOINSVC_MEASUREMENTS),
        Setting::AkTrust => Some(&JOINSVC_AK_TRUST),
        Setting::SnpPolicy => Some(&JOINSVC_SNP_POLICY),
        Setting::TdxPolicy => Some(&JOINSVC_TDX_POLICY),
        Setting::AzurePolicy => Some(&JOINSVC_AZURE_POLICY),
        // Join services are never checked with these: insecure-any-ak is
        // taken with a warning, and no expected event log is read.
        Setting::InsecureAnyAkConfirmation | Setting::ExpectedEvents => None,
    }
}

/// A setting as messages name it: `--` and its option.
fn name(setting: Setting) -> String {
    option(setting).map_or_else(|| setting.to_string(), |o| format!("--{}", o.long))
}

/// An attestation error, naming the `--joinsvc-*` option it is about.
fn describe(e: &ConfigError) -> String {
    match (e, option(e.setting())) {
        (ConfigError::Missing(_), Some(opt)) => ArgsError::Required(opt.long.into()).to_string(),
        _ => e.describe(&name),
    }
}

/// The announcement of a join-service validator built with `insecure-any-ak`.
fn announce_insecure_any_ak() {
    log::warn!("--{} {INSECURE_ANY_AK_WARNING}", JOINSVC_AK_TRUST.long);
}

/// One validator per variant the settings accept; `issuer` is this node's
/// vTPM (its own image is the default policy), and a join service may
/// present a set signed by one of the keys in `release_keys` instead. The
/// error names the option.
pub fn validators(
    settings: &AttestationSettings,
    release_keys: &[PathBuf],
    issuer: &VtpmIssuer,
) -> Result<Vec<Arc<dyn Validator>>, JoinServiceOptionsError> {
    let keys = release_keys
        .iter()
        .map(|path| read_release_key(path))
        .collect::<Result<Vec<_>, _>>()?;
    join_service_validators(settings, issuer, announce_insecure_any_ak, &keys)
        .map_err(JoinServiceOptionsError::Validators)
}

/// A `--joinsvc-release-key` file, read (bounded) and parsed.
fn read_release_key(path: &Path) -> Result<ReleaseKey, JoinServiceOptionsError> {
    let pem = confboot_util::fs::read_bounded(path, cose::MAX_KEY_PEM_BYTES as u64)
        .map_err(JoinServiceOptionsError::ReadReleaseKey)?;
    ReleaseKey::from_pem(&pem).map_err(|error| JoinServiceOptionsError::ReleaseKey {
        path: path.to_path_buf(),
        error,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use confboot_attest::Variant;
    use confboot_util::args::{Command, VERBOSITY};

    const CMD: Command = Command {
        name: "t",
        about: "Test command.",
        usage: "t [OPTIONS]",
        opts: &[
            JOINSVC_MEASUREMENTS,
            JOINSVC_AK_TRUST,
            JOINSVC_VARIANTS,
            JOINSVC_SNP_POLICY,
            JOINSVC_TDX_POLICY,
            JOINSVC_AZURE_POLICY,
            JOINSVC_RELEASE_KEY,
            VERBOSITY,
        ],
    };

    fn settings(args: &[&str]) -> Result<AttestationSettings, JoinServiceOptionsError> {
        let m = CMD.parse(args.iter().map(|s| s.to_string())).unwrap();
        JoinServiceOptions::read(&m).settings()
    }

    #[test]
    fn join_services_are_checked_as_the_options_say_and_errors_name_them() {
        let s = settings(&[]).unwrap();
        assert_eq!(s.variants(), vec![Variant::QemuVtpm]);
        let vtpm = s.vtpm().unwrap();
        assert_eq!(vtpm.measurements, None, "default: this node's own image");
        assert_eq!(vtpm.ak_trust, DEFAULT_JOINSVC_AK_TRUST);
        let s = settings(&["--joinsvc-policy", "p.json"]).unwrap();
        assert_eq!(
            s.vtpm().unwrap().measurements,
            Some(PathBuf::from("p.json")),
            "the old name still works"
        );
        let e = settings(&["--joinsvc-variants", "tpm"]).unwrap_err();
        assert!(
            matches!(
                e,
                JoinServiceOptionsError::Settings(ConfigError::Variants(_))
            ),
            "{e:?}"
        );
        let e = e.to_string();
        assert!(e.starts_with("--joinsvc-variants: unknown variant"), "{e}");
        let e = settings(&["--joinsvc-variants", "sev-snp"]).unwrap_err();
        assert!(
            matches!(
                e,
                JoinServiceOptionsError::Settings(ConfigError::SnpPolicyRequired)
            ),
            "{e:?}"
        );
        assert_eq!(
            e.to_string(),
            "--joinsvc-variants accepts sev-snp, which needs --joinsvc-snp-policy (the SEV-SNP policy)"
        );
        let s = settings(&[
            "--joinsvc-variants",
            "sev-snp",
            "--joinsvc-snp-policy",
            "snp.json",
        ])
        .unwrap();
        assert_eq!(s.vtpm(), None, "qemu-vtpm is not accepted");
        assert_eq!(
            s.snp().map(|snp| snp.policy.clone()),
            Some(PathBuf::from("snp.json"))
        );
    }
}
