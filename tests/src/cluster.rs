//! Fixtures for tests and demos with real processes: a joinsvc process with
//! its files, talking to a real Kubernetes API server (by default the test
//! process's shared control plane, [`crate::kube::ControlPlane::shared`],
//! in a namespace of its own), and nodes, each with its own swtpm, that
//! ask for tickets over aTLS.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use confboot_attest::{Issuer, MeasurementPolicy};
use confboot_cluster::ticket::{JoinTicket, RejoinTicket};
use confboot_kms::MasterSecret;
use confboot_proto::join::{IssueJoinTicketRequest, IssueRejoinTicketRequest};
use confboot_tpm::swtpm::Swtpm;
use confboot_vtpm::VtpmIssuer;
use confboot_wire::Status;

pub use crate::TempDir;
use crate::kube::{ControlPlane, StoredToken};
use crate::tickets::SealedClient;
use crate::{ChildProcess, addr_after};

/// A vTPM issuer over `swtpm` after `kernel` was measured into PCR 4 (as
/// firmware measures the kernel it boots).
fn measured_issuer(swtpm: &Swtpm, kernel: &[u8]) -> VtpmIssuer {
    let issuer =
        VtpmIssuer::new(swtpm.connect().expect("connect to swtpm")).expect("attestation key");
    let digest: [u8; 32] = ring::digest::digest(&ring::digest::SHA256, kernel)
        .as_ref()
        .try_into()
        .unwrap();
    issuer
        .with_tpm(|tpm| tpm.pcr_extend(4, &digest))
        .expect("extend PCR 4");
    issuer
}

/// A node: its own swtpm and the vTPM issuer over it.
pub struct Node {
    /// The node's name, for messages.
    pub name: String,
    /// Its TPM's attestation evidence issuer.
    pub issuer: Arc<VtpmIssuer>,
    _swtpm: Swtpm,
}

impl Node {
    /// Starts a node whose PCR 4 holds `kernel` measured (as firmware would
    /// measure the kernel it boots).
    pub fn start(name: &str, kernel: &[u8]) -> Node {
        crate::require_program("swtpm", "swtpm");
        let swtpm = Swtpm::start().expect("swtpm starts");
        let issuer = measured_issuer(&swtpm, kernel);
        Node {
            name: name.to_string(),
            issuer: Arc::new(issuer),
            _swtpm: swtpm,
        }
    }

    /// The process id of the node's swtpm.
    pub fn swtpm_pid(&self) -> u32 {
        self._swtpm.pid()
    }

    /// The node's current PCR values.
    pub fn pcrs(&self) -> Vec<(u32, [u8; 32])> {
        self.issuer
            .with_tpm(|tpm| tpm.pcr_read_all())
            .expect("read PCRs")
    }

    /// A policy that expects this node's PCRs 0 to 9 (and PCR 15 is checked
    /// by the validator itself).
    pub fn policy(&self) -> MeasurementPolicy {
        let mut p = MeasurementPolicy::default();
        for (i, v) in self.pcrs().into_iter().filter(|(i, _)| *i <= 9) {
            p.set(i, v.to_vec(), false);
        }
        p
    }

    /// Asks joinsvc at `addr` for a join ticket, first checking that joinsvc
    /// attests to `joinsvc_validator`'s policy (an unattested or differently
    /// measured join service is refused before anything is sent). The
    /// ticket's secrets come sealed to this connection's key, and are
    /// opened.
    pub fn join_verifying(
        &self,
        addr: SocketAddr,
        disk_uuid: &str,
        joinsvc_validator: Arc<dyn confboot_attest::Validator>,
    ) -> Result<JoinTicket, confboot_atls::AtlsError> {
        let mut client = SealedClient::connect(
            addr,
            Duration::from_secs(20),
            &[joinsvc_validator],
            self.issuer.clone() as Arc<dyn Issuer>,
        )?;
        assert!(
            client.service.is_some(),
            "a validator was given, so joinsvc must have attested"
        );
        let req = IssueJoinTicketRequest {
            disk_uuid: disk_uuid.into(),
            ..Default::default()
        };
        client.join(&req, Duration::from_secs(20)).map_err(|s| {
            confboot_atls::AtlsError::Io(confboot_atls::AtlsIo::Socket(
                confboot_util::IoFailure::bare(std::io::Error::other(s.to_string())),
            ))
        })
    }

    /// An aTLS RPC client to `addr` in which this node attests and offers
    /// a fresh sealing key.
    pub fn connect(&self, addr: SocketAddr) -> Result<SealedClient, Status> {
        let issuer = self.issuer.clone() as Arc<dyn Issuer>;
        SealedClient::connect(addr, Duration::from_secs(20), &[], issuer).map_err(|e| e.status())
    }

    /// Asks joinsvc at `addr` for a join ticket for disk `disk_uuid`
    /// (its sealed secrets opened).
    pub fn join(&self, addr: SocketAddr, disk_uuid: &str) -> Result<JoinTicket, Status> {
        let req = IssueJoinTicketRequest {
            disk_uuid: disk_uuid.into(),
            ..Default::default()
        };
        self.connect(addr)?.join(&req, Duration::from_secs(20))
    }

    /// Asks joinsvc at `addr` for a rejoin ticket (its sealed secrets
    /// opened).
    pub fn rejoin(&self, addr: SocketAddr, disk_uuid: &str) -> Result<RejoinTicket, Status> {
        let req = IssueRejoinTicketRequest {
            disk_uuid: disk_uuid.into(),
        };
        self.connect(addr)?.rejoin(&req, Duration::from_secs(20))
    }
}

/// How a joinsvc is set up: its secrets, trusted AKs, address and extra flags.
pub struct JoinsvcSetup {
    /// The master secret it holds.
    pub master_secret: MasterSecret,
    /// The measurement salt it hands out.
    pub measurement_salt: Vec<u8>,
    /// AK public keys (SEC1 points) it trusts.
    pub pinned_aks: Vec<Vec<u8>>,
    /// `--listen` (default `127.0.0.1:0`).
    pub listen: String,
    /// More command-line arguments (with `--reference-values-dir`, no
    /// `--policy` is given).
    pub extra: Vec<String>,
    /// The Kubernetes API it talks to (none: a namespace of its own on the
    /// shared control plane, [`RealApi::tenant`]).
    pub real_api: Option<RealApi>,
}

/// How a joinsvc reaches a real API server ([`crate::kube::ControlPlane`]):
/// as a pod of `deploy/kubernetes/joinsvc.yaml` does, with its
/// ServiceAccount's token, and with the cluster's PKI directory.
#[derive(Clone)]
pub struct RealApi {
    /// The API server's URL.
    pub url: String,
    /// The CA bundle (PEM) that serves it.
    pub ca_pem: String,
    /// The bearer token (a ServiceAccount token).
    pub token: String,
    /// kubeadm's PKI directory of the cluster (`ca.crt`, `ca.key`).
    pub pki_dir: PathBuf,
    /// The endpoint a ticket names for `kubeadm join`.
    pub endpoint: String,
    /// Where its ConfigMaps are (`--kube-namespace`); its Role must cover
    /// this namespace and Secrets in kube-system.
    pub namespace: String,
}

impl RealApi {
    /// A joinsvc's place on the shared control plane: a fresh namespace
    /// `<prefix>-<n>` with its own ServiceAccount and the shipped Role
    /// there and in kube-system ([`ControlPlane::joinsvc_tenant`]).
    pub fn tenant(prefix: &str) -> RealApi {
        let plane = ControlPlane::shared();
        let tenant = plane.joinsvc_tenant(prefix, &[]);
        RealApi {
            url: plane.url(),
            ca_pem: plane.ca_pem(),
            token: tenant.token,
            pki_dir: plane.pki_dir(),
            endpoint: plane.endpoint().to_string(),
            namespace: tenant.namespace,
        }
    }

    /// The same API reached through a proxy at `url` serving with `ca_pem`
    /// (a [`crate::kube_proxy::FaultProxy`]).
    pub fn through(mut self, url: String, ca_pem: &str) -> RealApi {
        self.url = url;
        self.ca_pem = ca_pem.to_string();
        self
    }
}

impl JoinsvcSetup {
    /// A fresh master secret, a fixed measurement salt, no trusted AK, any port.
    pub fn new() -> JoinsvcSetup {
        JoinsvcSetup {
            master_secret: MasterSecret::generate().unwrap(),
            measurement_salt: vec![0x5a; 32],
            pinned_aks: Vec::new(),
            listen: "127.0.0.1:0".into(),
            extra: Vec::new(),
            real_api: None,
        }
    }
}

impl JoinsvcSetup {
    /// The id of the cluster this joinsvc admits to: what PCR 15 of a
    /// member (joinsvc's own TPM too) is marked with.
    pub fn cluster_id(&self) -> Vec<u8> {
        let salt = confboot_kms::MeasurementSalt::new(self.measurement_salt.clone())
            .expect("the setup's measurement salt is of a valid length");
        confboot_kms::derive_cluster_id(self.master_secret.measurement_secret().expose(), &salt)
            .to_vec()
    }
}

impl Default for JoinsvcSetup {
    fn default() -> Self {
        JoinsvcSetup::new()
    }
}

/// A joinsvc process with its files and its Kubernetes API.
pub struct Joinsvc {
    /// The master secret it holds.
    pub master_secret: MasterSecret,
    /// The measurement salt it hands out.
    pub measurement_salt: Vec<u8>,
    /// How it reaches its Kubernetes API.
    api: RealApi,
    /// The process.
    pub process: ChildProcess,
    /// The join API's address.
    pub rpc_addr: SocketAddr,
    /// The health/metrics address.
    pub http_addr: SocketAddr,
    /// The cluster CA certificate (PEM) it signs kubelet certificates with.
    pub ca_cert_path: PathBuf,
    policy_path: PathBuf,
    /// The binary and its arguments, to start it again ([`Joinsvc::restart`]).
    command: (PathBuf, Vec<std::ffi::OsString>),
    dir: TempDir,
}

impl Joinsvc {
    /// The namespace of its ConfigMaps (`--kube-namespace`).
    pub fn namespace(&self) -> &str {
        &self.api.namespace
    }

    /// The API server endpoint its tickets name.
    pub fn api_server_endpoint(&self) -> &str {
        &self.api.endpoint
    }

    /// The bootstrap-token Secrets this joinsvc created (those labelled
    /// with its namespace, oldest first), as the shared control plane
    /// holds them.
    pub fn tokens(&self) -> Vec<StoredToken> {
        ControlPlane::shared().bootstrap_tokens_of(&self.api.namespace)
    }

    /// Its ConfigMap `name` (the registry's or the ledger's), as the
    /// shared control plane holds it.
    pub fn configmap(&self, name: &str) -> Option<serde_json::Value> {
        ControlPlane::shared().configmap(&self.api.namespace, name)
    }

    /// Deletes its ConfigMap `name` (a host's move on the ledger).
    pub fn delete_configmap(&self, name: &str) {
        ControlPlane::shared().delete_configmap(&self.api.namespace, name)
    }

    /// Sets its ConfigMap `name`'s `data`, as another writer of the API
    /// would ([`ControlPlane::put_configmap_data`]).
    pub fn put_configmap_data(&self, name: &str, data: serde_json::Value) {
        ControlPlane::shared().put_configmap_data(&self.api.namespace, name, data)
    }

    /// Puts an earlier copy (from [`Joinsvc::configmap`]) of its ConfigMap
    /// `name` back: its content, under the newer `resourceVersion` the
    /// real API server gives every write.
    pub fn restore_configmap(&self, name: &str, object: serde_json::Value) {
        self.put_configmap_data(name, object["data"].clone())
    }

    /// The admin's `binary --remove-vpn-peer NAME --vpn-cidr CIDR` against
    /// this joinsvc's Kubernetes API (its CA and token written into `dir`),
    /// ready to run.
    pub fn remove_vpn_peer_command(
        &self,
        binary: &Path,
        name: &str,
        cidr: &str,
        dir: &Path,
    ) -> Command {
        let (ca, token) = (dir.join("kube-ca.crt"), dir.join("kube-token"));
        std::fs::write(&ca, &self.api.ca_pem).unwrap();
        std::fs::write(&token, &self.api.token).unwrap();
        let mut command = Command::new(binary);
        command
            .args(["--remove-vpn-peer", name, "--vpn-cidr", cidr])
            .args(["--kube-api", &self.api.url])
            .args(["--kube-namespace", &self.api.namespace])
            .arg("--kube-api-ca")
            .arg(ca)
            .arg("--kube-api-token-file")
            .arg(token);
        command
    }

    /// Starts `binary` (a joinsvc build) trusting the AKs of `nodes` (pinned)
    /// with `policy`.
    pub fn start(binary: &Path, policy: &MeasurementPolicy, trusted: &[&Node]) -> Joinsvc {
        Joinsvc::start_with(binary, policy, trusted, &[])
    }

    /// [`Joinsvc::start`] with extra command-line arguments.
    pub fn start_with(
        binary: &Path,
        policy: &MeasurementPolicy,
        trusted: &[&Node],
        extra: &[&str],
    ) -> Joinsvc {
        let setup = JoinsvcSetup {
            pinned_aks: trusted.iter().map(|n| n.issuer.ak_public_key()).collect(),
            extra: extra.iter().map(|s| s.to_string()).collect(),
            ..JoinsvcSetup::new()
        };
        Joinsvc::launch(binary, policy, setup)
    }

    /// Starts `binary` as `setup` says.
    pub fn launch(binary: &Path, policy: &MeasurementPolicy, setup: JoinsvcSetup) -> Joinsvc {
        let dir = TempDir::new("joinsvc");
        let p = |name: &str| dir.path().join(name);
        let JoinsvcSetup {
            master_secret,
            measurement_salt,
            pinned_aks,
            listen,
            extra,
            real_api,
        } = setup;
        std::fs::write(
            p("master-secret.json"),
            format!(
                r#"{{"key": "{}", "salt": "{}"}}"#,
                confboot_util::base64::encode(master_secret.key().expose()),
                confboot_util::base64::encode(master_secret.salt().expose())
            ),
        )
        .unwrap();
        std::fs::write(p("policy.json"), policy.to_json()).unwrap();
        let pinned: Vec<String> = pinned_aks
            .iter()
            .map(|k| confboot_util::hex::encode(k))
            .collect();
        std::fs::write(p("pinned-aks"), pinned.join("\n")).unwrap();
        // The cluster CA (its certificate for the discovery hash, its key
        // in the PKI directory for kubelet certificates, as on a control
        // plane) is the real cluster's.
        let api = real_api.unwrap_or_else(|| RealApi::tenant("joinsvc"));
        std::fs::write(p("kube-ca.crt"), &api.ca_pem).unwrap();
        std::fs::write(p("kube-token"), &api.token).unwrap();
        let ca_cert_path = api.pki_dir.join("ca.crt");

        let mut args: Vec<std::ffi::OsString> = Vec::new();
        let mut arg = |name: &str, value: &dyn AsRef<std::ffi::OsStr>| {
            args.push(name.into());
            args.push(value.as_ref().to_owned());
        };
        arg("--listen", &listen);
        arg("--health-listen", &"127.0.0.1:0");
        arg("--master-secret", &p("master-secret.json"));
        arg(
            "--measurement-salt",
            &confboot_util::hex::encode(&measurement_salt),
        );
        // Signed reference-value sets take the policy file's place.
        if !extra.iter().any(|a| a == "--reference-values-dir") {
            arg("--policy", &p("policy.json"));
        }
        arg(
            "--ak-trust",
            &format!("pinned:{}", p("pinned-aks").display()),
        );
        arg("--api-server-endpoint", &api.endpoint);
        arg("--kubernetes-ca", &ca_cert_path);
        arg("--pki-dir", &api.pki_dir);
        arg("--kube-api", &api.url);
        arg("--kube-api-ca", &p("kube-ca.crt"));
        arg("--kube-api-token-file", &p("kube-token"));
        arg("--kube-namespace", &api.namespace);
        // Its durable state in the test's directory, not the machine's.
        if !extra.iter().any(|a| a == "--state-dir") {
            arg("--state-dir", &p("state"));
        }
        arg("-v", &"4");
        args.extend(extra.into_iter().map(Into::into));
        let (process, rpc_addr, http_addr) = Joinsvc::spawn(binary, &args);
        Joinsvc {
            master_secret,
            measurement_salt,
            api,
            process,
            rpc_addr,
            http_addr,
            ca_cert_path,
            policy_path: p("policy.json"),
            command: (binary.to_path_buf(), args),
            dir,
        }
    }

    /// Runs the binary with `args`; returns the process and the addresses
    /// it logs.
    fn spawn(binary: &Path, args: &[std::ffi::OsString]) -> (ChildProcess, SocketAddr, SocketAddr) {
        let mut cmd = Command::new(binary);
        cmd.args(args);
        let process = ChildProcess::spawn("joinsvc", cmd);
        let rpc_addr = addr_after(
            &process.wait_for_line("join API listening on ", 3000),
            "listening on ",
        );
        let http_addr = addr_after(
            &process.wait_for_line("health and metrics listening on ", 3000),
            "listening on ",
        );
        (process, rpc_addr, http_addr)
    }

    /// Runs joinsvc's binary once more with the arguments it was started
    /// with, the value of each `(flag, value)` in `replace` replaced, and
    /// returns how it ended (for a configuration it must refuse to start
    /// with: it exits before it listens, beside this process).
    pub fn run_replacing(&self, replace: &[(&str, &str)]) -> std::process::Output {
        let (binary, args) = &self.command;
        let mut args = args.clone();
        for (flag, value) in replace {
            let i = args
                .iter()
                .position(|a| a == *flag)
                .unwrap_or_else(|| panic!("joinsvc was started without {flag}"));
            args[i + 1] = (*value).into();
        }
        Command::new(binary)
            .args(&args)
            .output()
            .expect("run joinsvc")
    }

    /// Starts joinsvc again, as its supervisor (a Kubernetes Deployment)
    /// does after it died: the same files, the same Kubernetes API and
    /// namespace, the same addresses. A process still running is killed first
    /// (SIGKILL). Returns the log of the process it replaces.
    pub fn restart(&mut self) -> Vec<String> {
        let (binary, args) = &self.command;
        let mut args = args.clone();
        for (flag, addr) in [
            ("--listen", self.rpc_addr),
            ("--health-listen", self.http_addr),
        ] {
            let i = args
                .iter()
                .position(|a| a == flag)
                .expect("joinsvc was started with the flag");
            args[i + 1] = addr.to_string().into();
        }
        self.process.kill();
        let old = self.process.log();
        let (process, rpc_addr, http_addr) = Joinsvc::spawn(binary, &args);
        assert_eq!(rpc_addr, self.rpc_addr, "joinsvc listens where it did");
        self.process = process;
        self.http_addr = http_addr;
        old
    }

    /// Replaces the policy file the way a config-map update does: write a
    /// new file, rename it over the old one.
    pub fn replace_policy(&self, policy: &MeasurementPolicy) {
        let tmp = self.dir.path().join("policy.json.new");
        std::fs::write(&tmp, policy.to_json()).unwrap();
        std::fs::rename(&tmp, &self.policy_path).unwrap();
    }

    /// GETs `path` from the health/metrics port: (status, body).
    pub fn http_get(&self, path: &str) -> (u16, String) {
        use std::io::{Read, Write};
        let mut s = std::net::TcpStream::connect(self.http_addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        write!(
            s,
            "GET {path} HTTP/1.1\r\nHost: test\r\nConnection: close\r\n\r\n"
        )
        .unwrap();
        let mut resp = String::new();
        s.read_to_string(&mut resp).unwrap();
        let code = resp
            .split_whitespace()
            .nth(1)
            .and_then(|c| c.parse().ok())
            .unwrap_or(0);
        let body = resp
            .split_once("\r\n\r\n")
            .map(|(_, b)| b.to_string())
            .unwrap_or_default();
        (code, body)
    }
}

/// A node's TPM for tests that run the real bootstrapper: a swtpm whose
/// PCR 4 holds a measured "kernel", with the AK and PCRs read once and the
/// connection closed again (swtpm serves one client at a time; the
/// bootstrapper process is that client).
pub struct NodeTpm {
    /// The running swtpm.
    pub swtpm: Swtpm,
    /// The AK's public key (SEC1 point), for pinning.
    pub ak_public: Vec<u8>,
    /// PCR values after the "boot".
    pub pcrs: Vec<(u32, [u8; 32])>,
}

impl NodeTpm {
    /// "Boots" a TPM kept in `state_dir`: starts swtpm there (PCRs start
    /// from zero, the AK persists) and measures `kernel` into PCR 4.
    pub fn boot(state_dir: &Path, kernel: &[u8]) -> NodeTpm {
        crate::require_program("swtpm", "swtpm");
        let swtpm = Swtpm::start_in(state_dir).expect("swtpm starts");
        let issuer = measured_issuer(&swtpm, kernel);
        let pcrs = issuer
            .with_tpm(|tpm| tpm.pcr_read_all())
            .expect("read PCRs");
        let ak_public = issuer.ak_public_key();
        drop(issuer);
        NodeTpm {
            swtpm,
            ak_public,
            pcrs,
        }
    }

    /// A policy expecting this TPM's PCRs 0 to 9.
    pub fn policy(&self) -> MeasurementPolicy {
        let mut p = MeasurementPolicy::default();
        for (i, v) in self.pcrs.iter().filter(|(i, _)| *i <= 9) {
            p.set(*i, v.to_vec(), false);
        }
        p
    }

    /// Writes [`NodeTpm::policy`] as JSON to `path`: the measurements file
    /// an admin checks this node against.
    pub fn write_policy(&self, path: &Path) {
        std::fs::write(path, self.policy().to_json())
            .unwrap_or_else(|e| panic!("write {}: {e}", path.display()));
    }

    /// PCR 15 now (read on a new connection: call it when no bootstrapper
    /// holds the TPM).
    pub fn pcr15(&self) -> [u8; 32] {
        let mut tpm = self.swtpm.connect().expect("connect to swtpm");
        tpm.pcr_read(&[15]).expect("read PCR 15")[0].1
    }

    /// Marks the TPM as a bootstrapped member of the cluster `cluster_id`
    /// is derived for (PCR 15), as the bootstrapper does; on a new
    /// connection, so call it when no process holds the TPM.
    pub fn mark(&self, cluster_id: &[u8]) {
        let mut tpm = self.swtpm.connect().expect("connect to swtpm");
        confboot_cluster::mark::mark_node(&mut tpm, cluster_id).expect("extend PCR 15");
    }

    /// `--tpm` for the bootstrapper.
    pub fn tpm_arg(&self) -> String {
        self.swtpm.addr().to_string()
    }
}

/// A binary of this workspace next to the running test's own directory
/// (`cargo test --workspace` builds every package's binaries before any test
/// runs, because each package with binaries has integration tests).
pub fn workspace_binary(name: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("test executable path");
    let dir = exe
        .parent()
        .and_then(Path::parent)
        .expect("target/<profile>");
    let path = dir.join(name);
    if !path.exists() {
        crate::stop_for_missing_setup(&format!(
            "{} is missing: run `cargo build --workspace --bins` first \
             (`cargo test --workspace` builds every binary before it tests)",
            path.display()
        ));
    }
    path
}

/// A node run as a bootstrapper process: its files (TPM state, a sparse
/// 32 MiB state-disk image, a kubeadm **double** — a script that records its
/// command lines and writes the admin kubeconfig as kubeadm does, since
/// Kubernetes cannot run here — and what it writes).
pub struct NodeDir {
    dir: TempDir,
    bootstrapper: PathBuf,
    joinsvc_ak_trust: Option<String>,
    node_name: String,
}

impl NodeDir {
    /// A blank node that runs `bootstrapper`.
    pub fn new(bootstrapper: &Path, name: &str) -> NodeDir {
        // The bootstrapper's header-only disk mode runs cryptsetup.
        crate::require_program("cryptsetup", "cryptsetup-bin");
        let dir = TempDir::new(name);
        std::fs::create_dir_all(dir.path().join("tpm")).unwrap();
        std::fs::create_dir_all(dir.path().join("kubernetes/pki")).unwrap();
        // A sparse 32 MiB blank disk.
        let disk = std::fs::File::create(dir.path().join("disk.img")).unwrap();
        disk.set_len(32 << 20).unwrap();
        // The kubeadm double; on join it also records whether the kubelet's
        // certificate and key are installed, as the kubelet needs them.
        let script = format!(
            "#!/bin/sh\necho \"$@\" >> {log}\ncase \"$1\" in init) printf 'apiVersion: v1\\nkind: Config\\nclusters: []\\n' > {admin} ;; \
             join) [ -s {kubelet}/kubelet.crt ] && [ -s {kubelet}/kubelet.key ] && echo 'kubelet certificate installed' >> {log} ;; esac\n\
             echo \"kubeadm double: $1 done\"\n",
            log = dir.path().join("kubeadm.log").display(),
            admin = dir.path().join("kubernetes/admin.conf").display(),
            kubelet = dir.path().join("kubelet/pki").display(),
        );
        let kubeadm = dir.path().join("kubeadm");
        confboot_testkit::write_executable(&kubeadm, &script);
        NodeDir {
            dir,
            bootstrapper: bootstrapper.to_path_buf(),
            joinsvc_ak_trust: None,
            node_name: name
                .to_ascii_lowercase()
                .chars()
                .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
                .collect(),
        }
    }

    /// The node trusts join services that attest with this AK (the
    /// control-plane node's, whose TPM joinsvc uses): every bootstrapper
    /// started here gets `--joinsvc-ak-trust pinned:HEX`. Without it the
    /// bootstrapper's default (an AK CA in the image) applies.
    pub fn trusting_join_service_ak(mut self, ak_public: &[u8]) -> NodeDir {
        self.joinsvc_ak_trust = Some(format!("pinned:{}", confboot_util::hex::encode(ak_public)));
        self
    }

    /// A path in the node's directory.
    pub fn p(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// Boots the node's TPM with `image` measured into PCR 4.
    pub fn boot_tpm(&self, image: &[u8]) -> NodeTpm {
        NodeTpm::boot(&self.p("tpm"), image)
    }

    /// Starts the bootstrapper on this node's disk and `tpm`.
    pub fn bootstrapper(&self, tpm: &NodeTpm, extra: &[&str]) -> ChildProcess {
        let mut cmd = Command::new(&self.bootstrapper);
        cmd.arg("--tpm").arg(tpm.tpm_arg());
        cmd.arg("--state-disk").arg(self.p("disk.img"));
        cmd.args([
            "--disk-mode",
            "header-only",
            "--init-listen",
            "127.0.0.1:0",
            "--recover-listen",
            "127.0.0.1:0",
        ]);
        cmd.args(["--cmdline", "/dev/null", "--retry-max", "1", "-v", "4"]);
        cmd.arg("--kubeadm").arg(self.p("kubeadm"));
        cmd.arg("--kubeadm-config-dir").arg(self.p("kubernetes"));
        cmd.arg("--pki-dir").arg(self.p("kubernetes/pki"));
        cmd.arg("--admin-kubeconfig")
            .arg(self.p("kubernetes/admin.conf"));
        cmd.arg("--node-name").arg(&self.node_name);
        cmd.arg("--kubelet-cert-dir").arg(self.p("kubelet/pki"));
        if let Some(trust) = &self.joinsvc_ak_trust {
            cmd.arg("--joinsvc-ak-trust").arg(trust);
        }
        cmd.args(extra);
        // Its own process group, so a test can end it with every helper it
        // runs (cryptsetup, mke2fs, kubeadm), as a node's /init does when
        // it powers the VM off.
        std::os::unix::process::CommandExt::process_group(&mut cmd, 0);
        ChildProcess::spawn("bootstrapper", cmd)
    }

    /// The state disk's LUKS UUID, if it has a LUKS header.
    pub fn luks_uuid(&self) -> Option<String> {
        crate::luks_uuid(&self.p("disk.img"))
    }

    /// Whether `key` opens the LUKS2 header (cryptsetup, key on stdin).
    pub fn key_opens_disk(&self, key: &[u8]) -> bool {
        crate::key_opens_disk(&self.p("disk.img"), key)
    }
}

/// A blank node waiting for the admin's Init, as the first node of a
/// cluster does: its TPM booted with the image, the bootstrapper started
/// with `--init-secret-hash`, and where its init API listens. The node
/// trusts join services attesting with its own TPM's AK: joinsvc later
/// runs on it, the control plane, with that TPM.
pub struct NodeAwaitingInit {
    /// The node's files.
    pub dir: NodeDir,
    /// Its TPM, booted with the image.
    pub tpm: NodeTpm,
    /// The bootstrapper, serving the init API.
    pub process: ChildProcess,
    /// Where the init API listens.
    pub init_addr: SocketAddr,
}

impl NodeAwaitingInit {
    /// Starts the node `name` with `bootstrapper`, `image` measured into
    /// its TPM's PCR 4, waiting for an Init with the secret whose hash is
    /// `init_secret_hash`; returns once the init API listens (panics with
    /// the bootstrapper's log if it does not within 30 s).
    pub fn start(
        bootstrapper: &Path,
        name: &str,
        image: &[u8],
        init_secret_hash: &str,
    ) -> NodeAwaitingInit {
        let dir = NodeDir::new(bootstrapper, name);
        let tpm = dir.boot_tpm(image);
        let dir = dir.trusting_join_service_ak(&tpm.ak_public);
        let process = dir.bootstrapper(&tpm, &["--init-secret-hash", init_secret_hash]);
        let init_addr = addr_after(
            &process.wait_for_line("init API listening on ", 3000),
            "listening on ",
        );
        NodeAwaitingInit {
            dir,
            tpm,
            process,
            init_addr,
        }
    }
}

/// The master secret in the file `confboot init` writes for the admin
/// (`confboot-mastersecret.json`: base64 `key` and `salt`), read with this
/// crate's own JSON parsing rather than the library's reader, so the tests
/// check the file's format too.
pub fn read_master_secret(path: &Path) -> MasterSecret {
    let text =
        std::fs::read_to_string(path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
    let file: serde_json::Value = serde_json::from_str(&text).unwrap();
    let field = |name: &str| {
        confboot_util::base64::decode(
            file[name]
                .as_str()
                .unwrap_or_else(|| panic!("{} has no string {name:?}", path.display())),
        )
        .unwrap()
    };
    MasterSecret::new(field("key"), field("salt")).unwrap()
}
