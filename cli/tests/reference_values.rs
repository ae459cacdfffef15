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
