//! CRC32C (Castagnoli), the checksum of ext4's `metadata_csum` and of jbd2.
//!
//! ext4 chains the raw register: no final inversion, the caller's seed is
//! the starting register ([`crc32c_raw`]). The standard CRC32C of a buffer
//! is `!crc32c_raw(!0, data)`. Written here (a 1 KiB table built at compile
//! time) rather than taken from a crate: it is 20 lines and the workspace
//! has no CRC crate.

/// The reflected Castagnoli polynomial.
const POLY: u32 = 0x82f6_3b78;

/// The byte-at-a-time table.
const TABLE: [u32; 256] = {
    let mut table = [0u32; 256];
    let mut i = 0;
    while i < 256 {
        let mut c = i as u32;
        let mut k = 0;
        while k < 8 {
            c = if c & 1 != 0 { (c >> 1) ^ POLY } else { c >> 1 };
            k += 1;
        }
        table[i] = c;
        i += 1;
    }
    table
};

/// Continues a CRC32C register `crc` over `data`, as the kernel's
/// `crc32c(crc, data, len)` does (no inversion in or out).
pub fn crc32c_raw(mut crc: u32, data: &[u8]) -> u32 {
    for &b in data {
        crc = TABLE[((crc ^ u32::from(b)) & 0xff) as usize] ^ (crc >> 8);
    }
    crc
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn standard_check_value() {
        // The CRC-32C check value of "123456789" (RFC 3720, B.4).
        assert_eq!(!crc32c_raw(!0, b"123456789"), 0xe306_9283);
        // 32 zero bytes (RFC 3720's iSCSI test vector).
        assert_eq!(!crc32c_raw(!0, &[0u8; 32]), 0x8a91_36aa);
    }

    #[test]
    fn chaining_equals_one_pass() {
        let data = b"confboot-state ext4 metadata";
        let (a, b) = data.split_at(7);
        assert_eq!(crc32c_raw(crc32c_raw(!0, a), b), crc32c_raw(!0, data));
    }
}
