//! The files the node trusts on its state file system, each bound to the
//! disk's generation by a MAC under a key of the disk key
//! ([`confboot_kms::state_mac`]).
//!
//! dm-crypt (AES-XTS) keeps the host from reading or writing chosen bytes,
//! not from putting back sectors it saw before: without a MAC the host could
//! restore an old copy of the SSH users or of the VPN key while the
//! generation file stays current. What the node reads from the state file
//! system and trusts ([`TRUSTED_FILES`] and the generation file itself)
//! ends in a trailer for the generation it was written at; a file whose
//! trailer is for another generation, does not match, or is missing is
//! refused, naming the file ([`StateFileError`]).
//!
//! - The generation file is sealed at its own generation, so the host cannot
//!   make one; an older one it puts back is an older generation, which the
//!   cluster (rejoin) or the admin (Recover) refuses.
//! - A trusted file is accepted at the disk's generation `G` or at `G + 1`:
//!   stepping the generation seals every trusted file at `G + 1` first and
//!   writes the generation file last, so a boot cut in between finds the
//!   files one ahead. Such a file was sealed from one checked at `G`.
//! - Every write of a trusted file steps the generation too, so no two
//!   contents of one file are ever sealed at the same generation: the one
//!   replaced is older, and refused if put back.
//! - Migration of a disk written before these MACs: its generation file
//!   has no trailer (or there is none). Its unsealed files are taken only
//!   while the generation is stepped and the generation found is exactly
//!   the one the cluster (or the admin) last confirmed, and sealed at the
//!   next one; everywhere else an unsealed file is refused. Once the
//!   generation file is sealed an unsealed file is refused always: the
//!   host cannot write one, and putting back the unsealed generation file
//!   of before the migration is a rollback.

use std::ops::RangeInclusive;
use std::path::Path;

use confboot_kms::state_mac::{StateMacError, StateMacKey, TRAILER_LEN, split};
use confboot_sys::ssh_users::{MAX_SSH_USERS_CONFIG_BYTES, STORED_SSH_USERS_FILE};
use zeroize::Zeroizing;

use super::generation::{GENERATION_FILE, parse_generation};
use super::vpn::STORED_VPN_KEY_FILE;

/// The trusted files besides the generation file: the SSH users and the
/// VPN private key.
pub const TRUSTED_FILES: [&str; 2] = [STORED_SSH_USERS_FILE, STORED_VPN_KEY_FILE];
/// The largest trusted file read (the SSH users' limit and a trailer).
const MAX_TRUSTED_FILE_BYTES: u64 = (MAX_SSH_USERS_CONFIG_BYTES + TRAILER_LEN) as u64;

/// Why a trusted file was refused or could not be read or written.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum StateFileError {
    /// Its MAC is missing, malformed, for another generation or wrong.
    #[error("{file} refused: {reason}")]
    Refused {
        /// The file.
        file: &'static str,
        /// Why.
        reason: StateMacError,
    },
    /// The generation file does not hold a generation (the host changed it).
    #[error("{GENERATION_FILE} does not hold a generation")]
    NotAGeneration,
    /// It could not be read or written.
    #[error("{file}: {reason}")]
    Io {
        /// The file.
        file: &'static str,
        /// What the system said.
        reason: String,
    },
}

/// The trusted files of a mounted state file system, with the disk's key
/// and generation.
pub struct StateFiles<'a> {
    dir: &'a Path,
    key: StateMacKey,
    generation: u64,
    /// The generation file carries a MAC (no migration is due).
    sealed: bool,
}

impl<'a> StateFiles<'a> {
    /// The trusted files in `dir` for the disk whose key is `disk_key`: its
    /// generation file is read and checked (none: generation 0).
    pub fn open(dir: &'a Path, disk_key: &[u8]) -> Result<Self, StateFileError> {
        let mut files = StateFiles {
            dir,
            key: StateMacKey::derive(disk_key),
            generation: 0,
            sealed: false,
        };
        if let Some(bytes) = files.read_raw(GENERATION_FILE)? {
            let refused = |reason| StateFileError::Refused {
                file: GENERATION_FILE,
                reason,
            };
            match split(&bytes) {
                Err(StateMacError::Unsealed) => files.generation = parse_generation(&bytes)?,
                Err(e) => return Err(refused(e)),
                Ok((body, generation, _)) => {
                    let (_, generation) = files
                        .key
                        .open(GENERATION_FILE, &bytes, generation..=generation)
                        .map_err(refused)?;
                    if parse_generation(body)? != generation {
                        return Err(StateFileError::NotAGeneration);
                    }
                    (files.generation, files.sealed) = (generation, true);
                }
            }
        }
        Ok(files)
    }

    /// The disk's generation (0: no generation file).
    pub fn generation(&self) -> u64 {
        self.generation
    }

    fn accepted(&self) -> RangeInclusive<u64> {
        self.generation..=self.generation.saturating_add(1)
    }

    fn read_raw(&self, file: &'static str) -> Result<Option<Zeroizing<Vec<u8>>>, StateFileError> {
        let path = self.dir.join(file);
        let io = |reason: String| StateFileError::Io { file, reason };
        match std::fs::symlink_metadata(&path) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(io(e.to_string())),
            Ok(meta) if !meta.file_type().is_file() => return Err(io("not a regular file".into())),
            Ok(_) => {}
        }
        confboot_util::fs::read_bounded(&path, MAX_TRUSTED_FILE_BYTES)
            .map(Some)
            .map_err(|e| io(e.to_string()))
    }

    /// The body of the trusted `file` (`None`: there is none), refused
    /// unless its MAC is for this disk's generation (or the next).
    pub fn read(&self, file: &'static str) -> Result<Option<Zeroizing<Vec<u8>>>, StateFileError> {
        let Some(bytes) = self.read_raw(file)? else {
            return Ok(None);
        };
        let (body, _) = self
            .key
            .open(file, &bytes, self.accepted())
            .map_err(|reason| StateFileError::Refused { file, reason })?;
        Ok(Some(Zeroizing::new(body.to_vec())))
    }

    fn write_at(
        &self,
        file: &'static str,
        generation: u64,
        body: &[u8],
    ) -> Result<(), StateFileError> {
        confboot_vpn::write_private_atomically(
            &self.dir.join(file),
            &self.key.seal(file, generation, body),
        )
        .map_err(|e| StateFileError::Io {
            file,
            reason: e.to_string(),
        })
    }

    /// Keeps `body` as the trusted `file`. Every write steps the disk's
    /// generation (the other trusted files sealed again at the next one),
    /// so what the file held before is of an older generation and refused
    /// if the host puts it back; a disk without a generation file gets one.
    pub fn write(&mut self, file: &'static str, body: &[u8]) -> Result<(), StateFileError> {
        self.commit(self.generation.saturating_add(1), false, Some((file, body)))
    }

    /// Steps the disk to generation `next`: every trusted file is checked
    /// and sealed again at `next`, then the generation file is written.
    /// `fresh`: the generation found is the one the cluster or the admin
    /// last confirmed, so an unmigrated disk's unsealed files are taken.
    pub fn step(&mut self, next: u64, fresh: bool) -> Result<(), StateFileError> {
        self.commit(next, fresh, None)
    }

    fn commit(
        &mut self,
        next: u64,
        fresh: bool,
        replace: Option<(&'static str, &[u8])>,
    ) -> Result<(), StateFileError> {
        for file in TRUSTED_FILES {
            if let Some((name, body)) = replace.filter(|(name, _)| *name == file) {
                self.write_at(name, next, body)?;
                continue;
            }
            let Some(bytes) = self.read_raw(file)? else {
                continue;
            };
            let body = match self.key.open(file, &bytes, self.accepted()) {
                Ok((body, _)) => body,
                Err(StateMacError::Unsealed) if !self.sealed && fresh => {
                    log::warn!("state disk: {file} carried no MAC; sealed now (migration)");
                    &bytes[..]
                }
                Err(reason) => return Err(StateFileError::Refused { file, reason }),
            };
            self.write_at(file, next, body)?;
        }
        self.write_at(GENERATION_FILE, next, format!("{next}\n").as_bytes())?;
        (self.generation, self.sealed) = (next, true);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEY: [u8; 32] = [0x42; 32];

    #[test]
    fn a_file_reads_back_at_its_generation_and_the_next_only() {
        let dir = confboot_testkit::TempDir::new("trusted");
        let mut files = StateFiles::open(dir.path(), &KEY).unwrap();
        assert_eq!(files.read(STORED_VPN_KEY_FILE), Ok(None));
        files.write(STORED_VPN_KEY_FILE, b"key\n").unwrap();
        assert_eq!(files.generation(), 1, "a write steps the generation");
        assert_eq!(*files.read(STORED_VPN_KEY_FILE).unwrap().unwrap(), b"key\n");
        let old = std::fs::read(dir.path().join(STORED_VPN_KEY_FILE)).unwrap();
        files.step(2, false).unwrap();
        let files = StateFiles::open(dir.path(), &KEY).unwrap();
        assert_eq!(files.generation(), 2);
        assert_eq!(*files.read(STORED_VPN_KEY_FILE).unwrap().unwrap(), b"key\n");
        // The copy of generation 0 put back: refused, naming the file.
        std::fs::write(dir.path().join(STORED_VPN_KEY_FILE), &old).unwrap();
        let err = files.read(STORED_VPN_KEY_FILE).unwrap_err();
        assert_eq!(
            err.to_string(),
            "vpn-private-key refused: its MAC is for generation 1, the disk is at generation 2"
        );
        // Another disk's key: refused.
        let other = StateFiles::open(dir.path(), &[1; 32]);
        assert!(matches!(
            other,
            Err(StateFileError::Refused {
                file: GENERATION_FILE,
                reason: StateMacError::Mismatch
            })
        ));
    }

    #[test]
    fn an_unsealed_file_is_taken_only_when_a_legacy_disk_steps_fresh() {
        let dir = confboot_testkit::TempDir::new("trusted-legacy");
        std::fs::write(dir.path().join(GENERATION_FILE), "3\n").unwrap();
        std::fs::write(dir.path().join(STORED_SSH_USERS_FILE), "{}\n").unwrap();
        let mut files = StateFiles::open(dir.path(), &KEY).unwrap();
        assert_eq!(files.generation(), 3);
        let unsealed = StateFileError::Refused {
            file: STORED_SSH_USERS_FILE,
            reason: StateMacError::Unsealed,
        };
        assert_eq!(files.read(STORED_SSH_USERS_FILE), Err(unsealed.clone()));
        assert_eq!(files.step(4, false), Err(unsealed.clone()));
        files.step(4, true).unwrap();
        let mut files = StateFiles::open(dir.path(), &KEY).unwrap();
        assert_eq!(
            *files.read(STORED_SSH_USERS_FILE).unwrap().unwrap(),
            b"{}\n"
        );
        // Migrated: an unsealed file is refused even at a fresh step.
        std::fs::write(dir.path().join(STORED_SSH_USERS_FILE), "{}\n").unwrap();
        assert_eq!(files.step(5, true), Err(unsealed));
    }

    #[test]
    fn a_content_replaced_within_one_boot_is_refused_when_put_back() {
        let dir = confboot_testkit::TempDir::new("trusted-rewrite");
        let mut files = StateFiles::open(dir.path(), &KEY).unwrap();
        files.write(STORED_SSH_USERS_FILE, b"two users\n").unwrap();
        let old = std::fs::read(dir.path().join(STORED_SSH_USERS_FILE)).unwrap();
        files.write(STORED_SSH_USERS_FILE, b"none\n").unwrap();
        files.write(STORED_VPN_KEY_FILE, b"key\n").unwrap();
        std::fs::write(dir.path().join(STORED_SSH_USERS_FILE), &old).unwrap();
        let files = StateFiles::open(dir.path(), &KEY).unwrap();
        assert_eq!(
            files.read(STORED_SSH_USERS_FILE),
            Err(StateFileError::Refused {
                file: STORED_SSH_USERS_FILE,
                reason: StateMacError::OtherGeneration {
                    found: 1,
                    current: 3
                }
            })
        );
    }
}
