//! The cluster step: making this node the first control plane (init) or a
//! member of an existing cluster (join). Kubernetes cannot run on the build
//! machines, so the step is a trait: [`KubeadmBackend`] is the real one (tested
//! by the configuration and commands it produces), [`HandoffBackend`] hands
//! the step over to the node's OS (it writes what kubeadm needs, and makes
//! the cluster's PKI for Init, see [`handoff`]), [`RecordingBackend`] a
//! test double for the bootstrapper's own tests.
//!
//! Tokens and keys never appear in argv or in the log callback.
//!
//! ```no_run
//! use confboot_cluster::{ClusterBackend, InitClusterParams, KubeadmBackend};
//!
//! # fn main() -> Result<(), confboot_cluster::ClusterError> {
//! let backend = KubeadmBackend::with_process_runner(); // kubeadm from PATH, 15 min limit
//! let params = InitClusterParams {
//!     kubernetes_version: "v1.30.4".into(),
//!     node_ip: "10.0.0.1".into(),
//!     ..Default::default()
//! };
//! let out = backend.init_cluster(&params, &mut |line| println!("{line}"))?;
//! let _admin_kubeconfig = out.kubeconfig; // SecretBytes
//! # Ok(())
//! # }
//! ```

use std::sync::Mutex;
use std::time::Duration;

use confboot_kms::SecretBytes;

pub mod generation;
pub mod handoff;
pub mod kubeadm;
pub mod kubelet_cert;
pub mod mark;
pub mod role;
pub mod ticket;

pub use handoff::HandoffBackend;
pub use kubeadm::KubeadmBackend;

/// What `init` needs.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct InitClusterParams {
    /// The cluster's name (kubeadm's `clusterName`); empty for kubeadm's default.
    pub cluster_name: String,
    /// Kubernetes version, `v1.30.4` or `1.30.4`.
    pub kubernetes_version: String,
    /// This node's IP (API server advertise address, kubelet `node-ip`).
    pub node_ip: String,
    /// Extra subject alternative names of the API server's certificate.
    pub api_server_cert_sans: Vec<String>,
    /// Service CIDR (comma-separated for dual stack); empty for kubeadm's default.
    pub service_cidr: String,
    /// Pod CIDR (comma-separated for dual stack); empty to leave unset.
    pub pod_cidr: String,
    /// Constellation's conformance mode. It selects the CNI's kube-proxy
    /// replacement, which is installed after `kubeadm init`, so the kubeadm
    /// configuration written here does not depend on it.
    pub conformance_mode: bool,
}

/// What `init` gives back.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InitClusterOutput {
    /// The admin kubeconfig (a secret: it holds the admin's client key).
    pub kubeconfig: SecretBytes,
}

/// What `join` needs (from the join ticket).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JoinClusterParams {
    /// The API server, `host:port`.
    pub api_server_endpoint: String,
    /// The bootstrap token, `[a-z0-9]{6}.[a-z0-9]{16}`.
    pub token: SecretBytes,
    /// `sha256:<hex>` of the cluster CA's public key.
    pub discovery_token_ca_cert_hash: String,
    /// Join as a control-plane node.
    pub is_control_plane: bool,
    /// Control-plane certificates and keys, by name relative to the PKI
    /// directory (`ca.crt`, `etcd/ca.key`, ...).
    pub control_plane_files: Vec<(String, SecretBytes)>,
    /// This node's IP.
    pub node_ip: String,
    /// Kubernetes version of the cluster (selects the kubeadm config API).
    pub kubernetes_version: String,
    /// The node's name (kubeadm's `nodeRegistration.name`); empty for
    /// kubeadm's default, the host name.
    pub node_name: String,
    /// The kubelet's serving certificate the join service signed, and its
    /// key ([`kubelet_cert`]); `None`: the kubelet makes a self-signed one.
    pub kubelet_cert: Option<KubeletCert>,
}

/// A kubelet serving certificate and its key, to install before the join.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KubeletCert {
    /// The DER certificate.
    pub cert_der: Vec<u8>,
    /// The PEM private key (a secret).
    pub key_pem: SecretBytes,
}

/// Why the cluster step failed. No variant carries a token or key.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ClusterError {
    /// A parameter is malformed (the message never quotes a secret).
    #[error("invalid cluster parameters: {0}")]
    InvalidParams(String),
    /// A control-plane file name would leave the PKI directory, or is otherwise refused.
    #[error("refused control-plane file: {0}")]
    BadFileName(String),
    /// Writing or reading files, or starting a program, failed.
    #[error("cluster setup I/O: {0}")]
    Io(String),
    /// The program exited unsuccessfully.
    #[error("{program} {}{}", how_it_ended(*status), after_colon(stderr_tail))]
    Command {
        /// The program.
        program: String,
        /// Its exit status (`None`: ended by a signal).
        status: Option<i32>,
        /// The last lines of its stderr (secrets redacted).
        stderr_tail: String,
    },
    /// The program ran longer than allowed and was killed.
    #[error("{program} did not finish within {after:?}")]
    TimedOut {
        /// The program.
        program: String,
        /// How long it ran.
        after: Duration,
    },
    /// The stop signal was raised; the program was killed.
    #[error("stopped")]
    Stopped,
}

impl From<confboot_sys::process::ProcessError> for ClusterError {
    fn from(e: confboot_sys::process::ProcessError) -> Self {
        use confboot_sys::process::ProcessError;
        match e {
            ProcessError::Io(m) => ClusterError::Io(m.to_string()),
            ProcessError::TimedOut { program, after } => ClusterError::TimedOut { program, after },
            ProcessError::Stopped => ClusterError::Stopped,
        }
    }
}

/// How a program ended, for [`ClusterError::Command`]: its exit status, or
/// that a signal killed it.
fn how_it_ended(status: Option<i32>) -> String {
    match status {
        Some(s) => format!("exited with {s}"),
        None => "was killed by a signal".to_string(),
    }
}

/// `: ` and `text`, or nothing for an empty text.
fn after_colon(text: &str) -> String {
    if text.is_empty() {
        String::new()
    } else {
        format!(": {text}")
    }
}

/// Makes this node part of a Kubernetes cluster.
pub trait ClusterBackend: Send + Sync {
    /// Creates a new cluster with this node as its first control plane,
    /// streaming progress lines to `log`; returns the admin kubeconfig.
    fn init_cluster(
        &self,
        params: &InitClusterParams,
        log: &mut dyn FnMut(&str),
    ) -> Result<InitClusterOutput, ClusterError>;
    /// Joins an existing cluster, streaming progress lines to `log`.
    fn join_cluster(
        &self,
        params: &JoinClusterParams,
        log: &mut dyn FnMut(&str),
    ) -> Result<(), ClusterError>;
}

/// One call a [`RecordingBackend`] received.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RecordedCall {
    /// `init_cluster` with these parameters.
    Init(InitClusterParams),
    /// `join_cluster` with these parameters.
    Join(JoinClusterParams),
}

/// **Test double** for code that drives a [`ClusterBackend`] (the
/// bootstrapper's init and join paths): records every call, emits configured
/// log lines, and returns a configured kubeconfig or a configured failure.
/// It creates no cluster.
pub struct RecordingBackend {
    calls: Mutex<Vec<RecordedCall>>,
    kubeconfig: SecretBytes,
    failure: Option<ClusterError>,
    log_lines: Vec<String>,
}

impl RecordingBackend {
    /// Succeeds, returning `kubeconfig` from init.
    pub fn new(kubeconfig: SecretBytes) -> RecordingBackend {
        RecordingBackend {
            calls: Mutex::new(Vec::new()),
            kubeconfig,
            failure: None,
            log_lines: Vec::new(),
        }
    }

    /// Fails every call with `error` (after recording it and emitting the log lines).
    pub fn failing(error: ClusterError) -> RecordingBackend {
        RecordingBackend {
            failure: Some(error),
            ..RecordingBackend::new(SecretBytes::new(Vec::new()))
        }
    }

    /// Emits these lines to the log callback on every call.
    pub fn with_log_lines<S: Into<String>>(mut self, lines: impl IntoIterator<Item = S>) -> Self {
        self.log_lines = lines.into_iter().map(Into::into).collect();
        self
    }

    /// The calls so far, in order.
    pub fn calls(&self) -> Vec<RecordedCall> {
        self.calls.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    fn record(&self, call: RecordedCall, log: &mut dyn FnMut(&str)) -> Result<(), ClusterError> {
        self.calls
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(call);
        for line in &self.log_lines {
            log(line);
        }
        match &self.failure {
            Some(e) => Err(e.clone()),
            None => Ok(()),
        }
    }
}

impl ClusterBackend for RecordingBackend {
    fn init_cluster(
        &self,
        params: &InitClusterParams,
        log: &mut dyn FnMut(&str),
    ) -> Result<InitClusterOutput, ClusterError> {
        self.record(RecordedCall::Init(params.clone()), log)?;
        Ok(InitClusterOutput {
            kubeconfig: self.kubeconfig.clone(),
        })
    }

    fn join_cluster(
        &self,
        params: &JoinClusterParams,
        log: &mut dyn FnMut(&str),
    ) -> Result<(), ClusterError> {
        self.record(RecordedCall::Join(params.clone()), log)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recording_backend_records_and_returns_what_it_was_given() {
        let b = RecordingBackend::new(SecretBytes::new(b"kubeconfig".to_vec()))
            .with_log_lines(["a", "b"]);
        let mut logged = Vec::new();
        let init = InitClusterParams {
            cluster_name: "c".into(),
            ..Default::default()
        };
        let out = b
            .init_cluster(&init, &mut |l| logged.push(l.to_string()))
            .unwrap();
        assert_eq!(out.kubeconfig.expose(), b"kubeconfig");
        assert_eq!(logged, ["a", "b"]);
        let join = JoinClusterParams {
            api_server_endpoint: "10.0.0.1:6443".into(),
            token: SecretBytes::new(b"abcdef.0123456789abcdef".to_vec()),
            discovery_token_ca_cert_hash: "sha256:00".into(),
            is_control_plane: false,
            control_plane_files: vec![],
            node_ip: "10.0.0.2".into(),
            kubernetes_version: "v1.30.4".into(),
            node_name: String::new(),
            kubelet_cert: None,
        };
        b.join_cluster(&join, &mut |_| {}).unwrap();
        assert_eq!(
            b.calls(),
            [RecordedCall::Init(init.clone()), RecordedCall::Join(join)]
        );

        let failing = RecordingBackend::failing(ClusterError::Stopped);
        assert_eq!(
            failing.init_cluster(&init, &mut |_| {}),
            Err(ClusterError::Stopped)
        );
        assert_eq!(failing.calls(), [RecordedCall::Init(init)]);
    }
}
