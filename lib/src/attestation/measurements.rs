//! The measurement policy, in Constellation's JSON format:
//!
//! ```json
//! {"4": {"expected": "<hex>", "warnOnly": false}, "9": {"expected": "<hex>", "warnOnly": true}}
//! ```
//!
//! An enforced mismatch fails validation with an error naming the index, the
//! expected and the actual value; a `warnOnly` mismatch is logged and allowed.

use std::collections::BTreeMap;
use std::fmt;
use std::path::Path;

use super::AttestationError;

/// Largest policy file read (a policy is a few KiB).
pub const MAX_POLICY_BYTES: u64 = 1 << 20;
/// Highest measurement index a policy may name.
pub const MAX_INDEX: u32 = 63;

/// One expected measurement.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Expected {
    /// The expected value (20 to 64 bytes).
    pub value: Vec<u8>,
    /// If true, a mismatch is logged and allowed.
    pub warn_only: bool,
}

/// Expected measurements by index.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MeasurementPolicy {
    entries: BTreeMap<u32, Expected>,
}

/// Why a policy could not be read.
#[derive(Debug)]
pub enum PolicyError {
    /// The file could not be read.
    Io(std::io::Error),
    /// The file is larger than [`MAX_POLICY_BYTES`].
    TooLarge(u64),
    /// The text is not the expected JSON shape.
    Format(String),
}

impl fmt::Display for PolicyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PolicyError::Io(e) => write!(f, "cannot read measurement policy: {e}"),
            PolicyError::TooLarge(n) => {
                write!(
                    f,
                    "measurement policy of {n} bytes exceeds {MAX_POLICY_BYTES}"
                )
            }
            PolicyError::Format(m) => write!(f, "invalid measurement policy: {m}"),
        }
    }
}

impl std::error::Error for PolicyError {}

impl MeasurementPolicy {
    /// A policy with the given entries.
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

    /// Parses the JSON text of a policy.
    pub fn from_json(text: &str) -> Result<Self, PolicyError> {
        let root: serde_json::Value =
            serde_json::from_str(text).map_err(|e| PolicyError::Format(e.to_string()))?;
        let obj = root
            .as_object()
            .ok_or_else(|| PolicyError::Format("top level must be an object".into()))?;
        let mut entries = BTreeMap::new();
        for (key, entry) in obj {
            let index: u32 = key
                .parse()
                .ok()
                .filter(|i| *i <= MAX_INDEX)
                .ok_or_else(|| {
                    PolicyError::Format(format!("key {key:?} is not an index 0..={MAX_INDEX}"))
                })?;
            let fields = entry
                .as_object()
                .ok_or_else(|| PolicyError::Format(format!("entry {index} must be an object")))?;
            for name in fields.keys() {
                if name != "expected" && name != "warnOnly" {
                    return Err(PolicyError::Format(format!(
                        "entry {index}: unknown field {name:?}"
                    )));
                }
            }
            let hex = fields
                .get("expected")
                .and_then(|v| v.as_str())
                .ok_or_else(|| {
                    PolicyError::Format(format!("entry {index}: \"expected\" must be a hex string"))
                })?;
            let value = crate::hex::decode(hex)
                .map_err(|e| PolicyError::Format(format!("entry {index}: {e}")))?;
            if !(20..=64).contains(&value.len()) {
                return Err(PolicyError::Format(format!(
                    "entry {index}: expected value has {} bytes, want 20 to 64",
                    value.len()
                )));
            }
            let warn_only = match fields.get("warnOnly") {
                None => false,
                Some(v) => v.as_bool().ok_or_else(|| {
                    PolicyError::Format(format!(
                        "entry {index}: \"warnOnly\" must be true or false"
                    ))
                })?,
            };
            entries.insert(index, Expected { value, warn_only });
        }
        Ok(MeasurementPolicy { entries })
    }

    /// Reads a policy file (at most [`MAX_POLICY_BYTES`]).
    pub fn load(path: &Path) -> Result<Self, PolicyError> {
        use std::io::Read;
        let file = std::fs::File::open(path).map_err(PolicyError::Io)?;
        let len = file.metadata().map_err(PolicyError::Io)?.len();
        if len > MAX_POLICY_BYTES {
            return Err(PolicyError::TooLarge(len));
        }
        let mut text = String::new();
        file.take(MAX_POLICY_BYTES + 1)
            .read_to_string(&mut text)
            .map_err(PolicyError::Io)?;
        if text.len() as u64 > MAX_POLICY_BYTES {
            return Err(PolicyError::TooLarge(text.len() as u64));
        }
        Self::from_json(&text)
    }

    /// The policy as JSON text, in the same format [`MeasurementPolicy::from_json`] reads.
    pub fn to_json(&self) -> String {
        let mut obj = serde_json::Map::new();
        for (i, e) in &self.entries {
            let mut entry = serde_json::Map::new();
            entry.insert("expected".into(), crate::hex::encode(&e.value).into());
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
            let actual_hex =
                got.map_or_else(|| "<not measured>".to_string(), |g| crate::hex::encode(g));
            if want.warn_only {
                let msg = format!(
                    "measurement {index} differs (warnOnly): expected {}, actual {actual_hex}",
                    crate::hex::encode(&want.value)
                );
                log::warn!("{msg}");
                warnings.push(msg);
            } else {
                return Err(AttestationError::Measurement {
                    index: *index,
                    expected: crate::hex::encode(&want.value),
                    actual: actual_hex,
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
            .map(|(i, h)| (*i, crate::hex::decode(h).unwrap()))
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
                actual: Z.into()
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
        let p = MeasurementPolicy::from_json(&format!(
            r#"{{"9": {{"expected": "{A}", "warnOnly": true}}}}"#
        ))
        .unwrap();
        let warnings = p.check(&actual(&[(9, Z)])).unwrap();
        assert_eq!(warnings.len(), 1);
        assert!(warnings[0].contains("measurement 9"));
    }

    #[test]
    fn refuses_malformed_policies() {
        for bad in [
            "[]",
            r#"{"x": {"expected": "00"}}"#,
            r#"{"64": {"expected": "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"}}"#,
            r#"{"4": {"expected": "zz"}}"#,
            r#"{"4": {"expected": "00"}}"#,
            r#"{"4": {"expected": 4}}"#,
            r#"{"4": {"warnOnly": true}}"#,
            r#"{"4": {"expected": "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA", "warnOnly": "no"}}"#,
            r#"{"4": {"expected": "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA", "warn": true}}"#,
            "{",
        ] {
            assert!(
                matches!(
                    MeasurementPolicy::from_json(bad),
                    Err(PolicyError::Format(_))
                ),
                "{bad}"
            );
        }
    }
}
