//! A node's side of the versioned peer updates: the version and list it
//! last applied, kept while updates are refused.

use confboot_proto::vpn::{GetUpdateRequest, GetUpdateResponse};

use super::{PeerList, VpnError, VpnNetwork};

/// The version and peer list a node last applied. A refused update changes
/// neither: the node keeps its last good list and asks again at the next
/// poll, so it converges once a control plane answers well.
#[derive(Clone, Debug)]
pub struct PeerUpdates {
    network: VpnNetwork,
    resource_version: u64,
    peers: PeerList,
}

impl PeerUpdates {
    /// Nothing applied yet (version 0, no peers).
    pub fn new(network: VpnNetwork) -> PeerUpdates {
        PeerUpdates {
            network,
            resource_version: 0,
            peers: PeerList::default(),
        }
    }

    /// The request for the next poll: the version last applied.
    pub fn request(&self) -> GetUpdateRequest {
        GetUpdateRequest {
            resource_version: self.resource_version,
            own: None,
        }
    }

    /// Checks a control plane's answer without applying it. `Ok(None)`:
    /// the version is the one already applied (the answer's peers, if any,
    /// are ignored); `Ok(Some(list))`: a new version with a valid list (even
    /// an empty one), to apply to the interface and then
    /// [`PeerUpdates::commit`]; `Err`: the list is refused, the last good
    /// one stays. Versions are compared for equality only: a control plane
    /// whose version went back (restored from a backup) is followed, not
    /// refused.
    pub fn check(&self, response: &GetUpdateResponse) -> Result<Option<PeerList>, VpnError> {
        if response.resource_version == self.resource_version {
            return Ok(None);
        }
        PeerList::from_update(&response.peers, &self.network).map(Some)
    }

    /// Records `peers` as applied at `resource_version`: only once the
    /// interface has them, so a failed apply is tried again at the next
    /// poll instead of being taken for done.
    pub fn commit(&mut self, resource_version: u64, peers: PeerList) {
        self.resource_version = resource_version;
        self.peers = peers;
    }

    /// The list last applied.
    pub fn peers(&self) -> &PeerList {
        &self.peers
    }

    /// The version last applied (0: none yet).
    pub fn resource_version(&self) -> u64 {
        self.resource_version
    }
}

#[cfg(test)]
mod tests {
    use super::super::peers::tests::wire_peer;
    use super::*;

    fn updates() -> PeerUpdates {
        PeerUpdates::new("10.118.0.0/24".parse().unwrap())
    }

    /// Checks and, for a new valid list, commits: whether it changed.
    fn apply(u: &mut PeerUpdates, r: &GetUpdateResponse) -> Result<Option<usize>, VpnError> {
        Ok(u.check(r)?.map(|list| {
            let n = list.peers().len();
            u.commit(r.resource_version, list);
            n
        }))
    }

    #[test]
    fn a_new_version_replaces_the_list_and_the_same_version_changes_nothing() {
        let mut u = updates();
        assert_eq!(u.request().resource_version, 0);
        let v1 = GetUpdateResponse {
            resource_version: 1,
            peers: vec![wire_peer(1), wire_peer(2)],
            signature: Vec::new(),
        };
        assert_eq!(apply(&mut u, &v1).unwrap(), Some(2));
        assert_eq!(u.request().resource_version, 1);
        // Same version, with or without peers: nothing changes.
        assert_eq!(apply(&mut u, &v1).unwrap(), None);
        let same_empty = GetUpdateResponse {
            resource_version: 1,
            peers: vec![],
            signature: Vec::new(),
        };
        assert_eq!(apply(&mut u, &same_empty).unwrap(), None);
        assert_eq!(u.peers().peers().len(), 2);
        // A node removed: the new version's list is shorter.
        let v2 = GetUpdateResponse {
            resource_version: 2,
            peers: vec![wire_peer(2)],
            signature: Vec::new(),
        };
        assert_eq!(apply(&mut u, &v2).unwrap(), Some(1));
        // Every node removed is a valid list too.
        let v3 = GetUpdateResponse {
            resource_version: 3,
            peers: vec![],
            signature: Vec::new(),
        };
        assert_eq!(apply(&mut u, &v3).unwrap(), Some(0));
    }

    #[test]
    fn a_refused_update_keeps_the_last_good_list_and_version() {
        let mut u = updates();
        let good = GetUpdateResponse {
            resource_version: 5,
            peers: vec![wire_peer(1)],
            signature: Vec::new(),
        };
        apply(&mut u, &good).unwrap();
        let mut outside = wire_peer(2);
        outside.vpn_ip = "10.119.0.2".into();
        let bad = GetUpdateResponse {
            resource_version: 6,
            peers: vec![wire_peer(1), outside],
            signature: Vec::new(),
        };
        assert!(matches!(
            apply(&mut u, &bad),
            Err(VpnError::VpnIpOutsideRange(_))
        ));
        assert_eq!(u.resource_version(), 5);
        assert_eq!(u.peers().peers().len(), 1);
        // The next good answer is applied: the node converges.
        let fixed = GetUpdateResponse {
            resource_version: 7,
            peers: vec![wire_peer(1), wire_peer(2)],
            signature: Vec::new(),
        };
        assert_eq!(apply(&mut u, &fixed).unwrap(), Some(2));
    }
}
