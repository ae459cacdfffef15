//! aTLS end to end on loopback: attestation in each direction and both,
//! and each reason a handshake is refused, asserted by its typed error.
//!
//! Every node is a real swtpm with the vTPM issuer; validators are vTPM
//! validators pinning the node's attestation key.
//!
//! Peers that misbehave (an attestation replayed from another connection,
//! relayed from another session, reflected back to its sender, a sealing
//! key swapped, a message missing or malformed) are built here with rustls
//! directly and the crate's message and binding pieces.

use std::collections::BTreeMap;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

use confboot_atls::binding::{self, Role};
use confboot_atls::message::{self, AttestationMessage};
use confboot_atls::{self as atls, AtlsClient, AtlsError, AtlsServer, AttestedPeer, ClientPeer};
use confboot_attest::{
    AttestationError, Attested, Detail, Issuer, MeasurementPolicy, SwappableValidator, Validator,
    Variant,
};
use confboot_net::{PoolConfig, ServerHandle};
use confboot_proto::Method;
use confboot_proto::health::{HealthCheckRequest, HealthCheckResponse};
use confboot_proto::join::{IssueRejoinTicketRequest, IssueRejoinTicketResponse};
use confboot_tests::relay;
use confboot_tests::tls::AnyServer;
use confboot_wire::{Router, ServerLimits};

use fixture::Node;

const T: Duration = Duration::from_secs(20);
const CHECK: Method<HealthCheckRequest, HealthCheckResponse> = confboot_proto::HEALTH_CHECK;
const WHO: Method<IssueRejoinTicketRequest, IssueRejoinTicketResponse> =
    Method::new("/test.Peer/Who");

fn v(x: Arc<dyn Validator>) -> Vec<Arc<dyn Validator>> {
    vec![x]
}

/// What the tests read of a server's peer, for either kind of server: the
/// caller's attestation, or none (a server whose clients do not attest).
trait Seen: ClientPeer {
    fn seen(&self) -> Option<&Attested>;
}

impl Seen for () {
    fn seen(&self) -> Option<&Attested> {
        None
    }
}

impl Seen for AttestedPeer {
    fn seen(&self) -> Option<&Attested> {
        Some(self.attested())
    }
}

/// A router with a health check and `WHO`, which answers with the caller's
/// attested PCR `fixture::PCR` (empty when the caller did not attest); both
/// count their calls.
fn router<P: Seen>(calls: Arc<AtomicUsize>) -> Router<P> {
    let c2 = Arc::clone(&calls);
    Router::<P>::new()
        .unary(CHECK, move |_, _: HealthCheckRequest| {
            calls.fetch_add(1, Ordering::SeqCst);
            Ok(HealthCheckResponse { status: 1 })
        })
        .unary(WHO, move |ctx, _: IssueRejoinTicketRequest| {
            c2.fetch_add(1, Ordering::SeqCst);
            let pcr = ctx
                .peer()
                .seen()
                .and_then(|p| p.measurements.get(&fixture::PCR).cloned())
                .unwrap_or_default();
            Ok(IssueRejoinTicketResponse {
                state_disk_key: pcr,
                measurement_secret: Vec::new(),
                generation: 0,
                measurement_salt: vec![],
                sealed_secrets: Vec::new(),
            })
        })
}

fn listener() -> TcpListener {
    TcpListener::bind("127.0.0.1:0").unwrap()
}

/// [`router`] served over aTLS on a fresh loopback port with default limits:
/// attesting with `issuer` when there is one, and requiring callers to attest
/// to `validators` when there are any.
fn serve(
    calls: Arc<AtomicUsize>,
    issuer: Option<Arc<dyn Issuer>>,
    validators: &[Arc<dyn Validator>],
) -> ServerHandle {
    if validators.is_empty() {
        atls::serve(
            listener(),
            PoolConfig::default(),
            ServerLimits::default(),
            router::<()>(calls),
            AtlsServer::new(issuer).unwrap(),
        )
    } else {
        atls::serve(
            listener(),
            PoolConfig::default(),
            ServerLimits::default(),
            router::<AttestedPeer>(calls),
            AtlsServer::requiring_clients(issuer, validators.to_vec()).unwrap(),
        )
    }
    .unwrap()
}

fn health(client: &mut atls::AtlsRpcClient) -> Result<i32, confboot_wire::Status> {
    client
        .unary::<_, HealthCheckResponse>(CHECK, &HealthCheckRequest::default(), T)
        .map(|r| r.status)
}

// ---------------------------------------------------------------- success

#[test]
fn server_attests_and_a_call_goes_through() {
    let server_node = Node::new();
    let calls = Arc::new(AtomicUsize::new(0));
    let server = serve(Arc::clone(&calls), Some(server_node.issuer()), &[]);
    let (mut client, attested) = atls::connect(
        server.local_addr(),
        T,
        &v(server_node.validator(server_node.good_policy())),
        None,
    )
    .unwrap();
    let attested = attested.expect("server attestation is reported");
    assert_eq!(attested.variant, server_node.variant());
    assert_eq!(
        attested.measurements.get(&fixture::PCR),
        server_node.measurements().get(&fixture::PCR)
    );
    assert_eq!(health(&mut client).unwrap(), 1);
    // ECDHE on P-256, half the CPU of X25519 with ring (atls::provider).
    assert_eq!(
        client
            .get_ref()
            .conn
            .negotiated_key_exchange_group()
            .map(|g| g.name()),
        Some(rustls::NamedGroup::secp256r1)
    );
    // The caller did not attest: the handler sees no peer.
    let who: IssueRejoinTicketResponse = client
        .unary(WHO, &IssueRejoinTicketRequest::default(), T)
        .unwrap();
    assert!(who.state_disk_key.is_empty());
    assert_eq!(calls.load(Ordering::SeqCst), 2);
    server.stop();
}

#[test]
fn client_attests_and_the_handler_sees_who_called() {
    let joining = Node::new();
    let server = serve(
        Arc::new(AtomicUsize::new(0)),
        None,
        &v(joining.validator(joining.good_policy())),
    );
    let (mut client, attested) =
        atls::connect(server.local_addr(), T, &[], Some(joining.issuer())).unwrap();
    assert!(attested.is_none(), "server attestation was not asked for");
    let who: IssueRejoinTicketResponse = client
        .unary(WHO, &IssueRejoinTicketRequest::default(), T)
        .unwrap();
    assert_eq!(
        Some(&who.state_disk_key),
        joining.measurements().get(&fixture::PCR)
    );
    server.stop();
}

#[test]
fn mutual_attestation_on_one_connection() {
    let server_node = Node::new();
    let joining = Node::new();
    let server = serve(
        Arc::new(AtomicUsize::new(0)),
        Some(server_node.issuer()),
        &v(joining.validator(joining.good_policy())),
    );
    let (mut client, attested) = atls::connect(
        server.local_addr(),
        T,
        &v(server_node.validator(server_node.good_policy())),
        Some(joining.issuer()),
    )
    .unwrap();
    assert_eq!(
        attested.unwrap().measurements.get(&fixture::PCR),
        server_node.measurements().get(&fixture::PCR)
    );
    let who: IssueRejoinTicketResponse = client
        .unary(WHO, &IssueRejoinTicketRequest::default(), T)
        .unwrap();
    assert_eq!(
        Some(&who.state_disk_key),
        joining.measurements().get(&fixture::PCR)
    );
    // Several calls on the one connection.
    assert_eq!(health(&mut client).unwrap(), 1);
    assert_eq!(health(&mut client).unwrap(), 1);
    server.stop();
}

#[test]
fn a_validator_is_picked_by_the_variant_of_the_evidence() {
    let server_node = Node::new();
    let server = serve(
        Arc::new(AtomicUsize::new(0)),
        Some(server_node.issuer()),
        &[],
    );
    // A validator of another variant comes first and must not be used.
    let validators = vec![
        Arc::new(Refuses(Variant::SevSnp)) as Arc<dyn Validator>,
        server_node.validator(server_node.good_policy()),
    ];
    let (_client, attested) = atls::connect(server.local_addr(), T, &validators, None).unwrap();
    assert_eq!(attested.unwrap().variant, server_node.variant());
    server.stop();
}

/// Refuses everything; stands for a validator of another variant.
struct Refuses(Variant);

/// The reason [`Refuses`] gives.
#[derive(PartialEq)]
struct RefusesAll;

impl Validator for Refuses {
    fn variant(&self) -> Variant {
        self.0
    }
    fn validate(&self, _: &[u8], _: &[u8; 32]) -> Result<Attested, AttestationError> {
        Err(AttestationError::Policy(Detail::with(
            &RefusesAll,
            "this validator refuses",
        )))
    }
}

// -------------------------------------------- the server's attestation is refused

/// A server that speaks aTLS' handshake and then answers the client's
/// message with `answer(session)`; it serves `n` connections and ends.
fn evil_server<F>(n: usize, answer: F) -> (SocketAddr, JoinHandle<()>)
where
    F: Fn(&relay::ToClient) -> AttestationMessage + Send + 'static,
{
    let l = listener();
    let addr = l.local_addr().unwrap();
    let h = std::thread::spawn(move || {
        for _ in 0..n {
            let (sock, _) = l.accept().unwrap();
            let mut s = relay::tls_server(sock).unwrap();
            let _ = message::read(&mut s);
            let m = answer(&s);
            let _ = message::write(&mut s, &m);
            // Wait for the client to hang up.
            let _ = std::io::Read::read(&mut s, &mut [0u8; 1]);
        }
    });
    (addr, h)
}

/// What a client requiring `node`'s good policy makes of one connection to
/// an [`evil_server`] answering `answer(session)`.
fn client_of<F>(node: &Node, answer: F) -> Result<Option<Attested>, AtlsError>
where
    F: Fn(&relay::ToClient) -> AttestationMessage + Send + 'static,
{
    let (addr, h) = evil_server(1, answer);
    let r = AtlsClient::new(v(node.validator(node.good_policy())), None)
        .connect(TcpStream::connect(addr).unwrap(), T)
        .map(|c| c.peer);
    h.join().unwrap();
    r
}

/// `issuer`'s evidence over `extra`, as a message.
fn evidence(issuer: &dyn Issuer, extra: &[u8; 32], key: Option<[u8; 32]>) -> AttestationMessage {
    AttestationMessage {
        evidence: Some((issuer.variant(), issuer.issue(extra).unwrap())),
        sealing_key: key,
        reference_values: None,
    }
}

#[test]
fn a_server_attesting_for_its_own_session_is_accepted() {
    // The control for the refusals below: the same construction, nothing
    // wrong, passes; so each refusal is due to the one thing changed.
    let node = Node::new();
    let issuer = node.issuer();
    let peer = client_of(&node, move |s| {
        let extra = binding::extra_data(&s.conn, Role::Server, None).unwrap();
        evidence(issuer.as_ref(), &extra, None)
    });
    assert_eq!(peer.unwrap().unwrap().variant, node.variant());
}

#[test]
fn an_unverified_connection_gives_the_servers_message_and_the_value_it_must_carry() {
    // connect_unverified leaves the check to its caller (confboot verify):
    // what it returns must be exactly what the server sent, and the value
    // this session binds for the server's role and the key it offers.
    let node = Node::new();
    let issuer = node.issuer();
    let key = [0x42; 32];
    let (addr, h) = evil_server(2, move |s| {
        let extra = binding::extra_data(&s.conn, Role::Server, Some(&key)).unwrap();
        evidence(issuer.as_ref(), &extra, Some(key))
    });
    let client = AtlsClient::new(Vec::new(), None);
    let got = client
        .connect_unverified(TcpStream::connect(addr).unwrap(), T)
        .unwrap();
    assert_eq!(got.server_message.sealing_key, Some(key));
    let (variant, ev) = got.server_message.evidence.clone().unwrap();
    assert_eq!(variant, node.variant());
    let validator = node.validator(node.good_policy());
    assert!(validator.validate(&ev, &got.expected_extra_data).is_ok());
    drop(got);
    // Another session's value refuses the same evidence.
    let other = client
        .connect_unverified(TcpStream::connect(addr).unwrap(), T)
        .unwrap();
    assert_ne!(other.expected_extra_data, [0u8; 32]);
    assert!(matches!(
        validator.validate(&ev, &other.expected_extra_data),
        Err(AttestationError::Binding(_))
    ));
    drop(other);
    h.join().unwrap();
}

#[test]
fn a_server_attestation_replayed_from_another_connection_is_refused() {
    let node = Node::new();
    let issuer = node.issuer();
    let recorded = std::sync::Mutex::new(None::<AttestationMessage>);
    let (addr, h) = evil_server(2, move |s| {
        let extra = binding::extra_data(&s.conn, Role::Server, None).unwrap();
        recorded
            .lock()
            .unwrap()
            .get_or_insert_with(|| evidence(issuer.as_ref(), &extra, None))
            .clone()
    });
    let client = AtlsClient::new(v(node.validator(node.good_policy())), None);
    let first = client.connect(TcpStream::connect(addr).unwrap(), T);
    assert!(first.is_ok(), "the first connection is genuine");
    drop(first);
    let err = client
        .connect(TcpStream::connect(addr).unwrap(), T)
        .err()
        .unwrap();
    assert!(
        matches!(err, AtlsError::Attestation(AttestationError::Binding(_))),
        "{err:?}"
    );
    h.join().unwrap();
}

#[test]
fn a_client_attestation_reflected_back_as_the_servers_is_refused() {
    // Both ends derive the same exporter; the role in its context tells
    // the client's evidence from the server's.
    let node = Node::new();
    let issuer = node.issuer();
    let err = client_of(&node, move |s| {
        let extra = binding::extra_data(&s.conn, Role::Client, None).unwrap();
        evidence(issuer.as_ref(), &extra, None)
    })
    .unwrap_err();
    assert!(
        matches!(err, AtlsError::Attestation(AttestationError::Binding(_))),
        "{err:?}"
    );
}

#[test]
fn a_sealing_key_the_evidence_does_not_bind_is_refused() {
    let node = Node::new();
    let issuer = node.issuer();
    let err = client_of(&node, move |s| {
        // Evidence for the session without a key, a key put next to it.
        let extra = binding::extra_data(&s.conn, Role::Server, None).unwrap();
        evidence(issuer.as_ref(), &extra, Some([0x42; 32]))
    })
    .unwrap_err();
    assert!(
        matches!(err, AtlsError::Attestation(AttestationError::Binding(_))),
        "{err:?}"
    );
}

#[test]
fn an_unattested_server_is_refused_by_a_client_that_requires_attestation() {
    let node = Node::new();
    let err = client_of(&node, |_| AttestationMessage::none()).unwrap_err();
    assert_eq!(err, AtlsError::MissingEvidence);
    // aTLS' own server without an issuer: the same.
    let server = serve(Arc::new(AtomicUsize::new(0)), None, &[]);
    let err = atls::connect(
        server.local_addr(),
        T,
        &v(node.validator(node.good_policy())),
        None,
    )
    .err()
    .unwrap();
    assert_eq!(err, AtlsError::MissingEvidence);
    server.stop();
}

#[test]
fn evidence_of_a_variant_not_accepted_is_refused() {
    let node = Node::new();
    let issuer = node.issuer();
    let (addr, h) = evil_server(1, move |s| {
        let extra = binding::extra_data(&s.conn, Role::Server, None).unwrap();
        evidence(issuer.as_ref(), &extra, None)
    });
    let err = AtlsClient::new(vec![Arc::new(Refuses(Variant::SevSnp))], None)
        .connect(TcpStream::connect(addr).unwrap(), T)
        .err()
        .unwrap();
    assert_eq!(
        err,
        AtlsError::VariantNotAccepted {
            variant: Variant::QemuVtpm,
            accepted: vec![Variant::SevSnp],
        }
    );
    h.join().unwrap();
}

#[test]
fn a_server_with_the_wrong_pcr_is_refused_by_policy() {
    let node = Node::new();
    let server = serve(Arc::new(AtomicUsize::new(0)), Some(node.issuer()), &[]);
    let err = atls::connect(
        server.local_addr(),
        T,
        &v(node.validator(node.wrong_policy())),
        None,
    )
    .err()
    .unwrap();
    match err {
        AtlsError::Attestation(AttestationError::Measurement { index, .. }) => {
            assert_eq!(index, fixture::PCR)
        }
        other => panic!("{other:?}"),
    }
    server.stop();
}

// -------------------------------------------- the client's attestation is refused

/// Runs `AtlsServer::accept` for one connection in a thread.
fn accept_one<P: Seen>(
    server: AtlsServer<P>,
) -> (SocketAddr, JoinHandle<Result<Option<Attested>, AtlsError>>) {
    let l = listener();
    let addr = l.local_addr().unwrap();
    let h = std::thread::spawn(move || {
        let (sock, _) = l.accept().unwrap();
        server.accept(sock, T).map(|a| a.peer.seen().cloned())
    });
    (addr, h)
}

#[test]
fn a_joining_node_with_the_wrong_pcr_is_refused_by_policy() {
    let joining = Node::new();
    let server =
        AtlsServer::requiring_clients(None, v(joining.validator(joining.wrong_policy()))).unwrap();
    let (addr, h) = accept_one(server);
    let sock = TcpStream::connect(addr).unwrap();
    let connected = AtlsClient::new(vec![], Some(joining.issuer())).connect(sock, T);
    match h.join().unwrap() {
        Err(AtlsError::Attestation(AttestationError::Measurement { index, .. })) => {
            assert_eq!(index, fixture::PCR)
        }
        other => panic!("{other:?}"),
    }
    // And the client learns of it before anything else.
    assert!(matches!(connected, Err(AtlsError::Refused(_))));
}

#[test]
fn a_joining_node_passing_policy_is_reported_to_the_server() {
    let joining = Node::new();
    let server =
        AtlsServer::requiring_clients(None, v(joining.validator(joining.good_policy()))).unwrap();
    let (addr, h) = accept_one(server);
    let sock = TcpStream::connect(addr).unwrap();
    let _c = AtlsClient::new(vec![], Some(joining.issuer()))
        .connect(sock, T)
        .unwrap();
    let peer = h.join().unwrap().unwrap().unwrap();
    assert_eq!(&peer.measurements, joining.measurements());
}

/// One connection to `addr` on the attacker's own client session: sends
/// `make(session)`, returns what the server answered.
fn evil_client(
    addr: SocketAddr,
    make: impl FnOnce(&relay::ToServer) -> AttestationMessage,
) -> Result<AttestationMessage, AtlsError> {
    let mut s = relay::tls_client(TcpStream::connect(addr).unwrap()).unwrap();
    let m = make(&s);
    message::write(&mut s, &m)?;
    message::read(&mut s)
}

#[test]
fn a_client_attestation_replayed_from_another_connection_is_refused() {
    let joining = Node::new();
    let validators = v(joining.validator(joining.good_policy()));
    let mut recorded = None;
    for round in 0..2 {
        let server = AtlsServer::requiring_clients(None, validators.clone()).unwrap();
        let (addr, h) = accept_one(server);
        let answer = evil_client(addr, |s| {
            recorded
                .get_or_insert_with(|| {
                    relay::own_attestation(s, joining.issuer().as_ref()).unwrap()
                })
                .clone()
        });
        let verdict = h.join().unwrap();
        if round == 0 {
            verdict.expect("the first connection is genuine");
            answer.expect("and answered");
        } else {
            let err = verdict.unwrap_err();
            assert!(
                matches!(err, AtlsError::Attestation(AttestationError::Binding(_))),
                "{err:?}"
            );
            assert!(matches!(answer, Err(AtlsError::Refused(_))), "{answer:?}");
        }
    }
}

#[test]
fn a_genuine_clients_attestation_relayed_to_the_server_is_refused() {
    // The relay terminates the genuine node's TLS and opens its own
    // session with the server: the node's evidence carries the exporter of
    // its session with the relay, not of the relay's with the server.
    let joining = Node::new();
    let server =
        AtlsServer::requiring_clients(None, v(joining.validator(joining.good_policy()))).unwrap();
    let (target, h) = accept_one(server);
    let relay_listener = listener();
    let at = relay_listener.local_addr().unwrap();
    let issuer = joining.issuer();
    let node = std::thread::spawn(move || {
        AtlsClient::new(vec![], Some(issuer))
            .connect(TcpStream::connect(at).unwrap(), T)
            .map(|c| c.peer)
    });
    let relayed = relay::relay_one(&relay_listener, target, |_, m| m).unwrap();
    assert!(relayed.from_client.unwrap().evidence.is_some());
    assert!(matches!(relayed.from_target, Err(AtlsError::Refused(_))));
    let err = h.join().unwrap().unwrap_err();
    assert!(
        matches!(err, AtlsError::Attestation(AttestationError::Binding(_))),
        "{err:?}"
    );
    assert!(matches!(node.join().unwrap(), Err(AtlsError::Refused(_))));
}

#[test]
fn a_client_message_that_does_not_attest_is_refused() {
    let joining = Node::new();
    let server =
        AtlsServer::requiring_clients(None, v(joining.validator(joining.good_policy()))).unwrap();
    let (addr, h) = accept_one(server);
    let answer = evil_client(addr, |_| AttestationMessage::none());
    assert_eq!(h.join().unwrap().unwrap_err(), AtlsError::MissingEvidence);
    assert!(matches!(answer, Err(AtlsError::Refused(_))));
}

#[test]
fn a_plain_tls_client_cannot_call_a_server_that_requires_client_attestation() {
    let joining = Node::new();
    let calls = Arc::new(AtomicUsize::new(0));
    let server = serve(
        Arc::clone(&calls),
        None,
        &v(joining.validator(joining.good_policy())),
    );

    // A plain rustls client that sends a call instead of an attestation.
    let stream = relay::tls_client(TcpStream::connect(server.local_addr()).unwrap()).unwrap();
    let mut client = confboot_wire::Client::new(stream);
    let err = client
        .unary::<_, HealthCheckResponse>(CHECK, &HealthCheckRequest::default(), T)
        .unwrap_err();
    assert_eq!(err.code, confboot_wire::Code::PermissionDenied, "{err:?}");

    // aTLS' own client without an issuer: refused before any call.
    let err = atls::connect(server.local_addr(), T, &[], None)
        .err()
        .unwrap();
    assert!(matches!(err, AtlsError::Refused(_)), "{err:?}");
    assert_eq!(err.status().code, confboot_wire::Code::PermissionDenied);

    // An attested client gets through: the refusals above were about attestation.
    let (mut client, _) =
        atls::connect(server.local_addr(), T, &[], Some(joining.issuer())).unwrap();
    assert_eq!(health(&mut client).unwrap(), 1);
    assert_eq!(
        calls.load(Ordering::SeqCst),
        1,
        "only the attested call ran"
    );
    server.stop();
}

// -------------------------------------------------------------- policy swap

#[test]
fn a_policy_swap_takes_effect_at_the_next_connection() {
    let server_node = Node::new();
    let joining = Node::new();
    // The server's policy for joining nodes, swapped at run time.
    let join_policy = SwappableValidator::new(joining.validator(joining.good_policy()));
    // The client's policy for the server, likewise.
    let server_policy = SwappableValidator::new(server_node.validator(server_node.good_policy()));
    let server = serve(
        Arc::new(AtomicUsize::new(0)),
        Some(server_node.issuer()),
        &v(Arc::new(join_policy.clone())),
    );
    let client_validators = v(Arc::new(server_policy.clone()));
    let connect = || {
        atls::connect(
            server.local_addr(),
            T,
            &client_validators,
            Some(joining.issuer()),
        )
    };

    let (mut before, _) = connect().unwrap();
    assert_eq!(health(&mut before).unwrap(), 1);

    // The server's policy changes: the next joining connection is refused,
    // while the connection established before keeps working.
    join_policy.swap(joining.validator(joining.wrong_policy()));
    // The client learns of it before any call.
    assert!(matches!(connect(), Err(AtlsError::Refused(_))));
    assert_eq!(health(&mut before).unwrap(), 1);

    // Swapped back: accepted again.
    join_policy.swap(joining.validator(joining.good_policy()));
    let (mut again, _) = connect().unwrap();
    assert_eq!(health(&mut again).unwrap(), 1);

    // The client's policy for the server changes: the next connection fails
    // on the client with the policy's reason.
    server_policy.swap(server_node.validator(server_node.wrong_policy()));
    match connect().err().unwrap() {
        AtlsError::Attestation(AttestationError::Measurement { index, .. }) => {
            assert_eq!(index, fixture::PCR)
        }
        other => panic!("{other:?}"),
    }
    server_policy.swap(server_node.validator(server_node.good_policy()));
    connect().unwrap();
    server.stop();
}

// ------------------------------------------------------------ protocol edges

#[test]
fn a_silent_peer_runs_into_the_handshake_bound() {
    let server = AtlsServer::new(None).unwrap();
    let l = listener();
    let addr = l.local_addr().unwrap();
    let h = std::thread::spawn(move || {
        let (sock, _) = l.accept().unwrap();
        server
            .accept(sock, Duration::from_millis(200))
            .map(|a| a.peer)
    });
    let _silent = TcpStream::connect(addr).unwrap();
    assert_eq!(h.join().unwrap().unwrap_err(), AtlsError::Timeout);
}

#[test]
fn a_peer_silent_after_the_handshake_runs_into_the_same_bound() {
    // The attestation exchange shares the handshake's deadline.
    let server = AtlsServer::new(None).unwrap();
    let l = listener();
    let addr = l.local_addr().unwrap();
    let h = std::thread::spawn(move || {
        let (sock, _) = l.accept().unwrap();
        server
            .accept(sock, Duration::from_millis(500))
            .map(|a| a.peer)
    });
    let _s = relay::tls_client(TcpStream::connect(addr).unwrap()).unwrap();
    assert_eq!(h.join().unwrap().unwrap_err(), AtlsError::Timeout);
}

#[test]
fn an_oversized_attestation_message_is_refused_before_it_is_read() {
    let joining = Node::new();
    let server =
        AtlsServer::requiring_clients(None, v(joining.validator(joining.good_policy()))).unwrap();
    let (addr, h) = accept_one(server);
    let mut s = relay::tls_client(TcpStream::connect(addr).unwrap()).unwrap();
    // A frame header announcing 4 GiB − 1 bytes, and nothing after it.
    std::io::Write::write_all(&mut s, &[0x00, 0xff, 0xff, 0xff, 0xff]).unwrap();
    std::io::Write::flush(&mut s).unwrap();
    let err = h.join().unwrap().unwrap_err();
    assert!(
        matches!(
            &err,
            AtlsError::Message(atls::MessageFault::FrameTooLarge {
                len: 4294967295,
                ..
            })
        ),
        "{err:?}"
    );
}

#[test]
fn only_tls13_with_the_confboot_alpn_is_spoken() {
    let server = AtlsServer::new(None).unwrap();
    // A client offering another ALPN protocol.
    let (addr, h) = accept_one(server);
    let mut config = relay::client_config();
    config.alpn_protocols = vec![b"h2".to_vec()];
    let _s = plain_connect(addr, config);
    assert!(matches!(h.join().unwrap(), Err(AtlsError::Tls(_))));
    // A client offering the in-handshake scheme's ALPN, which is gone.
    let server = AtlsServer::new(None).unwrap();
    let (addr, h) = accept_one(server);
    let mut config = relay::client_config();
    config.alpn_protocols = vec![b"confboot/1".to_vec()];
    let _s = plain_connect(addr, config);
    assert!(matches!(h.join().unwrap(), Err(AtlsError::Tls(_))));
    // A TLS 1.2-only client.
    let server = AtlsServer::new(None).unwrap();
    let (addr, h) = accept_one(server);
    let tls12 = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ClientConfig::builder_with_provider(tls12)
        .with_protocol_versions(&[&rustls::version::TLS12])
        .unwrap()
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(AnyServer::new(atls::provider())))
        .with_no_client_auth();
    config.alpn_protocols = vec![atls::ALPN.to_vec()];
    let _s = plain_connect(addr, config);
    assert!(matches!(h.join().unwrap(), Err(AtlsError::Tls(_))));
}

/// Drives a handshake with `config` as far as it goes (errors ignored: the
/// server's verdict is asserted).
fn plain_connect(addr: SocketAddr, config: rustls::ClientConfig) -> Option<relay::ToServer> {
    let mut sock = TcpStream::connect(addr).unwrap();
    sock.set_read_timeout(Some(T)).unwrap();
    let mut conn = rustls::ClientConnection::new(
        Arc::new(config),
        rustls::pki_types::ServerName::try_from(atls::SERVER_NAME).unwrap(),
    )
    .unwrap();
    while conn.is_handshaking() {
        if conn.complete_io(&mut sock).is_err() {
            return None;
        }
    }
    Some(rustls::StreamOwned::new(conn, sock))
}

#[test]
fn the_servers_certificate_is_fresh_in_every_attested_handshake() {
    let node = Node::new();
    let server = serve(Arc::new(AtomicUsize::new(0)), Some(node.issuer()), &[]);
    let cert = || {
        let (client, _) = atls::connect(server.local_addr(), T, &[], None).unwrap();
        client.get_ref().conn.peer_certificates().unwrap()[0].to_vec()
    };
    assert_ne!(cert(), cert());
    server.stop();
}

/// The attesting nodes of these tests: each a real swtpm of its own with
/// the vTPM issuer, and vTPM validators pinning its attestation key.
mod fixture {
    use super::*;
    use confboot_tpm::swtpm::Swtpm;
    use confboot_vtpm::{AkTrust, VtpmIssuer, VtpmValidator};
    use ring::rand::{SecureRandom, SystemRandom};

    /// The PCR the policies of these tests differ in (OVMF measures the
    /// kernel into it).
    pub const PCR: u32 = 4;

    /// A node: its swtpm, the vTPM issuer on it, and the PCR values its
    /// quotes report.
    pub struct Node {
        // Dropped before the swtpm it talks to.
        issuer: Arc<VtpmIssuer>,
        measurements: BTreeMap<u32, Vec<u8>>,
        _swtpm: Swtpm,
    }

    impl Node {
        /// Starts a swtpm and "boots" a kernel of its own: extends `PCR`
        /// with a random digest, so nodes differ in it.
        pub fn new() -> Node {
            let swtpm = Swtpm::start().expect("swtpm starts (Debian package swtpm)");
            let issuer = VtpmIssuer::new(swtpm.connect().unwrap()).unwrap();
            let mut kernel = [0u8; 32];
            SystemRandom::new().fill(&mut kernel).unwrap();
            let measurements = issuer.with_tpm(|t| {
                t.pcr_extend(PCR, &kernel).unwrap();
                t.pcr_read_all().unwrap()
            });
            Node {
                issuer: Arc::new(issuer),
                measurements: measurements
                    .into_iter()
                    .map(|(i, v)| (i, v.to_vec()))
                    .collect(),
                _swtpm: swtpm,
            }
        }

        pub fn issuer(&self) -> Arc<dyn Issuer> {
            self.issuer.clone()
        }

        pub fn variant(&self) -> Variant {
            self.issuer.variant()
        }

        pub fn measurements(&self) -> &BTreeMap<u32, Vec<u8>> {
            &self.measurements
        }

        /// A vTPM validator pinning this node's AK, with `policy`.
        pub fn validator(&self, policy: MeasurementPolicy) -> Arc<dyn Validator> {
            Arc::new(VtpmValidator::new(
                AkTrust::Pinned(vec![self.issuer.ak_public_key()]),
                policy,
            ))
        }

        /// Expects the node's `PCR` and an unmarked PCR 15.
        pub fn good_policy(&self) -> MeasurementPolicy {
            let mut p = MeasurementPolicy::default();
            p.set(PCR, self.measurements[&PCR].clone(), false);
            p.set(15, vec![0; 32], false);
            p
        }

        /// Expects another value for `PCR`.
        pub fn wrong_policy(&self) -> MeasurementPolicy {
            let mut p = self.good_policy();
            p.set(PCR, vec![0xee; 32], false);
            p
        }
    }
}
