//! The node's side of rollback detection: the state disk's generation,
//! kept on its state file system (inside dm-crypt), checked against the
//! generation the cluster last confirmed and advanced at each rejoin. Why
//! this detects a disk restored from an old copy, and why the host cannot
//! forge the counter: `confboot_cluster::generation`.

use confboot_cluster::generation::{RolledBack, check_generation, generation_proof};
use confboot_cluster::role::ControlPlanePublicKey;
use confboot_proto::join::ConfirmGenerationRequest;

use super::state_fs::StateFsError;
use super::trusted::StateFileError;

/// Where the generation is kept on the state file system (sealed:
/// [`super::trusted`]).
pub const GENERATION_FILE: &str = "state-generation";

/// Why no join service took a generation confirmation.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ConfirmError {
    /// No join service endpoint is known.
    #[error("no join service known")]
    NoJoinService,
    /// A join service refused the confirmation (final: no other is asked).
    #[error("{endpoint} refused it: {reason}")]
    Refused {
        /// The join service.
        endpoint: String,
        /// What it said.
        reason: String,
    },
    /// The last join service tried could not be reached or checked.
    #[error("{endpoint}: {reason}")]
    Unreachable {
        /// The join service.
        endpoint: String,
        /// Why the attempt failed.
        reason: String,
    },
}

/// Why the state disk's generation could not be read, kept or confirmed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum GenerationError {
    /// No decrypted state device is mapped to keep it on.
    #[error("no decrypted state device to keep it on (--disk-mode header-only)")]
    NoDevice,
    /// The state file system could not be mounted or unmounted.
    #[error("{0}")]
    StateFs(StateFsError),
    /// The generation file or a trusted file was refused, or could not be
    /// read or written.
    #[error("{0}")]
    StateFile(StateFileError),
    /// The cluster did not take the written generation.
    #[error("generation {next} not confirmed: {error}")]
    NotConfirmed {
        /// The generation written.
        next: u64,
        /// Why it was not confirmed.
        error: ConfirmError,
    },
}

/// Sends a rejoined node's generation confirmation to a join service of
/// its cluster (`join.API/ConfirmGeneration`).
pub trait GenerationConfirmer: Send + Sync {
    /// Sends `request` to a control plane of the cluster `cluster_id`: a
    /// member whose answer the role key `control_plane_key` signed for the
    /// session; an error says why the cluster did not take it.
    fn confirm(
        &self,
        request: &ConfirmGenerationRequest,
        cluster_id: &[u8],
        control_plane_key: &ControlPlanePublicKey,
    ) -> Result<(), ConfirmError>;
}

/// The generation a generation file's body holds (its MAC is
/// [`super::trusted::StateFiles::open`]'s). Anything but digits and a
/// newline is an error: only the node writes it, so anything else is a
/// disk the host changed.
pub fn parse_generation(body: &[u8]) -> Result<u64, StateFileError> {
    let digits = body.strip_suffix(b"\n").unwrap_or(body);
    if digits.is_empty() || digits.len() > 20 || !digits.iter().all(u8::is_ascii_digit) {
        return Err(StateFileError::NotAGeneration);
    }
    std::str::from_utf8(digits)
        .ok()
        .and_then(|d| d.parse().ok())
        .ok_or(StateFileError::NotAGeneration)
}

/// The generation the state file system in `dir` keeps (0: none), its MAC
/// not checked.
#[cfg(test)]
pub fn read_generation(dir: &std::path::Path) -> Result<u64, StateFileError> {
    let Ok(bytes) = std::fs::read(dir.join(GENERATION_FILE)) else {
        return Ok(0);
    };
    match confboot_kms::state_mac::split(&bytes) {
        Ok((body, _, _)) => parse_generation(body),
        Err(_) => parse_generation(&bytes),
    }
}

/// The most disks' minimum generations a Recover may name.
pub const MAX_MIN_GENERATIONS: usize = 4096;

/// The lowest generation the admin accepts for `disk_uuid` in a Recover's
/// `min_generations` (UUIDs compared in lower case; 0: none named).
pub fn min_generation(
    min_generations: &std::collections::HashMap<String, u64>,
    disk_uuid: &str,
) -> u64 {
    let disk = disk_uuid.to_ascii_lowercase();
    min_generations
        .iter()
        .filter(|(uuid, _)| uuid.to_ascii_lowercase() == disk)
        .map(|(_, g)| *g)
        .max()
        .unwrap_or(0)
}

/// What the node does with the generation its disk holds: refuse it (and
/// tell the cluster what it found), or write the next one.
#[derive(Debug, PartialEq, Eq)]
pub enum Step {
    /// The disk is older than the cluster last saw it.
    Refuse(RolledBack),
    /// Write this generation, then confirm it.
    Write(u64),
}

/// The step for a disk holding `found` when the cluster last confirmed
/// `last`.
pub fn step(found: u64, last: u64) -> Step {
    match check_generation(found, last) {
        Err(rolled_back) => Step::Refuse(rolled_back),
        Ok(()) => Step::Write(found.saturating_add(1)),
    }
}

/// The confirmation of `found` and `written` (0: none) on `disk_uuid`,
/// proven with `disk_key`.
pub fn confirmation(
    disk_key: &[u8],
    disk_uuid: &str,
    found: u64,
    written: u64,
) -> ConfirmGenerationRequest {
    let disk_uuid = disk_uuid.to_ascii_lowercase();
    ConfirmGenerationRequest {
        proof: generation_proof(disk_key, &disk_uuid, found, written).to_vec(),
        disk_uuid,
        found_generation: found,
        written_generation: written,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_generation_body_parses_and_a_spoilt_one_is_an_error() {
        assert_eq!(parse_generation(b"41\n"), Ok(41));
        assert_eq!(parse_generation(b"18446744073709551615\n"), Ok(u64::MAX));
        for bad in [
            &b""[..],
            b"\n",
            b"-1\n",
            b"12a\n",
            b"\xff\xfe",
            b"99999999999999999999\n",
            &[b'7'; 40],
        ] {
            assert!(parse_generation(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn an_older_disk_is_refused_and_any_other_advances() {
        assert_eq!(step(0, 0), Step::Write(1));
        assert_eq!(step(5, 5), Step::Write(6));
        assert_eq!(step(6, 5), Step::Write(7));
        assert_eq!(step(4, 5), Step::Refuse(RolledBack { found: 4, last: 5 }));
    }
}
