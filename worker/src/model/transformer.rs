//! The decoder stack of the Llama family: attention with grouped-query heads, SwiGLU MLP,
//! pre-norm residual blocks. Qwen2 adds q/k/v biases, Qwen3 adds RMSNorm over q and k heads.

use mlx_rs::Array;
use mlx_rs::error::Exception;
use mlx_rs::fast;
use mlx_rs::ops;
use mlx_rs::ops::indexing::IndexOp;

use super::ModelError;
use super::config::{Architecture, ModelConfig};
use super::cpu_math;
use super::host_attention;
use super::kv_cache::KvCache;
use super::layers::Linear;
use super::rope::Rope;
use super::weights::Weights;

pub struct RmsNorm {
    weight: Array,
    eps: f32,
}

impl RmsNorm {
    pub fn load(
        weights: &mut Weights,
        name: &str,
        size: i32,
        eps: f32,
    ) -> Result<Self, ModelError> {
        Ok(Self {
            weight: weights.take_float(name, &[size])?,
            eps,
        })
    }

    pub fn forward(&self, x: &Array) -> Result<Array, Exception> {
        fast::rms_norm(x, Some(&self.weight), self.eps)
    }
}

struct Attention {
    q_proj: Linear,
    k_proj: Linear,
    v_proj: Linear,
    o_proj: Linear,
    q_norm: Option<RmsNorm>,
    k_norm: Option<RmsNorm>,
    num_heads: i32,
    num_kv_heads: i32,
    scale: f32,
}

struct Mlp {
    gate_proj: Linear,
    up_proj: Linear,
    down_proj: Linear,
}

pub struct Block {
    input_layernorm: RmsNorm,
    self_attn: Attention,
    post_attention_layernorm: RmsNorm,
    mlp: Mlp,
}

impl Block {
    pub fn load(
        weights: &mut Weights,
        config: &ModelConfig,
        index: i32,
    ) -> Result<Self, ModelError> {
        let prefix = format!("model.layers.{index}");
        let eps = config.rms_norm_eps;
        let hidden = config.hidden_size;
        Ok(Self {
            input_layernorm: RmsNorm::load(
                weights,
                &format!("{prefix}.input_layernorm.weight"),
                hidden,
                eps,
            )?,
            self_attn: Attention::load(weights, config, &format!("{prefix}.self_attn"))?,
            post_attention_layernorm: RmsNorm::load(
                weights,
                &format!("{prefix}.post_attention_layernorm.weight"),
                hidden,
                eps,
            )?,
            mlp: Mlp::load(weights, config, &format!("{prefix}.mlp"))?,
        })
    }

    /// `x` is `[1, positions, hidden]`: the new positions of several sequences one after the
    /// other, `lengths[i]` of them extending `caches[i]`.
    pub fn forward(
        &self,
        x: &Array,
        rope: &Rope,
        lengths: &[i32],
        caches: &mut [&mut KvCache],
    ) -> Result<Array, Exception> {
        let attended =
            self.self_attn
                .forward(&self.input_layernorm.forward(x)?, rope, lengths, caches)?;
        let h = ops::add(x, &attended)?;
        let mlp_out = self
            .mlp
            .forward(&self.post_attention_layernorm.forward(&h)?)?;
        ops::add(&h, &mlp_out)
    }
}

impl Attention {
    fn load(weights: &mut Weights, config: &ModelConfig, prefix: &str) -> Result<Self, ModelError> {
        let hidden = config.hidden_size;
        let q_width = config.num_heads * config.head_dim;
        let kv_width = config.num_kv_heads * config.head_dim;
        let bias = config.attention_bias;
        let o_bias = bias && config.architecture == Architecture::Llama;
        let quant = config.quantization;
        let head_norm =
            |weights: &mut Weights, name: &str| -> Result<Option<RmsNorm>, ModelError> {
                if config.architecture != Architecture::Qwen3 {
                    return Ok(None);
                }
                let name = format!("{prefix}.{name}.weight");
                RmsNorm::load(weights, &name, config.head_dim, config.rms_norm_eps).map(Some)
            };
        Ok(Self {
            q_proj: Linear::load(
                weights,
                &format!("{prefix}.q_proj"),
                q_width,
                hidden,
                bias,
                quant,
            )?,
            k_proj: Linear::load(
                weights,
                &format!("{prefix}.k_proj"),
                kv_width,
                hidden,
                bias,
                quant,
            )?,
            v_proj: Linear::load(
                weights,
                &format!("{prefix}.v_proj"),
                kv_width,
                hidden,
                bias,
                quant,
            )?,
            o_proj: Linear::load(
                weights,
                &format!("{prefix}.o_proj"),
                hidden,
                q_width,
                o_bias,
                quant,
            )?,
            q_norm: head_norm(weights, "q_norm")?,
            k_norm: head_norm(weights, "k_norm")?,
            num_heads: config.num_heads,
            num_kv_heads: config.num_kv_heads,
            scale: (config.head_dim as f32).powf(-0.5),
        })
    }

    /// The projections run on all positions at once; each sequence's rotary offset, cache and
    /// attention are its own, so sequences of different lengths share a pass without padding or
    /// masks between them. The single-token sequences at the front (decode steps) rotate in one op.
    fn forward(
        &self,
        x: &Array,
        rope: &Rope,
        lengths: &[i32],
        caches: &mut [&mut KvCache],
    ) -> Result<Array, Exception> {
        let queries = self.q_proj.forward(x)?;
        let keys = self.k_proj.forward(x)?;
        let values = self.v_proj.forward(x)?;
        // A lone single-token input takes the per-sequence path, which rotates at a scalar offset,
        // unless it attends on the host.
        let grouped = match lengths.iter().take_while(|&&length| length == 1).count() {
            1 if !host_attention::applies(x.dtype()) => 0,
            count => count,
        };
        let mut outputs = Vec::with_capacity(lengths.len() - grouped + 1);
        if grouped > 0 {
            let positions = |projected: &Array| projected.index((.., ..grouped as i32, ..));
            outputs.push(self.attend_singles(
                &positions(&queries),
                &positions(&keys),
                &positions(&values),
                rope,
                &mut caches[..grouped],
            )?);
        }
        let mut start = grouped as i32;
        for (&length, cache) in lengths[grouped..].iter().zip(caches[grouped..].iter_mut()) {
            let positions = |projected: &Array| {
                if length == x.dim(1) {
                    projected.clone()
                } else {
                    projected.index((.., start..start + length, ..))
                }
            };
            outputs.push(self.attend_sequence(
                &positions(&queries),
                &positions(&keys),
                &positions(&values),
                rope,
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

    /// `[1, positions, count * head_dim]` as `[rows, heads, positions / rows, head_dim]`, the
    /// heads normalized where the model does (Qwen3).
    fn heads(
        projected: &Array,
        rows: i32,
        count: i32,
        norm: Option<&RmsNorm>,
    ) -> Result<Array, Exception> {
        let split = projected.reshape(&[rows, -1, count, projected.dim(2) / count])?;
        let split = match norm {
            Some(norm) => norm.forward(&split)?,
            None => split,
        };
        split.transpose_axes(&[0, 2, 1, 3])
    }

    /// One sequence's new positions (`[1, positions, width]` each) through its own attention;
    /// returns `[1, positions, heads * head_dim]`.
    fn attend_sequence(
        &self,
        queries: &Array,
        keys: &Array,
        values: &Array,
        rope: &Rope,
        cache: &mut KvCache,
    ) -> Result<Array, Exception> {
        let length = queries.dim(1);
        let offset = cache.offset();
        let queries = rope.apply(
            &Self::heads(queries, 1, self.num_heads, self.q_norm.as_ref())?,
            offset,
        )?;
        let keys = rope.apply(
            &Self::heads(keys, 1, self.num_kv_heads, self.k_norm.as_ref())?,
            offset,
        )?;
        let values = Self::heads(values, 1, self.num_kv_heads, None)?;
        self.attend(&queries, &keys, &values, cache)?
            .transpose_axes(&[0, 2, 1, 3])?
            .reshape(&[1, length, -1])
    }

    /// One new position for each of several sequences (`[1, rows, width]` each), rotated in one
    /// op at each row's offset; each row attends over its own cache. Returns
    /// `[1, rows, heads * head_dim]`.
    fn attend_singles(
        &self,
        queries: &Array,
        keys: &Array,
        values: &Array,
        rope: &Rope,
        caches: &mut [&mut KvCache],
    ) -> Result<Array, Exception> {
        let rows = caches.len() as i32;
        let offsets: Vec<i32> = caches.iter().map(|cache| cache.offset()).collect();
        let offsets = Array::from_slice(&offsets, &[rows]);
        let queries = Self::heads(queries, rows, self.num_heads, self.q_norm.as_ref())?;
        let keys = Self::heads(keys, rows, self.num_kv_heads, self.k_norm.as_ref())?;
        let values = Self::heads(values, rows, self.num_kv_heads, None)?;
        let queries = rope.apply_rows(&queries, &offsets)?;
        let keys = rope.apply_rows(&keys, &offsets)?.split_equal(rows, 0)?;
        let values = values.split_equal(rows, 0)?;
        for (cache, (keys, values)) in caches.iter_mut().zip(keys.iter().zip(&values)) {
            cache.update_and_fetch(keys, values)?;
        }
        if host_attention::applies(queries.dtype())
            && let Some(output) = host_attention::attend(
                &queries,
                caches,
                self.num_heads as usize,
                self.num_kv_heads as usize,
                self.scale,
            )?
        {
            return Ok(output);
        }
        let per_row = caches
            .iter()
            .zip(queries.split_equal(rows, 0)?)
            .map(|(cache, queries)| {
                let (keys, values) = cache
                    .positions(0, cache.offset())
                    .ok_or_else(|| Exception::from("a decode row's cache is empty"))?;
                cpu_math::attention(&queries, &keys, &values, self.scale)
            })
            .collect::<Result<Vec<_>, _>>()?;
        ops::concatenate(&per_row, 0)?
            .transpose_axes(&[0, 2, 1, 3])?
            .reshape(&[1, rows, -1])
    }

    /// One sequence's attention over its cache, its new positions already rotated:
    /// `[1, heads, positions, head_dim]` in, the same shape out.
    fn attend(
        &self,
        queries: &Array,
        keys: &Array,
        values: &Array,
        cache: &mut KvCache,
    ) -> Result<Array, Exception> {
        let (keys, values) = cache.update_and_fetch(keys, values)?;
        if host_attention::applies(queries.dtype())
            && let Some(output) = host_attention::attend_chunk(
                queries,
                cache,
                self.num_kv_heads as usize,
                self.scale,
            )?
        {
            return Ok(output);
        }
        cpu_math::attention(queries, &keys, &values, self.scale)
    }
}

impl Mlp {
    fn load(weights: &mut Weights, config: &ModelConfig, prefix: &str) -> Result<Self, ModelError> {
        let (hidden, inner) = (config.hidden_size, config.intermediate_size);
        let (bias, quant) = (config.mlp_bias, config.quantization);
        Ok(Self {
            gate_proj: Linear::load(
                weights,
                &format!("{prefix}.gate_proj"),
                inner,
                hidden,
                bias,
                quant,
            )?,
            up_proj: Linear::load(
                weights,
                &format!("{prefix}.up_proj"),
                inner,
                hidden,
                bias,
                quant,
            )?,
            down_proj: Linear::load(
                weights,
                &format!("{prefix}.down_proj"),
                hidden,
                inner,
                bias,
                quant,
            )?,
        })
    }

    fn forward(&self, x: &Array) -> Result<Array, Exception> {
        let gate = self.gate_proj.forward(x)?;
        let activated = ops::multiply(&cpu_math::silu(&gate)?, &self.up_proj.forward(x)?)?;
        self.down_proj.forward(&activated)
    }
}
