//! The sampler's random number generator: xoshiro256** seeded through splitmix64.
//!
//! Hand-written rather than taken from `rand` because the sampler needs exactly one thing, a
//! uniform draw per token that is reproducible for a given `seed` across platforms and crate
//! upgrades; twenty lines keep that guarantee in our hands.

use std::time::{SystemTime, UNIX_EPOCH};

/// xoshiro256** (Blackman and Vigna): fast, 256 bits of state, passes BigCrush.
#[derive(Debug, Clone)]
pub struct Rng {
    state: [u64; 4],
}

impl Rng {
    /// A generator whose sequence depends only on `seed`.
    pub fn from_seed(seed: u64) -> Self {
        // splitmix64 spreads a small or patterned seed (0, 1, 2, ...) over the whole state, and
        // never yields the all-zero state xoshiro cannot leave.
        let mut sm = seed;
        let state = std::array::from_fn(|_| splitmix64(&mut sm));
        Self { state }
    }

    /// A generator seeded from the clock and the process id, for requests without a seed.
    pub fn from_entropy() -> Self {
        // A clock before 1970 is not worth failing a request over: it only weakens the seed.
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
        Self::from_seed(nanos ^ (u64::from(std::process::id()) << 32))
    }

    pub fn next_u64(&mut self) -> u64 {
        let s = &mut self.state;
        let result = s[1].wrapping_mul(5).rotate_left(7).wrapping_mul(9);
        let t = s[1] << 17;
        s[2] ^= s[0];
        s[3] ^= s[1];
        s[1] ^= s[2];
        s[0] ^= s[3];
        s[2] ^= t;
        s[3] = s[3].rotate_left(45);
        result
    }

    /// Uniform in [0, 1), with the 53 bits an f64 mantissa holds.
    pub fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }
}

fn splitmix64(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_seed_gives_same_sequence() {
        let mut a = Rng::from_seed(42);
        let mut b = Rng::from_seed(42);
        for _ in 0..100 {
            assert_eq!(a.next_u64(), b.next_u64());
        }
    }

    #[test]
    fn different_seeds_give_different_sequences() {
        let a: Vec<u64> = (0..4)
            .scan(Rng::from_seed(1), |r, _| Some(r.next_u64()))
            .collect();
        let b: Vec<u64> = (0..4)
            .scan(Rng::from_seed(2), |r, _| Some(r.next_u64()))
            .collect();
        assert_ne!(a, b);
    }

    #[test]
    fn uniform_draws_stay_in_unit_interval_and_spread() {
        let mut rng = Rng::from_seed(7);
        let draws: Vec<f64> = (0..10_000).map(|_| rng.next_f64()).collect();
        assert!(draws.iter().all(|&x| (0.0..1.0).contains(&x)));
        let mean = draws.iter().sum::<f64>() / draws.len() as f64;
        assert!((mean - 0.5).abs() < 0.02, "mean {mean}");
    }
}
