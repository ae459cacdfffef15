//! The join ticket, one contract for both ends: what a join service makes
//! ([`JoinTicket`], [`RejoinTicket`]: the secrets in zeroizing types), how
//! it goes on the wire (its secrets only sealed, [`JoinTicket::seal`],
//! [`RejoinTicket::seal`]), how the node opens it ([`JoinTicket::open`],
//! [`RejoinTicket::open`]) and what the node checks before it commits to
//! it ([`JoinTicket::check`], [`RejoinTicket::check`], which give the
//! checked values [`CheckedJoinTicket`] and [`CheckedRejoinTicket`], and
//! [`check_member_mark`]: the service that sent it proved membership of
//! the ticket's cluster).
//!
//! The join service seals the secrets to the X25519 key the node's
//! evidence bound; the node opens them with its private key, so an answer
//! read anywhere but inside the attested VM carries no usable secret. The
//! plaintext secret fields of the wire messages are never filled by a
//! join service: a node refuses a ticket that fills them.
//!
//! The bootstrapper's node applies these checks to every ticket it gets
//! (`Node::check_ticket`); they are plain functions of the ticket and the
//! service's attestation, so they are tested and fuzzed without a node.

use std::fmt;

use prost::Message;

use confboot_kms::seal::{SEALING_KEY_LEN, SealError, SealedKind, SealingKeyPair, seal};
use confboot_kms::{DERIVED_KEY_LEN, MeasurementSalt, SecretBytes, derive_cluster_id};
use confboot_proto::join::{
    ControlPlaneCertOrKey, IssueJoinTicketResponse, IssueRejoinTicketResponse, TicketSecrets,
};
use zeroize::Zeroizing;

use confboot_attest::Attested;

use crate::role::ControlPlanePublicKey;

/// Length of a state-disk key in a ticket.
pub const STATE_DISK_KEY_LEN: usize = 32;

/// Why a ticket is thrown away.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum TicketError {
    /// The ticket itself is unusable (a field missing or of the wrong size).
    #[error("unusable ticket: {0}")]
    Unusable(String),
    /// The service that sent it did not prove membership of its cluster.
    #[error("the join service is no member: {0}")]
    NotMember(NotMember),
    /// Its secrets are not sealed to this node: none sealed, or some sent
    /// in the clear.
    #[error("the ticket's secrets are not sealed to this node: {0}")]
    NotSealed(&'static str),
    /// Its sealed secrets do not open with this node's key, as this kind.
    #[error("the ticket's sealed secrets: {0}")]
    Sealed(#[from] SealError),
}

/// Why a join service is not believed to be a member of the ticket's
/// cluster.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum NotMember {
    /// It did not attest.
    #[error("it did not attest")]
    NotAttested,
    /// Its mark register cannot be read (none in its variant, or not
    /// among its attested measurements).
    #[error("{0}")]
    Mark(#[from] crate::mark::MarkError),
    /// Its mark register (`PCR 15`, `RTMR3`) holds no mark, or another
    /// cluster's.
    #[error("its {register} is not the mark of the ticket's cluster")]
    NotTheMark {
        /// The register.
        register: &'static str,
    },
}

/// A file a new control-plane node needs (kubeadm's PKI), as a join ticket
/// carries it: its name below the PKI directory and its secret contents.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ControlPlaneFile {
    /// The path below the Kubernetes PKI directory (`ca.key`, `etcd/ca.crt`).
    pub name: String,
    /// The contents.
    pub data: SecretBytes,
}

/// A join ticket: what a join service gives a node for its first join, and
/// what the node opens from the wire. The secrets (state disk key,
/// measurement secret, token, control-plane files) are zeroized when it
/// is dropped and never shown by `Debug`; on the wire they exist only
/// sealed ([`JoinTicket::seal`]). Unchecked: the node makes a
/// [`CheckedJoinTicket`] of it ([`JoinTicket::check`]).
#[derive(Clone, PartialEq, Eq, Default)]
pub struct JoinTicket {
    /// The key of the node's state disk.
    pub state_disk_key: SecretBytes,
    /// The cluster's measurement secret.
    pub measurement_secret: SecretBytes,
    /// The kubeadm bootstrap token.
    pub token: Zeroizing<String>,
    /// The files a control-plane node needs (empty for a worker).
    pub control_plane_files: Vec<ControlPlaneFile>,
    /// The cluster's measurement salt, as sent (checked by [`JoinTicket::check`]).
    pub measurement_salt: Vec<u8>,
    /// The kubelet's certificate, DER (empty: none asked for).
    pub kubelet_cert: Vec<u8>,
    /// `host:port` of the Kubernetes API server.
    pub api_server_endpoint: String,
    /// kubeadm's `sha256:<hex>` pin of the cluster CA.
    pub discovery_token_ca_cert_hash: String,
    /// The Kubernetes version the node installs.
    pub kubernetes_version: String,
    /// The node's VPN address (empty: the node sent no VPN key).
    pub node_vpn_ip: String,
    /// The public half of the control-plane role key
    /// ([`crate::role`]), as sent (checked by [`JoinTicket::check`]).
    pub control_plane_key: Vec<u8>,
}

/// A rejoin ticket: a rebooted node's state disk key, the measurement
/// secret and salt, and the disk's last confirmed generation. The secrets
/// are zeroized when it is dropped and exist on the wire only sealed
/// ([`RejoinTicket::seal`]). Unchecked: the node makes a
/// [`CheckedRejoinTicket`] of it ([`RejoinTicket::check`]).
#[derive(Clone, PartialEq, Eq, Default)]
pub struct RejoinTicket {
    /// The key of the node's state disk.
    pub state_disk_key: SecretBytes,
    /// The cluster's measurement secret.
    pub measurement_secret: SecretBytes,
    /// The cluster's measurement salt, as sent (checked by [`RejoinTicket::check`]).
    pub measurement_salt: Vec<u8>,
    /// The state disk's generation the cluster last confirmed (0: none).
    pub generation: u64,
    /// The public half of the control-plane role key
    /// ([`crate::role`]), as sent (checked by [`RejoinTicket::check`]).
    pub control_plane_key: Vec<u8>,
}

impl fmt::Debug for JoinTicket {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("JoinTicket")
            .field("measurement_salt", &self.measurement_salt)
            .field("api_server_endpoint", &self.api_server_endpoint)
            .field("kubernetes_version", &self.kubernetes_version)
            .field("node_vpn_ip", &self.node_vpn_ip)
            .finish_non_exhaustive()
    }
}

impl fmt::Debug for RejoinTicket {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RejoinTicket")
            .field("measurement_salt", &self.measurement_salt)
            .field("generation", &self.generation)
            .finish_non_exhaustive()
    }
}

impl JoinTicket {
    /// The wire message of this ticket for the node whose sealing key is
    /// `recipient`: the secrets sealed into `sealed_secrets` (as a join
    /// ticket's), their plaintext fields empty. What stays in the clear is
    /// what the host may see: the salt, the kubelet certificate, endpoints,
    /// versions, the CA hash, the VPN address.
    pub fn seal(
        &self,
        recipient: &[u8; SEALING_KEY_LEN],
    ) -> Result<IssueJoinTicketResponse, SealError> {
        let secrets = TicketSecrets {
            state_disk_key: self.state_disk_key.expose().to_vec(),
            measurement_secret: self.measurement_secret.expose().to_vec(),
            token: self.token.to_string(),
            control_plane_files: self
                .control_plane_files
                .iter()
                .map(|f| ControlPlaneCertOrKey {
                    name: f.name.clone(),
                    data: f.data.expose().to_vec(),
                })
                .collect(),
            control_plane_key: self.control_plane_key.clone(),
        };
        // The message zeroizes its secrets when dropped (so it is filled in
        // place); the plaintext secret fields stay empty.
        let mut wire = IssueJoinTicketResponse::default();
        wire.sealed_secrets = seal_secrets(&secrets, recipient, SealedKind::JoinTicket)?;
        wire.measurement_salt = self.measurement_salt.clone();
        wire.kubelet_cert = self.kubelet_cert.clone();
        wire.api_server_endpoint = self.api_server_endpoint.clone();
        wire.discovery_token_ca_cert_hash = self.discovery_token_ca_cert_hash.clone();
        wire.kubernetes_version = self.kubernetes_version.clone();
        wire.node_vpn_ip = self.node_vpn_ip.clone();
        Ok(wire)
    }

    /// Opens a join ticket's wire message with `key` (the node's, for this
    /// connection). Refuses a message with no sealed secrets, with any
    /// secret in the clear, or whose sealed secrets do not open as a join
    /// ticket's or do not decode.
    pub fn open(
        wire: &IssueJoinTicketResponse,
        key: &SealingKeyPair,
    ) -> Result<JoinTicket, TicketError> {
        if !wire.state_disk_key.is_empty()
            || !wire.measurement_secret.is_empty()
            || !wire.token.is_empty()
            || !wire.control_plane_files.is_empty()
        {
            return Err(TicketError::NotSealed("secrets sent in the clear"));
        }
        let mut secrets = open_secrets(&wire.sealed_secrets, key, SealedKind::JoinTicket)?;
        Ok(JoinTicket {
            state_disk_key: SecretBytes::new(std::mem::take(&mut secrets.state_disk_key)),
            measurement_secret: SecretBytes::new(std::mem::take(&mut secrets.measurement_secret)),
            token: Zeroizing::new(std::mem::take(&mut secrets.token)),
            control_plane_files: std::mem::take(&mut secrets.control_plane_files)
                .into_iter()
                .map(|mut f| ControlPlaneFile {
                    name: std::mem::take(&mut f.name),
                    data: SecretBytes::new(std::mem::take(&mut f.data)),
                })
                .collect(),
            measurement_salt: wire.measurement_salt.clone(),
            kubelet_cert: wire.kubelet_cert.clone(),
            api_server_endpoint: wire.api_server_endpoint.clone(),
            discovery_token_ca_cert_hash: wire.discovery_token_ca_cert_hash.clone(),
            kubernetes_version: wire.kubernetes_version.clone(),
            node_vpn_ip: wire.node_vpn_ip.clone(),
            control_plane_key: std::mem::take(&mut secrets.control_plane_key),
        })
    }

    /// Checks the ticket's fields, once, into a [`CheckedJoinTicket`]: a
    /// measurement secret, a measurement salt ([`MeasurementSalt`]), a
    /// state-disk key of [`STATE_DISK_KEY_LEN`] bytes.
    pub fn check(self) -> Result<CheckedJoinTicket, TicketError> {
        let (measurement_salt, state_disk_key, control_plane_key) = check_fields(
            &self.measurement_secret,
            &self.measurement_salt,
            &self.state_disk_key,
            &self.control_plane_key,
        )?;
        Ok(CheckedJoinTicket {
            cluster_id: derive_cluster_id(self.measurement_secret.expose(), &measurement_salt),
            measurement_salt,
            state_disk_key,
            control_plane_key,
            ticket: self,
        })
    }
}

impl RejoinTicket {
    /// The wire message of this ticket for the node whose sealing key is
    /// `recipient`: the state disk key and measurement secret sealed into
    /// `sealed_secrets` (as a rejoin ticket's), their plaintext fields
    /// empty.
    pub fn seal(
        &self,
        recipient: &[u8; SEALING_KEY_LEN],
    ) -> Result<IssueRejoinTicketResponse, SealError> {
        let secrets = TicketSecrets {
            state_disk_key: self.state_disk_key.expose().to_vec(),
            measurement_secret: self.measurement_secret.expose().to_vec(),
            token: String::new(),
            control_plane_files: Vec::new(),
            control_plane_key: self.control_plane_key.clone(),
        };
        let mut wire = IssueRejoinTicketResponse::default();
        wire.sealed_secrets = seal_secrets(&secrets, recipient, SealedKind::RejoinTicket)?;
        wire.generation = self.generation;
        wire.measurement_salt = self.measurement_salt.clone();
        Ok(wire)
    }

    /// Opens a rejoin ticket's wire message with `key`. Refuses as
    /// [`JoinTicket::open`] does, and sealed secrets that carry a join
    /// ticket's token or files.
    pub fn open(
        wire: &IssueRejoinTicketResponse,
        key: &SealingKeyPair,
    ) -> Result<RejoinTicket, TicketError> {
        if !wire.state_disk_key.is_empty() || !wire.measurement_secret.is_empty() {
            return Err(TicketError::NotSealed("secrets sent in the clear"));
        }
        let mut secrets = open_secrets(&wire.sealed_secrets, key, SealedKind::RejoinTicket)?;
        if !secrets.token.is_empty() || !secrets.control_plane_files.is_empty() {
            return Err(TicketError::Unusable(
                "a rejoin ticket's sealed secrets carry a token or files".into(),
            ));
        }
        Ok(RejoinTicket {
            state_disk_key: SecretBytes::new(std::mem::take(&mut secrets.state_disk_key)),
            measurement_secret: SecretBytes::new(std::mem::take(&mut secrets.measurement_secret)),
            measurement_salt: wire.measurement_salt.clone(),
            generation: wire.generation,
            control_plane_key: std::mem::take(&mut secrets.control_plane_key),
        })
    }

    /// Checks the ticket's fields, once, into a [`CheckedRejoinTicket`]: a
    /// measurement secret, a measurement salt ([`MeasurementSalt`]: the
    /// node marks itself with the ticket's salt, never its disk header's)
    /// and a state-disk key of [`STATE_DISK_KEY_LEN`] bytes.
    pub fn check(self) -> Result<CheckedRejoinTicket, TicketError> {
        let (measurement_salt, state_disk_key, control_plane_key) = check_fields(
            &self.measurement_secret,
            &self.measurement_salt,
            &self.state_disk_key,
            &self.control_plane_key,
        )?;
        Ok(CheckedRejoinTicket {
            cluster_id: derive_cluster_id(self.measurement_secret.expose(), &measurement_salt),
            measurement_salt,
            state_disk_key,
            control_plane_key,
            generation: self.generation,
        })
    }
}

/// A join ticket whose fields were checked ([`JoinTicket::check`]): its
/// state disk key has [`STATE_DISK_KEY_LEN`] bytes, its salt is a
/// [`MeasurementSalt`], its measurement secret is not empty.
#[derive(Clone, PartialEq, Eq)]
pub struct CheckedJoinTicket {
    ticket: JoinTicket,
    measurement_salt: MeasurementSalt,
    state_disk_key: SecretBytes,
    control_plane_key: ControlPlanePublicKey,
    cluster_id: [u8; DERIVED_KEY_LEN],
}

impl CheckedJoinTicket {
    /// The state disk's key ([`STATE_DISK_KEY_LEN`] bytes).
    pub fn state_disk_key(&self) -> &SecretBytes {
        &self.state_disk_key
    }

    /// The cluster's measurement salt.
    pub fn measurement_salt(&self) -> &MeasurementSalt {
        &self.measurement_salt
    }

    /// The id of the ticket's cluster (of its measurement secret and salt):
    /// what the node marks itself with, and what its join service's mark
    /// must show ([`check_member_mark`]).
    pub fn cluster_id(&self) -> &[u8; DERIVED_KEY_LEN] {
        &self.cluster_id
    }

    /// The public half of the control-plane role key: what the answers
    /// only a control plane may give are checked with ([`crate::role`]).
    pub fn control_plane_key(&self) -> &ControlPlanePublicKey {
        &self.control_plane_key
    }

    /// The kubeadm bootstrap token.
    pub fn token(&self) -> &str {
        &self.ticket.token
    }

    /// The files a control-plane node needs.
    pub fn control_plane_files(&self) -> &[ControlPlaneFile] {
        &self.ticket.control_plane_files
    }

    /// The kubelet's certificate, DER (empty: none).
    pub fn kubelet_cert(&self) -> &[u8] {
        &self.ticket.kubelet_cert
    }

    /// `host:port` of the Kubernetes API server.
    pub fn api_server_endpoint(&self) -> &str {
        &self.ticket.api_server_endpoint
    }

    /// kubeadm's `sha256:<hex>` pin of the cluster CA.
    pub fn discovery_token_ca_cert_hash(&self) -> &str {
        &self.ticket.discovery_token_ca_cert_hash
    }

    /// The Kubernetes version the node installs.
    pub fn kubernetes_version(&self) -> &str {
        &self.ticket.kubernetes_version
    }
}

impl fmt::Debug for CheckedJoinTicket {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("CheckedJoinTicket")
            .field(&self.ticket)
            .finish()
    }
}

/// A rejoin ticket whose fields were checked ([`RejoinTicket::check`]).
#[derive(Clone, PartialEq, Eq)]
pub struct CheckedRejoinTicket {
    measurement_salt: MeasurementSalt,
    state_disk_key: SecretBytes,
    control_plane_key: ControlPlanePublicKey,
    cluster_id: [u8; DERIVED_KEY_LEN],
    generation: u64,
}

impl CheckedRejoinTicket {
    /// The state disk's key ([`STATE_DISK_KEY_LEN`] bytes).
    pub fn state_disk_key(&self) -> &SecretBytes {
        &self.state_disk_key
    }

    /// The cluster's measurement salt (the node marks itself with it,
    /// never with its disk header's).
    pub fn measurement_salt(&self) -> &MeasurementSalt {
        &self.measurement_salt
    }

    /// The id of the ticket's cluster (see [`CheckedJoinTicket::cluster_id`]).
    pub fn cluster_id(&self) -> &[u8; DERIVED_KEY_LEN] {
        &self.cluster_id
    }

    /// The public half of the control-plane role key: what the answers
    /// only a control plane may give are checked with ([`crate::role`]).
    pub fn control_plane_key(&self) -> &ControlPlanePublicKey {
        &self.control_plane_key
    }

    /// The state disk's generation the cluster last confirmed (0: none).
    pub fn generation(&self) -> u64 {
        self.generation
    }
}

impl fmt::Debug for CheckedRejoinTicket {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CheckedRejoinTicket")
            .field("measurement_salt", &self.measurement_salt)
            .field("generation", &self.generation)
            .finish_non_exhaustive()
    }
}

fn seal_secrets(
    secrets: &TicketSecrets,
    recipient: &[u8; SEALING_KEY_LEN],
    kind: SealedKind,
) -> Result<Vec<u8>, SealError> {
    seal(recipient, kind, &Zeroizing::new(secrets.encode_to_vec()))
}

/// Opens and decodes sealed ticket secrets (the plaintext is zeroized
/// once decoded; the decoded message zeroizes its own).
fn open_secrets(
    sealed: &[u8],
    key: &SealingKeyPair,
    kind: SealedKind,
) -> Result<TicketSecrets, TicketError> {
    if sealed.is_empty() {
        return Err(TicketError::NotSealed("no sealed secrets"));
    }
    let plain = key.open(kind, sealed)?;
    TicketSecrets::decode(plain.expose())
        .map_err(|e| TicketError::Unusable(format!("the sealed secrets do not decode: {e}")))
}

/// The checks a join and a rejoin ticket share, in their order: a
/// measurement secret, a salt, a key of [`STATE_DISK_KEY_LEN`] bytes, a
/// control-plane role key ([`ControlPlanePublicKey::from_bytes`]: a ticket
/// without one leaves the node no way to tell a control plane from a
/// member).
fn check_fields(
    measurement_secret: &SecretBytes,
    salt: &[u8],
    state_disk_key: &SecretBytes,
    control_plane_key: &[u8],
) -> Result<(MeasurementSalt, SecretBytes, ControlPlanePublicKey), TicketError> {
    if measurement_secret.expose().is_empty() {
        return Err(TicketError::Unusable("no measurement secret".into()));
    }
    let salt = MeasurementSalt::try_from(salt)
        .map_err(|e| TicketError::Unusable(format!("a measurement salt of {} bytes", e.len)))?;
    let key_len = state_disk_key.expose().len();
    if key_len != STATE_DISK_KEY_LEN {
        return Err(TicketError::Unusable(format!(
            "the state disk key is {key_len} bytes, not {STATE_DISK_KEY_LEN}"
        )));
    }
    let control_plane_key = ControlPlanePublicKey::from_bytes(control_plane_key)
        .map_err(|e| TicketError::Unusable(e.to_string()))?;
    Ok((salt, state_disk_key.clone(), control_plane_key))
}

/// The join service must prove membership of the ticket's cluster: its
/// attested mark register (PCR 15, `RTMR3`; `service`, `None` if it did
/// not attest) holds the mark of the cluster id that `measurement_secret`
/// gives with `measurement_salt` (the ticket's, for a join and a rejoin
/// alike). A host's own service has the node's image at best, never that
/// mark.
pub fn check_cluster_mark(
    measurement_secret: &[u8],
    measurement_salt: &MeasurementSalt,
    service: Option<&Attested>,
) -> Result<(), TicketError> {
    check_member_mark(
        &derive_cluster_id(measurement_secret, measurement_salt),
        service,
    )
}

/// Whether an attested service's mark register holds the mark of
/// `cluster_id` (it is a bootstrapped member of that cluster): PCR 15 for
/// a vTPM service, `RTMR3` for a TDX one
/// ([`ClusterMarks`](crate::mark::ClusterMarks)); an SEV-SNP
/// service has no such register and is never believed.
pub fn check_member_mark(cluster_id: &[u8], service: Option<&Attested>) -> Result<(), TicketError> {
    use crate::mark::{ClusterMarks, MarkState, mark_register};
    let Some(service) = service else {
        return Err(TicketError::NotMember(NotMember::NotAttested));
    };
    let register = mark_register(service.variant).map_or("mark register", |(name, _, _)| name);
    match ClusterMarks::of(cluster_id).state_of(service) {
        Err(e) => Err(TicketError::NotMember(NotMember::Mark(e))),
        Ok(MarkState::Member) => Ok(()),
        Ok(MarkState::Unmarked | MarkState::Foreign) => {
            Err(TicketError::NotMember(NotMember::NotTheMark { register }))
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::mark::marked_pcr15;
    use confboot_attest::Variant;
    use confboot_tpm::CLUSTER_ID_PCR;

    fn join(secret: &[u8], salt: &[u8], key: &[u8]) -> JoinTicket {
        JoinTicket {
            measurement_secret: SecretBytes::new(secret.to_vec()),
            measurement_salt: salt.to_vec(),
            state_disk_key: SecretBytes::new(key.to_vec()),
            control_plane_key: vec![4; 32],
            ..Default::default()
        }
    }

    fn salt(bytes: &[u8]) -> MeasurementSalt {
        MeasurementSalt::try_from(bytes).unwrap()
    }

    fn service(pcr15: Option<Vec<u8>>) -> Attested {
        Attested {
            set_verdict: None,
            warnings: Vec::new(),
            variant: Variant::QemuVtpm,
            measurements: pcr15.into_iter().map(|v| (CLUSTER_ID_PCR, v)).collect(),
        }
    }

    #[test]
    fn ticket_fields_are_checked() {
        let checked = join(&[1], &[2; 32], &[3; 32]).check().unwrap();
        assert_eq!(checked.state_disk_key().expose(), [3; 32]);
        assert_eq!(checked.measurement_salt().as_bytes(), [2; 32]);
        assert_eq!(
            checked.cluster_id(),
            &derive_cluster_id(&[1], &salt(&[2; 32]))
        );
        for (t, why) in [
            (join(&[], &[2; 32], &[3; 32]), "no measurement secret"),
            (
                join(&[1], &[2; 15], &[3; 32]),
                "a measurement salt of 15 bytes",
            ),
            (
                join(&[1], &[2; 257], &[3; 32]),
                "a measurement salt of 257 bytes",
            ),
            (
                join(&[1], &[2; 32], &[3; 31]),
                "the state disk key is 31 bytes, not 32",
            ),
            // A ticket without the control-plane role key leaves the node
            // no way to tell a control plane from a member.
            (
                JoinTicket {
                    control_plane_key: Vec::new(),
                    ..join(&[1], &[2; 32], &[3; 32])
                },
                "a control-plane key of 0 bytes (want 32, not all zeros)",
            ),
        ] {
            assert_eq!(t.check(), Err(TicketError::Unusable(why.into())));
        }
        let rejoin = |secret: &[u8], salt: &[u8], key: &[u8]| RejoinTicket {
            measurement_secret: SecretBytes::new(secret.to_vec()),
            state_disk_key: SecretBytes::new(key.to_vec()),
            generation: 0,
            measurement_salt: salt.to_vec(),
            control_plane_key: vec![4; 32],
        };
        let checked = rejoin(&[1], &[2; 32], &[3; 32]).check().unwrap();
        assert_eq!(checked.control_plane_key().as_bytes(), &[4; 32]);
        let no_key = RejoinTicket {
            control_plane_key: vec![0; 32],
            ..rejoin(&[1], &[2; 32], &[3; 32])
        };
        assert!(no_key.check().is_err());
        assert!(rejoin(&[], &[2; 32], &[3; 32]).check().is_err());
        assert!(rejoin(&[1], &[2; 32], &[3; 33]).check().is_err());
        for salt in [&[][..], &[2; 15], &[2; 257]] {
            assert_eq!(
                rejoin(&[1], salt, &[3; 32]).check(),
                Err(TicketError::Unusable(format!(
                    "a measurement salt of {} bytes",
                    salt.len()
                )))
            );
        }
    }

    #[test]
    fn only_a_member_of_the_tickets_cluster_is_believed() {
        let mark = marked_pcr15(&derive_cluster_id(&[1; 32], &salt(&[2; 32]))).to_vec();
        assert_eq!(
            check_cluster_mark(
                &[1; 32],
                &salt(&[2; 32]),
                Some(&service(Some(mark.clone())))
            ),
            Ok(())
        );
        let other = marked_pcr15(&derive_cluster_id(&[1; 32], &salt(&[9; 32]))).to_vec();
        for s in [
            None,
            Some(service(None)),
            Some(service(Some(vec![0; 32]))),
            Some(service(Some(other))),
            Some(Attested {
                set_verdict: None,
                warnings: Vec::new(),
                variant: Variant::SevSnp,
                measurements: BTreeMap::from([(0, mark)]),
            }),
        ] {
            assert!(matches!(
                check_cluster_mark(&[1; 32], &salt(&[2; 32]), s.as_ref()),
                Err(TicketError::NotMember(_))
            ));
        }
    }

    #[test]
    fn a_tdx_join_service_proves_membership_with_rtmr3() {
        use crate::mark::{TDX_MARK_INDEX, marked_rtmr3};
        let td = |index: u32, rtmr3: Vec<u8>| Attested {
            set_verdict: None,
            warnings: Vec::new(),
            variant: Variant::Tdx,
            measurements: BTreeMap::from([(0, vec![0x7d; 48]), (index, rtmr3)]),
        };
        let id = derive_cluster_id(&[1; 32], &salt(&[2; 32]));
        assert_eq!(
            check_cluster_mark(
                &[1; 32],
                &salt(&[2; 32]),
                Some(&td(TDX_MARK_INDEX, marked_rtmr3(&id).to_vec()))
            ),
            Ok(())
        );
        let other = marked_rtmr3(&derive_cluster_id(&[1; 32], &salt(&[9; 32]))).to_vec();
        let not_the_mark = NotMember::NotTheMark { register: "RTMR3" };
        let no_rtmr3 = NotMember::Mark(crate::mark::MarkError::Missing {
            register: "RTMR3",
            len: 48,
        });
        for (s, why) in [
            (td(TDX_MARK_INDEX, vec![0; 48]), &not_the_mark),
            (td(TDX_MARK_INDEX, other), &not_the_mark),
            // The vTPM form of the mark, or in PCR 15's place, is not RTMR3's.
            (td(TDX_MARK_INDEX, marked_pcr15(&id).to_vec()), &no_rtmr3),
            (td(CLUSTER_ID_PCR, marked_rtmr3(&id).to_vec()), &no_rtmr3),
        ] {
            let e = check_cluster_mark(&[1; 32], &salt(&[2; 32]), Some(&s)).unwrap_err();
            assert_eq!(e, TicketError::NotMember(why.clone()), "{e}");
        }
    }

    fn full_join_ticket() -> JoinTicket {
        let mut t = join(&[1; 32], &[2; 32], &[3; 32]);
        t.token = Zeroizing::new("abcdef.0123456789abcdef".into());
        t.control_plane_files = vec![ControlPlaneFile {
            name: "ca.key".into(),
            data: SecretBytes::new(b"-----BEGIN EC PRIVATE KEY-----".to_vec()),
        }];
        t.api_server_endpoint = "10.0.0.1:6443".into();
        t
    }

    /// A join ticket's wire message with its secrets in the clear, as no
    /// join service sends one.
    fn in_the_clear() -> IssueJoinTicketResponse {
        let mut t = IssueJoinTicketResponse::default();
        t.state_disk_key = vec![3; 32];
        t.measurement_salt = vec![2; 32];
        t.measurement_secret = vec![1; 32];
        t.token = "abcdef.0123456789abcdef".into();
        t.api_server_endpoint = "10.0.0.1:6443".into();
        t
    }

    /// A join ticket's wire message with only these sealed secrets.
    fn join_sealed(sealed: &[u8]) -> IssueJoinTicketResponse {
        let mut t = IssueJoinTicketResponse::default();
        t.sealed_secrets = sealed.to_vec();
        t
    }

    /// A rejoin ticket's wire message with only these sealed secrets.
    fn rejoin_sealed(sealed: &[u8]) -> IssueRejoinTicketResponse {
        let mut t = IssueRejoinTicketResponse::default();
        t.sealed_secrets = sealed.to_vec();
        t
    }

    #[test]
    fn sealed_join_tickets_carry_no_secret_in_the_clear_and_open_whole() {
        let node = SealingKeyPair::generate();
        let t = full_join_ticket().seal(&node.public_key()).unwrap();
        assert!(t.state_disk_key.is_empty() && t.measurement_secret.is_empty());
        assert!(t.token.is_empty() && t.control_plane_files.is_empty());
        assert_eq!(
            t.api_server_endpoint, "10.0.0.1:6443",
            "what is public stays"
        );
        let wire = t.encode_to_vec();
        for secret in [
            &[3u8; 32][..],
            &[1; 32],
            b"abcdef.0123456789abcdef",
            b"BEGIN EC",
        ] {
            assert!(
                !wire.windows(secret.len()).any(|w| w == secret),
                "a secret shows in the sealed ticket"
            );
        }
        let decoded = IssueJoinTicketResponse::decode(&wire[..]).unwrap();
        let opened = JoinTicket::open(&decoded, &node).unwrap();
        assert_eq!(opened, full_join_ticket());
        // Its Debug shows no secret either.
        let shown = format!("{opened:?}");
        assert!(!shown.contains("abcdef"), "{shown}");
    }

    #[test]
    fn tickets_not_sealed_to_this_node_are_refused() {
        let node = SealingKeyPair::generate();
        let other = SealingKeyPair::generate();
        // Nothing sealed.
        assert_eq!(
            JoinTicket::open(&in_the_clear(), &node),
            Err(TicketError::NotSealed("secrets sent in the clear"))
        );
        assert_eq!(
            JoinTicket::open(&IssueJoinTicketResponse::default(), &node),
            Err(TicketError::NotSealed("no sealed secrets"))
        );
        // Sealed, with a secret in the clear beside.
        let mut beside = full_join_ticket().seal(&node.public_key()).unwrap();
        beside.token = "a host's token".into();
        assert_eq!(
            JoinTicket::open(&beside, &node),
            Err(TicketError::NotSealed("secrets sent in the clear"))
        );
        // Sealed to another key.
        let theirs = full_join_ticket().seal(&other.public_key()).unwrap();
        assert_eq!(
            JoinTicket::open(&theirs, &node),
            Err(TicketError::Sealed(SealError::DoesNotOpen(
                SealedKind::JoinTicket
            )))
        );
        // A rejoin ticket's sealed secrets in a join ticket, and back.
        let rejoin = RejoinTicket {
            state_disk_key: SecretBytes::new(vec![3; 32]),
            measurement_secret: SecretBytes::new(vec![1; 32]),
            generation: 4,
            measurement_salt: vec![2; 32],
            control_plane_key: vec![4; 32],
        }
        .seal(&node.public_key())
        .unwrap();
        let swapped = join_sealed(&rejoin.sealed_secrets);
        assert_eq!(
            JoinTicket::open(&swapped, &node),
            Err(TicketError::Sealed(SealError::DoesNotOpen(
                SealedKind::JoinTicket
            )))
        );
        let joined = full_join_ticket().seal(&node.public_key()).unwrap();
        let as_rejoin = rejoin_sealed(&joined.sealed_secrets);
        assert_eq!(
            RejoinTicket::open(&as_rejoin, &node),
            Err(TicketError::Sealed(SealError::DoesNotOpen(
                SealedKind::RejoinTicket
            )))
        );
        // Truncated.
        let cut = rejoin_sealed(&rejoin.sealed_secrets[..rejoin.sealed_secrets.len() - 1]);
        assert!(matches!(
            RejoinTicket::open(&cut, &node),
            Err(TicketError::Sealed(SealError::DoesNotOpen(_)))
        ));
        // A rejoin ticket with its secrets in the clear.
        let mut clear = rejoin.clone();
        clear.state_disk_key = vec![3; 32];
        assert_eq!(
            RejoinTicket::open(&clear, &node),
            Err(TicketError::NotSealed("secrets sent in the clear"))
        );
        // The genuine one opens.
        assert!(rejoin.state_disk_key.is_empty() && rejoin.measurement_secret.is_empty());
        let opened = RejoinTicket::open(&rejoin, &node).unwrap();
        assert_eq!(opened.state_disk_key.expose(), vec![3; 32]);
        assert_eq!(opened.measurement_secret.expose(), vec![1; 32]);
        assert_eq!(opened.generation, 4);
        assert_eq!(opened.measurement_salt, vec![2; 32]);
        assert_eq!(opened.control_plane_key, vec![4; 32]);
    }

    #[test]
    fn a_rejoin_tickets_sealed_secrets_carry_no_join_fields() {
        let node = SealingKeyPair::generate();
        let secrets = TicketSecrets {
            state_disk_key: vec![3; 32],
            measurement_secret: vec![1; 32],
            token: "abcdef.0123456789abcdef".into(),
            control_plane_files: Vec::new(),
            control_plane_key: vec![4; 32],
        };
        let t = rejoin_sealed(
            &seal_secrets(&secrets, &node.public_key(), SealedKind::RejoinTicket).unwrap(),
        );
        assert!(matches!(
            RejoinTicket::open(&t, &node),
            Err(TicketError::Unusable(_))
        ));
    }
}
