//! A Llama-family causal language model on MLX: loading a Hugging Face checkpoint directory and
//! the forward pass. Every MLX call here runs on the engine thread.

mod config;
pub(crate) mod cpu_math;
mod host_attention;
mod kv_cache;
mod layers;
mod rope;
#[cfg(target_arch = "x86_64")]
mod row_matmul;
mod transformer;
mod weights;

use std::path::{Path, PathBuf};

use mlx_rs::Array;
use mlx_rs::error::Exception;

pub use config::{Architecture, ModelConfig, Quantization};

/// `count` deterministic values spread over [-1, 1], for the host kernels' tests.
#[cfg(test)]
fn spread_values(count: usize, seed: u32) -> Vec<f32> {
    (0..count as u32)
        .map(|index| ((index.wrapping_mul(2_654_435_761) ^ seed) % 2001) as f32 / 1000.0 - 1.0)
        .collect()
}
pub use kv_cache::{KvCache, STEP as KV_CACHE_STEP};
use layers::{Embedding, Linear};
use rope::Rope;
use transformer::{Block, RmsNorm};
pub use weights::Weights;

#[derive(Debug, thiserror::Error)]
pub enum ModelError {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}: {message}")]
    Config { path: PathBuf, message: String },
    #[error("{dir}: no *.safetensors weights")]
    NoWeights { dir: PathBuf },
    #[error("{path}: corrupt safetensors: {message}")]
    Safetensors { path: PathBuf, message: String },
    #[error("{dir}: tensor {name} is missing")]
    MissingTensor { name: String, dir: PathBuf },
    #[error("{path}: tensor {name} has shape {found:?}, expected {expected:?}")]
    Shape {
        name: String,
        path: PathBuf,
        found: Vec<i32>,
        expected: Vec<i32>,
    },
    #[error("{path}: tensor {name} is {found}, expected {expected}")]
    Dtype {
        name: String,
        path: PathBuf,
        found: String,
        expected: &'static str,
    },
    #[error("{path}: bad quantization: {message}")]
    Quantization { path: PathBuf, message: String },
    #[error("{dir}: MLX failed while {action}: {source}")]
    Mlx {
        dir: PathBuf,
        action: &'static str,
        source: Exception,
    },
}

/// Per-frequency RoPE factors, as GGUF files of Llama 3.1 and later carry their scaling.
const ROPE_FACTORS: &str = "rope_freqs.weight";

/// One sequence's share of a packed pass: its new tokens and the cache they extend.
pub struct Segment<'a> {
    pub tokens: &'a [u32],
    pub cache: &'a mut [KvCache],
}

pub struct Model {
    pub config: ModelConfig,
    embed_tokens: Embedding,
    layers: Vec<Block>,
    norm: RmsNorm,
    /// `None` when the output projection is tied to the embedding table.
    lm_head: Option<Linear>,
    rope: Rope,
    weight_bytes: usize,
}

impl Model {
    pub fn load(model_dir: &Path) -> Result<Self, ModelError> {
        let config = ModelConfig::load(model_dir)?;
        let weights = Weights::load(model_dir, config.layer_quantization.clone())?;
        Self::from_weights(config, weights, model_dir)
    }

    /// Builds the layers from `weights`, loaded from `source` (a directory or a GGUF file).
    pub fn from_weights(
        config: ModelConfig,
        mut weights: Weights,
        source: &Path,
    ) -> Result<Self, ModelError> {
        let weight_bytes = weights.total_bytes();
        let quant = config.quantization;
        let embed_tokens = Embedding::load(
            &mut weights,
            "model.embed_tokens",
            config.vocab_size,
            config.hidden_size,
            quant,
        )?;
        let layers = (0..config.num_layers)
            .map(|index| Block::load(&mut weights, &config, index))
            .collect::<Result<Vec<_>, _>>()?;
        let norm = RmsNorm::load(
            &mut weights,
            "model.norm.weight",
            config.hidden_size,
            config.rms_norm_eps,
        )?;
        let tied = config
            .tie_word_embeddings
            .unwrap_or(!weights.contains("lm_head.weight"));
        let lm_head = if tied {
            None
        } else {
            Some(Linear::load(
                &mut weights,
                "lm_head",
                config.vocab_size,
                config.hidden_size,
                false,
                quant,
            )?)
        };
        let frequency_factors = if weights.contains(ROPE_FACTORS) {
            Some(weights.take_float(ROPE_FACTORS, &[config.head_dim / 2])?)
        } else {
            None
        };
        let leftovers = weights.leftover_names();
        if !leftovers.is_empty() {
            tracing::warn!(model = %source.display(), tensors = ?leftovers, "ignoring tensors no layer uses");
        }
        let rope = match &frequency_factors {
            Some(factors) => Rope::with_frequency_factors(
                config.head_dim,
                config.rope_theta,
                config.rope_traditional,
                factors,
            ),
            None => Rope::new(
                config.head_dim,
                config.rope_theta,
                config.rope_traditional,
                config.rope_scaling,
            ),
        }
        .map_err(|error| ModelError::Mlx {
            dir: source.to_path_buf(),
            action: "building rotary frequencies",
            source: error,
        })?;
        Ok(Self {
            config,
            embed_tokens,
            layers,
            norm,
            lm_head,
            rope,
            weight_bytes,
        })
    }

    /// Bytes of all weights as loaded (the admission estimate's base).
    pub fn weight_bytes(&self) -> usize {
        self.weight_bytes
    }

    pub fn new_cache(&self) -> Vec<KvCache> {
        self.layers.iter().map(|_| KvCache::default()).collect()
    }

    /// Final hidden states `[1, tokens, hidden]` after the final norm; extends `cache`.
    pub fn hidden_states(&self, tokens: &[u32], cache: &mut [KvCache]) -> Result<Array, Exception> {
        self.packed_hidden_states(&mut [Segment { tokens, cache }])
    }

    /// One pass over the new tokens of several sequences, packed along the position axis in the
    /// order of `segments`: each segment's tokens extend its own cache and attend only to it.
    /// Returns the final hidden states `[1, total tokens, hidden]`.
    pub fn packed_hidden_states(&self, segments: &mut [Segment<'_>]) -> Result<Array, Exception> {
        let tokens: Vec<u32> = segments
            .iter()
            .flat_map(|segment| segment.tokens.iter().copied())
            .collect();
        let lengths: Vec<i32> = segments
            .iter()
            .map(|segment| segment.tokens.len() as i32)
            .collect();
        let ids = Array::from_slice(&tokens, &[1, tokens.len() as i32]);
        let mut h = self.embed_tokens.lookup(&ids)?;
        for (index, layer) in self.layers.iter().enumerate() {
            let mut layer_caches: Vec<&mut KvCache> = segments
                .iter_mut()
                .map(|segment| &mut segment.cache[index])
                .collect();
            h = layer.forward(&h, &self.rope, &lengths, &mut layer_caches)?;
        }
        self.norm.forward(&h)
    }

    /// Logits over the vocabulary for each position of `hidden`.
    pub fn logits(&self, hidden: &Array) -> Result<Array, Exception> {
        match &self.lm_head {
            Some(lm_head) => lm_head.forward(hidden),
            None => self.embed_tokens.as_linear(hidden),
        }
    }

    pub fn dtype(&self) -> mlx_rs::Dtype {
        self.embed_tokens.dtype()
    }
}
