//! joinsvc throughput and memory, with ratios against a baseline measured in
//! the same run:
//!
//! - baseline: full rustls TLS 1.3 handshakes per second on loopback (P-256
//!   certificate, ring, no resumption), each followed by one small RPC,
//!   served in the benchmark's own process, and again by the same server
//!   as a static musl process built as joinsvc is (`plain-tls-server`), so
//!   joinsvc's CPU per ticket is also compared with a server that has its
//!   C library and allocator; both with aTLS's provider (ECDHE on P-256
//!   only), and the process once more with rustls' default one (X25519
//!   first), the plain rustls server as it comes;
//! - joinsvc (the static release binary): attested join tickets per second
//!   with N concurrent node clients, each with its own swtpm, and the
//!   connections its bootstrap tokens took to the real API server (the
//!   bench process's control plane, through a relaying proxy that counts
//!   them);
//! - the rejoin ticket's floor in the same run: the plain musl server's CPU
//!   per handshake plus the one P-256 signature verification attestation
//!   needs (the quote's; the node shows no client certificate since the
//!   evidence is bound to the session's exporter) as ring does it in this
//!   process, plus the HPKE seal of the ticket's secrets to the node's key;
//! - the plain musl server, join and rejoin tickets again at one offered
//!   load (`PACE` operations a second), each server's CPU per operation;
//! - joinsvc's peak RSS while holding 256 concurrent attested connections.
//!
//! Needs the musl release build (`scripts/test.sh` or `scripts/demo.sh` make
//! it). Run: `cargo bench -p confboot-tests --bench joinsvc`.

use std::net::TcpListener;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use confboot_atls as atls;
use confboot_attest::Issuer;
use confboot_net::listener::{self, PoolConfig};
use confboot_proto::health::{HealthCheckRequest, HealthCheckResponse};
use confboot_tests::cluster::{Joinsvc, JoinsvcSetup, Node, RealApi};
use confboot_tests::kube::ControlPlane;
use confboot_tests::kube_proxy::FaultProxy;
use confboot_tests::load::{cpu_seconds, process_cpu_seconds, status_kib};
use confboot_tests::tickets::SealedClient;
use confboot_wire::{Client, Router, ServerLimits, serve_connection};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer, ServerName};

const CLIENTS: usize = 4;
const RUN: Duration = Duration::from_secs(5);

/// The offered load of the paced measurements: operations per second, all
/// clients together, for every server alike (about a third of what joinsvc
/// issues at saturation here), so each server's CPU per operation is taken
/// at the same load, with the same idle time between operations.
const PACE: f64 = 500.0;

/// Runs `op` on `CLIENTS` threads for `RUN`, back to back (`pace` None: as
/// fast as the machine goes) or at `pace` operations per second in all
/// (each client on its own schedule, starting late ones at once); returns
/// operations per second.
fn rate_at(op: impl Fn(usize) + Send + Sync + 'static, pace: Option<f64>) -> f64 {
    let op = Arc::new(op);
    let done = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let start = Instant::now();
    let every = pace.map(|p| Duration::from_secs_f64(CLIENTS as f64 / p));
    let threads: Vec<_> = (0..CLIENTS)
        .map(|i| {
            let (op, done, stop) = (op.clone(), done.clone(), stop.clone());
            std::thread::spawn(move || {
                let mut next = every.map(|e| start + e * i as u32 / CLIENTS as u32);
                while !stop.load(Ordering::Relaxed) {
                    if let (Some(at), Some(e)) = (next.as_mut(), every) {
                        let now = Instant::now();
                        if *at > now {
                            std::thread::sleep(*at - now);
                        }
                        *at = (*at + e).max(now);
                    }
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

/// The baseline: handshakes per second, and the CPU seconds its server
/// threads (the listener's `rpc-*` threads) used.
fn plain_tls_rate() -> (f64, f64) {
    let rcgen::CertifiedKey { cert, signing_key } =
        rcgen::generate_simple_self_signed(vec!["localhost".to_string()]).unwrap();
    // The same ring provider and cipher suite order aTLS uses, so the ratio
    // measures what attestation and the ticket add, nothing else.
    let provider = atls::provider();
    let der = CertificateDer::from(cert.der().to_vec());
    let mut server = rustls::ServerConfig::builder_with_provider(provider)
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
    let client = plain_client_config(der, false);
    let router = Arc::new(Router::new().unary(
        confboot_proto::HEALTH_CHECK,
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
    let r = plain_client_rate(handle.local_addr(), client, None);
    let server_cpu = rpc_threads_cpu_seconds();
    handle.stop();
    (r, server_cpu)
}

/// The crypto provider of the plain server and its clients: aTLS's (P-256
/// only), or with `rustls_defaults` rustls' default ring provider (X25519
/// first).
fn plain_provider(rustls_defaults: bool) -> Arc<rustls::crypto::CryptoProvider> {
    if rustls_defaults {
        Arc::new(rustls::crypto::ring::default_provider())
    } else {
        atls::provider()
    }
}

/// A plain TLS client's config that trusts exactly `der`.
fn plain_client_config(
    der: CertificateDer<'static>,
    rustls_defaults: bool,
) -> Arc<rustls::ClientConfig> {
    let mut roots = rustls::RootCertStore::empty();
    roots.add(der).unwrap();
    let mut client = rustls::ClientConfig::builder_with_provider(plain_provider(rustls_defaults))
        .with_protocol_versions(&[&rustls::version::TLS13])
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    client.resumption = rustls::client::Resumption::disabled();
    Arc::new(client)
}

/// Plain handshakes (each with one health check) per second against
/// `addr`, back to back or at `pace`.
fn plain_client_rate(
    addr: std::net::SocketAddr,
    client: Arc<rustls::ClientConfig>,
    pace: Option<f64>,
) -> f64 {
    rate_at(
        move |_| {
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
                    confboot_proto::HEALTH_CHECK,
                    &HealthCheckRequest::default(),
                    Duration::from_secs(10),
                )
                .unwrap();
        },
        pace,
    )
}

/// The same plain server as a static musl process built as joinsvc is
/// (`plain-tls-server`): handshakes per second, and the process's CPU per
/// handshake in milliseconds; with `rustls_defaults`, server and clients
/// use rustls' default provider instead of aTLS's; back to back or at
/// `pace`.
fn plain_musl_process_rate(rustls_defaults: bool, pace: Option<f64>) -> (f64, f64) {
    use std::io::BufRead;
    let mut child = std::process::Command::new(confboot_tests::musl_binary("plain-tls-server"))
        .args(rustls_defaults.then_some("--rustls-defaults"))
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = std::io::BufReader::new(child.stdout.take().unwrap()).lines();
    let addr: std::net::SocketAddr = lines.next().unwrap().unwrap().parse().unwrap();
    let der = confboot_util::hex::decode(&lines.next().unwrap().unwrap()).unwrap();
    let client = plain_client_config(CertificateDer::from(der), rustls_defaults);
    let pid = child.id();
    let (before, t0) = (process_cpu_seconds(pid), Instant::now());
    let r = plain_client_rate(addr, client, pace);
    let server_ms = (process_cpu_seconds(pid) - before) * 1000.0 / (r * t0.elapsed().as_secs_f64());
    drop(child.stdin.take());
    child.wait().unwrap();
    (r, server_ms)
}

/// CPU seconds used by this process's threads named `rpc-*` (the listener's
/// acceptor and workers).
fn rpc_threads_cpu_seconds() -> f64 {
    std::fs::read_dir("/proc/self/task")
        .unwrap()
        .flatten()
        .filter(|t| {
            std::fs::read_to_string(t.path().join("comm")).is_ok_and(|c| c.starts_with("rpc-"))
        })
        .map(|t| cpu_seconds(&format!("{}/stat", t.path().display())))
        .sum()
}

/// CPU time this thread has used (`/proc/thread-self/schedstat`, in
/// nanoseconds, so short measurements are not rounded to a clock tick).
fn thread_cpu() -> Duration {
    let stat = std::fs::read_to_string("/proc/thread-self/schedstat").unwrap();
    let ns: u64 = stat.split_whitespace().next().unwrap().parse().unwrap();
    Duration::from_nanos(ns)
}

/// CPU milliseconds ring takes to verify one ECDSA P-256 (SHA-256)
/// signature, in this process: the cost of the one verification a ticket
/// needs beyond a plain handshake (the quote's signature, on P-256 with
/// ring; the node signs no handshake since it shows no certificate).
fn p256_verification_ms() -> f64 {
    use ring::signature::{self, KeyPair};
    let rng = ring::rand::SystemRandom::new();
    let pkcs8 =
        signature::EcdsaKeyPair::generate_pkcs8(&signature::ECDSA_P256_SHA256_ASN1_SIGNING, &rng)
            .unwrap();
    let key = signature::EcdsaKeyPair::from_pkcs8(
        &signature::ECDSA_P256_SHA256_ASN1_SIGNING,
        pkcs8.as_ref(),
        &rng,
    )
    .unwrap();
    let message = [7u8; 64];
    let sig = key.sign(&rng, &message).unwrap();
    let public =
        signature::UnparsedPublicKey::new(&signature::ECDSA_P256_SHA256_ASN1, key.public_key());
    const N: u32 = 4000;
    let t0 = thread_cpu();
    for _ in 0..N {
        public.verify(&message, sig.as_ref()).unwrap();
    }
    (thread_cpu() - t0).as_secs_f64() * 1000.0 / f64::from(N)
}

/// CPU milliseconds of sealing a rejoin ticket's secrets (a 32-byte disk
/// key and a 32-byte measurement secret) to a node's X25519 key with HPKE,
/// in this process: an X25519 key pair, one X25519 agreement, the key
/// schedule and ChaCha20Poly1305 over some 70 bytes.
fn seal_ms() -> f64 {
    use confboot_kms::seal::{SealedKind, SealingKeyPair, seal};
    let node = SealingKeyPair::generate().public_key();
    let secrets = [7u8; 70];
    const N: u32 = 2000;
    let t0 = thread_cpu();
    for _ in 0..N {
        seal(&node, SealedKind::RejoinTicket, &secrets).unwrap();
    }
    (thread_cpu() - t0).as_secs_f64() * 1000.0 / f64::from(N)
}

/// One node's ticket, as a client thread `i` asks for it: an aTLS
/// connection with node `i`'s vTPM and a fresh sealing key, then a rejoin
/// or a join call, and the ticket's sealed secrets opened.
/// The disk the join tickets ask for.
const JOIN_DISK: &str = "0f3c6c1e-2b5d-4e8a-9c7f-1a2b3c4d5e6f";
/// The disk the rejoin tickets ask for: joined, its first boot over.
const REJOIN_DISK: &str = "7e1d2c3b-4a59-4876-8f9e-0a1b2c3d4e5f";

/// Puts [`REJOIN_DISK`] through its join and first rejoin, as a node that
/// joined does: its first boot ends, and the ledger's filter of issued
/// disks (2^20 bits) holds it from then on.
fn populate_the_ledger(addr: std::net::SocketAddr, issuer: Arc<dyn Issuer>) {
    let deadline = Duration::from_secs(20);
    let mut c = SealedClient::connect(addr, deadline, &[], issuer.clone()).unwrap();
    let join = confboot_proto::join::IssueJoinTicketRequest {
        disk_uuid: REJOIN_DISK.into(),
        ..Default::default()
    };
    c.join(&join, deadline).unwrap();
    let mut c = SealedClient::connect(addr, deadline, &[], issuer).unwrap();
    let rejoin = confboot_proto::join::IssueRejoinTicketRequest {
        disk_uuid: REJOIN_DISK.into(),
    };
    c.rejoin(&rejoin, deadline).unwrap();
}

fn ticket_op(
    addr: std::net::SocketAddr,
    issuers: &Arc<Vec<Arc<dyn Issuer>>>,
    rejoin: bool,
) -> impl Fn(usize) + Send + Sync + 'static {
    // Joins ask again for one disk whose first boot runs (a repeated join
    // of a pending disk, which consults nothing the ledger's filter holds);
    // rejoins ask for a disk whose first boot is over, so it is in the
    // filter of issued disks, which holds something from the start
    // (`populate_the_ledger`): a registry read carries the filter only when
    // a decision consults it (`joinsvc::vpn`), which neither of these does.
    let issuers = issuers.clone();
    move |i| {
        let mut c =
            SealedClient::connect(addr, Duration::from_secs(20), &[], issuers[i].clone()).unwrap();
        if rejoin {
            let req = confboot_proto::join::IssueRejoinTicketRequest {
                disk_uuid: REJOIN_DISK.into(),
            };
            c.rejoin(&req, Duration::from_secs(20)).unwrap();
        } else {
            let req = confboot_proto::join::IssueJoinTicketRequest {
                disk_uuid: JOIN_DISK.into(),
                ..Default::default()
            };
            c.join(&req, Duration::from_secs(20)).unwrap();
        }
    }
}

/// CPU seconds used so far by this process (clients, API proxy), by
/// `joinsvc_pid`, and by every swtpm on the machine.
#[derive(Clone, Copy)]
struct CpuUse {
    bench: f64,
    joinsvc: f64,
    swtpm: f64,
}

impl CpuUse {
    fn now(joinsvc_pid: u32) -> CpuUse {
        let swtpm = std::fs::read_dir("/proc")
            .map(|dir| {
                dir.flatten()
                    .filter(|e| {
                        std::fs::read_to_string(e.path().join("comm"))
                            .is_ok_and(|c| c.trim() == "swtpm")
                    })
                    .map(|e| cpu_seconds(&format!("{}/stat", e.path().display())))
                    .sum()
            })
            .unwrap_or(0.0);
        CpuUse {
            bench: cpu_seconds("/proc/self/stat"),
            joinsvc: process_cpu_seconds(joinsvc_pid),
            swtpm,
        }
    }

    /// joinsvc's CPU milliseconds per operation since `self`.
    fn ms_since(self, joinsvc_pid: u32, ops: f64) -> f64 {
        let now = CpuUse::now(joinsvc_pid);
        (now.joinsvc - self.joinsvc) * 1000.0 / ops
    }

    /// Prints the CPU milliseconds per operation each part used since `self`;
    /// returns joinsvc's.
    fn report_since(self, joinsvc_pid: u32, ops: f64) -> f64 {
        let now = CpuUse::now(joinsvc_pid);
        let per = |a: f64, b: f64| (b - a) * 1000.0 / ops;
        println!(
            "  CPU per ticket: joinsvc {:.2} ms, swtpm {:.2} ms, clients + API proxy {:.2} ms",
            per(self.joinsvc, now.joinsvc),
            per(self.swtpm, now.swtpm),
            per(self.bench, now.bench),
        );
        per(self.joinsvc, now.joinsvc)
    }
}

fn main() {
    let joinsvc_bin = confboot_tests::musl_binary("joinsvc");
    println!(
        "joinsvc benchmark: {CLIENTS} concurrent clients, {RUN:?} per measurement, loopback, 2 cores shared by all"
    );

    let (cpu, t0) = (cpu_seconds("/proc/self/stat"), Instant::now());
    let (plain, plain_server_cpu) = plain_tls_rate();
    let handshakes = plain * t0.elapsed().as_secs_f64();
    let plain_cpu = cpu_seconds("/proc/self/stat") - cpu;
    let plain_server_ms = plain_server_cpu * 1000.0 / handshakes;
    println!(
        "{:<52}{:>10.0} /s  1.00",
        "plain rustls TLS 1.3 handshake + 1 call (baseline)", plain
    );
    println!(
        "  CPU per handshake: {:.2} ms in all, of which the server {:.2} ms",
        plain_cpu * 1000.0 / handshakes,
        plain_server_ms
    );
    let (plain_musl, plain_musl_ms) = plain_musl_process_rate(false, None);
    println!(
        "{:<52}{:>10.0} /s  {:.2}",
        "the same plain server as a static musl process",
        plain_musl,
        plain_musl / plain
    );
    println!("  CPU per handshake of that process: {plain_musl_ms:.2} ms");
    let (plain_default, plain_default_ms) = plain_musl_process_rate(true, None);
    println!(
        "{:<52}{:>10.0} /s  {:.2}",
        "that process with rustls' default groups (X25519)",
        plain_default,
        plain_default / plain
    );
    println!("  CPU per handshake of that process: {plain_default_ms:.2} ms");

    let nodes: Vec<Node> = (0..CLIENTS)
        .map(|i| Node::start(&format!("node-{i}"), b"kernel"))
        .collect();
    let trusted: Vec<&Node> = nodes.iter().collect();
    // At its default verbosity (a line per ticket), as in production; the
    // test fixture's `-v 4` adds debug lines.
    let plane = ControlPlane::shared();
    let proxy = FaultProxy::start(plane.endpoint(), &plane.ca_pem());
    let setup = JoinsvcSetup {
        pinned_aks: trusted.iter().map(|n| n.issuer.ak_public_key()).collect(),
        extra: vec!["-v".into(), "2".into()],
        real_api: Some(RealApi::tenant("bench").through(proxy.url(), proxy.ca_pem())),
        ..JoinsvcSetup::new()
    };
    let joinsvc = Joinsvc::launch(&joinsvc_bin, &nodes[0].policy(), setup);
    let addr = joinsvc.rpc_addr;
    let issuers: Vec<Arc<dyn Issuer>> = nodes
        .iter()
        .map(|n| n.issuer.clone() as Arc<dyn Issuer>)
        .collect();
    let issuers = Arc::new(issuers);
    populate_the_ledger(addr, issuers[0].clone());
    let filter = joinsvc.configmap("confboot-issued-filter").unwrap();
    println!(
        "ledger: the filter of issued disks holds {} entries ({} bytes of base64), in its own \
         ConfigMap",
        filter["data"]["issued-count"].as_str().unwrap(),
        filter["data"]["issued-filter"].as_str().unwrap().len()
    );
    let pid = joinsvc.process.id();
    let (cpu, t0) = (CpuUse::now(pid), Instant::now());
    let tickets = rate_at(ticket_op(addr, &issuers, false), None);
    println!(
        "{:<52}{:>10.0} /s  {:.2}",
        "joinsvc: attested join ticket (vTPM quote + token)",
        tickets,
        tickets / plain
    );
    println!(
        "  (tokens created on the real API server: {}, over {} connections)",
        joinsvc.tokens().len(),
        proxy.connections()
    );
    let join_ms = cpu.report_since(pid, tickets * t0.elapsed().as_secs_f64());
    let (cpu, t0) = (CpuUse::now(pid), Instant::now());
    let rejoins = rate_at(ticket_op(addr, &issuers, true), None);
    println!(
        "{:<52}{:>10.0} /s  {:.2}",
        "joinsvc: attested rejoin ticket (no token)",
        rejoins,
        rejoins / plain
    );
    let rejoin_ms = cpu.report_since(pid, rejoins * t0.elapsed().as_secs_f64());
    println!(
        "server CPU per operation against the plain server's per handshake: join {:.2}, rejoin {:.2}",
        plain_server_ms / join_ms,
        plain_server_ms / rejoin_ms
    );
    println!(
        "server CPU per ticket, × the plain server's per handshake: join {:.2}×, rejoin {:.2}×",
        join_ms / plain_server_ms,
        rejoin_ms / plain_server_ms
    );
    println!(
        "server CPU per ticket, × the static musl plain server's per handshake: join {:.2}×, \
         rejoin {:.2}×",
        join_ms / plain_musl_ms,
        rejoin_ms / plain_musl_ms
    );
    println!(
        "server CPU per ticket, × that server's with rustls' default groups: join {:.2}×, rejoin \
         {:.2}×",
        join_ms / plain_default_ms,
        rejoin_ms / plain_default_ms
    );
    // The floor of a rejoin ticket: the same plain handshake plus the one
    // signature verification attestation cannot do without, and the seal
    // of the ticket's secrets to the node's key.
    let verify_ms = p256_verification_ms();
    let seal_ms = seal_ms();
    let floor_ms = plain_musl_ms + verify_ms + seal_ms;
    println!(
        "rejoin floor: the static musl plain server's handshake {plain_musl_ms:.3} ms + 1 P-256 \
         verification {verify_ms:.3} ms + the HPKE seal {seal_ms:.3} ms = {floor_ms:.3} ms \
         ({:.2}×); a rejoin ticket costs {:.3} ms above it, a join ticket {:.3} ms",
        floor_ms / plain_musl_ms,
        rejoin_ms - floor_ms,
        join_ms - floor_ms
    );
    // The same three at one offered load: each server idles as long between
    // operations, so what differs is what an operation costs it.
    let (paced_plain, paced_plain_ms) = plain_musl_process_rate(false, Some(PACE));
    let (cpu, t0) = (CpuUse::now(pid), Instant::now());
    let paced_join = rate_at(ticket_op(addr, &issuers, false), Some(PACE));
    let paced_join_ms = cpu.ms_since(pid, paced_join * t0.elapsed().as_secs_f64());
    let (cpu, t0) = (CpuUse::now(pid), Instant::now());
    let paced_rejoin = rate_at(ticket_op(addr, &issuers, true), Some(PACE));
    let paced_rejoin_ms = cpu.ms_since(pid, paced_rejoin * t0.elapsed().as_secs_f64());
    println!(
        "at {PACE:.0} operations/s offered to each (done: plain {paced_plain:.0}, join \
         {paced_join:.0}, rejoin {paced_rejoin:.0} /s): server CPU per operation: plain musl \
         {paced_plain_ms:.3} ms, join {paced_join_ms:.3} ms ({:.2}×), rejoin \
         {paced_rejoin_ms:.3} ms ({:.2}×)",
        paced_join_ms / paced_plain_ms,
        paced_rejoin_ms / paced_plain_ms
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
    let before = status_kib(joinsvc.process.id(), "VmHWM");
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
                confboot_proto::HEALTH_CHECK,
                &HealthCheckRequest::default(),
                Duration::from_secs(30),
            )
            .unwrap();
    }
    let peak = status_kib(joinsvc.process.id(), "VmHWM");
    println!(
        "joinsvc peak RSS: {before} KiB idle, {peak} KiB with 256 concurrent attested connections"
    );
    drop(clients);
}
