//! What every processor does to an 8-bit pixel once the image is resized: scaled (transformers'
//! `rescale`) and normalized by its channel's mean and std, each where the processor's config
//! says, in numpy's order and precisions (the scale in float64, then float32).

#[derive(Debug, Clone, PartialEq)]
pub struct Scaling {
    pub image_mean: [f32; 3],
    pub image_std: [f32; 3],
    pub rescale_factor: f64,
    pub do_rescale: bool,
    pub do_normalize: bool,
}

impl Scaling {
    /// Scaled by 1/255, then normalized by `image_mean` and `image_std`: what llama.cpp does
    /// for a projector, with the mean and std its metadata gives.
    pub fn normalizing(image_mean: [f32; 3], image_std: [f32; 3]) -> Self {
        Self {
            image_mean,
            image_std,
            rescale_factor: 1.0 / 255.0,
            do_rescale: true,
            do_normalize: true,
        }
    }

    /// The value of `pixel` in `channel` (0 red, 1 green, 2 blue).
    pub fn value(&self, pixel: u8, channel: usize) -> f32 {
        let value = if self.do_rescale {
            (f64::from(pixel) * self.rescale_factor) as f32
        } else {
            f32::from(pixel)
        };
        if self.do_normalize {
            (value - self.image_mean[channel]) / self.image_std[channel]
        } else {
            value
        }
    }
}
