//! Why the TDX variant refuses or cannot issue: one reason per check of
//! [`check`](crate::check), and one per step of decoding and issuing,
//! carried in the [`AttestationError`](confboot_attest::AttestationError)'s
//! [`Detail`](confboot_attest::Detail).

/// The typed reason of every refusal the TDX variant makes; the category
/// of the error it travels in is named on each (a check's category can
/// vary with what failed, e.g. a certificate that does not parse is
/// `Decode`, one that does not verify `Signature`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TdxRefusal {
    /// The evidence message is oversized, not a TDX `Evidence`, or its
    /// quote or CCEL log is too long (`Decode`).
    Evidence,
    /// The quote does not parse (`Decode`).
    Quote,
    /// The CCEL log does not parse or does not replay to the quoted RTMRs
    /// (`EventLog`).
    EventLog,
    /// [`check::QE_VENDOR`](crate::check::QE_VENDOR): the QE is not
    /// Intel's (`Trust`).
    QeVendor,
    /// [`check::PCK_CHAIN`](crate::check::PCK_CHAIN): the PCK chain does
    /// not lead to a pinned root.
    PckChain,
    /// [`check::VALIDITY`](crate::check::VALIDITY): a certificate of the
    /// chain is not valid now.
    Validity,
    /// [`check::ROOT_CRL`](crate::check::ROOT_CRL): the root CRL is bad or
    /// revokes the intermediate.
    RootCrl,
    /// [`check::PCK_CRL`](crate::check::PCK_CRL): the PCK CRL is bad or
    /// revokes the PCK certificate.
    PckCrl,
    /// [`check::QE_REPORT_SIGNATURE`](crate::check::QE_REPORT_SIGNATURE):
    /// the PCK key did not sign the QE report.
    QeReportSignature,
    /// [`check::QE_REPORT_DATA`](crate::check::QE_REPORT_DATA): the QE
    /// report does not bind the attestation key (`Binding`).
    QeReportData,
    /// [`check::QUOTE_SIGNATURE`](crate::check::QUOTE_SIGNATURE): the
    /// attestation key did not sign the quote (`Signature`).
    QuoteSignature,
    /// [`check::TCB_INFO`](crate::check::TCB_INFO): the TCB info is not
    /// signed by Intel's TCB signing key, not current, or for another
    /// platform.
    TcbInfo,
    /// [`check::TDX_MODULE`](crate::check::TDX_MODULE): the TDX module is
    /// not the one the TCB info names (`Trust`).
    TdxModule,
    /// [`check::TCB_STATUS`](crate::check::TCB_STATUS): the platform's TCB
    /// status is not accepted, or no TCB level matches (`Policy`, `Decode`).
    TcbStatus,
    /// [`check::QE_IDENTITY`](crate::check::QE_IDENTITY): the QE identity
    /// is not signed by Intel, not current, or not the QE's.
    QeIdentity,
    /// [`check::QE_TCB_STATUS`](crate::check::QE_TCB_STATUS): the QE's TCB
    /// status is not accepted, or no level matches (`Policy`, `Decode`).
    QeTcbStatus,
    /// [`check::REPORT_DATA`](crate::check::REPORT_DATA): the report data
    /// is not the expected binding (`Binding`).
    ReportData,
    /// [`check::DEBUG`](crate::check::DEBUG): the TD is debuggable and the
    /// policy forbids it (`Policy`).
    Debug,
    /// [`check::TD_ATTRIBUTES`](crate::check::TD_ATTRIBUTES): other TD
    /// attributes than the policy's (`Policy`).
    TdAttributes,
    /// [`check::XFAM`](crate::check::XFAM): another XFAM than the
    /// policy's (`Policy`).
    Xfam,
    /// [`check::MIN_TEE_TCB_SVN`](crate::check::MIN_TEE_TCB_SVN): the TEE
    /// TCB SVN is below the policy's minimum (`Policy`).
    MinimumTeeTcbSvn,
    /// [`check::MRTD`](crate::check::MRTD): another `MRTD` than the
    /// policy's (`Policy`; a validator reports it as a measurement).
    Mrtd,
    /// [`check::RTMR`](crate::check::RTMR): an RTMR differs from the
    /// policy's (`Policy`; a validator reports it as a measurement).
    Rtmr,
    /// [`check::MRCONFIGID`](crate::check::MRCONFIGID) differs from the
    /// policy's (`Policy`).
    MrConfigId,
    /// [`check::MROWNER`](crate::check::MROWNER) differs from the policy's
    /// (`Policy`).
    MrOwner,
    /// [`check::MROWNERCONFIG`](crate::check::MROWNERCONFIG) differs from
    /// the policy's (`Policy`).
    MrOwnerConfig,
    /// The quote source failed, or answered with a quote that does not
    /// parse or is for other report data (`Issue`).
    QuoteSource,
    /// The CCEL table or log area cannot be read or parsed (`Issue`).
    Ccel,
    /// The evidence to send breaks a bound the decoder enforces (`Issue`).
    EvidenceBounds,
    /// Extending RTMR3 with the cluster mark failed (`Issue`).
    Rtmr3,
    /// `RTMR3` is not all zero where a TD not yet bootstrapped is required
    /// ([`TdxValidator::require_unmarked`](crate::TdxValidator::require_unmarked);
    /// `Policy`).
    ClusterMarked,
}
