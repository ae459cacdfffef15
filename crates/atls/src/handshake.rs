//! What the client and the server side of an aTLS handshake share: the
//! rustls settings both require, driving a handshake to its end within a
//! deadline, and the two callbacks aTLS puts into rustls on either side —
//! [`Attester`], which makes this side's attested certificate for the nonce
//! the peer sent, and [`PeerVerifier`], which checks the peer's attested
//! certificate against the nonce this side sent. Each implements the rustls
//! trait of both sides, so the client and the server run the same code.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rustls::client::ResolvesClientCert;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use rustls::{DigitallySignedStruct, DistinguishedName, SignatureScheme};

use super::error::AtlsError;
use super::{cert, nonce::Nonce};
use confboot_attest::{Attested, Issuer, Validator};
use confboot_wire::{DeadlineSocket, Transport};

/// The ALPN protocol name both sides require.
pub const ALPN: &[u8] = b"confboot/1";

/// The crypto provider aTLS uses: rustls' ring provider (never the process
/// default), with one key-exchange group, P-256. On x86-64, ring's P-256
/// key pair and agreement cost half of its X25519 ones (56 against 112 µs,
/// measured on this project's machines), on both sides of every handshake
/// and for every handshake an attacker forces on a server; both sides of an
/// aTLS connection are ours, and a peer that offers only another group gets
/// a HelloRetryRequest, which costs the server no key exchange.
pub fn provider() -> Arc<CryptoProvider> {
    let mut provider = rustls::crypto::ring::default_provider();
    provider.kx_groups = vec![rustls::crypto::ring::kx_group::SECP256R1];
    Arc::new(provider)
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

/// Runs a handshake to its end over `sock`, every read and write of it
/// ending by `deadline` (the socket holds it: a peer that trickles its
/// flight a byte at a time is cut off when it passes). On failure, the
/// alert rustls queued is sent (best effort, by the same deadline) and the
/// error recorded by a callback wins over rustls' summary of it.
pub(crate) fn drive<C, D, T>(
    conn: &mut C,
    sock: &mut DeadlineSocket<T>,
    deadline: Instant,
    state: &HandshakeState,
) -> Result<(), AtlsError>
where
    C: std::ops::DerefMut<Target = rustls::ConnectionCommon<D>>,
    D: rustls::SideData,
    T: Transport,
{
    // The handshake's reads of the peer are what marks a pool worker's
    // connection as waiting for its peer (the socket's own reads do it, see
    // confboot_net::PeerStream): its own work (attesting, checking the
    // peer's evidence) does not count.
    let result = sock
        .set_read_deadline(Some(deadline))
        .and_then(|()| sock.set_write_deadline(Some(deadline)))
        .map_err(AtlsError::from_io)
        .and_then(|()| exchange(conn, sock));
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

/// The handshake's flights: writes what rustls queued, reads what the peer
/// sends, until the handshake is over or fails.
fn exchange<C, D, T>(conn: &mut C, sock: &mut T) -> Result<(), AtlsError>
where
    C: std::ops::DerefMut<Target = rustls::ConnectionCommon<D>>,
    D: rustls::SideData,
    T: Transport,
{
    loop {
        while conn.wants_write() {
            conn.write_tls(sock).map_err(AtlsError::from_io)?;
        }
        sock.flush().map_err(AtlsError::from_io)?;
        if !conn.is_handshaking() {
            return Ok(());
        }
        let eof = conn.read_tls(sock).map_err(AtlsError::from_io)? == 0;
        if let Err(e) = conn.process_new_packets() {
            // Tell the peer why (best effort), then report.
            while conn.wants_write() {
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
}

/// Sets both timeouts of a socket whose handshake is done.
pub(crate) fn reset_timeouts<T: Transport>(
    sock: &mut T,
    timeout: Duration,
) -> Result<(), AtlsError> {
    sock.set_read_timeout(Some(timeout))
        .and_then(|_| sock.set_write_timeout(Some(timeout)))
        .map_err(AtlsError::from_io)
}

/// Checks that the handshake agreed on [`ALPN`].
pub(crate) fn check_alpn(got: Option<&[u8]>) -> Result<(), AtlsError> {
    if got == Some(ALPN) {
        Ok(())
    } else {
        Err(AtlsError::Alpn(format!(
            "peer agreed on {:?}",
            got.map(String::from_utf8_lossy)
        )))
    }
}

/// Which side the peer of a handshake is, for the words of an error.
#[derive(Clone, Copy, Debug)]
enum PeerSide {
    Client,
    Server,
}

impl PeerSide {
    fn name(self) -> &'static str {
        match self {
            PeerSide::Client => "client",
            PeerSide::Server => "server",
        }
    }
}

/// Makes this side's attested certificate for the nonce the peer sent: in
/// the SNI when this side is the server ([`ResolvesServerCert`]), as the
/// only acceptable-CA name when it is the client ([`ResolvesClientCert`]).
/// A failure is recorded in the handshake state (rustls only learns that no
/// certificate was resolved).
pub(crate) struct Attester {
    issuer: Arc<dyn Issuer>,
    provider: Arc<CryptoProvider>,
    state: Arc<HandshakeState>,
}

impl Attester {
    /// An attester for one handshake.
    pub(crate) fn new(
        issuer: Arc<dyn Issuer>,
        provider: Arc<CryptoProvider>,
        state: Arc<HandshakeState>,
    ) -> Attester {
        Attester {
            issuer,
            provider,
            state,
        }
    }

    /// The attested certificate for `nonce`, when `peer` accepts ECDSA P-256
    /// signatures (the only kind an attested certificate's key makes).
    fn certified_key(
        &self,
        peer: PeerSide,
        peer_schemes: &[SignatureScheme],
        nonce: impl FnOnce() -> Result<Nonce, AtlsError>,
    ) -> Option<Arc<CertifiedKey>> {
        let made = (|| {
            if !peer_schemes.contains(&SignatureScheme::ECDSA_NISTP256_SHA256) {
                return Err(AtlsError::Tls(format!(
                    "the {} does not accept ECDSA P-256 signatures",
                    peer.name()
                )));
            }
            let nonce = nonce()?;
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

impl std::fmt::Debug for Attester {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Attester")
            .field("variant", &self.issuer.variant())
            .finish()
    }
}

impl ResolvesServerCert for Attester {
    fn resolve(&self, hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        let name = hello.server_name();
        self.certified_key(PeerSide::Client, hello.signature_schemes(), || {
            let name =
                name.ok_or_else(|| AtlsError::Nonce("the client sent no SNI nonce".into()))?;
            Nonce::from_server_name(name)
        })
    }
}

impl ResolvesClientCert for Attester {
    fn resolve(
        &self,
        root_hint_subjects: &[&[u8]],
        sigschemes: &[SignatureScheme],
    ) -> Option<Arc<CertifiedKey>> {
        self.certified_key(PeerSide::Server, sigschemes, || {
            let [hint] = root_hint_subjects else {
                return Err(AtlsError::Nonce(format!(
                    "the server sent {} acceptable-CA names, not one nonce",
                    root_hint_subjects.len()
                )));
            };
            Nonce::from_distinguished_name(hint)
        })
    }

    fn has_certs(&self) -> bool {
        true
    }
}

/// Checks the peer's attested certificate against the nonce this side sent
/// for the handshake: the server's certificate on the client
/// ([`ServerCertVerifier`]), the client's on the server
/// ([`ClientCertVerifier`], which also sends the nonce as the only
/// acceptable-CA name). What the evidence established, or why it was
/// refused, is recorded in the handshake state. Handshake signatures are
/// checked by rustls' own functions.
pub(crate) struct PeerVerifier {
    nonce: Nonce,
    /// The acceptable-CA names a server sends: the nonce (empty on a client).
    hints: Vec<DistinguishedName>,
    validators: Vec<Arc<dyn Validator>>,
    provider: Arc<CryptoProvider>,
    state: Arc<HandshakeState>,
}

impl PeerVerifier {
    /// The client's verifier of the server, for the nonce the client sends in
    /// its SNI. With no validators any server certificate is taken (rustls
    /// still checks that the server holds its key).
    pub(crate) fn of_server(
        nonce: Nonce,
        validators: Vec<Arc<dyn Validator>>,
        provider: Arc<CryptoProvider>,
        state: Arc<HandshakeState>,
    ) -> PeerVerifier {
        PeerVerifier {
            nonce,
            hints: Vec::new(),
            validators,
            provider,
            state,
        }
    }

    /// The server's verifier of the client, which sends `nonce` as its only
    /// acceptable-CA name and requires a certificate.
    pub(crate) fn of_client(
        nonce: Nonce,
        validators: Vec<Arc<dyn Validator>>,
        provider: Arc<CryptoProvider>,
        state: Arc<HandshakeState>,
    ) -> PeerVerifier {
        PeerVerifier {
            hints: vec![DistinguishedName::from(nonce.to_distinguished_name())],
            nonce,
            validators,
            provider,
            state,
        }
    }

    /// Checks `end_entity` and records what it established, or the error.
    fn check(&self, end_entity: &CertificateDer<'_>, now: UnixTime) -> Result<(), AtlsError> {
        match cert::verify(end_entity, &self.nonce, &self.validators, now.as_secs()) {
            Ok(attested) => {
                self.state.set_peer(attested);
                Ok(())
            }
            Err(e) => Err(self.state.fail(e)),
        }
    }
}

impl std::fmt::Debug for PeerVerifier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PeerVerifier")
            .field("validators", &self.validators.len())
            .finish()
    }
}

/// The handshake-signature methods, identical in [`ServerCertVerifier`] and
/// [`ClientCertVerifier`]: rustls' own checks with the provider's algorithms.
macro_rules! rustls_signature_checks {
    () => {
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
    };
}

impl ServerCertVerifier for PeerVerifier {
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
        match self.check(end_entity, now) {
            Ok(()) => Ok(ServerCertVerified::assertion()),
            Err(e) => Err(e.into_rustls()),
        }
    }

    rustls_signature_checks!();
}

impl ClientCertVerifier for PeerVerifier {
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
        match self.check(end_entity, now) {
            Ok(()) => Ok(ClientCertVerified::assertion()),
            // The typed reason stays in the handshake state for the server;
            // the client is told `access_denied`, which its RPC layer
            // reports as PERMISSION_DENIED.
            Err(_) => Err(rustls::Error::InvalidCertificate(
                rustls::CertificateError::ApplicationVerificationFailure,
            )),
        }
    }

    rustls_signature_checks!();
}
