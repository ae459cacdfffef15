//! A ticket's secrets are sealed to the VM that attested: joinsvc seals
//! them (HPKE) to the X25519 key the node's evidence bound on the
//! connection, so whoever reads the answer outside that VM reads nothing
//! usable, and a caller that offered no key gets no ticket.
//!
//! A relay that terminates TLS towards the node and lets the node's
//! genuine attestation through to joinsvc cannot be built: the evidence
//! binds the exporter of the node's session with the relay, which is not
//! the relay's session with joinsvc, and joinsvc refuses it
//! (`confboot-tests --test relay`). What is left is a channel that ends
//! outside the VM on the node's side: a TLS stack or a proxy the host
//! controls, a debugging log of the session's plaintext. These tests
//! record every byte joinsvc's answer carries at that end.

use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::sync::Arc;
use std::time::{Duration, Instant};

use confboot_atls::AtlsClient;
use confboot_attest::Issuer;
use confboot_cluster::ticket::{JoinTicket, RejoinTicket, TicketError};
use confboot_kms::seal::{SealError, SealedKind, SealingKeyPair};
use confboot_proto::join::{
    IssueJoinTicketRequest, IssueJoinTicketResponse, IssueRejoinTicketRequest,
    IssueRejoinTicketResponse,
};
use confboot_tests::cluster::{Joinsvc, Node};
use confboot_wire::{Client, Code, Transport};

const DISK_A: &str = "0f3c6c1e-2b5d-4e8a-9c7f-1a2b3c4d5e6f";
const DISK_B: &str = "7e1d2c3b-4a59-4876-8f9e-0a1b2c3d4e5f";
const CALL: Duration = Duration::from_secs(20);

fn joinsvc_bin() -> std::path::PathBuf {
    std::path::PathBuf::from(env!("CARGO_BIN_EXE_joinsvc"))
}

/// The plaintext of an aTLS session as the end of the channel outside the
/// VM sees it: every byte read is kept.
struct Recorder<T> {
    inner: T,
    read: Vec<u8>,
}

impl<T: Read> Read for Recorder<T> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.read.extend_from_slice(&buf[..n]);
        Ok(n)
    }
}

impl<T: Write> Write for Recorder<T> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.inner.write(buf)
    }
    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

impl<T: Transport> Transport for Recorder<T> {
    fn set_read_timeout(&mut self, timeout: Option<Duration>) -> io::Result<()> {
        self.inner.set_read_timeout(timeout)
    }
    fn set_write_timeout(&mut self, timeout: Option<Duration>) -> io::Result<()> {
        self.inner.set_write_timeout(timeout)
    }
    fn set_read_deadline(&mut self, deadline: Option<Instant>) -> io::Result<()> {
        self.inner.set_read_deadline(deadline)
    }
    fn set_write_deadline(&mut self, deadline: Option<Instant>) -> io::Result<()> {
        self.inner.set_write_deadline(deadline)
    }
}

/// An aTLS session of `node` with joinsvc on which it offers `offered`,
/// its answers recorded.
fn recorded_session(
    node: &Node,
    joinsvc: &Joinsvc,
    offered: Option<[u8; 32]>,
) -> Client<Recorder<impl Transport>> {
    let issuer: Arc<dyn Issuer> = node.issuer.clone();
    let sock = TcpStream::connect(joinsvc.rpc_addr).unwrap();
    let connected = AtlsClient::new(Vec::new(), Some(issuer))
        .connect_sealing(sock, CALL, offered)
        .unwrap();
    Client::new(Recorder {
        inner: connected.stream,
        read: Vec::new(),
    })
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

#[test]
fn an_answer_read_outside_the_attested_vm_carries_no_usable_secret() {
    let node = Node::start("node", b"kernel");
    let joinsvc = Joinsvc::start(&joinsvc_bin(), &node.policy(), &[&node]);
    let disk_key = joinsvc.master_secret.state_disk_key(DISK_A);
    let measurement_secret = joinsvc.master_secret.measurement_secret();

    // The node's key pair never leaves the node; the recorder holds the
    // session's plaintext and a key pair of its own.
    let node_key = SealingKeyPair::generate();
    let recorder_key = SealingKeyPair::generate();
    let mut session = recorded_session(&node, &joinsvc, Some(node_key.public_key()));
    let req = IssueJoinTicketRequest {
        disk_uuid: DISK_A.into(),
        ..Default::default()
    };
    let ticket: IssueJoinTicketResponse = session.unary(confboot_proto::JOIN, &req, CALL).unwrap();
    let recorded = session.get_ref().read.clone();
    let created = joinsvc.tokens();
    assert_eq!(created.len(), 1, "a token was made for the ticket");
    let token = format!("{}.{}", created[0].id, created[0].secret);
    assert!(recorded.len() > 100, "the answer was recorded");
    for (what, secret) in [
        ("the state disk key", disk_key.expose()),
        ("the measurement secret", measurement_secret.expose()),
        ("the bootstrap token", token.as_bytes()),
        ("the token's secret", created[0].secret.as_bytes()),
    ] {
        assert!(
            !contains(&recorded, secret),
            "{what} shows in the recorded answer"
        );
    }
    // What the host may see stays in the clear.
    assert_eq!(ticket.api_server_endpoint, joinsvc.api_server_endpoint());
    assert!(ticket.state_disk_key.is_empty() && ticket.token.is_empty());
    // The recorder's key opens nothing.
    assert_eq!(
        JoinTicket::open(&ticket, &recorder_key),
        Err(TicketError::Sealed(SealError::DoesNotOpen(
            SealedKind::JoinTicket
        )))
    );
    // The node opens it.
    let ticket = JoinTicket::open(&ticket, &node_key).unwrap();
    assert_eq!(ticket.state_disk_key.expose(), disk_key.expose());
    assert_eq!(
        ticket.measurement_secret.expose(),
        measurement_secret.expose()
    );
    assert_eq!(*ticket.token, token);

    // A rejoin likewise.
    let node_key = SealingKeyPair::generate();
    let mut session = recorded_session(&node, &joinsvc, Some(node_key.public_key()));
    let rejoin: IssueRejoinTicketResponse = session
        .unary(
            confboot_proto::REJOIN,
            &IssueRejoinTicketRequest {
                disk_uuid: DISK_B.into(),
            },
            CALL,
        )
        .unwrap();
    let recorded = session.get_ref().read.clone();
    let disk_key = joinsvc.master_secret.state_disk_key(DISK_B);
    assert!(!contains(&recorded, disk_key.expose()));
    assert!(!contains(&recorded, measurement_secret.expose()));
    assert!(RejoinTicket::open(&rejoin, &recorder_key).is_err());
    let rejoin = RejoinTicket::open(&rejoin, &node_key).unwrap();
    assert_eq!(rejoin.state_disk_key.expose(), disk_key.expose());

    // And the honest node, through the node's own client, joins.
    let ticket = node.join(joinsvc.rpc_addr, DISK_A).unwrap();
    assert_eq!(
        ticket.state_disk_key.expose(),
        joinsvc.master_secret.state_disk_key(DISK_A).expose()
    );
}

#[test]
fn a_caller_that_offers_no_sealing_key_gets_no_ticket() {
    let node = Node::start("node", b"kernel");
    let joinsvc = Joinsvc::start(&joinsvc_bin(), &node.policy(), &[&node]);
    let mut session = recorded_session(&node, &joinsvc, None);
    let req = IssueJoinTicketRequest {
        disk_uuid: DISK_A.into(),
        ..Default::default()
    };
    let err = session
        .unary::<_, IssueJoinTicketResponse>(confboot_proto::JOIN, &req, CALL)
        .unwrap_err();
    assert_eq!(err.code, Code::FailedPrecondition, "{err}");
    assert!(err.message.contains("no sealing key"), "{err}");
    let mut session = recorded_session(&node, &joinsvc, None);
    let err = session
        .unary::<_, IssueRejoinTicketResponse>(
            confboot_proto::REJOIN,
            &IssueRejoinTicketRequest {
                disk_uuid: DISK_B.into(),
            },
            CALL,
        )
        .unwrap_err();
    assert_eq!(err.code, Code::FailedPrecondition, "{err}");
    let recorded = session.get_ref().read.clone();
    assert!(!contains(
        &recorded,
        joinsvc.master_secret.state_disk_key(DISK_B).expose()
    ));
    assert!(
        joinsvc.tokens().is_empty(),
        "no token was made for a caller without a key"
    );
    let (_, metrics) = joinsvc.http_get("/metrics");
    assert!(
        metrics
            .lines()
            .any(|l| l == "joinsvc_tickets_refused_total{reason=\"unsealed\"} 2"),
        "{metrics}"
    );
}
