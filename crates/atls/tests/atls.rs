//! aTLS end to end on loopback: attestation in each direction and both,
//! and each reason a handshake is refused, asserted by its typed error.
//!
//! Every node is a real swtpm with the vTPM issuer; validators are vTPM
//! validators pinning the node's attestation key.
//!
//! Peers that misbehave (replayed certificate, evidence for another key,
//! missing/unknown/critical extension, expired certificate) are built here
//! with rustls directly, using the crate's certificate pieces.

use std::collections::BTreeMap;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, SystemTime};

use confboot_atls::{self as atls, AtlsClient, AtlsError, AtlsServer, Nonce, cert};
use confboot_attest::{
    AttestationError, Attested, Issuer, MeasurementPolicy, SwappableValidator, Validator, Variant,
};
use confboot_net::{PoolConfig, ServerHandle};
use confboot_proto::Method;
use confboot_proto::health::{HealthCheckRequest, HealthCheckResponse};
use confboot_proto::join::{IssueRejoinTicketRequest, IssueRejoinTicketResponse};
use confboot_tests::tls::AnyServer;
use confboot_wire::{Code, Router, ServerLimits};
use rustls::SignatureScheme;
use rustls::pki_types::ServerName;
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;

use fixture::Node;

const T: Duration = Duration::from_secs(20);
const CHECK: Method<HealthCheckRequest, HealthCheckResponse> = confboot_proto::HEALTH_CHECK;
const WHO: Method<IssueRejoinTicketRequest, IssueRejoinTicketResponse> =
    Method::new("/test.Peer/Who");

fn v(x: Arc<dyn Validator>) -> Vec<Arc<dyn Validator>> {
    vec![x]
}

/// A router with a health check and `WHO`, which answers with the caller's
/// attested PCR `fixture::PCR` (empty when the caller did not attest); both
/// count their calls.
fn router(calls: Arc<AtomicUsize>) -> Router {
    let c2 = Arc::clone(&calls);
    Router::new()
        .unary(CHECK, move |_, _: HealthCheckRequest| {
            calls.fetch_add(1, Ordering::SeqCst);
            Ok(HealthCheckResponse { status: 1 })
        })
        .unary(WHO, move |ctx, _: IssueRejoinTicketRequest| {
            c2.fetch_add(1, Ordering::SeqCst);
            let pcr = ctx
                .peer::<Attested>()
                .and_then(|p| p.measurements.get(&fixture::PCR).cloned())
                .unwrap_or_default();
            Ok(IssueRejoinTicketResponse {
                state_disk_key: pcr,
                measurement_secret: Vec::new(),
                generation: 0,
                measurement_salt: vec![],
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
    atls::serve(
        listener(),
        PoolConfig::default(),
        ServerLimits::default(),
        router(calls),
        issuer,
        validators,
    )
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
fn mutual_attestation_in_one_handshake() {
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
fn a_validator_is_picked_by_the_oid_in_the_certificate() {
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

impl Validator for Refuses {
    fn variant(&self) -> Variant {
        self.0
    }
    fn validate(&self, _: &[u8], _: &[u8; 32]) -> Result<Attested, AttestationError> {
        Err(AttestationError::Policy("this validator refuses".into()))
    }
}

// -------------------------------------------- the server's certificate is refused

/// A TLS 1.3 server with ALPN `confboot/1` whose certificate comes from
/// `make(nonce from SNI)`; it serves `n` handshakes and ends.
fn evil_server<F>(n: usize, make: F) -> (SocketAddr, JoinHandle<()>)
where
    F: Fn(Nonce) -> Arc<CertifiedKey> + Send + Sync + 'static,
{
    struct Resolve<F>(F);
    impl<F: Fn(Nonce) -> Arc<CertifiedKey> + Send + Sync> ResolvesServerCert for Resolve<F> {
        fn resolve(&self, hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
            let nonce = Nonce::from_server_name(hello.server_name()?).ok()?;
            Some((self.0)(nonce))
        }
    }
    impl<F> std::fmt::Debug for Resolve<F> {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("Resolve")
        }
    }
    let mut config = rustls::ServerConfig::builder_with_provider(atls::provider())
        .with_protocol_versions(&[&rustls::version::TLS13])
        .unwrap()
        .with_no_client_auth()
        .with_cert_resolver(Arc::new(Resolve(make)));
    config.alpn_protocols = vec![atls::ALPN.to_vec()];
    let config = Arc::new(config);
    let l = listener();
    let addr = l.local_addr().unwrap();
    let h = std::thread::spawn(move || {
        for _ in 0..n {
            let (mut sock, _) = l.accept().unwrap();
            sock.set_read_timeout(Some(T)).unwrap();
            let mut conn = rustls::ServerConnection::new(Arc::clone(&config)).unwrap();
            while conn.is_handshaking() {
                if conn.complete_io(&mut sock).is_err() {
                    break;
                }
            }
        }
    });
    (addr, h)
}

fn connect_to(
    addr: SocketAddr,
    validators: Vec<Arc<dyn Validator>>,
) -> Result<Attested, AtlsError> {
    let sock = TcpStream::connect(addr).unwrap();
    AtlsClient::new(validators, None)
        .connect(sock, T)
        .map(|c| c.peer.unwrap())
}

/// One handshake with an [`evil_server`] whose certificate is `make(nonce)`,
/// by a client that checks `node`'s evidence against its good policy.
fn handshake_with<F>(node: &Node, make: F) -> Result<Attested, AtlsError>
where
    F: Fn(Nonce) -> Arc<CertifiedKey> + Send + Sync + 'static,
{
    let (addr, h) = evil_server(1, make);
    let verdict = connect_to(addr, v(node.validator(node.good_policy())));
    h.join().unwrap();
    verdict
}

fn certified(new: cert::NewCertificate) -> Arc<CertifiedKey> {
    new.into_certified_key(&atls::provider()).unwrap()
}

#[test]
fn a_replayed_server_certificate_is_refused_as_stale() {
    let node = Node::new();
    let issuer = node.issuer();
    let c: Mutex<Option<Arc<CertifiedKey>>> = Mutex::default();
    // First handshake: a genuine certificate for that nonce, kept (with its
    // key). Second: the same certificate again, for a new nonce.
    let (addr, h) = evil_server(2, move |nonce| {
        let mut c = c.lock().unwrap();
        c.get_or_insert_with(|| certified(cert::attested(issuer.as_ref(), &nonce).unwrap()))
            .clone()
    });
    let good = v(node.validator(node.good_policy()));
    connect_to(addr, good.clone()).expect("the first handshake is genuine");
    let err = connect_to(addr, good).unwrap_err();
    assert!(
        matches!(err, AtlsError::Attestation(AttestationError::Binding(_))),
        "{err:?}"
    );
    h.join().unwrap();
}

#[test]
fn evidence_bound_to_another_key_is_refused() {
    let node = Node::new();
    let issuer = node.issuer();
    let err = handshake_with(&node, move |nonce| {
        let presented = cert::new_key().unwrap();
        let other = cert::new_key().unwrap();
        let other_spki = rcgen::PublicKeyData::subject_public_key_info(&other);
        let evidence = issuer
            .issue(&atls::nonce::extra_data(&other_spki, &nonce))
            .unwrap();
        certified(cert::self_signed(&presented, Some((issuer.variant(), evidence))).unwrap())
    })
    .unwrap_err();
    assert!(
        matches!(err, AtlsError::Attestation(AttestationError::Binding(_))),
        "{err:?}"
    );
}

#[test]
fn a_server_that_does_not_hold_the_certificate_key_fails_the_handshake_signature() {
    // Genuine evidence for this nonce and this certificate's key, but the
    // server signs the handshake with another key: only rustls' signature
    // check (delegated to `verify_tls13_signature`) can catch it.
    let node = Node::new();
    let issuer = node.issuer();
    let err = handshake_with(&node, move |nonce| {
        let genuine = cert::attested(issuer.as_ref(), &nonce).unwrap();
        let other = cert::self_signed(&cert::new_key().unwrap(), None).unwrap();
        let wrong_key = atls::provider()
            .key_provider
            .load_private_key(other.key.into())
            .unwrap();
        Arc::new(CertifiedKey::new(vec![genuine.cert], wrong_key))
    })
    .unwrap_err();
    match &err {
        AtlsError::Tls(m) => assert!(m.to_lowercase().contains("signature"), "{m}"),
        other => panic!("{other:?}"),
    }
}

/// Builds a certificate for `nonce` with genuine evidence, letting `edit`
/// change the parameters before signing.
fn crafted(
    issuer: &dyn Issuer,
    nonce: &Nonce,
    edit: impl FnOnce(&mut rcgen::CertificateParams, Vec<u8>),
) -> Arc<CertifiedKey> {
    let key = cert::new_key().unwrap();
    let spki = rcgen::PublicKeyData::subject_public_key_info(&key);
    let evidence = issuer
        .issue(&atls::nonce::extra_data(&spki, nonce))
        .unwrap();
    let mut params = rcgen::CertificateParams::default();
    let now = SystemTime::now();
    params.not_before = (now - Duration::from_secs(3600)).into();
    params.not_after = (now + Duration::from_secs(3600)).into();
    edit(&mut params, evidence);
    let cert = params.self_signed(&key).unwrap();
    certified(cert::NewCertificate::from_parts(
        cert.der().clone(),
        key.serialize_der().into(),
    ))
}

fn ext(oid: &[u64], evidence: Vec<u8>, critical: bool) -> rcgen::CustomExtension {
    let mut e = rcgen::CustomExtension::from_oid_content(oid, evidence);
    e.set_criticality(critical);
    e
}

#[test]
fn a_certificate_without_evidence_is_refused() {
    let node = Node::new();
    let err = handshake_with(&node, |_| {
        certified(cert::self_signed(&cert::new_key().unwrap(), None).unwrap())
    })
    .unwrap_err();
    assert_eq!(err, AtlsError::MissingEvidence);
}

#[test]
fn an_unattested_server_is_refused_by_a_client_that_requires_attestation() {
    let node = Node::new();
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
fn evidence_under_an_unknown_oid_is_refused() {
    let node = Node::new();
    let issuer = node.issuer();
    let round = AtomicUsize::new(0);
    let (addr, h) = evil_server(2, move |nonce| {
        crafted(issuer.as_ref(), &nonce, |p, ev| {
            // Genuine evidence, under an OID no validator here accepts: first
            // one no variant has, then SEV-SNP's (no SNP validator given).
            let oid: &[u64] = if round.fetch_add(1, Ordering::SeqCst) == 0 {
                &[1, 3, 9900, 5, 99]
            } else {
                Variant::SevSnp.oid_arcs()
            };
            p.custom_extensions.push(ext(oid, ev, false));
        })
    });
    let good = v(node.validator(node.good_policy()));
    assert_eq!(
        connect_to(addr, good.clone()).unwrap_err(),
        AtlsError::UnknownVariant {
            oid: "1.3.9900.5.99".into()
        }
    );
    // A variant this build knows but the client does not accept: its own
    // typed error, naming what is accepted.
    assert_eq!(
        connect_to(addr, good).unwrap_err(),
        AtlsError::VariantNotAccepted {
            variant: Variant::SevSnp,
            accepted: vec![node.variant()],
        }
    );
    h.join().unwrap();
}

#[test]
fn a_critical_evidence_extension_is_refused() {
    let node = Node::new();
    let issuer = node.issuer();
    let variant = node.variant();
    let verdict = handshake_with(&node, move |nonce| {
        crafted(issuer.as_ref(), &nonce, |p, ev| {
            p.custom_extensions.push(ext(variant.oid_arcs(), ev, true))
        })
    });
    assert_eq!(
        verdict.unwrap_err(),
        AtlsError::CriticalExtension {
            oid: variant.oid().into()
        }
    );
}

#[test]
fn an_expired_or_not_yet_valid_certificate_is_refused() {
    let node = Node::new();
    let issuer = node.issuer();
    let variant = node.variant();
    let round = AtomicUsize::new(0);
    let (addr, h) = evil_server(2, move |nonce| {
        crafted(issuer.as_ref(), &nonce, |p, ev| {
            let now = SystemTime::now();
            let hour = Duration::from_secs(3600);
            if round.fetch_add(1, Ordering::SeqCst) == 0 {
                p.not_before = (now - 3 * hour).into();
                p.not_after = (now - hour).into();
            } else {
                p.not_before = (now + hour).into();
                p.not_after = (now + 3 * hour).into();
            }
            p.custom_extensions.push(ext(variant.oid_arcs(), ev, false));
        })
    });
    let good = v(node.validator(node.good_policy()));
    for _ in 0..2 {
        let err = connect_to(addr, good.clone()).unwrap_err();
        assert!(matches!(err, AtlsError::OutsideValidity { .. }), "{err:?}");
    }
    h.join().unwrap();
}

#[test]
fn a_crafted_certificate_with_genuine_evidence_is_accepted() {
    // The control for the crafted-certificate tests above: with nothing
    // wrong, the same construction passes, so each refusal is due to the
    // one thing changed.
    let node = Node::new();
    let issuer = node.issuer();
    let variant = node.variant();
    handshake_with(&node, move |nonce| {
        crafted(issuer.as_ref(), &nonce, |p, ev| {
            p.custom_extensions.push(ext(variant.oid_arcs(), ev, false))
        })
    })
    .unwrap();
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

// -------------------------------------------- the client's certificate is refused

/// Runs `AtlsServer::accept` for one connection in a thread.
fn accept_one(server: AtlsServer) -> (SocketAddr, JoinHandle<Result<Option<Attested>, AtlsError>>) {
    let l = listener();
    let addr = l.local_addr().unwrap();
    let h = std::thread::spawn(move || {
        let (sock, _) = l.accept().unwrap();
        server.accept(sock, T).map(|a| a.peer)
    });
    (addr, h)
}

#[test]
fn a_joining_node_with_the_wrong_pcr_is_refused_by_policy() {
    let joining = Node::new();
    let server = AtlsServer::new(None, v(joining.validator(joining.wrong_policy()))).unwrap();
    let (addr, h) = accept_one(server);
    let sock = TcpStream::connect(addr).unwrap();
    let connected = AtlsClient::new(vec![], Some(joining.issuer())).connect(sock, T);
    // TLS 1.3: the client may finish before the server has judged it; the
    // server's verdict is what counts.
    let mut stream = match connected {
        Ok(c) => Some(c.stream),
        Err(_) => None,
    };
    match h.join().unwrap() {
        Err(AtlsError::Attestation(AttestationError::Measurement { index, .. })) => {
            assert_eq!(index, fixture::PCR)
        }
        other => panic!("{other:?}"),
    }
    // And the client learns of it on its first read.
    if let Some(s) = stream.as_mut() {
        let mut buf = [0u8; 1];
        assert!(std::io::Read::read(s, &mut buf).is_err());
    }
}

#[test]
fn a_joining_node_passing_policy_is_reported_to_the_server() {
    let joining = Node::new();
    let server = AtlsServer::new(None, v(joining.validator(joining.good_policy()))).unwrap();
    let (addr, h) = accept_one(server);
    let sock = TcpStream::connect(addr).unwrap();
    let _c = AtlsClient::new(vec![], Some(joining.issuer()))
        .connect(sock, T)
        .unwrap();
    let peer = h.join().unwrap().unwrap().unwrap();
    assert_eq!(&peer.measurements, joining.measurements());
}

/// A TLS 1.3 client with ALPN `confboot/1` that takes any server certificate
/// and answers a certificate request with `make(nonce from the hint)`.
fn evil_client_config<F>(make: Option<F>) -> Arc<rustls::ClientConfig>
where
    F: Fn(Nonce) -> Arc<CertifiedKey> + Send + Sync + 'static,
{
    struct Resolve<F>(F);
    impl<F> std::fmt::Debug for Resolve<F> {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("Resolve")
        }
    }
    impl<F: Fn(Nonce) -> Arc<CertifiedKey> + Send + Sync> rustls::client::ResolvesClientCert
        for Resolve<F>
    {
        fn resolve(&self, hints: &[&[u8]], _: &[SignatureScheme]) -> Option<Arc<CertifiedKey>> {
            Some((self.0)(
                Nonce::from_distinguished_name(hints.first()?).ok()?,
            ))
        }
        fn has_certs(&self) -> bool {
            true
        }
    }
    let b = rustls::ClientConfig::builder_with_provider(atls::provider())
        .with_protocol_versions(&[&rustls::version::TLS13])
        .unwrap()
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(AnyServer::new(atls::provider())));
    let mut config = match make {
        Some(f) => b.with_client_cert_resolver(Arc::new(Resolve(f))),
        None => b.with_no_client_auth(),
    };
    config.alpn_protocols = vec![atls::ALPN.to_vec()];
    Arc::new(config)
}

/// Connects with a hand-made rustls client config and drives the handshake
/// as far as it goes (errors ignored: the server's verdict is asserted).
fn evil_connect(
    addr: SocketAddr,
    config: Arc<rustls::ClientConfig>,
) -> rustls::StreamOwned<rustls::ClientConnection, TcpStream> {
    let mut sock = TcpStream::connect(addr).unwrap();
    sock.set_read_timeout(Some(T)).unwrap();
    let name = ServerName::try_from(Nonce::for_server_name().unwrap().to_server_name()).unwrap();
    let mut conn = rustls::ClientConnection::new(config, name).unwrap();
    while conn.is_handshaking() {
        if conn.complete_io(&mut sock).is_err() {
            break;
        }
    }
    let _ = conn.complete_io(&mut sock);
    rustls::StreamOwned::new(conn, sock)
}

#[test]
fn a_replayed_client_certificate_is_refused_as_stale() {
    let joining = Node::new();
    let issuer = joining.issuer();
    let c: Mutex<Option<Arc<CertifiedKey>>> = Mutex::default();
    let config = evil_client_config(Some(move |nonce: Nonce| {
        let mut c = c.lock().unwrap();
        c.get_or_insert_with(|| certified(cert::attested(issuer.as_ref(), &nonce).unwrap()))
            .clone()
    }));
    let validators = v(joining.validator(joining.good_policy()));
    for round in 0..2 {
        let server = AtlsServer::new(None, validators.clone()).unwrap();
        let (addr, h) = accept_one(server);
        let _s = evil_connect(addr, Arc::clone(&config));
        let verdict = h.join().unwrap();
        if round == 0 {
            verdict.expect("the first handshake is genuine");
        } else {
            let err = verdict.unwrap_err();
            assert!(
                matches!(err, AtlsError::Attestation(AttestationError::Binding(_))),
                "{err:?}"
            );
        }
    }
}

#[test]
fn a_client_certificate_without_evidence_is_refused() {
    let joining = Node::new();
    let config = evil_client_config(Some(|_: Nonce| {
        certified(cert::self_signed(&cert::new_key().unwrap(), None).unwrap())
    }));
    let server = AtlsServer::new(None, v(joining.validator(joining.good_policy()))).unwrap();
    let (addr, h) = accept_one(server);
    let _s = evil_connect(addr, config);
    assert_eq!(h.join().unwrap().unwrap_err(), AtlsError::MissingEvidence);
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

    // A plain rustls client without a client certificate.
    let stream = evil_connect(
        server.local_addr(),
        evil_client_config(None::<fn(Nonce) -> Arc<CertifiedKey>>),
    );
    let mut client = confboot_wire::Client::new(stream);
    let err = client
        .unary::<_, HealthCheckResponse>(CHECK, &HealthCheckRequest::default(), T)
        .unwrap_err();
    assert!(
        matches!(err.code, Code::Unavailable | Code::Internal),
        "{err:?}"
    );

    // aTLS' own client without an issuer: refused the same way.
    let (mut client, _) = atls::connect(server.local_addr(), T, &[], None)
        .expect("the client's side of the handshake completes");
    assert!(health(&mut client).is_err());

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
fn a_policy_swap_takes_effect_at_the_next_handshake() {
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

    // The server's policy changes: the next joining handshake is refused,
    // while the connection established before keeps working.
    join_policy.swap(joining.validator(joining.wrong_policy()));
    let (mut refused, _) = connect().expect("client side completes; server refuses");
    assert!(health(&mut refused).is_err());
    assert_eq!(health(&mut before).unwrap(), 1);

    // Swapped back: accepted again.
    join_policy.swap(joining.validator(joining.good_policy()));
    let (mut again, _) = connect().unwrap();
    assert_eq!(health(&mut again).unwrap(), 1);

    // The client's policy for the server changes: the next handshake fails
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
fn a_server_that_attests_refuses_a_client_hello_without_a_nonce() {
    let node = Node::new();
    let server = AtlsServer::new(Some(node.issuer()), vec![]).unwrap();
    let (addr, h) = accept_one(server);
    let mut sock = TcpStream::connect(addr).unwrap();
    sock.set_read_timeout(Some(T)).unwrap();
    let config = evil_client_config(None::<fn(Nonce) -> Arc<CertifiedKey>>);
    let mut conn =
        rustls::ClientConnection::new(config, ServerName::try_from("example.com").unwrap())
            .unwrap();
    while conn.is_handshaking() {
        if conn.complete_io(&mut sock).is_err() {
            break;
        }
    }
    assert!(matches!(h.join().unwrap(), Err(AtlsError::Nonce(_))));
}

#[test]
fn a_silent_peer_runs_into_the_handshake_bound() {
    let server = AtlsServer::new(None, vec![]).unwrap();
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
fn only_tls13_with_the_confboot_alpn_is_spoken() {
    let server = AtlsServer::new(None, vec![]).unwrap();
    // A client offering another ALPN protocol.
    let (addr, h) = accept_one(server);
    let mut config = (*evil_client_config(None::<fn(Nonce) -> Arc<CertifiedKey>>)).clone();
    config.alpn_protocols = vec![b"h2".to_vec()];
    let _s = evil_connect(addr, Arc::new(config));
    assert!(matches!(h.join().unwrap(), Err(AtlsError::Tls(_))));
    // A TLS 1.2-only client.
    let server = AtlsServer::new(None, vec![]).unwrap();
    let (addr, h) = accept_one(server);
    let tls12 = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ClientConfig::builder_with_provider(tls12)
        .with_protocol_versions(&[&rustls::version::TLS12])
        .unwrap()
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(AnyServer::new(atls::provider())))
        .with_no_client_auth();
    config.alpn_protocols = vec![atls::ALPN.to_vec()];
    let _s = evil_connect(addr, Arc::new(config));
    assert!(matches!(h.join().unwrap(), Err(AtlsError::Tls(_))));
}

#[test]
fn the_attested_certificate_has_the_documented_shape() {
    let node = Node::new();
    let nonce = Nonce::random().unwrap();
    let new = cert::attested(node.issuer().as_ref(), &nonce).unwrap();
    use x509_parser::prelude::{FromDer, X509Certificate};
    let (_, c) = X509Certificate::from_der(&new.cert).unwrap();
    let evidence: Vec<_> = c
        .extensions()
        .iter()
        .filter(|e| e.oid.to_id_string() == node.variant().oid())
        .collect();
    assert_eq!(evidence.len(), 1);
    assert!(!evidence[0].critical);
    let span = c.validity().not_after.timestamp() - c.validity().not_before.timestamp();
    assert_eq!(span, 4 * 3600);
    let now = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64;
    assert!(
        c.validity().not_before.timestamp() <= now && now <= c.validity().not_after.timestamp()
    );
    assert_eq!(
        c.public_key().algorithm.algorithm.to_id_string(),
        "1.2.840.10045.2.1",
        "EC key"
    );
    // And it verifies for its nonce only.
    let good = v(node.validator(node.good_policy()));
    let t = now as u64;
    assert!(cert::verify(&new.cert, &nonce, &good, t).is_ok());
    assert!(matches!(
        cert::verify(&new.cert, &Nonce::random().unwrap(), &good, t),
        Err(AtlsError::Attestation(AttestationError::Binding(_)))
    ));
}

/// The attesting nodes of these tests: each a real swtpm of its own with
/// the vTPM issuer, and vTPM validators pinning its attestation key.
mod fixture {
    use super::*;
    use confboot_attest::tpm::swtpm::Swtpm;
    use confboot_attest::vtpm::{AkTrust, VtpmIssuer, VtpmValidator};
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
