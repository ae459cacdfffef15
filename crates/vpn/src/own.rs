//! A node's own peer record as it sends it with `vpn.API/GetUpdate`
//! (`OwnRecord`), and the proof that binds it to the node's state disk.
//!
//! The proof key is derived from the state disk's key
//! ([`OwnRecordKey::from_disk_key`]): the node holds it because a join
//! service (or the admin's Init) gave it that key; a control plane derives
//! the same disk key from the master secret and the disk UUID. A record's
//! name is therefore bound to one disk: only the holder of that disk's key
//! can register, re-key or move that name.

use confboot_proto::vpn::{OwnRecord, Peer as WirePeer};
use ring::hmac;

use super::{VpnError, VpnPublicKey};

/// The HKDF info of the proof key.
const PROOF_KEY_INFO: &[u8] = b"confboot-vpn-own-record";
/// The length of a proof (HMAC-SHA256).
pub const OWN_RECORD_PROOF_BYTES: usize = 32;

/// The key a node proves its own peer record with (32 bytes, zeroized on
/// drop, never printed).
pub struct OwnRecordKey(confboot_kms::SecretBytes);

impl OwnRecordKey {
    /// The proof key of the state disk whose key is `disk_key`.
    pub fn from_disk_key(disk_key: &[u8]) -> OwnRecordKey {
        OwnRecordKey(confboot_kms::hkdf_sha256(disk_key, &[], PROOF_KEY_INFO, 32))
    }

    /// A key from its 32 bytes (as the node agent reads it from its file).
    pub fn from_bytes(bytes: &[u8]) -> Result<OwnRecordKey, VpnError> {
        if bytes.len() != 32 {
            return Err(VpnError::InvalidPrivateKey);
        }
        Ok(OwnRecordKey(confboot_kms::SecretBytes::new(bytes.to_vec())))
    }

    /// The key's bytes (for the node agent's 0600 file).
    pub fn expose(&self) -> &[u8] {
        self.0.expose()
    }

    /// The node's record of `name`, `public_endpoint` and `vpn_pub_key` on
    /// `disk_uuid`, with its proof.
    pub fn record(
        &self,
        name: &str,
        public_endpoint: &str,
        vpn_pub_key: &VpnPublicKey,
        disk_uuid: &str,
    ) -> OwnRecord {
        let peer = WirePeer {
            name: name.to_string(),
            public_endpoint: public_endpoint.to_string(),
            vpn_ip: String::new(),
            vpn_pub_key: vpn_pub_key.as_bytes().to_vec(),
        };
        let proof = self.tag(&peer, disk_uuid).as_ref().to_vec();
        OwnRecord {
            peer: Some(peer),
            disk_uuid: disk_uuid.to_string(),
            proof,
        }
    }

    /// Whether `record`'s proof is this key's over its fields (in constant
    /// time).
    pub fn verify(&self, record: &OwnRecord) -> bool {
        let Some(peer) = &record.peer else {
            return false;
        };
        let key = hmac::Key::new(hmac::HMAC_SHA256, self.0.expose());
        hmac::verify(&key, &signed_bytes(peer, &record.disk_uuid), &record.proof).is_ok()
    }

    fn tag(&self, peer: &WirePeer, disk_uuid: &str) -> hmac::Tag {
        let key = hmac::Key::new(hmac::HMAC_SHA256, self.0.expose());
        hmac::sign(&key, &signed_bytes(peer, disk_uuid))
    }
}

impl std::fmt::Debug for OwnRecordKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("OwnRecordKey(<redacted>)")
    }
}

/// What a proof covers: each field length-prefixed, so no two records
/// share their bytes.
fn signed_bytes(peer: &WirePeer, disk_uuid: &str) -> Vec<u8> {
    let mut out = b"confboot vpn own record v1".to_vec();
    for field in [
        peer.name.as_bytes(),
        peer.public_endpoint.as_bytes(),
        &peer.vpn_pub_key,
        disk_uuid.as_bytes(),
    ] {
        out.extend_from_slice(&(field.len() as u64).to_be_bytes());
        out.extend_from_slice(field);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const DISK: &str = "0f3c6c1e-2b5d-4e8a-9c7f-1a2b3c4d5e6f";

    #[test]
    fn a_record_verifies_under_its_disk_key_only_and_every_field_is_covered() {
        let key = OwnRecordKey::from_disk_key(&[1; 32]);
        let pub_key = VpnPublicKey::from_bytes(&[9; 32]).unwrap();
        let record = key.record("node-1", "192.0.2.1:51820", &pub_key, DISK);
        assert_eq!(record.proof.len(), OWN_RECORD_PROOF_BYTES);
        assert!(key.verify(&record));
        assert!(!OwnRecordKey::from_disk_key(&[2; 32]).verify(&record));
        let changes: [fn(&mut OwnRecord); 7] = [
            |r| r.peer.as_mut().unwrap().name = "node-2".into(),
            |r| r.peer.as_mut().unwrap().public_endpoint = "192.0.2.2:51820".into(),
            |r| r.peer.as_mut().unwrap().vpn_pub_key = vec![8; 32],
            |r| r.disk_uuid = DISK.replace('0', "1"),
            |r| r.proof[0] ^= 1,
            |r| r.proof.truncate(16),
            |r| r.peer = None,
        ];
        for (i, change) in changes.iter().enumerate() {
            let mut r = record.clone();
            change(&mut r);
            assert!(!key.verify(&r), "change {i} still verifies");
        }
        // The VPN IP is the control plane's: not covered.
        let mut r = record.clone();
        r.peer.as_mut().unwrap().vpn_ip = "10.0.0.1".into();
        assert!(key.verify(&r));
        assert!(!format!("{key:?}").contains("01"));
    }
}
