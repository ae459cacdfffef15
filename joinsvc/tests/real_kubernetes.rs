//! joinsvc against a real Kubernetes control plane (etcd, kube-apiserver
//! and kube-controller-manager at the pinned release, one for this test
//! binary: `confboot_tests::kube::ControlPlane::shared`), running as the
//! ServiceAccount of `deploy/kubernetes/joinsvc.yaml` with exactly the Role
//! shipped there (each test's joinsvc in a namespace of its own, with that
//! Role there and in kube-system), and a ticket's token and CA hash given
//! to the real kubeadm.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Once;
use std::time::{Duration, Instant};

use confboot_tests::cluster::{Joinsvc, JoinsvcSetup, Node, RealApi};
use confboot_tests::kube::{ControlPlane, KUBERNETES_VERSION, part};
use confboot_wire::Code;

const DISK_A: &str = "0f3c6c1e-2b5d-4e8a-9c7f-1a2b3c4d5e6f";
const DISK_B: &str = "7e1d2c3b-4a59-4876-8f9e-0a1b2c3d4e5f";
const DISK_C: &str = "1d2c3b4a-5968-4776-8f9e-0a1b2c3d4e5f";

fn joinsvc_bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_joinsvc"))
}

fn manifest() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/kubernetes/joinsvc.yaml")
}

/// The shared control plane with joinsvc's manifest applied once (its
/// ServiceAccount, Role and RoleBinding, its DaemonSet with no node to run
/// on: the manifest is one a real API server takes), and a joinsvc tenant
/// of it: how a joinsvc of its own namespace reaches the API server.
fn control_plane_with_joinsvc() -> (&'static ControlPlane, RealApi) {
    static APPLIED: Once = Once::new();
    let plane = ControlPlane::shared();
    APPLIED.call_once(|| plane.apply(&manifest()));
    (plane, RealApi::tenant("real"))
}

fn start_joinsvc(node: &Node, api: &RealApi) -> Joinsvc {
    let setup = JoinsvcSetup {
        pinned_aks: vec![node.issuer.ak_public_key()],
        real_api: Some(api.clone()),
        ..JoinsvcSetup::new()
    };
    Joinsvc::launch(&joinsvc_bin(), &node.policy(), setup)
}

/// How long `kubeadm join` keeps retrying discovery (kubeadm's default is
/// 5 minutes: a refused discovery, such as a deleted token's, took that
/// long each time).
const DISCOVERY_TIMEOUT: &str = "20s";

/// `kubeadm join --dry-run` with `token` and `ca_hash` against `endpoint`:
/// discovery for real (the `cluster-info` ConfigMap fetched with the token,
/// its JWS signature checked, the CA pinned by hash, then the cluster's
/// configuration read as the bootstrap token), nothing written outside
/// the dry-run directory; discovery given up after [`DISCOVERY_TIMEOUT`].
/// Returns (success, output).
fn kubeadm_join_dry_run(endpoint: &str, token: &str, ca_hash: &str) -> (bool, String) {
    let dir = confboot_tests::TempDir::new("kubeadm-join");
    let config = dir.path().join("join.yaml");
    let join = serde_json::json!({
        "apiVersion": "kubeadm.k8s.io/v1beta4",
        "kind": "JoinConfiguration",
        "discovery": {
            "bootstrapToken": {
                "apiServerEndpoint": endpoint,
                "token": token,
                "caCertHashes": [ca_hash],
            },
            "tlsBootstrapToken": token,
        },
        "nodeRegistration": {
            "name": "dry-run-node",
            "ignorePreflightErrors": ["all"],
        },
        "timeouts": {"discovery": DISCOVERY_TIMEOUT},
    });
    std::fs::write(&config, join.to_string()).unwrap();
    let out = Command::new(part("kubeadm"))
        .args(["join", "--dry-run", "--config"])
        .arg(&config)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let text = format!(
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

/// Waits until the API server no longer authenticates `token` (its Secret
/// deleted: the authenticator reads Secrets through an informer, which
/// learns of the deletion within moments).
fn wait_token_gone(plane: &ControlPlane, token: &str) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while plane.whoami(token).is_ok() {
        assert!(
            Instant::now() < deadline,
            "a deleted token still authenticates"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
fn the_parts_carry_the_pinned_release() {
    let short = Command::new(part("kubeadm"))
        .args(["version", "-o", "short"])
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&short.stdout).trim(),
        KUBERNETES_VERSION
    );
    for program in ["kube-apiserver", "kube-controller-manager", "kubelet"] {
        let out = Command::new(part(program))
            .arg("--version")
            .output()
            .unwrap();
        assert_eq!(
            String::from_utf8_lossy(&out.stdout).trim(),
            format!("Kubernetes {KUBERNETES_VERSION}"),
            "{program} --version"
        );
    }
    let etcd = Command::new(part("etcd"))
        .arg("--version")
        .output()
        .unwrap();
    assert!(
        String::from_utf8_lossy(&etcd.stdout).contains("etcd Version: 3.7.3"),
        "{}",
        String::from_utf8_lossy(&etcd.stdout)
    );
}

/// A ticket's bootstrap token is one the real API server authenticates, in
/// the group kubeadm's RBAC grants the node-bootstrap rights to, and the
/// ticket's endpoint, token and CA hash let the real kubeadm discover the
/// cluster; a wrong CA hash and a deleted token are refused by kubeadm.
#[test]
fn a_ticket_is_what_a_real_kubeadm_join_needs() {
    let (plane, api) = control_plane_with_joinsvc();
    let node = Node::start("node", b"kernel");
    let joinsvc = start_joinsvc(&node, &api);

    let ticket = node
        .join(joinsvc.rpc_addr, DISK_A)
        .unwrap_or_else(|e| panic!("{e}\n{}", joinsvc.process.log().join("\n")));
    assert_eq!(ticket.api_server_endpoint, plane.endpoint().to_string());
    let (id, _) = ticket.token.split_once('.').expect("id.secret");

    // The Secret is in kube-system, as the bootstrap authenticator reads it.
    let secret = plane.kubectl_json(&[
        "get",
        "secret",
        &format!("bootstrap-token-{id}"),
        "-n",
        "kube-system",
    ]);
    assert_eq!(secret["type"], "bootstrap.kubernetes.io/token");

    let (user, groups) = plane
        .whoami(&ticket.token)
        .expect("the API server authenticates the token");
    assert_eq!(user, format!("system:bootstrap:{id}"));
    assert!(
        groups.iter().any(|g| g == "system:bootstrappers"),
        "{groups:?}"
    );
    assert!(
        groups
            .iter()
            .any(|g| g == "system:bootstrappers:kubeadm:default-node-token"),
        "the group kubeadm's RBAC binds: {groups:?}"
    );

    let (ok, out) = kubeadm_join_dry_run(
        &ticket.api_server_endpoint,
        &ticket.token,
        &ticket.discovery_token_ca_cert_hash,
    );
    assert!(
        ok,
        "kubeadm join discovers the cluster with the ticket:\n{out}"
    );

    let wrong = format!("sha256:{}", "ab".repeat(32));
    let (ok, out) = kubeadm_join_dry_run(&ticket.api_server_endpoint, &ticket.token, &wrong);
    assert!(!ok, "a wrong CA hash must be refused:\n{out}");
    assert!(
        out.contains("none of the public keys") || out.contains("pinned"),
        "{out}"
    );

    plane.kubectl(&[
        "delete",
        "secret",
        &format!("bootstrap-token-{id}"),
        "-n",
        "kube-system",
    ]);
    wait_token_gone(plane, &ticket.token);
    let (ok, out) = kubeadm_join_dry_run(
        &ticket.api_server_endpoint,
        &ticket.token,
        &ticket.discovery_token_ca_cert_hash,
    );
    assert!(!ok, "a deleted token must be refused:\n{out}");
}

/// joinsvc's Role, exactly as shipped, is enough for its work on the real
/// API server: a bootstrap-token Secret per node, the VPN peer registry
/// created and then replaced under the API server's optimistic
/// concurrency. With one verb taken from the Role, the real authorizer
/// refuses joinsvc at once (a 403 is not retried) and the node gets no
/// ticket.
#[test]
fn the_shipped_role_is_exactly_enough() {
    let begin = Instant::now();
    let (plane, api) = control_plane_with_joinsvc();
    let node = Node::start("node", b"kernel");
    let joinsvc = start_joinsvc(&node, &api);
    eprintln!(
        "joinsvc up {:.1} s after the test began",
        begin.elapsed().as_secs_f64()
    );

    for disk in [DISK_A, DISK_B] {
        node.join(joinsvc.rpc_addr, disk)
            .unwrap_or_else(|e| panic!("{e}\n{}", joinsvc.process.log().join("\n")));
    }
    let tokens = joinsvc.tokens();
    assert_eq!(tokens.len(), 2, "a token per ticket: {tokens:?}");

    // The Role without `create` on Secrets: the API server says 403.
    // (The tenant's copy of the Role in kube-system, where Secrets are.)
    plane.kubectl(&[
        "patch",
        "role",
        &format!("confboot-joinsvc-{}", api.namespace),
        "-n",
        "kube-system",
        "--type=json",
        r#"-p=[{"op":"remove","path":"/rules/0"}]"#,
    ]);
    let narrowed = Instant::now();
    let deadline = narrowed + Duration::from_secs(60);
    let err = loop {
        let attempt = Instant::now();
        let result = node.join(joinsvc.rpc_addr, DISK_C);
        eprintln!(
            "a join {:.1} s after the Role was narrowed took {:.1} s: {}",
            attempt.duration_since(narrowed).as_secs_f64(),
            attempt.elapsed().as_secs_f64(),
            if result.is_ok() { "served" } else { "refused" }
        );
        match result {
            Err(e) => break e,
            Ok(_) => {
                assert!(
                    Instant::now() < deadline,
                    "the narrowed Role never took effect"
                );
                std::thread::sleep(Duration::from_millis(500));
            }
        }
    };
    assert_ne!(err.code, Code::Ok);
    assert!(
        err.message.contains("403") && err.message.contains("forbidden"),
        "the node is told the API server's refusal: {err:?}"
    );
    let log = joinsvc.process.log().join("\n");
    assert!(
        log.contains("403") || log.to_lowercase().contains("forbidden"),
        "{log}"
    );
    eprintln!("the role test took {:.1} s", begin.elapsed().as_secs_f64());
}

/// A kubeconfig for the TLS bootstrap with a ticket's endpoint and token,
/// trusting the CA discovery pinned (what `kubeadm join` leaves in
/// `bootstrap-kubelet.conf`).
fn bootstrap_kubeconfig(path: &Path, endpoint: &str, ca_pem: &str, token: &str) {
    let ca = confboot_util::base64::encode(ca_pem.as_bytes());
    let conf = serde_json::json!({
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "c", "cluster": {"server": format!("https://{endpoint}"), "certificate-authority-data": ca}}],
        "users": [{"name": "tls-bootstrap-token-user", "user": {"token": token}}],
        "contexts": [{"name": "c", "context": {"cluster": "c", "user": "tls-bootstrap-token-user"}}],
        "current-context": "c",
    });
    std::fs::write(path, conf.to_string()).unwrap();
}

/// kubemark's hollow kubelet (the real kubelet's code with a fake container
/// runtime: no runtime runs here) named `name`, bootstrapping with
/// `bootstrap`.
fn hollow_kubelet(dir: &Path, name: &str, bootstrap: &Path) -> confboot_tests::ChildProcess {
    let mut c = Command::new(part("kubemark"));
    c.args(["--morph=kubelet", &format!("--name={name}")])
        .arg(format!("--bootstrap-kubeconfig={}", bootstrap.display()))
        .arg(format!(
            "--kubeconfig={}",
            dir.join("kubelet.conf").display()
        ))
        .arg(format!("--cert-dir={}/", dir.join("pki").display()))
        .arg(format!("--kubelet-port={}", confboot_tests::free_port()))
        .arg(format!(
            "--kubelet-read-only-port={}",
            confboot_tests::free_port()
        ))
        .arg("--use-host-image-service=false")
        .arg("--kube-api-content-type=application/json")
        .stdout(Stdio::null());
    confboot_tests::ChildProcess::spawn("hollow kubelet", c)
}

/// The node's `Ready` condition's status, if the Node exists.
fn node_ready(plane: &ControlPlane, name: &str) -> Option<String> {
    let out = plane
        .kubectl_command(&["get", "node", name, "-o", "json"])
        .output()
        .unwrap();
    if !out.status.success() {
        return None;
    }
    let node: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    node["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == "Ready")
        .and_then(|c| c["status"].as_str().map(String::from))
}

/// A ticket's token makes a kubelet's TLS bootstrap end in a Node that is
/// `Ready` (the kubelet's CSR created as the bootstrap token, approved and
/// signed by the controller manager); once the token is deleted (the node
/// removed, or the token cleaner), the same bootstrap is refused.
#[test]
fn a_ticket_token_bootstraps_a_kubelet_into_a_ready_node() {
    let (plane, api) = control_plane_with_joinsvc();
    let node = Node::start("node", b"kernel");
    let joinsvc = start_joinsvc(&node, &api);
    let ticket = node
        .join(joinsvc.rpc_addr, DISK_A)
        .unwrap_or_else(|e| panic!("{e}\n{}", joinsvc.process.log().join("\n")));

    let dir = confboot_tests::TempDir::new("hollow-kubelet");
    let bootstrap = dir.path().join("bootstrap-kubelet.conf");
    bootstrap_kubeconfig(
        &bootstrap,
        &ticket.api_server_endpoint,
        &plane.ca_pem(),
        &ticket.token,
    );
    let begin = Instant::now();
    let kubelet = hollow_kubelet(dir.path(), "worker-1", &bootstrap);
    let deadline = begin + Duration::from_secs(240);
    while node_ready(plane, "worker-1").as_deref() != Some("True") {
        assert!(
            kubelet.exited().is_none(),
            "the kubelet exited:\n{}",
            kubelet.log().join("\n")
        );
        assert!(
            Instant::now() < deadline,
            "worker-1 never became Ready:\n{}",
            kubelet.log().join("\n")
        );
        std::thread::sleep(Duration::from_millis(500));
    }
    eprintln!(
        "worker-1 Ready {:.1} s after its kubelet started",
        begin.elapsed().as_secs_f64()
    );
    let (id, _) = ticket.token.split_once('.').unwrap();
    let csrs = plane.kubectl_json(&["get", "csr"]);
    let csr = csrs["items"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["spec"]["username"] == format!("system:bootstrap:{id}").as_str())
        .expect("the kubelet's CSR, made as the ticket's bootstrap token");
    assert_eq!(
        csr["spec"]["signerName"],
        "kubernetes.io/kube-apiserver-client-kubelet"
    );
    assert!(csr["status"]["certificate"].is_string(), "signed: {csr}");
    drop(kubelet);

    // The token deleted: a kubelet bootstrapping with it gets nowhere.
    plane.kubectl(&[
        "delete",
        "secret",
        &format!("bootstrap-token-{id}"),
        "-n",
        "kube-system",
    ]);
    wait_token_gone(plane, &ticket.token);
    let dir2 = confboot_tests::TempDir::new("hollow-kubelet");
    let kubelet = hollow_kubelet(dir2.path(), "worker-2", &bootstrap);
    // Refused by the API server (401), twice: its retry fares no better.
    let refused = "the server has asked for the client to provide credentials";
    let deadline = Instant::now() + Duration::from_secs(60);
    while kubelet.log().iter().filter(|l| l.contains(refused)).count() < 2 {
        assert!(
            Instant::now() < deadline,
            "the kubelet's bootstrap with a deleted token was never refused:\n{}",
            kubelet.log().join("\n")
        );
        std::thread::sleep(Duration::from_millis(250));
    }
    assert!(
        node_ready(plane, "worker-2").is_none(),
        "no Node for a deleted token"
    );
    assert!(
        !dir2.path().join("kubelet.conf").exists(),
        "no credentials for a deleted token"
    );
    drop(kubelet);
}
