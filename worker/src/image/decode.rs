//! Decoding what a client sent into the RGB pixels a processor starts from, as transformers'
//! and mlx-vlm's `load_image` give them: Pillow opens the file (a GIF's first frame), turns it
//! upright by its EXIF orientation and converts it to RGB, which drops any alpha channel (the
//! processor's own white backdrop never sees one).

use std::io::Cursor;

use image::metadata::Orientation;
use image::{DynamicImage, ImageDecoder, ImageFormat, ImageReader, Limits, RgbImage};

use super::ImageError;

/// The longest side decoded: larger than any screen, small enough that no header can make the
/// worker allocate without bound.
pub const MAX_IMAGE_SIDE: u32 = 16_384;
/// The most pixels decoded (64 megapixels, 192 MiB as RGB).
pub const MAX_IMAGE_PIXELS: u64 = 64 * 1024 * 1024;

/// The image in `bytes`, upright and RGB. Its dimensions are checked from the header before any
/// pixel is allocated.
pub fn decode(bytes: &[u8]) -> Result<RgbImage, ImageError> {
    let reader = ImageReader::new(Cursor::new(bytes))
        .with_guessed_format()
        .map_err(|error| ImageError::Undecodable(error.to_string()))?;
    match reader.format() {
        None => return Err(ImageError::UnknownFormat),
        Some(ImageFormat::Jpeg) => return decode_jpeg(bytes),
        Some(_) => {}
    }
    let mut decoder = reader
        .into_decoder()
        .map_err(|error| ImageError::Undecodable(error.to_string()))?;
    let (width, height) = decoder.dimensions();
    check_size(width, height)?;
    let mut limits = Limits::default();
    limits.max_image_width = Some(MAX_IMAGE_SIDE);
    limits.max_image_height = Some(MAX_IMAGE_SIDE);
    decoder
        .set_limits(limits)
        .map_err(|error| ImageError::Undecodable(error.to_string()))?;
    let orientation = decoder
        .orientation()
        .map_err(|error| ImageError::Undecodable(error.to_string()))?;
    let mut image = DynamicImage::from_decoder(decoder)
        .map_err(|error| ImageError::Undecodable(error.to_string()))?;
    image.apply_orientation(orientation);
    Ok(image.into_rgb8())
}

fn check_size(width: u32, height: u32) -> Result<(), ImageError> {
    if width > MAX_IMAGE_SIDE
        || height > MAX_IMAGE_SIDE
        || u64::from(width) * u64::from(height) > MAX_IMAGE_PIXELS
    {
        return Err(ImageError::TooLarge { width, height });
    }
    Ok(())
}

/// A JPEG through libjpeg-turbo's decoder (mozjpeg's), which Pillow's wheels bundle: its
/// chroma upsampling and inverse DCT give Pillow's pixels to the bit, where Rust decoders
/// differ by a few levels at colour edges.
fn decode_jpeg(bytes: &[u8]) -> Result<RgbImage, ImageError> {
    let undecodable = |error: std::io::Error| ImageError::Undecodable(error.to_string());
    // libjpeg reports a corrupt file by unwinding; mozjpeg turns that into an error here.
    std::panic::catch_unwind(|| {
        let decompress = mozjpeg::Decompress::with_markers(&[mozjpeg::Marker::APP(1)])
            .from_mem(bytes)
            .map_err(undecodable)?;
        let (width, height) = decompress.size();
        let (width, height) = (width as u32, height as u32);
        check_size(width, height)?;
        let orientation = decompress
            .markers()
            .find_map(|marker| exif_orientation(marker.data))
            .unwrap_or(Orientation::NoTransforms);
        let mut started = decompress.rgb().map_err(undecodable)?;
        let rows: Vec<[u8; 3]> = started.read_scanlines().map_err(undecodable)?;
        started.finish().map_err(undecodable)?;
        let pixels = rows.into_iter().flatten().collect();
        let rgb = RgbImage::from_raw(width, height, pixels)
            .ok_or_else(|| ImageError::Undecodable("fewer pixels than the header says".into()))?;
        let mut image = DynamicImage::ImageRgb8(rgb);
        image.apply_orientation(orientation);
        Ok(image.into_rgb8())
    })
    .unwrap_or_else(|_| Err(ImageError::Undecodable("corrupt JPEG data".into())))
}

/// The orientation an APP1 segment's EXIF data gives, if it is EXIF.
fn exif_orientation(segment: &[u8]) -> Option<Orientation> {
    let exif = segment.strip_prefix(b"Exif\0\0")?;
    Orientation::from_exif_chunk(exif)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn garbage_and_truncated_files_are_refused() {
        assert!(matches!(
            decode(b"not an image"),
            Err(ImageError::UnknownFormat)
        ));
        let png = std::fs::read(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("../tests/data/vision/images/wide.png"),
        )
        .unwrap();
        assert!(matches!(
            decode(&png[..png.len() / 2]),
            Err(ImageError::Undecodable(_))
        ));
    }

    #[test]
    fn a_header_announcing_a_huge_image_is_refused_before_allocating() {
        // A PNG signature and an IHDR chunk announcing 100000x100000 RGB pixels, and no data.
        let mut png = b"\x89PNG\r\n\x1a\n".to_vec();
        let mut header = b"IHDR".to_vec();
        header.extend(100_000u32.to_be_bytes());
        header.extend(100_000u32.to_be_bytes());
        header.extend([8, 2, 0, 0, 0]);
        png.extend(13u32.to_be_bytes());
        png.extend(&header);
        png.extend(crc32(&header).to_be_bytes());
        // The decoder reads the header up to the first data chunk, which may be empty.
        png.extend(0u32.to_be_bytes());
        png.extend(b"IDAT");
        png.extend(crc32(b"IDAT").to_be_bytes());
        assert!(matches!(
            decode(&png),
            Err(ImageError::TooLarge {
                width: 100_000,
                height: 100_000
            })
        ));
    }

    /// PNG's chunk checksum (CRC-32, polynomial 0xEDB88320).
    fn crc32(bytes: &[u8]) -> u32 {
        let mut crc = !0u32;
        for &byte in bytes {
            crc ^= u32::from(byte);
            for _ in 0..8 {
                crc = if crc & 1 == 1 {
                    (crc >> 1) ^ 0xEDB8_8320
                } else {
                    crc >> 1
                };
            }
        }
        !crc
    }
}
