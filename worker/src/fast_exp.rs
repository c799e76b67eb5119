//! `e^x` for the host's hot loops: the sampler's softmax over 150k logits, and the host
//! attention's over each head's scores (`model/host/`), whose MLX-graph form uses the same range
//! reduction and polynomial.
//!
//! `f32::exp` is an opaque libm call per element. This version is plain arithmetic on floats and their bit
//! patterns, with no branches or conversions the compiler cannot vectorize, which makes it
//! several times faster; its relative error stays below 3e-7, a couple of f32 ulps, far below
//! anything sampling can observe.

/// 1.5 * 2^23: adding it rounds an f32 of magnitude below 2^22 to an integer, and leaves that
/// integer in the low mantissa bits.
const SHIFTER: f32 = 12_582_912.0;
/// ln 2 split in two, so that `x - n * ln 2` stays exact for the `n` that occur (Cody and Waite's
/// reduction: reducing by `x * log2(e)` instead loses up to 4e-6 near |x| = 87).
pub(crate) const LN2_HI: f32 = 0.693_145_75;
pub(crate) const LN2_LO: f32 = 1.428_606_8e-6;
/// 1/k!: the degree 6 Taylor series of e^r, whose first omitted term is below 2e-7 for
/// |r| <= ln 2 / 2.
pub(crate) const TAYLOR: [f32; 7] = [
    1.0,
    1.0,
    1.0 / 2.0,
    1.0 / 6.0,
    1.0 / 24.0,
    1.0 / 120.0,
    1.0 / 720.0,
];
/// Below this, e^x is not a normal f32; callers only care that such weights are zero.
const UNDERFLOW: f32 = -87.0;

/// e^x for x <= 0, and exactly 0 below -87. Not meant for positive x.
///
/// `e^x = 2^n · e^r` with `n = round(x / ln 2)` and `|r| <= ln 2 / 2`; `e^r` from [`TAYLOR`], `2^n`
/// written straight into a float's exponent bits.
#[inline(always)]
pub fn exp_nonpositive(x: f32) -> f32 {
    let t = x.max(UNDERFLOW);
    let shifted = t * std::f32::consts::LOG2_E + SHIFTER;
    let n = shifted - SHIFTER;
    let r = t - n * LN2_HI - n * LN2_LO;
    let mut power = TAYLOR[6];
    for &coefficient in TAYLOR[..6].iter().rev() {
        power = power * r + coefficient;
    }
    // 2^n built directly as an exponent field: n + 127, with n read from `shifted`'s bits.
    let n_bits = shifted.to_bits().wrapping_sub(SHIFTER.to_bits());
    let two_to_n = f32::from_bits(n_bits.wrapping_add(127) << 23);
    if x < UNDERFLOW { 0.0 } else { power * two_to_n }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_the_exact_exponential_to_a_few_ulps() {
        let mut worst = 0.0f64;
        for i in 0..1_000_000 {
            let x = -(i as f32) * 87.0 / 1_000_000.0;
            let exact = f64::from(x).exp();
            let got = f64::from(exp_nonpositive(x));
            worst = worst.max(((got - exact) / exact).abs());
        }
        assert!(worst < 3e-7, "worst relative error {worst:e}");
    }

    #[test]
    fn edges_are_exact() {
        assert_eq!(exp_nonpositive(0.0), 1.0);
        assert_eq!(exp_nonpositive(-0.0), 1.0);
        assert_eq!(exp_nonpositive(-88.0), 0.0);
        assert_eq!(exp_nonpositive(f32::NEG_INFINITY), 0.0);
        assert_eq!(exp_nonpositive(-f32::MAX), 0.0);
    }
}
