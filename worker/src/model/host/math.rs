//! The activations and softmax that MLX's CPU backend computes one scalar `exp` at a time,
//! rebuilt from vectorized multiplies and adds: `exp` by range reduction and a polynomial, the
//! same formula as the host's (`crate::fast_exp`), written as an MLX graph.
//!
//! MLX's CPU backend evaluates `exp`, `sigmoid`, `erf` and `softmax` one scalar at a time: about
//! 25 ns an element on this project's x86 machines, against 0.3 ns for a multiply. That made the
//! SwiGLU activation and the attention softmax a fifth of a prefill. The polynomial takes a dozen
//! vectorized ops instead, about 3x faster, with a relative error of 1.2e-7 (one f32 ulp).
//! `model/kernels.rs` decides where these pay.

use mlx_rs::Array;
use mlx_rs::error::Exception;
use mlx_rs::ops;

use crate::fast_exp::{LN2_HI, LN2_LO, TAYLOR};

/// `e^x` for f32 `x`, the formula of [`crate::fast_exp::exp_nonpositive`] for every sign:
/// `2^n · e^r` with `n = round(x / ln 2)`, `|r| ≤ ln 2 / 2`, `e^r` a degree-6 Taylor polynomial
/// and `2^n` written straight into a float's exponent bits. Inputs are clamped to `±126·ln 2`
/// (about ±87.3), so the result stays a normal float: below the range it is 1.2e-38 instead of 0,
/// above it 8.5e37 instead of infinity.
fn polynomial_exp(x: &Array) -> Result<Array, Exception> {
    let bound = 126.0 * std::f32::consts::LN_2;
    let x = ops::clip(x, (Array::from_f32(-bound), Array::from_f32(bound)))?;
    let whole = ops::multiply(&x, Array::from_f32(std::f32::consts::LOG2_E))?.round(None)?;
    let r = ops::subtract(
        &ops::subtract(&x, &ops::multiply(&whole, Array::from_f32(LN2_HI))?)?,
        &ops::multiply(&whole, Array::from_f32(LN2_LO))?,
    )?;
    let mut power = Array::from_f32(TAYLOR[6]);
    for &coefficient in TAYLOR[..6].iter().rev() {
        power = ops::add(&ops::multiply(&power, &r)?, Array::from_f32(coefficient))?;
    }
    // (n + 127) << 23 is the f32 whose value is 2^n; the product is exact in f32.
    let exponent_bits = ops::multiply(
        &ops::add(&whole, Array::from_f32(127.0))?,
        Array::from_f32(8_388_608.0),
    )?
    .as_type::<i32>()?
    .view::<f32>()?;
    ops::multiply(&power, &exponent_bits)
}

/// `x · sigmoid(x)`, SwiGLU's gate activation, as `x / (1 + e^-x)`.
pub fn silu(x: &Array) -> Result<Array, Exception> {
    let exp_negated = polynomial_exp(&ops::negative(x)?)?;
    ops::divide(x, &ops::add(&exp_negated, Array::from_f32(1.0))?)
}

/// Attention of `queries` (`[1, heads, positions, head_dim]`) over `keys` and `values`
/// (`[1, kv_heads, cached, head_dim]`, the new positions last), causal when there are several
/// new positions. The same as MLX's `scaled_dot_product_attention`, which on the CPU backend
/// computes exactly these products and a scalar softmax.
/// Through the polynomial `exp`.
pub fn attention(
    queries: &Array,
    keys: &Array,
    values: &Array,
    scale: f32,
) -> Result<Array, Exception> {
    let new_positions = queries.dim(2);
    let (heads, head_dim) = (queries.dim(1), queries.dim(3));
    let (kv_heads, cached) = (keys.dim(1), keys.dim(2));
    let group = heads / kv_heads;
    // The heads that share a key head stack along the positions axis, so one matmul per key head
    // scores them all, as grouped-query attention shares keys.
    let grouped = ops::multiply(queries, Array::from_f32(scale))?.reshape(&[
        1,
        kv_heads,
        group * new_positions,
        head_dim,
    ])?;
    let mut scores = ops::matmul(&grouped, &keys.swap_axes(2, 3)?)?.reshape(&[
        1,
        kv_heads,
        group,
        new_positions,
        cached,
    ])?;
    if new_positions > 1 {
        scores = ops::add(&scores, &causal_mask(new_positions, cached)?)?;
    }
    let peak = scores.max_axis(-1, true)?;
    let weights = polynomial_exp(&ops::subtract(&scores, &peak)?)?;
    let weights = ops::multiply(&weights, &ops::reciprocal(&weights.sum_axis(-1, true)?)?)?;
    ops::matmul(
        &weights.reshape(&[1, kv_heads, group * new_positions, cached])?,
        values,
    )?
    .reshape(&[1, heads, new_positions, head_dim])
}

/// Attention of a padded batch (`[rows, heads, length, head_dim]` each) in which every position
/// sees every real key of its row: `key_mask` is `[rows, 1, 1, length]`, true for real keys. The
/// same as MLX's `scaled_dot_product_attention` with that mask.
pub fn padded_attention(
    queries: &Array,
    keys: &Array,
    values: &Array,
    scale: f32,
    key_mask: &Array,
) -> Result<Array, Exception> {
    let scores = ops::matmul(
        &ops::multiply(queries, Array::from_f32(scale))?,
        &keys.swap_axes(2, 3)?,
    )?;
    let masked = ops::select(key_mask, &scores, Array::from_f32(f32::NEG_INFINITY))?;
    ops::matmul(&polynomial_softmax(&masked)?, values)
}

/// GELU with the exact erf, as BERT's `gelu` is: `x/2 · (1 + erf(x/√2))`, erf by Abramowitz and
/// Stegun's 7.1.26 (absolute error below 1.5e-7) over the polynomial `exp`.
pub fn gelu(x: &Array) -> Result<Array, Exception> {
    let scaled = ops::multiply(x, Array::from_f32(std::f32::consts::FRAC_1_SQRT_2))?;
    let erf = polynomial_erf(&scaled)?;
    ops::multiply(
        &ops::multiply(x, Array::from_f32(0.5))?,
        &ops::add(&erf, Array::from_f32(1.0))?,
    )
}

/// `erf(x) = sign(x) · (1 - t·P(t) · e^(-x²))` with `t = 1 / (1 + p·|x|)`.
fn polynomial_erf(x: &Array) -> Result<Array, Exception> {
    const P: f32 = 0.327_591_1;
    const COEFFICIENTS: [f32; 5] = [
        0.254_829_6,
        -0.284_496_74,
        1.421_413_8,
        -1.453_152_1,
        1.061_405_4,
    ];
    let magnitude = ops::abs(x)?;
    let t = ops::reciprocal(&ops::add(
        &ops::multiply(&magnitude, Array::from_f32(P))?,
        Array::from_f32(1.0),
    )?)?;
    let mut series = Array::from_f32(COEFFICIENTS[4]);
    for &coefficient in COEFFICIENTS[..4].iter().rev() {
        series = ops::add(&ops::multiply(&series, &t)?, Array::from_f32(coefficient))?;
    }
    let gaussian = polynomial_exp(&ops::negative(&ops::square(&magnitude)?)?)?;
    let complement = ops::multiply(&ops::multiply(&series, &t)?, &gaussian)?;
    ops::multiply(
        &ops::sign(x)?,
        &ops::subtract(Array::from_f32(1.0), &complement)?,
    )
}

/// Softmax over the last axis, through the polynomial `exp`.
fn polynomial_softmax(scores: &Array) -> Result<Array, Exception> {
    let peak = scores.max_axis(-1, true)?;
    let weights = polynomial_exp(&ops::subtract(scores, &peak)?)?;
    ops::multiply(&weights, &ops::reciprocal(&weights.sum_axis(-1, true)?)?)
}

/// `[new_positions, cached]`: 0 where the `i`-th new position (at `cached - new_positions + i`)
/// may attend, -inf where a key lies in its future.
fn causal_mask(new_positions: i32, cached: i32) -> Result<Array, Exception> {
    let query_positions = ops::arange::<_, i32>(cached - new_positions, cached, None)?
        .reshape(&[new_positions, 1])?;
    let key_positions = ops::arange::<_, i32>(0, cached, None)?.reshape(&[1, cached])?;
    ops::select(
        &key_positions.le(&query_positions)?,
        Array::from_f32(0.0),
        Array::from_f32(f32::NEG_INFINITY),
    )
}

#[cfg(test)]
mod tests {
    use mlx_rs::fast::{self, ScaledDotProductAttentionMask};
    use mlx_rs::random;

    use super::*;

    /// Normal values from a fixed key: MLX's default key is seeded from the clock.
    fn seeded_normal(shape: &[i32], seed: u64) -> Array {
        let key = random::key(seed).unwrap();
        random::normal::<f32>(shape, None, None, Some(&key)).unwrap()
    }

    fn max_relative_difference(got: &Array, expected: &Array) -> f32 {
        let difference = ops::abs(ops::subtract(got, expected).unwrap()).unwrap();
        let relative = ops::divide(
            &difference,
            ops::maximum(ops::abs(expected).unwrap(), Array::from_f32(1e-30)).unwrap(),
        )
        .unwrap();
        relative.max(None).unwrap().item_exact::<f32>()
    }

    fn max_difference(got: &Array, expected: &Array) -> f32 {
        ops::abs(ops::subtract(got, expected).unwrap())
            .unwrap()
            .max(None)
            .unwrap()
            .item_exact::<f32>()
    }

    #[test]
    fn polynomial_exp_is_exp_to_a_few_ulps_across_the_range() {
        // Against f64: MLX's own f32 `exp` reduces by x·log2(e) and is off by up to 4e-6 here.
        let steps: Vec<f32> = (0..=100_000)
            .map(|i| -87.0 + 174.0 * i as f32 / 1e5)
            .collect();
        let x = Array::from_slice(&steps, &[100_001]);
        let exact: Vec<f32> = steps.iter().map(|&x| f64::from(x).exp() as f32).collect();
        let exact = Array::from_slice(&exact, &[100_001]);
        let error = max_relative_difference(&polynomial_exp(&x).unwrap(), &exact);
        assert!(error < 3e-7, "relative error {error}");
    }

    #[test]
    fn the_host_polynomial_exp_is_the_mlx_one() {
        let mut steps: Vec<f32> = (0..=100_000).map(|i| -87.0 * i as f32 / 1e5).collect();
        let expected = polynomial_exp(&Array::from_slice(&steps, &[steps.len() as i32])).unwrap();
        for step in &mut steps {
            *step = crate::fast_exp::exp_nonpositive(*step);
        }
        let error =
            max_relative_difference(&Array::from_slice(&steps, &[steps.len() as i32]), &expected);
        assert!(error < 2.5e-7, "relative difference {error}");
    }

    #[test]
    fn polynomial_exp_stays_finite_and_ordered_outside_the_range() {
        let x = Array::from_slice(&[f32::NEG_INFINITY, -1000.0, 1000.0], &[3]);
        let values: Vec<f32> = polynomial_exp(&x).unwrap().as_slice().to_vec();
        assert!(values[0] < 1e-37 && values[1] < 1e-37, "{values:?}");
        assert!(values[2] > 1e37 && values[2].is_finite(), "{values:?}");
    }

    #[test]
    fn silu_matches_x_times_sigmoid() {
        for (rows, seed) in [(1, 1), (3, 2), (64, 3)] {
            let x =
                ops::multiply(seeded_normal(&[rows, 300], seed), Array::from_f32(20.0)).unwrap();
            let expected = ops::multiply(&x, ops::sigmoid(&x).unwrap()).unwrap();
            let difference = max_difference(&silu(&x).unwrap(), &expected);
            assert!(
                difference < 1e-5,
                "{rows} rows: max difference {difference}"
            );
        }
    }

    #[test]
    fn gelu_matches_the_exact_erf_gelu() {
        let x = ops::multiply(seeded_normal(&[64, 300], 4), Array::from_f32(4.0)).unwrap();
        let erf =
            ops::erf(ops::multiply(&x, Array::from_f32(std::f32::consts::FRAC_1_SQRT_2)).unwrap())
                .unwrap();
        let expected = ops::multiply(
            ops::multiply(&x, Array::from_f32(0.5)).unwrap(),
            ops::add(&erf, Array::from_f32(1.0)).unwrap(),
        )
        .unwrap();
        let difference = max_difference(&gelu(&x).unwrap(), &expected);
        assert!(difference < 2e-6, "max difference {difference}");
    }

    #[test]
    fn padded_attention_matches_mlx_with_the_same_key_mask() {
        let (rows, heads, length, head_dim) = (3, 4, 40, 16);
        let shape = [rows, heads, length, head_dim];
        let queries = seeded_normal(&shape, 5);
        let keys = seeded_normal(&shape, 6);
        let values = seeded_normal(&shape, 7);
        let real: Vec<bool> = [40, 7, 23]
            .iter()
            .flat_map(|&real| (0..length).map(move |position| position < real))
            .collect();
        let key_mask = Array::from_slice(&real, &[rows, 1, 1, length]);
        let expected = fast::scaled_dot_product_attention(
            &queries,
            &keys,
            &values,
            0.25,
            ScaledDotProductAttentionMask::Array(&key_mask),
            None,
        )
        .unwrap();
        let got = padded_attention(&queries, &keys, &values, 0.25, &key_mask).unwrap();
        let difference = max_difference(&got, &expected);
        assert!(difference < 1e-5, "max difference {difference}");
    }

    #[test]
    fn attention_matches_mlx_for_prefill_chunks_and_single_positions() {
        for (new_positions, cached) in [(1, 1), (1, 37), (1, 600), (5, 5), (16, 40), (33, 33)] {
            let seed = (new_positions * 1000 + cached) as u64;
            let queries = seeded_normal(&[1, 8, new_positions, 16], seed);
            let keys = seeded_normal(&[1, 2, cached, 16], seed + 1);
            let values = seeded_normal(&[1, 2, cached, 16], seed + 2);
            let mask = (new_positions > 1).then_some(ScaledDotProductAttentionMask::Causal);
            let expected =
                fast::scaled_dot_product_attention(&queries, &keys, &values, 0.25, mask, None)
                    .unwrap();
            let got = attention(&queries, &keys, &values, 0.25).unwrap();
            assert_eq!(got.shape(), expected.shape());
            let difference = max_difference(&got, &expected);
            assert!(
                difference < 1e-5,
                "{new_positions} new of {cached}: max difference {difference}"
            );
        }
    }
}
