//! The client side: a server-certificate verifier holding this connection's
//! SNI nonce, and a client-certificate resolver that attests for the nonce
//! the server sent as its acceptable-CA name.

use std::sync::Arc;
use std::time::{Duration, Instant};

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::{ResolvesClientCert, Resumption};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::sign::CertifiedKey;
use rustls::{ClientConfig, ClientConnection, DigitallySignedStruct, SignatureScheme, StreamOwned};

use super::nonce::Nonce;
use super::{AtlsError, HandshakeState, cert, check_alpn, drive, reset_timeouts, unix_secs};
use crate::attestation::{Attested, Issuer, Validator};
use crate::rpc::Transport;

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
    /// The TLS stream, handshake done.
    pub stream: StreamOwned<ClientConnection, T>,
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
            provider: super::provider(),
            server_validators,
            issuer,
        }
    }

    /// Runs the client handshake on `sock`, all of it within `timeout`.
    /// Afterwards the socket's read and write timeouts are `timeout` each.
    ///
    /// In TLS 1.3 the client finishes its handshake before the server has
    /// checked the client's certificate: a server refusing our evidence
    /// shows as an error on the first read.
    pub fn connect<T: Transport>(
        &self,
        mut sock: T,
        timeout: Duration,
    ) -> Result<Connected<T>, AtlsError> {
        let deadline = Instant::now() + timeout;
        let nonce = Nonce::for_server_name()?;
        let state = Arc::new(HandshakeState::default());
        let builder = ClientConfig::builder_with_provider(Arc::clone(&self.provider))
            .with_protocol_versions(&[&rustls::version::TLS13])
            .map_err(|e| AtlsError::Tls(e.to_string()))?
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(AttestedServerVerifier {
                nonce,
                validators: self.server_validators.clone(),
                provider: Arc::clone(&self.provider),
                state: Arc::clone(&state),
            }));
        let mut config = match &self.issuer {
            Some(issuer) => builder.with_client_cert_resolver(Arc::new(AttestingClientResolver {
                issuer: Arc::clone(issuer),
                provider: Arc::clone(&self.provider),
                state: Arc::clone(&state),
            })),
            None => builder.with_no_client_auth(),
        };
        config.alpn_protocols = vec![super::ALPN.to_vec()];
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

/// Checks the server's attested certificate against this connection's nonce.
struct AttestedServerVerifier {
    nonce: Nonce,
    validators: Vec<Arc<dyn Validator>>,
    provider: Arc<CryptoProvider>,
    state: Arc<HandshakeState>,
}

impl std::fmt::Debug for AttestedServerVerifier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AttestedServerVerifier")
            .field("validators", &self.validators.len())
            .finish()
    }
}

impl ServerCertVerifier for AttestedServerVerifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        if self.validators.is_empty() {
            // Server attestation not required; rustls still checks that the
            // server holds the certificate's key.
            return Ok(ServerCertVerified::assertion());
        }
        match cert::verify(end_entity, &self.nonce, &self.validators, unix_secs(now)) {
            Ok(attested) => {
                self.state.set_peer(attested);
                Ok(ServerCertVerified::assertion())
            }
            Err(e) => Err(self.state.fail(e).into_rustls()),
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

/// Makes the client's attested certificate for the server's nonce.
struct AttestingClientResolver {
    issuer: Arc<dyn Issuer>,
    provider: Arc<CryptoProvider>,
    state: Arc<HandshakeState>,
}

impl std::fmt::Debug for AttestingClientResolver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AttestingClientResolver")
            .field("variant", &self.issuer.variant())
            .finish()
    }
}

impl ResolvesClientCert for AttestingClientResolver {
    fn resolve(
        &self,
        root_hint_subjects: &[&[u8]],
        sigschemes: &[SignatureScheme],
    ) -> Option<Arc<CertifiedKey>> {
        let made = (|| {
            if !sigschemes.contains(&SignatureScheme::ECDSA_NISTP256_SHA256) {
                return Err(AtlsError::Tls(
                    "the server does not accept ECDSA P-256 signatures".into(),
                ));
            }
            let [hint] = root_hint_subjects else {
                return Err(AtlsError::Nonce(format!(
                    "the server sent {} acceptable-CA names, not one nonce",
                    root_hint_subjects.len()
                )));
            };
            let nonce = Nonce::from_distinguished_name(hint)?;
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

    fn has_certs(&self) -> bool {
        true
    }
}
