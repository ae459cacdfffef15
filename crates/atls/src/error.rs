//! [`AtlsError`]: why an aTLS handshake failed, and its conversions from and
//! to the errors of rustls and of the socket.

use std::io;
use std::sync::Arc;

use confboot_attest::{AttestationError, Variant};

/// Why an aTLS handshake failed. Each check that can refuse a peer has its
/// own variant, so callers (and tests) can tell which one did.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum AtlsError {
    /// Connecting or reading/writing the socket failed.
    #[error("aTLS: I/O error: {0}")]
    Io(String),
    /// The handshake did not finish in time.
    #[error("aTLS: handshake timed out")]
    Timeout,
    /// The TLS handshake failed for a reason outside aTLS' own checks (for
    /// example the peer sent an alert, or presented no certificate).
    #[error("aTLS: TLS handshake failed: {0}")]
    Tls(String),
    /// The peer's ALPN is not [`ALPN`](super::ALPN).
    #[error("aTLS: wrong ALPN protocol: {0}")]
    Alpn(String),
    /// A nonce was missing or malformed (SNI, acceptable-CA names), or none
    /// could be drawn.
    #[error("aTLS: bad nonce: {0}")]
    Nonce(String),
    /// The peer's certificate cannot be parsed, or ours cannot be made.
    #[error("aTLS: certificate: {0}")]
    Certificate(String),
    /// The peer's certificate carries no evidence extension.
    #[error("aTLS: peer certificate carries no attestation evidence")]
    MissingEvidence,
    /// The peer's evidence extension has an OID no configured validator accepts.
    #[error("aTLS: peer evidence has OID {oid}, which no configured validator accepts")]
    UnknownVariant {
        /// The dotted OID found.
        oid: String,
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
    /// The peer's certificate has a critical extension we refuse (the
    /// evidence extension must be non-critical).
    #[error("aTLS: peer certificate has critical extension {oid}")]
    CriticalExtension {
        /// The dotted OID of the extension.
        oid: String,
    },
    /// The peer's certificate is not valid now.
    #[error("aTLS: peer certificate valid from {not_before} to {not_after}, not at {now}")]
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
    #[error("aTLS: peer attestation refused: {0}")]
    Attestation(AttestationError),
    /// Our own issuer could not produce evidence.
    #[error("aTLS: cannot attest: {0}")]
    Issue(AttestationError),
}

/// The variants' names, comma-separated.
fn names(variants: &[Variant]) -> String {
    let names: Vec<&str> = variants.iter().map(|v| v.name()).collect();
    names.join(", ")
}

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
