//! What a device holds, with the same answers as
//! `CryptsetupBackend::inspect` ([`crate::DiskBackend::inspect`]) (cryptsetup's
//! `isLuks`, then [`is_blank`]): a LUKS1 header, or a LUKS2 header with a
//! valid copy, is [`DiskState::Luks`]; anything else is blank only if it
//! reads as zeros where headers live. A LUKS2 header whose copies are both
//! damaged is never blank (cryptsetup's `isLuks` refuses it too, and the
//! magic is not zeros): [`DiskState::Unrecognized`].

use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::path::Path;

use super::binary::{self, BINARY_SIZE};
use super::error::{HeaderCopy, Luks2Error};
use super::header;
use crate::cryptsetup::is_blank;
use crate::{DiskError, DiskState};
use confboot_kms::is_uuid;
use confboot_util::IoFailure;

/// Where a LUKS1 header keeps its UUID (the same place as LUKS2's).
const LUKS1_UUID: std::ops::Range<usize> = 168..208;

/// The UUID of a LUKS1 header at the start of `first` (its first 4 KiB),
/// if there is one.
pub fn luks1_uuid(first: &[u8]) -> Option<Result<String, DiskError>> {
    match binary::magic_version(first) {
        Some((HeaderCopy::Primary, 1)) => {}
        _ => return None,
    }
    let field = &first[LUKS1_UUID];
    let end = field.iter().position(|&b| b == 0).unwrap_or(field.len());
    let uuid = String::from_utf8_lossy(&field[..end]).to_ascii_lowercase();
    Some(if is_uuid(&uuid) {
        Ok(uuid)
    } else {
        Err(DiskError::BadUuid(
            "the LUKS1 header's UUID is not a UUID".into(),
        ))
    })
}

/// What the device at `path` holds.
pub fn probe(path: &Path) -> Result<DiskState, DiskError> {
    let io =
        |e: std::io::Error| DiskError::Io(IoFailure::new(format!("reading {}", path.display()), e));
    let mut file = File::open(path).map_err(io)?;
    let size = file.seek(SeekFrom::End(0)).map_err(io)?;
    let mut first = vec![0u8; usize::try_from(size).map_or(BINARY_SIZE, |s| s.min(BINARY_SIZE))];
    file.seek(SeekFrom::Start(0)).map_err(io)?;
    file.read_exact(&mut first).map_err(io)?;
    if let Some(uuid) = luks1_uuid(&first) {
        return uuid.map(|uuid| DiskState::Luks { uuid });
    }
    let damaged = match header::read(&mut file) {
        Ok((h, _)) => {
            return Ok(DiskState::Luks {
                uuid: h.binary.uuid.to_ascii_lowercase(),
            });
        }
        Err(Luks2Error::NoValidHeader { primary, secondary }) => Some(format!(
            "a LUKS2 header with no valid copy (primary: {primary}; secondary: {secondary})"
        )),
        Err(Luks2Error::Version(v)) => Some(format!("a LUKS header of version {v}")),
        Err(Luks2Error::Io(m)) => return Err(DiskError::Io(m.within(path.display().to_string()))),
        Err(error) => {
            return Err(DiskError::Unreadable {
                device: path.to_path_buf(),
                error,
            });
        }
    };
    Ok(match is_blank(path)? {
        Ok(()) => DiskState::Blank,
        Err(not_blank) => DiskState::Unrecognized {
            reason: match binary::magic_version(&first) {
                Some(_) => damaged.unwrap_or_else(|| not_blank.to_string()),
                None => not_blank.to_string(),
            },
        },
    })
}
