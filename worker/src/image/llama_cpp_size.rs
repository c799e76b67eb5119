//! The size llama.cpp's `mtmd` resizes an image to for the projectors it sizes dynamically
//! (`calc_size_preserved_ratio` in `mtmd-image.cpp`, in its single precision): the processor a
//! GGUF's projector is served with, its folder having no processor config.

/// The tokens an image may become, each a square of `step` pixels a side, as llama.cpp limits
/// a projector type (`set_limit_image_tokens`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TokenLimits {
    pub step: usize,
    pub min_tokens: usize,
    pub max_tokens: usize,
}

impl TokenLimits {
    /// The limits with an operator's pixel limits in place of llama.cpp's, in whole tokens:
    /// the fewest pixels rounded up, the most rounded down, at least one token.
    pub fn with_pixel_limits(self, min: Option<u64>, max: Option<u64>) -> Self {
        let area = (self.step * self.step).max(1) as u64;
        let tokens = |pixels: u64| usize::try_from(pixels).unwrap_or(usize::MAX);
        let max_tokens = max.map_or(self.max_tokens, |max| tokens(max / area).max(1));
        let min_tokens = min.map_or(self.min_tokens, |min| tokens(min.div_ceil(area)));
        Self {
            min_tokens: min_tokens.min(max_tokens),
            max_tokens,
            ..self
        }
    }

    /// The most pixels an image is resized to.
    pub fn max_pixels(&self) -> u64 {
        (self.max_tokens * self.step * self.step) as u64
    }

    /// `(height, width)` for an image of `height × width`: each side rounded (half away from
    /// zero) to whole squares, at least one; over the most tokens, both sides scaled down by
    /// one factor and floored, under the fewest, scaled up and ceiled.
    pub fn fit(&self, height: usize, width: usize) -> (usize, usize) {
        let step = self.step;
        let area = step * step;
        let (min_pixels, max_pixels) = (self.min_tokens * area, self.max_tokens * area);
        let by_step = |x: f32, whole: fn(f32) -> f32| whole(x / step as f32) as usize * step;
        let new_height = by_step(height as f32, f32::round).max(step);
        let new_width = by_step(width as f32, f32::round).max(step);
        let pixels = (height * width) as f32;
        if new_height * new_width > max_pixels {
            let beta = (pixels / max_pixels as f32).sqrt();
            let down = |side: usize| by_step(side as f32 / beta, f32::floor).max(step);
            (down(height), down(width))
        } else if new_height * new_width < min_pixels {
            let beta = (min_pixels as f32 / pixels).sqrt();
            let up = |side: usize| by_step(side as f32 * beta, f32::ceil);
            (up(height), up(width))
        } else {
            (new_height, new_width)
        }
    }
}
