//! Llama 2/3 and Mistral (mlx-lm's `llama.py`): optional biases on the attention and the MLP,
//! and layers that `layer_types` marks `sliding_attention` attend within `sliding_window`
//! (a lone `sliding_window` without `layer_types`, as Mistral 7B v0.1 has, is ignored, as mlx-lm
//! ignores it).
//! Architectures that are Llama with a twist (SmolLM3, Granite) wire it through [`layers`].

use crate::model::blocks::attention::AttentionSpec;
use crate::model::blocks::decoder_layer::{DecoderLayer, FeedForward};
use crate::model::blocks::mlp::Mlp;
use crate::model::blocks::rope::Rope;
use crate::model::config::ModelConfig;
use crate::model::decoder::Decoder;
use crate::model::error::ModelError;
use crate::model::shape::LayerCache;
use crate::model::weights::Weights;
use crate::model::window::Window;

pub fn build(config: &ModelConfig, weights: &mut Weights) -> Result<Decoder, ModelError> {
    let layers = layers(config, weights, |_, attention| attention)?;
    Decoder::load(weights, config, layers)
}

/// Each layer's window: `sliding_window` for the layers `layer_types` marks `sliding_attention`.
pub(super) fn windows(config: &ModelConfig) -> Result<Vec<Option<Window>>, ModelError> {
    let layer_types: Vec<String> = config.key_or_else("layer_types", || {
        // transformers' OLMo 3 default: three sliding layers, then a full one.
        Ok(if config.model_type == "olmo3" {
            (1..=config.num_layers)
                .map(|layer| {
                    let kind = if layer % 4 == 0 { "full" } else { "sliding" };
                    format!("{kind}_attention")
                })
                .collect()
        } else {
            Vec::new()
        })
    })?;
    (0..config.num_layers as usize)
        .map(|index| {
            let sliding = layer_types
                .get(index)
                .is_some_and(|kind| kind == "sliding_attention");
            Ok(if sliding {
                // transformers' default where its class has one; Llama's and the others' have
                // none, nor has mlx-lm.
                Some(Window::Sliding(config.key_or_else(
                    "sliding_window",
                    || match config.model_type.as_str() {
                        "mistral" | "olmo3" => Ok(4096),
                        _ => config.required("sliding_window"),
                    },
                )?))
            } else {
                None
            })
        })
        .collect()
}

/// What each layer of Llama's (or OLMo 3's) keeps for a sequence.
pub fn caches(config: &ModelConfig) -> Result<Vec<LayerCache>, ModelError> {
    super::attention_caches(config, windows(config)?)
}

/// Llama's layers, each layer's attention adjusted by `adjust(index, spec)`.
pub fn layers(
    config: &ModelConfig,
    weights: &mut Weights,
    adjust: impl Fn(i32, AttentionSpec) -> AttentionSpec,
) -> Result<Vec<DecoderLayer>, ModelError> {
    let rope = Rope::for_config(config, weights)?;
    let attention_bias = config.key_or("attention_bias", false)?;
    let mlp_bias = config.key_or("mlp_bias", false)?;
    let windows = windows(config)?;
    (0..config.num_layers)
        .map(|index| {
            let attention = AttentionSpec {
                qkv_bias: attention_bias,
                o_bias: attention_bias,
                window: windows[index as usize],
                ..AttentionSpec::new(config, rope.clone())
            };
            let attention = adjust(index, attention);
            DecoderLayer::load(weights, config, index, attention, |weights, prefix| {
                let mlp = format!("{prefix}.mlp");
                Mlp::load(weights, config, &mlp, config.intermediate_size()?, mlp_bias)
                    .map(FeedForward::Dense)
            })
        })
        .collect()
}
