use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use confboot_testkit::TempDir;

use super::*;

/// `len` bytes of a fixed pattern (the oracle vectors below were made by
/// veritysetup 2.6.1 from the same bytes).
fn pattern(len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| u8::try_from((i * 7 + i / 4096) % 251).unwrap())
        .collect()
}

fn write(dir: &TempDir, name: &str, bytes: &[u8]) -> PathBuf {
    let p = dir.path().join(name);
    std::fs::write(&p, bytes).unwrap();
    p
}

fn options(salt: &[u8]) -> FormatOptions {
    FormatOptions {
        salt: salt.to_vec(),
        uuid: Some([1; 16]),
        ..FormatOptions::default()
    }
}

fn flip(path: &Path, offset: u64) {
    let f = std::fs::OpenOptions::new()
        .write(true)
        .read(true)
        .open(path)
        .unwrap();
    let mut b = [0u8; 1];
    f.read_exact_at(&mut b, offset).unwrap();
    f.write_all_at(&[b[0] ^ 0x01], offset).unwrap();
}

#[test]
fn levels_are_stored_top_first() {
    // 300 blocks, 16 digests per 512-byte hash block: 19, 2, 1 blocks.
    let levels = tree_levels(300, 512, 5).unwrap();
    assert_eq!(
        levels,
        vec![
            Level {
                start: 8,
                blocks: 19
            },
            Level {
                start: 6,
                blocks: 2
            },
            Level {
                start: 5,
                blocks: 1
            },
        ]
    );
    assert_eq!(tree_levels(1, 4096, 0).unwrap(), vec![]);
    assert_eq!(
        tree_levels(128, 4096, 1).unwrap(),
        vec![Level {
            start: 1,
            blocks: 1
        }]
    );
    assert_eq!(tree_levels(129, 4096, 1).unwrap().len(), 2);
    assert!(tree_levels(0, 4096, 0).is_err());
    assert!(tree_levels(u64::MAX, 512, u64::MAX - 1).is_err());
}

#[test]
fn the_tree_starts_where_veritysetup_puts_it() {
    assert_eq!(hash_start_block(0, 4096, true), 1);
    assert_eq!(hash_start_block(4096, 4096, true), 2);
    assert_eq!(hash_start_block(0, 512, true), 1);
    assert_eq!(hash_start_block(3584, 4096, true), 1);
    assert_eq!(hash_start_block(0, 4096, false), 0);
    assert_eq!(hash_start_block(40960, 4096, false), 10);
}

#[test]
fn the_root_hash_is_veritysetups() {
    let dir = TempDir::new("verity-vector");
    let data = write(&dir, "data", &pattern(10 * 4096));
    let hash = dir.path().join("hash");
    let r = format(&data, &hash, &options(&[0x00, 0x11, 0x22, 0x33])).unwrap();
    assert_eq!(
        confboot_util::hex::encode(&r.root_hash),
        "5cc8999f9db736c358351c87ee8f553f7928188bdf0fc043e6bfbd60cfcd1e51"
    );
    assert_eq!((r.hash_blocks, r.hash_device_size), (1, 8192));
    assert_eq!(std::fs::metadata(&hash).unwrap().len(), 8192);

    let data = write(&dir, "data2", &pattern(300 * 512));
    let hash = dir.path().join("hash2");
    let opts = FormatOptions {
        data_block_size: 512,
        hash_block_size: 512,
        superblock: false,
        ..options(&[])
    };
    let r = format(&data, &hash, &opts).unwrap();
    assert_eq!(
        confboot_util::hex::encode(&r.root_hash),
        "32265d4ac55ac76e906d0f4db02a5528beba959c3377f90e275e0bd46f1fe1c1"
    );
    assert_eq!(r.hash_blocks, 22);
    assert_eq!(r.uuid, None);
}

#[test]
fn the_superblock_round_trips_and_refuses_what_it_does_not_read() {
    let sb = Superblock {
        uuid: [7; 16],
        data_block_size: 4096,
        hash_block_size: 512,
        data_blocks: 12345,
        salt: vec![0xab; 256],
    };
    let bytes = sb.encode();
    assert_eq!(Superblock::parse(&bytes).unwrap(), sb);
    assert!(Superblock::parse(&bytes[..511]).is_err());
    let broken = |at: usize, value: &[u8]| {
        let mut b = bytes;
        b[at..at + value.len()].copy_from_slice(value);
        Superblock::parse(&b).unwrap_err()
    };
    for (at, value) in [
        (0, &b"Verity"[..]),
        (8, &2u32.to_le_bytes()[..]),
        (12, &0u32.to_le_bytes()[..]),
        (32, &b"sha1\0\0"[..]),
        (38, &b"x"[..]),
        (64, &1000u32.to_le_bytes()[..]),
        (64, &256u32.to_le_bytes()[..]),
        (68, &131072u32.to_le_bytes()[..]),
        (72, &0u64.to_le_bytes()[..]),
        (80, &257u16.to_le_bytes()[..]),
    ] {
        assert!(
            matches!(broken(at, value), VerityError::Superblock(_)),
            "{at}"
        );
    }
}

fn cmdline_params() -> VerityParams {
    VerityParams {
        data_device: "/dev/vdb".into(),
        hash_device: "/dev/vdb".into(),
        data_block_size: 4096,
        hash_block_size: 4096,
        data_blocks: 262144,
        hash_offset: 1 << 30,
        superblock: true,
        hash_start_block: (1 << 18) + 1,
        root_hash: [0xab; 32],
        salt: vec![0x12, 0x34],
    }
}

#[test]
fn command_line_words_round_trip() {
    let p = cmdline_params();
    let words = p.cmdline_words();
    assert_eq!(
        words,
        format!(
            "confboot.root=/dev/vdb confboot.root.hash={} confboot.root.salt=1234 \
             confboot.root.blocks=262144 confboot.root.datablock=4096 \
             confboot.root.hashblock=4096 confboot.root.hashoffset=1073741824",
            "ab".repeat(32)
        )
    );
    let line = format!("BOOT_IMAGE=/vmlinuz console=ttyS0 {words} confboot.rootwait quiet");
    assert_eq!(VerityParams::from_cmdline(&line).unwrap(), Some(p.clone()));

    let other = VerityParams {
        hash_device: "/dev/vdc".into(),
        hash_offset: 0,
        superblock: false,
        hash_start_block: 0,
        salt: vec![],
        ..p
    };
    let words = other.cmdline_words();
    assert!(words.contains("confboot.root.hashdev=/dev/vdc"), "{words}");
    assert!(words.contains("confboot.root.salt=-"), "{words}");
    assert!(words.ends_with("confboot.root.superblock=0"), "{words}");
    assert_eq!(VerityParams::from_cmdline(&words).unwrap(), Some(other));
}

#[test]
fn no_root_words_is_none() {
    assert_eq!(VerityParams::from_cmdline("").unwrap(), None);
    assert_eq!(
        VerityParams::from_cmdline("root=/dev/vda confboot.rootwait confboot.tpm=x").unwrap(),
        None
    );
}

#[test]
fn command_lines_are_parsed_strictly() {
    let good = cmdline_params().cmdline_words();
    let refused = |line: String| match VerityParams::from_cmdline(&line) {
        Err(VerityError::Cmdline(m)) => m,
        other => panic!("{line}: {other:?}"),
    };
    // A key twice, even with the same value: an error, not "the last wins".
    assert!(refused(format!("{good} confboot.root.hash={}", "cd".repeat(32))).contains("twice"));
    assert!(refused(format!("{good} confboot.root=/dev/vdb")).contains("twice"));
    assert!(refused(format!("{good} confboot.root.fec=/dev/vdd")).contains("unknown"));
    assert!(refused(format!("{good} confboot.root.hash")).contains("without a value"));
    assert!(refused(format!("{good} {}", " ".repeat(MAX_CMDLINE_LEN))).contains("bytes"));
    for key in [
        "confboot.root=",
        "confboot.root.hash=",
        "confboot.root.salt=",
        "confboot.root.blocks=",
        "confboot.root.datablock=",
        "confboot.root.hashblock=",
        "confboot.root.hashoffset=",
    ] {
        let without: Vec<&str> = good.split(' ').filter(|w| !w.starts_with(key)).collect();
        assert!(refused(without.join(" ")).contains("missing"), "{key}");
    }
    for (from, to) in [
        ("confboot.root=/dev/vdb", "confboot.root=vdb"),
        ("confboot.root=/dev/vdb", "confboot.root=\"/dev/vdb\""),
        ("confboot.root.hash=abab", "confboot.root.hash=ab"),
        ("confboot.root.salt=1234", "confboot.root.salt=123"),
        ("confboot.root.salt=1234", "confboot.root.salt="),
        (
            "confboot.root.blocks=262144",
            "confboot.root.blocks=0262144",
        ),
        (
            "confboot.root.blocks=262144",
            "confboot.root.blocks=+262144",
        ),
        ("confboot.root.blocks=262144", "confboot.root.blocks=0"),
        (
            "confboot.root.blocks=262144",
            "confboot.root.blocks=99999999999999999999",
        ),
        (
            "confboot.root.datablock=4096",
            "confboot.root.datablock=4000",
        ),
        (
            "confboot.root.hashblock=4096",
            "confboot.root.hashblock=131072",
        ),
        (
            "confboot.root.hashblock=4096",
            "confboot.root.hashblock=99999999999",
        ),
        (
            "confboot.root.hashoffset=1073741824",
            "confboot.root.hashoffset=1000",
        ),
        // Data and tree overlap on one device.
        (
            "confboot.root.hashoffset=1073741824",
            "confboot.root.hashoffset=4096",
        ),
    ] {
        assert!(good.contains(from), "{from}");
        let line = good.replacen(from, to, 1);
        let m = refused(line);
        assert!(!m.is_empty());
    }
    assert!(refused(format!("{good} confboot.root.superblock=yes")).contains("0 or 1"));
    // A tree without superblock must start on a hash block.
    let p = VerityParams {
        hash_device: "/dev/vdc".into(),
        hash_offset: 512,
        superblock: false,
        hash_start_block: 0,
        ..cmdline_params()
    };
    assert!(p.validate().is_err());
    assert!(refused(p.cmdline_words()).contains("multiple of the hash block size"));
}

/// Builds a three-level tree (512-byte hash blocks) with a superblock.
fn three_levels(dir: &TempDir) -> FormatResult {
    let data = write(dir, "data", &pattern(300 * 512));
    let hash = dir.path().join("hash");
    let opts = FormatOptions {
        data_block_size: 512,
        hash_block_size: 512,
        hash_offset: 1024,
        ..options(&[9; 32])
    };
    format(&data, &hash, &opts).unwrap()
}

#[test]
fn the_top_level_check_passes_a_good_tree_and_names_a_bad_top() {
    let dir = TempDir::new("verity-top");
    let r = three_levels(&dir);
    let p = &r.params;
    // Superblock at 1024, tree from block 3: top 3, level 4-5, lowest 6-24.
    assert_eq!(p.hash_start_block, 3);
    check_top_level(&p.hash_device, p).unwrap();

    // A flipped byte in a lower level: the kernel's to find, not this check's.
    flip(&p.hash_device, 10 * 512 + 7);
    check_top_level(&p.hash_device, p).unwrap();
    flip(&p.hash_device, 4 * 512);
    check_top_level(&p.hash_device, p).unwrap();

    // In the top block (also in its zero padding): refused, naming the block.
    for at in [3 * 512, 3 * 512 + 511] {
        flip(&p.hash_device, at);
        let e = check_top_level(&p.hash_device, p).unwrap_err();
        assert_eq!(
            e,
            VerityError::RootHashMismatch {
                device: p.hash_device.display().to_string(),
                what: "hash block",
                block: 3,
                offset: 3 * 512,
            }
        );
        assert!(e.to_string().contains("hash block 3 at byte 1536"), "{e}");
        flip(&p.hash_device, at);
    }
    check_top_level(&p.hash_device, p).unwrap();

    // Another root hash, salt or geometry: refused.
    let mut other = p.clone();
    other.root_hash[31] ^= 1;
    assert!(matches!(
        check_top_level(&p.hash_device, &other),
        Err(VerityError::RootHashMismatch { .. })
    ));
}

#[test]
fn a_superblock_that_disagrees_is_refused() {
    let dir = TempDir::new("verity-sb");
    let r = three_levels(&dir);
    let p = &r.params;
    // The superblock's data blocks (byte 72 of it) say otherwise.
    flip(&p.hash_device, 1024 + 72);
    let e = check_top_level(&p.hash_device, p).unwrap_err();
    assert!(
        matches!(
            &e,
            VerityError::SuperblockMismatch { what, .. }
                if matches!(what.0.as_slice(), [superblock::Disagreement::DataBlocks { .. }])
        ),
        "{e}"
    );
    flip(&p.hash_device, 1024 + 72);
    // Its salt.
    flip(&p.hash_device, 1024 + 88);
    assert!(matches!(
        check_top_level(&p.hash_device, p),
        Err(VerityError::SuperblockMismatch { .. })
    ));
    flip(&p.hash_device, 1024 + 88);
    // Gone (the parameters say there is one).
    flip(&p.hash_device, 1024);
    assert!(matches!(
        check_top_level(&p.hash_device, p),
        Err(VerityError::Superblock(_))
    ));
    flip(&p.hash_device, 1024);
    check_top_level(&p.hash_device, p).unwrap();
}

#[test]
fn one_data_block_is_its_own_top_level() {
    let dir = TempDir::new("verity-one");
    let data = write(&dir, "data", &pattern(4096 + 100));
    let hash = dir.path().join("hash");
    let r = format(&data, &hash, &options(b"s")).unwrap();
    assert_eq!(r.hash_blocks, 0);
    // As veritysetup: the hash file reaches the block after the superblock.
    assert_eq!(r.hash_device_size, 4096);
    assert_eq!(std::fs::metadata(&hash).unwrap().len(), 4096);
    assert_eq!(r.root_hash, block_digest(b"s", &pattern(4096)));
    check_top_level(&hash, &r.params).unwrap();
    flip(&data, 4095);
    let e = check_top_level(&hash, &r.params).unwrap_err();
    assert!(matches!(
        e,
        VerityError::RootHashMismatch {
            what: "data block",
            block: 0,
            ..
        }
    ));
}

#[test]
fn data_and_tree_share_a_file() {
    let dir = TempDir::new("verity-same");
    let image = write(&dir, "image", &pattern(20 * 4096));
    let opts = FormatOptions {
        hash_offset: 20 * 4096,
        ..options(b"salt")
    };
    let r = format(&image, &image, &opts).unwrap();
    assert_eq!(r.params.hash_device, image);
    assert_eq!(r.hash_device_size, 22 * 4096);
    assert_eq!(std::fs::metadata(&image).unwrap().len(), 22 * 4096);
    check_top_level(&image, &r.params).unwrap();
    // The data is untouched.
    assert_eq!(
        std::fs::read(&image).unwrap()[..20 * 4096],
        pattern(20 * 4096)[..]
    );

    // A hash area inside the data: refused before anything is written.
    let opts = FormatOptions {
        hash_offset: 19 * 4096,
        ..opts
    };
    let before = std::fs::read(&image).unwrap();
    let e = format(&image, &image, &opts).unwrap_err();
    assert!(e.to_string().contains("overlap"), "{e}");
    assert_eq!(std::fs::read(&image).unwrap(), before);
}

#[test]
fn bad_options_are_refused() {
    let dir = TempDir::new("verity-bad");
    let data = write(&dir, "data", &pattern(4 * 4096));
    let empty = write(&dir, "empty", &[]);
    let hash = dir.path().join("hash");
    let refused = |data: &Path, opts: FormatOptions| format(data, &hash, &opts).unwrap_err();
    assert!(
        refused(&empty, options(b""))
            .to_string()
            .contains("no whole data block")
    );
    for opts in [
        FormatOptions {
            data_block_size: 1000,
            ..options(b"")
        },
        FormatOptions {
            data_block_size: 256,
            ..options(b"")
        },
        FormatOptions {
            hash_block_size: 131072,
            ..options(b"")
        },
        FormatOptions {
            salt: vec![0; 257],
            ..options(b"")
        },
        FormatOptions {
            hash_offset: 100,
            ..options(b"")
        },
        FormatOptions {
            hash_offset: 512,
            superblock: false,
            ..options(b"")
        },
        FormatOptions {
            data_blocks: Some(5),
            ..options(b"")
        },
        FormatOptions {
            data_blocks: Some(0),
            ..options(b"")
        },
    ] {
        assert!(
            matches!(refused(&data, opts.clone()), VerityError::Invalid(_)),
            "{opts:?}"
        );
    }
    // Fewer blocks than the file holds: fine.
    let r = format(
        &data,
        &hash,
        &FormatOptions {
            data_blocks: Some(3),
            ..options(b"")
        },
    )
    .unwrap();
    assert_eq!(r.params.data_blocks, 3);
}

#[test]
fn default_options_are_veritysetups() {
    let a = FormatOptions::default();
    assert_eq!(a.salt.len(), 32);
    assert_ne!(a.salt, FormatOptions::default().salt);
    assert_eq!(
        (a.data_block_size, a.hash_block_size, a.hash_offset),
        (4096, 4096, 0)
    );
    assert!(a.superblock && a.data_blocks.is_none() && a.uuid.is_none());
}
