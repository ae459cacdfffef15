//! The bootstrapper's options and its configuration: every option is read
//! once, at start, into [`Config`] (modes as enums, values checked, errors
//! naming the option); the rest of the bootstrapper takes the [`Config`].

use std::net::IpAddr;
use std::path::PathBuf;
use std::time::Duration;

use confboot_attest::Variant;
use confboot_cluster::kubelet_cert::{KubeletCertError, check_node_name};
use confboot_disk::Pbkdf;
use confboot_disk::cryptsetup::PbkdfSpecError;
use confboot_disk::luks2::KdfChoice;
use confboot_kms::init_secret::{HashFormatError, InitSecretHash};
use confboot_tpm::Tpm;
use confboot_util::args::{ArgsError, CONFIG, Command, Matches, Opt, VERBOSITY};
use confboot_verifier::config::{
    AttestationSettings, DEFAULT_VARIANTS, VariantsError, parse_attestation_variant,
};
use confboot_vtpm::EventLogSource;
use nodeagent::options::{
    EVENT_LOG_HELP, JOINSVC_AK_TRUST, JOINSVC_AZURE_POLICY, JOINSVC_MEASUREMENTS,
    JOINSVC_RELEASE_KEY, JOINSVC_SNP_POLICY, JOINSVC_TDX_POLICY, JOINSVC_VARIANTS,
    JoinServiceOptions, JoinServiceOptionsError,
};

use crate::join;

/// The help of the option that says how a node attests.
const ATTESTATION_HELP: &str = "How this node attests itself: qemu-vtpm (a quote of its TPM), \
     sev-snp (an SEV-SNP report through the kernel's configfs-tsm, /sys/kernel/config/tsm/report) \
     tdx (an Intel TDX quote through configfs-tsm, with the firmware's CCEL event log) or \
     azure-sev-snp (an Azure confidential VM: the HCL report in its vTPM's NV index 0x01400001 and \
     a quote by the key it names); the TPM \
     still holds the cluster mark";

const TPM: Opt = Opt::value(
    "tpm",
    "DEVICE|HOST:PORT",
    "The node's TPM: `device` (/dev/tpmrm0) or a swtpm socket",
)
.default("device");
const EVENT_LOG: Opt = Opt::value("event-log", "FILE|none", EVENT_LOG_HELP);
const ATTESTATION: Opt =
    Opt::value("attestation", "VARIANT", ATTESTATION_HELP).default(DEFAULT_VARIANTS);
const STATE_DISK: Opt = Opt::value(
    "state-disk",
    "PATH",
    "The state disk (block device, or an image file)",
);
const DISK_MODE: Opt = Opt::value("disk-mode", "MODE", "luks: map the disk with dm-crypt; header-only: check keys against the LUKS2 header without mapping (machines without device-mapper)").default("luks");
const MAPPER_NAME: Opt =
    Opt::value("mapper-name", "NAME", "dm-crypt mapping name").default("state");
const DISK_BACKEND: Opt = Opt::value("disk-backend", "BACKEND", "native: LUKS2 and device-mapper in this program (no cryptsetup); cryptsetup: the cryptsetup program (--cryptsetup)").default("native");
const CRYPTSETUP: Opt = Opt::value(
    "cryptsetup",
    "PATH",
    "The cryptsetup program (with --disk-backend cryptsetup)",
)
.default("cryptsetup");
const STATE_DISK_PBKDF: Opt = Opt::value("state-disk-pbkdf", "SPEC", "Key-slot hashing of a newly formatted state disk: pbkdf2:ITERATIONS or argon2id:PASSES:MEMORY_KIB:THREADS; the node opens only a header with its own costs (cryptsetup's benchmark is never used: its choice could not be told from a host's edit). The key is 32 random bytes, so stretching it only costs boot time").default("pbkdf2:1000");
const STATE_FS: Opt = Opt::value("state-fs", "FS", "File system made on a newly formatted (still blank) state disk: ext4 or none; with --disk-mode luks only").default("ext4");
const MKFS: Opt = Opt::value("mkfs", "native|PATH", "How the state file system is made: native (ext4 written by this program, no e2fsprogs: the initramfs has none), or the path of an mke2fs program (e2fsprogs), for a bootstrapper running as a service on a full OS").default("native");
const STATE_MOUNT: Opt = Opt::value("state-mount", "DIR", "Where the state file system is mounted for a moment to keep (Init) or read (later boots) the SSH users; unmounted again before the bootstrapper exits").default("/state");
const SSH_USERS_ROOT: Opt = Opt::value("ssh-users-root", "DIR", "The root the SSH users of Init are created in (etc/passwd, etc/group, home/), at Init and again at every later boot").default("/");
const INIT_LISTEN: Opt = Opt::value("init-listen", "ADDR", "Address of the init API")
    .default(confboot_proto::DEFAULT_INIT_LISTEN);
const RECOVER_LISTEN: Opt = Opt::value("recover-listen", "ADDR", "Address of the recovery API")
    .default(confboot_proto::DEFAULT_RECOVER_LISTEN);
const INIT_SECRET_HASH: Opt = Opt::value(
    "init-secret-hash",
    "HASH",
    "pbkdf2-sha256$... hash of the admin's init secret (`confboot hash-init-secret`), the same on every node of a cluster: Init and Recover must carry the secret (no hash: both are refused)",
)
.env("BOOTSTRAPPER_INIT_SECRET_HASH");
const JOIN_ENDPOINT: Opt = Opt::value("join-endpoint", "HOST:PORT", "A join service (repeatable)");
const CMDLINE: Opt = Opt::value(
    "cmdline",
    "FILE",
    "Kernel command line to read `confboot.join=` from",
)
.default("/proc/cmdline");
const METADATA_URL: Opt = Opt::value(
    "metadata-url",
    "URL",
    "Metadata endpoint answering {\"joinEndpoints\": [...]}",
);
const INSECURE_ANY_JOIN_SERVICE: Opt = Opt::flag(
    "insecure-any-join-service",
    "INSECURE: take tickets from any join service, attested or not (a host answering first then knows the disk key); warns on every use",
);
const CONTROL_PLANE: Opt = Opt::flag("control-plane", "Join as a control-plane node");
const VPN: Opt = Opt::flag(
    "vpn",
    "Join the cluster's VPN: a WireGuard key pair made at the first boot and kept on the state file system (vpn-private-key, 0600), its public key, --node-name and the public endpoint sent with a join request, and the node agent's VPN file (--vpn-file) written at every boot",
);
const VPN_INTERFACE: Opt = Opt::value(
    "vpn-interface",
    "NAME",
    "The interface on the network the nodes share: the public endpoint is its first IPv4 address (as DHCP gave it at this boot) and --vpn-listen-port [default: --node-ip]",
);
const VPN_LISTEN_PORT: Opt = Opt::value(
    "vpn-listen-port",
    "PORT",
    "The UDP port of the node's WireGuard",
)
.default("51820");
const VPN_FILE: Opt = Opt::value(
    "vpn-file",
    "FILE",
    "Where the node agent's VPN file is written (0600; a tmpfs: it holds the private key)",
)
.default("/run/confboot/vpn.json");
const VPN_CONTROL_PLANE: Opt = Opt::value(
    "vpn-control-plane",
    "HOST:PORT",
    "A control plane the node agent asks for peer updates (repeatable) [default: the join endpoints of --join-endpoint and the kernel command line]",
);
const NODE_IP: Opt =
    Opt::value("node-ip", "IP", "The node's IP in the cluster network").default("10.0.2.15");
const NODE_NAME: Opt = Opt::value(
    "node-name",
    "NAME",
    "The node's Kubernetes name; a joining node asks the join service to sign its kubelet's serving certificate for it and --node-ip (default: the host name, when it is a valid node name; else no certificate is asked for and the kubelet makes its own)",
);
const KUBELET_CERT_DIR: Opt = Opt::value(
    "kubelet-cert-dir",
    "DIR",
    "Where the signed kubelet certificate and key are installed (kubelet.crt, kubelet.key: the kubelet's --cert-dir)",
)
.default(confboot_cluster::kubeadm::DEFAULT_KUBELET_CERT_DIR);
const KUBEADM: Opt = Opt::value("kubeadm", "PATH", "The kubeadm program").default("kubeadm");
const KUBEADM_CONFIG_DIR: Opt = Opt::value(
    "kubeadm-config-dir",
    "DIR",
    "Where kubeadm configuration is written",
)
.default("/etc/kubernetes");
const PKI_DIR: Opt =
    Opt::value("pki-dir", "DIR", "Kubernetes PKI directory").default("/etc/kubernetes/pki");
const ADMIN_KUBECONFIG: Opt = Opt::value(
    "admin-kubeconfig",
    "FILE",
    "The kubeconfig kubeadm init writes",
)
.default("/etc/kubernetes/admin.conf");
const CLUSTER_STEP: Opt = Opt::value(
    "cluster-step",
    "kubeadm|handoff",
    "How the node enters its cluster after Init or a join: kubeadm (run here, --kubeadm), or handoff (written to --handoff-dir for the node's OS to run: `nodeagent cluster-step`; Init's cluster CA and admin kubeconfig are made here)",
)
.default("kubeadm");
const HANDOFF_DIR: Opt = Opt::value(
    "handoff-dir",
    "DIR",
    "With --cluster-step handoff: where the cluster step is handed over (a tmpfs that survives switch_root)",
)
.default(confboot_cluster::handoff::DEFAULT_HANDOFF_DIR);
const RETRY_MAX: Opt =
    Opt::value("retry-max", "SECONDS", "Longest wait between join attempts").default("30");

/// The bootstrapper's command line.
pub const CMD: Command = Command {
    name: "bootstrapper",
    about: "bootstrapper: runs on every confboot node, from the initramfs at VM boot.\n\
            On a blank state disk it races an InitServer (the admin's `confboot init`, on --init-listen)\n\
            against a JoinClient (asks the join services for a ticket, attesting as --attestation says:\n\
            qemu-vtpm, the node's vTPM; sev-snp, an SEV-SNP report; tdx, an Intel TDX quote; or\n\
            azure-sev-snp, an Azure confidential VM's HCL report and vTPM quote; join services must\n\
            attest with one of --joinsvc-variants, from the same four).\n\
            The winner takes the nodelock, formats the state disk (LUKS2) with the derived key, marks\n\
            the node (PCR 15 <- cluster id) and hands over to kubeadm. On an initialized disk it asks\n\
            for a rejoin ticket and serves Recover (--recover-listen) for when no join service answers.\n\
            Exits 0 once the node is bootstrapped, 2 on options it cannot use, 1 with the reason\n\
            when it cannot go on.\n\
            Join endpoints come from --join-endpoint, `confboot.join=` on the kernel command line,\n\
            and --metadata-url.",
    usage: "bootstrapper --state-disk PATH [OPTIONS]",
    opts: &[
        CONFIG,
        TPM,
        EVENT_LOG,
        ATTESTATION,
        STATE_DISK,
        DISK_MODE,
        MAPPER_NAME,
        DISK_BACKEND,
        CRYPTSETUP,
        STATE_DISK_PBKDF,
        STATE_FS,
        MKFS,
        STATE_MOUNT,
        SSH_USERS_ROOT,
        INIT_LISTEN,
        RECOVER_LISTEN,
        INIT_SECRET_HASH,
        JOIN_ENDPOINT,
        CMDLINE,
        METADATA_URL,
        JOINSVC_MEASUREMENTS,
        JOINSVC_AK_TRUST,
        JOINSVC_VARIANTS,
        JOINSVC_SNP_POLICY,
        JOINSVC_TDX_POLICY,
        JOINSVC_AZURE_POLICY,
        JOINSVC_RELEASE_KEY,
        INSECURE_ANY_JOIN_SERVICE,
        CONTROL_PLANE,
        VPN,
        VPN_INTERFACE,
        VPN_LISTEN_PORT,
        VPN_FILE,
        VPN_CONTROL_PLANE,
        NODE_IP,
        NODE_NAME,
        KUBELET_CERT_DIR,
        KUBEADM,
        KUBEADM_CONFIG_DIR,
        PKI_DIR,
        ADMIN_KUBECONFIG,
        CLUSTER_STEP,
        HANDOFF_DIR,
        RETRY_MAX,
        VERBOSITY,
    ],
};

/// Everything the bootstrapper runs with.
#[derive(Clone, Debug)]
pub struct Config {
    /// The node's TPM ([`confboot_tpm::Tpm::open`]'s syntax).
    pub tpm: String,
    /// The firmware event log sent with vTPM evidence.
    pub event_log: EventLogSource,
    /// The variant this node attests with.
    pub attestation: Variant,
    /// The state disk and how it is opened.
    pub disk: DiskConfig,
    /// The file system made on a new state disk.
    pub state_fs: StateFs,
    /// Where the state file system is mounted for a moment.
    pub state_mount: PathBuf,
    /// The root SSH users are created in.
    pub ssh_users_root: PathBuf,
    /// Address of the init API.
    pub init_listen: String,
    /// Address of the recovery API.
    pub recover_listen: String,
    /// The init secret's hash (`None`: Init and Recover are refused).
    pub init_secret_hash: Option<InitSecretHash>,
    /// The join services of `--join-endpoint`, as given.
    pub join_endpoints: Vec<String>,
    /// The kernel command line `confboot.join=` is read from.
    pub cmdline: PathBuf,
    /// A metadata endpoint naming join services.
    pub metadata_url: Option<String>,
    /// How join services are checked.
    pub join_services: JoinServices,
    /// The release keys (`--joinsvc-release-key`, files of the measured
    /// initramfs) whose signed sets a join service may present instead of
    /// running this node's image.
    pub joinsvc_release_keys: Vec<PathBuf>,
    /// Whether the node joins as a control-plane node.
    pub control_plane: bool,
    /// The node's VPN (`None`: the node is not in the VPN).
    pub vpn: Option<VpnConfig>,
    /// The node's IP in the cluster network.
    pub node_ip: IpAddr,
    /// The node's Kubernetes name: `--node-name`, or the host name when it
    /// is a valid node name (`None`: neither).
    pub node_name: Option<String>,
    /// kubeadm and where it keeps its files.
    pub cluster: ClusterConfig,
    /// The longest wait between join attempts.
    pub retry_max: Duration,
}

/// The state disk and how it is opened.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DiskConfig {
    /// The block device or image file.
    pub path: PathBuf,
    /// Mapped with dm-crypt or checked against its header only.
    pub mode: DiskMode,
    /// What does the LUKS2 work.
    pub backend: DiskBackendChoice,
}

/// How the state disk is used (`--disk-mode`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DiskMode {
    /// `luks`: mapped with dm-crypt under this name.
    Luks {
        /// The device-mapper name.
        mapper_name: String,
    },
    /// `header-only`: keys are checked against the LUKS2 header, nothing
    /// is mapped (machines without device-mapper): no file system, so no
    /// SSH users and no VPN key are kept.
    HeaderOnly,
}

impl DiskMode {
    /// Whether the disk is mapped (a file system can be on it).
    pub fn is_mapped(&self) -> bool {
        matches!(self, DiskMode::Luks { .. })
    }
}

/// What does the LUKS2 work (`--disk-backend`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DiskBackendChoice {
    /// `native`: LUKS2 and device-mapper in this program, with this
    /// key-slot hashing.
    Native(KdfChoice),
    /// `cryptsetup`: the cryptsetup program.
    Cryptsetup {
        /// The program.
        program: PathBuf,
        /// The key-slot hashing of a new header.
        pbkdf: Pbkdf,
    },
}

/// The file system made on a new state disk (`--state-fs`, `--mkfs`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StateFs {
    /// ext4, made as this says.
    Ext4(MkfsChoice),
    /// None.
    None,
}

/// How the ext4 state file system is made (`--mkfs`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MkfsChoice {
    /// By this program (no e2fsprogs).
    Native,
    /// By an mke2fs program.
    Program(PathBuf),
}

/// How join services are checked.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum JoinServices {
    /// Attested as these settings say (by default: this node's image, an
    /// AK of the platform's CA).
    Attested(AttestationSettings),
    /// `--insecure-any-join-service`: not attested at all.
    Unattested,
}

/// The node's VPN (`--vpn` and its options).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VpnConfig {
    /// The node's peer name (its node name).
    pub name: String,
    /// The interface whose first IPv4 address is the public endpoint
    /// (`None`: the node's IP).
    pub interface: Option<String>,
    /// The UDP port of the node's WireGuard.
    pub listen_port: u16,
    /// Where the node agent's VPN file is written.
    pub file: PathBuf,
    /// The control planes of `--vpn-control-plane` (the valid ones; empty:
    /// the join endpoints).
    pub control_planes: Vec<String>,
}

/// Who runs the cluster step (`--cluster-step`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ClusterStep {
    /// `kubeadm`: the bootstrapper runs kubeadm.
    Kubeadm,
    /// `handoff`: written to this directory for the node's OS.
    Handoff(PathBuf),
}

/// kubeadm and where it keeps its files.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClusterConfig {
    /// Who runs the cluster step.
    pub step: ClusterStep,
    /// The kubeadm program.
    pub kubeadm: PathBuf,
    /// Where kubeadm configuration is written.
    pub config_dir: PathBuf,
    /// The Kubernetes PKI directory.
    pub pki_dir: PathBuf,
    /// The kubeconfig kubeadm init writes.
    pub admin_kubeconfig: PathBuf,
    /// Where the signed kubelet certificate and key are installed.
    pub kubelet_cert_dir: PathBuf,
}

/// Why the options cannot be used (a usage error, exit 2); the message
/// names the option.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// An option is missing or its value is not of its type.
    #[error(transparent)]
    Args(#[from] ArgsError),
    /// An option's value is not one of its choices.
    #[error("--{option} {value}: want {want}")]
    Choice {
        /// The option.
        option: &'static str,
        /// The value given.
        value: String,
        /// The choices.
        want: &'static str,
    },
    /// `--attestation` names no single known variant.
    #[error("--{option}: {0}", option = ATTESTATION.long)]
    Attestation(VariantsError),
    /// `--init-secret-hash` is not a hash of the init secret.
    #[error("--init-secret-hash: {0}")]
    InitSecretHash(HashFormatError),
    /// `--node-name` is not a node name.
    #[error("--node-name: {0}")]
    NodeName(KubeletCertError),
    /// `--node-ip` is not an IP address.
    #[error("--node-ip {0:?} is not an IP address")]
    NodeIp(String),
    /// `--vpn` without a state file system to keep its key on.
    #[error(
        "--vpn needs a state file system to keep the key on (--disk-mode luks, --state-fs ext4)"
    )]
    VpnWithoutStateFs,
    /// `--vpn` without the node's name.
    #[error("--vpn needs the node's name (--node-name, or a valid host name)")]
    VpnWithoutName,
    /// `--vpn-listen-port` is not a port.
    #[error("--vpn-listen-port: want 1 to 65535")]
    VpnListenPort,
    /// `--state-disk-pbkdf` is not a key-slot hashing.
    #[error("--{option} {0}", option = STATE_DISK_PBKDF.long)]
    Pbkdf(PbkdfSpecError),
    /// The `--joinsvc-*` options are not usable.
    #[error(transparent)]
    JoinServices(#[from] JoinServiceOptionsError),
}

impl Config {
    /// Reads every option (each once, whatever the others say) and checks
    /// it; the error names the option. The node's name falls back on the
    /// host name, read once here.
    pub fn from_matches(m: &Matches) -> Result<Config, ConfigError> {
        let default = |opt: &Opt| m.value(opt).expect("has a default").to_string();
        let path = |opt: &Opt| PathBuf::from(m.value(opt).expect("has a default"));
        let tpm = default(&TPM);
        let event_log = EventLogSource::new(m.value(&EVENT_LOG), Tpm::is_device_spec(&tpm));
        let attestation = default(&ATTESTATION);
        let state_disk = m.required(&STATE_DISK).map(PathBuf::from);
        let disk_mode = default(&DISK_MODE);
        let mapper_name = default(&MAPPER_NAME);
        let disk_backend = default(&DISK_BACKEND);
        let cryptsetup = path(&CRYPTSETUP);
        let pbkdf = default(&STATE_DISK_PBKDF);
        let state_fs = default(&STATE_FS);
        let mkfs = default(&MKFS);
        let state_mount = path(&STATE_MOUNT);
        let ssh_users_root = path(&SSH_USERS_ROOT);
        let init_listen = default(&INIT_LISTEN);
        let recover_listen = default(&RECOVER_LISTEN);
        let init_secret_hash = m.value(&INIT_SECRET_HASH);
        let join_endpoints: Vec<String> = m
            .values(&JOIN_ENDPOINT)
            .into_iter()
            .map(str::to_string)
            .collect();
        let cmdline = path(&CMDLINE);
        let metadata_url = m.value(&METADATA_URL).map(str::to_string);
        let join_service_options = JoinServiceOptions::read(m);
        let joinsvc_release_keys = join_service_options.release_keys();
        let insecure_any_join_service = m.flag(&INSECURE_ANY_JOIN_SERVICE);
        let control_plane = m.flag(&CONTROL_PLANE);
        let vpn = m.flag(&VPN);
        let vpn_interface = m.value(&VPN_INTERFACE).map(str::to_string);
        let vpn_listen_port = default(&VPN_LISTEN_PORT);
        let vpn_file = path(&VPN_FILE);
        let vpn_control_planes = m.values(&VPN_CONTROL_PLANE);
        let node_ip = default(&NODE_IP);
        let node_name = m.value(&NODE_NAME);
        let cluster_step = default(&CLUSTER_STEP);
        let handoff_dir = path(&HANDOFF_DIR);
        let cluster = ClusterConfig {
            step: match cluster_step.as_str() {
                "kubeadm" => ClusterStep::Kubeadm,
                "handoff" => ClusterStep::Handoff(handoff_dir),
                other => {
                    return Err(ConfigError::Choice {
                        option: CLUSTER_STEP.long,
                        value: other.to_string(),
                        want: "kubeadm or handoff",
                    });
                }
            },
            kubeadm: path(&KUBEADM),
            config_dir: path(&KUBEADM_CONFIG_DIR),
            pki_dir: path(&PKI_DIR),
            admin_kubeconfig: path(&ADMIN_KUBECONFIG),
            kubelet_cert_dir: path(&KUBELET_CERT_DIR),
        };
        let retry_max = m.parsed::<u64>(&RETRY_MAX);

        let attestation =
            parse_attestation_variant(&attestation).map_err(ConfigError::Attestation)?;
        let disk = DiskConfig {
            path: state_disk?,
            mode: match disk_mode.as_str() {
                "luks" => DiskMode::Luks { mapper_name },
                "header-only" => DiskMode::HeaderOnly,
                other => {
                    return Err(ConfigError::Choice {
                        option: DISK_MODE.long,
                        value: other.to_string(),
                        want: "luks or header-only",
                    });
                }
            },
            backend: disk_backend_choice(&disk_backend, &pbkdf, cryptsetup)?,
        };
        let state_fs = match state_fs.as_str() {
            "ext4" => StateFs::Ext4(match mkfs.as_str() {
                "native" => MkfsChoice::Native,
                program => MkfsChoice::Program(PathBuf::from(program)),
            }),
            "none" => StateFs::None,
            other => {
                return Err(ConfigError::Choice {
                    option: STATE_FS.long,
                    value: other.to_string(),
                    want: "ext4 or none",
                });
            }
        };
        let init_secret_hash = init_secret_hash
            .map(InitSecretHash::parse)
            .transpose()
            .map_err(ConfigError::InitSecretHash)?;
        let node_name = resolve_node_name(node_name)?;
        let node_ip: IpAddr = node_ip
            .parse()
            .map_err(|_| ConfigError::NodeIp(node_ip.clone()))?;
        let vpn = if vpn {
            if !disk.mode.is_mapped() || state_fs == StateFs::None {
                return Err(ConfigError::VpnWithoutStateFs);
            }
            let name = node_name.clone().ok_or(ConfigError::VpnWithoutName)?;
            let listen_port: u16 = vpn_listen_port
                .parse()
                .ok()
                .filter(|p| *p != 0)
                .ok_or(ConfigError::VpnListenPort)?;
            Some(VpnConfig {
                name,
                interface: vpn_interface,
                listen_port,
                file: vpn_file,
                control_planes: vpn_control_planes
                    .into_iter()
                    .filter(|e| join::is_endpoint(e))
                    .map(str::to_string)
                    .collect(),
            })
        } else {
            None
        };
        // Join services' settings are read only when they are checked.
        let join_services = if insecure_any_join_service {
            JoinServices::Unattested
        } else {
            JoinServices::Attested(join_service_options.settings()?)
        };
        Ok(Config {
            tpm,
            event_log,
            attestation,
            disk,
            state_fs,
            state_mount,
            ssh_users_root,
            init_listen,
            recover_listen,
            init_secret_hash,
            join_endpoints,
            cmdline,
            metadata_url,
            join_services,
            joinsvc_release_keys,
            control_plane,
            vpn,
            node_ip,
            node_name,
            cluster,
            retry_max: Duration::from_secs(retry_max?.unwrap_or(30)),
        })
    }
}

/// `--disk-backend` with its key-slot hashing (`--state-disk-pbkdf`) and
/// program (`--cryptsetup`).
fn disk_backend_choice(
    backend: &str,
    pbkdf: &str,
    cryptsetup: PathBuf,
) -> Result<DiskBackendChoice, ConfigError> {
    let pbkdf: Pbkdf = pbkdf.parse().map_err(ConfigError::Pbkdf)?;
    match backend {
        "native" => Ok(DiskBackendChoice::Native(pbkdf.kdf_choice())),
        "cryptsetup" => Ok(DiskBackendChoice::Cryptsetup {
            program: cryptsetup,
            pbkdf,
        }),
        other => Err(ConfigError::Choice {
            option: DISK_BACKEND.long,
            value: other.to_string(),
            want: "native or cryptsetup",
        }),
    }
}

/// The node's name: `--node-name`, or the host name when it is a valid
/// node name (`None`: neither).
fn resolve_node_name(given: Option<&str>) -> Result<Option<String>, ConfigError> {
    match given {
        Some(name) => {
            check_node_name(name).map_err(ConfigError::NodeName)?;
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

#[cfg(test)]
mod tests {
    use super::*;

    fn config(args: &[&str]) -> Result<Config, ConfigError> {
        let m = CMD.parse(args.iter().map(|s| s.to_string())).unwrap();
        Config::from_matches(&m)
    }

    #[test]
    fn join_service_release_keys_are_read_repeatably() {
        let c = config(&["--state-disk", "d"]).unwrap();
        assert!(
            c.joinsvc_release_keys.is_empty(),
            "default: only this node's image"
        );
        let c = config(&[
            "--state-disk",
            "d",
            "--joinsvc-release-key",
            "/etc/confboot/release-1.pem",
            "--joinsvc-release-key",
            "/etc/confboot/release-2.pem",
        ])
        .unwrap();
        assert_eq!(
            c.joinsvc_release_keys,
            [
                PathBuf::from("/etc/confboot/release-1.pem"),
                PathBuf::from("/etc/confboot/release-2.pem")
            ]
        );
    }

    #[test]
    fn every_option_the_config_reads_is_declared() {
        // Config::from_matches reads every option whatever the others say:
        // one parse reads them all (an undeclared one panics).
        let c = config(&["--state-disk", "disk.img"]).unwrap();
        assert_eq!(c.attestation, Variant::QemuVtpm);
        assert_eq!(
            c.disk,
            DiskConfig {
                path: PathBuf::from("disk.img"),
                mode: DiskMode::Luks {
                    mapper_name: "state".into()
                },
                backend: DiskBackendChoice::Native(
                    "pbkdf2:1000".parse::<Pbkdf>().unwrap().kdf_choice()
                ),
            }
        );
        assert_eq!(c.state_fs, StateFs::Ext4(MkfsChoice::Native));
        assert!(matches!(c.join_services, JoinServices::Attested(_)));
        assert_eq!(c.retry_max, Duration::from_secs(30));
        assert!(c.vpn.is_none());
        assert_eq!(c.cluster.step, ClusterStep::Kubeadm);
    }

    #[test]
    fn the_cluster_step_is_kubeadm_or_handed_over() {
        let c = config(&["--state-disk=d", "--cluster-step=handoff"]).unwrap();
        assert_eq!(c.cluster.step, ClusterStep::Handoff("/run/confboot".into()));
        let c = config(&[
            "--state-disk=d",
            "--cluster-step=handoff",
            "--handoff-dir=/run/x",
        ])
        .unwrap();
        assert_eq!(c.cluster.step, ClusterStep::Handoff("/run/x".into()));
        let e = config(&["--state-disk=d", "--cluster-step=helm"]).unwrap_err();
        assert!(
            matches!(
                e,
                ConfigError::Choice {
                    option: "cluster-step",
                    ..
                }
            ),
            "{e:?}"
        );
        assert_eq!(
            e.to_string(),
            "--cluster-step helm: want kubeadm or handoff"
        );
    }

    #[test]
    fn modes_are_read_into_their_enums_and_bad_ones_named() {
        let c = config(&[
            "--state-disk=d",
            "--disk-mode=header-only",
            "--disk-backend=cryptsetup",
            "--state-disk-pbkdf=argon2id:4:65536:2",
            "--state-fs=none",
            "--insecure-any-join-service",
            "--joinsvc-variants=not-checked-when-insecure",
        ])
        .unwrap();
        assert_eq!(c.disk.mode, DiskMode::HeaderOnly);
        assert_eq!(
            c.disk.backend,
            DiskBackendChoice::Cryptsetup {
                program: "cryptsetup".into(),
                pbkdf: Pbkdf::Argon2id {
                    iterations: 4,
                    memory_kib: 65536,
                    parallel: 2
                }
            }
        );
        assert_eq!(c.state_fs, StateFs::None);
        assert_eq!(c.join_services, JoinServices::Unattested);
        let c = config(&["--state-disk=d", "--mkfs=/sbin/mke2fs"]).unwrap();
        assert_eq!(
            c.state_fs,
            StateFs::Ext4(MkfsChoice::Program("/sbin/mke2fs".into()))
        );
        for (args, error) in [
            (&[][..], "option --state-disk is required"),
            (
                &["--disk-mode=x"],
                "--disk-mode x: want luks or header-only",
            ),
            (
                &["--disk-backend=x"],
                "--disk-backend x: want native or cryptsetup",
            ),
            (&["--state-fs=btrfs"], "--state-fs btrfs: want ext4 or none"),
            (
                &["--state-disk-pbkdf=cryptsetup-default"],
                "--state-disk-pbkdf cryptsetup-default: want pbkdf2:ITERATIONS (1000 to 10000000), \
                 or argon2id:PASSES:MEMORY_KIB:THREADS (1 to 32, 8 to 1048576, 1 to 16)",
            ),
            (
                &["--node-ip=host"],
                "--node-ip \"host\" is not an IP address",
            ),
            (
                &["--vpn", "--node-name=n", "--state-fs=none"],
                "--vpn needs a state file system to keep the key on (--disk-mode luks, --state-fs ext4)",
            ),
            (
                &["--vpn", "--node-name=n", "--vpn-listen-port=0"],
                "--vpn-listen-port: want 1 to 65535",
            ),
        ] {
            let mut given = if args.is_empty() {
                vec![]
            } else {
                vec!["--state-disk=d"]
            };
            given.extend_from_slice(args);
            assert_eq!(config(&given).unwrap_err().to_string(), error, "{args:?}");
        }
        let e = config(&["--state-disk=d", "--attestation=sev-snp,qemu-vtpm"]).unwrap_err();
        assert!(matches!(e, ConfigError::Attestation(_)), "{e:?}");
        assert!(e.to_string().starts_with("--attestation: "), "{e}");
        let e = config(&["--state-disk=d", "--joinsvc-variants=sgx"]).unwrap_err();
        assert!(matches!(e, ConfigError::JoinServices(_)), "{e:?}");
        assert!(e.to_string().starts_with("--joinsvc-variants: "), "{e}");
        let e = config(&["--state-disk=d", "--node-name=Not_A_Name"]).unwrap_err();
        assert!(matches!(e, ConfigError::NodeName(_)), "{e:?}");
        assert!(e.to_string().starts_with("--node-name: "), "{e}");
    }

    #[test]
    fn the_vpn_is_read_with_its_node_name() {
        let c = config(&[
            "--state-disk=d",
            "--vpn",
            "--node-name=worker-1",
            "--vpn-control-plane=10.0.0.1:9090",
            "--vpn-control-plane=not an endpoint",
        ])
        .unwrap();
        assert_eq!(
            c.vpn,
            Some(VpnConfig {
                name: "worker-1".into(),
                interface: None,
                listen_port: 51820,
                file: "/run/confboot/vpn.json".into(),
                control_planes: vec!["10.0.0.1:9090".into()],
            })
        );
        assert_eq!(c.node_name.as_deref(), Some("worker-1"));
    }
}
