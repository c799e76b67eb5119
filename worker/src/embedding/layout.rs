//! What a model directory says about embedding and reranking, from its files alone: the
//! sentence-transformers layout (`modules.json`, `1_Pooling/config.json`, `2_Normalize`,
//! `sentence_bert_config.json`, `config_sentence_transformers.json`) and the encoder's
//! `config.json`. `describe` decides a model's kind from this; the loader reads the same facts.
//!
//! Kind rules, in order:
//! - `config.json` `architectures` ending in `ForSequenceClassification` → a cross-encoder
//!   (Rerank).
//! - An encoder `model_type` (BERT family and the other encoders named in [`ENCODER_FAMILIES`]) →
//!   Embedding.
//! - A causal language model in a directory whose name contains `reranker` (as Qwen3-Reranker's
//!   releases are all named; its files carry no other mark) → Rerank with yes/no logits.
//! - A causal language model with `modules.json` → a decoder embedding model (Qwen3-Embedding).
//! - Anything else → Chat.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::model_json::{JsonFileError, read_optional};

/// Encoder `model_type`s corral runs on its BERT encoder.
pub const SUPPORTED_ENCODERS: &[&str] = &["bert", "roberta", "xlm-roberta", "camembert"];

/// Encoder `model_type`s known to be embedding or reranking models, supported or not: the
/// unsupported ones are listed with a reason instead of being mistaken for chat models.
pub const ENCODER_FAMILIES: &[&str] = &[
    "bert",
    "roberta",
    "xlm-roberta",
    "camembert",
    "distilbert",
    "mpnet",
    "nomic_bert",
    "modernbert",
    "electra",
    "deberta",
    "deberta-v2",
    "new",
    "gte",
    "jina_bert",
];

/// The task a model's files say it does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// An encoder that maps texts to vectors.
    EncoderEmbedding,
    /// An encoder with a sequence-classification head scoring query-document pairs.
    CrossEncoder,
    /// A causal language model pooled at its last token.
    DecoderEmbedding,
    /// A causal language model asked whether a document answers a query ("yes"/"no").
    DecoderReranker,
    Chat,
}

/// The parts of `config.json` that decide the role.
#[derive(Debug, Default, Deserialize)]
pub struct ConfigHead {
    pub model_type: Option<String>,
    #[serde(default)]
    pub architectures: Vec<String>,
}

impl ConfigHead {
    pub fn is_encoder(&self) -> bool {
        self.model_type
            .as_deref()
            .is_some_and(|model_type| ENCODER_FAMILIES.contains(&model_type))
    }

    pub fn is_sequence_classifier(&self) -> bool {
        self.architectures
            .iter()
            .any(|name| name.ends_with("ForSequenceClassification"))
    }
}

/// Decides the role of the directory `dir`; `causal_lm` says whether its `config.json` loads as
/// one of the worker's decoders.
pub fn role(dir: &Path, head: &ConfigHead, causal_lm: bool) -> Role {
    if head.is_sequence_classifier() {
        Role::CrossEncoder
    } else if head.is_encoder() {
        Role::EncoderEmbedding
    } else if causal_lm && is_named_reranker(dir) {
        Role::DecoderReranker
    } else if causal_lm && dir.join(MODULES_FILE).is_file() {
        Role::DecoderEmbedding
    } else {
        Role::Chat
    }
}

fn is_named_reranker(dir: &Path) -> bool {
    dir.file_name()
        .and_then(|name| name.to_str())
        .is_some_and(|name| name.to_ascii_lowercase().contains("reranker"))
}

const MODULES_FILE: &str = "modules.json";

#[derive(Debug, Deserialize)]
struct Module {
    #[serde(default)]
    path: String,
    #[serde(rename = "type")]
    kind: String,
}

/// `1_Pooling/config.json`.
#[derive(Debug, Default, Deserialize)]
struct PoolingConfig {
    #[serde(default)]
    pooling_mode_cls_token: bool,
    #[serde(default)]
    pooling_mode_max_tokens: bool,
    #[serde(default)]
    pooling_mode_mean_sqrt_len_tokens: bool,
    #[serde(default)]
    pooling_mode_lasttoken: bool,
    #[serde(default)]
    pooling_mode_weightedmean_tokens: bool,
}

#[derive(Debug, Default, Deserialize)]
struct SentenceBertConfig {
    max_seq_length: Option<usize>,
}

/// `config_sentence_transformers.json`: prompts, and (an extension corral reads) the
/// Matryoshka dimensions the model was trained for.
#[derive(Debug, Default, Deserialize)]
struct SentenceTransformersConfig {
    #[serde(default)]
    prompts: BTreeMap<String, String>,
    default_prompt_name: Option<String>,
    matryoshka_dimensions: Option<Vec<usize>>,
}

/// How token vectors become one vector.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pooling {
    /// The mean over the input's tokens (padding excluded).
    Mean,
    /// The first token's vector (`[CLS]`).
    Cls,
    /// The last real token's vector.
    LastToken,
}

/// The sentence-transformers facts of a model directory, with the defaults that apply when a
/// file is absent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Layout {
    pub pooling: Pooling,
    pub normalize: bool,
    /// `sentence_bert_config.json`'s `max_seq_length`, when given.
    pub max_seq_length: Option<usize>,
    /// `config_sentence_transformers.json`'s prompts by name, put before a text input.
    pub prompts: BTreeMap<String, String>,
    /// The prompt used when a request names none.
    pub default_prompt_name: Option<String>,
    /// Whether `dimensions` may cut its vectors (see [`matryoshka_trained`]).
    pub matryoshka: bool,
}

#[derive(Debug, thiserror::Error)]
pub enum LayoutError {
    #[error(transparent)]
    File(#[from] JsonFileError),
    #[error("{path}: pooling {mode} is not supported (corral pools by mean, CLS or last token)")]
    Pooling { path: PathBuf, mode: &'static str },
}

impl Layout {
    /// Reads the layout of `dir`; a directory without `modules.json` pools with `default_pooling`
    /// and does not normalize (what sentence-transformers does for a bare encoder).
    pub fn read(dir: &Path, default_pooling: Pooling) -> Result<Self, LayoutError> {
        let modules: Option<Vec<Module>> = read_optional(&dir.join(MODULES_FILE))?;
        let modules = modules.unwrap_or_default();
        let has = |suffix: &str| modules.iter().find(|module| module.kind.ends_with(suffix));
        let pooling = match has(".Pooling") {
            Some(module) => {
                let path = dir.join(&module.path).join("config.json");
                let config: PoolingConfig = read_optional(&path)?.unwrap_or_default();
                pooling_of(&config, &path)?
            }
            None => default_pooling,
        };
        let bert: SentenceBertConfig =
            read_optional(&dir.join("sentence_bert_config.json"))?.unwrap_or_default();
        let st_config: SentenceTransformersConfig =
            read_optional(&dir.join("config_sentence_transformers.json"))?.unwrap_or_default();
        let matryoshka = matryoshka_trained(dir, &st_config);
        Ok(Self {
            pooling,
            normalize: has(".Normalize").is_some(),
            max_seq_length: bert.max_seq_length,
            prompts: st_config.prompts,
            default_prompt_name: st_config.default_prompt_name,
            matryoshka,
        })
    }

    /// The text put before each text input of a request naming `prompt_name` (`None`: the
    /// model's default prompt, or nothing); an unknown name is an error listing the known ones.
    pub fn prompt(&self, prompt_name: Option<&str>) -> Result<&str, String> {
        let Some(name) = prompt_name.or(self.default_prompt_name.as_deref()) else {
            return Ok("");
        };
        self.prompts.get(name).map(String::as_str).ok_or_else(|| {
            let known: Vec<&str> = self.prompts.keys().map(String::as_str).collect();
            match known.as_slice() {
                [] => format!("prompt {name:?}: this model has no prompts"),
                _ => format!(
                    "prompt {name:?}: this model's prompts are {}",
                    known.join(", ")
                ),
            }
        })
    }
}

fn pooling_of(config: &PoolingConfig, path: &Path) -> Result<Pooling, LayoutError> {
    let unsupported = |mode| LayoutError::Pooling {
        path: path.to_path_buf(),
        mode,
    };
    if config.pooling_mode_max_tokens {
        return Err(unsupported("max"));
    }
    if config.pooling_mode_mean_sqrt_len_tokens {
        return Err(unsupported("mean_sqrt_len"));
    }
    if config.pooling_mode_weightedmean_tokens {
        return Err(unsupported("weighted mean"));
    }
    Ok(if config.pooling_mode_cls_token {
        Pooling::Cls
    } else if config.pooling_mode_lasttoken {
        Pooling::LastToken
    } else {
        // sentence-transformers' own default when no mode is set.
        Pooling::Mean
    })
}

/// Whether the model was trained for Matryoshka truncation: `matryoshka_dimensions` in
/// `config_sentence_transformers.json`, or the `matryoshka` tag / `MatryoshkaLoss` that
/// sentence-transformers writes into the model card (`README.md`) of models it trained so. A
/// model without either mark gets 400 for `dimensions`: cutting other vectors loses meaning.
fn matryoshka_trained(dir: &Path, config: &SentenceTransformersConfig) -> bool {
    if config.matryoshka_dimensions.is_some() {
        return true;
    }
    let Ok(card) = std::fs::read_to_string(dir.join("README.md")) else {
        return false;
    };
    front_matter(&card).is_some_and(|yaml| yaml.to_ascii_lowercase().contains("matryoshka"))
}

/// The YAML between the model card's opening `---` lines.
fn front_matter(card: &str) -> Option<&str> {
    let rest = card.strip_prefix("---")?;
    let end = rest.find("\n---")?;
    Some(&rest[..end])
}

#[cfg(test)]
mod tests;
