//! `confboot measure`: predicts the PCRs of a QEMU direct-kernel boot
//! under OVMF from the kernel, the initrd and the command line, without
//! booting (`confboot_measure`), and writes the measurement policy and
//! the predicted event log (same inputs, same bytes), and on request the
//! image's reference values as an unsigned CoRIM (`confboot_appraisal::reference`).

use std::path::PathBuf;

use confboot_appraisal::reference::{ReferenceSet, VariantReference};
use confboot_attest::{MeasurementPolicy, Variant};
use confboot_measure::{
    DEFAULT_MEMORY_MIB, DirectBoot, InitrdDigest, MAX_KERNEL_LEN, PREDICTED_ENFORCED,
    predicted_policy,
};
use confboot_tpm::event_log::EventList;
use confboot_util::args::{Command, Matches, Opt, VERBOSITY, parse_or_exit};

/// The variant whose measurements are predicted: the vTPM's PCRs here,
/// the SEV-SNP launch digest in [`crate::measure_snp`].
pub const VARIANT: Opt = Opt::value(
    "variant",
    "VARIANT",
    "What to predict: qemu-vtpm (the vTPM's PCRs, these options) or sev-snp (the launch digest; see `confboot measure --variant sev-snp --help`)",
)
.default("qemu-vtpm");
const KERNEL: Opt = Opt::value(
    "kernel",
    "FILE",
    "The kernel QEMU boots (-kernel): a bzImage with an EFI stub",
);
const INITRD: Opt = Opt::value(
    "initrd",
    "FILE",
    "The initrd (-initrd); `none` for a boot without one",
);
const CMDLINE: Opt = Opt::value(
    "cmdline",
    "TEXT",
    "The whole kernel command line (-append), printable ASCII",
);
const MEMORY_MIB: Opt = Opt::value(
    "memory-mib",
    "N",
    "The VM's memory (-m), in MiB: the initrd's address in PCR 4 depends on it",
)
.default("1024");
const POLICY_OUT: Opt = Opt::value(
    "policy-out",
    "FILE",
    "Where the measurement policy goes (Constellation's JSON format)",
)
.default("measurements.json");
const EVENTS_OUT: Opt = Opt::value("events-out", "FILE", "Where the predicted event log goes")
    .default("measurements.events.json");
pub(crate) const REFERENCE_VALUES_OUT: Opt = Opt::value(
    "reference-values-out",
    "FILE",
    "Also write the image's reference values here: an unsigned CoRIM (see the README), for `confboot sign`",
);
pub(crate) const NAME: Opt = Opt::value(
    "name",
    "NAME",
    "The image's name in the reference values (with --reference-values-out)",
);
pub(crate) const VERSION: Opt = Opt::value(
    "version",
    "VERSION",
    "The image's version in the reference values (with --reference-values-out)",
);
pub(crate) const NOT_BEFORE: Opt = Opt::value(
    "not-before",
    "TIME",
    "Start of the reference values' window: RFC 3339 UTC (2026-01-01T00:00:00Z), a date or Unix seconds; default now",
);
pub(crate) const NOT_AFTER: Opt = Opt::value(
    "not-after",
    "TIME",
    "End of the reference values' window (inclusive), as --not-before; default 365 days after it",
);
/// The window a set gets when no end is named.
const DEFAULT_VALIDITY_SECS: i64 = 365 * 86_400;

/// The command's options and help.
pub const CMD: Command = Command {
    name: "confboot measure",
    about: "Predicts what OVMF and the Linux EFI stub measure into the vTPM when QEMU boots \
KERNEL with INITRD and the command line CMDLINE (-kernel, -initrd, -append; q35 machine, -m \
MiB), without booting: PCR 4 (the kernel as QEMU loads it), PCR 9 (command line and initrd), \
and the separators and actions in PCRs 3, 5 and 6. PCRs 0, 1, 2 and 7 measure the firmware and \
its variables, not the image, and are not predicted. Writes the measurement policy (PCRs 4, 9 \
and an all-zero 15 enforced; 3, 5, 6 warnOnly) and the predicted event log (JSON, one entry per \
event: PCR, type, SHA-256, what it measures), which validators use to name the event behind a \
differing PCR. Exit status: 0 written, 2 bad arguments, unreadable input or a kernel this does \
not predict, 1 an output cannot be written. With --reference-values-out, also writes the \
image's reference values (every predicted PCR with its events, NAME, VERSION and a validity \
window) as an unsigned CoRIM, which `confboot sign` signs with a release key.",
    usage: "confboot measure [--variant qemu-vtpm] --kernel FILE --initrd FILE --cmdline TEXT [--memory-mib N] [--policy-out FILE] [--events-out FILE] [--reference-values-out FILE --name NAME --version VERSION [--not-before TIME] [--not-after TIME]]",
    opts: &[
        VARIANT,
        KERNEL,
        INITRD,
        CMDLINE,
        MEMORY_MIB,
        POLICY_OUT,
        EVENTS_OUT,
        REFERENCE_VALUES_OUT,
        NAME,
        VERSION,
        NOT_BEFORE,
        NOT_AFTER,
        VERBOSITY,
    ],
};

/// What `confboot measure` runs with.
#[derive(Debug)]
struct Config {
    /// The kernel QEMU boots.
    kernel: PathBuf,
    /// The initrd (`None`: a boot without one).
    initrd: Option<PathBuf>,
    /// The whole kernel command line.
    cmdline: String,
    /// The VM's memory, in MiB.
    memory_mib: u64,
    /// Where the measurement policy goes.
    policy_out: PathBuf,
    /// Where the predicted event log goes.
    events_out: PathBuf,
    /// The reference values to write, if asked for.
    reference_values: Option<ReferenceValuesOut>,
}

/// Where the reference values go, and what they say of the image.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct ReferenceValuesOut {
    /// The file.
    pub(crate) path: PathBuf,
    /// The image's name.
    pub(crate) name: String,
    /// The image's version.
    pub(crate) version: String,
    /// The window's start, Unix seconds.
    pub(crate) not_before: i64,
    /// The window's end, Unix seconds.
    pub(crate) not_after: i64,
}

/// Why `confboot measure` predicted nothing (exit 2): an option, a file
/// it names, or a set a reader would refuse.
#[derive(Debug, thiserror::Error)]
pub(crate) enum MeasureCommandError {
    /// An option is missing or not of its type.
    #[error(transparent)]
    Args(#[from] confboot_util::args::ArgsError),
    /// An instant option is not an instant.
    #[error("--{option}: {error}")]
    Instant {
        /// The option.
        option: &'static str,
        /// Why.
        error: confboot_util::time::InstantError,
    },
    /// A reference-value option without `--reference-values-out`.
    #[error("--{0} goes with --{out}", out = REFERENCE_VALUES_OUT.long)]
    WithoutOut(&'static str),
    /// `--reference-values-out` without an option it needs.
    #[error("--{out} needs --{0}", out = REFERENCE_VALUES_OUT.long)]
    OutNeeds(&'static str),
    /// The set would be refused by a reader.
    #[error("--{out}: {0}", out = REFERENCE_VALUES_OUT.long)]
    Encode(confboot_appraisal::reference::ReferenceError),
    /// The kernel cannot be read.
    #[error("--{option}: {0}", option = KERNEL.long)]
    Kernel(confboot_util::fs::FileError),
    /// The initrd cannot be read.
    #[error("--{option} {}: {error}", path.display(), option = INITRD.long)]
    Initrd {
        /// The file.
        path: PathBuf,
        /// Why.
        error: std::io::Error,
    },
    /// The boot cannot be predicted.
    #[error("{0}")]
    Predict(confboot_measure::MeasureError),
    /// `--variant` names a variant this command does not predict.
    #[error("--{option}: {0:?} is not qemu-vtpm or sev-snp", option = VARIANT.long)]
    Variant(String),
}

impl ReferenceValuesOut {
    /// Reads the reference-value options; `now` is the default start.
    pub(crate) fn from_matches(
        m: &Matches,
        now: i64,
    ) -> Result<Option<ReferenceValuesOut>, MeasureCommandError> {
        let instant = |opt: &Opt| {
            m.value(opt)
                .map(|v| {
                    confboot_util::time::parse_instant(v).map_err(|error| {
                        MeasureCommandError::Instant {
                            option: opt.long,
                            error,
                        }
                    })
                })
                .transpose()
        };
        let (name, version) = (m.value(&NAME), m.value(&VERSION));
        let (not_before, not_after) = (instant(&NOT_BEFORE)?, instant(&NOT_AFTER)?);
        let Some(path) = m.value(&REFERENCE_VALUES_OUT) else {
            if let Some(opt) = [&NAME, &VERSION, &NOT_BEFORE, &NOT_AFTER]
                .into_iter()
                .find(|o| m.value(o).is_some())
            {
                return Err(MeasureCommandError::WithoutOut(opt.long));
            }
            return Ok(None);
        };
        let required = |v: Option<&str>, opt: &Opt| {
            v.map(str::to_string)
                .ok_or(MeasureCommandError::OutNeeds(opt.long))
        };
        let not_before = not_before.unwrap_or(now);
        Ok(Some(ReferenceValuesOut {
            path: PathBuf::from(path),
            name: required(name, &NAME)?,
            version: required(version, &VERSION)?,
            not_before,
            not_after: not_after.unwrap_or(not_before.saturating_add(DEFAULT_VALIDITY_SECS)),
        }))
    }

    /// The set for a predicted boot, in bytes (refused as a reader would
    /// refuse it: a name too long, a window that ends before it starts).
    fn encode(
        &self,
        policy: &MeasurementPolicy,
        events: &EventList,
    ) -> Result<Vec<u8>, MeasureCommandError> {
        self.encode_variant(VariantReference {
            variant: Variant::QemuVtpm,
            policy: policy.clone(),
            events: events.clone(),
            launch: None,
        })
    }

    /// The set of one variant's values, in bytes (refused as a reader
    /// would refuse it).
    pub(crate) fn encode_variant(
        &self,
        variant: VariantReference,
    ) -> Result<Vec<u8>, MeasureCommandError> {
        ReferenceSet {
            name: self.name.clone(),
            version: self.version.clone(),
            not_before: self.not_before,
            not_after: self.not_after,
            variants: vec![variant],
        }
        .encode()
        .map_err(MeasureCommandError::Encode)
    }

    /// The line that says what was written.
    pub(crate) fn describe(&self) -> String {
        let at = |t: i64| {
            confboot_util::time::rfc3339(
                std::time::UNIX_EPOCH + std::time::Duration::from_secs(t.max(0) as u64),
            )
        };
        format!(
            "wrote {} (unsigned reference values of {} {}, valid {} to {})",
            self.path.display(),
            self.name,
            self.version,
            at(self.not_before),
            at(self.not_after)
        )
    }
}

impl Config {
    /// Reads every option (each once, whatever the others say).
    fn from_matches(m: &Matches) -> Result<Config, MeasureCommandError> {
        let variant = m.value(&VARIANT).expect("has a default");
        if variant != Variant::QemuVtpm.name() {
            return Err(MeasureCommandError::Variant(variant.to_string()));
        }
        let kernel = m.required(&KERNEL).map(PathBuf::from);
        let initrd = m.required(&INITRD).map(str::to_string);
        let cmdline = m.required(&CMDLINE).map(str::to_string);
        let memory_mib = m.parsed::<u64>(&MEMORY_MIB);
        let policy_out = PathBuf::from(m.value(&POLICY_OUT).expect("has a default"));
        let events_out = PathBuf::from(m.value(&EVENTS_OUT).expect("has a default"));
        let reference_values = ReferenceValuesOut::from_matches(m, confboot_util::time::unix_now());
        Ok(Config {
            kernel: kernel?,
            initrd: match initrd?.as_str() {
                "none" => None,
                path => Some(PathBuf::from(path)),
            },
            cmdline: cmdline?,
            memory_mib: memory_mib?.unwrap_or(DEFAULT_MEMORY_MIB),
            policy_out,
            events_out,
            reference_values: reference_values?,
        })
    }
}

/// Runs `confboot measure`; returns the exit code.
pub fn run(args: Vec<String>) -> i32 {
    if crate::measure_snp::wanted(&args) {
        return crate::measure_snp::run(args);
    }
    let m = parse_or_exit(&CMD, args);
    confboot_util::logging::init("confboot", m.verbosity().unwrap_or(2));
    let config = match Config::from_matches(&m) {
        Ok(config) => config,
        Err(e) => {
            eprintln!("confboot measure: {e}");
            return 2;
        }
    };
    let events = match predict(&config) {
        Ok(events) => events,
        Err(e) => {
            eprintln!("confboot measure: {e}");
            return 2;
        }
    };
    let policy = predicted_policy(&events);
    let mut outputs = vec![
        (&config.policy_out, policy.to_json().into_bytes()),
        (&config.events_out, events.to_json().into_bytes()),
    ];
    if let Some(reference) = &config.reference_values {
        match reference.encode(&policy, &events) {
            Ok(bytes) => outputs.push((&reference.path, bytes)),
            Err(e) => {
                eprintln!("confboot measure: {e}");
                return 2;
            }
        }
    }
    for (path, bytes) in &outputs {
        if let Err(e) = std::fs::write(path, bytes) {
            eprintln!("confboot measure: cannot write {}: {e}", path.display());
            return 1;
        }
    }
    println!("PCR  predicted value                                                     policy");
    for (pcr, value) in events.replay() {
        let rule = if PREDICTED_ENFORCED.contains(&pcr) {
            "enforced"
        } else {
            "warnOnly"
        };
        println!("{pcr:>3}  {}  {rule}", confboot_util::hex::encode(&value));
    }
    println!(
        "{:>3}  {}  enforced (not yet bootstrapped)",
        15,
        "0".repeat(64)
    );
    println!(
        "wrote {} and {} ({} events)",
        config.policy_out.display(),
        config.events_out.display(),
        events.events.len()
    );
    if let Some(r) = &config.reference_values {
        println!("{}", r.describe());
    }
    0
}

fn predict(config: &Config) -> Result<EventList, MeasureCommandError> {
    let kernel = confboot_util::fs::read_bounded(&config.kernel, MAX_KERNEL_LEN)
        .map_err(MeasureCommandError::Kernel)?;
    let initrd = match &config.initrd {
        None => None,
        Some(path) => Some(
            std::fs::File::open(path)
                .and_then(InitrdDigest::read)
                .map_err(|error| MeasureCommandError::Initrd {
                    path: path.clone(),
                    error,
                })?,
        ),
    };
    DirectBoot {
        kernel: &kernel,
        initrd,
        cmdline: &config.cmdline,
        memory_mib: config.memory_mib,
    }
    .predict()
    .map_err(MeasureCommandError::Predict)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_option_the_config_reads_is_declared() {
        let args = ["--kernel", "k", "--initrd", "none", "--cmdline", "quiet"];
        let m = CMD.parse(args.into_iter().map(String::from)).unwrap();
        let c = Config::from_matches(&m).unwrap();
        assert_eq!(c.initrd, None);
        assert_eq!(c.memory_mib, 1024);
        assert_eq!(c.policy_out, std::path::Path::new("measurements.json"));
        assert_eq!(c.reference_values, None);
        let mut with = args.to_vec();
        with.extend(["--reference-values-out", "r.corim", "--name", "n"]);
        with.extend(["--version", "1", "--not-before", "2026-01-01"]);
        let m = CMD.parse(with.iter().map(|s| s.to_string())).unwrap();
        let r = Config::from_matches(&m).unwrap().reference_values.unwrap();
        assert_eq!((r.not_before, r.not_after), (1_767_225_600, 1_798_761_600));
        // The image's name is required, and the window's ends go with a file.
        let m = CMD.parse(with[..8].iter().map(|s| s.to_string())).unwrap();
        let e = Config::from_matches(&m).unwrap_err();
        assert!(matches!(e, MeasureCommandError::OutNeeds("name")), "{e:?}");
        assert!(e.to_string().contains("--name"), "{e}");
        let mut stray = args.to_vec();
        stray.extend(["--not-after", "2027-01-01"]);
        let m = CMD.parse(stray.iter().map(|s| s.to_string())).unwrap();
        assert!(matches!(
            Config::from_matches(&m),
            Err(MeasureCommandError::WithoutOut("not-after"))
        ));
    }
}
