//! Per-layer cache, in three kinds. A key/value cache is grown in steps of 256 positions like
//! mlx-lm's `KVCache`, so each decode step writes one slice instead of copying the whole history:
//! a full cache holds every position; a sliding-window layer's cache (mlx-lm's
//! `RotatingKVCache`) lets go of the positions no later query can see, so its memory stays near
//! the window however long the sequence. It keeps what the prefix cache may still cut: positions
//! from [`KvCache::keep_from`] on (the last whole block of the prompt, where a conversation's
//! next turn resumes), and it is trimmed only once a window's worth can go, so a trim's copy is
//! paid once per window of steps.
//!
//! A latent attention layer's cache (DeepSeek V3) is a full cache of one head whose keys are the
//! compressed latent (`kv_lora_rank` wide) and whose values are the rotary key all heads share
//! (`qk_rope_head_dim` wide), as mlx-lm caches them: per position `kv_lora_rank +
//! qk_rope_head_dim` elements instead of `2 · heads · head_dim`. Blocks are cut from it and
//! restored into it as from any full cache, keys and values each at their own width.
//!
//! A recurrent layer's cache (mlx-lm's `ArraysCache` of a gated DeltaNet, short-convolution or
//! Mamba-2 layer) holds no positions at all, only the state after the last one ([`RecurrentState`]),
//! the same size however long the sequence. Blocks of positions can be neither cut from it nor
//! restored into it ([`KvCache::restores_from_blocks`]); instead, once told the prefix cache's
//! block size ([`KvCache::snapshot_every`]), the layer records its whole state at each block
//! boundary its input crosses, mid-chunk included ([`KvCache::states_to_record`],
//! [`KvCache::record_state`]), and a new sequence's cache restarts from such a snapshot
//! ([`KvCache::restore_recurrent`]).
//!
//! A recurrent layer goes back over guessed positions (speculative decoding) by keeping its
//! state after each position of an input that holds guesses ([`KvCache::hold_each_state`]):
//! its own loop computes each of them anyway, so keeping them costs memory until the guesses
//! are checked, no compute, where recomputing from the last confirmed token would cost a pass
//! over it. [`KvCache::forget_last`] then takes the state after the last confirmed position
//! and drops any boundary snapshot past it, so the prefix cache never stores a guess's state.

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
    /// Positions seen so far: the rotary offset of the next input, but for `rotary_shift`.
    offset: i32,
    /// Added to `offset` for the next input's rotation: after an image, whose tokens advance a
    /// multi-section rotation by its longest side rather than by their count, text turns by
    /// less than its index (Qwen2-VL's `rope_deltas`).
    rotary_shift: i32,
    /// The next input's own positions (`[3, positions]`: time, row, column), where it holds an
    /// image's tokens; they replace `offset` and `rotary_shift` for that input's rotation.
    next_positions: Option<Array>,
    /// Runs of the next input's positions (`[start, end)`) that see each other both ways, not
    /// only their past: an image's tokens in Gemma 3's prompt.
    next_both_ways: Vec<(i32, i32)>,
    /// The position the buffers' first entry holds (0 until a window trims).
    start: i32,
    /// A sliding window: the query at `p` sees the keys at `p - window + 1 ..= p`.
    window: Option<i32>,
    /// Positions from here on are kept whatever the window.
    keep_from: Option<i32>,
    /// A recurrent layer's state instead of keys and values.
    recurrent: Option<RecurrentState>,
    /// A recurrent layer records its state at every multiple of this many positions.
    snapshot_every: Option<i32>,
    /// The states recorded at boundaries, by position, oldest first, until the prefix cache
    /// takes or drops them.
    snapshots: Vec<(i32, RecurrentState)>,
    /// A recurrent layer's state when told to hold each, then after each position since, until
    /// guesses are checked; `None` while it keeps no such states.
    each_state: Option<Vec<RecurrentState>>,
}

/// What a recurrent layer carries from one input to the next; `None` before its first. A gated
/// DeltaNet layer and a Mamba-2 layer hold both; LFM2's short-convolution layer only `conv`.
#[derive(Default, Clone)]
pub struct RecurrentState {
    /// The short convolution's inputs of the last `kernel - 1` positions, `[1, kernel - 1, channels]`.
    pub conv: Option<Array>,
    /// The delta rule's memory, `[1, value_heads, value_dim, key_dim]`, or a Mamba-2 layer's scan
    /// state, `[1, heads, head_dim, state_size]`, in float32.
    pub delta: Option<Array>,
}

impl RecurrentState {
    /// Slots a state has, in [`RecurrentState::slots`] order.
    pub const SLOTS: usize = 2;

    /// The arrays it holds in a fixed order, `None` for one the layer kind does not keep: what a
    /// boundary snapshot stores, whatever the recurrent layer (a short convolution alone keeps
    /// only `conv`).
    pub fn slots(&self) -> [Option<&Array>; Self::SLOTS] {
        [self.conv.as_ref(), self.delta.as_ref()]
    }

    /// The inverse of [`RecurrentState::slots`].
    pub fn from_slots([conv, delta]: [Option<Array>; Self::SLOTS]) -> Self {
        Self { conv, delta }
    }

    /// Bytes of the arrays it holds.
    pub fn bytes(&self) -> u64 {
        self.slots()
            .into_iter()
            .flatten()
            .map(|array| array.nbytes() as u64)
            .sum()
    }
}

impl KvCache {
    /// A sliding-window layer's cache.
    pub fn rotating(window: i32) -> Self {
        Self {
            window: Some(window.max(1)),
            ..Self::default()
        }
    }

    /// A recurrent layer's cache.
    pub fn recurrent() -> Self {
        Self {
            recurrent: Some(RecurrentState::default()),
            ..Self::default()
        }
    }

    /// Whether positions cut from other caches can fill this kind ([`Self::restore`]): false for
    /// a recurrent layer, whose state after a prefix is no function of that prefix's blocks.
    pub fn restores_from_blocks(&self) -> bool {
        self.recurrent.is_none()
    }

    /// A recurrent layer's state after the positions seen so far; `None` for a key/value kind.
    pub fn recurrent_state(&self) -> Option<&RecurrentState> {
        self.recurrent.as_ref()
    }

    /// Replaces a recurrent layer's state by the one after `positions` more positions.
    pub fn advance_recurrent(
        &mut self,
        state: RecurrentState,
        positions: i32,
    ) -> Result<(), Exception> {
        let Some(held) = self.recurrent.as_mut() else {
            return Err(Exception::from(
                "a key/value cache holds no recurrent state",
            ));
        };
        *held = state;
        self.offset += positions;
        Ok(())
    }

    /// Makes a recurrent layer record its state at every multiple of `every` positions, for the
    /// prefix cache to keep with the block that ends there; a key/value cache ignores it.
    pub fn snapshot_every(&mut self, every: i32) {
        if self.recurrent.is_some() && every > 0 {
            self.snapshot_every = Some(every);
        }
    }

    /// Makes a recurrent layer keep its present state and its state after each position from
    /// here on (guesses, in one input or several), for [`KvCache::forget_last`] to go back to;
    /// a key/value cache ignores it.
    pub fn hold_each_state(&mut self) {
        if let Some(state) = &self.recurrent {
            self.each_state = Some(vec![state.clone()]);
        }
    }

    /// Of the next `positions` positions, after how many (in `1..=positions`, ascending) the
    /// layer records its state: each boundary they reach, or all of them while it holds each
    /// state.
    pub fn states_to_record(&self, positions: i32) -> Vec<i32> {
        if self.each_state.is_some() {
            return (1..=positions).collect();
        }
        let Some(every) = self.snapshot_every else {
            return Vec::new();
        };
        let first = every - self.offset % every;
        (first..=positions).step_by(every as usize).collect()
    }

    /// Records `state`, the state after `within` of the next positions (one
    /// [`KvCache::states_to_record`] gave), before [`KvCache::advance_recurrent`] moves past them.
    pub fn record_state(&mut self, within: i32, state: RecurrentState) {
        let position = self.offset + within;
        if self
            .snapshot_every
            .is_some_and(|every| position % every == 0)
        {
            self.snapshots.push((position, state.clone()));
        }
        if let Some(each) = self.each_state.as_mut() {
            each.push(state);
        }
    }

    /// The recorded state after `position` positions.
    pub fn snapshot_at(&self, position: i32) -> Option<&RecurrentState> {
        self.snapshots
            .iter()
            .find(|(at, _)| *at == position)
            .map(|(_, state)| state)
    }

    /// Drops the recorded states at positions `keep` refuses.
    pub fn retain_snapshots(&mut self, mut keep: impl FnMut(i32) -> bool) {
        self.snapshots.retain(|(at, _)| keep(*at));
    }

    /// Positions of the recorded states, oldest first.
    pub fn snapshot_positions(&self) -> Vec<i32> {
        self.snapshots.iter().map(|(at, _)| *at).collect()
    }

    /// Fills an empty recurrent cache with the state after the first `positions` positions of a
    /// prefix (a boundary snapshot). A key/value cache refuses.
    pub fn restore_recurrent(
        &mut self,
        state: RecurrentState,
        positions: i32,
    ) -> Result<(), Exception> {
        let Some(held) = self.recurrent.as_mut() else {
            return Err(Exception::from(
                "a key/value cache cannot take a recurrent snapshot",
            ));
        };
        *held = state;
        self.offset = positions;
        Ok(())
    }

    /// Keeps the positions from `position` on, for the prefix cache to cut.
    pub fn keep_from(&mut self, position: i32) {
        self.keep_from = Some(position);
    }

    /// Fills an empty cache of this kind with a restored prefix: `keys` and `values`
    /// (`[batch, kv_heads, positions, head_dim]`) are positions `0..positions`. A recurrent
    /// layer refuses.
    pub fn restore(&mut self, keys: Array, values: Array) -> Result<(), Exception> {
        if !self.restores_from_blocks() {
            return Err(Exception::from(
                "a recurrent layer's state cannot be restored from key/value blocks",
            ));
        }
        self.offset = keys.dim(2);
        self.start = 0;
        self.keys = Some(keys);
        self.values = Some(values);
        Ok(())
    }

    /// Keys and values of positions `start..end`, as views of the buffers; `None` when they
    /// were never written (always, for a recurrent layer), or a window let go of some that a
    /// query at `end` would see.
    /// Positions before those read as zeros: no query from `end` on sees them.
    pub fn positions(&self, start: i32, end: i32) -> Option<(Array, Array)> {
        let (keys, values) = (self.keys.as_ref()?, self.values.as_ref()?);
        if start > end || end > self.offset {
            return None;
        }
        let seen_from = self
            .window
            .map_or(start, |window| start.max(end - (window - 1)));
        if seen_from < self.start {
            return None;
        }
        let from = start.max(self.start);
        let read = |buffer: &Array| -> Result<Array, Exception> {
            let held = buffer.index((.., .., (from - self.start)..(end - self.start), ..));
            if from == start {
                return Ok(held);
            }
            let dims = buffer.shape();
            let gone = zeros_dtype(&[dims[0], dims[1], from - start, dims[3]], buffer.dtype())?;
            ops::concatenate(&[gone, held], 2)
        };
        Some((read(keys).ok()?, read(values).ok()?))
    }

    /// The held keys and values, `[batch, kv_heads, held, head_dim]` each: positions
    /// `offset - held .. offset`.
    pub fn held(&self) -> Option<(Array, Array)> {
        self.positions(self.start, self.offset)
    }

    /// Forgets the last `positions` positions (guessed tokens the model did not confirm): the
    /// next input overwrites them. A window's cache lets go of positions only before the last
    /// input's, so those are still held. A recurrent layer goes back to its state after the last
    /// position kept, which it has held since [`KvCache::hold_each_state`], and lets go of the
    /// others; its snapshots past it go too.
    pub fn forget_last(&mut self, positions: i32) -> Result<(), Exception> {
        let each_state = self.each_state.take();
        if positions <= 0 {
            return Ok(());
        }
        let kept = self.offset - positions;
        if let Some(held) = self.recurrent.as_mut() {
            let states = each_state.unwrap_or_default();
            let state = (states.len() as i32 - 1 - positions)
                .try_into()
                .ok()
                .and_then(|index: usize| states.into_iter().nth(index))
                .ok_or_else(|| {
                    Exception::from(
                        "a recurrent layer cannot forget positions it kept no state before",
                    )
                })?;
            *held = state;
            self.snapshots.retain(|(at, _)| *at <= kept);
        }
        self.offset = kept.max(self.start);
        Ok(())
    }

    /// Positions already cached.
    pub fn offset(&self) -> i32 {
        self.offset
    }

    /// The rotary position of the next input's first position when it has no positions of its
    /// own: the positions already cached, shifted after an image.
    pub fn rotary_offset(&self) -> i32 {
        self.offset + self.rotary_shift
    }

    /// Sets how the next input rotates: shifted by `shift`, or at `positions` of its own.
    pub fn set_rotary(&mut self, shift: i32, positions: Option<Array>) {
        self.rotary_shift = shift;
        self.next_positions = positions;
    }

    /// Whether this is a sliding-window layer's cache.
    pub fn is_sliding(&self) -> bool {
        self.window.is_some()
    }

    /// Sets the runs of the next input's positions that see each other both ways.
    pub fn set_both_ways(&mut self, runs: Vec<(i32, i32)>) {
        self.next_both_ways = runs;
    }

    /// The runs of the input just added (or about to be) whose positions see each other both
    /// ways, `[start, end)` each.
    pub fn both_ways(&self) -> &[(i32, i32)] {
        &self.next_both_ways
    }

    /// The next input's own multi-section positions, where it has them.
    pub fn next_positions(&self) -> Option<&Array> {
        self.next_positions.as_ref()
    }

    /// How many positions the buffers hold, the last at `offset - 1`.
    pub fn held_len(&self) -> i32 {
        self.offset - self.start
    }

    /// The whole buffers, `[1, kv_heads, capacity, head_dim]` each, of which the first
    /// [`held_len`](Self::held_len) positions are filled; `None` before the first update.
    pub fn buffers(&self) -> Option<(&Array, &Array)> {
        self.keys.as_ref().zip(self.values.as_ref())
    }

    /// Appends `[batch, kv_heads, positions, head_dim]` keys and values; returns the held
    /// history, which ends with them and starts at least a window before the first of them.
    pub fn update_and_fetch(
        &mut self,
        keys: &Array,
        values: &Array,
    ) -> Result<(Array, Array), Exception> {
        self.let_go()?;
        let previous = self.offset - self.start;
        let end = previous + keys.dim(2);
        let (mut cached_keys, mut cached_values) = match (self.keys.take(), self.values.take()) {
            (Some(cached_keys), Some(cached_values)) if end <= cached_keys.dim(2) => {
                (cached_keys, cached_values)
            }
            (cached_keys, cached_values) => {
                let old = cached_keys.zip(cached_values);
                (
                    grown(old.as_ref().map(|(k, _)| k), keys, 0, previous, end)?,
                    grown(old.as_ref().map(|(_, v)| v), values, 0, previous, end)?,
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
        self.offset += keys.dim(2);
        Ok(history)
    }

    /// A window's cache drops the positions the next query cannot see (it sees the window's
    /// last `window - 1` before it) and nothing kept for the prefix cache, once a whole window
    /// of them can go.
    fn let_go(&mut self) -> Result<(), Exception> {
        let Some(window) = self.window else {
            return Ok(());
        };
        let mut first_needed = self.offset - (window - 1);
        if let Some(keep_from) = self.keep_from {
            first_needed = first_needed.min(keep_from);
        }
        let droppable = first_needed - self.start;
        if droppable < window {
            return Ok(());
        }
        let (Some(keys), Some(values)) = (self.keys.take(), self.values.take()) else {
            return Ok(());
        };
        let (held, kept) = (self.offset - self.start, self.offset - first_needed);
        self.keys = Some(grown(Some(&keys), &keys, droppable, held, kept)?);
        self.values = Some(grown(Some(&values), &values, droppable, held, kept)?);
        self.start = first_needed;
        Ok(())
    }
}

/// A buffer holding `old`'s positions `from..to` at its start and room up to `needed`, in whole
/// steps.
fn grown(
    old: Option<&Array>,
    like: &Array,
    from: i32,
    to: i32,
    needed: i32,
) -> Result<Array, Exception> {
    let dims = like.shape();
    let kept = to - from;
    let added = needed - kept;
    let steps = ((added + STEP - 1) / STEP).max(1);
    let fresh = zeros_dtype(&[dims[0], dims[1], steps * STEP, dims[3]], like.dtype())?;
    match old {
        Some(old) if kept > 0 => ops::concatenate(&[old.index((.., .., from..to, ..)), fresh], 2),
        _ => Ok(fresh),
    }
}

#[cfg(test)]
mod tests;
