//! [`AtlsError`]: why an aTLS connection could not be established, and its
//! conversions from the errors of rustls and of the socket.

use std::io;

use confboot_attest::{AttestationError, Variant};
use confboot_proto::DecodeError;
use confboot_util::IoFailure;
use confboot_wire::{Code, Status};

use crate::message::{
    MAX_EVIDENCE_LEN, MAX_MESSAGE_LEN, MAX_REFERENCE_VALUES_LEN, MAX_VARIANT_NAME_LEN,
};

/// Why an aTLS connection failed: its handshake, or the attestation
/// exchange right after it. Each check that can refuse a peer has its own
/// variant, so callers (and tests) can tell which one did.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum AtlsError {
    /// Connecting or reading/writing the socket failed.
    #[error("aTLS: I/O error: {0}")]
    Io(AtlsIo),
    /// The handshake or the attestation exchange did not finish in time.
    #[error("aTLS: timed out")]
    Timeout,
    /// The TLS handshake failed for a reason outside aTLS' own checks (for
    /// example the peer sent an alert).
    #[error("aTLS: TLS handshake failed: {0}")]
    Tls(String),
    /// The peer's ALPN is not [`ALPN`](super::ALPN).
    #[error("aTLS: wrong ALPN protocol: {0}")]
    Alpn(String),
    /// Our own certificate cannot be made.
    #[error("aTLS: certificate: {0}")]
    Certificate(String),
    /// The peer's attestation message is malformed: not a message, over
    /// its bounds, fields that contradict each other.
    #[error("aTLS: malformed attestation message: {0}")]
    Message(MessageFault),
    /// The peer did not attest where this side requires it.
    #[error("aTLS: the peer did not attest")]
    MissingEvidence,
    /// The peer's attestation names a variant this build does not know.
    #[error("aTLS: peer attests with unknown variant {name:?}")]
    UnknownVariant {
        /// The variant name the peer sent (at most 64 characters of it).
        name: String,
    },
    /// The peer's evidence is of a variant this side knows but was not
    /// configured to accept (a vTPM node at a join service that admits
    /// SEV-SNP only, say): refused, failing closed.
    #[error(
        "aTLS: peer attests with {variant}, which is not accepted here (accepted: {})",
        names(accepted)
    )]
    VariantNotAccepted {
        /// The variant the peer presented.
        variant: Variant,
        /// The variants this side accepts.
        accepted: Vec<Variant>,
    },
    /// The validator refused the peer's evidence: wrong binding (evidence
    /// made for another session, another role or another sealing key: a
    /// relay, a reflection, a replay), signature, trust, or measurement
    /// policy — see the inner error.
    #[error("aTLS: peer attestation refused: {0}")]
    Attestation(AttestationError),
    /// Our own issuer could not produce evidence.
    #[error("aTLS: cannot attest: {0}")]
    Issue(AttestationError),
    /// A server that requires client attestation was given no validator
    /// to check it with ([`AtlsServer::requiring_clients`](super::AtlsServer::requiring_clients)).
    #[error("aTLS: a server that requires client attestation needs at least one validator")]
    NoClientValidators,
    /// The server refused this client's attestation (it answered the
    /// client's attestation message with a status instead of its own).
    #[error("aTLS: the server refused this client: {0}")]
    Refused(String),
}

/// The variants' names, comma-separated.
fn names(variants: &[Variant]) -> String {
    let names: Vec<&str> = variants.iter().map(|v| v.name()).collect();
    names.join(", ")
}

/// How connecting or the socket failed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum AtlsIo {
    /// The socket failed (connecting, reading, writing, its options).
    #[error("{0}")]
    Socket(#[source] IoFailure),
    /// The address does not resolve.
    #[error("cannot resolve the address: {0}")]
    Resolve(#[source] IoFailure),
    /// The address resolves to no socket address.
    #[error("the address resolved to nothing")]
    ResolvedToNothing,
    /// The peer closed the connection before its attestation message.
    #[error("the peer closed the connection before attesting")]
    ClosedBeforeAttesting,
}

/// What is wrong with a peer's attestation message (or with the frame that
/// should carry it).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum MessageFault {
    /// The message is over [`MAX_MESSAGE_LEN`] (its length).
    #[error("{0} bytes, over {MAX_MESSAGE_LEN}")]
    TooLarge(usize),
    /// The bytes are not an attestation message.
    #[error("not a message: {0}")]
    NotAMessage(DecodeError),
    /// The variant name is over [`MAX_VARIANT_NAME_LEN`] (its length).
    #[error("variant name of {0} bytes, over {MAX_VARIANT_NAME_LEN}")]
    VariantNameTooLong(usize),
    /// The evidence is over [`MAX_EVIDENCE_LEN`] (its length).
    #[error("evidence of {0} bytes, over {MAX_EVIDENCE_LEN}")]
    EvidenceTooLarge(usize),
    /// Evidence comes without a variant.
    #[error("evidence without a variant")]
    EvidenceWithoutVariant,
    /// A variant comes without evidence.
    #[error("a variant without evidence")]
    VariantWithoutEvidence,
    /// A sealing key comes without evidence.
    #[error("a sealing key without evidence")]
    SealingKeyWithoutEvidence,
    /// A sealing key that is not 32 bytes (its length).
    #[error("a sealing key of {0} bytes, not 32")]
    SealingKeyLength(usize),
    /// A reference-value set over [`MAX_REFERENCE_VALUES_LEN`] (its length).
    #[error("a reference-value set of {0} bytes, over {MAX_REFERENCE_VALUES_LEN}")]
    ReferenceValuesTooLarge(usize),
    /// A reference-value set comes without evidence.
    #[error("a reference-value set without evidence")]
    ReferenceValuesWithoutEvidence,
    /// The frame announces more than the limit; it was not read.
    #[error("frame of {len} bytes exceeds the limit of {max}")]
    FrameTooLarge {
        /// Announced length.
        len: u32,
        /// The limit.
        max: u32,
    },
    /// The stream ended inside the frame.
    #[error("connection closed inside a frame ({got} of {wanted} bytes)")]
    FrameTruncated {
        /// Bytes the frame needed.
        wanted: usize,
        /// Bytes that came.
        got: usize,
    },
    /// The frame's flags byte is neither message nor trailer.
    #[error("invalid frame flags 0x{0:02x}")]
    FrameFlags(u8),
    /// A trailer came that is not a status.
    #[error("a trailer that is not a status: {0}")]
    TrailerNotStatus(DecodeError),
    /// A status other than a refusal came instead of an attestation.
    #[error("a {} status instead of an attestation", .0.name())]
    UnexpectedStatus(Code),
}

impl AtlsError {
    /// The aTLS error behind a rustls error.
    pub fn from_rustls(e: &rustls::Error) -> AtlsError {
        AtlsError::Tls(e.to_string())
    }

    /// The aTLS error behind an I/O error: a rustls error carried inside it,
    /// a timeout, or the I/O error itself.
    pub(crate) fn from_io(e: io::Error) -> AtlsError {
        if let Some(tls) = e.get_ref().and_then(|i| i.downcast_ref::<rustls::Error>()) {
            return AtlsError::from_rustls(tls);
        }
        match e.kind() {
            io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut => AtlsError::Timeout,
            _ => AtlsError::Io(AtlsIo::Socket(IoFailure::bare(e))),
        }
    }

    /// The RPC status a client reports for a connection that failed with
    /// this error: `PERMISSION_DENIED` when the server refused our
    /// attestation, `DEADLINE_EXCEEDED` on a timeout, `UNAVAILABLE` else.
    pub fn status(&self) -> Status {
        let code = match self {
            AtlsError::Refused(_) => Code::PermissionDenied,
            AtlsError::Timeout => Code::DeadlineExceeded,
            _ => Code::Unavailable,
        };
        Status::new(code, self.to_string())
    }
}
