//! The command lines of the project's binaries as users expect them: a
//! usage error (an unknown, misspelt or missing option, a bad value, an
//! unknown subcommand) exits 2 and says what is wrong, a misspelt name
//! with the nearest one; each help's first paragraph names every
//! attestation variant the command takes. Each binary's crate has a table
//! of its own cases (`tests/usage.rs`) that these check; the check that a
//! help names every attestation variant is `confboot-tests`' (it knows the
//! variants).

use std::process::Command;

/// Runs `bin` with `args`; its exit code and what it printed (stdout, then
/// stderr).
pub fn run(bin: &str, args: &[&str]) -> (Option<i32>, String) {
    let out = Command::new(bin).args(args).output().unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.code(), text)
}

/// Checks that each row's arguments make `bin` exit 2 with a message that
/// contains the row's text.
pub fn assert_usage_errors(bin: &str, table: &[(&[&str], &str)]) {
    for (args, want) in table {
        let (code, text) = run(bin, args);
        assert_eq!(code, Some(2), "{args:?}: {text}");
        assert!(text.contains(want), "{args:?}: want {want:?}: {text}");
    }
}

/// Checks that the first paragraph of the help `args` print (`--help`, or
/// a subcommand and `--help`) names every one of `names`.
pub fn assert_help_names(bin: &str, args: &[&str], names: &[&str]) {
    let (code, help) = run(bin, args);
    assert_eq!(code, Some(0), "{args:?}: {help}");
    let first = help.split("\n\n").next().unwrap_or_default();
    for name in names {
        assert!(
            first.contains(name),
            "{args:?}: the help's first paragraph does not name {name}: {first}"
        );
    }
}
