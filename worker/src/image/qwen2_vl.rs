//! transformers' Qwen2-VL image processor (`Qwen2VLImageProcessorPil`), which Qwen2-VL through
//! Qwen3.5 and Qwen3.6 name: each image resized to multiples of the merged patch within the
//! processor's pixel limits (`smart_resize`), with Pillow's filter (bicubic) on 8-bit pixels,
//! scaled to [0, 1], normalized, and cut into patches of two identical frames, laid out block by
//! block of merged patches as the vision tower reads them.

use image::RgbImage;

use super::resample::{Filter, resize};
use super::scaling::Scaling;
use super::{ImageError, Patches};

/// The processor's settings (`config.rs` reads them), the pixel bounds resolved.
#[derive(Debug, Clone, PartialEq)]
pub struct Qwen2VlProcessor {
    min_pixels: u64,
    max_pixels: u64,
    patch_size: usize,
    temporal_patch_size: usize,
    merge_size: usize,
    filter: Filter,
    do_resize: bool,
    scaling: Scaling,
}

impl Qwen2VlProcessor {
    /// The processor with an operator's pixel limits (`[models.ID]`) in place of its own.
    pub fn with_pixel_limits(mut self, min: Option<u64>, max: Option<u64>) -> Self {
        self.min_pixels = min.unwrap_or(self.min_pixels);
        self.max_pixels = max.unwrap_or(self.max_pixels);
        self
    }

    /// The most pixels an image is resized to.
    pub fn max_pixels(&self) -> u64 {
        self.max_pixels
    }

    pub fn preprocess(&self, image: &RgbImage) -> Result<Patches, ImageError> {
        let (width, height) = image.dimensions();
        let factor = self.patch_size * self.merge_size;
        let (new_height, new_width) = if self.do_resize {
            smart_resize(
                height as usize,
                width as usize,
                factor,
                self.min_pixels,
                self.max_pixels,
            )?
        } else {
            (height as usize, width as usize)
        };
        let resized = resize(
            image.as_raw(),
            (width as usize, height as usize),
            (new_width, new_height),
            self.filter,
        );
        let planes = self.normalized_planes(&resized, new_width * new_height);
        Ok(self.patchify(&planes, new_height, new_width))
    }

    /// Each channel's plane (`[3][height · width]`), scaled and normalized as numpy does it:
    /// the scale in float64, then float32.
    fn normalized_planes(&self, pixels: &[u8], area: usize) -> [Vec<f32>; 3] {
        std::array::from_fn(|channel| {
            (0..area)
                .map(|index| self.scaling.value(pixels[index * 3 + channel], channel))
                .collect()
        })
    }

    /// The processor's `patchify`: patches in blocks of `merge × merge`, each patch its channels,
    /// then its frames (the same image twice), then its rows and columns.
    fn patchify(&self, planes: &[Vec<f32>; 3], height: usize, width: usize) -> Patches {
        let (patch, merge, frames) = (self.patch_size, self.merge_size, self.temporal_patch_size);
        let (rows, columns) = (height / patch, width / patch);
        let patch_values = 3 * frames * patch * patch;
        let mut values = Vec::with_capacity(rows * columns * patch_values);
        for block_row in 0..rows / merge {
            for block_column in 0..columns / merge {
                for row_in in 0..merge {
                    for column_in in 0..merge {
                        let top = (block_row * merge + row_in) * patch;
                        let left = (block_column * merge + column_in) * patch;
                        for plane in planes {
                            for _ in 0..frames {
                                for y in top..top + patch {
                                    values.extend_from_slice(
                                        &plane[y * width + left..y * width + left + patch],
                                    );
                                }
                            }
                        }
                    }
                }
            }
        }
        Patches::new(values, patch_values, [1, rows, columns])
    }
}

/// transformers' `smart_resize`: both sides multiples of `factor`, the area within
/// `min_pixels..=max_pixels`, the aspect ratio kept as nearly as may be. Python's `round`
/// rounds halves to even.
fn smart_resize(
    height: usize,
    width: usize,
    factor: usize,
    min_pixels: u64,
    max_pixels: u64,
) -> Result<(usize, usize), ImageError> {
    let (h, w, f) = (height as f64, width as f64, factor as f64);
    let ratio = h.max(w) / h.min(w);
    if ratio > 200.0 {
        return Err(ImageError::AspectRatio { ratio });
    }
    let mut rows = (h / f).round_ties_even() * f;
    let mut columns = (w / f).round_ties_even() * f;
    if rows * columns > max_pixels as f64 {
        let beta = (h * w / max_pixels as f64).sqrt();
        rows = f.max((h / beta / f).floor() * f);
        columns = f.max((w / beta / f).floor() * f);
    } else if rows * columns < min_pixels as f64 {
        let beta = (min_pixels as f64 / (h * w)).sqrt();
        rows = (h * beta / f).ceil() * f;
        columns = (w * beta / f).ceil() * f;
    }
    Ok((rows as usize, columns as usize))
}

pub(super) mod config;
#[cfg(test)]
mod tests;
