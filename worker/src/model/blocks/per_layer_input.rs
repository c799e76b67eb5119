//! Gemma 4's per-layer inputs (mlx-lm's `gemma4_text.py`): besides the residual stream, each layer
//! gets a small vector per position, made once per pass from the token (a table of its own) and
//! from the embedded input (a projection), which the layer gates by its output and adds to it.

use mlx_rs::Array;
use mlx_rs::error::Exception;
use mlx_rs::ops;

use super::linear::{Embedding, Linear};
use super::mlp::gelu_tanh;
use super::norm::Norm;
use super::scaled::scaled;
use crate::model::config::ModelConfig;
use crate::model::error::ModelError;
use crate::model::weights::Weights;

/// The model-level half: every layer's input, `[.., layers, width]`.
pub struct PerLayerInputs {
    embed_tokens_per_layer: Embedding,
    per_layer_model_projection: Linear,
    per_layer_projection_norm: Norm,
    layers: i32,
    width: i32,
    /// The token whose table row an image's tokens take (transformers' `pad_token_id`).
    pub pad_token: u32,
}

impl PerLayerInputs {
    /// `model.embed_tokens_per_layer` (`vocab` rows), `model.per_layer_model_projection` and
    /// `model.per_layer_projection_norm`, for `width` values per layer.
    pub fn load(
        weights: &mut Weights,
        config: &ModelConfig,
        vocab: i32,
        width: i32,
        pad_token: u32,
    ) -> Result<Self, ModelError> {
        let (layers, hidden, quant) = (config.num_layers, config.hidden_size, config.quantization);
        Ok(Self {
            embed_tokens_per_layer: Embedding::load(
                weights,
                "model.embed_tokens_per_layer",
                vocab,
                layers * width,
                quant,
            )?,
            per_layer_model_projection: Linear::load(
                weights,
                "model.per_layer_model_projection",
                layers * width,
                hidden,
                false,
                quant,
            )?,
            per_layer_projection_norm: Norm::rms(
                weights,
                "model.per_layer_projection_norm.weight",
                width,
                config.rms_norm_eps,
            )?,
            layers,
            width,
            pad_token,
        })
    }

    /// `[1, positions, layers, width]` for the tokens `ids` (`[1, positions]`), whose scaled
    /// embeddings are `embedded`.
    pub fn forward(&self, ids: &Array, embedded: &Array) -> Result<Array, Exception> {
        let per_layer = [self.layers, self.width];
        let from_tokens = scaled(
            self.embed_tokens_per_layer.lookup(ids)?,
            Some(f64::from(self.width).sqrt() as f32),
        )?;
        let from_tokens = ops::unflatten(&from_tokens, -1, &per_layer)?;
        let projected = scaled(
            self.per_layer_model_projection.forward(embedded)?,
            Some(f64::from(embedded.dim(-1)).powf(-0.5) as f32),
        )?;
        let projected = self
            .per_layer_projection_norm
            .forward(&ops::unflatten(&projected, -1, &per_layer)?)?;
        scaled(
            ops::add(&projected, &from_tokens)?,
            Some(std::f32::consts::FRAC_1_SQRT_2),
        )
    }
}

/// The layer's half: `h + norm(projection(gelu(gate(h)) · input))`.
pub struct PerLayerGate {
    per_layer_input_gate: Linear,
    per_layer_projection: Linear,
    post_per_layer_input_norm: Norm,
}

impl PerLayerGate {
    /// `{prefix}.per_layer_input_gate`, `{prefix}.per_layer_projection` and
    /// `{prefix}.post_per_layer_input_norm` of a layer with `width` values of input.
    pub fn load(
        weights: &mut Weights,
        config: &ModelConfig,
        prefix: &str,
        width: i32,
    ) -> Result<Self, ModelError> {
        let (hidden, quant) = (config.hidden_size, config.quantization);
        let mut linear = |name: &str, out: i32, input: i32| {
            Linear::load(
                weights,
                &format!("{prefix}.{name}"),
                out,
                input,
                false,
                quant,
            )
        };
        Ok(Self {
            per_layer_input_gate: linear("per_layer_input_gate", width, hidden)?,
            per_layer_projection: linear("per_layer_projection", hidden, width)?,
            post_per_layer_input_norm: Norm::rms(
                weights,
                &format!("{prefix}.post_per_layer_input_norm.weight"),
                hidden,
                config.rms_norm_eps,
            )?,
        })
    }

    /// `h` (`[1, positions, hidden]`) plus `input` (`[1, positions, width]`) gated by it.
    pub fn forward(&self, h: &Array, input: &Array) -> Result<Array, Exception> {
        let gate = gelu_tanh(&self.per_layer_input_gate.forward(h)?)?;
        let gated = self
            .per_layer_projection
            .forward(&ops::multiply(&gate, input)?)?;
        ops::add(h, &self.post_per_layer_input_norm.forward(&gated)?)
    }
}
