//! JPEG through libjpeg-turbo's decoder (mozjpeg's), which Pillow's wheels bundle: its chroma
//! upsampling and inverse DCT give Pillow's pixels to the bit, where Rust decoders differ by a
//! few levels at colour edges.

use image::metadata::Orientation;
use image::{DynamicImage, RgbImage};
use mozjpeg::{ColorSpace, Decompress, Marker};

use super::ImageError;
use super::decode::check_size;

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
