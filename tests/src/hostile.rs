//! What a hostile client on the network does, for tests and benchmarks that
//! show it loses.
//!
//! [`connect_from`] plays clients at many addresses (every 127.0.0.0/8
//! address is this machine). [`Attack`] runs every kind of hostile client
//! of issue 14 against one server at once, each kind from its own block of
//! source addresses, as a real attacker spreads over addresses to get past
//! per-peer limits: held idle connections, a ClientHello or a frame inside
//! TLS trickled a byte at a time, 4 GiB length prefixes on the raw socket
//! and inside TLS, garbage TLS records, floods of ClientHellos aborted at
//! once, and (against joinsvc) valid TLS with evidence from a TPM with other
//! PCRs, evidence bound to a wrong session, an attestation replayed from an
//! earlier connection, and a genuine node's attestation relayed by an
//! attacker that terminates TLS on both sides. Every kind counts what it did and what the server did
//! to it ([`KindReport`]).

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4, TcpStream};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::relay;
use confboot_atls::message::{self as atls_message, AttestationMessage};
use confboot_atls::{AtlsClient, AtlsError};
use confboot_attest::{AttestationError, EXTRA_DATA_LEN, Issuer, Variant};
use confboot_kms::seal::SealingKeyPair;
use confboot_proto::join::{IssueJoinTicketRequest, IssueJoinTicketResponse};
use confboot_wire::{self as rpc, Code, DeadlineSocket, Status};
use nix::sys::socket::{AddressFamily, SockFlag, SockType, SockaddrIn, bind, connect, socket};
use rustls::{ClientConnection, StreamOwned};

/// A TCP connection to `to` (IPv4) from the local address `from`: on
/// loopback every 127.0.0.0/8 address is this machine, so tests can play
/// clients at different addresses.
pub fn connect_from(from: Ipv4Addr, to: SocketAddr) -> std::io::Result<TcpStream> {
    let SocketAddr::V4(to) = to else {
        return Err(std::io::Error::other("IPv4 only"));
    };
    let fd = socket(
        AddressFamily::Inet,
        SockType::Stream,
        SockFlag::SOCK_CLOEXEC,
        None,
    )?;
    bind(
        fd.as_raw_fd(),
        &SockaddrIn::from(SocketAddrV4::new(from, 0)),
    )?;
    connect(fd.as_raw_fd(), &SockaddrIn::from(to))?;
    Ok(TcpStream::from(fd))
}

/// Source address `i` of the attacker kind numbered `kind`:
/// `127.<20 + kind>.<i / 200>.<1 + i % 200>`, never 127.0.0.1 (where honest
/// clients and the admin are).
pub fn source(kind: usize, i: usize) -> Ipv4Addr {
    Ipv4Addr::new(
        127,
        20 + (kind % 200) as u8,
        ((i / 200) % 256) as u8,
        1 + (i % 200) as u8,
    )
}

/// The server under attack.
#[derive(Clone)]
pub struct Target {
    /// Its address.
    pub addr: SocketAddr,
    /// An issuer the server trusts and whose measurements it admits (a
    /// genuine node that misbehaves): the attacks inside TLS use it to get
    /// past a server that requires client attestation. `None`: they connect
    /// without attesting (a server that does not require it).
    pub insider: Option<Arc<dyn Issuer>>,
    /// An issuer whose AK the server trusts but whose PCRs differ from the
    /// policy (a genuine TPM running another image): with it (only against
    /// joinsvc) the wrong-attestation attacks run: evidence with other PCRs;
    /// and, with the insider, evidence bound to a wrong session, an
    /// attestation replayed from an earlier connection, and the insider's
    /// attestation relayed from its own connection to the attacker.
    pub other_image: Option<Arc<dyn Issuer>>,
}

/// How hard each kind attacks.
#[derive(Clone, Debug)]
pub struct Plan {
    /// Idle TCP connections held open (reopened when the server closes them).
    pub idle: usize,
    /// Connections trickling a ClientHello, one byte per `trickle_interval`.
    pub trickle_hello: usize,
    /// Connections trickling a frame inside TLS, one byte per `trickle_interval`.
    pub trickle_frame: usize,
    /// Delay between two trickled bytes.
    pub trickle_interval: Duration,
    /// ClientHellos sent at once and aborted, per flood round.
    pub flood_burst: usize,
    /// Pause between two attempts of each looping attacker (4 GiB prefixes,
    /// garbage, flood rounds, wrong attestation): the attack rate.
    pub pause: Duration,
    /// Nice value the attackers' threads (and nothing else) run at, so that on
    /// one machine the attackers' own CPU competes less with the server and
    /// the honest clients (`None`: unchanged).
    pub nice: Option<i32>,
    /// The CPU the attackers' threads are pinned to (`taskset`), as remote
    /// attackers bring their own CPU (`None`: not pinned).
    pub cpu: Option<usize>,
    /// Whether the attackers that complete a TLS handshake in a loop run
    /// (a 4 GiB prefix inside TLS, and against joinsvc the wrong
    /// attestations). Each of their attempts costs the server a whole
    /// handshake, as an honest client's does, so no server refuses them for
    /// less; the other kinds cost the attacker a connection and a few bytes.
    pub full_handshakes: bool,
    /// Only the kind of this name runs (as [`Attack::report`] names it), to
    /// measure what each kind costs the server; `None`: every kind.
    pub only: Option<&'static str>,
}

impl Default for Plan {
    fn default() -> Self {
        Plan {
            idle: 500,
            trickle_hello: 50,
            trickle_frame: 4,
            trickle_interval: Duration::from_millis(100),
            flood_burst: 32,
            pause: Duration::from_millis(20),
            nice: None,
            cpu: None,
            full_handshakes: true,
            only: None,
        }
    }
}

/// What one kind of attacker did and what the server did to it.
#[derive(Default, Debug)]
pub struct Counters {
    /// TCP connections made.
    pub connections: AtomicU64,
    /// Connections refused before they were made (connect failed).
    pub connect_failed: AtomicU64,
    /// Connections the server closed, reset or refused the handshake of.
    pub closed_by_server: AtomicU64,
    /// RPC answers the server gave (a status trailer, e.g. RESOURCE_EXHAUSTED
    /// for a 4 GiB prefix or PERMISSION_DENIED for wrong attestation).
    pub answered: AtomicU64,
    /// Bytes written to the server.
    pub bytes_sent: AtomicU64,
    /// Join tickets obtained: an attacker must never get one.
    pub tickets: AtomicU64,
}

/// A snapshot of [`Counters`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct KindReport {
    /// See [`Counters::connections`].
    pub connections: u64,
    /// See [`Counters::connect_failed`].
    pub connect_failed: u64,
    /// See [`Counters::closed_by_server`].
    pub closed_by_server: u64,
    /// See [`Counters::answered`].
    pub answered: u64,
    /// See [`Counters::bytes_sent`].
    pub bytes_sent: u64,
    /// See [`Counters::tickets`].
    pub tickets: u64,
}

impl Counters {
    fn snapshot(&self) -> KindReport {
        let g = |a: &AtomicU64| a.load(Ordering::Relaxed);
        KindReport {
            connections: g(&self.connections),
            connect_failed: g(&self.connect_failed),
            closed_by_server: g(&self.closed_by_server),
            answered: g(&self.answered),
            bytes_sent: g(&self.bytes_sent),
            tickets: g(&self.tickets),
        }
    }

    fn add(a: &AtomicU64, n: usize) {
        a.fetch_add(n as u64, Ordering::Relaxed);
    }

    /// Connects from `src`, counting the attempt.
    fn connect(&self, src: Ipv4Addr, to: SocketAddr) -> Option<TcpStream> {
        match connect_from(src, to) {
            Ok(s) => {
                Counters::add(&self.connections, 1);
                let _ = s.set_nodelay(true);
                let _ = s.set_read_timeout(Some(Duration::from_secs(30)));
                let _ = s.set_write_timeout(Some(Duration::from_secs(30)));
                Some(s)
            }
            Err(_) => {
                Counters::add(&self.connect_failed, 1);
                None
            }
        }
    }

    /// Writes `bytes`, counting them; false when the server is gone.
    fn send(&self, w: &mut impl Write, bytes: &[u8]) -> bool {
        match w.write_all(bytes).and_then(|_| w.flush()) {
            Ok(()) => {
                Counters::add(&self.bytes_sent, bytes.len());
                true
            }
            Err(_) => false,
        }
    }
}

/// A running attack; [`Attack::stop`] ends it.
pub struct Attack {
    stop: Arc<AtomicBool>,
    kinds: BTreeMap<&'static str, Arc<Counters>>,
    threads: Vec<JoinHandle<()>>,
    /// [`Plan::only`].
    only: Option<&'static str>,
    /// The number the next kind started gets (its block of addresses).
    next_kind: usize,
}

impl Attack {
    /// Starts every kind of attacker `target` allows, as `plan` says.
    pub fn start(target: &Target, plan: &Plan) -> Attack {
        let mut attack = Attack {
            stop: Arc::new(AtomicBool::new(false)),
            kinds: BTreeMap::new(),
            threads: Vec::new(),
            only: plan.only,
            next_kind: 0,
        };
        let t = target.clone();
        let p = plan.clone();
        attack.spawn("idle connections", move |c, stop, k| {
            idle(&t, &p, c, stop, k)
        });
        let (t, p) = (target.clone(), plan.clone());
        attack.spawn("trickled ClientHello", move |c, stop, k| {
            trickle_hello(&t, &p, c, stop, k)
        });
        let (t, p) = (target.clone(), plan.clone());
        attack.spawn("trickled frame in TLS", move |c, stop, k| {
            trickle_frame(&t, &p, c, stop, k)
        });
        let (t, p) = (target.clone(), plan.clone());
        attack.spawn("4 GiB prefix, raw", move |c, stop, k| {
            looping(&p, stop, |i| huge_prefix_raw(&t, c, source(k, i)))
        });
        let (t, p) = (target.clone(), plan.clone());
        attack.spawn("garbage TLS", move |c, stop, k| {
            looping(&p, stop, |i| garbage(&t, c, source(k, i), i))
        });
        let (t, p) = (target.clone(), plan.clone());
        attack.spawn("handshake flood", move |c, stop, k| {
            looping(&p, stop, |i| flood(&t, p.flood_burst, c, k, i))
        });
        if !plan.full_handshakes {
            return attack;
        }
        let (t, p) = (target.clone(), plan.clone());
        attack.spawn("4 GiB prefix in TLS", move |c, stop, k| {
            looping(&p, stop, |i| huge_prefix_in_tls(&t, c, source(k, i)))
        });
        if let Some(other) = &target.other_image {
            let (t, p, image) = (target.clone(), plan.clone(), Arc::clone(other));
            attack.spawn("TLS, other PCRs", move |c, stop, k| {
                looping(&p, stop, |i| attested_join(&t, &image, c, source(k, i)))
            });
        }
        if let (Some(insider), Some(_)) = (&target.insider, &target.other_image) {
            let (t, p) = (target.clone(), plan.clone());
            let wrong: Arc<dyn Issuer> = Arc::new(WrongSession(Arc::clone(insider)));
            attack.spawn("TLS, wrong session", move |c, stop, k| {
                looping(&p, stop, |i| attested_join(&t, &wrong, c, source(k, i)))
            });
            let (t, p, recording) = (target.clone(), plan.clone(), Arc::clone(insider));
            attack.spawn("TLS, replayed attestation", move |c, stop, k| {
                let recorded = Mutex::new(None);
                looping(&p, stop, |i| {
                    replayed_join(&t, &recording, &recorded, c, source(k, i))
                })
            });
            let (t, p, insider) = (target.clone(), plan.clone(), Arc::clone(insider));
            attack.spawn("TLS, relayed attestation", move |c, stop, _| {
                looping(&p, stop, |_| relayed_join(&t, &insider, c))
            });
        }
        attack
    }

    fn spawn<F>(&mut self, name: &'static str, body: F)
    where
        F: FnOnce(&Counters, &AtomicBool, usize) + Send + 'static,
    {
        // Each kind keeps its block of source addresses whichever run.
        let kind = self.next_kind;
        self.next_kind += 1;
        if self.only.is_some_and(|only| only != name) {
            return;
        }
        let counters = Arc::new(Counters::default());
        self.kinds.insert(name, Arc::clone(&counters));
        let stop = Arc::clone(&self.stop);
        self.threads.push(
            std::thread::Builder::new()
                .name(format!("hostile-{kind}"))
                .spawn(move || body(&counters, &stop, kind))
                .expect("attacker thread"),
        );
    }

    /// Counters so far, by kind.
    pub fn report(&self) -> BTreeMap<&'static str, KindReport> {
        self.kinds.iter().map(|(k, c)| (*k, c.snapshot())).collect()
    }

    /// Stops every attacker, closes their connections, and returns the
    /// counters by kind.
    pub fn stop(mut self) -> BTreeMap<&'static str, KindReport> {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
        self.report()
    }
}

impl Drop for Attack {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

/// Pins thread `tid` to CPU `cpu` (`taskset -p`: one thread only).
pub fn pin_thread(tid: u32, cpu: usize) {
    let _ = std::process::Command::new("taskset")
        .args(["-p", "-c", &cpu.to_string(), &tid.to_string()])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status();
}

/// Process `pid` and every process descended from it (read from
/// `/proc/<pid>/task/<tid>/children`), `pid` first.
pub fn process_tree(pid: u32) -> Vec<u32> {
    let mut tree = vec![pid];
    let mut next = 0;
    while next < tree.len() {
        let parent = tree[next];
        next += 1;
        let Ok(tasks) = std::fs::read_dir(format!("/proc/{parent}/task")) else {
            continue;
        };
        for task in tasks.flatten() {
            let children =
                std::fs::read_to_string(task.path().join("children")).unwrap_or_default();
            tree.extend(
                children
                    .split_whitespace()
                    .filter_map(|c| c.parse::<u32>().ok()),
            );
        }
    }
    tree
}

/// Pins process `pid`, every thread of it and every process it started
/// (with theirs) to CPU `cpu`: a swtpm runs under a supervising shell, so
/// pinning the shell alone would leave the TPM where it was.
pub fn pin_process_tree(pid: u32, cpu: usize) {
    for p in process_tree(pid) {
        let _ = std::process::Command::new("taskset")
            .args(["-a", "-p", "-c", &cpu.to_string(), &p.to_string()])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status();
    }
}

/// Lowers the calling attacker thread's CPU priority and pins it when the
/// plan says so (Linux nice values and affinities are per thread).
fn renice_self(plan: &Plan) {
    let tid = nix::unistd::gettid().as_raw() as u32;
    if let Some(n) = plan.nice {
        renice(tid, n);
    }
    if let Some(cpu) = plan.cpu {
        pin_thread(tid, cpu);
    }
}

/// Sets the nice value of one thread or process `id` (`renice -p`).
fn renice(id: u32, nice: i32) {
    let _ = std::process::Command::new("renice")
        .args(["-n", &nice.to_string(), "-p", &id.to_string()])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status();
}

/// Lowers the CPU priority of process `pid`, its threads and every process
/// it started to `nice` (e.g. the swtpm of a node whose TPM an attacker
/// uses, under its supervising shell, so that its quotes compete as little
/// as the attackers' threads do).
pub fn renice_process_tree(pid: u32, nice: i32) {
    for p in process_tree(pid) {
        let tasks = std::fs::read_dir(format!("/proc/{p}/task"))
            .map(|d| {
                d.flatten()
                    .filter_map(|t| t.file_name().to_str()?.parse::<u32>().ok())
                    .collect()
            })
            .unwrap_or_else(|_| vec![p]);
        for t in tasks {
            renice(t, nice);
        }
    }
}

/// Runs `attempt` (numbered) until stopped, `plan.pause` apart.
fn looping(plan: &Plan, stop: &AtomicBool, mut attempt: impl FnMut(usize)) {
    renice_self(plan);
    let mut i = 0;
    while !stop.load(Ordering::Relaxed) {
        attempt(i);
        i = i.wrapping_add(1);
        std::thread::sleep(plan.pause);
    }
}

/// Whether the server has closed `s` (non-blocking look).
fn server_closed(s: &TcpStream) -> bool {
    let _ = s.set_nonblocking(true);
    let mut b = [0u8; 64];
    let closed = match s.peek(&mut b) {
        Ok(0) => true,
        Ok(_) => false,
        Err(e) => e.kind() != std::io::ErrorKind::WouldBlock,
    };
    let _ = s.set_nonblocking(false);
    closed
}

/// Reads until the server closes (or `limit` passes); true when it closed.
fn drain_until_closed(s: &mut impl Read, limit: Duration) -> bool {
    let until = Instant::now() + limit;
    let mut b = [0u8; 4096];
    while Instant::now() < until {
        match s.read(&mut b) {
            Ok(0) => return true,
            Ok(_) => {}
            Err(e) if rpc::frame::is_timeout(&e) => {}
            Err(_) => return true,
        }
    }
    false
}

/// Holds `n` idle connections; reopens each one the server closes.
fn idle(target: &Target, plan: &Plan, c: &Counters, stop: &AtomicBool, kind: usize) {
    renice_self(plan);
    let mut held: Vec<Option<TcpStream>> = (0..plan.idle).map(|_| None).collect();
    while !stop.load(Ordering::Relaxed) {
        for (i, slot) in held.iter_mut().enumerate() {
            if stop.load(Ordering::Relaxed) {
                break;
            }
            if slot.as_ref().is_some_and(server_closed) {
                Counters::add(&c.closed_by_server, 1);
                *slot = None;
            }
            if slot.is_none() {
                *slot = c.connect(source(kind, i), target.addr);
            }
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The bytes of a fresh TLS 1.3 ClientHello offering ALPN `confboot/2`.
pub fn client_hello() -> Vec<u8> {
    let conn = ClientConnection::new(
        Arc::new(relay::client_config()),
        rustls::pki_types::ServerName::try_from("hostile.example").expect("a DNS name"),
    );
    let mut out = Vec::new();
    conn.expect("a client connection")
        .write_tls(&mut out)
        .expect("write to a Vec");
    out
}

/// Trickles ClientHellos on `plan.trickle_hello` connections, one byte per
/// interval each, starting again when the server closes one.
fn trickle_hello(target: &Target, plan: &Plan, c: &Counters, stop: &AtomicBool, kind: usize) {
    renice_self(plan);
    let hello = client_hello();
    let mut conns: Vec<Option<(TcpStream, usize)>> =
        (0..plan.trickle_hello).map(|_| None).collect();
    while !stop.load(Ordering::Relaxed) {
        for (i, slot) in conns.iter_mut().enumerate() {
            if slot.is_none() {
                *slot = c.connect(source(kind, i), target.addr).map(|s| (s, 0));
            }
            let Some((s, at)) = slot else { continue };
            let sent = *at < hello.len() && c.send(s, &hello[*at..*at + 1]);
            if !sent || server_closed(s) {
                Counters::add(&c.closed_by_server, 1);
                *slot = None;
            } else {
                *at += 1;
            }
        }
        std::thread::sleep(plan.trickle_interval);
    }
}

/// An aTLS client stream over TCP (its socket holds deadlines).
type AtlsStream = StreamOwned<ClientConnection, DeadlineSocket<TcpStream>>;

/// An aTLS connection from `src` (attesting with the target's insider, if
/// any, and offering a sealing key as a node does, so that only the
/// attestation decides), as an RPC client.
fn atls_from(
    target: &Target,
    issuer: Option<Arc<dyn Issuer>>,
    c: &Counters,
    src: Ipv4Addr,
) -> Option<AtlsStream> {
    let sock = c.connect(src, target.addr)?;
    let key = SealingKeyPair::generate().public_key();
    match AtlsClient::new(Vec::new(), issuer).connect_sealing(
        sock,
        Duration::from_secs(20),
        Some(key),
    ) {
        Ok(conn) => Some(conn.stream),
        // The server read the attestation and said no (PERMISSION_DENIED):
        // an answer, and the end of the connection.
        Err(AtlsError::Refused(_)) => {
            Counters::add(&c.answered, 1);
            Counters::add(&c.closed_by_server, 1);
            None
        }
        Err(_) => {
            Counters::add(&c.closed_by_server, 1);
            None
        }
    }
}

/// Trickles a call header inside TLS on `plan.trickle_frame` connections,
/// one byte (one TLS record) per interval each.
fn trickle_frame(target: &Target, plan: &Plan, c: &Counters, stop: &AtomicBool, kind: usize) {
    renice_self(plan);
    let mut frame = vec![0u8, 0, 0, 0, 200];
    frame.extend([0x0a; 200]);
    let mut conns: Vec<Option<(AtlsStream, usize)>> =
        (0..plan.trickle_frame).map(|_| None).collect();
    while !stop.load(Ordering::Relaxed) {
        for (i, slot) in conns.iter_mut().enumerate() {
            if stop.load(Ordering::Relaxed) {
                break;
            }
            if slot.is_none() {
                *slot =
                    atls_from(target, target.insider.clone(), c, source(kind, i)).map(|s| (s, 0));
            }
            let Some((s, at)) = slot else { continue };
            let sent = *at < frame.len() && c.send(s, &frame[*at..*at + 1]);
            if !sent || server_closed(s.sock.get_ref()) {
                Counters::add(&c.closed_by_server, 1);
                *slot = None;
            } else {
                *at += 1;
            }
        }
        std::thread::sleep(plan.trickle_interval);
    }
}

/// A frame header announcing 4 GiB − 1 bytes.
const HUGE_PREFIX: [u8; 5] = [0x00, 0xff, 0xff, 0xff, 0xff];

fn huge_prefix_raw(target: &Target, c: &Counters, src: Ipv4Addr) {
    let Some(mut s) = c.connect(src, target.addr) else {
        return;
    };
    c.send(&mut s, &HUGE_PREFIX);
    if drain_until_closed(&mut s, Duration::from_secs(20)) {
        Counters::add(&c.closed_by_server, 1);
    }
}

fn huge_prefix_in_tls(target: &Target, c: &Counters, src: Ipv4Addr) {
    let Some(mut s) = atls_from(target, target.insider.clone(), c, src) else {
        return;
    };
    c.send(&mut s, &HUGE_PREFIX);
    // The server answers with a trailer (RESOURCE_EXHAUSTED) and closes.
    match rpc::frame::read_frame(&mut s, 64 * 1024) {
        Ok(f) if f.kind == rpc::frame::FrameKind::Trailer => {
            Counters::add(&c.answered, 1);
        }
        _ => {}
    }
    if drain_until_closed(&mut s, Duration::from_secs(20)) {
        Counters::add(&c.closed_by_server, 1);
    }
}

/// Garbage: every other attempt random bytes, else a record header that
/// passes for a ClientHello's followed by junk.
fn garbage(target: &Target, c: &Counters, src: Ipv4Addr, i: usize) {
    let Some(mut s) = c.connect(src, target.addr) else {
        return;
    };
    let mut junk = [0u8; 200];
    ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut junk)
        .expect("random bytes");
    if i.is_multiple_of(2) {
        junk[..6].copy_from_slice(&[0x16, 0x03, 0x01, 0x00, 195, 0x01]);
    }
    c.send(&mut s, &junk);
    if drain_until_closed(&mut s, Duration::from_secs(20)) {
        Counters::add(&c.closed_by_server, 1);
    }
}

/// Opens `burst` connections, sends a ClientHello on each, and closes them
/// all at once.
fn flood(target: &Target, burst: usize, c: &Counters, kind: usize, round: usize) {
    let hello = client_hello();
    let mut open = Vec::with_capacity(burst);
    for j in 0..burst {
        if let Some(mut s) = c.connect(source(kind, (round * burst + j) % 4000), target.addr)
            && c.send(&mut s, &hello)
        {
            open.push(s);
        }
    }
    drop(open);
}

/// Counts the outcome of a join call an attacker made.
fn count_join(c: &Counters, r: Result<IssueJoinTicketResponse, Status>) {
    match r {
        Ok(_) => Counters::add(&c.tickets, 1),
        Err(s) if s.code == Code::Unavailable => Counters::add(&c.closed_by_server, 1),
        Err(_) => {
            Counters::add(&c.answered, 1);
            Counters::add(&c.closed_by_server, 1);
        }
    }
}

fn join_request() -> IssueJoinTicketRequest {
    IssueJoinTicketRequest {
        disk_uuid: "0f3c6c1e-2b5d-4e8a-9c7f-1a2b3c4d5e6f".into(),
        ..Default::default()
    }
}

/// Valid TLS attesting with `issuer`, then a join call.
fn attested_join(target: &Target, issuer: &Arc<dyn Issuer>, c: &Counters, src: Ipv4Addr) {
    let Some(s) = atls_from(target, Some(Arc::clone(issuer)), c, src) else {
        return;
    };
    let mut client = rpc::Client::new(s);
    count_join(
        c,
        client.unary(
            confboot_proto::JOIN,
            &join_request(),
            Duration::from_secs(20),
        ),
    );
}

/// Evidence from a trusted TPM, bound to a session that is not this one.
struct WrongSession(Arc<dyn Issuer>);

impl Issuer for WrongSession {
    fn variant(&self) -> Variant {
        self.0.variant()
    }
    fn issue(&self, _extra: &[u8; EXTRA_DATA_LEN]) -> Result<Vec<u8>, AttestationError> {
        self.0.issue(&[0x42; EXTRA_DATA_LEN])
    }
}

/// Counts what the server answered an attestation sent on the attacker's
/// own session: a refusal (the server closes), or acceptance (then the
/// attacker asks for a ticket, which it must never get).
fn count_answer(c: &Counters, answer: Result<AttestationMessage, AtlsError>, s: relay::ToServer) {
    match answer {
        Ok(_) => {
            let mut client = rpc::Client::new(s);
            count_join(
                c,
                client.unary(
                    confboot_proto::JOIN,
                    &join_request(),
                    Duration::from_secs(20),
                ),
            );
        }
        Err(AtlsError::Refused(_)) => {
            Counters::add(&c.answered, 1);
            Counters::add(&c.closed_by_server, 1);
        }
        Err(_) => Counters::add(&c.closed_by_server, 1),
    }
}

/// Valid TLS, then the attestation message recorded from the attacker's
/// first connection (where the insider attested genuinely, and which is
/// closed without a call), then a join call if the server took it.
fn replayed_join(
    target: &Target,
    insider: &Arc<dyn Issuer>,
    recorded: &Mutex<Option<AttestationMessage>>,
    c: &Counters,
    src: Ipv4Addr,
) {
    let Some(sock) = c.connect(src, target.addr) else {
        return;
    };
    let Ok(mut s) = relay::tls_client(sock) else {
        Counters::add(&c.closed_by_server, 1);
        return;
    };
    let mut recorded = recorded.lock().unwrap_or_else(|p| p.into_inner());
    let Some(message) = recorded.clone() else {
        // The recording: an honest attestation, closed without a call.
        if let Ok(m) = relay::own_attestation(&s, insider.as_ref()) {
            let _ = atls_message::write(&mut s, &m);
            let _ = atls_message::read(&mut s);
            *recorded = Some(m);
        }
        return;
    };
    drop(recorded);
    if atls_message::write(&mut s, &message).is_err() {
        Counters::add(&c.closed_by_server, 1);
        return;
    }
    let answer = atls_message::read(&mut s);
    count_answer(c, answer, s);
}

/// A genuine node (the insider, attesting honestly) connects to the
/// attacker, which terminates its TLS, opens its own session with the
/// target and relays the node's attestation message there; then a join
/// call if the server took it.
fn relayed_join(target: &Target, insider: &Arc<dyn Issuer>, c: &Counters) {
    let Ok(listener) = std::net::TcpListener::bind("127.0.0.1:0") else {
        return;
    };
    let Ok(at) = listener.local_addr() else {
        return;
    };
    let node = AtlsClient::new(Vec::new(), Some(Arc::clone(insider)));
    let genuine = std::thread::spawn(move || {
        TcpStream::connect(at).map(|s| node.connect(s, Duration::from_secs(20)).is_ok())
    });
    Counters::add(&c.connections, 1);
    let relayed = relay::relay_one(&listener, target.addr, |_, m| m);
    let _ = genuine.join();
    match relayed {
        Ok(r) => match r.from_target {
            Err(AtlsError::Refused(_)) => {
                Counters::add(&c.answered, 1);
                Counters::add(&c.closed_by_server, 1);
            }
            Ok(_) => Counters::add(&c.tickets, 1),
            Err(_) => Counters::add(&c.closed_by_server, 1),
        },
        Err(_) => Counters::add(&c.closed_by_server, 1),
    }
}
