//! `confboot measure`: exit status 0 with the policy and the predicted log
//! written (the same bytes for the same inputs), 2 for input it cannot
//! predict from. The prediction itself is checked against real boots in
//! `tests/tests/boot.rs`.

#[path = "../src/measure.rs"]
mod measure;
#[path = "../src/measure_snp.rs"]
mod measure_snp;

use std::path::{Path, PathBuf};

fn run(args: &[&str]) -> i32 {
    measure::run(args.iter().map(|s| s.to_string()).collect())
}

fn dir() -> PathBuf {
    let d = std::env::temp_dir().join(format!("confboot-measure-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// A bzImage-shaped kernel (the fuzz seeds' own).
fn kernel(path: &Path) {
    std::fs::write(path, confboot_fuzz_targets::seeds::bz_image(true)).unwrap();
}

#[test]
fn measure_writes_the_same_policy_and_log_for_the_same_inputs() {
    let d = dir();
    let (k, i) = (d.join("vmlinuz"), d.join("initrd"));
    kernel(&k);
    std::fs::write(&i, b"an initrd").unwrap();
    let out = |n: &str| d.join(n).display().to_string();
    let args = |p: &str, e: &str| {
        vec![
            "--kernel".to_string(),
            k.display().to_string(),
            "--initrd".into(),
            i.display().to_string(),
            "--cmdline".into(),
            "console=ttyS0 quiet".into(),
            "--policy-out".into(),
            out(p),
            "--events-out".into(),
            out(e),
        ]
    };
    let a = args("p1.json", "e1.json");
    let b = args("p2.json", "e2.json");
    assert_eq!(run(&a.iter().map(String::as_str).collect::<Vec<_>>()), 0);
    assert_eq!(run(&b.iter().map(String::as_str).collect::<Vec<_>>()), 0);
    let read = |n: &str| std::fs::read(d.join(n)).unwrap();
    assert_eq!(read("p1.json"), read("p2.json"));
    assert_eq!(read("e1.json"), read("e2.json"));
    let policy =
        confboot_attest::MeasurementPolicy::from_json(&String::from_utf8(read("p1.json")).unwrap())
            .expect("a valid policy");
    assert!(!policy.entries()[&4].warn_only && !policy.entries()[&9].warn_only);
    let events =
        confboot_tpm::event_log::EventList::from_json(&String::from_utf8(read("e1.json")).unwrap())
            .expect("a valid event list");
    assert_eq!(events.replay()[&9].to_vec(), policy.entries()[&9].value);
}

#[test]
fn input_it_cannot_predict_from_is_refused_with_status_2() {
    let d = dir();
    let (k, i) = (d.join("k2"), d.join("i2"));
    kernel(&k);
    std::fs::write(&i, b"x").unwrap();
    let (k, i) = (k.display().to_string(), i.display().to_string());
    let p = d.join("p.json").display().to_string();
    let e = d.join("e.json").display().to_string();
    let with = |kernel: &str, cmdline: &str| {
        run(&[
            "--kernel",
            kernel,
            "--initrd",
            &i,
            "--cmdline",
            cmdline,
            "--policy-out",
            &p,
            "--events-out",
            &e,
        ])
    };
    assert_eq!(with(&k, "quiet"), 0);
    assert_eq!(with("/nonexistent/vmlinuz", "quiet"), 2);
    assert_eq!(with(&i, "quiet"), 2, "not a bzImage");
    assert_eq!(with(&k, "vga=791"), 2, "QEMU would patch the video mode");
    assert_eq!(
        with(&k, &"x".repeat(4096)),
        2,
        "longer than the kernel takes"
    );
}

/// `confboot measure --variant sev-snp` on the firmware crafted from
/// Debian's OVMF: the policy it writes loads as a bare-metal SEV-SNP policy
/// (measured direct boot) and pins exactly the launch `sev-snp-measure`
/// computes for the same inputs.
#[test]
fn the_snp_policy_measure_writes_pins_the_launch_sev_snp_measure_computes() {
    use confboot_testkit::ovmf;
    let d = dir().join("snp");
    std::fs::create_dir_all(&d).unwrap();
    let (fw, k, i, policy) = (
        d.join("crafted.fd"),
        d.join("vmlinuz"),
        d.join("initrd"),
        d.join("snp-policy.json"),
    );
    let debian = std::fs::read(ovmf::DEBIAN_OVMF).unwrap();
    std::fs::write(&fw, ovmf::crafted_from(&debian)).unwrap();
    std::fs::write(&k, ovmf::filler(20_000, 1)).unwrap();
    std::fs::write(&i, ovmf::filler(5_000, 2)).unwrap();
    let line = "console=ttyS0 confboot.cluster=abc";
    let p = |x: &Path| x.display().to_string();
    let args = |firmware: &Path| {
        vec![
            "--variant".to_string(),
            "sev-snp".into(),
            "--firmware".into(),
            p(firmware),
            "--kernel".into(),
            p(&k),
            "--initrd".into(),
            p(&i),
            "--cmdline".into(),
            line.into(),
            "--vcpu-type".into(),
            "EPYC-Milan".into(),
            "--vcpus".into(),
            "2".into(),
            "--policy-out".into(),
            p(&policy),
        ]
    };
    assert_eq!(measure::run(args(&fw)), 0);
    let loaded = confboot_snp::SnpPolicy::load(&policy).expect("a strict SNP policy");
    loaded.check_launch().expect("a measured direct boot");
    let oracle = std::process::Command::new(ovmf::sev_snp_measure())
        .args(["--mode", "snp", "--output-format", "hex", "--vcpus", "2"])
        .args(["--vcpu-type", "EPYC-Milan", "--guest-features", "0x1"])
        .arg("--ovmf")
        .arg(&fw)
        .arg("--kernel")
        .arg(&k)
        .arg("--initrd")
        .arg(&i)
        .args(["--append", line])
        .output()
        .unwrap();
    assert!(oracle.status.success());
    let expected = String::from_utf8(oracle.stdout).unwrap();
    let text = std::fs::read_to_string(&policy).unwrap();
    let json: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(
        json["measurement"]["expected"].as_str().unwrap(),
        expected.trim()
    );
    assert_eq!(json["measurement"]["warnOnly"], false);
    // Debian's own OVMF has no kernel hashes section: refused, nothing written.
    std::fs::remove_file(&policy).unwrap();
    assert_eq!(measure::run(args(Path::new(ovmf::DEBIAN_OVMF))), 2);
    assert!(!policy.exists());
    // Usage errors: an unknown vCPU model, features that are no number,
    // a variant this command does not predict.
    let mut bad = args(&fw);
    bad[11] = "EPYC-Milan-v9".into();
    assert_eq!(measure::run(bad), 2);
    let mut bad = args(&fw);
    bad.extend(["--guest-features".into(), "SNP".into()]);
    assert_eq!(measure::run(bad), 2);
    assert_eq!(
        measure::run(
            [
                "--variant",
                "tdx",
                "--kernel",
                "k",
                "--initrd",
                "none",
                "--cmdline",
                "x"
            ]
            .map(String::from)
            .to_vec()
        ),
        2
    );
    assert!(!policy.exists());
}
