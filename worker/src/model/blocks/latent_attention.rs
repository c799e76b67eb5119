//! Multi-head latent attention (DeepSeek V3, Kimi K2, GLM-4.7-Flash), as mlx-lm's
//! `DeepseekV3Attention` computes it. Keys and values are never cached per head: each position
//! caches its compressed latent (`kv_lora_rank` wide, normalized) and one rotary key
//! (`qk_rope_head_dim` wide) that all heads share. A prompt's positions expand the latent into
//! per-head keys (`embed_q`) and values (`unembed_out`); a decode step instead moves its query
//! into the latent space and attends over the latent itself, then projects the result out, so a
//! step reads only the latent cache. The rotary part of each score is computed apart and joins
//! the attention as an additive mask.

use mlx_rs::error::Exception;
use mlx_rs::fast::{self, ScaledDotProductAttentionMask};
use mlx_rs::ops::indexing::IndexOp;
use mlx_rs::ops::{self, dequantize, quantize};
use mlx_rs::{Array, Dtype};
use serde::Deserialize;

use super::linear::Linear;
use super::multi_linear::MultiLinear;
use super::norm::Norm;
use super::rope::Rope;
use crate::model::config::{ModelConfig, RopeScaling};
use crate::model::error::ModelError;
use crate::model::kv_cache::KvCache;
use crate::model::shape::CacheShape;
use crate::model::weights::Weights;

/// The shape of a latent attention layer, from its config's keys.
pub struct LatentSpec {
    pub heads: i32,
    pub hidden: i32,
    /// `None`: queries come from one `q_proj` instead of a low-rank pair.
    pub q_lora_rank: Option<i32>,
    pub kv_lora_rank: i32,
    pub qk_nope_head_dim: i32,
    pub qk_rope_head_dim: i32,
    pub v_head_dim: i32,
    /// Biases on `q_a_proj`, `kv_a_proj_with_mqa` and `o_proj`.
    pub bias: bool,
    /// The epsilon of the two low-rank norms (DeepSeek fixes it at 1e-6, GLM takes the model's).
    pub lora_eps: f32,
    pub scale: f32,
    pub rope: Rope,
}

/// The latent attention keys of a DeepSeek V3 config, defaulting as transformers'
/// `DeepseekV3Config` does, except the head sizes (whose defaults differ by type, see
/// [`LatentDefaults`]) and `q_lora_rank`'s, whose `null` (DeepSeek V2 Lite's single query
/// projection) is not its absence.
#[derive(Deserialize)]
#[serde(default)]
pub struct LatentArgs {
    #[serde(deserialize_with = "ModelConfig::present")]
    q_lora_rank: Option<Option<i32>>,
    pub kv_lora_rank: i32,
    pub qk_rope_head_dim: i32,
    qk_nope_head_dim: Option<i32>,
    v_head_dim: Option<i32>,
    attention_bias: bool,
}

impl Default for LatentArgs {
    fn default() -> Self {
        Self {
            q_lora_rank: None,
            kv_lora_rank: 512,
            qk_rope_head_dim: 64,
            qk_nope_head_dim: None,
            v_head_dim: None,
            attention_bias: false,
        }
    }
}

/// The defaults of the query's rank and the head sizes, which differ by type (DeepSeek V3's 1536,
/// 128 and 128, GLM-4.7-Flash's 768, 192 and 256).
#[derive(Clone, Copy)]
pub struct LatentDefaults {
    pub q_lora_rank: i32,
    pub qk_nope_head_dim: i32,
    pub v_head_dim: i32,
}

impl LatentSpec {
    /// The spec `args` describe; the query scale grows with YaRN's `mscale_all_dim` as mlx-lm's
    /// does; a head size config.json leaves out takes the type's default.
    pub fn from_config(
        config: &ModelConfig,
        args: &LatentArgs,
        lora_eps: f32,
        defaults: LatentDefaults,
    ) -> Result<Self, ModelError> {
        let rope_dim = args.qk_rope_head_dim;
        let nope = args.qk_nope_head_dim.unwrap_or(defaults.qk_nope_head_dim);
        let mut scale = f64::from(nope + rope_dim).powf(-0.5);
        if let Some(RopeScaling::Yarn {
            factor,
            mscale_all_dim,
            ..
        }) = config.rope_scaling
            && mscale_all_dim != 0.0
            && factor > 1.0
        {
            let mscale = 0.1 * mscale_all_dim * factor.ln() + 1.0;
            scale *= mscale * mscale;
        }
        let rope = Rope::new(
            rope_dim,
            config.rope_theta,
            true,
            config.rope_scaling.clone(),
        )
        .map_err(|source| ModelError::Mlx {
            dir: config.path.clone(),
            action: "building rotary frequencies",
            source,
        })?;
        Ok(Self {
            heads: config.num_heads,
            hidden: config.hidden_size,
            q_lora_rank: args.q_lora_rank.unwrap_or(Some(defaults.q_lora_rank)),
            kv_lora_rank: args.kv_lora_rank,
            qk_nope_head_dim: nope,
            qk_rope_head_dim: rope_dim,
            v_head_dim: args.v_head_dim.unwrap_or(defaults.v_head_dim),
            bias: args.attention_bias,
            lora_eps,
            scale: scale as f32,
            rope,
        })
    }
}

enum Queries {
    Direct(Linear),
    LowRank { a: Linear, norm: Norm, b: Linear },
}

impl Queries {
    fn forward(&self, x: &Array) -> Result<Array, Exception> {
        match self {
            Self::Direct(q_proj) => q_proj.forward(x),
            Self::LowRank { a, norm, b } => b.forward(&norm.forward(&a.forward(x)?)?),
        }
    }
}

pub struct LatentAttention {
    queries: Queries,
    kv_a_proj: Linear,
    kv_a_norm: Norm,
    embed_q: MultiLinear,
    unembed_out: MultiLinear,
    o_proj: Linear,
    rope: Rope,
    heads: i32,
    kv_lora_rank: i32,
    qk_nope_head_dim: i32,
    qk_rope_head_dim: i32,
    scale: f32,
}

impl LatentAttention {
    /// Loads the projections under `prefix`; a Hugging Face checkpoint's `kv_b_proj` is split
    /// into `embed_q` and `unembed_out` first, as mlx-lm's `sanitize` splits it.
    pub fn load(
        weights: &mut Weights,
        config: &ModelConfig,
        prefix: &str,
        spec: LatentSpec,
    ) -> Result<Self, ModelError> {
        split_kv_b_proj(weights, prefix, &spec)?;
        let quant = config.quantization;
        let q_width = spec.heads * (spec.qk_nope_head_dim + spec.qk_rope_head_dim);
        let linear = |weights: &mut Weights, name: &str, out: i32, input: i32, bias: bool| {
            Linear::load(
                weights,
                &format!("{prefix}.{name}"),
                out,
                input,
                bias,
                quant,
            )
        };
        let queries = match spec.q_lora_rank {
            None => Queries::Direct(linear(weights, "q_proj", q_width, spec.hidden, false)?),
            Some(rank) => Queries::LowRank {
                a: linear(weights, "q_a_proj", rank, spec.hidden, spec.bias)?,
                norm: Norm::rms(
                    weights,
                    &format!("{prefix}.q_a_layernorm.weight"),
                    rank,
                    spec.lora_eps,
                )?,
                b: linear(weights, "q_b_proj", q_width, rank, false)?,
            },
        };
        let kv_a_proj = linear(
            weights,
            "kv_a_proj_with_mqa",
            spec.kv_lora_rank + spec.qk_rope_head_dim,
            spec.hidden,
            spec.bias,
        )?;
        let kv_a_norm = Norm::rms(
            weights,
            &format!("{prefix}.kv_a_layernorm.weight"),
            spec.kv_lora_rank,
            spec.lora_eps,
        )?;
        let embed_q = MultiLinear::load(
            weights,
            &format!("{prefix}.embed_q"),
            [spec.heads, spec.kv_lora_rank, spec.qk_nope_head_dim],
            quant,
        )?;
        let unembed_out = MultiLinear::load(
            weights,
            &format!("{prefix}.unembed_out"),
            [spec.heads, spec.v_head_dim, spec.kv_lora_rank],
            quant,
        )?;
        let o_proj = linear(
            weights,
            "o_proj",
            spec.hidden,
            spec.heads * spec.v_head_dim,
            spec.bias,
        )?;
        Ok(Self {
            queries,
            kv_a_proj,
            kv_a_norm,
            embed_q,
            unembed_out,
            o_proj,
            rope: spec.rope,
            heads: spec.heads,
            kv_lora_rank: spec.kv_lora_rank,
            qk_nope_head_dim: spec.qk_nope_head_dim,
            qk_rope_head_dim: spec.qk_rope_head_dim,
            scale: spec.scale,
        })
    }

    /// What a position costs in the cache: one latent and one shared rotary key.
    pub fn cache_shape(&self) -> CacheShape {
        latent_cache_shape(self.kv_lora_rank, self.qk_rope_head_dim)
    }

    /// `x` is `[1, positions, hidden]`: the new positions of several sequences one after the
    /// other, `lengths[i]` of them extending `caches[i]`. The projections run on all positions
    /// at once; each sequence attends over its own cache.
    pub fn forward(
        &self,
        x: &Array,
        lengths: &[i32],
        caches: &mut [&mut KvCache],
    ) -> Result<Array, Exception> {
        let queries = self.queries.forward(x)?;
        let compressed = self.kv_a_proj.forward(x)?;
        let mut outputs = Vec::with_capacity(lengths.len());
        let mut start = 0;
        for (&length, cache) in lengths.iter().zip(caches.iter_mut()) {
            let positions = |projected: &Array| projected.index((.., start..start + length, ..));
            outputs.push(self.attend_sequence(
                &positions(&queries),
                &positions(&compressed),
                cache,
            )?);
            start += length;
        }
        let output = match outputs.as_slice() {
            [only] => only.clone(),
            _ => ops::concatenate(&outputs, 1)?,
        };
        self.o_proj.forward(&output)
    }

    /// One sequence's `length` new positions: `queries` `[1, length, heads · (nope + rope)]`,
    /// `compressed` `[1, length, rank + rope]`. Returns `[1, length, heads · v_head_dim]`.
    fn attend_sequence(
        &self,
        queries: &Array,
        compressed: &Array,
        cache: &mut KvCache,
    ) -> Result<Array, Exception> {
        let length = queries.dim(1);
        let offset = cache.offset();
        let queries = queries
            .reshape(&[1, length, self.heads, -1])?
            .transpose_axes(&[0, 2, 1, 3])?;
        let nope = self.qk_nope_head_dim;
        let q_nope = queries.index((.., .., .., ..nope));
        let q_pe = self
            .rope
            .apply(&queries.index((.., .., .., nope..)), offset)?;
        let rank = self.kv_lora_rank;
        let latent = self
            .kv_a_norm
            .forward(&compressed.index((.., .., ..rank)))?
            .reshape(&[1, 1, length, rank])?;
        let k_pe =
            compressed
                .index((.., .., rank..))
                .reshape(&[1, 1, length, self.qk_rope_head_dim])?;
        let k_pe = self.rope.apply(&k_pe, offset)?;
        let (latent, k_pe) = cache.update_and_fetch(&latent, &k_pe)?;
        let scale = Array::from_f32(self.scale).as_dtype(q_pe.dtype())?;
        let pe_scores = ops::matmul(&ops::multiply(&q_pe, &scale)?, &k_pe.swap_axes(-1, -2)?)?;
        let output = if length == 1 {
            let q_latent = self.embed_q.forward(&q_nope, true)?;
            let mask = ScaledDotProductAttentionMask::Array(&pe_scores);
            let attended = fast::scaled_dot_product_attention(
                &q_latent, &latent, &latent, self.scale, mask, None,
            )?;
            self.unembed_out.forward(&attended, true)?
        } else {
            let keys = self.embed_q.forward(&latent, false)?;
            let values = self.unembed_out.forward(&latent, true)?;
            let pe_scores = causal(&pe_scores, offset)?;
            let mask = ScaledDotProductAttentionMask::Array(&pe_scores);
            fast::scaled_dot_product_attention(&q_nope, &keys, &values, self.scale, mask, None)?
        };
        output
            .transpose_axes(&[0, 2, 1, 3])?
            .reshape(&[1, length, -1])
    }
}

/// `scores` (`[1, heads, length, offset + length]`) with each query's future keys at the
/// dtype's least value, as mlx-lm masks them.
fn causal(scores: &Array, offset: i32) -> Result<Array, Exception> {
    let (length, keys) = (scores.dim(2), scores.dim(3));
    let query_positions =
        ops::arange::<_, i32>(offset, offset + length, None)?.reshape(&[length, 1])?;
    let key_positions = ops::arange::<_, i32>(0, keys, None)?.reshape(&[1, keys])?;
    let visible = key_positions.le(&query_positions)?;
    let least = match scores.dtype() {
        Dtype::Float16 => f32::from(half::f16::MIN),
        Dtype::Bfloat16 => f32::from(half::bf16::MIN),
        _ => f32::MIN,
    };
    let least = Array::from_f32(least).as_dtype(scores.dtype())?;
    ops::select(&visible, scores, &least)
}

/// The Hugging Face layout's `kv_b_proj` (`[heads · (nope + v), rank]`: each head's key rows,
/// then its value rows) as `embed_q` (`[heads, rank, nope]`, the key rows transposed) and
/// `unembed_out` (`[heads, v, rank]`), as mlx-lm's `sanitize` splits it. A quantized one is
/// dequantized, split and quantized again with its bits and group size.
fn split_kv_b_proj(
    weights: &mut Weights,
    prefix: &str,
    spec: &LatentSpec,
) -> Result<(), ModelError> {
    let source = format!("{prefix}.kv_b_proj");
    let weight = format!("{source}.weight");
    if !weights.contains(&weight) {
        return Ok(());
    }
    let (heads, nope, rank) = (spec.heads, spec.qk_nope_head_dim, spec.kv_lora_rank);
    let split = move |dense: &Array| -> Result<[Array; 2], Exception> {
        let per_head = dense.reshape(&[heads, nope + spec.v_head_dim, rank])?;
        let keys = per_head
            .index((.., ..nope, ..))
            .swap_axes(-1, -2)?
            .contiguous()?;
        let values = per_head.index((.., nope.., ..)).contiguous()?;
        Ok([keys, values])
    };
    let (embed, unembed) = (format!("{prefix}.embed_q"), format!("{prefix}.unembed_out"));
    if !weights.contains(&format!("{source}.scales")) {
        let targets = [format!("{embed}.weight"), format!("{unembed}.weight")];
        return weights.convert_into(
            &weight,
            [&targets[0], &targets[1]],
            "splitting kv_b_proj",
            split,
        );
    }
    let (scales, _) = weights.take_any(&format!("{source}.scales"))?;
    let (biases, _) = weights.take_any(&format!("{source}.biases"))?;
    let packed = weights
        .shape_of(&weight)
        .and_then(|shape| shape.last().copied())
        .unwrap_or(0);
    let bits = packed * 32 / rank;
    let group_size = rank / scales.dim(-1).max(1);
    let targets = ["weight", "scales", "biases"]
        .into_iter()
        .flat_map(|kind| [format!("{embed}.{kind}"), format!("{unembed}.{kind}")])
        .collect::<Vec<_>>();
    weights.convert_into(
        &weight,
        [
            &targets[0],
            &targets[2],
            &targets[4],
            &targets[1],
            &targets[3],
            &targets[5],
        ],
        "splitting a quantized kv_b_proj",
        |packed| {
            let dense = dequantize(packed, &scales, &biases, group_size, bits)?;
            let [keys, values] = split(&dense)?;
            let (kw, ks, kb) = quantize(&keys, group_size, bits)?;
            let (vw, vs, vb) = quantize(&values, group_size, bits)?;
            Ok([kw, ks, kb, vw, vs, vb])
        },
    )
}

#[cfg(test)]
mod tests;

/// A latent attention layer's cache per position: its latent as the keys, its shared rotary
/// key as the values.
pub fn latent_cache_shape(kv_lora_rank: i32, qk_rope_head_dim: i32) -> CacheShape {
    CacheShape {
        kv_heads: 1,
        key_dim: kv_lora_rank,
        value_dim: qk_rope_head_dim,
    }
}
