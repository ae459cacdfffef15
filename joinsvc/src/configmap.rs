//! The registry ConfigMaps' stored form: what joinsvc writes to and reads
//! back from [`PEERS_CONFIGMAP`] (the VPN peers, the names' disks, the
//! removed disks, the names waiting for their node, and the [`Ledger`]'s
//! pending joins and generations) and from [`ISSUED_FILTER_CONFIGMAP`]
//! (the ledger's filter of served launches and joined disks, some 175 KB
//! of base64 once anything is in it, in an object of its own so that the
//! reads most tickets and every update make do not carry it).
//!
//! Every writer with access to the object (another replica, an admin, a
//! compromised control plane's credentials) can put anything there, so
//! what is read back is bounded and checked whole: at most
//! [`MAX_CONFIGMAP_BYTES`], at most [`MAX_PEERS`] peers checked as a node
//! checks an update, [`MAX_REMOVED_DISKS`] removed disks,
//! [`MAX_PENDING_JOINS`] pending joins and [`MAX_DISK_GENERATIONS`]
//! generations, every disk a UUID, the filter of issued tickets exactly its
//! size. Anything else is [`Corrupt`], and the registry refuses every
//! change and update (fail closed). Fuzz target `registry_configmap`.
//!
//! The object is read as a JSON value, not with a serde derive: it is the API
//! server's, and around the data it carries members joinsvc does not own
//! (`metadata`, `managedFields`), which a derive would either refuse (unknown
//! members denied) or skip unread.

use std::collections::BTreeMap;

use confboot_proto::vpn::Peer as WirePeer;
use confboot_vpn::{MAX_PEERS, PeerList, VpnError, VpnNetwork};
use serde_json::{Value, json};

use crate::ledger::{
    DiskGeneration, FILTER_BITS, IssuedFilter, Ledger, MAX_DISK_GENERATIONS, MAX_PENDING_JOINS,
};

/// The ConfigMap (in kube-system) that holds the peer registry.
pub const PEERS_CONFIGMAP: &str = "confboot-vpn-peers";
/// The ConfigMap (in kube-system) that holds the ledger's filter of served
/// launches and joined disks.
pub const ISSUED_FILTER_CONFIGMAP: &str = "confboot-issued-filter";
/// The largest registry read: the API server's limit for one object.
pub const MAX_CONFIGMAP_BYTES: u64 = 1 << 20;
/// How many removed nodes' state disks the registry remembers (the
/// oldest is forgotten first): a removed node that still runs cannot put
/// itself back through its own record.
pub const MAX_REMOVED_DISKS: usize = 4096;
/// The longest `resourceVersion` taken from the API server.
pub const MAX_RESOURCE_VERSION_CHARS: usize = 64;

/// Why a stored registry is refused: what is wrong with it.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct Corrupt(pub String);

/// The registry as read: the version and list, and the object's
/// `resourceVersion` a write must name (`None`: no object yet).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Stored {
    /// The object's `resourceVersion` (`None`: no object yet).
    pub resource_version: Option<String>,
    /// The peer list's version, which every `GetUpdate` answer carries.
    pub version: u64,
    /// The peers, checked as a node checks an update.
    pub peers: PeerList,
    /// The state disk each name is bound to (none for a peer registered
    /// before names were bound).
    pub disks: BTreeMap<String, String>,
    /// The state disks of removed nodes, oldest first (at most
    /// [`MAX_REMOVED_DISKS`]).
    pub removed: Vec<String>,
    /// Names registered by a join whose node has not sent its own record
    /// yet → since when (Unix seconds).
    pub pending_peers: BTreeMap<String, u64>,
    /// What each launch and disk was given, its filter aside (in
    /// [`ISSUED_FILTER_CONFIGMAP`]): `ledger.issued` is empty.
    pub ledger: Ledger,
    /// A filter stored in this object by a joinsvc from before the filter
    /// had an object of its own (empty: none). The first change moves it
    /// into [`ISSUED_FILTER_CONFIGMAP`], and writes this object without it.
    pub legacy_filter: IssuedFilter,
}

/// The filter as read from [`ISSUED_FILTER_CONFIGMAP`], and the object's
/// `resourceVersion` a write must name (`None`: no object yet).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StoredFilter {
    /// The object's `resourceVersion` (`None`: no object yet).
    pub resource_version: Option<String>,
    /// The filter.
    pub filter: IssuedFilter,
}

/// What a write stores.
#[derive(Clone, Copy, Debug)]
pub struct Written<'a> {
    /// The peers.
    pub list: &'a PeerList,
    /// The state disk each name is bound to (names not in `list` are
    /// not written).
    pub disks: &'a BTreeMap<String, String>,
    /// The state disks of removed nodes, oldest first.
    pub removed: &'a [String],
    /// Names waiting for their node's own record → since when (names
    /// not in `list` are not written).
    pub pending_peers: &'a BTreeMap<String, u64>,
    /// What each launch and disk was given (its filter is not written
    /// here: [`filter_data_json`]).
    pub ledger: &'a Ledger,
}

/// The peers as the ConfigMap's `peers.json`: public values, the key in
/// base64 as `wg` shows it, the state disk UUID a name is bound to, and
/// since when a join's peer waits for its node's own record.
fn peers_json(written: &Written<'_>) -> Value {
    let (list, disks) = (written.list, written.disks);
    Value::Array(
        list.peers()
            .iter()
            .map(|p| {
                let mut entry = json!({
                    "name": p.name,
                    "publicEndpoint": p.public_endpoint.to_string(),
                    "vpnIP": p.vpn_ip.to_string(),
                    "vpnPubKey": p.vpn_pub_key.to_string(),
                });
                if let Some(disk) = disks.get(&p.name) {
                    entry["diskUUID"] = json!(disk);
                }
                if let Some(since) = written.pending_peers.get(&p.name) {
                    entry["pendingSince"] = json!(since);
                }
                entry
            })
            .collect(),
    )
}

/// The ConfigMap's `data` for `written` under `version`: what
/// [`parse_stored`] reads back (with the object's metadata around it).
pub fn data_json(version: u64, written: &Written<'_>) -> Value {
    let mut data = json!({
        "version": version.to_string(),
        "peers.json": peers_json(written).to_string(),
        "removed.json": json!(written.removed).to_string(),
        "pending-joins.json": json!(written.ledger.pending).to_string(),
    });
    if !written.ledger.generations.is_empty() {
        let generations: serde_json::Map<String, Value> = written
            .ledger
            .generations
            .iter()
            .map(|(disk, g)| (disk.clone(), json!([g.generation, g.at])))
            .collect();
        data["generations.json"] = json!(Value::Object(generations).to_string());
    }
    data
}

/// The `data` of [`ISSUED_FILTER_CONFIGMAP`] for `filter`: what
/// [`parse_filter_data`] reads back.
pub fn filter_data_json(filter: &IssuedFilter) -> Value {
    let mut data = json!({});
    if !filter.bits().is_empty() {
        data["issued-filter"] = json!(confboot_util::base64::encode(filter.bits()));
        data["issued-count"] = json!(filter.count().to_string());
    }
    data
}

/// A ConfigMap as the API server returns it (at most
/// [`MAX_CONFIGMAP_BYTES`] of JSON), and its `resourceVersion`.
fn parse_object(body: &str) -> Result<(Value, String), Corrupt> {
    let corrupt = |m: &str| Corrupt(m.to_string());
    if body.len() as u64 > MAX_CONFIGMAP_BYTES {
        return Err(corrupt("larger than the API server's limit for one object"));
    }
    let object: Value = serde_json::from_str(body).map_err(|_| corrupt("not JSON"))?;
    let resource_version = object["metadata"]["resourceVersion"]
        .as_str()
        .filter(|rv| !rv.is_empty() && rv.len() <= MAX_RESOURCE_VERSION_CHARS)
        .ok_or_else(|| corrupt("no metadata.resourceVersion"))?
        .to_string();
    Ok((object, resource_version))
}

/// Reads [`ISSUED_FILTER_CONFIGMAP`] (the API server's JSON of the object,
/// at most [`MAX_CONFIGMAP_BYTES`]).
pub fn parse_stored_filter(body: &str) -> Result<StoredFilter, Corrupt> {
    let (object, resource_version) = parse_object(body)?;
    Ok(StoredFilter {
        resource_version: Some(resource_version),
        filter: parse_filter_data(&object["data"])?,
    })
}

/// The filter in a ConfigMap's `data` object (none: empty): exactly
/// [`FILTER_BITS`] bits in base64 and their count, or nothing.
pub fn parse_filter_data(data: &Value) -> Result<IssuedFilter, Corrupt> {
    let corrupt = |m: &str| Corrupt(m.to_string());
    let Some(bits) = data.get("issued-filter") else {
        return Ok(IssuedFilter::default());
    };
    let bits = bits
        .as_str()
        .filter(|b| b.len() <= FILTER_BITS / 6 + 4)
        .and_then(|b| confboot_util::base64::decode(b).ok())
        .ok_or_else(|| corrupt("issued-filter is not base64"))?;
    let count = data["issued-count"]
        .as_str()
        .and_then(|c| c.parse::<u64>().ok())
        .ok_or_else(|| corrupt("issued-count is not a number"))?;
    // A writer stores the filter only once something is in it.
    if bits.len() != FILTER_BITS / 8 {
        return Err(corrupt("issued-filter has the wrong size"));
    }
    IssuedFilter::from_parts(bits, count).ok_or_else(|| corrupt("issued-filter has the wrong size"))
}

/// Reads a stored ConfigMap (the API server's JSON of the object, at most
/// [`MAX_CONFIGMAP_BYTES`]), as strictly as a node reads an update; the
/// peers are checked against `network` (`None`: the registry must hold
/// none).
pub fn parse_stored(body: &str, network: Option<&VpnNetwork>) -> Result<Stored, Corrupt> {
    let corrupt = |m: &str| Corrupt(m.to_string());
    let (object, resource_version) = parse_object(body)?;
    let data = &object["data"];
    let version_text = data["version"]
        .as_str()
        .ok_or_else(|| corrupt("no data.version"))?;
    if version_text.is_empty() || !version_text.bytes().all(|b| b.is_ascii_digit()) {
        return Err(corrupt("data.version is not a number"));
    }
    let version: u64 = version_text
        .parse()
        .map_err(|_| corrupt("data.version is not a number"))?;
    let peers: Value = serde_json::from_str(
        data["peers.json"]
            .as_str()
            .ok_or_else(|| corrupt("no data.peers.json"))?,
    )
    .map_err(|_| corrupt("peers.json is not JSON"))?;
    let entries = peers
        .as_array()
        .ok_or_else(|| corrupt("peers.json is not a list"))?;
    if entries.len() > MAX_PEERS {
        return Err(Corrupt(VpnError::TooManyPeers(entries.len()).to_string()));
    }
    let field = |e: &Value, name: &str| -> Result<String, Corrupt> {
        e[name]
            .as_str()
            .map(str::to_string)
            .ok_or_else(|| Corrupt(format!("a peer without {name}")))
    };
    let mut wire = Vec::with_capacity(entries.len());
    let mut disks = BTreeMap::new();
    let mut pending_peers = BTreeMap::new();
    for e in entries {
        if let Some(since) = e.get("pendingSince") {
            let since = since
                .as_u64()
                .ok_or_else(|| corrupt("a peer's pendingSince is not a number"))?;
            pending_peers.insert(field(e, "name")?, since);
        }
        if let Some(disk) = e.get("diskUUID") {
            let disk = disk
                .as_str()
                .filter(|d| confboot_kms::is_uuid(d))
                .ok_or_else(|| corrupt("a peer's diskUUID is not a UUID"))?;
            disks.insert(field(e, "name")?, disk.to_string());
        }
        let key = confboot_util::base64::decode(&field(e, "vpnPubKey")?)
            .map_err(|_| corrupt("a peer's vpnPubKey is not base64"))?;
        wire.push(WirePeer {
            name: field(e, "name")?,
            public_endpoint: field(e, "publicEndpoint")?,
            vpn_ip: field(e, "vpnIP")?,
            vpn_pub_key: key,
        });
    }
    let peers = match network {
        Some(network) => {
            PeerList::from_update(&wire, network).map_err(|e| Corrupt(e.to_string()))?
        }
        None if wire.is_empty() => PeerList::default(),
        None => {
            return Err(corrupt(
                "it holds VPN peers and this joinsvc has no --vpn-cidr",
            ));
        }
    };
    // Absent in a registry written before removals were remembered.
    let removed = match data.get("removed.json") {
        None => Vec::new(),
        Some(text) => {
            let list: Value = serde_json::from_str(
                text.as_str()
                    .ok_or_else(|| corrupt("removed.json is not a string"))?,
            )
            .map_err(|_| corrupt("removed.json is not JSON"))?;
            let list = list
                .as_array()
                .filter(|l| l.len() <= MAX_REMOVED_DISKS)
                .ok_or_else(|| corrupt("removed.json is not a list of at most 4096 disks"))?;
            list.iter()
                .map(|d| {
                    d.as_str()
                        .filter(|d| confboot_kms::is_uuid(d))
                        .map(str::to_string)
                        .ok_or_else(|| corrupt("removed.json holds a value that is not a UUID"))
                })
                .collect::<Result<Vec<String>, Corrupt>>()?
        }
    };
    Ok(Stored {
        resource_version: Some(resource_version),
        version,
        peers,
        disks,
        removed,
        pending_peers,
        ledger: parse_ledger(data)?,
        legacy_filter: parse_filter_data(data)?,
    })
}

/// The ledger's part of the ConfigMap's `data` object, its filter aside
/// (absent in a registry written before the ledger: empty).
pub fn parse_ledger(data: &Value) -> Result<Ledger, Corrupt> {
    let corrupt = |m: &str| Corrupt(m.to_string());
    let mut ledger = Ledger::default();
    if let Some(text) = data.get("pending-joins.json") {
        let map: Value = serde_json::from_str(
            text.as_str()
                .ok_or_else(|| corrupt("pending-joins.json is not a string"))?,
        )
        .map_err(|_| corrupt("pending-joins.json is not JSON"))?;
        let map = map
            .as_object()
            .filter(|m| m.len() <= MAX_PENDING_JOINS)
            .ok_or_else(|| corrupt("pending-joins.json is not a map of at most 1024 disks"))?;
        for (disk, at) in map {
            let at = at
                .as_u64()
                .filter(|_| confboot_kms::is_uuid(disk))
                .ok_or_else(|| corrupt("pending-joins.json holds a disk that is not a UUID"))?;
            ledger.pending.insert(disk.clone(), at);
        }
    }
    if let Some(text) = data.get("generations.json") {
        let map: Value = serde_json::from_str(
            text.as_str()
                .ok_or_else(|| corrupt("generations.json is not a string"))?,
        )
        .map_err(|_| corrupt("generations.json is not JSON"))?;
        let map = map
            .as_object()
            .filter(|m| m.len() <= MAX_DISK_GENERATIONS)
            .ok_or_else(|| corrupt("generations.json is not a map of at most 4096 disks"))?;
        for (disk, entry) in map {
            let pair = entry
                .as_array()
                .filter(|p| p.len() == 2 && confboot_kms::is_uuid(disk))
                .and_then(|p| Some((p[0].as_u64()?, p[1].as_u64()?)))
                .ok_or_else(|| {
                    corrupt("generations.json holds an entry that is not a disk's [generation, at]")
                })?;
            ledger.generations.insert(
                disk.clone(),
                DiskGeneration {
                    generation: pair.0,
                    at: pair.1,
                },
            );
        }
    }
    Ok(ledger)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ledger::DiskGeneration;

    const DISK: &str = "2f3c6c1e-2b5d-4e8a-9c7f-1a2b3c4d5e6f";

    fn network() -> VpnNetwork {
        "10.118.0.0/16".parse().unwrap()
    }

    fn object(data: Value) -> String {
        json!({"metadata": {"resourceVersion": "9"}, "data": data}).to_string()
    }

    /// Two peers (one bound, one still waiting), a removed disk and a
    /// ledger with every part, as joinsvc writes them.
    fn written_data() -> (Value, Stored) {
        let wire: Vec<WirePeer> = (1..=2u8)
            .map(|i| WirePeer {
                name: format!("node-{i}"),
                public_endpoint: format!("192.0.2.{i}:51820"),
                vpn_ip: format!("10.118.0.{i}"),
                vpn_pub_key: vec![i; 32],
            })
            .collect();
        let peers = PeerList::from_update(&wire, &network()).unwrap();
        let disks = BTreeMap::from([("node-1".to_string(), DISK.to_string())]);
        let pending_peers = BTreeMap::from([("node-2".to_string(), 1_700_000_000)]);
        let mut ledger = Ledger::default();
        ledger.pending.insert(DISK.into(), 1_700_000_001);
        ledger.generations.insert(
            DISK.into(),
            DiskGeneration {
                generation: 3,
                at: 1_700_000_002,
            },
        );
        let removed = vec![DISK.replace('6', "7")];
        let data = data_json(
            5,
            &Written {
                list: &peers,
                disks: &disks,
                removed: &removed,
                pending_peers: &pending_peers,
                ledger: &ledger,
            },
        );
        let stored = Stored {
            resource_version: Some("9".into()),
            version: 5,
            peers,
            disks,
            removed,
            pending_peers,
            ledger,
            legacy_filter: IssuedFilter::default(),
        };
        (data, stored)
    }

    #[test]
    fn what_joinsvc_writes_reads_back_the_same() {
        let (data, stored) = written_data();
        assert_eq!(parse_stored(&object(data), Some(&network())), Ok(stored));
        // The filter, in its own object.
        for bits in [Vec::new(), vec![0x5a; FILTER_BITS / 8]] {
            let count = if bits.is_empty() { 0 } else { 2 };
            let filter = IssuedFilter::from_parts(bits, count).unwrap();
            assert_eq!(
                parse_stored_filter(&object(filter_data_json(&filter))),
                Ok(StoredFilter {
                    resource_version: Some("9".into()),
                    filter
                })
            );
        }
        // Without a VPN range, only a registry without peers is read.
        let (data, _) = written_data();
        assert_eq!(
            parse_stored(&object(data), None),
            Err(Corrupt(
                "it holds VPN peers and this joinsvc has no --vpn-cidr".into()
            ))
        );
    }

    #[test]
    fn a_stored_registry_is_bounded_and_its_filter_is_whole() {
        // Larger than the API server keeps for one object: refused before
        // it is parsed.
        let (data, _) = written_data();
        let mut body = object(data);
        body.extend(std::iter::repeat_n(
            ' ',
            MAX_CONFIGMAP_BYTES as usize + 1 - body.len(),
        ));
        assert_eq!(
            parse_stored(&body, Some(&network())),
            Err(Corrupt(
                "larger than the API server's limit for one object".into()
            ))
        );
        body.pop();
        assert!(parse_stored(&body, Some(&network())).is_ok());
        // A filter of any other size than its own, empty included, is
        // refused (a writer stores it only once something is in it), in
        // its own object and where a joinsvc from before stored it.
        for bits in [Vec::new(), vec![0xff; 3], vec![0; FILTER_BITS / 8 - 1]] {
            let (mut data, _) = written_data();
            data["issued-filter"] = json!(confboot_util::base64::encode(&bits));
            data["issued-count"] = json!("1");
            let wrong = Corrupt("issued-filter has the wrong size".into());
            assert_eq!(
                parse_stored(&object(data.clone()), Some(&network())),
                Err(wrong.clone())
            );
            assert_eq!(parse_stored_filter(&object(data)), Err(wrong));
        }
        let mut body = object(json!({}));
        body.extend(std::iter::repeat_n(' ', MAX_CONFIGMAP_BYTES as usize));
        assert_eq!(
            parse_stored_filter(&body),
            Err(Corrupt(
                "larger than the API server's limit for one object".into()
            ))
        );
    }

    #[test]
    fn a_filter_stored_beside_the_peers_by_an_older_joinsvc_is_read_as_legacy() {
        let (mut data, mut stored) = written_data();
        let legacy = IssuedFilter::from_parts(vec![0x0f; FILTER_BITS / 8], 7).unwrap();
        data["issued-filter"] = json!(confboot_util::base64::encode(legacy.bits()));
        data["issued-count"] = json!("7");
        stored.legacy_filter = legacy;
        assert_eq!(parse_stored(&object(data), Some(&network())), Ok(stored));
    }
}
