//! Every deadline is absolute over aTLS, on both sides: a peer that paces
//! its bytes (one every so often, each before a timeout that counts from
//! the read would fire) or stops reading is cut off when the deadline
//! passes, plus a little slack for the scheduler, not when its last byte
//! comes. Over TLS this needs more than a timeout per read of the TLS
//! stream: one such read reads the socket as often as it takes to get a
//! whole record, so every read and write of the socket is bounded.
//!
//! `crates/wire/tests/deadlines.rs` does the same over plain TCP.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use confboot_atls::{self as atls, AtlsClient, AtlsError, AtlsServer};
use confboot_proto::Message;
use confboot_proto::join::{IssueRejoinTicketRequest, IssueRejoinTicketResponse};
use confboot_testkit::deadlines::{DEADLINE, SLACK};
use confboot_util::stop::Stop;
use confboot_wire::frame::{self, FrameKind};
use confboot_wire::{ConnectionEnd, Router, ServerLimits, serve_connection};
use slow_call::{CALL, answer, assert_call_ends_at_the_deadline};

/// The slow call of wire's deadline tests, shared: one home for both.
#[path = "../../wire/tests/slow_call/mod.rs"]
mod slow_call;

/// Bound on what is not under test (the other side's handshake).
const LONG: Duration = Duration::from_secs(20);

fn listener() -> (TcpListener, SocketAddr) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    (l, addr)
}

/// A server without attestation on either side: what is tested is the
/// stream, not the evidence.
fn plain_server() -> AtlsServer {
    AtlsServer::new(None).unwrap()
}

/// Sends `bytes` one at a time, `every` apart, until they are all sent,
/// the peer is gone or `done` is raised.
fn trickle(sock: &mut impl Write, bytes: &[u8], every: Duration, done: &AtomicBool) {
    for byte in bytes {
        thread::sleep(every);
        if done.load(Ordering::SeqCst)
            || sock
                .write_all(&[*byte])
                .and_then(|()| sock.flush())
                .is_err()
        {
            return;
        }
    }
}

/// The TLS records a connection sends for `plaintext`.
fn records<C, D>(conn: &mut C, plaintext: &[u8]) -> Vec<u8>
where
    C: std::ops::DerefMut<Target = rustls::ConnectionCommon<D>>,
    D: rustls::SideData,
{
    conn.writer().write_all(plaintext).unwrap();
    let mut out = Vec::new();
    while conn.wants_write() {
        conn.write_tls(&mut out).unwrap();
    }
    out
}

#[test]
fn an_answer_trickled_a_byte_at_a_time_in_tls_records_ends_the_call_at_its_deadline() {
    let (l, addr) = listener();
    let done = Arc::new(AtomicBool::new(false));
    let server = {
        let done = Arc::clone(&done);
        thread::spawn(move || {
            let (sock, _) = l.accept().unwrap();
            let mut stream = plain_server().accept(sock, LONG).unwrap().stream;
            // The call header and the request, read whole.
            for _ in 0..2 {
                frame::read_frame(&mut stream, frame::DEFAULT_MAX_FRAME_LEN).unwrap();
            }
            // The answer's records (some 80 bytes, 16 s at this pace), a
            // byte at a time: every read of the client's socket gets one.
            let records = records(&mut stream.conn, &answer());
            trickle(
                &mut stream.sock,
                &records,
                Duration::from_millis(200),
                &done,
            );
        })
    };
    let (mut client, _) = atls::connect(addr, LONG, &[], None).unwrap();
    assert_call_ends_at_the_deadline(|| {
        client.unary(CALL, &IssueRejoinTicketRequest::default(), DEADLINE)
    });
    done.store(true, Ordering::SeqCst);
    drop(client);
    server.join().unwrap();
}

#[test]
fn a_request_a_tls_server_does_not_read_ends_the_call_at_its_deadline() {
    let (l, addr) = listener();
    let (finished, wait) = mpsc::channel::<()>();
    let server = thread::spawn(move || {
        // Completes the handshake, then reads nothing and keeps the
        // connection open: the socket buffers fill and the client's
        // writes block.
        let (sock, _) = l.accept().unwrap();
        let stream = plain_server().accept(sock, LONG).unwrap().stream;
        let _ = wait.recv();
        drop(stream);
    });
    let (mut client, _) = atls::connect(addr, LONG, &[], None).unwrap();
    // More than loopback's socket buffers hold (4 MiB here, the most
    // `net.ipv4.tcp_wmem` lets a sender have; the receiver reads nothing).
    let request = IssueRejoinTicketRequest {
        disk_uuid: "x".repeat(6 << 20),
    };
    assert_call_ends_at_the_deadline(|| client.unary(CALL, &request, DEADLINE));
    drop(client);
    finished.send(()).unwrap();
    server.join().unwrap();
}

/// A relay to `upstream` that passes what the client sends at once and
/// what the server sends one byte every `every`.
fn trickling_relay(upstream: SocketAddr, every: Duration) -> SocketAddr {
    let (l, addr) = listener();
    thread::spawn(move || {
        let Ok((mut client, _)) = l.accept() else {
            return;
        };
        let Ok(mut server) = TcpStream::connect(upstream) else {
            return;
        };
        let (Ok(mut client_in), Ok(mut server_out)) = (client.try_clone(), server.try_clone())
        else {
            return;
        };
        thread::spawn(move || std::io::copy(&mut client_in, &mut server_out));
        let mut byte = [0u8; 1];
        while let Ok(1) = server.read(&mut byte) {
            thread::sleep(every);
            if client.write_all(&byte).is_err() {
                return;
            }
        }
    });
    addr
}

#[test]
fn a_handshake_flight_trickled_a_byte_at_a_time_ends_the_connect_at_its_deadline() {
    let (l, upstream) = listener();
    thread::spawn(move || {
        if let Ok((sock, _)) = l.accept() {
            // The server's flight (over a kilobyte) takes minutes through
            // the relay; this server gives up long after the client.
            let _ = plain_server().accept(sock, LONG);
        }
    });
    let relay = trickling_relay(upstream, Duration::from_millis(200));
    let started = Instant::now();
    let result = atls::connect(relay, DEADLINE, &[], None).map(|_| ());
    let took = started.elapsed();
    assert!(
        took < DEADLINE + SLACK,
        "a {DEADLINE:?} connect took {took:?} ({result:?})"
    );
    assert_eq!(result.unwrap_err(), AtlsError::Timeout);
}

#[test]
fn a_request_trickled_in_a_tls_record_is_cut_off_at_the_frame_deadline() {
    let limits = ServerLimits {
        frame_timeout: DEADLINE,
        ..ServerLimits::default()
    };
    let (l, addr) = listener();
    let done = Arc::new(AtomicBool::new(false));
    let server = {
        let done = Arc::clone(&done);
        thread::spawn(move || {
            let (sock, _) = l.accept().unwrap();
            let mut stream = plain_server().accept(sock, LONG).unwrap().stream;
            let router = Router::new().unary(CALL, |_, _| Ok(IssueRejoinTicketResponse::default()));
            let end = serve_connection(&mut stream, &router, &limits, &Stop::new());
            done.store(true, Ordering::SeqCst);
            (end, Instant::now())
        })
    };
    let sock = TcpStream::connect(addr).unwrap();
    let mut stream = AtlsClient::new(vec![], None)
        .connect(sock, LONG)
        .unwrap()
        .stream;
    // The call header in a record of its own, at once.
    let header = confboot_proto::rpc::CallHeader {
        method: CALL.path().to_string(),
        timeout_ms: LONG.as_millis() as u64,
    };
    let mut plaintext = Vec::new();
    frame::write_frame(&mut plaintext, FrameKind::Message, &header.encode_to_vec()).unwrap();
    let header_records = records(&mut stream.conn, &plaintext);
    stream.sock.write_all(&header_records).unwrap();
    // The request in a record trickled a byte every 50 ms (over 10 s),
    // more often than the server looks at its stop signal (100 ms): every
    // read of the server's socket gets a byte.
    let request = IssueRejoinTicketRequest {
        disk_uuid: "x".repeat(200),
    };
    let mut plaintext = Vec::new();
    frame::write_frame(&mut plaintext, FrameKind::Message, &request.encode_to_vec()).unwrap();
    let request_records = records(&mut stream.conn, &plaintext);
    let started = Instant::now();
    trickle(
        &mut stream.sock,
        &request_records,
        Duration::from_millis(50),
        &done,
    );
    let (end, ended) = server.join().unwrap();
    let took = ended.duration_since(started);
    assert!(
        took < DEADLINE + SLACK,
        "a frame with a {DEADLINE:?} deadline was read for {took:?} ({end:?})"
    );
    assert!(matches!(end, ConnectionEnd::Io(_)), "{end:?}");
}

#[test]
fn an_answer_the_client_does_not_read_is_cut_off_at_its_deadline() {
    let limits = ServerLimits {
        io_timeout: DEADLINE,
        ..ServerLimits::default()
    };
    let (l, addr) = listener();
    let server = thread::spawn(move || {
        let (sock, _) = l.accept().unwrap();
        let mut stream = plain_server().accept(sock, LONG).unwrap().stream;
        let answered = Arc::new(std::sync::Mutex::new(None));
        let router = {
            let answered = Arc::clone(&answered);
            Router::new().unary(CALL, move |_, _| {
                *answered.lock().unwrap() = Some(Instant::now());
                // More than loopback's socket buffers hold.
                Ok(IssueRejoinTicketResponse {
                    state_disk_key: vec![7; 6 << 20],
                    measurement_secret: vec![],
                    generation: 0,
                    measurement_salt: vec![],
                    sealed_secrets: Vec::new(),
                })
            })
        };
        let end = serve_connection(&mut stream, &router, &limits, &Stop::new());
        let ended = Instant::now();
        let answered = answered.lock().unwrap().expect("the handler ran");
        (end, ended.duration_since(answered))
    });
    // A client that sends its call and then reads nothing.
    let sock = TcpStream::connect(addr).unwrap();
    let mut stream = AtlsClient::new(vec![], None)
        .connect(sock, LONG)
        .unwrap()
        .stream;
    let header = confboot_proto::rpc::CallHeader {
        method: CALL.path().to_string(),
        timeout_ms: LONG.as_millis() as u64,
    };
    let mut call = Vec::new();
    frame::write_frame(&mut call, FrameKind::Message, &header.encode_to_vec()).unwrap();
    frame::write_frame(
        &mut call,
        FrameKind::Message,
        &IssueRejoinTicketRequest::default().encode_to_vec(),
    )
    .unwrap();
    stream.write_all(&call).unwrap();
    stream.flush().unwrap();
    let (end, took) = server.join().unwrap();
    assert!(
        took < DEADLINE + SLACK,
        "an answer with a {DEADLINE:?} bound was sent for {took:?} ({end:?})"
    );
    assert!(matches!(end, ConnectionEnd::Io(_)), "{end:?}");
    drop(stream);
}
