//! The vTPM variant (`qemu-vtpm`): a TPM2_Quote over the SHA-256 PCRs with
//! an attestation key (AK), qualifying data = the 32-byte `extra_data`.
//!
//! - [`VtpmIssuer`] holds one TPM connection (in a `Mutex`), the AK (loaded
//!   from a persistent handle, default 0x81000003, or created in the owner
//!   hierarchy) and the AK certificate from NV 0x01C101D0 when present. It is
//!   the only part that talks to a TPM.
//! - [`VtpmValidator`] needs no TPM: it decodes the evidence with every length
//!   checked, parses `TPMS_ATTEST`, verifies the ECDSA signature with the AK,
//!   the qualifying data, the PCR digest, then trust in the AK ([`AkTrust`]),
//!   that PCR 15 is unmarked (by default), and the measurement policy.
//! - [`AkTrust`] says which AKs are trusted (CA certificates, pinned keys, or
//!   any AK for local QEMU); [`issue_ak_certificate`] plays the cloud
//!   provider that certifies an AK.
//!
//! ```no_run
//! use std::collections::BTreeMap;
//! use confboot_attest::{Issuer, Validator, MeasurementPolicy};
//! use confboot_vtpm::{AkTrust, VtpmIssuer, VtpmValidator};
//! let issuer = VtpmIssuer::new(confboot_tpm::Tpm::open_device()?)?;
//! let validator = VtpmValidator::new(
//!     AkTrust::Pinned(vec![issuer.ak_public_key().to_vec()]),
//!     MeasurementPolicy::new(BTreeMap::new()),
//! );
//! let evidence = issuer.issue(&[7; 32])?;
//! let attested = validator.validate(&evidence, &[7; 32])?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod ak_trust;
mod issuer;
mod refusal;
mod validator;

pub use ak_trust::{
    AkKeyError, AkTrust, AkTrustError, MAX_PINNED_KEYS_LEN, issue_ak_certificate,
    load_ca_certificates,
};
pub use issuer::{
    EventLogSource, FIRMWARE_EVENT_LOG_PATH, ISSUE_ATTEMPTS, VtpmIssuer, quoted_pcrs,
};
pub use refusal::VtpmRefusal;
pub use validator::{
    MAX_AK_CERT_LEN, MAX_EVIDENCE_EVENT_LOG_LEN, MAX_EVIDENCE_LEN, VtpmValidator,
    carried_event_list, encode_evidence, encode_evidence_with_log,
};
