//! Vision towers: what turns an image's patches into the rows a multimodal model's text model
//! reads in place of the image's tokens. One file per tower, as `arch/` holds one per text model;
//! a wrapper's checkpoint (`qwen3_5`, ...) holds its tower's tensors beside the text model's,
//! under transformers' names (`model.visual.`) or mlx-vlm's (`vision_tower.`).

mod qwen3_5;

use std::path::Path;

use mlx_rs::Array;
use mlx_rs::error::Exception;

use super::config::ModelConfig;
use super::error::ModelError;
use super::weights::{Weights, tensor_headers};
use crate::image::ImageProcessor;

pub struct VisionTower {
    tower: Tower,
    /// The token the chat template writes once per image, which the image's tokens replace;
    /// Qwen's is also the token whose embeddings the tower's rows take the place of.
    image_token: u32,
}

enum Tower {
    Qwen3_5(qwen3_5::Tower),
}

/// An image part-way through its tower.
pub struct Encoding {
    staged: Staged,
    pub grid: [i32; 3],
}

enum Staged {
    Qwen3_5(qwen3_5::Staged),
}

/// What stands for one image in the text, in place of the placeholder the template wrote, as
/// the model's processor spells it: tokens, or text that tokenizes with its neighbours.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ImagePiece {
    Token(u32),
    Text(&'static str),
}

/// Where the rows of an image sit for a tower whose text model turns by multi-section rotary
/// positions (Qwen's M-RoPE): each row's (time, row, column) from the image's first position,
/// in order, and how far the positions of the text after it move on.
pub struct ImageTokens {
    pub positions: Vec<[i32; 3]>,
    pub advance: i32,
}

/// transformers' names for a tower's tensors; mlx-vlm's, whose patch projection is stored
/// channels last.
const TRANSFORMERS_PREFIX: &str = "model.visual.";
const MLX_VLM_PREFIX: &str = "vision_tower.";

/// The wrapper's own keys a tower reads, defaulting as transformers' `Qwen3_5Config`.
#[derive(serde::Deserialize)]
struct WrapperArgs {
    vision_config: Option<serde_json::Value>,
    #[serde(default = "qwen3_5_image_token")]
    image_token_id: u32,
}

fn qwen3_5_image_token() -> u32 {
    248_056
}

/// Whether `config`'s wrapper has a tower this worker runs.
fn runs_tower(config: &ModelConfig) -> bool {
    config
        .wrapper
        .is_some_and(|wrapper| matches!(wrapper.model_type, "qwen3_5" | "qwen3_5_moe"))
}

/// Whether the checkpoint at `dir` holds a tower this worker runs and the processor config its
/// images are prepared by, from those files and the tensors' names alone (`describe`).
pub fn has_tower(config: &ModelConfig, dir: &Path) -> bool {
    let has_config = std::fs::read_to_string(&config.path)
        .ok()
        .and_then(|text| serde_json::from_str::<WrapperArgs>(&text).ok())
        .is_some_and(|args| args.vision_config.is_some());
    let has_tensors = tensor_headers(dir).is_ok_and(|headers| {
        headers
            .keys()
            .any(|name| name.starts_with(TRANSFORMERS_PREFIX) || name.starts_with(MLX_VLM_PREFIX))
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
    let vision_config = std::fs::read_to_string(&config.path)
        .ok()
        .and_then(|text| serde_json::from_str::<WrapperArgs>(&text).ok())
        .and_then(|args| args.vision_config);
    let Some(args) =
        vision_config.and_then(|value| serde_json::from_value::<qwen3_5::Args>(value).ok())
    else {
        return 0;
    };
    // Without a processor config the worker takes no images (`has_tower`).
    match ImageProcessor::load(dir) {
        Ok(Some(processor)) => {
            args.activation_bytes(processor.max_pixels().min(MEGAPIXEL), element_bytes)
        }
        _ => 0,
    }
}

impl VisionTower {
    /// The tower of a wrapper checkpoint whose tower corral runs, taking its tensors from
    /// `weights`; `None` for a text model, or a checkpoint without the tower's tensors or its
    /// `vision_config` (a text model converted out of its wrapper).
    pub fn load(config: &ModelConfig, weights: &mut Weights) -> Result<Option<Self>, ModelError> {
        if !runs_tower(config) {
            return Ok(None);
        }
        let (mut tensors, channels_last) = match weights.split_off(TRANSFORMERS_PREFIX) {
            Some(tensors) => (tensors, false),
            None => match weights.split_off(MLX_VLM_PREFIX) {
                Some(tensors) => (tensors, true),
                None => return Ok(None),
            },
        };
        let bad = |message: String| ModelError::Config {
            path: config.path.clone(),
            message,
        };
        let whole = std::fs::read_to_string(&config.path)
            .map_err(|error| bad(format!("reading it again for the vision tower: {error}")))?;
        let wrapper_args: WrapperArgs =
            serde_json::from_str(&whole).map_err(|error| bad(error.to_string()))?;
        let Some(vision_config) = wrapper_args.vision_config else {
            return Ok(None);
        };
        let args = serde_path_to_error::deserialize(vision_config)
            .map_err(|error| bad(format!("vision_config.{}: {}", error.path(), error.inner())))?;
        let tower = qwen3_5::Tower::load(
            &args,
            &mut tensors,
            channels_last,
            config.quantization,
            &config.path,
        )?;
        let leftovers = tensors.leftover_names();
        if !leftovers.is_empty() {
            tracing::warn!(model = %config.path.display(), tensors = ?leftovers, "ignoring vision tensors no layer uses");
        }
        Ok(Some(Self {
            tower: Tower::Qwen3_5(tower),
            image_token: wrapper_args.image_token_id,
        }))
    }

    /// One image's rows for the text model, `[tokens, hidden]`, from its `patches`
    /// (`[patches, values]`, as the model's processor lays them out) over a `grid` of
    /// `[time, rows, columns]` patches.
    pub fn encode(&self, patches: &Array, grid: [i32; 3]) -> Result<Array, Exception> {
        let mut encoding = self.begin(patches, grid)?;
        match self.advance(&mut encoding, self.depth())? {
            Some(rows) => Ok(rows),
            None => Err(Exception::from("the tower stopped short of its last block")),
        }
    }

    /// Starts encoding an image (as `encode` takes it), before the tower's first block; the
    /// batch runs the blocks a few at a time, so that a large image does not hold up the other
    /// sequences' tokens for longer than a prompt chunk does.
    pub fn begin(&self, patches: &Array, grid: [i32; 3]) -> Result<Encoding, Exception> {
        let staged = match &self.tower {
            Tower::Qwen3_5(tower) => Staged::Qwen3_5(tower.begin(patches, grid)?),
        };
        Ok(Encoding { staged, grid })
    }

    /// Runs at most `blocks` more of the tower's blocks on `encoding`; the image's rows once
    /// the last has run.
    pub fn advance(
        &self,
        encoding: &mut Encoding,
        blocks: usize,
    ) -> Result<Option<Array>, Exception> {
        match (&self.tower, &mut encoding.staged) {
            (Tower::Qwen3_5(tower), Staged::Qwen3_5(staged)) => tower.advance(staged, blocks),
        }
    }

    /// The memory the tower takes at its peak while it encodes an image of `grid` patches,
    /// each activation `element_bytes` wide.
    pub fn activation_bytes(&self, grid: [i32; 3], element_bytes: u64) -> u64 {
        match &self.tower {
            Tower::Qwen3_5(tower) => tower.activation_bytes(grid, element_bytes),
        }
    }

    /// The tower's blocks.
    pub fn depth(&self) -> usize {
        match &self.tower {
            Tower::Qwen3_5(tower) => tower.depth(),
        }
    }

    /// One block's multiply-adds over an image of `grid` patches, which the batch weighs
    /// against a prompt token's.
    pub fn block_multiply_adds(&self, grid: [i32; 3]) -> f64 {
        match &self.tower {
            Tower::Qwen3_5(tower) => tower.block_multiply_adds(grid),
        }
    }

    /// What replaces the template's placeholder for an image of `grid` patches.
    pub fn expansion(&self, grid: [i32; 3]) -> Vec<ImagePiece> {
        vec![ImagePiece::Token(self.image_token); self.rows(grid)]
    }

    /// The rows the tower gives an image of `grid` patches.
    pub fn rows(&self, grid: [i32; 3]) -> usize {
        match &self.tower {
            Tower::Qwen3_5(tower) => tower.rows(grid),
        }
    }

    /// The multi-section rotary positions of an image of `grid` patches, for a text model that
    /// turns by them; `None` where the image's tokens turn as text does.
    pub fn rotary_positions(&self, grid: [i32; 3]) -> Option<ImageTokens> {
        match &self.tower {
            Tower::Qwen3_5(tower) => Some(tower.image_tokens(grid)),
        }
    }

    /// The token the chat template writes once per image.
    pub fn placeholder(&self) -> u32 {
        self.image_token
    }

    /// The token whose embeddings the tower's rows replace, one per row, in order.
    pub fn row_token(&self) -> u32 {
        self.image_token
    }
}

#[cfg(test)]
mod tests;
