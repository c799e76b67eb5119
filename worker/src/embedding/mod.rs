//! Embedding and reranking models: a BERT-family encoder with its pooling (embeddings) or its
//! classification head (cross-encoder rerank), tokenization of texts and query-document pairs,
//! and the checks a request passes before it joins the batcher. Everything that touches MLX runs
//! on the engine thread (`engine.rs`).

pub mod batcher;
pub mod bert;
pub mod engine;
pub mod heads;
pub mod layout;
pub mod pooling;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use corral_ipc::{EmbedInput, EmbedRequest, ModelKind, RejectKind, RerankRequest};
use mlx_rs::error::Exception;
use tokenizers::{Tokenizer, TruncationParams};

use crate::model::{ModelError, Weights};
use batcher::Item;
use bert::{Encoder, EncoderConfig, PaddedBatch};
use heads::ClassificationHead;
use layout::{Layout, LayoutError, Pooling};

#[derive(Debug, thiserror::Error)]
pub enum EmbedLoadError {
    #[error(transparent)]
    Model(#[from] ModelError),
    #[error(transparent)]
    Layout(#[from] LayoutError),
    #[error("{path}: cannot load tokenizer: {message}")]
    Tokenizer { path: PathBuf, message: String },
}

/// A request refused before any compute, with the field at fault.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rejection {
    pub kind: RejectKind,
    pub message: String,
    pub param: Option<String>,
}

impl Rejection {
    fn new(kind: RejectKind, message: String, param: Option<String>) -> Self {
        Self {
            kind,
            message,
            param,
        }
    }
}

/// A loaded encoder and what it needs to turn requests into batch items and rows into answers.
pub struct Embedder {
    pub dir: PathBuf,
    encoder: Encoder,
    /// The cross-encoder's head; `None` for an embedding model.
    head: Option<ClassificationHead>,
    tokenizer: Tokenizer,
    /// The same tokenizer, cutting inputs at `max_tokens` (for requests that ask to truncate).
    truncating: Tokenizer,
    layout: Layout,
    /// The longest input, in tokens with the special tokens.
    pub max_tokens: usize,
    pub weight_bytes: usize,
    pub load_time: Duration,
}

impl Embedder {
    pub fn load(dir: &Path) -> Result<Self, EmbedLoadError> {
        let started = Instant::now();
        let config = EncoderConfig::load(dir)?;
        let cross_encoder = config
            .architectures
            .iter()
            .any(|name| name.ends_with("ForSequenceClassification"));
        // sentence-transformers pools a bare encoder by mean.
        let layout = Layout::read(dir, Pooling::Mean)?;
        let max_tokens = layout.max_seq_length.map_or(config.max_tokens(), |length| {
            length.min(config.max_tokens())
        });
        let (tokenizer, truncating) = load_tokenizers(dir, max_tokens)?;
        let mut weights = Weights::load(dir, Default::default())?;
        let weight_bytes = weights.total_bytes();
        let head = if cross_encoder {
            Some(ClassificationHead::load(&mut weights, &config)?)
        } else {
            None
        };
        let encoder = Encoder::load(&mut weights, config)?;
        tracing::debug!(model = %dir.display(), tensors = ?weights.leftover_names(), "unused tensors");
        Ok(Self {
            dir: dir.to_path_buf(),
            encoder,
            head,
            tokenizer,
            truncating,
            layout,
            max_tokens,
            weight_bytes,
            load_time: started.elapsed(),
        })
    }

    pub fn kind(&self) -> ModelKind {
        if self.head.is_some() {
            ModelKind::Rerank
        } else {
            ModelKind::Embedding
        }
    }

    fn refuse_kind(&self, asked: &str) -> Rejection {
        let serves = match self.kind() {
            ModelKind::Rerank => "a rerank model",
            _ => "an embedding model",
        };
        Rejection::new(
            RejectKind::Unsupported,
            format!("{} is {serves}; it does not do {asked}", self.dir.display()),
            None,
        )
    }

    /// The batch items of an embedding request, one per input, checked.
    pub fn prepare_embed(&self, request: &EmbedRequest) -> Result<Vec<Item>, Rejection> {
        if self.head.is_some() {
            return Err(self.refuse_kind("embeddings"));
        }
        if let Some(dimensions) = request.dimensions {
            self.check_dimensions(dimensions as usize)?;
        }
        request
            .inputs
            .iter()
            .enumerate()
            .map(|(index, input)| self.embed_item(index, input, request.truncate))
            .collect()
    }

    fn check_dimensions(&self, dimensions: usize) -> Result<(), Rejection> {
        let full = self.encoder.config.hidden_size as usize;
        let param = Some("dimensions".to_owned());
        if !self.layout.matryoshka {
            return Err(Rejection::new(
                RejectKind::Unsupported,
                format!(
                    "{} was not trained for shortened vectors (Matryoshka); omit dimensions",
                    self.dir.display()
                ),
                param,
            ));
        }
        if dimensions == 0 || dimensions > full {
            return Err(Rejection::new(
                RejectKind::InvalidRequest,
                format!("dimensions must be between 1 and {full}"),
                param,
            ));
        }
        Ok(())
    }

    fn embed_item(
        &self,
        index: usize,
        input: &EmbedInput,
        truncate: bool,
    ) -> Result<Item, Rejection> {
        let param = || Some(format!("input[{index}]"));
        match input {
            EmbedInput::Text(text) => self.encode(text.as_str(), truncate, param),
            EmbedInput::Tokens(ids) => {
                let vocab = self.encoder.config.vocab_size as u32;
                if let Some(bad) = ids.iter().find(|&&id| id >= vocab) {
                    return Err(Rejection::new(
                        RejectKind::InvalidRequest,
                        format!("token id {bad} is outside the vocabulary of {vocab}"),
                        param(),
                    ));
                }
                let mut ids = ids.clone();
                self.check_length(ids.len(), truncate, param)?;
                ids.truncate(self.max_tokens);
                Ok(Item {
                    type_ids: vec![0; ids.len()],
                    ids,
                })
            }
        }
    }

    /// The batch items of a rerank request: the query paired with each document.
    pub fn prepare_rerank(&self, request: &RerankRequest) -> Result<Vec<Item>, Rejection> {
        if self.head.is_none() {
            return Err(self.refuse_kind("rerank"));
        }
        request
            .documents
            .iter()
            .enumerate()
            .map(|(index, document)| {
                let param = || Some(format!("documents[{index}]"));
                self.encode(
                    (request.query.as_str(), document.as_str()),
                    request.truncate,
                    param,
                )
            })
            .collect()
    }

    fn encode<'s>(
        &self,
        input: impl Into<tokenizers::EncodeInput<'s>> + Clone,
        truncate: bool,
        param: impl Fn() -> Option<String>,
    ) -> Result<Item, Rejection> {
        let failed = |error: tokenizers::Error| {
            Rejection::new(
                RejectKind::InvalidRequest,
                format!("cannot tokenize: {error}"),
                param(),
            )
        };
        let mut encoding = self.tokenizer.encode(input.clone(), true).map_err(failed)?;
        if encoding.get_ids().len() > self.max_tokens {
            self.check_length(encoding.get_ids().len(), truncate, &param)?;
            encoding = self.truncating.encode(input, true).map_err(failed)?;
        }
        Ok(Item {
            ids: encoding.get_ids().to_vec(),
            type_ids: encoding.get_type_ids().to_vec(),
        })
    }

    fn check_length(
        &self,
        length: usize,
        truncate: bool,
        param: impl Fn() -> Option<String>,
    ) -> Result<(), Rejection> {
        if length > self.max_tokens && !truncate {
            return Err(Rejection::new(
                RejectKind::PromptTooLong,
                format!(
                    "the input has {length} tokens; this model takes at most {} (ask for truncation to cut it)",
                    self.max_tokens
                ),
                param(),
            ));
        }
        Ok(())
    }

    /// One output per item: its vector, or its relevance score as a one-element vector.
    pub fn run(&self, items: &[&Item]) -> Result<Vec<Vec<f32>>, Exception> {
        let pad = self.encoder.config.pad_token_id;
        let batch = PaddedBatch::new(
            items
                .iter()
                .map(|item| (item.ids.as_slice(), item.type_ids.as_slice())),
            pad,
        );
        let hidden = self.encoder.forward(&batch)?;
        if let Some(head) = &self.head {
            let scores = head.scores(&hidden)?.reshape(&[-1, 1])?;
            return pooling::to_host_rows(&scores);
        }
        let mut pooled = pooling::pool(&hidden, &batch.lengths, self.layout.pooling)?;
        if self.layout.normalize {
            pooled = pooling::normalize(&pooled)?;
        }
        pooling::to_host_rows(&pooled)
    }

    /// The vector as the request asked: cut to `dimensions` and normalized again when asked.
    pub fn finish(&self, vector: Vec<f32>, dimensions: Option<u32>) -> Vec<f32> {
        match dimensions {
            Some(dimensions) => pooling::truncate_dimensions(&vector, dimensions as usize),
            None => vector,
        }
    }
}

/// The model's tokenizer without its own padding or truncation (a `tokenizer.json` may fix
/// both at 128; the batcher pads and the request decides about truncation), and a copy that
/// truncates at `max_tokens`.
fn load_tokenizers(
    dir: &Path,
    max_tokens: usize,
) -> Result<(Tokenizer, Tokenizer), EmbedLoadError> {
    let path = dir.join("tokenizer.json");
    let failed = |message: String| EmbedLoadError::Tokenizer {
        path: path.clone(),
        message,
    };
    let mut tokenizer = Tokenizer::from_file(&path).map_err(|error| failed(error.to_string()))?;
    tokenizer.with_padding(None);
    tokenizer
        .with_truncation(None)
        .map_err(|error| failed(error.to_string()))?;
    let mut truncating = tokenizer.clone();
    truncating
        .with_truncation(Some(TruncationParams {
            max_length: max_tokens,
            ..TruncationParams::default()
        }))
        .map_err(|error| failed(error.to_string()))?;
    Ok((tokenizer, truncating))
}
