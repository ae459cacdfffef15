//! The workspace's crates depend on each other in one direction only: the
//! wire at the bottom, the binaries at the top. Cargo already refuses a
//! cycle; this test refuses a dependency that points up or sideways
//! between layers, and one that breaks a named rule, so the shape README's
//! "Layout" shows stays the shape the code has.

use std::collections::BTreeMap;
use std::process::Command;

/// Every workspace crate and its layer (README's "Layout" draws them as
/// rows, lowest last): a crate may depend (normal
/// dependencies) only on crates of a lower layer. Test-only crates
/// (`confboot-tests`, `confboot-fuzz-targets`) sit on top and may use
/// anything; dev-dependencies are not layered (a crate's tests may use
/// the test-support crate).
const LAYERS: &[(&str, u8)] = &[
    ("confboot-proto", 0),
    ("confboot-util", 0),
    ("confboot-sys", 1),
    ("confboot-kms", 1),
    ("confboot-tpm", 1),
    ("confboot-testkit", 1),
    ("confboot-wire", 2),
    ("confboot-attest", 2),
    ("confboot-net", 3),
    ("confboot-disk", 3),
    ("confboot-vtpm", 3),
    ("confboot-snp", 3),
    ("confboot-tdx", 3),
    ("confboot-measure", 3),
    // The cloud variants whose evidence is a vTPM's alone (with the
    // cloud's own signed document or certificate).
    ("confboot-aws", 3),
    ("confboot-gcp", 3),
    // A cloud variant builds on the hardware variant its reports come from.
    ("confboot-azure", 4),
    ("confboot-atls", 4),
    ("confboot-cluster", 4),
    ("confboot-appraisal", 4),
    ("confboot-vpn", 5),
    ("confboot-verifier", 5),
    ("nodeagent", 6),
    ("bootstrapper", 7),
    ("joinsvc", 7),
    ("confboot-cli", 7),
    // The pod sandboxes' pause program of the node image (os/pause): a
    // binary that depends on no workspace crate.
    ("confboot-pause", 7),
    ("confboot-tpm-provision", 7),
    ("confboot-tests", 8),
    ("confboot-fuzz-targets", 8),
];

/// Dependencies that would fit the layers but are wrong for what the
/// crates are: `(from, to, why)`.
const NEVER: &[(&str, &str, &str)] = &[
    (
        "confboot-testkit",
        "confboot-proto",
        "the test kit depends on no confboot crate but util, so a crate's tests build no other",
    ),
    (
        "confboot-wire",
        "confboot-attest",
        "the wire carries a peer identity without knowing attestation",
    ),
    (
        "confboot-net",
        "confboot-attest",
        "the servers' plumbing knows no attestation; aTLS brings it",
    ),
    (
        "confboot-disk",
        "confboot-attest",
        "the disk takes keys, not evidence",
    ),
    (
        "confboot-tpm",
        "confboot-attest",
        "the TPM driver knows nothing of evidence; the vTPM variant brings it",
    ),
    (
        "confboot-vtpm",
        "confboot-snp",
        "a variant never depends on another variant",
    ),
    (
        "confboot-vtpm",
        "confboot-tdx",
        "a variant never depends on another variant",
    ),
    (
        "confboot-snp",
        "confboot-vtpm",
        "a variant never depends on another variant",
    ),
    (
        "confboot-snp",
        "confboot-tdx",
        "a variant never depends on another variant",
    ),
    (
        "confboot-tdx",
        "confboot-vtpm",
        "a variant never depends on another variant",
    ),
    (
        "confboot-tdx",
        "confboot-snp",
        "a variant never depends on another variant",
    ),
    (
        "confboot-cli",
        "nodeagent",
        "the admin's command links no daemon: its verify check is confboot-verifier's",
    ),
    (
        "confboot-cluster",
        "confboot-disk",
        "a ticket's checks need the measurement salt's bounds, which kms keeps, not the disk",
    ),
];

/// The workspace's packages as `cargo metadata` describes them (no
/// dependencies resolved, offline).
fn workspace_metadata() -> serde_json::Value {
    let out = Command::new(env!("CARGO"))
        .args([
            "metadata",
            "--format-version",
            "1",
            "--no-deps",
            "--offline",
        ])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("cargo metadata runs");
    assert!(
        out.status.success(),
        "cargo metadata: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("metadata is JSON")
}

/// The workspace's crates and their normal dependencies on other
/// workspace crates, from `cargo metadata`.
fn workspace_graph() -> BTreeMap<String, Vec<String>> {
    let meta = workspace_metadata();
    let packages = meta["packages"].as_array().expect("packages");
    let names: Vec<String> = packages
        .iter()
        .map(|p| p["name"].as_str().expect("name").to_string())
        .collect();
    packages
        .iter()
        .map(|p| {
            let deps = p["dependencies"]
                .as_array()
                .expect("dependencies")
                .iter()
                .filter(|d| d["kind"].is_null())
                .map(|d| d["name"].as_str().expect("dependency name").to_string())
                .filter(|d| names.contains(d))
                .collect();
            (p["name"].as_str().expect("name").to_string(), deps)
        })
        .collect()
}

fn layer(name: &str) -> u8 {
    LAYERS
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(_, l)| *l)
        .unwrap_or_else(|| panic!("crate {name} has no layer in crate_graph.rs's LAYERS: add it"))
}

/// The dependencies that break the layering or a rule, as lines.
fn violations(graph: &BTreeMap<String, Vec<String>>) -> Vec<String> {
    let mut found = Vec::new();
    for (from, deps) in graph {
        let here = layer(from);
        for to in deps {
            if layer(to) >= here {
                found.push(format!(
                    "{from} (layer {here}) depends on {to} (layer {}): dependencies point down only",
                    layer(to)
                ));
            }
            if let Some((_, _, why)) = NEVER.iter().find(|(f, t, _)| f == from && t == to) {
                found.push(format!("{from} depends on {to}: never, {why}"));
            }
        }
    }
    found
}

#[test]
fn dependencies_point_down_the_layers() {
    let graph = workspace_graph();
    assert!(
        graph.len() >= LAYERS.len(),
        "only {} crates found",
        graph.len()
    );
    for (name, _) in LAYERS {
        assert!(graph.contains_key(*name), "{name} is not in the workspace");
    }
    let bad = violations(&graph);
    assert!(bad.is_empty(), "{}", bad.join("\n"));
}

#[test]
fn an_upward_dependency_is_found() {
    // The check itself: a made-up graph with one upward and one forbidden
    // dependency beside the real one.
    let mut graph = workspace_graph();
    graph
        .get_mut("confboot-util")
        .unwrap()
        .push("confboot-disk".into());
    graph
        .get_mut("confboot-net")
        .unwrap()
        .push("confboot-attest".into());
    let bad = violations(&graph);
    assert!(
        bad.iter()
            .any(|l| l.starts_with("confboot-util (layer 0) depends on confboot-disk")),
        "{bad:?}"
    );
    assert!(
        bad.iter()
            .any(|l| l.starts_with("confboot-net depends on confboot-attest: never")),
        "{bad:?}"
    );
}

/// Library crates whose tests still take the end-to-end suite
/// (`confboot-tests`) as a dev-dependency, until they move onto the test
/// kit. The list only shrinks.
const STILL_ON_THE_SUITE: &[&str] = &[];

/// The library crates (under `crates/`) that take `confboot-tests` as a
/// dev-dependency, from `cargo metadata`.
fn libraries_testing_with_the_suite() -> Vec<String> {
    let meta = workspace_metadata();
    meta["packages"]
        .as_array()
        .expect("packages")
        .iter()
        .filter(|p| {
            p["manifest_path"]
                .as_str()
                .is_some_and(|m| m.contains("/crates/"))
        })
        .filter(|p| {
            p["dependencies"]
                .as_array()
                .expect("dependencies")
                .iter()
                .any(|d| d["name"] == "confboot-tests" && d["kind"] == "dev")
        })
        .map(|p| p["name"].as_str().expect("name").to_string())
        .collect()
}

#[test]
fn library_crates_test_with_the_kit_not_the_end_to_end_suite() {
    // `cargo test -p <library crate>` builds that crate, its dependencies
    // and confboot-testkit only: a unit test sees one copy of its crate.
    let on_the_suite = libraries_testing_with_the_suite();
    let new: Vec<&String> = on_the_suite
        .iter()
        .filter(|c| !STILL_ON_THE_SUITE.contains(&c.as_str()))
        .collect();
    assert!(
        new.is_empty(),
        "{new:?} take confboot-tests as a dev-dependency: take confboot-testkit \
         (or move the end-to-end tests to tests/tests/)"
    );
}

/// Each library crate's dev-dependencies among the workspace's crates,
/// from `cargo metadata`.
fn library_dev_dependencies() -> BTreeMap<String, Vec<String>> {
    let meta = workspace_metadata();
    let packages = meta["packages"].as_array().expect("packages");
    packages
        .iter()
        .filter(|p| {
            p["manifest_path"]
                .as_str()
                .is_some_and(|m| m.contains("/crates/"))
        })
        .map(|p| {
            let dev = p["dependencies"]
                .as_array()
                .expect("dependencies")
                .iter()
                .filter(|d| d["kind"] == "dev")
                .filter_map(|d| d["name"].as_str())
                .filter(|d| LAYERS.iter().any(|(n, _)| n == d))
                .map(str::to_string)
                .collect();
            (p["name"].as_str().expect("name").to_string(), dev)
        })
        .collect()
}

/// The dev-dependencies that reach a crate above (or beside) the one they
/// test, as lines; the test kit is every crate's.
fn upward_dev_dependencies(dev: &BTreeMap<String, Vec<String>>) -> Vec<String> {
    let mut found = Vec::new();
    for (from, deps) in dev {
        for to in deps.iter().filter(|d| *d != "confboot-testkit") {
            if layer(to) >= layer(from) {
                found.push(format!(
                    "{from} (layer {}) tests with {to} (layer {})",
                    layer(from),
                    layer(to)
                ));
            }
        }
    }
    found
}

#[test]
fn library_tests_build_no_crate_above_their_own() {
    // `cargo test -p <library crate>` builds what the crate depends on and
    // the test kit: a dev-dependency on a crate above it would build that
    // crate (and a second copy of this one) too.
    let dev = library_dev_dependencies();
    assert!(dev.contains_key("confboot-tpm"), "{dev:?}");
    let bad = upward_dev_dependencies(&dev);
    assert!(bad.is_empty(), "{}", bad.join("\n"));
    // The check itself: an upward dev-dependency is found.
    let mut made_up = dev.clone();
    made_up
        .entry("confboot-util".into())
        .or_default()
        .push("confboot-disk".into());
    assert!(
        upward_dev_dependencies(&made_up)
            .iter()
            .any(|l| l.starts_with("confboot-util (layer 0) tests with confboot-disk")),
        "{made_up:?}"
    );
}
