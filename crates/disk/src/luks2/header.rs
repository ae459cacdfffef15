//! The two header copies on a device: reading both, choosing one as
//! cryptsetup does, writing both.
//!
//! Choice (cryptsetup 2.6's, checked against it by the interop tests): the
//! primary at 0; the secondary at the primary's header size, or, when the
//! primary is not valid, at the first of the LUKS2 header sizes where a
//! valid secondary is found. A primary with the LUKS magic and another
//! version than 2 ends the search: an error, as in cryptsetup. A copy is valid when its binary header and
//! checksum are and its JSON parses within the bounds. Both valid: the one
//! with the higher `seqid` (the primary on a tie). One valid: that one, and
//! the other is to be rewritten from it ([`Health`]). None valid: an error;
//! never a blank disk.

use std::io::{Read, Seek, SeekFrom, Write};

use super::binary::{self, BINARY_SIZE, BinaryHeader, HEADER_SIZES};
use super::error::{BinaryFault, HeaderCopy, HeaderFault, Luks2Error};
use super::metadata::Metadata;

/// A header: the binary fields and the JSON metadata (the same in both
/// copies once written).
#[derive(Clone, Debug, PartialEq)]
pub struct Header {
    /// The binary header's fields.
    pub binary: BinaryHeader,
    /// The JSON area.
    pub metadata: Metadata,
}

/// What reading found about the copies.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Health {
    /// Both copies valid and the same `seqid`.
    Consistent,
    /// One copy is damaged or older; the header was read from the other.
    /// cryptsetup rewrites it from the good one on its next load with
    /// write access; [`super::Luks2::repair`] does the same.
    NeedsRepair {
        /// The copy the header was read from.
        used: HeaderCopy,
        /// What is wrong with the other; `None` when it is valid but older.
        other: Option<HeaderFault>,
    },
}

/// The size of a device or file (seeking to its end).
pub fn device_size(dev: &mut impl Seek) -> Result<u64, Luks2Error> {
    Ok(dev.seek(SeekFrom::End(0))?)
}

/// Reads `len` bytes at `offset`; `None` if the device ends first.
fn read_at(
    dev: &mut (impl Read + Seek),
    offset: u64,
    len: usize,
    size: u64,
) -> Result<Option<Vec<u8>>, Luks2Error> {
    if offset.checked_add(len as u64).is_none_or(|end| end > size) {
        return Ok(None);
    }
    dev.seek(SeekFrom::Start(offset))?;
    let mut buf = vec![0u8; len];
    dev.read_exact(&mut buf)?;
    Ok(Some(buf))
}

/// Reads and checks the copy `copy` at `offset`.
fn read_copy(
    dev: &mut (impl Read + Seek),
    copy: HeaderCopy,
    offset: u64,
    size: u64,
) -> Result<Result<Header, HeaderFault>, Luks2Error> {
    let Some(first) = read_at(dev, offset, BINARY_SIZE, size)? else {
        return Ok(Err(HeaderFault::Absent));
    };
    let hdr_size = match binary::announced_size(&first, copy) {
        Ok(s) => s,
        Err(f) => return Ok(Err(HeaderFault::Binary(f))),
    };
    let Ok(hdr_len) = usize::try_from(hdr_size) else {
        return Ok(Err(HeaderFault::Binary(BinaryFault::HeaderSize(hdr_size))));
    };
    let Some(area) = read_at(dev, offset, hdr_len, size)? else {
        return Ok(Err(HeaderFault::Absent));
    };
    let bin = match binary::parse(&area, copy, offset) {
        Ok(b) => b,
        Err(f) => return Ok(Err(HeaderFault::Binary(f))),
    };
    Ok(
        match Metadata::parse(&area[BINARY_SIZE..], bin.hdr_size, size) {
            Ok(metadata) => Ok(Header {
                binary: bin,
                metadata,
            }),
            Err(e) => Err(HeaderFault::Json(Box::new(e))),
        },
    )
}

/// Reads both copies and chooses one (see the module's documentation).
pub fn read(dev: &mut (impl Read + Seek)) -> Result<(Header, Health), Luks2Error> {
    let size = device_size(dev)?;
    let primary = read_copy(dev, HeaderCopy::Primary, 0, size)?;
    if let Err(HeaderFault::Binary(BinaryFault::Version(v))) = primary {
        return Err(Luks2Error::Version(v));
    }
    let secondary = match &primary {
        Ok(p) => read_copy(dev, HeaderCopy::Secondary, p.binary.hdr_size, size)?,
        Err(_) => {
            let mut first_fault = None;
            let mut found = None;
            for offset in HEADER_SIZES {
                match read_copy(dev, HeaderCopy::Secondary, offset, size)? {
                    Ok(h) => {
                        found = Some(h);
                        break;
                    }
                    Err(HeaderFault::Binary(BinaryFault::Magic)) | Err(HeaderFault::Absent) => {}
                    Err(f) => {
                        first_fault.get_or_insert(f);
                    }
                }
            }
            found.ok_or_else(|| first_fault.unwrap_or(HeaderFault::Absent))
        }
    };
    match (primary, secondary) {
        (Ok(p), Ok(s)) => Ok(if s.binary.seqid > p.binary.seqid {
            (
                s,
                Health::NeedsRepair {
                    used: HeaderCopy::Secondary,
                    other: None,
                },
            )
        } else if p.binary.seqid > s.binary.seqid {
            (
                p,
                Health::NeedsRepair {
                    used: HeaderCopy::Primary,
                    other: None,
                },
            )
        } else {
            (p, Health::Consistent)
        }),
        (Ok(p), Err(f)) => Ok((
            p,
            Health::NeedsRepair {
                used: HeaderCopy::Primary,
                other: Some(f),
            },
        )),
        (Err(f), Ok(s)) => Ok((
            s,
            Health::NeedsRepair {
                used: HeaderCopy::Secondary,
                other: Some(f),
            },
        )),
        (Err(primary), Err(secondary)) => Err(Luks2Error::NoValidHeader { primary, secondary }),
    }
}

/// Writes both copies of `header` (its `seqid` as given), each with a
/// fresh salt: the secondary first, then the primary, then syncs. A
/// power cut between the two leaves the newer copy with the higher seqid,
/// which the next read chooses.
pub fn write(dev: &mut (impl Write + Seek), header: &Header) -> Result<(), Luks2Error> {
    let json = header.metadata.to_text();
    let hdr_size = header.binary.hdr_size;
    let json_area = usize::try_from(hdr_size)
        .unwrap_or(usize::MAX)
        .saturating_sub(BINARY_SIZE);
    if json.len() + 1 > json_area {
        return Err(Luks2Error::TokenSpace(format!(
            "{} bytes of JSON do not fit the {json_area}-byte JSON area",
            json.len(),
        )));
    }
    for (copy, offset) in [(HeaderCopy::Secondary, hdr_size), (HeaderCopy::Primary, 0)] {
        let salt = super::secret::random(64)?;
        let mut s = [0u8; 64];
        s.copy_from_slice(salt.expose());
        let area = binary::serialize(&header.binary, json.as_bytes(), &s, copy, offset)
            .map_err(|fault| Luks2Error::TokenSpace(fault.to_string()))?;
        dev.seek(SeekFrom::Start(offset))?;
        dev.write_all(&area)?;
    }
    dev.flush()?;
    Ok(())
}
