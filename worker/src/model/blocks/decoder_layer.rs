//! One pre-norm residual layer: `h = x + mix(norm(x))`, `out = h + ffn(norm(h))`, where the
//! token mixer is attention, a gated DeltaNet (Qwen3-Next's linear layers), a short
//! convolution (LFM2's) or a Mamba-2 mixer (Nemotron-H's, Granite 4's), each block's output optionally normalized (Gemma) or scaled (Granite)
//! before its sum; Gemma 4 then adds its gated per-layer input and scales the whole output.

use mlx_rs::Array;
use mlx_rs::error::Exception;
use mlx_rs::ops;

use super::attention::Attention;
use super::attention::AttentionSpec;
use super::gated_delta::GatedDeltaNet;
use super::latent_attention::LatentAttention;
use super::mamba2::Mamba2;
use super::mlp::Mlp;
use super::moe::Moe;
use super::norm::Norm;
use super::per_layer_input::PerLayerGate;
use super::scaled::scaled;
use super::short_conv::ShortConv;
use crate::model::config::ModelConfig;
use crate::model::error::ModelError;
use crate::model::kv_cache::KvCache;
use crate::model::shape::{CacheShape, FeedForwardShape, LayerCache, StateShape};
use crate::model::weights::Weights;

pub enum FeedForward {
    Dense(Box<Mlp>),
    Experts(Box<Moe>),
    DenseAndExperts(Box<DenseAndExperts>),
    /// None: a Nemotron-H mixer followed by another mixer is a layer of its own.
    Absent,
}

/// Gemma 4's mixture-of-experts block: a dense MLP and the experts side by side, each output
/// normalized, summed. The experts take their own norm of the block's input; the router takes
/// that input as it is.
pub struct DenseAndExperts {
    pub mlp: Mlp,
    pub post_mlp_norm: Norm,
    pub pre_experts_norm: Norm,
    pub experts: Moe,
    pub post_experts_norm: Norm,
}

impl FeedForward {
    pub fn dense(mlp: Mlp) -> Self {
        Self::Dense(Box::new(mlp))
    }

    pub fn experts(moe: Moe) -> Self {
        Self::Experts(Box::new(moe))
    }

    pub fn shape(&self) -> FeedForwardShape {
        match self {
            Self::Dense(mlp) => FeedForwardShape::Dense { inner: mlp.inner() },
            Self::Absent => FeedForwardShape::Dense { inner: 0 },
            Self::Experts(moe) => moe.shape(),
            // The dense MLP runs on every position, as a shared expert does.
            Self::DenseAndExperts(both) => match both.experts.shape() {
                FeedForwardShape::Experts {
                    experts,
                    top_k,
                    inner,
                    shared_inner,
                } => FeedForwardShape::Experts {
                    experts,
                    top_k,
                    inner,
                    shared_inner: shared_inner + both.mlp.inner(),
                },
                dense => dense,
            },
        }
    }

    /// `normed` is the layer's pre-feed-forward norm of `x`.
    fn forward(&self, normed: &Array, x: &Array) -> Result<Array, Exception> {
        match self {
            Self::Dense(mlp) => mlp.forward(normed),
            // `DecoderLayer::forward` skips the block.
            Self::Absent => Ok(x.clone()),
            Self::Experts(moe) => moe.forward(normed),
            Self::DenseAndExperts(both) => {
                let dense = both.post_mlp_norm.forward(&both.mlp.forward(normed)?)?;
                let experts = both
                    .experts
                    .forward_routed_by(&both.pre_experts_norm.forward(x)?, x)?;
                ops::add(&dense, &both.post_experts_norm.forward(&experts)?)
            }
        }
    }
}

/// What mixes a position with the ones before it.
pub enum Mixer {
    Attention(Box<Attention>),
    /// Linear attention with a recurrent state.
    GatedDelta(Box<GatedDeltaNet>),
    /// Attention over a compressed latent cache (DeepSeek V3).
    LatentAttention(Box<LatentAttention>),
    /// A gated causal convolution over the last few positions (LFM2).
    ShortConv(Box<ShortConv>),
    /// A selective state-space scan (Nemotron-H, Granite 4).
    Mamba2(Box<Mamba2>),
}

impl From<Attention> for Mixer {
    fn from(attention: Attention) -> Self {
        Self::Attention(Box::new(attention))
    }
}

impl Mixer {
    /// The earlier layer whose keys and values this one reads (Gemma 4's KV-shared layers).
    pub fn shared_kv(&self) -> Option<usize> {
        match self {
            Self::Attention(attention) => attention.shared_kv(),
            Self::GatedDelta(_)
            | Self::LatentAttention(_)
            | Self::ShortConv(_)
            | Self::Mamba2(_) => None,
        }
    }

    /// A sliding-window attention layer's window.
    pub fn sliding_window(&self) -> Option<i32> {
        match self {
            Self::Attention(attention) => attention.sliding_window(),
            Self::GatedDelta(_)
            | Self::LatentAttention(_)
            | Self::ShortConv(_)
            | Self::Mamba2(_) => None,
        }
    }

    /// A recurrent layer's state, constant in the sequence length.
    pub fn recurrent_state(&self) -> Option<StateShape> {
        match self {
            Self::Attention(_) | Self::LatentAttention(_) => None,
            Self::GatedDelta(delta) => Some(delta.state_shape()),
            Self::ShortConv(conv) => Some(conv.state_shape()),
            Self::Mamba2(mamba) => Some(mamba.state_shape()),
        }
    }

    /// What this layer keeps for a sequence.
    pub fn layer_cache(&self) -> LayerCache {
        if self.shared_kv().is_some() {
            return LayerCache::Shared;
        }
        match self.recurrent_state() {
            Some(state) => LayerCache::State(state),
            None => LayerCache::Positions {
                shape: self.cache_shape(),
                window: self.sliding_window(),
            },
        }
    }

    /// What this layer caches per position; a recurrent layer caches no positions.
    pub fn cache_shape(&self) -> CacheShape {
        match self {
            Self::Attention(attention) => attention.cache_shape(),
            Self::LatentAttention(attention) => attention.cache_shape(),
            Self::GatedDelta(_) | Self::ShortConv(_) | Self::Mamba2(_) => CacheShape::heads(0, 0),
        }
    }

    /// An empty cache of the kind this layer needs.
    pub fn new_cache(&self) -> KvCache {
        match self {
            Self::Attention(attention) => attention.new_cache(),
            Self::GatedDelta(delta) => delta.new_cache(),
            Self::LatentAttention(_) => KvCache::default(),
            Self::ShortConv(conv) => conv.new_cache(),
            Self::Mamba2(mamba) => mamba.new_cache(),
        }
    }

    fn forward(
        &self,
        x: &Array,
        lengths: &[i32],
        caches: &mut [&mut KvCache],
    ) -> Result<Array, Exception> {
        match self {
            Self::Attention(attention) => attention.forward(x, lengths, caches),
            Self::GatedDelta(delta) => delta.forward(x, lengths, caches),
            Self::LatentAttention(attention) => attention.forward(x, lengths, caches),
            Self::ShortConv(conv) => conv.forward(x, lengths, caches),
            Self::Mamba2(mamba) => mamba.forward(x, lengths, caches),
        }
    }
}

pub struct DecoderLayer {
    pub input_norm: Norm,
    pub mixer: Mixer,
    /// Normalizes the attention's output before the residual sum.
    pub post_attention_norm: Option<Norm>,
    pub pre_feed_forward_norm: Norm,
    pub feed_forward: FeedForward,
    pub post_feed_forward_norm: Option<Norm>,
    /// Multiplies each block's output before the residual sum.
    pub residual_scale: Option<f32>,
    /// Adds this layer's per-layer input, gated by its output (Gemma 4).
    pub per_layer_gate: Option<PerLayerGate>,
    /// Multiplies the layer's output (Gemma 4's `layer_scalar`).
    pub output_scale: Option<Array>,
}

/// A layer's four norms where each block's output is normalized before its residual sum too
/// (Gemma 3, GLM-4, OLMo 3): before and after the token mixer, before and after the MLP.
pub struct SandwichNorms {
    pub input: Norm,
    pub post_attention: Norm,
    pub pre_feed_forward: Norm,
    pub post_feed_forward: Norm,
}

impl DecoderLayer {
    /// A layer with [`SandwichNorms`] and nothing else around its blocks.
    pub fn sandwich(norms: SandwichNorms, mixer: Mixer, feed_forward: FeedForward) -> Self {
        Self {
            input_norm: norms.input,
            mixer,
            post_attention_norm: Some(norms.post_attention),
            pre_feed_forward_norm: norms.pre_feed_forward,
            feed_forward,
            post_feed_forward_norm: Some(norms.post_feed_forward),
            residual_scale: None,
            per_layer_gate: None,
            output_scale: None,
        }
    }

    /// Layer `index` with Llama's names: `input_layernorm`, `self_attn`, and
    /// `post_attention_layernorm` before the feed-forward block that `feed_forward` loads from
    /// the layer's prefix.
    pub fn load(
        weights: &mut Weights,
        config: &ModelConfig,
        index: i32,
        attention: AttentionSpec,
        feed_forward: impl FnOnce(&mut Weights, &str) -> Result<FeedForward, ModelError>,
    ) -> Result<Self, ModelError> {
        let prefix = format!("model.layers.{index}.self_attn");
        let attention = Attention::load(weights, config, &prefix, attention)?;
        Self::load_around(weights, config, index, attention.into(), feed_forward)
    }

    /// Layer `index` around `mixer`, already loaded from `self_attn`, with Llama's norms.
    pub fn load_around(
        weights: &mut Weights,
        config: &ModelConfig,
        index: i32,
        mixer: Mixer,
        feed_forward: impl FnOnce(&mut Weights, &str) -> Result<FeedForward, ModelError>,
    ) -> Result<Self, ModelError> {
        let prefix = format!("model.layers.{index}");
        let (hidden, eps) = (config.hidden_size, config.rms_norm_eps);
        let norm = |weights: &mut Weights, name: &str| {
            Norm::rms(weights, &format!("{prefix}.{name}.weight"), hidden, eps)
        };
        Ok(Self {
            input_norm: norm(weights, "input_layernorm")?,
            mixer,
            post_attention_norm: None,
            pre_feed_forward_norm: norm(weights, "post_attention_layernorm")?,
            feed_forward: feed_forward(weights, &prefix)?,
            post_feed_forward_norm: None,
            residual_scale: None,
            per_layer_gate: None,
            output_scale: None,
        })
    }

    /// `x` is `[1, positions, hidden]`: the new positions of several sequences one after the
    /// other, `lengths[i]` of them extending `caches[i]`; `per_layer_input` is this layer's
    /// `[1, positions, width]` where the model has per-layer inputs.
    pub fn forward(
        &self,
        x: &Array,
        lengths: &[i32],
        caches: &mut [&mut KvCache],
        per_layer_input: Option<&Array>,
    ) -> Result<Array, Exception> {
        let attended = self
            .mixer
            .forward(&self.input_norm.forward(x)?, lengths, caches)?;
        let attended = normalized(attended, self.post_attention_norm.as_ref())?;
        let h = ops::add(x, &scaled(attended, self.residual_scale)?)?;
        let out = if matches!(self.feed_forward, FeedForward::Absent) {
            h
        } else {
            let fed = self
                .feed_forward
                .forward(&self.pre_feed_forward_norm.forward(&h)?, &h)?;
            let fed = normalized(fed, self.post_feed_forward_norm.as_ref())?;
            ops::add(&h, &scaled(fed, self.residual_scale)?)?
        };
        let out = match (&self.per_layer_gate, per_layer_input) {
            (Some(gate), Some(input)) => gate.forward(&out, input)?,
            _ => out,
        };
        match &self.output_scale {
            Some(scale) => ops::multiply(&out, scale),
            None => Ok(out),
        }
    }
}

fn normalized(x: Array, norm: Option<&Norm>) -> Result<Array, Exception> {
    match norm {
        Some(norm) => norm.forward(&x),
        None => Ok(x),
    }
}
