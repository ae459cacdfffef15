//! The command lines of the project's binaries as users expect them (the
//! kit's [`confboot_testkit::usage`]), and the check that each help's first
//! paragraph names every attestation variant the command takes.

use confboot_attest::Variant;
pub use confboot_testkit::usage::{assert_usage_errors, run};

/// Checks that the first paragraph of the help `args` print (`--help`, or
/// a subcommand and `--help`) names every variant of [`Variant::ALL`], so
/// that a new variant fails here until the help says it.
pub fn assert_help_names_every_variant(bin: &str, args: &[&str]) {
    let names: Vec<&str> = Variant::ALL.iter().map(|v| v.name()).collect();
    confboot_testkit::usage::assert_help_names(bin, args, &names);
}
