//! The host's LUKS2 header editor: it reads and rewrites the JSON area of
//! both header copies of a disk image and recomputes their checksums, as
//! any host with the disk's bytes can. It uses none of the product's LUKS2
//! code, so the edits do not depend on what the node's parser accepts.

use std::fs::OpenOptions;
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::Path;

use serde_json::Value;

/// Where the binary header's fields lie (LUKS2 on-disk format).
const HDR_SIZE: std::ops::Range<usize> = 8..16;
const SEQID: std::ops::Range<usize> = 16..24;
const UUID: std::ops::Range<usize> = 168..208;
const CHECKSUM: std::ops::Range<usize> = 448..512;
/// The binary header's size; the JSON area follows it.
const BINARY: usize = 4096;
/// The most a header copy may be (4 MiB, the format's largest).
const MAX_HEADER: u64 = 4 << 20;

/// Why a header could not be edited.
#[derive(Debug, thiserror::Error)]
pub enum HeaderEditError {
    /// Reading or writing the image failed.
    #[error("disk image: {0}")]
    Io(#[from] std::io::Error),
    /// The image has no LUKS2 header the editor understands.
    #[error("no LUKS2 header: {0}")]
    NotLuks(String),
    /// The edited JSON does not fit the JSON area.
    #[error("the edited JSON is {0} bytes, more than its area")]
    TooLarge(usize),
}

/// One header copy as bytes (binary header and JSON area).
fn read_copy(disk: &Path, offset: u64) -> Result<Vec<u8>, HeaderEditError> {
    let mut f = std::fs::File::open(disk)?;
    f.seek(SeekFrom::Start(offset))?;
    let mut binary = vec![0u8; BINARY];
    f.read_exact(&mut binary)?;
    if &binary[..4] != b"LUKS" && &binary[..4] != b"SKUL" {
        return Err(HeaderEditError::NotLuks(format!("no magic at {offset}")));
    }
    let size = u64::from_be_bytes(binary[HDR_SIZE].try_into().unwrap());
    if !(BINARY as u64..=MAX_HEADER).contains(&size) {
        return Err(HeaderEditError::NotLuks(format!("header size {size}")));
    }
    let mut copy = binary;
    copy.resize(size as usize, 0);
    f.read_exact(&mut copy[BINARY..])?;
    Ok(copy)
}

/// The header size the primary copy announces (the secondary copy's offset).
fn header_size(disk: &Path) -> Result<u64, HeaderEditError> {
    let primary = read_copy(disk, 0)?;
    Ok(u64::from_be_bytes(primary[HDR_SIZE].try_into().unwrap()))
}

/// The JSON metadata of the primary header copy.
pub fn read_json(disk: &Path) -> Result<Value, HeaderEditError> {
    let copy = read_copy(disk, 0)?;
    let text = &copy[BINARY..];
    let end = text.iter().position(|b| *b == 0).unwrap_or(text.len());
    serde_json::from_slice(&text[..end]).map_err(|e| HeaderEditError::NotLuks(e.to_string()))
}

/// The UUID in the primary binary header.
pub fn read_uuid(disk: &Path) -> Result<String, HeaderEditError> {
    let copy = read_copy(disk, 0)?;
    let field = &copy[UUID];
    let end = field.iter().position(|b| *b == 0).unwrap_or(field.len());
    Ok(String::from_utf8_lossy(&field[..end]).into_owned())
}

/// Rewrites both header copies: `edit` changes each copy's bytes (binary
/// header and JSON area); then `seqid` is raised by one and the checksum
/// recomputed, so the copies stay valid and equal.
fn rewrite(
    disk: &Path,
    edit: &dyn Fn(&mut Vec<u8>) -> Result<(), HeaderEditError>,
) -> Result<(), HeaderEditError> {
    let size = header_size(disk)?;
    let mut f = OpenOptions::new().read(true).write(true).open(disk)?;
    for offset in [0, size] {
        let mut copy = read_copy(disk, offset)?;
        edit(&mut copy)?;
        let seqid = u64::from_be_bytes(copy[SEQID].try_into().unwrap()) + 1;
        copy[SEQID].copy_from_slice(&seqid.to_be_bytes());
        copy[CHECKSUM].fill(0);
        let sum = ring::digest::digest(&ring::digest::SHA256, &copy);
        copy[CHECKSUM.start..CHECKSUM.start + 32].copy_from_slice(sum.as_ref());
        f.seek(SeekFrom::Start(offset))?;
        f.write_all(&copy)?;
    }
    f.sync_all()?;
    Ok(())
}

/// Replaces the JSON metadata of both copies with `json`.
pub fn write_json(disk: &Path, json: &Value) -> Result<(), HeaderEditError> {
    let text = serde_json::to_vec(json).expect("JSON values serialize");
    rewrite(disk, &|copy| {
        let area = copy.len() - BINARY;
        if text.len() >= area {
            return Err(HeaderEditError::TooLarge(text.len()));
        }
        copy[BINARY..].fill(0);
        copy[BINARY..BINARY + text.len()].copy_from_slice(&text);
        Ok(())
    })
}

/// Replaces the UUID in both binary headers.
pub fn write_uuid(disk: &Path, uuid: &str) -> Result<(), HeaderEditError> {
    rewrite(disk, &|copy| {
        copy[UUID].fill(0);
        let n = uuid.len().min(UUID.len() - 1);
        copy[UUID.start..UUID.start + n].copy_from_slice(&uuid.as_bytes()[..n]);
        Ok(())
    })
}

/// Applies `edit` to the JSON metadata of both copies.
pub fn edit_json(disk: &Path, edit: impl FnOnce(&mut Value)) -> Result<(), HeaderEditError> {
    let mut json = read_json(disk)?;
    edit(&mut json);
    write_json(disk, &json)
}
