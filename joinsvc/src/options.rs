//! joinsvc's command line: every option as a named constant, and the
//! table `--help` is made from. [`crate::config`] reads them once into a
//! typed configuration.
//!
//! How joining nodes are checked:
//!
//! | option | setting |
//! |---|---|
//! | `--variants` | accepted variants (default `qemu-vtpm`) |
//! | `--measurements` (formerly `--policy`) | measurement policy, watched and reloaded |
//! | `--ak-trust` | AK trust; `insecure-any-ak` refused without `--i-understand-insecure-any-ak` |
//! | `--expected-events` | expected event log, to explain a differing PCR |
//! | `--snp-policy` | SEV-SNP policy, for `sev-snp` (read at start-up) |
//! | `--reference-values-dir` | signed reference-value sets, for `qemu-vtpm`, in place of `--measurements`; read again every `--reference-values-reload` |
//! | `--release-key` | a release key whose signed sets are accepted (repeatable) |
//! | `--reference-values-warning` | days before a set's not-after from which its nodes are admitted with a warning |
//! | `--state-dir` | the retired sets and the time floor, kept across restarts |
//!
//! The help of the attestation options is the same in every binary that
//! has them (the bootstrapper's `--joinsvc-*` in the node agent's crate,
//! `confboot`'s own); joinsvc depends on no other binary's crate, so it
//! keeps its copy here.

use confboot_proto::{DEFAULT_JOIN_LISTEN, DEFAULT_JOINSVC_HEALTH_LISTEN};
use confboot_util::args::{CONFIG, Command, Opt, VERBOSITY};
use confboot_verifier::config::DEFAULT_VARIANTS;

/// The help of `--variants`.
const VARIANTS_HELP: &str = "Attestation variants accepted, comma-separated: qemu-vtpm (a vTPM quote, \
     checked with the measurements and AK-trust options), sev-snp (an SEV-SNP report, checked \
     with the SNP policy option), tdx (an Intel TDX quote, checked with the TDX policy option) \
     and/or azure-sev-snp (an Azure confidential VM's HCL report and vTPM quote, checked with the \
     Azure policy option). \
     Evidence of another variant is refused in the handshake";

/// The help of `--snp-policy`.
const SNP_POLICY_HELP: &str = "SEV-SNP policy, JSON: measurement and launch (required), minimumTcb, vmpl, \
     allowDebug, hostData, idKeyDigests, rootBundles (PEM files of pinned ARKs), vcekCacheDir, ...; \
     required when sev-snp is accepted. With --reference-values-dir the signed sets' launches pin \
     the image: the policy then holds only the platform's checks (no measurement, launch or \
     kernel hashes)";

/// The help of `--tdx-policy`.
const TDX_POLICY_HELP: &str = "TDX policy, JSON: mrtd and rtmrs 0, 1 and 2 (required: firmware, its configuration and ACPI tables, kernel, command line and initrd), allowDebug, tdAttributes, xfam, \
     minimumTeeTcbSvn, acceptedTcbStatuses, rootCertificates, collateral (the files of Intel's TCB \
     info, QE identity and CRLs, checked as of now), expectedEventLog, ...; required when tdx is \
     accepted";

/// The help of `--expected-events`.
const EXPECTED_EVENTS_HELP: &str = "The predicted event log of the expected measurements (`confboot measure --events-out`): a PCR that differs is explained by the first event that differs, when the node sends its log";

/// The help of `--event-log`.
const EVENT_LOG_HELP: &str = "The firmware's TCG event log sent with this node's evidence, for verifiers to replay and explain: a file, or `none` (default: the kernel's /sys/kernel/security/tpm0/binary_bios_measurements when --tpm is the device)";

/// `--listen`.
pub const LISTEN: Opt = Opt::value("listen", "ADDR", "Address of the join API")
    .default(DEFAULT_JOIN_LISTEN)
    .env("JOINSVC_LISTEN");
/// `--health-listen`.
pub const HEALTH_LISTEN: Opt = Opt::value(
    "health-listen",
    "ADDR",
    "Address of the HTTP health and metrics endpoints",
)
.default(DEFAULT_JOINSVC_HEALTH_LISTEN)
.env("JOINSVC_HEALTH_LISTEN");
/// `--master-secret`.
pub const MASTER_SECRET: Opt = Opt::value(
    "master-secret",
    "FILE",
    "The cluster's master secret: JSON {\"key\": base64, \"salt\": base64}",
)
.env("JOINSVC_MASTER_SECRET");
/// `--measurement-salt`.
pub const MEASUREMENT_SALT: Opt =
    Opt::value("measurement-salt", "HEX", "The cluster's measurement salt")
        .env("JOINSVC_MEASUREMENT_SALT");
/// `--measurements`.
pub const MEASUREMENTS: Opt = Opt::value(
    "measurements",
    "FILE",
    "Expected measurements of joining nodes (Constellation's JSON format); reloaded on change",
)
.env("JOINSVC_MEASUREMENTS")
.aliases(&["policy"])
.env_aliases(&["JOINSVC_POLICY"]);
/// `--reference-values-dir`.
pub const REFERENCE_VALUES_DIR: Opt = Opt::value(
    "reference-values-dir",
    "DIR",
    "Signed reference-value sets of joining vTPM and SEV-SNP nodes (`confboot measure \
     --reference-values-out`, then `confboot sign`), one per file, in place of --measurements and \
     of --snp-policy's launch (give one of the two): a vTPM node is matched by its PCRs, an SEV-SNP \
     node by its launch measurement; a node \
     is admitted when it matches any live set, that is, any file signed by a --release-key whose \
     window holds now. Read again every --reference-values-reload: a file added is accepted, a file \
     removed or past its not-after is retired (its nodes are refused with its name and retirement \
     time), a bad file is refused and logged and the others kept",
)
.env("JOINSVC_REFERENCE_VALUES_DIR");
/// `--release-key`.
pub const RELEASE_KEY: Opt = Opt::value(
    "release-key",
    "PEM",
    "A release public key (`confboot keygen`) whose signed sets in --reference-values-dir are \
     accepted; repeatable",
);
/// `--reference-values-warning`.
pub const REFERENCE_VALUES_WARNING: Opt = Opt::value(
    "reference-values-warning",
    "DAYS",
    "A node matching a set that ends within this many days is admitted with a warning (logged, \
     counted in joinsvc_set_admissions_total{status=\"warning\"})",
)
.default("7");
/// `--reference-values-reload`.
pub const REFERENCE_VALUES_RELOAD: Opt = Opt::value(
    "reference-values-reload",
    "SECONDS",
    "How often --reference-values-dir is read again (1 to 3600)",
)
.default("10");
/// `--state-dir`.
pub const STATE_DIR: Opt = Opt::value(
    "state-dir",
    "DIR",
    "Where joinsvc keeps what must outlive a restart, with --reference-values-dir: the sets it \
     retired, by what was signed, and the newest signing of each (reference-values-history.json), \
     so a retired set put back in any envelope stays retired. Always: the time floor \
     (time-floor), the latest time seen, so a clock set back does not reopen an ended set window \
     or make stale TDX collateral current; the ledger's anchor (ledger-anchor.json), what this \
     joinsvc saw the ledger hold, so that a ledger ConfigMap gone or rolled back is refused after \
     a restart too. Created if missing",
)
.default("/var/lib/confboot/joinsvc")
.env("JOINSVC_STATE_DIR");
/// `--ak-trust`.
pub const AK_TRUST: Opt = Opt::value(
    "ak-trust",
    "MODE",
    "Which vTPM attestation keys to trust: ca:FILE (AK certificates from these CAs), \
     pinned:FILE (hex public keys, one per line), or insecure-any-ak (local QEMU only; \
     needs --i-understand-insecure-any-ak)",
)
.env("JOINSVC_AK_TRUST");
/// `--i-understand-insecure-any-ak`: confirms `--ak-trust insecure-any-ak`.
pub const INSECURE_ANY_AK_CONFIRMATION: Opt = Opt::flag(
    "i-understand-insecure-any-ak",
    "INSECURE: confirms --ak-trust insecure-any-ak, which trusts any attestation key, so \
     any machine can claim any measurements and get a join ticket with its disk key; for \
     local QEMU only. Without it joinsvc refuses to start with insecure-any-ak",
);
/// `--variants`.
pub const VARIANTS: Opt = Opt::value("variants", "LIST", VARIANTS_HELP)
    .default(DEFAULT_VARIANTS)
    .env("JOINSVC_VARIANTS");
/// `--snp-policy`.
pub const SNP_POLICY: Opt =
    Opt::value("snp-policy", "FILE", SNP_POLICY_HELP).env("JOINSVC_SNP_POLICY");
/// `--tdx-policy`.
pub const TDX_POLICY: Opt =
    Opt::value("tdx-policy", "FILE", TDX_POLICY_HELP).env("JOINSVC_TDX_POLICY");
/// `--azure-policy`.
pub const AZURE_POLICY: Opt = Opt::value(
    "azure-policy",
    "FILE",
    confboot_verifier::help::AZURE_POLICY_HELP,
)
.env("JOINSVC_AZURE_POLICY");
/// `--attest-as`.
pub const ATTEST_AS: Opt = Opt::value(
    "attest-as",
    "VARIANT",
    "How joinsvc attests itself with --tpm: qemu-vtpm (a quote by the TPM's own AK) or \
     azure-sev-snp (on an Azure confidential VM: the paravisor's HCL report in NV 0x01400001 and \
     a quote by the key it names)",
)
.default("qemu-vtpm")
.env("JOINSVC_ATTEST_AS");
/// `--tpm`.
pub const TPM: Opt = Opt::value(
    "tpm",
    "DEVICE|HOST:PORT",
    "Attest joinsvc itself with this TPM (a device or a swtpm socket)",
);
/// `--present-reference-values`.
pub const PRESENT_REFERENCE_VALUES: Opt = Opt::value(
    "present-reference-values",
    "FILE",
    "The signed reference-value set of joinsvc's own image (`confboot sign`'s output, at most \
     16 KiB), presented with its evidence (--tpm) in every handshake: a node of another image that \
     pins the release key (--joinsvc-release-key) accepts this join service when its evidence \
     matches the set. Checked with --release-key when given",
)
.env("JOINSVC_PRESENT_REFERENCE_VALUES");
/// `--event-log`.
pub const EVENT_LOG: Opt = Opt::value("event-log", "FILE|none", EVENT_LOG_HELP);
/// `--expected-events`.
pub const EXPECTED_EVENTS: Opt = Opt::value("expected-events", "FILE", EXPECTED_EVENTS_HELP);
/// `--api-server-endpoint`.
pub const API_SERVER_ENDPOINT: Opt = Opt::value(
    "api-server-endpoint",
    "HOST:PORT",
    "The Kubernetes API server nodes join",
)
.env("JOINSVC_API_SERVER_ENDPOINT");
/// `--kubernetes-version`.
pub const KUBERNETES_VERSION: Opt = Opt::value(
    "kubernetes-version",
    "VERSION",
    "Kubernetes version nodes install",
)
.default(confboot_proto::api::PINNED_KUBERNETES_VERSION);
/// `--kubernetes-ca`.
pub const KUBERNETES_CA: Opt = Opt::value(
    "kubernetes-ca",
    "FILE",
    "The cluster CA certificate (for the kubeadm discovery hash)",
)
.default("/etc/kubernetes/pki/ca.crt");
/// `--pki-dir`.
pub const PKI_DIR: Opt = Opt::value(
    "pki-dir",
    "DIR",
    "Kubernetes PKI sent to joining control-plane nodes; its ca.key signs the kubelet \
     certificates nodes ask for (with the --kubernetes-ca certificate)",
)
.default("/etc/kubernetes/pki");
/// `--kubelet-cert-validity`.
pub const KUBELET_CERT_VALIDITY: Opt = Opt::value(
    "kubelet-cert-validity",
    "DAYS",
    "How long a kubelet serving certificate signed for a joining node is valid",
)
.default("365");
/// `--kube-api`.
pub const KUBE_API: Opt = Opt::value(
    "kube-api",
    "URL",
    "Kubernetes API for bootstrap tokens and the VPN peer registry [default: in-cluster]",
);
/// `--kube-namespace`.
pub const KUBE_NAMESPACE: Opt = Opt::value(
    "kube-namespace",
    "NAME",
    "Namespace of the VPN peer registry's and the ledger's ConfigMaps (confboot-vpn-peers, \
     confboot-issued-filter), which joinsvc's Role must cover there; for tests and multi-tenant \
     setups that share one API server between clusters. Bootstrap-token Secrets stay in \
     kube-system, the only namespace the API server's token authenticator reads, labelled \
     confboot.io/joinsvc-namespace=NAME",
)
.default(crate::kube_api::DEFAULT_NAMESPACE)
.env("JOINSVC_KUBE_NAMESPACE");
/// `--kube-api-ca`.
pub const KUBE_API_CA: Opt = Opt::value("kube-api-ca", "FILE", "CA bundle of --kube-api");
/// `--remove-vpn-peer`.
pub const REMOVE_VPN_PEER: Opt = Opt::value(
    "remove-vpn-peer",
    "NAME",
    "Remove the node NAME from the VPN peer registry of --vpn-cidr (through the Kubernetes \
     API options; nothing else is needed) and exit: 0 removed, 1 not registered, 2 error. \
     Nodes drop it from their peers at their next poll",
);
/// `--vpn-cidr`.
pub const VPN_CIDR: Opt = Opt::value(
    "vpn-cidr",
    "CIDR",
    "The cluster's VPN range (e.g. 10.118.0.0/16): nodes that send a WireGuard key get an \
     address in it, kept in the ConfigMap confboot-vpn-peers (of --kube-namespace), and \
     vpn.API/GetUpdate serves the peer list [default: no VPN]",
);
/// `--kube-api-token-file`.
pub const KUBE_API_TOKEN_FILE: Opt = Opt::value(
    "kube-api-token-file",
    "FILE",
    "Bearer token file for --kube-api",
);
/// `--workers`.
pub const WORKERS: Opt = Opt::value("workers", "N", "Connections served at once").default("16");
/// `--queue`.
pub const QUEUE: Opt = Opt::value(
    "queue",
    "N",
    "Accepted connections that may wait for a worker",
)
.default("64");
/// `--pending`.
pub const PENDING: Opt = Opt::value(
    "pending",
    "N",
    "Connections that may wait for their TLS ClientHello without holding a worker; \
     a new one evicts the one waiting longest (two open files each; the open-file limit is \
     raised to fit, or --pending lowered)",
)
.default("1024");

/// joinsvc's command line.
pub const CMD: Command = Command {
    name: "joinsvc",
    about: "joinsvc: the join service of a confboot cluster. Runs on every control-plane node.\n\
            A joining node connects over attested TLS and proves what it runs inside the handshake:\n\
            as --variants accepts (other variants are refused): qemu-vtpm, a vTPM quote (checked\n\
            against --ak-trust and --measurements); sev-snp, an SEV-SNP report (checked against\n\
            --snp-policy); tdx, an Intel TDX quote (checked against --tdx-policy); or azure-sev-snp,\n\
            an Azure confidential VM's HCL report and vTPM quote (checked against --azure-policy).\n\
            joinsvc then derives the node's state-disk key from the master secret, creates a\n\
            Kubernetes bootstrap token and returns the join ticket. The measurements file is watched\n\
            and reloaded without a restart (the SNP policy is read at start-up). With --tpm, joinsvc\n\
            attests itself too, so nodes can refuse an unattested join service. Plain-HTTP /healthz,\n\
            /readyz and Prometheus /metrics are on --health-listen.\n\
            Options come from flags, environment variables, or a JSON --config file (keys are the\n\
            long option names), in that order of precedence. SIGTERM or SIGINT stop it cleanly:\n\
            in-flight calls finish, new ones are refused.",
    usage: "joinsvc --master-secret FILE --measurement-salt HEX --measurements FILE --ak-trust MODE \\\n       \
            --api-server-endpoint HOST:PORT [OPTIONS]\n       \
            joinsvc --variants sev-snp --snp-policy FILE --master-secret FILE ... [OPTIONS]",
    opts: &[
        CONFIG,
        LISTEN,
        HEALTH_LISTEN,
        MASTER_SECRET,
        MEASUREMENT_SALT,
        MEASUREMENTS,
        REFERENCE_VALUES_DIR,
        RELEASE_KEY,
        REFERENCE_VALUES_WARNING,
        REFERENCE_VALUES_RELOAD,
        STATE_DIR,
        AK_TRUST,
        INSECURE_ANY_AK_CONFIRMATION,
        VARIANTS,
        SNP_POLICY,
        TDX_POLICY,
        AZURE_POLICY,
        TPM,
        ATTEST_AS,
        PRESENT_REFERENCE_VALUES,
        EVENT_LOG,
        EXPECTED_EVENTS,
        API_SERVER_ENDPOINT,
        KUBERNETES_VERSION,
        KUBERNETES_CA,
        PKI_DIR,
        KUBELET_CERT_VALIDITY,
        KUBE_API,
        KUBE_API_CA,
        KUBE_NAMESPACE,
        REMOVE_VPN_PEER,
        VPN_CIDR,
        KUBE_API_TOKEN_FILE,
        WORKERS,
        QUEUE,
        PENDING,
        VERBOSITY,
    ],
};
