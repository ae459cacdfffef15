//! Client side: sequential calls over one connection, each with a deadline.

use std::io::{self, Write};
use std::time::{Duration, Instant};
use zeroize::Zeroizing;

use confboot_proto::Method;
use prost::Message;

use super::frame::{self, FrameError, FrameKind};
use super::transport::ByDeadline;
use super::{Code, Status, Transport};

/// Makes calls over one connection, one after another.
///
/// Every read and write is bounded by the call's deadline, an absolute one:
/// all of them together, down to each read and write of the socket under a
/// TLS stream when that socket holds deadlines ([`crate::DeadlineSocket`];
/// aTLS streams do). After a failure
/// that may leave the stream in the middle of a call (deadline, broken
/// stream, protocol error) the client refuses further calls with UNAVAILABLE:
/// open a new connection.
pub struct Client<T: Transport> {
    stream: T,
    max_frame_len: u32,
    broken: Option<String>,
}

impl<T: Transport> Client<T> {
    /// A client over an established stream.
    pub fn new(stream: T) -> Client<T> {
        Client {
            stream,
            max_frame_len: frame::DEFAULT_MAX_FRAME_LEN,
            broken: None,
        }
    }

    /// Sets the largest response frame accepted (default 4 MiB).
    pub fn with_max_frame_len(mut self, max: u32) -> Client<T> {
        self.max_frame_len = max;
        self
    }

    /// The underlying stream.
    pub fn get_ref(&self) -> &T {
        &self.stream
    }

    /// Gives the stream back.
    pub fn into_inner(self) -> T {
        self.stream
    }

    /// Makes a unary call: one request, one response.
    pub fn unary<Req: Message, Resp: Message + Default>(
        &mut self,
        method: Method<Req, Resp>,
        request: &Req,
        timeout: Duration,
    ) -> Result<Resp, Status> {
        let mut response = None;
        self.server_streaming(method, request, timeout, |m: Resp| {
            if response.replace(m).is_some() {
                return Err(Status::internal(
                    "unary call answered with more than one message",
                ));
            }
            Ok(())
        })?;
        response.ok_or_else(|| Status::internal("unary call answered with no message"))
    }

    /// Makes a server-streaming call: `on_message` sees each response message
    /// in order; the result is the call's final status. An error returned by
    /// `on_message` ends the call (and the connection).
    pub fn server_streaming<Req: Message, Resp: Message + Default>(
        &mut self,
        method: Method<Req, Resp>,
        request: &Req,
        timeout: Duration,
        mut on_message: impl FnMut(Resp) -> Result<(), Status>,
    ) -> Result<(), Status> {
        if let Some(why) = &self.broken {
            return Err(Status::unavailable(format!(
                "connection unusable after an earlier error: {why}"
            )));
        }
        let deadline = Instant::now() + timeout;
        match self.call(method.path(), request, deadline, &mut on_message) {
            Ok(Ok(())) => Ok(()),
            // A trailer from the server leaves the stream at a call boundary.
            Ok(Err(server_status)) => Err(server_status),
            Err(local) => {
                self.broken = Some(local.to_string());
                Err(local)
            }
        }
    }

    fn call<Req: Message, Resp: Message + Default>(
        &mut self,
        method: &str,
        request: &Req,
        deadline: Instant,
        on_message: &mut dyn FnMut(Resp) -> Result<(), Status>,
    ) -> Result<Result<(), Status>, Status> {
        let header = confboot_proto::rpc::CallHeader {
            method: method.to_string(),
            timeout_ms: remaining(deadline)?.as_millis().max(1) as u64,
        };
        // Requests carry secrets (an init secret, a master secret in a URI):
        // every buffer that held one is zeroized when dropped.
        let mut out = Zeroizing::new(Vec::new());
        frame::write_frame(&mut *out, FrameKind::Message, &header.encode_to_vec())
            .map_err(send_err)?;
        frame::write_frame(
            &mut *out,
            FrameKind::Message,
            &Zeroizing::new(request.encode_to_vec()),
        )
        .map_err(send_err)?;
        // Every read and write of the call, down to the socket's, ends by
        // its deadline, however the server paces its bytes or its reading.
        let mut stream = ByDeadline {
            stream: &mut self.stream,
            deadline,
        };
        stream.write_all(&out).map_err(send_err)?;
        stream.flush().map_err(send_err)?;

        loop {
            let f = frame::read_frame(&mut stream, self.max_frame_len).map_err(recv_err)?;
            match f.kind {
                FrameKind::Message => {
                    let m = Resp::decode(&f.payload[..])
                        .map_err(|e| Status::internal(format!("cannot decode response: {e}")))?;
                    on_message(m)?;
                }
                FrameKind::Trailer => {
                    let s = confboot_proto::rpc::Status::decode(&f.payload[..])
                        .map_err(|e| Status::internal(format!("cannot decode trailer: {e}")))?;
                    let s = Status::from_proto(s);
                    return Ok(match s.code {
                        Code::Ok => Ok(()),
                        _ => Err(s),
                    });
                }
            }
        }
    }
}

fn remaining(deadline: Instant) -> Result<Duration, Status> {
    let left = deadline.saturating_duration_since(Instant::now());
    if left.is_zero() {
        Err(Status::deadline_exceeded("deadline exceeded"))
    } else {
        Ok(left)
    }
}

/// Whether the TLS peer ended the connection with an `access_denied` alert:
/// an aTLS server that refused this client's attestation does so.
fn peer_denied_access(e: &io::Error) -> bool {
    e.get_ref()
        .and_then(|inner| inner.downcast_ref::<rustls::Error>())
        .is_some_and(|r| {
            matches!(
                r,
                rustls::Error::AlertReceived(rustls::AlertDescription::AccessDenied)
            )
        })
}

fn denied() -> Status {
    Status::permission_denied("the server refused this client's attestation")
}

fn send_err(e: io::Error) -> Status {
    if peer_denied_access(&e) {
        denied()
    } else if frame::is_timeout(&e) {
        Status::deadline_exceeded("deadline exceeded while sending")
    } else {
        Status::unavailable(format!("cannot send request: {e}"))
    }
}

fn recv_err(e: FrameError) -> Status {
    match e {
        FrameError::Timeout => {
            Status::deadline_exceeded("deadline exceeded waiting for the response")
        }
        FrameError::Io(e) if peer_denied_access(&e) => denied(),
        FrameError::Eof | FrameError::Truncated { .. } | FrameError::Io(_) => {
            Status::unavailable(format!("connection lost: {e}"))
        }
        FrameError::TooLarge { .. } => {
            Status::new(Code::ResourceExhausted, format!("response refused: {e}"))
        }
        FrameError::BadFlags(_) => Status::internal(format!("protocol error: {e}")),
    }
}
