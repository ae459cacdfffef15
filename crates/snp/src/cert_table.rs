//! The certificate table an SNP extended report comes with: the host's
//! VCEK/VLEK, ASK and ARK, as the GHCB specification lays them out
//! ("certificate table", the kernel's configfs-tsm `auxblob`).
//!
//! ```text
//! entry[0..n]  GUID (16 bytes, RFC 4122 byte order) ‖ offset u32 LE ‖ length u32 LE
//! entry[n]     24 zero bytes (the terminator)
//! data         certificates; each entry's offset counts from the table's start
//! ```
//!
//! The host writes these bytes, and the host is the adversary: everything
//! is bounded before it is used ([`MAX_TABLE_LEN`] bytes in all, at most
//! [`MAX_TABLE_ENTRIES`] entries before the terminator, each certificate 1
//! to [`MAX_CERTIFICATE_LEN`] bytes inside the table, no kind twice), and
//! every violation is a [`CertTableError`]. Entries of GUIDs confboot does
//! not use are skipped; what is kept is checked again like any evidence by
//! the verifier (the table decides nothing by itself).

#![deny(
    clippy::cast_possible_truncation,
    clippy::cast_sign_loss,
    clippy::cast_possible_wrap
)]

use confboot_util::bytes;

use super::evidence::{CertEntry, CertKind, MAX_CERTIFICATE_LEN};

/// Largest certificate table accepted (the kernel's buffer is 16 KiB).
pub const MAX_TABLE_LEN: usize = 64 * 1024;
/// Most entries read before the terminator (known GUIDs or not).
pub const MAX_TABLE_ENTRIES: usize = 16;
/// Length of one table entry.
pub const ENTRY_LEN: usize = 24;

/// GUID of the VCEK entry (`63da758d-e664-4564-adc5-f4b93be8accd`).
pub const GUID_VCEK: [u8; 16] = guid(0x63da758d, 0xe664, 0x4564, 0xadc5_f4b93be8accd);
/// GUID of the VLEK entry (`a8074bc2-a25a-483e-aae6-39c045a0b8a1`).
pub const GUID_VLEK: [u8; 16] = guid(0xa8074bc2, 0xa25a, 0x483e, 0xaae6_39c045a0b8a1);
/// GUID of the ASK entry (`4ab7b379-bbac-4fe4-a02f-05aef327c782`).
pub const GUID_ASK: [u8; 16] = guid(0x4ab7b379, 0xbbac, 0x4fe4, 0xa02f_05aef327c782);
/// GUID of the ARK entry (`c0b406a4-a803-4952-9743-3fb6014cd0ae`).
pub const GUID_ARK: [u8; 16] = guid(0xc0b406a4, 0xa803, 0x4952, 0x9743_3fb6014cd0ae);

/// A GUID's 16 bytes in RFC 4122 (big-endian) order.
const fn guid(a: u32, b: u16, c: u16, d: u64) -> [u8; 16] {
    let (a, b, c, d) = (
        a.to_be_bytes(),
        b.to_be_bytes(),
        c.to_be_bytes(),
        d.to_be_bytes(),
    );
    [
        a[0], a[1], a[2], a[3], b[0], b[1], c[0], c[1], d[0], d[1], d[2], d[3], d[4], d[5], d[6],
        d[7],
    ]
}

/// The kind a GUID names, if confboot uses it.
fn kind_of(guid: &[u8]) -> Option<CertKind> {
    [
        (GUID_VCEK, CertKind::Vcek),
        (GUID_VLEK, CertKind::Vlek),
        (GUID_ASK, CertKind::Ask),
        (GUID_ARK, CertKind::Ark),
    ]
    .into_iter()
    .find_map(|(g, k)| (g == guid).then_some(k))
}

/// The GUID of a kind, for [`encode`]; `None` for kinds without one.
fn guid_of(kind: CertKind) -> Option<[u8; 16]> {
    match kind {
        CertKind::Vcek => Some(GUID_VCEK),
        CertKind::Vlek => Some(GUID_VLEK),
        CertKind::Ask => Some(GUID_ASK),
        CertKind::Ark => Some(GUID_ARK),
        CertKind::Asvk => None,
    }
}

/// Why a certificate table was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum CertTableError {
    /// The table is larger than [`MAX_TABLE_LEN`].
    #[error("certificate table of {0} bytes exceeds {max}", max = MAX_TABLE_LEN)]
    TooLarge(usize),
    /// The table ends before its terminator.
    #[error("certificate table ends before its terminating entry")]
    Unterminated,
    /// More than [`MAX_TABLE_ENTRIES`] entries before the terminator.
    #[error("certificate table has more than {} entries", MAX_TABLE_ENTRIES)]
    TooManyEntries,
    /// An entry's certificate is empty, larger than [`MAX_CERTIFICATE_LEN`],
    /// or not inside the table.
    #[error(
        "certificate table entry {index} (offset {offset}, length {length}) is empty, \
         longer than {} bytes or outside the table",
        MAX_CERTIFICATE_LEN
    )]
    BadEntry {
        /// The entry's index.
        index: usize,
        /// Its offset.
        offset: u32,
        /// Its length.
        length: u32,
    },
    /// A kind appears twice (which one would count is ambiguous); so at
    /// most one certificate per kind, fewer than
    /// [`MAX_CERTIFICATES`](super::MAX_CERTIFICATES), is kept.
    #[error("certificate table holds the {} twice", .0.name())]
    Duplicate(CertKind),
}

/// Reads a certificate table. An empty input is an empty table (a host
/// that provides no certificates).
pub fn parse(table: &[u8]) -> Result<Vec<CertEntry>, CertTableError> {
    if table.len() > MAX_TABLE_LEN {
        return Err(CertTableError::TooLarge(table.len()));
    }
    if table.is_empty() {
        return Ok(Vec::new());
    }
    let mut out: Vec<CertEntry> = Vec::new();
    let mut entries = bytes::Reader::new(table);
    for index in 0..=MAX_TABLE_ENTRIES {
        // GUID, offset, length (ENTRY_LEN bytes).
        let entry = (entries.array::<16>(), entries.u32_le(), entries.u32_le());
        let (Ok(guid), Ok(offset), Ok(length)) = entry else {
            return Err(CertTableError::Unterminated);
        };
        if guid == [0; 16] && offset == 0 && length == 0 {
            return Ok(out);
        }
        if index == MAX_TABLE_ENTRIES {
            return Err(CertTableError::TooManyEntries);
        }
        let Some(kind) = kind_of(&guid) else {
            continue;
        };
        let bad = CertTableError::BadEntry {
            index,
            offset,
            length,
        };
        let start = bytes::len_of(offset);
        let len = bytes::len_of(length);
        if len == 0 || len > MAX_CERTIFICATE_LEN {
            return Err(bad);
        }
        let der = start
            .checked_add(len)
            .and_then(|end| table.get(start..end))
            .ok_or(bad)?;
        if out.iter().any(|c| c.kind == kind) {
            return Err(CertTableError::Duplicate(kind));
        }
        out.push(CertEntry {
            kind,
            der: der.to_vec(),
        });
    }
    Err(CertTableError::TooManyEntries)
}

/// Lays `certs` out as a host does (entries, terminator, certificates):
/// the inverse of [`parse`] for kinds that have a GUID (others are left
/// out). For tests and fuzz seeds.
pub fn encode(certs: &[CertEntry]) -> Vec<u8> {
    let kept: Vec<(&CertEntry, [u8; 16])> = certs
        .iter()
        .filter_map(|c| guid_of(c.kind).map(|g| (c, g)))
        .collect();
    let mut offset = (kept.len() + 1) * ENTRY_LEN;
    let mut out = Vec::new();
    for (c, g) in &kept {
        out.extend_from_slice(g);
        out.extend_from_slice(&u32::try_from(offset).unwrap_or(u32::MAX).to_le_bytes());
        out.extend_from_slice(&u32::try_from(c.der.len()).unwrap_or(u32::MAX).to_le_bytes());
        offset += c.der.len();
    }
    out.extend_from_slice(&[0; ENTRY_LEN]);
    for (c, _) in &kept {
        out.extend_from_slice(&c.der);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(kind: CertKind, der: &[u8]) -> CertEntry {
        CertEntry {
            kind,
            der: der.to_vec(),
        }
    }

    #[test]
    fn guids_are_amds() {
        assert_eq!(
            confboot_util::hex::encode(&GUID_VCEK),
            "63da758de6644564adc5f4b93be8accd"
        );
        assert_eq!(
            confboot_util::hex::encode(&GUID_ARK),
            "c0b406a4a803495297433fb6014cd0ae"
        );
    }

    #[test]
    fn round_trips_and_skips_unknown_guids() {
        let certs = vec![
            entry(CertKind::Vcek, b"vcek"),
            entry(CertKind::Ask, b"ask"),
            entry(CertKind::Ark, b"ark"),
        ];
        let table = encode(&certs);
        assert_eq!(parse(&table).unwrap(), certs);
        assert_eq!(parse(&[]).unwrap(), vec![]);
        assert_eq!(parse(&[0; ENTRY_LEN]).unwrap(), vec![]);
        // An entry of another GUID is skipped.
        let mut other = table.clone();
        other[0] ^= 0xff;
        assert_eq!(parse(&other).unwrap(), certs[1..].to_vec());
    }

    #[test]
    fn every_bound_is_a_typed_error() {
        let table = encode(&[entry(CertKind::Vcek, b"vcek")]);
        // Length past the end, offset past the end, zero length, huge length.
        for (field, value) in [(20, 5u32), (16, 1 << 31), (20, 0), (20, u32::MAX)] {
            let mut bad = table.clone();
            bad[field..field + 4].copy_from_slice(&value.to_le_bytes());
            assert!(
                matches!(parse(&bad), Err(CertTableError::BadEntry { index: 0, .. })),
                "{field} {value}"
            );
        }
        // An entry of an unknown GUID, then the table ends mid-entry.
        assert_eq!(
            parse(&[0x11; ENTRY_LEN + 3]),
            Err(CertTableError::Unterminated)
        );
        assert_eq!(
            parse(&vec![0; MAX_TABLE_LEN + 1]),
            Err(CertTableError::TooLarge(MAX_TABLE_LEN + 1))
        );
        let twice = encode(&[entry(CertKind::Ask, b"a"), entry(CertKind::Ask, b"b")]);
        assert_eq!(parse(&twice), Err(CertTableError::Duplicate(CertKind::Ask)));
        // Entries of unknown GUIDs still count towards the entry bound.
        let mut many = Vec::new();
        for i in 0..=MAX_TABLE_ENTRIES {
            many.extend_from_slice(&[u8::try_from(i).unwrap() + 1; 16]);
            many.extend_from_slice(&[0; 8]);
        }
        many.extend_from_slice(&[0; ENTRY_LEN]);
        assert_eq!(parse(&many), Err(CertTableError::TooManyEntries));
        many.truncate(MAX_TABLE_ENTRIES * ENTRY_LEN);
        many.extend_from_slice(&[0; ENTRY_LEN]);
        assert_eq!(parse(&many), Ok(vec![]));
    }
}
