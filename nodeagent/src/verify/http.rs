//! The verify service over plain HTTP/1.1 ([`confboot_net::http`]): the node
//! agent's side ([`serve_connection`]: one bounded request, one answer,
//! then the connection closes) and the admin's ([`fetch_document`]).
//!
//! Both sides read whole messages before a deadline (a peer that trickles
//! is cut off) and within a size bound. Nothing here is secret: the answer
//! is a quote of public measurements.

use std::time::Duration;

use super::{
    AttestationDocument, DocumentError, MAX_DOCUMENT_BYTES, RequestError, VERIFY_NONCE_LEN,
    parse_request_target, request_target,
};
use confboot_attest::Issuer;
use confboot_net::http::{self, GetError, HttpLimits, read_request, respond, respond_to_error};
use confboot_util::stop::Stop;
use confboot_wire::Transport;

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
    limits: &HttpLimits,
    stop: &Stop,
) -> Served {
    let request = match read_request(stream, limits, stop) {
        Ok(request) => request,
        Err(e) => {
            return match respond_to_error(stream, limits, &e) {
                Some(status) => Served::Answered(status),
                None => Served::NoRequest(e.to_string()),
            };
        }
    };
    if request.method != "GET" {
        return answer(stream, limits, 405, "text/plain", b"only GET is served\n");
    }
    let nonce = match parse_request_target(&request.target) {
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

fn answer<T: Transport + ?Sized>(
    stream: &mut T,
    limits: &HttpLimits,
    status: u16,
    content_type: &str,
    body: &[u8],
) -> Served {
    match respond(stream, limits, status, content_type, body) {
        Ok(()) => Served::Answered(status),
        Err(e) => Served::WriteFailed(e.to_string()),
    }
}

/// Why the admin's client got no attestation document.
#[derive(Debug, thiserror::Error)]
pub enum FetchError {
    /// The address does not resolve, or no address accepted a connection.
    #[error("cannot connect: {0}")]
    Connect(String),
    /// The node did not answer whole within the timeout.
    #[error("no whole answer before the timeout")]
    Timeout,
    /// Reading or writing failed.
    #[error("connection failed: {0}")]
    Io(String),
    /// The answer is larger than a document can be.
    #[error(
        "the answer is larger than an attestation document may be ({MAX_DOCUMENT_BYTES} bytes)"
    )]
    TooLarge,
    /// The answer is not HTTP of the expected shape.
    #[error("not an HTTP answer of the verify service: {0}")]
    Response(String),
    /// The node answered with an error status and this text.
    #[error("the node answered HTTP {status}: {message}")]
    Status {
        /// The HTTP status.
        status: u16,
        /// The first line of the body, printable characters only.
        message: String,
    },
    /// The body is not an attestation document.
    #[error("{0}")]
    Document(DocumentError),
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
    let host = addr.rsplit_once(':').map_or(addr, |(h, _)| h);
    let target = request_target(nonce);
    let (status, body) = http::get(
        addr,
        host,
        &target,
        "application/json",
        MAX_DOCUMENT_BYTES,
        timeout,
    )
    .map_err(|e| match e {
        GetError::Url(m) | GetError::Connect(m) => FetchError::Connect(m),
        GetError::Timeout => FetchError::Timeout,
        GetError::Io(m) => FetchError::Io(m),
        GetError::TooLarge(_) => FetchError::TooLarge,
        GetError::Malformed(m) => FetchError::Response(m),
    })?;
    if status != 200 {
        let message: String = String::from_utf8_lossy(&body)
            .lines()
            .next()
            .unwrap_or("")
            .chars()
            .filter(|c| !c.is_control())
            .take(200)
            .collect();
        return Err(FetchError::Status { status, message });
    }
    AttestationDocument::from_json(&body).map_err(FetchError::Document)
}

#[cfg(test)]
mod tests {
    use super::*;
    use confboot_attest::{AttestationError, EXTRA_DATA_LEN, Variant};
    use confboot_wire::pipe;
    use std::io::{Read, Write};

    #[test]
    fn each_fetch_error_prints_its_message() {
        let cases = [
            (
                FetchError::Connect("refused".into()),
                "cannot connect: refused".to_string(),
            ),
            (
                FetchError::Timeout,
                "no whole answer before the timeout".to_string(),
            ),
            (
                FetchError::Io("reset".into()),
                "connection failed: reset".to_string(),
            ),
            (
                FetchError::TooLarge,
                format!(
                    "the answer is larger than an attestation document may be \
                     ({MAX_DOCUMENT_BYTES} bytes)"
                ),
            ),
            (
                FetchError::Response("no status line".into()),
                "not an HTTP answer of the verify service: no status line".to_string(),
            ),
            (
                FetchError::Status {
                    status: 400,
                    message: "missing query parameter nonce".into(),
                },
                "the node answered HTTP 400: missing query parameter nonce".to_string(),
            ),
            (
                FetchError::Document(DocumentError::Malformed("no variant".into())),
                "not an attestation document: no variant".to_string(),
            ),
        ];
        for (error, message) in cases {
            assert_eq!(error.to_string(), message, "{error:?}");
        }
    }

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
        let limits = HttpLimits {
            head_timeout: Duration::from_millis(300),
            ..HttpLimits::default()
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
        let (status, body) = http::parse_response(&answer, MAX_DOCUMENT_BYTES).unwrap();
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
            assert_eq!(http::parse_response(&answer, 1 << 20).unwrap().0, status);
        }
        let (served, answer) = serve(format!("GET {good} HTTP/1.1\r\n\r\n").as_bytes(), &Broken);
        assert_eq!(served, Served::Answered(500));
        let (_, body) = http::parse_response(&answer, 1 << 20).unwrap();
        assert_eq!(body, b"cannot attest: cannot issue evidence: TPM gone\n");
    }

    #[test]
    fn a_head_that_never_ends_is_cut_at_its_deadline() {
        let (served, answer) = serve(b"GET / HTTP/1.1\r\nX: y\r\n", &Echo);
        assert!(matches!(served, Served::NoRequest(_)), "{served:?}");
        assert!(answer.is_empty());
    }

    /// What the client makes of a host's answer.
    fn fetched(answer: &'static [u8]) -> Result<AttestationDocument, FetchError> {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let host = std::thread::spawn(move || {
            let (mut sock, _) = listener.accept().unwrap();
            let _ = sock.read(&mut [0u8; 1024]);
            let _ = sock.write_all(answer);
        });
        let got = fetch_document(
            &addr.to_string(),
            &[1; VERIFY_NONCE_LEN],
            Duration::from_secs(10),
        );
        host.join().unwrap();
        got
    }

    #[test]
    fn answers_that_are_not_documents_are_refused() {
        let err = |bytes: &'static [u8]| fetched(bytes).unwrap_err().to_string();
        assert!(err(b"SSH-2.0-x\r\n\r\n").contains("status line"));
        assert!(err(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nabc").contains("says 5"));
        assert!(matches!(
            fetched(b"HTTP/1.1 200 OK\r\nContent-Length: 99999999999\r\n\r\n"),
            Err(FetchError::TooLarge)
        ));
        assert!(matches!(
            fetched(b"HTTP/1.1 404 Not Found\r\nContent-Length: 3\r\n\r\nno\n"),
            Err(FetchError::Status { status: 404, ref message }) if message == "no"
        ));
        assert!(matches!(
            fetched(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n[]"),
            Err(FetchError::Document(DocumentError::Malformed(_)))
        ));
    }
}
