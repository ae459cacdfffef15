//! The users as a node keeps them: a file on its state disk's file system,
//! in the admin's own format ([`ssh_users_config`], read back with
//! [`super::parse_ssh_users_config`]).
//!
//! The file lives inside the encrypted file system on purpose: a LUKS2
//! header's JSON area is neither encrypted nor authenticated, so a host
//! could add a key there; the file system under dm-crypt can only be
//! written with the disk key. Reading back is bounded
//! ([`super::MAX_SSH_USERS_CONFIG_BYTES`]) and validates every user again.

use std::fs;
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use super::{
    MAX_SSH_USERS_CONFIG_BYTES, SshUser, SshUserError, StoredRefusal, parse_ssh_users_config,
};

/// The file's name in the state file system's root.
pub const STORED_SSH_USERS_FILE: &str = "ssh-users.json";

/// The admin's configuration format for `users`:
/// `{"sshUsers": [{"username": ..., "publicKey": ...}]}`.
pub fn ssh_users_config(users: &[SshUser]) -> String {
    let list: Vec<serde_json::Value> = users
        .iter()
        .map(|u| {
            serde_json::json!({
                "username": u.name.as_str(),
                "publicKey": u.key.to_line().trim_end(),
            })
        })
        .collect();
    format!("{:#}\n", serde_json::json!({ "sshUsers": list }))
}

/// Keeps `users` in `dir` (the mounted state file system), replacing what
/// was kept: a temporary file, synced, renamed over the old one, and the
/// directory synced, so a power cut leaves the old list or the new one.
pub fn store_ssh_users(dir: &Path, users: &[SshUser]) -> Result<PathBuf, SshUserError> {
    let path = dir.join(STORED_SSH_USERS_FILE);
    let tmp = dir.join(format!(".{STORED_SSH_USERS_FILE}.tmp"));
    let io = |path: &Path| {
        let path = path.to_path_buf();
        move |error| SshUserError::Io { path, error }
    };
    match fs::remove_file(&tmp) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(io(&tmp)(e)),
        _ => {}
    }
    let mut file = fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(nix::libc::O_NOFOLLOW)
        .open(&tmp)
        .map_err(io(&tmp))?;
    file.write_all(ssh_users_config(users).as_bytes())
        .and_then(|()| file.sync_all())
        .map_err(io(&tmp))?;
    drop(file);
    fs::rename(&tmp, &path).map_err(io(&path))?;
    fs::File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(io(dir))?;
    Ok(path)
}

/// The users kept in `dir`: `Ok(None)` when there is no file (a node whose
/// Init carried none, or a worker). A file larger than
/// [`MAX_SSH_USERS_CONFIG_BYTES`], not of the configuration's shape, or
/// holding an invalid user is refused whole ([`SshUserError::StoredFile`]).
pub fn read_stored_ssh_users(dir: &Path) -> Result<Option<Vec<SshUser>>, SshUserError> {
    let path = dir.join(STORED_SSH_USERS_FILE);
    match fs::symlink_metadata(&path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(error) => return Err(SshUserError::Io { path, error }),
        Ok(meta) if !meta.file_type().is_file() => {
            return Err(SshUserError::StoredFile {
                path,
                reason: StoredRefusal::NotARegularFile,
            });
        }
        Ok(_) => {}
    }
    let bytes =
        confboot_util::fs::read_bounded(&path, MAX_SSH_USERS_CONFIG_BYTES as u64).map_err(|e| {
            SshUserError::StoredFile {
                path: path.clone(),
                reason: StoredRefusal::Read(e),
            }
        })?;
    parse_ssh_users_config(&bytes)
        .map(Some)
        .map_err(|e| SshUserError::StoredFile {
            path,
            reason: StoredRefusal::Invalid(Box::new(e)),
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ssh_users::tests::key;
    use confboot_testkit::TempDir;

    fn users() -> Vec<SshUser> {
        vec![
            SshUser::new("alice", &key(1)).unwrap(),
            SshUser::new("bob", &key(2)).unwrap(),
        ]
    }

    #[test]
    fn kept_users_read_back_the_same() {
        let dir = TempDir::new("ssh-store-roundtrip");
        assert!(read_stored_ssh_users(dir.path()).unwrap().is_none());
        let path = store_ssh_users(dir.path(), &users()).unwrap();
        assert_eq!(path, dir.path().join(STORED_SSH_USERS_FILE));
        assert_eq!(read_stored_ssh_users(dir.path()).unwrap().unwrap(), users());
        // Replacing keeps one file and no temporary.
        store_ssh_users(dir.path(), &users()[..1]).unwrap();
        assert_eq!(
            read_stored_ssh_users(dir.path()).unwrap().unwrap(),
            users()[..1]
        );
        let names: Vec<_> = fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, [STORED_SSH_USERS_FILE]);
    }

    #[test]
    fn a_corrupt_or_oversized_kept_file_is_refused_whole() {
        let dir = TempDir::new("ssh-store-corrupt");
        let path = dir.path().join(STORED_SSH_USERS_FILE);
        let not_json = |r: &StoredRefusal| matches!(r, StoredRefusal::Invalid(e) if matches!(**e, SshUserError::Config(_)));
        let invalid_name = |r: &StoredRefusal| matches!(r, StoredRefusal::Invalid(e) if matches!(**e, SshUserError::InvalidName { .. }));
        let too_large = |r: &StoredRefusal| {
            matches!(
                r,
                StoredRefusal::Read(confboot_util::fs::FileError::TooLarge { .. })
            )
        };
        type Is = fn(&StoredRefusal) -> bool;
        for (bytes, what, is) in [
            (b"{\"sshUsers\": [".to_vec(), "EOF", not_json as Is),
            (
                format!(
                    r#"{{"sshUsers": [{{"username": "root", "publicKey": "{}"}}]}}"#,
                    key(1)
                )
                .into_bytes(),
                "system account",
                invalid_name,
            ),
            (
                vec![b' '; MAX_SSH_USERS_CONFIG_BYTES + 1],
                "limit",
                too_large,
            ),
        ] {
            fs::write(&path, &bytes).unwrap();
            match read_stored_ssh_users(dir.path()) {
                Err(e @ SshUserError::StoredFile { .. }) => {
                    assert!(e.to_string().contains(what), "{e}");
                    let SshUserError::StoredFile { reason, .. } = &e else {
                        unreachable!()
                    };
                    assert!(is(reason), "{e:?}");
                }
                other => panic!("{other:?}"),
            }
        }
        fs::remove_file(&path).unwrap();
        std::os::unix::fs::symlink("/etc/passwd", &path).unwrap();
        assert!(matches!(
            read_stored_ssh_users(dir.path()),
            Err(SshUserError::StoredFile { .. })
        ));
    }
}
