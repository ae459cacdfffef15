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
//!   [`MAX_DISK_GENERATIONS`] disks are kept: when full, the disk confirmed
//!   longest ago is forgotten (its next rejoin takes any generation, as a
//!   disk's first rejoin does). A removed disk's entry goes with it.
//!
//! How the memory stays bounded without being forgotten: launches that
//! were served, and disks whose first boot is over, go into a Bloom filter
//! of fixed size ([`FILTER_BITS`] bits, [`FILTER_HASHES`] hashes). A filter
//! never forgets (no false "not seen"), so nothing has to be evicted and an
//! old launch never regains the right to ask. Its price is a false "seen"
//! that grows with the number of entries: a new launch or a new disk
//! refused by chance, below one in a million up to 25,000 entries and one
//! in ten thousand at 50,000. A refused launch reboots (a new launch has a
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
/// The most disks whose generation is kept.
pub const MAX_DISK_GENERATIONS: usize = 4096;

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
    /// [`MAX_DISK_GENERATIONS`] disks are kept, the one confirmed longest
    /// ago is forgotten. Whether the ledger changed.
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
            let oldest = self
                .generations
                .iter()
                .min_by_key(|(_, g)| g.at)
                .map(|(d, _)| d.clone());
            if let Some(oldest) = oldest {
                self.generations.remove(&oldest);
            }
        }
        self.generations.insert(
            disk.to_string(),
            DiskGeneration {
                generation: written,
                at: now,
            },
        );
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
    match kind {
        TicketKind::Join if ledger.is_pending(disk) => Ok(()),
        TicketKind::Join if ledger.issued.contains(&disk_key(disk)) => {
            Err(Refusal::DiskJoined { disk: disk.into() })
        }
        TicketKind::Join | TicketKind::Rejoin => Ok(()),
    }
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

    #[test]
    fn the_generations_kept_are_bounded_and_the_longest_silent_disk_goes_first() {
        let mut l = Ledger::default();
        let disk = |i: usize| format!("00000000-0000-4000-8000-{i:012x}");
        for i in 0..MAX_DISK_GENERATIONS {
            l.confirm_generation(&disk(i), 0, 5, NOW + i as u64)
                .unwrap();
        }
        // Disk 0 confirms again: disk 1 is now the longest silent.
        l.confirm_generation(&disk(0), 5, 6, NOW + 10_000).unwrap();
        l.confirm_generation(&disk(MAX_DISK_GENERATIONS), 0, 1, NOW + 10_001)
            .unwrap();
        assert_eq!(l.generations.len(), MAX_DISK_GENERATIONS);
        assert_eq!(l.generation(&disk(1)), 0);
        assert_eq!(l.generation(&disk(0)), 6);
        assert_eq!(l.generation(&disk(2)), 5);
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
