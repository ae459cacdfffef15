//! The verifier's side of attestation, as confboot's binaries configure
//! it: which variants a service accepts from its peer and from which
//! files it reads their policies ([`config`]), how a node checks the
//! control plane it asks for a ticket or for peer updates
//! ([`join_service`]), and the node agent's verify service with the check
//! `confboot verify` makes of a node's answer ([`verify`]).
//!
//! It composes the crates below it: the evidence contract
//! (`confboot-attest`), the variants (`confboot-vtpm`, `confboot-snp`,
//! `confboot-tdx`), the signed reference-value sets (`confboot-appraisal`)
//! and aTLS (`confboot-atls`). The help texts of the options that name
//! these settings are here too ([`help`]), so that every binary that takes
//! them describes them alike.

pub mod config;
pub mod help;
pub mod join_service;
pub mod verify;

/// The typed reason of the refusals this crate makes itself, carried in
/// the [`AttestationError`](confboot_attest::AttestationError)'s
/// [`Detail`](confboot_attest::Detail) (both are `Policy` refusals).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum VerifierRefusal {
    /// The reference-value set a join service presents is not signed by a
    /// pinned release key, not current, or has no vTPM values
    /// ([`join_service::PresentedSetValidator`]).
    PresentedSet,
    /// The join service is neither this node's image nor the image of the
    /// set it presents ([`join_service::PresentedSetValidator`]).
    NotOwnImageNorPresentedSet,
}
