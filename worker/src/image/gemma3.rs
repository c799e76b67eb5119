//! transformers' Gemma 3 image processor (`Gemma3ImageProcessorPil`): each image resized to the
//! processor's fixed size with Pillow's filter (bilinear in the releases) on 8-bit pixels,
//! scaled to [0, 1] and normalized, handed to the tower whole, channel by channel
//! (`pixel_values`); the tower cuts its patches. Pan-and-scan (crops of a wide or tall image
//! beside the whole one) is off in the releases and refused where a config turns it on.

use std::path::Path;

use image::RgbImage;
use serde::Deserialize;

use super::resample::{Filter, resize};
use super::scaling::Scaling;
use super::{ImageError, Patches};

#[derive(Debug, Clone, PartialEq)]
pub struct Gemma3Processor {
    height: usize,
    width: usize,
    filter: Filter,
    do_resize: bool,
    scaling: Scaling,
}

/// The settings as a model's files hold them, with the class's defaults for the keys they
/// leave out.
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
    /// The releases write `null`.
    do_pan_and_scan: Option<bool>,
}

#[derive(Debug, Deserialize)]
struct Size {
    height: usize,
    width: usize,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            size: Size {
                height: 224,
                width: 224,
            },
            // PIL's `BILINEAR`.
            resample: 2,
            image_mean: [0.5; 3],
            image_std: [0.5; 3],
            rescale_factor: 1.0 / 255.0,
            do_resize: true,
            do_rescale: true,
            do_normalize: true,
            do_pan_and_scan: None,
        }
    }
}

/// The processor `value`, read from `path`, configures.
pub(super) fn parse(path: &Path, value: serde_json::Value) -> Result<Gemma3Processor, ImageError> {
    let bad = |message: String| ImageError::ProcessorConfig {
        path: path.to_owned(),
        message,
    };
    let config: Config = serde_path_to_error::deserialize(value)
        .map_err(|error| bad(format!("{}: {}", error.path(), error.inner())))?;
    if config.do_pan_and_scan == Some(true) {
        return Err(bad(
            "do_pan_and_scan is on: corral does not cut images into crops (the Gemma 3 \
             releases leave it off)"
                .into(),
        ));
    }
    let filter = Filter::from_pil(config.resample).ok_or_else(|| {
        bad(format!(
            "resample {} (corral resizes with bilinear, 2, or bicubic, 3)",
            config.resample
        ))
    })?;
    if config.size.height == 0 || config.size.width == 0 {
        return Err(bad("size must be positive".into()));
    }
    Ok(Gemma3Processor {
        height: config.size.height,
        width: config.size.width,
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

/// The processor llama.cpp runs for a Gemma 3 projector, whose folder has no processor config:
/// the release's bilinear to the tower's `size`, square, with the projector's mean and std.
pub(super) fn for_projector(
    size: usize,
    image_mean: [f32; 3],
    image_std: [f32; 3],
) -> Gemma3Processor {
    Gemma3Processor {
        height: size,
        width: size,
        filter: Filter::Bilinear,
        do_resize: true,
        scaling: Scaling::normalizing(image_mean, image_std),
    }
}

impl Gemma3Processor {
    /// The pixels of the processor's fixed size.
    pub fn pixels(&self) -> u64 {
        (self.height * self.width) as u64
    }

    /// `pixel_values` of one image: `[3, height, width]` as one patch (grid `[1, 1, 1]`).
    pub fn preprocess(&self, image: &RgbImage) -> Result<Patches, ImageError> {
        let (width, height) = (image.width() as usize, image.height() as usize);
        let (new_width, new_height) = if self.do_resize {
            (self.width, self.height)
        } else {
            (width, height)
        };
        let resized = resize(
            image.as_raw(),
            (width, height),
            (new_width, new_height),
            self.filter,
        );
        let area = new_width * new_height;
        let mut values = Vec::with_capacity(3 * area);
        for channel in 0..3 {
            values.extend(
                resized[channel..]
                    .iter()
                    .step_by(3)
                    .map(|&pixel| self.scaling.value(pixel, channel)),
            );
        }
        Ok(Patches::new(values, 3 * area, [1, 1, 1]))
    }
}

#[cfg(test)]
mod tests;
