//! Why the SEV-SNP variant refuses or cannot issue: one reason per check
//! of [`check`](crate::check), and one per step of decoding, finding the
//! endorsement key and issuing, carried in the
//! [`AttestationError`](confboot_attest::AttestationError)'s
//! [`Detail`](confboot_attest::Detail).

/// The typed reason of every refusal the SEV-SNP variant makes; the
/// category of the error it travels in is named on each.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SnpRefusal {
    /// The evidence message is oversized, not an SNP `Evidence`, or breaks
    /// a bound: report length, certificate count, size or kind (`Decode`;
    /// `Issue` when encoding).
    Evidence,
    /// The report is not exactly [`REPORT_LEN`](crate::REPORT_LEN) bytes
    /// (`Decode`).
    Report,
    /// A certificate is not one DER certificate (`Decode`).
    Certificate,
    /// A certificate's subject is not an AMD SEV-SNP certificate's
    /// (`Trust`).
    CertificateName,
    /// The VEK certificate or one of its TCB extensions does not parse
    /// (`Decode`).
    VekCertificate,
    /// [`check::VEK`](crate::check::VEK): the evidence's endorsement key is
    /// an ASK or ARK, or a cached certificate is not a VCEK (`Trust`).
    VekRole,
    /// [`check::VEK`](crate::check::VEK): no VCEK or VLEK in the evidence,
    /// in the cache or from AMD's KDS (`Trust`).
    NoVek,
    /// [`check::VEK`](crate::check::VEK): the policy asks for KDS fetching
    /// in a build without the `kds` feature (`Trust`).
    KdsNotBuilt,
    /// A request to AMD's KDS failed or its answer was unreadable (`Trust`).
    Kds,
    /// [`check::CHAIN`](crate::check::CHAIN): the report's signing
    /// certificate is no VCEK or VLEK (`Trust`).
    ChainRole,
    /// [`check::CHAIN`](crate::check::CHAIN): no intermediate (ASK or
    /// ASVK) to verify the VEK under a pinned ARK (`Trust`).
    ChainIntermediate,
    /// [`check::CHAIN`](crate::check::CHAIN): the VEK does not chain to a
    /// pinned ARK (`Trust`).
    Chain,
    /// [`check::VALIDITY`](crate::check::VALIDITY): a certificate of the
    /// chain is not valid now (`Trust`).
    Validity,
    /// [`check::SIGNATURE`](crate::check::SIGNATURE): the report's
    /// signature is of another algorithm, malformed or does not verify
    /// with the endorsement key (`Signature`).
    ReportSignature,
    /// [`check::VERSION`](crate::check::VERSION): a report version this
    /// verifier does not read (`Decode`).
    Version,
    /// [`check::SIGNING_KEY`](crate::check::SIGNING_KEY): the report names
    /// another kind of signing key than the one that signed it (`Trust`).
    SigningKey,
    /// [`check::ACCEPTED_SIGNING_KEY`](crate::check::ACCEPTED_SIGNING_KEY):
    /// the report is signed by a kind of key (VCEK, VLEK) the policy does
    /// not accept (`Policy`).
    SigningKeyNotAccepted,
    /// [`check::PRODUCT`](crate::check::PRODUCT): the report's product is
    /// not the endorsement key's, or unknown (`Trust`, `Decode`).
    Product,
    /// [`check::CHIP_ID`](crate::check::CHIP_ID): the report's chip id is
    /// not the VCEK's (`Trust`).
    ChipId,
    /// [`check::ALLOWED_CHIP`](crate::check::ALLOWED_CHIP): the chip is not
    /// one the policy allows (`Policy`).
    AllowedChip,
    /// [`check::REPORTED_TCB`](crate::check::REPORTED_TCB): the reported
    /// TCB is not the VCEK's (`Trust`).
    ReportedTcb,
    /// [`check::REPORT_DATA`](crate::check::REPORT_DATA): the report data
    /// is not the expected binding (`Binding`).
    ReportData,
    /// [`check::DEBUG`](crate::check::DEBUG): the guest allows debugging
    /// and the policy forbids it (`Policy`).
    Debug,
    /// [`check::VMPL`](crate::check::VMPL): the report is for another VMPL
    /// than the policy's (`Policy`).
    Vmpl,
    /// [`check::SMT`](crate::check::SMT): the guest allows SMT and the
    /// policy forbids it (`Policy`).
    Smt,
    /// [`check::MIGRATION_AGENT`](crate::check::MIGRATION_AGENT): the guest
    /// allows a migration agent and the policy forbids it (`Policy`).
    MigrationAgent,
    /// [`check::MIN_ABI`](crate::check::MIN_ABI): the guest's minimum ABI
    /// is below the policy's (`Policy`).
    MinimumAbi,
    /// [`check::MIN_REPORTED_TCB`](crate::check::MIN_REPORTED_TCB): the
    /// reported TCB is below the minimum, or no minimum is known (`Policy`).
    MinimumReportedTcb,
    /// [`check::MIN_LAUNCH_TCB`](crate::check::MIN_LAUNCH_TCB): the launch
    /// TCB is below the minimum, or no minimum is known (`Policy`).
    MinimumLaunchTcb,
    /// [`check::HOST_DATA`](crate::check::HOST_DATA): another `HOST_DATA`
    /// than the policy's (`Policy`).
    HostData,
    /// [`check::ID_KEY`](crate::check::ID_KEY): an ID key digest the policy
    /// does not accept (`Policy`).
    IdKey,
    /// The SNP device failed or answered with a report that does not parse
    /// (`Issue`).
    Device,
    /// The SNP device returned a report for other report data (`Issue`).
    DeviceReportData,
    /// The SNP device returned a report for another VMPL (`Issue`).
    DeviceVmpl,
    /// The host's certificate table does not parse (`Issue`).
    HostCertificates,
}
