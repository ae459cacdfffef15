//! `confboot init`: verify the first node, send it the admin's Init, and
//! keep what comes back.

use std::path::Path;
use std::time::Duration;

use confboot_atls as atls;
use confboot_kms::{MasterSecret, init_secret};
use confboot_proto::DEFAULT_INIT_PORT;
use confboot_proto::init::{InitRequest, InitResponse, SshUserKey, init_response};
use confboot_util::args::{Command, Opt, VERBOSITY};
use ring::rand::SecureRandom;

use crate::common;

const CMD: Command = Command {
    name: "confboot init",
    about: "Initialize a new cluster on its first node. Verifies the node over attested TLS against\n\
            --measurements and --ak-trust (a vTPM node) or --snp-policy (an SEV-SNP node), as\n\
            --variants accepts (default qemu-vtpm; another variant is refused), generates the\n\
            master secret (or takes --master-secret), writes it to --master-secret-out (mode 0600)\n\
            before Init is sent, sends Init with the init secret, prints the node's progress, and writes the admin kubeconfig (mode 0600) and the cluster's\n\
            ids and measurement salt (--state-out).\n\
            --ssh-users FILE: SSH users the first control plane creates (and creates again at every\n\
            boot, from its state disk): {\"sshUsers\": [{\"username\": \"alice\", \"publicKey\": \"ssh-ed25519 AAAA...\"}]};\n\
            names [a-z_][a-z0-9_-]* (at most 32 bytes, no system account), one OpenSSH public key each\n\
            (ed25519, ECDSA, security keys, RSA of 2048 bits or more), at most 32 users. The file is\n\
            checked before anything is sent.",
    usage: "confboot init --node HOST[:PORT] --measurements FILE --ak-trust MODE --init-secret-file FILE [OPTIONS]\n       \
            confboot init --node HOST[:PORT] --variants sev-snp --snp-policy FILE --init-secret-file FILE [OPTIONS]",
    opts: &[
        Opt::value(
            "node",
            "HOST[:PORT]",
            "The first node's init API (default port 9000)",
        ),
        common::MEASUREMENTS,
        common::AK_TRUST,
        common::EXPECTED_EVENTS,
        common::VARIANTS,
        common::SNP_POLICY,
        Opt::value(
            "init-secret-file",
            "FILE",
            "The init secret (the node knows its hash)",
        ),
        Opt::value(
            "master-secret",
            "FILE",
            "Use this master secret instead of generating one",
        ),
        Opt::value(
            "master-secret-out",
            "FILE",
            "Where the generated master secret is written",
        )
        .default("confboot-mastersecret.json"),
        Opt::value(
            "kubeconfig-out",
            "FILE",
            "Where the admin kubeconfig is written",
        )
        .default("confboot-admin.conf"),
        Opt::value(
            "state-out",
            "FILE",
            "Where cluster id, owner id and measurement salt are written",
        )
        .default("confboot-cluster.json"),
        Opt::value(
            "ssh-users",
            "FILE",
            "SSH users to create on the first control plane (JSON, see above)",
        ),
        Opt::value("cluster-name", "NAME", "Name of the cluster").default("confboot"),
        Opt::value("kubernetes-version", "VERSION", "Kubernetes version").default("v1.31.1"),
        Opt::value("timeout", "SECONDS", "How long Init may take").default("900"),
        VERBOSITY,
    ],
};

// The help text above names the default port.
const _: () = assert!(DEFAULT_INIT_PORT == 9000);

/// Runs `confboot init`; returns the exit code.
pub fn run(args: Vec<String>) -> i32 {
    common::run_command(&CMD, args, init)
}

fn init(m: &confboot_util::args::Matches) -> Result<(), String> {
    let req = |n: &str| m.required(n).map_err(|e| e.to_string());
    let node = common::with_port(req("node")?, DEFAULT_INIT_PORT);
    let validators = common::node_validators(m)?;
    let init_secret = init_secret::read_file(Path::new(req("init-secret-file")?))
        .map_err(|e| format!("--init-secret-file: {e}"))?;
    let ssh_users = match m.value("ssh-users") {
        Some(path) => read_ssh_users(Path::new(path))?,
        None => Vec::new(),
    };
    let timeout = Duration::from_secs(
        m.parsed::<u64>("timeout")
            .map_err(|e| e.to_string())?
            .unwrap_or(900),
    );
    let kubeconfig_out = Path::new(req("kubeconfig-out")?);
    let state_out = Path::new(req("state-out")?);
    for out in [kubeconfig_out, state_out] {
        if out.exists() {
            return Err(format!(
                "{} exists already; move it away or choose another path",
                out.display()
            ));
        }
    }

    // A generated master secret is written after the node attested and
    // before Init is sent: nothing is lost if Init fails half-way.
    let (master, master_out) = match m.value("master-secret") {
        Some(path) => (
            MasterSecret::read_file(Path::new(path)).map_err(|e| e.to_string())?,
            None,
        ),
        None => {
            let out = Path::new(req("master-secret-out")?);
            if out.exists() {
                return Err(format!(
                    "{} exists already; reuse it with --master-secret or choose another --master-secret-out",
                    out.display()
                ));
            }
            (
                MasterSecret::generate().map_err(|e| e.to_string())?,
                Some(out),
            )
        }
    };
    let mut measurement_salt = vec![0u8; 32];
    ring::rand::SystemRandom::new()
        .fill(&mut measurement_salt)
        .map_err(|_| "no randomness".to_string())?;

    let started = std::time::Instant::now();
    let measurements = common::policy_files(m);
    let (mut client, attested) =
        atls::connect(&node, Duration::from_secs(30), &validators, None)
            .map_err(|e| common::explain_connect_error(&node, &e, &measurements))?;
    let attested = attested.ok_or("the node did not attest")?;
    println!(
        "node {node} attested ({}, {} measurements match {measurements}) in {:.1} s",
        attested.variant,
        attested.measurements.len(),
        started.elapsed().as_secs_f64()
    );

    if let Some(out) = master_out {
        master.write_file(out).map_err(|e| e.to_string())?;
        println!(
            "master secret written to {} (keep it: it recovers the cluster)",
            out.display()
        );
    }
    // InitRequest zeroizes its secrets when dropped, so it is filled in
    // place (struct update syntax cannot move out of a type with Drop).
    let mut request = InitRequest::default();
    request.kms_uri = master.to_kms_uri().to_string();
    request.storage_uri = "storage://no-store".into();
    request.measurement_salt = measurement_salt.clone();
    request.kubernetes_version = req("kubernetes-version")?.to_string();
    request.init_secret = init_secret.to_vec();
    request.cluster_name = req("cluster-name")?.to_string();
    request.ssh_user_keys = ssh_users;
    let mut success = None;
    let mut failure = None;
    let result = client.server_streaming(
        confboot_proto::INIT,
        &request,
        timeout,
        |resp: InitResponse| {
            match resp.kind {
                Some(init_response::Kind::Log(l)) => {
                    println!("  node: {}", String::from_utf8_lossy(&l.log))
                }
                Some(init_response::Kind::InitSuccess(s)) => success = Some(s),
                Some(init_response::Kind::InitFailure(f)) => failure = Some(f.error),
                None => {}
            }
            Ok(())
        },
    );
    if let Some(error) = failure {
        return Err(format!("the node refused Init: {error}"));
    }
    result.map_err(|s| match s.code {
        confboot_wire::Code::PermissionDenied => format!("the node refused Init: {}", s.message),
        _ => format!("Init failed: {s}"),
    })?;
    let success = success.ok_or("the node answered without a result")?;
    common::write_secret_file(kubeconfig_out, &success.kubeconfig)?;
    let state = serde_json::json!({
        "node": node,
        "clusterId": confboot_util::hex::encode(&success.cluster_id),
        "ownerId": confboot_util::hex::encode(&success.owner_id),
        "measurementSalt": confboot_util::hex::encode(&measurement_salt),
    });
    common::write_secret_file(state_out, format!("{state:#}\n").as_bytes())?;
    println!(
        "cluster initialized in {:.1} s",
        started.elapsed().as_secs_f64()
    );
    println!(
        "  cluster id: {}",
        confboot_util::hex::encode(&success.cluster_id)
    );
    println!("  kubeconfig: {}", kubeconfig_out.display());
    println!(
        "  cluster state (measurement salt for joinsvc): {}",
        state_out.display()
    );
    Ok(())
}

/// The admin's SSH users file (`--ssh-users`), checked whole: bounded in
/// size, the configuration's shape, every name and key valid.
fn read_ssh_users(path: &Path) -> Result<Vec<SshUserKey>, String> {
    use confboot_sys::ssh_users::{MAX_SSH_USERS_CONFIG_BYTES, parse_ssh_users_config};
    let bytes = confboot_util::fs::read_bounded(path, MAX_SSH_USERS_CONFIG_BYTES as u64)
        .map_err(|e| format!("--ssh-users: {e}"))?;
    let users = parse_ssh_users_config(&bytes)
        .map_err(|e| format!("--ssh-users {}: {e}", path.display()))?;
    Ok(users
        .iter()
        .map(|u| SshUserKey {
            username: u.name.as_str().to_string(),
            public_key: u.key.to_line().trim_end().to_string(),
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key_line() -> String {
        let mut blob = Vec::new();
        for f in [&b"ssh-ed25519"[..], &[7u8; 32][..]] {
            blob.extend_from_slice(&(f.len() as u32).to_be_bytes());
            blob.extend_from_slice(f);
        }
        format!(
            "ssh-ed25519 {} admin@laptop",
            confboot_util::base64::encode(&blob)
        )
    }

    #[test]
    fn the_ssh_users_file_is_checked_before_anything_is_sent() {
        let dir = std::env::temp_dir().join(format!("confboot-cli-ssh-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("ssh-users.json");
        std::fs::write(
            &file,
            format!(
                r#"{{"sshUsers": [{{"username": "alice", "publicKey": "{}"}}]}}"#,
                key_line()
            ),
        )
        .unwrap();
        let users = read_ssh_users(&file).unwrap();
        assert_eq!(users.len(), 1);
        assert_eq!(users[0].username, "alice");
        assert_eq!(users[0].public_key, key_line());

        let missing = read_ssh_users(&dir.join("nope.json")).unwrap_err();
        assert!(
            missing.starts_with("--ssh-users: ") && missing.contains("nope.json"),
            "{missing}"
        );
        let limit = confboot_sys::ssh_users::MAX_SSH_USERS_CONFIG_BYTES;
        std::fs::write(&file, vec![b' '; limit + 1]).unwrap();
        let big = read_ssh_users(&file).unwrap_err();
        assert!(big.contains(&format!("limit of {limit} bytes")), "{big}");
        std::fs::write(
            &file,
            r#"{"sshUsers": [{"username": "root", "publicKey": "ssh-ed25519 AAAA"}]}"#,
        )
        .unwrap();
        let bad = read_ssh_users(&file).unwrap_err();
        assert!(bad.contains("invalid user name \"root\""), "{bad}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
