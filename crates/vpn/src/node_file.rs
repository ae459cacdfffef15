//! What the bootstrapper hands the node agent for the VPN: one JSON file,
//! mode 0600, on a tmpfs (`/run`), because the agent outlives the
//! bootstrapper and the state file system is not kept mounted. It holds
//! the node's WireGuard private key and the key that proves the node's
//! own peer record, so it is written atomically (a new file renamed into
//! place), read bounded, and zeroized in memory.
//!
//! ```json
//! {"name": "worker-1", "privateKey": "<base64>", "ownRecordKey": "<base64>",
//!  "diskUUID": "…", "publicEndpoint": "192.0.2.10:51820", "listenPort": 51820,
//!  "controlPlanes": ["10.0.2.100:9090"], "clusterId": "<hex>",
//!  "controlPlaneKey": "<hex>"}
//! ```
//!
//! It is read with a serde derive ([`confboot_util::json::object`]): every
//! member above exactly once and no other; the two keys are read into
//! zeroized strings.

use std::net::SocketAddr;
use std::path::Path;

use serde::Deserialize;
use serde_json::{Value, json};
use zeroize::Zeroizing;

use confboot_cluster::role::ControlPlanePublicKey;

use super::{OwnRecordKey, VpnError, VpnPrivateKey, check_peer_name, parse_public_endpoint};
use confboot_util::fs::FileError;
use confboot_util::json::{JsonError, SecretText};

/// The largest node VPN file read.
pub const MAX_NODE_VPN_FILE_BYTES: u64 = 64 * 1024;
/// The most control-plane endpoints the file may name.
pub const MAX_CONTROL_PLANES: usize = 64;
/// The longest control-plane endpoint (a DNS name, `:` and a port).
const MAX_ENDPOINT_CHARS: usize = 253 + 6;

/// Why the node VPN file could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum NodeVpnFileError {
    /// Reading or writing failed.
    #[error("node VPN file: {0}")]
    File(FileError),
    /// The file is not the JSON object described above.
    #[error("node VPN file: {0}")]
    Format(String),
    /// A member appears twice.
    #[error("node VPN file: the member {0:?} is repeated")]
    RepeatedKey(String),
    /// A value in it is refused.
    #[error("node VPN file: {0}")]
    Value(VpnError),
}

/// The node's VPN identity and where its control planes are.
#[derive(Debug)]
pub struct NodeVpnFile {
    /// The node's name (its peer name).
    pub name: String,
    /// The node's WireGuard private key.
    pub private_key: VpnPrivateKey,
    /// The key proving the node's own peer record.
    pub own_record_key: OwnRecordKey,
    /// The node's state disk UUID (what its name is bound to).
    pub disk_uuid: String,
    /// Where other nodes reach this node's WireGuard.
    pub public_endpoint: SocketAddr,
    /// The port the node's WireGuard listens on.
    pub listen_port: u16,
    /// The control planes' `vpn.API` endpoints (`host:port`), tried in turn.
    pub control_planes: Vec<String>,
    /// The cluster id: a control plane's PCR 15 must hold its mark.
    pub cluster_id: Vec<u8>,
    /// The public half of the control-plane role key: a control plane's
    /// answers must carry its signature ([`confboot_cluster::role`]).
    pub control_plane_key: ControlPlanePublicKey,
}

impl NodeVpnFile {
    /// Reads and checks the file at `path`.
    pub fn read(path: &Path) -> Result<NodeVpnFile, NodeVpnFileError> {
        let text = Zeroizing::new(
            confboot_util::fs::read_bounded_text(path, MAX_NODE_VPN_FILE_BYTES)
                .map_err(NodeVpnFileError::File)?,
        );
        NodeVpnFile::parse(&text)
    }

    /// Parses and checks the file's text.
    pub fn parse(text: &str) -> Result<NodeVpnFile, NodeVpnFileError> {
        let format = |m: &str| NodeVpnFileError::Format(m.to_string());
        let file: FileJson =
            confboot_util::json::object(text.as_bytes()).map_err(|error| match error {
                JsonError::Syntax { .. } => format("not JSON"),
                JsonError::NotObject => format("not a JSON object"),
                JsonError::DuplicateKey { key } => NodeVpnFileError::RepeatedKey(key),
                JsonError::Data { description } => NodeVpnFileError::Format(description),
            })?;
        check_peer_name(&file.name).map_err(NodeVpnFileError::Value)?;
        let private_key = VpnPrivateKey::from_base64(file.private_key.expose())
            .map_err(NodeVpnFileError::Value)?;
        let own_key_bytes = Zeroizing::new(
            confboot_util::base64::decode(file.own_record_key.expose())
                .map_err(|_| format("ownRecordKey is not base64"))?,
        );
        let own_record_key =
            OwnRecordKey::from_bytes(&own_key_bytes).map_err(NodeVpnFileError::Value)?;
        let disk_uuid = file.disk_uuid.to_ascii_lowercase();
        if !confboot_kms::is_uuid(&disk_uuid) {
            return Err(format("diskUUID is not a UUID"));
        }
        let public_endpoint =
            parse_public_endpoint(&file.public_endpoint).map_err(NodeVpnFileError::Value)?;
        if file.listen_port == 0 {
            return Err(format("listenPort is not a port"));
        }
        let list = file.control_planes;
        if list.is_empty() || list.len() > MAX_CONTROL_PLANES {
            return Err(format("controlPlanes: want 1 to 64 endpoints"));
        }
        if !list
            .iter()
            .all(|e| !e.is_empty() && e.len() <= MAX_ENDPOINT_CHARS && e.contains(':'))
        {
            return Err(format("controlPlanes: an entry is not host:port"));
        }
        let cluster_id = confboot_util::hex::decode(&file.cluster_id)
            .ok()
            .filter(|id| id.len() == 32)
            .ok_or_else(|| format("clusterId is not 32 bytes of hex"))?;
        let control_plane_key = confboot_util::hex::decode(&file.control_plane_key)
            .ok()
            .and_then(|key| ControlPlanePublicKey::from_bytes(&key).ok())
            .ok_or_else(|| format("controlPlaneKey is not a control-plane key in hex"))?;
        Ok(NodeVpnFile {
            name: file.name,
            private_key,
            own_record_key,
            disk_uuid,
            public_endpoint,
            listen_port: file.listen_port,
            control_planes: list,
            cluster_id,
            control_plane_key,
        })
    }

    /// The file's text (secrets inside: zeroized on drop).
    pub fn to_text(&self) -> Zeroizing<String> {
        let mut value = json!({
            "name": self.name,
            "privateKey": self.private_key.to_base64().as_str(),
            "ownRecordKey": confboot_util::base64::encode(self.own_record_key.expose()),
            "diskUUID": self.disk_uuid,
            "publicEndpoint": self.public_endpoint.to_string(),
            "listenPort": self.listen_port,
            "controlPlanes": self.control_planes,
            "clusterId": confboot_util::hex::encode(&self.cluster_id),
            "controlPlaneKey": confboot_util::hex::encode(self.control_plane_key.as_bytes()),
        });
        let text = Zeroizing::new(value.to_string());
        take_secret(&mut value, "privateKey");
        take_secret(&mut value, "ownRecordKey");
        text
    }

    /// Writes the file at `path` (mode 0600) atomically: a new file next
    /// to it, synced, then renamed over it.
    pub fn write(&self, path: &Path) -> Result<(), NodeVpnFileError> {
        write_private_atomically(path, self.to_text().as_bytes()).map_err(NodeVpnFileError::File)
    }
}

/// The file as written, before its values are checked.
#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct FileJson {
    name: String,
    private_key: SecretText,
    own_record_key: SecretText,
    #[serde(rename = "diskUUID")]
    disk_uuid: String,
    public_endpoint: String,
    listen_port: u16,
    control_planes: Vec<String>,
    cluster_id: String,
    control_plane_key: String,
}

/// Takes the string `name` out of `value` into a zeroized string.
fn take_secret(value: &mut Value, name: &str) -> Option<Zeroizing<String>> {
    match value.get_mut(name).map(Value::take) {
        Some(Value::String(s)) => Some(Zeroizing::new(s)),
        _ => None,
    }
}

/// Writes `bytes` to `path` (mode 0600) through a new file next to it,
/// synced and renamed over `path`: a reader sees the old or the new file,
/// never a part.
pub fn write_private_atomically(path: &Path, bytes: &[u8]) -> Result<(), FileError> {
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".new");
    let tmp = std::path::PathBuf::from(tmp);
    // A leftover of a write that was interrupted.
    let _ = std::fs::remove_file(&tmp);
    confboot_util::fs::write_new_private(&tmp, bytes)?;
    std::fs::rename(&tmp, path).map_err(|error| FileError::Write {
        path: path.to_path_buf(),
        error,
    })
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    use super::*;

    fn sample() -> NodeVpnFile {
        NodeVpnFile {
            name: "worker-1".into(),
            private_key: VpnPrivateKey::generate().unwrap(),
            own_record_key: OwnRecordKey::from_disk_key(&[4; 32]),
            disk_uuid: "0f3c6c1e-2b5d-4e8a-9c7f-1a2b3c4d5e6f".into(),
            public_endpoint: "192.0.2.10:51820".parse().unwrap(),
            listen_port: 51820,
            control_planes: vec!["10.0.2.100:9090".into()],
            cluster_id: vec![9; 32],
            control_plane_key: ControlPlanePublicKey::from_bytes(&[5; 32]).unwrap(),
        }
    }

    #[test]
    fn the_file_round_trips_is_private_and_replaced_whole() {
        let dir = confboot_testkit::TempDir::new("node-vpn-file");
        let path = dir.path().join("vpn.json");
        let file = sample();
        file.write(&path).unwrap();
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        let again = NodeVpnFile::read(&path).unwrap();
        assert_eq!(again.private_key.expose(), file.private_key.expose());
        assert_eq!(again.own_record_key.expose(), file.own_record_key.expose());
        assert_eq!(again.control_planes, file.control_planes);
        assert_eq!(again.cluster_id, file.cluster_id);
        assert_eq!(again.control_plane_key, file.control_plane_key);
        // A second write replaces it (a later boot's).
        let second = NodeVpnFile {
            listen_port: 51821,
            ..sample()
        };
        second.write(&path).unwrap();
        assert_eq!(NodeVpnFile::read(&path).unwrap().listen_port, 51821);
        assert!(!format!("{again:?}").contains(again.private_key.to_base64().as_str()));
    }

    #[test]
    fn bad_files_are_refused() {
        let good: Value = serde_json::from_str(&sample().to_text()).unwrap();
        for (field, bad) in [
            ("name", json!("Not_A_Name")),
            ("privateKey", json!("AAAA")),
            ("ownRecordKey", json!("AAAA")),
            ("diskUUID", json!("x")),
            ("publicEndpoint", json!("192.0.2.1")),
            ("listenPort", json!(0)),
            ("listenPort", json!(70000)),
            ("controlPlanes", json!([])),
            ("controlPlanes", json!(["no-port"])),
            ("controlPlanes", json!(vec!["a:1"; 65])),
            ("clusterId", json!("00")),
            ("controlPlaneKey", json!("05")),
            ("controlPlaneKey", json!("0".repeat(64))),
        ] {
            let mut v = good.clone();
            v[field] = bad.clone();
            assert!(
                NodeVpnFile::parse(&v.to_string()).is_err(),
                "{field} = {bad} accepted"
            );
        }
        for field in [
            "name",
            "privateKey",
            "listenPort",
            "controlPlanes",
            "controlPlaneKey",
        ] {
            let mut v = good.clone();
            v.as_object_mut().unwrap().remove(field);
            assert!(
                matches!(
                    NodeVpnFile::parse(&v.to_string()),
                    Err(NodeVpnFileError::Format(_))
                ),
                "{field} missing accepted"
            );
        }
        for bad in [
            json!("51820"),
            json!(-1),
            json!(null),
            json!(["x"]),
            json!(51820.0),
        ] {
            let mut v = good.clone();
            v["listenPort"] = bad.clone();
            assert!(
                NodeVpnFile::parse(&v.to_string()).is_err(),
                "{bad} accepted"
            );
        }
        // Another member, or a member twice (after unescaping), is refused;
        // no error quotes the private key.
        let key = good["privateKey"].as_str().unwrap().to_string();
        let mut v = good.clone();
        v["extra"] = json!(1);
        assert!(matches!(
            NodeVpnFile::parse(&v.to_string()),
            Err(NodeVpnFileError::Format(_))
        ));
        let text = good.to_string();
        let twice = format!(
            "{}, \"\\u006eame\": \"worker-2\"}}",
            &text[..text.len() - 1]
        );
        assert!(matches!(
            NodeVpnFile::parse(&twice),
            Err(NodeVpnFileError::RepeatedKey(k)) if k == "name"
        ));
        let mut v = good.clone();
        v["privateKey"] = json!(5);
        v["listenPort"] = json!(key.clone());
        let e = NodeVpnFile::parse(&v.to_string()).unwrap_err();
        assert!(!e.to_string().contains(&key), "{e}");
        assert!(matches!(
            NodeVpnFile::parse(&format!("[\"worker-1\", \"{key}\"]")),
            Err(NodeVpnFileError::Format(_))
        ));
        assert!(NodeVpnFile::parse("{").is_err());
        assert!(NodeVpnFile::parse(&good.to_string()).is_ok());
    }
}
