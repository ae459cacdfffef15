//! Why the GCP vTPM variant refuses: one reason per check of
//! [`check`](crate::check) (two for the validity window and the event log),
//! carried in the [`AttestationError`](confboot_attest::AttestationError)'s
//! [`Detail`](confboot_attest::Detail).

/// The typed reason of every refusal the GCP vTPM variant makes; the
/// category of the error it travels in is named on each.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GcpRefusal {
    /// [`check::ATTESTATION`](crate::check::ATTESTATION): the bytes are not
    /// an `Attestation` protobuf, or break a bound (`Decode`).
    Attestation,
    /// [`check::AK`](crate::check::AK): the AK's `TPMT_PUBLIC` is not an
    /// RSA restricted signing key of the TPM (`Decode`, `Trust`).
    AkPublic,
    /// [`check::AK_CERTIFICATE`](crate::check::AK_CERTIFICATE): no AK
    /// certificate, one that does not parse, or one for another key
    /// (`Trust`).
    AkCertificate,
    /// [`check::CHAIN`](crate::check::CHAIN): the AK certificate does not
    /// chain to a pinned root (`Trust`).
    Chain,
    /// [`check::VALIDITY`](crate::check::VALIDITY): a certificate of the
    /// chain is not yet valid at the verification time (`Trust`).
    NotYetValid,
    /// [`check::VALIDITY`](crate::check::VALIDITY): a certificate of the
    /// chain has expired at the verification time (`Trust`).
    Expired,
    /// [`check::QUOTE_SIGNATURES`](crate::check::QUOTE_SIGNATURES): a
    /// quote's signature is not RSASSA SHA-256 or does not verify under the
    /// AK (`Signature`).
    QuoteSignature,
    /// [`check::QUOTES`](crate::check::QUOTES): a quote's `TPMS_ATTEST`
    /// does not parse, selects other PCRs than its values, or there is no
    /// SHA-256 quote (`Decode`).
    Quote,
    /// [`check::NONCE`](crate::check::NONCE): a quote's `extraData` is not
    /// the expected nonce (`Binding`).
    Nonce,
    /// [`check::PCR_DIGEST`](crate::check::PCR_DIGEST): a quote's
    /// `pcrDigest` is not the digest of its PCR values (`Signature`).
    PcrDigest,
    /// [`check::EVENT_LOG`](crate::check::EVENT_LOG): the event log does
    /// not parse (`EventLog`).
    EventLog,
    /// [`check::EVENT_LOG`](crate::check::EVENT_LOG): the event log does
    /// not replay to a quoted PCR (`EventLog`).
    EventLogReplay,
}
