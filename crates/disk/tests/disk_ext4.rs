//! The native ext4 formatter against e2fsprogs as the oracle (`e2fsck -fn`,
//! `dumpe2fs -h`, `debugfs`) and the host kernel (a loop mount, files
//! written and read back, `e2fsck` again after the kernel's writes).

use std::fs::{self, File};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use confboot_disk::ext4::{self, Ext4Error};
use confboot_disk::filesystem::LABEL;
use confboot_testkit::{TempDir, installed_program};

/// A sparse image file of `bytes`.
fn image(dir: &Path, name: &str, bytes: u64) -> PathBuf {
    let path = dir.join(name);
    File::create(&path).unwrap().set_len(bytes).unwrap();
    path
}

/// Runs `e2fsck -fn`: exit status 0 and nothing but its pass lines and
/// summary, else the test fails with its whole output.
fn assert_fsck_clean(path: &Path) {
    let out = Command::new(installed_program("e2fsck", "e2fsprogs"))
        .args(["-fn"])
        .arg(path)
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let complaints: Vec<&str> = text
        .lines()
        .filter(|l| {
            !(l.starts_with("Pass ")
                || l.starts_with("e2fsck ")
                || l.starts_with(&format!("{LABEL}: "))
                || l.trim().is_empty())
        })
        .collect();
    assert!(
        out.status.success() && complaints.is_empty(),
        "e2fsck -fn {}: {:?}\n{text}",
        path.display(),
        out.status
    );
}

/// `dumpe2fs -h` as text.
fn dumpe2fs(path: &Path) -> String {
    let out = Command::new(installed_program("dumpe2fs", "e2fsprogs"))
        .arg("-h")
        .arg(path)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The value of a `dumpe2fs -h` line.
fn field<'a>(dump: &'a str, name: &str) -> &'a str {
    dump.lines()
        .find_map(|l| l.strip_prefix(&format!("{name}:")))
        .unwrap_or_else(|| panic!("no {name} in\n{dump}"))
        .trim()
}

fn format_and_check(dir: &Path, name: &str, bytes: u64) -> ext4::Formatted {
    let path = image(dir, name, bytes);
    let started = Instant::now();
    let made = ext4::format_path(&path, LABEL).unwrap();
    eprintln!(
        "{name}: {bytes} bytes formatted in {:?} ({} groups, journal {} blocks)",
        started.elapsed(),
        made.geometry.groups,
        made.journal_blocks
    );
    assert_fsck_clean(&path);
    let dump = dumpe2fs(&path);
    assert_eq!(field(&dump, "Filesystem volume name"), LABEL);
    assert_eq!(field(&dump, "Filesystem UUID"), made.uuid);
    assert_eq!(field(&dump, "Block size"), "4096");
    assert_eq!(field(&dump, "Filesystem state"), "clean");
    assert_eq!(
        field(&dump, "Block count"),
        made.geometry.blocks.to_string()
    );
    let features: Vec<&str> = field(&dump, "Filesystem features").split(' ').collect();
    for want in [
        "has_journal",
        "ext_attr",
        "dir_index",
        "filetype",
        "extent",
        "64bit",
        "sparse_super",
        "large_file",
        "huge_file",
        "dir_nlink",
        "extra_isize",
        "metadata_csum",
    ] {
        assert!(features.contains(&want), "{want} in {features:?}");
    }
    assert_eq!(
        field(&dump, "Total journal size"),
        match made.journal_blocks {
            1024 => "4096k",
            4096 => "16M",
            8192 => "32M",
            262_144 => "1024M",
            other => panic!("journal of {other} blocks"),
        }
    );
    path.to_str().map(|_| made).expect("a UTF-8 temporary path")
}

#[test]
fn tiny_odd_and_1_gib_images_pass_e2fsck() {
    let dir = TempDir::new("ext4-sizes");
    // The smallest, one group.
    format_and_check(dir.path(), "tiny.img", ext4::geometry::MIN_BYTES);
    // Not a multiple of the group (or even of the block) size: a short
    // last group of 10,000 blocks and a tail of 1,000 bytes.
    format_and_check(dir.path(), "odd.img", (3 * 32_768 + 10_000) * 4096 + 1000);
    // A short last group too small for its metadata: left out.
    let made = format_and_check(dir.path(), "dropped.img", (2 * 32_768 + 100) * 4096);
    assert_eq!(made.geometry.groups, 2);
    let made = format_and_check(dir.path(), "1g.img", 1 << 30);
    assert_eq!(made.geometry.groups, 8);
}

#[test]
fn a_1_tib_sparse_image_formats_fast_and_passes_e2fsck() {
    let dir = TempDir::new("ext4-tib");
    let made = format_and_check(dir.path(), "1t.img", 1 << 40);
    assert_eq!(made.geometry.groups, 8192);
    // Only metadata was written: a few MiB of the TiB.
    let allocated = fs::metadata(dir.path().join("1t.img"))
        .map(|m| std::os::unix::fs::MetadataExt::blocks(&m) * 512)
        .unwrap();
    eprintln!("1t.img: {} KiB allocated", allocated >> 10);
    assert!(allocated < 32 << 20, "{allocated} bytes written");
    // The kernel takes its journal (nine extents behind an index block)
    // too: 64 MiB written through it. `noinit_itable`: the host's lazy-init
    // thread would otherwise zero 16 GiB of inode tables into the file.
    let path = dir.path().join("1t.img");
    {
        let m = Mounted::new(&path, &dir.path().join("mnt"), "data=journal,noinit_itable");
        let mut f = File::create(m.0.join("through-the-journal")).unwrap();
        for block in 0..(64u64 << 8) {
            std::io::Write::write_all(&mut f, &pattern(block)).unwrap();
        }
        f.sync_all().unwrap();
    }
    assert_fsck_clean(&path);
}

#[test]
fn sizes_the_layout_cannot_hold_are_refused() {
    let dir = TempDir::new("ext4-bounds");
    let small = image(dir.path(), "small.img", ext4::geometry::MIN_BYTES - 4096);
    assert!(matches!(
        ext4::format_path(&small, LABEL),
        Err(Ext4Error::TooSmall { .. })
    ));
    // Nothing was written. (Past 64 TiB, `TooLarge`, is the geometry's
    // unit test: the host's file systems hold no sparse file that large.)
    let m = fs::metadata(&small).unwrap();
    assert_eq!(std::os::unix::fs::MetadataExt::blocks(&m), 0);
    assert!(matches!(
        ext4::geometry::Geometry::for_device(ext4::geometry::MAX_BYTES + 1),
        Err(Ext4Error::TooLarge { .. })
    ));
}

#[test]
fn debugfs_reads_the_root_lost_found_and_journal() {
    let dir = TempDir::new("ext4-debugfs");
    let path = image(dir.path(), "d.img", 256 << 20);
    ext4::format_path(&path, LABEL).unwrap();
    let run = |request: &str| {
        let out = Command::new(installed_program("debugfs", "e2fsprogs"))
            .args(["-R", request])
            .arg(&path)
            .output()
            .unwrap();
        assert!(out.status.success());
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let ls = run("ls -l /");
    assert!(ls.contains("lost+found"), "{ls}");
    let stat = run("stat <8>");
    assert!(stat.contains("Size: 16777216"), "{stat}");
    let lf = run("stat /lost+found");
    assert!(lf.contains("Size: 16384"), "{lf}");
}

/// Runs a program; panics with its output if it fails.
fn run(program: &str, args: &[&str]) {
    let out = Command::new(program).args(args).output().unwrap();
    assert!(
        out.status.success(),
        "{program} {args:?}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Unmounts on drop, so a failed assertion leaves no mount behind.
struct Mounted(PathBuf);

impl Mounted {
    fn new(image: &Path, at: &Path, options: &str) -> Mounted {
        fs::create_dir_all(at).unwrap();
        run(
            "mount",
            &[
                "-t",
                "ext4",
                "-o",
                &format!("loop,{options}"),
                image.to_str().unwrap(),
                at.to_str().unwrap(),
            ],
        );
        Mounted(at.to_path_buf())
    }
}

impl Drop for Mounted {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.0).status();
    }
}

/// A recognisable pattern for the large file: every 4 KiB block differs.
fn pattern(block: u64) -> Vec<u8> {
    (0..4096u64)
        .map(|i| (block.wrapping_mul(131) ^ i.wrapping_mul(7)) as u8)
        .collect()
}

/// The host kernel mounts what we made (as root, on a loop device: the
/// test machines run the suite as root), writes many files and one that
/// spans several groups through the journal (`data=journal`), and
/// `e2fsck -fn` is clean after the kernel's writes; a second mount reads
/// everything back.
#[test]
fn the_kernel_mounts_it_writes_through_the_journal_and_e2fsck_stays_clean() {
    use std::io::{Read, Write};
    let dir = TempDir::new("ext4-mount");
    let path = image(dir.path(), "m.img", 1 << 30);
    ext4::format_path(&path, LABEL).unwrap();
    let at = dir.path().join("mnt");
    const FILES: usize = 2000;
    const LARGE_BLOCKS: u64 = 160 << 8; // 160 MiB: two groups, five journals
    {
        let m = Mounted::new(&path, &at, "data=journal");
        let many = m.0.join("many");
        fs::create_dir(&many).unwrap();
        for n in 0..FILES {
            fs::write(
                many.join(format!("file-{n}")),
                format!("content {n}\n").repeat(n % 50 + 1),
            )
            .unwrap();
        }
        let mut large = File::create(m.0.join("large")).unwrap();
        for block in 0..LARGE_BLOCKS {
            large.write_all(&pattern(block)).unwrap();
        }
        large.sync_all().unwrap();
    }
    assert_fsck_clean(&path);
    {
        let m = Mounted::new(&path, &at, "ro");
        let many = m.0.join("many");
        for n in 0..FILES {
            assert_eq!(
                fs::read_to_string(many.join(format!("file-{n}"))).unwrap(),
                format!("content {n}\n").repeat(n % 50 + 1)
            );
        }
        let mut large = File::open(m.0.join("large")).unwrap();
        let mut buf = vec![0u8; 4096];
        for block in 0..LARGE_BLOCKS {
            large.read_exact(&mut buf).unwrap();
            assert!(buf == pattern(block), "block {block} of the large file");
        }
        assert_eq!(large.read(&mut buf).unwrap(), 0);
    }
    assert_fsck_clean(&path);
}
