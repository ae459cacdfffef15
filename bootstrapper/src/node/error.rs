//! Why a node's step failed: one typed enum for every flow. The gRPC
//! mapping is the server wiring's ([`crate::server::status`]); here an
//! error only says what went wrong and whether the node can go on.

use std::fmt;

use confboot_attest::AttestationError;
use confboot_cluster::ClusterError;
use confboot_disk::DiskError;

/// Why an Init, a ticket or a Recover was not applied.
///
/// The variants above [`NodeError::Disk`] are refusals: nothing was changed
/// and the node goes on (the admin may try again, the join client keeps
/// asking). [`NodeError::Disk`], [`NodeError::Mark`], [`NodeError::SshUsers`]
/// and [`NodeError::Cluster`]
/// happen only past the nodelock: there is no way back, see
/// [`NodeError::is_final`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NodeError {
    /// No init-secret hash is configured: this node takes no Init.
    InitNotConfigured,
    /// The init secret does not match the configured hash.
    WrongInitSecret,
    /// Another Init's secret is being checked (one slow hash at a time);
    /// the caller may try again.
    InitCheckBusy,
    /// A request field is malformed.
    InvalidArgument {
        /// The field (`kms_uri`, `storage_uri`, `measurement_salt`).
        field: &'static str,
        /// What is wrong with it (never its value).
        reason: String,
    },
    /// Another flow took the nodelock first.
    AlreadyBootstrapping {
        /// The flow that holds it (`init`, `join`, `recover`).
        holder: &'static str,
    },
    /// Recover on a disk that holds nothing to recover.
    NothingToRecover,
    /// A join service's ticket cannot be used; it is thrown away.
    BadTicket(String),
    /// The join service that issued a ticket is not a bootstrapped member
    /// of the cluster the ticket is for; the ticket is thrown away.
    JoinServiceNotMember(String),
    /// The state disk is neither blank nor LUKS2; it is left untouched.
    UnrecognizedDisk {
        /// What was found (no disk content is quoted).
        reason: String,
    },
    /// Reading the state disk before the nodelock failed (nothing was
    /// changed).
    DiskRead(DiskError),
    /// Setting up the state disk past the nodelock failed.
    Disk(DiskError),
    /// Marking the node (PCR 15 ← cluster id) failed.
    Mark(AttestationError),
    /// Keeping or creating the Init's SSH users failed past the nodelock.
    SshUsers(String),
    /// Keeping the VPN key or writing the node agent's VPN file failed
    /// past the nodelock.
    Vpn(String),
    /// The cluster backend failed.
    Cluster {
        /// `init` or `join`.
        action: &'static str,
        /// What the backend said.
        error: ClusterError,
    },
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

impl fmt::Display for NodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NodeError::InitNotConfigured => {
                f.write_str("this node takes no Init (no init-secret hash configured)")
            }
            NodeError::WrongInitSecret => f.write_str("wrong init secret"),
            NodeError::InitCheckBusy => {
                f.write_str("another Init is being checked; try again in a moment")
            }
            NodeError::InvalidArgument { field, reason } => write!(f, "{field}: {reason}"),
            NodeError::AlreadyBootstrapping { holder } => {
                write!(f, "the node is already bootstrapping ({holder})")
            }
            NodeError::NothingToRecover => {
                f.write_str("the state disk is blank: nothing to recover")
            }
            NodeError::BadTicket(m) => write!(f, "unusable ticket: {m}"),
            NodeError::JoinServiceNotMember(m) => write!(
                f,
                "the join service is not a member of the ticket's cluster: {m}"
            ),
            NodeError::UnrecognizedDisk { reason } => write!(
                f,
                "the state disk is neither blank nor LUKS2 ({reason}); it is left untouched"
            ),
            NodeError::DiskRead(DiskError::WrongKey) | NodeError::Disk(DiskError::WrongKey) => {
                f.write_str("the key does not open the state disk")
            }
            NodeError::DiskRead(e) | NodeError::Disk(e) => write!(f, "state disk: {e}"),
            NodeError::Mark(e) => write!(f, "cannot mark the node: {e}"),
            NodeError::SshUsers(m) => write!(f, "SSH users: {m}"),
            NodeError::Vpn(m) => write!(f, "VPN: {m}"),
            NodeError::Cluster { action, error } => {
                write!(f, "cluster {action} failed: {error}")
            }
        }
    }
}

impl std::error::Error for NodeError {}
