//! The AWS NitroTPM attestation variant.
//!
//! On an EC2 instance with NitroTPM, the Nitro Security Module signs an
//! attestation document (COSE_Sign1, ES384) with a short-lived instance
//! certificate chained to the AWS Nitro root. The document binds the TPM's
//! attestation key (`public_key`), the requester's nonce and the TPM's
//! SHA-384 PCRs; the TPM quote that attestation key signs carries the same
//! nonce and a digest of the same PCRs. [`verify::run_checks`] checks each
//! link, one function per check, and refuses with an [`AwsRefusal`].
//!
//! Every input is bounded: the evidence file
//! ([`evidence::MAX_EVIDENCE_JSON_LEN`]), the document
//! ([`document::MAX_DOCUMENT_LEN`]) and each of its fields, and the CBOR
//! reader's depth and item count ([`cbor::Limits`]). The certificates are
//! checked at the caller's time, so that recorded evidence can be examined
//! at the time it was made.

pub mod cbor;
pub mod certs;
pub mod document;
pub mod evidence;
mod refusal;
pub mod verify;

pub use document::{CoseSign1, DocumentError, NsmDocument};
pub use evidence::{EvidenceError, NitroEvidence, PcrBank};
pub use refusal::AwsRefusal;
pub use verify::{NitroRoots, NitroVerified, check, run_checks};

/// The AWS Nitro Enclaves root G1 (P-384, valid 2019-10-28 to 2049-10-28,
/// SHA-256 fingerprint `641a0321…8f79bb5b`), as AWS publishes it; the root
/// a NitroTPM document's bundle starts with.
pub const AWS_NITRO_ROOT_G1_PEM: &str = include_str!("../testdata/aws-nitro-root.pem");
