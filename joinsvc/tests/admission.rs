//! An admission is bounded: an attested connection carries one ticket, so
//! every ticket is checked against the policy in force when it is issued.
//! A node admitted before a policy change cannot keep pulling tickets (any
//! disk's key) on the connection it already has.

use std::time::Duration;

use confboot_cluster::ticket::RejoinTicket;
use confboot_proto::join::IssueRejoinTicketRequest;
use confboot_tests::cluster::{Joinsvc, Node};
use confboot_wire::Code;

const DISK_A: &str = "0f3c6c1e-2b5d-4e8a-9c7f-1a2b3c4d5e6f";
const DISK_B: &str = "1f3c6c1e-2b5d-4e8a-9c7f-1a2b3c4d5e6f";

#[test]
fn an_attested_connection_carries_one_ticket() {
    let node = Node::start("node", b"kernel");
    let joinsvc = Joinsvc::start(
        std::path::Path::new(env!("CARGO_BIN_EXE_joinsvc")),
        &node.policy(),
        &[&node],
    );
    let mut client = node.connect(joinsvc.rpc_addr).unwrap();
    let ask = |disk: &str| IssueRejoinTicketRequest {
        disk_uuid: disk.into(),
    };
    let first: RejoinTicket = client
        .rejoin(&ask(DISK_A), Duration::from_secs(20))
        .unwrap();
    assert_eq!(first.state_disk_key.expose().len(), 32);
    // The same connection asks again, for another disk: nothing.
    let second: Result<RejoinTicket, _> = client.rejoin(&ask(DISK_B), Duration::from_secs(20));
    let err = second.unwrap_err();
    assert_eq!(err.code, Code::Unavailable, "{err}");
    // A new connection is attested again, and served.
    assert!(node.rejoin(joinsvc.rpc_addr, DISK_B).is_ok());
}

#[test]
fn request_fields_reach_the_log_only_once_validated() {
    let node = Node::start("node", b"kernel");
    let joinsvc = Joinsvc::start(
        std::path::Path::new(env!("CARGO_BIN_EXE_joinsvc")),
        &node.policy(),
        &[&node],
    );
    // A forged log line, and 64 KiB of one byte: neither is a UUID.
    let forged = "x\n2026-01-01T00:00:00.000Z INFO joinsvc: forged line";
    let huge = "A".repeat(64 * 1024);
    for disk in [forged, huge.as_str()] {
        let err = node.join(joinsvc.rpc_addr, disk).unwrap_err();
        assert_eq!(err.code, Code::InvalidArgument, "{err}");
        let err = node.rejoin(joinsvc.rpc_addr, disk).unwrap_err();
        assert_eq!(err.code, Code::InvalidArgument, "{err}");
    }
    assert!(node.rejoin(joinsvc.rpc_addr, DISK_A).is_ok());
    // A valid UUID is logged (the reader of joinsvc's stderr may lag
    // behind the reply); every earlier line is in by then.
    joinsvc.process.wait_for_line(DISK_A, 500);
    let log = joinsvc.process.log();
    for line in &log {
        assert!(!line.contains("forged line"), "{line}");
        assert!(
            !line.contains("AAAAAAAA"),
            "{}",
            &line[..line.len().min(200)]
        );
        assert!(line.len() < 1024, "a log line of {} bytes", line.len());
    }
}
