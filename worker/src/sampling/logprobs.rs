//! Log-probabilities for the OpenAI `logprobs` and `top_logprobs` fields.
//!
//! They are computed on the raw logits, before repetition penalty and temperature, because the
//! API reports what the model believes rather than what the sampler drew from. One pass finds the
//! normalizer; the top entries go through a small sorted buffer, since `top_logprobs` is at most
//! 20 and fully sorting a 150k vocabulary per token would be waste.

use super::sanitize;
use super::thresholds::sum;
use crate::fast_exp::exp_nonpositive;

/// The chosen token's log-probability and the `top` most likely tokens, most likely first.
#[derive(Debug, Clone, PartialEq)]
pub struct TokenLogprobs {
    /// `f32::NEG_INFINITY` when the token had no probability (or was out of range); the caller
    /// decides how to put that on the wire, since JSON has no infinity.
    pub chosen_logprob: f32,
    pub top: Vec<(u32, f32)>,
}

/// Log-softmax of `logits` at `chosen`, plus the `top` highest entries.
///
/// NaN logits count as impossible tokens, like in the sampler. Ties keep the lower token id first
/// so the answer does not depend on scan order.
pub fn logprobs(logits: &[f32], chosen: u32, top: usize) -> TokenLogprobs {
    let max = logits
        .iter()
        .map(|&x| sanitize(x))
        .fold(f32::NEG_INFINITY, f32::max);
    if max == f32::NEG_INFINITY {
        // Nothing has any probability (the sampler refuses such logits too); answering here
        // keeps the NaN of -inf - -inf out of the arithmetic below.
        return TokenLogprobs {
            chosen_logprob: f32::NEG_INFINITY,
            top: Vec::new(),
        };
    }
    // f64 from here on, so that a huge `max` and a tiny logit do not overflow `x - log_norm`.
    let log_norm = f64::from(max) + sum_of_exp(logits, max).ln();
    let logprob = |x: f32| (f64::from(sanitize(x)) - log_norm) as f32;

    let chosen_logprob = logits
        .get(chosen as usize)
        .map_or(f32::NEG_INFINITY, |&x| logprob(x));
    let top = top_entries(logits, top)
        .into_iter()
        .map(|(id, x)| (id, logprob(x)))
        .collect();
    TokenLogprobs {
        chosen_logprob,
        top,
    }
}

/// Sum of `exp(x - max)`, through a small stack buffer so that both the exponentials and the
/// sum run as vectorizable loops over slices.
fn sum_of_exp(logits: &[f32], max: f32) -> f64 {
    let mut buffer = [0.0f32; 256];
    logits
        .chunks(buffer.len())
        .map(|chunk| {
            let exps = &mut buffer[..chunk.len()];
            for (e, &x) in exps.iter_mut().zip(chunk) {
                *e = exp_nonpositive(sanitize(x) - max);
            }
            sum(exps)
        })
        .sum()
}

/// The `n` largest (sanitized) logits with their ids, largest first, lower id first among equals.
fn top_entries(logits: &[f32], n: usize) -> Vec<(u32, f32)> {
    let mut best: Vec<(u32, f32)> = Vec::with_capacity(n.min(logits.len()) + 1);
    if n == 0 {
        return best;
    }
    for (id, &x) in logits.iter().enumerate() {
        let x = sanitize(x);
        if best.len() == n && best.last().is_some_and(|&(_, worst)| x <= worst) {
            continue;
        }
        let at = best.partition_point(|&(_, y)| y >= x);
        best.insert(at, (id as u32, x));
        best.truncate(n);
    }
    best
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: f32, b: f32) -> bool {
        (a - b).abs() < 1e-5
    }

    #[test]
    fn logprobs_are_a_log_softmax() {
        let lp = logprobs(&[1.0, 2.0, 3.0], 2, 0);
        let norm = (1f32.exp() + 2f32.exp() + 3f32.exp()).ln();
        assert!(close(lp.chosen_logprob, 3.0 - norm));
        assert!(lp.top.is_empty());
    }

    #[test]
    fn top_logprobs_are_sorted_and_bounded() {
        let logits = [0.5, 3.0, -1.0, 2.0, 3.0];
        let lp = logprobs(&logits, 0, 3);
        let ids: Vec<u32> = lp.top.iter().map(|&(id, _)| id).collect();
        assert_eq!(ids, vec![1, 4, 3], "ties keep the lower id first");
        assert!(lp.top.windows(2).all(|w| w[0].1 >= w[1].1));
        let total: f32 = (0..logits.len())
            .map(|i| logprobs(&logits, i as u32, 0).chosen_logprob.exp())
            .sum();
        assert!(close(total, 1.0));
    }

    #[test]
    fn asking_for_more_than_the_vocab_returns_the_whole_vocab() {
        assert_eq!(logprobs(&[0.0, 1.0], 0, 10).top.len(), 2);
    }

    #[test]
    fn nan_logits_have_no_probability() {
        let lp = logprobs(&[f32::NAN, 0.0], 0, 2);
        assert_eq!(lp.chosen_logprob, f32::NEG_INFINITY);
        assert_eq!(lp.top[0], (1, 0.0));
    }

    #[test]
    fn degenerate_inputs_do_not_panic() {
        let empty = logprobs(&[], 0, 5);
        assert_eq!(empty.chosen_logprob, f32::NEG_INFINITY);
        assert!(empty.top.is_empty());
        let all_nan = logprobs(&[f32::NAN; 3], 1, 2);
        assert_eq!(all_nan.chosen_logprob, f32::NEG_INFINITY);
        assert!(all_nan.top.is_empty());
        assert_eq!(
            logprobs(&[1.0], 7, 0).chosen_logprob,
            f32::NEG_INFINITY,
            "an out-of-range id has no probability"
        );
        let inf = logprobs(&[f32::INFINITY, 0.0], 0, 0);
        assert!(close(inf.chosen_logprob, 0.0));
    }
}
