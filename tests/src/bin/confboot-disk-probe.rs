//! The test image's probe of the native state-disk backend (LUKS2 and
//! device-mapper in Rust, no cryptsetup), run by `/init`'s probe tasks
//! `native-format` and `native-read` (initramfs/README.md) so that the VM
//! tests can check it against real cryptsetup both ways:
//!
//! - `confboot-disk-probe format DEVICE KEYFILE MARKER`: formats the blank
//!   DEVICE, opens it (our mapping), writes `CONFBOOT-MARKER MARKER` in the
//!   first 512 bytes of the decrypted device, closes it.
//! - `confboot-disk-probe read DEVICE KEYFILE [CRYPTSETUP]`: opens DEVICE
//!   (our mapping), prints `CONFBOOT-READ <first line>`, closes it; with
//!   CRYPTSETUP, also opens the same disk with the node's cryptsetup
//!   backend, which runs `cryptsetup open` and checks the mapping the
//!   kernel holds against the node's (timed: `CONFBOOT-CRYPTSETUP-OPEN-MS`,
//!   then `CONFBOOT-CRYPTSETUP-MAPPING-CHECKED`), and checks that the first
//!   [`COMPARED`] bytes read the same through both mappings (most of them
//!   never written, so they decrypt to noise that matches only if key,
//!   offset, IVs and sector size all do): `CONFBOOT-MAPPINGS-AGREE N`.
//!
//! Every open prints `CONFBOOT-NATIVE-OPEN-MS N`. A failure exits non-zero
//! with its reason on stderr.

use std::io::{Read, Seek, SeekFrom, Write};
use std::path::Path;
use std::process::{Command, ExitCode, Stdio};
use std::time::Instant;

use confboot_disk::luks2::Luks2Backend;
use confboot_disk::{CryptsetupBackend, DiskBackend, DiskState, new_disk_uuid};
use confboot_kms::SecretBytes;

const MAPPING: &str = "confboot-native";
const SECTOR: usize = 512;
/// Bytes compared through both mappings: several 4 KiB sectors.
const COMPARED: usize = 64 << 10;

/// The first `len` bytes of `node`.
fn head(node: &Path, len: usize) -> Result<Vec<u8>, String> {
    let mut buf = vec![0u8; len];
    let mut dev = std::fs::File::open(node).map_err(|e| format!("{}: {e}", node.display()))?;
    dev.seek(SeekFrom::Start(0))
        .and_then(|_| dev.read_exact(&mut buf))
        .map_err(|e| format!("reading {}: {e}", node.display()))?;
    Ok(buf)
}

fn key(path: &str) -> Result<SecretBytes, String> {
    let bytes = std::fs::read(path).map_err(|e| format!("{path}: {e}"))?;
    Ok(SecretBytes::new(bytes))
}

fn open(backend: &mut Luks2Backend, key: &SecretBytes) -> Result<std::path::PathBuf, String> {
    let started = Instant::now();
    backend.open(key).map_err(|e| format!("open: {e}"))?;
    println!("CONFBOOT-NATIVE-OPEN-MS {}", started.elapsed().as_millis());
    backend
        .mapped_device()
        .ok_or_else(|| "open mapped nothing".to_string())
}

fn format(device: &str, key_file: &str, marker: &str) -> Result<(), String> {
    let key = key(key_file)?;
    let mut backend = Luks2Backend::new(device, MAPPING);
    match backend.inspect().map_err(|e| e.to_string())? {
        DiskState::Blank => {}
        other => return Err(format!("refusing to format: the disk is {other:?}")),
    }
    backend
        .format(&new_disk_uuid(), &key)
        .map_err(|e| format!("format: {e}"))?;
    let node = open(&mut backend, &key)?;
    let mut block = format!("CONFBOOT-MARKER {marker}\n").into_bytes();
    block.resize(SECTOR, 0);
    let mut dev = std::fs::OpenOptions::new()
        .write(true)
        .open(&node)
        .map_err(|e| format!("{}: {e}", node.display()))?;
    dev.write_all(&block)
        .and_then(|()| dev.sync_all())
        .map_err(|e| format!("writing {}: {e}", node.display()))?;
    drop(dev);
    backend.close().map_err(|e| format!("close: {e}"))
}

fn read(device: &str, key_file: &str, cryptsetup: Option<&str>) -> Result<(), String> {
    let key = key(key_file)?;
    let mut backend = Luks2Backend::new(device, MAPPING);
    let node = open(&mut backend, &key)?;
    let ours = head(&node, COMPARED)?;
    let line: String = ours[..SECTOR]
        .split(|&b| b == b'\n')
        .next()
        .unwrap_or_default()
        .iter()
        .map(|&b| b as char)
        .filter(|c| c.is_ascii_alphanumeric() || " ._:-".contains(*c))
        .collect();
    println!("CONFBOOT-READ {line}");
    backend.close().map_err(|e| format!("close: {e}"))?;
    if let Some(program) = cryptsetup {
        let theirs = through_cryptsetup(program, device, key_file)?;
        if theirs != ours {
            let at = ours.iter().zip(&theirs).position(|(a, b)| a != b);
            return Err(format!(
                "the two mappings read differently (first difference at byte {at:?})"
            ));
        }
        println!("CONFBOOT-MAPPINGS-AGREE {COMPARED}");
    }
    Ok(())
}

/// The first [`COMPARED`] bytes through `cryptsetup open` of the same
/// disk (timed), which is closed again.
fn through_cryptsetup(program: &str, device: &str, key_file: &str) -> Result<Vec<u8>, String> {
    let run = |args: &[&str]| {
        Command::new(program)
            .args(args)
            .stdin(Stdio::null())
            .status()
            .map_err(|e| format!("{program}: {e}"))
            .and_then(|s| {
                s.success()
                    .then_some(())
                    .ok_or(format!("{program} {}: {s}", args[0]))
            })
    };
    // The node's cryptsetup backend: it checks the header, runs
    // `cryptsetup open`, reads the live table back from the kernel and
    // keeps the mapping only if it is the node's.
    let started = Instant::now();
    let mut backend = CryptsetupBackend::new(device, "confboot-cs").with_program(program);
    backend
        .open(&key(key_file)?)
        .map_err(|e| format!("cryptsetup backend open: {e}"))?;
    println!(
        "CONFBOOT-CRYPTSETUP-OPEN-MS {}",
        started.elapsed().as_millis()
    );
    println!("CONFBOOT-CRYPTSETUP-MAPPING-CHECKED confboot-cs");
    let theirs = head(Path::new("/dev/mapper/confboot-cs"), COMPARED);
    run(&["close", "confboot-cs"])?;
    theirs
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let done = match args.as_slice() {
        ["format", device, key, marker] => format(device, key, marker),
        ["read", device, key] => read(device, key, None),
        ["read", device, key, cryptsetup] if Path::new(cryptsetup).is_absolute() => {
            read(device, key, Some(cryptsetup))
        }
        _ => Err("usage: confboot-disk-probe format DEVICE KEYFILE MARKER | read DEVICE KEYFILE [CRYPTSETUP]".into()),
    };
    match done {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("confboot-disk-probe: {e}");
            ExitCode::FAILURE
        }
    }
}
