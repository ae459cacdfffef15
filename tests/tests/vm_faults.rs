//! A node VM powered off at each step of its first boot: QEMU (software
//! emulation, OVMF measured boot, its swtpm) booting the project's
//! initramfs with the real static bootstrapper, real dm-crypt and ext4 in
//! the guest, the real joinsvc on the host (attested with a swtpm that
//! replays the node's own firmware event log, and marked for the cluster).
//! The plug is pulled (QEMU SIGKILLed: what the guest had not written is
//! lost, its TPM loses its volatile state) right after a step appears on
//! the serial console; the node then boots again with the same disk and
//! TPM and must end joined (rejoined only when the header already recorded
//! the first boot as complete), with its disk formatted exactly once, its
//! file system usable (the after-step mounts it and writes a marker). Last,
//! a node powered off right after it wrote data on its bootstrapped state
//! disk boots again, rejoins and reads that data back.
//!
//! The normal suite powers off at one step ([`SHORT_STEP`]);
//! `CONFBOOT_FAULTS=all` powers off after every step of an honest first
//! boot, read from a reference boot, and then after every step of a
//! rejoin, each followed by a boot that rejoins and reads the data back
//! (`CONFBOOT_FAULTS=rejoin`: the rejoin steps only; RELIABILITY.md has
//! the matrix). No Kubernetes runs: the image has no OS, so the cluster
//! step is handed over in `/run/confboot` and nothing runs it.
//!
//! Needs the musl release binaries (`cargo build --release --target
//! x86_64-unknown-linux-musl -p bootstrapper -p joinsvc -p confboot-cli`)
//! and the Debian packages boot.rs needs.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use confboot_kms::MasterSecret;
use confboot_tests::cluster::{Joinsvc, JoinsvcSetup, TempDir};
use confboot_tests::qemu::{
    EVENT_LOG_MARKER, Image, JOIN_PORT, JoinsvcTpm, NodeFiles, VM_DISK_BYTES, Vm, args_param,
    measure_image, node_args,
};
use confboot_tests::{free_port, musl_binary};
use confboot_tpm::swtpm::Swtpm;

/// Guard for a VM to reach a line (OVMF under TCG on 2 shared cores): a
/// boot takes tens of seconds; this only keeps a broken one from hanging.
const BOOT_BOUND: Duration = Duration::from_secs(420);
/// The step the normal suite powers off after: the file system was just
/// made on the freshly formatted disk (the header's first-boot record and
/// PCR 15's mark are still to come).
const SHORT_STEP: &str = "ext4 made";

/// Whether the disk's LUKS2 header records a completed first boot.
fn first_boot_recorded(disk: &Path) -> bool {
    let out = Command::new("cryptsetup")
        .args(["luksDump", "--dump-json-metadata"])
        .arg(disk)
        .output()
        .expect("run cryptsetup");
    out.status.success() && String::from_utf8_lossy(&out.stdout).contains("confboot-bootstrapped")
}

/// The bootstrapper's log lines on a console, without timestamps.
fn bootstrapper_lines(serial: &str) -> Vec<String> {
    serial
        .lines()
        .filter_map(|l| l.split_once(" bootstrapper"))
        .map(|(_, rest)| rest.trim_start_matches([':', ' ']).trim_end().to_string())
        .collect()
}

/// The steps of a boot: every line the bootstrapper logs from taking the
/// nodelock to `end`, each as its text up to the first word with a digit
/// or a '/' (UUIDs, paths, times differ between boots) and which
/// occurrence of that text it is.
fn steps_of(serial: &str, end: &str) -> Vec<(String, usize)> {
    let lines = bootstrapper_lines(serial);
    let from = lines
        .iter()
        .position(|l| l.contains("nodelock taken"))
        .expect("the reference boot takes the nodelock");
    let to = lines
        .iter()
        .position(|l| l.contains(end))
        .unwrap_or_else(|| panic!("the reference boot ends with {end:?}"));
    let mut steps = Vec::new();
    for (i, l) in lines.iter().enumerate().take(to).skip(from) {
        let needle = l
            .split(' ')
            .take_while(|w| !w.chars().any(|c| c.is_ascii_digit() || c == '/'))
            .collect::<Vec<_>>()
            .join(" ");
        let nth = lines[..i].iter().filter(|l| l.contains(&needle)).count();
        steps.push((needle, nth));
    }
    steps
}

/// The join service: its swtpm holds the node image's PCRs (the node's
/// own firmware event log replayed) and the cluster's mark, as a control
/// plane's TPM does.
struct Service {
    joinsvc: Joinsvc,
    _swtpm: Swtpm,
}

#[test]
fn a_node_vm_powered_off_at_a_first_boot_step_ends_joined_with_one_format_and_keeps_its_data() {
    let t0 = Instant::now();
    let bootstrapper = musl_binary("bootstrapper");
    let joinsvc_bin = musl_binary("joinsvc");
    let cli = musl_binary("confboot");
    let work = TempDir::new("vm-faults");
    // The image without the node agent: a node powers off by itself once
    // its bootstrapper ended.
    let image = Image::build_with("vm-faults", Some(&bootstrapper), None, "0", &[])
        .unwrap_or_else(|e| panic!("{e}"));

    let joinsvc_tpm = JoinsvcTpm::new(work.path());
    let node = NodeFiles::new(work.path(), "node");

    // One command line for every boot (PCR 9 covers it): join, then the
    // after-step reads the marker file on the state file system and writes it.
    let marker = format!("confboot-fault-marker-{:x}", std::process::id());
    let cmdline = format!(
        "{} confboot.after=read,write:{marker}",
        args_param(&node_args(None, &joinsvc_tpm.trust(), &[]))
    );
    // The node's expected measurements, predicted without booting.
    let (policy, _) = measure_image(&cli, &image, &cmdline, work.path());
    let master = MasterSecret::generate().unwrap();
    let joinsvc_port = free_port();
    let mut service: Option<Service> = None;

    let blank_disk = || {
        std::fs::File::create(&node.disk)
            .unwrap()
            .set_len(VM_DISK_BYTES)
            .unwrap();
    };
    let boot = |label: &str| {
        let mut c = node.config(&image, &cmdline);
        c.name = label.to_string();
        c.host_ports = vec![(JOIN_PORT, joinsvc_port)];
        Vm::boot(c)
    };
    // joinsvc starts once the first boot has printed its firmware event
    // log (the node retries until it answers).
    let mut ensure_service = |vm: &mut Vm| {
        if service.is_some() {
            return;
        }
        vm.wait_for_line(EVENT_LOG_MARKER.trim_end(), BOOT_BOUND);
        let log = vm.event_log();
        let swtpm = Swtpm::start_in(&joinsvc_tpm.dir).expect("swtpm starts");
        let setup = JoinsvcSetup {
            master_secret: master.clone(),
            measurement_salt: vec![0x5a; 32],
            pinned_aks: vec![node.ak.clone()],
            listen: format!("127.0.0.1:{joinsvc_port}"),
            extra: vec!["--tpm".into(), swtpm.addr().to_string()],
            real_api: None,
        };
        {
            let mut tpm = swtpm.connect().expect("connect to swtpm");
            log.extend_into(&mut tpm).expect("replay the event log");
            confboot_cluster::mark::mark_node(&mut tpm, &setup.cluster_id()).expect("mark");
        }
        service = Some(Service {
            joinsvc: Joinsvc::launch(&joinsvc_bin, &policy, setup),
            _swtpm: swtpm,
        });
    };

    // The steps: the normal suite's one, or every line the bootstrapper
    // logs between the nodelock and "bootstrapped" in a reference boot,
    // each as its text up to the first word with a digit or a '/' and
    // which occurrence of that text it is.
    let faults = std::env::var("CONFBOOT_FAULTS").unwrap_or_default();
    let all = faults == "all";
    let rejoin_steps = all || faults == "rejoin";
    let steps: Vec<(String, usize)> = if all {
        blank_disk();
        let mut vm = boot("reference");
        ensure_service(&mut vm);
        vm.wait_for_line("CONFBOOT-BOOTSTRAPPER-EXIT 0", BOOT_BOUND);
        steps_of(&vm.power_off(), "bootstrapped (Joined)")
    } else {
        vec![(SHORT_STEP.to_string(), 0)]
    };

    println!("| powered off after | then | formats | converged in |");
    println!("|---|---|---|---|");
    let last = steps.len() - 1;
    for (i, (needle, nth)) in steps.iter().enumerate() {
        blank_disk();
        let t = Instant::now();
        let mut first = boot("first-boot");
        ensure_service(&mut first);
        let line = first.wait_for_nth_line(needle, *nth, BOOT_BOUND);
        let first_serial = first.power_off();
        drop(first);
        let uuid_after = node.luks_uuid();
        let recorded = first_boot_recorded(&node.disk);

        let mut second = boot("second-boot");
        let outcome = if recorded { "Rejoined" } else { "Joined" };
        second.wait_for_line(&format!("bootstrapped ({outcome})"), BOOT_BOUND);
        second.wait_for_line(&format!("CONFBOOT-STATE-WRITTEN {marker}"), BOOT_BOUND);
        let converged = t.elapsed();
        // The last scenario's node is powered off right after it wrote its
        // marker (data written after a completed bootstrap); the others
        // shut down cleanly.
        let second_serial = if i == last {
            second.power_off()
        } else {
            assert!(second.wait_exit(BOOT_BOUND).success());
            second.serial()
        };
        drop(second);
        let report = || {
            format!(
                "powered off after {line:?}\n--- first boot ---\n{first_serial}\n--- second boot ---\n{second_serial}"
            )
        };
        assert!(
            !second_serial.contains("CONFBOOT-STATE-ERROR")
                && second_serial.contains("CONFBOOT-STATE-FS ext4 mounted"),
            "the state file system is usable\n{}",
            report()
        );
        // A disk that was LUKS2 at the power-off keeps its UUID and is
        // never formatted again; one that was not is formatted once now.
        let formats = second_serial.matches("formatting state disk").count();
        let uuid = node.luks_uuid().expect("the disk is LUKS2");
        if let Some(before) = &uuid_after {
            assert_eq!(before, &uuid, "never formatted again\n{}", report());
            assert_eq!(formats, 0, "never formatted again\n{}", report());
        } else {
            assert_eq!(formats, 1, "formatted once\n{}", report());
        }
        assert!(
            node.key_opens_disk(master.state_disk_key(&uuid).expose()),
            "the disk's key is the master secret's for its UUID"
        );
        // A file system made before the power-off is kept, never made again.
        if first_serial.contains("ext4 made") {
            assert!(
                !second_serial.contains("ext4 made"),
                "the file system is made once\n{}",
                report()
            );
        }
        println!(
            "| {}{} | {outcome} | 1 ({} boot) | {:.1} s |",
            needle.trim(),
            if *nth > 0 {
                format!(" (#{})", nth + 1)
            } else {
                String::new()
            },
            if uuid_after.is_some() {
                "first"
            } else {
                "second"
            },
            converged.as_secs_f64()
        );
    }

    // Data written after a completed bootstrap survives the power-off: the
    // node rejoins and reads its marker back.
    let t = Instant::now();
    let uuid = node.luks_uuid().unwrap();
    let mut third = boot("after-data");
    third.wait_for_line("bootstrapped (Rejoined)", BOOT_BOUND);
    let read = third.wait_for_line("CONFBOOT-STATE ", BOOT_BOUND);
    assert_eq!(
        read.trim_end(),
        format!("CONFBOOT-STATE {marker}"),
        "the marker written before the power-off is read back\n{}",
        third.failure_report()
    );
    assert!(third.wait_exit(BOOT_BOUND).success());
    let third_serial = third.serial();
    drop(third);
    assert_eq!(node.luks_uuid().unwrap(), uuid);
    assert!(!third_serial.contains("formatting state disk"));
    println!(
        "| data written, then powered off | Rejoined, data read back | 1 (earlier) | {:.1} s |",
        t.elapsed().as_secs_f64()
    );

    // The campaign: powered off at every step of a rejoin (that boot's
    // steps), the node rejoins at the next boot and reads its data back;
    // nothing is formatted or made.
    if rejoin_steps {
        for (needle, nth) in steps_of(&third_serial, "bootstrapped (Rejoined)") {
            let t = Instant::now();
            let mut cut = boot("rejoin-cut");
            let line = cut.wait_for_nth_line(&needle, nth, BOOT_BOUND);
            let cut_serial = cut.power_off();
            drop(cut);
            let mut again = boot("rejoin-again");
            again.wait_for_line("bootstrapped (Rejoined)", BOOT_BOUND);
            let read = again.wait_for_line("CONFBOOT-STATE ", BOOT_BOUND);
            let converged = t.elapsed();
            assert!(again.wait_exit(BOOT_BOUND).success());
            let again_serial = again.serial();
            drop(again);
            let report = || {
                format!(
                    "powered off during a rejoin after {line:?}\n--- cut ---\n{cut_serial}\n--- again ---\n{again_serial}"
                )
            };
            assert_eq!(
                read.trim_end(),
                format!("CONFBOOT-STATE {marker}"),
                "the data is read back\n{}",
                report()
            );
            for serial in [&cut_serial, &again_serial] {
                assert!(
                    !serial.contains("formatting state disk") && !serial.contains("ext4 made"),
                    "a rejoin formats and makes nothing\n{}",
                    report()
                );
            }
            assert_eq!(node.luks_uuid().unwrap(), uuid);
            println!(
                "| rejoin: {}{} | Rejoined, data read back | 1 (earlier) | {:.1} s |",
                needle.trim(),
                if nth > 0 {
                    format!(" (#{})", nth + 1)
                } else {
                    String::new()
                },
                converged.as_secs_f64()
            );
        }
    }
    let created = service.as_ref().map_or(0, |s| s.joinsvc.tokens().len());
    println!(
        "bootstrap tokens created: {created}; whole test {:.1} s",
        t0.elapsed().as_secs_f64()
    );
}
