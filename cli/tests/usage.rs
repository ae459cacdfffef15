//! `confboot`'s command line: usage errors exit 2 in every subcommand (a
//! misspelt option or command names the nearest one), and the help of
//! each command that takes `--variants` names every attestation variant.

use confboot_tests::usage::{assert_help_names_every_variant, assert_usage_errors};

const BIN: &str = env!("CARGO_BIN_EXE_confboot");

/// Every subcommand, with its options.
const SUBCOMMANDS: &[&str] = &[
    "init",
    "recover",
    "hash-init-secret",
    "verify",
    "verify-report",
    "verify-quote",
    "measure",
    "keygen",
    "sign",
    "check-reference-values",
    "version",
];

#[test]
fn usage_errors_exit_2_and_name_the_nearest_option_or_command() {
    assert_usage_errors(
        BIN,
        &[
            (
                &["veirfy"],
                "unknown command \"veirfy\"; did you mean verify?",
            ),
            (&["deploy"], "unknown command \"deploy\""),
            (
                &["init", "--measurments", "m.json"],
                "unknown option --measurments; did you mean --measurements?",
            ),
            (&["init"], "option --node is required"),
            (
                &["init", "--node", "n"],
                "option --measurements is required",
            ),
            (
                &[
                    "init",
                    "--node",
                    "n",
                    "--measurements",
                    "m.json",
                    "--ak-trust",
                    "insecure-any-ak",
                    "--init-secret-file",
                    "s",
                    "--timeout",
                    "soon",
                ],
                "invalid value \"soon\" for --timeout",
            ),
            (&["init", "--node"], "option --node needs a value"),
            (&["recover"], "option --node is required"),
            (
                &["recover", "--node", "n"],
                "option --init-secret-file is required",
            ),
            (
                &[
                    "recover",
                    "--node",
                    "n",
                    "--init-secret-file",
                    "s",
                    "--variants",
                    "sgx",
                ],
                "--variants",
            ),
            (&["verify"], "option --node is required"),
            (
                &["hash-init-secret"],
                "option --init-secret-file is required",
            ),
            (
                &[
                    "hash-init-secret",
                    "--init-secret-file",
                    "s",
                    "--iterations",
                    "1",
                ],
                "--iterations must be at least",
            ),
            (&["measure"], "option --kernel is required"),
            (&["keygen"], "option --out is required"),
            (&["sign"], "option --key is required"),
            (&["check-reference-values"], "option --in is required"),
            (
                &["verify-report"],
                "--report FILE (or --evidence FILE) is required",
            ),
            (&["verify-quote"], "--quote FILE is required"),
            (
                &["verity", "formt"],
                "unknown command \"formt\"; did you mean format?",
            ),
            (&["verity", "format", "--nope"], "unknown option --nope"),
            (&["verity", "format"], "want two arguments, DATA and HASH"),
        ],
    );
    // Every subcommand refuses an option it does not have, and names the
    // one it has when the given one is a letter away.
    for sub in SUBCOMMANDS {
        assert_usage_errors(
            BIN,
            &[
                (&[sub, "--nope"], "unknown option --nope"),
                (
                    &[sub, "--verbosty", "4"],
                    "unknown option --verbosty; did you mean --verbosity?",
                ),
            ],
        );
    }
}

#[test]
fn help_of_each_command_taking_variants_names_every_variant() {
    for sub in ["init", "recover", "verify"] {
        assert_help_names_every_variant(BIN, &[sub, "--help"]);
    }
}
