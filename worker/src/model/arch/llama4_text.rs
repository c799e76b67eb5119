//! Llama 4's text-only form, as MobileLLM-R1 has it (mlx-lm's `llama4_text.py`): the layers
//! `no_rope_layers` marks with 0 have no rotary embedding (NoPE), the others rotate adjacent
//! pairs (`traditional`); query and key heads are RMS-normalized without a weight before the
//! rotation (`use_qk_norm`); the MLP is `feed_forward`, `intermediate_size_mlp` wide. An untied
//! head is `output`.
//!
//! transformers' `llama4_text` is also Scout's and Maverick's text model on its own
//! (`Llama4ForCausalLM`), with experts in the layers `moe_layers` lists: that one is built as
//! the `llama4` wrapper's text model.

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

/// Scout's text model has experts where `moe_layers` lists layers; MobileLLM-R1 has none.
fn has_experts(config: &ModelConfig) -> Result<bool, ModelError> {
    Ok(!config
        .key_or::<Vec<i32>>("moe_layers", Vec::new())?
        .is_empty())
}

pub fn experts(config: &ModelConfig) -> Result<Option<MoeSpec>, ModelError> {
    if has_experts(config)? {
        llama4::experts(config)
    } else {
        Ok(None)
    }
}

pub fn build(config: &ModelConfig, weights: &mut Weights) -> Result<Decoder, ModelError> {
    if has_experts(config)? {
        return llama4::build(config, weights);
    }
    // transformers' default: every fourth layer without rotation.
    let uses_rope: Vec<i32> = config.key_or_else("no_rope_layers", || {
        Ok((1..=config.num_layers)
            .map(|layer| i32::from(layer % 4 != 0))
            .collect())
    })?;
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
    let head_norm = config
        .key_or("use_qk_norm", true)?
        .then_some(HeadNorm::RmsUnweighted {
            eps: config.rms_norm_eps,
        });
    let inner: i32 = config.key_or("intermediate_size_mlp", 16384)?;
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
                Mlp::load(weights, config, &feed_forward, inner, false).map(FeedForward::Dense)
            })
        })
        .collect::<Result<_, _>>()?;
    let head = if config.key_or("tie_word_embeddings", false)? {
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
