//! Typed attestation configuration: which variants a verifier accepts from
//! its peer, how it checks vTPM evidence (a measurement policy, the trust
//! in attestation keys, an expected event log), SEV-SNP evidence (an SNP
//! policy) and TDX evidence (a TDX policy naming its collateral files), and
//! the validators built from it.
//!
//! A binary reads its options into [`GivenSettings`] (paths and specs as
//! given, nothing read yet) and checks them against the accepted variants
//! into [`AttestationSettings`], a non-empty list of [`VariantSettings`]
//! without repeats, each accepted variant with its own settings
//! ([`AttestationSettings::new`]). [`AttestationSettings::load`] then reads
//! the files into an [`AttestationConfig`], one [`VariantConfig`] per
//! variant, whose [`AttestationConfig::validators`] a server or client uses. Errors are typed ([`ConfigError`]) and say which
//! [`Setting`] they are about; the binary names each setting after its own
//! option ([`ConfigError::describe`]). This crate knows no option.
//!
//! `insecure-any-ak` trusts any attestation key: any machine can then sign
//! a quote for any measurements, so attestation proves nothing. It exists
//! for local QEMU runs without provisioned AKs. [`InsecureAnyAk`] says
//! whether a binary takes it (joinsvc, which hands out disk keys, only
//! with a confirmation); every validator built with it is announced with a
//! warning ([`ValidatorBuilder::announce_insecure_with`]), and the
//! validator warns on every check.
//!
//! Files are read bounded: the measurement policy through
//! [`confboot_util::fs::read_bounded_text`] (at most [`MAX_POLICY_BYTES`]),
//! the expected event log at most [`MAX_EVENT_LIST_BYTES`]; the AK-trust
//! syntax is [`AkTrust::parse`]'s, the SNP policy's [`SnpPolicy::load`]'s,
//! the TDX policy's [`TdxPolicy::load`](confboot_tdx::TdxPolicy::load)'s.
//!
//! A verifier told nothing accepts [`DEFAULT_VARIANTS`] (`qemu-vtpm`, as
//! before variants were configurable). In the handshake the validator is
//! the one of the evidence's variant; a variant that is not accepted is
//! refused (the `atls` crate's `AtlsError::VariantNotAccepted`).

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use confboot_attest::measurements::MAX_POLICY_BYTES;
use confboot_attest::{AttestationError, MeasurementPolicy, PolicyError, Validator, Variant};
use confboot_azure::{AzureSnpPolicy, AzureSnpValidator};
use confboot_snp::{SnpPolicy, SnpValidator};
use confboot_tdx::TdxValidator;
use confboot_tpm::event_log::{EventList, EventListError};
use confboot_util::fs::{FileError, read_bounded_text};
use confboot_vtpm::{AkTrust, VtpmValidator};

/// The variants a verifier accepts when it is told nothing, in
/// [`parse_variants`]' syntax.
pub const DEFAULT_VARIANTS: &str = "qemu-vtpm";

/// Most bytes a list of variants may have (every variant once).
const MAX_VARIANTS_TEXT: usize = 256;

/// Largest expected-event-log file read (a predicted log is about 2 KiB).
pub const MAX_EVENT_LIST_BYTES: u64 = 1 << 20;

/// What a verifier announces, after the name of its AK-trust setting, for
/// every validator built with `insecure-any-ak`.
pub const INSECURE_ANY_AK_WARNING: &str = "insecure-any-ak: any attestation key is trusted, so \
     attestation proves nothing about the machine; for local QEMU only";

/// Why a list of variants was refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum VariantsError {
    /// The list is longer than any list of known variants.
    TooLong,
    /// A name is no known variant (an empty name included).
    Unknown(String),
    /// A variant is named twice.
    Twice(Variant),
    /// A node attests with one variant, and the list names several.
    NotOne,
    /// The list names no variant.
    Empty,
}

impl fmt::Display for VariantsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            VariantsError::TooLong => write!(f, "more than {MAX_VARIANTS_TEXT} bytes"),
            VariantsError::Unknown(name) => {
                let known: Vec<&str> = Variant::ALL.iter().map(|v| v.name()).collect();
                write!(f, "unknown variant {name:?} (known: {})", known.join(", "))
            }
            VariantsError::Twice(variant) => write!(f, "{variant} is named twice"),
            VariantsError::NotOne => f.write_str("a node attests with exactly one variant"),
            VariantsError::Empty => f.write_str("no variant is named"),
        }
    }
}

impl std::error::Error for VariantsError {}

/// Parses a list of variant names, comma-separated (spaces around names
/// are ignored): at least one, each known, none twice.
pub fn parse_variants(text: &str) -> Result<Vec<Variant>, VariantsError> {
    if text.len() > MAX_VARIANTS_TEXT {
        return Err(VariantsError::TooLong);
    }
    let mut out = Vec::new();
    for name in text.split(',').map(str::trim) {
        let variant =
            Variant::from_name(name).ok_or_else(|| VariantsError::Unknown(name.to_string()))?;
        if out.contains(&variant) {
            return Err(VariantsError::Twice(variant));
        }
        out.push(variant);
    }
    Ok(out)
}

/// The one variant a node attests with, in [`parse_variants`]' syntax.
pub fn parse_attestation_variant(text: &str) -> Result<Variant, VariantsError> {
    match parse_variants(text)?.as_slice() {
        [variant] => Ok(*variant),
        _ => Err(VariantsError::NotOne),
    }
}

/// A setting of an attestation configuration. Errors name the setting
/// they are about, and the binary that read it names it in its messages
/// (after its option).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Setting {
    /// The accepted variants.
    Variants,
    /// The measurement-policy file of vTPM evidence.
    Measurements,
    /// The trust in vTPM attestation keys.
    AkTrust,
    /// The confirmation that `insecure-any-ak` is meant.
    InsecureAnyAkConfirmation,
    /// The expected event log of vTPM evidence.
    ExpectedEvents,
    /// The SEV-SNP policy file.
    SnpPolicy,
    /// The TDX policy file.
    TdxPolicy,
    /// The `azure-sev-snp` policy file.
    AzurePolicy,
}

impl fmt::Display for Setting {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Setting::Variants => "the accepted variants",
            Setting::Measurements => "the measurement policy",
            Setting::AkTrust => "the AK trust",
            Setting::InsecureAnyAkConfirmation => "the confirmation of insecure-any-ak",
            Setting::ExpectedEvents => "the expected event log",
            Setting::SnpPolicy => "the SEV-SNP policy",
            Setting::TdxPolicy => "the TDX policy",
            Setting::AzurePolicy => "the azure-sev-snp policy",
        })
    }
}

/// Whether a verifier takes `insecure-any-ak`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum InsecureAnyAk {
    /// Taken, and announced with a warning.
    #[default]
    Accepted,
    /// Refused: the verifier wants a confirmation that was not given
    /// ([`Setting::InsecureAnyAkConfirmation`]).
    Unconfirmed,
}

/// Why an attestation configuration cannot be used.
#[derive(Debug)]
pub enum ConfigError {
    /// A setting that an accepted variant needs is not given.
    Missing(Setting),
    /// The variants are not a list of known variants.
    Variants(VariantsError),
    /// `sev-snp` is accepted but no SNP policy is given.
    SnpPolicyRequired,
    /// `tdx` is accepted but no TDX policy is given.
    TdxPolicyRequired,
    /// `azure-sev-snp` is accepted but no Azure policy is given.
    AzurePolicyRequired,
    /// The measurement-policy file could not be read (or is too large).
    MeasurementsFile(FileError),
    /// The measurement-policy file is not a valid policy.
    Measurements {
        /// The file.
        path: PathBuf,
        /// Why.
        error: PolicyError,
    },
    /// A measurement policy given in code (not read from a file) is
    /// refused as a validator's: it does not pin the image
    /// ([`MeasurementPolicy::check_pins_image`]).
    Policy(PolicyError),
    /// The AK trust is malformed, or a file it names is not usable.
    AkTrust(AttestationError),
    /// `insecure-any-ak` was given without its confirmation.
    InsecureAnyAkNotConfirmed,
    /// The expected event log could not be read (or is too large).
    ExpectedEventsFile(FileError),
    /// The expected event log is not an event list.
    ExpectedEvents {
        /// The file.
        path: PathBuf,
        /// Why.
        error: EventListError,
    },
    /// The SNP policy file is unusable (unreadable, malformed, a root
    /// bundle it names does not load).
    SnpPolicy {
        /// The file.
        path: PathBuf,
        /// Why.
        error: PolicyError,
    },
    /// The TDX policy file is unusable (unreadable, malformed, a root
    /// certificate, collateral file or expected log it names does not load).
    TdxPolicy {
        /// The file.
        path: PathBuf,
        /// Why.
        error: PolicyError,
    },
    /// The `azure-sev-snp` policy file is unusable (unreadable, malformed,
    /// a root bundle it names does not load, the image not pinned).
    AzurePolicy {
        /// The file.
        path: PathBuf,
        /// Why.
        error: PolicyError,
    },
}

impl ConfigError {
    /// The setting the error is about.
    pub fn setting(&self) -> Setting {
        match self {
            ConfigError::Missing(setting) => *setting,
            ConfigError::Variants(_)
            | ConfigError::SnpPolicyRequired
            | ConfigError::TdxPolicyRequired
            | ConfigError::AzurePolicyRequired => Setting::Variants,
            ConfigError::MeasurementsFile(_)
            | ConfigError::Measurements { .. }
            | ConfigError::Policy(_) => Setting::Measurements,
            ConfigError::AkTrust(_) | ConfigError::InsecureAnyAkNotConfirmed => Setting::AkTrust,
            ConfigError::ExpectedEventsFile(_) | ConfigError::ExpectedEvents { .. } => {
                Setting::ExpectedEvents
            }
            ConfigError::SnpPolicy { .. } => Setting::SnpPolicy,
            ConfigError::TdxPolicy { .. } => Setting::TdxPolicy,
            ConfigError::AzurePolicy { .. } => Setting::AzurePolicy,
        }
    }

    /// The message, each setting named by `name` (a binary names the
    /// option it read the setting from): the setting first, then the file
    /// when the error is about its content, then why.
    pub fn describe(&self, name: &dyn Fn(Setting) -> String) -> String {
        let named = name(self.setting());
        match self {
            ConfigError::Missing(_) => format!("{named} is required"),
            ConfigError::Variants(e) => format!("{named}: {e}"),
            ConfigError::SnpPolicyRequired => format!(
                "{named} accepts sev-snp, which needs {} (the SEV-SNP policy)",
                name(Setting::SnpPolicy)
            ),
            ConfigError::TdxPolicyRequired => format!(
                "{named} accepts tdx, which needs {} (the TDX policy)",
                name(Setting::TdxPolicy)
            ),
            ConfigError::AzurePolicyRequired => format!(
                "{named} accepts azure-sev-snp, which needs {} (the azure-sev-snp policy)",
                name(Setting::AzurePolicy)
            ),
            ConfigError::MeasurementsFile(e) | ConfigError::ExpectedEventsFile(e) => {
                format!("{named}: {e}")
            }
            ConfigError::Measurements { path, error }
            | ConfigError::SnpPolicy { path, error }
            | ConfigError::TdxPolicy { path, error }
            | ConfigError::AzurePolicy { path, error } => {
                format!("{named} {}: {error}", path.display())
            }
            ConfigError::ExpectedEvents { path, error } => {
                format!("{named} {}: {error}", path.display())
            }
            ConfigError::AkTrust(e) => format!("{named}: {e}"),
            ConfigError::Policy(e) => format!("{named}: {e}"),
            ConfigError::InsecureAnyAkNotConfirmed => format!(
                "{named} insecure-any-ak trusts any attestation key, so any machine could pass \
                 as an attested node; refused unless {} is given too (local QEMU only)",
                name(Setting::InsecureAnyAkConfirmation)
            ),
        }
    }
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.describe(&|setting| setting.to_string()))
    }
}

impl std::error::Error for ConfigError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            ConfigError::Variants(e) => Some(e),
            ConfigError::MeasurementsFile(e) | ConfigError::ExpectedEventsFile(e) => Some(e),
            ConfigError::Measurements { error, .. }
            | ConfigError::SnpPolicy { error, .. }
            | ConfigError::TdxPolicy { error, .. }
            | ConfigError::AzurePolicy { error, .. } => Some(error),
            ConfigError::ExpectedEvents { error, .. } => Some(error),
            ConfigError::AkTrust(e) => Some(e),
            ConfigError::Policy(e) => Some(e),
            ConfigError::Missing(_)
            | ConfigError::SnpPolicyRequired
            | ConfigError::TdxPolicyRequired
            | ConfigError::AzurePolicyRequired
            | ConfigError::InsecureAnyAkNotConfirmed => None,
        }
    }
}

/// The attestation settings as a binary was given them, each `None` when
/// not given; [`AttestationSettings::new`] checks them against the
/// accepted variants.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct GivenSettings {
    /// The measurement-policy file.
    pub measurements: Option<PathBuf>,
    /// Whether vTPM evidence needs a measurement-policy file (`false`: the
    /// caller has a policy of its own when none is given, as a node has
    /// its own image for its join services).
    pub measurements_required: bool,
    /// The AK trust, in [`AkTrust::parse`]'s syntax.
    pub ak_trust: Option<String>,
    /// Whether `insecure-any-ak` is taken.
    pub insecure_any_ak: InsecureAnyAk,
    /// The predicted event log of the expected measurements (`confboot
    /// measure --events-out`): a PCR that differs is explained by the
    /// first event that differs, when the attester sends its log.
    pub expected_events: Option<PathBuf>,
    /// The SEV-SNP policy file.
    pub snp_policy: Option<PathBuf>,
    /// The TDX policy file.
    pub tdx_policy: Option<PathBuf>,
    /// The `azure-sev-snp` policy file.
    pub azure_policy: Option<PathBuf>,
}

/// How vTPM evidence is checked, as configured (nothing read yet).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VtpmSettings {
    /// The measurement-policy file; `None` when the caller supplies its
    /// own policy ([`GivenSettings::measurements_required`]).
    pub measurements: Option<PathBuf>,
    /// The AK trust, in [`AkTrust::parse`]'s syntax.
    pub ak_trust: String,
    /// Whether `insecure-any-ak` is taken.
    pub insecure_any_ak: InsecureAnyAk,
    /// The expected event log, if any.
    pub expected_events: Option<PathBuf>,
}

/// How SEV-SNP evidence is checked, as configured (nothing read yet).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SnpSettings {
    /// The SNP policy file.
    pub policy: PathBuf,
}

/// How TDX evidence is checked, as configured (nothing read yet).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TdxSettings {
    /// The TDX policy file (which names the collateral files).
    pub policy: PathBuf,
}

/// How `azure-sev-snp` evidence is checked, as configured (nothing read yet).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AzureSettings {
    /// The `azure-sev-snp` policy file ([`AzureSnpPolicy`]).
    pub policy: PathBuf,
}

/// The settings of one accepted variant: each variant carries exactly
/// what checking its evidence needs, so no stage asks whether a setting
/// of an accepted variant is there.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum VariantSettings {
    /// `qemu-vtpm`.
    QemuVtpm(VtpmSettings),
    /// `sev-snp`.
    SevSnp(SnpSettings),
    /// `tdx`.
    Tdx(TdxSettings),
    /// `azure-sev-snp`.
    AzureSevSnp(AzureSettings),
}

impl VariantSettings {
    /// The variant these settings are of.
    pub fn variant(&self) -> Variant {
        match self {
            VariantSettings::QemuVtpm(_) => Variant::QemuVtpm,
            VariantSettings::SevSnp(_) => Variant::SevSnp,
            VariantSettings::Tdx(_) => Variant::Tdx,
            VariantSettings::AzureSevSnp(_) => Variant::AzureSevSnp,
        }
    }

    /// Reads the files of this variant: the measurement policy (which
    /// must be named here), the AK trust and the expected event log of
    /// `qemu-vtpm`; the SNP policy of `sev-snp`; the TDX policy (and the
    /// files it names) of `tdx`.
    pub fn load(&self) -> Result<VariantConfig, ConfigError> {
        Ok(match self {
            VariantSettings::QemuVtpm(vtpm) => VariantConfig::QemuVtpm(vtpm.load()?),
            VariantSettings::SevSnp(snp) => VariantConfig::SevSnp(load_snp_validator(&snp.policy)?),
            VariantSettings::Tdx(tdx) => {
                VariantConfig::Tdx(Box::new(load_tdx_validator(&tdx.policy)?))
            }
            VariantSettings::AzureSevSnp(azure) => {
                VariantConfig::AzureSevSnp(Box::new(load_azure_validator(&azure.policy)?))
            }
        })
    }
}

/// What a verifier accepts from its peer, as configured (nothing read
/// yet): the settings of each accepted variant, in the order given, at
/// least one and each variant once ([`AttestationSettings::new`] checks).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AttestationSettings {
    variants: Vec<VariantSettings>,
}

impl AttestationSettings {
    /// Checks `given` against `variants`, in the order they are named:
    /// `qemu-vtpm` needs the AK trust (and the measurement-policy file when
    /// [`GivenSettings::measurements_required`]), `sev-snp` the SNP policy,
    /// `tdx` the TDX policy. Settings of a variant that is not accepted are
    /// left out. An empty list, or one naming a variant twice, is refused.
    pub fn new(variants: Vec<Variant>, given: GivenSettings) -> Result<Self, ConfigError> {
        if variants.is_empty() {
            return Err(ConfigError::Variants(VariantsError::Empty));
        }
        let mut out: Vec<VariantSettings> = Vec::with_capacity(variants.len());
        for variant in variants {
            if out.iter().any(|s| s.variant() == variant) {
                return Err(ConfigError::Variants(VariantsError::Twice(variant)));
            }
            out.push(match variant {
                Variant::QemuVtpm => {
                    if given.measurements_required && given.measurements.is_none() {
                        return Err(ConfigError::Missing(Setting::Measurements));
                    }
                    let ak_trust = given
                        .ak_trust
                        .clone()
                        .ok_or(ConfigError::Missing(Setting::AkTrust))?;
                    VariantSettings::QemuVtpm(VtpmSettings {
                        measurements: given.measurements.clone(),
                        ak_trust,
                        insecure_any_ak: given.insecure_any_ak,
                        expected_events: given.expected_events.clone(),
                    })
                }
                Variant::SevSnp => VariantSettings::SevSnp(SnpSettings {
                    policy: given
                        .snp_policy
                        .clone()
                        .ok_or(ConfigError::SnpPolicyRequired)?,
                }),
                Variant::Tdx => VariantSettings::Tdx(TdxSettings {
                    policy: given
                        .tdx_policy
                        .clone()
                        .ok_or(ConfigError::TdxPolicyRequired)?,
                }),
                Variant::AzureSevSnp => VariantSettings::AzureSevSnp(AzureSettings {
                    policy: given
                        .azure_policy
                        .clone()
                        .ok_or(ConfigError::AzurePolicyRequired)?,
                }),
            });
        }
        Ok(AttestationSettings { variants: out })
    }

    /// The settings of each accepted variant, in order.
    pub fn settings(&self) -> &[VariantSettings] {
        &self.variants
    }

    /// The accepted variants, in order.
    pub fn variants(&self) -> Vec<Variant> {
        self.variants.iter().map(VariantSettings::variant).collect()
    }

    /// Whether `variant` is accepted.
    pub fn accepts(&self, variant: Variant) -> bool {
        self.variants.iter().any(|s| s.variant() == variant)
    }

    /// The vTPM settings, when `qemu-vtpm` is accepted.
    pub fn vtpm(&self) -> Option<&VtpmSettings> {
        self.variants.iter().find_map(|s| match s {
            VariantSettings::QemuVtpm(vtpm) => Some(vtpm),
            _ => None,
        })
    }

    /// The SEV-SNP settings, when `sev-snp` is accepted.
    pub fn snp(&self) -> Option<&SnpSettings> {
        self.variants.iter().find_map(|s| match s {
            VariantSettings::SevSnp(snp) => Some(snp),
            _ => None,
        })
    }

    /// The TDX settings, when `tdx` is accepted.
    pub fn tdx(&self) -> Option<&TdxSettings> {
        self.variants.iter().find_map(|s| match s {
            VariantSettings::Tdx(tdx) => Some(tdx),
            _ => None,
        })
    }

    /// Reads every file, in the order the variants are named
    /// ([`VariantSettings::load`]).
    pub fn load(&self) -> Result<AttestationConfig, ConfigError> {
        self.load_where(|_| true)
    }

    /// As [`AttestationSettings::load`], for every accepted variant but
    /// `skipped`, whose reference values the caller reads from elsewhere
    /// (signed reference-value sets for `qemu-vtpm`).
    pub fn load_without(&self, skipped: Variant) -> Result<AttestationConfig, ConfigError> {
        self.load_where(|settings| settings.variant() != skipped)
    }

    fn load_where(
        &self,
        wanted: impl Fn(&VariantSettings) -> bool,
    ) -> Result<AttestationConfig, ConfigError> {
        let variants = self
            .variants
            .iter()
            .filter(|settings| wanted(settings))
            .map(VariantSettings::load)
            .collect::<Result<_, _>>()?;
        Ok(AttestationConfig { variants })
    }
}

impl VtpmSettings {
    /// The validator builder of these settings: the AK trust read
    /// (refused when it is `insecure-any-ak` and that is
    /// [`InsecureAnyAk::Unconfirmed`]), and the expected event log.
    pub fn validator_builder(&self) -> Result<ValidatorBuilder, ConfigError> {
        let ak_trust = AkTrust::parse(&self.ak_trust).map_err(ConfigError::AkTrust)?;
        let builder = ValidatorBuilder::new(ak_trust, self.insecure_any_ak)?;
        Ok(match &self.expected_events {
            Some(path) => builder.with_expected_events(load_expected_events(path)?),
            None => builder,
        })
    }

    /// Reads the measurement policy (which must be named here), then the
    /// AK trust and the expected event log.
    pub fn load(&self) -> Result<VtpmConfig, ConfigError> {
        let path = self
            .measurements
            .as_deref()
            .ok_or(ConfigError::Missing(Setting::Measurements))?;
        let policy = load_measurement_policy(path)?;
        Ok(VtpmConfig {
            policy_path: path.to_path_buf(),
            policy,
            validators: self.validator_builder()?,
        })
    }
}

/// One accepted variant, its files read: what checks its evidence.
#[derive(Clone, Debug)]
pub enum VariantConfig {
    /// `qemu-vtpm`: the measurement policy and the validator builder.
    QemuVtpm(VtpmConfig),
    /// `sev-snp`: the validator of the SNP policy.
    SevSnp(SnpValidator),
    /// `tdx`: the validator of the TDX policy and its collateral (boxed:
    /// the collateral makes it several times the size of the others).
    Tdx(Box<TdxValidator>),
    /// `azure-sev-snp`: the validator of the Azure policy (boxed, as TDX's).
    AzureSevSnp(Box<AzureSnpValidator>),
}

impl VariantConfig {
    /// The variant this is the configuration of.
    pub fn variant(&self) -> Variant {
        match self {
            VariantConfig::QemuVtpm(_) => Variant::QemuVtpm,
            VariantConfig::SevSnp(_) => Variant::SevSnp,
            VariantConfig::Tdx(_) => Variant::Tdx,
            VariantConfig::AzureSevSnp(_) => Variant::AzureSevSnp,
        }
    }

    /// The validator of this variant: vTPM evidence under the measurement
    /// policy (the attester's PCR 15 as the builder requires; a policy that
    /// does not pin the image once the builder dropped what it drops is
    /// refused, [`ValidatorBuilder::build`]), SEV-SNP and TDX evidence
    /// under their policies.
    pub fn validator(&self) -> Result<Arc<dyn Validator>, ConfigError> {
        match self {
            VariantConfig::QemuVtpm(vtpm) => vtpm
                .validators
                .build(vtpm.policy.clone())
                .map_err(ConfigError::Policy),
            VariantConfig::SevSnp(snp) => Ok(Arc::new(snp.clone())),
            VariantConfig::Tdx(tdx) => Ok(Arc::new(TdxValidator::clone(tdx))),
            VariantConfig::AzureSevSnp(azure) => Ok(Arc::new(AzureSnpValidator::clone(azure))),
        }
    }
}

/// What a verifier accepts, read: one [`VariantConfig`] per variant read
/// ([`AttestationSettings::load`]), in order, each variant once.
#[derive(Clone, Debug)]
pub struct AttestationConfig {
    variants: Vec<VariantConfig>,
}

/// How vTPM evidence is checked: the measurement policy in force, the
/// file it was read from, and the builder of its validators.
#[derive(Clone, Debug)]
pub struct VtpmConfig {
    /// The measurement-policy file the policy was read from.
    pub policy_path: PathBuf,
    /// The measurement policy read.
    pub policy: MeasurementPolicy,
    /// Builds validators for this policy (or a later one).
    pub validators: ValidatorBuilder,
}

impl AttestationConfig {
    /// The configuration of each variant read, in order.
    pub fn configs(&self) -> &[VariantConfig] {
        &self.variants
    }

    /// The configuration of each variant read, in order, taken.
    pub fn into_configs(self) -> Vec<VariantConfig> {
        self.variants
    }

    /// Whether `variant` was read.
    pub fn accepts(&self, variant: Variant) -> bool {
        self.variants.iter().any(|c| c.variant() == variant)
    }

    /// The vTPM configuration, when `qemu-vtpm` was read.
    pub fn vtpm(&self) -> Option<&VtpmConfig> {
        self.variants.iter().find_map(|c| match c {
            VariantConfig::QemuVtpm(vtpm) => Some(vtpm),
            _ => None,
        })
    }

    /// The vTPM configuration, to change, when `qemu-vtpm` was read.
    pub fn vtpm_mut(&mut self) -> Option<&mut VtpmConfig> {
        self.variants.iter_mut().find_map(|c| match c {
            VariantConfig::QemuVtpm(vtpm) => Some(vtpm),
            _ => None,
        })
    }

    /// The SEV-SNP validator, when `sev-snp` was read.
    pub fn snp(&self) -> Option<&SnpValidator> {
        self.variants.iter().find_map(|c| match c {
            VariantConfig::SevSnp(snp) => Some(snp),
            _ => None,
        })
    }

    /// The TDX validator, when `tdx` was read.
    pub fn tdx(&self) -> Option<&TdxValidator> {
        self.variants.iter().find_map(|c| match c {
            VariantConfig::Tdx(tdx) => Some(&**tdx),
            _ => None,
        })
    }

    /// One validator per variant read, in order ([`VariantConfig::validator`]).
    pub fn validators(&self) -> Result<Vec<Arc<dyn Validator>>, ConfigError> {
        self.variants.iter().map(VariantConfig::validator).collect()
    }
}

/// A measurement-policy file as read once: the policy it holds and its
/// text (a watcher compares the text to tell a change from a touch).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MeasurementPolicyFile {
    text: String,
    policy: MeasurementPolicy,
}

impl MeasurementPolicyFile {
    /// Reads the measurement-policy file at `path` (at start-up, and the
    /// same file again when it changed): read once, bounded
    /// ([`confboot_util::fs::read_bounded_text`], at most
    /// [`MAX_POLICY_BYTES`]), parsed strictly, and refused unless it pins
    /// the image ([`MeasurementPolicy::check_pins_image`]; the PCR 15 entry
    /// a validator of marked attesters drops never counts toward that).
    pub fn read(path: &Path) -> Result<Self, ConfigError> {
        let text =
            read_bounded_text(path, MAX_POLICY_BYTES).map_err(ConfigError::MeasurementsFile)?;
        let policy = MeasurementPolicy::from_json(&text)
            .and_then(|policy| policy.check_pins_image().map(|()| policy))
            .map_err(|error| ConfigError::Measurements {
                path: path.to_path_buf(),
                error,
            })?;
        Ok(MeasurementPolicyFile {
            text: text.to_string(),
            policy,
        })
    }

    /// The file's text, as read.
    pub fn text(&self) -> &str {
        &self.text
    }

    /// The policy the file holds.
    pub fn policy(&self) -> &MeasurementPolicy {
        &self.policy
    }

    /// The policy, taken.
    pub fn into_policy(self) -> MeasurementPolicy {
        self.policy
    }
}

/// The policy of the measurement-policy file at `path`
/// ([`MeasurementPolicyFile::read`]).
pub fn load_measurement_policy(path: &Path) -> Result<MeasurementPolicy, ConfigError> {
    MeasurementPolicyFile::read(path).map(MeasurementPolicyFile::into_policy)
}

/// Reads the expected event log at `path` (`confboot measure
/// --events-out`), strictly.
pub fn load_expected_events(path: &Path) -> Result<EventList, ConfigError> {
    let text =
        read_bounded_text(path, MAX_EVENT_LIST_BYTES).map_err(ConfigError::ExpectedEventsFile)?;
    EventList::from_json(&text).map_err(|error| ConfigError::ExpectedEvents {
        path: path.to_path_buf(),
        error,
    })
}

/// The SEV-SNP validator of the SNP policy file at `path`.
pub fn load_snp_validator(path: &Path) -> Result<SnpValidator, ConfigError> {
    let error = |error| ConfigError::SnpPolicy {
        path: path.to_path_buf(),
        error,
    };
    let policy = SnpPolicy::load(path).map_err(error)?;
    SnpValidator::new(policy).map_err(error)
}

/// The TDX validator of the TDX policy file at `path`, with the roots,
/// collateral files and expected event log it names.
pub fn load_tdx_validator(path: &Path) -> Result<TdxValidator, ConfigError> {
    TdxValidator::load(path).map_err(|error| ConfigError::TdxPolicy {
        path: path.to_path_buf(),
        error,
    })
}

/// The `azure-sev-snp` validator of the policy file at `path`
/// ([`AzureSnpPolicy::load`]: its SNP part's roots read, the image pinned).
pub fn load_azure_validator(path: &Path) -> Result<AzureSnpValidator, ConfigError> {
    let error = |error| ConfigError::AzurePolicy {
        path: path.to_path_buf(),
        error,
    };
    AzureSnpPolicy::load(path)
        .and_then(AzureSnpValidator::new)
        .map_err(error)
}

/// Builds vTPM validators under one AK trust, one for each policy in force
/// (joinsvc builds a new one when its policy file changes).
#[derive(Clone, Debug)]
pub struct ValidatorBuilder {
    ak_trust: AkTrust,
    require_unmarked: bool,
    expected_events: Option<EventList>,
    announce_insecure: fn(),
}

/// The announcement of a validator built with `insecure-any-ak` when the
/// caller has none of its own.
fn announce_insecure_any_ak() {
    log::warn!("{INSECURE_ANY_AK_WARNING}");
}

impl ValidatorBuilder {
    /// Validators under `ak_trust`, for attesters that are not
    /// bootstrapped yet (PCR 15 all-zero). `insecure-any-ak` is refused
    /// when it is [`InsecureAnyAk::Unconfirmed`].
    pub fn new(ak_trust: AkTrust, insecure_any_ak: InsecureAnyAk) -> Result<Self, ConfigError> {
        if matches!(ak_trust, AkTrust::InsecureAnyAk)
            && insecure_any_ak == InsecureAnyAk::Unconfirmed
        {
            return Err(ConfigError::InsecureAnyAkNotConfirmed);
        }
        Ok(ValidatorBuilder {
            ak_trust,
            require_unmarked: true,
            expected_events: None,
            announce_insecure: announce_insecure_any_ak,
        })
    }

    /// Explains a differing PCR by the first event of `events` (the
    /// predicted log) that differs from the attester's log.
    pub fn with_expected_events(mut self, events: EventList) -> ValidatorBuilder {
        self.expected_events = Some(events);
        self
    }

    /// Whether the attester's PCR 15 must be all-zero (a node that is not
    /// bootstrapped yet; the default) or may hold a cluster's mark (a join
    /// service, which runs on a bootstrapped node).
    pub fn require_unmarked(mut self, required: bool) -> ValidatorBuilder {
        self.require_unmarked = required;
        self
    }

    /// How a validator built with `insecure-any-ak` is announced: the
    /// caller logs a warning that names its own setting (by default, a
    /// warning of [`INSECURE_ANY_AK_WARNING`]).
    pub fn announce_insecure_with(mut self, announce: fn()) -> ValidatorBuilder {
        self.announce_insecure = announce;
        self
    }

    /// The AK trust validators are built with.
    pub fn ak_trust(&self) -> &AkTrust {
        &self.ak_trust
    }

    /// The expected event log validators explain differing PCRs with.
    pub fn expected_events(&self) -> Option<&EventList> {
        self.expected_events.as_ref()
    }

    /// Whether validators trust any attestation key (`insecure-any-ak`).
    pub fn is_insecure(&self) -> bool {
        matches!(self.ak_trust, AkTrust::InsecureAnyAk)
    }

    /// A validator for `policy`. With `insecure-any-ak`, announces it every
    /// time ([`ValidatorBuilder::announce_insecure_with`]). Without
    /// [`ValidatorBuilder::require_unmarked`], a PCR 15 entry of the policy
    /// is dropped: it describes unbootstrapped nodes (as `confboot measure`
    /// writes it), and the attesters such a validator sees are marked,
    /// their mark checked by the caller (joinsvc per call, a node of its
    /// join service, the CLI's `verify`).
    ///
    /// What is left must pin the image
    /// ([`MeasurementPolicy::check_pins_image`]: PCRs 4 and 9 enforced);
    /// otherwise the policy is refused with
    /// [`PolicyError::VtpmImageNotPinned`] and no validator is built.
    pub fn build(&self, policy: MeasurementPolicy) -> Result<Arc<dyn Validator>, PolicyError> {
        let policy = self.policy_in_force(policy)?;
        Ok(self.validator(policy))
    }

    /// A validator that checks the evidence (the AK, the quote, the event
    /// log) and no measurement, for a caller that compares every PCR
    /// itself against `policy` afterwards (the CLI's `verify`, which
    /// reports each PCR rather than stopping at the first that differs).
    /// `policy` is held to [`ValidatorBuilder::build`]'s rule all the same,
    /// so a caller cannot compare against a policy that pins no image.
    pub fn build_comparing_later(
        &self,
        policy: MeasurementPolicy,
    ) -> Result<Arc<dyn Validator>, PolicyError> {
        self.policy_in_force(policy)?;
        Ok(self.validator(MeasurementPolicy::default()))
    }

    /// A validator that checks the evidence (the AK, the quote, the event
    /// log) and no measurement, for a caller that compares the PCRs with
    /// reference-value sets itself
    /// ([`confboot_appraisal::reference::sets::SetsValidator`], whose sets each pin the
    /// image: [`confboot_appraisal::reference::open`] reads no other).
    pub fn build_evidence_only(&self) -> Arc<dyn Validator> {
        self.validator(MeasurementPolicy::default())
    }

    /// `policy` without the entries a validator of this builder drops,
    /// if what is left pins the image.
    fn policy_in_force(
        &self,
        mut policy: MeasurementPolicy,
    ) -> Result<MeasurementPolicy, PolicyError> {
        if !self.require_unmarked {
            policy.remove(confboot_tpm::CLUSTER_ID_PCR);
        }
        policy.check_pins_image()?;
        Ok(policy)
    }

    fn validator(&self, policy: MeasurementPolicy) -> Arc<dyn Validator> {
        if self.is_insecure() {
            (self.announce_insecure)();
        }
        let validator = VtpmValidator::new(self.ak_trust.clone(), policy)
            .require_unmarked(self.require_unmarked);
        Arc::new(match &self.expected_events {
            Some(events) => validator.expected_events(events.clone()),
            None => validator,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Names settings as a binary would, but with names no binary uses.
    fn name(setting: Setting) -> String {
        format!("<{setting:?}>")
    }

    fn snp_policy_file(dir: &Path) -> PathBuf {
        let snp = dir.join("snp.json");
        std::fs::write(
            &snp,
            format!(
                r#"{{"measurement": {{"expected": "{}"}}, "launch": "measuredDirectBoot", "kernelHash": "1111111111111111111111111111111111111111111111111111111111111111", "initrdHash": "2222222222222222222222222222222222222222222222222222222222222222", "cmdlineHash": "3333333333333333333333333333333333333333333333333333333333333333"}}"#,
                "ab".repeat(48)
            ),
        )
        .unwrap();
        snp
    }

    #[test]
    fn an_snp_policy_without_a_measured_direct_boot_is_refused_at_load() {
        let tmp = confboot_testkit::TempDir::new("snp-launch");
        let dir = tmp.path();
        assert!(load_snp_validator(&snp_policy_file(dir)).is_ok());
        let m = format!(r#""measurement": {{"expected": "{}"}}"#, "ab".repeat(48));
        let file = dir.join("bare.json");
        for (launch, want) in [
            ("", "declares no launch"),
            (r#", "launch": "firmwareOnly""#, "firmwareOnly launch"),
        ] {
            std::fs::write(&file, format!("{{{m}{launch}}}")).unwrap();
            let Err(err) = load_snp_validator(&file) else {
                panic!("{launch:?}: admitted");
            };
            assert!(
                matches!(
                    err,
                    ConfigError::SnpPolicy {
                        error: PolicyError::SnpLaunchUndeclared | PolicyError::SnpLaunchNotMeasured,
                        ..
                    }
                ),
                "{err:?}"
            );
            assert!(err.to_string().contains(want), "{err}");
        }
    }

    fn pinned() -> String {
        format!("pinned:04{}", "ab".repeat(64))
    }

    fn vtpm_settings(measurements: &Path, ak_trust: &str) -> VtpmSettings {
        VtpmSettings {
            measurements: Some(measurements.to_path_buf()),
            ak_trust: ak_trust.into(),
            insecure_any_ak: InsecureAnyAk::Accepted,
            expected_events: None,
        }
    }

    #[test]
    fn insecure_any_ak_needs_the_confirmation_where_the_verifier_asks_for_it() {
        let e =
            ValidatorBuilder::new(AkTrust::InsecureAnyAk, InsecureAnyAk::Unconfirmed).unwrap_err();
        assert!(matches!(e, ConfigError::InsecureAnyAkNotConfirmed), "{e:?}");
        assert_eq!(e.setting(), Setting::AkTrust);
        let shown = e.describe(&name);
        assert!(
            shown.starts_with("<AkTrust> insecure-any-ak")
                && shown.contains("refused unless <InsecureAnyAkConfirmation> is given"),
            "{shown}"
        );
        // Where the verifier only warns, no confirmation is needed.
        let b = ValidatorBuilder::new(AkTrust::InsecureAnyAk, InsecureAnyAk::Accepted).unwrap();
        assert!(b.is_insecure());
        // The rule changes nothing for a real trust mode.
        let b = ValidatorBuilder::new(
            AkTrust::parse(&pinned()).unwrap(),
            InsecureAnyAk::Unconfirmed,
        )
        .unwrap();
        assert!(!b.is_insecure());
        assert!(matches!(b.ak_trust(), AkTrust::Pinned(keys) if keys.len() == 1));
    }

    #[test]
    fn every_validator_built_with_insecure_any_ak_is_announced() {
        use std::sync::atomic::{AtomicUsize, Ordering};
        static ANNOUNCED: AtomicUsize = AtomicUsize::new(0);
        fn announce() {
            ANNOUNCED.fetch_add(1, Ordering::SeqCst);
        }
        let tmp = confboot_testkit::TempDir::new("announce");
        let dir = tmp.path();
        let policy = load_measurement_policy(&confboot_testkit::write_image_policy(dir)).unwrap();
        let insecure = ValidatorBuilder::new(AkTrust::InsecureAnyAk, InsecureAnyAk::Accepted)
            .unwrap()
            .announce_insecure_with(announce);
        insecure.build(policy.clone()).unwrap();
        insecure.build(policy.clone()).unwrap();
        assert_eq!(ANNOUNCED.load(Ordering::SeqCst), 2, "once per validator");
        let trusted =
            ValidatorBuilder::new(AkTrust::parse(&pinned()).unwrap(), InsecureAnyAk::Accepted)
                .unwrap()
                .announce_insecure_with(announce);
        trusted.build(policy).unwrap();
        assert_eq!(ANNOUNCED.load(Ordering::SeqCst), 2, "a real trust is quiet");
    }

    #[test]
    fn settings_make_validators_and_errors_name_the_setting() {
        let tmp = confboot_testkit::TempDir::new("validator");
        let dir = tmp.path();
        let policy = confboot_testkit::write_image_policy(dir);
        let settings = AttestationSettings::new(
            vec![Variant::QemuVtpm],
            GivenSettings {
                measurements: Some(policy.clone()),
                measurements_required: true,
                ak_trust: Some(pinned()),
                ..GivenSettings::default()
            },
        )
        .unwrap();
        let config = settings.load().unwrap();
        assert_eq!(
            config.vtpm().unwrap().policy.entries()[&4].value,
            vec![0xab; 32]
        );
        assert_eq!(config.validators().unwrap().len(), 1);

        // What qemu-vtpm needs, in order: the measurements, then the AK trust.
        let given = GivenSettings {
            measurements_required: true,
            ak_trust: Some(pinned()),
            ..GivenSettings::default()
        };
        let e = AttestationSettings::new(vec![Variant::QemuVtpm], given.clone()).unwrap_err();
        assert!(
            matches!(e, ConfigError::Missing(Setting::Measurements)),
            "{e:?}"
        );
        assert_eq!(e.describe(&name), "<Measurements> is required");
        let e = AttestationSettings::new(
            vec![Variant::QemuVtpm],
            GivenSettings {
                measurements: Some(policy.clone()),
                ak_trust: None,
                ..given.clone()
            },
        )
        .unwrap_err();
        assert!(matches!(e, ConfigError::Missing(Setting::AkTrust)), "{e:?}");
        // Without a required file, the caller's own policy stands in.
        let own = AttestationSettings::new(
            vec![Variant::QemuVtpm],
            GivenSettings {
                measurements_required: false,
                ..given.clone()
            },
        )
        .unwrap();
        assert_eq!(own.vtpm().unwrap().measurements, None);

        let e = vtpm_settings(&policy, "trust-me")
            .validator_builder()
            .unwrap_err();
        assert!(matches!(e, ConfigError::AkTrust(_)), "{e:?}");
        assert!(e.describe(&name).starts_with("<AkTrust>: "), "{e}");

        std::fs::write(&policy, "{ broken").unwrap();
        let e = settings.load().unwrap_err();
        assert!(
            matches!(&e, ConfigError::Measurements { path, .. } if path == &policy),
            "{e:?}"
        );
        assert!(
            e.describe(&name)
                .starts_with(&format!("<Measurements> {}: ", policy.display())),
            "{e}"
        );
        let missing = dir.join("missing.json");
        let e = load_measurement_policy(&missing).unwrap_err();
        assert!(
            matches!(&e, ConfigError::MeasurementsFile(FileError::Read { .. })),
            "{e:?}"
        );
    }

    #[test]
    fn an_oversized_policy_file_is_refused_naming_the_file_and_the_limit() {
        let tmp = confboot_testkit::TempDir::new("oversized");
        let dir = tmp.path();
        let policy = confboot_testkit::write_image_policy(dir);
        let mut text = std::fs::read_to_string(&policy).unwrap();
        text.push_str(&" ".repeat(MAX_POLICY_BYTES as usize));
        std::fs::write(&policy, text).unwrap();
        let e = load_measurement_policy(&policy).unwrap_err();
        assert!(
            matches!(
                &e,
                ConfigError::MeasurementsFile(FileError::TooLarge {
                    limit: MAX_POLICY_BYTES,
                    ..
                })
            ),
            "{e:?}"
        );
        let shown = e.describe(&name);
        assert!(
            shown.starts_with("<Measurements>: ")
                && shown.contains(&policy.display().to_string())
                && shown.contains(&MAX_POLICY_BYTES.to_string()),
            "{shown}"
        );
    }

    #[test]
    fn the_expected_event_log_is_read_bounded_and_strictly() {
        let tmp = confboot_testkit::TempDir::new("events");
        let dir = tmp.path();
        let policy = confboot_testkit::write_image_policy(dir);
        let good = dir.join("good.json");
        std::fs::write(&good, EventList::default().to_json()).unwrap();
        let with_events = VtpmSettings {
            expected_events: Some(good.clone()),
            ..vtpm_settings(&policy, &pinned())
        };
        let builder = with_events.validator_builder().unwrap();
        assert_eq!(builder.expected_events(), Some(&EventList::default()));
        let without = vtpm_settings(&policy, &pinned()).validator_builder();
        assert_eq!(without.unwrap().expected_events(), None, "not taken");
        let bad = dir.join("bad.json");
        std::fs::write(&bad, r#"{"events": [], "extra": 1}"#).unwrap();
        let err = load_expected_events(&bad).unwrap_err();
        assert!(matches!(err, ConfigError::ExpectedEvents { .. }), "{err}");
        assert_eq!(err.setting(), Setting::ExpectedEvents);
        assert!(
            err.describe(&name).starts_with("<ExpectedEvents> "),
            "{err}"
        );
        let huge = dir.join("huge.json");
        std::fs::write(&huge, vec![b' '; MAX_EVENT_LIST_BYTES as usize + 1]).unwrap();
        assert!(matches!(
            load_expected_events(&huge),
            Err(ConfigError::ExpectedEventsFile(_))
        ));
    }

    #[test]
    fn tdx_needs_its_policy_and_gets_its_validator() {
        assert_eq!(
            parse_variants("tdx,qemu-vtpm"),
            Ok(vec![Variant::Tdx, Variant::QemuVtpm])
        );
        assert_eq!(parse_attestation_variant("tdx"), Ok(Variant::Tdx));
        let e = AttestationSettings::new(vec![Variant::Tdx], GivenSettings::default()).unwrap_err();
        assert!(matches!(e, ConfigError::TdxPolicyRequired), "{e:?}");
        assert_eq!(
            e.describe(&name),
            "<Variants> accepts tdx, which needs <TdxPolicy> (the TDX policy)"
        );
        let tmp = confboot_testkit::TempDir::new("tdx-settings");
        let policy = tmp.path().join("tdx.json");
        let pins = format!(
            r#""mrtd": "{m}", "rtmrs": {{"0": "{m}", "1": "{m}", "2": "{m}"}}"#,
            m = "ab".repeat(48)
        );
        // MRTD alone admits any kernel, initrd and command line: refused.
        std::fs::write(&policy, format!(r#"{{"mrtd": "{}"}}"#, "ab".repeat(48))).unwrap();
        let mrtd_only = AttestationSettings::new(
            vec![Variant::Tdx],
            GivenSettings {
                tdx_policy: Some(policy.clone()),
                ..GivenSettings::default()
            },
        )
        .unwrap()
        .load()
        .unwrap_err();
        assert!(
            matches!(
                &mrtd_only,
                ConfigError::TdxPolicy { error: PolicyError::TdxImageNotPinned { missing }, .. }
                    if *missing == ["RTMR0", "RTMR1", "RTMR2"]
            ),
            "{mrtd_only:?}"
        );
        std::fs::write(&policy, format!("{{{pins}}}")).unwrap();
        let settings = AttestationSettings::new(
            vec![Variant::Tdx],
            GivenSettings {
                tdx_policy: Some(policy.clone()),
                ..GivenSettings::default()
            },
        )
        .unwrap();
        assert_eq!(
            (settings.vtpm(), settings.snp().map(|s| &s.policy)),
            (None, None)
        );
        let validators = settings.load().unwrap().validators().unwrap();
        assert_eq!(validators.len(), 1);
        assert_eq!(validators[0].variant(), Variant::Tdx);
        // A collateral file the policy names must load.
        std::fs::write(
            &policy,
            format!(r#"{{{pins}, "collateral": {{"tcbInfo": "missing.json"}}}}"#),
        )
        .unwrap();
        let e = settings.load().unwrap_err();
        assert!(
            matches!(&e, ConfigError::TdxPolicy { path, .. } if path == &policy),
            "{e}"
        );
        assert_eq!(e.setting(), Setting::TdxPolicy);
    }

    #[test]
    fn variant_lists_are_checked_and_each_variant_gets_its_validator() {
        assert_eq!(parse_variants("qemu-vtpm"), Ok(vec![Variant::QemuVtpm]));
        assert_eq!(
            parse_variants(DEFAULT_VARIANTS),
            Ok(vec![Variant::QemuVtpm])
        );
        assert_eq!(
            parse_variants("sev-snp, qemu-vtpm"),
            Ok(vec![Variant::SevSnp, Variant::QemuVtpm])
        );
        for bad in ["", "sgx", "sev-snp,sev-snp", "qemu-vtpm,", &"x".repeat(300)] {
            assert!(parse_variants(bad).is_err(), "{bad}");
        }
        let e = ConfigError::Variants(parse_variants("tpm").unwrap_err());
        assert!(
            e.describe(&name).starts_with("<Variants>: unknown variant"),
            "{e}"
        );
        assert_eq!(parse_attestation_variant("sev-snp"), Ok(Variant::SevSnp));
        assert_eq!(
            parse_attestation_variant(DEFAULT_VARIANTS),
            Ok(Variant::QemuVtpm)
        );
        assert_eq!(
            parse_attestation_variant("sev-snp,qemu-vtpm"),
            Err(VariantsError::NotOne)
        );

        // The settings hold each variant once, and at least one.
        let e = AttestationSettings::new(vec![], GivenSettings::default()).unwrap_err();
        assert!(
            matches!(e, ConfigError::Variants(VariantsError::Empty)),
            "{e:?}"
        );
        let tdx_twice = GivenSettings {
            tdx_policy: Some(PathBuf::from("tdx.json")),
            ..GivenSettings::default()
        };
        let e = AttestationSettings::new(vec![Variant::Tdx, Variant::Tdx], tdx_twice).unwrap_err();
        assert!(
            matches!(e, ConfigError::Variants(VariantsError::Twice(Variant::Tdx))),
            "{e:?}"
        );

        // sev-snp needs its policy; the vTPM settings are not asked for.
        let e =
            AttestationSettings::new(vec![Variant::SevSnp], GivenSettings::default()).unwrap_err();
        assert!(matches!(e, ConfigError::SnpPolicyRequired), "{e:?}");
        assert_eq!(
            e.describe(&name),
            "<Variants> accepts sev-snp, which needs <SnpPolicy> (the SEV-SNP policy)"
        );
        let tmp = confboot_testkit::TempDir::new("variants");
        let dir = tmp.path();
        let snp = snp_policy_file(dir);
        let only_snp = AttestationSettings::new(
            vec![Variant::SevSnp],
            GivenSettings {
                measurements_required: true,
                snp_policy: Some(snp.clone()),
                ..GivenSettings::default()
            },
        )
        .unwrap();
        assert_eq!(only_snp.vtpm(), None, "qemu-vtpm is not accepted");
        let policy = confboot_testkit::write_image_policy(dir);
        let both = AttestationSettings::new(
            vec![Variant::SevSnp, Variant::QemuVtpm],
            GivenSettings {
                measurements: Some(policy),
                measurements_required: true,
                ak_trust: Some(pinned()),
                snp_policy: Some(snp.clone()),
                ..GivenSettings::default()
            },
        )
        .unwrap();
        let got: Vec<Variant> = both
            .load()
            .unwrap()
            .validators()
            .unwrap()
            .iter()
            .map(|v| v.variant())
            .collect();
        assert_eq!(got, vec![Variant::SevSnp, Variant::QemuVtpm]);
        std::fs::write(&snp, "{}").unwrap();
        let e = both.load().unwrap_err();
        assert!(
            matches!(&e, ConfigError::SnpPolicy { path, .. } if path == &snp),
            "{e:?}"
        );
        assert_eq!(e.setting(), Setting::SnpPolicy);
    }

    /// A policy built in code from `(index, byte, warn_only)` entries.
    fn policy_of(entries: &[(u32, u8, bool)]) -> MeasurementPolicy {
        let mut policy = MeasurementPolicy::default();
        for &(index, byte, warn_only) in entries {
            policy.set(index, vec![byte; 32], warn_only);
        }
        policy
    }

    /// Whether `built` was refused for not pinning the image, missing `want`.
    fn refused_missing(built: Result<Arc<dyn Validator>, PolicyError>, want: &[u32]) -> bool {
        matches!(built, Err(PolicyError::VtpmImageNotPinned { missing }) if missing == want)
    }

    #[test]
    fn a_validator_policy_must_pin_the_boot_chain_and_the_command_line() {
        let unmarked =
            ValidatorBuilder::new(AkTrust::parse(&pinned()).unwrap(), InsecureAnyAk::Accepted)
                .unwrap();
        let marked = unmarked.clone().require_unmarked(false);
        // The cluster mark alone: dropped for marked attesters, and never
        // counting for unmarked ones.
        let mark_only = policy_of(&[(15, 0, false)]);
        for builder in [&marked, &unmarked] {
            assert!(refused_missing(builder.build(mark_only.clone()), &[4, 9]));
        }
        // The mark enforced, the image warnOnly (as during an upgrade).
        let upgrade = policy_of(&[(15, 0, false), (4, 0xab, true), (9, 0xcd, true)]);
        for builder in [&marked, &unmarked] {
            assert!(refused_missing(builder.build(upgrade.clone()), &[4, 9]));
        }
        // The boot chain alone: any command line would pass.
        let kernel_only = policy_of(&[(4, 0xab, false)]);
        assert!(refused_missing(marked.build(kernel_only.clone()), &[9]));
        assert!(refused_missing(unmarked.build(kernel_only), &[9]));
        // PCRs the OS or a debugger can reset or extend never count, whatever
        // else is enforced.
        let resettable = policy_of(&[
            (10, 1, false),
            (16, 2, false),
            (23, 3, false),
            (9, 4, false),
        ]);
        assert!(refused_missing(marked.build(resettable), &[4]));
        // The boot chain and the command line enforced: accepted, with or
        // without the mark (which the marked validator drops).
        let pinned_image = policy_of(&[(4, 0xab, false), (9, 0xcd, false), (15, 0, false)]);
        assert!(marked.build(pinned_image.clone()).is_ok());
        assert!(unmarked.build(pinned_image.clone()).is_ok());
        // The CLI's verify compares later, against a policy held to the same rule.
        assert!(marked.build_comparing_later(pinned_image).is_ok());
        assert!(matches!(
            marked.build_comparing_later(mark_only),
            Err(PolicyError::VtpmImageNotPinned { .. })
        ));
        let err = marked.build(policy_of(&[(15, 0, false)])).err().unwrap();
        let shown = ConfigError::Policy(err).describe(&name);
        assert!(
            shown.starts_with("<Measurements>: measurement policy does not pin the image")
                && shown.contains("[4, 9]"),
            "{shown}"
        );
    }

    #[test]
    fn a_policy_file_that_does_not_pin_the_image_is_refused_at_load() {
        let tmp = confboot_testkit::TempDir::new("unpinned");
        let dir = tmp.path();
        let file = dir.join("policy.json");
        let (zeros, ab) = ("00".repeat(32), "ab".repeat(32));
        for (text, missing) in [
            (
                format!(r#"{{"15": {{"expected": "{zeros}"}}}}"#),
                vec![4, 9],
            ),
            (
                format!(
                    r#"{{"15": {{"expected": "{zeros}"}}, "4": {{"expected": "{ab}", "warnOnly": true}}, "9": {{"expected": "{ab}", "warnOnly": true}}}}"#
                ),
                vec![4, 9],
            ),
            (format!(r#"{{"4": {{"expected": "{ab}"}}}}"#), vec![9]),
        ] {
            std::fs::write(&file, &text).unwrap();
            let e = load_measurement_policy(&file).unwrap_err();
            assert!(
                matches!(
                    &e,
                    ConfigError::Measurements {
                        path,
                        error: PolicyError::VtpmImageNotPinned { missing: m },
                    } if path == &file && *m == missing
                ),
                "{text}: {e:?}"
            );
        }
        let mut good = load_measurement_policy(&confboot_testkit::write_image_policy(dir)).unwrap();
        good.set(15, vec![0; 32], false);
        std::fs::write(&file, good.to_json()).unwrap();
        assert_eq!(load_measurement_policy(&file).unwrap(), good);
    }
}
