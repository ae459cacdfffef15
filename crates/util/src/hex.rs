//! Lowercase hex encoding and strict decoding.

/// Why a hex string could not be decoded.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum HexError {
    /// The string has an odd number of digits.
    #[error("hex string has an odd length ({0})")]
    OddLength(usize),
    /// A character that is not a hex digit, at this byte offset.
    #[error("invalid hex digit at offset {0}")]
    InvalidDigit(usize),
}

/// Encodes bytes as lowercase hex.
pub fn encode(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        s.push(DIGITS[(b >> 4) as usize] as char);
        s.push(DIGITS[(b & 0xf) as usize] as char);
    }
    s
}

/// Decodes hex (either case) into bytes.
pub fn decode(text: &str) -> Result<Vec<u8>, HexError> {
    let t = text.as_bytes();
    if !t.len().is_multiple_of(2) {
        return Err(HexError::OddLength(t.len()));
    }
    fn digit(c: u8) -> Option<u8> {
        match c {
            b'0'..=b'9' => Some(c - b'0'),
            b'a'..=b'f' => Some(c - b'a' + 10),
            b'A'..=b'F' => Some(c - b'A' + 10),
            _ => None,
        }
    }
    t.chunks(2)
        .enumerate()
        .map(|(i, pair)| {
            let hi = digit(pair[0]).ok_or(HexError::InvalidDigit(2 * i))?;
            let lo = digit(pair[1]).ok_or(HexError::InvalidDigit(2 * i + 1))?;
            Ok(hi << 4 | lo)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_errors() {
        let all: Vec<u8> = (0..=255).collect();
        assert_eq!(decode(&encode(&all)).unwrap(), all);
        assert_eq!(decode("ABcd").unwrap(), vec![0xab, 0xcd]);
        assert_eq!(decode("abc"), Err(HexError::OddLength(3)));
        assert_eq!(decode("0g"), Err(HexError::InvalidDigit(1)));
    }
}
