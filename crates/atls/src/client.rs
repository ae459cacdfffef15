//! The client side: a TLS 1.3 handshake that takes any server certificate
//! and sends none, then this client's attestation message and the check of
//! the server's ([`super::message`] says in which order).

use std::sync::Arc;
use std::time::{Duration, Instant};

use rustls::client::Resumption;
use rustls::crypto::CryptoProvider;
use rustls::pki_types::ServerName;
use rustls::{ClientConfig, ClientConnection, StreamOwned};

use super::attestation;
use super::binding::{self, Role};
use super::error::AtlsError;
use super::handshake::{
    ALPN, AnyServerCertificate, SERVER_NAME, check_alpn, drive, provider, reset_timeouts,
};
use super::message::{self, AttestationMessage, SEALING_KEY_LEN};
use confboot_attest::{Attested, EXTRA_DATA_LEN, Issuer, Validator};
use confboot_wire::{DeadlineSocket, Transport};

/// The client end of aTLS: which server evidence it accepts, and what it
/// attests with. Cheap to share; one rustls `ClientConfig` serves every
/// connection.
#[derive(Clone)]
pub struct AtlsClient {
    config: Arc<ClientConfig>,
    server_validators: Vec<Arc<dyn Validator>>,
    issuer: Option<Arc<dyn Issuer>>,
}

/// An established aTLS client connection.
pub struct Connected<T: Transport> {
    /// The TLS stream, handshake and attestation exchange done, over a
    /// socket that holds deadlines: a deadline set on the stream bounds
    /// every read and write of the socket ([`confboot_wire::Client`]'s
    /// calls set theirs).
    pub stream: StreamOwned<ClientConnection, DeadlineSocket<T>>,
    /// What the server's evidence established; `None` when no server
    /// validators were given (server attestation not required).
    pub peer: Option<Attested>,
}

/// An aTLS client connection whose server evidence was read but not yet
/// checked ([`AtlsClient::connect_unverified`]): for a caller that reports
/// every check of the evidence itself (`confboot verify`) rather than
/// stopping at the first that fails. Nothing on the stream is to be
/// trusted before `server_message`'s evidence has been checked against
/// `expected_extra_data`.
pub struct Unverified<T: Transport> {
    /// The TLS stream, handshake and attestation exchange done (this
    /// client sent the empty message: it does not attest).
    pub stream: StreamOwned<ClientConnection, DeadlineSocket<T>>,
    /// The server's attestation message, decoded and within its bounds,
    /// its evidence not checked.
    pub server_message: AttestationMessage,
    /// The `extra_data` the server's evidence must carry on this session:
    /// this session's exporter for the server's role and the sealing key
    /// its message offers ([`super::binding::extra_data`]). Evidence made
    /// for any other session (relayed, recorded) carries another value.
    pub expected_extra_data: [u8; EXTRA_DATA_LEN],
}

impl AtlsClient {
    /// A client requiring the server to attest to one of `server_validators`
    /// (none: the server's attestation is not looked at) and attesting with
    /// `issuer` (none: it sends the empty message, which a server requiring
    /// client attestation refuses).
    pub fn new(
        server_validators: Vec<Arc<dyn Validator>>,
        issuer: Option<Arc<dyn Issuer>>,
    ) -> AtlsClient {
        AtlsClient {
            config: client_config(provider()),
            server_validators,
            issuer,
        }
    }

    /// Runs the client handshake and the attestation exchange on `sock`,
    /// all of it within `timeout` (an absolute bound: every read and write
    /// of the socket ends by then). Afterwards the socket's read and write
    /// timeouts are `timeout` each, until a deadline is set on the stream.
    ///
    /// A server that refuses this client's attestation says so before
    /// anything else: [`AtlsError::Refused`].
    pub fn connect<T: Transport>(
        &self,
        sock: T,
        timeout: Duration,
    ) -> Result<Connected<T>, AtlsError> {
        self.connect_sealing(sock, timeout, None)
    }

    /// As [`AtlsClient::connect`], offering `sealing_key` (an X25519 public
    /// key whose private key the caller keeps for this connection) next to
    /// this client's evidence, which binds it: the server may seal what it
    /// sends to it. Without an issuer the key is not sent.
    pub fn connect_sealing<T: Transport>(
        &self,
        sock: T,
        timeout: Duration,
        sealing_key: Option<[u8; SEALING_KEY_LEN]>,
    ) -> Result<Connected<T>, AtlsError> {
        let mut stream = self.handshake(sock, timeout)?;
        let sealing_key = sealing_key.filter(|_| self.issuer.is_some());
        let own = attestation::own_message(
            &stream.conn,
            Role::Client,
            self.issuer.as_ref(),
            sealing_key,
            None,
        )?;
        message::write(&mut stream, &own)?;
        let theirs = message::read(&mut stream)?;
        let checked =
            attestation::check(&stream.conn, Role::Server, &theirs, &self.server_validators)?;
        reset_timeouts(&mut stream.sock, timeout)?;
        Ok(Connected {
            stream,
            peer: checked.peer,
        })
    }
}

impl AtlsClient {
    /// The TLS handshake on `sock` within `timeout` (absolute), its ALPN
    /// checked: the stream the attestation exchange then runs on.
    fn handshake<T: Transport>(
        &self,
        sock: T,
        timeout: Duration,
    ) -> Result<StreamOwned<ClientConnection, DeadlineSocket<T>>, AtlsError> {
        let deadline = Instant::now() + timeout;
        let mut sock = DeadlineSocket::new(sock);
        let name = ServerName::try_from(SERVER_NAME)
            .map_err(|e| AtlsError::Tls(format!("the server name: {e}")))?;
        let mut conn = ClientConnection::new(Arc::clone(&self.config), name)
            .map_err(|e| AtlsError::Tls(e.to_string()))?;
        drive(&mut conn, &mut sock, deadline)?;
        check_alpn(conn.alpn_protocol())?;
        Ok(StreamOwned::new(conn, sock))
    }

    /// Runs the client handshake and the attestation exchange on `sock` as
    /// [`AtlsClient::connect`] does, within `timeout` (absolute), without
    /// attesting and without checking the server's evidence: returns it
    /// with the `extra_data` it must carry on this session, for the caller
    /// to check with every detail it reports. This client's validators are
    /// not used.
    pub fn connect_unverified<T: Transport>(
        &self,
        sock: T,
        timeout: Duration,
    ) -> Result<Unverified<T>, AtlsError> {
        let mut stream = self.handshake(sock, timeout)?;
        message::write(&mut stream, &AttestationMessage::none())?;
        let server_message = message::read(&mut stream)?;
        let expected_extra_data = binding::extra_data(
            &stream.conn,
            Role::Server,
            server_message.sealing_key.as_ref(),
        )?;
        reset_timeouts(&mut stream.sock, timeout)?;
        Ok(Unverified {
            stream,
            server_message,
            expected_extra_data,
        })
    }
}

/// TLS 1.3 only, ALPN [`ALPN`], any server certificate (its handshake
/// signature checked), no client certificate, no resumption, no 0-RTT.
fn client_config(provider: Arc<CryptoProvider>) -> Arc<ClientConfig> {
    let mut config = ClientConfig::builder_with_provider(Arc::clone(&provider))
        .with_protocol_versions(&[&rustls::version::TLS13])
        .expect("the ring provider supports TLS 1.3")
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(AnyServerCertificate { provider }))
        .with_no_client_auth();
    config.alpn_protocols = vec![ALPN.to_vec()];
    config.resumption = Resumption::disabled();
    config.enable_early_data = false;
    config.enable_sni = false;
    Arc::new(config)
}
