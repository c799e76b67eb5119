//! How large an image the worker decodes, checked from its header before any pixel is
//! allocated.

use super::ImageError;

/// The longest side decoded: larger than any screen, small enough that no header can make the
/// worker allocate without bound.
pub const MAX_IMAGE_SIDE: u32 = 16_384;
/// The most pixels decoded (64 megapixels, 192 MiB as RGB).
pub const MAX_IMAGE_PIXELS: u64 = 64 * 1024 * 1024;

/// Refuses an image whose header announces more than the worker decodes.
pub(super) fn check_size(width: u32, height: u32) -> Result<(), ImageError> {
    if width > MAX_IMAGE_SIDE
        || height > MAX_IMAGE_SIDE
        || u64::from(width) * u64::from(height) > MAX_IMAGE_PIXELS
    {
        return Err(ImageError::TooLarge { width, height });
    }
    Ok(())
}
