//! The admin's servers as wiring: the Init and Recover methods call the
//! node's core ([`crate::node`]) and map its errors to gRPC status codes.
//! This is the only place that knows the mapping.

use std::sync::Arc;

use confboot_cluster::ClusterBackend;
use confboot_disk::DiskBackend;
use confboot_proto::init::{
    InitFailureResponse, InitRequest, InitResponse, LogResponseType, init_response,
};
use confboot_proto::recover::{RecoverMessage, RecoverResponse};
use confboot_wire::{Code, Router, Status};
use crossbeam_channel::Sender;

use crate::node::{Node, NodeError, NodeMarker, Outcome};

/// What a flow reports to the main thread: how the node bootstrapped, or
/// the final error that ends it.
pub type FlowResult = Result<Outcome, NodeError>;

/// The gRPC status an admin sees for a node error.
pub fn status(e: &NodeError) -> Status {
    let code = match e {
        NodeError::InvalidArgument { .. } => Code::InvalidArgument,
        NodeError::WrongInitSecret => Code::PermissionDenied,
        NodeError::InitCheckBusy | NodeError::RecoverBusy => Code::Unavailable,
        _ if e.is_wrong_key() => Code::PermissionDenied,
        NodeError::InitNotConfigured
        | NodeError::RecoverNotConfigured
        | NodeError::AlreadyBootstrapping { .. }
        | NodeError::NothingToRecover
        | NodeError::UnrecognizedDisk { .. } => Code::FailedPrecondition,
        NodeError::BadTicket(_) => Code::InvalidArgument,
        NodeError::JoinServiceNotMember(_) => Code::PermissionDenied,
        NodeError::DiskRead(_)
        | NodeError::Disk(_)
        | NodeError::Mark(_)
        | NodeError::SshUsers(_)
        | NodeError::Vpn(_)
        | NodeError::Generation(_)
        | NodeError::Cluster { .. } => Code::Internal,
        NodeError::RolledBack(_) => Code::PermissionDenied,
    };
    Status::new(code, e.to_string())
}

/// The init API: one server-streaming Init whose log lines reach the admin
/// as they happen. A failure past the nodelock is final and reported to the
/// main thread.
pub fn init_router<B, C, M>(node: Arc<Node<B, C, M>>, flows: Sender<FlowResult>) -> Router
where
    B: DiskBackend + 'static,
    C: ClusterBackend + 'static,
    M: NodeMarker + 'static,
{
    Router::new().server_streaming(confboot_proto::INIT, move |_ctx, req: InitRequest, sink| {
        log::info!("Init received");
        let mut send_log = |line: &str| {
            log::info!("init: {line}");
            let _ = sink.send(&InitResponse {
                kind: Some(init_response::Kind::Log(LogResponseType {
                    log: line.as_bytes().to_vec(),
                })),
            });
        };
        match node.init(&req, &mut send_log) {
            Ok(success) => {
                sink.send(&InitResponse {
                    kind: Some(init_response::Kind::InitSuccess(success)),
                })?;
                let _ = flows.send(Ok(Outcome::Initialized));
                Ok(())
            }
            Err(e) => {
                log::warn!("Init failed: {e}");
                let status = status(&e);
                let _ = sink.send(&InitResponse {
                    kind: Some(init_response::Kind::InitFailure(InitFailureResponse {
                        error: status.to_string(),
                    })),
                });
                if e.is_final() {
                    let _ = flows.send(Err(e));
                }
                Err(status)
            }
        }
    })
}

/// The recovery API: Recover opens the disk with the admin's master secret,
/// once it proved the admin's init secret; one Recover at a time (another
/// is refused at once with UNAVAILABLE, see [`Node::recover`]).
pub fn recover_router<B, C, M>(node: Arc<Node<B, C, M>>, flows: Sender<FlowResult>) -> Router
where
    B: DiskBackend + 'static,
    C: ClusterBackend + 'static,
    M: NodeMarker + 'static,
{
    Router::new().unary(
        confboot_proto::RECOVER,
        move |_ctx, req: RecoverMessage| -> Result<RecoverResponse, Status> {
            log::info!("Recover received");
            match node.recover(&req) {
                Ok(disk) => {
                    let _ = flows.send(Ok(Outcome::Recovered));
                    Ok(RecoverResponse {
                        disk_uuid: disk.disk_uuid,
                        found_generation: disk.found,
                        written_generation: disk.written,
                    })
                }
                Err(e) => {
                    log::warn!("Recover refused: {e}");
                    let status = status(&e);
                    if e.is_final() {
                        let _ = flows.send(Err(e));
                    }
                    Err(status)
                }
            }
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use confboot_disk::DiskError;

    #[test]
    fn errors_map_to_the_codes_the_admin_sees() {
        let cases = [
            (NodeError::WrongInitSecret, Code::PermissionDenied),
            (NodeError::Disk(DiskError::WrongKey), Code::PermissionDenied),
            (
                NodeError::DiskRead(DiskError::WrongKey),
                Code::PermissionDenied,
            ),
            (NodeError::InitNotConfigured, Code::FailedPrecondition),
            (NodeError::RecoverNotConfigured, Code::FailedPrecondition),
            (NodeError::RecoverBusy, Code::Unavailable),
            (
                NodeError::AlreadyBootstrapping { holder: "join" },
                Code::FailedPrecondition,
            ),
            (NodeError::NothingToRecover, Code::FailedPrecondition),
            (
                NodeError::InvalidArgument {
                    field: "kms_uri",
                    reason: "x".into(),
                },
                Code::InvalidArgument,
            ),
            (NodeError::Disk(DiskError::NotLuks), Code::Internal),
        ];
        for (e, code) in cases {
            let s = status(&e);
            assert_eq!(s.code, code, "{e}");
            assert_eq!(s.message, e.to_string());
        }
    }
}
