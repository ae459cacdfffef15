//! The `crypt` target's table line, as cryptsetup loads it for a LUKS2
//! data segment (with the key in the table instead of the kernel keyring):
//! `CIPHER HEXKEY IV_OFFSET MAJOR:MINOR OFFSET [1 sector_size:N]`.
//! The line holds the volume key: it lives in a zeroized buffer and its
//! `Debug` prints no parameters.

use std::fmt;

use zeroize::Zeroizing;

use super::DmError;
use super::wire::Target;

/// The largest key accepted (bytes): aes-xts with 256-bit AES uses 64.
pub const MAX_KEY_LEN: usize = 128;
/// The longest cipher specification accepted.
pub const MAX_CIPHER_LEN: usize = 64;

/// A `crypt` table: one target covering the whole mapped device.
pub struct CryptTable {
    length: u64,
    params: Zeroizing<Vec<u8>>,
}

impl fmt::Debug for CryptTable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "CryptTable({} sectors, <parameters redacted>)",
            self.length
        )
    }
}

/// Where and how a segment is mapped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CryptLayout<'a> {
    /// The cipher (`aes-xts-plain64`): lowercase letters, digits, `-`.
    pub cipher: &'a str,
    /// The IV offset, in 512-byte sectors.
    pub iv_offset: u64,
    /// The backing block device's number (`dev_t`).
    pub device: u64,
    /// Where the data starts on the backing device, in bytes.
    pub offset: u64,
    /// The mapped length, in bytes.
    pub length: u64,
    /// The encryption sector size (512 to 4096, a power of two).
    pub sector_size: u32,
}

impl CryptTable {
    /// The table for `layout` with `key`; refuses what dm-crypt would
    /// refuse or misread (a cipher with spaces, misaligned offsets, an
    /// empty mapping) before anything reaches the kernel.
    pub fn new(layout: &CryptLayout<'_>, key: &[u8]) -> Result<CryptTable, DmError> {
        let bad = |m: String| Err(DmError::Invalid(m));
        let c = layout.cipher;
        if c.is_empty()
            || c.len() > MAX_CIPHER_LEN
            || !c
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        {
            return bad(format!("cipher {:?}", c.escape_debug().to_string()));
        }
        if key.is_empty() || key.len() > MAX_KEY_LEN {
            return bad(format!("a key of {} bytes", key.len()));
        }
        let ss = layout.sector_size;
        if !(512..=4096).contains(&ss) || !ss.is_power_of_two() {
            return bad(format!("sector size {ss}"));
        }
        let ss = u64::from(ss);
        if !layout.offset.is_multiple_of(ss) {
            return bad(format!(
                "data offset {} not a multiple of {ss}",
                layout.offset
            ));
        }
        if layout.length == 0 || !layout.length.is_multiple_of(ss) {
            return bad(format!(
                "data length {} (want a non-zero multiple of {ss})",
                layout.length
            ));
        }
        let (major, minor) = (
            nix::sys::stat::major(layout.device as nix::libc::dev_t),
            nix::sys::stat::minor(layout.device as nix::libc::dev_t),
        );
        let tail = format!(
            " {} {major}:{minor} {}{}",
            layout.iv_offset,
            layout.offset / 512,
            if ss == 512 {
                String::new()
            } else {
                format!(" 1 sector_size:{ss}")
            }
        );
        let mut params =
            Zeroizing::new(Vec::with_capacity(c.len() + 1 + 2 * key.len() + tail.len()));
        params.extend_from_slice(c.as_bytes());
        params.push(b' ');
        const HEX: &[u8; 16] = b"0123456789abcdef";
        for b in key {
            params.push(HEX[usize::from(b >> 4)]);
            params.push(HEX[usize::from(b & 0x0f)]);
        }
        params.extend_from_slice(tail.as_bytes());
        Ok(CryptTable {
            length: layout.length / 512,
            params,
        })
    }

    /// Its one target, for [`super::DeviceMapper::create`].
    pub fn target(&self) -> Target<'_> {
        Target {
            sector_start: 0,
            length: self.length,
            target_type: "crypt",
            params: &self.params,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn layout() -> CryptLayout<'static> {
        CryptLayout {
            cipher: "aes-xts-plain64",
            iv_offset: 0,
            device: nix::sys::stat::makedev(254, 16),
            offset: 16 << 20,
            length: 48 << 20,
            sector_size: 4096,
        }
    }

    #[test]
    fn the_line_is_cryptsetups() {
        let t = CryptTable::new(&layout(), &[0x00, 0xab, 0x10]).unwrap();
        let target = t.target();
        assert_eq!(target.length, (48 << 20) / 512);
        assert_eq!(target.target_type, "crypt");
        assert_eq!(
            target.params,
            b"aes-xts-plain64 00ab10 0 254:16 32768 1 sector_size:4096"
        );
        let small = CryptLayout {
            sector_size: 512,
            offset: 4096,
            length: 512,
            ..layout()
        };
        let t = CryptTable::new(&small, &[1]).unwrap();
        assert_eq!(t.target().params, b"aes-xts-plain64 01 0 254:16 8");
        assert_eq!(t.target().length, 1);
    }

    #[test]
    fn the_key_is_not_in_debug() {
        let t = CryptTable::new(&layout(), &[0xab; 64]).unwrap();
        assert!(!format!("{t:?}").contains("abab"));
    }

    #[test]
    fn bad_layouts_are_refused() {
        let key = [1u8; 64];
        let refused =
            |l: CryptLayout<'_>| matches!(CryptTable::new(&l, &key), Err(DmError::Invalid(_)));
        assert!(refused(CryptLayout {
            cipher: "aes xts",
            ..layout()
        }));
        assert!(refused(CryptLayout {
            cipher: "",
            ..layout()
        }));
        assert!(refused(CryptLayout {
            cipher: "AES",
            ..layout()
        }));
        assert!(refused(CryptLayout {
            offset: 512,
            ..layout()
        }));
        assert!(refused(CryptLayout {
            length: 0,
            ..layout()
        }));
        assert!(refused(CryptLayout {
            length: 4096 + 512,
            ..layout()
        }));
        assert!(refused(CryptLayout {
            sector_size: 1000,
            ..layout()
        }));
        assert!(refused(CryptLayout {
            sector_size: 8192,
            ..layout()
        }));
        assert!(CryptTable::new(&layout(), &[]).is_err());
        assert!(CryptTable::new(&layout(), &[0; MAX_KEY_LEN + 1]).is_err());
    }
}
