//! The server side: a rustls `ServerConfig` per handshake whose certificate
//! resolver attests for the SNI nonce, and whose client-certificate verifier
//! sends its own nonce as the only acceptable-CA name and checks the client's
//! evidence (both from [`super::handshake`]).

use std::sync::Arc;
use std::time::{Duration, Instant};

use rustls::crypto::CryptoProvider;
use rustls::server::{ClientHello, NoServerSessionStorage, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use rustls::{ServerConfig, ServerConnection, StreamOwned};

use super::cert;
use super::error::AtlsError;
use super::handshake::{
    ALPN, Attester, HandshakeState, PeerVerifier, check_alpn, drive, provider, reset_timeouts,
};
use super::nonce::Nonce;
use confboot_attest::{Attested, Issuer, Validator};
use confboot_net::listener::{Gate, Opening};
use confboot_wire::{DeadlineSocket, Transport};

/// Largest TLS plaintext record (RFC 8446, 5.1), and its header.
const MAX_RECORD: usize = 1 << 14;
const RECORD_HEADER: usize = 5;

/// Connections an aTLS server keeps waiting for their ClientHello by
/// default (see [`client_hello_gate`]).
pub const DEFAULT_GATE_CAPACITY: usize = 1024;
/// How long a connection may take to send its ClientHello by default.
pub const DEFAULT_GATE_TIMEOUT: Duration = Duration::from_secs(5);
/// How long the kernel holds a new connection for its ClientHello before
/// handing it to the gate anyway (`TCP_DEFER_ACCEPT`): a TLS client speaks
/// first, at once.
pub const CLIENT_HELLO_DEFER_ACCEPT: Duration = Duration::from_secs(1);

/// Judges a connection's first bytes as the start of a TLS ClientHello:
/// a handshake record (type 22, version 3.x, 1 to 2^14 bytes) whose first
/// message is a ClientHello. Complete once that whole first record is there;
/// anything else (garbage, a bare frame header, an alert) is invalid from
/// its first bytes. rustls checks the ClientHello itself afterwards.
pub fn client_hello_opening(bytes: &[u8]) -> Opening {
    const HANDSHAKE: u8 = 22;
    const CLIENT_HELLO: u8 = 1;
    match bytes {
        [] => return Opening::Incomplete,
        [t, ..] if *t != HANDSHAKE => return Opening::Invalid,
        [_, major, ..] if *major != 3 => return Opening::Invalid,
        [_, _, minor, ..] if *minor > 4 => return Opening::Invalid,
        _ => {}
    }
    let Some(header) = bytes.get(..RECORD_HEADER) else {
        return Opening::Incomplete;
    };
    let len = usize::from(u16::from_be_bytes([header[3], header[4]]));
    if len == 0 || len > MAX_RECORD {
        return Opening::Invalid;
    }
    match bytes.get(RECORD_HEADER) {
        None => Opening::Incomplete,
        Some(&t) if t != CLIENT_HELLO => Opening::Invalid,
        Some(_) if bytes.len() < RECORD_HEADER + len => Opening::Incomplete,
        Some(_) => Opening::Complete,
    }
}

/// The listener gate of an aTLS server: a connection reaches a worker once
/// the first record of its ClientHello is there, so peers that connect and
/// say nothing or trickle their ClientHello hold no worker; `capacity`
/// connections may wait at once (the longest-waiting is evicted for a new
/// one), each at most `timeout`. A peer that shut its side after its
/// ClientHello (a flood that aborts) is closed without a handshake.
/// The kernel hands a connection over with its ClientHello, or after
/// `CLIENT_HELLO_DEFER_ACCEPT` without one.
pub fn client_hello_gate(capacity: usize, timeout: Duration) -> Gate {
    Gate {
        judge: client_hello_opening,
        max_opening: RECORD_HEADER + MAX_RECORD,
        timeout,
        capacity,
        drop_half_closed: true,
        defer_accept: Some(CLIENT_HELLO_DEFER_ACCEPT),
    }
}

/// The server end of aTLS: what it attests with, and what it requires of
/// clients. Cheap to share between threads; every handshake gets its own
/// rustls `ServerConfig` (the client nonce differs per handshake).
pub struct AtlsServer {
    provider: Arc<CryptoProvider>,
    issuer: Option<Arc<dyn Issuer>>,
    /// Without an issuer: one plain self-signed P-256 certificate.
    fixed: Option<Arc<CertifiedKey>>,
    client_validators: Vec<Arc<dyn Validator>>,
}

/// A server handshake prepared for one connection (its own config and nonce).
pub struct ServerHandshake {
    conn: ServerConnection,
    state: Arc<HandshakeState>,
}

/// An accepted aTLS connection.
pub struct Accepted<T: Transport> {
    /// The TLS stream, handshake done, over a socket that holds deadlines:
    /// a deadline set on the stream bounds every read and write of the
    /// socket (the RPC server sets one for each frame and each answer).
    pub stream: StreamOwned<ServerConnection, DeadlineSocket<T>>,
    /// What the client's evidence established, when client attestation is required.
    pub peer: Option<Attested>,
}

impl AtlsServer {
    /// A server that attests with `issuer` (if any) and requires clients to
    /// attest to one of `client_validators` (if not empty).
    pub fn new(
        issuer: Option<Arc<dyn Issuer>>,
        client_validators: Vec<Arc<dyn Validator>>,
    ) -> Result<AtlsServer, AtlsError> {
        let provider = provider();
        let fixed = match issuer {
            Some(_) => None,
            None => {
                Some(cert::self_signed(&cert::new_key()?, None)?.into_certified_key(&provider)?)
            }
        };
        Ok(AtlsServer {
            provider,
            issuer,
            fixed,
            client_validators,
        })
    }

    /// Whether clients must attest.
    pub fn requires_client_attestation(&self) -> bool {
        !self.client_validators.is_empty()
    }

    /// Prepares one handshake: a fresh nonce (when clients attest) and a
    /// `ServerConfig` of its own. TLS 1.3 only, ALPN [`ALPN`], no
    /// session resumption, no tickets, no 0-RTT.
    pub fn start(&self) -> Result<ServerHandshake, AtlsError> {
        let state = Arc::new(HandshakeState::default());
        let resolver: Arc<dyn ResolvesServerCert> = match (&self.issuer, &self.fixed) {
            (Some(issuer), _) => Arc::new(Attester::new(
                Arc::clone(issuer),
                Arc::clone(&self.provider),
                Arc::clone(&state),
            )),
            (None, Some(fixed)) => Arc::new(FixedResolver(Arc::clone(fixed))),
            (None, None) => unreachable!("a server without issuer has a fixed certificate"),
        };
        let builder = ServerConfig::builder_with_provider(Arc::clone(&self.provider))
            .with_protocol_versions(&[&rustls::version::TLS13])
            .map_err(|e| AtlsError::Tls(e.to_string()))?;
        let builder = if self.client_validators.is_empty() {
            builder.with_no_client_auth()
        } else {
            let nonce = Nonce::random()?;
            builder.with_client_cert_verifier(Arc::new(PeerVerifier::of_client(
                nonce,
                self.client_validators.clone(),
                Arc::clone(&self.provider),
                Arc::clone(&state),
            )))
        };
        let mut config = builder.with_cert_resolver(resolver);
        config.alpn_protocols = vec![ALPN.to_vec()];
        config.session_storage = Arc::new(NoServerSessionStorage {});
        config.send_tls13_tickets = 0;
        config.max_early_data_size = 0;
        let conn =
            ServerConnection::new(Arc::new(config)).map_err(|e| AtlsError::Tls(e.to_string()))?;
        Ok(ServerHandshake { conn, state })
    }

    /// Runs the server handshake on `sock`, bounded by `timeout`; returns
    /// the stream and what the client attested to.
    pub fn accept<T: Transport>(
        &self,
        sock: T,
        timeout: Duration,
    ) -> Result<Accepted<T>, AtlsError> {
        self.start()?.complete(sock, timeout)
    }
}

impl ServerHandshake {
    /// Runs this handshake on `sock`, all of it within `timeout` (an
    /// absolute bound: every read and write of the socket ends by then).
    /// Afterwards the socket's read and write timeouts are `timeout` each,
    /// until a deadline is set on the stream.
    pub fn complete<T: Transport>(
        mut self,
        sock: T,
        timeout: Duration,
    ) -> Result<Accepted<T>, AtlsError> {
        let deadline = Instant::now() + timeout;
        let mut sock = DeadlineSocket::new(sock);
        drive(&mut self.conn, &mut sock, deadline, &self.state)?;
        check_alpn(self.conn.alpn_protocol())?;
        reset_timeouts(&mut sock, timeout)?;
        let peer = self.state.take_peer();
        Ok(Accepted {
            stream: StreamOwned::new(self.conn, sock),
            peer,
        })
    }
}

#[derive(Debug)]
struct FixedResolver(Arc<CertifiedKey>);

impl ResolvesServerCert for FixedResolver {
    fn resolve(&self, _: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(Arc::clone(&self.0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_client_hello_opens_and_anything_else_is_refused_from_its_first_bytes() {
        // A real ClientHello, as a client writes it.
        let hello = {
            let config = rustls::ClientConfig::builder_with_provider(super::provider())
                .with_protocol_versions(&[&rustls::version::TLS13])
                .unwrap()
                .with_root_certificates(rustls::RootCertStore::empty())
                .with_no_client_auth();
            let mut conn = rustls::ClientConnection::new(
                Arc::new(config),
                rustls::pki_types::ServerName::try_from("example.org").unwrap(),
            )
            .unwrap();
            let mut out = Vec::new();
            conn.write_tls(&mut out).unwrap();
            out
        };
        assert_eq!(client_hello_opening(&hello), Opening::Complete);
        for cut in 0..hello.len() {
            assert_eq!(
                client_hello_opening(&hello[..cut]),
                Opening::Incomplete,
                "{cut} bytes"
            );
        }
        for bad in [
            &[0x00, 0xff, 0xff, 0xff, 0xff][..], // a frame header announcing 4 GiB
            &[0x17, 0x03, 0x03, 0x00, 0x10],     // application data first
            &[0x16, 0x02],                       // SSL 2
            &[0x16, 0x03, 0x09],                 // no such version
            &[0x16, 0x03, 0x01, 0x00, 0x00],     // an empty record
            &[0x16, 0x03, 0x01, 0x40, 0x01],     // over 2^14 bytes
            &[0x16, 0x03, 0x01, 0x00, 0x10, 2],  // a ServerHello
            b"GET / HTTP/1.1\r\n",
        ] {
            assert_eq!(client_hello_opening(bad), Opening::Invalid, "{bad:?}");
        }
    }
}
