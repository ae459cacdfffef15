//! The cluster step handed over to the node's OS.
//!
//! In the initramfs the bootstrapper decides how the node enters its
//! cluster (the admin's Init or a join ticket) but does not run kubeadm:
//! [`HandoffBackend`] writes what kubeadm needs into a handoff directory
//! (`/run/confboot`, a tmpfs PID 1 makes and that survives `switch_root`),
//! and in the node's OS a systemd unit (`nodeagent cluster-step`) reads it
//! once ([`Handoff::read`]) and runs [`crate::KubeadmBackend`] with it.
//!
//! The handoff directory (mode 0700, every file 0600, each written to a
//! temporary file and renamed):
//!
//! | file | what | secret |
//! |---|---|---|
//! | `cluster-step.json` | kind (`init`, `join`) and every non-secret parameter ([`StepDocument`]); written last, so its presence means the rest is complete | no |
//! | `token` | the bootstrap token (join) | yes |
//! | `pki/<name>` | control-plane files (join), by the names the kubeadm backend accepts; `ca.crt`, `ca.key` (init) | keys |
//! | `kubelet.crt`, `kubelet.key` | the kubelet's serving certificate (DER) and key (PEM), when the join service signed one | key |
//! | `admin.conf` | the admin's kubeconfig (init) | yes |
//! | `cluster-step.done` | written by the step once kubeadm succeeded | no |
//!
//! **Init before kubeadm.** Init must answer the admin with a working
//! kubeconfig, but kubeadm runs only after the handover, when the Init call
//! is long answered. So the cluster's PKI is made here, before the
//! handover: a cluster CA (ECDSA P-256, `CN=kubernetes`, a CA with the key
//! usages kubeadm gives its CA, 10 years) and the admin's client
//! certificate signed by it (`CN=kubernetes-admin`,
//! `O=kubeadm:cluster-admins`, client authentication, 1 year), in a
//! kubeconfig for `https://NODE_IP:6443`. The step installs `ca.crt` and
//! `ca.key` in kubeadm's PKI directory and `admin.conf` in
//! `/etc/kubernetes` before `kubeadm init`. kubeadm's documented contract:
//! when `pki/ca.crt` and `ca.key` exist, `kubeadm init` uses that CA instead
//! of making one; when `admin.conf` exists and is valid for that CA and
//! API server address, kubeadm keeps it. So the kubeconfig Init returned is
//! valid for the cluster kubeadm makes.
//!
//! **The token's end.** joinsvc's bootstrap tokens live 15 minutes
//! (`TOKEN_TTL` in `joinsvc/src/token.rs`, [`BOOTSTRAP_TOKEN_TTL`] here);
//! the token was made before the ticket reached the node, so a join
//! records `token_valid_until` = now + [`BOOTSTRAP_TOKEN_TTL`] −
//! [`TOKEN_VALIDITY_MARGIN`] (wall-clock seconds since the epoch). The step
//! retries until then, and never longer than [`BOOTSTRAP_TOKEN_TTL`] from
//! its own start whatever the clock says: a host that sets the node's
//! clock only changes how long a doomed join is retried.
//!
//! Secrets are kept in zeroized buffers and never logged; no error quotes
//! one.

use std::fs;
use std::io;
use std::net::IpAddr;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose, PKCS_ECDSA_P256_SHA256, SerialNumber,
};
use serde::Deserialize;
use serde_json::json;
use zeroize::Zeroizing;

use super::kubeadm::{
    KubeVersion, check_ca_hash, check_cidrs, check_control_plane_files, check_endpoint, check_name,
    check_san, check_token, host_port, make_dir, parse_ip, write_file, write_pki_file,
};
use super::{
    ClusterBackend, ClusterError, InitClusterOutput, InitClusterParams, JoinClusterParams,
    KubeletCert,
};
use confboot_kms::SecretBytes;
use confboot_util::fs::{FileError, read_bounded};
use confboot_util::json::{JsonError, Object};

/// Where PID 1 makes the handoff directory (a tmpfs that survives `switch_root`).
pub const DEFAULT_HANDOFF_DIR: &str = "/run/confboot";
/// The step's non-secret parameters.
pub const STEP_FILE: &str = "cluster-step.json";
/// Written once the step succeeded.
pub const DONE_FILE: &str = "cluster-step.done";
/// The bootstrap token.
pub const TOKEN_FILE: &str = "token";
/// The directory of control-plane files (join) and the cluster CA (init).
pub const PKI_DIR: &str = "pki";
/// The cluster CA's certificate (PEM), in [`PKI_DIR`].
pub const CA_CERT_FILE: &str = "ca.crt";
/// The cluster CA's key (PKCS#8 PEM), in [`PKI_DIR`].
pub const CA_KEY_FILE: &str = "ca.key";
/// The admin's kubeconfig.
pub const ADMIN_CONF_FILE: &str = "admin.conf";
/// The kubelet's serving certificate (DER).
pub const KUBELET_CERT_FILE: &str = "kubelet.crt";
/// The kubelet's serving key (PEM).
pub const KUBELET_KEY_FILE: &str = "kubelet.key";
/// The version of [`STEP_FILE`]'s format.
pub const STEP_FORMAT_VERSION: u64 = 1;
/// How long joinsvc's bootstrap tokens live (`TOKEN_TTL` in
/// `joinsvc/src/token.rs`).
pub const BOOTSTRAP_TOKEN_TTL: Duration = Duration::from_secs(15 * 60);
/// Taken off the token's life: the time between joinsvc making the token
/// and the node writing the handoff (attestation, the disk, the mark), and
/// clock skew between the control plane and the node.
pub const TOKEN_VALIDITY_MARGIN: Duration = Duration::from_secs(2 * 60);
/// Largest [`STEP_FILE`] read.
pub const MAX_STEP_FILE_BYTES: u64 = 64 * 1024;
/// Largest secret or certificate file read.
pub const MAX_SECRET_FILE_BYTES: u64 = 64 * 1024;
/// The most control-plane files a join hands over.
pub const MAX_CONTROL_PLANE_FILES: usize = 32;
/// The most extra API server certificate names an init hands over.
pub const MAX_CERT_SANS: usize = 64;
/// The cluster CA's common name (kubeadm's).
pub const CA_COMMON_NAME: &str = "kubernetes";
/// The admin's common name (kubeadm's).
pub const ADMIN_COMMON_NAME: &str = "kubernetes-admin";
/// The admin's group (kubeadm's, bound to `cluster-admin` by kubeadm).
pub const ADMIN_ORGANIZATION: &str = "kubeadm:cluster-admins";
/// The kubeconfig's cluster name when the parameters name none.
pub const DEFAULT_CLUSTER_NAME: &str = "kubernetes";
/// The cluster CA's validity (kubeadm's: 10 years).
pub const CA_VALIDITY: Duration = Duration::from_secs(10 * 365 * 24 * 3600);
/// The admin certificate's validity (kubeadm's: 1 year).
pub const ADMIN_CERT_VALIDITY: Duration = Duration::from_secs(365 * 24 * 3600);
/// How far before its issue time a certificate starts to be valid.
const NOT_BEFORE_SKEW: Duration = Duration::from_secs(5 * 60);

/// Why a handoff could not be written or read. No variant quotes a secret.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum HandoffError {
    /// A file could not be read, written or removed.
    #[error("handoff I/O: {0}")]
    Io(String),
    /// A file is larger than its limit.
    #[error("{file} is larger than {limit} bytes")]
    TooLarge {
        /// The file, relative to the handoff directory.
        file: String,
        /// Its limit.
        limit: u64,
    },
    /// A file the step needs is not there.
    #[error("{0} is missing from the handoff")]
    Missing(String),
    /// [`STEP_FILE`] is not what this format says.
    #[error("{STEP_FILE}: {0}")]
    Malformed(String),
    /// A member of [`STEP_FILE`] appears twice in one object.
    #[error("{STEP_FILE}: the member {0:?} is repeated")]
    RepeatedKey(String),
    /// [`STEP_FILE`] names a kind of step other than `init` and `join`.
    #[error("{STEP_FILE}: unknown kind {0:?}")]
    UnknownKind(String),
    /// The parameters fail the checks the kubeadm backend applies.
    #[error("handoff parameters: {0}")]
    Invalid(#[from] ClusterError),
}

/// The non-secret part of a join ([`STEP_FILE`] of kind `join`).
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JoinStep {
    /// The API server, `host:port`.
    pub api_server_endpoint: String,
    /// `sha256:<hex>` of the cluster CA's public key.
    pub discovery_token_ca_cert_hash: String,
    /// Join as a control-plane node.
    pub is_control_plane: bool,
    /// The names of the control-plane files in [`PKI_DIR`].
    pub control_plane_files: Vec<String>,
    /// This node's IP.
    pub node_ip: String,
    /// Kubernetes version of the cluster.
    pub kubernetes_version: String,
    /// The node's name (empty: kubeadm's default).
    pub node_name: String,
    /// Whether [`KUBELET_CERT_FILE`] and [`KUBELET_KEY_FILE`] are handed over.
    pub kubelet_cert: bool,
    /// When the bootstrap token stops working (seconds since the epoch).
    pub token_valid_until: u64,
}

/// [`STEP_FILE`]: what the step does, without its secrets.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StepDocument {
    /// `kubeadm init` with these parameters.
    Init(InitClusterParams),
    /// `kubeadm join` with these parameters.
    Join(JoinStep),
}

impl StepDocument {
    /// Parses and checks [`STEP_FILE`]'s bytes: at most
    /// [`MAX_STEP_FILE_BYTES`], a JSON object of format
    /// [`STEP_FORMAT_VERSION`] and kind `init` or `join` with the parameters
    /// of that kind only, every member once and no other (a serde derive,
    /// [`confboot_util::json::object`]), parameters that pass the kubeadm
    /// backend's checks.
    pub fn parse(bytes: &[u8]) -> Result<StepDocument, HandoffError> {
        let malformed = |m: &str| HandoffError::Malformed(m.to_string());
        if bytes.len() as u64 > MAX_STEP_FILE_BYTES {
            return Err(HandoffError::TooLarge {
                file: STEP_FILE.into(),
                limit: MAX_STEP_FILE_BYTES,
            });
        }
        let root: DocumentJson =
            confboot_util::json::object(bytes).map_err(|error| match error {
                JsonError::Syntax { line, column } => {
                    HandoffError::Malformed(format!("not JSON: line {line} column {column}"))
                }
                JsonError::NotObject => malformed("the document is not an object"),
                JsonError::DuplicateKey { key } => HandoffError::RepeatedKey(key),
                JsonError::Data { description } => HandoffError::Malformed(description),
            })?;
        if root.version != STEP_FORMAT_VERSION {
            return Err(malformed("an unknown format version"));
        }
        match (root.kind.as_str(), root.init, root.join) {
            ("init", Some(Object(p)), None) => {
                at_most(
                    &p.api_server_cert_sans,
                    "api_server_cert_sans",
                    MAX_CERT_SANS,
                )?;
                let params = InitClusterParams {
                    cluster_name: p.cluster_name,
                    kubernetes_version: p.kubernetes_version,
                    node_ip: p.node_ip,
                    api_server_cert_sans: p.api_server_cert_sans,
                    service_cidr: p.service_cidr,
                    pod_cidr: p.pod_cidr,
                    conformance_mode: p.conformance_mode,
                };
                check_init(&params)?;
                Ok(StepDocument::Init(params))
            }
            ("join", None, Some(Object(step))) => {
                at_most(
                    &step.control_plane_files,
                    "control_plane_files",
                    MAX_CONTROL_PLANE_FILES,
                )?;
                check_join_step(&step)?;
                Ok(StepDocument::Join(step))
            }
            ("init", None, _) => Err(malformed("no \"init\"")),
            ("join", _, None) => Err(malformed("no \"join\"")),
            ("init" | "join", _, _) => Err(malformed("the parameters of another kind")),
            (other, _, _) => Err(HandoffError::UnknownKind(
                other.chars().take(32).collect::<String>(),
            )),
        }
    }

    /// The JSON [`StepDocument::parse`] reads.
    pub fn to_json(&self) -> Vec<u8> {
        let doc = match self {
            StepDocument::Init(p) => json!({
                "version": STEP_FORMAT_VERSION,
                "kind": "init",
                "init": {
                    "cluster_name": p.cluster_name,
                    "kubernetes_version": p.kubernetes_version,
                    "node_ip": p.node_ip,
                    "api_server_cert_sans": p.api_server_cert_sans,
                    "service_cidr": p.service_cidr,
                    "pod_cidr": p.pod_cidr,
                    "conformance_mode": p.conformance_mode,
                },
            }),
            StepDocument::Join(j) => json!({
                "version": STEP_FORMAT_VERSION,
                "kind": "join",
                "join": {
                    "api_server_endpoint": j.api_server_endpoint,
                    "discovery_token_ca_cert_hash": j.discovery_token_ca_cert_hash,
                    "is_control_plane": j.is_control_plane,
                    "control_plane_files": j.control_plane_files,
                    "node_ip": j.node_ip,
                    "kubernetes_version": j.kubernetes_version,
                    "node_name": j.node_name,
                    "kubelet_cert": j.kubelet_cert,
                    "token_valid_until": j.token_valid_until,
                },
            }),
        };
        let mut out = serde_json::to_vec_pretty(&doc).expect("a JSON value encodes");
        out.push(b'\n');
        out
    }
}

/// [`STEP_FILE`] as written, before its parameters are checked.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct DocumentJson {
    version: u64,
    kind: String,
    init: Option<Object<InitJson>>,
    join: Option<Object<JoinStep>>,
}

/// The `init` member of [`STEP_FILE`] ([`InitClusterParams`]).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct InitJson {
    cluster_name: String,
    kubernetes_version: String,
    node_ip: String,
    api_server_cert_sans: Vec<String>,
    service_cidr: String,
    pod_cidr: String,
    conformance_mode: bool,
}

/// Refuses a list `key` of more than `max` entries.
fn at_most(items: &[String], key: &str, max: usize) -> Result<(), HandoffError> {
    if items.len() > max {
        return Err(HandoffError::Malformed(format!(
            "{key:?} has more than {max} entries"
        )));
    }
    Ok(())
}

/// The kubeadm backend's checks of init parameters; the node's IP.
fn check_init(p: &InitClusterParams) -> Result<IpAddr, ClusterError> {
    KubeVersion::parse(&p.kubernetes_version)?;
    let node_ip = parse_ip("node IP", &p.node_ip)?;
    if !p.cluster_name.is_empty() {
        check_name("cluster name", &p.cluster_name)?;
    }
    if p.api_server_cert_sans.len() > MAX_CERT_SANS {
        return Err(ClusterError::InvalidParams(format!(
            "more than {MAX_CERT_SANS} API server certificate names"
        )));
    }
    for san in &p.api_server_cert_sans {
        check_san(san)?;
    }
    check_cidrs("service CIDR", &p.service_cidr)?;
    check_cidrs("pod CIDR", &p.pod_cidr)?;
    Ok(node_ip)
}

/// The kubeadm backend's checks of a join's non-secret parameters.
fn check_join_step(j: &JoinStep) -> Result<(), ClusterError> {
    KubeVersion::parse(&j.kubernetes_version)?;
    parse_ip("node IP", &j.node_ip)?;
    check_endpoint(&j.api_server_endpoint)?;
    check_ca_hash(&j.discovery_token_ca_cert_hash)?;
    if j.control_plane_files.len() > MAX_CONTROL_PLANE_FILES {
        return Err(ClusterError::InvalidParams(format!(
            "more than {MAX_CONTROL_PLANE_FILES} control-plane files"
        )));
    }
    check_control_plane_files(
        j.is_control_plane,
        j.control_plane_files.iter().map(String::as_str),
    )?;
    if !j.node_name.is_empty() {
        super::kubelet_cert::check_node_name(&j.node_name)
            .map_err(|e| ClusterError::InvalidParams(e.to_string()))?;
    }
    Ok(())
}

/// An init handed over: its parameters and the PKI made before the handover.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InitHandoff {
    /// What `kubeadm init` is given.
    pub params: InitClusterParams,
    /// The cluster CA's PEM certificate.
    pub ca_cert_pem: Vec<u8>,
    /// The cluster CA's PEM key (a secret).
    pub ca_key_pem: SecretBytes,
    /// The admin's kubeconfig Init answered with (a secret).
    pub admin_kubeconfig: SecretBytes,
}

impl InitHandoff {
    /// Installs the cluster CA in kubeadm's `pki_dir` (`ca.crt` 0644,
    /// `ca.key` 0600) and the admin's kubeconfig at `admin_kubeconfig`
    /// (0600), where `kubeadm init` finds and keeps them.
    pub fn install(&self, pki_dir: &Path, admin_kubeconfig: &Path) -> Result<(), HandoffError> {
        let install = || -> Result<(), ClusterError> {
            write_pki_file(pki_dir, CA_CERT_FILE, &self.ca_cert_pem, 0o644)?;
            write_pki_file(pki_dir, CA_KEY_FILE, self.ca_key_pem.expose(), 0o600)?;
            if let Some(parent) = admin_kubeconfig.parent() {
                fs::create_dir_all(parent)
                    .map_err(|e| ClusterError::Io(format!("{}: {e}", parent.display())))?;
            }
            write_file(admin_kubeconfig, self.admin_kubeconfig.expose(), 0o600)
        };
        install().map_err(|e| HandoffError::Io(e.to_string()))
    }
}

/// A join handed over.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JoinHandoff {
    /// What `kubeadm join` is given (with the token and keys).
    pub params: JoinClusterParams,
    /// When the bootstrap token stops working (seconds since the epoch).
    pub token_valid_until: u64,
}

/// A handoff as the step reads it, secrets included.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Handoff {
    /// Make the cluster.
    Init(InitHandoff),
    /// Join the cluster.
    Join(JoinHandoff),
}

impl Handoff {
    /// Reads the handoff in `dir` once: [`STEP_FILE`] ([`StepDocument::parse`])
    /// and the files it implies, each at most [`MAX_SECRET_FILE_BYTES`]. A
    /// missing file, one over its limit or parameters that fail the checks
    /// refuse the whole handoff.
    pub fn read(dir: &Path) -> Result<Handoff, HandoffError> {
        let step = StepDocument::parse(&read_file(dir, STEP_FILE, MAX_STEP_FILE_BYTES)?)?;
        let secret = |name: &str| {
            read_file(dir, name, MAX_SECRET_FILE_BYTES).map(|b| SecretBytes::new(b.to_vec()))
        };
        match step {
            StepDocument::Init(params) => Ok(Handoff::Init(InitHandoff {
                params,
                ca_cert_pem: secret(&format!("{PKI_DIR}/{CA_CERT_FILE}"))?
                    .expose()
                    .to_vec(),
                ca_key_pem: secret(&format!("{PKI_DIR}/{CA_KEY_FILE}"))?,
                admin_kubeconfig: secret(ADMIN_CONF_FILE)?,
            })),
            StepDocument::Join(j) => {
                let token = secret(TOKEN_FILE)?;
                check_token(&token)?;
                let control_plane_files = j
                    .control_plane_files
                    .iter()
                    .map(|name| Ok((name.clone(), secret(&format!("{PKI_DIR}/{name}"))?)))
                    .collect::<Result<Vec<_>, HandoffError>>()?;
                let kubelet_cert = if j.kubelet_cert {
                    Some(KubeletCert {
                        cert_der: secret(KUBELET_CERT_FILE)?.expose().to_vec(),
                        key_pem: secret(KUBELET_KEY_FILE)?,
                    })
                } else {
                    None
                };
                Ok(Handoff::Join(JoinHandoff {
                    params: JoinClusterParams {
                        api_server_endpoint: j.api_server_endpoint,
                        token,
                        discovery_token_ca_cert_hash: j.discovery_token_ca_cert_hash,
                        is_control_plane: j.is_control_plane,
                        control_plane_files,
                        node_ip: j.node_ip,
                        kubernetes_version: j.kubernetes_version,
                        node_name: j.node_name,
                        kubelet_cert,
                    },
                    token_valid_until: j.token_valid_until,
                }))
            }
        }
    }
}

/// Reads `dir/name`, at most `limit` bytes.
fn read_file(dir: &Path, name: &str, limit: u64) -> Result<Zeroizing<Vec<u8>>, HandoffError> {
    read_bounded(&dir.join(name), limit).map_err(|e| match e {
        FileError::TooLarge { limit, .. } => HandoffError::TooLarge {
            file: name.into(),
            limit,
        },
        FileError::Read { error, .. } if error.kind() == io::ErrorKind::NotFound => {
            HandoffError::Missing(name.into())
        }
        other => HandoffError::Io(other.to_string()),
    })
}

/// Whether the step in `dir` already succeeded ([`DONE_FILE`] exists).
pub fn is_done(dir: &Path) -> bool {
    fs::symlink_metadata(dir.join(DONE_FILE)).is_ok()
}

/// Records that the step in `dir` succeeded: [`DONE_FILE`] with `summary`.
pub fn mark_done(dir: &Path, summary: &str) -> Result<(), HandoffError> {
    write_file(
        &dir.join(DONE_FILE),
        format!("{summary}\n").as_bytes(),
        0o600,
    )
    .map_err(|e| HandoffError::Io(e.to_string()))
}

/// Removes every secret of the handoff in `dir` (the token, the kubelet's
/// certificate and key, the admin's kubeconfig, the whole [`PKI_DIR`]);
/// [`STEP_FILE`] and [`DONE_FILE`] stay. Returns what was there and is gone.
pub fn remove_secrets(dir: &Path) -> Result<Vec<String>, HandoffError> {
    let mut removed = Vec::new();
    for name in [
        TOKEN_FILE,
        KUBELET_CERT_FILE,
        KUBELET_KEY_FILE,
        ADMIN_CONF_FILE,
    ] {
        match fs::remove_file(dir.join(name)) {
            Ok(()) => removed.push(name.to_string()),
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(HandoffError::Io(format!("removing {name}: {e}"))),
        }
    }
    // remove_dir_all removes symbolic links, never what they point to.
    match fs::remove_dir_all(dir.join(PKI_DIR)) {
        Ok(()) => removed.push(format!("{PKI_DIR}/")),
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(HandoffError::Io(format!("removing {PKI_DIR}/: {e}"))),
    }
    Ok(removed)
}

/// `token_valid_until` for a token received at `now`: now +
/// [`BOOTSTRAP_TOKEN_TTL`] − [`TOKEN_VALIDITY_MARGIN`], in seconds since the epoch.
pub fn token_valid_until(now: SystemTime) -> u64 {
    let now = now.duration_since(UNIX_EPOCH).unwrap_or_default();
    (now + BOOTSTRAP_TOKEN_TTL - TOKEN_VALIDITY_MARGIN).as_secs()
}

/// The cluster backend that hands the step over to the node's OS (see the
/// module documentation): a join writes its parameters; an init makes the
/// cluster's PKI, writes it with the parameters and returns the admin's
/// kubeconfig. It runs nothing.
pub struct HandoffBackend {
    /// The handoff directory.
    pub dir: PathBuf,
    /// The API server's port, in the admin's kubeconfig (kubeadm's 6443).
    pub api_server_port: u16,
}

impl HandoffBackend {
    /// Hands over in `dir`, the API server on port 6443.
    pub fn new(dir: impl Into<PathBuf>) -> HandoffBackend {
        HandoffBackend {
            dir: dir.into(),
            api_server_port: super::kubeadm::DEFAULT_API_SERVER_PORT,
        }
    }

    /// Makes the handoff directory (0700) and removes an earlier step's
    /// [`STEP_FILE`] and [`DONE_FILE`], so no earlier step is taken for this one.
    fn prepare(&self) -> Result<(), ClusterError> {
        let io = |e: io::Error| ClusterError::Io(format!("{}: {e}", self.dir.display()));
        make_dir(&self.dir)?;
        let meta = fs::symlink_metadata(&self.dir).map_err(io)?;
        if !meta.is_dir() {
            return Err(ClusterError::Io(format!(
                "{} is not a directory",
                self.dir.display()
            )));
        }
        fs::set_permissions(&self.dir, fs::Permissions::from_mode(0o700)).map_err(io)?;
        for name in [STEP_FILE, DONE_FILE] {
            match fs::remove_file(self.dir.join(name)) {
                Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(io(e)),
                _ => {}
            }
        }
        Ok(())
    }

    fn write(&self, name: &str, data: &[u8]) -> Result<(), ClusterError> {
        write_file(&self.dir.join(name), data, 0o600)
    }

    fn write_pki(&self, name: &str, data: &[u8]) -> Result<(), ClusterError> {
        write_pki_file(&self.dir.join(PKI_DIR), name, data, 0o600)
    }
}

impl ClusterBackend for HandoffBackend {
    fn init_cluster(
        &self,
        params: &InitClusterParams,
        log: &mut dyn FnMut(&str),
    ) -> Result<InitClusterOutput, ClusterError> {
        let node_ip = check_init(params)?;
        let server = format!("https://{}", host_port(node_ip, self.api_server_port));
        let cluster_name = if params.cluster_name.is_empty() {
            DEFAULT_CLUSTER_NAME
        } else {
            &params.cluster_name
        };
        let pki = ClusterPki::generate(SystemTime::now())?;
        let kubeconfig = pki.admin_kubeconfig(cluster_name, &server);
        self.prepare()?;
        self.write_pki(CA_CERT_FILE, pki.ca_cert_pem.as_bytes())?;
        self.write_pki(CA_KEY_FILE, pki.ca_key_pem.as_bytes())?;
        self.write(ADMIN_CONF_FILE, kubeconfig.as_bytes())?;
        self.write(STEP_FILE, &StepDocument::Init(params.clone()).to_json())?;
        log(&format!(
            "cluster CA and admin kubeconfig made for {server}; init handed over in {}",
            self.dir.display()
        ));
        Ok(InitClusterOutput {
            kubeconfig: SecretBytes::new(kubeconfig.as_bytes().to_vec()),
        })
    }

    fn join_cluster(
        &self,
        params: &JoinClusterParams,
        log: &mut dyn FnMut(&str),
    ) -> Result<(), ClusterError> {
        check_token(&params.token)?;
        let step = JoinStep {
            api_server_endpoint: params.api_server_endpoint.clone(),
            discovery_token_ca_cert_hash: params.discovery_token_ca_cert_hash.clone(),
            is_control_plane: params.is_control_plane,
            control_plane_files: params
                .control_plane_files
                .iter()
                .map(|(name, _)| name.clone())
                .collect(),
            node_ip: params.node_ip.clone(),
            kubernetes_version: params.kubernetes_version.clone(),
            node_name: params.node_name.clone(),
            kubelet_cert: params.kubelet_cert.is_some(),
            token_valid_until: token_valid_until(SystemTime::now()),
        };
        // Every check before anything is written.
        check_join_step(&step)?;
        self.prepare()?;
        self.write(TOKEN_FILE, params.token.expose())?;
        for (name, data) in &params.control_plane_files {
            self.write_pki(name, data.expose())?;
        }
        if let Some(kc) = &params.kubelet_cert {
            self.write(KUBELET_CERT_FILE, &kc.cert_der)?;
            self.write(KUBELET_KEY_FILE, kc.key_pem.expose())?;
        }
        self.write(STEP_FILE, &StepDocument::Join(step).to_json())?;
        log(&format!(
            "join handed over in {} ({} control-plane files)",
            self.dir.display(),
            params.control_plane_files.len()
        ));
        Ok(())
    }
}

/// The cluster CA and the admin's client certificate, made before kubeadm runs.
pub struct ClusterPki {
    /// The CA's PEM certificate.
    pub ca_cert_pem: String,
    /// The CA's PKCS#8 PEM key (a secret).
    pub ca_key_pem: Zeroizing<String>,
    /// The admin's PEM client certificate.
    pub admin_cert_pem: String,
    /// The admin's PKCS#8 PEM key (a secret).
    pub admin_key_pem: Zeroizing<String>,
}

impl ClusterPki {
    /// A new CA and admin certificate, issued at `now` (see the module
    /// documentation for what they hold).
    pub fn generate(now: SystemTime) -> Result<ClusterPki, ClusterError> {
        let fail = |e: rcgen::Error| ClusterError::Io(format!("making the cluster PKI: {e}"));
        let ca_key = KeyPair::generate_for(&PKCS_ECDSA_P256_SHA256).map_err(fail)?;
        let mut ca = CertificateParams::default();
        ca.distinguished_name = DistinguishedName::new();
        ca.distinguished_name
            .push(DnType::CommonName, CA_COMMON_NAME);
        ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca.key_usages = vec![
            KeyUsagePurpose::DigitalSignature,
            KeyUsagePurpose::KeyEncipherment,
            KeyUsagePurpose::KeyCertSign,
        ];
        ca.not_before = (now - NOT_BEFORE_SKEW).into();
        ca.not_after = (now + CA_VALIDITY).into();
        ca.serial_number = Some(random_serial()?);
        let ca_cert = ca.self_signed(&ca_key).map_err(fail)?;

        let admin_key = KeyPair::generate_for(&PKCS_ECDSA_P256_SHA256).map_err(fail)?;
        let mut admin = CertificateParams::default();
        admin.distinguished_name = DistinguishedName::new();
        admin
            .distinguished_name
            .push(DnType::OrganizationName, ADMIN_ORGANIZATION);
        admin
            .distinguished_name
            .push(DnType::CommonName, ADMIN_COMMON_NAME);
        admin.is_ca = IsCa::ExplicitNoCa;
        admin.key_usages = vec![
            KeyUsagePurpose::DigitalSignature,
            KeyUsagePurpose::KeyEncipherment,
        ];
        admin.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        admin.use_authority_key_identifier_extension = true;
        admin.not_before = (now - NOT_BEFORE_SKEW).into();
        admin.not_after = (now + ADMIN_CERT_VALIDITY).into();
        admin.serial_number = Some(random_serial()?);
        let issuer = Issuer::new(ca, &ca_key);
        let admin_cert = admin.signed_by(&admin_key, &issuer).map_err(fail)?;
        Ok(ClusterPki {
            ca_cert_pem: ca_cert.pem(),
            ca_key_pem: Zeroizing::new(ca_key.serialize_pem()),
            admin_cert_pem: admin_cert.pem(),
            admin_key_pem: Zeroizing::new(admin_key.serialize_pem()),
        })
    }

    /// The admin's kubeconfig: cluster `cluster_name` at `server` with this
    /// CA, user `kubernetes-admin` with the client certificate and key.
    pub fn admin_kubeconfig(&self, cluster_name: &str, server: &str) -> Zeroizing<String> {
        use confboot_util::base64::encode;
        let key = Zeroizing::new(encode(self.admin_key_pem.as_bytes()));
        let context = format!("{ADMIN_COMMON_NAME}@{cluster_name}");
        Zeroizing::new(format!(
            "apiVersion: v1\n\
             kind: Config\n\
             clusters:\n\
             - cluster:\n    certificate-authority-data: {ca}\n    server: {server}\n  name: {cluster_name}\n\
             contexts:\n\
             - context:\n    cluster: {cluster_name}\n    user: {ADMIN_COMMON_NAME}\n  name: {context}\n\
             current-context: {context}\n\
             preferences: {{}}\n\
             users:\n\
             - name: {ADMIN_COMMON_NAME}\n  user:\n    client-certificate-data: {cert}\n    client-key-data: {key}\n",
            ca = encode(self.ca_cert_pem.as_bytes()),
            cert = encode(self.admin_cert_pem.as_bytes()),
            key = &*key,
        ))
    }
}

/// A random positive 16-byte certificate serial number.
fn random_serial() -> Result<SerialNumber, ClusterError> {
    let mut serial = [0u8; 16];
    ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut serial)
        .map_err(|_| ClusterError::Io("no randomness for a serial number".into()))?;
    serial[0] &= 0x7f;
    Ok(SerialNumber::from_slice(&serial))
}

#[cfg(test)]
mod tests {
    use super::*;
    use confboot_testkit::TempDir;
    use std::os::unix::fs::MetadataExt;
    use x509_parser::prelude::{FromDer, X509Certificate};

    fn join_params() -> JoinClusterParams {
        JoinClusterParams {
            api_server_endpoint: "10.0.0.1:6443".into(),
            token: SecretBytes::new(b"abcdef.0123456789abcdef".to_vec()),
            discovery_token_ca_cert_hash: format!("sha256:{}", "ab".repeat(32)),
            is_control_plane: true,
            control_plane_files: vec![
                ("ca.crt".into(), SecretBytes::new(b"CA CERT".to_vec())),
                ("ca.key".into(), SecretBytes::new(b"CA KEY".to_vec())),
                ("etcd/ca.key".into(), SecretBytes::new(b"ETCD KEY".to_vec())),
            ],
            node_ip: "10.0.0.2".into(),
            kubernetes_version: "v1.31.1".into(),
            node_name: "worker-1".into(),
            kubelet_cert: Some(KubeletCert {
                cert_der: b"DER".to_vec(),
                key_pem: SecretBytes::new(b"KUBELET KEY".to_vec()),
            }),
        }
    }

    fn init_params() -> InitClusterParams {
        InitClusterParams {
            cluster_name: "confboot".into(),
            kubernetes_version: "v1.31.1".into(),
            node_ip: "10.0.0.1".into(),
            api_server_cert_sans: vec!["api.example.com".into()],
            service_cidr: "10.96.0.0/12".into(),
            pod_cidr: "10.244.0.0/16".into(),
            conformance_mode: false,
        }
    }

    /// Every file under `dir` with its mode, relative names sorted.
    fn modes(dir: &Path) -> Vec<(String, u32)> {
        let mut out = Vec::new();
        let mut stack = vec![dir.to_path_buf()];
        while let Some(d) = stack.pop() {
            for e in fs::read_dir(&d).unwrap() {
                let p = e.unwrap().path();
                let m = fs::symlink_metadata(&p).unwrap();
                let name = p.strip_prefix(dir).unwrap().display().to_string();
                out.push((name, m.mode() & 0o777));
                if m.is_dir() {
                    stack.push(p);
                }
            }
        }
        out.sort();
        out
    }

    /// The base64 value after `key: ` in a kubeconfig, PEM-decoded to DER.
    fn kubeconfig_der(kubeconfig: &[u8], key: &str) -> Vec<u8> {
        let text = std::str::from_utf8(kubeconfig).unwrap();
        let b64 = text
            .lines()
            .find_map(|l| l.trim().strip_prefix(&format!("{key}: ")))
            .unwrap_or_else(|| panic!("no {key}"));
        pem_der(&confboot_util::base64::decode(b64).unwrap())
    }

    fn pem_der(pem: &[u8]) -> Vec<u8> {
        x509_parser::pem::parse_x509_pem(pem).unwrap().1.contents
    }

    #[test]
    fn a_join_is_written_private_and_read_back_whole() {
        let tmp = TempDir::new("handoff-join");
        let dir = tmp.path().join("confboot");
        let backend = HandoffBackend::new(&dir);
        let mut logged = Vec::new();
        let before = token_valid_until(SystemTime::now());
        backend
            .join_cluster(&join_params(), &mut |l| logged.push(l.to_string()))
            .unwrap();
        assert_eq!(fs::metadata(&dir).unwrap().mode() & 0o777, 0o700);
        let files = modes(&dir);
        let names: Vec<&str> = files.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(
            names,
            [
                STEP_FILE,
                KUBELET_CERT_FILE,
                KUBELET_KEY_FILE,
                "pki",
                "pki/ca.crt",
                "pki/ca.key",
                "pki/etcd",
                "pki/etcd/ca.key",
                TOKEN_FILE,
            ]
        );
        for (name, mode) in &files {
            let want = if ["pki", "pki/etcd"].contains(&name.as_str()) {
                0o700
            } else {
                0o600
            };
            assert_eq!(*mode, want, "{name}");
        }
        // The parameters file holds no secret.
        let step = fs::read_to_string(dir.join(STEP_FILE)).unwrap();
        for secret in ["0123456789abcdef", "CA KEY", "ETCD KEY", "KUBELET KEY"] {
            assert!(!step.contains(secret), "{step}");
            assert!(!logged.concat().contains(secret));
        }
        let Handoff::Join(read) = Handoff::read(&dir).unwrap() else {
            panic!("not a join")
        };
        assert_eq!(read.params, join_params());
        let after = token_valid_until(SystemTime::now());
        assert!((before..=after).contains(&read.token_valid_until));
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_secs();
        assert!(read.token_valid_until >= now + 12 * 60 && read.token_valid_until <= now + 13 * 60);
    }

    #[test]
    fn init_makes_a_ca_and_an_admin_kubeconfig_that_verifies_against_it() {
        let tmp = TempDir::new("handoff-init");
        let dir = tmp.path().join("confboot");
        let out = HandoffBackend::new(&dir)
            .init_cluster(&init_params(), &mut |_| {})
            .unwrap();
        let Handoff::Init(read) = Handoff::read(&dir).unwrap() else {
            panic!("not an init")
        };
        assert_eq!(read.params, init_params());
        assert_eq!(read.admin_kubeconfig, out.kubeconfig);
        for (name, mode) in modes(&dir) {
            assert_eq!(mode, if name == "pki" { 0o700 } else { 0o600 }, "{name}");
        }
        let kubeconfig = std::str::from_utf8(out.kubeconfig.expose()).unwrap();
        assert!(
            kubeconfig.contains("    server: https://10.0.0.1:6443\n"),
            "{kubeconfig}"
        );
        assert!(kubeconfig.contains("current-context: kubernetes-admin@confboot\n"));
        assert!(kubeconfig.contains("  name: confboot\n"));

        // The kubeconfig's CA is the handed-over ca.crt, a CA kubeadm would make.
        let ca_der = pem_der(&read.ca_cert_pem);
        assert_eq!(
            kubeconfig_der(out.kubeconfig.expose(), "certificate-authority-data"),
            ca_der
        );
        let (_, ca) = X509Certificate::from_der(&ca_der).unwrap();
        assert!(ca.is_ca());
        assert_eq!(ca.subject().to_string(), "CN=kubernetes");
        let usage = ca.key_usage().unwrap().unwrap().value;
        assert!(usage.key_cert_sign() && usage.digital_signature() && usage.key_encipherment());
        let ca_years = (ca.validity().not_after.timestamp() - ca.validity().not_before.timestamp())
            / (365 * 24 * 3600);
        assert_eq!(ca_years, 10);
        // The CA key is the key of that certificate.
        let key =
            KeyPair::from_pem(std::str::from_utf8(read.ca_key_pem.expose()).unwrap()).unwrap();
        assert_eq!(
            key.public_key_raw(),
            ca.public_key().subject_public_key.data.as_ref()
        );

        // The client certificate: issued by the CA, signed with its key, for the admin.
        let client_der = kubeconfig_der(out.kubeconfig.expose(), "client-certificate-data");
        let (_, client) = X509Certificate::from_der(&client_der).unwrap();
        assert_eq!(client.issuer(), ca.subject());
        ring::signature::UnparsedPublicKey::new(
            &ring::signature::ECDSA_P256_SHA256_ASN1,
            ca.public_key().subject_public_key.data.as_ref(),
        )
        .verify(
            client.tbs_certificate.as_ref(),
            client.signature_value.data.as_ref(),
        )
        .expect("the CA signed the admin's certificate");
        assert_eq!(
            client.subject().to_string(),
            "O=kubeadm:cluster-admins, CN=kubernetes-admin"
        );
        assert!(!client.is_ca());
        assert!(
            client
                .extended_key_usage()
                .unwrap()
                .unwrap()
                .value
                .client_auth
        );
        // Its key is the one in the kubeconfig.
        let client_key = kubeconfig_der(out.kubeconfig.expose(), "client-key-data");
        let client_key = KeyPair::try_from(client_key.as_slice()).unwrap();
        assert_eq!(
            client_key.public_key_raw(),
            client.public_key().subject_public_key.data.as_ref()
        );
    }

    #[test]
    fn names_escaping_the_pki_dir_are_refused_before_anything_is_written() {
        let tmp = TempDir::new("handoff-names");
        let dir = tmp.path().join("confboot");
        for bad in ["../token", "/etc/passwd", "etcd/../../x", "a b"] {
            let mut params = join_params();
            params
                .control_plane_files
                .push((bad.into(), SecretBytes::new(b"x".to_vec())));
            let e = HandoffBackend::new(&dir)
                .join_cluster(&params, &mut |_| {})
                .unwrap_err();
            assert!(matches!(e, ClusterError::BadFileName(_)), "{bad}: {e}");
            assert!(!dir.exists(), "{bad}: nothing written");
        }
        // A worker hands over no control-plane files; a bad token is refused unquoted.
        let mut worker = join_params();
        worker.is_control_plane = false;
        assert!(
            HandoffBackend::new(&dir)
                .join_cluster(&worker, &mut |_| {})
                .is_err()
        );
        let mut bad_token = join_params();
        bad_token.token = SecretBytes::new(b"NOT-A-TOKEN-secretvalue".to_vec());
        let e = HandoffBackend::new(&dir)
            .join_cluster(&bad_token, &mut |_| {})
            .unwrap_err();
        assert!(!e.to_string().contains("secretvalue"));
        assert!(!dir.exists());

        // The reader refuses the same names in a step file.
        HandoffBackend::new(&dir)
            .join_cluster(&join_params(), &mut |_| {})
            .unwrap();
        let step = fs::read_to_string(dir.join(STEP_FILE))
            .unwrap()
            .replace("\"etcd/ca.key\"", "\"../token\"");
        fs::write(dir.join(STEP_FILE), step).unwrap();
        assert!(matches!(
            Handoff::read(&dir),
            Err(HandoffError::Invalid(ClusterError::BadFileName(_)))
        ));
    }

    #[test]
    fn the_reader_refuses_unknown_kinds_missing_and_oversized_files() {
        let tmp = TempDir::new("handoff-read");
        let dir = tmp.path().join("confboot");
        assert_eq!(
            Handoff::read(&dir),
            Err(HandoffError::Missing(STEP_FILE.into()))
        );
        HandoffBackend::new(&dir)
            .join_cluster(&join_params(), &mut |_| {})
            .unwrap();
        let step = fs::read(dir.join(STEP_FILE)).unwrap();
        let text = String::from_utf8(step.clone()).unwrap();

        fs::write(dir.join(STEP_FILE), text.replace("\"join\",", "\"reset\",")).unwrap();
        assert_eq!(
            Handoff::read(&dir),
            Err(HandoffError::UnknownKind("reset".into()))
        );
        fs::write(
            dir.join(STEP_FILE),
            text.replace("\"version\": 1", "\"version\": 2"),
        )
        .unwrap();
        assert!(matches!(
            Handoff::read(&dir),
            Err(HandoffError::Malformed(_))
        ));
        fs::write(dir.join(STEP_FILE), &step[..step.len() / 2]).unwrap();
        assert!(matches!(
            Handoff::read(&dir),
            Err(HandoffError::Malformed(_))
        ));
        let mut big = step.clone();
        big.resize(MAX_STEP_FILE_BYTES as usize + 1, b' ');
        fs::write(dir.join(STEP_FILE), &big).unwrap();
        assert!(matches!(
            Handoff::read(&dir),
            Err(HandoffError::TooLarge { .. })
        ));

        fs::write(dir.join(STEP_FILE), &step).unwrap();
        assert!(Handoff::read(&dir).is_ok());
        fs::write(
            dir.join("pki/ca.key"),
            vec![b'k'; MAX_SECRET_FILE_BYTES as usize + 1],
        )
        .unwrap();
        assert_eq!(
            Handoff::read(&dir),
            Err(HandoffError::TooLarge {
                file: "pki/ca.key".into(),
                limit: MAX_SECRET_FILE_BYTES
            })
        );
        fs::write(dir.join(TOKEN_FILE), b"not a token").unwrap();
        assert!(matches!(Handoff::read(&dir), Err(HandoffError::Invalid(_))));
        fs::remove_file(dir.join(TOKEN_FILE)).unwrap();
        assert_eq!(
            Handoff::read(&dir),
            Err(HandoffError::Missing(TOKEN_FILE.into()))
        );
    }

    #[test]
    fn removing_the_secrets_keeps_the_parameters_and_the_done_mark() {
        let tmp = TempDir::new("handoff-remove");
        let dir = tmp.path().join("confboot");
        HandoffBackend::new(&dir)
            .join_cluster(&join_params(), &mut |_| {})
            .unwrap();
        assert!(!is_done(&dir));
        mark_done(&dir, "joined").unwrap();
        assert!(is_done(&dir));
        let removed = remove_secrets(&dir).unwrap();
        assert_eq!(
            removed,
            [TOKEN_FILE, KUBELET_CERT_FILE, KUBELET_KEY_FILE, "pki/"]
        );
        let left: Vec<String> = modes(&dir).into_iter().map(|(n, _)| n).collect();
        assert_eq!(left, [DONE_FILE, STEP_FILE]);
        assert!(remove_secrets(&dir).unwrap().is_empty());
        // A new handoff replaces an earlier step's parameters and done mark.
        HandoffBackend::new(&dir)
            .init_cluster(&init_params(), &mut |_| {})
            .unwrap();
        assert!(!is_done(&dir));
        assert!(matches!(Handoff::read(&dir), Ok(Handoff::Init(_))));
    }

    #[test]
    fn the_step_document_is_one_object_of_known_members_each_once() {
        let good = String::from_utf8(StepDocument::Init(init_params()).to_json()).unwrap();
        assert!(StepDocument::parse(good.as_bytes()).is_ok());
        let malformed = |text: &str| {
            assert_ne!(text, good, "the change applies");
            let Err(e) = StepDocument::parse(text.as_bytes()) else {
                panic!("{text} accepted")
            };
            assert!(matches!(e, HandoffError::Malformed(_)), "{text}: {e:?}");
        };
        malformed(&good.replace("\"pod_cidr\"", "\"pod_cidrs\""));
        malformed(&good.replace("\"kind\"", "\"other\": 1, \"kind\""));
        malformed(&good.replace("\"conformance_mode\": false", "\"conformance_mode\": 0"));
        malformed(&good.replace("\"version\": 1", "\"version\": 1.0"));
        malformed(&good.replace(",\n  \"version\": 1", ""));
        malformed(&good.replace("\"init\":", "\"join\": {}, \"init\":"));
        malformed(&good.replace("\"kind\": \"init\"", "\"kind\": \"join\""));
        malformed(&good.replace(
            "\"api_server_cert_sans\": [",
            &format!(
                "\"api_server_cert_sans\": [{}",
                "\"a\", ".repeat(MAX_CERT_SANS)
            ),
        ));
        malformed(r#"["init", 1]"#);
        malformed(r#"{"version": 1, "kind": "init", "init": ["confboot", "v1.31.1"]}"#);
        assert_eq!(
            StepDocument::parse(
                good.replace("\"kind\"", "\"\\u006bind\": \"x\", \"kind\"")
                    .as_bytes()
            ),
            Err(HandoffError::RepeatedKey("kind".into()))
        );
        assert_eq!(
            StepDocument::parse(
                good.replace("\"node_ip\"", "\"node_ip\": \"10.0.0.9\", \"node_ip\"")
                    .as_bytes()
            ),
            Err(HandoffError::RepeatedKey("node_ip".into()))
        );
    }

    #[test]
    fn step_documents_round_trip() {
        let init = StepDocument::Init(init_params());
        assert_eq!(StepDocument::parse(&init.to_json()), Ok(init));
        let join = StepDocument::Join(JoinStep {
            api_server_endpoint: "[fd00::1]:6443".into(),
            discovery_token_ca_cert_hash: format!("sha256:{}", "0".repeat(64)),
            is_control_plane: false,
            control_plane_files: vec![],
            node_ip: "fd00::2".into(),
            kubernetes_version: "1.30.4".into(),
            node_name: String::new(),
            kubelet_cert: false,
            token_valid_until: u64::MAX,
        });
        assert_eq!(StepDocument::parse(&join.to_json()), Ok(join));
    }
}
