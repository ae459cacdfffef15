//! Faults on the join service's side while a node joins: joinsvc (the
//! real binary) killed with SIGKILL mid-handshake and mid-call, then
//! started again as its supervisor would; the Kubernetes API (a real
//! control plane, `confboot_tests::kube::ControlPlane`, with joinsvc as the
//! ServiceAccount of `deploy/kubernetes/joinsvc.yaml`; the fault proxy in
//! front of it, `confboot_tests::kube_proxy`, failing as an API server
//! fails) answering 500, never answering, answering slowly; joinsvc's TPM
//! (swtpm) restarting under it.
//! The node is a real bootstrapper with its swtpm and a real LUKS2 header
//! on its disk image. Every scenario must end with the node joined, its
//! disk formatted exactly once with the key the master secret gives for
//! its UUID, and the bootstrap token it joined with one the API holds.
//! Tokens a fault leaves behind (created, never handed out) are counted:
//! they expire with their TTL and Kubernetes' token cleaner deletes them.
//!
//! The normal suite runs one scenario per kind ([`SHORT`]);
//! `CONFBOOT_FAULTS=all` runs every one (RELIABILITY.md has the matrix),
//! `CONFBOOT_FAULTS=ApiNoAnswer,TpmReset` the ones named.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::time::{Duration, Instant};

use confboot_tests::ChildProcess;
use confboot_tests::cluster::{Joinsvc, JoinsvcSetup, NodeDir, NodeTpm, RealApi, workspace_binary};
use confboot_tests::kube::ControlPlane;
use confboot_tests::kube_proxy::{Fault, FaultProxy};

const IMAGE: &[u8] = b"node image v1";

/// Guard against a scenario that never converges: it fails with the logs
/// instead of hanging (a converging scenario takes seconds).
const GUARD: Duration = Duration::from_secs(180);

/// joinsvc's timeout on each Kubernetes API request (joinsvc/src/config.rs).
const KUBE_API_TIMEOUT: Duration = Duration::from_secs(10);

/// The scenarios the normal suite runs: one per kind of fault.
const SHORT: [Scenario; 6] = [
    Scenario::KillAfterServerFlight,
    Scenario::KillAfterTokenCreated,
    Scenario::ApiInternalError,
    Scenario::ApiNoAnswer,
    Scenario::ApiSlowerThanTimeout,
    Scenario::TpmReset,
];

/// One fault while a node joins.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Scenario {
    /// joinsvc killed when its first handshake flight (its attested
    /// certificate) is on the way to the node.
    KillAfterServerFlight,
    /// joinsvc killed when the node's certificate (its evidence) has
    /// reached it: it is checking the node's attestation.
    KillAfterClientFlight,
    /// joinsvc killed while the request waits on the Kubernetes API (the
    /// token not created yet).
    KillWhileApiCall,
    /// joinsvc killed after the API stored the bootstrap token, before the
    /// ticket was answered.
    KillAfterTokenCreated,
    /// The API answers 500 three times.
    ApiInternalError,
    /// The API throttles (429) twice, then times out itself (504) once.
    ApiThrottledAndTimingOut,
    /// The API never answers once (joinsvc's client timeout ends the call).
    ApiNoAnswer,
    /// The API answers after 2 s (within joinsvc's timeout).
    ApiSlow,
    /// The API answers after joinsvc's timeout (it stored the token).
    ApiSlowerThanTimeout,
    /// joinsvc's swtpm stops (its volatile state stored) while the node
    /// tries, and starts again with the same state.
    TpmRestart,
    /// joinsvc's swtpm restarts with its volatile state lost (PCRs reset,
    /// its transient AK gone); the platform measures it again before the
    /// next handshake.
    TpmReset,
}

const ALL: [Scenario; 11] = [
    Scenario::KillAfterServerFlight,
    Scenario::KillAfterClientFlight,
    Scenario::KillWhileApiCall,
    Scenario::KillAfterTokenCreated,
    Scenario::ApiInternalError,
    Scenario::ApiThrottledAndTimingOut,
    Scenario::ApiNoAnswer,
    Scenario::ApiSlow,
    Scenario::ApiSlowerThanTimeout,
    Scenario::TpmRestart,
    Scenario::TpmReset,
];

impl Scenario {
    fn describe(self) -> &'static str {
        match self {
            Scenario::KillAfterServerFlight => {
                "joinsvc SIGKILLed mid-handshake (its attested flight sent), restarted"
            }
            Scenario::KillAfterClientFlight => {
                "joinsvc SIGKILLed mid-handshake (the node's evidence received), restarted"
            }
            Scenario::KillWhileApiCall => {
                "joinsvc SIGKILLed mid-call (waiting on the API, no token yet), restarted"
            }
            Scenario::KillAfterTokenCreated => {
                "joinsvc SIGKILLed mid-call (token stored in the API, no answer sent), restarted"
            }
            Scenario::ApiInternalError => "Kubernetes API answers 500 three times",
            Scenario::ApiThrottledAndTimingOut => "Kubernetes API answers 429 twice, then 504",
            Scenario::ApiNoAnswer => "Kubernetes API never answers (once)",
            Scenario::ApiSlow => "Kubernetes API answers after 2 s",
            Scenario::ApiSlowerThanTimeout => "Kubernetes API answers after 12 s (timeout 10 s)",
            Scenario::TpmRestart => {
                "joinsvc's swtpm down while the node tries, restarted with its state"
            }
            Scenario::TpmReset => {
                "joinsvc's swtpm restarted, state lost (PCRs re-measured, AK reloaded)"
            }
        }
    }
}

fn bootstrapper_bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_bootstrapper"))
}

/// Where a [`KillProxy`] kills joinsvc.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum HandshakePoint {
    /// When joinsvc's first bytes (ServerHello to Finished, its attested
    /// certificate inside) reach the proxy; they are not passed on.
    ServerFlight,
    /// When the node's second flight (after its ClientHello: its
    /// certificate with evidence) has been passed on to joinsvc.
    ClientFlight,
}

/// A TCP relay between a node and joinsvc that kills joinsvc (SIGKILL, by
/// process id) once, at a point of the first TLS handshake it carries;
/// later connections are relayed untouched (to the restarted joinsvc).
struct KillProxy {
    addr: SocketAddr,
    fired: Arc<AtomicBool>,
}

impl KillProxy {
    fn start(target: SocketAddr, point: HandshakePoint, joinsvc_pid: Arc<AtomicU32>) -> KillProxy {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let fired = Arc::new(AtomicBool::new(false));
        let armed = Arc::clone(&fired);
        std::thread::spawn(move || {
            for client in listener.incoming() {
                let Ok(client) = client else { return };
                let Ok(server) = TcpStream::connect(target) else {
                    continue;
                };
                let (armed, pid) = (Arc::clone(&armed), Arc::clone(&joinsvc_pid));
                std::thread::spawn(move || relay(client, server, point, &armed, &pid));
            }
        });
        KillProxy { addr, fired }
    }

    fn fired(&self) -> bool {
        self.fired.load(Ordering::SeqCst)
    }
}

fn kill_pid(pid: u32) {
    let _ = nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid as i32),
        nix::sys::signal::Signal::SIGKILL,
    );
}

/// Relays one connection; kills joinsvc at `point` if the proxy has not
/// fired yet.
fn relay(
    client: TcpStream,
    server: TcpStream,
    point: HandshakePoint,
    fired: &Arc<AtomicBool>,
    pid: &Arc<AtomicU32>,
) {
    let timeout = Some(Duration::from_secs(60));
    for s in [&client, &server] {
        let _ = s.set_read_timeout(timeout);
    }
    let fire = {
        let (fired, pid) = (Arc::clone(fired), Arc::clone(pid));
        move || {
            let first = fired
                .compare_exchange(false, true, Ordering::SeqCst, Ordering::SeqCst)
                .is_ok();
            if first {
                kill_pid(pid.load(Ordering::SeqCst));
            }
            first
        }
    };
    let (mut c_read, mut c_write) = (client.try_clone().unwrap(), client);
    let (mut s_read, mut s_write) = (server.try_clone().unwrap(), server);
    // Node → joinsvc: the first TLS record is the ClientHello; bytes after
    // it are the node's second flight (its certificate with evidence).
    let upstream = std::thread::spawn({
        let fire = fire.clone();
        move || {
            let mut buf = [0u8; 16 * 1024];
            let (mut seen, mut hello_end) = (0usize, None);
            loop {
                let n = match c_read.read(&mut buf) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => n,
                };
                if seen == 0 && n >= 5 {
                    hello_end = Some(5 + u16::from_be_bytes([buf[3], buf[4]]) as usize);
                }
                seen += n;
                if s_write.write_all(&buf[..n]).is_err() {
                    break;
                }
                if point == HandshakePoint::ClientFlight
                    && hello_end.is_some_and(|end| seen > end)
                    && fire()
                {
                    break;
                }
            }
            let _ = s_write.shutdown(std::net::Shutdown::Write);
        }
    });
    // joinsvc → node: its first bytes are its handshake flight.
    let mut buf = [0u8; 16 * 1024];
    loop {
        let n = match s_read.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        if point == HandshakePoint::ServerFlight && fire() {
            break;
        }
        if c_write.write_all(&buf[..n]).is_err() {
            break;
        }
    }
    let _ = c_write.shutdown(std::net::Shutdown::Both);
    let _ = upstream.join();
}

/// Waits (polling) until `cond` holds; panics with `what` and the node's
/// log after [`GUARD`].
fn wait_until(node: &ChildProcess, what: &str, mut cond: impl FnMut() -> bool) {
    let t = Instant::now();
    while !cond() {
        assert!(
            t.elapsed() < GUARD,
            "{what} never happened:\n{}",
            node.log().join("\n")
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Join attempts the node logged as failed.
fn failed_attempts(log: &[String]) -> usize {
    log.iter()
        .filter(|l| l.contains("not usable") || l.contains("not trusting the join service"))
        .count()
}

/// The platform's part of a TPM boot, for joinsvc's TPM after a reset:
/// the kernel measured into PCR 4, then PCR 15 marked for the cluster (as
/// the control plane's bootstrapper did).
fn measure_and_mark(tpm: &NodeTpm, cluster_id: &[u8]) {
    {
        let mut conn = tpm.swtpm.connect().expect("connect to swtpm");
        let digest: [u8; 32] = ring::digest::digest(&ring::digest::SHA256, IMAGE)
            .as_ref()
            .try_into()
            .unwrap();
        conn.pcr_extend(4, &digest).expect("extend PCR 4");
    }
    tpm.mark(cluster_id);
}

#[test]
fn a_node_joins_through_joinsvc_and_kubernetes_api_faults_with_one_format() {
    // The control plane's TPM (the same image, marked for the cluster)
    // attests joinsvc; the node trusts its AK.
    let cp = NodeDir::new(&bootstrapper_bin(), "jsfaults-cp");
    let mut cp_tpm = cp.boot_tpm(IMAGE);
    let n = NodeDir::new(&bootstrapper_bin(), "jsfaults-node")
        .trusting_join_service_ak(&cp_tpm.ak_public);
    // The kubeadm double also records the id (the public half) of the
    // bootstrap token the node joins with.
    std::fs::write(
        n.p("kubeadm"),
        format!(
            "#!/bin/sh\necho \"$@\" >> {log}\n\
             [ \"$1\" = join ] && sed -n 's/.*\"token\": \"\\([a-z0-9]\\{{6\\}}\\)\\..*/\\1/p' \"$3\" >> {ids}\n\
             echo \"kubeadm double: $1 done\"\n",
            log = n.p("kubeadm.log").display(),
            ids = n.p("token-ids").display()
        ),
    )
    .unwrap();
    let node_tpm = n.boot_tpm(IMAGE);
    // The real API server, joinsvc's account as its manifest ships it, and
    // the fault proxy joinsvc reaches the server through.
    let plane = ControlPlane::start();
    let token = plane.joinsvc_account("kube-system", &[]);
    let api = FaultProxy::start(plane.endpoint(), &plane.ca_pem());
    let setup = JoinsvcSetup {
        pinned_aks: vec![node_tpm.ak_public.clone()],
        extra: vec!["--tpm".into(), cp_tpm.tpm_arg()],
        real_api: Some(RealApi {
            url: api.url(),
            ca_pem: api.ca_pem().to_string(),
            token,
            pki_dir: plane.pki_dir(),
            endpoint: plane.endpoint().to_string(),
            namespace: "kube-system".into(),
        }),
        ..JoinsvcSetup::new()
    };
    let cluster_id = setup.cluster_id();
    cp_tpm.mark(&cluster_id);
    let mut joinsvc = Joinsvc::launch(&workspace_binary("joinsvc"), &node_tpm.policy(), setup);
    drop(node_tpm);
    let joinsvc_pid = Arc::new(AtomicU32::new(joinsvc.process.id()));

    // CONFBOOT_FAULTS=all, or scenario names (e.g. ApiNoAnswer,TpmReset).
    let wanted = std::env::var("CONFBOOT_FAULTS").unwrap_or_default();
    let chosen: Vec<Scenario> = match wanted.as_str() {
        "" => SHORT.to_vec(),
        "all" => ALL.to_vec(),
        names => ALL
            .into_iter()
            .filter(|s| names.split(',').any(|n| n == format!("{s:?}")))
            .collect(),
    };
    println!("| fault | then | failed attempts | formats | tokens left behind | converged in |");
    println!("|---|---|---|---|---|---|");
    for scenario in chosen {
        let disk = std::fs::File::create(n.p("disk.img")).unwrap();
        disk.set_len(32 << 20).unwrap();
        let _ = std::fs::remove_file(n.p("token-ids"));
        let tokens_before = plane.bootstrap_token_ids();
        let requests_before = api.secret_requests();
        let proxy = match scenario {
            Scenario::KillAfterServerFlight => Some(HandshakePoint::ServerFlight),
            Scenario::KillAfterClientFlight => Some(HandshakePoint::ClientFlight),
            _ => None,
        }
        .map(|point| KillProxy::start(joinsvc.rpc_addr, point, Arc::clone(&joinsvc_pid)));
        let endpoint = proxy
            .as_ref()
            .map_or(joinsvc.rpc_addr, |p| p.addr)
            .to_string();
        match scenario {
            Scenario::KillWhileApiCall => api.fail_next(&[Fault::NoAnswer]),
            Scenario::KillAfterTokenCreated => {
                api.fail_next(&[Fault::Slow(Duration::from_secs(600))])
            }
            Scenario::ApiInternalError => api.fail_next(&[Fault::InternalError; 3]),
            Scenario::ApiThrottledAndTimingOut => api.fail_next(&[
                Fault::TooManyRequests,
                Fault::TooManyRequests,
                Fault::ServerTimeout,
            ]),
            Scenario::ApiNoAnswer => api.fail_next(&[Fault::NoAnswer]),
            Scenario::ApiSlow => api.fail_next(&[Fault::Slow(Duration::from_secs(2))]),
            Scenario::ApiSlowerThanTimeout => {
                api.fail_next(&[Fault::Slow(KUBE_API_TIMEOUT + Duration::from_secs(2))])
            }
            Scenario::TpmRestart => cp_tpm.swtpm.stop(true).expect("stop joinsvc's swtpm"),
            Scenario::TpmReset => {
                cp_tpm.swtpm.stop(false).expect("stop joinsvc's swtpm");
                cp_tpm
                    .swtpm
                    .start_again()
                    .expect("start joinsvc's swtpm again");
                measure_and_mark(&cp_tpm, &cluster_id);
            }
            _ => {}
        }

        let joinsvc_log_mark = joinsvc.process.log().len();
        let t = Instant::now();
        let tpm = n.boot_tpm(IMAGE);
        let node = n.bootstrapper(&tpm, &["--join-endpoint", &endpoint]);
        // Kill joinsvc where the scenario says, wait until the node has
        // seen it fail, then start it again.
        let killed = match scenario {
            Scenario::KillAfterServerFlight | Scenario::KillAfterClientFlight => {
                let proxy = proxy.as_ref().unwrap();
                wait_until(&node, "the proxy's kill", || proxy.fired());
                true
            }
            Scenario::KillWhileApiCall => {
                wait_until(&node, "the API request", || {
                    api.secret_requests() > requests_before
                });
                joinsvc.process.kill();
                true
            }
            Scenario::KillAfterTokenCreated => {
                wait_until(&node, "the token's Secret", || {
                    plane.bootstrap_token_ids().len() > tokens_before.len()
                });
                joinsvc.process.kill();
                true
            }
            Scenario::TpmRestart => {
                wait_until(&node, "a failed attempt", || {
                    failed_attempts(&node.log()) >= 2
                });
                cp_tpm
                    .swtpm
                    .start_again()
                    .expect("start joinsvc's swtpm again");
                false
            }
            _ => false,
        };
        if killed {
            wait_until(&node, "a failed attempt", || {
                failed_attempts(&node.log()) >= 1
            });
            let dead = joinsvc.restart().split_off(joinsvc_log_mark);
            joinsvc_pid.store(joinsvc.process.id(), Ordering::SeqCst);
            // Where the kill landed, from the killed joinsvc's own log:
            // mid-handshake no call had arrived; mid-call it had, and no
            // ticket went out.
            let call_arrived = dead.iter().any(|l| l.contains("join ticket requested"));
            let issued = dead.iter().any(|l| l.contains("join ticket issued"));
            let mid_call = matches!(
                scenario,
                Scenario::KillWhileApiCall | Scenario::KillAfterTokenCreated
            );
            assert!(
                call_arrived == mid_call && !issued,
                "{scenario:?}: killed joinsvc's log:\n{}",
                dead.join("\n")
            );
        }
        wait_until(&node, "the node's end", || {
            node.log().iter().any(|l| l.contains("bootstrapped ("))
        });
        let (status, log) = node.wait();
        let converged = t.elapsed();
        drop(tpm);
        let all_log = || {
            format!(
                "{scenario:?}\n--- node ---\n{}\n--- joinsvc ---\n{}",
                log.join("\n"),
                joinsvc.process.log().join("\n")
            )
        };
        assert!(status.success(), "{}", all_log());
        assert!(
            log.iter().any(|l| l.contains("bootstrapped (Joined)")),
            "{}",
            all_log()
        );
        // One format, with the key the master secret gives for its UUID.
        assert_eq!(
            log.iter().filter(|l| l.contains("formatting")).count(),
            1,
            "{}",
            all_log()
        );
        let uuid = n.luks_uuid().expect("the disk is LUKS2");
        assert!(
            n.key_opens_disk(joinsvc.master_secret.state_disk_key(&uuid).expose()),
            "{scenario:?}: the disk's key is the master secret's for its UUID"
        );
        // The token the node joined with is one the API holds; the others
        // made during the scenario were never handed out.
        let used: Vec<String> = std::fs::read_to_string(n.p("token-ids"))
            .unwrap_or_default()
            .lines()
            .map(str::to_string)
            .collect();
        assert_eq!(used.len(), 1, "one kubeadm join\n{}", all_log());
        let created = plane.bootstrap_token_ids();
        let made: Vec<&str> = created
            .iter()
            .filter(|id| !tokens_before.contains(id))
            .map(String::as_str)
            .collect();
        assert!(
            made.contains(&used[0].as_str()),
            "{scenario:?}: the node's token {} is one the API stored ({made:?})",
            used[0]
        );
        let left_behind = made.len() - 1;
        let expected_left = match scenario {
            Scenario::KillAfterTokenCreated | Scenario::ApiSlowerThanTimeout => 1,
            _ => 0,
        };
        assert_eq!(left_behind, expected_left, "{}", all_log());
        let failed = failed_attempts(&log);
        match scenario {
            // joinsvc reconnects to its TPM within the handshake.
            Scenario::ApiSlow | Scenario::TpmReset => assert_eq!(failed, 0, "{}", all_log()),
            Scenario::ApiInternalError | Scenario::ApiThrottledAndTimingOut => {
                assert_eq!(failed, 3, "{}", all_log())
            }
            _ => assert!(failed >= 1, "{}", all_log()),
        }
        if matches!(
            scenario,
            Scenario::ApiNoAnswer | Scenario::ApiSlowerThanTimeout
        ) {
            // joinsvc bounds its call to the API and answers UNAVAILABLE
            // itself, before the node's own attempt timeout.
            assert!(
                log.iter()
                    .any(|l| l.contains("not usable") && l.contains("Kubernetes API unreachable")),
                "joinsvc ends a call the API does not answer\n{}",
                all_log()
            );
        }
        if matches!(scenario, Scenario::TpmRestart | Scenario::TpmReset) {
            assert!(
                joinsvc
                    .process
                    .log()
                    .iter()
                    .any(|l| l.contains("reconnected to the TPM")),
                "joinsvc reconnects to its TPM\n{}",
                all_log()
            );
        }
        println!(
            "| {} | Joined | {failed} | 1 | {left_behind} | {:.1} s |",
            scenario.describe(),
            converged.as_secs_f64()
        );
    }
}
