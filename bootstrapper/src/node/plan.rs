//! The first decision: from what the state disk holds, which server the
//! node runs for the admin and which ticket its join client asks for.

use confboot_attest::Attested;
use confboot_cluster::ticket::{JoinTicket, RejoinTicket};
use confboot_disk::DiskState;

use super::NodeError;

/// The server the node runs for the admin while its join client asks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AdminApi {
    /// A blank disk: the admin's Init may make this the first control plane.
    Init,
    /// An initialized disk: the admin's Recover opens it when no join
    /// service can.
    Recover,
}

impl AdminApi {
    /// Its name in logs: `init` or `recovery`.
    pub fn name(self) -> &'static str {
        match self {
            AdminApi::Init => "init",
            AdminApi::Recover => "recovery",
        }
    }
}

/// What the node asks a join service for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TicketRequest {
    /// A first join: the disk is blank and will be formatted with this UUID.
    Join {
        /// The UUID the state disk will get.
        disk_uuid: String,
        /// Whether the node becomes a control-plane node.
        is_control_plane: bool,
    },
    /// A rejoin after a reboot: the disk is formatted already.
    Rejoin {
        /// The state disk's UUID.
        disk_uuid: String,
    },
}

/// What a join service answered, its secrets opened (not checked yet:
/// [`Node::check_ticket`](super::Node::check_ticket)).
#[derive(Clone, Debug)]
pub enum Ticket {
    /// For a first join.
    Join(JoinTicket),
    /// For a rejoin.
    Rejoin(RejoinTicket),
}

/// A ticket as it arrived: what the join service answered and what it
/// attested about itself in the handshake (`None`: it was not attested).
pub struct IssuedTicket {
    /// The answer.
    pub ticket: Ticket,
    /// The join service's attested measurements.
    pub service: Option<Attested>,
}

/// How a node checks the join service a ticket came from, beyond the aTLS
/// handshake's check of its image.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum JoinServiceCheck {
    /// The join service's attested PCR 15 must hold exactly the mark of the
    /// cluster the ticket is for (the cluster id derived from the ticket's
    /// measurement secret and salt): only a bootstrapped member of that
    /// cluster can have it. The default.
    #[default]
    ClusterMark,
    /// No check at all: any join service's ticket is taken (a host that
    /// answers first hands the node a key it knows). Each use is logged as
    /// a warning.
    InsecureNone,
}

/// How the node bootstraps: both halves run at once and race for the
/// nodelock.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Plan {
    /// The admin's server.
    pub admin_api: AdminApi,
    /// The join client's request.
    pub request: TicketRequest,
}

/// The plan for a disk in `state`; `bootstrapped` says whether a LUKS
/// disk's header records a completed first boot. `new_disk_uuid` names a
/// blank disk (it is called only for one).
///
/// - blank: the Init API, and a join ticket for a new UUID;
/// - LUKS, first boot recorded complete: the Recover API, and a rejoin ticket;
/// - LUKS, no such record: a first boot that was interrupted (killed between
///   formatting and the cluster step) is finished: the Init API and a join
///   ticket for the header's UUID (the same UUID gives the same key, so the
///   disk is opened, never formatted again);
/// - neither blank nor LUKS2: no plan, nothing may touch it.
pub fn plan_for(
    state: &DiskState,
    bootstrapped: bool,
    is_control_plane: bool,
    new_disk_uuid: impl FnOnce() -> String,
) -> Result<Plan, NodeError> {
    match state {
        DiskState::Blank => Ok(Plan {
            admin_api: AdminApi::Init,
            request: TicketRequest::Join {
                disk_uuid: new_disk_uuid(),
                is_control_plane,
            },
        }),
        DiskState::Luks { uuid } if bootstrapped => Ok(Plan {
            admin_api: AdminApi::Recover,
            request: TicketRequest::Rejoin {
                disk_uuid: uuid.clone(),
            },
        }),
        DiskState::Luks { uuid } => Ok(Plan {
            admin_api: AdminApi::Init,
            request: TicketRequest::Join {
                disk_uuid: uuid.clone(),
                is_control_plane,
            },
        }),
        DiskState::Unrecognized { reason } => Err(NodeError::UnrecognizedDisk {
            reason: reason.clone(),
        }),
    }
}
