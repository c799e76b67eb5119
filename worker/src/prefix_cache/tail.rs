//! Tails: the tokens a finished sequence computed past its prompt's last whole block (the
//! prompt's rest and the generated tokens), with their keys and values, kept under the chain key
//! of the blocks before them. Whole blocks alone make an
//! agent's next turn prefill again up to `block_tokens - 1` tokens of what the last turn already
//! computed; a tail lets it match to the token. The next prompt can differ from what was generated
//! (a template re-serializes a tool call, appends its end-of-turn marker), so a tail is reused up
//! to the first token that differs.
//!
//! A model with recurrent layers has no per-position state in them, so its tail also carries
//! their state at the few points where the sequence had it whole ([`Ends::At`]): the end of its
//! prompt, taken as the prefill finished, and its own end. It is reused only up to such a point.
//!
//! RAM only, with its own byte bound, least recently used out first; on the engine thread only,
//! like the arrays.

use std::rc::Rc;

use mlx_rs::Array;
use mlx_rs::ops::indexing::IndexOp;

use super::blocks::snapshot_bytes;
use super::disk::BlockKey;
use crate::model::RecurrentState;

/// A run of tokens after the blocks its `parent` key names, and per key/value layer their keys
/// and values (`[1, kv_heads, tokens, head_dim]` each).
#[derive(Clone)]
pub struct Tail {
    parent: BlockKey,
    tokens: Vec<u32>,
    layers: Vec<(Array, Array)>,
    ends: Ends,
    bytes: u64,
}

/// Where a tail can end a restore.
#[derive(Clone)]
pub enum Ends {
    /// After any of its tokens: every layer keeps keys and values per position.
    Anywhere,
    /// Only after its first `n` tokens, for each `n` listed (ascending) with every recurrent
    /// layer's state there.
    At(Vec<(usize, Rc<[RecurrentState]>)>),
}

impl Tail {
    pub fn new(
        parent: BlockKey,
        tokens: Vec<u32>,
        layers: Vec<(Array, Array)>,
        ends: Ends,
    ) -> Self {
        let mut tail = Self {
            parent,
            tokens,
            layers,
            ends,
            bytes: 0,
        };
        tail.count_bytes();
        tail
    }

    fn count_bytes(&mut self) {
        let kv: u64 = self
            .layers
            .iter()
            .map(|(keys, values)| (keys.nbytes() + values.nbytes()) as u64)
            .sum();
        let states = match &self.ends {
            Ends::Anywhere => 0,
            Ends::At(states) => states.iter().map(|(_, state)| snapshot_bytes(state)).sum(),
        };
        self.bytes = kv + states;
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

    /// The recurrent layers' states after the tail's first `length` tokens, if it has them.
    pub fn states_at(&self, length: usize) -> Option<&[RecurrentState]> {
        match &self.ends {
            Ends::Anywhere => None,
            Ends::At(states) => states
                .iter()
                .find(|(at, _)| *at == length)
                .map(|(_, state)| &**state),
        }
    }

    /// How many of its tokens a prompt that repeats its first `matched` can reuse.
    fn reusable(&self, matched: usize) -> usize {
        match &self.ends {
            Ends::Anywhere => matched,
            Ends::At(states) => states
                .iter()
                .map(|(at, _)| *at)
                .filter(|at| *at <= matched)
                .max()
                .unwrap_or(0),
        }
    }

    /// Takes the states of `other`, a tail under the same parent whose tokens start this one's
    /// (or the other way round), at the points within this one, then lets go of the latest ones
    /// while over `budget`: an earlier point is reused by every prompt a later one is.
    fn absorb(&mut self, other: &Tail, budget: u64) {
        let (Ends::At(mine), Ends::At(theirs)) = (&mut self.ends, &other.ends) else {
            return;
        };
        for (at, state) in theirs {
            if *at <= self.tokens.len() && mine.iter().all(|(held, _)| held != at) {
                mine.push((*at, state.clone()));
            }
        }
        mine.sort_by_key(|(at, _)| *at);
        self.count_bytes();
        while self.bytes > budget
            && let Ends::At(states) = &mut self.ends
            && states.len() > 1
        {
            states.pop();
            self.count_bytes();
        }
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
            .map(|(index, (tail, _))| {
                (
                    index,
                    tail.reusable(common_prefix(&tail.tokens, rest).min(limit)),
                )
            })
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
    /// earlier turns) and taking their recurrent states, or giving its states to a kept one that
    /// covers it; then evicts the least recently used while over budget. Returns how many tails
    /// were evicted. A tail larger than the whole budget is not kept.
    pub fn insert(&mut self, mut tail: Tail) -> u64 {
        if tail.bytes > self.budget {
            return 0;
        }
        let budget = self.budget;
        self.tails.retain(|(kept, _)| {
            let extended = kept.parent == tail.parent && tail.tokens.starts_with(&kept.tokens);
            if extended {
                tail.absorb(kept, budget);
            }
            !extended
        });
        let covering = self
            .tails
            .iter_mut()
            .find(|(kept, _)| kept.parent == tail.parent && kept.tokens.starts_with(&tail.tokens));
        match covering {
            Some((kept, _)) => {
                let mut grown = Tail::clone(kept);
                grown.absorb(&tail, budget);
                *kept = Rc::new(grown);
            }
            None => {
                self.tick += 1;
                self.tails.push((Rc::new(tail), self.tick));
            }
        }
        self.used = self.tails.iter().map(|(kept, _)| kept.bytes).sum();
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
        Tail::new([parent; 32], tokens.to_vec(), layers, Ends::Anywhere)
    }

    /// A recurrent model's tail, with a state of `STATE_BYTES` after each of its first `at` tokens.
    fn recurrent_tail(parent: u8, tokens: &[u32], at: &[usize]) -> Tail {
        let state = || -> Rc<[RecurrentState]> {
            Rc::from(vec![RecurrentState {
                conv: Some(mlx_rs::ops::zeros::<f32>(&[STATE_BYTES as i32 / 4]).unwrap()),
                delta: None,
            }])
        };
        let ends = Ends::At(at.iter().map(|&at| (at, state())).collect());
        Tail {
            ends,
            ..tail(parent, tokens)
        }
        .counted()
    }

    const STATE_BYTES: u64 = 1024;

    impl Tail {
        fn counted(mut self) -> Self {
            self.count_bytes();
            self
        }
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

    #[test]
    fn a_recurrent_tail_is_reused_only_to_a_point_where_it_holds_the_state() {
        let mut store = TailStore::new(1 << 20);
        // The prompt's rest ended after 3 tokens; the sequence, after 6.
        store.insert(recurrent_tail(1, &[10, 11, 12], &[3]));
        store.insert(recurrent_tail(1, &[10, 11, 12, 13, 14, 15], &[6]));
        assert_eq!(store.bytes(), bytes(6) + 2 * STATE_BYTES);
        let (found, reused) = store.find(&[1; 32], &[10, 11, 12, 13, 14, 15, 16]).unwrap();
        assert_eq!(reused, 6);
        assert!(found.states_at(6).is_some());
        // The answer was re-rendered from its fourth token: back to the prompt's end.
        let (found, reused) = store.find(&[1; 32], &[10, 11, 12, 99, 14, 15, 16]).unwrap();
        assert_eq!(reused, 3);
        assert!(found.states_at(3).is_some());
        assert!(store.find(&[1; 32], &[10, 11, 99]).is_none());
        // A covered tail gives its state to the one covering it.
        store.insert(recurrent_tail(1, &[10, 11], &[2]));
        assert_eq!(store.find(&[1; 32], &[10, 11, 99]).unwrap().1, 2);
        assert_eq!(store.bytes(), bytes(6) + 3 * STATE_BYTES);
    }

    #[test]
    fn a_recurrent_tail_over_the_bound_lets_go_of_its_latest_states_first() {
        let mut store = TailStore::new(bytes(6) + 2 * STATE_BYTES);
        store.insert(recurrent_tail(1, &[10, 11], &[2]));
        store.insert(recurrent_tail(1, &[10, 11, 12, 13], &[4]));
        store.insert(recurrent_tail(1, &[10, 11, 12, 13, 14, 15], &[6]));
        assert_eq!(store.bytes(), bytes(6) + 2 * STATE_BYTES);
        assert_eq!(
            store
                .find(&[1; 32], &[10, 11, 12, 13, 14, 15, 16])
                .unwrap()
                .1,
            4
        );
    }
}
