//! `confboot measure`: predicts the PCRs of a QEMU direct-kernel boot
//! under OVMF from the kernel, the initrd and the command line, without
//! booting (`confboot_attest::measure`), and writes the measurement policy and
//! the predicted event log. Same inputs, same bytes.

use std::path::PathBuf;

use confboot_attest::measure::{
    DEFAULT_MEMORY_MIB, DirectBoot, InitrdDigest, MAX_KERNEL_LEN, PREDICTED_ENFORCED,
    predicted_policy,
};
use confboot_attest::tpm::event_log::EventList;
use confboot_util::args::{Command, Matches, Opt, VERBOSITY, parse_or_exit};

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
not predict, 1 an output cannot be written.",
    usage: "confboot measure --kernel FILE --initrd FILE --cmdline TEXT [--memory-mib N] [--policy-out FILE] [--events-out FILE]",
    opts: &[
        KERNEL, INITRD, CMDLINE, MEMORY_MIB, POLICY_OUT, EVENTS_OUT, VERBOSITY,
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
}

impl Config {
    /// Reads every option (each once, whatever the others say).
    fn from_matches(m: &Matches) -> Result<Config, String> {
        let kernel = m.required(&KERNEL).map(PathBuf::from);
        let initrd = m.required(&INITRD).map(str::to_string);
        let cmdline = m.required(&CMDLINE).map(str::to_string);
        let memory_mib = m.parsed::<u64>(&MEMORY_MIB);
        let policy_out = PathBuf::from(m.value(&POLICY_OUT).expect("has a default"));
        let events_out = PathBuf::from(m.value(&EVENTS_OUT).expect("has a default"));
        Ok(Config {
            kernel: kernel.map_err(|e| e.to_string())?,
            initrd: match initrd.map_err(|e| e.to_string())?.as_str() {
                "none" => None,
                path => Some(PathBuf::from(path)),
            },
            cmdline: cmdline.map_err(|e| e.to_string())?,
            memory_mib: memory_mib
                .map_err(|e| e.to_string())?
                .unwrap_or(DEFAULT_MEMORY_MIB),
            policy_out,
            events_out,
        })
    }
}

/// Runs `confboot measure`; returns the exit code.
pub fn run(args: Vec<String>) -> i32 {
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
    let (policy_out, events_out) = (config.policy_out.display(), config.events_out.display());
    for (path, text) in [
        (&config.policy_out, policy.to_json()),
        (&config.events_out, events.to_json()),
    ] {
        if let Err(e) = std::fs::write(path, text) {
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
        "wrote {policy_out} and {events_out} ({} events)",
        events.events.len()
    );
    0
}

fn predict(config: &Config) -> Result<EventList, String> {
    let kernel = confboot_util::fs::read_bounded(&config.kernel, MAX_KERNEL_LEN)
        .map_err(|e| format!("--{}: {e}", KERNEL.long))?;
    let initrd = match &config.initrd {
        None => None,
        Some(path) => Some(
            std::fs::File::open(path)
                .and_then(InitrdDigest::read)
                .map_err(|e| format!("--{} {}: {e}", INITRD.long, path.display()))?,
        ),
    };
    DirectBoot {
        kernel: &kernel,
        initrd,
        cmdline: &config.cmdline,
        memory_mib: config.memory_mib,
    }
    .predict()
    .map_err(|e| e.to_string())
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
    }
}
