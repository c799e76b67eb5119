//! Turning one step's logits into the next token.
//!
//! The engine thread copies each step's logits (one f32 per vocabulary entry) to the host and
//! decides here, in plain Rust, so sampling is testable without MLX and costs no extra graph
//! evaluations. The pipeline: penalties (repetition, presence, frequency); then argmax when `temperature == 0`; otherwise
//! temperature, top-k, top-p, min-p, and a draw from what is left, renormalized. Applying the
//! filters after temperature is Hugging Face's order (mlx-lm filters the unscaled distribution
//! and applies temperature only in the final draw); the two differ only when temperature != 1
//! is combined with top-p or min-p.
//!
//! Vocabularies reach 150k entries, so the per-token work is a few linear passes over one dense
//! buffer, written so the compiler can vectorize them: the exponentials are a polynomial
//! (`../fast_exp.rs`), each filter finds a threshold weight (`thresholds.rs`: a
//! `select_nth_unstable` for top-k, a sort of only the heaviest prefix for top-p) and zeroes
//! what falls below it, and the draw skips whole chunks by their sums. A consequence of
//! filtering by threshold: tokens tied with the last one kept are kept too, as in Hugging Face's
//! top-k. Tokens more than 87 nats (after temperature) below the best weigh 0 and are never
//! drawn.

mod logprobs;
mod rng;
mod thresholds;

use crate::fast_exp::exp_nonpositive;
pub use logprobs::{TokenLogprobs, logprobs};
use rng::Rng;
use thresholds::{drop_below, kth_largest, nucleus_threshold, sum};

/// One request's sampling settings, in OpenAI's vocabulary plus the usual extensions.
///
/// The default is OpenAI's (temperature 1, everything else off), so that a request which omits
/// a field samples as it would against OpenAI; greedy decoding is `temperature: 0.0`. A model's
/// own defaults are layered on top by the supervisor, before the request gets here.
#[derive(Debug, Clone, PartialEq)]
pub struct SamplingParams {
    /// 0 means greedy (argmax); otherwise logits are divided by it.
    pub temperature: f32,
    /// Nucleus sampling: keep the smallest set of most likely tokens whose mass reaches this.
    /// 1 is off; 0 keeps only the most likely token.
    pub top_p: f32,
    /// Keep only the k most likely tokens; 0 is off.
    pub top_k: usize,
    /// Drop tokens less likely than `min_p` times the most likely one; 0 is off.
    pub min_p: f32,
    /// Divides positive logits (multiplies negative ones) of recently seen tokens; 1 is off.
    pub repetition_penalty: f32,
    /// Subtracted once from the logit of each recently seen token; 0 is off.
    pub presence_penalty: f32,
    /// Subtracted from a recently seen token's logit once per occurrence; 0 is off.
    pub frequency_penalty: f32,
    /// How many of the most recent tokens of the history the penalties look at.
    pub repetition_context: usize,
    /// Makes the draws reproducible; `None` seeds from the clock and process id.
    pub seed: Option<u64>,
}

impl Default for SamplingParams {
    fn default() -> Self {
        Self {
            temperature: 1.0,
            top_p: 1.0,
            top_k: 0,
            min_p: 0.0,
            repetition_penalty: 1.0,
            presence_penalty: 0.0,
            frequency_penalty: 0.0,
            repetition_context: 64,
            seed: None,
        }
    }
}

/// A setting outside its meaningful range: the request's fault.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum InvalidParams {
    #[error("temperature must be a finite number >= 0, got {0}")]
    Temperature(f32),
    #[error("top_p must be between 0 and 1, got {0}")]
    TopP(f32),
    #[error("min_p must be between 0 and 1, got {0}")]
    MinP(f32),
    #[error("repetition_penalty must be a finite number > 0, got {0}")]
    RepetitionPenalty(f32),
    #[error("presence_penalty must be between -2 and 2, got {0}")]
    PresencePenalty(f32),
    #[error("frequency_penalty must be between -2 and 2, got {0}")]
    FrequencyPenalty(f32),
}

/// Logits that no token can be drawn from: the model's (or the engine's) fault.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum SampleError {
    #[error("the model produced an empty logits vector")]
    EmptyLogits,
    #[error("none of the {vocab} logits is a number above -inf")]
    NoCandidate { vocab: usize },
}

/// Samples one token per call for one request, reusing its buffers between calls.
#[derive(Debug)]
pub struct Sampler {
    params: SamplingParams,
    rng: Rng,
    /// The step's logits, sanitized and penalized, then turned into weights in place; a copy,
    /// so the caller's stay raw for [`logprobs`].
    weights: Vec<f32>,
    /// Room for the selections that find the top-k and top-p thresholds.
    scratch: Vec<f32>,
    /// The penalized window of the history, sorted so that each token's occurrences are a run.
    recent: Vec<u32>,
}

/// Weights per chunk when drawing: large enough to amortize the per-chunk sum, small enough
/// that the final walk is short.
const DRAW_CHUNK: usize = 256;

impl Sampler {
    pub fn new(params: SamplingParams) -> Result<Self, InvalidParams> {
        validate(&params)?;
        let rng = params.seed.map_or_else(Rng::from_entropy, Rng::from_seed);
        Ok(Self {
            params,
            rng,
            weights: Vec::new(),
            scratch: Vec::new(),
            recent: Vec::new(),
        })
    }

    /// Picks the next token from one step's `logits`. `history` is the sequence so far (prompt
    /// and generated tokens, as mlx-lm passes it to its logits processors); only its last
    /// `repetition_context` tokens are penalized. NaN logits count as -inf.
    pub fn sample(&mut self, logits: &[f32], history: &[u32]) -> Result<u32, SampleError> {
        if logits.is_empty() {
            return Err(SampleError::EmptyLogits);
        }
        self.weights.clear();
        self.weights.extend(logits.iter().map(|&x| sanitize(x)));
        self.apply_penalties(history);
        let best = argmax(&self.weights).ok_or(SampleError::NoCandidate {
            vocab: logits.len(),
        })?;
        if self.params.temperature == 0.0 {
            return Ok(best);
        }
        self.weigh(best);
        self.filter();
        Ok(self.draw())
    }

    /// Top-k, then top-p over what top-k left, then min-p: each zeroes the weights below its
    /// threshold.
    fn filter(&mut self) {
        let p = &self.params;
        let top_k = p.top_k > 0 && p.top_k < self.weights.len();
        if top_k {
            let threshold = kth_largest(&self.weights, p.top_k, &mut self.scratch);
            drop_below(&mut self.weights, threshold);
        }
        if p.top_p < 1.0 {
            // After top-k the scratch already holds the survivors: no need to search them all.
            if !top_k {
                self.scratch.clear();
                self.scratch.extend_from_slice(&self.weights);
            }
            let total = sum(&self.weights);
            let threshold = nucleus_threshold(&mut self.scratch, total, p.top_p);
            drop_below(&mut self.weights, threshold);
        }
        if p.min_p > 0.0 {
            // The best token's weight is exp(0) = 1, and no filter removes it.
            drop_below(&mut self.weights, p.min_p);
        }
    }

    /// The repetition penalty scales a seen token's logit once; presence and frequency
    /// penalties (mlx-lm's logits processors, OpenAI's semantics) subtract once, and once per
    /// occurrence.
    fn apply_penalties(&mut self, history: &[u32]) {
        let p = &self.params;
        let (repetition, presence, frequency) = (
            p.repetition_penalty,
            p.presence_penalty,
            p.frequency_penalty,
        );
        if repetition == 1.0 && presence == 0.0 && frequency == 0.0 {
            return;
        }
        let start = history.len().saturating_sub(p.repetition_context);
        self.recent.clear();
        self.recent.extend_from_slice(&history[start..]);
        self.recent.sort_unstable();
        for run in self.recent.chunk_by(|a, b| a == b) {
            // Ids past the vocabulary (a padded embedding, a caller's mistake) have no logit.
            if let Some(x) = self.weights.get_mut(run[0] as usize) {
                let scaled = if *x < 0.0 {
                    *x * repetition
                } else {
                    *x / repetition
                };
                *x = sanitize(scaled - presence - frequency * run.len() as f32);
            }
        }
    }

    /// Turns each logit into `exp((logit - max) / temperature)`: the best token weighs 1, and
    /// impossible (-inf) or hopeless ones 0.
    fn weigh(&mut self, best: u32) {
        let max = self.weights[best as usize];
        let temperature = self.params.temperature;
        // Division rather than a multiplication by 1 / temperature, which overflows to inf for
        // a tiny temperature and would turn the best token's 0 into NaN.
        for x in &mut self.weights {
            *x = exp_nonpositive((*x - max) / temperature);
        }
    }

    fn draw(&mut self) -> u32 {
        let target = self.rng.next_f64() * sum(&self.weights);
        // Skip whole chunks by their sum, then walk the one the target falls in: a per-token
        // running sum would be one long serial chain of additions.
        let mut before = 0.0;
        for (index, chunk) in self.weights.chunks(DRAW_CHUNK).enumerate() {
            let chunk_sum = sum(chunk);
            if target < before + chunk_sum {
                let mut last_possible = 0;
                for (offset, &w) in chunk.iter().enumerate() {
                    if w > 0.0 {
                        last_possible = offset;
                    }
                    before += f64::from(w);
                    if target < before {
                        return (index * DRAW_CHUNK + offset) as u32;
                    }
                }
                // Rounding put the target past this chunk's own running sum.
                return (index * DRAW_CHUNK + last_possible) as u32;
            }
            before += chunk_sum;
        }
        // Rounding put the target past the total: the last token that had any weight.
        self.weights.iter().rposition(|&w| w > 0.0).unwrap_or(0) as u32
    }
}

fn validate(p: &SamplingParams) -> Result<(), InvalidParams> {
    if !(p.temperature.is_finite() && p.temperature >= 0.0) {
        return Err(InvalidParams::Temperature(p.temperature));
    }
    if !(0.0..=1.0).contains(&p.top_p) {
        return Err(InvalidParams::TopP(p.top_p));
    }
    if !(0.0..=1.0).contains(&p.min_p) {
        return Err(InvalidParams::MinP(p.min_p));
    }
    if !(p.repetition_penalty.is_finite() && p.repetition_penalty > 0.0) {
        return Err(InvalidParams::RepetitionPenalty(p.repetition_penalty));
    }
    if !(-2.0..=2.0).contains(&p.presence_penalty) {
        return Err(InvalidParams::PresencePenalty(p.presence_penalty));
    }
    if !(-2.0..=2.0).contains(&p.frequency_penalty) {
        return Err(InvalidParams::FrequencyPenalty(p.frequency_penalty));
    }
    Ok(())
}

/// NaN becomes -inf (never chosen) and +inf becomes the largest finite value, so that
/// `logit - max` is never `inf - inf`.
fn sanitize(x: f32) -> f32 {
    if x.is_nan() {
        f32::NEG_INFINITY
    } else {
        x.min(f32::MAX)
    }
}

/// The first index of the largest value, or `None` when every value is -inf.
fn argmax(logits: &[f32]) -> Option<u32> {
    let (id, &best) = logits
        .iter()
        .enumerate()
        .reduce(|best, cur| if cur.1 > best.1 { cur } else { best })?;
    (best > f32::NEG_INFINITY).then_some(id as u32)
}

#[cfg(test)]
mod tests;
