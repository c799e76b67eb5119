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
/// (`[1, kv_heads, cached, head_dim]`), each position seeing the keys `visible` marks
/// (`[positions, cached]`, all when `None`). The same as MLX's `scaled_dot_product_attention`
/// with that mask, which on the CPU backend computes exactly these products and a scalar
/// softmax; here through the polynomial `exp`.
pub fn attention(
    queries: &Array,
    keys: &Array,
    values: &Array,
    scale: f32,
    visible: Option<&Array>,
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
    if let Some(visible) = visible {
        scores = ops::select(visible, &scores, Array::from_f32(f32::NEG_INFINITY))?;
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

#[cfg(test)]
mod tests;
