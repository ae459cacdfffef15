//! A [`PeerSink`] that writes the applied peer list to a file, replaced
//! atomically: what the node agent last applied, for the admin and for
//! tests to read (public data only: names, endpoints, addresses, public
//! keys).

use std::path::PathBuf;

use serde_json::json;

use super::{PeerList, PeerSink, write_private_atomically};
use confboot_util::fs::FileError;

/// Writes each applied list to one JSON file.
#[derive(Clone, Debug)]
pub struct PeerListFile {
    path: PathBuf,
}

/// Why the list could not be written.
#[derive(Debug, thiserror::Error)]
#[error("peer list file: {0}")]
pub struct PeerListFileError(FileError);

impl PeerListFile {
    /// Writes to `path`.
    pub fn new(path: impl Into<PathBuf>) -> PeerListFile {
        PeerListFile { path: path.into() }
    }

    /// The list as written: `[{"name", "publicEndpoint", "vpnIP", "vpnPubKey"}]`.
    pub fn to_json(peers: &PeerList) -> String {
        serde_json::Value::Array(
            peers
                .peers()
                .iter()
                .map(|p| {
                    json!({
                        "name": p.name,
                        "publicEndpoint": p.public_endpoint.to_string(),
                        "vpnIP": p.vpn_ip.to_string(),
                        "vpnPubKey": p.vpn_pub_key.to_string(),
                    })
                })
                .collect(),
        )
        .to_string()
    }
}

impl PeerSink for PeerListFile {
    type Error = PeerListFileError;

    fn apply(&mut self, peers: &PeerList) -> Result<(), PeerListFileError> {
        write_private_atomically(&self.path, PeerListFile::to_json(peers).as_bytes())
            .map_err(PeerListFileError)
    }
}
