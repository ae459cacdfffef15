//! The verify service end to end, as processes: the real `nodeagent` over
//! a swtpm whose PCRs an event log reproduces, and the real `confboot
//! verify` (aTLS, the node's evidence bound to the session's exporter);
//! then hosts that lie: another cluster's mark, another image, an
//! untrusted key, a relay of the genuine node, a replayed answer, answers
//! that are not evidence.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::Arc;
use std::time::Duration;

use confboot_attest::{AttestationError, EXTRA_DATA_LEN, Issuer, MeasurementPolicy, Variant};
use confboot_net::{PoolConfig, ServerHandle};
use confboot_tests::TempDir;
use confboot_tests::cluster::workspace_binary;
use confboot_tests::hostile::connect_from;
use confboot_tpm::event_log::{EventLog, synthetic_log};
use confboot_verifier::verify::AttestationDocument;
use confboot_verifier::verify::service::fetch_document;

mod common;
use common::AgentNode;

const EV_EFI_BOOT_SERVICES_APPLICATION: u32 = 0x8000_0003;
const EV_IPL: u32 = 0xd;
const CLUSTER_ID: &[u8] = b"cluster-one-0123456789abcdef";

/// A node's boot as its firmware logs it: a kernel in PCR 4, a command
/// line and an initrd in PCR 9.
fn boot_log(cmdline: &[u8]) -> Vec<u8> {
    synthetic_log(&[
        (4, EV_EFI_BOOT_SERVICES_APPLICATION, b"the kernel"),
        (9, EV_IPL, cmdline),
        (9, EV_IPL, b"the initrd"),
    ])
}

impl AgentNode {
    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }
}

/// The admin's files: the policy of `log` (PCRs 4 and 9 enforced, a PCR 0
/// that differs but is warnOnly) and its event list.
fn admin_files(dir: &Path, log: &[u8]) -> (PathBuf, PathBuf) {
    let parsed = EventLog::parse(log).unwrap();
    let mut policy = MeasurementPolicy::default();
    for (pcr, value) in parsed.replay() {
        policy.set(pcr, value.to_vec(), false);
    }
    policy.set(0, vec![0x55; 32], true);
    let policy_file = dir.join("measurements.json");
    std::fs::write(&policy_file, policy.to_json()).unwrap();
    let events_file = dir.join("measurements.events.json");
    std::fs::write(&events_file, parsed.to_event_list().to_json()).unwrap();
    (policy_file, events_file)
}

fn verify(node: &AgentNode, target: SocketAddr, policy: &Path, extra: &[&str]) -> Output {
    Command::new(workspace_binary("confboot"))
        .args(["verify", "--node", &target.to_string()])
        .arg("--measurements")
        .arg(policy)
        .arg("--ak-trust")
        .arg(format!(
            "pinned:{}",
            confboot_util::hex::encode(&node.ak_public)
        ))
        .args(extra)
        .current_dir(node.dir.path())
        .output()
        .expect("run confboot verify")
}

fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

#[test]
fn a_marked_node_verifies_and_every_lie_is_caught() {
    let log = boot_log(b"console=ttyS0 confboot.args=a");
    let node = AgentNode::start("nodeagent", &log, Some(CLUSTER_ID));
    let (policy, events) = admin_files(node.dir.path(), &log);
    let events_arg = events.to_str().unwrap();
    let cluster = confboot_util::hex::encode(CLUSTER_ID);

    // The honest node, with the cluster id given and from the cluster file.
    let out = verify(
        &node,
        node.addr,
        &policy,
        &["--cluster-id", &cluster, "--expected-events", events_arg],
    );
    let shown = text(&out);
    println!("{shown}");
    assert_eq!(out.status.code(), Some(0), "{shown}");
    assert!(
        shown.contains("its event log replays to the quote"),
        "{shown}"
    );
    assert!(
        shown.contains("verified: every enforced PCR matches"),
        "{shown}"
    );
    assert_eq!(shown.matches('✓').count(), 3, "PCRs 4, 9, 15:\n{shown}");
    assert!(
        shown.contains("warnOnly    ✗"),
        "PCR 0 differs, warnOnly:\n{shown}"
    );
    std::fs::write(
        node.path("confboot-cluster.json"),
        format!("{{\"clusterId\": \"{cluster}\"}}"),
    )
    .unwrap();
    let out = verify(&node, node.addr, &policy, &["-o", "json"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(json["verified"], true);
    assert_eq!(json["pcrs"].as_array().unwrap().len(), 4);
    assert_eq!(json["pcrs"][3]["pcr"], 15);
    assert_eq!(json["pcrs"][3]["source"], "cluster id");

    // Another cluster's id: PCR 15 holds another mark.
    let out = verify(&node, node.addr, &policy, &["--cluster-id", "00ff"]);
    let shown = text(&out);
    println!("{shown}");
    assert_eq!(out.status.code(), Some(1), "{shown}");
    assert!(shown.contains("PCR 15 holds another mark"), "{shown}");
    assert!(
        shown.contains("NOT verified: enforced PCR 15 differs"),
        "{shown}"
    );

    // The admin expects another command line: PCR 9 differs, and the
    // explanation names the command line's event.
    let other = boot_log(b"console=ttyS0 confboot.args=b");
    let admin = TempDir::new("verify-admin");
    let (other_policy, other_events) = admin_files(admin.path(), &other);
    let out = verify(
        &node,
        node.addr,
        &other_policy,
        &[
            "--cluster-id",
            &cluster,
            "--expected-events",
            other_events.to_str().unwrap(),
            "-o",
            "json",
        ],
    );
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(json["verified"], false);
    let pcr9 = &json["pcrs"][2];
    assert_eq!(
        (pcr9["pcr"].as_u64(), pcr9["ok"].as_bool()),
        (Some(9), Some(false))
    );
    let why = pcr9["explanation"].as_str().unwrap();
    assert!(
        why.starts_with("PCR 9, event 1 (console=ttyS0 confboot.args=b): sha256 "),
        "{why}"
    );

    // A key the admin does not trust signed the quote.
    let out = Command::new(workspace_binary("confboot"))
        .args([
            "verify",
            "--node",
            &node.addr.to_string(),
            "--cluster-id",
            &cluster,
        ])
        .arg("--measurements")
        .arg(&policy)
        .args(["--ak-trust", &format!("pinned:04{}", "11".repeat(64))])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(
        text(&out).contains("its evidence is refused"),
        "{}",
        text(&out)
    );

    // A relay that terminates TLS towards the CLI and forwards, for each
    // connection, what the genuine node attests on the relay's own session
    // with it: refused, with the reason named, in the table and in JSON.
    let relay = fake_node(Arc::new(Relay(node.addr)));
    let out = verify(
        &node,
        relay.local_addr(),
        &policy,
        &["--cluster-id", &cluster],
    );
    let shown = text(&out);
    println!("{shown}");
    assert_eq!(out.status.code(), Some(1), "{shown}");
    assert!(
        shown.contains("its evidence is refused: evidence not bound to this handshake"),
        "{shown}"
    );
    assert!(!shown.contains('✓'), "{shown}");
    let out = verify(
        &node,
        relay.local_addr(),
        &policy,
        &["--cluster-id", &cluster, "-o", "json"],
    );
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(json["verified"], false);
    assert!(
        json["error"]
            .as_str()
            .unwrap()
            .contains("not bound to this handshake"),
        "{json}"
    );
    relay.stop();

    // A host that replays an answer the node gave on an earlier session:
    // the evidence is bound to that session's exporter, not to this one.
    let recorded = fetch_document(&node.addr.to_string(), Duration::from_secs(30))
        .unwrap()
        .document;
    let replay = fake_node(Arc::new(Recorded(recorded)));
    let out = verify(
        &node,
        replay.local_addr(),
        &policy,
        &["--cluster-id", &cluster],
    );
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(
        text(&out).contains("not bound to this handshake"),
        "{}",
        text(&out)
    );
    replay.stop();

    // Answers that are not evidence, and no answer at all.
    for (answer, want) in [
        (
            Answer::Raw(b"SSH-2.0-OpenSSH\r\n".to_vec()),
            "TLS handshake failed",
        ),
        (
            Answer::Attesting(Arc::new(Recorded(AttestationDocument {
                variant: Variant::QemuVtpm,
                evidence: vec![0x41; 70 * 1024],
            }))),
            "malformed attestation message",
        ),
        (Answer::NotAttesting, "the node did not attest"),
        (Answer::Refusing, "the server refused this client"),
    ] {
        let host = fake_host(answer);
        let out = verify(&node, host, &policy, &["--cluster-id", &cluster]);
        assert_eq!(out.status.code(), Some(2), "{}", text(&out));
        assert!(text(&out).contains(want), "want {want:?}: {}", text(&out));
    }
    let closed = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let out = verify(&node, closed, &policy, &["--cluster-id", &cluster]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(text(&out).contains("cannot connect"), "{}", text(&out));

    // The agent refuses what is not a ClientHello (the old plain-HTTP
    // request among it: one scheme) without a byte of evidence, and keeps
    // serving; SIGTERM stops it.
    let mut raw = TcpStream::connect(node.addr).unwrap();
    raw.write_all(b"GET /?nonce=c2hvcnQ HTTP/1.1\r\n\r\n")
        .unwrap();
    let mut answer = Vec::new();
    let _ = raw.read_to_end(&mut answer);
    assert!(answer.is_empty(), "{}", String::from_utf8_lossy(&answer));
    // Clients that connect and say nothing (from other addresses) hold no
    // worker: the admin is still answered while they wait.
    let silent: Vec<TcpStream> = (0..100u8)
        .filter_map(|i| connect_from(std::net::Ipv4Addr::new(127, 0, 1, i), node.addr).ok())
        .collect();
    let out = verify(&node, node.addr, &policy, &["--cluster-id", &cluster]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{} silent: {}",
        silent.len(),
        text(&out)
    );
    drop(silent);
    node.agent.signal(nix::sys::signal::Signal::SIGTERM);
    let AgentNode { agent, .. } = node;
    let (status, lines) = agent.wait();
    assert!(status.success(), "{}", lines.join("\n"));
    assert!(
        lines.iter().any(|l| l.contains("stopped")),
        "{}",
        lines.join("\n")
    );
}

#[test]
fn an_unbootstrapped_node_is_not_verified() {
    let log = boot_log(b"console=ttyS0");
    let node = AgentNode::start("nodeagent", &log, None);
    let (policy, _) = admin_files(node.dir.path(), &log);
    let out = verify(&node, node.addr, &policy, &["--cluster-id", "abcd"]);
    let shown = text(&out);
    assert_eq!(out.status.code(), Some(1), "{shown}");
    assert!(
        shown.contains("PCR 15 is all-zero: the node is not bootstrapped"),
        "{shown}"
    );
}

/// A policy that pins an image (PCRs 4 and 9 enforced) no test node has.
fn image_policy_json() -> String {
    format!(
        r#"{{"4": {{"expected": "{}"}}, "9": {{"expected": "{}"}}}}"#,
        "ab".repeat(32),
        "cd".repeat(32)
    )
}

#[test]
fn bad_arguments_exit_2_before_asking() {
    let cli = workspace_binary("confboot");
    let admin = TempDir::new("verify-args");
    std::fs::write(admin.path().join("m.json"), image_policy_json()).unwrap();
    let base = [
        "--node",
        "127.0.0.1:1",
        "--measurements",
        "m.json",
        "--ak-trust",
        "insecure-any-ak",
    ];
    for (args, want) in [
        (base[..2].to_vec(), "--measurements"),
        (base.to_vec(), "the cluster file cannot be read"),
        (
            [&base[..], &["--cluster-id", "zz"]].concat(),
            "--cluster-id: not hex",
        ),
        (
            [&base[..], &["--cluster-id", "ab", "-o", "yaml"]].concat(),
            "want table, json or ear",
        ),
    ] {
        let out = Command::new(&cli)
            .arg("verify")
            .args(&args)
            .current_dir(admin.path())
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", text(&out));
        assert!(
            text(&out).contains(want),
            "{args:?}: want {want:?}: {}",
            text(&out)
        );
    }
}

/// Evidence recorded once (a genuine node's, on another session), sent
/// whatever the session: a host that replays it.
struct Recorded(AttestationDocument);

impl Issuer for Recorded {
    fn variant(&self) -> Variant {
        self.0.variant
    }
    fn issue(&self, _: &[u8; EXTRA_DATA_LEN]) -> Result<Vec<u8>, AttestationError> {
        Ok(self.0.evidence.clone())
    }
}

/// A relay: it terminates TLS towards the admin's CLI and, for each
/// connection, opens its own session with the genuine node and forwards
/// the node's evidence as its own. It cannot have the node bind the CLI's
/// session: the node binds the exporter of the session it is on (the
/// relay's), and the verify service takes no value from its caller.
///
/// Against the scheme this replaced (plain HTTP, evidence bound to a nonce
/// the caller picks) the same relay passed: it forwarded the CLI's nonce
/// to the genuine node and its answer back, and the CLI accepted it,
/// though what it spoke to was the relay.
struct Relay(SocketAddr);

/// Why [`Relay`] cannot issue.
#[derive(PartialEq)]
struct RelayFailed;

impl Issuer for Relay {
    fn variant(&self) -> Variant {
        Variant::QemuVtpm
    }
    fn issue(&self, _: &[u8; EXTRA_DATA_LEN]) -> Result<Vec<u8>, AttestationError> {
        fetch_document(&self.0.to_string(), Duration::from_secs(30))
            .map(|got| got.document.evidence)
            .map_err(|e| {
                AttestationError::Issue(confboot_attest::Detail::with(
                    &RelayFailed,
                    format!("the genuine node: {e}"),
                ))
            })
    }
}

/// A host serving aTLS on loopback that attests with `issuer`, as the
/// node agent's verify service does.
fn fake_node(issuer: Arc<dyn Issuer>) -> ServerHandle {
    confboot_verifier::verify::service::serve(
        TcpListener::bind("127.0.0.1:0").unwrap(),
        PoolConfig::default(),
        issuer,
    )
    .unwrap()
}

/// What a fake host answers.
enum Answer {
    /// These bytes, whatever was sent.
    Raw(Vec<u8>),
    /// aTLS, attesting with this issuer.
    Attesting(Arc<dyn Issuer>),
    /// aTLS, without attesting (the empty message).
    NotAttesting,
    /// aTLS, requiring its callers to attest: the CLI, which does not, is
    /// refused.
    Refusing,
}

/// Answers one connection on `listener` as `server` does.
fn answer_one<P: confboot_atls::ClientPeer>(
    listener: TcpListener,
    server: confboot_atls::AtlsServer<P>,
) {
    std::thread::spawn(move || {
        let (sock, _) = listener.accept().unwrap();
        if let Ok(mut accepted) = server.accept(sock, Duration::from_secs(30)) {
            // The caller reads the message and closes.
            let _ = accepted.stream.read_to_end(&mut Vec::new());
        }
    });
}

/// A host that answers one connection with `answer`.
fn fake_host(answer: Answer) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    match answer {
        Answer::Raw(bytes) => {
            std::thread::spawn(move || {
                let (mut sock, _) = listener.accept().unwrap();
                let _ = sock.write_all(&bytes);
            });
        }
        Answer::Attesting(issuer) => answer_one(
            listener,
            confboot_atls::AtlsServer::new(Some(issuer)).unwrap(),
        ),
        Answer::NotAttesting => answer_one(listener, confboot_atls::AtlsServer::new(None).unwrap()),
        Answer::Refusing => {
            let any: Arc<dyn confboot_attest::Validator> =
                Arc::new(confboot_vtpm::VtpmValidator::new(
                    confboot_vtpm::AkTrust::Pinned(Vec::new()),
                    MeasurementPolicy::default(),
                ));
            answer_one(
                listener,
                confboot_atls::AtlsServer::requiring_clients(None, vec![any]).unwrap(),
            )
        }
    }
    addr
}

#[test]
fn an_snp_node_is_verified_against_the_snp_policy_and_a_variant_not_accepted_is_refused() {
    use confboot_snp::SnpIssuer;
    use confboot_tests::snp::{Guest, Tcb, TestAmd, TestReportSource};

    let amd = TestAmd::new();
    let chip = Arc::new(amd.chip([7; 64], Tcb::CURRENT));
    let measurement = [0x5e; 48];
    let admin = TempDir::new("verify-snp");
    std::fs::write(admin.path().join("ark.pem"), amd.root_bundle_pem()).unwrap();
    std::fs::write(
        admin.path().join("snp.json"),
        format!(
            r#"{{"measurement": {{"expected": "{}"}}, "launch": "measuredDirectBoot", "kernelHash": "1111111111111111111111111111111111111111111111111111111111111111", "initrdHash": "2222222222222222222222222222222222222222222222222222222222222222", "cmdlineHash": "3333333333333333333333333333333333333333333333333333333333333333", "rootBundles": ["ark.pem"]}}"#,
            confboot_util::hex::encode(&measurement)
        ),
    )
    .unwrap();
    std::fs::write(admin.path().join("m.json"), image_policy_json()).unwrap();
    let snp_node = |debug: bool| -> Arc<dyn confboot_attest::Issuer> {
        let guest = Guest { measurement, debug };
        Arc::new(SnpIssuer::new(
            TestReportSource::honest(&amd, chip.clone(), guest),
            0,
        ))
    };
    let run = |node: Arc<dyn confboot_attest::Issuer>, args: &[&str]| {
        let node = fake_node(node);
        Command::new(workspace_binary("confboot"))
            .args(["verify", "--node", &node.local_addr().to_string()])
            .args(args)
            .current_dir(admin.path())
            .output()
            .unwrap()
    };
    let snp_args = ["--variants", "sev-snp", "--snp-policy", "snp.json"];

    let out = run(snp_node(false), &snp_args);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    for want in [
        "sev-snp evidence for a fresh nonce",
        "✓ report signature",
        "✓ report data",
        "cluster membership not checked",
        "verified: every check passes",
    ] {
        assert!(text(&out).contains(want), "want {want:?}: {}", text(&out));
    }

    let out = run(snp_node(true), &snp_args);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(
        text(&out).contains("✗ debug") && text(&out).contains("NOT verified"),
        "{}",
        text(&out)
    );

    // The default accepts qemu-vtpm only: the SNP node is refused.
    let out = run(
        snp_node(false),
        &[
            "--measurements",
            "m.json",
            "--ak-trust",
            "insecure-any-ak",
            "--cluster-id",
            "ab",
        ],
    );
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(
        text(&out)
            .contains("it attests with sev-snp, which --variants does not accept (qemu-vtpm)"),
        "{}",
        text(&out)
    );
}
