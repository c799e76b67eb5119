//! The Qwen2-VL processor's settings as a model's files hold them, with
//! `Qwen2VLImageProcessorPil`'s class defaults for the keys they leave out.

use std::path::Path;

use serde::Deserialize;

use super::Qwen2VlProcessor;
use crate::image::ImageError;
use crate::image::resample::Filter;
use crate::image::scaling::Scaling;

/// PIL's `BICUBIC`, the class's filter.
const BICUBIC: u8 = 3;

#[derive(Debug, Deserialize)]
#[serde(default)]
struct Config {
    /// Absent, the class's; present, as given (a missing bound is an error, as in transformers).
    size: Size,
    /// Older configs' spelling of `size`'s bounds, which override it where given.
    min_pixels: Option<u64>,
    max_pixels: Option<u64>,
    patch_size: usize,
    temporal_patch_size: usize,
    merge_size: usize,
    image_mean: [f32; 3],
    image_std: [f32; 3],
    rescale_factor: f64,
    resample: u8,
    do_resize: bool,
    do_rescale: bool,
    do_normalize: bool,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct Size {
    shortest_edge: Option<u64>,
    longest_edge: Option<u64>,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            size: Size {
                shortest_edge: Some(56 * 56),
                longest_edge: Some(28 * 28 * 1280),
            },
            min_pixels: None,
            max_pixels: None,
            patch_size: 14,
            temporal_patch_size: 2,
            merge_size: 2,
            // OpenAI CLIP's.
            image_mean: [0.481_454_66, 0.457_827_5, 0.408_210_73],
            image_std: [0.268_629_54, 0.261_302_6, 0.275_777_1],
            rescale_factor: 1.0 / 255.0,
            resample: BICUBIC,
            do_resize: true,
            do_rescale: true,
            do_normalize: true,
        }
    }
}

/// The processor `value`, read from `path`, configures.
pub(in crate::image) fn parse(
    path: &Path,
    value: serde_json::Value,
) -> Result<Qwen2VlProcessor, ImageError> {
    let config: Config = serde_path_to_error::deserialize(value)
        .map_err(|error| bad(path, format!("{}: {}", error.path(), error.inner())))?;
    config.resolve().map_err(|message| bad(path, message))
}

fn bad(path: &Path, message: String) -> ImageError {
    ImageError::ProcessorConfig {
        path: path.to_owned(),
        message,
    }
}

impl Config {
    fn resolve(self) -> Result<Qwen2VlProcessor, String> {
        let filter = Filter::from_pil(self.resample).ok_or_else(|| {
            format!(
                "resample {} (corral resizes with bilinear, 2, or bicubic, 3)",
                self.resample
            )
        })?;
        if self.patch_size == 0 || self.merge_size == 0 || self.temporal_patch_size == 0 {
            return Err("patch_size, merge_size and temporal_patch_size must be positive".into());
        }
        let bound = |old: Option<u64>, new: Option<u64>, name: &str| {
            old.or(new)
                .ok_or_else(|| format!("size has no {name} (nor the older key for it)"))
        };
        Ok(Qwen2VlProcessor {
            min_pixels: bound(self.min_pixels, self.size.shortest_edge, "shortest_edge")?,
            max_pixels: bound(self.max_pixels, self.size.longest_edge, "longest_edge")?,
            patch_size: self.patch_size,
            temporal_patch_size: self.temporal_patch_size,
            merge_size: self.merge_size,
            filter,
            do_resize: self.do_resize,
            scaling: Scaling {
                image_mean: self.image_mean,
                image_std: self.image_std,
                rescale_factor: self.rescale_factor,
                do_rescale: self.do_rescale,
                do_normalize: self.do_normalize,
            },
        })
    }
}

/// The processor a llama.cpp projector (`mmproj`) of a Qwen-VL tower implies, as llama.cpp's
/// `clip.cpp` prepares its images: the patch, merge, mean and std its metadata gives, two
/// frames, bicubic, and from 8 to 4096 merged patches an image.
pub(in crate::image) fn for_projector(
    patch_size: usize,
    merge_size: usize,
    image_mean: [f32; 3],
    image_std: [f32; 3],
) -> Qwen2VlProcessor {
    let merged_patch = (patch_size * merge_size * patch_size * merge_size) as u64;
    Qwen2VlProcessor {
        min_pixels: 8 * merged_patch,
        max_pixels: 4096 * merged_patch,
        patch_size,
        temporal_patch_size: 2,
        merge_size,
        filter: Filter::Bicubic,
        do_resize: true,
        scaling: Scaling::normalizing(image_mean, image_std),
    }
}
