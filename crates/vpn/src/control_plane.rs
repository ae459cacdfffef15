//! The node agent's [`UpdateSource`]: `vpn.API/GetUpdate` over aTLS to the
//! control planes in turn. Both sides attest: the node with its vTPM (the
//! control plane serves members only), the control plane to the node's
//! join-service validators and with PCR 15 marked with the node's cluster
//! id. A control plane that fails either check is not asked; its answer is
//! bounded to [`MAX_UPDATE_BYTES`] and taken only when the cluster's
//! control-plane role key signed it for this session
//! ([`confboot_cluster::role`]): a member that is no control plane (a
//! compromised worker) passes the first two checks, never the third.

use std::sync::Arc;
use std::time::{Duration, Instant};

use confboot_proto::GET_UPDATE;
use confboot_proto::vpn::{GetUpdateRequest, GetUpdateResponse, OwnRecord};

use super::{MAX_UPDATE_BYTES, UpdateSource};
use confboot_atls::{self as atls, AtlsError};
use confboot_attest::{Issuer, Validator};
use confboot_cluster::role::{ControlPlanePublicKey, RoleError};
use confboot_cluster::ticket::TicketError;
use confboot_wire::Status;

/// Why no control plane answered; one line per endpoint tried.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}", attempt_lines(attempts))]
pub struct ControlPlaneError {
    /// `(endpoint, why)` for each control plane tried.
    pub attempts: Vec<(String, AttemptError)>,
}

/// Why one control plane did not answer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AttemptError {
    /// No validator is configured for control planes, so none is asked.
    #[error("no validator for control planes")]
    NoValidator,
    /// The connection or the aTLS handshake failed (the control plane did
    /// not attest to a validator, or could not be reached).
    #[error("not trusted or not reached: {0}")]
    Handshake(#[source] AtlsError),
    /// The control plane attested but is not marked as a member of the
    /// node's cluster.
    #[error("{0}")]
    NotMember(#[source] TicketError),
    /// The call failed (its status).
    #[error("{0}")]
    Call(#[source] Status),
    /// The answer is not signed with the control-plane role key for this
    /// session: a member that is no control plane, or a replay.
    #[error("{0}")]
    NotControlPlane(#[source] RoleError),
}

/// `ENDPOINT: WHY` for each attempt, `; `-separated, or `no control plane
/// known` when there was none.
fn attempt_lines(attempts: &[(String, AttemptError)]) -> String {
    if attempts.is_empty() {
        return "no control plane known".to_string();
    }
    let lines: Vec<String> = attempts
        .iter()
        .map(|(endpoint, why)| format!("{endpoint}: {why}"))
        .collect();
    lines.join("; ")
}

/// `vpn.API/GetUpdate` to attested control planes.
pub struct ControlPlaneSource {
    endpoints: Vec<String>,
    validators: Vec<Arc<dyn Validator>>,
    issuer: Arc<dyn Issuer>,
    cluster_id: Vec<u8>,
    control_plane_key: ControlPlanePublicKey,
    own: Option<OwnRecord>,
    timeout: Duration,
    /// The endpoint that answered last: asked first next time.
    next: usize,
}

impl ControlPlaneSource {
    /// Asks `endpoints` in turn; each must attest to one of `validators`,
    /// be marked with `cluster_id` and sign its answer with the private
    /// half of `control_plane_key`; the node attests with `issuer`, sends
    /// `own` with every request, and bounds each attempt (connect,
    /// handshake and call, all together) by `timeout`.
    pub fn new(
        endpoints: Vec<String>,
        validators: Vec<Arc<dyn Validator>>,
        issuer: Arc<dyn Issuer>,
        cluster_id: Vec<u8>,
        control_plane_key: ControlPlanePublicKey,
        own: Option<OwnRecord>,
        timeout: Duration,
    ) -> ControlPlaneSource {
        ControlPlaneSource {
            endpoints,
            validators,
            issuer,
            cluster_id,
            control_plane_key,
            own,
            timeout,
            next: 0,
        }
    }

    fn ask(
        &self,
        endpoint: &str,
        request: &GetUpdateRequest,
    ) -> Result<GetUpdateResponse, AttemptError> {
        if self.validators.is_empty() {
            return Err(AttemptError::NoValidator);
        }
        // One bound for the whole attempt: a control plane that stalls
        // anywhere leaves time for the next one.
        let deadline = Instant::now() + self.timeout;
        let (client, service) = atls::connect(
            endpoint,
            self.timeout,
            &self.validators,
            Some(Arc::clone(&self.issuer)),
        )
        .map_err(AttemptError::Handshake)?;
        confboot_cluster::ticket::check_member_mark(&self.cluster_id, service.as_ref())
            .map_err(AttemptError::NotMember)?;
        let session = atls::binding::session_binding(&client.get_ref().conn)
            .map_err(AttemptError::Handshake)?;
        let mut client = client.with_max_frame_len(MAX_UPDATE_BYTES as u32);
        let answer = client
            .unary(
                GET_UPDATE,
                request,
                deadline.saturating_duration_since(Instant::now()),
            )
            .map_err(AttemptError::Call)?;
        self.control_plane_key
            .verify_answer(GET_UPDATE, &session, request, &answer)
            .map_err(AttemptError::NotControlPlane)?;
        Ok(answer)
    }
}

impl UpdateSource for ControlPlaneSource {
    type Error = ControlPlaneError;

    fn get_update(
        &mut self,
        request: &GetUpdateRequest,
    ) -> Result<GetUpdateResponse, ControlPlaneError> {
        let request = GetUpdateRequest {
            own: self.own.clone(),
            ..request.clone()
        };
        let mut attempts = Vec::new();
        let count = self.endpoints.len();
        for i in 0..count {
            let index = (self.next + i) % count;
            let endpoint = &self.endpoints[index];
            match self.ask(endpoint, &request) {
                Ok(response) => {
                    self.next = index;
                    return Ok(response);
                }
                Err(why) => attempts.push((endpoint.clone(), why)),
            }
        }
        Err(ControlPlaneError { attempts })
    }
}
