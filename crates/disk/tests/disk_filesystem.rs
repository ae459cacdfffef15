//! The state file system, made by the native formatter (and, as the
//! option for a full OS, the real `mke2fs` of Debian e2fsprogs) on image
//! files, and the LUKS2 header token that records it (real
//! `cryptsetup`): made once, then kept.

use std::fs::{self, File};
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

use confboot_disk::filesystem::LABEL;
use confboot_disk::{
    CryptsetupBackend, DiskAction, DiskBackend, DiskError, DiskState, FilesystemAction, Mkfs,
    NativeExt4, StateDisk, new_disk_uuid,
};
use confboot_kms::SecretBytes;
use confboot_testkit::{TempDir, installed_program};

const IMAGE_SIZE: u64 = 64 << 20;
/// Just over two block groups of the native formatter's layout.
const TWO_GROUPS: u64 = 136 << 20;

fn image(dir: &Path, name: &str) -> PathBuf {
    let path = dir.join(name);
    File::create(&path).unwrap().set_len(IMAGE_SIZE).unwrap();
    path
}

/// The ext4 superblock (at 1024): magic 0xEF53 at +56, the label at +120.
fn ext4_label(path: &Path) -> Option<String> {
    let mut f = File::open(path).unwrap();
    f.seek(SeekFrom::Start(1024)).unwrap();
    let mut sb = [0u8; 256];
    f.read_exact(&mut sb).unwrap();
    (sb[56..58] == [0x53, 0xef]).then(|| {
        String::from_utf8_lossy(&sb[120..136])
            .trim_end_matches('\0')
            .to_string()
    })
}

/// A double of a mapped LUKS disk: the header is a real LUKS2 image
/// (header-only cryptsetup), the "mapped device" another image file.
struct MappedImage {
    header: CryptsetupBackend,
    mapped: PathBuf,
}

impl DiskBackend for MappedImage {
    fn inspect(&self) -> Result<DiskState, DiskError> {
        self.header.inspect()
    }
    fn format(&mut self, uuid: &str, key: &SecretBytes) -> Result<(), DiskError> {
        self.header.format(uuid, key)
    }
    fn open(&mut self, key: &SecretBytes) -> Result<(), DiskError> {
        self.header.open(key)
    }
    fn check_key(&self, key: &SecretBytes) -> Result<(), DiskError> {
        self.header.check_key(key)
    }
    fn describe(&self) -> String {
        self.header.describe()
    }
    fn mapped_device(&self) -> Option<PathBuf> {
        Some(self.mapped.clone())
    }
    fn store_measurement_salt(&mut self, salt: &[u8]) -> Result<(), DiskError> {
        self.header.store_measurement_salt(salt)
    }
    fn measurement_salt(&self) -> Result<Option<Vec<u8>>, DiskError> {
        self.header.measurement_salt()
    }
    fn record_filesystem(&mut self, fs: &str) -> Result<(), DiskError> {
        self.header.record_filesystem(fs)
    }
    fn filesystem(&self) -> Result<Option<String>, DiskError> {
        self.header.filesystem()
    }
    fn record_bootstrapped(&mut self) -> Result<(), DiskError> {
        self.header.record_bootstrapped()
    }
    fn bootstrapped(&self) -> Result<bool, DiskError> {
        self.header.bootstrapped()
    }
}

fn key() -> SecretBytes {
    SecretBytes::new(vec![0x42; 32])
}

fn mapped_disk(dir: &Path) -> (StateDisk<MappedImage>, PathBuf, PathBuf) {
    let (header, mapped) = (image(dir, "luks.img"), image(dir, "mapped.img"));
    let backend = MappedImage {
        header: CryptsetupBackend::header_only(&header)
            .with_program(installed_program("cryptsetup", "cryptsetup-bin")),
        mapped: mapped.clone(),
    };
    (StateDisk::new(backend), header, mapped)
}

#[test]
fn the_file_system_is_made_once_and_recorded_in_the_header() {
    let dir = TempDir::new("fs-once");
    let mkfs = NativeExt4;
    let (mut disk, header, mapped) = mapped_disk(dir.path());
    let action = disk
        .format_or_open(&new_disk_uuid(), |_| Ok(key()))
        .unwrap();
    // The mapped device of a new disk reads as noise, not zeros.
    fs::write(&mapped, vec![0x5c; IMAGE_SIZE as usize]).unwrap();
    assert_eq!(
        disk.ensure_filesystem(&mkfs, &action).unwrap(),
        Some(FilesystemAction::Made)
    );
    assert_eq!(ext4_label(&mapped).as_deref(), Some(LABEL));
    // Made over noise, e2fsprogs finds nothing to complain about.
    let fsck = std::process::Command::new(installed_program("e2fsck", "e2fsprogs"))
        .arg("-fn")
        .arg(&mapped)
        .output()
        .unwrap();
    assert!(fsck.status.success(), "{fsck:?}");
    assert_eq!(
        disk.backend().filesystem().unwrap().as_deref(),
        Some("ext4")
    );
    // A reboot: the header says it is there; not one byte changes.
    let made = fs::read(&mapped).unwrap();
    let mut rebooted = StateDisk::new(MappedImage {
        header: CryptsetupBackend::header_only(&header)
            .with_program(installed_program("cryptsetup", "cryptsetup-bin")),
        mapped: mapped.clone(),
    });
    let action = rebooted
        .format_or_open(&new_disk_uuid(), |_| Ok(key()))
        .unwrap();
    assert_eq!(
        rebooted.ensure_filesystem(&mkfs, &action).unwrap(),
        Some(FilesystemAction::Kept)
    );
    assert!(fs::read(&mapped).unwrap() == made);
}

#[test]
fn a_failed_mke2fs_records_nothing_and_a_retry_in_the_same_boot_makes_it() {
    let dir = TempDir::new("fs-retry");
    let (mut disk, _, mapped) = mapped_disk(dir.path());
    let action = disk
        .format_or_open(&new_disk_uuid(), |_| Ok(key()))
        .unwrap();
    for failing in ["/nonexistent/mke2fs", "/bin/false"] {
        assert!(matches!(
            disk.ensure_filesystem(&Mkfs::new(failing), &action),
            Err(DiskError::Filesystem(_))
        ));
        assert_eq!(disk.backend().filesystem().unwrap(), None);
    }
    let mkfs = Mkfs::new(installed_program("mke2fs", "e2fsprogs"));
    assert_eq!(
        disk.ensure_filesystem(&mkfs, &action).unwrap(),
        Some(FilesystemAction::Made)
    );
    assert_eq!(ext4_label(&mapped).as_deref(), Some(LABEL));
}

/// The header's JSON is not authenticated: a host that deletes the file
/// system token must not get the node to make a new file system over its
/// data. The disk is opened, not formatted, in this boot: probe and keep.
#[test]
fn a_deleted_file_system_token_never_gets_data_overwritten() {
    let dir = TempDir::new("fs-token-deleted");
    let mkfs = NativeExt4;
    let (mut disk, header, mapped) = mapped_disk(dir.path());
    let action = disk
        .format_or_open(&new_disk_uuid(), |_| Ok(key()))
        .unwrap();
    disk.ensure_filesystem(&mkfs, &action).unwrap();
    let made = fs::read(&mapped).unwrap();
    // The host removes the token from the header.
    let cryptsetup = installed_program("cryptsetup", "cryptsetup-bin");
    let dump = std::process::Command::new(&cryptsetup)
        .args(["luksDump", "--dump-json-metadata"])
        .arg(&header)
        .output()
        .unwrap();
    let json: serde_json::Value = serde_json::from_slice(&dump.stdout).unwrap();
    let id = json["tokens"]
        .as_object()
        .unwrap()
        .iter()
        .find(|(_, t)| t["type"] == "confboot-state-fs")
        .map(|(id, _)| id.clone())
        .expect("the token is there");
    let removed = std::process::Command::new(&cryptsetup)
        .args(["token", "remove", "--token-id", &id])
        .arg(&header)
        .status()
        .unwrap();
    assert!(removed.success());
    assert_eq!(disk.backend().filesystem().unwrap(), None);

    let mut rebooted = StateDisk::new(MappedImage {
        header: CryptsetupBackend::header_only(&header).with_program(&cryptsetup),
        mapped: mapped.clone(),
    });
    let action = rebooted
        .format_or_open(&new_disk_uuid(), |_| Ok(key()))
        .unwrap();
    assert!(matches!(action, DiskAction::Opened { .. }));
    assert_eq!(
        rebooted.ensure_filesystem(&mkfs, &action).unwrap(),
        Some(FilesystemAction::Found("ext4"))
    );
    assert!(fs::read(&mapped).unwrap() == made, "not one byte changed");
    assert_eq!(
        rebooted.backend().filesystem().unwrap().as_deref(),
        Some("ext4"),
        "what was found is recorded again"
    );
}

/// A disk whose first boot completed without a file system holds whatever
/// it holds: a later boot makes nothing over it.
#[test]
fn an_opened_disk_without_a_file_system_is_reported_not_formatted() {
    let dir = TempDir::new("fs-absent");
    let (mut disk, header, mapped) = mapped_disk(dir.path());
    disk.format_or_open(&new_disk_uuid(), |_| Ok(key()))
        .unwrap();
    disk.record_bootstrapped().unwrap();
    let data = vec![0xa7; IMAGE_SIZE as usize];
    fs::write(&mapped, &data).unwrap();
    let mut rebooted = StateDisk::new(MappedImage {
        header: CryptsetupBackend::header_only(&header)
            .with_program(installed_program("cryptsetup", "cryptsetup-bin")),
        mapped: mapped.clone(),
    });
    let action = rebooted
        .format_or_open(&new_disk_uuid(), |_| Ok(key()))
        .unwrap();
    let mkfs = NativeExt4;
    assert_eq!(
        rebooted.ensure_filesystem(&mkfs, &action).unwrap(),
        Some(FilesystemAction::Absent)
    );
    assert!(fs::read(&mapped).unwrap() == data);
    assert_eq!(rebooted.backend().filesystem().unwrap(), None);
}

/// Pseudo-random bytes (what a freshly mapped disk reads as).
fn noise(len: usize) -> Vec<u8> {
    let mut out = vec![0u8; len];
    ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut out).unwrap();
    out
}

/// A first boot powered off between the LUKS format and mke2fs: the next
/// boot, finishing it, finds a disk that never held a file system and
/// makes one (no superblock anywhere); a disk whose primary superblock is
/// gone but whose copies are there is a damaged file system, kept.
#[test]
fn a_first_boot_cut_short_before_its_file_system_gets_one_when_finished() {
    let dir = TempDir::new("fs-cutshort");
    let mkfs = NativeExt4;
    let (mut disk, header, mapped) = mapped_disk(dir.path());
    disk.format_or_open(&new_disk_uuid(), |_| Ok(key()))
        .unwrap();
    // Two block groups of 4 KiB blocks (a file system of one group, below
    // 128 MiB, has no superblock copy).
    fs::write(&mapped, noise(TWO_GROUPS as usize)).unwrap();
    let reboot = || {
        StateDisk::new(MappedImage {
            header: CryptsetupBackend::header_only(&header)
                .with_program(installed_program("cryptsetup", "cryptsetup-bin")),
            mapped: mapped.clone(),
        })
    };
    let mut rebooted = reboot();
    let action = rebooted
        .format_or_open(&new_disk_uuid(), |_| Ok(key()))
        .unwrap();
    assert!(matches!(action, DiskAction::Opened { .. }));
    assert_eq!(
        rebooted.ensure_filesystem(&mkfs, &action).unwrap(),
        Some(FilesystemAction::Made)
    );
    assert_eq!(ext4_label(&mapped).as_deref(), Some(LABEL));
    assert_eq!(
        rebooted.backend().filesystem().unwrap().as_deref(),
        Some("ext4")
    );

    // Its primary superblock destroyed (and the header's record removed):
    // the copies say a file system is there, so nothing is made.
    let mut bytes = fs::read(&mapped).unwrap();
    bytes[1024..2048].copy_from_slice(&noise(1024));
    fs::write(&mapped, &bytes).unwrap();
    let copy = confboot_disk::filesystem::ext4_superblock_copy(&mapped)
        .unwrap()
        .expect("a superblock copy");
    assert!(copy > 2048, "a backup, at {copy}");
    let dump = std::process::Command::new(installed_program("cryptsetup", "cryptsetup-bin"))
        .args(["luksDump", "--dump-json-metadata"])
        .arg(&header)
        .output()
        .unwrap();
    let json: serde_json::Value = serde_json::from_slice(&dump.stdout).unwrap();
    for (id, t) in json["tokens"].as_object().unwrap() {
        if t["type"] == "confboot-state-fs" {
            let removed =
                std::process::Command::new(installed_program("cryptsetup", "cryptsetup-bin"))
                    .args(["token", "remove", "--token-id", id])
                    .arg(&header)
                    .status()
                    .unwrap();
            assert!(removed.success());
        }
    }
    let mut again = reboot();
    let action = again
        .format_or_open(&new_disk_uuid(), |_| Ok(key()))
        .unwrap();
    assert_eq!(
        again.ensure_filesystem(&mkfs, &action).unwrap(),
        Some(FilesystemAction::Absent)
    );
    assert!(fs::read(&mapped).unwrap() == bytes, "not one byte changed");
}

#[test]
fn the_first_boot_is_recorded_complete_in_the_header() {
    let dir = TempDir::new("fs-bootstrapped");
    let (mut disk, _, _) = mapped_disk(dir.path());
    disk.format_or_open(&new_disk_uuid(), |_| Ok(key()))
        .unwrap();
    assert!(!disk.bootstrapped().unwrap());
    disk.record_bootstrapped().unwrap();
    assert!(disk.bootstrapped().unwrap());
    disk.record_bootstrapped().unwrap();
    assert!(
        disk.bootstrapped().unwrap(),
        "recording twice keeps one token"
    );
}

#[test]
fn without_a_mapped_device_nothing_is_made() {
    let dir = TempDir::new("fs-headeronly");
    let header = image(dir.path(), "luks.img");
    let mut disk = StateDisk::new(
        CryptsetupBackend::header_only(&header)
            .with_program(installed_program("cryptsetup", "cryptsetup-bin")),
    );
    let action = disk
        .format_or_open(&new_disk_uuid(), |_| Ok(key()))
        .unwrap();
    assert_eq!(
        disk.ensure_filesystem(&Mkfs::new("/nonexistent/mke2fs"), &action)
            .unwrap(),
        None
    );
    assert_eq!(disk.backend().filesystem().unwrap(), None);
}
