//! `confboot verify`: asks a running node's verify service (the node
//! agent, `GET /?nonce=`) for a fresh quote and checks it: the signature
//! and the nonce, the AK trust, the carried event log's replay, every PCR of
//! the policy, and PCR 15 against the cluster's mark. Prints one row per
//! PCR (or JSON with `-o json`). With `--variants` accepting `sev-snp`,
//! an SEV-SNP document is checked against `--snp-policy` instead, every
//! check printed (its report carries no cluster mark); a document of a
//! variant not accepted is refused (exit 1). Exit status: 0 verified, 1 a check
//! failed, 2 bad arguments, an unreachable node or an answer that is not an
//! attestation document. The checks live in [`nodeagent::verify`]; this
//! reads files, asks and prints.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use confboot_util::args::{Command, Matches, Opt, VERBOSITY, parse_or_exit};
use std::sync::Arc;

use confboot_attest::snp::{ReportDataCheck, SnpEvidence, SnpValidator, first_failure};
use confboot_attest::tpm::event_log::EventList;
use confboot_attest::{MeasurementPolicy, Validator, Variant};
use confboot_proto::DEFAULT_VERIFY_PORT;
use confboot_util::fs::{MAX_CONFIG_FILE_BYTES, read_bounded_text};
use nodeagent::verify::http::fetch_document;
use nodeagent::verify::{
    AttestationDocument, NodeReport, VERIFY_NONCE_LEN, check_node, extra_data, new_nonce,
};

use crate::common;

/// The cluster file `confboot init` writes, read for the cluster id.
const DEFAULT_CLUSTER_FILE: &str = "confboot-cluster.json";

const CMD: Command = Command {
    name: "confboot verify",
    about: "Verify a running node: asks its verify service (the node agent, HTTP GET /?nonce= on\n\
            port 8080) for a vTPM quote bound to a fresh random nonce, and checks the quote's\n\
            signature and nonce, the attestation key against --ak-trust, the event log the node\n\
            sends (it must replay to the quoted PCRs), every PCR of --measurements, and PCR 15\n\
            against the mark of the cluster id (--cluster-id, or the cluster file `confboot init`\n\
            wrote; it replaces a PCR 15 entry of the policy, which describes unbootstrapped\n\
            nodes). Prints one row per PCR: expected, actual, enforced or warnOnly, ✓ or ✗, and under\n\
            a differing PCR the first event of the node's log that differs from --expected-events.\n\
            An SEV-SNP node (--variants sev-snp) is checked against --snp-policy instead, one line per\n\
            check (its report carries no cluster mark); a variant --variants does not accept is refused.\n\
            Exit status: 0 verified, 1 a check failed, 2 bad arguments, unreachable node or an\n\
            answer that is not an attestation document.",
    usage: "confboot verify --node HOST[:PORT] --measurements FILE --ak-trust MODE [--cluster-id HEX | --cluster-file FILE] [-o table|json]",
    opts: &[
        Opt::value(
            "node",
            "HOST[:PORT]",
            "The node's verify service (default port 8080)",
        ),
        common::MEASUREMENTS,
        common::AK_TRUST,
        common::EXPECTED_EVENTS,
        common::VARIANTS,
        common::SNP_POLICY,
        Opt::value(
            "cluster-id",
            "HEX",
            "The cluster id the node must be marked with (PCR 15)",
        ),
        Opt::value(
            "cluster-file",
            "FILE",
            "Where to read the cluster id when --cluster-id is not given (confboot init's clusterId)",
        )
        .default(DEFAULT_CLUSTER_FILE),
        Opt::value("output", "FORMAT", "table, or json for machines")
            .short('o')
            .default("table"),
        Opt::value(
            "timeout",
            "SECONDS",
            "Bound on connecting, asking and reading the answer",
        )
        .default("30"),
        VERBOSITY,
    ],
};

// The help text above names the default port.
const _: () = assert!(DEFAULT_VERIFY_PORT == 8080);

/// Runs `confboot verify`; returns the exit code.
pub fn run(args: Vec<String>) -> i32 {
    let m = parse_or_exit(&CMD, args);
    let verbosity = match m.verbosity() {
        Ok(v) => v,
        Err(e) => return usage_error(&e.to_string()),
    };
    confboot_util::logging::init("verify", verbosity);
    match verify(&m) {
        Ok(code) => code,
        Err(e) => usage_error(&e),
    }
}

fn usage_error(msg: &str) -> i32 {
    eprintln!("confboot verify: {msg}");
    2
}

/// The cluster id: `--cluster-id`, or the cluster file's `clusterId`.
fn cluster_id(m: &Matches) -> Result<Vec<u8>, String> {
    if let Some(hex) = m.value("cluster-id") {
        return confboot_util::hex::decode(hex)
            .map_err(|e| format!("--cluster-id: not hex: {e}"))
            .and_then(|id| match id.len() {
                1..=64 => Ok(id),
                n => Err(format!("--cluster-id: {n} bytes, want 1 to 64")),
            });
    }
    let path = m.value("cluster-file").expect("default");
    let text = read_bounded_text(Path::new(path), MAX_CONFIG_FILE_BYTES)
        .map_err(|e| format!("no --cluster-id, and the cluster file cannot be read: {e}"))?;
    let value: serde_json::Value =
        serde_json::from_str(&text).map_err(|e| format!("cluster file {path}: not JSON: {e}"))?;
    let hex = value
        .get("clusterId")
        .and_then(|v| v.as_str())
        .ok_or_else(|| format!("cluster file {path}: no \"clusterId\" string"))?;
    confboot_util::hex::decode(hex).map_err(|e| format!("cluster file {path}: clusterId: {e}"))
}

fn verify(m: &Matches) -> Result<i32, String> {
    if let Some(extra) = m.positional().first() {
        return Err(format!("unexpected argument {extra:?}"));
    }
    let node = common::with_port(
        m.required("node").map_err(|e| e.to_string())?,
        DEFAULT_VERIFY_PORT,
    );
    let json = match m.value("output").expect("default") {
        "table" => false,
        "json" => true,
        other => return Err(format!("--output {other:?}: want table or json")),
    };
    let timeout = match m.value("timeout").expect("default").parse::<u64>() {
        Ok(s) if (1..=3600).contains(&s) => Duration::from_secs(s),
        _ => return Err("--timeout: want whole seconds from 1 to 3600".into()),
    };
    // Every option is read before the node is asked: a bad one is exit 2.
    let accepted = common::VARIANT_OPTIONS
        .accepted(m)
        .map_err(|e| e.to_string())?;
    let vtpm = if accepted.contains(&Variant::QemuVtpm) {
        Some(vtpm_check(m)?)
    } else {
        None
    };
    let snp = if accepted.contains(&Variant::SevSnp) {
        Some(
            common::VARIANT_OPTIONS
                .snp_validator(m)
                .map_err(|e| e.to_string())?,
        )
    } else {
        None
    };

    let nonce = new_nonce().map_err(|e| e.to_string())?;
    let doc = fetch_document(&node, &nonce, timeout)
        .map_err(|e| format!("node {node}: no attestation document: {e}"))?;
    if let (Variant::SevSnp, Some(snp)) = (doc.variant, &snp) {
        return Ok(snp_verdict(&node, &doc, &nonce, snp, json));
    }
    let Some(vtpm) = vtpm.filter(|_| doc.variant == Variant::QemuVtpm) else {
        let names: Vec<&str> = accepted.iter().map(|v| v.name()).collect();
        let why = format!(
            "it attests with {}, which --variants does not accept ({})",
            doc.variant,
            names.join(", ")
        );
        print_refused(&node, &why, json);
        return Ok(1);
    };
    let report = match check_node(
        &doc,
        &nonce,
        vtpm.validator.as_ref(),
        &vtpm.policy,
        vtpm.events.as_ref(),
        &vtpm.cluster_id,
    ) {
        Ok(report) => report,
        Err(e) => {
            print_refused(&node, &format!("its evidence is refused: {e}"), json);
            return Ok(1);
        }
    };
    if json {
        let mut out = report.to_json();
        out["node"] = node.clone().into();
        println!("{out:#}");
    } else {
        print!("{}", render_table(&node, &report));
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

fn vtpm_check(m: &Matches) -> Result<VtpmCheck, String> {
    let options = common::VALIDATOR_OPTIONS;
    let policy = options
        .required_measurements(m)
        .map_err(|e| e.to_string())?;
    let events = options.expected_events(m).map_err(|e| e.to_string())?;
    // Every PCR is compared afterwards, so the validator holds no policy:
    // it checks what evidence must always pass.
    let validator = options
        .builder(m)
        .map_err(|e| e.to_string())?
        .require_unmarked(false)
        .build(MeasurementPolicy::new(BTreeMap::new()));
    Ok(VtpmCheck {
        policy,
        events,
        validator,
        cluster_id: cluster_id(m)?,
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
/// `nonce`) and prints each; the exit code. An SEV-SNP report carries no
/// cluster mark, so membership is not checked (and the output says so).
fn snp_verdict(
    node: &str,
    doc: &AttestationDocument,
    nonce: &[u8; VERIFY_NONCE_LEN],
    snp: &SnpValidator,
    json: bool,
) -> i32 {
    let evidence = match SnpEvidence::decode(&doc.evidence) {
        Ok(e) => e,
        Err(e) => {
            print_refused(node, &format!("its evidence is refused: {e}"), json);
            return 1;
        }
    };
    let checks =
        snp.verify_report_detailed(&evidence, &ReportDataCheck::ExtraData(extra_data(nonce)));
    let failure = first_failure(&checks);
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
        println!("node {node}: {} evidence for a fresh nonce", doc.variant);
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
        "node {node}: {} evidence for a fresh nonce; signature, nonce and attestation key verified{}\n",
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
