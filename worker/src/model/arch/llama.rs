//! Llama 2/3 and Mistral (mlx-lm's `llama.py`): optional biases on the attention and the MLP.

use crate::model::blocks::attention::AttentionSpec;
use crate::model::blocks::decoder_layer::{DecoderLayer, FeedForward};
use crate::model::blocks::mlp::Mlp;
use crate::model::blocks::rope::Rope;
use crate::model::weights::Weights;
use crate::model::{Decoder, ModelConfig, ModelError};

pub fn build(config: &ModelConfig, weights: &mut Weights) -> Result<Decoder, ModelError> {
    let rope = Rope::for_config(config, weights)?;
    let attention_bias = config.key_or("attention_bias", false)?;
    let mlp_bias = config.key_or("mlp_bias", false)?;
    let layers = (0..config.num_layers)
        .map(|index| {
            let attention = AttentionSpec {
                qkv_bias: attention_bias,
                o_bias: attention_bias,
                ..AttentionSpec::new(config, rope.clone())
            };
            DecoderLayer::load(weights, config, index, attention, |weights, prefix| {
                let mlp = format!("{prefix}.mlp");
                Mlp::load(weights, config, &mlp, config.intermediate_size, mlp_bias)
                    .map(FeedForward::Dense)
            })
        })
        .collect::<Result<_, _>>()?;
    Decoder::load(weights, config, layers)
}
