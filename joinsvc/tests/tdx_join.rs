//! Intel TDX nodes on the join path, end to end without TDX hardware: a
//! real joinsvc process with the production TDX validator (its policy pins
//! a test root minted by `confboot_tests::tdx` and names that test Intel's
//! TCB info, QE identity and CRLs as its collateral files), and nodes whose
//! production TDX issuer gets DCAP quotes in the real format, signed by a
//! test platform's attestation key under a QE report its PCK key signed,
//! with the TD's CCEL log, over real aTLS.
//!
//! Each refusal is seen twice: the node gets no ticket, and joinsvc's log
//! names the check that refused it.

use confboot_cluster::ticket::{JoinTicket, RejoinTicket};
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use confboot_atls as atls;
use confboot_attest::{Issuer, MeasurementPolicy};
use confboot_proto::join::{IssueJoinTicketRequest, IssueRejoinTicketRequest};
use confboot_tdx::{CcelLog, TdxIssuer, synthetic_ccel_log};
use confboot_tests::TempDir;
use confboot_tests::cluster::{Joinsvc, Node};
use confboot_tests::snp::ReplayingIssuer;
use confboot_tests::tdx::{Forgery, Td, TestIntel, TestPlatform, TestQuoteSource};
use confboot_tests::tickets::SealedClient;

const DISK: &str = "2f3c6c1e-2b5d-4e8a-9c7f-1a2b3c4d5e6f";
/// The MRTD the policy expects.
const GOOD_MRTD: [u8; 48] = [0x7d; 48];
/// The serial of the PCK certificate the PCK CRL revokes.
const REVOKED: u8 = 0x66;
/// `EV_EVENT_TAG` and `EV_EFI_ACTION`.
const EV_EVENT_TAG: u32 = 0x6;
const EV_EFI_ACTION: u32 = 0x8000_0007;

fn joinsvc_bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_joinsvc"))
}

/// The test Intel, minted once per test binary.
fn intel() -> &'static TestIntel {
    static INTEL: OnceLock<TestIntel> = OnceLock::new();
    INTEL.get_or_init(TestIntel::new)
}

fn platform(serial: u8) -> Arc<TestPlatform> {
    Arc::new(intel().platform(serial))
}

fn tagged(text: &str) -> Vec<u8> {
    let mut d = 0x8a35_ff10u32.to_le_bytes().to_vec();
    d.extend_from_slice(&(text.len() as u32).to_le_bytes());
    d.extend_from_slice(text.as_bytes());
    d
}

/// A TD's CCEL log: firmware into RTMR0, the kernel into RTMR1, the
/// initrd (`initrd` its text) into RTMR2, and `rtmr3` events into RTMR3.
fn ccel(initrd: &str, rtmr3: &[&[u8]]) -> CcelLog {
    let (kernel, initrd) = (tagged("Linux kernel"), tagged(initrd));
    let mut events: Vec<(u32, u32, &[u8])> = vec![
        (1, EV_EFI_ACTION, b"TDVF firmware"),
        (2, EV_EVENT_TAG, &kernel),
        (3, EV_EVENT_TAG, &initrd),
    ];
    events.extend(rtmr3.iter().map(|e| (4, EV_EFI_ACTION, *e)));
    CcelLog::parse(&synthetic_ccel_log(&events, 256)).unwrap()
}

fn good_log() -> CcelLog {
    ccel("Linux initrd", &[])
}

/// A TD whose RTMRs are `log`'s.
fn td(log: &CcelLog) -> Td {
    Td {
        mr_td: GOOD_MRTD,
        rtmrs: log.replay(),
        debug: false,
    }
}

/// Writes the test Intel's root and collateral, the expected log and a
/// TDX policy naming them into `dir`; returns the policy file.
fn tdx_policy(dir: &Path) -> PathBuf {
    let i = intel();
    let write = |name: &str, bytes: &[u8]| std::fs::write(dir.join(name), bytes).unwrap();
    write("test-root.pem", i.root_pem().as_bytes());
    write("tcb_info.json", i.tcb_info().as_bytes());
    write("qe_identity.json", i.qe_identity().as_bytes());
    write("pck_crl.der", &i.pck_crl(&[REVOKED]));
    write("root_crl.der", &i.root_crl());
    write("tcb_chain.pem", i.tcb_info_issuer_chain().as_bytes());
    let expected = good_log();
    write("expected-ccel.bin", expected.as_bytes());
    let hex = confboot_util::hex::encode;
    let rtmrs = expected.replay();
    let file = dir.join("tdx.json");
    std::fs::write(
        &file,
        format!(
            r#"{{"mrtd": "{}",
                "rtmrs": {{"0": "{}", "1": "{}", "2": "{}"}},
                "tdAttributes": ["SEPT_VE_DISABLE"],
                "rootCertificates": ["test-root.pem"],
                "collateral": {{"tcbInfo": "tcb_info.json", "qeIdentity": "qe_identity.json",
                    "pckCrl": "pck_crl.der", "rootCrl": "root_crl.der",
                    "tcbInfoIssuerChain": "tcb_chain.pem"}},
                "expectedEventLog": "expected-ccel.bin"}}"#,
            hex(&GOOD_MRTD),
            hex(&rtmrs[0]),
            hex(&rtmrs[1]),
            hex(&rtmrs[2]),
        ),
    )
    .unwrap();
    file
}

/// A joinsvc accepting `variants`; `vtpm` is the vTPM node it trusts (with
/// its policy) when `qemu-vtpm` is accepted.
fn joinsvc(variants: &str, vtpm: Option<&Node>, dir: &TempDir) -> Joinsvc {
    let policy = tdx_policy(dir.path());
    let policy = policy.display().to_string();
    let extra = ["--variants", variants, "--tdx-policy", &policy];
    match vtpm {
        Some(node) => Joinsvc::start_with(&joinsvc_bin(), &node.policy(), &[node], &extra),
        None => Joinsvc::start_with(&joinsvc_bin(), &MeasurementPolicy::default(), &[], &extra),
    }
}

/// The production issuer on `source`, sending `log`.
fn tdx_issuer(source: TestQuoteSource, log: &CcelLog) -> Arc<dyn Issuer> {
    Arc::new(TdxIssuer::new(source).with_ccel_log(log))
}

fn honest_issuer() -> Arc<dyn Issuer> {
    let log = good_log();
    tdx_issuer(TestQuoteSource::honest(platform(1), td(&log)), &log)
}

/// Asks for a join ticket, attesting with `issuer`.
fn join(joinsvc: &Joinsvc, issuer: &Arc<dyn Issuer>) -> Result<JoinTicket, String> {
    // The node's sealing key goes with its evidence: joinsvc seals the
    // ticket's secrets to it.
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

/// Asks for a rejoin ticket, attesting with `issuer`.
fn rejoin(joinsvc: &Joinsvc, issuer: &Arc<dyn Issuer>) -> Result<RejoinTicket, String> {
    let mut client = SealedClient::connect(
        joinsvc.rpc_addr,
        Duration::from_secs(20),
        &[],
        Arc::clone(issuer),
    )
    .map_err(|e| e.to_string())?;
    let req = IssueRejoinTicketRequest {
        disk_uuid: DISK.into(),
    };
    client
        .rejoin(&req, Duration::from_secs(20))
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
fn a_tdx_node_joins_over_atls_and_gets_its_ticket() {
    let dir = TempDir::new("tdx-join");
    let joinsvc = joinsvc("tdx", None, &dir);
    let ticket = join(&joinsvc, &honest_issuer()).expect("an honest TD is admitted");
    assert_eq!(
        ticket.state_disk_key.expose(),
        joinsvc.master_secret.state_disk_key(DISK).expose()
    );
    assert!(!ticket.token.is_empty());
    joinsvc
        .process
        .wait_for_line("joining nodes may attest with: tdx", 100);
}

#[test]
fn a_debug_td_or_a_wrong_mrtd_is_refused() {
    let dir = TempDir::new("tdx-debug-mrtd");
    let joinsvc = joinsvc("tdx", None, &dir);
    let log = good_log();
    let debug = Td {
        debug: true,
        ..td(&log)
    };
    assert_refused(
        &joinsvc,
        &tdx_issuer(TestQuoteSource::honest(platform(1), debug), &log),
        "the TD is debuggable",
    );
    let other_image = Td {
        mr_td: [0x66; 48],
        ..td(&log)
    };
    assert_refused(
        &joinsvc,
        &tdx_issuer(TestQuoteSource::honest(platform(1), other_image), &log),
        "measurement 0 differs",
    );
}

#[test]
fn a_wrong_rtmr_is_refused_naming_its_event() {
    let dir = TempDir::new("tdx-rtmr");
    let joinsvc = joinsvc("tdx", None, &dir);
    // Another initrd: the log replays to the quoted RTMRs, RTMR2 is not
    // the policy's, and the expected log names the event.
    let log = ccel("evil initrd", &[]);
    assert_refused(
        &joinsvc,
        &tdx_issuer(TestQuoteSource::honest(platform(1), td(&log)), &log),
        "measurement 3 differs",
    );
    joinsvc
        .process
        .wait_for_line("RTMR2, event 1 (Linux initrd): sha384 ", 100);
    // The genuine RTMRs with a log the host edited: it does not replay.
    let edited = ccel("Linux initrd", &[b"extra"]);
    assert_refused(
        &joinsvc,
        &tdx_issuer(
            TestQuoteSource::honest(platform(1), td(&good_log())),
            &edited,
        ),
        "the log is not this TD's",
    );
}

#[test]
fn forged_quotes_and_foreign_or_revoked_platforms_are_refused() {
    let dir = TempDir::new("tdx-forged");
    let joinsvc = joinsvc("tdx", None, &dir);
    let log = good_log();
    let forged = |forgery| {
        tdx_issuer(
            TestQuoteSource {
                forgery,
                ..TestQuoteSource::honest(platform(1), td(&log))
            },
            &log,
        )
    };
    assert_refused(
        &joinsvc,
        &forged(Forgery::OtherAttestationKey),
        "the quote signature does not verify with the attestation key",
    );
    assert_refused(
        &joinsvc,
        &forged(Forgery::UnboundQeReport),
        "is not SHA-256(attestation key ‖ QE authentication data)",
    );
    // A platform of another (test) Intel, whose root has the pinned
    // root's name but not its key.
    let other_intel = TestIntel::new();
    assert_refused(
        &joinsvc,
        &tdx_issuer(
            TestQuoteSource::honest(Arc::new(other_intel.platform(1)), td(&log)),
            &log,
        ),
        "does not verify with the key of Test SGX Root CA",
    );
    assert_refused(
        &joinsvc,
        &tdx_issuer(TestQuoteSource::honest(platform(REVOKED), td(&log)), &log),
        "is revoked by the CRL of \"Test SGX PCK Platform CA\"",
    );
}

#[test]
fn a_replayed_quote_is_refused() {
    let dir = TempDir::new("tdx-replay");
    let joinsvc = joinsvc("tdx", None, &dir);
    let log = good_log();
    let issuer: Arc<dyn Issuer> = Arc::new(ReplayingIssuer::new(
        TdxIssuer::new(TestQuoteSource::honest(platform(1), td(&log))).with_ccel_log(&log),
    ));
    // The first handshake is genuine; the same quote in a second one
    // binds the first handshake's key and nonce.
    join(&joinsvc, &issuer).expect("the recorded handshake itself is admitted");
    assert_refused(&joinsvc, &issuer, "evidence not bound to this handshake");
}

#[test]
fn a_bootstrapped_td_is_refused_a_join_ticket() {
    let dir = TempDir::new("tdx-marked");
    let joinsvc = joinsvc("tdx", None, &dir);
    // RTMR3 extended (the policy does not pin it): the TD was bootstrapped.
    let log = ccel("Linux initrd", &[b"cluster mark"]);
    let issuer = tdx_issuer(TestQuoteSource::honest(platform(1), td(&log)), &log);
    let err = join(&joinsvc, &issuer).expect_err("a marked TD");
    assert!(err.contains("RTMR3 is not all zero"), "{err}");
}

#[test]
fn a_td_marked_with_this_clusters_mark_gets_no_join_or_rejoin_ticket() {
    let dir = TempDir::new("tdx-member");
    let joinsvc = joinsvc("tdx", None, &dir);
    let cluster_id = confboot_kms::derive_cluster_id(
        joinsvc.master_secret.measurement_secret().expose(),
        &confboot_kms::MeasurementSalt::new(joinsvc.measurement_salt.clone()).unwrap(),
    );
    // A bootstrapped member: the firmware's log as at boot, RTMR3
    // extended at run time with this cluster's mark (no log event for it).
    let log = good_log();
    let mut member = td(&log);
    member.rtmrs[3] = confboot_cluster::mark::marked_rtmr3(&cluster_id);
    let member = tdx_issuer(TestQuoteSource::honest(platform(1), member), &log);
    let why = "RTMR3 is not all zero: it holds this cluster's mark";
    let err = join(&joinsvc, &member).expect_err("a member asks for no join ticket");
    assert!(err.contains(why), "{err}");
    let err = rejoin(&joinsvc, &member).expect_err("a member asks for no rejoin ticket");
    assert!(err.contains(why), "{err}");
    // The same TD before it marked itself gets both.
    join(&joinsvc, &honest_issuer()).expect("an unmarked TD joins");
    rejoin(&joinsvc, &honest_issuer()).expect("an unmarked TD rejoins");
}

#[test]
fn a_join_service_admits_only_the_variants_it_is_configured_for() {
    let vtpm_node = Node::start("vtpm-node", b"kernel");
    let vtpm_issuer: Arc<dyn Issuer> = vtpm_node.issuer.clone();
    let tdx_node = honest_issuer();

    let dir = TempDir::new("tdx-variants");
    let tdx_only = joinsvc("tdx", None, &dir);
    assert_refused(
        &tdx_only,
        &vtpm_issuer,
        "peer attests with qemu-vtpm, which is not accepted here (accepted: tdx)",
    );
    let vtpm_only = joinsvc("qemu-vtpm", Some(&vtpm_node), &dir);
    assert_refused(
        &vtpm_only,
        &tdx_node,
        "peer attests with tdx, which is not accepted here (accepted: qemu-vtpm)",
    );
    let both = joinsvc("qemu-vtpm,tdx", Some(&vtpm_node), &dir);
    let disk_key = both.master_secret.state_disk_key(DISK);
    for issuer in [&vtpm_issuer, &tdx_node] {
        let ticket = join(&both, issuer).expect("both variants are admitted");
        assert_eq!(ticket.state_disk_key.expose(), disk_key.expose());
    }
}

#[test]
fn a_tdx_node_refuses_a_join_service_of_a_variant_it_does_not_accept() {
    use confboot_atls::AtlsError;
    use confboot_attest::{Validator, Variant};
    use confboot_tdx::TdxValidator;
    use confboot_tpm::swtpm::Swtpm;
    // joinsvc attests with its TPM (qemu-vtpm) and would take the node
    // (it accepts tdx nodes: the client speaks first, so a joinsvc that
    // refused the node would end the exchange before the node saw its
    // variant); the node accepts only tdx join services.
    let cp_tpm = Swtpm::start().unwrap();
    let tpm_arg = cp_tpm.addr().to_string();
    let vtpm_node = Node::start("vtpm-node", b"kernel");
    let dir = TempDir::new("tdx-node-side");
    let policy = tdx_policy(dir.path()).display().to_string();
    let joinsvc = Joinsvc::start_with(
        &joinsvc_bin(),
        &vtpm_node.policy(),
        &[&vtpm_node],
        &[
            "--tpm",
            &tpm_arg,
            "--variants",
            "qemu-vtpm,tdx",
            "--tdx-policy",
            &policy,
        ],
    );
    joinsvc.process.wait_for_line("attesting with the TPM", 100);
    let accepted: Arc<dyn Validator> =
        Arc::new(TdxValidator::load(&tdx_policy(dir.path())).unwrap());
    let err = atls::connect(
        joinsvc.rpc_addr,
        Duration::from_secs(20),
        &[accepted],
        Some(honest_issuer()),
    )
    .err()
    .expect("the node refuses the join service");
    assert_eq!(
        err,
        AtlsError::VariantNotAccepted {
            variant: Variant::QemuVtpm,
            accepted: vec![Variant::Tdx],
        }
    );
}

/// G8 across a restart: joinsvc keeps the TDX validator's time floor in
/// `--state-dir/time-floor`, the sets' file. A joinsvc that ran 40 days on
/// (its floor there) and is restarted with the clock back at today finds
/// the test Intel's collateral (next update in 30 days) stale, as it was
/// when it last ran; the TD is refused.
#[test]
fn a_restart_at_a_clock_set_back_keeps_stale_collateral_refused() {
    let dir = TempDir::new("tdx-floor");
    let state = dir.path().join("joinsvc-state");
    let policy = tdx_policy(dir.path());
    let (policy, state_arg) = (policy.display().to_string(), state.display().to_string());
    let extra = [
        "--variants",
        "tdx",
        "--tdx-policy",
        &policy,
        "--state-dir",
        &state_arg,
    ];
    let mut joinsvc =
        Joinsvc::start_with(&joinsvc_bin(), &MeasurementPolicy::default(), &[], &extra);
    join(&joinsvc, &honest_issuer()).expect("current collateral: admitted");
    let floor_file = state.join("time-floor");
    let kept: i64 = std::fs::read_to_string(&floor_file)
        .expect("the TDX check keeps its floor in the state directory")
        .trim()
        .parse()
        .unwrap();
    assert!(kept >= confboot_util::time::unix_now() - 120, "{kept}");
    // What the file holds after joinsvc ran 40 days on.
    let later = confboot_util::time::unix_now() + 40 * 86_400;
    std::fs::write(&floor_file, format!("{later}\n")).unwrap();
    joinsvc.restart();
    let err = join(&joinsvc, &honest_issuer()).expect_err("stale as of the floor");
    assert!(!err.is_empty());
    let line = joinsvc.process.wait_for_line("TCB info", 500);
    assert!(line.contains("refused"), "{line}");
    // The floor did not move back.
    assert_eq!(
        std::fs::read_to_string(&floor_file).unwrap(),
        format!("{later}\n")
    );
}
