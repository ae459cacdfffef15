//! A VM node becomes a `Ready` node of a real Kubernetes cluster.
//!
//! The node is a QEMU VM (software emulation, OVMF measured boot, its own
//! swtpm) booting the PRODUCTION initramfs and the PRODUCTION OS image
//! (`os/build.sh --production`: kubelet, kubeadm, containerd, runc, the CNI
//! plugins, the pause image) as its dm-verity root. The control plane is
//! real and runs on the host as processes (`confboot_tests::kube`: etcd,
//! kube-apiserver, kube-controller-manager at the pinned release); so does
//! joinsvc, as the control plane's ServiceAccount with the Role
//! `deploy/kubernetes/joinsvc.yaml` ships (on the host, not in a pod: a
//! control plane under software emulation is too slow to host it). The
//! guest reaches both through QEMU's guestfwd on 10.0.2.100 (joinsvc on
//! 9090, the API server on 6443, forwarded to their loopback ports); the
//! API server's serving certificate, the cluster's `controlPlaneEndpoint`,
//! `cluster-info`'s kubeconfig and the ticket's endpoint all name
//! 10.0.2.100:6443.
//!
//! The node attests to joinsvc, gets its ticket (disk key, bootstrap token,
//! CA hash, endpoint), opens its state disk, hands over to its verified OS;
//! there systemd starts containerd, imports the pause image and runs the
//! cluster step, which runs the REAL `kubeadm join` with the ticket's token,
//! CA hash and endpoint: discovery through the signed `cluster-info`, the
//! kubelet's TLS bootstrap (a CSR the controller manager approves and
//! signs). The test then asks the real API server (`kubectl get node -o
//! json`) until the Node exists and is `Ready`, and prints the timeline
//! from QEMU's start to `Ready`.
//!
//! Then a pod runs on it: the pause image of the OS image (never pulled;
//! no scheduler runs, so the pod names the node), through the kubelet, the
//! image's containerd and runc and the CNI bridge, until the API server
//! reports it `Running` with an address of the node's pod range.
//!
//! Before the boot it reads the image (unsquashfs): the node parts, their
//! units, the CNI configuration and the kernel modules are there, its
//! kubeadm is the one `scripts/kubernetes.sh` built, and no test unit or
//! test file is (this replaces the former `vm_os_production.rs`, which
//! built the same image and ran its pause image with containerd on the
//! host).
//!
//! Needs root, the musl release binaries (scripts/test.sh builds them, the
//! pause program among them), the Kubernetes parts (scripts/kubernetes.sh),
//! mmdebstrap and squashfs-tools, and the Debian packages boot.rs needs.

use std::process::Command;
use std::time::{Duration, Instant};

use confboot_tests::cluster::{JoinsvcSetup, RealApi, TempDir};
use confboot_tests::kube::{ControlPlane, KUBERNETES_VERSION, PlaneOptions, parts_dir};
use confboot_tests::os::{CLUSTER_STEP_DROP_IN, OsImage, TEST_UNITS};
use confboot_tests::qemu::{
    GUEST_FORWARD_ADDR, Image, JOIN_PORT, JoinsvcTpm, NodeFiles, Vm, args_param, golden_boot,
    measure_image, node_args,
};
use confboot_tests::{musl_binary, require_program};
use serde_json::Value;

/// What the production image must carry, as paths in the squashfs.
const PRODUCTION_FILES: [&str; 19] = [
    "/usr/bin/nodeagent",
    "/usr/bin/kubelet",
    "/usr/bin/kubeadm",
    "/usr/bin/containerd",
    "/usr/bin/containerd-shim-runc-v2",
    "/usr/bin/ctr",
    "/usr/sbin/runc",
    "/usr/lib/cni/bridge",
    "/usr/lib/cni/host-local",
    "/usr/lib/cni/loopback",
    "/usr/lib/confboot/images/pause.tar",
    "/etc/containerd/config.toml",
    "/etc/cni/net.d/10-confboot.conflist",
    "/etc/modules-load.d/kubernetes.conf",
    "/etc/systemd/system/multi-user.target.wants/containerd.service",
    "/etc/systemd/system/multi-user.target.wants/kubelet.service",
    "/etc/systemd/system/multi-user.target.wants/confboot-images.service",
    "/etc/systemd/system/confboot-cluster-step.service.d/10-kubernetes.conf",
    "/etc/sysctl.d/90-kubernetes.conf",
];

/// The guest port the node reaches the API server at (forwarded to the
/// host's loopback port of the control plane).
const API_PORT: u16 = 6443;
/// Bound for one console line of the node (OVMF, the kernel, systemd,
/// containerd and kubeadm under TCG on two shared cores).
const LINE_BOUND: Duration = Duration::from_secs(900);
/// Bound from the cluster step's end to the Node being `Ready`, and from
/// the pod's creation to its `Running`.
const READY_BOUND: Duration = Duration::from_secs(600);
/// The node's name (QEMU's DHCP gives it as the host name).
const NODE_NAME: &str = "confboot-node-1";
/// Guest memory: the kubelet and containerd beside systemd. The firmware
/// measures the memory map, so the fidelity boot (and the prediction) use
/// the same size.
const MEMORY_MIB: u32 = 1024;

/// A timeline: seconds since QEMU started, one line per phase.
struct Timeline {
    marks: Vec<(String, Duration)>,
}

/// The console lines that end a node's boot early: what it waits for will
/// not come.
const FAILED: [&str; 4] = [
    "refused this node",
    "cluster step: FAILED",
    "CONFBOOT-ERROR",
    "Kernel panic",
];

impl Timeline {
    /// Waits for `pattern` on `vm`'s console and records when it came;
    /// panics with the console, joinsvc's log and the control plane's
    /// when it does not come or the node fails first.
    fn wait(
        &mut self,
        vm: &mut Vm,
        pattern: &str,
        phase: &str,
        logs: &dyn Fn() -> String,
    ) -> String {
        let deadline = Instant::now() + LINE_BOUND;
        loop {
            let serial = vm.serial();
            if let Some(line) = serial.lines().find(|l| l.contains(pattern)) {
                self.mark(vm, phase);
                eprintln!(
                    "[node] {pattern:?} after {:.1} s",
                    vm.elapsed().as_secs_f64()
                );
                return line.trim_end().to_string();
            }
            let failed = FAILED.iter().find(|f| serial.contains(*f));
            if failed.is_some() || Instant::now() > deadline {
                panic!(
                    "[node] no {pattern:?} ({}):\n{}\n{}",
                    failed.map_or("its deadline passed".to_string(), |f| format!(
                        "{f:?} came first"
                    )),
                    vm.failure_report(),
                    logs()
                );
            }
            std::thread::sleep(Duration::from_millis(500));
        }
    }

    fn mark(&mut self, vm: &Vm, phase: &str) {
        self.marks.push((phase.to_string(), vm.elapsed()));
    }

    fn print(&self) {
        for (phase, at) in &self.marks {
            println!("[node] +{:6.1} s  {phase}", at.as_secs_f64());
        }
    }
}

/// The node's `Ready` condition as the API server reports it: `Some(status,
/// reason: message)` once the Node exists.
fn ready_condition(plane: &ControlPlane, name: &str) -> Option<(String, String)> {
    let out = plane
        .kubectl_command(&["get", "node", name, "-o", "json"])
        .output()
        .expect("run kubectl");
    if !out.status.success() {
        return None;
    }
    let node: Value = serde_json::from_slice(&out.stdout).expect("kubectl's JSON");
    node["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == "Ready")
        .map(|c| {
            (
                c["status"].as_str().unwrap_or_default().to_string(),
                format!(
                    "{}: {}",
                    c["reason"].as_str().unwrap_or_default(),
                    c["message"].as_str().unwrap_or_default()
                ),
            )
        })
}

/// The pause image's name in the OS image (what containerd's config pins).
fn pause_image() -> String {
    let out = Command::new(parts_dir().join("kubeadm"))
        .args([
            "config",
            "images",
            "list",
            "--kubernetes-version",
            KUBERNETES_VERSION,
        ])
        .output()
        .expect("run kubeadm");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .find(|l| l.contains("/pause:"))
        .expect("kubeadm names a pause image")
        .to_string()
}

#[test]
fn vm_node_joins_a_real_control_plane_and_becomes_ready() {
    require_program("mmdebstrap", "mmdebstrap");
    require_program("unsquashfs", "squashfs-tools");
    let uid = std::os::unix::fs::MetadataExt::uid(&std::fs::metadata("/proc/self").expect("/proc"));
    assert_eq!(uid, 0, "os/build.sh needs root");
    let t0 = Instant::now();
    let bootstrapper = musl_binary("bootstrapper");
    let joinsvc_bin = musl_binary("joinsvc");
    let cli = musl_binary("confboot");
    let kube_bin = parts_dir();
    let work = TempDir::new("vm-kubernetes");
    let admin = work.path().join("admin");
    std::fs::create_dir_all(&admin).unwrap();
    let joinsvc_tpm = JoinsvcTpm::new(work.path());

    // The production initramfs and the production OS image.
    let t = Instant::now();
    let image =
        Image::build_production("vm-kubernetes", &bootstrapper).unwrap_or_else(|e| panic!("{e}"));
    let os = OsImage::build_production("vm-kubernetes", kube_bin).unwrap_or_else(|e| panic!("{e}"));
    println!("{}", os.build_log.trim_end());
    let listing = Command::new("unsquashfs")
        .args(["-lc", "-d", ""])
        .arg(&os.root)
        .output()
        .expect("run unsquashfs");
    let listing = String::from_utf8_lossy(&listing.stdout).into_owned();
    let files: Vec<&str> = listing.lines().collect();
    for path in PRODUCTION_FILES {
        assert!(files.contains(&path), "the production image has no {path}");
    }
    for unit in TEST_UNITS {
        assert!(
            !listing.contains(unit),
            "the production image carries the test unit {unit}"
        );
    }
    assert!(
        !listing.contains("confboot-test") && !listing.contains(CLUSTER_STEP_DROP_IN),
        "the production image carries test files"
    );
    assert!(
        files
            .iter()
            .any(|f| f.starts_with("/usr/lib/modules/") && f.ends_with("/overlay.ko")),
        "the production image has the kernel's overlay module"
    );
    // Its kubeadm is the one scripts/kubernetes.sh built (the API server
    // reports the kubelet's release below).
    let extracted = work.path().join("extracted");
    let unsquashed = Command::new("unsquashfs")
        .args(["-q", "-n", "-f", "-d"])
        .arg(&extracted)
        .arg(&os.root)
        .arg("usr/bin/kubeadm")
        .status()
        .expect("run unsquashfs");
    assert!(unsquashed.success());
    assert_eq!(
        std::fs::read(extracted.join("usr/bin/kubeadm")).unwrap(),
        std::fs::read(kube_bin.join("kubeadm")).unwrap(),
        "the image's kubeadm is the built one"
    );
    println!(
        "phase images: {:.1} s (OS image {} bytes)",
        t.elapsed().as_secs_f64(),
        std::fs::metadata(&os.root).unwrap().len()
    );

    // The real control plane on the host, serving the guests at
    // 10.0.2.100:6443.
    let node_endpoint = format!("{GUEST_FORWARD_ADDR}:{API_PORT}");
    let plane = ControlPlane::start_with(&PlaneOptions {
        node_endpoint: Some(node_endpoint.clone()),
    });
    println!(
        "phase control plane: ready in {:.1} s",
        plane.started_in().as_secs_f64()
    );
    let token = plane.joinsvc_account("kube-system", &[]);

    // One node; its command line and the measurements it boots with.
    let node = NodeFiles::new(work.path(), "node1");
    let args = node_args(None, &joinsvc_tpm.trust(), &[]);
    let cmdline = format!("{} {}", args_param(&args), os.cmdline);
    let (predicted, _) = measure_image(&cli, &image, &cmdline, &admin);
    let t = Instant::now();
    let measured = golden_boot(&image.kernel, &image.initrd, &cmdline);
    for (pcr, want) in predicted.entries() {
        assert_eq!(
            measured.pcrs[pcr], want.value,
            "PCR {pcr}: the boot differs from confboot measure's prediction"
        );
    }
    println!("phase fidelity boot: {:.1} s", t.elapsed().as_secs_f64());

    // joinsvc on the host, as a control plane's pod would run: the
    // ServiceAccount's token, the cluster's PKI, the node endpoint in its
    // tickets.
    let setup = JoinsvcSetup {
        pinned_aks: vec![node.ak.clone()],
        real_api: Some(RealApi {
            url: plane.url(),
            ca_pem: plane.ca_pem(),
            token,
            pki_dir: plane.pki_dir(),
            endpoint: node_endpoint.clone(),
            namespace: "kube-system".to_string(),
        }),
        ..JoinsvcSetup::new()
    };
    let (joinsvc, _joinsvc_swtpm) = measured.joinsvc_as_node(
        &joinsvc_bin,
        &predicted,
        setup,
        &joinsvc_tpm,
        &admin.join("measurements.events.json"),
    );

    // The node: attests, joins, hands over; its OS runs the real kubeadm join.
    let mut config = node.config(&image, &cmdline);
    config.root_disk = Some(os.root.clone());
    config.memory_mib = MEMORY_MIB;
    config.dhcp_host_name = Some(NODE_NAME.to_string());
    config.host_ports = vec![
        (JOIN_PORT, joinsvc.rpc_addr.port()),
        (API_PORT, plane.endpoint().port()),
    ];
    let logs = || {
        let tail = |lines: Vec<String>| lines[lines.len().saturating_sub(40)..].join("\n");
        format!(
            "== joinsvc\n{}\n== control plane (tail)\n{}",
            tail(joinsvc.process.log()),
            tail(plane.logs().lines().map(String::from).collect())
        )
    };
    let mut vm = Vm::boot(config);
    let mut tl = Timeline { marks: Vec::new() };
    tl.mark(&vm, "QEMU started");
    tl.wait(
        &mut vm,
        "CONFBOOT-INIT",
        "firmware and kernel: PID 1 runs",
        &logs,
    );
    tl.wait(
        &mut vm,
        "ticket received",
        "attested: join ticket received",
        &logs,
    );
    let bootstrapped = tl.wait(
        &mut vm,
        "bootstrapped (Joined)",
        "state disk open: bootstrapped",
        &logs,
    );
    tl.wait(
        &mut vm,
        "CONFBOOT-SWITCH-ROOT",
        "switch_root to the OS",
        &logs,
    );
    let joined = tl.wait(
        &mut vm,
        "cluster step: kubeadm join succeeded",
        "cluster step: kubeadm join done",
        &logs,
    );
    let deadline = Instant::now() + READY_BOUND;
    let mut last = None;
    loop {
        let ready = ready_condition(&plane, NODE_NAME);
        if ready.as_ref().is_some_and(|(status, _)| status == "True") {
            tl.mark(&vm, "Node Ready (the API server)");
            break;
        }
        if ready != last {
            eprintln!(
                "[node] +{:.1} s Ready: {ready:?}",
                vm.elapsed().as_secs_f64()
            );
            last = ready;
        }
        assert!(
            Instant::now() < deadline,
            "the Node {NODE_NAME} is not Ready within {READY_BOUND:?}: {last:?}\n{}\n{}\n{}",
            plane
                .kubectl_command(&["get", "nodes", "-o", "wide"])
                .output()
                .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
                .unwrap_or_default(),
            vm.failure_report(),
            logs()
        );
        std::thread::sleep(Duration::from_secs(2));
    }
    println!("[node] {}", bootstrapped.trim());
    println!("[node] {}", joined.trim());
    println!(
        "{}",
        plane.kubectl(&["get", "nodes", "-o", "wide"]).trim_end()
    );

    // What the API server knows of the node: the kubelet of the pinned
    // release, containerd 2, the node's address.
    let node_json = plane.kubectl_json(&["get", "node", NODE_NAME]);
    let info = &node_json["status"]["nodeInfo"];
    assert_eq!(info["kubeletVersion"], KUBERNETES_VERSION, "{info}");
    assert!(
        info["containerRuntimeVersion"]
            .as_str()
            .is_some_and(|v| v.starts_with("containerd://2.")),
        "{info}"
    );
    assert!(
        node_json["status"]["addresses"]
            .as_array()
            .is_some_and(|a| a.iter().any(|a| a["address"] == "10.0.2.15")),
        "the node's address: {}",
        node_json["status"]["addresses"]
    );
    // A pod on the node: the OS image's pause image (imported at boot,
    // never pulled), run by the kubelet through the image's containerd and
    // runc in a network namespace of the CNI bridge. No scheduler runs: the
    // pod names its node.
    let pause = pause_image();
    let pod = serde_json::json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "confboot-pause", "namespace": "default"},
        "spec": {
            "nodeName": NODE_NAME,
            "automountServiceAccountToken": false,
            "tolerations": [{"operator": "Exists"}],
            "containers": [{
                "name": "pause",
                "image": pause,
                "imagePullPolicy": "Never",
            }],
        },
    });
    let manifest = work.path().join("pod.json");
    std::fs::write(&manifest, pod.to_string()).unwrap();
    let deadline = Instant::now() + READY_BOUND;
    // The ServiceAccount admission wants the namespace's default account,
    // which the controller manager makes.
    while plane
        .kubectl_command(&["create", "-f", manifest.to_str().unwrap()])
        .output()
        .is_ok_and(|o| !o.status.success())
    {
        assert!(Instant::now() < deadline, "the pod is never admitted");
        std::thread::sleep(Duration::from_secs(1));
    }
    let created = vm.elapsed();
    let mut last = String::new();
    let pod_ip = loop {
        let pod = plane.kubectl_json(&["get", "pod", "confboot-pause", "-n", "default"]);
        let phase = pod["status"]["phase"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        if phase == "Running" {
            break pod["status"]["podIP"]
                .as_str()
                .unwrap_or_default()
                .to_string();
        }
        let state = format!("{phase} {}", pod["status"]["containerStatuses"]);
        if state != last {
            eprintln!("[node] +{:.1} s pod: {state}", vm.elapsed().as_secs_f64());
            last = state;
        }
        assert!(
            Instant::now() < deadline,
            "the pod never ran: {last}\n{}\n{}",
            plane.kubectl(&["get", "events", "-n", "default"]),
            vm.failure_report()
        );
        std::thread::sleep(Duration::from_secs(2));
    };
    tl.mark(&vm, "pod Running (the API server)");
    println!(
        "[node] pod confboot-pause ({pause}) Running at {pod_ip}, {:.1} s after its creation",
        (vm.elapsed() - created).as_secs_f64()
    );
    assert!(
        pod_ip.starts_with("10.244.0."),
        "the pod's address is of the node's pod range: {pod_ip:?}"
    );
    tl.print();

    let serial = vm.serial();
    assert!(
        !serial.contains("kubeadm-double") && !serial.contains("CONFBOOT-KUBEADM"),
        "no kubeadm double ran\n{}",
        vm.failure_report()
    );
    println!(
        "{}",
        plane
            .kubectl(&["get", "nodes,pods", "-A", "-o", "wide"])
            .trim_end()
    );
    drop(joinsvc);
    drop(vm);
    drop(plane);
    println!("vm_kubernetes: {:.1} s in all", t0.elapsed().as_secs_f64());
}
