//! `confboot measure`: predicts the PCRs of a QEMU direct-kernel boot
//! under OVMF from the kernel, the initrd and the command line, without
//! booting (`confboot_attest::measure`), and writes the measurement policy and
//! the predicted event log. Same inputs, same bytes.

use std::path::Path;

use confboot_attest::measure::{
    DEFAULT_MEMORY_MIB, DirectBoot, InitrdDigest, MAX_KERNEL_LEN, PREDICTED_ENFORCED,
    predicted_policy,
};
use confboot_attest::tpm::event_log::EventList;
use confboot_util::args::{Command, Matches, Opt, VERBOSITY, parse_or_exit};

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
        Opt::value(
            "kernel",
            "FILE",
            "The kernel QEMU boots (-kernel): a bzImage with an EFI stub",
        ),
        Opt::value(
            "initrd",
            "FILE",
            "The initrd (-initrd); `none` for a boot without one",
        ),
        Opt::value(
            "cmdline",
            "TEXT",
            "The whole kernel command line (-append), printable ASCII",
        ),
        Opt::value(
            "memory-mib",
            "N",
            "The VM's memory (-m), in MiB: the initrd's address in PCR 4 depends on it",
        )
        .default("1024"),
        Opt::value(
            "policy-out",
            "FILE",
            "Where the measurement policy goes (Constellation's JSON format)",
        )
        .default("measurements.json"),
        Opt::value("events-out", "FILE", "Where the predicted event log goes")
            .default("measurements.events.json"),
        VERBOSITY,
    ],
};

/// Runs `confboot measure`; returns the exit code.
pub fn run(args: Vec<String>) -> i32 {
    let m = parse_or_exit(&CMD, args);
    confboot_util::logging::init("confboot", m.verbosity().unwrap_or(2));
    let events = match predict(&m) {
        Ok(events) => events,
        Err(e) => {
            eprintln!("confboot measure: {e}");
            return 2;
        }
    };
    let policy = predicted_policy(&events);
    let policy_out = m.value("policy-out").expect("has a default");
    let events_out = m.value("events-out").expect("has a default");
    for (path, text) in [
        (policy_out, policy.to_json()),
        (events_out, events.to_json()),
    ] {
        if let Err(e) = std::fs::write(path, text) {
            eprintln!("confboot measure: cannot write {path}: {e}");
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

fn predict(m: &Matches) -> Result<EventList, String> {
    let kernel_path = m.required("kernel").map_err(|e| e.to_string())?;
    let initrd_path = m.required("initrd").map_err(|e| e.to_string())?;
    let cmdline = m.required("cmdline").map_err(|e| e.to_string())?;
    let memory_mib = m
        .parsed::<u64>("memory-mib")
        .map_err(|e| e.to_string())?
        .unwrap_or(DEFAULT_MEMORY_MIB);
    let kernel = confboot_util::fs::read_bounded(Path::new(kernel_path), MAX_KERNEL_LEN)
        .map_err(|e| format!("--kernel: {e}"))?;
    let initrd = match initrd_path {
        "none" => None,
        path => Some(
            std::fs::File::open(path)
                .and_then(InitrdDigest::read)
                .map_err(|e| format!("--initrd {path}: {e}"))?,
        ),
    };
    DirectBoot {
        kernel: &kernel,
        initrd,
        cmdline,
        memory_mib,
    }
    .predict()
    .map_err(|e| e.to_string())
}
