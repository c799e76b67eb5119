//! Rotary position embeddings, as mlx-lm's `initialize_rope` builds them: over the first `dims`
//! channels of each head (the rest pass through), with the frequencies and the magnitude scale
//! of each scaling kind.
//!
//! Longrope with short factors rotates as transformers does, not as mlx-lm (long factors
//! always): a position before `original_max_position_embeddings` with the short factors, one at
//! or past it with the long ones. transformers picks the set by the longest position of each
//! forward call, and keys already cached keep the rotation they were cached with, so a sequence
//! that decodes across the boundary holds short-rotated keys before it and long-rotated ones
//! after it, as here. The choice is made per position rather than per call so that a sequence's
//! logits do not depend on how its prompt is chunked or batched, and a prefix-cache block
//! (rotated keys) restores into any sequence; it departs from transformers only on a prompt
//! longer than the original context, whose positions before it transformers rotates with the
//! long factors in one call (and its `generate` recomputes a cache that crosses the boundary
//! with the long ones).

use mlx_rs::error::Exception;

use crate::model::config::{ModelConfig, RopeScaling};
use crate::model::error::ModelError;
use crate::model::weights::Weights;

/// Per-frequency RoPE factors, as GGUF files of Llama 3.1 and later carry their scaling.
const ROPE_FACTORS: &str = "rope_freqs.weight";
use mlx_rs::ops::indexing::IndexOp;
use mlx_rs::ops::{self, select};
use mlx_rs::{Array, fast};

#[derive(Clone)]
pub struct Rope {
    dims: i32,
    traditional: bool,
    base: f32,
    scale: f32,
    /// Per-frequency wavelengths replacing `base` (llama3, YaRN, longrope scaling).
    freqs: Option<Array>,
    /// Multiplies the rotated channels of queries and keys before they rotate (YaRN's mscale,
    /// longrope's context scale); 1 leaves them.
    input_scale: f32,
    /// Longrope's short factors, for the positions before the original context.
    short: Option<ShortFactors>,
    /// Multi-section RoPE: which of an image token's three positions (time, row, column) each
    /// rotated pair turns by (see [`Rope::with_sections`]).
    sections: Option<Array>,
}

/// The wavelengths that rotate the positions before `until`; `freqs` rotate the rest.
#[derive(Clone)]
struct ShortFactors {
    freqs: Array,
    until: i32,
}

impl Rope {
    /// The rotation `config` describes over the whole head (`rope_theta`, `rope_scaling`), or
    /// the per-frequency factors a GGUF file carries instead.
    pub fn for_config(config: &ModelConfig, weights: &mut Weights) -> Result<Self, ModelError> {
        let rope = if weights.contains(ROPE_FACTORS) {
            let factors = weights.take_float(ROPE_FACTORS, &[config.head_dim / 2])?;
            Self::with_frequency_factors(
                config.head_dim,
                config.rope_theta,
                config.rope_traditional,
                &factors,
            )
        } else {
            Self::new(
                config.head_dim,
                config.rope_theta,
                config.rope_traditional,
                config.rope_scaling.clone(),
            )
        };
        rope.map_err(|source| weights.mlx_error("building rotary frequencies", source))
    }

    /// `config`'s rotation (`rope_theta`, `rope_scaling`) over the first `fraction` of each
    /// head, in adjacent pairs when `traditional` (GLM-4, MiniMax-M2).
    pub fn partial_for_config(
        config: &ModelConfig,
        weights: &Weights,
        fraction: f64,
        traditional: bool,
    ) -> Result<Self, ModelError> {
        let dims = (f64::from(config.head_dim) * fraction) as i32;
        Self::new(
            dims,
            config.rope_theta,
            traditional,
            config.rope_scaling.clone(),
        )
        .map_err(|source| weights.mlx_error("building rotary frequencies", source))
    }

    pub fn new(
        dims: i32,
        base: f32,
        mut traditional: bool,
        scaling: Option<RopeScaling>,
    ) -> Result<Self, Exception> {
        let mut input_scale = 1.0;
        let mut short = None;
        let (scale, freqs) = match scaling {
            None => (1.0, None),
            Some(RopeScaling::Linear { factor }) => (1.0 / factor, None),
            Some(RopeScaling::Llama3 {
                factor,
                low_freq_factor,
                high_freq_factor,
                original_max_position_embeddings,
            }) => (
                1.0,
                Some(llama3_freqs(
                    dims,
                    base,
                    factor,
                    low_freq_factor,
                    high_freq_factor,
                    original_max_position_embeddings,
                )?),
            ),
            Some(RopeScaling::Yarn {
                factor,
                original_max_position_embeddings,
                beta_fast,
                beta_slow,
                mscale,
                mscale_all_dim,
                truncate,
            }) => {
                input_scale =
                    (yarn_mscale(factor, mscale) / yarn_mscale(factor, mscale_all_dim)) as f32;
                let range = yarn_correction_range(
                    dims,
                    base,
                    original_max_position_embeddings,
                    beta_fast,
                    beta_slow,
                    truncate,
                );
                (1.0, Some(yarn_freqs(dims, base, factor, range)?))
            }
            Some(RopeScaling::LongRope {
                long_factor,
                short_factor,
                original_max_position_embeddings,
                max_position_embeddings,
            }) => {
                let (Some(original), Some(max)) =
                    (original_max_position_embeddings, max_position_embeddings)
                else {
                    return Err(Exception::from(
                        "longrope needs max_position_embeddings and original_max_position_embeddings",
                    ));
                };
                for factors in std::iter::once(&long_factor).chain(&short_factor) {
                    if factors.len() != dims as usize / 2 {
                        return Err(Exception::custom(format!(
                            "longrope has {} factors for {} rotated channel pairs",
                            factors.len(),
                            dims / 2
                        )));
                    }
                }
                // SuScaledRoPE: sqrt(1 + ln(growth) / ln(original)), in Python floats.
                let growth = max / original;
                if growth > 1.0 {
                    input_scale = (1.0 + growth.ln() / original.ln()).sqrt() as f32;
                }
                let wavelengths = |factors: &[f32]| {
                    let factors = Array::from_slice(factors, &[dims / 2]);
                    ops::multiply(&factors, &base_wavelengths(dims, base)?)
                };
                if let Some(factors) = &short_factor {
                    short = Some(ShortFactors {
                        freqs: wavelengths(factors)?,
                        until: original as i32,
                    });
                }
                // SuScaledRoPE rotates halves whatever the config says.
                traditional = false;
                (1.0, Some(wavelengths(&long_factor)?))
            }
        };
        Ok(Self {
            dims,
            traditional,
            base,
            scale,
            freqs,
            input_scale,
            short,
            sections: None,
        })
    }

    /// Llama 3 scaling as a GGUF stores it: one factor per frequency (`rope_freqs.weight`), by
    /// which llama.cpp divides each rotation speed, i.e. multiplies each wavelength.
    pub fn with_frequency_factors(
        dims: i32,
        base: f32,
        traditional: bool,
        factors: &Array,
    ) -> Result<Self, Exception> {
        let freqs = ops::multiply(&base_wavelengths(dims, base)?, factors)?;
        Ok(Self {
            dims,
            traditional,
            base,
            scale: 1.0,
            freqs: Some(freqs),
            input_scale: 1.0,
            short: None,
            sections: None,
        })
    }

    /// Gemma 4's proportional rotation (mlx-lm's `ProportionalRoPE`): all `dims` channels in
    /// halves, but only the first `rotated_dims / 2` pairs turn, at `factor · base^(2i/dims)`
    /// (exponents over the whole head); the other pairs' infinite wavelengths leave them still.
    pub fn proportional(
        dims: i32,
        rotated_dims: i32,
        base: f32,
        factor: f32,
    ) -> Result<Self, Exception> {
        let exponents = ops::divide(
            &ops::arange::<i32, f32>(0, rotated_dims, 2)?,
            Array::from_f32(dims as f32),
        )?;
        let turning = ops::multiply(
            Array::from_f32(factor),
            &ops::power(Array::from_f32(base), &exponents)?,
        )?;
        let still = Array::from_slice(
            &vec![f32::INFINITY; ((dims - rotated_dims) / 2) as usize],
            &[(dims - rotated_dims) / 2],
        );
        Ok(Self {
            dims,
            traditional: false,
            base,
            scale: 1.0,
            freqs: Some(ops::concatenate(&[turning, still], 0)?),
            input_scale: 1.0,
            short: None,
            sections: None,
        })
    }

    /// `x` is `[batch, heads, positions, head_dim]`; `offset` is the first position's index.
    pub fn apply(&self, x: &Array, offset: i32) -> Result<Array, Exception> {
        let x = self.scale_input(x)?;
        let Some(short) = &self.short else {
            return self.rotate(&x, offset, self.freqs.as_ref());
        };
        let positions = x.dim(-2);
        match (short.until - offset).clamp(0, positions) {
            0 => self.rotate(&x, offset, self.freqs.as_ref()),
            all if all == positions => self.rotate(&x, offset, Some(&short.freqs)),
            before => {
                let early = x.index((.., .., ..before, ..));
                let late = x.index((.., .., before.., ..));
                let early = self.rotate(&early, offset, Some(&short.freqs))?;
                let late = self.rotate(&late, offset + before, self.freqs.as_ref())?;
                ops::concatenate(&[early, late], -2)
            }
        }
    }

    /// As [`Rope::apply`] with one offset per batch row (`offsets` is `[batch]` int32), so the
    /// rows of a decode step, each one position at its own offset, rotate in one op.
    pub fn apply_rows(&self, x: &Array, offsets: &Array) -> Result<Array, Exception> {
        let x = self.scale_input(x)?;
        let rotate = |freqs: Option<&Array>| {
            let base = freqs.is_none().then_some(self.base);
            fast::rope_dynamic(
                &x,
                self.dims,
                self.traditional,
                base,
                self.scale,
                offsets,
                freqs,
            )
        };
        let long = rotate(self.freqs.as_ref())?;
        let Some(short) = &self.short else {
            return Ok(long);
        };
        let before = offsets
            .lt(Array::from_int(short.until))?
            .reshape(&[-1, 1, 1, 1])?;
        ops::select(&before, &rotate(Some(&short.freqs))?, &long)
    }

    /// `x` rotated from position `offset` by `freqs`, or by `base` without them (MLX takes one
    /// or the other, never both).
    fn rotate(&self, x: &Array, offset: i32, freqs: Option<&Array>) -> Result<Array, Exception> {
        let base = freqs.is_none().then_some(self.base);
        fast::rope(
            x,
            self.dims,
            self.traditional,
            base,
            self.scale,
            offset,
            freqs,
        )
    }

    /// `x` with its first `dims` channels times `input_scale`, in `x`'s dtype, as mlx-lm's
    /// `x.at[..., :dims].multiply(scale)` (the other channels times exactly 1).
    fn scale_input(&self, x: &Array) -> Result<Array, Exception> {
        if self.input_scale == 1.0 {
            return Ok(x.clone());
        }
        let width = x.dim(-1);
        let scales: Vec<f32> = (0..width)
            .map(|channel| {
                if channel < self.dims {
                    self.input_scale
                } else {
                    1.0
                }
            })
            .collect();
        let scales = Array::from_slice(&scales, &[width]).as_dtype(x.dtype())?;
        ops::multiply(x, &scales)
    }
}

/// Computed with MLX ops in mlx-lm's order, so the rounding matches the reference.
fn llama3_freqs(
    dims: i32,
    base: f32,
    factor: f32,
    low_freq_factor: f32,
    high_freq_factor: f32,
    old_context_len: f32,
) -> Result<Array, Exception> {
    let low_freq_wavelen = old_context_len / low_freq_factor;
    let high_freq_wavelen = old_context_len / high_freq_factor;
    let freqs = base_wavelengths(dims, base)?;
    let wavelens = ops::multiply(Array::from_f32(2.0 * std::f32::consts::PI), &freqs)?;
    let freqs = select(
        &wavelens.gt(Array::from_f32(low_freq_wavelen))?,
        &ops::multiply(&freqs, Array::from_f32(factor))?,
        &freqs,
    )?;
    let is_medium = ops::logical_and(
        &wavelens.gt(Array::from_f32(high_freq_wavelen))?,
        &wavelens.lt(Array::from_f32(low_freq_wavelen))?,
    )?;
    let smooth_factors = ops::divide(
        &ops::subtract(
            &ops::divide(Array::from_f32(old_context_len), &wavelens)?,
            Array::from_f32(low_freq_factor),
        )?,
        Array::from_f32(high_freq_factor - low_freq_factor),
    )?;
    let one_minus = ops::subtract(Array::from_f32(1.0), &smooth_factors)?;
    let denominator = ops::add(
        &ops::divide(&one_minus, Array::from_f32(factor))?,
        &smooth_factors,
    )?;
    let smooth_freqs = ops::divide(&freqs, &denominator)?;
    select(&is_medium, &smooth_freqs, &freqs)
}

/// YaRN's multiplier of a context grown `factor` times.
fn yarn_mscale(factor: f64, mscale: f64) -> f64 {
    if factor <= 1.0 {
        1.0
    } else {
        0.1 * mscale * factor.ln() + 1.0
    }
}

/// The rotated pairs `(low, high)` between which YaRN blends: those turning `beta_fast` and
/// `beta_slow` times over the original context.
fn yarn_correction_range(
    dims: i32,
    base: f32,
    original_max_position_embeddings: f64,
    beta_fast: f64,
    beta_slow: f64,
    truncate: bool,
) -> (f64, f64) {
    let dims = f64::from(dims);
    let correction_dim = |rotations: f64| {
        dims * (original_max_position_embeddings / (rotations * 2.0 * std::f64::consts::PI)).ln()
            / (2.0 * f64::from(base).ln())
    };
    let (low, high) = (correction_dim(beta_fast), correction_dim(beta_slow));
    let (low, high) = if truncate {
        (low.floor(), high.ceil())
    } else {
        (low, high)
    };
    (low.max(0.0), high.min(dims - 1.0))
}

/// YaRN's wavelengths: each pair's `factor`-scaled and unscaled wavelengths blended by a ramp
/// over `(low, high)`, with MLX ops in mlx-lm's order.
fn yarn_freqs(
    dims: i32,
    base: f32,
    factor: f64,
    (low, high): (f64, f64),
) -> Result<Array, Exception> {
    let high = if low == high { high + 0.001 } else { high };
    let freq_extra = base_wavelengths(dims, base)?;
    let freq_inter = ops::multiply(Array::from_f32(factor as f32), &freq_extra)?;
    let ramp = ops::divide(
        &ops::subtract(
            &ops::arange::<i32, f32>(0, dims / 2, 1)?,
            Array::from_f32(low as f32),
        )?,
        Array::from_f32((high - low) as f32),
    )?;
    let ramp = ops::clip(&ramp, (Array::from_f32(0.0), Array::from_f32(1.0)))?;
    let mask = ops::subtract(Array::from_f32(1.0), &ramp)?;
    ops::divide(
        &ops::multiply(&freq_inter, &freq_extra)?,
        &ops::add(
            &ops::multiply(&freq_inter, &mask)?,
            &ops::multiply(&freq_extra, &ops::subtract(Array::from_f32(1.0), &mask)?)?,
        )?,
    )
}

/// `base^(2i/dims)` for each rotated pair `i`: the unscaled frequencies in the form MLX's `rope`
/// takes them.
fn base_wavelengths(dims: i32, base: f32) -> Result<Array, Exception> {
    let exponents = ops::divide(&ops::arange::<i32, i32>(0, dims, 2)?, Array::from_int(dims))?;
    ops::power(Array::from_f32(base), &exponents)
}

pub(crate) mod sections;
#[cfg(test)]
mod tests;
