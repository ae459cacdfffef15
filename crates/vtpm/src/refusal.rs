//! Why the vTPM variant refuses or cannot issue: one reason per check,
//! carried in the [`AttestationError`](confboot_attest::AttestationError)'s
//! [`Detail`](confboot_attest::Detail).

/// The typed reason of every refusal the vTPM variant makes; the category
/// of the error it travels in is named on each.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum VtpmRefusal {
    /// The evidence message is oversized, not a `QuoteEvidence`, or a field,
    /// a PCR list or a PCR value has the wrong size or order (`Decode`).
    Evidence,
    /// The quote (`TPMS_ATTEST`) does not parse (`Decode`).
    Quote,
    /// The AK's public area does not parse (`Decode`).
    AkPublic,
    /// The quote's signature structure does not parse (`Decode`).
    SignatureFormat,
    /// The AK certificate is not one DER certificate (`Decode`).
    AkCertificateFormat,
    /// The quote's qualifying data is not this handshake's `extra_data`
    /// (`Binding`).
    Binding,
    /// The quote selects other PCRs or another bank than the evidence
    /// carries (`Signature`).
    PcrSelection,
    /// The carried PCR values do not hash to the quoted PCR digest
    /// (`Signature`).
    PcrDigest,
    /// The quote's signer is not the AK of the evidence (`Signature`).
    Signer,
    /// The quote is signed with another hash than SHA-256 (`Signature`).
    SignatureHash,
    /// The quote's ECDSA signature does not verify with the AK
    /// (`Signature`).
    QuoteSignature,
    /// The AK lacks the attributes of a restricted signing key created in
    /// the TPM (`Trust`).
    AkAttributes,
    /// The AK is not among the pinned keys (`Trust`).
    AkNotPinned,
    /// The policy requires an AK certificate and the evidence has none
    /// (`Trust`).
    NoAkCertificate,
    /// The AK certificate does not chain to a configured root (`Trust`).
    AkChain,
    /// The AK certificate is outside its validity period (`Trust`).
    AkCertificateValidity,
    /// The AK certificate is for another key than the AK (`Trust`).
    AkCertificateKey,
    /// The carried event log does not parse (`EventLog`).
    EventLogFormat,
    /// Replaying the event log gives another PCR value than the quote's
    /// (`EventLog`).
    EventLogReplay,
    /// The event log extends a PCR the quote does not cover (`EventLog`).
    EventLogCoverage,
    /// PCR 15 holds a cluster mark: the node is already bootstrapped
    /// (`Policy`).
    ClusterMarked,
    /// PCR 15 is not quoted, so the node cannot show it is unmarked
    /// (`Policy`).
    ClusterMarkNotQuoted,
    /// An AK trust specification does not parse or its keys cannot be read
    /// (`Policy`).
    AkTrustSpec,
    /// A CA certificate file cannot be read, or holds no certificate or a
    /// bad one (`Policy`).
    CaFile,
    /// The TPM failed a command (`Issue`).
    Tpm,
    /// The event log to carry is too long, unreadable or malformed
    /// (`Issue`).
    IssuerEventLog,
    /// Reconnecting to the TPM or loading the AK again failed (`Issue`).
    Reconnect,
    /// The TPM's AK changed across a reconnect (TPM cleared?) (`Issue`).
    AkChanged,
    /// The PCRs kept changing between quote and PCR read (`Issue`).
    PcrsChanging,
    /// An AK certificate cannot be issued for this key (`Issue`).
    AkCertificateIssue,
}
