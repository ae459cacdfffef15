//! The verify service end to end, as processes: the real `nodeagent` over
//! a swtpm whose PCRs an event log reproduces, and the real `confboot
//! verify`; then hosts that lie: another cluster's mark, another image,
//! an untrusted key, a replayed answer, answers that are not documents.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use confboot_attest::MeasurementPolicy;
use confboot_attest::tpm::event_log::{EventLog, synthetic_log};
use confboot_attest::tpm::swtpm::Swtpm;
use confboot_attest::vtpm::VtpmIssuer;
use confboot_tests::cluster::workspace_binary;
use confboot_tests::hostile::connect_from;
use confboot_tests::{ChildProcess, TempDir, addr_after};
use nodeagent::verify::http::fetch_document;
use nodeagent::verify::{AttestationDocument, VERIFY_NONCE_LEN};

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

/// A running node: its swtpm measured by `log` and marked, its agent.
struct AgentNode {
    dir: TempDir,
    ak_public: Vec<u8>,
    agent: ChildProcess,
    addr: SocketAddr,
    _swtpm: Swtpm,
}

impl AgentNode {
    fn start(log: &[u8], mark: Option<&[u8]>) -> AgentNode {
        let dir = TempDir::new("nodeagent");
        let swtpm = Swtpm::start().expect("swtpm starts");
        let ak_public = {
            let issuer = VtpmIssuer::new(swtpm.connect().unwrap()).unwrap();
            issuer
                .with_tpm(|tpm| {
                    EventLog::parse(log).unwrap().extend_into(tpm)?;
                    match mark {
                        Some(id) => confboot_attest::tpm::mark_node(tpm, id),
                        None => Ok(()),
                    }
                })
                .unwrap();
            issuer.ak_public_key()
        };
        let log_file = dir.path().join("binary_bios_measurements");
        std::fs::write(&log_file, log).unwrap();
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_nodeagent"));
        cmd.args(["--tpm", &swtpm.addr().to_string()])
            .arg("--event-log")
            .arg(&log_file)
            .args(["--verify-listen", "127.0.0.1:0", "-v", "3"]);
        let agent = ChildProcess::spawn("nodeagent", cmd);
        let line = agent.wait_for_line("verify service listening on", 3000);
        let addr = addr_after(&line, "listening on ");
        AgentNode {
            dir,
            ak_public,
            agent,
            addr,
            _swtpm: swtpm,
        }
    }

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
    let node = AgentNode::start(&log, Some(CLUSTER_ID));
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

    // A host that replays an answer the node gave for another nonce.
    let recorded = fetch_document(
        &node.addr.to_string(),
        &[3u8; VERIFY_NONCE_LEN],
        std::time::Duration::from_secs(30),
    )
    .unwrap();
    let replay = fake_node(Answer::Document(recorded));
    let out = verify(&node, replay, &policy, &["--cluster-id", &cluster]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(
        text(&out).contains("not bound to this handshake"),
        "{}",
        text(&out)
    );

    // Answers that are not attestation documents, and no answer at all.
    for (answer, want) in [
        (
            Answer::Raw(b"SSH-2.0-OpenSSH\r\n".to_vec()),
            "not an HTTP answer",
        ),
        (
            Answer::Raw(b"HTTP/1.1 200 OK\r\nContent-Length: 104857600\r\n\r\n".to_vec()),
            "larger than an attestation document",
        ),
        (
            Answer::Raw(oversized_body()),
            "larger than an attestation document",
        ),
        (
            Answer::Raw(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}".to_vec()),
            "\"variant\" must be a string",
        ),
        (
            Answer::Raw(b"HTTP/1.1 503 Busy\r\nContent-Length: 5\r\n\r\nbusy\n".to_vec()),
            "HTTP 503: busy",
        ),
    ] {
        let out = verify(
            &node,
            fake_node(answer),
            &policy,
            &["--cluster-id", &cluster],
        );
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

    // The agent refuses bad requests and keeps serving; SIGTERM stops it.
    let mut raw = TcpStream::connect(node.addr).unwrap();
    raw.write_all(b"GET /?nonce=c2hvcnQ HTTP/1.1\r\n\r\n")
        .unwrap();
    let mut answer = String::new();
    raw.read_to_string(&mut answer).unwrap();
    assert!(answer.starts_with("HTTP/1.1 400 "), "{answer}");
    assert!(answer.ends_with("nonce has 5 bytes, want 32\n"), "{answer}");
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
    let node = AgentNode::start(&log, None);
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
            "want table or json",
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

/// What a fake node answers.
enum Answer {
    Document(AttestationDocument),
    Raw(Vec<u8>),
}

/// A 200 answer whose body runs past any document's size, without a length.
fn oversized_body() -> Vec<u8> {
    let mut bytes = b"HTTP/1.1 200 OK\r\n\r\n".to_vec();
    bytes.resize(
        bytes.len() + nodeagent::verify::MAX_DOCUMENT_BYTES + 16 * 1024,
        b'A',
    );
    bytes
}

/// A host that answers one request with `answer`, whatever was asked.
fn fake_node(answer: Answer) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        let (mut sock, _) = listener.accept().unwrap();
        let mut head = [0u8; 1024];
        let _ = sock.read(&mut head);
        let bytes = match answer {
            Answer::Document(doc) => {
                let body = doc.to_json();
                format!(
                    "HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n{body}",
                    body.len()
                )
                .into_bytes()
            }
            Answer::Raw(bytes) => bytes,
        };
        let _ = sock.write_all(&bytes);
    });
    addr
}

/// A host that answers `issuers.len()` requests, the i-th with evidence
/// from `issuers[i]` bound to the nonce the request carries.
fn fake_attesting_node(issuers: Vec<std::sync::Arc<dyn confboot_attest::Issuer>>) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        for issuer in issuers {
            let (mut sock, _) = listener.accept().unwrap();
            let mut head = [0u8; 1024];
            let n = sock.read(&mut head).unwrap();
            let head = String::from_utf8_lossy(&head[..n]).to_string();
            let target = head.split(' ').nth(1).unwrap_or("");
            let nonce = nodeagent::verify::parse_request_target(target).unwrap();
            let body = AttestationDocument::issue(issuer.as_ref(), &nonce)
                .unwrap()
                .to_json();
            let answer = format!(
                "HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n{body}",
                body.len()
            );
            let _ = sock.write_all(answer.as_bytes());
        }
    });
    addr
}

#[test]
fn an_snp_node_is_verified_against_the_snp_policy_and_a_variant_not_accepted_is_refused() {
    use confboot_attest::snp::SnpIssuer;
    use confboot_tests::snp::{Guest, Tcb, TestAmd, TestReportSource};
    use std::sync::Arc;

    let amd = TestAmd::new();
    let chip = Arc::new(amd.chip([7; 64], Tcb::CURRENT));
    let measurement = [0x5e; 48];
    let admin = TempDir::new("verify-snp");
    std::fs::write(admin.path().join("ark.pem"), amd.root_bundle_pem()).unwrap();
    std::fs::write(
        admin.path().join("snp.json"),
        format!(
            r#"{{"measurement": {{"expected": "{}"}}, "rootBundles": ["ark.pem"]}}"#,
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
    let node = fake_attesting_node(vec![snp_node(false), snp_node(true), snp_node(false)]);
    let run = |args: &[&str]| {
        Command::new(workspace_binary("confboot"))
            .args(["verify", "--node", &node.to_string()])
            .args(args)
            .current_dir(admin.path())
            .output()
            .unwrap()
    };
    let snp_args = ["--variants", "sev-snp", "--snp-policy", "snp.json"];

    let out = run(&snp_args);
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

    let out = run(&snp_args);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(
        text(&out).contains("✗ debug") && text(&out).contains("NOT verified"),
        "{}",
        text(&out)
    );

    // The default accepts qemu-vtpm only: the SNP node is refused.
    let out = run(&[
        "--measurements",
        "m.json",
        "--ak-trust",
        "insecure-any-ak",
        "--cluster-id",
        "ab",
    ]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(
        text(&out)
            .contains("it attests with sev-snp, which --variants does not accept (qemu-vtpm)"),
        "{}",
        text(&out)
    );
}
