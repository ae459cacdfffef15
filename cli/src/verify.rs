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
//! attestation document. The checks live in [`nodeagent::verify`]; this
//! reads files, asks and prints.

use std::path::PathBuf;
use std::time::Duration;

use confboot_util::args::{Command, Matches, Opt, VERBOSITY, parse_or_exit};
use std::sync::Arc;

use confboot_attest::EXTRA_DATA_LEN;
use confboot_attest::config::VtpmConfig;
use confboot_attest::snp::{ReportDataCheck, SnpEvidence, SnpValidator, first_failure};
use confboot_attest::tpm::event_log::EventList;
use confboot_attest::{MeasurementPolicy, Validator, Variant};
use confboot_proto::DEFAULT_VERIFY_PORT;
use nodeagent::verify::service::{SessionEvidence, fetch_document};
use nodeagent::verify::{AttestationDocument, NodeReport, check_node};

use crate::common;
use crate::ear_output::{EAR_KEY, EarSigner};
use confboot_attest::AttestationError;
use confboot_attest::ear::{TrustVector, Verdict};

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

const CMD: Command = Command {
    name: "confboot verify",
    about: "Verify a running node: connects to its verify service (the node agent, aTLS on port\n\
            8080: TLS 1.3, ALPN confboot/2; this side does not attest) and checks the vTPM quote\n\
            the node sends, bound to this TLS session's exporter (a fresh value per connection: a\n\
            relay or a recorded answer is refused), the quote's signature, the attestation key\n\
            against --ak-trust, the event log the node sends (it must replay to the quoted\n\
            PCRs), every PCR of --measurements, and PCR 15\n\
            against the mark of the cluster id (--cluster-id, or the cluster file `confboot init`\n\
            wrote; it replaces a PCR 15 entry of the policy, which describes unbootstrapped\n\
            nodes). Prints one row per PCR: expected, actual, enforced or warnOnly, ✓ or ✗, and under\n\
            a differing PCR the first event of the node's log that differs from --expected-events.\n\
            An SEV-SNP node (--variants sev-snp) is checked against --snp-policy instead, one line per\n\
            check (its report carries no cluster mark); a variant --variants does not accept is refused.\n\
            With -o ear, prints the verdict as an EAT attestation result (draft-ietf-rats-ear): one\n\
            JWT signed with --ear-key (ES256).\n\
            Exit status: 0 verified, 1 a check failed, 2 bad arguments, unreachable node or an\n\
            answer that is not an attestation document.",
    usage: "confboot verify --node HOST[:PORT] --measurements FILE --ak-trust MODE [--cluster-id HEX | --cluster-file FILE] [-o table|json|ear --ear-key KEY.pem]",
    opts: &[
        NODE,
        common::MEASUREMENTS,
        common::AK_TRUST,
        common::EXPECTED_EVENTS,
        common::VARIANTS,
        common::SNP_POLICY,
        common::TDX_POLICY,
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
}

/// Where the cluster id the node must be marked with comes from.
#[derive(Clone, Debug, PartialEq, Eq)]
enum ClusterId {
    /// `--cluster-id`.
    Given(Vec<u8>),
    /// The cluster file `confboot init` wrote.
    File(PathBuf),
}

impl Config {
    /// Reads every option (each once, whatever the others say); every
    /// one is checked before the node is asked, a bad one is exit 2.
    fn from_matches(m: &Matches) -> Result<Config, String> {
        let node = m.required(&NODE).map(str::to_string);
        let output = m.value(&OUTPUT).expect("has a default");
        let timeout = m.value(&TIMEOUT).expect("has a default");
        let check = common::NodeCheck::read(m);
        let cluster_id = m.value(&CLUSTER_ID);
        let cluster_file = m.value(&CLUSTER_FILE).expect("has a default");
        let ear_key = m.value(&EAR_KEY).map(PathBuf::from);
        if let Some(extra) = m.positional().first() {
            return Err(format!("unexpected argument {extra:?}"));
        }
        let node = common::with_port(&node.map_err(|e| e.to_string())?, DEFAULT_VERIFY_PORT);
        let (json, ear_key) = match (output, ear_key) {
            ("table", None) => (false, None),
            ("json", None) => (true, None),
            ("ear", Some(key)) => (false, Some(key)),
            ("ear", None) => return Err(format!("-o ear needs --{}", EAR_KEY.long)),
            ("table" | "json", Some(_)) => {
                return Err(format!("--{} goes with -o ear", EAR_KEY.long));
            }
            (other, _) => {
                return Err(format!(
                    "--{} {other:?}: want table, json or ear",
                    OUTPUT.long
                ));
            }
        };
        let timeout = match timeout.parse::<u64>() {
            Ok(s) if (1..=3600).contains(&s) => Duration::from_secs(s),
            _ => {
                return Err(format!(
                    "--{}: want whole seconds from 1 to 3600",
                    TIMEOUT.long
                ));
            }
        };
        let check = check?;
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
        Err(e) => usage_error(&e),
    }
}

fn usage_error(msg: &str) -> i32 {
    eprintln!("confboot verify: {msg}");
    2
}

/// A `--cluster-id`: 1 to 64 bytes of hex.
fn parse_cluster_id(hex: &str) -> Result<Vec<u8>, String> {
    confboot_util::hex::decode(hex)
        .map_err(|e| format!("--{}: not hex: {e}", CLUSTER_ID.long))
        .and_then(|id| match id.len() {
            1..=64 => Ok(id),
            n => Err(format!("--{}: {n} bytes, want 1 to 64", CLUSTER_ID.long)),
        })
}

/// The cluster id: `--cluster-id`, or the cluster file's `clusterId`.
fn cluster_id(source: &ClusterId) -> Result<Vec<u8>, String> {
    let file = match source {
        ClusterId::Given(id) => return Ok(id.clone()),
        ClusterId::File(file) => file,
    };
    common::cluster_file_field(file, "clusterId")
        .map_err(|e| format!("no --{}, and {e}", CLUSTER_ID.long))
}

fn verify(config: &Config) -> Result<i32, String> {
    let (node, json) = (config.node.as_str(), config.json);
    // Every file is read before the node is asked: a bad one is exit 2.
    let attestation = config
        .check
        .settings
        .load()
        .map_err(|e| common::describe(&e))?;
    let accepted = &attestation.variants;
    let vtpm = match &attestation.vtpm {
        Some(vtpm) => Some(vtpm_check(vtpm, &config.cluster_id)?),
        None => None,
    };
    let snp = attestation.snp.as_ref();
    let ear = match &config.ear_key {
        Some(path) => {
            let settings = &config.check.settings;
            let policy = match &settings.vtpm {
                Some(vtpm) => vtpm.measurements.as_deref(),
                None => settings.snp_policy.as_deref(),
            };
            let id = crate::ear_output::policy_id(policy)?;
            Some(EarSigner::load(path, "confboot verify", id)?)
        }
        None => None,
    };

    let SessionEvidence {
        document: doc,
        extra_data,
    } = fetch_document(node, config.timeout)
        .map_err(|e| format!("node {node}: no attestation document: {e}"))?;
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
    let report = match check_node(
        &doc,
        &extra_data,
        vtpm.validator.as_ref(),
        &vtpm.policy,
        vtpm.events.as_ref(),
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
    if let Some(ear) = &ear {
        let enforced = |mark: bool| {
            report
                .rows
                .iter()
                .filter(|r| r.enforced && (r.source == "cluster id") == mark)
                .all(|r| r.matches())
        };
        let vector = TrustVector::of_vtpm(enforced(false), enforced(true));
        return Ok(ear.print(doc.variant, &doc.evidence, report.passed(), vector));
    }
    if json {
        let mut out = report.to_json();
        out["node"] = node.into();
        println!("{out:#}");
    } else {
        print!("{}", render_table(node, &report));
    }
    Ok(if report.passed() { 0 } else { 1 })
}

/// What a vTPM node is checked against: `--measurements`, `--ak-trust`,
/// `--expected-events` and the cluster id.
struct VtpmCheck {
    policy: MeasurementPolicy,
    events: Option<EventList>,
    validator: Arc<dyn Validator>,
    cluster_id: Vec<u8>,
}

fn vtpm_check(vtpm: &VtpmConfig, cluster: &ClusterId) -> Result<VtpmCheck, String> {
    // Every PCR is compared afterwards, so the validator holds no policy:
    // it checks what evidence must always pass (the policy compared
    // against must pin the image all the same).
    let validator = vtpm
        .validators
        .clone()
        .announce_insecure_with(common::announce_insecure_any_ak)
        .require_unmarked(false)
        .build_comparing_later(vtpm.policy.clone())
        .map_err(|e| format!("--measurements: {e}"))?;
    Ok(VtpmCheck {
        policy: vtpm.policy.clone(),
        events: vtpm.validators.expected_events().cloned(),
        validator,
        cluster_id: cluster_id(cluster)?,
    })
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
        Config::from_matches(&m)
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
}
