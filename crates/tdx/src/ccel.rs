//! The TD's CCEL event log: the ACPI "CC Event Log" table ([`CcelTable`],
//! GHCI for Intel TDX; Linux exposes it as `/sys/firmware/acpi/tables/CCEL`)
//! and its log area (`/sys/firmware/acpi/tables/data/CCEL`): a TCG2
//! crypto-agile event log whose events carry SHA-384 digests and, in the
//! place of a PCR number, a measurement-register index (UEFI 2.10,
//! `EFI_CC_MEASUREMENT_PROTOCOL`): 0 is `MRTD`, 1 to 4 are `RTMR0` to
//! `RTMR3`. Only RTMRs are extended at run time, so an extending event
//! names 1 to 4 ([`CcelLog::replay`]).
//!
//! The log proves nothing by itself (the host wrote the firmware's
//! memory as much as anything else it could); replayed, it must give the
//! RTMRs the quote signs ([`CcelLog::check_replay`]), and then each event
//! says what was measured. A policy RTMR that differs is explained by the
//! first event that differs from an expected log ([`CcelLog::explain`]).
//!
//! The log-area parser is the TPM event log's
//! ([`AgileLogReader`], generic over the digest bank): the same header
//! (`Spec ID Event03`), reader and bounds, with the SHA-384 bank
//! ([`SHA384_BANK`]) and this log's format ([`CCEL_LOG`]). Bounded: the
//! table ([`CCEL_TABLE_LEN`] to [`MAX_CCEL_TABLE_LEN`] bytes), the log
//! ([`MAX_CCEL_LOG_LEN`] bytes once its padding is cut, [`MAX_CCEL_EVENTS`]
//! events, [`MAX_ALGORITHMS`] digests per event).
//!
//! [`MAX_ALGORITHMS`]: confboot_tpm::event_log::MAX_ALGORITHMS

#![deny(
    clippy::cast_possible_truncation,
    clippy::cast_sign_loss,
    clippy::cast_possible_wrap
)]

use ring::digest::{SHA384, digest};

use confboot_tpm::event_log::{
    AgileLogReader, DigestBank, EV_NO_ACTION, EventLogError, LogFormat, describe_event,
    event_type_name,
};
use confboot_util::bytes;

/// Length of the CCEL table (ACPI header, CC type and subtype, reserved,
/// LAML and LASA).
pub const CCEL_TABLE_LEN: usize = 56;
/// The largest CCEL table read (the table has no variable part).
pub const MAX_CCEL_TABLE_LEN: usize = 4096;
/// `CC Type` of Intel TDX.
pub const CC_TYPE_TDX: u8 = 2;
/// The largest log area read from the firmware (OVMF reserves 64 KiB).
pub const MAX_CCEL_AREA_LEN: usize = 1 << 20;
/// The largest log kept in evidence, padding cut (OVMF's log of a
/// direct-kernel boot is a few KiB; evidence must fit a TLS certificate).
pub const MAX_CCEL_LOG_LEN: usize = 32 * 1024;
/// Most events read from one log.
pub const MAX_CCEL_EVENTS: usize = 1024;
/// `TPM_ALG_SHA384`.
pub const TPM_ALG_SHA384: u16 = 0x000c;
/// Length of an RTMR and of a SHA-384 digest.
pub const RTMR_LEN: usize = 48;

/// Why a CCEL table or log is refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum CcelError {
    /// The table is not a CCEL table this reader takes.
    #[error("CCEL table: {0}")]
    Table(String),
    /// The log area is longer than the bound.
    #[error("CCEL log of {len} bytes exceeds the {max}-byte bound")]
    TooLarge {
        /// Its length (padding cut, where that was possible).
        len: usize,
        /// The bound.
        max: usize,
    },
    /// The log's framing is broken (truncated, not crypto-agile, too many
    /// algorithms).
    #[error("CCEL log: {0}")]
    Log(EventLogError),
    /// The header declares no SHA-384 bank.
    #[error("CCEL log declares no SHA-384 bank")]
    NoSha384Bank,
    /// An extending event carries no SHA-384 digest.
    #[error("CCEL event {event} extends a register but carries no SHA-384 digest")]
    MissingSha384 {
        /// Index of the event (1 is the first after the header).
        event: usize,
    },
    /// An extending event names a register other than RTMR0 to RTMR3.
    #[error("CCEL event {event} extends measurement register {index} (1 to 4, RTMR0 to RTMR3)")]
    RegisterOutOfRange {
        /// Index of the event.
        event: usize,
        /// The index it names.
        index: u32,
    },
    /// More than [`MAX_CCEL_EVENTS`] events.
    #[error("CCEL log has more than {MAX_CCEL_EVENTS} events")]
    TooManyEvents,
    /// The log does not replay to the quoted RTMR.
    #[error(
        "the CCEL log replays RTMR{rtmr} to {replayed}, the quote says {quoted}: the log is not \
         this TD's"
    )]
    Replay {
        /// The RTMR (0 to 3).
        rtmr: usize,
        /// What the log gives, hex.
        replayed: String,
        /// What the quote signs, hex.
        quoted: String,
    },
}

impl From<EventLogError> for CcelError {
    fn from(e: EventLogError) -> Self {
        match e {
            // The shared reader stops at the format's bound, this log's.
            EventLogError::TooManyEvents => CcelError::TooManyEvents,
            e => CcelError::Log(e),
        }
    }
}

/// The SHA-384 bank, whose digests the RTMRs are extended with.
pub const SHA384_BANK: DigestBank<RTMR_LEN> = DigestBank::new(TPM_ALG_SHA384);

/// The CCEL's format: the header's register index is not checked (the
/// firmware's tables differ), at most [`MAX_CCEL_EVENTS`] events, and the
/// area after the last one is `0xff` (as OVMF fills it) or zero.
pub const CCEL_LOG: LogFormat = LogFormat {
    header_index_zero: false,
    max_events: MAX_CCEL_EVENTS,
    padding: &[0xff, 0],
};

/// The ACPI CCEL table: where the firmware put its log, and how large the
/// area is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CcelTable {
    /// `CC Type` (2: TDX).
    pub cc_type: u8,
    /// `CC Subtype`.
    pub cc_subtype: u8,
    /// `LAML`: the log area's length.
    pub log_area_len: u64,
    /// `LASA`: the log area's guest-physical address.
    pub log_area_start: u64,
}

impl CcelTable {
    /// Parses the table: signature `CCEL`, a length that is the bytes'
    /// ([`CCEL_TABLE_LEN`] at least), a checksum that sums to zero, CC type
    /// TDX, and a log area of 1 to [`MAX_CCEL_AREA_LEN`] bytes.
    pub fn parse(bytes: &[u8]) -> Result<CcelTable, CcelError> {
        let bad = |m: String| CcelError::Table(m);
        if bytes.len() < CCEL_TABLE_LEN || bytes.len() > MAX_CCEL_TABLE_LEN {
            return Err(bad(format!(
                "{} bytes, want {CCEL_TABLE_LEN} to {MAX_CCEL_TABLE_LEN}",
                bytes.len()
            )));
        }
        // The bytes are CCEL_TABLE_LEN at least, so no read below is short.
        let short = |_| bad(format!("{} bytes, want {CCEL_TABLE_LEN}", bytes.len()));
        let mut r = bytes::Reader::new(bytes);
        if r.take(4).map_err(short)? != b"CCEL" {
            return Err(bad("signature is not CCEL".into()));
        }
        let length = bytes::len_of(r.u32_le().map_err(short)?);
        if length != bytes.len() {
            return Err(bad(format!(
                "header length {length}, the table has {} bytes",
                bytes.len()
            )));
        }
        if bytes.iter().fold(0u8, |a, b| a.wrapping_add(*b)) != 0 {
            return Err(bad("checksum does not sum to zero".into()));
        }
        // Revision, checksum, OEM id, OEM table id, OEM revision, creator
        // id and revision: the rest of the ACPI header.
        r.skip(36 - 8).map_err(short)?;
        let cc_type = r.u8().map_err(short)?;
        let cc_subtype = r.u8().map_err(short)?;
        r.skip(2).map_err(short)?;
        let table = CcelTable {
            cc_type,
            cc_subtype,
            log_area_len: r.u64_le().map_err(short)?,
            log_area_start: r.u64_le().map_err(short)?,
        };
        if table.cc_type != CC_TYPE_TDX {
            return Err(bad(format!(
                "CC type {} is not TDX ({CC_TYPE_TDX})",
                table.cc_type
            )));
        }
        if table.log_area_len == 0
            || usize::try_from(table.log_area_len)
                .ok()
                .is_none_or(|n| n > MAX_CCEL_AREA_LEN)
        {
            return Err(bad(format!(
                "log area of {} bytes, want 1 to {MAX_CCEL_AREA_LEN}",
                table.log_area_len
            )));
        }
        Ok(table)
    }

    /// The table's bytes (checksum computed), for tests and tools.
    pub fn encode(&self) -> Vec<u8> {
        let mut t = Vec::with_capacity(CCEL_TABLE_LEN);
        t.extend_from_slice(b"CCEL");
        t.extend_from_slice(&bytes::len_u32(CCEL_TABLE_LEN).to_le_bytes());
        t.push(1); // revision
        t.push(0); // checksum, below
        t.extend_from_slice(b"CNFBT ");
        t.extend_from_slice(b"CONFBOOT");
        t.extend_from_slice(&1u32.to_le_bytes());
        t.extend_from_slice(b"CNFB");
        t.extend_from_slice(&1u32.to_le_bytes());
        t.push(self.cc_type);
        t.push(self.cc_subtype);
        t.extend_from_slice(&[0, 0]);
        t.extend_from_slice(&self.log_area_len.to_le_bytes());
        t.extend_from_slice(&self.log_area_start.to_le_bytes());
        let sum = t.iter().fold(0u8, |a, b| a.wrapping_add(*b));
        t[9] = 0u8.wrapping_sub(sum);
        t
    }
}

/// One event of the CCEL log.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CcelEvent {
    /// The measurement-register index (1 to 4: RTMR0 to RTMR3 for an
    /// extending event).
    pub mr_index: u32,
    /// Its TCG event type (`EV_*`).
    pub event_type: u32,
    /// The SHA-384 digest extended; `None` only for `EV_NO_ACTION`.
    pub sha384: Option<[u8; RTMR_LEN]>,
    /// The event data.
    pub data: Vec<u8>,
}

impl CcelEvent {
    /// Whether the event is extended into its register.
    pub fn extends(&self) -> bool {
        self.event_type != EV_NO_ACTION
    }

    /// The RTMR it extends (0 to 3), for an extending event.
    pub fn rtmr(&self) -> Option<usize> {
        (self.extends() && (1..=4).contains(&self.mr_index)).then(|| self.mr_index as usize - 1)
    }

    /// A short, printable description (as a TPM event's).
    pub fn description(&self) -> String {
        describe_event(self.event_type, &self.data)
    }
}

/// A parsed CCEL log area.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CcelLog {
    events: Vec<CcelEvent>,
    /// The bytes up to the end of the last event (the padding cut).
    used: Vec<u8>,
}

impl CcelLog {
    /// Parses a log area: the crypto-agile header, then events until the
    /// area ends or only padding (all `0xff`, as OVMF fills the area, or
    /// all zero) is left.
    pub fn parse(bytes: &[u8]) -> Result<CcelLog, CcelError> {
        if bytes.len() > MAX_CCEL_AREA_LEN {
            return Err(CcelError::TooLarge {
                len: bytes.len(),
                max: MAX_CCEL_AREA_LEN,
            });
        }
        let mut log = AgileLogReader::open(bytes, SHA384_BANK, CCEL_LOG)?;
        if !log
            .digest_sizes()
            .iter()
            .any(|(alg, size)| *alg == TPM_ALG_SHA384 && usize::from(*size) == RTMR_LEN)
        {
            return Err(CcelError::NoSha384Bank);
        }
        let mut events = Vec::new();
        while let Some(e) = log.next_event(|_, _| Ok::<(), CcelError>(()))? {
            let index = events.len() + 1;
            let event = CcelEvent {
                mr_index: e.index,
                event_type: e.event_type,
                sha384: e.digest,
                data: e.data.to_vec(),
            };
            if event.extends() {
                if event.sha384.is_none() {
                    return Err(CcelError::MissingSha384 { event: index });
                }
                if event.rtmr().is_none() {
                    return Err(CcelError::RegisterOutOfRange {
                        event: index,
                        index: e.index,
                    });
                }
            }
            events.push(event);
        }
        if log.offset() > MAX_CCEL_LOG_LEN {
            return Err(CcelError::TooLarge {
                len: log.offset(),
                max: MAX_CCEL_LOG_LEN,
            });
        }
        Ok(CcelLog {
            events,
            used: log.consumed().to_vec(),
        })
    }

    /// The events after the header, in log order.
    pub fn events(&self) -> &[CcelEvent] {
        &self.events
    }

    /// The log's bytes without the area's padding (what evidence carries).
    pub fn as_bytes(&self) -> &[u8] {
        &self.used
    }

    /// RTMR0 to RTMR3 replayed from zero: each extending event's digest
    /// extended as the TDX module does (`SHA-384(RTMR ‖ digest)`).
    pub fn replay(&self) -> [[u8; RTMR_LEN]; 4] {
        let mut rtmrs = [[0u8; RTMR_LEN]; 4];
        for e in &self.events {
            if let (Some(i), Some(d)) = (e.rtmr(), e.sha384) {
                rtmrs[i] = extend(&rtmrs[i], &d);
            }
        }
        rtmrs
    }

    /// Checks that the log replays to the quoted RTMRs: `RTMR0` to `RTMR2`
    /// always, `RTMR3` when the log has events for it. `RTMR3` is the TD's
    /// own register, which a bootstrapped TD extends at run time with the
    /// cluster mark (`confboot_cluster::mark`) and no firmware log records, as a
    /// vTPM event log does not record PCR 15; a join service reads it as a
    /// mark, and a policy may still pin it.
    pub fn check_replay(&self, quoted: &[[u8; RTMR_LEN]; 4]) -> Result<(), CcelError> {
        let replayed = self.replay();
        let logs_rtmr3 = self.events.iter().any(|e| e.rtmr() == Some(3));
        for (rtmr, (r, q)) in replayed.iter().zip(quoted).enumerate() {
            if rtmr == 3 && !logs_rtmr3 {
                continue;
            }
            if r != q {
                return Err(CcelError::Replay {
                    rtmr,
                    replayed: confboot_util::hex::encode(r),
                    quoted: confboot_util::hex::encode(q),
                });
            }
        }
        Ok(())
    }

    /// Names the first event of `rtmr` where `actual` differs from this
    /// (expected) log, e.g. `RTMR2, event 3 (Linux initrd): sha384
    /// ab12cd34… expected 0011aabb…`; `None` when the RTMR's events agree.
    /// Descriptions are the node's text: escaped and bounded.
    pub fn explain(&self, rtmr: usize, actual: &CcelLog) -> Option<String> {
        let of = |l: &CcelLog| -> Vec<CcelEvent> {
            l.events
                .iter()
                .filter(|e| e.rtmr() == Some(rtmr))
                .cloned()
                .collect()
        };
        let (want, got) = (of(self), of(actual));
        let described = |e: &CcelEvent| {
            confboot_util::text::printable_str(
                &e.description(),
                confboot_util::text::MAX_PRINTED_CHARS,
            )
        };
        let short = |d: &Option<[u8; RTMR_LEN]>| {
            let mut h = confboot_util::hex::encode(&d.unwrap_or([0; RTMR_LEN])[..4]);
            h.push('…');
            h
        };
        for n in 0..want.len().max(got.len()) {
            return Some(match (got.get(n), want.get(n)) {
                (Some(g), Some(w)) if g.sha384 == w.sha384 => continue,
                (Some(g), Some(w)) => format!(
                    "RTMR{rtmr}, event {} ({}): sha384 {} expected {}",
                    n + 1,
                    described(w),
                    short(&g.sha384),
                    short(&w.sha384)
                ),
                (Some(g), None) => format!(
                    "RTMR{rtmr}, event {} ({}): sha384 {}, not expected",
                    n + 1,
                    described(g),
                    short(&g.sha384)
                ),
                (None, Some(w)) => format!(
                    "RTMR{rtmr}, event {} ({}): missing, expected sha384 {}",
                    n + 1,
                    described(w),
                    short(&w.sha384)
                ),
                (None, None) => return None,
            });
        }
        None
    }

    /// One line per extending event: `RTMR<i> <type> <sha384> <description>`.
    pub fn lines(&self) -> Vec<String> {
        self.events
            .iter()
            .filter_map(|e| {
                let rtmr = e.rtmr()?;
                Some(format!(
                    "RTMR{rtmr} {} {} {}",
                    event_type_name(e.event_type),
                    confboot_util::hex::encode(&e.sha384.unwrap_or([0; RTMR_LEN])),
                    confboot_util::text::printable_str(
                        &e.description(),
                        confboot_util::text::MAX_PRINTED_CHARS
                    )
                ))
            })
            .collect()
    }
}

/// `SHA-384(rtmr ‖ digest)`: one RTMR extension.
pub fn extend(rtmr: &[u8; RTMR_LEN], digest_: &[u8; RTMR_LEN]) -> [u8; RTMR_LEN] {
    let mut both = [0u8; 2 * RTMR_LEN];
    both[..RTMR_LEN].copy_from_slice(rtmr);
    both[RTMR_LEN..].copy_from_slice(digest_);
    let mut out = [0u8; RTMR_LEN];
    out.copy_from_slice(digest(&SHA384, &both).as_ref());
    out
}

/// Writes a CCEL log area with these `(measurement-register index, event
/// type, event data)` events, each extended with the SHA-384 of its data,
/// then `padding` bytes of `0xff` (as OVMF leaves the rest of the area):
/// for tests, seeds and tools. Its header declares SHA-384 only.
pub fn synthetic_ccel_log(events: &[(u32, u32, &[u8])], padding: usize) -> Vec<u8> {
    let mut spec = Vec::new();
    spec.extend_from_slice(confboot_tpm::event_log::SPEC_ID_SIGNATURE);
    spec.extend_from_slice(&[0, 0, 0, 0, 0, 2, 0, 2]);
    spec.extend_from_slice(&1u32.to_le_bytes());
    spec.extend_from_slice(&TPM_ALG_SHA384.to_le_bytes());
    spec.extend_from_slice(&u16::try_from(RTMR_LEN).unwrap_or(u16::MAX).to_le_bytes());
    spec.push(0);
    let mut out = Vec::new();
    out.extend_from_slice(&0u32.to_le_bytes());
    out.extend_from_slice(&EV_NO_ACTION.to_le_bytes());
    out.extend_from_slice(&[0; 20]);
    out.extend_from_slice(&bytes::len_u32(spec.len()).to_le_bytes());
    out.extend_from_slice(&spec);
    for (index, ty, data) in events {
        out.extend_from_slice(&index.to_le_bytes());
        out.extend_from_slice(&ty.to_le_bytes());
        out.extend_from_slice(&1u32.to_le_bytes());
        out.extend_from_slice(&TPM_ALG_SHA384.to_le_bytes());
        out.extend_from_slice(digest(&SHA384, data).as_ref());
        out.extend_from_slice(&bytes::len_u32(data.len()).to_le_bytes());
        out.extend_from_slice(data);
    }
    out.extend(std::iter::repeat_n(0xff, padding));
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use confboot_tpm::event_log::EV_EVENT_TAG;

    const EV_EFI_ACTION: u32 = 0x8000_0007;

    fn tagged(text: &str) -> Vec<u8> {
        let mut d = 0x1234u32.to_le_bytes().to_vec();
        d.extend_from_slice(&bytes::len_u32(text.len()).to_le_bytes());
        d.extend_from_slice(text.as_bytes());
        d
    }

    #[test]
    fn the_table_round_trips_and_is_checked() {
        let t = CcelTable {
            cc_type: CC_TYPE_TDX,
            cc_subtype: 0,
            log_area_len: 0x10000,
            log_area_start: 0x7f00_0000,
        };
        let bytes = t.encode();
        assert_eq!(bytes.len(), CCEL_TABLE_LEN);
        assert_eq!(CcelTable::parse(&bytes), Ok(t));
        let mut bad_sum = bytes.clone();
        bad_sum[20] ^= 1;
        assert!(
            matches!(CcelTable::parse(&bad_sum), Err(CcelError::Table(m)) if m.contains("checksum"))
        );
        let sev = CcelTable { cc_type: 1, ..t };
        assert!(
            matches!(CcelTable::parse(&sev.encode()), Err(CcelError::Table(m)) if m.contains("not TDX"))
        );
        let huge = CcelTable {
            log_area_len: MAX_CCEL_AREA_LEN as u64 + 1,
            ..t
        };
        assert!(CcelTable::parse(&huge.encode()).is_err());
        assert!(CcelTable::parse(&bytes[..40]).is_err());
        let mut sig = bytes;
        sig[0] = b'X';
        assert!(CcelTable::parse(&sig).is_err());
    }

    #[test]
    fn the_log_replays_into_the_rtmrs_and_its_padding_is_cut() {
        let kernel = tagged("Linux kernel");
        let area = synthetic_ccel_log(
            &[
                (1, EV_EFI_ACTION, b"firmware"),
                (2, EV_EVENT_TAG, &kernel),
                (3, EV_NO_ACTION, b"not extended"),
                (3, EV_EFI_ACTION, b"app"),
            ],
            4096,
        );
        let log = CcelLog::parse(&area).unwrap();
        assert_eq!(log.events().len(), 4);
        assert_eq!(log.as_bytes().len(), area.len() - 4096);
        assert_eq!(CcelLog::parse(log.as_bytes()).unwrap(), log);
        let d = |b: &[u8]| {
            let mut a = [0u8; 48];
            a.copy_from_slice(digest(&SHA384, b).as_ref());
            a
        };
        let rtmrs = log.replay();
        assert_eq!(rtmrs[0], extend(&[0; 48], &d(b"firmware")));
        assert_eq!(rtmrs[1], extend(&[0; 48], &d(&kernel)));
        assert_eq!(rtmrs[2], extend(&[0; 48], &d(b"app")));
        assert_eq!(rtmrs[3], [0; 48]);
        log.check_replay(&rtmrs).unwrap();
        let mut other = rtmrs;
        other[1][0] ^= 1;
        assert!(matches!(
            log.check_replay(&other),
            Err(CcelError::Replay { rtmr: 1, .. })
        ));
        assert_eq!(log.events()[1].description(), "Linux kernel");
        // RTMR3 extended at run time (the cluster mark) with no event for
        // it in the firmware's log: the other RTMRs are still checked.
        let mut marked = rtmrs;
        marked[3] = extend(
            &[0; RTMR_LEN],
            ring::digest::digest(&ring::digest::SHA384, b"cluster")
                .as_ref()
                .try_into()
                .unwrap(),
        );
        log.check_replay(&marked).unwrap();
        marked[2][0] ^= 1;
        assert!(matches!(
            log.check_replay(&marked),
            Err(CcelError::Replay { rtmr: 2, .. })
        ));
        // A log that records RTMR3 events must replay to it.
        let with_rtmr3 =
            CcelLog::parse(&synthetic_ccel_log(&[(4, EV_EVENT_TAG, b"tag")], 0)).unwrap();
        let mut replayed = with_rtmr3.replay();
        with_rtmr3.check_replay(&replayed).unwrap();
        replayed[3] = extend(
            &[0; RTMR_LEN],
            ring::digest::digest(&ring::digest::SHA384, b"cluster")
                .as_ref()
                .try_into()
                .unwrap(),
        );
        assert!(matches!(
            with_rtmr3.check_replay(&replayed),
            Err(CcelError::Replay { rtmr: 3, .. })
        ));
    }

    #[test]
    fn explain_names_the_first_event_that_differs() {
        let expected = CcelLog::parse(&synthetic_ccel_log(
            &[(2, EV_EVENT_TAG, &tagged("Linux initrd"))],
            0,
        ))
        .unwrap();
        let actual = CcelLog::parse(&synthetic_ccel_log(
            &[(2, EV_EVENT_TAG, &tagged("evil initrd"))],
            0,
        ))
        .unwrap();
        let why = expected.explain(1, &actual).unwrap();
        assert!(
            why.starts_with("RTMR1, event 1 (Linux initrd): sha384 "),
            "{why}"
        );
        assert_eq!(expected.explain(0, &actual), None);
        assert_eq!(expected.explain(1, &expected), None);
    }

    #[test]
    fn malformed_logs_are_refused() {
        // A register out of range, an extending event without SHA-384.
        let mrtd = synthetic_ccel_log(&[(0, EV_EFI_ACTION, b"x")], 0);
        assert_eq!(
            CcelLog::parse(&mrtd),
            Err(CcelError::RegisterOutOfRange { event: 1, index: 0 })
        );
        let five = synthetic_ccel_log(&[(5, EV_EFI_ACTION, b"x")], 0);
        assert!(matches!(
            CcelLog::parse(&five),
            Err(CcelError::RegisterOutOfRange { index: 5, .. })
        ));
        let mut no_digest = synthetic_ccel_log(&[], 0);
        no_digest.extend_from_slice(&1u32.to_le_bytes());
        no_digest.extend_from_slice(&EV_EFI_ACTION.to_le_bytes());
        no_digest.extend_from_slice(&0u32.to_le_bytes());
        no_digest.extend_from_slice(&0u32.to_le_bytes());
        assert_eq!(
            CcelLog::parse(&no_digest),
            Err(CcelError::MissingSha384 { event: 1 })
        );
        // A TPM log (SHA-256 bank only) is no CCEL log.
        let tpm = confboot_tpm::event_log::synthetic_log(&[(0, EV_EFI_ACTION, b"x")]);
        assert_eq!(CcelLog::parse(&tpm), Err(CcelError::NoSha384Bank));
        // Every truncation is refused, never a panic (but the one that
        // leaves the header alone: an empty log).
        let area = synthetic_ccel_log(&[(1, EV_EFI_ACTION, b"firmware")], 0);
        let header = synthetic_ccel_log(&[], 0).len();
        for n in (0..area.len()).filter(|n| *n != header) {
            assert!(CcelLog::parse(&area[..n]).is_err(), "{n}");
        }
        assert!(CcelLog::parse(&area[..header]).unwrap().events().is_empty());
        // Too many events.
        let many: Vec<(u32, u32, &[u8])> = (0..=MAX_CCEL_EVENTS)
            .map(|_| (1, EV_EFI_ACTION, b"" as &[u8]))
            .collect();
        assert_eq!(
            CcelLog::parse(&synthetic_ccel_log(&many, 0)),
            Err(CcelError::TooManyEvents)
        );
        assert!(matches!(
            CcelLog::parse(&vec![0xff; MAX_CCEL_AREA_LEN + 1]),
            Err(CcelError::TooLarge { .. })
        ));
    }

    #[test]
    fn a_sha384_bank_declared_twice_is_refused_not_a_panic() {
        // The header declares SHA-384 first with 32 bytes, then with 48: the
        // bank check finds the second, an event's digest is read by the
        // first. The event's 32-byte "SHA-384" is refused.
        let good = synthetic_ccel_log(&[(1, EV_EFI_ACTION, b"x")], 0);
        let mut spec = confboot_tpm::event_log::SPEC_ID_SIGNATURE.to_vec();
        spec.extend_from_slice(&[0, 0, 0, 0, 0, 2, 0, 2]);
        spec.extend_from_slice(&2u32.to_le_bytes());
        for size in [32u16, 48] {
            spec.extend_from_slice(&TPM_ALG_SHA384.to_le_bytes());
            spec.extend_from_slice(&size.to_le_bytes());
        }
        spec.push(0);
        let mut log = Vec::new();
        log.extend_from_slice(&0u32.to_le_bytes());
        log.extend_from_slice(&EV_NO_ACTION.to_le_bytes());
        log.extend_from_slice(&[0; 20]);
        log.extend_from_slice(&u32::try_from(spec.len()).unwrap().to_le_bytes());
        log.extend_from_slice(&spec);
        let header = synthetic_ccel_log(&[], 0).len();
        // The event: register 1, its type, one digest of 32 bytes, no data.
        log.extend_from_slice(&good[header..header + 14]);
        log.extend_from_slice(&[0; 32]);
        log.extend_from_slice(&0u32.to_le_bytes());
        assert_eq!(
            CcelLog::parse(&log),
            Err(CcelError::Log(EventLogError::UndeclaredAlgorithm {
                event: 1,
                alg: TPM_ALG_SHA384
            }))
        );
    }
}
