//! The attestation options every binary shares: a measurement-policy file
//! and an AK-trust mode, read into vTPM validators by one builder.
//!
//! | binary | measurements | AK trust | `insecure-any-ak` |
//! |---|---|---|---|
//! | bootstrapper (checks join services) | `--joinsvc-measurements` | `--joinsvc-ak-trust` | warned |
//! | joinsvc (checks joining nodes) | `--measurements` | `--ak-trust` | refused without `--i-understand-insecure-any-ak` |
//! | `confboot init`/`recover` (checks a node) | `--measurements` | `--ak-trust` | warned |
//!
//! `insecure-any-ak` trusts any attestation key: any machine can then sign
//! a quote for any measurements, so attestation proves nothing. It exists
//! for local QEMU runs without provisioned AKs. Every validator built with
//! it is announced with a warning (and the validator warns on every check);
//! joinsvc, which hands out disk keys, refuses it unless a second flag
//! confirms it.
//!
//! The policy file is read through [`confboot_util::fs::read_bounded_text`] (at most
//! [`MAX_POLICY_BYTES`]); the AK-trust syntax is [`AkTrust::parse`]'s.
//!
//! Which variants a binary accepts, and the SEV-SNP policy, are
//! [`VariantOptions`]; which variant a node attests with is
//! [`attestation_variant`]:
//!
//! | binary | accepted variants | SNP policy | attests with |
//! |---|---|---|---|
//! | bootstrapper | `--joinsvc-variants` (join services) | `--joinsvc-snp-policy` | `--attestation` |
//! | joinsvc | `--variants` (joining nodes) | `--snp-policy` | `--tpm` (vTPM) |
//! | `confboot init`/`recover`/`verify` | `--variants` (the node) | `--snp-policy` | — |
//!
//! Every variants option defaults to [`DEFAULT_VARIANTS`] (`qemu-vtpm`,
//! as before variants were configurable); the vTPM options are needed only
//! when `qemu-vtpm` is accepted, the SNP policy only when `sev-snp` is. In
//! the handshake the validator is the one of the evidence's variant; a
//! variant that is not accepted is refused
//! ([`AtlsError::VariantNotAccepted`](confboot_atls::AtlsError::VariantNotAccepted)).

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::measurements::MAX_POLICY_BYTES;
use crate::snp::{SnpPolicy, SnpValidator};
use crate::tpm::event_log::{EventList, EventListError};
use crate::vtpm::{AkTrust, VtpmValidator};
use crate::{AttestationError, MeasurementPolicy, PolicyError, Validator, Variant};
use confboot_util::args::{ArgsError, Matches};
use confboot_util::fs::{FileError, read_bounded_text};

/// The help of an expected-event-log option, shared by every binary that
/// takes one.
pub const EXPECTED_EVENTS_HELP: &str = "The predicted event log of the expected measurements (`confboot measure --events-out`): a PCR that differs is explained by the first event that differs, when the node sends its log";

/// The variants a variants option accepts when it is not given.
pub const DEFAULT_VARIANTS: &str = "qemu-vtpm";

/// The help of an accepted-variants option.
pub const VARIANTS_HELP: &str = "Attestation variants accepted, comma-separated: qemu-vtpm (a vTPM quote, \
     checked with the measurements and AK-trust options) and/or sev-snp (an SEV-SNP report, checked \
     with the SNP policy option). Evidence of another variant is refused in the handshake";

/// The help of an SEV-SNP policy option.
pub const SNP_POLICY_HELP: &str = "SEV-SNP policy, JSON: measurement (required), minimumTcb, vmpl, \
     allowDebug, hostData, idKeyDigests, rootBundles (PEM files of pinned ARKs), vcekCacheDir, ...; \
     required when sev-snp is accepted";

/// The help of the option that says how a node attests.
pub const ATTESTATION_HELP: &str = "How this node attests itself: qemu-vtpm (a quote of its TPM) or \
     sev-snp (an SEV-SNP report through the kernel's configfs-tsm, /sys/kernel/config/tsm/report; \
     the TPM still holds the cluster mark)";

/// Most variants a list may name (every variant once).
const MAX_VARIANTS_TEXT: usize = 256;

/// Largest expected-event-log file read (a predicted log is about 2 KiB).
pub const MAX_EVENT_LIST_BYTES: u64 = 1 << 20;

/// What a binary asks before it accepts `insecure-any-ak`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum InsecureAnyAk {
    /// Accepted, with a warning.
    Warn,
    /// Refused unless this flag (long name, without `--`) is given too;
    /// then accepted with a warning.
    RequireFlag(&'static str),
}

/// The names of a binary's attestation options, and its rule for
/// `insecure-any-ak`.
#[derive(Clone, Copy, Debug)]
pub struct ValidatorOptions {
    /// The measurement-policy file option (long name, without `--`).
    pub measurements: &'static str,
    /// The AK-trust option (long name, without `--`).
    pub ak_trust: &'static str,
    /// The expected-event-log option (long name, without `--`), for
    /// binaries that explain a differing PCR by its event; `None` for
    /// those that do not take one.
    pub expected_events: Option<&'static str>,
    /// What `insecure-any-ak` needs.
    pub insecure_any_ak: InsecureAnyAk,
}

/// Why the attestation options could not be used.
#[derive(Debug)]
pub enum OptionsError {
    /// An option is missing.
    Args(ArgsError),
    /// The measurement-policy file could not be read (or is too large).
    MeasurementsFile {
        /// The option that names it.
        option: &'static str,
        /// Why.
        error: FileError,
    },
    /// The measurement-policy file is not a valid policy.
    Measurements {
        /// The option that names it.
        option: &'static str,
        /// The file.
        path: PathBuf,
        /// Why.
        error: PolicyError,
    },
    /// The AK-trust mode is malformed, or a file it names is not usable.
    AkTrust {
        /// The option.
        option: &'static str,
        /// Why.
        error: AttestationError,
    },
    /// The expected event log could not be read (or is too large).
    ExpectedEventsFile {
        /// The option that names it.
        option: &'static str,
        /// Why.
        error: FileError,
    },
    /// The expected event log is not an event list.
    ExpectedEvents {
        /// The option that names it.
        option: &'static str,
        /// The file.
        path: PathBuf,
        /// Why.
        error: EventListError,
    },
    /// A variants option names no variant, an unknown one, or one twice.
    Variants {
        /// The option.
        option: &'static str,
        /// Why.
        reason: String,
    },
    /// `sev-snp` is accepted but no SNP policy is given.
    SnpPolicyRequired {
        /// The variants option.
        variants: &'static str,
        /// The SNP policy option.
        snp_policy: &'static str,
    },
    /// The SNP policy file is unusable (unreadable, malformed, a root
    /// bundle it names does not load).
    SnpPolicy {
        /// The option that names it.
        option: &'static str,
        /// The file.
        path: PathBuf,
        /// Why.
        error: PolicyError,
    },
    /// `insecure-any-ak` was given without the flag that confirms it.
    InsecureAnyAkNotConfirmed {
        /// The AK-trust option.
        option: &'static str,
        /// The flag that would confirm it.
        confirmation: &'static str,
    },
}

impl fmt::Display for OptionsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            OptionsError::Args(e) => e.fmt(f),
            OptionsError::MeasurementsFile { option, error } => write!(f, "--{option}: {error}"),
            OptionsError::Measurements {
                option,
                path,
                error,
            } => write!(f, "--{option} {}: {error}", path.display()),
            OptionsError::AkTrust { option, error } => write!(f, "--{option}: {error}"),
            OptionsError::ExpectedEventsFile { option, error } => write!(f, "--{option}: {error}"),
            OptionsError::ExpectedEvents {
                option,
                path,
                error,
            } => write!(f, "--{option} {}: {error}", path.display()),
            OptionsError::Variants { option, reason } => write!(f, "--{option}: {reason}"),
            OptionsError::SnpPolicyRequired {
                variants,
                snp_policy,
            } => write!(
                f,
                "--{variants} accepts sev-snp, which needs --{snp_policy} (the SEV-SNP policy)"
            ),
            OptionsError::SnpPolicy {
                option,
                path,
                error,
            } => write!(f, "--{option} {}: {error}", path.display()),
            OptionsError::InsecureAnyAkNotConfirmed {
                option,
                confirmation,
            } => write!(
                f,
                "--{option} insecure-any-ak trusts any attestation key, so any machine could pass \
                 as an attested node; refused unless --{confirmation} is given too (local QEMU only)"
            ),
        }
    }
}

impl std::error::Error for OptionsError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            OptionsError::Args(e) => Some(e),
            OptionsError::MeasurementsFile { error, .. } => Some(error),
            OptionsError::Measurements { error, .. } => Some(error),
            OptionsError::AkTrust { error, .. } => Some(error),
            OptionsError::ExpectedEventsFile { error, .. } => Some(error),
            OptionsError::ExpectedEvents { error, .. } => Some(error),
            OptionsError::SnpPolicy { error, .. } => Some(error),
            OptionsError::Variants { .. }
            | OptionsError::SnpPolicyRequired { .. }
            | OptionsError::InsecureAnyAkNotConfirmed { .. } => None,
        }
    }
}

impl ValidatorOptions {
    /// The measurement policy the option names; `None` when it is not given.
    pub fn measurements(&self, m: &Matches) -> Result<Option<MeasurementPolicy>, OptionsError> {
        m.value(self.measurements)
            .map(|path| self.load_measurements(Path::new(path)))
            .transpose()
    }

    /// The measurement policy the option names, which must be given.
    pub fn required_measurements(&self, m: &Matches) -> Result<MeasurementPolicy, OptionsError> {
        let path = m.required(self.measurements).map_err(OptionsError::Args)?;
        self.load_measurements(Path::new(path))
    }

    /// Reads the policy file at `path` (the option's value, or the same
    /// file again when it changed).
    pub fn load_measurements(&self, path: &Path) -> Result<MeasurementPolicy, OptionsError> {
        let text = read_bounded_text(path, MAX_POLICY_BYTES).map_err(|error| {
            OptionsError::MeasurementsFile {
                option: self.measurements,
                error,
            }
        })?;
        MeasurementPolicy::from_json(&text).map_err(|error| OptionsError::Measurements {
            option: self.measurements,
            path: path.to_path_buf(),
            error,
        })
    }

    /// The validator builder for the AK-trust option, which must be given.
    /// `insecure-any-ak` is refused here unless the binary's rule allows it.
    pub fn builder(&self, m: &Matches) -> Result<ValidatorBuilder, OptionsError> {
        let spec = m.required(self.ak_trust).map_err(OptionsError::Args)?;
        let ak_trust = AkTrust::parse(spec).map_err(|error| OptionsError::AkTrust {
            option: self.ak_trust,
            error,
        })?;
        if let (AkTrust::InsecureAnyAk, InsecureAnyAk::RequireFlag(confirmation)) =
            (&ak_trust, self.insecure_any_ak)
            && !m.flag(confirmation)
        {
            return Err(OptionsError::InsecureAnyAkNotConfirmed {
                option: self.ak_trust,
                confirmation,
            });
        }
        Ok(ValidatorBuilder {
            option: self.ak_trust,
            ak_trust,
            require_unmarked: true,
            expected_events: self.expected_events(m)?,
        })
    }

    /// The expected event log the option names (`confboot measure
    /// --events-out`), if the binary takes one and it is given.
    pub fn expected_events(&self, m: &Matches) -> Result<Option<EventList>, OptionsError> {
        let Some(option) = self.expected_events else {
            return Ok(None);
        };
        let Some(path) = m.value(option) else {
            return Ok(None);
        };
        let path = Path::new(path);
        let text = read_bounded_text(path, MAX_EVENT_LIST_BYTES)
            .map_err(|error| OptionsError::ExpectedEventsFile { option, error })?;
        EventList::from_json(&text)
            .map(Some)
            .map_err(|error| OptionsError::ExpectedEvents {
                option,
                path: path.to_path_buf(),
                error,
            })
    }

    /// The validator both options describe (both must be given), for a node
    /// that is not bootstrapped yet (PCR 15 all-zero).
    pub fn validator(&self, m: &Matches) -> Result<Arc<dyn Validator>, OptionsError> {
        let policy = self.required_measurements(m)?;
        Ok(self.builder(m)?.build(policy))
    }
}

/// Parses a list of variant names, comma-separated (spaces around names
/// are ignored): at least one, each known, none twice.
pub fn parse_variants(text: &str) -> Result<Vec<Variant>, String> {
    if text.len() > MAX_VARIANTS_TEXT {
        return Err(format!("more than {MAX_VARIANTS_TEXT} bytes"));
    }
    let mut out = Vec::new();
    for name in text.split(',').map(str::trim) {
        let variant = Variant::from_name(name).ok_or_else(|| {
            let known: Vec<&str> = Variant::ALL.iter().map(|v| v.name()).collect();
            format!("unknown variant {name:?} (known: {})", known.join(", "))
        })?;
        if out.contains(&variant) {
            return Err(format!("{variant} is named twice"));
        }
        out.push(variant);
    }
    Ok(out)
}

/// The variant a node attests with, from `option` (default `qemu-vtpm`
/// when the option has no default of its own and is not given).
pub fn attestation_variant(m: &Matches, option: &'static str) -> Result<Variant, OptionsError> {
    let name = m.value(option).unwrap_or(DEFAULT_VARIANTS);
    match parse_variants(name) {
        Ok(v) if v.len() == 1 => Ok(v[0]),
        Ok(_) => Err(OptionsError::Variants {
            option,
            reason: "a node attests with exactly one variant".into(),
        }),
        Err(reason) => Err(OptionsError::Variants { option, reason }),
    }
}

/// The names of a binary's variant options: which variants it accepts
/// from its peer, and the SEV-SNP policy for `sev-snp`.
#[derive(Clone, Copy, Debug)]
pub struct VariantOptions {
    /// The accepted-variants option (long name, without `--`).
    pub variants: &'static str,
    /// The SNP policy option (long name, without `--`).
    pub snp_policy: &'static str,
}

impl VariantOptions {
    /// The accepted variants ([`DEFAULT_VARIANTS`] when the option is not given).
    pub fn accepted(&self, m: &Matches) -> Result<Vec<Variant>, OptionsError> {
        parse_variants(m.value(self.variants).unwrap_or(DEFAULT_VARIANTS)).map_err(|reason| {
            OptionsError::Variants {
                option: self.variants,
                reason,
            }
        })
    }

    /// Whether `variant` is accepted.
    pub fn accepts(&self, m: &Matches, variant: Variant) -> Result<bool, OptionsError> {
        Ok(self.accepted(m)?.contains(&variant))
    }

    /// The SEV-SNP validator the SNP policy option describes (it must be given).
    pub fn snp_validator(&self, m: &Matches) -> Result<SnpValidator, OptionsError> {
        let path = m
            .value(self.snp_policy)
            .ok_or(OptionsError::SnpPolicyRequired {
                variants: self.variants,
                snp_policy: self.snp_policy,
            })?;
        let path = Path::new(path);
        let error = |error| OptionsError::SnpPolicy {
            option: self.snp_policy,
            path: path.to_path_buf(),
            error,
        };
        let policy = SnpPolicy::load(path).map_err(error)?;
        SnpValidator::new(policy).map_err(error)
    }

    /// One validator per accepted variant: `vtpm` builds the vTPM one (only
    /// called when `qemu-vtpm` is accepted), the SNP policy the SEV-SNP one.
    pub fn validators(
        &self,
        m: &Matches,
        vtpm: impl FnOnce() -> Result<Arc<dyn Validator>, OptionsError>,
    ) -> Result<Vec<Arc<dyn Validator>>, OptionsError> {
        let mut vtpm = Some(vtpm);
        let mut out = Vec::new();
        for variant in self.accepted(m)? {
            out.push(match variant {
                Variant::QemuVtpm => (vtpm.take().expect("each variant once"))()?,
                Variant::SevSnp => Arc::new(self.snp_validator(m)?),
            });
        }
        Ok(out)
    }
}

/// Builds vTPM validators under one AK trust, one for each policy in force
/// (joinsvc builds a new one when its policy file changes).
#[derive(Clone, Debug)]
pub struct ValidatorBuilder {
    option: &'static str,
    ak_trust: AkTrust,
    require_unmarked: bool,
    expected_events: Option<EventList>,
}

impl ValidatorBuilder {
    /// Whether the attester's PCR 15 must be all-zero (a node that is not
    /// bootstrapped yet; the default) or may hold a cluster's mark (a join
    /// service, which runs on a bootstrapped node).
    pub fn require_unmarked(mut self, required: bool) -> ValidatorBuilder {
        self.require_unmarked = required;
        self
    }

    /// The AK trust validators are built with.
    pub fn ak_trust(&self) -> &AkTrust {
        &self.ak_trust
    }

    /// Whether validators trust any attestation key (`insecure-any-ak`).
    pub fn is_insecure(&self) -> bool {
        matches!(self.ak_trust, AkTrust::InsecureAnyAk)
    }

    /// A validator for `policy`. With `insecure-any-ak`, says so in a
    /// warning every time. Without [`ValidatorBuilder::require_unmarked`],
    /// a PCR 15 entry of the policy is dropped: it describes unbootstrapped
    /// nodes (as `confboot measure` writes it), and the attesters such a
    /// validator sees are marked, their mark checked by the caller (joinsvc
    /// per call, a node of its join service, the CLI's `verify`).
    pub fn build(&self, mut policy: MeasurementPolicy) -> Arc<dyn Validator> {
        if !self.require_unmarked {
            policy.remove(crate::tpm::CLUSTER_ID_PCR);
        }
        if self.is_insecure() {
            log::warn!(
                "--{} insecure-any-ak: any attestation key is trusted, so attestation proves \
                 nothing about the machine; for local QEMU only",
                self.option
            );
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
    use confboot_util::args::{Command, Opt};

    const CMD: Command = Command {
        name: "t",
        about: "Test command.",
        usage: "t [OPTIONS]",
        opts: &[
            Opt::value("measurements", "FILE", "Expected measurements"),
            Opt::value("ak-trust", "MODE", "AK trust"),
            Opt::flag("i-understand-insecure-any-ak", "Confirms insecure-any-ak"),
            Opt::value("expected-events", "FILE", "Expected event log"),
            Opt::value("variants", "LIST", "Accepted variants"),
            Opt::value("snp-policy", "FILE", "SNP policy"),
            Opt::value("attestation", "VARIANT", "Own variant"),
        ],
    };

    const VARIANTS: VariantOptions = VariantOptions {
        variants: "variants",
        snp_policy: "snp-policy",
    };

    const WARN: ValidatorOptions = ValidatorOptions {
        measurements: "measurements",
        ak_trust: "ak-trust",
        expected_events: None,
        insecure_any_ak: InsecureAnyAk::Warn,
    };

    const STRICT: ValidatorOptions = ValidatorOptions {
        insecure_any_ak: InsecureAnyAk::RequireFlag("i-understand-insecure-any-ak"),
        ..WARN
    };

    fn parse(args: &[&str]) -> Matches {
        CMD.parse(args.iter().map(|s| s.to_string())).unwrap()
    }

    fn temp_dir(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("confboot-opts-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    fn policy_file(dir: &Path) -> PathBuf {
        let f = dir.join("measurements.json");
        std::fs::write(
            &f,
            format!(
                r#"{{"4": {{"expected": "{}", "warnOnly": false}}}}"#,
                "ab".repeat(32)
            ),
        )
        .unwrap();
        f
    }

    #[test]
    fn insecure_any_ak_needs_the_confirmation_where_the_binary_asks_for_it() {
        let m = parse(&["--ak-trust", "insecure-any-ak"]);
        let e = STRICT.builder(&m).unwrap_err();
        assert!(
            matches!(
                e,
                OptionsError::InsecureAnyAkNotConfirmed {
                    option: "ak-trust",
                    confirmation: "i-understand-insecure-any-ak"
                }
            ),
            "{e:?}"
        );
        let shown = e.to_string();
        assert!(
            shown.starts_with("--ak-trust insecure-any-ak")
                && shown.contains("--i-understand-insecure-any-ak"),
            "{shown}"
        );
        let m = parse(&[
            "--ak-trust",
            "insecure-any-ak",
            "--i-understand-insecure-any-ak",
        ]);
        assert!(STRICT.builder(&m).unwrap().is_insecure());
        // Where the binary only warns, no confirmation is needed.
        let m = parse(&["--ak-trust", "insecure-any-ak"]);
        assert!(WARN.builder(&m).unwrap().is_insecure());
        // The confirmation changes nothing for a real trust mode.
        let key = format!("04{}", "ab".repeat(64));
        let m = parse(&["--ak-trust", &format!("pinned:{key}")]);
        let b = STRICT.builder(&m).unwrap();
        assert!(!b.is_insecure());
        assert!(matches!(b.ak_trust(), AkTrust::Pinned(keys) if keys.len() == 1));
    }

    #[test]
    fn both_options_make_a_validator_and_errors_name_the_option() {
        let dir = temp_dir("validator");
        let policy = policy_file(&dir);
        let policy_arg = policy.display().to_string();
        let key = format!("pinned:04{}", "ab".repeat(64));
        let m = parse(&["--measurements", &policy_arg, "--ak-trust", &key]);
        WARN.validator(&m).unwrap();
        assert_eq!(
            WARN.measurements(&m).unwrap().unwrap().entries()[&4].value,
            vec![0xab; 32]
        );
        assert!(WARN.measurements(&parse(&[])).unwrap().is_none());

        let e = WARN.validator(&parse(&["--ak-trust", &key])).err().unwrap();
        assert!(
            matches!(&e, OptionsError::Args(ArgsError::Required(o)) if o == "measurements"),
            "{e:?}"
        );
        let e = WARN
            .validator(&parse(&["--measurements", &policy_arg]))
            .err()
            .unwrap();
        assert_eq!(e.to_string(), "option --ak-trust is required");
        let e = WARN
            .builder(&parse(&["--ak-trust", "trust-me"]))
            .unwrap_err();
        assert!(
            matches!(
                e,
                OptionsError::AkTrust {
                    option: "ak-trust",
                    ..
                }
            ),
            "{e:?}"
        );
        assert!(e.to_string().starts_with("--ak-trust: "), "{e}");

        std::fs::write(&policy, "{ broken").unwrap();
        let e = WARN.measurements(&m).unwrap_err();
        assert!(
            matches!(&e, OptionsError::Measurements { option: "measurements", path, .. } if path == &policy),
            "{e:?}"
        );
        assert!(
            e.to_string()
                .starts_with(&format!("--measurements {policy_arg}: ")),
            "{e}"
        );
        let missing = dir.join("missing.json");
        let e = WARN.load_measurements(&missing).unwrap_err();
        assert!(
            matches!(
                &e,
                OptionsError::MeasurementsFile {
                    error: FileError::Read { .. },
                    ..
                }
            ),
            "{e:?}"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn an_oversized_policy_file_is_refused_naming_the_file_and_the_limit() {
        let dir = temp_dir("oversized");
        let policy = policy_file(&dir);
        let mut text = std::fs::read_to_string(&policy).unwrap();
        text.push_str(&" ".repeat(MAX_POLICY_BYTES as usize));
        std::fs::write(&policy, text).unwrap();
        let e = WARN.load_measurements(&policy).unwrap_err();
        assert!(
            matches!(
                &e,
                OptionsError::MeasurementsFile {
                    option: "measurements",
                    error: FileError::TooLarge {
                        limit: MAX_POLICY_BYTES,
                        ..
                    }
                }
            ),
            "{e:?}"
        );
        let shown = e.to_string();
        assert!(
            shown.starts_with("--measurements: ")
                && shown.contains(&policy.display().to_string())
                && shown.contains(&MAX_POLICY_BYTES.to_string()),
            "{shown}"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn the_expected_event_log_is_read_bounded_and_strictly() {
        let dir = temp_dir("events");
        let opts = ValidatorOptions {
            expected_events: Some("expected-events"),
            ..WARN
        };
        let good = dir.join("good.json");
        std::fs::write(&good, EventList::default().to_json()).unwrap();
        let arg = format!("{}", good.display());
        let m = parse(&["--expected-events", &arg]);
        assert_eq!(
            opts.expected_events(&m).unwrap(),
            Some(EventList::default())
        );
        assert_eq!(WARN.expected_events(&m).unwrap(), None, "not taken");
        assert_eq!(opts.expected_events(&parse(&[])).unwrap(), None);
        let bad = dir.join("bad.json");
        std::fs::write(&bad, r#"{"events": [], "extra": 1}"#).unwrap();
        let arg = format!("{}", bad.display());
        let err = opts
            .expected_events(&parse(&["--expected-events", &arg]))
            .unwrap_err();
        assert!(matches!(err, OptionsError::ExpectedEvents { .. }), "{err}");
        assert!(err.to_string().starts_with("--expected-events "), "{err}");
        let huge = dir.join("huge.json");
        std::fs::write(&huge, vec![b' '; MAX_EVENT_LIST_BYTES as usize + 1]).unwrap();
        let arg = format!("{}", huge.display());
        assert!(matches!(
            opts.expected_events(&parse(&["--expected-events", &arg])),
            Err(OptionsError::ExpectedEventsFile { .. })
        ));
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn variant_lists_are_checked_and_each_variant_gets_its_validator() {
        assert_eq!(parse_variants("qemu-vtpm"), Ok(vec![Variant::QemuVtpm]));
        assert_eq!(
            parse_variants("sev-snp, qemu-vtpm"),
            Ok(vec![Variant::SevSnp, Variant::QemuVtpm])
        );
        for bad in ["", "tdx", "sev-snp,sev-snp", "qemu-vtpm,", &"x".repeat(300)] {
            assert!(parse_variants(bad).is_err(), "{bad}");
        }
        assert_eq!(
            VARIANTS.accepted(&parse(&[])).unwrap(),
            vec![Variant::QemuVtpm]
        );
        let e = VARIANTS
            .accepted(&parse(&["--variants", "tpm"]))
            .unwrap_err();
        assert!(
            e.to_string().starts_with("--variants: unknown variant"),
            "{e}"
        );
        assert_eq!(
            attestation_variant(&parse(&["--attestation", "sev-snp"]), "attestation").unwrap(),
            Variant::SevSnp
        );
        assert_eq!(
            attestation_variant(&parse(&[]), "attestation").unwrap(),
            Variant::QemuVtpm
        );
        assert!(matches!(
            attestation_variant(
                &parse(&["--attestation", "sev-snp,qemu-vtpm"]),
                "attestation"
            ),
            Err(OptionsError::Variants {
                option: "attestation",
                ..
            })
        ));

        // sev-snp needs its policy; the vTPM builder is not asked for.
        let m = parse(&["--variants", "sev-snp"]);
        let e = VARIANTS
            .validators(&m, || panic!("qemu-vtpm is not accepted"))
            .err()
            .unwrap();
        assert!(matches!(e, OptionsError::SnpPolicyRequired { .. }), "{e:?}");
        let dir = temp_dir("variants");
        let snp = dir.join("snp.json");
        std::fs::write(
            &snp,
            format!(
                r#"{{"measurement": {{"expected": "{}"}}}}"#,
                "ab".repeat(48)
            ),
        )
        .unwrap();
        let snp_arg = snp.display().to_string();
        let m = parse(&["--variants", "sev-snp,qemu-vtpm", "--snp-policy", &snp_arg]);
        let policy = policy_file(&dir).display().to_string();
        let key = format!("pinned:04{}", "ab".repeat(64));
        let vtpm_m = parse(&["--measurements", &policy, "--ak-trust", &key]);
        let got: Vec<Variant> = VARIANTS
            .validators(&m, || WARN.validator(&vtpm_m))
            .unwrap()
            .iter()
            .map(|v| v.variant())
            .collect();
        assert_eq!(got, vec![Variant::SevSnp, Variant::QemuVtpm]);
        std::fs::write(&snp, "{}").unwrap();
        let e = VARIANTS.snp_validator(&m).err().unwrap();
        assert!(
            matches!(
                &e,
                OptionsError::SnpPolicy {
                    option: "snp-policy",
                    ..
                }
            ),
            "{e:?}"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }
}
