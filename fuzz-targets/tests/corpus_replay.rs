//! The fuzz corpora in the normal test suite: every file of
//! `fuzz/corpus/<target>/` and `fuzz/regressions/<target>/` goes through
//! its target on stable Rust, so a fixed crash stays fixed and CI needs no
//! nightly toolchain. A target without a corpus, a corpus without a target
//! and a `fuzz_targets/*.rs` that does not call its target all fail.

use std::collections::BTreeSet;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::Path;

use confboot_fuzz_targets::{TARGETS, Target, seeds::seeds};

mod common;
use common::{files, fuzz_dir};

/// The names of the subdirectories (or, with `ext`, of the files with that
/// extension, without it) of `dir`.
fn names(dir: &Path, ext: Option<&str>) -> BTreeSet<String> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return BTreeSet::new();
    };
    entries
        .map(|e| e.expect("directory entry").path())
        .filter(|p| match ext {
            None => p.is_dir(),
            Some(x) => p.extension().is_some_and(|e| e == x),
        })
        .map(|p| {
            p.file_stem()
                .expect("a name")
                .to_string_lossy()
                .into_owned()
        })
        .collect()
}

/// The `[[bin]]` tables of a cargo-fuzz manifest, name to path. A table
/// with a key twice (two fused tables, which cargo refuses to read), one
/// without a name or a path, or a name used twice is an error.
fn manifest_bins(manifest: &str) -> Result<std::collections::BTreeMap<String, String>, String> {
    let mut bins = std::collections::BTreeMap::new();
    let mut table: Option<(Option<String>, Option<String>)> = None;
    let mut finish = |table: Option<(Option<String>, Option<String>)>| -> Result<(), String> {
        let Some((name, path)) = table else {
            return Ok(());
        };
        let name = name.ok_or("a [[bin]] without a name")?;
        let path = path.ok_or_else(|| format!("[[bin]] {name} without a path"))?;
        match bins.insert(name.clone(), path) {
            Some(_) => Err(format!("[[bin]] {name} twice")),
            None => Ok(()),
        }
    };
    for line in manifest.lines().map(str::trim) {
        if line.starts_with('[') {
            finish(table.take())?;
            if line == "[[bin]]" {
                table = Some((None, None));
            }
            continue;
        }
        let Some((fields, (key, value))) = table
            .as_mut()
            .zip(line.split_once('=').map(|(k, v)| (k.trim(), v.trim())))
        else {
            continue;
        };
        let slot = match key {
            "name" => &mut fields.0,
            "path" => &mut fields.1,
            _ => continue,
        };
        let value = value.trim_matches('"').to_string();
        if let Some(before) = slot.replace(value) {
            return Err(format!("a [[bin]] sets {key} twice (first {before:?})"));
        }
    }
    finish(table.take())?;
    Ok(bins)
}

/// Runs `target` on `data`; the panic message if it panics.
fn run(target: Target, data: &[u8]) -> Result<(), String> {
    catch_unwind(AssertUnwindSafe(|| target(data))).map_err(|p| {
        p.downcast_ref::<String>()
            .cloned()
            .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_else(|| "a panic".into())
    })
}

#[test]
fn every_corpus_and_regression_file_passes_its_target() {
    // One thread per target: the targets run in parallel.
    let results: Vec<(String, usize, Vec<String>)> = std::thread::scope(|s| {
        let handles: Vec<_> = TARGETS
            .iter()
            .map(|&(name, target)| {
                s.spawn(move || {
                    let corpus = files(&fuzz_dir().join("corpus").join(name));
                    let regressions = files(&fuzz_dir().join("regressions").join(name));
                    let mut failures = Vec::new();
                    if corpus.is_empty() {
                        failures.push(format!("fuzz/corpus/{name}/ is missing or empty"));
                    }
                    let count = corpus.len() + regressions.len();
                    for path in corpus.iter().chain(&regressions) {
                        let data = std::fs::read(path).expect("corpus file");
                        if let Err(why) = run(target, &data) {
                            failures.push(format!("{}: {why}", path.display()));
                        }
                    }
                    (name.to_string(), count, failures)
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("replay thread"))
            .collect()
    });
    let failures: Vec<String> = results.iter().flat_map(|(_, _, f)| f.clone()).collect();
    for (name, count, _) in &results {
        eprintln!("{name}: {count} inputs replayed");
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn targets_fuzz_files_and_corpora_name_each_other() {
    let targets: BTreeSet<String> = TARGETS.iter().map(|(n, _)| n.to_string()).collect();
    assert_eq!(targets.len(), TARGETS.len(), "a target is listed twice");
    let dir = fuzz_dir();
    assert_eq!(
        names(&dir.join("fuzz_targets"), Some("rs")),
        targets,
        "fuzz/fuzz_targets/*.rs and TARGETS differ"
    );
    assert_eq!(
        names(&dir.join("corpus"), None),
        targets,
        "fuzz/corpus/*/ and TARGETS differ"
    );
    let regressions = names(&dir.join("regressions"), None);
    assert!(
        regressions.is_subset(&targets),
        "fuzz/regressions/ names no target: {:?}",
        regressions.difference(&targets).collect::<Vec<_>>()
    );
    let manifest = std::fs::read_to_string(dir.join("Cargo.toml")).expect("fuzz/Cargo.toml");
    let bins = manifest_bins(&manifest).unwrap_or_else(|why| panic!("fuzz/Cargo.toml: {why}"));
    assert_eq!(
        bins.keys().cloned().collect::<BTreeSet<_>>(),
        targets,
        "fuzz/Cargo.toml's [[bin]] targets and TARGETS differ"
    );
    for (name, path) in &bins {
        assert_eq!(
            path,
            &format!("fuzz_targets/{name}.rs"),
            "fuzz/Cargo.toml: [[bin]] {name} builds another file"
        );
    }
    for name in &targets {
        let source = std::fs::read_to_string(dir.join(format!("fuzz_targets/{name}.rs")))
            .expect("fuzz target file");
        assert!(
            source.contains(&format!("confboot_fuzz_targets::{name}(")),
            "fuzz/fuzz_targets/{name}.rs does not call its target"
        );
    }
}

#[test]
fn every_target_has_seeds_and_they_pass() {
    for &(name, target) in TARGETS {
        let seeds = seeds(name);
        assert!(!seeds.is_empty(), "no seeds for {name}");
        for (seed, data) in seeds {
            run(target, &data).unwrap_or_else(|why| panic!("{name} seed {seed}: {why}"));
        }
    }
}

/// Writes the seeds a corpus lacks (by file name) to `fuzz/corpus/`:
/// `cargo test -p confboot-fuzz-targets --test corpus_replay -- --ignored`.
#[test]
#[ignore = "writes to the source tree"]
fn write_seed_corpora() {
    for &(name, _) in TARGETS {
        let dir = fuzz_dir().join("corpus").join(name);
        std::fs::create_dir_all(&dir).expect("corpus directory");
        for (seed, data) in seeds(name) {
            let path = dir.join(format!("seed-{seed}"));
            if !path.exists() {
                std::fs::write(&path, data).expect("seed file");
            }
        }
    }
}
