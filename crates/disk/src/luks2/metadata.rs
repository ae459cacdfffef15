//! The JSON area: parsed into typed, checked values with every count,
//! size, cost-free integer and offset bounded, and kept as JSON so that a
//! write changes only what it means to (tokens) and keeps what cryptsetup
//! wrote that this implementation does not read.
//!
//! Bounds (LUKS2's own where it has them): at most [`MAX_ENTRIES`] key
//! slots, tokens, segments and digests, ids `"0"` to `"31"`; offsets and
//! sizes as decimal strings of at most 20 digits that fit a `u64`; key-slot
//! areas 4 KiB-aligned, inside the key-slot region and the device, not
//! overlapping each other or the headers; the data segment after the
//! key-slot region; `config.json_size` equal to the JSON area's size.
//! KDF costs are bounded when they are used ([`super::kdf::KdfLimits`]).
//!
//! Read as a JSON value, not with a serde derive: the metadata is kept as a
//! value so that it is written back as cryptsetup wrote it, members this crate
//! does not know included.

use serde_json::{Map, Value};

use super::area;
use super::error::{Luks2Error, MetadataProblem as P, meta};
use super::hash::Hash;
use super::kdf::{Argon2Variant, Kdf};

/// The most key slots, tokens, segments and digests a header may have
/// (LUKS2's limit for key slots and tokens).
pub const MAX_ENTRIES: usize = 32;
/// The AF stripes LUKS2 uses (cryptsetup refuses any other count).
pub const AF_STRIPES: u32 = 4000;
/// Alignment of key-slot areas and the key-slot region.
pub const AREA_ALIGN: u64 = 4096;
/// The most bytes of a token's JSON (cryptsetup's tokens are small; the
/// JSON area bounds the sum).
pub const MAX_TOKEN_JSON: usize = 64 << 10;

/// A key slot's priority.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Priority {
    /// 0: never tried without naming it.
    Ignore,
    /// 1 (the default).
    Normal,
    /// 2: tried first.
    High,
}

/// A `luks2` key slot.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Keyslot {
    /// Its id.
    pub id: u32,
    /// The size of the key it keeps (the volume key), bytes.
    pub key_size: usize,
    /// Its priority.
    pub priority: Priority,
    /// The AF hash (stripes are [`AF_STRIPES`]).
    pub af_hash: Hash,
    /// Where its area starts on the device.
    pub area_offset: u64,
    /// Its area's size.
    pub area_size: u64,
    /// The area's key size (the KDF's output), bytes.
    pub area_key_size: usize,
    /// How the passphrase becomes the area's key.
    pub kdf: Kdf,
}

impl Keyslot {
    /// Bytes of AF material in the area: the split key, rounded up to sectors.
    pub fn material_len(&self) -> usize {
        let raw = self.key_size * AF_STRIPES as usize;
        raw.div_ceil(area::AREA_SECTOR) * area::AREA_SECTOR
    }
}

/// A `crypt` data segment.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Segment {
    /// Its id.
    pub id: u32,
    /// Where the data starts on the device.
    pub offset: u64,
    /// Its size; `None` for `"dynamic"` (to the end of the device).
    pub size: Option<u64>,
    /// The IV offset, in sectors.
    pub iv_tweak: u64,
    /// Its cipher.
    pub encryption: String,
    /// Its sector size (512 to 4096, a power of two).
    pub sector_size: u32,
}

/// A `pbkdf2` digest of the volume key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Digest {
    /// Its id.
    pub id: u32,
    /// The key slots whose key it checks.
    pub keyslots: Vec<u32>,
    /// The segments whose key it checks.
    pub segments: Vec<u32>,
    /// PBKDF2's hash.
    pub hash: Hash,
    /// PBKDF2's iterations.
    pub iterations: u32,
    /// PBKDF2's salt.
    pub salt: Vec<u8>,
    /// The expected output.
    pub digest: Vec<u8>,
}

/// The parsed JSON area.
#[derive(Clone, Debug, PartialEq)]
pub struct Metadata {
    json: Map<String, Value>,
    /// The `luks2` key slots, by id.
    pub keyslots: Vec<Keyslot>,
    /// The `crypt` segments, by id.
    pub segments: Vec<Segment>,
    /// The digests, by id.
    pub digests: Vec<Digest>,
    /// `config.keyslots_size`.
    pub keyslots_size: u64,
    /// `config.requirements.mandatory` (a header needing anything is not
    /// unlocked: it is mid-reencryption or uses a feature this does not know).
    pub requirements: Vec<String>,
}

fn obj<'a>(v: &'a Value, field: &str) -> Result<&'a Map<String, Value>, Luks2Error> {
    v.as_object().ok_or_else(|| meta(field, P::Type))
}

fn get<'a>(m: &'a Map<String, Value>, key: &str, field: &str) -> Result<&'a Value, Luks2Error> {
    m.get(key)
        .ok_or_else(|| meta(format!("{field}.{key}"), P::Missing))
}

fn string<'a>(m: &'a Map<String, Value>, key: &str, field: &str) -> Result<&'a str, Luks2Error> {
    get(m, key, field)?
        .as_str()
        .ok_or_else(|| meta(format!("{field}.{key}"), P::Type))
}

/// A JSON integer in `range`.
fn int<T: TryFrom<u64>>(
    m: &Map<String, Value>,
    key: &str,
    field: &str,
    range: std::ops::RangeInclusive<u64>,
) -> Result<T, Luks2Error> {
    let v = get(m, key, field)?
        .as_u64()
        .ok_or_else(|| meta(format!("{field}.{key}"), P::Type))?;
    if !range.contains(&v) {
        return Err(meta(format!("{field}.{key}"), P::Range));
    }
    T::try_from(v).map_err(|_| meta(format!("{field}.{key}"), P::Range))
}

/// A `u64` written as a decimal string (LUKS2's offsets and sizes).
fn u64_string(m: &Map<String, Value>, key: &str, field: &str) -> Result<u64, Luks2Error> {
    let s = string(m, key, field)?;
    parse_u64(s).ok_or_else(|| meta(format!("{field}.{key}"), P::Range))
}

fn parse_u64(s: &str) -> Option<u64> {
    if s.is_empty() || s.len() > 20 || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse().ok()
}

fn base64(
    m: &Map<String, Value>,
    key: &str,
    field: &str,
    max: usize,
) -> Result<Vec<u8>, Luks2Error> {
    let s = string(m, key, field)?;
    if s.len() > max.div_ceil(3) * 4 + 4 {
        return Err(meta(format!("{field}.{key}"), P::Range));
    }
    confboot_util::base64::decode(s).map_err(|_| meta(format!("{field}.{key}"), P::Base64))
}

/// An object id: `"0"` to `"31"`, no leading zero.
pub fn parse_id(s: &str) -> Option<u32> {
    let n = parse_u64(s)?;
    let n = u32::try_from(n).ok()?;
    (usize::try_from(n).is_ok_and(|i| i < MAX_ENTRIES) && n.to_string() == s).then_some(n)
}

/// An entry of an id-keyed object: its id and its object.
type Entry<'a> = (u32, &'a Map<String, Value>);

/// The entries of one of the root's id-keyed objects, bounded.
fn entries<'a>(root: &'a Map<String, Value>, key: &str) -> Result<Vec<Entry<'a>>, Luks2Error> {
    let m = obj(get(root, key, "")?, key)?;
    if m.len() > MAX_ENTRIES {
        return Err(meta(key, P::TooMany));
    }
    let mut out = Vec::with_capacity(m.len());
    for (k, v) in m {
        let id = parse_id(k).ok_or_else(|| meta(format!("{key}.{}", clip(k)), P::Id))?;
        out.push((id, obj(v, &format!("{key}.{id}"))?));
    }
    out.sort_by_key(|(id, _)| *id);
    Ok(out)
}

/// A JSON array of id strings.
fn id_list(m: &Map<String, Value>, key: &str, field: &str) -> Result<Vec<u32>, Luks2Error> {
    let f = format!("{field}.{key}");
    let a = get(m, key, field)?
        .as_array()
        .ok_or_else(|| meta(f.as_str(), P::Type))?;
    if a.len() > MAX_ENTRIES {
        return Err(meta(f, P::TooMany));
    }
    a.iter()
        .map(|v| {
            v.as_str()
                .and_then(parse_id)
                .ok_or_else(|| meta(f.as_str(), P::Id))
        })
        .collect()
}

/// A key for error messages: short and printable.
fn clip(s: &str) -> String {
    s.chars()
        .take(16)
        .map(|c| if c.is_ascii_graphic() { c } else { '?' })
        .collect()
}

fn parse_kdf(m: &Map<String, Value>, field: &str) -> Result<Kdf, Luks2Error> {
    let salt = base64(m, "salt", field, 256)?;
    let kind = string(m, "type", field)?;
    let u32max = u64::from(u32::MAX);
    Ok(match kind {
        "pbkdf2" => Kdf::Pbkdf2 {
            hash: Hash::from_name(string(m, "hash", field)?, &format!("{field}.hash"))?,
            iterations: int::<u32>(m, "iterations", field, 1..=u32max)?,
            salt,
        },
        "argon2i" | "argon2id" => Kdf::Argon2 {
            variant: if kind == "argon2i" {
                Argon2Variant::Argon2i
            } else {
                Argon2Variant::Argon2id
            },
            time: int::<u32>(m, "time", field, 1..=u32max)?,
            memory_kib: int::<u32>(m, "memory", field, 1..=u32max)?,
            cpus: int::<u32>(m, "cpus", field, 1..=u32max)?,
            salt,
        },
        other => {
            return Err(Luks2Error::Unsupported {
                field: format!("{field}.type"),
                value: clip(other),
            });
        }
    })
}

fn parse_keyslot(id: u32, m: &Map<String, Value>) -> Result<Option<Keyslot>, Luks2Error> {
    let field = format!("keyslots.{id}");
    if string(m, "type", &field)? != "luks2" {
        // Another kind (a reencryption slot): kept, never unlocked.
        return Ok(None);
    }
    let key_size = int::<usize>(m, "key_size", &field, 1..=512)?;
    let priority = match m.get("priority") {
        None => Priority::Normal,
        Some(v) => match v.as_u64() {
            Some(0) => Priority::Ignore,
            Some(1) => Priority::Normal,
            Some(2) => Priority::High,
            _ => return Err(meta(format!("{field}.priority"), P::Range)),
        },
    };
    let af_field = format!("{field}.af");
    let af = obj(get(m, "af", &field)?, &af_field)?;
    if string(af, "type", &af_field)? != "luks1" {
        return Err(Luks2Error::Unsupported {
            field: format!("{af_field}.type"),
            value: clip(string(af, "type", &af_field)?),
        });
    }
    if int::<u64>(af, "stripes", &af_field, 1..=u64::from(u32::MAX))? != u64::from(AF_STRIPES) {
        return Err(meta(format!("{af_field}.stripes"), P::Range));
    }
    let af_hash = Hash::from_name(string(af, "hash", &af_field)?, &format!("{af_field}.hash"))?;
    let area_field = format!("{field}.area");
    let ar = obj(get(m, "area", &field)?, &area_field)?;
    if string(ar, "type", &area_field)? != "raw" {
        return Err(Luks2Error::Unsupported {
            field: format!("{area_field}.type"),
            value: clip(string(ar, "type", &area_field)?),
        });
    }
    let area_key_size = int::<usize>(ar, "key_size", &area_field, 1..=512)?;
    area::check(
        string(ar, "encryption", &area_field)?,
        area_key_size,
        &area_field,
    )?;
    let kdf_field = format!("{field}.kdf");
    let kdf = parse_kdf(obj(get(m, "kdf", &field)?, &kdf_field)?, &kdf_field)?;
    let slot = Keyslot {
        id,
        key_size,
        priority,
        af_hash,
        area_offset: u64_string(ar, "offset", &area_field)?,
        area_size: u64_string(ar, "size", &area_field)?,
        area_key_size,
        kdf,
    };
    if !slot.area_offset.is_multiple_of(AREA_ALIGN) || !slot.area_size.is_multiple_of(AREA_ALIGN) {
        return Err(meta(area_field, P::Alignment));
    }
    if (slot.material_len() as u64) > slot.area_size {
        return Err(meta(format!("{area_field}.size"), P::Range));
    }
    Ok(Some(slot))
}

fn parse_segment(id: u32, m: &Map<String, Value>) -> Result<Segment, Luks2Error> {
    let field = format!("segments.{id}");
    let kind = string(m, "type", &field)?;
    if kind != "crypt" {
        return Err(Luks2Error::Unsupported {
            field: format!("{field}.type"),
            value: clip(kind),
        });
    }
    let size = match string(m, "size", &field)? {
        "dynamic" => None,
        s => Some(parse_u64(s).ok_or_else(|| meta(format!("{field}.size"), P::Range))?),
    };
    let sector_size = int::<u32>(m, "sector_size", &field, 512..=4096)?;
    if !sector_size.is_power_of_two() {
        return Err(meta(format!("{field}.sector_size"), P::Range));
    }
    let offset = u64_string(m, "offset", &field)?;
    if !offset.is_multiple_of(u64::from(sector_size)) {
        return Err(meta(format!("{field}.offset"), P::Alignment));
    }
    Ok(Segment {
        id,
        offset,
        size,
        iv_tweak: u64_string(m, "iv_tweak", &field)?,
        encryption: string(m, "encryption", &field)?.to_string(),
        sector_size,
    })
}

fn parse_digest(id: u32, m: &Map<String, Value>) -> Result<Digest, Luks2Error> {
    let field = format!("digests.{id}");
    let kind = string(m, "type", &field)?;
    if kind != "pbkdf2" {
        return Err(Luks2Error::Unsupported {
            field: format!("{field}.type"),
            value: clip(kind),
        });
    }
    let hash = Hash::from_name(string(m, "hash", &field)?, &format!("{field}.hash"))?;
    let digest = base64(m, "digest", &field, 64)?;
    if digest.is_empty() || digest.len() > hash.digest().output_len() {
        return Err(meta(format!("{field}.digest"), P::Range));
    }
    Ok(Digest {
        id,
        keyslots: id_list(m, "keyslots", &field)?,
        segments: id_list(m, "segments", &field)?,
        hash,
        iterations: int::<u32>(m, "iterations", &field, 1..=u64::from(u32::MAX))?,
        salt: base64(m, "salt", &field, 256)?,
        digest,
    })
}

/// Checks a token object: `type` a string, `keyslots` an array of ids.
pub fn check_token(id: u32, m: &Map<String, Value>) -> Result<(), Luks2Error> {
    let field = format!("tokens.{id}");
    string(m, "type", &field)?;
    id_list(m, "keyslots", &field)?;
    Ok(())
}

impl Metadata {
    /// Parses the JSON area of a header of `hdr_size` bytes on a device of
    /// `device_size` bytes: the text up to the first NUL (the area must
    /// have one).
    pub fn parse(
        json_area: &[u8],
        hdr_size: u64,
        device_size: u64,
    ) -> Result<Metadata, Luks2Error> {
        let end = json_area
            .iter()
            .position(|&b| b == 0)
            .ok_or_else(|| meta("(json area)", P::Syntax))?;
        let root: Value = serde_json::from_slice(&json_area[..end])
            .map_err(|_| meta("(json area)", P::Syntax))?;
        let Value::Object(json) = root else {
            return Err(meta("(root)", P::Type));
        };
        Metadata::from_json(json, hdr_size, device_size)
    }

    /// Checks a JSON object as the metadata of a header of `hdr_size`
    /// bytes on a device of `device_size` bytes.
    pub fn from_json(
        json: Map<String, Value>,
        hdr_size: u64,
        device_size: u64,
    ) -> Result<Metadata, Luks2Error> {
        let config = obj(get(&json, "config", "")?, "config")?;
        if u64_string(config, "json_size", "config")?
            != hdr_size - super::binary::BINARY_SIZE as u64
        {
            return Err(meta("config.json_size", P::Range));
        }
        let keyslots_size = u64_string(config, "keyslots_size", "config")?;
        if !keyslots_size.is_multiple_of(AREA_ALIGN) {
            return Err(meta("config.keyslots_size", P::Alignment));
        }
        let region_start = 2 * hdr_size;
        let region_end = region_start
            .checked_add(keyslots_size)
            .ok_or_else(|| meta("config.keyslots_size", P::Range))?;
        let mut requirements = Vec::new();
        if let Some(req) = config.get("requirements") {
            let req = obj(req, "config.requirements")?;
            if let Some(mandatory) = req.get("mandatory") {
                let list = mandatory
                    .as_array()
                    .ok_or_else(|| meta("config.requirements.mandatory", P::Type))?;
                if list.len() > MAX_ENTRIES {
                    return Err(meta("config.requirements.mandatory", P::TooMany));
                }
                for r in list {
                    let r = r
                        .as_str()
                        .ok_or_else(|| meta("config.requirements.mandatory", P::Type))?;
                    requirements.push(clip(r));
                }
            }
        }

        let mut keyslots = Vec::new();
        let mut areas: Vec<(u64, u64)> = Vec::new();
        for (id, m) in entries(&json, "keyslots")? {
            // Every slot's area is checked, whatever its kind.
            if let Some(ar) = m.get("area").and_then(Value::as_object) {
                let f = format!("keyslots.{id}.area");
                let offset = u64_string(ar, "offset", &f)?;
                let size = u64_string(ar, "size", &f)?;
                let end = offset
                    .checked_add(size)
                    .ok_or_else(|| meta(f.as_str(), P::Range))?;
                if offset < region_start || end > region_end || end > device_size {
                    return Err(meta(f, P::Overlap));
                }
                if areas.iter().any(|&(o, e)| offset < e && o < end) {
                    return Err(meta(f, P::Overlap));
                }
                areas.push((offset, end));
            }
            match parse_keyslot(id, m) {
                Ok(Some(slot)) => keyslots.push(slot),
                // Kept in the JSON, never unlocked.
                Ok(None) | Err(Luks2Error::Unsupported { .. }) => {}
                Err(e) => return Err(e),
            }
        }
        let mut segments = Vec::new();
        for (id, m) in entries(&json, "segments")? {
            let s = match parse_segment(id, m) {
                Ok(s) => s,
                Err(Luks2Error::Unsupported { .. }) => continue,
                Err(e) => return Err(e),
            };
            if s.offset < region_end {
                return Err(meta(format!("segments.{id}.offset"), P::Overlap));
            }
            segments.push(s);
        }
        let mut digests = Vec::new();
        for (id, m) in entries(&json, "digests")? {
            let d = match parse_digest(id, m) {
                Ok(d) => d,
                Err(Luks2Error::Unsupported { .. }) => continue,
                Err(e) => return Err(e),
            };
            let known = |key: &str, id: &u32| {
                json[key]
                    .as_object()
                    .is_some_and(|o| o.contains_key(&id.to_string()))
            };
            if !d.keyslots.iter().all(|k| known("keyslots", k))
                || !d.segments.iter().all(|s| known("segments", s))
            {
                return Err(meta(format!("digests.{id}"), P::Reference));
            }
            digests.push(d);
        }
        for (id, m) in entries(&json, "tokens")? {
            check_token(id, m)?;
        }
        Ok(Metadata {
            json,
            keyslots,
            segments,
            digests,
            keyslots_size,
            requirements,
        })
    }

    /// The JSON object (what is written back).
    pub fn json(&self) -> &Map<String, Value> {
        &self.json
    }

    /// The tokens, by id: each a JSON object with at least `type` and `keyslots`.
    pub fn tokens(&self) -> Vec<(u32, &Map<String, Value>)> {
        entries(&self.json, "tokens").unwrap_or_default()
    }

    /// The JSON text, compact, as written into the JSON area.
    pub fn to_text(&self) -> String {
        Value::Object(self.json.clone()).to_string()
    }

    /// A copy with `tokens` replaced (checked like a header read).
    pub fn with_tokens(
        &self,
        tokens: Map<String, Value>,
        hdr_size: u64,
        device_size: u64,
    ) -> Result<Metadata, Luks2Error> {
        let mut json = self.json.clone();
        json.insert("tokens".into(), Value::Object(tokens));
        Metadata::from_json(json, hdr_size, device_size)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_small_canonical_decimals() {
        assert_eq!(parse_id("0"), Some(0));
        assert_eq!(parse_id("31"), Some(31));
        for bad in ["32", "01", "-1", "", "1e1", "99999999999999999999999"] {
            assert_eq!(parse_id(bad), None, "{bad}");
        }
        assert_eq!(parse_u64("18446744073709551615"), Some(u64::MAX));
        assert_eq!(parse_u64("18446744073709551616"), None);
    }
}
