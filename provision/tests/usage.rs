//! The provisioning tool's command line: usage errors exit 2 (a misspelt
//! option names the nearest one).

use confboot_testkit::usage::assert_usage_errors;

const BIN: &str = env!("CARGO_BIN_EXE_confboot-tpm-provision");

#[test]
fn usage_errors_exit_2_and_name_the_nearest_option() {
    assert_usage_errors(
        BIN,
        &[
            (&[], "option --tcti is required"),
            (&["--nope"], "unknown option --nope"),
            (
                &["--out-dri", "out"],
                "unknown option --out-dri; did you mean --out-dir?",
            ),
            (&["--tcti"], "option --tcti needs a value"),
            (
                &["--tcti", "swtpm:", "--out-dir", "o", "--ak-handle", "zz"],
                "--ak-handle",
            ),
            (
                &["provision", "--tcti", "swtpm:", "--out-dir", "o"],
                "unexpected argument \"provision\"",
            ),
        ],
    );
}
