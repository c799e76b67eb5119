//! The filters of the sampler as thresholds on a dense buffer of weights.
//!
//! Each filter reduces to "keep the tokens weighing at least w": top-k's w is the k-th largest
//! weight, top-p's the lightest weight of the nucleus, min-p's a fraction of the best. Finding
//! w needs a selection over a scratch copy; applying it is a branch-free pass the compiler
//! vectorizes. Nothing here sorts the whole vocabulary unless the distribution is so flat that
//! the nucleus really is most of it.

use std::cmp::Ordering;

/// How many of the heaviest weights top-p first assumes hold the nucleus. Peaked distributions
/// rarely need more; flat ones grow it fourfold per round.
const NUCLEUS_GUESS: usize = 64;

/// The k-th largest weight (1 <= k <= weights.len()), leaving the k largest in `scratch`.
pub fn kth_largest(weights: &[f32], k: usize, scratch: &mut Vec<f32>) -> f32 {
    scratch.clear();
    scratch.extend_from_slice(weights);
    scratch.select_nth_unstable_by(k - 1, heaviest_first);
    scratch.truncate(k);
    scratch[k - 1]
}

/// The lightest weight of the smallest set of heaviest tokens whose mass reaches `top_p` of
/// `total`; the heaviest alone when `top_p` is 0. `candidates` holds every weight the nucleus
/// may need (all of them, or the survivors of top-k), in any order; it is reordered.
pub fn nucleus_threshold(candidates: &mut [f32], total: f64, top_p: f32) -> f32 {
    let target = f64::from(top_p) * total;
    let all = candidates.len();
    let mut k = NUCLEUS_GUESS.min(all);
    loop {
        if k < all {
            candidates.select_nth_unstable_by(k - 1, heaviest_first);
        }
        if k == all || sum(&candidates[..k]) >= target {
            break;
        }
        k = (k * 4).min(all);
    }
    let head = &mut candidates[..k];
    head.sort_unstable_by(heaviest_first);
    let mut cumulative = 0.0;
    for &w in head.iter() {
        cumulative += f64::from(w);
        if cumulative >= target {
            return w;
        }
    }
    // Rounding left the running sum a hair short of `target`: keep the whole head.
    head.last().copied().unwrap_or(0.0)
}

/// Zeroes every weight below `threshold`.
pub fn drop_below(weights: &mut [f32], threshold: f32) {
    for w in weights {
        *w = if *w >= threshold { *w } else { 0.0 };
    }
}

/// The sum, in f64 over eight independent lanes so that the additions pipeline (and vectorize)
/// instead of each waiting for the previous one.
pub fn sum(weights: &[f32]) -> f64 {
    let mut lanes = [0.0f64; 8];
    let mut chunks = weights.chunks_exact(8);
    for chunk in &mut chunks {
        for (lane, &w) in lanes.iter_mut().zip(chunk) {
            *lane += f64::from(w);
        }
    }
    let rest: f64 = chunks.remainder().iter().map(|&w| f64::from(w)).sum();
    lanes.iter().sum::<f64>() + rest
}

fn heaviest_first(a: &f32, b: &f32) -> Ordering {
    b.total_cmp(a)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nucleus(weights: &[f32], top_p: f32) -> f32 {
        let mut candidates = weights.to_vec();
        nucleus_threshold(&mut candidates, sum(weights), top_p)
    }

    #[test]
    fn kth_largest_finds_the_kth_weight_and_keeps_the_k_largest() {
        let weights = [0.1, 0.7, 0.3, 0.9, 0.5];
        let mut scratch = Vec::new();
        assert_eq!(kth_largest(&weights, 1, &mut scratch), 0.9);
        assert_eq!(kth_largest(&weights, 5, &mut scratch), 0.1);
        assert_eq!(kth_largest(&weights, 3, &mut scratch), 0.5);
        scratch.sort_unstable_by(heaviest_first);
        assert_eq!(scratch, [0.9, 0.7, 0.5]);
    }

    #[test]
    fn nucleus_threshold_is_the_lightest_weight_needed() {
        let weights = [0.15, 0.5, 0.05, 0.3];
        assert_eq!(nucleus(&weights, 0.75), 0.3);
        assert_eq!(nucleus(&weights, 0.4), 0.5);
        assert_eq!(nucleus(&weights, 0.0), 0.5);
        assert_eq!(nucleus(&weights, 0.99), 0.05);
    }

    #[test]
    fn nucleus_threshold_grows_past_its_first_guess() {
        // 1000 equal weights and one heavy one holding a tenth of the mass.
        let mut weights = vec![1.0; 1000];
        weights.push(1000.0 / 9.0);
        assert_eq!(nucleus(&weights, 0.5), 1.0);
        assert_eq!(nucleus(&weights, 0.05), 1000.0 / 9.0);
    }

    #[test]
    fn nucleus_threshold_over_a_subset_keeps_all_of_it_when_short() {
        // Top-k survivors whose tie partner was left out of the candidates.
        let mut candidates = vec![0.5, 0.25];
        assert_eq!(nucleus_threshold(&mut candidates, 1.0, 0.9), 0.25);
    }

    #[test]
    fn drop_below_zeroes_only_lighter_weights() {
        let mut weights = [0.2, 0.5, 0.1, 0.5];
        drop_below(&mut weights, 0.5);
        assert_eq!(weights, [0.0, 0.5, 0.0, 0.5]);
    }

    #[test]
    fn sum_adds_every_weight() {
        let weights: Vec<f32> = (1..=1001).map(|i| i as f32).collect();
        assert_eq!(sum(&weights), 501_501.0);
        assert_eq!(sum(&[]), 0.0);
    }
}
