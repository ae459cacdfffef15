//! A socket option nix does not name: `TCP_DEFER_ACCEPT`, made with nix's
//! own macro for socket options (the same code nix's named options use).

use nix::{getsockopt_impl, libc, setsockopt_impl, sockopt_impl};
use std::net::TcpListener;

sockopt_impl!(
    /// `TCP_DEFER_ACCEPT` (tcp(7)): a connection is handed to `accept` only
    /// once data arrived on it, or after about this many seconds.
    TcpDeferAccept,
    Both,
    libc::IPPROTO_TCP,
    libc::TCP_DEFER_ACCEPT,
    libc::c_int
);

/// Makes the kernel hold a new connection on `listener` until its first
/// bytes arrive, for about `seconds` (after that it is accepted anyway, on
/// the peer's next acknowledgement). A silent connection meanwhile costs a
/// request entry in the kernel's bounded SYN queue, not a descriptor.
pub fn defer_accept(listener: &TcpListener, seconds: u32) -> nix::Result<()> {
    let seconds = libc::c_int::try_from(seconds).unwrap_or(libc::c_int::MAX);
    nix::sys::socket::setsockopt(listener, TcpDeferAccept, &seconds)
}

#[cfg(test)]
/// The `TCP_DEFER_ACCEPT` time of `listener` in seconds, as the kernel
/// rounds it (0: connections are handed over at once).
pub fn deferred_accept(listener: &TcpListener) -> nix::Result<u32> {
    nix::sys::socket::getsockopt(listener, TcpDeferAccept).map(|s| u32::try_from(s).unwrap_or(0))
}
