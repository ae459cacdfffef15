//! The kubeadm backend, tested by the configuration and commands it produces
//! (Kubernetes cannot run here): a recording runner captures each command,
//! the config file as kubeadm would read it, and plays kubeadm's output back.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use confboot_cluster::{
    ClusterBackend, ClusterError, InitClusterParams, JoinClusterParams, KubeadmBackend,
};
use confboot_kms::SecretBytes;
use confboot_sys::process::{CommandOutput, CommandRunner, ProcessError, ProcessRunner, Stream};
use confboot_testkit::TempDir;
use serde_json::Value;

const TOKEN: &str = "abcdef.0123456789abcdef";

/// One command the runner saw.
#[derive(Clone, Debug)]
struct Call {
    program: PathBuf,
    args: Vec<String>,
    stdin: Option<Vec<u8>>,
    /// The --config file's content and mode while the command ran.
    config: Option<(String, u32)>,
}

/// Records commands; plays back output; on success writes `writes` (as
/// kubeadm init writes admin.conf).
#[derive(Clone, Default)]
struct RecordingRunner {
    calls: Arc<Mutex<Vec<Call>>>,
    output: Vec<(Stream, String)>,
    status: i32,
    writes: Vec<(PathBuf, Vec<u8>)>,
}

impl CommandRunner for RecordingRunner {
    fn run(
        &self,
        program: &Path,
        args: &[String],
        stdin: Option<&[u8]>,
        on_line: &mut dyn FnMut(Stream, &str),
    ) -> Result<CommandOutput, ProcessError> {
        let config = args.iter().position(|a| a == "--config").map(|i| {
            let path = &args[i + 1];
            let mode = fs::metadata(path).unwrap().permissions().mode() & 0o777;
            (fs::read_to_string(path).unwrap(), mode)
        });
        self.calls.lock().unwrap().push(Call {
            program: program.to_path_buf(),
            args: args.to_vec(),
            stdin: stdin.map(<[u8]>::to_vec),
            config,
        });
        let mut out = CommandOutput {
            status: Some(self.status),
            ..Default::default()
        };
        for (stream, line) in &self.output {
            on_line(*stream, line);
            match stream {
                Stream::Stdout => out.stdout_tail.push(line.clone()),
                Stream::Stderr => out.stderr_tail.push(line.clone()),
            }
        }
        if self.status == 0 {
            for (path, data) in &self.writes {
                fs::write(path, data).unwrap();
            }
        }
        Ok(out)
    }
}

fn backend(dir: &TempDir, runner: RecordingRunner) -> KubeadmBackend {
    let mut b = KubeadmBackend::new(Box::new(runner));
    b.kubeadm = PathBuf::from("/opt/bin/kubeadm");
    b.config_dir = dir.path().join("run");
    b.pki_dir = dir.path().join("pki");
    b.admin_kubeconfig = dir.path().join("admin.conf");
    b.kubelet_cert_dir = dir.path().join("kubelet/pki");
    b
}

/// The JSON documents of a `---`-separated config file.
fn documents(text: &str) -> Vec<Value> {
    text.split("\n---\n")
        .map(|d| serde_json::from_str(d).unwrap())
        .collect()
}

fn init_params(version: &str, node_ip: &str) -> InitClusterParams {
    InitClusterParams {
        cluster_name: "confboot-test".into(),
        kubernetes_version: version.into(),
        node_ip: node_ip.into(),
        api_server_cert_sans: vec!["34.1.2.3".into(), "api.example.com".into()],
        service_cidr: "10.96.0.0/12".into(),
        pod_cidr: "10.244.0.0/16".into(),
        conformance_mode: false,
    }
}

fn join_params(control_plane: bool, files: Vec<(&str, &[u8])>) -> JoinClusterParams {
    JoinClusterParams {
        api_server_endpoint: "10.0.0.1:6443".into(),
        token: SecretBytes::new(TOKEN.as_bytes().to_vec()),
        discovery_token_ca_cert_hash: format!("sha256:{}", "0f".repeat(32)),
        is_control_plane: control_plane,
        control_plane_files: files
            .into_iter()
            .map(|(n, d)| (n.to_string(), SecretBytes::new(d.to_vec())))
            .collect(),
        node_ip: "10.0.0.7".into(),
        kubernetes_version: "v1.30.4".into(),
        node_name: String::new(),
        kubelet_cert: None,
    }
}

#[test]
fn init_writes_its_config_runs_kubeadm_init_and_returns_the_admin_kubeconfig() {
    let dir = TempDir::new("init");
    let runner = RecordingRunner {
        output: vec![
            (
                Stream::Stdout,
                "[init] Using Kubernetes version: v1.30.4".into(),
            ),
            (Stream::Stderr, "W1122 a warning".into()),
            (
                Stream::Stdout,
                format!("kubeadm join 10.0.0.1:6443 --token {TOKEN} \\"),
            ),
        ],
        writes: vec![(
            dir.path().join("admin.conf"),
            b"apiVersion: v1\nkind: Config\n".to_vec(),
        )],
        ..Default::default()
    };
    let b = backend(&dir, runner.clone());
    let mut log = Vec::new();
    let out = b
        .init_cluster(&init_params("1.30.4", "10.0.0.1"), &mut |l| {
            log.push(l.to_string())
        })
        .unwrap();
    assert_eq!(out.kubeconfig.expose(), b"apiVersion: v1\nkind: Config\n");

    let calls = runner.calls.lock().unwrap().clone();
    assert_eq!(calls.len(), 1);
    let call = &calls[0];
    let config_path = dir.path().join("run/kubeadm-init.json");
    assert_eq!(call.program, Path::new("/opt/bin/kubeadm"));
    assert_eq!(
        call.args,
        [
            "init",
            "--config",
            config_path.to_str().unwrap(),
            "--skip-phases=preflight",
            "--skip-token-print",
            "--skip-certificate-key-print"
        ]
    );
    assert_eq!(call.stdin, None);
    let (text, mode) = call.config.clone().unwrap();
    assert_eq!(mode, 0o600);
    assert!(
        !config_path.exists(),
        "the config file is removed afterwards"
    );

    let docs = documents(&text);
    assert_eq!(docs.len(), 2);
    let (init, cluster) = (&docs[0], &docs[1]);
    assert_eq!(init["apiVersion"], "kubeadm.k8s.io/v1beta3");
    assert_eq!(init["kind"], "InitConfiguration");
    assert_eq!(init["localAPIEndpoint"]["advertiseAddress"], "10.0.0.1");
    assert_eq!(init["localAPIEndpoint"]["bindPort"], 6443);
    assert_eq!(
        init["nodeRegistration"]["kubeletExtraArgs"],
        serde_json::json!({"node-ip": "10.0.0.1"})
    );
    assert_eq!(cluster["apiVersion"], "kubeadm.k8s.io/v1beta3");
    assert_eq!(cluster["kind"], "ClusterConfiguration");
    assert_eq!(cluster["clusterName"], "confboot-test");
    assert_eq!(cluster["kubernetesVersion"], "v1.30.4");
    assert_eq!(cluster["controlPlaneEndpoint"], "10.0.0.1:6443");
    assert_eq!(
        cluster["certificatesDir"],
        dir.path().join("pki").to_str().unwrap()
    );
    assert_eq!(cluster["networking"]["serviceSubnet"], "10.96.0.0/12");
    assert_eq!(cluster["networking"]["podSubnet"], "10.244.0.0/16");
    assert_eq!(
        cluster["apiServer"]["certSANs"],
        serde_json::json!(["34.1.2.3", "api.example.com"])
    );

    // Every line streamed, the token kubeadm printed redacted.
    assert_eq!(
        log,
        [
            "[init] Using Kubernetes version: v1.30.4",
            "W1122 a warning",
            "kubeadm join 10.0.0.1:6443 --token <redacted-token> \\"
        ]
    );
}

#[test]
fn init_for_newer_kubernetes_uses_v1beta4_and_brackets_ipv6() {
    let dir = TempDir::new("init4");
    let runner = RecordingRunner {
        writes: vec![(dir.path().join("admin.conf"), b"kc".to_vec())],
        ..Default::default()
    };
    let b = backend(&dir, runner.clone());
    let mut params = init_params("v1.31.2", "fd00::1");
    params.cluster_name.clear();
    params.pod_cidr.clear();
    b.init_cluster(&params, &mut |_| {}).unwrap();
    let (text, _) = runner.calls.lock().unwrap()[0].config.clone().unwrap();
    let docs = documents(&text);
    assert_eq!(docs[0]["apiVersion"], "kubeadm.k8s.io/v1beta4");
    assert_eq!(
        docs[0]["nodeRegistration"]["kubeletExtraArgs"],
        serde_json::json!([{"name": "node-ip", "value": "fd00::1"}])
    );
    assert_eq!(docs[1]["apiVersion"], "kubeadm.k8s.io/v1beta4");
    assert_eq!(docs[1]["controlPlaneEndpoint"], "[fd00::1]:6443");
    assert_eq!(
        docs[1]["clusterName"],
        Value::Null,
        "empty: kubeadm's default"
    );
    assert_eq!(docs[1]["networking"]["podSubnet"], Value::Null);
}

#[test]
fn an_init_for_a_slow_control_plane_waits_longer_skips_addons_and_names_its_etcd_image() {
    let dir = TempDir::new("init-slow");
    let runner = RecordingRunner {
        writes: vec![(dir.path().join("admin.conf"), b"kc".to_vec())],
        ..Default::default()
    };
    let mut b = backend(&dir, runner.clone());
    b.init_wait = Some(std::time::Duration::from_secs(720));
    b.etcd_image_tag = Some(confboot_cluster::kubeadm::ImageTag::parse("v3.7.3").unwrap());
    b.init_skip_phases = vec![
        "preflight".into(),
        "addon/coredns".into(),
        "addon/kube-proxy".into(),
    ];
    b.init_cluster(&init_params("v1.37.2", "10.0.2.15"), &mut |_| {})
        .unwrap();
    let call = runner.calls.lock().unwrap()[0].clone();
    assert!(
        call.args
            .contains(&"--skip-phases=preflight,addon/coredns,addon/kube-proxy".to_string()),
        "{:?}",
        call.args
    );
    let docs = documents(&call.config.unwrap().0);
    assert_eq!(
        docs[0]["timeouts"],
        serde_json::json!({
            "controlPlaneComponentHealthCheck": "720s",
            "kubeletHealthCheck": "720s",
            "kubernetesAPICall": "720s",
            "etcdAPICall": "720s",
        })
    );
    assert_eq!(docs[1]["etcd"]["local"]["imageTag"], "v3.7.3");

    // v1beta3 has one wait: the control plane's.
    let dir = TempDir::new("init-slow3");
    let runner = RecordingRunner {
        writes: vec![(dir.path().join("admin.conf"), b"kc".to_vec())],
        ..Default::default()
    };
    let mut b = backend(&dir, runner.clone());
    b.init_wait = Some(std::time::Duration::from_secs(300));
    b.init_cluster(&init_params("v1.30.4", "10.0.2.15"), &mut |_| {})
        .unwrap();
    let docs = documents(&runner.calls.lock().unwrap()[0].config.clone().unwrap().0);
    assert_eq!(docs[0]["timeouts"], Value::Null);
    assert_eq!(docs[1]["apiServer"]["timeoutForControlPlane"], "300s");
    assert_eq!(docs[1]["etcd"], Value::Null, "kubeadm's etcd image");

    for bad in ["", "-x", "a:b", "a/b", &"x".repeat(129)] {
        assert!(
            confboot_cluster::kubeadm::ImageTag::parse(bad).is_err(),
            "{bad:?}"
        );
    }
}

#[test]
fn worker_join_puts_the_token_only_in_the_config_file() {
    let dir = TempDir::new("join");
    let runner = RecordingRunner {
        output: vec![
            (
                Stream::Stdout,
                "[preflight] Running pre-flight checks".into(),
            ),
            (Stream::Stdout, format!("using token {TOKEN}")),
            (Stream::Stderr, "secret 0123456789abcdef".into()),
        ],
        ..Default::default()
    };
    let b = backend(&dir, runner.clone());
    let mut log = Vec::new();
    b.join_cluster(&join_params(false, vec![]), &mut |l| {
        log.push(l.to_string())
    })
    .unwrap();

    let call = runner.calls.lock().unwrap()[0].clone();
    let config_path = dir.path().join("run/kubeadm-join.json");
    assert_eq!(
        call.args,
        [
            "join",
            "--config",
            config_path.to_str().unwrap(),
            "--skip-phases=preflight"
        ]
    );
    assert!(!config_path.exists(), "removed afterwards");
    let (text, mode) = call.config.unwrap();
    assert_eq!(mode, 0o600);
    let docs = documents(&text);
    assert_eq!(docs.len(), 1);
    let join = &docs[0];
    assert_eq!(join["apiVersion"], "kubeadm.k8s.io/v1beta3");
    assert_eq!(join["kind"], "JoinConfiguration");
    let discovery = &join["discovery"]["bootstrapToken"];
    assert_eq!(discovery["token"], TOKEN);
    assert_eq!(discovery["apiServerEndpoint"], "10.0.0.1:6443");
    assert_eq!(
        discovery["caCertHashes"],
        serde_json::json!([format!("sha256:{}", "0f".repeat(32))])
    );
    assert_eq!(
        join["caCertPath"],
        dir.path().join("pki/ca.crt").to_str().unwrap()
    );
    assert_eq!(
        join["nodeRegistration"]["kubeletExtraArgs"]["node-ip"],
        "10.0.0.7"
    );
    assert_eq!(join["controlPlane"], Value::Null, "a worker join");

    // The token: nowhere in argv, not in the log.
    for a in &call.args {
        assert!(!a.contains(TOKEN) && !a.contains("0123456789abcdef"), "{a}");
    }
    assert_eq!(
        log,
        [
            "[preflight] Running pre-flight checks",
            "using token <redacted>",
            "secret <redacted>"
        ]
    );
    assert!(
        !dir.path().join("pki").exists(),
        "no PKI files for a worker"
    );
}

#[test]
fn a_join_installs_the_kubelet_certificate_and_names_the_node() {
    use confboot_cluster::KubeletCert;
    let dir = TempDir::new("kubeletjoin");
    let runner = RecordingRunner::default();
    let b = backend(&dir, runner.clone());
    let mut params = join_params(false, vec![]);
    params.node_name = "worker-7".into();
    params.kubelet_cert = Some(KubeletCert {
        cert_der: vec![0x30, 0x03, 0x02, 0x01, 0x01],
        key_pem: SecretBytes::new(
            b"-----BEGIN PRIVATE KEY-----\nAA==\n-----END PRIVATE KEY-----\n".to_vec(),
        ),
    });
    let mut log = Vec::new();
    b.join_cluster(&params, &mut |l| log.push(l.to_string()))
        .unwrap();
    let pki = dir.path().join("kubelet/pki");
    let cert = std::fs::read_to_string(pki.join("kubelet.crt")).unwrap();
    assert_eq!(
        cert,
        "-----BEGIN CERTIFICATE-----\nMAMCAQE=\n-----END CERTIFICATE-----\n"
    );
    let key = pki.join("kubelet.key");
    assert!(
        std::fs::read_to_string(&key)
            .unwrap()
            .contains("PRIVATE KEY")
    );
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(
        std::fs::metadata(&key).unwrap().permissions().mode() & 0o777,
        0o600
    );
    assert!(
        log.iter()
            .any(|l| l.starts_with("kubelet serving certificate installed"))
    );
    let (text, _) = runner.calls.lock().unwrap()[0].config.clone().unwrap();
    assert_eq!(documents(&text)[0]["nodeRegistration"]["name"], "worker-7");

    // A node name kubelet would refuse is refused before anything is written.
    let dir = TempDir::new("kubeletjoin-bad");
    let b = backend(&dir, RecordingRunner::default());
    params.node_name = "Worker_7".into();
    assert!(matches!(
        b.join_cluster(&params, &mut |_| {}),
        Err(ClusterError::InvalidParams(_))
    ));
    assert!(!dir.path().join("kubelet").exists());
}

#[test]
fn control_plane_join_writes_pki_files_with_modes() {
    let dir = TempDir::new("cpjoin");
    let runner = RecordingRunner::default();
    let b = backend(&dir, runner.clone());
    let files: Vec<(&str, &[u8])> = vec![
        ("ca.crt", b"CA CERT"),
        ("ca.key", b"CA KEY"),
        ("sa.pub", b"SA PUB"),
        ("sa.key", b"SA KEY"),
        ("etcd/ca.crt", b"ETCD CA CERT"),
        ("etcd/ca.key", b"ETCD CA KEY"),
    ];
    b.join_cluster(&join_params(true, files.clone()), &mut |_| {})
        .unwrap();
    for (name, data) in &files {
        let path = dir.path().join("pki").join(name);
        assert_eq!(fs::read(&path).unwrap(), *data, "{name}");
        let mode = fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        let want = if name.ends_with(".key") { 0o600 } else { 0o644 };
        assert_eq!(mode, want, "{name}");
    }
    let etcd_mode = fs::metadata(dir.path().join("pki/etcd"))
        .unwrap()
        .permissions()
        .mode()
        & 0o777;
    assert_eq!(etcd_mode, 0o700);
    let (text, _) = runner.calls.lock().unwrap()[0].config.clone().unwrap();
    let join = &documents(&text)[0];
    assert_eq!(
        join["controlPlane"]["localAPIEndpoint"],
        serde_json::json!({"advertiseAddress": "10.0.0.7", "bindPort": 6443})
    );
    // Rewriting (a retried join) replaces the files.
    b.join_cluster(&join_params(true, vec![("ca.key", b"NEW")]), &mut |_| {})
        .unwrap();
    assert_eq!(fs::read(dir.path().join("pki/ca.key")).unwrap(), b"NEW");
}

#[test]
fn file_names_that_escape_the_pki_dir_are_refused_before_anything_is_written() {
    let dir = TempDir::new("escape");
    let runner = RecordingRunner::default();
    let b = backend(&dir, runner.clone());
    for bad in [
        "../evil.key",
        "/etc/evil.key",
        "etcd/../../evil.key",
        "./ca.key",
        "",
        "a//b",
    ] {
        let files: Vec<(&str, &[u8])> = vec![("ca.crt", b"CA"), (bad, b"EVIL")];
        let got = b.join_cluster(&join_params(true, files), &mut |_| {});
        assert!(
            matches!(got, Err(ClusterError::BadFileName(_))),
            "{bad:?}: {got:?}"
        );
    }
    assert!(
        !dir.path().join("pki").exists(),
        "nothing written, not even the good file"
    );
    assert!(!dir.path().join("evil.key").exists());
    assert!(runner.calls.lock().unwrap().is_empty(), "kubeadm never ran");

    // Duplicates, and files for a worker, are refused too.
    let dup: Vec<(&str, &[u8])> = vec![("ca.crt", b"A"), ("ca.crt", b"B")];
    assert!(matches!(
        b.join_cluster(&join_params(true, dup), &mut |_| {}),
        Err(ClusterError::BadFileName(_))
    ));
    assert!(matches!(
        b.join_cluster(&join_params(false, vec![("ca.key", b"K")]), &mut |_| {}),
        Err(ClusterError::InvalidParams(_))
    ));

    // A symlinked directory inside the PKI tree does not lead out of it.
    let outside = dir.path().join("outside");
    fs::create_dir_all(&outside).unwrap();
    fs::create_dir_all(dir.path().join("pki")).unwrap();
    std::os::unix::fs::symlink(&outside, dir.path().join("pki/etcd")).unwrap();
    let got = b.join_cluster(&join_params(true, vec![("etcd/ca.key", b"K")]), &mut |_| {});
    assert!(matches!(got, Err(ClusterError::BadFileName(_))), "{got:?}");
    assert_eq!(fs::read_dir(&outside).unwrap().count(), 0);
    assert!(runner.calls.lock().unwrap().is_empty());
}

#[test]
fn kubeadm_failure_is_an_error_with_its_stderr_tail() {
    let dir = TempDir::new("fail");
    let mut output: Vec<(Stream, String)> = (0..15)
        .map(|i| (Stream::Stderr, format!("stderr line {i}")))
        .collect();
    output.push((Stream::Stdout, "stdout is not in the error".into()));
    output.push((Stream::Stderr, format!("error: token {TOKEN} rejected")));
    let runner = RecordingRunner {
        output,
        status: 1,
        writes: vec![(dir.path().join("admin.conf"), b"kc".to_vec())],
        ..Default::default()
    };
    let b = backend(&dir, runner.clone());
    let got = b.join_cluster(&join_params(false, vec![]), &mut |_| {});
    let Err(ClusterError::Command {
        program,
        status,
        stderr_tail,
    }) = got
    else {
        panic!("{got:?}");
    };
    assert_eq!(program, "/opt/bin/kubeadm");
    assert_eq!(status, Some(1));
    let lines: Vec<&str> = stderr_tail.lines().collect();
    assert_eq!(lines.len(), 10, "the last ten lines");
    assert_eq!(lines[0], "stderr line 6");
    assert_eq!(lines[9], "error: token <redacted> rejected");
    assert!(!stderr_tail.contains(TOKEN));
    assert!(
        !dir.path().join("run/kubeadm-join.json").exists(),
        "removed after a failure too"
    );

    // A failed init returns the error, not a kubeconfig.
    let got = b.init_cluster(&init_params("v1.30.4", "10.0.0.1"), &mut |_| {});
    assert!(
        matches!(
            got,
            Err(ClusterError::Command {
                status: Some(1),
                ..
            })
        ),
        "{got:?}"
    );
    assert!(!dir.path().join("admin.conf").exists());
}

#[test]
fn bad_parameters_are_refused_without_quoting_secrets_or_running_kubeadm() {
    let dir = TempDir::new("bad");
    let runner = RecordingRunner::default();
    let b = backend(&dir, runner.clone());
    let secret_token = "zzzzzz.SECRETSECRET1234";
    let mut p = join_params(false, vec![]);
    p.token = SecretBytes::new(secret_token.as_bytes().to_vec());
    let e = b.join_cluster(&p, &mut |_| {}).unwrap_err();
    assert!(matches!(e, ClusterError::InvalidParams(_)));
    assert!(!format!("{e} {e:?}").contains("SECRET"));

    let mut bad_joins = Vec::new();
    for f in [
        |p: &mut JoinClusterParams| p.api_server_endpoint = "10.0.0.1".into(),
        |p: &mut JoinClusterParams| p.discovery_token_ca_cert_hash = "md5:00".into(),
        |p: &mut JoinClusterParams| p.node_ip = "node-7".into(),
        |p: &mut JoinClusterParams| p.kubernetes_version = "latest".into(),
    ] {
        let mut p = join_params(false, vec![]);
        f(&mut p);
        bad_joins.push(p);
    }
    for p in bad_joins {
        assert!(matches!(
            b.join_cluster(&p, &mut |_| {}),
            Err(ClusterError::InvalidParams(_))
        ));
    }
    for f in [
        |p: &mut InitClusterParams| p.node_ip = "".into(),
        |p: &mut InitClusterParams| p.service_cidr = "10.96.0.0/40".into(),
        |p: &mut InitClusterParams| p.api_server_cert_sans.push("not a name".into()),
        |p: &mut InitClusterParams| p.cluster_name = "a b".into(),
        |p: &mut InitClusterParams| p.kubernetes_version = "v1.30".into(),
    ] {
        let mut p = init_params("v1.30.4", "10.0.0.1");
        f(&mut p);
        assert!(matches!(
            b.init_cluster(&p, &mut |_| {}),
            Err(ClusterError::InvalidParams(_))
        ));
    }
    assert!(runner.calls.lock().unwrap().is_empty());
}

/// The whole path with the real process runner and a stand-in kubeadm
/// script: output is streamed, argv is what the script saw, admin.conf is
/// read after the run.
#[test]
fn real_process_runner_with_a_standin_kubeadm() {
    let dir = TempDir::new("proc");
    let script = dir.path().join("kubeadm");
    let argv_log = dir.path().join("argv");
    confboot_testkit::write_executable(
        &script,
        format!(
            "#!/bin/sh\nprintf '%s\\n' \"$@\" >> {argv}\necho \"[$1] starting\"\n\
             echo 'to stderr' >&2\n\
             if [ \"$1\" = init ]; then printf 'KUBECONFIG' > {admin}; fi\n\
             grep -q '\"token\"' \"$3\" && echo 'config has a token'\nexit 0\n",
            argv = argv_log.display(),
            admin = dir.path().join("admin.conf").display()
        ),
    );
    let mut b = KubeadmBackend::new(Box::new(ProcessRunner::default()));
    b.kubeadm = script;
    b.config_dir = dir.path().join("run");
    b.pki_dir = dir.path().join("pki");
    b.admin_kubeconfig = dir.path().join("admin.conf");

    let mut log = Vec::new();
    let out = b
        .init_cluster(&init_params("v1.30.4", "10.0.0.1"), &mut |l| {
            log.push(l.to_string())
        })
        .unwrap();
    assert_eq!(out.kubeconfig.expose(), b"KUBECONFIG");
    assert!(log.contains(&"[init] starting".to_string()), "{log:?}");
    assert!(log.contains(&"to stderr".to_string()), "{log:?}");

    let mut log = Vec::new();
    b.join_cluster(&join_params(false, vec![]), &mut |l| {
        log.push(l.to_string())
    })
    .unwrap();
    assert!(log.contains(&"config has a token".to_string()), "{log:?}");
    let argv = fs::read_to_string(&argv_log).unwrap();
    assert!(argv.contains("join\n--config\n"), "{argv}");
    assert!(
        !argv.contains(TOKEN) && !argv.contains("0123456789abcdef"),
        "{argv}"
    );
}
