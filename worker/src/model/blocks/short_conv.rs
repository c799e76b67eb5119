//! LFM2's gated short convolution (mlx-lm's `ShortConv` in `lfm2.py`): `in_proj` gives three
//! gates `b`, `c` and the input `x`; `b · x` goes through a causal depthwise convolution over the
//! last `kernel` positions, its output is gated by `c`, then `out_proj`. The only state carried
//! between inputs is the convolution's last `kernel - 1` inputs ([`RecurrentState::conv`]), also
//! recorded at each block boundary for the prefix cache, and after each position of an input
//! holding guesses.
//!
//! Each sequence of a packed pass runs through its own convolution state: sequences are packed
//! without padding, so no position of another sequence ever reaches a state.

use mlx_rs::Array;
use mlx_rs::error::Exception;
use mlx_rs::ops::indexing::IndexOp;
use mlx_rs::ops::{self, zeros_dtype};

use super::linear::Linear;
use super::packed::per_sequence;
use crate::model::config::ModelConfig;
use crate::model::error::ModelError;
use crate::model::kv_cache::{KvCache, RecurrentState};
use crate::model::shape::StateShape;
use crate::model::weights::Weights;

pub struct ShortConv {
    in_proj: Linear,
    /// The depthwise convolution's weight as MLX's `conv1d` takes it, `[hidden, kernel, 1]`.
    conv_weight: Array,
    conv_bias: Option<Array>,
    out_proj: Linear,
    hidden: i32,
    kernel: i32,
}

impl ShortConv {
    /// `{prefix}.in_proj`, `{prefix}.conv` and `{prefix}.out_proj`, with biases when `bias`
    /// (config.json's `conv_bias`). The Hugging Face layout's conv weight (`[hidden, 1, kernel]`)
    /// is moved to MLX's, as mlx-lm's `sanitize` does; llama.cpp's converter squeezes it to
    /// `[hidden, kernel]`.
    pub fn load(
        weights: &mut Weights,
        config: &ModelConfig,
        prefix: &str,
        kernel: i32,
        bias: bool,
    ) -> Result<Self, ModelError> {
        let (hidden, quant) = (config.hidden_size, config.quantization);
        let linear = |weights: &mut Weights, name: &str, out: i32| {
            Linear::load(
                weights,
                &format!("{prefix}.{name}"),
                out,
                hidden,
                bias,
                quant,
            )
        };
        let conv_name = format!("{prefix}.conv.weight");
        weights.convert(&conv_name, &conv_name, "moving conv's kernel axis", |w| {
            if w.shape() == [hidden, 1, kernel] {
                w.swap_axes(1, 2)?.contiguous()
            } else if w.shape() == [hidden, kernel] {
                w.reshape(&[hidden, kernel, 1])
            } else {
                Ok(w.clone())
            }
        })?;
        let conv_bias = if bias {
            Some(weights.take_float(&format!("{prefix}.conv.bias"), &[hidden])?)
        } else {
            None
        };
        Ok(Self {
            in_proj: linear(weights, "in_proj", 3 * hidden)?,
            conv_weight: weights.take_float(&conv_name, &[hidden, kernel, 1])?,
            conv_bias,
            out_proj: linear(weights, "out_proj", hidden)?,
            hidden,
            kernel,
        })
    }

    pub fn state_shape(&self) -> StateShape {
        state_shape(self.kernel, self.hidden)
    }

    /// An empty cache of this layer's kind.
    pub fn new_cache(&self) -> KvCache {
        KvCache::recurrent()
    }

    /// `x` is `[1, positions, hidden]`: the new positions of several sequences one after the
    /// other, `lengths[i]` of them extending `caches[i]`. The projections run on all positions
    /// at once; the convolution on each sequence with its own state.
    pub fn forward(
        &self,
        x: &Array,
        lengths: &[i32],
        caches: &mut [&mut KvCache],
    ) -> Result<Array, Exception> {
        let parts = self.in_proj.forward(x)?.split_equal(3, -1)?;
        let (b, c, input) = (&parts[0], &parts[1], &parts[2]);
        let gated_input = ops::multiply(b, input)?;
        let convolved = per_sequence(x.dim(1), lengths, caches, |cut, cache| {
            self.convolve(cut(&gated_input), cache)
        })?;
        self.out_proj.forward(&ops::multiply(c, &convolved)?)
    }

    /// One sequence's `[1, positions, hidden]` after the `kernel - 1` inputs its cache holds
    /// (zeros at its start) through the convolution; the cache then holds its last ones.
    fn convolve(&self, input: Array, cache: &mut KvCache) -> Result<Array, Exception> {
        let positions = input.dim(1);
        let keep = self.kernel - 1;
        let held = cache
            .recurrent_state()
            .ok_or_else(|| Exception::from("a short-convolution layer needs a recurrent cache"))?
            .conv
            .clone();
        let state = match held {
            Some(state) => state,
            None => zeros_dtype(&[1, keep, self.hidden], input.dtype())?,
        };
        let conv_input = ops::concatenate(&[state, input], 1)?;
        // After `within` positions the state is the `keep` inputs before them.
        for within in cache.states_to_record(positions) {
            let conv = conv_input.index((.., within..within + keep)).contiguous()?;
            cache.record_state(
                within,
                RecurrentState {
                    conv: Some(conv),
                    delta: None,
                },
            );
        }
        let next = conv_input
            .index((.., positions..positions + keep))
            .contiguous()?;
        let out = ops::conv1d(
            &conv_input,
            &self.conv_weight,
            None,
            None,
            None,
            self.hidden,
        )?;
        let out = match &self.conv_bias {
            Some(bias) => ops::add(&out, bias)?,
            None => out,
        };
        cache.advance_recurrent(
            RecurrentState {
                conv: Some(next),
                delta: None,
            },
            positions,
        )?;
        Ok(out)
    }
}

/// The state a sequence carries through a short convolution of `kernel` over `hidden`
/// channels: its last `kernel - 1` inputs.
pub fn state_shape(kernel: i32, hidden: i32) -> StateShape {
    let count = |value: i32| u64::try_from(value).unwrap_or(0);
    StateShape {
        activation_elements: count(kernel - 1) * count(hidden),
        f32_elements: 0,
    }
}
