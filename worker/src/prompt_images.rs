//! A chat prompt's images, between the template and the batch. Before the template renders:
//! the per-model limits an operator set in `[models.ID]` (`None` leaves each to the model's
//! processor config) and the refusal of images by a model that cannot see them. After it: each
//! image decoded and preprocessed as the model's processor does it, the one token the template
//! writes for it widened to the image's tokens, every prompt position's multi-section rotary
//! position, and the prompt as the prefix cache keys it, each image's tokens standing for its
//! pixels. The images arrive as the client's bytes, each with the place the client put it, so
//! that a refusal names it in the called API's terms.
//!
//! An image's rows come from the vision tower when a prefill chunk first reaches its tokens, and
//! are kept by the image's digest (`encoded_images.rs`), so an image sent again (an agent re-sends
//! the whole conversation every turn) is not encoded again.

use std::path::Path;

use corral_ipc::PromptImage;
use mlx_rs::Array;
use mlx_rs::error::Exception;
use mlx_rs::ops::indexing::IndexOp;

use crate::encoded_images::grid_of;
use crate::image::{self, ImageError, Patches};
use crate::loaded::LoadedModel;
use crate::model::{EmbeddedRows, KvCache, VisionTower};

/// `corral-worker serve --max-images`, `--image-max-pixels` and `--image-min-pixels`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ImageLimits {
    /// Images per request.
    pub max_images: Option<usize>,
    /// Pixels an image is resized within, as the processor's `max_pixels` / `min_pixels`.
    pub max_pixels: Option<u64>,
    pub min_pixels: Option<u64>,
}

/// Why a chat's images cannot be given to the model, each naming where the client put one.
#[derive(Debug, thiserror::Error)]
pub enum ImagePromptError {
    #[error("model `{model}` takes no images (image at {location})")]
    NoVision { model: String, location: String },
    #[error(
        "{count} images, over this model's max_images of {max} (the first one too many at \
         {location})"
    )]
    TooManyImages {
        count: usize,
        max: usize,
        location: String,
    },
    #[error("image at {location}: {error}")]
    Image { location: String, error: ImageError },
    #[error(
        "the model's chat template wrote {written} image placeholders for the {sent} images \
         sent"
    )]
    ImagePlaceholders { written: usize, sent: usize },
}

/// Refuses a chat's images before the template renders them: more than the configured limit,
/// or any at all for a model without a vision tower, so that a text-only template never sees an
/// image part.
pub(crate) fn refuse_images(
    loaded: &LoadedModel,
    images: &[PromptImage],
    limits: &ImageLimits,
) -> Result<(), ImagePromptError> {
    if let Some(max) = limits.max_images
        && let Some(extra) = images.get(max)
    {
        return Err(ImagePromptError::TooManyImages {
            count: images.len(),
            max,
            location: extra.location.clone(),
        });
    }
    match images.first() {
        Some(image) if loaded.model.vision.is_none() || loaded.image_processor.is_none() => {
            Err(ImagePromptError::NoVision {
                model: model_name(&loaded.dir),
                location: image.location.clone(),
            })
        }
        _ => Ok(()),
    }
}

fn model_name(model: &Path) -> String {
    model
        .file_name()
        .unwrap_or(model.as_os_str())
        .to_string_lossy()
        .into_owned()
}

/// A prompt's images and the positions they give its tokens.
pub(crate) struct ImagePrompt {
    images: Vec<PlacedImage>,
    /// Each prompt position's time, row and column: `[3, prompt length]`, row-major.
    positions: Vec<i32>,
    /// The rotary position after the prompt, less its length: where generated tokens turn.
    shift: i32,
    /// The prompt as the prefix cache keys it.
    key: Vec<u32>,
}

/// One image where its tokens sit in the prompt.
struct PlacedImage {
    start: usize,
    tokens: usize,
    patches: Patches,
}

impl ImagePrompt {
    /// Widens each image token the template wrote in `tokens` to its image's tokens, in order,
    /// each image preprocessed within the operator's pixel limits where set.
    pub(crate) fn place(
        loaded: &LoadedModel,
        tokens: Vec<u32>,
        images: &[PromptImage],
        limits: &ImageLimits,
    ) -> Result<(Vec<u32>, Self), ImagePromptError> {
        let (Some(tower), Some(processor)) = (&loaded.model.vision, &loaded.image_processor) else {
            return Err(ImagePromptError::NoVision {
                model: model_name(&loaded.dir),
                location: images
                    .first()
                    .map(|image| image.location.clone())
                    .unwrap_or_default(),
            });
        };
        let processor = processor
            .clone()
            .with_pixel_limits(limits.min_pixels, limits.max_pixels);
        let written = tokens
            .iter()
            .filter(|&&token| token == tower.image_token())
            .count();
        if written != images.len() {
            return Err(ImagePromptError::ImagePlaceholders {
                written,
                sent: images.len(),
            });
        }
        let patches = images
            .iter()
            .map(|sent| {
                image::decode(&sent.bytes)
                    .and_then(|decoded| processor.preprocess(&decoded))
                    .map_err(|error| ImagePromptError::Image {
                        location: sent.location.clone(),
                        error,
                    })
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Self::lay_out(tower, tokens, patches))
    }

    fn lay_out(tower: &VisionTower, tokens: Vec<u32>, patches: Vec<Patches>) -> (Vec<u32>, Self) {
        let mut widened = Vec::with_capacity(tokens.len());
        let mut key = Vec::with_capacity(tokens.len());
        let (mut times, mut rows, mut columns) = (Vec::new(), Vec::new(), Vec::new());
        let mut images = Vec::with_capacity(patches.len());
        let mut patches = patches.into_iter();
        let mut next = 0;
        for token in tokens {
            let placed = (token == tower.image_token())
                .then(|| patches.next())
                .flatten();
            let Some(patches) = placed else {
                widened.push(token);
                key.push(token);
                times.push(next);
                rows.push(next);
                columns.push(next);
                next += 1;
                continue;
            };
            let layout = tower.image_tokens(grid_of(&patches));
            let start = widened.len();
            for (index, [time, row, column]) in layout.positions.iter().enumerate() {
                widened.push(token);
                key.push(image_key(&patches.digest, index));
                times.push(next + time);
                rows.push(next + row);
                columns.push(next + column);
            }
            next += layout.advance;
            images.push(PlacedImage {
                start,
                tokens: layout.positions.len(),
                patches,
            });
        }
        // transformers' `rope_deltas`: one past the largest position, less the length.
        let last = times
            .iter()
            .chain(&rows)
            .chain(&columns)
            .copied()
            .max()
            .unwrap_or(-1);
        let shift = last + 1 - widened.len() as i32;
        let positions = [times, rows, columns].concat();
        let prompt = Self {
            images,
            positions,
            shift,
            key,
        };
        (widened, prompt)
    }

    /// The prompt as the prefix cache keys it: each image's tokens stand for its pixels.
    pub(crate) fn key(&self) -> &[u32] {
        &self.key
    }

    /// Sets how prompt positions `start..end` rotate, in every one of a sequence's caches.
    pub(crate) fn rotate_chunk(&self, caches: &mut [KvCache], start: usize, end: usize) {
        let length = self.positions.len() / 3;
        let chunk: Vec<i32> = (0..3)
            .flat_map(|axis| &self.positions[axis * length + start..axis * length + end])
            .copied()
            .collect();
        let chunk = Array::from_slice(&chunk, &[3, (end - start) as i32]);
        for cache in caches {
            cache.set_rotary(self.shift, Some(chunk.clone()));
        }
    }

    /// Sets generated tokens to rotate after the prompt's last position.
    pub(crate) fn rotate_generated(&self, caches: &mut [KvCache]) {
        for cache in caches {
            cache.set_rotary(self.shift, None);
        }
    }

    /// The tower's rows for the image tokens among prompt positions `start..end`, each by its
    /// index in the chunk; images are encoded on first use.
    pub(crate) fn rows_in(
        &self,
        loaded: &LoadedModel,
        start: usize,
        end: usize,
    ) -> Result<Vec<EmbeddedRows>, Exception> {
        let mut embedded = Vec::new();
        for image in &self.images {
            let (from, to) = (start.max(image.start), end.min(image.start + image.tokens));
            if from >= to {
                continue;
            }
            let Some(tower) = &loaded.model.vision else {
                return Err(Exception::from("the model has no vision tower"));
            };
            let rows = loaded.encoded_images.rows(tower, &image.patches)?;
            let rows = rows.index(((from - image.start) as i32..(to - image.start) as i32, ..));
            embedded.push(EmbeddedRows {
                start: from - start,
                rows,
            });
        }
        Ok(embedded)
    }
}

/// A stand-in token for position `index` of an image whose pixels have `digest`: above every
/// vocabulary's ids, so no text matches it, and the same for the same pixels.
fn image_key(digest: &[u8; 32], index: usize) -> u32 {
    let word = u32::from_le_bytes([digest[0], digest[1], digest[2], digest[3]]);
    (word ^ (index as u32).wrapping_mul(0x9E37_79B9)) | 0x8000_0000
}

#[cfg(test)]
mod tests;
