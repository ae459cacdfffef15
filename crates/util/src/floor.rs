//! A time floor: the latest time a process has good reason to believe has
//! passed, kept on disk, so that a clock set back cannot make an expired
//! window or stale collateral current again.
//!
//! A confidential guest reads its wall clock from the host (the kvmclock
//! and the RTC are the host's), and the host is the adversary. A check
//! that compares a signed window (`notBefore`/`notAfter` of a
//! reference-value set) or a collateral's `issueDate`/`nextUpdate` with
//! the wall clock alone admits again whatever expired, once the host sets
//! the clock back. A [`TimeFloor`] is the maximum of every time seen: the
//! wall clock at each reading ([`TimeFloor::now`]), and the times that
//! signed material proves have passed ([`TimeFloor::advance`]: a
//! collateral's `issueDate`, signed by Intel, or the start of a
//! reference-value set's window). Checks read [`TimeFloor::now`], which
//! never goes back, within a run or, with a file, across restarts.
//!
//! # The file
//!
//! One line, the floor as decimal Unix seconds (at most
//! [`MAX_FLOOR_FILE_BYTES`] bytes), replaced atomically
//! ([`crate::fs::replace_private`]). A file that is missing is a first
//! start (floor 0); a file that does not read is an error (the caller
//! refuses to start: fail closed). The wall clock's advances are written
//! once they are [`PERSIST_STEP`] seconds past the last written value (a
//! restart may lose up to that much); an advance from signed material is
//! written at once.
//!
//! # What it does not stop
//!
//! A clock set *forward* raises the floor for good: windows and
//! collateral then look expired until the file is removed, which refuses
//! nodes but admits none (a denial of service, which the host has anyway).
//! The file lives where the process keeps its state: a host that can
//! delete or roll back that file resets the floor to what it held.

use std::path::{Path, PathBuf};
use std::sync::Mutex;

use crate::fs::{FileError, read_bounded, replace_private};

/// Largest floor file read, in bytes.
pub const MAX_FLOOR_FILE_BYTES: u64 = 32;
/// Seconds the wall clock's floor may run ahead of the file before it is
/// written again.
pub const PERSIST_STEP: i64 = 60;

/// Why a floor file is not a floor.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum FloorProblem {
    /// Not one line of decimal digits.
    #[error("not one line of decimal Unix seconds")]
    NotSeconds,
    /// Digits, but more seconds than an `i64` holds.
    #[error("more seconds than a time holds")]
    OutOfRange,
}

/// Why a floor could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum FloorError {
    /// The file could not be read or written.
    #[error("time floor: {0}")]
    File(#[source] FileError),
    /// The file does not hold a floor.
    #[error("time floor {}: {problem}", .path.display())]
    Format {
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        problem: FloorProblem,
    },
}

/// Reads a floor file's contents: decimal Unix seconds, one optional
/// final newline.
pub fn parse_floor(bytes: &[u8]) -> Result<i64, FloorProblem> {
    let digits = bytes.strip_suffix(b"\n").unwrap_or(bytes);
    if digits.is_empty() || !digits.iter().all(u8::is_ascii_digit) {
        return Err(FloorProblem::NotSeconds);
    }
    std::str::from_utf8(digits)
        .map_err(|_| FloorProblem::NotSeconds)?
        .parse::<i64>()
        .map_err(|_| FloorProblem::OutOfRange)
}

#[derive(Debug)]
struct State {
    floor: i64,
    written: i64,
}

/// The latest time seen, never going back; see the module documentation.
/// Shared between threads by reference (`Arc<TimeFloor>`).
#[derive(Debug)]
pub struct TimeFloor {
    path: Option<PathBuf>,
    state: Mutex<State>,
}

impl TimeFloor {
    /// A floor kept in `path`: read from it (missing: 0, a first start),
    /// written back as it advances.
    pub fn load(path: &Path) -> Result<TimeFloor, FloorError> {
        let floor = match read_bounded(path, MAX_FLOOR_FILE_BYTES) {
            Ok(bytes) => parse_floor(&bytes).map_err(|problem| FloorError::Format {
                path: path.to_path_buf(),
                problem,
            })?,
            Err(FileError::Read { error, .. }) if error.kind() == std::io::ErrorKind::NotFound => 0,
            Err(e) => return Err(FloorError::File(e)),
        };
        Ok(TimeFloor {
            path: Some(path.to_path_buf()),
            state: Mutex::new(State {
                floor,
                written: floor,
            }),
        })
    }

    /// A floor for this run only, starting at `floor`.
    pub fn in_memory(floor: i64) -> TimeFloor {
        TimeFloor {
            path: None,
            state: Mutex::new(State {
                floor,
                written: floor,
            }),
        }
    }

    /// The file it is kept in, if any.
    pub fn path(&self) -> Option<&Path> {
        self.path.as_deref()
    }

    /// The floor, without reading the clock.
    pub fn get(&self) -> i64 {
        self.state.lock().unwrap_or_else(|e| e.into_inner()).floor
    }

    /// Raises the floor to `seen`, a time that signed material proves has
    /// passed, and writes it at once. Returns the floor.
    pub fn advance(&self, seen: i64) -> Result<i64, FloorError> {
        self.raise(seen, 0)
    }

    /// Raises the floor to the wall clock reading `wall` and returns the
    /// floor: the time checks read. Written when [`PERSIST_STEP`] past
    /// the file; a write that fails is logged and the floor still holds
    /// for this run.
    pub fn observe(&self, wall: i64) -> i64 {
        match self.raise(wall, PERSIST_STEP) {
            Ok(t) => t,
            Err(e) => {
                log::error!("{e}; the floor holds for this run only");
                self.get()
            }
        }
    }

    /// [`TimeFloor::observe`] of the wall clock now.
    pub fn now(&self) -> i64 {
        self.observe(crate::time::unix_now())
    }

    fn raise(&self, seen: i64, step: i64) -> Result<i64, FloorError> {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        if seen > state.floor {
            state.floor = seen;
        }
        let floor = state.floor;
        if let Some(path) = &self.path
            && floor > state.written
            && floor - state.written >= step
        {
            replace_private(path, format!("{floor}\n").as_bytes()).map_err(FloorError::File)?;
            state.written = floor;
        }
        Ok(floor)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use confboot_testkit::TempDir;

    const T: i64 = 1_800_000_000;

    #[test]
    fn a_clock_set_back_reads_as_the_latest_time_seen() {
        let floor = TimeFloor::in_memory(0);
        assert_eq!(floor.observe(T), T);
        assert_eq!(floor.observe(T - 86_400), T, "the clock went back a day");
        assert_eq!(floor.observe(T + 5), T + 5);
        assert_eq!(floor.advance(T + 100).unwrap(), T + 100);
        assert_eq!(floor.observe(T + 6), T + 100);
    }

    #[test]
    fn the_floor_survives_a_restart_and_a_clock_set_back() {
        let dir = TempDir::new("floor-restart");
        let path = dir.path().join("time-floor");
        let floor = TimeFloor::load(&path).unwrap();
        assert_eq!(floor.get(), 0, "no file: a first start");
        floor.observe(T);
        // Signed material is written at once.
        floor.advance(T + 10).unwrap();
        drop(floor);
        let again = TimeFloor::load(&path).unwrap();
        assert_eq!(again.observe(T - 365 * 86_400), T + 10);
        // Wall-clock advances are written in steps.
        again.observe(T + 10 + PERSIST_STEP - 1);
        assert_eq!(TimeFloor::load(&path).unwrap().get(), T + 10);
        again.observe(T + 10 + PERSIST_STEP);
        assert_eq!(TimeFloor::load(&path).unwrap().get(), T + 10 + PERSIST_STEP);
    }

    #[test]
    fn a_file_that_is_not_a_floor_is_refused() {
        let dir = TempDir::new("floor-bad");
        let path = dir.path().join("time-floor");
        for bad in [
            &b""[..],
            b"-5\n",
            b"12a",
            b"1 2",
            b"99999999999999999999\n",
            b"1\n\n",
        ] {
            std::fs::write(&path, bad).unwrap();
            assert!(
                matches!(TimeFloor::load(&path), Err(FloorError::Format { .. })),
                "{bad:?}"
            );
        }
        std::fs::write(&path, [b'1'; 33]).unwrap();
        assert!(matches!(TimeFloor::load(&path), Err(FloorError::File(_))));
        assert_eq!(parse_floor(b"1800000000\n"), Ok(T));
        assert_eq!(parse_floor(b"1800000000"), Ok(T));
    }
}
