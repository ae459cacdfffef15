//! A fault proxy in front of a real API server, for the failures a real
//! server cannot be made to show on demand: it terminates TLS with a
//! certificate of its own, relays each HTTP/1.1 request to the real API
//! server (over TLS, trusting the cluster CA) and its answer back, and
//! when told to, answers the next requests to Secrets itself as an
//! overloaded or failing API server does (500, 429 with `Retry-After`,
//! 504, and 409 for a name taken, with their `Status` objects), holds one without an answer (a black
//! hole: the client's deadline must end the call), or relays it and holds
//! the answer back (a slow etcd: the object is stored, the answer comes
//! late). Everything else, authentication and authorization included, is
//! the real server's.

use std::collections::VecDeque;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use confboot_net::listener::{self, PeerStream, PoolConfig, ServerHandle};
use confboot_util::stop::Stop;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer, ServerName};

/// What the proxy does with the next request to Secrets.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    /// 500 InternalError, not relayed.
    InternalError,
    /// 409 AlreadyExists, not relayed (the answer to a create whose name
    /// is taken).
    AlreadyExists,
    /// 429 TooManyRequests with `Retry-After: 1`, not relayed.
    TooManyRequests,
    /// 504 Timeout, not relayed (the API server's answer when etcd did not
    /// answer in time).
    ServerTimeout,
    /// No answer at all; the connection is held until the proxy stops.
    NoAnswer,
    /// Relayed, and its answer held back this long.
    Slow(Duration),
}

/// How long a request may take to arrive, and an answer to come back.
const IO_TIMEOUT: Duration = Duration::from_secs(30);
/// How often a held connection looks at the stop signal.
const STOP_POLL: Duration = Duration::from_millis(50);
/// How long an idle kept-alive connection stays open.
const IDLE_TIMEOUT: Duration = Duration::from_secs(90);
const MAX_LINE: u64 = 16 * 1024;
const MAX_HEADERS: usize = 100;
/// How many request paths are kept for [`FaultProxy::requests_to`].
const MAX_PATHS_KEPT: usize = 100_000;
/// The API server's own request limit (3 MiB), and a bound on answers.
const MAX_BODY: usize = 8 * 1024 * 1024;

struct Shared {
    faults: Mutex<VecDeque<Fault>>,
    requests: AtomicU64,
    secret_requests: AtomicU64,
    connections: AtomicU64,
    /// The path of every request so far (bounded: a test's requests).
    paths: Mutex<Vec<String>>,
    upstream: SocketAddr,
    upstream_tls: Arc<rustls::ClientConfig>,
}

/// A running fault proxy; stops when dropped.
pub struct FaultProxy {
    addr: SocketAddr,
    ca_pem: String,
    shared: Arc<Shared>,
    server: Option<ServerHandle>,
}

impl FaultProxy {
    /// Starts a proxy on loopback in front of the API server at `upstream`,
    /// which `upstream_ca_pem` serves.
    pub fn start(upstream: SocketAddr, upstream_ca_pem: &str) -> FaultProxy {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut roots = rustls::RootCertStore::empty();
        for cert in rustls_pemfile_certs(upstream_ca_pem) {
            roots.add(cert).expect("the upstream CA is a certificate");
        }
        let upstream_tls = Arc::new(
            rustls::ClientConfig::builder_with_provider(Arc::clone(&provider))
                .with_safe_default_protocol_versions()
                .expect("protocol versions")
                .with_root_certificates(roots)
                .with_no_client_auth(),
        );
        let rcgen::CertifiedKey { cert, signing_key } =
            rcgen::generate_simple_self_signed(vec!["127.0.0.1".to_string()])
                .expect("self-signed certificate");
        let ca_pem = cert.pem();
        let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(signing_key.serialize_der()));
        let tls = Arc::new(
            rustls::ServerConfig::builder_with_provider(provider)
                .with_safe_default_protocol_versions()
                .expect("protocol versions")
                .with_no_client_auth()
                .with_single_cert(vec![CertificateDer::from(cert.der().to_vec())], key)
                .expect("server certificate"),
        );
        let shared = Arc::new(Shared {
            faults: Mutex::new(VecDeque::new()),
            requests: AtomicU64::new(0),
            secret_requests: AtomicU64::new(0),
            connections: AtomicU64::new(0),
            paths: Mutex::new(Vec::new()),
            upstream,
            upstream_tls,
        });
        let server = {
            let shared = Arc::clone(&shared);
            listener::spawn(
                TcpListener::bind("127.0.0.1:0").expect("bind loopback"),
                PoolConfig {
                    workers: 32,
                    queue: 64,
                    socket_timeout: IO_TIMEOUT,
                    ..PoolConfig::default()
                },
                move |sock, stop| serve(sock, Arc::clone(&tls), &shared, stop),
            )
            .expect("start the fault proxy")
        };
        FaultProxy {
            addr: server.local_addr(),
            ca_pem,
            shared,
            server: Some(server),
        }
    }

    /// `https://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("https://{}", self.addr)
    }

    /// The certificate (PEM) clients of the proxy must trust.
    pub fn ca_pem(&self) -> &str {
        &self.ca_pem
    }

    /// The next requests to Secrets meet these faults, one each, in order.
    pub fn fail_next(&self, faults: &[Fault]) {
        self.shared.faults.lock().unwrap().extend(faults);
    }

    /// Requests seen so far.
    pub fn requests(&self) -> u64 {
        self.shared.requests.load(Ordering::SeqCst)
    }

    /// Requests to Secrets seen so far.
    pub fn secret_requests(&self) -> u64 {
        self.shared.secret_requests.load(Ordering::SeqCst)
    }

    /// Requests so far whose path contains `part` (e.g. an object's name).
    pub fn requests_to(&self, part: &str) -> u64 {
        let paths = self.shared.paths.lock().unwrap();
        paths.iter().filter(|p| p.contains(part)).count() as u64
    }

    /// Client connections whose TLS handshake completed so far (a client
    /// that keeps its connection alive makes one for many requests).
    pub fn connections(&self) -> u64 {
        self.shared.connections.load(Ordering::SeqCst)
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        if let Some(server) = self.server.take() {
            server.stop();
        }
    }
}

/// The certificates of a PEM bundle.
fn rustls_pemfile_certs(pem: &str) -> Vec<CertificateDer<'static>> {
    let mut out = Vec::new();
    let mut rest = pem;
    while let Some(start) = rest.find("-----BEGIN CERTIFICATE-----") {
        let body = &rest[start + 27..];
        let end = body
            .find("-----END CERTIFICATE-----")
            .expect("a closed PEM block");
        let b64: String = body[..end].split_whitespace().collect();
        out.push(CertificateDer::from(
            confboot_util::base64::decode(&b64).expect("PEM base64"),
        ));
        rest = &body[end..];
    }
    out
}

type ServerStream = rustls::StreamOwned<rustls::ServerConnection, PeerStream>;
type UpstreamStream = rustls::StreamOwned<rustls::ClientConnection, TcpStream>;

/// One HTTP/1.1 message's head (the start line and the headers as sent)
/// and its body.
struct Message {
    start: String,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

impl Message {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// The message as bytes, its body framed by `Content-Length`.
    fn encode(&self) -> Vec<u8> {
        let mut out = format!("{}\r\n", self.start.trim_end());
        for (k, v) in &self.headers {
            if k.eq_ignore_ascii_case("content-length")
                || k.eq_ignore_ascii_case("transfer-encoding")
            {
                continue;
            }
            out.push_str(&format!("{k}: {v}\r\n"));
        }
        out.push_str(&format!("Content-Length: {}\r\n\r\n", self.body.len()));
        let mut bytes = out.into_bytes();
        bytes.extend_from_slice(&self.body);
        bytes
    }
}

fn read_line<R: BufRead>(r: &mut R) -> Option<String> {
    let mut line = String::new();
    let n = r.by_ref().take(MAX_LINE).read_line(&mut line).ok()?;
    (n > 0 && line.ends_with('\n')).then_some(line)
}

/// Reads one message (request or answer); `None` if malformed, too large
/// or cut short. A body comes by `Content-Length` or chunked.
fn read_message<R: BufRead>(r: &mut R, is_answer_to_head: bool) -> Option<Message> {
    let start = read_line(r)?;
    let mut headers = Vec::new();
    loop {
        let h = read_line(r)?;
        let h = h.trim_end();
        if h.is_empty() {
            break;
        }
        if headers.len() == MAX_HEADERS {
            return None;
        }
        let (k, v) = h.split_once(':')?;
        headers.push((k.trim().to_string(), v.trim().to_string()));
    }
    let mut m = Message {
        start,
        headers,
        body: Vec::new(),
    };
    if is_answer_to_head {
        return Some(m);
    }
    if m.header("transfer-encoding")
        .is_some_and(|v| v.eq_ignore_ascii_case("chunked"))
    {
        loop {
            let size = read_line(r)?;
            let size = usize::from_str_radix(size.trim().split(';').next()?, 16).ok()?;
            if m.body.len() + size > MAX_BODY {
                return None;
            }
            let at = m.body.len();
            m.body.resize(at + size, 0);
            r.read_exact(&mut m.body[at..]).ok()?;
            read_line(r)?; // the CRLF after the chunk
            if size == 0 {
                break;
            }
        }
    } else {
        let len: usize = match m.header("content-length") {
            Some(v) => v.parse().ok()?,
            None => 0,
        };
        if len > MAX_BODY {
            return None;
        }
        m.body = vec![0; len];
        r.read_exact(&mut m.body).ok()?;
    }
    Some(m)
}

/// A `Status` answer, as the API server writes its errors.
fn status_answer(code: u16, phrase: &str, reason: &str, message: &str, close: bool) -> Vec<u8> {
    let body = serde_json::json!({
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": message, "reason": reason, "code": code,
    })
    .to_string();
    format!(
        "HTTP/1.1 {code} {phrase}\r\nContent-Type: application/json\r\nCache-Control: no-cache, private\r\n{}{}Content-Length: {}\r\n\r\n{body}",
        if code == 429 { "Retry-After: 1\r\n" } else { "" },
        if close { "Connection: close\r\n" } else { "" },
        body.len()
    )
    .into_bytes()
}

/// Waits until the next request begins (true), or the client closed, the
/// connection stayed idle too long or the proxy stops (false).
fn wait_for_request(reader: &mut BufReader<ServerStream>, stop: &Stop) -> bool {
    let idle_since = Instant::now();
    let _ = reader.get_ref().sock.set_read_timeout(Some(STOP_POLL));
    let ready = loop {
        if stop.is_raised() || idle_since.elapsed() > IDLE_TIMEOUT {
            break false;
        }
        match reader.fill_buf() {
            Ok(buf) => break !buf.is_empty(),
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) => {}
            Err(_) => break false,
        }
    };
    let _ = reader.get_ref().sock.set_read_timeout(Some(IO_TIMEOUT));
    ready
}

fn connect_upstream(shared: &Shared) -> Option<BufReader<UpstreamStream>> {
    let sock = TcpStream::connect_timeout(&shared.upstream, IO_TIMEOUT).ok()?;
    sock.set_read_timeout(Some(IO_TIMEOUT)).ok()?;
    sock.set_write_timeout(Some(IO_TIMEOUT)).ok()?;
    let name = ServerName::IpAddress(shared.upstream.ip().into());
    let conn = rustls::ClientConnection::new(Arc::clone(&shared.upstream_tls), name).ok()?;
    Some(BufReader::new(rustls::StreamOwned::new(conn, sock)))
}

/// Relays `request` to the real API server on this connection's upstream
/// connection (made on first use, and again if the server closed it).
fn relay(
    upstream: &mut Option<BufReader<UpstreamStream>>,
    shared: &Shared,
    request: &Message,
) -> Option<Message> {
    let head = request.start.starts_with("HEAD ");
    for _ in 0..2 {
        if upstream.is_none() {
            *upstream = connect_upstream(shared);
        }
        let up = upstream.as_mut()?;
        let sent = up
            .get_mut()
            .write_all(&request.encode())
            .and_then(|_| up.get_mut().flush());
        if sent.is_ok()
            && let Some(answer) = read_message(up, head)
        {
            if answer
                .header("connection")
                .is_some_and(|v| v.eq_ignore_ascii_case("close"))
            {
                *upstream = None;
            }
            return Some(answer);
        }
        // A kept connection the server had closed: once more on a new one.
        *upstream = None;
    }
    None
}

fn serve(sock: PeerStream, tls: Arc<rustls::ServerConfig>, shared: &Shared, stop: &Stop) {
    let Ok(conn) = rustls::ServerConnection::new(tls) else {
        return;
    };
    let mut reader = BufReader::new(rustls::StreamOwned::new(conn, sock));
    {
        let stream = reader.get_mut();
        while stream.conn.is_handshaking() {
            if stream.conn.complete_io(&mut stream.sock).is_err() {
                return;
            }
        }
    }
    shared.connections.fetch_add(1, Ordering::SeqCst);
    let mut upstream = None;
    while wait_for_request(&mut reader, stop) {
        let Some(request) = read_message(&mut reader, false) else {
            return;
        };
        shared.requests.fetch_add(1, Ordering::SeqCst);
        let path = request.start.split_whitespace().nth(1).unwrap_or_default();
        {
            let mut paths = shared.paths.lock().unwrap();
            if paths.len() < MAX_PATHS_KEPT {
                paths.push(path.to_string());
            }
        }
        let fault = if path.contains("/secrets") {
            shared.secret_requests.fetch_add(1, Ordering::SeqCst);
            shared.faults.lock().unwrap().pop_front()
        } else {
            None
        };
        let close = request
            .header("connection")
            .is_some_and(|v| v.eq_ignore_ascii_case("close"));
        let answer = match fault {
            Some(Fault::NoAnswer) => {
                while !stop.is_raised() {
                    std::thread::sleep(STOP_POLL);
                }
                return;
            }
            Some(Fault::InternalError) => status_answer(
                500,
                "Internal Server Error",
                "InternalError",
                "an error on the server has prevented the request from succeeding",
                close,
            ),
            Some(Fault::AlreadyExists) => status_answer(
                409,
                "Conflict",
                "AlreadyExists",
                "object already exists",
                close,
            ),
            Some(Fault::TooManyRequests) => status_answer(
                429,
                "Too Many Requests",
                "TooManyRequests",
                "too many requests, please try again later",
                close,
            ),
            Some(Fault::ServerTimeout) => status_answer(
                504,
                "Gateway Timeout",
                "Timeout",
                "the server was unable to return a response in the time allotted, but may still \
                 be processing the request",
                close,
            ),
            Some(Fault::Slow(delay)) => {
                let Some(answer) = relay(&mut upstream, shared, &request) else {
                    return;
                };
                let until = Instant::now() + delay;
                while Instant::now() < until {
                    if stop.is_raised() {
                        return;
                    }
                    std::thread::sleep(STOP_POLL.min(delay));
                }
                answer.encode()
            }
            None => match relay(&mut upstream, shared, &request) {
                Some(answer) => answer.encode(),
                None => return,
            },
        };
        let stream = reader.get_mut();
        if stream
            .write_all(&answer)
            .and_then(|_| stream.flush())
            .is_err()
            || close
        {
            break;
        }
    }
    let stream = reader.get_mut();
    stream.conn.send_close_notify();
    let _ = stream.flush();
}
