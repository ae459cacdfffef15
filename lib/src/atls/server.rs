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
use crate::attestation::{Attested, Issuer, Validator};
use crate::rpc::Transport;

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
    /// The TLS stream, handshake done.
    pub stream: StreamOwned<ServerConnection, T>,
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
    /// Runs this handshake on `sock`, all of it within `timeout`. Afterwards
    /// the socket's read and write timeouts are `timeout` each.
    pub fn complete<T: Transport>(
        mut self,
        mut sock: T,
        timeout: Duration,
    ) -> Result<Accepted<T>, AtlsError> {
        let deadline = Instant::now() + timeout;
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
