//! Several signed reference-value sets in force at once, for a rolling
//! upgrade: a directory of signed sets ([`super::open`]), read again and
//! again as files come and go, and the verdict on a node's measurements.
//!
//! # What is live
//!
//! Every file of the directory (names starting with `.` aside, so the
//! `..data` layout of a mounted ConfigMap reads as its files) that is a
//! COSE_Sign1 by one of the configured release keys, whose CoRIM reads,
//! that carries reference values for the variant and whose window holds
//! the time of reading is a *live* set. A set is *retired* when its file
//! is removed, or when its not-after passes: a node whose measurements
//! match only a retired set is refused with the set's name, version and
//! retirement time ([`SetsRefusal::Retired`]). At most [`MAX_RETIRED`]
//! retired sets are remembered for that message (the oldest forgotten).
//!
//! A refresh that cannot list the directory, finds more than
//! [`MAX_SET_FILES`] files in it, or finds no live set at all changes
//! nothing: the last good sets are kept. A single bad file (unsigned,
//! signed by another key, malformed, larger than [`super::MAX_SET_BYTES`],
//! expired, not yet valid, without this variant) is refused and reported
//! ([`Refresh::refused`]); the others are read.
//!
//! # Replay
//!
//! A replayed set is a set put back after it was retired (by the host,
//! which may write any byte of a disk, or by mistake), in its old file or
//! in another envelope: the same payload signed again, or its signature
//! re-encoded (`s` as `n - s`). What stops it: its not-after, which is
//! signed, so a set past it is refused on every read by every reader (as
//! of the time floor, see below); and the history ([`SetHistory`]): the
//! SHA-256 of every retired set's *signed payload*, so that a set retired
//! early, by removal, stays retired even while its window is open
//! ([`RefusedFile::Replayed`]), whatever its envelope, and, with a history
//! file ([`ReferenceSets::with_history`]), across restarts. A set of which
//! a newer signing (same name and version, later not-before) is seen is
//! superseded: refused from then on ([`RefusedFile::Superseded`]).
//!
//! # Clocks
//!
//! Every `now` here is the caller's: joinsvc gives its time floor
//! (`confboot_util::floor::TimeFloor`), the latest of the guest's wall
//! clock (which the host sets) and every time seen, kept on disk, so that
//! a clock set back does not reopen an ended window. [`SetsValidator`]
//! reads the floor it is given ([`SetsValidator::with_time_floor`]).
//!
//! # Warnings
//!
//! A set within the warning window of its not-after admits with a
//! *warning* ([`SetVerdict::warnings`]): admitted, and the reason said, so a
//! retirement is seen coming rather than met as a cliff.

use std::collections::{BTreeMap, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};

use super::history::{HistoryError, HistoryRefusal, RetiredRecord, SetHistory};
pub use super::history::{MAX_RETIRED, Retirement};
use super::{ReferenceError, ReleaseKey, instant, open};
use crate::AppraisalRefusal;
use confboot_attest::measurements::MeasurementPolicy;
use confboot_attest::{AttestationError, Attested, Detail, EXTRA_DATA_LEN, Validator, Variant};
pub use confboot_attest::{SetName, SetVerdict};
use confboot_tpm::event_log::EventList;
use confboot_util::floor::TimeFloor;

/// Most files read from a set directory.
pub const MAX_SET_FILES: usize = 64;

/// A live set: what one signed file says for the variant.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LiveSet {
    /// Its name and version.
    pub name: SetName,
    /// The file it was read from.
    pub file: PathBuf,
    /// The SHA-256 of its signed payload ([`super::OpenedSet::digest`]),
    /// not of the file's bytes.
    pub digest: [u8; 32],
    /// The start of its window, Unix seconds.
    pub not_before: i64,
    /// The end of its window (inclusive), Unix seconds.
    pub not_after: i64,
    /// The variant's reference values, as a policy.
    pub policy: MeasurementPolicy,
    /// The variant's predicted events.
    pub events: EventList,
}

/// A retired set, remembered for the message of a node that matches it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RetiredSet {
    /// The set as it was live.
    pub set: LiveSet,
    /// When it was retired, Unix seconds.
    pub retired_at: i64,
    /// Why.
    pub reason: Retirement,
}

/// Why one file of the directory is not a live set.
#[derive(Debug, thiserror::Error)]
pub enum RefusedFile {
    /// It cannot be read (or is larger than a set may be).
    #[error("{0}")]
    Unreadable(#[source] confboot_util::fs::FileError),
    /// It is not a set the release keys vouch for, now.
    #[error("{0}")]
    Set(#[source] ReferenceError),
    /// It has no reference values for this variant.
    #[error("the set {0} has no reference values for variant {1}")]
    NoVariant(SetName, Variant),
    /// It is a set retired before, put back.
    #[error("the set {name} was retired at {} ({reason}) and is not accepted again", instant(*.retired_at))]
    Replayed {
        /// The set.
        name: SetName,
        /// When it was retired.
        retired_at: i64,
        /// Why.
        reason: Retirement,
    },
    /// A newer signing of the set was seen.
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

/// Why a refresh changed nothing.
#[derive(Debug, thiserror::Error)]
pub enum SetsError {
    /// The directory cannot be listed.
    #[error("reference-value directory {}: {error}", .dir.display())]
    List {
        /// The directory.
        dir: PathBuf,
        /// Why.
        #[source]
        error: std::io::Error,
    },
    /// The directory holds more files than are read.
    #[error("reference-value directory {} holds more than {MAX_SET_FILES} files", .0.display())]
    TooManyFiles(PathBuf),
    /// No file of the directory is a live set.
    #[error("reference-value directory {} holds no live set for {variant}{}", .dir.display(), refusals(.refused))]
    NoLiveSet {
        /// The directory.
        dir: PathBuf,
        /// The variant.
        variant: Variant,
        /// Each file refused, and why.
        refused: Vec<String>,
    },
    /// No release key is configured: sets are read only signed.
    #[error("reference-value sets need at least one release key")]
    NoReleaseKey,
}

/// What one refresh did.
#[derive(Debug, Default)]
pub struct Refresh {
    /// Sets that became live.
    pub added: Vec<SetName>,
    /// Sets retired.
    pub retired: Vec<(SetName, Retirement)>,
    /// Files refused, and why.
    pub refused: Vec<(PathBuf, RefusedFile)>,
    /// The history could not be written (it holds for this run).
    pub history_error: Option<HistoryError>,
}

impl Refresh {
    /// Whether the live sets changed.
    pub fn changed(&self) -> bool {
        !self.added.is_empty() || !self.retired.is_empty()
    }
}

/// Why measurements are refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SetsRefusal {
    /// They match a retired set and no live one.
    #[error("the measurements match only the reference-value set {name}, retired at {} ({reason})", instant(*.retired_at))]
    Retired {
        /// The set.
        name: SetName,
        /// When it was retired.
        retired_at: i64,
        /// Why.
        reason: Retirement,
    },
    /// They match no set, live or retired; the first difference from
    /// each live set.
    #[error("the measurements match none of the {} live reference-value sets{}", .differences.len(), list(.differences))]
    NoMatch {
        /// Each live set, with its first difference.
        differences: Vec<(SetName, AttestationError)>,
    },
}

impl SetsRefusal {
    /// The typed reason of this refusal.
    pub fn reason(&self) -> &'static AppraisalRefusal {
        match self {
            SetsRefusal::Retired { .. } => &AppraisalRefusal::SetRetired,
            SetsRefusal::NoMatch { .. } => &AppraisalRefusal::NoSetMatches,
        }
    }

    /// This refusal as a validator reports it: one live set's difference
    /// is that set's refusal (a measurement), anything else a policy
    /// refusal with this reason and text.
    pub fn into_error(self) -> AttestationError {
        match self {
            SetsRefusal::NoMatch { mut differences } if differences.len() == 1 => {
                differences.remove(0).1
            }
            other => AttestationError::Policy(Detail::with(other.reason(), other.to_string())),
        }
    }
}

fn refusals(refused: &[String]) -> String {
    refused.iter().map(|r| format!("; {r}")).collect()
}

fn list(differences: &[(SetName, AttestationError)]) -> String {
    differences
        .iter()
        .map(|(name, e)| format!("; {name}: {e}"))
        .collect()
}

/// The sets of one variant, read from one directory with the release keys.
#[derive(Clone, Debug)]
pub struct ReferenceSets {
    dir: PathBuf,
    variant: Variant,
    keys: Vec<ReleaseKey>,
    live: Vec<LiveSet>,
    retired: VecDeque<RetiredSet>,
    history: SetHistory,
}

impl ReferenceSets {
    /// No set yet: [`ReferenceSets::refresh`] reads `dir`.
    pub fn new(
        dir: &Path,
        variant: Variant,
        keys: Vec<ReleaseKey>,
    ) -> Result<ReferenceSets, SetsError> {
        if keys.is_empty() {
            return Err(SetsError::NoReleaseKey);
        }
        Ok(ReferenceSets {
            dir: dir.to_path_buf(),
            variant,
            keys,
            live: Vec::new(),
            retired: VecDeque::new(),
            history: SetHistory::in_memory(),
        })
    }

    /// Keeps what it retires and the signings it sees in `history` (a
    /// file, with [`SetHistory::load`]: retired sets stay retired across
    /// restarts). Without it the history lasts for this run.
    pub fn with_history(mut self, history: SetHistory) -> ReferenceSets {
        self.history = history;
        self
    }

    /// The history.
    pub fn history(&self) -> &SetHistory {
        &self.history
    }

    /// The directory read.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The live sets, in file-name order.
    pub fn live(&self) -> &[LiveSet] {
        &self.live
    }

    /// The retired sets remembered, oldest first.
    pub fn retired(&self) -> impl Iterator<Item = &RetiredSet> {
        self.retired.iter()
    }

    /// Reads the directory again as of `now` (Unix seconds); see the
    /// module documentation. On an error nothing changed.
    pub fn refresh(&mut self, now: i64) -> Result<Refresh, SetsError> {
        let files = self.list()?;
        let mut report = Refresh::default();
        let mut read = Vec::new();
        for file in files {
            match self.read(&file, now) {
                Ok(set) => read.push(set),
                Err(e) => report.refused.push((file, e)),
            }
        }
        // The newest signing of each name read: an older one is superseded.
        let mut newest: BTreeMap<SetName, i64> = BTreeMap::new();
        for set in &read {
            let t = newest.entry(set.name.clone()).or_insert(set.not_before);
            *t = (*t).max(set.not_before);
        }
        let mut live = Vec::new();
        for set in read {
            let latest = newest[&set.name];
            if set.not_before < latest {
                report.refused.push((
                    set.file.clone(),
                    RefusedFile::Superseded {
                        name: set.name,
                        not_before: set.not_before,
                        newest: latest,
                    },
                ));
            } else {
                live.push(set);
            }
        }
        if live.is_empty() {
            return Err(SetsError::NoLiveSet {
                dir: self.dir.clone(),
                variant: self.variant,
                refused: report
                    .refused
                    .iter()
                    .map(|(file, why)| format!("{}: {why}", file.display()))
                    .collect(),
            });
        }
        for set in &live {
            if !self.live.iter().any(|s| s.digest == set.digest) {
                report.added.push(set.name.clone());
            }
            if let Err(e) = self.history.seen(&set.name, set.not_before) {
                report.history_error = Some(e);
            }
        }
        for old in std::mem::take(&mut self.live) {
            if live.iter().any(|s| s.digest == old.digest) {
                continue;
            }
            let reason = if now > old.not_after {
                Retirement::Expired
            } else if newest.get(&old.name).is_some_and(|&t| t > old.not_before) {
                Retirement::Superseded
            } else {
                Retirement::Removed
            };
            report.retired.push((old.name.clone(), reason));
            if let Err(e) = self.retire(old, now, reason) {
                report.history_error = Some(e);
            }
        }
        self.live = live;
        Ok(report)
    }

    /// The regular files of the directory, names starting with `.` aside,
    /// in name order.
    fn list(&self) -> Result<Vec<PathBuf>, SetsError> {
        let list_error = |error| SetsError::List {
            dir: self.dir.clone(),
            error,
        };
        let mut files = Vec::new();
        for entry in std::fs::read_dir(&self.dir).map_err(list_error)? {
            let entry = entry.map_err(list_error)?;
            if entry.file_name().as_encoded_bytes().starts_with(b".") {
                continue;
            }
            let path = entry.path();
            // Follows symlinks (a ConfigMap's files are links into ..data).
            if !path.is_file() {
                continue;
            }
            if files.len() == MAX_SET_FILES {
                return Err(SetsError::TooManyFiles(self.dir.clone()));
            }
            files.push(path);
        }
        files.sort();
        Ok(files)
    }

    fn read(&self, file: &Path, now: i64) -> Result<LiveSet, RefusedFile> {
        let bytes = confboot_util::fs::read_bounded(file, super::MAX_SET_BYTES as u64)
            .map_err(RefusedFile::Unreadable)?;
        let opened = open(&bytes, &self.keys, now).map_err(RefusedFile::Set)?;
        let digest = opened.digest;
        let set = opened.set;
        let name = SetName {
            name: set.name.clone(),
            version: set.version.clone(),
        };
        self.history
            .check(&digest, &name, set.not_before)
            .map_err(|refusal| match refusal {
                HistoryRefusal::Retired {
                    name,
                    retired_at,
                    reason,
                } => RefusedFile::Replayed {
                    name,
                    retired_at,
                    reason,
                },
                HistoryRefusal::Superseded {
                    name,
                    not_before,
                    newest,
                } => RefusedFile::Superseded {
                    name,
                    not_before,
                    newest,
                },
            })?;
        let reference = set
            .variant(self.variant)
            .ok_or_else(|| RefusedFile::NoVariant(name.clone(), self.variant))?;
        Ok(LiveSet {
            name,
            file: file.to_path_buf(),
            digest,
            not_before: set.not_before,
            not_after: set.not_after,
            policy: reference.policy.clone(),
            events: reference.events.clone(),
        })
    }

    fn retire(&mut self, set: LiveSet, now: i64, reason: Retirement) -> Result<(), HistoryError> {
        if self.retired.len() == MAX_RETIRED {
            self.retired.pop_front();
        }
        let retired_at = match reason {
            Retirement::Expired => set.not_after,
            Retirement::Removed | Retirement::Superseded => now,
        };
        let record = RetiredRecord {
            digest: set.digest,
            name: set.name.clone(),
            not_after: set.not_after,
            retired_at,
            reason,
        };
        self.retired.push_back(RetiredSet {
            set,
            retired_at,
            reason,
        });
        self.history.retire(record, now)
    }

    /// The verdict on `measurements` at `now`: admitted by the live set
    /// they match (the one whose window ends last, when several do), with
    /// a warning when its not-after is at most `warn_window` seconds away;
    /// refused naming the retired set they match, or every live set's
    /// first difference. `ignored` PCRs are left out of every comparison
    /// (PCR 15, which a caller checks itself). A live set whose window has
    /// ended since the last refresh no longer admits: it counts as retired
    /// at its not-after.
    pub fn check(
        &self,
        measurements: &BTreeMap<u32, Vec<u8>>,
        now: i64,
        warn_window: i64,
        ignored: &[u32],
    ) -> Result<SetVerdict, SetsRefusal> {
        let matches = |set: &LiveSet| {
            let mut policy = set.policy.clone();
            for pcr in ignored {
                policy.remove(*pcr);
            }
            policy.check(measurements)
        };
        let mut best: Option<(&LiveSet, Vec<String>)> = None;
        let mut differences = Vec::new();
        let mut expired = None;
        for set in &self.live {
            match matches(set) {
                Ok(_) if now > set.not_after || now < set.not_before => {
                    expired.get_or_insert(set);
                }
                Ok(warnings) => {
                    if best
                        .as_ref()
                        .is_none_or(|(b, _)| set.not_after > b.not_after)
                    {
                        best = Some((set, warnings));
                    }
                }
                Err(e) => differences.push((set.name.clone(), e)),
            }
        }
        if let Some((set, mut warnings)) = best {
            if set.not_after - now <= warn_window {
                warnings.insert(
                    0,
                    format!(
                        "the reference-value set {} expires at {}",
                        set.name,
                        instant(set.not_after)
                    ),
                );
            }
            return Ok(SetVerdict {
                set: set.name.clone(),
                warnings,
            });
        }
        if let Some(set) = expired {
            return Err(SetsRefusal::Retired {
                name: set.name.clone(),
                retired_at: set.not_after,
                reason: Retirement::Expired,
            });
        }
        if let Some(r) = self.retired.iter().rev().find(|r| matches(&r.set).is_ok()) {
            return Err(SetsRefusal::Retired {
                name: r.set.name.clone(),
                retired_at: r.retired_at,
                reason: r.reason,
            });
        }
        Err(SetsRefusal::NoMatch { differences })
    }
}

#[cfg(test)]
fn sha256(bytes: &[u8]) -> [u8; 32] {
    ring::digest::digest(&ring::digest::SHA256, bytes)
        .as_ref()
        .try_into()
        .expect("SHA-256 is 32 bytes")
}

/// A validator of vTPM evidence against the live sets: the evidence
/// checked by `evidence` (its AK, quote, binding and event log, no
/// measurement), then its PCRs by [`ReferenceSets::check`]. What it admits
/// carries the verdict ([`Attested::set_verdict`]): the set matched, and
/// its warnings.
pub struct SetsValidator {
    evidence: Arc<dyn Validator>,
    sets: Arc<RwLock<ReferenceSets>>,
    warn_window: i64,
    ignored: Vec<u32>,
    floor: Arc<TimeFloor>,
}

impl SetsValidator {
    /// Checks `evidence`'s measurements against `sets`, warning within
    /// `warn_window` seconds of a set's not-after and ignoring the
    /// `ignored` PCRs (see [`ReferenceSets::check`]).
    pub fn new(
        evidence: Arc<dyn Validator>,
        sets: Arc<RwLock<ReferenceSets>>,
        warn_window: i64,
        ignored: Vec<u32>,
    ) -> SetsValidator {
        SetsValidator {
            evidence,
            sets,
            warn_window,
            ignored,
            floor: Arc::new(TimeFloor::in_memory(0)),
        }
    }

    /// Reads the time from `floor` (by default a floor of its own, for
    /// this run).
    pub fn with_time_floor(mut self, floor: Arc<TimeFloor>) -> SetsValidator {
        self.floor = floor;
        self
    }
}

impl Validator for SetsValidator {
    fn variant(&self) -> Variant {
        self.evidence.variant()
    }

    fn validate(
        &self,
        evidence: &[u8],
        extra_data: &[u8; EXTRA_DATA_LEN],
    ) -> Result<Attested, AttestationError> {
        let attested = self.evidence.validate(evidence, extra_data)?;
        let now = self.floor.now();
        let sets = self.sets.read().unwrap_or_else(|e| e.into_inner());
        let verdict = sets
            .check(&attested.measurements, now, self.warn_window, &self.ignored)
            .map_err(SetsRefusal::into_error)?;
        Ok(Attested {
            set_verdict: Some(verdict),
            ..attested
        })
    }
}

#[cfg(test)]
mod tests;
