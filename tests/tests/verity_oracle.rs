//! `confboot verity format` against the real `veritysetup format`
//! (cryptsetup): for several geometries, the same salt and UUID give the
//! same report, the same root hash and byte-identical hash files (whole
//! images when the tree shares the data's file); `veritysetup verify`
//! accepts our trees (veritysetup reading them in user space: the build
//! machine cannot map); and the node's top-level check
//! (`confboot_disk::verity::check_top_level`), fed the parameters our
//! kernel command line carries, accepts veritysetup's trees and refuses
//! them after one flipped byte in their top level (a flip lower down is
//! the kernel's to find, and veritysetup's verify finds it).

use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use confboot_disk::verity::{VerityError, VerityParams, check_top_level};
use confboot_tests::cluster::workspace_binary;
use confboot_tests::{TempDir, installed_program};

const SALT: &str = "5a17ed0c0ffee0ddba11";
const UUID: &str = "0a1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d";

fn veritysetup() -> PathBuf {
    installed_program("veritysetup", "cryptsetup-bin")
}

/// `len` bytes that differ from block to block (xorshift from `seed`).
fn image(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

fn run(program: &Path, dir: &Path, args: &[String]) -> Output {
    let out = Command::new(program)
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap_or_else(|e| panic!("{}: {e}", program.display()));
    assert!(
        out.status.success(),
        "{} {args:?} in {}: {}\n{}",
        program.display(),
        dir.display(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

fn strings(args: &[&str]) -> Vec<String> {
    args.iter().map(|s| s.to_string()).collect()
}

fn flip(path: &Path, offset: u64) {
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .unwrap();
    let mut b = [0u8; 1];
    f.read_exact_at(&mut b, offset).unwrap();
    f.write_all_at(&[b[0] ^ 0x80], offset).unwrap();
}

/// The value of the report line starting with `label`.
fn field<'a>(report: &'a str, label: &str) -> &'a str {
    report
        .lines()
        .find_map(|l| l.strip_prefix(label))
        .unwrap_or_else(|| panic!("no {label:?} in\n{report}"))
        .trim()
}

/// One geometry: the data's size, the format options (without salt and
/// UUID, which every case sets), whether the tree goes into the data's
/// file.
struct Case {
    name: &'static str,
    data_len: usize,
    options: &'static [&'static str],
    same_file: bool,
}

const CASES: &[Case] = &[
    Case {
        name: "4096/4096, ragged, superblock",
        data_len: 1000 * 4096,
        options: &[],
        same_file: false,
    },
    Case {
        name: "512 data/4096 hash",
        data_len: 3001 * 512,
        options: &["--data-block-size", "512"],
        same_file: false,
    },
    Case {
        name: "4096 data/512 hash, three levels",
        data_len: 700 * 4096,
        options: &["--hash-block-size", "512"],
        same_file: false,
    },
    Case {
        name: "512/512, four levels, no superblock, no salt",
        data_len: 5000 * 512 + 100,
        options: &[
            "--data-block-size",
            "512",
            "--hash-block-size",
            "512",
            "--no-superblock",
            "--salt",
            "-",
        ],
        same_file: false,
    },
    Case {
        name: "hash offset in a separate file",
        data_len: 77 * 4096,
        options: &["--hash-offset", "8192"],
        same_file: false,
    },
    Case {
        name: "fewer data blocks than the file holds",
        data_len: 300 * 4096,
        options: &["--data-blocks", "129"],
        same_file: false,
    },
    Case {
        name: "one file, superblock after the data",
        data_len: 515 * 4096,
        options: &["--hash-offset", "2109440"],
        same_file: true,
    },
    Case {
        name: "one file, no superblock, 1024-byte blocks",
        data_len: 999 * 1024,
        options: &[
            "--hash-offset",
            "1024000",
            "--data-block-size",
            "1024",
            "--hash-block-size",
            "1024",
            "--no-superblock",
        ],
        same_file: true,
    },
    Case {
        name: "one data block",
        data_len: 4096,
        options: &[],
        same_file: false,
    },
];

/// The format arguments of `case` for `confboot verity format` and
/// `veritysetup format` alike.
fn format_args(case: &Case) -> Vec<String> {
    let hash = if case.same_file { "data" } else { "hash" };
    let mut args = strings(&["format", "data", hash]);
    if !case.options.contains(&"--salt") {
        args.extend(strings(&["--salt", SALT]));
    }
    args.extend(strings(&["--uuid", UUID]));
    args.extend(strings(case.options));
    args
}

/// Runs one case in `dir/ours` and `dir/theirs`; returns the parameters
/// our kernel command line carries, pointed at `theirs`'s files, and the
/// tree's size in hash blocks.
fn both_format(case: &Case, dir: &Path) -> (VerityParams, u64) {
    let confboot = workspace_binary("confboot");
    let data = image(case.data_len, case.data_len as u64);
    let (ours, theirs) = (dir.join("ours"), dir.join("theirs"));
    for d in [&ours, &theirs] {
        std::fs::create_dir_all(d).unwrap();
        std::fs::write(d.join("data"), &data).unwrap();
    }
    let mut our_args = vec!["verity".to_string()];
    our_args.extend(format_args(case));
    our_args.extend(strings(&["--root-device", "/dev/vdb"]));
    if !case.same_file {
        our_args.extend(strings(&["--root-hash-device", "/dev/vdc"]));
    }
    let our_out = run(&confboot, &ours, &our_args);
    let their_out = run(&veritysetup(), &theirs, &format_args(case));
    let our_report = String::from_utf8(our_out.stdout).unwrap();
    let their_report = String::from_utf8(their_out.stdout).unwrap();

    // The same report, line for line, then our kernel command line.
    let (report, cmdline) = our_report
        .rsplit_once("Kernel command line: ")
        .unwrap_or_else(|| panic!("{}: no kernel command line in\n{our_report}", case.name));
    assert_eq!(report, their_report, "{}", case.name);
    assert_eq!(
        field(&our_report, "Root hash:"),
        field(&their_report, "Root hash:")
    );

    // The same bytes.
    let files: &[&str] = if case.same_file {
        &["data"]
    } else {
        &["hash", "data"]
    };
    for f in files {
        let (a, b) = (
            std::fs::read(ours.join(f)).unwrap(),
            std::fs::read(theirs.join(f)).unwrap(),
        );
        assert!(
            a == b,
            "{}: {f} differs ({} vs {} bytes)",
            case.name,
            a.len(),
            b.len()
        );
    }

    // The command line's words read back, pointed at the files.
    let params = VerityParams::from_cmdline(cmdline.trim())
        .unwrap()
        .expect("confboot.root words");
    assert_eq!(
        field(&our_report, "Root hash:"),
        confboot_util::hex::encode(&params.root_hash)
    );
    let hash = if case.same_file { "data" } else { "hash" };
    let tree_blocks = field(&our_report, "Hash blocks:").parse().unwrap();
    let params = VerityParams {
        data_device: theirs.join("data"),
        hash_device: theirs.join(hash),
        ..params
    };
    (params, tree_blocks)
}

/// `veritysetup verify` on `params`' files.
fn veritysetup_verify(params: &VerityParams) -> Output {
    let mut args = vec![
        "verify".to_string(),
        params.data_device.display().to_string(),
        params.hash_device.display().to_string(),
        confboot_util::hex::encode(&params.root_hash),
        format!("--hash-offset={}", params.hash_offset),
    ];
    if !params.superblock {
        args.extend([
            "--no-superblock".to_string(),
            format!("--data-block-size={}", params.data_block_size),
            format!("--hash-block-size={}", params.hash_block_size),
            format!("--data-blocks={}", params.data_blocks),
            format!(
                "--salt={}",
                if params.salt.is_empty() {
                    "-".to_string()
                } else {
                    confboot_util::hex::encode(&params.salt)
                }
            ),
        ]);
    }
    Command::new(veritysetup()).args(&args).output().unwrap()
}

#[test]
fn ours_and_veritysetups_trees_are_the_same() {
    for case in CASES {
        let dir = TempDir::new("verity-oracle");
        let (theirs, _) = both_format(case, dir.path());
        // veritysetup reads our tree: the same bytes, but through our files.
        let ours = VerityParams {
            data_device: dir.path().join("ours").join("data"),
            hash_device: dir
                .path()
                .join("ours")
                .join(if case.same_file { "data" } else { "hash" }),
            ..theirs.clone()
        };
        let out = veritysetup_verify(&ours);
        assert!(
            out.status.success(),
            "{}: veritysetup verify refuses our tree: {}",
            case.name,
            String::from_utf8_lossy(&out.stderr)
        );
        // The node's check reads veritysetup's.
        check_top_level(&theirs.hash_device, &theirs)
            .unwrap_or_else(|e| panic!("{}: {e}", case.name));
    }
}

#[test]
fn the_top_level_check_refuses_a_flipped_top_and_leaves_lower_levels_to_the_kernel() {
    for case in CASES {
        let dir = TempDir::new("verity-flip");
        let (p, tree_blocks) = both_format(case, dir.path());
        let hbs = u64::from(p.hash_block_size);
        let top = p.hash_start_block * hbs;
        if tree_blocks == 0 {
            // One data block: it is its own top level.
            flip(&p.data_device, 17);
            let e = check_top_level(&p.hash_device, &p).unwrap_err();
            assert!(
                matches!(
                    e,
                    VerityError::RootHashMismatch {
                        what: "data block",
                        ..
                    }
                ),
                "{e}"
            );
            continue;
        }
        if tree_blocks > 1 {
            // A byte of the level below the top: not this check's to see,
            // but veritysetup's verify (as the kernel's reads) sees it.
            let lower = top + hbs + 5;
            flip(&p.hash_device, lower);
            check_top_level(&p.hash_device, &p)
                .unwrap_or_else(|e| panic!("{}: lower level flip: {e}", case.name));
            assert!(
                !veritysetup_verify(&p).status.success(),
                "{}: veritysetup verify accepts a flipped lower level",
                case.name
            );
            flip(&p.hash_device, lower);
        }
        flip(&p.hash_device, top + 3);
        let e = check_top_level(&p.hash_device, &p).unwrap_err();
        assert_eq!(
            e,
            VerityError::RootHashMismatch {
                device: p.hash_device.display().to_string(),
                what: "hash block",
                block: p.hash_start_block,
                offset: top,
            },
            "{}",
            case.name
        );
        assert!(!veritysetup_verify(&p).status.success(), "{}", case.name);
    }
}

#[test]
fn bad_input_is_refused_like_veritysetup_refuses_it() {
    let confboot = workspace_binary("confboot");
    let dir = TempDir::new("verity-bad");
    std::fs::write(dir.path().join("data"), image(10 * 4096, 3)).unwrap();
    std::fs::write(dir.path().join("empty"), b"").unwrap();
    let before = std::fs::read(dir.path().join("data")).unwrap();
    for (args, message) in [
        (&["empty", "hash"][..], "no whole data block"),
        (&["data", "data"][..], "overlap"),
        (&["data", "data", "--hash-offset", "36864"][..], "overlap"),
        (
            &["data", "hash", "--hash-offset", "100"][..],
            "multiple of 512",
        ),
        (&["data", "hash", "--salt", "0g"][..], "not hex"),
        (
            &["data", "hash", "--data-block-size", "3000"][..],
            "power of two",
        ),
        (
            &["data", "hash", "--data-blocks", "11"][..],
            "holds 10 data blocks",
        ),
    ] {
        let mut ours = strings(&["verity", "format"]);
        ours.extend(strings(args));
        let out = Command::new(&confboot)
            .args(&ours)
            .current_dir(dir.path())
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains(message), "{args:?}: {stderr}");
        let mut theirs = strings(&["format"]);
        theirs.extend(strings(args));
        let out = Command::new(veritysetup())
            .args(&theirs)
            .current_dir(dir.path())
            .output()
            .unwrap();
        assert!(!out.status.success(), "veritysetup {args:?} succeeds");
    }
    // Nothing was written over the data.
    assert_eq!(std::fs::read(dir.path().join("data")).unwrap(), before);
}

/// The hash-tree build's speed against veritysetup's, on 256 MiB: prints
/// both times and the ratio. Run on a release build:
/// `cargo build --release -p confboot-cli && cargo test --release -p confboot-tests --test verity_oracle -- --ignored --nocapture`.
#[test]
#[ignore = "a benchmark: 256 MiB written and read several times"]
fn format_speed_against_veritysetup() {
    let confboot = workspace_binary("confboot");
    let dir = TempDir::new("verity-speed");
    let data = dir.path().join("data");
    {
        use std::io::Write;
        let mut f = std::io::BufWriter::new(std::fs::File::create(&data).unwrap());
        for i in 0..256u64 {
            f.write_all(&image(1 << 20, i + 1)).unwrap();
        }
    }
    let time = |program: &Path, args: &[&str]| {
        let _ = std::fs::remove_file(dir.path().join("hash"));
        let started = std::time::Instant::now();
        run(program, dir.path(), &strings(args));
        started.elapsed()
    };
    let format = ["format", "data", "hash", "--salt", SALT];
    let ours: Vec<&str> = ["verity"].iter().chain(&format).copied().collect();
    // Warm the page cache, then take the best of three each.
    time(&veritysetup(), &format);
    let best = |program: &Path, args: &[&str]| (0..3).map(|_| time(program, args)).min().unwrap();
    let theirs = best(&veritysetup(), &format);
    let mine = best(&confboot, &ours);
    println!(
        "verity format, 256 MiB, 4096/4096: confboot {:.3} s, veritysetup {:.3} s, ratio {:.2}",
        mine.as_secs_f64(),
        theirs.as_secs_f64(),
        mine.as_secs_f64() / theirs.as_secs_f64()
    );
}
