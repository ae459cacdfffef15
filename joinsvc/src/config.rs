//! joinsvc's configuration: what the options say, read and checked once at
//! start-up with an error that names the option.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use confboot_attest::options::{InsecureAnyAk, ValidatorBuilder, ValidatorOptions, VariantOptions};
use confboot_attest::tpm::Tpm;
use confboot_attest::vtpm::VtpmIssuer;
use confboot_attest::{Issuer, MeasurementPolicy, Validator, Variant};
use confboot_cluster::kubelet_cert::KubeletCertSigner;
use confboot_kms::MasterSecret;
use confboot_net::listener::PoolConfig;
use confboot_util::args::Matches;
use confboot_util::fs::{MAX_CONFIG_FILE_BYTES, read_bounded, read_bounded_text};
use zeroize::Zeroizing;

use crate::kube_api::KubeApi;
use crate::ticket::{TicketConfig, discovery_token_ca_cert_hash};
use crate::token::{KubeApiTokenIssuer, TokenIssuer};
use crate::vpn::KubeApiPeerRegistry;
use confboot_vpn::VpnNetwork;

/// Timeout of each Kubernetes API request.
const KUBE_API_TIMEOUT: Duration = Duration::from_secs(10);

/// The flag that confirms `--ak-trust insecure-any-ak`.
pub const INSECURE_ANY_AK_CONFIRMATION: &str = "i-understand-insecure-any-ak";

/// How joining nodes are checked: `--measurements` and `--ak-trust`;
/// joinsvc hands out disk keys, so `insecure-any-ak` needs its confirmation.
pub const VALIDATOR_OPTIONS: ValidatorOptions = ValidatorOptions {
    measurements: "measurements",
    ak_trust: "ak-trust",
    expected_events: Some("expected-events"),
    insecure_any_ak: InsecureAnyAk::RequireFlag(INSECURE_ANY_AK_CONFIRMATION),
};

/// Which variants joining nodes may attest with: `--variants`, and
/// `--snp-policy` for `sev-snp`.
pub const VARIANT_OPTIONS: VariantOptions = VariantOptions {
    variants: "variants",
    snp_policy: "snp-policy",
};

/// How vTPM nodes are checked (when `qemu-vtpm` is accepted).
pub struct VtpmCheck {
    /// The measurement-policy file (watched for changes).
    pub policy_path: PathBuf,
    /// The policy read at start-up.
    pub initial_policy: MeasurementPolicy,
    /// Builds the validator of joining nodes for each policy in force
    /// (PCR 15 must be unmarked).
    pub validators: ValidatorBuilder,
}

/// How joining nodes are checked: one entry per accepted variant, in the
/// order `--variants` names them.
pub enum NodeCheck {
    /// A vTPM quote, under the watched measurement policy.
    Vtpm(VtpmCheck),
    /// An SEV-SNP report, under the SNP policy read at start-up.
    Snp(Arc<dyn Validator>),
}

/// Everything joinsvc runs with.
pub struct Config {
    /// Address of the join API.
    pub listen: String,
    /// Address of the HTTP health and metrics endpoints.
    pub health_listen: String,
    /// The join API's worker pool.
    pub pool: PoolConfig,
    /// How joining nodes are checked, per accepted variant.
    pub checks: Vec<NodeCheck>,
    /// joinsvc's own attestation, with `--tpm`.
    pub issuer: Option<Arc<dyn Issuer>>,
    /// What tickets are made from.
    pub ticket_config: TicketConfig,
    /// Where bootstrap tokens come from.
    pub token_issuer: Arc<dyn TokenIssuer>,
}

/// Descriptors joinsvc keeps beside its connections' (listeners, the
/// policy watcher, the TPM, the Kubernetes API, logs), with room to spare.
const OTHER_DESCRIPTORS: u64 = 64;

/// Reads a file an option names (at most [`MAX_CONFIG_FILE_BYTES`]).
fn read_file(option: &str, path: &Path) -> Result<Zeroizing<Vec<u8>>, String> {
    read_bounded(path, MAX_CONFIG_FILE_BYTES).map_err(|e| format!("--{option}: {e}"))
}

/// Reads a text file an option names (at most [`MAX_CONFIG_FILE_BYTES`]).
fn read_text_file(option: &str, path: &Path) -> Result<Zeroizing<String>, String> {
    read_bounded_text(path, MAX_CONFIG_FILE_BYTES).map_err(|e| format!("--{option}: {e}"))
}

/// Reads the master-secret file `--master-secret` names.
pub fn load_master_secret(path: &Path) -> Result<MasterSecret, String> {
    MasterSecret::read_file(path).map_err(|e| format!("--master-secret: {e}"))
}

impl Config {
    /// Reads and checks every option.
    pub fn from_matches(m: &Matches) -> Result<Config, String> {
        let required = |name: &str| m.required(name).map_err(|e| e.to_string());
        let number = |name: &str| -> Result<usize, String> {
            m.parsed::<usize>(name)
                .map_err(|e| e.to_string())?
                .ok_or_else(|| format!("--{name} is required"))
        };

        let master_secret = load_master_secret(Path::new(required("master-secret")?))?;
        let measurement_salt = confboot_util::hex::decode(required("measurement-salt")?)
            .map_err(|e| format!("--measurement-salt: {e}"))?;
        if measurement_salt.len() < 32 {
            return Err("--measurement-salt must be at least 32 bytes".into());
        }
        let mut checks = Vec::new();
        for variant in VARIANT_OPTIONS.accepted(m).map_err(|e| e.to_string())? {
            checks.push(match variant {
                Variant::QemuVtpm => {
                    let policy_path = PathBuf::from(required(VALIDATOR_OPTIONS.measurements)?);
                    let initial_policy = VALIDATOR_OPTIONS
                        .load_measurements(&policy_path)
                        .map_err(|e| e.to_string())?;
                    // PCR 15 is checked per call (crate::server::caller_check):
                    // zero for a join or rejoin, this cluster's mark for
                    // GetUpdate.
                    let validators = VALIDATOR_OPTIONS
                        .builder(m)
                        .map_err(|e| e.to_string())?
                        .require_unmarked(false);
                    NodeCheck::Vtpm(VtpmCheck {
                        policy_path,
                        initial_policy,
                        validators,
                    })
                }
                Variant::SevSnp => NodeCheck::Snp(Arc::new(
                    VARIANT_OPTIONS
                        .snp_validator(m)
                        .map_err(|e| e.to_string())?,
                )),
            });
        }
        let names: Vec<&str> = checks
            .iter()
            .map(|c| match c {
                NodeCheck::Vtpm(_) => Variant::QemuVtpm.name(),
                NodeCheck::Snp(_) => Variant::SevSnp.name(),
            })
            .collect();
        log::info!("joining nodes may attest with: {}", names.join(", "));

        let issuer: Option<Arc<dyn Issuer>> = match m.value("tpm") {
            None => None,
            Some(spec) => {
                let tpm = Tpm::open_for_option("tpm", spec).map_err(|e| e.to_string())?;
                log::info!("attesting with the TPM at {}", tpm.describe());
                // joinsvc quotes on every handshake for as long as it runs:
                // a TPM that restarts under it (its connection broken, a
                // transient AK gone) is reconnected to on the next quote.
                let reopen_spec = spec.to_string();
                Some(Arc::new(
                    VtpmIssuer::new(tpm)
                        .map_err(|e| format!("--tpm {spec}: {e}"))?
                        .with_event_log_option(m.value("event-log"), Tpm::is_device_spec(spec))
                        .map_err(|e| e.to_string())?
                        .reconnecting(Box::new(move || Tpm::open(&reopen_spec))),
                ))
            }
        };

        let ca_path = Path::new(m.value("kubernetes-ca").expect("has a default"));
        let ca = read_file("kubernetes-ca", ca_path)?;
        let discovery_token_ca_cert_hash = discovery_token_ca_cert_hash(&ca)
            .map_err(|e| format!("--kubernetes-ca {}: {e}", ca_path.display()))?;

        let pki_dir = PathBuf::from(required("pki-dir")?);
        let kubelet_cert_signer =
            kubelet_cert_signer(&ca, ca_path, &pki_dir, number("kubelet-cert-validity")?)?;

        let kube_api = kube_api(m)?;
        let vpn_registry = vpn_registry(m, &kube_api)?;
        let token_issuer: Arc<dyn TokenIssuer> =
            Arc::new(KubeApiTokenIssuer::new(kube_api).map_err(|e| e.to_string())?);

        let mut pool = PoolConfig {
            workers: number("workers")?,
            queue: number("queue")?,
            gate: Some(confboot_atls::client_hello_gate(
                number("pending")?.max(1),
                confboot_atls::DEFAULT_GATE_TIMEOUT,
            )),
            ..PoolConfig::default()
        };
        // Each worker may hold a connection to the API server as well.
        let others = OTHER_DESCRIPTORS + pool.workers as u64;
        confboot_net::listener::fit_descriptors(&mut pool, others);
        Ok(Config {
            listen: required("listen")?.to_string(),
            health_listen: required("health-listen")?.to_string(),
            pool,
            checks,
            issuer,
            ticket_config: TicketConfig {
                master_secret,
                measurement_salt,
                api_server_endpoint: required("api-server-endpoint")?.to_string(),
                discovery_token_ca_cert_hash,
                kubernetes_version: required("kubernetes-version")?.to_string(),
                pki_dir,
                kubelet_cert_signer,
                vpn_registry,
            },
            token_issuer,
        })
    }
}

/// The Kubernetes API client: `--kube-api` with its CA and token files, or
/// the in-cluster service account; it keeps a connection open for each of
/// the `--workers` that may call it at once.
pub fn kube_api(m: &Matches) -> Result<KubeApi, String> {
    let required = |name: &str| m.required(name).map_err(|e| e.to_string());
    let connections = m
        .parsed::<usize>("workers")
        .map_err(|e| e.to_string())?
        .unwrap_or(1);
    match m.value("kube-api") {
        None => KubeApi::in_cluster(KUBE_API_TIMEOUT, connections).map_err(|e| e.to_string()),
        Some(url) => {
            let ca = read_text_file("kube-api-ca", Path::new(required("kube-api-ca")?))?;
            let token = read_text_file(
                "kube-api-token-file",
                Path::new(required("kube-api-token-file")?),
            )?;
            KubeApi::new(
                url,
                &ca,
                Zeroizing::new(token.trim().to_string()),
                KUBE_API_TIMEOUT,
                connections,
            )
            .map_err(|e| e.to_string())
        }
    }
}

/// The VPN peer registry of `--vpn-cidr`, if given.
pub fn vpn_registry(
    m: &Matches,
    kube_api: &KubeApi,
) -> Result<Option<Arc<KubeApiPeerRegistry>>, String> {
    let Some(cidr) = m.value("vpn-cidr") else {
        return Ok(None);
    };
    let network: VpnNetwork = cidr.parse().map_err(|e| format!("--vpn-cidr: {e}"))?;
    let registry =
        KubeApiPeerRegistry::new(kube_api.clone(), network).map_err(|e| e.to_string())?;
    Ok(Some(Arc::new(registry)))
}

/// The signer of kubelet certificates: the `--kubernetes-ca` certificate
/// and `ca.key` in the PKI directory. Without the key, joinsvc runs and
/// refuses the kubelet certificates nodes ask for (with a warning now).
fn kubelet_cert_signer(
    ca_cert: &[u8],
    ca_path: &Path,
    pki_dir: &Path,
    validity_days: usize,
) -> Result<Option<KubeletCertSigner>, String> {
    if validity_days == 0 || validity_days > 3650 {
        return Err("--kubelet-cert-validity: want 1 to 3650 days".into());
    }
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
    let cert = std::str::from_utf8(ca_cert)
        .map_err(|_| format!("--kubernetes-ca {}: not PEM", ca_path.display()))?;
    let validity = std::time::Duration::from_secs(validity_days as u64 * 24 * 3600);
    KubeletCertSigner::new(cert, &key, validity)
        .map(Some)
        .map_err(|e| format!("{} with {}: {e}", ca_path.display(), key_path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use confboot_attest::vtpm::AkTrust;

    /// `--ak-trust mode` read as joinsvc reads it.
    fn parse_ak_trust(mode: &str) -> Result<AkTrust, String> {
        ak_trust_from(&["--ak-trust", mode])
    }

    fn ak_trust_from(args: &[&str]) -> Result<AkTrust, String> {
        let m = crate::CMD
            .parse(args.iter().map(|s| s.to_string()))
            .unwrap();
        VALIDATOR_OPTIONS
            .builder(&m)
            .map(|b| b.ak_trust().clone())
            .map_err(|e| e.to_string())
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
