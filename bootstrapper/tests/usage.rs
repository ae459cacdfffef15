//! The bootstrapper's command line: usage errors exit 2 (a misspelt option
//! names the nearest one), and its help names every attestation variant.

use confboot_tests::usage::{assert_help_names_every_variant, assert_usage_errors};

const BIN: &str = env!("CARGO_BIN_EXE_bootstrapper");

#[test]
fn usage_errors_exit_2_and_name_the_nearest_option() {
    assert_usage_errors(
        BIN,
        &[
            (&[], "option --state-disk is required"),
            (&["--nope"], "unknown option --nope"),
            (
                &["--state-dsik", "/dev/vdb"],
                "unknown option --state-dsik; did you mean --state-disk?",
            ),
            (&["--state-disk"], "option --state-disk needs a value"),
            (
                &["--state-disk", "d", "--attestation", "sgx"],
                "--attestation",
            ),
            (
                &["join", "--state-disk", "d"],
                "unexpected argument \"join\"",
            ),
        ],
    );
}

#[test]
fn help_names_every_variant() {
    assert_help_names_every_variant(BIN, &["--help"]);
}
