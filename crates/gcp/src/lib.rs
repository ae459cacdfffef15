//! The GCP vTPM attestation variant.
