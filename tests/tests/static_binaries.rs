//! The release binaries are static musl executables within the size budget.
//! Built by `scripts/test.sh` (cargo build --release --target
//! x86_64-unknown-linux-musl) before the tests run. Not timed.

use std::path::PathBuf;

/// Size budget of each binary, in bytes.
const BUDGET: u64 = 3_000_000;
const BINARIES: [&str; 3] = ["bootstrapper", "joinsvc", "confboot"];

fn musl_binary(name: &str) -> PathBuf {
    let p = confboot_tests::target_dir()
        .join("x86_64-unknown-linux-musl/release")
        .join(name);
    assert!(
        p.exists(),
        "{} is missing: build it with `cargo build --release --target x86_64-unknown-linux-musl \
         -p bootstrapper -p joinsvc -p confboot-cli -p confboot-tests --bins` \
         (scripts/test.sh does)",
        p.display()
    );
    p
}

/// What an ELF file says about its linking: (has an interpreter, number of DT_NEEDED entries).
fn elf_linking(bytes: &[u8]) -> (bool, usize) {
    let u16_at = |o: usize| u16::from_le_bytes(bytes[o..o + 2].try_into().unwrap()) as usize;
    let u32_at = |o: usize| u32::from_le_bytes(bytes[o..o + 4].try_into().unwrap());
    let u64_at = |o: usize| u64::from_le_bytes(bytes[o..o + 8].try_into().unwrap()) as usize;
    assert_eq!(&bytes[..4], b"\x7fELF", "not an ELF file");
    assert_eq!(bytes[4], 2, "not a 64-bit ELF");
    assert_eq!(bytes[5], 1, "not little-endian");
    let (phoff, phentsize, phnum) = (u64_at(0x20), u16_at(0x36), u16_at(0x38));
    let mut interp = false;
    let mut needed = 0;
    for i in 0..phnum {
        let ph = phoff + i * phentsize;
        match u32_at(ph) {
            3 => interp = true, // PT_INTERP
            2 => {
                // PT_DYNAMIC: walk (tag, value) pairs up to DT_NULL.
                let (off, size) = (u64_at(ph + 8), u64_at(ph + 32));
                for e in (off..off + size).step_by(16) {
                    match u64_at(e) {
                        0 => break,
                        1 => needed += 1, // DT_NEEDED
                        _ => {}
                    }
                }
            }
            _ => {}
        }
    }
    (interp, needed)
}

#[test]
fn release_binaries_are_static_and_within_budget() {
    let baseline = std::fs::metadata(musl_binary("size-baseline"))
        .unwrap()
        .len();
    println!(
        "{:<14}{:>12}  {:>13}  linking",
        "binary", "bytes", "× hello world"
    );
    println!("{:<14}{baseline:>12}  {:>13.2}", "size-baseline", 1.0);
    for name in BINARIES {
        let path = musl_binary(name);
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
