//! The RAM tier: blocks as MLX arrays, shared by every sequence that uses them, under a byte
//! budget with least-recently-used eviction. It lives on the engine thread only, like the arrays.

use std::collections::HashMap;
use std::rc::Rc;

use super::blocks::Block;
use super::disk::BlockKey;

pub struct RamTier {
    budget: u64,
    used: u64,
    tick: u64,
    blocks: HashMap<BlockKey, (Rc<Block>, u64)>,
}

impl RamTier {
    pub fn new(budget: u64) -> Self {
        Self {
            budget,
            used: 0,
            tick: 0,
            blocks: HashMap::new(),
        }
    }

    pub fn get(&mut self, key: &BlockKey) -> Option<Rc<Block>> {
        self.tick += 1;
        let (block, last_used) = self.blocks.get_mut(key)?;
        *last_used = self.tick;
        Some(block.clone())
    }

    /// Adds `block` and evicts the least recently used others while over budget; returns how many
    /// were evicted. A block larger than the whole budget is not kept.
    pub fn insert(&mut self, block: Rc<Block>) -> u64 {
        if block.bytes > self.budget || self.blocks.contains_key(&block.key) {
            return 0;
        }
        self.tick += 1;
        self.used += block.bytes;
        self.blocks.insert(block.key, (block, self.tick));
        let mut evicted = 0;
        while self.used > self.budget {
            let Some(oldest) = self
                .blocks
                .iter()
                .min_by_key(|(_, (_, last_used))| *last_used)
                .map(|(key, _)| *key)
            else {
                break;
            };
            if let Some((block, _)) = self.blocks.remove(&oldest) {
                self.used -= block.bytes;
                evicted += 1;
            }
        }
        evicted
    }

    /// Drops `key`'s block (to replace it).
    pub fn remove(&mut self, key: &BlockKey) {
        if let Some((block, _)) = self.blocks.remove(key) {
            self.used -= block.bytes;
        }
    }

    pub fn bytes(&self) -> u64 {
        self.used
    }
}
