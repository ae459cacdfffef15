//! The kernel's configfs-tsm report interface (Linux 6.7 and later), the
//! one way confboot's SEV-SNP and TDX issuers reach their hardware: one
//! directory per request under [`TSM_REPORT_DIR`] (the kernel fills it at
//! `mkdir`), `provider` naming the guest's hardware, `privlevel` and
//! `inblob` written, `outblob` (and `auxblob`) read, and the `generation`
//! counter, read before and after, showing only this request's writes (a
//! second writer in the same directory would make the answer another
//! request's).

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use crate::{AttestRefusal, AttestationError, Detail};

/// The default configfs-tsm report directory.
pub const TSM_REPORT_DIR: &str = "/sys/kernel/config/tsm/report";

/// One request: what is written and how much may be read back.
#[derive(Clone, Copy, Debug)]
pub struct TsmRequest {
    /// The 64 bytes of report data (`inblob`).
    pub report_data: [u8; 64],
    /// The privilege level to write (`privlevel`; `None` or 0: not written).
    pub privlevel: Option<u32>,
    /// The most bytes of `outblob` read.
    pub outblob_limit: u64,
    /// Whether `auxblob` is read, and at most how many bytes (a missing one
    /// reads as empty).
    pub auxblob_limit: Option<u64>,
}

/// What the kernel answered, unchecked beyond the bounds.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TsmAnswer {
    /// `outblob`: the report or quote.
    pub outblob: Vec<u8>,
    /// `auxblob` (empty when not asked for or absent).
    pub auxblob: Vec<u8>,
}

/// A configfs-tsm report directory whose provider must be one name.
#[derive(Debug)]
pub struct TsmReports {
    root: PathBuf,
    provider: &'static str,
    counter: AtomicU64,
}

impl TsmReports {
    /// The report directory `root`, for requests the provider `provider`
    /// (`sev_guest`, `tdx_guest`) must answer; fails unless it exists, and
    /// then names what a `guest` needs.
    pub fn open(
        root: &Path,
        provider: &'static str,
        guest: &str,
    ) -> Result<TsmReports, AttestationError> {
        if !root.is_dir() {
            return Err(AttestationError::Issue(Detail::with(
                &AttestRefusal::TsmMissing,
                format!(
                    "{} is missing: configfs-tsm needs Linux 6.7 or later, {guest} and configfs \
                 mounted at /sys/kernel/config",
                    root.display()
                ),
            )));
        }
        Ok(TsmReports {
            root: root.to_path_buf(),
            provider,
            counter: AtomicU64::new(0),
        })
    }

    /// One request in a directory of its own, removed afterwards.
    pub fn request(&self, req: &TsmRequest) -> Result<TsmAnswer, AttestationError> {
        let n = self.counter.fetch_add(1, Ordering::Relaxed);
        let dir = self.root.join(format!(
            "confboot-{}-{}-{n}",
            self.provider,
            std::process::id()
        ));
        std::fs::create_dir(&dir).map_err(|e| {
            AttestationError::Issue(Detail::with(
                &AttestRefusal::TsmIo,
                format!("configfs-tsm: cannot create {}: {e}", dir.display()),
            ))
        })?;
        let result = self.request_in(&dir, req);
        if let Err(e) = std::fs::remove_dir(&dir) {
            log::warn!("configfs-tsm: cannot remove {}: {e}", dir.display());
        }
        result
    }

    /// One request in `dir`, a report directory as the kernel makes it at
    /// `mkdir` (a test double prepares one the same way).
    pub fn request_in(&self, dir: &Path, req: &TsmRequest) -> Result<TsmAnswer, AttestationError> {
        let io = |what: &str, e: std::io::Error| {
            AttestationError::Issue(Detail::with(
                &AttestRefusal::TsmIo,
                format!("configfs-tsm {what}: {e}"),
            ))
        };
        let read = |name: &str, limit: u64| {
            confboot_util::fs::read_bounded(&dir.join(name), limit)
                .map(|b| b.to_vec())
                .map_err(|e| {
                    AttestationError::Issue(Detail::with(
                        &AttestRefusal::TsmIo,
                        format!("configfs-tsm: {e}"),
                    ))
                })
        };
        let provider = read("provider", 64)?;
        if provider.trim_ascii() != self.provider.as_bytes() {
            return Err(AttestationError::Issue(Detail::with(
                &AttestRefusal::TsmProvider,
                format!(
                    "configfs-tsm provider is {}, not {}",
                    confboot_util::text::printable(provider.trim_ascii(), 64),
                    self.provider
                ),
            )));
        }
        let mut writes = 0u64;
        if let Some(level) = req.privlevel.filter(|&l| l != 0) {
            std::fs::write(dir.join("privlevel"), level.to_string())
                .map_err(|e| io("privlevel", e))?;
            writes += 1;
        }
        std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .open(dir.join("inblob"))
            .and_then(|mut f| f.write_all(&req.report_data))
            .map_err(|e| io("inblob", e))?;
        writes += 1;
        let generation = |what| -> Result<u64, AttestationError> {
            let text = read("generation", 32)?;
            std::str::from_utf8(&text)
                .ok()
                .and_then(|t| t.trim().parse().ok())
                .ok_or_else(|| {
                    AttestationError::Issue(Detail::with(
                        &AttestRefusal::TsmGeneration,
                        format!("configfs-tsm {what} generation"),
                    ))
                })
        };
        let before = generation("first")?;
        let outblob = read("outblob", req.outblob_limit)?;
        let auxblob = match req.auxblob_limit {
            None => Vec::new(),
            Some(limit) => match read("auxblob", limit) {
                Ok(t) => t,
                // A provider or host without certificates: empty.
                Err(_) if !dir.join("auxblob").exists() => Vec::new(),
                Err(e) => return Err(e),
            },
        };
        let after = generation("second")?;
        if before != writes || after != writes {
            return Err(AttestationError::Issue(Detail::with(
                &AttestRefusal::TsmRace,
                format!(
                    "configfs-tsm report written by someone else too (generation {before}/{after}, \
                 {writes} writes of ours)"
                ),
            )));
        }
        Ok(TsmAnswer { outblob, auxblob })
    }
}
