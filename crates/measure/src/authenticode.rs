//! The Authenticode SHA-256 of a PE/COFF image: the digest UEFI firmware
//! extends into PCR 4 when it loads an EFI application (a Linux kernel
//! with its EFI stub). The image's checksum, its certificate-table entry
//! and the certificate table (the signatures) are left out; headers,
//! sections in file order and any other data after them are hashed
//! (Microsoft's "Windows Authenticode Portable Executable Signature
//! Format").
//!
//! Every offset is checked against the image before it is read.
//!
//! ```
//! use confboot_measure::authenticode::{authenticode_sha256, PeError};
//! assert_eq!(authenticode_sha256(b"MZ"), Err(PeError::Truncated("the DOS header")));
//! ```

/// Most sections accepted (the PE format allows 96).
pub const MAX_SECTIONS: usize = 96;

/// Why bytes are not a PE image whose digest can be computed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PeError {
    /// The image ends inside the named structure.
    #[error("PE image ends inside {0}")]
    Truncated(&'static str),
    /// No `MZ` or no `PE\0\0` signature.
    #[error("not a PE image (no MZ/PE signature)")]
    NotPe,
    /// The optional header is neither PE32 nor PE32+.
    #[error("PE optional header magic {0:#06x} is neither PE32 nor PE32+")]
    UnknownOptionalHeader(u16),
    /// The optional header has no certificate-table entry.
    #[error("PE optional header has no certificate-table entry")]
    NoCertificateEntry,
    /// More than [`MAX_SECTIONS`] sections.
    #[error("PE image has {0} sections, at most {max}", max = MAX_SECTIONS)]
    TooManySections(u16),
    /// A section, the headers or the certificate table lie outside the
    /// image, or overlap what must come before them.
    #[error("PE image layout is inconsistent: {0}")]
    BadLayout(&'static str),
}

fn u16_at(b: &[u8], at: usize, what: &'static str) -> Result<u16, PeError> {
    b.get(at..at + 2)
        .map(|s| u16::from_le_bytes([s[0], s[1]]))
        .ok_or(PeError::Truncated(what))
}

fn u32_at(b: &[u8], at: usize, what: &'static str) -> Result<u32, PeError> {
    b.get(at..at + 4)
        .map(|s| u32::from_le_bytes([s[0], s[1], s[2], s[3]]))
        .ok_or(PeError::Truncated(what))
}

/// The Authenticode SHA-256 digest of `image`.
pub fn authenticode_sha256(image: &[u8]) -> Result<[u8; 32], PeError> {
    if image.len() < 0x40 {
        return Err(PeError::Truncated("the DOS header"));
    }
    if &image[..2] != b"MZ" {
        return Err(PeError::NotPe);
    }
    let pe = u32_at(image, 0x3c, "the DOS header")? as usize;
    if image.get(pe..pe + 4) != Some(b"PE\0\0".as_slice()) {
        return Err(PeError::NotPe);
    }
    let coff = pe + 4;
    let sections = u16_at(image, coff + 2, "the COFF header")?;
    let optional_size = u16_at(image, coff + 16, "the COFF header")? as usize;
    let optional = coff + 20;
    let magic = u16_at(image, optional, "the optional header")?;
    let (directories_at, count_at) = match magic {
        0x10b => (optional + 96, optional + 92),
        0x20b => (optional + 112, optional + 108),
        other => return Err(PeError::UnknownOptionalHeader(other)),
    };
    let checksum = optional + 64;
    let headers_size = u32_at(image, optional + 60, "the optional header")? as usize;
    if u32_at(image, count_at, "the optional header")? < 5 {
        return Err(PeError::NoCertificateEntry);
    }
    let certificate_entry = directories_at + 4 * 8;
    if certificate_entry + 8 > optional + optional_size {
        return Err(PeError::NoCertificateEntry);
    }
    let cert_offset = u32_at(image, certificate_entry, "the data directories")? as usize;
    let cert_size = u32_at(image, certificate_entry + 4, "the data directories")? as usize;
    if headers_size > image.len() || headers_size < certificate_entry + 8 {
        return Err(PeError::BadLayout("the headers' size"));
    }
    if sections as usize > MAX_SECTIONS {
        return Err(PeError::TooManySections(sections));
    }

    let mut ctx = ring::digest::Context::new(&ring::digest::SHA256);
    ctx.update(&image[..checksum]);
    ctx.update(&image[checksum + 4..certificate_entry]);
    ctx.update(&image[certificate_entry + 8..headers_size]);

    let table = optional + optional_size;
    let mut raw: Vec<(usize, usize)> = Vec::with_capacity(sections as usize);
    for i in 0..sections as usize {
        let at = table + 40 * i;
        let size = u32_at(image, at + 16, "the section table")? as usize;
        let offset = u32_at(image, at + 20, "the section table")? as usize;
        if size == 0 {
            continue;
        }
        if offset.checked_add(size).is_none_or(|end| end > image.len()) {
            return Err(PeError::BadLayout("a section lies outside the image"));
        }
        raw.push((offset, size));
    }
    raw.sort_unstable();
    let mut hashed_to = headers_size;
    for (offset, size) in raw {
        ctx.update(&image[offset..offset + size]);
        hashed_to = hashed_to.max(offset + size);
    }
    // What follows the sections, up to the certificate table.
    let end = if cert_size == 0 {
        image.len()
    } else {
        if cert_offset.checked_add(cert_size) != Some(image.len()) || cert_offset < hashed_to {
            return Err(PeError::BadLayout(
                "the certificate table is not at the image's end",
            ));
        }
        cert_offset
    };
    if hashed_to < end {
        ctx.update(&image[hashed_to..end]);
    }
    Ok(ctx
        .finish()
        .as_ref()
        .try_into()
        .expect("SHA-256 is 32 bytes"))
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A minimal PE32+ image: headers (0x200 bytes), one section of 0x200
    /// bytes, optional trailing data and certificate table.
    pub(crate) fn tiny_pe(trailer: &[u8], certificates: &[u8]) -> Vec<u8> {
        let mut b = vec![0u8; 0x400];
        b[..2].copy_from_slice(b"MZ");
        b[0x3c..0x40].copy_from_slice(&0x80u32.to_le_bytes());
        b[0x80..0x84].copy_from_slice(b"PE\0\0");
        let coff = 0x84;
        b[coff + 2..coff + 4].copy_from_slice(&1u16.to_le_bytes());
        b[coff + 16..coff + 18].copy_from_slice(&240u16.to_le_bytes());
        let opt = coff + 20;
        b[opt..opt + 2].copy_from_slice(&0x20bu16.to_le_bytes());
        b[opt + 60..opt + 64].copy_from_slice(&0x200u32.to_le_bytes());
        b[opt + 108..opt + 112].copy_from_slice(&16u32.to_le_bytes());
        let section = opt + 240;
        b[section + 16..section + 20].copy_from_slice(&0x200u32.to_le_bytes());
        b[section + 20..section + 24].copy_from_slice(&0x200u32.to_le_bytes());
        for (i, x) in b[0x200..0x400].iter_mut().enumerate() {
            *x = i as u8;
        }
        b.extend_from_slice(trailer);
        if !certificates.is_empty() {
            let cert_entry = opt + 112 + 32;
            let at = b.len() as u32;
            b[cert_entry..cert_entry + 4].copy_from_slice(&at.to_le_bytes());
            b[cert_entry + 4..cert_entry + 8]
                .copy_from_slice(&(certificates.len() as u32).to_le_bytes());
            b.extend_from_slice(certificates);
        }
        b
    }

    #[test]
    fn checksum_certificate_entry_and_table_are_left_out_the_rest_counts() {
        let plain = tiny_pe(b"trailer", b"");
        let signed = tiny_pe(b"trailer", b"a signature");
        let d = authenticode_sha256(&plain).unwrap();
        assert_eq!(
            authenticode_sha256(&signed).unwrap(),
            d,
            "signatures are not hashed"
        );
        let mut checksummed = plain.clone();
        checksummed[0x84 + 20 + 64] = 0x55;
        assert_eq!(authenticode_sha256(&checksummed).unwrap(), d);
        for at in [0x10, 0x84 + 20 + 60 + 8, 0x250, 0x400] {
            let mut changed = plain.clone();
            changed[at] ^= 1;
            assert_ne!(authenticode_sha256(&changed).unwrap(), d, "byte {at:#x}");
        }
    }

    #[test]
    fn malformed_images_are_refused() {
        let good = tiny_pe(b"", b"");
        assert!(authenticode_sha256(&good).is_ok());
        for cut in [0, 0x3f, 0x83, 0x90, 0x100] {
            assert!(
                authenticode_sha256(&good[..cut]).is_err(),
                "cut at {cut:#x}"
            );
        }
        let mut not_pe = good.clone();
        not_pe[0x80] = b'X';
        assert_eq!(authenticode_sha256(&not_pe), Err(PeError::NotPe));
        let mut far_section = good.clone();
        far_section[0x84 + 20 + 240 + 20] = 0xff;
        far_section[0x84 + 20 + 240 + 23] = 0x7f;
        assert!(matches!(
            authenticode_sha256(&far_section),
            Err(PeError::BadLayout(_))
        ));
        let mut many = good.clone();
        many[0x86..0x88].copy_from_slice(&200u16.to_le_bytes());
        assert_eq!(
            authenticode_sha256(&many),
            Err(PeError::TooManySections(200))
        );
        let mut cert_inside = tiny_pe(b"", b"sig");
        let cert_entry = 0x84 + 20 + 112 + 32;
        cert_inside[cert_entry..cert_entry + 4].copy_from_slice(&0x10u32.to_le_bytes());
        assert!(matches!(
            authenticode_sha256(&cert_inside),
            Err(PeError::BadLayout(_))
        ));
    }
}
