//! What an ELF file says about its linking, for the checks that binaries
//! and initramfs files are static (`static_binaries`, `boot`).

/// How an ELF file links.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ElfLinking {
    /// It asks for a dynamic loader (`PT_INTERP`).
    pub interp: bool,
    /// Its `DT_NEEDED` entries: shared libraries it needs.
    pub needed: usize,
    /// It names itself a shared library (`DT_SONAME`).
    pub soname: bool,
}

impl ElfLinking {
    /// Static: no loader, no libraries, not a library itself (a static-pie
    /// executable or a kernel module).
    pub fn is_static(&self) -> bool {
        !self.interp && self.needed == 0 && !self.soname
    }
}

/// The linking of the 64-bit little-endian ELF `bytes`; `None` if they are
/// not one (or are cut short).
pub fn linking(bytes: &[u8]) -> Option<ElfLinking> {
    let u16_at = |o: usize| -> Option<usize> {
        Some(u16::from_le_bytes(bytes.get(o..o + 2)?.try_into().ok()?) as usize)
    };
    let u32_at = |o: usize| -> Option<u32> {
        Some(u32::from_le_bytes(bytes.get(o..o + 4)?.try_into().ok()?))
    };
    let u64_at = |o: usize| -> Option<usize> {
        Some(u64::from_le_bytes(bytes.get(o..o + 8)?.try_into().ok()?) as usize)
    };
    if bytes.get(..6)? != b"\x7fELF\x02\x01" {
        return None;
    }
    let (phoff, phentsize, phnum) = (u64_at(0x20)?, u16_at(0x36)?, u16_at(0x38)?);
    let mut out = ElfLinking {
        interp: false,
        needed: 0,
        soname: false,
    };
    for i in 0..phnum {
        let ph = phoff.checked_add(i.checked_mul(phentsize)?)?;
        match u32_at(ph)? {
            3 => out.interp = true, // PT_INTERP
            2 => {
                // PT_DYNAMIC: walk (tag, value) pairs up to DT_NULL.
                let (off, size) = (u64_at(ph + 8)?, u64_at(ph + 32)?);
                for e in (off..off.checked_add(size)?).step_by(16) {
                    match u64_at(e)? {
                        0 => break,
                        1 => out.needed += 1,    // DT_NEEDED
                        14 => out.soname = true, // DT_SONAME
                        _ => {}
                    }
                }
            }
            _ => {}
        }
    }
    Some(out)
}
