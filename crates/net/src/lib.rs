//! Servers on blocking sockets: the accept loop ([`listener`]) that admits
//! connections with per-peer limits, holds them at a gate until their peer
//! has spoken, and serves them on a bounded worker pool that preempts the
//! connection waiting longest for its peer; the stream a handler serves on
//! ([`PeerStream`], whose blocking reads are what "waiting for the peer"
//! means); and bounded plain HTTP ([`http`]) for health and metrics.

mod admission;
mod gate;
mod handoff;
pub mod http;
pub mod listener;
mod peer_stream;
mod pool;
mod sockopt;

pub use listener::{PeerStream, PoolConfig, ServerHandle, ServerStats};
