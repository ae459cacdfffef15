//! Writes golden measurements: boots a kernel + initramfs once under QEMU,
//! OVMF and a fresh swtpm with the given (production) kernel command line,
//! reads the PCRs the initramfs prints and writes them as a measurement
//! policy (Constellation's JSON format). It also prints the firmware's event
//! log, one line per event (PCR, type, SHA-256, description), after checking
//! that it replays to the booted PCRs.
//!
//! ```text
//! golden-measurements KERNEL INITRD OUT.json [CMDLINE]
//! ```
//!
//! CMDLINE is what follows the fixed `console=ttyS0 quiet panic=-1`; PCR 9
//! covers it, so give exactly the command line the nodes boot with.

use std::path::PathBuf;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if !(3..=4).contains(&args.len()) {
        eprintln!("usage: golden-measurements KERNEL INITRD OUT.json [CMDLINE]");
        std::process::exit(2);
    }
    let kernel = PathBuf::from(&args[0]);
    let initrd = PathBuf::from(&args[1]);
    let out = PathBuf::from(&args[2]);
    let cmdline = args.get(3).map(String::as_str).unwrap_or("");
    for p in [&kernel, &initrd] {
        if !p.is_file() {
            eprintln!("golden-measurements: {} is not a file", p.display());
            std::process::exit(2);
        }
    }
    let boot = confboot_tests::qemu::golden_boot(&kernel, &initrd, cmdline);
    for (i, e) in boot.event_log.events().iter().enumerate() {
        let digest = e
            .sha256
            .map(|d| confboot_util::hex::encode(&d))
            .unwrap_or_else(|| "-".into());
        println!(
            "event {:>3}  PCR {:>2}  {:<34} {digest}  {}",
            i + 1,
            e.pcr,
            e.type_name(),
            e.description()
        );
    }
    let policy = boot.policy();
    if let Err(e) = std::fs::write(&out, policy.to_json()) {
        eprintln!("golden-measurements: cannot write {}: {e}", out.display());
        std::process::exit(1);
    }
    println!("wrote {}", out.display());
}
