//! A confidential cluster booted as real VMs: QEMU (software emulation),
//! OVMF measured boot, one swtpm per VM, the project's initramfs with the
//! real (static musl) bootstrapper, real dm-crypt in the guest; on the host
//! the real `confboot` CLI and the real joinsvc. The network is loopback
//! only: guests reach joinsvc at 10.0.2.100:9090 (guestfwd) and the host
//! reaches a guest's init and recovery APIs through 127.0.0.1 hostfwds.
//!
//! No Kubernetes runs: the image has no OS, so each node's cluster step
//! (the kubeadm init or join with what Init or the ticket gave) is handed
//! over in `/run/confboot` and nothing runs it; `vm_kubernetes.rs` runs the
//! real `kubeadm join` in a node's OS. The test image also carries a real SSH server (Debian's dropbear, started
//! by `initramfs/test/after-bootstrap`): the host's real `ssh` logs in to
//! the first node as the SSH user its Init created, before and after that
//! node's reboot, and a key that was not configured is refused.
//!
//! The expected measurements come from `confboot measure` (no boot); one
//! boot checks them (and gives the firmware's event log). Boots (8): that
//! fidelity boot of the one command line every node boots with, the first node (init through the CLI), two joining nodes and a tampered
//! node in parallel, the first node's and one joined node's reboots
//! (rejoins, in parallel), and another's reboot without a join service
//! (recovery through `confboot recover`, after the host's own Recover,
//! with its master secret and no init secret, is refused).
//!
//! Needs the musl release binaries (`cargo build --release --target
//! x86_64-unknown-linux-musl -p bootstrapper -p joinsvc -p nodeagent -p confboot-cli`;
//! scripts/test.sh does) and the Debian packages boot.rs needs.

use std::path::Path;
use std::time::{Duration, Instant};

use confboot_proto::DEFAULT_VERIFY_PORT;
use confboot_tests::admin::{
    AGENT_LISTENING, AdminFiles, SSH_PORT, admin_cli, assert_ssh_login, refused, ssh_run,
    verify_node,
};
use confboot_tests::cluster::{JoinsvcSetup, TempDir, read_master_secret};
use confboot_tests::qemu::{
    Image, JOIN_PORT, JoinsvcTpm, NODEAGENT_BUILTIN, NodeFiles, PeakRss, Vm, VmConfig, args_param,
    golden_boot, measure_image, node_args,
};
use confboot_tests::{free_port, musl_binary};

/// Bound for a VM to reach a line (OVMF under TCG, 2 shared cores, up to
/// three VMs at once).
const BOOT_BOUND: Duration = Duration::from_secs(420);
/// Bound for QEMU to exit after the bootstrapper's exit line.
const EXIT_BOUND: Duration = Duration::from_secs(60);
/// The init secret the admin holds.
const INIT_SECRET: &str = "correct horse battery staple";

fn secs(d: Duration) -> String {
    format!("{:.1} s", d.as_secs_f64())
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

/// What one bootstrapping boot reports.
struct BootReport {
    serial: String,
    /// QEMU start → `bootstrapped (...)` on the console (host clock).
    to_bootstrapped: Duration,
    /// `CONFBOOT-BOOTSTRAPPER-START` → `ticket received` (host clock), for joins.
    start_to_ticket: Option<Duration>,
    /// The bootstrapper's own `bootstrapped (...) in X s` line.
    bootstrapped_line: String,
    peak: PeakRss,
}

/// Boots `config`, waits for `bootstrapped (<outcome>)`, the bootstrapper's
/// exit 0 and its node agent's verify service, then powers it off (the
/// state disk is closed by then). Runs on its own thread's VM (dropped
/// there).
fn bootstrap_boot(
    config: VmConfig,
    outcome: &str,
    ticket: bool,
    extra_wait: &[&str],
) -> BootReport {
    let mut vm = Vm::boot(config);
    vm.wait_for_line("CONFBOOT-BOOTSTRAPPER-START", BOOT_BOUND);
    let t_start = vm.elapsed();
    let start_to_ticket = ticket.then(|| {
        vm.wait_for_line("ticket received", BOOT_BOUND);
        vm.elapsed() - t_start
    });
    let line = vm.wait_for_line(&format!("bootstrapped ({outcome})"), BOOT_BOUND);
    let to_bootstrapped = vm.elapsed();
    vm.wait_for_line("CONFBOOT-BOOTSTRAPPER-EXIT 0", EXIT_BOUND);
    for l in extra_wait {
        vm.wait_for_line(l, EXIT_BOUND);
    }
    vm.wait_for_line(AGENT_LISTENING, EXIT_BOUND);
    vm.power_off();
    let serial = vm.serial();
    assert!(
        !serial.contains("CONFBOOT-STATE-ERROR"),
        "the after-step failed\n{}",
        vm.failure_report()
    );
    BootReport {
        serial,
        to_bootstrapped,
        start_to_ticket,
        bootstrapped_line: line,
        peak: vm.peak_rss(),
    }
}

fn print_boot(name: &str, r: &BootReport) {
    println!(
        "[{name}] boot → bootstrapped {}; bootstrapper start → ticket {}; guest: {:?}; peak RSS qemu {} KiB, swtpm {} KiB",
        secs(r.to_bootstrapped),
        r.start_to_ticket.map(secs).unwrap_or_else(|| "-".into()),
        r.bootstrapped_line
            .split_once("bootstrapped")
            .map(|(_, b)| format!("bootstrapped{b}"))
            .unwrap_or_default(),
        r.peak.qemu_kib,
        r.peak.swtpm_kib
    );
    print_guest_lines(name, &r.serial);
}

/// What happened in a guest, as its bootstrapper and /init logged it (the
/// DHCP lease, the peak RSS of PID 1 and of the bootstrapper's tree).
fn print_guest_lines(name: &str, serial: &str) {
    for line in serial.lines().filter(|l| {
        [
            "attest",
            "ticket received",
            "nodelock taken",
            "state disk",
            "state file system",
            "node marked",
            "CONFBOOT-STATE",
            "SSH users",
            "CONFBOOT-SSHD",
            "auth succeeded",
            "CONFBOOT-NET",
            "CONFBOOT-RSS",
        ]
        .iter()
        .any(|k| l.contains(k))
    }) {
        println!("    [{name}] {}", line.trim());
    }
}

/// Boots `node` with host forwards to its `guest_port`, to its verify
/// service and to its SSH server, and waits until its bootstrapper says
/// `"<api> listening on"`; returns the VM and the three host ports.
fn boot_serving(
    node: &NodeFiles,
    image: &Image,
    cmdline: &str,
    guest_port: u16,
    api: &str,
) -> (Vm, u16, u16, u16) {
    let (host_port, verify_port, ssh_port) = (free_port(), free_port(), free_port());
    let mut config = node.config(image, cmdline);
    config.host_forwards = vec![
        (host_port, guest_port),
        (verify_port, DEFAULT_VERIFY_PORT),
        (ssh_port, SSH_PORT),
    ];
    let mut vm = Vm::boot(config);
    vm.wait_for_line(&format!("{api} listening on"), BOOT_BOUND);
    (vm, host_port, verify_port, ssh_port)
}

#[test]
fn vm_cluster_init_join_refuse_rejoin_and_recover() {
    let t0 = Instant::now();
    let bootstrapper = musl_binary("bootstrapper");
    let joinsvc_bin = musl_binary("joinsvc");
    let cli = musl_binary("confboot");
    // As in production: the node agent is the bootstrapper by that name.
    let nodeagent = Path::new(NODEAGENT_BUILTIN);
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");

    let work = TempDir::new("vm-cluster");

    // joinsvc runs on the host with a swtpm of its own, measured as a node
    // of the image would be: the golden boot's event log is replayed into
    // it (below). Nodes check it as they check any join service, with the
    // defaults: its PCRs equal their own (PCR 15 and IMA's PCR 10 aside), its AK is one
    // they trust (pinned on the command line: read here, before any boot),
    // and its PCR 15 holds the mark of the ticket's cluster.
    let joinsvc_tpm = JoinsvcTpm::new(work.path());

    // The test image and a tampered one that
    // differs by one byte (/etc/confboot-stamp): same padded size, so PCR 4
    // stays and PCR 9 (the initrd) differs.
    let t = Instant::now();
    let after_bootstrap = repo.join("initramfs/test/after-bootstrap");
    let add = [(after_bootstrap.as_path(), "/test/after-bootstrap")];
    let sshd = [
        (Path::new("/usr/sbin/dropbear"), "/usr/sbin/dropbear"),
        (Path::new("/usr/bin/dropbearkey"), "/usr/bin/dropbearkey"),
    ];
    for (program, _) in sshd {
        assert!(
            program.exists(),
            "{} is missing (Debian dropbear-bin; scripts/setup.sh installs it)",
            program.display()
        );
    }
    let image = Image::build_with_dynamic(
        "vm-cluster",
        Some(&bootstrapper),
        Some(nodeagent),
        "0",
        &add,
        &sshd,
    )
    .unwrap_or_else(|e| panic!("{e}"));
    println!("{}", image.build_log.trim_end());
    let tampered = Image::build_with_dynamic(
        "vm-cluster-tampered",
        Some(&bootstrapper),
        Some(nodeagent),
        "1",
        &add,
        &sshd,
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let (len, len_t) = (
        std::fs::metadata(&image.initrd).unwrap().len(),
        std::fs::metadata(&tampered.initrd).unwrap().len(),
    );
    assert_eq!(len, len_t, "the tampered image keeps the padded size");
    assert_ne!(
        std::fs::read(&image.initrd).unwrap(),
        std::fs::read(&tampered.initrd).unwrap()
    );
    println!(
        "phase images: {} (initrd {len} bytes padded)",
        secs(t.elapsed())
    );

    // The admin: the init secret, the SSH user alice (her key made by the
    // host's ssh-keygen) and a key configured nowhere.
    let files = AdminFiles::new(work.path(), INIT_SECRET);
    let admin = files.dir.clone();
    let hash = files.init_secret_hash.clone();
    let (alice_key, stranger_key) = (files.alice_key.clone(), files.stranger_key.clone());
    let alice_pub = files.alice_pub.clone();

    // Each node's TPM and disk, with its AK read before its first boot.
    let t = Instant::now();
    let n1 = NodeFiles::new(work.path(), "node1");
    let n2 = NodeFiles::new(work.path(), "node2");
    let n3 = NodeFiles::new(work.path(), "node3");
    let bad = NodeFiles::new(work.path(), "tampered");
    for n in [&n1, &n2, &n3, &bad] {
        assert!(!n.ak.is_empty());
    }
    assert_ne!(n2.ak, n3.ak, "each TPM has its own AK");
    println!("phase TPMs and AKs: {}", secs(t.elapsed()));

    // One command line for every node, as in a real cluster: each races
    // the admin's Init against a join service, and whichever answers first
    // decides (node 1 has no join service to reach). PCR 9 covers the
    // command line, so it is the same on reboots too: the after-step reads
    // the marker file on the state disk's ext4, then writes it. The marker
    // is not in the raw disk image afterwards (dm-crypt).
    let marker = format!("confboot-marker-{:x}", std::process::id());
    let node_args = node_args(Some(&hash), &joinsvc_tpm.trust(), &[]);
    let after = format!("confboot.after=read,write:{marker}");
    let node_cmdline = format!("{} {after}", args_param(&node_args));
    // The tampered node is the attacker's: it takes any join service.
    let mut tampered_args = node_args.clone();
    tampered_args.push("--insecure-any-join-service".to_string());
    let tampered_cmdline = format!("{} {after}", args_param(&tampered_args));

    // The expected measurements, predicted by `confboot measure` from the
    // image and the command line without booting: the policy the admin
    // and joinsvc check nodes against, and the predicted event log.
    let (predicted, printed) = measure_image(&cli, &image, &node_cmdline, &admin);
    println!("{}", printed.trim_end());

    // One boot of the image with that command line, as the fidelity check:
    // its PCRs are the predicted ones (golden_boot checks), and its event
    // log (checked to replay to them) goes into joinsvc's TPM below.
    let t = Instant::now();
    let measured = golden_boot(&image.kernel, &image.initrd, &node_cmdline);
    for (pcr, want) in predicted.entries() {
        assert_eq!(
            measured.pcrs[pcr], want.value,
            "PCR {pcr}: the boot differs from confboot measure's prediction"
        );
    }
    println!(
        "phase fidelity boot (prediction = booted PCRs, {} events logged): {}",
        measured.event_log.events().len(),
        secs(t.elapsed())
    );

    // (a) Init: node 1's init API through a host forward, the CLI verifies
    // its attestation (the predicted measurements, pinned AK) and inits it.
    let t = Instant::now();
    let (mut vm1, init_fwd, verify1_fwd, ssh1_fwd) =
        boot_serving(&n1, &image, &node_cmdline, 9000, "init API");
    let cli_out = files.init(&cli, init_fwd, &n1.ak);
    let cli_stdout = String::from_utf8_lossy(&cli_out.stdout).into_owned();
    let cli_stderr = String::from_utf8_lossy(&cli_out.stderr).into_owned();
    if !cli_out.status.success() {
        panic!(
            "confboot init failed ({}):\n{cli_stdout}\n{cli_stderr}\n{}",
            cli_out.status,
            vm1.failure_report()
        );
    }
    println!("confboot init: {}", cli_stdout.trim_end());
    assert!(
        cli_stdout.contains("cluster initialized"),
        "{cli_stdout}\n{cli_stderr}"
    );
    let init_line = vm1.wait_for_line("bootstrapped (Initialized)", BOOT_BOUND);
    let init_to_bootstrapped = vm1.elapsed();
    vm1.wait_for_line("CONFBOOT-BOOTSTRAPPER-EXIT 0", EXIT_BOUND);
    // The bootstrapped node runs its node agent: the admin verifies it at
    // any time against the predicted policy, its AK and the cluster id of
    // the cluster file `confboot init` wrote.
    vm1.wait_for_line(AGENT_LISTENING, EXIT_BOUND);
    let t_verify = Instant::now();
    let (code, shown) = verify_node(
        &cli,
        &admin,
        verify1_fwd,
        "measurements.json",
        "measurements.events.json",
        &n1.ak,
    );
    println!(
        "confboot verify node 1 ({}):\n{}",
        secs(t_verify.elapsed()),
        shown.trim_end()
    );
    assert_eq!(code, Some(0), "{shown}\n{}", vm1.failure_report());
    assert!(
        shown.contains("its event log replays to the quote")
            && shown.contains("verified: every enforced PCR matches"),
        "{shown}"
    );
    // The SSH user Init created: the host's ssh logs in with its key; a key
    // that was not configured is refused.
    assert!(
        cli_stdout.contains("node: SSH users: created [alice], unchanged []"),
        "{cli_stdout}"
    );
    let login = assert_ssh_login(&vm1, ssh1_fwd, &alice_key, "alice");
    let (code, _, stderr) = ssh_run(ssh1_fwd, &stranger_key, "alice", "id -un");
    assert_eq!(code, Some(255), "a key that was not configured: {stderr}");
    assert!(stderr.contains("Permission denied (publickey)"), "{stderr}");
    println!("ssh login to node 1 as alice: {}", secs(login));
    vm1.power_off();
    let serial1 = vm1.serial();
    assert!(
        serial1.contains(&format!(
            "vTPM evidence carries the firmware's event log ({} events",
            measured.event_log.events().len()
        )),
        "node 1 sends its firmware's event log, and the CLI's check replays it\n{}",
        vm1.failure_report()
    );
    assert!(
        serial1.contains("init handed over in /run/confboot"),
        "the init's cluster step was handed over\n{}",
        vm1.failure_report()
    );
    let peak1 = vm1.peak_rss();
    drop(vm1);
    assert!(
        std::fs::read_to_string(admin.join("confboot-admin.conf"))
            .unwrap()
            .contains("kind: Config"),
        "the CLI wrote the kubeconfig"
    );
    let master = read_master_secret(&admin.join("confboot-mastersecret.json"));
    let uuid1 = n1.luks_uuid().expect("node 1's disk is LUKS2");
    assert!(
        n1.key_opens_disk(master.state_disk_key(&uuid1).expose()),
        "node 1's disk key is derived from the master secret"
    );
    let alice_blob = alice_pub.split(' ').nth(1).unwrap();
    assert!(
        !contains(&n1.raw(), alice_blob.as_bytes()),
        "the SSH users are kept inside dm-crypt, not in the (unauthenticated) LUKS2 header"
    );
    let cluster: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(admin.join("confboot-cluster.json")).unwrap(),
    )
    .unwrap();
    let salt = confboot_util::hex::decode(cluster["measurementSalt"].as_str().unwrap()).unwrap();
    println!(
        "phase (a) init through the CLI: {}; [node1] boot → bootstrapped {}; guest {:?}; peak RSS qemu {} KiB, swtpm {} KiB",
        secs(t.elapsed()),
        secs(init_to_bootstrapped),
        init_line,
        peak1.qemu_kib,
        peak1.swtpm_kib
    );

    // (b) + (d): joinsvc with the CLI's master secret and salt, the predicted
    // policy and the joining nodes' AKs (the tampered
    // node's too: it is refused for its measurements, not its AK).
    let joinsvc_port = free_port();
    let joinsvc_setup = JoinsvcSetup {
        master_secret: master.clone(),
        measurement_salt: salt,
        pinned_aks: vec![n1.ak.clone(), n2.ak.clone(), n3.ak.clone(), bad.ak.clone()],
        listen: format!("127.0.0.1:{joinsvc_port}"),
        extra: vec![],
        real_api: None,
    };
    // joinsvc's TPM, freshly started, gets the golden boot's event log
    // replayed: its PCRs are then a node's of this image (checked: all but
    // IMA's PCR 10, which the kernel extends, not the firmware), and PCR 15
    // gets the cluster's mark as a control plane's does after init.
    let (joinsvc, _joinsvc_swtpm) = measured.joinsvc_as_node(
        &joinsvc_bin,
        &predicted,
        joinsvc_setup,
        &joinsvc_tpm,
        &admin.join("measurements.events.json"),
    );
    let t = Instant::now();
    let (r2, r3, bad_serial) = std::thread::scope(|s| {
        let join = |n: &NodeFiles| {
            let mut c = n.config(&image, &node_cmdline);
            c.host_ports = vec![(JOIN_PORT, joinsvc_port)];
            c
        };
        let (c2, c3) = (join(&n2), join(&n3));
        let mut cb = bad.config(&tampered, &tampered_cmdline);
        cb.host_ports = vec![(JOIN_PORT, joinsvc_port)];
        let h2 = s.spawn(|| bootstrap_boot(c2, "Joined", true, &["CONFBOOT-STATE-WRITTEN"]));
        let h3 = s.spawn(|| bootstrap_boot(c3, "Joined", true, &["CONFBOOT-STATE-WRITTEN"]));
        let hb = s.spawn(|| {
            let mut vm = Vm::boot(cb);
            vm.wait_for_line("refused this node", BOOT_BOUND);
            let serial = vm.serial();
            println!(
                "[tampered] refused after {}; peak RSS qemu {} KiB, swtpm {} KiB",
                secs(vm.elapsed()),
                vm.peak_rss().qemu_kib,
                vm.peak_rss().swtpm_kib
            );
            // Killed here (dropped on its own thread).
            drop(vm);
            serial
        });
        (h2.join().unwrap(), h3.join().unwrap(), hb.join().unwrap())
    });
    println!(
        "phase (b)+(d) two joins and a tampered node (3 VMs in parallel): {}",
        secs(t.elapsed())
    );
    print_boot("node2", &r2);
    print_boot("node3", &r3);

    for (n, r) in [(&n2, &r2), (&n3, &r3)] {
        assert!(
            r.serial.contains("join handed over in /run/confboot"),
            "{}",
            r.serial
        );
        let uuid = n.luks_uuid().expect("the joined node's disk is LUKS2");
        assert!(
            n.key_opens_disk(master.state_disk_key(&uuid).expose()),
            "[{}] disk key = master_secret.state_disk_key(uuid)",
            n.name
        );
        assert!(
            !n.key_opens_disk(master.state_disk_key(&uuid1).expose()),
            "[{}] another disk's key does not open it",
            n.name
        );
        assert!(
            r.serial
                .contains(&format!("CONFBOOT-STATE-WRITTEN {marker}")),
            "{}",
            r.serial
        );
        assert!(
            r.serial
                .contains("state file system on /dev/mapper/state: ext4 made")
                && r.serial.contains("CONFBOOT-STATE-FS ext4 mounted"),
            "[{}] the bootstrapper makes ext4 on the new disk, /init mounts it\n{}",
            n.name,
            r.serial
        );
        let before: Vec<&str> = r
            .serial
            .lines()
            .filter(|l| l.starts_with("CONFBOOT-STATE "))
            .collect();
        assert_eq!(before.len(), 1, "one read step\n{}", r.serial);
        assert_ne!(
            before[0].trim_end(),
            format!("CONFBOOT-STATE {marker}"),
            "a freshly formatted disk does not hold the marker yet"
        );
        let raw = n.raw();
        assert!(
            !contains(&raw, marker.as_bytes()),
            "[{}] the marker must not be in the raw image (dm-crypt)",
            n.name
        );
    }
    assert_ne!(n2.luks_uuid(), n3.luks_uuid());

    // (d) The tampered node: refused for its measurements, never took the
    // node lock, its disk is still all zero.
    let (_, metrics) = joinsvc.http_get("/metrics");
    let refused_lines: Vec<&str> = metrics
        .lines()
        .filter(|l| l.starts_with("joinsvc_tickets"))
        .collect();
    println!("joinsvc metrics: {}", refused_lines.join(" | "));
    assert!(
        refused(&metrics, "measurement") >= 1,
        "joinsvc counts the tampered node's refusal\n{metrics}"
    );
    // The tampered node sent its firmware's event log, which replays to its
    // quote; against the predicted log, joinsvc names the first event that
    // differs: the command line (the attacker's node boots with another
    // one, taking any join service), before its initrd.
    let explained = joinsvc
        .process
        .wait_for_line("PCR 9, event 1 (LOADED_IMAGE::LoadOptions): sha256 ", 1000);
    println!("joinsvc: {}", explained.trim());
    assert!(!bad_serial.contains("nodelock taken"), "{bad_serial}");
    assert!(!bad_serial.contains("bootstrapped ("), "{bad_serial}");
    assert!(
        bad.luks_uuid().is_none(),
        "the tampered node's disk has no LUKS header"
    );
    assert!(
        bad.raw().iter().all(|&b| b == 0),
        "the tampered node's disk stays all zero"
    );

    // (c) Node 2 reboots with the same TPM and disk: rejoins and reads the
    // marker it wrote before the reboot. Before it boots, the host deletes
    // the header's file-system token: the node must probe and keep its data,
    // never make a new file system over it.
    // Node 1 (the first control plane) reboots at the same time: it rejoins
    // and creates its SSH users again from its state disk (a fresh
    // initramfs root knows none): the host's ssh logs in again.
    n2.remove_token("confboot-state-fs");
    let t = Instant::now();
    let mut c = n2.config(&image, &node_cmdline);
    c.host_ports = vec![(JOIN_PORT, joinsvc_port)];
    let ssh1_fwd = free_port();
    let mut c1 = n1.config(&image, &node_cmdline);
    c1.host_ports = vec![(JOIN_PORT, joinsvc_port)];
    c1.host_forwards = vec![(ssh1_fwd, SSH_PORT)];
    let uuid2 = n2.luks_uuid().unwrap();
    let (r, serial1) = std::thread::scope(|s| {
        let h1 = s.spawn(|| {
            let mut vm = Vm::boot(c1);
            vm.wait_for_line("bootstrapped (Rejoined)", BOOT_BOUND);
            vm.wait_for_line(AGENT_LISTENING, EXIT_BOUND);
            let login = assert_ssh_login(&vm, ssh1_fwd, &alice_key, "alice");
            println!("ssh login to node 1 after its reboot: {}", secs(login));
            vm.power_off();
            vm.serial()
        });
        let r = s
            .spawn(|| bootstrap_boot(c, "Rejoined", true, &["CONFBOOT-STATE-WRITTEN"]))
            .join()
            .unwrap();
        (r, h1.join().unwrap())
    });
    println!(
        "phase (c) reboots and rejoins (nodes 1 and 2): {}",
        secs(t.elapsed())
    );
    print_boot("node2-reboot", &r);
    print_guest_lines("node1-reboot", &serial1);
    assert!(
        serial1.contains("SSH users: created [alice], unchanged []"),
        "node 1 creates its kept SSH users again\n{serial1}"
    );
    assert!(
        r.serial.contains("SSH users: none kept on the state disk"),
        "a worker keeps none\n{}",
        r.serial
    );
    assert!(
        r.serial
            .lines()
            .any(|l| l.trim_end() == format!("CONFBOOT-STATE {marker}")),
        "the rejoined node reads the marker it wrote before the reboot\n{}",
        r.serial
    );
    assert_eq!(n2.luks_uuid().unwrap(), uuid2, "a rejoin never reformats");
    assert!(
        r.serial.contains(
            "state file system on /dev/mapper/state: ext4, kept (the header did not record it"
        ) && !r.serial.contains("ext4 made"),
        "a rejoin keeps the file system, even with its token deleted by the host\n{}",
        r.serial
    );
    assert!(
        r.serial.contains(&format!("state disk {uuid2} opened")),
        "the rejoin opens the existing disk\n{}",
        r.serial
    );
    assert!(
        !r.serial.contains("handed over in /run/confboot"),
        "a rejoin does not hand the cluster step over again\n{}",
        r.serial
    );
    assert!(
        r.serial
            .contains("node marked: PCR 15 extended with the cluster id"),
        "the rejoined node marks itself again with the salt its LUKS header keeps\n{}",
        r.serial
    );
    let (_, metrics) = joinsvc.http_get("/metrics");
    assert!(
        metrics
            .lines()
            .any(|l| l.trim_end() == "joinsvc_tickets_issued_total{kind=\"rejoin\"} 2"),
        "{metrics}"
    );
    assert!(joinsvc.tokens().len() >= 2, "join tokens were created");
    drop(joinsvc);

    // (e) Node 3 reboots while no join service answers: the admin recovers
    // it through its recovery API (a host forward), the CLI verifying its
    // attestation first and sending the init secret. It opens its disk, marks itself again and keeps
    // its file system: the marker of its first boot is still there.
    // First the host calls Recover, with a master secret of its own and
    // without the admin's init secret (the attack on a disk it formatted
    // itself): refused before the node reads its disk.
    let t = Instant::now();
    let (mut vm3, recover_fwd, _, _) =
        boot_serving(&n3, &image, &node_cmdline, 9999, "recovery API");
    let host = work.path().join("host");
    std::fs::create_dir_all(&host).unwrap();
    std::fs::write(host.join("no-init-secret"), "").unwrap();
    // The host's own cluster file: a salt of its choosing.
    std::fs::write(
        host.join("confboot-cluster.json"),
        format!(r#"{{"measurementSalt": "{}"}}"#, "ab".repeat(32)),
    )
    .unwrap();
    confboot_kms::MasterSecret::generate()
        .unwrap()
        .write_file(&host.join("host-mastersecret.json"))
        .unwrap();
    let admins_policy = admin.join("measurements.json").display().to_string();
    let out = admin_cli(
        &cli,
        &host,
        "recover",
        recover_fwd,
        &admins_policy,
        &n3.ak,
        &[
            "--init-secret-file",
            "no-init-secret",
            "--master-secret",
            "host-mastersecret.json",
        ],
    );
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("PERMISSION_DENIED: wrong init secret"),
        "{stderr}\n{}",
        vm3.failure_report()
    );
    vm3.wait_for_line("Recover refused: wrong init secret", EXIT_BOUND);
    assert!(
        !vm3.serial().contains("nodelock taken"),
        "the host's Recover took nothing\n{}",
        vm3.failure_report()
    );
    println!("the host's Recover (its master secret, no init secret): refused");
    let out = admin_cli(
        &cli,
        &admin,
        "recover",
        recover_fwd,
        "measurements.json",
        &n3.ak,
        &[
            "--init-secret-file",
            "init-secret",
            "--master-secret",
            "confboot-mastersecret.json",
        ],
    );
    if !out.status.success() {
        panic!(
            "confboot recover failed ({}):\n{}\n{}\n{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr),
            vm3.failure_report()
        );
    }
    vm3.wait_for_line("bootstrapped (Recovered)", BOOT_BOUND);
    vm3.wait_for_line("CONFBOOT-STATE-WRITTEN", EXIT_BOUND);
    vm3.wait_for_line(AGENT_LISTENING, EXIT_BOUND);
    vm3.power_off();
    let serial3 = vm3.serial();
    print_guest_lines("node3-recovered", &serial3);
    println!(
        "phase (e) reboot without a join service, recovery through the CLI: {}",
        secs(t.elapsed())
    );
    for want in [
        "node marked: PCR 15 extended with the cluster id",
        "state file system on /dev/mapper/state: ext4, kept",
        &format!("CONFBOOT-STATE {marker}"),
    ] {
        assert!(
            serial3.lines().any(|l| l.trim_end().ends_with(want)),
            "the recovered node: {want}\n{}",
            vm3.failure_report()
        );
    }
    assert!(!serial3.contains("ext4 made"));
    assert!(
        !serial3.contains("CONFBOOT-STATE-ERROR"),
        "{}",
        vm3.failure_report()
    );
    drop(vm3);

    // (f) The tampered image runs as the first node of another cluster
    // (another admin initialized it, trusting its measurements). This
    // cluster's admin asks it: `confboot verify` refuses it, naming the
    // first event of its boot that differs from this image's prediction
    // (its command line) and the other cluster's mark in PCR 15.
    let t = Instant::now();
    let other_admin = work.path().join("other-admin");
    std::fs::create_dir_all(&other_admin).unwrap();
    std::fs::write(other_admin.join("init-secret"), INIT_SECRET).unwrap();
    measure_image(&cli, &tampered, &tampered_cmdline, &other_admin);
    let (mut vm_bad, bad_init_fwd, bad_verify_fwd, _) =
        boot_serving(&bad, &tampered, &tampered_cmdline, 9000, "init API");
    let out = admin_cli(
        &cli,
        &other_admin,
        "init",
        bad_init_fwd,
        "measurements.json",
        &bad.ak,
        &["--init-secret-file", "init-secret"],
    );
    assert!(
        out.status.success(),
        "{}{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
        vm_bad.failure_report()
    );
    vm_bad.wait_for_line(AGENT_LISTENING, BOOT_BOUND);
    let (code, shown) = verify_node(
        &cli,
        &admin,
        bad_verify_fwd,
        "measurements.json",
        "measurements.events.json",
        &bad.ak,
    );
    println!(
        "confboot verify of the tampered node:\n{}",
        shown.trim_end()
    );
    vm_bad.power_off();
    assert_eq!(code, Some(1), "{shown}");
    assert!(
        shown.contains("     PCR 9, event 1 (LOADED_IMAGE::LoadOptions): sha256 "),
        "verify names the tampered node's differing event\n{shown}"
    );
    assert!(shown.contains("PCR 15 holds another mark"), "{shown}");
    assert!(
        shown.contains("NOT verified: enforced PCR 9, 15 differ"),
        "{shown}"
    );
    println!(
        "phase (f) a tampered node of another cluster, verified: {}",
        secs(t.elapsed())
    );
    println!("whole test: {}", secs(t0.elapsed()));
}
