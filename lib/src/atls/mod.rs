//! aTLS: attestation inside the TLS handshake (TLS 1.3 only, ALPN
//! `confboot/1`, rustls with the ring provider), in either or both
//! directions, compatible with Constellation's scheme.
//!
//! - **The server attests** when it has an [`Issuer`]: the client draws a
//!   nonce and sends it in the SNI; per handshake the server makes a fresh
//!   P-256 key and a self-signed certificate whose non-critical extension
//!   (OID = the variant's) carries evidence bound to that key and nonce. The
//!   client checks it inside the handshake with its validators.
//! - **The client attests** when the server has client validators: the
//!   server draws a nonce per handshake and sends it as the only acceptable-CA
//!   name of its CertificateRequest (so each connection gets its own
//!   `ServerConfig`); the client answers with an attested certificate of its
//!   own, which the server checks inside the handshake. The handlers of the
//!   connection see the result as [`crate::rpc::CallContext::peer`].
//!
//! Encodings of the nonces and of the binding: [`nonce`]. The certificate and
//! its checks: [`cert`]. Every failure aborts the handshake and comes back as
//! an [`AtlsError`] that says which check failed. Handshake signatures are
//! checked by rustls' own functions; session resumption and 0-RTT are off,
//! so every connection is attested afresh.
//!
//! Validators are `Arc<dyn Validator>`; pass a
//! [`crate::attestation::SwappableValidator`] to change the policy at run
//! time: each handshake validates with one call, hence one policy, and a swap
//! applies from the next handshake on.
//!
//! One-line wiring: [`serve`] and [`connect`]. Pieces: [`AtlsServer`] and
//! [`AtlsClient`] over any [`Transport`].
//!
//! ```
//! use std::net::TcpListener;
//! use std::sync::Arc;
//! use std::time::Duration;
//! use confboot::atls;
//! use confboot::attestation::{Attested, AttestationError, Issuer, Validator, Variant};
//! use confboot::rpc::{PoolConfig, Router, ServerLimits, Status};
//! use confboot_proto::health::{HealthCheckRequest, HealthCheckResponse};
//!
//! // Stand-ins for a real issuer and validator (vTPM, SEV-SNP): evidence is
//! // just the extra_data, which is NOT secure and only shows the wiring.
//! struct Echo;
//! impl Issuer for Echo {
//!     fn variant(&self) -> Variant { Variant::QemuVtpm }
//!     fn issue(&self, extra: &[u8; 32]) -> Result<Vec<u8>, AttestationError> { Ok(extra.to_vec()) }
//! }
//! impl Validator for Echo {
//!     fn variant(&self) -> Variant { Variant::QemuVtpm }
//!     fn validate(&self, ev: &[u8], extra: &[u8; 32]) -> Result<Attested, AttestationError> {
//!         if ev != extra { return Err(AttestationError::Binding("other handshake".into())); }
//!         Ok(Attested { variant: Variant::QemuVtpm, measurements: Default::default() })
//!     }
//! }
//!
//! let router = Router::new().unary(confboot_proto::HEALTH_CHECK, |ctx, _: HealthCheckRequest| {
//!     // The server required client attestation, so the caller is known here.
//!     assert!(ctx.peer().is_some());
//!     Ok(HealthCheckResponse { status: 1 })
//! });
//! let listener = TcpListener::bind("127.0.0.1:0").unwrap();
//! let server = atls::serve(
//!     listener, PoolConfig::default(), ServerLimits::default(), router,
//!     Some(Arc::new(Echo)),                 // the server attests
//!     &[Arc::new(Echo) as Arc<dyn Validator>], // and requires the client to
//! ).unwrap();
//!
//! let (mut client, server_attested) = atls::connect(
//!     server.local_addr(), Duration::from_secs(10),
//!     &[Arc::new(Echo) as Arc<dyn Validator>], // require server attestation
//!     Some(Arc::new(Echo)),                 // and attest ourselves
//! ).unwrap();
//! assert_eq!(server_attested.unwrap().variant, Variant::QemuVtpm);
//! let resp: HealthCheckResponse = client
//!     .unary(confboot_proto::HEALTH_CHECK, &HealthCheckRequest::default(), Duration::from_secs(10))
//!     .unwrap();
//! assert_eq!(resp.status, 1);
//! server.stop();
//! ```

pub mod cert;
mod client;
pub mod nonce;
mod server;

use std::fmt;
use std::io;
use std::net::{SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rustls::crypto::CryptoProvider;
use rustls::{ClientConnection, StreamOwned};

use crate::attestation::{AttestationError, Attested, Issuer, Validator};
use crate::rpc::{self, PoolConfig, Router, ServerHandle, ServerLimits, Transport};

pub use client::{AtlsClient, Connected};
pub use nonce::Nonce;
pub use server::{Accepted, AtlsServer, ServerHandshake};

/// The ALPN protocol name both sides require.
pub const ALPN: &[u8] = b"confboot/1";

/// Why an aTLS handshake failed. Each check that can refuse a peer has its
/// own variant, so callers (and tests) can tell which one did.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum AtlsError {
    /// Connecting or reading/writing the socket failed.
    Io(String),
    /// The handshake did not finish in time.
    Timeout,
    /// The TLS handshake failed for a reason outside aTLS' own checks (for
    /// example the peer sent an alert, or presented no certificate).
    Tls(String),
    /// The peer's ALPN is not [`ALPN`].
    Alpn(String),
    /// A nonce was missing or malformed (SNI, acceptable-CA names), or none
    /// could be drawn.
    Nonce(String),
    /// The peer's certificate cannot be parsed, or ours cannot be made.
    Certificate(String),
    /// The peer's certificate carries no evidence extension.
    MissingEvidence,
    /// The peer's evidence extension has an OID no configured validator accepts.
    UnknownVariant {
        /// The dotted OID found.
        oid: String,
    },
    /// The peer's certificate has a critical extension we refuse (the
    /// evidence extension must be non-critical).
    CriticalExtension {
        /// The dotted OID of the extension.
        oid: String,
    },
    /// The peer's certificate is not valid now.
    OutsideValidity {
        /// Start of validity, seconds since the Unix epoch.
        not_before: i64,
        /// End of validity, seconds since the Unix epoch.
        not_after: i64,
        /// The time of the check, seconds since the Unix epoch.
        now: i64,
    },
    /// The validator refused the peer's evidence: wrong binding (a stale
    /// nonce, a certificate key other than the one the evidence was made
    /// for), signature, trust, or measurement policy — see the inner error.
    Attestation(AttestationError),
    /// Our own issuer could not produce evidence.
    Issue(AttestationError),
}

impl fmt::Display for AtlsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AtlsError::Io(m) => write!(f, "aTLS: I/O error: {m}"),
            AtlsError::Timeout => write!(f, "aTLS: handshake timed out"),
            AtlsError::Tls(m) => write!(f, "aTLS: TLS handshake failed: {m}"),
            AtlsError::Alpn(m) => write!(f, "aTLS: wrong ALPN protocol: {m}"),
            AtlsError::Nonce(m) => write!(f, "aTLS: bad nonce: {m}"),
            AtlsError::Certificate(m) => write!(f, "aTLS: certificate: {m}"),
            AtlsError::MissingEvidence => {
                write!(f, "aTLS: peer certificate carries no attestation evidence")
            }
            AtlsError::UnknownVariant { oid } => write!(
                f,
                "aTLS: peer evidence has OID {oid}, which no configured validator accepts"
            ),
            AtlsError::CriticalExtension { oid } => {
                write!(f, "aTLS: peer certificate has critical extension {oid}")
            }
            AtlsError::OutsideValidity {
                not_before,
                not_after,
                now,
            } => write!(
                f,
                "aTLS: peer certificate valid from {not_before} to {not_after}, not at {now}"
            ),
            AtlsError::Attestation(e) => write!(f, "aTLS: peer attestation refused: {e}"),
            AtlsError::Issue(e) => write!(f, "aTLS: cannot attest: {e}"),
        }
    }
}

impl std::error::Error for AtlsError {}

impl AtlsError {
    /// The aTLS error a verifier put inside a rustls error, if any.
    pub fn from_rustls(e: &rustls::Error) -> AtlsError {
        if let rustls::Error::InvalidCertificate(rustls::CertificateError::Other(o)) = e
            && let Some(a) = o.0.downcast_ref::<AtlsError>()
        {
            return a.clone();
        }
        AtlsError::Tls(e.to_string())
    }

    /// Wraps this error for rustls, so a verifier aborts the handshake with it.
    pub(crate) fn into_rustls(self) -> rustls::Error {
        rustls::Error::InvalidCertificate(rustls::CertificateError::Other(rustls::OtherError(
            Arc::new(self),
        )))
    }

    fn from_io(e: io::Error) -> AtlsError {
        if let Some(tls) = e.get_ref().and_then(|i| i.downcast_ref::<rustls::Error>()) {
            return AtlsError::from_rustls(tls);
        }
        match e.kind() {
            io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut => AtlsError::Timeout,
            _ => AtlsError::Io(e.to_string()),
        }
    }
}

/// The crypto provider aTLS uses: rustls' ring provider (never the process
/// default).
pub fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// What the callbacks of one handshake found: the peer's attestation, or
/// the first error (kept because rustls reports some failures only as
/// "no certificate resolved").
#[derive(Default, Debug)]
pub(crate) struct HandshakeState {
    peer: Mutex<Option<Attested>>,
    error: Mutex<Option<AtlsError>>,
}

impl HandshakeState {
    pub(crate) fn set_peer(&self, a: Attested) {
        *lock(&self.peer) = Some(a);
    }

    pub(crate) fn take_peer(&self) -> Option<Attested> {
        lock(&self.peer).take()
    }

    /// Records `e` (unless an earlier error is recorded) and returns it.
    pub(crate) fn fail(&self, e: AtlsError) -> AtlsError {
        let mut g = lock(&self.error);
        if g.is_none() {
            *g = Some(e.clone());
        }
        e
    }

    pub(crate) fn error(&self) -> Option<AtlsError> {
        lock(&self.error).clone()
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Seconds since the Unix epoch of a rustls time.
pub(crate) fn unix_secs(t: rustls::pki_types::UnixTime) -> u64 {
    t.as_secs()
}

/// Runs a handshake to its end over `sock`, bounding every read and write by
/// `deadline`. On failure, the alert rustls queued is sent (best effort) and
/// the error recorded by a callback wins over rustls' summary of it.
pub(crate) fn drive<C, D, T>(
    conn: &mut C,
    sock: &mut T,
    deadline: Instant,
    state: &HandshakeState,
) -> Result<(), AtlsError>
where
    C: std::ops::DerefMut<Target = rustls::ConnectionCommon<D>>,
    D: rustls::SideData,
    T: Transport,
{
    let result = (|| -> Result<(), AtlsError> {
        loop {
            while conn.wants_write() {
                set_timeouts(sock, deadline)?;
                conn.write_tls(sock).map_err(AtlsError::from_io)?;
            }
            sock.flush().map_err(AtlsError::from_io)?;
            if !conn.is_handshaking() {
                return Ok(());
            }
            set_timeouts(sock, deadline)?;
            let eof = conn.read_tls(sock).map_err(AtlsError::from_io)? == 0;
            if let Err(e) = conn.process_new_packets() {
                // Tell the peer why (best effort), then report.
                while conn.wants_write() && set_timeouts(sock, deadline).is_ok() {
                    if conn.write_tls(sock).is_err() {
                        break;
                    }
                }
                let _ = sock.flush();
                return Err(AtlsError::from_rustls(&e));
            }
            if eof && conn.is_handshaking() {
                return Err(AtlsError::Tls(
                    "peer closed the connection during the handshake".into(),
                ));
            }
        }
    })();
    match result {
        Ok(()) => match state.error() {
            // A callback failed without failing the handshake (our issuer
            // could not attest): fail closed.
            Some(e) => Err(e),
            None => Ok(()),
        },
        Err(e) => Err(state.error().unwrap_or(e)),
    }
}

fn set_timeouts<T: Transport>(sock: &mut T, deadline: Instant) -> Result<(), AtlsError> {
    let left = deadline.saturating_duration_since(Instant::now());
    if left.is_zero() {
        return Err(AtlsError::Timeout);
    }
    sock.set_read_timeout(Some(left))
        .and_then(|_| sock.set_write_timeout(Some(left)))
        .map_err(AtlsError::from_io)
}

/// Sets both timeouts of a socket whose handshake is done.
fn reset_timeouts<T: Transport>(sock: &mut T, timeout: Duration) -> Result<(), AtlsError> {
    sock.set_read_timeout(Some(timeout))
        .and_then(|_| sock.set_write_timeout(Some(timeout)))
        .map_err(AtlsError::from_io)
}

fn check_alpn(got: Option<&[u8]>) -> Result<(), AtlsError> {
    if got == Some(ALPN) {
        Ok(())
    } else {
        Err(AtlsError::Alpn(format!(
            "peer agreed on {:?}",
            got.map(String::from_utf8_lossy)
        )))
    }
}

/// Serves `router` over aTLS on `listener` with a bounded worker pool.
///
/// With `server_issuer`, the server attests in every handshake; with
/// `client_validators` non-empty, every client must attest, and handlers see
/// what its evidence established as [`crate::rpc::CallContext::peer`]. Each
/// handshake is bounded by `limits.io_timeout`. Refused handshakes are
/// logged and closed.
pub fn serve(
    listener: TcpListener,
    pool: PoolConfig,
    limits: ServerLimits,
    router: Router,
    server_issuer: Option<Arc<dyn Issuer>>,
    client_validators: &[Arc<dyn Validator>],
) -> io::Result<ServerHandle> {
    let atls =
        AtlsServer::new(server_issuer, client_validators.to_vec()).map_err(io::Error::other)?;
    rpc::listener::spawn(listener, pool, move |sock, stop| {
        let peer_addr = sock.peer_addr().ok();
        match atls.accept(sock, limits.io_timeout) {
            Ok(Accepted { mut stream, peer }) => {
                let end = rpc::serve_connection_as(&mut stream, &router, &limits, stop, peer);
                log::debug!("aTLS connection from {peer_addr:?} ended: {end:?}");
                stream.conn.send_close_notify();
                while stream.conn.wants_write() {
                    if stream.conn.write_tls(&mut stream.sock).is_err() {
                        break;
                    }
                }
            }
            Err(e) => log::info!("aTLS handshake with {peer_addr:?} refused: {e}"),
        }
    })
}

/// An RPC client over an aTLS connection on TCP, as [`connect`] returns it.
pub type AtlsRpcClient = rpc::Client<StreamOwned<ClientConnection, TcpStream>>;

/// Connects to `addr` over aTLS and returns an RPC client, and what the
/// server's evidence established.
///
/// With `server_validators` non-empty the server must attest with a variant
/// one of them accepts (otherwise any server certificate is taken, and
/// `None` returned). With `client_issuer` the client attests when the server
/// asks; a server refusing our evidence shows on the first call. `timeout`
/// bounds the TCP connect plus the handshake; it stays the socket's read and
/// write timeout afterwards (each call also bounds its I/O by its deadline).
pub fn connect(
    addr: impl ToSocketAddrs,
    timeout: Duration,
    server_validators: &[Arc<dyn Validator>],
    client_issuer: Option<Arc<dyn Issuer>>,
) -> Result<(AtlsRpcClient, Option<Attested>), AtlsError> {
    let deadline = Instant::now() + timeout;
    let sock = tcp_connect(addr, deadline)?;
    let client = AtlsClient::new(server_validators.to_vec(), client_issuer);
    let Connected { mut stream, peer } =
        client.connect(sock, deadline.saturating_duration_since(Instant::now()))?;
    reset_timeouts(&mut stream.sock, timeout)?;
    Ok((rpc::Client::new(stream), peer))
}

/// Connects to the first address of `addr` that answers before `deadline`,
/// with timeouts set on the socket.
fn tcp_connect(addr: impl ToSocketAddrs, deadline: Instant) -> Result<TcpStream, AtlsError> {
    let addrs: Vec<SocketAddr> = addr
        .to_socket_addrs()
        .map_err(|e| AtlsError::Io(format!("cannot resolve the address: {e}")))?
        .collect();
    let mut last = AtlsError::Io("the address resolved to nothing".into());
    for a in addrs {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(AtlsError::Timeout);
        }
        match TcpStream::connect_timeout(&a, left) {
            Ok(s) => {
                let left = deadline
                    .saturating_duration_since(Instant::now())
                    .max(Duration::from_millis(1));
                s.set_nodelay(true)
                    .and_then(|_| s.set_read_timeout(Some(left)))
                    .and_then(|_| s.set_write_timeout(Some(left)))
                    .map_err(|e| AtlsError::Io(e.to_string()))?;
                return Ok(s);
            }
            Err(e) => last = AtlsError::from_io(e),
        }
    }
    Err(last)
}
