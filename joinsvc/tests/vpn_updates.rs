//! The VPN peer registry through the real joinsvc process, over aTLS: a
//! node that sends its WireGuard key with its join request gets a VPN
//! address in its ticket; `vpn.API/GetUpdate` gives attested nodes the
//! versioned peer list (the whole list only when the version differs); a
//! restarted joinsvc serves the same registry, kept in the real API
//! server (in the joinsvc's own namespace on the test binary's shared
//! control plane); unattested and wrongly measured callers get nothing,
//! and neither do nodes that are not members (PCR 15 zero, or another
//! cluster's mark); a member's own record, proven with its disk's key,
//! registers it and never takes another disk's name.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use confboot_atls as atls;
use confboot_attest::Issuer;
use confboot_proto::join::IssueJoinTicketRequest;
use confboot_proto::vpn::{GetUpdateRequest, GetUpdateResponse};
use confboot_proto::{GET_UPDATE, JOIN};
use confboot_tests::TempDir;
use confboot_tests::cluster::{Joinsvc, JoinsvcSetup, Node};

const DISK: &str = "0f3c6c1e-2b5d-4e8a-9c7f-1a2b3c4d5e6f";
const CALL: Duration = Duration::from_secs(20);

fn joinsvc_binary() -> &'static std::path::Path {
    std::path::Path::new(env!("CARGO_BIN_EXE_joinsvc"))
}

/// An aTLS client in which `node` attests and offers a sealing key.
fn client(node: &Node, addr: SocketAddr) -> atls::AtlsRpcClient {
    node.connect(addr).unwrap().rpc
}

/// The state disk UUID of the node `name`: each node its own.
fn disk_of(name: &str) -> String {
    let mut tail = [0u8; 6];
    for (i, b) in name.bytes().enumerate() {
        tail[i % 6] = tail[i % 6].wrapping_mul(31).wrapping_add(b);
    }
    format!(
        "00000000-0000-4000-8000-{}",
        confboot_util::hex::encode(&tail)
    )
}

fn join(node: &Node, addr: SocketAddr, name: &str, key: u8) -> String {
    let req = IssueJoinTicketRequest {
        disk_uuid: disk_of(name),
        node_name: name.into(),
        node_vpn_pub_key: vec![key; 32],
        node_public_endpoint: format!("192.0.2.{key}:51820"),
        ..Default::default()
    };
    let ticket = node.connect(addr).unwrap().join(&req, CALL).unwrap();
    ticket.node_vpn_ip.clone()
}

fn update(node: &Node, addr: SocketAddr, known: u64) -> GetUpdateResponse {
    let req = GetUpdateRequest {
        resource_version: known,
        own: None,
    };
    client(node, addr).unary(GET_UPDATE, &req, CALL).unwrap()
}

/// A node of `joinsvc`'s cluster: booted the image `kernel` and marked
/// with the cluster's id, as a bootstrapped node is.
fn member(name: &str, kernel: &[u8], cluster_id: &[u8]) -> Node {
    let node = Node::start(name, kernel);
    node.issuer
        .with_tpm(|t| confboot_cluster::mark::mark_node(t, cluster_id))
        .unwrap();
    node
}

#[test]
fn attested_nodes_get_addresses_and_versioned_peer_lists_that_survive_a_restart() {
    let joining = Node::start("node", b"kernel");
    let setup = JoinsvcSetup::new();
    let member = member("member", b"kernel", &setup.cluster_id());
    let mut joinsvc = launch_vpn(&joining, &[&joining, &member], setup);
    let addr = joinsvc.rpc_addr;
    let node = &member;
    // A member may not join again (its PCR 15 is marked).
    let marked_join = client(node, addr)
        .unary::<_, confboot_proto::join::IssueJoinTicketResponse>(
            JOIN,
            &IssueJoinTicketRequest {
                disk_uuid: DISK.into(),
                ..Default::default()
            },
            CALL,
        )
        .unwrap_err();
    assert_eq!(marked_join.code, confboot_wire::Code::PermissionDenied);
    let node = &joining;
    assert_eq!(update(&member, addr, 0).resource_version, 0);
    assert_eq!(join(node, addr, "worker-1", 1), "10.118.0.1");
    assert_eq!(join(node, addr, "worker-2", 2), "10.118.0.2");
    let full = update(&member, addr, 0);
    assert_eq!(full.resource_version, 2);
    let names: Vec<&str> = full.peers.iter().map(|p| p.name.as_str()).collect();
    assert_eq!(names, ["worker-1", "worker-2"]);
    assert_eq!(full.peers[1].vpn_ip, "10.118.0.2");
    assert_eq!(full.peers[1].public_endpoint, "192.0.2.2:51820");
    assert_eq!(full.peers[1].vpn_pub_key, vec![2; 32]);
    // The version the node has: nothing to send.
    let same = update(&member, addr, 2);
    assert_eq!(same.resource_version, 2);
    assert!(same.peers.is_empty());

    // The registry is in the Kubernetes API: a restarted joinsvc has it.
    joinsvc.restart();
    let again = update(&member, addr, 0);
    // Signed for its own session: the same list under another signature.
    assert_ne!(again.signature, full.signature);
    let unsigned = |r: &GetUpdateResponse| (r.resource_version, r.peers.clone());
    assert_eq!(unsigned(&again), unsigned(&full));
    assert_eq!(join(node, addr, "worker-1", 1), "10.118.0.1");
    assert_eq!(join(node, addr, "worker-3", 3), "10.118.0.3");
    assert_eq!(update(&member, addr, 2).peers.len(), 3);
    let stored = joinsvc.configmap("confboot-vpn-peers").unwrap();
    assert_eq!(stored["data"]["version"], "3");

    // The admin removes a node through the control plane: the next update
    // lists the others only; removing it again changes nothing.
    assert_eq!(remove_peer(&joinsvc, "worker-2"), Some(0));
    // Another writer's change reaches joinsvc's answers within its cache
    // time (a node sees it at a later poll).
    let after = poll_until_version(&member, addr, 3, 4);
    let names: Vec<&str> = after.peers.iter().map(|p| p.name.as_str()).collect();
    assert_eq!(names, ["worker-1", "worker-3"]);
    assert_eq!(remove_peer(&joinsvc, "worker-2"), Some(1));
    assert!(update(&member, addr, 4).peers.is_empty());
}

/// Polls as a node does (every 200 ms) until the answer has version
/// `want`; a bound of 20 polls.
fn poll_until_version(node: &Node, addr: SocketAddr, known: u64, want: u64) -> GetUpdateResponse {
    for _ in 0..20 {
        let answer = update(node, addr, known);
        if answer.resource_version == want {
            return answer;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    panic!("no version {want} after 20 polls");
}

/// `joinsvc --remove-vpn-peer NAME` against `joinsvc`'s Kubernetes API;
/// its exit code.
fn remove_peer(joinsvc: &Joinsvc, name: &str) -> Option<i32> {
    let dir = TempDir::new("remove-vpn-peer");
    let status = joinsvc
        .remove_vpn_peer_command(joinsvc_binary(), name, "10.118.0.0/24", dir.path())
        .status()
        .unwrap();
    status.code()
}

/// A joinsvc with the VPN range 10.118.0.0/24 that admits `image`'s
/// measurements from the AKs of `trusted`.
fn launch_vpn(image: &Node, trusted: &[&Node], mut setup: JoinsvcSetup) -> Joinsvc {
    setup.pinned_aks = trusted.iter().map(|n| n.issuer.ak_public_key()).collect();
    setup.extra = vec!["--vpn-cidr".into(), "10.118.0.0/24".into()];
    Joinsvc::launch(joinsvc_binary(), &image.policy(), setup)
}

#[test]
fn nodes_that_are_not_members_get_no_peer_list() {
    let setup = JoinsvcSetup::new();
    let unmarked = Node::start("unmarked", b"kernel");
    let foreign = member("foreign", b"kernel", &[7; 32]);
    let joinsvc = launch_vpn(&unmarked, &[&unmarked, &foreign], setup);
    for node in [&unmarked, &foreign] {
        let err = client(node, joinsvc.rpc_addr)
            .unary::<_, GetUpdateResponse>(
                GET_UPDATE,
                &GetUpdateRequest {
                    resource_version: 0,
                    own: None,
                },
                CALL,
            )
            .unwrap_err();
        assert_eq!(err.code, confboot_wire::Code::PermissionDenied, "{err}");
        assert!(err.message.contains("not a member"), "{err}");
    }
    // The unmarked node still joins.
    assert_eq!(
        join(&unmarked, joinsvc.rpc_addr, "worker-1", 1),
        "10.118.0.1"
    );
}

#[test]
fn a_members_own_record_registers_it_and_cannot_take_another_disks_name() {
    let setup = JoinsvcSetup::new();
    let id = setup.cluster_id();
    let (a, b) = (member("a", b"kernel", &id), member("b", b"kernel", &id));
    let joinsvc = launch_vpn(&a, &[&a, &b], setup);
    let own = |node: &Node, name: &str, key: u8, disk: &str| {
        let disk_key = joinsvc.master_secret.state_disk_key(disk);
        let record = confboot_vpn::OwnRecordKey::from_disk_key(disk_key.expose()).record(
            name,
            &format!("192.0.2.{key}:51820"),
            &confboot_vpn::VpnPublicKey::from_bytes(&[key; 32]).unwrap(),
            disk,
        );
        client(node, joinsvc.rpc_addr).unary::<_, GetUpdateResponse>(
            GET_UPDATE,
            &GetUpdateRequest {
                resource_version: 0,
                own: Some(record),
            },
            CALL,
        )
    };
    let other_disk = "9f3c6c1e-2b5d-4e8a-9c7f-1a2b3c4d5e6f";
    let first = own(&a, "cp-1", 1, DISK).unwrap();
    assert_eq!(first.peers.len(), 1);
    assert_eq!(first.peers[0].vpn_ip, "10.118.0.1");
    // Its endpoint after a reboot (a new DHCP lease) and a new key.
    let moved = own(&a, "cp-1", 3, DISK).unwrap();
    assert_eq!(moved.peers[0].public_endpoint, "192.0.2.3:51820");
    // Another member, its own disk: refused the name, given its own.
    let taken = own(&b, "cp-1", 2, other_disk).unwrap_err();
    assert_eq!(taken.code, confboot_wire::Code::PermissionDenied, "{taken}");
    assert!(taken.message.contains("another state disk"), "{taken}");
    let both = own(&b, "worker-1", 2, other_disk).unwrap();
    let names: Vec<&str> = both.peers.iter().map(|p| p.name.as_str()).collect();
    assert_eq!(names, ["cp-1", "worker-1"]);
    assert_eq!(both.peers[0].vpn_pub_key, vec![3; 32]);
}

#[test]
fn unattested_and_wrongly_measured_callers_get_no_peer_list() {
    let node = Node::start("node", b"kernel");
    let joinsvc = Joinsvc::start_with(
        joinsvc_binary(),
        &node.policy(),
        &[&node],
        &["--vpn-cidr", "10.118.0.0/24"],
    );
    let req = GetUpdateRequest {
        resource_version: 0,
        own: None,
    };
    // No attestation from the caller: refused in the handshake or the call.
    let unattested = atls::connect(joinsvc.rpc_addr, CALL, &[], None)
        .map_err(|e| e.to_string())
        .and_then(|(mut c, _)| {
            c.unary::<_, GetUpdateResponse>(GET_UPDATE, &req, CALL)
                .map_err(|s| s.to_string())
        });
    assert!(unattested.is_err(), "{unattested:?}");
    // Another image (its kernel differs): refused in the handshake.
    let stranger = Node::start("stranger", b"another kernel");
    let issuer: Arc<dyn Issuer> = stranger.issuer.clone();
    let measured_wrong = atls::connect(joinsvc.rpc_addr, CALL, &[], Some(issuer))
        .map_err(|e| e.to_string())
        .and_then(|(mut c, _)| {
            c.unary::<_, GetUpdateResponse>(GET_UPDATE, &req, CALL)
                .map_err(|s| s.to_string())
        });
    assert!(measured_wrong.is_err(), "{measured_wrong:?}");
    // A joinsvc without a VPN says so (to a member).
    let setup = JoinsvcSetup::new();
    let member = member("member", b"kernel", &setup.cluster_id());
    let plain = Joinsvc::launch(
        joinsvc_binary(),
        &node.policy(),
        JoinsvcSetup {
            pinned_aks: vec![member.issuer.ak_public_key()],
            ..setup
        },
    );
    let err = client(&member, plain.rpc_addr)
        .unary::<_, GetUpdateResponse>(GET_UPDATE, &req, CALL)
        .unwrap_err();
    assert_eq!(err.code, confboot_wire::Code::FailedPrecondition, "{err}");
    assert!(err.message.contains("--vpn-cidr"), "{err}");
}

/// A removal sticks: a node the admin removed, whose host then deletes
/// the "bootstrapped" token from its disk's header so that it boots as a
/// first boot (PCR 15 unmarked), asks for a join for its own disk again:
/// refused, with no key and no token, and it stays off the list; a rejoin
/// for that disk is refused too.
#[test]
fn a_removed_node_whose_header_lost_its_bootstrapped_token_cannot_join_again() {
    let node = Node::start("node", b"kernel");
    let setup = JoinsvcSetup::new();
    let member = member("member", b"kernel", &setup.cluster_id());
    let joinsvc = launch_vpn(&node, &[&node, &member], setup);
    let addr = joinsvc.rpc_addr;
    assert_eq!(join(&node, addr, "worker-1", 1), "10.118.0.1");
    let tokens = joinsvc.tokens().len();
    assert_eq!(remove_peer(&joinsvc, "worker-1"), Some(0));
    let req = IssueJoinTicketRequest {
        disk_uuid: disk_of("worker-1"),
        node_name: "worker-1".into(),
        node_vpn_pub_key: vec![1; 32],
        node_public_endpoint: "192.0.2.1:51820".into(),
        ..Default::default()
    };
    let err = client(&node, addr)
        .unary::<_, confboot_proto::join::IssueJoinTicketResponse>(JOIN, &req, CALL)
        .unwrap_err();
    assert_eq!(err.code, confboot_wire::Code::PermissionDenied, "{err}");
    assert!(err.message.contains("was removed"), "{err}");
    let err = node.rejoin(addr, &disk_of("worker-1")).unwrap_err();
    assert_eq!(err.code, confboot_wire::Code::PermissionDenied, "{err}");
    assert_eq!(joinsvc.tokens().len(), tokens, "no token made");
    assert!(poll_until_version(&member, addr, 0, 2).peers.is_empty());
    let (_, metrics) = joinsvc.http_get("/metrics");
    assert!(
        metrics
            .lines()
            .any(|l| l == "joinsvc_tickets_refused_total{reason=\"disk_removed\"} 2"),
        "{metrics}"
    );
}
