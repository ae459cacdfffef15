//! Opening a key slot: passphrase → KDF → the area's key → decrypt the AF
//! material → merge → the volume key, accepted only when the digest that
//! binds the slot to the data segment matches it.

use std::io::{Read, Seek, SeekFrom};

use super::af;
use super::area::{self, Direction};
use super::digest;
use super::error::Luks2Error;
use super::header::Header;
use super::kdf::KdfLimits;
use super::metadata::{AF_STRIPES, Keyslot, Priority};
use super::secret::{Secret, VolumeKey};

/// The key slots worth trying for the data segment, in cryptsetup's order
/// (high priority first, then normal; `ignore` slots never).
fn candidates(header: &Header) -> Result<Vec<(&Keyslot, &super::metadata::Digest)>, Luks2Error> {
    let meta = &header.metadata;
    if let Some(r) = meta.requirements.first() {
        return Err(Luks2Error::Unsupported {
            field: "config.requirements.mandatory".into(),
            value: r.clone(),
        });
    }
    let segment = meta.segments.first().ok_or(Luks2Error::Unsupported {
        field: "segments".into(),
        value: "no crypt segment".into(),
    })?;
    let mut out: Vec<_> = meta
        .keyslots
        .iter()
        .filter(|k| k.priority != Priority::Ignore)
        .filter_map(|k| {
            meta.digests
                .iter()
                .find(|d| d.keyslots.contains(&k.id) && d.segments.contains(&segment.id))
                .map(|d| (k, d))
        })
        .collect();
    out.sort_by_key(|(k, _)| std::cmp::Reverse(k.priority));
    Ok(out)
}

/// Tries one key slot.
fn try_slot(
    dev: &mut (impl Read + Seek),
    slot: &Keyslot,
    digest: &super::metadata::Digest,
    passphrase: &[u8],
    limits: &KdfLimits,
) -> Result<Option<VolumeKey>, Luks2Error> {
    let field = format!("keyslots.{}.kdf", slot.id);
    // Bounds before any work: the digest's cost too.
    slot.kdf.check(limits, &field)?;
    if digest.iterations > limits.pbkdf2_iterations {
        return Err(Luks2Error::CostTooHigh {
            field: format!("digests.{}.iterations", digest.id),
            value: digest.iterations.into(),
            limit: limits.pbkdf2_iterations.into(),
        });
    }
    let key = slot
        .kdf
        .derive(passphrase, slot.area_key_size, limits, &field)?;
    let mut material = Secret::zeroed(slot.material_len());
    dev.seek(SeekFrom::Start(slot.area_offset))?;
    dev.read_exact(material.expose_mut())?;
    area::crypt(key.expose(), material.expose_mut(), Direction::Decrypt)?;
    let candidate = af::merge(
        material.expose(),
        slot.key_size,
        AF_STRIPES as usize,
        slot.af_hash,
    );
    Ok(digest::matches(digest, candidate.expose(), limits)?.then_some(candidate))
}

/// The volume key `passphrase` opens in `header` on `dev`: each candidate
/// slot in turn, at most `limits.keyslot_attempts` of them.
pub fn unlock(
    dev: &mut (impl Read + Seek),
    header: &Header,
    passphrase: &[u8],
    limits: &KdfLimits,
) -> Result<VolumeKey, Luks2Error> {
    for (slot, digest) in candidates(header)?
        .into_iter()
        .take(limits.keyslot_attempts)
    {
        if let Some(key) = try_slot(dev, slot, digest, passphrase, limits)? {
            return Ok(key);
        }
    }
    Err(Luks2Error::WrongPassphrase)
}
