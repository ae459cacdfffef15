//! The node's side of the cluster VPN at boot: its WireGuard key pair,
//! kept on the state file system, and the file it hands the node agent.
//!
//! Order matters: a join request goes out before the state disk is open,
//! so every boot draws a *candidate* key first and sends its public half
//! with a join request. Once the disk is open, the key kept there wins; a
//! disk without one (a first boot, or one interrupted before the key was
//! kept) keeps the candidate. Either way the node agent's own record,
//! proven with the disk's key, tells the control plane the key in use, so
//! a boot interrupted anywhere converges.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use confboot_cluster::role::ControlPlanePublicKey;
use confboot_vpn::{NodeVpnFile, OwnRecordKey, VpnPrivateKey};

use confboot_vpn::VpnError;

use super::state_fs::{StateFsError, StateFsMount, with_mounted};
use super::trusted::{StateFileError, StateFiles};

/// Why the node's VPN key was not kept or the node agent's file not
/// written (past the nodelock: final).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum VpnSetupError {
    /// No decrypted state device is mapped to keep the key on.
    #[error("no decrypted state device to keep the key on (--disk-mode header-only)")]
    NoDevice,
    /// The state file system could not be mounted or unmounted.
    #[error("{0}")]
    StateFs(StateFsError),
    /// The candidate key is not a key.
    #[error("{0}")]
    Key(VpnError),
    /// The kept key was refused (its MAC), or could not be kept.
    #[error("{0}")]
    StateFile(StateFileError),
    /// The directory of the node agent's file could not be created.
    #[error("creating {}: {reason}", dir.display())]
    CreateDir {
        /// The directory.
        dir: PathBuf,
        /// What the system said.
        reason: String,
    },
    /// The node agent's file could not be written.
    #[error("{0}")]
    WriteFile(String),
}

/// Where the key is kept on the state file system.
pub const STORED_VPN_KEY_FILE: &str = "vpn-private-key";

/// What the node needs for the VPN at boot.
pub struct NodeVpnSetup {
    /// Mounts the state file system for a moment.
    pub mount: Box<dyn StateFsMount>,
    /// The node's name (its peer name).
    pub name: String,
    /// Where other nodes reach this node's WireGuard.
    pub public_endpoint: SocketAddr,
    /// The port the node's WireGuard listens on.
    pub listen_port: u16,
    /// The control planes the node agent asks for peer updates.
    pub control_planes: Vec<String>,
    /// Where the node agent's VPN file is written (on a tmpfs).
    pub file: PathBuf,
    /// This boot's candidate key (see the module's documentation).
    pub candidate: VpnPrivateKey,
}

/// What a join request carries for the node's VPN: who the node is in it
/// and how other nodes reach it, so the join service can register it as a
/// peer.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct VpnJoinFields {
    /// The node's name, its peer name in the VPN (its Kubernetes name).
    pub node_name: String,
    /// The public half (32 bytes) of this boot's candidate WireGuard key:
    /// a join request goes out before the state disk is open, so it
    /// cannot carry the key kept there (the node agent's own record
    /// later tells the control plane the key in use).
    pub public_key: Vec<u8>,
    /// Where other nodes reach the node's WireGuard, `IP:PORT`.
    pub public_endpoint: String,
}

/// Where the key in use came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KeySource {
    /// Kept on the state disk by an earlier boot.
    Kept,
    /// This boot's candidate, now kept.
    New,
}

/// The key kept in `files`, or `candidate` kept there (0600, atomically,
/// sealed) when there is none or it is not a key. A kept file whose MAC is
/// not this disk's at its generation (an older key put back) is refused.
pub fn load_or_keep_key(
    files: &mut StateFiles,
    candidate: &VpnPrivateKey,
) -> Result<(VpnPrivateKey, KeySource), VpnSetupError> {
    if let Some(body) = files
        .read(STORED_VPN_KEY_FILE)
        .map_err(VpnSetupError::StateFile)?
    {
        match std::str::from_utf8(&body)
            .map_err(|e| e.to_string())
            .and_then(|text| VpnPrivateKey::from_base64(text).map_err(|e| e.to_string()))
        {
            Ok(key) => return Ok((key, KeySource::Kept)),
            Err(e) => log::warn!("VPN: the kept key is unusable ({e}); a new one replaces it"),
        }
    }
    let key = VpnPrivateKey::from_bytes(candidate.expose()).map_err(VpnSetupError::Key)?;
    let mut text = key.to_base64();
    text.push('\n');
    files
        .write(STORED_VPN_KEY_FILE, text.as_bytes())
        .map_err(VpnSetupError::StateFile)?;
    Ok((key, KeySource::New))
}

impl NodeVpnSetup {
    /// Takes the key in use from the state file system on `device` (or
    /// keeps the candidate there) and writes the node agent's file for
    /// the disk `disk_uuid` whose key is `disk_key`, in the cluster
    /// `cluster_id` whose control planes sign with the private half of
    /// `control_plane_key`.
    pub fn set_up(
        &self,
        device: &Path,
        disk_uuid: &str,
        disk_key: &[u8],
        cluster_id: &[u8],
        control_plane_key: &ControlPlanePublicKey,
    ) -> Result<(), VpnSetupError> {
        let (key, source) = with_mounted(self.mount.as_ref(), device, |dir| {
            let mut files = StateFiles::open(dir, disk_key).map_err(VpnSetupError::StateFile)?;
            load_or_keep_key(&mut files, &self.candidate)
        })
        .map_err(VpnSetupError::StateFs)??;
        log::info!(
            "VPN: node {} has the public key {} ({})",
            self.name,
            key.public_key(),
            match source {
                KeySource::Kept => "kept on the state disk",
                KeySource::New => "new, now kept on the state disk",
            }
        );
        if let Some(parent) = self.file.parent() {
            std::fs::create_dir_all(parent).map_err(|e| VpnSetupError::CreateDir {
                dir: parent.to_path_buf(),
                reason: e.to_string(),
            })?;
        }
        NodeVpnFile {
            name: self.name.clone(),
            private_key: key,
            own_record_key: OwnRecordKey::from_disk_key(disk_key),
            disk_uuid: disk_uuid.to_ascii_lowercase(),
            public_endpoint: self.public_endpoint,
            listen_port: self.listen_port,
            control_planes: self.control_planes.clone(),
            cluster_id: cluster_id.to_vec(),
            control_plane_key: *control_plane_key,
        }
        .write(&self.file)
        .map_err(|e| VpnSetupError::WriteFile(e.to_string()))?;
        log::info!("VPN: the node agent's file is {}", self.file.display());
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    use super::*;

    #[test]
    fn a_kept_key_wins_a_missing_one_is_replaced_and_an_old_one_refused() {
        let dir = confboot_testkit::TempDir::new("vpn-key");
        let files = || StateFiles::open(dir.path(), &[0x42; 32]).unwrap();
        let first = VpnPrivateKey::generate().unwrap();
        let (key, source) = load_or_keep_key(&mut files(), &first).unwrap();
        assert_eq!((key.expose(), source), (first.expose(), KeySource::New));
        let path = dir.path().join(STORED_VPN_KEY_FILE);
        assert_eq!(
            std::fs::metadata(&path).unwrap().permissions().mode() & 0o777,
            0o600
        );
        // A later boot's candidate loses to the kept key.
        let second = VpnPrivateKey::generate().unwrap();
        let (key, source) = load_or_keep_key(&mut files(), &second).unwrap();
        assert_eq!((key.expose(), source), (first.expose(), KeySource::Kept));
        // The generation steps; the key of generation 0 put back is refused.
        let old = std::fs::read(&path).unwrap();
        files().step(2, false).unwrap();
        std::fs::write(&path, &old).unwrap();
        assert!(matches!(
            load_or_keep_key(&mut files(), &second),
            Err(VpnSetupError::StateFile(StateFileError::Refused {
                file: STORED_VPN_KEY_FILE,
                ..
            }))
        ));
        // A lost key: the candidate replaces it.
        std::fs::remove_file(&path).unwrap();
        let (key, source) = load_or_keep_key(&mut files(), &second).unwrap();
        assert_eq!((key.expose(), source), (second.expose(), KeySource::New));
    }
}
