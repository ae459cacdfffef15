//! The GCP vTPM attestation variant.
//!
//! A GCE VM's vTPM holds an attestation key whose certificate is chained to
//! Google's EK/AK CA. An attestation (go-tpm-tools' `Attestation` protobuf,
//! read here through our own minimal definition) carries the AK's public
//! area and certificate, one quote per PCR bank and the firmware's event
//! log. [`verify::run_checks`] checks each link, one function per check,
//! and refuses with a [`GcpRefusal`].
//!
//! Every input is bounded ([`attestation::MAX_ATTESTATION_LEN`] and each
//! field's bound); certificates are checked at the caller's time.

pub mod attestation;
pub mod certs;
mod refusal;
pub mod tpm;
pub mod verify;

/// The prost messages of `proto/attestation.proto`.
pub mod pb {
    #![allow(missing_docs)]
    include!(concat!(env!("OUT_DIR"), "/confboot.gcp.rs"));
}

pub use attestation::GcpAttestation;
pub use refusal::GcpRefusal;
pub use verify::{GcpRoots, GcpVerified, check, run_checks};
