//! Nodes that boot into their operating system: QEMU (software emulation),
//! OVMF measured boot, one swtpm per VM, the PRODUCTION initramfs (no
//! kubeadm, no shell) and the test OS image of `os/build.sh` (Debian's
//! systemd and OpenSSH, squashfs under dm-verity, the node agent and test
//! units that report on the console, no Kubernetes) as a second,
//! read-only disk. The root hash and its parameters are on the kernel
//! command line: PCR 9 covers them. The image is built twice (the same
//! root hash), `veritysetup verify` accepts its tree, and node 2 boots the
//! tree `veritysetup format` built for the same root.
//!
//! Boots: a fidelity boot (prediction = booted PCRs, the event log for
//! joinsvc's TPM); node 1 takes the admin's Init, hands over to its OS,
//! where systemd runs the cluster step (told the image has no Kubernetes:
//! it installs Init's CA and admin kubeconfig and deletes the handoff's
//! secrets, and runs no kubeadm; `vm_kubernetes.rs` runs the real one in
//! the production image), the node agent (`confboot verify` passes against it) and
//! sshd (the Init's user logs in with the host's OpenSSH client, a key not
//! configured is refused); node 2 joins through joinsvc the same way,
//! while the genuine initramfs booted with the host's own root (its root
//! hash on the command line) is refused by joinsvc (the command-line event
//! named) and a root whose hash tree's top
//! level was changed is refused by PID 1 before the bootstrapper runs; a
//! node whose root has one flipped byte in a file the OS reads at boot
//! stops (dm-verity, `panic_on_corruption`) without the OS ever reading
//! it; node 2 reboots, rejoins and reads back what its OS wrote; node 2's
//! disk rolled back to a copy from before that reboot is refused.
//!
//! Needs the musl release binaries (scripts/test.sh builds them), the
//! Debian packages boot.rs needs, and mmdebstrap and squashfs-tools
//! (scripts/setup.sh installs them).

use std::path::Path;
use std::time::{Duration, Instant};

use confboot_proto::DEFAULT_VERIFY_PORT;
use confboot_tests::admin::{
    AdminFiles, SSH_PORT, assert_ssh_login, refused, ssh_run, verify_node,
};
use confboot_tests::cluster::{JoinsvcSetup, TempDir, read_master_secret};
use confboot_tests::os::{NO_KUBERNETES, OS_READY, OsImage};
use confboot_tests::qemu::{
    Image, JOIN_PORT, JoinsvcTpm, NodeFiles, Vm, VmConfig, args_param, golden_boot, measure_image,
    node_args,
};
use confboot_tests::{free_port, musl_binary};

/// Bound for a VM to reach a line (OVMF and systemd under TCG, 2 shared
/// cores, up to three VMs at once).
const BOOT_BOUND: Duration = Duration::from_secs(600);
/// The init secret the admin holds.
const INIT_SECRET: &str = "correct horse battery staple";
/// The files the handoff may still hold once the cluster step ran: nothing
/// secret (the node agent's arguments, the parameters without secrets,
/// the done marker).
const HANDOFF_KEPT: [&str; 3] = ["nodeagent.env", "cluster-step.json", "cluster-step.done"];

/// A timeline: seconds since the VM started, one line per phase.
struct Timeline {
    name: String,
    marks: Vec<(String, Duration)>,
}

impl Timeline {
    fn new(name: &str) -> Timeline {
        Timeline {
            name: name.to_string(),
            marks: Vec::new(),
        }
    }

    /// Waits for `pattern` on `vm`'s console and records when it came.
    fn wait(&mut self, vm: &mut Vm, pattern: &str, phase: &str) -> String {
        let line = vm.wait_for_line(pattern, BOOT_BOUND);
        self.marks.push((phase.to_string(), vm.elapsed()));
        line
    }

    fn print(&self) {
        for (phase, at) in &self.marks {
            println!("[{}] +{:6.1} s  {phase}", self.name, at.as_secs_f64());
        }
    }
}

/// The console lines of a node that booted into its OS.
fn assert_in_os(serial: &str, vm: &Vm) {
    for want in [
        "CONFBOOT-ROOT verified root hash",
        "CONFBOOT-SWITCH-ROOT /sbin/init",
        OS_READY,
    ] {
        assert!(
            serial.contains(want),
            "{want} missing\n{}",
            vm.failure_report()
        );
    }
    let ready = serial.lines().find(|l| l.contains(OS_READY)).unwrap();
    assert!(
        ready.trim_end().ends_with("failed="),
        "no unit of the OS failed: {ready}\n{}",
        vm.failure_report()
    );
}

/// The handoff's listing after the cluster step: only [`HANDOFF_KEPT`].
fn assert_handoff_emptied(serial: &str, vm: &Vm) {
    let line = serial
        .lines()
        .find_map(|l| l.split_once("CONFBOOT-HANDOFF-LEFT").map(|(_, r)| r))
        .unwrap_or_else(|| panic!("no CONFBOOT-HANDOFF-LEFT\n{}", vm.failure_report()));
    for name in line.split_whitespace() {
        assert!(
            HANDOFF_KEPT.contains(&name),
            "{name} is still in /run/confboot after the cluster step: {line}\n{}",
            vm.failure_report()
        );
    }
}

#[test]
fn vm_os_init_join_reboot_and_refused_roots() {
    let t0 = Instant::now();
    let bootstrapper = musl_binary("bootstrapper");
    let joinsvc_bin = musl_binary("joinsvc");
    let cli = musl_binary("confboot");
    let work = TempDir::new("vm-os");
    let joinsvc_tpm = JoinsvcTpm::new(work.path());

    let t = Instant::now();
    let image = Image::build_production("vm-os", &bootstrapper).unwrap_or_else(|e| panic!("{e}"));
    println!("{}", image.build_log.trim_end());
    let os = OsImage::build_test("vm-os", &[]).unwrap_or_else(|e| panic!("{e}"));
    println!("{}", os.build_log.trim_end());
    // The host's own root: the same image but one file, so another root
    // hash, named correctly on its command line.
    let host_file = work.path().join("host-chosen");
    std::fs::write(&host_file, "the host's root\n").unwrap();
    let host_os = OsImage::build_test("vm-os-host", &[(host_file.as_path(), "/etc/host-chosen")])
        .unwrap_or_else(|e| panic!("{e}"));
    assert_ne!(host_os.root_hash, os.root_hash);
    // Reproducible: the same inputs give the same root hash.
    let again = OsImage::build_test("vm-os-again", &[]).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        again.root_hash, os.root_hash,
        "a rebuild gives the same root"
    );
    // veritysetup, the oracle, both ways: it accepts the tree ours built
    // (reading the whole tree), and the tree it builds for the same root is
    // the one node 2 boots from (mapped by PID 1's dm-verity code).
    assert!(
        os.veritysetup_verifies(),
        "veritysetup verify accepts our tree"
    );
    let oracle_root = os.veritysetup_copy(&work.path().join("root-veritysetup.img"));
    assert_eq!(
        std::fs::read(&oracle_root).unwrap(),
        std::fs::read(&os.root).unwrap(),
        "veritysetup's tree is byte for byte ours"
    );
    println!("phase images: {:.1} s", t.elapsed().as_secs_f64());

    // The admin: the init secret, the SSH user alice (her key made by the
    // host's ssh-keygen) and a key configured nowhere.
    let files = AdminFiles::new(work.path(), INIT_SECRET);
    let admin = files.dir.clone();
    let hash = files.init_secret_hash.clone();
    let (alice_key, stranger_key) = (files.alice_key.clone(), files.stranger_key.clone());
    let n1 = NodeFiles::new(work.path(), "node1");
    let n2 = NodeFiles::new(work.path(), "node2");
    let n3 = NodeFiles::new(work.path(), "node3");
    let other = NodeFiles::new(work.path(), "other-root");

    // One command line for every node: the bootstrapper's arguments and
    // the root's parameters (PCR 9 covers both).
    let node_args = node_args(Some(&hash), &joinsvc_tpm.trust(), &[]);
    let cmdline = format!("{} {}", args_param(&node_args), os.cmdline);
    let (predicted, printed) = measure_image(&cli, &image, &cmdline, &admin);
    println!("{}", printed.trim_end());
    let t = Instant::now();
    let measured = golden_boot(&image.kernel, &image.initrd, &cmdline);
    for (pcr, want) in predicted.entries() {
        assert_eq!(
            measured.pcrs[pcr], want.value,
            "PCR {pcr}: the boot differs from confboot measure's prediction"
        );
    }
    println!("phase fidelity boot: {:.1} s", t.elapsed().as_secs_f64());
    let os_config = |n: &NodeFiles, cmdline: &str, root: &Path| -> VmConfig {
        let mut c = n.config(&image, cmdline);
        c.root_disk = Some(root.to_path_buf());
        c.memory_mib = 1024;
        c
    };

    // (a) Init, then the OS: systemd, the cluster step, the agent, sshd.
    let (init_fwd, verify_fwd, ssh_fwd) = (free_port(), free_port(), free_port());
    let mut c1 = os_config(&n1, &cmdline, &os.root);
    c1.host_forwards = vec![
        (init_fwd, 9000),
        (verify_fwd, DEFAULT_VERIFY_PORT),
        (ssh_fwd, SSH_PORT),
    ];
    let mut vm1 = Vm::boot(c1);
    let mut tl1 = Timeline::new("node1");
    tl1.wait(&mut vm1, "init API listening on", "waiting for Init");
    let cli_out = files.init(&cli, init_fwd, &n1.ak);
    let cli_stdout = String::from_utf8_lossy(&cli_out.stdout).into_owned();
    assert!(
        cli_out.status.success(),
        "confboot init failed:\n{cli_stdout}\n{}\n{}",
        String::from_utf8_lossy(&cli_out.stderr),
        vm1.failure_report()
    );
    tl1.wait(&mut vm1, "bootstrapped (Initialized)", "bootstrapped");
    tl1.wait(&mut vm1, "CONFBOOT-SWITCH-ROOT", "switch_root to the OS");
    tl1.wait(
        &mut vm1,
        &format!("{NO_KUBERNETES} init"),
        "cluster step: init (no Kubernetes in the test image)",
    );
    tl1.wait(&mut vm1, "CONFBOOT-HANDOFF-LEFT", "cluster step done");
    tl1.wait(&mut vm1, OS_READY, "OS multi-user");
    tl1.print();
    let verity_read = vm1.wait_for_line("CONFBOOT-OS-VERITY-READ", BOOT_BOUND);
    println!("[node1] {}", verity_read.trim());
    if let Some(root) = vm1
        .serial()
        .lines()
        .find(|l| l.starts_with("CONFBOOT-ROOT "))
    {
        println!("[node1] {}", root.trim());
    }
    let kubeconfig = std::fs::read_to_string(admin.join("confboot-admin.conf")).unwrap();
    assert!(kubeconfig.contains("kind: Config"), "{kubeconfig}");
    let (code, shown) = verify_node(
        &cli,
        &admin,
        verify_fwd,
        "measurements.json",
        "measurements.events.json",
        &n1.ak,
    );
    assert_eq!(code, Some(0), "{shown}\n{}", vm1.failure_report());
    println!(
        "confboot verify node 1 (agent in the OS): {}",
        shown.trim_end()
    );
    let login = assert_ssh_login(&vm1, ssh_fwd, &alice_key, "alice");
    println!(
        "ssh login to node 1's OS as alice: {:.1} s",
        login.as_secs_f64()
    );
    let (code, _, stderr) = ssh_run(ssh_fwd, &stranger_key, "alice", "id -un");
    assert_eq!(code, Some(255), "a key that was not configured: {stderr}");
    assert!(stderr.contains("Permission denied (publickey)"), "{stderr}");
    vm1.power_off();
    let serial1 = vm1.serial();
    assert_in_os(&serial1, &vm1);
    assert_handoff_emptied(&serial1, &vm1);
    assert!(
        serial1.contains("cluster step: cluster CA installed in /etc/kubernetes/pki"),
        "the cluster step installed the CA and admin kubeconfig made before the handover\n{}",
        vm1.failure_report()
    );
    drop(vm1);

    // joinsvc, as in vm_cluster.rs: its TPM replays the golden boot's log.
    let master = read_master_secret(&admin.join("confboot-mastersecret.json"));
    let cluster: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(admin.join("confboot-cluster.json")).unwrap(),
    )
    .unwrap();
    let salt = confboot_util::hex::decode(cluster["measurementSalt"].as_str().unwrap()).unwrap();
    let joinsvc_port = free_port();
    let joinsvc_setup = JoinsvcSetup {
        master_secret: master.clone(),
        measurement_salt: salt,
        pinned_aks: vec![
            n1.ak.clone(),
            n2.ak.clone(),
            n3.ak.clone(),
            other.ak.clone(),
        ],
        listen: format!("127.0.0.1:{joinsvc_port}"),
        extra: vec![],
        real_api: None,
    };
    let (joinsvc, _joinsvc_swtpm) = measured.joinsvc_as_node(
        &joinsvc_bin,
        &predicted,
        joinsvc_setup,
        &joinsvc_tpm,
        &admin.join("measurements.events.json"),
    );

    // (b) Node 2 joins and boots its OS; a genuine initramfs booted with the
    // host's own root (another root hash on its command line, the tree
    // matching it) is refused by joinsvc; a root whose hash tree's top level
    // changed is refused by PID 1.
    // The host's node takes any join service: it is the attacker's (a node
    // of the real image would not trust joinsvc's measurements).
    let mut host_args = node_args.clone();
    host_args.push("--insecure-any-join-service".to_string());
    let other_cmdline = format!("{} {}", args_param(&host_args), host_os.cmdline);
    let top_tampered = os.tampered_copy(
        &work.path().join("root-top-tampered.img"),
        os.hash_offset() + 4096 + 7,
    );
    let t = Instant::now();
    let (serial2, other_serial, top_serial) = std::thread::scope(|s| {
        let mut c2 = os_config(&n2, &cmdline, &oracle_root);
        c2.host_ports = vec![(JOIN_PORT, joinsvc_port)];
        let mut c_other = os_config(&other, &other_cmdline, &host_os.root);
        c_other.host_ports = vec![(JOIN_PORT, joinsvc_port)];
        let mut c_top = os_config(&n3, &cmdline, &top_tampered);
        c_top.host_ports = vec![(JOIN_PORT, joinsvc_port)];
        let h2 = s.spawn(move || {
            let mut vm = Vm::boot(c2);
            let mut tl = Timeline::new("node2");
            tl.wait(&mut vm, "ticket received", "join ticket received");
            tl.wait(&mut vm, "bootstrapped (Joined)", "bootstrapped");
            tl.wait(&mut vm, "CONFBOOT-SWITCH-ROOT", "switch_root to the OS");
            tl.wait(
                &mut vm,
                &format!("{NO_KUBERNETES} join"),
                "cluster step: join (no Kubernetes in the test image)",
            );
            tl.wait(&mut vm, "CONFBOOT-HANDOFF-LEFT", "cluster step done");
            tl.wait(&mut vm, OS_READY, "OS multi-user");
            tl.wait(&mut vm, "CONFBOOT-OS-WROTE", "OS wrote its marker");
            tl.print();
            vm.power_off();
            let serial = vm.serial();
            assert_in_os(&serial, &vm);
            assert_handoff_emptied(&serial, &vm);
            serial
        });
        let h_other = s.spawn(move || {
            let mut vm = Vm::boot(c_other);
            vm.wait_for_line("refused this node", BOOT_BOUND);
            vm.serial()
        });
        let h_top = s.spawn(move || {
            let mut vm = Vm::boot(c_top);
            vm.wait_for_line("CONFBOOT-ERROR the OS root", BOOT_BOUND);
            vm.wait_exit(Duration::from_secs(120));
            vm.serial()
        });
        (
            h2.join().unwrap(),
            h_other.join().unwrap(),
            h_top.join().unwrap(),
        )
    });
    println!(
        "phase (b) a join, another root hash, a changed hash tree (3 VMs): {:.1} s",
        t.elapsed().as_secs_f64()
    );
    assert!(serial2.contains("CONFBOOT-OS-STATE none"), "{serial2}");
    let written = serial2
        .lines()
        .find_map(|l| l.trim_end().strip_prefix("CONFBOOT-OS-WROTE "))
        .expect("node 2's OS wrote its marker")
        .to_string();
    // Another root hash: PCR 9 differs, joinsvc names the command line.
    assert!(!other_serial.contains("bootstrapped ("), "{other_serial}");
    let (_, metrics) = joinsvc.http_get("/metrics");
    assert!(refused(&metrics, "measurement") >= 1, "{metrics}");
    let explained = joinsvc
        .process
        .wait_for_line("PCR 9, event 1 (LOADED_IMAGE::LoadOptions): sha256 ", 1000);
    println!(
        "joinsvc on the node with another root hash: {}",
        explained.trim()
    );
    // A changed top level: refused before the bootstrapper ran.
    assert!(
        !top_serial.contains("CONFBOOT-BOOTSTRAPPER-START"),
        "{top_serial}"
    );
    let top_error = top_serial
        .lines()
        .find(|l| l.contains("CONFBOOT-ERROR the OS root"))
        .unwrap();
    println!("[changed hash tree] {}", top_error.trim());

    // The host keeps a copy of node 2's disk as it was after its join.
    let snapshot = work.path().join("node2-after-join.img");
    std::fs::copy(&n2.disk, &snapshot).expect("snapshot node 2's disk");

    // (c) One flipped byte in a file the OS reads at boot: the node joins
    // (its measurements are right), hands over, and stops when the OS
    // reads that block; the bytes never reach it.
    let data_tampered = os.tampered_copy(
        &work.path().join("root-data-tampered.img"),
        os.boot_read_offset() + 100,
    );
    let mut c3 = os_config(&n3, &cmdline, &data_tampered);
    c3.host_ports = vec![(JOIN_PORT, joinsvc_port)];
    let mut vm3 = Vm::boot(c3);
    vm3.wait_for_line("CONFBOOT-SWITCH-ROOT", BOOT_BOUND);
    let corrupted = vm3.wait_for_line("is corrupted", BOOT_BOUND);
    vm3.wait_exit(Duration::from_secs(120));
    let serial3 = vm3.serial();
    println!("[flipped byte] {}", corrupted.trim());
    assert!(
        !serial3.contains("CONFBOOT-OS-BOOT-READ") && !serial3.contains(OS_READY),
        "the OS never read the tampered file and never came up\n{}",
        vm3.failure_report()
    );
    drop(vm3);

    // (d) Node 2 reboots: rejoins, hands over again, its OS reads back what
    // it wrote on the state disk.
    let mut c2 = os_config(&n2, &cmdline, &os.root);
    c2.host_ports = vec![(JOIN_PORT, joinsvc_port)];
    let mut vm2 = Vm::boot(c2);
    let mut tl = Timeline::new("node2-reboot");
    tl.wait(&mut vm2, "bootstrapped (Rejoined)", "bootstrapped");
    tl.wait(&mut vm2, "CONFBOOT-SWITCH-ROOT", "switch_root to the OS");
    let state = tl.wait(&mut vm2, "CONFBOOT-OS-STATE", "OS read its marker");
    tl.wait(&mut vm2, OS_READY, "OS multi-user");
    tl.print();
    assert_eq!(
        state
            .trim_end()
            .split_once("CONFBOOT-OS-STATE ")
            .map(|(_, v)| v),
        Some(written.as_str()),
        "the OS reads back what it wrote before the reboot\n{}",
        vm2.failure_report()
    );
    vm2.power_off();
    let serial = vm2.serial();
    assert_in_os(&serial, &vm2);
    assert!(
        !serial.contains("cluster step: "),
        "a rejoin does not run the cluster step again\n{}",
        vm2.failure_report()
    );
    assert!(
        !contains(&n2.raw(), written.as_bytes()),
        "what the OS wrote is inside dm-crypt"
    );
    drop(vm2);

    // (e) The host rolls node 2's disk back to the copy it took after the
    // join: the cluster saw a later generation at the rejoin, so the node
    // refuses the disk and stops before its OS runs.
    std::fs::copy(&snapshot, &n2.disk).expect("roll node 2's disk back");
    let mut c2 = os_config(&n2, &cmdline, &os.root);
    c2.host_ports = vec![(JOIN_PORT, joinsvc_port)];
    let mut vm2 = Vm::boot(c2);
    let rolled = vm2.wait_for_line("state disk rolled back", BOOT_BOUND);
    vm2.wait_exit(Duration::from_secs(120));
    let serial = vm2.serial();
    println!("[node2-rolled-back] {}", rolled.trim());
    assert!(
        !serial.contains("CONFBOOT-SWITCH-ROOT") && !serial.contains("bootstrapped ("),
        "a rolled-back disk never reaches the OS\n{}",
        vm2.failure_report()
    );
    drop(vm2);
    let (_, metrics) = joinsvc.http_get("/metrics");
    assert!(refused(&metrics, "rolled_back") >= 1, "{metrics}");
    drop(joinsvc);
    println!("vm_os: {:.1} s in all", t0.elapsed().as_secs_f64());
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}
