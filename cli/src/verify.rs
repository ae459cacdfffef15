//! `confboot verify`: connects to a running node's verify service (the
//! node agent, over aTLS without attesting) and checks the quote the node
//! sends, bound to that TLS session's exporter: the signature and the
//! binding (evidence made for another session, a relay's or a recorded
//! one, is refused), the AK trust, the carried event log's replay, every PCR of
//! the policy, and PCR 15 against the cluster's mark. Prints one row per
//! PCR (or JSON with `-o json`, or with `-o ear --ear-key KEY.pem` the
//! verdict as a signed attestation result, [`crate::ear_output`]). With `--variants` accepting `sev-snp`,
//! an SEV-SNP document is checked against `--snp-policy` instead, every
//! check printed (its report carries no cluster mark); a document of a
//! variant not accepted is refused (exit 1). Exit status: 0 verified, 1 a check
//! failed, 2 bad arguments, an unreachable node or an answer that is not an
//! attestation document. The checks live in [`confboot_verifier::verify`]; this
//! reads files, asks and prints.

use std::path::PathBuf;
use std::time::Duration;

use confboot_util::args::{Command, Matches, Opt, VERBOSITY, parse_or_exit};
use std::sync::Arc;

use confboot_appraisal::reference::sets::{
    ReferenceSets, RefusedFile, Retirement, SetName, SetVerdict, SetsRefusal,
};
use confboot_appraisal::reference::{ReferenceError, ReleaseKey, cose};
use confboot_attest::EXTRA_DATA_LEN;
use confboot_attest::check::{ReportDataCheck, first_failure};
use confboot_attest::{MeasurementPolicy, Validator, Variant};
use confboot_proto::DEFAULT_VERIFY_PORT;
use confboot_snp::{SnpEvidence, SnpValidator};
use confboot_tpm::CLUSTER_ID_PCR;
use confboot_tpm::event_log::EventList;
use confboot_verifier::config::{VtpmConfig, VtpmSettings};
use confboot_verifier::verify::service::{SessionEvidence, fetch_document};
use confboot_verifier::verify::{AttestationDocument, NodeReport, check_node};

use crate::common;
use crate::ear_output::{EAR_KEY, EarOutputError, EarSigner, OutputError};
use crate::hex_option::HexOptionError;
use confboot_appraisal::ear::{TrustVector, Verdict};
use confboot_appraisal::reference::sets::SetsError;
use confboot_attest::AttestationError;
use confboot_attest::PolicyError;
use confboot_util::args::ArgsError;
use confboot_util::fs::FileError;
use confboot_verifier::verify::service::FetchError;

const NODE: Opt = Opt::value(
    "node",
    "HOST[:PORT]",
    "The node's verify service (default port 8080)",
);
const CLUSTER_ID: Opt = Opt::value(
    "cluster-id",
    "HEX",
    "The cluster id the node must be marked with (PCR 15)",
);
const CLUSTER_FILE: Opt = Opt::value(
    "cluster-file",
    "FILE",
    "Where to read the cluster id when --cluster-id is not given (confboot init's clusterId)",
)
.default(common::DEFAULT_CLUSTER_FILE);
const OUTPUT: Opt = Opt::value(
    "output",
    "FORMAT",
    "table, json for machines, or ear: a signed attestation result (needs --ear-key)",
)
.short('o')
.default("table");
const TIMEOUT: Opt = Opt::value(
    "timeout",
    "SECONDS",
    "Bound on connecting, the handshake and reading the node's evidence, all of it",
)
.default("30");
const REFERENCE_VALUES_DIR: Opt = Opt::value(
    "reference-values-dir",
    "DIR",
    "Signed reference-value sets (`confboot measure --reference-values-out`, then `confboot sign`), \
     one per file, in place of --measurements (give one of the two): the node verifies when its \
     PCRs match a live set, that is, a file signed by a --release-key whose window holds now; the \
     set matched is named in the output. A file that is unsigned, signed by another key, malformed \
     or outside its window is ignored and said so on stderr; a node matching only an expired set is \
     refused naming the set and when it expired",
);
const RELEASE_KEY: Opt = Opt::value(
    "release-key",
    "PEM",
    "A release public key (`confboot keygen`) whose signed sets in --reference-values-dir are \
     accepted; repeatable",
);
const REFERENCE_VALUES_WARNING: Opt = Opt::value(
    "reference-values-warning",
    "DAYS",
    "A node matching a set that ends within this many days verifies with a warning (printed; \
     -o ear: status warning)",
)
.default("7");

/// Most days of `--reference-values-warning` (ten years).
const MAX_WARNING_DAYS: u64 = 3650;

const CMD: Command = Command {
    name: "confboot verify",
    about: "Verify a running node: connects to its verify service (the node agent, aTLS on port\n\
            8080: TLS 1.3, ALPN confboot/2; this side does not attest) and checks (qemu-vtpm, the\n\
            default of --variants) the vTPM quote\n\
            the node sends, bound to this TLS session's exporter (a fresh value per connection: a\n\
            relay or a recorded answer is refused), the quote's signature, the attestation key\n\
            against --ak-trust, the event log the node sends (it must replay to the quoted\n\
            PCRs), every PCR of --measurements (or of the signed reference-value set it matches in\n\
            --reference-values-dir, checked with --release-key; the set is named), and PCR 15\n\
            against the mark of the cluster id (--cluster-id, or the cluster file `confboot init`\n\
            wrote; it replaces a PCR 15 entry of the policy, which describes unbootstrapped\n\
            nodes). Prints one row per PCR: expected, actual, enforced or warnOnly, ✓ or ✗, and under\n\
            a differing PCR the first event of the node's log that differs from --expected-events.\n\
            An SEV-SNP node (--variants sev-snp) is checked against --snp-policy instead, one line per\n\
            check (its report carries no cluster mark), a TDX node (--variants tdx) against --tdx-policy,\n\
            an Azure SEV-SNP node (--variants azure-sev-snp) against --azure-policy;\n\
            a variant --variants does not accept is refused.\n\
            With -o ear, prints the verdict as an EAT attestation result (draft-ietf-rats-ear): one\n\
            JWT signed with --ear-key (ES256).\n\
            Exit status: 0 verified, 1 a check failed, 2 bad arguments, unreachable node or an\n\
            answer that is not an attestation document.",
    usage: "confboot verify --node HOST[:PORT] (--measurements FILE | --reference-values-dir DIR --release-key PEM...) --ak-trust MODE [--cluster-id HEX | --cluster-file FILE] [-o table|json|ear --ear-key KEY.pem]",
    opts: &[
        NODE,
        common::MEASUREMENTS,
        REFERENCE_VALUES_DIR,
        RELEASE_KEY,
        REFERENCE_VALUES_WARNING,
        common::AK_TRUST,
        common::EXPECTED_EVENTS,
        common::VARIANTS,
        common::SNP_POLICY,
        common::TDX_POLICY,
        common::AZURE_POLICY,
        CLUSTER_ID,
        CLUSTER_FILE,
        OUTPUT,
        EAR_KEY,
        TIMEOUT,
        VERBOSITY,
    ],
};

// The help text above names the default port.
const _: () = assert!(DEFAULT_VERIFY_PORT == 8080);

/// What `confboot verify` runs with.
#[derive(Debug)]
struct Config {
    /// The node's verify service.
    node: String,
    /// JSON output (`-o json`) instead of the table.
    json: bool,
    /// `-o ear`: the key that signs the result.
    ear_key: Option<PathBuf>,
    /// Bound on connecting, the handshake and reading the node's evidence.
    timeout: Duration,
    /// How the node is checked.
    check: common::NodeCheck,
    /// Where the cluster id comes from (needed for vTPM nodes only).
    cluster_id: ClusterId,
    /// `--reference-values-dir`: vTPM nodes are checked against signed
    /// sets instead of `--measurements`.
    sets: Option<SetsConfig>,
}

/// Where the signed reference-value sets are and how they are read.
#[derive(Debug, PartialEq, Eq)]
struct SetsConfig {
    /// The directory of signed sets.
    dir: PathBuf,
    /// The release-key files (at least one).
    release_keys: Vec<PathBuf>,
    /// How close to a set's not-after, in seconds, a match is a warning.
    warning: i64,
}

/// Where the cluster id the node must be marked with comes from.
#[derive(Clone, Debug, PartialEq, Eq)]
enum ClusterId {
    /// `--cluster-id`.
    Given(Vec<u8>),
    /// The cluster file `confboot init` wrote.
    File(PathBuf),
}

/// Why `confboot verify` gave no verdict (exit 2): an option, a file it
/// names, or a node that sent no evidence.
#[derive(Debug, thiserror::Error)]
enum VerifyError {
    /// A positional argument.
    #[error("unexpected argument {0:?}")]
    Unexpected(String),
    /// An option is missing or not of its type.
    #[error(transparent)]
    Args(#[from] ArgsError),
    /// `-o` and `--ear-key` do not go together.
    #[error(transparent)]
    Output(#[from] OutputError),
    /// `--timeout` out of its range.
    #[error("--{option}: want whole seconds from 1 to 3600", option = TIMEOUT.long)]
    Timeout,
    /// `--reference-values-dir` beside `--measurements`.
    #[error("--{} replaces --{}: give one of the two", REFERENCE_VALUES_DIR.long, common::MEASUREMENTS.long)]
    SetsBesideMeasurements,
    /// The attestation options or their files check no node.
    #[error(transparent)]
    Check(#[from] common::NodeCheckError),
    /// `--release-key` without `--reference-values-dir`.
    #[error("--{} goes with --{}", RELEASE_KEY.long, REFERENCE_VALUES_DIR.long)]
    ReleaseKeyWithoutSets,
    /// `--reference-values-dir` without a release key.
    #[error("--{} needs --{} (sets are accepted only signed)", REFERENCE_VALUES_DIR.long, RELEASE_KEY.long)]
    SetsWithoutReleaseKey,
    /// `--reference-values-dir` while `qemu-vtpm` is not accepted.
    #[error("--{} holds reference values of qemu-vtpm nodes, which --{} does not accept", REFERENCE_VALUES_DIR.long, common::VARIANTS.long)]
    SetsWithoutVtpm,
    /// `--reference-values-warning` out of its range.
    #[error("--{option}: want 0 to {MAX_WARNING_DAYS} days", option = REFERENCE_VALUES_WARNING.long)]
    SetsWarning,
    /// `--cluster-id` is not 1 to 64 bytes of hex.
    #[error(transparent)]
    ClusterIdOption(#[from] HexOptionError),
    /// No `--cluster-id`, and the cluster file gives none.
    #[error("no --{option}, and {0}", option = CLUSTER_ID.long)]
    ClusterFile(common::ClusterFileError),
    /// The attestation result cannot be signed.
    #[error(transparent)]
    Ear(#[from] EarOutputError),
    /// The node sent no attestation document.
    #[error("node {node}: no attestation document: {error}")]
    NoDocument {
        /// The node.
        node: String,
        /// Why.
        error: FetchError,
    },
    /// The measurement policy does not make a validator.
    #[error("--measurements: {0}")]
    Measurements(PolicyError),
    /// A `--release-key` file cannot be read.
    #[error("--{option}: {0}", option = RELEASE_KEY.long)]
    ReadReleaseKey(FileError),
    /// A `--release-key` file is no release key.
    #[error("--{option} {}: {error}", path.display(), option = RELEASE_KEY.long)]
    ReleaseKey {
        /// The file.
        path: PathBuf,
        /// Why.
        error: ReferenceError,
    },
    /// The `--reference-values-dir` cannot be read.
    #[error("--{option}: {0}", option = REFERENCE_VALUES_DIR.long)]
    Sets(SetsError),
}

impl Config {
    /// Reads every option (each once, whatever the others say); every
    /// one is checked before the node is asked, a bad one is exit 2.
    fn from_matches(m: &Matches) -> Result<Config, VerifyError> {
        let node = m.required(&NODE).map(str::to_string);
        let output = m.value(&OUTPUT).expect("has a default");
        let timeout = m.value(&TIMEOUT).expect("has a default");
        let reference_values_dir = m.value(&REFERENCE_VALUES_DIR).map(PathBuf::from);
        let release_keys: Vec<PathBuf> = m
            .values(&RELEASE_KEY)
            .into_iter()
            .map(PathBuf::from)
            .collect();
        let warning_days = m.parsed::<u64>(&REFERENCE_VALUES_WARNING);
        let measurements_given = m.value(&common::MEASUREMENTS).is_some();
        let check = common::NodeCheck::read_with(m, reference_values_dir.is_none());
        let cluster_id = m.value(&CLUSTER_ID);
        let cluster_file = m.value(&CLUSTER_FILE).expect("has a default");
        let ear_key = m.value(&EAR_KEY).map(PathBuf::from);
        if let Some(extra) = m.positional().first() {
            return Err(VerifyError::Unexpected(extra.to_string()));
        }
        let node = common::with_port(&node?, DEFAULT_VERIFY_PORT);
        let (json, ear_key) = match (output, ear_key) {
            ("table", None) => (false, None),
            ("json", None) => (true, None),
            ("ear", Some(key)) => (false, Some(key)),
            ("ear", None) => return Err(OutputError::NoKey.into()),
            ("table" | "json", Some(_)) => return Err(OutputError::KeyWithoutEar.into()),
            (other, _) => {
                return Err(OutputError::Unknown(other.to_string(), "table, json or ear").into());
            }
        };
        let timeout = match timeout.parse::<u64>() {
            Ok(s) if (1..=3600).contains(&s) => Duration::from_secs(s),
            _ => return Err(VerifyError::Timeout),
        };
        if reference_values_dir.is_some() && measurements_given {
            return Err(VerifyError::SetsBesideMeasurements);
        }
        let check = check?;
        let warning_days = warning_days?;
        let sets = match reference_values_dir {
            None if release_keys.is_empty() => None,
            None => return Err(VerifyError::ReleaseKeyWithoutSets),
            Some(_) if release_keys.is_empty() => return Err(VerifyError::SetsWithoutReleaseKey),
            Some(_) if !check.settings.accepts(Variant::QemuVtpm) => {
                return Err(VerifyError::SetsWithoutVtpm);
            }
            Some(dir) => {
                let days = warning_days.expect("has a default");
                if days > MAX_WARNING_DAYS {
                    return Err(VerifyError::SetsWarning);
                }
                Some(SetsConfig {
                    dir,
                    release_keys,
                    warning: i64::try_from(days * 86_400).expect("bounded"),
                })
            }
        };
        // The cluster id is read for vTPM nodes only (an SEV-SNP report
        // carries no mark).
        let cluster_id = match cluster_id {
            Some(hex) if check.settings.accepts(Variant::QemuVtpm) => {
                ClusterId::Given(parse_cluster_id(hex)?)
            }
            _ => ClusterId::File(PathBuf::from(cluster_file)),
        };
        Ok(Config {
            node,
            json,
            ear_key,
            timeout,
            check,
            cluster_id,
            sets,
        })
    }
}

/// Runs `confboot verify`; returns the exit code.
pub fn run(args: Vec<String>) -> i32 {
    let m = parse_or_exit(&CMD, args);
    let verbosity = match m.verbosity() {
        Ok(v) => v,
        Err(e) => return usage_error(&e.to_string()),
    };
    confboot_util::logging::init("verify", verbosity);
    match Config::from_matches(&m).and_then(|config| verify(&config)) {
        Ok(code) => code,
        Err(e) => usage_error(&e.to_string()),
    }
}

fn usage_error(msg: &str) -> i32 {
    eprintln!("confboot verify: {msg}");
    2
}

/// A `--cluster-id`: 1 to 64 bytes of hex.
fn parse_cluster_id(hex: &str) -> Result<Vec<u8>, HexOptionError> {
    crate::hex_option::hex_bytes(hex, &format!("--{}", CLUSTER_ID.long), 1..=64)
}

/// The cluster id: `--cluster-id`, or the cluster file's `clusterId`.
fn cluster_id(source: &ClusterId) -> Result<Vec<u8>, VerifyError> {
    let file = match source {
        ClusterId::Given(id) => return Ok(id.clone()),
        ClusterId::File(file) => file,
    };
    common::cluster_file_field(file, "clusterId").map_err(VerifyError::ClusterFile)
}

fn verify(config: &Config) -> Result<i32, VerifyError> {
    let (node, json) = (config.node.as_str(), config.json);
    let settings = &config.check.settings;
    // Every file is read before the node is asked: a bad one is exit 2.
    // With signed sets, the vTPM variant has no policy file: the other
    // variants are loaded as ever, the vTPM one from its sets.
    let attestation = match &config.sets {
        None => settings.load(),
        Some(_) => settings.load_without(Variant::QemuVtpm),
    }
    .map_err(common::NodeCheckError)?;
    let accepted = settings.variants();
    let vtpm = match (&config.sets, attestation.vtpm(), settings.vtpm()) {
        (Some(sets), _, Some(vtpm)) => Some(sets_check(vtpm, sets, &config.cluster_id)?),
        (None, Some(vtpm), _) => Some(vtpm_check(vtpm, &config.cluster_id)?),
        _ => None,
    };
    let snp = attestation.snp();
    let ear = match &config.ear_key {
        Some(path) => {
            let policy = match settings.vtpm() {
                Some(vtpm) => vtpm.measurements.as_deref(),
                None => settings.snp().map(|snp| snp.policy.as_path()),
            };
            let id = match &config.sets {
                Some(sets) => format!("reference-value sets in {}", sets.dir.display()),
                None => crate::ear_output::policy_id(policy)?,
            };
            Some(EarSigner::load(path, "confboot verify", id)?)
        }
        None => None,
    };

    let SessionEvidence {
        document: doc,
        extra_data,
    } = fetch_document(node, config.timeout).map_err(|error| VerifyError::NoDocument {
        node: node.to_string(),
        error,
    })?;
    if let (Variant::SevSnp, Some(snp)) = (doc.variant, snp) {
        return Ok(snp_verdict(
            node,
            &doc,
            &extra_data,
            snp,
            json,
            ear.as_ref(),
        ));
    }
    let Some(vtpm) = vtpm.filter(|_| doc.variant == Variant::QemuVtpm) else {
        let names: Vec<&str> = accepted.iter().map(|v| v.name()).collect();
        let why = format!(
            "it attests with {}, which --variants does not accept ({})",
            doc.variant,
            names.join(", ")
        );
        if let Some(ear) = &ear {
            let wrong = AttestationError::WrongVariant {
                expected: accepted[0],
                actual: doc.variant.name().into(),
            };
            let vector = TrustVector::of_refusal(&wrong);
            return Ok(ear.print(doc.variant, &doc.evidence, false, vector));
        }
        print_refused(node, &why, json);
        return Ok(1);
    };
    // The policy compared: --measurements, or the signed set matched.
    let matched = match &vtpm.reference {
        VtpmReference::Measurements(_) => None,
        VtpmReference::Sets(sets) => match sets.appraise(&doc, &extra_data, &vtpm) {
            Ok(matched) => Some(matched),
            Err(refusal) => {
                if let Some(ear) = &ear {
                    let vector = TrustVector::of_refusal(&refusal.error);
                    return Ok(ear.print_appraised(
                        doc.variant,
                        &doc.evidence,
                        false,
                        false,
                        refusal.policy_id.as_deref(),
                        vector,
                    ));
                }
                print_refused(node, &refusal.why, json);
                return Ok(1);
            }
        },
    };
    let (policy, events) = match (&vtpm.reference, &matched) {
        (VtpmReference::Measurements(policy), _) => (policy, vtpm.events.as_ref()),
        (_, Some(set)) => (
            &set.policy,
            vtpm.events
                .as_ref()
                .or(Some(&set.events).filter(|e| !e.events.is_empty())),
        ),
        (VtpmReference::Sets(_), None) => unreachable!("a set was matched or the node refused"),
    };
    let report = match check_node(
        &doc,
        &extra_data,
        vtpm.validator.as_ref(),
        policy,
        events,
        &vtpm.cluster_id,
    ) {
        Ok(report) => report,
        Err(e) => {
            if let Some(ear) = &ear {
                let vector = TrustVector::of_refusal(&e);
                return Ok(ear.print(doc.variant, &doc.evidence, false, vector));
            }
            print_refused(node, &format!("its evidence is refused: {e}"), json);
            return Ok(1);
        }
    };
    let warned = matched.as_ref().is_some_and(|m| m.verdict.is_warning());
    if let Some(ear) = &ear {
        let enforced = |mark: bool| {
            report
                .rows
                .iter()
                .filter(|r| r.enforced && (r.source == "cluster id") == mark)
                .all(|r| r.matches())
        };
        let vector = TrustVector::of_vtpm(enforced(false), enforced(true));
        return Ok(ear.print_appraised(
            doc.variant,
            &doc.evidence,
            report.passed(),
            warned,
            matched.as_ref().map(MatchedSet::policy_id).as_deref(),
            vector,
        ));
    }
    if json {
        let mut out = report.to_json();
        out["node"] = node.into();
        if let Some(set) = &matched {
            out["referenceValueSet"] = serde_json::json!({
                "name": set.verdict.set.name,
                "version": set.verdict.set.version,
                "file": set.file.display().to_string(),
            });
            out["warnings"] = set.verdict.warnings.clone().into();
        }
        println!("{out:#}");
    } else {
        if let Some(set) = &matched {
            print!("{}", render_set(set));
        }
        print!("{}", render_table(node, &report));
    }
    Ok(if report.passed() { 0 } else { 1 })
}

/// What a vTPM node is checked against: `--measurements` or the signed
/// sets, `--ak-trust`, `--expected-events` and the cluster id.
struct VtpmCheck {
    reference: VtpmReference,
    events: Option<EventList>,
    validator: Arc<dyn Validator>,
    cluster_id: Vec<u8>,
}

/// Where a vTPM node's reference values come from.
enum VtpmReference {
    /// `--measurements`.
    Measurements(MeasurementPolicy),
    /// `--reference-values-dir`.
    Sets(Box<SignedSets>),
}

fn vtpm_check(vtpm: &VtpmConfig, cluster: &ClusterId) -> Result<VtpmCheck, VerifyError> {
    // Every PCR is compared afterwards, so the validator holds no policy:
    // it checks what evidence must always pass (the policy compared
    // against must pin the image all the same).
    let validator = vtpm
        .validators
        .clone()
        .announce_insecure_with(common::announce_insecure_any_ak)
        .require_unmarked(false)
        .build_comparing_later(vtpm.policy.clone())
        .map_err(VerifyError::Measurements)?;
    Ok(VtpmCheck {
        reference: VtpmReference::Measurements(vtpm.policy.clone()),
        events: vtpm.validators.expected_events().cloned(),
        validator,
        cluster_id: cluster_id(cluster)?,
    })
}

/// The vTPM check of `--reference-values-dir`: the sets read once, now;
/// each file ignored is said so on stderr.
fn sets_check(
    vtpm: &VtpmSettings,
    config: &SetsConfig,
    cluster: &ClusterId,
) -> Result<VtpmCheck, VerifyError> {
    let builder = vtpm
        .validator_builder()
        .map_err(common::NodeCheckError)?
        .announce_insecure_with(common::announce_insecure_any_ak)
        .require_unmarked(false);
    let sets = SignedSets::read(config, confboot_util::time::unix_now())?;
    Ok(VtpmCheck {
        reference: VtpmReference::Sets(Box::new(sets)),
        events: builder.expected_events().cloned(),
        // The set's PCRs are compared afterwards (every one reported); the
        // sets were read as pinning the image.
        validator: builder.build_evidence_only(),
        cluster_id: cluster_id(cluster)?,
    })
}

/// The `--release-key` files, read (bounded) and parsed.
fn read_release_keys(paths: &[PathBuf]) -> Result<Vec<ReleaseKey>, VerifyError> {
    paths
        .iter()
        .map(|path| {
            let pem = confboot_util::fs::read_bounded(path, cose::MAX_KEY_PEM_BYTES as u64)
                .map_err(VerifyError::ReadReleaseKey)?;
            ReleaseKey::from_pem(&pem).map_err(|error| VerifyError::ReleaseKey {
                path: path.clone(),
                error,
            })
        })
        .collect()
}

/// The signed sets of `--reference-values-dir`, read once: the live ones,
/// and those signed by a release key whose window has ended (to name the
/// set a node matches only an expired one of).
struct SignedSets {
    sets: ReferenceSets,
    expired: Vec<ExpiredSet>,
    now: i64,
    warning: i64,
}

/// A set whose signature verifies but whose window has ended.
struct ExpiredSet {
    name: SetName,
    not_after: i64,
    policy: MeasurementPolicy,
}

/// A node refused by the signed sets: what is printed, the error its
/// trust vector is made of, and the set it names, if any.
struct SetsRefused {
    why: String,
    error: AttestationError,
    policy_id: Option<String>,
}

/// The set a node's PCRs match, and the verdict.
struct MatchedSet {
    verdict: SetVerdict,
    file: PathBuf,
    digest: [u8; 32],
    policy: MeasurementPolicy,
    events: EventList,
}

impl MatchedSet {
    /// The appraisal policy id of the set: its name, version and the
    /// SHA-256 of its signed file.
    fn policy_id(&self) -> String {
        format!(
            "reference-value set {} sha-256:{}",
            self.verdict.set,
            confboot_util::hex::encode(&self.digest)
        )
    }
}

impl SignedSets {
    fn read(config: &SetsConfig, now: i64) -> Result<SignedSets, VerifyError> {
        let option = format!("--{}", REFERENCE_VALUES_DIR.long);
        let keys = read_release_keys(&config.release_keys)?;
        let mut sets = ReferenceSets::new(&config.dir, Variant::QemuVtpm, keys.clone())
            .map_err(VerifyError::Sets)?;
        let refresh = sets.refresh(now).map_err(VerifyError::Sets)?;
        let mut expired = Vec::new();
        for (file, why) in &refresh.refused {
            eprintln!(
                "confboot verify: {option}: {} ignored: {why}",
                file.display()
            );
            if let RefusedFile::Set(ReferenceError::Expired { not_after, .. }) = why {
                expired.extend(expired_set(file, &keys, *not_after));
            }
        }
        Ok(SignedSets {
            sets,
            expired,
            now,
            warning: config.warning,
        })
    }

    /// Validates the node's evidence (no PCR compared) and finds the live
    /// set its PCRs match (PCR 15 aside: it holds the cluster's mark).
    fn appraise(
        &self,
        doc: &AttestationDocument,
        extra_data: &[u8; EXTRA_DATA_LEN],
        vtpm: &VtpmCheck,
    ) -> Result<MatchedSet, Box<SetsRefused>> {
        let attested = vtpm
            .validator
            .validate(&doc.evidence, extra_data)
            .map_err(|e| {
                Box::new(SetsRefused {
                    why: format!("its evidence is refused: {e}"),
                    error: e,
                    policy_id: None,
                })
            })?;
        let ignored = [CLUSTER_ID_PCR];
        let refusal =
            match self
                .sets
                .check(&attested.measurements, self.now, self.warning, &ignored)
            {
                Ok(verdict) => {
                    let set = self
                        .sets
                        .live()
                        .iter()
                        .filter(|s| s.name == verdict.set)
                        .max_by_key(|s| s.not_after)
                        .expect("the verdict names a live set");
                    return Ok(MatchedSet {
                        file: set.file.clone(),
                        digest: set.digest,
                        policy: set.policy.clone(),
                        events: set.events.clone(),
                        verdict,
                    });
                }
                Err(SetsRefusal::NoMatch { differences }) => {
                    match self.expired.iter().find(|s| {
                        let mut policy = s.policy.clone();
                        policy.remove(CLUSTER_ID_PCR);
                        policy.check(&attested.measurements).is_ok()
                    }) {
                        Some(set) => SetsRefusal::Retired {
                            name: set.name.clone(),
                            retired_at: set.not_after,
                            reason: Retirement::Expired,
                        },
                        None => SetsRefusal::NoMatch { differences },
                    }
                }
                Err(other) => other,
            };
        let policy_id = match &refusal {
            SetsRefusal::Retired { name, .. } => Some(format!("reference-value set {name}")),
            SetsRefusal::NoMatch { .. } => None,
        };
        // As joinsvc's validator: one live set's difference is a
        // measurement refusal, anything else a policy one.
        let error = refusal.clone().into_error();
        Err(Box::new(SetsRefused {
            why: format!("its measurements are refused: {refusal}"),
            error,
            policy_id,
        }))
    }
}

/// The set of `file`, expired at `not_after`, if its signature verifies
/// with `keys` and it holds vTPM reference values (read as of the last
/// second of its window).
fn expired_set(file: &std::path::Path, keys: &[ReleaseKey], not_after: i64) -> Option<ExpiredSet> {
    use confboot_appraisal::reference::{MAX_SET_BYTES, open};
    let bytes = confboot_util::fs::read_bounded(file, MAX_SET_BYTES as u64).ok()?;
    let set = open(&bytes, keys, not_after).ok()?.set;
    let reference = set.variant(Variant::QemuVtpm)?;
    Some(ExpiredSet {
        name: SetName {
            name: set.name.clone(),
            version: set.version.clone(),
        },
        not_after,
        policy: reference.policy.clone(),
    })
}

/// The lines naming the set a node matched, and its warnings.
fn render_set(set: &MatchedSet) -> String {
    let mut out = format!(
        "reference-value set {} ({}) matched\n",
        set.verdict.set,
        set.file.display()
    );
    for warning in &set.verdict.warnings {
        out.push_str(&format!("warning: {warning}\n"));
    }
    out
}

fn print_refused(node: &str, why: &str, json: bool) {
    if json {
        let out = serde_json::json!({"node": node, "verified": false, "error": why});
        println!("{out:#}");
    } else {
        println!("node {node}: ✗ {why}");
    }
}

/// Checks SEV-SNP evidence with every check of `snp` (report data bound to
/// `extra_data`, the session's) and prints each; the exit code. An SEV-SNP report carries no
/// cluster mark, so membership is not checked (and the output says so).
fn snp_verdict(
    node: &str,
    doc: &AttestationDocument,
    extra_data: &[u8; EXTRA_DATA_LEN],
    snp: &SnpValidator,
    json: bool,
    ear: Option<&EarSigner>,
) -> i32 {
    let evidence = match SnpEvidence::decode(&doc.evidence) {
        Ok(e) => e,
        Err(e) => {
            if let Some(ear) = ear {
                let vector = TrustVector::of_refusal(&e);
                return ear.print(doc.variant, &doc.evidence, false, vector);
            }
            print_refused(node, &format!("its evidence is refused: {e}"), json);
            return 1;
        }
    };
    let checks = snp.verify_report_detailed(&evidence, &ReportDataCheck::ExtraData(*extra_data));
    let failure = first_failure(&checks);
    if let Some(ear) = ear {
        let verdict = Verdict {
            passed: failure.is_none(),
            debuggable: evidence.report.debug_allowed(),
        };
        let vector = TrustVector::of_snp_checks(&checks, verdict);
        return ear.print(doc.variant, &doc.evidence, verdict.passed, vector);
    }
    let membership = "cluster membership not checked: an SEV-SNP report carries no cluster mark";
    if json {
        let list: Vec<String> = checks.iter().map(|c| c.to_string()).collect();
        let mut out = serde_json::json!({
            "node": node,
            "variant": doc.variant.name(),
            "verified": failure.is_none(),
            "checks": list,
            "note": membership,
        });
        if let Some(e) = &failure {
            out["error"] = e.to_string().into();
        }
        println!("{out:#}");
    } else {
        println!(
            "node {node}: {} evidence for a fresh nonce (this TLS session's exporter)",
            doc.variant
        );
        for c in &checks {
            println!("  {c}");
        }
        println!("  {membership}");
        match &failure {
            None => println!("verified: every check passes"),
            Some(e) => println!("NOT verified: {e}"),
        }
    }
    i32::from(failure.is_some())
}

/// The report as the table `confboot verify` prints.
fn render_table(node: &str, report: &NodeReport) -> String {
    let mut out = format!(
        "node {node}: {} evidence for a fresh nonce (this TLS session's exporter); signature, binding and attestation key verified{}\n",
        report.variant,
        if report.has_event_log {
            "; its event log replays to the quote"
        } else {
            "; it sent no event log"
        }
    );
    out.push_str(&format!(
        "{:>3}  {:<64}  {:<64}  {:<10}  ok\n",
        "PCR", "expected", "actual", "policy"
    ));
    for row in &report.rows {
        let actual = row
            .actual
            .as_deref()
            .map_or_else(|| "(not quoted)".to_string(), confboot_util::hex::encode);
        let policy = match (row.enforced, row.source) {
            (true, "cluster id") => "cluster id",
            (true, _) => "enforced",
            (false, _) => "warnOnly",
        };
        out.push_str(&format!(
            "{:>3}  {}  {:<64}  {:<10}  {}\n",
            row.pcr,
            confboot_util::hex::encode(&row.expected),
            actual,
            policy,
            if row.matches() { "✓" } else { "✗" }
        ));
        if let Some(why) = &row.explanation {
            out.push_str(&format!("     {why}\n"));
        } else if !row.matches() && !report.has_event_log {
            out.push_str("     (no event log from the node to explain it)\n");
        }
    }
    let failed: Vec<String> = report
        .rows
        .iter()
        .filter(|r| r.enforced && !r.matches())
        .map(|r| r.pcr.to_string())
        .collect();
    if failed.is_empty() {
        out.push_str("verified: every enforced PCR matches\n");
    } else {
        out.push_str(&format!(
            "NOT verified: enforced PCR {} differ{}\n",
            failed.join(", "),
            if failed.len() == 1 { "s" } else { "" }
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(args: &[&str]) -> Result<Config, String> {
        let m = CMD.parse(args.iter().map(|s| s.to_string())).unwrap();
        Config::from_matches(&m).map_err(|e| e.to_string())
    }

    #[test]
    fn every_option_the_config_reads_is_declared() {
        // Config::from_matches reads every option whatever the others say:
        // one parse reads them all (an undeclared one panics).
        let c = config(&["--node", "n", "--measurements", "m.json", "--ak-trust", "x"]).unwrap();
        assert_eq!(c.node, "n:8080");
        assert!(!c.json);
        assert_eq!(c.timeout, Duration::from_secs(30));
        assert_eq!(
            c.cluster_id,
            ClusterId::File(common::DEFAULT_CLUSTER_FILE.into())
        );
    }

    #[test]
    fn the_cluster_id_is_checked_for_vtpm_nodes_only() {
        let vtpm = ["--node", "n", "--measurements", "m.json", "--ak-trust", "x"];
        let c = config(&[&vtpm[..], &["--cluster-id", "ab"]].concat()).unwrap();
        assert_eq!(c.cluster_id, ClusterId::Given(vec![0xab]));
        let e = config(&[&vtpm[..], &["--cluster-id", "zz"]].concat()).unwrap_err();
        assert!(e.starts_with("--cluster-id: not hex"), "{e}");
        let m = CMD
            .parse(
                [&vtpm[..], &["--cluster-id", "zz"]]
                    .concat()
                    .iter()
                    .map(|s| s.to_string()),
            )
            .unwrap();
        assert!(matches!(
            Config::from_matches(&m),
            Err(VerifyError::ClusterIdOption(HexOptionError::NotHex { .. }))
        ));
        let snp = [
            "--node",
            "n",
            "--variants",
            "sev-snp",
            "--snp-policy",
            "p.json",
        ];
        assert!(config(&[&snp[..], &["--cluster-id", "zz"]].concat()).is_ok());
    }

    #[test]
    fn signed_sets_replace_the_measurements_and_need_a_release_key() {
        let base = ["--node", "n", "--ak-trust", "x"];
        let sets = ["--reference-values-dir", "sets"];
        let c = config(&[&base[..], &sets[..], &["--release-key", "a.pem"]].concat()).unwrap();
        assert_eq!(
            c.sets,
            Some(SetsConfig {
                dir: "sets".into(),
                release_keys: vec!["a.pem".into()],
                warning: 7 * 86_400,
            })
        );
        let e = config(&[&base[..], &sets[..]].concat()).unwrap_err();
        assert_eq!(
            e,
            "--reference-values-dir needs --release-key (sets are accepted only signed)"
        );
        let both = [
            &base[..],
            &sets[..],
            &["--release-key", "a", "--measurements", "m"],
        ]
        .concat();
        assert_eq!(
            config(&both).unwrap_err(),
            "--reference-values-dir replaces --measurements: give one of the two"
        );
        let e = config(&[&base[..], &["--measurements", "m", "--release-key", "a"]].concat());
        assert_eq!(
            e.unwrap_err(),
            "--release-key goes with --reference-values-dir"
        );
    }
}
