//! One pre-norm residual layer: `h = x + attn(norm(x))`, `out = h + ffn(norm(h))`, each block's
//! output optionally normalized (Gemma) or scaled (Granite) before its sum.

use mlx_rs::Array;
use mlx_rs::error::Exception;
use mlx_rs::ops;

use super::attention::Attention;
use super::attention::AttentionSpec;
use super::mlp::Mlp;
use super::moe::Moe;
use super::norm::Norm;
use crate::model::config::ModelConfig;
use crate::model::error::ModelError;
use crate::model::kv_cache::KvCache;
use crate::model::shape::FeedForwardShape;
use crate::model::weights::Weights;

pub enum FeedForward {
    Dense(Mlp),
    Experts(Box<Moe>),
}

impl FeedForward {
    pub fn experts(moe: Moe) -> Self {
        Self::Experts(Box::new(moe))
    }

    pub fn shape(&self) -> FeedForwardShape {
        match self {
            Self::Dense(mlp) => FeedForwardShape::Dense { inner: mlp.inner() },
            Self::Experts(moe) => moe.shape(),
        }
    }

    fn forward(&self, x: &Array) -> Result<Array, Exception> {
        match self {
            Self::Dense(mlp) => mlp.forward(x),
            Self::Experts(moe) => moe.forward(x),
        }
    }
}

pub struct DecoderLayer {
    pub input_norm: Norm,
    pub attention: Attention,
    /// Normalizes the attention's output before the residual sum.
    pub post_attention_norm: Option<Norm>,
    pub pre_feed_forward_norm: Norm,
    pub feed_forward: FeedForward,
    pub post_feed_forward_norm: Option<Norm>,
    /// Multiplies each block's output before the residual sum.
    pub residual_scale: Option<f32>,
}

impl DecoderLayer {
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
        let prefix = format!("model.layers.{index}");
        let (hidden, eps) = (config.hidden_size, config.rms_norm_eps);
        let norm = |weights: &mut Weights, name: &str| {
            Norm::rms(weights, &format!("{prefix}.{name}.weight"), hidden, eps)
        };
        Ok(Self {
            input_norm: norm(weights, "input_layernorm")?,
            attention: Attention::load(weights, config, &format!("{prefix}.self_attn"), attention)?,
            post_attention_norm: None,
            pre_feed_forward_norm: norm(weights, "post_attention_layernorm")?,
            feed_forward: feed_forward(weights, &prefix)?,
            post_feed_forward_norm: None,
            residual_scale: None,
        })
    }

    /// `x` is `[1, positions, hidden]`: the new positions of several sequences one after the
    /// other, `lengths[i]` of them extending `caches[i]`.
    pub fn forward(
        &self,
        x: &Array,
        lengths: &[i32],
        caches: &mut [&mut KvCache],
    ) -> Result<Array, Exception> {
        let attended = self
            .attention
            .forward(&self.input_norm.forward(x)?, lengths, caches)?;
        let attended = normalized(attended, self.post_attention_norm.as_ref())?;
        let h = ops::add(x, &scaled(attended, self.residual_scale)?)?;
        let fed = self
            .feed_forward
            .forward(&self.pre_feed_forward_norm.forward(&h)?)?;
        let fed = normalized(fed, self.post_feed_forward_norm.as_ref())?;
        ops::add(&h, &scaled(fed, self.residual_scale)?)
    }
}

/// `x · factor` in `x`'s own dtype, as mlx-lm's multiply by a Python float is.
pub fn scaled(x: Array, factor: Option<f32>) -> Result<Array, Exception> {
    match factor {
        Some(factor) => ops::multiply(&x, &Array::from_f32(factor).as_dtype(x.dtype())?),
        None => Ok(x),
    }
}

fn normalized(x: Array, norm: Option<&Norm>) -> Result<Array, Exception> {
    match norm {
        Some(norm) => norm.forward(&x),
        None => Ok(x),
    }
}
