//! The CBOR (RFC 8949) that an NSM attestation document and its COSE_Sign1
//! envelope use, read into a small tree, bounded before anything is
//! allocated.
//!
//! What is read: unsigned and negative integers, byte and text strings of
//! definite length, arrays and maps of definite or indefinite length (the
//! NSM writes its document as an indefinite-length map), tags, `false`,
//! `true`, `null` and `undefined`. Floats, other simple values and
//! indefinite-length strings are refused, and so is a map that holds one
//! key twice. Nothing may follow the one top-level item. A string or a
//! collection cannot claim more than the bytes that are left, nesting
//! stops at [`Limits::max_depth`] and the items of one input at
//! [`Limits::max_items`].

#![deny(
    clippy::cast_possible_truncation,
    clippy::cast_sign_loss,
    clippy::cast_possible_wrap
)]

use confboot_util::bytes;

/// A CBOR data item, borrowing its strings from the input.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Value<'a> {
    /// An unsigned integer (major type 0).
    Uint(u64),
    /// A negative integer `-1 - n` (major type 1), holding `n`.
    Nint(u64),
    /// A byte string (major type 2).
    Bytes(&'a [u8]),
    /// A text string (major type 3).
    Text(&'a str),
    /// An array (major type 4).
    Array(Vec<Value<'a>>),
    /// A map (major type 5), in the order read; no key twice.
    Map(Vec<(Value<'a>, Value<'a>)>),
    /// A tagged item (major type 6).
    Tag(u64, Box<Value<'a>>),
    /// `false` or `true`.
    Bool(bool),
    /// `null`.
    Null,
    /// `undefined`.
    Undefined,
}

impl<'a> Value<'a> {
    /// The integer this item is, if it is one that fits an `i64`.
    pub fn as_int(&self) -> Option<i64> {
        match *self {
            Value::Uint(n) => i64::try_from(n).ok(),
            Value::Nint(n) => i64::try_from(n).ok().map(|n| -1 - n),
            _ => None,
        }
    }

    /// The value of the map entry whose key is the text `key`.
    pub fn get(&self, key: &str) -> Option<&Value<'a>> {
        match self {
            Value::Map(entries) => entries
                .iter()
                .find(|(k, _)| *k == Value::Text(key))
                .map(|(_, v)| v),
            _ => None,
        }
    }
}

/// Bounds on what one decode reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Largest input, in bytes.
    pub max_bytes: usize,
    /// Deepest nesting of arrays, maps and tags.
    pub max_depth: usize,
    /// Most data items in one input (every key, value and element counts).
    pub max_items: usize,
}

/// Why bytes are not one CBOR item of the kinds read here.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("CBOR at byte {offset}: {problem}")]
pub struct CborError {
    /// Where the problem was found.
    pub offset: usize,
    /// What it is.
    pub problem: CborProblem,
}

/// What is wrong with a CBOR input.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum CborProblem {
    /// The input is larger than the reader takes.
    #[error("input of {0} bytes is larger than allowed")]
    TooLarge(usize),
    /// The input ends inside an item.
    #[error("truncated")]
    Truncated,
    /// A float, a reserved argument, an indefinite-length string, a
    /// misplaced break or a simple value not read here.
    #[error("an item of a kind that is not read here (major type {major}, argument {info})")]
    Unsupported {
        /// The major type.
        major: u8,
        /// The additional information.
        info: u8,
    },
    /// Nested deeper than allowed.
    #[error("nested deeper than allowed")]
    TooDeep,
    /// More items than allowed.
    #[error("more items than allowed")]
    TooManyItems,
    /// A map holds one key twice.
    #[error("a map key repeated")]
    DuplicateKey,
    /// A text string that is not UTF-8.
    #[error("text that is not UTF-8")]
    NotUtf8,
    /// Bytes after the one top-level item.
    #[error("bytes after the item")]
    Trailing,
}

/// The initial byte of a "break" that ends an indefinite-length item.
const BREAK: u8 = 0xff;
/// The additional information of an indefinite length.
const INDEFINITE: u8 = 31;

/// Decodes exactly one item that fills `bytes`, within `limits`.
pub fn decode(bytes: &[u8], limits: Limits) -> Result<Value<'_>, CborError> {
    if bytes.len() > limits.max_bytes {
        return Err(CborError {
            offset: 0,
            problem: CborProblem::TooLarge(bytes.len()),
        });
    }
    let mut reader = Reader {
        bytes: bytes::Reader::new(bytes),
        items_left: limits.max_items,
        max_depth: limits.max_depth,
    };
    let value = reader.item(0)?;
    if !reader.bytes.is_done() {
        return Err(reader.error(CborProblem::Trailing));
    }
    Ok(value)
}

/// Appends the head of a definite-length item: major type and argument in
/// its shortest form.
pub fn head(out: &mut Vec<u8>, major: u8, n: u64) {
    let major = major << 5;
    match n {
        0..=23 => out.push(major | n.to_le_bytes()[0]),
        24..=0xff => {
            out.push(major | 24);
            out.push(n.to_le_bytes()[0]);
        }
        0x100..=0xffff => {
            out.push(major | 25);
            out.extend_from_slice(&n.to_be_bytes()[6..]);
        }
        0x1_0000..=0xffff_ffff => {
            out.push(major | 26);
            out.extend_from_slice(&n.to_be_bytes()[4..]);
        }
        _ => {
            out.push(major | 27);
            out.extend_from_slice(&n.to_be_bytes());
        }
    }
}

/// Appends a byte string.
pub fn bytes_item(out: &mut Vec<u8>, b: &[u8]) {
    head(out, 2, b.len() as u64);
    out.extend_from_slice(b);
}

/// Appends a text string.
pub fn text_item(out: &mut Vec<u8>, t: &str) {
    head(out, 3, t.len() as u64);
    out.extend_from_slice(t.as_bytes());
}

/// The shared bounded reader ([`bytes::Reader`]) with the input's limits.
struct Reader<'a> {
    bytes: bytes::Reader<'a>,
    items_left: usize,
    max_depth: usize,
}

impl<'a> Reader<'a> {
    fn error(&self, problem: CborProblem) -> CborError {
        CborError {
            offset: self.bytes.offset(),
            problem,
        }
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8], CborError> {
        let truncated = self.error(CborProblem::Truncated);
        self.bytes.take(n).map_err(|_| truncated)
    }

    fn argument<T: Into<u64>>(
        &mut self,
        read: fn(&mut bytes::Reader<'a>) -> Result<T, bytes::ReadError>,
    ) -> Result<u64, CborError> {
        let truncated = self.error(CborProblem::Truncated);
        read(&mut self.bytes).map(Into::into).map_err(|_| truncated)
    }

    /// The initial byte's major type, additional information and argument
    /// (`None` for an indefinite length).
    fn head(&mut self) -> Result<(u8, u8, Option<u64>), CborError> {
        let truncated = self.error(CborProblem::Truncated);
        let initial = self.bytes.u8().map_err(|_| truncated)?;
        let (major, info) = (initial >> 5, initial & 0x1f);
        let unsupported = |r: &Self| r.error(CborProblem::Unsupported { major, info });
        if major == 7 {
            return match info {
                20..=23 => Ok((7, info, Some(u64::from(info)))),
                _ => Err(unsupported(self)),
            };
        }
        let n = match info {
            0..=23 => u64::from(info),
            24 => self.argument(bytes::Reader::u8)?,
            25 => self.argument(bytes::Reader::u16_be)?,
            26 => self.argument(bytes::Reader::u32_be)?,
            27 => self.argument(bytes::Reader::u64_be)?,
            INDEFINITE if matches!(major, 4 | 5) => return Ok((major, info, None)),
            _ => return Err(unsupported(self)),
        };
        Ok((major, info, Some(n)))
    }

    /// A length that the bytes left can hold (each element takes at least
    /// one byte), so nothing is allocated for a length the input cannot back.
    fn length(&self, n: u64) -> Result<usize, CborError> {
        usize::try_from(n)
            .ok()
            .filter(|n| *n <= self.bytes.remaining())
            .ok_or_else(|| self.error(CborProblem::Truncated))
    }

    fn count_item(&mut self) -> Result<(), CborError> {
        if self.items_left == 0 {
            return Err(self.error(CborProblem::TooManyItems));
        }
        self.items_left -= 1;
        Ok(())
    }

    /// Whether the next byte is a break, which it then consumes.
    fn at_break(&mut self) -> Result<bool, CborError> {
        match self.bytes.rest().first() {
            None => Err(self.error(CborProblem::Truncated)),
            Some(&BREAK) => {
                self.take(1)?;
                Ok(true)
            }
            Some(_) => Ok(false),
        }
    }

    /// The elements of an array or the keys and values of a map: `count`
    /// of them, or up to a break when `count` is `None`.
    fn elements(
        &mut self,
        count: Option<u64>,
        per_entry: usize,
        depth: usize,
    ) -> Result<Vec<Value<'a>>, CborError> {
        let mut items = Vec::new();
        match count {
            Some(n) => {
                let len = self.length(n)?;
                items.reserve(len.saturating_mul(per_entry));
                for _ in 0..len.saturating_mul(per_entry) {
                    items.push(self.item(depth)?);
                }
            }
            None => {
                while !self.at_break()? {
                    for _ in 0..per_entry {
                        items.push(self.item(depth)?);
                    }
                }
            }
        }
        Ok(items)
    }

    fn item(&mut self, depth: usize) -> Result<Value<'a>, CborError> {
        self.count_item()?;
        let start = self.bytes.offset();
        let (major, info, n) = self.head()?;
        let nested = |r: &Self| {
            if depth >= r.max_depth {
                Err(CborError {
                    offset: start,
                    problem: CborProblem::TooDeep,
                })
            } else {
                Ok(depth + 1)
            }
        };
        let definite =
            |r: &Self| n.ok_or_else(|| r.error(CborProblem::Unsupported { major, info }));
        Ok(match major {
            0 => Value::Uint(definite(self)?),
            1 => Value::Nint(definite(self)?),
            2 => {
                let len = self.length(definite(self)?)?;
                Value::Bytes(self.take(len)?)
            }
            3 => {
                let len = self.length(definite(self)?)?;
                let raw = self.take(len)?;
                Value::Text(std::str::from_utf8(raw).map_err(|_| CborError {
                    offset: start,
                    problem: CborProblem::NotUtf8,
                })?)
            }
            4 => {
                let depth = nested(self)?;
                Value::Array(self.elements(n, 1, depth)?)
            }
            5 => {
                let depth = nested(self)?;
                let flat = self.elements(n, 2, depth)?;
                let mut entries: Vec<(Value<'a>, Value<'a>)> = Vec::with_capacity(flat.len() / 2);
                let mut it = flat.into_iter();
                while let (Some(k), Some(v)) = (it.next(), it.next()) {
                    if entries.iter().any(|(seen, _)| *seen == k) {
                        return Err(CborError {
                            offset: start,
                            problem: CborProblem::DuplicateKey,
                        });
                    }
                    entries.push((k, v));
                }
                Value::Map(entries)
            }
            6 => {
                let depth = nested(self)?;
                Value::Tag(definite(self)?, Box::new(self.item(depth)?))
            }
            _ => match info {
                20 => Value::Bool(false),
                21 => Value::Bool(true),
                22 => Value::Null,
                _ => Value::Undefined,
            },
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIMITS: Limits = Limits {
        max_bytes: 1 << 16,
        max_depth: 4,
        max_items: 100,
    };

    fn read(bytes: &[u8]) -> Result<Value<'_>, CborProblem> {
        decode(bytes, LIMITS).map_err(|e| e.problem)
    }

    #[test]
    fn rfc8949_examples_read() {
        assert_eq!(read(&[0x00]), Ok(Value::Uint(0)));
        assert_eq!(read(&[0x18, 0x64]), Ok(Value::Uint(100)));
        assert_eq!(read(&[0x38, 0x63]), Ok(Value::Nint(99)));
        assert_eq!(read(&[0x38, 0x63]).unwrap().as_int(), Some(-100));
        assert_eq!(read(&[0x43, 1, 2, 3]), Ok(Value::Bytes(&[1, 2, 3])));
        assert_eq!(read(&[0x61, b'a']), Ok(Value::Text("a")));
        assert_eq!(read(&[0xf6]), Ok(Value::Null));
        assert_eq!(read(&[0xf7]), Ok(Value::Undefined));
        // [_ 1, [2, 3]] and {_ "a": 1}
        assert_eq!(
            read(&[0x9f, 0x01, 0x82, 0x02, 0x03, 0xff]),
            Ok(Value::Array(vec![
                Value::Uint(1),
                Value::Array(vec![Value::Uint(2), Value::Uint(3)])
            ]))
        );
        let m = read(&[0xbf, 0x61, b'a', 0x01, 0xff]).unwrap();
        assert_eq!(m.get("a"), Some(&Value::Uint(1)));
        assert_eq!(
            read(&[0xd2, 0x80]),
            Ok(Value::Tag(18, Box::new(Value::Array(vec![]))))
        );
    }

    #[test]
    fn what_is_not_read_is_refused() {
        // A float, an indefinite byte string, a lone break.
        assert!(matches!(
            read(&[0xf9, 0, 0]),
            Err(CborProblem::Unsupported { .. })
        ));
        assert!(matches!(
            read(&[0x5f, 0xff]),
            Err(CborProblem::Unsupported { .. })
        ));
        assert!(matches!(
            read(&[0xff]),
            Err(CborProblem::Unsupported { .. })
        ));
        assert_eq!(
            read(&[0xa2, 0x61, b'a', 1, 0x61, b'a', 2]),
            Err(CborProblem::DuplicateKey)
        );
        assert_eq!(read(&[0x62, 0xff, 0xfe]), Err(CborProblem::NotUtf8));
        assert_eq!(read(&[0x01, 0x01]), Err(CborProblem::Trailing));
    }

    #[test]
    fn lengths_depth_and_counts_are_bounded_before_allocation() {
        // A byte string and an array claiming 2^32 entries in 9 bytes.
        assert_eq!(
            read(&[0x5b, 0, 0, 0, 1, 0, 0, 0, 0]),
            Err(CborProblem::Truncated)
        );
        assert_eq!(
            read(&[0x9b, 0, 0, 0, 1, 0, 0, 0, 0]),
            Err(CborProblem::Truncated)
        );
        // An indefinite map with no break.
        assert_eq!(read(&[0xbf, 0x01, 0x02]), Err(CborProblem::Truncated));
        assert_eq!(
            read(&[0x81, 0x81, 0x81, 0x81, 0x81, 0x00]),
            Err(CborProblem::TooDeep)
        );
        let many = [vec![0x9f], vec![0x00; 200], vec![0xff]].concat();
        assert_eq!(read(&many), Err(CborProblem::TooManyItems));
        let big = vec![0u8; LIMITS.max_bytes + 1];
        assert_eq!(read(&big), Err(CborProblem::TooLarge(big.len())));
    }

    #[test]
    fn heads_are_written_in_their_shortest_form() {
        for (n, want) in [
            (0u64, vec![0x40]),
            (24, vec![0x58, 24]),
            (256, vec![0x59, 1, 0]),
            (65_536, vec![0x5a, 0, 1, 0, 0]),
        ] {
            let mut out = Vec::new();
            head(&mut out, 2, n);
            assert_eq!(out, want);
        }
    }
}
