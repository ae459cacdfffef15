//! The joinsvc benchmark's baseline as a process of its own: a plain rustls
//! TLS 1.3 server (no client authentication, no attestation) answering a
//! health check per connection, on the same listener and worker pool as
//! joinsvc, built as joinsvc is (static musl, the release profile, musl's
//! allocator). The benchmark compares joinsvc's CPU per ticket with this
//! process's CPU per handshake, so the ratio does not count the C library
//! and allocator the benchmark binary happens to link.
//!
//! Prints the address it listens on, then the certificate's DER in hex, one
//! line each; serves until its standard input is closed. With
//! `--rustls-defaults` it uses rustls' default ring provider (X25519 first)
//! instead of aTLS's ([`atls::provider`], P-256 only).

use std::io::{BufRead, Write};
use std::net::TcpListener;
use std::sync::Arc;

use confboot_atls as atls;
use confboot_net::listener::{self, PoolConfig};
use confboot_proto::health::{HealthCheckRequest, HealthCheckResponse};
use confboot_wire::{Router, ServerLimits, serve_connection};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};

fn main() {
    let rcgen::CertifiedKey { cert, signing_key } =
        rcgen::generate_simple_self_signed(vec!["localhost".to_string()])
            .expect("a self-signed certificate");
    let der = CertificateDer::from(cert.der().to_vec());
    let provider = if std::env::args().any(|a| a == "--rustls-defaults") {
        Arc::new(rustls::crypto::ring::default_provider())
    } else {
        atls::provider()
    };
    let mut server = rustls::ServerConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS13])
        .expect("TLS 1.3")
        .with_no_client_auth()
        .with_single_cert(
            vec![der.clone()],
            PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(signing_key.serialize_der())),
        )
        .expect("the certificate and its key");
    server.session_storage = Arc::new(rustls::server::NoServerSessionStorage {});
    server.send_tls13_tickets = 0;
    let server = Arc::new(server);
    let router = Arc::new(Router::new().unary(
        confboot_proto::HEALTH_CHECK,
        |_ctx, _r: HealthCheckRequest| Ok(HealthCheckResponse { status: 1 }),
    ));
    let handle = listener::spawn(
        TcpListener::bind("127.0.0.1:0").expect("a loopback port"),
        PoolConfig::default(),
        move |sock, stop| {
            let Ok(conn) = rustls::ServerConnection::new(server.clone()) else {
                return;
            };
            let mut s = rustls::StreamOwned::new(conn, sock);
            serve_connection(&mut s, &router, &ServerLimits::default(), stop);
        },
    )
    .expect("the listener");
    let mut out = std::io::stdout().lock();
    writeln!(out, "{}", handle.local_addr()).expect("stdout");
    writeln!(out, "{}", confboot_util::hex::encode(&der)).expect("stdout");
    out.flush().expect("stdout");
    drop(out);
    // Serve until the benchmark closes our standard input.
    for line in std::io::stdin().lock().lines() {
        if line.is_err() {
            break;
        }
    }
    handle.stop();
}
