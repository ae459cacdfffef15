//! The one-line wiring of aTLS over TCP: [`serve`] a router on a
//! `TcpListener`, [`connect`] to an address for an RPC client.

use std::io;
use std::net::{SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rustls::{ClientConnection, StreamOwned};

use super::client::{AtlsClient, Connected};
use super::error::{AtlsError, AtlsIo};
use super::handshake::reset_timeouts;
use super::message::SEALING_KEY_LEN;
use super::server::{
    Accepted, AtlsServer, ClientPeer, DEFAULT_GATE_CAPACITY, DEFAULT_GATE_TIMEOUT,
};
use confboot_attest::{Attested, Issuer, Validator};
use confboot_net::{PoolConfig, ServerHandle, listener as pool_listener};
use confboot_util::IoFailure;
use confboot_wire::{self as rpc, DeadlineSocket, Router, ServerLimits, Transport};

/// Serves `router` over aTLS on `listener` with a bounded worker pool,
/// each connection accepted by `atls`.
///
/// A server with an issuer attests in every handshake; one that requires
/// client attestation ([`AtlsServer::requiring_clients`]) admits only
/// clients that attest, and its router's handlers see what each client's
/// evidence established as [`confboot_wire::CallContext::peer`] (an
/// [`AttestedPeer`](super::AttestedPeer)); the router's peer type is the
/// server's, so a router that reads a peer is served only where clients
/// attest. Each handshake is bounded by `limits.io_timeout`. Refused
/// handshakes are logged and closed. Without a gate in `pool`, the
/// ClientHello gate ([`super::client_hello_gate`] with its defaults) keeps
/// connections that have not sent a ClientHello away from the workers,
/// and the process's open-file limit is raised to fit it (or the gate made
/// smaller).
pub fn serve<P: ClientPeer>(
    listener: TcpListener,
    mut pool: PoolConfig,
    limits: ServerLimits,
    router: Router<P>,
    atls: AtlsServer<P>,
) -> io::Result<ServerHandle> {
    if pool.gate.is_none() {
        pool.gate = Some(super::client_hello_gate(
            DEFAULT_GATE_CAPACITY,
            DEFAULT_GATE_TIMEOUT,
        ));
        // Room for the gate's descriptors, beside a few the process keeps.
        pool_listener::fit_descriptors(&mut pool, 64);
    }
    pool_listener::spawn(listener, pool, move |sock, stop| {
        let peer_addr = sock.peer_addr().ok();
        match atls.accept(sock, limits.io_timeout) {
            Ok(accepted) => {
                let Accepted { mut stream, peer } = accepted;
                let end = rpc::serve_connection_as(&mut stream, &router, &limits, stop, &peer);
                log::debug!("aTLS connection from {peer_addr:?} ended: {end:?}");
                // Its own bound: the last deadline may be long past (an
                // idle connection).
                let _ = stream.set_write_deadline(Some(Instant::now() + limits.io_timeout));
                stream.conn.send_close_notify();
                while stream.conn.wants_write() {
                    if stream.conn.write_tls(&mut stream.sock).is_err() {
                        break;
                    }
                }
            }
            Err(e) => log::info!("aTLS handshake with {peer_addr:?} refused: {e}"),
        }
    })
}

/// An RPC client over an aTLS connection on TCP, as [`connect`] returns it;
/// its socket holds each call's deadline.
pub type AtlsRpcClient = rpc::Client<StreamOwned<ClientConnection, DeadlineSocket<TcpStream>>>;

/// Connects to `addr` over aTLS and returns an RPC client, and what the
/// server's evidence established.
///
/// With `server_validators` non-empty the server must attest with a variant
/// one of them accepts (otherwise any server certificate is taken, and
/// `None` returned). With `client_issuer` the client attests when the server
/// asks; a server refusing our evidence shows on the first call. `timeout`
/// bounds the TCP connect plus the handshake, all of it (an absolute
/// bound); it stays the socket's read and write timeout afterwards until
/// the first call, which bounds all its I/O by its own deadline.
pub fn connect(
    addr: impl ToSocketAddrs,
    timeout: Duration,
    server_validators: &[Arc<dyn Validator>],
    client_issuer: Option<Arc<dyn Issuer>>,
) -> Result<(AtlsRpcClient, Option<Attested>), AtlsError> {
    connect_sealing(addr, timeout, server_validators, client_issuer, None)
}

/// As [`connect`], offering `sealing_key` (an X25519 public key whose
/// private key the caller keeps for this connection) next to the client's
/// evidence, which binds it ([`AtlsClient::connect_sealing`]).
pub fn connect_sealing(
    addr: impl ToSocketAddrs,
    timeout: Duration,
    server_validators: &[Arc<dyn Validator>],
    client_issuer: Option<Arc<dyn Issuer>>,
    sealing_key: Option<[u8; SEALING_KEY_LEN]>,
) -> Result<(AtlsRpcClient, Option<Attested>), AtlsError> {
    let deadline = Instant::now() + timeout;
    let sock = tcp_connect(addr, deadline)?;
    let client = AtlsClient::new(server_validators.to_vec(), client_issuer);
    let Connected { mut stream, peer } = client.connect_sealing(
        sock,
        deadline.saturating_duration_since(Instant::now()),
        sealing_key,
    )?;
    reset_timeouts(&mut stream.sock, timeout)?;
    Ok((rpc::Client::new(stream), peer))
}

/// Connects to the first address of `addr` that answers before `deadline`,
/// with timeouts set on the socket.
fn tcp_connect(addr: impl ToSocketAddrs, deadline: Instant) -> Result<TcpStream, AtlsError> {
    let addrs: Vec<SocketAddr> = addr
        .to_socket_addrs()
        .map_err(|e| AtlsError::Io(AtlsIo::Resolve(IoFailure::bare(e))))?
        .collect();
    let mut last = AtlsError::Io(AtlsIo::ResolvedToNothing);
    for a in addrs {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(AtlsError::Timeout);
        }
        match TcpStream::connect_timeout(&a, left) {
            Ok(s) => {
                let left = deadline
                    .saturating_duration_since(Instant::now())
                    .max(Duration::from_millis(1));
                s.set_nodelay(true)
                    .and_then(|_| s.set_read_timeout(Some(left)))
                    .and_then(|_| s.set_write_timeout(Some(left)))
                    .map_err(|e| AtlsError::Io(AtlsIo::Socket(IoFailure::bare(e))))?;
                return Ok(s);
            }
            Err(e) => last = AtlsError::from_io(e),
        }
    }
    Err(last)
}
