//! SEV-SNP nodes on the join path, end to end: a real joinsvc process
//! with the production SNP validator (its policy pins a test ARK minted by
//! `confboot_tests::snp`), and nodes whose SNP issuer signs reports with a
//! test VCEK behind the report-source trait, over real aTLS.
//!
//! Each refusal is seen twice: the node gets no ticket, and joinsvc's log
//! names the check that refused it.

use confboot_cluster::ticket::JoinTicket;
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use confboot_appraisal::reference::{DirectBootHashes, ReferenceSet, SigningKey, VariantReference};
use confboot_atls::{self as atls, AtlsError};
use confboot_attest::{Issuer, MeasurementPolicy, Validator, Variant};
use confboot_proto::join::IssueJoinTicketRequest;
use confboot_snp::{SnpIssuer, SnpPolicy, SnpValidator};
use confboot_tests::TempDir;
use confboot_tests::cluster::{Joinsvc, Node};
use confboot_tests::snp::{Guest, ReplayingIssuer, Tcb, TestAmd, TestChip, TestReportSource};
use confboot_tests::tickets::SealedClient;

const DISK: &str = "2f3c6c1e-2b5d-4e8a-9c7f-1a2b3c4d5e6f";
/// The launch measurement the policy expects.
const GOOD: [u8; 48] = [0x5e; 48];

fn joinsvc_bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_joinsvc"))
}

/// The test AMD, minted once per test binary (RSA key generation).
fn amd() -> &'static TestAmd {
    static AMD: OnceLock<TestAmd> = OnceLock::new();
    AMD.get_or_init(TestAmd::new)
}

fn chip(id: u8) -> Arc<TestChip> {
    Arc::new(amd().chip([id; 64], Tcb::CURRENT))
}

fn guest() -> Guest {
    Guest {
        measurement: GOOD,
        debug: false,
    }
}

/// An SNP policy file expecting `GOOD`, rooted in the test ARK only.
fn snp_policy(dir: &Path) -> PathBuf {
    snp_policy_with(dir, "")
}

/// [`snp_policy`] with `more` keys (`, "key": value...`).
fn snp_policy_with(dir: &Path, more: &str) -> PathBuf {
    std::fs::write(dir.join("test-ark.pem"), amd().root_bundle_pem()).unwrap();
    let file = dir.join("snp.json");
    std::fs::write(
        &file,
        format!(
            r#"{{"measurement": {{"expected": "{}"}}, "launch": "measuredDirectBoot", "kernelHash": "1111111111111111111111111111111111111111111111111111111111111111", "initrdHash": "2222222222222222222222222222222222222222222222222222222222222222", "cmdlineHash": "3333333333333333333333333333333333333333333333333333333333333333", "rootBundles": ["test-ark.pem"]{more}}}"#,
            confboot_util::hex::encode(&GOOD)
        ),
    )
    .unwrap();
    file
}

/// A joinsvc accepting `variants`; `vtpm` is the vTPM node it trusts (with
/// its policy) when `qemu-vtpm` is accepted.
fn joinsvc(variants: &str, vtpm: Option<&Node>, dir: &TempDir) -> Joinsvc {
    joinsvc_with_policy(variants, vtpm, &snp_policy(dir.path()))
}

/// [`joinsvc`] with the SNP policy file `policy`.
fn joinsvc_with_policy(variants: &str, vtpm: Option<&Node>, policy: &Path) -> Joinsvc {
    let policy = policy.display().to_string();
    let extra = ["--variants", variants, "--snp-policy", &policy];
    match vtpm {
        Some(node) => Joinsvc::start_with(&joinsvc_bin(), &node.policy(), &[node], &extra),
        None => Joinsvc::start_with(&joinsvc_bin(), &MeasurementPolicy::default(), &[], &extra),
    }
}

fn snp_issuer(source: TestReportSource) -> Arc<dyn Issuer> {
    Arc::new(SnpIssuer::new(source, 0))
}

/// Asks for a join ticket, attesting with `issuer`.
fn join(joinsvc: &Joinsvc, issuer: &Arc<dyn Issuer>) -> Result<JoinTicket, String> {
    let mut client = SealedClient::connect(
        joinsvc.rpc_addr,
        Duration::from_secs(20),
        &[],
        Arc::clone(issuer),
    )
    .map_err(|e| e.to_string())?;
    let req = IssueJoinTicketRequest {
        disk_uuid: DISK.into(),
        ..Default::default()
    };
    client
        .join(&req, Duration::from_secs(20))
        .map_err(|e| e.to_string())
}

/// `issuer` gets no ticket, and joinsvc logs a refusal that says `why`.
fn assert_refused(joinsvc: &Joinsvc, issuer: &Arc<dyn Issuer>, why: &str) {
    let err = join(joinsvc, issuer).expect_err(why);
    assert!(!err.is_empty());
    let line = joinsvc.process.wait_for_line(why, 500);
    assert!(line.contains("refused"), "{line}");
}

#[test]
fn an_snp_node_joins_over_atls_and_gets_its_ticket() {
    let dir = TempDir::new("snp-join");
    let joinsvc = joinsvc("sev-snp", None, &dir);
    let issuer = snp_issuer(TestReportSource::honest(amd(), chip(1), guest()));
    let ticket = join(&joinsvc, &issuer).expect("an honest SNP node is admitted");
    assert_eq!(
        ticket.state_disk_key.expose(),
        joinsvc.master_secret.state_disk_key(DISK).expose()
    );
    assert!(!ticket.token.is_empty());
    joinsvc
        .process
        .wait_for_line("joining nodes may attest with: sev-snp", 100);
}

#[test]
fn a_report_signed_by_another_chip_is_refused() {
    let dir = TempDir::new("snp-chip");
    let joinsvc = joinsvc("sev-snp", None, &dir);
    let (a, b) = (chip(1), chip(2));
    // Chip A's report and VCEK, signed with chip B's key.
    let forged = TestReportSource {
        signing: b.clone(),
        ..TestReportSource::honest(amd(), a.clone(), guest())
    };
    assert_refused(
        &joinsvc,
        &snp_issuer(forged),
        "report signature does not verify with the endorsement key",
    );
    // Chip B signs and sends its own (genuine) VCEK, but the report claims
    // chip A's id.
    let other_chip = TestReportSource {
        signing: b.clone(),
        table_vcek: b,
        ..TestReportSource::honest(amd(), a, guest())
    };
    assert_refused(
        &joinsvc,
        &snp_issuer(other_chip),
        "is not the report's chip id",
    );
}

/// A policy that pins chips (`allowedChipIds`): a genuine node on a listed
/// chip joins; the same image on another chip, whose report and VCEK are
/// genuine, gets no ticket, and joinsvc names the chip it refused.
#[test]
fn a_node_on_a_chip_the_policy_does_not_list_is_refused() {
    let dir = TempDir::new("snp-allowed-chips");
    let (listed, unlisted) = (chip(1), chip(3));
    let policy = snp_policy_with(
        dir.path(),
        &format!(
            r#", "allowedChipIds": ["{}", "{}"]"#,
            confboot_util::hex::encode(&listed.chip_id),
            confboot_util::hex::encode(&[0x02; 64])
        ),
    );
    let joinsvc = joinsvc_with_policy("sev-snp", None, &policy);
    let ticket = join(
        &joinsvc,
        &snp_issuer(TestReportSource::honest(amd(), listed, guest())),
    )
    .expect("a node on a listed chip is admitted");
    assert_eq!(
        ticket.state_disk_key.expose(),
        joinsvc.master_secret.state_disk_key(DISK).expose()
    );
    assert_refused(
        &joinsvc,
        &snp_issuer(TestReportSource::honest(amd(), unlisted, guest())),
        "chip id not allowed: 0303030303030303…",
    );
}

#[test]
fn a_debug_guest_is_refused() {
    let dir = TempDir::new("snp-debug");
    let joinsvc = joinsvc("sev-snp", None, &dir);
    let debug = Guest {
        debug: true,
        ..guest()
    };
    assert_refused(
        &joinsvc,
        &snp_issuer(TestReportSource::honest(amd(), chip(1), debug)),
        "allows debugging",
    );
}

#[test]
fn a_wrong_measurement_is_refused() {
    let dir = TempDir::new("snp-measurement");
    let joinsvc = joinsvc("sev-snp", None, &dir);
    let other = Guest {
        measurement: [0x66; 48],
        ..guest()
    };
    assert_refused(
        &joinsvc,
        &snp_issuer(TestReportSource::honest(amd(), chip(1), other)),
        "measurement 0 differs",
    );
}

#[test]
fn a_replayed_report_is_refused() {
    let dir = TempDir::new("snp-replay");
    let joinsvc = joinsvc("sev-snp", None, &dir);
    let issuer: Arc<dyn Issuer> = Arc::new(ReplayingIssuer::new(SnpIssuer::new(
        TestReportSource::honest(amd(), chip(1), guest()),
        0,
    )));
    // The first handshake is genuine; the same report in a second one
    // binds the first handshake's key and nonce.
    join(&joinsvc, &issuer).expect("the recorded handshake itself is admitted");
    assert_refused(&joinsvc, &issuer, "evidence not bound to this handshake");
}

#[test]
fn a_join_service_admits_only_the_variants_it_is_configured_for() {
    let vtpm_node = Node::start("vtpm-node", b"kernel");
    let vtpm_issuer: Arc<dyn Issuer> = vtpm_node.issuer.clone();
    let snp_node = snp_issuer(TestReportSource::honest(amd(), chip(1), guest()));

    let dir = TempDir::new("snp-variants");
    let snp_only = joinsvc("sev-snp", None, &dir);
    assert_refused(
        &snp_only,
        &vtpm_issuer,
        "peer attests with qemu-vtpm, which is not accepted here (accepted: sev-snp)",
    );
    let vtpm_only = joinsvc("qemu-vtpm", Some(&vtpm_node), &dir);
    assert_refused(
        &vtpm_only,
        &snp_node,
        "peer attests with sev-snp, which is not accepted here (accepted: qemu-vtpm)",
    );
    let both = joinsvc("qemu-vtpm,sev-snp", Some(&vtpm_node), &dir);
    let disk_key = both.master_secret.state_disk_key(DISK);
    for issuer in [&vtpm_issuer, &snp_node] {
        let ticket = join(&both, issuer).expect("both variants are admitted");
        assert_eq!(ticket.state_disk_key.expose(), disk_key.expose());
    }
}

#[test]
fn an_snp_node_refuses_a_join_service_of_a_variant_it_does_not_accept() {
    use confboot_tpm::swtpm::Swtpm;
    // joinsvc attests with its TPM (qemu-vtpm) and would take the node
    // (it accepts sev-snp nodes: the client speaks first, so a joinsvc
    // that refused the node would end the exchange before the node saw
    // its variant); the node accepts only sev-snp join services.
    let cp_tpm = Swtpm::start().unwrap();
    let tpm_arg = cp_tpm.addr().to_string();
    let vtpm_node = Node::start("vtpm-node", b"kernel");
    let dir = TempDir::new("snp-node-side");
    let policy = snp_policy(dir.path()).display().to_string();
    let joinsvc = Joinsvc::start_with(
        &joinsvc_bin(),
        &vtpm_node.policy(),
        &[&vtpm_node],
        &[
            "--tpm",
            &tpm_arg,
            "--variants",
            "qemu-vtpm,sev-snp",
            "--snp-policy",
            &policy,
        ],
    );
    joinsvc.process.wait_for_line("attesting with the TPM", 100);
    let accepted: Arc<dyn Validator> =
        Arc::new(SnpValidator::new(SnpPolicy::load(&snp_policy(dir.path())).unwrap()).unwrap());
    let node = snp_issuer(TestReportSource::honest(amd(), chip(1), guest()));
    let err = atls::connect(
        joinsvc.rpc_addr,
        Duration::from_secs(20),
        &[accepted],
        Some(node),
    )
    .err()
    .expect("the node refuses the join service");
    assert_eq!(
        err,
        AtlsError::VariantNotAccepted {
            variant: Variant::QemuVtpm,
            accepted: vec![Variant::SevSnp],
        }
    );
}

/// A compromised SEV-SNP member cannot pull more tickets: its launch (the
/// same `REPORT_ID` in every fresh report it makes) got its join ticket,
/// and every later request, a rejoin for another node's disk (disk UUIDs
/// are public), a control-plane join, or the same disk again, is refused
/// with no key; a new launch of the node is served.
#[test]
fn an_snp_launch_gets_one_ticket_and_a_compromised_member_nothing_more() {
    use confboot_proto::join::IssueRejoinTicketRequest;
    const OTHER_DISK: &str = "9f3c6c1e-2b5d-4e8a-9c7f-1a2b3c4d5e6f";
    let dir = TempDir::new("snp-once");
    let joinsvc = joinsvc("sev-snp", None, &dir);
    let source = || TestReportSource::honest(amd(), chip(1), guest());
    let launch = snp_issuer(source());
    join(&joinsvc, &launch).expect("the launch's first ticket");
    let rejoin = |issuer: &Arc<dyn Issuer>, disk: &str| {
        let mut client = SealedClient::connect(
            joinsvc.rpc_addr,
            Duration::from_secs(20),
            &[],
            Arc::clone(issuer),
        )
        .map_err(|e| e.to_string())?;
        client
            .rejoin(
                &IssueRejoinTicketRequest {
                    disk_uuid: disk.into(),
                },
                Duration::from_secs(20),
            )
            .map_err(|e| e.to_string())
    };
    for disk in [OTHER_DISK, DISK] {
        let err = rejoin(&launch, disk).expect_err("a second ticket");
        assert!(err.contains("was given a ticket already"), "{err}");
    }
    let err = join(&joinsvc, &launch).expect_err("a second join");
    assert!(err.contains("was given a ticket already"), "{err}");
    joinsvc
        .process
        .wait_for_line("was given a ticket already", 500);
    // The node rebooted: a new launch, served.
    let key = rejoin(&snp_issuer(source()), OTHER_DISK).expect("a new launch");
    assert_eq!(
        key.state_disk_key.expose(),
        joinsvc.master_secret.state_disk_key(OTHER_DISK).expose()
    );
    let (_, metrics) = joinsvc.http_get("/metrics");
    assert!(
        metrics
            .lines()
            .any(|l| l == "joinsvc_tickets_refused_total{reason=\"launch_served\"} 3"),
        "{metrics}"
    );
}

/// A set whose `sev-snp` part is the launch `measurement`, valid from a
/// day ago for `days`.
fn snp_set(version: &str, measurement: [u8; 48], days: i64) -> ReferenceSet {
    let now = confboot_util::time::unix_now();
    ReferenceSet {
        name: "confboot-snp-node".into(),
        version: version.into(),
        not_before: now - 86_400,
        not_after: now + days * 86_400,
        variants: vec![VariantReference::snp_launch(
            measurement,
            DirectBootHashes {
                kernel: [0x11; 32],
                initrd: [0x22; 32],
                cmdline: [0x33; 32],
            },
        )],
    }
}

/// Writes `bytes` aside and renames it in, as a deployment copies a file.
fn put(dir: &Path, file: &str, bytes: &[u8]) {
    let tmp = dir.join(format!(".{file}.tmp"));
    std::fs::write(&tmp, bytes).unwrap();
    std::fs::rename(&tmp, dir.join(file)).unwrap();
}

/// `tries` × 100 ms until `f` holds.
fn eventually(tries: u32, mut f: impl FnMut() -> bool) -> bool {
    (0..tries).any(|_| {
        let ok = f();
        if !ok {
            std::thread::sleep(Duration::from_millis(100));
        }
        ok
    })
}

/// With `--reference-values-dir`, the live signed sets' launches decide
/// which SEV-SNP image joins, not the policy file (which holds only the
/// platform's checks): a set added while joinsvc runs admits its launch
/// without a restart, a removed set's launch is refused by name, the
/// platform's checks still apply, and a policy that still pins a launch,
/// or sets without an SEV-SNP part, keep joinsvc from starting.
#[test]
fn snp_nodes_are_admitted_by_the_launches_of_the_live_signed_sets() {
    const NEXT: [u8; 48] = [0x77; 48];
    let dir = TempDir::new("snp-sets");
    let sets = dir.path().join("sets");
    std::fs::create_dir_all(&sets).unwrap();
    let release = SigningKey::generate().unwrap().0;
    let key_file = dir.path().join("release.pem");
    std::fs::write(&key_file, release.release_key().to_pem()).unwrap();
    put(
        &sets,
        "v1.cbor",
        &snp_set("1", GOOD, 30).sign(&release).unwrap(),
    );
    std::fs::write(dir.path().join("test-ark.pem"), amd().root_bundle_pem()).unwrap();
    let platform = dir.path().join("snp-platform.json");
    std::fs::write(&platform, r#"{"rootBundles": ["test-ark.pem"]}"#).unwrap();
    let sets_args = |policy: &Path| -> Vec<String> {
        [
            "--variants",
            "sev-snp",
            "--snp-policy",
            policy.to_str().unwrap(),
            "--reference-values-dir",
            sets.to_str().unwrap(),
            "--release-key",
            key_file.to_str().unwrap(),
            "--reference-values-reload",
            "1",
        ]
        .map(String::from)
        .to_vec()
    };
    let args = sets_args(&platform);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let joinsvc = Joinsvc::start_with(&joinsvc_bin(), &MeasurementPolicy::default(), &[], &args);
    joinsvc
        .process
        .wait_for_line("reference-value set confboot-snp-node 1 accepted", 500);

    let honest = snp_issuer(TestReportSource::honest(amd(), chip(1), guest()));
    let next_guest = Guest {
        measurement: NEXT,
        debug: false,
    };
    let next = snp_issuer(TestReportSource::honest(amd(), chip(1), next_guest));
    join(&joinsvc, &honest).expect("the set's launch joins");
    assert_refused(&joinsvc, &next, "measurement 0 differs");

    // The next release's set, copied in: its launch joins, no restart.
    put(
        &sets,
        "v2.cbor",
        &snp_set("2", NEXT, 30).sign(&release).unwrap(),
    );
    assert!(
        eventually(100, || join(&joinsvc, &next).is_ok()),
        "the new set's launch joins after a reload\n{}",
        joinsvc.process.log().join("\n")
    );
    // v1 removed: its launch is refused, naming the retired set.
    std::fs::remove_file(sets.join("v1.cbor")).unwrap();
    // (A fresh launch each time: a launch gets one ticket.)
    let fresh = || snp_issuer(TestReportSource::honest(amd(), chip(1), guest()));
    assert!(
        eventually(100, || join(&joinsvc, &fresh()).is_err()),
        "the removed set's launch is refused"
    );
    let line = joinsvc
        .process
        .wait_for_line("match only the reference-value set", 500);
    assert!(
        line.contains("confboot-snp-node 1") && line.contains("refused"),
        "{line}"
    );
    // The platform's checks still hold: a debug guest of the live launch.
    let debug = snp_issuer(TestReportSource::honest(
        amd(),
        chip(1),
        Guest {
            measurement: NEXT,
            debug: true,
        },
    ));
    assert_refused(&joinsvc, &debug, "debug");

    // Refused at start: a policy that still pins a launch (it would mean
    // two things), and sets none of which has an SEV-SNP part.
    let full = snp_policy(dir.path());
    let out = joinsvc.run_replacing(&[("--snp-policy", full.to_str().unwrap())]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("is the signed reference-value sets'"),
        "{stderr}"
    );
    let vtpm_only = dir.path().join("vtpm-only");
    std::fs::create_dir_all(&vtpm_only).unwrap();
    let mut set = snp_set("3", GOOD, 30);
    set.variants = vec![VariantReference {
        variant: Variant::QemuVtpm,
        policy: MeasurementPolicy::from_json(&format!(
            r#"{{"4": {{"expected": "{}"}}, "9": {{"expected": "{}"}}}}"#,
            "aa".repeat(32),
            "bb".repeat(32)
        ))
        .unwrap(),
        events: Default::default(),
        launch: None,
    }];
    put(&vtpm_only, "v3.cbor", &set.sign(&release).unwrap());
    let out = joinsvc.run_replacing(&[("--reference-values-dir", vtpm_only.to_str().unwrap())]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("--reference-values-dir"), "{stderr}");
}
