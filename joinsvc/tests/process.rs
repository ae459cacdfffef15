//! joinsvc as a real process on loopback, with node clients each backed by
//! its own swtpm, on the real API server (a namespace of its own on the test
//! binary's shared control plane): attested tickets, refusals,
//! policy hot reload, metrics, and a clean stop on SIGTERM.

use std::process::Command;
use std::time::Duration;

use confboot_proto::health::{HealthCheckRequest, HealthCheckResponse};
use confboot_tests::cluster::{Joinsvc, Node};
use confboot_wire::{Client, Code};

use nix::sys::signal::Signal;

const DISK_A: &str = "0f3c6c1e-2b5d-4e8a-9c7f-1a2b3c4d5e6f";
const DISK_B: &str = "7e1d2c3b-4a59-4876-8f9e-0a1b2c3d4e5f";

/// The joinsvc binary cargo built for these tests.
fn joinsvc_bin() -> std::path::PathBuf {
    std::path::PathBuf::from(env!("CARGO_BIN_EXE_joinsvc"))
}

/// Polls `f` (at most `tries` × 50 ms) until it returns true.
fn eventually(tries: u32, mut f: impl FnMut() -> bool) -> bool {
    (0..tries).any(|_| {
        let ok = f();
        if !ok {
            std::thread::sleep(Duration::from_millis(50));
        }
        ok
    })
}

#[test]
fn attested_nodes_get_tickets_and_policy_reloads_without_restart() {
    let good = Node::start("good", b"kernel v1");
    let tampered = Node::start("tampered", b"kernel v1 with a backdoor");
    let joinsvc = Joinsvc::start(&joinsvc_bin(), &good.policy(), &[&good, &tampered]);

    // A good node gets a ticket whose key is the derivation from the master secret.
    let ticket = good
        .join(joinsvc.rpc_addr, DISK_A)
        .expect("the good node gets a ticket");
    assert_eq!(
        ticket.state_disk_key.expose(),
        joinsvc.master_secret.state_disk_key(DISK_A).expose()
    );
    assert_eq!(
        ticket.measurement_secret.expose(),
        joinsvc.master_secret.measurement_secret().expose()
    );
    assert_eq!(ticket.measurement_salt, joinsvc.measurement_salt);
    assert_eq!(ticket.api_server_endpoint, joinsvc.api_server_endpoint());
    assert!(ticket.discovery_token_ca_cert_hash.starts_with("sha256:"));
    let created = joinsvc.tokens();
    assert_eq!(created.len(), 1);
    assert_eq!(
        *ticket.token,
        format!("{}.{}", created[0].id, created[0].secret)
    );

    // A node whose PCR 4 differs is refused and gets no key.
    let err = tampered.join(joinsvc.rpc_addr, DISK_B).unwrap_err();
    assert_eq!(err.code, Code::PermissionDenied, "{err}");
    assert_eq!(joinsvc.tokens().len(), 1, "no token for a refused node");

    // Rewriting the policy flips the outcome, without a restart.
    joinsvc.replace_policy(&tampered.policy());
    joinsvc
        .process
        .wait_for_line("measurement policy reloaded", 1000);
    assert!(
        eventually(100, || tampered.join(joinsvc.rpc_addr, DISK_B).is_ok()),
        "policy reload"
    );
    let err = good.join(joinsvc.rpc_addr, DISK_A).unwrap_err();
    assert_eq!(err.code, Code::PermissionDenied, "{err}");

    // A rejoin ticket carries the same disk key, and no token is made for it.
    let rejoin = tampered.rejoin(joinsvc.rpc_addr, DISK_B).unwrap();
    assert_eq!(
        rejoin.state_disk_key.expose(),
        joinsvc.master_secret.state_disk_key(DISK_B).expose()
    );

    // The API server holds exactly one token per issued join ticket.
    assert_eq!(joinsvc.tokens().len(), 2);

    let (code, metrics) = joinsvc.http_get("/metrics");
    assert_eq!(code, 200);
    for line in [
        "joinsvc_tickets_issued_total{kind=\"join\"} 2",
        "joinsvc_tickets_issued_total{kind=\"rejoin\"} 1",
        "joinsvc_tickets_refused_total{reason=\"measurement\"} 2",
        "joinsvc_handshake_failures_total 2",
        "joinsvc_ticket_duration_seconds_count 3",
        // Each admission decision counted by its attestation result.
        "confboot_joinsvc_admissions_total{status=\"affirming\"} 3",
        "confboot_joinsvc_admissions_total{status=\"contraindicated\"} 2",
        "confboot_joinsvc_admissions_total{status=\"warning\"} 0",
    ] {
        assert!(
            metrics.lines().any(|l| l == line),
            "missing {line:?} in\n{metrics}"
        );
    }
    // And logged with it and the policy the caller was appraised against.
    joinsvc.process.wait_for_line(
        &format!("join ticket issued for disk {DISK_A} (attestation result affirming, policy qemu-vtpm policy)"),
        100,
    );
    joinsvc
        .process
        .wait_for_line("(attestation result contraindicated, policy unknown)", 100);
    assert_eq!(joinsvc.http_get("/healthz"), (200, "ok\n".into()));
    assert_eq!(joinsvc.http_get("/readyz"), (200, "ready\n".into()));
    assert_eq!(joinsvc.http_get("/nope").0, 404);

    // Secrets never reach the log.
    let log = joinsvc.process.log().join("\n");
    let key_hex = confboot_util::hex::encode(ticket.state_disk_key.expose());
    assert!(
        !log.contains(&key_hex) && !log.contains(ticket.token.as_str()),
        "a secret was logged"
    );

    joinsvc.process.signal(Signal::SIGTERM);
    let (status, log) = joinsvc.process.wait();
    assert!(
        status.success(),
        "joinsvc exited with {status}:\n{}",
        log.join("\n")
    );
    assert!(
        log.iter().any(|l| l.contains("SIGTERM received")),
        "{}",
        log.join("\n")
    );
    assert!(
        log.last().unwrap().contains("stopped"),
        "{}",
        log.join("\n")
    );
}

#[test]
fn unattested_clients_cannot_call_and_untrusted_aks_are_refused() {
    let node = Node::start("node", b"kernel");
    let stranger = Node::start("stranger", b"kernel");
    // Only `node`'s AK is pinned; `stranger` runs the same software.
    let joinsvc = Joinsvc::start(&joinsvc_bin(), &node.policy(), &[&node]);
    let err = stranger.join(joinsvc.rpc_addr, DISK_A).unwrap_err();
    assert_eq!(err.code, Code::PermissionDenied, "{err}");

    // A client that does not attest at all gets no call through.
    let plain = confboot_atls::connect(joinsvc.rpc_addr, Duration::from_secs(10), &[], None);
    if let Ok((mut client, _)) = plain {
        let r: Result<HealthCheckResponse, _> = client.unary(
            confboot_proto::HEALTH_CHECK,
            &HealthCheckRequest::default(),
            Duration::from_secs(10),
        );
        assert!(r.is_err(), "an unattested client got a call through");
    }
    // Nor does a plain TCP client.
    let mut raw = Client::new(std::net::TcpStream::connect(joinsvc.rpc_addr).unwrap());
    let r: Result<HealthCheckResponse, _> = raw.unary(
        confboot_proto::HEALTH_CHECK,
        &HealthCheckRequest::default(),
        Duration::from_secs(10),
    );
    assert!(r.is_err());
    assert!(node.join(joinsvc.rpc_addr, DISK_A).is_ok());
    assert!(joinsvc.tokens().len() == 1);
}

#[test]
fn joinsvc_refuses_bad_configuration_with_clear_errors() {
    let out = Command::new(joinsvc_bin()).arg("--port").output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("unknown option --port") && err.contains("--help"),
        "{err}"
    );

    // A missing option is a usage error: exit 2, as an unknown one.
    let out = Command::new(joinsvc_bin()).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--master-secret is required"), "{err}");

    let help = Command::new(joinsvc_bin()).arg("--help").output().unwrap();
    let help = String::from_utf8_lossy(&help.stdout);
    for opt in [
        "--master-secret",
        "--policy",
        "--ak-trust",
        "--tpm",
        "--config",
        "--health-listen",
        "--measurements",
        "--i-understand-insecure-any-ak",
        "--variants",
        "--snp-policy",
    ] {
        assert!(help.contains(opt), "--help lacks {opt}");
    }
}

/// The files joinsvc reads before it looks at `--ak-trust`, in a fresh
/// directory: `(dir, master secret, policy)`.
fn minimal_config(name: &str) -> (std::path::PathBuf, String, String) {
    let dir = std::env::temp_dir().join(format!("confboot-joinsvc-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let master = dir.join("master-secret.json");
    confboot_kms::MasterSecret::generate()
        .unwrap()
        .write_file(&master)
        .unwrap();
    let policy = dir.join("measurements.json");
    let mut p = confboot_attest::MeasurementPolicy::default();
    p.set(4, vec![0xab; 32], false);
    p.set(9, vec![0xcd; 32], false);
    std::fs::write(&policy, p.to_json()).unwrap();
    let path = |f: &std::path::Path| f.display().to_string();
    (dir.clone(), path(&master), path(&policy))
}

/// Runs joinsvc with `master`, a measurement salt, the policy file
/// `policy`, `--ak-trust insecure-any-ak` and `extra`, for a start it is
/// expected to refuse; returns how it ended.
fn run_until_refused(master: &str, policy: &str, extra: &[&str]) -> std::process::Output {
    let salt = "5a".repeat(32);
    Command::new(joinsvc_bin())
        .args(["--master-secret", master, "--measurement-salt", &salt])
        .args(["--measurements", policy, "--ak-trust", "insecure-any-ak"])
        .args(extra)
        .args(["--api-server-endpoint", "10.0.0.1:6443"])
        .output()
        .unwrap()
}

#[test]
fn insecure_any_ak_needs_its_confirmation() {
    let (dir, master, policy) = minimal_config("insecure");
    let out = run_until_refused(&master, &policy, &[]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("--ak-trust insecure-any-ak trusts any attestation key")
            && err.contains("refused unless --i-understand-insecure-any-ak is given"),
        "{err}"
    );
    assert!(!err.contains("listening"), "{err}");
    std::fs::remove_dir_all(&dir).unwrap();

    // Confirmed, it runs, warns, and admits a node whose AK nobody pinned.
    let stranger = Node::start("stranger", b"kernel");
    let joinsvc = Joinsvc::start_with(
        &joinsvc_bin(),
        &stranger.policy(),
        &[],
        &[
            "--ak-trust",
            "insecure-any-ak",
            "--i-understand-insecure-any-ak",
        ],
    );
    joinsvc.process.wait_for_line(
        "--ak-trust insecure-any-ak: any attestation key is trusted",
        100,
    );
    assert!(stranger.join(joinsvc.rpc_addr, DISK_A).is_ok());
    // The warning comes again on every validator built: a policy reload too.
    let warnings = |log: &[String]| {
        log.iter()
            .filter(|l| l.contains("WARN") && l.contains("insecure-any-ak"))
            .count()
    };
    let before = warnings(&joinsvc.process.log());
    let mut other = stranger.policy();
    other.set(4, vec![0x42; 32], false);
    joinsvc.replace_policy(&other);
    joinsvc
        .process
        .wait_for_line("measurement policy reloaded", 1000);
    assert!(warnings(&joinsvc.process.log()) > before);
}

#[test]
fn joinsvc_refuses_to_start_with_a_policy_that_does_not_pin_the_image() {
    let (dir, master, policy) = minimal_config("unpinned");
    // The cluster mark alone: joinsvc's validator drops it, which would
    // leave a policy that admits any image.
    std::fs::write(
        &policy,
        format!(r#"{{"15": {{"expected": "{}"}}}}"#, "00".repeat(32)),
    )
    .unwrap();
    let out = run_until_refused(&master, &policy, &["--i-understand-insecure-any-ak"]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(&policy) && err.contains("does not pin the image") && err.contains("[4, 9]"),
        "{err}"
    );
    assert!(!err.contains("listening"), "{err}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn old_option_names_still_work() {
    // `--policy` is the old name of `--measurements` (Joinsvc::start uses it),
    // `JOINSVC_POLICY` the old variable.
    let (dir, master, policy) = minimal_config("aliases");
    let salt = "5a".repeat(32);
    let out = Command::new(joinsvc_bin())
        .env("JOINSVC_POLICY", &policy)
        .args(["--master-secret", &master, "--measurement-salt", &salt])
        .args(["--ak-trust", "trust-me"])
        .args(["--api-server-endpoint", "10.0.0.1:6443"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("--ak-trust: ") && !err.contains("--measurements is required"),
        "the policy was found through the old variable: {err}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn nodes_can_require_joinsvc_to_attest() {
    use confboot_atls::AtlsError;
    use confboot_attest::{AttestationError, MeasurementPolicy, Validator};
    use confboot_tpm::swtpm::Swtpm;
    use confboot_vtpm::{AkTrust, VtpmIssuer, VtpmValidator};
    use std::sync::Arc;

    // The control-plane node's own TPM, which joinsvc attests with.
    let cp_tpm = Swtpm::start().unwrap();
    let (cp_ak, cp_policy) = {
        let issuer = VtpmIssuer::new(cp_tpm.connect().unwrap()).unwrap();
        let pcrs = issuer.with_tpm(|t| t.pcr_read_all()).unwrap();
        let mut policy = MeasurementPolicy::default();
        for (i, v) in pcrs.into_iter().filter(|(i, _)| *i <= 9) {
            policy.set(i, v.to_vec(), false);
        }
        (issuer.ak_public_key(), policy)
        // The issuer's connection closes here: swtpm serves one client at a time.
    };
    let node = Node::start("node", b"kernel");
    let tpm_arg = cp_tpm.addr().to_string();
    let joinsvc = confboot_tests::cluster::Joinsvc::start_with(
        &joinsvc_bin(),
        &node.policy(),
        &[&node],
        &["--tpm", &tpm_arg],
    );
    joinsvc.process.wait_for_line("attesting with the TPM", 100);

    // joinsvc is a running control plane: its PCR 15 may be marked.
    let trusting: Arc<dyn Validator> = Arc::new(
        VtpmValidator::new(AkTrust::Pinned(vec![cp_ak.clone()]), cp_policy.clone())
            .require_unmarked(false),
    );
    let ticket = node
        .join_verifying(joinsvc.rpc_addr, DISK_A, trusting)
        .expect("both sides attest");
    assert_eq!(
        ticket.state_disk_key.expose(),
        joinsvc.master_secret.state_disk_key(DISK_A).expose()
    );

    // A node expecting other measurements of joinsvc refuses it before sending anything.
    let mut other_policy = cp_policy.clone();
    other_policy.set(4, vec![0x42; 32], false);
    let picky: Arc<dyn Validator> = Arc::new(
        VtpmValidator::new(AkTrust::Pinned(vec![cp_ak]), other_policy).require_unmarked(false),
    );
    let err = node
        .join_verifying(joinsvc.rpc_addr, DISK_B, picky)
        .unwrap_err();
    assert!(
        matches!(
            err,
            AtlsError::Attestation(AttestationError::Measurement { index: 4, .. })
        ),
        "{err}"
    );
    assert_eq!(
        joinsvc.tokens().len(),
        1,
        "the refusing node asked for nothing"
    );
}
