//! [`AtlsError`]: why an aTLS handshake failed, and its conversions from and
//! to the errors of rustls and of the socket.

use std::fmt;
use std::io;
use std::sync::Arc;

use confboot_attest::{AttestationError, Variant};

/// Why an aTLS handshake failed. Each check that can refuse a peer has its
/// own variant, so callers (and tests) can tell which one did.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum AtlsError {
    /// Connecting or reading/writing the socket failed.
    Io(String),
    /// The handshake did not finish in time.
    Timeout,
    /// The TLS handshake failed for a reason outside aTLS' own checks (for
    /// example the peer sent an alert, or presented no certificate).
    Tls(String),
    /// The peer's ALPN is not [`ALPN`](super::ALPN).
    Alpn(String),
    /// A nonce was missing or malformed (SNI, acceptable-CA names), or none
    /// could be drawn.
    Nonce(String),
    /// The peer's certificate cannot be parsed, or ours cannot be made.
    Certificate(String),
    /// The peer's certificate carries no evidence extension.
    MissingEvidence,
    /// The peer's evidence extension has an OID no configured validator accepts.
    UnknownVariant {
        /// The dotted OID found.
        oid: String,
    },
    /// The peer's evidence is of a variant this side knows but was not
    /// configured to accept (a vTPM node at a join service that admits
    /// SEV-SNP only, say): refused, failing closed.
    VariantNotAccepted {
        /// The variant the peer presented.
        variant: Variant,
        /// The variants this side accepts.
        accepted: Vec<Variant>,
    },
    /// The peer's certificate has a critical extension we refuse (the
    /// evidence extension must be non-critical).
    CriticalExtension {
        /// The dotted OID of the extension.
        oid: String,
    },
    /// The peer's certificate is not valid now.
    OutsideValidity {
        /// Start of validity, seconds since the Unix epoch.
        not_before: i64,
        /// End of validity, seconds since the Unix epoch.
        not_after: i64,
        /// The time of the check, seconds since the Unix epoch.
        now: i64,
    },
    /// The validator refused the peer's evidence: wrong binding (a stale
    /// nonce, a certificate key other than the one the evidence was made
    /// for), signature, trust, or measurement policy — see the inner error.
    Attestation(AttestationError),
    /// Our own issuer could not produce evidence.
    Issue(AttestationError),
}

impl fmt::Display for AtlsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AtlsError::Io(m) => write!(f, "aTLS: I/O error: {m}"),
            AtlsError::Timeout => write!(f, "aTLS: handshake timed out"),
            AtlsError::Tls(m) => write!(f, "aTLS: TLS handshake failed: {m}"),
            AtlsError::Alpn(m) => write!(f, "aTLS: wrong ALPN protocol: {m}"),
            AtlsError::Nonce(m) => write!(f, "aTLS: bad nonce: {m}"),
            AtlsError::Certificate(m) => write!(f, "aTLS: certificate: {m}"),
            AtlsError::MissingEvidence => {
                write!(f, "aTLS: peer certificate carries no attestation evidence")
            }
            AtlsError::UnknownVariant { oid } => write!(
                f,
                "aTLS: peer evidence has OID {oid}, which no configured validator accepts"
            ),
            AtlsError::VariantNotAccepted { variant, accepted } => {
                let names: Vec<&str> = accepted.iter().map(|v| v.name()).collect();
                write!(
                    f,
                    "aTLS: peer attests with {variant}, which is not accepted here (accepted: {})",
                    names.join(", ")
                )
            }
            AtlsError::CriticalExtension { oid } => {
                write!(f, "aTLS: peer certificate has critical extension {oid}")
            }
            AtlsError::OutsideValidity {
                not_before,
                not_after,
                now,
            } => write!(
                f,
                "aTLS: peer certificate valid from {not_before} to {not_after}, not at {now}"
            ),
            AtlsError::Attestation(e) => write!(f, "aTLS: peer attestation refused: {e}"),
            AtlsError::Issue(e) => write!(f, "aTLS: cannot attest: {e}"),
        }
    }
}

impl std::error::Error for AtlsError {}

impl AtlsError {
    /// The aTLS error a verifier put inside a rustls error, if any.
    pub fn from_rustls(e: &rustls::Error) -> AtlsError {
        if let rustls::Error::InvalidCertificate(rustls::CertificateError::Other(o)) = e
            && let Some(a) = o.0.downcast_ref::<AtlsError>()
        {
            return a.clone();
        }
        AtlsError::Tls(e.to_string())
    }

    /// Wraps this error for rustls, so a verifier aborts the handshake with it.
    pub(crate) fn into_rustls(self) -> rustls::Error {
        rustls::Error::InvalidCertificate(rustls::CertificateError::Other(rustls::OtherError(
            Arc::new(self),
        )))
    }

    /// The aTLS error behind an I/O error: a rustls error carried inside it,
    /// a timeout, or the I/O error itself.
    pub(crate) fn from_io(e: io::Error) -> AtlsError {
        if let Some(tls) = e.get_ref().and_then(|i| i.downcast_ref::<rustls::Error>()) {
            return AtlsError::from_rustls(tls);
        }
        match e.kind() {
            io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut => AtlsError::Timeout,
            _ => AtlsError::Io(e.to_string()),
        }
    }
}
