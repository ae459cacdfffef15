//! `confboot verify-report` on the real SEV-SNP fixtures: the exit status
//! says whether every check passed (0), one failed (1), or the input was
//! unusable (2). `cli/src/main.rs` wires the command to the same `run`.

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
#[path = "../src/verify_report.rs"]
mod verify_report;

fn fixture(name: &str) -> String {
    format!(
        "{}/../crates/snp/testdata/{name}",
        env!("CARGO_MANIFEST_DIR")
    )
}

fn run(args: &[&str]) -> i32 {
    verify_report::run(args.iter().map(|s| s.to_string()).collect())
}

fn temp_file(name: &str, bytes: &[u8]) -> String {
    let dir = std::env::temp_dir().join(format!("confboot-verify-report-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(name);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(&path, bytes).unwrap();
    path.to_string_lossy().into_owned()
}

#[test]
fn genuine_reports_pass() {
    let report = fixture("test-report.bin");
    let vcek = fixture("test-vcek.der");
    assert_eq!(run(&["--report", &report, "--vcek", &vcek, "-v", "0"]), 0);
    // With confboot's binding and the report's own measurement as policy.
    let r = std::fs::read(&report).unwrap();
    let extra = confboot_util::hex::encode(&r[0x50..0x70]);
    let policy = temp_file(
        "policy.json",
        format!(
            r#"{{"measurement": {{"expected": "{}"}}, "launch": "measuredDirectBoot", "kernelHash": "1111111111111111111111111111111111111111111111111111111111111111", "initrdHash": "2222222222222222222222222222222222222222222222222222222222222222", "cmdlineHash": "3333333333333333333333333333333333333333333333333333333333333333", "minimumTcb": {{"snp": 8, "microcode": 115}}}}"#,
            confboot_util::hex::encode(&r[0x90..0xC0])
        )
        .as_bytes(),
    );
    assert_eq!(
        run(&[
            "--report",
            &report,
            "--vcek",
            &vcek,
            "--policy",
            &policy,
            "--extra-data",
            &extra
        ]),
        0
    );
    // The Milan report with its VCEK and the ASK/ARK chain file.
    assert_eq!(
        run(&[
            "--report",
            &fixture("report_milan.bin"),
            "--vcek",
            &fixture("vcek_milan.der"),
            "--chain",
            &fixture("cert_chain_milan"),
        ]),
        0
    );
    // The VLEK report needs the ASVK and VMPL 1, and a time when its VLEK
    // was valid: it expired on 2025-12-10.
    let vlek = [
        "--report",
        &fixture("test-vlek-report.bin"),
        "--vcek",
        &fixture("test-vlek.der"),
        "--at",
        "2025-06-01",
    ];
    assert_eq!(run(&vlek), 1);
    let asvk = fixture("milan_ask_ark_asvk.pem");
    assert_eq!(
        run(&[&vlek[..], &["--chain", &asvk, "--vmpl", "1"]].concat()),
        0
    );
    assert_eq!(
        run(&[&vlek[..], &["--roots", &asvk, "--vmpl", "1"]].concat()),
        0
    );
    // Today it is refused, and so it is at a time before it was issued.
    for at in ["2026-11-22", "2024-12-01"] {
        let mut args = vlek.to_vec();
        args[5] = at;
        assert_eq!(
            run(&[&args[..], &["--roots", &asvk, "--vmpl", "1"]].concat()),
            1,
            "{at}"
        );
    }
}

#[test]
fn failing_checks_exit_1() {
    let report = fixture("test-report.bin");
    let vcek = fixture("test-vcek.der");
    let mut r = std::fs::read(&report).unwrap();
    r[0x90] ^= 1; // the measurement
    let bad = temp_file("tampered.bin", &r);
    assert_eq!(run(&["--report", &bad, "--vcek", &vcek]), 1);
    // Wrong binding, wrong VMPL, wrong roots, a VCEK of another chip.
    assert_eq!(
        run(&[
            "--report",
            &report,
            "--vcek",
            &vcek,
            "--extra-data",
            &"00".repeat(32)
        ]),
        1
    );
    assert_eq!(
        run(&["--report", &report, "--vcek", &vcek, "--vmpl", "2"]),
        1
    );
    assert_eq!(
        run(&[
            "--report",
            &report,
            "--vcek",
            &vcek,
            "--roots",
            &fixture("genoa_ask_ark_asvk.pem")
        ]),
        1
    );
    assert_eq!(
        run(&["--report", &report, "--vcek", &fixture("vcek_milan.der")]),
        1
    );
    assert_eq!(
        run(&[
            "--report",
            &report,
            "--vcek",
            &fixture("test-vcek-invalid-legacy.der")
        ]),
        1
    );
    // No VCEK anywhere.
    assert_eq!(run(&["--report", &report]), 1);
}

/// A policy that pins chips adds one line: ✓ when the report's chip is
/// listed (exit 0), ✗ naming the chip when it is not (exit 1). Run as the
/// `confboot` binary to see what it prints.
#[test]
fn a_policy_that_pins_chips_prints_one_more_line() {
    let report = fixture("test-report.bin");
    let vcek = fixture("test-vcek.der");
    let r = std::fs::read(&report).unwrap();
    let own_chip = confboot_util::hex::encode(&r[0x1A0..0x1E0]);
    let policy = |name: &str, chip: &str| {
        temp_file(
            name,
            format!(
                r#"{{"measurement": {{"expected": "{}"}}, "launch": "measuredDirectBoot", "kernelHash": "1111111111111111111111111111111111111111111111111111111111111111", "initrdHash": "2222222222222222222222222222222222222222222222222222222222222222", "cmdlineHash": "3333333333333333333333333333333333333333333333333333333333333333", "allowedChipIds": ["{chip}"]}}"#,
                confboot_util::hex::encode(&r[0x90..0xC0])
            )
            .as_bytes(),
        )
    };
    let verify_with = |policy: &str| {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_confboot"))
            .args(["verify-report", "--report", &report, "--vcek", &vcek])
            .args(["--policy", policy, "-v", "0"])
            .output()
            .unwrap();
        let stdout = String::from_utf8(out.stdout).unwrap();
        let lines: Vec<String> = stdout
            .lines()
            .filter(|l| l.contains("allowed chip"))
            .map(str::to_string)
            .collect();
        (out.status.code(), lines)
    };
    let (status, lines) = verify_with(&policy("own-chip.json", &own_chip));
    assert_eq!(status, Some(0));
    assert_eq!(
        lines,
        [format!(
            "✓ allowed chip: {}… is listed (1 allowed)",
            &own_chip[..16]
        )]
    );
    let (status, lines) = verify_with(&policy("other-chip.json", &"5a".repeat(64)));
    assert_eq!(status, Some(1));
    assert_eq!(
        lines,
        [format!(
            "✗ allowed chip: policy violated: chip id not allowed: {}…",
            &own_chip[..16]
        )]
    );
    // Without the key, no such line.
    let (status, lines) = verify_with(&temp_file(
        "any-chip.json",
        format!(
            r#"{{"measurement": {{"expected": "{}"}}, "launch": "measuredDirectBoot", "kernelHash": "1111111111111111111111111111111111111111111111111111111111111111", "initrdHash": "2222222222222222222222222222222222222222222222222222222222222222", "cmdlineHash": "3333333333333333333333333333333333333333333333333333333333333333"}}"#,
            confboot_util::hex::encode(&r[0x90..0xC0])
        )
        .as_bytes(),
    ));
    assert_eq!((status, lines.len()), (Some(0), 0));
}

#[test]
fn unusable_input_exits_2() {
    let report = fixture("test-report.bin");
    let vcek = fixture("test-vcek.der");
    assert_eq!(run(&[]), 2);
    assert_eq!(run(&["--report", "/nonexistent/report.bin"]), 2);
    assert_eq!(run(&["--report", &vcek, "--vcek", &vcek]), 2); // not 1184 bytes
    assert_eq!(run(&["--report", &report, "--vcek", &report]), 2); // not a certificate
    assert_eq!(
        run(&["--report", &report, "--vcek", &vcek, "--extra-data", "abc"]),
        2
    );
    assert_eq!(
        run(&["--report", &report, "--vcek", &vcek, "--report-data", "00"]),
        2
    );
    assert_eq!(
        run(&["--report", &report, "--vcek", &vcek, "--vmpl", "4"]),
        2
    );
    assert_eq!(run(&["--report", &report, "--evidence", &report]), 2);
    assert_eq!(run(&["--report", &report, "extra"]), 2);
    assert_eq!(
        run(&["--report", &report, "--vcek", &vcek, "--at", "yesterday"]),
        2
    );
}

#[test]
fn evidence_files_are_read_too() {
    use confboot_snp::{CertEntry, CertKind, SnpEvidence, SnpReport};
    let report = std::fs::read(fixture("test-report.bin")).unwrap();
    let ev = SnpEvidence {
        report: SnpReport::from_bytes(&report).unwrap(),
        certificates: vec![CertEntry {
            kind: CertKind::Vcek,
            der: std::fs::read(fixture("test-vcek.der")).unwrap(),
        }],
    };
    let path = temp_file("evidence.bin", &ev.encode().unwrap());
    assert_eq!(run(&["--evidence", &path]), 0);
}

#[test]
fn help_names_every_option() {
    let help = verify_report::CMD.help();
    for o in verify_report::CMD.opts {
        assert!(help.contains(&format!("--{}", o.long)), "{help}");
    }
}

#[test]
fn certificate_directories_and_the_vcek_cache_serve_too() {
    let report = fixture("test-report.bin");
    let r = std::fs::read(&report).unwrap();
    let vcek = std::fs::read(fixture("test-vcek.der")).unwrap();
    // snpguest's certificate directory layout.
    let dir = std::path::PathBuf::from(temp_file("certs/vcek.der", b""))
        .parent()
        .unwrap()
        .to_path_buf();
    std::fs::write(dir.join("vcek.der"), &vcek).unwrap();
    let dir = dir.to_string_lossy().into_owned();
    assert_eq!(run(&["--report", &report, "--certs", &dir]), 0);
    // The cache: <dir>/<chip_id hex>/<reported_tcb hex>.der.
    let cache = std::env::temp_dir().join(format!(
        "confboot-verify-report-cache-{}",
        std::process::id()
    ));
    let entry = cache
        .join(confboot_util::hex::encode(&r[0x1A0..0x1E0]))
        .join(format!(
            "{}.der",
            confboot_util::hex::encode(&r[0x180..0x188])
        ));
    std::fs::create_dir_all(entry.parent().unwrap()).unwrap();
    std::fs::write(&entry, &vcek).unwrap();
    let status = run(&[
        "--report",
        &report,
        "--vcek-cache",
        &cache.to_string_lossy(),
    ]);
    std::fs::remove_dir_all(&cache).unwrap();
    assert_eq!(status, 0);
    // An empty directory is unusable input.
    let empty = std::env::temp_dir().join(format!(
        "confboot-verify-report-empty-{}",
        std::process::id()
    ));
    std::fs::create_dir_all(&empty).unwrap();
    assert_eq!(
        run(&["--report", &report, "--certs", &empty.to_string_lossy()]),
        2
    );
}

#[test]
fn json_output_is_one_object_naming_the_refusal_of_a_failed_check() {
    let run = |args: &[&str]| {
        std::process::Command::new(env!("CARGO_BIN_EXE_confboot"))
            .arg("verify-report")
            .args(args)
            .output()
            .unwrap()
    };
    let dir = format!("{}/../crates/snp/testdata", env!("CARGO_MANIFEST_DIR"));
    let vcek = format!("{dir}/vcek_milan.der");
    let mut report = std::fs::read(format!("{dir}/report_milan.bin")).unwrap();
    // A byte of the signed body flipped: the signature no longer verifies.
    report[0x90] ^= 0xff;
    let flipped = std::env::temp_dir().join(format!("confboot-json-report-{}", std::process::id()));
    std::fs::write(&flipped, &report).unwrap();
    let out = run(&[
        "--report",
        flipped.to_str().unwrap(),
        "--vcek",
        &vcek,
        "-o",
        "json",
    ]);
    assert_eq!(out.status.code(), Some(1));
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON object");
    assert_eq!(doc["command"], "verify-report");
    assert_eq!(doc["variant"], "sev-snp");
    assert_eq!(doc["verified"], false);
    let failed: Vec<&serde_json::Value> = doc["checks"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["outcome"] == "failed")
        .collect();
    assert!(!failed.is_empty(), "{doc}");
    assert!(
        failed.iter().all(|c| c["reason"].is_string()),
        "each failed check names its refusal: {doc}"
    );
    // -o json and --ear-key do not go together; -o names a format.
    let out = run(&[
        "--report",
        flipped.to_str().unwrap(),
        "-o",
        "json",
        "--ear-key",
        "k.pem",
    ]);
    assert_eq!(out.status.code(), Some(2));
    let out = run(&["--report", flipped.to_str().unwrap(), "-o", "yaml"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("text, json or ear"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn a_policy_that_declares_no_launch_is_refused_as_input() {
    let report = std::fs::read(fixture("report_milan.bin")).unwrap();
    let m = confboot_util::hex::encode(&report[0x90..0xC0]);
    let with = |launch: &str| {
        temp_file(
            &format!("policy-{}.json", launch.len()),
            format!(r#"{{"measurement": {{"expected": "{m}"}}{launch}}}"#).as_bytes(),
        )
    };
    let args = |policy: &str| {
        run(&[
            "--report",
            &fixture("report_milan.bin"),
            "--vcek",
            &fixture("vcek_milan.der"),
            "--policy",
            policy,
        ])
    };
    // No launch: the measurement would pin the firmware only (exit 2, no
    // verdict); a measured direct boot with its hashes is a verdict.
    assert_eq!(args(&with("")), 2);
    let k = "11".repeat(32);
    let direct = format!(
        r#", "launch": "measuredDirectBoot", "kernelHash": "{k}", "initrdHash": "{k}", "cmdlineHash": "{k}""#
    );
    assert_ne!(args(&with(&direct)), 2);
}
