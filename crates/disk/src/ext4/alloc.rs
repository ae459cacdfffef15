//! Data blocks for the directories and the journal: handed out in order
//! from group 0 on, around each group's metadata.

use std::collections::BTreeMap;

use super::Ext4Error;
use super::geometry::Geometry;

/// Hands out data blocks in order from the first free block of group 0,
/// skipping each group's metadata, and remembers what it gave per group.
pub struct BlockAllocator<'a> {
    geometry: &'a Geometry,
    group: u64,
    next: u64,
    /// What was handed out per group: group-relative `(start, len)` runs.
    pub used: BTreeMap<u64, Vec<(u64, u64)>>,
}

impl<'a> BlockAllocator<'a> {
    /// Starts at group 0's first block after its metadata.
    pub fn new(geometry: &'a Geometry) -> Self {
        BlockAllocator {
            geometry,
            group: 0,
            next: geometry.overhead(0),
            used: BTreeMap::new(),
        }
    }

    /// `count` blocks as disk runs `(start, len)`, each within one group.
    pub fn take(&mut self, count: u64) -> Result<Vec<(u64, u64)>, Ext4Error> {
        let g = self.geometry;
        let mut runs = Vec::new();
        let mut left = count;
        while left > 0 {
            let end = g.group_start(self.group) + g.group_blocks(self.group);
            if self.next >= end {
                self.group += 1;
                if self.group >= g.groups {
                    return Err(Ext4Error::NoSpace { blocks: left });
                }
                self.next = g.group_start(self.group) + g.overhead(self.group);
                continue;
            }
            let n = left.min(end - self.next);
            runs.push((self.next, n));
            self.used
                .entry(self.group)
                .or_default()
                .push((self.next - g.group_start(self.group), n));
            self.next += n;
            left -= n;
        }
        Ok(runs)
    }

    /// One block.
    pub fn one(&mut self) -> Result<u64, Ext4Error> {
        Ok(self.take(1)?[0].0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ext4::geometry::{BLOCK_SIZE, BLOCKS_PER_GROUP};

    #[test]
    fn runs_skip_each_groups_metadata_and_stay_in_one_group() {
        let g = Geometry::for_device(1 << 30).unwrap();
        let mut a = BlockAllocator::new(&g);
        assert_eq!(a.one().unwrap(), g.overhead(0));
        let free0 = BLOCKS_PER_GROUP - g.overhead(0) - 1;
        let runs = a.take(free0 + 10).unwrap();
        assert_eq!(
            runs,
            [
                (g.overhead(0) + 1, free0),
                (BLOCKS_PER_GROUP + g.overhead(1), 10)
            ]
        );
        assert_eq!(a.used[&0], [(g.overhead(0), 1), (g.overhead(0) + 1, free0)]);
        assert_eq!(a.used[&1], [(g.overhead(1), 10)]);
    }

    #[test]
    fn running_out_is_an_error_not_a_block_past_the_end() {
        let g = Geometry::for_device(2048 * BLOCK_SIZE).unwrap();
        let mut a = BlockAllocator::new(&g);
        let free = g.blocks - g.overhead(0);
        assert!(matches!(
            a.take(free + 1),
            Err(Ext4Error::NoSpace { blocks: 1 })
        ));
    }
}
