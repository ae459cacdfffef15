//! Signed documents about evidence, as a verifier takes them in and gives
//! them out; the evidence itself and its checks are the variants' crates'.
//!
//! - In: [`reference`](mod@reference), reference values as signed documents. A release
//!   key signs a CoRIM set of an image's predicted measurements and events
//!   (COSE_Sign1 over deterministic CBOR); a verifier that pins the key
//!   admits a node whose evidence one of the sets it holds admits, and a
//!   directory of such sets ([`reference::sets`]) replaces a policy file
//!   during a rolling upgrade.
//! - Out: [`ear`], attestation results. The outcome of an appraisal (the
//!   checks of `confboot-snp` and `confboot-tdx`, a vTPM validator's
//!   verdict) as a signed EAR JWT with an AR4SI trust vector, which a
//!   relying party reads without knowing the variant.
//!
//! Both sides speak the evidence contract of `confboot-attest` (variants,
//! measurements, [`MeasurementPolicy`](confboot_attest::MeasurementPolicy))
//! and read event lists with `confboot-tpm`'s event log.

pub mod ear;
pub mod reference;

/// The typed reason of the refusals this crate makes, carried in the
/// [`AttestationError`](confboot_attest::AttestationError)'s
/// [`Detail`](confboot_attest::Detail) (both are `Policy` refusals).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AppraisalRefusal {
    /// The measurements match only a retired reference-value set
    /// ([`reference::sets::SetsRefusal::Retired`]).
    SetRetired,
    /// The measurements match none of the reference-value sets
    /// ([`reference::sets::SetsRefusal::NoMatch`]).
    NoSetMatches,
}
