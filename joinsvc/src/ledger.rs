//! What joinsvc has handed out, so that a member cannot ask twice and a
//! revocation sticks. Plain decisions over plain data: the registry
//! (`vpn`) keeps the [`Ledger`] in its ConfigMap beside the peers
//! and the removed disks, and applies [`decide`] and [`record`] inside the
//! same compare-and-swap that registers a peer, so every replica and every
//! restart sees the same memory.
//!
//! The rules:
//!
//! - **One ticket per launch.** A vTPM node proves it is not bootstrapped
//!   (PCR 15 all zero; a member's PCR 15 is marked and cannot be reset
//!   without a reboot). SEV-SNP evidence has no such register, so each
//!   launch is remembered instead, by its identity (chip id and
//!   `REPORT_ID`, which the firmware draws once per launch): a launch that
//!   was given one ticket, of either kind, for any disk, gets nothing more
//!   ([`Refusal::LaunchServed`]), even for the same disk (it already has
//!   the key). A compromised SNP member gets nothing it did not have.
//! - **A disk joins once.** A join ticket for a disk starts its first boot;
//!   the same disk may ask for a join again only while that first boot has
//!   not completed and for at most [`JOIN_COMPLETION_WINDOW`] (an
//!   interrupted first boot is finished with the header's UUID). Once the
//!   node's own VPN record or a rejoin shows the first boot complete, or
//!   the window passed, a join for it is refused ([`Refusal::DiskJoined`]):
//!   a node whose header lost its "bootstrapped" token must rejoin.
//! - **A removal sticks.** A disk the admin removed gets neither a join nor
//!   a rejoin ticket ([`Refusal::DiskRemoved`]); no request takes it off
//!   the list. The node is reinstalled (a blank disk gets a new UUID).
//!
//! - **A disk is not older than the cluster last saw it.** Per disk, the
//!   last generation its node confirmed having written on its state file
//!   system ([`Ledger::generations`]; the exchange and why the host cannot
//!   forge a generation: `confboot_cluster::generation`). A rejoin ticket
//!   carries it; a confirmation of an older one is refused
//!   ([`Refusal::RolledBack`]), a newer one recorded. At most
//!   [`MAX_DISK_GENERATIONS`] disks are kept, and no entry is ever pushed
//!   out: when full, a *new* disk is refused ([`Refusal::LedgerFull`]: its
//!   join, and its first confirmation), every disk already kept keeps its
//!   entry. An alarm (log line and metric) fires from
//!   [`GENERATIONS_ALARM`] entries on. A removed disk's entry goes with it.
//! - **What the ledger held does not go back.** A [`LedgerAnchor`] that
//!   joinsvc holds (in memory, and in its `--state-dir`) remembers that
//!   each ledger object existed, its highest `resourceVersion`, the filter's
//!   count, every disk's generation seen and every first join seen
//!   ([`JoinSeen`]); a read that shows an object gone (404), a version, a
//!   count or a generation lower, or a first join dropped or revived, is an
//!   error ([`Regressed`]), never an empty ledger.
//!
//! How the memory stays bounded without being forgotten: launches that
//! were served, and disks whose first boot is over, go into a Bloom filter
//! of fixed size ([`FILTER_BITS`] bits, [`FILTER_HASHES`] hashes). A filter
//! never forgets (no false "not seen"), so nothing has to be evicted and an
//! old launch never regains the right to ask. Its price is a false "seen"
//! that grows with the number of entries: a new launch or a new disk
//! refused by chance, below one in a million up to 25,000 entries and one
//! in ten thousand at 50,000. So the filter takes at most
//! [`FILTER_MAX_ENTRIES`] entries (a false "seen" of at most 1.1 in
//! 10,000, measured by `the_filter_refuses_entries_past_its_bound_and_says_its_false_positive_rate`):
//! past it, a ticket that would put a new entry in is refused
//! ([`Refusal::LedgerFull`]), never taken with a weaker filter; an alarm
//! fires from [`FILTER_ALARM_ENTRIES`] on (below 1 in a million). What fills
//! it, first tickets and SEV-SNP launches, is rate-limited per source class
//! ([`FirstTicketRate`]). A refused launch reboots (a new launch has a
//! new `REPORT_ID`); a refused new disk is wiped (it gets a new UUID). Only
//! joins whose first boot is still running are kept exactly, at most
//! [`MAX_PENDING_JOINS`]: when full, the oldest is taken as complete (it
//! moves into the filter), which makes the rule stricter, never looser.
//! The filter is stored apart from the rest (`crate::configmap`) and read
//! only when a decision consults it, so that its size costs the tickets
//! that need it and no others.
//! Times are joinsvc's clock: a clock the host runs fast ends windows
//! early (stricter); one it runs slow keeps an unfinished first boot open
//! for longer, which lets the same disk's genuine image finish it, nothing
//! more.

use std::cell::Cell;
use std::collections::BTreeMap;
use std::time::Duration;

use confboot_attest::{Attested, Variant};
use confboot_cluster::generation::{RolledBack, check_generation};
use confboot_snp::{LAUNCH_IDENTITY_INDEX, LAUNCH_IDENTITY_LEN};
use ring::digest::{SHA256, digest};

/// How long a disk's first boot may take: until then a join for the same
/// disk is served again (an interrupted first boot is finished), and the
/// VPN peer its join registered is kept without the node's own record.
pub const JOIN_COMPLETION_WINDOW: Duration = Duration::from_secs(60 * 60);
/// The most joins remembered exactly while their first boot runs.
pub const MAX_PENDING_JOINS: usize = 1024;
/// The size of the filter of served launches and joined disks, in bits.
pub const FILTER_BITS: usize = 1 << 20;
/// The bits each entry sets in the filter.
pub const FILTER_HASHES: usize = 8;
/// The most disks whose generation is kept: past it a new disk is
/// refused, no kept disk is forgotten.
pub const MAX_DISK_GENERATIONS: usize = 4096;
/// The number of kept generations from which the alarm fires (75 % of
/// [`MAX_DISK_GENERATIONS`]).
pub const GENERATIONS_ALARM: usize = MAX_DISK_GENERATIONS / 4 * 3;
/// The most entries the filter takes: at this fill a key never put in is
/// found by chance with a probability of about 1.0 in 10,000
/// (`(1 - e^(-k n / m))^k` for `m` = [`FILTER_BITS`], `k` =
/// [`FILTER_HASHES`]); past it nothing more goes in.
pub const FILTER_MAX_ENTRIES: u64 = 50_000;
/// The filter's fill from which the alarm fires: about 8 in 10 million
/// falsely seen.
pub const FILTER_ALARM_ENTRIES: u64 = 25_000;

/// The identity of one SEV-SNP launch: SHA-256 over its chip id and
/// `REPORT_ID`, as the validator passed them on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LaunchId([u8; 32]);

impl LaunchId {
    /// The launch identity of an SEV-SNP caller, if its evidence carried
    /// one.
    pub fn of(peer: &Attested) -> Option<LaunchId> {
        let raw = peer.measurements.get(&LAUNCH_IDENTITY_INDEX)?;
        if peer.variant != Variant::SevSnp || raw.len() != LAUNCH_IDENTITY_LEN {
            return None;
        }
        let mut id = [0u8; 32];
        id.copy_from_slice(digest(&SHA256, raw).as_ref());
        Some(LaunchId(id))
    }

    /// A launch id from its 32 bytes (tests; the service makes launch ids
    /// only from verified evidence, with [`LaunchId::of`]).
    pub fn from_bytes(bytes: [u8; 32]) -> LaunchId {
        LaunchId(bytes)
    }
}

/// Who asks for a ticket, as the handshake and PCR 15 established it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Caller {
    /// A vTPM node whose PCR 15, or a TD whose `RTMR3`, is all zero: not
    /// bootstrapped since it booted, so it asks once per boot by
    /// construction.
    Unbootstrapped,
    /// An SEV-SNP launch, served once.
    Launch(LaunchId),
    /// A member of this cluster (vTPM PCR 15 or TDX `RTMR3` holding its
    /// mark): peer updates only.
    Member,
}

/// The kind of ticket asked for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TicketKind {
    /// A join ticket: first boot of a disk.
    Join,
    /// A rejoin ticket: a bootstrapped disk's key.
    Rejoin,
}

/// Why the ledger refuses a ticket.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    /// This SEV-SNP launch was given a ticket already.
    #[error(
        "this SEV-SNP launch (its REPORT_ID) was given a ticket already: a launch asks once \
         (reboot the node for a new launch)"
    )]
    LaunchServed,
    /// The disk joined already; it rejoins.
    #[error("state disk {disk} joined already: a bootstrapped node asks for a rejoin ticket")]
    DiskJoined {
        /// The disk UUID.
        disk: String,
    },
    /// The admin removed the disk's node.
    #[error(
        "state disk {disk}: its node was removed (joinsvc --remove-vpn-peer); a removed node \
         is reinstalled with a blank disk"
    )]
    DiskRemoved {
        /// The disk UUID.
        disk: String,
    },
    /// Only callers that are not bootstrapped get tickets.
    #[error("tickets are issued only to nodes that are not bootstrapped")]
    NotUnbootstrapped,
    /// The disk is older than the cluster last saw it.
    #[error("{0}")]
    RolledBack(RolledBack),
    /// A bound of the ledger is reached: nothing new goes in, nothing kept
    /// goes out.
    #[error(
        "the ledger's {what} is full ({held} of {bound}): new entries are refused so that none \
         kept is lost; the admin must act (see SECURITY.md, G5/G6)"
    )]
    LedgerFull {
        /// Which part: `generations` or `filter`.
        what: &'static str,
        /// How many it holds.
        held: u64,
        /// Its bound.
        bound: u64,
    },
    /// A ledger object read went back from what this joinsvc saw.
    #[error("{0}")]
    Regressed(Regressed),
    /// Too many first tickets from one source class lately.
    #[error("{0}")]
    RateLimited(RateLimited),
}

impl Refusal {
    /// A short label for metrics.
    pub fn reason(&self) -> &'static str {
        match self {
            Refusal::LaunchServed => "launch_served",
            Refusal::DiskJoined { .. } => "disk_joined",
            Refusal::DiskRemoved { .. } => "disk_removed",
            Refusal::NotUnbootstrapped => "marked",
            Refusal::RolledBack(_) => "rolled_back",
            Refusal::LedgerFull { .. } => "ledger_full",
            Refusal::Regressed(_) => "ledger_regressed",
            Refusal::RateLimited(_) => "rate_limited",
        }
    }
}

/// A Bloom filter of fixed size: what was put in is always found; what
/// was not is found by chance only (see the module documentation).
///
/// The registry keeps it in an object of its own, read only by the
/// changes that consult it; a change starts with a stand-in
/// ([`IssuedFilter::unread`]) that remembers being consulted, and is run
/// again on the read filter when it was. Two filters are equal when they
/// hold the same bits and count.
#[derive(Clone, Debug, Default)]
pub struct IssuedFilter {
    /// [`FILTER_BITS`] bits, or empty while nothing was put in.
    bits: Vec<u8>,
    /// How many entries were put in.
    count: u64,
    /// `Some` for the stand-in of a filter not read: whether it was
    /// consulted (it answers "seen" and takes nothing in).
    unread: Option<Cell<bool>>,
    /// Keys this change put in the stored filter on an earlier attempt of
    /// its own: not "seen" for it (a launch it claimed stays its own).
    claimed: Vec<[u8; 32]>,
    /// Keys put in since the filter was read.
    added: Vec<[u8; 32]>,
}

impl PartialEq for IssuedFilter {
    fn eq(&self, other: &IssuedFilter) -> bool {
        self.bits == other.bits
            && self.count == other.count
            && self.unread.is_some() == other.unread.is_some()
    }
}

impl Eq for IssuedFilter {}

impl IssuedFilter {
    /// The filter from its stored bits (exactly [`FILTER_BITS`] / 8 bytes,
    /// or none) and count.
    pub fn from_parts(bits: Vec<u8>, count: u64) -> Option<IssuedFilter> {
        (bits.is_empty() || bits.len() == FILTER_BITS / 8).then_some(IssuedFilter {
            bits,
            count,
            ..IssuedFilter::default()
        })
    }

    /// The stand-in for a filter not read yet: a decision that consults it
    /// is refused (everything "seen"), nothing goes in, and
    /// [`IssuedFilter::consulted`] says so, so that the change is made
    /// again on the filter read.
    pub fn unread() -> IssuedFilter {
        IssuedFilter {
            unread: Some(Cell::new(false)),
            ..IssuedFilter::default()
        }
    }

    /// Whether this is the stand-in of [`IssuedFilter::unread`] and a
    /// decision consulted it.
    pub fn consulted(&self) -> bool {
        self.unread.as_ref().is_some_and(Cell::get)
    }

    /// Whether this is the stand-in of [`IssuedFilter::unread`].
    pub fn is_unread(&self) -> bool {
        self.unread.is_some()
    }

    /// The stored bits (empty while nothing was put in).
    pub fn bits(&self) -> &[u8] {
        &self.bits
    }

    /// How many entries were put in.
    pub fn count(&self) -> u64 {
        self.count
    }

    /// The keys put in since the filter was read.
    pub fn added(&self) -> &[[u8; 32]] {
        &self.added
    }

    /// This filter, for a change that put `claimed` in the stored filter
    /// itself on an earlier attempt: those are not "seen" for it.
    pub fn with_claimed(mut self, claimed: &[[u8; 32]]) -> IssuedFilter {
        self.claimed = claimed.to_vec();
        self
    }

    /// Everything `other` holds put in this filter too (the counts add:
    /// an upper bound).
    pub fn absorb(&mut self, other: &IssuedFilter) {
        if other.bits.is_empty() {
            return;
        }
        if self.bits.is_empty() {
            self.bits = vec![0; FILTER_BITS / 8];
        }
        for (mine, theirs) in self.bits.iter_mut().zip(&other.bits) {
            *mine |= theirs;
        }
        self.count = self.count.saturating_add(other.count);
    }

    /// Whether every bit `other` has set is set here.
    pub fn holds(&self, other: &IssuedFilter) -> bool {
        other.bits.is_empty()
            || (!self.bits.is_empty()
                && self
                    .bits
                    .iter()
                    .zip(&other.bits)
                    .all(|(mine, theirs)| mine & theirs == *theirs))
    }

    fn positions(key: &[u8; 32]) -> impl Iterator<Item = usize> + '_ {
        (0..FILTER_HASHES).map(move |i| {
            let word = u32::from_le_bytes(key[4 * i..4 * i + 4].try_into().expect("4 bytes"));
            word as usize & (FILTER_BITS - 1)
        })
    }

    /// Whether the filter shows `disk`'s first boot over (or, by chance,
    /// a key with its bits).
    pub fn holds_disk(&self, disk: &str) -> bool {
        self.has_bits(&disk_key(disk))
    }

    fn has_bits(&self, key: &[u8; 32]) -> bool {
        !self.bits.is_empty()
            && Self::positions(key).all(|p| self.bits[p / 8] & (1 << (p % 8)) != 0)
    }

    fn contains(&self, key: &[u8; 32]) -> bool {
        if let Some(consulted) = &self.unread {
            consulted.set(true);
            return true;
        }
        !self.claimed.contains(key) && self.has_bits(key)
    }

    /// Whether `new` more entries fit under [`FILTER_MAX_ENTRIES`], room
    /// kept for `reserved` (joins whose first boot runs: each goes in once
    /// it completes, and that entry must never be left out, or the disk
    /// could join again). The stand-in of a filter not read answers
    /// "consulted".
    fn room_for(&self, new: u64, reserved: u64) -> Result<(), Refusal> {
        if let Some(consulted) = &self.unread {
            consulted.set(true);
            return Ok(());
        }
        let held = self.count.saturating_add(reserved);
        if held.saturating_add(new) <= FILTER_MAX_ENTRIES {
            return Ok(());
        }
        Err(Refusal::LedgerFull {
            what: "filter",
            held,
            bound: FILTER_MAX_ENTRIES,
        })
    }

    /// Puts `key` in. [`decide`] keeps the count under
    /// [`FILTER_MAX_ENTRIES`]: a ticket whose entry would not fit is
    /// refused, and a join whose first boot runs has its room kept.
    fn insert(&mut self, key: &[u8; 32]) {
        if let Some(consulted) = &self.unread {
            consulted.set(true);
            return;
        }
        if self.has_bits(key) {
            return;
        }
        if self.bits.is_empty() {
            self.bits = vec![0; FILTER_BITS / 8];
        }
        for p in Self::positions(key) {
            self.bits[p / 8] |= 1 << (p % 8);
        }
        self.count += 1;
        self.added.push(*key);
    }
}

fn filter_key(domain: &[u8], value: &[u8]) -> [u8; 32] {
    let mut input = Vec::with_capacity(domain.len() + value.len());
    input.extend_from_slice(domain);
    input.extend_from_slice(value);
    digest(&SHA256, &input)
        .as_ref()
        .try_into()
        .expect("32 bytes")
}

fn launch_key(launch: &LaunchId) -> [u8; 32] {
    filter_key(b"confboot served launch\0", &launch.0)
}

fn disk_key(disk: &str) -> [u8; 32] {
    filter_key(b"confboot joined disk\0", disk.as_bytes())
}

/// joinsvc's memory of what it issued: joins whose first boot runs, and
/// the filter of served launches and joined disks.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Ledger {
    /// Disk UUID → when its join ticket was first issued (Unix seconds),
    /// while its first boot runs (at most [`MAX_PENDING_JOINS`]).
    pub pending: BTreeMap<String, u64>,
    /// Served launches and disks whose first boot is over.
    pub issued: IssuedFilter,
    /// Disk UUID → the last generation its node confirmed (at most
    /// [`MAX_DISK_GENERATIONS`]).
    pub generations: BTreeMap<String, DiskGeneration>,
}

/// A disk's last confirmed generation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DiskGeneration {
    /// The generation the node wrote and confirmed.
    pub generation: u64,
    /// When it was confirmed (Unix seconds, joinsvc's clock).
    pub at: u64,
}

impl Ledger {
    /// Takes every join older than [`JOIN_COMPLETION_WINDOW`] at `now` as
    /// complete; whether anything changed.
    pub fn expire(&mut self, now: u64) -> bool {
        let window = JOIN_COMPLETION_WINDOW.as_secs();
        let expired: Vec<String> = self
            .pending
            .iter()
            .filter(|(_, at)| now.saturating_sub(**at) >= window)
            .map(|(disk, _)| disk.clone())
            .collect();
        for disk in &expired {
            self.complete(disk);
        }
        !expired.is_empty()
    }

    /// The disk's first boot is over (its node's own record arrived, it
    /// rejoined, or its window passed): a join for it is refused from now
    /// on. Whether anything changed.
    pub fn complete(&mut self, disk: &str) -> bool {
        let was_pending = self.pending.remove(disk).is_some();
        let key = disk_key(disk);
        let known = self.issued.contains(&key);
        self.issued.insert(&key);
        was_pending || !known
    }

    /// The generation the cluster last confirmed for `disk` (0: none).
    pub fn generation(&self, disk: &str) -> u64 {
        self.generations.get(disk).map_or(0, |g| g.generation)
    }

    /// A node's confirmation that it found generation `found` on `disk`
    /// and wrote `written` (0: none, it refused the disk): refused when
    /// `found` is older than the last confirmed; otherwise `written` is
    /// recorded (never lowering what is kept). When
    /// [`MAX_DISK_GENERATIONS`] disks are kept, a disk not kept yet is
    /// refused ([`Refusal::LedgerFull`]); no kept disk is forgotten.
    /// Whether the ledger changed.
    pub fn confirm_generation(
        &mut self,
        disk: &str,
        found: u64,
        written: u64,
        now: u64,
    ) -> Result<bool, Refusal> {
        let last = self.generation(disk);
        check_generation(found, last).map_err(Refusal::RolledBack)?;
        if written <= last {
            return Ok(false);
        }
        if !self.generations.contains_key(disk) && self.generations.len() >= MAX_DISK_GENERATIONS {
            return Err(Refusal::LedgerFull {
                what: "generations",
                held: self.generations.len() as u64,
                bound: MAX_DISK_GENERATIONS as u64,
            });
        }
        self.generations.insert(
            disk.to_string(),
            DiskGeneration {
                generation: written,
                at: now,
            },
        );
        fill::observe(self);
        Ok(true)
    }

    /// Whether `disk` holds a join whose first boot runs.
    pub fn is_pending(&self, disk: &str) -> bool {
        self.pending.contains_key(disk)
    }
}

/// Whether `caller` may have a `kind` ticket for `disk` at `now`, given
/// the ledger and the admin's removed disks. Expire the ledger at `now`
/// first ([`Ledger::expire`]).
pub fn decide(
    ledger: &Ledger,
    removed: &[String],
    caller: &Caller,
    kind: TicketKind,
    disk: &str,
) -> Result<(), Refusal> {
    match caller {
        Caller::Member => return Err(Refusal::NotUnbootstrapped),
        Caller::Launch(launch) if ledger.issued.contains(&launch_key(launch)) => {
            return Err(Refusal::LaunchServed);
        }
        Caller::Launch(_) | Caller::Unbootstrapped => {}
    }
    if removed.iter().any(|d| d == disk) {
        return Err(Refusal::DiskRemoved { disk: disk.into() });
    }
    if kind == TicketKind::Join
        && !ledger.is_pending(disk)
        && ledger.issued.contains(&disk_key(disk))
    {
        return Err(Refusal::DiskJoined { disk: disk.into() });
    }
    let new_disk = kind == TicketKind::Join && !ledger.is_pending(disk);
    // Bounds refuse what is new; nothing kept is pushed out.
    let new_entries = new_entries(ledger, caller, kind, disk);
    if new_entries > 0 {
        ledger
            .issued
            .room_for(new_entries, ledger.pending.len() as u64)?;
    }
    // A new disk will want a generation entry at its first rejoin, as
    // will every join whose first boot runs.
    let generations = ledger.generations.len() + ledger.pending.len();
    if new_disk && generations >= MAX_DISK_GENERATIONS {
        return Err(Refusal::LedgerFull {
            what: "generations",
            held: generations as u64,
            bound: MAX_DISK_GENERATIONS as u64,
        });
    }
    fill::observe(ledger);
    Ok(())
}

/// How many entries a `kind` ticket to `caller` for `disk` adds to the
/// ledger: one for an SEV-SNP launch (it is remembered as served), one for
/// a join of a disk whose first boot is not running (a retried join of a
/// pending disk adds none), none for a vTPM or TDX rejoin. Only a ticket
/// that adds one spends its class's first-ticket rate ([`FirstTicketRate`]).
pub fn new_entries(ledger: &Ledger, caller: &Caller, kind: TicketKind, disk: &str) -> u64 {
    let new_disk = kind == TicketKind::Join && !ledger.is_pending(disk);
    u64::from(matches!(caller, Caller::Launch(_))) + u64::from(new_disk)
}

/// Records a ticket [`decide`] allowed; whether the ledger changed. A
/// launch is remembered as served; a join starts (or continues) its disk's
/// first boot, the oldest running one taken as complete when
/// [`MAX_PENDING_JOINS`] run; a rejoin shows its disk's first boot over.
pub fn record(
    ledger: &mut Ledger,
    caller: &Caller,
    kind: TicketKind,
    disk: &str,
    now: u64,
) -> bool {
    let mut changed = false;
    if let Caller::Launch(launch) = caller {
        ledger.issued.insert(&launch_key(launch));
        changed = true;
    }
    match kind {
        TicketKind::Join if ledger.is_pending(disk) => {}
        TicketKind::Join => {
            if ledger.pending.len() >= MAX_PENDING_JOINS {
                let oldest = ledger
                    .pending
                    .iter()
                    .min_by_key(|(_, at)| **at)
                    .map(|(d, _)| d.clone());
                if let Some(oldest) = oldest {
                    ledger.complete(&oldest);
                }
            }
            ledger.pending.insert(disk.to_string(), now);
            changed = true;
        }
        TicketKind::Rejoin => changed |= ledger.is_pending(disk) && ledger.complete(disk),
    }
    changed
}

/// How full the ledger is, for the metrics and the alarm: the last fill
/// this process saw, and a warning logged each time a part crosses its
/// alarm level from below.
pub mod fill {
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

    use super::{FILTER_ALARM_ENTRIES, GENERATIONS_ALARM, Ledger};

    /// Generations kept, at the last decision.
    pub static GENERATIONS: AtomicU64 = AtomicU64::new(0);
    /// Joins whose first boot runs, at the last decision.
    pub static PENDING: AtomicU64 = AtomicU64::new(0);
    /// Entries in the filter, at the last decision that read it.
    pub static FILTER_ENTRIES: AtomicU64 = AtomicU64::new(0);
    static GENERATIONS_ALARMED: AtomicBool = AtomicBool::new(false);
    static FILTER_ALARMED: AtomicBool = AtomicBool::new(false);

    /// Whether the generations' alarm is up for `generations` kept and
    /// `pending` joins running: together at or past [`GENERATIONS_ALARM`].
    pub fn generations_alarm_at(generations: u64, pending: u64) -> bool {
        generations.saturating_add(pending) >= GENERATIONS_ALARM as u64
    }

    /// Whether the filter's alarm is up for `entries`: at or past
    /// [`FILTER_ALARM_ENTRIES`].
    pub fn filter_alarm_at(entries: u64) -> bool {
        entries >= FILTER_ALARM_ENTRIES
    }

    /// Whether the generations' alarm is up at the last fill seen.
    pub fn generations_alarm() -> bool {
        generations_alarm_at(
            GENERATIONS.load(Ordering::Relaxed),
            PENDING.load(Ordering::Relaxed),
        )
    }

    /// Whether the filter's alarm is up at the last fill seen.
    pub fn filter_alarm() -> bool {
        filter_alarm_at(FILTER_ENTRIES.load(Ordering::Relaxed))
    }

    /// Notes `ledger`'s fill; warns when a part crosses its alarm.
    pub fn observe(ledger: &Ledger) {
        GENERATIONS.store(ledger.generations.len() as u64, Ordering::Relaxed);
        PENDING.store(ledger.pending.len() as u64, Ordering::Relaxed);
        if !ledger.issued.is_unread() {
            FILTER_ENTRIES.store(ledger.issued.count(), Ordering::Relaxed);
        }
        let generations =
            generations_alarm_at(ledger.generations.len() as u64, ledger.pending.len() as u64);
        if generations && !GENERATIONS_ALARMED.swap(true, Ordering::Relaxed) {
            log::warn!(
                "ALARM ledger generations: {} disks kept and {} first boots running, of at most \
                 {}: at the bound new disks are refused",
                ledger.generations.len(),
                ledger.pending.len(),
                super::MAX_DISK_GENERATIONS
            );
        } else if !generations {
            GENERATIONS_ALARMED.store(false, Ordering::Relaxed);
        }
        let filter = !ledger.issued.is_unread() && filter_alarm_at(ledger.issued.count());
        if filter && !FILTER_ALARMED.swap(true, Ordering::Relaxed) {
            log::warn!(
                "ALARM ledger filter: {} entries of at most {}: at the bound new launches and new \
                 disks are refused",
                ledger.issued.count(),
                super::FILTER_MAX_ENTRIES
            );
        } else if !filter && !ledger.issued.is_unread() {
            FILTER_ALARMED.store(false, Ordering::Relaxed);
        }
    }
}

// ---- The anchor: what this joinsvc saw the ledger hold ----

/// The ConfigMap holding the registry and the ledger (but its filter).
pub const REGISTRY_OBJECT: &str = "registry";
/// The ConfigMap holding the ledger's filter.
pub const FILTER_OBJECT: &str = "filter";
/// The anchor's file in `--state-dir`.
pub const ANCHOR_FILE: &str = "ledger-anchor.json";
/// The largest anchor file read.
pub const MAX_ANCHOR_BYTES: usize = 1 << 20;

/// A ledger object read that went back from what this joinsvc saw: the
/// API server answers from an older etcd (a control plane's disk rolled
/// back) or someone deleted or rewrote the object. Fails closed: no ticket,
/// no confirmation, until the admin looks.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Regressed {
    /// The object existed and is gone.
    #[error(
        "ledger {object} ConfigMap existed and is gone (404): refused rather than read as empty \
         (an etcd rolled back or the object deleted)"
    )]
    Gone {
        /// [`REGISTRY_OBJECT`] or [`FILTER_OBJECT`].
        object: &'static str,
    },
    /// Its `resourceVersion` is lower than one seen.
    #[error("ledger {object} ConfigMap went back: resourceVersion {found} after {seen}")]
    VersionWentBack {
        /// [`REGISTRY_OBJECT`] or [`FILTER_OBJECT`].
        object: &'static str,
        /// The version read.
        found: u64,
        /// The highest version seen.
        seen: u64,
    },
    /// Its `resourceVersion` is not a number (etcd's always are), so its
    /// order cannot be checked.
    #[error("ledger {object} ConfigMap has a resourceVersion that is not a number")]
    OpaqueVersion {
        /// [`REGISTRY_OBJECT`] or [`FILTER_OBJECT`].
        object: &'static str,
    },
    /// The filter holds fewer entries than seen.
    #[error("ledger filter went back: {found} entries after {seen}")]
    FilterShrank {
        /// The count read.
        found: u64,
        /// The highest count seen.
        seen: u64,
    },
    /// A disk's first join that was seen is gone from the registry (its
    /// pending entry or its name's binding) while the disk was not
    /// removed, its window had not passed and the filter does not show its
    /// first boot over; or a disk seen past its first boot shows it
    /// running again (a registry from before restored).
    #[error(
        "ledger went back for state disk {disk}: its first join {how} (a registry from before \
         restored)"
    )]
    JoinWentBack {
        /// The disk UUID.
        disk: String,
        /// `dropped` or `revived`.
        how: &'static str,
    },
    /// A disk's generation is lower than seen (or gone while the disk was
    /// not removed).
    #[error("ledger went back for state disk {disk}: generation {found} after {seen}")]
    GenerationWentBack {
        /// The disk UUID.
        disk: String,
        /// The generation read (0: none).
        found: u64,
        /// The generation seen.
        seen: u64,
    },
}

/// What one joinsvc saw the ledger's objects hold: that each existed, the
/// highest `resourceVersion` of each, the filter's count and each disk's
/// highest generation. A read lower than that is [`Regressed`]. Bounded:
/// one entry per disk the ledger keeps ([`MAX_DISK_GENERATIONS`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LedgerAnchor {
    /// The registry object's highest version, once it was seen.
    pub registry: Option<u64>,
    /// The filter object's highest version, once it was seen.
    pub filter: Option<u64>,
    /// The filter's highest count seen.
    pub filter_count: u64,
    /// Per disk, the highest generation seen.
    pub generations: BTreeMap<String, u64>,
    /// Per disk whose first join was seen in the registry (pending, or
    /// bound to a name), what was seen ([`JoinSeen`]). Bounded by what
    /// the registry holds: [`MAX_PENDING_JOINS`] pending joins and one
    /// binding per VPN peer; an entry goes when its disk is removed or its
    /// window passed.
    pub joins: BTreeMap<String, JoinSeen>,
}

/// What the anchor saw of one disk's first join in the registry.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct JoinSeen {
    /// Its first boot ran (a pending join).
    pub pending: bool,
    /// A name was bound to it.
    pub bound: bool,
    /// From when (Unix seconds, joinsvc's clock) it may leave the registry
    /// without being removed (its join's or its waiting name's window
    /// end); `None`: only a removal takes it.
    pub until: Option<u64>,
}

/// What a registry read shows of the disks' first joins: each disk
/// pending in `ledger` or bound to a name in `disks` (name → disk), with
/// the names still waiting for their node (`pending_peers`: name → since).
pub fn seen_joins(
    ledger: &Ledger,
    disks: &BTreeMap<String, String>,
    pending_peers: &BTreeMap<String, u64>,
) -> BTreeMap<String, JoinSeen> {
    let window = JOIN_COMPLETION_WINDOW.as_secs();
    let later =
        |until: Option<u64>, at: u64| Some(until.unwrap_or(0).max(at.saturating_add(window)));
    let mut seen: BTreeMap<String, JoinSeen> = BTreeMap::new();
    for (disk, at) in &ledger.pending {
        let e = seen.entry(disk.clone()).or_default();
        e.pending = true;
        e.until = later(e.until, *at);
    }
    for (name, disk) in disks {
        let e = seen.entry(disk.clone()).or_default();
        e.bound = true;
        if let Some(since) = pending_peers.get(name) {
            e.until = later(e.until, *since);
        }
    }
    seen
}

fn version_of(object: &'static str, version: &str) -> Result<u64, Regressed> {
    version
        .parse::<u64>()
        .map_err(|_| Regressed::OpaqueVersion { object })
}

fn check_version(
    object: &'static str,
    seen: Option<u64>,
    version: Option<&str>,
) -> Result<Option<u64>, Regressed> {
    match (seen, version) {
        (Some(_), None) => Err(Regressed::Gone { object }),
        (None, None) => Ok(None),
        (seen, Some(version)) => {
            let found = version_of(object, version)?;
            match seen {
                Some(seen) if found < seen => Err(Regressed::VersionWentBack {
                    object,
                    found,
                    seen,
                }),
                _ => Ok(Some(found.max(seen.unwrap_or(0)))),
            }
        }
    }
}

impl LedgerAnchor {
    /// Checks a read of the registry object (`version`: its
    /// `resourceVersion`, `None` for a 404) holding `ledger` and the
    /// `removed` disks against what was seen, and takes it in. A disk's
    /// generation may go only when the disk was removed. Whether the
    /// anchor changed; nothing changes on an error.
    pub fn observe_registry(
        &mut self,
        version: Option<&str>,
        ledger: &Ledger,
        removed: &[String],
    ) -> Result<bool, Regressed> {
        let registry = check_version(REGISTRY_OBJECT, self.registry, version)?;
        for (disk, seen) in &self.generations {
            let found = ledger.generation(disk);
            if found < *seen && !removed.iter().any(|d| d == disk) {
                return Err(Regressed::GenerationWentBack {
                    disk: disk.clone(),
                    found,
                    seen: *seen,
                });
            }
        }
        let before = (self.registry, self.generations.len());
        let mut changed = before.0 != registry;
        self.registry = registry;
        self.generations
            .retain(|disk, _| !removed.iter().any(|d| d == disk));
        changed |= before.1 != self.generations.len();
        for (disk, g) in &ledger.generations {
            let kept = self.generations.entry(disk.clone()).or_default();
            if g.generation > *kept {
                *kept = g.generation;
                changed = true;
            }
        }
        Ok(changed)
    }

    /// Checks a read of the filter object (`version`: its
    /// `resourceVersion`, `None` for a 404) holding `filter` and takes it
    /// in. Whether the anchor changed; nothing changes on an error.
    pub fn observe_filter(
        &mut self,
        version: Option<&str>,
        filter: &IssuedFilter,
    ) -> Result<bool, Regressed> {
        let seen = check_version(FILTER_OBJECT, self.filter, version)?;
        if filter.count() < self.filter_count {
            return Err(Regressed::FilterShrank {
                found: filter.count(),
                seen: self.filter_count,
            });
        }
        let changed = seen != self.filter || filter.count() != self.filter_count;
        self.filter = seen;
        self.filter_count = filter.count();
        Ok(changed)
    }

    /// The disks whose first join this anchor saw and `seen` (a registry
    /// read) no longer shows, for no reason the registry gives: not
    /// removed, window not passed at `now`, never bound to a name. Their
    /// first boot may have ended (a rejoin takes a pending join out): the
    /// filter must show it ([`IssuedFilter::holds_disk`]), or the read is
    /// [`Regressed`].
    pub fn joins_to_prove(
        &self,
        seen: &BTreeMap<String, JoinSeen>,
        removed: &[String],
        now: u64,
    ) -> Vec<String> {
        self.joins
            .iter()
            .filter(|(disk, j)| {
                !seen.contains_key(*disk)
                    && !removed.iter().any(|d| d == *disk)
                    && j.until.is_none_or(|t| now < t)
                    && j.pending
                    && !j.bound
            })
            .map(|(disk, _)| disk.clone())
            .collect()
    }

    /// Checks the first joins a registry read shows (`seen`, from
    /// [`seen_joins`]) against those this anchor saw, and takes them in: a
    /// disk seen goes only when removed, when its window passed at `now`,
    /// or (never bound to a name) when `proven` (its first boot over in the
    /// filter); a disk seen past its first boot does not run it again.
    /// Either is [`Regressed::JoinWentBack`]. Whether the anchor changed;
    /// nothing changes on an error.
    pub fn observe_joins(
        &mut self,
        seen: &BTreeMap<String, JoinSeen>,
        removed: &[String],
        proven: &[String],
        now: u64,
    ) -> Result<bool, Regressed> {
        let went_back = |disk: &str, how| Regressed::JoinWentBack {
            disk: disk.to_string(),
            how,
        };
        for (disk, j) in &self.joins {
            if removed.iter().any(|d| d == disk) {
                continue;
            }
            match seen.get(disk) {
                Some(s) if s.pending && !j.pending => return Err(went_back(disk, "revived")),
                Some(_) => {}
                None if j.until.is_some_and(|t| now >= t) => {}
                None if j.pending && !j.bound && proven.iter().any(|d| d == disk) => {}
                None => return Err(went_back(disk, "dropped")),
            }
        }
        let next = merge_joins(&self.joins, seen);
        let changed = next != self.joins;
        self.joins = next;
        Ok(changed)
    }

    /// Takes in what this joinsvc's own write of the registry object left
    /// (`version`: the `resourceVersion` the API server gave it), so that a
    /// copy from before that write, or the object deleted after it, is
    /// [`Regressed`] at the next read. Only raises: a later read another
    /// thread took in already may be higher. Whether the anchor changed.
    pub fn raise_registry(&mut self, version: Option<&str>, ledger: &Ledger) -> bool {
        let before = self.clone();
        if let Some(v) = version.and_then(|v| v.parse::<u64>().ok()) {
            self.registry = Some(self.registry.map_or(v, |seen| seen.max(v)));
        }
        for (disk, g) in &ledger.generations {
            let kept = self.generations.entry(disk.clone()).or_default();
            *kept = (*kept).max(g.generation);
        }
        *self != before
    }

    /// Takes in the first joins this joinsvc's own write of the registry
    /// object left (`seen`, from [`seen_joins`]): its own write may end a
    /// first boot, remove a disk or expire a join. Whether the anchor
    /// changed.
    pub fn raise_joins(&mut self, seen: &BTreeMap<String, JoinSeen>) -> bool {
        let next = merge_joins(&BTreeMap::new(), seen);
        let changed = next != self.joins;
        self.joins = next;
        changed
    }

    /// Takes in what this joinsvc's own write of the filter object left
    /// (its `resourceVersion` and the count written), as
    /// [`LedgerAnchor::raise_registry`] does for the registry.
    pub fn raise_filter(&mut self, version: Option<&str>, filter: &IssuedFilter) -> bool {
        let before = self.clone();
        if let Some(v) = version.and_then(|v| v.parse::<u64>().ok()) {
            self.filter = Some(self.filter.map_or(v, |seen| seen.max(v)));
        }
        self.filter_count = self.filter_count.max(filter.count());
        *self != before
    }

    /// The anchor as JSON (its file's content).
    pub fn to_json(&self) -> Vec<u8> {
        serde_json::json!({
            "registry": self.registry,
            "filter": self.filter,
            "filterCount": self.filter_count,
            "generations": self.generations,
            "format": 2,
            "joins": self.joins.iter().map(|(disk, j)| (disk.clone(), serde_json::json!({
                "pending": j.pending,
                "bound": j.bound,
                "until": j.until,
            }))).collect::<serde_json::Map<_, _>>(),
        })
        .to_string()
        .into_bytes()
    }

    /// An anchor from its file's content: at most [`MAX_ANCHOR_BYTES`],
    /// at most [`MAX_DISK_GENERATIONS`] disks (and as many removed since:
    /// twice that), each UUID at most 64 bytes.
    pub fn from_json(bytes: &[u8]) -> Result<LedgerAnchor, AnchorError> {
        let bad = |why: &str| AnchorError::Corrupt(why.to_string());
        if bytes.len() > MAX_ANCHOR_BYTES {
            return Err(bad("too large"));
        }
        let value: serde_json::Value =
            serde_json::from_slice(bytes).map_err(|_| bad("not JSON"))?;
        let version = |key: &str| -> Result<Option<u64>, AnchorError> {
            match &value[key] {
                serde_json::Value::Null => Ok(None),
                v => v.as_u64().map(Some).ok_or_else(|| bad(key)),
            }
        };
        let registry = version("registry")?;
        let filter = version("filter")?;
        let filter_count = value["filterCount"]
            .as_u64()
            .ok_or_else(|| bad("filterCount"))?;
        let entries = value["generations"]
            .as_object()
            .ok_or_else(|| bad("generations"))?;
        if entries.len() > 2 * MAX_DISK_GENERATIONS {
            return Err(bad("too many generations"));
        }
        let mut generations = BTreeMap::new();
        for (disk, g) in entries {
            if disk.is_empty() || disk.len() > 64 {
                return Err(bad("a disk UUID"));
            }
            generations.insert(disk.clone(), g.as_u64().ok_or_else(|| bad("a generation"))?);
        }
        // Format 1 (no "joins") reads as no first join seen.
        let mut joins = BTreeMap::new();
        match &value["joins"] {
            serde_json::Value::Null => {}
            serde_json::Value::Object(entries) => {
                if entries.len() > MAX_ANCHOR_JOINS {
                    return Err(bad("too many joins"));
                }
                for (disk, j) in entries {
                    if disk.is_empty() || disk.len() > 64 {
                        return Err(bad("a disk UUID"));
                    }
                    let flag = |key: &str| j[key].as_bool().ok_or_else(|| bad("a join"));
                    let until = match &j["until"] {
                        serde_json::Value::Null => None,
                        v => Some(v.as_u64().ok_or_else(|| bad("a join"))?),
                    };
                    joins.insert(
                        disk.clone(),
                        JoinSeen {
                            pending: flag("pending")?,
                            bound: flag("bound")?,
                            until,
                        },
                    );
                }
            }
            _ => return Err(bad("joins")),
        }
        Ok(LedgerAnchor {
            registry,
            filter,
            filter_count,
            generations,
            joins,
        })
    }
}

/// The anchor's joins after a read that passed: the disks the read shows,
/// each as shown, but a binding once seen is kept (it goes only by a
/// removal or its window).
fn merge_joins(
    before: &BTreeMap<String, JoinSeen>,
    seen: &BTreeMap<String, JoinSeen>,
) -> BTreeMap<String, JoinSeen> {
    seen.iter()
        .map(|(disk, s)| {
            let bound = s.bound
                || before
                    .get(disk)
                    .is_some_and(|j| j.bound && j.until.is_none());
            (disk.clone(), JoinSeen { bound, ..*s })
        })
        .collect()
}

/// The most first joins an anchor file holds: every pending join and one
/// binding per peer the registry can hold.
pub const MAX_ANCHOR_JOINS: usize = MAX_PENDING_JOINS + MAX_DISK_GENERATIONS;

/// The anchor could not be read or kept.
#[derive(Debug, thiserror::Error)]
pub enum AnchorError {
    /// Its file does not read as an anchor.
    #[error("ledger anchor file is not an anchor: {0}")]
    Corrupt(String),
    /// Its file could not be read or written.
    #[error("ledger anchor file: {0}")]
    File(#[from] confboot_util::fs::FileError),
}

/// The anchor joinsvc holds: in memory, and (with `--state-dir`) in
/// [`ANCHOR_FILE`], replaced atomically whenever it moves, read at start.
/// A file that does not read stops joinsvc, as the reference-set history
/// does.
#[derive(Debug, Default)]
pub struct AnchorStore {
    anchor: std::sync::Mutex<LedgerAnchor>,
    path: Option<std::path::PathBuf>,
}

impl AnchorStore {
    /// An anchor held in memory only (tests, and `--remove-vpn-peer`).
    pub fn in_memory() -> AnchorStore {
        AnchorStore::default()
    }

    /// The anchor kept at `path`: read when the file exists, empty when it
    /// does not (a new control plane).
    pub fn load(path: &std::path::Path) -> Result<AnchorStore, AnchorError> {
        let anchor = if path.exists() {
            LedgerAnchor::from_json(&confboot_util::fs::read_bounded(
                path,
                MAX_ANCHOR_BYTES as u64,
            )?)?
        } else {
            LedgerAnchor::default()
        };
        Ok(AnchorStore {
            anchor: std::sync::Mutex::new(anchor),
            path: Some(path.to_path_buf()),
        })
    }

    /// What the anchor holds now.
    pub fn anchor(&self) -> LedgerAnchor {
        self.anchor
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    fn observe(
        &self,
        apply: impl FnOnce(&mut LedgerAnchor) -> Result<bool, Regressed>,
    ) -> Result<(), Refusal> {
        let mut anchor = self.anchor.lock().unwrap_or_else(|p| p.into_inner());
        let mut next = anchor.clone();
        let changed = apply(&mut next).map_err(|e| {
            log::error!("ALARM {e}");
            Refusal::Regressed(e)
        })?;
        if changed {
            if let Some(path) = &self.path {
                // Kept before it is used: a restart never sees less.
                confboot_util::fs::replace_private(path, &next.to_json()).map_err(|e| {
                    log::error!("ledger anchor not kept: {e}");
                    Refusal::Regressed(Regressed::Gone {
                        object: "anchor file",
                    })
                })?;
            }
            *anchor = next;
        }
        Ok(())
    }

    /// [`LedgerAnchor::observe_registry`] on the anchor held, kept when it
    /// moved. A regression is [`Refusal::Regressed`] (and an alarm).
    pub fn registry(
        &self,
        version: Option<&str>,
        ledger: &Ledger,
        removed: &[String],
    ) -> Result<(), Refusal> {
        self.observe(|a| a.observe_registry(version, ledger, removed))
    }

    /// [`LedgerAnchor::observe_registry`] and
    /// [`LedgerAnchor::observe_joins`] together on the anchor held, kept
    /// when it moved.
    pub fn registry_joins(
        &self,
        version: Option<&str>,
        ledger: &Ledger,
        removed: &[String],
        joins: (&BTreeMap<String, JoinSeen>, &[String], u64),
    ) -> Result<(), Refusal> {
        let (seen, proven, now) = joins;
        self.observe(|a| {
            let registry = a.observe_registry(version, ledger, removed)?;
            Ok(a.observe_joins(seen, removed, proven, now)? | registry)
        })
    }

    /// [`LedgerAnchor::raise_registry`] and [`LedgerAnchor::raise_joins`]
    /// after this joinsvc's own write.
    pub fn wrote_registry_joins(
        &self,
        version: Option<&str>,
        ledger: &Ledger,
        seen: &BTreeMap<String, JoinSeen>,
    ) -> Result<(), Refusal> {
        self.observe(|a| Ok(a.raise_registry(version, ledger) | a.raise_joins(seen)))
    }

    /// [`LedgerAnchor::observe_filter`] on the anchor held, kept when it
    /// moved.
    pub fn filter(&self, version: Option<&str>, filter: &IssuedFilter) -> Result<(), Refusal> {
        self.observe(|a| a.observe_filter(version, filter))
    }

    /// [`LedgerAnchor::raise_registry`] after this joinsvc's own write,
    /// kept when it moved (a write that cannot be kept is a refusal: the
    /// ticket is not handed out).
    pub fn wrote_registry(&self, version: Option<&str>, ledger: &Ledger) -> Result<(), Refusal> {
        self.observe(|a| Ok(a.raise_registry(version, ledger)))
    }

    /// [`LedgerAnchor::raise_filter`] after this joinsvc's own write.
    pub fn wrote_filter(
        &self,
        version: Option<&str>,
        filter: &IssuedFilter,
    ) -> Result<(), Refusal> {
        self.observe(|a| Ok(a.raise_filter(version, filter)))
    }
}

// ---- First tickets, per source class ----

/// The most first tickets a source class may take at once: as many disks
/// as the generation table holds ([`MAX_DISK_GENERATIONS`]), so that no
/// honest build-up of a whole cluster (nor a node retrying its join) is
/// refused; the refill is what bounds a host's long run.
pub const FIRST_TICKET_BURST: u64 = MAX_DISK_GENERATIONS as u64;
/// One more first ticket per source class each this often.
pub const FIRST_TICKET_REFILL: Duration = Duration::from_secs(10);
/// The alarm fires when a class has this few first tickets left (half
/// its burst spent): well before any is refused.
pub const FIRST_TICKET_ALARM: u64 = FIRST_TICKET_BURST / 2;

/// Who a first ticket goes to, for its rate: a join (a new disk) of a
/// variant, or an SEV-SNP launch (each puts an entry in the filter).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum SourceClass {
    /// A join ticket for a node of this variant (its name).
    Join(&'static str),
    /// Any ticket to an SEV-SNP launch.
    Launch,
}

impl SourceClass {
    /// The class of a `kind` ticket to `caller` of `variant`, if it is a
    /// first ticket (one that adds to the ledger: a join, an SEV-SNP
    /// launch); a vTPM or TDX rejoin is not one.
    pub fn of(variant: Variant, caller: &Caller, kind: TicketKind) -> Option<SourceClass> {
        match (caller, kind) {
            (Caller::Launch(_), _) => Some(SourceClass::Launch),
            (_, TicketKind::Join) => Some(SourceClass::Join(variant.name())),
            _ => None,
        }
    }

    /// Its metrics label.
    pub fn label(&self) -> String {
        match self {
            SourceClass::Join(variant) => format!("join/{variant}"),
            SourceClass::Launch => "launch/sev-snp".to_string(),
        }
    }
}

/// A first ticket refused by its class's rate.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "too many first tickets for {class} lately (at most {FIRST_TICKET_BURST} at once, one more \
     every {refill}s): retry later",
    refill = FIRST_TICKET_REFILL.as_secs()
)]
pub struct RateLimited {
    /// The class's label.
    pub class: String,
}

/// One class's bucket.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Bucket {
    /// First tickets left.
    pub left: u64,
    /// When the next one is added (seconds on the rate's clock).
    refill_at: u64,
    /// First tickets taken.
    pub taken: u64,
    /// First tickets refused.
    pub refused: u64,
}

impl Bucket {
    /// Whether the class's alarm is up: at most [`FIRST_TICKET_ALARM`]
    /// left.
    pub fn alarm(&self) -> bool {
        self.left <= FIRST_TICKET_ALARM
    }
}

/// The rate of first tickets per source class: a bucket of
/// [`FIRST_TICKET_BURST`] per class, one more each
/// [`FIRST_TICKET_REFILL`]. Classes are a fixed, small set (variants and
/// SEV-SNP launches), so the table cannot grow with what the host sends.
/// Sans-IO: the caller passes the time (seconds of a monotonic clock).
#[derive(Clone, Debug, Default)]
pub struct FirstTicketRate {
    buckets: BTreeMap<SourceClass, Bucket>,
}

impl FirstTicketRate {
    fn bucket(&mut self, class: SourceClass, now: u64) -> &mut Bucket {
        let refill = FIRST_TICKET_REFILL.as_secs().max(1);
        let bucket = self.buckets.entry(class).or_insert(Bucket {
            left: FIRST_TICKET_BURST,
            refill_at: now + refill,
            taken: 0,
            refused: 0,
        });
        if now >= bucket.refill_at {
            let added = (now - bucket.refill_at) / refill + 1;
            bucket.left = bucket.left.saturating_add(added).min(FIRST_TICKET_BURST);
            bucket.refill_at = bucket
                .refill_at
                .saturating_add(added.saturating_mul(refill));
        }
        bucket
    }

    /// Whether `class` may have a first ticket at `now`: [`RateLimited`]
    /// (counted) when its bucket is empty. Check before issuing, take once
    /// issued ([`FirstTicketRate::take`]), so that refused requests spend
    /// nothing.
    pub fn check(&mut self, class: SourceClass, now: u64) -> Result<(), RateLimited> {
        let bucket = self.bucket(class, now);
        if bucket.left == 0 {
            bucket.refused += 1;
            return Err(RateLimited {
                class: class.label(),
            });
        }
        Ok(())
    }

    /// Counts a first ticket issued to `class` at `now`; its bucket after.
    /// The alarm (a warning, and [`Bucket::alarm`]) is up from
    /// [`FIRST_TICKET_ALARM`] left down.
    pub fn take(&mut self, class: SourceClass, now: u64) -> Bucket {
        let bucket = self.bucket(class, now);
        bucket.left = bucket.left.saturating_sub(1);
        bucket.taken += 1;
        let bucket = *bucket;
        if bucket.left == FIRST_TICKET_ALARM {
            log::warn!(
                "ALARM first tickets for {}: {} taken lately, {} left before refusals (one more \
                 every {}s)",
                class.label(),
                FIRST_TICKET_BURST - bucket.left,
                bucket.left,
                FIRST_TICKET_REFILL.as_secs()
            );
        }
        bucket
    }

    /// Every class seen, with its bucket.
    pub fn buckets(&self) -> impl Iterator<Item = (&SourceClass, &Bucket)> {
        self.buckets.iter()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const DISK: &str = "2f3c6c1e-2b5d-4e8a-9c7f-1a2b3c4d5e6f";
    const OTHER: &str = "9f3c6c1e-2b5d-4e8a-9c7f-1a2b3c4d5e6f";
    const NOW: u64 = 1_700_000_000;

    fn launch(i: u8) -> Caller {
        Caller::Launch(LaunchId::from_bytes([i; 32]))
    }

    /// Decides, and records what is allowed.
    fn ask(
        l: &mut Ledger,
        caller: &Caller,
        kind: TicketKind,
        disk: &str,
        now: u64,
    ) -> Result<(), Refusal> {
        l.expire(now);
        decide(l, &[], caller, kind, disk)?;
        record(l, caller, kind, disk, now);
        Ok(())
    }

    #[test]
    fn an_snp_launch_gets_one_ticket_whatever_it_asks_next() {
        use TicketKind::{Join, Rejoin};
        // The second request of a launch, whatever it is: refused.
        for (first, second) in [
            ((Join, DISK), (Join, DISK)),
            ((Join, DISK), (Join, OTHER)),
            ((Join, DISK), (Rejoin, OTHER)),
            ((Rejoin, DISK), (Rejoin, DISK)),
            ((Rejoin, DISK), (Rejoin, OTHER)),
            ((Rejoin, DISK), (Join, OTHER)),
        ] {
            let mut l = Ledger::default();
            ask(&mut l, &launch(1), first.0, first.1, NOW).unwrap();
            assert_eq!(
                ask(&mut l, &launch(1), second.0, second.1, NOW + 1),
                Err(Refusal::LaunchServed),
                "{first:?} then {second:?}"
            );
            // Another launch (the node rebooted) is served.
            ask(&mut l, &launch(2), Rejoin, DISK, NOW + 2).unwrap();
            // And a launch is never forgotten, however much later.
            assert_eq!(
                ask(&mut l, &launch(1), Rejoin, DISK, NOW + 100 * 86_400),
                Err(Refusal::LaunchServed)
            );
        }
    }

    #[test]
    fn a_vtpm_node_is_not_remembered_as_a_launch_and_a_member_gets_no_ticket() {
        let mut l = Ledger::default();
        ask(
            &mut l,
            &Caller::Unbootstrapped,
            TicketKind::Rejoin,
            DISK,
            NOW,
        )
        .unwrap();
        ask(
            &mut l,
            &Caller::Unbootstrapped,
            TicketKind::Rejoin,
            DISK,
            NOW,
        )
        .unwrap();
        assert_eq!(
            ask(&mut l, &Caller::Member, TicketKind::Rejoin, DISK, NOW),
            Err(Refusal::NotUnbootstrapped)
        );
    }

    #[test]
    fn a_disk_joins_again_only_while_its_first_boot_runs() {
        let mut l = Ledger::default();
        let node = Caller::Unbootstrapped;
        ask(&mut l, &node, TicketKind::Join, DISK, NOW).unwrap();
        // An interrupted first boot finishes with the same UUID.
        ask(&mut l, &node, TicketKind::Join, DISK, NOW + 60).unwrap();
        // Its window passed: the disk joined; it rejoins.
        let late = NOW + JOIN_COMPLETION_WINDOW.as_secs();
        assert_eq!(
            ask(&mut l, &node, TicketKind::Join, DISK, late),
            Err(Refusal::DiskJoined { disk: DISK.into() })
        );
        ask(&mut l, &node, TicketKind::Rejoin, DISK, late).unwrap();
        // Completed by the node's own record: refused at once.
        ask(&mut l, &node, TicketKind::Join, OTHER, NOW).unwrap();
        assert!(l.complete(OTHER));
        assert_eq!(
            ask(&mut l, &node, TicketKind::Join, OTHER, NOW + 1),
            Err(Refusal::DiskJoined { disk: OTHER.into() })
        );
    }

    #[test]
    fn a_rejoin_ends_the_first_boot_of_its_disk() {
        let mut l = Ledger::default();
        let node = Caller::Unbootstrapped;
        ask(&mut l, &node, TicketKind::Join, DISK, NOW).unwrap();
        ask(&mut l, &node, TicketKind::Rejoin, DISK, NOW + 1).unwrap();
        assert_eq!(
            ask(&mut l, &node, TicketKind::Join, DISK, NOW + 2),
            Err(Refusal::DiskJoined { disk: DISK.into() })
        );
    }

    #[test]
    fn a_removed_disk_gets_no_ticket_of_either_kind() {
        let l = Ledger::default();
        let removed = [DISK.to_string()];
        for kind in [TicketKind::Join, TicketKind::Rejoin] {
            for caller in [Caller::Unbootstrapped, launch(3)] {
                assert_eq!(
                    decide(&l, &removed, &caller, kind, DISK),
                    Err(Refusal::DiskRemoved { disk: DISK.into() })
                );
            }
        }
        assert_eq!(
            decide(
                &l,
                &removed,
                &Caller::Unbootstrapped,
                TicketKind::Join,
                OTHER
            ),
            Ok(())
        );
    }

    #[test]
    fn a_full_ledger_takes_its_oldest_first_boot_as_complete_and_forgets_nothing() {
        let mut l = Ledger::default();
        let disk = |i: usize| format!("00000000-0000-4000-8000-{i:012x}");
        for i in 0..=MAX_PENDING_JOINS {
            ask(
                &mut l,
                &Caller::Unbootstrapped,
                TicketKind::Join,
                &disk(i),
                NOW + i as u64,
            )
            .unwrap();
        }
        assert_eq!(l.pending.len(), MAX_PENDING_JOINS);
        assert!(!l.is_pending(&disk(0)));
        assert_eq!(
            decide(&l, &[], &Caller::Unbootstrapped, TicketKind::Join, &disk(0)),
            Err(Refusal::DiskJoined { disk: disk(0) })
        );
    }

    #[test]
    fn a_disk_older_than_its_last_confirmed_generation_is_refused() {
        let mut l = Ledger::default();
        // No generation recorded (a disk's first rejoin): any is taken.
        assert_eq!(l.generation(DISK), 0);
        assert_eq!(l.confirm_generation(DISK, 0, 1, NOW), Ok(true));
        assert_eq!(l.generation(DISK), 1);
        // Each rejoin finds the last and writes the next.
        assert_eq!(l.confirm_generation(DISK, 1, 2, NOW + 1), Ok(true));
        assert_eq!(l.generation(DISK), 2);
        // The disk copied after the first rejoin comes back: refused, and
        // nothing it says is recorded.
        for (found, written) in [(1, 2), (1, 0), (0, 1)] {
            assert_eq!(
                l.confirm_generation(DISK, found, written, NOW + 2),
                Err(Refusal::RolledBack(RolledBack { found, last: 2 })),
                "found {found}"
            );
        }
        assert_eq!(l.generation(DISK), 2);
        let refusal = l.confirm_generation(DISK, 1, 2, NOW + 2).unwrap_err();
        assert_eq!(
            refusal.to_string(),
            "state disk rolled back: generation 1, the cluster last issued 2"
        );
        assert_eq!(refusal.reason(), "rolled_back");
        // Another disk is its own.
        assert_eq!(l.confirm_generation(OTHER, 0, 1, NOW), Ok(true));
        // A report of what was found, nothing written: nothing changes.
        assert_eq!(l.confirm_generation(DISK, 2, 0, NOW + 3), Ok(false));
        assert_eq!(l.generation(DISK), 2);
    }

    #[test]
    fn a_crash_between_the_write_and_its_confirmation_loses_no_node() {
        let mut l = Ledger::default();
        assert_eq!(l.confirm_generation(DISK, 0, 1, NOW), Ok(true));
        // The node wrote 2 and died before confirming: the cluster still
        // has 1, the disk 2. Its next boot finds 2 (newer): taken.
        assert_eq!(l.confirm_generation(DISK, 2, 3, NOW + 1), Ok(true));
        assert_eq!(l.generation(DISK), 3);
        // What the host could restore after that crash is the disk the
        // crashed boot found (1): older than 3 now.
        assert!(l.confirm_generation(DISK, 1, 2, NOW + 2).is_err());
        // Two copies of one disk booted at once: both find 3, the first
        // confirmation wins, the second finds itself behind.
        assert_eq!(l.confirm_generation(DISK, 3, 4, NOW + 3), Ok(true));
        assert_eq!(
            l.confirm_generation(DISK, 3, 4, NOW + 3),
            Err(Refusal::RolledBack(RolledBack { found: 3, last: 4 }))
        );
    }

    fn disk_n(i: usize) -> String {
        format!("00000000-0000-4000-8000-{i:012x}")
    }

    #[test]
    fn a_full_generation_table_refuses_new_disks_and_no_kept_disk_loses_its_entry() {
        let mut l = Ledger::default();
        for i in 0..MAX_DISK_GENERATIONS {
            l.confirm_generation(&disk_n(i), 0, 5, NOW + i as u64)
                .unwrap();
        }
        assert!(fill::generations_alarm_at(GENERATIONS_ALARM as u64 - 1, 1));
        assert!(!fill::generations_alarm_at(GENERATIONS_ALARM as u64 - 2, 1));
        // Host-driven churn: a new disk's first confirmation is refused,
        // never paid for with the entry of the disk silent longest.
        let full = Refusal::LedgerFull {
            what: "generations",
            held: MAX_DISK_GENERATIONS as u64,
            bound: MAX_DISK_GENERATIONS as u64,
        };
        for j in 0..3 * MAX_DISK_GENERATIONS {
            let new = disk_n(MAX_DISK_GENERATIONS + j);
            assert_eq!(
                l.confirm_generation(&new, 0, 1, NOW + 10_000 + j as u64),
                Err(full.clone())
            );
        }
        assert_eq!(full.reason(), "ledger_full");
        assert_eq!(l.generations.len(), MAX_DISK_GENERATIONS);
        for i in 0..MAX_DISK_GENERATIONS {
            assert_eq!(l.generation(&disk_n(i)), 5, "disk {i} kept");
        }
        // A kept disk still advances, and its rollback is still found.
        assert_eq!(
            l.confirm_generation(&disk_n(0), 5, 6, NOW + 20_000),
            Ok(true)
        );
        assert!(
            l.confirm_generation(&disk_n(1), 4, 5, NOW + 20_001)
                .is_err()
        );
        // The join of a new disk is refused up front; a kept disk rejoins.
        let new = disk_n(2 * MAX_DISK_GENERATIONS);
        assert!(matches!(
            decide(&l, &[], &Caller::Unbootstrapped, TicketKind::Join, &new),
            Err(Refusal::LedgerFull {
                what: "generations",
                ..
            })
        ));
        assert_eq!(
            decide(
                &l,
                &[],
                &Caller::Unbootstrapped,
                TicketKind::Rejoin,
                &disk_n(7)
            ),
            Ok(())
        );
        // The room of joins whose first boot runs is kept for them.
        let mut l = Ledger::default();
        for i in 0..MAX_DISK_GENERATIONS - 1 {
            l.confirm_generation(&disk_n(i), 0, 1, NOW).unwrap();
        }
        ask(&mut l, &Caller::Unbootstrapped, TicketKind::Join, &new, NOW).unwrap();
        assert!(matches!(
            ask(
                &mut l,
                &Caller::Unbootstrapped,
                TicketKind::Join,
                &disk_n(9_999),
                NOW
            ),
            Err(Refusal::LedgerFull {
                what: "generations",
                ..
            })
        ));
        assert_eq!(l.confirm_generation(&new, 0, 1, NOW + 1), Ok(true));
    }

    /// The fraction of `probes` keys never put in that `f` finds.
    fn false_positive_rate(f: &IssuedFilter, probes: u32) -> f64 {
        let seen = (0..probes)
            .filter(|i| f.has_bits(&filter_key(b"probe\0", &i.to_le_bytes())))
            .count();
        seen as f64 / f64::from(probes)
    }

    #[test]
    fn the_filter_refuses_entries_past_its_bound_and_says_its_false_positive_rate() {
        let mut l = Ledger::default();
        for i in 0..FILTER_ALARM_ENTRIES as u32 {
            l.issued.insert(&filter_key(b"test\0", &i.to_le_bytes()));
        }
        let at_alarm = false_positive_rate(&l.issued, 1_000_000);
        for i in FILTER_ALARM_ENTRIES as u32..FILTER_MAX_ENTRIES as u32 - 1 {
            l.issued.insert(&filter_key(b"test\0", &i.to_le_bytes()));
        }
        // A join whose first boot runs: its disk's entry has room kept.
        ask(&mut l, &Caller::Unbootstrapped, TicketKind::Join, DISK, NOW).unwrap();
        let at_bound = false_positive_rate(&l.issued, 1_000_000);
        eprintln!(
            "filter false positives: {at_alarm:.2e} at {FILTER_ALARM_ENTRIES} entries (alarm), \
             {at_bound:.2e} at {} (bound)",
            FILTER_MAX_ENTRIES - 1
        );
        assert!(at_alarm < 2e-6, "{at_alarm} at the alarm");
        assert!(at_bound < 1.5e-4, "{at_bound} at the bound");
        assert!(fill::filter_alarm_at(FILTER_ALARM_ENTRIES));
        assert!(!fill::filter_alarm_at(FILTER_ALARM_ENTRIES - 1));
        // Full: no new launch, no new disk; what is in stays found.
        for caller in [launch(9), Caller::Unbootstrapped] {
            assert!(
                matches!(
                    ask(&mut l, &caller, TicketKind::Join, OTHER, NOW),
                    Err(Refusal::LedgerFull { what: "filter", .. })
                ),
                "{caller:?}"
            );
        }
        assert!(matches!(
            ask(&mut l, &launch(9), TicketKind::Rejoin, OTHER, NOW),
            Err(Refusal::LedgerFull { what: "filter", .. })
        ));
        // A vTPM rejoin adds nothing and is served; it completes the
        // running join, whose entry goes in past nothing.
        ask(
            &mut l,
            &Caller::Unbootstrapped,
            TicketKind::Rejoin,
            DISK,
            NOW + 1,
        )
        .unwrap();
        assert_eq!(l.issued.count(), FILTER_MAX_ENTRIES);
        assert_eq!(
            decide(&l, &[], &Caller::Unbootstrapped, TicketKind::Join, DISK),
            Err(Refusal::DiskJoined { disk: DISK.into() })
        );
        assert!(
            (0..FILTER_MAX_ENTRIES as u32 - 1)
                .all(|i| l.issued.contains(&filter_key(b"test\0", &i.to_le_bytes())))
        );
    }

    #[test]
    fn first_tickets_are_rate_limited_per_source_class_with_an_alarm_first() {
        let mut r = FirstTicketRate::default();
        let vtpm =
            SourceClass::of(Variant::QemuVtpm, &Caller::Unbootstrapped, TicketKind::Join).unwrap();
        let snp = SourceClass::of(Variant::SevSnp, &launch(1), TicketKind::Rejoin).unwrap();
        assert_eq!(snp, SourceClass::Launch);
        // A vTPM rejoin is no first ticket.
        assert_eq!(
            SourceClass::of(
                Variant::QemuVtpm,
                &Caller::Unbootstrapped,
                TicketKind::Rejoin
            ),
            None
        );
        let mut alarm_at = None;
        for i in 0..FIRST_TICKET_BURST {
            r.check(vtpm, 0).unwrap();
            let b = r.take(vtpm, 0);
            if b.alarm() && alarm_at.is_none() {
                alarm_at = Some(i + 1);
            }
        }
        // The alarm is up after half the burst, long before a refusal.
        assert_eq!(alarm_at, Some(FIRST_TICKET_BURST - FIRST_TICKET_ALARM));
        assert_eq!(
            r.check(vtpm, 0),
            Err(RateLimited {
                class: "join/qemu-vtpm".into()
            })
        );
        // Another class has its own bucket.
        r.check(snp, 0).unwrap();
        // One more each refill, never more than the burst.
        let refill = FIRST_TICKET_REFILL.as_secs();
        assert!(r.check(vtpm, refill - 1).is_err());
        r.check(vtpm, refill).unwrap();
        r.take(vtpm, refill);
        assert!(r.check(vtpm, refill).is_err());
        r.check(vtpm, refill * 100_000).unwrap();
        let b = r.take(vtpm, refill * 100_000);
        assert_eq!(b.left, FIRST_TICKET_BURST - 1);
        assert_eq!(b.refused, 3);
        assert_eq!(r.buckets().count(), 2);
    }

    // ---- The anchor ----

    #[test]
    fn a_registry_restored_from_before_a_first_join_is_an_error() {
        let window = JOIN_COMPLETION_WINDOW.as_secs();
        let names = |pairs: &[(&str, &str)]| -> BTreeMap<String, String> {
            pairs
                .iter()
                .map(|(n, d)| (n.to_string(), d.to_string()))
                .collect()
        };
        let mut pending = Ledger::default();
        pending.pending.insert("other".into(), NOW);
        let none: BTreeMap<String, u64> = BTreeMap::new();
        let no_names: BTreeMap<String, String> = BTreeMap::new();
        let mut a = LedgerAnchor::default();
        // The subject's disk joined and its node's record came; then
        // another disk's first join, its name still waiting.
        let old = seen_joins(&Ledger::default(), &names(&[("n1", DISK)]), &none);
        assert_eq!(a.observe_joins(&old, &[], &[], NOW), Ok(true));
        let waiting: BTreeMap<String, u64> = [("n2".to_string(), NOW)].into();
        let running = seen_joins(&pending, &names(&[("n1", DISK), ("n2", "other")]), &waiting);
        assert_eq!(a.observe_joins(&running, &[], &[], NOW), Ok(true));
        let before = a.clone();
        // The registry from before the other's join, put back: refused.
        assert_eq!(
            a.observe_joins(&old, &[], &[], NOW + 1),
            Err(Regressed::JoinWentBack {
                disk: "other".into(),
                how: "dropped"
            })
        );
        assert_eq!(a, before, "nothing taken in from a refused read");
        // Its first boot over (the node's record): then a registry from
        // while it ran, put back, revives it: refused.
        let done = seen_joins(
            &Ledger::default(),
            &names(&[("n1", DISK), ("n2", "other")]),
            &none,
        );
        assert_eq!(a.observe_joins(&done, &[], &[], NOW + 2), Ok(true));
        assert_eq!(
            a.observe_joins(&running, &[], &[], NOW + 3),
            Err(Regressed::JoinWentBack {
                disk: "other".into(),
                how: "revived"
            })
        );
        // A binding whose record came goes only by a removal, not by time.
        assert!(a.observe_joins(&old, &[], &[], NOW + 10 * window).is_err());
        assert_eq!(
            a.observe_joins(&old, &["other".into()], &[], NOW + 3),
            Ok(true)
        );
        assert!(!a.joins.contains_key("other"));

        // A pending join never bound (no VPN) leaves by its window, or
        // earlier when the filter shows its first boot over.
        let mut b = LedgerAnchor::default();
        let alone = seen_joins(&pending, &no_names, &none);
        b.observe_joins(&alone, &[], &[], NOW).unwrap();
        let empty = seen_joins(&Ledger::default(), &no_names, &none);
        assert_eq!(
            b.joins_to_prove(&empty, &[], NOW + 1),
            vec!["other".to_string()]
        );
        assert!(b.clone().observe_joins(&empty, &[], &[], NOW + 1).is_err());
        assert_eq!(
            b.clone()
                .observe_joins(&empty, &[], &["other".into()], NOW + 1),
            Ok(true)
        );
        assert!(b.joins_to_prove(&empty, &[], NOW + window).is_empty());
        assert_eq!(b.observe_joins(&empty, &[], &[], NOW + window), Ok(true));
    }

    #[test]
    fn an_anchor_file_keeps_its_joins_and_an_old_file_still_reads() {
        let old = br#"{"registry":120,"filter":121,"filterCount":42,"generations":{"d":7}}"#;
        let a = LedgerAnchor::from_json(old).unwrap();
        assert!(a.joins.is_empty());
        let mut b = a.clone();
        b.joins.insert(
            "d".into(),
            JoinSeen {
                pending: true,
                bound: false,
                until: Some(NOW),
            },
        );
        b.joins.insert(
            "e".into(),
            JoinSeen {
                pending: false,
                bound: true,
                until: None,
            },
        );
        assert_eq!(LedgerAnchor::from_json(&b.to_json()).unwrap(), b);
        assert!(LedgerAnchor::from_json(br#"{"registry":1,"filter":1,"filterCount":0,"generations":{},"joins":{"d":{"pending":1,"bound":false,"until":null}}}"#).is_err());
        assert!(
            LedgerAnchor::from_json(
                br#"{"registry":1,"filter":1,"filterCount":0,"generations":{},"joins":[]}"#
            )
            .is_err()
        );
    }

    fn with_generation(disk: &str, generation: u64) -> Ledger {
        let mut l = Ledger::default();
        l.generations.insert(
            disk.into(),
            DiskGeneration {
                generation,
                at: NOW,
            },
        );
        l
    }

    #[test]
    fn a_ledger_object_that_existed_and_is_gone_is_an_error_not_an_empty_ledger() {
        let mut a = LedgerAnchor::default();
        // Never seen: a new cluster has no objects yet.
        assert_eq!(a.observe_registry(None, &Ledger::default(), &[]), Ok(false));
        assert_eq!(a.observe_filter(None, &IssuedFilter::default()), Ok(false));
        assert_eq!(
            a.observe_registry(Some("7"), &with_generation(DISK, 3), &[]),
            Ok(true)
        );
        let filter = IssuedFilter::from_parts(vec![1; FILTER_BITS / 8], 10).unwrap();
        assert_eq!(a.observe_filter(Some("8"), &filter), Ok(true));
        let before = a.clone();
        assert_eq!(
            a.observe_registry(None, &Ledger::default(), &[]),
            Err(Regressed::Gone {
                object: REGISTRY_OBJECT
            })
        );
        assert_eq!(
            a.observe_filter(None, &IssuedFilter::default()),
            Err(Regressed::Gone {
                object: FILTER_OBJECT
            })
        );
        assert_eq!(a, before, "nothing taken in from a refused read");
    }

    #[test]
    fn a_ledger_that_moved_backwards_is_an_error() {
        let mut a = LedgerAnchor::default();
        a.observe_registry(Some("20"), &with_generation(DISK, 5), &[])
            .unwrap();
        let filter = IssuedFilter::from_parts(vec![1; FILTER_BITS / 8], 10).unwrap();
        a.observe_filter(Some("21"), &filter).unwrap();
        // An older resourceVersion: an etcd restored from a snapshot.
        assert_eq!(
            a.observe_registry(Some("19"), &with_generation(DISK, 5), &[]),
            Err(Regressed::VersionWentBack {
                object: REGISTRY_OBJECT,
                found: 19,
                seen: 20
            })
        );
        // A newer version with older content: rewritten.
        assert_eq!(
            a.observe_registry(Some("30"), &with_generation(DISK, 4), &[]),
            Err(Regressed::GenerationWentBack {
                disk: DISK.into(),
                found: 4,
                seen: 5
            })
        );
        assert!(matches!(
            a.observe_registry(Some("30"), &Ledger::default(), &[]),
            Err(Regressed::GenerationWentBack { found: 0, .. })
        ));
        let fewer = IssuedFilter::from_parts(vec![1; FILTER_BITS / 8], 9).unwrap();
        assert_eq!(
            a.observe_filter(Some("40"), &fewer),
            Err(Regressed::FilterShrank { found: 9, seen: 10 })
        );
        assert_eq!(
            a.observe_filter(Some("x"), &filter),
            Err(Regressed::OpaqueVersion {
                object: FILTER_OBJECT
            })
        );
        // Forward is fine; a removed disk may leave the ledger.
        a.observe_registry(Some("30"), &with_generation(DISK, 6), &[])
            .unwrap();
        assert_eq!(
            a.observe_registry(Some("31"), &Ledger::default(), &[DISK.to_string()]),
            Ok(true)
        );
        assert!(a.generations.is_empty());
        let refusal = Refusal::Regressed(Regressed::Gone {
            object: REGISTRY_OBJECT,
        });
        assert_eq!(refusal.reason(), "ledger_regressed");
    }

    #[test]
    fn the_anchor_takes_in_what_its_own_writes_left() {
        let mut a = LedgerAnchor::default();
        // Nothing read yet; this joinsvc's first write creates the filter.
        let mut filter = IssuedFilter::default();
        filter.insert(&[7; 32]);
        assert!(a.raise_filter(Some("12"), &filter));
        // Deleted after that write: gone, not empty.
        assert_eq!(
            a.observe_filter(None, &IssuedFilter::default()),
            Err(Regressed::Gone {
                object: FILTER_OBJECT
            })
        );
        // Put back as it was before the write (empty), newer version.
        assert_eq!(
            a.observe_filter(Some("13"), &IssuedFilter::default()),
            Err(Regressed::FilterShrank { found: 0, seen: 1 })
        );
        // Only raises: a later read another thread took in stays.
        assert!(a.raise_registry(Some("30"), &with_generation(DISK, 4)));
        assert!(!a.raise_registry(Some("20"), &with_generation(DISK, 2)));
        assert_eq!(a.registry, Some(30));
        assert_eq!(a.generations.get(DISK), Some(&4));
        assert_eq!(
            a.observe_registry(Some("31"), &with_generation(DISK, 3), &[]),
            Err(Regressed::GenerationWentBack {
                disk: DISK.to_string(),
                found: 3,
                seen: 4
            })
        );
    }

    #[test]
    fn the_anchor_survives_a_restart_in_the_state_dir_and_a_spoilt_file_is_refused() {
        let dir = std::env::temp_dir().join(format!("confboot-anchor-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join(ANCHOR_FILE);
        let store = AnchorStore::load(&path).unwrap();
        store
            .registry(Some("5"), &with_generation(DISK, 2), &[])
            .unwrap();
        store
            .filter(
                Some("6"),
                &IssuedFilter::from_parts(vec![0; FILTER_BITS / 8], 3).unwrap(),
            )
            .unwrap();
        drop(store);
        // A restart: the objects gone, or older, are still refused.
        let store = AnchorStore::load(&path).unwrap();
        assert_eq!(store.anchor().generations.get(DISK), Some(&2));
        assert!(matches!(
            store.registry(None, &Ledger::default(), &[]),
            Err(Refusal::Regressed(Regressed::Gone { .. }))
        ));
        assert!(matches!(
            store.filter(Some("6"), &IssuedFilter::default()),
            Err(Refusal::Regressed(Regressed::FilterShrank { .. }))
        ));
        assert_eq!(
            LedgerAnchor::from_json(&store.anchor().to_json()).unwrap(),
            store.anchor()
        );
        for spoilt in [
            &b"{"[..],
            b"[]",
            br#"{"registry":"5","filterCount":0,"generations":{}}"#,
        ] {
            std::fs::write(&path, spoilt).unwrap();
            assert!(AnchorStore::load(&path).is_err());
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn the_filter_finds_all_it_holds_and_rarely_what_it_does_not() {
        let mut f = IssuedFilter::default();
        for i in 0..25_000u32 {
            f.insert(&filter_key(b"test\0", &i.to_le_bytes()));
        }
        assert_eq!(f.count(), 25_000);
        assert!((0..25_000u32).all(|i| f.contains(&filter_key(b"test\0", &i.to_le_bytes()))));
        let false_seen = (25_000..125_000u32)
            .filter(|i| f.contains(&filter_key(b"test\0", &i.to_le_bytes())))
            .count();
        assert!(false_seen <= 1, "{false_seen} of 100,000 falsely seen");
        assert_eq!(IssuedFilter::from_parts(vec![0; 3], 0), None);
        assert_eq!(
            IssuedFilter::from_parts(f.bits().to_vec(), f.count()),
            Some(f)
        );
    }
}
