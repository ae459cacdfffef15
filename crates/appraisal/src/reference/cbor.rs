//! The subset of CBOR (RFC 8949) that reference-value sets use, written in
//! the deterministic encoding of RFC 8949 §4.2.1 and read back only in that
//! encoding.
//!
//! What is read: unsigned and negative integers, byte and text strings,
//! arrays, maps, tags, `false` and `true`; every length and argument in its
//! shortest form, every length definite, map keys in strictly ascending
//! order of their encoded bytes (so no key twice), text in UTF-8, nothing
//! after the one top-level item. Floats, `null`, `undefined`, other simple
//! values and indefinite lengths are refused. The reader is bounded before
//! it allocates: a string or collection cannot claim more than the bytes
//! that are left, nesting stops at [`Limits::max_depth`] and the items of
//! one document at [`Limits::max_items`].

#![deny(
    clippy::cast_possible_truncation,
    clippy::cast_sign_loss,
    clippy::cast_possible_wrap
)]

use confboot_util::bytes;

/// A CBOR data item of the subset above.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Value {
    /// An unsigned integer (major type 0).
    Uint(u64),
    /// A negative integer `-1 - n` (major type 1), holding `n`.
    Nint(u64),
    /// A byte string (major type 2).
    Bytes(Vec<u8>),
    /// A text string (major type 3).
    Text(String),
    /// An array (major type 4).
    Array(Vec<Value>),
    /// A map (major type 5), in the order read or built.
    Map(Vec<(Value, Value)>),
    /// A tagged item (major type 6).
    Tag(u64, Box<Value>),
    /// `false` or `true` (major type 7, simple values 20 and 21).
    Bool(bool),
}

impl Value {
    /// A text item.
    pub(crate) fn text(s: &str) -> Value {
        Value::Text(s.to_string())
    }

    /// An integer item (negative numbers as major type 1).
    pub(crate) fn int(n: i64) -> Value {
        // `-1 - n` of a negative `n` is 0 to `i64::MAX`: no overflow.
        if n >= 0 {
            Value::Uint(n.unsigned_abs())
        } else {
            Value::Nint((-1 - n).unsigned_abs())
        }
    }

    /// The integer this item is, if it is one that fits an `i64`.
    pub(crate) fn as_int(&self) -> Option<i64> {
        match *self {
            Value::Uint(n) => i64::try_from(n).ok(),
            Value::Nint(n) => i64::try_from(n).ok().map(|n| -1 - n),
            _ => None,
        }
    }

    /// A map with integer keys.
    pub(crate) fn int_map(entries: Vec<(i64, Value)>) -> Value {
        Value::Map(
            entries
                .into_iter()
                .map(|(k, v)| (Value::int(k), v))
                .collect(),
        )
    }
}

/// Bounds on what one decode reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Limits {
    /// Largest input, in bytes.
    pub max_bytes: usize,
    /// Deepest nesting of arrays, maps and tags.
    pub max_depth: usize,
    /// Most data items in one input (every key, value and element counts).
    pub max_items: usize,
}

/// Why bytes are not one item of the CBOR subset read here.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("CBOR at byte {offset}: {problem}")]
pub struct CborError {
    /// Where the problem was found.
    pub offset: usize,
    /// What it is.
    pub problem: CborProblem,
}

/// What is wrong with a CBOR input.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum CborProblem {
    /// The input is larger than the reader takes.
    #[error("input of {0} bytes is larger than allowed")]
    TooLarge(usize),
    /// The input ends inside an item.
    #[error("truncated")]
    Truncated,
    /// An argument or length not in its shortest form.
    #[error("not in the shortest form (deterministic CBOR)")]
    NotShortest,
    /// An indefinite length, a reserved argument, a float or a simple
    /// value other than `false` and `true`.
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
    /// A map key not above the one before it (out of order, or twice).
    #[error("map keys out of order or repeated")]
    KeyOrder,
    /// A text string that is not UTF-8.
    #[error("text that is not UTF-8")]
    NotUtf8,
    /// Bytes after the one top-level item.
    #[error("bytes after the item")]
    Trailing,
}

// ---- writing ----

fn head(out: &mut Vec<u8>, major: u8, n: u64) {
    let m = major << 5;
    if let Ok(small) = u8::try_from(n)
        && small < 24
    {
        out.push(m | small);
    } else if let Ok(byte) = u8::try_from(n) {
        out.extend([m | 24, byte]);
    } else if let Ok(short) = u16::try_from(n) {
        out.push(m | 25);
        out.extend(short.to_be_bytes());
    } else if let Ok(word) = u32::try_from(n) {
        out.push(m | 26);
        out.extend(word.to_be_bytes());
    } else {
        out.push(m | 27);
        out.extend(n.to_be_bytes());
    }
}

/// The deterministic encoding of `value`: shortest forms, map keys sorted
/// by their encoded bytes.
pub(crate) fn encode(value: &Value) -> Vec<u8> {
    let mut out = Vec::new();
    encode_into(&mut out, value);
    out
}

fn encode_into(out: &mut Vec<u8>, value: &Value) {
    match value {
        Value::Uint(n) => head(out, 0, *n),
        Value::Nint(n) => head(out, 1, *n),
        Value::Bytes(b) => {
            head(out, 2, b.len() as u64);
            out.extend_from_slice(b);
        }
        Value::Text(t) => {
            head(out, 3, t.len() as u64);
            out.extend_from_slice(t.as_bytes());
        }
        Value::Array(items) => {
            head(out, 4, items.len() as u64);
            for item in items {
                encode_into(out, item);
            }
        }
        Value::Map(entries) => {
            let mut encoded: Vec<(Vec<u8>, Vec<u8>)> = entries
                .iter()
                .map(|(k, v)| (encode(k), encode(v)))
                .collect();
            encoded.sort();
            head(out, 5, encoded.len() as u64);
            for (k, v) in encoded {
                out.extend(k);
                out.extend(v);
            }
        }
        Value::Tag(tag, inner) => {
            head(out, 6, *tag);
            encode_into(out, inner);
        }
        Value::Bool(b) => out.push(if *b { 0xf5 } else { 0xf4 }),
    }
}

// ---- reading ----

/// Decodes exactly one item that fills `bytes`, within `limits`.
pub(crate) fn decode(bytes: &[u8], limits: Limits) -> Result<Value, CborError> {
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

/// The shared bounded reader ([`bytes::Reader`]) with the document's limits.
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

    fn left(&self) -> usize {
        self.bytes.remaining()
    }

    fn take(&mut self, n: usize) -> Result<&[u8], CborError> {
        let truncated = self.error(CborProblem::Truncated);
        self.bytes.take(n).map_err(|_| truncated)
    }

    /// An argument of the head, read by `read` (one of the big-endian
    /// integers).
    fn argument<T: Into<u64>>(
        &mut self,
        read: fn(&mut bytes::Reader<'a>) -> Result<T, bytes::ReadError>,
    ) -> Result<u64, CborError> {
        let truncated = self.error(CborProblem::Truncated);
        read(&mut self.bytes).map(Into::into).map_err(|_| truncated)
    }

    /// The initial byte's major type and its argument, in shortest form.
    fn head(&mut self) -> Result<(u8, u8, u64), CborError> {
        let truncated = self.error(CborProblem::Truncated);
        let initial = self.bytes.u8().map_err(|_| truncated)?;
        let (major, info) = (initial >> 5, initial & 0x1f);
        if major == 7 {
            return match info {
                20 | 21 => Ok((7, info, u64::from(info))),
                _ => Err(self.error(CborProblem::Unsupported { major, info })),
            };
        }
        let (n, min) = match info {
            0..=23 => return Ok((major, info, u64::from(info))),
            24 => (self.argument(bytes::Reader::u8)?, 24),
            25 => (self.argument(bytes::Reader::u16_be)?, 0x100),
            26 => (self.argument(bytes::Reader::u32_be)?, 0x1_0000),
            27 => (self.argument(bytes::Reader::u64_be)?, 0x1_0000_0000),
            _ => return Err(self.error(CborProblem::Unsupported { major, info })),
        };
        if n < min {
            return Err(self.error(CborProblem::NotShortest));
        }
        Ok((major, info, n))
    }

    /// A length that the bytes left can hold (each element takes at least
    /// one byte), so nothing is allocated for a length the input cannot back.
    fn length(&self, n: u64) -> Result<usize, CborError> {
        usize::try_from(n)
            .ok()
            .filter(|n| *n <= self.left())
            .ok_or_else(|| self.error(CborProblem::Truncated))
    }

    fn count_item(&mut self) -> Result<(), CborError> {
        if self.items_left == 0 {
            return Err(self.error(CborProblem::TooManyItems));
        }
        self.items_left -= 1;
        Ok(())
    }

    fn item(&mut self, depth: usize) -> Result<Value, CborError> {
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
        Ok(match major {
            0 => Value::Uint(n),
            1 => Value::Nint(n),
            2 => {
                let len = self.length(n)?;
                Value::Bytes(self.take(len)?.to_vec())
            }
            3 => {
                let len = self.length(n)?;
                let raw = self.take(len)?;
                let text = std::str::from_utf8(raw)
                    .map_err(|_| CborError {
                        offset: start,
                        problem: CborProblem::NotUtf8,
                    })?
                    .to_string();
                Value::Text(text)
            }
            4 => {
                let depth = nested(self)?;
                let len = self.length(n)?;
                let mut items = Vec::with_capacity(len);
                for _ in 0..len {
                    items.push(self.item(depth)?);
                }
                Value::Array(items)
            }
            5 => {
                let depth = nested(self)?;
                let len = self.length(n)?;
                let mut entries = Vec::with_capacity(len);
                let mut previous: Option<(usize, usize)> = None;
                for _ in 0..len {
                    let key_start = self.bytes.offset();
                    let key = self.item(depth)?;
                    let key_end = self.bytes.offset();
                    let seen = self.bytes.consumed();
                    if let Some((s, e)) = previous
                        && seen.get(s..e) >= seen.get(key_start..key_end)
                    {
                        return Err(CborError {
                            offset: key_start,
                            problem: CborProblem::KeyOrder,
                        });
                    }
                    previous = Some((key_start, key_end));
                    let value = self.item(depth)?;
                    entries.push((key, value));
                }
                Value::Map(entries)
            }
            6 => {
                let depth = nested(self)?;
                Value::Tag(n, Box::new(self.item(depth)?))
            }
            _ => Value::Bool(info == 21),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIMITS: Limits = Limits {
        max_bytes: 1 << 16,
        max_depth: 8,
        max_items: 1000,
    };

    fn read(bytes: &[u8]) -> Result<Value, CborProblem> {
        decode(bytes, LIMITS).map_err(|e| e.problem)
    }

    #[test]
    fn rfc8949_appendix_a_examples_encode_and_read_back() {
        let cases: &[(Value, &str)] = &[
            (Value::Uint(0), "00"),
            (Value::Uint(23), "17"),
            (Value::Uint(24), "1818"),
            (Value::Uint(1000), "1903e8"),
            (Value::Uint(1_000_000), "1a000f4240"),
            (Value::Uint(1_000_000_000_000), "1b000000e8d4a51000"),
            (Value::int(-1), "20"),
            (Value::int(-1000), "3903e7"),
            (Value::Bytes(vec![1, 2, 3, 4]), "4401020304"),
            (Value::text("IETF"), "6449455446"),
            (Value::text("\u{fc}"), "62c3bc"),
            (Value::Bool(false), "f4"),
            (Value::Bool(true), "f5"),
            (
                Value::Tag(1, Box::new(Value::Uint(1_363_896_240))),
                "c11a514b67b0",
            ),
            (
                Value::Array(vec![
                    Value::Uint(1),
                    Value::Array(vec![Value::Uint(2), Value::Uint(3)]),
                ]),
                "8201820203",
            ),
            (
                Value::Map(vec![
                    (Value::text("b"), Value::Uint(2)),
                    (Value::text("a"), Value::Uint(1)),
                ]),
                "a2616101616202",
            ),
        ];
        for (value, hex) in cases {
            let bytes = confboot_util::hex::decode(hex).unwrap();
            assert_eq!(encode(value), bytes, "{hex}");
            let back = read(&bytes).unwrap();
            assert_eq!(encode(&back), bytes, "{hex}");
        }
    }

    #[test]
    fn encodings_that_are_not_deterministic_are_refused() {
        let refused = |hex: &str, problem: CborProblem| {
            let bytes = confboot_util::hex::decode(hex).unwrap();
            assert_eq!(read(&bytes), Err(problem), "{hex}");
        };
        refused("1817", CborProblem::NotShortest);
        refused("190017", CborProblem::NotShortest);
        refused("1a0000ffff", CborProblem::NotShortest);
        refused("5801aa", CborProblem::NotShortest);
        // Keys out of order, and one key twice.
        refused("a2616201616101", CborProblem::KeyOrder);
        refused("a2616101616102", CborProblem::KeyOrder);
        // Indefinite lengths, floats, null, undefined.
        for (hex, major, info) in [
            ("5f42010243030405ff", 2, 31),
            ("9fff", 4, 31),
            ("f93c00", 7, 25),
            ("f6", 7, 22),
            ("f7", 7, 23),
            ("1c", 0, 28),
        ] {
            refused(hex, CborProblem::Unsupported { major, info });
        }
        refused("62c328", CborProblem::NotUtf8);
        refused("0000", CborProblem::Trailing);
    }

    #[test]
    fn lengths_depth_and_counts_are_bounded_before_allocation() {
        // A byte string and an array that claim more than the input holds.
        assert_eq!(
            read(&[0x5b, 0, 0, 0, 1, 0, 0, 0, 0]),
            Err(CborProblem::Truncated)
        );
        assert_eq!(
            read(&[0x9b, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff]),
            Err(CborProblem::Truncated)
        );
        assert_eq!(read(&[0x81; 9]), Err(CborProblem::TooDeep));
        assert!(read(&[[0x81; 8].as_slice(), &[0]].concat()).is_ok());
        let many: Vec<u8> = [&[0x99, 0x03, 0xe8][..], &[0; 1000]].concat();
        assert_eq!(read(&many), Err(CborProblem::TooManyItems));
        let limits = Limits {
            max_bytes: 4,
            ..LIMITS
        };
        assert!(matches!(
            decode(&[0x44, 1, 2, 3, 4], limits).map_err(|e| e.problem),
            Err(CborProblem::TooLarge(5))
        ));
    }
}
