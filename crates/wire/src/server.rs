//! Server side of a connection: read a call, dispatch it by method path,
//! write the responses and the trailer; call after call until the peer
//! closes, goes idle, breaks the protocol, or the server stops.

use std::collections::HashMap;
use std::io;
use std::marker::PhantomData;
use std::time::{Duration, Instant};
use zeroize::Zeroizing;

use confboot_proto::Method;
use prost::Message;

use super::frame::{self, FrameError, FrameKind, HEADER_LEN};
use super::{Code, Status, Transport};
use confboot_util::stop::Stop;

/// Limits one connection is served under.
#[derive(Clone, Debug)]
pub struct ServerLimits {
    /// Largest frame payload accepted (default 4 MiB).
    pub max_frame_len: u32,
    /// How long a connection may sit between calls (default 30 s).
    pub idle_timeout: Duration,
    /// Bound on each read inside a call, and on sending each answer or
    /// streamed message: all its writes together when the stream holds
    /// deadlines (aTLS), else each write (default 10 s).
    pub io_timeout: Duration,
    /// Deadline of a call whose header names none (default 30 s).
    pub default_call_timeout: Duration,
    /// Cap on the deadline a caller may ask for (default 10 min).
    pub max_call_timeout: Duration,
    /// How often an idle connection looks at the stop signal (default 100 ms).
    pub stop_poll: Duration,
    /// Bound on reading a whole frame, from its first byte to its last: the
    /// call header, and the request (within the call's deadline too). A
    /// peer that trickles bytes is cut off when it passes (default 10 s).
    pub frame_timeout: Duration,
    /// Calls served on one connection before it is closed (`None`: no
    /// limit). A service that admits per connection sets 1, so every
    /// admission is checked against the policy of its time. The last
    /// call's answer ends the stream ([`Transport::write_last`]: over TLS
    /// with its close_notify, in the same write).
    pub max_calls_per_connection: Option<u32>,
    /// Age after which a connection takes no further call (`None`: no limit).
    pub max_connection_age: Option<Duration>,
}

/// Largest call header accepted (a method path and a deadline need far less).
pub const MAX_CALL_HEADER_LEN: u32 = 4 * 1024;

impl Default for ServerLimits {
    fn default() -> Self {
        ServerLimits {
            max_frame_len: frame::DEFAULT_MAX_FRAME_LEN,
            idle_timeout: Duration::from_secs(30),
            io_timeout: Duration::from_secs(10),
            default_call_timeout: Duration::from_secs(30),
            max_call_timeout: Duration::from_secs(600),
            stop_poll: Duration::from_millis(100),
            frame_timeout: Duration::from_secs(10),
            max_calls_per_connection: None,
            max_connection_age: None,
        }
    }
}

/// What a handler knows about the call it serves, and about the caller:
/// `peer`, of the type `P` the connection's security layer establishes
/// (the router's, [`Router<P>`]): `()` when it establishes nothing (plain
/// streams, a server whose clients do not attest); for aTLS with client
/// attestation, the caller's attested measurements and the sealing key its
/// evidence bound. A handler asks for a fact its connections do not
/// establish only by naming a field its peer type does not have, which
/// does not compile:
///
/// ```compile_fail
/// use confboot_wire::Router;
/// use confboot_proto::health::HealthCheckResponse;
///
/// // A router for connections that establish nothing about the caller.
/// let router: Router<()> = Router::new().unary(confboot_proto::HEALTH_CHECK, |ctx, _req| {
///     let _measurements = &ctx.peer().measurements; // `()` has no such field
///     Ok(HealthCheckResponse { status: 1 })
/// });
/// ```
pub struct CallContext<'p, P> {
    method: String,
    deadline: Instant,
    stop: Stop,
    peer: &'p P,
}

impl<P> std::fmt::Debug for CallContext<'_, P> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CallContext")
            .field("method", &self.method)
            .field("deadline", &self.deadline)
            .field("peer", &std::any::type_name::<P>())
            .finish_non_exhaustive()
    }
}

impl<P> CallContext<'_, P> {
    /// The method path, e.g. `/join.API/IssueJoinTicket`.
    pub fn method(&self) -> &str {
        &self.method
    }

    /// When the caller stops waiting.
    pub fn deadline(&self) -> Instant {
        self.deadline
    }

    /// Time left before the deadline (zero once passed).
    pub fn remaining(&self) -> Duration {
        self.deadline.saturating_duration_since(Instant::now())
    }

    /// Whether the deadline has passed; long handlers should check and give up.
    pub fn expired(&self) -> bool {
        Instant::now() >= self.deadline
    }

    /// Whether the server is stopping (in-flight calls may still finish).
    pub fn stopping(&self) -> bool {
        self.stop.is_raised()
    }

    /// What the connection's handshake established about the caller
    /// (shared by the connection's calls).
    pub fn peer(&self) -> &P {
        self.peer
    }
}

/// Sends the messages of a server-streaming response.
pub struct ResponseSink<'a, Resp> {
    send: &'a mut dyn FnMut(&[u8]) -> io::Result<()>,
    _resp: PhantomData<fn(&Resp)>,
}

impl<Resp: Message> ResponseSink<'_, Resp> {
    /// Sends one message; an error means the caller is gone and the handler should end.
    pub fn send(&mut self, message: &Resp) -> Result<(), Status> {
        (self.send)(&Zeroizing::new(message.encode_to_vec()))
            .map_err(|e| Status::unavailable(format!("cannot send response: {e}")))
    }
}

/// A method's handler: takes the call and its encoded request, sends any
/// streamed messages through the sink, and returns a unary call's response
/// (encoded) for the server to send with the trailer.
type Handler<P> = Box<
    dyn Fn(
            &CallContext<'_, P>,
            &[u8],
            &mut dyn FnMut(&[u8]) -> io::Result<()>,
        ) -> Result<Option<Zeroizing<Vec<u8>>>, Status>
        + Send
        + Sync,
>;

/// Dispatches calls by method path to typed handlers, on connections
/// whose security layer establishes a peer of type `P` about each caller
/// ([`CallContext::peer`]; `()`: nothing).
pub struct Router<P = ()> {
    routes: HashMap<String, Handler<P>>,
}

impl<P> Default for Router<P> {
    fn default() -> Self {
        Router {
            routes: HashMap::new(),
        }
    }
}

fn decode<Req: Message + Default>(bytes: &[u8]) -> Result<Req, Status> {
    Req::decode(bytes).map_err(|e| Status::invalid_argument(format!("cannot decode request: {e}")))
}

impl<P: 'static> Router<P> {
    /// A router with no methods.
    pub fn new() -> Router<P> {
        Router::default()
    }

    /// Adds a unary method: one request, one response.
    pub fn unary<Req, Resp, F>(mut self, method: Method<Req, Resp>, handler: F) -> Router<P>
    where
        Req: Message + Default,
        Resp: Message,
        F: Fn(&CallContext<'_, P>, Req) -> Result<Resp, Status> + Send + Sync + 'static,
    {
        self.routes.insert(
            method.path().to_string(),
            Box::new(move |ctx, req, _send| {
                let resp = handler(ctx, decode(req)?)?;
                if ctx.expired() {
                    return Err(Status::deadline_exceeded(
                        "handler finished after the deadline",
                    ));
                }
                // Responses carry keys (tickets): zeroized once sent. The
                // server sends it with the trailer, in one write.
                Ok(Some(Zeroizing::new(resp.encode_to_vec())))
            }),
        );
        self
    }

    /// Adds a server-streaming method: one request, any number of responses.
    pub fn server_streaming<Req, Resp, F>(
        mut self,
        method: Method<Req, Resp>,
        handler: F,
    ) -> Router<P>
    where
        Req: Message + Default,
        Resp: Message,
        F: Fn(&CallContext<'_, P>, Req, &mut ResponseSink<'_, Resp>) -> Result<(), Status>
            + Send
            + Sync
            + 'static,
    {
        self.routes.insert(
            method.path().to_string(),
            Box::new(move |ctx, req, send| {
                let req = decode(req)?;
                handler(
                    ctx,
                    req,
                    &mut ResponseSink {
                        send,
                        _resp: PhantomData,
                    },
                )?;
                Ok(None)
            }),
        );
        self
    }

    /// The method paths this router serves, sorted.
    pub fn methods(&self) -> Vec<&str> {
        let mut m: Vec<&str> = self.routes.keys().map(|s| s.as_str()).collect();
        m.sort_unstable();
        m
    }
}

/// Why [`serve_connection`] returned.
#[derive(Debug)]
pub enum ConnectionEnd {
    /// The peer closed the connection between calls.
    Closed,
    /// No call came within the idle timeout.
    Idle,
    /// The server is stopping.
    Stopped,
    /// The connection served its last call ([`ServerLimits::max_calls_per_connection`]
    /// or [`ServerLimits::max_connection_age`]).
    Spent,
    /// The peer broke the protocol; it was told why (a status of this
    /// violation's text) when possible.
    ProtocolError(Violation),
    /// Reading or writing failed.
    Io(StreamFailure),
}

/// Which frame of a call was being read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CallPart {
    /// The call header (method and deadline).
    Header,
    /// The request message.
    Request,
}

impl std::fmt::Display for CallPart {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            CallPart::Header => "call header",
            CallPart::Request => "request",
        })
    }
}

/// How the peer broke the protocol (the text is the status it was sent).
#[derive(Debug, thiserror::Error)]
pub enum Violation {
    /// A frame of a call was refused from its header: too large, or flags
    /// that are neither message nor trailer.
    #[error("{part}: {error}")]
    Frame {
        /// The frame.
        part: CallPart,
        /// What is wrong with it.
        error: FrameError,
    },
    /// The call header is not a header naming a method path.
    #[error("malformed call header")]
    MalformedCallHeader,
    /// The request is a trailer, not a message frame.
    #[error("request must be a message frame")]
    RequestNotAMessage,
}

/// How reading or writing a connection failed.
#[derive(Debug, thiserror::Error)]
pub enum StreamFailure {
    /// A frame of a call did not come whole: cut short, past its deadline,
    /// or the stream failed.
    #[error("{part}: {error}")]
    Frame {
        /// The frame.
        part: CallPart,
        /// Why it did not come.
        error: FrameError,
    },
    /// Waiting for a call, setting the timeouts or sending the answer failed.
    #[error("{0}")]
    Stream(#[source] io::Error),
}

/// Serves calls on one connection until it ends. Returns why it ended.
pub fn serve_connection<T: Transport + ?Sized>(
    stream: &mut T,
    router: &Router,
    limits: &ServerLimits,
    stop: &Stop,
) -> ConnectionEnd {
    serve_connection_as(stream, router, limits, stop, &())
}

/// Like [`serve_connection`], for a connection whose handshake established
/// `peer` about the caller; every handler sees it as [`CallContext::peer`].
pub fn serve_connection_as<T: Transport + ?Sized, P>(
    stream: &mut T,
    router: &Router<P>,
    limits: &ServerLimits,
    stop: &Stop,
    peer: &P,
) -> ConnectionEnd {
    let opened = Instant::now();
    let mut calls: u32 = 0;
    loop {
        let first = match wait_for_call(stream, limits, stop) {
            Ok(b) => b,
            Err(end) => return end,
        };
        // The last call a connection may make ends it with its answer.
        let last = limits
            .max_calls_per_connection
            .is_some_and(|max| calls.saturating_add(1) >= max);
        match serve_call(stream, first, router, limits, stop, peer, last) {
            Ok(()) => {}
            Err(end) => return end,
        }
        if stop.is_raised() {
            return ConnectionEnd::Stopped;
        }
        calls = calls.saturating_add(1);
        let spent = limits
            .max_calls_per_connection
            .is_some_and(|max| calls >= max)
            || limits
                .max_connection_age
                .is_some_and(|age| opened.elapsed() >= age);
        if spent {
            return ConnectionEnd::Spent;
        }
    }
}

/// Reads from a stream before an absolute deadline: each read is bounded
/// by what is left of it and by the per-read timeout (and polls the stop
/// signal), so a peer that sends one byte at a time is cut off when the
/// deadline passes, however often it sends; a raised stop signal ends the
/// read too. Over TLS this holds when the socket under the TLS stream
/// holds deadlines ([`crate::DeadlineSocket`], as under every aTLS stream).
pub struct ReadBefore<'a, T: ?Sized> {
    /// The stream read from.
    pub stream: &'a mut T,
    /// When the reading must be over.
    pub deadline: Instant,
    /// The longest one read may take.
    pub per_read: Duration,
    /// Ends the reading when raised.
    pub stop: &'a Stop,
    /// How often a blocked read looks at `stop`.
    pub poll: Duration,
}

impl<T: Transport + ?Sized> io::Read for ReadBefore<'_, T> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let until = self.deadline.min(Instant::now() + self.per_read);
        loop {
            if self.stop.is_raised() {
                return Err(io::Error::other("the server is stopping"));
            }
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    "the frame did not arrive whole before its deadline, or stalled",
                ));
            }
            // A deadline, not a timeout: over TLS on a socket that holds
            // deadlines (aTLS), one read of the stream may read the socket
            // once per byte of a record, and each of those reads ends by it.
            self.stream
                .set_read_deadline(Some(Instant::now() + left.min(self.poll)))?;
            match self.stream.read(buf) {
                // A timed-out read consumed nothing (rustls keeps what it
                // buffered), so it is safe to read again.
                Err(e) if frame::is_timeout(&e) || e.kind() == io::ErrorKind::Interrupted => {}
                other => return other,
            }
        }
    }
}

/// Waits for the first byte of the next call, looking at the stop signal
/// while idle (the same bounded reader as a frame's, with the idle timeout
/// as its deadline). Only a whole-byte read is attempted, so a timeout never
/// cuts a frame.
fn wait_for_call<T: Transport + ?Sized>(
    stream: &mut T,
    limits: &ServerLimits,
    stop: &Stop,
) -> Result<u8, ConnectionEnd> {
    let mut idle = ReadBefore {
        stream,
        deadline: Instant::now() + limits.idle_timeout,
        per_read: limits.idle_timeout,
        stop,
        poll: limits.stop_poll,
    };
    let mut byte = [0u8; 1];
    match io::Read::read(&mut idle, &mut byte) {
        Ok(0) => Err(ConnectionEnd::Closed),
        Ok(_) => Ok(byte[0]),
        Err(_) if stop.is_raised() => Err(ConnectionEnd::Stopped),
        Err(e) if frame::is_timeout(&e) => Err(ConnectionEnd::Idle),
        Err(e) => Err(ConnectionEnd::Io(StreamFailure::Stream(e))),
    }
}

fn read_rest_of_frame<R: io::Read + ?Sized>(
    stream: &mut R,
    first: u8,
    max_len: u32,
) -> Result<frame::Frame, FrameError> {
    let mut header = [first, 0, 0, 0, 0];
    let mut got = 1;
    while got < HEADER_LEN {
        match stream.read(&mut header[got..]) {
            Ok(0) => {
                return Err(FrameError::Truncated {
                    wanted: HEADER_LEN,
                    got,
                });
            }
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e.into()),
        }
    }
    frame::read_frame_body(stream, header, max_len)
}

/// Sends a trailer alone (a refusal, a malformed call).
fn send_trailer<T: Transport + ?Sized>(
    stream: &mut T,
    status: &Status,
    limits: &ServerLimits,
) -> io::Result<()> {
    send_answer(stream, None, status, false, limits)
}

/// Tells the peer what it did wrong (best effort) and ends the connection.
fn refuse<T: Transport + ?Sized>(
    stream: &mut T,
    error: FrameError,
    part: CallPart,
    limits: &ServerLimits,
) -> ConnectionEnd {
    log::debug!("rpc: ending connection: {part}: {error}");
    let code = match &error {
        FrameError::TooLarge { .. } => Code::ResourceExhausted,
        FrameError::BadFlags(_) => Code::InvalidArgument,
        _ => return ConnectionEnd::Io(StreamFailure::Frame { part, error }),
    };
    let violation = Violation::Frame { part, error };
    let _ = send_trailer(stream, &Status::new(code, violation.to_string()), limits);
    ConnectionEnd::ProtocolError(violation)
}

/// Tells the peer how it broke the protocol (best effort) and ends the
/// connection.
fn refuse_call<T: Transport + ?Sized>(
    stream: &mut T,
    violation: Violation,
    limits: &ServerLimits,
) -> ConnectionEnd {
    let _ = send_trailer(
        stream,
        &Status::invalid_argument(violation.to_string()),
        limits,
    );
    ConnectionEnd::ProtocolError(violation)
}

fn serve_call<T: Transport + ?Sized, P>(
    stream: &mut T,
    first: u8,
    router: &Router<P>,
    limits: &ServerLimits,
    stop: &Stop,
    peer: &P,
    last: bool,
) -> Result<(), ConnectionEnd> {
    let io_err = |e: io::Error| ConnectionEnd::Io(StreamFailure::Stream(e));
    stream
        .set_read_timeout(Some(limits.io_timeout))
        .map_err(io_err)?;
    stream
        .set_write_timeout(Some(limits.io_timeout))
        .map_err(io_err)?;

    let frame_deadline = Instant::now() + limits.frame_timeout;
    let header_frame = read_rest_of_frame(
        &mut ReadBefore {
            stream: &mut *stream,
            deadline: frame_deadline,
            per_read: limits.io_timeout,
            stop,
            poll: limits.stop_poll,
        },
        first,
        MAX_CALL_HEADER_LEN.min(limits.max_frame_len),
    )
    .map_err(|e| refuse(stream, e, CallPart::Header, limits))?;
    let header = match header_frame.kind {
        FrameKind::Message => {
            confboot_proto::rpc::CallHeader::decode(&header_frame.payload[..]).ok()
        }
        FrameKind::Trailer => None,
    };
    let Some(header) = header.filter(|h| h.method.starts_with('/') && h.method.len() <= 256) else {
        return Err(refuse_call(stream, Violation::MalformedCallHeader, limits));
    };
    let timeout = match header.timeout_ms {
        0 => limits.default_call_timeout,
        ms => Duration::from_millis(ms).min(limits.max_call_timeout),
    };
    let ctx = CallContext {
        method: header.method,
        deadline: Instant::now() + timeout,
        stop: stop.clone(),
        peer,
    };

    let request = frame::read_frame(
        &mut ReadBefore {
            stream: &mut *stream,
            deadline: ctx.deadline.min(Instant::now() + limits.frame_timeout),
            per_read: limits.io_timeout,
            stop,
            poll: limits.stop_poll,
        },
        limits.max_frame_len,
    )
    .map_err(|e| refuse(stream, e, CallPart::Request, limits))?;
    if request.kind != FrameKind::Message {
        return Err(refuse_call(stream, Violation::RequestNotAMessage, limits));
    }

    let started = Instant::now();
    let (status, response) = match router.routes.get(ctx.method()) {
        None => (
            Status::new(
                Code::Unimplemented,
                format!("unknown method {}", ctx.method()),
            ),
            None,
        ),
        Some(handler) => {
            let mut send = |payload: &[u8]| -> io::Result<()> {
                stream.set_write_deadline(Some(Instant::now() + limits.io_timeout))?;
                frame::write_frame(&mut *stream, FrameKind::Message, payload)?;
                stream.flush()
            };
            match handler(&ctx, &request.payload, &mut send) {
                Ok(_) if ctx.expired() => (
                    Status::deadline_exceeded("deadline passed before the call finished"),
                    None,
                ),
                Ok(response) => (Status::ok(), response),
                Err(s) => (s, None),
            }
        }
    };
    log::debug!(
        "rpc: {} -> {} in {:.1} ms",
        ctx.method(),
        status.code.name(),
        started.elapsed().as_secs_f64() * 1000.0
    );
    send_answer(
        stream,
        response.as_deref().map(Vec::as_slice),
        &status,
        last,
        limits,
    )
    .map_err(io_err)
}

/// Sends a call's answer: a unary call's response, if there is one, and the
/// trailer, in one write (over TLS one record and one system call); on the
/// connection's last call ([`ServerLimits::max_calls_per_connection`]) as
/// its last bytes ([`Transport::write_last`]). All of it is sent within
/// [`ServerLimits::io_timeout`] (over a stream that holds deadlines; else
/// each write), however slowly the peer reads.
fn send_answer<T: Transport + ?Sized>(
    stream: &mut T,
    response: Option<&[u8]>,
    status: &Status,
    last: bool,
    limits: &ServerLimits,
) -> io::Result<()> {
    let trailer = status.to_proto().encode_to_vec();
    let mut answer = Zeroizing::new(Vec::with_capacity(
        2 * frame::HEADER_LEN + response.map_or(0, <[u8]>::len) + trailer.len(),
    ));
    if let Some(response) = response {
        frame::write_frame(&mut *answer, FrameKind::Message, response)?;
    }
    frame::write_frame(&mut *answer, FrameKind::Trailer, &trailer)?;
    stream.set_write_deadline(Some(Instant::now() + limits.io_timeout))?;
    if last {
        stream.write_last(&answer)
    } else {
        stream.write_all(&answer)?;
        stream.flush()
    }
}
