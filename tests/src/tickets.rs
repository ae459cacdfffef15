//! Asking a join service for tickets as a node does: over aTLS with a
//! fresh sealing key offered next to the node's evidence, the ticket's
//! sealed secrets opened with its private key.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use confboot_atls::{self as atls, AtlsError, AtlsRpcClient};
use confboot_attest::{Attested, Issuer, Validator};
use confboot_cluster::ticket::{JoinTicket, RejoinTicket};
use confboot_kms::seal::SealingKeyPair;
use confboot_proto::join::{
    IssueJoinTicketRequest, IssueJoinTicketResponse, IssueRejoinTicketRequest,
    IssueRejoinTicketResponse,
};
use confboot_wire::{Code, Status};

/// An aTLS connection to a join service on which the node offered its
/// own sealing key.
pub struct SealedClient {
    /// The RPC client (for other calls, or to read a ticket still sealed).
    pub rpc: AtlsRpcClient,
    /// The key pair whose public key this connection offered.
    pub key: SealingKeyPair,
    /// What the service's evidence established (when validators were given).
    pub service: Option<Attested>,
}

impl SealedClient {
    /// Connects to `addr` attesting with `issuer` and offering a fresh
    /// sealing key; the service must attest to one of `validators` (none:
    /// not looked at).
    pub fn connect(
        addr: SocketAddr,
        timeout: Duration,
        validators: &[Arc<dyn Validator>],
        issuer: Arc<dyn Issuer>,
    ) -> Result<SealedClient, AtlsError> {
        let key = SealingKeyPair::generate();
        let (rpc, service) = atls::connect_sealing(
            addr,
            timeout,
            validators,
            Some(issuer),
            Some(key.public_key()),
        )?;
        Ok(SealedClient { rpc, key, service })
    }

    /// Asks for a join ticket and opens its sealed secrets (a ticket that
    /// does not open is a `DATA_LOSS` status here).
    pub fn join(
        &mut self,
        req: &IssueJoinTicketRequest,
        timeout: Duration,
    ) -> Result<JoinTicket, Status> {
        let wire: IssueJoinTicketResponse = self.rpc.unary(confboot_proto::JOIN, req, timeout)?;
        JoinTicket::open(&wire, &self.key).map_err(|e| Status::new(Code::DataLoss, e.to_string()))
    }

    /// Asks for a rejoin ticket and opens its sealed secrets.
    pub fn rejoin(
        &mut self,
        req: &IssueRejoinTicketRequest,
        timeout: Duration,
    ) -> Result<RejoinTicket, Status> {
        let wire: IssueRejoinTicketResponse =
            self.rpc.unary(confboot_proto::REJOIN, req, timeout)?;
        RejoinTicket::open(&wire, &self.key).map_err(|e| Status::new(Code::DataLoss, e.to_string()))
    }
}
