//! The verdict table: every recorded sample (the copies of
//! shared/fixtures/cloud and shared/fixtures/snp kept byte for byte under
//! `crates/*/testdata`) through its `confboot verify-*` command, at the
//! time its provenance names where a certificate has since expired, gets
//! the provenance's verdict; then each with one byte flipped in a signed
//! part, a foreign key or chain, and another session's nonce is refused
//! by the named check. The table (sample, mutation, verdict, check) is
//! printed (`cargo test -p confboot-cli --test verdict_table -- --nocapture`)
//! and kept in SECURITY.md.

use std::process::Command;

fn testdata(path: &str) -> String {
    format!("{}/../crates/{path}", env!("CARGO_MANIFEST_DIR"))
}

/// A copy of `path` with the byte at `offset` flipped (all bits), in a
/// directory of this test's own.
fn flipped(path: &str, offset: usize, name: &str) -> String {
    let mut bytes = std::fs::read(path).unwrap();
    bytes[offset] ^= 0xff;
    write_temp(name, &bytes)
}

/// A copy of a JSON/text file with the hex digit at the `nth` occurrence
/// of `marker` plus `skip` characters changed (a byte of a hex-encoded
/// signed part).
fn hex_flipped(path: &str, marker: &str, skip: usize, name: &str) -> String {
    let mut text = std::fs::read(path).unwrap();
    let at = find(&text, marker.as_bytes()).expect("marker in the sample") + marker.len() + skip;
    text[at] = if text[at] == b'0' { b'1' } else { b'0' };
    write_temp(name, &text)
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

fn write_temp(name: &str, bytes: &[u8]) -> String {
    let dir = std::env::temp_dir().join(format!("confboot-verdict-table-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(name);
    std::fs::write(&path, bytes).unwrap();
    path.to_string_lossy().into_owned()
}

/// What a command said: its exit status and the checks that failed.
struct Outcome {
    status: i32,
    failed: Vec<String>,
}

fn confboot(args: &[String]) -> Outcome {
    let out = Command::new(env!("CARGO_BIN_EXE_confboot"))
        .args(args)
        .output()
        .expect("run confboot");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let failed = stdout
        .lines()
        .filter_map(|l| l.strip_prefix("✗ "))
        .map(|l| l.split(':').next().unwrap_or("").to_string())
        .collect();
    Outcome {
        status: out.status.code().expect("exited"),
        failed,
    }
}

/// One row: a sample, a mutation, the command line, and the expected
/// verdict (`None`: verified; `Some(check)`: refused by that check, first).
struct Row {
    sample: &'static str,
    mutation: &'static str,
    args: Vec<String>,
    refused_by: Option<&'static str>,
}

fn row(
    sample: &'static str,
    mutation: &'static str,
    args: &[impl AsRef<str>],
    refused_by: Option<&'static str>,
) -> Row {
    Row {
        sample,
        mutation,
        args: args.iter().map(|s| s.as_ref().to_string()).collect(),
        refused_by,
    }
}

const NITRO_AT: &str = "2026-02-03T11:00:00Z";
const NITRO_NONCE: &str = "230af3f7c0ec43ccf99a4cab47ac61469a36ea74b1e79740fdf8ccfc8f56161a";
const OTHER_NONCE32: &str = "230af3f7c0ec43ccf99a4cab47ac61469a36ea74b1e79740fdf8ccfc8f561600";
const CHALLENGE: &str = "6368616c6c656e6765";
const V2_NONCE: &str = "982f5c6e45df0ed3f10b6f60b02f0c8390e281300f3805e2279c16168cd6ae9aa398f647caa2338748cd0fd9f5f819ef";
const GENOA_NONCE: &str = "0218488bae25d2509232bf676f1a66a30d7372add909109b36016ef136f2938ca05475f8b46094de6b64270ea35d950f";

fn rows() -> Vec<Row> {
    let mut rows = Vec::new();

    // AWS NitroTPM (vaportpm): valid only 2026-02-03 10:12..13:12Z.
    let nitro = testdata("aws/testdata/test-nitro-fixture.json");
    let n = |e: &str| -> Vec<String> {
        [
            "verify-nitro",
            "--evidence",
            e,
            "--nonce",
            NITRO_NONCE,
            "--at",
            NITRO_AT,
        ]
        .map(String::from)
        .to_vec()
    };
    rows.push(row("aws-nitrotpm", "none, at its time", &n(&nitro), None));
    rows.push(row(
        "aws-nitrotpm",
        "none, now (leaf expired)",
        &["verify-nitro", "--evidence", &nitro, "--nonce", NITRO_NONCE],
        Some(NITRO_EXPIRED),
    ));
    let doc_flip = hex_flipped(&nitro, "\"document\": \"", 400, "nitro-doc.json");
    rows.push(row(
        "aws-nitrotpm",
        "NSM document byte flipped",
        &n(&doc_flip),
        Some(NITRO_DOC),
    ));
    let quote_flip = hex_flipped(&nitro, "\"attest_data\": \"", 40, "nitro-quote.json");
    rows.push(row(
        "aws-nitrotpm",
        "TPM quote byte flipped",
        &n(&quote_flip),
        Some(NITRO_QUOTE),
    ));
    let ak_flip = hex_flipped(&nitro, "\"x\": \"", 10, "nitro-ak.json");
    rows.push(row(
        "aws-nitrotpm",
        "foreign AK",
        &n(&ak_flip),
        Some(NITRO_AK),
    ));
    rows.push(row(
        "aws-nitrotpm",
        "another session's nonce",
        &[
            "verify-nitro",
            "--evidence",
            &nitro,
            "--nonce",
            OTHER_NONCE32,
            "--at",
            NITRO_AT,
        ],
        Some(NITRO_NONCE_CHECK),
    ));

    // GCP vTPM (go-tpm-tools): nothing expires before 2051.
    for (name, file, nonce) in [
        ("gcp-vtpm nonce9009", "gce-cos-85-nonce9009.pb", "9009"),
        ("gcp-vtpm no-nonce", "gce-cos-85-no-nonce.pb", ""),
    ] {
        let pb = testdata(&format!("gcp/testdata/{file}"));
        let g = |a: &str| -> Vec<String> {
            ["verify-gcp", "--attestation", a, "--nonce", nonce]
                .map(String::from)
                .to_vec()
        };
        rows.push(row(name, "none", &g(&pb), None));
        let bytes = std::fs::read(&pb).unwrap();
        // A byte of the AK certificate (field 6, the last 1340 bytes).
        let cert_flip = flipped(&pb, bytes.len() - 300, &format!("{file}-akcert"));
        rows.push(row(
            name,
            "AK certificate byte flipped",
            &g(&cert_flip),
            Some(GCP_CERT),
        ));
        rows.push(row(
            name,
            "another session's nonce",
            &g_other(&pb, nonce),
            Some(GCP_NONCE),
        ));
    }

    // Azure SEV-SNP (trustee): certificates valid until 2030 and later.
    let az = |f: &str| testdata(&format!("azure/testdata/azure-snp/{f}"));
    let hcl = az("hcl-report.bin");
    let quote = az("tpm-quote-v1.json");
    let vcek = az("vcek.pem");
    let parts = |h: &str, v: &str, nonce: &str| {
        vec![
            "verify-azure".to_string(),
            "--hcl-report".into(),
            h.into(),
            "--tpm-quote".into(),
            quote.clone(),
            "--vcek".into(),
            v.into(),
            "--nonce".into(),
            nonce.into(),
        ]
    };
    rows.push(Row {
        sample: "azure-sev-snp hcl-report",
        mutation: "none",
        args: parts(&hcl, &vcek, CHALLENGE),
        refused_by: None,
    });
    let hcl_flip = flipped(&hcl, 0x06e0, "hcl-vardata.bin");
    rows.push(Row {
        sample: "azure-sev-snp hcl-report",
        mutation: "runtime claims byte flipped",
        args: parts(&hcl_flip, &vcek, CHALLENGE),
        refused_by: Some(AZ_BINDING),
    });
    let sig_flip = flipped(&hcl, 0x20 + 0x2a0 + 4, "hcl-sig.bin");
    rows.push(Row {
        sample: "azure-sev-snp hcl-report",
        mutation: "SNP report signature byte flipped",
        args: parts(&sig_flip, &vcek, CHALLENGE),
        refused_by: Some(AZ_SNP_SIG),
    });
    rows.push(Row {
        sample: "azure-sev-snp hcl-report",
        mutation: "foreign VCEK (Genoa)",
        args: parts(&hcl, &az("vcek-genoa.pem"), CHALLENGE),
        refused_by: Some(AZ_FOREIGN_VCEK),
    });
    rows.push(Row {
        sample: "azure-sev-snp hcl-report",
        mutation: "another session's nonce",
        args: parts(&hcl, &vcek, "6368616c6c656e6766"),
        refused_by: Some(AZ_NONCE),
    });
    for (name, file, nonce) in [
        ("azure-sev-snp evidence-v0", "evidence-v0.json", CHALLENGE),
        ("azure-sev-snp evidence-v1", "evidence-v1.json", CHALLENGE),
        ("azure-sev-snp evidence-v2", "evidence-v2.json", V2_NONCE),
        (
            "azure-sev-snp evidence-genoa",
            "evidence-genoa.json",
            GENOA_NONCE,
        ),
    ] {
        let e = az(file);
        rows.push(row(
            name,
            "none",
            &["verify-azure", "--evidence", &e, "--nonce", nonce],
            None,
        ));
        rows.push(row(
            name,
            "another session's nonce",
            &["verify-azure", "--evidence", &e, "--nonce", "00"],
            Some(AZ_NONCE),
        ));
    }

    // SEV-SNP reports (virtee/sev, trustee): VCEKs valid until 2029/2030.
    let snp = |f: &str| testdata(&format!("snp/testdata/{f}"));
    // The VLEK lasted 2024-12-10 .. 2025-12-10: it is checked at 2025-06-01.
    for (name, report, key, chain, at) in [
        (
            "sev-snp report_milan",
            "report_milan.bin",
            "vcek_milan.der",
            None,
            None,
        ),
        (
            "sev-snp trustee test-report",
            "test-report.bin",
            "test-vcek.der",
            None,
            None,
        ),
        (
            "sev-snp trustee test-vlek-report",
            "test-vlek-report.bin",
            "test-vlek.der",
            Some("milan_ask_ark_asvk.pem"),
            Some(VLEK_AT),
        ),
    ] {
        let r = snp(report);
        let base = |r: &str, k: &str| {
            let mut a = vec![
                "verify-report".to_string(),
                "--report".into(),
                r.into(),
                "--vcek".into(),
                snp(k),
            ];
            if let Some(c) = chain {
                a.push("--chain".into());
                a.push(snp(c));
                // The VLEK sample is a VMPL 1 report.
                a.extend(["--vmpl".to_string(), "1".into()]);
            }
            if let Some(t) = at {
                a.push("--at".into());
                a.push(t.into());
            }
            a
        };
        rows.push(Row {
            sample: name,
            mutation: "none",
            args: base(&r, key),
            refused_by: None,
        });
        if at.is_some() {
            let mut now = base(&r, key);
            now.truncate(now.len() - 2);
            rows.push(Row {
                sample: name,
                mutation: "none, now (VLEK expired)",
                args: now,
                refused_by: Some(SNP_EXPIRED),
            });
        }
        let sig = flipped(&r, 0x2a0 + 4, &format!("{report}-sig"));
        rows.push(Row {
            sample: name,
            mutation: "signature byte flipped",
            args: base(&sig, key),
            refused_by: Some(SNP_SIG),
        });
        let data = flipped(&r, 0x50, &format!("{report}-data"));
        rows.push(Row {
            sample: name,
            mutation: "report_data byte flipped",
            args: base(&data, key),
            refused_by: Some(SNP_SIG),
        });
        rows.push(Row {
            sample: name,
            mutation: "foreign key (invalid legacy VCEK)",
            args: base(&r, "test-vcek-invalid-legacy.der"),
            refused_by: Some(SNP_FOREIGN),
        });
        let mut other = base(&r, key);
        other.extend(["--report-data".to_string(), "00".repeat(64)]);
        rows.push(Row {
            sample: name,
            mutation: "another session's report_data",
            args: other,
            refused_by: Some(SNP_NONCE),
        });
    }
    rows
}

/// `verify-gcp` expecting a nonce other than the one the sample holds.
fn g_other(pb: &str, nonce: &str) -> Vec<String> {
    let other = if nonce.is_empty() { "9009" } else { "9008" };
    ["verify-gcp", "--attestation", pb, "--nonce", other]
        .map(String::from)
        .to_vec()
}

const NITRO_EXPIRED: &str = "certificate validity";
const NITRO_DOC: &str = "document signature";
const NITRO_QUOTE: &str = "quote signature";
const NITRO_AK: &str = "quote signature";
const NITRO_NONCE_CHECK: &str = "nonce";
const GCP_CERT: &str = "certificate chain";
const GCP_NONCE: &str = "nonce";
const AZ_BINDING: &str = "runtime claims binding";
const AZ_SNP_SIG: &str = "report signature";
const AZ_FOREIGN_VCEK: &str = "report signature";
const AZ_NONCE: &str = "nonce";
const SNP_SIG: &str = "report signature";
const SNP_FOREIGN: &str = "certificate chain";
const SNP_EXPIRED: &str = "certificate validity";
const VLEK_AT: &str = "2025-06-01T00:00:00Z";
const SNP_NONCE: &str = "report data";

#[test]
fn every_recorded_sample_gets_its_verdict_and_each_mutation_is_refused_by_its_check() {
    let mut table = String::from("| sample | mutation | verdict | check |\n|---|---|---|---|\n");
    let mut wrong = Vec::new();
    for r in rows() {
        let o = confboot(&r.args);
        let (verdict, check) = match o.status {
            0 => ("VERIFIED", String::new()),
            1 => ("REFUSED", o.failed.first().cloned().unwrap_or_default()),
            s => ("UNUSABLE", format!("exit {s}")),
        };
        table.push_str(&format!(
            "| {} | {} | {verdict} | {check} |\n",
            r.sample, r.mutation
        ));
        let ok = match r.refused_by {
            None => o.status == 0,
            Some(name) => o.status == 1 && o.failed.first().map(String::as_str) == Some(name),
        };
        if !ok {
            wrong.push(format!(
                "{} / {}: {verdict} {check} ({:?})",
                r.sample, r.mutation, r.args
            ));
        }
    }
    println!("{table}");
    assert!(
        wrong.is_empty(),
        "verdicts that differ:\n{}",
        wrong.join("\n")
    );
}

/// The keys of a `-o json` result and of each of its checks.
fn json_shape(args: &[&str]) -> (i32, Vec<String>, Vec<String>) {
    let out = Command::new(env!("CARGO_BIN_EXE_confboot"))
        .args(args)
        .args(["-o", "json"])
        .output()
        .expect("run confboot");
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON object");
    let keys = |v: &serde_json::Value| {
        let mut k: Vec<String> = v.as_object().expect("an object").keys().cloned().collect();
        k.sort();
        k
    };
    let check = keys(&doc["checks"][0]);
    (out.status.code().expect("exited"), keys(&doc), check)
}

#[test]
fn the_cloud_verify_commands_print_one_json_schema() {
    let nitro = testdata("aws/testdata/test-nitro-fixture.json");
    let gcp = testdata("gcp/testdata/gce-cos-85-nonce9009.pb");
    let a = json_shape(&[
        "verify-nitro",
        "--evidence",
        &nitro,
        "--recorded-nonce",
        "--at",
        NITRO_AT,
    ]);
    let b = json_shape(&["verify-gcp", "--attestation", &gcp, "--nonce", "9008"]);
    let e = testdata("azure/testdata/azure-snp/evidence-v1.json");
    let c = json_shape(&["verify-azure", "--evidence", &e, "--nonce", CHALLENGE]);
    assert_eq!((a.0, b.0, c.0), (0, 1, 0));
    // The local variants' offline commands print the same object.
    let report = testdata("snp/testdata/report_milan.bin");
    let vcek = testdata("snp/testdata/vcek_milan.der");
    let d = json_shape(&["verify-report", "--report", &report, "--vcek", &vcek]);
    let quote = testdata("tdx/testdata/quote_v5.dat");
    let q = json_shape(&["verify-quote", "--quote", &quote, "--at", "2026-02-10"]);
    assert_eq!((d.0, q.0), (0, 0));
    assert_eq!((&d.1, &d.2), (&a.1, &a.2), "verify-report");
    assert_eq!((&q.1, &q.2), (&a.1, &a.2), "verify-quote");
    assert_eq!(a.1, c.1);
    assert_eq!(a.2, c.2);
    let top = [
        "at", "checks", "command", "failed", "skipped", "variant", "verified",
    ];
    assert_eq!(a.1, top.map(String::from).to_vec());
    assert_eq!(a.1, b.1);
    assert_eq!(
        a.2,
        ["detail", "name", "outcome", "reason"]
            .map(String::from)
            .to_vec()
    );
    assert_eq!(a.2, b.2);
}
