//! The node agent's VPN poller as a process: the real `nodeagent` over its
//! own swtpm (measured and marked as a bootstrapped node is) polls the real
//! `joinsvc` over aTLS, both sides attesting; its own record registers it;
//! a node that joins later reaches its list within two poll intervals, a
//! removed one leaves it; a restarted joinsvc and a restarted agent
//! converge. Then hostile control planes: one that does not attest, one
//! marked for another cluster, and one that is genuine (it holds the
//! cluster's control-plane role key) but sends an oversized list, a
//! malformed key or an address outside the range: each refused, the last
//! good list kept. Last, members that are no control plane: a marked
//! worker (genuine evidence, no role key), one that signs with a key of its
//! own, and one that replays an answer a control plane signed for another
//! session: refused.

use std::collections::VecDeque;
use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use confboot_atls as atls;
use confboot_atls::AttestedPeer;
use confboot_attest::{AttestationError, Attested, EXTRA_DATA_LEN, Issuer, Validator, Variant};
use confboot_cluster::role::{ControlPlaneKey, ControlPlanePublicKey};
use confboot_kms::MasterSecret;
use confboot_net::listener::PoolConfig;
use confboot_proto::GET_UPDATE;
use confboot_proto::join::IssueJoinTicketRequest;
use confboot_proto::vpn::{GetUpdateRequest, GetUpdateResponse, Peer};
use confboot_tests::cluster::{Joinsvc, JoinsvcSetup, Node, workspace_binary};
use confboot_tests::{ChildProcess, TempDir};
use confboot_tpm::swtpm::Swtpm;
use confboot_vpn::{MAX_PEERS, NodeVpnFile, OwnRecordKey, VpnPrivateKey};
use confboot_vtpm::VtpmIssuer;
use confboot_wire::ServerLimits;
use confboot_wire::{Router, Status};

const KERNEL: &[u8] = b"kernel";
const DISK: &str = "0f3c6c1e-2b5d-4e8a-9c7f-1a2b3c4d5e6f";
const CIDR: &str = "10.118.0.0/24";
const CALL: Duration = Duration::from_secs(20);

/// A swtpm measured with `KERNEL` (PCR 4) and, if given, marked with a
/// cluster id (PCR 15); its AK public key.
fn measured_tpm(mark: Option<&[u8]>) -> (Swtpm, Vec<u8>) {
    let swtpm = Swtpm::start().expect("swtpm starts");
    let issuer = VtpmIssuer::new(swtpm.connect().unwrap()).unwrap();
    let digest: [u8; 32] = ring::digest::digest(&ring::digest::SHA256, KERNEL)
        .as_ref()
        .try_into()
        .unwrap();
    issuer.with_tpm(|t| t.pcr_extend(4, &digest)).unwrap();
    if let Some(id) = mark {
        issuer
            .with_tpm(|t| confboot_cluster::mark::mark_node(t, id))
            .unwrap();
    }
    let ak = issuer.ak_public_key();
    // The connection closes here: swtpm serves one client at a time.
    (swtpm, ak)
}

/// A node running its agent.
struct Agent {
    dir: TempDir,
    swtpm: Swtpm,
    process: Option<ChildProcess>,
    private_key_b64: String,
}

impl Agent {
    /// Writes the node's VPN file (as the bootstrapper does) and starts
    /// the agent on `swtpm`, polling `control_planes` every second and
    /// trusting the control plane's AK `cp_ak` and role key `role`.
    fn start(
        swtpm: Swtpm,
        cluster_id: &[u8],
        role: ControlPlanePublicKey,
        disk_key: &[u8],
        control_planes: &[SocketAddr],
        cp_ak: &[u8],
    ) -> Agent {
        let dir = TempDir::new("nodeagent-vpn");
        let private_key = VpnPrivateKey::generate().unwrap();
        let private_key_b64 = private_key.to_base64().to_string();
        NodeVpnFile {
            name: "worker-1".into(),
            private_key,
            own_record_key: OwnRecordKey::from_disk_key(disk_key),
            disk_uuid: DISK.into(),
            public_endpoint: "192.0.2.1:51820".parse().unwrap(),
            listen_port: 51820,
            control_planes: control_planes.iter().map(|a| a.to_string()).collect(),
            cluster_id: cluster_id.to_vec(),
            control_plane_key: role,
        }
        .write(&dir.path().join("vpn.json"))
        .unwrap();
        std::fs::write(dir.path().join("cp-ak"), confboot_util::hex::encode(cp_ak)).unwrap();
        let mut agent = Agent {
            dir,
            swtpm,
            process: None,
            private_key_b64,
        };
        agent.spawn();
        agent
    }

    fn spawn(&mut self) {
        let p = |n: &str| self.dir.path().join(n);
        // CONFBOOT_NODEAGENT names another build (the static release
        // binary, for its memory figure in BENCHMARKS.md).
        let binary = std::env::var_os("CONFBOOT_NODEAGENT")
            .map(PathBuf::from)
            .unwrap_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_nodeagent")));
        let mut cmd = Command::new(binary);
        cmd.args(["--tpm", &self.swtpm.addr().to_string()])
            .args(["--event-log", "none", "--verify-listen", "127.0.0.1:0"])
            .args([
                "--vpn-cidr",
                CIDR,
                "--vpn-poll-interval",
                "1",
                "--vpn-interface",
                "none",
            ])
            .arg("--vpn-file")
            .arg(p("vpn.json"))
            .arg("--vpn-peers-file")
            .arg(p("peers.json"))
            .arg("--joinsvc-ak-trust")
            .arg(format!("pinned:{}", p("cp-ak").display()))
            .args(["-v", "4"]);
        let process = ChildProcess::spawn("nodeagent", cmd);
        process.wait_for_line("VPN: node worker-1", 3000);
        self.process = Some(process);
    }

    fn restart(&mut self) {
        if let Some(p) = self.process.take() {
            p.kill();
        }
        self.spawn();
    }

    fn peers_path(&self) -> PathBuf {
        self.dir.path().join("peers.json")
    }

    fn log(&self) -> Vec<String> {
        self.process.as_ref().unwrap().log()
    }
}

/// The names and addresses in the agent's applied list (empty when none).
fn applied(path: &Path) -> Vec<(String, String)> {
    let Ok(text) = std::fs::read_to_string(path) else {
        return Vec::new();
    };
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    v.as_array()
        .unwrap()
        .iter()
        .map(|p| {
            (
                p["name"].as_str().unwrap().to_string(),
                p["vpnIP"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

/// Waits until the applied list's names are `want`; how long it took.
fn wait_for_names(path: &Path, want: &[&str], limit: Duration) -> Duration {
    let started = Instant::now();
    loop {
        let names: Vec<String> = applied(path).into_iter().map(|(n, _)| n).collect();
        if names == want {
            return started.elapsed();
        }
        assert!(
            started.elapsed() < limit,
            "after {limit:?} the agent has {names:?}, not {want:?}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn remove_peer(joinsvc: &Joinsvc, name: &str) {
    let dir = TempDir::new("remove-vpn-peer");
    let status = joinsvc
        .remove_vpn_peer_command(&workspace_binary("joinsvc"), name, CIDR, dir.path())
        .status()
        .unwrap();
    assert!(status.success());
}

#[test]
fn the_agent_follows_the_control_plane_through_joins_removals_and_restarts() {
    let setup = JoinsvcSetup::new();
    let cluster_id = setup.cluster_id();
    let role = ControlPlaneKey::derive(&setup.master_secret).public_key();
    let (cp_tpm, cp_ak) = measured_tpm(Some(&cluster_id));
    let joining = Node::start("joining", KERNEL);
    let disk_key = setup.master_secret.state_disk_key(DISK);
    let (agent_tpm, agent_ak) = measured_tpm(Some(&cluster_id));
    // The policy as `confboot measure` writes it, with PCR 15 all-zero
    // (unbootstrapped nodes): a marked member's GetUpdate passes all the
    // same (its mark is checked per call).
    let mut policy = joining.policy();
    policy.set(15, vec![0; 32], false);
    let mut joinsvc = Joinsvc::launch(
        &workspace_binary("joinsvc"),
        &policy,
        JoinsvcSetup {
            pinned_aks: vec![agent_ak, joining.issuer.ak_public_key()],
            extra: vec![
                "--vpn-cidr".into(),
                CIDR.into(),
                "--tpm".into(),
                cp_tpm.addr().to_string(),
            ],
            ..setup
        },
    );
    let mut agent = Agent::start(
        agent_tpm,
        &cluster_id,
        role,
        disk_key.expose(),
        &[joinsvc.rpc_addr],
        &cp_ak,
    );
    // Its own record registers it.
    wait_for_names(&agent.peers_path(), &["worker-1"], Duration::from_secs(30));
    assert_eq!(applied(&agent.peers_path())[0].1, "10.118.0.1");

    // A node that joins later: in the list within two poll intervals
    // (1 s each) plus joinsvc's registry cache (1 s).
    let join = IssueJoinTicketRequest {
        disk_uuid: "9f3c6c1e-2b5d-4e8a-9c7f-1a2b3c4d5e6f".into(),
        node_name: "worker-2".into(),
        node_vpn_pub_key: vec![2; 32],
        node_public_endpoint: "192.0.2.2:51820".into(),
        ..Default::default()
    };
    let mut client = joining.connect(joinsvc.rpc_addr).unwrap();
    let ticket = client.join(&join, CALL).unwrap();
    assert_eq!(ticket.node_vpn_ip, "10.118.0.2");
    let took = wait_for_names(
        &agent.peers_path(),
        &["worker-1", "worker-2"],
        Duration::from_secs(3),
    );
    eprintln!("join to the agent's list: {} ms", took.as_millis());

    // Removed through the control plane: gone from the list.
    remove_peer(&joinsvc, "worker-2");
    wait_for_names(&agent.peers_path(), &["worker-1"], Duration::from_secs(4));

    // joinsvc restarts (its registry is in the Kubernetes API) and a node
    // joins meanwhile: the agent converges.
    joinsvc.restart();
    let mut client = joining.connect(joinsvc.rpc_addr).unwrap();
    let join3 = IssueJoinTicketRequest {
        node_name: "worker-3".into(),
        node_vpn_pub_key: vec![3; 32],
        // A new node has a disk of its own: a removed disk never joins again.
        disk_uuid: "7f3c6c1e-2b5d-4e8a-9c7f-1a2b3c4d5e6f".into(),
        ..join
    };
    client.join(&join3, CALL).unwrap();
    wait_for_names(
        &agent.peers_path(),
        &["worker-1", "worker-3"],
        Duration::from_secs(30),
    );

    // The agent restarts (a reboot): it asks from version 0 and writes the
    // same list again.
    std::fs::remove_file(agent.peers_path()).unwrap();
    agent.restart();
    wait_for_names(
        &agent.peers_path(),
        &["worker-1", "worker-3"],
        Duration::from_secs(30),
    );
    let log = agent.log().join("\n");
    assert!(log.contains("applied (2 peers)"), "{log}");
    let pid = agent.process.as_ref().unwrap().id();
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let peak = status
        .lines()
        .find(|l| l.starts_with("VmHWM"))
        .unwrap_or("");
    eprintln!("nodeagent {peak}");
    assert!(
        !log.contains(&agent.private_key_b64),
        "the private key is logged"
    );
}

/// How a scripted control plane signs its answers.
#[derive(Clone)]
enum Signing {
    /// With this role key, for each session (a control plane).
    Role(Arc<ControlPlaneKey>),
    /// Not at all (a member that holds no role key).
    Unsigned,
    /// With this role key for its first session; every later session
    /// gets that first signed answer again (a replay).
    ReplayFirst(Arc<ControlPlaneKey>, Arc<Mutex<Option<GetUpdateResponse>>>),
}

/// Takes any client (the test's control planes check nobody; they
/// require attestation to see the session's binding).
struct AnyClient;

impl Validator for AnyClient {
    fn variant(&self) -> Variant {
        Variant::QemuVtpm
    }
    fn validate(
        &self,
        _evidence: &[u8],
        _extra: &[u8; EXTRA_DATA_LEN],
    ) -> Result<Attested, AttestationError> {
        Ok(Attested {
            set_verdict: None,
            warnings: Vec::new(),
            variant: Variant::QemuVtpm,
            measurements: Default::default(),
        })
    }
}

/// A control plane that answers `GetUpdate` from a script, attesting with
/// `issuer` (none: it does not attest) and signing as `signing` says.
fn scripted_control_plane(
    issuer: Option<Arc<dyn Issuer>>,
    answers: Arc<Mutex<VecDeque<GetUpdateResponse>>>,
    signing: Signing,
) -> confboot_net::listener::ServerHandle {
    let router =
        Router::<AttestedPeer>::new().unary(GET_UPDATE, move |ctx, req: GetUpdateRequest| {
            let mut answers = answers.lock().unwrap();
            // The last answer stays: every later poll gets it again.
            let answer = if answers.len() > 1 {
                answers.pop_front()
            } else {
                answers.front().cloned()
            };
            let mut answer = answer.ok_or_else(|| Status::unavailable("no answer scripted"))?;
            let session = ctx.peer().session_binding();
            match &signing {
                Signing::Role(key) => key.sign_answer(GET_UPDATE, session, &req, &mut answer),
                Signing::Unsigned => {}
                Signing::ReplayFirst(key, first) => {
                    let mut first = first.lock().unwrap();
                    if let Some(recorded) = first.as_ref() {
                        return Ok(recorded.clone());
                    }
                    key.sign_answer(GET_UPDATE, session, &req, &mut answer);
                    *first = Some(answer.clone());
                }
            }
            Ok(answer)
        });
    atls::serve(
        TcpListener::bind("127.0.0.1:0").unwrap(),
        PoolConfig::default(),
        ServerLimits::default(),
        router,
        atls::AtlsServer::requiring_clients(issuer, vec![Arc::new(AnyClient)]).unwrap(),
    )
    .unwrap()
}

/// A cluster's control-plane role key (of a master secret of `byte`s).
fn role_key(byte: u8) -> Arc<ControlPlaneKey> {
    Arc::new(ControlPlaneKey::derive(
        &MasterSecret::new(vec![byte; 32], vec![byte; 32]).unwrap(),
    ))
}

fn peer(i: u32, name_len: usize) -> Peer {
    let mut key = [7u8; 32];
    key[..4].copy_from_slice(&(i + 1).to_le_bytes());
    let mut name = format!("n{i}-");
    while name.len() < name_len {
        name.push('x');
    }
    Peer {
        name,
        public_endpoint: format!("192.0.2.{}:51820", i % 250 + 1),
        vpn_ip: format!("10.118.{}.{}", i / 250, i % 250 + 1),
        vpn_pub_key: key.to_vec(),
    }
}

fn answer(version: u64, peers: Vec<Peer>) -> GetUpdateResponse {
    GetUpdateResponse {
        resource_version: version,
        peers,
        signature: Vec::new(),
    }
}

/// Waits for a log line of the agent containing `needle`.
fn wait_for_log(agent: &Agent, needle: &str) {
    agent.process.as_ref().unwrap().wait_for_line(needle, 3000);
}

#[test]
fn updates_from_hostile_control_planes_are_refused_and_the_last_good_list_kept() {
    let cluster_id = vec![0x11; 32];
    let (agent_tpm, _) = measured_tpm(Some(&cluster_id));
    // A genuine control plane of the cluster (its image, its mark) that
    // sends what the script says.
    let genuine = Node::start("cp", KERNEL);
    genuine
        .issuer
        .with_tpm(|t| confboot_cluster::mark::mark_node(t, &cluster_id))
        .unwrap();
    let script = Arc::new(Mutex::new(VecDeque::from([answer(
        1,
        vec![peer(0, 8), peer(1, 8)],
    )])));
    let genuine_ak = genuine.issuer.ak_public_key();
    let issuer: Arc<dyn Issuer> = genuine.issuer.clone();
    let role = role_key(0x33);
    let server = scripted_control_plane(
        Some(issuer),
        Arc::clone(&script),
        Signing::Role(Arc::clone(&role)),
    );
    let agent = Agent::start(
        agent_tpm,
        &cluster_id,
        role.public_key(),
        &[5; 32],
        &[server.local_addr()],
        &genuine_ak,
    );
    wait_for_names(
        &agent.peers_path(),
        &["n0-xxxxx", "n1-xxxxx"],
        Duration::from_secs(30),
    );
    let good = std::fs::read(agent.peers_path()).unwrap();

    // More peers than allowed (in a frame under the bound).
    let too_many: Vec<Peer> = (0..MAX_PEERS as u32 + 1).map(|i| peer(i, 8)).collect();
    let mut bad_key = vec![peer(0, 8), peer(1, 8)];
    bad_key[1].vpn_pub_key = vec![1; 31];
    let mut outside = vec![peer(0, 8), peer(1, 8)];
    outside[1].vpn_ip = "10.119.0.2".into();
    let oversized: Vec<Peer> = (0..2000).map(|i| peer(i, 253)).collect();
    for (answer, logged) in [
        (answer(2, too_many), "peers (at most 1024)"),
        (answer(3, bad_key), "VPN public key of 31 bytes"),
        (answer(4, outside), "VPN IP \"10.119.0.2\""),
        (answer(5, oversized), "no peer update"),
    ] {
        *script.lock().unwrap() = VecDeque::from([answer]);
        wait_for_log(&agent, logged);
        assert_eq!(std::fs::read(agent.peers_path()).unwrap(), good, "{logged}");
    }
    server.stop();

    // A control plane that does not attest, and one marked for another
    // cluster: not asked at all.
    let script = Arc::new(Mutex::new(VecDeque::from([answer(9, vec![peer(3, 8)])])));
    let unattested =
        scripted_control_plane(None, Arc::clone(&script), Signing::Role(Arc::clone(&role)));
    let stranger = Node::start("stranger", KERNEL);
    stranger
        .issuer
        .with_tpm(|t| confboot_cluster::mark::mark_node(t, &[0x22; 32]))
        .unwrap();
    let issuer: Arc<dyn Issuer> = stranger.issuer.clone();
    let foreign = scripted_control_plane(Some(issuer), script, Signing::Role(Arc::clone(&role)));
    let (agent_tpm, _) = measured_tpm(Some(&cluster_id));
    let agent2 = Agent::start(
        agent_tpm,
        &cluster_id,
        role.public_key(),
        &[5; 32],
        &[unattested.local_addr(), foreign.local_addr()],
        &stranger.issuer.ak_public_key(),
    );
    wait_for_log(&agent2, "not the mark of the ticket's cluster");
    let log = agent2.log().join("\n");
    assert!(log.contains("not trusted or not reached"), "{log}");
    std::thread::sleep(Duration::from_secs(2));
    assert!(applied(&agent2.peers_path()).is_empty());
}

/// G3: membership is not the control-plane role. A marked worker of the
/// cluster (the same image, the cluster's mark, genuine evidence) that
/// holds no role key answers unsigned or with a key of its own, and one
/// replays a control plane's signed answer from another session (to the
/// very same request: the agent restarted and asks from version 0 again):
/// the agent applies none of them.
#[test]
fn a_marked_worker_without_the_role_key_and_a_replayed_answer_are_refused() {
    let cluster_id = vec![0x11; 32];
    let role = role_key(0x33);
    let worker = Node::start("worker", KERNEL);
    worker
        .issuer
        .with_tpm(|t| confboot_cluster::mark::mark_node(t, &cluster_id))
        .unwrap();
    let worker_ak = worker.issuer.ak_public_key();
    let issuer: Arc<dyn Issuer> = worker.issuer.clone();
    let script = || Arc::new(Mutex::new(VecDeque::from([answer(7, vec![peer(0, 8)])])));
    for (signing, logged) in [
        (
            Signing::Unsigned,
            "the answer to /vpn.API/GetUpdate is not signed by a control plane",
        ),
        (
            Signing::Role(role_key(0x44)),
            "the answer to /vpn.API/GetUpdate is not signed by a control plane for this session",
        ),
    ] {
        let server = scripted_control_plane(Some(Arc::clone(&issuer)), script(), signing);
        let (agent_tpm, _) = measured_tpm(Some(&cluster_id));
        let agent = Agent::start(
            agent_tpm,
            &cluster_id,
            role.public_key(),
            &[5; 32],
            &[server.local_addr()],
            &worker_ak,
        );
        wait_for_log(&agent, logged);
        std::thread::sleep(Duration::from_secs(2));
        assert!(applied(&agent.peers_path()).is_empty(), "{logged}");
        server.stop();
    }

    // A replay: the first session's answer is genuine and applied; after
    // the agent restarts (the same request as its first), that signed
    // answer comes again on a new session and is refused.
    let first = Arc::new(Mutex::new(None));
    let server = scripted_control_plane(
        Some(issuer),
        script(),
        Signing::ReplayFirst(Arc::clone(&role), Arc::clone(&first)),
    );
    let (agent_tpm, _) = measured_tpm(Some(&cluster_id));
    let mut agent = Agent::start(
        agent_tpm,
        &cluster_id,
        role.public_key(),
        &[5; 32],
        &[server.local_addr()],
        &worker_ak,
    );
    wait_for_names(&agent.peers_path(), &["n0-xxxxx"], Duration::from_secs(30));
    std::fs::remove_file(agent.peers_path()).unwrap();
    agent.restart();
    wait_for_log(
        &agent,
        "the answer to /vpn.API/GetUpdate is not signed by a control plane for this session",
    );
    std::thread::sleep(Duration::from_secs(2));
    assert!(applied(&agent.peers_path()).is_empty());
    assert!(first.lock().unwrap().is_some());
}
