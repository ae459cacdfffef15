//! The attestation exchange after the handshake, on either side: making
//! this side's message for the session, and checking the peer's against
//! it (binding in [`super::binding`], messages in [`super::message`]).

use std::ops::Deref;
use std::sync::Arc;

use rustls::ConnectionCommon;

use super::binding::{self, Role};
use super::error::AtlsError;
use super::message::{AttestationMessage, SEALING_KEY_LEN};
use confboot_attest::{Attested, Issuer, Validator};

/// What the peer's message established.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Checked {
    /// What the peer's evidence established; `None` when this side
    /// required no attestation.
    pub(crate) peer: Option<Attested>,
    /// The sealing key the peer's evidence binds, if it offered one.
    pub(crate) sealing_key: Option<[u8; SEALING_KEY_LEN]>,
}

/// This side's message for the session of `conn`: evidence bound to it as
/// `role` (with `sealing_key`, if any) when there is an issuer, else the
/// empty message. `reference_values`, a signed set of this side's image,
/// goes with the evidence.
pub(crate) fn own_message<C, D>(
    conn: &C,
    role: Role,
    issuer: Option<&Arc<dyn Issuer>>,
    sealing_key: Option<[u8; SEALING_KEY_LEN]>,
    reference_values: Option<&[u8]>,
) -> Result<AttestationMessage, AtlsError>
where
    C: Deref<Target = ConnectionCommon<D>>,
{
    let Some(issuer) = issuer else {
        return Ok(AttestationMessage::none());
    };
    let extra = binding::extra_data(conn, role, sealing_key.as_ref())?;
    let evidence = issuer.issue(&extra).map_err(AtlsError::Issue)?;
    Ok(AttestationMessage {
        evidence: Some((issuer.variant(), evidence)),
        sealing_key,
        reference_values: reference_values.map(<[u8]>::to_vec),
    })
}

/// Checks the message the peer (of `peer_role`) sent on the session of
/// `conn` against `validators`; with none, nothing is required or looked
/// at. The validator of the evidence's variant checks it against the
/// `extra_data` of this session, the peer's role and the sealing key the
/// message carries.
pub(crate) fn check<C, D>(
    conn: &C,
    peer_role: Role,
    message: &AttestationMessage,
    validators: &[Arc<dyn Validator>],
) -> Result<Checked, AtlsError>
where
    C: Deref<Target = ConnectionCommon<D>>,
{
    if validators.is_empty() {
        return Ok(Checked::default());
    }
    let attested = message.verify(validators, |key| binding::extra_data(conn, peer_role, key))?;
    Ok(Checked {
        peer: Some(attested),
        sealing_key: message.sealing_key,
    })
}
