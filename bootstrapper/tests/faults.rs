//! Faults during a node's first boot: the bootstrapper (a real process,
//! with its swtpm, a real LUKS2 header on its disk image and a real
//! joinsvc) is killed with SIGKILL, with every helper it runs (as a node
//! powers off), right after each step of its first join, then boots again (a fresh TPM boot, the same disk). Every scenario
//! must end joined, with the disk formatted exactly once (the UUID of the
//! interrupted boot's format is kept) and its first boot recorded.
//!
//! The steps are the lines the node logs in an honest first join, read
//! from a reference run, so a new step is covered without editing this
//! file. The normal suite kills at [`SHORT`] steps; `CONFBOOT_FAULTS=all`
//! kills at every step (RELIABILITY.md has the matrix).

use std::path::PathBuf;
use std::time::Instant;

use confboot_tests::cluster::{Joinsvc, JoinsvcSetup, NodeDir, workspace_binary};

const IMAGE: &[u8] = b"node image v1";

/// The steps the normal suite kills at: one per kind (during the
/// cryptsetup format, after the header's tokens, after marking PCR 15,
/// during the cluster step).
const SHORT: [&str; 4] = ["formatting", "token", "node marked", "kubeadm"];

/// Whether the disk's LUKS2 header records a completed first boot (its
/// `confboot-bootstrapped` token), read with cryptsetup.
fn first_boot_recorded(disk: &std::path::Path) -> bool {
    let out = std::process::Command::new("cryptsetup")
        .args(["luksDump", "--dump-json-metadata"])
        .arg(disk)
        .output()
        .expect("run cryptsetup");
    out.status.success() && String::from_utf8_lossy(&out.stdout).contains("confboot-bootstrapped")
}

fn bootstrapper_bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_bootstrapper"))
}

/// A log line without its timestamp and level, for matching steps.
fn message(line: &str) -> &str {
    line.split_once("bootstrapper")
        .map(|(_, rest)| rest.trim_start_matches([':', ' ']))
        .unwrap_or(line)
}

#[test]
fn a_node_killed_at_any_step_of_its_first_boot_ends_joined_with_one_format() {
    // The control plane's TPM (the same image, marked for the cluster)
    // attests joinsvc; the node trusts its AK.
    let cp = NodeDir::new(&bootstrapper_bin(), "faults-cp");
    let cp_tpm = cp.boot_tpm(IMAGE);
    let n = NodeDir::new(&bootstrapper_bin(), "faults-node")
        .trusting_join_service_ak(&cp_tpm.ak_public);
    let node_tpm = n.boot_tpm(IMAGE);
    let setup = JoinsvcSetup {
        pinned_aks: vec![node_tpm.ak_public.clone()],
        extra: vec!["--tpm".into(), cp_tpm.tpm_arg()],
        ..JoinsvcSetup::new()
    };
    cp_tpm.mark(&setup.cluster_id());
    let joinsvc = Joinsvc::launch(&workspace_binary("joinsvc"), &node_tpm.policy(), setup);
    let endpoint = joinsvc.rpc_addr.to_string();
    drop(node_tpm);
    let blank_disk = || {
        let disk = std::fs::File::create(n.p("disk.img")).unwrap();
        disk.set_len(32 << 20).unwrap();
    };
    // A boot: the TPM starts afresh (PCRs reset, the AK kept), then the
    // bootstrapper; both are returned, to be dropped (killed) together.
    let boot = || {
        let tpm = n.boot_tpm(IMAGE);
        let b = n.bootstrapper(&tpm, &["--join-endpoint", &endpoint]);
        (b, tpm)
    };

    // The reference: an honest first join, its steps after the nodelock.
    blank_disk();
    let reference = {
        let (b, _tpm) = boot();
        let (status, log) = b.wait();
        assert!(status.success(), "{}", log.join("\n"));
        log
    };
    let from = reference
        .iter()
        .position(|l| l.contains("nodelock taken"))
        .expect("the reference run takes the nodelock");
    let to = reference
        .iter()
        .position(|l| l.contains("bootstrapped (Joined)"))
        .expect("the reference run joins");
    // Each step: its message up to the first word with a digit or a '/'
    // (UUIDs, paths with process ids and times differ between runs), and
    // which occurrence of that text it is in the whole run (cryptsetup runs
    // the same command more than once).
    let mut steps: Vec<(String, usize)> = Vec::new();
    for (i, l) in reference.iter().enumerate().take(to).skip(from) {
        let needle = message(l)
            .split(' ')
            .take_while(|w| !w.chars().any(|c| c.is_ascii_digit() || c == '/'))
            .collect::<Vec<_>>()
            .join(" ");
        let nth = reference[..i]
            .iter()
            .filter(|l| message(l).contains(&needle))
            .count();
        steps.push((needle, nth));
    }
    let all = std::env::var("CONFBOOT_FAULTS").as_deref() == Ok("all");
    let chosen: Vec<&(String, usize)> = if all {
        steps.iter().collect()
    } else {
        SHORT
            .iter()
            .map(|k| {
                steps
                    .iter()
                    .find(|(s, _)| s.contains(k))
                    .unwrap_or_else(|| panic!("no step {k:?} in the reference run: {steps:#?}"))
            })
            .collect()
    };

    println!("| killed after | then | formats | converged in |");
    println!("|---|---|---|---|");
    for (needle, nth) in chosen {
        blank_disk();
        let t = Instant::now();
        let (first, tpm) = boot();
        let line = loop {
            let seen: Vec<String> = first
                .log()
                .into_iter()
                .filter(|l| l.contains(needle.as_str()))
                .collect();
            if let Some(line) = seen.get(*nth) {
                break line.clone();
            }
            assert!(
                t.elapsed() < std::time::Duration::from_secs(60),
                "step {needle:?} #{nth} never came:\n{}",
                first.log().join("\n")
            );
            std::thread::sleep(std::time::Duration::from_millis(2));
        };
        // SIGKILL to the bootstrapper and every helper it runs (its process
        // group): what a node's power-off does.
        let killed = std::process::Command::new("kill")
            .args(["-KILL", "--", &format!("-{}", first.id())])
            .status()
            .expect("run kill");
        assert!(killed.success(), "kill the bootstrapper's process group");
        drop(first);
        drop(tpm);
        let uuid_after_kill = n.luks_uuid();
        let recorded = first_boot_recorded(&n.p("disk.img"));
        let (second, _tpm) = boot();
        // A boot that does not end (e.g. a rejoin the service cannot
        // serve) fails here with its log instead of hanging.
        second.wait_for_line("bootstrapped (", 6000);
        let (status, log) = second.wait();
        let converged = t.elapsed();
        assert!(
            status.success(),
            "killed after {line:?}, the next boot failed:\n{}",
            log.join("\n")
        );
        // A first boot the header records as complete rejoins; any other
        // is finished as a first join (never claimed as a rejoin).
        let outcome = if recorded { "Rejoined" } else { "Joined" };
        assert!(
            log.iter()
                .any(|l| l.contains(&format!("bootstrapped ({outcome})"))),
            "killed after {line:?} (first boot recorded: {recorded}), want {outcome}:\n{}",
            log.join("\n")
        );
        let formats_second = log.iter().filter(|l| l.contains("formatting")).count();
        let uuid = n
            .luks_uuid()
            .expect("the disk is LUKS2 after the second boot");
        if let Some(before) = &uuid_after_kill {
            assert_eq!(
                before, &uuid,
                "killed after {line:?}: a formatted disk is never formatted again"
            );
            assert_eq!(
                formats_second,
                0,
                "killed after {line:?}:\n{}",
                log.join("\n")
            );
        } else {
            assert_eq!(
                formats_second,
                1,
                "killed after {line:?}:\n{}",
                log.join("\n")
            );
        }
        println!(
            "| {}{} | {outcome} | {} | {:.1} s |",
            needle.trim(),
            if *nth > 0 {
                format!(" (#{})", nth + 1)
            } else {
                String::new()
            },
            if uuid_after_kill.is_some() {
                "1 (first boot)"
            } else {
                "1 (second boot)"
            },
            converged.as_secs_f64()
        );
    }
    drop(joinsvc);
}
