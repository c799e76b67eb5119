//! Llama 4's text-only form, as MobileLLM-R1 has it (mlx-lm's `llama4_text.py`): the layers
//! `no_rope_layers` marks with 0 have no rotary embedding (NoPE), the others rotate adjacent
//! pairs (`traditional`); query and key heads are RMS-normalized without a weight before the
//! rotation (`use_qk_norm`); the MLP is `feed_forward`, `intermediate_size_mlp` wide. An untied
//! head is `output`.
//!
//! transformers' `llama4_text` is also Scout's and Maverick's text model on its own
//! (`Llama4ForCausalLM`), with experts in the layers `moe_layers` lists (without the key, every
//! `interleave_moe_layer_step`-th, as transformers fills it in): that one is built as the
//! `llama4` wrapper's text model.

use serde::Deserialize;

use crate::model::blocks::attention::{AttentionSpec, HeadNorm};
use crate::model::blocks::decoder_layer::{DecoderLayer, FeedForward};
use crate::model::blocks::linear::Linear;
use crate::model::blocks::mlp::Mlp;
use crate::model::blocks::moe::MoeSpec;
use crate::model::blocks::rope::Rope;
use crate::model::config::ModelConfig;
use crate::model::decoder::Decoder;
use crate::model::error::ModelError;
use crate::model::weights::Weights;

use super::llama4;

/// The text model's own keys, defaulting as transformers' `Llama4TextConfig` does.
#[derive(Deserialize)]
#[serde(default)]
struct Args {
    /// `None`: every `interleave_moe_layer_step`-th layer, so experts by default.
    moe_layers: Option<Vec<i32>>,
    interleave_moe_layer_step: i32,
    /// `None` or empty: all but every `no_rope_layer_interval`-th layer rotate.
    no_rope_layers: Option<Vec<i32>>,
    no_rope_layer_interval: i32,
    use_qk_norm: bool,
    intermediate_size_mlp: i32,
}

impl Default for Args {
    fn default() -> Self {
        Self {
            moe_layers: None,
            interleave_moe_layer_step: 1,
            no_rope_layers: None,
            no_rope_layer_interval: 4,
            use_qk_norm: true,
            intermediate_size_mlp: 16384,
        }
    }
}

/// Scout's text model has experts where `moe_layers` lists layers (by default, every
/// `interleave_moe_layer_step`-th, as transformers fills it in); MobileLLM-R1 lists none.
fn has_experts(config: &ModelConfig, args: &Args) -> bool {
    match &args.moe_layers {
        Some(layers) => !layers.is_empty(),
        None => args.interleave_moe_layer_step.max(1) <= config.num_layers,
    }
}

pub fn experts(config: &ModelConfig) -> Result<Option<MoeSpec>, ModelError> {
    if has_experts(config, &config.args()?) {
        llama4::experts(config)
    } else {
        Ok(None)
    }
}

pub fn build(config: &ModelConfig, weights: &mut Weights) -> Result<Decoder, ModelError> {
    let args: Args = config.args()?;
    if has_experts(config, &args) {
        return llama4::build(config, weights);
    }
    let uses_rope: Vec<i32> = match args.no_rope_layers {
        Some(layers) if !layers.is_empty() => layers,
        _ => {
            let interval = args.no_rope_layer_interval;
            (1..=config.num_layers)
                .map(|layer| i32::from(interval <= 0 || layer % interval != 0))
                .collect()
        }
    };
    if uses_rope.len() < config.num_layers as usize {
        return Err(ModelError::Config {
            path: config.path.clone(),
            message: format!(
                "no_rope_layers has {} entries for {} layers",
                uses_rope.len(),
                config.num_layers
            ),
        });
    }
    let head_norm = args.use_qk_norm.then_some(HeadNorm::RmsUnweighted {
        eps: config.rms_norm_eps,
    });
    let inner = args.intermediate_size_mlp;
    let rope = Rope::new(config.head_dim, config.rope_theta, true, None)
        .map_err(|source| weights.mlx_error("building rotary frequencies", source))?;
    let layers = (0..config.num_layers)
        .map(|index| {
            let attention = AttentionSpec {
                head_norm,
                rope: (uses_rope[index as usize] != 0).then(|| rope.clone()),
                ..AttentionSpec::new(config, rope.clone())
            };
            DecoderLayer::load(weights, config, index, attention, |weights, prefix| {
                let feed_forward = format!("{prefix}.feed_forward");
                Mlp::load(weights, config, &feed_forward, inner, false).map(FeedForward::dense)
            })
        })
        .collect::<Result<_, _>>()?;
    let head = if config.tie_word_embeddings.unwrap_or(false) {
        None
    } else {
        // mlx-lm names it `output`; a transformers checkpoint, `lm_head`.
        let name = if weights.contains("output.weight") {
            "output"
        } else {
            "lm_head"
        };
        let (vocab, hidden) = (config.vocab_size, config.hidden_size);
        Some(Linear::load(
            weights,
            name,
            vocab,
            hidden,
            false,
            config.quantization,
        )?)
    };
    let tied = ModelConfig {
        tie_word_embeddings: Some(true),
        ..config.clone()
    };
    let mut decoder = Decoder::load(weights, &tied, layers)?;
    decoder.lm_head = head;
    Ok(decoder)
}
