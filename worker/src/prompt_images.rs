//! A chat prompt's images before any compute: the per-model limits an operator set in
//! `[models.ID]` (`None` leaves each to the model's processor config) and the refusal of images
//! by a model that cannot see them. The images arrive as the client's bytes, each with the place
//! the client put it, so that a refusal names it in the called API's terms.

use std::path::Path;

use corral_ipc::PromptImage;

use crate::generation::RejectReason;

/// `corral-worker serve --max-images`, `--image-max-pixels` and `--image-min-pixels`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ImageLimits {
    /// Images per request.
    pub max_images: Option<usize>,
    /// Pixels an image is resized within, as the processor's `max_pixels` / `min_pixels`.
    pub max_pixels: Option<u64>,
    pub min_pixels: Option<u64>,
}

/// Refuses a chat's images: more than the configured limit, or any at all, since no model served
/// here has a vision tower yet. Runs before the template renders, so a text-only template never
/// sees an image part. The vision path replaces it for models with a tower.
pub(crate) fn refuse_images(
    model: &Path,
    images: &[PromptImage],
    limits: &ImageLimits,
) -> Result<(), RejectReason> {
    if let Some(max) = limits.max_images
        && let Some(extra) = images.get(max)
    {
        return Err(RejectReason::TooManyImages {
            count: images.len(),
            max,
            location: extra.location.clone(),
        });
    }
    match images.first() {
        None => Ok(()),
        Some(image) => Err(RejectReason::NoVision {
            model: model
                .file_name()
                .unwrap_or(model.as_os_str())
                .to_string_lossy()
                .into_owned(),
            location: image.location.clone(),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn image(location: &str) -> PromptImage {
        PromptImage {
            bytes: vec![0x89, b'P', b'N', b'G'],
            location: location.to_owned(),
        }
    }

    #[test]
    fn a_chat_without_images_passes() {
        let limits = ImageLimits {
            max_images: Some(0),
            ..ImageLimits::default()
        };
        assert!(refuse_images(Path::new("/m/tiny"), &[], &limits).is_ok());
    }

    #[test]
    fn a_text_only_model_names_itself_and_the_first_image() {
        let images = [
            image("messages[0].content[1]"),
            image("messages[2].content[0]"),
        ];
        let error = refuse_images(Path::new("/models/tiny"), &images, &ImageLimits::default())
            .expect_err("no vision tower");
        assert_eq!(
            error.to_string(),
            "model `tiny` takes no images (image at messages[0].content[1])"
        );
    }

    #[test]
    fn the_first_image_past_max_images_is_named() {
        let images = [image("input[0].content[0]"), image("input[1].content[2]")];
        let limits = ImageLimits {
            max_images: Some(1),
            ..ImageLimits::default()
        };
        let error = refuse_images(Path::new("m"), &images, &limits).expect_err("too many");
        assert_eq!(
            error.to_string(),
            "2 images, over this model's max_images of 1 (the first one too many at \
             input[1].content[2])"
        );
    }
}
