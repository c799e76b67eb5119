//! Whether a model that failed to load can ever load: the one place where load errors are
//! classified, by variant, for the `permanent` flag of `LoadFailed`.
//!
//! Permanent means the model's files as they are can never load: a bad or unsupported config,
//! architecture, quantization or tensor type, a missing or mis-shaped tensor, a malformed file.
//! The supervisor then lists the model as unservable and starts no more workers for it. Anything
//! else (an I/O error, MLX failing, which is how running out of memory shows, an engine thread
//! that could not start or died) may pass, and the supervisor retries under its crash-loop
//! backoff. When in doubt a variant is transient: misjudging it so costs retries, while a
//! permanent verdict takes the model off the list until its files change.
//!
//! The matches are exhaustive, so a new error variant does not compile until it is classified.

use crate::chat_template::ChatTemplateError;
use crate::embedding::EmbedLoadError;
use crate::embedding::engine::EncoderEngineError;
use crate::embedding::layout::LayoutError;
use crate::engine::EngineError;
use crate::gguf::mmproj::ProjectorError;
use crate::gguf::{GgufError, GgufLoadError};
use crate::loaded::LoadError;
use crate::model::ModelError;
use crate::model_json::JsonFileError;

/// A failed load as the supervisor is told of it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoadFailure {
    /// The error with its causes, naming the file.
    pub message: String,
    pub permanent: bool,
}

impl LoadFailure {
    pub fn of<E>(error: E) -> Self
    where
        E: Permanence + std::error::Error + Send + Sync + 'static,
    {
        LoadFailure {
            permanent: error.is_permanent(),
            message: format!("{:#}", anyhow::Error::new(error)),
        }
    }
}

pub trait Permanence {
    /// Whether the model's files, as they are, can never load.
    fn is_permanent(&self) -> bool;
}

impl Permanence for EngineError {
    fn is_permanent(&self) -> bool {
        match self {
            EngineError::Load(error) => error.is_permanent(),
            EngineError::Spawn(_) | EngineError::Stopped | EngineError::NotAsSent => false,
        }
    }
}

impl Permanence for EncoderEngineError {
    fn is_permanent(&self) -> bool {
        match self {
            EncoderEngineError::Load(error) => error.is_permanent(),
            EncoderEngineError::Spawn(_) | EncoderEngineError::Stopped => false,
        }
    }
}

impl Permanence for LoadError {
    fn is_permanent(&self) -> bool {
        match self {
            LoadError::Model(error) => error.is_permanent(),
            LoadError::ChatTemplate(error) => error.is_permanent(),
            LoadError::ModelFile(error) => error.is_permanent(),
            LoadError::Gguf(error) => error.is_permanent(),
            LoadError::Projector(error) => match error {
                ProjectorError::Gguf(error) => error.is_permanent(),
                ProjectorError::Model(error) => error.is_permanent(),
                ProjectorError::Unsupported { .. } | ProjectorError::Invalid { .. } => true,
            },
            LoadError::Draft { source, .. } => source.is_permanent(),
            // A rank lost while the group loaded says nothing of the files.
            LoadError::Group(_) => false,
            // A processor config the load could not read as one stays so.
            LoadError::Tokenizer { .. }
            | LoadError::NotAModel { .. }
            | LoadError::ImageProcessor(_)
            | LoadError::DraftMismatch { .. }
            | LoadError::NoDraft => true,
        }
    }
}

impl Permanence for EmbedLoadError {
    fn is_permanent(&self) -> bool {
        match self {
            EmbedLoadError::Model(error) => error.is_permanent(),
            EmbedLoadError::Layout(error) => error.is_permanent(),
            EmbedLoadError::Config(error) => error.is_permanent(),
            EmbedLoadError::Tokenizer { .. } | EmbedLoadError::Unsupported { .. } => true,
        }
    }
}

impl Permanence for GgufLoadError {
    fn is_permanent(&self) -> bool {
        match self {
            GgufLoadError::Gguf(error) => error.is_permanent(),
            GgufLoadError::Model(error) => error.is_permanent(),
            GgufLoadError::ChatTemplate(error) => error.is_permanent(),
        }
    }
}

impl Permanence for GgufError {
    fn is_permanent(&self) -> bool {
        match self {
            GgufError::Invalid { .. } => true,
            GgufError::Io { .. } => false,
        }
    }
}

impl Permanence for ModelError {
    fn is_permanent(&self) -> bool {
        match self {
            ModelError::Config { .. }
            | ModelError::NoWeights { .. }
            | ModelError::Safetensors { .. }
            | ModelError::MissingTensor { .. }
            | ModelError::Shape { .. }
            | ModelError::Dtype { .. }
            | ModelError::Quantization { .. } => true,
            ModelError::Io { .. } | ModelError::Mlx { .. } => false,
        }
    }
}

impl Permanence for ChatTemplateError {
    fn is_permanent(&self) -> bool {
        match self {
            ChatTemplateError::ConfigFile(error) => error.is_permanent(),
            ChatTemplateError::Read { .. } => false,
            // At load, rendering only ever sees the worker's own probes: the template's fault.
            ChatTemplateError::NoDefault { .. }
            | ChatTemplateError::Parse { .. }
            | ChatTemplateError::Raised(_)
            | ChatTemplateError::Render { .. } => true,
        }
    }
}

impl Permanence for JsonFileError {
    fn is_permanent(&self) -> bool {
        match self {
            JsonFileError::Parse { .. } => true,
            JsonFileError::Read { .. } => false,
        }
    }
}

impl Permanence for LayoutError {
    fn is_permanent(&self) -> bool {
        match self {
            LayoutError::File(error) => error.is_permanent(),
            LayoutError::Pooling { .. } => true,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use super::*;

    fn missing_tensor() -> ModelError {
        ModelError::MissingTensor {
            name: "model.norm.weight".to_owned(),
            dir: PathBuf::from("/models/tiny"),
        }
    }

    fn io(path: &str) -> std::io::Error {
        std::io::Error::other(format!("{path}: input/output error"))
    }

    #[test]
    fn what_the_files_say_is_permanent_through_every_wrapper() {
        let failure = LoadFailure::of(EngineError::Load(LoadError::Model(missing_tensor())));
        assert!(failure.permanent);
        assert_eq!(
            failure.message,
            "/models/tiny: tensor model.norm.weight is missing"
        );
        let gguf = GgufLoadError::Gguf(GgufError::Invalid {
            path: PathBuf::from("/models/tiny.gguf"),
            message: "tensor type 99".to_owned(),
        });
        assert!(EngineError::Load(LoadError::Gguf(gguf)).is_permanent());
        let quantization = ModelError::Quantization {
            path: PathBuf::from("/models/gpt-oss/model.safetensors"),
            message: "an embedding quantized as mxfp4 is not supported".to_owned(),
        };
        let embed = EncoderEngineError::Load(EmbedLoadError::Model(quantization));
        assert!(embed.is_permanent());
        let pooling = LayoutError::Pooling {
            path: PathBuf::from("/models/e5/1_Pooling/config.json"),
            mode: "max",
        };
        assert!(EncoderEngineError::Load(EmbedLoadError::Layout(pooling)).is_permanent());
    }

    #[test]
    fn io_mlx_and_a_lost_engine_thread_may_pass() {
        let read = ModelError::Io {
            path: PathBuf::from("/models/tiny/config.json"),
            source: io("/models/tiny/config.json"),
        };
        let failure = LoadFailure::of(EngineError::Load(LoadError::Model(read)));
        assert!(!failure.permanent);
        assert!(
            failure.message.starts_with("/models/tiny/config.json: "),
            "{}",
            failure.message
        );
        let template = ChatTemplateError::Read {
            path: PathBuf::from("/models/tiny/chat_template.jinja"),
            source: io("chat_template.jinja"),
        };
        assert!(!EngineError::Load(LoadError::ChatTemplate(template)).is_permanent());
        let gguf = GgufLoadError::Gguf(GgufError::Io {
            path: PathBuf::from("/models/tiny.gguf"),
            source: io("tiny.gguf"),
        });
        assert!(!EngineError::Load(LoadError::Gguf(gguf)).is_permanent());
        let mlx = ModelError::Mlx {
            dir: PathBuf::from("/models/tiny/model.safetensors"),
            action: "reading the tensors",
            source: mlx_rs::error::Exception::custom("[malloc] Unable to allocate 1 GiB"),
        };
        assert!(!EngineError::Load(LoadError::Model(mlx)).is_permanent());
        assert!(!EngineError::Stopped.is_permanent());
        assert!(!EncoderEngineError::Spawn(io("thread")).is_permanent());
    }
}
