//! The accept loop: one thread accepts, a bounded pool of worker threads
//! serves connections. When every worker is busy and the queue is full, a new
//! connection is closed at once instead of waiting without bound; so is one
//! from a peer address that already holds its share of the pool. Stopping
//! the server gives open connections a grace period, then shuts them.
//!
//! With a [`Gate`], a connection reaches a worker only once it has sent its
//! whole opening (for TLS: the ClientHello's first record): until then the
//! accepting thread watches it with `epoll(7)`, together with every other
//! such connection, so peers that connect and say nothing, or trickle their
//! first bytes, hold no worker. The gate holds a bounded number of them; a
//! new connection evicts the one that has waited longest, and each may wait
//! at most the gate's timeout. An opening that cannot be valid is closed as
//! soon as its first bytes show it. A connection whose opening is complete
//! while every worker is busy and the queue is full waits at the gate for
//! room, instead of being closed. A gate may also ask the kernel to hand
//! over a connection only with its first bytes ([`Gate::defer_accept`]; a
//! silent one comes to the gate after that time), so an honest peer passes
//! the gate in one look. The gate sets a connection
//! up for its handler (socket options, the server's handle on it) only when
//! it leaves for a worker.
//!
//! Workers wait for connections on a mutex-and-condition-variable queue
//! (`handoff.rs`) that parks them at once, without spinning.
//!
//! Handlers mark where they wait for their peer ([`waiting_for_peer`](confboot_wire::waiting::waiting_for_peer): a
//! handshake, the next call, a frame). When the queue is full, or while
//! connections wait in it, the connection that has waited longest for its
//! peer (at least [`PoolConfig::preempt_after`]) is shut to make room, so
//! peers that pass the gate and then hold their worker idle or trickling
//! cannot keep a busy server from serving others.

use std::collections::{HashMap, VecDeque};
use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsFd;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::handoff::HandOff;
use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
use nix::sys::epoll::{Epoll, EpollCreateFlags, EpollEvent, EpollFlags};

use confboot_util::stop::Stop;

/// Size of the worker pool and its queue.
#[derive(Clone, Debug)]
pub struct PoolConfig {
    /// Connections served at once (default 16).
    pub workers: usize,
    /// Accepted connections that may wait for a worker (default 64).
    pub queue: usize,
    /// Read/write timeout set on every accepted socket before a handler sees
    /// it (default 10 s); handlers may tighten it.
    pub socket_timeout: Duration,
    /// Connections one peer address may hold at once, served or queued
    /// (default: no limit); more are closed at once, so one peer cannot take
    /// the whole pool. Behind address translation many clients share one
    /// address: set it only where each client has its own.
    pub max_per_peer: usize,
    /// How long [`ServerHandle::stop`] lets open connections finish before
    /// it shuts them (default 2 s).
    pub stop_grace: Duration,
    /// What a connection must send before a worker takes it (default: none,
    /// every accepted connection goes to the queue at once).
    pub gate: Option<Gate>,
    /// When every worker is busy and the queue is full, a new connection
    /// takes the place of the one whose handler has waited longest for its
    /// peer's bytes (in a handshake, between calls or inside a frame), if
    /// that is at least this long (default 1 s; `None`: the new connection
    /// is closed instead). Handlers mark such waits with
    /// [`waiting_for_peer`](confboot_wire::waiting::waiting_for_peer); a handler at work (a key derived, an Init
    /// streaming its log) is never preempted. So peers that hold a
    /// connection and say nothing, or trickle, cannot keep a busy server
    /// from serving others.
    pub preempt_after: Option<Duration>,
}

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
/// opening (see the module documentation). Peers whose opening arrives at
/// once (every honest client) pass in the time of one wake-up of the accepting thread.
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
fn half_closed(stream: &TcpStream) -> bool {
    let rdhup = PollFlags::from_bits_retain(nix::libc::POLLRDHUP);
    let mut fds = [PollFd::new(stream.as_fd(), rdhup)];
    matches!(poll(&mut fds, PollTimeout::ZERO), Ok(n) if n > 0)
}

/// Connections the gate accepts in a row before it looks again at those it
/// holds (a burst of new ones must not evict one whose opening just came).
const GATE_ACCEPT_BATCH: usize = 32;

/// File descriptors a server with `config` holds at most for its
/// connections: two per connection (the socket, and the server's handle on
/// it to shut it at a stop), served, queued or at the gate.
pub fn descriptors_needed(config: &PoolConfig) -> u64 {
    let gate = config.gate.as_ref().map_or(0, |g| g.capacity.max(1));
    2 * (config.workers.max(1) + config.queue + gate) as u64
}

/// Makes room for the descriptors a server with `config` may hold
/// ([`descriptors_needed`]) beside `others` it keeps anyway: raises the soft
/// limit on open files (up to the hard limit) when it is too low, and where
/// even the hard limit is, lets fewer connections wait at the gate (with a
/// warning). A server out of descriptors cannot accept at all, so peers
/// holding connections would lock everyone else out.
pub fn fit_descriptors(config: &mut PoolConfig, others: u64) {
    use nix::sys::resource::{Resource, getrlimit, setrlimit};
    let want = descriptors_needed(config) + others;
    let Ok((soft, hard)) = getrlimit(Resource::RLIMIT_NOFILE) else {
        return;
    };
    let mut limit = soft;
    if soft < want {
        let raised = want.min(hard);
        if setrlimit(Resource::RLIMIT_NOFILE, raised, hard).is_ok() {
            limit = raised;
        }
    }
    if limit < want
        && let Some(gate) = config.gate.as_mut()
    {
        let fixed = others + 2 * (config.workers.max(1) + config.queue) as u64;
        let fits = (limit.saturating_sub(fixed) / 2).max(1) as usize;
        log::warn!(
            "open-file limit {limit}: {fits} connections may wait at the gate, not {}",
            gate.capacity
        );
        gate.capacity = fits;
    }
}

/// How often the gate looks again at a connection whose opening is complete
/// while every worker is busy and the queue is full (one that sent part of
/// its opening is looked at again when more bytes come).
const GATE_RECHECK: Duration = Duration::from_millis(20);
/// Longest single wait in the gate's poll, so it notices the stop signal.
const GATE_POLL_MAX: Duration = Duration::from_millis(250);

impl Default for PoolConfig {
    fn default() -> Self {
        PoolConfig {
            workers: 16,
            queue: 64,
            socket_timeout: Duration::from_secs(10),
            max_per_peer: usize::MAX,
            stop_grace: Duration::from_secs(2),
            gate: None,
            preempt_after: Some(Duration::from_secs(1)),
        }
    }
}

/// Since when a connection's handler waits for its peer's bytes, in
/// milliseconds after [`epoch`] plus one; 0 while it does not.
type Waiting = confboot_wire::waiting::WaitingMark;

/// One connection a server holds.
struct Open {
    peer: IpAddr,
    /// The server's handle on the socket, to shut it; taken only once the
    /// connection leaves the gate (the gate shuts those it holds itself).
    stream: Option<TcpStream>,
    waiting: Waiting,
}

/// The connections a server holds (served or queued), to count them per
/// peer, to preempt one whose handler waits for its peer, and to shut them
/// when the server stops.
#[derive(Default)]
struct OpenConnections {
    next_id: AtomicU64,
    by_id: Mutex<HashMap<u64, Open>>,
}

impl OpenConnections {
    fn lock(&self) -> MutexGuard<'_, HashMap<u64, Open>> {
        self.by_id.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Registers a connection from `peer` unless that peer holds `max`
    /// already, with a handle on `stream` when given (see [`Self::attach`]).
    fn admit(
        &self,
        peer: IpAddr,
        stream: Option<&TcpStream>,
        max: usize,
    ) -> Result<u64, AdmitError> {
        let clone = stream
            .map(TcpStream::try_clone)
            .transpose()
            .map_err(|_| AdmitError::Clone)?;
        let mut open = self.lock();
        if open.values().filter(|o| o.peer == peer).count() >= max {
            return Err(AdmitError::PeerFull);
        }
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        open.insert(
            id,
            Open {
                peer,
                stream: clone,
                waiting: Waiting::default(),
            },
        );
        Ok(id)
    }

    /// Keeps a handle on `stream`, registered as `id` without one, to shut
    /// it when it is preempted or the server stops.
    fn attach(&self, id: u64, stream: &TcpStream) -> Result<(), AdmitError> {
        let clone = stream.try_clone().map_err(|_| AdmitError::Clone)?;
        match self.lock().get_mut(&id) {
            Some(o) => {
                o.stream = Some(clone);
                Ok(())
            }
            None => Err(AdmitError::Clone),
        }
    }

    fn waiting(&self, id: u64) -> Option<Waiting> {
        self.lock().get(&id).map(|o| Arc::clone(&o.waiting))
    }

    fn remove(&self, id: u64) {
        self.lock().remove(&id);
    }

    fn is_empty(&self) -> bool {
        self.lock().is_empty()
    }

    /// Shuts the connection whose handler has waited longest for its peer,
    /// if that is `at_least`; returns its peer and how long it waited.
    fn preempt(&self, at_least: Duration) -> Option<(IpAddr, Duration)> {
        let open = self.lock();
        let now = confboot_wire::waiting::now_mark();
        let at_least = at_least.as_millis() as u64;
        let victim = open
            .values()
            .filter_map(|o| Some((o, o.stream.as_ref()?, o.waiting.load(Ordering::Relaxed))))
            .filter(|(_, _, since)| *since != 0 && now.saturating_sub(*since) >= at_least)
            .min_by_key(|(_, _, since)| *since)?;
        let (o, stream, since) = victim;
        // Not chosen twice: its worker is about to be free.
        o.waiting.store(0, Ordering::Relaxed);
        let _ = stream.shutdown(std::net::Shutdown::Both);
        Some((o.peer, Duration::from_millis(now - since)))
    }

    /// Shuts every open connection: blocked reads and writes end at once.
    fn shut_all(&self) -> usize {
        let open = self.lock();
        for stream in open.values().filter_map(|o| o.stream.as_ref()) {
            let _ = stream.shutdown(std::net::Shutdown::Both);
        }
        open.len()
    }
}

enum AdmitError {
    PeerFull,
    Clone,
}

/// Counters of a running server.
#[derive(Debug, Default)]
pub struct ServerStats {
    /// Connections accepted and handed to the pool.
    pub accepted: AtomicU64,
    /// Connections closed at once because the pool was full or their peer
    /// held its share of it.
    pub refused: AtomicU64,
    /// Connections whose handler returned.
    pub served: AtomicU64,
    /// Connections the gate closed before a worker saw them: no complete
    /// opening in time, an opening that cannot be valid, the peer gone,
    /// evicted for a newer connection (counted in `evicted` too), or no
    /// worker free in time (counted in `refused` too).
    pub gate_closed: AtomicU64,
    /// Connections the gate evicted because it was full.
    pub evicted: AtomicU64,
    /// Most connections waiting at the gate at once.
    pub gate_peak: AtomicU64,
    /// Connections shut, with every worker busy, because their handler had
    /// waited longest for their peer (see [`PoolConfig::preempt_after`]).
    pub preempted: AtomicU64,
}

/// A running server; [`ServerHandle::stop`] ends it.
pub struct ServerHandle {
    local_addr: SocketAddr,
    stop: Stop,
    stats: Arc<ServerStats>,
    open: Arc<OpenConnections>,
    stop_grace: Duration,
    acceptor: Option<JoinHandle<()>>,
    workers: Vec<JoinHandle<()>>,
}

/// Accepts connections on `listener` and runs `handler` for each on a pool
/// thread. The handler gets the socket (timeouts already set) and the stop
/// signal, which it should watch between calls.
pub fn spawn<H>(listener: TcpListener, config: PoolConfig, handler: H) -> io::Result<ServerHandle>
where
    H: Fn(TcpStream, &Stop) + Send + Sync + 'static,
{
    let local_addr = listener.local_addr()?;
    let stop = Stop::new();
    let stats = Arc::new(ServerStats::default());
    let handler = Arc::new(handler);
    let open = Arc::new(OpenConnections::default());
    // Room for one more per worker: a connection queued after its worker's
    // was preempted (see `Acceptor::dispatch`).
    let queue = Arc::new(HandOff::<(u64, TcpStream)>::new(
        config.queue + config.workers.max(1),
    ));

    if let Some(hold) = config.gate.as_ref().and_then(|g| g.defer_accept) {
        // Honest peers send their opening right after connecting: handed
        // over with it, they pass the gate in one look, with no watch added
        // and removed. A silent connection is held by the kernel for about
        // that long, then comes to the gate as before.
        let seconds = u32::try_from(hold.as_secs().max(1)).unwrap_or(u32::MAX);
        if let Err(e) = super::sockopt::defer_accept(&listener, seconds) {
            log::warn!("gate: TCP_DEFER_ACCEPT not set: {e}");
        }
    }
    let drop_half_closed = config.gate.as_ref().is_some_and(|g| g.drop_half_closed);
    let mut workers = Vec::with_capacity(config.workers);
    for i in 0..config.workers.max(1) {
        let rx = Arc::clone(&queue);
        let handler = Arc::clone(&handler);
        let stop = stop.clone();
        let stats = Arc::clone(&stats);
        let open = Arc::clone(&open);
        workers.push(
            std::thread::Builder::new()
                .name(format!("rpc-worker-{i}"))
                .spawn(move || {
                    while let Some((id, stream)) = rx.pop() {
                        if drop_half_closed && half_closed(&stream) {
                            stats.gate_closed.fetch_add(1, Ordering::Relaxed);
                        } else if !stop.is_raised() {
                            confboot_wire::waiting::set_serving(open.waiting(id));
                            handler(stream, &stop);
                            confboot_wire::waiting::set_serving(None);
                            stats.served.fetch_add(1, Ordering::Relaxed);
                        } // else drain: close queued connections unserved
                        open.remove(id);
                    }
                })?,
        );
    }

    let acceptor = {
        let accept = Acceptor {
            stop: stop.clone(),
            stats: Arc::clone(&stats),
            open: Arc::clone(&open),
            max_per_peer: config.max_per_peer.max(1),
            socket_timeout: config.socket_timeout,
            queue: config.queue,
            preempt_after: config.preempt_after,
            tx: queue,
        };
        let gate = config.gate.clone();
        std::thread::Builder::new()
            .name("rpc-accept".into())
            .spawn(move || match gate {
                None => accept.run(listener),
                Some(gate) => accept.run_gated(listener, &gate),
            })?
    };

    Ok(ServerHandle {
        local_addr,
        stop,
        stats,
        open,
        stop_grace: config.stop_grace,
        acceptor: Some(acceptor),
        workers,
    })
}

/// The accepting thread's state.
struct Acceptor {
    stop: Stop,
    stats: Arc<ServerStats>,
    open: Arc<OpenConnections>,
    max_per_peer: usize,
    socket_timeout: Duration,
    queue: usize,
    preempt_after: Option<Duration>,
    tx: Arc<HandOff<(u64, TcpStream)>>,
}

impl Drop for Acceptor {
    /// The accepting thread has ended: the workers end once the queue is
    /// empty.
    fn drop(&mut self) {
        self.tx.close();
    }
}

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

impl Acceptor {
    /// Peeks at a connection at the gate: queues it when its opening is
    /// complete and there is room (`unwatch` takes it off the gate's epoll
    /// instance first), closes it when the opening is invalid, too long or
    /// late, or the peer is gone; otherwise gives it back (to look again at
    /// it when more bytes come, or in [`GATE_RECHECK`] when it waits for
    /// room).
    fn look(
        &self,
        mut p: Pending,
        gate: &Gate,
        buf: &mut [u8],
        now: Instant,
        unwatch: &dyn Fn(&mut Pending),
    ) -> Option<Pending> {
        match peek_now(&p.stream, buf) {
            Ok(0) => self.drop_pending(p, "closed before its opening"),
            Ok(n) => match (gate.judge)(&buf[..n]) {
                // With every worker busy, it waits here (its time bounded
                // as before) until there is room.
                Opening::Complete if p.until <= now => {
                    self.stats.refused.fetch_add(1, Ordering::Relaxed);
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
                    unwatch(&mut p);
                    let handed = self.prepare(&p.stream).and_then(|_| {
                        self.open
                            .attach(p.id, &p.stream)
                            .map_err(|_| io::Error::other("no descriptor for its handle"))
                    });
                    match handed {
                        Ok(()) => match self.try_dispatch(p.id, p.stream) {
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

    /// Sets what a handler expects of its socket: no Nagle delay, and the
    /// server's read and write timeouts.
    fn prepare(&self, stream: &TcpStream) -> io::Result<()> {
        stream
            .set_nodelay(true)
            .and_then(|_| stream.set_read_timeout(Some(self.socket_timeout)))
            .and_then(|_| stream.set_write_timeout(Some(self.socket_timeout)))
    }

    /// Registers an accepted socket from `peer` (its peer's share allowing);
    /// `None` when it was refused and closed. Ungated, it is prepared for
    /// its handler at once; at the gate only once its opening is complete,
    /// so a connection the gate closes costs no more than its accept, a
    /// peek and its close.
    fn admit(&self, stream: TcpStream, peer: IpAddr, gated: bool) -> Option<(u64, TcpStream)> {
        if !gated && let Err(e) = self.prepare(&stream) {
            log::debug!("cannot prepare accepted socket: {e}");
            return None;
        }
        let handle = (!gated).then_some(&stream);
        match self.open.admit(peer, handle, self.max_per_peer) {
            Ok(id) => Some((id, stream)),
            Err(e) => {
                self.stats.refused.fetch_add(1, Ordering::Relaxed);
                if matches!(e, AdmitError::PeerFull) {
                    log::warn!(
                        "refusing connection from {peer}: it holds {} already",
                        self.max_per_peer
                    );
                }
                let _ = stream.shutdown(std::net::Shutdown::Both);
                None
            }
        }
    }

    /// While connections wait in the queue, shuts those (one per queued
    /// connection at most) whose handler has waited for its peer at least
    /// [`PoolConfig::preempt_after`], so the queue moves on.
    fn preempt_for_queued(&self) {
        let Some(after) = self.preempt_after else {
            return;
        };
        for _ in 0..self.tx.len() {
            match self.open.preempt(after) {
                Some((victim, waited)) => {
                    self.stats.preempted.fetch_add(1, Ordering::Relaxed);
                    log::warn!(
                        "connections queued: shut the connection from {victim}, which waited \
                         {} ms for its peer",
                        waited.as_millis()
                    );
                }
                None => return,
            }
        }
    }

    /// Hands a registered connection to the pool. When the queue is full,
    /// the connection whose handler has waited longest for its peer (at
    /// least [`PoolConfig::preempt_after`]) is shut to make room; when there
    /// is none, the connection is given back.
    fn try_dispatch(&self, id: u64, stream: TcpStream) -> Result<(), TcpStream> {
        if self.tx.len() >= self.queue {
            let preempted = self.preempt_after.and_then(|a| self.open.preempt(a));
            let Some((victim, waited)) = preempted else {
                return Err(stream);
            };
            self.stats.preempted.fetch_add(1, Ordering::Relaxed);
            log::warn!(
                "every worker busy: shut the connection from {victim}, which waited {} ms for \
                 its peer",
                waited.as_millis()
            );
        }
        match self.tx.try_push((id, stream)) {
            Ok(()) => {
                self.stats.accepted.fetch_add(1, Ordering::Relaxed);
                Ok(())
            }
            Err((_, (_, s))) => Err(s),
        }
    }

    /// Hands a registered connection to the pool, or closes it when there
    /// is no room.
    fn dispatch(&self, id: u64, stream: TcpStream, peer: IpAddr) {
        if let Err(s) = self.try_dispatch(id, stream) {
            self.open.remove(id);
            self.stats.refused.fetch_add(1, Ordering::Relaxed);
            log::warn!("refusing connection from {peer}: all workers busy");
            let _ = s.shutdown(std::net::Shutdown::Both);
        }
    }

    /// Closes a connection the gate drops. Nothing else holds it, so
    /// closing it is enough: one whose bytes were only peeked at is reset
    /// (a single packet, no orderly close for a peer that gets nothing).
    fn drop_pending(&self, p: Pending, why: &str) {
        log::debug!("gate: closing connection from {}: {why}", p.peer);
        self.stats.gate_closed.fetch_add(1, Ordering::Relaxed);
        self.open.remove(p.id);
        drop(p.stream);
    }

    /// Accepts and queues every connection at once.
    fn run(self, listener: TcpListener) {
        loop {
            let conn = listener.accept();
            if self.stop.is_raised() {
                break;
            }
            let (stream, peer) = match conn {
                Ok((s, addr)) => (s, addr.ip()),
                Err(e) => {
                    log::warn!("accept failed: {e}");
                    std::thread::sleep(Duration::from_millis(10));
                    continue;
                }
            };
            if let Some((id, stream)) = self.admit(stream, peer, false) {
                self.dispatch(id, stream, peer);
            }
        }
        // Dropping the acceptor closes the queue: the workers end once it is empty.
    }

    /// Accepts connections and keeps each at the gate until its opening is
    /// complete (then queues it), invalid, late or evicted (then closes it).
    /// Connections that have sent nothing yet are watched with `epoll(7)`,
    /// so a wake-up costs what is ready, not what is held.
    fn run_gated(self, listener: TcpListener, gate: &Gate) {
        let epoll = match Epoll::new(EpollCreateFlags::EPOLL_CLOEXEC) {
            Ok(e) => e,
            Err(e) => {
                log::error!("cannot create an epoll instance, serving without a gate: {e}");
                return self.run(listener);
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
            return self.run(listener);
        }
        // Watches a connection for more bytes, edge-triggered: one that
        // sent part of its opening stays readable while its bytes are only
        // peeked at, so only new bytes must wake the gate. It stays watched
        // until it leaves the gate (a close takes it off); one whose opening
        // is complete and that waits for room is looked at on a timer.
        let watch = |p: &mut Pending| {
            if !p.watched && !p.ready {
                let flags = EpollFlags::EPOLLIN | EpollFlags::EPOLLET;
                p.watched = epoll.add(&p.stream, EpollEvent::new(flags, p.id)).is_ok();
            }
        };
        let unwatch = |p: &mut Pending| {
            if p.watched {
                let _ = epoll.delete(&p.stream);
                p.watched = false;
            }
        };
        let mut pending = AtGate::with_capacity(gate.capacity.clamp(1, 4096));
        let mut buf = vec![0u8; gate.max_opening.max(1)];
        let mut events = vec![EpollEvent::empty(); 256];
        let mut due = Vec::new();
        while !self.stop.is_raised() {
            let now = Instant::now();
            let wake = pending
                .next_due()
                .map_or(GATE_POLL_MAX, |t| t.saturating_duration_since(now))
                .min(GATE_POLL_MAX);
            let ms = u16::try_from(wake.as_millis().max(1)).unwrap_or(u16::MAX);
            let n = match epoll.wait(&mut events, PollTimeout::from(ms)) {
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
                            && let Some(mut p) = self.look(p, gate, &mut buf, now, &unwatch)
                        {
                            watch(&mut p);
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
                if let Some(mut p) = self.look(p, gate, &mut buf, now, &unwatch) {
                    watch(&mut p);
                    pending.put_back(p);
                }
            }
            while let Some(p) = pending.take_expired(now) {
                // Its last look says why it goes (no opening, an
                // incomplete one, or no worker free in time).
                if let Some(p) = self.look(p, gate, &mut buf, now, &unwatch) {
                    self.drop_pending(p, "no complete opening in time");
                }
            }
            self.preempt_for_queued();

            if listener_ready {
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
                    if self.stop.is_raised() {
                        break;
                    }
                    let Some((id, stream)) = self.admit(stream, peer, true) else {
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
                    let Some(mut fresh) = self.look(fresh, gate, &mut buf, now, &unwatch) else {
                        continue;
                    };
                    // Full: the oldest that has not sent its whole opening
                    // goes (one that has, and waits for a worker, only when
                    // every one has).
                    if pending.len() >= gate.capacity.max(1)
                        && let Some(oldest) = pending.take_oldest()
                        && let Some(oldest) = self.look(oldest, gate, &mut buf, now, &unwatch)
                    {
                        self.stats.evicted.fetch_add(1, Ordering::Relaxed);
                        self.drop_pending(oldest, "evicted for a newer connection");
                    }
                    watch(&mut fresh);
                    pending.add(fresh);
                    self.stats
                        .gate_peak
                        .fetch_max(pending.len() as u64, Ordering::Relaxed);
                }
            }
        }
        for mut p in pending.drain() {
            unwatch(&mut p);
            let _ = p.stream.shutdown(std::net::Shutdown::Both);
            self.open.remove(p.id);
        }
        // Dropping the acceptor closes the queue: the workers end once it is empty.
    }
}

impl ServerHandle {
    /// The address the server listens on.
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// The server's counters.
    pub fn stats(&self) -> &ServerStats {
        &self.stats
    }

    /// A shared handle on the counters that outlives the server.
    pub fn stats_handle(&self) -> Arc<ServerStats> {
        Arc::clone(&self.stats)
    }

    /// The stop signal handlers watch.
    pub fn stop_signal(&self) -> &Stop {
        &self.stop
    }

    /// Stops accepting, lets in-flight calls finish and closes idle
    /// connections; connections still open after the grace period
    /// ([`PoolConfig::stop_grace`]: a slow or hostile peer) are shut. Waits
    /// for every thread.
    pub fn stop(mut self) {
        self.shutdown();
    }

    fn shutdown(&mut self) {
        self.stop.raise();
        // Wake the acceptor blocked in accept().
        let mut wake = self.local_addr;
        if wake.ip().is_unspecified() {
            wake.set_ip(match wake {
                SocketAddr::V4(_) => Ipv4Addr::LOCALHOST.into(),
                SocketAddr::V6(_) => Ipv6Addr::LOCALHOST.into(),
            });
        }
        let _ = TcpStream::connect_timeout(&wake, Duration::from_secs(1));
        if let Some(a) = self.acceptor.take() {
            let _ = a.join();
        }
        let grace_until = Instant::now() + self.stop_grace;
        while !self.open.is_empty() && Instant::now() < grace_until {
            std::thread::sleep(Duration::from_millis(10));
        }
        let shut = self.open.shut_all();
        if shut > 0 {
            log::info!("stopping: {shut} connection(s) still open after the grace period, shut");
        }
        for w in self.workers.drain(..) {
            let _ = w.join();
        }
    }
}

impl Drop for ServerHandle {
    fn drop(&mut self) {
        if self.acceptor.is_some() {
            self.shutdown();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn any_opening(_: &[u8]) -> Opening {
        Opening::Complete
    }

    #[test]
    fn a_gate_that_asks_for_it_defers_accepting_until_the_first_bytes() {
        let gated = |defer_accept| PoolConfig {
            gate: Some(Gate {
                judge: any_opening,
                max_opening: 16,
                timeout: Duration::from_secs(1),
                capacity: 4,
                drop_half_closed: false,
                defer_accept,
            }),
            ..PoolConfig::default()
        };
        for (config, deferred) in [
            (gated(Some(Duration::from_secs(1))), 1),
            (gated(None), 0),
            (PoolConfig::default(), 0),
        ] {
            let listener = TcpListener::bind("127.0.0.1:0").unwrap();
            let probe = listener.try_clone().unwrap();
            let handle = spawn(listener, config, |_, _| {}).unwrap();
            assert_eq!(
                super::super::sockopt::deferred_accept(&probe).unwrap(),
                deferred
            );
            handle.stop();
        }
    }
}
