//! Qwen3 (mlx-lm's `qwen3.py`): Llama with an RMSNorm over each query and key head.

use crate::model::blocks::attention::{AttentionSpec, HeadNorm};
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
                head_norm: Some(HeadNorm::Rms {
                    eps: config.rms_norm_eps,
                }),
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
