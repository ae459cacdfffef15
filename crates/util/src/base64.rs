//! Base64 (RFC 4648) in the standard and URL-safe alphabets. Decoding
//! accepts input with or without `=` padding and refuses anything else.

const STD: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
const URL: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

/// Why base64 text could not be decoded.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Base64Error {
    /// A character outside the alphabet, at this offset.
    #[error("invalid base64 character at offset {0}")]
    InvalidCharacter(usize),
    /// The length cannot be base64 (one lone character, or bad padding).
    #[error("invalid base64 length")]
    InvalidLength,
    /// Bits left over in the last character (a non-canonical encoding).
    #[error("non-canonical base64 (trailing bits set)")]
    TrailingBits,
}

fn encode_with(alphabet: &[u8; 64], bytes: &[u8], pad: bool) -> String {
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let b = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let n = (b[0] as u32) << 16 | (b[1] as u32) << 8 | b[2] as u32;
        let chars = chunk.len() + 1;
        for i in 0..4 {
            if i < chars {
                out.push(alphabet[(n >> (18 - 6 * i) & 63) as usize] as char);
            } else if pad {
                out.push('=');
            }
        }
    }
    out
}

fn decode_with(alphabet: &[u8; 64], text: &str) -> Result<Vec<u8>, Base64Error> {
    let t = text.as_bytes();
    let unpadded = t.len() - t.iter().rev().take(2).take_while(|&&c| c == b'=').count();
    if unpadded < t.len() && !t.len().is_multiple_of(4) {
        return Err(Base64Error::InvalidLength);
    }
    let t = &t[..unpadded];
    if t.len() % 4 == 1 {
        return Err(Base64Error::InvalidLength);
    }
    let mut out = Vec::with_capacity(t.len() * 3 / 4);
    for (ci, chunk) in t.chunks(4).enumerate() {
        let mut n = 0u32;
        for (i, &c) in chunk.iter().enumerate() {
            let v = alphabet
                .iter()
                .position(|&a| a == c)
                .ok_or(Base64Error::InvalidCharacter(ci * 4 + i))?;
            n |= (v as u32) << (18 - 6 * i);
        }
        let bytes = [(n >> 16) as u8, (n >> 8) as u8, n as u8];
        let keep = chunk.len() - 1;
        if bytes[keep..].iter().any(|&b| b != 0) {
            return Err(Base64Error::TrailingBits);
        }
        out.extend_from_slice(&bytes[..keep]);
    }
    Ok(out)
}

/// Encodes with the standard alphabet and padding.
pub fn encode(bytes: &[u8]) -> String {
    encode_with(STD, bytes, true)
}

/// PEM text of `der` with `label` (`CERTIFICATE`, `PRIVATE KEY`, ...):
/// standard base64 in lines of 64 characters between the two markers.
pub fn pem(label: &str, der: &[u8]) -> String {
    let b64 = encode(der);
    let mut out = format!("-----BEGIN {label}-----\n");
    for chunk in b64.as_bytes().chunks(64) {
        out.push_str(std::str::from_utf8(chunk).expect("base64 is ASCII"));
        out.push('\n');
    }
    out.push_str(&format!("-----END {label}-----\n"));
    out
}

/// Decodes the standard alphabet, padded or not.
pub fn decode(text: &str) -> Result<Vec<u8>, Base64Error> {
    decode_with(STD, text)
}

/// Encodes with the URL-safe alphabet and padding (Go's `base64.URLEncoding`).
pub fn encode_url(bytes: &[u8]) -> String {
    encode_with(URL, bytes, true)
}

/// Decodes the URL-safe alphabet, padded or not.
pub fn decode_url(text: &str) -> Result<Vec<u8>, Base64Error> {
    decode_with(URL, text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc4648_vectors() {
        for (plain, b64) in [
            ("", ""),
            ("f", "Zg=="),
            ("fo", "Zm8="),
            ("foo", "Zm9v"),
            ("foob", "Zm9vYg=="),
            ("fooba", "Zm9vYmE="),
            ("foobar", "Zm9vYmFy"),
        ] {
            assert_eq!(encode(plain.as_bytes()), b64);
            assert_eq!(decode(b64).unwrap(), plain.as_bytes());
            assert_eq!(decode(b64.trim_end_matches('=')).unwrap(), plain.as_bytes());
        }
    }

    #[test]
    fn url_alphabet_and_round_trip() {
        let all: Vec<u8> = (0..=255).collect();
        assert_eq!(decode_url(&encode_url(&all)).unwrap(), all);
        assert_eq!(encode_url(&[0xfb, 0xff]), "-_8=");
        assert_eq!(decode(&encode(&all)).unwrap(), all);
    }

    #[test]
    fn refuses_bad_input() {
        assert_eq!(decode("Zm9v!"), Err(Base64Error::InvalidLength));
        assert_eq!(decode("Zm9*"), Err(Base64Error::InvalidCharacter(3)));
        assert_eq!(decode("Zh=="), Err(Base64Error::TrailingBits));
        assert_eq!(decode("Zg="), Err(Base64Error::InvalidLength));
        assert_eq!(decode_url("+/8="), Err(Base64Error::InvalidCharacter(0)));
    }
}
