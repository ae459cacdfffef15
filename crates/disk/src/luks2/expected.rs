//! The header a node accepts: exactly the one it writes.
//!
//! The JSON area is not authenticated (its checksum is a SHA-256 the host
//! recomputes), so nothing in it may choose how the node's data is
//! encrypted or what unlocking costs. A node formats its state disk with
//! fixed parameters ([`super::format`], or cryptsetup given the same
//! ones, [`crate::CryptsetupBackend`]) and opens only a header that
//! carries exactly those; any other value, missing member or extra member
//! is refused by name ([`Luks2Error::NotAsWritten`]) before any key
//! derivation runs and before anything is mapped. Nothing is "repaired"
//! into use.
//!
//! Pinned (what [`ExpectedHeader::check`] compares):
//! - `binary.hdr_size`: 16 KiB, and `config` exactly `json_size` 12288 and
//!   `keyslots_size` 16744448 (the key-slot region up to the data);
//! - `segments`: exactly one, `"0"`, exactly `{type: crypt, offset:
//!   "16777216", size: "dynamic", iv_tweak: "0", encryption:
//!   aes-xts-plain64, sector_size: N}` with N the node's sector size;
//! - `keyslots`: exactly one, `"0"`, `luks2` with a 64-byte key, AF
//!   `luks1`/4000 stripes/`sha256`, area `raw` at 32768 of 258048 bytes in
//!   `aes-xts-plain64` with a 64-byte key, and the KDF the node formats
//!   with ([`ExpectedKdf`]): its kind and every cost (at most the node's
//!   for Argon2 that cryptsetup wrote), a 32-byte salt;
//! - `digests`: exactly one, `"0"`, `pbkdf2`/`sha256` over key slot 0 and
//!   segment 0, the node's iterations, a 32-byte salt and digest;
//! - `tokens`: the node's tokens are bound to no key slot, so a token
//!   bound to one is refused (their content is read, checked, where it is
//!   used: [`crate::cryptsetup::HeaderMetadata`]).
//!
//! Not pinned, because they choose nothing: the UUID (it chooses the key
//! the node derives, and a wrong key opens nothing), the label and
//! subsystem, `seqid`, and the salts' and digest's bytes.

use std::ops::RangeInclusive;

use serde_json::Value;

use super::binary::BINARY_SIZE;
use super::error::Luks2Error;
use super::format::{
    DATA_OFFSET, FormatOptions, HEADER_SIZE, KEYSLOT_AREA_SIZE, KEYSLOTS_SIZE, KEYSLOTS_START,
    KdfChoice, SALT_LEN, VOLUME_KEY_LEN,
};
use super::header::Header;
use super::metadata::AF_STRIPES;

/// The one cipher of the data segment and of key-slot areas.
const CIPHER: &str = super::area::CIPHER;
/// The one hash of PBKDF2, the AF splitter and the digest.
const HASH: &str = "sha256";
/// cryptsetup's least PBKDF2 iterations.
const MIN_PBKDF2_ITERATIONS: u32 = 1000;
/// Argon2's least memory (8 KiB a lane, one lane).
const MIN_ARGON2_MEMORY_KIB: u32 = 8;
/// The most characters of a header value quoted in an error.
const QUOTED: usize = 40;

/// How the key slot's password hashing is pinned.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ExpectedKdf {
    /// Exactly this kind and these costs (PBKDF2 with SHA-256), as the
    /// node formats with.
    Exactly(KdfChoice),
    /// This kind, each cost at most this one (and the kind's least): for
    /// Argon2 that cryptsetup wrote, which lowers the lanes to the CPUs
    /// online and the memory to what the machine has. A header cannot ask
    /// for more than the node would.
    AtMost(KdfChoice),
}

/// The parameters of a header the node writes, which are the only ones it
/// opens ([`check`](Self::check)).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ExpectedHeader {
    /// Key slot 0's password hashing.
    pub kdf: ExpectedKdf,
    /// The digest's PBKDF2 iterations (one value when the node chose them).
    pub digest_iterations: RangeInclusive<u32>,
    /// The data segment's sector size.
    pub sector_size: u32,
}

impl ExpectedHeader {
    /// The header [`super::Luks2::format`] writes with `options`.
    pub fn written_with(options: &FormatOptions) -> ExpectedHeader {
        ExpectedHeader {
            kdf: ExpectedKdf::Exactly(options.kdf),
            digest_iterations: options.digest_iterations..=options.digest_iterations,
            sector_size: options.sector_size,
        }
    }

    /// Checks `header` against what the node writes: `Ok` only when every
    /// pinned field (see the module's documentation) is the node's; else
    /// the first field that is not, by name, with what it holds.
    pub fn check(&self, header: &Header) -> Result<(), Luks2Error> {
        if header.binary.hdr_size != HEADER_SIZE {
            return Err(refused(
                "binary.hdr_size",
                header.binary.hdr_size.to_string(),
                HEADER_SIZE.to_string(),
            ));
        }
        let root = Value::Object(header.metadata.json().clone());
        walk("", Some(&root), &self.template())
    }

    /// The JSON area the node writes, as a pattern.
    fn template(&self) -> Want {
        let text = |t: &str| Want::Is(Value::from(t));
        let number = |n: u64| Want::Is(Value::from(n));
        let key_size = || number(VOLUME_KEY_LEN as u64);
        let id_zero = || Want::Is(Value::from(vec!["0"]));
        let keyslot = Want::Object(vec![
            ("type", text("luks2")),
            ("key_size", key_size()),
            (
                "af",
                Want::Object(vec![
                    ("type", text("luks1")),
                    ("stripes", number(AF_STRIPES.into())),
                    ("hash", text(HASH)),
                ]),
            ),
            (
                "area",
                Want::Object(vec![
                    ("type", text("raw")),
                    ("offset", text(&KEYSLOTS_START.to_string())),
                    ("size", text(&KEYSLOT_AREA_SIZE.to_string())),
                    ("encryption", text(CIPHER)),
                    ("key_size", key_size()),
                ]),
            ),
            ("kdf", self.kdf_template()),
        ]);
        let segment = Want::Object(vec![
            ("type", text("crypt")),
            ("offset", text(&DATA_OFFSET.to_string())),
            ("size", text("dynamic")),
            ("iv_tweak", text("0")),
            ("encryption", text(CIPHER)),
            ("sector_size", number(self.sector_size.into())),
        ]);
        let digest = Want::Object(vec![
            ("type", text("pbkdf2")),
            ("keyslots", id_zero()),
            ("segments", id_zero()),
            ("hash", text(HASH)),
            (
                "iterations",
                Want::Integer(
                    (*self.digest_iterations.start()).into()
                        ..=(*self.digest_iterations.end()).into(),
                ),
            ),
            ("salt", Want::Base64(SALT_LEN)),
            ("digest", Want::Base64(SALT_LEN)),
        ]);
        Want::Object(vec![
            ("keyslots", Want::Object(vec![("0", keyslot)])),
            ("tokens", Want::UnboundTokens),
            ("segments", Want::Object(vec![("0", segment)])),
            ("digests", Want::Object(vec![("0", digest)])),
            (
                "config",
                Want::Object(vec![
                    (
                        "json_size",
                        text(&(HEADER_SIZE - BINARY_SIZE as u64).to_string()),
                    ),
                    ("keyslots_size", text(&KEYSLOTS_SIZE.to_string())),
                ]),
            ),
        ])
    }

    /// Key slot 0's `kdf` object.
    fn kdf_template(&self) -> Want {
        let text = |t: &str| Want::Is(Value::from(t));
        let (choice, at_most) = match self.kdf {
            ExpectedKdf::Exactly(choice) => (choice, false),
            ExpectedKdf::AtMost(choice) => (choice, true),
        };
        let cost = |least: u32, n: u32| {
            if at_most {
                Want::Integer(least.into()..=n.into())
            } else {
                Want::Is(Value::from(n))
            }
        };
        let salt = ("salt", Want::Base64(SALT_LEN));
        let (kind, time, memory_kib, cpus) = match choice {
            KdfChoice::Pbkdf2 { iterations } => {
                return Want::Object(vec![
                    ("type", text("pbkdf2")),
                    ("hash", text(HASH)),
                    ("iterations", cost(MIN_PBKDF2_ITERATIONS, iterations)),
                    salt,
                ]);
            }
            KdfChoice::Argon2id {
                time,
                memory_kib,
                cpus,
            } => ("argon2id", time, memory_kib, cpus),
            KdfChoice::Argon2i {
                time,
                memory_kib,
                cpus,
            } => ("argon2i", time, memory_kib, cpus),
        };
        Want::Object(vec![
            ("type", text(kind)),
            ("time", cost(1, time)),
            ("memory", cost(MIN_ARGON2_MEMORY_KIB, memory_kib)),
            ("cpus", cost(1, cpus)),
            salt,
        ])
    }
}

/// A pattern of JSON.
enum Want {
    /// Exactly this value.
    Is(Value),
    /// An object with exactly these members, each as its pattern says.
    Object(Vec<(&'static str, Want)>),
    /// An integer in this range.
    Integer(RangeInclusive<u64>),
    /// Base64 of exactly this many bytes.
    Base64(usize),
    /// The `tokens` object: any tokens, each bound to no key slot.
    UnboundTokens,
}

impl Want {
    /// What the node writes, for an error.
    fn describe(&self) -> String {
        match self {
            Want::Is(v) => quote(v),
            Want::Object(_) => "an object".into(),
            Want::Integer(r) if r.start() == r.end() => r.start().to_string(),
            Want::Integer(r) => format!("{} to {}", r.start(), r.end()),
            Want::Base64(n) => format!("{n} bytes in base64"),
            Want::UnboundTokens => "an object of tokens".into(),
        }
    }
}

/// Checks `found` at `field` against `want`.
fn walk(field: &str, found: Option<&Value>, want: &Want) -> Result<(), Luks2Error> {
    let Some(found) = found else {
        return Err(refused(field, "absent".into(), want.describe()));
    };
    let mismatch = || Err(refused(field, quote(found), want.describe()));
    match want {
        Want::Is(value) if found == value => Ok(()),
        Want::Is(_) => mismatch(),
        Want::Integer(range) => match found.as_u64() {
            Some(n) if range.contains(&n) => Ok(()),
            _ => mismatch(),
        },
        Want::Base64(len) => match found.as_str().map(confboot_util::base64::decode) {
            Some(Ok(bytes)) if bytes.len() == *len => Ok(()),
            _ => mismatch(),
        },
        Want::Object(members) => {
            let Some(object) = found.as_object() else {
                return mismatch();
            };
            for (name, want) in members {
                walk(&join(field, name), object.get(*name), want)?;
            }
            match object
                .keys()
                .find(|k| !members.iter().any(|(name, _)| name == k))
            {
                Some(extra) => Err(refused(
                    &join(field, &printable(extra)),
                    "present".into(),
                    "absent".into(),
                )),
                None => Ok(()),
            }
        }
        Want::UnboundTokens => {
            let Some(tokens) = found.as_object() else {
                return mismatch();
            };
            for (id, token) in tokens {
                let field = join(&join(field, &printable(id)), "keyslots");
                let bound = token.get("keyslots");
                if bound
                    .and_then(Value::as_array)
                    .is_none_or(|k| !k.is_empty())
                {
                    return Err(refused(
                        &field,
                        bound.map_or_else(|| "absent".into(), quote),
                        "[]".into(),
                    ));
                }
            }
            Ok(())
        }
    }
}

fn refused(field: &str, found: String, expected: String) -> Luks2Error {
    Luks2Error::NotAsWritten {
        field: field.to_string(),
        found,
        expected,
    }
}

fn join(field: &str, name: &str) -> String {
    if field.is_empty() {
        name.to_string()
    } else {
        format!("{field}.{name}")
    }
}

/// A header value as JSON text, short and printable.
fn quote(value: &Value) -> String {
    let text = value.to_string();
    let mut out = printable(&text);
    if text.chars().count() > QUOTED {
        out.push('…');
    }
    out
}

/// At most [`QUOTED`] characters of host-written text, control and
/// non-ASCII characters as `?`.
fn printable(text: &str) -> String {
    text.chars()
        .take(QUOTED)
        .map(|c| {
            if c.is_ascii_graphic() || c == ' ' {
                c
            } else {
                '?'
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_header_the_node_formats_is_its_own_and_quotes_are_bounded() {
        let made =
            super::super::format::build(&[7; 32], &FormatOptions::default(), 64 << 20).unwrap();
        let expected = ExpectedHeader::written_with(&FormatOptions::default());
        expected.check(&made.header).unwrap();
        let argon = FormatOptions {
            kdf: KdfChoice::Argon2id {
                time: 1,
                memory_kib: 64,
                cpus: 1,
            },
            sector_size: 512,
            ..FormatOptions::default()
        };
        let theirs = super::super::format::build(&[7; 32], &argon, 64 << 20).unwrap();
        ExpectedHeader::written_with(&argon)
            .check(&theirs.header)
            .unwrap();
        // Each refuses the other's: the KDF's kind comes first.
        assert!(matches!(
            expected.check(&theirs.header),
            Err(Luks2Error::NotAsWritten { field, .. }) if field == "keyslots.0.kdf.type"
        ));
        let long = Value::from("\u{1b}[2J".repeat(30));
        let q = quote(&long);
        assert!(
            q.chars().count() <= QUOTED + 1 && !q.contains('\u{1b}'),
            "{q}"
        );
    }
}
