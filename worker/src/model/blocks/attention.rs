//! Grouped-query attention, as mlx-lm's `Attention` classes compute it, with the options the
//! architectures differ by: biases, a norm over each query and key head, a query scale other
//! than 1/sqrt(head_dim), no rotary embedding at all (NoPE layers), queries scaled by their
//! position, a norm over each value head, values that are the keys' projection, layers that
//! attend over an earlier layer's keys and values instead of their own (Gemma 4), and scores
//! capped softly before the softmax (Gemma 2).

use mlx_rs::Array;
use mlx_rs::error::Exception;
use mlx_rs::ops;
use mlx_rs::ops::indexing::IndexOp;

use super::linear::Linear;
use super::norm::Norm;
use super::query_scale::QueryScale;
use super::rope::Rope;
use crate::model::config::ModelConfig;
use crate::model::error::ModelError;
use crate::model::kernels;
use crate::model::kv_cache::KvCache;
use crate::model::shape::CacheShape;
use crate::model::tensor_parallel::{TensorShard, reduced};
use crate::model::weights::Weights;
use crate::model::window::Window;

/// How an architecture's attention is shaped; [`AttentionSpec::new`] gives Llama's.
pub struct AttentionSpec {
    pub heads: i32,
    pub kv_heads: i32,
    pub head_dim: i32,
    pub hidden: i32,
    pub qkv_bias: bool,
    pub o_bias: bool,
    /// One fused `qkv_proj` (Phi-3) instead of three projections.
    pub fused_qkv: bool,
    /// RMSNorm over each query and key head before the rotation (Qwen3, Gemma 3).
    pub head_norm: Option<HeadNorm>,
    /// The head norm after the rotation instead (Llama 4).
    pub norm_after_rope: bool,
    pub scale: f32,
    /// `None` for a layer without positional encoding (NoPE).
    pub rope: Option<Rope>,
    /// The keys each position sees besides its causal past: a sliding window or its chunk.
    pub window: Option<Window>,
    /// A learned logit per head, `{prefix}.sinks`, that joins every softmax's denominator
    /// (gpt-oss).
    pub sinks: bool,
    /// Multiplies the rotated queries by a factor of their position (Ministral 3, Llama 4).
    pub query_scale: Option<QueryScale>,
    /// A norm over each value head (Gemma 4's weightless `v_norm`).
    pub value_norm: Option<HeadNorm>,
    /// No `v_proj`: the values are the keys' projection before their norm and rotation (Gemma
    /// 4's `attention_k_eq_v`).
    pub values_are_keys: bool,
    /// The earlier layer whose keys and values this one attends over (Gemma 4's KV-shared
    /// layers): it projects neither and holds no cache.
    pub shared_kv: Option<usize>,
    /// `q_proj` gives each head its queries then as many gate channels, and the attention's
    /// output is multiplied by their sigmoid before `o_proj` (Qwen3-Next).
    pub output_gate: bool,
    /// Caps each score `s` at `c · tanh(s / c)` before the mask and softmax (Gemma 2's
    /// `attn_logit_softcapping`).
    pub softcap: Option<f32>,
}

#[derive(Clone, Copy)]
pub enum HeadNorm {
    Rms {
        eps: f32,
    },
    /// Gemma's `(1 + w)` RMSNorm.
    RmsOffset {
        eps: f32,
    },
    /// Without a weight (Llama 4).
    RmsUnweighted {
        eps: f32,
    },
    /// One RMSNorm over all heads of the projection together, before it is split into heads
    /// (OLMo 2 and 3).
    RmsWhole {
        eps: f32,
    },
}

impl AttentionSpec {
    /// Llama's attention for `config`: no biases, no head norms, scale 1/sqrt(head_dim).
    pub fn new(config: &ModelConfig, rope: Rope) -> Self {
        Self {
            heads: config.num_heads,
            kv_heads: config.num_kv_heads,
            head_dim: config.head_dim,
            hidden: config.hidden_size,
            qkv_bias: false,
            o_bias: false,
            fused_qkv: false,
            head_norm: None,
            norm_after_rope: false,
            scale: (config.head_dim as f32).powf(-0.5),
            rope: Some(rope),
            window: None,
            sinks: false,
            query_scale: None,
            value_norm: None,
            values_are_keys: false,
            shared_kv: None,
            output_gate: false,
            softcap: None,
        }
    }
}

pub struct Attention {
    q_proj: Linear,
    /// `None` for a layer that shares an earlier one's keys and values.
    k_proj: Option<Linear>,
    /// `None` also where the values are the keys' projection.
    v_proj: Option<Linear>,
    o_proj: Linear,
    q_norm: Option<Norm>,
    k_norm: Option<Norm>,
    v_norm: Option<Norm>,
    shared_kv: Option<usize>,
    norm_after_rope: bool,
    /// `q_norm` and `k_norm` span all heads of their projection (`HeadNorm::RmsWhole`).
    whole_norm: bool,
    rope: Option<Rope>,
    query_scale: Option<QueryScale>,
    heads: i32,
    kv_heads: i32,
    head_dim: i32,
    scale: f32,
    window: Option<Window>,
    sinks: Option<Array>,
    output_gate: bool,
    softcap: Option<f32>,
    /// The group this layer's heads are split between, whose partial outputs it sums.
    shard: Option<TensorShard>,
}

impl AttentionSpec {
    /// This rank's share of the heads, the checkpoint's projections cut to them: the query,
    /// key and value rows of its heads and `o_proj`'s matching columns.
    fn sharded(
        self,
        weights: &mut Weights,
        config: &ModelConfig,
        prefix: &str,
        shard: &TensorShard,
    ) -> Result<Self, ModelError> {
        let unsplit = self.fused_qkv
            || self.shared_kv.is_some()
            || self.values_are_keys
            || matches!(self.head_norm, Some(HeadNorm::RmsWhole { .. }));
        let shares = (shard.share_of(self.heads), shard.share_of(self.kv_heads));
        let (Some(heads), Some(kv_heads), false) = (shares.0, shares.1, unsplit) else {
            return Err(ModelError::Config {
                path: config.path.clone(),
                message: format!(
                    "tensor parallel over {} ranks cannot split {prefix}'s {} query and {} key/value heads",
                    shard.ranks(),
                    self.heads,
                    self.kv_heads
                ),
            });
        };
        let q_rows = self.heads * self.head_dim * if self.output_gate { 2 } else { 1 };
        let kv_rows = self.kv_heads * self.head_dim;
        weights.shard_rows(&format!("{prefix}.q_proj"), &[q_rows])?;
        weights.shard_rows(&format!("{prefix}.k_proj"), &[kv_rows])?;
        weights.shard_rows(&format!("{prefix}.v_proj"), &[kv_rows])?;
        weights.shard_columns(&format!("{prefix}.o_proj"))?;
        weights.shard_axis(&format!("{prefix}.sinks"), 0, &[self.heads])?;
        Ok(Self {
            heads,
            kv_heads,
            ..self
        })
    }
}

impl Attention {
    /// Loads `{prefix}.q_proj` ... `{prefix}.o_proj` (or `{prefix}.qkv_proj`) and the head norms;
    /// a KV-shared layer's own key and value tensors, which checkpoints may carry, are dropped.
    pub fn load(
        weights: &mut Weights,
        config: &ModelConfig,
        prefix: &str,
        spec: AttentionSpec,
    ) -> Result<Self, ModelError> {
        let shard = weights.tensor_shard().cloned();
        let spec = match &shard {
            Some(shard) => spec.sharded(weights, config, prefix, shard)?,
            None => spec,
        };
        let q_width = spec.heads * spec.head_dim;
        let kv_width = spec.kv_heads * spec.head_dim;
        let quant = config.quantization;
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
        let q_rows = if spec.output_gate {
            2 * q_width
        } else {
            q_width
        };
        let (q_proj, k_proj, v_proj) = if spec.fused_qkv {
            let fused = linear(
                weights,
                "qkv_proj",
                q_width + 2 * kv_width,
                spec.hidden,
                spec.qkv_bias,
            )?;
            let [q, k, v] = fused
                .split_rows([q_width, kv_width, kv_width])
                .map_err(|source| weights.mlx_error("splitting qkv_proj", source))?;
            (q, Some(k), Some(v))
        } else if spec.shared_kv.is_some() {
            for name in ["k_proj", "v_proj", "k_norm"] {
                weights.discard_under(&format!("{prefix}.{name}."));
            }
            let q = linear(weights, "q_proj", q_rows, spec.hidden, spec.qkv_bias)?;
            (q, None, None)
        } else {
            let q = linear(weights, "q_proj", q_rows, spec.hidden, spec.qkv_bias)?;
            let k = linear(weights, "k_proj", kv_width, spec.hidden, spec.qkv_bias)?;
            let v = if spec.values_are_keys {
                None
            } else {
                Some(linear(
                    weights,
                    "v_proj",
                    kv_width,
                    spec.hidden,
                    spec.qkv_bias,
                )?)
            };
            (q, Some(k), v)
        };
        let o_proj = linear(weights, "o_proj", spec.hidden, q_width, spec.o_bias)?;
        let sinks = if spec.sinks {
            Some(weights.take_float(&format!("{prefix}.sinks"), &[spec.heads])?)
        } else {
            None
        };
        let norm = |weights: &mut Weights,
                    name: &str,
                    kind: Option<HeadNorm>|
         -> Result<Option<Norm>, ModelError> {
            let name = format!("{prefix}.{name}.weight");
            match kind {
                None => Ok(None),
                Some(HeadNorm::Rms { eps }) => {
                    Norm::rms(weights, &name, spec.head_dim, eps).map(Some)
                }
                Some(HeadNorm::RmsOffset { eps }) => {
                    Norm::rms_offset(weights, &name, spec.head_dim, eps).map(Some)
                }
                Some(HeadNorm::RmsUnweighted { eps }) => Ok(Some(Norm::RmsUnweighted { eps })),
                Some(HeadNorm::RmsWhole { eps }) => {
                    let heads = if name.ends_with("q_norm.weight") {
                        spec.heads
                    } else {
                        spec.kv_heads
                    };
                    Norm::rms(weights, &name, heads * spec.head_dim, eps).map(Some)
                }
            }
        };
        let owns_kv = spec.shared_kv.is_none();
        Ok(Self {
            q_proj,
            o_proj,
            q_norm: norm(weights, "q_norm", spec.head_norm)?,
            k_norm: norm(weights, "k_norm", spec.head_norm.filter(|_| owns_kv))?,
            v_norm: norm(weights, "v_norm", spec.value_norm.filter(|_| owns_kv))?,
            k_proj,
            v_proj,
            shared_kv: spec.shared_kv,
            norm_after_rope: spec.norm_after_rope,
            whole_norm: matches!(spec.head_norm, Some(HeadNorm::RmsWhole { .. })),
            rope: spec.rope,
            query_scale: spec.query_scale,
            heads: spec.heads,
            kv_heads: spec.kv_heads,
            head_dim: spec.head_dim,
            scale: spec.scale,
            window: spec.window,
            sinks,
            output_gate: spec.output_gate,
            softcap: spec.softcap,
            shard,
        })
    }

    /// `x` is `[1, positions, hidden]`: the new positions of several sequences one after the
    /// other, `lengths[i]` of them extending `caches[i]`. The projections run on all positions at
    /// once; each sequence's rotary offset, cache and attention are its own, so sequences of
    /// different lengths share a pass without padding or masks between them. The single-token
    /// sequences at the front (decode steps) rotate in one op.
    pub fn forward(
        &self,
        x: &Array,
        lengths: &[i32],
        caches: &mut [&mut KvCache],
    ) -> Result<Array, Exception> {
        let (queries, gate) = self.queries_and_gate(x)?;
        let projected = match &self.k_proj {
            Some(k_proj) => {
                let keys = k_proj.forward(x)?;
                let values = match &self.v_proj {
                    Some(v_proj) => v_proj.forward(x)?,
                    None => keys.clone(),
                };
                Some((keys, values))
            }
            None => None,
        };
        // A lone single-token input takes the per-sequence path, which rotates at a scalar offset,
        // unless decode rows attend on the host.
        // A one-token input with an image's positions of its own rotates apart from the rows.
        let singles = lengths
            .iter()
            .zip(caches.iter())
            .take_while(|(length, cache)| **length == 1 && cache.next_positions().is_none())
            .count();
        let grouped = match singles {
            1 if !kernels::rows_attend_on_host(x.dtype()) => 0,
            count => count,
        };
        let mut outputs = Vec::with_capacity(lengths.len() - grouped + 1);
        if grouped > 0 {
            let positions = |projected: &Array| projected.index((.., ..grouped as i32, ..));
            let key_values = projected
                .as_ref()
                .map(|(keys, values)| (positions(keys), positions(values)));
            outputs.push(self.attend_singles(
                &positions(&queries),
                key_values,
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
            let key_values = projected
                .as_ref()
                .map(|(keys, values)| (positions(keys), positions(values)));
            outputs.push(self.attend_sequence(&positions(&queries), key_values, cache)?);
            start += length;
        }
        let output = match outputs.as_slice() {
            [only] => only.clone(),
            _ => ops::concatenate(&outputs, 1)?,
        };
        let output = match gate {
            Some(gate) => ops::multiply(&output, &ops::sigmoid(&gate)?)?,
            None => output,
        };
        reduced(self.shard.as_ref(), self.o_proj.forward(&output)?)
    }

    /// The queries `[1, positions, heads * head_dim]`, and with an output gate its channels:
    /// `q_proj` gives each head `head_dim` queries then `head_dim` gate channels.
    fn queries_and_gate(&self, x: &Array) -> Result<(Array, Option<Array>), Exception> {
        let projected = self.q_proj.forward(x)?;
        if !self.output_gate {
            return Ok((projected, None));
        }
        let positions = projected.dim(1);
        let per_head = projected.reshape(&[1, positions, self.heads, -1])?;
        let halves = per_head.split_equal(2, -1)?;
        let flat = |half: &Array| half.reshape(&[1, positions, -1]);
        Ok((flat(&halves[0])?, Some(flat(&halves[1])?)))
    }

    /// `[1, positions, count * head_dim]` as `[rows, heads, positions / rows, head_dim]`, each
    /// head normalized where the architecture does.
    fn heads(
        projected: &Array,
        rows: i32,
        count: i32,
        norm: Option<&Norm>,
    ) -> Result<Array, Exception> {
        let split = projected.reshape(&[rows, -1, count, projected.dim(2) / count])?;
        let split = match norm {
            Some(norm) => norm.forward(&split)?,
            None => split,
        };
        split.transpose_axes(&[0, 2, 1, 3])
    }

    /// The earlier layer whose keys and values this one attends over, if it holds none.
    pub fn shared_kv(&self) -> Option<usize> {
        self.shared_kv
    }

    /// What this layer caches per position.
    pub fn cache_shape(&self) -> CacheShape {
        CacheShape::heads(self.kv_heads, self.head_dim)
    }

    /// An empty cache of the kind this layer needs: a sliding window's lets go of what no later
    /// query sees; a chunk's keys are cut by absolute position, so its cache keeps them all.
    /// The window of a sliding-window layer, whose cache lets go of older positions.
    pub fn sliding_window(&self) -> Option<i32> {
        self.window.and_then(Window::sliding)
    }

    pub fn new_cache(&self) -> KvCache {
        match self.window {
            Some(Window::Sliding(window)) => KvCache::rotating(window),
            Some(Window::Chunk(_)) | None => KvCache::default(),
        }
    }

    /// [`Self::heads`] rotated by `rotate`, normalized before or after as the architecture does.
    fn rotated_heads(
        &self,
        projected: &Array,
        rows: i32,
        count: i32,
        norm: Option<&Norm>,
        rotate: impl FnOnce(Array) -> Result<Array, Exception>,
    ) -> Result<Array, Exception> {
        if let Some(norm) = norm.filter(|_| self.whole_norm) {
            return rotate(Self::heads(&norm.forward(projected)?, rows, count, None)?);
        }
        if !self.norm_after_rope {
            return rotate(Self::heads(projected, rows, count, norm)?);
        }
        let rotated = rotate(Self::heads(projected, rows, count, None)?)?;
        match norm {
            Some(norm) => norm.forward(&rotated),
            None => Ok(rotated),
        }
    }

    fn rotate(&self, x: Array, offset: i32) -> Result<Array, Exception> {
        match &self.rope {
            Some(rope) => rope.apply(&x, offset),
            None => Ok(x),
        }
    }

    /// `x` rotated at an image's positions (`[3, positions]`) by a multi-section rotation.
    fn rotate_at(&self, x: Array, positions: &Array) -> Result<Array, Exception> {
        match &self.rope {
            Some(rope) => rope.apply_at(&x, positions),
            None => Ok(x),
        }
    }

    fn rotate_rows(&self, x: Array, offsets: &Array) -> Result<Array, Exception> {
        match &self.rope {
            Some(rope) => rope.apply_rows(&x, offsets),
            None => Ok(x),
        }
    }

    /// Whether the host kernels compute this layer's attention: they have neither sinks nor
    /// capped scores.
    fn host_can_attend(&self) -> bool {
        self.sinks.is_none() && self.softcap.is_none()
    }

    /// MLX's attention of rotated `queries` over `keys` and `values`, the new positions last,
    /// the runs in `both_ways` (indices into `keys`) seeing each other both ways.
    fn attend(
        &self,
        queries: &Array,
        keys: &Array,
        values: &Array,
        both_ways: &[(i32, i32)],
    ) -> Result<Array, Exception> {
        let seen = kernels::Seen {
            window: self.window,
            both_ways,
        };
        match self.softcap {
            Some(cap) => {
                kernels::softcapped_attention(queries, keys, values, self.scale, cap, seen)
            }
            None => {
                kernels::attention(queries, keys, values, self.scale, seen, self.sinks.as_ref())
            }
        }
    }

    /// One sequence's new positions (`[1, positions, width]` each) through its own attention;
    /// returns `[1, positions, heads * head_dim]`. Without keys and values of its own
    /// (`key_values` `None`) the layer reads `cache`, which its source layer already extended by
    /// these positions.
    fn attend_sequence(
        &self,
        queries: &Array,
        key_values: Option<(Array, Array)>,
        cache: &mut KvCache,
    ) -> Result<Array, Exception> {
        let length = queries.dim(1);
        // A KV-shared layer's source already extended the cache by these positions.
        let before = match key_values {
            Some(_) => 0,
            None => length,
        };
        let offset = cache.offset() - before;
        let rotary_offset = cache.rotary_offset() - before;
        let positions = cache.next_positions().cloned();
        let rotate = |x| match &positions {
            Some(positions) => self.rotate_at(x, positions),
            None => self.rotate(x, rotary_offset),
        };
        let queries = self.rotated_heads(queries, 1, self.heads, self.q_norm.as_ref(), rotate)?;
        let queries = match &self.query_scale {
            Some(scale) => scale.apply(&queries, offset)?,
            None => queries,
        };
        let (all_keys, all_values) = match key_values {
            Some((keys, values)) => {
                let keys =
                    self.rotated_heads(&keys, 1, self.kv_heads, self.k_norm.as_ref(), rotate)?;
                let values = Self::heads(&values, 1, self.kv_heads, self.v_norm.as_ref())?;
                cache.update_and_fetch(&keys, &values)?
            }
            None => cache.held().ok_or_else(|| Exception::from(SOURCE_EMPTY))?,
        };
        // The runs that see each other both ways, as indices into the keys, the last of which
        // is at `offset + length - 1`.
        let first_key = cache.offset() - all_keys.dim(2);
        let both_ways: Vec<(i32, i32)> = cache
            .both_ways()
            .iter()
            .map(|&(start, end)| (start - first_key, end - first_key))
            .collect();
        let on_host = if self.host_can_attend() && both_ways.is_empty() {
            kernels::attend_chunk(&queries, cache, self.kv_heads, self.scale, self.window)?
        } else {
            None
        };
        let output = match on_host {
            Some(output) => output,
            None => self.attend(&queries, &all_keys, &all_values, &both_ways)?,
        };
        output
            .transpose_axes(&[0, 2, 1, 3])?
            .reshape(&[1, length, -1])
    }

    /// One new position for each of several sequences (`[1, rows, width]` each), rotated in one
    /// op at each row's offset; each row attends over its own cache (its source layer's, already
    /// extended, when `key_values` is `None`). Returns `[1, rows, heads * head_dim]`.
    fn attend_singles(
        &self,
        queries: &Array,
        key_values: Option<(Array, Array)>,
        caches: &mut [&mut KvCache],
    ) -> Result<Array, Exception> {
        let rows = caches.len() as i32;
        let extended = i32::from(key_values.is_none());
        let offsets = |offset: fn(&KvCache) -> i32| {
            let offsets: Vec<i32> = caches
                .iter()
                .map(|cache| offset(cache) - extended)
                .collect();
            Array::from_slice(&offsets, &[rows])
        };
        let rotary_offsets = offsets(KvCache::rotary_offset);
        let rotate = |x| self.rotate_rows(x, &rotary_offsets);
        let queries =
            self.rotated_heads(queries, rows, self.heads, self.q_norm.as_ref(), rotate)?;
        let queries = match &self.query_scale {
            Some(scale) => scale.apply_rows(&queries, &offsets(KvCache::offset))?,
            None => queries,
        };
        if let Some((keys, values)) = key_values {
            let keys =
                self.rotated_heads(&keys, rows, self.kv_heads, self.k_norm.as_ref(), rotate)?;
            let values = Self::heads(&values, rows, self.kv_heads, self.v_norm.as_ref())?;
            let keys = keys.split_equal(rows, 0)?;
            let values = values.split_equal(rows, 0)?;
            for (cache, (keys, values)) in caches.iter_mut().zip(keys.iter().zip(&values)) {
                cache.update_and_fetch(keys, values)?;
            }
        }
        if self.host_can_attend()
            && let Some(output) = kernels::attend_rows(
                &queries,
                caches,
                self.heads,
                self.kv_heads,
                self.scale,
                self.window,
            )?
        {
            return Ok(output);
        }
        let per_row = caches
            .iter()
            .zip(queries.split_equal(rows, 0)?)
            .map(|(cache, queries)| {
                let (keys, values) = cache
                    .held()
                    .ok_or_else(|| Exception::from("a decode row's cache is empty"))?;
                self.attend(&queries, &keys, &values, &[])
            })
            .collect::<Result<Vec<_>, _>>()?;
        ops::concatenate(&per_row, 0)?
            .transpose_axes(&[0, 2, 1, 3])?
            .reshape(&[1, rows, -1])
    }
}

const SOURCE_EMPTY: &str = "a KV-shared layer's source cache is empty";
