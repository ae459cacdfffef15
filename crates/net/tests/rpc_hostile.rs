//! Peers that do not play fair with the RPC server: they trickle a frame one
//! byte at a time, announce a huge call header, keep calling on an admitted
//! connection, hold connections through a stop, or open many at once. Each
//! loses: it is cut off, refused or shut, and the server goes on.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::thread;
use std::time::Duration;

use confboot_net::listener::{self, PoolConfig};
use confboot_proto::Message;
use confboot_proto::Method;
use confboot_proto::join::{IssueRejoinTicketRequest, IssueRejoinTicketResponse};
use confboot_testkit::wait_for_count;
use confboot_util::stop::Stop;
use confboot_wire::frame::{self, FrameKind};
use confboot_wire::{
    CallPart, Client, ConnectionEnd, FrameError, Router, ServerLimits, StreamFailure, Violation,
    pipe, serve_connection,
};

const ECHO: Method<IssueRejoinTicketRequest, IssueRejoinTicketResponse> =
    Method::new("/test.API/Echo");
const LONG: Duration = Duration::from_secs(30);
/// Delay between two trickled bytes.
const TRICKLE: Duration = Duration::from_millis(20);

fn router() -> Router {
    Router::new().unary(ECHO, |_ctx, req: IssueRejoinTicketRequest| {
        Ok(IssueRejoinTicketResponse {
            state_disk_key: req.disk_uuid.into_bytes(),
            measurement_secret: vec![],
            generation: 0,
            measurement_salt: vec![],
            sealed_secrets: Vec::new(),
        })
    })
}

fn call_header(method: &str) -> Vec<u8> {
    confboot_proto::rpc::CallHeader {
        method: method.into(),
        timeout_ms: 30_000,
    }
    .encode_to_vec()
}

/// Writes `bytes` one at a time with [`TRICKLE`] between them; returns how
/// many were written before the other side went away.
fn trickle(w: &mut impl Write, bytes: &[u8]) -> usize {
    for (i, b) in bytes.iter().enumerate() {
        if w.write_all(&[*b]).and_then(|_| w.flush()).is_err() {
            return i;
        }
        thread::sleep(TRICKLE);
    }
    bytes.len()
}

/// A frame header announcing a `len`-byte message.
fn frame_header(len: u32) -> Vec<u8> {
    let mut h = vec![0u8];
    h.extend_from_slice(&len.to_be_bytes());
    h
}

fn limits_with_frame_timeout(t: Duration) -> ServerLimits {
    ServerLimits {
        frame_timeout: t,
        ..ServerLimits::default()
    }
}

#[test]
fn a_call_header_trickled_a_byte_at_a_time_is_cut_off_at_its_deadline() {
    let (mut server_end, mut client_end) = pipe::pair();
    let server = thread::spawn(move || {
        let limits = limits_with_frame_timeout(Duration::from_millis(300));
        serve_connection(&mut server_end, &router(), &limits, &Stop::new())
    });
    // A 100-byte header at one byte per 20 ms would take 2 s: each byte
    // comes well within any per-read timeout, the whole frame does not.
    client_end.write_all(&frame_header(100)).unwrap();
    let sent = trickle(&mut client_end, &[0x0a; 100]);
    let end = server.join().unwrap();
    assert!(
        matches!(
            &end,
            ConnectionEnd::Io(StreamFailure::Frame {
                part: CallPart::Header,
                error: FrameError::Timeout
            })
        ),
        "{end:?}"
    );
    assert!(sent < 100, "the whole frame got through: {end:?}");
}

#[test]
fn a_request_trickled_a_byte_at_a_time_is_cut_off_at_its_deadline() {
    let (mut server_end, mut client_end) = pipe::pair();
    let server = thread::spawn(move || {
        let limits = limits_with_frame_timeout(Duration::from_millis(300));
        serve_connection(&mut server_end, &router(), &limits, &Stop::new())
    });
    frame::write_frame(
        &mut client_end,
        FrameKind::Message,
        &call_header(ECHO.path()),
    )
    .unwrap();
    client_end.write_all(&frame_header(100)).unwrap();
    let sent = trickle(&mut client_end, &[0x0a; 100]);
    let end = server.join().unwrap();
    assert!(
        matches!(
            &end,
            ConnectionEnd::Io(StreamFailure::Frame {
                part: CallPart::Request,
                error: FrameError::Timeout
            })
        ),
        "{end:?}"
    );
    assert!(sent < 100, "the whole frame got through: {end:?}");
}

#[test]
fn a_call_header_over_four_kib_is_refused_from_its_length() {
    let (mut server_end, mut client_end) = pipe::pair();
    let server = thread::spawn(move || {
        serve_connection(
            &mut server_end,
            &router(),
            &ServerLimits::default(),
            &Stop::new(),
        )
    });
    client_end.write_all(&frame_header(5000)).unwrap();
    // Refused from the header alone: the payload need not come (it is sent
    // anyway, so a server that waited for it would not hang here).
    let _ = client_end.write_all(&vec![0x0a; 5000]);
    let end = server.join().unwrap();
    assert!(
        matches!(
            &end,
            ConnectionEnd::ProtocolError(Violation::Frame {
                part: CallPart::Header,
                error: FrameError::TooLarge { max: 4096, .. }
            })
        ),
        "{end:?}"
    );
}

#[test]
fn a_connection_limited_to_one_call_takes_no_second() {
    let (mut server_end, client_end) = pipe::pair();
    let server = thread::spawn(move || {
        let limits = ServerLimits {
            max_calls_per_connection: Some(1),
            ..ServerLimits::default()
        };
        serve_connection(&mut server_end, &router(), &limits, &Stop::new())
    });
    let mut client = Client::new(client_end);
    let req = IssueRejoinTicketRequest {
        disk_uuid: "first".into(),
    };
    let first: IssueRejoinTicketResponse = client.unary(ECHO, &req, LONG).unwrap();
    assert_eq!(first.state_disk_key, b"first");
    let end = server.join().unwrap();
    assert!(matches!(end, ConnectionEnd::Spent), "{end:?}");
    let second: Result<IssueRejoinTicketResponse, _> = client.unary(ECHO, &req, LONG);
    assert!(second.is_err(), "a second call was served");
}

/// Starts a server whose connections run `handler`, lets a peer trickle a
/// 100-byte frame at it, stops the server meanwhile; returns how many bytes
/// the peer got out before it was cut off.
fn bytes_trickled_through_a_stop<H>(handler: H) -> usize
where
    H: Fn(listener::PeerStream, &Stop) + Send + Sync + 'static,
{
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let config = PoolConfig {
        workers: 2,
        queue: 2,
        stop_grace: Duration::from_millis(200),
        ..PoolConfig::default()
    };
    let server = listener::spawn(l, config, handler).unwrap();
    let addr = server.local_addr();
    let trickler = thread::spawn(move || {
        let mut s = TcpStream::connect(addr).unwrap();
        s.write_all(&frame_header(100)).unwrap();
        trickle(&mut s, &[0x0a; 100])
    });
    wait_for_count(&server.stats().accepted, 1);
    thread::sleep(TRICKLE * 5);
    server.stop();
    trickler.join().unwrap()
}

#[test]
fn stopping_the_server_shuts_a_connection_that_does_not_finish() {
    let router = Arc::new(router());
    let sent = bytes_trickled_through_a_stop(move |mut sock, stop| {
        // No frame deadline to speak of: only the stop can end this peer.
        let limits = limits_with_frame_timeout(Duration::from_secs(600));
        serve_connection(&mut sock, &router, &limits, stop);
    });
    assert!(
        sent < 100,
        "the peer trickled its whole frame through the stop"
    );
}

#[test]
fn stopping_the_server_shuts_a_connection_whose_handler_does_not_watch_the_stop() {
    // Like a handshake: reads until the peer is done, each read bounded by
    // the socket timeout (10 s) that every trickled byte resets.
    let sent = bytes_trickled_through_a_stop(|mut sock, _stop| {
        let mut all = Vec::new();
        let _ = sock.read_to_end(&mut all);
    });
    assert!(
        sent < 100,
        "the peer trickled its whole frame through the stop"
    );
}

#[test]
fn one_peer_address_cannot_take_the_whole_pool() {
    let router = Arc::new(router());
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let config = PoolConfig {
        workers: 4,
        queue: 4,
        max_per_peer: 2,
        ..PoolConfig::default()
    };
    let server = listener::spawn(l, config, move |mut sock, stop| {
        serve_connection(&mut sock, &router, &ServerLimits::default(), stop);
    })
    .unwrap();
    let addr = server.local_addr();
    // Two idle connections from 127.0.0.1 are held; the third is closed.
    let _held: Vec<TcpStream> = (0..2).map(|_| TcpStream::connect(addr).unwrap()).collect();
    wait_for_count(&server.stats().accepted, 2);
    let mut third = TcpStream::connect(addr).unwrap();
    third.set_read_timeout(Some(LONG)).unwrap();
    let mut buf = [0u8; 1];
    assert_eq!(third.read(&mut buf).unwrap_or(0), 0, "closed at once");
    wait_for_count(&server.stats().refused, 1);
    assert_eq!(server.stats().accepted.load(Ordering::SeqCst), 2);
    server.stop();
}

/// A gate whose opening is a line: complete at its `\n`, invalid when it
/// starts with a NUL byte (as a frame header does).
fn line_gate(capacity: usize, timeout: Duration) -> listener::Gate {
    listener::Gate {
        judge: |b| match b {
            [0, ..] => listener::Opening::Invalid,
            _ if b.contains(&b'\n') => listener::Opening::Complete,
            _ => listener::Opening::Incomplete,
        },
        max_opening: 64,
        timeout,
        capacity,
        drop_half_closed: true,
        defer_accept: None,
    }
}

/// Whether the server closed `s` (reads end-of-stream or an error within `LONG`).
fn closed_by_server(s: &mut TcpStream) -> bool {
    s.set_read_timeout(Some(LONG)).unwrap();
    let mut buf = [0u8; 16];
    !matches!(s.read(&mut buf), Ok(n) if n > 0)
}

#[test]
fn peers_that_say_nothing_or_trickle_hold_no_worker_behind_a_gate() {
    // One worker, one queue slot: without the gate, one silent peer would
    // hold the worker and a second the queue.
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let config = PoolConfig {
        workers: 1,
        queue: 1,
        gate: Some(line_gate(64, LONG)),
        ..PoolConfig::default()
    };
    let server = listener::spawn(l, config, |mut sock, _stop| {
        let mut line = Vec::new();
        let mut b = [0u8; 1];
        while sock.read(&mut b).is_ok_and(|n| n == 1) && b[0] != b'\n' {
            line.push(b[0]);
        }
        line.reverse();
        line.push(b'\n');
        let _ = sock.write_all(&line);
    })
    .unwrap();
    let addr = server.local_addr();
    let silent: Vec<TcpStream> = (0..20).map(|_| TcpStream::connect(addr).unwrap()).collect();
    let tricklers: Vec<_> = (0..4)
        .map(|_| {
            thread::spawn(move || {
                let mut s = TcpStream::connect(addr).unwrap();
                trickle(&mut s, b"slow slow slow");
                s
            })
        })
        .collect();
    // Honest peers, each with its opening at once, are served meanwhile.
    for _ in 0..10 {
        let mut s = TcpStream::connect(addr).unwrap();
        s.set_read_timeout(Some(LONG)).unwrap();
        s.write_all(b"olleh\n").unwrap();
        let mut got = [0u8; 6];
        s.read_exact(&mut got).unwrap();
        assert_eq!(&got, b"hello\n");
    }
    assert_eq!(server.stats().accepted.load(Ordering::SeqCst), 10);
    assert_eq!(server.stats().refused.load(Ordering::SeqCst), 0);
    // A peer whose first byte cannot start an opening is closed at once.
    let mut bad = TcpStream::connect(addr).unwrap();
    bad.write_all(&[0, 0xff, 0xff, 0xff, 0xff]).unwrap();
    assert!(closed_by_server(&mut bad));
    wait_for_count(&server.stats().gate_closed, 1);
    drop(silent);
    for t in tricklers {
        t.join().unwrap();
    }
    server.stop();
}

/// The gate wakes for each new byte of a partial opening (it watches it
/// edge-triggered, its bytes being only peeked at): an opening trickled a
/// byte at a time is served once its last byte comes, not closed when its
/// time at the gate is up.
#[test]
fn an_opening_trickled_a_byte_at_a_time_passes_the_gate_once_complete() {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let config = PoolConfig {
        workers: 1,
        queue: 1,
        gate: Some(line_gate(8, LONG)),
        ..PoolConfig::default()
    };
    let server = listener::spawn(l, config, |mut sock, _stop| {
        let mut line = [0u8; 6];
        if sock.read_exact(&mut line).is_ok() {
            line[..5].reverse();
            let _ = sock.write_all(&line);
        }
    })
    .unwrap();
    for _ in 0..3 {
        let mut s = TcpStream::connect(server.local_addr()).unwrap();
        s.set_nodelay(true).unwrap();
        s.set_read_timeout(Some(LONG)).unwrap();
        assert_eq!(trickle(&mut s, b"olleh\n"), 6);
        let mut got = [0u8; 6];
        s.read_exact(&mut got).unwrap();
        assert_eq!(&got, b"hello\n");
    }
    assert_eq!(server.stats().accepted.load(Ordering::SeqCst), 3);
    assert_eq!(server.stats().gate_closed.load(Ordering::SeqCst), 0);
    server.stop();
}

#[test]
fn a_full_gate_evicts_the_connection_waiting_longest_and_late_ones_are_closed() {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let config = PoolConfig {
        workers: 1,
        queue: 1,
        gate: Some(line_gate(4, Duration::from_millis(500))),
        ..PoolConfig::default()
    };
    let server = listener::spawn(l, config, |_sock, _stop| {}).unwrap();
    let addr = server.local_addr();
    let mut first = TcpStream::connect(addr).unwrap();
    wait_for_count(&server.stats().gate_peak, 1);
    let mut rest: Vec<TcpStream> = (0..4).map(|_| TcpStream::connect(addr).unwrap()).collect();
    // Five for four places: the first is evicted, the gate never holds more.
    assert!(closed_by_server(&mut first));
    wait_for_count(&server.stats().evicted, 1);
    assert_eq!(server.stats().gate_peak.load(Ordering::SeqCst), 4);
    // The others are closed once their time is up.
    for s in rest.iter_mut() {
        assert!(closed_by_server(s));
    }
    wait_for_count(&server.stats().gate_closed, 5);
    assert_eq!(server.stats().accepted.load(Ordering::SeqCst), 0);
    server.stop();
}

/// A server of one worker and one queue slot behind a line gate whose
/// connections take a first line (the opening), then wait for a second
/// (their reads mark them as waiting for the peer), then answer `ok`.
fn two_line_server(preempt_after: Option<Duration>) -> listener::ServerHandle {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let config = PoolConfig {
        workers: 1,
        queue: 1,
        gate: Some(line_gate(64, LONG)),
        preempt_after,
        ..PoolConfig::default()
    };
    listener::spawn(l, config, |mut sock, _stop| {
        sock.set_read_timeout(Some(LONG)).unwrap();
        let mut newlines = 0;
        let mut b = [0u8; 1];
        while newlines < 2 {
            match sock.read(&mut b) {
                Ok(1) if b[0] == b'\n' => newlines += 1,
                Ok(1) => {}
                _ => return,
            }
        }
        let _ = sock.write_all(b"ok\n");
    })
    .unwrap()
}

/// Two peers that pass the gate and say nothing more: the first takes the
/// worker, the second (once the worker has the first) the queue slot.
fn hold_worker_and_queue(server: &listener::ServerHandle) -> Vec<TcpStream> {
    let mut held = Vec::new();
    for n in 1..=2 {
        let mut s = TcpStream::connect(server.local_addr()).unwrap();
        s.write_all(b"hello\n").unwrap();
        wait_for_count(&server.stats().accepted, n);
        // The worker takes it off the queue (a moment).
        thread::sleep(Duration::from_millis(50));
        held.push(s);
    }
    held
}

#[test]
fn a_peer_that_holds_its_worker_waiting_is_preempted_for_the_next_connection() {
    let server = two_line_server(Some(Duration::from_millis(300)));
    let addr = server.local_addr();
    // Two peers pass the gate and then say nothing: one holds the worker,
    // the other the queue slot.
    let mut held = hold_worker_and_queue(&server);
    // An honest peer is served all the same: the silent ones are shut once
    // they have waited 300 ms while others were queued.
    let mut honest = TcpStream::connect(addr).unwrap();
    honest.set_read_timeout(Some(LONG)).unwrap();
    honest.write_all(b"hello\nthere\n").unwrap();
    let mut got = [0u8; 3];
    honest.read_exact(&mut got).unwrap();
    assert_eq!(&got, b"ok\n");
    assert!(server.stats().preempted.load(Ordering::SeqCst) >= 1);
    for s in held.iter_mut() {
        assert!(closed_by_server(s), "a silent peer kept its connection");
    }
    server.stop();
}

#[test]
fn without_preemption_a_silent_peer_keeps_the_pool_and_a_worker_at_work_is_never_preempted() {
    // The guard off: the silent peers keep the worker and the queue, and a
    // third connection waits at the gate, unserved.
    let server = two_line_server(None);
    let addr = server.local_addr();
    let _held = hold_worker_and_queue(&server);
    let mut third = TcpStream::connect(addr).unwrap();
    third.write_all(b"hello\nthere\n").unwrap();
    third
        .set_read_timeout(Some(Duration::from_millis(1500)))
        .unwrap();
    let mut got = [0u8; 3];
    let read = third.read(&mut got);
    assert!(
        read.as_ref().is_err_and(frame::is_timeout),
        "the third peer was answered or closed: {read:?}"
    );
    assert_eq!(server.stats().preempted.load(Ordering::SeqCst), 0);
    server.stop();

    // A handler at work (not waiting for its peer) keeps its worker; with
    // no gate, a connection finding no room is closed.
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let config = PoolConfig {
        workers: 1,
        queue: 1,
        preempt_after: Some(Duration::from_millis(100)),
        ..PoolConfig::default()
    };
    let server = listener::spawn(l, config, |mut sock, _stop| {
        thread::sleep(Duration::from_millis(800));
        let _ = sock.write_all(b"done\n");
    })
    .unwrap();
    let addr = server.local_addr();
    let mut working = TcpStream::connect(addr).unwrap();
    wait_for_count(&server.stats().accepted, 1);
    thread::sleep(Duration::from_millis(50));
    let _queued = TcpStream::connect(addr).unwrap();
    wait_for_count(&server.stats().accepted, 2);
    thread::sleep(Duration::from_millis(300));
    let mut third = TcpStream::connect(addr).unwrap();
    assert!(closed_by_server(&mut third));
    working.set_read_timeout(Some(LONG)).unwrap();
    let mut got = [0u8; 5];
    working.read_exact(&mut got).unwrap();
    assert_eq!(&got, b"done\n");
    assert_eq!(server.stats().preempted.load(Ordering::SeqCst), 0);
    server.stop();
}

#[test]
fn a_peer_that_sends_its_opening_and_shuts_its_side_gets_no_worker() {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let served = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let config = PoolConfig {
        gate: Some(line_gate(64, LONG)),
        ..PoolConfig::default()
    };
    let server = {
        let served = Arc::clone(&served);
        listener::spawn(l, config, move |_sock, _stop| {
            served.fetch_add(1, Ordering::SeqCst);
        })
        .unwrap()
    };
    for _ in 0..20 {
        let s = TcpStream::connect(server.local_addr()).unwrap();
        // The opening and the FIN in one segment (MSG_MORE holds the bytes
        // back, the shutdown sends them with its FIN), so the server never
        // sees the opening without the close: otherwise a gate that looked
        // between the two would rightly hand the connection on.
        let more = nix::sys::socket::MsgFlags::from_bits_retain(nix::libc::MSG_MORE);
        let sent = nix::sys::socket::send(s.as_raw_fd(), b"hello\n", more).unwrap();
        assert_eq!(sent, 6);
        s.shutdown(std::net::Shutdown::Write).unwrap();
    }
    wait_for_count(&server.stats().gate_closed, 20);
    // One that keeps its side open is served.
    let mut s = TcpStream::connect(server.local_addr()).unwrap();
    s.write_all(b"hello\n").unwrap();
    assert!(closed_by_server(&mut s));
    assert_eq!(served.load(Ordering::SeqCst), 1);
    server.stop();
}
