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

/// Why a PEM block could not be read ([`pem_block`]).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PemError {
    /// The text is larger than the caller allows.
    #[error("PEM text of {len} bytes is larger than {max}")]
    TooLarge {
        /// The text's length.
        len: usize,
        /// The caller's bound.
        max: usize,
    },
    /// The text is not UTF-8.
    #[error("PEM text is not UTF-8")]
    NotUtf8,
    /// No block with the label; the hint says what was found instead.
    #[error("no {label} block{hint}")]
    NoBlock {
        /// The label asked for.
        label: String,
        /// A hint for a near miss (empty: none).
        hint: &'static str,
    },
    /// More than one block with the label.
    #[error("more than one {0} block")]
    MoreThanOne(String),
    /// The block does not end.
    #[error("{0} block has no END line")]
    NoEnd(String),
    /// The block's body is not base64.
    #[error("{label} block: {error}")]
    Base64 {
        /// The label.
        label: String,
        /// What is wrong with the body.
        error: Base64Error,
    },
}

/// The one PEM block labelled `label` in `pem` (at most `max` bytes of
/// text), decoded and zeroized on drop: exactly one such block, whatever
/// else the text holds. An SEC1 `EC PRIVATE KEY` where a PKCS#8 `PRIVATE
/// KEY` is asked for is named, with the command that converts it.
pub fn pem_block(
    pem: &[u8],
    label: &str,
    max: usize,
) -> Result<zeroize::Zeroizing<Vec<u8>>, PemError> {
    if pem.len() > max {
        return Err(PemError::TooLarge {
            len: pem.len(),
            max,
        });
    }
    let text = std::str::from_utf8(pem).map_err(|_| PemError::NotUtf8)?;
    let begin = format!("-----BEGIN {label}-----");
    let end = format!("-----END {label}-----");
    let mut found = text.match_indices(&begin);
    let Some((start, _)) = found.next() else {
        let hint = if label == "PRIVATE KEY" && text.contains("-----BEGIN EC PRIVATE KEY-----") {
            " (an SEC1 EC PRIVATE KEY: convert it with `openssl pkcs8 -topk8 -nocrypt`)"
        } else {
            ""
        };
        return Err(PemError::NoBlock {
            label: label.into(),
            hint,
        });
    };
    if found.next().is_some() {
        return Err(PemError::MoreThanOne(label.into()));
    }
    let body = &text[start + begin.len()..];
    let stop = body
        .find(&end)
        .ok_or_else(|| PemError::NoEnd(label.into()))?;
    let b64: zeroize::Zeroizing<String> = zeroize::Zeroizing::new(
        body[..stop]
            .chars()
            .filter(|c| !c.is_ascii_whitespace())
            .collect(),
    );
    decode(&b64)
        .map(zeroize::Zeroizing::new)
        .map_err(|error| PemError::Base64 {
            label: label.into(),
            error,
        })
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
    fn one_pem_block_is_read_and_anything_else_named() {
        let block = pem("PRIVATE KEY", b"key bytes");
        let read = pem_block(format!("junk\n{block}").as_bytes(), "PRIVATE KEY", 4096);
        assert_eq!(read.unwrap().as_slice(), b"key bytes");
        let two = format!("{block}{block}");
        assert_eq!(
            pem_block(two.as_bytes(), "PRIVATE KEY", 4096),
            Err(PemError::MoreThanOne("PRIVATE KEY".into()))
        );
        let sec1 = pem("EC PRIVATE KEY", b"k");
        let err = pem_block(sec1.as_bytes(), "PRIVATE KEY", 4096).unwrap_err();
        assert!(err.to_string().contains("openssl pkcs8 -topk8"), "{err}");
        assert_eq!(
            pem_block(block.as_bytes(), "PRIVATE KEY", 10),
            Err(PemError::TooLarge {
                len: block.len(),
                max: 10
            })
        );
        let cut = &block[..block.len() - 10];
        assert_eq!(
            pem_block(cut.as_bytes(), "PRIVATE KEY", 4096),
            Err(PemError::NoEnd("PRIVATE KEY".into()))
        );
    }

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
