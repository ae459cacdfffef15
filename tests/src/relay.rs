//! An attacker on the network path that terminates TLS on both sides and
//! relays the attestation of a genuine peer: towards the verifier it is a
//! client (or server) of its own, with its own TLS session; towards the
//! genuine attester it plays the verifier. aTLS binds each side's evidence
//! to its session's exporter, so what the attester made for its session
//! with the relay is refused on the relay's session with the verifier.
//!
//! [`relay_one`] relays one connection; what it sends the target in place
//! of the genuine client's message is the caller's choice (the message
//! itself, or an insider's attestation of the relay's own session).

use std::io;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::Arc;
use std::time::Duration;

use confboot_atls::binding::{self, Role};
use confboot_atls::message::{self, AttestationMessage};
use confboot_atls::{ALPN, AtlsError, SERVER_NAME};
use confboot_attest::Issuer;
use rustls::client::Resumption;
use rustls::pki_types::{PrivateKeyDer, ServerName};
use rustls::{ClientConfig, ClientConnection, ServerConfig, ServerConnection, StreamOwned};

use crate::tls::AnyServer;

/// The attacker's end towards a server.
pub type ToServer = StreamOwned<ClientConnection, TcpStream>;
/// The attacker's end towards a client.
pub type ToClient = StreamOwned<ServerConnection, TcpStream>;

fn timeouts(sock: &TcpStream) -> io::Result<()> {
    sock.set_nodelay(true)?;
    sock.set_read_timeout(Some(Duration::from_secs(20)))?;
    sock.set_write_timeout(Some(Duration::from_secs(20)))
}

/// A TLS 1.3 client config with ALPN `confboot/2` that takes any server
/// certificate and shows none (as an aTLS client's).
pub fn client_config() -> ClientConfig {
    let provider = confboot_atls::provider();
    let mut config = ClientConfig::builder_with_provider(Arc::clone(&provider))
        .with_protocol_versions(&[&rustls::version::TLS13])
        .expect("TLS 1.3")
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(AnyServer::new(provider)))
        .with_no_client_auth();
    config.alpn_protocols = vec![ALPN.to_vec()];
    config.resumption = Resumption::disabled();
    config
}

/// A TLS 1.3 client session with [`client_config`] over `sock`, handshake
/// done.
pub fn tls_client(sock: TcpStream) -> io::Result<ToServer> {
    timeouts(&sock)?;
    let name = ServerName::try_from(SERVER_NAME).map_err(io::Error::other)?;
    let conn = ClientConnection::new(Arc::new(client_config()), name).map_err(io::Error::other)?;
    let mut s = StreamOwned::new(conn, sock);
    while s.conn.is_handshaking() {
        s.conn.complete_io(&mut s.sock)?;
    }
    Ok(s)
}

/// A TLS 1.3 server session with ALPN `confboot/2` over `sock`, with a
/// self-signed certificate of the attacker's, handshake done.
pub fn tls_server(sock: TcpStream) -> io::Result<ToClient> {
    timeouts(&sock)?;
    let made = confboot_atls::cert::fresh().map_err(io::Error::other)?;
    let mut config = ServerConfig::builder_with_provider(confboot_atls::provider())
        .with_protocol_versions(&[&rustls::version::TLS13])
        .map_err(io::Error::other)?
        .with_no_client_auth()
        .with_single_cert(vec![made.cert], PrivateKeyDer::Pkcs8(made.key))
        .map_err(io::Error::other)?;
    config.alpn_protocols = vec![ALPN.to_vec()];
    let conn = ServerConnection::new(Arc::new(config)).map_err(io::Error::other)?;
    let mut s = StreamOwned::new(conn, sock);
    while s.conn.is_handshaking() {
        s.conn.complete_io(&mut s.sock)?;
    }
    Ok(s)
}

/// The attestation message `issuer` makes for the attacker's own client
/// session `to_server`: evidence genuinely bound to that session (an
/// insider: a machine the verifier trusts, in the attacker's hands).
pub fn own_attestation(
    to_server: &ToServer,
    issuer: &dyn Issuer,
) -> Result<AttestationMessage, AtlsError> {
    let extra = binding::extra_data(&to_server.conn, Role::Client, None)?;
    let evidence = issuer.issue(&extra).map_err(AtlsError::Issue)?;
    Ok(AttestationMessage {
        evidence: Some((issuer.variant(), evidence)),
        sealing_key: None,
        reference_values: None,
    })
}

/// What one relayed connection carried.
#[derive(Debug)]
pub struct Relayed {
    /// The genuine client's attestation message, as it reached the relay.
    pub from_client: Result<AttestationMessage, AtlsError>,
    /// What the target answered the message the relay sent it: its own
    /// attestation, or (refusing it) [`AtlsError::Refused`].
    pub from_target: Result<AttestationMessage, AtlsError>,
}

/// Relays one connection: accepts a genuine aTLS client on `listener`,
/// opens its own session with `target`, reads the client's attestation
/// message, sends the target `towards_target(session with the target, the
/// client's message)`, and passes whatever the target answers back to the
/// client (its attestation, or a refusal). With `towards_target` returning
/// the client's message unchanged, every message of the genuine client
/// goes to the target and every message of the target to the client.
pub fn relay_one(
    listener: &TcpListener,
    target: SocketAddr,
    towards_target: impl FnOnce(&ToServer, AttestationMessage) -> AttestationMessage,
) -> io::Result<Relayed> {
    let (sock, _) = listener.accept()?;
    let mut to_client = tls_server(sock)?;
    let mut to_server = tls_client(TcpStream::connect(target)?)?;
    let from_client = message::read(&mut to_client);
    let sent = match &from_client {
        Ok(m) => towards_target(&to_server, m.clone()),
        Err(_) => AttestationMessage::none(),
    };
    message::write(&mut to_server, &sent).map_err(io::Error::other)?;
    let from_target = message::read(&mut to_server);
    let _ = match &from_target {
        Ok(m) => message::write(&mut to_client, m),
        Err(_) => message::write_refusal(&mut to_client),
    };
    Ok(Relayed {
        from_client,
        from_target,
    })
}
