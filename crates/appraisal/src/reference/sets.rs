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
//! A replayed set is a set's file put back after it was retired (by the
//! host, which may write any byte of a disk, or by mistake). What stops
//! it: its not-after, which is signed, so a set past it is refused on
//! every read by every reader; and, for as long as the reader runs, the
//! retirement list: the SHA-256 of every retired set's file, so that a
//! set retired early, by removal, stays retired even while its window is
//! open ([`RefusedFile::Replayed`]). A reader that restarts has no
//! retirement list: until its not-after, a set removed early is accepted
//! again if its file comes back, which is why a release signs short
//! windows and signs again to extend one.
//!
//! # Warnings
//!
//! A set within the warning window of its not-after admits with a
//! *warning* ([`SetVerdict::warnings`]): admitted, and the reason said, so a
//! retirement is seen coming rather than met as a cliff.

use std::collections::{BTreeMap, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};

use super::{ReferenceError, ReleaseKey, instant, open};
use crate::AppraisalRefusal;
use confboot_attest::measurements::MeasurementPolicy;
use confboot_attest::{AttestationError, Attested, Detail, EXTRA_DATA_LEN, Validator, Variant};
pub use confboot_attest::{SetName, SetVerdict};
use confboot_tpm::event_log::EventList;

/// Most files read from a set directory.
pub const MAX_SET_FILES: usize = 64;
/// Most retired sets remembered (for a refused node's message, and
/// against a set put back).
pub const MAX_RETIRED: usize = 256;

/// A live set: what one signed file says for the variant.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LiveSet {
    /// Its name and version.
    pub name: SetName,
    /// The file it was read from.
    pub file: PathBuf,
    /// The SHA-256 of the file's bytes.
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

/// Why a set was retired.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Retirement {
    /// Its file was removed from the directory.
    Removed,
    /// Its not-after passed.
    Expired,
}

impl std::fmt::Display for Retirement {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Retirement::Removed => "its file was removed",
            Retirement::Expired => "its window ended",
        })
    }
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
        })
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
        let mut live = Vec::new();
        for file in files {
            match self.read(&file, now) {
                Ok(set) => live.push(set),
                Err(e) => report.refused.push((file, e)),
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
        }
        for old in std::mem::take(&mut self.live) {
            if live.iter().any(|s| s.digest == old.digest) {
                continue;
            }
            let reason = if now > old.not_after {
                Retirement::Expired
            } else {
                Retirement::Removed
            };
            report.retired.push((old.name.clone(), reason));
            self.retire(old, now, reason);
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
        let digest = sha256(&bytes);
        if let Some(r) = self.retired.iter().find(|r| r.set.digest == digest) {
            return Err(RefusedFile::Replayed {
                name: r.set.name.clone(),
                retired_at: r.retired_at,
                reason: r.reason,
            });
        }
        let opened = open(&bytes, &self.keys, now).map_err(RefusedFile::Set)?;
        let set = opened.set;
        let name = SetName {
            name: set.name.clone(),
            version: set.version.clone(),
        };
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

    fn retire(&mut self, set: LiveSet, now: i64, reason: Retirement) {
        if self.retired.len() == MAX_RETIRED {
            self.retired.pop_front();
        }
        let retired_at = match reason {
            Retirement::Expired => set.not_after,
            Retirement::Removed => now,
        };
        self.retired.push_back(RetiredSet {
            set,
            retired_at,
            reason,
        });
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
        }
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
        let now = confboot_util::time::unix_now();
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
