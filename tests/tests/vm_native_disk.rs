//! The native state-disk backend (LUKS2 and device-mapper in Rust, no
//! cryptsetup) against real cryptsetup, in QEMU guests (the build machine's
//! kernel has no device-mapper): data written through our mapping is read
//! by `cryptsetup open` in another boot, and data cryptsetup wrote through
//! its mapping is read through ours in another boot.
//!
//! The test image carries cryptsetup and the probe binary
//! `confboot-disk-probe` (a static musl build: `cargo build --release
//! --target x86_64-unknown-linux-musl -p confboot-tests --bins`); `/init`'s
//! probe tasks `luks-format`, `luks-read`, `native-format` and
//! `native-read` drive them (initramfs/README.md).

use std::path::{Path, PathBuf};
use std::time::Duration;

use confboot_tests::cluster::TempDir;
use confboot_tests::qemu::{Image, Vm, VmConfig};

/// Bound for one probe boot (SeaBIOS under TCG takes ~7–30 s).
const BOOT_BOUND: Duration = Duration::from_secs(240);
/// Bound for QEMU to exit after the probe's end marker.
const EXIT_BOUND: Duration = Duration::from_secs(30);

/// Boots `image` with `confboot.probe=1 extra` on `disk`, waits for the
/// end marker and a clean exit.
fn probe_boot(name: &str, image: &Image, disk: &Path, extra: &str) -> Vm {
    let mut config = VmConfig::new(
        &image.kernel,
        &image.initrd,
        &format!("confboot.probe=1 {extra}"),
    );
    config.name = name.to_string();
    config.disk = Some(disk.to_path_buf());
    let vm = Vm::boot_probe(config, BOOT_BOUND, EXIT_BOUND);
    eprintln!("[{name}] boot took {:.1} s", vm.elapsed().as_secs_f64());
    vm
}

/// Whether the console says `task` succeeded (exactly one result).
fn task_ok(vm: &Vm, task: &str) -> bool {
    let serial = vm.serial();
    let ok = serial
        .lines()
        .any(|l| l.trim_end() == format!("CONFBOOT-TASK {task} ok"));
    let fail = serial
        .lines()
        .any(|l| l.starts_with(&format!("CONFBOOT-TASK {task} fail")));
    assert!(
        ok != fail,
        "task {task}: no single result\n{}",
        vm.failure_report()
    );
    ok
}

/// The `CONFBOOT-READ` lines, in order.
fn reads(vm: &Vm) -> Vec<String> {
    vm.serial()
        .lines()
        .filter_map(|l| {
            l.trim_end()
                .strip_prefix("CONFBOOT-READ ")
                .map(str::to_string)
        })
        .collect()
}

/// The milliseconds a `PREFIX N` line reports.
fn millis(vm: &Vm, prefix: &str) -> Option<u64> {
    vm.serial()
        .lines()
        .find_map(|l| l.trim_end().strip_prefix(prefix)?.trim().parse().ok())
}

/// The probe read the same 64 KiB (beyond the marker: noise from
/// never-written sectors, several 4 KiB sectors) through both mappings;
/// the cryptsetup backend read cryptsetup's mapping back from the kernel
/// and found it the node's.
fn assert_mappings_agree(vm: &Vm) {
    assert!(
        vm.serial()
            .lines()
            .any(|l| l.trim_end() == "CONFBOOT-CRYPTSETUP-MAPPING-CHECKED confboot-cs"),
        "{}",
        vm.failure_report()
    );
    assert!(
        vm.serial()
            .lines()
            .any(|l| l.trim_end() == "CONFBOOT-MAPPINGS-AGREE 65536"),
        "{}",
        vm.failure_report()
    );
}

fn blank_disk(dir: &TempDir, name: &str) -> PathBuf {
    let disk = dir.path().join(name);
    std::fs::File::create(&disk)
        .unwrap()
        .set_len(64 << 20)
        .unwrap();
    disk
}

/// The disk's bytes hold `text` nowhere in clear, and start with a LUKS2
/// header.
fn assert_encrypted(disk: &Path, text: &str) {
    let bytes = std::fs::read(disk).unwrap();
    assert_eq!(&bytes[..8], b"LUKS\xba\xbe\x00\x02", "a LUKS2 header");
    assert!(
        !bytes.windows(text.len()).any(|w| w == text.as_bytes()),
        "{text} is on the disk in clear"
    );
}

#[test]
fn native_mappings_and_cryptsetup_read_each_others_data() {
    let image = Image::with_probe("native-disk", "confboot-disk-probe");
    let dir = TempDir::new("vm-native-disk");

    // Ours writes, cryptsetup reads (another boot); ours reads it back too.
    let ours = blank_disk(&dir, "ours.img");
    let vm = probe_boot(
        "native-format",
        &image,
        &ours,
        "confboot.tasks=native-format confboot.key=native-key-1 confboot.marker=native-wrote-1",
    );
    assert!(task_ok(&vm, "native-format"), "{}", vm.failure_report());
    drop(vm);
    assert_encrypted(&ours, "native-wrote-1");
    let vm = probe_boot(
        "cryptsetup-reads-ours",
        &image,
        &ours,
        "confboot.tasks=luks-read,native-read confboot.key=native-key-1",
    );
    assert!(task_ok(&vm, "luks-read"), "{}", vm.failure_report());
    assert!(task_ok(&vm, "native-read"), "{}", vm.failure_report());
    assert_eq!(
        reads(&vm),
        ["CONFBOOT-MARKER native-wrote-1"; 2],
        "{}",
        vm.failure_report()
    );
    assert_mappings_agree(&vm);
    drop(vm);

    // cryptsetup formats and writes, ours reads (another boot); a wrong
    // key opens nothing.
    let theirs = blank_disk(&dir, "theirs.img");
    let vm = probe_boot(
        "cryptsetup-format",
        &image,
        &theirs,
        "confboot.tasks=luks-format confboot.key=cs-key-2 confboot.marker=cryptsetup-wrote-2",
    );
    assert!(task_ok(&vm, "luks-format"), "{}", vm.failure_report());
    drop(vm);
    assert_encrypted(&theirs, "cryptsetup-wrote-2");
    let vm = probe_boot(
        "native-reads-theirs",
        &image,
        &theirs,
        "confboot.tasks=native-read confboot.key=cs-key-2",
    );
    assert!(task_ok(&vm, "native-read"), "{}", vm.failure_report());
    assert_eq!(
        reads(&vm),
        ["CONFBOOT-MARKER cryptsetup-wrote-2"],
        "{}",
        vm.failure_report()
    );
    assert_mappings_agree(&vm);
    let (native, cryptsetup) = (
        millis(&vm, "CONFBOOT-NATIVE-OPEN-MS"),
        millis(&vm, "CONFBOOT-CRYPTSETUP-OPEN-MS"),
    );
    eprintln!("open (pbkdf2, 1000 iterations): native {native:?} ms, cryptsetup {cryptsetup:?} ms");
    assert!(
        native.is_some() && cryptsetup.is_some(),
        "{}",
        vm.failure_report()
    );
    drop(vm);
    let vm = probe_boot(
        "native-wrong-key",
        &image,
        &theirs,
        "confboot.tasks=native-read confboot.key=wrong-key",
    );
    assert!(!task_ok(&vm, "native-read"), "a wrong key opened the disk");
    assert!(reads(&vm).is_empty(), "{}", vm.failure_report());
}
