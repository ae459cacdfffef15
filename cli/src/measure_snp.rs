//! `confboot measure --variant sev-snp`: predicts the SEV-SNP launch digest
//! of a QEMU guest booted directly (`-kernel`, `-initrd`, `-append` with
//! `kernel-hashes=on`) under an OVMF build that has the kernel hashes
//! section (`confboot_measure::snp`), and writes the SEV-SNP policy that
//! pins that launch: the measurement, `"launch": "measuredDirectBoot"` and
//! the three hashes its table holds.

use std::path::PathBuf;

use confboot_measure::snp::{
    KernelHashes, MAX_FIRMWARE_LEN, SnpFirmware, SnpLaunch, SnpMeasureError, UnknownVcpuType,
    VcpuType,
};
use confboot_measure::{InitrdDigest, MAX_KERNEL_LEN};
use confboot_util::args::{Command, Matches, Opt, VERBOSITY, parse_or_exit};

use confboot_appraisal::reference::{DirectBootHashes, VariantReference};

use crate::measure::{
    MeasureCommandError, NAME, NOT_AFTER, NOT_BEFORE, REFERENCE_VALUES_OUT, ReferenceValuesOut,
    VARIANT, VERSION,
};

const FIRMWARE: Opt = Opt::value(
    "firmware",
    "FILE",
    "The OVMF build QEMU maps below 4 GiB (-bios): one with the SEV metadata and the kernel hashes section (edk2's OvmfPkg/AmdSev)",
);
const KERNEL: Opt = Opt::value("kernel", "FILE", "The kernel QEMU boots (-kernel)");
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
const VCPUS: Opt = Opt::value("vcpus", "N", "The number of vCPUs (-smp), 1 to 512").default("1");
const VCPU_TYPE: Opt = Opt::value(
    "vcpu-type",
    "MODEL",
    "QEMU's vCPU model (-cpu): EPYC, EPYC-Rome, EPYC-Milan, EPYC-Genoa or EPYC-Turin, with -vN",
);
const GUEST_FEATURES: Opt = Opt::value(
    "guest-features",
    "BITS",
    "The guest's SEV features in each VMSA (hex with 0x, or decimal): QEMU's default is 0x1, SNP active",
)
.default("0x1");
const POLICY_OUT: Opt = Opt::value(
    "policy-out",
    "FILE",
    "Where the SEV-SNP policy goes (the format `confboot verify-report --policy` and joinsvc read)",
)
.default("snp-policy.json");

/// The command's options and help.
pub const CMD: Command = Command {
    name: "confboot measure --variant sev-snp",
    about: "Predicts the SEV-SNP launch digest (the report's MEASUREMENT) of a QEMU guest that \
boots KERNEL with INITRD and CMDLINE directly under FIRMWARE with kernel-hashes=on, without \
booting and without AMD hardware: the firmware's pages, its SEV metadata sections (the kernel \
hashes page holding the SHA-256 of the kernel, the initrd and the command line with its NUL), and \
one VMSA per vCPU as QEMU starts it. Writes the SEV-SNP policy that pins that launch: the \
measurement enforced, \"launch\": \"measuredDirectBoot\" and the three hashes (TCB minimums, \
VMPL, debug and the roots keep their defaults; edit the file to change them). A firmware \
without the kernel hashes section (Debian's OVMF) is refused: its launch digest would pin the \
firmware and not the image. With --reference-values-out, also writes the launch (its digest and \
the three hashes, NAME, VERSION and a validity window) as an unsigned CoRIM, which `confboot \
sign` signs with a release key. Exit status: 0 written, 2 bad arguments, unreadable input or a \
firmware this does not measure, 1 the policy cannot be written.",
    usage: "confboot measure --variant sev-snp --firmware FILE --kernel FILE --initrd FILE --cmdline TEXT --vcpu-type MODEL [--vcpus N] [--guest-features BITS] [--policy-out FILE] [--reference-values-out FILE --name NAME --version VERSION [--not-before TIME] [--not-after TIME]]",
    opts: &[
        VARIANT,
        FIRMWARE,
        KERNEL,
        INITRD,
        CMDLINE,
        VCPUS,
        VCPU_TYPE,
        GUEST_FEATURES,
        POLICY_OUT,
        REFERENCE_VALUES_OUT,
        NAME,
        VERSION,
        NOT_BEFORE,
        NOT_AFTER,
        VERBOSITY,
    ],
};

/// What the command runs with.
#[derive(Debug)]
struct Config {
    firmware: PathBuf,
    kernel: PathBuf,
    initrd: Option<PathBuf>,
    cmdline: String,
    vcpus: u32,
    vcpu_type: VcpuType,
    guest_features: u64,
    policy_out: PathBuf,
    reference_values: Option<ReferenceValuesOut>,
}

/// Why nothing was predicted (exit 2).
#[derive(Debug, thiserror::Error)]
enum MeasureSnpError {
    /// An option is missing or not of its type.
    #[error(transparent)]
    Args(#[from] confboot_util::args::ArgsError),
    /// The vCPU model is not one QEMU offers.
    #[error("--{option}: {0}", option = VCPU_TYPE.long)]
    VcpuType(UnknownVcpuType),
    /// The guest features are no number.
    #[error("--{option}: {0:?} is not a number (0x1, or decimal)", option = GUEST_FEATURES.long)]
    GuestFeatures(String),
    /// The command line is not printable ASCII.
    #[error("--{option}: not printable ASCII", option = CMDLINE.long)]
    Cmdline,
    /// A file cannot be read.
    #[error("--{option}: {error}")]
    Read {
        /// The option naming it.
        option: &'static str,
        /// Why.
        error: confboot_util::fs::FileError,
    },
    /// The initrd cannot be read.
    #[error("--{option} {}: {error}", path.display(), option = INITRD.long)]
    Initrd {
        /// The file.
        path: PathBuf,
        /// Why.
        error: std::io::Error,
    },
    /// The firmware or the launch cannot be measured.
    #[error("{0}")]
    Measure(SnpMeasureError),
    /// The reference-value options, or the set they make.
    #[error(transparent)]
    ReferenceValues(MeasureCommandError),
}

/// Whether the arguments ask for the SEV-SNP variant (`--variant sev-snp`
/// or `--variant=sev-snp`): the vTPM command's parser takes the rest.
pub fn wanted(args: &[String]) -> bool {
    args.iter().enumerate().any(|(i, a)| {
        a == "--variant=sev-snp"
            || (a == "--variant" && args.get(i + 1).is_some_and(|v| v == "sev-snp"))
    })
}

fn parse_features(text: &str) -> Option<u64> {
    match text.strip_prefix("0x").or_else(|| text.strip_prefix("0X")) {
        Some(hex) => u64::from_str_radix(hex, 16).ok(),
        None => text.parse().ok(),
    }
}

impl Config {
    /// Reads every option once.
    fn from_matches(m: &Matches) -> Result<Config, MeasureSnpError> {
        let firmware = m.required(&FIRMWARE).map(PathBuf::from);
        let kernel = m.required(&KERNEL).map(PathBuf::from);
        let initrd = m.required(&INITRD).map(str::to_string);
        let cmdline = m.required(&CMDLINE).map(str::to_string);
        let vcpus = m.parsed::<u32>(&VCPUS);
        let vcpu_type = m.required(&VCPU_TYPE).map(str::to_string);
        let features = m.value(&GUEST_FEATURES).expect("has a default").to_string();
        let policy_out = PathBuf::from(m.value(&POLICY_OUT).expect("has a default"));
        let reference_values = ReferenceValuesOut::from_matches(m, confboot_util::time::unix_now())
            .map_err(MeasureSnpError::ReferenceValues);
        let cmdline = cmdline?;
        if !cmdline.bytes().all(|b| (0x20..0x7f).contains(&b)) {
            return Err(MeasureSnpError::Cmdline);
        }
        Ok(Config {
            firmware: firmware?,
            kernel: kernel?,
            initrd: match initrd?.as_str() {
                "none" => None,
                path => Some(PathBuf::from(path)),
            },
            cmdline,
            vcpus: vcpus?.expect("has a default"),
            vcpu_type: vcpu_type?.parse().map_err(MeasureSnpError::VcpuType)?,
            guest_features: parse_features(&features)
                .ok_or(MeasureSnpError::GuestFeatures(features))?,
            policy_out,
            reference_values: reference_values?,
        })
    }
}

/// The launch digest and the hashes of the configured boot.
fn predict(config: &Config) -> Result<([u8; 48], KernelHashes), MeasureSnpError> {
    let firmware = confboot_util::fs::read_bounded(&config.firmware, MAX_FIRMWARE_LEN as u64)
        .map_err(|error| MeasureSnpError::Read {
            option: FIRMWARE.long,
            error,
        })?;
    let firmware = SnpFirmware::parse(firmware.to_vec()).map_err(MeasureSnpError::Measure)?;
    let kernel =
        confboot_util::fs::read_bounded(&config.kernel, MAX_KERNEL_LEN).map_err(|error| {
            MeasureSnpError::Read {
                option: KERNEL.long,
                error,
            }
        })?;
    let initrd = match &config.initrd {
        None => InitrdDigest::of(b"").sha256,
        Some(path) => {
            std::fs::File::open(path)
                .and_then(InitrdDigest::read)
                .map_err(|error| MeasureSnpError::Initrd {
                    path: path.clone(),
                    error,
                })?
                .sha256
        }
    };
    let of_kernel = KernelHashes::of(&kernel, None, &config.cmdline);
    let hashes = KernelHashes::of_digests(of_kernel.kernel, initrd, of_kernel.cmdline);
    let digest = SnpLaunch {
        firmware: &firmware,
        hashes: Some(hashes),
        vcpus: config.vcpus,
        vcpu_signature: config.vcpu_type.signature(),
        guest_features: config.guest_features,
    }
    .launch_digest()
    .map_err(MeasureSnpError::Measure)?;
    Ok((digest, hashes))
}

/// The policy that pins the launch, as `SnpPolicy::load` reads it.
fn policy_json(digest: &[u8; 48], hashes: &KernelHashes) -> String {
    let hex = confboot_util::hex::encode;
    let value = serde_json::json!({
        "measurement": {"expected": hex(digest), "warnOnly": false},
        "launch": "measuredDirectBoot",
        "kernelHash": hex(&hashes.kernel),
        "initrdHash": hex(&hashes.initrd),
        "cmdlineHash": hex(&hashes.cmdline),
    });
    let mut text = serde_json::to_string_pretty(&value).expect("a JSON value prints");
    text.push('\n');
    text
}

/// Runs `confboot measure --variant sev-snp`; returns the exit code.
pub fn run(args: Vec<String>) -> i32 {
    let m = parse_or_exit(&CMD, args);
    confboot_util::logging::init("confboot", m.verbosity().unwrap_or(2));
    let result = Config::from_matches(&m).and_then(|c| predict(&c).map(|p| (c, p)));
    let (config, (digest, hashes)) = match result {
        Ok(done) => done,
        Err(e) => {
            eprintln!("confboot measure: {e}");
            return 2;
        }
    };
    let mut outputs = vec![(
        &config.policy_out,
        policy_json(&digest, &hashes).into_bytes(),
    )];
    if let Some(reference) = &config.reference_values {
        let launch = DirectBootHashes {
            kernel: hashes.kernel,
            initrd: hashes.initrd,
            cmdline: hashes.cmdline,
        };
        match reference.encode_variant(VariantReference::snp_launch(digest, launch)) {
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
    let hex = confboot_util::hex::encode;
    println!("measurement  {}", hex(&digest));
    println!("kernel       {}", hex(&hashes.kernel));
    println!("initrd       {}", hex(&hashes.initrd));
    println!("cmdline      {}", hex(&hashes.cmdline));
    println!(
        "wrote {} ({} × {}, guest features {:#x}, measured direct boot)",
        config.policy_out.display(),
        config.vcpus,
        config.vcpu_type,
        config.guest_features
    );
    if let Some(r) = &config.reference_values {
        println!("{}", r.describe());
    }
    0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_variant_is_seen_in_both_spellings_only_as_an_option() {
        let args = |a: &[&str]| a.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert!(wanted(&args(&["--variant", "sev-snp"])));
        assert!(wanted(&args(&["--kernel", "k", "--variant=sev-snp"])));
        assert!(!wanted(&args(&["--variant", "qemu-vtpm"])));
        assert!(!wanted(&args(&["--cmdline", "--variant"])));
        assert_eq!(parse_features("0x21"), Some(0x21));
        assert_eq!(parse_features("33"), Some(33));
        assert_eq!(parse_features("0xZ"), None);
    }
}
