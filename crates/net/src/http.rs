//! Plain HTTP/1.1 of the smallest useful kind, bounded on both sides: one
//! request per connection (`GET`-style: a head, no body), one answer with
//! `Content-Length`, then the connection closes. joinsvc's health and
//! metrics endpoints serve with it; the bootstrapper's metadata lookup asks
//! with [`get`], which reads answers with [`parse_response`].
//!
//! A request head is read whole before a deadline and within
//! [`MAX_REQUEST_HEAD_BYTES`]: a client that trickles, never ends its
//! head, or sends an endless header line is cut off without holding more
//! than that.
// Every length and offset here comes from the host (a disk, a datagram,
// a socket): a cast that could truncate, wrap or drop a sign is refused
// at compile time, so each conversion is checked where it happens.
#![deny(
    clippy::cast_possible_truncation,
    clippy::cast_sign_loss,
    clippy::cast_possible_wrap,
    clippy::cast_lossless
)]

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::time::{Duration, Instant};

use crate::listener::{Gate, Opening};
use confboot_util::IoFailure;
use confboot_util::stop::Stop;
use confboot_wire::{ReadBefore, Transport};

/// Largest request head (request line and headers) read.
pub const MAX_REQUEST_HEAD_BYTES: usize = 8 * 1024;

/// Largest answer head [`parse_response`] reads.
pub const MAX_RESPONSE_HEAD_BYTES: usize = 8 * 1024;

/// Time bounds of a server.
#[derive(Clone, Debug)]
pub struct HttpLimits {
    /// Bound on receiving a whole request head, from accepting the
    /// connection (default 5 s).
    pub head_timeout: Duration,
    /// Bound on each write of the answer (default 10 s).
    pub write_timeout: Duration,
    /// How often a waiting read looks at the stop signal (default 100 ms).
    pub stop_poll: Duration,
}

impl Default for HttpLimits {
    fn default() -> Self {
        HttpLimits {
            head_timeout: Duration::from_secs(5),
            write_timeout: Duration::from_secs(10),
            stop_poll: Duration::from_millis(100),
        }
    }
}

/// A request's method and target (path and query), as sent.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Request {
    /// The method, e.g. `GET`.
    pub method: String,
    /// The request target, e.g. `/metrics`.
    pub target: String,
}

/// Why no request was read.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RequestError {
    /// The head is longer than [`MAX_REQUEST_HEAD_BYTES`] (answer 431).
    #[error("request head larger than {MAX_REQUEST_HEAD_BYTES} bytes")]
    TooLarge,
    /// The request line is not `METHOD TARGET HTTP/1.x`, or the head is not
    /// ASCII (answer 400).
    #[error("malformed request")]
    Malformed,
    /// No whole head came before the deadline, or the server is stopping
    /// (nothing to answer).
    #[error("no whole request: {0}")]
    Io(#[source] IoFailure),
    /// The client closed before a whole head (nothing to answer).
    #[error("no whole request: closed before a whole head")]
    Closed,
}

/// Reads a request head (everything before the blank line) into its method
/// and request target.
pub fn parse_request_head(head: &[u8]) -> Result<(&str, &str), RequestError> {
    if head.len() > MAX_REQUEST_HEAD_BYTES {
        return Err(RequestError::TooLarge);
    }
    let text = std::str::from_utf8(head).map_err(|_| RequestError::Malformed)?;
    if !text.is_ascii() {
        return Err(RequestError::Malformed);
    }
    let line = text.split("\r\n").next().unwrap_or("");
    let mut parts = line.split(' ');
    match (parts.next(), parts.next(), parts.next(), parts.next()) {
        (Some(method), Some(target), Some("HTTP/1.1" | "HTTP/1.0"), None)
            if !method.is_empty() && target.starts_with('/') =>
        {
            Ok((method, target))
        }
        _ => Err(RequestError::Malformed),
    }
}

/// How the listener's gate judges an HTTP opening: complete once the head's
/// blank line is there; invalid from a first byte that cannot begin a
/// method (methods are upper-case letters), or a first line that does
/// not look like a request line.
pub fn judge_opening(bytes: &[u8]) -> Opening {
    let method_len = bytes
        .iter()
        .position(|b| !b.is_ascii_uppercase())
        .unwrap_or(bytes.len());
    match bytes.get(method_len) {
        _ if method_len > 16 => return Opening::Invalid,
        Some(b' ') if method_len > 0 => {}
        Some(_) => return Opening::Invalid,
        None => return Opening::Incomplete,
    }
    if find_blank_line(bytes).is_some() {
        Opening::Complete
    } else {
        Opening::Incomplete
    }
}

/// The gate for a plain-HTTP server on the listener pool: a connection
/// reaches a worker only with its whole request head (at most
/// [`MAX_REQUEST_HEAD_BYTES`]), sent within `timeout`; at most `capacity`
/// wait for theirs, a new one evicting the longest-waiting. Silent or
/// trickling clients hold no worker.
pub fn gate(capacity: usize, timeout: Duration) -> Gate {
    Gate {
        judge: judge_opening,
        max_opening: MAX_REQUEST_HEAD_BYTES + 4,
        timeout,
        capacity,
        drop_half_closed: false,
        defer_accept: None,
    }
}

/// Reads one request's head from `stream`, whole, before
/// [`HttpLimits::head_timeout`] and within [`MAX_REQUEST_HEAD_BYTES`].
pub fn read_request<T: Transport + ?Sized>(
    stream: &mut T,
    limits: &HttpLimits,
    stop: &Stop,
) -> Result<Request, RequestError> {
    let mut reader = ReadBefore {
        stream,
        deadline: Instant::now() + limits.head_timeout,
        per_read: limits.head_timeout,
        stop,
        poll: limits.stop_poll,
    };
    let mut head = Vec::with_capacity(512);
    let mut chunk = [0u8; 1024];
    let end = loop {
        if let Some(end) = find_blank_line(&head) {
            break end;
        }
        if head.len() > MAX_REQUEST_HEAD_BYTES {
            return Err(RequestError::TooLarge);
        }
        match reader.read(&mut chunk) {
            Ok(0) => return Err(RequestError::Closed),
            Ok(n) => head.extend_from_slice(&chunk[..n]),
            Err(e) => return Err(RequestError::Io(IoFailure::bare(e))),
        }
    };
    let (method, target) = parse_request_head(&head[..end])?;
    Ok(Request {
        method: method.to_string(),
        target: target.to_string(),
    })
}

/// The offset of the `\r\n\r\n` that ends a head.
fn find_blank_line(bytes: &[u8]) -> Option<usize> {
    bytes.windows(4).position(|w| w == b"\r\n\r\n")
}

/// The reason phrase of the statuses these servers send.
pub fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        400 => "Bad Request",
        404 => "Not Found",
        405 => "Method Not Allowed",
        431 => "Request Header Fields Too Large",
        503 => "Service Unavailable",
        _ => "Internal Server Error",
    }
}

/// Writes a whole answer and flushes it (each write bounded by
/// [`HttpLimits::write_timeout`]); the caller then closes the connection.
pub fn respond<T: Transport + ?Sized>(
    stream: &mut T,
    limits: &HttpLimits,
    status: u16,
    content_type: &str,
    body: &[u8],
) -> std::io::Result<()> {
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
    stream.set_write_timeout(Some(limits.write_timeout))?;
    stream.write_all(&bytes)?;
    stream.flush()
}

/// Answers a request that could not be read, when there is something to
/// answer (431 for a head too large, 400 for a malformed one).
pub fn respond_to_error<T: Transport + ?Sized>(
    stream: &mut T,
    limits: &HttpLimits,
    error: &RequestError,
) -> Option<u16> {
    let status = match error {
        RequestError::TooLarge => 431,
        RequestError::Malformed => 400,
        RequestError::Io(_) | RequestError::Closed => return None,
    };
    let body = format!("{error}\n");
    respond(stream, limits, status, "text/plain", body.as_bytes())
        .ok()
        .map(|()| status)
}

/// Why an answer is not one of the shape these servers send.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ResponseError {
    /// No complete head within [`MAX_RESPONSE_HEAD_BYTES`], no HTTP/1.x
    /// status line, a malformed header, a length that does not match.
    #[error("not an HTTP answer of the expected shape: {0}")]
    Malformed(String),
    /// The body is (or says it is) larger than the caller's bound.
    #[error("the answer's body is larger than allowed")]
    TooLarge,
}

/// Reads an answer (head and body, as received up to the connection's
/// end) into its status and body. The body must be exactly
/// `Content-Length` bytes when that header is sent, and at most
/// `max_body`; chunked bodies are not spoken.
pub fn parse_response(bytes: &[u8], max_body: usize) -> Result<(u16, &[u8]), ResponseError> {
    let bad = |m: &str| ResponseError::Malformed(m.to_string());
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
        Some(n) if n > max_body => Err(ResponseError::TooLarge),
        Some(n) if n != body.len() => Err(bad(&format!(
            "Content-Length says {n} bytes, the body has {}",
            body.len()
        ))),
        _ if body.len() > max_body => Err(ResponseError::TooLarge),
        _ => Ok((status, body)),
    }
}

/// Why a [`get`] got no answer.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum GetError {
    /// The URL is not `http://HOST[:PORT][/PATH]`.
    #[error("not an http:// URL: {0}")]
    Url(String),
    /// The address does not resolve, or no address accepted a connection.
    #[error("cannot connect: {0}")]
    Connect(#[source] IoFailure),
    /// The address resolves to no socket address.
    #[error("cannot connect: {0} resolves to no address")]
    NoAddress(String),
    /// No whole answer came before the deadline.
    #[error("no whole answer before the timeout")]
    Timeout,
    /// Reading or writing failed.
    #[error("connection failed: {0}")]
    Io(#[source] IoFailure),
    /// The answer's body is larger than the caller allows.
    #[error("the answer is larger than {0} bytes")]
    TooLarge(usize),
    /// The answer is not HTTP of the expected shape.
    #[error("not an HTTP answer: {0}")]
    Malformed(String),
}

/// `http://HOST[:PORT][/PATH]` as `(HOST:PORT, HOST, /PATH)`: plain HTTP
/// only (what a metadata server on the link speaks), port 80 by default.
pub fn split_http_url(url: &str) -> Result<(String, &str, &str), GetError> {
    let rest = url
        .strip_prefix("http://")
        .ok_or_else(|| GetError::Url(url.to_string()))?;
    let (authority, target) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, "/"),
    };
    let bad = |why: &str| GetError::Url(format!("{url}: {why}"));
    if authority.is_empty() || authority.contains('@') {
        return Err(bad("no host, or user information"));
    }
    if target.bytes().any(|b| b.is_ascii_control() || b == b' ') {
        return Err(bad("the path has spaces or control characters"));
    }
    let host = match authority.rsplit_once(':') {
        Some((host, port)) if !host.ends_with(']') || authority.starts_with('[') => {
            port.parse::<u16>()
                .map_err(|_| bad("the port is not a number"))?;
            host
        }
        _ => authority,
    };
    let addr = if host.len() == authority.len() {
        format!("{authority}:80")
    } else {
        authority.to_string()
    };
    Ok((addr, host, target))
}

/// `GET target` from `addr` (`HOST:PORT`) with `Host: host`: the whole
/// exchange (connecting, asking, reading the answer until the server
/// closes) before `timeout`, the answer within `max_body` bytes plus a
/// head; returns the status and the body.
pub fn get(
    addr: &str,
    host: &str,
    target: &str,
    accept: &str,
    max_body: usize,
    timeout: Duration,
) -> Result<(u16, Vec<u8>), GetError> {
    let deadline = Instant::now() + timeout;
    let mut stream = connect_before(addr, deadline)?;
    let request = format!(
        "GET {target} HTTP/1.1\r\nHost: {host}\r\nAccept: {accept}\r\nConnection: close\r\n\r\n"
    );
    let left = deadline.saturating_duration_since(Instant::now());
    Transport::set_write_timeout(&mut stream, Some(left))
        .and_then(|()| stream.write_all(request.as_bytes()))
        .map_err(timeout_or_io)?;
    let never = Stop::new();
    let mut reader = ReadBefore {
        stream: &mut stream,
        deadline,
        per_read: deadline.saturating_duration_since(Instant::now()),
        stop: &never,
        poll: Duration::from_millis(200),
    };
    let limit = max_body + MAX_RESPONSE_HEAD_BYTES;
    let mut bytes = Vec::new();
    (&mut reader)
        .take(limit as u64 + 1)
        .read_to_end(&mut bytes)
        .map_err(timeout_or_io)?;
    if bytes.len() > limit {
        return Err(GetError::TooLarge(max_body));
    }
    let (status, body) = parse_response(&bytes, max_body).map_err(|e| match e {
        ResponseError::TooLarge => GetError::TooLarge(max_body),
        ResponseError::Malformed(m) => GetError::Malformed(m),
    })?;
    Ok((status, body.to_vec()))
}

fn timeout_or_io(e: std::io::Error) -> GetError {
    if matches!(
        e.kind(),
        std::io::ErrorKind::TimedOut | std::io::ErrorKind::WouldBlock
    ) {
        GetError::Timeout
    } else {
        GetError::Io(IoFailure::bare(e))
    }
}

fn connect_before(addr: &str, deadline: Instant) -> Result<TcpStream, GetError> {
    let addrs: Vec<SocketAddr> = addr
        .to_socket_addrs()
        .map_err(|e| GetError::Connect(IoFailure::new(addr, e)))?
        .collect();
    let mut last = GetError::NoAddress(addr.to_string());
    for a in addrs {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(GetError::Timeout);
        }
        match TcpStream::connect_timeout(&a, left) {
            Ok(s) => return Ok(s),
            Err(e) => last = GetError::Connect(IoFailure::new(a.to_string(), e)),
        }
    }
    Err(last)
}

#[cfg(test)]
mod tests {
    #[test]
    fn http_urls_split_into_address_host_and_target() {
        assert_eq!(
            split_http_url("http://169.254.169.254/confboot/join").unwrap(),
            (
                "169.254.169.254:80".to_string(),
                "169.254.169.254",
                "/confboot/join"
            )
        );
        assert_eq!(
            split_http_url("http://127.0.0.1:8080").unwrap(),
            ("127.0.0.1:8080".to_string(), "127.0.0.1", "/")
        );
        assert_eq!(
            split_http_url("http://[::1]:81/x").unwrap(),
            ("[::1]:81".to_string(), "[::1]", "/x")
        );
        for bad in [
            "https://a/",
            "ftp://a",
            "http://",
            "http://u@a/",
            "http://a:b/",
            "http://a/b c",
        ] {
            assert!(split_http_url(bad).is_err(), "{bad}");
        }
    }

    use super::*;
    use confboot_wire::pipe;
    use std::io::Write;

    fn read(bytes: &[u8]) -> Result<Request, RequestError> {
        let (mut client, mut server) = pipe::pair();
        client.write_all(bytes).unwrap();
        let limits = HttpLimits {
            head_timeout: Duration::from_millis(200),
            ..HttpLimits::default()
        };
        read_request(&mut server, &limits, &Stop::new())
    }

    #[test]
    fn a_head_is_read_whole_and_bounded() {
        assert_eq!(
            read(b"GET /x?y=1 HTTP/1.1\r\nHost: h\r\n\r\n"),
            Ok(Request {
                method: "GET".into(),
                target: "/x?y=1".into()
            })
        );
        assert_eq!(read(b"GET / HTTP/2\r\n\r\n"), Err(RequestError::Malformed));
        assert_eq!(
            read(b"GET x HTTP/1.1\r\n\r\n"),
            Err(RequestError::Malformed)
        );
        assert_eq!(
            read("GET /é HTTP/1.1\r\n\r\n".as_bytes()),
            Err(RequestError::Malformed)
        );
        let long = format!("GET / HTTP/1.1\r\nX: {}\r\n\r\n", "a".repeat(9000));
        assert_eq!(read(long.as_bytes()), Err(RequestError::TooLarge));
        // An endless header line: refused once the bound is passed, not
        // read on.
        let endless = format!("GET / HTTP/1.1\r\nX: {}", "a".repeat(64 * 1024));
        assert_eq!(read(endless.as_bytes()), Err(RequestError::TooLarge));
    }

    #[test]
    fn the_gate_passes_whole_heads_and_closes_what_is_no_http() {
        assert_eq!(judge_opening(b"GET / HTTP/1.1\r\n\r\n"), Opening::Complete);
        assert_eq!(
            judge_opening(b"GET / HTTP/1.1\r\nHost: x"),
            Opening::Incomplete
        );
        assert_eq!(judge_opening(b"GE"), Opening::Incomplete);
        assert_eq!(judge_opening(b""), Opening::Incomplete);
        assert_eq!(judge_opening(b"\x16\x03\x01"), Opening::Invalid);
        assert_eq!(judge_opening(b"get / HTTP/1.1"), Opening::Invalid);
        assert_eq!(judge_opening(b" / HTTP/1.1"), Opening::Invalid);
        assert_eq!(judge_opening(&[b'A'; 17]), Opening::Invalid);
    }

    #[test]
    fn a_head_that_stops_short_is_not_a_request() {
        assert!(matches!(
            read(b"GET / HTTP/1.1\r\nX: y\r\n"),
            Err(RequestError::Io(_))
        ));
    }

    #[test]
    fn answers_round_trip_and_bad_ones_are_refused() {
        let (mut client, mut server) = pipe::pair();
        respond(
            &mut server,
            &HttpLimits::default(),
            405,
            "text/plain",
            b"no\n",
        )
        .unwrap();
        drop(server);
        let mut answer = Vec::new();
        client.read_to_end(&mut answer).unwrap();
        assert!(String::from_utf8_lossy(&answer).contains("\r\nAllow: GET\r\n"));
        assert_eq!(parse_response(&answer, 16), Ok((405, &b"no\n"[..])));
        assert_eq!(parse_response(&answer, 2), Err(ResponseError::TooLarge));

        let err = |bytes: &[u8]| parse_response(bytes, 1 << 20).unwrap_err().to_string();
        assert!(err(b"HTTP/1.1 200 OK\r\n").contains("no complete head"));
        assert!(err(b"SSH-2.0-x\r\n\r\n").contains("status line"));
        assert!(err(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nabc").contains("says 5"));
        assert!(
            err(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n").contains("not spoken")
        );
        assert_eq!(
            parse_response(
                b"HTTP/1.1 200 OK\r\nContent-Length: 99999999999\r\n\r\n",
                10
            ),
            Err(ResponseError::TooLarge)
        );
        assert_eq!(
            parse_response(b"HTTP/1.1 200 OK\r\n\r\n0123456789abc", 10),
            Err(ResponseError::TooLarge)
        );
    }
}
