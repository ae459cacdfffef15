//! The state disk's generation: how a disk rolled back to an old snapshot
//! is told from the disk the cluster last saw.
//!
//! Where it is kept, and why the host cannot forge it:
//!
//! - **On the node**: a counter in a file on the state disk's file system,
//!   inside dm-crypt (never in the LUKS2 header, which the host edits at
//!   will). Only code that holds the disk key writes there, and only the
//!   genuine image gets that key (from an attested join service), so every
//!   value the disk holds was written by a genuine node. The host can
//!   restore an old copy of the whole disk (its old counter with it), not
//!   make a counter of its own: without the key, changed sectors decrypt
//!   to garbage, which the node refuses as unreadable.
//! - **In the cluster**: the join service's ledger keeps, per disk UUID,
//!   the last generation a node confirmed having written (in the registry's
//!   ConfigMap, written by compare-and-swap, so every replica and restart
//!   has it). The host does not reach etcd.
//!
//! - **With the admin, for Recover**: no join service answers a node
//!   that waits for Recover, so the admin's CLI keeps the last generation
//!   it saw per disk (`confboot recover --generations-file`, seeded from
//!   the ledger's `generations.json` with [`parse_admin_generations`]) and
//!   sends it with every Recover; the node refuses a disk below it
//!   ([`check_generation`] with the admin's value as `last`) and writes the
//!   next one. The file is on the admin's machine, out of the host's reach.
//! - **The ledger itself** is anchored by each joinsvc (its memory and
//!   `--state-dir`): a ledger object gone or gone back is an error, not an
//!   empty ledger (joinsvc's `ledger::LedgerAnchor`).
//!
//! No MAC over the stored counter is needed: dm-crypt keeps the host from
//! writing a chosen value, and the ledger is the reference a restored copy
//! is compared with. What the host can do is replay an entire old disk,
//! which is exactly what the comparison finds.
//!
//! The exchange at a rejoin: the rejoin ticket carries the cluster's last
//! generation `M` (0: none recorded). The node opens the disk, reads its
//! generation `N` and refuses the disk when `N < M` ([`check_generation`];
//! it reports what it found, and the join service counts the refusal). Then
//! it writes `N + 1` (synced) and only then confirms it
//! (`join.API/ConfirmGeneration`, proven with the disk key:
//! [`generation_proof`]); the join service checks `N` again and records
//! `N + 1`. The node reports itself bootstrapped only after the
//! confirmation; a failed confirmation ends its boot.
//!
//! Why written before confirmed: a value is recorded only once a disk
//! holds it, so no crash loses a node (killed after the write and before
//! the confirmation, the disk holds `M + 1 > M`: accepted next time). The
//! host gains nothing from such a crash: the copy it could then restore
//! (generation `M`) is the disk as the crashed boot found it, and that boot
//! never got past its confirmation. A disk copied *during* the latest
//! boot, after its confirmation, holds the current generation and is not
//! told apart: the generation counts boots, and a rollback is detected
//! across a rejoin, not within one boot.

/// The length of a generation proof.
pub const GENERATION_PROOF_LEN: usize = 32;

/// A disk older than the cluster last saw it.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("state disk rolled back: generation {found}, the cluster last issued {last}")]
pub struct RolledBack {
    /// The generation the disk holds (0: none).
    pub found: u64,
    /// The generation the cluster last confirmed for the disk.
    pub last: u64,
}

/// Whether a disk holding generation `found` may be used, when the
/// cluster last confirmed `last` for it (0: none recorded, any is taken).
/// A newer generation than the cluster's is taken: only a genuine node
/// writes one, and it is newer than any copy the cluster saw.
pub fn check_generation(found: u64, last: u64) -> Result<(), RolledBack> {
    if found < last {
        return Err(RolledBack { found, last });
    }
    Ok(())
}

/// The proof that the holder of `disk_key` found generation `found` on
/// the disk `disk_uuid` and wrote `written` (0: none): HKDF-SHA256 of the
/// disk key over the fields.
pub fn generation_proof(
    disk_key: &[u8],
    disk_uuid: &str,
    found: u64,
    written: u64,
) -> [u8; GENERATION_PROOF_LEN] {
    let mut info = Vec::with_capacity(64 + disk_uuid.len());
    info.extend_from_slice(b"confboot state disk generation\0");
    info.extend_from_slice(disk_uuid.to_ascii_lowercase().as_bytes());
    info.push(0);
    info.extend_from_slice(&found.to_be_bytes());
    info.extend_from_slice(&written.to_be_bytes());
    let tag = confboot_kms::hkdf_sha256(disk_key, &[], &info, GENERATION_PROOF_LEN);
    tag.expose().try_into().expect("32 bytes")
}

/// Whether `proof` is [`generation_proof`] of these fields (in constant
/// time).
pub fn verify_generation_proof(
    disk_key: &[u8],
    disk_uuid: &str,
    found: u64,
    written: u64,
    proof: &[u8],
) -> bool {
    let want = generation_proof(disk_key, disk_uuid, found, written);
    proof.len() == want.len() && want.iter().zip(proof).fold(0u8, |d, (a, b)| d | (a ^ b)) == 0
}

/// The most disks an admin's generations file keeps (as many as the
/// ledger: `MAX_DISK_GENERATIONS` in joinsvc).
pub const MAX_ADMIN_GENERATIONS: usize = 4096;
/// The largest admin's generations file read.
pub const MAX_ADMIN_GENERATIONS_BYTES: usize = 1 << 20;

/// The admin's generations file does not read.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("not a generations file: {0}")]
pub struct GenerationsFileError(pub String);

/// The admin's record of the last generation seen per state disk (the
/// CLI's `--generations-file`): a JSON object from disk UUID (lower case)
/// to a generation, or to `[generation, unix seconds]` as joinsvc's
/// ledger writes `generations.json` (so the file can be seeded from the
/// ConfigMap). At most [`MAX_ADMIN_GENERATIONS_BYTES`] and
/// [`MAX_ADMIN_GENERATIONS`] disks, each a UUID.
pub fn parse_admin_generations(
    bytes: &[u8],
) -> Result<std::collections::BTreeMap<String, u64>, GenerationsFileError> {
    let bad = |why: &str| GenerationsFileError(why.to_string());
    if bytes.len() > MAX_ADMIN_GENERATIONS_BYTES {
        return Err(bad("too large"));
    }
    let value: serde_json::Value = serde_json::from_slice(bytes).map_err(|_| bad("not JSON"))?;
    let object = value.as_object().ok_or_else(|| bad("not an object"))?;
    if object.len() > MAX_ADMIN_GENERATIONS {
        return Err(bad("too many disks"));
    }
    let mut out = std::collections::BTreeMap::new();
    for (disk, g) in object {
        if !confboot_kms::is_uuid(disk) {
            return Err(bad("a key is not a disk UUID"));
        }
        let generation = match g {
            serde_json::Value::Array(pair) if pair.len() == 2 => pair[0].as_u64(),
            g => g.as_u64(),
        }
        .ok_or_else(|| bad("a generation is not a number"))?;
        let kept = out.entry(disk.to_ascii_lowercase()).or_insert(0);
        *kept = generation.max(*kept);
    }
    Ok(out)
}

/// The admin's generations file's content for `generations`.
pub fn admin_generations_json(generations: &std::collections::BTreeMap<String, u64>) -> String {
    serde_json::to_string_pretty(generations).expect("a map of numbers") + "\n"
}

#[cfg(test)]
mod tests {
    use super::*;

    const UUID: &str = "2f3c6c1e-2b5d-4e8a-9c7f-1a2b3c4d5e6f";

    #[test]
    fn an_older_generation_is_refused_and_a_newer_or_equal_one_taken() {
        assert_eq!(check_generation(0, 0), Ok(()));
        assert_eq!(check_generation(7, 0), Ok(()));
        assert_eq!(check_generation(3, 3), Ok(()));
        assert_eq!(check_generation(4, 3), Ok(()));
        assert_eq!(
            check_generation(2, 3),
            Err(RolledBack { found: 2, last: 3 })
        );
        assert_eq!(
            check_generation(0, 1).unwrap_err().to_string(),
            "state disk rolled back: generation 0, the cluster last issued 1"
        );
    }

    #[test]
    fn a_proof_binds_the_disk_key_the_disk_and_both_generations() {
        let key = [7u8; 32];
        let proof = generation_proof(&key, UUID, 3, 4);
        assert!(verify_generation_proof(&key, UUID, 3, 4, &proof));
        assert!(verify_generation_proof(
            &key,
            &UUID.to_ascii_uppercase(),
            3,
            4,
            &proof
        ));
        assert!(!verify_generation_proof(&[8u8; 32], UUID, 3, 4, &proof));
        assert!(!verify_generation_proof(
            &key,
            "9f3c6c1e-2b5d-4e8a-9c7f-1a2b3c4d5e6f",
            3,
            4,
            &proof
        ));
        assert!(!verify_generation_proof(&key, UUID, 2, 4, &proof));
        assert!(!verify_generation_proof(&key, UUID, 3, 5, &proof));
        assert!(!verify_generation_proof(&key, UUID, 3, 4, &proof[..31]));
        assert!(!verify_generation_proof(&key, UUID, 3, 4, &[]));
    }

    #[test]
    fn an_admins_generations_file_reads_its_own_and_the_ledgers_form() {
        let disk = "2f3c6c1e-2b5d-4e8a-9c7f-1a2b3c4d5e6f";
        let upper = disk.to_ascii_uppercase();
        let read = parse_admin_generations(
            format!(r#"{{"{disk}": 3, "{upper}": [5, 1700000000]}}"#).as_bytes(),
        )
        .unwrap();
        assert_eq!(read.get(disk), Some(&5));
        assert_eq!(
            parse_admin_generations(admin_generations_json(&read).as_bytes()).unwrap(),
            read
        );
        for bad in [
            &b"[]"[..],
            br#"{"not-a-uuid": 1}"#,
            br#"{"2f3c6c1e-2b5d-4e8a-9c7f-1a2b3c4d5e6f": -1}"#,
            br#"{"2f3c6c1e-2b5d-4e8a-9c7f-1a2b3c4d5e6f": [1]}"#,
        ] {
            assert!(parse_admin_generations(bad).is_err());
        }
    }
}
