//! The node's OS images of the tests: `os/build.sh` (Debian packages,
//! squashfs, dm-verity). The test image has the node agent, the
//! repository's units and the test units that report on the console, and
//! no Kubernetes: its cluster step is told so ([`CLUSTER_STEP_DROP_IN`]);
//! the production image (`--production`) has Kubernetes' node parts instead
//! (kubelet, kubeadm, containerd, runc, the CNI plugins, the pause image),
//! runs the real `kubeadm`, and has no test unit.

use std::path::{Path, PathBuf};
use std::process::Command;

/// The test units `os/test/*.service`, installed and enabled in the test OS image.
pub const TEST_UNITS: [&str; 4] = [
    "confboot-test-state.service",
    "confboot-test-ready.service",
    "confboot-test-handoff.service",
    "confboot-test-verity-cost.service",
];
/// A file of incompressible bytes the test OS image reads early at every
/// boot (`confboot-test-state.service`): squashfs stores it as it is, so a
/// test can find its bytes in the image and flip one.
pub const BOOT_READ_FILE: &str = "/usr/lib/confboot-test/boot-read";
/// Where the test image's drop-in for the cluster step goes
/// (`os/test/cluster-step.d/10-test.conf`: `nodeagent cluster-step
/// --without-kubernetes`).
pub const CLUSTER_STEP_DROP_IN: &str =
    "/etc/systemd/system/confboot-cluster-step.service.d/10-test.conf";
/// What the test image's cluster step says instead of running kubeadm
/// (followed by `init` or `join`).
pub const NO_KUBERNETES: &str = "this image carries no Kubernetes: kubeadm";
/// The console line of the OS once it reached multi-user.
pub const OS_READY: &str = "CONFBOOT-OS-MULTI-USER";

/// An OS image built by `os/build.sh`.
#[derive(Clone, Debug)]
pub struct OsImage {
    /// squashfs + verity superblock + hash tree.
    pub root: PathBuf,
    /// The `confboot.root*` words that pin it.
    pub cmdline: String,
    /// The root hash, hex.
    pub root_hash: String,
    /// The bytes of [`BOOT_READ_FILE`].
    pub boot_read_bytes: Vec<u8>,
    /// build.sh's output.
    pub build_log: String,
}

impl OsImage {
    /// The TEST OS image into `target/os/<label>`: the static node agent and
    /// CLI (the hash tree) of the release build, no Kubernetes (the cluster
    /// step's drop-in says so), the test units, and each `(source,
    /// destination)` of `add` (another root: another root hash).
    pub fn build_test(label: &str, add: &[(&Path, &str)]) -> Result<OsImage, String> {
        let repo = repo();
        let out = crate::target_dir().join("os").join(label);
        std::fs::create_dir_all(&out).map_err(|e| e.to_string())?;
        // Incompressible and the same on every build (a fixed seed).
        let mut rng = crate::XorShift::new(0x005e_ed0f_0b00_7000);
        let boot_read_bytes: Vec<u8> = (0..64 * 1024).map(|_| rng.next_u64() as u8).collect();
        let boot_read = out.join("boot-read");
        std::fs::write(&boot_read, &boot_read_bytes).map_err(|e| e.to_string())?;
        let mut cmd = build_command(&out);
        cmd.arg("--add")
            .arg(format!(
                "{}:{CLUSTER_STEP_DROP_IN}",
                repo.join("os/test/cluster-step.d/10-test.conf").display()
            ))
            .arg("--add")
            .arg(format!("{}:{BOOT_READ_FILE}", boot_read.display()));
        for (src, dest) in add {
            cmd.arg("--add").arg(format!("{}:{dest}", src.display()));
        }
        for unit in TEST_UNITS {
            cmd.arg("--unit").arg(repo.join("os/test").join(unit));
        }
        finish(cmd, &out, boot_read_bytes)
    }

    /// The PRODUCTION OS image into `target/os/<label>` (`os/build.sh
    /// --production`): the node agent, the repository's units, kubelet,
    /// kubeadm and containerd from `kube_bin` (what `scripts/kubernetes.sh`
    /// built), Debian's runc and CNI plugins, the pause image packed from
    /// the static release build of `os/pause`, and no double, no test unit.
    /// Its `boot_read_bytes` is empty (the file is a test image's).
    pub fn build_production(label: &str, kube_bin: &Path) -> Result<OsImage, String> {
        let out = crate::target_dir().join("os").join(label);
        std::fs::create_dir_all(&out).map_err(|e| e.to_string())?;
        let mut cmd = build_command(&out);
        cmd.arg("--production")
            .arg("--kube-bin")
            .arg(kube_bin)
            .arg("--pause")
            .arg(crate::musl_binary("pause"));
        finish(cmd, &out, Vec::new())
    }
}

/// The repository's top directory.
fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// `os/build.sh --out OUT` with the release build's node agent and CLI.
fn build_command(out: &Path) -> Command {
    let mut cmd = Command::new("bash");
    cmd.arg(repo().join("os/build.sh"))
        .arg("--out")
        .arg(out)
        .arg("--nodeagent")
        .arg(crate::musl_binary("nodeagent"))
        .arg("--verity-tool")
        .arg(crate::musl_binary("confboot"));
    cmd
}

/// Runs os/build.sh and reads what it wrote to `out`.
fn finish(mut cmd: Command, out: &Path, boot_read_bytes: Vec<u8>) -> Result<OsImage, String> {
    let output = cmd
        .output()
        .map_err(|e| format!("cannot run os/build.sh: {e}"))?;
    let log = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    if !output.status.success() {
        return Err(format!("os/build.sh failed ({}):\n{log}", output.status));
    }
    let cmdline = std::fs::read_to_string(out.join("root.cmdline"))
        .map_err(|e| format!("root.cmdline: {e}"))?
        .trim()
        .to_string();
    let root_hash = cmdline
        .split(' ')
        .find_map(|w| w.strip_prefix("confboot.root.hash="))
        .ok_or_else(|| format!("no confboot.root.hash in {cmdline:?}"))?
        .to_string();
    Ok(OsImage {
        root: out.join("root.img"),
        cmdline,
        root_hash,
        boot_read_bytes,
        build_log: log,
    })
}

impl OsImage {
    /// The same root with its hash tree built by `veritysetup format` (the
    /// oracle) from the image's squashfs, salt and superblock UUID, at
    /// `path`; panics when veritysetup fails.
    pub fn veritysetup_copy(&self, path: &Path) -> PathBuf {
        crate::require_program("veritysetup", "cryptsetup-bin");
        let offset = self.hash_offset();
        let image = std::fs::read(&self.root).expect("read the root image");
        std::fs::write(path, &image[..offset as usize]).expect("write the squashfs copy");
        // The superblock: "verity\0\0", version, hash type, then the UUID.
        let uuid = &image[offset as usize + 16..offset as usize + 32];
        let hex = confboot_util::hex::encode(uuid);
        let uuid = format!(
            "{}-{}-{}-{}-{}",
            &hex[..8],
            &hex[8..12],
            &hex[12..16],
            &hex[16..20],
            &hex[20..]
        );
        let word = |key: &str| -> String {
            self.cmdline
                .split(' ')
                .find_map(|w| w.strip_prefix(&format!("confboot.root.{key}=")))
                .unwrap_or_else(|| panic!("confboot.root.{key} in {}", self.cmdline))
                .to_string()
        };
        let out = Command::new("veritysetup")
            .arg("format")
            .arg(path)
            .arg(path)
            .arg(format!("--hash-offset={offset}"))
            .arg(format!("--data-blocks={}", word("blocks")))
            .arg(format!("--salt={}", word("salt")))
            .arg(format!("--uuid={uuid}"))
            .output()
            .expect("run veritysetup");
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "veritysetup format: {out:?}");
        assert!(
            text.contains(&self.root_hash),
            "veritysetup's root hash is the image's {}:\n{text}",
            self.root_hash
        );
        path.to_path_buf()
    }

    /// Whether `veritysetup verify` accepts the image's tree (it reads
    /// every block and checks the whole tree in user space).
    pub fn veritysetup_verifies(&self) -> bool {
        crate::require_program("veritysetup", "cryptsetup-bin");
        let offset = self.hash_offset().to_string();
        Command::new("veritysetup")
            .arg("verify")
            .arg(&self.root)
            .arg(&self.root)
            .arg(&self.root_hash)
            .arg(format!("--hash-offset={offset}"))
            .status()
            .expect("run veritysetup")
            .success()
    }

    /// A copy of the root image at `path` with the byte at `offset` flipped.
    pub fn tampered_copy(&self, path: &Path, offset: u64) -> PathBuf {
        let mut bytes = std::fs::read(&self.root).expect("read the root image");
        bytes[offset as usize] ^= 0xff;
        std::fs::write(path, bytes).expect("write the tampered root image");
        path.to_path_buf()
    }

    /// Where [`BOOT_READ_FILE`]'s bytes are in the root image (squashfs
    /// stores incompressible blocks as they are).
    pub fn boot_read_offset(&self) -> u64 {
        let bytes = std::fs::read(&self.root).expect("read the root image");
        let needle = &self.boot_read_bytes[4096..4096 + 64];
        bytes
            .windows(needle.len())
            .position(|w| w == needle)
            .expect("the boot-read file is stored uncompressed in the root image") as u64
    }

    /// The byte offset of the hash tree's top level: the last hash block of
    /// the image (veritysetup lays the levels out top level first after the
    /// superblock; a tree that fits one block has only that level).
    pub fn hash_offset(&self) -> u64 {
        self.cmdline
            .split(' ')
            .find_map(|w| w.strip_prefix("confboot.root.hashoffset="))
            .and_then(|n| n.parse().ok())
            .expect("confboot.root.hashoffset in the command line")
    }
}
