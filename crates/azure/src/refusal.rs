//! Why the Azure variants refuse: one reason per check of
//! [`check`](crate::check) (the hardware report's own checks keep the
//! SEV-SNP or TDX crate's reasons), carried in the
//! [`AttestationError`](confboot_attest::AttestationError)'s
//! [`Detail`](confboot_attest::Detail).

/// The typed reason of every refusal the Azure variants make; the
/// category of the error it travels in is named on each.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AzureRefusal {
    /// The evidence is oversized or not of a known form (`Decode`).
    Evidence,
    /// [`check::HCL_REPORT`](crate::check::HCL_REPORT): the HCL report
    /// does not parse (`Decode`).
    HclReport,
    /// [`check::HCL_REPORT`](crate::check::HCL_REPORT): the HCL report
    /// carries another kind of hardware report than the variant's (`Policy`).
    HardwareKind,
    /// [`check::HARDWARE_REPORT`](crate::check::HARDWARE_REPORT): the SEV-SNP
    /// report does not parse, or the TD quote is missing or does not parse
    /// (`Decode`).
    HardwareReport,
    /// [`check::CLAIMS_BINDING`](crate::check::CLAIMS_BINDING): the
    /// hardware report's `REPORT_DATA` is not SHA-256 of the runtime claims
    /// followed by 32 zero bytes (`Binding`).
    ClaimsBinding,
    /// [`check::TD_REPORT`](crate::check::TD_REPORT): the HCL report's
    /// TDREPORT names another `REPORTDATA` or `MRTD` than the TD quote
    /// (`Binding`).
    TdReport,
    /// [`check::ATTESTATION_KEY`](crate::check::ATTESTATION_KEY): the
    /// runtime claims do not parse, or carry no single RSA signing key
    /// `HCLAkPub` (`Decode`, `Trust`).
    AttestationKey,
    /// [`check::QUOTE`](crate::check::QUOTE): the quote's `TPMS_ATTEST`
    /// does not parse, or selects other PCRs than the values sent (`Decode`).
    Quote,
    /// [`check::QUOTE_SIGNATURE`](crate::check::QUOTE_SIGNATURE): the
    /// quote's signature does not verify under `HCLAkPub` (`Signature`).
    QuoteSignature,
    /// [`check::NONCE`](crate::check::NONCE): the quote's `extraData` is
    /// not the session's nonce (`Binding`).
    Nonce,
    /// [`check::PCR_DIGEST`](crate::check::PCR_DIGEST): the PCR values do
    /// not hash to the quote's `pcrDigest` (`Signature`).
    PcrDigest,
    /// A policy that leaves the image unpinned, or names PCRs outside the
    /// quote (`Policy`).
    Policy,
    /// PCR 15 is not all zero where the validator requires an unmarked
    /// node (`Policy`).
    Marked,
    /// The issuer could not read the HCL report or quote with the vTPM
    /// (`Issue`).
    Issue,
}
