//! The cluster mark: what a bootstrapped node extends into a register its
//! attestation quotes, so that a join service can tell a node that has not
//! been bootstrapped since it booted (the register all zero) from a member
//! of its cluster (the register holding that cluster's mark).
//!
//! - A vTPM node extends PCR 15 ([`CLUSTER_ID_PCR`]) with SHA-256 of the
//!   cluster id: PCR 15 then holds [`marked_pcr15`]. An Azure SEV-SNP node
//!   does the same in its paravisor's vTPM, whose quote its evidence carries.
//! - A TD extends `RTMR3` ([`TDX_MARK_INDEX`] in its attested
//!   measurements) with SHA-384 of the cluster id ([`rtmr3_mark_digest`]):
//!   `RTMR3` then holds [`marked_rtmr3`]. Firmware and boot loader extend
//!   `RTMR0` to `RTMR2`; `RTMR3` is the TD's own, all zero until the TD
//!   extends it, as PCR 15 is a vTPM node's.
//!
//! [`ClusterMarks`] holds both values for one cluster id and reads an
//! attested peer against them ([`ClusterMarks::state_of`]); [`mark_node`]
//! and [`mark_td`] extend them. The TPM driver and the TDX crate provide
//! only the primitives (extend a PCR or an RTMR by a digest, the PCR
//! digest) and know nothing of the mark.

use std::collections::BTreeMap;

use confboot_attest::{Attested, Variant};
use confboot_tdx::{RTMR_LEN, Rtmr3Marker, RtmrError, extend};
use confboot_tpm::{CLUSTER_ID_PCR, Tpm, TpmError};

/// Where a TD's `RTMR3` is in its attested measurements (the CCEL
/// register index: 1 + 3).
pub const TDX_MARK_INDEX: u32 = 4;

/// What PCR 15 holds after a vTPM node marked itself on a fresh boot:
/// SHA-256(0³² ‖ SHA-256(cluster_id)).
pub fn marked_pcr15(cluster_id: &[u8]) -> [u8; 32] {
    confboot_tpm::pcr_digest([&[0u8; 32][..], &pcr15_mark_digest(cluster_id)[..]])
}

/// What a vTPM node extends PCR 15 with to mark itself: SHA-256(cluster_id).
fn pcr15_mark_digest(cluster_id: &[u8]) -> [u8; 32] {
    let mut out = [0u8; 32];
    out.copy_from_slice(ring::digest::digest(&ring::digest::SHA256, cluster_id).as_ref());
    out
}

/// Marks this node as bootstrapped: extends PCR 15's SHA-256 bank with
/// SHA-256(cluster_id), as Constellation does after init or join. From then
/// on validators that require an unmarked node refuse its quotes.
pub fn mark_node(tpm: &mut Tpm, cluster_id: &[u8]) -> Result<(), TpmError> {
    tpm.pcr_extend(CLUSTER_ID_PCR, &pcr15_mark_digest(cluster_id))?;
    log::info!("marked node as bootstrapped (PCR {CLUSTER_ID_PCR} extended with the cluster id)");
    Ok(())
}

/// Marks this TD as bootstrapped in the cluster `cluster_id`: `RTMR3`
/// extended with [`rtmr3_mark_digest`]. On a fresh boot it then holds
/// [`marked_rtmr3`], which a join service takes as a member's and never
/// serves a ticket.
pub fn mark_td(rtmr3: &Rtmr3Marker, cluster_id: &[u8]) -> Result<(), RtmrError> {
    let after = rtmr3.extend(&rtmr3_mark_digest(cluster_id))?;
    if after != marked_rtmr3(cluster_id) {
        log::warn!(
            "RTMR3 was not all zero before the cluster mark: join services will not take \
             this TD for a member"
        );
    }
    log::info!("marked TD as bootstrapped (RTMR3 extended with the cluster id)");
    Ok(())
}

/// What a TD extends `RTMR3` with to mark itself: SHA-384(cluster_id), the
/// SHA-384 form of the digest a vTPM node extends PCR 15 with.
pub fn rtmr3_mark_digest(cluster_id: &[u8]) -> [u8; RTMR_LEN] {
    let mut out = [0u8; RTMR_LEN];
    out.copy_from_slice(ring::digest::digest(&ring::digest::SHA384, cluster_id).as_ref());
    out
}

/// What `RTMR3` holds after a TD marked itself on a fresh boot:
/// SHA-384(0⁴⁸ ‖ SHA-384(cluster_id)).
pub fn marked_rtmr3(cluster_id: &[u8]) -> [u8; RTMR_LEN] {
    extend(&[0; RTMR_LEN], &rtmr3_mark_digest(cluster_id))
}

/// The marks of one cluster, one per variant that has a register for it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ClusterMarks {
    /// PCR 15 of a vTPM member ([`marked_pcr15`]).
    pub pcr15: [u8; 32],
    /// `RTMR3` of a TDX member ([`marked_rtmr3`]).
    pub rtmr3: [u8; RTMR_LEN],
}

/// What an attested peer's mark register says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MarkState {
    /// All zero: not bootstrapped since it booted.
    Unmarked,
    /// This cluster's mark: a bootstrapped member.
    Member,
    /// Neither zero nor this cluster's mark (another cluster's, or marked
    /// twice).
    Foreign,
}

/// Why an attested peer's mark cannot be read.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum MarkError {
    /// The variant has no register that shows a mark (SEV-SNP).
    #[error("{0} evidence has no register that shows the cluster mark")]
    NoMarkRegister(Variant),
    /// The register is not in the attested measurements, or not of its
    /// length.
    #[error("its attestation has no {register} of {len} bytes")]
    Missing {
        /// The register's name (`PCR 15`, `RTMR3`).
        register: &'static str,
        /// Its length.
        len: usize,
    },
}

/// The register that shows the mark for `variant`: its name, index in the
/// attested measurements and length; `None` for SEV-SNP.
pub fn mark_register(variant: Variant) -> Option<(&'static str, u32, usize)> {
    match variant {
        Variant::QemuVtpm | Variant::AzureSevSnp => Some(("PCR 15", CLUSTER_ID_PCR, 32)),
        Variant::Tdx => Some(("RTMR3", TDX_MARK_INDEX, RTMR_LEN)),
        Variant::SevSnp => None,
    }
}

impl ClusterMarks {
    /// The marks of `cluster_id`.
    pub fn of(cluster_id: &[u8]) -> ClusterMarks {
        ClusterMarks {
            pcr15: marked_pcr15(cluster_id),
            rtmr3: marked_rtmr3(cluster_id),
        }
    }

    /// This cluster's mark for `variant`, `None` where it has no register.
    pub fn for_variant(&self, variant: Variant) -> Option<&[u8]> {
        match variant {
            Variant::QemuVtpm | Variant::AzureSevSnp => Some(&self.pcr15),
            Variant::Tdx => Some(&self.rtmr3),
            Variant::SevSnp => None,
        }
    }

    /// Reads `peer`'s mark register against this cluster's mark.
    pub fn state_of(&self, peer: &Attested) -> Result<MarkState, MarkError> {
        self.state_in(peer.variant, &peer.measurements)
    }

    /// [`ClusterMarks::state_of`] on a variant and its measurements.
    pub fn state_in(
        &self,
        variant: Variant,
        measurements: &BTreeMap<u32, Vec<u8>>,
    ) -> Result<MarkState, MarkError> {
        let (Some((register, index, len)), Some(mark)) =
            (mark_register(variant), self.for_variant(variant))
        else {
            return Err(MarkError::NoMarkRegister(variant));
        };
        match measurements.get(&index) {
            Some(v) if v.len() != len => Err(MarkError::Missing { register, len }),
            None => Err(MarkError::Missing { register, len }),
            Some(v) if v.iter().all(|b| *b == 0) => Ok(MarkState::Unmarked),
            Some(v) if v.as_slice() == mark => Ok(MarkState::Member),
            Some(_) => Ok(MarkState::Foreign),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn peer(variant: Variant, index: u32, value: Vec<u8>) -> Attested {
        Attested {
            set_verdict: None,
            warnings: Vec::new(),
            variant,
            measurements: BTreeMap::from([(index, value)]),
        }
    }

    #[test]
    fn marked_pcr15_is_extend_of_zero() {
        let id = [7u8; 32];
        let h = ring::digest::digest(&ring::digest::SHA256, &id);
        let mut cat = vec![0u8; 32];
        cat.extend_from_slice(h.as_ref());
        assert_eq!(
            &marked_pcr15(&id)[..],
            ring::digest::digest(&ring::digest::SHA256, &cat).as_ref()
        );
    }

    #[test]
    fn the_rtmr3_mark_is_the_sha384_form_of_the_pcr15_mark() {
        let id = b"cluster-1";
        let sha384 = ring::digest::digest(&ring::digest::SHA384, id);
        assert_eq!(rtmr3_mark_digest(id)[..], *sha384.as_ref());
        let mut both = vec![0u8; 48];
        both.extend_from_slice(sha384.as_ref());
        assert_eq!(
            marked_rtmr3(id)[..],
            *ring::digest::digest(&ring::digest::SHA384, &both).as_ref()
        );
        assert_ne!(marked_rtmr3(id), marked_rtmr3(b"cluster-2"));
    }

    #[test]
    fn a_peer_is_unmarked_a_member_or_foreign_by_its_variants_register() {
        let marks = ClusterMarks::of(b"cluster-1");
        let other = ClusterMarks::of(b"cluster-2");
        for (variant, index, len, mark, foreign) in [
            (
                Variant::QemuVtpm,
                CLUSTER_ID_PCR,
                32,
                marks.pcr15.to_vec(),
                other.pcr15.to_vec(),
            ),
            (
                Variant::Tdx,
                TDX_MARK_INDEX,
                48,
                marks.rtmr3.to_vec(),
                other.rtmr3.to_vec(),
            ),
        ] {
            let state = |v: Vec<u8>| marks.state_of(&peer(variant, index, v));
            assert_eq!(state(vec![0; len]), Ok(MarkState::Unmarked));
            assert_eq!(state(mark.clone()), Ok(MarkState::Member));
            assert_eq!(state(foreign), Ok(MarkState::Foreign));
            assert!(matches!(
                state(vec![0; len + 1]),
                Err(MarkError::Missing { .. })
            ));
            assert!(matches!(
                marks.state_of(&peer(variant, index + 1, mark)),
                Err(MarkError::Missing { .. })
            ));
        }
        // The other variant's register never stands in.
        assert!(matches!(
            marks.state_of(&peer(Variant::Tdx, CLUSTER_ID_PCR, marks.pcr15.to_vec())),
            Err(MarkError::Missing { .. })
        ));
        assert_eq!(
            marks.state_of(&peer(Variant::SevSnp, 0, marks.rtmr3.to_vec())),
            Err(MarkError::NoMarkRegister(Variant::SevSnp))
        );
    }
}
