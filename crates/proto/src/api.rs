//! The wire contract beside the messages: each RPC method's path with the
//! types of its request and response, and the ports services listen on.
//!
//! A [`Method`] ties a path to its message types, so a client and a server
//! that use the same constant cannot disagree on either.

use std::fmt;
use std::marker::PhantomData;

use crate::health::{HealthCheckRequest, HealthCheckResponse};
use crate::init::{InitRequest, InitResponse};
use crate::join::{
    ConfirmGenerationRequest, ConfirmGenerationResponse, IssueJoinTicketRequest,
    IssueJoinTicketResponse, IssueRejoinTicketRequest, IssueRejoinTicketResponse,
};
use crate::recover::{RecoverMessage, RecoverResponse};
use crate::vpn::{GetUpdateRequest, GetUpdateResponse};

/// An RPC method: its path (`/package.Service/Method`) and, in its type,
/// the request and response messages.
pub struct Method<Req, Resp> {
    path: &'static str,
    types: PhantomData<fn(Req) -> Resp>,
}

impl<Req, Resp> Method<Req, Resp> {
    /// The method at `path`, carrying `Req` and answering `Resp`.
    pub const fn new(path: &'static str) -> Self {
        Method {
            path,
            types: PhantomData,
        }
    }

    /// The method path, e.g. `/join.API/IssueJoinTicket`.
    pub const fn path(&self) -> &'static str {
        self.path
    }
}

// Not derived: a derive would require the message types to be Copy too.
impl<Req, Resp> Clone for Method<Req, Resp> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<Req, Resp> Copy for Method<Req, Resp> {}

impl<Req, Resp> fmt::Debug for Method<Req, Resp> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Method({})", self.path)
    }
}

impl<Req, Resp> fmt::Display for Method<Req, Resp> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.path)
    }
}

/// The Kubernetes release an `InitRequest` and a join ticket name when
/// the admin names none (`kubernetes_version`): the release confboot is
/// built and tested with (`scripts/kubernetes.sh` builds its parts).
pub const PINNED_KUBERNETES_VERSION: &str = "v1.37.2";

/// `init.API/Init`: the admin's Init of the first node; the node answers
/// with log lines and then success or failure (server-streaming).
pub const INIT: Method<InitRequest, InitResponse> = Method::new("/init.API/Init");
/// `join.API/IssueJoinTicket`: a blank node's ticket (disk key, token, ...).
pub const JOIN: Method<IssueJoinTicketRequest, IssueJoinTicketResponse> =
    Method::new("/join.API/IssueJoinTicket");
/// `join.API/IssueRejoinTicket`: a rebooted node's disk key.
pub const REJOIN: Method<IssueRejoinTicketRequest, IssueRejoinTicketResponse> =
    Method::new("/join.API/IssueRejoinTicket");
/// `join.API/ConfirmGeneration`: a rejoined node's state disk generation,
/// written on its state file system (or refused, with what it found).
pub const CONFIRM_GENERATION: Method<ConfirmGenerationRequest, ConfirmGenerationResponse> =
    Method::new("/join.API/ConfirmGeneration");
/// `recover.API/Recover`: the admin's master secret for a node that cannot rejoin.
pub const RECOVER: Method<RecoverMessage, RecoverResponse> = Method::new("/recover.API/Recover");
/// `grpc.health.v1.Health/Check`: whether an RPC server answers (joinsvc).
pub const HEALTH_CHECK: Method<HealthCheckRequest, HealthCheckResponse> =
    Method::new("/grpc.health.v1.Health/Check");

/// `vpn.API/GetUpdate`: a node's versioned peer update: the full
/// peer list only when its version differs from the caller's.
pub const GET_UPDATE: Method<GetUpdateRequest, GetUpdateResponse> =
    Method::new("/vpn.API/GetUpdate");

/// The bootstrapper's init API.
pub const DEFAULT_INIT_PORT: u16 = 9000;
/// joinsvc's join API.
pub const DEFAULT_JOIN_PORT: u16 = 9090;
/// joinsvc's join API as a Kubernetes NodePort (reachable on every node).
pub const JOIN_NODE_PORT: u16 = 30090;
/// joinsvc's plain-HTTP health and metrics endpoints.
pub const DEFAULT_JOINSVC_HEALTH_PORT: u16 = 9091;
/// The bootstrapper's recovery API.
pub const DEFAULT_RECOVER_PORT: u16 = 9999;
/// The node agent's verify service (aTLS: evidence bound to the session), as
/// Constellation's verification service.
pub const DEFAULT_VERIFY_PORT: u16 = 8080;

/// Default address of the bootstrapper's init API (all interfaces, [`DEFAULT_INIT_PORT`]).
pub const DEFAULT_INIT_LISTEN: &str = "0.0.0.0:9000";
/// Default address of joinsvc's join API (all interfaces, [`DEFAULT_JOIN_PORT`]).
pub const DEFAULT_JOIN_LISTEN: &str = "0.0.0.0:9090";
/// Default address of joinsvc's health endpoints (all interfaces, [`DEFAULT_JOINSVC_HEALTH_PORT`]).
pub const DEFAULT_JOINSVC_HEALTH_LISTEN: &str = "0.0.0.0:9091";
/// Default address of the bootstrapper's recovery API (all interfaces, [`DEFAULT_RECOVER_PORT`]).
pub const DEFAULT_RECOVER_LISTEN: &str = "0.0.0.0:9999";
/// Default address of the node agent's verify service (all interfaces, [`DEFAULT_VERIFY_PORT`]).
pub const DEFAULT_VERIFY_LISTEN: &str = "0.0.0.0:8080";

/// Whether `addr` ends in `:port` (checked at compile time below, so an
/// address string and its port number cannot drift apart).
const fn ends_with_port(addr: &str, port: u16) -> bool {
    let bytes = addr.as_bytes();
    let mut i = bytes.len();
    let mut value: u32 = 0;
    let mut scale: u32 = 1;
    while i > 0 {
        i -= 1;
        let b = bytes[i];
        if b == b':' {
            return scale > 1 && value == port as u32;
        }
        if !b.is_ascii_digit() || scale > 10_000 {
            return false;
        }
        value += (b - b'0') as u32 * scale;
        scale *= 10;
    }
    false
}

const _: () = assert!(ends_with_port(DEFAULT_INIT_LISTEN, DEFAULT_INIT_PORT));
const _: () = assert!(ends_with_port(DEFAULT_JOIN_LISTEN, DEFAULT_JOIN_PORT));
const _: () = assert!(ends_with_port(
    DEFAULT_JOINSVC_HEALTH_LISTEN,
    DEFAULT_JOINSVC_HEALTH_PORT
));
const _: () = assert!(ends_with_port(DEFAULT_RECOVER_LISTEN, DEFAULT_RECOVER_PORT));
const _: () = assert!(ends_with_port(DEFAULT_VERIFY_LISTEN, DEFAULT_VERIFY_PORT));

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_are_constellations() {
        assert_eq!(INIT.path(), "/init.API/Init");
        assert_eq!(JOIN.path(), "/join.API/IssueJoinTicket");
        assert_eq!(REJOIN.path(), "/join.API/IssueRejoinTicket");
        assert_eq!(CONFIRM_GENERATION.path(), "/join.API/ConfirmGeneration");
        assert_eq!(RECOVER.path(), "/recover.API/Recover");
        assert_eq!(HEALTH_CHECK.path(), "/grpc.health.v1.Health/Check");
        assert_eq!(GET_UPDATE.path(), "/vpn.API/GetUpdate");
        assert_eq!(JOIN.to_string(), JOIN.path());
        assert_eq!(format!("{RECOVER:?}"), "Method(/recover.API/Recover)");
    }

    #[test]
    fn ports_are_constellations() {
        assert_eq!(DEFAULT_INIT_PORT, 9000);
        assert_eq!(DEFAULT_JOIN_PORT, 9090);
        assert_eq!(JOIN_NODE_PORT, 30090);
        assert_eq!(DEFAULT_RECOVER_PORT, 9999);
        assert_eq!(DEFAULT_JOINSVC_HEALTH_PORT, 9091);
        assert_eq!(DEFAULT_VERIFY_PORT, 8080);
    }

    #[test]
    fn listen_addresses_end_in_their_ports() {
        for (addr, port) in [
            (DEFAULT_INIT_LISTEN, DEFAULT_INIT_PORT),
            (DEFAULT_JOIN_LISTEN, DEFAULT_JOIN_PORT),
            (DEFAULT_JOINSVC_HEALTH_LISTEN, DEFAULT_JOINSVC_HEALTH_PORT),
            (DEFAULT_RECOVER_LISTEN, DEFAULT_RECOVER_PORT),
            (DEFAULT_VERIFY_LISTEN, DEFAULT_VERIFY_PORT),
        ] {
            let parsed: std::net::SocketAddr = addr.parse().unwrap();
            assert_eq!(parsed.port(), port);
            assert!(ends_with_port(addr, port));
        }
        assert!(!ends_with_port("0.0.0.0:9000", 900));
        assert!(!ends_with_port("0.0.0.0:19000", 9000));
        assert!(!ends_with_port("0.0.0.0:", 0));
        assert!(!ends_with_port("9000", 9000));
        assert!(!ends_with_port("h:x9000", 9000));
    }
}
