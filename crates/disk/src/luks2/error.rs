//! Why a LUKS2 operation failed: one typed variant per reason. No variant
//! carries key material or quotes more of the header than a field name.

use std::fmt;

use confboot_util::IoFailure;

/// Which of the two binary header copies a finding is about.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HeaderCopy {
    /// The primary header, at byte 0.
    Primary,
    /// The secondary header, at the offset of the header size.
    Secondary,
}

impl fmt::Display for HeaderCopy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            HeaderCopy::Primary => "primary",
            HeaderCopy::Secondary => "secondary",
        })
    }
}

/// What is wrong with one binary header copy.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum BinaryFault {
    /// The magic is not `LUKS\xba\xbe` (primary) or `SKUL\xba\xbe` (secondary).
    #[error("bad magic")]
    Magic,
    /// The version is not 2 (a LUKS1 header is recognised, not read).
    #[error("version {0}")]
    Version(u16),
    /// The header size is not one LUKS2 allows (16 KiB to 4 MiB, a power of two).
    #[error("header size {0}")]
    HeaderSize(u64),
    /// The header's own offset field does not name where it was read.
    #[error("header offset {0}")]
    HeaderOffset(u64),
    /// The checksum algorithm is not `sha256`.
    #[error("checksum algorithm is not sha256")]
    ChecksumAlgorithm,
    /// The SHA-256 over the header and its JSON area does not match.
    #[error("checksum mismatch")]
    Checksum,
    /// The UUID field is not a UUID.
    #[error("UUID is not a UUID")]
    Uuid,
    /// The label or subsystem is not a NUL-terminated UTF-8 string.
    #[error("label or subsystem is not text")]
    Text,
}

/// Why a LUKS2 header or operation was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Luks2Error {
    /// Reading or writing the device failed (the I/O error's kind and text).
    #[error("LUKS2 I/O: {0}")]
    Io(#[source] IoFailure),
    /// What the device holds could not be found out before formatting it.
    #[error("LUKS2 I/O: {0}")]
    Probe(#[source] Box<crate::DiskError>),
    /// The device is smaller than what the header says lives on it.
    #[error("device of {size} bytes, the header needs {needed}")]
    DeviceTooSmall {
        /// Bytes needed.
        needed: u64,
        /// The device's size.
        size: u64,
    },
    /// Neither header copy is valid; the faults of both.
    #[error("no valid LUKS2 header (primary: {primary}; secondary: {secondary})")]
    NoValidHeader {
        /// What is wrong with the primary copy.
        primary: HeaderFault,
        /// What is wrong with the secondary copy (or the first fault found
        /// at the offsets where it may be).
        secondary: HeaderFault,
    },
    /// The primary header has the LUKS magic but announces another version
    /// than 2: not read, and no fall back to the secondary (cryptsetup does
    /// not fall back either; a LUKS1 header is recognised by
    /// [`super::probe()`], not read).
    #[error("LUKS version {0}, not 2")]
    Version(u16),
    /// The JSON metadata is malformed or breaks a bound (a field path and
    /// what is wrong with it).
    #[error("LUKS2 metadata {field}: {problem}")]
    Metadata {
        /// Where in the JSON (`keyslots.0.kdf.memory`).
        field: String,
        /// What is wrong.
        problem: MetadataProblem,
    },
    /// The header uses something this implementation does not (a cipher,
    /// hash, KDF, key size, requirement).
    #[error("unsupported LUKS2 {field}: {value:?}")]
    Unsupported {
        /// Where in the JSON.
        field: String,
        /// The value, when it is a short identifier (never key material).
        value: String,
    },
    /// A KDF cost above the limits: the host does not get to make a node
    /// spend minutes or gigabytes.
    #[error("LUKS2 {field} of {value} is above the limit {limit}")]
    CostTooHigh {
        /// Where in the JSON.
        field: String,
        /// The value asked for.
        value: u64,
        /// The most allowed.
        limit: u64,
    },
    /// A header field that is not what the node writes there
    /// ([`super::expected::ExpectedHeader`]): the header is not
    /// authenticated, so it chooses nothing, and a header the node did not
    /// write as it writes is refused, never used or repaired.
    #[error(
        "LUKS2 {field} is {found}, not the node's {expected} (the header is not trusted to choose it)"
    )]
    NotAsWritten {
        /// Where in the header (`segments.0.sector_size`, `binary.hdr_size`).
        field: String,
        /// What the header has there, short and printable (`absent` when missing).
        found: String,
        /// What the node writes there.
        expected: String,
    },
    /// The passphrase opens no key slot.
    #[error("the passphrase opens no key slot")]
    WrongPassphrase,
    /// Formatting was refused: the device carries a LUKS header.
    #[error("refusing to format: the device has a LUKS header ({uuid})")]
    AlreadyLuks {
        /// The existing header's UUID.
        uuid: String,
    },
    /// An option given to format or to a token write is invalid.
    #[error("invalid LUKS2 option: {0}")]
    InvalidOption(String),
    /// A token write would exceed a bound (token count, JSON area size).
    #[error("LUKS2 token: {0}")]
    TokenSpace(String),
    /// The system's random source failed.
    #[error("the system's random source failed")]
    Random,
    /// The key derivation function failed on valid-looking parameters.
    #[error("key derivation failed: {0}")]
    Kdf(String),
}

/// What is wrong with one header copy.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum HeaderFault {
    /// The binary header.
    #[error("binary header: {0}")]
    Binary(BinaryFault),
    /// The JSON area (after a matching checksum).
    #[error("JSON area: {0}")]
    Json(Box<Luks2Error>),
    /// Not there: the device ends first.
    #[error("absent")]
    Absent,
}

/// What is wrong with a JSON field.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum MetadataProblem {
    /// Not JSON, or the JSON area is not NUL-terminated UTF-8.
    #[error("not JSON")]
    Syntax,
    /// Missing.
    #[error("missing")]
    Missing,
    /// Of the wrong JSON type.
    #[error("wrong type")]
    Type,
    /// A number or numeric string out of range, or not a number.
    #[error("out of range")]
    Range,
    /// Not aligned as LUKS2 requires.
    #[error("misaligned")]
    Alignment,
    /// More entries than allowed.
    #[error("too many entries")]
    TooMany,
    /// Bad base64.
    #[error("bad base64")]
    Base64,
    /// An object key that is not a small decimal id.
    #[error("not a valid id")]
    Id,
    /// A reference to a key slot or segment that does not exist.
    #[error("dangling reference")]
    Reference,
    /// Areas that overlap each other or the headers, or lie outside the device.
    #[error("overlaps or lies outside its area")]
    Overlap,
}

impl From<std::io::Error> for Luks2Error {
    fn from(e: std::io::Error) -> Self {
        Luks2Error::Io(IoFailure::bare(e))
    }
}

/// A metadata error at `field`.
pub(crate) fn meta(field: impl Into<String>, problem: MetadataProblem) -> Luks2Error {
    Luks2Error::Metadata {
        field: field.into(),
        problem,
    }
}
