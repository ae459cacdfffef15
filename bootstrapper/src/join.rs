//! The JoinClient: finds join services, asks them for a ticket over aTLS
//! (the node attests; joinsvc too when a validator for it is configured),
//! and retries with exponential backoff and jitter until it has a ticket or
//! is told to stop.
//!
//! Every attempt makes a fresh X25519 key pair, offers its public key next
//! to the node's evidence (which binds it), and opens the ticket's sealed
//! secrets with the private key, which never leaves this process and is
//! zeroized with the attempt. A ticket whose secrets are not sealed, or do
//! not open, is thrown away like one from an untrusted service.
//!
//! The metadata server's reply is read as a JSON value, not with a serde
//! derive: it is the cloud's document, with members the node does not know, and
//! a derive would add code to the bootstrapper, within a few KB of its size
//! budget.

use std::sync::Arc;
use std::time::{Duration, Instant};

use confboot_atls as atls;
use confboot_attest::{Issuer, Validator};
use confboot_cluster::role::ControlPlanePublicKey;
use confboot_cluster::ticket::{JoinTicket, RejoinTicket, TicketError};
use confboot_kms::seal::SealingKeyPair;
use confboot_proto::join::{
    ConfirmGenerationRequest, IssueJoinTicketRequest, IssueRejoinTicketRequest,
};
use confboot_util::backoff::Backoff;
use confboot_util::stop::Stop;
use confboot_wire::{Code, Status};

use crate::node::generation::{ConfirmError, GenerationConfirmer};
use crate::node::vpn::VpnJoinFields;
use crate::node::{IssuedTicket, JoinServiceCheck, Ticket, TicketRequest};

/// Largest metadata response read.
const MAX_METADATA_BYTES: usize = 64 * 1024;
/// Most endpoints taken from any source.
const MAX_ENDPOINTS: usize = 64;

/// Longest endpoint accepted: a DNS name (253) plus `:` and a port.
const MAX_ENDPOINT_LEN: usize = 253 + 6;

/// Whether `endpoint` is a plausible `host:port` (a DNS name or IPv4
/// address, or a bracketed IPv6 address, then a port 1..=65535). Endpoints
/// come from the host (kernel command line, metadata server): anything else
/// is dropped before it is used or logged.
pub fn is_endpoint(endpoint: &str) -> bool {
    if endpoint.len() > MAX_ENDPOINT_LEN {
        return false;
    }
    let Some((host, port)) = endpoint.rsplit_once(':') else {
        return false;
    };
    let port_ok = !port.is_empty()
        && port.len() <= 5
        && port.bytes().all(|b| b.is_ascii_digit())
        && matches!(port.parse::<u32>(), Ok(1..=65535));
    let host_ok = match host.strip_prefix('[').and_then(|h| h.strip_suffix(']')) {
        Some(v6) => v6.parse::<std::net::Ipv6Addr>().is_ok(),
        None => {
            !host.is_empty()
                && host
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'-')
        }
    };
    port_ok && host_ok
}

/// Keeps the valid endpoints (at most [`MAX_ENDPOINTS`]); says how many
/// were dropped, never what they were.
fn valid_endpoints<'a>(source: &str, all: impl Iterator<Item = &'a str>) -> Vec<String> {
    let mut dropped = 0usize;
    let kept = all
        .filter(|e| {
            let ok = is_endpoint(e);
            dropped += usize::from(!ok);
            ok
        })
        .take(MAX_ENDPOINTS)
        .map(str::to_string)
        .collect();
    if dropped > 0 {
        log::warn!("join: {dropped} malformed endpoint(s) from {source} ignored");
    }
    kept
}

/// Join endpoints (`host:port`) from the kernel command line:
/// `confboot.join=10.0.0.1:9090,10.0.0.2:9090`.
pub fn endpoints_from_cmdline(cmdline: &str) -> Vec<String> {
    valid_endpoints(
        "the kernel command line",
        cmdline
            .split_whitespace()
            .filter_map(|w| w.strip_prefix("confboot.join="))
            .flat_map(|list| list.split(','))
            .filter(|e| !e.is_empty()),
    )
}

/// Why a metadata server gave no join endpoints (logged; the round goes
/// on with the others).
#[derive(Debug, thiserror::Error)]
pub enum MetadataError {
    /// The URL is unusable or the request failed.
    #[error("metadata {url}: {error}")]
    Get {
        /// The metadata URL.
        url: String,
        /// Why.
        error: confboot_net::http::GetError,
    },
    /// The server answered with another status than 200.
    #[error("metadata {url}: HTTP status {status}")]
    Status {
        /// The metadata URL.
        url: String,
        /// The status.
        status: u16,
    },
    /// The answer is not JSON.
    #[error("metadata {url}: {error}")]
    Json {
        /// The metadata URL.
        url: String,
        /// Why it is not JSON.
        error: serde_json::Error,
    },
    /// The answer has no `joinEndpoints` array.
    #[error("metadata {url}: no \"joinEndpoints\" array")]
    NoEndpoints {
        /// The metadata URL.
        url: String,
    },
}

/// Join endpoints from a metadata HTTP endpoint answering
/// `{"joinEndpoints": ["host:port", ...]}` (bounded size and time).
pub fn endpoints_from_metadata(url: &str, timeout: Duration) -> Result<Vec<String>, MetadataError> {
    use confboot_net::http;
    let failed = |error| MetadataError::Get {
        url: url.to_string(),
        error,
    };
    let (addr, host, target) = http::split_http_url(url).map_err(failed)?;
    let (status, body) = http::get(
        &addr,
        host,
        target,
        "application/json",
        MAX_METADATA_BYTES,
        timeout,
    )
    .map_err(failed)?;
    if status != 200 {
        return Err(MetadataError::Status {
            url: url.to_string(),
            status,
        });
    }
    let v: serde_json::Value =
        serde_json::from_slice(&body).map_err(|error| MetadataError::Json {
            url: url.to_string(),
            error,
        })?;
    let list = v["joinEndpoints"]
        .as_array()
        .ok_or_else(|| MetadataError::NoEndpoints {
            url: url.to_string(),
        })?;
    Ok(valid_endpoints(
        "the metadata server",
        list.iter().map(|e| e.as_str().unwrap_or("")),
    ))
}

/// Where the JoinClient looks for join services, in order.
#[derive(Clone, Debug, Default)]
pub struct EndpointSources {
    /// Given in the configuration.
    pub configured: Vec<String>,
    /// A metadata URL asked on every round.
    pub metadata_url: Option<String>,
}

impl EndpointSources {
    /// Every endpoint known now.
    pub fn resolve(&self) -> Vec<String> {
        let mut all = self.configured.clone();
        if let Some(url) = &self.metadata_url {
            match endpoints_from_metadata(url, Duration::from_secs(5)) {
                Ok(found) => all.extend(found),
                Err(e) => log::warn!("{e}"),
            }
        }
        all.dedup();
        all
    }
}

/// How many rounds over the join services a generation confirmation
/// takes at most before the boot ends (the next boot finds the written
/// generation, which is newer than the cluster's: nothing is lost).
pub const CONFIRM_ROUNDS: usize = 3;

/// The join client confirming generations of the node's cluster: the
/// cluster id is the one the rejoin's ticket and disk header give.
pub struct JoinClientConfirmer {
    /// The join client whose endpoints and checks are used.
    pub client: Arc<JoinClient>,
    /// How the join service is checked.
    pub check: JoinServiceCheck,
}

impl GenerationConfirmer for JoinClientConfirmer {
    fn confirm(
        &self,
        request: &ConfirmGenerationRequest,
        cluster_id: &[u8],
        control_plane_key: &ControlPlanePublicKey,
    ) -> Result<(), ConfirmError> {
        self.client
            .confirm_generation(request, cluster_id, control_plane_key, self.check)
    }
}

/// Why one attempt gave no ticket.
#[derive(Debug)]
pub enum AttemptError {
    /// The join service failed this node's check of its attestation.
    JoinServiceUntrusted(String),
    /// The call failed (refused, unreachable, ...).
    Call(Status),
    /// The ticket's secrets were not sealed to this attempt's key, or did
    /// not open with it.
    Unsealed(TicketError),
}

/// Asks join services for a ticket.
pub struct JoinClient {
    /// Where to look.
    pub sources: EndpointSources,
    /// The node's attestation.
    pub issuer: Arc<dyn Issuer>,
    /// If non-empty, joinsvc must attest to one of these.
    pub joinsvc_validators: Vec<Arc<dyn Validator>>,
    /// Bound on one attempt (connect, handshake and call, all together).
    pub attempt_timeout: Duration,
    /// First retry delay.
    pub initial_backoff: Duration,
    /// Largest retry delay.
    pub max_backoff: Duration,
    /// The kubelet's certificate signing request sent with a join request
    /// (empty: none).
    pub kubelet_csr: Vec<u8>,
    /// What a join request carries for the VPN (`None`: the node is not
    /// in the VPN).
    pub vpn: Option<VpnJoinFields>,
}

impl JoinClient {
    /// One attempt against one endpoint, all of it (connect, handshake,
    /// call) within [`JoinClient::attempt_timeout`], so a service that
    /// stalls anywhere leaves time for the next endpoint.
    pub fn try_endpoint(
        &self,
        endpoint: &str,
        request: &TicketRequest,
    ) -> Result<IssuedTicket, AttemptError> {
        let deadline = Instant::now() + self.attempt_timeout;
        // This attempt's own key: what joinsvc seals the ticket's secrets to.
        let sealing = SealingKeyPair::generate();
        let (mut client, service) = atls::connect_sealing(
            endpoint,
            self.attempt_timeout,
            &self.joinsvc_validators,
            Some(Arc::clone(&self.issuer)),
            Some(sealing.public_key()),
        )
        .map_err(|e| match e {
            atls::AtlsError::Attestation(a) => AttemptError::JoinServiceUntrusted(a.to_string()),
            // A refusal of this node's attestation is PERMISSION_DENIED.
            other => AttemptError::Call(other.status()),
        })?;
        // What the connect left of the attempt.
        let left = deadline.saturating_duration_since(Instant::now());
        let ticket = match request {
            TicketRequest::Join {
                disk_uuid,
                is_control_plane,
            } => {
                let vpn = self.vpn.clone().unwrap_or_default();
                let req = IssueJoinTicketRequest {
                    disk_uuid: disk_uuid.clone(),
                    is_control_plane: *is_control_plane,
                    certificate_request: self.kubelet_csr.clone(),
                    node_name: vpn.node_name,
                    node_vpn_pub_key: vpn.public_key,
                    node_public_endpoint: vpn.public_endpoint,
                    ..Default::default()
                };
                let wire = client
                    .unary(confboot_proto::JOIN, &req, left)
                    .map_err(AttemptError::Call)?;
                let ticket = JoinTicket::open(&wire, &sealing).map_err(AttemptError::Unsealed)?;
                Ok(Ticket::Join(ticket))
            }
            TicketRequest::Rejoin { disk_uuid } => {
                let req = IssueRejoinTicketRequest {
                    disk_uuid: disk_uuid.clone(),
                };
                let wire = client
                    .unary(confboot_proto::REJOIN, &req, left)
                    .map_err(AttemptError::Call)?;
                let ticket = RejoinTicket::open(&wire, &sealing).map_err(AttemptError::Unsealed)?;
                Ok(Ticket::Rejoin(ticket))
            }
        }?;
        Ok(IssuedTicket { ticket, service })
    }

    /// Confirms a rejoined node's state disk generation to a join service
    /// that proves membership of the node's cluster (`cluster_id`, unless
    /// `check` is [`JoinServiceCheck::InsecureNone`]) and that it is a
    /// control plane: its answer carries the signature of the cluster's
    /// role key (`control_plane_key`, from the rejoin ticket) for this
    /// session, whatever `check` says. A service that is no member, or a
    /// member that is no control plane (a compromised worker), could
    /// answer "confirmed" without recording it and leave the cluster with
    /// the old generation; an unsigned answer counts as no answer. Tries
    /// every endpoint for at most [`CONFIRM_ROUNDS`] rounds; a refusal
    /// (PERMISSION_DENIED, INVALID_ARGUMENT) is final.
    pub fn confirm_generation(
        &self,
        request: &ConfirmGenerationRequest,
        cluster_id: &[u8],
        control_plane_key: &ControlPlanePublicKey,
        check: JoinServiceCheck,
    ) -> Result<(), ConfirmError> {
        let mut backoff = Backoff::new(self.initial_backoff, self.max_backoff);
        let mut last = ConfirmError::NoJoinService;
        let unreachable = |endpoint: &str, reason: String| ConfirmError::Unreachable {
            endpoint: endpoint.to_string(),
            reason,
        };
        for round in 0..CONFIRM_ROUNDS {
            if round > 0 {
                std::thread::sleep(backoff.next_delay());
            }
            for endpoint in self.sources.resolve() {
                let deadline = Instant::now() + self.attempt_timeout;
                let (mut client, service) = match atls::connect(
                    endpoint.as_str(),
                    self.attempt_timeout,
                    &self.joinsvc_validators,
                    Some(Arc::clone(&self.issuer)),
                ) {
                    Ok(connected) => connected,
                    // The service refused this node's attestation, as a
                    // PERMISSION_DENIED answer would.
                    Err(e @ atls::AtlsError::Refused(_)) => {
                        return Err(ConfirmError::Refused {
                            endpoint,
                            reason: e.to_string(),
                        });
                    }
                    Err(e) => {
                        last = unreachable(&endpoint, e.to_string());
                        continue;
                    }
                };
                if check == JoinServiceCheck::ClusterMark
                    && let Err(e) =
                        confboot_cluster::ticket::check_member_mark(cluster_id, service.as_ref())
                {
                    last = unreachable(&endpoint, e.to_string());
                    continue;
                }
                let session = match atls::binding::session_binding(&client.get_ref().conn) {
                    Ok(session) => session,
                    Err(e) => {
                        last = unreachable(&endpoint, e.to_string());
                        continue;
                    }
                };
                let left = deadline.saturating_duration_since(Instant::now());
                match client.unary(confboot_proto::CONFIRM_GENERATION, request, left) {
                    Ok(answer) => match control_plane_key.verify_answer(
                        confboot_proto::CONFIRM_GENERATION,
                        &session,
                        request,
                        &answer,
                    ) {
                        Ok(()) => return Ok(()),
                        Err(e) => last = unreachable(&endpoint, e.to_string()),
                    },
                    Err(s) if matches!(s.code, Code::PermissionDenied | Code::InvalidArgument) => {
                        return Err(ConfirmError::Refused {
                            endpoint,
                            reason: s.message,
                        });
                    }
                    Err(s) => last = unreachable(&endpoint, s.to_string()),
                }
            }
        }
        Err(last)
    }

    /// Tries every endpoint, round after round with backoff, until one gives
    /// a ticket (returned) or `stop` is raised (None).
    pub fn run(&self, request: &TicketRequest, stop: &Stop) -> Option<IssuedTicket> {
        let mut backoff = Backoff::new(self.initial_backoff, self.max_backoff);
        let mut round = 0u64;
        while !stop.is_raised() {
            round += 1;
            let endpoints = self.sources.resolve();
            if endpoints.is_empty() {
                log::debug!("join: no join service known yet (round {round})");
            }
            for endpoint in &endpoints {
                if stop.is_raised() {
                    return None;
                }
                match self.try_endpoint(endpoint, request) {
                    Ok(ticket) => {
                        log::info!("join: ticket received from {endpoint}");
                        return Some(ticket);
                    }
                    Err(AttemptError::JoinServiceUntrusted(why)) => {
                        log::warn!("join: not trusting the join service at {endpoint}: {why}")
                    }
                    Err(AttemptError::Unsealed(why)) => {
                        log::warn!("join: ticket from {endpoint} thrown away: {why}")
                    }
                    Err(AttemptError::Call(s)) if s.code == Code::PermissionDenied => {
                        log::warn!("join: {endpoint} refused this node: {}", s.message)
                    }
                    Err(AttemptError::Call(s)) => log::info!("join: {endpoint} not usable: {s}"),
                }
            }
            stop.sleep(backoff.next_delay());
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoints_from_the_kernel_command_line() {
        let cmdline = "quiet console=ttyS0 confboot.join=10.0.2.100:9090,10.0.2.101:9090 panic=-1";
        assert_eq!(
            endpoints_from_cmdline(cmdline),
            vec!["10.0.2.100:9090", "10.0.2.101:9090"]
        );
        assert!(endpoints_from_cmdline("quiet").is_empty());
        assert_eq!(
            endpoints_from_cmdline("confboot.join=a:1 confboot.join=b:2"),
            vec!["a:1", "b:2"]
        );
    }

    #[test]
    fn malformed_endpoints_from_the_host_are_dropped() {
        for good in [
            "10.0.2.100:9090",
            "joinsvc.kube-system:30090",
            "[fd00::1]:9090",
        ] {
            assert!(is_endpoint(good), "{good}");
        }
        let long = format!("{}:9090", "a".repeat(300));
        for bad in [
            "",
            "10.0.0.1",
            "10.0.0.1:",
            "10.0.0.1:0",
            "10.0.0.1:65536",
            ":9090",
            "host:90a",
            "a b:1",
            "x\u{1b}[31m:1",
            "[::1:9090",
            "[zz]:1",
            &long,
        ] {
            assert!(!is_endpoint(bad), "{bad:?}");
        }
        assert_eq!(
            endpoints_from_cmdline("confboot.join=10.0.0.1:9090,\u{1b}[2J:1,x:99999"),
            vec!["10.0.0.1:9090"]
        );
    }

    /// An issuer whose evidence is its extra_data (the test's join service
    /// requires no client attestation, so nobody checks it).
    struct NeverAsked;

    impl Issuer for NeverAsked {
        fn variant(&self) -> confboot_attest::Variant {
            confboot_attest::Variant::QemuVtpm
        }
        fn issue(
            &self,
            extra: &[u8; confboot_attest::EXTRA_DATA_LEN],
        ) -> Result<Vec<u8>, confboot_attest::AttestationError> {
            Ok(extra.to_vec())
        }
    }

    #[test]
    fn one_attempt_ends_at_its_bound_however_long_the_handshake_took() {
        let attempt_timeout = Duration::from_secs(1);
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let endpoint = l.local_addr().unwrap().to_string();
        let (finished, wait) = std::sync::mpsc::channel::<()>();
        // A join service that takes 700 ms of the attempt's second to
        // answer the handshake, and then never answers the call.
        let service = std::thread::spawn(move || {
            let (sock, _) = l.accept().unwrap();
            std::thread::sleep(Duration::from_millis(700));
            let stream = atls::AtlsServer::new(None)
                .unwrap()
                .accept(sock, Duration::from_secs(20));
            let _ = wait.recv();
            drop(stream);
        });
        let client = JoinClient {
            sources: EndpointSources::default(),
            issuer: Arc::new(NeverAsked),
            joinsvc_validators: vec![],
            attempt_timeout,
            initial_backoff: Duration::from_millis(10),
            max_backoff: Duration::from_millis(10),
            kubelet_csr: vec![],
            vpn: None,
        };
        let started = Instant::now();
        let result = client.try_endpoint(
            &endpoint,
            &TicketRequest::Rejoin {
                disk_uuid: "00000000-0000-0000-0000-000000000000".into(),
            },
        );
        let took = started.elapsed();
        // The bound is the attempt's, whatever part of it the handshake took
        // (plus a little slack for the scheduler).
        assert!(
            took < attempt_timeout + Duration::from_millis(500),
            "a {attempt_timeout:?} attempt took {took:?}"
        );
        match result {
            Err(AttemptError::Call(s)) => assert_eq!(s.code, Code::DeadlineExceeded, "{s}"),
            Err(other) => panic!("{other:?}"),
            Ok(_) => panic!("a ticket from a service that does not answer"),
        }
        finished.send(()).unwrap();
        service.join().unwrap();
    }

    /// Takes the evidence [`NeverAsked`] makes: its extra_data, for the
    /// session it was made on.
    struct EchoValidator;

    impl Validator for EchoValidator {
        fn variant(&self) -> confboot_attest::Variant {
            confboot_attest::Variant::QemuVtpm
        }
        fn validate(
            &self,
            evidence: &[u8],
            extra: &[u8; confboot_attest::EXTRA_DATA_LEN],
        ) -> Result<confboot_attest::Attested, confboot_attest::AttestationError> {
            if evidence != extra {
                return Err(confboot_attest::AttestationError::Binding(
                    confboot_attest::Detail::with(
                        &confboot_vtpm::VtpmRefusal::Binding,
                        "another session",
                    ),
                ));
            }
            Ok(confboot_attest::Attested {
                set_verdict: None,
                warnings: Vec::new(),
                variant: confboot_attest::Variant::QemuVtpm,
                measurements: Default::default(),
            })
        }
    }

    /// A join service that answers a rejoin ticket with its secrets in the
    /// clear, sealed to a key of its own, or sealed to the key the node
    /// offered: the node keeps only the last.
    #[test]
    fn a_ticket_not_sealed_to_this_attempts_key_is_thrown_away() {
        use confboot_atls::{AtlsServer, AttestedPeer};
        use confboot_cluster::ticket::RejoinTicket;
        use confboot_kms::SecretBytes;
        use confboot_proto::join::IssueRejoinTicketResponse;
        use std::sync::atomic::{AtomicU8, Ordering};

        const CLEAR: u8 = 0;
        const OTHER_KEY: u8 = 1;
        const NODE_KEY: u8 = 2;
        let mode = Arc::new(AtomicU8::new(CLEAR));
        let served = Arc::clone(&mode);
        let router = confboot_wire::Router::<AttestedPeer>::new().unary(
            confboot_proto::REJOIN,
            move |ctx, _| {
                let to = match served.load(Ordering::SeqCst) {
                    CLEAR => {
                        return Ok(IssueRejoinTicketResponse {
                            state_disk_key: vec![3; 32],
                            measurement_secret: vec![1; 32],
                            generation: 0,
                            measurement_salt: vec![2; 32],
                            sealed_secrets: Vec::new(),
                        });
                    }
                    OTHER_KEY => SealingKeyPair::generate().public_key(),
                    _ => ctx.peer().sealing_key().expect("the node offered a key").0,
                };
                let ticket = RejoinTicket {
                    state_disk_key: SecretBytes::new(vec![3; 32]),
                    measurement_secret: SecretBytes::new(vec![1; 32]),
                    generation: 0,
                    measurement_salt: vec![2; 32],
                    control_plane_key: vec![4; 32],
                };
                ticket
                    .seal(&to)
                    .map_err(|e| Status::internal(e.to_string()))
            },
        );
        let server = atls::serve(
            std::net::TcpListener::bind("127.0.0.1:0").unwrap(),
            confboot_net::PoolConfig::default(),
            confboot_wire::ServerLimits::default(),
            router,
            AtlsServer::requiring_clients(
                None,
                vec![Arc::new(EchoValidator) as Arc<dyn Validator>],
            )
            .unwrap(),
        )
        .unwrap();
        let client = JoinClient {
            sources: EndpointSources::default(),
            issuer: Arc::new(NeverAsked),
            joinsvc_validators: vec![],
            attempt_timeout: Duration::from_secs(20),
            initial_backoff: Duration::from_millis(10),
            max_backoff: Duration::from_millis(10),
            kubelet_csr: vec![],
            vpn: None,
        };
        let endpoint = server.local_addr().to_string();
        let rejoin = TicketRequest::Rejoin {
            disk_uuid: "00000000-0000-0000-0000-000000000000".into(),
        };
        match client.try_endpoint(&endpoint, &rejoin) {
            Err(AttemptError::Unsealed(TicketError::NotSealed(why))) => {
                assert_eq!(why, "secrets sent in the clear")
            }
            Err(other) => panic!("{other:?}"),
            Ok(_) => panic!("a ticket in the clear was taken"),
        }
        mode.store(OTHER_KEY, Ordering::SeqCst);
        match client.try_endpoint(&endpoint, &rejoin) {
            Err(AttemptError::Unsealed(TicketError::Sealed(_))) => {}
            Err(other) => panic!("{other:?}"),
            Ok(_) => panic!("a ticket sealed to another key was taken"),
        }
        mode.store(NODE_KEY, Ordering::SeqCst);
        match client.try_endpoint(&endpoint, &rejoin) {
            Ok(IssuedTicket {
                ticket: Ticket::Rejoin(t),
                ..
            }) => {
                assert_eq!(t.state_disk_key.expose(), vec![3; 32]);
                assert_eq!(t.measurement_secret.expose(), vec![1; 32]);
            }
            Ok(_) => panic!("a join ticket for a rejoin"),
            Err(e) => panic!("{e:?}"),
        }
        server.stop();
    }

    /// G3: a join service that is a member but no control plane answers
    /// `ConfirmGeneration` without the role key (unsigned, or signed with
    /// a key of its own), or replays a control plane's signed answer from
    /// another session: the confirmation is not taken. The control plane's
    /// own answer, signed for the session, is.
    #[test]
    fn a_confirmation_not_signed_by_the_role_key_for_this_session_is_not_taken() {
        use confboot_atls::{AtlsServer, AttestedPeer};
        use confboot_cluster::role::ControlPlaneKey;
        use confboot_kms::MasterSecret;
        use confboot_proto::join::ConfirmGenerationResponse;
        use std::sync::Mutex;

        #[derive(Clone, Copy, PartialEq)]
        enum Mode {
            Unsigned,
            OtherKey,
            Replay,
            Genuine,
        }
        let key =
            |b: u8| ControlPlaneKey::derive(&MasterSecret::new(vec![b; 32], vec![b; 32]).unwrap());
        let role = Arc::new(key(1));
        let mode = Arc::new(Mutex::new(Mode::Genuine));
        let recorded = Arc::new(Mutex::new(None::<ConfirmGenerationResponse>));
        let (served, role_served, seen) =
            (Arc::clone(&mode), Arc::clone(&role), Arc::clone(&recorded));
        let router = confboot_wire::Router::<AttestedPeer>::new().unary(
            confboot_proto::CONFIRM_GENERATION,
            move |ctx, req: ConfirmGenerationRequest| {
                let session = ctx.peer().session_binding();
                let mut answer = ConfirmGenerationResponse::default();
                match *served.lock().unwrap() {
                    Mode::Unsigned => {}
                    Mode::OtherKey => key(2).sign_answer(
                        confboot_proto::CONFIRM_GENERATION,
                        session,
                        &req,
                        &mut answer,
                    ),
                    Mode::Replay => {
                        return Ok(seen.lock().unwrap().clone().expect("a recorded answer"));
                    }
                    Mode::Genuine => {
                        role_served.sign_answer(
                            confboot_proto::CONFIRM_GENERATION,
                            session,
                            &req,
                            &mut answer,
                        );
                        *seen.lock().unwrap() = Some(answer.clone());
                    }
                }
                Ok(answer)
            },
        );
        let server = atls::serve(
            std::net::TcpListener::bind("127.0.0.1:0").unwrap(),
            confboot_net::PoolConfig::default(),
            confboot_wire::ServerLimits::default(),
            router,
            AtlsServer::requiring_clients(
                None,
                vec![Arc::new(EchoValidator) as Arc<dyn Validator>],
            )
            .unwrap(),
        )
        .unwrap();
        let client = JoinClient {
            sources: EndpointSources {
                configured: vec![server.local_addr().to_string()],
                metadata_url: None,
            },
            issuer: Arc::new(NeverAsked),
            joinsvc_validators: vec![],
            attempt_timeout: Duration::from_secs(20),
            initial_backoff: Duration::from_millis(10),
            max_backoff: Duration::from_millis(10),
            kubelet_csr: vec![],
            vpn: None,
        };
        let request = crate::node::generation::confirmation(
            &[3; 32],
            "00000000-0000-0000-0000-000000000000",
            4,
            5,
        );
        let confirm = || {
            client.confirm_generation(
                &request,
                &[9; 32],
                &role.public_key(),
                JoinServiceCheck::InsecureNone,
            )
        };
        assert_eq!(confirm(), Ok(()));
        for (m, why) in [
            (Mode::Unsigned, "is not signed by a control plane"),
            (
                Mode::OtherKey,
                "is not signed by a control plane for this session",
            ),
            (
                Mode::Replay,
                "is not signed by a control plane for this session",
            ),
        ] {
            *mode.lock().unwrap() = m;
            match confirm() {
                Err(ConfirmError::Unreachable { reason, .. }) => {
                    assert!(reason.ends_with(why), "{reason}")
                }
                other => panic!("{other:?}"),
            }
        }
        server.stop();
    }

    #[test]
    fn endpoints_from_a_metadata_server() {
        let server = tiny_http::Server::http("127.0.0.1:0").unwrap();
        let url = format!(
            "http://{}/confboot/v1",
            server.server_addr().to_ip().unwrap()
        );
        let t = std::thread::spawn(move || {
            for body in [
                r#"{"joinEndpoints": ["10.0.0.1:9090", "10.0.0.2:9090"]}"#,
                r#"{"other": 1}"#,
            ] {
                let req = server.recv().unwrap();
                assert_eq!(req.url(), "/confboot/v1");
                req.respond(tiny_http::Response::from_string(body)).unwrap();
            }
        });
        assert_eq!(
            endpoints_from_metadata(&url, Duration::from_secs(10)).unwrap(),
            vec!["10.0.0.1:9090", "10.0.0.2:9090"]
        );
        let e = endpoints_from_metadata(&url, Duration::from_secs(10)).unwrap_err();
        assert!(matches!(e, MetadataError::NoEndpoints { .. }), "{e:?}");
        assert!(e.to_string().contains("joinEndpoints"), "{e}");
        t.join().unwrap();
    }
}
