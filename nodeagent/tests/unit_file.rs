//! The systemd units of a node's OS, the node agent's and the cluster
//! step's: systemd accepts them without a warning, and the agent accepts
//! their command lines.

use std::path::Path;
use std::process::Command;

use confboot_tests::TempDir;

const UNIT: &str = include_str!("../confboot-nodeagent.service");
const CLUSTER_STEP_UNIT: &str = include_str!("../confboot-cluster-step.service");

/// A unit's ExecStart words after the program, `$NODEAGENT_ARGS` expanded
/// as systemd does when PID 1 wrote no environment file: to nothing.
fn exec_start_args_of(unit: &str) -> Vec<String> {
    let line = unit
        .lines()
        .find_map(|l| l.strip_prefix("ExecStart="))
        .expect("the unit has an ExecStart");
    let mut words = line.split_whitespace().map(String::from);
    assert_eq!(words.next().as_deref(), Some("/usr/bin/nodeagent"));
    words.filter(|w| w != "$NODEAGENT_ARGS").collect()
}

/// The node agent unit's ExecStart words after the program.
fn exec_start_args() -> Vec<String> {
    exec_start_args_of(UNIT)
}

/// `systemd-analyze verify` of `text` as the unit `name`: it succeeds and
/// says nothing about the unit.
fn assert_systemd_accepts(name: &str, text: &str) {
    let dir = TempDir::new("unit");
    let unit = dir.path().join(name);
    // systemd-analyze checks that the program exists and is executable.
    std::fs::write(
        &unit,
        text.replace("/usr/bin/nodeagent", env!("CARGO_BIN_EXE_nodeagent")),
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
fn systemd_accepts_the_unit_without_a_warning() {
    assert_systemd_accepts("confboot-nodeagent.service", UNIT);
}

#[test]
fn systemd_accepts_the_cluster_step_unit_without_a_warning() {
    assert_systemd_accepts("confboot-cluster-step.service", CLUSTER_STEP_UNIT);
    for line in [
        "Type=oneshot",
        "RemainAfterExit=yes",
        "ConditionPathExists=/run/confboot/cluster-step.json",
        "StandardOutput=journal+console",
    ] {
        assert!(CLUSTER_STEP_UNIT.lines().any(|l| l == line), "{line}");
    }
    // The node agent starts after it, with PID 1's arguments.
    assert!(UNIT.contains("After=") && UNIT.contains(" confboot-cluster-step.service\n"));
    assert!(UNIT.contains("\nEnvironmentFile=-/run/confboot/nodeagent.env\n"));
}

#[test]
fn the_agent_accepts_the_cluster_step_units_command_line() {
    let args = exec_start_args_of(CLUSTER_STEP_UNIT);
    assert_eq!(args, ["cluster-step"]);
    // Nothing handed over (an empty directory): the step reads its
    // options, refuses the handoff (exit 1), runs nothing; a usage error
    // would exit 2.
    let dir = TempDir::new("unit-step");
    let out = Command::new(env!("CARGO_BIN_EXE_nodeagent"))
        .args(&args)
        .arg("--handoff")
        .arg(dir.path())
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{said}");
    assert!(said.contains("cluster-step.json is missing"), "{said}");
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
