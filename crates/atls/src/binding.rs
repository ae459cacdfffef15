//! What ties a side's evidence to one TLS session: its `extra_data` is the
//! session's exporter (RFC 8446, 7.5; rustls' `export_keying_material`)
//! under confboot's label, with the sender's role and sealing key as the
//! exporter's context:
//!
//! ```text
//! extra_data = TLS-Exporter(EXPORTER_LABEL,
//!                           role ‖ sealing_key,   // 1 or 33 bytes
//!                           32)
//! ```
//!
//! - **The session**: only the two ends of a TLS session know its exporter
//!   (it derives from the handshake's key exchange and transcript). A relay
//!   that terminates TLS on both sides has two sessions with two exporters:
//!   evidence a genuine peer made for its session with the relay carries
//!   the wrong one for the relay's session with the verifier.
//! - **The role** (`1` the server, `2` the client): both ends derive the
//!   same exporter, so without it evidence one side sent could be sent back
//!   to it as the other side's (a reflection).
//! - **The sealing key**: the X25519 public key an attester offers for the
//!   connection (32 bytes) or nothing; bound so that a relay cannot swap in
//!   its own key next to genuine evidence.
//!
//! The exporter hashes its context, so the two context lengths cannot be
//! confused. The node agent's verify service binds its evidence the same
//! way (the server's role, no sealing key): it takes no value from its
//! caller, so it is no oracle for any other session.

use std::ops::Deref;

use rustls::ConnectionCommon;

use super::error::AtlsError;
use super::message::SEALING_KEY_LEN;
use confboot_attest::EXTRA_DATA_LEN;

/// The exporter label of confboot's attestation binding.
pub const EXPORTER_LABEL: &[u8] = b"EXPORTER-confboot-attestation";

/// The exporter label of [`session_binding`]: another label than the
/// evidence's, so neither value can stand for the other.
pub const SESSION_BINDING_LABEL: &[u8] = b"EXPORTER-confboot-signed-answer";

/// Length of [`session_binding`]'s value.
pub const SESSION_BINDING_LEN: usize = 32;

/// Which end of the connection produced the evidence.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// The TLS server.
    Server,
    /// The TLS client.
    Client,
}

impl Role {
    /// The role's byte in the exporter context.
    pub fn tag(self) -> u8 {
        match self {
            Role::Server => 1,
            Role::Client => 2,
        }
    }

    /// The role's name, for errors and logs.
    pub fn name(self) -> &'static str {
        match self {
            Role::Server => "server",
            Role::Client => "client",
        }
    }
}

/// The exporter context: the role's byte, then the sealing key if any.
pub fn context(role: Role, sealing_key: Option<&[u8; SEALING_KEY_LEN]>) -> Vec<u8> {
    let mut c = Vec::with_capacity(1 + SEALING_KEY_LEN);
    c.push(role.tag());
    if let Some(k) = sealing_key {
        c.extend_from_slice(k);
    }
    c
}

/// The `extra_data` the evidence of `role` on the session of `conn` must
/// carry, with `sealing_key` offered next to it. Fails before the
/// handshake is complete.
pub fn extra_data<C, D>(
    conn: &C,
    role: Role,
    sealing_key: Option<&[u8; SEALING_KEY_LEN]>,
) -> Result<[u8; EXTRA_DATA_LEN], AtlsError>
where
    C: Deref<Target = ConnectionCommon<D>>,
{
    conn.export_keying_material(
        [0u8; EXTRA_DATA_LEN],
        EXPORTER_LABEL,
        Some(&context(role, sealing_key)),
    )
    .map_err(|e| AtlsError::Tls(format!("cannot derive the session's exporter: {e}")))
}

/// A value of the session of `conn` that its two ends derive and nobody
/// else: what a signature over an answer binds to, so that it verifies on
/// this session only (a signed answer recorded on another session, or
/// relayed from one, carries another). Fails before the handshake is
/// complete.
pub fn session_binding<C, D>(conn: &C) -> Result<[u8; SESSION_BINDING_LEN], AtlsError>
where
    C: Deref<Target = ConnectionCommon<D>>,
{
    conn.export_keying_material([0u8; SESSION_BINDING_LEN], SESSION_BINDING_LABEL, None)
        .map_err(|e| AtlsError::Tls(format!("cannot derive the session's exporter: {e}")))
}
