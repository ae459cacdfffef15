//! bootstrapper: runs on every node, from the initramfs at VM boot. It
//! proves what the node runs and obtains the node's state-disk key and join
//! ticket from a join service, or takes the admin's Init on the first node.
//!
//! Threads: the main thread starts the InitServer (blank disk) or the
//! recovery server (initialized disk) and the JoinClient, then waits on a
//! channel. The nodelock decides which flow goes on; the other stops.

mod init;
mod join;
mod node;
mod nodelock;
mod server;

use std::net::TcpListener;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use confboot_atls as atls;
use confboot_attest::join_service::{
    JOINSVC_AK_TRUST_OPT, JOINSVC_MEASUREMENTS_OPT, JOINSVC_SNP_POLICY_OPT, JOINSVC_VARIANTS_OPT,
    join_service_validators,
};
use confboot_attest::options::{ATTESTATION_HELP, DEFAULT_VARIANTS, attestation_variant};
use confboot_attest::snp::SnpIssuer;
use confboot_attest::tpm::Tpm;
use confboot_attest::vtpm::{EVENT_LOG_OPTION_HELP, VtpmIssuer};
use confboot_attest::{Issuer, Validator, Variant};
use confboot_cluster::KubeadmBackend;
use confboot_cluster::kubelet_cert::KubeletCertRequest;
use confboot_disk::luks2::{FormatOptions, Luks2Backend};
use confboot_disk::{
    CryptsetupBackend, DiskBackend, FilesystemMaker, Mkfs, NativeExt4, Pbkdf, StateDisk,
    new_disk_uuid,
};
use confboot_kms::init_secret::InitSecretHash;
use confboot_net::listener::PoolConfig;
use confboot_util::args::{Command, Matches, Opt, VERBOSITY, start_daemon};
use confboot_util::stop::Stop;
use confboot_wire::ServerLimits;
use crossbeam_channel::bounded;

use crate::join::{EndpointSources, JoinClient};
use crate::node::vpn::NodeVpnSetup;
use crate::node::{
    AdminApi, JoinServiceCheck, NixStateMount, Node, NodeConfig, SshUsersSetup, holder,
};
use crate::server::FlowResult;
use confboot_util::backoff::Backoff;

/// The node as the bootstrapper runs it: the state disk's backend
/// (`--disk-backend`), kubeadm, the vTPM.
type RealNode = Node<Box<dyn DiskBackend>, KubeadmBackend, Arc<VtpmIssuer>>;

const CMD: Command = Command {
    name: "bootstrapper",
    about: "bootstrapper: runs on every confboot node, from the initramfs at VM boot.\n\
            On a blank state disk it races an InitServer (the admin's `confboot init`, on --init-listen)\n\
            against a JoinClient (asks the join services for a ticket, attesting as --attestation says:\n\
            the node's vTPM, or an SEV-SNP report; join services must attest with --joinsvc-variants).\n\
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
        Opt::value("event-log", "FILE|none", EVENT_LOG_OPTION_HELP),
        Opt::value("attestation", "VARIANT", ATTESTATION_HELP).default(DEFAULT_VARIANTS),
        Opt::value("state-disk", "PATH", "The state disk (block device, or an image file)"),
        Opt::value("disk-mode", "MODE", "luks: map the disk with dm-crypt; header-only: check keys against the LUKS2 header without mapping (machines without device-mapper)").default("luks"),
        Opt::value("mapper-name", "NAME", "dm-crypt mapping name").default("state"),
        Opt::value("disk-backend", "BACKEND", "native: LUKS2 and device-mapper in this program (no cryptsetup); cryptsetup: the cryptsetup program (--cryptsetup)").default("native"),
        Opt::value("cryptsetup", "PATH", "The cryptsetup program (with --disk-backend cryptsetup)").default("cryptsetup"),
        Opt::value("state-disk-pbkdf", "SPEC", "Key-slot hashing of a newly formatted state disk: pbkdf2:ITERATIONS, argon2id:PASSES:MEMORY_KIB:THREADS, or cryptsetup-default (with --disk-backend cryptsetup: its own benchmark). The key is 32 random bytes, so stretching it only costs boot time").default("pbkdf2:1000"),
        Opt::value("state-fs", "FS", "File system made on a newly formatted (still blank) state disk: ext4 or none; with --disk-mode luks only").default("ext4"),
        Opt::value("mkfs", "native|PATH", "How the state file system is made: native (ext4 written by this program, no e2fsprogs: the initramfs has none), or the path of an mke2fs program (e2fsprogs), for a bootstrapper running as a service on a full OS").default("native"),
        Opt::value("state-mount", "DIR", "Where the state file system is mounted for a moment to keep (Init) or read (later boots) the SSH users; unmounted again before the bootstrapper exits").default("/state"),
        Opt::value("ssh-users-root", "DIR", "The root the SSH users of Init are created in (etc/passwd, etc/group, home/), at Init and again at every later boot").default("/"),
        Opt::value("init-listen", "ADDR", "Address of the init API").default(confboot_proto::DEFAULT_INIT_LISTEN),
        Opt::value("recover-listen", "ADDR", "Address of the recovery API").default(confboot_proto::DEFAULT_RECOVER_LISTEN),
        Opt::value("init-secret-hash", "HASH", "pbkdf2-sha256$... hash of the init secret (no hash: Init is refused)")
            .env("BOOTSTRAPPER_INIT_SECRET_HASH"),
        Opt::value("join-endpoint", "HOST:PORT", "A join service (repeatable)"),
        Opt::value("cmdline", "FILE", "Kernel command line to read `confboot.join=` from").default("/proc/cmdline"),
        Opt::value("metadata-url", "URL", "Metadata endpoint answering {\"joinEndpoints\": [...]}"),
        JOINSVC_MEASUREMENTS_OPT,
        JOINSVC_AK_TRUST_OPT,
        JOINSVC_VARIANTS_OPT,
        JOINSVC_SNP_POLICY_OPT,
        Opt::flag("insecure-any-join-service", "INSECURE: take tickets from any join service, attested or not (a host answering first then knows the disk key); warns on every use"),
        Opt::flag("control-plane", "Join as a control-plane node"),
        Opt::flag("vpn", "Join the cluster's VPN: a WireGuard key pair made at the first boot and kept on the state file system (vpn-private-key, 0600), its public key, --node-name and the public endpoint sent with a join request, and the node agent's VPN file (--vpn-file) written at every boot"),
        Opt::value("vpn-interface", "NAME", "The interface on the network the nodes share: the public endpoint is its first IPv4 address (as DHCP gave it at this boot) and --vpn-listen-port [default: --node-ip]"),
        Opt::value("vpn-listen-port", "PORT", "The UDP port of the node's WireGuard").default("51820"),
        Opt::value("vpn-file", "FILE", "Where the node agent's VPN file is written (0600; a tmpfs: it holds the private key)").default("/run/confboot/vpn.json"),
        Opt::value("vpn-control-plane", "HOST:PORT", "A control plane the node agent asks for peer updates (repeatable) [default: the join endpoints of --join-endpoint and the kernel command line]"),
        Opt::value("node-ip", "IP", "The node's IP in the cluster network").default("10.0.2.15"),
        Opt::value("node-name", "NAME", "The node's Kubernetes name; a joining node asks the join service to sign its kubelet's serving certificate for it and --node-ip (default: the host name, when it is a valid node name; else no certificate is asked for and the kubelet makes its own)"),
        Opt::value("kubelet-cert-dir", "DIR", "Where the signed kubelet certificate and key are installed (kubelet.crt, kubelet.key: the kubelet's --cert-dir)").default(confboot_cluster::kubeadm::DEFAULT_KUBELET_CERT_DIR),
        Opt::value("kubeadm", "PATH", "The kubeadm program").default("kubeadm"),
        Opt::value("kubeadm-config-dir", "DIR", "Where kubeadm configuration is written").default("/etc/kubernetes"),
        Opt::value("pki-dir", "DIR", "Kubernetes PKI directory").default("/etc/kubernetes/pki"),
        Opt::value("admin-kubeconfig", "FILE", "The kubeconfig kubeadm init writes").default("/etc/kubernetes/admin.conf"),
        Opt::value("retry-max", "SECONDS", "Longest wait between join attempts").default("30"),
        VERBOSITY,
    ],
};

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
/// upgrade); `--insecure-any-join-service` turns every check off.
fn joinsvc_check(
    m: &Matches,
    issuer: &VtpmIssuer,
) -> Result<(JoinServiceCheck, Vec<Arc<dyn Validator>>), String> {
    if m.flag("insecure-any-join-service") {
        log::warn!(
            "--insecure-any-join-service: join services are not attested; any host that answers \
             can hand this node a disk key it knows"
        );
        return Ok((JoinServiceCheck::InsecureNone, Vec::new()));
    }
    let validators = join_service_validators(m, issuer)?;
    Ok((JoinServiceCheck::ClusterMark, validators))
}

/// The node's name: `--node-name`, or the host name when it is a valid
/// node name (`None`: neither).
fn node_name(m: &Matches) -> Result<Option<String>, String> {
    use confboot_cluster::kubelet_cert::check_node_name;
    match m.value("node-name") {
        Some(name) => {
            check_node_name(name).map_err(|e| format!("--node-name: {e}"))?;
            Ok(Some(name.to_string()))
        }
        None => {
            let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
                .unwrap_or_default()
                .trim()
                .to_ascii_lowercase();
            match check_node_name(&host) {
                Ok(()) => Ok(Some(host)),
                Err(e) => {
                    log::warn!("the host name is not a node name: {e} (set --node-name)");
                    Ok(None)
                }
            }
        }
    }
}

/// The kubelet key and CSR a joining node sends: for the node's name
/// ([`node_name`]); none without one.
fn kubelet_request(m: &Matches, node_ip: &str) -> Result<Option<KubeletCertRequest>, String> {
    let Some(node_name) = node_name(m)? else {
        log::warn!("no kubelet certificate will be asked for (no node name)");
        return Ok(None);
    };
    let ip = node_ip
        .parse()
        .map_err(|_| format!("--node-ip {node_ip:?} is not an IP address"))?;
    KubeletCertRequest::new(&node_name, &[ip])
        .map(Some)
        .map_err(|e| e.to_string())
}

fn build_node(
    m: &Matches,
    issuer: Arc<VtpmIssuer>,
    join_service_check: JoinServiceCheck,
    join_endpoints: &[String],
) -> Result<RealNode, String> {
    let req = |n: &str| m.required(n).map_err(|e| e.to_string());
    let disk_path = PathBuf::from(req("state-disk")?);
    let mapped = match req("disk-mode")? {
        "luks" => true,
        "header-only" => false,
        other => return Err(format!("--disk-mode {other}: want luks or header-only")),
    };
    let pbkdf: Pbkdf = req("state-disk-pbkdf")?
        .parse()
        .map_err(|e| format!("--state-disk-pbkdf {e}"))?;
    let native_options = || {
        let kdf = pbkdf.kdf_choice().ok_or(
            "--state-disk-pbkdf cryptsetup-default needs --disk-backend cryptsetup".to_string(),
        )?;
        Ok::<_, String>(FormatOptions {
            kdf,
            ..FormatOptions::default()
        })
    };
    let backend: Box<dyn DiskBackend> = match (req("disk-backend")?, mapped) {
        ("native", true) => Box::new(
            Luks2Backend::new(&disk_path, req("mapper-name")?).with_options(native_options()?),
        ),
        ("native", false) => {
            Box::new(Luks2Backend::header_only(&disk_path).with_options(native_options()?))
        }
        ("cryptsetup", true) => Box::new(
            CryptsetupBackend::new(&disk_path, req("mapper-name")?)
                .with_program(req("cryptsetup")?)
                .with_pbkdf(pbkdf),
        ),
        ("cryptsetup", false) => Box::new(
            CryptsetupBackend::header_only(&disk_path)
                .with_program(req("cryptsetup")?)
                .with_pbkdf(pbkdf),
        ),
        (other, _) => {
            return Err(format!("--disk-backend {other}: want native or cryptsetup"));
        }
    };
    let mkfs = match req("state-fs")? {
        "ext4" => Some(match req("mkfs")? {
            "native" => Box::new(NativeExt4) as Box<dyn FilesystemMaker>,
            program => Box::new(Mkfs::new(program)),
        }),
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
    cluster.kubelet_cert_dir = PathBuf::from(req("kubelet-cert-dir")?);
    let node_ip = req("node-ip")?.to_string();
    let config = NodeConfig {
        init_secret_hash,
        kubelet_request: kubelet_request(m, &node_ip)?,
        node_ip,
        is_control_plane: m.flag("control-plane"),
        join_service_check,
    };
    let node = Node::new(StateDisk::new(backend), mkfs, cluster, issuer, config);
    let node = match ssh_users_setup(m)? {
        Some(setup) => node.with_ssh_users(setup),
        None => node,
    };
    Ok(match vpn_setup(m, mapped, join_endpoints)? {
        Some(setup) => node.with_vpn(setup),
        None => node,
    })
}

/// `--vpn` and its options: the node's VPN at boot, with this boot's
/// candidate key (`None` without `--vpn`).
fn vpn_setup(
    m: &Matches,
    mapped: bool,
    join_endpoints: &[String],
) -> Result<Option<NodeVpnSetup>, String> {
    if !m.flag("vpn") {
        return Ok(None);
    }
    let req = |n: &str| m.required(n).map_err(|e| e.to_string());
    if !mapped || req("state-fs")? == "none" {
        return Err("--vpn needs a state file system to keep the key on (--disk-mode luks, --state-fs ext4)".into());
    }
    let name =
        node_name(m)?.ok_or("--vpn needs the node's name (--node-name, or a valid host name)")?;
    let listen_port: u16 = req("vpn-listen-port")?
        .parse()
        .ok()
        .filter(|p| *p != 0)
        .ok_or("--vpn-listen-port: want 1 to 65535")?;
    let ip: std::net::IpAddr = match m.value("vpn-interface") {
        Some(interface) => interface_ipv4(interface)?.into(),
        None => req("node-ip")?
            .parse()
            .map_err(|e| format!("--node-ip: {e}"))?,
    };
    let public_endpoint = std::net::SocketAddr::new(ip, listen_port);
    confboot_vpn::parse_public_endpoint(&public_endpoint.to_string())
        .map_err(|e| format!("the VPN public endpoint: {e}"))?;
    let mut control_planes: Vec<String> = m
        .values("vpn-control-plane")
        .into_iter()
        .filter(|e| join::is_endpoint(e))
        .map(str::to_string)
        .collect();
    if control_planes.is_empty() {
        control_planes = join_endpoints.to_vec();
    }
    if control_planes.is_empty() {
        return Err("--vpn needs a control plane for the node agent (--vpn-control-plane or a join endpoint)".into());
    }
    control_planes.truncate(confboot_vpn::MAX_CONTROL_PLANES);
    let candidate = confboot_vpn::VpnPrivateKey::generate().map_err(|e| e.to_string())?;
    log::info!("VPN: node {name}, public endpoint {public_endpoint}");
    Ok(Some(NodeVpnSetup {
        mount: Box::new(NixStateMount::new(req("state-mount")?)),
        name,
        public_endpoint,
        listen_port,
        control_planes,
        file: PathBuf::from(req("vpn-file")?),
        candidate,
    }))
}

/// The first IPv4 address of the interface `name`.
fn interface_ipv4(name: &str) -> Result<std::net::Ipv4Addr, String> {
    let addrs = nix::ifaddrs::getifaddrs().map_err(|e| format!("--vpn-interface: {e}"))?;
    addrs
        .filter(|a| a.interface_name == name)
        .find_map(|a| a.address.and_then(|s| s.as_sockaddr_in().map(|v4| v4.ip())))
        .ok_or_else(|| format!("--vpn-interface {name}: no IPv4 address"))
}

/// `--state-mount`, `--ssh-users-root`: where SSH users are kept and
/// created. `None` in `--disk-mode header-only`: no device is mapped, so
/// there is no file system to keep them on (an Init with users is refused).
fn ssh_users_setup(m: &Matches) -> Result<Option<SshUsersSetup>, String> {
    let req = |n: &str| m.required(n).map_err(|e| e.to_string());
    if req("disk-mode")? == "header-only" {
        return Ok(None);
    }
    Ok(Some(SshUsersSetup {
        mount: Box::new(NixStateMount::new(req("state-mount")?)),
        target_root: PathBuf::from(req("ssh-users-root")?),
    }))
}

fn run(m: &Matches, started: Instant) -> Result<node::Outcome, String> {
    let tpm =
        Tpm::open_for_option("tpm", m.value("tpm").expect("default")).map_err(|e| e.to_string())?;
    log::info!("TPM: {}", tpm.describe());
    let tpm_is_device = Tpm::is_device_spec(m.value("tpm").expect("default"));
    let issuer = Arc::new(
        VtpmIssuer::new(tpm)
            .map_err(|e| format!("attestation key: {e}"))?
            .with_event_log_option(m.value("event-log"), tpm_is_device)
            .map_err(|e| e.to_string())?,
    );
    // The TPM keeps the cluster mark whatever the node attests with; the
    // node attests (join client, Init/Recover servers) with one variant.
    let attesting: Arc<dyn Issuer> =
        match attestation_variant(m, "attestation").map_err(|e| e.to_string())? {
            Variant::QemuVtpm => Arc::clone(&issuer) as Arc<dyn Issuer>,
            Variant::SevSnp => Arc::new(
                SnpIssuer::open_default().map_err(|e| format!("--attestation sev-snp: {e}"))?,
            ),
        };
    log::info!("this node attests with {}", attesting.variant());
    let (join_service_check, joinsvc_validators) = joinsvc_check(m, &issuer)?;
    let configured = configured_join_endpoints(m);
    let node = Arc::new(build_node(
        m,
        Arc::clone(&issuer),
        join_service_check,
        &configured,
    )?);
    let plan = node.plan(new_disk_uuid).map_err(|e| e.to_string())?;
    log::info!(
        "plan: the {} API and a {} ticket ({:.0} ms after start)",
        plan.admin_api.name(),
        match plan.request {
            node::TicketRequest::Join { .. } => "join",
            node::TicketRequest::Rejoin { .. } => "rejoin",
        },
        started.elapsed().as_secs_f64() * 1000.0
    );

    let join_client = JoinClient {
        sources: EndpointSources {
            configured,
            metadata_url: m.value("metadata-url").map(str::to_string),
        },
        issuer: Arc::clone(&attesting),
        joinsvc_validators,
        attempt_timeout: Duration::from_secs(20),
        initial_backoff: Duration::from_millis(200),
        max_backoff: Duration::from_secs(
            m.parsed::<u64>("retry-max")
                .map_err(|e| e.to_string())?
                .unwrap_or(30),
        ),
        kubelet_csr: node.kubelet_csr(),
        vpn: node.vpn_join_fields(),
    };

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
    let (option, router) = match plan.admin_api {
        AdminApi::Init => (
            "init-listen",
            server::init_router(Arc::clone(&node), flows_tx.clone()),
        ),
        AdminApi::Recover => (
            "recover-listen",
            server::recover_router(Arc::clone(&node), flows_tx.clone()),
        ),
    };
    let addr = m.value(option).expect("default");
    let listener = TcpListener::bind(addr).map_err(|e| format!("cannot listen on {addr}: {e}"))?;
    let server = atls::serve(listener, pool, limits, router, Some(attesting), &[])
        .map_err(|e| format!("{} server: {e}", plan.admin_api.name()))?;
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
            .map_err(|e| format!("cannot start the join client: {e}"))?
    };
    drop(flows_tx);

    let result = flows
        .recv()
        .map_err(|_| "every flow ended without an outcome".to_string())?;
    join_stop.raise();
    server.stop();
    let _ = joiner.join();
    result.map_err(|e| e.to_string())
}

/// The join endpoints of `--join-endpoint` and the kernel command line.
fn configured_join_endpoints(m: &Matches) -> Vec<String> {
    let mut configured: Vec<String> = m
        .values("join-endpoint")
        .into_iter()
        .map(str::to_string)
        .collect();
    let cmdline = std::path::Path::new(m.value("cmdline").expect("default"));
    if let Ok(cmdline) =
        confboot_util::fs::read_bounded_text(cmdline, confboot_util::fs::MAX_CONFIG_FILE_BYTES)
    {
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
        if let Err(e) = node.check_ticket(request, &issued) {
            log::warn!("join: ticket thrown away: {e}");
            stop.sleep(thrown_away.next_delay());
            continue;
        }
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
        return Some(node.apply_ticket(&token, request, &issued.ticket));
    }
}
