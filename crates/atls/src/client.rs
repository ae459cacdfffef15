//! The client side: a rustls `ClientConfig` per connection whose server
//! verifier holds this connection's SNI nonce, and whose client-certificate
//! resolver attests for the nonce the server sent as its acceptable-CA name
//! (both from [`super::handshake`]).

use std::sync::Arc;
use std::time::{Duration, Instant};

use rustls::client::Resumption;
use rustls::crypto::CryptoProvider;
use rustls::pki_types::ServerName;
use rustls::{ClientConfig, ClientConnection, StreamOwned};

use super::error::AtlsError;
use super::handshake::{
    ALPN, Attester, HandshakeState, PeerVerifier, check_alpn, drive, provider, reset_timeouts,
};
use super::nonce::Nonce;
use confboot_attest::{Attested, Issuer, Validator};
use confboot_wire::{DeadlineSocket, Transport};

/// The client end of aTLS: which server evidence it accepts, and what it
/// attests with when the server asks. Cheap to share; every connection gets
/// its own nonce and rustls `ClientConfig`.
#[derive(Clone)]
pub struct AtlsClient {
    provider: Arc<CryptoProvider>,
    server_validators: Vec<Arc<dyn Validator>>,
    issuer: Option<Arc<dyn Issuer>>,
}

/// An established aTLS client connection.
pub struct Connected<T: Transport> {
    /// The TLS stream, handshake done, over a socket that holds deadlines:
    /// a deadline set on the stream bounds every read and write of the
    /// socket ([`confboot_wire::Client`]'s calls set theirs).
    pub stream: StreamOwned<ClientConnection, DeadlineSocket<T>>,
    /// What the server's evidence established; `None` when no server
    /// validators were given (server attestation not required).
    pub peer: Option<Attested>,
}

impl AtlsClient {
    /// A client requiring the server to attest to one of `server_validators`
    /// (none: any server certificate is taken) and attesting with `issuer`
    /// when the server asks (none: it answers without a certificate, which a
    /// server requiring client attestation refuses).
    pub fn new(
        server_validators: Vec<Arc<dyn Validator>>,
        issuer: Option<Arc<dyn Issuer>>,
    ) -> AtlsClient {
        AtlsClient {
            provider: provider(),
            server_validators,
            issuer,
        }
    }

    /// Runs the client handshake on `sock`, all of it within `timeout` (an
    /// absolute bound: every read and write of the socket ends by then).
    /// Afterwards the socket's read and write timeouts are `timeout` each,
    /// until a deadline is set on the stream.
    ///
    /// In TLS 1.3 the client finishes its handshake before the server has
    /// checked the client's certificate: a server refusing our evidence
    /// shows as an error on the first read.
    pub fn connect<T: Transport>(
        &self,
        sock: T,
        timeout: Duration,
    ) -> Result<Connected<T>, AtlsError> {
        let deadline = Instant::now() + timeout;
        let mut sock = DeadlineSocket::new(sock);
        let nonce = Nonce::for_server_name()?;
        let state = Arc::new(HandshakeState::default());
        let builder = ClientConfig::builder_with_provider(Arc::clone(&self.provider))
            .with_protocol_versions(&[&rustls::version::TLS13])
            .map_err(|e| AtlsError::Tls(e.to_string()))?
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(PeerVerifier::of_server(
                nonce,
                self.server_validators.clone(),
                Arc::clone(&self.provider),
                Arc::clone(&state),
            )));
        let mut config = match &self.issuer {
            Some(issuer) => builder.with_client_cert_resolver(Arc::new(Attester::new(
                Arc::clone(issuer),
                Arc::clone(&self.provider),
                Arc::clone(&state),
            ))),
            None => builder.with_no_client_auth(),
        };
        config.alpn_protocols = vec![ALPN.to_vec()];
        config.resumption = Resumption::disabled();
        config.enable_early_data = false;
        config.enable_sni = true;
        let name = ServerName::try_from(nonce.to_server_name())
            .map_err(|e| AtlsError::Nonce(format!("SNI nonce is not a DNS name: {e}")))?;
        let mut conn = ClientConnection::new(Arc::new(config), name)
            .map_err(|e| AtlsError::Tls(e.to_string()))?;
        drive(&mut conn, &mut sock, deadline, &state)?;
        check_alpn(conn.alpn_protocol())?;
        reset_timeouts(&mut sock, timeout)?;
        let peer = state.take_peer();
        if !self.server_validators.is_empty() && peer.is_none() {
            // Unreachable unless rustls skipped the verifier: fail closed.
            return Err(AtlsError::MissingEvidence);
        }
        Ok(Connected {
            stream: StreamOwned::new(conn, sock),
            peer,
        })
    }
}
