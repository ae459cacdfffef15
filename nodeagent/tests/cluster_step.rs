//! `nodeagent cluster-step` with a kubeadm double (a shell script that
//! records its arguments, the configuration it was given and the files it
//! finds, and fails when told to): the handed-over init and join run
//! kubeadm with the right configuration, a failing kubeadm is retried until
//! the deadline, the handoff's secrets are gone afterwards, a step done
//! does nothing, and a bad handoff runs nothing.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{SystemTime, UNIX_EPOCH};

use confboot_cluster::handoff::{DONE_FILE, STEP_FILE, TOKEN_FILE};
use confboot_cluster::{
    ClusterBackend, HandoffBackend, InitClusterParams, JoinClusterParams, KubeletCert,
};
use confboot_kms::SecretBytes;
use confboot_tests::TempDir;

/// A node's directories, a handoff and the kubeadm double.
struct Node {
    dir: TempDir,
}

impl Node {
    /// The double fails when the file `fail` exists.
    fn new(name: &str) -> Node {
        let dir = TempDir::new(name);
        let p = |n: &str| dir.path().join(n).display().to_string();
        let script = format!(
            "#!/bin/sh\n\
             echo \"$*\" >> {log}\n\
             for f in {pki}/ca.crt {pki}/ca.key {pki}/etcd/ca.key {k8s}/admin.conf {kubelet}/kubelet.crt {kubelet}/kubelet.key; do\n\
               [ -e \"$f\" ] && echo \"found $f\" >> {log}\n\
             done\n\
             cat \"$3\" > {config}\n\
             [ -e {fail} ] && {{ echo 'the double fails' >&2; exit 1; }}\n\
             case \"$1\" in init) [ -e {k8s}/admin.conf ] || echo new > {k8s}/admin.conf ;; esac\n\
             echo \"kubeadm double: $1 done\"\n",
            log = p("kubeadm.log"),
            pki = p("etc/kubernetes/pki"),
            k8s = p("etc/kubernetes"),
            kubelet = p("kubelet"),
            config = p("kubeadm-config.json"),
            fail = p("fail"),
        );
        let kubeadm = dir.path().join("kubeadm");
        confboot_testkit::write_executable(&kubeadm, &script);
        Node { dir }
    }

    fn p(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    fn handoff(&self) -> PathBuf {
        self.p("run/confboot")
    }

    fn step(&self) -> Output {
        self.step_with(&[])
    }

    fn step_with(&self, extra: &[&str]) -> Output {
        Command::new(env!("CARGO_BIN_EXE_nodeagent"))
            .arg("cluster-step")
            .args(extra)
            .arg("--handoff")
            .arg(self.handoff())
            .arg("--kubeadm")
            .arg(self.p("kubeadm"))
            .arg("--pki-dir")
            .arg(self.p("etc/kubernetes/pki"))
            .arg("--kubernetes-dir")
            .arg(self.p("etc/kubernetes"))
            .arg("--kubeadm-config-dir")
            .arg(self.p("run/kubeadm"))
            .arg("--kubelet-cert-dir")
            .arg(self.p("kubelet"))
            .output()
            .unwrap()
    }

    fn kubeadm_log(&self) -> String {
        std::fs::read_to_string(self.p("kubeadm.log")).unwrap_or_default()
    }

    /// The files left in the handoff directory.
    fn handoff_files(&self) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(self.handoff())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    }
}

fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

fn join_params() -> JoinClusterParams {
    JoinClusterParams {
        api_server_endpoint: "10.0.0.1:6443".into(),
        token: SecretBytes::new(b"abcdef.0123456789abcdef".to_vec()),
        discovery_token_ca_cert_hash: format!("sha256:{}", "ab".repeat(32)),
        is_control_plane: true,
        control_plane_files: vec![
            ("ca.crt".into(), SecretBytes::new(b"CA CERT".to_vec())),
            ("etcd/ca.key".into(), SecretBytes::new(b"ETCD KEY".to_vec())),
        ],
        node_ip: "10.0.0.2".into(),
        kubernetes_version: "v1.31.1".into(),
        node_name: "node-2".into(),
        kubelet_cert: Some(KubeletCert {
            cert_der: b"DER".to_vec(),
            key_pem: SecretBytes::new(b"KUBELET KEY".to_vec()),
        }),
    }
}

/// Only the parameters and the done mark are left.
fn assert_secrets_gone(node: &Node, done: bool) {
    let mut want = vec![STEP_FILE.to_string()];
    if done {
        want.insert(0, DONE_FILE.into());
    }
    assert_eq!(node.handoff_files(), want);
}

#[test]
fn init_installs_the_ca_and_kubeconfig_runs_kubeadm_once_and_deletes_the_secrets() {
    let node = Node::new("step-init");
    let params = InitClusterParams {
        cluster_name: "confboot".into(),
        kubernetes_version: "v1.31.1".into(),
        node_ip: "10.0.0.1".into(),
        ..Default::default()
    };
    let kubeconfig = HandoffBackend::new(node.handoff())
        .init_cluster(&params, &mut |_| {})
        .unwrap()
        .kubeconfig;
    let ca = std::fs::read(node.handoff().join("pki/ca.crt")).unwrap();

    let out = node.step();
    let said = text(&out);
    assert!(out.status.success(), "{said}");
    let log = node.kubeadm_log();
    assert!(log.starts_with("init --config "), "{log}");
    for found in ["pki/ca.crt", "pki/ca.key", "kubernetes/admin.conf"] {
        assert!(log.contains(&format!("{found}\n")), "{found}: {log}");
    }
    let config = std::fs::read_to_string(node.p("kubeadm-config.json")).unwrap();
    assert!(config.contains("\"InitConfiguration\""), "{config}");
    assert!(
        config.contains("\"advertiseAddress\": \"10.0.0.1\""),
        "{config}"
    );
    assert!(config.contains("\"clusterName\": \"confboot\""), "{config}");
    // kubeadm found the CA and the kubeconfig made at Init, and kept them.
    assert_eq!(
        std::fs::read(node.p("etc/kubernetes/pki/ca.crt")).unwrap(),
        ca
    );
    assert_eq!(
        std::fs::read(node.p("etc/kubernetes/admin.conf")).unwrap(),
        kubeconfig.expose()
    );
    assert!(said.contains("kubeadm kept the admin kubeconfig"), "{said}");
    assert!(
        said.contains("kubeadm init succeeded after 1 attempt"),
        "{said}"
    );
    assert_secrets_gone(&node, true);

    // Done: a second run does nothing.
    let out = node.step();
    assert!(out.status.success(), "{}", text(&out));
    assert!(text(&out).contains("already done"), "{}", text(&out));
    assert_eq!(node.kubeadm_log(), log, "kubeadm ran once");
}

#[test]
fn join_runs_kubeadm_with_the_handed_over_parameters_and_deletes_the_secrets() {
    let node = Node::new("step-join");
    HandoffBackend::new(node.handoff())
        .join_cluster(&join_params(), &mut |_| {})
        .unwrap();
    let out = node.step();
    let said = text(&out);
    assert!(out.status.success(), "{said}");
    let log = node.kubeadm_log();
    assert!(log.starts_with("join --config "), "{log}");
    for found in [
        "pki/ca.crt",
        "pki/etcd/ca.key",
        "kubelet/kubelet.crt",
        "kubelet/kubelet.key",
    ] {
        assert!(log.contains(&format!("{found}\n")), "{found}: {log}");
    }
    let config = std::fs::read_to_string(node.p("kubeadm-config.json")).unwrap();
    for want in [
        "\"JoinConfiguration\"",
        "\"token\": \"abcdef.0123456789abcdef\"",
        "\"apiServerEndpoint\": \"10.0.0.1:6443\"",
        "\"name\": \"node-2\"",
        "\"controlPlane\"",
    ] {
        assert!(config.contains(want), "{want}: {config}");
    }
    assert!(!said.contains("0123456789abcdef"), "never a secret: {said}");
    assert_secrets_gone(&node, true);
    assert!(node.step().status.success());
    assert_eq!(node.kubeadm_log(), log, "kubeadm ran once");
}

#[test]
fn a_failing_join_is_retried_until_the_token_ends_then_fails_and_deletes_the_secrets() {
    let node = Node::new("step-fail");
    std::fs::write(node.p("fail"), b"").unwrap();
    HandoffBackend::new(node.handoff())
        .join_cluster(&join_params(), &mut |_| {})
        .unwrap();
    // The token ends in 4 s.
    let step_file = node.handoff().join(STEP_FILE);
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let mut step: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&step_file).unwrap()).unwrap();
    step["join"]["token_valid_until"] = (now + 4).into();
    std::fs::write(&step_file, serde_json::to_vec(&step).unwrap()).unwrap();

    let out = node.step();
    let said = text(&out);
    assert_eq!(out.status.code(), Some(1), "{said}");
    let attempts = node.kubeadm_log().matches("join --config").count();
    assert!(attempts >= 2, "retried: {attempts} runs\n{said}");
    assert!(said.contains("retrying in"), "{said}");
    assert!(
        said.contains(&format!(
            "FAILED: kubeadm join failed {attempts} times until its deadline"
        )) && said.contains("the double fails"),
        "{said}"
    );
    assert!(!said.contains("0123456789abcdef"), "never a secret: {said}");
    assert_secrets_gone(&node, false);
    // Without its secrets the handoff is refused; nothing runs.
    let out = node.step();
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out).contains("token is missing from the handoff"),
        "{}",
        text(&out)
    );
    assert_eq!(
        node.kubeadm_log().matches("join --config").count(),
        attempts
    );
}

#[test]
fn a_handoff_with_a_bad_file_is_refused_and_runs_nothing() {
    let node = Node::new("step-bad");
    HandoffBackend::new(node.handoff())
        .join_cluster(&join_params(), &mut |_| {})
        .unwrap();
    std::fs::write(node.handoff().join(TOKEN_FILE), b"Not-A-Token-secretvalue").unwrap();
    let out = node.step();
    let said = text(&out);
    assert_eq!(out.status.code(), Some(1), "{said}");
    assert!(said.contains("is unusable"), "{said}");
    assert!(!said.contains("secretvalue"), "{said}");
    assert!(
        !Path::new(&node.p("kubeadm.log")).exists(),
        "kubeadm never ran"
    );
    // An unknown kind of step too.
    let step_file = node.handoff().join(STEP_FILE);
    let step = std::fs::read_to_string(&step_file)
        .unwrap()
        .replace("\"join\",", "\"reset\",");
    std::fs::write(&step_file, step).unwrap();
    let said = text(&node.step());
    assert!(said.contains("unknown kind \"reset\""), "{said}");
    assert!(
        !Path::new(&node.p("kubeadm.log")).exists(),
        "kubeadm never ran"
    );
}

#[test]
fn the_subcommand_has_its_own_help_and_refuses_stray_arguments() {
    let out = Command::new(env!("CARGO_BIN_EXE_nodeagent"))
        .args(["cluster-step", "--help"])
        .output()
        .unwrap();
    assert!(out.status.success());
    let help = String::from_utf8_lossy(&out.stdout);
    assert!(
        help.contains("Usage: nodeagent cluster-step [OPTIONS]"),
        "{help}"
    );
    assert!(help.contains("--handoff DIR"), "{help}");
    let out = Command::new(env!("CARGO_BIN_EXE_nodeagent"))
        .args(["cluster-step", "extra"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn without_kubernetes_the_step_runs_no_kubeadm_and_deletes_the_secrets() {
    let node = Node::new("step-without-kubernetes");
    HandoffBackend::new(node.handoff())
        .join_cluster(&join_params(), &mut |_| {})
        .unwrap();
    let out = node.step_with(&["--without-kubernetes"]);
    let said = text(&out);
    assert!(out.status.success(), "{said}");
    assert!(
        said.contains("this image carries no Kubernetes: kubeadm join not run"),
        "{said}"
    );
    assert_eq!(node.kubeadm_log(), "", "kubeadm never ran");
    // The secrets are gone, and the step is not marked done.
    assert_secrets_gone(&node, false);
}

/// A `ctr` stand-in that logs its arguments into the kubeadm double's log
/// (so the order shows) and fails when the file `ctr-fail` exists.
fn ctr_double(node: &Node) -> PathBuf {
    let ctr = node.p("ctr");
    confboot_testkit::write_executable(
        &ctr,
        format!(
            "#!/bin/sh\necho \"ctr $*\" >> {log}\n[ -e {fail} ] && {{ echo 'no space left' >&2; exit 1; }}\nexit 0\n",
            log = node.p("kubeadm.log").display(),
            fail = node.p("ctr-fail").display()
        ),
    );
    ctr
}

#[test]
fn a_control_plane_imports_its_images_before_kubeadm_and_a_failed_import_runs_no_kubeadm() {
    let images = |node: &Node| {
        let dir = node.p("images");
        std::fs::create_dir_all(&dir).unwrap();
        for name in ["kube-apiserver.tar", "etcd.tar", "README"] {
            std::fs::write(dir.join(name), b"image").unwrap();
        }
        dir
    };
    let init = InitClusterParams {
        kubernetes_version: "v1.37.2".into(),
        node_ip: "10.0.0.1".into(),
        ..Default::default()
    };

    // An init imports every tarball, in name order, then runs kubeadm.
    let node = Node::new("step-images");
    HandoffBackend::new(node.handoff())
        .init_cluster(&init, &mut |_| {})
        .unwrap();
    let (ctr, dir) = (ctr_double(&node), images(&node));
    let args = [
        "--control-plane-images",
        dir.to_str().unwrap(),
        "--ctr",
        ctr.to_str().unwrap(),
    ];
    let out = node.step_with(&args);
    let said = text(&out);
    assert!(out.status.success(), "{said}");
    let log = node.kubeadm_log();
    let lines: Vec<&str> = log.lines().filter(|l| !l.starts_with("found ")).collect();
    let import = |name: &str| {
        format!(
            "ctr --namespace k8s.io images import --platform linux/amd64 {}",
            dir.join(name).display()
        )
    };
    assert_eq!(lines[0], import("etcd.tar"), "{log}");
    assert_eq!(lines[1], import("kube-apiserver.tar"), "{log}");
    assert!(lines[2].starts_with("init --config "), "{log}");
    assert_eq!(lines.len(), 3, "README is no image: {log}");
    assert!(said.contains("control-plane images imported (2)"), "{said}");

    // A worker's join imports nothing.
    let node = Node::new("step-images-worker");
    let mut worker = join_params();
    worker.is_control_plane = false;
    worker.control_plane_files.clear();
    HandoffBackend::new(node.handoff())
        .join_cluster(&worker, &mut |_| {})
        .unwrap();
    let (ctr, dir) = (ctr_double(&node), images(&node));
    let out = node.step_with(&[
        "--control-plane-images",
        dir.to_str().unwrap(),
        "--ctr",
        ctr.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", text(&out));
    assert!(
        node.kubeadm_log().starts_with("join --config "),
        "{}",
        node.kubeadm_log()
    );

    // A failed import: no kubeadm, exit 1, the secrets deleted.
    let node = Node::new("step-images-fail");
    HandoffBackend::new(node.handoff())
        .init_cluster(&init, &mut |_| {})
        .unwrap();
    let (ctr, dir) = (ctr_double(&node), images(&node));
    std::fs::write(node.p("ctr-fail"), b"").unwrap();
    let out = node.step_with(&[
        "--control-plane-images",
        dir.to_str().unwrap(),
        "--ctr",
        ctr.to_str().unwrap(),
    ]);
    let said = text(&out);
    assert_eq!(out.status.code(), Some(1), "{said}");
    assert!(
        said.contains("importing the control plane's images") && said.contains("no space left"),
        "{said}"
    );
    assert!(
        !node.kubeadm_log().contains("init --config"),
        "{}",
        node.kubeadm_log()
    );
    assert_secrets_gone(&node, false);

    // A bad --init-wait is a usage error.
    let out = node.step_with(&["--init-wait", "0"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
}
