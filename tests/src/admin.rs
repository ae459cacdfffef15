//! The admin's side of the VM tests: the host's real OpenSSH client
//! logging in to a guest, and the real `confboot` CLI verifying or
//! initializing a node behind a host forward.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use crate::qemu::Vm;

/// The guest's SSH server (dropbear in the test initramfs, OpenSSH's sshd in the OS).
pub const SSH_PORT: u16 = 22;
/// Bound for one SSH login, retries included (the server starts just
/// before the node agent; key exchange under TCG takes a moment).
pub const SSH_BOUND: Duration = Duration::from_secs(90);

/// Makes an ed25519 key pair with the host's `ssh-keygen` at `path`
/// (`path.pub` is the public key); returns the public key line.
pub fn ssh_keygen(path: &Path) -> String {
    let out = Command::new("ssh-keygen")
        .args(["-q", "-t", "ed25519", "-N", "", "-C", "admin@host", "-f"])
        .arg(path)
        .output()
        .expect("run ssh-keygen (Debian openssh-client)");
    assert!(out.status.success(), "{out:?}");
    std::fs::read_to_string(path.with_extension("pub"))
        .unwrap()
        .trim_end()
        .to_string()
}

/// Runs `command` as `user` on the guest behind host port `port` with the
/// host's real `ssh` client and the private key `key` only. Retries while
/// the connection itself fails (the server may not listen yet); returns
/// the exit status and output of the last attempt: a login, or a refusal
/// of the key.
pub fn ssh_run(port: u16, key: &Path, user: &str, command: &str) -> (Option<i32>, String, String) {
    let start = Instant::now();
    loop {
        let out = Command::new("ssh")
            .args(["-p", &port.to_string(), "-i"])
            .arg(key)
            .args([
                "-o",
                "BatchMode=yes",
                "-o",
                "StrictHostKeyChecking=no",
                "-o",
                "UserKnownHostsFile=/dev/null",
                "-o",
                "IdentitiesOnly=yes",
                "-o",
                "ConnectTimeout=20",
                "-o",
                "LogLevel=ERROR",
                &format!("{user}@127.0.0.1"),
                command,
            ])
            .stdin(std::process::Stdio::null())
            .output()
            .expect("run ssh (Debian openssh-client)");
        let (stdout, stderr) = (
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        );
        let answered = out.status.code() != Some(255) || stderr.contains("Permission denied");
        if answered || start.elapsed() > SSH_BOUND {
            return (out.status.code(), stdout, stderr);
        }
        std::thread::sleep(Duration::from_millis(500));
    }
}

/// Logs in as `user` with `key` and checks who the shell runs as (its
/// name, home and user id, as the SSH server set them up).
pub fn assert_ssh_login(vm: &Vm, port: u16, key: &Path, user: &str) -> Duration {
    let t = Instant::now();
    let (code, stdout, stderr) = ssh_run(port, key, user, "echo \"$USER $HOME $(id -u)\"");
    // The first free id of a root that has root only.
    assert_eq!(
        (code, stdout.as_str()),
        (Some(0), format!("{user} /home/{user} 1000\n").as_str()),
        "ssh login as {user}: {stderr}\n{}",
        vm.failure_report()
    );
    t.elapsed()
}

/// What the node agent logs once its verify service answers.
pub const AGENT_LISTENING: &str = "verify service listening on";

/// Runs `confboot verify` against a node's verify service (a host
/// forward) from the admin directory `admin` (its cluster file gives the
/// cluster id), with the policy and predicted events named.
pub fn verify_node(
    cli: &Path,
    admin: &Path,
    port: u16,
    measurements: &str,
    events: &str,
    ak: &[u8],
) -> (Option<i32>, String) {
    let out = Command::new(cli)
        .args(["verify", "--node", &format!("127.0.0.1:{port}")])
        .args(["--measurements", measurements, "--expected-events", events])
        .args([
            "--ak-trust",
            &format!("pinned:{}", confboot_util::hex::encode(ak)),
        ])
        .current_dir(admin)
        .output()
        .expect("run confboot verify");
    let shown = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.code(), shown)
}

/// Runs `confboot COMMAND --node 127.0.0.1:PORT` in the admin directory,
/// the CLI verifying the node against `measurements` (a file there) and its
/// pinned AK `ak`, with `extra` arguments.
pub fn admin_cli(
    cli: &Path,
    admin: &Path,
    command: &str,
    port: u16,
    measurements: &str,
    ak: &[u8],
    extra: &[&str],
) -> std::process::Output {
    let ak_file = admin.join(format!("ak-{port}"));
    std::fs::write(&ak_file, confboot_util::hex::encode(ak)).unwrap();
    Command::new(cli)
        .args([command, "--node", &format!("127.0.0.1:{port}")])
        .args(["--measurements", measurements])
        .args(["--ak-trust", &format!("pinned:{}", ak_file.display())])
        .args(extra)
        .current_dir(admin)
        .output()
        .unwrap()
}

/// Sum of `joinsvc_tickets_refused_total{reason="<reason>"}` in a /metrics body.
pub fn refused(metrics: &str, reason: &str) -> u64 {
    let prefix = format!("joinsvc_tickets_refused_total{{reason=\"{reason}\"}} ");
    metrics
        .lines()
        .filter_map(|l| l.strip_prefix(&prefix))
        .filter_map(|n| n.trim().parse::<u64>().ok())
        .sum()
}

/// The admin's directory of a VM test: the init secret (`init-secret`),
/// its hash for the nodes' command line, the SSH user `alice` with a key
/// made by the host's `ssh-keygen` (in `ssh-users.json`, as `confboot init
/// --ssh-users` takes it) and a key that is configured nowhere.
pub struct AdminFiles {
    /// The directory (the CLI runs in it).
    pub dir: std::path::PathBuf,
    /// `--init-secret-hash` for the nodes.
    pub init_secret_hash: String,
    /// alice's private key.
    pub alice_key: std::path::PathBuf,
    /// alice's public key line.
    pub alice_pub: String,
    /// A private key no node knows.
    pub stranger_key: std::path::PathBuf,
}

impl AdminFiles {
    /// Makes `work/admin` with `init_secret`.
    pub fn new(work: &Path, init_secret: &str) -> AdminFiles {
        use confboot_kms::init_secret;
        let dir = work.join("admin");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("init-secret"), init_secret).unwrap();
        let init_secret_hash =
            init_secret::hash(init_secret.as_bytes(), init_secret::MIN_ITERATIONS);
        let alice_key = dir.join("id_alice");
        let alice_pub = ssh_keygen(&alice_key);
        let stranger_key = dir.join("id_stranger");
        ssh_keygen(&stranger_key);
        std::fs::write(
            dir.join("ssh-users.json"),
            serde_json::json!({"sshUsers": [{"username": "alice", "publicKey": alice_pub}]})
                .to_string(),
        )
        .unwrap();
        AdminFiles {
            dir,
            init_secret_hash,
            alice_key,
            alice_pub,
            stranger_key,
        }
    }

    /// `confboot init` of the node behind host port `port` (its AK `ak`)
    /// with the init secret and the SSH users, verified against
    /// `measurements.json`.
    pub fn init(&self, cli: &Path, port: u16, ak: &[u8]) -> std::process::Output {
        admin_cli(
            cli,
            &self.dir,
            "init",
            port,
            "measurements.json",
            ak,
            &[
                "--init-secret-file",
                "init-secret",
                "--ssh-users",
                "ssh-users.json",
            ],
        )
    }
}
