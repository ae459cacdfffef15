//! The first node runs the real `kubeadm init` in its VM, and the control
//! plane it starts makes it a `Ready` node.
//!
//! The node is a QEMU VM under software emulation (OVMF measured boot, its
//! own swtpm) booting the PRODUCTION initramfs and OS image. The admin's
//! `confboot init` (the CLI, verifying the node's quote against the
//! measurements `confboot measure` predicted) gives it the master secret;
//! PID 1 formats the state disk, makes the cluster CA and the admin's
//! kubeconfig and hands over to the verified OS. There the cluster step
//! imports the control plane's images the image carries (etcd,
//! kube-apiserver, kube-controller-manager and kube-scheduler, built here
//! from their Go modules and packed by `os/binary-image.sh`: nothing is
//! pulled) and runs the REAL `kubeadm init` with the CA made at Init:
//! kubeadm writes the static pods, the kubelet starts them through
//! containerd and runc, kubeadm waits for them (its waits raised, the
//! CoreDNS and kube-proxy addons skipped: the image carries neither), then
//! uploads its configuration, marks the node a control plane and makes the
//! bootstrap-token RBAC and `cluster-info`.
//!
//! The test then talks to that API server, inside the VM, with the
//! kubeconfig `confboot init` returned (QEMU's hostfwd to the guest's 6443,
//! the server name `kubernetes` of its certificate): the Node becomes
//! `Ready`, the four static pods run, ready, with the images of the OS
//! image, and the timeline from QEMU's start is printed.
//!
//! Needs root, the musl release binaries, the Kubernetes parts
//! (scripts/kubernetes.sh), mmdebstrap and squashfs-tools.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use confboot_tests::admin::AdminFiles;
use confboot_tests::cluster::TempDir;
use confboot_tests::kube::{KUBERNETES_VERSION, parts_dir};
use confboot_tests::os::OsImage;
use confboot_tests::qemu::{BASE_CMDLINE, Image, JoinsvcTpm, NodeFiles, Vm, args_param, node_args};
use confboot_tests::{free_port, musl_binary, require_program};
use serde_json::Value;

/// The init secret the admin holds.
const INIT_SECRET: &str = "correct horse battery staple";
/// Guest memory: etcd, the API server, the controller manager and the
/// scheduler beside the kubelet and containerd.
const MEMORY_MIB: u32 = 2048;
/// The state disk (sparse): containerd keeps the control plane's images
/// there, each once as a blob and once unpacked, and etcd its data.
const DISK_BYTES: u64 = 2 << 30;
/// The node's name (QEMU's DHCP gives it as the host name).
const NODE_NAME: &str = "confboot-node-1";
/// Bound for one console line (a control plane's start under TCG on two
/// shared cores).
const LINE_BOUND: Duration = Duration::from_secs(1200);
/// Bound from `kubeadm init`'s end to the Node being `Ready` and its
/// static pods running.
const READY_BOUND: Duration = Duration::from_secs(600);
/// The static pods `kubeadm init` makes, by the component's name.
const CONTROL_PLANE: [&str; 4] = [
    "etcd",
    "kube-apiserver",
    "kube-controller-manager",
    "kube-scheduler",
];

/// The console lines that end the boot early.
const FAILED: [&str; 4] = [
    "cluster step: FAILED",
    "CONFBOOT-ERROR",
    "Kernel panic",
    "Out of memory",
];

/// A timeline: seconds since QEMU started, one line per phase.
struct Timeline {
    marks: Vec<(String, Duration)>,
}

impl Timeline {
    /// Waits for `pattern` on the console; panics with the console when it
    /// does not come or the node fails first.
    fn wait(&mut self, vm: &mut Vm, pattern: &str, phase: &str) -> String {
        let deadline = Instant::now() + LINE_BOUND;
        loop {
            let serial = vm.serial();
            if let Some(line) = serial.lines().find(|l| l.contains(pattern)) {
                self.marks.push((phase.to_string(), vm.elapsed()));
                eprintln!(
                    "[node] {pattern:?} after {:.1} s",
                    vm.elapsed().as_secs_f64()
                );
                return line.trim_end().to_string();
            }
            let failed = FAILED.iter().find(|f| serial.contains(*f));
            if failed.is_some() || Instant::now() > deadline {
                panic!(
                    "[node] no {pattern:?} ({}):\n{}",
                    failed.map_or("its deadline passed".to_string(), |f| format!(
                        "{f:?} came first"
                    )),
                    vm.failure_report()
                );
            }
            std::thread::sleep(Duration::from_millis(500));
        }
    }

    fn print(&self) {
        for (phase, at) in &self.marks {
            println!("[node] +{:6.1} s  {phase}", at.as_secs_f64());
        }
    }
}

/// kubectl against the VM's API server with the admin's kubeconfig.
struct Api {
    kubeconfig: std::path::PathBuf,
    server: String,
}

impl Api {
    fn command(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new(parts_dir().join("kubectl"));
        cmd.arg("--kubeconfig")
            .arg(&self.kubeconfig)
            .args(["--server", &self.server, "--tls-server-name", "kubernetes"])
            .args(["--request-timeout", "30s"])
            .args(args);
        cmd
    }

    /// The JSON kubectl prints, or `None` while it fails.
    fn json(&self, args: &[&str]) -> Option<Value> {
        let mut all = args.to_vec();
        all.extend(["-o", "json"]);
        let out = self.command(&all).output().expect("run kubectl");
        out.status
            .success()
            .then(|| serde_json::from_slice(&out.stdout).expect("kubectl's JSON"))
    }

    fn text(&self, args: &[&str]) -> String {
        let out = self.command(args).output().expect("run kubectl");
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    }
}

/// `confboot measure` of the image at `memory_mib` (the firmware measures
/// the memory map): the admin's `measurements.json`.
fn measure(cli: &Path, image: &Image, cmdline: &str, admin: &Path, memory_mib: u32) {
    let out = Command::new(cli)
        .arg("measure")
        .arg("--kernel")
        .arg(&image.kernel)
        .arg("--initrd")
        .arg(&image.initrd)
        .arg("--cmdline")
        .arg(format!("{BASE_CMDLINE} {cmdline}"))
        .args(["--memory-mib", &memory_mib.to_string()])
        .arg("--policy-out")
        .arg(admin.join("measurements.json"))
        .arg("--events-out")
        .arg(admin.join("measurements.events.json"))
        .output()
        .expect("run confboot measure");
    assert!(
        out.status.success(),
        "confboot measure: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn vm_first_node_runs_kubeadm_init_and_its_control_plane_makes_it_ready() {
    require_program("mmdebstrap", "mmdebstrap");
    let uid = std::os::unix::fs::MetadataExt::uid(&std::fs::metadata("/proc/self").expect("/proc"));
    assert_eq!(uid, 0, "os/build.sh needs root");
    let t0 = Instant::now();
    let bootstrapper = musl_binary("bootstrapper");
    let cli = musl_binary("confboot");
    let work = TempDir::new("vm-kubeadm-init");
    let joinsvc_tpm = JoinsvcTpm::new(work.path());

    let t = Instant::now();
    let image =
        Image::build_production("vm-kubeadm-init", &bootstrapper).unwrap_or_else(|e| panic!("{e}"));
    let os =
        OsImage::build_production("vm-kubeadm-init", parts_dir()).unwrap_or_else(|e| panic!("{e}"));
    println!("{}", os.build_log.trim_end());
    println!(
        "phase images: {:.1} s (OS image {} bytes)",
        t.elapsed().as_secs_f64(),
        std::fs::metadata(&os.root).unwrap().len()
    );

    let files = AdminFiles::new(work.path(), INIT_SECRET);
    let node = NodeFiles::new(work.path(), "node1");
    std::fs::File::options()
        .write(true)
        .open(&node.disk)
        .unwrap()
        .set_len(DISK_BYTES)
        .unwrap();
    let args = node_args(Some(&files.init_secret_hash), &joinsvc_tpm.trust(), &[]);
    let cmdline = format!("{} {}", args_param(&args), os.cmdline);
    measure(&cli, &image, &cmdline, &files.dir, MEMORY_MIB);

    let (init_fwd, api_fwd) = (free_port(), free_port());
    let mut config = node.config(&image, &cmdline);
    config.root_disk = Some(os.root.clone());
    config.memory_mib = MEMORY_MIB;
    config.dhcp_host_name = Some(NODE_NAME.to_string());
    config.host_forwards = vec![(init_fwd, 9000), (api_fwd, 6443)];
    let mut vm = Vm::boot(config);
    let mut tl = Timeline { marks: Vec::new() };
    tl.wait(&mut vm, "init API listening on", "PID 1 waits for Init");
    let out = files.init(&cli, init_fwd, &node.ak);
    assert!(
        out.status.success(),
        "confboot init failed:\n{}{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
        vm.failure_report()
    );
    tl.marks
        .push(("confboot init returned".to_string(), vm.elapsed()));
    tl.wait(
        &mut vm,
        "bootstrapped (Initialized)",
        "state disk open: bootstrapped",
    );
    tl.wait(&mut vm, "CONFBOOT-SWITCH-ROOT", "switch_root to the OS");
    let imported = tl.wait(
        &mut vm,
        "control-plane images imported",
        "control-plane images imported",
    );
    let init = tl.wait(
        &mut vm,
        "cluster step: kubeadm init succeeded",
        "kubeadm init done",
    );

    // The API server in the VM, with the kubeconfig Init returned.
    let api = Api {
        kubeconfig: files.dir.join("confboot-admin.conf"),
        server: format!("https://127.0.0.1:{api_fwd}"),
    };
    let deadline = Instant::now() + READY_BOUND;
    let mut last = String::new();
    loop {
        let ready = api.json(&["get", "node", NODE_NAME]).and_then(|node| {
            node["status"]["conditions"]
                .as_array()?
                .iter()
                .find(|c| c["type"] == "Ready")
                .map(|c| format!("{} {}", c["status"], c["message"]))
        });
        let ready = ready.unwrap_or_else(|| "no Node yet".to_string());
        if ready.starts_with("\"True\"") {
            tl.marks
                .push(("Node Ready (its own API server)".to_string(), vm.elapsed()));
            break;
        }
        if ready != last {
            eprintln!("[node] +{:.1} s Ready: {ready}", vm.elapsed().as_secs_f64());
            last = ready;
        }
        assert!(
            Instant::now() < deadline,
            "the Node is not Ready within {READY_BOUND:?}: {last}\n{}",
            vm.failure_report()
        );
        std::thread::sleep(Duration::from_secs(3));
    }

    // The static pods run the OS image's images, never pulled.
    let images_of = |pods: &Value| -> Vec<(String, String, String)> {
        pods["items"]
            .as_array()
            .map(|items| {
                items
                    .iter()
                    .map(|p| {
                        (
                            p["metadata"]["labels"]["component"]
                                .as_str()
                                .unwrap_or_default()
                                .to_string(),
                            p["spec"]["containers"][0]["image"]
                                .as_str()
                                .unwrap_or_default()
                                .to_string(),
                            format!(
                                "{} ready={}",
                                p["status"]["phase"].as_str().unwrap_or_default(),
                                p["status"]["containerStatuses"][0]["ready"]
                            ),
                        )
                    })
                    .collect()
            })
            .unwrap_or_default()
    };
    let deadline = Instant::now() + READY_BOUND;
    let pods = loop {
        let pods = api
            .json(&["get", "pods", "-n", "kube-system"])
            .map(|p| images_of(&p))
            .unwrap_or_default();
        let running = CONTROL_PLANE.iter().all(|c| {
            pods.iter()
                .any(|(name, _, state)| name == c && state == "Running ready=true")
        });
        if running {
            break pods;
        }
        assert!(
            Instant::now() < deadline,
            "the control plane's pods: {pods:?}\n{}",
            api.text(&["get", "events", "-n", "kube-system"])
        );
        std::thread::sleep(Duration::from_secs(3));
    };
    tl.marks
        .push(("static pods Running and ready".to_string(), vm.elapsed()));
    for (component, image, _) in &pods {
        if component == "etcd" {
            assert!(image.ends_with("-confboot"), "etcd is ours: {image}");
        } else if CONTROL_PLANE.contains(&component.as_str()) {
            assert!(
                image.ends_with(&format!("/{component}:{KUBERNETES_VERSION}")),
                "{component}: {image}"
            );
        }
    }
    let node = api.json(&["get", "node", NODE_NAME]).expect("the Node");
    assert_eq!(
        node["status"]["nodeInfo"]["kubeletVersion"], KUBERNETES_VERSION,
        "{}",
        node["status"]["nodeInfo"]
    );
    assert!(
        node["metadata"]["labels"]
            .as_object()
            .is_some_and(|l| l.contains_key("node-role.kubernetes.io/control-plane")),
        "kubeadm marked the node a control plane: {}",
        node["metadata"]["labels"]
    );
    // kubeadm's bootstrap-token plumbing, which joins stand on.
    let cluster_info = api.json(&["get", "configmap", "cluster-info", "-n", "kube-public"]);
    assert!(
        cluster_info.is_some_and(|c| c["data"]["kubeconfig"].is_string()),
        "kubeadm made cluster-info"
    );
    let serial = vm.serial();
    assert!(
        serial.contains("kubeadm kept the admin kubeconfig Init returned"),
        "kubeadm kept the CA and kubeconfig made at Init\n{}",
        vm.failure_report()
    );
    println!("[node] {}", imported.trim());
    println!("[node] {}", init.trim());
    tl.print();
    println!(
        "{}",
        api.text(&["get", "nodes,pods", "-A", "-o", "wide"])
            .trim_end()
    );
    drop(vm);
    println!(
        "vm_kubeadm_init: {:.1} s in all",
        t0.elapsed().as_secs_f64()
    );
}
