//! bootstrapper: runs on every node, from the initramfs at VM boot. It
//! proves what the node runs and obtains the node's state-disk key and join
//! ticket from a join service, or takes the admin's Init on the first node.
//!
//! Threads: the main thread starts the InitServer (blank disk) or the
//! recovery server (initialized disk) and the JoinClient, then waits on a
//! channel. The nodelock decides which flow goes on; the other stops.

mod join;
mod node;

use std::net::TcpListener;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use confboot::args::{Command, Matches, Opt, VERBOSITY, parse_or_exit};
use confboot::atls;
use confboot::attestation::vtpm::{AkTrust, VtpmIssuer, VtpmValidator};
use confboot::attestation::{Issuer, MeasurementPolicy, Validator};
use confboot::cluster::KubeadmBackend;
use confboot::disk::{CryptsetupBackend, DiskState, Mkfs, StateDisk, new_disk_uuid};
use confboot::kms::init_secret::InitSecretHash;
use confboot::nodelock::NodeLock;
use confboot::rpc::listener::PoolConfig;
use confboot::rpc::{Router, ServerLimits, Status, Stop};
use confboot::tpm::Tpm;
use confboot_proto::init::{
    InitFailureResponse, InitRequest, InitResponse, LogResponseType, init_response,
};
use confboot_proto::recover::{RecoverMessage, RecoverResponse};
use crossbeam_channel::{Sender, bounded};

use crate::join::{EndpointSources, JoinClient, Ticket, TicketRequest};
use crate::node::{Node, Outcome};

const CMD: Command = Command {
    name: "bootstrapper",
    about: "bootstrapper: runs on every confboot node, from the initramfs at VM boot.\n\
            On a blank state disk it races an InitServer (the admin's `confboot init`, on --init-listen)\n\
            against a JoinClient (asks the join services for a ticket, attesting the node's vTPM).\n\
            The winner takes the nodelock, formats the state disk (LUKS2) with the derived key, marks\n\
            the node (PCR 15 <- cluster id) and hands over to kubeadm. On an initialized disk it asks\n\
            for a rejoin ticket and serves Recover (--recover-listen) for when no join service answers.\n\
            Exits 0 once the node is bootstrapped, 1 with the reason when it cannot go on.\n\
            Join endpoints come from --join-endpoint, `confboot.join=` on the kernel command line,\n\
            and --metadata-url.",
    usage: "bootstrapper --state-disk PATH [OPTIONS]",
    opts: &[
        Opt::value("config", "FILE", "JSON file with option values"),
        Opt::value("tpm", "DEVICE|HOST:PORT", "The node's TPM: `device` (/dev/tpmrm0) or a swtpm socket").default("device"),
        Opt::value("state-disk", "PATH", "The state disk (block device, or an image file)"),
        Opt::value("disk-mode", "MODE", "luks: map the disk with dm-crypt; header-only: check keys against the LUKS2 header without mapping (machines without device-mapper)").default("luks"),
        Opt::value("mapper-name", "NAME", "dm-crypt mapping name").default("state"),
        Opt::value("cryptsetup", "PATH", "The cryptsetup program").default("cryptsetup"),
        Opt::value("state-fs", "FS", "File system made on a newly formatted (still blank) state disk: ext4 or none; with --disk-mode luks only").default("ext4"),
        Opt::value("mkfs", "PATH", "The mke2fs program (e2fsprogs)").default("mke2fs"),
        Opt::value("init-listen", "ADDR", "Address of the init API").default("0.0.0.0:9000"),
        Opt::value("recover-listen", "ADDR", "Address of the recovery API").default("0.0.0.0:9999"),
        Opt::value("init-secret-hash", "HASH", "pbkdf2-sha256$... hash of the init secret (no hash: Init is refused)")
            .env("BOOTSTRAPPER_INIT_SECRET_HASH"),
        Opt::value("join-endpoint", "HOST:PORT", "A join service (repeatable)"),
        Opt::value("cmdline", "FILE", "Kernel command line to read `confboot.join=` from").default("/proc/cmdline"),
        Opt::value("metadata-url", "URL", "Metadata endpoint answering {\"joinEndpoints\": [...]}"),
        Opt::value("joinsvc-policy", "FILE", "If set, join services must attest to this measurement policy"),
        Opt::value("joinsvc-ak-trust", "MODE", "AK trust for join services: ca:FILE, pinned:FILE|HEX, insecure-any-ak"),
        Opt::flag("control-plane", "Join as a control-plane node"),
        Opt::value("node-ip", "IP", "The node's IP in the cluster network").default("10.0.2.15"),
        Opt::value("kubeadm", "PATH", "The kubeadm program").default("kubeadm"),
        Opt::value("kubeadm-config-dir", "DIR", "Where kubeadm configuration is written").default("/etc/kubernetes"),
        Opt::value("pki-dir", "DIR", "Kubernetes PKI directory").default("/etc/kubernetes/pki"),
        Opt::value("admin-kubeconfig", "FILE", "The kubeconfig kubeadm init writes").default("/etc/kubernetes/admin.conf"),
        Opt::value("retry-max", "SECONDS", "Longest wait between join attempts").default("30"),
        VERBOSITY,
    ],
};

fn main() {
    let mut m = parse_or_exit(&CMD, std::env::args().skip(1));
    if let Some(path) = m.value("config").map(PathBuf::from)
        && let Err(e) = m.load_config_file(&path)
    {
        exit_usage(&e);
    }
    let verbosity = m.verbosity().unwrap_or_else(|e| exit_usage(&e));
    confboot::logging::init("bootstrapper", verbosity);
    let started = Instant::now();
    log::info!("bootstrapper {} starting", env!("CARGO_PKG_VERSION"));
    match run(&m, started) {
        Ok(outcome) => {
            log::info!(
                "bootstrapped ({outcome:?}) in {:.1} s",
                started.elapsed().as_secs_f64()
            );
        }
        Err(e) => {
            log::error!("cannot go on: {e}");
            std::process::exit(1);
        }
    }
}

fn exit_usage(e: &dyn std::fmt::Display) -> ! {
    eprintln!("bootstrapper: {e}\nTry 'bootstrapper --help'.");
    std::process::exit(2);
}

fn open_tpm(spec: &str) -> Result<Tpm, String> {
    Tpm::open(spec).map_err(|e| format!("--tpm {spec}: {e}"))
}

fn joinsvc_validators(m: &Matches) -> Result<Vec<Arc<dyn Validator>>, String> {
    let Some(policy) = m.value("joinsvc-policy") else {
        return Ok(Vec::new());
    };
    let policy = MeasurementPolicy::load(std::path::Path::new(policy))
        .map_err(|e| format!("--joinsvc-policy: {e}"))?;
    let trust = m.required("joinsvc-ak-trust").map_err(|e| e.to_string())?;
    let trust = AkTrust::parse(trust).map_err(|e| format!("--joinsvc-ak-trust: {e}"))?;
    // A running join service is a bootstrapped node: its PCR 15 is marked.
    Ok(vec![Arc::new(
        VtpmValidator::new(trust, policy).require_unmarked(false),
    )])
}

fn build_node(m: &Matches, issuer: Arc<VtpmIssuer>) -> Result<Node, String> {
    let req = |n: &str| m.required(n).map_err(|e| e.to_string());
    let disk_path = PathBuf::from(req("state-disk")?);
    let backend = match req("disk-mode")? {
        "luks" => CryptsetupBackend::new(&disk_path, req("mapper-name")?),
        "header-only" => CryptsetupBackend::header_only(&disk_path),
        other => return Err(format!("--disk-mode {other}: want luks or header-only")),
    }
    .with_program(req("cryptsetup")?);
    let mkfs = match req("state-fs")? {
        "ext4" => Some(Mkfs::new(req("mkfs")?)),
        "none" => None,
        other => return Err(format!("--state-fs {other}: want ext4 or none")),
    };
    let init_secret_hash = m
        .value("init-secret-hash")
        .map(InitSecretHash::parse)
        .transpose()
        .map_err(|e| format!("--init-secret-hash: {e}"))?;
    let mut cluster = KubeadmBackend::with_process_runner();
    cluster.kubeadm = PathBuf::from(req("kubeadm")?);
    cluster.config_dir = PathBuf::from(req("kubeadm-config-dir")?);
    cluster.pki_dir = PathBuf::from(req("pki-dir")?);
    cluster.admin_kubeconfig = PathBuf::from(req("admin-kubeconfig")?);
    Ok(Node {
        lock: NodeLock::new(),
        issuer,
        disk: Mutex::new(StateDisk::new(backend)),
        mkfs,
        cluster: Box::new(cluster),
        init_secret_hash,
        node_ip: req("node-ip")?.to_string(),
        is_control_plane: m.flag("control-plane"),
    })
}

fn init_router(node: Arc<Node>, outcomes: Sender<Outcome>) -> Router {
    Router::new().server_streaming("/init.API/Init", move |_ctx, req: InitRequest, sink| {
        log::info!("Init received (cluster {:?})", req.cluster_name);
        let mut send_log = |line: &str| {
            log::info!("init: {line}");
            let _ = sink.send(&InitResponse {
                kind: Some(init_response::Kind::Log(LogResponseType {
                    log: line.as_bytes().to_vec(),
                })),
            });
        };
        let was_locked = node.lock.is_locked();
        let result = node.init(&req, &mut send_log);
        match result {
            Ok(success) => {
                sink.send(&InitResponse {
                    kind: Some(init_response::Kind::InitSuccess(success)),
                })?;
                let _ = outcomes.send(Outcome::Initialized);
                Ok(())
            }
            Err(status) => {
                log::warn!("Init failed: {status}");
                let _ = sink.send(&InitResponse {
                    kind: Some(init_response::Kind::InitFailure(InitFailureResponse {
                        error: status.to_string(),
                    })),
                });
                // Past the nodelock there is no way back: the node gives up.
                if !was_locked && node.lock.holder() == Some("init") {
                    let _ = outcomes.send(Outcome::Failed(format!("init failed: {status}")));
                }
                Err(status)
            }
        }
    })
}

fn recover_router(node: Arc<Node>, outcomes: Sender<Outcome>) -> Router {
    Router::new().unary(
        "/recover.API/Recover",
        move |_ctx, req: RecoverMessage| -> Result<RecoverResponse, Status> {
            log::info!("Recover received");
            node.recover(&req)
                .inspect_err(|s| log::warn!("Recover refused: {s}"))?;
            let _ = outcomes.send(Outcome::Recovered);
            Ok(RecoverResponse {})
        },
    )
}

fn run(m: &Matches, started: Instant) -> Result<Outcome, String> {
    let tpm = open_tpm(m.value("tpm").expect("default"))?;
    log::info!("TPM: {}", tpm.describe());
    let issuer = Arc::new(VtpmIssuer::new(tpm).map_err(|e| format!("attestation key: {e}"))?);
    let node = Arc::new(build_node(m, Arc::clone(&issuer))?);
    let disk_state = node.disk_state().map_err(|e| format!("state disk: {e}"))?;
    log::info!(
        "state disk: {disk_state:?} ({:.0} ms)",
        started.elapsed().as_secs_f64() * 1000.0
    );

    let mut configured: Vec<String> = m
        .values("join-endpoint")
        .into_iter()
        .map(str::to_string)
        .collect();
    if let Ok(cmdline) = std::fs::read_to_string(m.value("cmdline").expect("default")) {
        configured.extend(join::endpoints_from_cmdline(&cmdline));
    }
    let join_client = JoinClient {
        sources: EndpointSources {
            configured,
            metadata_url: m.value("metadata-url").map(str::to_string),
        },
        issuer: Arc::clone(&issuer) as Arc<dyn Issuer>,
        joinsvc_validators: joinsvc_validators(m)?,
        attempt_timeout: Duration::from_secs(20),
        initial_backoff: Duration::from_millis(200),
        max_backoff: Duration::from_secs(
            m.parsed::<u64>("retry-max")
                .map_err(|e| e.to_string())?
                .unwrap_or(30),
        ),
    };

    let (outcomes_tx, outcomes) = bounded::<Outcome>(8);
    let pool = PoolConfig {
        workers: 4,
        queue: 8,
        ..PoolConfig::default()
    };
    let limits = ServerLimits {
        default_call_timeout: Duration::from_secs(600),
        ..ServerLimits::default()
    };
    let (request, server) = match &disk_state {
        DiskState::Blank => {
            let addr = m.value("init-listen").expect("default");
            let l = TcpListener::bind(addr).map_err(|e| format!("cannot listen on {addr}: {e}"))?;
            let s = atls::serve(
                l,
                pool,
                limits,
                init_router(Arc::clone(&node), outcomes_tx.clone()),
                Some(issuer.clone()),
                &[],
            )
            .map_err(|e| format!("init server: {e}"))?;
            log::info!("init API listening on {}", s.local_addr());
            let request = TicketRequest::Join {
                disk_uuid: new_disk_uuid(),
                is_control_plane: node.is_control_plane,
            };
            (request, s)
        }
        DiskState::Luks { uuid } => {
            let addr = m.value("recover-listen").expect("default");
            let l = TcpListener::bind(addr).map_err(|e| format!("cannot listen on {addr}: {e}"))?;
            let s = atls::serve(
                l,
                pool,
                limits,
                recover_router(Arc::clone(&node), outcomes_tx.clone()),
                Some(issuer.clone()),
                &[],
            )
            .map_err(|e| format!("recovery server: {e}"))?;
            log::info!("recovery API listening on {}", s.local_addr());
            (
                TicketRequest::Rejoin {
                    disk_uuid: uuid.clone(),
                },
                s,
            )
        }
        DiskState::Unrecognized { reason } => {
            return Err(format!(
                "the state disk is neither blank nor LUKS2 ({reason}); it is left untouched"
            ));
        }
    };

    let join_stop = Stop::new();
    let joiner = {
        let (node, stop, outcomes) = (Arc::clone(&node), join_stop.clone(), outcomes_tx.clone());
        std::thread::Builder::new()
            .name("join-client".into())
            .spawn(move || {
                let Some(ticket) = join_client.run(&request, &stop) else {
                    return;
                };
                let Some(_token) = node.lock.try_lock("join") else {
                    log::info!(
                        "join: ticket discarded, the node is bootstrapping through {:?}",
                        node.lock.holder()
                    );
                    return;
                };
                log::info!(
                    "join: nodelock taken ({:.1} s after start)",
                    started.elapsed().as_secs_f64()
                );
                let outcome = match (&request, ticket) {
                    (TicketRequest::Join { disk_uuid, .. }, Ticket::Join(t)) => node
                        .apply_join_ticket(disk_uuid, &t)
                        .map(|()| Outcome::Joined),
                    (TicketRequest::Rejoin { .. }, Ticket::Rejoin(t)) => {
                        node.apply_rejoin_ticket(&t).map(|()| Outcome::Rejoined)
                    }
                    _ => Err("the join service answered another kind of ticket".into()),
                };
                let _ = outcomes.send(outcome.unwrap_or_else(Outcome::Failed));
            })
            .map_err(|e| format!("cannot start the join client: {e}"))?
    };
    drop(outcomes_tx);

    let outcome = outcomes
        .recv()
        .map_err(|_| "every flow ended without an outcome".to_string())?;
    join_stop.raise();
    server.stop();
    let _ = joiner.join();
    match outcome {
        Outcome::Failed(reason) => Err(reason),
        ok => Ok(ok),
    }
}
