//! A BERT-family encoder (BERT, RoBERTa, XLM-RoBERTa) on MLX: word, position and token-type
//! embeddings with LayerNorm, then post-LN layers of bidirectional self-attention and an exact
//! (erf) GELU MLP. A padded batch attends only to each row's real tokens, so a text's vectors do
//! not depend on what it was batched with.

use std::path::Path;

use mlx_rs::error::Exception;
use mlx_rs::fast;
use mlx_rs::ops;
use mlx_rs::{Array, Dtype};
use serde::Deserialize;

use crate::model::{ModelError, Weights, kernels};

use super::layout::SUPPORTED_ENCODERS;

/// The fields of an encoder's `config.json`.
#[derive(Debug, Clone, Deserialize)]
pub struct EncoderConfig {
    pub model_type: String,
    pub vocab_size: i32,
    pub hidden_size: i32,
    pub num_hidden_layers: usize,
    pub num_attention_heads: i32,
    pub intermediate_size: i32,
    pub max_position_embeddings: i32,
    #[serde(default = "default_type_vocab")]
    pub type_vocab_size: i32,
    #[serde(default = "default_eps")]
    pub layer_norm_eps: f32,
    #[serde(default)]
    pub pad_token_id: u32,
    #[serde(default)]
    pub hidden_act: Option<String>,
    #[serde(default)]
    pub position_embedding_type: Option<String>,
    #[serde(default)]
    pub architectures: Vec<String>,
    /// Labels of a sequence-classification head.
    #[serde(default)]
    pub id2label: Option<serde_json::Map<String, serde_json::Value>>,
    pub num_labels: Option<i32>,
}

fn default_type_vocab() -> i32 {
    2
}

fn default_eps() -> f32 {
    1e-12
}

impl EncoderConfig {
    pub fn load(dir: &Path) -> Result<Self, ModelError> {
        let path = dir.join("config.json");
        let text = std::fs::read_to_string(&path).map_err(|source| ModelError::Io {
            path: path.clone(),
            source,
        })?;
        let config: Self = serde_json::from_str(&text).map_err(|error| ModelError::Config {
            path: path.clone(),
            message: error.to_string(),
        })?;
        config
            .check()
            .map_err(|message| ModelError::Config { path, message })?;
        Ok(config)
    }

    /// Why this encoder cannot run here, if it cannot.
    fn check(&self) -> Result<(), String> {
        if !SUPPORTED_ENCODERS.contains(&self.model_type.as_str()) {
            return Err(format!(
                "encoder model_type {:?} is not supported (corral runs {})",
                self.model_type,
                SUPPORTED_ENCODERS.join(", ")
            ));
        }
        if let Some(act) = self.hidden_act.as_deref().filter(|act| *act != "gelu") {
            return Err(format!("hidden_act {act:?} is not supported (only gelu)"));
        }
        if let Some(kind) = self
            .position_embedding_type
            .as_deref()
            .filter(|kind| *kind != "absolute")
        {
            return Err(format!(
                "position_embedding_type {kind:?} is not supported (only absolute)"
            ));
        }
        if self.num_attention_heads <= 0 || self.hidden_size % self.num_attention_heads != 0 {
            return Err(format!(
                "hidden_size {} is not a multiple of num_attention_heads {}",
                self.hidden_size, self.num_attention_heads
            ));
        }
        Ok(())
    }

    /// RoBERTa and XLM-R number positions from `pad_token_id + 1`; BERT from 0.
    pub fn position_offset(&self) -> i32 {
        if self.model_type == "bert" {
            0
        } else {
            self.pad_token_id as i32 + 1
        }
    }

    /// The longest input the position table holds.
    pub fn max_tokens(&self) -> usize {
        (self.max_position_embeddings - self.position_offset()).max(0) as usize
    }

    pub fn is_sequence_classifier(&self) -> bool {
        self.architectures
            .iter()
            .any(|name| name.ends_with("ForSequenceClassification"))
    }

    pub fn labels(&self) -> i32 {
        self.num_labels
            .or_else(|| self.id2label.as_ref().map(|labels| labels.len() as i32))
            .unwrap_or(1)
    }
}

/// A dense `[out, in]` projection with its bias.
pub struct Dense {
    weight: Array,
    bias: Array,
}

impl Dense {
    pub fn load(
        weights: &mut Weights,
        prefix: &str,
        out: i32,
        input: i32,
    ) -> Result<Self, ModelError> {
        Ok(Self {
            weight: weights.take_float(&format!("{prefix}.weight"), &[out, input])?,
            bias: weights.take_float(&format!("{prefix}.bias"), &[out])?,
        })
    }

    pub fn forward(&self, x: &Array) -> Result<Array, Exception> {
        ops::add(&ops::matmul(x, self.weight.t())?, &self.bias)
    }
}

struct LayerNorm {
    weight: Array,
    bias: Array,
    eps: f32,
}

impl LayerNorm {
    fn load(weights: &mut Weights, prefix: &str, size: i32, eps: f32) -> Result<Self, ModelError> {
        Ok(Self {
            weight: weights.take_float(&format!("{prefix}.weight"), &[size])?,
            bias: weights.take_float(&format!("{prefix}.bias"), &[size])?,
            eps,
        })
    }

    fn forward(&self, x: &Array) -> Result<Array, Exception> {
        fast::layer_norm(x, &self.weight, &self.bias, self.eps)
    }
}

struct Layer {
    query: Dense,
    key: Dense,
    value: Dense,
    attention_out: Dense,
    attention_norm: LayerNorm,
    intermediate: Dense,
    output: Dense,
    output_norm: LayerNorm,
}

impl Layer {
    fn load(
        weights: &mut Weights,
        prefix: &str,
        config: &EncoderConfig,
    ) -> Result<Self, ModelError> {
        let hidden = config.hidden_size;
        let inner = config.intermediate_size;
        let eps = config.layer_norm_eps;
        let attention = format!("{prefix}.attention");
        Ok(Self {
            query: Dense::load(weights, &format!("{attention}.self.query"), hidden, hidden)?,
            key: Dense::load(weights, &format!("{attention}.self.key"), hidden, hidden)?,
            value: Dense::load(weights, &format!("{attention}.self.value"), hidden, hidden)?,
            attention_out: Dense::load(
                weights,
                &format!("{attention}.output.dense"),
                hidden,
                hidden,
            )?,
            attention_norm: LayerNorm::load(
                weights,
                &format!("{attention}.output.LayerNorm"),
                hidden,
                eps,
            )?,
            intermediate: Dense::load(
                weights,
                &format!("{prefix}.intermediate.dense"),
                inner,
                hidden,
            )?,
            output: Dense::load(weights, &format!("{prefix}.output.dense"), hidden, inner)?,
            output_norm: LayerNorm::load(
                weights,
                &format!("{prefix}.output.LayerNorm"),
                hidden,
                eps,
            )?,
        })
    }

    /// `x` is `[rows, length, hidden]`; `mask` `[rows, 1, 1, length]`, true where a key is real.
    fn forward(&self, x: &Array, mask: &Array, heads: i32) -> Result<Array, Exception> {
        let (rows, length, hidden) = (x.dim(0), x.dim(1), x.dim(2));
        let head_dim = hidden / heads;
        let split = |projected: Array| {
            projected
                .reshape(&[rows, length, heads, head_dim])?
                .transpose_axes(&[0, 2, 1, 3])
        };
        let queries = split(self.query.forward(x)?)?;
        let keys = split(self.key.forward(x)?)?;
        let values = split(self.value.forward(x)?)?;
        let scale = 1.0 / (head_dim as f32).sqrt();
        let attended = kernels::padded_attention(&queries, &keys, &values, scale, mask)?
            .transpose_axes(&[0, 2, 1, 3])?
            .reshape(&[rows, length, hidden])?;
        let x = self
            .attention_norm
            .forward(&ops::add(&self.attention_out.forward(&attended)?, x)?)?;
        let inner = kernels::gelu(&self.intermediate.forward(&x)?)?;
        self.output_norm
            .forward(&ops::add(&self.output.forward(&inner)?, &x)?)
    }
}

/// One padded batch: rows of token ids, right-padded to the same length.
pub struct PaddedBatch {
    pub ids: Vec<u32>,
    pub type_ids: Vec<u32>,
    /// Real tokens per row.
    pub lengths: Vec<usize>,
    pub width: usize,
}

impl PaddedBatch {
    /// Pads `rows` (token ids and token-type ids) with `pad` to the longest row.
    pub fn new<'a>(rows: impl Iterator<Item = (&'a [u32], &'a [u32])> + Clone, pad: u32) -> Self {
        let width = rows.clone().map(|(ids, _)| ids.len()).max().unwrap_or(0);
        let mut batch = Self {
            ids: Vec::new(),
            type_ids: Vec::new(),
            lengths: Vec::new(),
            width,
        };
        for (ids, type_ids) in rows {
            batch.ids.extend_from_slice(ids);
            batch
                .ids
                .extend(std::iter::repeat_n(pad, width - ids.len()));
            batch.type_ids.extend_from_slice(type_ids);
            batch
                .type_ids
                .extend(std::iter::repeat_n(0, width - type_ids.len()));
            batch.lengths.push(ids.len());
        }
        batch
    }

    pub fn rows(&self) -> usize {
        self.lengths.len()
    }

    /// `[rows, width]`, true at real tokens.
    pub fn mask(&self) -> Vec<bool> {
        self.lengths
            .iter()
            .flat_map(|&length| (0..self.width).map(move |column| column < length))
            .collect()
    }
}

pub struct Encoder {
    pub config: EncoderConfig,
    word: Array,
    position: Array,
    token_type: Array,
    embedding_norm: LayerNorm,
    layers: Vec<Layer>,
}

impl Encoder {
    /// Loads the encoder's tensors from `weights`, named with or without the `bert.` /
    /// `roberta.` prefix that a task head's checkpoint puts before them.
    pub fn load(weights: &mut Weights, config: EncoderConfig) -> Result<Self, ModelError> {
        kernels::choose();
        let prefix = ["", "bert.", "roberta."]
            .into_iter()
            .find(|prefix| weights.contains(&format!("{prefix}embeddings.word_embeddings.weight")))
            .unwrap_or("");
        let hidden = config.hidden_size;
        let embeddings = format!("{prefix}embeddings");
        let word = weights.take_float(
            &format!("{embeddings}.word_embeddings.weight"),
            &[config.vocab_size, hidden],
        )?;
        let position = weights.take_float(
            &format!("{embeddings}.position_embeddings.weight"),
            &[config.max_position_embeddings, hidden],
        )?;
        let token_type = weights.take_float(
            &format!("{embeddings}.token_type_embeddings.weight"),
            &[config.type_vocab_size, hidden],
        )?;
        let embedding_norm = LayerNorm::load(
            weights,
            &format!("{embeddings}.LayerNorm"),
            hidden,
            config.layer_norm_eps,
        )?;
        let layers = (0..config.num_hidden_layers)
            .map(|index| Layer::load(weights, &format!("{prefix}encoder.layer.{index}"), &config))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Self {
            config,
            word,
            position,
            token_type,
            embedding_norm,
            layers,
        })
    }

    pub fn dtype(&self) -> Dtype {
        self.word.dtype()
    }

    /// The last layer's token vectors `[rows, width, hidden]` of a padded batch.
    pub fn forward(&self, batch: &PaddedBatch) -> Result<Array, Exception> {
        let shape = [batch.rows() as i32, batch.width as i32];
        let ids = Array::from_slice(&batch.ids, &shape);
        let type_ids = if self.config.type_vocab_size == 1 {
            // RoBERTa-style tokenizers may mark a pair's second text 1; these models have one type.
            vec![0u32; batch.ids.len()]
        } else {
            batch.type_ids.clone()
        };
        let type_ids = Array::from_slice(&type_ids, &shape);
        let offset = self.config.position_offset();
        let positions: Vec<i32> = (0..batch.rows())
            .flat_map(|_| (0..batch.width as i32).map(move |column| column + offset))
            .collect();
        let positions = Array::from_slice(&positions, &shape);
        let embedded = ops::add(
            &ops::add(
                &self.word.take_axis(&ids, 0)?,
                &self.position.take_axis(&positions, 0)?,
            )?,
            &self.token_type.take_axis(&type_ids, 0)?,
        )?;
        let mut hidden = self.embedding_norm.forward(&embedded)?;
        let mask = Array::from_slice(&batch.mask(), &[shape[0], 1, 1, shape[1]]);
        for layer in &self.layers {
            hidden = layer.forward(&hidden, &mask, self.config.num_attention_heads)?;
        }
        Ok(hidden)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn padded_batch_pads_right_and_masks_padding() {
        let batch = PaddedBatch::new(
            [
                (&[1u32, 2, 3][..], &[0u32, 0, 1][..]),
                (&[4u32][..], &[0u32][..]),
            ]
            .into_iter(),
            9,
        );
        assert_eq!(batch.ids, vec![1, 2, 3, 4, 9, 9]);
        assert_eq!(batch.type_ids, vec![0, 0, 1, 0, 0, 0]);
        assert_eq!(batch.mask(), vec![true, true, true, true, false, false]);
    }

    #[test]
    fn roberta_positions_start_after_the_padding_id() {
        let config: EncoderConfig = serde_json::from_value(serde_json::json!({
            "model_type": "xlm-roberta", "vocab_size": 10, "hidden_size": 8,
            "num_hidden_layers": 1, "num_attention_heads": 2, "intermediate_size": 16,
            "max_position_embeddings": 514, "pad_token_id": 1
        }))
        .unwrap();
        assert_eq!(config.position_offset(), 2);
        assert_eq!(config.max_tokens(), 512);
        assert!(config.check().is_ok());
    }

    #[test]
    fn unsupported_encoders_say_what_is_supported() {
        let config: EncoderConfig = serde_json::from_value(serde_json::json!({
            "model_type": "distilbert", "vocab_size": 10, "hidden_size": 8,
            "num_hidden_layers": 1, "num_attention_heads": 2, "intermediate_size": 16,
            "max_position_embeddings": 512
        }))
        .unwrap();
        let message = config.check().unwrap_err();
        assert!(
            message.contains("distilbert") && message.contains("bert"),
            "{message}"
        );
    }
}
