//! The measurement policy, in Constellation's JSON format:
//!
//! ```json
//! {"4": {"expected": "<hex>", "warnOnly": false}, "9": {"expected": "<hex>", "warnOnly": true}}
//! ```
//!
//! An enforced mismatch fails validation with an error naming the index, the
//! expected and the actual value; a `warnOnly` mismatch is logged and allowed.
//!
//! A policy read from text or a file is parsed strictly, because a policy
//! that admits everything must not pass for one that checks something:
//!
//! - an empty policy (`{}`) and one whose entries are all `warnOnly` are
//!   refused: either would admit any image;
//! - each key is a PCR index written in canonical decimal, 0 to
//!   [`MAX_INDEX`] (`"4"`, never `"04"`, `"+4"` or `" 4"`), and no key of any
//!   object appears twice (JSON parsers keep only one of two, silently);
//! - each expected value is exactly [`DIGEST_LEN`] bytes (a SHA-256 PCR,
//!   64 hex digits);
//! - a file is at most [`MAX_POLICY_BYTES`]; a larger one is refused before
//!   it is read whole.
//!
//! A policy that becomes a validator must also pin the image
//! ([`MeasurementPolicy::check_pins_image`]): the platform measured here is
//! QEMU with OVMF booting a kernel directly, where PCR 4 measures the boot
//! chain (the kernel image OVMF starts) and PCR 9 the initrd and the kernel
//! command line ([`IMAGE_PCRS`]). After every entry a validator drops, both
//! must still be enforced (not `warnOnly`). PCRs that the running OS or a
//! debugger can reset or extend at will ([`NEVER_PIN_IMAGE`]: 10 for IMA,
//! 15 the cluster mark, 16 the debug PCR, 23 the application PCR) never
//! count toward that: a policy of PCR 15 alone, or PCR 15 with 4 and 9
//! `warnOnly`, admits any image and is refused
//! ([`PolicyError::VtpmImageNotPinned`]). The parser itself does not apply this
//! rule (a policy's syntax is checked alone); every place a policy becomes
//! a validator does (the validator builder, the policy file's loading,
//! joinsvc's reload).
//!
//! [`MeasurementPolicy::new`], [`MeasurementPolicy::default`] and
//! [`MeasurementPolicy::set`] build policies in code (tests, a policy derived
//! from the running image) and are not held to these rules.
//!
//! Read by hand, not with a serde derive ([`parse_json_unique_keys`] finds
//! repeated keys): the bootstrapper links this parser, and derives for the
//! three policies (measurement, SNP, TDX) grew it by some 12 KB, past its size
//! budget.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use serde_json::Value;

use super::AttestationError;
use confboot_util::fs::{FileError, read_bounded_text};
use confboot_util::hex::HexError;

/// Largest policy file read, in bytes. A full policy (24 SHA-256 entries) is
/// under 4 KiB; the SEV-SNP policy file shares the bound.
pub const MAX_POLICY_BYTES: u64 = 64 * 1024;
/// Highest measurement index a policy may name (a TPM has PCRs 0 to 23).
pub const MAX_INDEX: u32 = 23;
/// Length of an expected value read from a policy: a SHA-256 PCR.
pub const DIGEST_LEN: usize = 32;
/// The vTPM PCRs that pin the image a node booted, on QEMU + OVMF direct
/// kernel boot: 4, the boot chain (the kernel image OVMF loads and starts),
/// and 9, the initrd and the kernel command line (which names the root
/// filesystem's hash). A policy must enforce both
/// ([`MeasurementPolicy::check_pins_image`]).
pub const IMAGE_PCRS: [u32; 2] = [4, 9];
/// The vTPM PCRs that never count toward pinning the image: 10 (IMA, which
/// the running OS extends), 15 (the cluster mark, extended by the node
/// itself), 16 (the debug PCR, resettable from any locality) and 23 (the
/// application PCR, resettable too).
pub const NEVER_PIN_IMAGE: [u32; 4] = [10, 15, 16, 23];
/// Longest key quoted back in an error; the rest is cut off.
const MAX_QUOTED_KEY: usize = 32;

/// One expected measurement.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Expected {
    /// The expected value ([`DIGEST_LEN`] bytes in a policy read from text).
    pub value: Vec<u8>,
    /// If true, a mismatch is logged and allowed.
    pub warn_only: bool,
}

/// Expected measurements by index.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MeasurementPolicy {
    entries: BTreeMap<u32, Expected>,
}

/// Why a policy could not be read, or was refused.
#[derive(Debug, thiserror::Error)]
pub enum PolicyError {
    /// The file could not be read.
    #[error("cannot read measurement policy: {0}")]
    Io(std::io::Error),
    /// The file is larger than [`MAX_POLICY_BYTES`].
    #[error("measurement policy of {0} bytes exceeds {max}", max = MAX_POLICY_BYTES)]
    TooLarge(u64),
    /// The text is not the expected JSON shape.
    #[error("invalid measurement policy: {0}")]
    Format(String),
    /// The policy names no measurement, so it would admit any image.
    #[error("measurement policy is empty: it would admit any image, refused")]
    Empty,
    /// Every entry is `warnOnly`: nothing is enforced, so any image would be admitted.
    #[error(
        "measurement policy enforces nothing (every entry is warnOnly): \
         it would admit any image, refused"
    )]
    NothingEnforced,
    /// A key is not an index in canonical decimal (no leading zero, sign or
    /// space), so two keys could name one index. The key, cut to 32 characters.
    #[error(
        "measurement policy key {0:?} is not an index in plain decimal \
         (0 to {max}, no leading zero, sign or space)",
        max = MAX_INDEX
    )]
    NonCanonicalIndex(String),
    /// A key is a decimal number above [`MAX_INDEX`].
    #[error("measurement policy key {0:?} is out of range (0 to {max})", max = MAX_INDEX)]
    IndexOutOfRange(String),
    /// An object names the same key twice (a parser would keep only one).
    #[error("measurement policy names the key {0:?} twice")]
    DuplicateKey(String),
    /// An expected value is not hex.
    #[error("measurement policy entry {index}: {error}")]
    NotHex {
        /// The index of the entry.
        index: u32,
        /// What is wrong with the hex.
        error: HexError,
    },
    /// An expected value has the wrong number of bytes.
    #[error(
        "measurement policy entry {index}: expected value has {len} bytes, want {want} \
         ({} hex digits)",
        2 * want
    )]
    DigestLength {
        /// The index of the entry.
        index: u32,
        /// The number of bytes given.
        len: usize,
        /// The number of bytes a digest has.
        want: usize,
    },
    /// A vTPM policy that does not enforce every PCR of [`IMAGE_PCRS`]
    /// (after the entries a validator drops; [`NEVER_PIN_IMAGE`] never
    /// count): it would admit another boot chain or command line.
    #[error(
        "measurement policy does not pin the image: PCRs not enforced {missing:?} \
         (4, the boot chain, and 9, the initrd and command line, must be enforced; \
         10, 15, 16 and 23 never count): it would admit any image, refused"
    )]
    VtpmImageNotPinned {
        /// The PCRs of [`IMAGE_PCRS`] the policy does not enforce.
        missing: Vec<u32>,
    },
    /// A cloud variant's policy that does not enforce the PCRs where that
    /// cloud's firmware measures the kernel, the initrd and the command
    /// line (each variant's crate names them and says why).
    #[error(
        "{variant} policy does not pin the image: {missing} not enforced ({why}): it would \
         admit any image, refused"
    )]
    CloudImageNotPinned {
        /// The variant (`azure-sev-snp`, ...).
        variant: &'static str,
        /// The registers not enforced, as the variant names them.
        missing: String,
        /// What those registers measure on that cloud.
        why: &'static str,
    },
    /// An SEV-SNP policy that pins no image: its launch measurement is
    /// `warnOnly` and it names no ID key, yet it is not marked
    /// `insecureAnyImage`.
    #[error(
        "SEV-SNP policy pins no image (its measurement is warnOnly and it names no \
         idKeyDigests): it would admit any guest image; set \"insecureAnyImage\": true \
         to accept that deliberately"
    )]
    ImageNotPinned,
    /// A bare-metal SEV-SNP policy that does not say which launch its
    /// measurement was taken of (no `launch`): a measurement of a launch
    /// without the kernel hashes table pins the firmware alone, and nothing
    /// would tell.
    #[error(
        "SEV-SNP policy declares no launch: say \"launch\": \"measuredDirectBoot\" with the \
         kernelHash, initrdHash and cmdlineHash its measurement was taken with (a launch \
         measurement without the kernel hashes table admits any kernel, initrd and command \
         line the host boots), refused"
    )]
    SnpLaunchUndeclared,
    /// A bare-metal SEV-SNP policy whose measurement is declared that of a
    /// launch without the kernel hashes table (`"launch": "firmwareOnly"`),
    /// yet it is not marked `insecureAnyImage`.
    #[error(
        "SEV-SNP policy declares a firmwareOnly launch: its measurement pins the firmware and \
         vCPUs only and admits any kernel, initrd and command line the host boots, refused; \
         measure a measured direct boot (\"launch\": \"measuredDirectBoot\") or set \
         \"insecureAnyImage\": true to accept that deliberately"
    )]
    SnpLaunchNotMeasured,
    /// A TDX policy that does not pin the image: it lacks an expected value
    /// for `MRTD` (the firmware), `RTMR0` (its configuration and the host's
    /// ACPI tables), `RTMR1` (the kernel) or `RTMR2` (the command line and
    /// initrd), yet it is not marked `insecureAnyImage`.
    #[error(
        "TDX policy does not pin the image: no expected value for {} (mrtd, and rtmrs 0, \
         the firmware's configuration and the host's ACPI tables, 1, the kernel, and 2, the \
         command line and initrd, are required; 3, the cluster mark, never counts): it would \
         admit a TD with any of them, refused; set \"insecureAnyImage\": true to accept that \
         deliberately",
        missing.join(", ")
    )]
    TdxImageNotPinned {
        /// The registers without an expected value (`MRTD`, `RTMR0`,
        /// `RTMR1`, `RTMR2`).
        missing: Vec<&'static str>,
    },
}

/// A key as quoted in an error: at most [`MAX_QUOTED_KEY`] characters.
fn quoted_key(key: &str) -> String {
    key.chars().take(MAX_QUOTED_KEY).collect()
}

/// The index a key names, if it is written in canonical decimal within range.
fn parse_index(key: &str) -> Result<u32, PolicyError> {
    let digits = !key.is_empty() && key.bytes().all(|b| b.is_ascii_digit());
    if !digits || (key.len() > 1 && key.starts_with('0')) {
        return Err(PolicyError::NonCanonicalIndex(quoted_key(key)));
    }
    key.parse::<u32>()
        .ok()
        .filter(|i| *i <= MAX_INDEX)
        .ok_or_else(|| PolicyError::IndexOutOfRange(quoted_key(key)))
}

/// Parses one entry (`{"expected": "<hex>", "warnOnly": false}`) whose value
/// must be `digest_len` bytes. Shared with the SEV-SNP policy, whose launch
/// measurement has the same entry shape.
pub fn parse_entry(index: u32, entry: &Value, digest_len: usize) -> Result<Expected, PolicyError> {
    let fields = entry
        .as_object()
        .ok_or_else(|| PolicyError::Format(format!("entry {index} must be an object")))?;
    for name in fields.keys() {
        if name != "expected" && name != "warnOnly" {
            return Err(PolicyError::Format(format!(
                "entry {index}: unknown field {:?}",
                quoted_key(name)
            )));
        }
    }
    let hex = fields
        .get("expected")
        .and_then(|v| v.as_str())
        .ok_or_else(|| {
            PolicyError::Format(format!("entry {index}: \"expected\" must be a hex string"))
        })?;
    let value =
        confboot_util::hex::decode(hex).map_err(|error| PolicyError::NotHex { index, error })?;
    if value.len() != digest_len {
        return Err(PolicyError::DigestLength {
            index,
            len: value.len(),
            want: digest_len,
        });
    }
    let warn_only = match fields.get("warnOnly") {
        None => false,
        Some(v) => v.as_bool().ok_or_else(|| {
            PolicyError::Format(format!("entry {index}: \"warnOnly\" must be true or false"))
        })?,
    };
    Ok(Expected { value, warn_only })
}

/// Parses JSON text whose objects name no key twice. `serde_json::Value`
/// keeps the last of two equal keys without a word, so the text is walked
/// once more: every object's keys (as decoded strings, so `"4"` and
/// `"\u0034"` are the same key) must differ.
pub fn parse_json_unique_keys(text: &str) -> Result<Value, PolicyError> {
    let root: Value = serde_json::from_str(text).map_err(|e| PolicyError::Format(e.to_string()))?;
    // The text is valid JSON now: strings are closed and brackets balanced.
    // One set of keys per open container (`None` for an array).
    let mut open: Vec<Option<BTreeSet<String>>> = Vec::new();
    let mut expect_key = false;
    let bytes = text.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'{' => {
                open.push(Some(BTreeSet::new()));
                expect_key = true;
            }
            b'[' => {
                open.push(None);
                expect_key = false;
            }
            b'}' | b']' => {
                open.pop();
                expect_key = false;
            }
            b',' => expect_key = matches!(open.last(), Some(Some(_))),
            b'"' => {
                let start = i;
                i += 1;
                while i < bytes.len() && bytes[i] != b'"' {
                    // Skip the escaped character (`\"` does not end the string).
                    i += if bytes[i] == b'\\' { 2 } else { 1 };
                }
                if expect_key {
                    let raw = text.get(start..=i).unwrap_or_default();
                    let key: String = serde_json::from_str(raw)
                        .map_err(|e| PolicyError::Format(e.to_string()))?;
                    if let Some(Some(seen)) = open.last_mut()
                        && !seen.insert(key.clone())
                    {
                        return Err(PolicyError::DuplicateKey(quoted_key(&key)));
                    }
                    expect_key = false;
                }
            }
            _ => {}
        }
        i += 1;
    }
    Ok(root)
}

/// Reads a policy file (a measurement, SNP or TDX policy) of at most
/// [`MAX_POLICY_BYTES`] through [`confboot_util::fs::read_bounded_text`]: a
/// larger one is refused from its size before it is read, and a file that
/// grows (or a device that reports no size) is cut off one byte past the
/// limit and refused. The reader's errors become this module's: a file too
/// large names its size (or one past the limit when it reports none), and
/// an unreadable or non-UTF-8 one is [`PolicyError::Io`].
pub fn read_policy_text(path: &Path) -> Result<String, PolicyError> {
    read_bounded_text(path, MAX_POLICY_BYTES)
        .map(|mut text| std::mem::take(&mut *text))
        .map_err(policy_file_error)
}

/// [`read_policy_text`]'s error of a [`FileError`].
fn policy_file_error(error: FileError) -> PolicyError {
    match error {
        FileError::Read { error, .. } | FileError::Write { error, .. } => PolicyError::Io(error),
        FileError::TooLarge { path, limit } => {
            let size = std::fs::metadata(&path).map_or(0, |m| m.len());
            PolicyError::TooLarge(size.max(limit.saturating_add(1)))
        }
        FileError::NotText { .. } => PolicyError::Io(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            "stream did not contain valid UTF-8",
        )),
    }
}

impl MeasurementPolicy {
    /// A policy with the given entries (built in code: not checked).
    pub fn new(entries: BTreeMap<u32, Expected>) -> Self {
        MeasurementPolicy { entries }
    }

    /// The expected entries by index.
    pub fn entries(&self) -> &BTreeMap<u32, Expected> {
        &self.entries
    }

    /// Sets (or replaces) one expected value.
    pub fn set(&mut self, index: u32, value: Vec<u8>, warn_only: bool) {
        self.entries.insert(index, Expected { value, warn_only });
    }

    /// Removes one expected value (if there is one) and returns it.
    pub fn remove(&mut self, index: u32) -> Option<Expected> {
        self.entries.remove(&index)
    }

    /// Whether at least one entry is enforced (not `warnOnly`).
    pub fn enforces_something(&self) -> bool {
        self.entries.values().any(|e| !e.warn_only)
    }

    /// Whether the policy pins the image (see the module documentation):
    /// leaving out [`NEVER_PIN_IMAGE`], its enforced entries must include
    /// every PCR of [`IMAGE_PCRS`]; otherwise
    /// [`PolicyError::VtpmImageNotPinned`] names those that are missing.
    /// Call it on the policy a validator will hold, after the entries it
    /// drops.
    pub fn check_pins_image(&self) -> Result<(), PolicyError> {
        let enforced = |index: &u32| {
            !NEVER_PIN_IMAGE.contains(index)
                && self.entries.get(index).is_some_and(|e| !e.warn_only)
        };
        let missing: Vec<u32> = IMAGE_PCRS.into_iter().filter(|i| !enforced(i)).collect();
        if missing.is_empty() {
            Ok(())
        } else {
            Err(PolicyError::VtpmImageNotPinned { missing })
        }
    }

    /// Parses the JSON text of a policy, strictly (see the module
    /// documentation): a policy that would admit any image, an ambiguous or
    /// repeated key, or a value that is not a SHA-256 digest is refused.
    pub fn from_json(text: &str) -> Result<Self, PolicyError> {
        let root = parse_json_unique_keys(text)?;
        let obj = root
            .as_object()
            .ok_or_else(|| PolicyError::Format("top level must be an object".into()))?;
        let mut entries = BTreeMap::new();
        for (key, entry) in obj {
            let index = parse_index(key)?;
            entries.insert(index, parse_entry(index, entry, DIGEST_LEN)?);
        }
        let policy = MeasurementPolicy { entries };
        if policy.entries.is_empty() {
            return Err(PolicyError::Empty);
        }
        if !policy.enforces_something() {
            return Err(PolicyError::NothingEnforced);
        }
        Ok(policy)
    }

    /// The policy as JSON text, in the same format [`MeasurementPolicy::from_json`] reads.
    pub fn to_json(&self) -> String {
        let mut obj = serde_json::Map::new();
        for (i, e) in &self.entries {
            let mut entry = serde_json::Map::new();
            entry.insert(
                "expected".into(),
                confboot_util::hex::encode(&e.value).into(),
            );
            entry.insert("warnOnly".into(), e.warn_only.into());
            obj.insert(i.to_string(), entry.into());
        }
        serde_json::to_string_pretty(&serde_json::Value::Object(obj))
            .expect("a JSON map serializes")
    }

    /// Checks actual measurements against the policy. An enforced mismatch (or
    /// a missing enforced measurement) fails; `warnOnly` mismatches are logged
    /// and returned as warnings.
    pub fn check(&self, actual: &BTreeMap<u32, Vec<u8>>) -> Result<Vec<String>, AttestationError> {
        let mut warnings = Vec::new();
        for (index, want) in &self.entries {
            let got = actual.get(index);
            if got.map(|g| g.as_slice()) == Some(want.value.as_slice()) {
                continue;
            }
            let actual_hex = got.map_or_else(
                || "<not measured>".to_string(),
                |g| confboot_util::hex::encode(g),
            );
            if want.warn_only {
                let msg = format!(
                    "measurement {index} differs (warnOnly): expected {}, actual {actual_hex}",
                    confboot_util::hex::encode(&want.value)
                );
                log::warn!("{msg}");
                warnings.push(msg);
            } else {
                return Err(AttestationError::Measurement {
                    index: *index,
                    expected: confboot_util::hex::encode(&want.value),
                    actual: actual_hex,
                    event: None,
                });
            }
        }
        Ok(warnings)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: &str = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";
    const Z: &str = "0000000000000000000000000000000000000000000000000000000000000000";

    fn actual(pairs: &[(u32, &str)]) -> BTreeMap<u32, Vec<u8>> {
        pairs
            .iter()
            .map(|(i, h)| (*i, confboot_util::hex::decode(h).unwrap()))
            .collect()
    }

    #[test]
    fn parses_constellation_format_and_round_trips() {
        let text = format!(
            r#"{{"4": {{"expected": "{A}", "warnOnly": false}}, "15": {{"expected": "{Z}"}}}}"#
        );
        let p = MeasurementPolicy::from_json(&text).unwrap();
        assert_eq!(p.entries().len(), 2);
        assert!(!p.entries()[&15].warn_only);
        assert_eq!(MeasurementPolicy::from_json(&p.to_json()).unwrap(), p);
    }

    #[test]
    fn enforced_mismatch_names_index_expected_and_actual() {
        let p = MeasurementPolicy::from_json(&format!(
            r#"{{"4": {{"expected": "{A}", "warnOnly": false}}}}"#
        ))
        .unwrap();
        let err = p.check(&actual(&[(4, Z)])).unwrap_err();
        assert_eq!(
            err,
            AttestationError::Measurement {
                index: 4,
                expected: A.into(),
                actual: Z.into(),
                event: None,
            }
        );
        assert!(err.to_string().contains("measurement 4 differs"));
        assert!(p.check(&actual(&[(4, A)])).unwrap().is_empty());
        // Missing an enforced measurement fails too.
        assert!(matches!(
            p.check(&BTreeMap::new()),
            Err(AttestationError::Measurement { index: 4, .. })
        ));
    }

    #[test]
    fn warn_only_mismatch_is_allowed_and_reported() {
        // PCR 4 is enforced (and matches), so the policy pins something.
        let p = MeasurementPolicy::from_json(&format!(
            r#"{{"4": {{"expected": "{A}"}}, "9": {{"expected": "{A}", "warnOnly": true}}}}"#
        ))
        .unwrap();
        let warnings = p.check(&actual(&[(4, A), (9, Z)])).unwrap();
        assert_eq!(warnings.len(), 1);
        assert!(warnings[0].contains("measurement 9"));
    }

    #[test]
    fn refuses_malformed_policies() {
        // 20 bytes: refused for its length before anything else in the entry.
        const SHORT: &str = "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA";
        type RefusedAs = fn(&PolicyError) -> bool;
        let cases: Vec<(String, RefusedAs)> = vec![
            ("[]".into(), |e| matches!(e, PolicyError::Format(_))),
            (
                r#"{"x": {"expected": "00"}}"#.into(),
                |e| matches!(e, PolicyError::NonCanonicalIndex(k) if k == "x"),
            ),
            (
                format!(r#"{{"64": {{"expected": "{SHORT}"}}}}"#),
                |e| matches!(e, PolicyError::IndexOutOfRange(k) if k == "64"),
            ),
            (r#"{"4": {"expected": "zz"}}"#.into(), |e| {
                matches!(e, PolicyError::NotHex { index: 4, .. })
            }),
            (r#"{"4": {"expected": "00"}}"#.into(), |e| {
                matches!(
                    e,
                    PolicyError::DigestLength {
                        index: 4,
                        len: 1,
                        want: 32
                    }
                )
            }),
            (r#"{"4": {"expected": 4}}"#.into(), |e| {
                matches!(e, PolicyError::Format(_))
            }),
            (r#"{"4": {"warnOnly": true}}"#.into(), |e| {
                matches!(e, PolicyError::Format(_))
            }),
            (
                format!(r#"{{"4": {{"expected": "{SHORT}", "warnOnly": "no"}}}}"#),
                |e| {
                    matches!(
                        e,
                        PolicyError::DigestLength {
                            index: 4,
                            len: 20,
                            ..
                        }
                    )
                },
            ),
            (
                format!(r#"{{"4": {{"expected": "{A}", "warnOnly": "no"}}}}"#),
                |e| matches!(e, PolicyError::Format(m) if m.contains("warnOnly")),
            ),
            (
                format!(r#"{{"4": {{"expected": "{SHORT}", "warn": true}}}}"#),
                |e| matches!(e, PolicyError::Format(m) if m.contains("unknown field")),
            ),
            (
                format!(r#"{{"4": {{"expected": "{A}", "warn": true}}}}"#),
                |e| matches!(e, PolicyError::Format(m) if m.contains("unknown field")),
            ),
            ("{".into(), |e| matches!(e, PolicyError::Format(_))),
        ];
        for (bad, refused_as) in cases {
            match MeasurementPolicy::from_json(&bad) {
                Err(e) => assert!(refused_as(&e), "{bad}: refused as {e:?}"),
                Ok(p) => panic!("{bad}: accepted as {p:?}"),
            }
        }
    }

    #[test]
    fn an_empty_policy_is_refused() {
        for empty in ["{}", " { } ", "{\n}"] {
            assert!(
                matches!(MeasurementPolicy::from_json(empty), Err(PolicyError::Empty)),
                "{empty}"
            );
        }
        let err = MeasurementPolicy::from_json("{}").unwrap_err();
        assert!(err.to_string().contains("admit any image"), "{err}");
    }

    #[test]
    fn a_policy_that_enforces_nothing_is_refused() {
        let all_warn = format!(
            r#"{{"4": {{"expected": "{A}", "warnOnly": true}}, "9": {{"expected": "{Z}", "warnOnly": true}}}}"#
        );
        let err = MeasurementPolicy::from_json(&all_warn).unwrap_err();
        assert!(matches!(err, PolicyError::NothingEnforced), "{err:?}");
        assert!(err.to_string().contains("enforces nothing"), "{err}");
        // One enforced entry is enough.
        let one = all_warn.replacen("true", "false", 1);
        assert!(
            MeasurementPolicy::from_json(&one)
                .unwrap()
                .enforces_something()
        );
    }

    #[test]
    fn keys_must_be_canonical_indexes_in_range() {
        let entry = format!(r#"{{"expected": "{A}"}}"#);
        for key in [
            "04",
            "00",
            "+4",
            "-4",
            " 4",
            "4 ",
            "4.0",
            "0x4",
            "",
            r"\u0034\u0030",
        ] {
            let text = format!(r#"{{"{key}": {entry}}}"#);
            match MeasurementPolicy::from_json(&text) {
                Err(PolicyError::NonCanonicalIndex(_)) | Err(PolicyError::IndexOutOfRange(_)) => {}
                other => panic!("{key:?}: {other:?}"),
            }
        }
        for key in ["04", "+4", " 4", "-1"] {
            let text = format!(r#"{{"{key}": {entry}}}"#);
            assert!(
                matches!(
                    MeasurementPolicy::from_json(&text),
                    Err(PolicyError::NonCanonicalIndex(k)) if k == key
                ),
                "{key:?}"
            );
        }
        for key in ["24", "63", "4294967296", "99999999999999999999"] {
            let text = format!(r#"{{"{key}": {entry}}}"#);
            assert!(
                matches!(
                    MeasurementPolicy::from_json(&text),
                    Err(PolicyError::IndexOutOfRange(_))
                ),
                "{key:?}"
            );
        }
        for (key, index) in [("0", 0), ("9", 9), ("10", 10), ("23", 23)] {
            let p = MeasurementPolicy::from_json(&format!(r#"{{"{key}": {entry}}}"#)).unwrap();
            assert!(p.entries().contains_key(&index), "{key:?}");
        }
        // A key quoted back in an error is cut short.
        let long = "1".repeat(1000);
        let err = MeasurementPolicy::from_json(&format!(r#"{{"{long}": {entry}}}"#)).unwrap_err();
        assert!(matches!(&err, PolicyError::IndexOutOfRange(k) if k.len() == 32));
    }

    #[test]
    fn repeated_keys_are_refused() {
        let enforced = format!(r#"{{"expected": "{A}"}}"#);
        let warn = format!(r#"{{"expected": "{Z}", "warnOnly": true}}"#);
        for text in [
            // The second entry for PCR 4 would silently win.
            format!(r#"{{"4": {enforced}, "4": {warn}, "9": {enforced}}}"#),
            format!(r#"{{"4": {enforced}, "9": {enforced}, "4": {enforced}}}"#),
            // The same key, escaped.
            format!(r#"{{"4": {enforced}, "\u0034": {enforced}}}"#),
            // Inside an entry.
            format!(r#"{{"4": {{"expected": "{A}", "warnOnly": false, "warnOnly": true}}}}"#),
            format!(r#"{{"4": {{"expected": "{Z}", "expected": "{A}"}}}}"#),
        ] {
            assert!(
                matches!(
                    MeasurementPolicy::from_json(&text),
                    Err(PolicyError::DuplicateKey(_))
                ),
                "{text}"
            );
        }
        // Equal keys in different objects, and strings that hold braces,
        // commas, colons and escaped quotes, are not repeats.
        let text = format!(
            r#"{{"4": {{"expected": "{A}", "warnOnly": false}}, "9": {{"expected": "{A}", "warnOnly": false}}}}"#
        );
        assert_eq!(
            MeasurementPolicy::from_json(&text).unwrap().entries().len(),
            2
        );
        let tricky =
            r#"{"a": ["{\"a\": 1, \"a\": 2}", {"a": 1}], "b": "\\", "c": {"a": [1, {"a": 2}]}}"#;
        assert!(parse_json_unique_keys(tricky).is_ok());
        assert!(matches!(
            parse_json_unique_keys(r#"{"a": [{"x": 1, "x": 2}]}"#),
            Err(PolicyError::DuplicateKey(k)) if k == "x"
        ));
    }

    #[test]
    fn digests_are_exactly_32_bytes_of_hex() {
        for (hex, len) in [
            ("aa".repeat(20), 20),
            ("aa".repeat(31), 31),
            ("aa".repeat(33), 33),
            ("aa".repeat(48), 48),
            ("aa".repeat(64), 64),
            (String::new(), 0),
        ] {
            let text = format!(r#"{{"4": {{"expected": "{hex}"}}}}"#);
            assert!(
                matches!(
                    MeasurementPolicy::from_json(&text),
                    Err(PolicyError::DigestLength { index: 4, len: l, want: 32 }) if l == len
                ),
                "{len} bytes"
            );
        }
        let odd = format!("{A}a");
        let not_hex = format!("{}zz", &A[2..]);
        let spaced = format!("{} ", &A[1..]);
        for hex in [odd.as_str(), not_hex.as_str(), spaced.as_str(), "0x00"] {
            let text = format!(r#"{{"4": {{"expected": "{hex}"}}}}"#);
            assert!(
                matches!(
                    MeasurementPolicy::from_json(&text),
                    Err(PolicyError::NotHex { index: 4, .. })
                ),
                "{hex}"
            );
        }
        // Either case is hex.
        let upper = A.to_uppercase();
        assert!(
            MeasurementPolicy::from_json(&format!(r#"{{"4": {{"expected": "{upper}"}}}}"#)).is_ok()
        );
    }

    /// A policy file read as the verifier's loader reads it: bounded, then
    /// strictly.
    fn load(path: &Path) -> Result<MeasurementPolicy, PolicyError> {
        MeasurementPolicy::from_json(&read_policy_text(path)?)
    }

    #[test]
    fn load_reads_the_strict_way_and_bounds_the_file() {
        let dir = std::env::temp_dir().join(format!("confboot-policy-load-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("policy.json");
        let good = format!(r#"{{"4": {{"expected": "{A}"}}}}"#);
        std::fs::write(&file, &good).unwrap();
        assert_eq!(
            load(&file).unwrap(),
            MeasurementPolicy::from_json(&good).unwrap()
        );
        std::fs::write(&file, "{}").unwrap();
        assert!(matches!(load(&file), Err(PolicyError::Empty)));
        // Over the bound: refused from its size, before it is read (the
        // error names the whole size, not where a read would stop).
        let mut big = good.clone().into_bytes();
        for over in [MAX_POLICY_BYTES + 1, 2 * MAX_POLICY_BYTES] {
            big.resize(over as usize, b' ');
            std::fs::write(&file, &big).unwrap();
            assert!(matches!(
                load(&file),
                Err(PolicyError::TooLarge(n)) if n == over
            ));
        }
        // Exactly at the bound (padding is JSON whitespace): read.
        big.truncate(MAX_POLICY_BYTES as usize);
        std::fs::write(&file, &big).unwrap();
        assert!(load(&file).is_ok());
        // A device that reports no size is cut off after the bound.
        assert!(matches!(
            read_policy_text(Path::new("/dev/zero")),
            Err(PolicyError::TooLarge(n)) if n == MAX_POLICY_BYTES + 1
        ));
        assert!(matches!(
            load(&dir.join("missing.json")),
            Err(PolicyError::Io(_))
        ));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
