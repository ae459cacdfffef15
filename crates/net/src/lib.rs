//! Servers on blocking sockets: the accept loop with the gate that holds a
//! connection until its peer has spoken, the bounded worker pool with
//! per-peer limits and preemption ([`listener`]), and bounded plain HTTP
//! ([`http`]) for health, metrics and the verify service.

mod handoff;
pub mod http;
pub mod listener;
mod sockopt;

pub use listener::{PoolConfig, ServerHandle, ServerStats};
