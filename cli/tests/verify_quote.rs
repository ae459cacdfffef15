//! `confboot verify-quote` on the real TDX quotes and Intel's collateral:
//! the exit status says whether every check passed (0), one failed (1), or
//! the input was unusable (2). `cli/src/main.rs` wires the command to the
//! same `run`.

#[path = "../src/check_report.rs"]
#[allow(
    dead_code,
    reason = "the layout's -o help belongs to the commands that print only it"
)]
mod check_report;
#[path = "../src/ear_output.rs"]
mod ear_output;
#[path = "../src/hex_option.rs"]
mod hex_option;
#[path = "../src/verify_quote.rs"]
mod verify_quote;

fn fixture(name: &str) -> String {
    format!(
        "{}/../crates/tdx/testdata/{name}",
        env!("CARGO_MANIFEST_DIR")
    )
}

fn run(args: &[&str]) -> i32 {
    verify_quote::run(args.iter().map(|s| s.to_string()).collect())
}

fn temp_file(name: &str, bytes: &[u8]) -> String {
    let dir = std::env::temp_dir().join(format!("confboot-verify-quote-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(name);
    std::fs::write(&path, bytes).unwrap();
    path.to_string_lossy().into_owned()
}

#[test]
fn a_genuine_quote_passes_without_collateral() {
    let q = fixture("quote_v5.dat");
    assert_eq!(run(&["--quote", &q, "--at", "2026-02-10"]), 0);
    // Its report data, exactly.
    let raw = std::fs::read(&q).unwrap();
    let report_data = confboot_util::hex::encode(&raw[54 + 520..54 + 584]);
    assert_eq!(
        run(&[
            "--quote",
            &q,
            "--at",
            "2026-02-10",
            "--report-data",
            &report_data
        ]),
        0
    );
    // Another report data: a check fails.
    let zeros = "00".repeat(64);
    assert_eq!(
        run(&["--quote", &q, "--at", "2026-02-10", "--report-data", &zeros]),
        1
    );
}

#[test]
fn the_v4_quote_with_its_collateral_fails_only_its_tcb_status() {
    let args = [
        "--quote",
        &fixture("quote_v4_spr_e4.dat"),
        "--tcb-info",
        &fixture("tcb_info_50806f000000.json"),
        "--qe-identity",
        &fixture("qe_identity.json"),
        "--pck-crl",
        &fixture("pck_platform_crl.der"),
        "--root-crl",
        &fixture("root_crl.der"),
        "--tcb-signing-chain",
        &fixture("tcb_info_issuer_chain.pem"),
        "--at",
        "2023-06-22T00:00:00Z",
    ];
    // The platform's TCB is below every level Intel lists (see the
    // testdata README): exit 1.
    assert_eq!(run(&args), 1);
    // Without the TCB info the rest verifies.
    let mut without: Vec<&str> = args.to_vec();
    without.drain(2..4);
    assert_eq!(run(&without), 0);
    // Too late for the collateral.
    let mut late = without.clone();
    let n = late.len();
    late[n - 1] = "2023-09-01";
    assert_eq!(run(&late), 1);
}

#[test]
fn a_flipped_signed_byte_fails_and_bad_input_is_refused() {
    let mut raw = std::fs::read(fixture("quote_v5.dat")).unwrap();
    raw[200] ^= 1;
    let q = temp_file("flipped.dat", &raw);
    assert_eq!(run(&["--quote", &q, "--at", "2026-02-10"]), 1);
    let short = temp_file("short.dat", &raw[..100]);
    assert_eq!(run(&["--quote", &short]), 2);
    assert_eq!(run(&["--quote", "/nonexistent/quote.dat"]), 2);
    assert_eq!(run(&[]), 2);
    let q = fixture("quote_v5.dat");
    assert_eq!(run(&["--quote", &q, "--tcb-info", &q]), 2);
    assert_eq!(run(&["--quote", &q, "--at", "yesterday"]), 2);
    let policy = temp_file("policy.json", br#"{"allowDebug": true}"#);
    assert_eq!(
        run(&["--quote", &q, "--policy", &policy]),
        2,
        "pins no MRTD"
    );
}

#[test]
fn a_policy_pins_the_measurements() {
    let q = fixture("quote_v5.dat");
    let raw = std::fs::read(&q).unwrap();
    let body = 54;
    let field = |at: usize| confboot_util::hex::encode(&raw[body + at..body + at + 48]);
    let mrtd = field(136);
    let rtmrs = format!(
        r#""rtmrs": {{"0": "{}", "1": "{}", "2": "{}"}}"#,
        field(328),
        field(376),
        field(424)
    );
    let good = temp_file(
        "good.json",
        format!(r#"{{"mrtd": "{mrtd}", {rtmrs}}}"#).as_bytes(),
    );
    assert_eq!(
        run(&["--quote", &q, "--at", "2026-02-10", "--policy", &good]),
        0
    );
    // MRTD alone admits any kernel, initrd and command line: refused.
    let mrtd_only = temp_file(
        "mrtd-only.json",
        format!(r#"{{"mrtd": "{mrtd}"}}"#).as_bytes(),
    );
    assert_eq!(
        run(&["--quote", &q, "--at", "2026-02-10", "--policy", &mrtd_only]),
        2
    );
    let other = temp_file(
        "other.json",
        format!(r#"{{"mrtd": "{}", {rtmrs}}}"#, "00".repeat(48)).as_bytes(),
    );
    assert_eq!(
        run(&["--quote", &q, "--at", "2026-02-10", "--policy", &other]),
        1
    );
}

#[test]
fn help_names_every_option() {
    let help = verify_quote::CMD.help();
    for o in verify_quote::CMD.opts {
        assert!(help.contains(&format!("--{}", o.long)), "{help}");
    }
}

#[test]
fn an_event_log_must_replay_to_the_quoted_rtmrs() {
    use confboot_tdx::{CcelLog, synthetic_ccel_log};
    use confboot_tests::tdx::{Td, TestIntel, TestQuoteSource};
    use std::sync::Arc;
    // A quote of a test platform whose RTMRs are a log's; the policy pins
    // the test root and names the test Intel's collateral.
    let intel = TestIntel::new();
    let area = synthetic_ccel_log(&[(1, 0x8000_0007, b"firmware"), (3, 6, b"initrd")], 128);
    let log = CcelLog::parse(&area).unwrap();
    let td = Td {
        mr_td: [0x7d; 48],
        rtmrs: log.replay(),
        debug: false,
    };
    let source = TestQuoteSource::honest(Arc::new(intel.platform(1)), td);
    let quote = temp_file("minted.dat", &source.make_quote([0; 64]));
    temp_file("minted-root.pem", intel.root_pem().as_bytes());
    temp_file("minted-tcb.json", intel.tcb_info().as_bytes());
    temp_file("minted-qe.json", intel.qe_identity().as_bytes());
    temp_file("minted-chain.pem", intel.tcb_info_issuer_chain().as_bytes());
    let policy = temp_file(
        "minted.json",
        format!(
            r#"{{"mrtd": "{}", "rtmrs": {{"0": "{}", "1": "{}", "2": "{}"}},
                "tdAttributes": ["SEPT_VE_DISABLE"],
                "rootCertificates": ["minted-root.pem"],
                "collateral": {{"tcbInfo": "minted-tcb.json", "qeIdentity": "minted-qe.json",
                    "tcbInfoIssuerChain": "minted-chain.pem"}}}}"#,
            "7d".repeat(48),
            confboot_util::hex::encode(&log.replay()[0]),
            confboot_util::hex::encode(&log.replay()[1]),
            confboot_util::hex::encode(&log.replay()[2])
        )
        .as_bytes(),
    );
    let good = temp_file("ccel.bin", &area);
    let args = ["--quote", &quote, "--policy", &policy];
    assert_eq!(run(&args), 0);
    assert_eq!(run(&[&args[..], &["--event-log", &good]].concat()), 0);
    // Another log: it does not replay to the quoted RTMRs.
    let other = temp_file(
        "other-ccel.bin",
        &synthetic_ccel_log(&[(1, 0x8000_0007, b"firmware"), (3, 6, b"evil")], 0),
    );
    assert_eq!(run(&[&args[..], &["--event-log", &other]].concat()), 1);
    // Not a log at all: bad input.
    let junk = temp_file("junk-ccel.bin", b"not a log");
    assert_eq!(run(&[&args[..], &["--event-log", &junk]].concat()), 2);
}
