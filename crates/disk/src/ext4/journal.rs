//! The journal's superblock (jbd2, big-endian). The rest of the journal is
//! not written (mke2fs's `lazy_journal_init`): `s_start = 0` says the
//! journal is empty, so nothing in it is ever replayed, and the kernel
//! writes each block before it reads it back.

use super::geometry::BLOCK_SIZE;

/// jbd2's magic.
const MAGIC: u32 = 0xc03b_3998;
/// A version-2 superblock.
const SUPERBLOCK_V2: u32 = 4;

/// The journal superblock (its first block) for a journal of `blocks`
/// blocks in the file system `uuid`.
pub fn superblock(blocks: u64, uuid: &[u8; 16]) -> Vec<u8> {
    let mut b = vec![0u8; BLOCK_SIZE as usize];
    let mut put = |at: usize, v: u32| b[at..at + 4].copy_from_slice(&v.to_be_bytes());
    put(0x00, MAGIC);
    put(0x04, SUPERBLOCK_V2);
    put(0x0c, BLOCK_SIZE as u32);
    put(0x10, blocks as u32); // s_maxlen
    put(0x14, 1); // s_first: the log starts after this block
    put(0x18, 1); // s_sequence
    put(0x1c, 0); // s_start: empty
    put(0x40, 1); // s_nr_users
    b[0x30..0x40].copy_from_slice(uuid);
    b
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_journal_of_the_right_length() {
        let b = superblock(1024, &[3; 16]);
        let be = |at: usize| u32::from_be_bytes(b[at..at + 4].try_into().unwrap());
        assert_eq!((be(0), be(4), be(0x10), be(0x1c)), (MAGIC, 4, 1024, 0));
        assert_eq!(&b[0x30..0x40], &[3; 16]);
    }
}
