//! joinsvc's command line: usage errors exit 2 (a misspelt option names
//! the nearest one), and its help names every attestation variant.

use confboot_tests::usage::{assert_help_names_every_variant, assert_usage_errors};

const BIN: &str = env!("CARGO_BIN_EXE_joinsvc");

#[test]
fn usage_errors_exit_2_and_name_the_nearest_option() {
    assert_usage_errors(
        BIN,
        &[
            (&[], "option --master-secret is required"),
            (&["--nope"], "unknown option --nope"),
            (
                &["--master-secert", "ms.json"],
                "unknown option --master-secert; did you mean --master-secret?",
            ),
            (&["--variants"], "option --variants needs a value"),
            (&["--workers", "many"], "--workers"),
            (&["serve"], "unexpected argument \"serve\""),
        ],
    );
}

#[test]
fn help_names_every_variant() {
    assert_help_names_every_variant(BIN, &["--help"]);
}
