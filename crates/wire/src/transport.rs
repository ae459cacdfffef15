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

    /// Writes the last bytes this side sends and flushes them; a TLS
    /// server's stream sends its close_notify in the same flight (one
    /// system call), so ending the connection costs no write of its own.
    fn write_last(&mut self, buf: &[u8]) -> io::Result<()> {
        self.write_all(buf)?;
        self.flush()
    }
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
    fn write_last(&mut self, buf: &[u8]) -> io::Result<()> {
        (**self).write_last(buf)
    }
}

impl<T: Transport + ?Sized> Transport for Box<T> {
    fn set_read_timeout(&mut self, timeout: Option<Duration>) -> io::Result<()> {
        (**self).set_read_timeout(timeout)
    }
    fn set_write_timeout(&mut self, timeout: Option<Duration>) -> io::Result<()> {
        (**self).set_write_timeout(timeout)
    }
    fn write_last(&mut self, buf: &[u8]) -> io::Result<()> {
        (**self).write_last(buf)
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
    fn write_last(&mut self, buf: &[u8]) -> io::Result<()> {
        if self.conn.is_handshaking() {
            // Only a stream that completed its handshake can queue
            // records without driving it: write as any stream does.
            self.write_all(buf)?;
            return self.flush();
        }
        // rustls takes plaintext up to its buffer limit: what it does not
        // take waits until the records queued before it are sent.
        let mut rest = buf;
        while !rest.is_empty() {
            let taken = self.conn.writer().write(rest)?;
            rest = &rest[taken..];
            if !rest.is_empty() {
                if !self.conn.wants_write() {
                    return Err(io::ErrorKind::WriteZero.into());
                }
                send_queued_records(self)?;
            }
        }
        self.conn.send_close_notify();
        send_queued_records(self)?;
        self.sock.flush()
    }
}

/// Writes every TLS record the connection has queued to its socket.
fn send_queued_records<T: Transport>(
    s: &mut rustls::StreamOwned<rustls::ServerConnection, T>,
) -> io::Result<()> {
    while s.conn.wants_write() {
        if s.conn.write_tls(&mut s.sock)? == 0 {
            return Err(io::ErrorKind::WriteZero.into());
        }
    }
    Ok(())
}
