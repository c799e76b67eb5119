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
//!
//! A model with recurrent layers (gated DeltaNet) has no per-position state in those layers, so
//! KV blocks alone cannot restore it: such a block can also carry a boundary snapshot, every
//! recurrent layer's state after the block's last position, recorded by the layer itself as its
//! input crosses the boundary, in prefill and in decode. A restore then goes to the deepest block
//! with a snapshot, or further into a tail: such a model's tail also holds the recurrent states at
//! its sequence's prompt end (taken as the prefill finishes) and at its own end, so the next turn
//! restores to the token where it resends the prompt, or the prompt and the answer, and a tail is
//! cut only at those points. Snapshots are much larger than a block's keys and values (a
//! Qwen3.6-35B-A3B snapshot is about 63 MB), so only some are kept: every `snapshot_every`-th
//! boundary, the prompt's last whole block (where the next turn of the conversation shares it)
//! and the sequence's last one (where the next turn's re-rendered history ends); they count in
//! the RAM tier's budget like the blocks.

pub mod blocks;
pub mod disk;
mod key;
mod ram;
mod tail;
#[cfg(test)]
mod tests;

use std::ops::Range;
use std::path::PathBuf;
use std::rc::Rc;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use corral_ipc::PrefixCacheStats;
use mlx_rs::{Array, Dtype};

use crate::distributed::Group;
use crate::loaded::LoadedModel;
use crate::model::KvCache;
use blocks::{Block, block_shape, cut, from_payload, join, to_payload};
use disk::{BlockShape, DiskTier, Fingerprint};
use ram::RamTier;
use tail::{Ends, Tail, TailStore};

/// Whether blocks alone can fill every layer of `cache`: no recurrent layer needs a snapshot.
fn restorable(cache: &[KvCache]) -> bool {
    cache.iter().all(KvCache::restores_from_blocks)
}

/// Tokens per block unless configured: small enough that a changed tail wastes little,
/// large enough that per-block overhead (a file, a hash, a concatenation) stays small.
pub const DEFAULT_BLOCK_TOKENS: usize = 256;

/// Boundaries per kept snapshot unless configured, besides the prompt's and the sequence's last:
/// a prompt that leaves a cached one mid-history prefills at most this many blocks again, and a
/// long conversation's snapshots (12 blocks' worth of keys and values each for Qwen3.6-35B-A3B)
/// take about as much as its blocks.
pub const DEFAULT_SNAPSHOT_EVERY: usize = 8;

/// The tails' own bound, as a fraction of the RAM tier's budget: a tail is under one block (and a
/// recurrent model's up to two states), and one per live conversation is what they are for.
const TAIL_SHARE_OF_RAM: u64 = 8;

#[derive(Debug, Clone)]
pub struct PrefixCacheOptions {
    pub block_tokens: usize,
    pub ram_bytes: u64,
    /// The cache root; the model's blocks go in a subdirectory named by its fingerprint.
    /// `None`: RAM tier only.
    pub disk_root: Option<PathBuf>,
    pub disk_bytes: u64,
    /// A recurrent model keeps the snapshot of every this-many-th block boundary (and the
    /// prompt's and the sequence's last).
    pub snapshot_every: usize,
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

/// What [`PrefixCache::restore`] found for a prompt.
pub struct Restored {
    /// A fresh cache, holding the first `cached_tokens` positions of the prompt.
    pub caches: Vec<KvCache>,
    pub cached_tokens: usize,
    /// Where the prompt parts from what the cache held on its path, when the cache can tell.
    pub diverged_at: Option<usize>,
}

pub struct PrefixCache {
    block_tokens: usize,
    snapshot_every: usize,
    fingerprint: Fingerprint,
    shape: BlockShape,
    dtype: Dtype,
    ram: RamTier,
    tails: TailStore,
    disk: Option<DiskTier>,
    counters: Arc<PrefixCounters>,
    /// The group whose ranks each cache their own part of the model (a tensor-parallel rank
    /// its slice of every layer, a pipeline rank its own layers); a prefix is restored only
    /// where every rank has it.
    group: Option<Arc<Group>>,
    /// The sequence caches this process fills (a pipeline rank's layers'), which alone are
    /// cached.
    filled: Range<usize>,
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
        let group = loaded.model.group().cloned();
        // A rank's blocks hold its part of the model: each rank's go in a directory of their own.
        let subdir = match &group {
            Some(group) => format!(
                "{}-rank{}of{}",
                hex(&fingerprint),
                group.rank(),
                group.size()
            ),
            None => hex(&fingerprint),
        };
        let disk = options.disk_root.as_ref().and_then(|root| {
            let dir = root.join(&subdir);
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
            snapshot_every: options.snapshot_every.max(1),
            fingerprint,
            shape,
            dtype,
            ram: RamTier::new(options.ram_bytes),
            tails: TailStore::new(options.ram_bytes / TAIL_SHARE_OF_RAM),
            disk,
            counters,
            group,
            filled: loaded.model.filled_caches(),
        })
    }

    /// A cache holding the longest run of cached blocks at the start of `prompt`, then as much
    /// of a kept tail after them as the prompt repeats, leaving at least one token to prefill
    /// (its logits start the generation), and how many tokens it holds. Any failure only costs
    /// the reuse: the sequence then starts cold. A model with recurrent layers restores up to the
    /// deepest cached block that carries a snapshot, or further to a point of a tail that holds
    /// the recurrent states there.
    pub fn restore(&mut self, prompt: &[u32], cold: impl Fn() -> Vec<KvCache>) -> Restored {
        let mut empty = cold();
        let recurrent = !restorable(&empty[self.filled.clone()]);
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
        // Blocks alone restore every layer up to the last found, or for a model with recurrent
        // layers up to the deepest with a snapshot. A tail starts where its sequence's prompt had
        // its last whole block, so a block that mixes the last turn's generated tokens with their
        // re-rendering does not match; each depth of the chain is tried, and the longest reuse
        // wins (a recurrent model's tail brings its states, so its blocks need none).
        let blocks_alone = if recurrent {
            found
                .iter()
                .rposition(|block| block.snapshot.is_some())
                .map_or(0, |index| index + 1)
        } else {
            found.len()
        };
        let mut depth = blocks_alone;
        let mut hit_tokens = blocks_alone * self.block_tokens;
        let mut tail: Option<(Rc<Tail>, usize)> = None;
        for at in (0..=found.len()).rev() {
            let parent = at
                .checked_sub(1)
                .map_or(self.fingerprint, |index| found[index].key);
            let start = at * self.block_tokens;
            if let Some((found_tail, reused)) = self.tails.find(&parent, &prompt[start..])
                && start + reused > hit_tokens
            {
                (depth, hit_tokens) = (at, start + reused);
                tail = Some((found_tail, reused));
            }
        }
        let diverged_at = self.divergence(prompt, &found);
        // The ranks restore together or not at all: they hold the same blocks unless one's
        // tier let some go or failed to read them.
        if let Some(group) = &self.group
            && !group.all_agree(u32::try_from(hit_tokens).unwrap_or(u32::MAX))
        {
            (depth, hit_tokens, tail) = (0, 0, None);
        }
        found.truncate(depth);
        let counters = &self.counters;
        PrefixCounters::add(&counters.hit_blocks, found.len() as u64);
        PrefixCounters::add(
            &counters.miss_blocks,
            (prompt.len() / self.block_tokens - found.len()) as u64,
        );
        PrefixCounters::add(&counters.hit_tokens, hit_tokens as u64);
        PrefixCounters::add(&counters.miss_tokens, (prompt.len() - hit_tokens) as u64);
        let restored = |caches, cached_tokens| Restored {
            caches,
            cached_tokens,
            diverged_at,
        };
        if hit_tokens == 0 {
            return restored(empty, 0);
        }
        let tail_layers = tail.as_ref().map(|(tail, reused)| tail.first(*reused));
        let mut parts: Vec<&[(Array, Array)]> =
            found.iter().map(|block| block.layers.as_slice()).collect();
        parts.extend(tail_layers.as_deref());
        let snapshot = match &tail {
            Some((tail, reused)) => tail.states_at(*reused),
            None => found.last().and_then(|block| block.snapshot.as_deref()),
        };
        match join(
            &parts,
            snapshot.filter(|_| recurrent),
            &mut empty[self.filled.clone()],
        ) {
            Ok(()) => restored(empty, hit_tokens),
            Err(error) => {
                tracing::warn!(%error, "prefix cache: cannot restore a prefix; prefilling cold");
                restored(cold(), 0)
            }
        }
    }

    /// The first token of `prompt` that differs from what the cache holds on its path: past the
    /// `found` blocks, where the kept tail it agrees with longest has another token. `None` where
    /// the prompt only goes on past what is cached, or where a missing block ended the match
    /// (blocks are kept by their hash: which of its tokens differed, the cache cannot tell).
    fn divergence(&self, prompt: &[u32], found: &[Rc<Block>]) -> Option<usize> {
        (0..=found.len())
            .filter_map(|at| {
                let parent = at
                    .checked_sub(1)
                    .map_or(self.fingerprint, |index| found[index].key);
                let start = at * self.block_tokens;
                let (common, differs) = self.tails.agreement(&parent, &prompt[start..])?;
                Some((start + common, differs))
            })
            .max_by_key(|(agreed, _)| *agreed)
            .filter(|(agreed, differs)| *differs && *agreed >= found.len() * self.block_tokens)
            .map(|(agreed, _)| agreed)
    }

    /// Positions per block: a sequence keeps its cache from its prompt's last whole block on.
    pub fn block_tokens(&self) -> usize {
        self.block_tokens
    }

    /// Keeps the whole blocks of the first `prefilled` tokens of `prompt` that `cache` now holds
    /// and the cache does not, with the recurrent layers' snapshots the policy keeps; the
    /// sequence's cache then lets go of the snapshots up to there. A model with recurrent layers
    /// whose prefill this finishes also keeps its tail, with their states at the prompt's end:
    /// the next turn resends the prompt even where it re-renders the answer differently.
    pub fn store(&mut self, prompt: &[u32], prefilled: usize, cache: &mut [KvCache]) {
        let cache = &mut cache[self.filled.clone()];
        let block = self.block_tokens;
        let last_boundary = (prompt.len() / block * block) as i32;
        let every = self.every_nth();
        for layer in cache.iter_mut() {
            layer.retain_snapshots(|at| at % every == 0 || at == last_boundary);
        }
        let keys = key::block_keys(&self.fingerprint, &prompt[..prefilled], block);
        if self.keep_blocks(&keys, cache) && prefilled == prompt.len() && !restorable(cache) {
            self.keep_tail(&keys, prompt, prompt, cache);
        }
        for layer in cache.iter_mut() {
            layer.retain_snapshots(|at| at > prefilled as i32);
        }
        self.publish_bytes();
    }

    /// After a decode step of a recurrent model: `tokens` are those whose state `cache` holds.
    /// A snapshot the policy keeps goes to the cache with its block at once (so a long
    /// generation holds at most one in the sequence); of the others only the latest stays, the
    /// sequence's last boundary when it ends.
    pub fn store_decoded(&mut self, tokens: &[u32], cache: &mut [KvCache]) {
        let cache = &mut cache[self.filled.clone()];
        let Some(positions) = cache
            .iter()
            .find(|layer| !layer.restores_from_blocks())
            .map(KvCache::snapshot_positions)
        else {
            return;
        };
        let Some(&latest) = positions.last() else {
            return;
        };
        let every = self.every_nth();
        if let Some(&kept) = positions.iter().filter(|&&at| at % every == 0).max() {
            for layer in cache.iter_mut() {
                layer.retain_snapshots(|at| at % every == 0 || at == latest);
            }
            let keys = key::block_keys(
                &self.fingerprint,
                &tokens[..kept as usize],
                self.block_tokens,
            );
            self.keep_blocks(&keys, cache);
            self.publish_bytes();
        }
        for layer in cache.iter_mut() {
            layer.retain_snapshots(|at| at == latest);
        }
    }

    /// Positions between two snapshots the policy keeps.
    fn every_nth(&self) -> i32 {
        (self.block_tokens * self.snapshot_every) as i32
    }

    /// Keeps what a finished sequence computed: `tokens` are those whose keys and values `cache`
    /// holds (its prompt and generated tokens but the last sampled one), of which the first
    /// `prompt` came from the prompt. Their whole blocks go to both tiers; a tail, from the
    /// prompt's last whole block to the end, to RAM: the next turn re-renders the generated
    /// tokens, maybe differently, so it matches them only after that boundary. A recurrent
    /// model's tail holds the states at its end, beside those its prompt's end left.
    pub fn store_sequence(&mut self, tokens: &[u32], prompt: usize, cache: &[KvCache]) {
        let cache = &cache[self.filled.clone()];
        let keys = key::block_keys(&self.fingerprint, tokens, self.block_tokens);
        if self.keep_blocks(&keys, cache) {
            self.keep_tail(&keys, &tokens[..prompt.min(tokens.len())], tokens, cache);
        }
        self.publish_bytes();
    }

    /// Keeps in RAM what `cache` holds of `tokens` (all it holds) after `prompt`'s last whole
    /// block, under the key of the blocks before it (`keys` names at least those); for a model
    /// with recurrent layers, with their states at the end, the one point where they are known.
    fn keep_tail(
        &mut self,
        keys: &[disk::BlockKey],
        prompt: &[u32],
        tokens: &[u32],
        cache: &[KvCache],
    ) {
        let blocks = prompt.len() / self.block_tokens;
        let start = blocks * self.block_tokens;
        if start >= tokens.len() {
            return;
        }
        let parent = blocks
            .checked_sub(1)
            .map_or(self.fingerprint, |index| keys[index]);
        let ends = if restorable(cache) {
            Ends::Anywhere
        } else {
            match blocks::states_at_end(cache, tokens.len() as i32) {
                Ok(Some(states)) => Ends::At(vec![(tokens.len() - start, states.into())]),
                Ok(None) => return,
                Err(error) => {
                    tracing::warn!(%error, "prefix cache: cannot keep a tail's states");
                    return;
                }
            }
        };
        match cut(cache, start as i32, tokens.len() as i32) {
            Ok(layers) => {
                let tail = Tail::new(parent, tokens[start..].to_vec(), layers, ends);
                let evicted = self.tails.insert(tail);
                PrefixCounters::add(&self.counters.ram_evictions, evicted);
            }
            Err(error) => tracing::warn!(%error, "prefix cache: cannot keep a tail"),
        }
    }

    /// Keeps the blocks `keys` name that RAM lacks, cut from `cache` in order, each with the
    /// snapshot the recurrent layers recorded at its end if they did; a block RAM holds without
    /// a snapshot gets the one recorded now, in both tiers. False when one could not be cut (the
    /// rest are then not kept either).
    fn keep_blocks(&mut self, keys: &[disk::BlockKey], cache: &[KvCache]) -> bool {
        for (index, key) in keys.iter().copied().enumerate() {
            let start = (index * self.block_tokens) as i32;
            let end = start + self.block_tokens as i32;
            let snapshot = match blocks::snapshot(cache, end) {
                Ok(snapshot) => snapshot,
                Err(error) => {
                    tracing::warn!(%error, "prefix cache: cannot keep a snapshot");
                    None
                }
            };
            let held = self.ram.get(&key);
            if held
                .as_ref()
                .is_some_and(|held| snapshot.is_none() || held.snapshot.is_some())
            {
                continue;
            }
            let layers = match &held {
                Some(held) => Ok(held.layers.clone()),
                None => cut(cache, start, end),
            };
            let layers = match layers {
                Ok(layers) => layers,
                Err(error) => {
                    tracing::warn!(%error, "prefix cache: cannot keep a block");
                    return false;
                }
            };
            let block = Rc::new(Block::new(key, layers, snapshot));
            // With a snapshot, the file (or the write under way) may hold the block without it.
            let upgrade = block.snapshot.is_some();
            if let Some(disk) = self
                .disk
                .as_ref()
                .filter(|disk| upgrade || !disk.contains(&key))
            {
                match to_payload(&block.layers, block.snapshot.as_deref(), self.dtype) {
                    Ok(payload) if upgrade => disk.replace(key, Arc::new(payload)),
                    Ok(payload) => disk.save(key, Arc::new(payload)),
                    Err(error) => tracing::warn!(%error, "prefix cache: cannot save a block"),
                }
            }
            if held.is_some() {
                self.ram.remove(&key);
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
            Ok(Some((layers, snapshot))) => {
                let block = Rc::new(Block::new(key, layers, snapshot));
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
