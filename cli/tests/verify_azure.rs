//! `confboot verify-azure` on the recorded Azure samples: the exit status
//! says whether every check passed (0), one failed (1), or the input was
//! unusable (2). `cli/src/main.rs` wires the command to the same `run`.

#[path = "../src/check_report.rs"]
mod check_report;
#[path = "../src/verify_azure.rs"]
mod verify_azure;

fn fixture(name: &str) -> String {
    format!(
        "{}/../crates/azure/testdata/{name}",
        env!("CARGO_MANIFEST_DIR")
    )
}

fn run(args: &[&str]) -> i32 {
    verify_azure::run(args.iter().map(|s| s.to_string()).collect())
}

fn temp_file(name: &str, bytes: &[u8]) -> String {
    let dir = std::env::temp_dir().join(format!("confboot-verify-azure-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(name);
    std::fs::write(&path, bytes).unwrap();
    path.to_string_lossy().into_owned()
}

/// PCRs 4 and 9 of a quote file, as a measurements policy.
fn pcrs_policy(name: &str, quote_json: &str) -> String {
    let q: serde_json::Value = serde_json::from_slice(&std::fs::read(quote_json).unwrap()).unwrap();
    let pcr = |i: usize| q["pcrs"][i].as_str().unwrap().to_string();
    temp_file(
        name,
        format!(
            r#"{{"4": {{"expected": "{}"}}, "9": {{"expected": "{}"}}}}"#,
            pcr(4),
            pcr(9)
        )
        .as_bytes(),
    )
}

const CHALLENGE: &str = "6368616c6c656e6765";

#[test]
fn the_recorded_snp_sample_passes_and_a_wrong_nonce_fails() {
    let quote = fixture("azure-snp/tpm-quote-v1.json");
    let pcrs = pcrs_policy("snp-pcrs.json", &quote);
    let policy = temp_file(
        "snp-policy.json",
        br#"{"measurement": {"expected": "9ac48fcac8a2d88aeeff8d427ad4f2be0e3917c748a18bdf52cc317e7fe20308b459d5ef1a12e0c22944eb386d17c315"}}"#,
    );
    let hcl = fixture("azure-snp/hcl-report.bin");
    let vcek = fixture("azure-snp/vcek.pem");
    let args = |nonce: &'static str, output: &'static str| {
        vec![
            "--hcl-report",
            &hcl,
            "--tpm-quote",
            &quote,
            "--vcek",
            &vcek,
            "--snp-policy",
            &policy,
            "--pcrs",
            &pcrs,
            "--nonce",
            nonce,
            "--at",
            "2026-12-01",
            "-o",
            output,
            "-v",
            "0",
        ]
        .into_iter()
        .map(str::to_string)
        .collect::<Vec<_>>()
    };
    assert_eq!(verify_azure::run(args(CHALLENGE, "text")), 0);
    assert_eq!(verify_azure::run(args(CHALLENGE, "json")), 0);
    assert_eq!(verify_azure::run(args("00", "text")), 1);
    // After the VCEK's notAfter (2030-05-02) the chain is no longer valid.
    let mut a = args(CHALLENGE, "text");
    a[13] = "2031-01-01".into();
    assert_eq!(verify_azure::run(a), 1);
    // The binary quote form of the same quote.
    let bin = fixture("azure-snp/quote.bin");
    let mut a = args(CHALLENGE, "text");
    a[3] = bin;
    assert_eq!(verify_azure::run(a), 0);
    // A flipped byte in the HCL report's runtime claims.
    let mut bytes = std::fs::read(&hcl).unwrap();
    bytes[0x4d4 + 200] ^= 1;
    let changed = temp_file("hcl-changed.bin", &bytes);
    let mut a = args(CHALLENGE, "text");
    a[1] = changed;
    assert_eq!(verify_azure::run(a), 1);
}

#[test]
fn recorded_evidence_files_are_read() {
    for (file, nonce) in [
        ("azure-snp/evidence-v0.json", CHALLENGE),
        ("azure-snp/evidence-v1.json", CHALLENGE),
        (
            "azure-snp/evidence-v2.json",
            "982f5c6e45df0ed3f10b6f60b02f0c8390e281300f3805e2279c16168cd6ae9aa398f647caa2338748cd0fd9f5f819ef",
        ),
        (
            "azure-snp/evidence-genoa.json",
            "0218488bae25d2509232bf676f1a66a30d7372add909109b36016ef136f2938ca05475f8b46094de6b64270ea35d950f",
        ),
        // TDX: every check that can run offline passes; those that need
        // Intel's collateral are skipped (not failed).
        ("azure-tdx/evidence-v0.json", CHALLENGE),
        ("azure-tdx/evidence-v1.json", CHALLENGE),
    ] {
        let e = fixture(file);
        assert_eq!(
            run(&[
                "--evidence",
                &e,
                "--nonce",
                nonce,
                "--at",
                "2026-12-01",
                "-v",
                "0"
            ]),
            0,
            "{file}"
        );
        assert_eq!(
            run(&[
                "--evidence",
                &e,
                "--nonce",
                "01",
                "--at",
                "2026-12-01",
                "-v",
                "0"
            ]),
            1,
            "{file}"
        );
    }
    // The TDX sample under a policy with another MRTD.
    let policy = temp_file(
        "tdx-policy.json",
        format!(
            r#"{{"mrtd": "{0}", "rtmrs": {{"0": "{0}", "1": "{0}", "2": "{0}"}}}}"#,
            "00".repeat(48)
        )
        .as_bytes(),
    );
    let e = fixture("azure-tdx/evidence-v1.json");
    assert_eq!(
        run(&[
            "--evidence",
            &e,
            "--tdx-policy",
            &policy,
            "--nonce",
            CHALLENGE,
            "--at",
            "2026-12-01",
            "-v",
            "0"
        ]),
        1
    );
    // An SEV-SNP policy for TDX evidence: refused by the HCL report check.
    let snp_policy = temp_file(
        "snp-any.json",
        br#"{"measurement": {"expected": "9ac48fcac8a2d88aeeff8d427ad4f2be0e3917c748a18bdf52cc317e7fe20308b459d5ef1a12e0c22944eb386d17c315"}}"#,
    );
    assert_eq!(
        run(&["--evidence", &e, "--snp-policy", &snp_policy, "-v", "0"]),
        1
    );
}

#[test]
fn bad_arguments_exit_2() {
    let e = fixture("azure-snp/evidence-v1.json");
    let hcl = fixture("azure-snp/hcl-report.bin");
    let vcek = fixture("azure-snp/vcek.pem");
    for args in [
        vec![],
        vec!["--hcl-report", &hcl],
        vec!["--evidence", &e, "--hcl-report", &hcl],
        vec!["--evidence", &e, "--vcek", &vcek],
        vec!["--evidence", &e, "--snp-policy", "a", "--tdx-policy", "b"],
        vec!["--evidence", &e, "--nonce", "xyz"],
        vec!["--evidence", &e, "--at", "yesterday"],
        vec!["--evidence", &e, "-o", "xml"],
        vec!["--evidence", "/nonexistent/evidence.json"],
        vec!["--evidence", &hcl],
        vec!["--evidence", &e, "--pcrs", &vcek],
        vec!["--evidence", &e, "extra"],
    ] {
        assert_eq!(run(&args), 2, "{args:?}");
    }
}
