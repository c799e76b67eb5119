//! The in-memory index of the block files: size and recency of each, and their total, so
//! `contains` needs no I/O and eviction picks the least recently used file without a scan.

use std::collections::{BTreeMap, HashMap};

use super::header::BlockKey;

#[derive(Debug, Default)]
pub(super) struct Index {
    entries: HashMap<BlockKey, Entry>,
    /// Last use tick to key, oldest first.
    by_use: BTreeMap<u64, BlockKey>,
    tick: u64,
    bytes: u64,
}

#[derive(Debug)]
struct Entry {
    size: u64,
    used: u64,
    /// The tick at insertion: tells a file apart from a later file under the same key.
    born: u64,
}

impl Index {
    pub(super) fn insert(&mut self, key: BlockKey, size: u64) {
        self.remove(&key);
        self.tick += 1;
        let entry = Entry {
            size,
            used: self.tick,
            born: self.tick,
        };
        self.by_use.insert(self.tick, key);
        self.entries.insert(key, entry);
        self.bytes += size;
    }

    pub(super) fn contains(&self, key: &BlockKey) -> bool {
        self.entries.contains_key(key)
    }

    /// Marks `key` most recently used; returns its birth tick.
    pub(super) fn touch(&mut self, key: &BlockKey) -> Option<u64> {
        let entry = self.entries.get_mut(key)?;
        self.by_use.remove(&entry.used);
        self.tick += 1;
        entry.used = self.tick;
        self.by_use.insert(self.tick, *key);
        Some(entry.born)
    }

    pub(super) fn remove(&mut self, key: &BlockKey) -> bool {
        let Some(entry) = self.entries.remove(key) else {
            return false;
        };
        self.by_use.remove(&entry.used);
        self.bytes -= entry.size;
        true
    }

    /// Removes `key` only if it is still the file born at `born`.
    pub(super) fn remove_if_born(&mut self, key: &BlockKey, born: u64) -> bool {
        self.entries
            .get(key)
            .is_some_and(|entry| entry.born == born)
            && self.remove(key)
    }

    /// The least recently used key other than `keep`.
    pub(super) fn oldest_except(&self, keep: &BlockKey) -> Option<BlockKey> {
        self.by_use.values().find(|key| *key != keep).copied()
    }

    pub(super) fn bytes(&self) -> u64 {
        self.bytes
    }

    pub(super) fn len(&self) -> usize {
        self.entries.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn oldest_follows_use_and_skips_the_kept_key() {
        let mut index = Index::default();
        index.insert([1; 32], 10);
        index.insert([2; 32], 20);
        index.insert([3; 32], 30);
        assert_eq!(index.bytes(), 60);
        index.touch(&[1; 32]);
        assert_eq!(index.oldest_except(&[3; 32]), Some([2; 32]));
        assert_eq!(index.oldest_except(&[2; 32]), Some([3; 32]));
        assert!(index.remove(&[2; 32]));
        assert_eq!((index.len(), index.bytes()), (2, 40));
    }

    #[test]
    fn remove_if_born_spares_a_newer_file_under_the_same_key() {
        let mut index = Index::default();
        index.insert([1; 32], 10);
        let born = index.touch(&[1; 32]).unwrap();
        index.insert([1; 32], 10);
        assert!(!index.remove_if_born(&[1; 32], born));
        assert!(index.contains(&[1; 32]));
    }
}
