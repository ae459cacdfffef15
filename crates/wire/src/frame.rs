//! Frames: `flags:u8 length:u32-be payload[length]`.
//!
//! [`read_frame`] checks the length against the limit before it allocates,
//! and grows its buffer only as bytes arrive, so a peer that announces a
//! large frame and sends nothing costs nothing.
// Every length and offset here comes from the host (a disk, a datagram,
// a socket): a cast that could truncate, wrap or drop a sign is refused
// at compile time, so each conversion is checked where it happens.
#![deny(
    clippy::cast_possible_truncation,
    clippy::cast_sign_loss,
    clippy::cast_possible_wrap,
    clippy::cast_lossless
)]

use std::io::{self, Read, Write};
use zeroize::{Zeroize, Zeroizing};

/// Flags of a message frame.
pub const FLAG_MESSAGE: u8 = 0x00;
/// Flags of a trailer frame (payload is a `Status`).
pub const FLAG_TRAILER: u8 = 0x80;
/// Default largest payload accepted: 4 MiB.
pub const DEFAULT_MAX_FRAME_LEN: u32 = 4 << 20;
/// Bytes of a frame header.
pub const HEADER_LEN: usize = 5;

/// What a frame carries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FrameKind {
    /// A protobuf message.
    Message,
    /// The call's final status.
    Trailer,
}

/// One frame. Its payload is zeroized when the frame is dropped: messages
/// carry keys (tickets, master secrets in URIs).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Frame {
    /// Message or trailer.
    pub kind: FrameKind,
    /// The payload bytes.
    pub payload: Vec<u8>,
}

impl Drop for Frame {
    fn drop(&mut self) {
        self.payload.zeroize();
    }
}

/// Why a frame could not be read.
#[derive(Debug, thiserror::Error)]
pub enum FrameError {
    /// The stream ended cleanly before a frame started.
    #[error("connection closed")]
    Eof,
    /// The stream ended inside a frame.
    #[error("connection closed inside a frame ({got} of {wanted} bytes)")]
    Truncated {
        /// Bytes the frame needed.
        wanted: usize,
        /// Bytes that came.
        got: usize,
    },
    /// The announced payload is larger than the limit; nothing was allocated.
    #[error("frame of {len} bytes exceeds the limit of {max}")]
    TooLarge {
        /// Announced length.
        len: u32,
        /// The limit.
        max: u32,
    },
    /// The flags byte is neither message nor trailer.
    #[error("invalid frame flags 0x{0:02x}")]
    BadFlags(u8),
    /// A read or write timed out.
    #[error("timed out")]
    Timeout,
    /// Another I/O error.
    #[error("I/O error: {0}")]
    Io(io::Error),
}

impl From<io::Error> for FrameError {
    fn from(e: io::Error) -> Self {
        if is_timeout(&e) {
            FrameError::Timeout
        } else {
            FrameError::Io(e)
        }
    }
}

/// Whether an I/O error is a socket timeout.
pub fn is_timeout(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
    )
}

/// Reads into `buf` until it is full or the stream ends; returns the count.
fn read_full<R: Read + ?Sized>(r: &mut R, buf: &mut [u8]) -> Result<usize, FrameError> {
    let mut n = 0;
    while n < buf.len() {
        match r.read(&mut buf[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(n)
}

/// Parses a frame header: kind and payload length, checked against `max_len`.
pub fn parse_header(
    header: [u8; HEADER_LEN],
    max_len: u32,
) -> Result<(FrameKind, u32), FrameError> {
    let kind = match header[0] {
        FLAG_MESSAGE => FrameKind::Message,
        FLAG_TRAILER => FrameKind::Trailer,
        b => return Err(FrameError::BadFlags(b)),
    };
    let len = u32::from_be_bytes([header[1], header[2], header[3], header[4]]);
    if len > max_len {
        return Err(FrameError::TooLarge { len, max: max_len });
    }
    Ok((kind, len))
}

/// Reads one frame whose payload is at most `max_len` bytes.
pub fn read_frame<R: Read + ?Sized>(r: &mut R, max_len: u32) -> Result<Frame, FrameError> {
    let mut header = [0u8; HEADER_LEN];
    match read_full(r, &mut header)? {
        0 => return Err(FrameError::Eof),
        HEADER_LEN => {}
        got => {
            return Err(FrameError::Truncated {
                wanted: HEADER_LEN,
                got,
            });
        }
    }
    read_frame_body(r, header, max_len)
}

/// Reads the payload of a frame whose header was already read.
pub fn read_frame_body<R: Read + ?Sized>(
    r: &mut R,
    header: [u8; HEADER_LEN],
    max_len: u32,
) -> Result<Frame, FrameError> {
    let (kind, len) = parse_header(header, max_len)?;
    let len = len as usize;
    // Grow with the bytes that actually arrive, not with the announced length.
    let mut payload = Vec::with_capacity(len.min(64 * 1024));
    let got = loop {
        match r
            .take((len - payload.len()) as u64)
            .read_to_end(&mut payload)
        {
            Ok(_) => break payload.len(),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e.into()),
        }
    };
    if got < len {
        return Err(FrameError::Truncated {
            wanted: HEADER_LEN + len,
            got: HEADER_LEN + got,
        });
    }
    Ok(Frame { kind, payload })
}

/// Writes one frame (not flushed).
pub fn write_frame<W: Write + ?Sized>(
    w: &mut W,
    kind: FrameKind,
    payload: &[u8],
) -> io::Result<()> {
    let len = u32::try_from(payload.len())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "frame payload over 4 GiB"))?;
    let mut buf = Zeroizing::new(Vec::with_capacity(HEADER_LEN + payload.len()));
    buf.push(match kind {
        FrameKind::Message => FLAG_MESSAGE,
        FrameKind::Trailer => FLAG_TRAILER,
    });
    buf.extend_from_slice(&len.to_be_bytes());
    buf.extend_from_slice(payload);
    w.write_all(&buf)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn encoded(kind: FrameKind, payload: &[u8]) -> Vec<u8> {
        let mut v = Vec::new();
        write_frame(&mut v, kind, payload).unwrap();
        v
    }

    #[test]
    fn round_trip() {
        let mut bytes = encoded(FrameKind::Message, b"hello");
        bytes.extend(encoded(FrameKind::Trailer, b""));
        let mut r = &bytes[..];
        assert_eq!(
            read_frame(&mut r, 16).unwrap(),
            Frame {
                kind: FrameKind::Message,
                payload: b"hello".to_vec()
            }
        );
        assert_eq!(
            read_frame(&mut r, 16).unwrap(),
            Frame {
                kind: FrameKind::Trailer,
                payload: vec![]
            }
        );
        assert!(matches!(read_frame(&mut r, 16), Err(FrameError::Eof)));
    }

    #[test]
    fn refuses_oversized_length_before_reading() {
        let bytes = [0u8, 0xff, 0xff, 0xff, 0xff];
        let err = read_frame(&mut &bytes[..], DEFAULT_MAX_FRAME_LEN).unwrap_err();
        assert!(matches!(
            err,
            FrameError::TooLarge {
                len: u32::MAX,
                max: DEFAULT_MAX_FRAME_LEN
            }
        ));
        // Exactly at the limit is accepted.
        let bytes = encoded(FrameKind::Message, &[7; 16]);
        assert_eq!(read_frame(&mut &bytes[..], 16).unwrap().payload.len(), 16);
        assert!(matches!(
            read_frame(&mut &bytes[..], 15),
            Err(FrameError::TooLarge { len: 16, max: 15 })
        ));
    }

    #[test]
    fn truncated_and_bad_flags() {
        let bytes = encoded(FrameKind::Message, b"hello");
        for cut in 1..bytes.len() {
            let err = read_frame(&mut &bytes[..cut], 16).unwrap_err();
            assert!(
                matches!(err, FrameError::Truncated { .. }),
                "cut {cut}: {err}"
            );
        }
        let err = read_frame(&mut &[0x42u8, 0, 0, 0, 0][..], 16).unwrap_err();
        assert!(matches!(err, FrameError::BadFlags(0x42)));
    }
}
