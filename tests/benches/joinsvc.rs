//! joinsvc throughput and memory, with ratios against a baseline measured in
//! the same run:
//!
//! - baseline: full rustls TLS 1.3 handshakes per second on loopback (P-256
//!   certificate, ring, no resumption), each followed by one small RPC;
//! - joinsvc (the static release binary): attested join tickets per second
//!   with N concurrent node clients, each with its own swtpm;
//! - joinsvc's peak RSS while holding 256 concurrent attested connections.
//!
//! Needs the musl release build (`scripts/test.sh` or `scripts/demo.sh` make
//! it). Run: `cargo bench -p confboot-tests --bench joinsvc`.

use std::net::TcpListener;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use confboot::atls;
use confboot::attestation::Issuer;
use confboot::rpc::listener::{self, PoolConfig};
use confboot::rpc::{Client, Router, ServerLimits, serve_connection};
use confboot_proto::health::{HealthCheckRequest, HealthCheckResponse};
use confboot_tests::cluster::{Joinsvc, Node};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer, ServerName};

const CLIENTS: usize = 4;
const RUN: Duration = Duration::from_secs(5);

/// Runs `op` on `CLIENTS` threads for `RUN`; returns operations per second.
fn rate(op: impl Fn(usize) + Send + Sync + 'static) -> f64 {
    let op = Arc::new(op);
    let done = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let start = Instant::now();
    let threads: Vec<_> = (0..CLIENTS)
        .map(|i| {
            let (op, done, stop) = (op.clone(), done.clone(), stop.clone());
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    op(i);
                    done.fetch_add(1, Ordering::Relaxed);
                }
            })
        })
        .collect();
    std::thread::sleep(RUN);
    stop.store(true, Ordering::Relaxed);
    for t in threads {
        t.join().unwrap();
    }
    done.load(Ordering::Relaxed) as f64 / start.elapsed().as_secs_f64()
}

fn plain_tls_rate() -> f64 {
    let rcgen::CertifiedKey { cert, signing_key } =
        rcgen::generate_simple_self_signed(vec!["localhost".to_string()]).unwrap();
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let der = CertificateDer::from(cert.der().to_vec());
    let mut server = rustls::ServerConfig::builder_with_provider(provider.clone())
        .with_protocol_versions(&[&rustls::version::TLS13])
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(
            vec![der.clone()],
            PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(signing_key.serialize_der())),
        )
        .unwrap();
    server.session_storage = Arc::new(rustls::server::NoServerSessionStorage {});
    server.send_tls13_tickets = 0;
    let server = Arc::new(server);
    let mut roots = rustls::RootCertStore::empty();
    roots.add(der).unwrap();
    let mut client = rustls::ClientConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS13])
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    client.resumption = rustls::client::Resumption::disabled();
    let client = Arc::new(client);
    let router = Arc::new(Router::new().unary(
        "/grpc.health.v1.Health/Check",
        |_ctx, _r: HealthCheckRequest| Ok(HealthCheckResponse { status: 1 }),
    ));
    let handle = listener::spawn(
        TcpListener::bind("127.0.0.1:0").unwrap(),
        PoolConfig::default(),
        move |sock, stop| {
            let conn = rustls::ServerConnection::new(server.clone()).unwrap();
            let mut s = rustls::StreamOwned::new(conn, sock);
            serve_connection(&mut s, &router, &ServerLimits::default(), stop);
        },
    )
    .unwrap();
    let addr = handle.local_addr();
    let r = rate(move |_| {
        let sock = std::net::TcpStream::connect(addr).unwrap();
        sock.set_nodelay(true).unwrap();
        let conn = rustls::ClientConnection::new(
            client.clone(),
            ServerName::try_from("localhost").unwrap(),
        )
        .unwrap();
        let mut c = Client::new(rustls::StreamOwned::new(conn, sock));
        let _: HealthCheckResponse = c
            .unary(
                "/grpc.health.v1.Health/Check",
                &HealthCheckRequest::default(),
                Duration::from_secs(10),
            )
            .unwrap();
    });
    handle.stop();
    r
}

fn vm_hwm_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status.lines().find(|l| l.starts_with("VmHWM:")).unwrap();
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

fn main() {
    let joinsvc_bin =
        confboot_tests::target_dir().join("x86_64-unknown-linux-musl/release/joinsvc");
    assert!(
        joinsvc_bin.exists(),
        "{} missing: run scripts/test.sh first",
        joinsvc_bin.display()
    );
    println!(
        "joinsvc benchmark: {CLIENTS} concurrent clients, {RUN:?} per measurement, loopback, 2 cores shared by all"
    );

    let plain = plain_tls_rate();
    println!(
        "{:<52}{:>10.0} /s  1.00",
        "plain rustls TLS 1.3 handshake + 1 call (baseline)", plain
    );

    let nodes: Vec<Node> = (0..CLIENTS)
        .map(|i| Node::start(&format!("node-{i}"), b"kernel"))
        .collect();
    let trusted: Vec<&Node> = nodes.iter().collect();
    let joinsvc = Joinsvc::start(&joinsvc_bin, &nodes[0].policy(), &trusted);
    let addr = joinsvc.rpc_addr;
    let issuers: Vec<Arc<dyn Issuer>> = nodes
        .iter()
        .map(|n| n.issuer.clone() as Arc<dyn Issuer>)
        .collect();
    let issuers = Arc::new(issuers);
    let disk = "0f3c6c1e-2b5d-4e8a-9c7f-1a2b3c4d5e6f";
    let tickets = {
        let issuers = issuers.clone();
        rate(move |i| {
            let (mut c, _) =
                atls::connect(addr, Duration::from_secs(20), &[], Some(issuers[i].clone()))
                    .unwrap();
            let req = confboot_proto::join::IssueJoinTicketRequest {
                disk_uuid: disk.into(),
                ..Default::default()
            };
            let _: confboot_proto::join::IssueJoinTicketResponse = c
                .unary("/join.API/IssueJoinTicket", &req, Duration::from_secs(20))
                .unwrap();
        })
    };
    println!(
        "{:<52}{:>10.0} /s  {:.2}",
        "joinsvc: attested join ticket (vTPM quote + token)",
        tickets,
        tickets / plain
    );
    println!(
        "  (tokens created through the API double: {})",
        joinsvc.kube.created().len()
    );
    let rejoins = {
        let issuers = issuers.clone();
        rate(move |i| {
            let (mut c, _) =
                atls::connect(addr, Duration::from_secs(20), &[], Some(issuers[i].clone()))
                    .unwrap();
            let req = confboot_proto::join::IssueRejoinTicketRequest {
                disk_uuid: disk.into(),
            };
            let _: confboot_proto::join::IssueRejoinTicketResponse = c
                .unary("/join.API/IssueRejoinTicket", &req, Duration::from_secs(20))
                .unwrap();
        })
    };
    println!(
        "{:<52}{:>10.0} /s  {:.2}",
        "joinsvc: attested rejoin ticket (no token)",
        rejoins,
        rejoins / plain
    );
    let cpu_seconds = |pid: u32| -> f64 {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
        let fields: Vec<&str> = stat
            .rsplit_once(')')
            .unwrap()
            .1
            .split_whitespace()
            .collect();
        (fields[11].parse::<f64>().unwrap() + fields[12].parse::<f64>().unwrap()) / 100.0
    };
    println!(
        "  joinsvc used {:.1} s of CPU in {:.0} s of wall time (the rest: clients, swtpm, API double)",
        cpu_seconds(joinsvc.process.id()),
        2.0 * RUN.as_secs_f64()
    );

    // 256 concurrent attested connections held open, then one call on each.
    drop(joinsvc);
    // A second instance with a pool large enough to hold them all.
    let joinsvc = {
        Joinsvc::start_with(
            &joinsvc_bin,
            &nodes[0].policy(),
            &trusted,
            &["--workers", "256", "--queue", "256"],
        )
    };
    let before = vm_hwm_kib(joinsvc.process.id());
    let mut clients = Vec::new();
    for i in 0..256 {
        let (c, _) = atls::connect(
            joinsvc.rpc_addr,
            Duration::from_secs(30),
            &[],
            Some(issuers[i % CLIENTS].clone()),
        )
        .unwrap();
        clients.push(c);
    }
    for c in clients.iter_mut() {
        let _: HealthCheckResponse = c
            .unary(
                "/grpc.health.v1.Health/Check",
                &HealthCheckRequest::default(),
                Duration::from_secs(30),
            )
            .unwrap();
    }
    let peak = vm_hwm_kib(joinsvc.process.id());
    println!(
        "joinsvc peak RSS: {before} KiB idle, {peak} KiB with 256 concurrent attested connections"
    );
    drop(clients);
}
