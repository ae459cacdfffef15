//! What a node checks in a join service's answer before it commits to it:
//! the shape of a join or rejoin ticket, and that the service that sent it
//! proved membership of the ticket's cluster.
//!
//! The bootstrapper's node applies these checks to every ticket it gets
//! (`Node::check_ticket`); they are plain functions of the ticket and the
//! service's attestation, so they are tested and fuzzed without a node.

use confboot_proto::join::{IssueJoinTicketResponse, IssueRejoinTicketResponse};

use confboot_attest::Attested;
use confboot_attest::tpm::{CLUSTER_ID_PCR, marked_pcr15};
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
/// attested PCR 15 (`service`, `None` if it did not attest) holds the mark
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

/// Whether an attested service's PCR 15 holds the mark of `cluster_id`
/// (it is a bootstrapped member of that cluster).
pub fn check_member_mark(cluster_id: &[u8], service: Option<&Attested>) -> Result<(), TicketError> {
    let Some(service) = service else {
        return Err(TicketError::NotMember("it did not attest".into()));
    };
    match service.measurements.get(&CLUSTER_ID_PCR) {
        None => Err(TicketError::NotMember(format!(
            "its attestation has no PCR {CLUSTER_ID_PCR}"
        ))),
        Some(v) if v[..] == marked_pcr15(cluster_id)[..] => Ok(()),
        Some(_) => Err(TicketError::NotMember(format!(
            "its PCR {CLUSTER_ID_PCR} is not the mark of the ticket's cluster"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use confboot_attest::Variant;

    fn join(secret: &[u8], salt: &[u8], key: &[u8]) -> IssueJoinTicketResponse {
        let mut t = IssueJoinTicketResponse::default();
        t.measurement_secret = secret.to_vec();
        t.measurement_salt = salt.to_vec();
        t.state_disk_key = key.to_vec();
        t
    }

    fn service(pcr15: Option<Vec<u8>>) -> Attested {
        Attested {
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
}
