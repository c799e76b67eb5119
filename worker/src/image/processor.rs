//! The image processor a model's files name (`image_processor_type` in
//! `preprocessor_config.json`, or in the `image_processor` section transformers 5 writes into
//! `processor_config.json`), and the patches every processor hands its vision tower.

use std::path::{Path, PathBuf};

use image::RgbImage;
use sha2::{Digest, Sha256};

use super::ImageError;
use super::gemma3::{self, Gemma3Processor};
use super::gemma4::{self, Gemma4Processor};
use super::pixtral::{self, PixtralProcessor};
use super::qwen2_vl::{self, Qwen2VlProcessor};

#[derive(Debug, Clone, PartialEq)]
pub enum ImageProcessor {
    Qwen2Vl(Qwen2VlProcessor),
    Gemma3(Gemma3Processor),
    Gemma4(Gemma4Processor),
    Pixtral(PixtralProcessor),
}

/// An image as the vision tower takes it.
#[derive(Debug, Clone)]
pub struct Patches {
    /// `[patches, values per patch]`, row-major, in the processor's order (`pixel_values`).
    pub values: Vec<f32>,
    /// Values per patch.
    pub patch_values: usize,
    /// Time, rows and columns in patches (`image_grid_thw`); `[1, 1, 1]` for a processor that
    /// hands the tower the whole image, which cuts the patches itself (Gemma 3).
    pub grid: [usize; 3],
    /// SHA-256 of the values and the grid: the image's key in the prefix cache and among the
    /// tower's outputs.
    pub digest: [u8; 32],
}

impl Patches {
    pub(super) fn new(values: Vec<f32>, patch_values: usize, grid: [usize; 3]) -> Self {
        let mut hasher = Sha256::new();
        for side in grid {
            hasher.update((side as u64).to_le_bytes());
        }
        for value in &values {
            hasher.update(value.to_le_bytes());
        }
        Self {
            values,
            patch_values,
            grid,
            digest: hasher.finalize().into(),
        }
    }
}

impl ImageProcessor {
    /// The processor of the model in `dir`; `None` when its files configure none.
    pub fn load(dir: &Path) -> Result<Option<Self>, ImageError> {
        let Some((path, section)) = processor_section(dir)? else {
            return Ok(None);
        };
        // Configs older than the key are Qwen2-VL's; transformers suffixes a backend's class.
        let kind = section
            .get("image_processor_type")
            .and_then(serde_json::Value::as_str)
            .unwrap_or("Qwen2VLImageProcessor");
        let family = kind.trim_end_matches("Fast").trim_end_matches("Pil");
        match family {
            "Qwen2VLImageProcessor" => qwen2_vl::config::parse(&path, section).map(Self::Qwen2Vl),
            "Gemma3ImageProcessor" => gemma3::parse(&path, section).map(Self::Gemma3),
            "Gemma4ImageProcessor" => gemma4::parse(&path, section).map(Self::Gemma4),
            "PixtralImageProcessor" => pixtral::parse(&path, section, dir).map(Self::Pixtral),
            _ => Err(ImageError::ProcessorConfig {
                path,
                message: format!("image_processor_type `{kind}` is not a processor corral runs"),
            }),
        }
        .map(Some)
    }

    /// The processor llama.cpp runs for a Qwen-VL projector (`mmproj`) whose metadata gives
    /// these (`gguf/mmproj.rs`).
    pub fn qwen_vl_projector(
        patch_size: usize,
        merge_size: usize,
        image_mean: [f32; 3],
        image_std: [f32; 3],
    ) -> Self {
        Self::Qwen2Vl(qwen2_vl::config::for_projector(
            patch_size, merge_size, image_mean, image_std,
        ))
    }

    /// The processor llama.cpp runs for a Gemma 3 projector: its one `size`, square, with the
    /// metadata's mean and std.
    pub fn gemma3_projector(size: usize, [mean, std]: [[f32; 3]; 2]) -> Self {
        Self::Gemma3(gemma3::for_projector(size, mean, std))
    }

    /// The processor llama.cpp runs for a Gemma 4 projector of `patch` pixels, pooled by
    /// `pooling`, with the metadata's mean and std.
    pub fn gemma4_projector(patch: usize, pooling: usize, [mean, std]: [[f32; 3]; 2]) -> Self {
        Self::Gemma4(gemma4::for_projector(patch, pooling, mean, std))
    }

    /// The processor llama.cpp runs for a Pixtral projector of `patch` pixels, merged by
    /// `merge`, with the metadata's mean and std.
    pub fn pixtral_projector(patch: usize, merge: usize, [mean, std]: [[f32; 3]; 2]) -> Self {
        Self::Pixtral(pixtral::for_projector(patch, merge, mean, std))
    }

    /// The processor with an operator's pixel limits (`[models.ID]`) in place of its own;
    /// Gemma 3's one fixed size has none to change.
    pub fn with_pixel_limits(self, min: Option<u64>, max: Option<u64>) -> Self {
        match self {
            Self::Qwen2Vl(processor) => Self::Qwen2Vl(processor.with_pixel_limits(min, max)),
            Self::Gemma4(processor) => Self::Gemma4(processor.with_pixel_limits(min, max)),
            Self::Pixtral(processor) => Self::Pixtral(processor.with_pixel_limits(min, max)),
            Self::Gemma3(_) => self,
        }
    }

    /// The most pixels an image is resized to.
    pub fn max_pixels(&self) -> u64 {
        match self {
            Self::Qwen2Vl(processor) => processor.max_pixels(),
            Self::Gemma3(processor) => processor.pixels(),
            Self::Gemma4(processor) => processor.max_pixels(),
            Self::Pixtral(processor) => processor.max_pixels(),
        }
    }

    pub fn preprocess(&self, image: &RgbImage) -> Result<Patches, ImageError> {
        match self {
            Self::Qwen2Vl(processor) => processor.preprocess(image),
            Self::Gemma3(processor) => processor.preprocess(image),
            Self::Gemma4(processor) => processor.preprocess(image),
            Self::Pixtral(processor) => processor.preprocess(image),
        }
    }
}

/// The processor's settings: `preprocessor_config.json`, else the `image_processor` of
/// `processor_config.json` (transformers 5 may write either), with the file they came from.
pub(super) fn processor_section(
    dir: &Path,
) -> Result<Option<(PathBuf, serde_json::Value)>, ImageError> {
    let flat = dir.join("preprocessor_config.json");
    if flat.is_file() {
        let section = read_json(&flat)?;
        return Ok(Some((flat, section)));
    }
    let nested = dir.join("processor_config.json");
    if !nested.is_file() {
        return Ok(None);
    }
    let section = read_json(&nested)?
        .get_mut("image_processor")
        .map(serde_json::Value::take);
    Ok(section.map(|section| (nested, section)))
}

fn read_json(path: &Path) -> Result<serde_json::Value, ImageError> {
    let bad = |message: String| ImageError::ProcessorConfig {
        path: path.to_owned(),
        message,
    };
    let text = std::fs::read_to_string(path).map_err(|error| bad(error.to_string()))?;
    serde_json::from_str(&text).map_err(|error| bad(error.to_string()))
}
