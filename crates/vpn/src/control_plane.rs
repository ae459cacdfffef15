//! The node agent's [`UpdateSource`]: `vpn.API/GetUpdate` over aTLS to the
//! control planes in turn. Both sides attest: the node with its vTPM (the
//! control plane serves members only), the control plane to the node's
//! join-service validators and with PCR 15 marked with the node's cluster
//! id. A control plane that fails either check is not asked; its answer is
//! bounded to [`MAX_UPDATE_BYTES`].

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use confboot_proto::GET_UPDATE;
use confboot_proto::vpn::{GetUpdateRequest, GetUpdateResponse, OwnRecord};

use super::{MAX_UPDATE_BYTES, UpdateSource};
use confboot_atls as atls;
use confboot_attest::{Issuer, Validator};

/// Why no control plane answered; one line per endpoint tried.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ControlPlaneError {
    /// `(endpoint, why)` for each control plane tried.
    pub attempts: Vec<(String, String)>,
}

impl fmt::Display for ControlPlaneError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.attempts.is_empty() {
            return f.write_str("no control plane known");
        }
        for (i, (endpoint, why)) in self.attempts.iter().enumerate() {
            if i > 0 {
                f.write_str("; ")?;
            }
            write!(f, "{endpoint}: {why}")?;
        }
        Ok(())
    }
}

impl std::error::Error for ControlPlaneError {}

/// `vpn.API/GetUpdate` to attested control planes.
pub struct ControlPlaneSource {
    endpoints: Vec<String>,
    validators: Vec<Arc<dyn Validator>>,
    issuer: Arc<dyn Issuer>,
    cluster_id: Vec<u8>,
    own: Option<OwnRecord>,
    timeout: Duration,
    /// The endpoint that answered last: asked first next time.
    next: usize,
}

impl ControlPlaneSource {
    /// Asks `endpoints` in turn; each must attest to one of `validators`
    /// and be marked with `cluster_id`; the node attests with `issuer`,
    /// sends `own` with every request, and bounds each attempt (connect,
    /// handshake, call) by `timeout`.
    pub fn new(
        endpoints: Vec<String>,
        validators: Vec<Arc<dyn Validator>>,
        issuer: Arc<dyn Issuer>,
        cluster_id: Vec<u8>,
        own: Option<OwnRecord>,
        timeout: Duration,
    ) -> ControlPlaneSource {
        ControlPlaneSource {
            endpoints,
            validators,
            issuer,
            cluster_id,
            own,
            timeout,
            next: 0,
        }
    }

    fn ask(&self, endpoint: &str, request: &GetUpdateRequest) -> Result<GetUpdateResponse, String> {
        if self.validators.is_empty() {
            return Err("no validator for control planes".into());
        }
        let (client, service) = atls::connect(
            endpoint,
            self.timeout,
            &self.validators,
            Some(Arc::clone(&self.issuer)),
        )
        .map_err(|e| format!("not trusted or not reached: {e}"))?;
        confboot_cluster::ticket::check_member_mark(&self.cluster_id, service.as_ref())
            .map_err(|e| e.to_string())?;
        let mut client = client.with_max_frame_len(MAX_UPDATE_BYTES as u32);
        client
            .unary(GET_UPDATE, request, self.timeout)
            .map_err(|s| s.to_string())
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
