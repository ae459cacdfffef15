//! The cluster's VPN between real VMs: three nodes (QEMU under OVMF, one
//! swtpm each, the static musl bootstrapper as PID 1's child and its node
//! agent) share a second virtio NIC on the harness's [`VmHub`] (frames
//! relayed over unix sockets, nothing leaves the machine; the hub's DHCP
//! gives each VM its address and host name, PID 1 configures both NICs);
//! joinsvc runs on the host with `--vpn-cidr`, reached by guestfwd.
//!
//! The first node is initialized through the CLI, the two others join.
//! Each node's agent polls joinsvc over aTLS (both sides attest), brings
//! up `wg0` with its VPN address and takes every new peer list. The test
//! image's watcher (`initramfs/test/after-bootstrap-vpn`) prints, every
//! second, the peers the kernel holds for `wg0` (read through netlink by
//! `confboot-wg-probe show`) and one ping over the VPN to each of them.
//! Checked:
//!
//! - every node reaches the two others over their VPN addresses;
//! - the node that joins last is in the two others' kernel peers within
//!   two poll intervals of its ticket (host clock; printed);
//! - joinsvc restarted between the second and the third join: the agents
//!   converge (they take the third node from the restarted joinsvc);
//! - a node powered off and removed with `joinsvc --remove-vpn-peer` leaves
//!   the others' kernel peers, and their pings to it stop answering;
//! - the node agent's peak RSS in the guest (printed).
//!
//! Boots: 3 (the first node's also gives the event log replayed into
//! joinsvc's TPM, so no separate golden boot). Needs the musl release
//! binaries (bootstrapper, joinsvc, confboot, confboot-wg-probe).

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use confboot_kms::init_secret;
use confboot_tests::cluster::{Joinsvc, JoinsvcSetup, TempDir, read_master_secret};
use confboot_tests::qemu::{
    Image, JOIN_PORT, JoinsvcTpm, NODEAGENT_BUILTIN, NodeFiles, Vm, VmConfig, args_param,
    measure_image, node_args, pct,
};
use confboot_tests::vm_hub::VmHub;
use confboot_tests::{free_port, musl_binary};
use confboot_tpm::IMA_PCR;
use confboot_tpm::swtpm::Swtpm;

/// Bound for a VM to reach a line (OVMF under TCG, 2 shared cores).
const BOOT_BOUND: Duration = Duration::from_secs(420);
/// Bound for the steps after a bootstrap (agent up, lists, pings).
const STEP_BOUND: Duration = Duration::from_secs(120);
/// The agents' poll interval, in seconds.
const POLL_SECS: u64 = 5;
/// The cluster's VPN range.
const CIDR: &str = "10.118.0.0/24";
/// The init secret the admin holds.
const INIT_SECRET: &str = "correct horse battery staple";
/// The hub's subnet (the nodes' public endpoints).
const HUB_SUBNET: [u8; 3] = [192, 168, 118];

fn secs(d: Duration) -> String {
    format!("{:.1} s", d.as_secs_f64())
}

/// The address in the agent's `VPN: interface wg0 up with A/P` line.
fn own_vpn_ip(vm: &mut Vm) -> String {
    let line = vm.wait_for_line("VPN: interface wg0 up with", STEP_BOUND);
    let after = line.split("up with ").nth(1).expect("an address");
    after.split('/').next().unwrap().to_string()
}

/// The watcher's `CONFBOOT-WG-PEERS wg0 N IPS` lines: the address lists.
fn kernel_peer_lines(serial: &str) -> Vec<Vec<String>> {
    serial
        .lines()
        .filter_map(|l| l.trim_end().strip_prefix("CONFBOOT-WG-PEERS wg0 "))
        .filter_map(|rest| {
            let mut words = rest.split(' ');
            let count: usize = words.next()?.parse().ok()?;
            let ips: Vec<String> = match words.next()? {
                "-" => Vec::new(),
                list => list.split(',').map(str::to_string).collect(),
            };
            (ips.len() == count).then_some(ips)
        })
        .collect()
}

/// Whether the `from`-th and later kernel peer lines end in exactly `want`.
fn kernel_peers_are(serial: &str, from: usize, want: &[&str]) -> bool {
    let lines = kernel_peer_lines(serial);
    let mut want: Vec<&str> = want.to_vec();
    want.sort();
    lines
        .get(from..)
        .and_then(|l| l.last())
        .is_some_and(|last| last.iter().map(String::as_str).eq(want.iter().copied()))
}

/// Counts of the watcher's ping lines for `ip` with result `result`.
fn pings(serial: &str, ip: &str, result: &str) -> usize {
    let want = format!("CONFBOOT-VPN-PING {ip} {result}");
    serial.lines().filter(|l| l.trim_end() == want).count()
}

/// Polls the consoles of `vms` (every 100 ms, host clock) until `done`
/// holds for them; how long it took. Panics after `bound` with the
/// consoles' tails and `joinsvc`'s log.
fn until(
    vms: &[&Vm],
    joinsvc: &Joinsvc,
    bound: Duration,
    what: &str,
    mut done: impl FnMut(&[String]) -> bool,
) -> Duration {
    let t = Instant::now();
    loop {
        let serials: Vec<String> = vms.iter().map(|v| v.serial()).collect();
        if done(&serials) {
            return t.elapsed();
        }
        if t.elapsed() > bound {
            let reports: Vec<String> = vms.iter().map(|v| v.failure_report()).collect();
            panic!(
                "{what}: not within {bound:?}\n{}\njoinsvc:\n{}",
                reports.join("\n"),
                joinsvc.process.log().join("\n")
            );
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// `joinsvc --remove-vpn-peer NAME` against joinsvc's Kubernetes API.
fn remove_peer(joinsvc_bin: &Path, joinsvc: &Joinsvc, dir: &Path, name: &str) {
    let out = joinsvc
        .remove_vpn_peer_command(joinsvc_bin, name, CIDR, dir)
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
}

#[test]
fn vm_vpn_three_nodes_ping_over_wireguard_follow_joins_and_removals() {
    let t0 = Instant::now();
    let bootstrapper = musl_binary("bootstrapper");
    let joinsvc_bin = musl_binary("joinsvc");
    let cli = musl_binary("confboot");
    // As in production: the node agent is the bootstrapper by that name.
    let nodeagent = Path::new(NODEAGENT_BUILTIN);
    let wg_probe = musl_binary("confboot-wg-probe");
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let watcher = repo.join("initramfs/test/after-bootstrap-vpn");
    let work = TempDir::new("vm-vpn");
    let hub = VmHub::start(work.path(), HUB_SUBNET);

    let joinsvc_tpm = JoinsvcTpm::new(work.path());

    let image = Image::build_with(
        "vm-vpn",
        Some(&bootstrapper),
        Some(nodeagent),
        "0",
        &[
            (watcher.as_path(), "/test/after-bootstrap"),
            (wg_probe.as_path(), "/usr/bin/confboot-wg-probe"),
        ],
    )
    .unwrap_or_else(|e| panic!("{e}"));

    let admin = work.path().join("admin");
    std::fs::create_dir_all(&admin).unwrap();
    std::fs::write(admin.join("init-secret"), INIT_SECRET).unwrap();
    let hash = init_secret::hash(INIT_SECRET.as_bytes(), init_secret::MIN_ITERATIONS);
    let nodes: Vec<NodeFiles> = (0..3)
        .map(|i| NodeFiles::new(work.path(), &format!("node{}", i + 1)))
        .collect();

    // One command line for every node. Each node's name is its host name
    // (the hub's DHCP gives vm-0, vm-1, vm-2), its public endpoint its
    // address on the hub (eth1).
    let joinsvc_trust = joinsvc_tpm.trust();
    let node_args = node_args(
        Some(&hash),
        &joinsvc_trust,
        &["--vpn", "--vpn-interface", "eth1"],
    );
    let poll = POLL_SECS.to_string();
    let agent_args = [
        "--vpn-cidr",
        CIDR,
        "--vpn-poll-interval",
        poll.as_str(),
        "--joinsvc-ak-trust",
        joinsvc_trust.as_str(),
    ];
    let agent_param = format!("confboot.agentargs={}", agent_args.map(pct).join(","));
    let cmdline = format!("{} {agent_param}", args_param(&node_args));
    let (predicted, printed) = measure_image(&cli, &image, &cmdline, &admin);
    println!("{}", printed.trim_end());

    let joinsvc_port = free_port();
    let config = |i: usize| -> VmConfig {
        let mut c = nodes[i].config(&image, &cmdline);
        c.host_ports = vec![(JOIN_PORT, joinsvc_port)];
        c.extra_args = hub.qemu_args(i as u8);
        c
    };

    // Node 1: Init through the CLI. Its agent polls a joinsvc that is not
    // there yet (backoff up to the interval).
    let init_fwd = free_port();
    let mut c1 = config(0);
    c1.host_forwards = vec![(init_fwd, 9000)];
    let mut vm1 = Vm::boot(c1);
    vm1.wait_for_line("init API listening on", BOOT_BOUND);
    let ak_file = admin.join("ak-node1");
    std::fs::write(&ak_file, confboot_util::hex::encode(&nodes[0].ak)).unwrap();
    let out = Command::new(&cli)
        .args(["init", "--node", &format!("127.0.0.1:{init_fwd}")])
        .args(["--measurements", "measurements.json"])
        .args(["--ak-trust", &format!("pinned:{}", ak_file.display())])
        .args(["--init-secret-file", "init-secret"])
        .current_dir(&admin)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "confboot init: {}\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
        vm1.failure_report()
    );
    vm1.wait_for_line("bootstrapped (Initialized)", BOOT_BOUND);
    vm1.wait_for_line("CONFBOOT-VPN-WATCH-STARTED", STEP_BOUND);
    vm1.assert_predicted_pcrs();
    let host1 = vm1.wait_for_line("CONFBOOT-NET host name", STEP_BOUND);
    assert!(host1.ends_with(&VmHub::host_name(0)), "{host1}");
    println!("phase node 1 initialized: {}", secs(t0.elapsed()));

    // joinsvc: node 1's event log replayed into its TPM (its PCRs are then
    // a node's of this image, IMA's PCR 10 aside), marked for the cluster.
    let master = read_master_secret(&admin.join("confboot-mastersecret.json"));
    let cluster: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(admin.join("confboot-cluster.json")).unwrap(),
    )
    .unwrap();
    let salt = confboot_util::hex::decode(cluster["measurementSalt"].as_str().unwrap()).unwrap();
    let setup = JoinsvcSetup {
        master_secret: master,
        measurement_salt: salt,
        pinned_aks: nodes.iter().map(|n| n.ak.clone()).collect(),
        listen: format!("127.0.0.1:{joinsvc_port}"),
        extra: vec![],
        real_api: None,
    };
    let joinsvc_swtpm = Swtpm::start_in(&joinsvc_tpm.dir).expect("swtpm starts");
    {
        let mut tpm = joinsvc_swtpm.connect().expect("connect to swtpm");
        vm1.event_log()
            .extend_into(&mut tpm)
            .expect("replay node 1's event log into joinsvc's TPM");
        let pcrs = tpm.pcr_read_all().expect("read PCRs");
        let booted = vm1.pcrs();
        for (i, v) in pcrs.into_iter().filter(|(i, _)| *i != IMA_PCR) {
            assert_eq!(booted[&i], v.to_vec(), "PCR {i} after the replay");
        }
        confboot_cluster::mark::mark_node(&mut tpm, &setup.cluster_id())
            .expect("mark joinsvc's TPM");
    }
    let mut joinsvc = Joinsvc::launch(
        &joinsvc_bin,
        &predicted,
        JoinsvcSetup {
            extra: vec![
                "--vpn-cidr".into(),
                CIDR.into(),
                "--tpm".into(),
                joinsvc_swtpm.addr().to_string(),
                "--expected-events".into(),
                admin.join("measurements.events.json").display().to_string(),
            ],
            ..setup
        },
    );
    // Node 1 registers itself with its own record.
    until(&[&vm1], &joinsvc, STEP_BOUND, "node 1 on the VPN", |s| {
        s[0].contains("VPN: interface wg0 up with")
    });
    let ip1 = own_vpn_ip(&mut vm1);
    println!(
        "phase joinsvc up, node 1 on the VPN as {ip1}: {}",
        secs(t0.elapsed())
    );

    // Node 2 joins.
    let mut vm2 = Vm::boot(config(1));
    vm2.wait_for_line("ticket received", BOOT_BOUND);
    let ip2 = own_vpn_ip(&mut vm2);
    until(
        &[&vm1, &vm2],
        &joinsvc,
        STEP_BOUND,
        "nodes 1 and 2 ping each other",
        |s| pings(&s[0], &ip2, "ok") > 0 && pings(&s[1], &ip1, "ok") > 0,
    );
    println!(
        "phase node 2 joined as {ip2}, pings 1 <-> 2: {}",
        secs(t0.elapsed())
    );

    // joinsvc restarts before node 3's join: the agents converge. Node 3
    // boots only now, so its ticket line comes while the test watches (the
    // clock below starts at it).
    joinsvc.restart();
    let mut vm3 = Vm::boot(config(2));

    // Node 3's ticket (host clock) → its address in the kernel peers of
    // nodes 1 and 2.
    let before: Vec<usize> = [&vm1, &vm2]
        .iter()
        .map(|v| kernel_peer_lines(&v.serial()).len())
        .collect();
    vm3.wait_for_line("ticket received", BOOT_BOUND);
    let t_ticket = Instant::now();
    let mut seen = [None::<Duration>; 2];
    until(
        &[&vm1, &vm2],
        &joinsvc,
        STEP_BOUND,
        "node 3 in the peers of 1 and 2",
        |s| {
            for (i, serial) in s.iter().enumerate() {
                if seen[i].is_none()
                    && kernel_peer_lines(serial)
                        .get(before[i]..)
                        .is_some_and(|l| l.iter().any(|ips| ips.len() == 2))
                {
                    seen[i] = Some(t_ticket.elapsed());
                }
            }
            seen.iter().all(Option::is_some)
        },
    );
    let ip3 = own_vpn_ip(&mut vm3);
    let (s1, s2) = (vm1.serial(), vm2.serial());
    assert!(
        kernel_peers_are(&s1, before[0], &[&ip2, &ip3]),
        "{}",
        vm1.failure_report()
    );
    assert!(
        kernel_peers_are(&s2, before[1], &[&ip1, &ip3]),
        "{}",
        vm2.failure_report()
    );
    let [a1, a2] = seen.map(Option::unwrap);
    println!(
        "node 3's ticket → in the kernel peers of node 1: {}, of node 2: {} (poll interval {POLL_SECS} s)",
        secs(a1),
        secs(a2)
    );
    let bound = Duration::from_secs(2 * POLL_SECS);
    assert!(a1 <= bound && a2 <= bound, "not within two poll intervals");

    // Every node reaches the two others over the VPN.
    let ips = [ip1.clone(), ip2.clone(), ip3.clone()];
    until(
        &[&vm1, &vm2, &vm3],
        &joinsvc,
        STEP_BOUND,
        "every pair pings",
        |s| {
            (0..3).all(|i| {
                (0..3)
                    .filter(|j| *j != i)
                    .all(|j| pings(&s[i], &ips[j], "ok") > 0)
            })
        },
    );
    println!(
        "phase node 3 joined as {ip3}, every pair pings: {}",
        secs(t0.elapsed())
    );
    let rss: Vec<String> = [&vm1, &vm2, &vm3]
        .iter()
        .map(|v| {
            v.serial()
                .lines()
                .filter_map(|l| l.trim_end().strip_prefix("CONFBOOT-AGENT-RSS "))
                .next_back()
                .unwrap_or("?")
                .to_string()
        })
        .collect();
    println!(
        "node agent peak RSS in the guests (KiB): {}",
        rss.join(", ")
    );

    // Node 3 is powered off and removed: it leaves the others' kernel
    // peers and their pings to it stop answering. (Powered off first: a
    // running member would register itself again with its own record.)
    vm3.power_off();
    let removal_dir = work.path().join("removal");
    std::fs::create_dir_all(&removal_dir).unwrap();
    let before: Vec<(usize, usize)> = [&vm1, &vm2]
        .iter()
        .map(|v| {
            let s = v.serial();
            (kernel_peer_lines(&s).len(), pings(&s, &ip3, "fail"))
        })
        .collect();
    remove_peer(&joinsvc_bin, &joinsvc, &removal_dir, &VmHub::host_name(2));
    let t_removed = Instant::now();
    until(
        &[&vm1, &vm2],
        &joinsvc,
        STEP_BOUND,
        "node 3 leaves the peers of 1 and 2",
        |s| {
            kernel_peers_are(&s[0], before[0].0, &[&ip2])
                && kernel_peers_are(&s[1], before[1].0, &[&ip1])
                && pings(&s[0], &ip3, "fail") > before[0].1
                && pings(&s[1], &ip3, "fail") > before[1].1
        },
    );
    println!(
        "removal → gone from the kernel peers of nodes 1 and 2: {}",
        secs(t_removed.elapsed())
    );
    // The two left still reach each other.
    let after: Vec<usize> = [&vm1, &vm2]
        .iter()
        .zip([&ip2, &ip1])
        .map(|(v, ip)| pings(&v.serial(), ip, "ok"))
        .collect();
    until(
        &[&vm1, &vm2],
        &joinsvc,
        STEP_BOUND,
        "nodes 1 and 2 still ping",
        |s| pings(&s[0], &ip2, "ok") > after[0] && pings(&s[1], &ip1, "ok") > after[1],
    );
    println!(
        "hub relayed {} frames; whole test {}",
        hub.relayed(),
        secs(t0.elapsed())
    );
}
