//! What a node does once it knows how to proceed: the steps after the
//! nodelock, shared by the init, join and recovery flows. Plain code over
//! the node's TPM, state disk and cluster backend.

use std::sync::{Arc, Mutex};

use confboot::attestation::vtpm::VtpmIssuer;
use confboot::cluster::{ClusterBackend, InitClusterParams, JoinClusterParams};
use confboot::disk::{
    CryptsetupBackend, DiskAction, DiskError, DiskState, Mkfs, StateDisk, new_disk_uuid,
};
use confboot::kms::init_secret::InitSecretHash;
use confboot::kms::{MasterSecret, SecretBytes, StorageUri, derive_cluster_id, hkdf_sha256};
use confboot::nodelock::NodeLock;
use confboot::rpc::{Code, Status};
use confboot_proto::init::{InitRequest, InitSuccessResponse};
use confboot_proto::join::{IssueJoinTicketResponse, IssueRejoinTicketResponse};
use confboot_proto::recover::RecoverMessage;

/// How bootstrapping ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// The admin's Init made this node the first control plane.
    Initialized,
    /// The node joined with a ticket.
    Joined,
    /// The node rejoined after a reboot and opened its disk.
    Rejoined,
    /// The admin's Recover opened the disk.
    Recovered,
    /// The node cannot go on (after the point of no return).
    Failed(String),
}

/// The node's parts.
pub struct Node {
    /// The point of no return.
    pub lock: NodeLock,
    /// The node's TPM attestation (also used to mark the node).
    pub issuer: Arc<VtpmIssuer>,
    /// The state disk.
    pub disk: Mutex<StateDisk<CryptsetupBackend>>,
    /// Makes the file system on the opened disk when it is still blank
    /// (`None`: no file system is made).
    pub mkfs: Option<Mkfs>,
    /// Kubernetes.
    pub cluster: Box<dyn ClusterBackend>,
    /// The slow hash of the init secret; no hash means Init is refused.
    pub init_secret_hash: Option<InitSecretHash>,
    /// The node's IP in the cluster network.
    pub node_ip: String,
    /// Whether a joining node becomes a control-plane node.
    pub is_control_plane: bool,
}

fn disk_status(e: DiskError) -> Status {
    match e {
        DiskError::WrongKey => Status::permission_denied("the key does not open the state disk"),
        other => Status::internal(format!("state disk: {other}")),
    }
}

fn owner_id(measurement_secret: &[u8], measurement_salt: &[u8]) -> Vec<u8> {
    hkdf_sha256(measurement_secret, measurement_salt, b"key-ownerID", 32)
        .expose()
        .to_vec()
}

impl Node {
    /// The state disk as it is now.
    pub fn disk_state(&self) -> Result<DiskState, DiskError> {
        self.disk.lock().unwrap_or_else(|p| p.into_inner()).state()
    }

    /// Makes the state file system on the opened (mapped) disk unless its
    /// header records one ([`StateDisk::ensure_filesystem`]).
    fn ensure_filesystem(&self, disk: &mut StateDisk<CryptsetupBackend>) -> Result<(), DiskError> {
        match &self.mkfs {
            Some(mkfs) => disk.ensure_filesystem(mkfs).map(|_| ()),
            None => Ok(()),
        }
    }

    /// Marks the node as bootstrapped: PCR 15 ← cluster id.
    fn mark(&self, cluster_id: &[u8]) -> Result<(), Status> {
        self.issuer
            .mark_node(cluster_id)
            .map_err(|e| Status::internal(format!("cannot mark the node: {e}")))
    }

    /// Serves the admin's Init: checks the init secret, takes the nodelock,
    /// sets up the state disk, marks the node and initializes the cluster.
    pub fn init(
        &self,
        req: &InitRequest,
        log: &mut dyn FnMut(&str),
    ) -> Result<InitSuccessResponse, Status> {
        let Some(hash) = &self.init_secret_hash else {
            return Err(Status::new(
                Code::FailedPrecondition,
                "this node takes no Init (no init-secret hash configured)",
            ));
        };
        if !hash.verify(&req.init_secret) {
            return Err(Status::permission_denied("wrong init secret"));
        }
        let master = MasterSecret::from_kms_uri(&req.kms_uri)
            .map_err(|e| Status::invalid_argument(format!("kms_uri: {e}")))?;
        StorageUri::parse(&req.storage_uri)
            .map_err(|e| Status::invalid_argument(format!("storage_uri: {e}")))?;
        if req.measurement_salt.len() < 32 {
            return Err(Status::invalid_argument(
                "measurement_salt must be at least 32 bytes",
            ));
        }
        let Some(_token) = self.lock.try_lock("init") else {
            return Err(Status::new(
                Code::FailedPrecondition,
                format!(
                    "the node is already bootstrapping ({})",
                    self.lock.holder().unwrap_or("?")
                ),
            ));
        };
        log("nodelock taken: this node becomes the first control plane");
        let action = {
            let mut disk = self.disk.lock().unwrap_or_else(|p| p.into_inner());
            let action = disk
                .format_or_open(&new_disk_uuid(), |uuid| Ok(master.state_disk_key(uuid)))
                .map_err(disk_status)?;
            disk.store_measurement_salt(&req.measurement_salt)
                .map_err(disk_status)?;
            self.ensure_filesystem(&mut disk).map_err(disk_status)?;
            action
        };
        log(&describe(&action));
        let measurement_secret = master.measurement_secret();
        let cluster_id = derive_cluster_id(measurement_secret.expose(), &req.measurement_salt);
        self.mark(&cluster_id)?;
        log("node marked: PCR 15 extended with the cluster id");
        let params = InitClusterParams {
            cluster_name: if req.cluster_name.is_empty() {
                "confboot".into()
            } else {
                req.cluster_name.clone()
            },
            kubernetes_version: req.kubernetes_version.clone(),
            node_ip: self.node_ip.clone(),
            api_server_cert_sans: req.apiserver_cert_sans.clone(),
            service_cidr: if req.service_cidr.is_empty() {
                "10.96.0.0/12".into()
            } else {
                req.service_cidr.clone()
            },
            pod_cidr: "10.244.0.0/16".into(),
            conformance_mode: req.conformance_mode,
        };
        let out = self
            .cluster
            .init_cluster(&params, log)
            .map_err(|e| Status::internal(format!("cluster init failed: {e}")))?;
        log("cluster initialized");
        Ok(InitSuccessResponse {
            kubeconfig: out.kubeconfig.expose().to_vec(),
            owner_id: owner_id(measurement_secret.expose(), &req.measurement_salt),
            cluster_id: cluster_id.to_vec(),
        })
    }

    /// Applies a join ticket after the JoinClient took the nodelock.
    pub fn apply_join_ticket(
        &self,
        disk_uuid: &str,
        t: &IssueJoinTicketResponse,
    ) -> Result<(), String> {
        if t.state_disk_key.len() != 32 {
            return Err("the ticket's state disk key is not 32 bytes".into());
        }
        let key = SecretBytes::new(t.state_disk_key.clone());
        let action = {
            let mut disk = self.disk.lock().unwrap_or_else(|p| p.into_inner());
            let action = disk
                .format_or_open(disk_uuid, |uuid| {
                    if uuid == disk_uuid {
                        Ok(key.clone())
                    } else {
                        Err(DiskError::KeyUnavailable(format!(
                            "the ticket is for disk {disk_uuid}, the disk is {uuid}"
                        )))
                    }
                })
                .map_err(|e| format!("state disk: {e}"))?;
            disk.store_measurement_salt(&t.measurement_salt)
                .map_err(|e| format!("state disk: {e}"))?;
            self.ensure_filesystem(&mut disk)
                .map_err(|e| format!("state disk: {e}"))?;
            action
        };
        log::info!("{}", describe(&action));
        let cluster_id = derive_cluster_id(&t.measurement_secret, &t.measurement_salt);
        self.mark(&cluster_id).map_err(|s| s.message)?;
        log::info!("node marked: PCR 15 extended with the cluster id");
        let params = JoinClusterParams {
            api_server_endpoint: t.api_server_endpoint.clone(),
            token: SecretBytes::new(t.token.clone().into_bytes()),
            discovery_token_ca_cert_hash: t.discovery_token_ca_cert_hash.clone(),
            is_control_plane: self.is_control_plane,
            control_plane_files: t
                .control_plane_files
                .iter()
                .map(|f| (f.name.clone(), SecretBytes::new(f.data.clone())))
                .collect(),
            node_ip: self.node_ip.clone(),
            kubernetes_version: t.kubernetes_version.clone(),
        };
        self.cluster
            .join_cluster(&params, &mut |line| log::info!("kubeadm: {line}"))
            .map_err(|e| format!("cluster join failed: {e}"))
    }

    /// Applies a rejoin ticket: opens the disk and marks the node again with
    /// the measurement salt its header keeps (kept there at init or join).
    pub fn apply_rejoin_ticket(&self, t: &IssueRejoinTicketResponse) -> Result<(), String> {
        let key = SecretBytes::new(t.state_disk_key.clone());
        let (action, salt) = {
            let mut disk = self.disk.lock().unwrap_or_else(|p| p.into_inner());
            // Read first: without a salt the node cannot be marked, and then
            // the disk stays closed.
            let salt = disk
                .measurement_salt()
                .map_err(|e| format!("cannot mark the node: {e}"))?;
            let action = disk
                .format_or_open("", |_| Ok(key.clone()))
                .map_err(|e| format!("state disk: {e}"))?;
            self.ensure_filesystem(&mut disk)
                .map_err(|e| format!("state disk: {e}"))?;
            (action, salt)
        };
        log::info!("{}", describe(&action));
        self.mark(&derive_cluster_id(&t.measurement_secret, &salt))
            .map_err(|s| s.message)?;
        log::info!("node marked: PCR 15 extended with the cluster id");
        Ok(())
    }

    /// Serves the admin's Recover: derives the disk key from the master
    /// secret and opens the disk. A wrong secret changes nothing.
    pub fn recover(&self, req: &RecoverMessage) -> Result<(), Status> {
        let master = MasterSecret::from_kms_uri(&req.kms_uri)
            .map_err(|e| Status::invalid_argument(format!("kms_uri: {e}")))?;
        StorageUri::parse(&req.storage_uri)
            .map_err(|e| Status::invalid_argument(format!("storage_uri: {e}")))?;
        if self.lock.is_locked() {
            return Err(Status::new(
                Code::FailedPrecondition,
                "the node is already bootstrapping",
            ));
        }
        let mut disk = self.disk.lock().unwrap_or_else(|p| p.into_inner());
        let DiskState::Luks { uuid } = disk.state().map_err(disk_status)? else {
            return Err(Status::new(
                Code::FailedPrecondition,
                "the state disk is blank: nothing to recover",
            ));
        };
        // Read first: without a salt the node cannot be marked, and then the
        // disk stays closed.
        let salt = disk.measurement_salt().map_err(disk_status)?;
        let action = disk
            .format_or_open("", |_| Ok(master.state_disk_key(&uuid)))
            .map_err(disk_status)?;
        self.ensure_filesystem(&mut disk).map_err(disk_status)?;
        drop(disk);
        if self.lock.try_lock("recover").is_none() {
            return Err(Status::new(
                Code::FailedPrecondition,
                "the node rejoined meanwhile",
            ));
        }
        log::info!("recovered: {}", describe(&action));
        self.mark(&derive_cluster_id(
            master.measurement_secret().expose(),
            &salt,
        ))?;
        log::info!("node marked: PCR 15 extended with the cluster id");
        Ok(())
    }
}

fn describe(action: &DiskAction) -> String {
    match action {
        DiskAction::Formatted { uuid } => format!("state disk {uuid} formatted (LUKS2) and opened"),
        DiskAction::Opened { uuid } => format!("state disk {uuid} opened"),
    }
}
