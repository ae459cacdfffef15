//! Directory blocks: linear entries and the checksum tail of
//! `metadata_csum`.

use super::crc::crc32c_raw;
use super::geometry::BLOCK_SIZE;
use super::inode::inode_seed;
use super::{put16, put32};

/// `file_type` of a directory entry for a directory.
pub const FT_DIR: u8 = 2;
/// The tail's size (a fake entry holding the checksum).
const TAIL: usize = 12;

/// One directory block of inode `ino` holding `entries` (inode, name,
/// type); the last entry spans the rest before the tail. With no entries
/// the block holds one empty entry.
pub fn dir_block(entries: &[(u32, &str, u8)], ino: u32, fs_seed: u32) -> Vec<u8> {
    let size = BLOCK_SIZE as usize;
    let mut block = vec![0u8; size];
    let mut at = 0;
    let end = size - TAIL;
    if entries.is_empty() {
        put16(&mut block, 4, end as u16);
    }
    for (n, &(child, name, file_type)) in entries.iter().enumerate() {
        let len = (8 + name.len()).next_multiple_of(4);
        let rec_len = if n + 1 == entries.len() {
            end - at
        } else {
            len
        };
        put32(&mut block, at, child);
        put16(&mut block, at + 4, rec_len as u16);
        block[at + 6] = name.len() as u8;
        block[at + 7] = file_type;
        block[at + 8..at + 8 + name.len()].copy_from_slice(name.as_bytes());
        at += rec_len;
    }
    put16(&mut block, end + 4, TAIL as u16);
    block[end + 7] = 0xde;
    let crc = crc32c_raw(inode_seed(fs_seed, ino), &block[..end]);
    put32(&mut block, end + 8, crc);
    block
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_chain_to_the_tail() {
        let b = dir_block(
            &[
                (2, ".", FT_DIR),
                (2, "..", FT_DIR),
                (11, "lost+found", FT_DIR),
            ],
            2,
            1,
        );
        let rec = |at: usize| u16::from_le_bytes([b[at + 4], b[at + 5]]) as usize;
        assert_eq!((rec(0), rec(12)), (12, 12));
        assert_eq!(24 + rec(24), 4096 - 12);
        assert_eq!(&b[32..42], b"lost+found");
        assert_eq!((rec(4084), b[4084 + 7]), (12, 0xde));
        let empty = dir_block(&[], 11, 1);
        assert_eq!(u16::from_le_bytes([empty[4], empty[5]]), 4084);
    }
}
