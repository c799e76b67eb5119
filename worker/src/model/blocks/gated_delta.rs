//! The gated DeltaNet layer of Qwen3-Next and Qwen3.5 (mlx-lm's `Qwen3NextGatedDeltaNet`,
//! `GatedDeltaNet` and `gated_delta.py`): linear attention whose memory is a recurrent state.
//! Queries, keys and values go through a short causal depthwise convolution, then the gated delta
//! rule updates a `[value_dim, key_dim]` memory per value head at each position and reads it with
//! the query; the output is normalized per head and gated by `silu(z)` (`RMSNormGated`).
//!
//! The recurrence runs as MLX ops one position after another, as mlx-lm's `gated_delta_ops`
//! (its CPU path). Each sequence of a packed pass runs through its own convolution and memory
//! ([`RecurrentState`] in its cache): sequences are packed without padding, so no position of
//! another sequence, and no pad, ever reaches a state. At each prefix-cache block boundary the
//! input crosses, mid-chunk or in a decode step, the layer records its whole state there (the
//! memory after that position, the convolution's last `kernel - 1` inputs before it), so a later
//! prompt that shares the prefix restarts from it instead of from token 0. Over an input holding
//! guesses it records its state after every position, for the guesses not taken to be forgotten.

use mlx_rs::error::Exception;
use mlx_rs::ops::indexing::IndexOp;
use mlx_rs::ops::{self, zeros_dtype};
use mlx_rs::{Array, Dtype, fast};
use serde::Deserialize;

use super::linear::Linear;
use super::packed::per_sequence;
use crate::model::config::ModelConfig;
use crate::model::error::ModelError;
use crate::model::kernels;
use crate::model::kv_cache::{KvCache, RecurrentState};
use crate::model::shape::StateShape;
use crate::model::tensor_parallel::{TensorShard, reduced};
use crate::model::weights::Weights;

/// The layer's sizes, from config.json's `linear_*` keys.
#[derive(Clone, Copy)]
pub struct DeltaSpec {
    pub key_heads: i32,
    pub value_heads: i32,
    pub key_dim: i32,
    pub value_dim: i32,
    pub conv_kernel: i32,
    pub eps: f32,
    /// Value head `h` reads key head `h % key_heads` (llama.cpp's converter reorders Qwen3.5's
    /// value heads so, `linear_value_heads_tiled`) instead of `h / (value_heads / key_heads)`.
    pub tiled_value_heads: bool,
}

/// The layer's keys, defaulting as transformers' `Qwen3NextConfig`, `Qwen3_5TextConfig` and
/// `Qwen3_5MoeTextConfig` all do; `linear_value_heads_tiled` is the GGUF translation's own.
#[derive(Deserialize)]
#[serde(default)]
struct GatedDeltaArgs {
    linear_num_key_heads: i32,
    linear_num_value_heads: i32,
    linear_key_head_dim: i32,
    linear_value_head_dim: i32,
    linear_conv_kernel_dim: i32,
    linear_value_heads_tiled: bool,
}

impl Default for GatedDeltaArgs {
    fn default() -> Self {
        Self {
            linear_num_key_heads: 16,
            linear_num_value_heads: 32,
            linear_key_head_dim: 128,
            linear_value_head_dim: 128,
            linear_conv_kernel_dim: 4,
            linear_value_heads_tiled: false,
        }
    }
}

impl DeltaSpec {
    pub fn for_config(config: &ModelConfig) -> Result<Self, ModelError> {
        let args: GatedDeltaArgs = config.args()?;
        let spec = Self {
            key_heads: args.linear_num_key_heads,
            value_heads: args.linear_num_value_heads,
            key_dim: args.linear_key_head_dim,
            value_dim: args.linear_value_head_dim,
            conv_kernel: args.linear_conv_kernel_dim,
            eps: config.rms_norm_eps,
            tiled_value_heads: args.linear_value_heads_tiled,
        };
        if spec.key_heads <= 0 || spec.value_heads % spec.key_heads != 0 || spec.conv_kernel < 2 {
            return Err(ModelError::Config {
                path: config.path.clone(),
                message: format!(
                    "linear_num_value_heads {} must be a multiple of linear_num_key_heads {}, and \
                     linear_conv_kernel_dim {} at least 2",
                    spec.value_heads, spec.key_heads, spec.conv_kernel
                ),
            });
        }
        Ok(spec)
    }

    fn key_width(&self) -> i32 {
        self.key_heads * self.key_dim
    }

    fn value_width(&self) -> i32 {
        self.value_heads * self.value_dim
    }

    /// Channels of the convolution: queries, keys, values.
    fn conv_channels(&self) -> i32 {
        2 * self.key_width() + self.value_width()
    }

    /// Elements of a layer's state: the convolution's last `kernel - 1` inputs and the f32
    /// memory, `[value_heads, value_dim, key_dim]`.
    pub fn state_shape(&self) -> StateShape {
        let count = |value: i32| u64::try_from(value).unwrap_or(0);
        StateShape {
            activation_elements: count(self.conv_kernel - 1) * count(self.conv_channels()),
            f32_elements: count(self.value_heads) * count(self.value_dim) * count(self.key_dim),
        }
    }

    /// This rank's share of the heads, the checkpoint's tensors cut to them: each key head
    /// with the value heads that read it, in every input projection, the convolution and the
    /// per-head decay, and `out_proj`'s matching columns.
    fn sharded(
        self,
        weights: &mut Weights,
        config: &ModelConfig,
        prefix: &str,
        shard: &TensorShard,
    ) -> Result<Self, ModelError> {
        let shares = (
            shard.share_of(self.key_heads),
            shard.share_of(self.value_heads),
        );
        // Tiled value heads read key heads that are not beside them.
        let (Some(key_heads), Some(value_heads), false) =
            (shares.0, shares.1, self.tiled_value_heads)
        else {
            return Err(ModelError::Config {
                path: config.path.clone(),
                message: format!(
                    "tensor parallel over {} ranks cannot split {prefix}'s {} key and {} value heads",
                    shard.ranks(),
                    self.key_heads,
                    self.value_heads
                ),
            });
        };
        let (keys, values, heads) = (self.key_width(), self.value_width(), self.value_heads);
        let layer = |name: &str| format!("{prefix}.{name}");
        // Qwen3-Next's fused projections are grouped by key head, so each rank's share of the
        // groups is one run of rows.
        weights.shard_rows(&layer("in_proj_qkvz"), &[2 * keys + 2 * values])?;
        weights.shard_rows(&layer("in_proj_ba"), &[2 * heads])?;
        weights.shard_rows(&layer("in_proj_qkv"), &[keys, keys, values])?;
        weights.shard_rows(&layer("in_proj_z"), &[values])?;
        weights.shard_rows(&layer("in_proj_b"), &[heads])?;
        weights.shard_rows(&layer("in_proj_a"), &[heads])?;
        weights.shard_axis(&layer("conv1d.weight"), 0, &[keys, keys, values])?;
        weights.shard_axis(&layer("A_log"), 0, &[heads])?;
        weights.shard_axis(&layer("dt_bias"), 0, &[heads])?;
        weights.shard_columns(&layer("out_proj"))?;
        Ok(Self {
            key_heads,
            value_heads,
            ..self
        })
    }

    /// `[1, positions, key_heads, dim]` queries or keys, one head per value head.
    fn per_value_head(&self, x: &Array) -> Result<Array, Exception> {
        let repeat = self.value_heads / self.key_heads;
        if repeat == 1 {
            Ok(x.clone())
        } else if self.tiled_value_heads {
            ops::tile(x, &[1, 1, repeat, 1])
        } else {
            ops::repeat_axis::<f32>(x.clone(), repeat, 2)
        }
    }
}

/// How the input projections are laid out in the checkpoint.
enum InputProjections {
    /// Qwen3-Next: `in_proj_qkvz` and `in_proj_ba`, grouped by key head (each key head's q, k,
    /// then its value heads' v and z; each key head's value heads' b, then their a).
    Grouped { qkvz: Linear, ba: Linear },
    /// Qwen3.5: `in_proj_qkv` (all q, all k, all v), `in_proj_z`, `in_proj_b`, `in_proj_a`.
    Separate {
        qkv: Linear,
        z: Linear,
        b: Linear,
        a: Linear,
    },
}

pub struct GatedDeltaNet {
    projections: InputProjections,
    /// The depthwise convolution's weight as MLX's `conv1d` takes it, `[channels, kernel, 1]`.
    conv_weight: Array,
    /// `-exp(A_log)` in float32: the decay rate per value head.
    decay_rate: Array,
    dt_bias: Array,
    norm_weight: Array,
    out_proj: Linear,
    spec: DeltaSpec,
    /// The group this layer's heads are split between, whose partial outputs it sums.
    shard: Option<TensorShard>,
}

/// The projections of one sequence's positions, `[1, positions, ..]` each.
struct Projected {
    qkv: Array,
    /// `[1, positions, value_heads, value_dim]`.
    z: Array,
    b: Array,
    a: Array,
}

impl GatedDeltaNet {
    /// `{prefix}.in_proj_qkvz` and `{prefix}.in_proj_ba` (Qwen3-Next) or `{prefix}.in_proj_qkv`,
    /// `_z`, `_b`, `_a` (Qwen3.5), `conv1d`, `dt_bias`, `A_log`, `norm`, `out_proj`. The Hugging
    /// Face layout's conv1d weight (`[channels, 1, kernel]`) is moved to MLX's.
    pub fn load(
        weights: &mut Weights,
        config: &ModelConfig,
        prefix: &str,
        spec: DeltaSpec,
    ) -> Result<Self, ModelError> {
        let (hidden, quant) = (config.hidden_size, config.quantization);
        let shard = weights.tensor_shard().cloned();
        let spec = match &shard {
            Some(shard) => spec.sharded(weights, config, prefix, shard)?,
            None => spec,
        };
        let linear = |weights: &mut Weights, name: &str, out: i32, input: i32| {
            Linear::load(
                weights,
                &format!("{prefix}.{name}"),
                out,
                input,
                false,
                quant,
            )
        };
        let (keys, values, heads) = (spec.key_width(), spec.value_width(), spec.value_heads);
        let projections = if weights.contains(&format!("{prefix}.in_proj_qkvz.weight")) {
            InputProjections::Grouped {
                qkvz: linear(weights, "in_proj_qkvz", 2 * keys + 2 * values, hidden)?,
                ba: linear(weights, "in_proj_ba", 2 * heads, hidden)?,
            }
        } else {
            InputProjections::Separate {
                qkv: linear(weights, "in_proj_qkv", 2 * keys + values, hidden)?,
                z: linear(weights, "in_proj_z", values, hidden)?,
                b: linear(weights, "in_proj_b", heads, hidden)?,
                a: linear(weights, "in_proj_a", heads, hidden)?,
            }
        };
        let conv_name = format!("{prefix}.conv1d.weight");
        let channels = spec.conv_channels();
        weights.convert(&conv_name, &conv_name, "moving conv1d's kernel axis", |w| {
            if w.shape() == [channels, 1, spec.conv_kernel] {
                w.swap_axes(1, 2)?.contiguous()
            } else {
                Ok(w.clone())
            }
        })?;
        let conv_weight = weights.take_float(&conv_name, &[channels, spec.conv_kernel, 1])?;
        let a_log = weights.take_float(&format!("{prefix}.A_log"), &[heads])?;
        let decay_rate = a_log
            .as_dtype(Dtype::Float32)
            .and_then(|a_log| ops::negative(&ops::exp(&a_log)?))
            .map_err(|source| weights.mlx_error("computing the decay rate", source))?;
        Ok(Self {
            projections,
            conv_weight,
            decay_rate,
            dt_bias: weights.take_float(&format!("{prefix}.dt_bias"), &[heads])?,
            norm_weight: weights.take_float(&format!("{prefix}.norm.weight"), &[spec.value_dim])?,
            out_proj: linear(weights, "out_proj", hidden, values)?,
            spec,
            shard,
        })
    }

    /// Elements of the layer's state.
    pub fn state_shape(&self) -> StateShape {
        self.spec.state_shape()
    }

    /// An empty cache of this layer's kind.
    pub fn new_cache(&self) -> KvCache {
        KvCache::recurrent()
    }

    /// `x` is `[1, positions, hidden]`: the new positions of several sequences one after the
    /// other, `lengths[i]` of them extending `caches[i]`. The projections run on all positions
    /// at once; the convolution and the recurrence run on each sequence with its own state.
    pub fn forward(
        &self,
        x: &Array,
        lengths: &[i32],
        caches: &mut [&mut KvCache],
    ) -> Result<Array, Exception> {
        let projected = self.project(x)?;
        let output = per_sequence(x.dim(1), lengths, caches, |cut, cache| {
            let sequence = Projected {
                qkv: cut(&projected.qkv),
                z: cut(&projected.z),
                b: cut(&projected.b),
                a: cut(&projected.a),
            };
            self.sequence(sequence, cache)
        })?;
        reduced(self.shard.as_ref(), self.out_proj.forward(&output)?)
    }

    /// The input projections in Qwen3.5's order, whatever the checkpoint's layout.
    fn project(&self, x: &Array) -> Result<Projected, Exception> {
        let positions = x.dim(1);
        let spec = &self.spec;
        let (heads, value_dim) = (spec.value_heads, spec.value_dim);
        match &self.projections {
            InputProjections::Separate { qkv, z, b, a } => Ok(Projected {
                qkv: qkv.forward(x)?,
                z: z.forward(x)?.reshape(&[1, positions, heads, value_dim])?,
                b: b.forward(x)?,
                a: a.forward(x)?,
            }),
            InputProjections::Grouped { qkvz, ba } => {
                // mlx-lm's `fix_query_key_value_ordering`.
                let groups = spec.key_heads;
                let per_group = heads / groups * value_dim;
                let mixed = qkvz.forward(x)?.reshape(&[1, positions, groups, -1])?;
                let k_end = 2 * spec.key_dim;
                let parts =
                    mixed.split_at_indices(&[spec.key_dim, k_end, k_end + per_group], -1)?;
                let flat = |part: &Array| part.reshape(&[1, positions, -1]);
                let qkv =
                    ops::concatenate(&[flat(&parts[0])?, flat(&parts[1])?, flat(&parts[2])?], -1)?;
                let gates = ba.forward(x)?.reshape(&[1, positions, groups, -1])?;
                let gates = gates.split_at_indices(&[heads / groups], -1)?;
                Ok(Projected {
                    qkv,
                    z: parts[3].reshape(&[1, positions, heads, value_dim])?,
                    b: flat(&gates[0])?,
                    a: flat(&gates[1])?,
                })
            }
        }
    }

    /// One sequence's positions through its convolution and memory; returns
    /// `[1, positions, value_heads * value_dim]`, gated and normalized, before `out_proj`.
    fn sequence(&self, input: Projected, cache: &mut KvCache) -> Result<Array, Exception> {
        let spec = &self.spec;
        let positions = input.qkv.dim(1);
        let held = cache
            .recurrent_state()
            .ok_or_else(|| Exception::from("a gated DeltaNet layer needs a recurrent cache"))?
            .clone();
        let keep = spec.conv_kernel - 1;
        let conv_state = match held.conv {
            Some(conv) => conv,
            None => zeros_dtype(&[1, keep, spec.conv_channels()], input.qkv.dtype())?,
        };
        let conv_input = ops::concatenate(&[conv_state, input.qkv], 1)?;
        let next_conv = conv_input
            .index((.., positions..positions + keep))
            .contiguous()?;
        let conv_out = ops::conv1d(
            &conv_input,
            &self.conv_weight,
            None,
            None,
            None,
            spec.conv_channels(),
        )?;
        let conv_out = kernels::silu(&conv_out)?;
        let key_width = spec.key_width();
        let parts = conv_out.split_at_indices(&[key_width, 2 * key_width], -1)?;
        let heads = |part: &Array, count: i32, dim: i32| part.reshape(&[1, positions, count, dim]);
        let queries = heads(&parts[0], spec.key_heads, spec.key_dim)?;
        let keys = heads(&parts[1], spec.key_heads, spec.key_dim)?;
        let values = heads(&parts[2], spec.value_heads, spec.value_dim)?;
        let (queries, keys) = normalize_qk(&queries, &keys, spec.key_dim)?;
        let (queries, keys) = (spec.per_value_head(&queries)?, spec.per_value_head(&keys)?);
        let beta = ops::sigmoid(&input.b)?;
        let decay = ops::exp(&ops::multiply(
            &self.decay_rate,
            &softplus(&ops::add(&input.a, &self.dt_bias)?)?,
        )?)?;
        let state = match held.delta {
            Some(state) => state,
            None => zeros_dtype(
                &[1, spec.value_heads, spec.value_dim, spec.key_dim],
                Dtype::Float32,
            )?,
        };
        let recorded_at = cache.states_to_record(positions);
        let (output, state, recorded) =
            delta_rule(&queries, &keys, &values, &decay, &beta, state, &recorded_at)?;
        for (&within, delta) in recorded_at.iter().zip(recorded) {
            // `conv_input` starts with the `keep` inputs before this chunk.
            let conv = conv_input.index((.., within..within + keep)).contiguous()?;
            cache.record_state(
                within,
                RecurrentState {
                    conv: Some(conv),
                    delta: Some(delta),
                },
            );
        }
        cache.advance_recurrent(
            RecurrentState {
                conv: Some(next_conv),
                delta: Some(state),
            },
            positions,
        )?;
        let normed = fast::rms_norm(&output, Some(&self.norm_weight), spec.eps)?;
        // mlx-lm's `precise_swiglu`: the gate and the product in float32.
        let gated = ops::multiply(
            &kernels::silu(&input.z.as_dtype(Dtype::Float32)?)?,
            &normed.as_dtype(Dtype::Float32)?,
        )?
        .as_dtype(output.dtype())?;
        gated.reshape(&[1, positions, -1])
    }
}

/// `log(1 + exp(x))` as MLX's `nn.softplus` computes it.
pub(super) fn softplus(x: &Array) -> Result<Array, Exception> {
    ops::logaddexp(x, &Array::from_f32(0.0).as_dtype(x.dtype())?)
}

/// mlx-lm's `normalize_qk`: queries and keys L2-normalized per head (eps 1e-6 added to the sum
/// of squares), the readout scale `key_dim^-0.5` folded into the queries.
fn normalize_qk(queries: &Array, keys: &Array, key_dim: i32) -> Result<(Array, Array), Exception> {
    let inverse = (key_dim as f32).powf(-0.5);
    let eps = 1e-6 * inverse * inverse;
    let scaled = |x: &Array, factor: f32| -> Result<Array, Exception> {
        ops::multiply(
            &fast::rms_norm(x, None, eps)?,
            &Array::from_f32(factor).as_dtype(x.dtype())?,
        )
    };
    Ok((scaled(queries, inverse * inverse)?, scaled(keys, inverse)?))
}

/// The gated delta rule over `[1, positions, value_heads, dim]` queries, keys and values, one position
/// at a time from `state` (`[1, value_heads, value_dim, key_dim]`, float32), as mlx-lm's
/// `gated_delta_ops`: decay the memory, write each value's error against what the memory
/// recalls for its key (scaled by `beta`), then read it with the query. Returns the outputs
/// `[1, positions, value_heads, value_dim]` in the queries' dtype, the final state, and the
/// state after each count of positions in `record` (ascending, in `1..=positions`).
fn delta_rule(
    queries: &Array,
    keys: &Array,
    values: &Array,
    decay: &Array,
    beta: &Array,
    mut state: Array,
    record: &[i32],
) -> Result<(Array, Array, Vec<Array>), Exception> {
    let mut outputs = Vec::with_capacity(values.dim(1) as usize);
    let mut recorded = Vec::with_capacity(record.len());
    for position in 0..values.dim(1) {
        let at = |array: &Array| array.index((.., position));
        let (query, key, value) = (at(queries), at(keys), at(values));
        let decayed = ops::multiply(&state, &at(decay).reshape(&[1, -1, 1, 1])?)?;
        let key_row = key.expand_dims(-2)?;
        let recalled = ops::multiply(&decayed, &key_row)?.sum_axis(-1, false)?;
        let delta = ops::multiply(
            &ops::subtract(&value, &recalled)?,
            &at(beta).expand_dims(-1)?,
        )?;
        state = ops::add(&decayed, &ops::multiply(&key_row, &delta.expand_dims(-1)?)?)?;
        let read = ops::multiply(&state, &query.expand_dims(-2)?)?.sum_axis(-1, false)?;
        outputs.push(read.as_dtype(queries.dtype())?);
        if record.contains(&(position + 1)) {
            recorded.push(state.clone());
        }
    }
    Ok((ops::stack(&outputs, 1)?, state, recorded))
}
