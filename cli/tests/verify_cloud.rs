//! `confboot verify-nitro` and `confboot verify-gcp` on the recorded cloud
//! evidence: the exit status says whether every check passed (0), one
//! failed (1), or the input was unusable (2). `cli/src/main.rs` wires the
//! commands to the same `run`.

#[path = "../src/check_report.rs"]
mod check_report;
#[path = "../src/verify_gcp.rs"]
mod verify_gcp;
#[path = "../src/verify_nitro.rs"]
mod verify_nitro;

fn fixture(path: &str) -> String {
    format!("{}/../crates/{path}", env!("CARGO_MANIFEST_DIR"))
}

fn nitro(args: &[&str]) -> i32 {
    verify_nitro::run(args.iter().map(|s| s.to_string()).collect())
}

fn gcp(args: &[&str]) -> i32 {
    verify_gcp::run(args.iter().map(|s| s.to_string()).collect())
}

const NITRO: &str = "aws/testdata/test-nitro-fixture.json";
const NONCE: &str = "230af3f7c0ec43ccf99a4cab47ac61469a36ea74b1e79740fdf8ccfc8f56161a";

#[test]
fn the_recorded_nitro_evidence_passes_at_its_time_and_fails_now() {
    let e = fixture(NITRO);
    let at = "2026-02-03T11:00:00Z";
    assert_eq!(nitro(&["--evidence", &e, "--nonce", NONCE, "--at", at]), 0);
    assert_eq!(
        nitro(&[
            "--evidence",
            &e,
            "--recorded-nonce",
            "--at",
            at,
            "-o",
            "json"
        ]),
        0
    );
    // Without a nonce, the nonce check is skipped, not failed.
    assert_eq!(nitro(&["--evidence", &e, "--at", at]), 0);
    // Now: the leaf expired on 2026-02-03.
    assert_eq!(nitro(&["--evidence", &e, "--nonce", NONCE]), 1);
    // Another session's nonce.
    let other = format!("{}00", &NONCE[..62]);
    assert_eq!(nitro(&["--evidence", &e, "--nonce", &other, "--at", at]), 1);
}

#[test]
fn the_recorded_gcp_attestations_pass_with_their_nonces() {
    let with = fixture("gcp/testdata/gce-cos-85-nonce9009.pb");
    let without = fixture("gcp/testdata/gce-cos-85-no-nonce.pb");
    assert_eq!(gcp(&["--attestation", &with, "--nonce", "9009"]), 0);
    assert_eq!(
        gcp(&["--attestation", &without, "--nonce", "", "-o", "json"]),
        0
    );
    assert_eq!(gcp(&["--attestation", &with, "--nonce", "9008"]), 1);
    // Before the AK certificate was issued.
    assert_eq!(
        gcp(&[
            "--attestation",
            &with,
            "--nonce",
            "9009",
            "--at",
            "2020-01-01"
        ]),
        1
    );
    // A root that rotates in beside the built-in ones.
    let root = fixture("gcp/testdata/ca-certs/gcp_ek_ak_ca_root.crt");
    assert_eq!(
        gcp(&["--attestation", &with, "--nonce", "9009", "--root", &root]),
        0
    );
}

#[test]
fn usage_errors_exit_2() {
    let e = fixture(NITRO);
    assert_eq!(nitro(&[]), 2);
    assert_eq!(nitro(&["--evidence", "/nonexistent/e.json"]), 2);
    assert_eq!(nitro(&["--evidence", &e, "--nonce", "zz"]), 2);
    assert_eq!(
        nitro(&["--evidence", &e, "--nonce", NONCE, "--recorded-nonce"]),
        2
    );
    assert_eq!(nitro(&["--evidence", &e, "--at", "yesterday"]), 2);
    assert_eq!(nitro(&["--evidence", &e, "-o", "yaml"]), 2);
    // A file that is not NitroTPM evidence.
    assert_eq!(
        nitro(&["--evidence", &fixture("aws/testdata/PROVENANCE.md")]),
        2
    );
    assert_eq!(gcp(&[]), 2);
    assert_eq!(gcp(&["--attestation", "/nonexistent/a.pb"]), 2);
    let a = fixture("gcp/testdata/gce-cos-85-no-nonce.pb");
    assert_eq!(
        gcp(&[
            "--attestation",
            &a,
            "--root",
            &fixture("gcp/testdata/PROVENANCE.md")
        ]),
        2
    );
    assert_eq!(gcp(&["--attestation", &a, "extra"]), 2);
}
