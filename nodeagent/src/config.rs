//! The node agent's options and its configuration: every option is read
//! once, at start, into [`Config`]; the rest of the agent takes the
//! [`Config`].

use std::path::PathBuf;
use std::time::Duration;

use confboot_proto::DEFAULT_VERIFY_LISTEN;
use confboot_sys::netlink::check_interface_name;
use confboot_tpm::Tpm;
use confboot_util::args::{CONFIG, Command, Matches, Opt, VERBOSITY};
use confboot_verifier::config::AttestationSettings;
use confboot_vpn::VpnNetwork;
use confboot_vtpm::EventLogSource;

use crate::options::{
    EVENT_LOG_HELP, JOINSVC_AK_TRUST, JOINSVC_AZURE_POLICY, JOINSVC_MEASUREMENTS,
    JOINSVC_RELEASE_KEY, JOINSVC_SNP_POLICY, JOINSVC_TDX_POLICY, JOINSVC_VARIANTS,
    JoinServiceOptions,
};
use crate::vpn;

/// `--tpm`.
const TPM: Opt = Opt::value(
    "tpm",
    "DEVICE|HOST:PORT",
    "The node's TPM: `device` (/dev/tpmrm0) or a swtpm socket",
)
.default("device");
/// `--event-log`.
const EVENT_LOG: Opt = Opt::value("event-log", "FILE|none", EVENT_LOG_HELP);
/// `--verify-listen`.
const VERIFY_LISTEN: Opt = Opt::value(
    "verify-listen",
    "ADDR",
    "Address of the verify service (aTLS, ALPN confboot/2)",
)
.default(DEFAULT_VERIFY_LISTEN)
.env("NODEAGENT_VERIFY_LISTEN");
/// `--verify-workers`.
const VERIFY_WORKERS: Opt = Opt::value(
    "verify-workers",
    "N",
    "Verify requests served at once (each one quotes the TPM)",
)
.default("4");
/// `--verify-per-client`.
const VERIFY_PER_CLIENT: Opt = Opt::value(
    "verify-per-client",
    "N",
    "Connections one client address may hold at once",
)
.default("2");
/// `--vpn-cidr`.
const VPN_CIDR: Opt = Opt::value(
    "vpn-cidr",
    "CIDR",
    "The cluster's VPN range (a.b.c.d/prefix, as joinsvc's --vpn-cidr); given: poll the \
     control planes for the peer list [default: no VPN]",
);
/// `--vpn-file`.
const VPN_FILE: Opt = Opt::value(
    "vpn-file",
    "FILE",
    "The node's VPN file the bootstrapper wrote (0600 JSON: name, WireGuard private key, \
     own-record key, disk UUID, public endpoint, listen port, control planes, cluster id)",
)
.default(vpn::DEFAULT_VPN_FILE);
/// `--vpn-control-plane`.
const VPN_CONTROL_PLANE: Opt = Opt::value(
    "vpn-control-plane",
    "HOST:PORT",
    "A control plane's vpn.API (repeatable; replaces the VPN file's list)",
);
/// `--vpn-poll-interval`.
const VPN_POLL_INTERVAL: Opt = Opt::value(
    "vpn-poll-interval",
    "SECONDS",
    "Seconds between polls (1 to 3600; each wait is 90-100 % of it)",
)
.default("10");
/// `--vpn-interface`.
const VPN_INTERFACE: Opt = Opt::value(
    "vpn-interface",
    "NAME|none",
    "The node's WireGuard interface, created once the node's own VPN address is in the \
     list (kernel module wireguard; netlink, no shell); none: only --vpn-peers-file",
)
.default("wg0");
/// `--vpn-peers-file`.
const VPN_PEERS_FILE: Opt = Opt::value(
    "vpn-peers-file",
    "FILE",
    "Where each applied peer list is written (JSON, replaced atomically)",
)
.default(vpn::DEFAULT_PEERS_FILE);

/// The node agent's command line.
pub const CMD: Command = Command {
    name: "nodeagent",
    about: "nodeagent: runs on every confboot node after the bootstrapper has stopped (a systemd\n\
            service on a node's OS, or started by the initramfs' /init). It serves the verify\n\
            service on --verify-listen: aTLS (TLS 1.3, ALPN confboot/2, a certificate made for\n\
            each handshake; the caller does not attest), then the node's vTPM quote (with the\n\
            firmware's event log) bound to that TLS session's exporter, as on the join path;\n\
            `confboot verify --node HOST` connects and checks it. Connections are bounded (5 s to\n\
            send the ClientHello, 10 s for the handshake and the quote, a few at a time, per client\n\
            address too); nothing it answers is secret. SIGTERM or SIGINT stop it.\n\
            With --vpn-cidr it polls the control planes (vpn.API/GetUpdate over aTLS: this node\n\
            attests with its vTPM, each control plane must pass the --joinsvc-* checks, as a\n\
            qemu-vtpm, sev-snp, tdx or azure-sev-snp node as --joinsvc-variants accepts, and carry\n\
            the cluster's mark in PCR 15) every --vpn-poll-interval seconds (with jitter; backoff\n\
            after failures), sends this node's own peer record from --vpn-file, and applies each\n\
            new checked list to the WireGuard interface --vpn-interface and --vpn-peers-file; a\n\
            refused update keeps the last good list.",
    usage: "nodeagent [OPTIONS]\n       nodeagent cluster-step [OPTIONS]   (the nodeagent binary: the handed-over cluster step, see its --help)",
    opts: &[
        CONFIG,
        TPM,
        EVENT_LOG,
        VERIFY_LISTEN,
        VERIFY_WORKERS,
        VERIFY_PER_CLIENT,
        VPN_CIDR,
        VPN_FILE,
        VPN_CONTROL_PLANE,
        VPN_POLL_INTERVAL,
        VPN_INTERFACE,
        VPN_PEERS_FILE,
        JOINSVC_MEASUREMENTS,
        JOINSVC_AK_TRUST,
        JOINSVC_VARIANTS,
        JOINSVC_SNP_POLICY,
        JOINSVC_TDX_POLICY,
        JOINSVC_AZURE_POLICY,
        JOINSVC_RELEASE_KEY,
        VERBOSITY,
    ],
};

/// Why the options cannot be used.
#[derive(Debug)]
pub enum ConfigError {
    /// A value out of its range: a usage error (exit 2).
    Usage(String),
    /// A configuration the agent cannot go on with (exit 1).
    Unusable(String),
    /// The `--joinsvc-*` options the VPN poller checks control planes
    /// with are not usable (exit 1).
    JoinServices(crate::options::JoinServiceOptionsError),
}

/// Everything the node agent runs with.
#[derive(Clone, Debug)]
pub struct Config {
    /// The node's TPM ([`confboot_tpm::Tpm::open`]'s syntax).
    pub tpm: String,
    /// The firmware event log sent with the evidence.
    pub event_log: EventLogSource,
    /// Address of the verify service.
    pub verify_listen: String,
    /// Verify requests served at once.
    pub verify_workers: usize,
    /// Connections one client address may hold at once.
    pub verify_per_client: usize,
    /// The VPN poller's configuration (`None`: no VPN).
    pub vpn: Option<VpnConfig>,
}

/// How the VPN poller runs (`--vpn-*`, `--joinsvc-*`).
#[derive(Clone, Debug)]
pub struct VpnConfig {
    /// The cluster's VPN range.
    pub network: VpnNetwork,
    /// The time between polls.
    pub poll_interval: Duration,
    /// The node's VPN file, as the bootstrapper wrote it.
    pub file: PathBuf,
    /// The control planes asked (empty: the VPN file's list).
    pub control_planes: Vec<String>,
    /// The node's WireGuard interface (`None`: only the peers file).
    pub interface: Option<String>,
    /// Where each applied peer list is written.
    pub peers_file: PathBuf,
    /// How the control planes are checked.
    pub join_services: AttestationSettings,
    /// The release keys whose signed sets a control plane may present
    /// instead of running this node's image.
    pub join_service_release_keys: Vec<PathBuf>,
}

impl Config {
    /// Reads every option (each once, whatever the others say) and checks
    /// it; the error names the option.
    pub fn from_matches(m: &Matches) -> Result<Config, ConfigError> {
        let tpm = m.value(&TPM).expect("has a default").to_string();
        let event_log = EventLogSource::new(m.value(&EVENT_LOG), Tpm::is_device_spec(&tpm));
        let verify_listen = m.value(&VERIFY_LISTEN).expect("has a default").to_string();
        let verify_workers = m.value(&VERIFY_WORKERS).expect("has a default");
        let verify_per_client = m.value(&VERIFY_PER_CLIENT).expect("has a default");
        let vpn_cidr = m.value(&VPN_CIDR);
        let vpn_poll_interval = m.parsed::<u64>(&VPN_POLL_INTERVAL);
        let vpn_file = m.value(&VPN_FILE).expect("has a default");
        let vpn_control_planes = m.values(&VPN_CONTROL_PLANE);
        let vpn_interface = m.value(&VPN_INTERFACE).expect("has a default");
        let vpn_peers_file = m.value(&VPN_PEERS_FILE).expect("has a default");
        let join_services = JoinServiceOptions::read(m);

        let verify_workers = count(&VERIFY_WORKERS, verify_workers)?;
        let verify_per_client = count(&VERIFY_PER_CLIENT, verify_per_client)?;
        // The VPN options are checked only when the VPN is on.
        let vpn = match vpn_cidr {
            None => None,
            Some(cidr) => {
                let unusable = ConfigError::Unusable;
                let network: VpnNetwork = cidr
                    .parse()
                    .map_err(|e| unusable(format!("--{}: {e}", VPN_CIDR.long)))?;
                let poll_interval = match vpn_poll_interval {
                    Ok(Some(s)) if (1..=3600).contains(&s) => Duration::from_secs(s),
                    _ => {
                        return Err(unusable(format!(
                            "--{}: want 1 to 3600 seconds",
                            VPN_POLL_INTERVAL.long
                        )));
                    }
                };
                let interface = match vpn_interface {
                    "none" => None,
                    name => {
                        check_interface_name(name)
                            .map_err(|e| unusable(format!("--{}: {e}", VPN_INTERFACE.long)))?;
                        Some(name.to_string())
                    }
                };
                Some(VpnConfig {
                    network,
                    poll_interval,
                    file: PathBuf::from(vpn_file),
                    control_planes: vpn_control_planes.into_iter().map(str::to_string).collect(),
                    interface,
                    peers_file: PathBuf::from(vpn_peers_file),
                    join_service_release_keys: join_services.release_keys(),
                    join_services: join_services
                        .settings()
                        .map_err(ConfigError::JoinServices)?,
                })
            }
        };
        Ok(Config {
            tpm,
            event_log,
            verify_listen,
            verify_workers,
            verify_per_client,
            vpn,
        })
    }
}

/// A count option: a whole number from 1 to 64.
fn count(opt: &Opt, value: &str) -> Result<usize, ConfigError> {
    match value.parse::<usize>() {
        Ok(n) if (1..=64).contains(&n) => Ok(n),
        _ => Err(ConfigError::Usage(format!(
            "--{} {value:?}: want a whole number from 1 to 64",
            opt.long
        ))),
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
    fn every_option_the_config_reads_is_declared() {
        // Config::from_matches reads every option whatever the others say:
        // one parse reads them all (an undeclared one panics).
        let c = config(&[]).unwrap();
        assert_eq!(c.tpm, "device");
        assert_eq!((c.verify_workers, c.verify_per_client), (4, 2));
        assert!(c.vpn.is_none());
    }

    #[test]
    fn the_event_log_is_the_kernel_s_only_with_the_tpm_device() {
        let source = |args: &[&str]| config(args).unwrap().event_log;
        assert_eq!(source(&[]), EventLogSource::Firmware);
        assert_eq!(source(&["--tpm", "/dev/tpmrm0"]), EventLogSource::Firmware);
        assert_eq!(source(&["--tpm", "127.0.0.1:2321"]), EventLogSource::None);
        assert_eq!(source(&["--event-log", "none"]), EventLogSource::None);
        assert_eq!(
            source(&["--tpm", "127.0.0.1:2321", "--event-log", "log.bin"]),
            EventLogSource::File("log.bin".into())
        );
    }

    #[test]
    fn options_are_checked_with_errors_that_name_them() {
        assert!(matches!(
            config(&["--verify-workers", "0"]),
            Err(ConfigError::Usage(e)) if e == "--verify-workers \"0\": want a whole number from 1 to 64"
        ));
        // Without --vpn-cidr the VPN options are not looked at.
        assert!(config(&["--vpn-poll-interval", "0"]).is_ok());
        let vpn = |extra: &[&str]| {
            let mut args = vec!["--vpn-cidr", "10.118.0.0/16"];
            args.extend_from_slice(extra);
            config(&args)
        };
        let c = vpn(&[]).unwrap().vpn.unwrap();
        assert_eq!(c.poll_interval, Duration::from_secs(10));
        assert_eq!(c.interface.as_deref(), Some("wg0"));
        assert!(c.control_planes.is_empty());
        assert_eq!(
            vpn(&["--vpn-interface", "none"])
                .unwrap()
                .vpn
                .unwrap()
                .interface,
            None
        );
        assert!(matches!(
            vpn(&["--vpn-poll-interval", "0"]),
            Err(ConfigError::Unusable(e)) if e == "--vpn-poll-interval: want 1 to 3600 seconds"
        ));
        assert!(matches!(
            vpn(&["--vpn-interface", "a/b"]),
            Err(ConfigError::Unusable(e)) if e.starts_with("--vpn-interface: ")
        ));
        assert!(matches!(
            config(&["--vpn-cidr", "nope"]),
            Err(ConfigError::Unusable(e)) if e.starts_with("--vpn-cidr: ")
        ));
        assert!(matches!(
            vpn(&["--joinsvc-variants", "sgx"]),
            Err(ConfigError::JoinServices(e)) if e.to_string().starts_with("--joinsvc-variants: ")
        ));
    }
}
