//! Per-layer key/value cache, grown in steps of 256 positions like mlx-lm's `KVCache`, so each
//! decode step writes one slice instead of copying the whole history.

use mlx_rs::Array;
use mlx_rs::error::Exception;
use mlx_rs::ops::indexing::{IndexOp, TryIndexMutOp};
use mlx_rs::ops::{self, zeros_dtype};

/// Positions added each time a layer's buffer grows (the prefill guard sizes the cache with it).
pub const STEP: i32 = 256;

#[derive(Default)]
pub struct KvCache {
    keys: Option<Array>,
    values: Option<Array>,
    offset: i32,
}

impl KvCache {
    /// A cache that already holds `keys` and `values` (`[batch, kv_heads, positions, head_dim]`),
    /// e.g. a prompt prefix restored from the prefix cache.
    pub fn from_prefix(keys: Array, values: Array) -> Self {
        let offset = keys.dim(2);
        Self {
            keys: Some(keys),
            values: Some(values),
            offset,
        }
    }

    /// Keys and values of positions `start..end`, as views of the buffers.
    pub fn positions(&self, start: i32, end: i32) -> Option<(Array, Array)> {
        let (keys, values) = (self.keys.as_ref()?, self.values.as_ref()?);
        (end <= self.offset).then(|| {
            (
                keys.index((.., .., start..end, ..)),
                values.index((.., .., start..end, ..)),
            )
        })
    }

    /// Positions already cached: the rotary offset of the next input.
    pub fn offset(&self) -> i32 {
        self.offset
    }

    /// The whole buffers, `[1, kv_heads, capacity, head_dim]` each, of which the first
    /// [`offset`](Self::offset) positions are filled; `None` before the first update.
    pub fn buffers(&self) -> Option<(&Array, &Array)> {
        self.keys.as_ref().zip(self.values.as_ref())
    }

    /// Appends `[batch, kv_heads, positions, head_dim]` keys and values; returns the whole history.
    pub fn update_and_fetch(
        &mut self,
        keys: &Array,
        values: &Array,
    ) -> Result<(Array, Array), Exception> {
        let previous = self.offset;
        let end = previous + keys.dim(2);
        let (mut cached_keys, mut cached_values) = match (self.keys.take(), self.values.take()) {
            (Some(cached_keys), Some(cached_values)) if end <= cached_keys.dim(2) => {
                (cached_keys, cached_values)
            }
            (cached_keys, cached_values) => {
                let old = cached_keys.zip(cached_values);
                (
                    grown(old.as_ref().map(|(k, _)| k), keys, previous, end)?,
                    grown(old.as_ref().map(|(_, v)| v), values, previous, end)?,
                )
            }
        };
        cached_keys.try_index_mut((.., .., previous..end, ..), keys)?;
        cached_values.try_index_mut((.., .., previous..end, ..), values)?;
        let history = (
            cached_keys.index((.., .., ..end, ..)),
            cached_values.index((.., .., ..end, ..)),
        );
        self.keys = Some(cached_keys);
        self.values = Some(cached_values);
        self.offset = end;
        Ok(history)
    }
}

/// A buffer holding the first `kept` positions of `old` and room up to `needed`, in whole steps.
fn grown(old: Option<&Array>, like: &Array, kept: i32, needed: i32) -> Result<Array, Exception> {
    let dims = like.shape();
    let added = needed - kept;
    let steps = (STEP + added - 1) / STEP;
    let fresh = zeros_dtype(&[dims[0], dims[1], steps * STEP, dims[3]], like.dtype())?;
    match old {
        Some(old) => ops::concatenate(&[old.index((.., .., ..kept, ..)), fresh], 2),
        None => Ok(fresh),
    }
}
