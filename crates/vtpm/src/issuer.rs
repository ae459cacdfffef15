//! [`VtpmIssuer`]: quotes with the node's TPM; the only part of the vTPM
//! variant that touches a TPM.

use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard};

use super::validator::{MAX_EVIDENCE_EVENT_LOG_LEN, encode_evidence_with_log};
use confboot_attest::{AttestationError, Detail, EXTRA_DATA_LEN, Issuer, Variant};

use crate::VtpmRefusal;
use confboot_tpm::event_log::EventLog;
use confboot_tpm::structures::{self, PCR_COUNT};
use confboot_tpm::{self as tpm, AK_CERT_NV_INDEX, AttestationKey, DEFAULT_AK_HANDLE, Tpm};

/// Where Linux exposes the firmware's TCG event log (securityfs mounted).
pub const FIRMWARE_EVENT_LOG_PATH: &str = "/sys/kernel/security/tpm0/binary_bios_measurements";

/// How often [`VtpmIssuer::issue`] retries when a PCR changed between the
/// quote and the PCR read.
pub const ISSUE_ATTEMPTS: usize = 3;

/// The PCRs the vTPM variant quotes: all 24 of the SHA-256 bank.
pub fn quoted_pcrs() -> Vec<u32> {
    (0..PCR_COUNT as u32).collect()
}

/// Which firmware event log goes with vTPM evidence.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum EventLogSource {
    /// None is sent.
    None,
    /// This file, which must exist and be a log.
    File(PathBuf),
    /// The kernel's log ([`FIRMWARE_EVENT_LOG_PATH`]) when it is there and
    /// usable (else a warning: verifiers still check every PCR, they only
    /// cannot explain them).
    Firmware,
}

impl EventLogSource {
    /// The source a configuration names: `none`, or a file; when it names
    /// none, the kernel's log if the TPM is the machine's device (not a
    /// swtpm socket), else none.
    pub fn new(given: Option<&str>, tpm_is_device: bool) -> EventLogSource {
        match given {
            Some("none") => EventLogSource::None,
            Some(path) => EventLogSource::File(PathBuf::from(path)),
            None if tpm_is_device => EventLogSource::Firmware,
            None => EventLogSource::None,
        }
    }
}

fn issue_err(e: tpm::TpmError) -> AttestationError {
    AttestationError::Issue(Detail::with(&VtpmRefusal::Tpm, e.to_string()))
}

/// PCR values by index, as [`Tpm::pcr_read`] returns them.
type PcrValues = Vec<(u32, [u8; 32])>;

/// Opens a new connection to the issuer's TPM (see
/// [`VtpmIssuer::reconnecting`]).
pub type TpmOpener = Box<dyn Fn() -> Result<Tpm, tpm::TpmError> + Send + Sync>;

/// The issuer's TPM connection and the AK loaded through it (a transient
/// AK's handle is only valid on the TPM that created it).
struct Session {
    tpm: Tpm,
    ak: AttestationKey,
    /// Counts reconnections, so that concurrent callers that failed on the
    /// same broken connection reconnect once.
    generation: u64,
}

/// Produces vTPM evidence with one persistent TPM connection; with
/// [`VtpmIssuer::reconnecting`], a quote that fails is tried once more on a
/// new connection (the TPM restarted, its socket closed).
pub struct VtpmIssuer {
    session: Mutex<Session>,
    /// The AK's public area, fixed for the issuer's life: a reconnection
    /// that finds another key fails instead of changing it.
    ak_public_area: Vec<u8>,
    /// The persistent handle the AK is loaded from (or created in its stead).
    ak_handle: u32,
    reopen: Option<TpmOpener>,
    ak_certificate: Option<Vec<u8>>,
    pcr_indices: Vec<u32>,
    /// The PCR values of the last quote: reused while a new quote's PCR
    /// digest still matches them, so a quote usually needs no PCR read.
    last_pcr_values: Mutex<Option<PcrValues>>,
    /// The firmware's event log sent with every quote (empty: none).
    event_log: Vec<u8>,
}

impl VtpmIssuer {
    /// Loads the AK from [`DEFAULT_AK_HANDLE`] (or creates one in the owner
    /// hierarchy) and reads the AK certificate from NV, if provisioned.
    pub fn new(tpm: Tpm) -> Result<Self, AttestationError> {
        Self::with_ak_handle(tpm, DEFAULT_AK_HANDLE)
    }

    /// Like [`VtpmIssuer::new`] with another persistent AK handle.
    pub fn with_ak_handle(mut tpm: Tpm, ak_handle: u32) -> Result<Self, AttestationError> {
        let ak = tpm.load_or_create_ak(ak_handle).map_err(issue_err)?;
        let ak_certificate = match tpm.nv_read(AK_CERT_NV_INDEX) {
            Ok(der) => Some(der),
            Err(e) if e.is_handle_missing() => None,
            Err(e) => {
                log::warn!("cannot read the AK certificate at NV {AK_CERT_NV_INDEX:#010x}: {e}");
                None
            }
        };
        log::info!(
            "vTPM issuer on {}: AK at {:#010x} ({}), AK certificate {}",
            tpm.describe(),
            ak.handle,
            if ak.transient {
                "created"
            } else {
                "persistent"
            },
            if ak_certificate.is_some() {
                "present"
            } else {
                "absent"
            }
        );
        Ok(VtpmIssuer {
            ak_public_area: ak.public_area.clone(),
            ak_handle,
            session: Mutex::new(Session {
                tpm,
                ak,
                generation: 0,
            }),
            reopen: None,
            ak_certificate,
            pcr_indices: quoted_pcrs(),
            last_pcr_values: Mutex::new(None),
            event_log: Vec::new(),
        })
    }

    /// Makes the issuer survive a TPM that goes away under it (swtpm
    /// restarted, the TPM's socket or device closed): when a quote fails,
    /// `reopen` gives a new connection, the AK is loaded again from its
    /// handle (or created again: the same owner seed gives the same key,
    /// checked), and the quote is tried once more. A later quote tries
    /// again if the TPM is still away. The TPM's PCRs are what they are
    /// then: a TPM that was reset quotes reset PCRs, which verifiers refuse.
    pub fn reconnecting(mut self, reopen: TpmOpener) -> Self {
        self.reopen = Some(reopen);
        self
    }

    /// Sends `log` (the firmware's TCG event log, as
    /// [`FIRMWARE_EVENT_LOG_PATH`] holds it) with every quote, so verifiers
    /// can replay it and explain PCRs. Refused when it does not parse or is
    /// larger than evidence may carry ([`MAX_EVIDENCE_EVENT_LOG_LEN`]).
    pub fn with_event_log(mut self, log: Vec<u8>) -> Result<Self, AttestationError> {
        self.attach_event_log(log)?;
        Ok(self)
    }

    /// Checks that `log` can travel in evidence and keeps it.
    fn attach_event_log(&mut self, log: Vec<u8>) -> Result<(), AttestationError> {
        if log.len() > MAX_EVIDENCE_EVENT_LOG_LEN {
            return Err(AttestationError::Issue(Detail::with(
                &VtpmRefusal::IssuerEventLog,
                format!(
                    "the event log has {} bytes, evidence carries at most {MAX_EVIDENCE_EVENT_LOG_LEN}",
                    log.len()
                ),
            )));
        }
        let events = EventLog::parse(&log)
            .map_err(|e| {
                AttestationError::Issue(Detail::with(
                    &VtpmRefusal::IssuerEventLog,
                    format!("the event log: {e}"),
                ))
            })?
            .events()
            .len();
        log::info!(
            "vTPM evidence carries the firmware's event log ({events} events, {} bytes)",
            log.len()
        );
        self.event_log = log;
        Ok(())
    }

    /// Attaches the event log `source` names: a file must exist and be a
    /// log ([`VtpmIssuer::with_event_log`]); the kernel's log is sent when
    /// it is there and usable, else evidence goes without one (with a
    /// warning when it is there but unusable).
    pub fn with_event_log_from(
        mut self,
        source: &EventLogSource,
    ) -> Result<Self, AttestationError> {
        let read = |path: &Path| {
            confboot_util::fs::read_bounded(path, MAX_EVIDENCE_EVENT_LOG_LEN as u64)
                .map(|bytes| bytes.to_vec())
                .map_err(|e| {
                    AttestationError::Issue(Detail::with(
                        &VtpmRefusal::IssuerEventLog,
                        format!("the event log: {e}"),
                    ))
                })
        };
        let firmware = Path::new(FIRMWARE_EVENT_LOG_PATH);
        match source {
            EventLogSource::File(path) => self.with_event_log(read(path)?),
            EventLogSource::Firmware if firmware.exists() => {
                if let Err(e) = read(firmware).and_then(|log| self.attach_event_log(log)) {
                    log::warn!("{e}; evidence goes without an event log");
                }
                Ok(self)
            }
            EventLogSource::None | EventLogSource::Firmware => {
                log::debug!("no firmware event log sent with vTPM evidence");
                Ok(self)
            }
        }
    }

    /// The AK's public area (`TPMT_PUBLIC` bytes).
    pub fn ak_public(&self) -> &[u8] {
        &self.ak_public_area
    }

    /// The AK's public key as a SEC1 uncompressed P-256 point (65 bytes), the
    /// form [`AkTrust::Pinned`](super::AkTrust::Pinned) takes.
    pub fn ak_public_key(&self) -> Vec<u8> {
        structures::parse_ecc_public(&self.ak_public_area)
            .map(|p| p.point)
            .expect("the AK's public area was checked when it was loaded")
    }

    /// The AK certificate read from NV, if any.
    pub fn ak_certificate(&self) -> Option<&[u8]> {
        self.ak_certificate.as_deref()
    }

    fn lock(&self) -> MutexGuard<'_, Session> {
        self.session.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Runs `f` with the issuer's TPM connection (e.g. to read PCRs).
    pub fn with_tpm<T>(&self, f: impl FnOnce(&mut Tpm) -> T) -> T {
        f(&mut self.lock().tpm)
    }

    /// Replaces the session of generation `failed` with a new connection
    /// and the AK loaded again; does nothing if another caller already did.
    fn reconnect(&self, reopen: &TpmOpener, failed: u64) -> Result<(), AttestationError> {
        let mut session = self.lock();
        if session.generation != failed {
            return Ok(());
        }
        let mut tpm = reopen().map_err(|e| {
            AttestationError::Issue(Detail::with(
                &VtpmRefusal::Reconnect,
                format!("reconnecting to the TPM failed: {e}"),
            ))
        })?;
        let ak = tpm.load_or_create_ak(self.ak_handle).map_err(|e| {
            AttestationError::Issue(Detail::with(
                &VtpmRefusal::Reconnect,
                format!("loading the AK after reconnecting: {e}"),
            ))
        })?;
        if ak.public_area != self.ak_public_area {
            if ak.transient {
                let _ = tpm.flush(ak.handle);
            }
            return Err(AttestationError::Issue(Detail::with(
                &VtpmRefusal::AkChanged,
                "the TPM's attestation key changed (TPM cleared?): not quoting with another key",
            )));
        }
        log::info!(
            "reconnected to the TPM at {}: AK at {:#010x} ({}), the same key",
            tpm.describe(),
            ak.handle,
            if ak.transient {
                "created again"
            } else {
                "persistent"
            }
        );
        // The old connection is broken: its transient AK went with it.
        *session = Session {
            tpm,
            ak,
            generation: failed + 1,
        };
        *self
            .last_pcr_values
            .lock()
            .unwrap_or_else(|p| p.into_inner()) = None;
        Ok(())
    }
}

impl Drop for VtpmIssuer {
    fn drop(&mut self) {
        let session = self.session.get_mut().unwrap_or_else(|p| p.into_inner());
        if session.ak.transient {
            let handle = session.ak.handle;
            if let Err(e) = session.tpm.flush(handle) {
                log::debug!("flushing the transient AK {handle:#010x}: {e}");
            }
        }
    }
}

impl Issuer for VtpmIssuer {
    fn variant(&self) -> Variant {
        Variant::QemuVtpm
    }

    fn issue(&self, extra_data: &[u8; EXTRA_DATA_LEN]) -> Result<Vec<u8>, AttestationError> {
        let (result, generation) = self.issue_once(extra_data);
        match (result, &self.reopen) {
            (Err(e), Some(reopen)) => {
                log::warn!("vTPM quote failed ({e}); reconnecting to the TPM");
                self.reconnect(reopen, generation)?;
                self.issue_once(extra_data).0
            }
            (result, _) => result,
        }
    }
}

impl VtpmIssuer {
    /// One quote on the current session; also returns the session's
    /// generation, for [`VtpmIssuer::reconnect`].
    fn issue_once(
        &self,
        extra_data: &[u8; EXTRA_DATA_LEN],
    ) -> (Result<Vec<u8>, AttestationError>, u64) {
        let mut session = self.lock();
        let generation = session.generation;
        (self.quote_on(&mut session, extra_data), generation)
    }

    fn quote_on(
        &self,
        session: &mut Session,
        extra_data: &[u8; EXTRA_DATA_LEN],
    ) -> Result<Vec<u8>, AttestationError> {
        let Session { tpm, ak, .. } = session;
        for attempt in 1..=ISSUE_ATTEMPTS {
            let quote = tpm
                .quote(ak, extra_data, &self.pcr_indices)
                .map_err(issue_err)?;
            let info = structures::parse_quote_attest(&quote.attest)
                .map_err(|e| AttestationError::Issue(Detail::with(&VtpmRefusal::Tpm, e.0)))?;
            let digest_of =
                |values: &[(u32, [u8; 32])]| tpm::pcr_digest(values.iter().map(|(_, v)| &v[..]));
            let mut last = self
                .last_pcr_values
                .lock()
                .unwrap_or_else(|p| p.into_inner());
            // The evidence's PCR values must hash to the quoted digest: the
            // cached ones are used only when they do, else the PCRs are read.
            let pcr_values = match last.take() {
                Some(cached) if info.pcr_digest == digest_of(&cached) => cached,
                _ => tpm.pcr_read(&self.pcr_indices).map_err(issue_err)?,
            };
            let digest = digest_of(&pcr_values);
            *last = Some(pcr_values.clone());
            drop(last);
            if info.pcr_digest == digest {
                log::debug!("issued a vTPM quote over {} PCRs", pcr_values.len());
                return Ok(encode_evidence_with_log(
                    &quote,
                    &pcr_values,
                    &self.ak_public_area,
                    self.ak_certificate.as_deref(),
                    &self.event_log,
                ));
            }
            log::warn!(
                "a PCR changed between quote and PCR read (attempt {attempt}); quoting again"
            );
        }
        Err(AttestationError::Issue(Detail::with(
            &VtpmRefusal::PcrsChanging,
            format!("PCRs kept changing during {ISSUE_ATTEMPTS} quote attempts"),
        )))
    }
}
