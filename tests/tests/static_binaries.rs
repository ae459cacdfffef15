//! The release binaries are static musl executables within the size budget,
//! and each one's size stays within ±5 % of the size recorded in
//! `tests/binary_sizes.json` (as Firecracker checks its binary sizes).
//! Built by `scripts/test.sh` (cargo build --release --target
//! x86_64-unknown-linux-musl) before the tests run. Not timed.
//!
//! A size outside the band fails with the recorded and the measured size and
//! the difference in percent. When the change is deliberate, record the new
//! sizes (after the release build) and commit the file:
//!
//! ```text
//! CONFBOOT_UPDATE_SIZES=1 cargo test -p confboot-tests --test static_binaries
//! ```
//!
//! With `CONFBOOT_UPDATE_SIZES=1` the size check rewrites the record with the
//! measured sizes and fails nothing.

use std::collections::BTreeMap;
use std::path::Path;

/// Size budget of each binary, in bytes. 3.0 MB until the bootstrapper and
/// joinsvc took a second attestation variant: SEV-SNP evidence is checked
/// against AMD's RSA-4096-PSS chain and a P-384 report signature (about
/// 250 KB in each), and a node's kubelet certificate is asked for and
/// checked (about 45 KB): the bootstrapper is 3.02 MB. 3.1 MB until the
/// bootstrapper opened its state disk itself (LUKS2 with PBKDF2, Argon2
/// and AES-XTS, device-mapper ioctls; about 155 KB) instead of running
/// cryptsetup, whose program and shared libraries (about 5 MB, OpenSSL's
/// libcrypto most of it) a production image then no longer needs. 3.25 MB
/// until the bootstrapper became the initramfs's PID 1 (mounts, modules,
/// DHCP and rtnetlink, reaping; about 33 KB) in place of busybox (1.98 MB
/// raw) and kept the admin's SSH users (about 50 KB): 3.25 MB. 3.3 MB
/// until the bootstrapper joined the node to the cluster's VPN (a WireGuard
/// key pair, X25519; the key kept on the state disk and the node agent's
/// file; the join-service checks shared with the agent; netlink moved into
/// lib) and made the state disk's ext4 itself (a native formatter, about
/// 32 KB, in place of mke2fs and glibc in the image). 3.35 MB until the
/// bootstrapper carried the node agent (started as `nodeagent`, the
/// initramfs's `/usr/bin/nodeagent` a link to it; about 90 KB, since the
/// agent's aTLS client, TPM and HTTP code are the bootstrapper's own)
/// instead of the image shipping a second 2.33 MB binary. 3.5 MB until
/// the bootstrapper attested as, and checked join services of, a third
/// variant, Intel TDX (the quote, its PCK chain and CRLs to the pinned
/// Intel root, TCB info and QE identity, the CCEL log, the configfs-tsm
/// issuer; about 172 KB) and opened tickets sealed to its attested key
/// (HPKE with X25519 and ChaCha20Poly1305; about 61 KB): 3.53 MB.
/// 3.65 MB until the formats the node agent reads (its VPN file, the
/// handoff step document) were read with serde derives (about 12 KB) and
/// the errors became typed: a reason per attestation check, I/O errors
/// that keep their source (about 16 KB): 3.67 MB. 3.7 MB until the
/// bootstrapper attested as, and checked join services of, an Azure
/// SEV-SNP confidential VM (`azure-sev-snp`: the HCL report, its runtime
/// claims and the evidence read as JSON, the RSA quote by `HCLAkPub`, the
/// Azure policy; about 78 KB), and the files the node trusts on its state
/// disk (the SSH users, the VPN key, the generation file) carried a MAC
/// bound to the disk's generation, so a partial restore of old sectors is
/// refused (the trailer's parser, the derived key, sealing every file
/// again, the typed errors naming the file; 8 KB): 3.79 MB.
const BUDGET: u64 = 3_800_000;
const BINARIES: [&str; 4] = ["bootstrapper", "joinsvc", "nodeagent", "confboot"];
/// The recorded size of each release binary: `{"<binary>": {"bytes": N}}`.
const SIZES_FILE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/binary_sizes.json");
/// How far a binary may drift from its recorded size, in percent either way.
const TOLERANCE_PERCENT: u64 = 5;
/// Set to `1` to rewrite the record with the measured sizes.
const UPDATE_VAR: &str = "CONFBOOT_UPDATE_SIZES";

/// What an ELF file says about its linking: (has an interpreter, number of DT_NEEDED entries).
fn elf_linking(bytes: &[u8]) -> (bool, usize) {
    let l = confboot_tests::elf::linking(bytes).expect("a 64-bit little-endian ELF file");
    (l.interp, l.needed)
}

#[test]
fn release_binaries_are_static_and_within_budget() {
    let baseline = std::fs::metadata(confboot_tests::musl_binary("size-baseline"))
        .unwrap()
        .len();
    println!(
        "{:<14}{:>12}  {:>13}  linking",
        "binary", "bytes", "× hello world"
    );
    println!("{:<14}{baseline:>12}  {:>13.2}", "size-baseline", 1.0);
    for name in BINARIES {
        let path = confboot_tests::musl_binary(name);
        let bytes = std::fs::read(&path).unwrap();
        let (interp, needed) = elf_linking(&bytes);
        println!(
            "{name:<14}{:>12}  {:>13.2}  {}",
            bytes.len(),
            bytes.len() as f64 / baseline as f64,
            if !interp && needed == 0 {
                "static"
            } else {
                "DYNAMIC"
            }
        );
        assert!(!interp, "{name} asks for a dynamic loader");
        assert_eq!(needed, 0, "{name} needs {needed} shared libraries");
        assert!(
            bytes.len() as u64 <= BUDGET,
            "{name} is {} bytes, over the {BUDGET} budget",
            bytes.len()
        );
        // The static binary runs here and explains itself.
        let out = std::process::Command::new(&path)
            .arg("--help")
            .output()
            .unwrap();
        assert!(out.status.success(), "{name} --help failed");
        assert!(
            String::from_utf8_lossy(&out.stdout).contains(name),
            "{name} --help names itself"
        );
    }
}

#[test]
fn elf_check_tells_a_dynamic_binary_apart() {
    // The test executable itself is a dynamic glibc binary.
    let me = std::fs::read(std::env::current_exe().unwrap()).unwrap();
    let (interp, needed) = elf_linking(&me);
    assert!(
        interp && needed > 0,
        "a glibc test binary must look dynamic"
    );
}

/// The production image's check (boot.rs) also refuses shared libraries,
/// the dynamic loader included (it has no loader and needs nothing, but
/// names itself), and passes kernel modules.
#[test]
fn elf_check_refuses_shared_libraries_and_the_loader() {
    for lib in [
        "/lib/x86_64-linux-gnu/libc.so.6",
        "/lib64/ld-linux-x86-64.so.2",
    ] {
        let bytes = std::fs::read(lib).unwrap_or_else(|e| panic!("{lib}: {e}"));
        let linking = confboot_tests::elf::linking(&bytes).expect("an ELF file");
        assert!(!linking.is_static(), "{lib} passed as static: {linking:?}");
    }
    let loader = std::fs::read("/lib64/ld-linux-x86-64.so.2").unwrap();
    let linking = confboot_tests::elf::linking(&loader).unwrap();
    assert!(!linking.interp && linking.needed == 0 && linking.soname);
    let me = std::fs::read(confboot_tests::musl_binary("bootstrapper")).unwrap();
    assert!(confboot_tests::elf::linking(&me).unwrap().is_static());
    assert_eq!(confboot_tests::elf::linking(b"#!/bin/sh\n"), None);
}

/// Reads the record: each binary's size in bytes.
fn read_record(path: &Path) -> BTreeMap<String, u64> {
    let text = std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}{}", path.display(), how_to_update()));
    let root: serde_json::Value = serde_json::from_str(&text)
        .unwrap_or_else(|e| panic!("{} is not JSON: {e}", path.display()));
    let obj = root
        .as_object()
        .unwrap_or_else(|| panic!("{}: the top level must be an object", path.display()));
    obj.iter()
        .map(|(name, entry)| {
            let bytes = entry
                .get("bytes")
                .and_then(|b| b.as_u64())
                .filter(|b| *b > 0)
                .unwrap_or_else(|| {
                    panic!("{}: {name} must be {{\"bytes\": <size>}}", path.display())
                });
            (name.clone(), bytes)
        })
        .collect()
}

/// The record's text for these sizes.
fn record_text(sizes: &BTreeMap<String, u64>) -> String {
    let obj: serde_json::Map<String, serde_json::Value> = sizes
        .iter()
        .map(|(name, bytes)| (name.clone(), serde_json::json!({ "bytes": bytes })))
        .collect();
    serde_json::to_string_pretty(&obj).expect("a JSON map serializes") + "\n"
}

fn how_to_update() -> String {
    format!(
        "\nIf the change in size is deliberate, record the measured sizes (after the release \
         musl build) and commit the file:\n  {UPDATE_VAR}=1 cargo test -p confboot-tests \
         --test static_binaries\n(it rewrites {SIZES_FILE} and fails nothing)"
    )
}

/// The difference from the recorded size in percent, or why it is outside
/// ±[`TOLERANCE_PERCENT`].
fn size_check(name: &str, recorded: u64, measured: u64) -> Result<f64, String> {
    let percent = (measured as f64 - recorded as f64) * 100.0 / recorded as f64;
    // Integer comparison, so exactly 5 % is in and one byte more is out.
    if measured.abs_diff(recorded) * 100 <= TOLERANCE_PERCENT * recorded {
        Ok(percent)
    } else {
        Err(format!(
            "{name} is {measured} bytes, recorded {recorded} bytes: {percent:+.2} %, \
             outside ±{TOLERANCE_PERCENT} %"
        ))
    }
}

#[test]
fn release_binary_sizes_match_the_record() {
    let measured: BTreeMap<String, u64> = BINARIES
        .iter()
        .map(|name| {
            let len = std::fs::metadata(confboot_tests::musl_binary(name))
                .unwrap()
                .len();
            (name.to_string(), len)
        })
        .collect();
    if std::env::var(UPDATE_VAR).is_ok_and(|v| v == "1") {
        std::fs::write(SIZES_FILE, record_text(&measured)).unwrap();
        println!("{UPDATE_VAR}=1: recorded {measured:?} in {SIZES_FILE}");
        return;
    }
    let record = read_record(Path::new(SIZES_FILE));
    println!(
        "{:<14}{:>12}{:>12}{:>9}",
        "binary", "recorded", "measured", "change"
    );
    let mut failures = Vec::new();
    for (name, &bytes) in &measured {
        let Some(&recorded) = record.get(name) else {
            failures.push(format!("{name} has no recorded size"));
            continue;
        };
        match size_check(name, recorded, bytes) {
            Ok(percent) => println!("{name:<14}{recorded:>12}{bytes:>12}{percent:>+8.2}%"),
            Err(e) => {
                println!("{name:<14}{recorded:>12}{bytes:>12}  outside the band");
                failures.push(e);
            }
        }
    }
    for name in record.keys().filter(|n| !measured.contains_key(*n)) {
        failures.push(format!("{name} is recorded but is not a release binary"));
    }
    assert!(
        failures.is_empty(),
        "release binary sizes ({SIZES_FILE}):\n{}{}",
        failures.join("\n"),
        how_to_update()
    );
}

#[test]
fn size_check_holds_five_percent_either_way() {
    assert_eq!(size_check("x", 1000, 1000), Ok(0.0));
    assert_eq!(size_check("x", 1000, 1050), Ok(5.0));
    assert_eq!(size_check("x", 1000, 950), Ok(-5.0));
    let err = size_check("bootstrapper", 1000, 1051).unwrap_err();
    assert_eq!(
        err,
        "bootstrapper is 1051 bytes, recorded 1000 bytes: +5.10 %, outside ±5 %"
    );
    let err = size_check("joinsvc", 1000, 949).unwrap_err();
    assert!(err.contains("-5.10 %"), "{err}");
    assert!(how_to_update().contains("CONFBOOT_UPDATE_SIZES=1 cargo test"));
}

#[test]
fn the_record_round_trips_and_names_every_binary() {
    let sizes: BTreeMap<String, u64> = [("a".to_string(), 1), ("b".to_string(), 2_000_000)].into();
    let dir = std::env::temp_dir().join(format!("confboot-sizes-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("sizes.json");
    std::fs::write(&file, record_text(&sizes)).unwrap();
    assert_eq!(read_record(&file), sizes);
    std::fs::remove_dir_all(&dir).unwrap();
    // The committed record names exactly the release binaries.
    let record = read_record(Path::new(SIZES_FILE));
    let names: Vec<&str> = record.keys().map(String::as_str).collect();
    let mut want = BINARIES.to_vec();
    want.sort_unstable();
    assert_eq!(names, want, "{SIZES_FILE}");
}
