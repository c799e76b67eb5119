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

    /// How far `rest` agrees with the tail under `parent` that it agrees with longest, and
    /// whether that tail holds another token where they part (`false`: `rest` only goes on past
    /// it, or ends).
    pub fn agreement(&self, parent: &BlockKey, rest: &[u32]) -> Option<(usize, bool)> {
        self.tails
            .iter()
            .filter(|(tail, _)| tail.parent == *parent)
            .map(|(tail, _)| {
                let common = common_prefix(&tail.tokens, rest);
                (common, common < tail.tokens.len() && common < rest.len())
            })
            .max_by_key(|(common, _)| *common)
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
mod tests;
