//! Rotary position embeddings, as mlx-lm's `initialize_rope` builds them for the Llama family.

use mlx_rs::error::Exception;

use crate::model::config::{ModelConfig, RopeScaling};
use crate::model::error::ModelError;
use crate::model::weights::Weights;

/// Per-frequency RoPE factors, as GGUF files of Llama 3.1 and later carry their scaling.
const ROPE_FACTORS: &str = "rope_freqs.weight";
use mlx_rs::ops::{self, select};
use mlx_rs::{Array, fast};

#[derive(Clone)]
pub struct Rope {
    dims: i32,
    traditional: bool,
    base: f32,
    scale: f32,
    /// Per-frequency wavelengths replacing `base` (llama3 scaling).
    freqs: Option<Array>,
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
                config.rope_scaling,
            )
        };
        rope.map_err(|source| weights.mlx_error("building rotary frequencies", source))
    }

    pub fn new(
        dims: i32,
        base: f32,
        traditional: bool,
        scaling: Option<RopeScaling>,
    ) -> Result<Self, Exception> {
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
        };
        Ok(Self {
            dims,
            traditional,
            base,
            scale,
            freqs,
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
        })
    }

    /// `x` is `[batch, heads, positions, head_dim]`; `offset` is the first position's index.
    pub fn apply(&self, x: &Array, offset: i32) -> Result<Array, Exception> {
        fast::rope(
            x,
            self.dims,
            self.traditional,
            self.base(),
            self.scale,
            offset,
            self.freqs.as_ref(),
        )
    }

    /// As [`Rope::apply`] with one offset per batch row (`offsets` is `[batch]` int32), so the
    /// rows of a decode step, each at its own position, rotate in one op.
    pub fn apply_rows(&self, x: &Array, offsets: &Array) -> Result<Array, Exception> {
        fast::rope_dynamic(
            x,
            self.dims,
            self.traditional,
            self.base(),
            self.scale,
            offsets,
            self.freqs.as_ref(),
        )
    }

    /// MLX takes either a base or explicit frequencies, never both.
    fn base(&self) -> Option<f32> {
        self.freqs.is_none().then_some(self.base)
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

/// `base^(2i/dims)` for each rotated pair `i`: the unscaled frequencies in the form MLX's `rope`
/// takes them.
fn base_wavelengths(dims: i32, base: f32) -> Result<Array, Exception> {
    let exponents = ops::divide(&ops::arange::<i32, i32>(0, dims, 2)?, Array::from_int(dims))?;
    ops::power(Array::from_f32(base), &exponents)
}
