//! The VPN peer registry and the ledger it carries against a real API
//! server (one control plane for this test binary,
//! `confboot_tests::kube::ControlPlane::shared`): each test has a namespace
//! of its own, with joinsvc's ServiceAccount, Role and RoleBinding as
//! `deploy/kubernetes/joinsvc.yaml` ships them, so the registry's reads
//! and compare-and-swap writes meet the real authorizer and the real
//! optimistic concurrency (409 on a stale `resourceVersion`). Requests go
//! through the fault proxy (`confboot_tests::kube_proxy`), which counts
//! them; the admin's view and edits of the ConfigMaps are the real kubectl.

use std::net::Ipv4Addr;
use std::sync::Arc;
use std::time::Duration;

use confboot_tests::kube::ControlPlane;
use confboot_tests::kube_proxy::FaultProxy;
use confboot_vpn::{VpnError, VpnNetwork, VpnPublicKey};
use joinsvc::configmap::parse_stored;
use joinsvc::kube_api::KubeApi;
use joinsvc::ledger::{Caller, JOIN_COMPLETION_WINDOW, Refusal, TicketKind};
use joinsvc::vpn::{
    ISSUED_FILTER_CONFIGMAP, KubeApiPeerRegistry, MAX_REMOVED_DISKS, PEERS_CONFIGMAP, PeerRequest,
    RegistryError,
};
use serde_json::{Value, json};
use zeroize::Zeroizing;

/// A test's namespace on the shared plane, joinsvc's account in it, and
/// the fault proxy its registries go through.
struct Env {
    plane: &'static ControlPlane,
    ns: String,
    token: String,
    proxy: FaultProxy,
}

impl Env {
    /// joinsvc's Role as shipped.
    fn new() -> Env {
        Env::with_role_without(&[])
    }

    /// joinsvc's Role without its rules at the indices `dropped`.
    fn with_role_without(dropped: &[usize]) -> Env {
        let plane = ControlPlane::shared();
        let ns = plane.namespace("vpn-registry");
        let token = plane.joinsvc_account(&ns, dropped);
        let proxy = FaultProxy::start(plane.endpoint(), &plane.ca_pem());
        Env {
            plane,
            ns,
            token,
            proxy,
        }
    }

    /// The ConfigMap `name` as the API server holds it.
    fn configmap(&self, name: &str) -> Option<Value> {
        self.plane.configmap(&self.ns, name)
    }

    /// The admin (or any writer with access) replaces the ConfigMap's data.
    fn put_configmap_data(&self, name: &str, data: Value) {
        let patch = json!([{"op": "replace", "path": "/data", "value": data}]).to_string();
        // In a file: the filter alone is some 175 KB.
        let dir = confboot_tests::TempDir::new("configmap-patch");
        let file = dir.path().join("patch.json");
        std::fs::write(&file, patch).unwrap();
        self.plane.kubectl(&[
            "patch",
            "configmap",
            name,
            "-n",
            &self.ns,
            "--type=json",
            &format!("--patch-file={}", file.display()),
        ]);
    }

    /// Requests the registries made so far.
    fn requests(&self) -> u64 {
        self.proxy.requests()
    }

    /// Requests to the ConfigMap `name` so far.
    fn configmap_requests(&self, name: &str) -> u64 {
        self.proxy.requests_to(&format!("/configmaps/{name}"))
    }
}

fn registry(env: &Env, network: &str) -> KubeApiPeerRegistry {
    let api = KubeApi::new(
        &env.proxy.url(),
        env.proxy.ca_pem(),
        Zeroizing::new(env.token.clone()),
        Duration::from_secs(30),
        1,
    )
    .unwrap();
    KubeApiPeerRegistry::new(api, network.parse().unwrap())
        .unwrap()
        .in_namespace(&env.ns)
        .unwrap()
}

/// A registry of 10.118.0.0/24 in `env` with nodes 0 to `n - 1`
/// ([`request`]) registered.
fn registry_with(env: &Env, n: u32) -> KubeApiPeerRegistry {
    let r = registry(env, "10.118.0.0/24");
    for i in 0..n {
        r.register(&request(i)).unwrap();
    }
    r
}

fn request(i: u32) -> PeerRequest {
    let mut key = [7u8; 32];
    key[..4].copy_from_slice(&(i + 1).to_le_bytes());
    PeerRequest {
        name: format!("node-{i}"),
        public_endpoint: format!("192.0.2.{}:51820", i % 250 + 1).parse().unwrap(),
        vpn_pub_key: VpnPublicKey::from_bytes(&key).unwrap(),
        disk_uuid: format!("00000000-0000-4000-8000-{:012x}", i),
    }
}

fn ip(last: u8) -> Ipv4Addr {
    Ipv4Addr::new(10, 118, 0, last)
}

#[test]
fn nodes_get_distinct_addresses_that_a_restarted_control_plane_still_has() {
    let env = Env::new();
    let r = registry(&env, "10.118.0.0/24");
    assert_eq!(r.update(0).unwrap().resource_version, 0);
    for i in 0..3 {
        assert_eq!(r.register(&request(i)).unwrap(), ip(i as u8 + 1));
    }
    // Registering again changes nothing.
    assert_eq!(r.register(&request(1)).unwrap(), ip(2));
    let update = r.update(0).unwrap();
    assert_eq!(update.resource_version, 3);
    assert_eq!(update.peers.len(), 3);
    // The list only when the version differs.
    assert!(r.update(3).unwrap().peers.is_empty());
    // Another replica, or this one restarted, reads the same registry.
    let again = registry(&env, "10.118.0.0/24");
    assert_eq!(again.update(0).unwrap(), update);
    assert_eq!(again.register(&request(3)).unwrap(), ip(4));
    let stored = env.configmap(PEERS_CONFIGMAP).unwrap();
    assert_eq!(stored["data"]["version"], "4");
    assert!(
        stored["data"]["peers.json"]
            .as_str()
            .unwrap()
            .contains("\"vpnIP\":\"10.118.0.4\"")
    );
}

#[test]
fn a_reinstalled_node_keeps_its_address_and_a_stolen_key_is_refused() {
    let env = Env::new();
    let r = registry_with(&env, 2);
    let mut reinstalled = request(0);
    reinstalled.vpn_pub_key = request(9).vpn_pub_key;
    reinstalled.public_endpoint = "192.0.2.99:51820".parse().unwrap();
    assert_eq!(r.register(&reinstalled).unwrap(), ip(1));
    let peers = r.update(0).unwrap().peers;
    assert_eq!(peers[0].public_endpoint, "192.0.2.99:51820");
    assert_eq!(r.update(0).unwrap().resource_version, 3);
    // node-1's key under another name.
    let mut thief = request(5);
    thief.vpn_pub_key = request(1).vpn_pub_key;
    assert!(matches!(
        r.register(&thief),
        Err(RegistryError::Refused(VpnError::Duplicate {
            what: "key",
            ..
        }))
    ));
    assert_eq!(r.update(0).unwrap().resource_version, 3);
}

#[test]
fn a_name_is_bound_to_its_disk_which_only_a_removal_by_the_admin_changes() {
    let env = Env::new();
    let r = registry(&env, "10.118.0.0/24");
    // Registered by its own record (a first control plane).
    assert_eq!(r.refresh_own(&request(0)).unwrap(), ip(1));
    let stored = env.configmap(PEERS_CONFIGMAP).unwrap();
    assert!(
        stored["data"]["peers.json"]
            .as_str()
            .unwrap()
            .contains(&request(0).disk_uuid)
    );
    // Its own disk moves it; another disk may not.
    let mut moved = request(0);
    moved.public_endpoint = "192.0.2.77:51820".parse().unwrap();
    assert_eq!(r.refresh_own(&moved).unwrap(), ip(1));
    let mut thief = request(0);
    thief.disk_uuid = request(1).disk_uuid;
    thief.vpn_pub_key = request(1).vpn_pub_key;
    assert_eq!(
        r.refresh_own(&thief),
        Err(RegistryError::NameTaken {
            name: "node-0".into()
        })
    );
    assert_eq!(r.update(0).unwrap().resource_version, 2);
    // A join from another disk with the same (DHCP) name is refused,
    // and the node holding the name keeps it and its own record.
    assert_eq!(
        r.register(&thief),
        Err(RegistryError::NameTaken {
            name: "node-0".into()
        })
    );
    assert_eq!(r.refresh_own(&moved).unwrap(), ip(1));
    assert_eq!(r.update(0).unwrap().resource_version, 2);
    // Only the admin's removal frees the name, for another disk.
    assert!(r.remove("node-0").unwrap());
    assert_eq!(r.register(&thief).unwrap(), ip(1));
    assert!(matches!(
        r.refresh_own(&moved),
        Err(RegistryError::Removed { .. })
    ));
}

#[test]
fn a_removed_node_leaves_the_list_and_its_address_is_reused() {
    let env = Env::new();
    let r = registry_with(&env, 3);
    assert!(r.remove("node-1").unwrap());
    assert!(!r.remove("node-1").unwrap());
    let update = r.update(3).unwrap();
    assert_eq!(update.resource_version, 4);
    let names: Vec<&str> = update.peers.iter().map(|p| p.name.as_str()).collect();
    assert_eq!(names, ["node-0", "node-2"]);
    assert_eq!(r.register(&request(7)).unwrap(), ip(2));
}

#[test]
fn a_removed_node_cannot_put_itself_back_by_its_record_or_a_join() {
    let env = Env::new();
    let r = registry(&env, "10.118.0.0/24");
    for i in 0..2 {
        r.refresh_own(&request(i)).unwrap();
    }
    assert!(r.remove("node-1").unwrap());
    // Its agent's next poll carries its own record: refused, and the
    // list stays without it (here and for a restarted replica).
    assert_eq!(
        r.refresh_own(&request(1)),
        Err(RegistryError::Removed {
            name: "node-1".into()
        })
    );
    // Under another name too: the disk is what was removed.
    let mut renamed = request(1);
    renamed.name = "node-1b".into();
    assert!(matches!(
        r.refresh_own(&renamed),
        Err(RegistryError::Removed { .. })
    ));
    let restarted = registry(&env, "10.118.0.0/24");
    let names: Vec<String> = restarted
        .update(0)
        .unwrap()
        .peers
        .into_iter()
        .map(|p| p.name)
        .collect();
    assert_eq!(names, ["node-0"]);
    // Other nodes are not affected.
    r.refresh_own(&request(0)).unwrap();
    // A join for its disk (a header whose "bootstrapped" token was
    // deleted) does not bring it back: refused, and still removed.
    assert_eq!(
        r.register(&request(1)),
        Err(RegistryError::Admission(Refusal::DiskRemoved {
            disk: request(1).disk_uuid
        }))
    );
    assert!(matches!(
        r.refresh_own(&request(1)),
        Err(RegistryError::Removed { .. })
    ));
    // A reinstalled node (a blank disk, a new UUID) joins under the name.
    let mut reinstalled = request(2);
    reinstalled.name = "node-1".into();
    r.register(&reinstalled).unwrap();
    r.refresh_own(&reinstalled).unwrap();
    assert_eq!(r.update(0).unwrap().peers.len(), 2);
}

/// A registry in `env` whose clock the returned handle sets.
fn registry_on_a_clock(env: &Env) -> (KubeApiPeerRegistry, Arc<std::sync::atomic::AtomicU64>) {
    use std::sync::atomic::{AtomicU64, Ordering};
    let now = Arc::new(AtomicU64::new(1_700_000_000));
    let clock = Arc::clone(&now);
    let r = registry(env, "10.118.0.0/24").with_clock(move || clock.load(Ordering::SeqCst));
    (r, now)
}

#[test]
fn a_join_whose_node_never_sends_its_record_expires_and_frees_its_name_and_address() {
    use std::sync::atomic::Ordering;
    let env = Env::new();
    let (r, now) = registry_on_a_clock(&env);
    assert_eq!(r.register(&request(0)).unwrap(), ip(1));
    assert_eq!(r.register(&request(1)).unwrap(), ip(2));
    // node-1 completes its first boot: its own record arrives.
    r.refresh_own(&request(1)).unwrap();
    // Within the window node-0's name is held for its disk.
    let mut squatter = request(5);
    squatter.name = "node-0".into();
    assert!(matches!(
        r.register(&squatter),
        Err(RegistryError::NameTaken { .. })
    ));
    now.fetch_add(JOIN_COMPLETION_WINDOW.as_secs(), Ordering::SeqCst);
    // After it, node-0's registration is gone: its name and address
    // are another node's; node-1's stays.
    assert_eq!(r.register(&squatter).unwrap(), ip(1));
    let names: Vec<String> = r
        .update(0)
        .unwrap()
        .peers
        .into_iter()
        .map(|p| p.name)
        .collect();
    assert_eq!(names, ["node-0", "node-1"]);
    assert_eq!(r.refresh_own(&request(1)).unwrap(), ip(2));
    // And node-0's disk joined for good: it rejoins, never joins.
    assert_eq!(
        r.register(&request(0)),
        Err(RegistryError::Admission(Refusal::DiskJoined {
            disk: request(0).disk_uuid
        }))
    );
}

#[test]
fn a_members_own_record_refreshes_only_its_own_name() {
    let env = Env::new();
    let r = registry_with(&env, 1);
    r.refresh_own(&request(0)).unwrap();
    // The same disk under another, unbound name: refused.
    let mut second_name = request(0);
    second_name.name = "node-0b".into();
    second_name.vpn_pub_key = request(9).vpn_pub_key;
    assert_eq!(
        r.refresh_own(&second_name),
        Err(RegistryError::DiskHasName {
            name: "node-0b".into(),
            bound: "node-0".into()
        })
    );
    assert_eq!(r.update(0).unwrap().peers.len(), 1);
}

#[test]
fn a_disk_whose_first_boot_completed_gets_no_second_join() {
    let env = Env::new();
    let r = registry(&env, "10.118.0.0/24");
    // An interrupted first boot finishes with the same UUID.
    r.register(&request(0)).unwrap();
    r.register(&request(0)).unwrap();
    // The node's own record shows its first boot complete; a join for
    // its disk (its header's "bootstrapped" token deleted) is refused,
    // here and at a restarted replica; a rejoin is served.
    r.refresh_own(&request(0)).unwrap();
    let refused = Err(RegistryError::Admission(Refusal::DiskJoined {
        disk: request(0).disk_uuid,
    }));
    assert_eq!(r.register(&request(0)), refused);
    let restarted = registry(&env, "10.118.0.0/24");
    assert_eq!(restarted.register(&request(0)), refused);
    restarted
        .admit(
            &Caller::Unbootstrapped,
            TicketKind::Rejoin,
            &request(0).disk_uuid,
            None,
        )
        .unwrap();
}

#[test]
fn an_snp_launch_is_served_once_by_every_replica_and_after_a_restart() {
    use joinsvc::ledger::LaunchId;
    let env = Env::new();
    let r = registry(&env, "10.118.0.0/24");
    let launch = Caller::Launch(LaunchId::from_bytes([4; 32]));
    let disk = |i| request(i).disk_uuid;
    r.admit(&launch, TicketKind::Rejoin, &disk(0), None)
        .unwrap();
    let other = registry(&env, "10.118.0.0/24");
    for (kind, d) in [
        (TicketKind::Rejoin, disk(1)),
        (TicketKind::Rejoin, disk(0)),
        (TicketKind::Join, disk(2)),
    ] {
        assert_eq!(
            other.admit(&launch, kind, &d, None),
            Err(RegistryError::Admission(Refusal::LaunchServed))
        );
    }
    // A refused launch leaves nothing behind: disk 2 may join.
    other
        .admit(&Caller::Unbootstrapped, TicketKind::Join, &disk(2), None)
        .unwrap();
    // Another launch (the node rebooted) is served.
    let next = Caller::Launch(LaunchId::from_bytes([5; 32]));
    r.admit(&next, TicketKind::Rejoin, &disk(0), None).unwrap();
}

#[test]
fn a_disks_generation_is_kept_for_every_replica_and_a_removal_ends_it() {
    let env = Env::new();
    let r = registry(&env, "10.118.0.0/24");
    let disk = request(0).disk_uuid;
    assert_eq!(r.last_generation(&disk).unwrap(), 0);
    r.confirm_generation(&disk, 0, 1).unwrap();
    r.confirm_generation(&disk, 1, 2).unwrap();
    // Another replica (or this one restarted) has it, and refuses the
    // disk copied after the first rejoin.
    let other = registry(&env, "10.118.0.0/24");
    assert_eq!(other.last_generation(&disk).unwrap(), 2);
    assert_eq!(
        other.confirm_generation(&disk, 1, 2),
        Err(RegistryError::Admission(Refusal::RolledBack(
            confboot_cluster::generation::RolledBack { found: 1, last: 2 }
        )))
    );
    assert_eq!(r.last_generation(&disk).unwrap(), 2);
    // A removed node's disk confirms nothing, and its entry is gone.
    r.register(&request(0)).unwrap();
    assert!(r.remove("node-0").unwrap());
    assert_eq!(r.last_generation(&disk).unwrap(), 0);
    assert!(matches!(
        r.confirm_generation(&disk, 2, 3),
        Err(RegistryError::Admission(Refusal::DiskRemoved { .. }))
    ));
    // What is read back is checked: a spoilt entry refuses every change.
    let network: VpnNetwork = "10.118.0.0/24".parse().unwrap();
    for bad in [
        r#"{"not-a-uuid": [1, 2]}"#,
        r#"{"2f3c6c1e-2b5d-4e8a-9c7f-1a2b3c4d5e6f": [1]}"#,
        r#"{"2f3c6c1e-2b5d-4e8a-9c7f-1a2b3c4d5e6f": [-1, 2]}"#,
        r#"[]"#,
    ] {
        let body = serde_json::json!({
            "metadata": {"resourceVersion": "1"},
            "data": {"version": "1", "peers.json": "[]", "generations.json": bad},
        });
        assert!(
            matches!(
                parse_stored(&body.to_string(), Some(&network)).map_err(RegistryError::from),
                Err(RegistryError::Corrupt(_))
            ),
            "{bad}"
        );
    }
}

#[test]
fn the_remembered_removals_are_bounded_and_checked_when_read() {
    let env = Env::new();
    let r = registry(&env, "10.118.0.0/16");
    for i in 0..3 {
        r.register(&request(i)).unwrap();
        assert!(r.remove(&format!("node-{i}")).unwrap());
    }
    let network: VpnNetwork = "10.118.0.0/16".parse().unwrap();
    let stored = parse_stored(
        &env.configmap(PEERS_CONFIGMAP).unwrap().to_string(),
        Some(&network),
    )
    .unwrap();
    assert_eq!(stored.removed.len(), 3);
    assert_eq!(stored.removed[0], request(0).disk_uuid);
    let mut body = serde_json::json!({
        "metadata": {"resourceVersion": "1"},
        "data": {"version": "1", "peers.json": "[]", "removed.json": "[\"not-a-uuid\"]"},
    });
    assert!(matches!(
        parse_stored(&body.to_string(), Some(&network)).map_err(RegistryError::from),
        Err(RegistryError::Corrupt(_))
    ));
    let too_many: Vec<String> = (0..=MAX_REMOVED_DISKS as u32)
        .map(|i| request(i).disk_uuid)
        .collect();
    body["data"]["removed.json"] = serde_json::json!(serde_json::json!(too_many).to_string());
    assert!(matches!(
        parse_stored(&body.to_string(), Some(&network)).map_err(RegistryError::from),
        Err(RegistryError::Corrupt(_))
    ));
}

#[test]
fn concurrent_replicas_never_give_one_address_twice() {
    let env = Env::new();
    let replicas: Vec<Arc<KubeApiPeerRegistry>> = (0..3)
        .map(|_| Arc::new(registry(&env, "10.118.0.0/16")))
        .collect();
    let nodes = 36;
    let ips: Vec<Ipv4Addr> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..nodes)
            .map(|i| {
                let r = Arc::clone(&replicas[i as usize % 3]);
                s.spawn(move || r.register(&request(i)).unwrap())
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let distinct: std::collections::BTreeSet<_> = ips.iter().collect();
    assert_eq!(distinct.len(), nodes as usize, "{ips:?}");
    let update = replicas[0].update(0).unwrap();
    assert_eq!(update.peers.len(), nodes as usize);
    assert_eq!(update.resource_version, u64::from(nodes));
}

#[test]
fn the_filter_is_read_only_by_the_changes_that_consult_it() {
    use joinsvc::ledger::LaunchId;
    let env = Env::new();
    let r = registry(&env, "10.118.0.0/24");
    let filter_requests = || env.configmap_requests(ISSUED_FILTER_CONFIGMAP);
    // A join (its disk's filter entry consulted), then the node's first
    // record ends its first boot: the disk goes into the filter.
    r.register(&request(0)).unwrap();
    r.refresh_own(&request(0)).unwrap();
    let stored = env.configmap(ISSUED_FILTER_CONFIGMAP).unwrap();
    assert!(stored["data"]["issued-filter"].as_str().unwrap().len() > 100_000);
    assert!(
        env.configmap(PEERS_CONFIGMAP).unwrap()["data"]
            .get("issued-filter")
            .is_none()
    );
    // The node's later records, a vTPM node's rejoins and their
    // generations consult nothing the filter holds: it is not read.
    let before = filter_requests();
    for _ in 0..3 {
        r.refresh_own(&request(0)).unwrap();
        r.admit_rejoin(&Caller::Unbootstrapped, &request(0).disk_uuid)
            .unwrap();
        r.confirm_generation(&request(0).disk_uuid, 0, 1).ok();
    }
    assert_eq!(filter_requests(), before);
    // A join and an SEV-SNP launch consult it.
    assert_eq!(
        r.register(&request(0)),
        Err(RegistryError::Admission(Refusal::DiskJoined {
            disk: request(0).disk_uuid
        }))
    );
    assert_eq!(filter_requests(), before + 1);
    let launch = Caller::Launch(LaunchId::from_bytes([6; 32]));
    r.admit_rejoin(&launch, &request(0).disk_uuid).unwrap();
    assert_eq!(filter_requests(), before + 3, "a read and a write");
    assert_eq!(
        r.admit_rejoin(&launch, &request(0).disk_uuid),
        Err(RegistryError::Admission(Refusal::LaunchServed))
    );
}

#[test]
fn a_filter_an_older_joinsvc_kept_beside_the_peers_moves_into_its_own_object() {
    let env = Env::new();
    let r = registry_with(&env, 1);
    r.refresh_own(&request(0)).unwrap();
    // As an older joinsvc stored it: the filter beside the peers, and
    // no object of its own.
    let filter = env.configmap(ISSUED_FILTER_CONFIGMAP).unwrap()["data"].clone();
    let mut data = env.configmap(PEERS_CONFIGMAP).unwrap()["data"].clone();
    data["issued-filter"] = filter["issued-filter"].clone();
    data["issued-count"] = filter["issued-count"].clone();
    env.put_configmap_data(PEERS_CONFIGMAP, data);
    env.put_configmap_data(ISSUED_FILTER_CONFIGMAP, json!({}));
    // The joinsvc upgraded from it starts with no anchor (the one that
    // wrote the filter object would see it shrink: a regression).
    let r = registry(&env, "10.118.0.0/24");
    let refused = Err(RegistryError::Admission(Refusal::DiskJoined {
        disk: request(0).disk_uuid,
    }));
    // Its disk is still refused a join, before and after the first
    // change moved the filter.
    assert_eq!(r.register(&request(0)), refused);
    r.register(&request(1)).unwrap();
    let peers = env.configmap(PEERS_CONFIGMAP).unwrap();
    assert!(peers["data"].get("issued-filter").is_none());
    assert_eq!(
        env.configmap(ISSUED_FILTER_CONFIGMAP).unwrap()["data"]["issued-filter"],
        filter["issued-filter"]
    );
    assert_eq!(r.register(&request(0)), refused);
}

#[test]
fn concurrent_launches_at_several_replicas_are_each_served_once() {
    use joinsvc::ledger::LaunchId;
    let env = Env::new();
    let replicas: Vec<Arc<KubeApiPeerRegistry>> = (0..3)
        .map(|_| Arc::new(registry(&env, "10.118.0.0/16")))
        .collect();
    // Each launch asks at two replicas at once: the filter's
    // compare-and-swap gives it one ticket, and a launch whose second
    // write lost to another launch's keeps the one it claimed.
    let launches = 12u8;
    let served: Vec<bool> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..2 * u32::from(launches))
            .map(|i| {
                let r = Arc::clone(&replicas[i as usize % 3]);
                let launch = Caller::Launch(LaunchId::from_bytes([(i / 2) as u8; 32]));
                let disk = request(i / 2).disk_uuid;
                s.spawn(move || match r.admit_rejoin(&launch, &disk) {
                    Ok(_) => true,
                    Err(RegistryError::Admission(Refusal::LaunchServed)) => false,
                    Err(e) => panic!("{e}"),
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    for (launch, pair) in served.chunks(2).enumerate() {
        assert_eq!(
            pair.iter().filter(|s| **s).count(),
            1,
            "launch {launch}: {pair:?}"
        );
    }
}

#[test]
fn one_read_answers_the_polls_and_this_replicas_changes_show_at_once() {
    let env = Env::new();
    let r = registry(&env, "10.118.0.0/24").with_update_cache_ttl(Duration::from_secs(3600));
    r.register(&request(0)).unwrap();
    let before = env.requests();
    for known in 0..20 {
        assert_eq!(r.update(known % 2).unwrap().resource_version, 1);
    }
    assert_eq!(env.requests(), before + 1, "one read for twenty polls");
    // This replica's change: at once.
    r.register(&request(1)).unwrap();
    assert_eq!(r.update(0).unwrap().peers.len(), 2);
    // Another replica's: when the read is older than the cache's time.
    let other = registry(&env, "10.118.0.0/24");
    other.register(&request(2)).unwrap();
    assert_eq!(r.update(0).unwrap().resource_version, 2);
    let uncached = registry(&env, "10.118.0.0/24").with_update_cache_ttl(Duration::ZERO);
    assert_eq!(uncached.update(0).unwrap().resource_version, 3);
    let before = env.requests();
    uncached.update(3).unwrap();
    uncached.update(3).unwrap();
    assert_eq!(env.requests(), before + 2);
}

#[test]
fn a_spoilt_registry_is_refused_not_served_or_extended() {
    let env = Env::new();
    let r = registry_with(&env, 1);
    let peer = |ip: &str| {
        serde_json::json!([{
            "name": "node-0", "publicEndpoint": "192.0.2.1:51820",
            "vpnIP": ip, "vpnPubKey": request(0).vpn_pub_key.to_string(),
        }])
        .to_string()
    };
    for (data, why) in [
        (
            json!({"version": "2", "peers.json": peer("10.119.0.1")}),
            "range",
        ),
        (
            json!({"version": "x", "peers.json": peer("10.118.0.1")}),
            "version",
        ),
        (json!({"version": "2", "peers.json": "{"}), "JSON"),
        (json!({"version": "2"}), "peers.json"),
    ] {
        env.put_configmap_data(PEERS_CONFIGMAP, data.clone());
        for result in [r.update(0).map(|_| ()), r.register(&request(1)).map(|_| ())] {
            match result {
                Err(RegistryError::Corrupt(m)) => assert!(m.contains(why), "{m} lacks {why}"),
                other => panic!("{data}: {other:?}"),
            }
        }
        assert_eq!(env.configmap(PEERS_CONFIGMAP).unwrap()["data"], data);
    }
}

#[test]
fn an_exhausted_range_and_a_missing_role_are_named() {
    let env = Env::new();
    let r = registry(&env, "10.118.0.0/30");
    r.register(&request(0)).unwrap();
    r.register(&request(1)).unwrap();
    assert_eq!(
        r.register(&request(2)),
        Err(RegistryError::Refused(VpnError::RangeExhausted))
    );
    // joinsvc's Role with its Secrets rule only.
    let env = Env::with_role_without(&[1, 2]);
    let r = registry(&env, "10.118.0.0/24");
    match r.register(&request(0)) {
        Err(e @ RegistryError::Forbidden { .. }) => {
            {
                // The real API server names the object it refused.
                let m = e.to_string();
                assert!(
                    m.contains(&format!(
                        "configmaps \"{PEERS_CONFIGMAP}\" is forbidden: User \
                     \"system:serviceaccount:{}:confboot-joinsvc\" cannot get resource \
                     \"configmaps\"",
                        env.ns
                    )),
                    "{m}"
                )
            }
        }
        other => panic!("{other:?}"),
    }
}
