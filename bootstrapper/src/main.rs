//! bootstrapper: runs on every node, from the initramfs at VM boot. It
//! proves what the node runs and obtains the node's state-disk key and join
//! ticket from a join service, or takes the admin's Init on the first node.
//!
//! Threads: the main thread starts the InitServer (blank disk) or the
//! recovery server (initialized disk) and the JoinClient, then waits on a
//! channel. The nodelock decides which flow goes on; the other stops.

mod config;
mod init;
mod join;
mod node;
mod nodelock;
mod server;

use std::net::TcpListener;
use std::sync::Arc;
use std::time::{Duration, Instant};

use confboot_atls as atls;
use confboot_attest::{AttestationError, Issuer, Validator, Variant};
use confboot_azure::{AzureIssuer, TpmAccess};
use confboot_cluster::kubelet_cert::{KubeletCertError, KubeletCertRequest};
use confboot_cluster::{
    ClusterBackend, ClusterError, HandoffBackend, InitClusterOutput, InitClusterParams,
    JoinClusterParams, KubeadmBackend,
};
use confboot_disk::luks2::{FormatOptions, Luks2Backend};
use confboot_disk::{
    CryptsetupBackend, DiskBackend, FilesystemMaker, Mkfs, NativeExt4, StateDisk, new_disk_uuid,
};
use confboot_net::listener::PoolConfig;
use confboot_snp::SnpIssuer;
use confboot_tdx::{Rtmr3Marker, RtmrError, TdxIssuer};
use confboot_util::args::{exit_usage, start_daemon};
use confboot_util::stop::Stop;
use confboot_vpn::VpnError;
use confboot_vtpm::VtpmIssuer;
use confboot_wire::ServerLimits;
use crossbeam_channel::bounded;
use nodeagent::options::{JoinServiceOptionsError, VtpmIssuerError};

use crate::config::{
    CMD, ClusterStep, Config, DiskBackendChoice, DiskMode, JoinServices, MkfsChoice, StateFs,
    VpnConfig,
};
use crate::join::{EndpointSources, JoinClient, JoinClientConfirmer};
use crate::node::vpn::NodeVpnSetup;
use crate::node::{
    AdminApi, GenerationSetup, JoinServiceCheck, Markers, NixStateMount, Node, NodeConfig,
    NodeError, NodeMarker, SshUsersSetup, holder,
};
use crate::server::FlowResult;
use confboot_util::backoff::Backoff;

/// The node as the bootstrapper runs it: the state disk's backend
/// (`--disk-backend`), the cluster step (`--cluster-step`), the vTPM.
type RealNode = Node<Box<dyn DiskBackend>, NodeCluster, Arc<dyn NodeMarker>>;

/// Who runs the cluster step (`--cluster-step`).
enum NodeCluster {
    /// kubeadm, here.
    Kubeadm(Box<KubeadmBackend>),
    /// The node's OS, from the handoff directory.
    Handoff(HandoffBackend),
}

impl ClusterBackend for NodeCluster {
    fn init_cluster(
        &self,
        params: &InitClusterParams,
        log: &mut dyn FnMut(&str),
    ) -> Result<InitClusterOutput, ClusterError> {
        match self {
            NodeCluster::Kubeadm(b) => b.init_cluster(params, log),
            NodeCluster::Handoff(b) => b.init_cluster(params, log),
        }
    }

    fn join_cluster(
        &self,
        params: &JoinClusterParams,
        log: &mut dyn FnMut(&str),
    ) -> Result<(), ClusterError> {
        match self {
            NodeCluster::Kubeadm(b) => b.join_cluster(params, log),
            NodeCluster::Handoff(b) => b.join_cluster(params, log),
        }
    }
}

fn main() {
    if init::is_pid1() {
        init::main();
    }
    if started_as_node_agent() {
        nodeagent::main();
        return;
    }
    let m = start_daemon(&CMD, "bootstrapper");
    let started = Instant::now();
    log::info!("bootstrapper {} starting", env!("CARGO_PKG_VERSION"));
    // Options that cannot be used are a usage error (exit 2); what fails
    // once they are read is the node's (exit 1).
    let config = Config::from_matches(&m).unwrap_or_else(|e| exit_usage(&CMD, &e));
    match run(&config, started) {
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

/// Whether this binary was started under the name `nodeagent` (the
/// initramfs's `/usr/bin/nodeagent` is a link to the bootstrapper).
fn started_as_node_agent() -> bool {
    std::env::args_os()
        .next()
        .map(std::path::PathBuf::from)
        .is_some_and(|argv0| argv0.file_name() == Some(std::ffi::OsStr::new("nodeagent")))
}

/// How join services are checked: by default they must run this node's
/// own image (its PCRs, PCR 15 and IMA's PCR 10 aside) with an AK that `--joinsvc-ak-trust`
/// trusts, and the node then checks their PCR 15 against each ticket's
/// cluster; `--joinsvc-measurements` names other measurements (a rolling
/// upgrade), and `--joinsvc-release-key` accepts too a join service that
/// presents a set signed by a pinned release key and matches it;
/// `--insecure-any-join-service` turns every check off.
fn joinsvc_check(
    join_services: &JoinServices,
    release_keys: &[std::path::PathBuf],
    issuer: &VtpmIssuer,
) -> Result<(JoinServiceCheck, Vec<Arc<dyn Validator>>), RunError> {
    match join_services {
        JoinServices::Unattested => {
            log::warn!(
                "--insecure-any-join-service: join services are not attested; any host that answers \
                 can hand this node a disk key it knows"
            );
            Ok((JoinServiceCheck::InsecureNone, Vec::new()))
        }
        JoinServices::Attested(settings) => {
            let validators = nodeagent::options::validators(settings, release_keys, issuer)?;
            Ok((JoinServiceCheck::ClusterMark, validators))
        }
    }
}

/// The kubelet key and CSR a joining node sends: for the node's name and
/// IP; none without a name.
fn kubelet_request(config: &Config) -> Result<Option<KubeletCertRequest>, RunError> {
    let Some(node_name) = &config.node_name else {
        log::warn!("no kubelet certificate will be asked for (no node name)");
        return Ok(None);
    };
    KubeletCertRequest::new(node_name, &[config.node_ip])
        .map(Some)
        .map_err(RunError::KubeletRequest)
}

fn build_node(
    config: &Config,
    marker: Arc<dyn NodeMarker>,
    join_service_check: JoinServiceCheck,
    join_endpoints: &[String],
    confirm_client: Arc<JoinClient>,
) -> Result<RealNode, RunError> {
    let disk = &config.disk;
    let path = &disk.path;
    let backend: Box<dyn DiskBackend> = match (&disk.backend, &disk.mode) {
        (DiskBackendChoice::Native(kdf), mode) => {
            let options = FormatOptions {
                kdf: *kdf,
                ..FormatOptions::default()
            };
            match mode {
                DiskMode::Luks { mapper_name } => {
                    Box::new(Luks2Backend::new(path, mapper_name).with_options(options))
                }
                DiskMode::HeaderOnly => {
                    Box::new(Luks2Backend::header_only(path).with_options(options))
                }
            }
        }
        (DiskBackendChoice::Cryptsetup { program, pbkdf }, mode) => {
            let backend = match mode {
                DiskMode::Luks { mapper_name } => CryptsetupBackend::new(path, mapper_name),
                DiskMode::HeaderOnly => CryptsetupBackend::header_only(path),
            };
            Box::new(backend.with_program(program).with_pbkdf(*pbkdf))
        }
    };
    let mkfs = match &config.state_fs {
        StateFs::Ext4(MkfsChoice::Native) => Some(Box::new(NativeExt4) as Box<dyn FilesystemMaker>),
        StateFs::Ext4(MkfsChoice::Program(program)) => {
            Some(Box::new(Mkfs::new(program)) as Box<dyn FilesystemMaker>)
        }
        StateFs::None => None,
    };
    let cluster = match &config.cluster.step {
        ClusterStep::Kubeadm => {
            let mut kubeadm = KubeadmBackend::with_process_runner();
            kubeadm.kubeadm = config.cluster.kubeadm.clone();
            kubeadm.config_dir = config.cluster.config_dir.clone();
            kubeadm.pki_dir = config.cluster.pki_dir.clone();
            kubeadm.admin_kubeconfig = config.cluster.admin_kubeconfig.clone();
            kubeadm.kubelet_cert_dir = config.cluster.kubelet_cert_dir.clone();
            NodeCluster::Kubeadm(Box::new(kubeadm))
        }
        ClusterStep::Handoff(dir) => NodeCluster::Handoff(HandoffBackend::new(dir)),
    };
    let node_config = NodeConfig {
        init_secret_hash: config.init_secret_hash.clone(),
        kubelet_request: kubelet_request(config)?,
        node_ip: config.node_ip.to_string(),
        is_control_plane: config.control_plane,
        join_service_check,
    };
    // The generation lives on the state file system: without one (no
    // mapped device, or no file system made) there is nowhere to keep it.
    let has_state_fs = config.disk.mode.is_mapped() && mkfs.is_some();
    let node = Node::new(StateDisk::new(backend), mkfs, cluster, marker, node_config);
    let node = match ssh_users_setup(config) {
        Some(setup) => node.with_ssh_users(setup),
        None => node,
    };
    let node = if has_state_fs {
        node.with_generation(GenerationSetup {
            mount: Box::new(NixStateMount::new(&config.state_mount)),
            confirmer: Box::new(JoinClientConfirmer {
                client: confirm_client,
                check: join_service_check,
            }),
        })
    } else {
        log::warn!(
            "no state file system: a state disk restored from an old copy is not detected at rejoin"
        );
        node
    };
    Ok(match &config.vpn {
        Some(vpn) => node.with_vpn(vpn_setup(vpn, config, join_endpoints)?),
        None => node,
    })
}

/// `--vpn` and its options: the node's VPN at boot, with this boot's
/// candidate key.
fn vpn_setup(
    vpn: &VpnConfig,
    config: &Config,
    join_endpoints: &[String],
) -> Result<NodeVpnSetup, RunError> {
    let ip: std::net::IpAddr = match &vpn.interface {
        Some(interface) => interface_ipv4(interface)?.into(),
        None => config.node_ip,
    };
    let public_endpoint = std::net::SocketAddr::new(ip, vpn.listen_port);
    confboot_vpn::parse_public_endpoint(&public_endpoint.to_string())
        .map_err(RunError::VpnEndpoint)?;
    let mut control_planes = vpn.control_planes.clone();
    if control_planes.is_empty() {
        control_planes = join_endpoints.to_vec();
    }
    if control_planes.is_empty() {
        return Err(RunError::VpnWithoutControlPlane);
    }
    control_planes.truncate(confboot_vpn::MAX_CONTROL_PLANES);
    let candidate = confboot_vpn::VpnPrivateKey::generate().map_err(RunError::VpnKey)?;
    log::info!("VPN: node {}, public endpoint {public_endpoint}", vpn.name);
    Ok(NodeVpnSetup {
        mount: Box::new(NixStateMount::new(&config.state_mount)),
        name: vpn.name.clone(),
        public_endpoint,
        listen_port: vpn.listen_port,
        control_planes,
        file: vpn.file.clone(),
        candidate,
    })
}

/// The first IPv4 address of the interface `name`.
fn interface_ipv4(name: &str) -> Result<std::net::Ipv4Addr, RunError> {
    let addrs = nix::ifaddrs::getifaddrs().map_err(RunError::VpnInterface)?;
    addrs
        .filter(|a| a.interface_name == name)
        .find_map(|a| a.address.and_then(|s| s.as_sockaddr_in().map(|v4| v4.ip())))
        .ok_or_else(|| RunError::VpnInterfaceWithoutIpv4(name.to_string()))
}

/// `--state-mount`, `--ssh-users-root`: where SSH users are kept and
/// created. `None` in `--disk-mode header-only`: no device is mapped, so
/// there is no file system to keep them on (an Init with users is refused).
fn ssh_users_setup(config: &Config) -> Option<SshUsersSetup> {
    if !config.disk.mode.is_mapped() {
        return None;
    }
    Some(SshUsersSetup {
        mount: Box::new(NixStateMount::new(&config.state_mount)),
        target_root: config.ssh_users_root.clone(),
    })
}

/// The vTPM issuer's TPM connection, lent to the Azure issuer.
struct SharedTpm(Arc<VtpmIssuer>);

impl TpmAccess for SharedTpm {
    fn with_tpm(
        &self,
        f: &mut dyn FnMut(&mut confboot_tpm::Tpm) -> Result<(), confboot_tpm::TpmError>,
    ) -> Result<(), confboot_tpm::TpmError> {
        self.0.with_tpm(f)
    }
}

/// What marks this node bootstrapped: PCR 15 always (the TPM's evidence,
/// the node agent's, shows it); for a TD first `RTMR3`, which its TDX
/// evidence shows (the register must be there before any ticket is asked
/// for: a TD that could not mark itself would stay unmarked for join
/// services).
fn node_marker(
    variant: Variant,
    issuer: &Arc<VtpmIssuer>,
) -> Result<Arc<dyn NodeMarker>, RunError> {
    let tpm = Arc::clone(issuer) as Arc<dyn NodeMarker>;
    match variant {
        Variant::QemuVtpm | Variant::SevSnp | Variant::AzureSevSnp => Ok(tpm),
        Variant::Tdx => {
            let rtmr3 = Rtmr3Marker::open_default().map_err(RunError::Rtmr3)?;
            Ok(Arc::new(Markers(vec![Arc::new(rtmr3), tpm])))
        }
    }
}

/// Why the bootstrapper cannot go on (exit 1); the message names the
/// option or the step.
#[derive(Debug, thiserror::Error)]
enum RunError {
    /// The vTPM issuer (`--tpm`, its key, `--event-log`) did not open.
    #[error(transparent)]
    Vtpm(#[from] VtpmIssuerError),
    /// The SEV-SNP issuer cannot be opened.
    #[error("--attestation sev-snp: {0}")]
    SnpIssuer(AttestationError),
    /// The TDX issuer cannot be opened.
    #[error("--attestation tdx: {0}")]
    TdxIssuer(AttestationError),
    /// The TD's RTMR3 cannot be opened.
    #[error("--attestation tdx: {0}")]
    Rtmr3(RtmrError),
    /// The `--joinsvc-*` options give no validators.
    #[error(transparent)]
    JoinServices(#[from] JoinServiceOptionsError),
    /// The kubelet key and CSR cannot be made.
    #[error("{0}")]
    KubeletRequest(KubeletCertError),
    /// The interfaces' addresses cannot be read.
    #[error("--vpn-interface: {0}")]
    VpnInterface(nix::Error),
    /// The `--vpn-interface` has no IPv4 address.
    #[error("--vpn-interface {0}: no IPv4 address")]
    VpnInterfaceWithoutIpv4(String),
    /// The VPN public endpoint is not usable.
    #[error("the VPN public endpoint: {0}")]
    VpnEndpoint(VpnError),
    /// `--vpn` without a control plane to poll.
    #[error(
        "--vpn needs a control plane for the node agent (--vpn-control-plane or a join endpoint)"
    )]
    VpnWithoutControlPlane,
    /// This boot's candidate VPN key cannot be made.
    #[error("{0}")]
    VpnKey(VpnError),
    /// The node's plan or a flow failed.
    #[error("{0}")]
    Node(#[from] NodeError),
    /// The admin API's address cannot be bound.
    #[error("cannot listen on {addr}: {error}")]
    Listen {
        /// The address.
        addr: String,
        /// Why it cannot be bound.
        error: std::io::Error,
    },
    /// The admin API's server did not start.
    #[error("{api} server: {error}")]
    Server {
        /// `init` or `recovery`.
        api: &'static str,
        /// Why it did not start.
        error: std::io::Error,
    },
    /// The join client's thread cannot be started.
    #[error("cannot start the join client: {0}")]
    JoinClient(std::io::Error),
    /// Every flow ended and none gave an outcome.
    #[error("every flow ended without an outcome")]
    NoOutcome,
}

fn run(config: &Config, started: Instant) -> Result<node::Outcome, RunError> {
    let issuer = Arc::new(nodeagent::options::open_vtpm_issuer(
        &config.tpm,
        &config.event_log,
        |tpm| log::info!("TPM: {}", tpm.describe()),
    )?);
    // The TPM keeps the cluster mark whatever the node attests with; the
    // node attests (join client, Init/Recover servers) with one variant.
    let attesting: Arc<dyn Issuer> = match config.attestation {
        Variant::QemuVtpm => Arc::clone(&issuer) as Arc<dyn Issuer>,
        Variant::SevSnp => Arc::new(SnpIssuer::open_default().map_err(RunError::SnpIssuer)?),
        Variant::Tdx => Arc::new(TdxIssuer::open_default().map_err(RunError::TdxIssuer)?),
        // The paravisor's vTPM is the node's TPM: the Azure issuer quotes
        // through the vTPM issuer's connection (a swtpm socket takes one).
        Variant::AzureSevSnp => Arc::new(AzureIssuer::new(SharedTpm(Arc::clone(&issuer)))),
    };
    log::info!("this node attests with {}", attesting.variant());
    let marker = node_marker(config.attestation, &issuer)?;
    let (join_service_check, joinsvc_validators) =
        joinsvc_check(&config.join_services, &config.joinsvc_release_keys, &issuer)?;
    let configured = configured_join_endpoints(config);
    let join_client_for = |kubelet_csr: Vec<u8>, vpn| JoinClient {
        sources: EndpointSources {
            configured: configured.clone(),
            metadata_url: config.metadata_url.clone(),
        },
        issuer: Arc::clone(&attesting),
        joinsvc_validators: joinsvc_validators.clone(),
        attempt_timeout: Duration::from_secs(20),
        initial_backoff: Duration::from_millis(200),
        max_backoff: config.retry_max,
        kubelet_csr,
        vpn,
    };
    let confirm_client = Arc::new(join_client_for(Vec::new(), None));
    let node = Arc::new(build_node(
        config,
        marker,
        join_service_check,
        &configured,
        confirm_client,
    )?);
    let plan = node.plan(new_disk_uuid)?;
    log::info!(
        "plan: the {} API and a {} ticket ({:.0} ms after start)",
        plan.admin_api.name(),
        match plan.request {
            node::TicketRequest::Join { .. } => "join",
            node::TicketRequest::Rejoin { .. } => "rejoin",
        },
        started.elapsed().as_secs_f64() * 1000.0
    );

    let join_client = join_client_for(node.kubelet_csr(), node.vpn_join_fields());

    let (flows_tx, flows) = bounded::<FlowResult>(8);
    // The admin makes one call on one connection: one peer address may not
    // hold more than half the pool, an idle connection is closed soon, and
    // a frame must arrive whole within ServerLimits' frame timeout.
    let pool = PoolConfig {
        workers: 4,
        queue: 8,
        max_per_peer: 2,
        ..PoolConfig::default()
    };
    let limits = ServerLimits {
        default_call_timeout: Duration::from_secs(600),
        idle_timeout: Duration::from_secs(10),
        ..ServerLimits::default()
    };
    let (addr, router) = match plan.admin_api {
        AdminApi::Init => (
            &config.init_listen,
            server::init_router(Arc::clone(&node), flows_tx.clone()),
        ),
        AdminApi::Recover => (
            &config.recover_listen,
            server::recover_router(Arc::clone(&node), flows_tx.clone()),
        ),
    };
    if config.init_secret_hash.is_none() {
        log::warn!(
            "no --init-secret-hash: the {} API refuses every call",
            plan.admin_api.name()
        );
    }
    let listener = TcpListener::bind(addr).map_err(|error| RunError::Listen {
        addr: addr.clone(),
        error,
    })?;
    // The CLI does not attest: the admin API's handlers see no peer.
    let server = atls::AtlsServer::new(Some(attesting))
        .map_err(std::io::Error::other)
        .and_then(|atls_server| atls::serve(listener, pool, limits, router, atls_server))
        .map_err(|error| RunError::Server {
            api: plan.admin_api.name(),
            error,
        })?;
    log::info!(
        "{} API listening on {}",
        plan.admin_api.name(),
        server.local_addr()
    );

    let join_stop = Stop::new();
    let joiner = {
        let (node, stop, flows) = (Arc::clone(&node), join_stop.clone(), flows_tx.clone());
        let request = plan.request.clone();
        std::thread::Builder::new()
            .name("join-client".into())
            .spawn(move || {
                if let Some(result) = join_flow(&node, &join_client, &request, &stop, started) {
                    let _ = flows.send(result);
                }
            })
            .map_err(RunError::JoinClient)?
    };
    drop(flows_tx);

    let result = flows.recv().map_err(|_| RunError::NoOutcome)?;
    join_stop.raise();
    server.stop();
    let _ = joiner.join();
    Ok(result?)
}

/// The join endpoints of `--join-endpoint` and the kernel command line.
fn configured_join_endpoints(config: &Config) -> Vec<String> {
    let mut configured = config.join_endpoints.clone();
    if let Ok(cmdline) = confboot_util::fs::read_bounded_text(
        &config.cmdline,
        confboot_util::fs::MAX_CONFIG_FILE_BYTES,
    ) {
        configured.extend(join::endpoints_from_cmdline(&cmdline));
    }
    configured
}

/// The join client's flow: asks until a ticket passes the node's checks,
/// then takes the nodelock and applies it. `None` when stopped or when
/// another flow took the nodelock.
fn join_flow(
    node: &RealNode,
    join_client: &JoinClient,
    request: &node::TicketRequest,
    stop: &Stop,
    started: Instant,
) -> Option<FlowResult> {
    let mut thrown_away = Backoff::new(join_client.initial_backoff, join_client.max_backoff);
    loop {
        let issued = join_client.run(request, stop)?;
        let checked = match node.check_ticket(request, &issued) {
            Ok(checked) => checked,
            Err(e) => {
                log::warn!("join: ticket thrown away: {e}");
                stop.sleep(thrown_away.next_delay());
                continue;
            }
        };
        let token = match node.take_lock(holder::JOIN) {
            Ok(token) => token,
            Err(e) => {
                log::info!("join: ticket discarded: {e}");
                return None;
            }
        };
        log::info!(
            "join: nodelock taken ({:.1} s after start)",
            started.elapsed().as_secs_f64()
        );
        return Some(node.apply_ticket(&token, &checked));
    }
}
