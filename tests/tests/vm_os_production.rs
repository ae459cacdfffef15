//! The PRODUCTION node image (`os/build.sh --production`): the OS a node
//! boots into once it is bootstrapped, carrying Kubernetes' node parts.
//!
//! The image is built from the parts `scripts/kubernetes.sh` built (kubelet,
//! kubeadm, containerd, its runc shim and ctr), Debian's runc and CNI
//! plugins, and the pause image packed here from `os/pause`. The test reads
//! the squashfs (unsquashfs): the parts and the units that start them are
//! there, the kubeadm is the real one at the pinned release, no test unit or
//! double is; containerd's configuration pins the pause image kubeadm
//! expects (`kubeadm config images list`). Then the image's own bytes run:
//! the real containerd imports the image's pause tarball under that name
//! with ctr, runs it with the image's runc as a container (the pause
//! program is PID 1 of its PID namespace there), and SIGTERM stops it with
//! status 0.
//!
//! Needs root, the musl release binaries (scripts/test.sh builds them, the
//! pause program among them), the Kubernetes parts (scripts/kubernetes.sh)
//! and mmdebstrap and squashfs-tools (scripts/setup.sh installs them).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Instant;

use confboot_tests::cluster::TempDir;
use confboot_tests::kube::{KUBERNETES_VERSION, parts_dir};
use confboot_tests::os::{OsImage, TEST_UNITS};
use confboot_tests::{ChildProcess, require_program};

/// What the production image must carry, as paths in the squashfs.
const PRODUCTION_FILES: [&str; 16] = [
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
    "/etc/systemd/system/multi-user.target.wants/containerd.service",
    "/etc/systemd/system/multi-user.target.wants/kubelet.service",
    "/etc/systemd/system/multi-user.target.wants/confboot-images.service",
    "/etc/systemd/system/confboot-cluster-step.service.d/10-kubernetes.conf",
];

/// Runs a command to its end; panics with its output if it fails.
fn run(what: &str, command: &mut Command) -> Output {
    let out = command
        .output()
        .unwrap_or_else(|e| panic!("cannot run {what}: {e}"));
    assert!(
        out.status.success(),
        "{what} failed ({}):\n{}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// Every path in the image's squashfs (the verity tree after it is ignored).
fn listing(image: &Path) -> BTreeSet<String> {
    let out = run(
        "unsquashfs -lc",
        Command::new("unsquashfs")
            .arg("-lc")
            .arg("-d")
            .arg("")
            .arg(image),
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_string)
        .collect()
}

/// Extracts `paths` (relative to the root) of the image into `dir`.
fn extract(image: &Path, dir: &Path, paths: &[&str]) {
    run(
        "unsquashfs",
        Command::new("unsquashfs")
            .arg("-q")
            .arg("-n")
            .arg("-f")
            .arg("-d")
            .arg(dir)
            .arg(image)
            .args(paths),
    );
}

/// A containerd of the built parts, on its own socket and directories.
struct Containerd {
    socket: PathBuf,
    _process: ChildProcess,
    _dir: TempDir,
}

impl Containerd {
    fn start(kube_bin: &Path) -> Containerd {
        let dir = TempDir::new("containerd");
        let socket = dir.path().join("containerd.sock");
        let config = dir.path().join("config.toml");
        std::fs::write(
            &config,
            format!(
                "version = 3\nroot = '{root}'\nstate = '{state}'\n\
                 disabled_plugins = ['io.containerd.grpc.v1.cri']\n\
                 [grpc]\n  address = '{socket}'\n[ttrpc]\n  address = '{socket}.ttrpc'\n",
                root = dir.path().join("root").display(),
                state = dir.path().join("state").display(),
                socket = socket.display(),
            ),
        )
        .expect("write containerd's config");
        let path = format!(
            "{}:{}",
            kube_bin.display(),
            std::env::var("PATH").unwrap_or_default()
        );
        let mut command = Command::new(kube_bin.join("containerd"));
        command.arg("--config").arg(&config).env("PATH", path);
        let process = ChildProcess::spawn("containerd", command);
        process.wait_for_line("containerd successfully booted", 6000);
        Containerd {
            socket,
            _process: process,
            _dir: dir,
        }
    }

    fn ctr(&self, kube_bin: &Path) -> Command {
        let mut command = Command::new(kube_bin.join("ctr"));
        command
            .arg("--address")
            .arg(&self.socket)
            .arg("--namespace")
            .arg("k8s.io");
        command
    }
}

#[test]
fn the_production_image_carries_kubernetes_and_runs_its_pause_image() {
    require_program("mmdebstrap", "mmdebstrap");
    require_program("unsquashfs", "squashfs-tools");
    let uid = std::os::unix::fs::MetadataExt::uid(&std::fs::metadata("/proc/self").expect("/proc"));
    assert_eq!(uid, 0, "os/build.sh and containerd need root");
    let kube_bin = parts_dir();

    let started = Instant::now();
    let os = OsImage::build_production("os-production", kube_bin).unwrap_or_else(|e| panic!("{e}"));
    let size = std::fs::metadata(&os.root).expect("root.img").len();
    println!(
        "production image: {} bytes, built in {:.0} s\n{}",
        size,
        started.elapsed().as_secs_f64(),
        os.build_log
    );

    // What it carries, and what it must not.
    let files = listing(&os.root);
    for path in PRODUCTION_FILES {
        assert!(files.contains(path), "the production image has no {path}");
    }
    for unit in TEST_UNITS {
        assert!(
            !files.iter().any(|f| f.ends_with(unit)),
            "the production image carries the test unit {unit}"
        );
    }
    assert!(
        !files.iter().any(|f| f.contains("confboot-test")),
        "the production image carries test files"
    );

    let dir = TempDir::new("os-production");
    let root = dir.path().join("root");
    extract(
        &os.root,
        &root,
        &[
            "usr/bin/kubeadm",
            "usr/sbin/runc",
            "usr/lib/confboot/images/pause.tar",
            "etc/containerd/config.toml",
        ],
    );
    // The real kubeadm, the one scripts/kubernetes.sh built, at the pinned release.
    let kubeadm = root.join("usr/bin/kubeadm");
    assert_eq!(
        std::fs::read(&kubeadm).expect("the image's kubeadm"),
        std::fs::read(kube_bin.join("kubeadm")).expect("the built kubeadm"),
        "the image's kubeadm is the built one"
    );
    let version = run(
        "kubeadm version",
        Command::new(&kubeadm).args(["version", "-o", "short"]),
    );
    assert_eq!(
        String::from_utf8_lossy(&version.stdout).trim(),
        KUBERNETES_VERSION
    );
    // containerd's sandbox image is the pause image kubeadm expects.
    let images = run(
        "kubeadm config images list",
        Command::new(&kubeadm).args([
            "config",
            "images",
            "list",
            "--kubernetes-version",
            KUBERNETES_VERSION,
        ]),
    );
    let pause = String::from_utf8_lossy(&images.stdout)
        .lines()
        .find(|l| l.contains("/pause:"))
        .expect("kubeadm names a pause image")
        .to_string();
    let config = std::fs::read_to_string(root.join("etc/containerd/config.toml")).expect("config");
    assert!(
        config.contains(&format!("sandbox = '{pause}'")),
        "containerd's config pins {pause}:\n{config}"
    );

    // The image's pause tarball, imported by the real containerd, run by the
    // image's runc.
    let containerd = Containerd::start(kube_bin);
    run(
        "ctr images import",
        containerd
            .ctr(kube_bin)
            .args(["images", "import", "--platform", "linux/amd64"])
            .arg(root.join("usr/lib/confboot/images/pause.tar")),
    );
    let listed = run(
        "ctr images ls",
        containerd.ctr(kube_bin).args(["images", "ls", "-q"]),
    );
    assert!(
        String::from_utf8_lossy(&listed.stdout)
            .lines()
            .any(|l| l == pause),
        "ctr lists {pause}: {}",
        String::from_utf8_lossy(&listed.stdout)
    );
    let mut command = containerd.ctr(kube_bin);
    command
        .args(["run", "--rm", "--runc-binary"])
        .arg(root.join("usr/sbin/runc"))
        .args([pause.as_str(), "confboot-pause"]);
    let sandbox = ChildProcess::spawn("ctr run", command);
    let mut running = false;
    for _ in 0..600 {
        let tasks = run("ctr task ls", containerd.ctr(kube_bin).args(["task", "ls"]));
        if String::from_utf8_lossy(&tasks.stdout)
            .lines()
            .any(|l| l.starts_with("confboot-pause") && l.contains("RUNNING"))
        {
            running = true;
            break;
        }
        assert!(
            sandbox.exited().is_none(),
            "the pause container stopped: {:?}",
            sandbox.log()
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    assert!(running, "the pause container runs: {:?}", sandbox.log());
    run(
        "ctr task kill",
        containerd
            .ctr(kube_bin)
            .args(["task", "kill", "--signal", "SIGTERM", "confboot-pause"]),
    );
    let (status, log) = sandbox.wait();
    assert!(
        status.success(),
        "the pause container ends with status 0 on SIGTERM ({status}): {log:?}"
    );
}
