//! The systemd unit that runs the node agent on a node's OS: systemd
//! accepts it without a warning, and the agent accepts its command line.

use std::path::Path;
use std::process::Command;

use confboot_tests::TempDir;

const UNIT: &str = include_str!("../confboot-nodeagent.service");

/// The unit's ExecStart words after the program.
fn exec_start_args() -> Vec<String> {
    let line = UNIT
        .lines()
        .find_map(|l| l.strip_prefix("ExecStart="))
        .expect("the unit has an ExecStart");
    let mut words = line.split_whitespace().map(String::from);
    assert_eq!(words.next().as_deref(), Some("/usr/bin/nodeagent"));
    words.collect()
}

#[test]
fn systemd_accepts_the_unit_without_a_warning() {
    let dir = TempDir::new("unit");
    let unit = dir.path().join("confboot-nodeagent.service");
    // systemd-analyze checks that the program exists and is executable.
    std::fs::write(
        &unit,
        UNIT.replace("/usr/bin/nodeagent", env!("CARGO_BIN_EXE_nodeagent")),
    )
    .unwrap();
    let out = Command::new("systemd-analyze")
        .arg("verify")
        .arg(&unit)
        .output()
        .expect("systemd-analyze (Debian package systemd; scripts/setup.sh installs it)");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        !stderr.contains(&*unit.to_string_lossy()),
        "systemd-analyze warns about the unit:\n{stderr}"
    );
}

#[test]
fn the_agent_accepts_the_units_command_line() {
    let dir = TempDir::new("unit-args");
    std::fs::write(dir.path().join("event-log"), b"").unwrap();
    let args: Vec<String> = exec_start_args()
        .into_iter()
        .map(|a| a.replace("${CREDENTIALS_DIRECTORY}", &dir.path().to_string_lossy()))
        .collect();
    assert!(args.iter().any(|a| a == "--event-log"), "{args:?}");
    if Path::new("/dev/tpmrm0").exists() {
        eprintln!("this machine has a TPM: the agent would serve; not started");
        return;
    }
    // Without a TPM device it stops at the TPM (exit 1), after every
    // option was read; a usage error would exit 2.
    let out = Command::new(env!("CARGO_BIN_EXE_nodeagent"))
        .args(&args)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_ne!(out.status.code(), Some(2), "{stderr}");
    assert!(!stderr.contains("--help"), "{stderr}");
}
