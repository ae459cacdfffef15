//! The state disk against the real `cryptsetup` (Debian `cryptsetup-bin`) on
//! sparse image files, in the build-machine mode (`OpenMode::HeaderOnly`):
//! real LUKS2 headers, real key-slot checks, no device-mapper.

use std::fs::{self, File, OpenOptions};
use std::io::{Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use confboot_disk::dm::wire::TableTarget;
use confboot_disk::luks2::Luks2Error;
use confboot_disk::{
    CryptsetupBackend, DiskAction, DiskBackend, DiskError, DiskState, MappingSource, StateDisk,
    new_disk_uuid,
};
use confboot_kms::{MeasurementSalt, MeasurementSaltError, SecretBytes};
use confboot_sys::process::ProcessError;
use confboot_testkit::TempDir;

const IMAGE_SIZE: u64 = 32 << 20;

/// A sparse, all-zero image file.
fn blank_image(dir: &TempDir, name: &str) -> PathBuf {
    let path = dir.path().join(name);
    File::create(&path).unwrap().set_len(IMAGE_SIZE).unwrap();
    path
}

fn write_at(path: &Path, offset: u64, bytes: &[u8]) {
    let mut f = OpenOptions::new().write(true).open(path).unwrap();
    f.seek(SeekFrom::Start(offset)).unwrap();
    f.write_all(bytes).unwrap();
}

/// The real cryptsetup, found like a shell would, plus the sbin directories.
fn real_cryptsetup() -> PathBuf {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(["/usr/sbin".into(), "/sbin".into()])
        .map(|d| d.join("cryptsetup"))
        .find(|p| p.is_file())
        .expect("cryptsetup is installed (Debian package cryptsetup-bin)")
}

fn backend(image: &Path) -> CryptsetupBackend {
    CryptsetupBackend::header_only(image).with_program(real_cryptsetup())
}

/// A 32-byte key from `seed`, with a newline and a NUL inside (a key is
/// binary, not a line of text).
fn key(seed: u8) -> SecretBytes {
    let mut k: Vec<u8> = (0..32u8)
        .map(|i| i.wrapping_mul(37).wrapping_add(seed))
        .collect();
    k[5] = b'\n';
    k[9] = 0;
    SecretBytes::new(k)
}

#[test]
fn blank_disk_is_formatted_with_the_given_uuid_then_reopened() {
    let dir = TempDir::new("blank");
    let image = blank_image(&dir, "disk.img");
    let mut disk = StateDisk::new(backend(&image));
    assert_eq!(disk.state().unwrap(), DiskState::Blank);

    let uuid = new_disk_uuid();
    let mut asked = Vec::new();
    let action = disk
        .format_or_open(&uuid.to_ascii_uppercase(), |u| {
            asked.push(u.to_string());
            Ok(key(1))
        })
        .unwrap();
    assert_eq!(action, DiskAction::Formatted { uuid: uuid.clone() });
    assert_eq!(
        asked,
        vec![uuid.clone()],
        "the key is asked for the lowercase UUID"
    );
    assert_eq!(
        disk.state().unwrap(),
        DiskState::Luks { uuid: uuid.clone() }
    );
    assert_eq!(disk.mapped_device(), None, "header-only mode maps nothing");

    // A reboot: the disk is opened with the key for the header's UUID; the
    // UUID offered for blank disks is ignored.
    let mut disk = StateDisk::new(backend(&image));
    let mut asked = Vec::new();
    let action = disk
        .format_or_open(&new_disk_uuid(), |u| {
            asked.push(u.to_string());
            Ok(key(1))
        })
        .unwrap();
    assert_eq!(action, DiskAction::Opened { uuid: uuid.clone() });
    assert_eq!(action.uuid(), uuid);
    assert_eq!(asked, [uuid]);
}

#[test]
fn wrong_key_is_an_error_and_changes_nothing() {
    let dir = TempDir::new("wrongkey");
    let image = blank_image(&dir, "disk.img");
    let uuid = new_disk_uuid();
    let mut disk = StateDisk::new(backend(&image));
    disk.format_or_open(&uuid, |_| Ok(key(1))).unwrap();
    let before = fs::read(&image).unwrap();

    // The same key up to its newline byte, then different: whole binary keys
    // reach cryptsetup, not just a first line.
    let mut almost = key(1).expose().to_vec();
    almost[20] ^= 1;
    for wrong in [
        key(2),
        SecretBytes::new(almost),
        SecretBytes::new(key(1).expose()[..5].to_vec()),
    ] {
        let mut disk = StateDisk::new(backend(&image)).allow_formatting_unrecognized();
        assert_eq!(
            disk.format_or_open(&new_disk_uuid(), |_| Ok(wrong)),
            Err(DiskError::WrongKey)
        );
        assert!(fs::read(&image).unwrap() == before, "the disk is unchanged");
    }
    // The backend alone says the same.
    assert_eq!(backend(&image).open(&key(3)), Err(DiskError::WrongKey));
    // And the right key still opens it.
    assert_eq!(
        StateDisk::new(backend(&image)).format_or_open(&new_disk_uuid(), |_| Ok(key(1))),
        Ok(DiskAction::Opened { uuid })
    );
    assert!(fs::read(&image).unwrap() == before);
}

#[test]
fn a_luks_disk_is_never_formatted() {
    let dir = TempDir::new("never");
    let image = blank_image(&dir, "disk.img");
    let uuid = new_disk_uuid();
    StateDisk::new(backend(&image))
        .format_or_open(&uuid, |_| Ok(key(1)))
        .unwrap();
    let before = fs::read(&image).unwrap();

    // Asked directly, the backend refuses, with any key and UUID (cryptsetup's
    // --batch-mode would overwrite the header without asking).
    let mut b = backend(&image);
    for k in [key(1), key(2)] {
        assert_eq!(
            b.format(&new_disk_uuid(), &k),
            Err(DiskError::AlreadyFormatted { uuid: uuid.clone() })
        );
    }
    // The decision does not format either when the key fails, even when
    // formatting unrecognized disks is allowed, and a failing key source stops it.
    let mut disk = StateDisk::new(backend(&image)).allow_formatting_unrecognized();
    assert_eq!(
        disk.format_or_open(&new_disk_uuid(), |_| Ok(key(7))),
        Err(DiskError::WrongKey)
    );
    assert_eq!(
        disk.format_or_open(&new_disk_uuid(), |_| Err(DiskError::KeyUnavailable(
            "no join service".into()
        ))),
        Err(DiskError::KeyUnavailable("no join service".into()))
    );
    assert!(
        fs::read(&image).unwrap() == before,
        "the header is unchanged"
    );
    assert_eq!(disk.state().unwrap(), DiskState::Luks { uuid });
}

#[test]
fn a_disk_with_other_content_is_refused_unless_allowed() {
    let dir = TempDir::new("garbage");
    // Random bytes at the start, a single byte deep in the header area, a
    // single byte in the last MiB (where a backup GPT lives).
    let mut noise = vec![0u8; 4096];
    let mut x = 0x1234_5678_9abc_def1u64;
    for b in noise.iter_mut() {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        *b = x as u8;
    }
    let cases: [(u64, &[u8]); 3] = [(0, &noise), (15 << 20, b"x"), (IMAGE_SIZE - 100, b"x")];
    for (i, (offset, bytes)) in cases.into_iter().enumerate() {
        let image = blank_image(&dir, &format!("garbage{i}.img"));
        write_at(&image, offset, bytes);
        let before = fs::read(&image).unwrap();
        let mut disk = StateDisk::new(backend(&image));
        let state = disk.state().unwrap();
        let DiskState::Unrecognized { reason } = &state else {
            panic!("case {i}: {state:?}");
        };
        let first_nonzero = offset + bytes.iter().position(|&b| b != 0).unwrap() as u64;
        assert!(
            reason.contains(&format!("offset {first_nonzero}")),
            "{reason}"
        );
        let mut asked = false;
        let got = disk.format_or_open(&new_disk_uuid(), |_| {
            asked = true;
            Ok(key(1))
        });
        assert!(
            matches!(got, Err(DiskError::Unrecognized { .. })),
            "{got:?}"
        );
        assert!(!asked, "no key is asked for a refused disk");
        assert!(fs::read(&image).unwrap() == before, "case {i}: untouched");

        // Explicitly allowed, the disk is formatted.
        let uuid = new_disk_uuid();
        let mut disk = StateDisk::new(backend(&image)).allow_formatting_unrecognized();
        assert_eq!(
            disk.format_or_open(&uuid, |_| Ok(key(1))),
            Ok(DiskAction::Formatted { uuid: uuid.clone() })
        );
        assert_eq!(disk.state().unwrap(), DiskState::Luks { uuid });
    }
}

#[test]
fn bad_uuids_and_missing_programs_are_errors() {
    let dir = TempDir::new("bad");
    let image = blank_image(&dir, "disk.img");
    let mut disk = StateDisk::new(backend(&image));
    for bad in ["", "not-a-uuid", "../../etc/passwd"] {
        assert!(
            matches!(
                disk.format_or_open(bad, |_| Ok(key(1))),
                Err(DiskError::BadUuid(_))
            ),
            "{bad:?}"
        );
    }
    assert_eq!(disk.state().unwrap(), DiskState::Blank);
    let missing =
        CryptsetupBackend::header_only(&image).with_program(dir.path().join("no-such-cryptsetup"));
    assert!(matches!(
        missing.inspect(),
        Err(DiskError::Run {
            error: ProcessError::Io(_),
            ..
        })
    ));
    // A device that does not exist: cryptsetup's own error, with its message.
    let gone = backend(&dir.path().join("gone.img"));
    match gone.inspect() {
        Err(DiskError::Cryptsetup {
            action,
            status,
            stderr,
        }) => {
            assert_eq!(action, "isLuks");
            assert_eq!(status, Some(4));
            assert!(stderr.contains("does not exist"), "{stderr}");
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn the_key_reaches_cryptsetup_only_on_stdin() {
    let dir = TempDir::new("argv");
    let image = blank_image(&dir, "disk.img");
    let log = dir.path().join("calls");
    fs::create_dir(&log).unwrap();
    // A cryptsetup that records its argv, environment and stdin per call,
    // then runs the real one with the same arguments and stdin.
    let script = dir.path().join("cryptsetup");
    confboot_testkit::write_executable(
        &script,
        format!(
            "#!/bin/sh\nd={log}\nn=$$\nprintf '%s\\n' \"$@\" > $d/$n.argv\nenv > $d/$n.env\n\
             cat > $d/$n.stdin\nexec {real} \"$@\" < $d/$n.stdin\n",
            log = log.display(),
            real = real_cryptsetup().display()
        ),
    );

    let secret = key(42);
    let uuid = new_disk_uuid();
    let mk = || StateDisk::new(CryptsetupBackend::header_only(&image).with_program(&script));
    assert_eq!(
        mk().format_or_open(&uuid, |_| Ok(secret.clone())),
        Ok(DiskAction::Formatted { uuid: uuid.clone() })
    );
    assert_eq!(
        mk().format_or_open(&uuid, |_| Ok(secret.clone())),
        Ok(DiskAction::Opened { uuid: uuid.clone() })
    );

    let k = secret.expose();
    let hex = confboot_util::hex::encode(k);
    let contains = |hay: &[u8], needle: &[u8]| hay.windows(needle.len()).any(|w| w == needle);
    let (mut formats, mut opens) = (0, 0);
    for entry in fs::read_dir(&log).unwrap() {
        let path = entry.unwrap().path();
        let content = fs::read(&path).unwrap();
        match path.extension().unwrap().to_str().unwrap() {
            "argv" | "env" => {
                // Not the raw key, nor hex of it, nor any 8-byte piece of it.
                assert!(!contains(&content, hex.as_bytes()), "{path:?}");
                for piece in k.windows(8) {
                    assert!(!contains(&content, piece), "{path:?}");
                }
                if path.extension().unwrap() == "argv" {
                    let argv = String::from_utf8(content).unwrap();
                    let stdin = fs::read(path.with_extension("stdin")).unwrap();
                    let lines: Vec<&str> = argv.lines().collect();
                    match lines[0] {
                        "luksFormat" => {
                            formats += 1;
                            assert!(argv.contains(&format!("--uuid\n{uuid}\n")), "{argv}");
                            assert!(argv.contains("--key-file\n-\n"), "{argv}");
                            assert_eq!(stdin, k, "the key arrives whole on stdin");
                        }
                        "open" => {
                            opens += 1;
                            assert!(argv.contains("--test-passphrase\n"), "{argv}");
                            assert!(argv.contains("--key-file\n-\n"), "{argv}");
                            assert_eq!(stdin, k, "the key arrives whole on stdin");
                        }
                        "isLuks" | "luksUUID" => assert!(stdin.is_empty(), "{argv}"),
                        other => panic!("unexpected cryptsetup call {other}"),
                    }
                }
            }
            _ => {}
        }
    }
    assert_eq!((formats, opens), (1, 2), "format+open, then open");
}

#[test]
fn a_luks1_disk_is_recognized_and_never_formatted() {
    let dir = TempDir::new("luks1");
    let image = blank_image(&dir, "disk.img");
    let uuid = new_disk_uuid();
    // A LUKS1 header written by cryptsetup itself.
    let mut child = std::process::Command::new(real_cryptsetup())
        .args([
            "luksFormat",
            "--type",
            "luks1",
            "--batch-mode",
            "--uuid",
            &uuid,
        ])
        .args(["--pbkdf-force-iterations", "1000", "--key-file", "-"])
        .arg(&image)
        .stdin(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(key(1).expose())
        .unwrap();
    assert!(child.wait().unwrap().success());
    let before = fs::read(&image).unwrap();

    let mut disk = StateDisk::new(backend(&image)).allow_formatting_unrecognized();
    assert_eq!(
        disk.state().unwrap(),
        DiskState::Luks { uuid: uuid.clone() }
    );
    // Opening is LUKS2-only: refused before cryptsetup runs (the node
    // writes LUKS2 headers only), an error naming the version, not a
    // wrong key, and certainly not a format.
    let got = disk.format_or_open(&new_disk_uuid(), |u| {
        assert_eq!(u, uuid);
        Ok(key(1))
    });
    assert!(
        matches!(&got, Err(DiskError::Header(Luks2Error::Version(1)))),
        "{got:?}"
    );
    assert!(fs::read(&image).unwrap() == before);
}

#[test]
fn a_header_that_does_not_carry_the_requested_uuid_is_an_error() {
    let dir = TempDir::new("uuid");
    let image = blank_image(&dir, "disk.img");
    // A cryptsetup that drops `--uuid X` (so the header gets a random UUID).
    let script = dir.path().join("cryptsetup");
    confboot_testkit::write_executable(
        &script,
        format!(
            "#!/bin/sh\nskip=0\nfor a in \"$@\"; do shift\n\
             if [ $skip = 1 ]; then skip=0; continue; fi\n\
             if [ \"$a\" = --uuid ]; then skip=1; continue; fi\n\
             set -- \"$@\" \"$a\"; done\nexec {} \"$@\"\n",
            real_cryptsetup().display()
        ),
    );
    let uuid = new_disk_uuid();
    let mut disk = StateDisk::new(CryptsetupBackend::header_only(&image).with_program(&script));
    let got = disk.format_or_open(&uuid, |_| Ok(key(1)));
    assert!(
        matches!(&got, Err(DiskError::BadUuid(m)) if m.contains(&uuid)),
        "{got:?}"
    );
    let DiskState::Luks { uuid: written } = disk.state().unwrap() else {
        panic!("formatted");
    };
    assert_ne!(written, uuid);
}

/// Map mode needs device-mapper, which the build machines lack (real mapping
/// is proven in the QEMU boot tests). Here a cryptsetup stand-in answers the
/// mapping `open` only, with a chosen exit status, after recording argv and
/// stdin; every other call goes to the real cryptsetup.
#[test]
fn map_mode_runs_open_with_the_mapper_name_and_maps_exit_statuses() {
    let dir = TempDir::new("map");
    let image = blank_image(&dir, "disk.img");
    let uuid = new_disk_uuid();
    StateDisk::new(backend(&image))
        .format_or_open(&uuid, |_| Ok(key(1)))
        .unwrap();
    let status_file = dir.path().join("open-status");
    let script = dir.path().join("cryptsetup");
    confboot_testkit::write_executable(
        &script,
        format!(
            "#!/bin/sh\nif [ \"$1\" = open ]; then\n\
             printf '%s\\n' \"$@\" > {d}/open.argv\ncat > {d}/open.stdin\n\
             echo 'stand-in message' >&2\nexit $(cat {status})\nfi\nexec {real} \"$@\"\n",
            d = dir.path().display(),
            status = status_file.display(),
            real = real_cryptsetup().display()
        ),
    );
    // What the kernel would report for the mapping cryptsetup makes of a
    // block device 254:16 of the image's size (the key in the keyring).
    let size = fs::metadata(&image).unwrap().len();
    let given = |line: &str| MappingSource::Given {
        block: (nix::sys::stat::makedev(254, 16), size),
        targets: vec![TableTarget {
            sector_start: 0,
            length: (size - (16 << 20)) / 512,
            target_type: "crypt".into(),
            params: zeroize::Zeroizing::new(line.into()),
        }],
    };
    let cryptsetups_line =
        "aes-xts-plain64 :64:logon:cryptsetup:x-d0 0 254:16 32768 1 sector_size:4096";
    let map = || {
        CryptsetupBackend::new(&image, "state")
            .with_program(&script)
            .with_mapping_source(given(cryptsetups_line))
    };
    let before = fs::read(&image).unwrap();

    fs::write(&status_file, "0").unwrap();
    let mut disk = StateDisk::new(map());
    assert_eq!(disk.mapped_device(), None, "nothing mapped before open");
    assert_eq!(
        disk.format_or_open(&new_disk_uuid(), |_| Ok(key(1))),
        Ok(DiskAction::Opened { uuid: uuid.clone() })
    );
    assert_eq!(
        disk.mapped_device(),
        Some(PathBuf::from("/dev/mapper/state"))
    );
    let argv = fs::read_to_string(dir.path().join("open.argv")).unwrap();
    assert_eq!(
        argv.lines().collect::<Vec<_>>(),
        [
            "open",
            "--type",
            "luks2",
            "--key-slot",
            "0",
            "--disable-external-tokens",
            "--key-file",
            "-",
            image.to_str().unwrap(),
            "state"
        ]
    );
    assert_eq!(
        fs::read(dir.path().join("open.stdin")).unwrap(),
        key(1).expose()
    );

    for (status, want) in [
        ("2", DiskError::WrongKey),
        ("5", DiskError::Busy("stand-in message".into())),
        (
            "1",
            DiskError::Cryptsetup {
                action: "open".into(),
                status: Some(1),
                stderr: "stand-in message".into(),
            },
        ),
    ] {
        fs::write(&status_file, status).unwrap();
        let mut disk = StateDisk::new(map()).allow_formatting_unrecognized();
        assert_eq!(
            disk.format_or_open(&new_disk_uuid(), |_| Ok(key(1))),
            Err(want)
        );
        assert_eq!(disk.mapped_device(), None);
    }
    assert!(fs::read(&image).unwrap() == before, "never formatted");
}

/// The host swaps the header between the node's check and cryptsetup's
/// read: cryptsetup maps what the swapped header says. The mapping read
/// back is refused by the field that differs, removed (`cryptsetup close`
/// runs) and never reported as the state disk's device.
#[test]
fn a_mapping_unlike_the_nodes_is_removed_and_refused_by_name() {
    let dir = TempDir::new("swapped");
    let image = blank_image(&dir, "disk.img");
    let uuid = new_disk_uuid();
    StateDisk::new(backend(&image))
        .format_or_open(&uuid, |_| Ok(key(1)))
        .unwrap();
    let script = dir.path().join("cryptsetup");
    confboot_testkit::write_executable(
        &script,
        format!(
            "#!/bin/sh\ncase \"$1\" in\nopen) cat > /dev/null; exit 0;;\n\
             close) echo \"$2\" >> {d}/closed; exit 0;;\nesac\nexec {real} \"$@\"\n",
            d = dir.path().display(),
            real = real_cryptsetup().display()
        ),
    );
    let size = fs::metadata(&image).unwrap().len();
    let length = (size - (16 << 20)) / 512;
    let good = "aes-xts-plain64 :64:logon:cryptsetup:x-d0 0 254:16 32768 1 sector_size:4096";
    for (line, sectors, field) in [
        (good.replace("plain64", "null"), length, "cipher"),
        (good.replace(" 1 sector_size:4096", ""), length, "options"),
        (
            good.replace("1 sector_size", "2 allow_discards sector_size"),
            length,
            "options",
        ),
        (good.replace("32768", "40960"), length, "offset"),
        (good.replace(":64:", ":32:"), length, "key"),
        (good.to_string(), length - 8, "length"),
    ] {
        let _ = fs::remove_file(dir.path().join("closed"));
        let source = MappingSource::Given {
            block: (nix::sys::stat::makedev(254, 16), size),
            targets: vec![TableTarget {
                sector_start: 0,
                length: sectors,
                target_type: "crypt".into(),
                params: zeroize::Zeroizing::new(line.clone()),
            }],
        };
        let mut disk = StateDisk::new(
            CryptsetupBackend::new(&image, "state")
                .with_program(&script)
                .with_mapping_source(source),
        );
        let got = disk.format_or_open(&new_disk_uuid(), |_| Ok(key(1)));
        assert!(
            matches!(&got, Err(DiskError::MappingRefused(m)) if m.field == field),
            "{line}: {got:?}"
        );
        assert_eq!(disk.mapped_device(), None, "{line}");
        assert_eq!(
            fs::read_to_string(dir.path().join("closed")).unwrap(),
            "state\n",
            "{line}: removed"
        );
    }
}

/// Runs the real cryptsetup with `args` and `stdin`; returns its exit status.
fn cryptsetup(args: &[&str], stdin: &[u8]) -> i32 {
    let mut child = std::process::Command::new(real_cryptsetup())
        .args(args)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(stdin).unwrap();
    child.wait().unwrap().code().unwrap()
}

#[test]
fn the_measurement_salt_is_kept_in_the_header_and_replaced_in_place() {
    let dir = TempDir::new("salt");
    let image = blank_image(&dir, "disk.img");
    let mut disk = StateDisk::new(backend(&image));
    disk.format_or_open(&new_disk_uuid(), |_| Ok(key(1)))
        .unwrap();
    assert!(matches!(
        disk.measurement_salt(),
        Err(DiskError::Metadata(_))
    ));
    assert_eq!(backend(&image).measurement_salt().unwrap(), None);

    // Another tool's token stays as it is.
    let other = br#"{"type":"another-tool","keyslots":[]}"#;
    assert_eq!(
        cryptsetup(
            &[
                "token",
                "import",
                "--json-file",
                "-",
                image.to_str().unwrap()
            ],
            other
        ),
        0
    );
    disk.store_measurement_salt(&salt(&[0xa5; 32])).unwrap();
    // A reboot reads it back, without any key.
    let rebooted = StateDisk::new(backend(&image));
    assert_eq!(
        rebooted.measurement_salt().unwrap().to_vec(),
        vec![0xa5; 32]
    );
    // A second store replaces the first (one salt token, not two), as the
    // next reboot reads it (a running node reads its salt once).
    disk.store_measurement_salt(&salt(&[0x5a; 48])).unwrap();
    let rebooted = StateDisk::new(backend(&image));
    assert_eq!(
        rebooted.measurement_salt().unwrap().to_vec(),
        vec![0x5a; 48]
    );
    let dump = std::process::Command::new(real_cryptsetup())
        .args(["luksDump", "--dump-json-metadata", image.to_str().unwrap()])
        .output()
        .unwrap();
    let dump = String::from_utf8(dump.stdout).unwrap();
    assert_eq!(dump.matches("confboot-measurement-salt").count(), 1);
    assert_eq!(dump.matches("another-tool").count(), 1);
    // The key still opens the disk.
    assert!(
        StateDisk::new(backend(&image))
            .format_or_open(&new_disk_uuid(), |_| Ok(key(1)))
            .is_ok()
    );
}

#[test]
fn bad_measurement_salts_are_refused() {
    let dir = TempDir::new("badsalt");
    let image = blank_image(&dir, "disk.img");
    let mut disk = StateDisk::new(backend(&image));
    // A blank disk has no header to keep a salt in.
    assert!(disk.store_measurement_salt(&salt(&[1; 32])).is_err());
    disk.format_or_open(&new_disk_uuid(), |_| Ok(key(2)))
        .unwrap();
    // A salt of a length no header keeps is not even made.
    for bad in [&[][..], &[1; 15][..], &[1; 257][..]] {
        assert!(matches!(
            MeasurementSalt::try_from(bad),
            Err(MeasurementSaltError { len }) if len == bad.len()
        ));
    }
    assert_eq!(backend(&image).measurement_salt().unwrap(), None);
    // A salt token written by someone else that is not hex, or too short.
    let path = image.to_str().unwrap();
    let not_hex = br#"{"type":"confboot-measurement-salt","keyslots":[],"salt":"zz"}"#;
    assert_eq!(
        cryptsetup(&["token", "import", "--json-file", "-", path], not_hex),
        0
    );
    assert!(matches!(
        disk.measurement_salt(),
        Err(DiskError::Metadata(_))
    ));
    let short = br#"{"type":"confboot-measurement-salt","keyslots":[],"salt":"0102"}"#;
    assert_eq!(
        cryptsetup(
            &[
                "token",
                "import",
                "--token-id",
                "0",
                "--token-replace",
                "--json-file",
                "-",
                path
            ],
            short
        ),
        0
    );
    assert!(matches!(
        disk.measurement_salt(),
        Err(DiskError::Metadata(_))
    ));
    // Two salt tokens: which one is meant is unknown.
    let good = format!(
        r#"{{"type":"confboot-measurement-salt","keyslots":[],"salt":"{}"}}"#,
        "ab".repeat(32)
    );
    assert_eq!(
        cryptsetup(
            &["token", "import", "--json-file", "-", path],
            good.as_bytes()
        ),
        0
    );
    assert!(matches!(
        disk.measurement_salt(),
        Err(DiskError::Metadata(_))
    ));
}

#[test]
fn a_cryptsetup_that_hangs_is_killed_and_reported() {
    let dir = TempDir::new("hang");
    let image = blank_image(&dir, "disk.img");
    let script = dir.path().join("cryptsetup");
    confboot_testkit::write_executable(&script, "#!/bin/sh\nexec sleep 1000\n");
    let mut hanging = CryptsetupBackend::header_only(&image).with_program(&script);
    hanging.runner = confboot_sys::process::ProcessRunner::new(
        Some(std::time::Duration::from_millis(300)),
        confboot_util::stop::Stop::new(),
    );
    match hanging.inspect() {
        Err(DiskError::Run {
            error: ProcessError::TimedOut { .. },
            ..
        }) => {}
        other => panic!("{other:?}"),
    }
    // The stop signal ends it too (a bootstrapper that is shutting down).
    let stop = confboot_util::stop::Stop::new();
    hanging.runner = confboot_sys::process::ProcessRunner::new(None, stop.clone());
    let stopper = std::thread::spawn(move || {
        std::thread::sleep(std::time::Duration::from_millis(200));
        stop.raise();
    });
    match hanging.inspect() {
        Err(DiskError::Run {
            error: ProcessError::Stopped,
            ..
        }) => {}
        other => panic!("{other:?}"),
    }
    stopper.join().unwrap();
}

/// `bytes` as a measurement salt (of a length a header keeps).
fn salt(bytes: &[u8]) -> MeasurementSalt {
    MeasurementSalt::try_from(bytes).unwrap()
}
