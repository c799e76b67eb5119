//! Everything a worker loads for its model: weights, tokenizer, chat template and stop tokens.
//! (Sampling defaults are the supervisor's: `describe` reports them.) Built and used only on the engine thread.

use std::cell::OnceCell;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokenizers::Tokenizer;

use crate::chat_template::{ChatTemplate, ChatTemplateError};
use crate::constraint::{ConstraintError, ConstraintFactory};
use crate::distributed::Member;
use crate::encoded_images::EncodedImages;
use crate::gguf::{self, GgufLoadError, GgufModel};
use crate::image::{ImageError, ImageProcessor};
use crate::model::{Model, ModelError, count_parameters};
use crate::model_json::JsonFileError;
use crate::stop_tokens::eos_token_ids;
use crate::tools::ModelFormats;

#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error(transparent)]
    Model(#[from] ModelError),
    #[error("{path}: cannot load tokenizer: {message}")]
    Tokenizer { path: PathBuf, message: String },
    #[error(transparent)]
    ChatTemplate(#[from] ChatTemplateError),
    #[error(transparent)]
    ModelFile(#[from] JsonFileError),
    #[error("{path}: neither a model directory nor a GGUF file")]
    NotAModel { path: PathBuf },
    #[error(transparent)]
    Gguf(#[from] GgufLoadError),
    #[error("the vision projector: {0}")]
    Projector(gguf::mmproj::ProjectorError),
    #[error(transparent)]
    ImageProcessor(#[from] ImageError),
    #[error("the draft model {path:?}: {source}")]
    Draft {
        path: PathBuf,
        source: Box<LoadError>,
    },
    #[error("the draft model {path:?} cannot guess for this model: {reason}")]
    DraftMismatch { path: PathBuf, reason: String },
    #[error("speculative decoding by a draft model needs one (`draft`)")]
    NoDraft,
    #[error("the worker group: {0}")]
    Group(String),
}

pub struct LoadedModel {
    /// The model directory or GGUF file.
    pub dir: PathBuf,
    pub model: Model,
    pub tokenizer: Arc<Tokenizer>,
    pub chat_template: Option<ChatTemplate>,
    pub eos_token_ids: BTreeSet<u32>,
    /// The tool-call and reasoning formats its template and vocabulary reveal.
    pub formats: ModelFormats,
    /// How its processor prepares an image, for a model with a vision tower.
    pub image_processor: Option<ImageProcessor>,
    /// The tower's rows of the images sent lately.
    pub(crate) encoded_images: EncodedImages,
    /// The multiply-adds one prompt token costs the text model (its parameters, or a mixture's
    /// active ones), against which the batch weighs the vision tower's blocks; `None` without
    /// a tower, or where the checkpoint's headers do not say.
    pub(crate) prompt_token_multiply_adds: Option<f64>,
    pub load_time: Duration,
    /// Built by the first request that constrains its output: describing the vocabulary to
    /// llguidance takes a moment that most workers never need to spend.
    constraints: OnceCell<Result<ConstraintFactory, String>>,
}

impl LoadedModel {
    /// Loads a Hugging Face / MLX directory or a single GGUF file.
    pub fn load(path: &Path) -> Result<Self, LoadError> {
        Self::load_with(path, gguf::Choices::default(), None, None)
    }

    /// As [`Self::load`], a GGUF's quantized tensors as `gguf_choices` says, with the vision
    /// projector (`mmproj`) at `projector` beside a GGUF. A projector of a type corral does not
    /// run leaves the model serving text, which the log says. As a rank of `member`'s group,
    /// it runs only its share of the model.
    pub fn load_with(
        path: &Path,
        gguf_choices: gguf::Choices,
        projector: Option<&Path>,
        member: Option<Member>,
    ) -> Result<Self, LoadError> {
        let started = Instant::now();
        if gguf::is_gguf(path) {
            let mut loaded = GgufModel::load_with(path, gguf_choices)?;
            if let Some(member) = member {
                loaded.model = loaded.model.in_group(member)?;
            }
            let formats = detect_formats(loaded.chat_template.as_ref(), &loaded.tokenizer);
            let mut image_processor = None;
            let mut prompt_token_multiply_adds = None;
            match projector.map(|projector| {
                gguf::mmproj::load(projector, &loaded.tokenizer, &loaded.model.config)
            }) {
                Some(Ok(found)) => {
                    loaded.model.vision = Some(found.tower);
                    image_processor = Some(found.processor);
                    let header = gguf::GgufHeader::read(path).map_err(GgufLoadError::from)?;
                    let parameters: u64 = header
                        .tensors
                        .iter()
                        .map(|tensor| tensor.dims.iter().product::<u64>())
                        .sum();
                    prompt_token_multiply_adds = Some(parameters as f64);
                }
                Some(Err(error @ gguf::mmproj::ProjectorError::Unsupported { .. })) => {
                    tracing::warn!(model = %path.display(), %error, "serving the text model alone; its images are refused");
                }
                Some(Err(error)) => return Err(LoadError::Projector(error)),
                None => {}
            }
            return Ok(Self {
                dir: path.to_path_buf(),
                model: loaded.model,
                tokenizer: Arc::new(loaded.tokenizer),
                chat_template: loaded.chat_template,
                eos_token_ids: loaded.eos_token_ids,
                formats,
                image_processor,
                encoded_images: EncodedImages::default(),
                prompt_token_multiply_adds,
                load_time: started.elapsed(),
                constraints: OnceCell::new(),
            });
        }
        let dir = path;
        if !dir.is_dir() {
            return Err(LoadError::NotAModel {
                path: dir.to_path_buf(),
            });
        }
        let tokenizer_path = dir.join("tokenizer.json");
        let tokenizer =
            Tokenizer::from_file(&tokenizer_path).map_err(|error| LoadError::Tokenizer {
                path: tokenizer_path.clone(),
                message: error.to_string(),
            })?;
        let model = Model::load_in(dir, member)?;
        let chat_template = ChatTemplate::from_model_dir(dir)?;
        let eos_token_ids = eos_token_ids(dir, &tokenizer)?;
        let formats = detect_formats(chat_template.as_ref(), &tokenizer);
        let (image_processor, prompt_token_multiply_adds) = match model.vision {
            Some(_) => {
                let parameters = count_parameters(dir, &model.config).ok();
                let per_token = parameters.map(|count| count.active.unwrap_or(count.total) as f64);
                (ImageProcessor::load(dir)?, per_token)
            }
            None => (None, None),
        };
        Ok(Self {
            dir: dir.to_path_buf(),
            model,
            tokenizer: Arc::new(tokenizer),
            chat_template,
            eos_token_ids,
            formats,
            image_processor,
            encoded_images: EncodedImages::default(),
            prompt_token_multiply_adds,
            load_time: started.elapsed(),
            constraints: OnceCell::new(),
        })
    }

    /// What compiles this model's grammars, built on first use; an error says why this model's
    /// vocabulary cannot be constrained (every constrained request then gets it).
    pub fn constraints(&self) -> Result<&ConstraintFactory, ConstraintError> {
        self.constraints
            .get_or_init(|| {
                let vocab = self.model.config.vocab_size as usize;
                ConstraintFactory::new(&self.tokenizer, vocab, &self.eos_token_ids).map_err(
                    |error| match error {
                        ConstraintError::Vocabulary(message) => message,
                        other => other.to_string(),
                    },
                )
            })
            .as_ref()
            .map_err(|message| ConstraintError::Vocabulary(message.clone()))
    }
}

fn detect_formats(template: Option<&ChatTemplate>, tokenizer: &Tokenizer) -> ModelFormats {
    ModelFormats::detect(template.map(ChatTemplate::source), tokenizer)
}
