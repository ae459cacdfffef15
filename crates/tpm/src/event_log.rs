//! The TCG event log a node's firmware leaves: every measurement extended
//! into a PCR since reset, in order (TCG PC Client Platform Firmware
//! Profile, 10.2: the crypto-agile format that OVMF writes and Linux exposes
//! as `/sys/kernel/security/tpm0/binary_bios_measurements`).
//!
//! The log itself proves nothing (whoever writes it can lie); what makes it
//! worth reading is that replaying it must give the PCR values a quote
//! signs. [`EventLog::replay`] computes the SHA-256 bank; a verifier compares
//! that with the quoted PCRs, and a TPM that should be measured like a node
//! is extended event by event ([`EventLog::extend_into`]).
//!
//! Every input is bounded: the whole log ([`MAX_EVENT_LOG_LEN`]), the event
//! count ([`MAX_EVENTS`]), the algorithms per event and each event's data.
//!
//! ```
//! use confboot_tpm::event_log::{EventLog, EventLogError};
//! assert!(matches!(EventLog::parse(&[0u8; 8]), Err(EventLogError::Truncated { .. })));
//! ```
//!
//! The expected event list's JSON form ([`EventList::from_json`]) is read by
//! hand, not with a serde derive: the bootstrapper reaches it (the settings of
//! the join services it checks), and a derive would add code to a binary within
//! a few KB of its size budget.

#![deny(
    clippy::cast_possible_truncation,
    clippy::cast_sign_loss,
    clippy::cast_possible_wrap
)]

use std::collections::BTreeMap;

use confboot_util::bytes;

use super::structures::{PCR_COUNT, SHA256_LEN, TPM_ALG_SHA256};
use super::{Tpm, TpmError, pcr_digest};

/// Largest event log accepted, in bytes (OVMF's log for a direct-kernel
/// boot is a few KiB).
pub const MAX_EVENT_LOG_LEN: usize = 256 * 1024;
/// Most events accepted in one log.
pub const MAX_EVENTS: usize = 2048;
/// Most digest algorithms one log may declare (and one event may carry).
pub const MAX_ALGORITHMS: usize = 8;

/// `EV_NO_ACTION`: an event that is logged but never extended.
pub const EV_NO_ACTION: u32 = 0x3;
/// `EV_EVENT_TAG`: a `TCG_PCClientTaggedEvent` (id, size, data).
pub const EV_EVENT_TAG: u32 = 0x6;
/// Signature of the first event of a crypto-agile log.
pub const SPEC_ID_SIGNATURE: &[u8; 16] = b"Spec ID Event03\0";
/// Signature of the `EV_NO_ACTION` event that records the startup locality.
const STARTUP_LOCALITY_SIGNATURE: &[u8; 16] = b"StartupLocality\0";
/// Size of the legacy (SHA-1 format) header event before its data.
pub const LEGACY_HEADER_LEN: usize = 4 + 4 + 20 + 4;

/// Why bytes are not an event log confboot can use.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EventLogError {
    /// The log exceeds [`MAX_EVENT_LOG_LEN`].
    #[error(
        "event log of {len} bytes exceeds the {}-byte bound",
        MAX_EVENT_LOG_LEN
    )]
    TooLarge {
        /// Its length.
        len: usize,
    },
    /// The bytes end inside a field.
    #[error("event log ends inside {what} at byte {offset}")]
    Truncated {
        /// Offset of the field that does not fit.
        offset: usize,
        /// What was being read.
        what: &'static str,
    },
    /// The first event is not the crypto-agile `Spec ID Event03` header.
    #[error("event log does not start with the crypto-agile Spec ID Event03 header")]
    NotCryptoAgile,
    /// The header declares no SHA-256 bank.
    #[error("event log declares no SHA-256 bank")]
    NoSha256Bank,
    /// More algorithms than [`MAX_ALGORITHMS`], in the header or an event.
    #[error(
        "event log declares {count} digest algorithms (at most {})",
        MAX_ALGORITHMS
    )]
    TooManyAlgorithms {
        /// How many were declared.
        count: u32,
    },
    /// An event carries a digest of an algorithm the header did not declare.
    #[error(
        "event {event} carries a digest of algorithm {alg:#06x}, which the header does not declare"
    )]
    UndeclaredAlgorithm {
        /// Index of the event (0 is the header).
        event: usize,
        /// The algorithm id.
        alg: u16,
    },
    /// An event names a PCR above 23.
    #[error("event {event} names PCR {pcr} (PCRs are 0 to 23)")]
    PcrOutOfRange {
        /// Index of the event.
        event: usize,
        /// The PCR it names.
        pcr: u32,
    },
    /// An extending event carries no SHA-256 digest.
    #[error("event {event} extends a PCR but carries no SHA-256 digest")]
    MissingSha256 {
        /// Index of the event.
        event: usize,
    },
    /// More than [`MAX_EVENTS`] events.
    #[error("event log has more than {} events", MAX_EVENTS)]
    TooManyEvents,
}

/// One event of the log, its SHA-256 digest kept (the bank confboot uses).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event {
    /// The PCR it extends.
    pub pcr: u32,
    /// Its TCG event type (`EV_*`).
    pub event_type: u32,
    /// The SHA-256 digest extended; `None` only for [`EV_NO_ACTION`].
    pub sha256: Option<[u8; SHA256_LEN]>,
    /// The event data (what was measured, or a description of it).
    pub data: Vec<u8>,
}

impl Event {
    /// Whether the event is extended into its PCR (all but `EV_NO_ACTION`).
    pub fn extends(&self) -> bool {
        self.event_type != EV_NO_ACTION
    }

    /// The TCG name of the event type, e.g. `EV_EFI_BOOT_SERVICES_APPLICATION`.
    pub fn type_name(&self) -> &'static str {
        event_type_name(self.event_type)
    }

    /// A short, printable description: the event data when it is text (as
    /// Linux's and OVMF's tags are), else the event type's name. At most 64
    /// characters, control characters replaced.
    pub fn description(&self) -> String {
        describe_event(self.event_type, &self.data)
    }
}

/// [`Event::description`] of an event of type `event_type` with `data`
/// (the CCEL's events are described alike).
pub fn describe_event(event_type: u32, data: &[u8]) -> String {
    // A tagged event (Linux's EFI stub uses them for the initrd and
    // the command line): id, size, then its text.
    let data = match data {
        [_, _, _, _, s0, s1, s2, s3, rest @ ..]
            if event_type == EV_EVENT_TAG
                && u32::from_le_bytes([*s0, *s1, *s2, *s3]) as usize == rest.len() =>
        {
            rest
        }
        data => data,
    };
    let text = data.strip_suffix(&[0]).unwrap_or(data);
    let printable = !text.is_empty()
        && text.len() <= 256
        && text.iter().all(|b| (0x20..0x7f).contains(b) || *b == b'\n');
    if printable {
        String::from_utf8_lossy(text)
            .chars()
            .map(|c| if c.is_control() { ' ' } else { c })
            .take(64)
            .collect()
    } else {
        event_type_name(event_type).to_string()
    }
}

/// The TCG name of an event type.
pub fn event_type_name(event_type: u32) -> &'static str {
    match event_type {
        0x0 => "EV_PREBOOT_CERT",
        0x1 => "EV_POST_CODE",
        0x3 => "EV_NO_ACTION",
        0x4 => "EV_SEPARATOR",
        0x5 => "EV_ACTION",
        0x6 => "EV_EVENT_TAG",
        0x7 => "EV_S_CRTM_CONTENTS",
        0x8 => "EV_S_CRTM_VERSION",
        0x9 => "EV_CPU_MICROCODE",
        0xA => "EV_PLATFORM_CONFIG_FLAGS",
        0xB => "EV_TABLE_OF_DEVICES",
        0xC => "EV_COMPACT_HASH",
        0xD => "EV_IPL",
        0xE => "EV_IPL_PARTITION_DATA",
        0xF => "EV_NONHOST_CODE",
        0x10 => "EV_NONHOST_CONFIG",
        0x11 => "EV_NONHOST_INFO",
        0x12 => "EV_OMIT_BOOT_DEVICE_EVENTS",
        0x8000_0001 => "EV_EFI_VARIABLE_DRIVER_CONFIG",
        0x8000_0002 => "EV_EFI_VARIABLE_BOOT",
        0x8000_0003 => "EV_EFI_BOOT_SERVICES_APPLICATION",
        0x8000_0004 => "EV_EFI_BOOT_SERVICES_DRIVER",
        0x8000_0005 => "EV_EFI_RUNTIME_SERVICES_DRIVER",
        0x8000_0006 => "EV_EFI_GPT_EVENT",
        0x8000_0007 => "EV_EFI_ACTION",
        0x8000_0008 => "EV_EFI_PLATFORM_FIRMWARE_BLOB",
        0x8000_0009 => "EV_EFI_HANDOFF_TABLES",
        0x8000_000A => "EV_EFI_PLATFORM_FIRMWARE_BLOB2",
        0x8000_000B => "EV_EFI_HANDOFF_TABLES2",
        0x8000_000C => "EV_EFI_VARIABLE_BOOT2",
        0x8000_0010 => "EV_EFI_HCRTM_EVENT",
        0x8000_00E0 => "EV_EFI_VARIABLE_AUTHORITY",
        0x8000_00E1 => "EV_EFI_SPDM_FIRMWARE_BLOB",
        0x8000_00E2 => "EV_EFI_SPDM_FIRMWARE_CONFIG",
        _ => "EV_UNKNOWN",
    }
}

/// A parsed crypto-agile event log (the SHA-256 bank).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EventLog {
    events: Vec<Event>,
    startup_locality: u8,
}

/// A digest bank of a crypto-agile log: the TCG algorithm id of its hash,
/// its digest length `N` in the type. The TCG log's PCRs are replayed from
/// [`SHA256_BANK`]; TDX's CCEL replays its RTMRs from the SHA-384 bank.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DigestBank<const N: usize> {
    alg: u16,
}

impl<const N: usize> DigestBank<N> {
    /// The bank of algorithm `alg` (`TPM_ALG_*`), whose digests are `N` bytes.
    pub const fn new(alg: u16) -> DigestBank<N> {
        DigestBank { alg }
    }

    /// Its algorithm id.
    pub fn alg(&self) -> u16 {
        self.alg
    }
}

/// The SHA-256 bank (the PCRs confboot replays).
pub const SHA256_BANK: DigestBank<SHA256_LEN> = DigestBank::new(TPM_ALG_SHA256);

/// What differs between the logs in the crypto-agile format: whether the
/// header event must name register 0, how many events are read, and which
/// bytes pad the area after the last event.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LogFormat {
    /// The header event must name register (PCR) 0.
    pub header_index_zero: bool,
    /// Most events read; one more is [`EventLogError::TooManyEvents`].
    pub max_events: usize,
    /// The log ends where all that is left is one of these bytes, repeated.
    pub padding: &'static [u8],
}

/// The TCG log's format (`binary_bios_measurements`).
pub const TCG_LOG: LogFormat = LogFormat {
    header_index_zero: true,
    max_events: MAX_EVENTS,
    padding: &[0],
};

/// One event as the crypto-agile format frames it, with its digest of the
/// reader's bank.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AgileEvent<'a, const N: usize> {
    /// Its register index (a PCR, or a TDX measurement register).
    pub index: u32,
    /// Its TCG event type (`EV_*`).
    pub event_type: u32,
    /// The digest of the bank, if the event carries one.
    pub digest: Option<[u8; N]>,
    /// The event data.
    pub data: &'a [u8],
}

/// One reader of the TCG crypto-agile event-log format (TCG PC Client
/// Platform Firmware Profile, 10.2), generic over the digest bank it keeps:
/// the header event and its Spec ID, then events of a register index, a
/// type, one digest per declared algorithm and the data. Every length is
/// bounded by the bytes left; the callers add their register bounds.
#[derive(Clone, Debug)]
pub struct AgileLogReader<'a, const N: usize> {
    reader: bytes::Reader<'a>,
    bank: DigestBank<N>,
    format: LogFormat,
    digest_sizes: Vec<(u16, u16)>,
    read: usize,
}

impl<'a, const N: usize> AgileLogReader<'a, N> {
    /// Reads the header: a legacy (SHA-1 format) `EV_NO_ACTION` event whose
    /// data is the `Spec ID Event03` listing the banks and digest sizes.
    pub fn open(
        bytes: &'a [u8],
        bank: DigestBank<N>,
        format: LogFormat,
    ) -> Result<AgileLogReader<'a, N>, EventLogError> {
        let mut reader = bytes::Reader::new(bytes);
        let header = take(&mut reader, LEGACY_HEADER_LEN, "the header event")?;
        let mut h = bytes::Reader::new(header);
        // Register index, type, a SHA-1 digest, the data's size.
        let fields = (h.u32_le(), h.u32_le(), h.skip(20), h.u32_le());
        let (Ok(index), Ok(event_type), Ok(()), Ok(data_len)) = fields else {
            return Err(EventLogError::NotCryptoAgile);
        };
        if (format.header_index_zero && index != 0) || event_type != EV_NO_ACTION {
            return Err(EventLogError::NotCryptoAgile);
        }
        let data_len = bytes::len_of(data_len);
        let spec = take(&mut reader, data_len, "the Spec ID event")?;
        let digest_sizes = spec_id_digest_sizes(spec)?;
        Ok(AgileLogReader {
            reader,
            bank,
            format,
            digest_sizes,
            read: 0,
        })
    }

    /// The `(algorithm, digest size)` table the header declares.
    pub fn digest_sizes(&self) -> &[(u16, u16)] {
        &self.digest_sizes
    }

    /// The next event; `None` once the log is read or only padding is left.
    /// `check_index` sees each event's number (1 is the first after the
    /// header) and register index as soon as it is read.
    pub fn next_event<E: From<EventLogError>>(
        &mut self,
        check_index: impl FnOnce(usize, u32) -> Result<(), E>,
    ) -> Result<Option<AgileEvent<'a, N>>, E> {
        let rest = self.reader.rest();
        if rest.is_empty()
            || self
                .format
                .padding
                .iter()
                .any(|p| rest.iter().all(|b| b == p))
        {
            return Ok(None);
        }
        if self.read == self.format.max_events {
            return Err(EventLogError::TooManyEvents.into());
        }
        self.read += 1;
        let number = self.read;
        let index = u32_le(&mut self.reader, "an event's register index")?;
        check_index(number, index)?;
        let event_type = u32_le(&mut self.reader, "an event's type")?;
        let count = u32_le(&mut self.reader, "an event's digest count")?;
        if bytes::len_of(count) > MAX_ALGORITHMS {
            return Err(EventLogError::TooManyAlgorithms { count }.into());
        }
        let mut digest = None;
        for _ in 0..count {
            let alg = u16_le(&mut self.reader, "a digest's algorithm")?;
            let undeclared = EventLogError::UndeclaredAlgorithm { event: number, alg };
            let size = self
                .digest_sizes
                .iter()
                .find(|(a, _)| *a == alg)
                .map(|(_, s)| usize::from(*s))
                .ok_or(undeclared.clone())?;
            let bytes = take(&mut self.reader, size, "a digest")?;
            if alg == self.bank.alg {
                digest = Some(<[u8; N]>::try_from(bytes).map_err(|_| undeclared)?);
            }
        }
        let size = bytes::len_of(u32_le(&mut self.reader, "an event's data size")?);
        let data = take(&mut self.reader, size, "an event's data")?;
        Ok(Some(AgileEvent {
            index,
            event_type,
            digest,
            data,
        }))
    }

    /// How many bytes were read (the header and the events so far).
    pub fn offset(&self) -> usize {
        self.reader.offset()
    }

    /// The bytes read so far: the log without its padding once
    /// [`next_event`](Self::next_event) gave `None`.
    pub fn consumed(&self) -> &'a [u8] {
        self.reader.consumed()
    }
}

/// The shared reader's shortfall as the log's error.
fn truncated(e: bytes::ReadError, what: &'static str) -> EventLogError {
    let offset = match e {
        bytes::ReadError::Short { offset, .. } | bytes::ReadError::Trailing { offset, .. } => {
            offset
        }
    };
    EventLogError::Truncated { offset, what }
}

fn take<'a>(
    r: &mut bytes::Reader<'a>,
    n: usize,
    what: &'static str,
) -> Result<&'a [u8], EventLogError> {
    r.take(n).map_err(|e| truncated(e, what))
}

fn u16_le(r: &mut bytes::Reader<'_>, what: &'static str) -> Result<u16, EventLogError> {
    r.u16_le().map_err(|e| truncated(e, what))
}

fn u32_le(r: &mut bytes::Reader<'_>, what: &'static str) -> Result<u32, EventLogError> {
    r.u32_le().map_err(|e| truncated(e, what))
}

impl EventLog {
    /// Parses a crypto-agile log. Trailing zero bytes (firmware pads the
    /// log area) end it.
    pub fn parse(bytes: &[u8]) -> Result<EventLog, EventLogError> {
        if bytes.len() > MAX_EVENT_LOG_LEN {
            return Err(EventLogError::TooLarge { len: bytes.len() });
        }
        let mut log = AgileLogReader::open(bytes, SHA256_BANK, TCG_LOG)?;
        if !log
            .digest_sizes()
            .iter()
            .any(|(alg, _)| *alg == TPM_ALG_SHA256)
        {
            return Err(EventLogError::NoSha256Bank);
        }

        let mut events = Vec::new();
        let mut startup_locality = 0;
        let in_range = |event: usize, pcr: u32| match usize::try_from(pcr) {
            Ok(p) if p < PCR_COUNT => Ok(()),
            _ => Err(EventLogError::PcrOutOfRange { event, pcr }),
        };
        while let Some(e) = log.next_event(in_range)? {
            let event = Event {
                pcr: e.index,
                event_type: e.event_type,
                sha256: e.digest,
                data: e.data.to_vec(),
            };
            if event.extends() && event.sha256.is_none() {
                return Err(EventLogError::MissingSha256 {
                    event: events.len() + 1,
                });
            }
            if let [sig @ .., locality] = event.data.as_slice()
                && !event.extends()
                && event.pcr == 0
                && sig == STARTUP_LOCALITY_SIGNATURE
            {
                startup_locality = *locality;
            }
            events.push(event);
        }
        Ok(EventLog {
            events,
            startup_locality,
        })
    }

    /// The events after the header, in log order.
    pub fn events(&self) -> &[Event] {
        &self.events
    }

    /// The locality the TPM was started from (PCR 0's initial last byte).
    pub fn startup_locality(&self) -> u8 {
        self.startup_locality
    }

    /// The SHA-256 value of every PCR the log extends, replayed from reset
    /// (zeros; PCR 0 starts with the startup locality in its last byte).
    /// PCRs without an event are absent.
    pub fn replay(&self) -> BTreeMap<u32, [u8; SHA256_LEN]> {
        let mut pcrs = BTreeMap::new();
        for (e, digest) in self.extended() {
            let value = pcrs.entry(e.pcr).or_insert_with(|| {
                let mut reset = [0u8; SHA256_LEN];
                if e.pcr == 0 {
                    reset[SHA256_LEN - 1] = self.startup_locality;
                }
                reset
            });
            *value = pcr_digest([&value[..], &digest[..]]);
        }
        pcrs
    }

    /// Extends every event's SHA-256 digest into `tpm`, in order, so that a
    /// freshly started TPM (startup locality 0) holds what the log's machine
    /// held. Used to give a join service's TPM the measurements of a node
    /// of the same image.
    pub fn extend_into(&self, tpm: &mut Tpm) -> Result<(), TpmError> {
        for (e, digest) in self.extended() {
            tpm.pcr_extend(e.pcr, &digest)?;
        }
        Ok(())
    }

    /// The extending events with their SHA-256 digests (which
    /// [`parse`](Self::parse) requires of every one of them).
    fn extended(&self) -> impl Iterator<Item = (&Event, [u8; SHA256_LEN])> {
        self.events
            .iter()
            .filter(|e| e.extends())
            .filter_map(|e| e.sha256.map(|d| (e, d)))
    }
}

/// One extending event as a verifier compares it: the PCR, the digest
/// extended and what it measures. The form of an expected (predicted or
/// golden) event log, kept as JSON by [`EventList`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EventSummary {
    /// The PCR it extends.
    pub pcr: u32,
    /// The TCG event type's name, e.g. `EV_EVENT_TAG`.
    pub event_type: String,
    /// The SHA-256 digest extended.
    pub sha256: [u8; SHA256_LEN],
    /// What it measures ([`Event::description`]).
    pub description: String,
}

/// Longest description or type name an [`EventList`] keeps.
pub const MAX_DESCRIPTION_LEN: usize = 256;

/// The extending events of a log, in order: what a verifier compares a
/// node's log with to explain a PCR that differs. Its JSON form:
/// `{"events":[{"pcr":9,"type":"EV_EVENT_TAG","sha256":"<hex>","description":"Linux initrd"},...]}`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EventList {
    /// The events, in log order.
    pub events: Vec<EventSummary>,
}

/// Why JSON is not an [`EventList`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EventListError {
    /// Not JSON of the expected shape; says where.
    #[error("not an event list: {0}")]
    Malformed(String),
    /// More than [`MAX_EVENTS`] events.
    #[error("event list has more than {} events", MAX_EVENTS)]
    TooManyEvents,
}

/// The first `n` hex digits of a digest and an ellipsis.
fn short_hex(digest: &[u8]) -> String {
    let mut h = confboot_util::hex::encode(digest);
    h.truncate(8);
    h.push('…');
    h
}

impl EventList {
    /// The JSON form (one event per line, stable: same list, same bytes).
    pub fn to_json(&self) -> String {
        let lines: Vec<String> = self
            .events
            .iter()
            .map(|e| {
                serde_json::json!({
                    "pcr": e.pcr,
                    "type": e.event_type,
                    "sha256": confboot_util::hex::encode(&e.sha256),
                    "description": e.description,
                })
                .to_string()
            })
            .collect();
        format!("{{\"events\":[\n{}\n]}}\n", lines.join(",\n"))
    }

    /// Parses the JSON form strictly: no other keys, PCRs 0 to 23, 32-byte
    /// digests, strings of at most [`MAX_DESCRIPTION_LEN`] characters, at
    /// most [`MAX_EVENTS`] events.
    pub fn from_json(text: &str) -> Result<EventList, EventListError> {
        let bad = |m: String| EventListError::Malformed(m);
        let value: serde_json::Value =
            serde_json::from_str(text).map_err(|e| bad(e.to_string()))?;
        let obj = value
            .as_object()
            .ok_or_else(|| bad("not an object".into()))?;
        if let Some(k) = obj.keys().find(|k| *k != "events") {
            return Err(bad(format!("unknown key {k:?}")));
        }
        let list = obj
            .get("events")
            .and_then(|v| v.as_array())
            .ok_or_else(|| bad("no \"events\" array".into()))?;
        if list.len() > MAX_EVENTS {
            return Err(EventListError::TooManyEvents);
        }
        let mut events = Vec::with_capacity(list.len());
        for (i, item) in list.iter().enumerate() {
            let at = |m: &str| bad(format!("event {}: {m}", i + 1));
            let e = item.as_object().ok_or_else(|| at("not an object"))?;
            if let Some(k) = e
                .keys()
                .find(|k| !["pcr", "type", "sha256", "description"].contains(&k.as_str()))
            {
                return Err(at(&format!("unknown key {k:?}")));
            }
            let pcr = e
                .get("pcr")
                .and_then(|v| v.as_u64())
                .and_then(|p| u32::try_from(p).ok())
                .filter(|p| usize::try_from(*p).is_ok_and(|p| p < PCR_COUNT))
                .ok_or_else(|| at("\"pcr\" must be 0 to 23"))?;
            let text = |key: &str| -> Result<String, EventListError> {
                let v = e
                    .get(key)
                    .and_then(|v| v.as_str())
                    .ok_or_else(|| at(&format!("\"{key}\" must be a string")))?;
                if v.chars().count() > MAX_DESCRIPTION_LEN {
                    return Err(at(&format!(
                        "\"{key}\" is longer than {MAX_DESCRIPTION_LEN} characters"
                    )));
                }
                Ok(v.to_string())
            };
            let digest = confboot_util::hex::decode(&text("sha256")?)
                .ok()
                .and_then(|d| <[u8; SHA256_LEN]>::try_from(d).ok())
                .ok_or_else(|| at("\"sha256\" must be 64 hex digits"))?;
            events.push(EventSummary {
                pcr,
                event_type: text("type")?,
                sha256: digest,
                description: text("description")?,
            });
        }
        Ok(EventList { events })
    }

    /// Replays the list like [`EventLog::replay`] (from zeros: a list keeps
    /// no startup locality, so PCR 0 is right only for locality 0).
    pub fn replay(&self) -> BTreeMap<u32, [u8; SHA256_LEN]> {
        let mut pcrs = BTreeMap::new();
        for e in &self.events {
            let value = pcrs.entry(e.pcr).or_insert([0u8; SHA256_LEN]);
            *value = pcr_digest([&value[..], &e.sha256[..]]);
        }
        pcrs
    }

    /// Names the first event of `pcr` where `actual` differs from this
    /// (expected) list, e.g. `PCR 9, event 2 (Linux initrd): sha256
    /// ab12cd34… expected 0011aabb…`; `None` when the PCR's events agree.
    /// The event's description is escaped and bounded
    /// ([`confboot_util::text::printable`]).
    pub fn explain(&self, pcr: u32, actual: &EventList) -> Option<String> {
        let of = |l: &EventList| -> Vec<EventSummary> {
            l.events.iter().filter(|e| e.pcr == pcr).cloned().collect()
        };
        let (want, got) = (of(self), of(actual));
        // Descriptions are the node's (and so the host's) text: escaped
        // and bounded before they are printed.
        let described = |e: &EventSummary| {
            confboot_util::text::printable_str(
                &e.description,
                confboot_util::text::MAX_PRINTED_CHARS,
            )
        };
        for n in 0..want.len().max(got.len()) {
            match (got.get(n), want.get(n)) {
                (Some(g), Some(w)) if g.sha256 == w.sha256 => continue,
                (Some(g), Some(w)) => {
                    return Some(format!(
                        "PCR {pcr}, event {} ({}): sha256 {} expected {}",
                        n + 1,
                        described(w),
                        short_hex(&g.sha256),
                        short_hex(&w.sha256)
                    ));
                }
                (Some(g), None) => {
                    return Some(format!(
                        "PCR {pcr}, event {} ({}): sha256 {}, not expected",
                        n + 1,
                        described(g),
                        short_hex(&g.sha256)
                    ));
                }
                (None, Some(w)) => {
                    return Some(format!(
                        "PCR {pcr}, event {} ({}): missing, expected sha256 {}",
                        n + 1,
                        described(w),
                        short_hex(&w.sha256)
                    ));
                }
                (None, None) => unreachable!("n is below one of the lengths"),
            }
        }
        None
    }
}

impl EventLog {
    /// The extending events as an [`EventList`].
    pub fn to_event_list(&self) -> EventList {
        EventList {
            events: self
                .extended()
                .map(|(e, sha256)| EventSummary {
                    pcr: e.pcr,
                    event_type: e.type_name().to_string(),
                    sha256,
                    description: e.description(),
                })
                .collect(),
        }
    }
}

/// The `(algorithm, digest size)` table of a `TCG_EfiSpecIDEvent`.
pub fn spec_id_digest_sizes(spec: &[u8]) -> Result<Vec<(u16, u16)>, EventLogError> {
    let mut c = bytes::Reader::new(spec);
    if take(&mut c, 16, "the Spec ID signature")? != SPEC_ID_SIGNATURE {
        return Err(EventLogError::NotCryptoAgile);
    }
    // platformClass u32, specVersionMinor, specVersionMajor, specErrata,
    // uintnSize (u8 each).
    take(&mut c, 8, "the Spec ID versions")?;
    let count = u32_le(&mut c, "the algorithm count")?;
    let n = bytes::len_of(count);
    if n > MAX_ALGORITHMS {
        return Err(EventLogError::TooManyAlgorithms { count });
    }
    let mut sizes = Vec::with_capacity(n);
    for _ in 0..count {
        let alg = u16_le(&mut c, "an algorithm id")?;
        let size = u16_le(&mut c, "a digest size")?;
        sizes.push((alg, size));
    }
    Ok(sizes)
}

/// Writes a crypto-agile log with these `(PCR, event type, event data)`
/// events, each extended with the SHA-256 of its data, for tests and tools
/// that need a log a TPM can be extended to ([`EventLog::extend_into`]).
/// Its SHA-1 bank holds filler digests: confboot reads only SHA-256.
pub fn synthetic_log(events: &[(u32, u32, &[u8])]) -> Vec<u8> {
    let mut spec = Vec::new();
    spec.extend_from_slice(SPEC_ID_SIGNATURE);
    spec.extend_from_slice(&[0, 0, 0, 0, 0, 2, 0, 2]);
    spec.extend_from_slice(&2u32.to_le_bytes());
    spec.extend_from_slice(&0x0004u16.to_le_bytes());
    spec.extend_from_slice(&20u16.to_le_bytes());
    spec.extend_from_slice(&TPM_ALG_SHA256.to_le_bytes());
    spec.extend_from_slice(&32u16.to_le_bytes());
    spec.push(0);
    let mut out = Vec::new();
    out.extend_from_slice(&0u32.to_le_bytes());
    out.extend_from_slice(&EV_NO_ACTION.to_le_bytes());
    out.extend_from_slice(&[0; 20]);
    out.extend_from_slice(&bytes::len_u32(spec.len()).to_le_bytes());
    out.extend_from_slice(&spec);
    for (pcr, ty, data) in events {
        out.extend_from_slice(&pcr.to_le_bytes());
        out.extend_from_slice(&ty.to_le_bytes());
        out.extend_from_slice(&2u32.to_le_bytes());
        out.extend_from_slice(&0x0004u16.to_le_bytes());
        out.extend_from_slice(&[0x11; 20]);
        out.extend_from_slice(&TPM_ALG_SHA256.to_le_bytes());
        out.extend_from_slice(ring::digest::digest(&ring::digest::SHA256, data).as_ref());
        out.extend_from_slice(&bytes::len_u32(data.len()).to_le_bytes());
        out.extend_from_slice(data);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sha(data: &[u8]) -> [u8; 32] {
        ring::digest::digest(&ring::digest::SHA256, data)
            .as_ref()
            .try_into()
            .unwrap()
    }

    #[test]
    fn replay_extends_in_order_and_skips_no_action() {
        let bytes = synthetic_log(&[
            (4, 0x8000_0003, b"kernel"),
            (9, 0x6, b"Linux initrd\0"),
            (4, 0x4, &[0, 0, 0, 0]),
            (9, EV_NO_ACTION, b"not extended"),
        ]);
        let log = EventLog::parse(&bytes).unwrap();
        assert_eq!(log.events().len(), 4);
        let pcrs = log.replay();
        let pcr4 = pcr_digest([
            &pcr_digest([&[0u8; 32][..], &sha(b"kernel")])[..],
            &sha(&[0; 4]),
        ]);
        assert_eq!(pcrs[&4], pcr4);
        assert_eq!(
            pcrs[&9],
            pcr_digest([&[0u8; 32][..], &sha(b"Linux initrd\0")])
        );
        assert_eq!(pcrs.len(), 2);
        assert_eq!(log.events()[1].description(), "Linux initrd");
        assert_eq!(log.events()[2].description(), "EV_SEPARATOR");
        let mut tagged = vec![0xec, 0x22, 0x3b, 0x8f, 13, 0, 0, 0];
        tagged.extend_from_slice(b"Linux initrd\0");
        let e = Event {
            pcr: 9,
            event_type: EV_EVENT_TAG,
            sha256: Some([0; 32]),
            data: tagged,
        };
        assert_eq!(e.description(), "Linux initrd");
    }

    #[test]
    fn startup_locality_seeds_pcr0() {
        let mut loc = STARTUP_LOCALITY_SIGNATURE.to_vec();
        loc.push(3);
        let bytes = synthetic_log(&[(0, EV_NO_ACTION, &loc), (0, 0x8, b"crtm")]);
        let log = EventLog::parse(&bytes).unwrap();
        assert_eq!(log.startup_locality(), 3);
        let mut reset = [0u8; 32];
        reset[31] = 3;
        assert_eq!(log.replay()[&0], pcr_digest([&reset[..], &sha(b"crtm")]));
    }

    #[test]
    fn trailing_zeros_end_the_log() {
        let mut bytes = synthetic_log(&[(4, 0x4, b"x")]);
        bytes.extend_from_slice(&[0; 100]);
        assert_eq!(EventLog::parse(&bytes).unwrap().events().len(), 1);
    }

    #[test]
    fn malformed_logs_are_refused_with_the_reason() {
        let good = synthetic_log(&[(4, 0x4, b"x")]);
        let header_only = synthetic_log(&[]).len();
        assert_eq!(EventLog::parse(&good[..header_only]).unwrap().events(), []);
        for cut in (1..good.len()).filter(|c| *c != header_only) {
            let r = EventLog::parse(&good[..cut]);
            assert!(
                matches!(r, Err(EventLogError::Truncated { .. })),
                "cut at {cut}: {r:?}"
            );
        }
        assert_eq!(
            EventLog::parse(&vec![1; MAX_EVENT_LOG_LEN + 1]),
            Err(EventLogError::TooLarge {
                len: MAX_EVENT_LOG_LEN + 1
            })
        );
        let mut bad_pcr = good.clone();
        let first_event = good.len() - (4 + 4 + 4 + 2 + 20 + 2 + 32 + 4 + 1);
        bad_pcr[first_event] = 24;
        assert_eq!(
            EventLog::parse(&bad_pcr),
            Err(EventLogError::PcrOutOfRange { event: 1, pcr: 24 })
        );
        let mut bad_alg = good.clone();
        bad_alg[first_event + 12] = 0x12;
        assert_eq!(
            EventLog::parse(&bad_alg),
            Err(EventLogError::UndeclaredAlgorithm {
                event: 1,
                alg: 0x0012
            })
        );
        let mut many = good.clone();
        many[first_event + 8] = 9;
        assert_eq!(
            EventLog::parse(&many),
            Err(EventLogError::TooManyAlgorithms { count: 9 })
        );
        let mut not_agile = good.clone();
        not_agile[32] = b'X';
        assert_eq!(
            EventLog::parse(&not_agile),
            Err(EventLogError::NotCryptoAgile)
        );
    }

    #[test]
    fn an_extending_event_needs_a_sha256_digest() {
        let mut bytes = synthetic_log(&[(4, 0x4, b"x")]);
        let first_event = bytes.len() - (4 + 4 + 4 + 2 + 20 + 2 + 32 + 4 + 1);
        // Declare one digest (the SHA-1 one) and drop the SHA-256 one.
        bytes[first_event + 8] = 1;
        bytes.drain(first_event + 34..first_event + 34 + 34);
        assert_eq!(
            EventLog::parse(&bytes),
            Err(EventLogError::MissingSha256 { event: 1 })
        );
    }

    #[test]
    fn a_description_the_host_wrote_is_escaped_and_bounded_when_explained() {
        let expected = EventLog::parse(&synthetic_log(&[(9, 0x6, b"Linux initrd\0")]))
            .unwrap()
            .to_event_list();
        // The node's list (the host's, when it lies) is what is printed
        // for an event the expected list lacks: control characters, ANSI
        // escapes and a line that forges a log entry come out escaped.
        let mut actual = expected.clone();
        let mut hostile = expected.events[0].clone();
        hostile.description = "\x1b[2J\x1b[31mOK\r\nverified: all PCRs match\u{7}".into();
        actual.events.push(hostile.clone());
        let why = expected.explain(9, &actual).unwrap();
        assert!(
            why.starts_with(
                "PCR 9, event 2 (\\x1b[2J\\x1b[31mOK\\x0d\\x0averified: all PCRs match\\x07): "
            ),
            "{why}"
        );
        assert!(!why.chars().any(|c| c.is_control()), "{why}");
        // A huge description (the list's JSON allows 256 characters; a
        // list made in code has no bound) is cut, with its length said.
        hostile.description = "A".repeat(100_000);
        actual.events[1] = hostile;
        let why = expected.explain(9, &actual).unwrap();
        assert!(why.contains("…(100000 bytes)"), "{why}");
        assert!(why.len() < 200, "{} bytes", why.len());
    }

    #[test]
    fn an_event_list_round_trips_and_explains_the_first_difference() {
        let expected = EventLog::parse(&synthetic_log(&[
            (4, 0x8000_0003, b"kernel"),
            (9, 0x6, b"LOADED_IMAGE::LoadOptions\0"),
            (9, 0x6, b"Linux initrd\0"),
        ]))
        .unwrap()
        .to_event_list();
        let json = expected.to_json();
        assert_eq!(EventList::from_json(&json).unwrap(), expected);
        assert_eq!(expected.to_json(), json, "same list, same bytes");
        let mut actual = expected.clone();
        assert_eq!(expected.explain(9, &actual), None);
        actual.events[2].sha256 = sha(b"another initrd");
        let why = expected.explain(9, &actual).unwrap();
        assert!(
            why.starts_with("PCR 9, event 2 (Linux initrd): sha256 ")
                && why.contains(&format!("expected {}", short_hex(&sha(b"Linux initrd\0")))),
            "{why}"
        );
        assert_eq!(expected.explain(4, &actual), None);
        actual.events.pop();
        assert!(expected.explain(9, &actual).unwrap().contains("missing"));
        assert_eq!(
            expected.replay(),
            EventLog::parse(&synthetic_log(&[
                (4, 0x8000_0003, b"kernel"),
                (9, 0x6, b"LOADED_IMAGE::LoadOptions\0"),
                (9, 0x6, b"Linux initrd\0"),
            ]))
            .unwrap()
            .replay()
        );
    }

    #[test]
    fn malformed_event_lists_are_refused() {
        let one = |e: &str| format!("{{\"events\":[{e}]}}");
        let d = "00".repeat(32);
        let ok =
            format!("{{\"pcr\":4,\"type\":\"EV_X\",\"sha256\":\"{d}\",\"description\":\"k\"}}");
        assert!(EventList::from_json(&one(&ok)).is_ok());
        for bad in [
            "[]".to_string(),
            "{\"events\":[],\"more\":1}".to_string(),
            one(&ok.replace("\"pcr\":4", "\"pcr\":24")),
            one(&ok.replace(&d, "00")),
            one(&ok.replace(
                "\"k\"",
                &format!("\"{}\"", "k".repeat(MAX_DESCRIPTION_LEN + 1)),
            )),
            one(&ok.replace("\"description\"", "\"other\"")),
            one(&ok.replace(",\"type\":\"EV_X\"", "")),
        ] {
            assert!(EventList::from_json(&bad).is_err(), "{bad}");
        }
        let many = format!("{{\"events\":[{}]}}", vec![ok; MAX_EVENTS + 1].join(","));
        assert_eq!(
            EventList::from_json(&many),
            Err(EventListError::TooManyEvents)
        );
    }

    #[test]
    fn the_event_count_is_bounded() {
        let events: Vec<(u32, u32, &[u8])> = (0..=MAX_EVENTS).map(|_| (4, 0x4, &b""[..])).collect();
        assert_eq!(
            EventLog::parse(&synthetic_log(&events)),
            Err(EventLogError::TooManyEvents)
        );
    }
}
