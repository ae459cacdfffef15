//! joinsvc's configuration: every option read once, at start-up, into a
//! typed [`Config`] (what to do, and with what) whose errors name the
//! option; then [`Service::load`] reads the files it names, opens the TPM
//! and makes the Kubernetes API client.

use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use confboot_appraisal::reference::history::{HistoryError, SetHistory};
use confboot_appraisal::reference::sets::{ReferenceSets, SetsError};
use confboot_appraisal::reference::{ReferenceError, ReleaseKey, cose};
use confboot_atls::message::MAX_REFERENCE_VALUES_LEN;
use confboot_attest::{AttestationError, Issuer, MeasurementPolicy, Validator, Variant};
use confboot_cluster::kubelet_cert::{KubeletCertError, KubeletCertSigner};
use confboot_kms::MasterSecret;
use confboot_kms::master_secret_file::MasterSecretFileError;
use confboot_kms::{MEASUREMENT_SALT_LEN, MeasurementSalt};
use confboot_net::listener::PoolConfig;
use confboot_snp::{SnpPolicy, SnpValidator};
use confboot_tpm::{Tpm, TpmError};
use confboot_util::args::{ArgsError, Matches, Opt};
use confboot_util::floor::{FloorError, TimeFloor};
use confboot_util::fs::{FileError, MAX_CONFIG_FILE_BYTES, read_bounded, read_bounded_text};
use confboot_verifier::config::{
    AttestationSettings, ConfigError, GivenSettings, INSECURE_ANY_AK_WARNING, InsecureAnyAk,
    Setting, SnpSettings, ValidatorBuilder, VariantConfig, VariantSettings, VtpmSettings,
    parse_attestation_variant, parse_variants,
};
use confboot_vtpm::{EventLogSource, VtpmIssuer};
use std::os::unix::fs::DirBuilderExt;
use zeroize::Zeroizing;

use crate::kube_api::{KubeApi, KubeApiError, Namespace};
use crate::options::{
    AK_TRUST, API_SERVER_ENDPOINT, ATTEST_AS, AZURE_POLICY, EVENT_LOG, EXPECTED_EVENTS,
    HEALTH_LISTEN, INSECURE_ANY_AK_CONFIRMATION, KUBE_API, KUBE_API_CA, KUBE_API_TOKEN_FILE,
    KUBE_NAMESPACE, KUBELET_CERT_VALIDITY, KUBERNETES_CA, KUBERNETES_VERSION, LISTEN,
    MASTER_SECRET, MEASUREMENT_SALT, MEASUREMENTS, PENDING, PKI_DIR, PRESENT_REFERENCE_VALUES,
    QUEUE, REFERENCE_VALUES_DIR, REFERENCE_VALUES_RELOAD, REFERENCE_VALUES_WARNING, RELEASE_KEY,
    REMOVE_VPN_PEER, SNP_POLICY, STATE_DIR, TDX_POLICY, TPM, VARIANTS, VPN_CIDR, WORKERS,
};
use crate::ticket::{CaCertError, TicketConfig, discovery_token_ca_cert_hash};
use crate::token::{KubeApiTokenIssuer, TokenError, TokenIssuer};
use crate::vpn::{KubeApiPeerRegistry, RegistryError};
use confboot_util::hex::HexError;
use confboot_vpn::{VpnError, VpnNetwork};

/// Timeout of each Kubernetes API request.
const KUBE_API_TIMEOUT: Duration = Duration::from_secs(10);

/// What joinsvc was asked to do.
#[derive(Clone, Debug)]
pub enum Config {
    /// Serve the join API.
    Serve(Box<ServeConfig>),
    /// `--remove-vpn-peer NAME`: remove a node from the VPN peer registry
    /// and exit.
    RemoveVpnPeer(RemoveVpnPeerConfig),
}

/// What the join API is served with (nothing read yet).
#[derive(Clone, Debug)]
pub struct ServeConfig {
    /// Address of the join API.
    pub listen: String,
    /// Address of the HTTP health and metrics endpoints.
    pub health_listen: String,
    /// The master-secret file.
    pub master_secret: PathBuf,
    /// The cluster's measurement salt.
    pub measurement_salt: MeasurementSalt,
    /// How joining nodes are checked.
    pub attestation: AttestationSettings,
    /// The signed reference-value sets of vTPM nodes, in place of the
    /// measurement-policy file (`--reference-values-dir`).
    pub reference_sets: Option<ReferenceSetsConfig>,
    /// joinsvc's own TPM, with `--tpm` (`None`: joinsvc does not attest).
    pub tpm: Option<OwnTpm>,
    /// Where joinsvc keeps its durable state (`--state-dir`): the ledger's
    /// anchor ([`crate::ledger::ANCHOR_FILE`]), the time floor the
    /// reference sets and the TDX collateral are checked by
    /// ([`TIME_FLOOR_FILE`]), and with reference sets their history.
    pub state_dir: PathBuf,
    /// The signed set of joinsvc's own image, presented with its evidence
    /// (`--present-reference-values`; needs `--tpm`).
    pub present_reference_values: Option<PathBuf>,
    /// The cluster CA certificate.
    pub kubernetes_ca: PathBuf,
    /// The Kubernetes PKI directory.
    pub pki_dir: PathBuf,
    /// How long a signed kubelet certificate is valid, in days (1 to 3650).
    pub kubelet_cert_validity_days: u64,
    /// The Kubernetes API client.
    pub kube_api: KubeApiConfig,
    /// The cluster's VPN range (`None`: no VPN).
    pub vpn_network: Option<VpnNetwork>,
    /// The Kubernetes API server nodes join.
    pub api_server_endpoint: String,
    /// The Kubernetes version nodes install.
    pub kubernetes_version: String,
    /// Connections served at once.
    pub workers: usize,
    /// Accepted connections that may wait for a worker.
    pub queue: usize,
    /// Connections that may wait for their ClientHello (at least 1).
    pub pending: usize,
}

/// Where the signed reference-value sets of vTPM nodes are, and how they
/// are read (nothing read yet).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReferenceSetsConfig {
    /// The directory of signed sets.
    pub dir: PathBuf,
    /// The release-key files (at least one).
    pub release_keys: Vec<PathBuf>,
    /// How close to a set's not-after its nodes are admitted with a
    /// warning.
    pub warning: Duration,
    /// How often the directory is read again.
    pub reload: Duration,
    /// Where the history of retired sets and the time floor are kept
    /// (`--state-dir`).
    pub state_dir: PathBuf,
}

/// joinsvc's own TPM (`--tpm`, `--event-log`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OwnTpm {
    /// The TPM ([`Tpm::open`]'s syntax).
    pub spec: String,
    /// The firmware event log sent with the evidence.
    pub event_log: EventLogSource,
    /// How joinsvc attests with it (`--attest-as`): `qemu-vtpm` or
    /// `azure-sev-snp`.
    pub variant: Variant,
}

/// How the Kubernetes API is reached.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KubeApiConfig {
    /// `--kube-api` with its CA and token files (`None`: the in-cluster
    /// service account).
    pub endpoint: Option<KubeApiEndpoint>,
    /// Connections kept open: one per worker that may call at once.
    pub connections: usize,
    /// Where the registry's and the ledger's ConfigMaps are
    /// (`--kube-namespace`, default kube-system); bootstrap-token Secrets
    /// are always in kube-system.
    pub namespace: Namespace,
}

/// An explicit Kubernetes API.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KubeApiEndpoint {
    /// Its URL.
    pub url: String,
    /// The CA bundle file.
    pub ca: PathBuf,
    /// The bearer token file.
    pub token_file: PathBuf,
}

/// What `--remove-vpn-peer` needs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RemoveVpnPeerConfig {
    /// The node to remove.
    pub name: String,
    /// The Kubernetes API the registry is in.
    pub kube_api: KubeApiConfig,
    /// The cluster's VPN range (`None`: not given, an error).
    pub vpn_network: Option<VpnNetwork>,
}

/// Why the options cannot be used, under the mode the options ask for.
#[derive(Debug)]
pub enum OptionsError {
    /// Options of the join API (joinsvc exits 2, a usage error).
    Serve(ReadError),
    /// Options of `--remove-vpn-peer` (which exits 2 on every error).
    RemoveVpnPeer(ReadError),
}

/// Why an option cannot be used; the message names it.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    /// An option is missing or its value is not of its type.
    #[error(transparent)]
    Args(#[from] ArgsError),
    /// `--vpn-cidr` is not a VPN range.
    #[error("--{option}: {0}", option = VPN_CIDR.long)]
    VpnCidr(VpnError),
    /// `--measurement-salt` is not hex.
    #[error("--{option}: {0}", option = MEASUREMENT_SALT.long)]
    SaltNotHex(HexError),
    /// `--measurement-salt` is shorter than its least length.
    #[error("--{option} must be at least {least} bytes", option = MEASUREMENT_SALT.long, least = MEASUREMENT_SALT_LEN.start())]
    SaltTooShort,
    /// `--measurement-salt` is longer than its most length.
    #[error("--{option} must be at most {most} bytes", option = MEASUREMENT_SALT.long, most = MEASUREMENT_SALT_LEN.end())]
    SaltTooLong,
    /// The attestation options are not usable.
    #[error("{}", describe(.0))]
    Attestation(ConfigError),
    /// `--release-key` without `--reference-values-dir`.
    #[error("--{} is given without --{}", RELEASE_KEY.long, REFERENCE_VALUES_DIR.long)]
    ReleaseKeyWithoutSets,
    /// `--reference-values-dir` beside `--measurements`.
    #[error("--{} replaces --{}: give one of the two", REFERENCE_VALUES_DIR.long, MEASUREMENTS.long)]
    SetsBesideMeasurements,
    /// `--reference-values-dir` while neither `qemu-vtpm` nor `sev-snp`
    /// is accepted.
    #[error("--{} holds reference values of qemu-vtpm and sev-snp nodes, neither of which --{} accepts", REFERENCE_VALUES_DIR.long, VARIANTS.long)]
    SetsWithoutTheirVariants,
    /// `--reference-values-dir` without a release key.
    #[error("--{} needs --{} (sets are accepted only signed)", REFERENCE_VALUES_DIR.long, RELEASE_KEY.long)]
    SetsWithoutReleaseKey,
    /// `--reference-values-warning` out of its range.
    #[error("--{}: want 0 to 3650 days", REFERENCE_VALUES_WARNING.long)]
    SetsWarning,
    /// `--reference-values-reload` out of its range.
    #[error("--{}: want 1 to 3600 seconds", REFERENCE_VALUES_RELOAD.long)]
    SetsReload,
    /// `--kubelet-cert-validity` out of its range.
    #[error("--{}: want 1 to 3650 days", KUBELET_CERT_VALIDITY.long)]
    KubeletCertValidity,
    /// `--present-reference-values` without `--tpm`.
    #[error("--{} needs --{} (the set goes with joinsvc's evidence)", PRESENT_REFERENCE_VALUES.long, TPM.long)]
    PresentWithoutTpm,
}

impl Config {
    /// Reads every option (each once, whatever the others say) and checks
    /// what the mode needs; the error names the option.
    pub fn from_matches(m: &Matches) -> Result<Config, OptionsError> {
        let remove_vpn_peer = m.value(&REMOVE_VPN_PEER).map(str::to_string);
        let removing = remove_vpn_peer.is_some();
        Config::read(m, remove_vpn_peer).map_err(|e| match removing {
            true => OptionsError::RemoveVpnPeer(e),
            false => OptionsError::Serve(e),
        })
    }

    /// Reads the options but `--remove-vpn-peer` (given as `remove_vpn_peer`).
    fn read(m: &Matches, remove_vpn_peer: Option<String>) -> Result<Config, ReadError> {
        let given = |opt: &Opt| m.value(opt).map(str::to_string);
        let default = |opt: &Opt| m.value(opt).expect("has a default").to_string();
        let listen = default(&LISTEN);
        let health_listen = default(&HEALTH_LISTEN);
        let master_secret = m.required(&MASTER_SECRET).map(PathBuf::from);
        let measurement_salt = m.required(&MEASUREMENT_SALT).map(str::to_string);
        let variants = default(&VARIANTS);
        let reference_values_dir = m.value(&REFERENCE_VALUES_DIR).map(PathBuf::from);
        let release_keys: Vec<PathBuf> = m
            .values(&RELEASE_KEY)
            .into_iter()
            .map(PathBuf::from)
            .collect();
        let reference_values_warning = m.parsed::<u64>(&REFERENCE_VALUES_WARNING);
        let reference_values_reload = m.parsed::<u64>(&REFERENCE_VALUES_RELOAD);
        let state_dir = PathBuf::from(default(&STATE_DIR));
        let attestation = GivenSettings {
            measurements: m.value(&MEASUREMENTS).map(PathBuf::from),
            // The sets take the policy file's place.
            measurements_required: reference_values_dir.is_none(),
            ak_trust: given(&AK_TRUST),
            // joinsvc hands out disk keys: insecure-any-ak needs its
            // confirmation.
            insecure_any_ak: if m.flag(&INSECURE_ANY_AK_CONFIRMATION) {
                InsecureAnyAk::Accepted
            } else {
                InsecureAnyAk::Unconfirmed
            },
            expected_events: m.value(&EXPECTED_EVENTS).map(PathBuf::from),
            snp_policy: m.value(&SNP_POLICY).map(PathBuf::from),
            tdx_policy: m.value(&TDX_POLICY).map(PathBuf::from),
            azure_policy: m.value(&AZURE_POLICY).map(PathBuf::from),
        };
        let tpm = given(&TPM);
        let present_reference_values = m.value(&PRESENT_REFERENCE_VALUES).map(PathBuf::from);
        let event_log = given(&EVENT_LOG);
        let kubernetes_ca = PathBuf::from(default(&KUBERNETES_CA));
        let pki_dir = PathBuf::from(default(&PKI_DIR));
        let kubelet_cert_validity = m.parsed::<u64>(&KUBELET_CERT_VALIDITY);
        let kube_api = given(&KUBE_API);
        let namespace = m.parsed::<Namespace>(&KUBE_NAMESPACE);
        let kube_api_ca = m.required(&KUBE_API_CA).map(PathBuf::from);
        let kube_api_token_file = m.required(&KUBE_API_TOKEN_FILE).map(PathBuf::from);
        let vpn_cidr = given(&VPN_CIDR);
        let workers = number(m, &WORKERS);
        let queue = number(m, &QUEUE);
        let pending = number(m, &PENDING);
        let api_server_endpoint = m.required(&API_SERVER_ENDPOINT).map(str::to_string);
        let kubernetes_version = default(&KUBERNETES_VERSION);

        // The Kubernetes API is reached by both modes, with a connection
        // for each worker.
        let kube_api = KubeApiConfig {
            connections: workers.clone()?,
            namespace: namespace?.unwrap_or_default(),
            endpoint: match kube_api {
                None => None,
                Some(url) => Some(KubeApiEndpoint {
                    url,
                    ca: kube_api_ca?,
                    token_file: kube_api_token_file?,
                }),
            },
        };
        let vpn_network = |cidr: Option<String>| {
            cidr.map(|cidr| cidr.parse().map_err(ReadError::VpnCidr))
                .transpose()
        };
        if let Some(name) = remove_vpn_peer {
            return Ok(Config::RemoveVpnPeer(RemoveVpnPeerConfig {
                name,
                kube_api,
                vpn_network: vpn_network(vpn_cidr)?,
            }));
        }

        let master_secret = master_secret?;
        let measurement_salt =
            confboot_util::hex::decode(&measurement_salt?).map_err(ReadError::SaltNotHex)?;
        let measurement_salt = MeasurementSalt::new(measurement_salt).map_err(|e| {
            if e.len < *MEASUREMENT_SALT_LEN.start() {
                ReadError::SaltTooShort
            } else {
                ReadError::SaltTooLong
            }
        })?;
        let variants = parse_variants(&variants)
            .map_err(|e| ReadError::Attestation(ConfigError::Variants(e)))?;
        let given_measurements = attestation.measurements.is_some();
        let attestation =
            AttestationSettings::new(variants, attestation).map_err(ReadError::Attestation)?;
        let ledger_state_dir = state_dir.clone();
        let reference_sets = reference_sets_config(
            reference_values_dir,
            release_keys,
            given_measurements,
            attestation.accepts(Variant::QemuVtpm) || attestation.accepts(Variant::SevSnp),
            reference_values_warning?,
            reference_values_reload?,
            state_dir,
        )?;
        let kubelet_cert_validity_days = match kubelet_cert_validity? {
            Some(days @ 1..=3650) => days,
            _ => return Err(ReadError::KubeletCertValidity),
        };
        let vpn_network = vpn_network(vpn_cidr)?;
        if present_reference_values.is_some() && tpm.is_none() {
            return Err(ReadError::PresentWithoutTpm);
        }
        let attest_as = own_variant(&default(&ATTEST_AS))?;
        Ok(Config::Serve(Box::new(ServeConfig {
            listen,
            health_listen,
            master_secret,
            measurement_salt,
            attestation,
            reference_sets,
            present_reference_values,
            state_dir: ledger_state_dir,
            tpm: tpm.map(|spec| OwnTpm {
                event_log: EventLogSource::new(event_log.as_deref(), Tpm::is_device_spec(&spec)),
                spec,
                variant: attest_as,
            }),
            kubernetes_ca,
            pki_dir,
            kubelet_cert_validity_days,
            kube_api,
            vpn_network,
            workers: workers?,
            queue: queue?,
            pending: pending?.max(1),
            api_server_endpoint: api_server_endpoint?,
            kubernetes_version,
        })))
    }
}

/// The reference-value sets' configuration, when `--reference-values-dir`
/// is given: with at least one release key, for the `qemu-vtpm` variant,
/// and in place of `--measurements` (not beside it: one source of truth).
fn reference_sets_config(
    dir: Option<PathBuf>,
    release_keys: Vec<PathBuf>,
    given_measurements: bool,
    accepts_set_variant: bool,
    warning_days: Option<u64>,
    reload_seconds: Option<u64>,
    state_dir: PathBuf,
) -> Result<Option<ReferenceSetsConfig>, ReadError> {
    let Some(dir) = dir else {
        if !release_keys.is_empty() {
            return Err(ReadError::ReleaseKeyWithoutSets);
        }
        return Ok(None);
    };
    if given_measurements {
        return Err(ReadError::SetsBesideMeasurements);
    }
    if !accepts_set_variant {
        return Err(ReadError::SetsWithoutTheirVariants);
    }
    if release_keys.is_empty() {
        return Err(ReadError::SetsWithoutReleaseKey);
    }
    let warning = match warning_days {
        Some(days @ 0..=3650) => Duration::from_secs(days * 24 * 3600),
        _ => return Err(ReadError::SetsWarning),
    };
    let reload = match reload_seconds {
        Some(seconds @ 1..=3600) => Duration::from_secs(seconds),
        _ => return Err(ReadError::SetsReload),
    };
    Ok(Some(ReferenceSetsConfig {
        dir,
        release_keys,
        warning,
        reload,
        state_dir,
    }))
}

/// A count option (each has a default).
fn number(m: &Matches, opt: &Opt) -> Result<usize, ArgsError> {
    m.parsed::<usize>(opt)?
        .ok_or_else(|| ArgsError::Required(opt.long.into()))
}

/// `--attest-as`: how joinsvc attests itself with its TPM.
fn own_variant(text: &str) -> Result<Variant, ReadError> {
    match parse_attestation_variant(text) {
        Ok(v @ (Variant::QemuVtpm | Variant::AzureSevSnp)) => Ok(v),
        Ok(other) => Err(ReadError::Args(ArgsError::Invalid {
            option: ATTEST_AS.long.into(),
            value: other.name().into(),
            reason: "joinsvc attests with its TPM: qemu-vtpm or azure-sev-snp".into(),
        })),
        Err(e) => Err(ReadError::Attestation(ConfigError::Variants(e))),
    }
}

/// The option that gives a setting of joining nodes' attestation.
fn option(setting: Setting) -> &'static Opt {
    match setting {
        Setting::Variants => &VARIANTS,
        Setting::Measurements => &MEASUREMENTS,
        Setting::AkTrust => &AK_TRUST,
        Setting::InsecureAnyAkConfirmation => &INSECURE_ANY_AK_CONFIRMATION,
        Setting::ExpectedEvents => &EXPECTED_EVENTS,
        Setting::SnpPolicy => &SNP_POLICY,
        Setting::TdxPolicy => &TDX_POLICY,
        Setting::AzurePolicy => &AZURE_POLICY,
    }
}

/// An attestation error, naming the option it is about.
pub fn describe(e: &ConfigError) -> String {
    match e {
        ConfigError::Missing(setting) => {
            ArgsError::Required(option(*setting).long.into()).to_string()
        }
        other => other.describe(&|setting| format!("--{}", option(setting).long)),
    }
}

/// The announcement of a validator built with `insecure-any-ak`.
fn announce_insecure_any_ak() {
    log::warn!("--{} {INSECURE_ANY_AK_WARNING}", AK_TRUST.long);
}

/// How vTPM nodes are checked (when `qemu-vtpm` is accepted).
pub struct VtpmCheck {
    /// The measurement-policy file (watched for changes).
    pub policy_path: PathBuf,
    /// The policy read at start-up.
    pub initial_policy: MeasurementPolicy,
    /// Builds the validator of joining nodes for each policy in force
    /// (PCR 15 may be marked: it is checked per call).
    pub validators: ValidatorBuilder,
}

/// How vTPM nodes are checked against signed reference-value sets.
pub struct VtpmSetsCheck {
    /// The sets, read at start-up (at least one live) and read again by
    /// the sets watcher.
    pub sets: Arc<RwLock<ReferenceSets>>,
    /// What the validator of joining nodes is built from (the evidence is
    /// checked by it; the PCRs against the sets).
    pub validators: ValidatorBuilder,
    /// How close to a set's not-after its nodes get a warning.
    pub warning: Duration,
    /// How often the directory is read again.
    pub reload: Duration,
    /// The time floor the sets are read and checked by.
    pub floor: Arc<TimeFloor>,
}

/// How SEV-SNP nodes are checked against signed reference-value sets.
pub struct SnpSetsCheck {
    /// The sets' `sev-snp` parts (each one launch digest), read at
    /// start-up (at least one live) and read again by the sets watcher.
    pub sets: Arc<RwLock<ReferenceSets>>,
    /// The validator of the report (chain, signature, binding, the
    /// platform's checks of `--snp-policy`), which leaves the launch
    /// measurement to the sets.
    pub evidence: Arc<dyn Validator>,
    /// How close to a set's not-after its nodes get a warning.
    pub warning: Duration,
    /// How often the directory is read again.
    pub reload: Duration,
    /// The time floor the sets are read and checked by.
    pub floor: Arc<TimeFloor>,
}

/// How joining nodes are checked: one entry per accepted variant, in the
/// order `--variants` names them.
pub enum NodeCheck {
    /// A vTPM quote, under the watched measurement policy.
    Vtpm(VtpmCheck),
    /// A vTPM quote, under the live signed reference-value sets.
    VtpmSets(VtpmSetsCheck),
    /// An SEV-SNP report, its launch under the live signed sets.
    SnpSets(SnpSetsCheck),
    /// An SEV-SNP report or a TDX quote, under the policy (and, for TDX,
    /// the collateral files) read at start-up.
    Fixed(Arc<dyn Validator>),
}

/// Everything joinsvc serves with: the files read, its TPM opened, the
/// Kubernetes API client made.
pub struct Service {
    /// The join API's worker pool.
    pub pool: PoolConfig,
    /// How joining nodes are checked, per accepted variant.
    pub checks: Vec<NodeCheck>,
    /// joinsvc's own attestation, with `--tpm`.
    pub issuer: Option<Arc<dyn Issuer>>,
    /// The signed set presented with joinsvc's evidence.
    pub presented_set: Option<Vec<u8>>,
    /// What tickets are made from.
    pub ticket_config: TicketConfig,
    /// Where bootstrap tokens come from.
    pub token_issuer: Arc<dyn TokenIssuer>,
}

/// Descriptors joinsvc keeps beside its connections' (listeners, the
/// policy watcher, the TPM, the Kubernetes API, logs), with room to spare.
const OTHER_DESCRIPTORS: u64 = 64;

/// Why what the options name cannot be read or opened (joinsvc exits 1);
/// the message names the option or the file.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// A file an option names cannot be read.
    #[error("--{option}: {error}")]
    File {
        /// The option.
        option: &'static str,
        /// Why.
        error: FileError,
    },
    /// The `--master-secret` file is not a master secret.
    #[error("--{option}: {0}", option = MASTER_SECRET.long)]
    MasterSecret(MasterSecretFileError),
    /// An accepted variant's settings or files are not usable.
    #[error("{}", describe(.0))]
    Attestation(ConfigError),
    /// The `--tpm` cannot be opened or its attestation key used.
    #[error("--{option} {spec}: {error}", option = TPM.long)]
    Tpm {
        /// The `--tpm` value.
        spec: String,
        /// Why.
        error: TpmOpenError,
    },
    /// The `--event-log` is not usable.
    #[error("--{option}: {0}", option = EVENT_LOG.long)]
    EventLog(AttestationError),
    /// A file the reference-value options name is not a signed set or key.
    #[error("--{option} {}: {error}", path.display())]
    Reference {
        /// The option.
        option: &'static str,
        /// The file.
        path: PathBuf,
        /// Why.
        error: ReferenceError,
    },
    /// The `--reference-values-dir` cannot be read or holds no live set.
    #[error("--{option}: {0}", option = REFERENCE_VALUES_DIR.long)]
    Sets(SetsError),
    /// The `--state-dir` cannot be created.
    #[error("--{option} {}: {error}", path.display(), option = STATE_DIR.long)]
    StateDir {
        /// The directory.
        path: PathBuf,
        /// Why.
        error: std::io::Error,
    },
    /// The history of retired sets in `--state-dir` does not read.
    #[error("--{option}: {0}", option = STATE_DIR.long)]
    History(HistoryError),
    /// The time floor in `--state-dir` does not read.
    #[error("--{option}: {0}", option = STATE_DIR.long)]
    TimeFloor(FloorError),
    /// The ledger's anchor in `--state-dir` does not read.
    #[error("--{option}: {0}", option = STATE_DIR.long)]
    LedgerAnchor(crate::ledger::AnchorError),
    /// The `--kubernetes-ca` gives no kubeadm CA pin.
    #[error("--{option} {}: {error}", path.display(), option = KUBERNETES_CA.long)]
    CaCert {
        /// The file.
        path: PathBuf,
        /// Why.
        error: CaCertError,
    },
    /// The `--kubernetes-ca` is not PEM text.
    #[error("--kubernetes-ca {}: not PEM", .0.display())]
    CaNotPem(PathBuf),
    /// The kubelet certificate signer cannot be made from the CA and its key.
    #[error("{} with {}: {error}", ca.display(), key.display())]
    KubeletSigner {
        /// The CA certificate file.
        ca: PathBuf,
        /// The CA key file.
        key: PathBuf,
        /// Why.
        error: KubeletCertError,
    },
    /// The Kubernetes API client cannot be made.
    #[error("{0}")]
    KubeApi(KubeApiError),
    /// The VPN peer registry cannot be made.
    #[error("{0}")]
    Registry(RegistryError),
    /// The bootstrap token issuer cannot be made.
    #[error("{0}")]
    TokenIssuer(TokenError),
}

/// Why the `--tpm` did not give an issuer.
#[derive(Debug, thiserror::Error)]
pub enum TpmOpenError {
    /// The TPM did not open.
    #[error("{0}")]
    Open(TpmError),
    /// Its attestation key is not usable.
    #[error("{0}")]
    AttestationKey(AttestationError),
}

/// Reads a file an option names (at most [`MAX_CONFIG_FILE_BYTES`]).
fn read_file(option: &Opt, path: &Path) -> Result<Zeroizing<Vec<u8>>, LoadError> {
    read_bounded(path, MAX_CONFIG_FILE_BYTES).map_err(|error| LoadError::File {
        option: option.long,
        error,
    })
}

/// Reads a text file an option names (at most [`MAX_CONFIG_FILE_BYTES`]).
fn read_text_file(option: &Opt, path: &Path) -> Result<Zeroizing<String>, LoadError> {
    read_bounded_text(path, MAX_CONFIG_FILE_BYTES).map_err(|error| LoadError::File {
        option: option.long,
        error,
    })
}

/// Reads the master-secret file `--master-secret` names.
pub fn load_master_secret(path: &Path) -> Result<MasterSecret, LoadError> {
    MasterSecret::read_file(path).map_err(LoadError::MasterSecret)
}

/// An accepted variant on its way to its check: read from its files, or
/// (the vTPM variant with reference-value sets) its sets still to read.
#[expect(
    clippy::large_enum_variant,
    reason = "at most three, held only while the service starts"
)]
enum Pending<'a> {
    /// The vTPM settings and the sets that stand in for its policy file.
    Sets(&'a VtpmSettings, &'a ReferenceSetsConfig),
    /// The SNP policy file (the platform's checks only) and the sets that
    /// pin the launch.
    SnpSets(&'a SnpSettings, &'a ReferenceSetsConfig),
    /// A variant read from its files.
    Read(VariantConfig),
}

impl Service {
    /// Reads what `config` names, in the order its options are checked;
    /// the error names the option.
    pub fn load(config: &ServeConfig) -> Result<Service, LoadError> {
        let master_secret = load_master_secret(&config.master_secret)?;
        // With reference-value sets, the vTPM variant has no policy file:
        // the other variants are read first, as ever, the vTPM one then
        // from its sets.
        let pending = config
            .attestation
            .settings()
            .iter()
            .map(|variant| match (variant, &config.reference_sets) {
                (VariantSettings::QemuVtpm(vtpm), Some(sets)) => Ok(Pending::Sets(vtpm, sets)),
                (VariantSettings::SevSnp(snp), Some(sets)) => Ok(Pending::SnpSets(snp, sets)),
                (variant, _) => variant.load().map(Pending::Read),
            })
            .collect::<Result<Vec<_>, _>>()
            .map_err(LoadError::Attestation)?;
        // One floor, one home: the sets' windows and the TDX collateral
        // read the same latest time seen, kept across restarts.
        let floor = time_floor(&config.state_dir)?;
        let mut checks = Vec::new();
        for variant in pending {
            checks.push(match variant {
                Pending::Sets(settings, sets_config) => {
                    let validators = settings
                        .validator_builder()
                        .map_err(LoadError::Attestation)?
                        .require_unmarked(false)
                        .announce_insecure_with(announce_insecure_any_ak);
                    let sets = load_reference_sets(sets_config, Variant::QemuVtpm, &floor)?;
                    NodeCheck::VtpmSets(VtpmSetsCheck {
                        sets: Arc::new(RwLock::new(sets)),
                        floor: Arc::clone(&floor),
                        validators,
                        warning: sets_config.warning,
                        reload: sets_config.reload,
                    })
                }
                Pending::SnpSets(settings, sets_config) => {
                    let evidence = snp_platform_validator(&settings.policy)?;
                    let sets = load_reference_sets(sets_config, Variant::SevSnp, &floor)?;
                    NodeCheck::SnpSets(SnpSetsCheck {
                        sets: Arc::new(RwLock::new(sets)),
                        evidence,
                        floor: Arc::clone(&floor),
                        warning: sets_config.warning,
                        reload: sets_config.reload,
                    })
                }
                Pending::Read(VariantConfig::QemuVtpm(vtpm)) => NodeCheck::Vtpm(VtpmCheck {
                    policy_path: vtpm.policy_path,
                    initial_policy: vtpm.policy,
                    // PCR 15 is checked per call (crate::server::caller_check):
                    // zero for a join or rejoin, this cluster's mark for
                    // GetUpdate.
                    validators: vtpm
                        .validators
                        .require_unmarked(false)
                        .announce_insecure_with(announce_insecure_any_ak),
                }),
                Pending::Read(VariantConfig::SevSnp(snp)) => NodeCheck::Fixed(Arc::new(snp)),
                Pending::Read(VariantConfig::Tdx(tdx)) => {
                    NodeCheck::Fixed(Arc::new((*tdx).with_time_floor(Arc::clone(&floor))))
                }
                Pending::Read(VariantConfig::AzureSevSnp(azure)) => {
                    NodeCheck::Fixed(Arc::new(*azure))
                }
            });
        }
        let names: Vec<&str> = config
            .attestation
            .variants()
            .iter()
            .map(|v| v.name())
            .collect();
        log::info!("joining nodes may attest with: {}", names.join(", "));

        let issuer: Option<Arc<dyn Issuer>> = match &config.tpm {
            None => None,
            Some(own) => {
                let spec = own.spec.as_str();
                let tpm_error = |error| LoadError::Tpm {
                    spec: spec.to_string(),
                    error,
                };
                let tpm = Tpm::open(spec).map_err(|e| tpm_error(TpmOpenError::Open(e)))?;
                log::info!("attesting with the TPM at {}", tpm.describe());
                // joinsvc quotes on every handshake for as long as it runs:
                // a TPM that restarts under it (its connection broken, a
                // transient AK gone) is reconnected to on the next quote.
                let reopen_spec = spec.to_string();
                if own.variant == Variant::AzureSevSnp {
                    log::info!("attesting as azure-sev-snp (the paravisor's HCL report)");
                    Some(
                        Arc::new(confboot_azure::AzureIssuer::new(std::sync::Mutex::new(tpm)))
                            as Arc<dyn Issuer>,
                    )
                } else {
                    Some(Arc::new(
                        VtpmIssuer::new(tpm)
                            .map_err(|e| tpm_error(TpmOpenError::AttestationKey(e)))?
                            .with_event_log_from(&own.event_log)
                            .map_err(LoadError::EventLog)?
                            .reconnecting(Box::new(move || Tpm::open(&reopen_spec))),
                    ))
                }
            }
        };

        let presented_set = match &config.present_reference_values {
            None => None,
            Some(path) => Some(load_presented_set(path, config.reference_sets.as_ref())?),
        };

        let ca_path = config.kubernetes_ca.as_path();
        let ca = read_file(&KUBERNETES_CA, ca_path)?;
        let discovery_token_ca_cert_hash =
            discovery_token_ca_cert_hash(&ca).map_err(|error| LoadError::CaCert {
                path: ca_path.to_path_buf(),
                error,
            })?;
        let kubelet_cert_signer = kubelet_cert_signer(
            &ca,
            ca_path,
            &config.pki_dir,
            config.kubelet_cert_validity_days,
        )?;

        let kube_api = kube_api(&config.kube_api)?;
        let registry = match config.vpn_network {
            Some(network) => KubeApiPeerRegistry::new(kube_api.clone(), network),
            None => KubeApiPeerRegistry::without_vpn(kube_api.clone()),
        }
        .and_then(|r| r.in_namespace(config.kube_api.namespace.as_str()))
        .map_err(LoadError::Registry)?;
        let registry = Arc::new(registry.with_anchor(ledger_anchor(&config.state_dir)?));
        let token_issuer: Arc<dyn TokenIssuer> = Arc::new(
            KubeApiTokenIssuer::new(kube_api)
                .map_err(LoadError::TokenIssuer)?
                .labelled_for(&config.kube_api.namespace),
        );

        let mut pool = PoolConfig {
            workers: config.workers,
            queue: config.queue,
            gate: Some(confboot_atls::client_hello_gate(
                config.pending,
                confboot_atls::DEFAULT_GATE_TIMEOUT,
            )),
            ..PoolConfig::default()
        };
        // Each worker may hold a connection to the API server as well.
        let others = OTHER_DESCRIPTORS + pool.workers as u64;
        confboot_net::listener::fit_descriptors(&mut pool, others);
        Ok(Service {
            pool,
            checks,
            issuer,
            presented_set,
            ticket_config: TicketConfig {
                master_secret,
                measurement_salt: config.measurement_salt.clone(),
                api_server_endpoint: config.api_server_endpoint.clone(),
                discovery_token_ca_cert_hash,
                kubernetes_version: config.kubernetes_version.clone(),
                pki_dir: config.pki_dir.clone(),
                kubelet_cert_signer,
                registry,
            },
            token_issuer,
        })
    }
}

/// The set `--present-reference-values` names: at most
/// [`MAX_REFERENCE_VALUES_LEN`] bytes, and, with `--release-key`, a set
/// they signed that is valid now (a node checks it again in any case).
fn load_presented_set(
    path: &Path,
    sets: Option<&ReferenceSetsConfig>,
) -> Result<Vec<u8>, LoadError> {
    let option = PRESENT_REFERENCE_VALUES.long;
    let bytes = read_bounded(path, MAX_REFERENCE_VALUES_LEN as u64)
        .map_err(|error| LoadError::File { option, error })?;
    if let Some(sets) = sets {
        let keys = read_release_keys(&sets.release_keys)?;
        let opened =
            confboot_appraisal::reference::open(&bytes, &keys, confboot_util::time::unix_now())
                .map_err(|error| LoadError::Reference {
                    option,
                    path: path.to_path_buf(),
                    error,
                })?;
        log::info!(
            "presenting reference-value set {} {} with joinsvc's evidence",
            opened.set.name,
            opened.set.version
        );
    }
    Ok(bytes.to_vec())
}

/// The `--release-key` files, read (bounded) and parsed.
fn read_release_keys(paths: &[PathBuf]) -> Result<Vec<ReleaseKey>, LoadError> {
    let mut keys = Vec::new();
    for path in paths {
        let pem = read_bounded(path, cose::MAX_KEY_PEM_BYTES as u64).map_err(|error| {
            LoadError::File {
                option: RELEASE_KEY.long,
                error,
            }
        })?;
        keys.push(
            ReleaseKey::from_pem(&pem).map_err(|error| LoadError::Reference {
                option: RELEASE_KEY.long,
                path: path.clone(),
                error,
            })?,
        );
    }
    Ok(keys)
}

/// The history of retired sets in `--state-dir`.
pub const HISTORY_FILE: &str = "reference-values-history.json";
/// The history of the sets' `sev-snp` parts in `--state-dir` (each
/// variant's sets are read, retired and remembered on their own).
pub const SNP_HISTORY_FILE: &str = "reference-values-history.sev-snp.json";
/// The time floor in `--state-dir`.
pub const TIME_FLOOR_FILE: &str = "time-floor";

/// The release keys, the history of `--state-dir` (created if missing; a
/// file there that does not read stops joinsvc: it fails closed) and the
/// first reading of the set directory as of `floor`: at least one live
/// set, or joinsvc does not start.
fn load_reference_sets(
    config: &ReferenceSetsConfig,
    variant: Variant,
    floor: &TimeFloor,
) -> Result<ReferenceSets, LoadError> {
    let keys = read_release_keys(&config.release_keys)?;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(&config.state_dir)
        .map_err(|error| LoadError::StateDir {
            path: config.state_dir.clone(),
            error,
        })?;
    let history_file = match variant {
        Variant::SevSnp => SNP_HISTORY_FILE,
        _ => HISTORY_FILE,
    };
    let history =
        SetHistory::load(&config.state_dir.join(history_file)).map_err(LoadError::History)?;
    let mut sets = ReferenceSets::new(&config.dir, variant, keys)
        .map_err(LoadError::Sets)?
        .with_history(history);
    let first = sets.refresh(floor.now()).map_err(LoadError::Sets)?;
    crate::watcher::log_refresh(&first);
    Ok(sets)
}

/// The validator of SEV-SNP reports whose launch the signed sets pin: the
/// platform's checks of the `--snp-policy` file
/// ([`SnpPolicy::load_platform`]: no measurement, no launch), the launch
/// measurement left to the sets.
fn snp_platform_validator(path: &Path) -> Result<Arc<dyn Validator>, LoadError> {
    let error = |error| {
        LoadError::Attestation(ConfigError::SnpPolicy {
            path: path.to_path_buf(),
            error,
        })
    };
    let policy = SnpPolicy::load_platform(path).map_err(error)?;
    Ok(Arc::new(SnpValidator::new(policy).map_err(error)?))
}

/// The time floor in `state_dir` (made 0700 when missing): the latest
/// time this joinsvc saw, across restarts. A file there that does not read
/// stops joinsvc.
fn time_floor(state_dir: &Path) -> Result<Arc<TimeFloor>, LoadError> {
    make_state_dir(state_dir)?;
    TimeFloor::load(&state_dir.join(TIME_FLOOR_FILE))
        .map(Arc::new)
        .map_err(LoadError::TimeFloor)
}

fn make_state_dir(state_dir: &Path) -> Result<(), LoadError> {
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(state_dir)
        .map_err(|error| LoadError::StateDir {
            path: state_dir.to_path_buf(),
            error,
        })
}

/// The Kubernetes API client: `--kube-api` with its CA and token files, or
/// the in-cluster service account; it keeps a connection open for each of
/// the `--workers` that may call it at once.
pub fn kube_api(config: &KubeApiConfig) -> Result<KubeApi, LoadError> {
    let connections = config.connections;
    match &config.endpoint {
        None => KubeApi::in_cluster(KUBE_API_TIMEOUT, connections).map_err(LoadError::KubeApi),
        Some(endpoint) => {
            let ca = read_text_file(&KUBE_API_CA, &endpoint.ca)?;
            let token = read_text_file(&KUBE_API_TOKEN_FILE, &endpoint.token_file)?;
            KubeApi::new(
                &endpoint.url,
                &ca,
                Zeroizing::new(token.trim().to_string()),
                KUBE_API_TIMEOUT,
                connections,
            )
            .map_err(LoadError::KubeApi)
        }
    }
}

/// The VPN peer registry of `--vpn-cidr`, if given, in `namespace`.
pub fn vpn_registry(
    network: Option<VpnNetwork>,
    kube_api: &KubeApi,
    namespace: &Namespace,
) -> Result<Option<Arc<KubeApiPeerRegistry>>, LoadError> {
    let Some(network) = network else {
        return Ok(None);
    };
    let registry = KubeApiPeerRegistry::new(kube_api.clone(), network)
        .and_then(|r| r.in_namespace(namespace.as_str()))
        .map_err(LoadError::Registry)?;
    Ok(Some(Arc::new(registry)))
}

/// The ledger's anchor in `state_dir` (made 0700 when missing): what this
/// joinsvc saw the ledger hold, across restarts. A file there that does
/// not read stops joinsvc.
fn ledger_anchor(state_dir: &Path) -> Result<Arc<crate::ledger::AnchorStore>, LoadError> {
    make_state_dir(state_dir)?;
    crate::ledger::AnchorStore::load(&state_dir.join(crate::ledger::ANCHOR_FILE))
        .map(Arc::new)
        .map_err(LoadError::LedgerAnchor)
}

/// The signer of kubelet certificates: the `--kubernetes-ca` certificate
/// and `ca.key` in the PKI directory. Without the key, joinsvc runs and
/// refuses the kubelet certificates nodes ask for (with a warning now).
fn kubelet_cert_signer(
    ca_cert: &[u8],
    ca_path: &Path,
    pki_dir: &Path,
    validity_days: u64,
) -> Result<Option<KubeletCertSigner>, LoadError> {
    let key_path = pki_dir.join("ca.key");
    let key = match read_bounded_text(&key_path, MAX_CONFIG_FILE_BYTES) {
        Ok(key) => key,
        Err(e) => {
            log::warn!(
                "kubelet certificates cannot be signed ({e}): joining nodes that ask for one are refused"
            );
            return Ok(None);
        }
    };
    let cert =
        std::str::from_utf8(ca_cert).map_err(|_| LoadError::CaNotPem(ca_path.to_path_buf()))?;
    let validity = std::time::Duration::from_secs(validity_days * 24 * 3600);
    KubeletCertSigner::new(cert, &key, validity)
        .map(Some)
        .map_err(|error| LoadError::KubeletSigner {
            ca: ca_path.to_path_buf(),
            key: key_path.clone(),
            error,
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use confboot_vtpm::AkTrust;

    use crate::options::CMD;

    /// The options joinsvc needs beside `args`.
    const NEEDED: [&str; 8] = [
        "--master-secret",
        "master-secret.json",
        "--measurement-salt",
        "5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a",
        "--measurements",
        "measurements.json",
        "--api-server-endpoint",
        "10.0.0.1:6443",
    ];

    fn config(args: &[&str]) -> Result<Config, String> {
        let m = CMD.parse(args.iter().map(|s| s.to_string())).unwrap();
        Config::from_matches(&m).map_err(|e| match e {
            OptionsError::Serve(e) => e.to_string(),
            OptionsError::RemoveVpnPeer(e) => format!("(remove) {e}"),
        })
    }

    fn serve_config(args: &[&str]) -> Result<ServeConfig, String> {
        let mut all = NEEDED.to_vec();
        all.extend_from_slice(args);
        match config(&all)? {
            Config::Serve(c) => Ok(*c),
            other => panic!("{other:?}"),
        }
    }

    /// `--ak-trust mode` read as joinsvc reads it.
    fn parse_ak_trust(mode: &str) -> Result<AkTrust, String> {
        ak_trust_from(&["--ak-trust", mode])
    }

    fn ak_trust_from(args: &[&str]) -> Result<AkTrust, String> {
        let config = serve_config(args)?;
        config
            .attestation
            .vtpm()
            .expect("qemu-vtpm is accepted")
            .validator_builder()
            .map(|b| b.ak_trust().clone())
            .map_err(|e| describe(&e))
    }

    #[test]
    fn every_option_the_config_reads_is_declared() {
        // Config::from_matches reads every option whatever the others say:
        // one parse reads them all (an undeclared one panics).
        let c = serve_config(&["--ak-trust", "insecure-any-ak"]).unwrap();
        assert_eq!(c.attestation.variants(), vec![Variant::QemuVtpm]);
        assert_eq!((c.workers, c.queue, c.pending), (16, 64, 1024));
        assert_eq!(c.kubelet_cert_validity_days, 365);
        assert_eq!(c.kube_api.endpoint, None);
        assert_eq!(c.kube_api.namespace.as_str(), "kube-system");
        assert!(c.tpm.is_none() && c.vpn_network.is_none());
        let c = serve_config(&["--ak-trust", "x", "--kube-namespace", "tenant-1"]).unwrap();
        assert_eq!(c.kube_api.namespace.as_str(), "tenant-1");
        let e = serve_config(&["--ak-trust", "x", "--kube-namespace", "../secrets"]).unwrap_err();
        assert!(
            e.contains("--kube-namespace") && e.contains("not a Kubernetes namespace name"),
            "{e}"
        );
        let remove = config(&["--remove-vpn-peer", "n", "--vpn-cidr", "10.118.0.0/16"]).unwrap();
        assert!(
            matches!(&remove, Config::RemoveVpnPeer(r) if r.name == "n" && r.vpn_network.is_some()),
            "{remove:?}"
        );
    }

    #[test]
    fn options_are_checked_in_order_with_errors_that_name_them() {
        assert_eq!(
            config(&[]).unwrap_err(),
            "option --master-secret is required"
        );
        let e = serve_config(&["--measurement-salt", "abcd", "--ak-trust", "x"]).unwrap_err();
        assert_eq!(e, "--measurement-salt must be at least 32 bytes");
        let e = serve_config(&["--kubelet-cert-validity", "0", "--ak-trust", "x"]).unwrap_err();
        assert_eq!(e, "--kubelet-cert-validity: want 1 to 3650 days");
        let e = serve_config(&[]).unwrap_err();
        assert_eq!(e, "option --ak-trust is required");
        let e = serve_config(&["--variants", "sgx"]).unwrap_err();
        assert!(e.starts_with("--variants: unknown variant"), "{e}");
        let e = serve_config(&["--variants", "sev-snp"]).unwrap_err();
        assert_eq!(
            e,
            "--variants accepts sev-snp, which needs --snp-policy (the SEV-SNP policy)"
        );
        let c = serve_config(&["--variants", "sev-snp", "--snp-policy", "snp.json"]).unwrap();
        assert_eq!(
            c.attestation.vtpm(),
            None,
            "the vTPM options are not needed"
        );
        let e = serve_config(&["--ak-trust", "x", "--kube-api", "https://k"]).unwrap_err();
        assert_eq!(e, "option --kube-api-ca is required");
        let e = config(&["--remove-vpn-peer", "n", "--vpn-cidr", "x"]).unwrap_err();
        assert!(e.starts_with("(remove) --vpn-cidr: "), "{e}");
    }

    #[test]
    fn reference_value_sets_replace_the_policy_file_and_need_a_release_key() {
        // Without --measurements: the sets take its place.
        let args = |extra: &[&str]| {
            let mut all: Vec<&str> = NEEDED
                .iter()
                .copied()
                .filter(|a| *a != "--measurements" && *a != "measurements.json")
                .collect();
            all.extend_from_slice(&["--ak-trust", "insecure-any-ak"]);
            all.extend_from_slice(extra);
            config(&all).map(|c| match c {
                Config::Serve(c) => *c,
                other => panic!("{other:?}"),
            })
        };
        let c = args(&["--reference-values-dir", "sets", "--release-key", "a.pem"]).unwrap();
        let sets = c.reference_sets.unwrap();
        assert_eq!(sets.release_keys, vec![PathBuf::from("a.pem")]);
        assert_eq!(sets.warning, Duration::from_secs(7 * 86_400));
        assert_eq!(sets.reload, Duration::from_secs(10));
        let c = args(&[
            "--reference-values-dir",
            "sets",
            "--release-key",
            "a.pem",
            "--release-key",
            "b.pem",
        ])
        .unwrap();
        assert_eq!(c.reference_sets.unwrap().release_keys.len(), 2);
        let e = args(&["--reference-values-dir", "sets"]).unwrap_err();
        assert_eq!(
            e,
            "--reference-values-dir needs --release-key (sets are accepted only signed)"
        );
        let e = args(&["--release-key", "a.pem"]).unwrap_err();
        assert_eq!(e, "option --measurements is required");
        let e = serve_config(&[
            "--ak-trust",
            "x",
            "--reference-values-dir",
            "sets",
            "--release-key",
            "a.pem",
        ])
        .unwrap_err();
        assert_eq!(
            e,
            "--reference-values-dir replaces --measurements: give one of the two"
        );
        let e = args(&[
            "--reference-values-dir",
            "sets",
            "--release-key",
            "a.pem",
            "--reference-values-reload",
            "0",
        ])
        .unwrap_err();
        assert_eq!(e, "--reference-values-reload: want 1 to 3600 seconds");
    }

    #[test]
    fn master_secret_file_in_constellation_format() {
        let dir = std::env::temp_dir().join(format!("confboot-ms-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let f = dir.join("ms.json");
        let key = confboot_util::base64::encode(&[1; 32]);
        let salt = confboot_util::base64::encode(&[2; 32]);
        std::fs::write(&f, format!(r#"{{"key": "{key}", "salt": "{salt}"}}"#)).unwrap();
        let m = load_master_secret(&f).unwrap();
        assert_eq!(m.key().expose(), &[1; 32]);
        for bad in [
            r#"{"key": "AAAA", "salt": "AAAA"}"#.to_string(),
            format!(r#"{{"key": "{key}"}}"#),
            "[".into(),
        ] {
            std::fs::write(&f, &bad).unwrap();
            let e = load_master_secret(&f).unwrap_err();
            assert!(matches!(e, LoadError::MasterSecret(_)), "{e:?}");
            let e = e.to_string();
            assert!(e.starts_with("--master-secret"), "{e}");
            assert!(!e.contains(&key), "an error must not echo the secret: {e}");
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn ak_trust_modes() {
        assert!(matches!(
            ak_trust_from(&[
                "--ak-trust",
                "insecure-any-ak",
                "--i-understand-insecure-any-ak"
            ]),
            Ok(AkTrust::InsecureAnyAk)
        ));
        // Without its confirmation, joinsvc refuses insecure-any-ak.
        let e = parse_ak_trust("insecure-any-ak").unwrap_err();
        assert!(
            e.starts_with("--ak-trust insecure-any-ak")
                && e.contains("--i-understand-insecure-any-ak"),
            "{e}"
        );
        let dir = std::env::temp_dir().join(format!("confboot-ak-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let f = dir.join("pinned");
        let (k1, k2) = (
            format!("04{}", "ab".repeat(64)),
            format!("04{}", "cd".repeat(64)),
        );
        std::fs::write(&f, format!("# node keys\n{k1}\n\n{k2}\n")).unwrap();
        match parse_ak_trust(&format!("pinned:{}", f.display())).unwrap() {
            AkTrust::Pinned(keys) => assert_eq!(keys.len(), 2),
            other => panic!("{other:?}"),
        }
        std::fs::write(&f, "# nothing\n").unwrap();
        assert!(parse_ak_trust(&format!("pinned:{}", f.display())).is_err());
        std::fs::write(&f, "04aabb\n").unwrap();
        assert!(
            parse_ak_trust(&format!("pinned:{}", f.display())).is_err(),
            "a short key is refused"
        );
        assert!(
            parse_ak_trust("trust-me")
                .unwrap_err()
                .contains("want ca:PATH")
        );
        assert!(parse_ak_trust("ca:/nonexistent").is_err());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
