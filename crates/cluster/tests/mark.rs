//! The cluster mark against a real swtpm: marking a node extends PCR 15
//! and nothing else, to the value a join service takes as a member's.

use confboot_cluster::mark::{ClusterMarks, mark_node, marked_pcr15};
use confboot_tpm::swtpm::Swtpm;

/// SHA-256 of `data`, computed here rather than by the crate under test.
fn sha256(data: &[u8]) -> [u8; 32] {
    let mut out = [0u8; 32];
    out.copy_from_slice(ring::digest::digest(&ring::digest::SHA256, data).as_ref());
    out
}

#[test]
fn marking_extends_pcr_15_with_the_cluster_id_digest() {
    let swtpm = Swtpm::start().unwrap();
    let mut tpm = swtpm.connect().unwrap();
    let before = tpm.pcr_read_all().unwrap();
    assert_eq!(before[15].1, [0; 32]);
    mark_node(&mut tpm, b"cluster-1").unwrap();
    let after = tpm.pcr_read_all().unwrap();
    // PCR 15 = SHA-256(0³² ‖ SHA-256(cluster id)).
    let mut chained = [0u8; 64];
    chained[32..].copy_from_slice(&sha256(b"cluster-1"));
    assert_eq!(after[15].1, sha256(&chained));
    assert_eq!(after[15].1, marked_pcr15(b"cluster-1"));
    assert_ne!(marked_pcr15(b"cluster-1"), marked_pcr15(b"cluster-2"));
    for i in (0..24).filter(|i| *i != 15) {
        assert_eq!(before[i], after[i], "PCR {i} changed");
    }
    assert_eq!(
        ClusterMarks::of(b"cluster-1").for_variant(confboot_attest::Variant::QemuVtpm),
        Some(&marked_pcr15(b"cluster-1")[..])
    );
}

#[test]
fn marking_one_tpm_leaves_another_unmarked() {
    let (a, b) = (Swtpm::start().unwrap(), Swtpm::start().unwrap());
    mark_node(&mut a.connect().unwrap(), b"a").unwrap();
    assert_eq!(b.connect().unwrap().pcr_read(&[15]).unwrap()[0].1, [0; 32]);
    assert_eq!(
        a.connect().unwrap().pcr_read(&[15]).unwrap()[0].1,
        marked_pcr15(b"a")
    );
}
