//! What a node checks in a join service's answer before it commits to it:
//! the shape of a join or rejoin ticket, and that the service that sent it
//! proved membership of the ticket's cluster. And the sealing of a
//! ticket's secrets to the node's key: the join service seals them
//! ([`seal_join_ticket`], [`seal_rejoin_ticket`]) to the X25519 key the
//! node's evidence bound, the node opens them with its private key
//! ([`open_join_ticket`], [`open_rejoin_ticket`]), so an answer read
//! anywhere but inside the attested VM carries no usable secret.
//!
//! The bootstrapper's node applies these checks to every ticket it gets
//! (`Node::check_ticket`); they are plain functions of the ticket and the
//! service's attestation, so they are tested and fuzzed without a node.

use prost::Message;

use confboot_kms::seal::{SEALING_KEY_LEN, SealError, SealedKind, SealingKeyPair, seal};
use confboot_proto::join::{IssueJoinTicketResponse, IssueRejoinTicketResponse, TicketSecrets};
use zeroize::Zeroizing;

use confboot_attest::Attested;
use confboot_disk::MEASUREMENT_SALT_LEN;
use confboot_kms::derive_cluster_id;

/// Length of a state-disk key in a ticket.
pub const STATE_DISK_KEY_LEN: usize = 32;

/// Why a ticket is thrown away.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum TicketError {
    /// The ticket itself is unusable (a field missing or of the wrong size).
    #[error("unusable ticket: {0}")]
    Unusable(String),
    /// The service that sent it did not prove membership of its cluster.
    #[error("the join service is no member: {0}")]
    NotMember(String),
    /// Its secrets are not sealed to this node: none sealed, or some sent
    /// in the clear.
    #[error("the ticket's secrets are not sealed to this node: {0}")]
    NotSealed(&'static str),
    /// Its sealed secrets do not open with this node's key, as this kind.
    #[error("the ticket's sealed secrets: {0}")]
    Sealed(#[from] SealError),
}

/// Seals the secrets of a join ticket (state disk key, measurement secret,
/// token, control-plane files) to `recipient` into its `sealed_secrets`,
/// and empties their plaintext fields. What stays in the clear is what the
/// host may see: the salt, the kubelet certificate, endpoints, versions,
/// the CA hash, the VPN address.
pub fn seal_join_ticket(
    ticket: &mut IssueJoinTicketResponse,
    recipient: &[u8; SEALING_KEY_LEN],
) -> Result<(), SealError> {
    let secrets = TicketSecrets {
        state_disk_key: std::mem::take(&mut ticket.state_disk_key),
        measurement_secret: std::mem::take(&mut ticket.measurement_secret),
        token: std::mem::take(&mut ticket.token),
        control_plane_files: std::mem::take(&mut ticket.control_plane_files),
    };
    ticket.sealed_secrets = seal_secrets(&secrets, recipient, SealedKind::JoinTicket)?;
    Ok(())
}

/// Seals the secrets of a rejoin ticket (state disk key, measurement
/// secret) to `recipient` into its `sealed_secrets`, and empties their
/// plaintext fields.
pub fn seal_rejoin_ticket(
    ticket: &mut IssueRejoinTicketResponse,
    recipient: &[u8; SEALING_KEY_LEN],
) -> Result<(), SealError> {
    let secrets = TicketSecrets {
        state_disk_key: std::mem::take(&mut ticket.state_disk_key),
        measurement_secret: std::mem::take(&mut ticket.measurement_secret),
        token: String::new(),
        control_plane_files: Vec::new(),
    };
    ticket.sealed_secrets = seal_secrets(&secrets, recipient, SealedKind::RejoinTicket)?;
    Ok(())
}

fn seal_secrets(
    secrets: &TicketSecrets,
    recipient: &[u8; SEALING_KEY_LEN],
    kind: SealedKind,
) -> Result<Vec<u8>, SealError> {
    seal(recipient, kind, &Zeroizing::new(secrets.encode_to_vec()))
}

/// Opens the sealed secrets of a join ticket with `key` (the node's, for
/// this connection) and puts them in their fields. Refuses a ticket with
/// no sealed secrets, with any secret in the clear, or whose sealed
/// secrets do not open as a join ticket's or do not decode.
pub fn open_join_ticket(
    ticket: &mut IssueJoinTicketResponse,
    key: &SealingKeyPair,
) -> Result<(), TicketError> {
    if !ticket.state_disk_key.is_empty()
        || !ticket.measurement_secret.is_empty()
        || !ticket.token.is_empty()
        || !ticket.control_plane_files.is_empty()
    {
        return Err(TicketError::NotSealed("secrets sent in the clear"));
    }
    let mut secrets = open_secrets(&ticket.sealed_secrets, key, SealedKind::JoinTicket)?;
    ticket.state_disk_key = std::mem::take(&mut secrets.state_disk_key);
    ticket.measurement_secret = std::mem::take(&mut secrets.measurement_secret);
    ticket.token = std::mem::take(&mut secrets.token);
    ticket.control_plane_files = std::mem::take(&mut secrets.control_plane_files);
    ticket.sealed_secrets = Vec::new();
    Ok(())
}

/// Opens the sealed secrets of a rejoin ticket with `key` and puts them in
/// their fields. Refuses as [`open_join_ticket`] does, and sealed secrets
/// that carry a join ticket's token or files.
pub fn open_rejoin_ticket(
    ticket: &mut IssueRejoinTicketResponse,
    key: &SealingKeyPair,
) -> Result<(), TicketError> {
    if !ticket.state_disk_key.is_empty() || !ticket.measurement_secret.is_empty() {
        return Err(TicketError::NotSealed("secrets sent in the clear"));
    }
    let mut secrets = open_secrets(&ticket.sealed_secrets, key, SealedKind::RejoinTicket)?;
    if !secrets.token.is_empty() || !secrets.control_plane_files.is_empty() {
        return Err(TicketError::Unusable(
            "a rejoin ticket's sealed secrets carry a token or files".into(),
        ));
    }
    ticket.state_disk_key = std::mem::take(&mut secrets.state_disk_key);
    ticket.measurement_secret = std::mem::take(&mut secrets.measurement_secret);
    ticket.sealed_secrets = Vec::new();
    Ok(())
}

/// Opens and decodes sealed ticket secrets (the plaintext is zeroized
/// once decoded; the decoded message zeroizes its own).
fn open_secrets(
    sealed: &[u8],
    key: &SealingKeyPair,
    kind: SealedKind,
) -> Result<TicketSecrets, TicketError> {
    if sealed.is_empty() {
        return Err(TicketError::NotSealed("no sealed secrets"));
    }
    let plain = key.open(kind, sealed)?;
    TicketSecrets::decode(plain.expose())
        .map_err(|e| TicketError::Unusable(format!("the sealed secrets do not decode: {e}")))
}

fn check_key(state_disk_key: &[u8]) -> Result<(), TicketError> {
    let key_len = state_disk_key.len();
    if key_len != STATE_DISK_KEY_LEN {
        return Err(TicketError::Unusable(format!(
            "the state disk key is {key_len} bytes, not {STATE_DISK_KEY_LEN}"
        )));
    }
    Ok(())
}

/// Checks a join ticket's fields: a measurement secret, a measurement salt
/// of a length a disk header keeps ([`MEASUREMENT_SALT_LEN`]), a state-disk
/// key of [`STATE_DISK_KEY_LEN`] bytes.
pub fn check_join_ticket(t: &IssueJoinTicketResponse) -> Result<(), TicketError> {
    if t.measurement_secret.is_empty() {
        return Err(TicketError::Unusable("no measurement secret".into()));
    }
    check_salt(&t.measurement_salt)?;
    check_key(&t.state_disk_key)
}

/// Checks a rejoin ticket's fields: a measurement secret, a measurement
/// salt of a length in [`MEASUREMENT_SALT_LEN`] (the node marks itself with
/// the ticket's salt, never its disk header's) and a state-disk key of
/// [`STATE_DISK_KEY_LEN`] bytes.
pub fn check_rejoin_ticket(t: &IssueRejoinTicketResponse) -> Result<(), TicketError> {
    if t.measurement_secret.is_empty() {
        return Err(TicketError::Unusable("no measurement secret".into()));
    }
    check_salt(&t.measurement_salt)?;
    check_key(&t.state_disk_key)
}

fn check_salt(salt: &[u8]) -> Result<(), TicketError> {
    if !MEASUREMENT_SALT_LEN.contains(&salt.len()) {
        return Err(TicketError::Unusable(format!(
            "a measurement salt of {} bytes",
            salt.len()
        )));
    }
    Ok(())
}

/// The join service must prove membership of the ticket's cluster: its
/// attested mark register (PCR 15, `RTMR3`; `service`, `None` if it did
/// not attest) holds the mark
/// of the cluster id that `measurement_secret` gives with
/// `measurement_salt` (the ticket's, for a join and a rejoin alike). A host's own service has the node's image at best, never that
/// mark.
pub fn check_cluster_mark(
    measurement_secret: &[u8],
    measurement_salt: &[u8],
    service: Option<&Attested>,
) -> Result<(), TicketError> {
    check_member_mark(
        &derive_cluster_id(measurement_secret, measurement_salt),
        service,
    )
}

/// Whether an attested service's mark register holds the mark of
/// `cluster_id` (it is a bootstrapped member of that cluster): PCR 15 for
/// a vTPM service, `RTMR3` for a TDX one
/// ([`ClusterMarks`](crate::mark::ClusterMarks)); an SEV-SNP
/// service has no such register and is never believed.
pub fn check_member_mark(cluster_id: &[u8], service: Option<&Attested>) -> Result<(), TicketError> {
    use crate::mark::{ClusterMarks, MarkState, mark_register};
    let Some(service) = service else {
        return Err(TicketError::NotMember("it did not attest".into()));
    };
    let register = mark_register(service.variant).map_or("mark register", |(name, _, _)| name);
    match ClusterMarks::of(cluster_id).state_of(service) {
        Err(e) => Err(TicketError::NotMember(e.to_string())),
        Ok(MarkState::Member) => Ok(()),
        Ok(MarkState::Unmarked | MarkState::Foreign) => Err(TicketError::NotMember(format!(
            "its {register} is not the mark of the ticket's cluster"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::mark::marked_pcr15;
    use confboot_attest::Variant;
    use confboot_tpm::CLUSTER_ID_PCR;

    fn join(secret: &[u8], salt: &[u8], key: &[u8]) -> IssueJoinTicketResponse {
        let mut t = IssueJoinTicketResponse::default();
        t.measurement_secret = secret.to_vec();
        t.measurement_salt = salt.to_vec();
        t.state_disk_key = key.to_vec();
        t
    }

    fn service(pcr15: Option<Vec<u8>>) -> Attested {
        Attested {
            set_verdict: None,
            warnings: Vec::new(),
            variant: Variant::QemuVtpm,
            measurements: pcr15.into_iter().map(|v| (CLUSTER_ID_PCR, v)).collect(),
        }
    }

    #[test]
    fn ticket_fields_are_checked() {
        assert_eq!(check_join_ticket(&join(&[1], &[2; 32], &[3; 32])), Ok(()));
        for (t, why) in [
            (join(&[], &[2; 32], &[3; 32]), "no measurement secret"),
            (
                join(&[1], &[2; 15], &[3; 32]),
                "a measurement salt of 15 bytes",
            ),
            (
                join(&[1], &[2; 257], &[3; 32]),
                "a measurement salt of 257 bytes",
            ),
            (
                join(&[1], &[2; 32], &[3; 31]),
                "the state disk key is 31 bytes, not 32",
            ),
        ] {
            assert_eq!(
                check_join_ticket(&t),
                Err(TicketError::Unusable(why.into()))
            );
        }
        let rejoin = |secret: &[u8], salt: &[u8], key: &[u8]| IssueRejoinTicketResponse {
            measurement_secret: secret.to_vec(),
            state_disk_key: key.to_vec(),
            generation: 0,
            measurement_salt: salt.to_vec(),
            sealed_secrets: Vec::new(),
        };
        assert_eq!(
            check_rejoin_ticket(&rejoin(&[1], &[2; 32], &[3; 32])),
            Ok(())
        );
        assert!(check_rejoin_ticket(&rejoin(&[], &[2; 32], &[3; 32])).is_err());
        assert!(check_rejoin_ticket(&rejoin(&[1], &[2; 32], &[3; 33])).is_err());
        for salt in [&[][..], &[2; 15], &[2; 257]] {
            assert_eq!(
                check_rejoin_ticket(&rejoin(&[1], salt, &[3; 32])),
                Err(TicketError::Unusable(format!(
                    "a measurement salt of {} bytes",
                    salt.len()
                )))
            );
        }
    }

    #[test]
    fn only_a_member_of_the_tickets_cluster_is_believed() {
        let mark = marked_pcr15(&derive_cluster_id(&[1; 32], &[2; 32])).to_vec();
        assert_eq!(
            check_cluster_mark(&[1; 32], &[2; 32], Some(&service(Some(mark.clone())))),
            Ok(())
        );
        let other = marked_pcr15(&derive_cluster_id(&[1; 32], &[9; 32])).to_vec();
        for s in [
            None,
            Some(service(None)),
            Some(service(Some(vec![0; 32]))),
            Some(service(Some(other))),
            Some(Attested {
                set_verdict: None,
                warnings: Vec::new(),
                variant: Variant::SevSnp,
                measurements: BTreeMap::from([(0, mark)]),
            }),
        ] {
            assert!(matches!(
                check_cluster_mark(&[1; 32], &[2; 32], s.as_ref()),
                Err(TicketError::NotMember(_))
            ));
        }
    }

    #[test]
    fn a_tdx_join_service_proves_membership_with_rtmr3() {
        use crate::mark::{TDX_MARK_INDEX, marked_rtmr3};
        let td = |index: u32, rtmr3: Vec<u8>| Attested {
            set_verdict: None,
            warnings: Vec::new(),
            variant: Variant::Tdx,
            measurements: BTreeMap::from([(0, vec![0x7d; 48]), (index, rtmr3)]),
        };
        let id = derive_cluster_id(&[1; 32], &[2; 32]);
        assert_eq!(
            check_cluster_mark(
                &[1; 32],
                &[2; 32],
                Some(&td(TDX_MARK_INDEX, marked_rtmr3(&id).to_vec()))
            ),
            Ok(())
        );
        let other = marked_rtmr3(&derive_cluster_id(&[1; 32], &[9; 32])).to_vec();
        for (s, why) in [
            (td(TDX_MARK_INDEX, vec![0; 48]), "its RTMR3 is not the mark"),
            (td(TDX_MARK_INDEX, other), "its RTMR3 is not the mark"),
            // The vTPM form of the mark, or in PCR 15's place, is not RTMR3's.
            (
                td(TDX_MARK_INDEX, marked_pcr15(&id).to_vec()),
                "no RTMR3 of 48 bytes",
            ),
            (
                td(CLUSTER_ID_PCR, marked_rtmr3(&id).to_vec()),
                "no RTMR3 of 48 bytes",
            ),
        ] {
            let e = check_cluster_mark(&[1; 32], &[2; 32], Some(&s)).unwrap_err();
            assert!(
                matches!(&e, TicketError::NotMember(m) if m.contains(why)),
                "{e}"
            );
        }
    }

    fn full_join_ticket() -> IssueJoinTicketResponse {
        let mut t = join(&[1; 32], &[2; 32], &[3; 32]);
        t.token = "abcdef.0123456789abcdef".into();
        t.control_plane_files = vec![confboot_proto::join::ControlPlaneCertOrKey {
            name: "ca.key".into(),
            data: b"-----BEGIN EC PRIVATE KEY-----".to_vec(),
        }];
        t.api_server_endpoint = "10.0.0.1:6443".into();
        t
    }

    #[test]
    fn sealed_join_tickets_carry_no_secret_in_the_clear_and_open_whole() {
        let node = SealingKeyPair::generate();
        let mut t = full_join_ticket();
        seal_join_ticket(&mut t, &node.public_key()).unwrap();
        assert!(t.state_disk_key.is_empty() && t.measurement_secret.is_empty());
        assert!(t.token.is_empty() && t.control_plane_files.is_empty());
        assert_eq!(
            t.api_server_endpoint, "10.0.0.1:6443",
            "what is public stays"
        );
        let wire = t.encode_to_vec();
        for secret in [
            &[3u8; 32][..],
            &[1; 32],
            b"abcdef.0123456789abcdef",
            b"BEGIN EC",
        ] {
            assert!(
                !wire.windows(secret.len()).any(|w| w == secret),
                "a secret shows in the sealed ticket"
            );
        }
        let mut opened = IssueJoinTicketResponse::decode(&wire[..]).unwrap();
        open_join_ticket(&mut opened, &node).unwrap();
        assert_eq!(opened, full_join_ticket());
    }

    #[test]
    fn tickets_not_sealed_to_this_node_are_refused() {
        let node = SealingKeyPair::generate();
        let other = SealingKeyPair::generate();
        // Nothing sealed.
        let mut plain = full_join_ticket();
        assert_eq!(
            open_join_ticket(&mut plain, &node),
            Err(TicketError::NotSealed("secrets sent in the clear"))
        );
        let mut empty = IssueJoinTicketResponse::default();
        assert_eq!(
            open_join_ticket(&mut empty, &node),
            Err(TicketError::NotSealed("no sealed secrets"))
        );
        // Sealed, with a secret in the clear beside.
        let mut beside = full_join_ticket();
        seal_join_ticket(&mut beside, &node.public_key()).unwrap();
        beside.token = "a host's token".into();
        assert_eq!(
            open_join_ticket(&mut beside, &node),
            Err(TicketError::NotSealed("secrets sent in the clear"))
        );
        // Sealed to another key.
        let mut theirs = full_join_ticket();
        seal_join_ticket(&mut theirs, &other.public_key()).unwrap();
        assert_eq!(
            open_join_ticket(&mut theirs, &node),
            Err(TicketError::Sealed(SealError::DoesNotOpen(
                SealedKind::JoinTicket
            )))
        );
        // A rejoin ticket's sealed secrets in a join ticket, and back.
        let mut rejoin = IssueRejoinTicketResponse {
            state_disk_key: vec![3; 32],
            measurement_secret: vec![1; 32],
            generation: 4,
            measurement_salt: vec![2; 32],
            sealed_secrets: Vec::new(),
        };
        seal_rejoin_ticket(&mut rejoin, &node.public_key()).unwrap();
        let mut swapped = IssueJoinTicketResponse::default();
        swapped.sealed_secrets = rejoin.sealed_secrets.clone();
        assert_eq!(
            open_join_ticket(&mut swapped, &node),
            Err(TicketError::Sealed(SealError::DoesNotOpen(
                SealedKind::JoinTicket
            )))
        );
        let mut joined = full_join_ticket();
        seal_join_ticket(&mut joined, &node.public_key()).unwrap();
        let mut as_rejoin = IssueRejoinTicketResponse::default();
        as_rejoin.sealed_secrets = joined.sealed_secrets.clone();
        assert_eq!(
            open_rejoin_ticket(&mut as_rejoin, &node),
            Err(TicketError::Sealed(SealError::DoesNotOpen(
                SealedKind::RejoinTicket
            )))
        );
        // Truncated.
        let mut cut = IssueRejoinTicketResponse::default();
        cut.sealed_secrets = rejoin.sealed_secrets[..rejoin.sealed_secrets.len() - 1].to_vec();
        assert!(matches!(
            open_rejoin_ticket(&mut cut, &node),
            Err(TicketError::Sealed(SealError::DoesNotOpen(_)))
        ));
        // The genuine one opens.
        open_rejoin_ticket(&mut rejoin, &node).unwrap();
        assert_eq!(rejoin.state_disk_key, vec![3; 32]);
        assert_eq!(rejoin.measurement_secret, vec![1; 32]);
        assert_eq!(rejoin.generation, 4);
        assert!(rejoin.sealed_secrets.is_empty());
    }

    #[test]
    fn a_rejoin_tickets_sealed_secrets_carry_no_join_fields() {
        let node = SealingKeyPair::generate();
        let secrets = TicketSecrets {
            state_disk_key: vec![3; 32],
            measurement_secret: vec![1; 32],
            token: "abcdef.0123456789abcdef".into(),
            control_plane_files: Vec::new(),
        };
        let mut t = IssueRejoinTicketResponse::default();
        t.sealed_secrets =
            seal_secrets(&secrets, &node.public_key(), SealedKind::RejoinTicket).unwrap();
        assert!(matches!(
            open_rejoin_ticket(&mut t, &node),
            Err(TicketError::Unusable(_))
        ));
    }
}
