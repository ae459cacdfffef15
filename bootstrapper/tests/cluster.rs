//! A cluster of real processes on loopback: bootstrappers (each with its own
//! swtpm and a LUKS2 state-disk image), joinsvc, and the `confboot` CLI.
//! Kubernetes cannot run here: kubeadm is a double (a script that records
//! its command lines and writes the admin kubeconfig, as kubeadm does). The
//! state disks use the build-machine mode (real LUKS2 headers, no mapping);
//! real dm-crypt is proven in the QEMU boot tests.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use confboot_kms::MasterSecret;
use confboot_kms::init_secret;
use confboot_tests::cluster::{
    Joinsvc, JoinsvcSetup, NodeAwaitingInit, NodeDir, TempDir, read_master_secret, workspace_binary,
};
use confboot_tests::{ChildProcess, addr_after, free_port};

const IMAGE: &[u8] = b"node image v1";
/// An init secret `confboot init` takes (random: `head -c 24 /dev/urandom | base64`).
const STRONG_SECRET: &str = "q8Jm2vQx7ZP0cW1nR5tLkY3eHs9aFbUd";

fn bootstrapper_bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_bootstrapper"))
}

/// Asserts that a line of `log` contains `needle`, showing the log if not.
fn assert_logged(log: &[String], needle: &str) {
    assert!(
        log.iter().any(|l| l.contains(needle)),
        "no line contains {needle:?}:\n{}",
        log.join("\n")
    );
}

/// Asserts that a command succeeded, showing what it printed if not.
fn assert_succeeded(out: &std::process::Output) {
    assert!(
        out.status.success(),
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

fn secs(t: Instant) -> String {
    format!("{:.2} s", t.elapsed().as_secs_f64())
}

fn wait_exit_ok(p: ChildProcess, what: &str) -> Vec<String> {
    let (status, log) = p.wait();
    assert!(
        status.success(),
        "{what} exited with {status}:\n{}",
        log.join("\n")
    );
    log
}

fn confboot(args: &[&str], cwd: &Path) -> std::process::Output {
    Command::new(workspace_binary("confboot"))
        .args(args)
        .current_dir(cwd)
        .output()
        .unwrap()
}

#[test]
fn init_join_refuse_restart_and_recover() {
    let t0 = Instant::now();
    let admin = TempDir::new("admin");
    std::fs::write(
        admin.path().join("init-secret"),
        "correct horse battery staple",
    )
    .unwrap();
    let hash = init_secret::hash(b"correct horse battery staple", init_secret::MIN_ITERATIONS);

    // Node 1 is inited through the CLI.
    // Node 1 becomes the control plane; joinsvc later runs on it, with its
    // TPM: every node trusts that AK for join services.
    let NodeAwaitingInit {
        dir: n1,
        tpm: tpm1,
        process: b1,
        init_addr,
    } = NodeAwaitingInit::start(&bootstrapper_bin(), "node1", IMAGE, &hash);
    let init_addr = init_addr.to_string();
    let cp_ak = tpm1.ak_public.clone();
    tpm1.write_policy(&admin.path().join("measurements.json"));
    std::fs::write(
        admin.path().join("pinned"),
        confboot_util::hex::encode(&tpm1.ak_public),
    )
    .unwrap();
    let pinned = format!("pinned:{}", admin.path().join("pinned").display());
    let base = ["--measurements", "measurements.json", "--ak-trust", &pinned];

    // A wrong init secret is refused and the node stays uninitialized.
    std::fs::write(
        admin.path().join("wrong-secret"),
        "a wrong guess at the admin's init secret",
    )
    .unwrap();
    let out = confboot(
        &[
            &[
                "init",
                "--node",
                &init_addr,
                "--init-secret-file",
                "wrong-secret",
                "--master-secret-out",
                "ms-wrong.json",
            ][..],
            &base,
        ]
        .concat(),
        admin.path(),
    );
    assert_eq!(out.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("wrong init secret"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        n1.luks_uuid().is_none(),
        "a refused Init must not touch the disk"
    );
    // SSH users travel with Init (the CLI checked the file); this node maps
    // no device (header-only), so it has nowhere to keep them: refused
    // before the nodelock, as invalid users are.
    let key = {
        let mut blob = Vec::new();
        for f in [&b"ssh-ed25519"[..], &[7u8; 32][..]] {
            blob.extend_from_slice(&(f.len() as u32).to_be_bytes());
            blob.extend_from_slice(f);
        }
        format!("ssh-ed25519 {}", confboot_util::base64::encode(&blob))
    };
    std::fs::write(
        admin.path().join("ssh-users.json"),
        format!(r#"{{"sshUsers": [{{"username": "alice", "publicKey": "{key}"}}]}}"#),
    )
    .unwrap();
    // `confboot init` of node 1 with the admin's init secret and `extra`.
    let init = |extra: &[&str]| {
        let first = [
            "init",
            "--node",
            &init_addr,
            "--init-secret-file",
            "init-secret",
        ];
        confboot(&[&first[..], extra, &base].concat(), admin.path())
    };
    let out = init(&[
        "--master-secret-out",
        "ms-ssh.json",
        "--ssh-users",
        "ssh-users.json",
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("INVALID_ARGUMENT")
            && stderr.contains("ssh_user_keys: this node has no state file system"),
        "{stderr}"
    );
    assert!(n1.luks_uuid().is_none(), "nothing was written");

    let t = Instant::now();
    let out = init(&[]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "confboot init failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("node: cluster initialized"), "{stdout}");
    wait_exit_ok(b1, "bootstrapper 1");
    println!("phase init (CLI → first control plane): {}", secs(t));
    let kubeconfig = admin.path().join("confboot-admin.conf");
    assert!(
        std::fs::read_to_string(&kubeconfig)
            .unwrap()
            .contains("kind: Config")
    );
    for f in [
        "confboot-admin.conf",
        "confboot-mastersecret.json",
        "confboot-cluster.json",
    ] {
        let mode = std::os::unix::fs::PermissionsExt::mode(
            &std::fs::metadata(admin.path().join(f))
                .unwrap()
                .permissions(),
        );
        assert_eq!(mode & 0o777, 0o600, "{f}");
    }
    let master = read_master_secret(&admin.path().join("confboot-mastersecret.json"));
    let uuid1 = n1.luks_uuid().expect("node 1's disk is LUKS2 now");
    assert!(n1.key_opens_disk(master.state_disk_key(&uuid1).expose()));
    assert!(
        std::fs::read_to_string(n1.p("kubeadm.log"))
            .unwrap()
            .starts_with("init --config")
    );
    let cluster: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(admin.path().join("confboot-cluster.json")).unwrap(),
    )
    .unwrap();
    let salt = confboot_util::hex::decode(cluster["measurementSalt"].as_str().unwrap()).unwrap();
    let salt = confboot_kms::MeasurementSalt::new(salt).unwrap();
    // Every bootstrapped node carries the cluster id in PCR 15.
    let marked = confboot_cluster::mark::marked_pcr15(&confboot_kms::derive_cluster_id(
        master.measurement_secret().expose(),
        &salt,
    ));
    assert_eq!(tpm1.pcr15(), marked, "the first node is marked");

    // joinsvc holds the same master secret; nodes 2 and 3 join through it.
    let n2 = NodeDir::new(&bootstrapper_bin(), "node2").trusting_join_service_ak(&cp_ak);
    let n3 = NodeDir::new(&bootstrapper_bin(), "node3").trusting_join_service_ak(&cp_ak);
    let bad = NodeDir::new(&bootstrapper_bin(), "tampered");
    let (tpm2, tpm3, tpm_bad) = (
        n2.boot_tpm(IMAGE),
        n3.boot_tpm(IMAGE),
        bad.boot_tpm(b"node image v1, one byte changed"),
    );
    let join_port = free_port();
    let setup = |master: &MasterSecret| JoinsvcSetup {
        master_secret: master.clone(),
        measurement_salt: salt.to_vec(),
        pinned_aks: vec![
            tpm2.ak_public.clone(),
            tpm3.ak_public.clone(),
            tpm_bad.ak_public.clone(),
        ],
        listen: format!("127.0.0.1:{join_port}"),
        // joinsvc runs on the control plane: node 1's TPM, measured as
        // every node of this image and marked with the cluster id.
        extra: vec!["--tpm".into(), tpm1.tpm_arg()],
        real_api: None,
    };
    let joinsvc_bin = workspace_binary("joinsvc");
    let joinsvc = Joinsvc::launch(&joinsvc_bin, &tpm2.policy(), setup(&master));
    let endpoint = joinsvc.rpc_addr.to_string();

    let t = Instant::now();
    let b2 = n2.bootstrapper(&tpm2, &["--join-endpoint", &endpoint]);
    // Node 3's admin chose Argon2id for its key slot.
    let b3 = n3.bootstrapper(
        &tpm3,
        &[
            "--join-endpoint",
            &endpoint,
            "--state-disk-pbkdf",
            "argon2id:2:1024:1",
        ],
    );
    // The tampered image is the attacker's code: it checks no join service.
    let b_bad = bad.bootstrapper(
        &tpm_bad,
        &["--join-endpoint", &endpoint, "--insecure-any-join-service"],
    );
    for (node, b) in [(&n2, b2), (&n3, b3)] {
        let log = wait_exit_ok(b, "a joining bootstrapper");
        assert_logged(&log, "bootstrapped (Joined)");
        let uuid = node.luks_uuid().expect("the joined node's disk is LUKS2");
        assert!(
            node.key_opens_disk(master.state_disk_key(&uuid).expose()),
            "disk key = derivation"
        );
        // The key slot's hashing is the one asked for, as cryptsetup reads it.
        let dump = Command::new("cryptsetup")
            .args(["luksDump", "--dump-json-metadata"])
            .arg(node.p("disk.img"))
            .output()
            .unwrap();
        let metadata: serde_json::Value = serde_json::from_slice(&dump.stdout).unwrap();
        let kdf = &metadata["keyslots"]["0"]["kdf"];
        if std::ptr::eq(node, &n3) {
            assert_eq!(
                (&kdf["type"], &kdf["time"], &kdf["memory"], &kdf["cpus"]),
                (&"argon2id".into(), &2.into(), &1024.into(), &1.into()),
                "{kdf}"
            );
        } else {
            assert_eq!(
                (&kdf["type"], &kdf["iterations"]),
                (&"pbkdf2".into(), &1000.into()),
                "{kdf}"
            );
        }
        let kubeadm_log = std::fs::read_to_string(node.p("kubeadm.log")).unwrap();
        assert!(kubeadm_log.starts_with("join --config"), "{kubeadm_log}");
        // The kubelet's serving certificate, signed by joinsvc with the
        // cluster CA, was in place when kubeadm joined; openssl agrees it
        // chains to the CA and is for this node.
        assert!(
            kubeadm_log.contains("kubelet certificate installed"),
            "{kubeadm_log}"
        );
        let cert = node.p("kubelet/pki/kubelet.crt");
        let out = std::process::Command::new("openssl")
            .args(["verify", "-purpose", "sslserver", "-CAfile"])
            .arg(&joinsvc.ca_cert_path)
            .arg(&cert)
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        let out = std::process::Command::new("openssl")
            .args(["x509", "-noout", "-subject", "-in"])
            .arg(&cert)
            .output()
            .unwrap();
        let subject = String::from_utf8_lossy(&out.stdout);
        assert!(
            subject.contains("CN = system:node:node") && subject.contains("O = system:nodes"),
            "{subject}"
        );
    }
    assert_eq!(tpm2.pcr15(), marked, "a joined node is marked");
    assert_eq!(tpm3.pcr15(), marked, "a joined node is marked");
    println!("phase two nodes join: {}", secs(t));

    // The tampered node is refused, stays unlocked, and keeps its disk blank.
    b_bad.wait_for_line("refused this node", 1000);
    assert!(bad.luks_uuid().is_none());
    assert!(!b_bad.log().iter().any(|l| l.contains("nodelock taken")));
    drop(b_bad);

    // joinsvc dies; a node waits; joinsvc comes back on the same port; the node joins.
    let n4 = NodeDir::new(&bootstrapper_bin(), "node4").trusting_join_service_ak(&cp_ak);
    let tpm4 = n4.boot_tpm(IMAGE);
    let n5 = NodeDir::new(&bootstrapper_bin(), "node5").trusting_join_service_ak(&cp_ak);
    let tpm5 = n5.boot_tpm(IMAGE);
    drop(joinsvc);
    let t = Instant::now();
    let b4 = n4.bootstrapper(&tpm4, &["--join-endpoint", &endpoint]);
    b4.wait_for_line("not usable", 1000);
    let mut setup4 = setup(&master);
    setup4.pinned_aks.push(tpm4.ak_public.clone());
    setup4.pinned_aks.push(tpm5.ak_public.clone());
    let joinsvc = Joinsvc::launch(&joinsvc_bin, &tpm2.policy(), setup4);
    let log = wait_exit_ok(b4, "bootstrapper 4");
    assert_logged(&log, "bootstrapped (Joined)");
    println!("phase join across a joinsvc restart: {}", secs(t));

    // Node 5's first boot dies in the cluster step, after its disk was
    // formatted: the next boot finishes the first boot (a join ticket for
    // the same UUID, the disk opened, kubeadm join again), it does not
    // claim a rejoin.
    let t = Instant::now();
    let (status, log) = n5
        .bootstrapper(
            &tpm5,
            &["--join-endpoint", &endpoint, "--kubeadm", "/bin/false"],
        )
        .wait();
    assert!(!status.success(), "{}", log.join("\n"));
    assert_logged(&log, "cluster join failed");
    let uuid5 = n5.luks_uuid().expect("formatted before the cluster step");
    drop(tpm5);
    let tpm5 = n5.boot_tpm(IMAGE);
    let log = wait_exit_ok(
        n5.bootstrapper(&tpm5, &["--join-endpoint", &endpoint]),
        "bootstrapper 5 after an interrupted first boot",
    );
    // The interrupted first boot is finished, not rejoined.
    assert_logged(&log, "bootstrapped (Joined)");
    assert_logged(&log, &format!("state disk {uuid5} opened"));
    assert_eq!(n5.luks_uuid().unwrap(), uuid5, "never formatted again");
    assert!(
        std::fs::read_to_string(n5.p("kubeadm.log"))
            .unwrap()
            .starts_with("join --config")
    );
    assert_eq!(tpm5.pcr15(), marked);
    println!("phase an interrupted first boot is finished: {}", secs(t));

    // Node 3 reboots (its TPM's PCRs start from zero) and rejoins with its
    // disk's UUID, with its configuration unchanged: it opens only the
    // header it writes, Argon2id costs included.
    drop(tpm3);
    let tpm3 = n3.boot_tpm(IMAGE);
    let uuid3 = n3.luks_uuid().unwrap();
    let t = Instant::now();
    let log = wait_exit_ok(
        n3.bootstrapper(
            &tpm3,
            &[
                "--join-endpoint",
                &endpoint,
                "--state-disk-pbkdf",
                "argon2id:2:1024:1",
            ],
        ),
        "rejoining bootstrapper",
    );
    assert_logged(&log, "bootstrapped (Rejoined)");
    assert_logged(&log, &format!("state disk {uuid3} opened"));
    assert_eq!(n3.luks_uuid().unwrap(), uuid3, "a rejoin never reformats");
    assert_eq!(
        tpm3.pcr15(),
        marked,
        "a rejoined node is marked again, with the salt its disk's header keeps"
    );
    println!("phase reboot and rejoin: {}", secs(t));
    drop(joinsvc);

    // Node 2 reboots, reaches no join service, and is recovered by the admin.
    drop(tpm2);
    let tpm2 = n2.boot_tpm(IMAGE);
    let t = Instant::now();
    let b2 = n2.bootstrapper(
        &tpm2,
        &["--join-endpoint", &endpoint, "--init-secret-hash", &hash],
    );
    let recover_addr = addr_after(
        &b2.wait_for_line("recovery API listening on ", 3000),
        "listening on ",
    )
    .to_string();
    std::fs::write(
        admin.path().join("pinned2"),
        confboot_util::hex::encode(&tpm2.ak_public),
    )
    .unwrap();
    tpm2.write_policy(&admin.path().join("measurements2.json"));
    let pinned2 = format!("pinned:{}", admin.path().join("pinned2").display());
    // A wrong master secret changes nothing.
    let wrong = MasterSecret::generate().unwrap();
    std::fs::write(
        admin.path().join("wrong-ms.json"),
        format!(
            r#"{{"key": "{}", "salt": "{}"}}"#,
            confboot_util::base64::encode(wrong.key().expose()),
            confboot_util::base64::encode(wrong.salt().expose())
        ),
    )
    .unwrap();
    let recover = |ms: &str| {
        confboot(
            &[
                "recover",
                "--node",
                &recover_addr,
                "--init-secret-file",
                "init-secret",
                "--master-secret",
                ms,
                "--measurements",
                "measurements2.json",
                "--ak-trust",
                &pinned2,
            ],
            admin.path(),
        )
    };
    let out = recover("wrong-ms.json");
    assert_eq!(
        out.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("does not open"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = recover("confboot-mastersecret.json");
    assert_succeeded(&out);
    let log = wait_exit_ok(b2, "recovering bootstrapper");
    assert_logged(&log, "bootstrapped (Recovered)");
    assert_eq!(tpm2.pcr15(), marked, "a recovered node is marked again");
    println!("phase recovery: {}", secs(t));
    println!("whole scenario: {}", secs(t0));
}

/// The host's attack on Recover (and the one-at-a-time rule), with real
/// processes: the host runs the genuine image as a node of its own (its
/// own init-secret hash on the command line), inits it with its own master
/// secret, so the disk holds the host's cluster; then it boots that disk
/// with the admin's command line (the admin's init-secret hash) and calls
/// Recover with its master secret, without the admin's init secret. Each
/// is refused before the node reads its disk: PCR 15 stays unmarked, the
/// disk's bytes stay as they were, the nodelock is never taken. Two
/// Recovers at once: the second is refused at once (UNAVAILABLE) while
/// the first is checked.
#[test]
fn the_host_cannot_recover_a_node_into_its_own_cluster() {
    let admin = TempDir::new("admin-recover");
    std::fs::write(admin.path().join("init-secret"), STRONG_SECRET).unwrap();
    // The admin's hash with production's cost: a check takes long enough
    // (about 2 s in a debug build) for a second Recover to meet it.
    let admin_hash = init_secret::hash(STRONG_SECRET.as_bytes(), init_secret::DEFAULT_ITERATIONS);

    // The host's own node of the image: its init secret, its master secret.
    let host = TempDir::new("host-recover");
    let host_secret = "the host's own init secret, strong enough";
    std::fs::write(host.path().join("init-secret"), host_secret).unwrap();
    std::fs::write(host.path().join("no-secret"), "").unwrap();
    let host_hash = init_secret::hash(host_secret.as_bytes(), init_secret::MIN_ITERATIONS);
    let NodeAwaitingInit {
        dir: n,
        tpm,
        process: first,
        init_addr,
    } = NodeAwaitingInit::start(&bootstrapper_bin(), "host-recruits", IMAGE, &host_hash);
    tpm.write_policy(&host.path().join("measurements.json"));
    let pinned = format!("pinned:{}", confboot_util::hex::encode(&tpm.ak_public));
    let out = confboot(
        &[
            "init",
            "--node",
            &init_addr.to_string(),
            "--init-secret-file",
            "init-secret",
            "--measurements",
            "measurements.json",
            "--ak-trust",
            &pinned,
        ],
        host.path(),
    );
    assert_succeeded(&out);
    wait_exit_ok(first, "the host's own node");
    let hosts_disk = std::fs::read(n.p("disk.img")).unwrap();
    assert!(n.luks_uuid().is_some(), "the host's cluster is on the disk");

    // The same disk, booted with the admin's command line: no join service.
    drop(tpm);
    let tpm = n.boot_tpm(IMAGE);
    let unmarked = tpm.pcr15();
    let b = n.bootstrapper(
        &tpm,
        &[
            "--join-endpoint",
            "127.0.0.1:1",
            "--init-secret-hash",
            &admin_hash,
        ],
    );
    let recover_addr = addr_after(
        &b.wait_for_line("recovery API listening on ", 3000),
        "listening on ",
    )
    .to_string();
    let recover = |init_secret_file: &str| {
        let mut cmd = Command::new(workspace_binary("confboot"));
        cmd.args([
            "recover",
            "--node",
            &recover_addr,
            "--init-secret-file",
            init_secret_file,
            "--master-secret",
            "confboot-mastersecret.json",
            "--measurements",
            "measurements.json",
            "--ak-trust",
            &pinned,
        ])
        .current_dir(host.path())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
        cmd.spawn().unwrap()
    };
    let refused = |out: std::process::Output, why: &str| {
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        assert_eq!(out.status.code(), Some(1), "{stderr}");
        assert!(stderr.contains(why), "{stderr}\n{}", b.log().join("\n"));
        stderr
    };

    // No init secret, and the host's own: refused, the disk not read.
    for file in ["no-secret", "init-secret"] {
        let out = recover(file).wait_with_output().unwrap();
        refused(out, "PERMISSION_DENIED: wrong init secret");
    }

    // Two at once: the second is turned away while the first is checked.
    let checked_before = b
        .log()
        .iter()
        .filter(|l| l.contains("Recover received"))
        .count();
    let first = recover("init-secret");
    for _ in 0..3000 {
        let received = b
            .log()
            .iter()
            .filter(|l| l.contains("Recover received"))
            .count();
        if received > checked_before {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    let t = Instant::now();
    let second = recover("init-secret").wait_with_output().unwrap();
    let second_took = t.elapsed();
    let first = first.wait_with_output().unwrap();
    let first_took = t.elapsed();
    refused(second, "UNAVAILABLE: another Recover is being served");
    refused(first, "PERMISSION_DENIED: wrong init secret");
    println!(
        "two Recovers at once: the second refused after {second_took:?}, the first answered after {first_took:?}"
    );

    assert!(b.exited().is_none(), "the node still waits for its admin");
    let log = b.log();
    for never in ["nodelock taken", "opened", "node marked", "bootstrapped ("] {
        assert!(
            !log.iter().any(|l| l.contains(never)),
            "{never}:\n{}",
            log.join("\n")
        );
    }
    // The node is powered off (swtpm serves one connection: the node's).
    drop(b);
    assert_eq!(tpm.pcr15(), unmarked, "PCR 15 is not marked");
    assert_eq!(
        std::fs::read(n.p("disk.img")).unwrap(),
        hosts_disk,
        "the disk is as the host left it"
    );
}

#[test]
fn bootstrapper_explains_bad_configuration() {
    let out = Command::new(bootstrapper_bin())
        .arg("--nope")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("unknown option --nope"));
    let out = Command::new(bootstrapper_bin())
        .args(["--tpm", "127.0.0.1:1", "--state-disk", "/nonexistent"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("--tpm 127.0.0.1:1"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let help = Command::new(bootstrapper_bin())
        .arg("--help")
        .output()
        .unwrap();
    let help = String::from_utf8_lossy(&help.stdout);
    for opt in [
        "--state-disk",
        "--join-endpoint",
        "--init-secret-hash",
        "--joinsvc-measurements",
        "--metadata-url",
        "--attestation",
        "--joinsvc-variants",
        "--joinsvc-snp-policy",
    ] {
        assert!(help.contains(opt), "--help lacks {opt}");
    }
}

#[test]
fn confboot_init_explains_unreachable_and_mismeasured_nodes() {
    let admin = TempDir::new("admin-errors");
    std::fs::write(admin.path().join("init-secret"), STRONG_SECRET).unwrap();
    let n = NodeDir::new(&bootstrapper_bin(), "mismeasured");
    let tpm = n.boot_tpm(IMAGE);
    let n = n.trusting_join_service_ak(&tpm.ak_public);
    let mut policy = tpm.policy();
    policy.set(4, vec![0x42; 32], false);
    std::fs::write(admin.path().join("measurements.json"), policy.to_json()).unwrap();
    let pinned = format!("pinned:{}", confboot_util::hex::encode(&tpm.ak_public));
    let args = |node: &str| -> Vec<String> {
        [
            "init",
            "--node",
            node,
            "--init-secret-file",
            "init-secret",
            "--measurements",
            "measurements.json",
            "--ak-trust",
            &pinned,
        ]
        .iter()
        .map(|s| s.to_string())
        .collect()
    };
    let run = |a: Vec<String>| {
        let a: Vec<&str> = a.iter().map(String::as_str).collect();
        let out = confboot(&a, admin.path());
        assert_eq!(out.status.code(), Some(1));
        String::from_utf8_lossy(&out.stderr).to_string()
    };

    let closed = format!("127.0.0.1:{}", free_port());
    let err = run(args(&closed));
    assert!(err.contains("cannot reach the node"), "{err}");

    let hash = init_secret::hash(STRONG_SECRET.as_bytes(), init_secret::MIN_ITERATIONS);
    let b = n.bootstrapper(&tpm, &["--init-secret-hash", &hash]);
    let addr = addr_after(
        &b.wait_for_line("init API listening on ", 3000),
        "listening on ",
    )
    .to_string();
    assert!(
        !admin.path().join("confboot-mastersecret.json").exists(),
        "no secret for an unverified node"
    );
    let err = run(args(&addr));
    assert!(
        err.contains("failed verification") && err.contains("measurement 4 differs"),
        "{err}"
    );
    assert!(
        n.luks_uuid().is_none(),
        "nothing was sent to a node that failed verification"
    );
}

#[test]
fn a_node_takes_tickets_only_from_a_marked_member_running_the_expected_image() {
    // joinsvc attests with its own TPM: another image than the node's, and
    // not yet marked as a member of the cluster whose tickets it issues.
    let cp = NodeDir::new(&bootstrapper_bin(), "cp-tpm");
    let cp_tpm = cp.boot_tpm(b"control plane image");
    let (cp_ak, cp_policy) = (cp_tpm.ak_public.clone(), cp_tpm.policy());
    let n = NodeDir::new(&bootstrapper_bin(), "picky").trusting_join_service_ak(&cp_ak);
    let tpm = n.boot_tpm(IMAGE);
    let node_ak = tpm.ak_public.clone();
    let setup = || JoinsvcSetup {
        pinned_aks: vec![node_ak.clone()],
        extra: vec!["--tpm".into(), cp_tpm.tpm_arg()],
        ..JoinsvcSetup::new()
    };
    let first = setup();
    let (master, cluster_id) = (first.master_secret.clone(), first.cluster_id());
    let joinsvc = Joinsvc::launch(&workspace_binary("joinsvc"), &tpm.policy(), first);
    let endpoint = joinsvc.rpc_addr.to_string();
    let dir = TempDir::new("joinsvc-policies");
    // Each refused attempt is killed, so the node reboots (a fresh TPM)
    // before the next: swtpm keeps what a killed process left loaded.
    let mut tpm = Some(tpm);
    let mut asks = |extra: &[&str]| {
        drop(tpm.take());
        let booted = n.boot_tpm(IMAGE);
        let mut args = vec!["--join-endpoint", &endpoint];
        args.extend_from_slice(extra);
        let b = n.bootstrapper(&booted, &args);
        tpm = Some(booted);
        b
    };

    // By default a join service must run the node's own image: refused.
    let b = asks(&[]);
    let line = b.wait_for_line("not trusting the join service", 1000);
    assert!(line.contains("measurement 4"), "{line}");
    drop(b);

    // Expecting other measurements of joinsvc: refused, nothing asked, disk untouched.
    let mut other = cp_policy.clone();
    other.set(4, vec![0x42; 32], false);
    std::fs::write(dir.path().join("other.json"), other.to_json()).unwrap();
    let other_path = dir.path().join("other.json").display().to_string();
    let b = asks(&["--joinsvc-measurements", &other_path]);
    let line = b.wait_for_line("not trusting the join service", 1000);
    assert!(line.contains("measurement 4"), "{line}");
    drop(b);
    assert!(n.luks_uuid().is_none());
    assert!(joinsvc.tokens().is_empty(), "the node asked for nothing");

    // The expected image, but no member of the ticket's cluster (PCR 15
    // unmarked, as a host's own instance of the image would be): the
    // ticket is thrown away before the nodelock, the disk stays blank.
    std::fs::write(dir.path().join("cp.json"), cp_policy.to_json()).unwrap();
    let cp_path = dir.path().join("cp.json").display().to_string();
    let b = asks(&["--joinsvc-measurements", &cp_path]);
    let line = b.wait_for_line("ticket thrown away", 1000);
    assert!(line.contains("not a member"), "{line}");
    drop(b);
    drop(tpm);
    let tpm = n.boot_tpm(IMAGE);
    assert!(n.luks_uuid().is_none(), "nothing was formatted");

    // The same service once it is a marked member: joined.
    drop(joinsvc);
    cp_tpm.mark(&cluster_id);
    let joinsvc = Joinsvc::launch(
        &workspace_binary("joinsvc"),
        &tpm.policy(),
        JoinsvcSetup {
            master_secret: master,
            ..setup()
        },
    );
    let endpoint = joinsvc.rpc_addr.to_string();
    let b = n.bootstrapper(
        &tpm,
        &[
            "--join-endpoint",
            &endpoint,
            "--joinsvc-measurements",
            &cp_path,
        ],
    );
    let log = wait_exit_ok(b, "bootstrapper verifying joinsvc");
    assert_logged(&log, "bootstrapped (Joined)");
}

#[test]
fn the_admin_inits_while_one_address_holds_connections_and_the_node_still_exits() {
    let admin = TempDir::new("admin-under-load");
    std::fs::write(admin.path().join("init-secret"), STRONG_SECRET).unwrap();
    let hash = init_secret::hash(STRONG_SECRET.as_bytes(), init_secret::MIN_ITERATIONS);
    // The node's files are kept (bound) until the test ends.
    let NodeAwaitingInit {
        dir: _node,
        tpm,
        process: b,
        init_addr,
    } = NodeAwaitingInit::start(&bootstrapper_bin(), "held", IMAGE, &hash);
    tpm.write_policy(&admin.path().join("measurements.json"));
    let pinned = format!("pinned:{}", confboot_util::hex::encode(&tpm.ak_public));

    // A hostile client at 127.0.0.2 opens twelve connections (enough for
    // every worker and the whole queue), says nothing on some and trickles
    // bytes on others.
    let hostile_ip = std::net::Ipv4Addr::new(127, 0, 0, 2);
    let mut held = Vec::new();
    for i in 0..12 {
        let Ok(mut c) = confboot_tests::hostile::connect_from(hostile_ip, init_addr) else {
            continue;
        };
        if i % 2 == 0 {
            let _ = std::io::Write::write_all(&mut c, &[0x16, 0x03]);
        }
        held.push(c);
    }

    // The admin, at 127.0.0.1, inits the node all the same.
    let out = confboot(
        &[
            "init",
            "--node",
            &init_addr.to_string(),
            "--init-secret-file",
            "init-secret",
            "--measurements",
            "measurements.json",
            "--ak-trust",
            &pinned,
        ],
        admin.path(),
    );
    assert_succeeded(&out);
    // And the node exits, the hostile connections still open.
    let log = wait_exit_ok(b, "bootstrapper under held connections");
    assert_logged(&log, "bootstrapped (Initialized)");
    assert_logged(&log, "refusing connection from 127.0.0.2");
    drop(held);
}

#[test]
fn a_node_refuses_a_join_service_whose_variant_it_does_not_accept() {
    // joinsvc attests with its TPM (qemu-vtpm); the node accepts SEV-SNP
    // join services only.
    let cp = NodeDir::new(&bootstrapper_bin(), "cp-tpm-variant");
    let cp_tpm = cp.boot_tpm(b"control plane image");
    let n =
        NodeDir::new(&bootstrapper_bin(), "snp-only").trusting_join_service_ak(&cp_tpm.ak_public);
    let tpm = n.boot_tpm(IMAGE);
    let joinsvc = Joinsvc::launch(
        &workspace_binary("joinsvc"),
        &tpm.policy(),
        JoinsvcSetup {
            pinned_aks: vec![tpm.ak_public.clone()],
            extra: vec!["--tpm".into(), cp_tpm.tpm_arg()],
            ..JoinsvcSetup::new()
        },
    );
    let endpoint = joinsvc.rpc_addr.to_string();
    let snp_policy = n.p("joinsvc-snp.json");
    std::fs::write(
        &snp_policy,
        format!(
            r#"{{"measurement": {{"expected": "{}"}}, "launch": "measuredDirectBoot", "kernelHash": "1111111111111111111111111111111111111111111111111111111111111111", "initrdHash": "2222222222222222222222222222222222222222222222222222222222222222", "cmdlineHash": "3333333333333333333333333333333333333333333333333333333333333333"}}"#,
            "ab".repeat(48)
        ),
    )
    .unwrap();
    let snp_policy = snp_policy.display().to_string();
    let b = n.bootstrapper(
        &tpm,
        &[
            "--join-endpoint",
            &endpoint,
            "--joinsvc-variants",
            "sev-snp",
            "--joinsvc-snp-policy",
            &snp_policy,
        ],
    );
    b.wait_for_line(
        "peer attests with qemu-vtpm, which is not accepted here (accepted: sev-snp)",
        1000,
    );
    drop(b);
    assert!(n.luks_uuid().is_none(), "nothing was formatted");
    assert!(joinsvc.tokens().is_empty(), "the node asked for nothing");
}
