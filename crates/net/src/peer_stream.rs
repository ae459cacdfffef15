//! The stream a handler serves its connection on: the accepted socket with
//! the connection's waiting mark, which every blocking read sets while it
//! waits for the peer. A protocol on top (TLS, RPC frames, HTTP) reads its
//! peer through it and so is marked without a word about waiting: a
//! handshake, the wait for the next call and a frame trickled a byte at a
//! time count, the handler's own work (deriving a key, streaming a log)
//! does not. When every worker is busy, the server shuts the connection
//! that has waited longest for its peer ([`PoolConfig::preempt_after`](crate::PoolConfig::preempt_after)).
//!
//! One wait runs from a read to the next write: the reads of a request, a
//! read that timed out and is tried again (a wait that looks at the stop
//! signal between reads), and the reads of bytes that trickle in belong to
//! the same wait; what the handler does between them is taken out of it.
//! A write is the handler's answer: its next read waits anew.

use std::io::{self, IoSlice, IoSliceMut, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::sync::Arc;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use confboot_wire::Transport;

/// Now, in microseconds on the clock waiting marks are kept on (never 0).
pub(crate) fn now_micros() -> u64 {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    let epoch = *EPOCH.get_or_init(Instant::now);
    u64::try_from(epoch.elapsed().as_micros()).unwrap_or(u64::MAX - 1) + 1
}

/// A connection's waiting mark, set by its [`PeerStream`] and read by the
/// server when it looks for a connection to preempt: 0 while the handler
/// is not in a read of the connection, else when (on [`now_micros`]) the
/// wait that read belongs to began, the time the handler worked since
/// taken out.
#[derive(Debug, Default)]
pub(crate) struct WaitingMark(AtomicU64);

impl WaitingMark {
    /// How long the handler has waited for its peer, when it is in a read
    /// of the connection at `now`.
    pub(crate) fn waited(&self, now: u64) -> Option<Duration> {
        match self.0.load(Ordering::Relaxed) {
            0 => None,
            since => Some(Duration::from_micros(now.saturating_sub(since))),
        }
    }

    /// Forgets the wait in progress (the connection was shut for it, so it
    /// is not chosen twice).
    pub(crate) fn clear(&self) {
        self.0.store(0, Ordering::Relaxed);
    }

    fn set(&self, since: u64) {
        self.0.store(since, Ordering::Relaxed);
    }
}

/// The wait for the peer a [`PeerStream`] is in, between its reads.
#[derive(Clone, Copy, Debug)]
struct Wait {
    /// When it began, the time worked between its reads taken out.
    began: u64,
    /// When its last read ended.
    last_read_end: u64,
}

/// An accepted connection as its handler gets it: reads and writes go to
/// the socket, and a read (or peek) marks the connection as waiting for its
/// peer for as long as it blocks (see the module documentation). It is a
/// [`Transport`]: TLS and the RPC and HTTP servers run over it as over a
/// `TcpStream`.
#[derive(Debug)]
pub struct PeerStream {
    socket: TcpStream,
    mark: Arc<WaitingMark>,
    /// The wait in progress; `None` once the handler has written.
    wait: Option<Wait>,
}

impl PeerStream {
    /// `socket`, whose reads set `mark`.
    pub(crate) fn new(socket: TcpStream, mark: Arc<WaitingMark>) -> PeerStream {
        PeerStream {
            socket,
            mark,
            wait: None,
        }
    }

    /// Runs a read of the peer's bytes with the connection marked as
    /// waiting for its peer: since the wait began when the read belongs to
    /// the wait in progress, the time since that wait's last read taken
    /// out; since now when it begins one.
    fn waiting<R>(&mut self, read: impl FnOnce(&mut TcpStream) -> R) -> R {
        let now = now_micros();
        let began = match self.wait {
            Some(w) => w.began + now.saturating_sub(w.last_read_end),
            None => now,
        };
        self.mark.set(began);
        let r = read(&mut self.socket);
        self.mark.clear();
        self.wait = Some(Wait {
            began,
            last_read_end: now_micros(),
        });
        r
    }

    /// Receives bytes without taking them from the socket, waiting for the
    /// peer as a read does.
    pub fn peek(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.waiting(|s| s.peek(buf))
    }

    /// The peer's address.
    pub fn peer_addr(&self) -> io::Result<SocketAddr> {
        self.socket.peer_addr()
    }

    /// The address the connection was accepted on.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.socket.local_addr()
    }

    /// Bounds each following read (`None`: no bound).
    pub fn set_read_timeout(&self, timeout: Option<Duration>) -> io::Result<()> {
        self.socket.set_read_timeout(timeout)
    }

    /// Bounds each following write (`None`: no bound).
    pub fn set_write_timeout(&self, timeout: Option<Duration>) -> io::Result<()> {
        self.socket.set_write_timeout(timeout)
    }

    /// Shuts the reading side, the writing side or both of the connection.
    pub fn shutdown(&self, how: Shutdown) -> io::Result<()> {
        self.socket.shutdown(how)
    }
}

impl Read for PeerStream {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.waiting(|s| s.read(buf))
    }

    fn read_vectored(&mut self, bufs: &mut [IoSliceMut<'_>]) -> io::Result<usize> {
        self.waiting(|s| s.read_vectored(bufs))
    }
}

impl Write for PeerStream {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.wait = None;
        self.socket.write(buf)
    }

    fn write_vectored(&mut self, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
        self.wait = None;
        self.socket.write_vectored(bufs)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.socket.flush()
    }
}

impl Transport for PeerStream {
    fn set_read_timeout(&mut self, timeout: Option<Duration>) -> io::Result<()> {
        Transport::set_read_timeout(&mut self.socket, timeout)
    }

    fn set_write_timeout(&mut self, timeout: Option<Duration>) -> io::Result<()> {
        Transport::set_write_timeout(&mut self.socket, timeout)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpListener;
    use std::thread;

    /// A stream over loopback, its mark, and its peer's end.
    fn connected() -> (PeerStream, Arc<WaitingMark>, TcpStream) {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let peer = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (socket, _) = l.accept().unwrap();
        let mark = Arc::new(WaitingMark::default());
        (PeerStream::new(socket, Arc::clone(&mark)), mark, peer)
    }

    /// Runs `during` on the stream and returns how long the mark says the
    /// handler has waited for its peer, looked at from another thread
    /// `look_after` after `during` began.
    fn waited_during<R>(
        stream: &mut PeerStream,
        mark: &Arc<WaitingMark>,
        look_after: Duration,
        during: impl FnOnce(&mut PeerStream) -> R,
    ) -> (Option<Duration>, R) {
        let mark = Arc::clone(mark);
        let look = thread::spawn(move || {
            thread::sleep(look_after);
            mark.waited(now_micros())
        });
        let r = during(stream);
        (look.join().unwrap(), r)
    }

    /// Reads one byte the peer sends `after` from now.
    fn read_byte_sent_after(stream: &mut PeerStream, peer: &TcpStream, after: Duration) {
        let mut peer = peer.try_clone().unwrap();
        let sender = thread::spawn(move || {
            thread::sleep(after);
            peer.write_all(b"x").unwrap();
        });
        stream.read_exact(&mut [0u8; 1]).unwrap();
        sender.join().unwrap();
    }

    #[test]
    fn a_blocked_read_marks_the_connection_and_work_does_not() {
        let (mut stream, mark, peer) = connected();
        assert_eq!(mark.waited(now_micros()), None);
        // The peer sends after 300 ms: meanwhile the read waits for it.
        let (waited, ()) = waited_during(&mut stream, &mark, Duration::from_millis(150), |s| {
            read_byte_sent_after(s, &peer, Duration::from_millis(300));
        });
        assert!(
            waited.is_some_and(|w| w >= Duration::from_millis(100)),
            "{waited:?}"
        );
        assert_eq!(mark.waited(now_micros()), None, "the read is over");
        // The handler at work, between reads: not waiting.
        let (waited, ()) = waited_during(&mut stream, &mark, Duration::from_millis(50), |_| {
            thread::sleep(Duration::from_millis(150));
        });
        assert_eq!(waited, None);
    }

    #[test]
    fn a_wait_lasts_through_trickled_bytes_and_timeouts_until_the_handler_writes() {
        let (mut stream, mark, peer) = connected();
        // Reads that time out and are tried again, and bytes that come one
        // at a time: one wait.
        stream
            .set_read_timeout(Some(Duration::from_millis(20)))
            .unwrap();
        let started = Instant::now();
        let mut trickling = peer.try_clone().unwrap();
        let trickler = thread::spawn(move || {
            for _ in 0..10 {
                thread::sleep(Duration::from_millis(30));
                trickling.write_all(b"x").unwrap();
            }
        });
        let mut got = 0;
        while got < 10 {
            match stream.read(&mut [0u8; 1]) {
                Ok(n) => got += n,
                Err(e) if confboot_wire::frame::is_timeout(&e) => {}
                Err(e) => panic!("{e}"),
            }
        }
        let trickled = started.elapsed();
        trickler.join().unwrap();
        stream.set_read_timeout(None).unwrap();

        // The handler works 200 ms, then reads on: the same wait, its work
        // taken out.
        let work = Duration::from_millis(200);
        thread::sleep(work);
        let (waited, ()) = waited_during(&mut stream, &mark, Duration::from_millis(50), |s| {
            read_byte_sent_after(s, &peer, Duration::from_millis(100));
        });
        let waited = waited.expect("in a read");
        assert!(
            waited >= trickled && waited < trickled + work,
            "waited {waited:?} (trickled {trickled:?}, worked {work:?})"
        );

        // A write is the handler's answer: its next read waits anew.
        stream.write_all(b"answer").unwrap();
        let (waited, ()) = waited_during(&mut stream, &mark, Duration::from_millis(50), |s| {
            read_byte_sent_after(s, &peer, Duration::from_millis(100));
        });
        let waited = waited.expect("in a read");
        assert!(
            waited >= Duration::from_millis(40) && waited < trickled,
            "waited {waited:?} since the answer"
        );
    }
}
