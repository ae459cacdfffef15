//! Why a LUKS2 operation failed: one typed variant per reason. No variant
//! carries key material or quotes more of the header than a field name.

use std::fmt;

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
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BinaryFault {
    /// The magic is not `LUKS\xba\xbe` (primary) or `SKUL\xba\xbe` (secondary).
    Magic,
    /// The version is not 2 (a LUKS1 header is recognised, not read).
    Version(u16),
    /// The header size is not one LUKS2 allows (16 KiB to 4 MiB, a power of two).
    HeaderSize(u64),
    /// The header's own offset field does not name where it was read.
    HeaderOffset(u64),
    /// The checksum algorithm is not `sha256`.
    ChecksumAlgorithm,
    /// The SHA-256 over the header and its JSON area does not match.
    Checksum,
    /// The UUID field is not a UUID.
    Uuid,
    /// The label or subsystem is not a NUL-terminated UTF-8 string.
    Text,
}

impl fmt::Display for BinaryFault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BinaryFault::Magic => f.write_str("bad magic"),
            BinaryFault::Version(v) => write!(f, "version {v}"),
            BinaryFault::HeaderSize(s) => write!(f, "header size {s}"),
            BinaryFault::HeaderOffset(o) => write!(f, "header offset {o}"),
            BinaryFault::ChecksumAlgorithm => f.write_str("checksum algorithm is not sha256"),
            BinaryFault::Checksum => f.write_str("checksum mismatch"),
            BinaryFault::Uuid => f.write_str("UUID is not a UUID"),
            BinaryFault::Text => f.write_str("label or subsystem is not text"),
        }
    }
}

/// Why a LUKS2 header or operation was refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Luks2Error {
    /// Reading or writing the device failed (the I/O error's kind and text).
    Io(String),
    /// The device is smaller than what the header says lives on it.
    DeviceTooSmall {
        /// Bytes needed.
        needed: u64,
        /// The device's size.
        size: u64,
    },
    /// Neither header copy is valid; the faults of both.
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
    Version(u16),
    /// The JSON metadata is malformed or breaks a bound (a field path and
    /// what is wrong with it).
    Metadata {
        /// Where in the JSON (`keyslots.0.kdf.memory`).
        field: String,
        /// What is wrong.
        problem: MetadataProblem,
    },
    /// The header uses something this implementation does not (a cipher,
    /// hash, KDF, key size, requirement).
    Unsupported {
        /// Where in the JSON.
        field: String,
        /// The value, when it is a short identifier (never key material).
        value: String,
    },
    /// A KDF cost above the limits: the host does not get to make a node
    /// spend minutes or gigabytes.
    CostTooHigh {
        /// Where in the JSON.
        field: String,
        /// The value asked for.
        value: u64,
        /// The most allowed.
        limit: u64,
    },
    /// The passphrase opens no key slot.
    WrongPassphrase,
    /// Formatting was refused: the device carries a LUKS header.
    AlreadyLuks {
        /// The existing header's UUID.
        uuid: String,
    },
    /// An option given to format or to a token write is invalid.
    InvalidOption(String),
    /// A token write would exceed a bound (token count, JSON area size).
    TokenSpace(String),
    /// The system's random source failed.
    Random,
    /// The key derivation function failed on valid-looking parameters.
    Kdf(String),
}

/// What is wrong with one header copy.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum HeaderFault {
    /// The binary header.
    Binary(BinaryFault),
    /// The JSON area (after a matching checksum).
    Json(Box<Luks2Error>),
    /// Not there: the device ends first.
    Absent,
}

impl fmt::Display for HeaderFault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HeaderFault::Binary(b) => write!(f, "binary header: {b}"),
            HeaderFault::Json(e) => write!(f, "JSON area: {e}"),
            HeaderFault::Absent => f.write_str("absent"),
        }
    }
}

/// What is wrong with a JSON field.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MetadataProblem {
    /// Not JSON, or the JSON area is not NUL-terminated UTF-8.
    Syntax,
    /// Missing.
    Missing,
    /// Of the wrong JSON type.
    Type,
    /// A number or numeric string out of range, or not a number.
    Range,
    /// Not aligned as LUKS2 requires.
    Alignment,
    /// More entries than allowed.
    TooMany,
    /// Bad base64.
    Base64,
    /// An object key that is not a small decimal id.
    Id,
    /// A reference to a key slot or segment that does not exist.
    Reference,
    /// Areas that overlap each other or the headers, or lie outside the device.
    Overlap,
}

impl fmt::Display for MetadataProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            MetadataProblem::Syntax => "not JSON",
            MetadataProblem::Missing => "missing",
            MetadataProblem::Type => "wrong type",
            MetadataProblem::Range => "out of range",
            MetadataProblem::Alignment => "misaligned",
            MetadataProblem::TooMany => "too many entries",
            MetadataProblem::Base64 => "bad base64",
            MetadataProblem::Id => "not a valid id",
            MetadataProblem::Reference => "dangling reference",
            MetadataProblem::Overlap => "overlaps or lies outside its area",
        })
    }
}

impl fmt::Display for Luks2Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Luks2Error::Io(m) => write!(f, "LUKS2 I/O: {m}"),
            Luks2Error::DeviceTooSmall { needed, size } => {
                write!(f, "device of {size} bytes, the header needs {needed}")
            }
            Luks2Error::NoValidHeader { primary, secondary } => write!(
                f,
                "no valid LUKS2 header (primary: {primary}; secondary: {secondary})"
            ),
            Luks2Error::Version(v) => write!(f, "LUKS version {v}, not 2"),
            Luks2Error::Metadata { field, problem } => {
                write!(f, "LUKS2 metadata {field}: {problem}")
            }
            Luks2Error::Unsupported { field, value } => {
                write!(f, "unsupported LUKS2 {field}: {value:?}")
            }
            Luks2Error::CostTooHigh {
                field,
                value,
                limit,
            } => write!(f, "LUKS2 {field} of {value} is above the limit {limit}"),
            Luks2Error::WrongPassphrase => f.write_str("the passphrase opens no key slot"),
            Luks2Error::AlreadyLuks { uuid } => {
                write!(
                    f,
                    "refusing to format: the device has a LUKS header ({uuid})"
                )
            }
            Luks2Error::InvalidOption(m) => write!(f, "invalid LUKS2 option: {m}"),
            Luks2Error::TokenSpace(m) => write!(f, "LUKS2 token: {m}"),
            Luks2Error::Random => f.write_str("the system's random source failed"),
            Luks2Error::Kdf(m) => write!(f, "key derivation failed: {m}"),
        }
    }
}

impl std::error::Error for Luks2Error {}

impl From<std::io::Error> for Luks2Error {
    fn from(e: std::io::Error) -> Self {
        Luks2Error::Io(e.to_string())
    }
}

/// A metadata error at `field`.
pub(crate) fn meta(field: impl Into<String>, problem: MetadataProblem) -> Luks2Error {
    Luks2Error::Metadata {
        field: field.into(),
        problem,
    }
}
