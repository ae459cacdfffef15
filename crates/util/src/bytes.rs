//! One bounded reader for the binary formats confboot parses from another
//! party's bytes (TPM structures, the TCG event log and TDX's CCEL, the TDX
//! quote, SNP's certificate table, CBOR): every read is checked against the
//! bytes that remain, nothing panics and nothing is read twice. Integers in
//! either byte order; each parser maps a [`ReadError`] to its own error.
//!
//! ```
//! use confboot_util::bytes::{ReadError, Reader};
//! let mut r = Reader::new(&[0x01, 0x02, 0x03]);
//! assert_eq!(r.u16_be(), Ok(0x0102));
//! assert_eq!(r.u16_le(), Err(ReadError::Short { offset: 2, needed: 2, remaining: 1 }));
//! assert_eq!(r.finish(), Err(ReadError::Trailing { offset: 2, trailing: 1 }));
//! ```

#![deny(
    clippy::cast_possible_truncation,
    clippy::cast_sign_loss,
    clippy::cast_possible_wrap
)]

/// Why a read did not succeed. A failed read consumes nothing.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ReadError {
    /// Fewer bytes remain than the read needs.
    #[error("needs {needed} bytes at offset {offset}, {remaining} remain")]
    Short {
        /// Where the read started.
        offset: usize,
        /// How many bytes it needed.
        needed: usize,
        /// How many were left.
        remaining: usize,
    },
    /// [`Reader::finish`] found bytes nobody read.
    #[error("{trailing} trailing bytes at offset {offset}")]
    Trailing {
        /// Where the unread bytes start.
        offset: usize,
        /// How many there are.
        trailing: usize,
    },
}

/// A bounded reader over a byte slice: a position that only moves forward,
/// never past the end.
#[derive(Clone, Debug)]
pub struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    /// A reader at the start of `bytes`.
    pub fn new(bytes: &'a [u8]) -> Reader<'a> {
        Reader { bytes, at: 0 }
    }

    /// How many bytes were read so far (the offset of the next read).
    pub fn offset(&self) -> usize {
        self.at
    }

    /// How many bytes are left.
    pub fn remaining(&self) -> usize {
        self.rest().len()
    }

    /// The bytes not read yet (without reading them).
    pub fn rest(&self) -> &'a [u8] {
        self.bytes.get(self.at..).unwrap_or_default()
    }

    /// The bytes read so far.
    pub fn consumed(&self) -> &'a [u8] {
        self.bytes.get(..self.at).unwrap_or_default()
    }

    /// Whether every byte was read.
    pub fn is_done(&self) -> bool {
        self.remaining() == 0
    }

    /// The next `n` bytes.
    pub fn take(&mut self, n: usize) -> Result<&'a [u8], ReadError> {
        let short = ReadError::Short {
            offset: self.at,
            needed: n,
            remaining: self.remaining(),
        };
        let end = self.at.checked_add(n).ok_or(short)?;
        let out = self.bytes.get(self.at..end).ok_or(short)?;
        self.at = end;
        Ok(out)
    }

    /// The next `N` bytes as an array.
    pub fn array<const N: usize>(&mut self) -> Result<[u8; N], ReadError> {
        let offset = self.at;
        let remaining = self.remaining();
        let b = self.take(N)?;
        <[u8; N]>::try_from(b).map_err(|_| ReadError::Short {
            offset,
            needed: N,
            remaining,
        })
    }

    /// Skips `n` bytes.
    pub fn skip(&mut self, n: usize) -> Result<(), ReadError> {
        self.take(n).map(|_| ())
    }

    /// The next byte.
    pub fn u8(&mut self) -> Result<u8, ReadError> {
        let [b] = self.array()?;
        Ok(b)
    }

    /// The next big-endian `u16`.
    pub fn u16_be(&mut self) -> Result<u16, ReadError> {
        self.array().map(u16::from_be_bytes)
    }

    /// The next little-endian `u16`.
    pub fn u16_le(&mut self) -> Result<u16, ReadError> {
        self.array().map(u16::from_le_bytes)
    }

    /// The next big-endian `u32`.
    pub fn u32_be(&mut self) -> Result<u32, ReadError> {
        self.array().map(u32::from_be_bytes)
    }

    /// The next little-endian `u32`.
    pub fn u32_le(&mut self) -> Result<u32, ReadError> {
        self.array().map(u32::from_le_bytes)
    }

    /// The next big-endian `u64`.
    pub fn u64_be(&mut self) -> Result<u64, ReadError> {
        self.array().map(u64::from_be_bytes)
    }

    /// The next little-endian `u64`.
    pub fn u64_le(&mut self) -> Result<u64, ReadError> {
        self.array().map(u64::from_le_bytes)
    }

    /// Fails unless every byte was read.
    pub fn finish(&self) -> Result<(), ReadError> {
        match self.remaining() {
            0 => Ok(()),
            trailing => Err(ReadError::Trailing {
                offset: self.at,
                trailing,
            }),
        }
    }
}

/// A little-endian `u32` length or count as a `usize` (saturating on a
/// target whose `usize` is narrower, where no bound it is checked against
/// can hold it anyway).
pub fn len_of(n: u32) -> usize {
    usize::try_from(n).unwrap_or(usize::MAX)
}

/// A length as the `u32` a writer puts before the bytes (saturating: the
/// writers build tests' and tools' structures, far below 4 GiB, and a
/// saturated length is refused by every reader here).
pub fn len_u32(n: usize) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_in_both_orders_and_stops_at_the_end() {
        let mut r = Reader::new(&[1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15]);
        assert_eq!(r.u16_be(), Ok(0x0102));
        assert_eq!(r.u16_le(), Ok(0x0403));
        assert_eq!(r.u32_be(), Ok(0x0506_0708));
        assert_eq!(r.offset(), 8);
        assert_eq!(r.consumed().len(), 8);
        assert_eq!(
            r.u64_le(),
            Err(ReadError::Short {
                offset: 8,
                needed: 8,
                remaining: 7
            })
        );
        // A failed read consumes nothing.
        assert_eq!(r.offset(), 8);
        assert_eq!(r.u32_le(), Ok(0x0c0b_0a09));
        assert_eq!(r.rest(), &[13, 14, 15]);
        assert_eq!(r.take(3), Ok(&[13u8, 14, 15][..]));
        assert!(r.is_done());
        assert_eq!(r.finish(), Ok(()));
        assert_eq!(
            r.u8().map_err(|e| e.to_string()),
            Err("needs 1 bytes at offset 15, 0 remain".to_string())
        );
    }

    #[test]
    fn a_take_gives_exactly_what_it_was_asked_for() {
        let bytes: Vec<u8> = (0..=255).collect();
        for n in [0, 1, 8, 9, 64, 255, 256] {
            let mut r = Reader::new(&bytes);
            assert_eq!(r.take(n), Ok(&bytes[..n]), "{n}");
            assert_eq!((r.offset(), r.remaining()), (n, 256 - n));
            assert_eq!(r.consumed(), &bytes[..n]);
        }
        let mut r = Reader::new(&bytes);
        assert_eq!(
            r.array::<48>().map(|a| a.to_vec()),
            Ok(bytes[..48].to_vec())
        );
        assert!(r.take(209).is_err());
        assert_eq!(r.take(208), Ok(&bytes[48..]));
    }

    #[test]
    fn a_huge_length_is_short_not_an_overflow() {
        let mut r = Reader::new(&[0; 4]);
        r.skip(1).unwrap();
        assert_eq!(
            r.take(usize::MAX),
            Err(ReadError::Short {
                offset: 1,
                needed: usize::MAX,
                remaining: 3
            })
        );
        assert!(r.u64_be().is_err());
        assert_eq!(
            r.u32_be(),
            Err(ReadError::Short {
                offset: 1,
                needed: 4,
                remaining: 3
            })
        );
    }
}
