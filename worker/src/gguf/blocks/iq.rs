//! The 4-bit "importance" types: codes into a fixed non-uniform table of 16 values, scaled per
//! 32. A table is no affine grid, so MLX cannot hold them as they are: they are dequantized here
//! and requantized.
//!
//! `IQ4_NL`: blocks of 32, an f16 scale and 16 bytes of codes. `IQ4_XS`: super-blocks of 256,
//! an f16 scale, 6-bit signed sub-scales per 32 (low 4 bits in `scales_l`, high 2 in
//! `scales_h`), then the codes.

use super::groups::{GROUP, f16_at, nibbles};
use crate::gguf::ggml_type::GgmlType;

const TABLE: [i8; 16] = [
    -127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113,
];

/// Dequantizes one block of `IQ4_NL` (32 values) or `IQ4_XS` (256) into `out`.
pub fn dequantize_block(ggml_type: GgmlType, block: &[u8], out: &mut [f32]) {
    let d = f16_at(block, 0);
    match ggml_type {
        GgmlType::IQ4_NL => codes(&block[2..], d, out),
        GgmlType::IQ4_XS => {
            let high = u16::from_le_bytes([block[2], block[3]]);
            let (low, qs) = (&block[4..8], &block[8..]);
            for (sub, out) in out.chunks_exact_mut(GROUP).enumerate() {
                let low_bits = (low[sub / 2] >> (4 * (sub % 2))) & 0x0f;
                let high_bits = ((high >> (2 * sub)) & 3) as u8;
                let sc = i32::from(low_bits | (high_bits << 4)) - 32;
                codes(&qs[sub * GROUP / 2..], d * sc as f32, out);
            }
        }
        other => unreachable!("{other} is not an IQ4 type"),
    }
}

fn codes(bytes: &[u8], scale: f32, out: &mut [f32]) {
    for (out, code) in out.iter_mut().zip(nibbles(bytes)) {
        *out = scale * f32::from(TABLE[usize::from(code)]);
    }
}
