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
        }
    }

    /// Applies a control plane's answer. `Ok(None)`: the version is the one
    /// already applied (the answer's peers, if any, are ignored);
    /// `Ok(Some(list))`: a new version whose list is now the node's (even an
    /// empty one); `Err`: the list is refused and the last good one kept.
    /// Versions are compared for equality only: a control plane whose
    /// version went back (restored from a backup) is followed, not refused.
    pub fn apply(&mut self, response: &GetUpdateResponse) -> Result<Option<&PeerList>, VpnError> {
        if response.resource_version == self.resource_version {
            return Ok(None);
        }
        self.peers = PeerList::from_update(&response.peers, &self.network)?;
        self.resource_version = response.resource_version;
        Ok(Some(&self.peers))
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

    #[test]
    fn a_new_version_replaces_the_list_and_the_same_version_changes_nothing() {
        let mut u = updates();
        assert_eq!(u.request().resource_version, 0);
        let v1 = GetUpdateResponse {
            resource_version: 1,
            peers: vec![wire_peer(1), wire_peer(2)],
        };
        assert_eq!(u.apply(&v1).unwrap().unwrap().peers().len(), 2);
        assert_eq!(u.request().resource_version, 1);
        // Same version, with or without peers: nothing changes.
        assert!(u.apply(&v1).unwrap().is_none());
        let same_empty = GetUpdateResponse {
            resource_version: 1,
            peers: vec![],
        };
        assert!(u.apply(&same_empty).unwrap().is_none());
        assert_eq!(u.peers().peers().len(), 2);
        // A node removed: the new version's list is shorter.
        let v2 = GetUpdateResponse {
            resource_version: 2,
            peers: vec![wire_peer(2)],
        };
        assert_eq!(u.apply(&v2).unwrap().unwrap().peers().len(), 1);
        // Every node removed is a valid list too.
        let v3 = GetUpdateResponse {
            resource_version: 3,
            peers: vec![],
        };
        assert!(u.apply(&v3).unwrap().unwrap().peers().is_empty());
    }

    #[test]
    fn a_refused_update_keeps_the_last_good_list_and_version() {
        let mut u = updates();
        let good = GetUpdateResponse {
            resource_version: 5,
            peers: vec![wire_peer(1)],
        };
        u.apply(&good).unwrap();
        let mut outside = wire_peer(2);
        outside.vpn_ip = "10.119.0.2".into();
        let bad = GetUpdateResponse {
            resource_version: 6,
            peers: vec![wire_peer(1), outside],
        };
        assert!(matches!(u.apply(&bad), Err(VpnError::VpnIpOutsideRange(_))));
        assert_eq!(u.resource_version(), 5);
        assert_eq!(u.peers().peers().len(), 1);
        // The next good answer is applied: the node converges.
        let fixed = GetUpdateResponse {
            resource_version: 7,
            peers: vec![wire_peer(1), wire_peer(2)],
        };
        assert_eq!(u.apply(&fixed).unwrap().unwrap().peers().len(), 2);
    }
}
