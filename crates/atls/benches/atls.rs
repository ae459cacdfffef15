//! aTLS handshakes per second against plain TLS 1.3, measured in one run.
//!
//! `cargo bench -p confboot-atls --bench atls [-- HANDSHAKES]` (default 400 per
//! mode). Every handshake is a fresh TCP connection on loopback, one at a
//! time; the client waits for one byte of application data the server sends
//! once its side of the handshake is done, so both sides' work is counted.
//!
//! - **plain**: rustls TLS 1.3, ring provider, ALPN `confboot/2`, one fixed
//!   self-signed P-256 certificate; the client verifies it with webpki
//!   (the certificate is its trust anchor) and the handshake signature.
//! - **aTLS, server attests**: the server quotes a real swtpm (vTPM issuer)
//!   per handshake; the client validates with the vTPM validator (pinned AK,
//!   PCR policy).
//! - **aTLS, mutual**: both sides attest, each with its own swtpm.
//!
//! Modes are interleaved in blocks so drift on these noisy machines hits all
//! of them alike. Then the parts of one attested handshake are timed alone.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::Arc;
use std::time::{Duration, Instant};

use confboot_atls::{self as atls, AtlsClient, AtlsServer, AttestationMessage, cert};
use confboot_attest::{Issuer, MeasurementPolicy, Validator, Variant};
use confboot_tpm::swtpm::Swtpm;
use confboot_vtpm::{AkTrust, VtpmIssuer, VtpmValidator};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};

const T: Duration = Duration::from_secs(30);
const BLOCKS: usize = 8;

/// Serves handshakes until the listener's owner stops connecting; after each
/// handshake sends one byte, then waits for the client to close.
fn server_loop(
    listener: TcpListener,
    handshake: impl Fn(TcpStream) -> Box<dyn Write> + Send + 'static,
) {
    std::thread::spawn(move || {
        for sock in listener.incoming() {
            let Ok(sock) = sock else { break };
            sock.set_nodelay(true).unwrap();
            sock.set_read_timeout(Some(T)).unwrap();
            sock.set_write_timeout(Some(T)).unwrap();
            let mut s = handshake(sock);
            let _ = s.write_all(b"k").and_then(|_| s.flush());
        }
    });
}

fn tcp(addr: SocketAddr) -> TcpStream {
    let s = TcpStream::connect(addr).unwrap();
    s.set_nodelay(true).unwrap();
    s.set_read_timeout(Some(T)).unwrap();
    s.set_write_timeout(Some(T)).unwrap();
    s
}

fn read_byte(mut r: impl Read) {
    let mut b = [0u8; 1];
    r.read_exact(&mut b).unwrap();
    assert_eq!(&b, b"k");
}

struct Node {
    issuer: Arc<VtpmIssuer>,
    _swtpm: Swtpm,
}

fn node() -> Node {
    let swtpm = Swtpm::start().expect("swtpm starts (Debian package swtpm)");
    let issuer = Arc::new(VtpmIssuer::new(swtpm.connect().unwrap()).unwrap());
    Node {
        issuer,
        _swtpm: swtpm,
    }
}

fn validator(n: &Node) -> Arc<dyn Validator> {
    let pcrs = n.issuer.with_tpm(|t| t.pcr_read_all()).unwrap();
    let mut policy = MeasurementPolicy::default();
    for (i, v) in pcrs.iter().take(10) {
        policy.set(*i, v.to_vec(), false);
    }
    Arc::new(VtpmValidator::new(
        AkTrust::Pinned(vec![n.issuer.ak_public_key()]),
        policy,
    ))
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort_unstable();
    v[v.len() / 2]
}

fn ms(d: Duration) -> String {
    format!("{:.3} ms", d.as_secs_f64() * 1e3)
}

fn main() {
    let n: usize = std::env::args()
        .skip(1)
        .find_map(|a| a.parse().ok())
        .filter(|n| *n > 0)
        .unwrap_or(400);
    let per_block = n.div_ceil(BLOCKS);
    let provider = atls::provider();

    // Plain TLS 1.3 with a fixed self-signed P-256 certificate.
    let key = cert::new_key().unwrap();
    let mut params = rcgen::CertificateParams::new(vec!["localhost".to_string()]).unwrap();
    params.not_before = (std::time::SystemTime::now() - Duration::from_secs(3600)).into();
    params.not_after = (std::time::SystemTime::now() + Duration::from_secs(3600)).into();
    let fixed: CertificateDer<'static> = params.self_signed(&key).unwrap().der().clone();
    let mut plain_server = rustls::ServerConfig::builder_with_provider(Arc::clone(&provider))
        .with_protocol_versions(&[&rustls::version::TLS13])
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(
            vec![fixed.clone()],
            PrivateKeyDer::Pkcs8(key.serialize_der().into()),
        )
        .unwrap();
    plain_server.alpn_protocols = vec![atls::ALPN.to_vec()];
    plain_server.session_storage = Arc::new(rustls::server::NoServerSessionStorage {});
    plain_server.send_tls13_tickets = 0;
    let plain_server = Arc::new(plain_server);
    let mut roots = rustls::RootCertStore::empty();
    roots.add(fixed).unwrap();
    let mut plain_client = rustls::ClientConfig::builder_with_provider(Arc::clone(&provider))
        .with_protocol_versions(&[&rustls::version::TLS13])
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    plain_client.alpn_protocols = vec![atls::ALPN.to_vec()];
    plain_client.resumption = rustls::client::Resumption::disabled();
    let plain_client = Arc::new(plain_client);

    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let plain_addr = l.local_addr().unwrap();
    server_loop(l, move |mut sock| {
        let mut conn = rustls::ServerConnection::new(Arc::clone(&plain_server)).unwrap();
        while conn.is_handshaking() {
            conn.complete_io(&mut sock).unwrap();
        }
        Box::new(rustls::StreamOwned::new(conn, sock))
    });
    let plain = || {
        let mut sock = tcp(plain_addr);
        let name = ServerName::try_from("localhost").unwrap();
        let mut conn = rustls::ClientConnection::new(Arc::clone(&plain_client), name).unwrap();
        while conn.is_handshaking() {
            conn.complete_io(&mut sock).unwrap();
        }
        read_byte(rustls::StreamOwned::new(conn, sock));
    };

    // aTLS: the server attests.
    let server_node = node();
    let client_node = node();
    let server_validator = validator(&server_node);
    let client_validator = validator(&client_node);
    let server_issuer: Arc<dyn Issuer> = server_node.issuer.clone();
    let client_issuer: Arc<dyn Issuer> = client_node.issuer.clone();

    let one_way = Arc::new(AtlsServer::new(Some(Arc::clone(&server_issuer))).unwrap());
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let one_way_addr = l.local_addr().unwrap();
    let srv = Arc::clone(&one_way);
    server_loop(l, move |sock| Box::new(srv.accept(sock, T).unwrap().stream));
    let one_way_client = AtlsClient::new(vec![Arc::clone(&server_validator)], None);
    let attested = || {
        let c = one_way_client.connect(tcp(one_way_addr), T).unwrap();
        assert!(c.peer.is_some());
        read_byte(c.stream);
    };

    // aTLS: both attest.
    let mutual = Arc::new(
        AtlsServer::requiring_clients(
            Some(Arc::clone(&server_issuer)),
            vec![Arc::clone(&client_validator)],
        )
        .unwrap(),
    );
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let mutual_addr = l.local_addr().unwrap();
    let srv = Arc::clone(&mutual);
    server_loop(l, move |sock| {
        let a = srv.accept(sock, T).unwrap();
        assert_eq!(a.peer.attested().variant, Variant::QemuVtpm);
        Box::new(a.stream)
    });
    let mutual_client = AtlsClient::new(
        vec![Arc::clone(&server_validator)],
        Some(Arc::clone(&client_issuer)),
    );
    let both = || {
        let c = mutual_client.connect(tcp(mutual_addr), T).unwrap();
        read_byte(c.stream);
    };

    // Warm up, then interleave blocks.
    for _ in 0..5 {
        plain();
        attested();
        both();
    }
    let mut totals = [Duration::ZERO; 3];
    let mut samples: [Vec<Duration>; 3] = Default::default();
    let modes: [&dyn Fn(); 3] = [&plain, &attested, &both];
    for _ in 0..BLOCKS {
        for (m, f) in modes.iter().enumerate() {
            for _ in 0..per_block {
                let t = Instant::now();
                f();
                let d = t.elapsed();
                totals[m] += d;
                samples[m].push(d);
            }
        }
    }
    let count = (per_block * BLOCKS) as f64;
    let rate = |m: usize| count / totals[m].as_secs_f64();
    println!(
        "aTLS handshake benchmark: {} handshakes per mode, {BLOCKS} interleaved blocks, loopback TCP",
        per_block * BLOCKS
    );
    println!(
        "  plain TLS 1.3 (fixed P-256 cert)  {:8.1} handshakes/s   median {}",
        rate(0),
        ms(median(samples[0].clone()))
    );
    println!(
        "  aTLS, server attests (swtpm)      {:8.1} handshakes/s   median {}   cost {:.2}x plain",
        rate(1),
        ms(median(samples[1].clone())),
        rate(0) / rate(1)
    );
    println!(
        "  aTLS, mutual (two swtpms)         {:8.1} handshakes/s   median {}   cost {:.2}x plain",
        rate(2),
        ms(median(samples[2].clone())),
        rate(0) / rate(2)
    );

    // Breakdown of one attested side, each part timed alone.
    let runs = per_block * BLOCKS;
    let time = |f: &mut dyn FnMut()| {
        median(
            (0..runs)
                .map(|_| {
                    let t = Instant::now();
                    f();
                    t.elapsed()
                })
                .collect(),
        )
    };
    let keygen = time(&mut || {
        cert::new_key().unwrap();
    });
    let k = cert::new_key().unwrap();
    let extra = [0x5a; 32];
    let quote = time(&mut || {
        server_issuer.issue(&extra).unwrap();
    });
    let evidence = server_issuer.issue(&extra).unwrap();
    let sign = time(&mut || {
        cert::self_signed(&k).unwrap();
    });
    let made = cert::self_signed(&k).unwrap();
    let load = time(&mut || {
        cert::NewCertificate::from_parts(made.cert.clone(), made.key.clone_key())
            .into_certified_key(&provider)
            .unwrap();
    });
    let message = AttestationMessage {
        evidence: Some((server_issuer.variant(), evidence.clone())),
        sealing_key: None,
        reference_values: None,
    }
    .encode();
    let verify = time(&mut || {
        AttestationMessage::decode(&message)
            .unwrap()
            .verify(&[Arc::clone(&server_validator)], |_| Ok(extra))
            .unwrap();
    });
    let validate_only = time(&mut || {
        server_validator.validate(&evidence, &extra).unwrap();
    });
    let config = time(&mut || {
        mutual.start().unwrap();
    });
    println!("  breakdown (medians of {runs}):");
    println!("    key generation (P-256)                 {}", ms(keygen));
    println!("    quote (vTPM issuer on swtpm)           {}", ms(quote));
    println!("    certificate self-signing               {}", ms(sign));
    println!("    PKCS#8 key load (fresh keys skip it)   {}", ms(load));
    println!(
        "    verify message (decode + validate)     {}   ({} bytes of evidence)",
        ms(verify),
        evidence.len()
    );
    println!(
        "      of which the vTPM validator          {}",
        ms(validate_only)
    );
    println!("    per-connection ServerConnection        {}", ms(config));
}
