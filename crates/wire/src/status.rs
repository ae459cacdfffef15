//! gRPC status codes and the [`Status`] every call ends with.

/// gRPC status codes, with gRPC's numbers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[allow(missing_docs)]
pub enum Code {
    Ok = 0,
    Cancelled = 1,
    Unknown = 2,
    InvalidArgument = 3,
    DeadlineExceeded = 4,
    NotFound = 5,
    AlreadyExists = 6,
    PermissionDenied = 7,
    ResourceExhausted = 8,
    FailedPrecondition = 9,
    Aborted = 10,
    OutOfRange = 11,
    Unimplemented = 12,
    Internal = 13,
    Unavailable = 14,
    DataLoss = 15,
    Unauthenticated = 16,
}

impl Code {
    /// The code for a number; numbers gRPC does not define map to `Unknown`.
    pub fn from_i32(n: i32) -> Code {
        use Code::*;
        match n {
            0 => Ok,
            1 => Cancelled,
            3 => InvalidArgument,
            4 => DeadlineExceeded,
            5 => NotFound,
            6 => AlreadyExists,
            7 => PermissionDenied,
            8 => ResourceExhausted,
            9 => FailedPrecondition,
            10 => Aborted,
            11 => OutOfRange,
            12 => Unimplemented,
            13 => Internal,
            14 => Unavailable,
            15 => DataLoss,
            16 => Unauthenticated,
            _ => Unknown,
        }
    }

    /// gRPC's upper-case name of the code, e.g. `PERMISSION_DENIED`.
    pub fn name(self) -> &'static str {
        use Code::*;
        match self {
            Ok => "OK",
            Cancelled => "CANCELLED",
            Unknown => "UNKNOWN",
            InvalidArgument => "INVALID_ARGUMENT",
            DeadlineExceeded => "DEADLINE_EXCEEDED",
            NotFound => "NOT_FOUND",
            AlreadyExists => "ALREADY_EXISTS",
            PermissionDenied => "PERMISSION_DENIED",
            ResourceExhausted => "RESOURCE_EXHAUSTED",
            FailedPrecondition => "FAILED_PRECONDITION",
            Aborted => "ABORTED",
            OutOfRange => "OUT_OF_RANGE",
            Unimplemented => "UNIMPLEMENTED",
            Internal => "INTERNAL",
            Unavailable => "UNAVAILABLE",
            DataLoss => "DATA_LOSS",
            Unauthenticated => "UNAUTHENTICATED",
        }
    }
}

/// The outcome of a call: a code and a message for people. Shown as the
/// code's name, then `: ` and the message unless it is empty.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{}{}", code.name(), after_colon(message))]
pub struct Status {
    /// The gRPC code.
    pub code: Code,
    /// What went wrong (empty on success). Never carries secrets.
    pub message: String,
}

impl Status {
    /// A status with a code and message.
    pub fn new(code: Code, message: impl Into<String>) -> Status {
        Status {
            code,
            message: message.into(),
        }
    }

    /// Success.
    pub fn ok() -> Status {
        Status::new(Code::Ok, "")
    }

    /// INVALID_ARGUMENT.
    pub fn invalid_argument(message: impl Into<String>) -> Status {
        Status::new(Code::InvalidArgument, message)
    }

    /// PERMISSION_DENIED.
    pub fn permission_denied(message: impl Into<String>) -> Status {
        Status::new(Code::PermissionDenied, message)
    }

    /// INTERNAL.
    pub fn internal(message: impl Into<String>) -> Status {
        Status::new(Code::Internal, message)
    }

    /// UNAVAILABLE.
    pub fn unavailable(message: impl Into<String>) -> Status {
        Status::new(Code::Unavailable, message)
    }

    /// DEADLINE_EXCEEDED.
    pub fn deadline_exceeded(message: impl Into<String>) -> Status {
        Status::new(Code::DeadlineExceeded, message)
    }

    /// The trailer payload of this status.
    pub fn to_proto(&self) -> confboot_proto::rpc::Status {
        confboot_proto::rpc::Status {
            code: self.code as i32,
            message: self.message.clone(),
        }
    }

    /// A status from its trailer payload. The message is the peer's: it is
    /// cut to `MAX_PEER_MESSAGE_CHARS` and its control characters are
    /// replaced, so it can be logged and shown as one line of bounded size.
    pub fn from_proto(p: confboot_proto::rpc::Status) -> Status {
        let mut message: String = p
            .message
            .chars()
            .take(MAX_PEER_MESSAGE_CHARS)
            .map(|c| if hides_text(c) { '\u{fffd}' } else { c })
            .collect();
        if p.message.chars().nth(MAX_PEER_MESSAGE_CHARS).is_some() {
            message.push_str(" (cut)");
        }
        Status {
            code: Code::from_i32(p.code),
            message,
        }
    }
}

/// Whether a peer's character could change how the rest of a printed line
/// looks: control characters (line breaks that forge log lines, terminal
/// escapes) and the invisible or direction-changing format characters
/// (zero-width ones, bidirectional embeddings, overrides and isolates,
/// the byte-order mark).
fn hides_text(c: char) -> bool {
    c.is_control()
        || matches!(c, '\u{200b}'..='\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2060}'..='\u{2069}' | '\u{feff}')
}

/// `: ` and `message`, or nothing for an empty message.
fn after_colon(message: &str) -> String {
    if message.is_empty() {
        String::new()
    } else {
        format!(": {message}")
    }
}

/// Longest status message taken from a peer, in characters.
pub const MAX_PEER_MESSAGE_CHARS: usize = 512;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_match_grpc() {
        for n in 0..=16 {
            assert_eq!(Code::from_i32(n) as i32, n);
        }
        assert_eq!(Code::from_i32(99), Code::Unknown);
        assert_eq!(Code::PermissionDenied as i32, 7);
        assert_eq!(
            Status::new(Code::Unimplemented, "x").to_string(),
            "UNIMPLEMENTED: x"
        );
    }

    #[test]
    fn a_peers_message_is_one_bounded_line() {
        let forged = Status::from_proto(confboot_proto::rpc::Status {
            code: 7,
            message: "denied\n2026-01-01T00:00:00Z INFO bootstrapper: bootstrapped (Joined)".into(),
        });
        assert!(!forged.message.contains('\n'), "{}", forged.message);
        let huge = Status::from_proto(confboot_proto::rpc::Status {
            code: 7,
            message: "A".repeat(1 << 20),
        });
        assert_eq!(
            huge.message.chars().count(),
            MAX_PEER_MESSAGE_CHARS + " (cut)".len()
        );
        let short = Status::from_proto(confboot_proto::rpc::Status {
            code: 7,
            message: "measurements differ".into(),
        });
        assert_eq!(short.message, "measurements differ");
        // Text that hides or reorders what follows on the line.
        let hidden = Status::from_proto(confboot_proto::rpc::Status {
            code: 7,
            message: "ok\u{202e}deined\u{200b}\u{feff}\x1b[2K\r".into(),
        });
        assert_eq!(
            hidden.message,
            "ok\u{fffd}deined\u{fffd}\u{fffd}\u{fffd}[2K\u{fffd}"
        );
        // Other characters stay: a peer may write in any language.
        let kept = Status::from_proto(confboot_proto::rpc::Status {
            code: 7,
            message: "Schlüssel ≥ 32 Bytes".into(),
        });
        assert_eq!(kept.message, "Schlüssel ≥ 32 Bytes");
    }
}
