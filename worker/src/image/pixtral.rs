//! transformers' Pixtral image processor (`PixtralImageProcessorPil`), which Mistral 3's
//! releases name: each image scaled down to fit the longest edge (never up), then resized up to
//! whole merged patches (the processor's patch size times its `spatial_merge_size`, from
//! `processor_config.json`) with Pillow's filter (bicubic) on 8-bit pixels, scaled and
//! normalized, cut into patches row by row.

use std::path::Path;

use image::RgbImage;
use serde::Deserialize;

use super::llama_cpp_size::TokenLimits;
use super::resample::{Filter, resize};
use super::scaling::Scaling;
use super::{ImageError, Patches};

#[derive(Debug, Clone, PartialEq)]
pub struct PixtralProcessor {
    sizing: Sizing,
    /// The tower's patch side.
    patch: usize,
    /// Patches along a side that the projector merges into one token.
    merge: usize,
    filter: Filter,
    do_resize: bool,
    scaling: Scaling,
}

/// How an image's size is chosen.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Sizing {
    /// transformers': down to fit the longest edge, then up to whole merged patches.
    LongestEdge(usize),
    /// llama.cpp's for a projector: within its limits of merged patches.
    Limits(TokenLimits),
}

/// The image processor's settings, with the class's defaults for the keys they leave out.
#[derive(Debug, Deserialize)]
#[serde(default)]
struct Config {
    size: Size,
    resample: u8,
    image_mean: [f32; 3],
    image_std: [f32; 3],
    rescale_factor: f64,
    do_resize: bool,
    do_rescale: bool,
    do_normalize: bool,
}

#[derive(Debug, Deserialize)]
struct Size {
    longest_edge: usize,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            size: Size { longest_edge: 1024 },
            // PIL's `BICUBIC`.
            resample: 3,
            // OpenAI CLIP's.
            image_mean: [0.481_454_66, 0.457_827_5, 0.408_210_73],
            image_std: [0.268_629_54, 0.261_302_6, 0.275_777_1],
            rescale_factor: 1.0 / 255.0,
            do_resize: true,
            do_rescale: true,
            do_normalize: true,
        }
    }
}

/// `PixtralProcessor`'s own keys (`processor_config.json`), which size the patches the images
/// are resized to; the class's defaults where the file or a key is missing.
#[derive(Debug, Deserialize)]
#[serde(default)]
struct ProcessorKeys {
    patch_size: usize,
    spatial_merge_size: usize,
}

impl Default for ProcessorKeys {
    fn default() -> Self {
        Self {
            patch_size: 16,
            spatial_merge_size: 1,
        }
    }
}

/// The processor `value`, read from `path`, configures, with the processor's own keys in
/// `dir`'s `processor_config.json`.
pub(super) fn parse(
    path: &Path,
    value: serde_json::Value,
    dir: &Path,
) -> Result<PixtralProcessor, ImageError> {
    let bad = |path: &Path, message: String| ImageError::ProcessorConfig {
        path: path.to_owned(),
        message,
    };
    let config: Config = serde_path_to_error::deserialize(value)
        .map_err(|error| bad(path, format!("{}: {}", error.path(), error.inner())))?;
    let keys_path = dir.join("processor_config.json");
    let keys: ProcessorKeys = match std::fs::read_to_string(&keys_path) {
        Ok(text) => {
            serde_json::from_str(&text).map_err(|error| bad(&keys_path, error.to_string()))?
        }
        Err(_) => ProcessorKeys::default(),
    };
    let filter = Filter::from_pil(config.resample).ok_or_else(|| {
        bad(
            path,
            format!(
                "resample {} (corral resizes with bilinear, 2, or bicubic, 3)",
                config.resample
            ),
        )
    })?;
    if config.size.longest_edge == 0 || keys.patch_size == 0 || keys.spatial_merge_size == 0 {
        return Err(bad(
            path,
            "size.longest_edge, patch_size and spatial_merge_size must be positive".into(),
        ));
    }
    Ok(PixtralProcessor {
        sizing: Sizing::LongestEdge(config.size.longest_edge),
        patch: keys.patch_size,
        merge: keys.spatial_merge_size,
        filter,
        do_resize: config.do_resize,
        scaling: Scaling {
            image_mean: config.image_mean,
            image_std: config.image_std,
            rescale_factor: config.rescale_factor,
            do_rescale: config.do_rescale,
            do_normalize: config.do_normalize,
        },
    })
}

/// The processor llama.cpp runs for a Pixtral projector, whose folder has no processor config:
/// its own sizing, to between 8 and 1024 merged patches an image, bicubic, with the projector's
/// mean and std.
pub(super) fn for_projector(
    patch: usize,
    merge: usize,
    image_mean: [f32; 3],
    image_std: [f32; 3],
) -> PixtralProcessor {
    PixtralProcessor {
        sizing: Sizing::Limits(TokenLimits {
            step: patch * merge,
            min_tokens: 8,
            max_tokens: 1024,
        }),
        patch,
        merge,
        filter: Filter::Bicubic,
        do_resize: true,
        scaling: Scaling::normalizing(image_mean, image_std),
    }
}

impl PixtralProcessor {
    /// The processor with an operator's pixel limits: for transformers' sizing, the longest
    /// edge of a square of the most pixels; for llama.cpp's, its token limits from both.
    pub fn with_pixel_limits(mut self, min: Option<u64>, max: Option<u64>) -> Self {
        self.sizing = match self.sizing {
            Sizing::LongestEdge(longest_edge) => {
                Sizing::LongestEdge(max.map_or(longest_edge, |max| {
                    (max as f64).sqrt().floor().max(1.0) as usize
                }))
            }
            Sizing::Limits(limits) => Sizing::Limits(limits.with_pixel_limits(min, max)),
        };
        self
    }

    /// The most pixels an image is resized to.
    pub fn max_pixels(&self) -> u64 {
        match self.sizing {
            Sizing::LongestEdge(longest_edge) => {
                let step = self.patch * self.merge;
                let side = longest_edge.div_ceil(step) * step;
                (side * side) as u64
            }
            Sizing::Limits(limits) => limits.max_pixels(),
        }
    }

    pub fn preprocess(&self, image: &RgbImage) -> Result<Patches, ImageError> {
        let (width, height) = (image.width() as usize, image.height() as usize);
        let (new_height, new_width) = match (self.do_resize, self.sizing) {
            (false, _) => (height, width),
            (true, Sizing::LongestEdge(longest_edge)) => self.resized(height, width, longest_edge),
            (true, Sizing::Limits(limits)) => limits.fit(height, width),
        };
        let resized = resize(
            image.as_raw(),
            (width, height),
            (new_width, new_height),
            self.filter,
        );
        Ok(self.patchify(&resized, new_height, new_width))
    }

    /// transformers' `get_resize_output_image_size`: scaled down by the larger of the sides'
    /// ratios to the longest edge where over it (sides truncated), then each side up to whole
    /// merged patches.
    fn resized(&self, height: usize, width: usize, longest_edge: usize) -> (usize, usize) {
        let longest = longest_edge as f64;
        let ratio = (height as f64 / longest).max(width as f64 / longest);
        let (height, width) = if ratio > 1.0 {
            (
                (height as f64 / ratio).floor() as usize,
                (width as f64 / ratio).floor() as usize,
            )
        } else {
            (height, width)
        };
        let step = self.patch * self.merge;
        let whole = |side: usize| (side.max(1) - 1) / step * step + step;
        (whole(height), whole(width))
    }

    /// Row by row of patches, each its channels, then its rows and columns, scaled and
    /// normalized as numpy does it (the scale in float64, then float32).
    fn patchify(&self, pixels: &[u8], height: usize, width: usize) -> Patches {
        let patch = self.patch;
        let (rows, columns) = (height / patch, width / patch);
        let patch_values = 3 * patch * patch;
        let mut values = Vec::with_capacity(rows * columns * patch_values);
        for row in 0..rows {
            for column in 0..columns {
                for channel in 0..3 {
                    for y in row * patch..(row + 1) * patch {
                        for x in column * patch..(column + 1) * patch {
                            let pixel = pixels[(y * width + x) * 3 + channel];
                            values.push(self.scaling.value(pixel, channel));
                        }
                    }
                }
            }
        }
        Patches::new(values, patch_values, [1, rows, columns])
    }
}

#[cfg(test)]
mod tests;
