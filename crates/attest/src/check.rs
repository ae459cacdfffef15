//! The vocabulary of a verifier that runs its checks one by one (SEV-SNP's
//! and TDX's): each check has a name and an outcome, so that a command can
//! print every one, a validator can stop at the first failure
//! ([`first_failure`]), and an attestation result (EAR) can map each onto
//! its trust claims. The names of the checks are each variant's.

use std::fmt;

use crate::{AttestRefusal, AttestationError, Detail, EXTRA_DATA_LEN};

/// What `REPORT_DATA` must hold.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReportDataCheck {
    /// confboot's binding: the first 32 bytes are `extra_data`, the rest zero.
    ExtraData([u8; EXTRA_DATA_LEN]),
    /// All 64 bytes, exactly (reports made by other tools).
    Exact([u8; 64]),
    /// Not checked (an offline look at a report): reported as skipped.
    NotChecked,
}

/// The outcome of one check.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CheckOutcome {
    /// The check passed; the text says what was established, and ends in
    /// [`WARNING_MARK`] and the reason when it passed with a warning
    /// ([`CheckResult::warning`]).
    Passed(String),
    /// The check failed.
    Failed(AttestationError),
    /// The check could not run (an input or a prerequisite is missing).
    Skipped(String),
}

/// What separates a passed check's text from the warning it passed with.
pub const WARNING_MARK: &str = "warning: ";

/// One named check and its outcome.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CheckResult {
    /// Short name of the check, e.g. `"report signature"`.
    pub name: &'static str,
    /// What happened.
    pub outcome: CheckOutcome,
}

impl CheckResult {
    /// The warning a passed check passed with (a TCB within the policy's
    /// margin of its minimum, a measurement the policy warns about).
    pub fn warning(&self) -> Option<&str> {
        match &self.outcome {
            CheckOutcome::Passed(text) => text
                .find(WARNING_MARK)
                .map(|at| &text[at + WARNING_MARK.len()..]),
            _ => None,
        }
    }
}

impl fmt::Display for CheckResult {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.outcome {
            CheckOutcome::Passed(d) => write!(f, "✓ {}: {d}", self.name),
            CheckOutcome::Failed(e) => write!(f, "✗ {}: {e}", self.name),
            CheckOutcome::Skipped(d) => write!(f, "- {}: skipped, {d}", self.name),
        }
    }
}

/// The verdict of a list of checks, failing closed: the first failure, or
/// a [`AttestationError::Policy`] error naming the first skipped check.
pub fn first_failure(checks: &[CheckResult]) -> Option<AttestationError> {
    if let Some(e) = checks.iter().find_map(|c| match &c.outcome {
        CheckOutcome::Failed(e) => Some(e.clone()),
        _ => None,
    }) {
        return Some(e);
    }
    checks.iter().find_map(|c| match &c.outcome {
        CheckOutcome::Skipped(why) => Some(AttestationError::Policy(Detail::with(
            &AttestRefusal::CheckNotPerformed,
            format!("check {:?} was not performed: {why}", c.name),
        ))),
        _ => None,
    })
}
