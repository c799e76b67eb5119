//! What a wrapper checkpoint's files say about its vision tower before anything loads: which
//! family it is, where its tensors are, the wrapper's own keys, and for `describe` whether the
//! worker runs it and what it takes to encode an image.

use std::path::Path;

use super::{ProjectorTower, gemma3, gemma4, pixtral, qwen3_5};
use crate::image::ImageProcessor;
use crate::model::config::ModelConfig;
use crate::model::error::ModelError;
use crate::model::weights::{Weights, tensor_headers};

/// The wrappers whose towers corral runs.
#[derive(Clone, Copy)]
pub(super) enum Family {
    Qwen3_5,
    Gemma3,
    Gemma4,
    Mistral3,
}

impl Family {
    pub(super) fn of(config: &ModelConfig) -> Option<Self> {
        match config.wrapper?.model_type {
            "qwen3_5" | "qwen3_5_moe" => Some(Self::Qwen3_5),
            "gemma3" => Some(Self::Gemma3),
            "gemma4" => Some(Self::Gemma4),
            "mistral3" => Some(Self::Mistral3),
            _ => None,
        }
    }

    /// Where the tower's tensors are, in the order tried: transformers 5's names, mlx-vlm's
    /// (Qwen's patch projection stored channels last under them) and, for Gemma 3 and
    /// Mistral 3, mlx-vlm's (`vision_model.` added; Gemma 3's release has it too), then the
    /// original format's (transformers 4's releases of Mistral 3, transformers 5's of both).
    /// Gemma 4's are transformers 5's and mlx-vlm's, which drops `model.`.
    pub(super) fn tower_prefixes(self) -> &'static [&'static str] {
        match self {
            Self::Qwen3_5 => &["model.visual.", "vision_tower."],
            Self::Gemma4 => &["model.vision_tower.", "vision_tower."],
            Self::Gemma3 | Self::Mistral3 => &[
                "model.vision_tower.",
                "vision_tower.vision_model.",
                "vision_tower.",
            ],
        }
    }
}

/// The wrapper's own keys a tower reads, defaulting as transformers' `Qwen3_5Config` and
/// `Gemma3Config`.
#[derive(serde::Deserialize)]
pub(super) struct WrapperArgs {
    pub(super) vision_config: Option<serde_json::Value>,
    pub(super) image_token_id: Option<u32>,
    pub(super) image_token_index: Option<u32>,
    pub(super) boi_token_index: Option<u32>,
    pub(super) eoi_token_index: Option<u32>,
    pub(super) mm_tokens_per_image: Option<i32>,
    pub(super) spatial_merge_size: Option<i32>,
    pub(super) multimodal_projector_bias: Option<bool>,
    pub(super) projector_hidden_act: Option<String>,
    pub(super) vision_feature_layer: Option<serde_json::Value>,
    pub(super) boi_token_id: Option<u32>,
    pub(super) eoi_token_id: Option<u32>,
    text_config: Option<TextKeys>,
}

/// The text model's keys that say how it attends to an image.
#[derive(serde::Deserialize)]
struct TextKeys {
    /// Gemma 4's `"vision"` or `"all"`; Gemma 3's configs write a boolean.
    use_bidirectional_attention: Option<serde_json::Value>,
}

impl WrapperArgs {
    /// Gemma 4's `text_config.use_bidirectional_attention`.
    pub(super) fn bidirectional_attention(&self) -> Option<&str> {
        self.text_config
            .as_ref()?
            .use_bidirectional_attention
            .as_ref()?
            .as_str()
    }

    pub(super) fn read(config: &ModelConfig) -> Option<Self> {
        let text = std::fs::read_to_string(&config.path).ok()?;
        serde_json::from_str(&text).ok()
    }
}

/// The names of the tensors no layer took from `weights`.
pub(super) fn owned_names(weights: &Weights) -> Vec<String> {
    weights
        .leftover_names()
        .into_iter()
        .map(str::to_owned)
        .collect()
}

/// The projector's tensors beside a tower's (Gemma 3's, Mistral 3's), under transformers 5's
/// name or the original one.
pub(super) fn projector_tensors(weights: &mut Weights) -> Option<Weights> {
    ["model.multi_modal_projector.", "multi_modal_projector."]
        .iter()
        .find_map(|prefix| weights.split_off(prefix))
}

/// Gemma 4's embedder of the tower's tokens into the text model's width, under transformers 5's
/// name or mlx-vlm's.
pub(super) fn embedder_tensors(weights: &mut Weights) -> Option<Weights> {
    ["model.embed_vision.", "embed_vision."]
        .iter()
        .find_map(|prefix| weights.split_off(prefix))
}

/// `vision_config` as a tower reads it.
pub(super) fn vision_args<T: serde::de::DeserializeOwned>(
    config: &ModelConfig,
    value: serde_json::Value,
) -> Result<T, ModelError> {
    serde_path_to_error::deserialize(value).map_err(|error| ModelError::Config {
        path: config.path.clone(),
        message: format!("vision_config.{}: {}", error.path(), error.inner()),
    })
}

/// Whether `config`'s wrapper has a tower this worker runs.
pub(super) fn runs_tower(config: &ModelConfig) -> bool {
    Family::of(config).is_some()
}

/// Whether the checkpoint at `dir` holds a tower this worker runs and the processor config its
/// images are prepared by, from those files and the tensors' names alone (`describe`).
pub fn has_tower(config: &ModelConfig, dir: &Path) -> bool {
    let Some(family) = Family::of(config) else {
        return false;
    };
    let has_config = WrapperArgs::read(config).is_some_and(|args| args.vision_config.is_some());
    let has_tensors = tensor_headers(dir).is_ok_and(|headers| {
        headers.keys().any(|name| {
            family
                .tower_prefixes()
                .iter()
                .any(|prefix| name.starts_with(prefix))
        })
    });
    // The worker prepares images only with the processor's config.
    let has_processor = matches!(ImageProcessor::load(dir), Ok(Some(_)));
    runs_tower(config) && has_config && has_tensors && has_processor
}

/// What the tower of the checkpoint at `dir` takes while it encodes one image of at most a
/// megapixel (within its processor's limit), each activation `element_bytes` wide: `describe`'s
/// reserve for images. 0 when the files say too little to tell.
pub fn activation_bytes(config: &ModelConfig, dir: &Path, element_bytes: u64) -> u64 {
    const MEGAPIXEL: u64 = 1 << 20;
    let Some(family) = Family::of(config) else {
        return 0;
    };
    let Some(vision_config) = WrapperArgs::read(config).and_then(|args| args.vision_config) else {
        return 0;
    };
    // Without a processor config the worker takes no images (`has_tower`).
    let Ok(Some(processor)) = ImageProcessor::load(dir) else {
        return 0;
    };
    match family {
        Family::Qwen3_5 => serde_json::from_value::<qwen3_5::Args>(vision_config)
            .map_or(0, |args| {
                args.activation_bytes(processor.max_pixels().min(MEGAPIXEL), element_bytes)
            }),
        Family::Gemma3 => serde_json::from_value::<gemma3::Args>(vision_config)
            .map_or(0, |args| args.activation_bytes(element_bytes)),
        Family::Gemma4 => serde_json::from_value::<gemma4::Args>(vision_config).map_or(0, |args| {
            args.activation_bytes(processor.max_pixels().min(MEGAPIXEL), element_bytes)
        }),
        Family::Mistral3 => serde_json::from_value::<pixtral::Args>(vision_config)
            .map_or(0, |args| {
                args.activation_bytes(processor.max_pixels().min(MEGAPIXEL), element_bytes)
            }),
    }
}

/// What a projector's `tower` (`vision_config` as its metadata gives it) takes while it encodes
/// an image of `pixels`; 0 when the sizes do not read.
pub fn projector_activation_bytes(
    tower: ProjectorTower,
    vision_config: serde_json::Value,
    pixels: u64,
    element_bytes: u64,
) -> u64 {
    match tower {
        ProjectorTower::Qwen3_5 => serde_json::from_value::<qwen3_5::Args>(vision_config)
            .map_or(0, |args| args.activation_bytes(pixels, element_bytes)),
        ProjectorTower::Gemma3 => serde_json::from_value::<gemma3::Args>(vision_config)
            .map_or(0, |args| args.activation_bytes(element_bytes)),
        ProjectorTower::Gemma4 => serde_json::from_value::<gemma4::Args>(vision_config)
            .map_or(0, |args| args.activation_bytes(pixels, element_bytes)),
        ProjectorTower::Pixtral => serde_json::from_value::<pixtral::Args>(vision_config)
            .map_or(0, |args| args.activation_bytes(pixels, element_bytes)),
    }
}
