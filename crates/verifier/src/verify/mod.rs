//! The verify service: a bootstrapped node answers attestation requests at
//! any time (Constellation's verification service), and an admin checks
//! the answer.
//!
//! The contract, in one place:
//!
//! - **connection**: aTLS ([`confboot_atls`], ALPN `confboot/2`) on the
//!   node agent's port ([`DEFAULT_VERIFY_PORT`](confboot_proto::DEFAULT_VERIFY_PORT)):
//!   a TLS 1.3 handshake with a certificate the agent makes for that
//!   handshake; the caller does not attest (it sends the empty attestation
//!   message);
//! - **binding**: the agent attests as the server, its evidence's
//!   `extra_data` the session's exporter under `EXPORTER-confboot-attestation`
//!   for the server's role ([`confboot_atls::binding`]), the join path's
//!   binding: evidence made for one session (a relay's session with the
//!   node, a recorded earlier one) carries the wrong value on any other;
//! - **answer**: the attestation message itself (`confboot.atls.Attestation`:
//!   variant and evidence, at most 64 KiB), which carries all a verifier
//!   needs: a vTPM quote with the firmware's event log, or an SEV-SNP
//!   report with its certificates. No call follows: the agent's router
//!   is empty, and a connection ends when the caller closes it or its
//!   idle bound passes.
//!
//! [`check_node`] verifies a document (signature, binding, AK trust, the
//! event log's replay) and lays every PCR of the policy and the cluster's
//! mark in PCR 15 side by side in a [`NodeReport`]: the table `confboot
//! verify` prints. [`service`] holds the socket side: the agent's server
//! and the admin's client.

mod report;
pub mod service;

use confboot_attest::Variant;

pub use report::{NodeReport, PcrRow, check_node};

/// A node's evidence as the verify service sent it: which kind, and the
/// evidence itself (bound to the session it was sent on, see
/// [`service::SessionEvidence`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AttestationDocument {
    /// The attestation variant of the evidence.
    pub variant: Variant,
    /// The evidence, as the variant's validator reads it.
    pub evidence: Vec<u8>,
}
