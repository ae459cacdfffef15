//! Applying [`SshUser`]s to a target root: account entries, then homes.
//!
//! Order makes an interrupted run converge: the account files are replaced
//! whole (a temporary file renamed over the old one, owner and mode kept),
//! then each home is completed, creating only what is missing. A user whose
//! entries are ours (comment [`ACCOUNT_COMMENT`], home `/home/NAME`, shell
//! [`LOGIN_SHELL`]) and whose home is missing or incomplete is completed on
//! the next run; anything else that differs is a [`Conflict`] and is left
//! as it is.
//!
//! Homes belong to users who may have logged in since: nothing inside one
//! is followed through a symbolic link or written over. Files are created
//! with `O_EXCL` (an existing link makes creation fail), existing ones are
//! only read, without following links.

use std::collections::HashSet;
use std::fmt;
use std::fs::{self, OpenOptions};
use std::io::{Read, Write};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use super::{SshUser, SshUserError, UserName};

/// The comment (GECOS field) of the accounts this module creates; an
/// account without it is never taken for one of ours.
pub const ACCOUNT_COMMENT: &str = "confboot SSH user";
/// The login shell of the accounts created.
pub const LOGIN_SHELL: &str = "/bin/sh";
/// Ids given to new users and their groups.
const IDS: std::ops::Range<u32> = 1000..60000;
/// The largest account file read.
const MAX_ACCOUNT_FILE_BYTES: u64 = 4 << 20;
/// The largest `authorized_keys` read back.
const MAX_AUTHORIZED_KEYS_BYTES: u64 = 64 << 10;

/// What [`apply_ssh_users`] did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ApplyReport {
    /// Users created, or completed after an interrupted run.
    pub created: Vec<UserName>,
    /// Users that were already as configured.
    pub unchanged: Vec<UserName>,
    /// Users left alone because what exists differs from the configuration.
    pub conflicts: Vec<Conflict>,
}

/// A configured user that exists with other settings; nothing was changed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Conflict {
    /// The user.
    pub user: UserName,
    /// What differs.
    pub reason: String,
}

impl fmt::Display for Conflict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "user {} exists with other settings, left unchanged: {}",
            self.user, self.reason
        )
    }
}

/// One of `etc/passwd`, `etc/group`, `etc/shadow`: its lines, split into
/// fields where they are entries.
struct AccountFile {
    path: PathBuf,
    lines: Vec<String>,
    fields: usize,
    changed: bool,
}

impl AccountFile {
    /// Reads `root/rel`; `None` if it does not exist.
    fn read(root: &Path, rel: &str, fields: usize) -> Result<Option<AccountFile>, SshUserError> {
        let path = root.join(rel);
        let file = match fs::File::open(&path) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(error) => return Err(SshUserError::Io { path, error }),
        };
        let mut text = String::new();
        let bad = |reason: String| SshUserError::AccountDatabase {
            path: path.clone(),
            reason,
        };
        file.take(MAX_ACCOUNT_FILE_BYTES + 1)
            .read_to_string(&mut text)
            .map_err(|e| bad(format!("not readable as text: {e}")))?;
        if text.len() as u64 > MAX_ACCOUNT_FILE_BYTES {
            return Err(bad(format!("larger than {MAX_ACCOUNT_FILE_BYTES} bytes")));
        }
        let lines: Vec<String> = text.lines().map(str::to_string).collect();
        for (i, line) in lines.iter().enumerate() {
            if is_entry(line) && line.split(':').count() != fields {
                return Err(bad(format!("line {} does not have {fields} fields", i + 1)));
            }
        }
        Ok(Some(AccountFile {
            path,
            lines,
            fields,
            changed: false,
        }))
    }

    fn entries(&self) -> impl Iterator<Item = Vec<&str>> {
        self.lines
            .iter()
            .filter(|l| is_entry(l))
            .map(|l| l.split(':').collect())
    }

    fn find(&self, name: &str) -> Option<Vec<&str>> {
        self.entries().find(|f| f[0] == name)
    }

    /// The ids in the third field.
    fn ids(&self) -> HashSet<u32> {
        self.entries().filter_map(|f| f[2].parse().ok()).collect()
    }

    fn add(&mut self, fields: &[&str]) {
        debug_assert_eq!(fields.len(), self.fields);
        self.lines.push(fields.join(":"));
        self.changed = true;
    }

    /// Replaces the file if it changed: a new file beside it with the old
    /// one's owner and mode, written, synced and renamed over it.
    fn write(&self) -> Result<(), SshUserError> {
        if !self.changed {
            return Ok(());
        }
        let io = |error| SshUserError::Io {
            path: self.path.clone(),
            error,
        };
        let meta = fs::metadata(&self.path).map_err(io)?;
        let name = self.path.file_name().expect("a file").to_string_lossy();
        let tmp = self.path.with_file_name(format!(".{name}.confboot-new"));
        let _ = fs::remove_file(&tmp);
        let mut text = self.lines.join("\n");
        text.push('\n');
        let result = (|| {
            let mut f = OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o600)
                .open(&tmp)?;
            f.write_all(text.as_bytes())?;
            std::os::unix::fs::fchown(&f, Some(meta.uid()), Some(meta.gid()))?;
            f.set_permissions(fs::Permissions::from_mode(meta.mode() & 0o7777))?;
            f.sync_all()?;
            fs::rename(&tmp, &self.path)
        })();
        if result.is_err() {
            let _ = fs::remove_file(&tmp);
        }
        result.map_err(io)
    }
}

/// An entry line, not a blank line, a comment or a NIS `+`/`-` line.
fn is_entry(line: &str) -> bool {
    !(line.trim().is_empty() || line.starts_with('#') || line.starts_with(['+', '-']))
}

/// What a user's home holds, looked at without following links.
#[derive(Debug, PartialEq, Eq)]
enum Home {
    /// Complete and as configured.
    Complete,
    /// Missing, or ours with parts missing: these parts are created.
    Incomplete,
    /// Something else is there.
    Other(String),
}

fn home_dir(root: &Path, name: &UserName) -> PathBuf {
    root.join("home").join(name.as_str())
}

/// Looks at `home` for a user of `uid`:`gid` whose only key is `key_line`.
fn inspect_home(home: &Path, uid: u32, gid: u32, key_line: &str) -> Result<Home, SshUserError> {
    let io = |path: &Path, error| SshUserError::Io {
        path: path.to_path_buf(),
        error,
    };
    // Each level: absent (the rest is created), or ours exactly.
    let ssh = home.join(".ssh");
    let keys = ssh.join("authorized_keys");
    for (path, dir, mode) in [
        (home, true, 0o700),
        (&ssh, true, 0o700),
        (&keys, false, 0o600),
    ] {
        let meta = match fs::symlink_metadata(path) {
            Ok(m) => m,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Home::Incomplete),
            Err(e) => return Err(io(path, e)),
        };
        let kind_ok = if dir {
            meta.file_type().is_dir()
        } else {
            meta.file_type().is_file()
        };
        let what = path.display();
        if !kind_ok {
            return Ok(Home::Other(format!(
                "{what} is not a plain {}",
                if dir { "directory" } else { "file" }
            )));
        }
        if (meta.uid(), meta.gid()) != (uid, gid) {
            return Ok(Home::Other(format!(
                "{what} belongs to {}:{}, not {uid}:{gid}",
                meta.uid(),
                meta.gid()
            )));
        }
        if meta.mode() & 0o7777 != mode {
            return Ok(Home::Other(format!(
                "{what} has mode {:o}, not {mode:o}",
                meta.mode() & 0o7777
            )));
        }
    }
    let mut held = String::new();
    OpenOptions::new()
        .read(true)
        .custom_flags(nix::libc::O_NOFOLLOW)
        .open(&keys)
        .and_then(|f| f.take(MAX_AUTHORIZED_KEYS_BYTES).read_to_string(&mut held))
        .map_err(|e| io(&keys, e))?;
    if held != key_line {
        return Ok(Home::Other(format!(
            "{} holds other keys than the configured one",
            keys.display()
        )));
    }
    Ok(Home::Complete)
}

/// Creates what is missing of a home (see [`inspect_home`]).
fn complete_home(home: &Path, uid: u32, gid: u32, key_line: &str) -> Result<(), SshUserError> {
    let io = |path: &Path, error| SshUserError::Io {
        path: path.to_path_buf(),
        error,
    };
    if let Some(parent) = home.parent() {
        fs::DirBuilder::new()
            .recursive(true)
            .mode(0o755)
            .create(parent)
            .map_err(|e| io(parent, e))?;
    }
    let ssh = home.join(".ssh");
    for dir in [home, &ssh] {
        match fs::DirBuilder::new().mode(0o700).create(dir) {
            Ok(()) => {
                std::os::unix::fs::lchown(dir, Some(uid), Some(gid)).map_err(|e| io(dir, e))?;
                fs::set_permissions(dir, fs::Permissions::from_mode(0o700))
                    .map_err(|e| io(dir, e))?;
            }
            // Checked by inspect_home: ours, a plain directory.
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(io(dir, e)),
        }
    }
    let keys = ssh.join("authorized_keys");
    if fs::symlink_metadata(&keys).is_ok() {
        return Ok(());
    }
    let tmp = ssh.join(".authorized_keys.confboot-new");
    let written = (|| {
        let mut f = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(nix::libc::O_NOFOLLOW)
            .open(&tmp)?;
        f.write_all(key_line.as_bytes())?;
        std::os::unix::fs::fchown(&f, Some(uid), Some(gid))?;
        f.set_permissions(fs::Permissions::from_mode(0o600))?;
        f.sync_all()?;
        // A link (not rename): an authorized_keys that appeared meanwhile
        // is not replaced.
        fs::hard_link(&tmp, &keys)
    })();
    let _ = fs::remove_file(&tmp);
    written.map_err(|e| io(&keys, e))
}

/// Creates the `users` in the target `root` (see the module documentation).
/// Errors are about the root's files (unreadable, malformed, not
/// writable); a user that exists otherwise is a [`Conflict`] in the report.
pub fn apply_ssh_users(root: &Path, users: &[SshUser]) -> Result<ApplyReport, SshUserError> {
    let required = |file: Option<AccountFile>, rel: &str| {
        file.ok_or_else(|| SshUserError::Io {
            path: root.join(rel),
            error: std::io::ErrorKind::NotFound.into(),
        })
    };
    let mut passwd = required(AccountFile::read(root, "etc/passwd", 7)?, "etc/passwd")?;
    let mut group = required(AccountFile::read(root, "etc/group", 4)?, "etc/group")?;
    let mut shadow = AccountFile::read(root, "etc/shadow", 9)?;

    let mut report = ApplyReport::default();
    let mut homes = Vec::new();
    for user in users {
        let name = user.name.as_str();
        let home_path = format!("/home/{name}");
        let key_line = user.key.to_line();
        let home = home_dir(root, &user.name);
        let conflict = |reason: String| Conflict {
            user: user.name.clone(),
            reason,
        };
        let (uid, gid) = match passwd.find(name) {
            Some(f) => {
                if (f[4], f[5], f[6]) != (ACCOUNT_COMMENT, home_path.as_str(), LOGIN_SHELL) {
                    report.conflicts.push(conflict(format!(
                        "etc/passwd has comment {:?}, home {:?}, shell {:?}",
                        f[4], f[5], f[6]
                    )));
                    continue;
                }
                let (Ok(uid), Ok(gid)) = (f[2].parse::<u32>(), f[3].parse::<u32>()) else {
                    report
                        .conflicts
                        .push(conflict("etc/passwd has ids that are not numbers".into()));
                    continue;
                };
                (uid, gid)
            }
            None => {
                if group.find(name).is_some() {
                    report
                        .conflicts
                        .push(conflict("etc/group has a group of that name".into()));
                    continue;
                }
                let (uids, gids) = (passwd.ids(), group.ids());
                let id = IDS
                    .clone()
                    .find(|i| !uids.contains(i) && !gids.contains(i))
                    .ok_or(SshUserError::NoFreeId)?;
                (id, id)
            }
        };
        match group.find(name) {
            Some(g) if g[2] != gid.to_string() => {
                report.conflicts.push(conflict(format!(
                    "etc/group has its group with id {}, not {gid}",
                    g[2]
                )));
                continue;
            }
            Some(_) => {}
            None if group.ids().contains(&gid) => {
                report
                    .conflicts
                    .push(conflict(format!("group id {gid} belongs to another group")));
                continue;
            }
            None => {}
        }
        let state = inspect_home(&home, uid, gid, &key_line)?;
        let new_entries = passwd.find(name).is_none()
            || group.find(name).is_none()
            || shadow.as_ref().is_some_and(|s| s.find(name).is_none());
        match state {
            Home::Other(reason) => {
                report.conflicts.push(conflict(reason));
                continue;
            }
            Home::Complete if !new_entries => {
                report.unchanged.push(user.name.clone());
                continue;
            }
            _ => {}
        }
        let (uid_s, gid_s) = (uid.to_string(), gid.to_string());
        if passwd.find(name).is_none() {
            let password = if shadow.is_some() { "x" } else { "*" };
            passwd.add(&[
                name,
                password,
                &uid_s,
                &gid_s,
                ACCOUNT_COMMENT,
                &home_path,
                LOGIN_SHELL,
            ]);
        }
        if group.find(name).is_none() {
            group.add(&[name, "x", &gid_s, ""]);
        }
        if let Some(shadow) = shadow.as_mut().filter(|s| s.find(name).is_none()) {
            // `*`: no password can match; the key is the only way in.
            shadow.add(&[name, "*", "", "0", "99999", "7", "", "", ""]);
        }
        homes.push((home, uid, gid, key_line));
        report.created.push(user.name.clone());
    }
    // passwd first: its entry (with our comment) is what marks a user as
    // ours, so a run stopped after it is completed by the next one, while a
    // group or shadow entry alone would be someone else's.
    passwd.write()?;
    if let Some(shadow) = &shadow {
        shadow.write()?;
    }
    group.write()?;
    for (home, uid, gid, key_line) in &homes {
        complete_home(home, *uid, *gid, key_line)?;
    }
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ssh_users::tests::key;

    struct Root(PathBuf);

    impl Root {
        fn new(tag: &str) -> Root {
            let dir = std::env::temp_dir()
                .join(format!("confboot-ssh-users-{tag}-{}", std::process::id()));
            let _ = fs::remove_dir_all(&dir);
            fs::create_dir_all(dir.join("etc")).unwrap();
            fs::write(
                dir.join("etc/passwd"),
                "root:x:0:0:root:/root:/bin/sh\n# a comment\nsshd:x:100:65534::/run/sshd:/usr/sbin/nologin\n",
            )
            .unwrap();
            fs::write(dir.join("etc/group"), "root:x:0:\nusers:x:100:\n").unwrap();
            fs::write(dir.join("etc/shadow"), "root:*:19000:0:99999:7:::\n").unwrap();
            fs::set_permissions(dir.join("etc/shadow"), fs::Permissions::from_mode(0o640)).unwrap();
            Root(dir)
        }

        fn read(&self, rel: &str) -> String {
            fs::read_to_string(self.0.join(rel)).unwrap()
        }

        fn snapshot(&self) -> Vec<(String, u32, u32, u32, String)> {
            let mut out = Vec::new();
            let mut stack = vec![self.0.clone()];
            while let Some(p) = stack.pop() {
                let meta = fs::symlink_metadata(&p).unwrap();
                let content = if meta.is_file() {
                    fs::read_to_string(&p).unwrap()
                } else {
                    String::new()
                };
                out.push((
                    p.display().to_string(),
                    meta.mode(),
                    meta.uid(),
                    meta.gid(),
                    content,
                ));
                if meta.is_dir() {
                    for e in fs::read_dir(&p).unwrap() {
                        stack.push(e.unwrap().path());
                    }
                }
            }
            out.sort();
            out
        }
    }

    impl Drop for Root {
        fn drop(&mut self) {
            let _ = fs::remove_dir_all(&self.0);
        }
    }

    fn users(pairs: &[(&str, u8)]) -> Vec<SshUser> {
        pairs
            .iter()
            .map(|(n, k)| SshUser::new(n, &key(*k)).unwrap())
            .collect()
    }

    #[test]
    fn users_are_created_with_strict_modes_and_a_second_run_changes_nothing() {
        let root = Root::new("create");
        let report = apply_ssh_users(&root.0, &users(&[("alice", 1), ("bob", 2)])).unwrap();
        assert_eq!(report.created.len(), 2);
        assert!(report.conflicts.is_empty());
        let passwd = root.read("etc/passwd");
        assert!(passwd.contains("alice:x:1000:1000:confboot SSH user:/home/alice:/bin/sh\n"));
        assert!(passwd.contains("bob:x:1001:1001:confboot SSH user:/home/bob:/bin/sh\n"));
        assert!(passwd.starts_with("root:x:0:0:root:/root:/bin/sh\n# a comment\n"));
        assert!(
            root.read("etc/group")
                .ends_with("alice:x:1000:\nbob:x:1001:\n")
        );
        assert!(root.read("etc/shadow").contains("alice:*::0:99999:7:::\n"));
        let shadow_mode = fs::metadata(root.0.join("etc/shadow")).unwrap().mode();
        assert_eq!(shadow_mode & 0o777, 0o640, "the shadow file keeps its mode");
        let keys = root.0.join("home/alice/.ssh/authorized_keys");
        assert_eq!(fs::read_to_string(&keys).unwrap(), format!("{}\n", key(1)));
        for (p, mode) in [
            (root.0.join("home/alice"), 0o700),
            (root.0.join("home/alice/.ssh"), 0o700),
            (keys, 0o600),
        ] {
            let m = fs::metadata(&p).unwrap();
            assert_eq!(
                (m.mode() & 0o7777, m.uid(), m.gid()),
                (mode, 1000, 1000),
                "{p:?}"
            );
        }

        let before = root.snapshot();
        let again = apply_ssh_users(&root.0, &users(&[("alice", 1), ("bob", 2)])).unwrap();
        assert_eq!(again.unchanged.len(), 2, "{again:?}");
        assert!(again.created.is_empty() && again.conflicts.is_empty());
        assert_eq!(root.snapshot(), before, "a second run changes nothing");
    }

    #[test]
    fn a_user_with_other_settings_is_reported_not_overwritten() {
        let root = Root::new("conflict");
        apply_ssh_users(&root.0, &users(&[("alice", 1)])).unwrap();
        // alice added a key of her own; carol exists as a local account;
        // dave's group name is taken.
        let keys = root.0.join("home/alice/.ssh/authorized_keys");
        fs::write(&keys, format!("{}\n{}\n", key(1), key(9))).unwrap();
        let mut passwd = root.read("etc/passwd");
        passwd.push_str("carol:x:1500:1500:Carol:/home/carol:/bin/bash\n");
        fs::write(root.0.join("etc/passwd"), passwd).unwrap();
        let mut group = root.read("etc/group");
        group.push_str("dave:x:1600:\n");
        fs::write(root.0.join("etc/group"), group).unwrap();
        let before = root.snapshot();

        let report =
            apply_ssh_users(&root.0, &users(&[("alice", 1), ("carol", 3), ("dave", 4)])).unwrap();
        let reasons: Vec<String> = report.conflicts.iter().map(|c| c.to_string()).collect();
        assert_eq!(reasons.len(), 3, "{reasons:?}");
        assert!(reasons[0].starts_with("user alice exists") && reasons[0].contains("other keys"));
        assert!(reasons[1].contains("home \"/home/carol\", shell \"/bin/bash\""));
        assert!(reasons[2].contains("a group of that name"));
        assert_eq!(root.snapshot(), before, "nothing was changed");
    }

    #[test]
    fn links_in_a_home_are_not_followed() {
        let root = Root::new("links");
        apply_ssh_users(&root.0, &users(&[("alice", 1)])).unwrap();
        // alice, logged in, replaces her .ssh with a link to etc/.
        let ssh = root.0.join("home/alice/.ssh");
        fs::remove_dir_all(&ssh).unwrap();
        std::os::unix::fs::symlink(root.0.join("etc"), &ssh).unwrap();
        let before = root.snapshot();
        let report = apply_ssh_users(&root.0, &users(&[("alice", 1)])).unwrap();
        assert_eq!(report.conflicts.len(), 1, "{report:?}");
        assert!(report.conflicts[0].reason.contains("not a plain directory"));
        assert_eq!(root.snapshot(), before);
        assert!(!root.0.join("etc/authorized_keys").exists());
    }

    #[test]
    fn an_interrupted_run_is_completed() {
        let root = Root::new("interrupted");
        apply_ssh_users(&root.0, &users(&[("alice", 1)])).unwrap();
        // As if the run had stopped after the account files: no home.
        fs::remove_dir_all(root.0.join("home/alice")).unwrap();
        let report = apply_ssh_users(&root.0, &users(&[("alice", 1)])).unwrap();
        assert_eq!(report.created.len(), 1, "{report:?}");
        let entries = root.read("etc/passwd");
        assert_eq!(
            entries.lines().filter(|l| l.starts_with("alice:")).count(),
            1
        );
        assert_eq!(
            root.read("home/alice/.ssh/authorized_keys"),
            format!("{}\n", key(1))
        );
        // As if it had stopped after etc/passwd alone.
        let group = root.read("etc/group").replace("alice:x:1000:\n", "");
        fs::write(root.0.join("etc/group"), group).unwrap();
        let shadow = root
            .read("etc/shadow")
            .replace("alice:*::0:99999:7:::\n", "");
        fs::write(root.0.join("etc/shadow"), shadow).unwrap();
        fs::remove_dir_all(root.0.join("home/alice")).unwrap();
        let report = apply_ssh_users(&root.0, &users(&[("alice", 1)])).unwrap();
        assert_eq!(report.created.len(), 1, "{report:?}");
        assert!(root.read("etc/group").ends_with("alice:x:1000:\n"));
        assert!(root.read("etc/shadow").ends_with("alice:*::0:99999:7:::\n"));
        let again = apply_ssh_users(&root.0, &users(&[("alice", 1)])).unwrap();
        assert_eq!(again.unchanged.len(), 1, "{again:?}");

        // A group alone is not taken for ours.
        let root = Root::new("interrupted-group");
        let mut group = root.read("etc/group");
        group.push_str("alice:x:1000:\n");
        fs::write(root.0.join("etc/group"), group).unwrap();
        let report = apply_ssh_users(&root.0, &users(&[("alice", 1)])).unwrap();
        assert_eq!(report.conflicts.len(), 1, "{report:?}");
    }

    #[test]
    fn malformed_account_files_fail_before_anything_is_written() {
        let root = Root::new("malformed");
        fs::write(root.0.join("etc/passwd"), "root:x:0:0:root\n").unwrap();
        let before = root.snapshot();
        let err = apply_ssh_users(&root.0, &users(&[("alice", 1)])).unwrap_err();
        assert!(
            err.to_string().contains("line 1 does not have 7 fields"),
            "{err}"
        );
        assert_eq!(root.snapshot(), before);
        fs::remove_file(root.0.join("etc/group")).unwrap();
        assert!(matches!(
            apply_ssh_users(&root.0, &users(&[("alice", 1)])),
            Err(SshUserError::AccountDatabase { .. } | SshUserError::Io { .. })
        ));
    }
}
