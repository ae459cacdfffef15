//! The node agent's command line: usage errors exit 2 in the agent and in
//! `cluster-step` (a misspelt option or subcommand names the nearest one),
//! and its help names every attestation variant.

use confboot_tests::usage::{assert_help_names_every_variant, assert_usage_errors};

const BIN: &str = env!("CARGO_BIN_EXE_nodeagent");

#[test]
fn usage_errors_exit_2_and_name_the_nearest_option() {
    assert_usage_errors(
        BIN,
        &[
            (&["--tpm"], "option --tpm needs a value"),
            (&["--nope"], "unknown option --nope"),
            (
                &["--verify-lisen", "0.0.0.0:8080"],
                "unknown option --verify-lisen; did you mean --verify-listen?",
            ),
            (&["--verify-workers", "many"], "--verify-workers"),
            (
                &["cluster-stpe"],
                "unknown command \"cluster-stpe\"; did you mean cluster-step?",
            ),
            (&["serve"], "unknown command \"serve\""),
            (&["cluster-step", "--nope"], "unknown option --nope"),
            (
                &["cluster-step", "--handof", "/run/x"],
                "unknown option --handof; did you mean --handoff?",
            ),
            (
                &["cluster-step", "--handoff"],
                "option --handoff needs a value",
            ),
            (&["cluster-step", "now"], "unexpected argument \"now\""),
        ],
    );
}

#[test]
fn help_names_every_variant() {
    assert_help_names_every_variant(BIN, &["--help"]);
}
