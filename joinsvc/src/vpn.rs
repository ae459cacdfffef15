//! The cluster's VPN peer registry: which node has which VPN
//! address and WireGuard key, under a version that every
//! `vpn.API/GetUpdate` answer carries.
//!
//! Where it lives: one ConfigMap, [`PEERS_CONFIGMAP`] in kube-system, in the
//! Kubernetes API (etcd). Every control plane's joinsvc replica reads and
//! writes the same object, so a restarted or replaced control plane loses
//! nothing and replicas never hand out one address twice: each change is a
//! compare-and-swap on the object's `resourceVersion` (the API server
//! answers 409 to a write based on an older read; the change is then made
//! again on a fresh read). A control plane's own state disk would be lost
//! with that node and differ between replicas. The ConfigMap holds public
//! data only (names, endpoints, addresses, public keys).
//!
//! The same object keeps joinsvc's [`Ledger`] (what each SEV-SNP launch
//! and each disk was given: [`crate::ledger`]), with or without a VPN, so
//! a restarted or another replica refuses what this one would; the
//! ledger's filter of served launches and joined disks (128 KiB of bits)
//! has an object of its own, [`ISSUED_FILTER_CONFIGMAP`], read only by
//! the changes that consult it (joins, SEV-SNP launches, a disk's first
//! boot ending): a vTPM node's rejoin and a member's periodic record read
//! the small object alone.
//!
//! What is read back is checked as strictly as what a node receives
//! ([`PeerList::from_update`]): a registry that does not parse, or holds
//! peers outside the range, refuses every change and update (fail closed)
//! rather than serving or extending a list the API server's other writers
//! may have spoilt.
//! The object's stored form, written and read back with its bounds, is
//! [`crate::configmap`] (in joinsvc's library target, where the fuzz
//! targets `registry_configmap` and `registry_ledger` reach it).

use std::collections::BTreeMap;
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use confboot_util::backoff::Backoff;

use confboot_proto::vpn::{GetUpdateResponse, Peer as WirePeer};
use confboot_vpn::{MAX_PEERS, Peer, PeerList, VpnError, VpnNetwork, VpnPublicKey};
use serde_json::json;

use crate::configmap::{
    Corrupt, MAX_CONFIGMAP_BYTES, Stored, StoredFilter, Written, data_json, filter_data_json,
    parse_stored, parse_stored_filter,
};
pub use crate::configmap::{ISSUED_FILTER_CONFIGMAP, MAX_REMOVED_DISKS, PEERS_CONFIGMAP};
use crate::kube_api::{ApiAnswer, KubeApi, KubeApiError, SendMethod};
use crate::ledger::{
    AnchorStore, Caller, IssuedFilter, JOIN_COMPLETION_WINDOW, Ledger, Refusal, TicketKind, decide,
    new_entries, record, seen_joins,
};

/// Compare-and-swap attempts before a change is given up as contended.
const CAS_ATTEMPTS: usize = 16;
/// The first wait after a lost compare-and-swap (with jitter, doubling).
const CAS_BACKOFF_INITIAL: Duration = Duration::from_millis(5);
/// The longest wait after a lost compare-and-swap.
const CAS_BACKOFF_MAX: Duration = Duration::from_millis(500);
/// How long a read of the registry answers `GetUpdate` calls: every node
/// polls, so without it each poll is a read of the API server (1,000 nodes
/// polling every 10 s: 100 reads a second). Another replica's change
/// reaches this replica's answers at most this much later; this replica's
/// own changes at once.
pub const UPDATE_CACHE_TTL: Duration = Duration::from_secs(1);

/// Why the registry could not be read or changed.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum RegistryError {
    /// The API server could not be asked.
    #[error("VPN peer registry: {0}")]
    Api(KubeApiError),
    /// The API server answered with an error status.
    #[error("VPN peer registry: Kubernetes API answered {status}: {reason}")]
    Status {
        /// HTTP status code.
        status: u16,
        /// The API's reason, if it sent one.
        reason: String,
    },
    /// joinsvc's Role does not allow the call (403).
    #[error(
        "VPN peer registry: Kubernetes API answered 403: {message} (joinsvc's Role \
         must allow get/update of configmap {PEERS_CONFIGMAP} and create of configmaps \
         in its --kube-namespace, kube-system by default: deploy/kubernetes/joinsvc.yaml)"
    )]
    Forbidden {
        /// The API server's message.
        message: String,
    },
    /// The stored registry does not parse or is not a valid peer list.
    #[error("VPN peer registry configmap {PEERS_CONFIGMAP} is invalid: {0}")]
    Corrupt(String),
    /// The change itself is refused (a key another node has, no address
    /// left, too many peers).
    #[error("VPN peer refused: {0}")]
    Refused(VpnError),
    /// Every compare-and-swap attempt lost to another writer.
    #[error("VPN peer registry: {CAS_ATTEMPTS} concurrent writers won every attempt")]
    Contended,
    /// A node's own record names a node registered from another state
    /// disk: a name is not taken over through `GetUpdate`.
    #[error(
        "VPN peer {name:?} is registered from another state disk (remove it first: \
         joinsvc --remove-vpn-peer)"
    )]
    NameTaken {
        /// The name.
        name: String,
    },
    /// A node's own record comes from a state disk whose node the admin
    /// removed (`--remove-vpn-peer`): only a join (a reinstalled node)
    /// brings that disk back.
    #[error(
        "VPN peer {name:?}: its state disk's node was removed from the VPN (only a \
         join of a reinstalled node brings it back)"
    )]
    Removed {
        /// The name the record carries.
        name: String,
    },
    /// A request names another name than the one its state disk is
    /// registered under: a disk has one name, and a member refreshes only
    /// its own.
    #[error(
        "VPN peer {name:?}: its state disk is registered as {bound:?}, the only name it refreshes"
    )]
    DiskHasName {
        /// The name the record carries.
        name: String,
        /// The name the disk is registered under.
        bound: String,
    },
    /// The ledger refuses the ticket (a launch served, a disk joined or
    /// removed).
    #[error("{0}")]
    Admission(Refusal),
    /// A ticket that would add to the ledger is refused by its source
    /// class's first-ticket rate.
    #[error("{0}")]
    RateLimited(crate::ledger::RateLimited),
}

/// Asked with the number of entries a ticket would add to the ledger
/// ([`crate::ledger::new_entries`]), inside the admission: refuses it by a
/// first-ticket rate (none: no rate).
pub type FirstTicketGate<'a> = &'a dyn Fn(u64) -> Result<(), crate::ledger::RateLimited>;

impl From<Corrupt> for RegistryError {
    fn from(e: Corrupt) -> RegistryError {
        RegistryError::Corrupt(e.0)
    }
}

impl From<KubeApiError> for RegistryError {
    fn from(e: KubeApiError) -> RegistryError {
        match e {
            KubeApiError::Forbidden { message } => RegistryError::Forbidden { message },
            e => RegistryError::Api(e),
        }
    }
}

/// A joining node's VPN details, checked.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PeerRequest {
    /// The node's name.
    pub name: String,
    /// Where the node's WireGuard listens.
    pub public_endpoint: SocketAddr,
    /// The node's WireGuard public key.
    pub vpn_pub_key: VpnPublicKey,
    /// The node's state disk UUID, which the name is bound to.
    pub disk_uuid: String,
}

/// What one change edits: the peers, the names' disks, the removed disks,
/// the names still waiting for their node, the ledger.
struct Edit<'a> {
    peers: &'a mut Vec<Peer>,
    disks: &'a mut BTreeMap<String, String>,
    removed: &'a mut Vec<String>,
    pending_peers: &'a mut BTreeMap<String, u64>,
    ledger: &'a mut Ledger,
    /// Unix seconds, joinsvc's clock.
    now: u64,
}

/// Seconds since the Unix epoch on joinsvc's clock.
fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// A read of the registry for `GetUpdate`: when, the version, the peers.
type LatestRead = (Instant, u64, Arc<Vec<WirePeer>>);

/// The peer registry in the Kubernetes API.
pub struct KubeApiPeerRegistry {
    api: KubeApi,
    /// The VPN range (`None`: no VPN; the object keeps the ledger only).
    network: Option<VpnNetwork>,
    /// Unix seconds now.
    clock: Box<dyn Fn() -> u64 + Send + Sync>,
    /// One change at a time from this replica: its own writers never race
    /// each other, so compare-and-swap only ever loses to other replicas.
    changing: Mutex<()>,
    /// The last read for `GetUpdate`.
    latest: Mutex<Option<LatestRead>>,
    update_cache_ttl: Duration,
    /// The namespace of the two ConfigMaps (kube-system unless
    /// [`KubeApiPeerRegistry::in_namespace`] says otherwise).
    namespace: String,
    collection_uri: ureq::http::Uri,
    object_uri: ureq::http::Uri,
    filter_uri: ureq::http::Uri,
    /// What this joinsvc saw the ledger's objects hold: a read that went
    /// back is refused ([`crate::ledger::AnchorStore`]).
    anchor: Arc<AnchorStore>,
}

impl KubeApiPeerRegistry {
    /// The registry of the VPN range `network`, through `api`.
    pub fn new(api: KubeApi, network: VpnNetwork) -> Result<KubeApiPeerRegistry, RegistryError> {
        KubeApiPeerRegistry::with_network(api, Some(network))
    }

    /// The registry of a cluster without a VPN: the ledger only.
    pub fn without_vpn(api: KubeApi) -> Result<KubeApiPeerRegistry, RegistryError> {
        KubeApiPeerRegistry::with_network(api, None)
    }

    fn with_network(
        api: KubeApi,
        network: Option<VpnNetwork>,
    ) -> Result<KubeApiPeerRegistry, RegistryError> {
        let mut registry = KubeApiPeerRegistry {
            namespace: String::new(),
            collection_uri: api.uri("/")?,
            object_uri: api.uri("/")?,
            filter_uri: api.uri("/")?,
            api,
            network,
            clock: Box::new(unix_now),
            changing: Mutex::new(()),
            latest: Mutex::new(None),
            update_cache_ttl: UPDATE_CACHE_TTL,
            anchor: Arc::new(AnchorStore::in_memory()),
        };
        registry.set_namespace("kube-system")?;
        Ok(registry)
    }

    /// The same registry kept in `namespace` instead of kube-system
    /// (`--kube-namespace`: tests and tenants sharing one API server keep
    /// apart this way; joinsvc's Role must cover that namespace).
    pub fn in_namespace(mut self, namespace: &str) -> Result<Self, RegistryError> {
        self.set_namespace(namespace)?;
        Ok(self)
    }

    fn set_namespace(&mut self, namespace: &str) -> Result<(), RegistryError> {
        let collection = format!("/api/v1/namespaces/{namespace}/configmaps");
        self.collection_uri = self.api.uri(&collection)?;
        self.object_uri = self.api.uri(&format!("{collection}/{PEERS_CONFIGMAP}"))?;
        self.filter_uri = self
            .api
            .uri(&format!("{collection}/{ISSUED_FILTER_CONFIGMAP}"))?;
        self.namespace = namespace.to_string();
        Ok(())
    }

    /// This registry with `anchor` (kept in `--state-dir`) in place of one
    /// in memory only.
    pub fn with_anchor(mut self, anchor: Arc<AnchorStore>) -> KubeApiPeerRegistry {
        self.anchor = anchor;
        self
    }

    /// Whether this cluster has a VPN (`--vpn-cidr`).
    pub fn has_vpn(&self) -> bool {
        self.network.is_some()
    }

    /// A join for `request`'s disk by an unbootstrapped vTPM node (tests).
    pub fn register(&self, request: &PeerRequest) -> Result<Ipv4Addr, RegistryError> {
        self.admit(
            &Caller::Unbootstrapped,
            TicketKind::Join,
            &request.disk_uuid,
            Some(request),
        )
        .map(|ip| ip.expect("a peer was asked for"))
    }

    /// Admits `caller`'s `kind` ticket for `disk` and records it in the
    /// ledger ([`crate::ledger::decide`], [`crate::ledger::record`]); for a
    /// join with `peer`, registers its VPN peer in the same write, and
    /// returns its address. Nothing is recorded when anything is refused.
    ///
    /// A join's peer: a new name is added and bound to the disk, waiting
    /// for the node's own record (for [`JOIN_COMPLETION_WINDOW`], then it
    /// is dropped and its name and address are free). A name bound to the
    /// same disk gets the new key and endpoint. A name bound to another
    /// disk that is live moves only by the admin (`--remove-vpn-peer`):
    /// the join is refused ([`RegistryError::NameTaken`]) and that disk's
    /// node keeps it. A key that another node has is refused.
    pub fn admit(
        &self,
        caller: &Caller,
        kind: TicketKind,
        disk: &str,
        peer: Option<&PeerRequest>,
    ) -> Result<Option<Ipv4Addr>, RegistryError> {
        self.admit_gated(caller, kind, disk, peer, &|_| Ok(()))
    }

    /// [`KubeApiPeerRegistry::admit`], with `gate` asked, after the ledger
    /// admitted it, how many entries the ticket adds.
    pub fn admit_gated(
        &self,
        caller: &Caller,
        kind: TicketKind,
        disk: &str,
        peer: Option<&PeerRequest>,
        gate: FirstTicketGate<'_>,
    ) -> Result<Option<Ipv4Addr>, RegistryError> {
        let network = match (peer, &self.network) {
            (Some(_), None) => {
                return Err(RegistryError::Refused(VpnError::InvalidName(
                    "no VPN in this cluster".into(),
                )));
            }
            (_, network) => network,
        };
        self.change(|mut e| {
            decide(e.ledger, e.removed, caller, kind, disk).map_err(RegistryError::Admission)?;
            gate(new_entries(e.ledger, caller, kind, disk)).map_err(RegistryError::RateLimited)?;
            let mut changed = false;
            let ip = match (peer, network) {
                (Some(request), Some(network)) => {
                    let (ip, peer_changed) = register_peer(network, &mut e, request)?;
                    changed |= peer_changed;
                    Some(ip)
                }
                _ => None,
            };
            changed |= record(e.ledger, caller, kind, disk, e.now);
            Ok((ip, changed))
        })
    }

    /// Admits `caller`'s rejoin ticket for `disk` and records it, as
    /// [`KubeApiPeerRegistry::admit`] does; the generation the cluster last
    /// confirmed for the disk (0: none), from the same read.
    pub fn admit_rejoin(&self, caller: &Caller, disk: &str) -> Result<u64, RegistryError> {
        self.admit_rejoin_gated(caller, disk, &|_| Ok(()))
    }

    /// [`KubeApiPeerRegistry::admit_rejoin`], with `gate` asked how many
    /// entries the ticket adds ([`KubeApiPeerRegistry::admit_gated`]).
    pub fn admit_rejoin_gated(
        &self,
        caller: &Caller,
        disk: &str,
        gate: FirstTicketGate<'_>,
    ) -> Result<u64, RegistryError> {
        self.change(|e| {
            decide(e.ledger, e.removed, caller, TicketKind::Rejoin, disk)
                .map_err(RegistryError::Admission)?;
            gate(new_entries(e.ledger, caller, TicketKind::Rejoin, disk))
                .map_err(RegistryError::RateLimited)?;
            let changed = record(e.ledger, caller, TicketKind::Rejoin, disk, e.now);
            Ok((e.ledger.generation(disk), changed))
        })
    }

    /// The generation the cluster last confirmed for `disk` (0: none), as
    /// the registry holds it now (tests; a rejoin reads it with its
    /// admission, [`KubeApiPeerRegistry::admit_rejoin`]).
    pub fn last_generation(&self, disk: &str) -> Result<u64, RegistryError> {
        Ok(self.read()?.ledger.generation(disk))
    }

    /// Records a rejoined node's confirmation that it found generation
    /// `found` on `disk` and wrote `written` (0: none)
    /// ([`Ledger::confirm_generation`]): refused when `found` is older
    /// than the generation last confirmed ([`Refusal::RolledBack`]) or the
    /// admin removed the disk ([`Refusal::DiskRemoved`]).
    pub fn confirm_generation(
        &self,
        disk: &str,
        found: u64,
        written: u64,
    ) -> Result<(), RegistryError> {
        self.change(|e| {
            if e.removed.iter().any(|d| d == disk) {
                return Err(RegistryError::Admission(Refusal::DiskRemoved {
                    disk: disk.into(),
                }));
            }
            let changed = e
                .ledger
                .confirm_generation(disk, found, written, e.now)
                .map_err(RegistryError::Admission)?;
            Ok(((), changed))
        })
    }

    /// Registers or refreshes a member node's own record (sent with its
    /// `GetUpdate`, its disk proven by the caller); the record also ends
    /// its disk's first boot in the ledger. A member refreshes only its own
    /// name: a name bound to the same disk gets the record's key and
    /// endpoint; a disk with no name yet (the first control plane, or a
    /// node registered before names were bound) may add one that no disk
    /// holds; a name bound to another disk is refused
    /// ([`RegistryError::NameTaken`]), and so is another name than the
    /// disk's ([`RegistryError::DiskHasName`]), a key that another node
    /// has, and a disk whose node was removed ([`RegistryError::Removed`]).
    pub fn refresh_own(&self, request: &PeerRequest) -> Result<Ipv4Addr, RegistryError> {
        let Some(network) = &self.network else {
            return Err(RegistryError::Refused(VpnError::InvalidName(
                "no VPN in this cluster".into(),
            )));
        };
        self.change(|e| {
            if e.removed.contains(&request.disk_uuid) {
                return Err(RegistryError::Removed {
                    name: request.name.clone(),
                });
            }
            let bound = match e.disks.get(&request.name) {
                Some(disk) if *disk != request.disk_uuid => {
                    return Err(RegistryError::NameTaken {
                        name: request.name.clone(),
                    });
                }
                Some(_) => true,
                None => {
                    if let Some((other, _)) = e.disks.iter().find(|(_, d)| **d == request.disk_uuid)
                    {
                        return Err(RegistryError::DiskHasName {
                            name: request.name.clone(),
                            bound: other.clone(),
                        });
                    }
                    e.disks
                        .insert(request.name.clone(), request.disk_uuid.clone());
                    false
                }
            };
            let waited = e.pending_peers.remove(&request.name).is_some();
            // A disk bound to its name and not pending completed its first
            // boot when it was bound or when its join ended (both put it in
            // the filter): its periodic records need not consult the filter.
            let completed = (!bound || e.ledger.is_pending(&request.disk_uuid))
                && e.ledger.complete(&request.disk_uuid);
            let (ip, changed) = upsert(network, e.peers, request, !bound)?;
            Ok((ip, changed || waited || completed))
        })
    }

    /// Removes the node `name`; whether it was there. Its state disk is
    /// remembered as removed: the node, if it still runs, cannot put
    /// itself back through its own record, and its disk gets no join or
    /// rejoin ticket again (no request takes it off the list).
    pub fn remove(&self, name: &str) -> Result<bool, RegistryError> {
        self.change(|e| {
            let disk = e.disks.remove(name);
            e.pending_peers.remove(name);
            let before = e.peers.len();
            e.peers.retain(|p| p.name != name);
            let removed = e.peers.len() != before;
            if let Some(disk) = disk.filter(|d| !e.removed.contains(d)) {
                e.ledger.complete(&disk);
                e.ledger.generations.remove(&disk);
                e.removed.push(disk);
                if e.removed.len() > MAX_REMOVED_DISKS {
                    e.removed.remove(0);
                }
                return Ok((removed, true));
            }
            Ok((removed, removed))
        })
    }

    /// This registry on `clock` (Unix seconds) instead of the system's.
    pub fn with_clock(mut self, clock: impl Fn() -> u64 + Send + Sync + 'static) -> Self {
        self.clock = Box::new(clock);
        self
    }

    /// How long one read answers `GetUpdate` calls ([`UPDATE_CACHE_TTL`]
    /// unless changed; zero: every call reads).
    pub fn with_update_cache_ttl(mut self, ttl: Duration) -> Self {
        self.update_cache_ttl = ttl;
        self
    }

    /// The answer to `GetUpdate{known}`: the current version, and the full
    /// list only when it differs from `known`. One read of the API answers
    /// the calls of [`UPDATE_CACHE_TTL`].
    pub fn update(&self, known: u64) -> Result<GetUpdateResponse, RegistryError> {
        let (version, peers) = self.latest()?;
        let peers = if version == known {
            Vec::new()
        } else {
            peers.as_ref().clone()
        };
        Ok(GetUpdateResponse {
            resource_version: version,
            peers,
            signature: Vec::new(),
        })
    }

    /// The version and peers of a read younger than the cache's time, or
    /// of a new read.
    fn latest(&self) -> Result<(u64, Arc<Vec<WirePeer>>), RegistryError> {
        let mut latest = self.latest.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((at, version, peers)) = latest.as_ref()
            && at.elapsed() < self.update_cache_ttl
        {
            return Ok((*version, Arc::clone(peers)));
        }
        let stored = self.read()?;
        let peers = Arc::new(stored.peers.to_wire());
        *latest = Some((Instant::now(), stored.version, Arc::clone(&peers)));
        Ok((stored.version, peers))
    }

    /// Applies `edit` to a fresh read until a write based on it succeeds,
    /// waiting with backoff and jitter after each write another replica
    /// made first. `edit` returns its result and whether it changed the
    /// list.
    ///
    /// The ledger's filter ([`ISSUED_FILTER_CONFIGMAP`]) is read only when
    /// `edit` consults it: `edit` runs first with a stand-in
    /// ([`IssuedFilter::unread`]) and, if it asked, again on the same read
    /// with the filter. A changed filter is written before the peers'
    /// object, so that whoever sees a disk's first boot over there finds
    /// the disk in the filter; the filter's compare-and-swap is where a
    /// launch is claimed. A launch this change claimed before its second
    /// write lost stays its own on the next attempt.
    fn change<T>(
        &self,
        mut edit: impl FnMut(Edit<'_>) -> Result<(T, bool), RegistryError>,
    ) -> Result<T, RegistryError> {
        let _one_at_a_time = self.changing.lock().unwrap_or_else(|e| e.into_inner());
        let mut backoff = Backoff::new(CAS_BACKOFF_INITIAL, CAS_BACKOFF_MAX);
        let mut claimed: Vec<[u8; 32]> = Vec::new();
        for attempt in 0..CAS_ATTEMPTS {
            if attempt > 0 {
                std::thread::sleep(backoff.next_delay());
            }
            let stored = self.read()?;
            // A filter left beside the peers by an older joinsvc is moved
            // into its own object by this change, so the filter is read.
            let mut filter = if stored.legacy_filter.bits().is_empty() {
                None
            } else {
                Some(self.read_filter()?)
            };
            let (result, changed, peers, disks, removed, pending_peers, ledger) = loop {
                let now = (self.clock)();
                let mut peers = stored.peers.peers().to_vec();
                let mut disks = stored.disks.clone();
                let mut removed = stored.removed.clone();
                let mut pending_peers = stored.pending_peers.clone();
                let mut ledger = stored.ledger.clone();
                ledger.issued = match &filter {
                    Some(read) => {
                        let mut issued = read.filter.clone().with_claimed(&claimed);
                        issued.absorb(&stored.legacy_filter);
                        issued
                    }
                    None => IssuedFilter::unread(),
                };
                // Joins whose first boot did not complete in time: their disk
                // joined for good, their name and address are free again.
                ledger.expire(now);
                let window = JOIN_COMPLETION_WINDOW.as_secs();
                pending_peers.retain(|name, since| {
                    let live = now.saturating_sub(*since) < window;
                    if !live {
                        peers.retain(|p| p.name != *name);
                        disks.remove(name);
                    }
                    live
                });
                let outcome = edit(Edit {
                    peers: &mut peers,
                    disks: &mut disks,
                    removed: &mut removed,
                    pending_peers: &mut pending_peers,
                    ledger: &mut ledger,
                    now,
                });
                if ledger.issued.consulted() {
                    filter = Some(self.read_filter()?);
                    continue;
                }
                let (result, changed) = outcome?;
                break (
                    result,
                    changed,
                    peers,
                    disks,
                    removed,
                    pending_peers,
                    ledger,
                );
            };
            if !changed {
                return Ok(result);
            }
            let list = PeerList::new(peers).map_err(RegistryError::Refused)?;
            if let Some(read) = &filter
                && (ledger.issued.bits() != read.filter.bits())
            {
                let Some(written) = self.write_filter(read, &ledger.issued)? else {
                    log::debug!("ledger filter changed under this write; reading it again");
                    continue;
                };
                // What this write left is the anchor's from now on: a copy
                // from before it, or the object deleted after it, is a
                // regression at the next read.
                self.anchor
                    .wrote_filter(written.as_deref(), &ledger.issued)
                    .map_err(RegistryError::Admission)?;
                claimed.extend_from_slice(ledger.issued.added());
            }
            let mut disks = disks;
            let mut pending_peers = pending_peers;
            disks.retain(|name, _| list.get(name).is_some());
            pending_peers.retain(|name, _| list.get(name).is_some());
            let written = Written {
                list: &list,
                disks: &disks,
                removed: &removed,
                pending_peers: &pending_peers,
                ledger: &ledger,
            };
            if let Some(version) = self.write(&stored, &written)? {
                let seen = seen_joins(&ledger, &disks, &pending_peers);
                self.anchor
                    .wrote_registry_joins(version.as_deref(), &ledger, &seen)
                    .map_err(RegistryError::Admission)?;
                // This replica's answers show its own change at once.
                *self.latest.lock().unwrap_or_else(|e| e.into_inner()) = None;
                return Ok(result);
            }
            log::debug!("VPN peer registry changed under this write; reading it again");
        }
        Err(RegistryError::Contended)
    }

    /// The ledger's filter as stored (empty when there is no object yet).
    fn read_filter(&self) -> Result<StoredFilter, RegistryError> {
        let answer = self.api.get(&self.filter_uri, MAX_CONFIGMAP_BYTES)?;
        let read = match answer.status {
            200 => parse_stored_filter(&answer.body)?,
            404 => StoredFilter::default(),
            _ => return Err(api_error(&answer)),
        };
        self.anchor
            .filter(read.resource_version.as_deref(), &read.filter)
            .map_err(RegistryError::Admission)?;
        Ok(read)
    }

    /// Writes `filter` over `read`: the written object's `resourceVersion`,
    /// `None` if another writer was first (409).
    fn write_filter(
        &self,
        read: &StoredFilter,
        filter: &IssuedFilter,
    ) -> Result<Option<Option<String>>, RegistryError> {
        self.replace(
            ISSUED_FILTER_CONFIGMAP,
            &self.filter_uri,
            read.resource_version.as_deref(),
            filter_data_json(filter),
        )
    }

    fn read(&self) -> Result<Stored, RegistryError> {
        let answer = self.api.get(&self.object_uri, MAX_CONFIGMAP_BYTES)?;
        let stored = match answer.status {
            200 => parse_stored(&answer.body, self.network.as_ref())?,
            404 => Stored {
                resource_version: None,
                version: 0,
                peers: PeerList::default(),
                disks: BTreeMap::new(),
                removed: Vec::new(),
                pending_peers: BTreeMap::new(),
                ledger: Ledger::default(),
                legacy_filter: IssuedFilter::default(),
            },
            _ => return Err(api_error(&answer)),
        };
        // A 404 after the object was seen, or a read that went back, is an
        // error, never an empty ledger.
        // A first join seen and gone for no reason the registry gives is
        // a regression, unless the filter shows its first boot over.
        let now = (self.clock)();
        let seen = seen_joins(&stored.ledger, &stored.disks, &stored.pending_peers);
        let to_prove = self
            .anchor
            .anchor()
            .joins_to_prove(&seen, &stored.removed, now);
        let proven: Vec<String> = if to_prove.is_empty() {
            Vec::new()
        } else {
            let filter = self.read_filter()?.filter;
            to_prove
                .into_iter()
                .filter(|d| filter.holds_disk(d))
                .collect()
        };
        self.anchor
            .registry_joins(
                stored.resource_version.as_deref(),
                &stored.ledger,
                &stored.removed,
                (&seen, &proven, now),
            )
            .map_err(RegistryError::Admission)?;
        Ok(stored)
    }

    /// Writes `list` as the version after `stored`'s: the written object's
    /// `resourceVersion`, `None` if another writer was first (409).
    fn write(
        &self,
        stored: &Stored,
        written: &Written<'_>,
    ) -> Result<Option<Option<String>>, RegistryError> {
        // The version is the peer list's: a change of the ledger alone
        // does not make every node fetch the list again.
        let peers_changed = stored.peers != *written.list || stored.disks != *written.disks;
        let version = stored.version + u64::from(peers_changed);
        self.replace(
            PEERS_CONFIGMAP,
            &self.object_uri,
            stored.resource_version.as_deref(),
            data_json(version, written),
        )
    }

    /// Writes the ConfigMap `name` (at `uri`) with `data`: replaced with
    /// compare-and-swap on `resource_version` as read, or created when
    /// there was none. The written object's `resourceVersion` (inner
    /// `None` when the answer names none); `None` if another writer was
    /// first (409).
    fn replace(
        &self,
        name: &str,
        uri: &ureq::http::Uri,
        resource_version: Option<&str>,
        data: serde_json::Value,
    ) -> Result<Option<Option<String>>, RegistryError> {
        let mut metadata = json!({"name": name, "namespace": self.namespace});
        if let Some(rv) = resource_version {
            metadata["resourceVersion"] = json!(rv);
        }
        let body = json!({
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": metadata,
            "data": data,
        })
        .to_string();
        let (method, uri) = match resource_version {
            None => (SendMethod::Post, &self.collection_uri),
            Some(_) => (SendMethod::Put, uri),
        };
        let answer = self
            .api
            .send_json(method, uri, body.as_bytes(), MAX_CONFIGMAP_BYTES)?;
        match answer.status {
            200 | 201 => Ok(Some(written_version(answer.body.as_bytes()))),
            409 => Ok(None),
            _ => Err(api_error(&answer)),
        }
    }
}

/// The `metadata.resourceVersion` of the object a write answered with.
fn written_version(body: &[u8]) -> Option<String> {
    let object: serde_json::Value = serde_json::from_slice(body).ok()?;
    object["metadata"]["resourceVersion"]
        .as_str()
        .map(str::to_string)
}

/// A join's peer: added and bound, or its key and endpoint updated when
/// its name is bound to the same disk. Refused when the name is bound to
/// another disk ([`RegistryError::NameTaken`]: only the admin moves it)
/// or the disk to another name ([`RegistryError::DiskHasName`]: a disk has
/// one name). Its address and whether anything changed.
fn register_peer(
    network: &VpnNetwork,
    e: &mut Edit<'_>,
    request: &PeerRequest,
) -> Result<(Ipv4Addr, bool), RegistryError> {
    let mut changed = false;
    match e.disks.get(&request.name) {
        Some(disk) if *disk == request.disk_uuid => {}
        Some(_) => {
            return Err(RegistryError::NameTaken {
                name: request.name.clone(),
            });
        }
        None => {
            // A name registered before names were bound, with no disk:
            // moved only by the admin as well.
            if e.peers.iter().any(|p| p.name == request.name) {
                return Err(RegistryError::NameTaken {
                    name: request.name.clone(),
                });
            }
            if let Some((bound, _)) = e.disks.iter().find(|(_, d)| **d == request.disk_uuid) {
                return Err(RegistryError::DiskHasName {
                    name: request.name.clone(),
                    bound: bound.clone(),
                });
            }
            e.disks
                .insert(request.name.clone(), request.disk_uuid.clone());
            e.pending_peers.insert(request.name.clone(), e.now);
            changed = true;
        }
    }
    let (ip, peer_changed) = upsert(network, e.peers, request, changed)?;
    Ok((ip, peer_changed))
}

/// Adds `request`'s node or updates its key and endpoint; its address and
/// whether anything changed (`disk_changed`: its disk binding did).
fn upsert(
    network: &VpnNetwork,
    peers: &mut Vec<Peer>,
    request: &PeerRequest,
    disk_changed: bool,
) -> Result<(Ipv4Addr, bool), RegistryError> {
    if peers
        .iter()
        .any(|p| p.vpn_pub_key == request.vpn_pub_key && p.name != request.name)
    {
        return Err(RegistryError::Refused(VpnError::Duplicate {
            what: "key",
            value: request.vpn_pub_key.to_string(),
        }));
    }
    if let Some(p) = peers.iter_mut().find(|p| p.name == request.name) {
        if p.public_endpoint == request.public_endpoint && p.vpn_pub_key == request.vpn_pub_key {
            return Ok((p.vpn_ip, disk_changed));
        }
        p.public_endpoint = request.public_endpoint;
        p.vpn_pub_key = request.vpn_pub_key;
        return Ok((p.vpn_ip, true));
    }
    if peers.len() >= MAX_PEERS {
        return Err(RegistryError::Refused(VpnError::TooManyPeers(
            peers.len() + 1,
        )));
    }
    let used = peers.iter().map(|p| p.vpn_ip).collect();
    let vpn_ip = network.allot(&used).map_err(RegistryError::Refused)?;
    peers.push(Peer {
        name: request.name.clone(),
        public_endpoint: request.public_endpoint,
        vpn_ip,
        vpn_pub_key: request.vpn_pub_key,
    });
    Ok((vpn_ip, true))
}

/// An error status other than 401 and 403 (which the client returns as
/// its own errors, [`KubeApiError::Unauthorized`] and
/// [`KubeApiError::Forbidden`]).
fn api_error(answer: &ApiAnswer) -> RegistryError {
    RegistryError::Status {
        status: answer.status,
        reason: answer.status_field("reason"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_registry_error_prints_its_message() {
        let cases = [
            (
                RegistryError::Api(KubeApiError::Unreachable("refused".into())),
                "VPN peer registry: Kubernetes API unreachable: refused",
            ),
            (
                RegistryError::Status {
                    status: 409,
                    reason: "Conflict".into(),
                },
                "VPN peer registry: Kubernetes API answered 409: Conflict",
            ),
            (
                RegistryError::Forbidden {
                    message: "no update".into(),
                },
                "VPN peer registry: Kubernetes API answered 403: no update (joinsvc's Role must \
                 allow get/update of configmap confboot-vpn-peers and create of configmaps in \
                 its --kube-namespace, kube-system by default: deploy/kubernetes/joinsvc.yaml)",
            ),
            (
                RegistryError::Corrupt("not JSON".into()),
                "VPN peer registry configmap confboot-vpn-peers is invalid: not JSON",
            ),
            (
                RegistryError::Refused(VpnError::InvalidName("A".into())),
                "VPN peer refused: peer name \"A\" is not a node name",
            ),
            (
                RegistryError::Contended,
                "VPN peer registry: 16 concurrent writers won every attempt",
            ),
            (
                RegistryError::NameTaken {
                    name: "worker-1".into(),
                },
                "VPN peer \"worker-1\" is registered from another state disk (remove it first: \
                 joinsvc --remove-vpn-peer)",
            ),
            (
                RegistryError::Removed {
                    name: "worker-1".into(),
                },
                "VPN peer \"worker-1\": its state disk's node was removed from the VPN (only a \
                 join of a reinstalled node brings it back)",
            ),
        ];
        for (error, message) in cases {
            assert_eq!(error.to_string(), message, "{error:?}");
        }
    }
}
