//! The real cluster backend: `kubeadm init` / `kubeadm join` with a
//! configuration file.
//!
//! The configuration is written as JSON documents separated by `---` (kubeadm
//! reads YAML, and JSON is YAML): `kubeadm.k8s.io/v1beta4` for Kubernetes
//! 1.31 and later (kubeadm's current API; newer kubeadm releases accept only
//! it), `v1beta3` before. The file holds the bootstrap token on joins, so it is
//! written with mode 0600, by default under `/run` (a tmpfs: it never reaches
//! a disk), and removed when kubeadm is done, whatever the outcome.
//!
//! Commands (secrets only in the config file, never in argv):
//! - `kubeadm init --config DIR/kubeadm-init.json --skip-phases=preflight --skip-token-print --skip-certificate-key-print`
//! - `kubeadm join --config DIR/kubeadm-join.json --skip-phases=preflight`
//!
//! (`--skip-*` flags are the ones kubeadm accepts next to `--config`.)
//! kubeadm's output is streamed to the log callback line by line, with
//! bootstrap tokens, the join token and certificate keys redacted.

use std::collections::HashSet;
use std::fs::{self, DirBuilder, OpenOptions, Permissions};
use std::io::{self, Read, Write};
use std::net::IpAddr;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{Value, json};
use zeroize::{Zeroize, Zeroizing};

use super::{
    ClusterBackend, ClusterError, InitClusterOutput, InitClusterParams, JoinClusterParams,
};
use confboot_kms::SecretBytes;
use confboot_sys::process::{CommandRunner, ProcessRunner, Stream};

/// Where the configuration file goes by default (a tmpfs on nodes).
pub const DEFAULT_CONFIG_DIR: &str = "/run/confboot/kubeadm";
/// kubeadm's PKI directory.
pub const DEFAULT_PKI_DIR: &str = "/etc/kubernetes/pki";
/// The kubelet's default `--cert-dir`: it serves with `kubelet.crt` and
/// `kubelet.key` from there when they exist, instead of a self-signed pair.
pub const DEFAULT_KUBELET_CERT_DIR: &str = "/var/lib/kubelet/pki";
/// Where `kubeadm init` writes the admin kubeconfig.
pub const DEFAULT_ADMIN_KUBECONFIG: &str = "/etc/kubernetes/admin.conf";
/// The API server's port.
pub const DEFAULT_API_SERVER_PORT: u16 = 6443;
/// Largest admin kubeconfig read back.
const MAX_KUBECONFIG_BYTES: u64 = 1 << 20;
/// How many of kubeadm's last stderr lines go into an error.
const ERROR_TAIL_LINES: usize = 10;

/// The kubeadm configuration API a file is written in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KubeadmApi {
    /// `kubeadm.k8s.io/v1beta3` (Kubernetes 1.22 to 1.30 and, deprecated, later).
    V1Beta3,
    /// `kubeadm.k8s.io/v1beta4` (Kubernetes 1.31 and later).
    V1Beta4,
}

impl KubeadmApi {
    /// The `apiVersion` string.
    pub fn api_version(self) -> &'static str {
        match self {
            KubeadmApi::V1Beta3 => "kubeadm.k8s.io/v1beta3",
            KubeadmApi::V1Beta4 => "kubeadm.k8s.io/v1beta4",
        }
    }

    /// kubelet extra arguments: a map in v1beta3, a list of `{name, value}` in v1beta4.
    fn args(self, args: &[(&str, &str)]) -> Value {
        match self {
            KubeadmApi::V1Beta3 => Value::Object(
                args.iter()
                    .map(|(k, v)| (k.to_string(), Value::from(*v)))
                    .collect(),
            ),
            KubeadmApi::V1Beta4 => args
                .iter()
                .map(|(k, v)| json!({"name": k, "value": v}))
                .collect(),
        }
    }
}

/// A Kubernetes version, checked and written as `vMAJOR.MINOR.PATCH[-suffix]`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KubeVersion {
    /// The normalized text (`v1.30.4`).
    pub text: String,
    /// The minor version.
    pub minor: u32,
}

impl KubeVersion {
    /// Parses `v1.30.4` or `1.30.4` (a `-suffix` after the patch is kept).
    pub fn parse(s: &str) -> Result<KubeVersion, ClusterError> {
        let bad = || ClusterError::InvalidParams(format!("bad Kubernetes version {s:?}"));
        let bare = s.strip_prefix('v').unwrap_or(s);
        let mut parts = bare.splitn(3, '.');
        let (major, minor, rest) = (
            parts.next().ok_or_else(bad)?,
            parts.next().ok_or_else(bad)?,
            parts.next().ok_or_else(bad)?,
        );
        let (patch, suffix) = rest.split_once('-').unwrap_or((rest, ""));
        let numeric =
            |p: &str| !p.is_empty() && p.len() <= 4 && p.bytes().all(|b| b.is_ascii_digit());
        if major != "1"
            || !numeric(minor)
            || !numeric(patch)
            || !suffix
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'-')
        {
            return Err(bad());
        }
        Ok(KubeVersion {
            text: format!("v{bare}"),
            minor: minor.parse().map_err(|_| bad())?,
        })
    }

    /// The configuration API kubeadm of this version reads best.
    pub fn kubeadm_api(&self) -> KubeadmApi {
        if self.minor >= 31 {
            KubeadmApi::V1Beta4
        } else {
            KubeadmApi::V1Beta3
        }
    }
}

/// The kubeadm backend. Fields are public for configuration; [`KubeadmBackend::new`]
/// sets the node defaults.
pub struct KubeadmBackend {
    /// The kubeadm program (a bare name is looked up in `PATH`).
    pub kubeadm: PathBuf,
    /// Where the configuration file is written (created with mode 0700).
    pub config_dir: PathBuf,
    /// kubeadm's certificate directory; control-plane files are written here.
    pub pki_dir: PathBuf,
    /// Where `kubeadm init` leaves the admin kubeconfig.
    pub admin_kubeconfig: PathBuf,
    /// The kubelet's certificate directory (its `--cert-dir`), where a
    /// joining node's signed serving certificate is installed.
    pub kubelet_cert_dir: PathBuf,
    /// The API server's port on this node.
    pub api_server_port: u16,
    /// `controlPlaneEndpoint` for init (a load balancer's `host:port`);
    /// `None`: this node's IP and [`Self::api_server_port`]. kubeadm needs one
    /// for later control-plane joins.
    pub control_plane_endpoint: Option<String>,
    /// `--skip-phases` of `kubeadm init`.
    pub init_skip_phases: Vec<String>,
    /// How long `kubeadm init` waits for the kubelet, for the control-plane
    /// components to be healthy and for each API server or etcd call
    /// (v1beta4's `timeouts`; v1beta3's `apiServer.timeoutForControlPlane`);
    /// `None`: kubeadm's defaults (4 minutes for the components).
    pub init_wait: Option<Duration>,
    /// The tag of the etcd image the control plane's static pod runs
    /// (`etcd.local.imageTag`), for an image that carries another etcd
    /// release than the one kubeadm names; `None`: kubeadm's.
    pub etcd_image_tag: Option<ImageTag>,
    /// `--skip-phases` of `kubeadm join`.
    pub join_skip_phases: Vec<String>,
    /// Runs kubeadm.
    pub runner: Box<dyn CommandRunner>,
}

impl KubeadmBackend {
    /// The node defaults: `kubeadm` from `PATH`, [`DEFAULT_CONFIG_DIR`],
    /// [`DEFAULT_PKI_DIR`], [`DEFAULT_ADMIN_KUBECONFIG`], port 6443, the
    /// `preflight` phase skipped (as Constellation does), commands run by `runner`.
    pub fn new(runner: Box<dyn CommandRunner>) -> KubeadmBackend {
        KubeadmBackend {
            kubeadm: PathBuf::from("kubeadm"),
            config_dir: PathBuf::from(DEFAULT_CONFIG_DIR),
            pki_dir: PathBuf::from(DEFAULT_PKI_DIR),
            admin_kubeconfig: PathBuf::from(DEFAULT_ADMIN_KUBECONFIG),
            kubelet_cert_dir: PathBuf::from(DEFAULT_KUBELET_CERT_DIR),
            api_server_port: DEFAULT_API_SERVER_PORT,
            control_plane_endpoint: None,
            init_skip_phases: vec!["preflight".into()],
            init_wait: None,
            etcd_image_tag: None,
            join_skip_phases: vec!["preflight".into()],
            runner,
        }
    }

    /// [`KubeadmBackend::new`] with a [`ProcessRunner::default`].
    pub fn with_process_runner() -> KubeadmBackend {
        KubeadmBackend::new(Box::new(ProcessRunner::default()))
    }

    /// Writes the config file; the guard removes it when dropped.
    fn write_config(&self, name: &str, docs: &mut [Value]) -> Result<ConfigFile, ClusterError> {
        let mut text = Zeroizing::new(Vec::with_capacity(64 << 10));
        for (i, doc) in docs.iter().enumerate() {
            if i > 0 {
                text.extend_from_slice(b"\n---\n");
            }
            serde_json::to_writer_pretty(&mut *text, doc)
                .map_err(|e| ClusterError::Io(format!("encoding {name}: {e}")))?;
        }
        text.push(b'\n');
        for doc in docs.iter_mut() {
            if let Some(Value::String(token)) = doc.pointer_mut("/discovery/bootstrapToken/token") {
                token.zeroize();
            }
        }
        make_dir(&self.config_dir)?;
        let path = self.config_dir.join(name);
        write_file(&path, &text, 0o600)?;
        Ok(ConfigFile(path))
    }

    /// Runs kubeadm, streaming redacted lines to `log`.
    fn run(
        &self,
        args: &[String],
        secrets: &[&str],
        log: &mut dyn FnMut(&str),
    ) -> Result<(), ClusterError> {
        let mut on_line = |_: Stream, line: &str| log(&redact(line, secrets));
        let out = self.runner.run(&self.kubeadm, args, None, &mut on_line)?;
        if out.success() {
            return Ok(());
        }
        let start = out.stderr_tail.len().saturating_sub(ERROR_TAIL_LINES);
        Err(ClusterError::Command {
            program: self.kubeadm.display().to_string(),
            status: out.status,
            stderr_tail: out.stderr_tail[start..]
                .iter()
                .map(|l| redact(l, secrets))
                .collect::<Vec<_>>()
                .join("\n"),
        })
    }

    fn skip_phases(phases: &[String]) -> Option<String> {
        (!phases.is_empty()).then(|| format!("--skip-phases={}", phases.join(",")))
    }

    fn read_kubeconfig(&self) -> Result<SecretBytes, ClusterError> {
        let path = &self.admin_kubeconfig;
        let io = |e: io::Error| ClusterError::Io(format!("reading {}: {e}", path.display()));
        let file = fs::File::open(path).map_err(io)?;
        let mut data = Zeroizing::new(Vec::with_capacity(16 << 10));
        file.take(MAX_KUBECONFIG_BYTES + 1)
            .read_to_end(&mut data)
            .map_err(io)?;
        if data.len() as u64 > MAX_KUBECONFIG_BYTES || data.is_empty() {
            return Err(ClusterError::Io(format!(
                "{} is empty or larger than {MAX_KUBECONFIG_BYTES} bytes",
                path.display()
            )));
        }
        Ok(SecretBytes::new(std::mem::take(&mut *data)))
    }
}

/// A written configuration file, removed when dropped.
struct ConfigFile(PathBuf);

impl Drop for ConfigFile {
    fn drop(&mut self) {
        if let Err(e) = fs::remove_file(&self.0) {
            log::warn!("removing {}: {e}", self.0.display());
        }
    }
}

impl ClusterBackend for KubeadmBackend {
    fn init_cluster(
        &self,
        params: &InitClusterParams,
        log: &mut dyn FnMut(&str),
    ) -> Result<InitClusterOutput, ClusterError> {
        let version = KubeVersion::parse(&params.kubernetes_version)?;
        let api = version.kubeadm_api();
        let node_ip = parse_ip("node IP", &params.node_ip)?;
        let node_ip_text = node_ip.to_string();
        if !params.cluster_name.is_empty() {
            check_name("cluster name", &params.cluster_name)?;
        }
        for san in &params.api_server_cert_sans {
            check_san(san)?;
        }
        check_cidrs("service CIDR", &params.service_cidr)?;
        check_cidrs("pod CIDR", &params.pod_cidr)?;
        let endpoint = match &self.control_plane_endpoint {
            Some(e) => {
                check_endpoint(e)?;
                e.clone()
            }
            None => host_port(node_ip, self.api_server_port),
        };

        let mut init = json!({
            "apiVersion": api.api_version(),
            "kind": "InitConfiguration",
            "localAPIEndpoint": {
                "advertiseAddress": node_ip_text,
                "bindPort": self.api_server_port,
            },
            "nodeRegistration": {
                "kubeletExtraArgs": api.args(&[("node-ip", &node_ip_text)]),
            },
        });
        let mut networking = serde_json::Map::new();
        if !params.service_cidr.is_empty() {
            networking.insert("serviceSubnet".into(), params.service_cidr.clone().into());
        }
        if !params.pod_cidr.is_empty() {
            networking.insert("podSubnet".into(), params.pod_cidr.clone().into());
        }
        let mut cluster = json!({
            "apiVersion": api.api_version(),
            "kind": "ClusterConfiguration",
            "kubernetesVersion": version.text,
            "controlPlaneEndpoint": endpoint,
            "certificatesDir": self.pki_dir.to_string_lossy(),
            "networking": networking,
            "apiServer": {"certSANs": params.api_server_cert_sans},
        });
        if !params.cluster_name.is_empty() {
            cluster["clusterName"] = params.cluster_name.clone().into();
        }
        if let Some(wait) = self.init_wait {
            let wait = go_duration(wait);
            match api {
                KubeadmApi::V1Beta4 => {
                    init["timeouts"] = json!({
                        "controlPlaneComponentHealthCheck": wait,
                        "kubeletHealthCheck": wait,
                        "kubernetesAPICall": wait,
                        "etcdAPICall": wait,
                    });
                }
                KubeadmApi::V1Beta3 => cluster["apiServer"]["timeoutForControlPlane"] = wait.into(),
            }
        }
        if let Some(tag) = &self.etcd_image_tag {
            cluster["etcd"] = json!({"local": {"imageTag": tag.as_str()}});
        }

        let config = self.write_config("kubeadm-init.json", &mut [init, cluster])?;
        let mut args = vec![
            "init".to_string(),
            "--config".to_string(),
            config.0.to_string_lossy().into_owned(),
        ];
        args.extend(Self::skip_phases(&self.init_skip_phases));
        args.extend([
            "--skip-token-print".into(),
            "--skip-certificate-key-print".into(),
        ]);
        self.run(&args, &[], log)?;
        drop(config);
        Ok(InitClusterOutput {
            kubeconfig: self.read_kubeconfig()?,
        })
    }

    fn join_cluster(
        &self,
        params: &JoinClusterParams,
        log: &mut dyn FnMut(&str),
    ) -> Result<(), ClusterError> {
        let version = KubeVersion::parse(&params.kubernetes_version)?;
        let api = version.kubeadm_api();
        let node_ip = parse_ip("node IP", &params.node_ip)?;
        let node_ip_text = node_ip.to_string();
        let token = check_token(&params.token)?;
        check_endpoint(&params.api_server_endpoint)?;
        let ca_hash = check_ca_hash(&params.discovery_token_ca_cert_hash)?;
        // Check every name before writing anything.
        check_control_plane_files(
            params.is_control_plane,
            params
                .control_plane_files
                .iter()
                .map(|(name, _)| name.as_str()),
        )?;
        if !params.node_name.is_empty() {
            super::kubelet_cert::check_node_name(&params.node_name)
                .map_err(|e| ClusterError::InvalidParams(e.to_string()))?;
        }
        for (name, data) in &params.control_plane_files {
            write_pki_file(&self.pki_dir, name, data.expose(), pki_file_mode(name))?;
        }
        if let Some(kc) = &params.kubelet_cert {
            let key = std::str::from_utf8(kc.key_pem.expose()).map_err(|_| {
                ClusterError::InvalidParams("the kubelet key is not PEM text".into())
            })?;
            super::kubelet_cert::install_kubelet_cert(&self.kubelet_cert_dir, &kc.cert_der, key)
                .map_err(|e| ClusterError::Io(e.to_string()))?;
            log(&format!(
                "kubelet serving certificate installed in {}",
                self.kubelet_cert_dir.display()
            ));
        }

        let mut join = json!({
            "apiVersion": api.api_version(),
            "kind": "JoinConfiguration",
            "caCertPath": self.pki_dir.join("ca.crt").to_string_lossy(),
            "nodeRegistration": {
                "kubeletExtraArgs": api.args(&[("node-ip", &node_ip_text)]),
            },
            "discovery": {
                "bootstrapToken": {
                    "token": &*token,
                    "apiServerEndpoint": params.api_server_endpoint,
                    "caCertHashes": [ca_hash],
                },
            },
        });
        if !params.node_name.is_empty() {
            join["nodeRegistration"]["name"] = json!(params.node_name);
        }
        if params.is_control_plane {
            join["controlPlane"] = json!({
                "localAPIEndpoint": {
                    "advertiseAddress": node_ip_text,
                    "bindPort": self.api_server_port,
                },
            });
        }
        let config = self.write_config("kubeadm-join.json", &mut [join])?;
        let mut args = vec![
            "join".to_string(),
            "--config".to_string(),
            config.0.to_string_lossy().into_owned(),
        ];
        args.extend(Self::skip_phases(&self.join_skip_phases));
        // The whole token and its secret half (kubeadm may print either).
        self.run(&args, &[&token, &token[7..]], log)
    }
}

/// A duration as Go's `time.ParseDuration` reads it, in whole seconds.
fn go_duration(d: Duration) -> String {
    format!("{}s", d.as_secs().max(1))
}

/// An image tag as the OCI distribution grammar has it
/// (`[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ImageTag(String);

impl ImageTag {
    /// Checks `tag` against the grammar.
    pub fn parse(tag: &str) -> Result<ImageTag, ClusterError> {
        let bytes = tag.as_bytes();
        let ok = (1..=128).contains(&bytes.len())
            && (bytes[0].is_ascii_alphanumeric() || bytes[0] == b'_')
            && bytes
                .iter()
                .all(|b| b.is_ascii_alphanumeric() || b"_.-".contains(b));
        if ok {
            Ok(ImageTag(tag.to_string()))
        } else {
            Err(ClusterError::InvalidParams(format!(
                "bad image tag {tag:?} (want [A-Za-z0-9_][A-Za-z0-9_.-], at most 128 characters)"
            )))
        }
    }

    /// The tag.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// Checks a `kubeadm init` phase name for `--skip-phases`
/// (`preflight`, `addon/coredns`: lower-case words joined by `-` and `/`).
pub fn check_phase(phase: &str) -> Result<(), ClusterError> {
    let ok = (1..=64).contains(&phase.len())
        && phase.split('/').all(|word| {
            !word.is_empty()
                && word
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        });
    if ok {
        Ok(())
    } else {
        Err(ClusterError::InvalidParams(format!(
            "bad kubeadm phase {phase:?}"
        )))
    }
}

pub(crate) fn parse_ip(what: &str, s: &str) -> Result<IpAddr, ClusterError> {
    s.parse()
        .map_err(|_| ClusterError::InvalidParams(format!("{what} {s:?} is not an IP address")))
}

pub(crate) fn host_port(ip: IpAddr, port: u16) -> String {
    match ip {
        IpAddr::V4(v4) => format!("{v4}:{port}"),
        IpAddr::V6(v6) => format!("[{v6}]:{port}"),
    }
}

fn is_dns_name(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 253
        && s.split('.').all(|label| {
            !label.is_empty()
                && label.len() <= 63
                && label
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-')
        })
}

pub(crate) fn check_name(what: &str, s: &str) -> Result<(), ClusterError> {
    if s.len() <= 63
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b))
    {
        Ok(())
    } else {
        Err(ClusterError::InvalidParams(format!("bad {what} {s:?}")))
    }
}

pub(crate) fn check_san(san: &str) -> Result<(), ClusterError> {
    let wildcard = san.strip_prefix("*.").unwrap_or(san);
    if san.parse::<IpAddr>().is_ok() || is_dns_name(wildcard) {
        Ok(())
    } else {
        Err(ClusterError::InvalidParams(format!(
            "API server certificate SAN {san:?} is neither an IP nor a DNS name"
        )))
    }
}

pub(crate) fn check_cidrs(what: &str, s: &str) -> Result<(), ClusterError> {
    if s.is_empty() {
        return Ok(());
    }
    for cidr in s.split(',') {
        let bad = || ClusterError::InvalidParams(format!("bad {what} {s:?}"));
        let (ip, prefix) = cidr.split_once('/').ok_or_else(bad)?;
        let ip: IpAddr = ip.parse().map_err(|_| bad())?;
        let prefix: u8 = prefix.parse().map_err(|_| bad())?;
        if prefix > if ip.is_ipv4() { 32 } else { 128 } {
            return Err(bad());
        }
    }
    Ok(())
}

pub(crate) fn check_endpoint(e: &str) -> Result<(), ClusterError> {
    let bad = || ClusterError::InvalidParams(format!("bad API server endpoint {e:?}"));
    let (host, port) = e.rsplit_once(':').ok_or_else(bad)?;
    let port: u16 = port.parse().map_err(|_| bad())?;
    let host_ok = match host.strip_prefix('[').and_then(|h| h.strip_suffix(']')) {
        Some(v6) => v6.parse::<std::net::Ipv6Addr>().is_ok(),
        None => host.parse::<std::net::Ipv4Addr>().is_ok() || is_dns_name(host),
    };
    if port == 0 || !host_ok {
        return Err(bad());
    }
    Ok(())
}

/// A bootstrap token `[a-z0-9]{6}.[a-z0-9]{16}`, as text. Errors never quote it.
pub(crate) fn check_token(token: &SecretBytes) -> Result<Zeroizing<String>, ClusterError> {
    let t = token.expose();
    let part = |p: &[u8]| {
        p.iter()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
    };
    if t.len() == 23 && t[6] == b'.' && part(&t[..6]) && part(&t[7..]) {
        Ok(Zeroizing::new(
            String::from_utf8(t.to_vec()).expect("checked ASCII"),
        ))
    } else {
        Err(ClusterError::InvalidParams(
            "the bootstrap token is not of the form [a-z0-9]{6}.[a-z0-9]{16}".into(),
        ))
    }
}

/// `sha256:<64 hex>`, lowercased.
pub(crate) fn check_ca_hash(h: &str) -> Result<String, ClusterError> {
    match h.strip_prefix("sha256:") {
        Some(hex) if hex.len() == 64 && hex.bytes().all(|b| b.is_ascii_hexdigit()) => {
            Ok(format!("sha256:{}", hex.to_ascii_lowercase()))
        }
        _ => Err(ClusterError::InvalidParams(format!(
            "discovery CA cert hash {h:?} is not sha256:<64 hex digits>"
        ))),
    }
}

/// The control-plane files of a join: none for a worker, and for a control
/// plane names that stay in the PKI directory ([`check_pki_name`]), each
/// once.
pub(crate) fn check_control_plane_files<'a>(
    is_control_plane: bool,
    names: impl ExactSizeIterator<Item = &'a str>,
) -> Result<(), ClusterError> {
    if !is_control_plane && names.len() > 0 {
        return Err(ClusterError::InvalidParams(
            "control-plane files given for a worker join".into(),
        ));
    }
    let mut seen = HashSet::new();
    for name in names {
        check_pki_name(name)?;
        if !seen.insert(name) {
            return Err(ClusterError::BadFileName(format!("{name:?} given twice")));
        }
    }
    Ok(())
}

/// A control-plane file name: relative, components of `[A-Za-z0-9._-]`, no
/// `.` or `..` components.
pub(crate) fn check_pki_name(name: &str) -> Result<(), ClusterError> {
    let bad = |why: &str| ClusterError::BadFileName(format!("{name:?}: {why}"));
    if name.is_empty() || name.len() > 255 {
        return Err(bad("empty or too long"));
    }
    if name.starts_with('/') {
        return Err(bad("absolute path"));
    }
    for c in name.split('/') {
        if c.is_empty() || c == "." || c == ".." {
            return Err(bad("empty, '.' or '..' path component"));
        }
        if !c
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b))
        {
            return Err(bad("characters other than letters, digits, '.', '_', '-'"));
        }
    }
    Ok(())
}

/// The mode of a control-plane file: certificates and public keys are
/// world-readable, anything else is treated as a key.
pub fn pki_file_mode(name: &str) -> u32 {
    if name.ends_with(".crt") || name.ends_with(".pub") {
        0o644
    } else {
        0o600
    }
}

pub(crate) fn make_dir(dir: &Path) -> Result<(), ClusterError> {
    DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(|e| ClusterError::Io(format!("creating {}: {e}", dir.display())))
}

/// Writes `data` under `pki_dir` at the checked relative `name` with `mode`: directories
/// on the way must be real directories (no symlinks out of the PKI tree).
pub(crate) fn write_pki_file(
    pki_dir: &Path,
    name: &str,
    data: &[u8],
    mode: u32,
) -> Result<(), ClusterError> {
    make_dir(pki_dir)?;
    let components: Vec<&str> = name.split('/').collect();
    let mut dir = pki_dir.to_path_buf();
    for c in &components[..components.len() - 1] {
        dir.push(c);
        match fs::symlink_metadata(&dir) {
            Ok(m) if m.is_dir() => {}
            Ok(_) => {
                return Err(ClusterError::BadFileName(format!(
                    "{name:?}: {} is not a directory",
                    dir.display()
                )));
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => make_dir(&dir)?,
            Err(e) => return Err(ClusterError::Io(format!("{}: {e}", dir.display()))),
        }
    }
    write_file(&dir.join(components[components.len() - 1]), data, mode)
}

/// Writes a file atomically with exactly `mode` (whatever the umask): a new
/// temporary file (never following a symlink) renamed over the target.
pub(crate) fn write_file(path: &Path, data: &[u8], mode: u32) -> Result<(), ClusterError> {
    let io = |e: io::Error| ClusterError::Io(format!("writing {}: {e}", path.display()));
    let name = path
        .file_name()
        .ok_or_else(|| ClusterError::Io(format!("{} has no file name", path.display())))?;
    let tmp = path.with_file_name(format!(
        ".{}.tmp{}",
        name.to_string_lossy(),
        std::process::id()
    ));
    let _ = fs::remove_file(&tmp);
    let result = (|| {
        let mut f = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(mode)
            .open(&tmp)?;
        f.set_permissions(Permissions::from_mode(mode))?;
        f.write_all(data)?;
        f.sync_all()?;
        fs::rename(&tmp, path)
    })();
    if result.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    result.map_err(io)
}

/// A log line with secrets replaced: the exact `secrets`, anything shaped like
/// a bootstrap token, and long hex runs not preceded by `sha256:` (kubeadm's
/// certificate keys).
pub fn redact(line: &str, secrets: &[&str]) -> String {
    let mut line = line.to_string();
    for s in secrets.iter().filter(|s| !s.is_empty()) {
        line = line.replace(s, "<redacted>");
    }
    let b = line.as_bytes();
    let alnum = |c: u8| c.is_ascii_lowercase() || c.is_ascii_digit();
    let mut out = String::with_capacity(line.len());
    let mut i = 0;
    while i < b.len() {
        let boundary_before = i == 0 || !b[i - 1].is_ascii_alphanumeric();
        // A bootstrap token.
        if boundary_before
            && i + 23 <= b.len()
            && b[i..i + 6].iter().all(|&c| alnum(c))
            && b[i + 6] == b'.'
            && b[i + 7..i + 23].iter().all(|&c| alnum(c))
            && (i + 23 == b.len() || !b[i + 23].is_ascii_alphanumeric())
        {
            out.push_str("<redacted-token>");
            i += 23;
            continue;
        }
        // A long hex run.
        if boundary_before {
            let run = b[i..].iter().take_while(|c| c.is_ascii_hexdigit()).count();
            if run >= 32 && !line[..i].ends_with("sha256:") {
                out.push_str("<redacted-hex>");
                i += run;
                continue;
            }
        }
        let ch = line[i..].chars().next().expect("in bounds");
        out.push(ch);
        i += ch.len_utf8();
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions() {
        let v = KubeVersion::parse("1.30.4").unwrap();
        assert_eq!((v.text.as_str(), v.minor), ("v1.30.4", 30));
        assert_eq!(v.kubeadm_api(), KubeadmApi::V1Beta3);
        let v = KubeVersion::parse("v1.31.0-rc.1").unwrap();
        assert_eq!(
            (v.text.as_str(), v.kubeadm_api()),
            ("v1.31.0-rc.1", KubeadmApi::V1Beta4)
        );
        for bad in [
            "",
            "v1.30",
            "2.0.0",
            "v1.x.0",
            "v1.30.0 --evil",
            "v1.30.0-a b",
        ] {
            assert!(KubeVersion::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn redaction() {
        let t = "abcdef.0123456789abcdef";
        assert_eq!(
            redact(&format!("kubeadm join 10.0.0.1:6443 --token {t} \\"), &[]),
            "kubeadm join 10.0.0.1:6443 --token <redacted-token> \\"
        );
        let key = "a".repeat(64);
        let hash = format!("sha256:{}", "b".repeat(64));
        assert_eq!(
            redact(
                &format!("--certificate-key {key} --discovery-token-ca-cert-hash {hash}"),
                &[]
            ),
            format!("--certificate-key <redacted-hex> --discovery-token-ca-cert-hash {hash}")
        );
        assert_eq!(
            redact("secret=hunter22", &["hunter22"]),
            "secret=<redacted>"
        );
        assert_eq!(
            redact("[init] Using Kubernetes version: v1.30.4 ✓", &[]),
            "[init] Using Kubernetes version: v1.30.4 ✓"
        );
    }

    #[test]
    fn names_and_modes() {
        for ok in [
            "ca.crt",
            "ca.key",
            "etcd/ca.key",
            "front-proxy-ca.crt",
            "sa.pub",
        ] {
            assert!(check_pki_name(ok).is_ok(), "{ok}");
        }
        for bad in [
            "",
            "/etc/passwd",
            "../x",
            "etcd/../../x",
            "a//b",
            "./ca.crt",
            "etcd/",
            "a b",
            "a\\b",
        ] {
            assert!(
                matches!(check_pki_name(bad), Err(ClusterError::BadFileName(_))),
                "{bad}"
            );
        }
        assert_eq!(pki_file_mode("ca.crt"), 0o644);
        assert_eq!(pki_file_mode("sa.pub"), 0o644);
        assert_eq!(pki_file_mode("etcd/ca.key"), 0o600);
        assert_eq!(pki_file_mode("sa.key"), 0o600);
        assert_eq!(pki_file_mode("something"), 0o600);
    }

    #[test]
    fn parameter_checks() {
        assert!(check_endpoint("10.0.0.1:6443").is_ok());
        assert!(check_endpoint("[fd00::1]:6443").is_ok());
        assert!(check_endpoint("api.example.com:443").is_ok());
        for bad in [
            "10.0.0.1",
            "10.0.0.1:0",
            ":6443",
            "a b:1",
            "[zz]:1",
            "10.0.0.1:99999",
        ] {
            assert!(check_endpoint(bad).is_err(), "{bad}");
        }
        assert!(check_cidrs("x", "10.96.0.0/12,fd00::/108").is_ok());
        for bad in ["10.96.0.0", "10.96.0.0/33", "x/1"] {
            assert!(check_cidrs("x", bad).is_err(), "{bad}");
        }
        assert_eq!(
            check_ca_hash(&format!("sha256:{}", "AB".repeat(32))).unwrap(),
            format!("sha256:{}", "ab".repeat(32))
        );
        assert!(check_ca_hash(&"ab".repeat(32)).is_err());
        assert!(check_token(&SecretBytes::new(b"abcdef.0123456789abcdef".to_vec())).is_ok());
        for bad in [
            "ABCDEF.0123456789abcdef",
            "abcdef0123456789abcdef",
            "abcdef.0123456789abcde",
        ] {
            let e = check_token(&SecretBytes::new(bad.as_bytes().to_vec())).unwrap_err();
            assert!(!e.to_string().contains(bad));
        }
        assert!(check_san("*.example.com").is_ok());
        assert!(check_san("fd00::1").is_ok());
        assert!(check_san("bad name").is_err());
    }
}
