//! What the client and the server side of an aTLS handshake share: the
//! rustls settings both require, driving a handshake to its end within a
//! deadline, and the two callbacks aTLS puts into rustls:
//! [`FreshCertificate`], which gives a server a new self-signed certificate
//! for every handshake, and [`AnyServerCertificate`], with which a client
//! takes whatever certificate the server shows (the attestation after the
//! handshake, bound to the session, is what authenticates the server; the
//! certificate authenticates nothing).

use std::sync::Arc;
use std::time::{Duration, Instant};

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use rustls::{DigitallySignedStruct, SignatureScheme};

use super::cert;
use super::error::AtlsError;
use confboot_wire::{DeadlineSocket, Transport};

/// The ALPN protocol name both sides require: TLS 1.3, then the
/// attestation messages bound to the session's exporter.
pub const ALPN: &[u8] = b"confboot/2";

/// The server name a client sends: fixed, since the certificate
/// authenticates nothing (the attestation does).
pub const SERVER_NAME: &str = "atls.confboot.invalid";

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

/// Runs a handshake to its end over `sock`, every read and write of it
/// ending by `deadline` (the socket holds it: a peer that trickles its
/// flight a byte at a time is cut off when it passes). On failure, the
/// alert rustls queued is sent (best effort, by the same deadline).
pub(crate) fn drive<C, D, T>(
    conn: &mut C,
    sock: &mut DeadlineSocket<T>,
    deadline: Instant,
) -> Result<(), AtlsError>
where
    C: std::ops::DerefMut<Target = rustls::ConnectionCommon<D>>,
    D: rustls::SideData,
    T: Transport,
{
    // The handshake's reads of the peer are what marks a pool worker's
    // connection as waiting for its peer (the socket's own reads do it, see
    // confboot_net::PeerStream): its own work does not count.
    sock.set_read_deadline(Some(deadline))
        .and_then(|()| sock.set_write_deadline(Some(deadline)))
        .map_err(AtlsError::from_io)?;
    exchange(conn, sock)
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

/// Gives the server a new self-signed P-256 certificate in every
/// handshake (a server that attests uses it: nothing links two of its
/// connections).
#[derive(Debug)]
pub(crate) struct FreshCertificate {
    pub(crate) provider: Arc<CryptoProvider>,
}

impl ResolvesServerCert for FreshCertificate {
    fn resolve(&self, hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        if !hello
            .signature_schemes()
            .contains(&SignatureScheme::ECDSA_NISTP256_SHA256)
        {
            return None;
        }
        let made = cert::fresh();
        match made.and_then(|c| c.into_certified_key(&self.provider)) {
            Ok(k) => Some(k),
            Err(e) => {
                log::warn!("aTLS: cannot make a certificate: {e}");
                None
            }
        }
    }
}

/// Takes any server certificate; rustls still checks, with its own
/// functions, that the server signed the handshake with the certificate's
/// key. What authenticates the server is its attestation after the
/// handshake, bound to this session.
#[derive(Debug)]
pub(crate) struct AnyServerCertificate {
    pub(crate) provider: Arc<CryptoProvider>,
}

impl ServerCertVerifier for AnyServerCertificate {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
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
