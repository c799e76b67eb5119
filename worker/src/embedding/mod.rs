//! Embedding and reranking models: a BERT-family encoder with its pooling (embeddings) or its
//! classification head (cross-encoder rerank), or the worker's decoder pooled at the last token
//! (decoder embeddings) or asked yes/no (decoder rerankers); tokenization of texts and
//! query-document pairs, and the checks a request passes before it joins the batcher.
//! Everything that touches MLX runs on the engine thread (`engine.rs`).

pub mod batcher;
pub mod bert;
pub mod decoder;
pub mod engine;
pub mod heads;
pub mod layout;
pub mod pooling;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use corral_ipc::{EmbedInput, EmbedRequest, ModelKind, RejectKind, RerankRequest};
use mlx_rs::Array;
use mlx_rs::error::Exception;
use tokenizers::{Tokenizer, TruncationParams};

use crate::model::{Model, ModelConfig, ModelError, Residency, Weights};
use crate::model_json::{JsonFileError, read_optional};
use batcher::Item;
use bert::{Encoder, EncoderConfig, PaddedBatch};
use decoder::YesNo;
use heads::ClassificationHead;
use layout::{ConfigHead, Layout, LayoutError, Pooling, Role};

#[derive(Debug, thiserror::Error)]
pub enum EmbedLoadError {
    #[error(transparent)]
    Model(#[from] ModelError),
    #[error(transparent)]
    Layout(#[from] LayoutError),
    #[error(transparent)]
    Config(#[from] JsonFileError),
    #[error("{path}: cannot load tokenizer: {message}")]
    Tokenizer { path: PathBuf, message: String },
    #[error("{dir}: {message}")]
    Unsupported { dir: PathBuf, message: String },
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

/// The network behind an embedding or rerank model.
enum Network {
    Encoder(Encoder),
    CrossEncoder(Encoder, ClassificationHead),
    DecoderEmbedding(Model),
    DecoderReranker(Model, YesNo),
}

/// A loaded model and what it needs to turn requests into batch items and rows into answers.
pub struct Embedder {
    pub dir: PathBuf,
    network: Network,
    vocab_size: u32,
    /// Components of a vector.
    dimension: usize,
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
        let head: ConfigHead = read_optional(&dir.join("config.json"))?.unwrap_or_default();
        let decoder_config = ModelConfig::load(dir);
        let role = layout::role(dir, &head, decoder_config.is_ok());
        let mut embedder = match role {
            Role::EncoderEmbedding | Role::CrossEncoder => Self::load_encoder(dir)?,
            Role::DecoderEmbedding | Role::DecoderReranker => Self::load_decoder(dir, role)?,
            Role::Chat => {
                return Err(EmbedLoadError::Unsupported {
                    dir: dir.to_path_buf(),
                    message: "neither an embedding nor a rerank model".into(),
                });
            }
        };
        embedder.load_time = started.elapsed();
        Ok(embedder)
    }

    fn load_encoder(dir: &Path) -> Result<Self, EmbedLoadError> {
        let config = EncoderConfig::load(dir)?;
        // sentence-transformers pools a bare encoder by mean.
        let layout = Layout::read(dir, Pooling::Mean)?;
        let max_tokens = layout.max_seq_length.map_or(config.max_tokens(), |length| {
            length.min(config.max_tokens())
        });
        let (tokenizer, truncating) = load_tokenizers(dir, max_tokens)?;
        let mut weights = Weights::load(dir, Default::default(), Residency::All)?;
        let weight_bytes = weights.total_bytes();
        let head = if config.is_sequence_classifier() {
            Some(ClassificationHead::load(&mut weights, &config)?)
        } else {
            None
        };
        let (vocab_size, dimension) = (config.vocab_size as u32, config.hidden_size as usize);
        let encoder = Encoder::load(&mut weights, config)?;
        tracing::debug!(model = %dir.display(), tensors = ?weights.leftover_names(), "unused tensors");
        Ok(Self {
            dir: dir.to_path_buf(),
            network: match head {
                Some(head) => Network::CrossEncoder(encoder, head),
                None => Network::Encoder(encoder),
            },
            vocab_size,
            dimension,
            tokenizer,
            truncating,
            layout,
            max_tokens,
            weight_bytes,
            load_time: Duration::ZERO,
        })
    }

    fn load_decoder(dir: &Path, role: Role) -> Result<Self, EmbedLoadError> {
        let unsupported = |message: String| EmbedLoadError::Unsupported {
            dir: dir.to_path_buf(),
            message,
        };
        let layout = Layout::read(dir, Pooling::LastToken)?;
        if role == Role::DecoderEmbedding && layout.pooling != Pooling::LastToken {
            return Err(unsupported(format!(
                "a decoder embedding model must pool its last token, not {:?}",
                layout.pooling
            )));
        }
        let model = Model::load(dir)?;
        let context = model.config.max_position_embeddings;
        let max_tokens = layout
            .max_seq_length
            .map_or(context, |length| length.min(context));
        let (tokenizer, truncating) = load_tokenizers(dir, max_tokens)?;
        let (vocab_size, dimension) = (
            model.config.vocab_size as u32,
            model.config.hidden_size as usize,
        );
        let weight_bytes = model.weight_bytes();
        let network = if role == Role::DecoderReranker {
            let answers = YesNo::find(&tokenizer).ok_or_else(|| {
                unsupported("the vocabulary has no \"yes\" and \"no\" tokens to judge with".into())
            })?;
            Network::DecoderReranker(model, answers)
        } else {
            Network::DecoderEmbedding(model)
        };
        Ok(Self {
            dir: dir.to_path_buf(),
            network,
            vocab_size,
            dimension,
            tokenizer,
            truncating,
            layout,
            max_tokens,
            weight_bytes,
            load_time: Duration::ZERO,
        })
    }

    pub fn kind(&self) -> ModelKind {
        match self.network {
            Network::Encoder(_) | Network::DecoderEmbedding(_) => ModelKind::Embedding,
            Network::CrossEncoder(..) | Network::DecoderReranker(..) => ModelKind::Rerank,
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
        if self.kind() != ModelKind::Embedding {
            return Err(self.refuse_kind("embeddings"));
        }
        if let Some(dimensions) = request.dimensions {
            self.check_dimensions(dimensions as usize)?;
        }
        let prompt = self
            .layout
            .prompt(request.prompt_name.as_deref())
            .map_err(|message| {
                Rejection::new(
                    RejectKind::InvalidRequest,
                    format!("{}: {message}", self.dir.display()),
                    Some("prompt_name".to_owned()),
                )
            })?;
        request
            .inputs
            .iter()
            .enumerate()
            .map(|(index, input)| {
                let item = self.embed_item(index, input, prompt, request.truncate)?;
                nonempty(item, || format!("input[{index}]"))
            })
            .collect()
    }

    fn check_dimensions(&self, dimensions: usize) -> Result<(), Rejection> {
        let full = self.dimension;
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

    /// One input as a batch item: a text after `prompt`, token ids as given.
    fn embed_item(
        &self,
        index: usize,
        input: &EmbedInput,
        prompt: &str,
        truncate: bool,
    ) -> Result<Item, Rejection> {
        let param = || Some(format!("input[{index}]"));
        match input {
            EmbedInput::Text(text) if prompt.is_empty() => {
                self.encode(text.as_str(), true, truncate, param)
            }
            EmbedInput::Text(text) => {
                self.encode(format!("{prompt}{text}").as_str(), true, truncate, param)
            }
            EmbedInput::Tokens(ids) => {
                let vocab = self.vocab_size;
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

    /// The batch items of a rerank request: the query paired with each document (for a decoder
    /// reranker, both written into its judging prompt).
    pub fn prepare_rerank(&self, request: &RerankRequest) -> Result<Vec<Item>, Rejection> {
        if self.kind() != ModelKind::Rerank {
            return Err(self.refuse_kind("rerank"));
        }
        let decoder = matches!(self.network, Network::DecoderReranker(..));
        request
            .documents
            .iter()
            .enumerate()
            .map(|(index, document)| {
                let param = || Some(format!("documents[{index}]"));
                let item = if decoder {
                    self.encode_judging_prompt(&request.query, document, request.truncate, param)
                } else {
                    let pair = (request.query.as_str(), document.as_str());
                    self.encode(pair, true, request.truncate, param)
                }?;
                nonempty(item, || format!("documents[{index}]"))
            })
            .collect()
    }

    /// A decoder reranker's prompt for one pair; truncation cuts the document.
    fn encode_judging_prompt(
        &self,
        query: &str,
        document: &str,
        truncate: bool,
        param: impl Fn() -> Option<String>,
    ) -> Result<Item, Rejection> {
        let mut parts = Vec::new();
        for part in decoder::rerank_prompt(query, document) {
            let encoding = self
                .tokenizer
                .encode(part.as_ref(), false)
                .map_err(|error| {
                    Rejection::new(
                        RejectKind::InvalidRequest,
                        format!("cannot tokenize: {error}"),
                        param(),
                    )
                })?;
            parts.push(encoding.get_ids().to_vec());
        }
        let [head, document, tail] = <[Vec<u32>; 3]>::try_from(parts).unwrap_or_default();
        let total = head.len() + document.len() + tail.len();
        if total > self.max_tokens {
            let kept = self.max_tokens.saturating_sub(head.len() + tail.len());
            // With the document cut to nothing, the query alone is too long: refuse even so.
            self.check_length(total, truncate && kept > 0, &param)?;
        }
        let room = self.max_tokens.saturating_sub(head.len() + tail.len());
        let ids: Vec<u32> = head
            .into_iter()
            .chain(document.into_iter().take(room))
            .chain(tail)
            .collect();
        Ok(Item {
            type_ids: vec![0; ids.len()],
            ids,
        })
    }

    fn encode<'s>(
        &self,
        input: impl Into<tokenizers::EncodeInput<'s>> + Clone,
        special_tokens: bool,
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
        let mut encoding = self
            .tokenizer
            .encode(input.clone(), special_tokens)
            .map_err(failed)?;
        if encoding.get_ids().len() > self.max_tokens {
            self.check_length(encoding.get_ids().len(), truncate, &param)?;
            encoding = self
                .truncating
                .encode(input, special_tokens)
                .map_err(failed)?;
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
        let scores = |scores: Array| pooling::to_host_rows(&scores.reshape(&[-1, 1])?);
        let pooled = match &self.network {
            Network::Encoder(encoder) => {
                let batch = padded(encoder, items);
                let hidden = encoder.forward(&batch)?;
                pooling::pool(&hidden, &batch.lengths, self.layout.pooling)?
            }
            Network::CrossEncoder(encoder, head) => {
                return scores(head.scores(&encoder.forward(&padded(encoder, items))?)?);
            }
            Network::DecoderEmbedding(model) => decoder::embed(model, items)?,
            Network::DecoderReranker(model, answers) => {
                return scores(decoder::judge(model, items, *answers)?);
            }
        };
        let pooled = if self.layout.normalize {
            pooling::normalize(&pooled)?
        } else {
            pooled
        };
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

/// Refuses an input with no tokens at all (`[]`, or a text a tokenizer without special tokens
/// turns into nothing): it has no vector, and a row with every key masked would be NaN.
fn nonempty(item: Item, param: impl Fn() -> String) -> Result<Item, Rejection> {
    if item.ids.is_empty() {
        return Err(Rejection::new(
            RejectKind::InvalidRequest,
            format!("{} has no tokens", param()),
            Some(param()),
        ));
    }
    Ok(item)
}

fn padded(encoder: &Encoder, items: &[&Item]) -> PaddedBatch {
    PaddedBatch::new(
        items
            .iter()
            .map(|item| (item.ids.as_slice(), item.type_ids.as_slice())),
        encoder.config.pad_token_id,
    )
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
