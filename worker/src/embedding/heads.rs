//! Sequence-classification heads of cross-encoders, on the `[CLS]` vector: BERT's pooler
//! (dense + tanh) then `classifier`; XLM-R / RoBERTa's `classifier.dense` + tanh then
//! `classifier.out_proj`. A pair's relevance score is the sigmoid of its one logit (p of label 1
//! for a two-label head), in [0, 1] like Cohere's and Jina's scores and sentence-transformers'
//! `CrossEncoder.predict`; the order is the raw logit's.

use mlx_rs::error::Exception;
use mlx_rs::ops;
use mlx_rs::{Array, Dtype};

use crate::model::{ModelError, Weights};

use super::bert::{Dense, EncoderConfig};

pub struct ClassificationHead {
    dense: Dense,
    out: Dense,
    labels: i32,
}

impl ClassificationHead {
    pub fn load(weights: &mut Weights, config: &EncoderConfig) -> Result<Self, ModelError> {
        let hidden = config.hidden_size;
        let labels = config.labels();
        let (dense, out) = if weights.contains("classifier.out_proj.weight") {
            ("classifier.dense", "classifier.out_proj")
        } else {
            ("bert.pooler.dense", "classifier")
        };
        let dense = if weights.contains(&format!("{dense}.weight")) {
            dense
        } else {
            "pooler.dense"
        };
        Ok(Self {
            dense: Dense::load(weights, dense, hidden, hidden)?,
            out: Dense::load(weights, out, labels, hidden)?,
            labels,
        })
    }

    /// Scores from the encoder's output `[rows, width, hidden]`: `[rows]` in f32.
    pub fn scores(&self, hidden: &Array) -> Result<Array, Exception> {
        let cls = hidden.take_axis(Array::from_int(0), 1)?;
        let logits = self
            .out
            .forward(&ops::tanh(&self.dense.forward(&cls)?)?)?
            .as_dtype(Dtype::Float32)?;
        if self.labels == 1 {
            ops::sigmoid(&logits.reshape(&[-1])?)
        } else {
            let probabilities = ops::softmax_axis(&logits, -1, None)?;
            probabilities.take_axis(Array::from_int(1), 1)
        }
    }
}
