//! `--cluster-step handoff`: the bootstrapper runs no kubeadm, it hands the
//! step over to the node's OS. Init answers the admin with a kubeconfig
//! whose CA is the handed-over `pki/ca.crt`; a join writes the join's
//! parameters and secrets. Real processes on loopback, as in `cluster.rs`.

use std::path::{Path, PathBuf};
use std::process::Command;

use confboot_cluster::handoff::{Handoff, STEP_FILE};
use confboot_kms::init_secret;
use confboot_tests::cluster::{
    Joinsvc, JoinsvcSetup, NodeDir, TempDir, read_master_secret, workspace_binary,
};
use confboot_tests::{addr_after, free_port};

const IMAGE: &[u8] = b"node image v1";

fn bootstrapper_bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_bootstrapper"))
}

/// The base64 value after `key: ` in a kubeconfig, decoded.
fn kubeconfig_value(kubeconfig: &str, key: &str) -> Vec<u8> {
    let b64 = kubeconfig
        .lines()
        .find_map(|l| l.trim().strip_prefix(&format!("{key}: ")))
        .unwrap_or_else(|| panic!("no {key} in\n{kubeconfig}"));
    confboot_util::base64::decode(b64).unwrap()
}

fn confboot(args: &[&str], cwd: &Path) -> std::process::Output {
    Command::new(workspace_binary("confboot"))
        .args(args)
        .current_dir(cwd)
        .output()
        .unwrap()
}

#[test]
fn init_and_join_hand_the_cluster_step_over_and_run_no_kubeadm() {
    let admin = TempDir::new("handoff-admin");
    std::fs::write(admin.path().join("init-secret"), "handoff init secret").unwrap();
    let hash = init_secret::hash(b"handoff init secret", init_secret::MIN_ITERATIONS);

    // Node 1: Init, handed over.
    let n1 = NodeDir::new(&bootstrapper_bin(), "handoff1");
    let tpm1 = n1.boot_tpm(IMAGE);
    let n1 = n1.trusting_join_service_ak(&tpm1.ak_public);
    let handoff1 = n1.p("run/confboot");
    let b1 = n1.bootstrapper(
        &tpm1,
        &[
            "--init-secret-hash",
            &hash,
            "--cluster-step",
            "handoff",
            "--handoff-dir",
            &handoff1.to_string_lossy(),
            "--node-ip",
            "10.0.0.1",
        ],
    );
    let init_addr = addr_after(
        &b1.wait_for_line("init API listening on ", 3000),
        "listening on ",
    )
    .to_string();
    tpm1.write_policy(&admin.path().join("measurements.json"));
    let pinned = format!("pinned:{}", confboot_util::hex::encode(&tpm1.ak_public));
    let out = confboot(
        &[
            "init",
            "--node",
            &init_addr,
            "--init-secret-file",
            "init-secret",
            "--measurements",
            "measurements.json",
            "--ak-trust",
            &pinned,
        ],
        admin.path(),
    );
    assert!(
        out.status.success(),
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let (status, log) = b1.wait();
    assert!(status.success(), "{}", log.join("\n"));

    let kubeconfig = std::fs::read_to_string(admin.path().join("confboot-admin.conf")).unwrap();
    let Handoff::Init(init) = Handoff::read(&handoff1).unwrap() else {
        panic!("an init was handed over")
    };
    assert_eq!(
        kubeconfig_value(&kubeconfig, "certificate-authority-data"),
        init.ca_cert_pem,
        "the admin's kubeconfig trusts the handed-over CA"
    );
    assert_eq!(kubeconfig.as_bytes(), init.admin_kubeconfig.expose());
    assert!(
        kubeconfig.contains("server: https://10.0.0.1:6443"),
        "{kubeconfig}"
    );
    assert_eq!(init.params.node_ip, "10.0.0.1");
    assert!(!n1.p("kubeadm.log").exists(), "no kubeadm ran");
    assert!(!n1.p("kubernetes/admin.conf").exists());

    // Node 2 joins through joinsvc, handed over.
    let master = read_master_secret(&admin.path().join("confboot-mastersecret.json"));
    let cluster: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(admin.path().join("confboot-cluster.json")).unwrap(),
    )
    .unwrap();
    let salt = confboot_util::hex::decode(cluster["measurementSalt"].as_str().unwrap()).unwrap();
    let n2 =
        NodeDir::new(&bootstrapper_bin(), "handoff2").trusting_join_service_ak(&tpm1.ak_public);
    let tpm2 = n2.boot_tpm(IMAGE);
    let joinsvc = Joinsvc::launch(
        &workspace_binary("joinsvc"),
        &tpm2.policy(),
        JoinsvcSetup {
            master_secret: master.clone(),
            measurement_salt: salt,
            pinned_aks: vec![tpm2.ak_public.clone()],
            listen: format!("127.0.0.1:{}", free_port()),
            extra: vec!["--tpm".into(), tpm1.tpm_arg()],
            real_api: None,
        },
    );
    let handoff2 = n2.p("run/confboot");
    let b2 = n2.bootstrapper(
        &tpm2,
        &[
            "--join-endpoint",
            &joinsvc.rpc_addr.to_string(),
            "--cluster-step",
            "handoff",
            "--handoff-dir",
            &handoff2.to_string_lossy(),
        ],
    );
    let (status, log) = b2.wait();
    assert!(status.success(), "{}", log.join("\n"));
    assert!(
        log.iter().any(|l| l.contains("bootstrapped (Joined)")),
        "{}",
        log.join("\n")
    );
    let Handoff::Join(join) = Handoff::read(&handoff2).unwrap() else {
        panic!("a join was handed over")
    };
    assert_eq!(
        join.params.api_server_endpoint,
        joinsvc.api_server_endpoint()
    );
    assert_eq!(join.params.node_name, "handoff2");
    assert!(
        join.params.kubelet_cert.is_some(),
        "the signed kubelet certificate"
    );
    let token = String::from_utf8(join.params.token.expose().to_vec()).unwrap();
    assert_eq!(token.len(), 23);
    assert!(
        !log.iter().any(|l| l.contains(&token[7..])),
        "the token is never logged"
    );
    assert!(
        !std::fs::read_to_string(handoff2.join(STEP_FILE))
            .unwrap()
            .contains(&token[7..]),
        "the parameters file holds no secret"
    );
    assert!(!n2.p("kubeadm.log").exists(), "no kubeadm ran");
}
