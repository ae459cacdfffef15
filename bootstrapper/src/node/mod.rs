//! The bootstrapper's decisions as plain code: no sockets, no threads.
//!
//! - [`plan_for`]: from what the state disk holds, which admin server runs
//!   (Init on a blank disk, Recover on an initialized one) and which ticket
//!   the join client asks for.
//! - [`Node::init`], [`Node::apply_ticket`], [`Node::recover`]: applying the
//!   admin's Init, a join or rejoin ticket, or the admin's Recover. Each
//!   checks what it was given (Init and Recover first prove the admin's
//!   init secret against the hash on the node's measured command line,
//!   before anything is read from the disk), takes the nodelock, then sets up the state
//!   disk, marks the node (PCR 15 ← cluster id) and, for Init and join,
//!   hands over to the cluster backend.
//! - [`NodeError::is_final`]: when a failed flow ends the node's bootstrap.
//! - SSH users (the admin's accounts on the node): an Init's users are checked with the Init,
//!   kept on the state disk's file system once it is set up, and created
//!   in a target root; every later boot of the node (rejoin, Recover)
//!   creates them again from what the disk keeps ([`SshUsersSetup`]).
//!
//! Every irreversible step takes the nodelock's [`LockToken`] as an
//! argument: only [`NodeLock::try_lock`] makes one, once per node, so no step
//! can run for a flow that lost the race. The node is generic over its disk
//! backend, cluster backend and marker, so every path is tested with doubles
//! (`tests.rs`); `main.rs` and `server.rs` are only wiring.

mod error;
pub mod generation;
mod plan;
pub mod state_fs;
#[cfg(test)]
mod tests;
pub mod trusted;
pub mod vpn;

use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard};

use crate::nodelock::{LockToken, NodeLock};
use confboot_attest::{AttestationError, Attested, Detail};
use confboot_cluster::kubelet_cert::KubeletCertRequest;
use confboot_cluster::mark;
use confboot_cluster::role::{ControlPlaneKey, ControlPlanePublicKey};
use confboot_cluster::ticket::{
    self as checks, CheckedJoinTicket, CheckedRejoinTicket, TicketError,
};
use confboot_cluster::{ClusterBackend, InitClusterParams, JoinClusterParams, KubeletCert};
use confboot_disk::{DiskAction, DiskBackend, DiskError, DiskState, FilesystemMaker, StateDisk};
use confboot_kms::init_secret::InitSecretHash;
use confboot_kms::{
    MEASUREMENT_SALT_LEN, MasterSecret, MeasurementSalt, SecretBytes, StorageUri,
    derive_cluster_id, owner_id,
};
use confboot_proto::init::{InitRequest, InitSuccessResponse};
use confboot_proto::recover::RecoverMessage;
use confboot_sys::ssh_users::{
    ApplyReport, STORED_SSH_USERS_FILE, SshUser, apply_ssh_users, parse_ssh_users_config,
    ssh_users_config, validate_ssh_users,
};
use confboot_tdx::{Rtmr3Marker, TdxRefusal};
use confboot_vtpm::{VtpmIssuer, VtpmRefusal};

pub use error::{NodeError, SshUsersError};
pub use plan::{AdminApi, IssuedTicket, JoinServiceCheck, Plan, Ticket, TicketRequest, plan_for};
pub use state_fs::{NixStateMount, StateFsMount};

/// The nodelock's holder names, one per flow.
pub mod holder {
    /// The admin's Init.
    pub const INIT: &str = "init";
    /// The join client (join or rejoin ticket).
    pub const JOIN: &str = "join";
    /// The admin's Recover.
    pub const RECOVER: &str = "recover";
}

use confboot_util::text::printable_str;

/// The most characters of one line of the cluster step's output logged:
/// that output quotes others (the API server, kubeadm's peers), so each
/// line is made printable and bounded.
const MAX_LOGGED_LINE: usize = 1024;

/// A measurement salt from an Init or a Recover, checked
/// ([`MEASUREMENT_SALT_LEN`]).
fn check_measurement_salt(salt: &[u8]) -> Result<MeasurementSalt, NodeError> {
    MeasurementSalt::try_from(salt).map_err(|e| NodeError::InvalidArgument {
        field: "measurement_salt",
        reason: format!(
            "{} bytes, want {} to {}",
            e.len,
            MEASUREMENT_SALT_LEN.start(),
            MEASUREMENT_SALT_LEN.end()
        ),
    })
}

/// Marks a node as bootstrapped: PCR 15 (vTPM) or `RTMR3` (TDX) ← cluster
/// id. A node's own attestation shows the mark from then on; a join
/// service checks it ([`confboot_cluster::mark`]).
pub trait NodeMarker: Send + Sync {
    /// Extends the mark with `cluster_id`.
    fn mark(&self, cluster_id: &[u8]) -> Result<(), AttestationError>;
}

impl NodeMarker for VtpmIssuer {
    fn mark(&self, cluster_id: &[u8]) -> Result<(), AttestationError> {
        self.with_tpm(|tpm| mark::mark_node(tpm, cluster_id))
            .map_err(|e| AttestationError::Issue(Detail::with(&VtpmRefusal::Tpm, e.to_string())))
    }
}

impl NodeMarker for Rtmr3Marker {
    fn mark(&self, cluster_id: &[u8]) -> Result<(), AttestationError> {
        mark::mark_td(self, cluster_id)
            .map_err(|e| AttestationError::Issue(Detail::with(&TdxRefusal::Rtmr3, e.to_string())))
    }
}

/// Marks with each marker in turn, the first failure ending it: a TD marks
/// `RTMR3` (what its TDX evidence shows) and then PCR 15 (what its vTPM
/// evidence, the node agent's, shows).
pub struct Markers(pub Vec<Arc<dyn NodeMarker>>);

impl NodeMarker for Markers {
    fn mark(&self, cluster_id: &[u8]) -> Result<(), AttestationError> {
        self.0.iter().try_for_each(|m| m.mark(cluster_id))
    }
}

impl<T: NodeMarker + ?Sized> NodeMarker for Arc<T> {
    fn mark(&self, cluster_id: &[u8]) -> Result<(), AttestationError> {
        (**self).mark(cluster_id)
    }
}

/// How bootstrapping ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// The admin's Init made this node the first control plane.
    Initialized,
    /// The node joined with a ticket.
    Joined,
    /// The node rejoined after a reboot and opened its disk.
    Rejoined,
    /// The admin's Recover opened the disk.
    Recovered,
}

/// What a node is configured with.
#[derive(Clone, Debug, Default)]
pub struct NodeConfig {
    /// The slow hash of the init secret; no hash means Init and Recover are
    /// refused.
    pub init_secret_hash: Option<InitSecretHash>,
    /// The kubelet certificate a join asks for; `None`: none (the kubelet
    /// makes a self-signed one).
    pub kubelet_request: Option<KubeletCertRequest>,
    /// The node's IP in the cluster network.
    pub node_ip: String,
    /// Whether a joining node becomes a control-plane node.
    pub is_control_plane: bool,
    /// How the join service behind a ticket is checked.
    pub join_service_check: JoinServiceCheck,
}

/// An Init whose fields were checked; nothing has changed yet.
pub struct CheckedInit {
    master: MasterSecret,
    measurement_salt: MeasurementSalt,
    ssh_users: Vec<SshUser>,
}

/// A join service's ticket that passed every check of
/// [`Node::check_ticket`], for the request it answers: the only thing
/// [`Node::apply_ticket`] takes.
#[derive(Debug)]
pub struct CheckedTicket(CheckedKind);

#[derive(Debug)]
enum CheckedKind {
    /// A first join, for the disk of this UUID.
    Join {
        disk_uuid: String,
        ticket: Box<CheckedJoinTicket>,
    },
    /// A rejoin.
    Rejoin(CheckedRejoinTicket),
}

/// Where a node keeps its SSH users and where it creates them.
pub struct SshUsersSetup {
    /// Mounts the state disk's file system for a moment.
    pub mount: Box<dyn StateFsMount>,
    /// The root the users are created in (`/` on a node; `etc/passwd`,
    /// `etc/group` and `home/` below it).
    pub target_root: PathBuf,
}

/// A node: its nodelock, state disk, cluster backend and marker.
pub struct Node<B: DiskBackend, C: ClusterBackend, M: NodeMarker> {
    lock: NodeLock,
    disk: Mutex<StateDisk<B>>,
    mkfs: Option<Box<dyn FilesystemMaker>>,
    cluster: C,
    marker: M,
    config: NodeConfig,
    /// Held while an init secret is checked: the slow hash runs one at a
    /// time, so Init calls cannot be used to burn the node's CPU.
    init_check: Mutex<()>,
    /// Held for a whole Recover: one at a time, so Recover calls cannot be
    /// used to burn the node's CPU (the slow hash, the key slot's KDF).
    recovering: Mutex<()>,
    /// Where SSH users are kept and created; `None`: this node takes none.
    ssh_users: Option<SshUsersSetup>,
    /// The node's VPN key and the node agent's file; `None`: no VPN.
    vpn: Option<vpn::NodeVpnSetup>,
    /// Where the state disk's generation is kept and whom it is confirmed
    /// to; `None`: no state file system, no rollback detection.
    generation: Option<GenerationSetup>,
}

/// What a Recover found on the disk it opened: its UUID, the generation
/// it held and the one written (0 and 0: the node keeps none).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RecoveredDisk {
    /// The state disk's UUID.
    pub disk_uuid: String,
    /// The generation found.
    pub found: u64,
    /// The generation written.
    pub written: u64,
}

/// Where a node keeps its state disk's generation and how it confirms it
/// to its cluster ([`generation`]).
pub struct GenerationSetup {
    /// Mounts the state disk's file system for a moment.
    pub mount: Box<dyn StateFsMount>,
    /// Sends the confirmation to a join service.
    pub confirmer: Box<dyn generation::GenerationConfirmer>,
}

impl<B: DiskBackend, C: ClusterBackend, M: NodeMarker> Node<B, C, M> {
    /// A node that has not bootstrapped yet. `mkfs` makes the state file
    /// system on a newly formatted disk (`None`: no file system).
    pub fn new(
        disk: StateDisk<B>,
        mkfs: Option<Box<dyn FilesystemMaker>>,
        cluster: C,
        marker: M,
        config: NodeConfig,
    ) -> Self {
        Node {
            lock: NodeLock::new(),
            disk: Mutex::new(disk),
            mkfs,
            cluster,
            marker,
            config,
            init_check: Mutex::new(()),
            recovering: Mutex::new(()),
            ssh_users: None,
            vpn: None,
            generation: None,
        }
    }

    /// The node keeps its state disk's generation on its state file system
    /// and confirms it at each rejoin: a disk older than the cluster last
    /// saw it is refused ([`generation`]).
    pub fn with_generation(mut self, setup: GenerationSetup) -> Self {
        self.generation = Some(setup);
        self
    }

    /// The node keeps SSH users on its state file system and creates them
    /// as `setup` says (without it an Init that carries users is refused).
    pub fn with_ssh_users(mut self, setup: SshUsersSetup) -> Self {
        self.ssh_users = Some(setup);
        self
    }

    /// The node joins the cluster's VPN: its key is kept on the state
    /// file system and the node agent gets its file.
    pub fn with_vpn(mut self, setup: vpn::NodeVpnSetup) -> Self {
        self.vpn = Some(setup);
        self
    }

    /// What a join request carries for the VPN: the node's name, this
    /// boot's candidate public key and its public endpoint (`None`: no VPN).
    pub fn vpn_join_fields(&self) -> Option<vpn::VpnJoinFields> {
        self.vpn.as_ref().map(|v| vpn::VpnJoinFields {
            node_name: v.name.clone(),
            public_key: v.candidate.public_key().as_bytes().to_vec(),
            public_endpoint: v.public_endpoint.to_string(),
        })
    }

    /// Takes the VPN key from the state file system (or keeps this boot's
    /// candidate there) and writes the node agent's file.
    fn set_up_vpn(
        &self,
        _token: &LockToken,
        disk_uuid: &str,
        disk_key: &[u8],
        cluster_id: &[u8],
        control_plane_key: &ControlPlanePublicKey,
    ) -> Result<(), NodeError> {
        let Some(setup) = self.vpn.as_ref() else {
            return Ok(());
        };
        let device = self
            .disk()
            .mapped_device()
            .ok_or(NodeError::Vpn(vpn::VpnSetupError::NoDevice))?;
        setup
            .set_up(&device, disk_uuid, disk_key, cluster_id, control_plane_key)
            .map_err(NodeError::Vpn)
    }

    /// The guard the init-secret check takes.
    #[cfg(test)]
    pub fn init_check_guard(&self) -> MutexGuard<'_, ()> {
        self.init_check.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The guard a Recover holds while it is served.
    #[cfg(test)]
    pub fn recover_guard(&self) -> MutexGuard<'_, ()> {
        self.recovering.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The nodelock.
    #[cfg(test)]
    pub fn lock(&self) -> &NodeLock {
        &self.lock
    }

    /// The cluster backend.
    #[cfg(test)]
    pub fn cluster(&self) -> &C {
        &self.cluster
    }

    fn disk(&self) -> MutexGuard<'_, StateDisk<B>> {
        self.disk.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The kubelet CSR a join request carries (empty: none is asked for).
    pub fn kubelet_csr(&self) -> Vec<u8> {
        self.config
            .kubelet_request
            .as_ref()
            .map(|r| r.csr_der.clone())
            .unwrap_or_default()
    }

    /// The plan from the disk as it is now; `new_disk_uuid` names a blank disk.
    pub fn plan(&self, new_disk_uuid: impl FnOnce() -> String) -> Result<Plan, NodeError> {
        let disk = self.disk();
        let state = disk.state().map_err(NodeError::DiskRead)?;
        let bootstrapped = match state {
            DiskState::Luks { .. } => disk.bootstrapped().map_err(NodeError::DiskRead)?,
            _ => false,
        };
        if let (DiskState::Luks { uuid }, false) = (&state, bootstrapped) {
            log::warn!(
                "state disk {uuid}: its first boot did not complete (no record in the header); finishing it"
            );
        }
        plan_for(
            &state,
            bootstrapped,
            self.config.is_control_plane,
            new_disk_uuid,
        )
    }

    /// Takes the nodelock for `holder` (see [`holder`]).
    pub fn take_lock(&self, holder: &'static str) -> Result<LockToken, NodeError> {
        self.lock
            .try_lock(holder)
            .ok_or(NodeError::AlreadyBootstrapping {
                holder: self.lock.holder().unwrap_or("?"),
            })
    }

    // ---- Init ----

    /// Checks an Init before anything changes: the init secret against
    /// the configured hash, then the URIs, the salt and the SSH users.
    pub fn check_init(&self, req: &InitRequest) -> Result<CheckedInit, NodeError> {
        let Some(hash) = &self.config.init_secret_hash else {
            return Err(NodeError::InitNotConfigured);
        };
        // Cheap refusals first: a node that is bootstrapping takes no Init,
        // and one slow hash at a time.
        if let Some(holder) = self.lock.holder() {
            return Err(NodeError::AlreadyBootstrapping { holder });
        }
        let verified = {
            let Ok(_one_at_a_time) = self.init_check.try_lock() else {
                return Err(NodeError::InitCheckBusy);
            };
            hash.verify(&req.init_secret)
        };
        if !verified {
            return Err(NodeError::WrongInitSecret);
        }
        let master = master_secret(&req.kms_uri)?;
        check_storage_uri(&req.storage_uri)?;
        let measurement_salt = check_measurement_salt(&req.measurement_salt)?;
        let ssh_users = self.check_ssh_users(req)?;
        Ok(CheckedInit {
            master,
            measurement_salt,
            ssh_users,
        })
    }

    /// The Init's SSH users, each valid, bounded in number, and a place to
    /// keep them (a state file system).
    fn check_ssh_users(&self, req: &InitRequest) -> Result<Vec<SshUser>, NodeError> {
        let invalid = |reason: String| NodeError::InvalidArgument {
            field: "ssh_user_keys",
            reason,
        };
        let users = validate_ssh_users(
            req.ssh_user_keys
                .iter()
                .map(|k| (k.username.as_str(), k.public_key.as_str())),
        )
        .map_err(|e| invalid(e.to_string()))?;
        if !users.is_empty() && (self.ssh_users.is_none() || self.mkfs.is_none()) {
            return Err(invalid(
                "this node has no state file system to keep SSH users on \
                 (--disk-mode header-only or --state-fs none)"
                    .into(),
            ));
        }
        Ok(users)
    }

    /// Serves the admin's Init: checks it, takes the nodelock, formats (or
    /// opens) the state disk, marks the node and initializes the cluster.
    /// `log` gets the progress lines the admin sees.
    pub fn init(
        &self,
        req: &InitRequest,
        log: &mut dyn FnMut(&str),
    ) -> Result<InitSuccessResponse, NodeError> {
        let checked = self.check_init(req)?;
        let token = self.take_lock(holder::INIT)?;
        log("nodelock taken: this node becomes the first control plane");
        self.apply_init(&token, &checked, req, log)
    }

    /// Applies a checked Init past the nodelock.
    pub fn apply_init(
        &self,
        token: &LockToken,
        checked: &CheckedInit,
        req: &InitRequest,
        log: &mut dyn FnMut(&str),
    ) -> Result<InitSuccessResponse, NodeError> {
        let master = &checked.master;
        let salt = &checked.measurement_salt;
        let uuid = confboot_disk::new_disk_uuid();
        let action = self.set_up_disk(
            token,
            &uuid,
            |uuid| Ok(master.state_disk_key(uuid)),
            Some(salt),
        )?;
        log(&describe(&action));
        let disk_key = master.state_disk_key(action.uuid());
        if !checked.ssh_users.is_empty() {
            self.keep_ssh_users(token, &checked.ssh_users, disk_key.expose(), log)?;
        } else if matches!(action, DiskAction::Opened { .. }) {
            // The disk is from an earlier Init that did not finish: what it
            // kept is not this Init's, and later boots must not create it.
            self.forget_kept_ssh_users(token, disk_key.expose(), log)?;
        }
        let measurement_secret = master.measurement_secret();
        let cluster_id = derive_cluster_id(measurement_secret.expose(), salt);
        self.set_up_vpn(
            token,
            action.uuid(),
            master.state_disk_key(action.uuid()).expose(),
            &cluster_id,
            &ControlPlaneKey::derive(master).public_key(),
        )?;
        self.mark(token, &cluster_id)?;
        log("node marked: PCR 15 extended with the cluster id");
        let params = init_cluster_params(req, &self.config.node_ip);
        let out = self
            .cluster
            .init_cluster(&params, &mut |line| {
                // kubeadm quotes what the API server and others answered.
                log(&printable_str(line, MAX_LOGGED_LINE))
            })
            .map_err(|error| NodeError::Cluster {
                action: "init",
                error,
            })?;
        log("cluster initialized");
        self.record_bootstrapped(token)?;
        Ok(InitSuccessResponse {
            kubeconfig: out.kubeconfig.expose().to_vec(),
            owner_id: owner_id(measurement_secret.expose(), salt).to_vec(),
            cluster_id: cluster_id.to_vec(),
        })
    }

    // ---- Join and rejoin ----

    /// Checks a join service's answer to `request` once, before the node
    /// commits to it, into the [`CheckedTicket`] that
    /// [`Node::apply_ticket`] takes: the kind of ticket matches the
    /// request, its fields are usable ([`confboot_cluster::ticket`]), a
    /// join ticket's kubelet certificate is the one asked for, and the
    /// service is a member of the ticket's cluster. A ticket that fails is
    /// thrown away.
    pub fn check_ticket(
        &self,
        request: &TicketRequest,
        issued: &IssuedTicket,
    ) -> Result<CheckedTicket, NodeError> {
        let service = issued.service.as_ref();
        let checked = match (request, &issued.ticket) {
            (TicketRequest::Join { disk_uuid, .. }, Ticket::Join(t)) => {
                let ticket = t.clone().check().map_err(ticket_error)?;
                self.check_kubelet_cert(ticket.kubelet_cert())
                    .map_err(ticket_error)?;
                self.check_join_service(ticket.cluster_id(), service)?;
                CheckedKind::Join {
                    disk_uuid: disk_uuid.clone(),
                    ticket: Box::new(ticket),
                }
            }
            (TicketRequest::Rejoin { .. }, Ticket::Rejoin(t)) => {
                let ticket = t.clone().check().map_err(ticket_error)?;
                self.check_join_service(ticket.cluster_id(), service)?;
                CheckedKind::Rejoin(ticket)
            }
            _ => {
                return Err(NodeError::BadTicket(
                    "the join service answered another kind of ticket".into(),
                ));
            }
        };
        Ok(CheckedTicket(checked))
    }

    /// The kubelet certificate of a join ticket must be the one asked for
    /// (a node that asked for none takes none).
    fn check_kubelet_cert(&self, cert: &[u8]) -> Result<(), TicketError> {
        match &self.config.kubelet_request {
            None if cert.is_empty() => Ok(()),
            None => Err(TicketError::Unusable(
                "a kubelet certificate the node did not ask for".into(),
            )),
            Some(_) if cert.is_empty() => Err(TicketError::Unusable(
                "no kubelet certificate (the join service signed none)".into(),
            )),
            Some(r) => confboot_cluster::kubelet_cert::check_kubelet_cert(cert, r)
                .map_err(|e| TicketError::Unusable(e.to_string())),
        }
    }

    /// The join service must prove membership of the ticket's cluster
    /// ([`checks::check_member_mark`]): `cluster_id` is the one the
    /// ticket's measurement secret and salt give, for a join and a rejoin
    /// alike (the salt comes with the ticket, which the service's cluster
    /// mark proves; the one the disk's header keeps is the host's to
    /// rewrite).
    fn check_join_service(
        &self,
        cluster_id: &[u8],
        service: Option<&Attested>,
    ) -> Result<(), NodeError> {
        if self.config.join_service_check == JoinServiceCheck::InsecureNone {
            log::warn!(
                "taking a ticket from a join service that was not checked (--insecure-any-join-service): \
                 whoever answered may know this node's disk key"
            );
            return Ok(());
        }
        if service.is_none() {
            return Err(NodeError::JoinServiceNotMember("it did not attest".into()));
        }
        checks::check_member_mark(cluster_id, service).map_err(ticket_error)
    }

    /// Applies a checked ticket past the nodelock (taken by the join client).
    pub fn apply_ticket(
        &self,
        token: &LockToken,
        ticket: &CheckedTicket,
    ) -> Result<Outcome, NodeError> {
        match &ticket.0 {
            CheckedKind::Join { disk_uuid, ticket } => {
                self.apply_join_ticket(token, disk_uuid, ticket)?;
                Ok(Outcome::Joined)
            }
            CheckedKind::Rejoin(ticket) => {
                self.apply_rejoin_ticket(token, ticket)?;
                Ok(Outcome::Rejoined)
            }
        }
    }

    fn apply_join_ticket(
        &self,
        token: &LockToken,
        disk_uuid: &str,
        t: &CheckedJoinTicket,
    ) -> Result<(), NodeError> {
        let key = t.state_disk_key().clone();
        let action = self.set_up_disk(
            token,
            disk_uuid,
            |uuid| {
                if uuid == disk_uuid {
                    Ok(key.clone())
                } else {
                    Err(DiskError::KeyUnavailable(format!(
                        "the ticket is for disk {disk_uuid}, the disk is {uuid}"
                    )))
                }
            },
            Some(t.measurement_salt()),
        )?;
        log::info!("{}", describe(&action));
        let cluster_id = t.cluster_id();
        self.set_up_vpn(
            token,
            action.uuid(),
            t.state_disk_key().expose(),
            cluster_id,
            t.control_plane_key(),
        )?;
        self.mark(token, cluster_id)?;
        log::info!("node marked: PCR 15 extended with the cluster id");
        let params = JoinClusterParams {
            api_server_endpoint: t.api_server_endpoint().to_string(),
            token: SecretBytes::new(t.token().as_bytes().to_vec()),
            discovery_token_ca_cert_hash: t.discovery_token_ca_cert_hash().to_string(),
            is_control_plane: self.config.is_control_plane,
            control_plane_files: t
                .control_plane_files()
                .iter()
                .map(|f| (f.name.clone(), f.data.clone()))
                .collect(),
            node_ip: self.config.node_ip.clone(),
            kubernetes_version: t.kubernetes_version().to_string(),
            node_name: self
                .config
                .kubelet_request
                .as_ref()
                .map(|r| r.node_name.clone())
                .unwrap_or_default(),
            kubelet_cert: self.config.kubelet_request.as_ref().map(|r| KubeletCert {
                cert_der: t.kubelet_cert().to_vec(),
                key_pem: SecretBytes::new(r.key_pem.as_bytes().to_vec()),
            }),
        };
        self.cluster
            .join_cluster(&params, &mut |line| {
                // kubeadm quotes what the API server and others answered.
                log::info!("kubeadm: {}", printable_str(line, MAX_LOGGED_LINE))
            })
            .map_err(|error| NodeError::Cluster {
                action: "join",
                error,
            })?;
        self.record_bootstrapped(token)
    }

    fn apply_rejoin_ticket(
        &self,
        token: &LockToken,
        t: &CheckedRejoinTicket,
    ) -> Result<(), NodeError> {
        // The ticket's salt (checked with the ticket, and in its cluster
        // id), never the header's: the host can rewrite a header, and a
        // salt of its choosing would mark the node for a cluster the admin
        // never made.
        let key = t.state_disk_key().clone();
        let action = self.set_up_disk(token, "", |_| Ok(key.clone()), None)?;
        log::info!("{}", describe(&action));
        let cluster_id = t.cluster_id();
        // Before anything the disk keeps is used: a disk older than the
        // cluster last saw it creates no users and gets no mark.
        self.advance_generation(
            token,
            action.uuid(),
            t.state_disk_key().expose(),
            t.generation(),
            cluster_id,
            t.control_plane_key(),
        )?;
        self.apply_kept_ssh_users(token, t.state_disk_key().expose())?;
        self.set_up_vpn(
            token,
            action.uuid(),
            t.state_disk_key().expose(),
            cluster_id,
            t.control_plane_key(),
        )?;
        self.mark(token, cluster_id)?;
        log::info!("node marked: PCR 15 extended with the cluster id");
        Ok(())
    }

    // ---- Recover ----

    /// Serves the admin's Recover, one at a time (another one meanwhile is
    /// [`NodeError::RecoverBusy`]). Before anything is read from the disk
    /// the Recover proves the admin's init secret against the hash on the
    /// node's (measured) command line, as an Init does: a host that made a
    /// disk of its own and knows its master secret cannot recruit the node
    /// into its cluster. Then the disk key derived from the master secret is
    /// checked against the header (a wrong secret changes nothing), and only
    /// then is the disk trusted: the nodelock taken, the disk opened and the
    /// node marked again, with the cluster id of the admin's measurement
    /// salt (never the header's: the host can rewrite a header).
    ///
    /// The disk's generation is checked against the lowest the admin
    /// accepts for its UUID (`min_generations`, from the CLI's record of
    /// the last generation it saw): an older disk is refused before it is
    /// used ([`NodeError::RolledBack`]); otherwise the next generation is
    /// written, so that any copy taken before this Recover is older. A node
    /// that keeps no generation is refused when the admin names one for it.
    pub fn recover(&self, req: &RecoverMessage) -> Result<RecoveredDisk, NodeError> {
        let Some(hash) = &self.config.init_secret_hash else {
            return Err(NodeError::RecoverNotConfigured);
        };
        // Cheap refusals first: a node that is bootstrapping takes no
        // Recover, and one Recover (one slow hash, one key check) at a time.
        if let Some(holder) = self.lock.holder() {
            return Err(NodeError::AlreadyBootstrapping { holder });
        }
        let Ok(_one_at_a_time) = self.recovering.try_lock() else {
            return Err(NodeError::RecoverBusy);
        };
        if !hash.verify(&req.init_secret) {
            return Err(NodeError::WrongInitSecret);
        }
        let master = master_secret(&req.kms_uri)?;
        check_storage_uri(&req.storage_uri)?;
        let measurement_salt = check_measurement_salt(&req.measurement_salt)?;
        if req.min_generations.len() > generation::MAX_MIN_GENERATIONS {
            return Err(NodeError::InvalidArgument {
                field: "min_generations",
                reason: format!("more than {} disks named", generation::MAX_MIN_GENERATIONS),
            });
        }
        {
            let disk = self.disk();
            if !matches!(
                disk.state().map_err(NodeError::DiskRead)?,
                DiskState::Luks { .. }
            ) {
                return Err(NodeError::NothingToRecover);
            }
            disk.check_key(|uuid| Ok(master.state_disk_key(uuid)))
                .map_err(NodeError::DiskRead)?;
        }
        let token = self.take_lock(holder::RECOVER)?;
        let action = self.set_up_disk(&token, "", |uuid| Ok(master.state_disk_key(uuid)), None)?;
        log::info!("recovered: {}", describe(&action));
        // Before anything the disk keeps is used.
        let min = generation::min_generation(&req.min_generations, action.uuid());
        let disk_key = master.state_disk_key(action.uuid());
        let (found, written) = self.recover_generation(&token, min, disk_key.expose())?;
        self.apply_kept_ssh_users(&token, disk_key.expose())?;
        let cluster_id = derive_cluster_id(master.measurement_secret().expose(), &measurement_salt);
        self.set_up_vpn(
            &token,
            action.uuid(),
            disk_key.expose(),
            &cluster_id,
            &ControlPlaneKey::derive(&master).public_key(),
        )?;
        self.mark(&token, &cluster_id)?;
        log::info!("node marked: PCR 15 extended with the cluster id");
        Ok(RecoveredDisk {
            disk_uuid: action.uuid().to_string(),
            found,
            written,
        })
    }

    /// Reads the generation the mapped state disk keeps and, unless it is
    /// older than `floor`, writes the next one, every trusted file sealed
    /// again at it first ([`trusted::StateFiles::step`]): what was found
    /// and the step taken ([`generation::step`]).
    fn step_generation(
        &self,
        setup: &GenerationSetup,
        floor: u64,
        disk_key: &[u8],
    ) -> Result<(u64, generation::Step), NodeError> {
        let failed = NodeError::Generation;
        let device = self
            .disk()
            .mapped_device()
            .ok_or(failed(generation::GenerationError::NoDevice))?;
        state_fs::with_mounted(setup.mount.as_ref(), &device, |dir| {
            let mut files = trusted::StateFiles::open(dir, disk_key)?;
            let found = files.generation();
            let step = generation::step(found, floor);
            if let generation::Step::Write(next) = step {
                files.step(next, found == floor)?;
            }
            Ok((found, step))
        })
        .map_err(|e| failed(generation::GenerationError::StateFs(e)))?
        .map_err(|e| failed(generation::GenerationError::StateFile(e)))
    }

    /// Checks the generation the state file system keeps against `min`
    /// (the admin's, 0: none) and writes the next one; what it found and
    /// wrote. A node that keeps no generation finds 0. Past the nodelock:
    /// an error is final.
    fn recover_generation(
        &self,
        _token: &LockToken,
        min: u64,
        disk_key: &[u8],
    ) -> Result<(u64, u64), NodeError> {
        use generation::Step;
        let Some(setup) = self.generation.as_ref() else {
            return match generation::step(0, min) {
                Step::Refuse(rolled_back) => Err(NodeError::RolledBack(rolled_back)),
                Step::Write(_) => Ok((0, 0)),
            };
        };
        let (found, step) = self.step_generation(setup, min, disk_key)?;
        match step {
            Step::Refuse(rolled_back) => Err(NodeError::RolledBack(rolled_back)),
            Step::Write(next) => {
                log::info!(
                    "state disk: generation {found} found (the admin accepts {min} or newer), \
                     {next} written"
                );
                Ok((found, next))
            }
        }
    }

    // ---- The irreversible steps: each needs the nodelock's token ----

    /// Formats a blank disk as `blank_uuid` or opens a LUKS one with the key
    /// `key_for` gives for its UUID, keeps the measurement salt in the
    /// header (when given) and makes sure of the file system.
    fn set_up_disk(
        &self,
        _token: &LockToken,
        blank_uuid: &str,
        key_for: impl FnOnce(&str) -> Result<SecretBytes, DiskError>,
        measurement_salt: Option<&MeasurementSalt>,
    ) -> Result<DiskAction, NodeError> {
        let mut disk = self.disk();
        let action = disk
            .format_or_open(blank_uuid, key_for)
            .map_err(NodeError::Disk)?;
        if let Some(salt) = measurement_salt {
            disk.store_measurement_salt(salt).map_err(NodeError::Disk)?;
        }
        if let Some(mkfs) = &self.mkfs {
            disk.ensure_filesystem(mkfs.as_ref(), &action)
                .map_err(NodeError::Disk)?;
        }
        Ok(action)
    }

    /// Checks the generation the state file system keeps against `last`
    /// (the cluster's, from the rejoin ticket): an older disk is refused
    /// and the cluster told what was found; otherwise the next generation
    /// is written and then confirmed. Past the nodelock: an error is final.
    fn advance_generation(
        &self,
        _token: &LockToken,
        disk_uuid: &str,
        disk_key: &[u8],
        last: u64,
        cluster_id: &[u8],
        control_plane_key: &ControlPlanePublicKey,
    ) -> Result<(), NodeError> {
        use generation::Step;
        let Some(setup) = self.generation.as_ref() else {
            return Ok(());
        };
        let (found, step) = self.step_generation(setup, last, disk_key)?;
        match step {
            Step::Refuse(rolled_back) => {
                let report = generation::confirmation(disk_key, disk_uuid, found, 0);
                if let Err(e) = setup
                    .confirmer
                    .confirm(&report, cluster_id, control_plane_key)
                {
                    log::warn!("state disk generation: the report was not taken: {e}");
                }
                Err(NodeError::RolledBack(rolled_back))
            }
            Step::Write(next) => {
                let confirmation = generation::confirmation(disk_key, disk_uuid, found, next);
                setup
                    .confirmer
                    .confirm(&confirmation, cluster_id, control_plane_key)
                    .map_err(|error| {
                        NodeError::Generation(generation::GenerationError::NotConfirmed {
                            next,
                            error,
                        })
                    })?;
                log::info!("state disk: generation {found} found, {next} written and confirmed");
                Ok(())
            }
        }
    }

    /// Records in the header that this disk's first boot completed, so the
    /// next boot rejoins instead of finishing it.
    fn record_bootstrapped(&self, _token: &LockToken) -> Result<(), NodeError> {
        self.disk().record_bootstrapped().map_err(NodeError::Disk)?;
        log::info!("state disk: first boot recorded complete in the header");
        Ok(())
    }

    /// Keeps an Init's SSH users on the state file system, then creates
    /// them in the target root. Past the nodelock: an error is final (the
    /// admin asked for users the node could not create).
    fn keep_ssh_users(
        &self,
        _token: &LockToken,
        users: &[SshUser],
        disk_key: &[u8],
        log: &mut dyn FnMut(&str),
    ) -> Result<(), NodeError> {
        let failed = NodeError::SshUsers;
        let setup = self
            .ssh_users
            .as_ref()
            .ok_or(failed(SshUsersError::NotTaken))?;
        let device = self
            .disk()
            .mapped_device()
            .ok_or(failed(SshUsersError::NoDevice))?;
        state_fs::with_mounted(setup.mount.as_ref(), &device, |dir| {
            trusted::StateFiles::open(dir, disk_key)?
                .write(STORED_SSH_USERS_FILE, ssh_users_config(users).as_bytes())
        })
        .map_err(|e| failed(SshUsersError::StateFs(e)))?
        .map_err(|e| failed(SshUsersError::StateFile(e)))?;
        log(&format!(
            "SSH users: {} kept on the state disk",
            users.len()
        ));
        let report = apply_ssh_users(&setup.target_root, users)
            .map_err(|e| failed(SshUsersError::Create(e.to_string())))?;
        for (level, line) in describe_ssh_users(&report) {
            log::log!(level, "{line}");
            log(&line);
        }
        Ok(())
    }

    /// Clears the SSH users an earlier, unfinished Init kept, for an Init
    /// that carries none (on a node that keeps no users, or maps no device,
    /// there is nothing to clear). Past the nodelock: an error is final.
    fn forget_kept_ssh_users(
        &self,
        _token: &LockToken,
        disk_key: &[u8],
        log: &mut dyn FnMut(&str),
    ) -> Result<(), NodeError> {
        let (Some(setup), Some(device)) = (self.ssh_users.as_ref(), self.disk().mapped_device())
        else {
            return Ok(());
        };
        let failed = NodeError::SshUsers;
        let cleared = state_fs::with_mounted(setup.mount.as_ref(), &device, |dir| {
            let mut files = trusted::StateFiles::open(dir, disk_key)?;
            // A list that does not read back is cleared too.
            let kept = match files
                .read(STORED_SSH_USERS_FILE)
                .map(|body| body.map(|b| parse_ssh_users_config(&b).map(|users| users.len())))
            {
                Ok(None) | Ok(Some(Ok(0))) => return Ok(None),
                Ok(Some(Ok(n))) => n.to_string(),
                _ => "unreadable list".to_string(),
            };
            files
                .write(STORED_SSH_USERS_FILE, ssh_users_config(&[]).as_bytes())
                .map(|()| Some(kept))
        })
        .map_err(|e| failed(SshUsersError::StateFs(e)))?
        .map_err(|e| failed(SshUsersError::StateFile(e)))?;
        if let Some(kept) = cleared {
            log(&format!(
                "SSH users: this Init has none; what an earlier, unfinished Init kept ({kept}) is cleared"
            ));
        }
        Ok(())
    }

    /// Creates the SSH users the state file system keeps (a later boot of
    /// the first control plane). A kept file that does not read back with
    /// this disk's MAC at its generation (an older copy put back, changed
    /// bytes) is refused: final. A state file system that cannot be mounted
    /// or users that cannot be created are logged and nothing is created
    /// (the node boots without SSH access); conflicts are logged and left
    /// as they are.
    fn apply_kept_ssh_users(
        &self,
        _token: &LockToken,
        disk_key: &[u8],
    ) -> Result<Option<ApplyReport>, NodeError> {
        let (Some(setup), Some(device)) = (self.ssh_users.as_ref(), self.disk().mapped_device())
        else {
            return Ok(None);
        };
        let kept = state_fs::with_mounted(setup.mount.as_ref(), &device, |dir| {
            trusted::StateFiles::open(dir, disk_key)?.read(STORED_SSH_USERS_FILE)
        });
        let users = match kept {
            Ok(Ok(Some(body))) => parse_ssh_users_config(&body).map_err(|e| e.to_string()),
            Ok(Ok(None)) => {
                log::info!("SSH users: none kept on the state disk");
                return Ok(None);
            }
            Ok(Err(e)) => return Err(NodeError::SshUsers(SshUsersError::StateFile(e))),
            Err(e) => Err(format!("the state file system: {e}")),
        }
        .and_then(|users| apply_ssh_users(&setup.target_root, &users).map_err(|e| e.to_string()));
        match users {
            Ok(report) => {
                for (level, line) in describe_ssh_users(&report) {
                    log::log!(level, "{line}");
                }
                Ok(Some(report))
            }
            Err(e) => {
                log::error!("SSH users: none created: {e}");
                Ok(None)
            }
        }
    }

    /// Marks the node: PCR 15 ← cluster id.
    fn mark(&self, _token: &LockToken, cluster_id: &[u8]) -> Result<(), NodeError> {
        self.marker.mark(cluster_id).map_err(NodeError::Mark)
    }
}

fn ticket_error(e: TicketError) -> NodeError {
    match e {
        TicketError::Unusable(m) => NodeError::BadTicket(m),
        TicketError::NotMember(m) => NodeError::JoinServiceNotMember(m.to_string()),
        // The join client opens a ticket before the node sees it.
        e @ (TicketError::NotSealed(_) | TicketError::Sealed(_)) => {
            NodeError::BadTicket(e.to_string())
        }
    }
}

fn master_secret(kms_uri: &str) -> Result<MasterSecret, NodeError> {
    MasterSecret::from_kms_uri(kms_uri).map_err(|e| NodeError::InvalidArgument {
        field: "kms_uri",
        reason: e.to_string(),
    })
}

fn check_storage_uri(storage_uri: &str) -> Result<(), NodeError> {
    StorageUri::parse(storage_uri)
        .map(|_| ())
        .map_err(|e| NodeError::InvalidArgument {
            field: "storage_uri",
            reason: e.to_string(),
        })
}

fn init_cluster_params(req: &InitRequest, node_ip: &str) -> InitClusterParams {
    InitClusterParams {
        cluster_name: if req.cluster_name.is_empty() {
            "confboot".into()
        } else {
            req.cluster_name.clone()
        },
        kubernetes_version: req.kubernetes_version.clone(),
        node_ip: node_ip.to_string(),
        api_server_cert_sans: req.apiserver_cert_sans.clone(),
        service_cidr: if req.service_cidr.is_empty() {
            "10.96.0.0/12".into()
        } else {
            req.service_cidr.clone()
        },
        pod_cidr: "10.244.0.0/16".into(),
        conformance_mode: req.conformance_mode,
    }
}

/// What applying SSH users did, one line each: created, unchanged, and
/// each conflict (a warning: nothing was overwritten).
fn describe_ssh_users(report: &ApplyReport) -> Vec<(log::Level, String)> {
    let names = |v: &[confboot_sys::ssh_users::UserName]| {
        v.iter().map(|n| n.as_str()).collect::<Vec<_>>().join(", ")
    };
    let mut lines = vec![(
        log::Level::Info,
        format!(
            "SSH users: created [{}], unchanged [{}]",
            names(&report.created),
            names(&report.unchanged)
        ),
    )];
    for conflict in &report.conflicts {
        lines.push((log::Level::Warn, format!("SSH users: warning: {conflict}")));
    }
    lines
}

fn describe(action: &DiskAction) -> String {
    match action {
        DiskAction::Formatted { uuid } => format!("state disk {uuid} formatted (LUKS2) and opened"),
        DiskAction::Opened { uuid } => format!("state disk {uuid} opened"),
    }
}
