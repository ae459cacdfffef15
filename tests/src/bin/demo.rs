//! The main job for now: a cluster of processes on one machine, booted the
//! way confboot boots one. Every node is a `bootstrapper` process with its
//! own swtpm and a LUKS2 state-disk image; `confboot init` makes the first
//! node the control plane; `joinsvc` (holding the same master secret)
//! verifies and admits the others; a node with a tampered image is refused;
//! a rebooted node rejoins. Kubernetes cannot run here: kubeadm is a double
//! that records its command lines. Prints what happened to each node and how
//! long each phase took.
//!
//! Usage: `demo <dir with the release bootstrapper, joinsvc and confboot>`

use std::path::PathBuf;
use std::process::Command;
use std::time::Instant;

use confboot_kms::init_secret;
use confboot_tests::ChildProcess;
use confboot_tests::cluster::{
    Joinsvc, JoinsvcSetup, NodeAwaitingInit, NodeDir, TempDir, read_master_secret,
};

const IMAGE: &[u8] = b"node image v1";

fn ms(t: Instant) -> String {
    format!("{:>8.1} ms", t.elapsed().as_secs_f64() * 1000.0)
}

fn finish(name: &str, p: ChildProcess, t: Instant) -> bool {
    let (status, log) = p.wait();
    let outcome = log
        .iter()
        .rev()
        .find_map(|l| l.split_once("bootstrapped ").map(|(_, o)| o.to_string()));
    match (status.success(), outcome) {
        (true, Some(o)) => {
            println!("[{}] {name}: {o}", ms(t));
            for l in log.iter().filter(|l| {
                [
                    "attest",
                    "ticket received",
                    "nodelock taken",
                    "state disk",
                    "node marked",
                ]
                .iter()
                .any(|k| l.contains(k))
            }) {
                println!(
                    "             {}",
                    l.split_once(": ").map_or(l.as_str(), |(_, m)| m)
                );
            }
            true
        }
        _ => {
            println!("[{}] {name}: FAILED ({status})\n{}", ms(t), log.join("\n"));
            false
        }
    }
}

fn main() {
    let bin = std::env::args_os()
        .nth(1)
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            eprintln!("usage: demo <dir with bootstrapper, joinsvc and confboot>");
            std::process::exit(2)
        });
    let bin = bin.canonicalize().unwrap_or_else(|e| {
        eprintln!("demo: {}: {e}", bin.display());
        std::process::exit(2)
    });
    let (bootstrapper, joinsvc_bin, confboot) = (
        bin.join("bootstrapper"),
        bin.join("joinsvc"),
        bin.join("confboot"),
    );
    let mut ok = true;
    let admin = TempDir::new("demo-admin");
    std::fs::write(
        admin.path().join("init-secret"),
        "correct horse battery staple",
    )
    .unwrap();
    let hash = init_secret::hash(
        b"correct horse battery staple",
        init_secret::DEFAULT_ITERATIONS,
    );

    // Node 1 waits for the admin's Init.
    let t = Instant::now();
    // joinsvc later runs on node 1, with its TPM: every node trusts that AK.
    let NodeAwaitingInit {
        dir: _n1,
        tpm: tpm1,
        process: b1,
        init_addr,
    } = NodeAwaitingInit::start(&bootstrapper, "demo-node1", IMAGE, &hash);
    let init_addr = init_addr.to_string();
    let cp_ak = tpm1.ak_public.clone();
    tpm1.write_policy(&admin.path().join("measurements.json"));
    let pinned = format!("pinned:{}", confboot_util::hex::encode(&tpm1.ak_public));
    println!(
        "[{}] node-1: booted (own swtpm, blank state disk), waiting for Init on {init_addr}",
        ms(t)
    );

    let t = Instant::now();
    println!("[{}] admin: confboot init --node {init_addr} ...", ms(t));
    let out = Command::new(&confboot)
        .args([
            "init",
            "--node",
            &init_addr,
            "--init-secret-file",
            "init-secret",
        ])
        .args(["--measurements", "measurements.json", "--ak-trust", &pinned])
        .current_dir(admin.path())
        .output()
        .expect("run confboot");
    for line in String::from_utf8_lossy(&out.stdout)
        .lines()
        .chain(String::from_utf8_lossy(&out.stderr).lines())
    {
        println!("             {line}");
    }
    ok &= out.status.success() && finish("node-1", b1, t);

    let master = read_master_secret(&admin.path().join("confboot-mastersecret.json"));
    let cluster: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(admin.path().join("confboot-cluster.json")).unwrap(),
    )
    .unwrap();
    let salt = confboot_util::hex::decode(cluster["measurementSalt"].as_str().unwrap()).unwrap();

    // joinsvc on the control plane, with the same master secret; three nodes ask it.
    let nodes: Vec<(NodeDir, &str, &[u8])> = vec![
        (
            NodeDir::new(&bootstrapper, "demo-node2").trusting_join_service_ak(&cp_ak),
            "node-2",
            IMAGE,
        ),
        (
            NodeDir::new(&bootstrapper, "demo-node3").trusting_join_service_ak(&cp_ak),
            "node-3",
            IMAGE,
        ),
        (
            NodeDir::new(&bootstrapper, "demo-node4"),
            "node-4 (initrd changed by one byte)",
            b"node image v1 + 1 byte",
        ),
    ];
    let tpms: Vec<_> = nodes
        .iter()
        .map(|(n, _, image)| n.boot_tpm(image))
        .collect();
    let t = Instant::now();
    let setup = JoinsvcSetup {
        master_secret: master.clone(),
        measurement_salt: salt,
        pinned_aks: tpms.iter().map(|t| t.ak_public.clone()).collect(),
        // joinsvc attests with node 1's TPM: the nodes' own image, marked
        // with the cluster id (nodes check both before taking a ticket).
        extra: vec!["--tpm".into(), tpm1.tpm_arg()],
        ..JoinsvcSetup::new()
    };
    let joinsvc = Joinsvc::launch(&joinsvc_bin, &tpms[0].policy(), setup);
    let endpoint = joinsvc.rpc_addr.to_string();
    println!(
        "[{}] joinsvc: listening on {endpoint} on node-1 (expects node-1's measurements; attests with node-1's TPM)",
        ms(t)
    );

    let t = Instant::now();
    let running: Vec<ChildProcess> = nodes
        .iter()
        .zip(&tpms)
        .enumerate()
        .map(|(i, ((n, _, _), tpm))| {
            // The tampered node runs the attacker's code: it checks nothing.
            let unchecked = ["--join-endpoint", &endpoint, "--insecure-any-join-service"];
            n.bootstrapper(tpm, &unchecked[..if i == 2 { 3 } else { 2 }])
        })
        .collect();
    let mut running = running.into_iter();
    ok &= finish(nodes[0].1, running.next().unwrap(), t);
    ok &= finish(nodes[1].1, running.next().unwrap(), t);
    let tampered = running.next().unwrap();
    let refusal = tampered.wait_for_line("refused this node", 2000);
    println!(
        "[{}] {}: refused, disk left blank, keeps asking:",
        ms(t),
        nodes[2].1
    );
    println!(
        "             {}",
        refusal
            .split_once("refused this node: ")
            .map_or("", |(_, r)| r)
    );
    ok &= nodes[2].0.luks_uuid().is_none();
    drop(tampered);

    // node-2 reboots and rejoins.
    let t = Instant::now();
    drop(tpms);
    let n2 = &nodes[0].0;
    let tpm2 = n2.boot_tpm(IMAGE);
    ok &= finish(
        "node-2 after a reboot",
        n2.bootstrapper(&tpm2, &["--join-endpoint", &endpoint]),
        t,
    );

    let (_, metrics) = joinsvc.http_get("/metrics");
    println!("\njoinsvc metrics:");
    for line in metrics
        .lines()
        .filter(|l| !l.starts_with('#') && !l.contains("_bucket"))
    {
        println!("  {line}");
    }
    if !ok {
        eprintln!("demo: an outcome was not the expected one");
        std::process::exit(1);
    }
}
