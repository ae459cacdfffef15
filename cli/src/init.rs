//! `confboot init`: verify the first node, send it the admin's Init, and
//! keep what comes back.

use std::path::{Path, PathBuf};
use std::time::Duration;

use confboot_atls as atls;
use confboot_kms::init_secret::WeakSecretError;
use confboot_kms::{KmsError, MasterSecret, MasterSecretFileError, init_secret};
use confboot_proto::DEFAULT_INIT_PORT;
use confboot_proto::init::{InitRequest, InitResponse, SshUserKey, init_response};
use confboot_util::args::{Command, Matches, Opt, VERBOSITY};
use confboot_util::fs::FileError;
use confboot_wire::Status;

use crate::common::{self, OptionsError};
use confboot_util::text::{printable, printable_str};

const NODE: Opt = Opt::value(
    "node",
    "HOST[:PORT]",
    "The first node's init API (default port 9000)",
);
const INIT_SECRET_FILE: Opt = Opt::value(
    "init-secret-file",
    "FILE",
    "The init secret (the node knows its hash; refused when weak, as `confboot hash-init-secret` says)",
);
const MASTER_SECRET: Opt = Opt::value(
    "master-secret",
    "FILE",
    "Use this master secret instead of generating one",
);
const MASTER_SECRET_OUT: Opt = Opt::value(
    "master-secret-out",
    "FILE",
    "Where the generated master secret is written",
)
.default("confboot-mastersecret.json");
const KUBECONFIG_OUT: Opt = Opt::value(
    "kubeconfig-out",
    "FILE",
    "Where the admin kubeconfig is written",
)
.default("confboot-admin.conf");
const STATE_OUT: Opt = Opt::value(
    "state-out",
    "FILE",
    "Where cluster id, owner id and measurement salt are written",
)
.default("confboot-cluster.json");
const SSH_USERS: Opt = Opt::value(
    "ssh-users",
    "FILE",
    "SSH users to create on the first control plane (JSON, see above)",
);
const CLUSTER_NAME: Opt =
    Opt::value("cluster-name", "NAME", "Name of the cluster").default("confboot");
const KUBERNETES_VERSION: Opt = Opt::value("kubernetes-version", "VERSION", "Kubernetes version")
    .default(confboot_proto::api::PINNED_KUBERNETES_VERSION);
const TIMEOUT: Opt = Opt::value("timeout", "SECONDS", "How long Init may take").default("900");

const CMD: Command = Command {
    name: "confboot init",
    about: "Initialize a new cluster on its first node. Verifies the node over attested TLS as\n\
            --variants accepts (another variant is refused): qemu-vtpm (the default: a vTPM node,\n\
            against --measurements and --ak-trust), tdx (an Intel TDX node, against --tdx-policy) or\n\
            azure-sev-snp (an Azure SEV-SNP confidential VM, against --azure-policy);\n\
            the node must not be bootstrapped yet: PCR 15 (vTPM, Azure's vTPM) or RTMR3 (TDX), the cluster\n\
            mark, all zero.\n\
            sev-snp is refused: an SEV-SNP node has no register that shows it is not bootstrapped;\n\
            generates the\n\
            master secret (or takes --master-secret), writes it to --master-secret-out (mode 0600)\n\
            before Init is sent, sends Init with the init secret, prints the node's progress, and writes the admin kubeconfig (mode 0600) and the cluster's\n\
            ids and measurement salt (--state-out).\n\
            --ssh-users FILE: SSH users the first control plane creates (and creates again at every\n\
            boot, from its state disk): {\"sshUsers\": [{\"username\": \"alice\", \"publicKey\": \"ssh-ed25519 AAAA...\"}]};\n\
            names [a-z_][a-z0-9_-]* (at most 32 bytes, no system account), one OpenSSH public key each\n\
            (ed25519, ECDSA, security keys, RSA of 2048 bits or more), at most 32 users. The file is\n\
            checked before anything is sent.",
    usage: "confboot init --node HOST[:PORT] --measurements FILE --ak-trust MODE --init-secret-file FILE [OPTIONS]\n       \
            confboot init --node HOST[:PORT] --variants tdx --tdx-policy FILE --init-secret-file FILE [OPTIONS]",
    opts: &[
        NODE,
        common::MEASUREMENTS,
        common::AK_TRUST,
        common::EXPECTED_EVENTS,
        common::VARIANTS,
        common::SNP_POLICY,
        common::TDX_POLICY,
        common::AZURE_POLICY,
        INIT_SECRET_FILE,
        MASTER_SECRET,
        MASTER_SECRET_OUT,
        KUBECONFIG_OUT,
        STATE_OUT,
        SSH_USERS,
        CLUSTER_NAME,
        KUBERNETES_VERSION,
        TIMEOUT,
        VERBOSITY,
    ],
};

/// The most characters of one line of the node's log (or its failure)
/// printed.
const MAX_NODE_LOG_LINE: usize = 1024;

// The help text above names the default port.
const _: () = assert!(DEFAULT_INIT_PORT == 9000);

/// Why the cluster was not initialized (exit 1).
#[derive(Debug, thiserror::Error)]
enum InitError {
    /// The init secret cannot be read.
    #[error("--{option}: {0}", option = INIT_SECRET_FILE.long)]
    InitSecret(FileError),
    /// The init secret is weak.
    #[error("--{option}: {0}", option = INIT_SECRET_FILE.long)]
    WeakInitSecret(WeakSecretError),
    /// The node's validators cannot be made.
    #[error(transparent)]
    Check(#[from] common::NodeCheckError),
    /// The SSH users file is not usable.
    #[error(transparent)]
    SshUsers(#[from] SshUsersError),
    /// An output file exists already.
    #[error("{} exists already; move it away or choose another path", .0.display())]
    OutputExists(PathBuf),
    /// The new master secret's file exists already.
    #[error(
        "{} exists already; reuse it with --master-secret or choose another --master-secret-out",
        .0.display()
    )]
    MasterSecretOutExists(PathBuf),
    /// The master secret cannot be read or written.
    #[error("{0}")]
    MasterSecretFile(MasterSecretFileError),
    /// No master secret can be made.
    #[error("{0}")]
    MasterSecret(KmsError),
    /// No measurement salt can be made.
    #[error("no randomness")]
    NoRandomness,
    /// The node cannot be reached or failed verification.
    #[error("{}", common::explain_connect_error(node, error, measurements))]
    Connect {
        /// The node.
        node: String,
        /// Why.
        error: Box<atls::AtlsError>,
        /// The policy files it was checked against.
        measurements: String,
    },
    /// The node did not attest.
    #[error("the node did not attest")]
    NotAttested,
    /// The node refused Init with its reason (printable, bounded).
    #[error("the node refused Init: {0}")]
    Refused(String),
    /// The call failed.
    #[error("Init failed: {0}")]
    Failed(Status),
    /// The node answered without a result.
    #[error("the node answered without a result")]
    NoResult,
    /// An output file cannot be written.
    #[error("{0}")]
    Write(FileError),
}

/// Why the SSH users file is not usable.
#[derive(Debug, thiserror::Error)]
enum SshUsersError {
    /// It cannot be read.
    #[error("--{option}: {0}", option = SSH_USERS.long)]
    Read(FileError),
    /// It is not an SSH users configuration.
    #[error("--{option} {}: {error}", path.display(), option = SSH_USERS.long)]
    Invalid {
        /// The file.
        path: PathBuf,
        /// Why.
        error: confboot_sys::ssh_users::SshUserError,
    },
}

/// What `confboot init` runs with.
#[derive(Debug)]
struct Config {
    /// The first node's init API.
    node: String,
    /// How the node is checked.
    check: common::NodeCheck,
    /// The init secret's file.
    init_secret_file: PathBuf,
    /// A master secret to use (`None`: a new one).
    master_secret: Option<PathBuf>,
    /// Where a new master secret is written.
    master_secret_out: PathBuf,
    /// Where the admin kubeconfig is written.
    kubeconfig_out: PathBuf,
    /// Where the cluster's ids and measurement salt are written.
    state_out: PathBuf,
    /// The SSH users file.
    ssh_users: Option<PathBuf>,
    /// The cluster's name.
    cluster_name: String,
    /// The Kubernetes version.
    kubernetes_version: String,
    /// How long Init may take.
    timeout: Duration,
}

impl Config {
    /// Reads every option (each once, whatever the others say).
    fn from_matches(m: &Matches) -> Result<Config, OptionsError> {
        let path = |opt: &Opt| PathBuf::from(m.value(opt).expect("has a default"));
        let text = |opt: &Opt| m.value(opt).expect("has a default").to_string();
        let node = m.required(&NODE).map(str::to_string);
        let check = common::NodeCheck::read_unbootstrapped(m);
        let init_secret_file = m.required(&INIT_SECRET_FILE).map(PathBuf::from);
        let master_secret = m.value(&MASTER_SECRET).map(PathBuf::from);
        let master_secret_out = path(&MASTER_SECRET_OUT);
        let kubeconfig_out = path(&KUBECONFIG_OUT);
        let state_out = path(&STATE_OUT);
        let ssh_users = m.value(&SSH_USERS).map(PathBuf::from);
        let cluster_name = text(&CLUSTER_NAME);
        let kubernetes_version = text(&KUBERNETES_VERSION);
        let timeout = m.parsed::<u64>(&TIMEOUT);
        Ok(Config {
            node: common::with_port(&node?, DEFAULT_INIT_PORT),
            check: check?,
            init_secret_file: init_secret_file?,
            master_secret,
            master_secret_out,
            kubeconfig_out,
            state_out,
            ssh_users,
            cluster_name,
            kubernetes_version,
            timeout: Duration::from_secs(timeout?.unwrap_or(900)),
        })
    }
}

/// Runs `confboot init`; returns the exit code.
pub fn run(args: Vec<String>) -> i32 {
    common::run_command(&CMD, args, Config::from_matches, init)
}

fn init(config: &Config) -> Result<(), InitError> {
    let node = config.node.clone();
    let init_secret =
        init_secret::read_file(&config.init_secret_file).map_err(InitError::InitSecret)?;
    // The hash on the node's command line is the host's to read: a weak
    // secret is refused before anything else.
    init_secret::check_strength(&init_secret).map_err(InitError::WeakInitSecret)?;
    let validators = config.check.validators()?;
    let ssh_users = match &config.ssh_users {
        Some(path) => read_ssh_users(path)?,
        None => Vec::new(),
    };
    let timeout = config.timeout;
    let kubeconfig_out = config.kubeconfig_out.as_path();
    let state_out = config.state_out.as_path();
    for out in [kubeconfig_out, state_out] {
        if out.exists() {
            return Err(InitError::OutputExists(out.to_path_buf()));
        }
    }

    // A generated master secret is written after the node attested and
    // before Init is sent: nothing is lost if Init fails half-way.
    let (master, master_out) = match &config.master_secret {
        Some(path) => (
            MasterSecret::read_file(path).map_err(InitError::MasterSecretFile)?,
            None,
        ),
        None => {
            let out = config.master_secret_out.as_path();
            if out.exists() {
                return Err(InitError::MasterSecretOutExists(out.to_path_buf()));
            }
            (
                MasterSecret::generate().map_err(InitError::MasterSecret)?,
                Some(out),
            )
        }
    };
    let measurement_salt =
        confboot_kms::MeasurementSalt::generate().map_err(|_| InitError::NoRandomness)?;

    let started = std::time::Instant::now();
    let measurements = &config.check.policy_files;
    let (mut client, attested) = atls::connect(&node, Duration::from_secs(30), &validators, None)
        .map_err(|error| InitError::Connect {
        node: node.clone(),
        error: Box::new(error),
        measurements: measurements.clone(),
    })?;
    let attested = attested.ok_or(InitError::NotAttested)?;
    println!(
        "node {node} attested ({}, {} measurements match {measurements}) in {:.1} s",
        attested.variant,
        attested.measurements.len(),
        started.elapsed().as_secs_f64()
    );

    if let Some(out) = master_out {
        master
            .write_file(out)
            .map_err(InitError::MasterSecretFile)?;
        println!(
            "master secret written to {} (keep it: it recovers the cluster)",
            out.display()
        );
    }
    // InitRequest zeroizes its secrets when dropped, so it is filled in
    // place (struct update syntax cannot move out of a type with Drop).
    let mut request = InitRequest::default();
    request.kms_uri = master.to_kms_uri().to_string();
    request.storage_uri = "storage://no-store".into();
    request.measurement_salt = measurement_salt.to_vec();
    request.kubernetes_version = config.kubernetes_version.clone();
    request.init_secret = init_secret.to_vec();
    request.cluster_name = config.cluster_name.clone();
    request.ssh_user_keys = ssh_users;
    let mut success = None;
    let mut failure = None;
    let result = client.server_streaming(
        confboot_proto::INIT,
        &request,
        timeout,
        |resp: InitResponse| {
            match resp.kind {
                // The node's log (it may quote what others wrote): one
                // bounded line of plain characters each.
                Some(init_response::Kind::Log(l)) => {
                    println!("  node: {}", printable(&l.log, MAX_NODE_LOG_LINE))
                }
                Some(init_response::Kind::InitSuccess(s)) => success = Some(s),
                Some(init_response::Kind::InitFailure(f)) => failure = Some(f.error),
                None => {}
            }
            Ok(())
        },
    );
    if let Some(error) = failure {
        let error = printable_str(&error, MAX_NODE_LOG_LINE);
        return Err(InitError::Refused(error.to_string()));
    }
    result.map_err(|s| match s.code {
        confboot_wire::Code::PermissionDenied => InitError::Refused(s.message),
        _ => InitError::Failed(s),
    })?;
    let success = success.ok_or(InitError::NoResult)?;
    common::write_secret_file(kubeconfig_out, &success.kubeconfig).map_err(InitError::Write)?;
    let state = serde_json::json!({
        "node": node,
        "clusterId": confboot_util::hex::encode(&success.cluster_id),
        "ownerId": confboot_util::hex::encode(&success.owner_id),
        "measurementSalt": confboot_util::hex::encode(measurement_salt.as_bytes()),
    });
    common::write_secret_file(state_out, format!("{state:#}\n").as_bytes())
        .map_err(InitError::Write)?;
    println!(
        "cluster initialized in {:.1} s",
        started.elapsed().as_secs_f64()
    );
    println!(
        "  cluster id: {}",
        confboot_util::hex::encode(&success.cluster_id)
    );
    println!("  kubeconfig: {}", kubeconfig_out.display());
    println!(
        "  cluster state (measurement salt for joinsvc): {}",
        state_out.display()
    );
    Ok(())
}

/// The admin's SSH users file (`--ssh-users`), checked whole: bounded in
/// size, the configuration's shape, every name and key valid.
fn read_ssh_users(path: &Path) -> Result<Vec<SshUserKey>, SshUsersError> {
    use confboot_sys::ssh_users::{MAX_SSH_USERS_CONFIG_BYTES, parse_ssh_users_config};
    let bytes = confboot_util::fs::read_bounded(path, MAX_SSH_USERS_CONFIG_BYTES as u64)
        .map_err(SshUsersError::Read)?;
    let users = parse_ssh_users_config(&bytes).map_err(|error| SshUsersError::Invalid {
        path: path.to_path_buf(),
        error,
    })?;
    Ok(users
        .iter()
        .map(|u| SshUserKey {
            username: u.name.as_str().to_string(),
            public_key: u.key.to_line().trim_end().to_string(),
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_option_the_config_reads_is_declared() {
        // Config::from_matches reads every option whatever the others say:
        // one parse reads them all (an undeclared one panics).
        let m = CMD
            .parse(
                ["--node", "n", "--measurements", "m.json", "--ak-trust", "x"]
                    .into_iter()
                    .chain(["--init-secret-file", "s"])
                    .map(String::from),
            )
            .unwrap();
        let c = Config::from_matches(&m).unwrap();
        assert_eq!(c.node, "n:9000");
        assert_eq!(c.timeout, Duration::from_secs(900));
        assert_eq!(c.check.policy_files, "m.json");
    }

    fn key_line() -> String {
        let mut blob = Vec::new();
        for f in [&b"ssh-ed25519"[..], &[7u8; 32][..]] {
            blob.extend_from_slice(&(f.len() as u32).to_be_bytes());
            blob.extend_from_slice(f);
        }
        format!(
            "ssh-ed25519 {} admin@laptop",
            confboot_util::base64::encode(&blob)
        )
    }

    #[test]
    fn the_ssh_users_file_is_checked_before_anything_is_sent() {
        let dir = std::env::temp_dir().join(format!("confboot-cli-ssh-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("ssh-users.json");
        std::fs::write(
            &file,
            format!(
                r#"{{"sshUsers": [{{"username": "alice", "publicKey": "{}"}}]}}"#,
                key_line()
            ),
        )
        .unwrap();
        let users = read_ssh_users(&file).unwrap();
        assert_eq!(users.len(), 1);
        assert_eq!(users[0].username, "alice");
        assert_eq!(users[0].public_key, key_line());

        let missing = read_ssh_users(&dir.join("nope.json")).unwrap_err();
        assert!(matches!(missing, SshUsersError::Read(_)), "{missing:?}");
        let missing = missing.to_string();
        assert!(
            missing.starts_with("--ssh-users: ") && missing.contains("nope.json"),
            "{missing}"
        );
        let limit = confboot_sys::ssh_users::MAX_SSH_USERS_CONFIG_BYTES;
        std::fs::write(&file, vec![b' '; limit + 1]).unwrap();
        let big = read_ssh_users(&file).unwrap_err().to_string();
        assert!(big.contains(&format!("limit of {limit} bytes")), "{big}");
        std::fs::write(
            &file,
            r#"{"sshUsers": [{"username": "root", "publicKey": "ssh-ed25519 AAAA"}]}"#,
        )
        .unwrap();
        let bad = read_ssh_users(&file).unwrap_err();
        assert!(matches!(bad, SshUsersError::Invalid { .. }), "{bad:?}");
        let bad = bad.to_string();
        assert!(bad.contains("invalid user name \"root\""), "{bad}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_weak_init_secret_is_refused_before_the_node_is_asked() {
        let dir = confboot_testkit::TempDir::new("cli-init-weak");
        let secret = dir.path().join("init-secret");
        std::fs::write(&secret, "s3cret\n").unwrap();
        // No node listens there, and the policy file does not exist: the
        // secret is refused first.
        let m = CMD
            .parse(
                ["--node", "127.0.0.1:1", "--measurements", "missing.json"]
                    .into_iter()
                    .chain(["--ak-trust", "x", "--init-secret-file"])
                    .map(String::from)
                    .chain([secret.display().to_string()]),
            )
            .unwrap();
        let e = init(&Config::from_matches(&m).unwrap()).unwrap_err();
        assert!(matches!(e, InitError::WeakInitSecret(_)), "{e:?}");
        let e = e.to_string();
        assert!(
            e.starts_with("--init-secret-file: the init secret is too weak"),
            "{e}"
        );
    }
}
