//! What a hostile client on the network does, for tests that show it loses.

use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4, TcpStream};
use std::os::fd::AsRawFd;

use nix::sys::socket::{AddressFamily, SockFlag, SockType, SockaddrIn, bind, connect, socket};

/// A TCP connection to `to` (IPv4) from the local address `from`: on
/// loopback every 127.0.0.0/8 address is this machine, so tests can play
/// clients at different addresses.
pub fn connect_from(from: Ipv4Addr, to: SocketAddr) -> std::io::Result<TcpStream> {
    let SocketAddr::V4(to) = to else {
        return Err(std::io::Error::other("IPv4 only"));
    };
    let fd = socket(
        AddressFamily::Inet,
        SockType::Stream,
        SockFlag::SOCK_CLOEXEC,
        None,
    )?;
    bind(
        fd.as_raw_fd(),
        &SockaddrIn::from(SocketAddrV4::new(from, 0)),
    )?;
    connect(fd.as_raw_fd(), &SockaddrIn::from(to))?;
    Ok(TcpStream::from(fd))
}
