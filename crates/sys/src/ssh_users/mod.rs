//! SSH users the admin configures for the cluster's first control plane:
//! `{username, public key}` pairs from the admin's configuration file, sent
//! with Init, kept on the state disk and applied at every boot.
//!
//! Everything is validated before anything is written ([`SshUser::new`],
//! [`parse_ssh_users_config`]): names are portable POSIX user names, keys
//! one OpenSSH public key each ([`AuthorizedKey`]), the list is bounded.
//! [`apply_ssh_users`] then writes into a target root (`/` on a node, a
//! directory in tests): `etc/passwd`, `etc/group` and, when the root has
//! one, `etc/shadow` entries (no password: key login only), a home with
//! `.ssh/authorized_keys` owned by the user, modes 0700/0700/0600. It is
//! idempotent: a second run changes nothing, and a user that exists with
//! other settings (another home, shell, group, or other keys) is reported
//! as a [`Conflict`], never overwritten.
//!
//! ```no_run
//! use confboot_sys::ssh_users::{apply_ssh_users, parse_ssh_users_config};
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let users = parse_ssh_users_config(
//!     br#"{"sshUsers": [{"username": "alice", "publicKey": "ssh-ed25519 AAAA..."}]}"#,
//! )?;
//! let report = apply_ssh_users(std::path::Path::new("/"), &users)?;
//! for conflict in &report.conflicts {
//!     eprintln!("not changed: {conflict}");
//! }
//! # Ok(())
//! # }
//! ```
//!
//! The configuration is read by hand, not with a serde derive: the bootstrapper
//! reads the stored list with [`parse_ssh_users_config`] at every boot, and a
//! derive would add code to a binary within a few KB of its size budget.

mod accounts;
mod authorized_key;
mod store;

use std::fmt;

pub use accounts::{ApplyReport, Conflict, apply_ssh_users};
pub use authorized_key::{AuthorizedKey, KeyError, MAX_AUTHORIZED_KEY_BYTES};
pub use store::{STORED_SSH_USERS_FILE, read_stored_ssh_users, ssh_users_config, store_ssh_users};

/// The most users one configuration may hold.
pub const MAX_SSH_USERS: usize = 32;
/// The longest user name (Linux's `LOGIN_NAME_MAX` is 256; useradd's 32).
pub const MAX_USER_NAME_BYTES: usize = 32;
/// The largest configuration file accepted.
pub const MAX_SSH_USERS_CONFIG_BYTES: usize = MAX_SSH_USERS * (MAX_AUTHORIZED_KEY_BYTES + 128);
/// Names that are never created or touched, whatever the root holds.
const RESERVED_NAMES: [&str; 6] = ["root", "daemon", "bin", "sys", "nobody", "sshd"];

/// A validated user name: `[a-z_][a-z0-9_-]*`, at most
/// [`MAX_USER_NAME_BYTES`] bytes, not a system account's.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct UserName(String);

impl UserName {
    /// Checks a name.
    pub fn parse(name: &str) -> Result<UserName, SshUserError> {
        let invalid = |reason| SshUserError::InvalidName {
            name: name.chars().take(MAX_USER_NAME_BYTES + 8).collect(),
            reason,
        };
        let mut bytes = name.bytes();
        match bytes.next() {
            None => return Err(invalid("it is empty")),
            Some(b) if !(b.is_ascii_lowercase() || b == b'_') => {
                return Err(invalid("it must begin with a-z or _"));
            }
            _ => {}
        }
        if name.len() > MAX_USER_NAME_BYTES {
            return Err(invalid("it is longer than 32 bytes"));
        }
        if !bytes.all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_' || b == b'-') {
            return Err(invalid("only a-z, 0-9, _ and - are allowed"));
        }
        if RESERVED_NAMES.contains(&name) {
            return Err(invalid("it is a system account's"));
        }
        Ok(UserName(name.to_string()))
    }

    /// The name.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for UserName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// A user to create: a name and the one key that may log in as it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SshUser {
    /// The user name.
    pub name: UserName,
    /// Its public key.
    pub key: AuthorizedKey,
}

impl SshUser {
    /// Validates a `{username, public key}` pair.
    pub fn new(username: &str, public_key: &str) -> Result<SshUser, SshUserError> {
        let name = UserName::parse(username)?;
        let key = AuthorizedKey::parse(public_key).map_err(|error| SshUserError::InvalidKey {
            user: name.clone(),
            error,
        })?;
        Ok(SshUser { name, key })
    }
}

/// Validates a whole list: bounded, each pair valid, no name twice.
pub fn validate_ssh_users<'a>(
    pairs: impl IntoIterator<Item = (&'a str, &'a str)>,
) -> Result<Vec<SshUser>, SshUserError> {
    let mut users: Vec<SshUser> = Vec::new();
    for (i, (username, key)) in pairs.into_iter().enumerate() {
        if i == MAX_SSH_USERS {
            return Err(SshUserError::TooMany);
        }
        let user = SshUser::new(username, key)?;
        if users.iter().any(|u| u.name == user.name) {
            return Err(SshUserError::Duplicate(user.name));
        }
        users.push(user);
    }
    Ok(users)
}

/// Parses the admin's configuration file:
/// `{"sshUsers": [{"username": "alice", "publicKey": "ssh-ed25519 AAAA... alice@laptop"}]}`.
/// Unknown fields are refused (a misspelt key must not pass silently).
pub fn parse_ssh_users_config(bytes: &[u8]) -> Result<Vec<SshUser>, SshUserError> {
    if bytes.len() > MAX_SSH_USERS_CONFIG_BYTES {
        return Err(SshUserError::Config(format!(
            "larger than {MAX_SSH_USERS_CONFIG_BYTES} bytes"
        )));
    }
    let config: serde_json::Value =
        serde_json::from_slice(bytes).map_err(|e| SshUserError::Config(e.to_string()))?;
    let config = config
        .as_object()
        .ok_or_else(|| SshUserError::Config("not a JSON object".into()))?;
    if let Some(k) = config.keys().find(|k| *k != "sshUsers") {
        return Err(SshUserError::Config(format!(
            "unknown field {:?} (expected sshUsers)",
            k.chars().take(64).collect::<String>()
        )));
    }
    let list = match config.get("sshUsers") {
        None => return Ok(Vec::new()),
        Some(v) => v
            .as_array()
            .ok_or_else(|| SshUserError::Config("sshUsers is not a list".into()))?,
    };
    if list.len() > MAX_SSH_USERS {
        return Err(SshUserError::TooMany);
    }
    let mut pairs = Vec::with_capacity(list.len());
    for (i, entry) in list.iter().enumerate() {
        let entry = entry
            .as_object()
            .ok_or_else(|| SshUserError::Config(format!("sshUsers[{i}] is not an object")))?;
        if let Some(k) = entry.keys().find(|k| *k != "username" && *k != "publicKey") {
            return Err(SshUserError::Config(format!(
                "sshUsers[{i}]: unknown field {:?} (expected username, publicKey)",
                k.chars().take(64).collect::<String>()
            )));
        }
        let field = |name: &str| {
            entry.get(name).and_then(|v| v.as_str()).ok_or_else(|| {
                SshUserError::Config(format!("sshUsers[{i}].{name} is missing or not a string"))
            })
        };
        pairs.push((field("username")?, field("publicKey")?));
    }
    validate_ssh_users(pairs)
}

/// Why SSH users could not be validated or applied.
#[derive(Debug, thiserror::Error)]
pub enum SshUserError {
    /// A user name is not acceptable.
    #[error("invalid user name {name:?}: {reason}")]
    InvalidName {
        /// The name (truncated).
        name: String,
        /// Why.
        reason: &'static str,
    },
    /// A user's key is not acceptable.
    #[error("invalid public key for {user}: {error}")]
    InvalidKey {
        /// Whose.
        user: UserName,
        /// Why.
        error: KeyError,
    },
    /// The same name twice.
    #[error("user {0} is configured twice")]
    Duplicate(UserName),
    /// More than [`MAX_SSH_USERS`].
    #[error("more than {} SSH users", MAX_SSH_USERS)]
    TooMany,
    /// The configuration file is not of the expected shape.
    #[error("SSH users configuration: {0}")]
    Config(String),
    /// A file of the target root could not be read or written.
    #[error("{}: {error}", path.display())]
    Io {
        /// The file.
        path: std::path::PathBuf,
        /// What the system said.
        error: std::io::Error,
    },
    /// `etc/passwd`, `etc/group` or `etc/shadow` is malformed or too large.
    #[error("{}: {reason}", path.display())]
    AccountDatabase {
        /// The file.
        path: std::path::PathBuf,
        /// Why.
        reason: String,
    },
    /// No free user and group id in 1000..60000.
    #[error("no free user and group id in 1000..60000")]
    NoFreeId,
    /// The users kept on the state disk cannot be taken: the file is too
    /// large, not the configuration's shape, or holds an invalid user.
    #[error("{}: kept SSH users refused: {reason}", path.display())]
    StoredFile {
        /// The file.
        path: std::path::PathBuf,
        /// Why.
        reason: StoredRefusal,
    },
}

/// Why the SSH users kept on the state disk are refused.
#[derive(Debug, thiserror::Error)]
pub enum StoredRefusal {
    /// The path is not a regular file (a symbolic link, say).
    #[error("not a regular file")]
    NotARegularFile,
    /// The file cannot be read, or is larger than the bound.
    #[error("{0}")]
    Read(#[source] confboot_util::fs::FileError),
    /// The file is not the configuration's shape, or holds an invalid user.
    #[error("{0}")]
    Invalid(#[source] Box<SshUserError>),
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(super) fn key(seed: u8) -> String {
        let mut blob = Vec::new();
        for f in [&b"ssh-ed25519"[..], &[seed; 32][..]] {
            blob.extend_from_slice(&(f.len() as u32).to_be_bytes());
            blob.extend_from_slice(f);
        }
        format!(
            "ssh-ed25519 {} key-{seed}",
            confboot_util::base64::encode(&blob)
        )
    }

    #[test]
    fn names_follow_posix_and_spare_system_accounts() {
        for ok in ["alice", "_svc", "a-b_c9", &"a".repeat(32)] {
            UserName::parse(ok).unwrap();
        }
        for (bad, reason) in [
            ("", "it is empty"),
            ("Alice", "it must begin with a-z or _"),
            ("9lives", "it must begin with a-z or _"),
            ("-rf", "it must begin with a-z or _"),
            ("al:ice", "only a-z, 0-9, _ and - are allowed"),
            ("al/../ice", "only a-z, 0-9, _ and - are allowed"),
            ("al ice", "only a-z, 0-9, _ and - are allowed"),
            ("root", "it is a system account's"),
            (&"a".repeat(33), "it is longer than 32 bytes"),
        ] {
            match UserName::parse(bad) {
                Err(SshUserError::InvalidName { reason: r, .. }) => assert_eq!(r, reason, "{bad}"),
                other => panic!("{bad}: {other:?}"),
            }
        }
    }

    #[test]
    fn the_config_file_is_strict_and_bounded() {
        let good = format!(
            r#"{{"sshUsers": [{{"username": "alice", "publicKey": "{}"}}, {{"username": "bob", "publicKey": "{}"}}]}}"#,
            key(1),
            key(2)
        );
        let users = parse_ssh_users_config(good.as_bytes()).unwrap();
        assert_eq!(users.len(), 2);
        assert_eq!(users[1].name.as_str(), "bob");
        assert!(parse_ssh_users_config(b"{}").unwrap().is_empty());

        let dup = format!(
            r#"{{"sshUsers": [{{"username": "alice", "publicKey": "{0}"}}, {{"username": "alice", "publicKey": "{0}"}}]}}"#,
            key(1)
        );
        for (bad, what) in [
            (b"[]".to_vec(), "not a JSON object"),
            (br#"{"sshUser": []}"#.to_vec(), "unknown field"),
            (br#"{"sshUsers": {}}"#.to_vec(), "not a list"),
            (
                br#"{"sshUsers": [{"username": "a"}]}"#.to_vec(),
                "publicKey is missing",
            ),
            (
                br#"{"sshUsers": [{"username": "a", "publicKey": "x", "shell": "/bin/sh"}]}"#
                    .to_vec(),
                "unknown field \"shell\"",
            ),
            (dup.into_bytes(), "configured twice"),
            (vec![b' '; MAX_SSH_USERS_CONFIG_BYTES + 1], "larger than"),
        ] {
            let err = parse_ssh_users_config(&bad).unwrap_err().to_string();
            assert!(err.contains(what), "{err}");
        }
        let many: Vec<String> = (0..=MAX_SSH_USERS)
            .map(|i| format!(r#"{{"username": "u{i}", "publicKey": "{}"}}"#, key(1)))
            .collect();
        let many = format!(r#"{{"sshUsers": [{}]}}"#, many.join(","));
        assert!(matches!(
            parse_ssh_users_config(many.as_bytes()),
            Err(SshUserError::TooMany)
        ));
    }
}
