//! Llama 2/3 and Mistral (mlx-lm's `llama.py`): optional biases on the attention and the MLP,
//! and layers that `layer_types` marks `sliding_attention` attend within `sliding_window`
//! (a lone `sliding_window` without `layer_types`, as Mistral 7B v0.1 has, is ignored, as mlx-lm
//! ignores it).
//! Architectures that are Llama with a twist (SmolLM3, Granite) wire it through [`layers`].

use serde::Deserialize;

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

/// Llama's own keys, defaulting as transformers' `LlamaConfig` does; the types built on its
/// layers read them too, and their classes default them alike.
#[derive(Deserialize, Default)]
#[serde(default)]
struct Args {
    attention_bias: bool,
    mlp_bias: bool,
    /// OLMo 3's class computes a pattern without it; Llama's and the others' have none.
    layer_types: Option<Vec<String>>,
    /// Mistral's and OLMo 3's classes default it to 4096; Llama's and the others' have none,
    /// nor has mlx-lm. `null` (Qwen's classes write it so without `use_sliding_window`): no
    /// window, the sliding layers attending over all positions as transformers' do.
    #[serde(deserialize_with = "ModelConfig::present")]
    sliding_window: Option<Option<i32>>,
}

pub fn build(config: &ModelConfig, weights: &mut Weights) -> Result<Decoder, ModelError> {
    let layers = layers(config, weights, |_, attention| attention)?;
    Decoder::load(weights, config, layers)
}

/// Each layer's window: `sliding_window` for the layers `layer_types` marks `sliding_attention`.
pub(super) fn windows(config: &ModelConfig) -> Result<Vec<Option<Window>>, ModelError> {
    windows_of(config, &config.args()?)
}

fn windows_of(config: &ModelConfig, args: &Args) -> Result<Vec<Option<Window>>, ModelError> {
    let olmo3 = config.model_type == "olmo3";
    // transformers' OLMo 3 default: three sliding layers, then a full one.
    let sliding = |index: usize| match &args.layer_types {
        Some(kinds) => kinds
            .get(index)
            .is_some_and(|kind| kind == "sliding_attention"),
        None => olmo3 && !(index + 1).is_multiple_of(4),
    };
    let window = match (args.sliding_window, config.model_type.as_str()) {
        (Some(stated), _) => Ok(stated),
        (None, "mistral" | "olmo3") => Ok(Some(4096)),
        (None, _) => Err(()),
    };
    (0..config.num_layers as usize)
        .map(|index| match (sliding(index), window) {
            (false, _) => Ok(None),
            (true, Ok(window)) => Ok(window.map(Window::Sliding)),
            (true, Err(())) => Err(ModelError::Config {
                path: config.path.clone(),
                message: format!("{} needs sliding_window", config.model_type),
            }),
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
    let args: Args = config.args()?;
    let rope = Rope::for_config(config, weights)?;
    let (attention_bias, mlp_bias) = (args.attention_bias, args.mlp_bias);
    let windows = windows_of(config, &args)?;
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
                    .map(FeedForward::dense)
            })
        })
        .collect()
}
