//! The Kubernetes manifests in `deploy/kubernetes/` are valid against the
//! Kubernetes API schemas (offline, strict: an unknown field is an error)
//! and agree with the code they deploy: every joinsvc flag and environment
//! variable is one joinsvc's `--help` lists, the ports and probes are
//! joinsvc's, the measurement policy is a directory mount (the watcher
//! follows the kubelet's symlink swap, which `subPath` would not see), and
//! the Role, applied to a real API server
//! (`confboot_tests::kube::ControlPlane`), lets joinsvc's ServiceAccount
//! do exactly what joinsvc does and the real RBAC authorizer refuses the
//! rest.

use std::path::{Path, PathBuf};
use std::process::Command;

use confboot_tests::kube::ControlPlane;
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

/// The user joinsvc's pods authenticate as.
const JOINSVC_SERVICE_ACCOUNT: &str = "system:serviceaccount:kube-system:confboot-joinsvc";

/// Whether the real authorizer lets joinsvc's ServiceAccount `verb`
/// `resource` (`kind` or `kind/name`) in `namespace`.
fn joinsvc_can(plane: &ControlPlane, verb: &str, resource: &str, namespace: &str) -> bool {
    let out = plane
        .kubectl_command(&["auth", "can-i", verb, resource, "-n", namespace])
        .arg(format!("--as={JOINSVC_SERVICE_ACCOUNT}"))
        .output()
        .unwrap();
    match String::from_utf8_lossy(&out.stdout).trim() {
        "yes" => true,
        "no" => false,
        other => panic!(
            "kubectl auth can-i {verb} {resource}: {other} {}",
            String::from_utf8_lossy(&out.stderr)
        ),
    }
}

#[test]
fn the_role_allows_exactly_what_joinsvc_does_on_a_real_api_server() {
    let plane = ControlPlane::start();
    plane.apply(&manifest_dir().join("joinsvc.yaml"));
    let allowed = [
        ("create", "secrets", "kube-system"),
        ("create", "configmaps", "kube-system"),
        ("get", "configmaps/confboot-vpn-peers", "kube-system"),
        ("update", "configmaps/confboot-vpn-peers", "kube-system"),
        ("get", "configmaps/confboot-issued-filter", "kube-system"),
        ("update", "configmaps/confboot-issued-filter", "kube-system"),
    ];
    let refused = [
        ("get", "secrets/bootstrap-token-abcdef", "kube-system"),
        ("list", "secrets", "kube-system"),
        ("watch", "secrets", "kube-system"),
        ("delete", "secrets/bootstrap-token-abcdef", "kube-system"),
        ("update", "secrets/bootstrap-token-abcdef", "kube-system"),
        ("get", "configmaps/kubeadm-config", "kube-system"),
        ("update", "configmaps/kubeadm-config", "kube-system"),
        ("list", "configmaps", "kube-system"),
        ("watch", "configmaps", "kube-system"),
        ("patch", "configmaps/confboot-vpn-peers", "kube-system"),
        ("delete", "configmaps/confboot-vpn-peers", "kube-system"),
        ("create", "secrets", "default"),
        ("create", "configmaps", "kube-public"),
        ("get", "configmaps/confboot-vpn-peers", "default"),
        ("create", "pods", "kube-system"),
        ("create", "roles.rbac.authorization.k8s.io", "kube-system"),
        ("get", "nodes", "kube-system"),
    ];
    for (verb, resource, ns) in allowed {
        assert!(
            joinsvc_can(&plane, verb, resource, ns),
            "{verb} {resource} in {ns} must be allowed"
        );
    }
    for (verb, resource, ns) in refused {
        assert!(
            !joinsvc_can(&plane, verb, resource, ns),
            "{verb} {resource} in {ns} must be refused"
        );
    }

    let docs = all_documents();
    assert!(
        docs.iter()
            .all(|d| d["kind"] != "ClusterRole" && d["kind"] != "ClusterRoleBinding"),
        "joinsvc needs no cluster-wide permission"
    );
    // The binding gives the Role to the ServiceAccount the pods run as.
    let account = find(&docs, "ServiceAccount");
    let (namespace, name) = (
        account["metadata"]["namespace"].as_str().unwrap(),
        account["metadata"]["name"].as_str().unwrap(),
    );
    assert_eq!(
        format!("system:serviceaccount:{namespace}:{name}"),
        JOINSVC_SERVICE_ACCOUNT
    );
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
