//! What proves a control plane is one: the cluster's control-plane role
//! key. Membership (the image and the cluster's mark) is what every node
//! shows, a compromised worker too; what only a control plane may answer
//! (a node's VPN peer list, a generation confirmation) is signed with a key
//! only holders of the master secret derive, and checked by the node with
//! its public half, which the node learns from its checked, sealed ticket
//! (or derives itself from the admin's master secret, on Init and Recover).
//!
//! - **The key**: an Ed25519 key pair whose 32-byte seed is
//!   `HKDF-SHA256(secret = master secret, salt = master salt, info =
//!   "confboot control-plane role key v1")` ([`ControlPlaneKey::derive`]).
//!   Its info has no `key-` prefix, so no id a caller names (a disk UUID)
//!   derives it as a disk key.
//! - **The signature** covers, each length-prefixed after a domain string:
//!   the method's path, the session's binding
//!   (`confboot_atls::binding::session_binding`, an exporter of the aTLS
//!   session only its two ends know), SHA-256 of the request as the client
//!   encoded it and the answer with its signature field empty. An answer
//!   signed for another session, another method or another request does
//!   not verify ([`ControlPlanePublicKey::verify_answer`]).

use prost::Message;
use ring::signature::{ED25519, Ed25519KeyPair, KeyPair, UnparsedPublicKey};

use confboot_kms::{MasterSecret, hkdf_sha256};
use confboot_proto::Method;
use confboot_proto::join::ConfirmGenerationResponse;
use confboot_proto::vpn::GetUpdateResponse;

/// Length of the role key's public half (Ed25519).
pub const CONTROL_PLANE_KEY_LEN: usize = 32;
/// Length of an answer's signature (Ed25519).
pub const ANSWER_SIGNATURE_LEN: usize = 64;
/// Length of a session's binding the signature covers.
pub const SESSION_BINDING_LEN: usize = 32;
/// The HKDF info of the role key's seed.
const ROLE_KEY_INFO: &[u8] = b"confboot control-plane role key v1";
/// What a signed answer's bytes start with.
const ANSWER_DOMAIN: &[u8] = b"confboot control-plane answer v1";

/// Why a role key or a signed answer is refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RoleError {
    /// A public key that is not [`CONTROL_PLANE_KEY_LEN`] bytes, or is
    /// all zeros.
    #[error("a control-plane key of {len} bytes (want {CONTROL_PLANE_KEY_LEN}, not all zeros)")]
    InvalidKey {
        /// Its length.
        len: usize,
    },
    /// The answer carries no signature (its sender holds no role key).
    #[error("the answer to {method} is not signed by a control plane")]
    Unsigned {
        /// The method's path.
        method: &'static str,
    },
    /// The signature does not verify with the cluster's role key for this
    /// session, method, request and answer.
    #[error("the answer to {method} is not signed by a control plane for this session")]
    BadSignature {
        /// The method's path.
        method: &'static str,
    },
}

/// An answer only a control plane may give: a message with a signature
/// field.
pub trait SignedAnswer: Message + Clone {
    /// The signature field.
    fn signature_mut(&mut self) -> &mut Vec<u8>;
}

impl SignedAnswer for GetUpdateResponse {
    fn signature_mut(&mut self) -> &mut Vec<u8> {
        &mut self.signature
    }
}

impl SignedAnswer for ConfirmGenerationResponse {
    fn signature_mut(&mut self) -> &mut Vec<u8> {
        &mut self.signature
    }
}

/// The control-plane role key (its private half: joinsvc's). Never
/// printed.
pub struct ControlPlaneKey(Ed25519KeyPair);

impl ControlPlaneKey {
    /// The role key of the cluster whose master secret is `master` (its
    /// seed is zeroized once the key pair is made).
    pub fn derive(master: &MasterSecret) -> ControlPlaneKey {
        let seed = hkdf_sha256(
            master.key().expose(),
            master.salt().expose(),
            ROLE_KEY_INFO,
            32,
        );
        ControlPlaneKey(
            Ed25519KeyPair::from_seed_unchecked(seed.expose())
                .expect("an Ed25519 seed of 32 bytes"),
        )
    }

    /// The public half, which nodes check answers with.
    pub fn public_key(&self) -> ControlPlanePublicKey {
        let mut key = [0u8; CONTROL_PLANE_KEY_LEN];
        key.copy_from_slice(self.0.public_key().as_ref());
        ControlPlanePublicKey(key)
    }

    /// Signs `answer` to `request` of `method` on the session whose
    /// binding is `session`, into its signature field.
    pub fn sign_answer<Req: Message, Resp: SignedAnswer>(
        &self,
        method: Method<Req, Resp>,
        session: &[u8; SESSION_BINDING_LEN],
        request: &Req,
        answer: &mut Resp,
    ) {
        answer.signature_mut().clear();
        let bytes = signed_bytes(method.path(), session, request, answer);
        *answer.signature_mut() = self.0.sign(&bytes).as_ref().to_vec();
    }
}

impl std::fmt::Debug for ControlPlaneKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ControlPlaneKey(<redacted>)")
    }
}

/// The public half of the control-plane role key (32 bytes).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ControlPlanePublicKey([u8; CONTROL_PLANE_KEY_LEN]);

impl ControlPlanePublicKey {
    /// A key from its bytes: [`CONTROL_PLANE_KEY_LEN`] of them, not all
    /// zeros.
    pub fn from_bytes(bytes: &[u8]) -> Result<ControlPlanePublicKey, RoleError> {
        let key: [u8; CONTROL_PLANE_KEY_LEN] = bytes
            .try_into()
            .map_err(|_| RoleError::InvalidKey { len: bytes.len() })?;
        if key == [0; CONTROL_PLANE_KEY_LEN] {
            return Err(RoleError::InvalidKey { len: bytes.len() });
        }
        Ok(ControlPlanePublicKey(key))
    }

    /// The key's bytes.
    pub fn as_bytes(&self) -> &[u8; CONTROL_PLANE_KEY_LEN] {
        &self.0
    }

    /// Whether `answer` to `request` of `method` carries the role key's
    /// signature for the session whose binding is `session`.
    pub fn verify_answer<Req: Message, Resp: SignedAnswer>(
        &self,
        method: Method<Req, Resp>,
        session: &[u8; SESSION_BINDING_LEN],
        request: &Req,
        answer: &Resp,
    ) -> Result<(), RoleError> {
        let mut unsigned = answer.clone();
        let signature = std::mem::take(unsigned.signature_mut());
        if signature.is_empty() {
            return Err(RoleError::Unsigned {
                method: method.path(),
            });
        }
        let bytes = signed_bytes(method.path(), session, request, &unsigned);
        UnparsedPublicKey::new(&ED25519, &self.0)
            .verify(&bytes, &signature)
            .map_err(|_| RoleError::BadSignature {
                method: method.path(),
            })
    }
}

/// What a signature covers: the domain, then each part length-prefixed.
fn signed_bytes<Req: Message, Resp: Message>(
    path: &str,
    session: &[u8; SESSION_BINDING_LEN],
    request: &Req,
    unsigned_answer: &Resp,
) -> Vec<u8> {
    let request_digest = ring::digest::digest(&ring::digest::SHA256, &request.encode_to_vec());
    let mut out = ANSWER_DOMAIN.to_vec();
    for part in [
        path.as_bytes(),
        session,
        request_digest.as_ref(),
        &unsigned_answer.encode_to_vec(),
    ] {
        out.extend_from_slice(&(part.len() as u64).to_be_bytes());
        out.extend_from_slice(part);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use confboot_proto::join::ConfirmGenerationRequest;
    use confboot_proto::vpn::GetUpdateRequest;
    use confboot_proto::{CONFIRM_GENERATION, GET_UPDATE};

    fn master(byte: u8) -> MasterSecret {
        MasterSecret::new(vec![byte; 32], vec![7; 32]).unwrap()
    }

    #[test]
    fn an_answer_verifies_for_its_key_session_method_request_and_contents_only() {
        let key = ControlPlaneKey::derive(&master(1));
        let public = key.public_key();
        // The same master secret gives the same key; another, another.
        assert_eq!(ControlPlaneKey::derive(&master(1)).public_key(), public);
        assert_ne!(ControlPlaneKey::derive(&master(2)).public_key(), public);
        // No disk key is the role key's seed.
        assert_ne!(
            master(1)
                .derive_key("confboot control-plane role key v1")
                .expose(),
            hkdf_sha256(&[1; 32], &[7; 32], ROLE_KEY_INFO, 32).expose()
        );
        let session = [5u8; SESSION_BINDING_LEN];
        let request = GetUpdateRequest {
            resource_version: 3,
            own: None,
        };
        let mut answer = GetUpdateResponse {
            resource_version: 4,
            ..Default::default()
        };
        key.sign_answer(GET_UPDATE, &session, &request, &mut answer);
        assert_eq!(answer.signature.len(), ANSWER_SIGNATURE_LEN);
        assert_eq!(
            public.verify_answer(GET_UPDATE, &session, &request, &answer),
            Ok(())
        );
        let refused = Err(RoleError::BadSignature {
            method: GET_UPDATE.path(),
        });
        // Another session (a replay), another request, another answer.
        assert_eq!(
            public.verify_answer(GET_UPDATE, &[6; 32], &request, &answer),
            refused
        );
        let other_request = GetUpdateRequest {
            resource_version: 2,
            own: None,
        };
        assert_eq!(
            public.verify_answer(GET_UPDATE, &session, &other_request, &answer),
            refused
        );
        let mut changed = answer.clone();
        changed.resource_version = 5;
        assert_eq!(
            public.verify_answer(GET_UPDATE, &session, &request, &changed),
            refused
        );
        // Another key; no signature.
        let other = ControlPlaneKey::derive(&master(2)).public_key();
        assert_eq!(
            other.verify_answer(GET_UPDATE, &session, &request, &answer),
            refused
        );
        let mut unsigned = answer.clone();
        unsigned.signature.clear();
        assert_eq!(
            public.verify_answer(GET_UPDATE, &session, &request, &unsigned),
            Err(RoleError::Unsigned {
                method: GET_UPDATE.path()
            })
        );
        // Another method: a confirmation's signature is no peer list's.
        let confirm = ConfirmGenerationRequest::default();
        let mut confirmed = ConfirmGenerationResponse::default();
        key.sign_answer(CONFIRM_GENERATION, &session, &confirm, &mut confirmed);
        assert_eq!(
            public.verify_answer(CONFIRM_GENERATION, &session, &confirm, &confirmed),
            Ok(())
        );
        let mut moved = GetUpdateResponse {
            signature: confirmed.signature.clone(),
            ..Default::default()
        };
        moved.signature = confirmed.signature;
        assert_eq!(
            public.verify_answer(GET_UPDATE, &session, &GetUpdateRequest::default(), &moved),
            refused
        );
        assert!(!format!("{key:?}").contains(&format!("{:?}", public.as_bytes())));
    }

    #[test]
    fn a_public_key_is_32_bytes_not_all_zeros() {
        let public = ControlPlaneKey::derive(&master(1)).public_key();
        assert_eq!(
            ControlPlanePublicKey::from_bytes(public.as_bytes()),
            Ok(public)
        );
        for bad in [&[][..], &[1; 31], &[1; 33], &[0; 32]] {
            assert_eq!(
                ControlPlanePublicKey::from_bytes(bad),
                Err(RoleError::InvalidKey { len: bad.len() })
            );
        }
    }
}
