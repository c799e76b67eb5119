//! What a model will hold once loaded, estimated from its files before any worker starts, so
//! admission can refuse or make room first: the safetensors files' sizes (the weights are loaded
//! as stored) plus a KV cache reserve from the cache sizes the worker's description gives (model
//! formats live in the worker: it reads the architecture's layout, windows, latent and recurrent
//! layers included); a GGUF file counts its size, which the description replaces with what its
//! weights take once loaded (see `process/workers.rs`), plus the worker process's own base.

use std::fs;
use std::io;
use std::path::Path;

use corral_ipc::CacheSize;

/// Tokens of KV cache reserved per model. A worker's cache grows with its context, so the real
/// amount is unknown at load time; 4096 tokens covers a typical chat exchange without reserving a
/// long context's worth that most requests never use. The footprint samples and the watermarks
/// catch what grows past it.
pub const KV_RESERVE_TOKENS: u64 = 4096;

/// What a worker process holds besides its weights: its code and libraries (MLX, BLAS), the
/// tokenizer, MLX's buffers, thread stacks, and after a first request its KV cache's first steps.
/// Measured on Linux as the footprint minus the weights (`scripts/gguf_memory.sh`): SmolLM2-135M
/// (Q4_K_M, Q5_K_M, Q6_K; a 49152-token vocabulary) 42 MiB once loaded and 61 MiB after one chat
/// (39 and 58 when first measured: the worker's code has grown with its architectures and
/// towers); a random-weight 197M llama (Q4_K_M, 4096 tokens) 23 and 49 MiB. With the 5% on the
/// weights, 48 MiB puts SmolLM2's within 5% of its footprint after a chat.
pub const PROCESS_BASE_BYTES: u64 = 48 << 20;

/// A model's expected memory, in bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ModelEstimate {
    /// The sum of the `*.safetensors` files' sizes (a GGUF's loaded size, when described).
    pub weight_bytes: u64,
    /// A directory's caches for one sequence of `KV_RESERVE_TOKENS` tokens, as its worker
    /// described them: keys and values (sliding windows' up to their window) plus the recurrent
    /// layers' states.
    pub kv_reserve_bytes: u64,
    /// What a vision tower's activations take while it encodes an image, as its worker
    /// described them (0 without a tower).
    pub vision_reserve_bytes: u64,
    /// The worker process's own memory, [`PROCESS_BASE_BYTES`], for a GGUF and a directory
    /// whose caches were not described; a directory's KV reserve already covers it (a
    /// 4096-token cache is larger than the base for any model but the test fixtures).
    pub base_bytes: u64,
}

impl ModelEstimate {
    /// Weights plus 5% (allocator slack, runtime buffers), plus the KV and image reserves and
    /// the base.
    pub fn total(&self) -> u64 {
        let weights = u128::from(self.weight_bytes) * 105 / 100;
        u64::try_from(weights)
            .unwrap_or(u64::MAX)
            .saturating_add(self.kv_reserve_bytes)
            .saturating_add(self.vision_reserve_bytes)
            .saturating_add(self.base_bytes)
    }
}

impl ModelEstimate {
    /// One rank's part of a worker group of `ranks`: the weights and reserves split evenly,
    /// plus its own process's base.
    pub fn rank_share(&self, ranks: u64) -> u64 {
        let ranks = ranks.max(1);
        Self {
            weight_bytes: self.weight_bytes / ranks,
            kv_reserve_bytes: self.kv_reserve_bytes / ranks,
            vision_reserve_bytes: self.vision_reserve_bytes / ranks,
            base_bytes: self.base_bytes,
        }
        .total()
    }
}

/// Estimates the model in `model_dir`, or in one GGUF file, whose caches for one sequence take
/// `cache` as its worker described it. Errors name the file or directory that failed.
pub fn estimate_model_bytes(
    model_dir: &Path,
    cache: Option<&CacheSize>,
) -> io::Result<ModelEstimate> {
    let meta = fs::metadata(model_dir)
        .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", model_dir.display())))?;
    if meta.is_file() {
        // A GGUF holds its weights as stored; its KV reserve is not counted, the process's base
        // is: the footprint after a chat is what its estimate is held to (the footprint samples
        // catch the cache as it grows).
        return Ok(ModelEstimate {
            weight_bytes: meta.len(),
            kv_reserve_bytes: 0,
            vision_reserve_bytes: 0,
            base_bytes: PROCESS_BASE_BYTES,
        });
    }
    // A model the worker could not describe reserves what a GGUF does.
    let (kv_reserve_bytes, base_bytes) = match cache {
        Some(cache) => (cache.bytes_for(KV_RESERVE_TOKENS), 0),
        None => (0, PROCESS_BASE_BYTES),
    };
    Ok(ModelEstimate {
        weight_bytes: weight_bytes(model_dir)?,
        kv_reserve_bytes,
        vision_reserve_bytes: 0,
        base_bytes,
    })
}

/// The checkpoint's files, chosen as the worker loads them: a directory that also keeps
/// Mistral's `consolidated.safetensors` or other tensors beside the shards counts them once.
fn weight_bytes(model_dir: &Path) -> io::Result<u64> {
    let mut total = 0u64;
    for path in corral_ipc::weight_files(model_dir)? {
        // `fs::metadata` follows symlinks: in a Hugging Face cache snapshot every file is a
        // link to a blob, and the link's own size would be a few bytes.
        let meta = fs::metadata(&path)
            .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", path.display())))?;
        total = total.saturating_add(meta.len());
    }
    Ok(total)
}

#[cfg(test)]
mod tests;
