//! The join API's RPC wiring: the methods of the wire contract routed to the
//! ticket service, each refusal mapped to the gRPC status a caller sees and
//! counted in the metrics. The decisions themselves are in [`crate::ticket`].
//! Each admission decision (a join or rejoin ticket issued or refused, an
//! attested handshake refused) is one log line and one count by its
//! attestation-result status ([`admission_result`]).

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Instant;

use confboot_appraisal::ear::Status as EarStatus;
use confboot_atls::{AtlsError, AttestedPeer, SealingKey};
use confboot_attest::{AttestationError, Attested, Variant};
use confboot_cluster::mark::{ClusterMarks, MarkState};
use confboot_cluster::ticket::{JoinTicket, RejoinTicket};
use confboot_kms::seal::SealError;
use confboot_proto::health::{HealthCheckResponse, health_check_response};
use confboot_proto::join::{
    ConfirmGenerationRequest, ConfirmGenerationResponse, IssueJoinTicketRequest,
    IssueJoinTicketResponse, IssueRejoinTicketRequest, IssueRejoinTicketResponse,
};
use confboot_proto::vpn::{GetUpdateRequest, GetUpdateResponse};
use confboot_proto::{CONFIRM_GENERATION, GET_UPDATE, HEALTH_CHECK, JOIN, REJOIN};
use confboot_wire::{CallContext, Code, Router, Status};

use crate::ledger::{Caller, LaunchId, SourceClass, TicketKind};
use crate::metrics::Metrics;
use crate::ticket::{IssueError, TicketService};
use crate::vpn::RegistryError;

/// The gRPC status a caller sees when no ticket or VPN update was issued.
pub fn issue_status(e: &IssueError) -> Status {
    let code = match e {
        IssueError::InvalidRequest(_) => Code::InvalidArgument,
        IssueError::Token(_) => Code::Unavailable,
        IssueError::ControlPlaneFiles(_) | IssueError::KubeletCertUnavailable => {
            Code::FailedPrecondition
        }
        IssueError::KubeletCertSigning(_) => Code::Internal,
        IssueError::VpnUnavailable => Code::FailedPrecondition,
        IssueError::Vpn(e) => registry_code(e),
        IssueError::OwnRecordUnproven | IssueError::GenerationUnproven => Code::PermissionDenied,
    };
    Status::new(code, e.to_string())
}

/// The gRPC code of a VPN registry failure: the caller's request refused,
/// the registry itself spoilt, or the API server not answering as needed.
fn registry_code(e: &RegistryError) -> Code {
    match e {
        RegistryError::Refused(_) => Code::FailedPrecondition,
        RegistryError::RateLimited(_) => Code::ResourceExhausted,
        RegistryError::NameTaken { .. }
        | RegistryError::Removed { .. }
        | RegistryError::DiskHasName { .. }
        | RegistryError::Admission(_) => Code::PermissionDenied,
        RegistryError::Corrupt(_) => Code::Internal,
        RegistryError::Api(_)
        | RegistryError::Status { .. }
        | RegistryError::Forbidden { .. }
        | RegistryError::Contended => Code::Unavailable,
    }
}

/// A short label for a refused handshake, for metrics.
pub fn handshake_reason(e: &AtlsError) -> &'static str {
    match e {
        AtlsError::Attestation(AttestationError::Measurement { .. }) => "measurement",
        AtlsError::Attestation(AttestationError::Trust(_)) => "untrusted_key",
        AtlsError::Attestation(AttestationError::EventLog(_)) => "event_log",
        AtlsError::Attestation(_) => "attestation",
        AtlsError::MissingEvidence
        | AtlsError::UnknownVariant { .. }
        | AtlsError::VariantNotAccepted { .. }
        | AtlsError::Message(_) => "attestation",
        AtlsError::Timeout | AtlsError::Io(_) => "connection",
        _ => "handshake",
    }
}

/// Logs a refused handshake: an attestation refused is an admission
/// decision (contraindicated, counted); a connection that failed for other
/// reasons (timeout, protocol) is only logged.
pub fn handshake_refused(metrics: &Metrics, e: &AtlsError, line: &str) {
    match handshake_reason(e) {
        "connection" | "handshake" => log::warn!("{line}"),
        _ => admission_result(
            metrics,
            EarStatus::Contraindicated,
            &admission_policy(None),
            line,
        ),
    }
}

/// A request's disk UUID as logs may show it: only once it is known to be
/// a UUID (a caller's arbitrary bytes, of any length, never reach a log).
fn disk_for_log(raw: &str) -> &str {
    if confboot_kms::is_uuid(raw) {
        raw
    } else {
        "(not a UUID)"
    }
}

/// The key a ticket's secrets are sealed to: the one the caller's evidence
/// bound on this connection. A caller that offered none gets no ticket
/// (checked before anything is issued, so a refusal costs it nothing).
fn sealing_key(ctx: &CallContext<'_, AttestedPeer>) -> Result<SealingKey, Status> {
    ctx.peer().sealing_key().ok_or_else(|| {
        Status::new(
            Code::FailedPrecondition,
            "the caller offered no sealing key: a ticket's secrets are sent only sealed to the attested VM",
        )
    })
}

/// The status of a ticket that could not be sealed to the caller's key
/// (one no secret can be sealed to, such as a low-order point).
fn sealing_status(e: &SealError) -> Status {
    Status::invalid_argument(format!("cannot seal the ticket to the caller's key: {e}"))
}

/// The attestation-result status of a refused ticket request:
/// contraindicated when the caller was refused for what it is or what it
/// proved (`PERMISSION_DENIED`); none when the request failed otherwise
/// (a malformed request, the control plane not ready, the API server not
/// answering), which concludes nothing about the caller.
pub fn refusal_status(s: &Status) -> EarStatus {
    if s.code == Code::PermissionDenied {
        EarStatus::Contraindicated
    } else {
        EarStatus::None
    }
}

/// The reference-value set or policy a caller was appraised against, as
/// admission lines name it: its variant's policy (`unknown` when the
/// variant is not known, as for a handshake refused before it).
pub fn admission_policy(variant: Option<Variant>) -> String {
    match variant {
        Some(v) => format!("{} policy", v.name()),
        None => "unknown".into(),
    }
}

/// What a caller's evidence was appraised against, as its validator said
/// it ([`Attested::set_verdict`], [`Attested::warnings`]): the
/// reference-value set it matched, and whether it was admitted with a
/// warning (a set near its not-after, an SEV-SNP TCB near its minimum). A
/// caller without one is named by its variant's policy
/// ([`admission_policy`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Appraisal {
    /// The set (`reference-value set NAME VERSION`) or policy named.
    pub policy: String,
    /// Whether the caller was admitted with a warning.
    pub warning: bool,
}

impl Appraisal {
    /// What `attested` was appraised against: the set its verdict names
    /// (a warning when the verdict is one); for evidence its validator
    /// admitted with warnings, its variant's policy (or its set) with a
    /// warning. `None` otherwise (a measurement-policy file, another
    /// variant: named by the variant's policy, [`admission_policy`]).
    pub fn of(attested: &Attested) -> Option<Appraisal> {
        let set = attested.set_verdict.as_ref().map(|verdict| Appraisal {
            policy: format!("reference-value set {}", verdict.set),
            warning: verdict.is_warning(),
        });
        if attested.warnings.is_empty() {
            return set;
        }
        Some(Appraisal {
            policy: set.map_or_else(|| admission_policy(Some(attested.variant)), |s| s.policy),
            warning: true,
        })
    }

    /// The status of an admission made on it: warning or affirming.
    pub fn status(&self) -> EarStatus {
        if self.warning {
            EarStatus::Warning
        } else {
            EarStatus::Affirming
        }
    }
}

/// The policy a caller was appraised against, and the status of a ticket
/// issued to it ([`Appraisal`], or its variant's policy and affirming).
fn appraised(peer: &Attested) -> (String, EarStatus) {
    match Appraisal::of(peer) {
        Some(a) => {
            let status = a.status();
            (a.policy, status)
        }
        None => (admission_policy(Some(peer.variant)), EarStatus::Affirming),
    }
}

/// Records one admission decision: one log line saying `decision`, its
/// attestation-result `status` and the set or `policy` the caller was
/// appraised against, and one count by status
/// (`confboot_joinsvc_admissions_total{status=...}`). Tickets issued are
/// affirming, refusals contraindicated or none ([`refusal_status`]); a
/// caller admitted with a reservation is warning.
pub fn admission_result(metrics: &Metrics, status: EarStatus, policy: &str, decision: &str) {
    metrics.admission(status);
    let line = format!("{decision} (attestation result {status}, policy {policy})");
    match status {
        EarStatus::Affirming => log::info!("{line}"),
        _ => log::warn!("{line}"),
    }
}

/// What a method asks of its caller.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CallerCheck {
    /// A node that is not bootstrapped yet (join, rejoin): for vTPM, PCR 15
    /// all-zero; for TDX, `RTMR3` all-zero; for SEV-SNP, a launch identity
    /// the ledger then admits once.
    Unmarked,
    /// A member of this cluster (GetUpdate): PCR 15 (vTPM) or `RTMR3`
    /// (TDX) holds the mark of the cluster id this service derives.
    Member,
}

/// Checks an attested caller for a method, and says who it is. The
/// handshake checks the measurement policy but not the mark register,
/// which differs between a joining node and a member; each method says
/// which it serves. A vTPM caller shows it in PCR 15, a TDX caller in
/// `RTMR3` ([`TDX_MARK_INDEX`](confboot_cluster::mark::TDX_MARK_INDEX)), read against this cluster's marks
/// ([`ClusterMarks`]): all zero is a node not bootstrapped since it booted,
/// this cluster's mark a member (peer updates, never a ticket), anything
/// else (another cluster's mark, a register extended twice, a register
/// missing) refused with its reason. An SEV-SNP caller has no register
/// that could show it bootstrapped: it is served as a launch
/// ([`Caller::Launch`], its chip id and `REPORT_ID`), which the ledger
/// serves once ([`crate::ledger`]), and never as a member; SNP evidence
/// without a launch identity is refused.
pub fn caller_check(
    peer: &Attested,
    check: CallerCheck,
    marks: &ClusterMarks,
) -> Result<Caller, Status> {
    let denied = |message: &str| Status::permission_denied(message);
    if peer.variant == Variant::SevSnp {
        return match check {
            CallerCheck::Unmarked => match LaunchId::of(peer) {
                Some(launch) => Ok(Caller::Launch(launch)),
                None => Err(denied(
                    "the caller's SEV-SNP evidence names no launch (chip id and REPORT_ID)",
                )),
            },
            CallerCheck::Member => Err(denied(
                "peer updates need vTPM or TDX evidence (PCR 15 or RTMR3 holds the cluster mark)",
            )),
        };
    }
    let register = match peer.variant {
        Variant::Tdx => "RTMR3",
        _ => "PCR 15",
    };
    let state = marks
        .state_of(peer)
        .map_err(|e| denied(&format!("the caller's mark cannot be read: {e}")))?;
    match (check, state) {
        (CallerCheck::Unmarked, MarkState::Unmarked) => Ok(Caller::Unbootstrapped),
        (CallerCheck::Unmarked, MarkState::Member) => Err(denied(&format!(
            "the caller is already bootstrapped ({register} is not all zero: it holds this \
             cluster's mark; a member asks for peer updates, never a ticket)"
        ))),
        (CallerCheck::Unmarked, MarkState::Foreign) => Err(denied(&format!(
            "the caller is already bootstrapped ({register} is not all zero, and not this \
             cluster's mark either)"
        ))),
        (CallerCheck::Member, MarkState::Member) => Ok(Caller::Member),
        (CallerCheck::Member, MarkState::Unmarked) => Err(denied(&format!(
            "the caller is not a member of this cluster ({register} is all zero: not \
             bootstrapped)"
        ))),
        (CallerCheck::Member, MarkState::Foreign) => Err(denied(&format!(
            "the caller is not a member of this cluster ({register} is not its mark)"
        ))),
    }
}

/// A ticket request (`what`: join or rejoin) refused before the ticket
/// service saw it, as an admission decision.
fn refuse_admission(metrics: &Metrics, variant: Option<Variant>, what: &str, s: &Status) {
    let decision = format!("{what} ticket refused: {}", s.message);
    admission_result(
        metrics,
        refusal_status(s),
        &admission_policy(variant),
        &decision,
    );
}

/// What differs between the two ticket methods (JOIN, REJOIN): their
/// messages, what they issue and seal, their count, their request's log
/// line. Everything else, one path: [`serve_ticket`].
trait TicketMethod {
    /// The request message.
    type Request;
    /// The ticket value the ticket service issues.
    type Ticket;
    /// The wire message: the ticket, its secrets sealed.
    type Response;
    /// `join` or `rejoin`, as log lines and admission decisions name it.
    const WHAT: &'static str;
    /// The ledger's kind of the ticket.
    const KIND: TicketKind;
    /// The disk UUID the request names (raw: see [`disk_for_log`]).
    fn disk_uuid(req: &Self::Request) -> &str;
    /// Logs the request (after its caller passed every check).
    fn log_request(req: &Self::Request, peer: &Attested);
    /// Issues the ticket (or the refusal).
    fn issue(
        tickets: &TicketService,
        caller: &Caller,
        req: &Self::Request,
        gate: crate::vpn::FirstTicketGate<'_>,
    ) -> Result<Self::Ticket, IssueError>;
    /// Seals the ticket to the caller's key.
    fn seal(ticket: &Self::Ticket, key: &SealingKey) -> Result<Self::Response, SealError>;
    /// Counts one ticket issued.
    fn count(metrics: &Metrics);
}

/// `JOIN`: a join ticket.
struct JoinMethod;

impl TicketMethod for JoinMethod {
    type Request = IssueJoinTicketRequest;
    type Ticket = JoinTicket;
    type Response = IssueJoinTicketResponse;
    const WHAT: &'static str = "join";
    const KIND: TicketKind = TicketKind::Join;

    fn disk_uuid(req: &IssueJoinTicketRequest) -> &str {
        &req.disk_uuid
    }

    fn log_request(req: &IssueJoinTicketRequest, peer: &Attested) {
        // One line per ticket at the production verbosity (its outcome,
        // below); the request itself at debug.
        log::debug!(
            "join ticket requested for disk {} (control plane: {})",
            disk_for_log(&req.disk_uuid),
            req.is_control_plane
        );
        log::trace!("caller's measurements: {:?}", peer.measurements);
    }

    fn issue(
        tickets: &TicketService,
        caller: &Caller,
        req: &IssueJoinTicketRequest,
        gate: crate::vpn::FirstTicketGate<'_>,
    ) -> Result<JoinTicket, IssueError> {
        tickets.issue_join_ticket_gated(caller, req, gate)
    }

    fn seal(ticket: &JoinTicket, key: &SealingKey) -> Result<IssueJoinTicketResponse, SealError> {
        ticket.seal(&key.0)
    }

    fn count(metrics: &Metrics) {
        metrics.join_tickets.fetch_add(1, Ordering::Relaxed);
    }
}

/// `REJOIN`: a rejoin ticket.
struct RejoinMethod;

impl TicketMethod for RejoinMethod {
    type Request = IssueRejoinTicketRequest;
    type Ticket = RejoinTicket;
    type Response = IssueRejoinTicketResponse;
    const WHAT: &'static str = "rejoin";
    const KIND: TicketKind = TicketKind::Rejoin;

    fn disk_uuid(req: &IssueRejoinTicketRequest) -> &str {
        &req.disk_uuid
    }

    fn log_request(req: &IssueRejoinTicketRequest, _peer: &Attested) {
        log::info!(
            "rejoin ticket requested for disk {}",
            disk_for_log(&req.disk_uuid)
        );
    }

    fn issue(
        tickets: &TicketService,
        caller: &Caller,
        req: &IssueRejoinTicketRequest,
        gate: crate::vpn::FirstTicketGate<'_>,
    ) -> Result<RejoinTicket, IssueError> {
        tickets.issue_rejoin_ticket_gated(caller, req, gate)
    }

    fn seal(
        ticket: &RejoinTicket,
        key: &SealingKey,
    ) -> Result<IssueRejoinTicketResponse, SealError> {
        ticket.seal(&key.0)
    }

    fn count(metrics: &Metrics) {
        metrics.rejoin_tickets.fetch_add(1, Ordering::Relaxed);
    }
}

/// Serves one ticket request (join or rejoin, `M`): the caller attested,
/// is not bootstrapped (or is a launch the ledger admits), offered a
/// sealing key; the ticket is issued, sealed to that key and counted.
/// Each outcome is one admission decision ([`admission_result`]).
fn serve_ticket<M: TicketMethod>(
    tickets: &TicketService,
    metrics: &Metrics,
    ctx: &CallContext<'_, AttestedPeer>,
    req: &M::Request,
) -> Result<M::Response, Status> {
    let what = M::WHAT;
    let started = Instant::now();
    // The handshake required attestation; fail closed all the same.
    let peer = ctx.peer().attested();
    let (policy, admitted) = appraised(peer);
    let caller = match caller_check(peer, CallerCheck::Unmarked, tickets.cluster_mark()) {
        Ok(caller) => caller,
        Err(s) => {
            metrics.refused("marked");
            refuse_admission(metrics, Some(peer.variant), what, &s);
            return Err(s);
        }
    };
    let key = sealing_key(ctx).inspect_err(|s| {
        metrics.refused("unsealed");
        refuse_admission(metrics, Some(peer.variant), what, s);
    })?;
    M::log_request(req, peer);
    // First tickets (joins, SEV-SNP launches) are rate-limited per source
    // class, and only a ticket that adds an entry to the ledger counts (a
    // retried join of a disk whose first boot runs adds none): checked in
    // the admission, spent once issued, so refusals cost nothing.
    let class = SourceClass::of(peer.variant, &caller, M::KIND);
    let adds = std::cell::Cell::new(false);
    let gate = |entries: u64| {
        adds.set(entries > 0);
        match class {
            Some(class) if entries > 0 => metrics.first_tickets.check(class),
            _ => Ok(()),
        }
    };
    let result = M::issue(tickets, &caller, req, &gate);
    if let (Some(class), Ok(_), true) = (class, &result, adds.get()) {
        metrics.first_tickets.take(class);
    }
    metrics.observe_latency(started.elapsed());
    let disk = disk_for_log(M::disk_uuid(req));
    match result {
        Ok(ticket) => match M::seal(&ticket, &key) {
            Ok(sealed) => {
                M::count(metrics);
                let decision = format!("{what} ticket issued for disk {disk}");
                admission_result(metrics, admitted, &policy, &decision);
                Ok(sealed)
            }
            Err(e) => {
                metrics.refused("unsealed");
                let s = sealing_status(&e);
                let decision = format!("{what} ticket for disk {disk} not sealed: {e}");
                admission_result(metrics, refusal_status(&s), &policy, &decision);
                Err(s)
            }
        },
        Err(e) => {
            metrics.refused(e.reason());
            let s = issue_status(&e);
            let decision = format!("{what} ticket for disk {disk} refused: {e}");
            admission_result(metrics, refusal_status(&s), &policy, &decision);
            Err(s)
        }
    }
}

/// Serves a member's `GetUpdate`: peer lists go to attested members only
/// (their agents poll).
fn serve_vpn_update(
    tickets: &TicketService,
    metrics: &Metrics,
    ctx: &CallContext<'_, AttestedPeer>,
    req: &GetUpdateRequest,
) -> Result<GetUpdateResponse, Status> {
    let peer = ctx.peer().attested();
    if let Err(s) = caller_check(peer, CallerCheck::Member, tickets.cluster_mark()) {
        metrics.refused("not_member");
        log::warn!("VPN update refused: {}", s.message);
        return Err(s);
    }
    let mut answer = tickets.vpn_update(req).map_err(|e| {
        metrics.refused(e.reason());
        log::warn!("VPN update refused: {e}");
        issue_status(&e)
    })?;
    // Only a control plane answers a poll: signed for this session.
    tickets
        .role_key()
        .sign_answer(GET_UPDATE, ctx.peer().session_binding(), req, &mut answer);
    Ok(answer)
}

/// Serves a rejoining node's `ConfirmGeneration`, sent past its disk's
/// opening: attested and not marked yet, like the rejoin it follows. The
/// proof with the disk key says it holds that disk.
fn serve_confirm_generation(
    tickets: &TicketService,
    metrics: &Metrics,
    ctx: &CallContext<'_, AttestedPeer>,
    req: &ConfirmGenerationRequest,
) -> Result<ConfirmGenerationResponse, Status> {
    let peer = ctx.peer().attested();
    if let Err(s) = caller_check(peer, CallerCheck::Unmarked, tickets.cluster_mark()) {
        metrics.refused("marked");
        return Err(s);
    }
    let disk = disk_for_log(&req.disk_uuid);
    match tickets.confirm_generation(req) {
        Ok(mut answer) => {
            // Only a control plane confirms: signed for this session.
            tickets.role_key().sign_answer(
                CONFIRM_GENERATION,
                ctx.peer().session_binding(),
                req,
                &mut answer,
            );
            log::info!(
                "state disk {disk}: generation {} found, {} written",
                req.found_generation,
                req.written_generation
            );
            Ok(answer)
        }
        Err(e) => {
            metrics.refused(e.reason());
            log::warn!("state disk {disk} refused: {e}");
            Err(issue_status(&e))
        }
    }
}

/// The join API: health check, join and rejoin tickets, generation
/// confirmations and VPN updates, each method wired to its handler.
/// Every method serves only callers that attested in the handshake (each an
/// [`AttestedPeer`]).
pub fn router(tickets: Arc<TicketService>, metrics: Arc<Metrics>) -> Router<AttestedPeer> {
    Router::<AttestedPeer>::new()
        .unary(HEALTH_CHECK, |_ctx, _req| {
            Ok(HealthCheckResponse {
                status: health_check_response::ServingStatus::Serving as i32,
            })
        })
        .unary(JOIN, wired(&tickets, &metrics, serve_ticket::<JoinMethod>))
        .unary(GET_UPDATE, wired(&tickets, &metrics, serve_vpn_update))
        .unary(
            CONFIRM_GENERATION,
            wired(&tickets, &metrics, serve_confirm_generation),
        )
        .unary(
            REJOIN,
            wired(&tickets, &metrics, serve_ticket::<RejoinMethod>),
        )
}

/// A handler of the join API: the ticket service, the metrics, the call
/// and its request in; the answer or the status out.
type Handler<Req, Resp> =
    fn(&TicketService, &Metrics, &CallContext<'_, AttestedPeer>, &Req) -> Result<Resp, Status>;

/// `handler` as the router takes it, with its own handles on the ticket
/// service and the metrics.
fn wired<Req: 'static, Resp: 'static>(
    tickets: &Arc<TicketService>,
    metrics: &Arc<Metrics>,
    handler: Handler<Req, Resp>,
) -> impl Fn(&CallContext<'_, AttestedPeer>, Req) -> Result<Resp, Status> + Send + Sync + 'static {
    let (tickets, metrics) = (Arc::clone(tickets), Arc::clone(metrics));
    move |ctx, req| handler(&tickets, &metrics, ctx, &req)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::token::TokenError;
    use confboot_cluster::kubelet_cert::KubeletCertError;
    use confboot_cluster::mark::TDX_MARK_INDEX;
    use confboot_tpm::CLUSTER_ID_PCR;

    #[test]
    fn each_refusal_has_its_grpc_code() {
        for (e, code) in [
            (
                IssueError::InvalidRequest("disk_uuid is not a UUID".into()),
                Code::InvalidArgument,
            ),
            (
                IssueError::Token(TokenError::Api {
                    status: 500,
                    reason: "InternalError".into(),
                }),
                Code::Unavailable,
            ),
            (
                IssueError::ControlPlaneFiles("ca.key: not found".into()),
                Code::FailedPrecondition,
            ),
            (IssueError::KubeletCertUnavailable, Code::FailedPrecondition),
            (
                IssueError::KubeletCertSigning(KubeletCertError::Generate("no randomness".into())),
                Code::Internal,
            ),
        ] {
            let s = issue_status(&e);
            assert_eq!(s.code, code, "{e}");
            assert_eq!(s.message, e.to_string());
        }
    }

    #[test]
    fn an_snp_caller_is_a_launch_and_a_vtpm_caller_shows_pcr_15() {
        use confboot_snp::LAUNCH_IDENTITY_INDEX;
        use std::collections::BTreeMap;
        let marks = ClusterMarks::of(b"cluster-1");
        let mark = marks.pcr15;
        let snp = |launch: Option<Vec<u8>>| {
            let mut measurements = BTreeMap::from([(0, vec![0x5e; 48])]);
            if let Some(l) = launch {
                measurements.insert(LAUNCH_IDENTITY_INDEX, l);
            }
            Attested {
                set_verdict: None,
                warnings: Vec::new(),
                variant: Variant::SevSnp,
                measurements,
            }
        };
        let vtpm = |pcr15: [u8; 32]| Attested {
            set_verdict: None,
            warnings: Vec::new(),
            variant: Variant::QemuVtpm,
            measurements: BTreeMap::from([(CLUSTER_ID_PCR, pcr15.to_vec())]),
        };
        // Two launches on one chip are two callers; the same launch is one.
        let a = caller_check(&snp(Some(vec![1; 96])), CallerCheck::Unmarked, &marks).unwrap();
        let b = caller_check(
            &snp(Some([vec![1; 64], vec![2; 32]].concat())),
            CallerCheck::Unmarked,
            &marks,
        )
        .unwrap();
        assert!(matches!(a, Caller::Launch(_)));
        assert_ne!(a, b);
        assert_eq!(
            caller_check(&snp(Some(vec![1; 96])), CallerCheck::Unmarked, &marks).unwrap(),
            a
        );
        // SNP evidence without a launch identity, or a spoilt one: refused.
        for launch in [None, Some(vec![1; 95])] {
            let e = caller_check(&snp(launch), CallerCheck::Unmarked, &marks).unwrap_err();
            assert_eq!(e.code, Code::PermissionDenied);
        }
        // Never a member.
        assert!(caller_check(&snp(Some(vec![1; 96])), CallerCheck::Member, &marks).is_err());
        assert_eq!(
            caller_check(&vtpm([0; 32]), CallerCheck::Unmarked, &marks),
            Ok(Caller::Unbootstrapped)
        );
        assert!(caller_check(&vtpm(mark), CallerCheck::Unmarked, &marks).is_err());
        assert_eq!(
            caller_check(&vtpm(mark), CallerCheck::Member, &marks),
            Ok(Caller::Member)
        );
        // A foreign mark is neither.
        let foreign = ClusterMarks::of(b"cluster-2").pcr15;
        for check in [CallerCheck::Unmarked, CallerCheck::Member] {
            assert!(caller_check(&vtpm(foreign), check, &marks).is_err());
        }
        // The ledger's refusals reach the caller as PERMISSION_DENIED.
        let refused = IssueError::Vpn(RegistryError::Admission(
            crate::ledger::Refusal::LaunchServed,
        ));
        assert_eq!(issue_status(&refused).code, Code::PermissionDenied);
        assert_eq!(refused.reason(), "launch_served");
    }

    #[test]
    fn a_tdx_caller_shows_rtmr3_unmarked_a_member_or_refused() {
        use std::collections::BTreeMap;
        let marks = ClusterMarks::of(b"cluster-1");
        let td = |rtmr3: Vec<u8>| Attested {
            set_verdict: None,
            warnings: Vec::new(),
            variant: Variant::Tdx,
            measurements: BTreeMap::from([(0, vec![0x7d; 48]), (TDX_MARK_INDEX, rtmr3)]),
        };
        let refused = |rtmr3: Vec<u8>, check| {
            let s = caller_check(&td(rtmr3), check, &marks).unwrap_err();
            assert_eq!(s.code, Code::PermissionDenied);
            s.message
        };
        assert_eq!(
            caller_check(&td(vec![0; 48]), CallerCheck::Unmarked, &marks),
            Ok(Caller::Unbootstrapped)
        );
        assert_eq!(
            caller_check(&td(marks.rtmr3.to_vec()), CallerCheck::Member, &marks),
            Ok(Caller::Member)
        );
        // A member asks for no ticket; a node not bootstrapped gets no
        // peer updates; another cluster's mark gets neither.
        let m = refused(marks.rtmr3.to_vec(), CallerCheck::Unmarked);
        assert!(
            m.contains("RTMR3 is not all zero: it holds this cluster's mark"),
            "{m}"
        );
        let m = refused(vec![0; 48], CallerCheck::Member);
        assert!(m.contains("RTMR3 is all zero"), "{m}");
        let foreign = ClusterMarks::of(b"cluster-2").rtmr3.to_vec();
        let m = refused(foreign.clone(), CallerCheck::Unmarked);
        assert!(m.contains("not this cluster's mark either"), "{m}");
        let m = refused(foreign, CallerCheck::Member);
        assert!(m.contains("RTMR3 is not its mark"), "{m}");
        // A TD's register is never read as PCR 15's, nor missing as zero.
        let m = refused(marks.pcr15.to_vec(), CallerCheck::Member);
        assert!(m.contains("no RTMR3 of 48 bytes"), "{m}");
        let bare = Attested {
            set_verdict: None,
            warnings: Vec::new(),
            variant: Variant::Tdx,
            measurements: BTreeMap::from([(0, vec![0x7d; 48])]),
        };
        assert!(caller_check(&bare, CallerCheck::Unmarked, &marks).is_err());
    }

    fn attested(variant: Variant, warnings: &[&str]) -> Attested {
        Attested {
            variant,
            measurements: std::collections::BTreeMap::new(),
            warnings: warnings.iter().map(|w| w.to_string()).collect(),
            set_verdict: None,
        }
    }

    #[test]
    fn a_validators_warnings_make_the_admission_a_warning_under_its_policy() {
        // Admitted without reservation: named by the variant's policy.
        assert_eq!(Appraisal::of(&attested(Variant::SevSnp, &[])), None);
        // An SEV-SNP TCB near its minimum: a warning, whatever the set.
        let warned = attested(Variant::SevSnp, &["minimum reported TCB: microcode 115"]);
        assert_eq!(
            Appraisal::of(&warned),
            Some(Appraisal {
                policy: "sev-snp policy".into(),
                warning: true,
            })
        );
        // No caller, no appraisal: there is no caller without attestation
        // to ask about, a handler of the join API sees an `AttestedPeer`.
    }

    #[test]
    fn the_set_verdict_the_validator_made_names_the_admission() {
        use confboot_attest::{SetName, SetVerdict};
        let admitted_by = |warnings: &[&str]| Attested {
            set_verdict: Some(SetVerdict {
                set: SetName {
                    name: "confboot-node".into(),
                    version: "2".into(),
                },
                warnings: warnings.iter().map(|w| w.to_string()).collect(),
            }),
            ..attested(Variant::QemuVtpm, &[])
        };
        assert_eq!(
            appraised(&admitted_by(&[])),
            (
                "reference-value set confboot-node 2".into(),
                EarStatus::Affirming
            )
        );
        assert_eq!(
            appraised(&admitted_by(&["expires at 2027-01-01T00:00:00Z"])),
            (
                "reference-value set confboot-node 2".into(),
                EarStatus::Warning
            )
        );
        // Without a set: the variant's policy, affirming.
        assert_eq!(
            appraised(&attested(Variant::QemuVtpm, &[])),
            ("qemu-vtpm policy".into(), EarStatus::Affirming)
        );
    }

    #[test]
    fn the_router_serves_the_contract() {
        let r = router_for_test();
        assert_eq!(
            r.methods(),
            [
                HEALTH_CHECK.path(),
                CONFIRM_GENERATION.path(),
                JOIN.path(),
                REJOIN.path(),
                GET_UPDATE.path()
            ]
        );
    }

    #[test]
    fn refusals_for_what_the_caller_is_are_contraindicated() {
        let denied = Status::permission_denied("PCR 15 is marked");
        assert_eq!(refusal_status(&denied), EarStatus::Contraindicated);
        for code in [Code::Unavailable, Code::InvalidArgument, Code::Internal] {
            assert_eq!(refusal_status(&Status::new(code, "x")), EarStatus::None);
        }
        let metrics = Metrics::default();
        refuse_admission(&metrics, Some(Variant::SevSnp), "join", &denied);
        admission_result(&metrics, EarStatus::Warning, "confboot-node 1.2.0", "x");
        let text = metrics.render();
        for line in [
            "confboot_joinsvc_admissions_total{status=\"contraindicated\"} 1",
            "confboot_joinsvc_admissions_total{status=\"warning\"} 1",
        ] {
            assert!(text.lines().any(|l| l == line), "{line} in\n{text}");
        }
        assert_eq!(admission_policy(Some(Variant::Tdx)), "tdx policy");
    }

    fn router_for_test() -> Router<AttestedPeer> {
        use crate::ticket::TicketConfig;
        use crate::token::{BootstrapToken, TokenIssuer};
        struct NoTokens;
        impl TokenIssuer for NoTokens {
            fn create_bootstrap_token(&self) -> Result<BootstrapToken, TokenError> {
                Err(TokenError::Config("none in this test".into()))
            }
        }
        let config = TicketConfig {
            master_secret: confboot_kms::MasterSecret::new(vec![1; 32], vec![2; 32]).unwrap(),
            measurement_salt: confboot_kms::MeasurementSalt::new(vec![3; 32]).unwrap(),
            api_server_endpoint: "10.0.0.1:6443".into(),
            discovery_token_ca_cert_hash: "sha256:00".into(),
            kubernetes_version: "v1.31.1".into(),
            pki_dir: "/nonexistent".into(),
            kubelet_cert_signer: None,
            registry: Arc::new(crate::ticket::tests::registry_without_vpn()),
        };
        router(
            Arc::new(TicketService::new(config, Arc::new(NoTokens))),
            Arc::new(Metrics::default()),
        )
    }

    /// `refused` is the refusal of a ledger that went back (`what`).
    fn assert_regressed<T: std::fmt::Debug>(
        refused: Result<T, crate::vpn::RegistryError>,
        what: fn(&crate::ledger::Regressed) -> bool,
    ) {
        use crate::ledger::Refusal;
        use crate::vpn::RegistryError;
        assert!(
            matches!(
                &refused,
                Err(RegistryError::Admission(Refusal::Regressed(r))) if what(r)
            ),
            "{refused:?}"
        );
    }

    /// The shared control plane's admin replaces or deletes the registry's
    /// ConfigMap in `ns` (what a restored etcd snapshot or a deletion does
    /// to joinsvc's view).
    fn peers_object(ns: &str) -> Option<serde_json::Value> {
        confboot_tests::kube::ControlPlane::shared()
            .configmap(ns, joinsvc::configmap::PEERS_CONFIGMAP)
    }

    /// Puts `old`'s data back into the registry's ConfigMap (under a new
    /// resourceVersion, as an admin's `kubectl replace` of a saved copy).
    fn restore_peers_object(ns: &str, old: &serde_json::Value) {
        let plane = confboot_tests::kube::ControlPlane::shared();
        let mut now = peers_object(ns).expect("the registry's object");
        now["data"] = old["data"].clone();
        let dir = confboot_testkit::TempDir::new("restore-configmap");
        let file = dir.path().join("configmap.json");
        std::fs::write(&file, now.to_string()).unwrap();
        plane.kubectl(&["replace", "-f", file.to_str().unwrap()]);
    }

    fn delete_peers_object(ns: &str) {
        confboot_tests::kube::ControlPlane::shared().kubectl(&[
            "delete",
            "configmap",
            joinsvc::configmap::PEERS_CONFIGMAP,
            "-n",
            ns,
        ]);
    }

    /// Through the registry on the real API server: the ledger's object
    /// deleted, or its data put back as an older copy held it, refuses the
    /// rejoin instead of reading as an empty (or younger) ledger.
    #[test]
    fn a_registry_whose_ledger_object_is_deleted_or_restored_refuses_tickets() {
        use crate::ledger::{Caller, Regressed};
        use crate::vpn::KubeApiPeerRegistry;
        const DISK: &str = "2f3c6c1e-2b5d-4e8a-9c7f-1a2b3c4d5e6f";
        let (api, ns) = crate::ticket::tests::account_in_a_namespace();
        let r = KubeApiPeerRegistry::without_vpn(api)
            .unwrap()
            .in_namespace(&ns)
            .unwrap();
        let node = Caller::Unbootstrapped;
        assert_eq!(r.admit_rejoin(&node, DISK).unwrap(), 0);
        r.confirm_generation(DISK, 0, 1).unwrap();
        let old = peers_object(&ns).unwrap();
        assert_eq!(r.admit_rejoin(&node, DISK).unwrap(), 1);
        r.confirm_generation(DISK, 1, 2).unwrap();
        assert_eq!(r.admit_rejoin(&node, DISK).unwrap(), 2);
        // The object's data back to when the disk was at generation 1 (a
        // real API server gives it a newer resourceVersion: the ledger
        // sees the content go back).
        restore_peers_object(&ns, &old);
        assert_regressed(r.admit_rejoin(&node, DISK), |r| {
            matches!(r, Regressed::GenerationWentBack { .. })
        });
        // The object gone: not an empty ledger whose rejoin takes any
        // generation.
        delete_peers_object(&ns);
        assert_regressed(r.admit_rejoin(&node, DISK), |r| {
            matches!(r, Regressed::Gone { .. })
        });
        assert!(r.confirm_generation(DISK, 0, 1).is_err());
    }

    /// G4 across a restart: joinsvc restarted with its `--state-dir` after
    /// the ledger's object was deleted refuses, as the running one would.
    #[test]
    fn a_ledger_object_deleted_while_joinsvc_was_down_is_refused_after_its_restart() {
        use crate::ledger::{ANCHOR_FILE, AnchorStore, Caller, Regressed};
        use crate::vpn::KubeApiPeerRegistry;
        const DISK: &str = "2f3c6c1e-2b5d-4e8a-9c7f-1a2b3c4d5e6f";
        let (api, ns) = crate::ticket::tests::account_in_a_namespace();
        let state = confboot_testkit::TempDir::new("joinsvc-anchor-restart");
        let start = || {
            let anchor = AnchorStore::load(&state.path().join(ANCHOR_FILE)).unwrap();
            KubeApiPeerRegistry::without_vpn(api.clone())
                .unwrap()
                .in_namespace(&ns)
                .unwrap()
                .with_anchor(Arc::new(anchor))
        };
        let node = Caller::Unbootstrapped;
        let r = start();
        assert_eq!(r.admit_rejoin(&node, DISK).unwrap(), 0);
        r.confirm_generation(DISK, 0, 1).unwrap();
        assert_eq!(r.admit_rejoin(&node, DISK).unwrap(), 1);
        drop(r);
        delete_peers_object(&ns);
        let r = start();
        assert_regressed(r.admit_rejoin(&node, DISK), |r| {
            matches!(r, Regressed::Gone { .. })
        });
    }
}
