//! The server side: a certificate resolver that attests for the SNI nonce,
//! and a client-certificate verifier that sends its own nonce as the only
//! acceptable-CA name and checks the client's evidence.

use std::sync::Arc;
use std::time::{Duration, Instant};

use rustls::client::danger::HandshakeSignatureValid;
use rustls::crypto::CryptoProvider;
use rustls::pki_types::{CertificateDer, UnixTime};
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::server::{ClientHello, NoServerSessionStorage, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use rustls::{
    DigitallySignedStruct, DistinguishedName, ServerConfig, ServerConnection, SignatureScheme,
    StreamOwned,
};

use super::nonce::Nonce;
use super::{AtlsError, HandshakeState, cert, check_alpn, drive, reset_timeouts, unix_secs};
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
        let provider = super::provider();
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
    /// `ServerConfig` of its own. TLS 1.3 only, ALPN [`super::ALPN`], no
    /// session resumption, no tickets, no 0-RTT.
    pub fn start(&self) -> Result<ServerHandshake, AtlsError> {
        let state = Arc::new(HandshakeState::default());
        let resolver: Arc<dyn ResolvesServerCert> = match (&self.issuer, &self.fixed) {
            (Some(issuer), _) => Arc::new(AttestingResolver {
                issuer: Arc::clone(issuer),
                provider: Arc::clone(&self.provider),
                state: Arc::clone(&state),
            }),
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
            builder.with_client_cert_verifier(Arc::new(AttestedClientVerifier {
                hints: vec![DistinguishedName::from(nonce.to_distinguished_name())],
                nonce,
                validators: self.client_validators.clone(),
                provider: Arc::clone(&self.provider),
                state: Arc::clone(&state),
            }))
        };
        let mut config = builder.with_cert_resolver(resolver);
        config.alpn_protocols = vec![super::ALPN.to_vec()];
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

/// Makes the attested certificate for the nonce in the client's SNI.
struct AttestingResolver {
    issuer: Arc<dyn Issuer>,
    provider: Arc<CryptoProvider>,
    state: Arc<HandshakeState>,
}

impl std::fmt::Debug for AttestingResolver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AttestingResolver")
            .field("variant", &self.issuer.variant())
            .finish()
    }
}

impl ResolvesServerCert for AttestingResolver {
    fn resolve(&self, hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        let made = (|| {
            if !hello
                .signature_schemes()
                .contains(&SignatureScheme::ECDSA_NISTP256_SHA256)
            {
                return Err(AtlsError::Tls(
                    "the client does not accept ECDSA P-256 signatures".into(),
                ));
            }
            let name = hello
                .server_name()
                .ok_or_else(|| AtlsError::Nonce("the client sent no SNI nonce".into()))?;
            let nonce = Nonce::from_server_name(name)?;
            cert::attested(self.issuer.as_ref(), &nonce)?.into_certified_key(&self.provider)
        })();
        match made {
            Ok(k) => Some(k),
            Err(e) => {
                self.state.fail(e);
                None
            }
        }
    }
}

/// Checks the client's attested certificate against this handshake's nonce.
struct AttestedClientVerifier {
    nonce: Nonce,
    hints: Vec<DistinguishedName>,
    validators: Vec<Arc<dyn Validator>>,
    provider: Arc<CryptoProvider>,
    state: Arc<HandshakeState>,
}

impl std::fmt::Debug for AttestedClientVerifier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AttestedClientVerifier")
            .field("validators", &self.validators.len())
            .finish()
    }
}

impl ClientCertVerifier for AttestedClientVerifier {
    fn offer_client_auth(&self) -> bool {
        true
    }

    fn client_auth_mandatory(&self) -> bool {
        true
    }

    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        &self.hints
    }

    fn verify_client_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        now: UnixTime,
    ) -> Result<ClientCertVerified, rustls::Error> {
        match cert::verify(end_entity, &self.nonce, &self.validators, unix_secs(now)) {
            Ok(attested) => {
                self.state.set_peer(attested);
                Ok(ClientCertVerified::assertion())
            }
            Err(e) => {
                // The typed reason stays in the handshake state for the
                // server; the client is told `access_denied`, which its RPC
                // layer reports as PERMISSION_DENIED.
                self.state.fail(e);
                Err(rustls::Error::InvalidCertificate(
                    rustls::CertificateError::ApplicationVerificationFailure,
                ))
            }
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.provider
            .signature_verification_algorithms
            .supported_schemes()
    }
}
