//! The gate before the pool: a connection reaches a worker only once it
//! has sent its whole opening (for TLS: the ClientHello's first record).
//! Until then the accepting thread watches it with `epoll(7)`, together
//! with every other such connection, so peers that connect and say
//! nothing, or trickle their first bytes, hold no worker. The gate holds a
//! bounded number of them; a new connection evicts the one that has waited
//! longest, and each may wait at most the gate's timeout. An opening that
//! cannot be valid is closed as soon as its first bytes show it. A
//! connection whose opening is complete while every worker is busy and the
//! queue is full waits at the gate for room, instead of being closed. A
//! gate may also ask the kernel to hand over a connection only with its
//! first bytes ([`Gate::defer_accept`]; a silent one comes to the gate
//! after that time), so an honest peer passes the gate in one look. The
//! gate sets a connection up for its handler (socket options, the server's
//! handle on it) only when it leaves for a worker.

use std::collections::{HashMap, VecDeque};
use std::io;
use std::net::{IpAddr, TcpListener, TcpStream};
use std::os::fd::AsFd;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
use nix::sys::epoll::{Epoll, EpollCreateFlags, EpollEvent, EpollFlags};

use crate::listener::Acceptor;

/// What the first bytes a peer sent say about its opening.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Opening {
    /// The opening is all there: a worker may take the connection.
    Complete,
    /// More bytes are needed.
    Incomplete,
    /// No valid opening starts like this: the connection is closed.
    Invalid,
}

/// Keeps connections away from the worker pool until they have sent their
/// opening: until then the accepting thread watches them with `epoll(7)`,
/// so peers that connect and say nothing, or trickle their first bytes,
/// hold no worker. At most [`Gate::capacity`] wait at once (a new one
/// evicts the one waiting longest), each at most [`Gate::timeout`]; an
/// opening that cannot be valid is closed from its first bytes. Peers whose
/// opening arrives at once (every honest client) pass in the time of one
/// wake-up of the accepting thread.
#[derive(Clone, Debug)]
pub struct Gate {
    /// Judges the bytes received so far (read with `MSG_PEEK`, so the
    /// handler still reads them from the socket).
    pub judge: fn(&[u8]) -> Opening,
    /// Bytes an opening may take; a peer that sent this many without a
    /// complete opening is closed.
    pub max_opening: usize,
    /// How long a connection may stay at the gate: to send its opening,
    /// and then, while every worker is busy and the queue full, to wait
    /// for room.
    pub timeout: Duration,
    /// Connections at the gate at once; a new one evicts the one that has
    /// waited longest without sending its whole opening (or, when all have,
    /// the one waiting longest for room). Each costs two file descriptors.
    pub capacity: usize,
    /// Whether a peer that has shut its sending side after its opening is
    /// closed instead of served (for protocols whose clients never do so
    /// before an answer, as TLS: a ClientHello flood that aborts costs no
    /// worker and no handshake). Looked at again when a worker takes it.
    pub drop_half_closed: bool,
    /// How long the kernel may hold a new connection until its first bytes
    /// arrive before handing it over (`TCP_DEFER_ACCEPT`, whole seconds;
    /// after that it comes to the gate as any other); `None`: every
    /// connection comes to the gate once it is established. For protocols
    /// whose clients speak first: an honest opening then passes the gate in
    /// one look. A silent connection meanwhile takes a place in the
    /// kernel's bounded queue of half-open connections (beyond it, SYN
    /// cookies let new connections in at once), no descriptor.
    pub defer_accept: Option<Duration>,
}

/// Peeks at the bytes `stream` has received, without waiting for any (the
/// gate's sockets stay blocking for their handlers).
fn peek_now(stream: &TcpStream, buf: &mut [u8]) -> io::Result<usize> {
    use nix::sys::socket::{MsgFlags, recv};
    use std::os::fd::AsRawFd;
    recv(
        stream.as_raw_fd(),
        buf,
        MsgFlags::MSG_PEEK | MsgFlags::MSG_DONTWAIT,
    )
    .map_err(io::Error::from)
}

/// Whether the peer of `stream` has shut its sending side (`POLLRDHUP`),
/// or the connection is gone.
pub(crate) fn half_closed(stream: &TcpStream) -> bool {
    let rdhup = PollFlags::from_bits_retain(nix::libc::POLLRDHUP);
    let mut fds = [PollFd::new(stream.as_fd(), rdhup)];
    matches!(poll(&mut fds, PollTimeout::ZERO), Ok(n) if n > 0)
}

/// Connections the gate accepts in a row before it looks again at those it
/// holds (a burst of new ones must not evict one whose opening just came).
const GATE_ACCEPT_BATCH: usize = 32;

/// How often the gate looks again at a connection whose opening is complete
/// while every worker is busy and the queue is full (one that sent part of
/// its opening is looked at again when more bytes come).
const GATE_RECHECK: Duration = Duration::from_millis(20);
/// Longest single wait in the gate's poll, so it notices the stop signal.
const GATE_POLL_MAX: Duration = Duration::from_millis(250);

/// A connection at the gate.
struct Pending {
    id: u64,
    stream: TcpStream,
    peer: IpAddr,
    until: Instant,
    /// When to peek again, for one that sent part of its opening.
    recheck: Option<Instant>,
    /// Its opening is complete: it waits for room in the pool.
    ready: bool,
    /// Registered with the gate's epoll instance.
    watched: bool,
    /// Listed among those to look at again on a timer ([`AtGate`]).
    listed: bool,
}

/// The connections at the gate: by id; in arrival order, which is the
/// order of their deadlines (each gets the gate's timeout from its accept);
/// and, apart, the few looked at again on a timer (a partial opening, or a
/// complete one waiting for room). Ids of connections that left stay in
/// the arrival order until they reach its front (or it is compacted).
struct AtGate {
    by_id: HashMap<u64, Pending>,
    arrival: VecDeque<u64>,
    rechecking: Vec<u64>,
}

impl AtGate {
    fn with_capacity(n: usize) -> AtGate {
        AtGate {
            by_id: HashMap::with_capacity(n + 1),
            arrival: VecDeque::with_capacity(2 * n + 1),
            rechecking: Vec::new(),
        }
    }

    fn len(&self) -> usize {
        self.by_id.len()
    }

    /// A newly accepted connection.
    fn add(&mut self, p: Pending) {
        if self.arrival.len() > 2 * self.by_id.len() + 1024 {
            let by_id = &self.by_id;
            self.arrival.retain(|id| by_id.contains_key(id));
        }
        self.arrival.push_back(p.id);
        self.put_back(p);
    }

    /// A connection taken out to be looked at, kept.
    fn put_back(&mut self, mut p: Pending) {
        if p.recheck.is_some() && !p.listed {
            p.listed = true;
            self.rechecking.push(p.id);
        }
        self.by_id.insert(p.id, p);
    }

    /// The connection `id`, if the gate holds it.
    fn take(&mut self, id: u64) -> Option<Pending> {
        self.by_id.remove(&id)
    }

    /// Takes the ids of the connections whose time for another look has
    /// come into `due` (in one pass; take each with [`Self::take`]).
    fn due(&mut self, now: Instant, due: &mut Vec<u64>) {
        due.clear();
        let by_id = &mut self.by_id;
        self.rechecking.retain(|id| {
            let Some(p) = by_id.get_mut(id) else {
                return false;
            };
            match p.recheck {
                Some(r) if r > now => true,
                Some(_) => {
                    due.push(*id);
                    p.listed = false;
                    false
                }
                None => {
                    p.listed = false;
                    false
                }
            }
        });
    }

    /// The oldest connection, when its time at the gate is over.
    fn take_expired(&mut self, now: Instant) -> Option<Pending> {
        while let Some(&id) = self.arrival.front() {
            match self.by_id.get(&id) {
                None => {
                    self.arrival.pop_front();
                }
                Some(p) if p.until <= now => {
                    self.arrival.pop_front();
                    return self.by_id.remove(&id);
                }
                Some(_) => return None,
            }
        }
        None
    }

    /// The connection to evict for a newer one: the oldest that has not
    /// sent its whole opening, or, when every one has, the oldest.
    fn take_oldest(&mut self) -> Option<Pending> {
        let victim = self
            .arrival
            .iter()
            .find(|id| self.by_id.get(id).is_some_and(|p| !p.ready))
            .or_else(|| self.arrival.iter().find(|id| self.by_id.contains_key(id)))
            .copied()?;
        self.by_id.remove(&victim)
    }

    /// When the gate must next look without a readable connection: the
    /// earliest deadline or timed look.
    fn next_due(&mut self) -> Option<Instant> {
        while let Some(id) = self.arrival.front() {
            if self.by_id.contains_key(id) {
                break;
            }
            self.arrival.pop_front();
        }
        let first_deadline = self
            .arrival
            .front()
            .and_then(|id| self.by_id.get(id))
            .map(|p| p.until);
        let first_look = self
            .rechecking
            .iter()
            .filter_map(|id| self.by_id.get(id)?.recheck)
            .min();
        match (first_deadline, first_look) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Every connection the gate holds, taken out.
    fn drain(&mut self) -> impl Iterator<Item = Pending> + '_ {
        self.arrival.clear();
        self.rechecking.clear();
        self.by_id.drain().map(|(_, p)| p)
    }
}

/// The gate's epoll key of the listening socket (connection ids count up
/// from 0).
const LISTENER_KEY: u64 = u64::MAX;

/// The gated accepting thread: the gate's epoll instance, watching the
/// listening socket and the connections that have not sent their whole
/// opening.
struct Keeper<'a> {
    acceptor: &'a Acceptor,
    gate: &'a Gate,
    epoll: Epoll,
    /// Where a connection's first bytes are peeked at.
    buf: Vec<u8>,
}

/// Accepts connections on `listener` and keeps each at the gate until its
/// opening is complete (then hands it to the pool), invalid, late or
/// evicted (then closes it). Gives the listener back when the gate cannot
/// watch it, to serve without a gate.
pub(crate) fn run(
    acceptor: &Acceptor,
    listener: TcpListener,
    gate: &Gate,
) -> Result<(), TcpListener> {
    let epoll = match Epoll::new(EpollCreateFlags::EPOLL_CLOEXEC) {
        Ok(e) => e,
        Err(e) => {
            log::error!("cannot create an epoll instance, serving without a gate: {e}");
            return Err(listener);
        }
    };
    let listening = listener.set_nonblocking(true).and_then(|_| {
        epoll
            .add(
                &listener,
                EpollEvent::new(EpollFlags::EPOLLIN, LISTENER_KEY),
            )
            .map_err(io::Error::from)
    });
    if let Err(e) = listening {
        log::error!("cannot watch the listener, serving without a gate: {e}");
        let _ = listener.set_nonblocking(false);
        return Err(listener);
    }
    let mut keeper = Keeper {
        acceptor,
        gate,
        epoll,
        buf: vec![0u8; gate.max_opening.max(1)],
    };
    keeper.run(&listener);
    Ok(())
}

impl Keeper<'_> {
    /// Watches a connection for more bytes, edge-triggered: one that sent
    /// part of its opening stays readable while its bytes are only peeked
    /// at, so only new bytes must wake the gate. It stays watched until it
    /// leaves the gate (a close takes it off); one whose opening is
    /// complete and that waits for room is looked at on a timer.
    fn watch(&self, p: &mut Pending) {
        if !p.watched && !p.ready {
            let flags = EpollFlags::EPOLLIN | EpollFlags::EPOLLET;
            p.watched = self
                .epoll
                .add(&p.stream, EpollEvent::new(flags, p.id))
                .is_ok();
        }
    }

    fn unwatch(&self, p: &mut Pending) {
        if p.watched {
            let _ = self.epoll.delete(&p.stream);
            p.watched = false;
        }
    }

    /// Connections that have sent nothing yet are watched with `epoll(7)`,
    /// so a wake-up costs what is ready, not what is held.
    fn run(&mut self, listener: &TcpListener) {
        let capacity = self.gate.capacity.clamp(1, 4096);
        let mut pending = AtGate::with_capacity(capacity);
        let mut events = vec![EpollEvent::empty(); 256];
        let mut due = Vec::new();
        while !self.acceptor.stop.is_raised() {
            let now = Instant::now();
            let wake = pending
                .next_due()
                .map_or(GATE_POLL_MAX, |t| t.saturating_duration_since(now))
                .min(GATE_POLL_MAX);
            let ms = u16::try_from(wake.as_millis().max(1)).unwrap_or(u16::MAX);
            let n = match self.epoll.wait(&mut events, PollTimeout::from(ms)) {
                Ok(n) => n,
                Err(nix::errno::Errno::EINTR) => continue,
                Err(e) => {
                    log::warn!("gate: epoll_wait failed: {e}");
                    std::thread::sleep(Duration::from_millis(10));
                    continue;
                }
            };

            // Look at the connections that are readable, then at those due
            // for a look, then close those out of time: a wake-up costs what
            // is ready or due, not what the gate holds (under a flood it
            // wakes thousands of times a second while hundreds wait).
            let now = Instant::now();
            let mut listener_ready = false;
            for event in &events[..n] {
                match event.data() {
                    LISTENER_KEY => listener_ready = true,
                    id => {
                        if let Some(p) = pending.take(id)
                            && let Some(mut p) = self.look(p, now)
                        {
                            self.watch(&mut p);
                            pending.put_back(p);
                        }
                    }
                }
            }
            pending.due(now, &mut due);
            for &id in &due {
                let Some(p) = pending.take(id) else {
                    continue;
                };
                if let Some(mut p) = self.look(p, now) {
                    self.watch(&mut p);
                    pending.put_back(p);
                }
            }
            while let Some(p) = pending.take_expired(now) {
                // Its last look says why it goes (no opening, an
                // incomplete one, or no worker free in time).
                if let Some(p) = self.look(p, now) {
                    self.drop_pending(p, "no complete opening in time");
                }
            }
            self.acceptor.pool.preempt_for_queued();

            if listener_ready {
                self.accept_batch(listener, &mut pending);
            }
        }
        for mut p in pending.drain() {
            self.unwatch(&mut p);
            let _ = p.stream.shutdown(std::net::Shutdown::Both);
            self.acceptor.open.remove(p.id);
        }
    }

    /// Accepts the connections waiting on `listener` (up to
    /// [`GATE_ACCEPT_BATCH`]) and takes each to the gate, evicting the one
    /// waiting longest when the gate is full.
    fn accept_batch(&mut self, listener: &TcpListener, pending: &mut AtGate) {
        let gate = self.gate;
        for _ in 0..GATE_ACCEPT_BATCH {
            let (stream, peer) = match listener.accept() {
                Ok((s, addr)) => (s, addr.ip()),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    log::warn!("accept failed: {e}");
                    std::thread::sleep(Duration::from_millis(10));
                    break;
                }
            };
            if self.acceptor.stop.is_raised() {
                break;
            }
            let Some((id, stream)) = self.acceptor.admit(stream, peer, true) else {
                continue;
            };
            let now = Instant::now();
            let fresh = Pending {
                id,
                stream,
                peer,
                until: now + gate.timeout,
                recheck: None,
                ready: false,
                watched: false,
                listed: false,
            };
            // Most openings are there by the time they are accepted.
            let Some(mut fresh) = self.look(fresh, now) else {
                continue;
            };
            // Full: the oldest that has not sent its whole opening goes (one
            // that has, and waits for a worker, only when every one has).
            if pending.len() >= gate.capacity.max(1)
                && let Some(oldest) = pending.take_oldest()
                && let Some(oldest) = self.look(oldest, now)
            {
                self.acceptor.stats.evicted.fetch_add(1, Ordering::Relaxed);
                self.drop_pending(oldest, "evicted for a newer connection");
            }
            self.watch(&mut fresh);
            pending.add(fresh);
            self.acceptor
                .stats
                .gate_peak
                .fetch_max(pending.len() as u64, Ordering::Relaxed);
        }
    }

    /// Peeks at a connection at the gate: hands it to the pool when its
    /// opening is complete and there is room (taking it off the gate's
    /// epoll instance first), closes it when the opening is invalid, too
    /// long or late, or the peer is gone; otherwise gives it back (to look
    /// again at it when more bytes come, or in [`GATE_RECHECK`] when it
    /// waits for room).
    fn look(&mut self, mut p: Pending, now: Instant) -> Option<Pending> {
        let gate = self.gate;
        let acceptor = self.acceptor;
        match peek_now(&p.stream, &mut self.buf) {
            Ok(0) => self.drop_pending(p, "closed before its opening"),
            Ok(n) => match (gate.judge)(&self.buf[..n]) {
                // With every worker busy, it waits here (its time bounded
                // as before) until there is room.
                Opening::Complete if p.until <= now => {
                    acceptor.stats.refused.fetch_add(1, Ordering::Relaxed);
                    log::warn!("refusing connection from {}: all workers busy", p.peer);
                    self.drop_pending(p, "no worker free in time")
                }
                // A peer that sent its opening and already shut its side
                // (a flood that aborts) gets no worker.
                Opening::Complete if gate.drop_half_closed && half_closed(&p.stream) => {
                    self.drop_pending(p, "closed after its opening")
                }
                Opening::Complete => {
                    // Off the epoll instance before its descriptor has a
                    // second handle (which would keep it registered).
                    self.unwatch(&mut p);
                    let handed = acceptor.prepare(&p.stream).and_then(|_| {
                        acceptor
                            .open
                            .attach(p.id, &p.stream)
                            .map_err(|_| io::Error::other("no descriptor for its handle"))
                    });
                    match handed {
                        Ok(()) => match acceptor.pool.try_dispatch(p.id, p.stream) {
                            Ok(()) => {}
                            Err(stream) => {
                                p.stream = stream;
                                p.recheck = Some(now + GATE_RECHECK);
                                p.ready = true;
                                return Some(p);
                            }
                        },
                        Err(_) => self.drop_pending(p, "socket failed"),
                    }
                }
                Opening::Invalid => self.drop_pending(p, "invalid opening"),
                Opening::Incomplete if n >= gate.max_opening => {
                    self.drop_pending(p, "opening too long")
                }
                Opening::Incomplete if p.until <= now => {
                    self.drop_pending(p, "no complete opening in time")
                }
                // Watched edge-triggered: more bytes wake the gate.
                Opening::Incomplete => return Some(p),
            },
            Err(e) if e.kind() == io::ErrorKind::WouldBlock && p.until <= now => {
                self.drop_pending(p, "no opening in time")
            }
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted
                ) =>
            {
                return Some(p);
            }
            Err(_) => self.drop_pending(p, "socket failed"),
        }
        None
    }

    /// Closes a connection the gate drops. Nothing else holds it, so
    /// closing it is enough: one whose bytes were only peeked at is reset
    /// (a single packet, no orderly close for a peer that gets nothing).
    fn drop_pending(&self, p: Pending, why: &str) {
        log::debug!("gate: closing connection from {}: {why}", p.peer);
        self.acceptor
            .stats
            .gate_closed
            .fetch_add(1, Ordering::Relaxed);
        self.acceptor.open.remove(p.id);
        drop(p.stream);
    }
}
