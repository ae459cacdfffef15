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
    record,
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
         in kube-system: deploy/kubernetes/joinsvc.yaml)"
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
}

impl From<Corrupt> for RegistryError {
    fn from(e: Corrupt) -> RegistryError {
        RegistryError::Corrupt(e.0)
    }
}

impl From<KubeApiError> for RegistryError {
    fn from(e: KubeApiError) -> RegistryError {
        RegistryError::Api(e)
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
        let collection = "/api/v1/namespaces/kube-system/configmaps";
        Ok(KubeApiPeerRegistry {
            collection_uri: api.uri(collection)?,
            object_uri: api.uri(&format!("{collection}/{PEERS_CONFIGMAP}"))?,
            filter_uri: api.uri(&format!("{collection}/{ISSUED_FILTER_CONFIGMAP}"))?,
            api,
            network,
            clock: Box::new(unix_now),
            changing: Mutex::new(()),
            latest: Mutex::new(None),
            update_cache_ttl: UPDATE_CACHE_TTL,
            anchor: Arc::new(AnchorStore::in_memory()),
        })
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
    #[cfg(test)]
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
        self.change(|e| {
            decide(e.ledger, e.removed, caller, TicketKind::Rejoin, disk)
                .map_err(RegistryError::Admission)?;
            let changed = record(e.ledger, caller, TicketKind::Rejoin, disk, e.now);
            Ok((e.ledger.generation(disk), changed))
        })
    }

    /// The generation the cluster last confirmed for `disk` (0: none), as
    /// the registry holds it now (tests; a rejoin reads it with its
    /// admission, [`KubeApiPeerRegistry::admit_rejoin`]).
    #[cfg(test)]
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
    #[cfg(test)]
    pub fn with_clock(mut self, clock: impl Fn() -> u64 + Send + Sync + 'static) -> Self {
        self.clock = Box::new(clock);
        self
    }

    /// How long one read answers `GetUpdate` calls ([`UPDATE_CACHE_TTL`]
    /// unless changed; zero: every call reads).
    #[cfg(test)]
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
                if !self.write_filter(read, &ledger.issued)? {
                    log::debug!("ledger filter changed under this write; reading it again");
                    continue;
                }
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
            if self.write(&stored, &written)? {
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

    /// Writes `filter` over `read`; `false` if another writer was first
    /// (409).
    fn write_filter(
        &self,
        read: &StoredFilter,
        filter: &IssuedFilter,
    ) -> Result<bool, RegistryError> {
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
        self.anchor
            .registry(
                stored.resource_version.as_deref(),
                &stored.ledger,
                &stored.removed,
            )
            .map_err(RegistryError::Admission)?;
        Ok(stored)
    }

    /// Writes `list` as the version after `stored`'s; `false` if another
    /// writer was first (409).
    fn write(&self, stored: &Stored, written: &Written<'_>) -> Result<bool, RegistryError> {
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
    /// there was none. `false` if another writer was first (409).
    fn replace(
        &self,
        name: &str,
        uri: &ureq::http::Uri,
        resource_version: Option<&str>,
        data: serde_json::Value,
    ) -> Result<bool, RegistryError> {
        let mut metadata = json!({"name": name, "namespace": "kube-system"});
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
            200 | 201 => Ok(true),
            409 => Ok(false),
            _ => Err(api_error(&answer)),
        }
    }
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

fn api_error(answer: &ApiAnswer) -> RegistryError {
    if answer.status == 403 {
        RegistryError::Forbidden {
            message: answer.status_field("message"),
        }
    } else {
        RegistryError::Status {
            status: answer.status,
            reason: answer.status_field("reason"),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

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
                 kube-system: deploy/kubernetes/joinsvc.yaml)",
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

    use confboot_tests::kube_double::{KubeApiDouble, PolicyRule};
    use zeroize::Zeroizing;

    use crate::ledger::{Caller, Refusal, TicketKind};

    use super::*;

    const SA_TOKEN: &str = "service-account-token";

    fn registry(double: &KubeApiDouble, network: &str) -> KubeApiPeerRegistry {
        let api = KubeApi::new(
            &double.url(),
            &double.ca_pem(),
            Zeroizing::new(SA_TOKEN.into()),
            Duration::from_secs(10),
            1,
        )
        .unwrap();
        KubeApiPeerRegistry::new(api, network.parse().unwrap()).unwrap()
    }

    fn request(i: u32) -> PeerRequest {
        let mut key = [7u8; 32];
        key[..4].copy_from_slice(&(i + 1).to_le_bytes());
        PeerRequest {
            name: format!("node-{i}"),
            public_endpoint: format!("192.0.2.{}:51820", i % 250 + 1).parse().unwrap(),
            vpn_pub_key: VpnPublicKey::from_bytes(&key).unwrap(),
            disk_uuid: format!("00000000-0000-4000-8000-{:012x}", i),
        }
    }

    fn ip(last: u8) -> Ipv4Addr {
        Ipv4Addr::new(10, 118, 0, last)
    }

    #[test]
    fn nodes_get_distinct_addresses_that_a_restarted_control_plane_still_has() {
        let double = KubeApiDouble::start(SA_TOKEN);
        let r = registry(&double, "10.118.0.0/24");
        assert_eq!(r.update(0).unwrap().resource_version, 0);
        for i in 0..3 {
            assert_eq!(r.register(&request(i)).unwrap(), ip(i as u8 + 1));
        }
        // Registering again changes nothing.
        assert_eq!(r.register(&request(1)).unwrap(), ip(2));
        let update = r.update(0).unwrap();
        assert_eq!(update.resource_version, 3);
        assert_eq!(update.peers.len(), 3);
        // The list only when the version differs.
        assert!(r.update(3).unwrap().peers.is_empty());
        // Another replica, or this one restarted, reads the same registry.
        let again = registry(&double, "10.118.0.0/24");
        assert_eq!(again.update(0).unwrap(), update);
        assert_eq!(again.register(&request(3)).unwrap(), ip(4));
        let stored = double.configmap(PEERS_CONFIGMAP).unwrap();
        assert_eq!(stored["data"]["version"], "4");
        assert!(
            stored["data"]["peers.json"]
                .as_str()
                .unwrap()
                .contains("\"vpnIP\":\"10.118.0.4\"")
        );
    }

    #[test]
    fn a_reinstalled_node_keeps_its_address_and_a_stolen_key_is_refused() {
        let double = KubeApiDouble::start(SA_TOKEN);
        let r = registry(&double, "10.118.0.0/24");
        r.register(&request(0)).unwrap();
        r.register(&request(1)).unwrap();
        let mut reinstalled = request(0);
        reinstalled.vpn_pub_key = request(9).vpn_pub_key;
        reinstalled.public_endpoint = "192.0.2.99:51820".parse().unwrap();
        assert_eq!(r.register(&reinstalled).unwrap(), ip(1));
        let peers = r.update(0).unwrap().peers;
        assert_eq!(peers[0].public_endpoint, "192.0.2.99:51820");
        assert_eq!(r.update(0).unwrap().resource_version, 3);
        // node-1's key under another name.
        let mut thief = request(5);
        thief.vpn_pub_key = request(1).vpn_pub_key;
        assert!(matches!(
            r.register(&thief),
            Err(RegistryError::Refused(VpnError::Duplicate {
                what: "key",
                ..
            }))
        ));
        assert_eq!(r.update(0).unwrap().resource_version, 3);
    }

    #[test]
    fn a_name_is_bound_to_its_disk_which_only_a_removal_by_the_admin_changes() {
        let double = KubeApiDouble::start(SA_TOKEN);
        let r = registry(&double, "10.118.0.0/24");
        // Registered by its own record (a first control plane).
        assert_eq!(r.refresh_own(&request(0)).unwrap(), ip(1));
        let stored = double.configmap(PEERS_CONFIGMAP).unwrap();
        assert!(
            stored["data"]["peers.json"]
                .as_str()
                .unwrap()
                .contains(&request(0).disk_uuid)
        );
        // Its own disk moves it; another disk may not.
        let mut moved = request(0);
        moved.public_endpoint = "192.0.2.77:51820".parse().unwrap();
        assert_eq!(r.refresh_own(&moved).unwrap(), ip(1));
        let mut thief = request(0);
        thief.disk_uuid = request(1).disk_uuid;
        thief.vpn_pub_key = request(1).vpn_pub_key;
        assert_eq!(
            r.refresh_own(&thief),
            Err(RegistryError::NameTaken {
                name: "node-0".into()
            })
        );
        assert_eq!(r.update(0).unwrap().resource_version, 2);
        // A join from another disk with the same (DHCP) name is refused,
        // and the node holding the name keeps it and its own record.
        assert_eq!(
            r.register(&thief),
            Err(RegistryError::NameTaken {
                name: "node-0".into()
            })
        );
        assert_eq!(r.refresh_own(&moved).unwrap(), ip(1));
        assert_eq!(r.update(0).unwrap().resource_version, 2);
        // Only the admin's removal frees the name, for another disk.
        assert!(r.remove("node-0").unwrap());
        assert_eq!(r.register(&thief).unwrap(), ip(1));
        assert!(matches!(
            r.refresh_own(&moved),
            Err(RegistryError::Removed { .. })
        ));
    }

    #[test]
    fn a_removed_node_leaves_the_list_and_its_address_is_reused() {
        let double = KubeApiDouble::start(SA_TOKEN);
        let r = registry(&double, "10.118.0.0/24");
        for i in 0..3 {
            r.register(&request(i)).unwrap();
        }
        assert!(r.remove("node-1").unwrap());
        assert!(!r.remove("node-1").unwrap());
        let update = r.update(3).unwrap();
        assert_eq!(update.resource_version, 4);
        let names: Vec<&str> = update.peers.iter().map(|p| p.name.as_str()).collect();
        assert_eq!(names, ["node-0", "node-2"]);
        assert_eq!(r.register(&request(7)).unwrap(), ip(2));
    }

    #[test]
    fn a_removed_node_cannot_put_itself_back_by_its_record_or_a_join() {
        let double = KubeApiDouble::start(SA_TOKEN);
        let r = registry(&double, "10.118.0.0/24");
        for i in 0..2 {
            r.refresh_own(&request(i)).unwrap();
        }
        assert!(r.remove("node-1").unwrap());
        // Its agent's next poll carries its own record: refused, and the
        // list stays without it (here and for a restarted replica).
        assert_eq!(
            r.refresh_own(&request(1)),
            Err(RegistryError::Removed {
                name: "node-1".into()
            })
        );
        // Under another name too: the disk is what was removed.
        let mut renamed = request(1);
        renamed.name = "node-1b".into();
        assert!(matches!(
            r.refresh_own(&renamed),
            Err(RegistryError::Removed { .. })
        ));
        let restarted = registry(&double, "10.118.0.0/24");
        let names: Vec<String> = restarted
            .update(0)
            .unwrap()
            .peers
            .into_iter()
            .map(|p| p.name)
            .collect();
        assert_eq!(names, ["node-0"]);
        // Other nodes are not affected.
        r.refresh_own(&request(0)).unwrap();
        // A join for its disk (a header whose "bootstrapped" token was
        // deleted) does not bring it back: refused, and still removed.
        assert_eq!(
            r.register(&request(1)),
            Err(RegistryError::Admission(Refusal::DiskRemoved {
                disk: request(1).disk_uuid
            }))
        );
        assert!(matches!(
            r.refresh_own(&request(1)),
            Err(RegistryError::Removed { .. })
        ));
        // A reinstalled node (a blank disk, a new UUID) joins under the name.
        let mut reinstalled = request(2);
        reinstalled.name = "node-1".into();
        r.register(&reinstalled).unwrap();
        r.refresh_own(&reinstalled).unwrap();
        assert_eq!(r.update(0).unwrap().peers.len(), 2);
    }

    /// A registry on `double` whose clock the returned handle sets.
    fn registry_on_a_clock(
        double: &KubeApiDouble,
    ) -> (KubeApiPeerRegistry, Arc<std::sync::atomic::AtomicU64>) {
        use std::sync::atomic::{AtomicU64, Ordering};
        let now = Arc::new(AtomicU64::new(1_700_000_000));
        let clock = Arc::clone(&now);
        let r = registry(double, "10.118.0.0/24").with_clock(move || clock.load(Ordering::SeqCst));
        (r, now)
    }

    #[test]
    fn a_join_whose_node_never_sends_its_record_expires_and_frees_its_name_and_address() {
        use std::sync::atomic::Ordering;
        let double = KubeApiDouble::start(SA_TOKEN);
        let (r, now) = registry_on_a_clock(&double);
        assert_eq!(r.register(&request(0)).unwrap(), ip(1));
        assert_eq!(r.register(&request(1)).unwrap(), ip(2));
        // node-1 completes its first boot: its own record arrives.
        r.refresh_own(&request(1)).unwrap();
        // Within the window node-0's name is held for its disk.
        let mut squatter = request(5);
        squatter.name = "node-0".into();
        assert!(matches!(
            r.register(&squatter),
            Err(RegistryError::NameTaken { .. })
        ));
        now.fetch_add(JOIN_COMPLETION_WINDOW.as_secs(), Ordering::SeqCst);
        // After it, node-0's registration is gone: its name and address
        // are another node's; node-1's stays.
        assert_eq!(r.register(&squatter).unwrap(), ip(1));
        let names: Vec<String> = r
            .update(0)
            .unwrap()
            .peers
            .into_iter()
            .map(|p| p.name)
            .collect();
        assert_eq!(names, ["node-0", "node-1"]);
        assert_eq!(r.refresh_own(&request(1)).unwrap(), ip(2));
        // And node-0's disk joined for good: it rejoins, never joins.
        assert_eq!(
            r.register(&request(0)),
            Err(RegistryError::Admission(Refusal::DiskJoined {
                disk: request(0).disk_uuid
            }))
        );
    }

    #[test]
    fn a_members_own_record_refreshes_only_its_own_name() {
        let double = KubeApiDouble::start(SA_TOKEN);
        let r = registry(&double, "10.118.0.0/24");
        r.register(&request(0)).unwrap();
        r.refresh_own(&request(0)).unwrap();
        // The same disk under another, unbound name: refused.
        let mut second_name = request(0);
        second_name.name = "node-0b".into();
        second_name.vpn_pub_key = request(9).vpn_pub_key;
        assert_eq!(
            r.refresh_own(&second_name),
            Err(RegistryError::DiskHasName {
                name: "node-0b".into(),
                bound: "node-0".into()
            })
        );
        assert_eq!(r.update(0).unwrap().peers.len(), 1);
    }

    #[test]
    fn a_disk_whose_first_boot_completed_gets_no_second_join() {
        let double = KubeApiDouble::start(SA_TOKEN);
        let r = registry(&double, "10.118.0.0/24");
        // An interrupted first boot finishes with the same UUID.
        r.register(&request(0)).unwrap();
        r.register(&request(0)).unwrap();
        // The node's own record shows its first boot complete; a join for
        // its disk (its header's "bootstrapped" token deleted) is refused,
        // here and at a restarted replica; a rejoin is served.
        r.refresh_own(&request(0)).unwrap();
        let refused = Err(RegistryError::Admission(Refusal::DiskJoined {
            disk: request(0).disk_uuid,
        }));
        assert_eq!(r.register(&request(0)), refused);
        let restarted = registry(&double, "10.118.0.0/24");
        assert_eq!(restarted.register(&request(0)), refused);
        restarted
            .admit(
                &Caller::Unbootstrapped,
                TicketKind::Rejoin,
                &request(0).disk_uuid,
                None,
            )
            .unwrap();
    }

    #[test]
    fn an_snp_launch_is_served_once_by_every_replica_and_after_a_restart() {
        use crate::ledger::LaunchId;
        let double = KubeApiDouble::start(SA_TOKEN);
        let r = registry(&double, "10.118.0.0/24");
        let launch = Caller::Launch(LaunchId::from_bytes([4; 32]));
        let disk = |i| request(i).disk_uuid;
        r.admit(&launch, TicketKind::Rejoin, &disk(0), None)
            .unwrap();
        let other = registry(&double, "10.118.0.0/24");
        for (kind, d) in [
            (TicketKind::Rejoin, disk(1)),
            (TicketKind::Rejoin, disk(0)),
            (TicketKind::Join, disk(2)),
        ] {
            assert_eq!(
                other.admit(&launch, kind, &d, None),
                Err(RegistryError::Admission(Refusal::LaunchServed))
            );
        }
        // A refused launch leaves nothing behind: disk 2 may join.
        other
            .admit(&Caller::Unbootstrapped, TicketKind::Join, &disk(2), None)
            .unwrap();
        // Another launch (the node rebooted) is served.
        let next = Caller::Launch(LaunchId::from_bytes([5; 32]));
        r.admit(&next, TicketKind::Rejoin, &disk(0), None).unwrap();
    }

    #[test]
    fn a_disks_generation_is_kept_for_every_replica_and_a_removal_ends_it() {
        let double = KubeApiDouble::start(SA_TOKEN);
        let r = registry(&double, "10.118.0.0/24");
        let disk = request(0).disk_uuid;
        assert_eq!(r.last_generation(&disk).unwrap(), 0);
        r.confirm_generation(&disk, 0, 1).unwrap();
        r.confirm_generation(&disk, 1, 2).unwrap();
        // Another replica (or this one restarted) has it, and refuses the
        // disk copied after the first rejoin.
        let other = registry(&double, "10.118.0.0/24");
        assert_eq!(other.last_generation(&disk).unwrap(), 2);
        assert_eq!(
            other.confirm_generation(&disk, 1, 2),
            Err(RegistryError::Admission(Refusal::RolledBack(
                confboot_cluster::generation::RolledBack { found: 1, last: 2 }
            )))
        );
        assert_eq!(r.last_generation(&disk).unwrap(), 2);
        // A removed node's disk confirms nothing, and its entry is gone.
        r.register(&request(0)).unwrap();
        assert!(r.remove("node-0").unwrap());
        assert_eq!(r.last_generation(&disk).unwrap(), 0);
        assert!(matches!(
            r.confirm_generation(&disk, 2, 3),
            Err(RegistryError::Admission(Refusal::DiskRemoved { .. }))
        ));
        // What is read back is checked: a spoilt entry refuses every change.
        let network: VpnNetwork = "10.118.0.0/24".parse().unwrap();
        for bad in [
            r#"{"not-a-uuid": [1, 2]}"#,
            r#"{"2f3c6c1e-2b5d-4e8a-9c7f-1a2b3c4d5e6f": [1]}"#,
            r#"{"2f3c6c1e-2b5d-4e8a-9c7f-1a2b3c4d5e6f": [-1, 2]}"#,
            r#"[]"#,
        ] {
            let body = serde_json::json!({
                "metadata": {"resourceVersion": "1"},
                "data": {"version": "1", "peers.json": "[]", "generations.json": bad},
            });
            assert!(
                matches!(
                    parse_stored(&body.to_string(), Some(&network)).map_err(RegistryError::from),
                    Err(RegistryError::Corrupt(_))
                ),
                "{bad}"
            );
        }
    }

    #[test]
    fn the_remembered_removals_are_bounded_and_checked_when_read() {
        let double = KubeApiDouble::start(SA_TOKEN);
        let r = registry(&double, "10.118.0.0/16");
        for i in 0..3 {
            r.register(&request(i)).unwrap();
            assert!(r.remove(&format!("node-{i}")).unwrap());
        }
        let stored = r.read().unwrap();
        assert_eq!(stored.removed.len(), 3);
        assert_eq!(stored.removed[0], request(0).disk_uuid);
        let mut body = serde_json::json!({
            "metadata": {"resourceVersion": "1"},
            "data": {"version": "1", "peers.json": "[]", "removed.json": "[\"not-a-uuid\"]"},
        });
        let network: VpnNetwork = "10.118.0.0/16".parse().unwrap();
        assert!(matches!(
            parse_stored(&body.to_string(), Some(&network)).map_err(RegistryError::from),
            Err(RegistryError::Corrupt(_))
        ));
        let too_many: Vec<String> = (0..=MAX_REMOVED_DISKS as u32)
            .map(|i| request(i).disk_uuid)
            .collect();
        body["data"]["removed.json"] = serde_json::json!(serde_json::json!(too_many).to_string());
        assert!(matches!(
            parse_stored(&body.to_string(), Some(&network)).map_err(RegistryError::from),
            Err(RegistryError::Corrupt(_))
        ));
    }

    #[test]
    fn concurrent_replicas_never_give_one_address_twice() {
        let double = KubeApiDouble::start(SA_TOKEN);
        let replicas: Vec<Arc<KubeApiPeerRegistry>> = (0..3)
            .map(|_| Arc::new(registry(&double, "10.118.0.0/16")))
            .collect();
        let nodes = 36;
        let ips: Vec<Ipv4Addr> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..nodes)
                .map(|i| {
                    let r = Arc::clone(&replicas[i as usize % 3]);
                    s.spawn(move || r.register(&request(i)).unwrap())
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        let distinct: std::collections::BTreeSet<_> = ips.iter().collect();
        assert_eq!(distinct.len(), nodes as usize, "{ips:?}");
        let update = replicas[0].update(0).unwrap();
        assert_eq!(update.peers.len(), nodes as usize);
        assert_eq!(update.resource_version, u64::from(nodes));
    }

    #[test]
    fn the_filter_is_read_only_by_the_changes_that_consult_it() {
        use crate::configmap::ISSUED_FILTER_CONFIGMAP;
        use crate::ledger::LaunchId;
        let double = KubeApiDouble::start(SA_TOKEN);
        let r = registry(&double, "10.118.0.0/24");
        let filter_requests = || double.configmap_requests(ISSUED_FILTER_CONFIGMAP);
        // A join (its disk's filter entry consulted), then the node's first
        // record ends its first boot: the disk goes into the filter.
        r.register(&request(0)).unwrap();
        r.refresh_own(&request(0)).unwrap();
        let stored = double.configmap(ISSUED_FILTER_CONFIGMAP).unwrap();
        assert!(stored["data"]["issued-filter"].as_str().unwrap().len() > 100_000);
        assert!(
            double.configmap(PEERS_CONFIGMAP).unwrap()["data"]
                .get("issued-filter")
                .is_none()
        );
        // The node's later records, a vTPM node's rejoins and their
        // generations consult nothing the filter holds: it is not read.
        let before = filter_requests();
        for _ in 0..3 {
            r.refresh_own(&request(0)).unwrap();
            r.admit_rejoin(&Caller::Unbootstrapped, &request(0).disk_uuid)
                .unwrap();
            r.confirm_generation(&request(0).disk_uuid, 0, 1).ok();
        }
        assert_eq!(filter_requests(), before);
        // A join and an SEV-SNP launch consult it.
        assert_eq!(
            r.register(&request(0)),
            Err(RegistryError::Admission(Refusal::DiskJoined {
                disk: request(0).disk_uuid
            }))
        );
        assert_eq!(filter_requests(), before + 1);
        let launch = Caller::Launch(LaunchId::from_bytes([6; 32]));
        r.admit_rejoin(&launch, &request(0).disk_uuid).unwrap();
        assert_eq!(filter_requests(), before + 3, "a read and a write");
        assert_eq!(
            r.admit_rejoin(&launch, &request(0).disk_uuid),
            Err(RegistryError::Admission(Refusal::LaunchServed))
        );
    }

    #[test]
    fn a_filter_an_older_joinsvc_kept_beside_the_peers_moves_into_its_own_object() {
        use crate::configmap::ISSUED_FILTER_CONFIGMAP;
        let double = KubeApiDouble::start(SA_TOKEN);
        let r = registry(&double, "10.118.0.0/24");
        r.register(&request(0)).unwrap();
        r.refresh_own(&request(0)).unwrap();
        // As an older joinsvc stored it: the filter beside the peers, and
        // no object of its own.
        let filter = double.configmap(ISSUED_FILTER_CONFIGMAP).unwrap()["data"].clone();
        let mut data = double.configmap(PEERS_CONFIGMAP).unwrap()["data"].clone();
        data["issued-filter"] = filter["issued-filter"].clone();
        data["issued-count"] = filter["issued-count"].clone();
        double.put_configmap_data(PEERS_CONFIGMAP, data);
        double.put_configmap_data(ISSUED_FILTER_CONFIGMAP, json!({}));
        let refused = Err(RegistryError::Admission(Refusal::DiskJoined {
            disk: request(0).disk_uuid,
        }));
        // Its disk is still refused a join, before and after the first
        // change moved the filter.
        assert_eq!(r.register(&request(0)), refused);
        r.register(&request(1)).unwrap();
        let peers = double.configmap(PEERS_CONFIGMAP).unwrap();
        assert!(peers["data"].get("issued-filter").is_none());
        assert_eq!(
            double.configmap(ISSUED_FILTER_CONFIGMAP).unwrap()["data"]["issued-filter"],
            filter["issued-filter"]
        );
        assert_eq!(r.register(&request(0)), refused);
    }

    #[test]
    fn concurrent_launches_at_several_replicas_are_each_served_once() {
        use crate::ledger::LaunchId;
        let double = KubeApiDouble::start(SA_TOKEN);
        let replicas: Vec<Arc<KubeApiPeerRegistry>> = (0..3)
            .map(|_| Arc::new(registry(&double, "10.118.0.0/16")))
            .collect();
        // Each launch asks at two replicas at once: the filter's
        // compare-and-swap gives it one ticket, and a launch whose second
        // write lost to another launch's keeps the one it claimed.
        let launches = 12u8;
        let served: Vec<bool> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..2 * u32::from(launches))
                .map(|i| {
                    let r = Arc::clone(&replicas[i as usize % 3]);
                    let launch = Caller::Launch(LaunchId::from_bytes([(i / 2) as u8; 32]));
                    let disk = request(i / 2).disk_uuid;
                    s.spawn(move || match r.admit_rejoin(&launch, &disk) {
                        Ok(_) => true,
                        Err(RegistryError::Admission(Refusal::LaunchServed)) => false,
                        Err(e) => panic!("{e}"),
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        for (launch, pair) in served.chunks(2).enumerate() {
            assert_eq!(
                pair.iter().filter(|s| **s).count(),
                1,
                "launch {launch}: {pair:?}"
            );
        }
    }

    #[test]
    fn one_read_answers_the_polls_and_this_replicas_changes_show_at_once() {
        let double = KubeApiDouble::start(SA_TOKEN);
        let r = registry(&double, "10.118.0.0/24").with_update_cache_ttl(Duration::from_secs(3600));
        r.register(&request(0)).unwrap();
        let before = double.requests();
        for known in 0..20 {
            assert_eq!(r.update(known % 2).unwrap().resource_version, 1);
        }
        assert_eq!(double.requests(), before + 1, "one read for twenty polls");
        // This replica's change: at once.
        r.register(&request(1)).unwrap();
        assert_eq!(r.update(0).unwrap().peers.len(), 2);
        // Another replica's: when the read is older than the cache's time.
        let other = registry(&double, "10.118.0.0/24");
        other.register(&request(2)).unwrap();
        assert_eq!(r.update(0).unwrap().resource_version, 2);
        let uncached = registry(&double, "10.118.0.0/24").with_update_cache_ttl(Duration::ZERO);
        assert_eq!(uncached.update(0).unwrap().resource_version, 3);
        let before = double.requests();
        uncached.update(3).unwrap();
        uncached.update(3).unwrap();
        assert_eq!(double.requests(), before + 2);
    }

    #[test]
    fn a_spoilt_registry_is_refused_not_served_or_extended() {
        let double = KubeApiDouble::start(SA_TOKEN);
        let r = registry(&double, "10.118.0.0/24");
        r.register(&request(0)).unwrap();
        let peer = |ip: &str| {
            serde_json::json!([{
                "name": "node-0", "publicEndpoint": "192.0.2.1:51820",
                "vpnIP": ip, "vpnPubKey": request(0).vpn_pub_key.to_string(),
            }])
            .to_string()
        };
        for (data, why) in [
            (
                json!({"version": "2", "peers.json": peer("10.119.0.1")}),
                "range",
            ),
            (
                json!({"version": "x", "peers.json": peer("10.118.0.1")}),
                "version",
            ),
            (json!({"version": "2", "peers.json": "{"}), "JSON"),
            (json!({"version": "2"}), "peers.json"),
        ] {
            double.put_configmap_data(PEERS_CONFIGMAP, data.clone());
            for result in [r.update(0).map(|_| ()), r.register(&request(1)).map(|_| ())] {
                match result {
                    Err(RegistryError::Corrupt(m)) => assert!(m.contains(why), "{m} lacks {why}"),
                    other => panic!("{data}: {other:?}"),
                }
            }
            assert_eq!(double.configmap(PEERS_CONFIGMAP).unwrap()["data"], data);
        }
    }

    #[test]
    fn an_exhausted_range_and_a_missing_role_are_named() {
        let double = KubeApiDouble::start(SA_TOKEN);
        let r = registry(&double, "10.118.0.0/30");
        r.register(&request(0)).unwrap();
        r.register(&request(1)).unwrap();
        assert_eq!(
            r.register(&request(2)),
            Err(RegistryError::Refused(VpnError::RangeExhausted))
        );
        const SECRETS_ONLY: &[PolicyRule] = &[PolicyRule {
            api_groups: &[""],
            resources: &["secrets"],
            verbs: &["create"],
            resource_names: &[],
        }];
        let double = KubeApiDouble::start_with_role(SA_TOKEN, SECRETS_ONLY);
        let r = registry(&double, "10.118.0.0/24");
        match r.register(&request(0)) {
            Err(e @ RegistryError::Forbidden { .. }) => {
                assert!(e.to_string().contains("configmaps is forbidden"), "{e}")
            }
            other => panic!("{other:?}"),
        }
    }
}
