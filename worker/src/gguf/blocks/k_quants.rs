//! llama.cpp's K-quants: super-blocks of 256 values with an f16 scale (and minimum) over
//! sub-blocks, each with its own small integer scale.
//!
//! `Q4_K` and `Q5_K` have 8 sub-blocks of 32 values, value = `d * sc * q - dmin * m` with 6-bit
//! `sc` and `m`: one MLX group each, scale `d * sc` and bias `-dmin * m`. An f16 has 11
//! significant bits, so each product has at most 17 and is exact in f32 (not in f16).
//! `Q2_K`, `Q3_K` and `Q6_K` scale sub-blocks of 16 values, which MLX's groups (32 and up) cannot
//! express: they are dequantized here and requantized.

use super::groups::{GROUP, Groups, f16_at};
use crate::gguf::ggml_type::GgmlType;

pub const SUPER_BLOCK: usize = 256;

/// Appends the 8 groups of one `Q4_K` or `Q5_K` super-block.
pub fn push_block(ggml_type: GgmlType, block: &[u8], groups: &mut Groups) {
    let (d, dmin) = (f16_at(block, 0), f16_at(block, 2));
    let scales = &block[4..16];
    // Q5_K puts 32 bytes of fifth bits before the nibbles.
    let (high, low) = match ggml_type {
        GgmlType::Q5_K => (Some(&block[16..48]), &block[48..]),
        _ => (None, &block[16..]),
    };
    for sub in 0..SUPER_BLOCK / GROUP {
        let (sc, m) = scale_min(scales, sub);
        // Sub-blocks 2c and 2c+1 share 32 bytes: low nibbles, then high nibbles.
        let bytes = &low[(sub / 2) * GROUP..][..GROUP];
        let shift = 4 * (sub % 2);
        let mut q = [0u8; GROUP];
        for (l, q) in q.iter_mut().enumerate() {
            *q = (bytes[l] >> shift) & 0x0f;
            if let Some(high) = high {
                *q |= ((high[l] >> sub) & 1) << 4;
            }
        }
        groups.push(&q, d * f32::from(sc), -(dmin * f32::from(m)));
    }
}

/// Sub-block `j`'s 6-bit scale and minimum, packed in 12 bytes: the first four of each whole in
/// bytes 0..8, the last four split between the nibbles of bytes 8..12 and the top bits of 0..8.
fn scale_min(scales: &[u8], j: usize) -> (u8, u8) {
    if j < 4 {
        (scales[j] & 63, scales[j + 4] & 63)
    } else {
        (
            (scales[j + 4] & 0x0f) | ((scales[j - 4] >> 6) << 4),
            (scales[j + 4] >> 4) | ((scales[j] >> 6) << 4),
        )
    }
}

/// Dequantizes one super-block of `Q2_K`, `Q3_K` or `Q6_K` into `out` (256 values), computing
/// as llama.cpp does: the sub-block's scale in f32, then times the integer.
pub fn dequantize_block(ggml_type: GgmlType, block: &[u8], out: &mut [f32]) {
    match ggml_type {
        GgmlType::Q2_K => q2_k(block, out),
        GgmlType::Q3_K => q3_k(block, out),
        GgmlType::Q6_K => q6_k(block, out),
        other => unreachable!("{other} is not a requantized K-quant"),
    }
}

/// `scales[16] | qs[64] | d | dmin`: 2-bit values, 4-bit scale and minimum per 16.
fn q2_k(block: &[u8], out: &mut [f32]) {
    let (scales, qs) = (&block[..16], &block[16..80]);
    let (d, dmin) = (f16_at(block, 80), f16_at(block, 82));
    for (i, out) in out.iter_mut().enumerate() {
        // Each 32 bytes hold 128 values: four 2-bit planes of 32.
        let (half, plane, l) = (i / 128, (i % 128) / 32, i % 32);
        let q = (qs[half * 32 + l] >> (2 * plane)) & 3;
        let sc = scales[i / 16];
        let scale = d * f32::from(sc & 0x0f);
        let min = dmin * f32::from(sc >> 4);
        *out = scale * f32::from(q) - min;
    }
}

/// `hmask[32] | qs[64] | scales[12] | d`: 2 low bits plus a high bit (set means no offset),
/// signed 6-bit scales per 16.
fn q3_k(block: &[u8], out: &mut [f32]) {
    let (hmask, qs, scales) = (&block[..32], &block[32..96], &block[96..108]);
    let d = f16_at(block, 108);
    for (i, out) in out.iter_mut().enumerate() {
        let (half, plane, l) = (i / 128, (i % 128) / 32, i % 32);
        let low = (qs[half * 32 + l] >> (2 * plane)) & 3;
        let high = (hmask[l] >> (i / 32)) & 1;
        let q = low as i8 - if high == 1 { 0 } else { 4 };
        let j = i / 16;
        let low_scale = if j < 8 {
            scales[j] & 0x0f
        } else {
            scales[j - 8] >> 4
        };
        let high_scale = (scales[8 + j % 4] >> (2 * (j / 4))) & 3;
        let sc = i32::from(low_scale | (high_scale << 4)) - 32;
        let scale = d * sc as f32;
        *out = scale * f32::from(q);
    }
}

/// `ql[128] | qh[64] | scales[16] | d`: 6-bit values offset by 32, signed 8-bit scales per 16.
fn q6_k(block: &[u8], out: &mut [f32]) {
    let (ql, qh, scales) = (&block[..128], &block[128..192], &block[192..208]);
    let d = f16_at(block, 208);
    for (i, out) in out.iter_mut().enumerate() {
        let (half, within) = (i / 128, i % 128);
        let low = (ql[half * 64 + within % 64] >> (4 * (within / 64))) & 0x0f;
        let high = (qh[half * 32 + within % 32] >> (2 * (within / 32))) & 3;
        let q = i32::from(low | (high << 4)) - 32;
        let scale = d * f32::from(scales[i / 16] as i8);
        *out = scale * q as f32;
    }
}
