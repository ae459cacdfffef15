//! PID 1: the bootstrapper binary is the initramfs's `/init`. It brings the
//! node up (mounts, console, kernel modules, network by DHCP), prints the
//! boot's measurements, runs the bootstrapper (this binary again, as a
//! child) with the arguments of `confboot.args`, then either hands the
//! node over to its operating system (a dm-verity root named by
//! `confboot.root*`, [`handover`]) or runs the node agent, and powers off on
//! every path that does not hand over. No shell: the only test affordance
//! is `/test/hook`, run if a test image has it. See initramfs/README.md.

mod cmdline;
pub mod handover;
mod measurements;
mod network;
mod system;

use std::path::Path;
use std::process::Command;

/// The bootstrapper (this binary) in the image.
const BOOTSTRAPPER: &str = "/usr/bin/bootstrapper";
/// The node agent, run once the node is bootstrapped.
const NODEAGENT: &str = "/usr/bin/nodeagent";
/// The test images' hook (`hook probe`, `hook after`); never in production.
const TEST_HOOK: &str = "/test/hook";
/// PATH of the processes PID 1 starts.
const PATH: &str = "/usr/sbin:/usr/bin:/sbin:/bin";
/// Where the kernel modules and their load order are.
const MODULES: &str = "/lib/modules";

/// Whether this process is PID 1 (the kernel started it as `/init`).
pub fn is_pid1() -> bool {
    std::process::id() == 1
}

/// PID 1's whole life: never returns; a panic powers off too.
pub fn main() -> ! {
    std::panic::set_hook(Box::new(|info| {
        println!("CONFBOOT-ERROR init panicked: {info}");
        system::power_off();
    }));
    system::mount_early();
    if let Err(e) = system::console_as_stdio() {
        // The kernel's console (if any) stays stdio.
        println!("CONFBOOT-WARN /dev/console: {e}");
    }
    if let Err(e) = std::fs::create_dir_all("/run/cryptsetup") {
        println!("CONFBOOT-WARN mkdir /run/cryptsetup: {e}");
    }
    println!("CONFBOOT-INIT uptime={}", system::uptime());
    system::load_modules(Path::new(MODULES));
    network::configure();

    println!(
        "{}",
        measurements::pcr_line(Path::new(measurements::PCR_DIR))
    );
    if let Err(e) = system::mount_fs("securityfs", system::SECURITYFS, None) {
        println!("CONFBOOT-WARN mount securityfs: {e}");
    }
    println!(
        "{}",
        measurements::event_log_line(Path::new(measurements::EVENT_LOG))
    );

    let cmdline = read_cmdline();
    if cmdline::value(&cmdline, "probe") == Some("1") {
        if Path::new(TEST_HOOK).exists() {
            run_hook("probe");
        } else {
            println!("CONFBOOT-ERROR confboot.probe=1 needs {TEST_HOOK} (a test image)");
        }
        println!("CONFBOOT-PROBE-END");
        system::power_off();
    }

    if !Path::new(BOOTSTRAPPER).exists() {
        println!("CONFBOOT-ERROR no {BOOTSTRAPPER} in this image");
        system::power_off();
    }
    // The OS root is checked and mounted before the node asks for any key:
    // a node whose root does not match its command line never gets one.
    let preparing = std::time::Instant::now();
    let root = match handover::prepare_root(&cmdline) {
        Ok(root) => root,
        Err(e) => {
            println!("CONFBOOT-ERROR the OS root: {e}");
            system::power_off();
        }
    };
    let mut args = cmdline::bootstrapper_args(&cmdline);
    if let Some(root) = &root {
        println!(
            "CONFBOOT-ROOT verified root hash {} (top level checked, mapped, mounted, /etc copied in {} ms)",
            root.root_hash_hex(),
            preparing.elapsed().as_millis()
        );
        args.extend(handover::BOOTSTRAPPER_ARGS.iter().map(Into::into));
    }
    println!("CONFBOOT-BOOTSTRAPPER-START {}", args.len());
    let status = run(Command::new(BOOTSTRAPPER).args(&args));
    println!("CONFBOOT-BOOTSTRAPPER-EXIT {status}");
    println!("CONFBOOT-RSS {}", system::peak_rss_line());

    if let Some(root) = root {
        if status == 0 {
            let error = handover::hand_over(&root, &cmdline::agent_args(&cmdline));
            println!("CONFBOOT-ERROR handing over to the OS: {error}");
        }
        handover::close_state();
        system::power_off();
    }
    if status == 0 {
        if Path::new(TEST_HOOK).exists() {
            run_hook("after");
        }
        if Path::new(NODEAGENT).exists() {
            let agent_args = cmdline::agent_args(&cmdline);
            println!("CONFBOOT-NODEAGENT-START {}", agent_args.len());
            let agent = run(Command::new(NODEAGENT).args(&agent_args));
            println!("CONFBOOT-NODEAGENT-EXIT {agent}");
        }
    }
    system::power_off();
}

/// `/proc/cmdline` (empty if unreadable: no `confboot.` words then).
fn read_cmdline() -> String {
    use std::io::Read;
    let mut text = String::new();
    if let Err(e) = std::fs::File::open("/proc/cmdline").and_then(|f| {
        f.take(cmdline::MAX_CMDLINE_LEN as u64)
            .read_to_string(&mut text)
    }) {
        println!("CONFBOOT-WARN /proc/cmdline: {e}");
    }
    text
}

/// Runs a program on the console with PATH and `DM_DISABLE_UDEV=1`,
/// reaping meanwhile; its status as a shell gives it (127 if it cannot
/// start).
fn run(cmd: &mut Command) -> i32 {
    cmd.env("PATH", PATH).env("DM_DISABLE_UDEV", "1");
    match cmd.spawn() {
        Ok(child) => system::wait_reaping(child),
        Err(e) => {
            println!("CONFBOOT-ERROR cannot start {:?}: {e}", cmd.get_program());
            127
        }
    }
}

/// `/test/hook PHASE`; a failure is printed.
fn run_hook(phase: &str) {
    let status = run(Command::new(TEST_HOOK).arg(phase));
    if status != 0 {
        println!("CONFBOOT-WARN {TEST_HOOK} {phase} exited {status}");
    }
}
