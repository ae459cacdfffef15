//! The server side: a TLS 1.3 handshake with a self-signed certificate
//! (new in every handshake when the server attests) and no client
//! certificate, then the client's attestation message checked and this
//! server's sent ([`super::message`] says in which order).

use std::marker::PhantomData;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rustls::crypto::CryptoProvider;
use rustls::server::{ClientHello, NoServerSessionStorage, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use rustls::{ServerConfig, ServerConnection, StreamOwned};

use super::attestation;
use super::binding::{Role, SESSION_BINDING_LEN};
use super::cert;
use super::error::AtlsError;
use super::handshake::{ALPN, FreshCertificate, check_alpn, drive, provider, reset_timeouts};
use super::message::{self, SEALING_KEY_LEN};
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
/// clients, which its type says: an `AtlsServer<()>` ([`AtlsServer::new`])
/// asks nothing of its clients, an `AtlsServer<AttestedPeer>`
/// ([`AtlsServer::requiring_clients`]) admits only clients whose evidence
/// one of its validators accepts, and hands each connection the
/// [`AttestedPeer`] it established. Cheap to share between threads; one
/// rustls `ServerConfig` serves every handshake.
pub struct AtlsServer<P: ClientPeer = ()> {
    config: Arc<ServerConfig>,
    issuer: Option<Arc<dyn Issuer>>,
    client_validators: Vec<Arc<dyn Validator>>,
    reference_values: Option<Arc<[u8]>>,
    peer: PhantomData<fn() -> P>,
}

/// A server handshake prepared for one connection.
pub struct ServerHandshake<P: ClientPeer = ()> {
    conn: ServerConnection,
    issuer: Option<Arc<dyn Issuer>>,
    client_validators: Vec<Arc<dyn Validator>>,
    reference_values: Option<Arc<[u8]>>,
    peer: PhantomData<fn() -> P>,
}

/// An accepted aTLS connection.
pub struct Accepted<T: Transport, P: ClientPeer = ()> {
    /// The TLS stream, handshake and attestation exchange done, over a
    /// socket that holds deadlines: a deadline set on the stream bounds
    /// every read and write of the socket (the RPC server sets one for each
    /// frame and each answer).
    pub stream: StreamOwned<ServerConnection, DeadlineSocket<T>>,
    /// What the connection established about the client, for its handlers
    /// ([`confboot_wire::serve_connection_as`]): `()`, or the
    /// [`AttestedPeer`] of a server that requires client attestation.
    pub peer: P,
}

/// The sealing key a client's evidence bound on its connection, as the
/// connection's handlers see it: [`AttestedPeer::sealing_key`]. Only a
/// client whose evidence was checked has one: what is sealed to it opens
/// only where that evidence was made.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SealingKey(pub [u8; SEALING_KEY_LEN]);

/// A client whose evidence the server checked, as its connection's
/// handlers see it ([`confboot_wire::CallContext::peer`] of a router served
/// by an `AtlsServer<AttestedPeer>`): what its evidence established,
/// appraisal included ([`Attested::set_verdict`]), and the sealing key it
/// bound, if it offered one. Only the server makes one, from evidence one
/// of its validators accepted.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AttestedPeer {
    attested: Attested,
    sealing_key: Option<SealingKey>,
    session: [u8; SESSION_BINDING_LEN],
}

impl AttestedPeer {
    /// What the client's evidence established, as the validator that
    /// accepted it said.
    pub fn attested(&self) -> &Attested {
        &self.attested
    }

    /// The X25519 public key the client offered for this connection, bound
    /// by its evidence: what the server may seal secrets to (`None`: it
    /// offered none).
    pub fn sealing_key(&self) -> Option<SealingKey> {
        self.sealing_key
    }

    /// The connection's [`session_binding`](super::binding::session_binding):
    /// what the server's signature over an answer binds to, so that it
    /// verifies on this connection only.
    pub fn session_binding(&self) -> &[u8; SESSION_BINDING_LEN] {
        &self.session
    }
}

/// What an aTLS server establishes about each client, of which its type
/// ([`AtlsServer<P>`]) says the kind: `()` (nothing: its clients do not
/// attest) or [`AttestedPeer`]. Sealed: these two are all there are.
pub trait ClientPeer: sealed::FromExchange + Send + Sync + 'static {}

impl ClientPeer for () {}
impl ClientPeer for AttestedPeer {}

mod sealed {
    use super::{AtlsError, Attested, SESSION_BINDING_LEN, SealingKey};

    /// The peer a server's attestation exchange established.
    pub trait FromExchange: Sized {
        /// From what the client's evidence established (`None`: the server
        /// required nothing), the sealing key it bound and the session's
        /// binding.
        fn from_exchange(
            attested: Option<Attested>,
            sealing_key: Option<SealingKey>,
            session: [u8; SESSION_BINDING_LEN],
        ) -> Result<Self, AtlsError>;
    }

    impl FromExchange for () {
        fn from_exchange(
            _: Option<Attested>,
            _: Option<SealingKey>,
            _: [u8; SESSION_BINDING_LEN],
        ) -> Result<(), AtlsError> {
            Ok(())
        }
    }

    impl FromExchange for super::AttestedPeer {
        fn from_exchange(
            attested: Option<Attested>,
            sealing_key: Option<SealingKey>,
            session: [u8; SESSION_BINDING_LEN],
        ) -> Result<Self, AtlsError> {
            // A server that requires attestation has validators, whose
            // check establishes this; fail closed all the same.
            let attested = attested.ok_or(AtlsError::MissingEvidence)?;
            Ok(super::AttestedPeer {
                attested,
                sealing_key,
                session,
            })
        }
    }
}

impl AtlsServer {
    /// A server that attests with `issuer` (if any) and asks nothing of
    /// its clients.
    pub fn new(issuer: Option<Arc<dyn Issuer>>) -> Result<AtlsServer, AtlsError> {
        AtlsServer::with_validators(issuer, Vec::new())
    }
}

impl AtlsServer<AttestedPeer> {
    /// A server that attests with `issuer` (if any) and requires every
    /// client to attest to one of `client_validators`: its connections'
    /// handlers see each client as an [`AttestedPeer`]. Refused without a
    /// validator ([`AtlsError::NoClientValidators`]).
    pub fn requiring_clients(
        issuer: Option<Arc<dyn Issuer>>,
        client_validators: Vec<Arc<dyn Validator>>,
    ) -> Result<AtlsServer<AttestedPeer>, AtlsError> {
        if client_validators.is_empty() {
            return Err(AtlsError::NoClientValidators);
        }
        AtlsServer::with_validators(issuer, client_validators)
    }
}

impl<P: ClientPeer> AtlsServer<P> {
    fn with_validators(
        issuer: Option<Arc<dyn Issuer>>,
        client_validators: Vec<Arc<dyn Validator>>,
    ) -> Result<AtlsServer<P>, AtlsError> {
        let provider = provider();
        let resolver: Arc<dyn ResolvesServerCert> = match issuer {
            Some(_) => Arc::new(FreshCertificate {
                provider: Arc::clone(&provider),
            }),
            None => Arc::new(FixedResolver(cert::fresh()?.into_certified_key(&provider)?)),
        };
        Ok(AtlsServer {
            config: server_config(provider, resolver)?,
            issuer,
            client_validators,
            reference_values: None,
            peer: PhantomData,
        })
    }

    /// Presents `set`, a signed reference-value set of this server's image
    /// (public), with its evidence in every exchange, for clients that pin
    /// its release key rather than run the same image (a rolling upgrade).
    /// At most [`super::message::MAX_REFERENCE_VALUES_LEN`] bytes.
    pub fn presenting(mut self, set: Vec<u8>) -> Result<AtlsServer<P>, AtlsError> {
        if set.len() > super::message::MAX_REFERENCE_VALUES_LEN {
            return Err(AtlsError::Message(
                crate::MessageFault::ReferenceValuesTooLarge(set.len()),
            ));
        }
        self.reference_values = Some(set.into());
        Ok(self)
    }

    /// Whether clients must attest.
    pub fn requires_client_attestation(&self) -> bool {
        !self.client_validators.is_empty()
    }

    /// Prepares one handshake. TLS 1.3 only, ALPN [`ALPN`], no client
    /// certificate, no session resumption, no tickets, no 0-RTT.
    pub fn start(&self) -> Result<ServerHandshake<P>, AtlsError> {
        let conn = ServerConnection::new(Arc::clone(&self.config))
            .map_err(|e| AtlsError::Tls(e.to_string()))?;
        Ok(ServerHandshake {
            conn,
            issuer: self.issuer.clone(),
            client_validators: self.client_validators.clone(),
            reference_values: self.reference_values.clone(),
            peer: PhantomData,
        })
    }

    /// Runs the server handshake and the attestation exchange on `sock`,
    /// bounded by `timeout`; returns the stream and what the client
    /// attested to.
    pub fn accept<T: Transport>(
        &self,
        sock: T,
        timeout: Duration,
    ) -> Result<Accepted<T, P>, AtlsError> {
        self.start()?.complete(sock, timeout)
    }
}

/// The one `ServerConfig` of a server.
fn server_config(
    provider: Arc<CryptoProvider>,
    resolver: Arc<dyn ResolvesServerCert>,
) -> Result<Arc<ServerConfig>, AtlsError> {
    let mut config = ServerConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS13])
        .map_err(|e| AtlsError::Tls(e.to_string()))?
        .with_no_client_auth()
        .with_cert_resolver(resolver);
    config.alpn_protocols = vec![ALPN.to_vec()];
    config.session_storage = Arc::new(NoServerSessionStorage {});
    config.send_tls13_tickets = 0;
    config.max_early_data_size = 0;
    Ok(Arc::new(config))
}

impl<P: ClientPeer> ServerHandshake<P> {
    /// Runs this handshake and the attestation exchange on `sock`, all of
    /// it within `timeout` (an absolute bound: every read and write of the
    /// socket ends by then): reads the client's attestation message, checks
    /// it when clients must attest (a refused client gets a
    /// `PERMISSION_DENIED` trailer and nothing else), then sends this
    /// server's. Afterwards the socket's read and write timeouts are
    /// `timeout` each, until a deadline is set on the stream.
    pub fn complete<T: Transport>(
        mut self,
        sock: T,
        timeout: Duration,
    ) -> Result<Accepted<T, P>, AtlsError> {
        let deadline = Instant::now() + timeout;
        let mut sock = DeadlineSocket::new(sock);
        drive(&mut self.conn, &mut sock, deadline)?;
        check_alpn(self.conn.alpn_protocol())?;
        let mut stream = StreamOwned::new(self.conn, sock);
        let peer = message::read(&mut stream)
            .and_then(|theirs| {
                attestation::check(&stream.conn, Role::Client, &theirs, &self.client_validators)
            })
            .and_then(|checked| {
                // A key is bound only by evidence that was checked.
                let session = super::binding::session_binding(&stream.conn)?;
                P::from_exchange(checked.peer, checked.sealing_key.map(SealingKey), session)
            });
        let peer = match peer {
            Ok(c) => c,
            Err(e @ (AtlsError::Io(_) | AtlsError::Timeout)) => return Err(e),
            Err(e) => {
                // The typed reason stays here; the client is told it was
                // refused, and nothing else moves.
                let _ = message::write_refusal(&mut stream);
                stream.conn.send_close_notify();
                let _ = stream.conn.write_tls(&mut stream.sock);
                linger(&mut stream.sock, deadline);
                return Err(e);
            }
        };
        let own = attestation::own_message(
            &stream.conn,
            Role::Server,
            self.issuer.as_ref(),
            None,
            self.reference_values.as_deref(),
        )?;
        message::write(&mut stream, &own)?;
        reset_timeouts(&mut stream.sock, timeout)?;
        Ok(Accepted { stream, peer })
    }
}

/// How long a refused connection is read (and what is read dropped)
/// before it is closed, at most.
const LINGER: Duration = Duration::from_millis(200);
/// How much of it, at most.
const LINGER_BYTES: usize = 64 * 1024;

/// Reads and drops what the peer still sends, until it closes, for at most
/// [`LINGER`] (and the connection's deadline) and [`LINGER_BYTES`]: closing
/// a socket with unread bytes resets the connection, and a reset can
/// destroy the refusal before the peer reads it (a client that sent a call
/// right after its attestation, not waiting for the answer).
fn linger<T: Transport>(sock: &mut DeadlineSocket<T>, deadline: Instant) {
    let until = deadline.min(Instant::now() + LINGER);
    if sock.set_read_deadline(Some(until)).is_err() {
        return;
    }
    let mut buf = [0u8; 4096];
    let mut read = 0;
    while read < LINGER_BYTES {
        match std::io::Read::read(sock, &mut buf) {
            Ok(0) | Err(_) => return,
            Ok(n) => read += n,
        }
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
