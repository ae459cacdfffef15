//! `confboot recover`: a node whose state disk is initialized but that
//! reaches no join service waits for the admin; this sends it the master
//! secret so it can derive its disk key and open its disk.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use confboot_atls as atls;
use confboot_cluster::generation::{
    MAX_ADMIN_GENERATIONS, MAX_ADMIN_GENERATIONS_BYTES, admin_generations_json,
    parse_admin_generations,
};
use confboot_kms::{
    MasterSecret, MasterSecretFileError, MeasurementSalt, MeasurementSaltError, init_secret,
};
use confboot_proto::DEFAULT_RECOVER_PORT;
use confboot_proto::recover::{RecoverMessage, RecoverResponse};
use confboot_util::args::{Command, Matches, Opt, VERBOSITY};
use confboot_util::fs::FileError;
use confboot_wire::Status;

use crate::common::{self, OptionsError};

const NODE: Opt = Opt::value(
    "node",
    "HOST[:PORT]",
    "The node's recovery API (default port 9999)",
);
const MASTER_SECRET: Opt = Opt::value("master-secret", "FILE", "The cluster's master secret")
    .default("confboot-mastersecret.json");
const INIT_SECRET_FILE: Opt = Opt::value(
    "init-secret-file",
    "FILE",
    "The cluster's init secret (the node knows its hash): proves to the node that this is its admin",
);

const CLUSTER_FILE: Opt = Opt::value(
    "cluster-file",
    "FILE",
    "The cluster file confboot init wrote (--state-out): its measurement salt is the one the node marks PCR 15 with",
)
.default(common::DEFAULT_CLUSTER_FILE);

const GENERATIONS_FILE: Opt = Opt::value(
    "generations-file",
    "FILE",
    "The last state-disk generation the admin saw per disk UUID (JSON; seed it from the ledger: kubectl -n kube-system get configmap confboot-vpn-peers -o jsonpath='{.data.generations\\.json}'): the node refuses a disk older than its entry; each Recover records what the node wrote. Created if missing",
)
.default("confboot-generations.json");

const CMD: Command = Command {
    name: "confboot recover",
    about: "Recover a node that cannot reach a join service: verifies the node over attested TLS\n\
            as --variants accepts (another variant is refused): qemu-vtpm (the default: a vTPM node,\n\
            against --measurements and --ak-trust), tdx (an Intel TDX node, against --tdx-policy) or\n\
            azure-sev-snp (an Azure SEV-SNP confidential VM, against --azure-policy);\n\
            the node must not be bootstrapped yet: PCR 15 (vTPM, Azure's vTPM) or RTMR3 (TDX), the cluster\n\
            mark, all zero.\n\
            sev-snp is refused: an SEV-SNP node has no register that shows it is not bootstrapped;\n\
            then sends it the init secret,\n\
            the master secret (inside the kms:// URI) and the cluster's measurement salt (from --cluster-file).\n\
            The node checks the init secret against the hash on its command line before it reads its disk, then\n\
            derives its state-disk key, opens its disk and marks PCR 15 with the cluster id of the admin's salt\n\
            (never a salt read from its disk's header, which the host can rewrite).\n\
            The node refuses a disk whose generation is older than --generations-file keeps for it (a disk\n\
            restored from an old copy), and writes the next; the CLI records it there.\n\
            One Recover at a time: a node busy with another answers UNAVAILABLE (try again).",
    usage: "confboot recover --node HOST[:PORT] --init-secret-file FILE --master-secret FILE --measurements FILE --ak-trust MODE\n       \
            confboot recover --node HOST[:PORT] --init-secret-file FILE --master-secret FILE --variants tdx --tdx-policy FILE",
    opts: &[
        NODE,
        INIT_SECRET_FILE,
        MASTER_SECRET,
        CLUSTER_FILE,
        GENERATIONS_FILE,
        common::MEASUREMENTS,
        common::AK_TRUST,
        common::EXPECTED_EVENTS,
        common::VARIANTS,
        common::SNP_POLICY,
        common::TDX_POLICY,
        common::AZURE_POLICY,
        VERBOSITY,
    ],
};

// The help text above names the default port.
const _: () = assert!(DEFAULT_RECOVER_PORT == 9999);

/// Why the node was not recovered (exit 1).
#[derive(Debug, thiserror::Error)]
enum RecoverError {
    /// The init secret cannot be read.
    #[error("--{option}: {0}", option = INIT_SECRET_FILE.long)]
    InitSecret(FileError),
    /// The master secret cannot be read.
    #[error("{0}")]
    MasterSecret(MasterSecretFileError),
    /// The cluster file gives no measurement salt.
    #[error("--{option}: {0}", option = CLUSTER_FILE.long)]
    ClusterFile(common::ClusterFileError),
    /// The cluster file's measurement salt is out of bounds.
    #[error("--{option}: {0}", option = CLUSTER_FILE.long)]
    Salt(MeasurementSaltError),
    /// The node's validators cannot be made.
    #[error(transparent)]
    Check(#[from] common::NodeCheckError),
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
    /// The node serves another Recover.
    #[error("the node is busy with another Recover; try again in a moment: {0}")]
    Busy(Status),
    /// The node refused the Recover.
    #[error("the node refused recovery: {0}")]
    Refused(Status),
    /// The generations file does not read.
    #[error("--{option}: {0}", option = GENERATIONS_FILE.long)]
    Generations(String),
    /// The node's answer names a generation older than the admin's.
    #[error(
        "the node recovered disk {disk} at generation {written}, older than the {min} recorded: \
         treat it as rolled back"
    )]
    Older {
        /// The disk UUID.
        disk: String,
        /// What the node wrote.
        written: u64,
        /// What the file keeps.
        min: u64,
    },
}

/// What `confboot recover` runs with.
#[derive(Debug)]
struct Config {
    /// The node's recovery API.
    node: String,
    /// The init secret's file.
    init_secret_file: PathBuf,
    /// The master-secret file.
    master_secret: PathBuf,
    /// The cluster file (for the measurement salt).
    cluster_file: PathBuf,
    /// The last generation seen per disk.
    generations_file: PathBuf,
    /// How the node is checked.
    check: common::NodeCheck,
}

impl Config {
    /// Reads every option (each once, whatever the others say).
    fn from_matches(m: &Matches) -> Result<Config, OptionsError> {
        let node = m.required(&NODE).map(str::to_string);
        let init_secret_file = m.required(&INIT_SECRET_FILE).map(PathBuf::from);
        let master_secret = PathBuf::from(m.value(&MASTER_SECRET).expect("has a default"));
        let cluster_file = PathBuf::from(m.value(&CLUSTER_FILE).expect("has a default"));
        let generations_file = PathBuf::from(m.value(&GENERATIONS_FILE).expect("has a default"));
        let check = common::NodeCheck::read_unbootstrapped(m);
        Ok(Config {
            node: common::with_port(&node?, DEFAULT_RECOVER_PORT),
            init_secret_file: init_secret_file?,
            master_secret,
            cluster_file,
            generations_file,
            check: check?,
        })
    }
}

/// Runs `confboot recover`; returns the exit code.
pub fn run(args: Vec<String>) -> i32 {
    common::run_command(&CMD, args, Config::from_matches, recover)
}

fn recover(config: &Config) -> Result<(), RecoverError> {
    let node = &config.node;
    // Not checked for strength: the node knows the hash of the secret it
    // was booted with, whatever it is (init and hash-init-secret refuse
    // weak ones).
    let init_secret =
        init_secret::read_file(&config.init_secret_file).map_err(RecoverError::InitSecret)?;
    let master =
        MasterSecret::read_file(&config.master_secret).map_err(RecoverError::MasterSecret)?;
    let measurement_salt = common::cluster_file_field(&config.cluster_file, "measurementSalt")
        .map_err(RecoverError::ClusterFile)?;
    let measurement_salt = MeasurementSalt::new(measurement_salt).map_err(RecoverError::Salt)?;
    let mut generations = read_generations(&config.generations_file)?;
    let validators = config.check.validators()?;
    let measurements = &config.check.policy_files;
    let (mut client, _) =
        atls::connect(node, Duration::from_secs(30), &validators, None).map_err(|error| {
            RecoverError::Connect {
                node: node.clone(),
                error: Box::new(error),
                measurements: measurements.clone(),
            }
        })?;
    println!("node {node} attested");
    let msg = RecoverMessage {
        kms_uri: master.to_kms_uri().to_string(),
        storage_uri: "storage://no-store".into(),
        init_secret: init_secret.to_vec(),
        measurement_salt: measurement_salt.to_vec(),
        min_generations: generations.iter().map(|(d, g)| (d.clone(), *g)).collect(),
    };
    let answer: RecoverResponse = client
        .unary(confboot_proto::RECOVER, &msg, Duration::from_secs(120))
        .map_err(|s| match s.code {
            confboot_wire::Code::Unavailable => RecoverError::Busy(s),
            _ => RecoverError::Refused(s),
        })?;
    println!("node {node} recovered: it opened its state disk");
    record_generation(config, &mut generations, &answer)
}

/// The generations file, or none yet.
fn read_generations(path: &std::path::Path) -> Result<BTreeMap<String, u64>, RecoverError> {
    if !path.exists() {
        return Ok(BTreeMap::new());
    }
    let bytes = confboot_util::fs::read_bounded(path, MAX_ADMIN_GENERATIONS_BYTES as u64)
        .map_err(|e| RecoverError::Generations(e.to_string()))?;
    parse_admin_generations(&bytes).map_err(|e| RecoverError::Generations(e.to_string()))
}

/// Records the generation the node wrote for its disk (never lowering
/// one kept), so that the next Recover refuses an older copy.
fn record_generation(
    config: &Config,
    generations: &mut BTreeMap<String, u64>,
    answer: &RecoverResponse,
) -> Result<(), RecoverError> {
    let disk = answer.disk_uuid.to_ascii_lowercase();
    if !confboot_kms::is_uuid(&disk) || answer.written_generation == 0 {
        println!("the node keeps no state-disk generation: nothing recorded");
        return Ok(());
    }
    let min = generations.get(&disk).copied().unwrap_or(0);
    if answer.written_generation <= min {
        return Err(RecoverError::Older {
            disk,
            written: answer.written_generation,
            min,
        });
    }
    if !generations.contains_key(&disk) && generations.len() >= MAX_ADMIN_GENERATIONS {
        return Err(RecoverError::Generations(format!(
            "full ({MAX_ADMIN_GENERATIONS} disks): generation {} of disk {disk} not recorded",
            answer.written_generation
        )));
    }
    generations.insert(disk.clone(), answer.written_generation);
    confboot_util::fs::replace_private(
        &config.generations_file,
        admin_generations_json(generations).as_bytes(),
    )
    .map_err(|e| RecoverError::Generations(e.to_string()))?;
    println!(
        "state disk {disk}: generation {} found, {} written and recorded in {}",
        answer.found_generation,
        answer.written_generation,
        config.generations_file.display()
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_option_the_config_reads_is_declared() {
        // Config::from_matches reads every option whatever the others say:
        // one parse reads them all (an undeclared one panics).
        let args = [
            "--node",
            "n",
            "--init-secret-file",
            "s",
            "--variants",
            "tdx",
            "--tdx-policy",
            "p.json",
        ];
        let m = CMD.parse(args.into_iter().map(String::from)).unwrap();
        let c = Config::from_matches(&m).unwrap();
        assert_eq!(c.node, "n:9999");
        assert_eq!(c.init_secret_file, PathBuf::from("s"));
        assert_eq!(c.master_secret, PathBuf::from("confboot-mastersecret.json"));
        assert_eq!(c.cluster_file, PathBuf::from("confboot-cluster.json"));
        assert_eq!(c.check.policy_files, "p.json");
    }

    #[test]
    fn sev_snp_is_refused_since_it_cannot_prove_a_node_is_not_bootstrapped() {
        for variants in ["sev-snp", "qemu-vtpm,sev-snp"] {
            let args = [
                "--node",
                "n",
                "--init-secret-file",
                "s",
                "--variants",
                variants,
                "--snp-policy",
                "p.json",
                "--measurements",
                "m.json",
                "--ak-trust",
                "insecure-any-ak",
            ];
            let m = CMD.parse(args.into_iter().map(String::from)).unwrap();
            let e = Config::from_matches(&m).unwrap_err();
            assert!(
                matches!(e, OptionsError::SnpCannotProveUnbootstrapped),
                "{variants}: {e:?}"
            );
            assert!(
                e.to_string()
                    .contains("cannot prove it is not bootstrapped"),
                "{e}"
            );
        }
    }

    #[test]
    fn the_init_secret_is_required() {
        let args = ["--node", "n", "--variants", "tdx", "--tdx-policy", "p"];
        let m = CMD.parse(args.into_iter().map(String::from)).unwrap();
        let e = Config::from_matches(&m).unwrap_err();
        assert!(matches!(e, OptionsError::Args(_)), "{e:?}");
        assert!(e.to_string().contains("--init-secret-file"), "{e}");
    }

    #[test]
    fn the_generations_file_is_sent_and_what_the_node_wrote_is_recorded() {
        let dir = confboot_testkit::TempDir::new("recover-generations");
        let file = dir.path().join("generations.json");
        let disk = "2f3c6c1e-2b5d-4e8a-9c7f-1a2b3c4d5e6f";
        // Seeded from the ledger's ConfigMap form.
        std::fs::write(&file, format!(r#"{{"{disk}": [4, 1700000000]}}"#)).unwrap();
        let args = ["--node", "n", "--init-secret-file", "s"];
        let args = args.iter().map(|a| a.to_string()).chain([
            "--measurements".into(),
            "m.json".into(),
            "--ak-trust".into(),
            "insecure-any-ak".into(),
            "--generations-file".into(),
            file.display().to_string(),
        ]);
        let config = Config::from_matches(&CMD.parse(args).unwrap()).unwrap();
        let mut generations = read_generations(&config.generations_file).unwrap();
        assert_eq!(generations.get(disk), Some(&4));
        let answer = |written| RecoverResponse {
            disk_uuid: disk.to_ascii_uppercase(),
            found_generation: written - 1,
            written_generation: written,
        };
        record_generation(&config, &mut generations, &answer(5)).unwrap();
        assert_eq!(read_generations(&file).unwrap().get(disk), Some(&5));
        // A node that answers an older generation is not believed.
        assert!(matches!(
            record_generation(&config, &mut generations, &answer(5)),
            Err(RecoverError::Older { min: 5, .. })
        ));
        assert_eq!(read_generations(&file).unwrap().get(disk), Some(&5));
        std::fs::write(&file, "[]").unwrap();
        assert!(read_generations(&file).is_err());
    }
}
