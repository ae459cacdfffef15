//! Why the NitroTPM variant refuses: one reason per check of
//! [`check`](crate::check) (two for the validity window and the PCR banks,
//! whose failures differ in kind), carried in the
//! [`AttestationError`](confboot_attest::AttestationError)'s
//! [`Detail`](confboot_attest::Detail).

/// The typed reason of every refusal the NitroTPM variant makes; the
/// category of the error it travels in is named on each.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AwsRefusal {
    /// The evidence file is not the JSON layout of NitroTPM evidence
    /// (`Decode`).
    Evidence,
    /// [`check::DOCUMENT`](crate::check::DOCUMENT): the COSE_Sign1 or its
    /// NSM payload does not decode, or breaks a bound (`Decode`).
    Document,
    /// [`check::DOCUMENT`](crate::check::DOCUMENT): the document is signed
    /// with another algorithm than ES384, or its digest is not SHA384
    /// (`Decode`).
    Algorithm,
    /// [`check::ROOT`](crate::check::ROOT): the first certificate of the
    /// bundle is no pinned AWS Nitro root, byte for byte (`Trust`).
    Root,
    /// [`check::CHAIN`](crate::check::CHAIN): a certificate does not parse,
    /// is not issued by the one before it, or its signature does not verify
    /// (`Trust`).
    Chain,
    /// [`check::VALIDITY`](crate::check::VALIDITY): a certificate of the
    /// chain is not yet valid at the verification time (`Trust`).
    NotYetValid,
    /// [`check::VALIDITY`](crate::check::VALIDITY): a certificate of the
    /// chain has expired at the verification time (`Trust`).
    Expired,
    /// [`check::DOCUMENT_TIME`](crate::check::DOCUMENT_TIME): the document
    /// was signed outside the chain's validity (`Trust`).
    DocumentTime,
    /// [`check::DOCUMENT_SIGNATURE`](crate::check::DOCUMENT_SIGNATURE): the
    /// COSE signature does not verify under the leaf's key (`Signature`).
    DocumentSignature,
    /// [`check::QUOTE_SIGNATURE`](crate::check::QUOTE_SIGNATURE): the
    /// quote's signature does not verify under the attestation key
    /// (`Signature`).
    QuoteSignature,
    /// [`check::QUOTE`](crate::check::QUOTE): the `TPMS_ATTEST` is no quote,
    /// or it does not select the SHA-384 bank's PCRs 0 to 23 (`Decode`).
    Quote,
    /// [`check::ATTESTATION_KEY`](crate::check::ATTESTATION_KEY): the
    /// document binds no key, or another than the attestation key
    /// (`Trust`).
    AttestationKey,
    /// [`check::NONCE`](crate::check::NONCE): the expected nonce is not 32
    /// bytes (`Binding`).
    NonceLength,
    /// [`check::NONCE`](crate::check::NONCE): the document's nonce or the
    /// quote's `extraData` is not the expected nonce (`Binding`).
    Nonce,
    /// [`check::PCR_BANK`](crate::check::PCR_BANK): the evidence's PCRs are
    /// of another bank than the quote's, or not every selected PCR
    /// (`Decode`).
    PcrBank,
    /// [`check::PCR_BANK`](crate::check::PCR_BANK): the evidence gives more
    /// than one bank (`Decode`).
    PcrBankMixed,
    /// [`check::PCR_DIGEST`](crate::check::PCR_DIGEST): the quote's
    /// `pcrDigest` is not the digest of the evidence's PCRs (`Signature`).
    PcrDigest,
    /// [`check::NITRO_PCRS`](crate::check::NITRO_PCRS): the document's PCRs
    /// are not the quoted ones (`Trust`).
    NitroPcrs,
}
