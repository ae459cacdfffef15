//! The Kubernetes manifests in `deploy/kubernetes/` are valid against the
//! Kubernetes API schemas (offline, strict: an unknown field is an error)
//! and agree with the code they deploy: every joinsvc flag and environment
//! variable is one joinsvc's `--help` lists, the ports and probes are
//! joinsvc's, the measurement policy is a directory mount (the watcher
//! follows the kubelet's symlink swap, which `subPath` would not see), and
//! the Role is exactly what the Kubernetes API double authorizes
//! ([`kube_double::JOINSVC_ROLE_RULES`]): what it would not allow, the
//! double refuses with 403.

use std::path::{Path, PathBuf};
use std::process::Command;

use confboot_tests::kube_double::{
    JOINSVC_ROLE_NAMESPACE, JOINSVC_ROLE_RULES, JOINSVC_SERVICE_ACCOUNT,
};
use confboot_tests::{TempDir, musl_binary, stop_for_missing_setup, target_dir};
use serde_json::Value;

/// The Kubernetes version joinsvc installs by default (`--kubernetes-version`).
const KUBERNETES_VERSION: &str = "1.31.0";

fn manifest_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/kubernetes")
}

fn manifests() -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(manifest_dir())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    files.sort();
    assert!(!files.is_empty(), "no manifests in {:?}", manifest_dir());
    files
}

/// The virtual environment `scripts/setup.sh` installs kubernetes-validate into.
fn validator_bin(name: &str) -> PathBuf {
    let path = target_dir()
        .join("tools/kubernetes-validate/bin")
        .join(name);
    if !path.exists() {
        stop_for_missing_setup(&format!(
            "{} is missing: run `bash scripts/setup.sh` first \
             (it installs kubernetes-validate from PyPI)",
            path.display()
        ));
    }
    path
}

/// Runs kubernetes-validate, strictly; returns success and its output.
fn validate(files: &[PathBuf]) -> (bool, String) {
    let out = Command::new(validator_bin("kubernetes-validate"))
        .args(["--strict", "--kubernetes-version", KUBERNETES_VERSION])
        .args(files)
        .output()
        .expect("run kubernetes-validate");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

/// Every document of a YAML file, as JSON (the validator's Python has PyYAML).
fn documents(file: &Path) -> Vec<Value> {
    let out = Command::new(validator_bin("python"))
        .args([
            "-c",
            "import json, sys, yaml; print(json.dumps([d for d in yaml.safe_load_all(open(sys.argv[1])) if d]))",
        ])
        .arg(file)
        .output()
        .expect("run python");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

fn all_documents() -> Vec<Value> {
    manifests().iter().flat_map(|f| documents(f)).collect()
}

fn find<'a>(docs: &'a [Value], kind: &str) -> &'a Value {
    let found: Vec<&Value> = docs.iter().filter(|d| d["kind"] == kind).collect();
    assert_eq!(found.len(), 1, "one {kind} expected");
    found[0]
}

fn strings(v: &Value) -> Vec<String> {
    v.as_array()
        .unwrap_or_else(|| panic!("not a list: {v}"))
        .iter()
        .map(|s| s.as_str().unwrap().to_string())
        .collect()
}

#[test]
fn manifests_are_valid_against_the_kubernetes_schemas() {
    let files = manifests();
    let (ok, out) = validate(&files);
    assert!(ok, "{out}");
    let passed = out.lines().filter(|l| l.contains(" passed for ")).count();
    assert_eq!(passed, all_documents().len(), "{out}");

    // The validator is not a formality: a misspelt field and a wrong type
    // in a copy of the DaemonSet are refused.
    let dir = TempDir::new("manifests");
    let text = std::fs::read_to_string(manifest_dir().join("joinsvc.yaml")).unwrap();
    for (what, from, to) in [
        ("misspelt field", "readinessProbe:", "readynessProbe:"),
        (
            "wrong type",
            "failureThreshold: 3",
            "failureThreshold: three",
        ),
    ] {
        assert!(text.contains(from));
        let bad = dir.path().join("bad.yaml");
        std::fs::write(&bad, text.replacen(from, to, 1)).unwrap();
        let (ok, out) = validate(&[bad]);
        assert!(!ok, "{what} passed:\n{out}");
    }
}

#[test]
fn the_role_is_what_the_api_double_enforces() {
    let docs = all_documents();
    let role = find(&docs, "Role");
    assert_eq!(role["metadata"]["namespace"], JOINSVC_ROLE_NAMESPACE);
    let rules = role["rules"].as_array().unwrap();
    assert_eq!(rules.len(), JOINSVC_ROLE_RULES.len(), "{role}");
    for (rule, enforced) in rules.iter().zip(JOINSVC_ROLE_RULES) {
        assert_eq!(strings(&rule["apiGroups"]), enforced.api_groups, "{rule}");
        assert_eq!(strings(&rule["resources"]), enforced.resources, "{rule}");
        assert_eq!(strings(&rule["verbs"]), enforced.verbs, "{rule}");
        match rule.get("resourceNames") {
            None => assert!(enforced.resource_names.is_empty(), "{rule}"),
            Some(names) => assert_eq!(strings(names), enforced.resource_names, "{rule}"),
        }
    }
    assert!(
        docs.iter()
            .all(|d| d["kind"] != "ClusterRole" && d["kind"] != "ClusterRoleBinding"),
        "joinsvc needs no cluster-wide permission"
    );

    // The binding gives that Role to the ServiceAccount the pods run as,
    // which is the user the double authorizes.
    let account = find(&docs, "ServiceAccount");
    let (namespace, name) = (
        account["metadata"]["namespace"].as_str().unwrap(),
        account["metadata"]["name"].as_str().unwrap(),
    );
    assert_eq!(
        format!("system:serviceaccount:{namespace}:{name}"),
        JOINSVC_SERVICE_ACCOUNT
    );
    let binding = find(&docs, "RoleBinding");
    assert_eq!(binding["metadata"]["namespace"], JOINSVC_ROLE_NAMESPACE);
    assert_eq!(binding["roleRef"]["kind"], "Role");
    assert_eq!(binding["roleRef"]["name"], role["metadata"]["name"]);
    let subjects = binding["subjects"].as_array().unwrap();
    assert_eq!(subjects.len(), 1);
    assert_eq!(subjects[0]["kind"], "ServiceAccount");
    assert_eq!(subjects[0]["name"], name);
    assert_eq!(subjects[0]["namespace"], namespace);
    let pod = &find(&docs, "DaemonSet")["spec"]["template"]["spec"];
    assert_eq!(pod["serviceAccountName"], name);
}

/// The value of `--name=value` in `args`.
fn flag<'a>(args: &'a [String], name: &str) -> Option<&'a str> {
    args.iter()
        .find_map(|a| a.strip_prefix(&format!("--{name}=")))
}

fn port_of(addr: &str) -> u64 {
    addr.rsplit_once(':').unwrap().1.parse().unwrap()
}

#[test]
fn the_daemonset_runs_joinsvc_as_its_help_describes() {
    let help = Command::new(musl_binary("joinsvc"))
        .arg("--help")
        .output()
        .unwrap();
    assert!(help.status.success());
    let help = String::from_utf8(help.stdout).unwrap();

    let docs = all_documents();
    let daemonset = find(&docs, "DaemonSet");
    let pod = &daemonset["spec"]["template"]["spec"];
    assert_eq!(daemonset["metadata"]["namespace"], "kube-system");
    assert_eq!(
        pod["nodeSelector"]["node-role.kubernetes.io/control-plane"], "",
        "on control-plane nodes"
    );
    let containers = pod["containers"].as_array().unwrap();
    assert_eq!(containers.len(), 1);
    let c = &containers[0];
    let args = strings(&c["args"]);

    // Every flag and variable is one joinsvc knows.
    for a in &args {
        let name = a
            .strip_prefix("--")
            .and_then(|a| a.split_once('='))
            .unwrap_or_else(|| panic!("{a:?} is not --name=value"))
            .0;
        assert!(
            help.contains(&format!("--{name} ")),
            "joinsvc has no --{name}"
        );
    }
    for var in c["env"].as_array().unwrap() {
        let name = var["name"].as_str().unwrap();
        assert!(
            name == "HOST_IP" || help.contains(&format!("[env: {name}")),
            "joinsvc reads no {name}"
        );
    }
    // What joinsvc requires is given, by a flag or its variable.
    for required in [
        "master-secret",
        "measurements",
        "ak-trust",
        "api-server-endpoint",
    ] {
        assert!(flag(&args, required).is_some(), "--{required} missing");
    }
    let env_names: Vec<&str> = c["env"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v["name"].as_str().unwrap())
        .collect();
    assert!(env_names.contains(&"JOINSVC_MEASUREMENT_SALT"));
    // `$(HOST_IP)` is expanded by the kubelet only for a declared variable.
    assert!(
        flag(&args, "api-server-endpoint")
            .unwrap()
            .starts_with("$(HOST_IP):")
    );

    // Ports: the join API and the health port, with the probes on the latter.
    let port = |name: &str| -> u64 {
        c["ports"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["name"] == name)
            .unwrap_or_else(|| panic!("no port {name}"))["containerPort"]
            .as_u64()
            .unwrap()
    };
    assert_eq!(port("join"), port_of(flag(&args, "listen").unwrap()));
    assert_eq!(
        port("health"),
        port_of(flag(&args, "health-listen").unwrap())
    );
    assert_eq!(c["livenessProbe"]["httpGet"]["path"], "/healthz");
    assert_eq!(c["readinessProbe"]["httpGet"]["path"], "/readyz");
    for probe in ["livenessProbe", "readinessProbe"] {
        assert_eq!(c[probe]["httpGet"]["port"], "health", "{probe}");
    }
    assert!(
        c["resources"]["limits"]["memory"].is_string(),
        "a memory limit"
    );

    // The policy comes from a ConfigMap mounted as a directory; the master
    // secret from a Secret.
    let mount_of = |volume_kind: &str| -> &Value {
        let volume = pod["volumes"]
            .as_array()
            .unwrap()
            .iter()
            .find(|v| v.get(volume_kind).is_some())
            .unwrap_or_else(|| panic!("no {volume_kind} volume"));
        c["volumeMounts"]
            .as_array()
            .unwrap()
            .iter()
            .find(|m| m["name"] == volume["name"])
            .unwrap()
    };
    let policy = mount_of("configMap");
    assert!(
        policy.get("subPath").is_none(),
        "the watcher needs a directory mount"
    );
    let policy_dir = policy["mountPath"].as_str().unwrap();
    assert!(
        flag(&args, "measurements")
            .unwrap()
            .starts_with(&format!("{policy_dir}/"))
    );
    let secrets_dir = mount_of("secret")["mountPath"].as_str().unwrap();
    assert!(
        flag(&args, "master-secret")
            .unwrap()
            .starts_with(&format!("{secrets_dir}/"))
    );
}
