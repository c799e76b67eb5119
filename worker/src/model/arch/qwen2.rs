//! Qwen2 and Qwen2.5 (mlx-lm's `qwen2.py`): Llama with biases on q, k and v.

use crate::model::blocks::attention::AttentionSpec;
use crate::model::blocks::decoder_layer::{DecoderLayer, FeedForward};
use crate::model::blocks::mlp::Mlp;
use crate::model::blocks::rope::Rope;
use crate::model::weights::Weights;
use crate::model::{Decoder, ModelConfig, ModelError};

pub fn build(config: &ModelConfig, weights: &mut Weights) -> Result<Decoder, ModelError> {
    let rope = Rope::for_config(config, weights)?;
    let layers = (0..config.num_layers)
        .map(|index| {
            let attention = AttentionSpec {
                qkv_bias: true,
                ..AttentionSpec::new(config, rope.clone())
            };
            DecoderLayer::load(weights, config, index, attention, |weights, prefix| {
                let mlp = format!("{prefix}.mlp");
                Mlp::load(weights, config, &mlp, config.intermediate_size, false)
                    .map(FeedForward::Dense)
            })
        })
        .collect::<Result<_, _>>()?;
    Decoder::load(weights, config, layers)
}
