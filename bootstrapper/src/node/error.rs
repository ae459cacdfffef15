//! Why a node's step failed: one typed enum for every flow. The gRPC
//! mapping is the server wiring's ([`crate::server::status`]); here an
//! error only says what went wrong and whether the node can go on.

use confboot_attest::AttestationError;
use confboot_cluster::ClusterError;
use confboot_cluster::generation::RolledBack;
use confboot_disk::DiskError;

use super::generation::GenerationError;
use super::state_fs::StateFsError;
use super::trusted::StateFileError;
use super::vpn::VpnSetupError;

/// Why an Init, a ticket or a Recover was not applied.
///
/// The variants above [`NodeError::Disk`] are refusals: nothing was changed
/// and the node goes on (the admin may try again, the join client keeps
/// asking). [`NodeError::Disk`], [`NodeError::Mark`], [`NodeError::SshUsers`]
/// and [`NodeError::Cluster`]
/// happen only past the nodelock: there is no way back, see
/// [`NodeError::is_final`].
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum NodeError {
    /// No init-secret hash is configured: this node takes no Init.
    #[error("this node takes no Init (no init-secret hash configured)")]
    InitNotConfigured,
    /// The init secret does not match the configured hash.
    #[error("wrong init secret")]
    WrongInitSecret,
    /// Another Init's secret is being checked (one slow hash at a time);
    /// the caller may try again.
    #[error("another Init is being checked; try again in a moment")]
    InitCheckBusy,
    /// No init-secret hash is configured: this node takes no Recover
    /// (the init secret is what proves the admin of the node's cluster).
    #[error("this node takes no Recover (no init-secret hash configured)")]
    RecoverNotConfigured,
    /// Another Recover is being served (one at a time); the caller may try
    /// again.
    #[error("another Recover is being served; try again in a moment")]
    RecoverBusy,
    /// A request field is malformed.
    #[error("{field}: {reason}")]
    InvalidArgument {
        /// The field (`kms_uri`, `storage_uri`, `measurement_salt`).
        field: &'static str,
        /// What is wrong with it (never its value).
        reason: String,
    },
    /// Another flow took the nodelock first.
    #[error("the node is already bootstrapping ({holder})")]
    AlreadyBootstrapping {
        /// The flow that holds it (`init`, `join`, `recover`).
        holder: &'static str,
    },
    /// Recover on a disk that holds nothing to recover.
    #[error("the state disk is blank: nothing to recover")]
    NothingToRecover,
    /// A join service's ticket cannot be used; it is thrown away.
    #[error("unusable ticket: {0}")]
    BadTicket(String),
    /// The join service that issued a ticket is not a bootstrapped member
    /// of the cluster the ticket is for; the ticket is thrown away.
    #[error("the join service is not a member of the ticket's cluster: {0}")]
    JoinServiceNotMember(String),
    /// The state disk is neither blank nor LUKS2; it is left untouched.
    #[error("the state disk is neither blank nor LUKS2 ({reason}); it is left untouched")]
    UnrecognizedDisk {
        /// What was found (no disk content is quoted).
        reason: String,
    },
    /// Reading the state disk before the nodelock failed (nothing was
    /// changed).
    #[error("{}", state_disk_message(.0))]
    DiskRead(DiskError),
    /// Setting up the state disk past the nodelock failed.
    #[error("{}", state_disk_message(.0))]
    Disk(DiskError),
    /// Marking the node (PCR 15 ← cluster id) failed.
    #[error("cannot mark the node: {0}")]
    Mark(AttestationError),
    /// Keeping or creating the Init's SSH users failed past the nodelock.
    #[error("SSH users: {0}")]
    SshUsers(SshUsersError),
    /// Keeping the VPN key or writing the node agent's VPN file failed
    /// past the nodelock.
    #[error("VPN: {0}")]
    Vpn(VpnSetupError),
    /// The state disk is older than the cluster last saw it (restored from
    /// an old copy): it is refused.
    #[error("{0}")]
    RolledBack(RolledBack),
    /// The state disk's generation could not be read, kept or confirmed.
    #[error("state disk generation: {0}")]
    Generation(GenerationError),
    /// The cluster backend failed.
    #[error("cluster {action} failed: {error}")]
    Cluster {
        /// `init` or `join`.
        action: &'static str,
        /// What the backend said.
        error: ClusterError,
    },
}

/// Why an Init's SSH users were not kept, created or cleared (past the
/// nodelock: final).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SshUsersError {
    /// This node keeps no SSH users.
    #[error("this node takes no SSH users")]
    NotTaken,
    /// No decrypted state device is mapped to keep them on.
    #[error("no decrypted state device to keep them on (--disk-mode header-only)")]
    NoDevice,
    /// The state file system could not be mounted or unmounted.
    #[error("{0}")]
    StateFs(StateFsError),
    /// The kept list was refused (its MAC), or could not be kept or
    /// cleared.
    #[error("{0}")]
    StateFile(StateFileError),
    /// The users could not be created in the OS.
    #[error("creating them: {0}")]
    Create(String),
}

impl NodeError {
    /// The rule for a failed flow: once the nodelock is taken there is no
    /// way back, so an error past it ends the node's bootstrap (the
    /// bootstrapper exits with it); a refusal before it leaves the node
    /// waiting for another Init, ticket or Recover.
    pub fn is_final(&self) -> bool {
        matches!(
            self,
            NodeError::Disk(_)
                | NodeError::Mark(_)
                | NodeError::SshUsers(_)
                | NodeError::Vpn(_)
                | NodeError::RolledBack(_)
                | NodeError::Generation(_)
                | NodeError::Cluster { .. }
        )
    }

    /// Whether the error says that a key does not open the state disk.
    pub fn is_wrong_key(&self) -> bool {
        matches!(
            self,
            NodeError::Disk(DiskError::WrongKey) | NodeError::DiskRead(DiskError::WrongKey)
        )
    }
}

/// `the key does not open the state disk` for a wrong key, `state disk: WHY`
/// for any other disk error.
fn state_disk_message(error: &DiskError) -> String {
    match error {
        DiskError::WrongKey => "the key does not open the state disk".to_string(),
        other => format!("state disk: {other}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each refusal and failure prints the text the admin, the join client
    /// and the logs read.
    #[test]
    fn each_error_prints_its_message() {
        let cases = [
            (
                NodeError::InitNotConfigured,
                "this node takes no Init (no init-secret hash configured)",
            ),
            (NodeError::WrongInitSecret, "wrong init secret"),
            (
                NodeError::InitCheckBusy,
                "another Init is being checked; try again in a moment",
            ),
            (
                NodeError::RecoverNotConfigured,
                "this node takes no Recover (no init-secret hash configured)",
            ),
            (
                NodeError::RecoverBusy,
                "another Recover is being served; try again in a moment",
            ),
            (
                NodeError::InvalidArgument {
                    field: "kms_uri",
                    reason: "not a URI".into(),
                },
                "kms_uri: not a URI",
            ),
            (
                NodeError::AlreadyBootstrapping { holder: "join" },
                "the node is already bootstrapping (join)",
            ),
            (
                NodeError::NothingToRecover,
                "the state disk is blank: nothing to recover",
            ),
            (
                NodeError::BadTicket("no token".into()),
                "unusable ticket: no token",
            ),
            (
                NodeError::JoinServiceNotMember("PCR 15".into()),
                "the join service is not a member of the ticket's cluster: PCR 15",
            ),
            (
                NodeError::UnrecognizedDisk {
                    reason: "an ext4".into(),
                },
                "the state disk is neither blank nor LUKS2 (an ext4); it is left untouched",
            ),
            (
                NodeError::DiskRead(DiskError::WrongKey),
                "the key does not open the state disk",
            ),
            (
                NodeError::Disk(DiskError::WrongKey),
                "the key does not open the state disk",
            ),
            (
                NodeError::DiskRead(DiskError::Io(confboot_util::IoFailure::bare(
                    std::io::Error::other("short read"),
                ))),
                "state disk: state disk I/O: short read",
            ),
            (
                NodeError::Disk(DiskError::Io(confboot_util::IoFailure::bare(
                    std::io::Error::other("short write"),
                ))),
                "state disk: state disk I/O: short write",
            ),
            (
                NodeError::Mark(AttestationError::Decode(confboot_attest::Detail::with(
                    &confboot_vtpm::VtpmRefusal::Evidence,
                    "no PCR 15",
                ))),
                "cannot mark the node: malformed evidence: no PCR 15",
            ),
            (
                NodeError::SshUsers(SshUsersError::Create("no home".into())),
                "SSH users: creating them: no home",
            ),
            (
                NodeError::Vpn(VpnSetupError::StateFile(
                    super::super::trusted::StateFileError::NotAGeneration,
                )),
                "VPN: state-generation does not hold a generation",
            ),
            (
                NodeError::RolledBack(RolledBack { found: 1, last: 2 }),
                "state disk rolled back: generation 1, the cluster last issued 2",
            ),
            (
                NodeError::Generation(GenerationError::StateFile(
                    super::super::trusted::StateFileError::NotAGeneration,
                )),
                "state disk generation: state-generation does not hold a generation",
            ),
            (
                NodeError::Cluster {
                    action: "join",
                    error: ClusterError::Io("no kubeadm".into()),
                },
                "cluster join failed: cluster setup I/O: no kubeadm",
            ),
        ];
        for (error, message) in cases {
            assert_eq!(error.to_string(), message, "{error:?}");
        }
    }
}
