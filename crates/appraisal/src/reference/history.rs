//! What a reader remembers of the sets it has seen, so that a set it
//! retired stays retired: by what was signed, not by the file's bytes,
//! and, kept in a file, across restarts.
//!
//! # What identifies a set
//!
//! A set is the payload its release key signed: the unsigned CoRIM, of
//! which the format has exactly one encoding ([`super::ReferenceSet::from_cbor`]).
//! The COSE_Sign1 around it is not: an ECDSA signature `(r, s)` verifies
//! as `(r, n − s)` too, and the release may sign the same payload again
//! (ECDSA signing is randomized), so one set has many envelopes. A set is
//! therefore retired by the SHA-256 of its payload
//! ([`super::OpenedSet::digest`]), and a retired set is refused whatever
//! envelope it comes back in.
//!
//! # Newer signings
//!
//! A release that signs a set's name and version again, with a later
//! not-before (to shorten or move its window), supersedes the earlier
//! signings: a reader that has seen the newer one refuses a set of the
//! same name and version whose not-before is earlier
//! ([`HistoryRefusal::Superseded`]). This is the rule a node applies to
//! the sets join services present, as it never sees a set's file removed.
//!
//! # Bounds
//!
//! At most [`MAX_RETIRED`] retirements and [`MAX_SIGNINGS`] names are
//! kept. A retirement whose not-after the reader's time floor has passed
//! is dropped first (its window refuses the set anyway); only when every
//! kept retirement is still within its window is the one that ends first
//! dropped. Sets are signed by the release, so only the release, not the
//! host, makes entries.
//!
//! # The file
//!
//! JSON, at most [`MAX_HISTORY_BYTES`], replaced atomically
//! ([`confboot_util::fs::replace_private`]) after every change:
//!
//! ```text
//! { "retired": [ { "digest": HEX64, "name": TEXT, "version": TEXT,
//!                  "notAfter": SECONDS, "retiredAt": SECONDS,
//!                  "reason": "removed" | "expired" | "superseded" } ],
//!   "signings": [ { "name": TEXT, "version": TEXT, "notBefore": SECONDS } ] }
//! ```
//!
//! A missing file is a first start; one that does not read is an error
//! (the caller refuses to start).

use std::collections::{BTreeMap, VecDeque};
use std::path::{Path, PathBuf};

use confboot_attest::SetName;
use confboot_util::fs::FileError;
use confboot_util::json::JsonError;
use serde::Deserialize;

use super::{MAX_NAME_LEN, instant};

/// Most retirements remembered.
pub const MAX_RETIRED: usize = 256;
/// Most set names whose newest signing is remembered.
pub const MAX_SIGNINGS: usize = 256;
/// Largest history file read, in bytes.
pub const MAX_HISTORY_BYTES: u64 = 256 * 1024;

/// Why a set was retired.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Retirement {
    /// Its file was removed from the directory.
    Removed,
    /// Its not-after passed.
    Expired,
    /// A newer signing of its name and version was seen.
    Superseded,
}

impl Retirement {
    fn name(self) -> &'static str {
        match self {
            Retirement::Removed => "removed",
            Retirement::Expired => "expired",
            Retirement::Superseded => "superseded",
        }
    }

    fn from_name(name: &str) -> Option<Retirement> {
        [
            Retirement::Removed,
            Retirement::Expired,
            Retirement::Superseded,
        ]
        .into_iter()
        .find(|r| r.name() == name)
    }
}

impl std::fmt::Display for Retirement {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Retirement::Removed => "its file was removed",
            Retirement::Expired => "its window ended",
            Retirement::Superseded => "a newer signing of it was seen",
        })
    }
}

/// One retired set, as the history keeps it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RetiredRecord {
    /// The SHA-256 of its signed payload.
    pub digest: [u8; 32],
    /// Its name and version.
    pub name: SetName,
    /// The end of its window, Unix seconds.
    pub not_after: i64,
    /// When it was retired, Unix seconds.
    pub retired_at: i64,
    /// Why.
    pub reason: Retirement,
}

/// Why the history refuses a set.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum HistoryRefusal {
    /// It was retired.
    #[error("the set {name} was retired at {} ({reason}) and is not accepted again", instant(*.retired_at))]
    Retired {
        /// The set.
        name: SetName,
        /// When it was retired.
        retired_at: i64,
        /// Why.
        reason: Retirement,
    },
    /// A newer signing of its name and version was seen.
    #[error("the set {name} valid from {} is superseded by its signing valid from {}", instant(*.not_before), instant(*.newest))]
    Superseded {
        /// The set.
        name: SetName,
        /// Its not-before.
        not_before: i64,
        /// The not-before of the newest signing seen.
        newest: i64,
    },
}

/// Why a history file cannot be read or written.
#[derive(Debug, thiserror::Error)]
pub enum HistoryError {
    /// The file cannot be read or written.
    #[error("reference-value history: {0}")]
    File(#[source] FileError),
    /// The file is not JSON of the format.
    #[error("reference-value history {}: {error}", .path.display())]
    Json {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        error: JsonError,
    },
    /// The file is JSON of the format, with a value out of its bounds.
    #[error("reference-value history {}: {problem}", .path.display())]
    Format {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        problem: HistoryProblem,
    },
}

/// A value of a history file out of the format's bounds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum HistoryProblem {
    /// A digest is not 64 hex digits.
    #[error("a digest is not 64 hex digits")]
    Digest,
    /// A name or version is empty or too long.
    #[error("a name or version is empty or longer than {MAX_NAME_LEN} bytes")]
    Name,
    /// A reason the format does not name.
    #[error("a reason that is not removed, expired or superseded")]
    Reason,
    /// More entries than are kept.
    #[error("more than {MAX_RETIRED} retirements or {MAX_SIGNINGS} signings")]
    TooMany,
    /// A time before 1970 or after 9999.
    #[error("a time out of 1970 to 9999")]
    Time,
    /// A name and version listed twice among the signings.
    #[error("a name and version listed twice")]
    Duplicate,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    retired: Vec<RetiredEntry>,
    signings: Vec<SigningEntry>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct RetiredEntry {
    digest: String,
    name: String,
    version: String,
    not_after: i64,
    retired_at: i64,
    reason: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct SigningEntry {
    name: String,
    version: String,
    not_before: i64,
}

/// The sets a reader retired and the newest signing of each name it saw.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SetHistory {
    path: Option<PathBuf>,
    retired: VecDeque<RetiredRecord>,
    signings: BTreeMap<SetName, i64>,
}

fn set_name(name: String, version: String) -> Result<SetName, HistoryProblem> {
    let ok = |t: &str| !t.is_empty() && t.len() <= MAX_NAME_LEN;
    if ok(&name) && ok(&version) {
        Ok(SetName { name, version })
    } else {
        Err(HistoryProblem::Name)
    }
}

fn time(t: i64) -> Result<i64, HistoryProblem> {
    if (0..=super::MAX_TIME).contains(&t) {
        Ok(t)
    } else {
        Err(HistoryProblem::Time)
    }
}

impl SetHistory {
    /// A history for this run only.
    pub fn in_memory() -> SetHistory {
        SetHistory::default()
    }

    /// A history kept in `path`: read from it (missing: empty, a first
    /// start), written back after every change.
    pub fn load(path: &Path) -> Result<SetHistory, HistoryError> {
        let mut history = match confboot_util::fs::read_bounded(path, MAX_HISTORY_BYTES) {
            Ok(bytes) => SetHistory::from_json(&bytes).map_err(|e| match e {
                ParseError::Json(error) => HistoryError::Json {
                    path: path.to_path_buf(),
                    error,
                },
                ParseError::Format(problem) => HistoryError::Format {
                    path: path.to_path_buf(),
                    problem,
                },
            })?,
            Err(FileError::Read { error, .. }) if error.kind() == std::io::ErrorKind::NotFound => {
                SetHistory::default()
            }
            Err(e) => return Err(HistoryError::File(e)),
        };
        history.path = Some(path.to_path_buf());
        Ok(history)
    }

    /// Reads a history file's contents (the format of the module
    /// documentation).
    pub fn from_json(bytes: &[u8]) -> Result<SetHistory, ParseError> {
        let file: File = confboot_util::json::object(bytes).map_err(ParseError::Json)?;
        if file.retired.len() > MAX_RETIRED || file.signings.len() > MAX_SIGNINGS {
            return Err(ParseError::Format(HistoryProblem::TooMany));
        }
        let mut history = SetHistory::default();
        for e in file.retired {
            let digest = confboot_util::hex::decode(&e.digest)
                .ok()
                .and_then(|d| <[u8; 32]>::try_from(d.as_slice()).ok())
                .ok_or(ParseError::Format(HistoryProblem::Digest))?;
            history.retired.push_back(RetiredRecord {
                digest,
                name: set_name(e.name, e.version).map_err(ParseError::Format)?,
                not_after: time(e.not_after).map_err(ParseError::Format)?,
                retired_at: time(e.retired_at).map_err(ParseError::Format)?,
                reason: Retirement::from_name(&e.reason)
                    .ok_or(ParseError::Format(HistoryProblem::Reason))?,
            });
        }
        for e in file.signings {
            let name = set_name(e.name, e.version).map_err(ParseError::Format)?;
            let not_before = time(e.not_before).map_err(ParseError::Format)?;
            if history.signings.insert(name, not_before).is_some() {
                return Err(ParseError::Format(HistoryProblem::Duplicate));
            }
        }
        Ok(history)
    }

    /// The file's contents for this history.
    pub fn to_json(&self) -> String {
        let retired: Vec<serde_json::Value> = self
            .retired
            .iter()
            .map(|r| {
                serde_json::json!({
                    "digest": confboot_util::hex::encode(&r.digest),
                    "name": r.name.name,
                    "version": r.name.version,
                    "notAfter": r.not_after,
                    "retiredAt": r.retired_at,
                    "reason": r.reason.name(),
                })
            })
            .collect();
        let signings: Vec<serde_json::Value> = self
            .signings
            .iter()
            .map(|(name, not_before)| {
                serde_json::json!({
                    "name": name.name,
                    "version": name.version,
                    "notBefore": not_before,
                })
            })
            .collect();
        let mut text = serde_json::json!({ "retired": retired, "signings": signings }).to_string();
        text.push('\n');
        text
    }

    /// The file it is kept in, if any.
    pub fn path(&self) -> Option<&Path> {
        self.path.as_deref()
    }

    /// The retirements kept, oldest first.
    pub fn retired(&self) -> impl Iterator<Item = &RetiredRecord> {
        self.retired.iter()
    }

    /// Whether the set `name`, valid from `not_before`, whose signed
    /// payload hashes to `digest`, may be accepted: not retired, and not
    /// superseded by a newer signing seen.
    pub fn check(
        &self,
        digest: &[u8; 32],
        name: &SetName,
        not_before: i64,
    ) -> Result<(), HistoryRefusal> {
        if let Some(r) = self.retired.iter().find(|r| r.digest == *digest) {
            return Err(HistoryRefusal::Retired {
                name: r.name.clone(),
                retired_at: r.retired_at,
                reason: r.reason,
            });
        }
        match self.signings.get(name) {
            Some(&newest) if not_before < newest => Err(HistoryRefusal::Superseded {
                name: name.clone(),
                not_before,
                newest,
            }),
            _ => Ok(()),
        }
    }

    /// Records a verified set's signing: the newest not-before of its
    /// name and version. Written when it changed.
    pub fn seen(&mut self, name: &SetName, not_before: i64) -> Result<(), HistoryError> {
        if self.signings.get(name).is_some_and(|&n| n >= not_before) {
            return Ok(());
        }
        if !self.signings.contains_key(name) && self.signings.len() == MAX_SIGNINGS {
            // The name seen longest ago (its newest signing the oldest) goes.
            if let Some(oldest) = self
                .signings
                .iter()
                .min_by_key(|(_, t)| **t)
                .map(|(n, _)| n.clone())
            {
                self.signings.remove(&oldest);
            }
        }
        self.signings.insert(name.clone(), not_before);
        self.write()
    }

    /// Retires a set; `floor` is the reader's time (a retirement whose
    /// not-after is before it may be dropped to make room). Written.
    pub fn retire(&mut self, record: RetiredRecord, floor: i64) -> Result<(), HistoryError> {
        if self.retired.iter().any(|r| r.digest == record.digest) {
            return Ok(());
        }
        if self.retired.len() >= MAX_RETIRED {
            self.retired.retain(|r| r.not_after >= floor);
        }
        if self.retired.len() >= MAX_RETIRED
            && let Some(first) = self
                .retired
                .iter()
                .enumerate()
                .min_by_key(|(_, r)| r.not_after)
                .map(|(i, _)| i)
        {
            let dropped = self.retired.remove(first);
            log::warn!(
                "{MAX_RETIRED} retired reference-value sets are within their windows: {} is forgotten",
                dropped.map(|r| r.name.to_string()).unwrap_or_default()
            );
        }
        self.retired.push_back(record);
        self.write()
    }

    fn write(&self) -> Result<(), HistoryError> {
        match &self.path {
            Some(path) => confboot_util::fs::replace_private(path, self.to_json().as_bytes())
                .map_err(HistoryError::File),
            None => Ok(()),
        }
    }
}

/// Why a history file's contents do not read.
#[derive(Debug, thiserror::Error)]
pub enum ParseError {
    /// Not JSON of the format.
    #[error("{0}")]
    Json(#[source] JsonError),
    /// A value out of bounds.
    #[error("{0}")]
    Format(HistoryProblem),
}

#[cfg(test)]
mod tests {
    use super::*;
    use confboot_testkit::TempDir;

    const T: i64 = 1_800_000_000;

    fn name(version: &str) -> SetName {
        SetName {
            name: "confboot-node".into(),
            version: version.into(),
        }
    }

    fn record(byte: u8, not_after: i64) -> RetiredRecord {
        RetiredRecord {
            digest: [byte; 32],
            name: name("1"),
            not_after,
            retired_at: T,
            reason: Retirement::Removed,
        }
    }

    #[test]
    fn a_history_reads_back_what_it_wrote() {
        let dir = TempDir::new("history-roundtrip");
        let path = dir.path().join("history.json");
        let mut h = SetHistory::load(&path).unwrap();
        assert!(h.retired().next().is_none(), "no file: a first start");
        h.retire(record(1, T + 10), T).unwrap();
        h.seen(&name("2"), T - 5).unwrap();
        let again = SetHistory::load(&path).unwrap();
        assert_eq!(again, h);
        assert!(again.check(&[1; 32], &name("1"), 0).is_err());
        assert!(again.check(&[2; 32], &name("2"), T - 6).is_err());
        assert!(again.check(&[2; 32], &name("2"), T - 5).is_ok());
    }

    #[test]
    fn files_out_of_the_format_are_refused() {
        let ok = r#"{"retired":[],"signings":[]}"#;
        assert!(SetHistory::from_json(ok.as_bytes()).is_ok());
        let entry = |digest: &str, reason: &str, t: i64| {
            format!(
                r#"{{"retired":[{{"digest":"{digest}","name":"n","version":"1","notAfter":{t},"retiredAt":{t},"reason":"{reason}"}}],"signings":[]}}"#
            )
        };
        let good = "ab".repeat(32);
        assert!(SetHistory::from_json(entry(&good, "removed", T).as_bytes()).is_ok());
        for (bad, problem) in [
            (entry("ab", "removed", T), HistoryProblem::Digest),
            (entry(&good, "lost", T), HistoryProblem::Reason),
            (entry(&good, "expired", -1), HistoryProblem::Time),
        ] {
            assert!(
                matches!(SetHistory::from_json(bad.as_bytes()), Err(ParseError::Format(p)) if p == problem),
                "{bad}"
            );
        }
        let twice = r#"{"retired":[],"signings":[{"name":"n","version":"1","notBefore":1},{"name":"n","version":"1","notBefore":2}]}"#;
        assert!(matches!(
            SetHistory::from_json(twice.as_bytes()),
            Err(ParseError::Format(HistoryProblem::Duplicate))
        ));
        for bad in [
            r#"{"retired":[]}"#,
            "[]",
            r#"{"retired":[],"signings":[],"x":1}"#,
        ] {
            assert!(
                matches!(
                    SetHistory::from_json(bad.as_bytes()),
                    Err(ParseError::Json(_))
                ),
                "{bad}"
            );
        }
    }

    #[test]
    fn a_full_history_drops_expired_retirements_first() {
        let mut h = SetHistory::in_memory();
        for i in 0..MAX_RETIRED {
            // Every other one ended before the floor.
            let not_after = if i % 2 == 0 {
                T - 1
            } else {
                T + 100 + i as i64
            };
            let mut r = record(0, not_after);
            r.digest[..8].copy_from_slice(&(i as u64).to_be_bytes());
            h.retire(r, T).unwrap();
        }
        let mut last = record(0xff, T + 1);
        last.digest[0] = 0xff;
        h.retire(last, T).unwrap();
        assert_eq!(h.retired().count(), MAX_RETIRED / 2 + 1);
        assert!(h.retired().all(|r| r.not_after >= T));
    }
}
