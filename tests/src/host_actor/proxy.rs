//! The host on the network path: a TCP proxy between a node and its peer
//! (node and join service, admin's CLI and node) that relays honestly,
//! except for the connections it was told to tamper with, and keeps every
//! byte that crossed it, for the judge to search for secrets.

use std::collections::VecDeque;
use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How long any relayed connection may live, whatever it does.
const CONNECTION_LIFETIME: Duration = Duration::from_secs(60);
/// The most bytes the proxy keeps for the judge (older bytes are dropped).
const MAX_SEEN: usize = 16 << 20;
/// The most bytes of one recorded exchange kept for replays.
const MAX_RECORDED: usize = 1 << 20;

/// What the host does to one connection.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Tamper {
    /// Relays both ways, unchanged.
    Relay,
    /// Accepts and closes at once, sending nothing.
    Drop,
    /// Holds the connection this long before relaying.
    Delay(Duration),
    /// Relays the peer's answer one byte per interval.
    Trickle(Duration),
    /// Answers with the peer's bytes recorded from an earlier honest
    /// connection, never reaching the peer.
    Replay,
    /// Relays, but sends the peer's first two TLS records in swapped order.
    Reorder,
    /// Relays to this address instead of the peer (another node, or the
    /// host's own service answering first).
    RelayTo(SocketAddr),
}

struct State {
    target: Mutex<Option<SocketAddr>>,
    plans: Mutex<VecDeque<Tamper>>,
    seen: Mutex<Vec<u8>>,
    recorded: Mutex<Option<Vec<u8>>>,
    connections: AtomicUsize,
    active: AtomicUsize,
    stop: AtomicBool,
}

/// A proxy listening on loopback.
pub struct HostProxy {
    /// Where the proxy listens (what the node or CLI is told to call).
    pub addr: SocketAddr,
    state: Arc<State>,
    acceptor: Option<JoinHandle<()>>,
}

impl HostProxy {
    /// Starts a proxy with no peer yet (connections are closed until
    /// [`HostProxy::set_target`]).
    pub fn start() -> HostProxy {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind the proxy");
        let addr = listener.local_addr().unwrap();
        listener.set_nonblocking(true).unwrap();
        let state = Arc::new(State {
            target: Mutex::new(None),
            plans: Mutex::new(VecDeque::new()),
            seen: Mutex::new(Vec::new()),
            recorded: Mutex::new(None),
            connections: AtomicUsize::new(0),
            active: AtomicUsize::new(0),
            stop: AtomicBool::new(false),
        });
        let acceptor = {
            let state = Arc::clone(&state);
            std::thread::spawn(move || {
                while !state.stop.load(Ordering::Relaxed) {
                    match listener.accept() {
                        Ok((client, _)) => {
                            let _ = client.set_nonblocking(false);
                            state.connections.fetch_add(1, Ordering::Relaxed);
                            state.active.fetch_add(1, Ordering::Relaxed);
                            let plan = state.plans.lock().unwrap().pop_front();
                            let state = Arc::clone(&state);
                            std::thread::spawn(move || {
                                serve(&state, client, plan.unwrap_or(Tamper::Relay));
                                state.active.fetch_sub(1, Ordering::Relaxed);
                            });
                        }
                        Err(_) => std::thread::sleep(Duration::from_millis(5)),
                    }
                }
            })
        };
        HostProxy {
            addr,
            state,
            acceptor: Some(acceptor),
        }
    }

    /// Where honest connections go from now on.
    pub fn set_target(&self, target: SocketAddr) {
        *self.state.target.lock().unwrap() = Some(target);
    }

    /// The next connections (one each, in order) are tampered with so;
    /// later ones are relayed.
    pub fn tamper_next(&self, plans: &[Tamper]) {
        self.state
            .plans
            .lock()
            .unwrap()
            .extend(plans.iter().cloned());
    }

    /// Forgets the plans not used yet.
    pub fn clear_plans(&self) {
        self.state.plans.lock().unwrap().clear();
    }

    /// Connections accepted so far.
    pub fn connections(&self) -> usize {
        self.state.connections.load(Ordering::Relaxed)
    }

    /// Connections open now.
    pub fn active(&self) -> usize {
        self.state.active.load(Ordering::Relaxed)
    }

    /// Every byte that crossed the proxy (both directions, the last
    /// `MAX_SEEN`), and forgets them.
    pub fn take_seen(&self) -> Vec<u8> {
        std::mem::take(&mut *self.state.seen.lock().unwrap())
    }

    /// Whether an honest exchange was recorded (what [`Tamper::Replay`] sends).
    pub fn has_recording(&self) -> bool {
        self.state.recorded.lock().unwrap().is_some()
    }
}

impl Drop for HostProxy {
    fn drop(&mut self) {
        self.state.stop.store(true, Ordering::Relaxed);
        if let Some(a) = self.acceptor.take() {
            let _ = a.join();
        }
    }
}

fn keep(state: &State, bytes: &[u8]) {
    let mut seen = state.seen.lock().unwrap();
    seen.extend_from_slice(bytes);
    if seen.len() > MAX_SEEN {
        let excess = seen.len() - MAX_SEEN;
        seen.drain(..excess);
    }
}

fn serve(state: &Arc<State>, client: TcpStream, plan: Tamper) {
    let _ = client.set_read_timeout(Some(CONNECTION_LIFETIME));
    let _ = client.set_write_timeout(Some(CONNECTION_LIFETIME));
    let target = *state.target.lock().unwrap();
    match plan {
        Tamper::Drop => drop(client),
        Tamper::Replay => replay(state, client),
        Tamper::RelayTo(to) => relay(state, client, to, Pace::Whole, false),
        Tamper::Delay(d) => {
            std::thread::sleep(d);
            if let Some(t) = target {
                relay(state, client, t, Pace::Whole, false)
            }
        }
        Tamper::Trickle(interval) => {
            if let Some(t) = target {
                relay(state, client, t, Pace::Trickle(interval), false)
            }
        }
        Tamper::Reorder => {
            if let Some(t) = target {
                relay(state, client, t, Pace::SwapFirstRecords, false)
            }
        }
        Tamper::Relay => {
            if let Some(t) = target {
                relay(state, client, t, Pace::Whole, true)
            }
        }
    }
}

/// How the peer's answer is passed on.
#[derive(Clone, Copy)]
enum Pace {
    Whole,
    Trickle(Duration),
    SwapFirstRecords,
}

/// Sends the recorded answer of an earlier honest connection once the
/// client said something, then reads the client until it closes.
fn replay(state: &Arc<State>, mut client: TcpStream) {
    let recorded = state.recorded.lock().unwrap().clone().unwrap_or_default();
    let mut buf = [0u8; 4096];
    let deadline = Instant::now() + CONNECTION_LIFETIME;
    let _ = client.set_read_timeout(Some(Duration::from_secs(5)));
    if let Ok(n) = client.read(&mut buf) {
        keep(state, &buf[..n]);
    }
    let _ = client.write_all(&recorded);
    while Instant::now() < deadline {
        match client.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => keep(state, &buf[..n]),
        }
    }
}

/// Relays between `client` and `to`; `record` keeps the peer's answer as
/// the recording later replays use.
fn relay(state: &Arc<State>, client: TcpStream, to: SocketAddr, pace: Pace, record: bool) {
    let Ok(peer) = TcpStream::connect_timeout(&to, Duration::from_secs(5)) else {
        return;
    };
    let _ = peer.set_read_timeout(Some(CONNECTION_LIFETIME));
    let _ = peer.set_write_timeout(Some(CONNECTION_LIFETIME));
    let (c2, p2) = (client.try_clone().unwrap(), peer.try_clone().unwrap());
    let up = {
        let state = Arc::clone(state);
        std::thread::spawn(move || copy(&state, c2, p2, Pace::Whole, None))
    };
    let mut recording = record.then(Vec::new);
    copy(state, peer, client, pace, recording.as_mut());
    let _ = up.join();
    if let Some(r) = recording.filter(|r| !r.is_empty()) {
        *state.recorded.lock().unwrap() = Some(r);
    }
}

fn copy(
    state: &State,
    mut from: TcpStream,
    mut to: TcpStream,
    pace: Pace,
    mut record: Option<&mut Vec<u8>>,
) {
    let mut buf = [0u8; 16384];
    let started = Instant::now();
    let mut held: Vec<u8> = Vec::new();
    let mut swapped = !matches!(pace, Pace::SwapFirstRecords);
    while started.elapsed() < CONNECTION_LIFETIME {
        let n = match from.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        keep(state, &buf[..n]);
        if let Some(r) = record.as_deref_mut()
            && r.len() + n <= MAX_RECORDED
        {
            r.extend_from_slice(&buf[..n]);
        }
        let sent = match pace {
            Pace::Whole => to.write_all(&buf[..n]),
            Pace::Trickle(interval) => {
                let mut r = Ok(());
                for b in &buf[..n] {
                    std::thread::sleep(interval);
                    r = to.write_all(std::slice::from_ref(b));
                    if r.is_err() || started.elapsed() >= CONNECTION_LIFETIME {
                        break;
                    }
                }
                r
            }
            Pace::SwapFirstRecords if !swapped => {
                held.extend_from_slice(&buf[..n]);
                match split_two_records(&held) {
                    Some((first, second, rest)) => {
                        swapped = true;
                        let out = [second, first, rest].concat();
                        held.clear();
                        to.write_all(&out)
                    }
                    None => Ok(()),
                }
            }
            Pace::SwapFirstRecords => to.write_all(&buf[..n]),
        };
        if sent.is_err() {
            break;
        }
    }
    let _ = to.shutdown(Shutdown::Write);
    let _ = from.shutdown(Shutdown::Read);
}

/// The first two TLS records of `bytes` and what follows, once both are
/// complete.
fn split_two_records(bytes: &[u8]) -> Option<(&[u8], &[u8], &[u8])> {
    let record_len = |b: &[u8]| -> Option<usize> {
        (b.len() >= 5).then(|| 5 + u16::from_be_bytes([b[3], b[4]]) as usize)
    };
    let first = record_len(bytes)?;
    if bytes.len() < first {
        return None;
    }
    let second = record_len(&bytes[first..])?;
    if bytes.len() < first + second {
        return None;
    }
    Some((
        &bytes[..first],
        &bytes[first..first + second],
        &bytes[first + second..],
    ))
}
