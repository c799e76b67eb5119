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

use std::cell::{Cell, RefCell};
use std::path::Path;
use std::time::{Duration, Instant};

use corral_ipc::PromptImage;
use mlx_rs::Array;
use mlx_rs::error::Exception;
use mlx_rs::ops::indexing::IndexOp;

use crate::encoded_images::{grid_of, patch_array};
use crate::image::{self, ImageError, Patches};
use crate::loaded::LoadedModel;
use crate::model::{EmbeddedRows, Encoding, ImagePiece, ImagesSeenBothWays, KvCache, VisionTower};

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
    #[error("the prompt's image tokens do not match its images (is one written as text?)")]
    StrayImageTokens,
    #[error("the model's image token {token} is not one of its tokenizer's added tokens")]
    NotAnAddedToken { token: u32 },
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

/// A chat's rendered text with each image's placeholder widened as the model's processor
/// widens it, before tokenization (a widening's text may merge with its neighbours' tokens, as
/// Gemma 3's newlines do), and the images' patches in order.
pub(crate) struct WidenedText {
    pub(crate) text: String,
    patches: Vec<Patches>,
}

/// A prompt's images and the positions they give its tokens.
pub(crate) struct ImagePrompt {
    images: Vec<PlacedImage>,
    /// Each prompt position's time, row and column, `[3, prompt length]` row-major, for a text
    /// model that turns by multi-section positions (Qwen's M-RoPE); `None` for one that turns
    /// as for text.
    positions: Option<Vec<i32>>,
    /// The rotary position after the prompt, less its length: where generated tokens turn.
    shift: i32,
    /// The prompt as the prefix cache keys it.
    key: Vec<u32>,
    /// Which layers let an image's tokens see each other both ways in the prompt (Gemma 3's
    /// and 4's), which keeps each image's tokens in one prompt chunk.
    both_ways: ImagesSeenBothWays,
    /// The image (by index) part-way through the tower, kept with the sequence so that a
    /// cancelled request's leaves with it.
    in_tower: RefCell<Option<(usize, Encoding)>>,
    /// The images this prompt had the tower encode (not those whose rows were kept), and the
    /// time the tower took on them.
    tower_work: Cell<(usize, Duration)>,
}

/// One image where its rows sit in the prompt: runs of consecutive positions (a Pixtral image's
/// rows are broken at each of its rows' ends), each `(first position, first row, rows)`.
struct PlacedImage {
    runs: Vec<(usize, usize, usize)>,
    patches: Patches,
}

impl ImagePrompt {
    /// Preprocesses each image, within the operator's pixel limits where set, and widens each
    /// image placeholder the template wrote in `text` to the image's pieces, in order.
    pub(crate) fn widen(
        loaded: &LoadedModel,
        text: &str,
        images: &[PromptImage],
        limits: &ImageLimits,
    ) -> Result<WidenedText, ImagePromptError> {
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
        let token_text = |token: u32| {
            loaded
                .tokenizer
                .get_added_tokens_decoder()
                .get(&token)
                .map(|added| added.content.clone())
                .ok_or(ImagePromptError::NotAnAddedToken { token })
        };
        let placeholder = token_text(tower.placeholder())?;
        let pieces: Vec<&str> = text.split(placeholder.as_str()).collect();
        let written = pieces.len() - 1;
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
        let mut widened = String::with_capacity(text.len());
        for (piece, image) in pieces.iter().zip(&patches) {
            widened.push_str(piece);
            for part in tower.expansion(grid_of(image)) {
                match part {
                    ImagePiece::Token(token) => widened.push_str(&token_text(token)?),
                    ImagePiece::Text(text) => widened.push_str(text),
                }
            }
        }
        widened.push_str(pieces.last().copied().unwrap_or_default());
        Ok(WidenedText {
            text: widened,
            patches,
        })
    }

    /// Finds each image's rows in the widened text's `tokens`, in order.
    pub(crate) fn lay_out(
        tower: &VisionTower,
        tokens: &[u32],
        widened: WidenedText,
    ) -> Result<Self, ImagePromptError> {
        let mut key = Vec::with_capacity(tokens.len());
        let mut images: Vec<PlacedImage> = Vec::with_capacity(widened.patches.len());
        let mut rows_of = widened.patches.into_iter().map(|patches| {
            let rows = tower.rows(grid_of(&patches));
            (patches, rows)
        });
        // The image whose rows come next, and how many of them are still to come.
        let mut current: Option<(PlacedImage, usize)> = None;
        for (index, &token) in tokens.iter().enumerate() {
            if token != tower.row_token() {
                key.push(token);
                continue;
            }
            if current.as_ref().is_none_or(|(_, left)| *left == 0) {
                images.extend(current.take().map(|(image, _)| image));
                current = rows_of.next().map(|(patches, rows)| {
                    let image = PlacedImage {
                        runs: Vec::new(),
                        patches,
                    };
                    (image, rows)
                });
            }
            let Some((image, left)) = current.as_mut() else {
                return Err(ImagePromptError::StrayImageTokens);
            };
            let row = image.runs.iter().map(|run| run.2).sum::<usize>();
            match image.runs.last_mut() {
                Some(run) if run.0 + run.2 == index => run.2 += 1,
                _ => image.runs.push((index, row, 1)),
            }
            key.push(image_key(&image.patches.digest, row));
            *left -= 1;
        }
        match current {
            Some((image, 0)) => images.push(image),
            Some(_) => return Err(ImagePromptError::StrayImageTokens),
            None => {}
        }
        if rows_of.next().is_some() {
            return Err(ImagePromptError::StrayImageTokens);
        }
        let mut prompt = Self {
            images,
            positions: None,
            shift: 0,
            key,
            both_ways: tower.sees_images_both_ways(),
            in_tower: RefCell::new(None),
            tower_work: Cell::new((0, Duration::ZERO)),
        };
        prompt.rotary_positions(tower, tokens.len());
        Ok(prompt)
    }

    /// Each position's multi-section rotary position, for a tower whose text model turns by
    /// them: text counts on by one, an image's rows sit at the tower's (time, row, column)
    /// from where it starts, and the text after it goes on from its `advance`.
    fn rotary_positions(&mut self, tower: &VisionTower, length: usize) {
        let mut axes: [Vec<i32>; 3] = std::array::from_fn(|_| Vec::with_capacity(length));
        let mut next = 0;
        let mut position = 0;
        for image in &self.images {
            let Some(layout) = tower.rotary_positions(grid_of(&image.patches)) else {
                return;
            };
            let start = image.runs.first().map_or(position, |run| run.0);
            for _ in position..start {
                axes.iter_mut().for_each(|axis| axis.push(next));
                next += 1;
            }
            for [time, row, column] in &layout.positions {
                axes[0].push(next + time);
                axes[1].push(next + row);
                axes[2].push(next + column);
            }
            position = start + layout.positions.len();
            next += layout.advance;
        }
        for _ in position..length {
            axes.iter_mut().for_each(|axis| axis.push(next));
            next += 1;
        }
        // transformers' `rope_deltas`: one past the largest position, less the length.
        let last = axes.iter().flatten().copied().max().unwrap_or(-1);
        self.shift = last + 1 - length as i32;
        self.positions = Some(axes.concat());
    }

    /// The images this prompt had the tower encode, and the time the tower took on them.
    pub(crate) fn tower_work(&self) -> (usize, Duration) {
        self.tower_work.get()
    }

    /// Each image's grid of patches, in order.
    pub(crate) fn grids(&self) -> impl Iterator<Item = [i32; 3]> + '_ {
        self.images.iter().map(|image| grid_of(&image.patches))
    }

    /// The prompt as the prefix cache keys it: each image's tokens stand for its pixels.
    pub(crate) fn key(&self) -> &[u32] {
        &self.key
    }

    /// Where a chunk of prompt positions from `start` must end instead of `end`, for a model
    /// whose image tokens see each other both ways: not inside an image, which a later chunk
    /// could not show to its earlier tokens. Before the image where the chunk has tokens before
    /// it, else after it, whatever the chunk's budget.
    pub(crate) fn whole_images(&self, start: usize, end: usize) -> usize {
        if self.both_ways == ImagesSeenBothWays::Nowhere {
            return end;
        }
        for (first, last) in self.spans() {
            if first < end && end < last {
                return if first > start { first } else { last };
            }
        }
        end
    }

    /// Each image's positions, `[first, last)`.
    fn spans(&self) -> impl Iterator<Item = (usize, usize)> + '_ {
        self.images.iter().filter_map(|image| {
            let (first, last) = (image.runs.first()?, image.runs.last()?);
            Some((first.0, last.0 + last.2))
        })
    }

    /// Sets how prompt positions `start..end` rotate, and which of them see each other both
    /// ways, in every one of a sequence's caches.
    pub(crate) fn prepare_chunk(&self, caches: &mut [KvCache], start: usize, end: usize) {
        if self.both_ways != ImagesSeenBothWays::Nowhere {
            let runs: Vec<(i32, i32)> = self
                .spans()
                .filter_map(|(first, last)| {
                    let (from, to) = (first.max(start), last.min(end));
                    (from < to).then_some((from as i32, to as i32))
                })
                .collect();
            for cache in caches.iter_mut() {
                if self.both_ways.in_layer_of(cache) {
                    cache.set_both_ways(runs.clone());
                }
            }
        }
        let Some(positions) = &self.positions else {
            return;
        };
        let length = positions.len() / 3;
        let chunk: Vec<i32> = (0..3)
            .flat_map(|axis| &positions[axis * length + start..axis * length + end])
            .copied()
            .collect();
        let chunk = Array::from_slice(&chunk, &[3, (end - start) as i32]);
        for cache in caches {
            cache.set_rotary(self.shift, Some(chunk.clone()));
        }
    }

    /// Sets generated tokens to rotate after the prompt's last position, and to see only
    /// their past.
    pub(crate) fn prepare_generated(&self, caches: &mut [KvCache]) {
        if self.both_ways != ImagesSeenBothWays::Nowhere {
            for cache in caches.iter_mut() {
                cache.set_both_ways(Vec::new());
            }
        }
        if self.positions.is_none() {
            return;
        }
        for cache in caches {
            cache.set_rotary(self.shift, None);
        }
    }

    /// Where a chunk of prompt positions `start..end` must stop: before the rows of the first
    /// image it reaches that is not encoded yet. That image goes through as many of the tower's
    /// blocks as the pass's `budget` of prompt tokens pays for (a block costs the prompt tokens
    /// of as many multiply-adds, and at least one block runs), which the budget then lacks.
    pub(crate) fn encode_reached(
        &self,
        loaded: &LoadedModel,
        start: usize,
        end: usize,
        budget: &mut usize,
    ) -> Result<usize, Exception> {
        let Some(tower) = &loaded.model.vision else {
            return Ok(end);
        };
        for (index, image) in self.images.iter().enumerate() {
            let (Some(first), Some(last)) = (image.runs.first(), image.runs.last()) else {
                continue;
            };
            if first.0 >= end {
                break;
            }
            if last.0 + last.2 <= start || loaded.encoded_images.holds(&image.patches) {
                continue;
            }
            let started = Instant::now();
            let mut in_tower = self.in_tower.borrow_mut();
            let encoding = match in_tower.take() {
                Some((encoding_index, encoding)) if encoding_index == index => encoding,
                _ => tower.begin(&patch_array(&image.patches), grid_of(&image.patches))?,
            };
            let mut encoding = encoding;
            let blocks = match loaded.prompt_token_multiply_adds {
                Some(per_token) if per_token > 0.0 => {
                    let block = tower.block_multiply_adds(encoding.grid) / per_token;
                    let tokens = (block.ceil() as usize).max(1);
                    let blocks = (*budget / tokens).clamp(1, tower.blocks_left(&encoding).max(1));
                    *budget = budget.saturating_sub(blocks * tokens);
                    blocks
                }
                _ => tower.depth(),
            };
            let finished = tower.advance(&mut encoding, blocks)?;
            if let Some(rows) = &finished {
                rows.eval()?;
            }
            let (images, time) = self.tower_work.get();
            let images = images + usize::from(finished.is_some());
            self.tower_work.set((images, time + started.elapsed()));
            match finished {
                Some(rows) => loaded.encoded_images.keep(&image.patches, rows),
                None => {
                    *in_tower = Some((index, encoding));
                    return Ok(first.0.max(start));
                }
            }
            if *budget == 0 {
                return Ok(first.0.max(start));
            }
        }
        Ok(end)
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
            for &(first, row, rows) in &image.runs {
                let (from, to) = (start.max(first), end.min(first + rows));
                if from >= to {
                    continue;
                }
                let Some(tower) = &loaded.model.vision else {
                    return Err(Exception::from("the model has no vision tower"));
                };
                let encoded = loaded.encoded_images.rows(tower, &image.patches)?;
                let (from_row, to_row) = (row + from - first, row + to - first);
                embedded.push(EmbeddedRows {
                    start: from - start,
                    rows: encoded.index((from_row as i32..to_row as i32, ..)),
                });
            }
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
