//! The verify service over aTLS: the node agent's side ([`serve`]: the
//! handshake with a fresh certificate, then its evidence bound to the
//! session's exporter, nothing else) and the admin's ([`fetch_document`]:
//! the handshake without attesting, the node's evidence read with the
//! value it must be bound to, for [`super::check_node`]).
//!
//! Both sides hold absolute deadlines: the agent bounds the handshake and
//! its message by [`HANDSHAKE_TIMEOUT`] and an idle connection by
//! [`IDLE_TIMEOUT`]; the admin's client bounds connecting, the handshake
//! and reading the message by its timeout, all of it. The message is at
//! most 64 KiB of evidence ([`confboot_atls::message`]). Nothing here is
//! secret: the answer is a quote of public measurements.

use std::io;
use std::net::{SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::AttestationDocument;
use confboot_atls::{AtlsClient, AtlsError, Unverified};
use confboot_attest::{EXTRA_DATA_LEN, Issuer};
use confboot_net::{PoolConfig, ServerHandle};
use confboot_wire::{Router, ServerLimits};

/// Bound on one connection's handshake and the agent's attestation
/// message, from the ClientHello on.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a connection may stay open once the agent has attested: the
/// caller has all it needs and closes; no call is served.
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(5);
/// Largest frame the agent reads after attesting (a call it answers with
/// `UNIMPLEMENTED`).
const MAX_FRAME_LEN: u32 = 4 * 1024;

/// The agent's bounds on a connection.
pub fn limits() -> ServerLimits {
    ServerLimits {
        max_frame_len: MAX_FRAME_LEN,
        idle_timeout: IDLE_TIMEOUT,
        io_timeout: HANDSHAKE_TIMEOUT,
        frame_timeout: IDLE_TIMEOUT,
        max_calls_per_connection: Some(1),
        max_connection_age: Some(HANDSHAKE_TIMEOUT + IDLE_TIMEOUT),
        ..ServerLimits::default()
    }
}

/// Serves the verify service on `listener` with `pool`'s workers: every
/// connection an aTLS handshake with a certificate made for it, then
/// `issuer`'s evidence bound to the session's exporter; the caller does not
/// attest. Without a gate in `pool`, aTLS' ClientHello gate keeps silent
/// and trickling peers off the workers.
pub fn serve(
    listener: TcpListener,
    pool: PoolConfig,
    issuer: Arc<dyn Issuer>,
) -> io::Result<ServerHandle> {
    let atls = confboot_atls::AtlsServer::new(Some(issuer)).map_err(io::Error::other)?;
    confboot_atls::serve(listener, pool, limits(), Router::new(), atls)
}

/// What the admin's client read: the node's evidence, and the
/// `extra_data` it must carry to be bound to the session it came on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SessionEvidence {
    /// The node's evidence, not yet checked.
    pub document: AttestationDocument,
    /// This session's exporter for the server's role: what the evidence's
    /// `extra_data` must be ([`confboot_atls::binding::extra_data`]).
    pub extra_data: [u8; EXTRA_DATA_LEN],
}

/// Why the admin's client got no evidence.
#[derive(Debug, thiserror::Error)]
pub enum FetchError {
    /// The address does not resolve, or no address accepted a connection.
    #[error("cannot connect: {0}")]
    Connect(String),
    /// The node did not finish the handshake and its message in time.
    #[error("no whole answer before the timeout")]
    Timeout,
    /// The handshake or the attestation exchange failed: not TLS, another
    /// protocol, a malformed or oversized message, a refusal.
    #[error("{0}")]
    Atls(AtlsError),
    /// The node's attestation message carries no evidence.
    #[error("the node did not attest: its attestation message is empty")]
    NotAttested,
}

/// Connects to the verify service at `addr` (`HOST:PORT`) and reads the
/// node's evidence with the value it must be bound to. The whole exchange
/// (connecting, the handshake, the message) ends within `timeout`.
pub fn fetch_document(addr: &str, timeout: Duration) -> Result<SessionEvidence, FetchError> {
    let deadline = Instant::now() + timeout;
    let sock = tcp_connect(addr, deadline)?;
    let left = deadline.saturating_duration_since(Instant::now());
    if left.is_zero() {
        return Err(FetchError::Timeout);
    }
    let Unverified {
        mut stream,
        server_message,
        expected_extra_data,
    } = AtlsClient::new(Vec::new(), None)
        .connect_unverified(sock, left)
        .map_err(|e| match e {
            AtlsError::Timeout => FetchError::Timeout,
            other => FetchError::Atls(other),
        })?;
    // Done with the connection: say so (best effort, within its bounds).
    stream.conn.send_close_notify();
    let _ = stream.conn.write_tls(&mut stream.sock);
    let (variant, evidence) = server_message.evidence.ok_or(FetchError::NotAttested)?;
    Ok(SessionEvidence {
        document: AttestationDocument { variant, evidence },
        extra_data: expected_extra_data,
    })
}

/// Connects to the first address of `addr` that answers before `deadline`.
fn tcp_connect(addr: &str, deadline: Instant) -> Result<TcpStream, FetchError> {
    let addrs: Vec<SocketAddr> = addr
        .to_socket_addrs()
        .map_err(|e| FetchError::Connect(format!("{addr}: {e}")))?
        .collect();
    let mut last = FetchError::Connect(format!("{addr} resolves to no address"));
    for a in addrs {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(FetchError::Timeout);
        }
        match TcpStream::connect_timeout(&a, left) {
            Ok(s) => {
                s.set_nodelay(true)
                    .map_err(|e| FetchError::Connect(e.to_string()))?;
                return Ok(s);
            }
            Err(e) if e.kind() == io::ErrorKind::TimedOut => last = FetchError::Timeout,
            Err(e) => last = FetchError::Connect(format!("{a}: {e}")),
        }
    }
    Err(last)
}

#[cfg(test)]
mod tests {
    use super::*;
    use confboot_atls::AtlsServer;
    use confboot_attest::{AttestationError, Validator, Variant};

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

    /// Evidence recorded once, sent whatever the session.
    struct Recorded(Vec<u8>);
    impl Issuer for Recorded {
        fn variant(&self) -> Variant {
            Variant::QemuVtpm
        }
        fn issue(&self, _: &[u8; EXTRA_DATA_LEN]) -> Result<Vec<u8>, AttestationError> {
            Ok(self.0.clone())
        }
    }

    fn service(issuer: Arc<dyn Issuer>) -> ServerHandle {
        serve(
            TcpListener::bind("127.0.0.1:0").unwrap(),
            PoolConfig::default(),
            issuer,
        )
        .unwrap()
    }

    #[test]
    fn each_fetch_error_prints_its_message() {
        for (error, message) in [
            (
                FetchError::Connect("refused".into()),
                "cannot connect: refused",
            ),
            (FetchError::Timeout, "no whole answer before the timeout"),
            (
                FetchError::Atls(AtlsError::MissingEvidence),
                "aTLS: the peer did not attest",
            ),
            (
                FetchError::NotAttested,
                "the node did not attest: its attestation message is empty",
            ),
        ] {
            assert_eq!(error.to_string(), message, "{error:?}");
        }
    }

    #[test]
    fn a_caller_gets_evidence_bound_to_its_own_session_and_no_other() {
        let node = service(Arc::new(Echo));
        let addr = node.local_addr().to_string();
        let first = fetch_document(&addr, Duration::from_secs(10)).unwrap();
        assert_eq!(first.document.variant, Variant::QemuVtpm);
        assert_eq!(first.document.evidence, first.extra_data);
        let second = fetch_document(&addr, Duration::from_secs(10)).unwrap();
        assert_eq!(second.document.evidence, second.extra_data);
        assert_ne!(first.extra_data, second.extra_data, "a session's own value");

        // A host that replays the first session's evidence on a new one:
        // it is bound to the first session, not to this one.
        let host = service(Arc::new(Recorded(first.document.evidence.clone())));
        let replayed =
            fetch_document(&host.local_addr().to_string(), Duration::from_secs(10)).unwrap();
        assert_eq!(replayed.document.evidence, first.document.evidence);
        assert_ne!(replayed.document.evidence, replayed.extra_data);
        node.stop();
        host.stop();
    }

    #[test]
    fn answers_that_are_not_evidence_are_refused_by_kind() {
        // A host that does not attest.
        let silent = confboot_atls::serve(
            TcpListener::bind("127.0.0.1:0").unwrap(),
            PoolConfig::default(),
            limits(),
            Router::new(),
            AtlsServer::new(None).unwrap(),
        )
        .unwrap();
        let got = fetch_document(&silent.local_addr().to_string(), Duration::from_secs(10));
        assert!(matches!(got, Err(FetchError::NotAttested)), "{got:?}");
        silent.stop();

        // Evidence over the message's bound.
        let huge = service(Arc::new(Recorded(vec![1; 70 * 1024])));
        let got = fetch_document(&huge.local_addr().to_string(), Duration::from_secs(10));
        assert!(
            matches!(
                got,
                Err(FetchError::Atls(AtlsError::Message(
                    confboot_atls::MessageFault::EvidenceTooLarge(71680)
                )))
            ),
            "{got:?}"
        );
        huge.stop();

        // A server that wants its callers to attest refuses this one.
        let picky =
            AtlsServer::requiring_clients(Some(Arc::new(Echo)), vec![Arc::new(EchoCheck)]).unwrap();
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let server = std::thread::spawn(move || {
            let (sock, _) = listener.accept().unwrap();
            let _ = picky.accept(sock, Duration::from_secs(10));
        });
        let got = fetch_document(&addr.to_string(), Duration::from_secs(10));
        assert!(
            matches!(got, Err(FetchError::Atls(AtlsError::Refused(_)))),
            "{got:?}"
        );
        server.join().unwrap();

        // Not TLS at all.
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let server = std::thread::spawn(move || {
            use std::io::Write;
            let (mut sock, _) = listener.accept().unwrap();
            let _ = sock.write_all(b"SSH-2.0-OpenSSH\r\n");
        });
        let got = fetch_document(&addr.to_string(), Duration::from_secs(10));
        assert!(
            matches!(&got, Err(FetchError::Atls(AtlsError::Tls(_)))),
            "{got:?}"
        );
        server.join().unwrap();
    }

    /// The reason [`EchoCheck`] refuses with.
    #[derive(PartialEq)]
    struct OtherSession;

    /// Accepts evidence that is its extra_data.
    struct EchoCheck;
    impl Validator for EchoCheck {
        fn variant(&self) -> Variant {
            Variant::QemuVtpm
        }
        fn validate(
            &self,
            evidence: &[u8],
            extra: &[u8; EXTRA_DATA_LEN],
        ) -> Result<confboot_attest::Attested, AttestationError> {
            if evidence != extra {
                return Err(AttestationError::Binding(confboot_attest::Detail::with(
                    &OtherSession,
                    "another session",
                )));
            }
            Ok(confboot_attest::Attested {
                set_verdict: None,
                warnings: Vec::new(),
                variant: Variant::QemuVtpm,
                measurements: Default::default(),
            })
        }
    }
}
