//! The verify service over plain HTTP/1.1: the node agent's side
//! ([`serve_connection`]: one bounded request, one answer, then the
//! connection closes) and the admin's ([`fetch_document`]).
//!
//! Only what the service needs is spoken: `GET` with a request target, no
//! request body, no keep-alive, an answer with `Content-Length`. Both sides
//! read whole messages before a deadline (a peer that trickles is cut off)
//! and within a size bound. Nothing here is secret: the answer is a quote
//! of public measurements.

use std::fmt;
use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::time::{Duration, Instant};

use super::{
    AttestationDocument, DocumentError, MAX_DOCUMENT_BYTES, RequestError, VERIFY_NONCE_LEN,
    parse_request_target, request_target,
};
use crate::attestation::Issuer;
use crate::rpc::{ReadBefore, Transport};
use crate::stop::Stop;

/// Largest request head (request line and headers) the service reads.
pub const MAX_REQUEST_HEAD_BYTES: usize = 8 * 1024;

/// Largest answer head the client reads.
pub const MAX_RESPONSE_HEAD_BYTES: usize = 8 * 1024;

/// Time bounds of the service.
#[derive(Clone, Debug)]
pub struct ServiceLimits {
    /// Bound on receiving a whole request head, from accepting the
    /// connection (default 5 s).
    pub head_timeout: Duration,
    /// Bound on each write of the answer (default 10 s).
    pub write_timeout: Duration,
    /// How often a waiting read looks at the stop signal (default 100 ms).
    pub stop_poll: Duration,
}

impl Default for ServiceLimits {
    fn default() -> Self {
        ServiceLimits {
            head_timeout: Duration::from_secs(5),
            write_timeout: Duration::from_secs(10),
            stop_poll: Duration::from_millis(100),
        }
    }
}

/// Why a request head was refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum HeadError {
    /// The head is longer than [`MAX_REQUEST_HEAD_BYTES`].
    TooLarge,
    /// The request line is not `METHOD TARGET HTTP/1.x`, or the head is not
    /// ASCII text.
    Malformed,
}

/// Reads a request head (everything up to the blank line) into its method
/// and request target.
pub fn parse_request_head(head: &[u8]) -> Result<(&str, &str), HeadError> {
    if head.len() > MAX_REQUEST_HEAD_BYTES {
        return Err(HeadError::TooLarge);
    }
    let text = std::str::from_utf8(head).map_err(|_| HeadError::Malformed)?;
    if !text.is_ascii() {
        return Err(HeadError::Malformed);
    }
    let line = text.split("\r\n").next().unwrap_or("");
    let mut parts = line.split(' ');
    match (parts.next(), parts.next(), parts.next(), parts.next()) {
        (Some(method), Some(target), Some("HTTP/1.1" | "HTTP/1.0"), None)
            if !method.is_empty() && target.starts_with('/') =>
        {
            Ok((method, target))
        }
        _ => Err(HeadError::Malformed),
    }
}

/// How one connection ended, for logs and tests.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Served {
    /// An answer with this HTTP status was written.
    Answered(u16),
    /// The client sent no whole head in time, or closed, or the server
    /// stopped; nothing was answered.
    NoRequest(String),
    /// The answer could not be written.
    WriteFailed(String),
}

/// Serves one verify request on `stream`: reads its head (bounded in size
/// and time), answers with evidence from `issuer` bound to the request's
/// nonce (200, JSON), or with 400 / 404 / 405 / 431 / 500 and a line of
/// text, and returns. The caller closes the connection.
pub fn serve_connection<T: Transport + ?Sized>(
    stream: &mut T,
    issuer: &dyn Issuer,
    limits: &ServiceLimits,
    stop: &Stop,
) -> Served {
    let head = match read_request_head(stream, limits, stop) {
        Ok(head) => head,
        Err(HeadRead::TooLarge) => {
            return answer(
                stream,
                limits,
                431,
                "text/plain",
                b"request head too large\n",
            );
        }
        Err(HeadRead::Io(e)) => return Served::NoRequest(e),
    };
    let (method, target) = match parse_request_head(&head) {
        Ok(parts) => parts,
        Err(HeadError::TooLarge) => {
            return answer(
                stream,
                limits,
                431,
                "text/plain",
                b"request head too large\n",
            );
        }
        Err(HeadError::Malformed) => {
            return answer(stream, limits, 400, "text/plain", b"malformed request\n");
        }
    };
    if method != "GET" {
        return answer(stream, limits, 405, "text/plain", b"only GET is served\n");
    }
    let nonce = match parse_request_target(target) {
        Ok(nonce) => nonce,
        Err(e @ RequestError::NotFound) => {
            return answer(
                stream,
                limits,
                404,
                "text/plain",
                format!("{e}\n").as_bytes(),
            );
        }
        Err(e) => {
            return answer(
                stream,
                limits,
                400,
                "text/plain",
                format!("{e}\n").as_bytes(),
            );
        }
    };
    match AttestationDocument::issue(issuer, &nonce) {
        Ok(doc) => answer(
            stream,
            limits,
            200,
            "application/json",
            doc.to_json().as_bytes(),
        ),
        Err(e) => {
            log::warn!("verify service: cannot attest: {e}");
            answer(
                stream,
                limits,
                500,
                "text/plain",
                format!("cannot attest: {e}\n").as_bytes(),
            )
        }
    }
}

enum HeadRead {
    TooLarge,
    Io(String),
}

/// Reads until the blank line that ends a head, before the head deadline.
fn read_request_head<T: Transport + ?Sized>(
    stream: &mut T,
    limits: &ServiceLimits,
    stop: &Stop,
) -> Result<Vec<u8>, HeadRead> {
    let mut reader = ReadBefore {
        stream,
        deadline: Instant::now() + limits.head_timeout,
        per_read: limits.head_timeout,
        stop,
        poll: limits.stop_poll,
    };
    let mut head = Vec::with_capacity(512);
    let mut chunk = [0u8; 1024];
    loop {
        if let Some(end) = find_blank_line(&head) {
            head.truncate(end);
            return Ok(head);
        }
        if head.len() > MAX_REQUEST_HEAD_BYTES {
            return Err(HeadRead::TooLarge);
        }
        match reader.read(&mut chunk) {
            Ok(0) => return Err(HeadRead::Io("closed before a whole request head".into())),
            Ok(n) => head.extend_from_slice(&chunk[..n]),
            Err(e) => return Err(HeadRead::Io(e.to_string())),
        }
    }
}

/// The offset of the `\r\n\r\n` that ends a head.
fn find_blank_line(bytes: &[u8]) -> Option<usize> {
    bytes.windows(4).position(|w| w == b"\r\n\r\n")
}

fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        400 => "Bad Request",
        404 => "Not Found",
        405 => "Method Not Allowed",
        431 => "Request Header Fields Too Large",
        _ => "Internal Server Error",
    }
}

fn answer<T: Transport + ?Sized>(
    stream: &mut T,
    limits: &ServiceLimits,
    status: u16,
    content_type: &str,
    body: &[u8],
) -> Served {
    let mut message = format!(
        "HTTP/1.1 {status} {}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\n\
         Cache-Control: no-store\r\nConnection: close\r\n",
        reason(status),
        body.len()
    );
    if status == 405 {
        message.push_str("Allow: GET\r\n");
    }
    message.push_str("\r\n");
    let mut bytes = message.into_bytes();
    bytes.extend_from_slice(body);
    let written = stream
        .set_write_timeout(Some(limits.write_timeout))
        .and_then(|()| stream.write_all(&bytes))
        .and_then(|()| stream.flush());
    match written {
        Ok(()) => Served::Answered(status),
        Err(e) => Served::WriteFailed(e.to_string()),
    }
}

/// Why the admin's client got no attestation document.
#[derive(Debug)]
pub enum FetchError {
    /// The address does not resolve, or no address accepted a connection.
    Connect(String),
    /// The node did not answer whole within the timeout.
    Timeout,
    /// Reading or writing failed.
    Io(String),
    /// The answer is larger than a document can be.
    TooLarge,
    /// The answer is not HTTP of the expected shape.
    Response(String),
    /// The node answered with an error status and this text.
    Status {
        /// The HTTP status.
        status: u16,
        /// The first line of the body, printable characters only.
        message: String,
    },
    /// The body is not an attestation document.
    Document(DocumentError),
}

impl fmt::Display for FetchError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FetchError::Connect(m) => write!(f, "cannot connect: {m}"),
            FetchError::Timeout => f.write_str("no whole answer before the timeout"),
            FetchError::Io(m) => write!(f, "connection failed: {m}"),
            FetchError::TooLarge => write!(
                f,
                "the answer is larger than an attestation document may be ({MAX_DOCUMENT_BYTES} bytes)"
            ),
            FetchError::Response(m) => write!(f, "not an HTTP answer of the verify service: {m}"),
            FetchError::Status { status, message } => {
                write!(f, "the node answered HTTP {status}: {message}")
            }
            FetchError::Document(e) => e.fmt(f),
        }
    }
}

impl std::error::Error for FetchError {}

/// Reads an answer (head and body, as received up to the connection's
/// end): the status and the body. The body must be exactly
/// `Content-Length` bytes when that header is sent; chunked bodies are not
/// spoken.
pub fn parse_response(bytes: &[u8]) -> Result<(u16, &[u8]), FetchError> {
    let bad = |m: &str| FetchError::Response(m.to_string());
    let end = find_blank_line(&bytes[..bytes.len().min(MAX_RESPONSE_HEAD_BYTES + 4)])
        .ok_or_else(|| bad("no complete head"))?;
    let head = std::str::from_utf8(&bytes[..end]).map_err(|_| bad("the head is not text"))?;
    let body = &bytes[end + 4..];
    let mut lines = head.split("\r\n");
    let status_line = lines.next().unwrap_or("");
    let mut parts = status_line.splitn(3, ' ');
    let status = match (parts.next(), parts.next()) {
        (Some("HTTP/1.1" | "HTTP/1.0"), Some(code))
            if code.len() == 3 && code.bytes().all(|b| b.is_ascii_digit()) =>
        {
            code.parse::<u16>().map_err(|_| bad("bad status code"))?
        }
        _ => return Err(bad("no HTTP/1.x status line")),
    };
    let mut length = None;
    for line in lines {
        let (name, value) = line
            .split_once(':')
            .ok_or_else(|| bad("a header line without a colon"))?;
        let value = value.trim();
        if name.eq_ignore_ascii_case("content-length") {
            if length.is_some() {
                return Err(bad("Content-Length twice"));
            }
            let n: usize = value
                .parse()
                .map_err(|_| bad("Content-Length is not a number"))?;
            length = Some(n);
        } else if name.eq_ignore_ascii_case("transfer-encoding") {
            return Err(bad("Transfer-Encoding is not spoken"));
        }
    }
    match length {
        Some(n) if n > MAX_DOCUMENT_BYTES => Err(FetchError::TooLarge),
        Some(n) if n != body.len() => Err(bad(&format!(
            "Content-Length says {n} bytes, the body has {}",
            body.len()
        ))),
        _ => Ok((status, body)),
    }
}

/// Asks the verify service at `addr` (`HOST:PORT`) for evidence bound to
/// `nonce` and reads its document. The whole exchange (connecting, asking,
/// reading the answer) is bounded by `timeout`, the answer by
/// [`MAX_DOCUMENT_BYTES`] plus a head.
pub fn fetch_document(
    addr: &str,
    nonce: &[u8; VERIFY_NONCE_LEN],
    timeout: Duration,
) -> Result<AttestationDocument, FetchError> {
    let deadline = Instant::now() + timeout;
    let mut stream = connect(addr, deadline)?;
    let host = addr.rsplit_once(':').map_or(addr, |(h, _)| h);
    let request = format!(
        "GET {} HTTP/1.1\r\nHost: {host}\r\nAccept: application/json\r\nConnection: close\r\n\r\n",
        request_target(nonce)
    );
    let left = deadline.saturating_duration_since(Instant::now());
    Transport::set_write_timeout(&mut stream, Some(left))
        .and_then(|()| stream.write_all(request.as_bytes()))
        .map_err(|e| timeout_or(e, FetchError::Io))?;
    let bytes = read_answer(&mut stream, deadline)?;
    let (status, body) = parse_response(&bytes)?;
    if status != 200 {
        let message: String = String::from_utf8_lossy(body)
            .lines()
            .next()
            .unwrap_or("")
            .chars()
            .filter(|c| !c.is_control())
            .take(200)
            .collect();
        return Err(FetchError::Status { status, message });
    }
    AttestationDocument::from_json(body).map_err(FetchError::Document)
}

fn timeout_or(e: io::Error, other: fn(String) -> FetchError) -> FetchError {
    if matches!(
        e.kind(),
        io::ErrorKind::TimedOut | io::ErrorKind::WouldBlock
    ) {
        FetchError::Timeout
    } else {
        other(e.to_string())
    }
}

fn connect(addr: &str, deadline: Instant) -> Result<TcpStream, FetchError> {
    let addrs: Vec<SocketAddr> = addr
        .to_socket_addrs()
        .map_err(|e| FetchError::Connect(format!("{addr}: {e}")))?
        .collect();
    let mut last = format!("{addr} resolves to no address");
    for a in addrs {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(FetchError::Timeout);
        }
        match TcpStream::connect_timeout(&a, left) {
            Ok(s) => return Ok(s),
            Err(e) => last = format!("{a}: {e}"),
        }
    }
    Err(FetchError::Connect(last))
}

/// Reads until the node closes, before the deadline and within the bound.
fn read_answer(stream: &mut TcpStream, deadline: Instant) -> Result<Vec<u8>, FetchError> {
    let never = Stop::new();
    let mut reader = ReadBefore {
        stream,
        deadline,
        per_read: deadline.saturating_duration_since(Instant::now()),
        stop: &never,
        poll: Duration::from_millis(200),
    };
    let limit = MAX_DOCUMENT_BYTES + MAX_RESPONSE_HEAD_BYTES;
    let mut bytes = Vec::new();
    (&mut reader)
        .take(limit as u64 + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| timeout_or(e, FetchError::Io))?;
    if bytes.len() > limit {
        return Err(FetchError::TooLarge);
    }
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::attestation::{AttestationError, EXTRA_DATA_LEN, Variant};
    use crate::rpc::pipe;

    /// Evidence that is its extra_data, so tests see what was bound.
    struct Echo;
    impl Issuer for Echo {
        fn variant(&self) -> Variant {
            Variant::QemuVtpm
        }
        fn issue(&self, extra: &[u8; EXTRA_DATA_LEN]) -> Result<Vec<u8>, AttestationError> {
            Ok(extra.to_vec())
        }
    }

    struct Broken;
    impl Issuer for Broken {
        fn variant(&self) -> Variant {
            Variant::QemuVtpm
        }
        fn issue(&self, _: &[u8; EXTRA_DATA_LEN]) -> Result<Vec<u8>, AttestationError> {
            Err(AttestationError::Issue("TPM gone".into()))
        }
    }

    fn serve(request: &[u8], issuer: &dyn Issuer) -> (Served, Vec<u8>) {
        let (mut client, mut server) = pipe::pair();
        client.write_all(request).unwrap();
        let limits = ServiceLimits {
            head_timeout: Duration::from_millis(300),
            ..ServiceLimits::default()
        };
        let served = serve_connection(&mut server, issuer, &limits, &Stop::new());
        drop(server);
        let mut answer = Vec::new();
        let _ = client.read_to_end(&mut answer);
        (served, answer)
    }

    #[test]
    fn a_request_gets_evidence_bound_to_its_nonce() {
        let nonce = [5u8; VERIFY_NONCE_LEN];
        let request = format!("GET {} HTTP/1.1\r\nHost: n\r\n\r\n", request_target(&nonce));
        let (served, answer) = serve(request.as_bytes(), &Echo);
        assert_eq!(served, Served::Answered(200));
        let (status, body) = parse_response(&answer).unwrap();
        assert_eq!(status, 200);
        let doc = AttestationDocument::from_json(body).unwrap();
        assert_eq!(doc.evidence, super::super::extra_data(&nonce));
    }

    #[test]
    fn bad_requests_get_their_status_and_no_evidence() {
        let good = request_target(&[1; VERIFY_NONCE_LEN]);
        for (request, status) in [
            (format!("POST {good} HTTP/1.1\r\n\r\n"), 405),
            ("GET /metrics HTTP/1.1\r\n\r\n".to_string(), 404),
            ("GET /?nonce=AAAA HTTP/1.1\r\n\r\n".to_string(), 400),
            ("GET / HTTP/1.1\r\n\r\n".to_string(), 400),
            ("hello\r\n\r\n".to_string(), 400),
            (format!("GET {good} HTTP/2\r\n\r\n"), 400),
            (
                format!("GET {good} HTTP/1.1\r\nX: {}\r\n\r\n", "a".repeat(9000)),
                431,
            ),
        ] {
            let (served, answer) = serve(request.as_bytes(), &Echo);
            assert_eq!(served, Served::Answered(status), "{request:.60}");
            assert_eq!(parse_response(&answer).unwrap().0, status);
        }
        let (served, answer) = serve(format!("GET {good} HTTP/1.1\r\n\r\n").as_bytes(), &Broken);
        assert_eq!(served, Served::Answered(500));
        let (_, body) = parse_response(&answer).unwrap();
        assert_eq!(body, b"cannot attest: cannot issue evidence: TPM gone\n");
    }

    #[test]
    fn a_head_that_never_ends_is_cut_at_its_deadline() {
        let (served, answer) = serve(b"GET / HTTP/1.1\r\nX: y\r\n", &Echo);
        assert!(matches!(served, Served::NoRequest(_)), "{served:?}");
        assert!(answer.is_empty());
    }

    #[test]
    fn answers_that_are_not_documents_are_refused() {
        let err = |bytes: &[u8]| parse_response(bytes).unwrap_err().to_string();
        assert!(err(b"HTTP/1.1 200 OK\r\n").contains("no complete head"));
        assert!(err(b"SSH-2.0-x\r\n\r\n").contains("status line"));
        assert!(err(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nabc").contains("says 5"));
        assert!(
            err(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n").contains("not spoken")
        );
        assert!(matches!(
            parse_response(b"HTTP/1.1 200 OK\r\nContent-Length: 99999999999\r\n\r\n"),
            Err(FetchError::TooLarge)
        ));
        assert_eq!(
            parse_response(b"HTTP/1.1 404 Not Found\r\nContent-Length: 2\r\n\r\nno").unwrap(),
            (404, &b"no"[..])
        );
    }
}
