//! A rolling upgrade of a confidential cluster booted as real VMs (QEMU
//! under software emulation, OVMF measured boot, one swtpm per VM, the
//! project's initramfs with the real static musl bootstrapper; on the host
//! the real `confboot` CLI and the real joinsvc), as README's "Upgrading"
//! section runs it.
//!
//! Two images, v1 and v2: the same binaries, another stamp (so another
//! initrd, another PCR 9), both carrying the same release public key
//! (made by `confboot keygen`) in their initramfs and pinned with
//! `--joinsvc-release-key` on the one command line every node boots with.
//! Each image is measured (`confboot measure --reference-values-out`) and
//! its set signed (`confboot sign`). joinsvc runs on the host, measured as
//! a v1 node, admitting the sets of a directory (`--reference-values-dir`,
//! `--release-key`, read again every second) and presenting v1's signed
//! set with its evidence. It is never restarted: the sets change under it.
//!
//! Boots (8):
//! - the fidelity boot of v1 (its event log goes into joinsvc's TPM) and
//!   node 1's first boot on v1, initialized through the CLI, in parallel;
//! - node 2's first boot on v1: it joins and writes a marker on its state
//!   disk;
//! - v2's set is copied into the directory; node 3, a fresh v2 node, joins
//!   the v1 control plane (it accepts joinsvc because joinsvc presents v1's
//!   set signed by the pinned key), and nodes 1 and 2 reboot into v2 and
//!   rejoin with their disks, reading back their markers, in parallel;
//! - v1's set is removed (retired); node 1 rebooted into v1 and node 4, a
//!   fresh v1 node, are refused, in parallel, and joinsvc's log names the
//!   set and its retirement.
//!
//! Needs the musl release binaries (`cargo build --release --target
//! x86_64-unknown-linux-musl -p bootstrapper -p joinsvc -p nodeagent -p
//! confboot-cli`; scripts/test.sh does) and the Debian packages boot.rs
//! needs.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use confboot_tests::admin::{AGENT_LISTENING, AdminFiles, admin_cli};
use confboot_tests::cluster::{JoinsvcSetup, TempDir, read_master_secret};
use confboot_tests::qemu::{
    BASE_CMDLINE, Image, JOIN_PORT, JoinsvcTpm, NODEAGENT_BUILTIN, NodeFiles, Vm, VmConfig,
    args_param, golden_boot, node_args,
};
use confboot_tests::{ChildProcess, free_port, musl_binary};

/// Bound for a VM to reach a line (OVMF under TCG, 2 shared cores, up to
/// three VMs at once).
const BOOT_BOUND: Duration = Duration::from_secs(420);
/// Bound for the steps after the bootstrap (exit, after-step, node agent).
const EXIT_BOUND: Duration = Duration::from_secs(60);
/// joinsvc's log, polled every 10 ms: at most 30 s for a reread of the
/// set directory (every second) to show.
const RELOAD_TRIES: u32 = 3000;
/// The init secret the admin holds.
const INIT_SECRET: &str = "correct horse battery staple";
/// Where both images carry the release public key (a file of the
/// initramfs, so PCR 9 covers it).
const RELEASE_KEY_IN_IMAGE: &str = "/etc/confboot/release.pem.pub";
/// The images' name in their reference-value sets.
const SET_NAME: &str = "confboot-node";

fn secs(d: Duration) -> String {
    format!("{:.1} s", d.as_secs_f64())
}

/// Runs the `confboot` CLI with `args`; panics unless it succeeds.
/// Returns what it printed.
fn run_cli(cli: &Path, args: &[&std::ffi::OsStr]) -> String {
    let out = Command::new(cli).args(args).output().expect("run confboot");
    let shown = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "confboot {args:?}: {shown}");
    shown
}

/// `confboot measure` of `image` booted with `cmdline` (after
/// [`BASE_CMDLINE`]) into `dir`: `measurements.json`,
/// `measurements.events.json` and the unsigned set `node-VERSION.corim`
/// ([`SET_NAME`], `version`); then `confboot sign` with `release_key` into
/// `node-VERSION.signed.corim`, checked by `confboot
/// check-reference-values` against `release_pub`. Returns the signed set's
/// path.
fn measure_and_sign(
    cli: &Path,
    image: &Image,
    cmdline: &str,
    dir: &Path,
    version: &str,
    release_key: &Path,
    release_pub: &Path,
) -> PathBuf {
    std::fs::create_dir_all(dir).unwrap();
    let unsigned = dir.join(format!("node-{version}.corim"));
    let signed = dir.join(format!("node-{version}.signed.corim"));
    let cmdline = format!("{BASE_CMDLINE} {cmdline}");
    let (policy, events) = (
        dir.join("measurements.json"),
        dir.join("measurements.events.json"),
    );
    let measured = run_cli(
        cli,
        &[
            "measure".as_ref(),
            "--kernel".as_ref(),
            image.kernel.as_os_str(),
            "--initrd".as_ref(),
            image.initrd.as_os_str(),
            "--cmdline".as_ref(),
            cmdline.as_ref(),
            "--policy-out".as_ref(),
            policy.as_os_str(),
            "--events-out".as_ref(),
            events.as_os_str(),
            "--reference-values-out".as_ref(),
            unsigned.as_os_str(),
            "--name".as_ref(),
            SET_NAME.as_ref(),
            "--version".as_ref(),
            version.as_ref(),
        ],
    );
    println!("confboot measure (v{version}): {}", measured.trim_end());
    let signing = run_cli(
        cli,
        &[
            "sign".as_ref(),
            "--key".as_ref(),
            release_key.as_os_str(),
            "--in".as_ref(),
            unsigned.as_os_str(),
            "--out".as_ref(),
            signed.as_os_str(),
        ],
    );
    println!("confboot sign (v{version}): {}", signing.trim_end());
    let checked = run_cli(
        cli,
        &[
            "check-reference-values".as_ref(),
            "--in".as_ref(),
            signed.as_os_str(),
            "--release-key".as_ref(),
            release_pub.as_os_str(),
        ],
    );
    println!(
        "confboot check-reference-values (v{version}): {}",
        checked.trim_end()
    );
    signed
}

/// Copies `from` into the set directory `dir` as `file`, the way a
/// deployment does: written aside, then renamed in.
fn copy_into(dir: &Path, file: &str, from: &Path) {
    let aside = dir.join(format!(".{file}.tmp"));
    std::fs::copy(from, &aside).unwrap();
    std::fs::rename(&aside, dir.join(file)).unwrap();
}

/// Waits (at most [`BOOT_BOUND`]) for a console line containing `want`;
/// panics with the console as soon as a line containing one of `fail`
/// shows first.
fn wait_unless(vm: &mut Vm, want: &str, fail: &[&str]) {
    let deadline = Instant::now() + BOOT_BOUND;
    while Instant::now() < deadline {
        let serial = vm.serial();
        if let Some(line) = serial.lines().find(|l| fail.iter().any(|f| l.contains(f))) {
            panic!("before {want:?}: {line}\n{}", vm.failure_report());
        }
        if serial.contains(want) {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    vm.wait_for_line(want, EXIT_BOUND);
}

/// Boots `config` (which reaches joinsvc), waits for `bootstrapped
/// (<outcome>)`, the bootstrapper's exit 0, the after-step's write and the
/// node agent, then powers it off; returns the console. Runs on its own
/// thread's VM (dropped there).
fn bootstrap_boot(config: VmConfig, outcome: &str) -> String {
    let name = config.name.clone();
    let mut vm = Vm::boot(config);
    // A node that distrusts joinsvc, or that joinsvc refuses, retries
    // until its bound: fail at once instead.
    wait_unless(
        &mut vm,
        "ticket received",
        &["not trusting the join service", "refused this node"],
    );
    vm.wait_for_line(&format!("bootstrapped ({outcome})"), BOOT_BOUND);
    vm.wait_for_line("CONFBOOT-BOOTSTRAPPER-EXIT 0", EXIT_BOUND);
    vm.wait_for_line("CONFBOOT-STATE-WRITTEN", EXIT_BOUND);
    vm.wait_for_line(AGENT_LISTENING, EXIT_BOUND);
    let serial = vm.power_off();
    assert!(
        !serial.contains("CONFBOOT-STATE-ERROR"),
        "the after-step failed\n{}",
        vm.failure_report()
    );
    println!("[{name}] {outcome} after {}", secs(vm.elapsed()));
    serial
}

/// Boots `config` (which reaches joinsvc) and waits until the join service
/// refuses it; returns the console. The VM is killed on its own thread.
fn refused_boot(config: VmConfig) -> String {
    let name = config.name.clone();
    let mut vm = Vm::boot(config);
    wait_unless(
        &mut vm,
        "refused this node",
        &["ticket received", "not trusting the join service"],
    );
    println!("[{name}] refused after {}", secs(vm.elapsed()));
    vm.power_off()
}

/// Prints what a guest's bootstrapper said about its join service, its
/// ticket, its disk and its marker.
fn print_guest_lines(name: &str, serial: &str) {
    for line in serial.lines().filter(|l| {
        [
            "join service runs",
            "join:",
            "ticket received",
            "state disk",
            "state file system",
            "node marked",
            "bootstrapped (",
            "CONFBOOT-STATE",
        ]
        .iter()
        .any(|k| l.contains(k))
    }) {
        println!("    [{name}] {}", line.trim());
    }
}

/// The marker line the after-step prints when it reads `marker` back.
fn reads_marker(serial: &str, marker: &str) -> bool {
    serial
        .lines()
        .any(|l| l.trim_end() == format!("CONFBOOT-STATE {marker}"))
}

/// The value of the metric `series` (name and labels) in a Prometheus
/// text exposition; 0 when it is not there.
fn metric(metrics: &str, series: &str) -> u64 {
    metrics
        .lines()
        .filter_map(|l| l.strip_prefix(series))
        .filter_map(|v| v.trim().parse::<u64>().ok())
        .sum()
}

/// Waits (at most [`RELOAD_TRIES`] × 10 ms) until `at_least` lines of
/// `process`'s log contain `needle`; returns the log, or panics with it.
fn wait_for_lines(process: &ChildProcess, needle: &str, at_least: usize) -> Vec<String> {
    for _ in 0..RELOAD_TRIES {
        let log = process.log();
        if log.iter().filter(|l| l.contains(needle)).count() >= at_least {
            return log;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    panic!(
        "fewer than {at_least} lines with {needle:?}:\n{}",
        process.log().join("\n")
    );
}

#[test]
fn vm_rolling_upgrade_v1_to_v2_with_signed_reference_values() {
    let t0 = Instant::now();
    let bootstrapper = musl_binary("bootstrapper");
    let joinsvc_bin = musl_binary("joinsvc");
    let cli = musl_binary("confboot");
    let nodeagent = Path::new(NODEAGENT_BUILTIN);
    let work = TempDir::new("vm-upgrade");
    let joinsvc_tpm = JoinsvcTpm::new(work.path());

    // The release key, made offline by the release team: its public key
    // goes into both images.
    let release = work.path().join("release");
    std::fs::create_dir_all(&release).unwrap();
    let (release_key, release_pub) = (release.join("release.pem"), release.join("release.pem.pub"));
    let made = run_cli(
        &cli,
        &["keygen".as_ref(), "--out".as_ref(), release_key.as_os_str()],
    );
    println!("confboot keygen: {}", made.trim_end());
    assert!(release_pub.exists(), "keygen writes KEY.pem.pub");

    // v1 and v2: one stamp apart, the same files otherwise.
    let t = Instant::now();
    let add = [(release_pub.as_path(), RELEASE_KEY_IN_IMAGE)];
    let build = |label: &str, stamp: &str| {
        Image::build_with(label, Some(&bootstrapper), Some(nodeagent), stamp, &add)
            .unwrap_or_else(|e| panic!("{e}"))
    };
    let v1 = build("vm-upgrade-v1", "1");
    let v2 = build("vm-upgrade-v2", "2");
    assert_ne!(
        std::fs::read(&v1.initrd).unwrap(),
        std::fs::read(&v2.initrd).unwrap()
    );
    println!("phase images: {}", secs(t.elapsed()));

    let files = AdminFiles::new(work.path(), INIT_SECRET);
    let admin = files.dir.clone();
    let n1 = NodeFiles::new(work.path(), "node1");
    let n2 = NodeFiles::new(work.path(), "node2");
    let n3 = NodeFiles::new(work.path(), "node3-v2");
    let n4 = NodeFiles::new(work.path(), "node4-v1");

    // One command line for every node and both images: the release key is
    // pinned by its path in the image, so PCR 9 differs only by the initrd.
    let marker = format!("confboot-upgrade-marker-{:x}", std::process::id());
    let node_args = node_args(
        Some(&files.init_secret_hash),
        &joinsvc_tpm.trust(),
        &["--joinsvc-release-key", RELEASE_KEY_IN_IMAGE],
    );
    let cmdline = format!(
        "{} confboot.after=read,write:{marker}",
        args_param(&node_args)
    );

    // Each image measured and its set signed; the admin's directory holds
    // v1's policy, which `confboot init` checks node 1 against.
    let v1_signed = measure_and_sign(
        &cli,
        &v1,
        &cmdline,
        &admin,
        "1.0.0",
        &release_key,
        &release_pub,
    );
    let v2_signed = measure_and_sign(
        &cli,
        &v2,
        &cmdline,
        &work.path().join("v2"),
        "2.0.0",
        &release_key,
        &release_pub,
    );
    let predicted = confboot_attest::MeasurementPolicy::from_json(
        &std::fs::read_to_string(admin.join("measurements.json")).unwrap(),
    )
    .unwrap();

    // (a) In parallel: the fidelity boot of v1 (its event log goes into
    // joinsvc's TPM), and node 1 on v1, initialized through the CLI; it
    // writes its marker.
    let t = Instant::now();
    let (measured, serial1) = std::thread::scope(|s| {
        let golden = s.spawn(|| golden_boot(&v1.kernel, &v1.initrd, &cmdline));
        let init = s.spawn(|| {
            let init_fwd = free_port();
            let mut c = n1.config(&v1, &cmdline);
            c.host_forwards = vec![(init_fwd, 9000)];
            let mut vm = Vm::boot(c);
            vm.wait_for_line("init API listening on", BOOT_BOUND);
            let out = admin_cli(
                &cli,
                &admin,
                "init",
                init_fwd,
                "measurements.json",
                &n1.ak,
                &["--init-secret-file", "init-secret"],
            );
            assert!(
                out.status.success(),
                "confboot init: {}{}\n{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr),
                vm.failure_report()
            );
            vm.wait_for_line("bootstrapped (Initialized)", BOOT_BOUND);
            vm.wait_for_line("CONFBOOT-BOOTSTRAPPER-EXIT 0", EXIT_BOUND);
            vm.wait_for_line("CONFBOOT-STATE-WRITTEN", EXIT_BOUND);
            vm.wait_for_line(AGENT_LISTENING, EXIT_BOUND);
            vm.power_off()
        });
        (golden.join().unwrap(), init.join().unwrap())
    });
    for (pcr, want) in predicted.entries() {
        assert_eq!(
            measured.pcrs[pcr], want.value,
            "PCR {pcr}: v1's boot differs from confboot measure's prediction"
        );
    }
    assert!(
        serial1.contains("init handed over in /run/confboot"),
        "{serial1}"
    );
    println!(
        "phase (a) v1's fidelity boot and node 1 initialized on v1 (2 VMs in parallel): {}",
        secs(t.elapsed())
    );
    print_guest_lines("node1", &serial1);
    let master = read_master_secret(&admin.join("confboot-mastersecret.json"));
    let cluster: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(admin.join("confboot-cluster.json")).unwrap(),
    )
    .unwrap();
    let salt = confboot_util::hex::decode(cluster["measurementSalt"].as_str().unwrap()).unwrap();
    let uuid1 = n1.luks_uuid().expect("node 1's disk is LUKS2");

    // joinsvc, measured as a v1 node, admits the sets of its directory
    // (v1's only, for now) and presents v1's signed set.
    let sets = work.path().join("sets");
    std::fs::create_dir_all(&sets).unwrap();
    copy_into(&sets, "node-1.0.0.signed.corim", &v1_signed);
    let joinsvc_port = free_port();
    let setup = JoinsvcSetup {
        master_secret: master.clone(),
        measurement_salt: salt,
        pinned_aks: [&n1, &n2, &n3, &n4].map(|n| n.ak.clone()).to_vec(),
        listen: format!("127.0.0.1:{joinsvc_port}"),
        extra: vec![
            "--reference-values-dir".to_string(),
            sets.display().to_string(),
            "--release-key".to_string(),
            release_pub.display().to_string(),
            "--reference-values-reload".to_string(),
            "1".to_string(),
            "--present-reference-values".to_string(),
            v1_signed.display().to_string(),
        ],
        real_api: None,
    };
    let (joinsvc, _joinsvc_swtpm) = measured.joinsvc_as_node(
        &joinsvc_bin,
        &predicted,
        setup,
        &joinsvc_tpm,
        &admin.join("measurements.events.json"),
    );
    joinsvc.process.wait_for_line(
        &format!("reference-value set {SET_NAME} 1.0.0 accepted"),
        RELOAD_TRIES,
    );
    joinsvc.process.wait_for_line(
        &format!("presenting reference-value set {SET_NAME} 1.0.0"),
        RELOAD_TRIES,
    );
    let to_joinsvc = |n: &NodeFiles, image: &Image| {
        let mut c = n.config(image, &cmdline);
        c.host_ports = vec![(JOIN_PORT, joinsvc_port)];
        c
    };

    // (b) Node 2 joins on v1 (joinsvc runs its own image) and writes its
    // marker.
    let t = Instant::now();
    let c2 = to_joinsvc(&n2, &v1);
    let serial2 = bootstrap_boot(c2, "Joined");
    println!("phase (b) node 2 joins on v1: {}", secs(t.elapsed()));
    print_guest_lines("node2", &serial2);
    assert!(
        serial2.contains("join handed over in /run/confboot"),
        "{serial2}"
    );
    assert!(
        serial2.contains(&format!("CONFBOOT-STATE-WRITTEN {marker}")),
        "{serial2}"
    );
    assert!(
        !serial2.contains("signed by a pinned release key"),
        "a v1 node takes the v1 join service as its own image\n{serial2}"
    );
    let uuid2 = n2.luks_uuid().expect("node 2's disk is LUKS2");

    // (c) v2's set is copied into the directory; joinsvc is not restarted.
    copy_into(&sets, "node-2.0.0.signed.corim", &v2_signed);
    joinsvc.process.wait_for_line(
        &format!("reference-value set {SET_NAME} 2.0.0 accepted"),
        RELOAD_TRIES,
    );
    // In parallel: node 3, a fresh v2 node, joins the v1 control plane;
    // nodes 1 and 2 reboot into v2 and rejoin with their disks.
    let t = Instant::now();
    let (c3, c1, c2) = (
        to_joinsvc(&n3, &v2),
        to_joinsvc(&n1, &v2),
        to_joinsvc(&n2, &v2),
    );
    let (serial3, serial1, serial2) = std::thread::scope(|s| {
        let h3 = s.spawn(|| bootstrap_boot(c3, "Joined"));
        let h1 = s.spawn(|| bootstrap_boot(c1, "Rejoined"));
        let h2 = s.spawn(|| bootstrap_boot(c2, "Rejoined"));
        (h3.join().unwrap(), h1.join().unwrap(), h2.join().unwrap())
    });
    println!(
        "phase (c) v2's set added; node 3 joins on v2, nodes 1 and 2 rejoin on v2 (3 VMs in parallel): {}",
        secs(t.elapsed())
    );
    print_guest_lines("node3-v2", &serial3);
    print_guest_lines("node1-v2", &serial1);
    print_guest_lines("node2-v2", &serial2);
    let runs_v1 = format!("the join service runs {SET_NAME} 1.0.0, signed by a pinned release key");
    for (name, serial) in [
        ("node3", &serial3),
        ("node1", &serial1),
        ("node2", &serial2),
    ] {
        assert!(
            serial.contains(&runs_v1),
            "[{name}] a v2 node accepts the v1 join service by the set it presents\n{serial}"
        );
    }
    assert!(
        serial3.contains("join handed over in /run/confboot"),
        "{serial3}"
    );
    for (n, serial, uuid) in [(&n1, &serial1, &uuid1), (&n2, &serial2, &uuid2)] {
        assert!(
            reads_marker(serial, &marker),
            "[{}] the node reads back on v2 the marker it wrote on v1\n{serial}",
            n.name
        );
        assert_eq!(
            n.luks_uuid().as_ref(),
            Some(uuid),
            "[{}] a rejoin never reformats",
            n.name
        );
        assert!(
            serial.contains(&format!("state disk {uuid} opened")) && !serial.contains("ext4 made"),
            "[{}] the rejoin opens the existing disk and keeps its file system\n{serial}",
            n.name
        );
        assert!(
            !serial.contains("handed over in /run/confboot"),
            "[{}] a rejoin does not hand the cluster step over again\n{serial}",
            n.name
        );
    }
    // Every attested connection of a node counts (its ticket and its
    // generation's confirmation), so at least one per node and set.
    let (_, metrics) = joinsvc.http_get("/metrics");
    for (version, at_least) in [("1.0.0", 1), ("2.0.0", 3)] {
        let admitted = metric(
            &metrics,
            &format!(
                "joinsvc_set_admissions_total{{status=\"affirming\",set=\"{SET_NAME} {version}\"}}"
            ),
        );
        assert!(
            admitted >= at_least,
            "{SET_NAME} {version} admitted {admitted} times, want at least {at_least}\n{metrics}"
        );
    }
    assert_eq!(
        metric(&metrics, "joinsvc_tickets_issued_total{kind=\"rejoin\"}"),
        2,
        "{metrics}"
    );

    // (d) v1 is retired: its file removed. Node 1 rebooted into v1 (a
    // downgrade) and node 4, a fresh v1 node, are refused, in parallel;
    // joinsvc's log names the set and its retirement.
    std::fs::remove_file(sets.join("node-1.0.0.signed.corim")).unwrap();
    joinsvc.process.wait_for_line(
        &format!("reference-value set {SET_NAME} 1.0.0 retired"),
        RELOAD_TRIES,
    );
    let t = Instant::now();
    let (c1, c4) = (to_joinsvc(&n1, &v1), to_joinsvc(&n4, &v1));
    let (serial1, serial4) = std::thread::scope(|s| {
        let h1 = s.spawn(|| refused_boot(c1));
        let h4 = s.spawn(|| refused_boot(c4));
        (h1.join().unwrap(), h4.join().unwrap())
    });
    println!(
        "phase (d) v1's set retired; node 1 on v1 and a fresh v1 node refused (2 VMs in parallel): {}",
        secs(t.elapsed())
    );
    print_guest_lines("node1-v1", &serial1);
    print_guest_lines("node4-v1", &serial4);
    let retired = format!("match only the reference-value set {SET_NAME} 1.0.0, retired at");
    // Both refusals, as joinsvc's log is read (its reader may lag behind
    // the nodes' consoles).
    let log = wait_for_lines(&joinsvc.process, &retired, 2);
    let refusals: Vec<&String> = log.iter().filter(|l| l.contains(&retired)).collect();
    for l in &refusals {
        println!("joinsvc: {}", l.trim());
    }
    assert!(
        refusals.iter().all(|l| l.contains("its file was removed")),
        "joinsvc says why the set was retired\n{}",
        log.join("\n")
    );
    for (name, serial) in [("node1-v1", &serial1), ("node4-v1", &serial4)] {
        assert!(
            !serial.contains("bootstrapped ("),
            "[{name}] a refused node is not bootstrapped\n{serial}"
        );
    }
    assert!(!serial4.contains("nodelock taken"), "{serial4}");
    assert!(
        n4.luks_uuid().is_none(),
        "the fresh v1 node's disk stays blank"
    );
    assert_eq!(n1.luks_uuid(), Some(uuid1), "node 1's disk is untouched");
    let (_, metrics) = joinsvc.http_get("/metrics");
    let refused: Vec<&str> = metrics
        .lines()
        .filter(|l| l.starts_with("joinsvc_tickets_refused_total"))
        .collect();
    println!("joinsvc refusals: {}", refused.join(" | "));
    drop(joinsvc);
    println!("whole test: {}", secs(t0.elapsed()));
}
