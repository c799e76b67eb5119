//! The transparent colour of a PNG or GIF that has one (a palette entry, or a `tRNS` grey or RGB
//! value) rather than an alpha channel. Pillow keeps it in `info["transparency"]` through
//! `load_image`'s conversion to RGB, and transformers' `convert_to_rgb` then composites every
//! pixel of that colour onto white: those pixels reach the model white. And where a GIF's first
//! frame leaves part of its screen uncovered, what Pillow fills it with.

/// A PNG's transparent colour, as Pillow's `chunk_tRNS` reads it for 8-bit grey, RGB and
/// palette images: a palette's only when exactly one entry is transparent and the rest opaque
/// (otherwise Pillow drops the transparency on conversion and the pixels keep their colour).
pub(super) fn png(bytes: &[u8]) -> Option<[u8; 3]> {
    let mut rest = bytes.strip_prefix(b"\x89PNG\r\n\x1a\n")?;
    let (mut depth, mut colour_type, mut palette) = (0, 0, &[][..]);
    while rest.len() >= 12 {
        let length = u32::from_be_bytes(rest[..4].try_into().ok()?) as usize;
        let kind = &rest[4..8];
        let data = rest.get(8..8 + length)?;
        match kind {
            b"IHDR" if data.len() >= 10 => (depth, colour_type) = (data[8], data[9]),
            b"PLTE" => palette = data,
            b"tRNS" => return png_key(data, depth, colour_type, palette),
            b"IDAT" => return None,
            _ => {}
        }
        rest = rest.get(12 + length..)?;
    }
    None
}

fn png_key(trns: &[u8], depth: u8, colour_type: u8, palette: &[u8]) -> Option<[u8; 3]> {
    let sample = |index: usize| -> Option<u8> {
        let value = u16::from_be_bytes(trns.get(index * 2..index * 2 + 2)?.try_into().ok()?);
        u8::try_from(value).ok()
    };
    match (colour_type, depth) {
        (0, 8) => sample(0).map(|grey| [grey; 3]),
        (2, 8) => Some([sample(0)?, sample(1)?, sample(2)?]),
        (3, _) => {
            let opaque = |&alpha: &u8| alpha == 0xff;
            let index = trns.iter().position(|&alpha| alpha == 0)?;
            let single = trns[..index].iter().all(opaque) && trns[index + 1..].iter().all(opaque);
            single.then(|| palette_colour(palette, index)).flatten()
        }
        _ => None,
    }
}

/// A GIF's first frame as Pillow places it on the logical screen.
pub(super) struct GifFrame {
    /// Left, top, width and height on the screen.
    pub(super) rect: [u32; 4],
    /// The colour of the screen around the frame: Pillow fills it with the transparent index,
    /// else index 0.
    pub(super) backdrop: [u8; 3],
    /// The transparent colour, if the frame has one: the transparent index of the graphic
    /// control extension before it, in the frame's palette (its own, else the global one).
    pub(super) key: Option<[u8; 3]>,
}

pub(super) fn gif(bytes: &[u8]) -> Option<GifFrame> {
    let screen = bytes.get(6..13)?;
    let mut rest = &bytes[13..];
    let global = if screen[4] & 0x80 != 0 {
        let size = 3 << ((screen[4] & 7) + 1);
        let table = rest.get(..size)?;
        rest = &rest[size..];
        Some(table)
    } else {
        None
    };
    let mut transparent = None;
    loop {
        match *rest.first()? {
            0x21 => {
                let label = *rest.get(1)?;
                rest = &rest[2..];
                if label == 0xf9 && rest.first() == Some(&4) {
                    let block = rest.get(1..5)?;
                    transparent = (block[0] & 1 != 0).then_some(usize::from(block[3]));
                }
                rest = skip_sub_blocks(rest)?;
            }
            0x2c => {
                let descriptor = rest.get(1..10)?;
                let field =
                    |at: usize| u32::from(u16::from_le_bytes([descriptor[at], descriptor[at + 1]]));
                let local = (descriptor[8] & 0x80 != 0)
                    .then(|| rest.get(10..10 + (3 << ((descriptor[8] & 7) + 1))))
                    .flatten();
                // Without any palette Pillow reads the frame as grey levels.
                let colour = |index: usize| match local.or(global) {
                    Some(palette) => palette_colour(palette, index),
                    None => u8::try_from(index).ok().map(|grey| [grey; 3]),
                };
                return Some(GifFrame {
                    rect: [field(0), field(2), field(4), field(6)],
                    backdrop: colour(transparent.unwrap_or(0))?,
                    key: transparent.and_then(colour),
                });
            }
            _ => return None,
        }
    }
}

fn skip_sub_blocks(mut rest: &[u8]) -> Option<&[u8]> {
    loop {
        let size = usize::from(*rest.first()?);
        rest = rest.get(1 + size..)?;
        if size == 0 {
            return Some(rest);
        }
    }
}

fn palette_colour(palette: &[u8], index: usize) -> Option<[u8; 3]> {
    palette.get(index * 3..index * 3 + 3)?.try_into().ok()
}
