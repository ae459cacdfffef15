//! A real Kubernetes control plane as processes on loopback: etcd,
//! kube-apiserver and kube-controller-manager, built from their Go modules
//! at the pinned release by `scripts/kubernetes.sh`, configured the way
//! `kubeadm init` configures them.
//!
//! [`ControlPlane::start`] runs, in a directory of its own:
//! - real `kubeadm init phase certs all` and `kubeadm init phase kubeconfig`
//!   for the cluster's PKI (ECDSA P-256) and the components' kubeconfigs;
//! - etcd on loopback (plain HTTP, no fsync: a test's data);
//! - kube-apiserver with kubeadm's flags: client certificates from the
//!   cluster CA, bootstrap-token authentication, `Node,RBAC`
//!   authorization, `NodeRestriction`, real service-account signing keys;
//! - kube-controller-manager with the bootstrap signer, the token cleaner
//!   and the CSR signer and approver, signing with the cluster CA;
//! - real `kubeadm init phase upload-config all` and `kubeadm init phase
//!   bootstrap-token`, which leave what `kubeadm join` reads: the
//!   `kubeadm-config` and `kubelet-config` ConfigMaps, the `cluster-info`
//!   ConfigMap in kube-public, and the RBAC that lets bootstrap tokens
//!   read them, post CSRs and have them approved.
//!
//! The admin talks to it with the real kubectl ([`ControlPlane::kubectl`])
//! as `system:masters` (kubeadm's super-admin kubeconfig). A test that
//! needs the parts and runs where they are not built stops with the line
//! that says what to run ([`crate::stop_for_missing_setup`]).

use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::OnceLock;

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::{ChildProcess, TempDir, free_port, stop_for_missing_setup};

/// The Kubernetes release the parts are built at (`scripts/kubernetes.sh`):
/// the pinned release the CLI and joinsvc default to.
pub const KUBERNETES_VERSION: &str = confboot_proto::api::PINNED_KUBERNETES_VERSION;

/// How long the control plane may take to answer `/readyz` once started
/// (etcd and the API server on a loaded two-core machine).
const START_DEADLINE: Duration = Duration::from_secs(180);

/// The directory holding the built Kubernetes parts (`kube-apiserver`,
/// `kube-controller-manager`, `kubeadm`, `kubelet`, `kubemark`, `kubectl`,
/// `etcd`): `$CONFBOOT_KUBE_BIN`, else what `scripts/kubernetes.sh --print`
/// names. Stops the test process with what to run when they are absent.
pub fn parts_dir() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        if let Some(dir) = std::env::var_os("CONFBOOT_KUBE_BIN") {
            return PathBuf::from(dir);
        }
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts/kubernetes.sh");
        let out = Command::new("bash")
            .arg(&script)
            .arg("--print")
            .stderr(Stdio::null())
            .output()
            .unwrap_or_else(|e| panic!("running {}: {e}", script.display()));
        let dir = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
        if !out.status.success() || !dir.join("kube-apiserver").is_file() {
            stop_for_missing_setup(
                "the Kubernetes parts are not built: run scripts/setup.sh (or scripts/kubernetes.sh) first",
            );
        }
        dir
    })
}

/// One of the built Kubernetes programs.
pub fn part(name: &str) -> PathBuf {
    let path = parts_dir().join(name);
    assert!(path.is_file(), "{} is not built", path.display());
    path
}

/// Runs a command to its end; panics with its output if it fails.
fn run(what: &str, command: &mut Command) -> Output {
    let out = command
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("cannot run {what}: {e}"));
    assert!(
        out.status.success(),
        "{what} failed ({}):\n{}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// A real control plane on loopback (see the module documentation); its
/// processes are ended when it is dropped.
pub struct ControlPlane {
    endpoint: SocketAddr,
    started_in: Duration,
    /// The shared plane's watchdog ([`ControlPlane::shared`]): it ends the
    /// processes once the test process has exited.
    _watchdog: Option<std::process::Child>,
    // Dropped in this order: the controller manager, the API server, etcd.
    controller_manager: ChildProcess,
    api_server: ChildProcess,
    etcd: ChildProcess,
    dir: TempDir,
}

impl ControlPlane {
    /// Starts etcd, the API server and the controller manager, and has
    /// kubeadm upload what a join needs; returns once the API server is
    /// ready and the bootstrap signer has signed `cluster-info`.
    pub fn start() -> ControlPlane {
        ControlPlane::start_with(&PlaneOptions::default())
    }

    /// [`ControlPlane::start`] with `options`: where the cluster's nodes
    /// reach the API server, when that is not the host's loopback.
    pub fn start_with(options: &PlaneOptions) -> ControlPlane {
        let begin = Instant::now();
        let dir = TempDir::new("control-plane");
        let path = |name: &str| dir.path().join(name);
        let port = free_port();
        let endpoint = SocketAddr::from(([127, 0, 0, 1], port));
        std::fs::write(
            path("kubeadm.yaml"),
            kubeadm_config(dir.path(), port, options),
        )
        .unwrap();
        let kubeadm = |args: &[&str]| {
            let mut c = Command::new(part("kubeadm"));
            c.args(["init", "phase"]).args(args);
            c.arg("--config").arg(path("kubeadm.yaml"));
            c
        };
        run("kubeadm init phase certs", &mut kubeadm(&["certs", "all"]));
        for conf in ["super-admin", "controller-manager"] {
            run(
                "kubeadm init phase kubeconfig",
                kubeadm(&["kubeconfig", conf])
                    .arg("--kubeconfig-dir")
                    .arg(dir.path()),
            );
        }

        // kubeadm points the components' kubeconfigs at the local API
        // endpoint (the host's address): here they use loopback.
        for conf in ["super-admin.conf", "controller-manager.conf"] {
            let text = std::fs::read_to_string(path(conf)).unwrap();
            let text: String = text
                .lines()
                .map(|l| match l.trim_start().strip_prefix("server: ") {
                    Some(_) => format!("    server: https://127.0.0.1:{port}\n"),
                    None => format!("{l}\n"),
                })
                .collect();
            std::fs::write(path(conf), text).unwrap();
        }

        let (client, peer) = (free_port(), free_port());
        let mut etcd = Command::new(part("etcd"));
        etcd.arg("--name=harness")
            .arg(format!("--data-dir={}", path("etcd").display()))
            .arg(format!("--listen-client-urls=http://127.0.0.1:{client}"))
            .arg(format!("--advertise-client-urls=http://127.0.0.1:{client}"))
            .arg(format!("--listen-peer-urls=http://127.0.0.1:{peer}"))
            .arg(format!(
                "--initial-advertise-peer-urls=http://127.0.0.1:{peer}"
            ))
            .arg(format!("--initial-cluster=harness=http://127.0.0.1:{peer}"))
            .arg("--unsafe-no-fsync")
            .arg("--log-level=warn");
        etcd.stdout(Stdio::null());
        let etcd = ChildProcess::spawn("etcd", etcd);

        let pki = |name: &str| {
            path("pki")
                .join(name)
                .into_os_string()
                .into_string()
                .unwrap()
        };
        let mut api = Command::new(part("kube-apiserver"));
        api.arg("--advertise-address=127.0.0.1")
            .arg("--bind-address=127.0.0.1")
            .arg(format!("--secure-port={port}"))
            .arg(format!("--etcd-servers=http://127.0.0.1:{client}"))
            .arg("--allow-privileged=true")
            .arg("--authorization-mode=Node,RBAC")
            .arg("--enable-admission-plugins=NodeRestriction")
            .arg("--enable-bootstrap-token-auth=true")
            .arg(format!("--client-ca-file={}", pki("ca.crt")))
            .arg(format!("--tls-cert-file={}", pki("apiserver.crt")))
            .arg(format!("--tls-private-key-file={}", pki("apiserver.key")))
            .arg(format!(
                "--kubelet-client-certificate={}",
                pki("apiserver-kubelet-client.crt")
            ))
            .arg(format!(
                "--kubelet-client-key={}",
                pki("apiserver-kubelet-client.key")
            ))
            .arg("--kubelet-preferred-address-types=InternalIP,ExternalIP,Hostname")
            .arg(format!(
                "--proxy-client-cert-file={}",
                pki("front-proxy-client.crt")
            ))
            .arg(format!(
                "--proxy-client-key-file={}",
                pki("front-proxy-client.key")
            ))
            .arg(format!(
                "--requestheader-client-ca-file={}",
                pki("front-proxy-ca.crt")
            ))
            .arg("--requestheader-allowed-names=front-proxy-client")
            .arg("--requestheader-extra-headers-prefix=X-Remote-Extra-")
            .arg("--requestheader-group-headers=X-Remote-Group")
            .arg("--requestheader-username-headers=X-Remote-User")
            .arg("--service-account-issuer=https://kubernetes.default.svc.cluster.local")
            .arg(format!("--service-account-key-file={}", pki("sa.pub")))
            .arg(format!(
                "--service-account-signing-key-file={}",
                pki("sa.key")
            ))
            .arg("--service-cluster-ip-range=10.96.0.0/12")
            .arg("--endpoint-reconciler-type=none")
            .arg("-v=1");
        api.stdout(Stdio::null());
        let api_server = ChildProcess::spawn("kube-apiserver", api);

        let mut kcm = Command::new(part("kube-controller-manager"));
        let conf = path("controller-manager.conf");
        kcm.arg(format!("--kubeconfig={}", conf.display()))
            .arg(format!("--authentication-kubeconfig={}", conf.display()))
            .arg(format!("--authorization-kubeconfig={}", conf.display()))
            .arg("--bind-address=127.0.0.1")
            // No health port: nothing here reads it, and a port picked
            // free may be taken by another test before the process binds
            // it (seen with the VM tests running beside).
            .arg("--secure-port=0")
            .arg(format!("--client-ca-file={}", pki("ca.crt")))
            .arg(format!(
                "--requestheader-client-ca-file={}",
                pki("front-proxy-ca.crt")
            ))
            .arg("--cluster-name=confboot-test")
            .arg(format!("--cluster-signing-cert-file={}", pki("ca.crt")))
            .arg(format!("--cluster-signing-key-file={}", pki("ca.key")))
            .arg(format!("--root-ca-file={}", pki("ca.crt")))
            .arg(format!(
                "--service-account-private-key-file={}",
                pki("sa.key")
            ))
            .arg("--use-service-account-credentials=true")
            .arg("--leader-elect=false")
            .arg(
                "--controllers=bootstrap-signer-controller,token-cleaner-controller,\
                 certificatesigningrequest-signing-controller,\
                 certificatesigningrequest-approving-controller,\
                 certificatesigningrequest-cleaner-controller,\
                 serviceaccount-token-controller,serviceaccount-controller,\
                 root-ca-certificate-publisher-controller",
            )
            .arg("-v=1")
            .stdout(Stdio::null());

        let mut plane = ControlPlane {
            endpoint,
            started_in: Duration::ZERO,
            _watchdog: None,
            controller_manager: ChildProcess::spawn("kube-controller-manager", kcm),
            api_server,
            etcd,
            dir,
        };
        plane.wait_ready(begin + START_DEADLINE);
        let admin = plane.admin_kubeconfig();
        for phase in [
            &["upload-config", "all"][..],
            &["bootstrap-token", "--skip-token-print"],
        ] {
            let mut c = Command::new(part("kubeadm"));
            c.args(["init", "phase"]).args(phase);
            c.arg("--config").arg(plane.dir.path().join("kubeadm.yaml"));
            c.arg("--kubeconfig").arg(&admin);
            run("kubeadm init phase (upload)", &mut c);
        }
        plane.wait_cluster_info_signed(begin + START_DEADLINE);
        if let Some(endpoint) = &options.node_endpoint {
            plane.serve_nodes_at(endpoint, begin + START_DEADLINE);
        }
        plane.started_in = begin.elapsed();
        plane
    }

    /// Makes what `kubeadm join` reads on a node name the node's side:
    /// `cluster-info`'s kubeconfig (what discovery and then the kubelet's
    /// TLS bootstrap use) points at `endpoint`, and the cluster's
    /// configuration (`kubeadm-config`, `kubelet-config`) names the PKI
    /// directory a node has ([`NODE_PKI_DIR`]), not the harness's. Waits for
    /// the bootstrap signer to sign the new `cluster-info`.
    fn serve_nodes_at(&self, endpoint: &str, deadline: Instant) {
        let harness_pki = self.pki_dir().display().to_string();
        for name in ["kubeadm-config", "kubelet-config"] {
            let mut map = self.kubectl_json(&["get", "configmap", name, "-n", "kube-system"]);
            for value in map["data"]
                .as_object_mut()
                .expect("the ConfigMap's data")
                .values_mut()
            {
                if let Some(text) = value.as_str() {
                    *value = Value::String(text.replace(&harness_pki, NODE_PKI_DIR));
                }
            }
            let file = self.dir.path().join(format!("{name}.json"));
            std::fs::write(&file, map.to_string()).unwrap();
            self.kubectl(&["replace", "-f", file.to_str().unwrap()]);
        }
        let mut info =
            self.kubectl_json(&["get", "configmap", "cluster-info", "-n", "kube-public"]);
        let data = info["data"].as_object_mut().expect("cluster-info's data");
        let kubeconfig = data["kubeconfig"].as_str().expect("its kubeconfig");
        let kubeconfig: String = kubeconfig
            .lines()
            .map(|l| match l.trim_start().strip_prefix("server: ") {
                Some(_) => format!("    server: https://{endpoint}\n"),
                None => format!("{l}\n"),
            })
            .collect();
        data.insert("kubeconfig".into(), Value::String(kubeconfig));
        // The old signatures go: the signer signs the new content again.
        data.retain(|k, _| !k.starts_with("jws-kubeconfig-"));
        let file = self.dir.path().join("cluster-info.json");
        std::fs::write(&file, info.to_string()).unwrap();
        self.kubectl(&["replace", "-f", file.to_str().unwrap()]);
        self.wait_cluster_info_signed(deadline);
    }

    /// The control plane this test process shares: started by the first
    /// test that asks, and ended (its processes killed, its directory
    /// removed) by a watchdog once the test process has exited, since a
    /// static is never dropped. Tests that share it keep apart by their
    /// own namespace ([`ControlPlane::namespace`]) or object names.
    pub fn shared() -> &'static ControlPlane {
        static SHARED: OnceLock<ControlPlane> = OnceLock::new();
        SHARED.get_or_init(|| {
            let mut plane = ControlPlane::start();
            plane.watch_over(std::process::id());
            eprintln!(
                "shared control plane ready in {:.1} s",
                plane.started_in().as_secs_f64()
            );
            plane
        })
    }

    /// Starts a watchdog that kills this plane's processes and removes its
    /// directory once the process `owner` is gone.
    fn watch_over(&mut self, owner: u32) {
        let pids: Vec<String> = [&self.controller_manager, &self.api_server, &self.etcd]
            .iter()
            .map(|p| p.id().to_string())
            .collect();
        let mut c = Command::new("sh");
        c.arg("-c")
            .arg(
                "owner=$1; dir=$2; shift 2; \
                 while kill -0 \"$owner\" 2>/dev/null; do sleep 1; done; \
                 kill -9 \"$@\" 2>/dev/null; sleep 1; rm -rf \"$dir\"",
            )
            .arg("control-plane-watchdog")
            .arg(owner.to_string())
            .arg(self.dir.path())
            .args(&pids)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        // Never waited for: it outlives this process by design.
        self._watchdog = Some(c.spawn().expect("start the control plane's watchdog"));
    }

    /// A fresh namespace named `<prefix>-<n>` (unique in this process and
    /// across processes sharing nothing: each has its own plane).
    pub fn namespace(&self, prefix: &str) -> String {
        static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let name = format!("{prefix}-{n}");
        self.kubectl(&["create", "namespace", &name]);
        name
    }

    /// joinsvc's ServiceAccount, Role and RoleBinding exactly as
    /// `deploy/kubernetes/joinsvc.yaml` ships them, but in `namespace`
    /// (kube-system itself when it is that), applied with the real
    /// kubectl; returns a token of the ServiceAccount. The Role's rules at
    /// the indices `drop_rules` are left out.
    pub fn joinsvc_account(&self, namespace: &str, drop_rules: &[usize]) -> String {
        let text = std::fs::read_to_string(joinsvc_manifest()).unwrap();
        let dir = TempDir::new("joinsvc-account");
        let mut names = Vec::new();
        for (i, doc) in text.split("\n---\n").enumerate() {
            let kind = doc
                .lines()
                .find_map(|l| l.strip_prefix("kind: "))
                .unwrap_or_default();
            if !matches!(kind, "ServiceAccount" | "Role" | "RoleBinding") {
                continue;
            }
            let doc = doc.replace("namespace: kube-system", &format!("namespace: {namespace}"));
            let file = dir.path().join(format!("{i}.yaml"));
            std::fs::write(&file, doc).unwrap();
            names.push(file);
        }
        assert_eq!(names.len(), 3, "the manifest's account, Role and binding");
        for file in &names {
            self.apply(file);
        }
        let mut drop_rules = drop_rules.to_vec();
        drop_rules.sort_unstable();
        for rule in drop_rules.into_iter().rev() {
            self.kubectl(&[
                "patch",
                "role",
                "confboot-joinsvc",
                "-n",
                namespace,
                "--type=json",
                &format!(r#"-p=[{{"op":"remove","path":"/rules/{rule}"}}]"#),
            ]);
        }
        self.service_account_token(namespace, "confboot-joinsvc")
    }

    fn wait_ready(&self, deadline: Instant) {
        loop {
            for (name, p) in [
                ("etcd", &self.etcd),
                ("kube-apiserver", &self.api_server),
                ("kube-controller-manager", &self.controller_manager),
            ] {
                if let Some(status) = p.exited() {
                    panic!("{name} exited ({status}):\n{}", p.log().join("\n"));
                }
            }
            if TcpStream::connect_timeout(&self.endpoint, Duration::from_millis(200)).is_ok() {
                let out = self
                    .kubectl_command(&["get", "--raw=/readyz"])
                    .output()
                    .unwrap();
                if out.status.success() {
                    return;
                }
            }
            assert!(
                Instant::now() < deadline,
                "the API server was not ready by its deadline:\n{}",
                self.api_server.log().join("\n")
            );
            std::thread::sleep(Duration::from_millis(250));
        }
    }

    /// Waits for the bootstrap signer (in the controller manager) to sign
    /// `cluster-info` with the token kubeadm made, as discovery needs.
    fn wait_cluster_info_signed(&self, deadline: Instant) {
        loop {
            let info =
                self.kubectl_json(&["get", "configmap", "cluster-info", "-n", "kube-public"]);
            if info["data"]
                .as_object()
                .is_some_and(|d| d.keys().any(|k| k.starts_with("jws-kubeconfig-")))
            {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "the bootstrap signer never signed cluster-info:\n{}",
                self.controller_manager.log().join("\n")
            );
            std::thread::sleep(Duration::from_millis(250));
        }
    }

    /// How long [`ControlPlane::start`] took, from nothing to a signed
    /// `cluster-info`.
    pub fn started_in(&self) -> Duration {
        self.started_in
    }

    /// The API server's address (`127.0.0.1:port`).
    pub fn endpoint(&self) -> SocketAddr {
        self.endpoint
    }

    /// The API server's URL.
    pub fn url(&self) -> String {
        format!("https://{}", self.endpoint)
    }

    /// kubeadm's PKI directory of this cluster (`ca.crt`, `ca.key`, ...).
    pub fn pki_dir(&self) -> PathBuf {
        self.dir.path().join("pki")
    }

    /// The cluster CA certificate's file.
    pub fn ca_cert_path(&self) -> PathBuf {
        self.pki_dir().join("ca.crt")
    }

    /// The cluster CA certificate (PEM), which also serves the API server.
    pub fn ca_pem(&self) -> String {
        std::fs::read_to_string(self.ca_cert_path()).unwrap()
    }

    /// kubeadm's super-admin kubeconfig (`system:masters`).
    pub fn admin_kubeconfig(&self) -> PathBuf {
        self.dir.path().join("super-admin.conf")
    }

    /// The real kubectl as the cluster's admin, ready to run with `args`.
    pub fn kubectl_command(&self, args: &[&str]) -> Command {
        let mut c = Command::new(part("kubectl"));
        c.arg("--kubeconfig").arg(self.admin_kubeconfig());
        c.arg("--request-timeout=30s");
        c.args(args);
        c.stdin(Stdio::null());
        c
    }

    /// Runs kubectl as the admin; panics with its output if it fails.
    pub fn kubectl(&self, args: &[&str]) -> String {
        let out = run("kubectl", &mut self.kubectl_command(args));
        String::from_utf8(out.stdout).unwrap()
    }

    /// `kubectl ... -o json`, parsed.
    pub fn kubectl_json(&self, args: &[&str]) -> Value {
        let mut all = args.to_vec();
        all.extend(["-o", "json"]);
        serde_json::from_str(&self.kubectl(&all)).unwrap()
    }

    /// Applies a manifest file (server-side validation, as `kubectl apply`
    /// does against a real cluster).
    pub fn apply(&self, manifest: &Path) {
        self.kubectl(&["apply", "-f", manifest.to_str().unwrap()]);
    }

    /// A token of the ServiceAccount `namespace/name` from the TokenRequest
    /// API (as the kubelet mounts into a pod).
    pub fn service_account_token(&self, namespace: &str, name: &str) -> String {
        self.kubectl(&["create", "token", name, "-n", namespace, "--duration=2h"])
            .trim()
            .to_string()
    }

    /// The identity the API server gives the bearer `token`
    /// (a SelfSubjectReview): `(username, groups)`, or the HTTP error
    /// kubectl reports (an unauthenticated token).
    pub fn whoami(&self, token: &str) -> Result<(String, Vec<String>), String> {
        let mut c = Command::new(part("kubectl"));
        c.arg(format!("--server={}", self.url()))
            .arg(format!(
                "--certificate-authority={}",
                self.ca_cert_path().display()
            ))
            .arg(format!("--token={token}"))
            .args(["--request-timeout=30s", "auth", "whoami", "-o", "json"])
            .stdin(Stdio::null());
        let out = c.output().unwrap();
        if !out.status.success() {
            return Err(String::from_utf8_lossy(&out.stderr).trim().to_string());
        }
        let v: Value = serde_json::from_slice(&out.stdout).unwrap();
        let info = &v["status"]["userInfo"];
        Ok((
            info["username"].as_str().unwrap_or_default().to_string(),
            info["groups"]
                .as_array()
                .map(|g| {
                    g.iter()
                        .filter_map(|x| x.as_str().map(String::from))
                        .collect()
                })
                .unwrap_or_default(),
        ))
    }

    /// The logs of etcd, the API server and the controller manager.
    pub fn logs(&self) -> String {
        format!(
            "== etcd\n{}\n== kube-apiserver\n{}\n== kube-controller-manager\n{}",
            self.etcd.log().join("\n"),
            self.api_server.log().join("\n"),
            self.controller_manager.log().join("\n")
        )
    }
}

/// joinsvc's manifest (`deploy/kubernetes/joinsvc.yaml`).
pub fn joinsvc_manifest() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/kubernetes/joinsvc.yaml")
}

/// kubeadm's PKI directory on a node (its default `certificatesDir`).
pub const NODE_PKI_DIR: &str = "/etc/kubernetes/pki";

/// Options of [`ControlPlane::start_with`].
#[derive(Clone, Debug, Default)]
pub struct PlaneOptions {
    /// The API server's address (`host:port`) as the cluster's nodes reach
    /// it, e.g. a VM's forwarded address of the host's loopback port: the
    /// cluster's `controlPlaneEndpoint`, a name of the API server's serving
    /// certificate, and the server of `cluster-info`'s kubeconfig (so
    /// discovery and the kubelet use it). The host's own clients keep using
    /// loopback. `None`: loopback for everyone.
    pub node_endpoint: Option<String>,
}

/// kubeadm's configuration of the harness's cluster (JSON documents, which
/// kubeadm reads as YAML): the pinned release, ECDSA keys, the API server
/// on `127.0.0.1:port` (and `options`' node endpoint), the PKI under `dir`.
fn kubeadm_config(dir: &Path, port: u16, options: &PlaneOptions) -> String {
    let mut sans = vec!["127.0.0.1".to_string(), "localhost".to_string()];
    if let Some(endpoint) = &options.node_endpoint {
        let host = endpoint
            .rsplit_once(':')
            .map_or(endpoint.as_str(), |(h, _)| h);
        sans.push(host.to_string());
    }
    let init = json!({
        "apiVersion": "kubeadm.k8s.io/v1beta4",
        "kind": "InitConfiguration",
        // No advertise address: kubeadm takes loopback as a selector of a
        // global address on `lo`, and picks the host's own otherwise (only
        // the serving certificate's names carry it); every client here
        // uses the control-plane endpoint on loopback.
        "localAPIEndpoint": {"bindPort": port},
        "nodeRegistration": {"name": "harness-control-plane"},
    });
    let cluster = json!({
        "apiVersion": "kubeadm.k8s.io/v1beta4",
        "kind": "ClusterConfiguration",
        "kubernetesVersion": KUBERNETES_VERSION,
        "clusterName": "confboot-test",
        "certificatesDir": dir.join("pki"),
        "controlPlaneEndpoint": options
            .node_endpoint
            .clone()
            .unwrap_or_else(|| format!("127.0.0.1:{port}")),
        "encryptionAlgorithm": "ECDSA-P256",
        "networking": {
            "serviceSubnet": "10.96.0.0/12",
            "podSubnet": "10.244.0.0/16",
            "dnsDomain": "cluster.local",
        },
        "apiServer": {"certSANs": sans},
    });
    format!("{init}\n---\n{cluster}\n")
}

/// joinsvc's ServiceAccount, Role and RoleBinding as
/// `deploy/kubernetes/joinsvc.yaml` ships them, as JSON (the real kubectl
/// reads the manifest, on the client only; once per process).
fn shipped_joinsvc_account(plane: &ControlPlane) -> &'static [Value] {
    static SHIPPED: OnceLock<Vec<Value>> = OnceLock::new();
    SHIPPED.get_or_init(|| {
        let text = std::fs::read_to_string(joinsvc_manifest()).unwrap();
        let docs: Vec<&str> = text
            .split("\n---\n")
            .filter(|doc| {
                doc.lines()
                    .find_map(|l| l.strip_prefix("kind: "))
                    .is_some_and(|k| matches!(k, "ServiceAccount" | "Role" | "RoleBinding"))
            })
            .collect();
        assert_eq!(docs.len(), 3, "the manifest's account, Role and binding");
        let dir = TempDir::new("joinsvc-account");
        let file = dir.path().join("account.yaml");
        std::fs::write(&file, docs.join("\n---\n")).unwrap();
        // One JSON object after another.
        let out = plane.kubectl(&[
            "create",
            "--dry-run=client",
            "-o",
            "json",
            "-f",
            file.to_str().unwrap(),
        ]);
        serde_json::Deserializer::from_str(&out)
            .into_iter::<Value>()
            .map(|v| v.expect("kubectl's JSON"))
            .collect()
    })
}

/// The label joinsvc puts on the bootstrap-token Secrets it creates: the
/// namespace it keeps its ConfigMaps in (`--kube-namespace`).
pub const TOKEN_NAMESPACE_LABEL: &str = "confboot.io/joinsvc-namespace";

/// One joinsvc's place on a shared control plane
/// ([`ControlPlane::joinsvc_tenant`]): its namespace and its
/// ServiceAccount's token.
#[derive(Clone, Debug)]
pub struct JoinsvcTenant {
    /// Where its registry and ledger ConfigMaps are (`--kube-namespace`).
    pub namespace: String,
    /// A token of its ServiceAccount (`confboot-joinsvc` in the namespace).
    pub token: String,
}

/// A bootstrap-token Secret as the API server holds it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StoredToken {
    /// `token-id`.
    pub id: String,
    /// `token-secret`.
    pub secret: String,
}

impl ControlPlane {
    /// A joinsvc tenant of this plane, with one `kubectl apply`: a fresh
    /// namespace `<prefix>-<n>` with joinsvc's ServiceAccount, Role and
    /// RoleBinding of `deploy/kubernetes/joinsvc.yaml` in it (for its
    /// ConfigMaps), and in kube-system the Role's rules on Secrets (for the
    /// bootstrap tokens, which must be there) as the Role
    /// `confboot-joinsvc-<namespace>`, bound to that account; nothing of
    /// kube-system's ConfigMaps, so a joinsvc that wrote there instead of
    /// its namespace would be refused. The Role's rules at the indices
    /// `drop_rules` are left out of both.
    pub fn joinsvc_tenant(&self, prefix: &str, drop_rules: &[usize]) -> JoinsvcTenant {
        static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let namespace = format!("{prefix}-{n}");
        let shipped = shipped_joinsvc_account(self);
        let of_kind = |kind: &str| {
            shipped
                .iter()
                .find(|d| d["kind"] == kind)
                .unwrap_or_else(|| panic!("the manifest's {kind}"))
                .clone()
        };
        let (mut account, mut role, mut binding) = (
            of_kind("ServiceAccount"),
            of_kind("Role"),
            of_kind("RoleBinding"),
        );
        for doc in [&mut account, &mut role, &mut binding] {
            doc["metadata"]["namespace"] = json!(namespace);
        }
        for subject in binding["subjects"].as_array_mut().unwrap() {
            subject["namespace"] = json!(namespace);
        }
        let rules: Vec<Value> = role["rules"]
            .as_array()
            .unwrap()
            .iter()
            .enumerate()
            .filter(|(i, _)| !drop_rules.contains(i))
            .map(|(_, r)| r.clone())
            .collect();
        role["rules"] = json!(rules);
        let on_secrets: Vec<&Value> = rules
            .iter()
            .filter(|r| {
                r["resources"]
                    .as_array()
                    .is_some_and(|x| x.iter().any(|x| x == "secrets"))
            })
            .collect();
        let system_role = format!("confboot-joinsvc-{namespace}");
        let list = json!({
            "apiVersion": "v1",
            "kind": "List",
            "items": [
                {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}},
                account,
                role,
                binding,
                {
                    "apiVersion": "rbac.authorization.k8s.io/v1",
                    "kind": "Role",
                    "metadata": {"name": system_role, "namespace": "kube-system"},
                    "rules": on_secrets,
                },
                {
                    "apiVersion": "rbac.authorization.k8s.io/v1",
                    "kind": "RoleBinding",
                    "metadata": {"name": system_role, "namespace": "kube-system"},
                    "roleRef": {
                        "apiGroup": "rbac.authorization.k8s.io",
                        "kind": "Role",
                        "name": system_role,
                    },
                    "subjects": [{
                        "kind": "ServiceAccount",
                        "name": account["metadata"]["name"],
                        "namespace": namespace,
                    }],
                },
            ],
        });
        let dir = TempDir::new("joinsvc-tenant");
        let file = dir.path().join("tenant.json");
        std::fs::write(&file, list.to_string()).unwrap();
        self.apply(&file);
        let name = account["metadata"]["name"].as_str().unwrap();
        let token = self.service_account_token(&namespace, name);
        JoinsvcTenant { namespace, token }
    }

    /// The ids of every bootstrap-token Secret in kube-system (kubeadm's
    /// own and every tenant's).
    pub fn bootstrap_token_ids(&self) -> Vec<String> {
        self.bootstrap_tokens(&[])
            .into_iter()
            .map(|t| t.id)
            .collect()
    }

    /// The bootstrap-token Secrets the joinsvc of `namespace` created (by
    /// their [`TOKEN_NAMESPACE_LABEL`]), oldest first.
    pub fn bootstrap_tokens_of(&self, namespace: &str) -> Vec<StoredToken> {
        self.bootstrap_tokens(&[&format!("--selector={TOKEN_NAMESPACE_LABEL}={namespace}")])
    }

    fn bootstrap_tokens(&self, selector: &[&str]) -> Vec<StoredToken> {
        let mut args = vec![
            "get",
            "secrets",
            "-n",
            "kube-system",
            "--field-selector=type=bootstrap.kubernetes.io/token",
            "--sort-by=.metadata.creationTimestamp",
        ];
        args.extend_from_slice(selector);
        let list = self.kubectl_json(&args);
        let decoded = |s: &Value, key: &str| {
            s["data"][key]
                .as_str()
                .map(|b| String::from_utf8(confboot_util::base64::decode(b).unwrap()).unwrap())
                .unwrap_or_default()
        };
        list["items"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| StoredToken {
                id: decoded(s, "token-id"),
                secret: decoded(s, "token-secret"),
            })
            .collect()
    }

    /// The ConfigMap `namespace/name` as the API server holds it, if it
    /// exists.
    pub fn configmap(&self, namespace: &str, name: &str) -> Option<Value> {
        let out = self
            .kubectl_command(&["get", "configmap", name, "-n", namespace, "-o", "json"])
            .output()
            .unwrap();
        if out.status.success() {
            return Some(serde_json::from_slice(&out.stdout).unwrap());
        }
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("NotFound"), "kubectl get configmap: {err}");
        None
    }

    /// Deletes the ConfigMap `namespace/name` (nothing if there is none),
    /// as a host with the API's credentials or an etcd restored from
    /// before the object was made would leave it.
    pub fn delete_configmap(&self, namespace: &str, name: &str) {
        self.kubectl(&[
            "delete",
            "configmap",
            name,
            "-n",
            namespace,
            "--ignore-not-found",
        ]);
    }

    /// Sets the ConfigMap `namespace/name`'s `data` (creating the object
    /// if it is gone), as another writer of the API would. The real API
    /// server gives it a new `resourceVersion`: a copy put back this way
    /// has the old content under a newer version (an etcd restored from an
    /// old snapshot, which also moves the version back, cannot be played
    /// on a shared control plane).
    pub fn put_configmap_data(&self, namespace: &str, name: &str, data: Value) {
        let object = serde_json::json!({
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": name, "namespace": namespace},
            "data": data,
        });
        let dir = TempDir::new("configmap");
        let file = dir.path().join("configmap.json");
        std::fs::write(&file, object.to_string()).unwrap();
        let path = file.to_str().unwrap();
        let verb = if self.configmap(namespace, name).is_some() {
            "replace"
        } else {
            "create"
        };
        self.kubectl(&[verb, "-f", path]);
    }
}
