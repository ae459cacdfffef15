//! Join and rejoin tickets as plain code: no sockets, no TLS, no RPC. The
//! server wiring ([`crate::server`]) hands in a request from a node whose
//! attestation was already verified and gets back the ticket or a precise
//! refusal, which it maps to what the caller sees.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use confboot_cluster::kubelet_cert::{KubeletCertError, KubeletCertSigner, KubeletCsr};
use confboot_cluster::mark::ClusterMarks;
use confboot_cluster::role::ControlPlaneKey;
use confboot_cluster::ticket::{ControlPlaneFile, JoinTicket, RejoinTicket};
use confboot_kms::{MasterSecret, MeasurementSalt, SecretBytes, is_uuid};
use confboot_proto::join::{
    ConfirmGenerationRequest, ConfirmGenerationResponse, IssueJoinTicketRequest,
    IssueRejoinTicketRequest,
};
use confboot_util::fs::read_bounded;
use zeroize::Zeroizing;

use crate::ledger::{Caller, TicketKind};
use crate::token::{TokenError, TokenIssuer};
use crate::vpn::{KubeApiPeerRegistry, PeerRequest, RegistryError};
use confboot_proto::vpn::{GetUpdateRequest, GetUpdateResponse, OwnRecord};
use confboot_vpn::{OwnRecordKey, VpnError, VpnPublicKey, check_peer_name, parse_public_endpoint};

/// Largest certificate request accepted.
pub const MAX_CSR_BYTES: usize = confboot_cluster::kubelet_cert::MAX_KUBELET_CSR_BYTES;
/// Largest host public key accepted.
pub const MAX_HOST_KEY_BYTES: usize = 1024;
/// Largest control-plane file sent.
pub const MAX_CONTROL_PLANE_FILE_BYTES: u64 = 64 * 1024;
/// The files a new control-plane node needs, relative to the Kubernetes PKI
/// directory (kubeadm's layout, as Constellation sends them).
pub const CONTROL_PLANE_FILES: [&str; 8] = [
    "ca.crt",
    "ca.key",
    "sa.key",
    "sa.pub",
    "front-proxy-ca.crt",
    "front-proxy-ca.key",
    "etcd/ca.crt",
    "etcd/ca.key",
];

/// What a ticket is made from.
pub struct TicketConfig {
    /// The cluster's master secret (root of every disk key).
    pub master_secret: MasterSecret,
    /// The cluster's measurement salt.
    pub measurement_salt: MeasurementSalt,
    /// `host:port` of the Kubernetes API server.
    pub api_server_endpoint: String,
    /// kubeadm's `sha256:<hex>` pin of the cluster CA.
    pub discovery_token_ca_cert_hash: String,
    /// The Kubernetes version nodes install.
    pub kubernetes_version: String,
    /// Where the Kubernetes PKI lives (for control-plane joins).
    pub pki_dir: PathBuf,
    /// Signs the kubelet certificates nodes ask for; `None`: the cluster
    /// CA's key is not here, and such requests are refused.
    pub kubelet_cert_signer: Option<KubeletCertSigner>,
    /// The registry: the ledger of what each launch and disk was given,
    /// and the VPN peers when the cluster has a VPN (without one, nodes
    /// that send a VPN key are refused).
    pub registry: Arc<KubeApiPeerRegistry>,
}

/// Why joinsvc issued nothing to an attested node: no join or rejoin
/// ticket, no VPN update. (Not [`confboot_cluster::ticket::TicketError`],
/// which is why a node throws away a ticket it was given.)
#[derive(Debug, thiserror::Error)]
pub enum IssueError {
    /// The request is malformed.
    #[error("invalid request: {0}")]
    InvalidRequest(String),
    /// The bootstrap token could not be created.
    #[error("cannot create a bootstrap token: {0}")]
    Token(TokenError),
    /// The files for a control-plane join could not be read.
    #[error("cannot read control-plane files: {0}")]
    ControlPlaneFiles(String),
    /// A kubelet certificate was asked for and cannot be signed here.
    #[error("this join service cannot sign kubelet certificates (no cluster CA key)")]
    KubeletCertUnavailable,
    /// The checked CSR could not be signed (randomness or the CA key failed):
    /// the join service's fault, not the caller's.
    #[error("cannot sign the kubelet certificate: {0}")]
    KubeletCertSigning(KubeletCertError),
    /// A node sent a VPN key and this cluster has no VPN (`--vpn-cidr`).
    #[error("this cluster has no VPN (--vpn-cidr)")]
    VpnUnavailable,
    /// The VPN peer registry could not register the node.
    #[error("{0}")]
    Vpn(RegistryError),
    /// A node's own peer record does not carry a valid proof of the state
    /// disk it names.
    #[error("the own peer record's proof does not match the state disk it names")]
    OwnRecordUnproven,
    /// A generation confirmation does not carry a valid proof of the state
    /// disk it names.
    #[error("the generation confirmation's proof does not match the state disk it names")]
    GenerationUnproven,
}

impl IssueError {
    /// A short label for metrics.
    pub fn reason(&self) -> &'static str {
        match self {
            IssueError::InvalidRequest(_) => "invalid_request",
            IssueError::Token(_) => "token",
            IssueError::ControlPlaneFiles(_) => "control_plane_files",
            IssueError::KubeletCertUnavailable => "kubelet_cert",
            IssueError::KubeletCertSigning(_) => "kubelet_cert_signing",
            IssueError::Vpn(RegistryError::Admission(refusal)) => refusal.reason(),
            IssueError::Vpn(RegistryError::RateLimited(_)) => "rate_limited",
            IssueError::VpnUnavailable | IssueError::Vpn(_) => "vpn",
            IssueError::OwnRecordUnproven => "vpn_own_record",
            IssueError::GenerationUnproven => "generation_proof",
        }
    }
}

/// Issues tickets.
pub struct TicketService {
    config: TicketConfig,
    /// The measurement secret, derived once from the master secret (the
    /// same for every ticket).
    measurement_secret: SecretBytes,
    /// The mark register of a member of this cluster (PCR 15, RTMR3):
    /// marked with its cluster id.
    cluster_mark: ClusterMarks,
    /// The control-plane role key, derived once from the master secret:
    /// what the answers only a control plane may give are signed with.
    role_key: ControlPlaneKey,
    tokens: Arc<dyn TokenIssuer>,
}

fn disk_uuid(raw: &str) -> Result<String, IssueError> {
    if !is_uuid(raw) {
        return Err(IssueError::InvalidRequest("disk_uuid is not a UUID".into()));
    }
    Ok(raw.to_ascii_lowercase())
}

impl TicketService {
    /// A service issuing tickets from `config`, tokens from `tokens`.
    pub fn new(config: TicketConfig, tokens: Arc<dyn TokenIssuer>) -> TicketService {
        let measurement_secret = config.master_secret.measurement_secret();
        let cluster_id =
            confboot_kms::derive_cluster_id(measurement_secret.expose(), &config.measurement_salt);
        TicketService {
            cluster_mark: ClusterMarks::of(&cluster_id),
            role_key: ControlPlaneKey::derive(&config.master_secret),
            measurement_secret,
            config,
            tokens,
        }
    }

    /// A join ticket for an attested `caller`: admitted by the ledger
    /// (a launch asks once, a disk joins once, a removed disk never) and
    /// recorded before anything is made. The handler that serves it seals
    /// its secrets to the caller's key ([`JoinTicket::seal`]).
    #[cfg(test)]
    pub fn issue_join_ticket(
        &self,
        caller: &Caller,
        req: &IssueJoinTicketRequest,
    ) -> Result<JoinTicket, IssueError> {
        self.issue_join_ticket_gated(caller, req, &|_| Ok(()))
    }

    /// [`TicketService::issue_join_ticket`], the admission asking `gate`
    /// how many entries the ticket adds to the ledger (the first-ticket
    /// rate: [`crate::vpn::KubeApiPeerRegistry::admit_gated`]).
    pub fn issue_join_ticket_gated(
        &self,
        caller: &Caller,
        req: &IssueJoinTicketRequest,
        gate: crate::vpn::FirstTicketGate<'_>,
    ) -> Result<JoinTicket, IssueError> {
        let uuid = disk_uuid(&req.disk_uuid)?;
        if req.certificate_request.len() > MAX_CSR_BYTES {
            return Err(IssueError::InvalidRequest(format!(
                "certificate_request over {MAX_CSR_BYTES} bytes"
            )));
        }
        if req.host_public_key.len() > MAX_HOST_KEY_BYTES {
            return Err(IssueError::InvalidRequest(format!(
                "host_public_key over {MAX_HOST_KEY_BYTES} bytes"
            )));
        }
        // The CSR is checked and signed before a token is made: a refused
        // request leaves nothing behind in the API server.
        let kubelet_cert = if req.certificate_request.is_empty() {
            Vec::new()
        } else {
            let csr = KubeletCsr::parse(&req.certificate_request)
                .map_err(|e| IssueError::InvalidRequest(e.to_string()))?;
            let signer = self
                .config
                .kubelet_cert_signer
                .as_ref()
                .ok_or(IssueError::KubeletCertUnavailable)?;
            let cert = signer
                .sign_checked(&csr, std::time::SystemTime::now())
                .map_err(IssueError::KubeletCertSigning)?;
            log::debug!(
                "kubelet certificate signed for node {} ({} IPs)",
                csr.node_name,
                csr.ips.len()
            );
            cert
        };
        let control_plane_files = if req.is_control_plane {
            read_control_plane_files(&self.config.pki_dir)?
        } else {
            Vec::new()
        };
        // Admitted, recorded and registered (one write) before the token
        // is made: a refused request leaves no token behind. A recorded
        // join whose token fails is served again while its first boot may
        // run (the same address); an SEV-SNP launch is not (it reboots).
        let peer = self.vpn_peer_request(req)?;
        let node_vpn_ip = self
            .config
            .registry
            .admit_gated(caller, TicketKind::Join, &uuid, peer.as_ref(), gate)
            .map_err(IssueError::Vpn)?;
        if let Some(ip) = node_vpn_ip {
            log::debug!("node {} has VPN address {ip}", req.node_name);
        }
        let token = self
            .tokens
            .create_bootstrap_token()
            .map_err(IssueError::Token)?;
        log::debug!("bootstrap token {} created for disk {uuid}", token.id());
        let m = &self.config.master_secret;
        Ok(JoinTicket {
            state_disk_key: m.state_disk_key(&uuid),
            measurement_salt: self.config.measurement_salt.to_vec(),
            measurement_secret: self.measurement_secret.clone(),
            kubelet_cert,
            api_server_endpoint: self.config.api_server_endpoint.clone(),
            token: Zeroizing::new(token.to_token_string().to_string()),
            discovery_token_ca_cert_hash: self.config.discovery_token_ca_cert_hash.clone(),
            control_plane_files,
            kubernetes_version: self.config.kubernetes_version.clone(),
            node_vpn_ip: node_vpn_ip.map(|ip| ip.to_string()).unwrap_or_default(),
            control_plane_key: self.role_key.public_key().as_bytes().to_vec(),
        })
    }

    /// The control-plane role key ([`confboot_cluster::role`]): the server
    /// signs with it what only a control plane may answer (peer lists,
    /// generation confirmations), for the caller's session.
    pub fn role_key(&self) -> &ControlPlaneKey {
        &self.role_key
    }

    /// What the mark register of a member of this cluster holds (PCR 15
    /// for vTPM, RTMR3 for TDX: the mark of the cluster id this service's
    /// secrets derive).
    pub fn cluster_mark(&self) -> &ClusterMarks {
        &self.cluster_mark
    }

    /// The answer to a member node's `GetUpdate{known, own}`: its own
    /// record registered or refreshed first (when sent, with a valid proof
    /// of its state disk), then the registry's version, and its peers only
    /// when that differs from `known`.
    pub fn vpn_update(&self, req: &GetUpdateRequest) -> Result<GetUpdateResponse, IssueError> {
        let registry = &self.config.registry;
        if !registry.has_vpn() {
            return Err(IssueError::VpnUnavailable);
        }
        if let Some(own) = &req.own {
            let request = self.checked_own_record(own)?;
            let ip = registry.refresh_own(&request).map_err(IssueError::Vpn)?;
            log::debug!("node {} refreshed its VPN record ({ip})", request.name);
        }
        registry
            .update(req.resource_version)
            .map_err(IssueError::Vpn)
    }

    /// A node's own record, its fields checked and its proof verified
    /// with the key of the disk it names.
    fn checked_own_record(&self, own: &OwnRecord) -> Result<PeerRequest, IssueError> {
        let uuid = disk_uuid(&own.disk_uuid)?;
        let peer = own
            .peer
            .as_ref()
            .ok_or_else(|| IssueError::InvalidRequest("an own record without a peer".into()))?;
        let invalid = |e: VpnError| IssueError::InvalidRequest(e.to_string());
        check_peer_name(&peer.name).map_err(invalid)?;
        let request = PeerRequest {
            name: peer.name.clone(),
            public_endpoint: parse_public_endpoint(&peer.public_endpoint).map_err(invalid)?,
            vpn_pub_key: VpnPublicKey::from_bytes(&peer.vpn_pub_key).map_err(invalid)?,
            disk_uuid: uuid.clone(),
        };
        let disk_key = self.config.master_secret.state_disk_key(&uuid);
        let own_key = OwnRecordKey::from_disk_key(disk_key.expose());
        if !own_key.verify(own) {
            return Err(IssueError::OwnRecordUnproven);
        }
        Ok(request)
    }

    /// The node's VPN peer, checked, if it sent a VPN key.
    fn vpn_peer_request(
        &self,
        req: &IssueJoinTicketRequest,
    ) -> Result<Option<PeerRequest>, IssueError> {
        if req.node_vpn_pub_key.is_empty() {
            return Ok(None);
        }
        if !self.config.registry.has_vpn() {
            return Err(IssueError::VpnUnavailable);
        }
        let invalid = |e: VpnError| IssueError::InvalidRequest(e.to_string());
        check_peer_name(&req.node_name).map_err(invalid)?;
        let request = PeerRequest {
            name: req.node_name.clone(),
            public_endpoint: parse_public_endpoint(&req.node_public_endpoint).map_err(invalid)?,
            vpn_pub_key: VpnPublicKey::from_bytes(&req.node_vpn_pub_key).map_err(invalid)?,
            disk_uuid: disk_uuid(&req.disk_uuid)?,
        };
        Ok(Some(request))
    }

    /// A rejoin ticket for an attested `caller`: only the disk key, the
    /// measurement secret and salt and the disk's last confirmed generation, for a
    /// disk the admin did not remove, to a caller the ledger admits (an
    /// SEV-SNP launch asks once). Sealed by the handler that serves it
    /// ([`RejoinTicket::seal`]).
    #[cfg(test)]
    pub fn issue_rejoin_ticket(
        &self,
        caller: &Caller,
        req: &IssueRejoinTicketRequest,
    ) -> Result<RejoinTicket, IssueError> {
        self.issue_rejoin_ticket_gated(caller, req, &|_| Ok(()))
    }

    /// [`TicketService::issue_rejoin_ticket`], the admission asking `gate`
    /// ([`TicketService::issue_join_ticket_gated`]).
    pub fn issue_rejoin_ticket_gated(
        &self,
        caller: &Caller,
        req: &IssueRejoinTicketRequest,
        gate: crate::vpn::FirstTicketGate<'_>,
    ) -> Result<RejoinTicket, IssueError> {
        let uuid = disk_uuid(&req.disk_uuid)?;
        let generation = self
            .config
            .registry
            .admit_rejoin_gated(caller, &uuid, gate)
            .map_err(IssueError::Vpn)?;
        let m = &self.config.master_secret;
        Ok(RejoinTicket {
            state_disk_key: m.state_disk_key(&uuid),
            measurement_secret: self.measurement_secret.clone(),
            generation,
            measurement_salt: self.config.measurement_salt.to_vec(),
            control_plane_key: self.role_key.public_key().as_bytes().to_vec(),
        })
    }

    /// A rejoined node's confirmation of its state disk's generation
    /// (`confboot_cluster::generation`): proven with the disk's key, the
    /// generation it found checked against the last confirmed (an older
    /// one is refused: the disk was rolled back), the one it wrote
    /// (found + 1, or 0 when it refused the disk itself) recorded.
    pub fn confirm_generation(
        &self,
        req: &ConfirmGenerationRequest,
    ) -> Result<ConfirmGenerationResponse, IssueError> {
        let uuid = disk_uuid(&req.disk_uuid)?;
        let (found, written) = (req.found_generation, req.written_generation);
        if written != 0 && Some(written) != found.checked_add(1) {
            return Err(IssueError::InvalidRequest(
                "written_generation is neither 0 nor found_generation + 1".into(),
            ));
        }
        let disk_key = self.config.master_secret.state_disk_key(&uuid);
        if !confboot_cluster::generation::verify_generation_proof(
            disk_key.expose(),
            &uuid,
            found,
            written,
            &req.proof,
        ) {
            return Err(IssueError::GenerationUnproven);
        }
        self.config
            .registry
            .confirm_generation(&uuid, found, written)
            .map_err(IssueError::Vpn)?;
        // Unsigned: the server signs it for the caller's session.
        Ok(ConfirmGenerationResponse::default())
    }
}

fn read_control_plane_files(pki_dir: &Path) -> Result<Vec<ControlPlaneFile>, IssueError> {
    CONTROL_PLANE_FILES
        .iter()
        .map(|name| {
            let mut data = read_bounded(&pki_dir.join(name), MAX_CONTROL_PLANE_FILE_BYTES)
                .map_err(|e| IssueError::ControlPlaneFiles(e.to_string()))?;
            Ok(ControlPlaneFile {
                name: name.to_string(),
                data: SecretBytes::new(std::mem::take(&mut *data)),
            })
        })
        .collect()
}

/// Why the Kubernetes CA certificate gives no kubeadm CA pin.
#[derive(Debug, thiserror::Error)]
pub enum CaCertError {
    /// The certificate starts as PEM but is no PEM block.
    #[error("CA certificate PEM: {0}")]
    Pem(x509_parser::nom::Err<x509_parser::error::PEMError>),
    /// The certificate is no X.509 certificate.
    #[error("CA certificate: {0}")]
    Certificate(x509_parser::nom::Err<x509_parser::error::X509Error>),
}

/// kubeadm's CA pin: `sha256:` + hex of SHA-256 over the CA certificate's
/// SubjectPublicKeyInfo (DER). Takes the certificate as PEM or DER.
pub fn discovery_token_ca_cert_hash(ca_cert: &[u8]) -> Result<String, CaCertError> {
    let der = if ca_cert.starts_with(b"-----BEGIN") {
        let (_, pem) = x509_parser::pem::parse_x509_pem(ca_cert).map_err(CaCertError::Pem)?;
        pem.contents
    } else {
        ca_cert.to_vec()
    };
    let (_, cert) = x509_parser::parse_x509_certificate(&der).map_err(CaCertError::Certificate)?;
    let spki = cert.tbs_certificate.subject_pki.raw;
    Ok(format!(
        "sha256:{}",
        confboot_util::hex::encode(ring::digest::digest(&ring::digest::SHA256, spki).as_ref())
    ))
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::token::BootstrapToken;
    use std::sync::Mutex;

    #[test]
    fn each_refusal_prints_its_message() {
        let cases = [
            (
                IssueError::InvalidRequest("disk_uuid is not a UUID".into()),
                "invalid request: disk_uuid is not a UUID",
            ),
            (
                IssueError::Token(TokenError::Random),
                "cannot create a bootstrap token: no randomness available",
            ),
            (
                IssueError::ControlPlaneFiles("ca.key: missing".into()),
                "cannot read control-plane files: ca.key: missing",
            ),
            (
                IssueError::KubeletCertUnavailable,
                "this join service cannot sign kubelet certificates (no cluster CA key)",
            ),
            (
                IssueError::KubeletCertSigning(KubeletCertError::Generate("no randomness".into())),
                "cannot sign the kubelet certificate: kubelet certificate: no randomness",
            ),
            (
                IssueError::VpnUnavailable,
                "this cluster has no VPN (--vpn-cidr)",
            ),
            (
                IssueError::Vpn(RegistryError::Corrupt("not JSON".into())),
                "VPN peer registry configmap confboot-vpn-peers is invalid: not JSON",
            ),
            (
                IssueError::OwnRecordUnproven,
                "the own peer record's proof does not match the state disk it names",
            ),
        ];
        for (error, message) in cases {
            assert_eq!(error.to_string(), message, "{error:?}");
        }
    }

    /// Records calls; hands out tokens from the real generator or fails.
    struct RecordingTokens {
        calls: Mutex<usize>,
        fail: bool,
    }

    impl TokenIssuer for RecordingTokens {
        fn create_bootstrap_token(&self) -> Result<BootstrapToken, TokenError> {
            *self.calls.lock().unwrap() += 1;
            if self.fail {
                Err(TokenError::Api {
                    status: 500,
                    reason: "InternalError".into(),
                })
            } else {
                Ok(crate::token::BootstrapToken::generate().unwrap())
            }
        }
    }

    const UUID: &str = "8D0B4A7E-3C4F-4B8E-9A51-0F6E2C1D7B93";

    fn service(pki_dir: PathBuf, fail: bool) -> (TicketService, Arc<RecordingTokens>) {
        let tokens = Arc::new(RecordingTokens {
            calls: Mutex::new(0),
            fail,
        });
        let config = TicketConfig {
            master_secret: MasterSecret::new((0..32).collect(), (100..132).collect()).unwrap(),
            measurement_salt: MeasurementSalt::new(vec![7; 32]).unwrap(),
            api_server_endpoint: "10.0.0.1:6443".into(),
            discovery_token_ca_cert_hash: "sha256:00".into(),
            kubernetes_version: "v1.31.1".into(),
            pki_dir,
            kubelet_cert_signer: Some(test_signer()),
            registry: Arc::new(registry_without_vpn()),
        };
        (TicketService::new(config, tokens.clone()), tokens)
    }

    fn test_signer() -> KubeletCertSigner {
        let key = rcgen::KeyPair::generate().unwrap();
        let mut ca = rcgen::CertificateParams::default();
        ca.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        let ca = ca.self_signed(&key).unwrap();
        KubeletCertSigner::new(
            &ca.pem(),
            &key.serialize_pem(),
            confboot_cluster::kubelet_cert::DEFAULT_KUBELET_CERT_VALIDITY,
        )
        .unwrap()
    }

    #[test]
    fn a_node_with_a_vpn_key_gets_an_address_before_its_token() {
        // Each node its own disk.
        let vpn_request = |name: &str, key: u8, endpoint: &str| IssueJoinTicketRequest {
            node_name: name.into(),
            node_vpn_pub_key: vec![key; 32],
            node_public_endpoint: endpoint.into(),
            ..request(&disk_of(name), false)
        };
        // No VPN here: refused before any token.
        let (s, tokens) = service(PathBuf::from("/nonexistent"), false);
        let e = s
            .issue_join_ticket(
                &Caller::Unbootstrapped,
                &vpn_request("node-1", 1, "192.0.2.1:51820"),
            )
            .unwrap_err();
        assert!(matches!(e, IssueError::VpnUnavailable), "{e}");
        assert_eq!(*tokens.calls.lock().unwrap(), 0);
        assert!(matches!(
            s.vpn_update(&update_request(0)),
            Err(IssueError::VpnUnavailable)
        ));

        let registry = registry_in_a_namespace();
        let (mut s, tokens) = service(PathBuf::from("/nonexistent"), false);
        s.config.registry = Arc::new(registry);
        let ip = |r: &IssueJoinTicketRequest| {
            s.issue_join_ticket(&Caller::Unbootstrapped, r)
                .unwrap()
                .node_vpn_ip
                .clone()
        };
        assert_eq!(
            ip(&vpn_request("node-1", 1, "192.0.2.1:51820")),
            "10.118.0.1"
        );
        assert_eq!(
            ip(&vpn_request("node-2", 2, "192.0.2.2:51820")),
            "10.118.0.2"
        );
        assert_eq!(
            ip(&vpn_request("node-1", 1, "192.0.2.1:51820")),
            "10.118.0.1"
        );
        // Without a VPN key: no address, as before.
        assert_eq!(ip(&request(UUID, false)), "");
        assert_eq!(*tokens.calls.lock().unwrap(), 4);
        // Bad VPN fields are the caller's error, found before any token.
        for bad in [
            vpn_request("node-3", 3, "192.0.2.3"),
            vpn_request("Node_3", 3, "192.0.2.3:51820"),
            vpn_request("node-3", 0, "192.0.2.3:51820"),
            IssueJoinTicketRequest {
                node_vpn_pub_key: vec![3; 31],
                ..vpn_request("node-3", 3, "192.0.2.3:51820")
            },
        ] {
            let e = s
                .issue_join_ticket(&Caller::Unbootstrapped, &bad)
                .unwrap_err();
            assert!(matches!(e, IssueError::InvalidRequest(_)), "{e}");
        }
        // Another node's key under a new name.
        let e = s
            .issue_join_ticket(
                &Caller::Unbootstrapped,
                &vpn_request("node-3", 2, "192.0.2.3:51820"),
            )
            .unwrap_err();
        assert!(
            matches!(e, IssueError::Vpn(RegistryError::Refused(_))),
            "{e}"
        );
        assert_eq!(*tokens.calls.lock().unwrap(), 4);
        let update = s.vpn_update(&update_request(0)).unwrap();
        assert_eq!(update.resource_version, 2);
        assert_eq!(update.peers.len(), 2);
        assert!(s.vpn_update(&update_request(2)).unwrap().peers.is_empty());
    }

    /// A client of this test binary's real control plane as joinsvc's
    /// ServiceAccount, with the Role `deploy/kubernetes/joinsvc.yaml` ships,
    /// in a namespace of its own; and the namespace.
    pub(crate) fn account_in_a_namespace() -> (crate::kube_api::KubeApi, String) {
        let plane = confboot_tests::kube::ControlPlane::shared();
        let ns = plane.namespace("ticket");
        let token = plane.joinsvc_account(&ns, &[]);
        let api = crate::kube_api::KubeApi::new(
            &plane.url(),
            &plane.ca_pem(),
            zeroize::Zeroizing::new(token),
            std::time::Duration::from_secs(30),
            1,
        )
        .unwrap();
        (api, ns)
    }

    /// A registry without a VPN, in a namespace of its own on the real
    /// control plane.
    pub(crate) fn registry_without_vpn() -> KubeApiPeerRegistry {
        let (api, ns) = account_in_a_namespace();
        KubeApiPeerRegistry::without_vpn(api)
            .unwrap()
            .in_namespace(&ns)
            .unwrap()
    }

    /// A VPN peer registry in 10.118.0.0/24, in a namespace of its own on
    /// the real control plane.
    fn registry_in_a_namespace() -> KubeApiPeerRegistry {
        let (api, ns) = account_in_a_namespace();
        KubeApiPeerRegistry::new(api, "10.118.0.0/24".parse().unwrap())
            .unwrap()
            .in_namespace(&ns)
            .unwrap()
    }

    fn update_request(known: u64) -> GetUpdateRequest {
        GetUpdateRequest {
            resource_version: known,
            own: None,
        }
    }

    #[test]
    fn a_members_own_record_is_registered_only_with_its_disks_proof_and_never_takes_a_name() {
        let registry = registry_in_a_namespace();
        let (mut s, _) = service(PathBuf::from("/nonexistent"), false);
        s.config.registry = Arc::new(registry);
        let other_disk = "9f3c6c1e-2b5d-4e8a-9c7f-1a2b3c4d5e6f";
        let own = |name: &str, key: u8, disk: &str| {
            let disk_key = s
                .config
                .master_secret
                .state_disk_key(&disk.to_ascii_lowercase());
            let pub_key = VpnPublicKey::from_bytes(&[key; 32]).unwrap();
            let record = OwnRecordKey::from_disk_key(disk_key.expose()).record(
                name,
                "192.0.2.1:51820",
                &pub_key,
                disk,
            );
            GetUpdateRequest {
                resource_version: 0,
                own: Some(record),
            }
        };
        // A first control plane registers itself with its poll.
        let first = s.vpn_update(&own("cp-1", 1, UUID)).unwrap();
        assert_eq!(first.resource_version, 1);
        assert_eq!(first.peers[0].vpn_ip, "10.118.0.1");
        // The same record again changes nothing; a new key (a boot that
        // lost the key it joined with) replaces the old one.
        assert_eq!(
            s.vpn_update(&own("cp-1", 1, UUID))
                .unwrap()
                .resource_version,
            1
        );
        let rekeyed = s.vpn_update(&own("cp-1", 2, UUID)).unwrap();
        assert_eq!(rekeyed.resource_version, 2);
        assert_eq!(rekeyed.peers[0].vpn_pub_key, vec![2; 32]);
        assert_eq!(rekeyed.peers[0].vpn_ip, "10.118.0.1");
        // Another disk cannot take the name, even with a valid proof.
        let e = s.vpn_update(&own("cp-1", 3, other_disk)).unwrap_err();
        assert!(
            matches!(&e, IssueError::Vpn(RegistryError::NameTaken { name }) if name == "cp-1"),
            "{e}"
        );
        // A record proven with another disk's key, or spoilt, is refused.
        let mut forged = own("cp-1", 3, other_disk);
        forged.own.as_mut().unwrap().disk_uuid = UUID.into();
        assert!(matches!(
            s.vpn_update(&forged),
            Err(IssueError::OwnRecordUnproven)
        ));
        let mut spoilt = own("cp-1", 2, UUID);
        spoilt
            .own
            .as_mut()
            .unwrap()
            .peer
            .as_mut()
            .unwrap()
            .public_endpoint = "192.0.2.9:51820".into();
        assert!(matches!(
            s.vpn_update(&spoilt),
            Err(IssueError::OwnRecordUnproven)
        ));
        assert_eq!(
            s.vpn_update(&update_request(0)).unwrap().resource_version,
            2
        );
        // The other disk under its own name: a second peer.
        let second = s.vpn_update(&own("worker-1", 3, other_disk)).unwrap();
        assert_eq!(second.peers.len(), 2);
    }

    #[test]
    fn a_nodes_kubelet_csr_is_signed_and_a_bad_one_refused_before_any_token() {
        use confboot_cluster::kubelet_cert::{KubeletCertRequest, check_kubelet_cert};
        let (s, tokens) = service(PathBuf::from("/nonexistent"), false);
        let kubelet = KubeletCertRequest::new("worker-1", &["10.0.2.15".parse().unwrap()]).unwrap();
        let csr = kubelet.csr_der.clone();
        let t = s
            .issue_join_ticket(
                &Caller::Unbootstrapped,
                &IssueJoinTicketRequest {
                    certificate_request: csr.clone(),
                    ..request(UUID, false)
                },
            )
            .unwrap();
        check_kubelet_cert(&t.kubelet_cert, &kubelet).unwrap();
        assert_eq!(*tokens.calls.lock().unwrap(), 1);
        // No CSR, no certificate.
        let t = s
            .issue_join_ticket(&Caller::Unbootstrapped, &request(UUID, false))
            .unwrap();
        assert!(t.kubelet_cert.is_empty());
        // A malformed CSR is the caller's error; nothing is made.
        let mut bad = csr.clone();
        bad[40] ^= 1;
        let e = s
            .issue_join_ticket(
                &Caller::Unbootstrapped,
                &IssueJoinTicketRequest {
                    certificate_request: bad,
                    ..request(UUID, false)
                },
            )
            .unwrap_err();
        assert!(matches!(e, IssueError::InvalidRequest(_)), "{e}");
        assert_eq!(*tokens.calls.lock().unwrap(), 2);
        // Without the CA key, a CSR cannot be served.
        let (mut s, tokens) = service(PathBuf::from("/nonexistent"), false);
        s.config.kubelet_cert_signer = None;
        let e = s
            .issue_join_ticket(
                &Caller::Unbootstrapped,
                &IssueJoinTicketRequest {
                    certificate_request: csr,
                    ..request(UUID, false)
                },
            )
            .unwrap_err();
        assert!(matches!(e, IssueError::KubeletCertUnavailable), "{e}");
        assert_eq!(*tokens.calls.lock().unwrap(), 0);
    }

    /// A disk UUID of the node `name`'s own.
    fn disk_of(name: &str) -> String {
        let d = ring::digest::digest(&ring::digest::SHA256, name.as_bytes());
        format!(
            "00000000-0000-4000-8000-{}",
            &confboot_util::hex::encode(d.as_ref())[..12]
        )
    }

    fn request(uuid: &str, control_plane: bool) -> IssueJoinTicketRequest {
        IssueJoinTicketRequest {
            disk_uuid: uuid.into(),
            is_control_plane: control_plane,
            ..Default::default()
        }
    }

    #[test]
    fn worker_ticket_carries_derived_keys_and_a_token() {
        let (s, tokens) = service(PathBuf::from("/nonexistent"), false);
        let t = s
            .issue_join_ticket(&Caller::Unbootstrapped, &request(UUID, false))
            .unwrap();
        // The same vectors as lib's kms tests (UUID lowercased, as the node's disk reports it).
        assert_eq!(
            confboot_util::hex::encode(t.state_disk_key.expose()),
            "86124f93eb5e9e23523430ecc102bb5a52a7b254ee939b3c0a5ece14b62f36b6"
        );
        assert_eq!(
            confboot_util::hex::encode(t.measurement_secret.expose()),
            "c30c200260ed90ce250e5f3b324fa1b1b91f3a6caaa882fb5a536161fb5c31f2"
        );
        assert_eq!(t.measurement_salt, vec![7; 32]);
        assert_eq!(t.api_server_endpoint, "10.0.0.1:6443");
        assert_eq!(t.kubernetes_version, "v1.31.1");
        assert_eq!(t.token.len(), 23);
        assert!(t.control_plane_files.is_empty());
        assert_eq!(*tokens.calls.lock().unwrap(), 1);
    }

    /// Item 5: only a ticket that adds an entry to the ledger meets the
    /// first-ticket rate. A retried join of a disk whose first boot runs
    /// adds none: served with its class's bucket empty, spending nothing.
    #[test]
    fn only_a_ticket_that_adds_to_the_ledger_meets_the_first_ticket_rate() {
        use crate::ledger::RateLimited;
        let (s, _) = service(PathBuf::from("/nonexistent"), false);
        let asked = Mutex::new(Vec::new());
        let empty_bucket = |entries: u64| {
            asked.lock().unwrap().push(entries);
            match entries {
                0 => Ok(()),
                _ => Err(RateLimited {
                    class: "join/qemu-vtpm".into(),
                }),
            }
        };
        let room = |entries: u64| {
            asked.lock().unwrap().push(entries);
            Ok(())
        };
        let join = request(UUID, false);
        let err = s
            .issue_join_ticket_gated(&Caller::Unbootstrapped, &join, &empty_bucket)
            .unwrap_err();
        assert_eq!(err.reason(), "rate_limited");
        assert_eq!(
            crate::server::issue_status(&err).code,
            confboot_wire::Code::ResourceExhausted
        );
        // Nothing was recorded: the same join with room is a new disk.
        s.issue_join_ticket_gated(&Caller::Unbootstrapped, &join, &room)
            .unwrap();
        // Its retry (the first boot runs) adds nothing: served.
        s.issue_join_ticket_gated(&Caller::Unbootstrapped, &join, &empty_bucket)
            .unwrap();
        // A vTPM rejoin adds nothing either.
        let rejoin = IssueRejoinTicketRequest {
            disk_uuid: UUID.into(),
        };
        s.issue_rejoin_ticket_gated(&Caller::Unbootstrapped, &rejoin, &empty_bucket)
            .unwrap();
        // (A change may be tried more than once: the gate is asked each time.)
        let asked = asked.lock().unwrap();
        assert_eq!(asked[..3], [1, 1, 0], "{asked:?}");
        assert!(
            asked.len() > 3 && asked[3..].iter().all(|&n| n == 0),
            "{asked:?}"
        );
    }

    #[test]
    fn rejoin_ticket_carries_only_keys_and_needs_no_token() {
        let (s, tokens) = service(PathBuf::from("/nonexistent"), true);
        let t = s
            .issue_rejoin_ticket(
                &Caller::Unbootstrapped,
                &IssueRejoinTicketRequest {
                    disk_uuid: UUID.into(),
                },
            )
            .unwrap();
        let j = service(PathBuf::from("/nonexistent"), false)
            .0
            .issue_join_ticket(&Caller::Unbootstrapped, &request(UUID, false))
            .unwrap();
        assert_eq!(t.state_disk_key, j.state_disk_key);
        assert_eq!(t.measurement_secret, j.measurement_secret);
        // The cluster's salt, from joinsvc's configuration: the node never
        // takes it from its disk's header.
        assert_eq!(t.measurement_salt, j.measurement_salt);
        assert_eq!(t.measurement_salt, s.config.measurement_salt.to_vec());
        assert_eq!(*tokens.calls.lock().unwrap(), 0);
    }

    #[test]
    fn a_rejoin_carries_the_last_generation_and_a_rolled_back_disk_is_refused() {
        use confboot_cluster::generation::generation_proof;
        let (s, _) = service(PathBuf::from("/nonexistent"), false);
        let key = s
            .config
            .master_secret
            .state_disk_key(&UUID.to_ascii_lowercase());
        let confirm = |found: u64, written: u64| ConfirmGenerationRequest {
            disk_uuid: UUID.into(),
            found_generation: found,
            written_generation: written,
            proof: generation_proof(key.expose(), UUID, found, written).to_vec(),
        };
        let rejoin = || {
            s.issue_rejoin_ticket(
                &Caller::Unbootstrapped,
                &IssueRejoinTicketRequest {
                    disk_uuid: UUID.into(),
                },
            )
            .unwrap()
            .generation
        };
        // The first rejoin: none recorded.
        assert_eq!(rejoin(), 0);
        s.confirm_generation(&confirm(0, 1)).unwrap();
        assert_eq!(rejoin(), 1);
        s.confirm_generation(&confirm(1, 2)).unwrap();
        assert_eq!(rejoin(), 2);
        // The disk as it was after the first rejoin: refused, whether the
        // node wrote or only reports.
        for (found, written) in [(1, 2), (1, 0)] {
            let e = s.confirm_generation(&confirm(found, written)).unwrap_err();
            assert_eq!(
                e.to_string(),
                "state disk rolled back: generation 1, the cluster last issued 2"
            );
            assert_eq!(e.reason(), "rolled_back");
            assert_eq!(
                crate::server::issue_status(&e).code,
                confboot_wire::Code::PermissionDenied
            );
        }
        // Without the disk key's proof, or with a proof of other values,
        // nothing is recorded.
        let mut forged = confirm(2, 3);
        forged.proof = generation_proof(&[0; 32], UUID, 2, 3).to_vec();
        assert!(matches!(
            s.confirm_generation(&forged),
            Err(IssueError::GenerationUnproven)
        ));
        let mut moved = confirm(2, 3);
        moved.found_generation = 9;
        moved.written_generation = 10;
        assert!(matches!(
            s.confirm_generation(&moved),
            Err(IssueError::GenerationUnproven)
        ));
        let e = s.confirm_generation(&confirm(2, 5)).unwrap_err();
        assert!(matches!(e, IssueError::InvalidRequest(_)), "{e}");
        assert_eq!(rejoin(), 2);
    }

    #[test]
    fn bad_requests_are_refused_before_any_token_is_made() {
        let (s, tokens) = service(PathBuf::from("/nonexistent"), false);
        for bad in [
            request("", false),
            request("../../etc/shadow", false),
            IssueJoinTicketRequest {
                certificate_request: vec![0; MAX_CSR_BYTES + 1],
                ..request(UUID, false)
            },
            IssueJoinTicketRequest {
                host_public_key: vec![0; MAX_HOST_KEY_BYTES + 1],
                ..request(UUID, false)
            },
        ] {
            let e = s
                .issue_join_ticket(&Caller::Unbootstrapped, &bad)
                .unwrap_err();
            // The caller sees INVALID_ARGUMENT (crate::server::issue_status).
            assert!(matches!(e, IssueError::InvalidRequest(_)), "{e}");
        }
        assert!(
            s.issue_rejoin_ticket(
                &Caller::Unbootstrapped,
                &IssueRejoinTicketRequest {
                    disk_uuid: "x".into()
                }
            )
            .is_err()
        );
        assert_eq!(*tokens.calls.lock().unwrap(), 0);
    }

    #[test]
    fn token_failure_is_unavailable_and_gives_no_key() {
        let (s, _) = service(PathBuf::from("/nonexistent"), true);
        let e = s
            .issue_join_ticket(&Caller::Unbootstrapped, &request(UUID, false))
            .unwrap_err();
        // The caller sees UNAVAILABLE (crate::server::issue_status).
        assert!(matches!(e, IssueError::Token(_)), "{e}");
        assert_eq!(e.reason(), "token");
    }

    #[test]
    fn control_plane_join_sends_the_pki_files() {
        let dir = std::env::temp_dir().join(format!("confboot-pki-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("etcd")).unwrap();
        // Missing files: the control plane is not ready.
        let (s, _) = service(dir.clone(), false);
        let e = s
            .issue_join_ticket(&Caller::Unbootstrapped, &request(UUID, true))
            .unwrap_err();
        // The caller sees FAILED_PRECONDITION (crate::server::issue_status).
        assert!(matches!(e, IssueError::ControlPlaneFiles(_)), "{e}");
        for name in CONTROL_PLANE_FILES {
            std::fs::write(dir.join(name), format!("contents of {name}")).unwrap();
        }
        let t = s
            .issue_join_ticket(&Caller::Unbootstrapped, &request(UUID, true))
            .unwrap();
        let names: Vec<&str> = t
            .control_plane_files
            .iter()
            .map(|f| f.name.as_str())
            .collect();
        assert_eq!(names, CONTROL_PLANE_FILES);
        assert_eq!(
            t.control_plane_files[6].data.expose(),
            b"contents of etcd/ca.crt"
        );
        // An oversized file is refused rather than sent.
        std::fs::write(
            dir.join("sa.key"),
            vec![b'x'; MAX_CONTROL_PLANE_FILE_BYTES as usize + 1],
        )
        .unwrap();
        assert_eq!(
            s.issue_join_ticket(&Caller::Unbootstrapped, &request(UUID, true))
                .unwrap_err()
                .reason(),
            "control_plane_files"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn discovery_hash_is_sha256_of_the_ca_spki() {
        let key = rcgen::KeyPair::generate().unwrap();
        let mut params = rcgen::CertificateParams::new(vec![]).unwrap();
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        let ca = params.self_signed(&key).unwrap();
        // The SPKI as rcgen writes it (PEM "PUBLIC KEY"), decoded independently of x509-parser.
        let spki_b64: String = key
            .public_key_pem()
            .lines()
            .filter(|l| !l.starts_with("-----"))
            .collect();
        let spki = confboot_util::base64::decode(&spki_b64).unwrap();
        let want = format!(
            "sha256:{}",
            confboot_util::hex::encode(ring::digest::digest(&ring::digest::SHA256, &spki).as_ref())
        );
        assert_eq!(
            discovery_token_ca_cert_hash(ca.pem().as_bytes()).unwrap(),
            want
        );
        assert_eq!(discovery_token_ca_cert_hash(ca.der()).unwrap(), want);
        assert!(matches!(
            discovery_token_ca_cert_hash(b"not a certificate"),
            Err(CaCertError::Certificate(_))
        ));
    }
}
