//! `-o ear`: the `confboot` binary prints its verdict on a real SEV-SNP
//! report as a signed attestation result, and an independent decoder
//! checks it: the `openssl` command line verifies the ES256 signature over
//! the JWT's signing input with the public key `confboot keygen` wrote, and
//! serde_json reads the claims. The exit code stays the verdict's. A result
//! with its claims or its signature changed is refused by the reader.

use std::path::{Path, PathBuf};
use std::process::Command;

use confboot_appraisal::ear::{EarError, EarVerifyingKey, Status, read};
use serde_json::Value;

fn fixture(name: &str) -> String {
    format!(
        "{}/../crates/snp/testdata/{name}",
        env!("CARGO_MANIFEST_DIR")
    )
}

/// A directory of this test's own (the tests run in parallel).
fn temp_dir(test: &str) -> PathBuf {
    let dir =
        std::env::temp_dir().join(format!("confboot-ear-output-{}-{test}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn confboot(args: &[&str]) -> (Option<i32>, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_confboot"))
        .args(args)
        .output()
        .unwrap();
    (
        out.status.code(),
        String::from_utf8(out.stdout).unwrap(),
        String::from_utf8(out.stderr).unwrap(),
    )
}

/// A release key made by `confboot keygen`: (private, public) PEM files.
fn keygen(dir: &Path) -> (String, String) {
    let key = dir.join("ear.pem");
    let _ = std::fs::remove_file(&key);
    let _ = std::fs::remove_file(dir.join("ear.pem.pub"));
    let (code, _, err) = confboot(&["keygen", "--out", key.to_str().unwrap()]);
    assert_eq!(code, Some(0), "{err}");
    (
        key.to_string_lossy().into_owned(),
        format!("{}.pub", key.display()),
    )
}

fn b64url(part: &str) -> Vec<u8> {
    confboot_util::base64::decode_url(part).unwrap()
}

/// A DER INTEGER of a big-endian unsigned number.
fn der_integer(n: &[u8]) -> Vec<u8> {
    let mut n: Vec<u8> = n.iter().copied().skip_while(|b| *b == 0).collect();
    if n.first().is_none_or(|b| b & 0x80 != 0) {
        n.insert(0, 0);
    }
    [vec![0x02, n.len() as u8], n].concat()
}

/// Checks `token` as a relying party without confboot's code would: the
/// signature with `openssl dgst -verify`, the header and claims with
/// serde_json. Returns the claims.
fn decode_independently(token: &str, public_pem: &str, dir: &Path) -> Value {
    let parts: Vec<&str> = token.trim_end().split('.').collect();
    assert_eq!(parts.len(), 3, "{token}");
    let header: Value = serde_json::from_slice(&b64url(parts[0])).unwrap();
    assert_eq!(header["alg"], "ES256");
    assert_eq!(header["typ"], "JWT");
    let raw = b64url(parts[2]);
    assert_eq!(raw.len(), 64, "ES256 signatures are r || s");
    let body = [der_integer(&raw[..32]), der_integer(&raw[32..])].concat();
    let der = [vec![0x30, body.len() as u8], body].concat();
    let (input, sig) = (dir.join("input"), dir.join("sig.der"));
    std::fs::write(&input, format!("{}.{}", parts[0], parts[1])).unwrap();
    std::fs::write(&sig, der).unwrap();
    let out = Command::new("openssl")
        .args(["dgst", "-sha256", "-verify", public_pem, "-signature"])
        .args([&sig, &input])
        .output()
        .expect("the openssl command line");
    assert!(
        out.status.success(),
        "openssl does not verify the signature: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&b64url(parts[1])).unwrap()
}

/// A policy pinning the fixture report's measurement (or another one).
fn policy(dir: &Path, name: &str, own: bool) -> String {
    let r = std::fs::read(fixture("test-report.bin")).unwrap();
    let measurement = if own {
        confboot_util::hex::encode(&r[0x90..0xC0])
    } else {
        "ab".repeat(48)
    };
    let path = dir.join(name);
    std::fs::write(
        &path,
        format!(
            r#"{{"measurement": {{"expected": "{measurement}"}}, "launch": "measuredDirectBoot", "kernelHash": "1111111111111111111111111111111111111111111111111111111111111111", "initrdHash": "2222222222222222222222222222222222222222222222222222222222222222", "cmdlineHash": "3333333333333333333333333333333333333333333333333333333333333333", "minimumTcb": {{"snp": 8, "microcode": 115}}}}"#
        ),
    )
    .unwrap();
    path.to_string_lossy().into_owned()
}

fn verify_report_ear(key: &str, policy: &str) -> (Option<i32>, String, String) {
    // confboot's binding: the report's own first 32 bytes of REPORT_DATA.
    let r = std::fs::read(fixture("test-report.bin")).unwrap();
    let extra = confboot_util::hex::encode(&r[0x50..0x70]);
    confboot(&[
        "verify-report",
        "--extra-data",
        &extra,
        "--report",
        &fixture("test-report.bin"),
        "--vcek",
        &fixture("test-vcek.der"),
        "--policy",
        policy,
        "-o",
        "ear",
        "--ear-key",
        key,
        "-v",
        "0",
    ])
}

#[test]
fn a_pass_is_affirming_and_a_refusal_contraindicated() {
    let dir = temp_dir("verdicts");
    let (key, public) = keygen(&dir);
    let report = std::fs::read(fixture("test-report.bin")).unwrap();
    let digest = ring::digest::digest(&ring::digest::SHA384, &report);

    let (code, out, err) = verify_report_ear(&key, &policy(&dir, "own.json", true));
    assert_eq!(code, Some(0), "{out}{err}");
    assert_eq!(out.lines().count(), 1, "one token line: {out}");
    let claims = decode_independently(&out, &public, &dir);
    assert_eq!(claims["eat_profile"], "tag:github.com,2023:veraison/ear");
    assert!(claims["iat"].as_i64().unwrap() > 1_700_000_000);
    assert!(
        claims["ear.verifier-id"]["build"]
            .as_str()
            .unwrap()
            .starts_with("confboot verify-report ")
    );
    let appraisal = &claims["submods"]["sev-snp"];
    assert_eq!(appraisal["ear.status"], "affirming");
    let vector = &appraisal["ear.trustworthiness-vector"];
    for (claim, value) in [
        ("instance-identity", 2),
        ("hardware", 2),
        ("executables", 3),
        ("configuration", 2),
        ("runtime-opaque", 2),
    ] {
        assert_eq!(vector[claim], value, "{claim} in {vector}");
    }
    assert!(
        appraisal["ear.appraisal-policy-id"]
            .as_str()
            .unwrap()
            .starts_with("own.json sha-256:")
    );
    assert_eq!(appraisal["confboot.evidence-digest"]["alg"], "sha-384");
    assert_eq!(
        b64url(
            appraisal["confboot.evidence-digest"]["val"]
                .as_str()
                .unwrap()
        ),
        digest.as_ref()
    );
    // confboot's own reader agrees.
    let keys = [EarVerifyingKey::from_pem(&std::fs::read(&public).unwrap()).unwrap()];
    let now = confboot_util::time::unix_now();
    let result = read(out.as_bytes(), &keys, now, 60).unwrap();
    assert_eq!(result.status, Status::Affirming);

    // Another measurement: refused, exit 1, contraindicated executables.
    let (code, refused, err) = verify_report_ear(&key, &policy(&dir, "other.json", false));
    assert_eq!(code, Some(1), "{refused}{err}");
    let claims = decode_independently(&refused, &public, &dir);
    let appraisal = &claims["submods"]["sev-snp"];
    assert_eq!(appraisal["ear.status"], "contraindicated");
    assert_eq!(appraisal["ear.trustworthiness-vector"]["executables"], 96);
    assert_eq!(appraisal["ear.trustworthiness-vector"]["hardware"], 2);
    let result = read(refused.as_bytes(), &keys, now, 60).unwrap();
    assert_eq!(result.status, Status::Contraindicated);

    // The refusal's claims with the pass's signature, and the pass with
    // its signature changed: the reader refuses both.
    let pass: Vec<&str> = out.trim_end().split('.').collect();
    let refusal: Vec<&str> = refused.trim_end().split('.').collect();
    let spliced = format!("{}.{}.{}", refusal[0], pass[1], refusal[2]);
    assert_eq!(
        read(spliced.as_bytes(), &keys, now, 60),
        Err(EarError::Signature)
    );
    let mut sig = b64url(pass[2]);
    sig[0] ^= 0x80;
    let flipped = format!(
        "{}.{}.{}",
        pass[0],
        pass[1],
        confboot_util::base64::encode_url(&sig).trim_end_matches('=')
    );
    assert_eq!(
        read(flipped.as_bytes(), &keys, now, 60),
        Err(EarError::Signature)
    );
}

#[test]
fn ear_output_needs_a_usable_key() {
    let dir = temp_dir("keys");
    let report = fixture("test-report.bin");
    let (code, _, err) = confboot(&["verify-report", "--report", &report, "-o", "ear"]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("--ear-key"), "{err}");
    // A public key is not a signing key: exit 2, nothing printed.
    let (_, public) = keygen(&dir);
    let (code, out, err) = confboot(&[
        "verify-report",
        "--report",
        &report,
        "-o",
        "ear",
        "--ear-key",
        &public,
    ]);
    assert_eq!((code, out.as_str()), (Some(2), ""), "{err}");
    let (code, _, err) = confboot(&["verify", "--node", "n", "-o", "ear"]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("--ear-key"), "{err}");
}
