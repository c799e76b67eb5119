//! The prefix KV cache: a prompt's tokens in fixed-size blocks, each block's keys and values
//! kept under a key chained over the model and every token before it, so a request that repeats
//! a prefix restores it instead of prefilling it again.
//!
//! Two tiers: MLX arrays in RAM (`ram.rs`, shared by every sequence that uses them, LRU under a
//! byte budget) and one file per block on SSD (`disk/`, written by a background thread), which
//! outlives the worker: a restarted worker indexes the directory and serves from it. A block
//! that fails its checks on load is deleted, never served. Beside the blocks, RAM keeps the tail
//! of each finished sequence past its prompt's last whole block (`tail.rs`), so the next turn of a
//! conversation reuses everything the last one computed, its generated tokens included, to the
//! token. The cache lives on the engine thread; its counters are atomics the serve loop reads for
//! stats.

pub mod blocks;
pub mod disk;
mod key;
mod ram;
mod tail;
#[cfg(test)]
mod tests;

use std::path::PathBuf;
use std::rc::Rc;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use corral_ipc::PrefixCacheStats;
use mlx_rs::{Array, Dtype};

use crate::loaded::LoadedModel;
use crate::model::KvCache;
use blocks::{Block, block_shape, cut, from_payload, join, to_payload};
use disk::{BlockShape, DiskTier, Fingerprint};
use ram::RamTier;
use tail::{Tail, TailStore};

/// Whether blocks can fill every layer of `cache` (and so be cut from it).
fn restorable(cache: &[KvCache]) -> bool {
    cache.iter().all(KvCache::restores_from_blocks)
}

/// Tokens per block unless configured: small enough that a changed tail wastes little,
/// large enough that per-block overhead (a file, a hash, a concatenation) stays small.
pub const DEFAULT_BLOCK_TOKENS: usize = 256;

/// The tails' own bound, as a fraction of the RAM tier's budget: a tail is under one block, and
/// one per live conversation is what they are for.
const TAIL_SHARE_OF_RAM: u64 = 8;

#[derive(Debug, Clone)]
pub struct PrefixCacheOptions {
    pub block_tokens: usize,
    pub ram_bytes: u64,
    /// The cache root; the model's blocks go in a subdirectory named by its fingerprint.
    /// `None`: RAM tier only.
    pub disk_root: Option<PathBuf>,
    pub disk_bytes: u64,
}

/// What the cache has done, shared with the serve loop.
#[derive(Debug, Default)]
pub struct PrefixCounters {
    hit_blocks: AtomicU64,
    miss_blocks: AtomicU64,
    hit_tokens: AtomicU64,
    miss_tokens: AtomicU64,
    ram_bytes: AtomicU64,
    ram_evictions: AtomicU64,
    disk: std::sync::Mutex<Option<Arc<disk::DiskCounters>>>,
}

impl PrefixCounters {
    pub fn snapshot(&self) -> PrefixCacheStats {
        let load = |counter: &AtomicU64| counter.load(Ordering::Relaxed);
        let disk = self
            .disk
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .as_ref()
            .map(|disk| disk.snapshot())
            .unwrap_or_default();
        PrefixCacheStats {
            hit_blocks: load(&self.hit_blocks),
            miss_blocks: load(&self.miss_blocks),
            hit_tokens: load(&self.hit_tokens),
            miss_tokens: load(&self.miss_tokens),
            ram_bytes: load(&self.ram_bytes),
            ram_evictions: load(&self.ram_evictions),
            saves_enqueued: disk.saves_enqueued,
            saves_persisted: disk.saves_persisted,
            save_drops: disk.save_drops,
            disk_evictions: disk.evictions,
            disk_bytes: disk.bytes_on_disk,
            disk_files: disk.files,
            load_errors: disk.load_errors,
        }
    }

    fn add(counter: &AtomicU64, amount: u64) {
        counter.fetch_add(amount, Ordering::Relaxed);
    }
}

pub struct PrefixCache {
    block_tokens: usize,
    fingerprint: Fingerprint,
    shape: BlockShape,
    dtype: Dtype,
    ram: RamTier,
    tails: TailStore,
    disk: Option<DiskTier>,
    counters: Arc<PrefixCounters>,
}

impl PrefixCache {
    /// The cache for `loaded`; a disk tier that cannot be opened is logged and left out.
    pub fn open(
        loaded: &LoadedModel,
        options: &PrefixCacheOptions,
        counters: Arc<PrefixCounters>,
    ) -> std::io::Result<Self> {
        let dtype = loaded.model.dtype();
        let fingerprint = key::fingerprint(&loaded.dir)?;
        let shape = block_shape(&loaded.model, options.block_tokens as u32);
        let disk = options.disk_root.as_ref().and_then(|root| {
            let dir = root.join(hex(&fingerprint));
            match DiskTier::open(&dir, fingerprint, shape.clone(), options.disk_bytes) {
                Ok(disk) => Some(disk),
                Err(error) => {
                    tracing::warn!(dir = %dir.display(), %error, "prefix cache: no SSD tier");
                    None
                }
            }
        });
        if let Some(disk) = &disk {
            *counters
                .disk
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(disk.counters_handle());
        }
        Ok(Self {
            block_tokens: options.block_tokens,
            fingerprint,
            shape,
            dtype,
            ram: RamTier::new(options.ram_bytes),
            tails: TailStore::new(options.ram_bytes / TAIL_SHARE_OF_RAM),
            disk,
            counters,
        })
    }

    /// A cache holding the longest run of cached blocks at the start of `prompt`, then as much
    /// of a kept tail after them as the prompt repeats, leaving at least one token to prefill
    /// (its logits start the generation), and how many tokens it holds. Any failure only costs
    /// the reuse: the sequence then starts cold. A model with a layer that blocks cannot fill (a
    /// recurrent one) always starts cold: its state after a prefix is not in the blocks.
    pub fn restore(
        &mut self,
        prompt: &[u32],
        cold: impl Fn() -> Vec<KvCache>,
    ) -> (Vec<KvCache>, usize) {
        let empty = cold();
        if !restorable(&empty) {
            PrefixCounters::add(&self.counters.miss_tokens, prompt.len() as u64);
            return (empty, 0);
        }
        let usable = prompt.len().saturating_sub(1) / self.block_tokens;
        let keys = key::block_keys(
            &self.fingerprint,
            &prompt[..usable * self.block_tokens],
            self.block_tokens,
        );
        let mut found: Vec<Rc<Block>> = Vec::new();
        for key in keys {
            match self.ram.get(&key).or_else(|| self.load_from_disk(key)) {
                Some(block) => found.push(block),
                None => break,
            }
        }
        // A tail starts where its sequence's prompt had its last whole block, so a block that
        // mixes the last turn's generated tokens with their re-rendering does not match; each
        // depth of the chain is tried, and the longest reuse wins.
        let mut best: Option<(usize, Rc<Tail>, usize)> = None;
        for depth in (0..=found.len()).rev() {
            let parent = depth
                .checked_sub(1)
                .map_or(self.fingerprint, |index| found[index].key);
            let start = depth * self.block_tokens;
            if let Some((tail, reused)) = self.tails.find(&parent, &prompt[start..])
                && best
                    .as_ref()
                    .is_none_or(|(_, _, most)| start + reused > *most)
            {
                best = Some((depth, tail, start + reused));
            }
        }
        if let Some((depth, _, _)) = &best {
            found.truncate(*depth);
        }
        let block_hits = found.len() * self.block_tokens;
        let tail = best.map(|(_, tail, total)| (tail, total - block_hits));
        let hit_tokens = block_hits + tail.as_ref().map_or(0, |(_, reused)| *reused);
        let counters = &self.counters;
        PrefixCounters::add(&counters.hit_blocks, found.len() as u64);
        PrefixCounters::add(
            &counters.miss_blocks,
            (prompt.len() / self.block_tokens - found.len()) as u64,
        );
        PrefixCounters::add(&counters.hit_tokens, hit_tokens as u64);
        PrefixCounters::add(&counters.miss_tokens, (prompt.len() - hit_tokens) as u64);
        if hit_tokens == 0 {
            return (empty, 0);
        }
        let tail_layers = tail.map(|(tail, reused)| tail.first(reused));
        let mut parts: Vec<&[(Array, Array)]> =
            found.iter().map(|block| block.layers.as_slice()).collect();
        parts.extend(tail_layers.as_deref());
        match join(&parts, empty) {
            Ok(cache) => (cache, hit_tokens),
            Err(error) => {
                tracing::warn!(%error, "prefix cache: cannot restore a prefix; prefilling cold");
                (cold(), 0)
            }
        }
    }

    /// Positions per block: a sequence keeps its cache from its prompt's last whole block on.
    pub fn block_tokens(&self) -> usize {
        self.block_tokens
    }

    /// Keeps the whole blocks of `prompt` that `cache` now holds and the cache does not.
    pub fn store(&mut self, prompt: &[u32], cache: &[KvCache]) {
        if !restorable(cache) {
            return;
        }
        let keys = key::block_keys(&self.fingerprint, prompt, self.block_tokens);
        self.keep_blocks(&keys, cache);
        self.publish_bytes();
    }

    /// Keeps what a finished sequence computed: `tokens` are those whose keys and values `cache`
    /// holds (its prompt and generated tokens but the last sampled one), of which the first
    /// `prompt` came from the prompt. Their whole blocks go to both tiers; a tail, from the
    /// prompt's last whole block to the end, to RAM: the next turn re-renders the generated
    /// tokens, maybe differently, so it matches them only after that boundary.
    pub fn store_sequence(&mut self, tokens: &[u32], prompt: usize, cache: &[KvCache]) {
        if !restorable(cache) {
            return;
        }
        let keys = key::block_keys(&self.fingerprint, tokens, self.block_tokens);
        let prompt_blocks = prompt.min(tokens.len()) / self.block_tokens;
        let start = prompt_blocks * self.block_tokens;
        if self.keep_blocks(&keys, cache) && start < tokens.len() {
            let parent = prompt_blocks
                .checked_sub(1)
                .map_or(self.fingerprint, |index| keys[index]);
            match cut(cache, start as i32, tokens.len() as i32) {
                Ok(layers) => {
                    let tail = Tail::new(parent, tokens[start..].to_vec(), layers);
                    let evicted = self.tails.insert(tail);
                    PrefixCounters::add(&self.counters.ram_evictions, evicted);
                }
                Err(error) => tracing::warn!(%error, "prefix cache: cannot keep a tail"),
            }
        }
        self.publish_bytes();
    }

    /// Keeps the blocks `keys` name that RAM lacks, cut from `cache` in order; false when one
    /// could not be cut (the rest are then not kept either).
    fn keep_blocks(&mut self, keys: &[disk::BlockKey], cache: &[KvCache]) -> bool {
        for (index, key) in keys.iter().copied().enumerate() {
            if self.ram.get(&key).is_some() {
                continue;
            }
            let start = (index * self.block_tokens) as i32;
            let layers = match cut(cache, start, start + self.block_tokens as i32) {
                Ok(layers) => layers,
                Err(error) => {
                    tracing::warn!(%error, "prefix cache: cannot keep a block");
                    return false;
                }
            };
            let block = Rc::new(Block::new(key, layers));
            if let Some(disk) = &self.disk
                && !disk.contains(&key)
            {
                match to_payload(&block.layers, self.dtype) {
                    Ok(payload) => disk.save(key, Arc::new(payload)),
                    Err(error) => tracing::warn!(%error, "prefix cache: cannot save a block"),
                }
            }
            let evicted = self.ram.insert(block);
            PrefixCounters::add(&self.counters.ram_evictions, evicted);
        }
        true
    }

    /// The RAM the blocks and the tails hold, for stats.
    fn publish_bytes(&self) {
        self.counters
            .ram_bytes
            .store(self.ram.bytes() + self.tails.bytes(), Ordering::Relaxed);
    }

    /// A block from the SSD tier, into RAM; a payload that does not fit the model is forgotten.
    fn load_from_disk(&mut self, key: disk::BlockKey) -> Option<Rc<Block>> {
        let disk = self.disk.as_ref()?;
        if !disk.contains(&key) {
            return None;
        }
        let payload = disk.load(&key)?;
        match from_payload(&payload, &self.shape, self.dtype) {
            Ok(Some(layers)) => {
                let block = Rc::new(Block::new(key, layers));
                let evicted = self.ram.insert(block.clone());
                PrefixCounters::add(&self.counters.ram_evictions, evicted);
                Some(block)
            }
            Ok(None) => {
                tracing::warn!(key = %hex(&key), "prefix cache: a block of the wrong size; forgotten");
                disk.forget(&[key]);
                None
            }
            Err(error) => {
                tracing::warn!(%error, "prefix cache: cannot rebuild a block");
                None
            }
        }
    }

    /// Lets the writer finish what is queued, up to `bound` (at shutdown).
    pub fn flush(&self, bound: std::time::Duration) -> bool {
        self.disk.as_ref().is_none_or(|disk| disk.flush(bound))
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|byte| format!("{byte:02x}")).collect()
}
