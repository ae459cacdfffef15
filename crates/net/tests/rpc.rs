//! The hand-framed RPC end to end: over in-memory pipes, over TCP, and over
//! TCP + rustls (plain TLS 1.3; attestation has its own tests).

mod common;

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::Arc;
use std::thread;
use std::time::Duration;

use confboot_net::listener::{self, PoolConfig};
use confboot_proto::init::{InitResponse, LogResponseType, init_response};
use confboot_proto::join::{IssueRejoinTicketRequest, IssueRejoinTicketResponse};
use confboot_proto::{Message, Method};
use confboot_testkit::{XorShift, wait_for_count};
use confboot_util::stop::Stop;
use confboot_wire::frame::{self, FrameKind};
use confboot_wire::{
    Client, Code, ConnectionEnd, Router, ServerLimits, Status, pipe, serve_connection,
};

/// The test methods: each takes a rejoin request (its disk_uuid is the argument).
type TestMethod<Resp> = Method<IssueRejoinTicketRequest, Resp>;
const ECHO: TestMethod<IssueRejoinTicketResponse> = Method::new("/test.API/Echo");
const SLOW: TestMethod<IssueRejoinTicketResponse> = Method::new("/test.API/Slow");
const STREAM: TestMethod<InitResponse> = Method::new("/test.API/Stream");
const FAIL: TestMethod<IssueRejoinTicketResponse> = Method::new("/test.API/Fail");
const BLOCK: TestMethod<IssueRejoinTicketResponse> = Method::new("/test.API/Block");
const LONG: Duration = Duration::from_secs(30);

/// A router with the methods the tests call. `Slow` sleeps for as many
/// milliseconds as the request's disk_uuid says.
fn router() -> Router {
    Router::new()
        .unary(ECHO, |_ctx, req: IssueRejoinTicketRequest| {
            Ok(IssueRejoinTicketResponse {
                state_disk_key: req.disk_uuid.into_bytes(),
                measurement_secret: vec![],
                generation: 0,
                measurement_salt: vec![],
                sealed_secrets: Vec::new(),
            })
        })
        .unary(SLOW, |_ctx, req: IssueRejoinTicketRequest| {
            thread::sleep(Duration::from_millis(req.disk_uuid.parse().unwrap_or(0)));
            Ok(IssueRejoinTicketResponse::default())
        })
        .unary(
            FAIL,
            |_ctx, _req: IssueRejoinTicketRequest| -> Result<IssueRejoinTicketResponse, Status> {
                Err(Status::permission_denied("measurements differ"))
            },
        )
        .server_streaming(STREAM, |_ctx, req: IssueRejoinTicketRequest, sink| {
            let n: u32 = req
                .disk_uuid
                .parse()
                .map_err(|_| Status::invalid_argument("count"))?;
            for i in 0..n {
                sink.send(&InitResponse {
                    kind: Some(init_response::Kind::Log(LogResponseType {
                        log: format!("line {i}").into_bytes(),
                    })),
                })?;
            }
            Ok(())
        })
}

fn req(s: &str) -> IssueRejoinTicketRequest {
    IssueRejoinTicketRequest {
        disk_uuid: s.to_string(),
    }
}

/// Serves one pipe connection on a thread; returns the client end and the server's result.
fn pipe_server(limits: ServerLimits) -> (pipe::PipeEnd, thread::JoinHandle<ConnectionEnd>) {
    let (mut server_end, client_end) = pipe::pair();
    let router = router();
    let h =
        thread::spawn(move || serve_connection(&mut server_end, &router, &limits, &Stop::new()));
    (client_end, h)
}

fn echo<T: confboot_wire::Transport>(c: &mut Client<T>, s: &str) -> Result<String, Status> {
    let r: IssueRejoinTicketResponse = c.unary(ECHO, &req(s), LONG)?;
    Ok(String::from_utf8(r.state_disk_key.clone()).unwrap())
}

#[test]
fn round_trip_over_pipe() {
    let (end, server) = pipe_server(ServerLimits::default());
    let mut c = Client::new(end);
    assert_eq!(echo(&mut c, "hello").unwrap(), "hello");
    let err = c
        .unary::<_, IssueRejoinTicketResponse>(FAIL, &req(""), LONG)
        .unwrap_err();
    assert_eq!(err, Status::permission_denied("measurements differ"));
    // A status from the server leaves the connection usable.
    assert_eq!(echo(&mut c, "again").unwrap(), "again");
    drop(c);
    assert!(matches!(server.join().unwrap(), ConnectionEnd::Closed));
}

#[test]
fn unknown_method_is_unimplemented_and_connection_survives() {
    let (end, _server) = pipe_server(ServerLimits::default());
    let mut c = Client::new(end);
    let err = c
        .unary::<_, IssueRejoinTicketResponse>(Method::new("/nope.API/Missing"), &req(""), LONG)
        .unwrap_err();
    assert_eq!(err.code, Code::Unimplemented);
    assert!(err.message.contains("/nope.API/Missing"), "{err}");
    assert_eq!(echo(&mut c, "still here").unwrap(), "still here");
}

#[test]
fn huge_length_prefix_is_refused_with_resource_exhausted() {
    let (mut end, server) = pipe_server(ServerLimits::default());
    // A call header announcing 4 GiB - 1 bytes.
    end.write_all(&[0x00, 0xff, 0xff, 0xff, 0xff]).unwrap();
    let f = frame::read_frame(&mut end, 1024).unwrap();
    assert_eq!(f.kind, FrameKind::Trailer);
    let s = Status::from_proto(confboot_proto::rpc::Status::decode(&f.payload[..]).unwrap());
    assert_eq!(s.code, Code::ResourceExhausted, "{s}");
    assert!(matches!(
        server.join().unwrap(),
        ConnectionEnd::ProtocolError(_)
    ));

    // Same for the request message after a valid header, and with a lower limit.
    let limits = ServerLimits {
        max_frame_len: 1000,
        ..ServerLimits::default()
    };
    let (mut end, server) = pipe_server(limits);
    let header = confboot_proto::rpc::CallHeader {
        method: ECHO.path().into(),
        timeout_ms: 1000,
    };
    frame::write_frame(&mut end, FrameKind::Message, &header.encode_to_vec()).unwrap();
    frame::write_frame(&mut end, FrameKind::Message, &[0u8; 1001]).unwrap();
    let f = frame::read_frame(&mut end, 1024).unwrap();
    let s = Status::from_proto(confboot_proto::rpc::Status::decode(&f.payload[..]).unwrap());
    assert_eq!(s.code, Code::ResourceExhausted, "{s}");
    assert!(matches!(
        server.join().unwrap(),
        ConnectionEnd::ProtocolError(_)
    ));
}

#[test]
fn response_over_client_limit_is_refused() {
    let (end, _server) = pipe_server(ServerLimits::default());
    let mut c = Client::new(end).with_max_frame_len(8);
    let err = echo(&mut c, "a response longer than eight bytes").unwrap_err();
    assert_eq!(err.code, Code::ResourceExhausted, "{err}");
    // The stream is mid-frame now: the client refuses to go on.
    assert_eq!(echo(&mut c, "x").unwrap_err().code, Code::Unavailable);
}

#[test]
fn truncated_frames_end_the_connection() {
    let header = confboot_proto::rpc::CallHeader {
        method: ECHO.path().into(),
        timeout_ms: 1000,
    };
    let mut call = Vec::new();
    frame::write_frame(&mut call, FrameKind::Message, &header.encode_to_vec()).unwrap();
    frame::write_frame(&mut call, FrameKind::Message, &req("abc").encode_to_vec()).unwrap();
    for cut in 1..call.len() {
        let (mut end, server) = pipe_server(ServerLimits::default());
        end.write_all(&call[..cut]).unwrap();
        drop(end);
        let why = server.join().unwrap();
        assert!(matches!(why, ConnectionEnd::Io(_)), "cut at {cut}: {why:?}");
    }
}

#[test]
fn random_garbage_never_panics_and_is_answered_or_dropped() {
    let mut rng = XorShift::new(0x5eed_cafe);
    let limits = ServerLimits {
        io_timeout: Duration::from_millis(200),
        ..ServerLimits::default()
    };
    for i in 0..300 {
        let len = 1 + (rng.next_u64() % 64) as usize;
        let mut junk = rng.bytes(len);
        if i % 3 == 0 {
            junk[0] = 0x00; // a message flag, so the length and payload get parsed
        }
        let (mut end, server) = pipe_server(limits.clone());
        end.write_all(&junk).unwrap();
        // Read whatever the server answers until it closes.
        let mut answer = Vec::new();
        let _ = end.read_to_end(&mut answer);
        drop(end);
        let why = server.join().expect("server thread must not panic");
        assert!(
            !matches!(why, ConnectionEnd::Idle | ConnectionEnd::Stopped),
            "{why:?}"
        );
        if !answer.is_empty() {
            let f = frame::read_frame(&mut &answer[..], 1 << 20).unwrap();
            assert_eq!(f.kind, FrameKind::Trailer, "input {junk:02x?}");
            let s =
                Status::from_proto(confboot_proto::rpc::Status::decode(&f.payload[..]).unwrap());
            assert_ne!(s.code, Code::Ok, "garbage {junk:02x?} got OK");
        }
    }
}

#[test]
fn deadline_exceeded_on_client_and_server() {
    let (end, _server) = pipe_server(ServerLimits::default());
    let mut c = Client::new(end);
    let err = c
        .unary::<_, IssueRejoinTicketResponse>(SLOW, &req("300"), Duration::from_millis(50))
        .unwrap_err();
    assert_eq!(err.code, Code::DeadlineExceeded, "{err}");
    // The answer may still be on its way: this connection is not reused.
    assert_eq!(echo(&mut c, "x").unwrap_err().code, Code::Unavailable);

    // The server enforces the caller's deadline too: read its trailer raw.
    let (mut end, _server) = pipe_server(ServerLimits::default());
    let header = confboot_proto::rpc::CallHeader {
        method: SLOW.path().into(),
        timeout_ms: 20,
    };
    frame::write_frame(&mut end, FrameKind::Message, &header.encode_to_vec()).unwrap();
    frame::write_frame(&mut end, FrameKind::Message, &req("100").encode_to_vec()).unwrap();
    let f = frame::read_frame(&mut end, 1024).unwrap();
    assert_eq!(
        f.kind,
        FrameKind::Trailer,
        "no response message after the deadline"
    );
    let s = Status::from_proto(confboot_proto::rpc::Status::decode(&f.payload[..]).unwrap());
    assert_eq!(s.code, Code::DeadlineExceeded, "{s}");
}

#[test]
fn server_streaming_delivers_every_message_in_order() {
    let (end, _server) = pipe_server(ServerLimits::default());
    let mut c = Client::new(end);
    let mut lines = Vec::new();
    c.server_streaming(STREAM, &req("500"), LONG, |m: InitResponse| {
        match m.kind {
            Some(init_response::Kind::Log(l)) => lines.push(String::from_utf8(l.log).unwrap()),
            other => panic!("unexpected {other:?}"),
        }
        Ok(())
    })
    .unwrap();
    assert_eq!(lines.len(), 500);
    assert!(
        lines
            .iter()
            .enumerate()
            .all(|(i, l)| *l == format!("line {i}"))
    );
    // A stream that ends with an error status delivers the status.
    let err = c
        .server_streaming(STREAM, &req("many"), LONG, |_: InitResponse| Ok(()))
        .unwrap_err();
    assert_eq!(err.code, Code::InvalidArgument);
    // Zero messages is a valid stream.
    c.server_streaming(STREAM, &req("0"), LONG, |_: InitResponse| {
        panic!("no message expected")
    })
    .unwrap();
}

#[test]
fn many_sequential_calls_on_one_connection() {
    let (end, _server) = pipe_server(ServerLimits::default());
    let mut c = Client::new(end);
    for i in 0..2000 {
        assert_eq!(echo(&mut c, &i.to_string()).unwrap(), i.to_string());
    }
}

#[test]
fn idle_connection_is_closed_by_server() {
    let limits = ServerLimits {
        idle_timeout: Duration::from_millis(50),
        ..ServerLimits::default()
    };
    let (end, server) = pipe_server(limits);
    assert!(matches!(server.join().unwrap(), ConnectionEnd::Idle));
    drop(end);
}

/// Starts a TLS RPC server on loopback with the test router.
fn tls_server(config: PoolConfig, tls: Arc<rustls::ServerConfig>) -> listener::ServerHandle {
    tls_server_with(router(), config, tls)
}

fn tls_server_with(
    router: Router,
    config: PoolConfig,
    tls: Arc<rustls::ServerConfig>,
) -> listener::ServerHandle {
    let router = Arc::new(router);
    let limits = ServerLimits::default();
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    listener::spawn(l, config, move |sock, stop| {
        let conn = rustls::ServerConnection::new(tls.clone()).unwrap();
        let mut stream = rustls::StreamOwned::new(conn, sock);
        serve_connection(&mut stream, &router, &limits, stop);
    })
    .unwrap()
}

#[test]
fn round_trip_over_tcp_and_tls() {
    let (server_tls, client_tls) = common::tls_pair();
    let server = tls_server(PoolConfig::default(), server_tls);
    let mut c = Client::new(common::tls_connect(&client_tls, server.local_addr()));
    assert_eq!(echo(&mut c, "over tls").unwrap(), "over tls");
    let mut n = 0;
    c.server_streaming(STREAM, &req("100"), LONG, |_: InitResponse| {
        n += 1;
        Ok(())
    })
    .unwrap();
    assert_eq!(n, 100);
    drop(c);
    server.stop();
}

#[test]
fn sixty_four_concurrent_tls_clients() {
    let (server_tls, client_tls) = common::tls_pair();
    let server = tls_server(
        PoolConfig {
            workers: 16,
            queue: 64,
            ..PoolConfig::default()
        },
        server_tls,
    );
    let addr = server.local_addr();
    let clients: Vec<_> = (0..64)
        .map(|i| {
            let client_tls = client_tls.clone();
            thread::spawn(move || {
                let mut c = Client::new(common::tls_connect(&client_tls, addr));
                for j in 0..20 {
                    let msg = format!("{i}-{j}");
                    assert_eq!(echo(&mut c, &msg).unwrap(), msg);
                }
            })
        })
        .collect();
    for c in clients {
        c.join().unwrap();
    }
    let stats = server.stats();
    assert_eq!(
        stats.accepted.load(std::sync::atomic::Ordering::Relaxed),
        64
    );
    assert_eq!(stats.refused.load(std::sync::atomic::Ordering::Relaxed), 0);
    server.stop();
}

#[test]
fn full_pool_refuses_new_connections_at_once() {
    let (started_tx, started_rx) = crossbeam_channel::bounded::<()>(1);
    let (release_tx, release_rx) = crossbeam_channel::bounded::<()>(1);
    let router = Arc::new(
        Router::new().unary(ECHO, move |_ctx, r: IssueRejoinTicketRequest| {
            if r.disk_uuid == "block" {
                started_tx.send(()).unwrap();
                release_rx.recv().unwrap();
            }
            Ok(IssueRejoinTicketResponse::default())
        }),
    );
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let config = PoolConfig {
        workers: 1,
        queue: 1,
        ..PoolConfig::default()
    };
    let server = listener::spawn(l, config, move |mut sock, stop| {
        serve_connection(&mut sock, &router, &ServerLimits::default(), stop);
    })
    .unwrap();
    let addr = server.local_addr();

    // Connection 1 occupies the only worker.
    let busy = thread::spawn(move || {
        let mut c = Client::new(TcpStream::connect(addr).unwrap());
        c.unary::<_, IssueRejoinTicketResponse>(ECHO, &req("block"), LONG)
            .unwrap();
    });
    started_rx.recv().unwrap();
    // Connection 2 waits in the queue.
    let queued = TcpStream::connect(addr).unwrap();
    wait_for_count(&server.stats().accepted, 2);
    // Connection 3 finds the pool full and is closed: the call fails as UNAVAILABLE,
    // not by running into its deadline.
    let mut c3 = Client::new(TcpStream::connect(addr).unwrap());
    let err = c3
        .unary::<_, IssueRejoinTicketResponse>(ECHO, &req("x"), LONG)
        .unwrap_err();
    assert_eq!(err.code, Code::Unavailable, "{err}");
    assert_eq!(
        server
            .stats()
            .refused
            .load(std::sync::atomic::Ordering::SeqCst),
        1
    );

    release_tx.send(()).unwrap();
    busy.join().unwrap();
    // The queued connection is served once the worker is free.
    let mut c2 = Client::new(queued);
    c2.unary::<_, IssueRejoinTicketResponse>(ECHO, &req("y"), LONG)
        .unwrap();
    drop(c2);
    server.stop();
}

/// TLS and the RPC server say nothing about waiting for the peer: the
/// reads of the stream the pool hands out do. With every worker busy and the
/// queue full, a connection idle between calls (its reads time out every
/// `stop_poll` and are tried again: one wait) is shut for a newcomer once it
/// has waited `preempt_after`, and so is one waiting in its TLS handshake;
/// one whose handler works (here: blocked on something else than its peer)
/// is not, though its call began earlier.
#[test]
fn a_protocol_that_never_mentions_waiting_is_preempted_while_it_waits_never_while_it_works() {
    use std::sync::atomic::Ordering::SeqCst;
    let (server_tls, client_tls) = common::tls_pair();
    let (started_tx, started_rx) = crossbeam_channel::bounded::<()>(1);
    let (release_tx, release_rx) = crossbeam_channel::bounded::<()>(1);
    let router = Router::new().unary(ECHO, move |_ctx, r: IssueRejoinTicketRequest| {
        if r.disk_uuid == "work" {
            started_tx.send(()).unwrap();
            release_rx.recv_timeout(LONG).unwrap();
        }
        Ok(IssueRejoinTicketResponse {
            state_disk_key: r.disk_uuid.into_bytes(),
            measurement_secret: vec![],
            generation: 0,
            measurement_salt: vec![],
            sealed_secrets: Vec::new(),
        })
    });
    let config = PoolConfig {
        workers: 2,
        queue: 1,
        preempt_after: Some(Duration::from_millis(300)),
        stop_grace: Duration::from_millis(200),
        ..PoolConfig::default()
    };
    let server = tls_server_with(router, config, server_tls);
    let addr = server.local_addr();

    // One worker: a call whose handler works until released.
    let working = {
        let client_tls = Arc::clone(&client_tls);
        thread::spawn(move || {
            echo(
                &mut Client::new(common::tls_connect(&client_tls, addr)),
                "work",
            )
        })
    };
    started_rx.recv_timeout(LONG).unwrap();
    // The other: a connection that made its call and waits for the next.
    let mut idle = Client::new(common::tls_connect(&client_tls, addr));
    assert_eq!(echo(&mut idle, "hello").unwrap(), "hello");
    // The queue: a connection that says nothing.
    let _queued = TcpStream::connect(addr).unwrap();
    wait_for_count(&server.stats().accepted, 3);
    thread::sleep(Duration::from_millis(400));
    assert_eq!(server.stats().preempted.load(SeqCst), 0);

    // A newcomer finds the pool full: the idle connection makes room.
    let _newcomer = TcpStream::connect(addr).unwrap();
    wait_for_count(&server.stats().preempted, 1);
    wait_for_count(&server.stats().accepted, 4);
    assert_eq!(server.stats().refused.load(SeqCst), 0);
    assert!(
        echo(&mut idle, "again").is_err(),
        "the idle connection was kept"
    );
    // The silent connection took the freed worker and waits in the TLS
    // handshake for its ClientHello: the next newcomer preempts it.
    thread::sleep(Duration::from_millis(400));
    let _next = TcpStream::connect(addr).unwrap();
    wait_for_count(&server.stats().preempted, 2);
    wait_for_count(&server.stats().accepted, 5);
    // The working one was not preempted: its call is answered.
    release_tx.send(()).unwrap();
    assert_eq!(working.join().unwrap().unwrap(), "work");
    assert_eq!(server.stats().preempted.load(SeqCst), 2);
    assert_eq!(server.stats().refused.load(SeqCst), 0);
    server.stop();
}

#[test]
fn stop_lets_in_flight_calls_finish_and_refuses_new_ones() {
    let (server_tls, client_tls) = common::tls_pair();
    let (started_tx, started_rx) = crossbeam_channel::bounded::<()>(1);
    let (release_tx, release_rx) = crossbeam_channel::bounded::<()>(1);
    let blocking = router().unary(BLOCK, move |ctx, _r: IssueRejoinTicketRequest| {
        started_tx.send(()).unwrap();
        release_rx.recv().unwrap();
        assert!(ctx.stopping(), "the handler sees the server stopping");
        Ok(IssueRejoinTicketResponse::default())
    });
    let server = tls_server_with(blocking, PoolConfig::default(), server_tls);
    let addr = server.local_addr();
    let mut idle = Client::new(common::tls_connect(&client_tls, addr));
    assert_eq!(echo(&mut idle, "warm").unwrap(), "warm");
    let in_flight = {
        let client_tls = client_tls.clone();
        thread::spawn(move || {
            let mut c = Client::new(common::tls_connect(&client_tls, addr));
            c.unary::<_, IssueRejoinTicketResponse>(BLOCK, &req(""), LONG)
        })
    };
    started_rx.recv().unwrap();
    let stop_signal = server.stop_signal().clone();
    let stopper = thread::spawn(move || server.stop());
    // Release the handler only once the stop signal is up.
    for _ in 0..10_000 {
        if stop_signal.is_raised() {
            break;
        }
        thread::sleep(Duration::from_millis(1));
    }
    release_tx.send(()).unwrap();
    stopper.join().unwrap();
    assert!(
        in_flight.join().unwrap().is_ok(),
        "in-flight call must finish"
    );
    // The idle connection was closed; new connections are refused.
    assert_eq!(echo(&mut idle, "late").unwrap_err().code, Code::Unavailable);
    assert!(TcpStream::connect(addr).is_err());
}

/// A socket that counts the writes reaching it.
struct CountingSocket {
    sock: TcpStream,
    writes: Arc<std::sync::atomic::AtomicUsize>,
}

impl Read for CountingSocket {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        self.sock.read(buf)
    }
}

impl Write for CountingSocket {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.writes
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        self.sock.write(buf)
    }
    fn write_vectored(&mut self, bufs: &[std::io::IoSlice<'_>]) -> std::io::Result<usize> {
        self.writes
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        self.sock.write_vectored(bufs)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.sock.flush()
    }
}

impl confboot_wire::Transport for CountingSocket {
    fn set_read_timeout(&mut self, timeout: Option<Duration>) -> std::io::Result<()> {
        confboot_wire::Transport::set_read_timeout(&mut self.sock, timeout)
    }
    fn set_write_timeout(&mut self, timeout: Option<Duration>) -> std::io::Result<()> {
        confboot_wire::Transport::set_write_timeout(&mut self.sock, timeout)
    }
}

/// Serves one connection of `l` over TLS with one call allowed, counting
/// the socket writes; returns how it ended.
fn serve_one_counted(
    l: TcpListener,
    tls: Arc<rustls::ServerConfig>,
    router: Router,
    writes: Arc<std::sync::atomic::AtomicUsize>,
) -> thread::JoinHandle<ConnectionEnd> {
    thread::spawn(move || {
        let (sock, _) = l.accept().unwrap();
        let conn = rustls::ServerConnection::new(tls).unwrap();
        let mut stream = rustls::StreamOwned::new(conn, CountingSocket { sock, writes });
        let limits = ServerLimits {
            max_calls_per_connection: Some(1),
            ..ServerLimits::default()
        };
        serve_connection(&mut stream, &router, &limits, &Stop::new())
        // The socket closes here, with nothing more sent.
    })
}

#[test]
fn a_last_answer_larger_than_the_tls_buffer_arrives_whole() {
    let (server_tls, client_tls) = common::tls_pair();
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    let writes = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let server = serve_one_counted(l, server_tls, router(), writes);
    let mut c = Client::new(common::tls_connect(&client_tls, addr));
    // Over rustls' 64 KiB of queued records: sent in turns.
    let big = "x".repeat(300 * 1024);
    assert_eq!(echo(&mut c, &big).unwrap(), big);
    assert!(matches!(server.join().unwrap(), ConnectionEnd::Spent));
    let mut stream = c.into_inner();
    assert_eq!(stream.read(&mut [0u8; 16]).unwrap(), 0);
}

#[test]
fn a_connections_last_answer_leaves_with_its_close_notify_in_one_write() {
    use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
    let (server_tls, client_tls) = common::tls_pair();
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    let writes = Arc::new(AtomicUsize::new(0));
    // The writes the server had made when its handler ran (the handshake's).
    let before_answer = Arc::new(AtomicUsize::new(0));
    let router = {
        let (writes, before_answer) = (writes.clone(), before_answer.clone());
        Router::new().unary(ECHO, move |_ctx, req: IssueRejoinTicketRequest| {
            before_answer.store(writes.load(SeqCst), SeqCst);
            Ok(IssueRejoinTicketResponse {
                state_disk_key: req.disk_uuid.into_bytes(),
                measurement_secret: vec![],
                generation: 0,
                measurement_salt: vec![],
                sealed_secrets: Vec::new(),
            })
        })
    };
    let server = serve_one_counted(l, server_tls, router, writes.clone());
    let mut c = Client::new(common::tls_connect(&client_tls, addr));
    assert_eq!(echo(&mut c, "the last").unwrap(), "the last");
    assert!(matches!(server.join().unwrap(), ConnectionEnd::Spent));
    // Response, trailer and close_notify: one write.
    assert_eq!(writes.load(SeqCst) - before_answer.load(SeqCst), 1);
    // The client sees TLS end the stream, not a truncated connection.
    let mut stream = c.into_inner();
    let mut rest = [0u8; 16];
    assert_eq!(stream.read(&mut rest).unwrap(), 0);
}
