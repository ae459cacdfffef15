//! `confboot measure`: exit status 0 with the policy and the predicted log
//! written (the same bytes for the same inputs), 2 for input it cannot
//! predict from. The prediction itself is checked against real boots in
//! `tests/tests/boot.rs`.

#[path = "../src/measure.rs"]
mod measure;

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
