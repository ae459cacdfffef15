//! The `crypt` target's table line, as cryptsetup loads it for a LUKS2
//! data segment (with the key in the table instead of the kernel keyring):
//! `CIPHER HEXKEY IV_OFFSET MAJOR:MINOR OFFSET [1 sector_size:N]`.
//! The line holds the volume key: it lives in a zeroized buffer and its
//! `Debug` prints no parameters.
//!
//! [`check_live_table`] reads such a line back from the kernel (the key in
//! hex or as a kernel keyring reference) and checks it against the mapping
//! expected, naming the first field that differs.

use std::fmt;

use zeroize::Zeroizing;

use super::DmError;
use super::wire::{TableTarget, Target};

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

/// A live crypt mapping that is not the one expected: the first field
/// that differs, what it is and what it should be. Neither ever holds
/// key material (a key is described by its form and length only).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("the mapping's {field} is {found}, not {expected}")]
pub struct MappingMismatch {
    /// The field (`cipher`, `key`, `iv offset`, `device`, `offset`,
    /// `options`, `length`, `start`, `target type`, `targets`).
    pub field: &'static str,
    /// What the live table says (bounded, printable).
    pub found: String,
    /// What was expected.
    pub expected: String,
}

/// The most characters of a live table's field quoted in a
/// [`MappingMismatch`].
const QUOTED: usize = 64;

fn mismatch(
    field: &'static str,
    found: impl fmt::Display,
    expected: impl fmt::Display,
) -> MappingMismatch {
    let found: String = found.to_string().chars().take(QUOTED).collect();
    MappingMismatch {
        field,
        found,
        expected: expected.to_string(),
    }
}

/// The key field of a crypt line, described without its content: `Ok`
/// with the key's length in bytes (hex digits, or a kernel keyring
/// reference `:SIZE:TYPE:DESCRIPTION`), `Err` with a description.
fn key_len(key: &str) -> Result<usize, String> {
    if let Some(reference) = key.strip_prefix(':') {
        let size = reference.split(':').next().unwrap_or("");
        return match size.parse::<usize>() {
            Ok(n)
                if size.bytes().all(|b| b.is_ascii_digit())
                    && reference.split(':').count() >= 3 =>
            {
                Ok(n)
            }
            _ => Err("a malformed keyring reference".into()),
        };
    }
    if key == "-" {
        return Err("no key".into());
    }
    if key.len().is_multiple_of(2) && key.bytes().all(|b| b.is_ascii_hexdigit()) {
        Ok(key.len() / 2)
    } else {
        Err(format!(
            "a key field of {} characters that is not hex",
            key.len()
        ))
    }
}

/// Checks that the live table `targets` of a mapping is the crypt mapping
/// of `layout` with a key of `key_len` bytes, as dm-crypt prints it
/// (`CIPHER KEY IV_OFFSET MAJOR:MINOR OFFSET [N OPTION...]`, the key in
/// hex or as a keyring reference): one target from sector 0 over the
/// layout's length, the cipher, key length, IV offset, device and offset
/// the layout's, and no option but `sector_size:N` when the sector size
/// is not 512 (no `allow_discards`, no `iv_large_sectors`, ...). The first
/// field that differs is named; nothing of the key is quoted.
pub fn check_live_table(
    targets: &[TableTarget],
    layout: &CryptLayout<'_>,
    key_len_expected: usize,
) -> Result<(), MappingMismatch> {
    let [target] = targets else {
        return Err(mismatch(
            "targets",
            format!("{} targets", targets.len()),
            "one",
        ));
    };
    if target.target_type != "crypt" {
        return Err(mismatch("target type", &target.target_type, "crypt"));
    }
    if target.sector_start != 0 {
        return Err(mismatch("start", target.sector_start, 0));
    }
    if target.length != layout.length / 512 {
        return Err(mismatch(
            "length",
            format!("{} sectors", target.length),
            format!("{} sectors", layout.length / 512),
        ));
    }
    let fields: Vec<&str> = target.params.split(' ').collect();
    let (cipher, key, iv_offset, device, offset, options) = match fields.as_slice() {
        [c, k, i, d, o, rest @ ..] => (*c, *k, *i, *d, *o, rest),
        _ => {
            return Err(mismatch(
                "line",
                format!("{} fields", fields.len()),
                "at least 5",
            ));
        }
    };
    if cipher != layout.cipher {
        return Err(mismatch("cipher", cipher, layout.cipher));
    }
    match key_len(key) {
        Ok(n) if n == key_len_expected => {}
        Ok(n) => {
            return Err(mismatch(
                "key",
                format!("a {n}-byte key"),
                format!("a {key_len_expected}-byte key"),
            ));
        }
        Err(what) => {
            return Err(mismatch(
                "key",
                what,
                format!("a {key_len_expected}-byte key"),
            ));
        }
    }
    if iv_offset != layout.iv_offset.to_string() {
        return Err(mismatch("iv offset", iv_offset, layout.iv_offset));
    }
    let dev = layout.device as nix::libc::dev_t;
    let want_device = format!(
        "{}:{}",
        nix::sys::stat::major(dev),
        nix::sys::stat::minor(dev)
    );
    if device != want_device {
        return Err(mismatch("device", device, want_device));
    }
    if offset != (layout.offset / 512).to_string() {
        return Err(mismatch("offset", offset, layout.offset / 512));
    }
    let want_options = if layout.sector_size == 512 {
        String::new()
    } else {
        format!("1 sector_size:{}", layout.sector_size)
    };
    let found_options = options.join(" ");
    if found_options != want_options {
        let none = |s: &str| {
            if s.is_empty() {
                "none".to_string()
            } else {
                format!("{s:?}")
            }
        };
        return Err(mismatch(
            "options",
            none(&found_options),
            none(&want_options),
        ));
    }
    Ok(())
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

    fn live(line: &str) -> Vec<TableTarget> {
        vec![TableTarget {
            sector_start: 0,
            length: (48 << 20) / 512,
            target_type: "crypt".into(),
            params: Zeroizing::new(line.to_string()),
        }]
    }

    /// The field a live table is refused by (`None` if it is accepted).
    fn refused_by(targets: &[TableTarget]) -> Option<&'static str> {
        check_live_table(targets, &layout(), 64)
            .err()
            .map(|e| e.field)
    }

    /// What dm-crypt prints for cryptsetup's LUKS2 mapping with the key in
    /// the kernel keyring (cryptsetup's default).
    const KEYRING: &str = "aes-xts-plain64 :64:logon:cryptsetup:0a1b2c3d-0000-4000-8000-00000000000f-d0 0 254:16 32768 1 sector_size:4096";

    #[test]
    fn the_mapping_cryptsetup_makes_is_accepted() {
        assert_eq!(refused_by(&live(KEYRING)), None);
        // With --disable-keyring: the key in hex, 128 digits.
        let hex = format!(
            "aes-xts-plain64 {} 0 254:16 32768 1 sector_size:4096",
            "ab".repeat(64)
        );
        assert_eq!(refused_by(&live(&hex)), None);
        // The line the native backend loads reads back the same.
        let own = CryptTable::new(&layout(), &[0xab; 64]).unwrap();
        let own = std::str::from_utf8(own.target().params)
            .unwrap()
            .to_string();
        assert_eq!(refused_by(&live(&own)), None);
    }

    #[test]
    fn a_mapping_of_the_hosts_choosing_is_refused_by_name() {
        let with = |from: &str, to: &str| live(&KEYRING.replacen(from, to, 1));
        assert_eq!(
            refused_by(&with("aes-xts-plain64", "aes-xts-null")),
            Some("cipher")
        );
        assert_eq!(
            refused_by(&with("aes-xts-plain64", "cipher_null-ecb")),
            Some("cipher")
        );
        assert_eq!(refused_by(&with(":64:", ":32:")), Some("key"));
        assert_eq!(refused_by(&with(":64:logon:", ":64x:")), Some("key"));
        assert_eq!(refused_by(&with(" 0 254", " 7 254")), Some("iv offset"));
        assert_eq!(refused_by(&with("254:16", "7:0")), Some("device"));
        assert_eq!(refused_by(&with("32768", "4096")), Some("offset"));
        // 512-byte sectors: dm-crypt prints no option at all.
        assert_eq!(
            refused_by(&with(" 1 sector_size:4096", "")),
            Some("options")
        );
        assert_eq!(
            refused_by(&with("sector_size:4096", "sector_size:512")),
            Some("options")
        );
        assert_eq!(
            refused_by(&with(
                "1 sector_size:4096",
                "2 allow_discards sector_size:4096"
            )),
            Some("options")
        );
        assert_eq!(
            refused_by(&with(
                "1 sector_size:4096",
                "2 sector_size:4096 iv_large_sectors"
            )),
            Some("options")
        );
        assert_eq!(
            refused_by(&live("aes-xts-plain64 - 0 254:16")),
            Some("line")
        );
        // A hex key of the wrong length, or not hex.
        let short = format!(
            "aes-xts-plain64 {} 0 254:16 32768 1 sector_size:4096",
            "ab".repeat(32)
        );
        assert_eq!(refused_by(&live(&short)), Some("key"));
        let odd = format!(
            "aes-xts-plain64 {}z 0 254:16 32768 1 sector_size:4096",
            "ab".repeat(64)
        );
        assert_eq!(refused_by(&live(&odd)), Some("key"));
        // The target itself: its type, start, length, count.
        let mut t = live(KEYRING);
        t[0].target_type = "linear".into();
        assert_eq!(refused_by(&t), Some("target type"));
        let mut t = live(KEYRING);
        t[0].sector_start = 8;
        assert_eq!(refused_by(&t), Some("start"));
        let mut t = live(KEYRING);
        t[0].length -= 8;
        assert_eq!(refused_by(&t), Some("length"));
        let mut t = live(KEYRING);
        t.push(t[0].clone());
        assert_eq!(refused_by(&t), Some("targets"));
        assert_eq!(refused_by(&[]), Some("targets"));
    }

    #[test]
    fn a_refusal_quotes_no_key() {
        let hex = format!(
            "aes-xts-plain64 {} 0 254:16 32768 1 sector_size:4096",
            "cd".repeat(32)
        );
        let e = check_live_table(&live(&hex), &layout(), 64).unwrap_err();
        assert_eq!(e.field, "key");
        assert!(!e.to_string().contains("cdcd"), "{e}");
        let e =
            check_live_table(&live(&KEYRING.replace(":64:", ":32:")), &layout(), 64).unwrap_err();
        assert!(!e.to_string().contains("cryptsetup:"), "{e}");
    }
}
