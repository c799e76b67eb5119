//! Tails: the tokens a finished sequence computed past its prompt's last whole block (the
//! prompt's rest and the generated tokens), with their keys and values, kept under the chain key
//! of the blocks before them. Whole blocks alone make an
//! agent's next turn prefill again up to `block_tokens - 1` tokens of what the last turn already
//! computed; a tail lets it match to the token. The next prompt can differ from what was generated
//! (a template re-serializes a tool call, appends its end-of-turn marker), so a tail is reused up
//! to the first token that differs.
//!
//! RAM only, with its own byte bound, least recently used out first; on the engine thread only,
//! like the arrays.

use std::rc::Rc;

use mlx_rs::Array;
use mlx_rs::ops::indexing::IndexOp;

use super::disk::BlockKey;

/// A run of tokens after the blocks its `parent` key names, and per layer their keys and values
/// (`[1, kv_heads, tokens, head_dim]` each).
pub struct Tail {
    parent: BlockKey,
    tokens: Vec<u32>,
    layers: Vec<(Array, Array)>,
    bytes: u64,
}

impl Tail {
    pub fn new(parent: BlockKey, tokens: Vec<u32>, layers: Vec<(Array, Array)>) -> Self {
        let bytes = layers
            .iter()
            .map(|(keys, values)| (keys.nbytes() + values.nbytes()) as u64)
            .sum();
        Self {
            parent,
            tokens,
            layers,
            bytes,
        }
    }

    /// Each layer's keys and values of the tail's first `length` tokens.
    pub fn first(&self, length: usize) -> Vec<(Array, Array)> {
        let end = length as i32;
        self.layers
            .iter()
            .map(|(keys, values)| {
                (
                    keys.index((.., .., ..end, ..)),
                    values.index((.., .., ..end, ..)),
                )
            })
            .collect()
    }
}

/// The tails kept, under a byte budget.
pub struct TailStore {
    budget: u64,
    used: u64,
    tick: u64,
    /// Few enough (a budget's worth of sub-block runs) that a scan beats an index.
    tails: Vec<(Rc<Tail>, u64)>,
}

impl TailStore {
    pub fn new(budget: u64) -> Self {
        Self {
            budget,
            used: 0,
            tick: 0,
            tails: Vec::new(),
        }
    }

    /// The tail under `parent` sharing the longest common prefix with `rest` (the prompt after
    /// the restored blocks), and how many of its tokens to reuse: that prefix, short of the last
    /// token of `rest`, whose logits start the generation. `None` when no token can be reused.
    pub fn find(&mut self, parent: &BlockKey, rest: &[u32]) -> Option<(Rc<Tail>, usize)> {
        let limit = rest.len().saturating_sub(1);
        let (index, reused) = self
            .tails
            .iter()
            .enumerate()
            .filter(|(_, (tail, _))| tail.parent == *parent)
            .map(|(index, (tail, _))| (index, common_prefix(&tail.tokens, rest).min(limit)))
            .max_by_key(|(_, reused)| *reused)?;
        if reused == 0 {
            return None;
        }
        self.tick += 1;
        let (tail, last_used) = &mut self.tails[index];
        *last_used = self.tick;
        Some((tail.clone(), reused))
    }

    /// Keeps `tail`, replacing the tails under the same parent that it extends (a conversation's
    /// earlier turns), then evicts the least recently used while over budget. Returns how many
    /// tails were evicted. A tail larger than the whole budget is not kept.
    pub fn insert(&mut self, tail: Tail) -> u64 {
        if tail.bytes > self.budget {
            return 0;
        }
        self.tails.retain(|(kept, _)| {
            kept.parent != tail.parent || !tail.tokens.starts_with(&kept.tokens)
        });
        self.used = self.tails.iter().map(|(kept, _)| kept.bytes).sum();
        if !self.holds(&tail) {
            self.tick += 1;
            self.used += tail.bytes;
            self.tails.push((Rc::new(tail), self.tick));
        }
        let mut evicted = 0;
        while self.used > self.budget {
            let Some(oldest) = self
                .tails
                .iter()
                .enumerate()
                .min_by_key(|(_, (_, last_used))| *last_used)
                .map(|(index, _)| index)
            else {
                break;
            };
            let (gone, _) = self.tails.swap_remove(oldest);
            self.used -= gone.bytes;
            evicted += 1;
        }
        evicted
    }

    pub fn bytes(&self) -> u64 {
        self.used
    }

    /// Whether a kept tail under the same parent already covers `tail`'s tokens.
    fn holds(&self, tail: &Tail) -> bool {
        self.tails
            .iter()
            .any(|(kept, _)| kept.parent == tail.parent && kept.tokens.starts_with(&tail.tokens))
    }
}

fn common_prefix(left: &[u32], right: &[u32]) -> usize {
    left.iter().zip(right).take_while(|(a, b)| a == b).count()
}

#[cfg(test)]
mod tests {
    use super::*;

    const LAYERS: usize = 2;

    fn tail(parent: u8, tokens: &[u32]) -> Tail {
        let dims = [1, 1, tokens.len() as i32, 4];
        let layers = (0..LAYERS)
            .map(|_| {
                (
                    mlx_rs::ops::zeros::<f32>(&dims).unwrap(),
                    mlx_rs::ops::ones::<f32>(&dims).unwrap(),
                )
            })
            .collect();
        Tail::new([parent; 32], tokens.to_vec(), layers)
    }

    /// Bytes of a tail of `tokens` tokens: keys and values, 4 f32 each per layer.
    fn bytes(tokens: u64) -> u64 {
        tokens * 4 * 4 * 2 * LAYERS as u64
    }

    #[test]
    fn a_continuation_matches_to_the_token_and_only_under_its_parent() {
        let mut store = TailStore::new(1 << 20);
        store.insert(tail(1, &[10, 11, 12, 13, 14]));
        let (found, reused) = store.find(&[1; 32], &[10, 11, 12, 13, 14, 15, 16]).unwrap();
        assert_eq!(reused, 5);
        assert_eq!(found.first(reused)[0].0.dim(2), 5);
        assert!(store.find(&[2; 32], &[10, 11, 12, 13, 14, 15]).is_none());
    }

    #[test]
    fn a_rerendered_history_reuses_up_to_the_first_differing_token() {
        let mut store = TailStore::new(1 << 20);
        store.insert(tail(1, &[10, 11, 12, 13, 14]));
        store.insert(tail(1, &[10, 11, 20]));
        // The template wrote 99 where the model had generated 13: three tokens match the first
        // tail, two the second; the longer match wins.
        let (found, reused) = store.find(&[1; 32], &[10, 11, 12, 99, 14, 15]).unwrap();
        assert_eq!(reused, 3);
        assert_eq!(found.tokens, [10, 11, 12, 13, 14]);
        assert!(store.find(&[1; 32], &[42, 10, 11]).is_none());
    }

    #[test]
    fn at_least_one_token_is_left_to_prefill() {
        let mut store = TailStore::new(1 << 20);
        store.insert(tail(1, &[10, 11, 12]));
        assert_eq!(store.find(&[1; 32], &[10, 11, 12]).unwrap().1, 2);
        assert_eq!(store.find(&[1; 32], &[10, 11]).unwrap().1, 1);
        assert!(store.find(&[1; 32], &[10]).is_none());
        assert!(store.find(&[1; 32], &[]).is_none());
    }

    #[test]
    fn a_longer_turn_replaces_the_tail_it_extends() {
        let mut store = TailStore::new(1 << 20);
        store.insert(tail(1, &[10, 11]));
        store.insert(tail(1, &[10, 11, 12, 13]));
        assert_eq!(store.bytes(), bytes(4));
        // A shorter run already covered by a kept tail adds nothing.
        store.insert(tail(1, &[10, 11, 12]));
        assert_eq!(store.bytes(), bytes(4));
        // Another conversation under the same parent is kept beside it.
        store.insert(tail(1, &[30, 31]));
        assert_eq!(store.bytes(), bytes(6));
    }

    #[test]
    fn the_least_recently_used_tails_go_first_when_over_the_bound() {
        let mut store = TailStore::new(bytes(8));
        store.insert(tail(1, &[1, 2, 3]));
        store.insert(tail(2, &[4, 5, 6]));
        // Using the first makes the second the oldest.
        assert!(store.find(&[1; 32], &[1, 2, 3, 4]).is_some());
        assert_eq!(store.insert(tail(3, &[7, 8, 9])), 1);
        assert!(store.bytes() <= bytes(8));
        assert!(store.find(&[2; 32], &[4, 5, 6, 7]).is_none());
        assert!(store.find(&[1; 32], &[1, 2, 3, 4]).is_some());
        assert!(store.find(&[3; 32], &[7, 8, 9, 10]).is_some());
        // One larger than the whole bound is not kept, and evicts nothing.
        assert_eq!(store.insert(tail(4, &[0; 9])), 0);
        assert!(store.find(&[4; 32], &[0; 10]).is_none());
    }
}
