//! The byte streams calls run over, and how their reads and writes are
//! bounded in time.
//!
//! A timeout bounds one read or write of a socket, and counts from its
//! start; a deadline is an instant that bounds all of them together.
//! Every deadline confboot keeps (a call's, a frame's, a handshake's) is
//! absolute: a peer that sends a byte just before each timeout would fire,
//! or reads a byte just before each write would time out, is cut off when
//! the deadline passes, not when it stops. Two pieces make that so:
//!
//! - Over a plain socket, one read of the stream is one read of the
//!   socket: a timeout of what is left, set before every read and write,
//!   is the deadline ([`Transport::set_read_deadline`]'s default; the
//!   client and the server's [`ReadBefore`](crate::ReadBefore) set it
//!   before each one).
//! - Over TLS, one read of the stream reads the socket as often as it
//!   takes to get a whole record (a record trickled a byte at a time: once
//!   per byte), and one write may write it many times; so the socket
//!   itself holds the deadline and bounds each of its reads and writes by
//!   it: [`DeadlineSocket`], which aTLS puts under every stream it makes.
//!   A TLS stream's deadlines are its socket's.

use std::io::{self, IoSlice, Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use super::frame;

/// A byte stream whose reads and writes can be bounded in time.
///
/// Implemented for `TcpStream`, rustls' `StreamOwned` over any transport,
/// [`DeadlineSocket`] and the in-memory [`super::pipe::PipeEnd`].
pub trait Transport: Read + Write {
    /// Bounds each following read; `None` waits forever.
    fn set_read_timeout(&mut self, timeout: Option<Duration>) -> io::Result<()>;
    /// Bounds each following write; `None` waits forever.
    fn set_write_timeout(&mut self, timeout: Option<Duration>) -> io::Result<()>;

    /// Bounds the following reads by `deadline`; `None` waits forever.
    ///
    /// A transport that holds deadlines ([`DeadlineSocket`], a TLS stream
    /// over one) ends every read of its socket by it, however many reads
    /// of the socket one read of the stream takes. Any other gets a
    /// timeout of what is left now, which bounds its next read only:
    /// set the deadline again before every read. Fails with `TimedOut`
    /// once the deadline has passed (here or in the next read).
    fn set_read_deadline(&mut self, deadline: Option<Instant>) -> io::Result<()> {
        let timeout = deadline.map(time_left).transpose()?;
        self.set_read_timeout(timeout)
    }

    /// Bounds the following writes by `deadline`; `None` waits forever.
    /// As [`Transport::set_read_deadline`], for writes (a TLS stream's
    /// flush writes too).
    fn set_write_deadline(&mut self, deadline: Option<Instant>) -> io::Result<()> {
        let timeout = deadline.map(time_left).transpose()?;
        self.set_write_timeout(timeout)
    }

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

/// The error of a read or write whose deadline has passed.
fn deadline_passed() -> io::Error {
    io::Error::new(io::ErrorKind::TimedOut, "the deadline has passed")
}

/// What is left until `deadline`; `TimedOut` once it has passed.
fn time_left(deadline: Instant) -> io::Result<Duration> {
    let left = deadline.saturating_duration_since(Instant::now());
    if left.is_zero() {
        Err(deadline_passed())
    } else {
        Ok(left)
    }
}

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
    fn set_read_deadline(&mut self, deadline: Option<Instant>) -> io::Result<()> {
        (**self).set_read_deadline(deadline)
    }
    fn set_write_deadline(&mut self, deadline: Option<Instant>) -> io::Result<()> {
        (**self).set_write_deadline(deadline)
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
    fn set_read_deadline(&mut self, deadline: Option<Instant>) -> io::Result<()> {
        (**self).set_read_deadline(deadline)
    }
    fn set_write_deadline(&mut self, deadline: Option<Instant>) -> io::Result<()> {
        (**self).set_write_deadline(deadline)
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
    fn set_read_deadline(&mut self, deadline: Option<Instant>) -> io::Result<()> {
        self.sock.set_read_deadline(deadline)
    }
    fn set_write_deadline(&mut self, deadline: Option<Instant>) -> io::Result<()> {
        self.sock.set_write_deadline(deadline)
    }
}

impl<T: Transport> Transport for rustls::StreamOwned<rustls::ServerConnection, T> {
    fn set_read_timeout(&mut self, timeout: Option<Duration>) -> io::Result<()> {
        self.sock.set_read_timeout(timeout)
    }
    fn set_write_timeout(&mut self, timeout: Option<Duration>) -> io::Result<()> {
        self.sock.set_write_timeout(timeout)
    }
    fn set_read_deadline(&mut self, deadline: Option<Instant>) -> io::Result<()> {
        self.sock.set_read_deadline(deadline)
    }
    fn set_write_deadline(&mut self, deadline: Option<Instant>) -> io::Result<()> {
        self.sock.set_write_deadline(deadline)
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

/// A socket (any [`Transport`]) whose reads and writes end by the deadlines
/// set on it ([`Transport::set_read_deadline`], [`Transport::set_write_deadline`]):
/// every read and every write of the inner transport gets a timeout of at
/// most what is left, so a TLS stream over it is bounded by the deadline
/// however many reads of the socket one read of the stream takes. Once a
/// deadline has passed, reads (or writes) fail with `TimedOut` without
/// touching the socket. A timeout set instead ([`Transport::set_read_timeout`])
/// replaces the deadline and bounds each read alone, as on the inner
/// transport.
///
/// Setting the inner timeout costs a system call, so it is not set before
/// every read: it is set to what is left minus `SLACK` (50 ms), and
/// stands for the reads that start within `SLACK` of that, which
/// therefore still end by the deadline. A read that timed out before the
/// deadline (by up to `SLACK`) is tried again with exactly what is left (a
/// read or write that timed out transferred nothing), so the bound is the
/// deadline, neither later nor earlier. The same for writes; a flush goes
/// to the inner transport as it is (a socket's does not wait).
#[derive(Debug)]
pub struct DeadlineSocket<T> {
    inner: T,
    read: Bound,
    write: Bound,
}

/// One direction's bound of a [`DeadlineSocket`].
#[derive(Clone, Copy, Debug, Default)]
struct Bound {
    /// The deadline; `None`: the inner transport's own timeout bounds each
    /// operation.
    deadline: Option<Instant>,
    /// Until when an operation that starts ends by the deadline under the
    /// timeout the inner transport has now (`None`: set it first).
    armed_until: Option<Instant>,
}

impl Bound {
    fn set_deadline(&mut self, deadline: Option<Instant>) {
        if self.deadline != deadline {
            *self = Bound {
                deadline,
                armed_until: None,
            };
        }
    }

    /// Runs one operation of `inner`, bounded by the deadline (`set` sets
    /// the inner timeout of this direction).
    fn run<T, R>(
        &mut self,
        inner: &mut T,
        set: fn(&mut T, Option<Duration>) -> io::Result<()>,
        mut op: impl FnMut(&mut T) -> io::Result<R>,
    ) -> io::Result<R> {
        let Some(deadline) = self.deadline else {
            return op(inner);
        };
        let mut exact = false;
        loop {
            let now = Instant::now();
            let left = time_left(deadline)?;
            if exact || self.armed_until.is_none_or(|until| now >= until) {
                let (timeout, armed_until) = if !exact && left > 2 * SLACK {
                    (left - SLACK, Some(now + SLACK))
                } else {
                    (left, None)
                };
                set(inner, Some(timeout))?;
                self.armed_until = armed_until;
            }
            match op(inner) {
                Err(e) if frame::is_timeout(&e) => {
                    if Instant::now() >= deadline {
                        return Err(deadline_passed());
                    }
                    exact = true;
                }
                other => return other,
            }
        }
    }
}

/// How much earlier than the deadline a [`DeadlineSocket`]'s inner timeout
/// may end, so that it need not be set again for the reads and writes
/// that start within that time.
const SLACK: Duration = Duration::from_millis(50);

impl<T> DeadlineSocket<T> {
    /// `inner`, with no deadline yet: its own timeouts apply.
    pub fn new(inner: T) -> DeadlineSocket<T> {
        DeadlineSocket {
            inner,
            read: Bound::default(),
            write: Bound::default(),
        }
    }

    /// The inner transport (its timeouts are this socket's to set).
    pub fn get_ref(&self) -> &T {
        &self.inner
    }

    /// Gives the inner transport back.
    pub fn into_inner(self) -> T {
        self.inner
    }
}

impl<T: Transport> Read for DeadlineSocket<T> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.read
            .run(&mut self.inner, T::set_read_timeout, |s| s.read(buf))
    }
}

impl<T: Transport> Write for DeadlineSocket<T> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.write
            .run(&mut self.inner, T::set_write_timeout, |s| s.write(buf))
    }

    fn write_vectored(&mut self, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
        // TLS sends its queued records with one vectored write.
        self.write.run(&mut self.inner, T::set_write_timeout, |s| {
            s.write_vectored(bufs)
        })
    }

    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

impl<T: Transport> Transport for DeadlineSocket<T> {
    fn set_read_timeout(&mut self, timeout: Option<Duration>) -> io::Result<()> {
        self.read = Bound::default();
        self.inner.set_read_timeout(timeout)
    }
    fn set_write_timeout(&mut self, timeout: Option<Duration>) -> io::Result<()> {
        self.write = Bound::default();
        self.inner.set_write_timeout(timeout)
    }
    fn set_read_deadline(&mut self, deadline: Option<Instant>) -> io::Result<()> {
        if deadline.is_none() {
            return self.set_read_timeout(None);
        }
        self.read.set_deadline(deadline);
        Ok(())
    }
    fn set_write_deadline(&mut self, deadline: Option<Instant>) -> io::Result<()> {
        if deadline.is_none() {
            return self.set_write_timeout(None);
        }
        self.write.set_deadline(deadline);
        Ok(())
    }
}

/// A transport read and written before one deadline: each read and write
/// sets the deadline first, so over a plain socket, where that is a
/// timeout of what is left, every read and write is bounded by it too,
/// not only the first.
pub(crate) struct ByDeadline<'a, T: ?Sized> {
    /// The transport.
    pub(crate) stream: &'a mut T,
    /// When all reading and writing must be over.
    pub(crate) deadline: Instant,
}

impl<T: Transport + ?Sized> Read for ByDeadline<'_, T> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.stream.set_read_deadline(Some(self.deadline))?;
        self.stream.read(buf)
    }
}

impl<T: Transport + ?Sized> Write for ByDeadline<'_, T> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.stream.set_write_deadline(Some(self.deadline))?;
        self.stream.write(buf)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.stream.set_write_deadline(Some(self.deadline))?;
        self.stream.flush()
    }
}

#[cfg(test)]
mod tests {
    use super::super::pipe;
    use super::*;
    use std::thread;

    /// Reads byte after byte until an error; returns the bytes and the error.
    fn read_until_error(r: &mut impl Read) -> (usize, io::Error) {
        let mut got = 0;
        loop {
            match r.read(&mut [0u8; 1]) {
                Ok(n) => got += n,
                Err(e) => return (got, e),
            }
        }
    }

    #[test]
    fn reads_of_a_trickled_stream_end_at_the_deadline_and_a_timeout_replaces_it() {
        let (mut trickling, end) = pipe::pair();
        let trickler = thread::spawn(move || {
            // A byte every 20 ms for 200 ms, a second of silence, the rest.
            for _ in 0..10 {
                thread::sleep(Duration::from_millis(20));
                trickling.write_all(b"x").unwrap();
            }
            thread::sleep(Duration::from_secs(1));
            trickling.write_all(&[b'x'; 40]).unwrap();
        });
        let mut socket = DeadlineSocket::new(end);
        let started = Instant::now();
        let deadline = started + Duration::from_millis(300);
        socket.set_read_deadline(Some(deadline)).unwrap();
        let (got, e) = read_until_error(&mut socket);
        let ended = Instant::now();
        assert_eq!(e.kind(), io::ErrorKind::TimedOut);
        assert_eq!(got, 10, "bytes before the deadline");
        assert!(ended >= deadline, "ended {:?} early", deadline - ended);
        assert!(
            ended < deadline + Duration::from_millis(200),
            "ended {:?} after the deadline",
            ended - deadline
        );
        // Past the deadline, a read fails without waiting.
        assert_eq!(
            socket.read(&mut [0u8; 1]).unwrap_err().kind(),
            io::ErrorKind::TimedOut
        );
        // A timeout bounds each read alone again: the rest arrives.
        socket
            .set_read_timeout(Some(Duration::from_secs(5)))
            .unwrap();
        let mut rest = Vec::new();
        socket.read_to_end(&mut rest).unwrap();
        assert_eq!(got + rest.len(), 50);
        trickler.join().unwrap();
    }

    #[test]
    fn writes_to_a_peer_that_reads_nothing_end_at_the_deadline() {
        let (end, _silent) = pipe::pair();
        let mut socket = DeadlineSocket::new(end);
        let deadline = Instant::now() + Duration::from_millis(200);
        socket.set_write_deadline(Some(deadline)).unwrap();
        let (mut sent, chunk) = (0, [0u8; 4096]);
        let e = loop {
            match socket.write(&chunk) {
                Ok(n) => sent += n,
                Err(e) => break e,
            }
        };
        assert_eq!(e.kind(), io::ErrorKind::TimedOut);
        assert!(sent > 0);
        let late = Instant::now().saturating_duration_since(deadline);
        assert!(late < Duration::from_millis(200), "{late:?} late");
    }
}
