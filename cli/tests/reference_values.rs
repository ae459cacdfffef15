//! Reference values from `confboot measure --reference-values-out`, signed
//! by `confboot sign` with a key from `confboot keygen`, read back by
//! `confboot check-reference-values`: accepted with the release key, and
//! refused unsigned, with another key, forged or outside the window.

#[path = "../src/check_reference_values.rs"]
mod check_reference_values;
#[path = "../src/keygen.rs"]
mod keygen;
#[path = "../src/measure.rs"]
mod measure;
#[path = "../src/measure_snp.rs"]
mod measure_snp;
#[path = "../src/sign.rs"]
mod sign;

use std::path::PathBuf;

fn args(list: &[&str]) -> Vec<String> {
    list.iter().map(|s| s.to_string()).collect()
}

fn dir() -> PathBuf {
    let d = std::env::temp_dir().join(format!("confboot-reference-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

#[test]
fn measured_signed_and_checked_reference_values_give_the_measured_policy() {
    let d = dir();
    let p = |n: &str| d.join(n).display().to_string();
    std::fs::write(
        d.join("vmlinuz"),
        confboot_fuzz_targets::seeds::bz_image(true),
    )
    .unwrap();
    std::fs::write(d.join("initrd"), b"an initrd").unwrap();
    let measured = measure::run(args(&[
        "--kernel",
        &p("vmlinuz"),
        "--initrd",
        &p("initrd"),
        "--cmdline",
        "console=ttyS0",
        "--policy-out",
        &p("policy.json"),
        "--events-out",
        &p("events.json"),
        "--reference-values-out",
        &p("set.corim"),
        "--name",
        "confboot-node",
        "--version",
        "1.2.0",
        "--not-before",
        "2026-01-01",
        "--not-after",
        "2027-01-01",
    ]));
    assert_eq!(measured, 0);
    assert_eq!(keygen::run(args(&["--out", &p("release.pem")])), 0);
    assert_eq!(keygen::run(args(&["--out", &p("other.pem")])), 0);
    // An existing key is never replaced.
    assert_eq!(keygen::run(args(&["--out", &p("release.pem")])), 1);
    let signed = |key: &str, out: &str| {
        sign::run(args(&[
            "--key",
            &p(key),
            "--in",
            &p("set.corim"),
            "--out",
            &p(out),
        ]))
    };
    assert_eq!(signed("release.pem", "set.signed"), 0);
    assert_eq!(signed("other.pem", "set.other"), 0);
    // A signed set is not signed again, and a public key does not sign.
    assert_eq!(
        sign::run(args(&[
            "--key",
            &p("release.pem"),
            "--in",
            &p("set.signed"),
            "--out",
            &p("x")
        ])),
        2
    );
    assert_eq!(
        sign::run(args(&[
            "--key",
            &p("release.pem.pub"),
            "--in",
            &p("set.corim"),
            "--out",
            &p("x")
        ])),
        2
    );

    let check = |input: &str, key: Option<&str>, at: &str| {
        let mut a = vec!["--in".to_string(), p(input), "--at".into(), at.into()];
        if let Some(key) = key {
            a.extend(["--release-key".to_string(), p(key)]);
        }
        a.extend(["--policy-out".to_string(), p("checked.json")]);
        a.extend(["--events-out".to_string(), p("checked.events.json")]);
        check_reference_values::run(a)
    };
    let _ = std::fs::remove_file(d.join("checked.json"));
    assert_eq!(
        check("set.signed", Some("release.pem.pub"), "2026-06-01"),
        0
    );
    let read = |n: &str| std::fs::read(d.join(n)).unwrap();
    assert_eq!(read("checked.json"), read("policy.json"));
    assert_eq!(read("checked.events.json"), read("events.json"));
    // Refused: another key's set, an unsigned set where a key is given, a
    // signed one where none is, outside the window, and a forged byte.
    assert_eq!(check("set.other", Some("release.pem.pub"), "2026-06-01"), 1);
    assert_eq!(check("set.corim", Some("release.pem.pub"), "2026-06-01"), 1);
    assert_eq!(check("set.signed", None, "2026-06-01"), 1);
    assert_eq!(check("set.corim", None, "2026-06-01"), 0);
    assert_eq!(
        check(
            "set.signed",
            Some("release.pem.pub"),
            "2027-01-01T00:00:01Z"
        ),
        1
    );
    assert_eq!(
        check("set.signed", Some("release.pem.pub"), "2025-12-31"),
        1
    );
    let mut forged = read("set.signed");
    let at = forged.len() / 2;
    forged[at] ^= 0x20;
    std::fs::write(d.join("set.forged"), forged).unwrap();
    assert_eq!(
        check("set.forged", Some("release.pem.pub"), "2026-06-01"),
        1
    );
}

/// An SEV-SNP launch as reference values: `confboot measure --variant
/// sev-snp --reference-values-out` writes the launch digest with its kernel
/// hashes, `confboot sign` signs it, and the set read back carries the
/// digest and hashes of the policy the same run wrote.
#[test]
fn an_snp_launch_measured_signed_and_read_back_is_the_policys_launch() {
    use confboot_testkit::ovmf;
    let d = dir().join("snp");
    std::fs::create_dir_all(&d).unwrap();
    let p = |n: &str| d.join(n).display().to_string();
    let debian = std::fs::read(ovmf::DEBIAN_OVMF).unwrap();
    std::fs::write(d.join("ovmf.fd"), ovmf::crafted_from(&debian)).unwrap();
    std::fs::write(d.join("vmlinuz"), ovmf::filler(9_000, 3)).unwrap();
    let measured = measure::run(args(&[
        "--variant",
        "sev-snp",
        "--firmware",
        &p("ovmf.fd"),
        "--kernel",
        &p("vmlinuz"),
        "--initrd",
        "none",
        "--cmdline",
        "console=ttyS0",
        "--vcpu-type",
        "EPYC-Genoa",
        "--policy-out",
        &p("snp-policy.json"),
        "--reference-values-out",
        &p("snp.corim"),
        "--name",
        "confboot-node",
        "--version",
        "1.3.0",
        "--not-before",
        "2026-01-01",
    ]));
    assert_eq!(measured, 0);
    assert_eq!(keygen::run(args(&["--out", &p("release.pem")])), 0);
    let signed = sign::run(args(&[
        "--key",
        &p("release.pem"),
        "--in",
        &p("snp.corim"),
        "--out",
        &p("snp.signed"),
    ]));
    assert_eq!(signed, 0);
    let checked = check_reference_values::run(args(&[
        "--in",
        &p("snp.signed"),
        "--release-key",
        &p("release.pem.pub"),
        "--at",
        "2026-06-01",
    ]));
    assert_eq!(checked, 0);
    let key = confboot_appraisal::reference::ReleaseKey::from_pem(
        &std::fs::read(d.join("release.pem.pub")).unwrap(),
    )
    .unwrap();
    let opened = confboot_appraisal::reference::open(
        &std::fs::read(d.join("snp.signed")).unwrap(),
        &[key],
        1_780_000_000,
    )
    .unwrap();
    let snp = opened
        .set
        .variant(confboot_attest::Variant::SevSnp)
        .expect("an SEV-SNP part");
    let policy: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(d.join("snp-policy.json")).unwrap()).unwrap();
    let hex = confboot_util::hex::encode;
    assert_eq!(
        hex(&snp.policy.entries()[&0].value),
        policy["measurement"]["expected"].as_str().unwrap()
    );
    let launch = snp.launch.expect("the launch's hashes");
    assert_eq!(hex(&launch.kernel), policy["kernelHash"].as_str().unwrap());
    assert_eq!(hex(&launch.initrd), policy["initrdHash"].as_str().unwrap());
    assert_eq!(
        hex(&launch.cmdline),
        policy["cmdlineHash"].as_str().unwrap()
    );
}
