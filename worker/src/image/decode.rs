//! Decoding what a client sent into the RGB pixels a processor starts from, as transformers'
//! and mlx-vlm's `load_image` give them: Pillow opens the file (a GIF's first frame), turns it
//! upright by its EXIF orientation and converts it to RGB, which drops any alpha channel (the
//! processor's own white backdrop never sees one) but keeps a transparent colour, which the
//! processor then paints white (`colour_key.rs`).

use std::io::Cursor;

use image::{DynamicImage, ImageDecoder, ImageFormat, ImageReader, Limits, RgbImage};

use super::size::{MAX_IMAGE_SIDE, check_size};
use super::{ImageError, colour_key, jpeg};

/// The image in `bytes`, upright and RGB, as the processor resizes it. Its dimensions are
/// checked from the header before any pixel is allocated.
pub fn decode(bytes: &[u8]) -> Result<RgbImage, ImageError> {
    let reader = ImageReader::new(Cursor::new(bytes))
        .with_guessed_format()
        .map_err(|error| ImageError::Undecodable(error.to_string()))?;
    let (key, gif_frame) = match reader.format() {
        Some(ImageFormat::Jpeg) => return jpeg::decode(bytes),
        Some(ImageFormat::Png) => (colour_key::png(bytes), None),
        Some(ImageFormat::Gif) => {
            let frame = colour_key::gif(bytes);
            (frame.as_ref().and_then(|frame| frame.key), frame)
        }
        Some(ImageFormat::WebP) => (None, None),
        _ => return Err(ImageError::UnknownFormat),
    };
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
    let mut rgb = to_rgb8(image);
    if let Some(frame) = gif_frame {
        fill_around(&mut rgb, &frame);
    }
    if let Some(key) = key {
        for pixel in rgb.pixels_mut().filter(|pixel| pixel.0 == key) {
            pixel.0 = [255; 3];
        }
    }
    Ok(rgb)
}

/// The screen around a GIF's first frame in Pillow's backdrop, where the image crate leaves it
/// transparent black.
fn fill_around(rgb: &mut RgbImage, frame: &colour_key::GifFrame) {
    let [left, top, width, height] = frame.rect;
    let (right, bottom) = (left.saturating_add(width), top.saturating_add(height));
    for (x, y, pixel) in rgb.enumerate_pixels_mut() {
        if x < left || x >= right || y < top || y >= bottom {
            pixel.0 = frame.backdrop;
        }
    }
}

/// RGB as Pillow converts the mode it opened: 16-bit colour keeps each sample's high byte
/// (Pillow reads it as 8-bit), 16-bit grey (`I;16`) is clipped to 255, alpha is dropped.
fn to_rgb8(image: DynamicImage) -> RgbImage {
    let (width, height) = (image.width(), image.height());
    let pixels = match &image {
        DynamicImage::ImageRgb16(rgb) => high_bytes(rgb.as_raw(), 3),
        DynamicImage::ImageRgba16(rgba) => high_bytes(rgba.as_raw(), 4),
        DynamicImage::ImageLumaA16(grey) => high_bytes(grey.as_raw(), 2),
        DynamicImage::ImageLuma16(grey) => grey
            .as_raw()
            .iter()
            .flat_map(|&level| [level.min(255) as u8; 3])
            .collect(),
        _ => return image.into_rgb8(),
    };
    RgbImage::from_raw(width, height, pixels).unwrap_or_else(|| image.into_rgb8())
}

/// Each pixel's colour samples' high bytes, grey repeated; `channels` counts any alpha.
fn high_bytes(samples: &[u16], channels: usize) -> Vec<u8> {
    samples
        .chunks_exact(channels)
        .flat_map(|pixel| {
            std::array::from_fn::<u8, 3, _>(|channel| {
                let source = if channels < 3 { 0 } else { channel };
                (pixel[source] >> 8) as u8
            })
        })
        .collect()
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

    #[test]
    fn formats_off_the_list_are_unsupported() {
        let bmp = b"BM\x3a\0\0\0\0\0\0\0\x36\0\0\0\x28\0\0\0";
        assert!(matches!(decode(bmp), Err(ImageError::UnknownFormat)));
    }

    #[test]
    fn a_transparent_colour_comes_out_white_and_an_alpha_channel_is_dropped() {
        // Pillow 12 and transformers 5.23's `load_image` then `convert_to_rgb`: the tRNS
        // colour of an RGB image, and a palette's one transparent entry, turn white; a palette
        // with partial transparency keeps its colours.
        let rgb = png(
            2,
            &[80, 160, 0, 1, 2, 3],
            &[(b"tRNS", &[0, 80, 0, 160, 0, 0])],
        );
        assert_eq!(decode(&rgb).unwrap().as_raw(), &[255, 255, 255, 1, 2, 3]);
        let palette: &[u8] = &[10, 20, 30, 40, 50, 60];
        let single = png(3, &[0, 1], &[(b"PLTE", palette), (b"tRNS", &[255, 0])]);
        assert_eq!(
            decode(&single).unwrap().as_raw(),
            &[10, 20, 30, 255, 255, 255]
        );
        let partial = png(3, &[0, 1], &[(b"PLTE", palette), (b"tRNS", &[128, 0])]);
        assert_eq!(
            decode(&partial).unwrap().as_raw(),
            &[10, 20, 30, 40, 50, 60]
        );
        let rgba = png(6, &[7, 8, 9, 0, 4, 5, 6, 30], &[]);
        assert_eq!(decode(&rgba).unwrap().as_raw(), &[7, 8, 9, 4, 5, 6]);
    }

    #[test]
    fn sixteen_bit_pngs_keep_their_high_bytes_and_grey_is_clipped() {
        let encode = |image: DynamicImage| {
            let mut bytes = Vec::new();
            image
                .write_to(&mut Cursor::new(&mut bytes), ImageFormat::Png)
                .unwrap();
            bytes
        };
        let colour = image::ImageBuffer::from_raw(1, 1, vec![0x1234u16, 0xabff, 0x00ff]).unwrap();
        let colour = encode(DynamicImage::ImageRgb16(colour));
        // Rounding to 8 bits, as the image crate converts, would give 0xac and 0x01.
        assert_eq!(decode(&colour).unwrap().as_raw(), &[0x12, 0xab, 0x00]);
        let grey = image::ImageBuffer::from_raw(2, 1, vec![200u16, 300]).unwrap();
        let grey = encode(DynamicImage::ImageLuma16(grey));
        assert_eq!(
            decode(&grey).unwrap().as_raw(),
            &[200, 200, 200, 255, 255, 255]
        );
    }

    #[test]
    fn a_gif_frame_short_of_its_screen_is_surrounded_as_pillow_surrounds_it() {
        // Pillow 12 fills the screen around the first frame with the transparent index, else
        // index 0, before transformers paints the transparent colour white.
        let gif = |transparent: bool| {
            let mut gif = b"GIF89a".to_vec();
            gif.extend([3, 0, 1, 0, 0x80, 0, 0]);
            gif.extend([10, 20, 30, 40, 50, 60]);
            if transparent {
                gif.extend([0x21, 0xf9, 4, 1, 0, 0, 1, 0]);
            }
            gif.extend([0x2c, 0, 0, 0, 0, 1, 0, 1, 0, 0]);
            // LZW, 2-bit codes widened to 3: clear, index 0, end.
            gif.extend([2, 2, 0x44, 0x01, 0, 0x3b]);
            decode(&gif).unwrap().into_raw()
        };
        assert_eq!(gif(false), [10, 20, 30, 10, 20, 30, 10, 20, 30]);
        assert_eq!(gif(true), [10, 20, 30, 255, 255, 255, 255, 255, 255]);
    }

    /// A one-row PNG of `colour_type` with 8-bit samples and `chunks` before its data, stored
    /// uncompressed.
    fn png(colour_type: u8, row: &[u8], chunks: &[(&[u8; 4], &[u8])]) -> Vec<u8> {
        let channels = match colour_type {
            2 => 3,
            3 => 1,
            6 => 4,
            _ => unreachable!("a colour type the tests use"),
        };
        let mut header = 0u32.to_be_bytes().to_vec();
        header[3] = (row.len() / channels) as u8;
        header.extend(1u32.to_be_bytes());
        header.extend([8, colour_type, 0, 0, 0]);
        let mut scanline = vec![0];
        scanline.extend(row);
        // zlib: one stored deflate block, then the Adler-32 of the data.
        let mut zlib = vec![0x78, 0x01, 0x01];
        let length = scanline.len() as u16;
        zlib.extend(length.to_le_bytes());
        zlib.extend((!length).to_le_bytes());
        zlib.extend(&scanline);
        let (a, b) = scanline.iter().fold((1u32, 0u32), |(a, b), &byte| {
            let a = (a + u32::from(byte)) % 65_521;
            (a, (b + a) % 65_521)
        });
        zlib.extend(((b << 16) | a).to_be_bytes());
        let mut png = b"\x89PNG\r\n\x1a\n".to_vec();
        let mut chunk = |kind: &[u8; 4], data: &[u8]| {
            png.extend((data.len() as u32).to_be_bytes());
            let mut checked = kind.to_vec();
            checked.extend(data);
            png.extend(&checked);
            png.extend(crc32(&checked).to_be_bytes());
        };
        chunk(b"IHDR", &header);
        for (kind, data) in chunks {
            chunk(kind, data);
        }
        chunk(b"IDAT", &zlib);
        chunk(b"IEND", &[]);
        png
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
