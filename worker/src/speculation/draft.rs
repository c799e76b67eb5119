//! A draft model's guesses (`speculative = "draft"`): a smaller model of the same tokenizer,
//! loaded in the same worker, reads each decoding sequence's tokens into a cache of its own and
//! guesses the next few greedily, one pass of it for all sequences per guessed token.
//!
//! A guess is the draft's argmax, a distribution of one token, for which speculative rejection
//! sampling (accept with probability `min(1, p/q)`, else sample the normalized excess of `p`
//! over `q`) is the check the target already makes: sample each row as plain decoding would and
//! keep the guess when the sample is it. So greedy output is plain decoding's token for token,
//! and sampled output keeps the target's distribution and its seed handling.
//!
//! The draft's cache follows the sequence lazily: before guessing, it forgets the guesses of
//! the last round the target did not confirm (its recurrent layers go back to a state they held)
//! and reads what it has not seen, at most a prompt chunk per pass, so a long prompt restored
//! from the prefix cache is read over a few passes that decode without guesses meanwhile.

use mlx_rs::Array;
use mlx_rs::error::Exception;
use mlx_rs::ops::indexing::argmax_axis;

use crate::loaded::LoadedModel;
use crate::model::{KvCache, Segment};

/// A sequence's draft cache and what it was last fed past the sequence's confirmed tokens.
pub struct DraftCache {
    cache: Vec<KvCache>,
    /// The sequence's length when the draft last guessed, and the guesses it read after it.
    guessed_after: usize,
    guesses_read: Vec<u32>,
}

impl DraftCache {
    pub fn new(draft: &LoadedModel) -> Self {
        Self {
            cache: draft.model.new_cache(),
            guessed_after: 0,
            guesses_read: Vec::new(),
        }
    }

    /// Positions the draft holds.
    fn held(&self) -> usize {
        let held = self.cache.iter().map(KvCache::offset).min().unwrap_or(0);
        usize::try_from(held).unwrap_or(0)
    }

    /// Forgets the guesses read last round that `history` does not go on with.
    fn settle(&mut self, history: &[u32]) -> Result<(), Exception> {
        let after = history.get(self.guessed_after..).unwrap_or_default();
        let confirmed = after
            .iter()
            .zip(&self.guesses_read)
            .take_while(|(token, guess)| token == guess)
            .count();
        let keep = self.guessed_after + confirmed;
        let forgotten = self.held().saturating_sub(keep) as i32;
        for layer in &mut self.cache {
            layer.forget_last(forgotten)?;
        }
        self.guesses_read.clear();
        Ok(())
    }
}

/// A decoding sequence's request for guesses: its tokens so far and how many to guess.
pub struct Wanted<'a> {
    pub history: &'a [u32],
    pub cache: &'a mut DraftCache,
    pub count: usize,
}

/// Guesses for every wanted sequence, in order: empty for one whose cache is still reading its
/// tokens (`read_budget` tokens per pass, shared). Each guessed token costs one draft pass over
/// all sequences that want it.
pub fn guess_all(
    draft: &LoadedModel,
    wanted: &mut [Wanted<'_>],
    read_budget: usize,
) -> Result<Vec<Vec<u32>>, Exception> {
    let mut budget = read_budget;
    let mut reading = Vec::with_capacity(wanted.len());
    for want in wanted.iter_mut() {
        want.cache.settle(want.history)?;
        let unread = want.history.len().saturating_sub(want.cache.held());
        // A sequence reads at least its newest token, or it would never catch up.
        let read = unread.min(budget.max(1));
        budget = budget.saturating_sub(read);
        reading.push((read, read == unread && unread > 0));
    }
    let mut guesses = vec![Vec::new(); wanted.len()];
    let mut segments: Vec<Segment<'_>> = wanted
        .iter_mut()
        .zip(&reading)
        .filter(|(_, (read, _))| *read > 0)
        .map(|(want, (read, _))| {
            let history: &[u32] = want.history;
            let from = want.cache.held();
            Segment {
                tokens: &history[from..from + read],
                cache: &mut want.cache.cache,
                embedded: Vec::new(),
            }
        })
        .collect();
    if segments.is_empty() {
        return Ok(guesses);
    }
    let hidden = draft.model.packed_hidden_states(&mut segments)?;
    drop(segments);
    // The last position of each sequence that read all it had: its first guess.
    let mut end = 0;
    let mut last_positions = Vec::new();
    let mut guessing = Vec::new();
    for (index, &(read, caught_up)) in reading.iter().enumerate() {
        end += read as i32;
        if caught_up && wanted[index].count > 0 {
            last_positions.push(end - 1);
            guessing.push(index);
        }
    }
    if guessing.is_empty() {
        hidden.eval()?;
        return Ok(guesses);
    }
    let mut next = greedy(draft, &hidden, &last_positions)?;
    for (&index, &token) in guessing.iter().zip(&next) {
        guesses[index].push(token);
        let cache = &mut *wanted[index].cache;
        cache.guessed_after = wanted[index].history.len();
        for layer in &mut cache.cache {
            layer.hold_each_state();
        }
    }
    // Each further guess reads the one before it.
    loop {
        guessing.retain(|&index| guesses[index].len() < wanted[index].count);
        if guessing.is_empty() {
            return Ok(guesses);
        }
        let mut segments = Vec::with_capacity(guessing.len());
        for (index, want) in wanted.iter_mut().enumerate() {
            if guessing.contains(&index) {
                let last = guesses[index].len() - 1;
                want.cache.guesses_read.push(guesses[index][last]);
                segments.push(Segment {
                    tokens: &want.cache.guesses_read[last..],
                    cache: &mut want.cache.cache,
                    embedded: Vec::new(),
                });
            }
        }
        let hidden = draft.model.packed_hidden_states(&mut segments)?;
        drop(segments);
        let positions: Vec<i32> = (0..guessing.len() as i32).collect();
        next = greedy(draft, &hidden, &positions)?;
        for (&index, &token) in guessing.iter().zip(&next) {
            guesses[index].push(token);
        }
    }
}

/// The draft's argmax at each of `positions` of `hidden`, reduced on the device.
fn greedy(draft: &LoadedModel, hidden: &Array, positions: &[i32]) -> Result<Vec<u32>, Exception> {
    let rows = hidden.take_axis(Array::from_slice(positions, &[positions.len() as i32]), 1)?;
    let tokens = argmax_axis(&draft.model.logits(&rows)?, -1, false)?;
    tokens.eval()?;
    Ok(tokens.as_slice::<u32>().to_vec())
}

/// Why `draft` cannot guess for `target`: a token id that spells a different token in one than
/// in the other (the draft's guesses are ids in the target's vocabulary).
pub fn incompatibility(target: &LoadedModel, draft: &LoadedModel) -> Option<String> {
    let shared = draft
        .model
        .config
        .vocab_size
        .min(target.model.config.vocab_size) as u32;
    (0..shared).find_map(|id| {
        let (ours, theirs) = (
            target.tokenizer.id_to_token(id),
            draft.tokenizer.id_to_token(id),
        );
        (ours != theirs).then(|| {
            format!(
                "token {id} is {} in the model and {} in the draft",
                spelled(ours),
                spelled(theirs)
            )
        })
    })
}

fn spelled(token: Option<String>) -> String {
    token.map_or_else(|| "nothing".to_owned(), |token| format!("{token:?}"))
}
