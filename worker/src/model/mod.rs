//! A causal language model on MLX: loading a Hugging Face or mlx-community checkpoint directory
//! and the forward pass. Laid out as mlx-lm's `models/`: the blocks architectures share
//! (`blocks/`), one short file per architecture that wires them (`arch/`), the KV cache, and the
//! kernels whose fastest form depends on the device (`kernels.rs`, `host/`). Every MLX call here
//! runs on the engine thread.

mod arch;
mod blocks;
mod config;
mod decoder;
mod error;
mod host;
pub(crate) mod kernels;
mod kv_cache;
mod parameters;
mod pipeline;
pub(crate) mod quantized_ops;
mod shape;
mod supported;
mod tensor_parallel;
mod vision;
mod weights;
mod window;

use std::path::Path;
use std::sync::Arc;

use mlx_rs::Array;
use mlx_rs::error::Exception;
use mlx_rs::ops;
use mlx_rs::ops::indexing::IndexOp;

pub use arch::caches as layer_caches_for;
pub use arch::{gguf_architectures, model_type_of_gguf};
pub use config::{ModelConfig, QuantMode, Quantization};
pub use parameters::{ParameterCount, count as count_parameters};
pub use pipeline::Pipeline;
pub use shape::{CacheShape, FeedForwardShape, LayerCache, LayerShape, StateShape};
pub use supported::SUPPORTED as SUPPORTED_ARCHITECTURES;
pub use tensor_parallel::TensorShard;
/// The vision tests' helpers, which the prompt's image tests share.
#[cfg(test)]
pub(crate) use vision::tests as vision_tests;
pub use vision::{
    Encoding, ImagePiece, ImageTokens, ImagesSeenBothWays, ProjectorTower, VisionTower,
    activation_bytes as vision_activation_bytes, has_tower as has_vision_tower,
    projector_activation_bytes,
};

/// `count` deterministic values spread over [-1, 1], for the host kernels' tests.
#[cfg(test)]
fn spread_values(count: usize, seed: u32) -> Vec<f32> {
    (0..count as u32)
        .map(|index| ((index.wrapping_mul(2_654_435_761) ^ seed) % 2001) as f32 / 1000.0 - 1.0)
        .collect()
}
use crate::distributed::{Group, Member, Parallel};
use blocks::mtp::MtpLayer;
use blocks::scaled::scaled;
use decoder::Decoder;
pub use error::ModelError;
pub use kv_cache::{KvCache, RecurrentState, STEP as KV_CACHE_STEP};
pub use weights::{Residency, Weights, unrunnable_quantization};

/// Bytes MLX holds in arrays now.
fn active_bytes() -> usize {
    mlx_rs::memory::active_memory().unwrap_or(0)
}

/// One sequence's share of a packed pass: its new tokens and the cache they extend.
pub struct Segment<'a> {
    pub tokens: &'a [u32],
    pub cache: &'a mut [KvCache],
    /// Rows that stand in for some of `tokens`' embeddings (an image's, from its tower).
    pub embedded: Vec<EmbeddedRows>,
}

/// `rows` (`[count, hidden]`) in place of the embeddings of a segment's tokens from `start` on.
pub struct EmbeddedRows {
    pub start: usize,
    pub rows: Array,
}

pub struct Model {
    pub config: ModelConfig,
    decoder: Decoder,
    /// A multimodal checkpoint's vision tower, where corral runs it.
    pub vision: Option<VisionTower>,
    weight_bytes: usize,
    /// This rank's share of the layers, where a group of ranks runs the model as a pipeline.
    pipeline: Option<Pipeline>,
    /// The group whose ranks each hold a slice of every split projection (tensor parallel).
    tensor: Option<TensorShard>,
}

impl Model {
    pub fn load(model_dir: &Path) -> Result<Self, ModelError> {
        Self::load_in(model_dir, None)
    }

    /// As [`Model::load`], as one rank of `member`'s group: a pipeline rank reads and runs only
    /// its share of the layers, a tensor-parallel one its slice of every split projection.
    pub fn load_in(model_dir: &Path, member: Option<Member>) -> Result<Self, ModelError> {
        let config = ModelConfig::load(model_dir)?;
        let refused = |message: String| ModelError::Config {
            path: config.path.clone(),
            message,
        };
        let (pipeline, tensor) = match member {
            None => (None, None),
            Some(Member {
                group,
                parallel: Parallel::Pipeline,
            }) => (
                Some(Pipeline::new(group, config.num_layers as usize).map_err(refused)?),
                None,
            ),
            Some(Member {
                group,
                parallel: Parallel::Tensor,
            }) => {
                arch::splits_tensors(&config)?;
                (None, Some(TensorShard::new(group)))
            }
        };
        let residency = match (&pipeline, &tensor) {
            (Some(pipeline), _) => Residency::Layers(pipeline.share()),
            (None, Some(shard)) => Residency::Slices(shard.clone()),
            (None, None) => Residency::All,
        };
        let in_use_before = active_bytes();
        let mut weights = Weights::load(model_dir, config.layer_quantization.clone(), residency)?;
        let total_bytes = weights.total_bytes();
        let vision = VisionTower::load(&config, &mut weights)?;
        if let Some(wrapper) = config.wrapper {
            weights.unwrap_text_model(wrapper);
        }
        let mut model = Self::from_weights(config, weights, model_dir)?;
        model.pipeline = pipeline;
        if vision.is_some() {
            model.weight_bytes = total_bytes;
            model.vision = vision;
        }
        if tensor.is_some() {
            // A slice is read only as the layers are built: what this rank holds is what MLX
            // holds now that did not before.
            model.weight_bytes = active_bytes().saturating_sub(in_use_before);
            model.tensor = tensor;
        }
        Ok(model)
    }

    /// Builds the layers from `weights`, loaded from `source` (a directory or a GGUF file).
    pub fn from_weights(
        config: ModelConfig,
        mut weights: Weights,
        source: &Path,
    ) -> Result<Self, ModelError> {
        kernels::choose();
        let weight_bytes = weights.total_bytes();
        let decoder = arch::build(&config, &mut weights)?;
        let leftovers = weights.leftover_names();
        if !leftovers.is_empty() {
            tracing::warn!(model = %source.display(), tensors = ?leftovers, "ignoring tensors no layer uses");
        }
        // The checkpoint's tensors that were stacked, split or converted, and the unused ones,
        // are freed now; give their memory back rather than keep it for the worker's life.
        drop(weights);
        crate::process_memory::release_freed_memory();
        Ok(Self {
            config,
            decoder,
            vision: None,
            weight_bytes,
            pipeline: None,
            tensor: None,
        })
    }

    /// The model, loaded whole (a GGUF's tensors are all read at once), as one rank of
    /// `member`'s pipeline; a GGUF's quantized blocks are not split between tensor-parallel
    /// ranks.
    pub fn in_group(self, member: Member) -> Result<Self, ModelError> {
        let refused = |message: String| ModelError::Config {
            path: self.config.path.clone(),
            message,
        };
        if member.parallel == Parallel::Tensor {
            return Err(refused(
                "tensor parallel splits safetensors checkpoints; run a GGUF as a pipeline (parallel = \"pipeline\")"
                    .to_owned(),
            ));
        }
        let layer_count = self.decoder.layers.len();
        let pipeline = Pipeline::new(member.group, layer_count).map_err(refused)?;
        Ok(Self {
            pipeline: Some(pipeline),
            ..self
        })
    }

    /// This rank's share of the layers, in a pipeline group.
    pub fn pipeline(&self) -> Option<&Pipeline> {
        self.pipeline.as_ref()
    }

    /// This rank's place in a tensor-parallel group.
    pub fn tensor_shard(&self) -> Option<&TensorShard> {
        self.tensor.as_ref()
    }

    /// The group this process runs the model with, pipeline or tensor parallel.
    pub fn group(&self) -> Option<&Arc<Group>> {
        match (&self.pipeline, &self.tensor) {
            (Some(pipeline), _) => Some(pipeline.group()),
            (None, Some(shard)) => Some(shard.group()),
            (None, None) => None,
        }
    }

    /// Bytes of all weights as loaded (the admission estimate's base).
    pub fn weight_bytes(&self) -> usize {
        self.weight_bytes
    }

    /// The shape of each layer this process runs, in order: a pipeline rank's own layers, whose
    /// caches and activations are all its memory holds (a tensor-parallel rank's layers have
    /// its share of the heads and channels).
    pub fn layer_shapes(&self) -> Vec<LayerShape> {
        let run = self
            .pipeline
            .as_ref()
            .map_or(0..self.decoder.layers.len(), Pipeline::layers);
        self.decoder.layers[run]
            .iter()
            .map(|layer| LayerShape {
                sliding_window: layer.mixer.sliding_window(),
                cache: layer.mixer.cache_shape(),
                recurrent: layer.mixer.recurrent_state(),
                feed_forward: layer.feed_forward.shape(),
            })
            .collect()
    }

    /// Which of [`Model::new_cache`]'s caches this process fills: a pipeline rank's own
    /// layers', every one elsewhere.
    pub fn filled_caches(&self) -> std::ops::Range<usize> {
        let run = self
            .pipeline
            .as_ref()
            .map_or(0..self.decoder.layers.len(), Pipeline::layers);
        let caching = |layers: &[blocks::decoder_layer::DecoderLayer]| {
            layers
                .iter()
                .filter(|layer| layer.mixer.shared_kv().is_none())
                .count()
        };
        let start = caching(&self.decoder.layers[..run.start]);
        start..start + caching(&self.decoder.layers[run])
    }

    /// What each layer keeps for a sequence, in order.
    pub fn layer_caches(&self) -> Vec<LayerCache> {
        self.decoder
            .layers
            .iter()
            .map(|layer| layer.mixer.layer_cache())
            .collect()
    }

    /// A new sequence's caches: one per layer with keys and values of its own (a KV-shared
    /// layer reads its source's).
    pub fn new_cache(&self) -> Vec<KvCache> {
        self.caching_layers()
            .map(|layer| layer.mixer.new_cache())
            .collect()
    }

    /// What each cache [`Model::new_cache`] makes holds per position, in its order.
    pub fn cache_shapes(&self) -> Vec<CacheShape> {
        self.caching_layers()
            .map(|layer| layer.mixer.cache_shape())
            .collect()
    }

    fn caching_layers(&self) -> impl Iterator<Item = &blocks::decoder_layer::DecoderLayer> {
        self.decoder
            .layers
            .iter()
            .filter(|layer| layer.mixer.shared_kv().is_none())
    }

    /// Final hidden states `[1, tokens, hidden]` after the final norm; extends `cache`.
    pub fn hidden_states(&self, tokens: &[u32], cache: &mut [KvCache]) -> Result<Array, Exception> {
        self.packed_hidden_states(&mut [Segment {
            tokens,
            cache,
            embedded: Vec::new(),
        }])
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
        let decoder = &self.decoder;
        let h = scaled(decoder.embed_tokens.lookup(&ids)?, decoder.embedding_scale)?;
        let mut h = with_embedded_rows(h, segments)?;
        let per_layer_inputs = match &decoder.per_layer_inputs {
            // transformers looks an image's tokens up as the pad token in the per-layer table.
            Some(inputs) => {
                let ids = match padded_under_rows(&tokens, segments, inputs.pad_token) {
                    Some(padded) => Array::from_slice(&padded, &[1, padded.len() as i32]),
                    None => ids,
                };
                Some(inputs.forward(&ids, &h)?)
            }
            None => None,
        };
        let layers = match &self.pipeline {
            Some(pipeline) => {
                h = pipeline.receive(h)?;
                pipeline.layers()
            }
            None => 0..decoder.layers.len(),
        };
        for (index, layer) in decoder
            .layers
            .iter()
            .enumerate()
            .take(layers.end)
            .skip(layers.start)
        {
            let cache = decoder.cache_of_layer[index];
            let mut layer_caches: Vec<&mut KvCache> = segments
                .iter_mut()
                .map(|segment| &mut segment.cache[cache])
                .collect();
            let per_layer_input = per_layer_inputs
                .as_ref()
                .map(|inputs| inputs.index((.., .., index as i32, ..)));
            h = layer.forward(&h, &lengths, &mut layer_caches, per_layer_input.as_ref())?;
        }
        if let Some(pipeline) = &self.pipeline {
            h = pipeline.pass_on(h)?;
        }
        decoder.norm.forward(&h)
    }

    /// A sequence's cache for the multi-token-prediction layer; `None` without one.
    pub fn new_mtp_cache(&self) -> Option<KvCache> {
        self.decoder.mtp.as_ref().map(MtpLayer::new_cache)
    }

    /// The multi-token-prediction layer's hidden states (for [`Model::logits`]): each of
    /// `next_tokens` beside `previous` (`[1, tokens, hidden]`), the model's hidden states at the
    /// positions before them, through `cache`; each row drafts the token after its token.
    pub fn mtp_hidden_states(
        &self,
        next_tokens: &[u32],
        previous: &Array,
        cache: &mut KvCache,
    ) -> Result<Array, Exception> {
        let mtp = self
            .decoder
            .mtp
            .as_ref()
            .ok_or_else(|| Exception::from("the model has no multi-token-prediction layer"))?;
        let ids = Array::from_slice(next_tokens, &[1, next_tokens.len() as i32]);
        let decoder = &self.decoder;
        let embedded = scaled(decoder.embed_tokens.lookup(&ids)?, decoder.embedding_scale)?;
        mtp.forward(&embedded, previous, cache)
    }

    /// Logits over the vocabulary for each position of `hidden`.
    pub fn logits(&self, hidden: &Array) -> Result<Array, Exception> {
        let logits = match &self.decoder.lm_head {
            Some(lm_head) => lm_head.forward(hidden)?,
            None => self.decoder.embed_tokens.as_linear(hidden)?,
        };
        let logits = scaled(logits, self.decoder.logit_scale)?;
        let Some(cap) = self.decoder.logit_softcap else {
            return Ok(logits);
        };
        let cap = Array::from_f32(cap).as_dtype(logits.dtype())?;
        ops::multiply(&ops::tanh(&ops::divide(&logits, &cap)?)?, &cap)
    }

    pub fn dtype(&self) -> mlx_rs::Dtype {
        self.decoder.embed_tokens.dtype()
    }
}

/// The packed `tokens` with `pad` wherever a segment's embedded rows replace them; `None` when
/// no segment has any.
fn padded_under_rows(tokens: &[u32], segments: &[Segment<'_>], pad: u32) -> Option<Vec<u32>> {
    if segments.iter().all(|segment| segment.embedded.is_empty()) {
        return None;
    }
    let mut padded = tokens.to_vec();
    let mut segment_start = 0;
    for segment in segments {
        for embedded in &segment.embedded {
            let start = segment_start + embedded.start;
            let end = (start + embedded.rows.dim(0) as usize).min(padded.len());
            padded[start..end].fill(pad);
        }
        segment_start += segment.tokens.len();
    }
    Some(padded)
}

/// The packed embeddings `h` (`[1, positions, hidden]`) with each segment's embedded rows in
/// place of its tokens' embeddings there, as transformers scatters an image's features into
/// the embedded text.
fn with_embedded_rows(h: Array, segments: &[Segment<'_>]) -> Result<Array, Exception> {
    if segments.iter().all(|segment| segment.embedded.is_empty()) {
        return Ok(h);
    }
    let mut pieces = Vec::new();
    let (mut cursor, mut segment_start) = (0, 0);
    for segment in segments {
        for embedded in &segment.embedded {
            let start = (segment_start + embedded.start) as i32;
            if start > cursor {
                pieces.push(h.index((.., cursor..start, ..)));
            }
            pieces.push(embedded.rows.as_dtype(h.dtype())?.expand_dims(0)?);
            cursor = start + embedded.rows.dim(0);
        }
        segment_start += segment.tokens.len();
    }
    if cursor < h.dim(1) {
        pieces.push(h.index((.., cursor.., ..)));
    }
    ops::concatenate(&pieces, 1)
}
