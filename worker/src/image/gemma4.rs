//! transformers' Gemma 4 image processor (`Gemma4ImageProcessorPil`): each image resized, its
//! aspect kept, to the most pixels whose patches fit the soft-token budget
//! (`max_soft_tokens` times a pooling square of patches), each side a whole number of pooling
//! squares, with Pillow's bicubic on 8-bit pixels; scaled to [0, 1] and not normalized (the
//! tower centres the values itself); cut into patches row by row, each patch's pixels row by
//! row with their channels last.

use std::path::Path;

use image::RgbImage;
use serde::Deserialize;

use super::llama_cpp_size::TokenLimits;
use super::resample::{Filter, resize};
use super::scaling::Scaling;
use super::{ImageError, Patches};

/// The budgets transformers accepts (`_SUPPORTED_SOFT_TOKENS`).
const SOFT_TOKEN_BUDGETS: [usize; 5] = [70, 140, 280, 560, 1120];

#[derive(Debug, Clone, PartialEq)]
pub struct Gemma4Processor {
    patch: usize,
    pooling: usize,
    sizing: Sizing,
    filter: Filter,
    do_resize: bool,
    scaling: Scaling,
}

/// How an image's size is chosen.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Sizing {
    /// transformers': the most pixels whose patches fit `max_soft_tokens` pooling squares.
    Budget { max_soft_tokens: usize },
    /// llama.cpp's for a projector: within its limits of pooling squares.
    Limits(TokenLimits),
}

/// The settings as a model's files hold them, with the class's defaults for the keys they
/// leave out.
#[derive(Debug, Deserialize)]
#[serde(default)]
struct Config {
    patch_size: usize,
    pooling_kernel_size: usize,
    max_soft_tokens: usize,
    resample: u8,
    image_mean: [f32; 3],
    image_std: [f32; 3],
    rescale_factor: f64,
    do_resize: bool,
    do_rescale: bool,
    do_normalize: bool,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            patch_size: 16,
            pooling_kernel_size: 3,
            max_soft_tokens: 280,
            // PIL's `BICUBIC`.
            resample: 3,
            image_mean: [0.0; 3],
            image_std: [1.0; 3],
            rescale_factor: 1.0 / 255.0,
            do_resize: true,
            do_rescale: true,
            do_normalize: false,
        }
    }
}

/// The processor `value`, read from `path`, configures.
pub(super) fn parse(path: &Path, value: serde_json::Value) -> Result<Gemma4Processor, ImageError> {
    let bad = |message: String| ImageError::ProcessorConfig {
        path: path.to_owned(),
        message,
    };
    let config: Config = serde_path_to_error::deserialize(value)
        .map_err(|error| bad(format!("{}: {}", error.path(), error.inner())))?;
    if !SOFT_TOKEN_BUDGETS.contains(&config.max_soft_tokens) {
        return Err(bad(format!(
            "max_soft_tokens {} is not one of {SOFT_TOKEN_BUDGETS:?}",
            config.max_soft_tokens
        )));
    }
    if config.patch_size == 0 || config.pooling_kernel_size == 0 {
        return Err(bad(
            "patch_size and pooling_kernel_size must be positive".into()
        ));
    }
    let filter = Filter::from_pil(config.resample).ok_or_else(|| {
        bad(format!(
            "resample {} (corral resizes with bilinear, 2, or bicubic, 3)",
            config.resample
        ))
    })?;
    Ok(Gemma4Processor {
        patch: config.patch_size,
        pooling: config.pooling_kernel_size,
        sizing: Sizing::Budget {
            max_soft_tokens: config.max_soft_tokens,
        },
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

/// The processor llama.cpp runs for a Gemma 4 projector, whose folder has no processor config:
/// its own sizing, to between 70 and 1120 tokens an image, bicubic, with the projector's mean
/// and std (which leave the values as they are in the releases).
pub(super) fn for_projector(
    patch: usize,
    pooling: usize,
    image_mean: [f32; 3],
    image_std: [f32; 3],
) -> Gemma4Processor {
    Gemma4Processor {
        patch,
        pooling,
        sizing: Sizing::Limits(TokenLimits {
            step: pooling * patch,
            min_tokens: 70,
            max_tokens: 1120,
        }),
        filter: Filter::Bicubic,
        do_resize: true,
        scaling: Scaling::normalizing(image_mean, image_std),
    }
}

impl Gemma4Processor {
    /// The processor with an operator's pixel limits: for transformers' sizing, the largest
    /// budget transformers takes within the most pixels (the smallest, 70 tokens, at least);
    /// for llama.cpp's, its token limits from both.
    pub fn with_pixel_limits(mut self, min: Option<u64>, max: Option<u64>) -> Self {
        let square = (self.pooling * self.patch) as u64;
        self.sizing = match self.sizing {
            Sizing::Budget { max_soft_tokens } => Sizing::Budget {
                max_soft_tokens: max.map_or(max_soft_tokens, |max| {
                    SOFT_TOKEN_BUDGETS
                        .into_iter()
                        .filter(|&tokens| tokens as u64 * square * square <= max)
                        .max()
                        .unwrap_or(SOFT_TOKEN_BUDGETS[0])
                }),
            },
            Sizing::Limits(limits) => Sizing::Limits(limits.with_pixel_limits(min, max)),
        };
        self
    }

    /// The most pixels an image is resized to.
    pub fn max_pixels(&self) -> u64 {
        let square = self.pooling * self.patch;
        match self.sizing {
            Sizing::Budget { max_soft_tokens } => (max_soft_tokens * square * square) as u64,
            Sizing::Limits(limits) => limits.max_pixels(),
        }
    }

    pub fn preprocess(&self, image: &RgbImage) -> Result<Patches, ImageError> {
        let (width, height) = (image.width() as usize, image.height() as usize);
        let (new_height, new_width) = match (self.do_resize, self.sizing) {
            (false, _) => (height, width),
            (true, Sizing::Budget { max_soft_tokens }) => {
                self.resized(height, width, max_soft_tokens)?
            }
            (true, Sizing::Limits(limits)) => limits.fit(height, width),
        };
        let resized = if (new_height, new_width) == (height, width) {
            image.as_raw().clone()
        } else {
            resize(
                image.as_raw(),
                (width, height),
                (new_width, new_height),
                self.filter,
            )
        };
        Ok(self.patchify(&resized, new_height, new_width))
    }

    /// transformers' `get_aspect_ratio_preserving_size`: both sides scaled by the one factor
    /// that brings the image to the budget's pixels, then down to whole pooling squares of
    /// patches; a side that comes to none gets one square and the other side its ratio's.
    fn resized(
        &self,
        height: usize,
        width: usize,
        max_soft_tokens: usize,
    ) -> Result<(usize, usize), ImageError> {
        let step = self.pooling * self.patch;
        let target_pixels = (max_soft_tokens * step * step) as f64;
        let factor = (target_pixels / (height * width) as f64).sqrt();
        let down = |ideal: f64| (ideal / step as f64).floor() as usize * step;
        let (mut new_height, mut new_width) =
            (down(factor * height as f64), down(factor * width as f64));
        let longest = max_soft_tokens * step;
        // The longer side comes to at least a square: the budget holds 70 squares.
        match (new_height, new_width) {
            (0, _) => {
                new_height = step;
                new_width = (width / height * step).min(longest);
            }
            (_, 0) => {
                new_width = step;
                new_height = (height / width * step).min(longest);
            }
            _ => {}
        }
        if (new_height * new_width) as f64 > target_pixels {
            let ratio = height.max(width) as f64 / height.min(width).max(1) as f64;
            return Err(ImageError::AspectRatio { ratio });
        }
        Ok((new_height, new_width))
    }

    /// Row by row of patches, each its pixels row by row with their channels, scaled and
    /// normalized as numpy does it (the scale in float64, then float32).
    fn patchify(&self, pixels: &[u8], height: usize, width: usize) -> Patches {
        let patch = self.patch;
        let (rows, columns) = (height / patch, width / patch);
        let patch_values = 3 * patch * patch;
        let mut values = Vec::with_capacity(rows * columns * patch_values);
        for row in 0..rows {
            for column in 0..columns {
                for y in row * patch..(row + 1) * patch {
                    for x in column * patch..(column + 1) * patch {
                        for channel in 0..3 {
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
