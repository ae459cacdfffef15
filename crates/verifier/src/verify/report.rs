//! Checking a verify service's answer against a policy and a cluster id.

use std::collections::BTreeMap;

use super::AttestationDocument;
use confboot_attest::{AttestationError, EXTRA_DATA_LEN, MeasurementPolicy, Validator, Variant};
use confboot_cluster::mark::marked_pcr15;
use confboot_tpm::CLUSTER_ID_PCR;
use confboot_tpm::event_log::EventList;
use confboot_vtpm::carried_event_list;

/// One PCR of a node: what the policy (or the cluster's mark) expects,
/// what the node's quote says, and why they differ when they do.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PcrRow {
    /// The PCR.
    pub pcr: u32,
    /// The expected value.
    pub expected: Vec<u8>,
    /// The quoted value (`None`: the evidence does not quote this PCR).
    pub actual: Option<Vec<u8>>,
    /// Whether a difference fails the check (`false`: warnOnly).
    pub enforced: bool,
    /// Where the expected value comes from: `"policy"` or `"cluster id"`.
    pub source: &'static str,
    /// For a differing PCR: the first event of the node's log that differs
    /// from the expected log, or what the value means.
    pub explanation: Option<String>,
}

impl PcrRow {
    /// Whether the quoted value is the expected one.
    pub fn matches(&self) -> bool {
        self.actual.as_deref() == Some(self.expected.as_slice())
    }
}

/// A node's attestation laid out against what it should run: one row per
/// PCR of the policy, PCR 15 holding the cluster's mark.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeReport {
    /// The evidence's variant.
    pub variant: Variant,
    /// The rows, by PCR.
    pub rows: Vec<PcrRow>,
    /// Whether the node's evidence carried an event log (replayed to its
    /// quote), which explanations need.
    pub has_event_log: bool,
}

impl NodeReport {
    /// Whether every enforced row matches.
    pub fn passed(&self) -> bool {
        self.rows.iter().all(|r| r.matches() || !r.enforced)
    }

    /// The report as JSON, for machines (`confboot verify -o json`).
    pub fn to_json(&self) -> serde_json::Value {
        let rows: Vec<serde_json::Value> = self
            .rows
            .iter()
            .map(|r| {
                serde_json::json!({
                    "pcr": r.pcr,
                    "expected": confboot_util::hex::encode(&r.expected),
                    "actual": r.actual.as_deref().map(confboot_util::hex::encode),
                    "enforced": r.enforced,
                    "source": r.source,
                    "ok": r.matches(),
                    "explanation": r.explanation,
                })
            })
            .collect();
        serde_json::json!({
            "variant": self.variant.name(),
            "verified": self.passed(),
            "eventLog": self.has_event_log,
            "pcrs": rows,
        })
    }
}

/// Checks a verify service's `doc` against `extra_data`, the value the
/// session it came on binds (its exporter for the server's role:
/// [`super::service::SessionEvidence::extra_data`]).
///
/// `validator` checks what a node's evidence must always pass (the
/// signature, the binding to that session, the trust in the signing key, the
/// carried event log's replay) and should hold no measurement policy of its
/// own (an empty one, PCR 15 not required all-zero), so that every PCR can
/// be reported rather than the first that differs: those are compared
/// here, the `policy`'s PCRs and PCR 15 against the mark of `cluster_id`
/// (which replaces any PCR 15 entry of the policy: a bootstrapped node is
/// marked). A differing PCR is explained by the first differing event when
/// `expected_events` is given and the node sent its log.
///
/// An `Err` is evidence that fails those checks (forged, made for another
/// session (relayed or replayed), of an
/// untrusted key, of another variant); a report that did not pass is a
/// node whose measurements differ.
pub fn check_node(
    doc: &AttestationDocument,
    extra_data: &[u8; EXTRA_DATA_LEN],
    validator: &dyn Validator,
    policy: &MeasurementPolicy,
    expected_events: Option<&EventList>,
    cluster_id: &[u8],
) -> Result<NodeReport, AttestationError> {
    if doc.variant != validator.variant() {
        return Err(AttestationError::WrongVariant {
            expected: validator.variant(),
            actual: doc.variant.name().to_string(),
        });
    }
    let attested = validator.validate(&doc.evidence, extra_data)?;
    let node_events = match doc.variant {
        Variant::QemuVtpm => carried_event_list(&doc.evidence)?,
        Variant::SevSnp | Variant::Tdx | Variant::AzureSevSnp => None,
    };
    let explain = |pcr: u32| {
        expected_events
            .zip(node_events.as_ref())
            .and_then(|(want, got)| want.explain(pcr, got))
    };
    let mut expected: BTreeMap<u32, (Vec<u8>, bool, &'static str)> = policy
        .entries()
        .iter()
        .map(|(pcr, e)| (*pcr, (e.value.clone(), !e.warn_only, "policy")))
        .collect();
    expected.insert(
        CLUSTER_ID_PCR,
        (marked_pcr15(cluster_id).to_vec(), true, "cluster id"),
    );
    let rows = expected
        .into_iter()
        .map(|(pcr, (value, enforced, source))| {
            let actual = attested.measurements.get(&pcr).cloned();
            let mut row = PcrRow {
                pcr,
                expected: value,
                actual,
                enforced,
                source,
                explanation: None,
            };
            if !row.matches() {
                row.explanation = if pcr == CLUSTER_ID_PCR {
                    Some(match &row.actual {
                        None => "PCR 15 is not quoted".to_string(),
                        Some(v) if v.iter().all(|b| *b == 0) => {
                            "PCR 15 is all-zero: the node is not bootstrapped (not marked with a cluster id)".to_string()
                        }
                        Some(_) => "PCR 15 holds another mark: the node was bootstrapped into another cluster, or PCR 15 was extended again".to_string(),
                    })
                } else {
                    explain(pcr)
                };
            }
            row
        })
        .collect();
    Ok(NodeReport {
        variant: doc.variant,
        rows,
        has_event_log: node_events.is_some(),
    })
}
