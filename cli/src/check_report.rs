//! One layout for every offline `confboot verify-*` command's result.
//!
//! Text: a header line, then each check on its own line (`✓` passed, `✗`
//! failed, `-` skipped, then the check's name, a colon and its detail),
//! then `VERIFIED: N checks passed, M skipped` or `FAILED: N of M checks
//! failed`. JSON (`-o json`): one object,
//!
//! ```text
//! {"command": "verify-nitro", "variant": "aws-nitrotpm", "at": 1770116400,
//!  "verified": true, "failed": 0, "skipped": 1,
//!  "checks": [{"name": "nonce", "outcome": "passed"|"failed"|"skipped",
//!              "detail": "...", "reason": "NonceMismatch"|null}, ...]}
//! ```
//!
//! where `at` is the time certificates were checked at (Unix seconds) and
//! `reason` the refusal's name of a failed check, when it has one. Exit
//! status: 0 no check failed, 1 one did (2, bad arguments, is the
//! commands' own).

use confboot_attest::check::{CheckOutcome, CheckResult};

/// The help line of `-o` for the commands that print this layout.
pub const JSON_HELP: &str = "text (every check on its line) or json: one object {command, \
variant, at, verified, failed, skipped, checks: [{name, outcome, detail, reason}]}";

/// What a result is about: the command, the variant and the header line.
pub struct Subject<'a> {
    /// The command's name (`verify-nitro`).
    pub command: &'a str,
    /// The variant's name (`aws-nitrotpm`).
    pub variant: &'a str,
    /// The text output's first line.
    pub header: String,
    /// The time certificates were checked at (Unix seconds), if known.
    pub at: Option<i64>,
}

/// Prints `checks` as text or JSON and returns the exit status (0 or 1);
/// `reason` names a failed check's refusal.
pub fn print(
    subject: &Subject,
    checks: &[CheckResult],
    reason: impl Fn(&CheckResult) -> Option<String>,
    json: bool,
) -> i32 {
    let failed = checks
        .iter()
        .filter(|c| matches!(c.outcome, CheckOutcome::Failed(_)))
        .count();
    let skipped = checks
        .iter()
        .filter(|c| matches!(c.outcome, CheckOutcome::Skipped(_)))
        .count();
    if json {
        let list: Vec<serde_json::Value> = checks
            .iter()
            .map(|c| {
                let (outcome, detail) = match &c.outcome {
                    CheckOutcome::Passed(d) => ("passed", d.clone()),
                    CheckOutcome::Failed(e) => ("failed", e.to_string()),
                    CheckOutcome::Skipped(d) => ("skipped", d.clone()),
                };
                serde_json::json!({"name": c.name, "outcome": outcome, "detail": detail, "reason": reason(c)})
            })
            .collect();
        let doc = serde_json::json!({
            "command": subject.command,
            "variant": subject.variant,
            "at": subject.at,
            "verified": failed == 0,
            "failed": failed,
            "skipped": skipped,
            "checks": list,
        });
        println!("{doc}");
    } else {
        println!("{}", subject.header);
        for c in checks {
            println!("{c}");
        }
        if failed == 0 {
            println!(
                "VERIFIED: {} checks passed, {skipped} skipped",
                checks.len() - skipped
            );
        } else {
            println!("FAILED: {failed} of {} checks failed", checks.len());
        }
    }
    i32::from(failed > 0)
}
