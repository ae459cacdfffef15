//! confboot's RPC: gRPC's messages and status codes, framed by hand as in
//! gRPC-Web, over any byte stream. No HTTP/2.
//!
//! ```text
//! frame    = flags:u8  length:u32 big-endian  payload[length]
//! flags    = 0x00 message | 0x80 trailer (payload is a Status)
//! request  = message(CallHeader{method, timeout_ms}) message(RequestType)
//! response = message(ResponseType)*  trailer(Status{code, message})
//! ```
//!
//! - [`frame`]: reading and writing frames, with the size limit checked
//!   before anything is allocated (at most [`DEFAULT_MAX_FRAME_LEN`], 4 MiB,
//!   unless configured in [`ServerLimits`]; a server reads a call header of
//!   at most 4 KiB).
//! - [`Client`]: unary and server-streaming calls with a deadline.
//! - [`Router`] and [`serve_connection`]: dispatch by method path on one
//!   connection, call after call.
//! - [`Transport`]: the byte streams calls run over; [`DeadlineSocket`]
//!   bounds every read and write of a socket by an absolute deadline, so
//!   that a TLS stream over it is bounded too.
//! - [`pipe`]: an in-memory duplex stream for tests.
//!
//! Servers on sockets (the accept loop, the worker pool) are `confboot-net`'s.
//!
//! Methods are named by [`confboot_proto::Method`] constants (the wire
//! contract lives in `confboot-proto`), which tie a path to its request and
//! response types for client and server alike; a test may make its own with
//! [`Method::new`](confboot_proto::Method::new).
//!
//! ```
//! use std::time::Duration;
//! use confboot_wire::{self as rpc, pipe, Client, Router, ServerLimits};
//! use confboot_util::stop::Stop;
//! use confboot_proto::HEALTH_CHECK;
//! use confboot_proto::health::{HealthCheckRequest, HealthCheckResponse};
//!
//! // A method constant ties the path to its message types on both sides.
//! let router = Router::new().unary(HEALTH_CHECK, |_ctx, _req| {
//!     Ok(HealthCheckResponse { status: 1 })
//! });
//! let (mut server_end, client_end) = pipe::pair();
//! let server = std::thread::spawn(move || {
//!     rpc::serve_connection(&mut server_end, &router, &ServerLimits::default(), &Stop::new())
//! });
//! let mut client = Client::new(client_end);
//! let resp = client
//!     .unary(HEALTH_CHECK, &HealthCheckRequest::default(), Duration::from_secs(5))
//!     .unwrap();
//! assert_eq!(resp.status, 1);
//! drop(client); // closes the connection; the server returns
//! server.join().unwrap();
//! ```

mod client;
pub mod frame;
pub mod pipe;
mod server;
mod status;
mod transport;

pub use client::Client;
pub use frame::{DEFAULT_MAX_FRAME_LEN, FrameError};
pub use server::{
    CallContext, CallPart, ConnectionEnd, ReadBefore, ResponseSink, Router, ServerLimits,
    StreamFailure, Violation, serve_connection, serve_connection_as,
};
pub use status::{Code, Status};
pub use transport::{DeadlineSocket, Transport};
