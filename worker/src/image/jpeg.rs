//! JPEG through libjpeg-turbo's decoder (mozjpeg's), which Pillow's wheels bundle: its chroma
//! upsampling and inverse DCT give Pillow's pixels to the bit, where Rust decoders differ by a
//! few levels at colour edges.

use image::metadata::Orientation;
use image::{DynamicImage, RgbImage};
use mozjpeg::{ColorSpace, Decompress, Marker};

use super::ImageError;
use super::size::check_size;

pub(super) fn decode(bytes: &[u8]) -> Result<RgbImage, ImageError> {
    // libjpeg reports a corrupt file by unwinding with its message; mozjpeg turns that into an
    // error here.
    std::panic::catch_unwind(|| decode_unguarded(bytes)).unwrap_or_else(|payload| {
        let reason = payload
            .downcast::<String>()
            .map_or_else(|_| "corrupt JPEG data".to_owned(), |message| *message);
        Err(ImageError::Undecodable(reason))
    })
}

fn decode_unguarded(bytes: &[u8]) -> Result<RgbImage, ImageError> {
    if !reaches_its_end(bytes) {
        return Err(ImageError::Undecodable(
            "the JPEG data stops before its end marker (truncated)".into(),
        ));
    }
    let undecodable = |error: std::io::Error| ImageError::Undecodable(error.to_string());
    let decompress = Decompress::with_markers(&[Marker::APP(1)])
        .from_mem(bytes)
        .map_err(undecodable)?;
    let (width, height) = decompress.size();
    let (width, height) = (width as u32, height as u32);
    check_size(width, height)?;
    let orientation = decompress
        .markers()
        .find_map(|marker| exif_orientation(marker.data))
        .unwrap_or(Orientation::NoTransforms);
    let pixels = match decompress.color_space() {
        ColorSpace::JCS_CMYK | ColorSpace::JCS_YCCK => {
            let mut started = decompress
                .to_colorspace(ColorSpace::JCS_CMYK)
                .map_err(undecodable)?;
            let inks: Vec<[u8; 4]> = started.read_scanlines().map_err(undecodable)?;
            started.finish().map_err(undecodable)?;
            inks.into_iter().flat_map(cmyk_to_rgb).collect()
        }
        _ => {
            let mut started = decompress.rgb().map_err(undecodable)?;
            let rows: Vec<[u8; 3]> = started.read_scanlines().map_err(undecodable)?;
            started.finish().map_err(undecodable)?;
            rows.into_iter().flatten().collect()
        }
    };
    let rgb = RgbImage::from_raw(width, height, pixels)
        .ok_or_else(|| ImageError::Undecodable("fewer pixels than the header says".into()))?;
    let mut image = DynamicImage::ImageRgb8(rgb);
    image.apply_orientation(orientation);
    Ok(image.into_rgb8())
}

/// Whether an end-of-image marker follows the first scan's header. libjpeg only warns of a
/// truncated file and fills the missing rows with grey, where Pillow refuses it ("image file is
/// truncated"). Inside the scans a 0xFF byte is always stuffed, so 0xFF 0xD9 is the marker.
fn reaches_its_end(bytes: &[u8]) -> bool {
    // The segments after the start-of-image marker, each its marker and its length.
    let mut at = 2;
    loop {
        let Some(&[0xff, marker, high, low]) = bytes.get(at..at + 4) else {
            return false;
        };
        let length = usize::from(u16::from_be_bytes([high, low]));
        if marker == 0xda {
            return bytes
                .get(at + 2 + length..)
                .is_some_and(|scans| scans.windows(2).any(|pair| pair == [0xff, 0xd9]));
        }
        at += 2 + length;
    }
}

/// A CMYK pixel as Pillow makes it RGB: the inks read inverted (Adobe's convention, which
/// Pillow always assumes), then `cmyk2rgb`'s `255 - k` less each ink scaled by it.
fn cmyk_to_rgb(stored: [u8; 4]) -> [u8; 3] {
    let [c, m, y, k] = stored.map(|ink| 255 - i32::from(ink));
    let paper = 255 - k;
    // libImaging's MULDIV255: a·b/255, rounded.
    let scaled = |ink: i32| {
        let product = ink * paper + 128;
        ((product >> 8) + product) >> 8
    };
    [c, m, y].map(|ink| (paper - scaled(ink)).clamp(0, 255) as u8)
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
    fn a_truncated_jpeg_is_refused() {
        let jpeg = std::fs::read(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("../tests/data/vision/images/tall.jpg"),
        )
        .unwrap();
        assert_eq!(decode(&jpeg).unwrap().dimensions(), (30, 77));
        let error = decode(&jpeg[..jpeg.len() - 40]).unwrap_err();
        assert!(
            matches!(&error, ImageError::Undecodable(reason) if reason.contains("truncated")),
            "{error}"
        );
    }

    #[test]
    fn cmyk_becomes_the_rgb_pillow_makes_of_it() {
        // Stored (Adobe, inverted) inks and the RGB Pillow 12 converts them to.
        for (stored, rgb) in [
            ([0, 0, 0, 0], [0, 0, 0]),
            ([255, 255, 255, 255], [255, 255, 255]),
            ([200, 100, 50, 180], [141, 71, 35]),
            ([10, 240, 128, 30], [1, 28, 15]),
        ] {
            assert_eq!(cmyk_to_rgb(stored), rgb, "{stored:?}");
        }
    }
}
