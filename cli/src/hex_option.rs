//! Hex values given on the command line (`--cluster-id`, `--report-data`,
//! `--mrtd`, ...): decoded and checked for their length, with errors that
//! name the option.

use confboot_util::hex::HexError;

/// Why an option's value is not the hex it wants.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum HexOptionError {
    /// The value is not hex.
    #[error("{what}: {prefix}{error}", prefix = if *.not_hex_said { "not hex: " } else { "" })]
    NotHex {
        /// What is decoded (`--cluster-id`).
        what: String,
        /// Whether the message says `not hex:` before the reason.
        not_hex_said: bool,
        /// Why.
        error: HexError,
    },
    /// The value has another length than wanted.
    #[error("{what}: {len} bytes, want {want}")]
    Length {
        /// What is decoded.
        what: String,
        /// Its length.
        len: usize,
        /// The lengths wanted (`1 to 64`, `48`).
        want: String,
    },
}

/// `text` as exactly `N` bytes of hex; the error names `what`.
pub fn hex_array<const N: usize>(text: &str, what: &str) -> Result<[u8; N], HexOptionError> {
    let bytes = confboot_util::hex::decode(text).map_err(|error| HexOptionError::NotHex {
        what: what.to_string(),
        not_hex_said: false,
        error,
    })?;
    bytes
        .as_slice()
        .try_into()
        .map_err(|_| HexOptionError::Length {
            what: what.to_string(),
            len: bytes.len(),
            want: N.to_string(),
        })
}

/// `text` as hex of a length in `lengths`; the error names `what` and says
/// `not hex` for a value that is not.
pub fn hex_bytes(
    text: &str,
    what: &str,
    lengths: std::ops::RangeInclusive<usize>,
) -> Result<Vec<u8>, HexOptionError> {
    let bytes = confboot_util::hex::decode(text).map_err(|error| HexOptionError::NotHex {
        what: what.to_string(),
        not_hex_said: true,
        error,
    })?;
    if lengths.contains(&bytes.len()) {
        Ok(bytes)
    } else {
        Err(HexOptionError::Length {
            what: what.to_string(),
            len: bytes.len(),
            want: format!("{} to {}", lengths.start(), lengths.end()),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hex_values_are_checked_for_their_length_and_errors_name_them() {
        assert_eq!(hex_array::<2>("abcd", "--x"), Ok([0xab, 0xcd]));
        let e = hex_array::<2>("ab", "--x").unwrap_err();
        assert_eq!(e.to_string(), "--x: 1 bytes, want 2");
        assert!(matches!(
            hex_array::<2>("zz", "--x"),
            Err(HexOptionError::NotHex { .. })
        ));
        assert_eq!(hex_bytes("ab", "--id", 1..=64), Ok(vec![0xab]));
        let e = hex_bytes("zz", "--id", 1..=64).unwrap_err();
        assert!(e.to_string().starts_with("--id: not hex: "), "{e}");
        let e = hex_bytes("", "--id", 1..=64).unwrap_err();
        assert_eq!(e.to_string(), "--id: 0 bytes, want 1 to 64");
    }
}
