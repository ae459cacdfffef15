//! The byte streams calls run over.

use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::time::Duration;

/// A byte stream whose reads and writes can be bounded in time.
///
/// Implemented for `TcpStream`, rustls' `StreamOwned` over any transport,
/// and the in-memory [`super::pipe::PipeEnd`].
pub trait Transport: Read + Write {
    /// Bounds each following read; `None` waits forever.
    fn set_read_timeout(&mut self, timeout: Option<Duration>) -> io::Result<()>;
    /// Bounds each following write; `None` waits forever.
    fn set_write_timeout(&mut self, timeout: Option<Duration>) -> io::Result<()>;
}

/// The smallest timeout handed to a socket (a zero timeout means "none" to some APIs).
pub(crate) const MIN_TIMEOUT: Duration = Duration::from_millis(1);

impl Transport for TcpStream {
    fn set_read_timeout(&mut self, timeout: Option<Duration>) -> io::Result<()> {
        TcpStream::set_read_timeout(self, timeout.map(|t| t.max(MIN_TIMEOUT)))
    }
    fn set_write_timeout(&mut self, timeout: Option<Duration>) -> io::Result<()> {
        TcpStream::set_write_timeout(self, timeout.map(|t| t.max(MIN_TIMEOUT)))
    }
}

impl<T: Transport + ?Sized> Transport for &mut T {
    fn set_read_timeout(&mut self, timeout: Option<Duration>) -> io::Result<()> {
        (**self).set_read_timeout(timeout)
    }
    fn set_write_timeout(&mut self, timeout: Option<Duration>) -> io::Result<()> {
        (**self).set_write_timeout(timeout)
    }
}

impl<T: Transport + ?Sized> Transport for Box<T> {
    fn set_read_timeout(&mut self, timeout: Option<Duration>) -> io::Result<()> {
        (**self).set_read_timeout(timeout)
    }
    fn set_write_timeout(&mut self, timeout: Option<Duration>) -> io::Result<()> {
        (**self).set_write_timeout(timeout)
    }
}

impl<T: Transport> Transport for rustls::StreamOwned<rustls::ClientConnection, T> {
    fn set_read_timeout(&mut self, timeout: Option<Duration>) -> io::Result<()> {
        self.sock.set_read_timeout(timeout)
    }
    fn set_write_timeout(&mut self, timeout: Option<Duration>) -> io::Result<()> {
        self.sock.set_write_timeout(timeout)
    }
}

impl<T: Transport> Transport for rustls::StreamOwned<rustls::ServerConnection, T> {
    fn set_read_timeout(&mut self, timeout: Option<Duration>) -> io::Result<()> {
        self.sock.set_read_timeout(timeout)
    }
    fn set_write_timeout(&mut self, timeout: Option<Duration>) -> io::Result<()> {
        self.sock.set_write_timeout(timeout)
    }
}
