//! Each type's decoding against llama.cpp's dequantization written out as its C reference loops
//! (`dequantize_row_*` in ggml-quants.c), on deterministic blocks; what MLX computes from the
//! repacked or requantized arrays; and the measured costs of requantization and f16 scales.

use half::f16;
use mlx_rs::{Array, Dtype, ops};

use super::*;

/// A deterministic byte stream (splitmix64).
struct Bytes(u64);

impl Bytes {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// An f16 of either sign between 2^-12 and 2^-3 with random mantissa bits, as weights'
    /// scales are.
    fn scale(&mut self, positive: bool) -> [u8; 2] {
        let bits = self.next();
        let exponent = 3 + (bits % 10) as u16; // biased: 2^(e - 15)
        let sign = if positive {
            0
        } else {
            ((bits >> 8) & 1) as u16
        };
        let mantissa = ((bits >> 16) & 0x3ff) as u16;
        ((sign << 15) | (exponent << 10) | mantissa).to_le_bytes()
    }
}

/// Byte offsets of each type's f16 fields, and whether each is a minimum (kept positive as
/// llama.cpp's quantizers write it, though the formulas do not care).
fn f16_fields(ggml_type: GgmlType) -> &'static [(usize, bool)] {
    match ggml_type {
        GgmlType::Q4_0 | GgmlType::Q5_0 | GgmlType::Q8_0 | GgmlType::IQ4_NL | GgmlType::IQ4_XS => {
            &[(0, false)]
        }
        GgmlType::Q4_1 | GgmlType::Q5_1 => &[(0, true), (2, false)],
        GgmlType::Q4_K | GgmlType::Q5_K => &[(0, true), (2, true)],
        GgmlType::Q2_K => &[(80, true), (82, true)],
        GgmlType::Q3_K => &[(108, false)],
        GgmlType::Q6_K => &[(208, false)],
        _ => &[],
    }
}

/// `blocks` random blocks of `ggml_type` with sane scales.
fn random_blocks(ggml_type: GgmlType, blocks: usize, seed: u64) -> Vec<u8> {
    let size = block_bytes(ggml_type);
    let mut random = Bytes(seed);
    let mut bytes: Vec<u8> = (0..size * blocks).map(|_| random.next() as u8).collect();
    for block in bytes.chunks_exact_mut(size) {
        for &(at, positive) in f16_fields(ggml_type) {
            block[at..at + 2].copy_from_slice(&random.scale(positive));
        }
        if ggml_type == GgmlType::MXFP4 {
            block[0] = 110 + (random.next() % 20) as u8;
        }
    }
    bytes
}

fn h(block: &[u8], at: usize) -> f32 {
    f16::from_bits(u16::from_le_bytes([block[at], block[at + 1]])).to_f32()
}

const IQ4: [i8; 16] = [
    -127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113,
];

/// ggml's `get_scale_min_k4`.
fn scale_min_k4(j: usize, q: &[u8]) -> (f32, f32) {
    let (d, m) = if j < 4 {
        (q[j] & 63, q[j + 4] & 63)
    } else {
        (
            (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4),
            (q[j + 4] >> 4) | ((q[j] >> 6) << 4),
        )
    };
    (f32::from(d), f32::from(m))
}

/// llama.cpp's `dequantize_row_*`, loop for loop, for one block.
// Indexed loops, as in the C they transcribe.
#[allow(clippy::needless_range_loop)]
fn reference_block(ggml_type: GgmlType, x: &[u8]) -> Vec<f32> {
    let mut y = Vec::new();
    match ggml_type {
        GgmlType::Q4_0 | GgmlType::Q4_1 | GgmlType::Q5_0 | GgmlType::Q5_1 => {
            let d = h(x, 0);
            let (m, qs) = match ggml_type {
                GgmlType::Q4_1 | GgmlType::Q5_1 => (Some(h(x, 2)), &x[4..]),
                _ => (None, &x[2..]),
            };
            let five = matches!(ggml_type, GgmlType::Q5_0 | GgmlType::Q5_1);
            let (qh, qs) = if five {
                (u32::from_le_bytes([qs[0], qs[1], qs[2], qs[3]]), &qs[4..])
            } else {
                (0, qs)
            };
            let offset = match (m, five) {
                (Some(_), _) => 0,
                (None, false) => 8,
                (None, true) => 16,
            };
            let mut out = [0f32; 32];
            for j in 0..16 {
                let xh_0 = ((qh >> j) << 4) & 0x10;
                let xh_1 = (qh >> (j + 12)) & 0x10;
                let x0 = ((u32::from(qs[j]) & 0x0F) | xh_0) as i32 - offset;
                let x1 = ((u32::from(qs[j]) >> 4) | xh_1) as i32 - offset;
                match m {
                    Some(m) => {
                        out[j] = x0 as f32 * d + m;
                        out[j + 16] = x1 as f32 * d + m;
                    }
                    None => {
                        out[j] = x0 as f32 * d;
                        out[j + 16] = x1 as f32 * d;
                    }
                }
            }
            y.extend(out);
        }
        GgmlType::Q8_0 => {
            let d = h(x, 0);
            y.extend(x[2..34].iter().map(|&q| f32::from(q as i8) * d));
        }
        GgmlType::Q2_K => {
            let (scales, mut q) = (&x[..16], &x[16..80]);
            let (d, min) = (h(x, 80), h(x, 82));
            let mut is = 0;
            for _ in 0..2 {
                for shift in [0, 2, 4, 6] {
                    for half in 0..2 {
                        let sc = scales[is];
                        is += 1;
                        let dl = d * f32::from(sc & 0xF);
                        let ml = min * f32::from(sc >> 4);
                        for l in 0..16 {
                            y.push(dl * f32::from((q[l + 16 * half] >> shift) & 3) - ml);
                        }
                    }
                }
                q = &q[32..];
            }
        }
        GgmlType::Q3_K => {
            let (hm, mut q, raw) = (&x[..32], &x[32..96], &x[96..108]);
            let d_all = h(x, 108);
            let word = |i: usize| {
                u32::from_le_bytes([raw[4 * i], raw[4 * i + 1], raw[4 * i + 2], raw[4 * i + 3]])
            };
            let (kmask1, kmask2) = (0x0303_0303u32, 0x0f0f_0f0fu32);
            let mut aux = [word(0), word(1), word(2), 0];
            let tmp = aux[2];
            aux[2] = ((aux[0] >> 4) & kmask2) | (((tmp >> 4) & kmask1) << 4);
            aux[3] = ((aux[1] >> 4) & kmask2) | (((tmp >> 6) & kmask1) << 4);
            aux[0] = (aux[0] & kmask2) | ((tmp & kmask1) << 4);
            aux[1] = (aux[1] & kmask2) | (((tmp >> 2) & kmask1) << 4);
            let scales: Vec<i8> = aux
                .iter()
                .flat_map(|w| w.to_le_bytes())
                .map(|b| b as i8)
                .collect();
            let mut is = 0;
            let mut m = 1u8;
            for _ in 0..2 {
                for shift in [0, 2, 4, 6] {
                    for half in 0..2 {
                        let dl = d_all * f32::from(scales[is] - 32);
                        is += 1;
                        for l in 0..16 {
                            let l = l + 16 * half;
                            let low = ((q[l] >> shift) & 3) as i8;
                            let offset = if hm[l] & m != 0 { 0 } else { 4 };
                            y.push(dl * f32::from(low - offset));
                        }
                    }
                    m <<= 1;
                }
                q = &q[32..];
            }
        }
        GgmlType::Q4_K | GgmlType::Q5_K => {
            let (d, min) = (h(x, 0), h(x, 2));
            let scales = &x[4..16];
            let five = ggml_type == GgmlType::Q5_K;
            let (qh, mut ql) = if five {
                (&x[16..48], &x[48..])
            } else {
                (&x[..0], &x[16..])
            };
            let (mut u1, mut u2) = (1u8, 2u8);
            for is in (0..8).step_by(2) {
                let (sc, m) = scale_min_k4(is, scales);
                let (d1, m1) = (d * sc, min * m);
                let (sc, m) = scale_min_k4(is + 1, scales);
                let (d2, m2) = (d * sc, min * m);
                let high = |l: usize, u: u8| if five && qh[l] & u != 0 { 16 } else { 0 };
                for l in 0..32 {
                    y.push(d1 * f32::from((ql[l] & 0xF) + high(l, u1)) - m1);
                }
                for l in 0..32 {
                    y.push(d2 * f32::from((ql[l] >> 4) + high(l, u2)) - m2);
                }
                ql = &ql[32..];
                u1 <<= 2;
                u2 <<= 2;
            }
        }
        GgmlType::Q6_K => {
            let d = h(x, 208);
            let (mut ql, mut qh, mut sc) = (&x[..128], &x[128..192], &x[192..208]);
            for _ in 0..2 {
                let mut out = [0f32; 128];
                for l in 0..32 {
                    let is = l / 16;
                    let q1 = i32::from((ql[l] & 0xF) | ((qh[l] & 3) << 4)) - 32;
                    let q2 = i32::from((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
                    let q3 = i32::from((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
                    let q4 = i32::from((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
                    let s = |i: usize| d * f32::from(sc[i] as i8);
                    out[l] = s(is) * q1 as f32;
                    out[l + 32] = s(is + 2) * q2 as f32;
                    out[l + 64] = s(is + 4) * q3 as f32;
                    out[l + 96] = s(is + 6) * q4 as f32;
                }
                y.extend(out);
                ql = &ql[64..];
                qh = &qh[32..];
                sc = &sc[8..];
            }
        }
        GgmlType::IQ4_NL => {
            let d = h(x, 0);
            let mut out = [0f32; 32];
            for j in 0..16 {
                out[j] = d * f32::from(IQ4[usize::from(x[2 + j] & 0xf)]);
                out[j + 16] = d * f32::from(IQ4[usize::from(x[2 + j] >> 4)]);
            }
            y.extend(out);
        }
        GgmlType::IQ4_XS => {
            let d = h(x, 0);
            let scales_h = u16::from_le_bytes([x[2], x[3]]);
            let (scales_l, mut qs) = (&x[4..8], &x[8..]);
            for ib in 0..8 {
                let ls = ((scales_l[ib / 2] >> (4 * (ib % 2))) & 0xf)
                    | ((((scales_h >> (2 * ib)) & 3) as u8) << 4);
                let dl = d * (i32::from(ls) - 32) as f32;
                let mut out = [0f32; 32];
                for j in 0..16 {
                    out[j] = dl * f32::from(IQ4[usize::from(qs[j] & 0xf)]);
                    out[j + 16] = dl * f32::from(IQ4[usize::from(qs[j] >> 4)]);
                }
                y.extend(out);
                qs = &qs[16..];
            }
        }
        GgmlType::MXFP4 => {
            const VALUES: [i8; 16] = [0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12];
            let d = 2f32.powi(i32::from(x[0]) - 128);
            let mut out = [0f32; 32];
            for j in 0..16 {
                out[j] = f32::from(VALUES[usize::from(x[1 + j] & 0xf)]) * d;
                out[j + 16] = f32::from(VALUES[usize::from(x[1 + j] >> 4)]) * d;
            }
            y.extend(out);
        }
        other => panic!("no reference for {other}"),
    }
    y
}

fn reference(ggml_type: GgmlType, bytes: &[u8]) -> Vec<f32> {
    bytes
        .chunks_exact(block_bytes(ggml_type))
        .flat_map(|block| reference_block(ggml_type, block))
        .collect()
}

const EXACT: [GgmlType; 7] = [
    GgmlType::Q4_0,
    GgmlType::Q4_1,
    GgmlType::Q5_0,
    GgmlType::Q5_1,
    GgmlType::Q8_0,
    GgmlType::Q4_K,
    GgmlType::Q5_K,
];
const REQUANTIZED: [GgmlType; 5] = [
    GgmlType::Q2_K,
    GgmlType::Q3_K,
    GgmlType::Q6_K,
    GgmlType::IQ4_NL,
    GgmlType::IQ4_XS,
];

/// A tensor of 4 rows of 512 values.
const SHAPE: [i32; 2] = [4, 512];

fn tensor(ggml_type: GgmlType, seed: u64) -> Vec<u8> {
    let blocks = (SHAPE[0] * SHAPE[1]) as usize / ggml_type.block_values().unwrap() as usize;
    random_blocks(ggml_type, blocks, seed)
}

fn to_vec(array: &Array) -> Vec<f32> {
    let array = array.as_dtype(Dtype::Float32).unwrap();
    array.eval().unwrap();
    array.as_slice::<f32>().to_vec()
}

/// Equal bits, except that a zero may have either sign: `d * (q - 8)` is -0 for a negative `d`,
/// MLX's `d * q + (-8d)` is +0, and no sum or product tells them apart.
fn assert_bits_equal(ggml_type: GgmlType, what: &str, found: &[f32], expected: &[f32]) {
    assert_eq!(found.len(), expected.len(), "{ggml_type} {what}");
    for (i, (a, b)) in found.iter().zip(expected).enumerate() {
        assert!(
            a.to_bits() == b.to_bits() || (*a == 0.0 && *b == 0.0),
            "{ggml_type} {what}: value {i}: {a} != {b}"
        );
    }
}

#[test]
fn every_type_decodes_as_llama_cpp_dequantizes_bit_for_bit() {
    for ggml_type in EXACT.iter().chain(&REQUANTIZED).chain(&[GgmlType::MXFP4]) {
        for seed in 0..4 {
            let bytes = tensor(*ggml_type, seed);
            let found = dequantize(*ggml_type, &bytes).unwrap();
            assert_bits_equal(
                *ggml_type,
                "decoded",
                &found,
                &reference(*ggml_type, &bytes),
            );
        }
    }
}

#[test]
fn mlx_dequantizes_the_repacked_exact_types_to_llama_cpp_values_bit_for_bit() {
    for ggml_type in EXACT {
        let bytes = tensor(ggml_type, 7);
        let Loaded::Affine {
            weight,
            scales,
            biases,
            bits,
        } = load(
            ggml_type,
            &SHAPE,
            &bytes,
            Requantize::default(),
            Dtype::Float32,
        )
        .unwrap()
        else {
            panic!("{ggml_type} is not affine");
        };
        assert_eq!(weight.shape(), [SHAPE[0], SHAPE[1] * bits / 32]);
        let found = ops::dequantize(&weight, &scales, &biases, 32, bits).unwrap();
        assert_eq!(found.shape(), SHAPE);
        assert_bits_equal(
            ggml_type,
            "MLX",
            &to_vec(&found),
            &reference(ggml_type, &bytes),
        );
    }
}

/// `x · wᵀ` with `x` the identity gives back `wᵀ` exactly: MLX's own quantized product reads
/// the repacked mxfp4 codes and exponents as llama.cpp does.
#[test]
fn mlx_multiplies_with_the_repacked_mxfp4_weights_as_llama_cpp_dequantizes_them() {
    use crate::model::QuantMode;
    use crate::model::quantized_ops::{Format, matmul_transposed};
    let bytes = tensor(GgmlType::MXFP4, 3);
    let Loaded::Mxfp4 { weight, scales } = load(
        GgmlType::MXFP4,
        &SHAPE,
        &bytes,
        Requantize::default(),
        Dtype::Float32,
    )
    .unwrap() else {
        panic!("mxfp4 is not mxfp4");
    };
    assert_eq!(scales.dtype(), Dtype::Uint8);
    let identity = Array::eye::<f32>(SHAPE[1], None, None).unwrap();
    let format = Format {
        mode: QuantMode::Mxfp4,
        group_size: 32,
        bits: 4,
    };
    let product = matmul_transposed(&identity, &weight, &scales, None, format).unwrap();
    let found = to_vec(&product.transpose().unwrap().contiguous().unwrap());
    assert_bits_equal(
        GgmlType::MXFP4,
        "MLX",
        &found,
        &reference(GgmlType::MXFP4, &bytes),
    );
}

fn relative_error(found: &[f32], expected: &[f32]) -> f64 {
    let (mut error, mut norm) = (0f64, 0f64);
    for (a, b) in found.iter().zip(expected) {
        error += f64::from(a - b).powi(2);
        norm += f64::from(*b).powi(2);
    }
    (error / norm).sqrt()
}

/// The relative (L2) error of each requantization against llama.cpp's values, printed by this
/// test. Measured on these blocks (uniformly random codes, the hardest case for an affine grid),
/// with f32 scales, and 8-bit as loaded, with its scales and biases stored in f16 (widened to f32
/// in the product):
///
/// | type   | 8-bit   | 6-bit   | 4-bit   | f16     | 8-bit, f16 scales |
/// |--------|---------|---------|---------|---------|-------------------|
/// | Q2_K   | 1.86e-3 | 7.21e-3 | 3.03e-2 | 2.20e-4 | 2.01e-3           |
/// | Q3_K   | 4.50e-3 | 1.31e-2 | 8.12e-2 | 1.85e-4 | 4.58e-3           |
/// | Q6_K   | 4.82e-3 | 2.05e-2 | 8.44e-2 | 2.22e-4 | 4.93e-3           |
/// | IQ4_NL | 4.09e-3 | 1.46e-2 | 6.60e-2 | 1.77e-4 | 4.08e-3           |
/// | IQ4_XS | 3.95e-3 | 1.57e-2 | 6.77e-2 | 1.89e-4 | 4.06e-3           |
///
/// 4-bit loses as much as a whole extra quantization, so it is not offered; 8-bit is the default.
/// f16 scales add at most 1.5e-4 (a thirtieth of the requantization's own error) and save one bit
/// a value.
#[test]
fn requantization_errors_are_measured_and_the_default_stays_below_one_percent() {
    for ggml_type in REQUANTIZED {
        let bytes = tensor(ggml_type, 11);
        let expected = reference(ggml_type, &bytes);
        let mut row = format!("{ggml_type}:");
        for bits in [8, 6, 4] {
            let array = Array::from_slice(&expected, &SHAPE);
            let (w, s, b) = ops::quantize(&array, 32, bits).unwrap();
            let found = to_vec(&ops::dequantize(&w, &s, &b, 32, bits).unwrap());
            row += &format!(" {bits}-bit {:.2e}", relative_error(&found, &expected));
        }
        let Loaded::Plain(plain) =
            load(ggml_type, &SHAPE, &bytes, Requantize::F16, Dtype::Float32).unwrap()
        else {
            panic!("f16 is plain");
        };
        assert_eq!(plain.dtype(), Dtype::Float16);
        row += &format!(" f16 {:.2e}", relative_error(&to_vec(&plain), &expected));
        let stored = scale_dtype(ggml_type, Dtype::Float32, false, false);
        assert_eq!(stored, Dtype::Float16);
        let Loaded::Affine {
            weight,
            scales,
            biases,
            bits,
        } = load(ggml_type, &SHAPE, &bytes, Requantize::default(), stored).unwrap()
        else {
            panic!("{ggml_type} default is affine");
        };
        assert_eq!(scales.dtype(), Dtype::Float16);
        let found =
            ops::dequantize(&weight, widened(&scales), &widened(&biases), 32, bits).unwrap();
        let error = relative_error(&to_vec(&found), &expected);
        row += &format!(" 8-bit with f16 scales {error:.2e}");
        eprintln!("{row}");
        assert!(error < 0.01, "{ggml_type}: {error}");
    }
}

fn widened(array: &Array) -> Array {
    array.as_dtype(Dtype::Float32).unwrap()
}

/// On the CPU (f32 products) the legacy types store their scales and biases in f16 and stay
/// llama.cpp's values bit for bit: `quantized_matmul` widens them to the input's f32, and gives
/// the same bits as with f32 arrays. The embedding keeps the compute type, and so do the
/// K-quants when they are asked to stay exact; by default theirs are f16 too.
#[test]
fn legacy_types_keep_exact_values_with_f16_scales_in_f32_products() {
    use crate::model::QuantMode;
    use crate::model::quantized_ops::{Format, matmul_transposed};
    let x = Array::from_slice(
        &(0..3 * SHAPE[1])
            .map(|i| ((i * 37 % 101) as f32 - 50.0) / 64.0)
            .collect::<Vec<f32>>(),
        &[3, SHAPE[1]],
    );
    for ggml_type in EXACT {
        let dtype = scale_dtype(ggml_type, Dtype::Float32, false, false);
        assert_eq!(dtype, Dtype::Float16, "{ggml_type}");
        assert_eq!(
            scale_dtype(ggml_type, Dtype::Float32, true, false),
            Dtype::Float32
        );
        let exact = scale_dtype(ggml_type, Dtype::Float32, false, true);
        if matches!(ggml_type, GgmlType::Q4_K | GgmlType::Q5_K) {
            assert_eq!(exact, Dtype::Float32, "{ggml_type}");
            continue;
        }
        assert_eq!(exact, Dtype::Float16, "{ggml_type}");
        let bytes = tensor(ggml_type, 13);
        let Loaded::Affine {
            weight,
            scales,
            biases,
            bits,
        } = load(ggml_type, &SHAPE, &bytes, Requantize::default(), dtype).unwrap()
        else {
            panic!("{ggml_type} is not affine");
        };
        assert_eq!(scales.dtype(), Dtype::Float16, "{ggml_type}");
        let (scales32, biases32) = (widened(&scales), widened(&biases));
        let found = ops::dequantize(&weight, &scales32, &biases32, 32, bits).unwrap();
        assert_bits_equal(
            ggml_type,
            "f16 scales",
            &to_vec(&found),
            &reference(ggml_type, &bytes),
        );
        let format = Format {
            mode: QuantMode::Affine,
            group_size: 32,
            bits,
        };
        let half = matmul_transposed(&x, &weight, &scales, Some(&biases), format).unwrap();
        let full = matmul_transposed(&x, &weight, &scales32, Some(&biases32), format).unwrap();
        assert_eq!(half.dtype(), Dtype::Float32, "{ggml_type}");
        assert_bits_equal(ggml_type, "product", &to_vec(&half), &to_vec(&full));
    }
}

/// A Q8_0 scale of 1024 makes a bias of -128 * 1024, past f16's largest value: that tensor
/// keeps f32 scales and its exact values.
#[test]
fn a_legacy_tensor_whose_bias_would_overflow_f16_keeps_f32_scales() {
    let mut bytes = tensor(GgmlType::Q8_0, 17);
    bytes[..2].copy_from_slice(&f16::from_f32(1024.0).to_le_bytes());
    let Loaded::Affine {
        weight,
        scales,
        biases,
        bits,
    } = load(
        GgmlType::Q8_0,
        &SHAPE,
        &bytes,
        Requantize::default(),
        Dtype::Float16,
    )
    .unwrap()
    else {
        panic!("Q8_0 is not affine");
    };
    assert_eq!(scales.dtype(), Dtype::Float32);
    let found = ops::dequantize(&weight, &scales, &biases, 32, bits).unwrap();
    assert_bits_equal(
        GgmlType::Q8_0,
        "f32 fallback",
        &to_vec(&found),
        &reference(GgmlType::Q8_0, &bytes),
    );
}

/// What f16 scales and biases (Metal's default) cost the exact types. MLX then computes in f16,
/// so every value comes out rounded to f16 (relative error 3e-4 to 5e-4 on these blocks, for the
/// legacy types whose scales are f16 in the file as for the K-quants, whose `d * sc` products
/// are rounded besides: Q4_0 4.2e-4, Q4_1 3.0e-4, Q5_0 4.3e-4, Q5_1 2.8e-4, Q8_0 4.2e-4, Q4_K
/// 4.6e-4, Q5_K 3.3e-4).
#[test]
fn f16_scales_cost_every_exact_type_only_f16_rounding() {
    for ggml_type in EXACT {
        let bytes = tensor(ggml_type, 5);
        let expected = reference(ggml_type, &bytes);
        let Loaded::Affine {
            weight,
            scales,
            biases,
            bits,
        } = load(
            ggml_type,
            &SHAPE,
            &bytes,
            Requantize::default(),
            Dtype::Float16,
        )
        .unwrap()
        else {
            panic!("{ggml_type} is not affine");
        };
        let found = to_vec(&ops::dequantize(&weight, &scales, &biases, 32, bits).unwrap());
        let error = relative_error(&found, &expected);
        eprintln!("{ggml_type} with f16 scales: relative error {error:.2e}");
        assert!(error < 1e-3, "{ggml_type}: {error}");
    }
}

/// What storing the K-quants' scales and biases in 16 bits would cost if the products still ran
/// in f32 (MLX widens the scales to the input's type inside `quantized_matmul`): `d * sc` and
/// `dmin * m` need up to 17 significant bits, f16 keeps 11 and bf16 8. Measured relative (L2)
/// errors against llama.cpp's values on these blocks: f16 Q4_K 1.69e-4, Q5_K 2.05e-4; bf16 Q4_K
/// 2.21e-3, Q5_K 1.48e-3 (f16 scales with f16 products, Metal's default: 4.6e-4 and 3.3e-4).
/// At group 32 they cost 5 bits per value instead of 6 (Q4_K), 6 instead of 7 (Q5_K).
#[test]
fn sixteen_bit_k_quant_scales_cost_a_measured_rounding() {
    for (ggml_type, f16_bound, bf16_bound) in
        [(GgmlType::Q4_K, 3e-4, 4e-3), (GgmlType::Q5_K, 3e-4, 4e-3)]
    {
        let bytes = tensor(ggml_type, 7);
        let expected = reference(ggml_type, &bytes);
        let Loaded::Affine {
            weight,
            scales,
            biases,
            bits,
        } = load(
            ggml_type,
            &SHAPE,
            &bytes,
            Requantize::default(),
            Dtype::Float32,
        )
        .unwrap()
        else {
            panic!("{ggml_type} is not affine");
        };
        for (dtype, bound) in [(Dtype::Float16, f16_bound), (Dtype::Bfloat16, bf16_bound)] {
            let rounded = |array: &Array| {
                array
                    .as_dtype(dtype)
                    .and_then(|a| a.as_dtype(Dtype::Float32))
                    .unwrap()
            };
            let found = to_vec(
                &ops::dequantize(&weight, rounded(&scales), &rounded(&biases), 32, bits).unwrap(),
            );
            let error = relative_error(&found, &expected);
            eprintln!(
                "{ggml_type} with {dtype:?} scales, f32 products: relative error {error:.2e}"
            );
            assert!(error < bound, "{ggml_type} {dtype:?}: {error}");
        }
    }
}

#[test]
fn floats_load_as_they_are_and_a_short_tensor_is_refused() {
    let values: Vec<f32> = (0..64).map(|i| i as f32 * 0.25).collect();
    let bytes: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
    let Loaded::Plain(array) = load(
        GgmlType::F32,
        &[2, 32],
        &bytes,
        Requantize::default(),
        Dtype::Float32,
    )
    .unwrap() else {
        panic!("F32 is plain");
    };
    assert_eq!(array.shape(), [2, 32]);
    assert_eq!(to_vec(&array), values);
    let halves: Vec<u8> = values
        .iter()
        .flat_map(|v| f16::from_f32(*v).to_le_bytes())
        .collect();
    let Loaded::Plain(array) = load(
        GgmlType::F16,
        &[64],
        &halves,
        Requantize::default(),
        Dtype::Float32,
    )
    .unwrap() else {
        panic!("F16 is plain");
    };
    assert_eq!(array.dtype(), Dtype::Float16);
    assert_eq!(to_vec(&array), values);
    let short = tensor(GgmlType::Q4_K, 1);
    let error = load(
        GgmlType::Q4_K,
        &SHAPE,
        &short[1..],
        Requantize::default(),
        Dtype::Float32,
    )
    .err()
    .unwrap();
    assert!(error.contains("bytes"), "{error}");
}

/// `tests/data/gguf_blocks.gguf` (scripts/reference/gguf_blocks.py): blocks of every served
/// type with llama.cpp's own dequantization of them (gguf-py's `gguf.quants.dequantize`), read
/// through corral's GGUF reader. The exact types and MXFP4 decode to the same bits, and MLX's
/// dequantization of their repacked arrays too; the requantized types decode to the same bits
/// and stay within the default requantization's bound.
#[test]
fn every_type_agrees_with_llama_cpp_python_dequantization() {
    use std::os::unix::fs::FileExt;

    use crate::gguf::GgufHeader;
    let path =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/data/gguf_blocks.gguf");
    let header = GgufHeader::read(&path).unwrap();
    let file = std::fs::File::open(&path).unwrap();
    let read = |name: &str| {
        let tensor = header.tensors.iter().find(|t| t.name == name).unwrap();
        let mut bytes = vec![0u8; tensor.bytes as usize];
        file.read_exact_at(&mut bytes, tensor.start).unwrap();
        (tensor.clone(), bytes)
    };
    let mut seen = Vec::new();
    for tensor in header.tensors.iter().filter(|t| t.name.starts_with("q.")) {
        let ggml_type = tensor.ggml_type;
        assert_eq!(tensor.name, format!("q.{ggml_type}"));
        let (_, bytes) = read(&tensor.name);
        let (reference, reference_bytes) = read(&format!("ref.{ggml_type}"));
        assert_eq!(reference.ggml_type, GgmlType::F32);
        let expected: Vec<f32> = reference_bytes
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect();
        let shape = tensor.shape();
        assert_bits_equal(
            ggml_type,
            "decoded",
            &dequantize(ggml_type, &bytes).unwrap(),
            &expected,
        );
        // As the CPU loads it asked for exact K-quants: f16 scales for the legacy and
        // requantized types, f32 for the K-quants.
        let stored = scale_dtype(ggml_type, Dtype::Float32, false, true);
        let loaded = load(ggml_type, &shape, &bytes, Requantize::default(), stored).unwrap();
        match (route(ggml_type).unwrap(), loaded) {
            (
                Route::Exact { .. },
                Loaded::Affine {
                    weight,
                    scales,
                    biases,
                    bits,
                },
            ) => {
                let found = ops::dequantize(&weight, widened(&scales), &widened(&biases), 32, bits)
                    .unwrap();
                assert_bits_equal(ggml_type, "MLX", &to_vec(&found), &expected);
                // By default the K-quants' scales are rounded to f16, at the measured cost.
                let rounded = scale_dtype(ggml_type, Dtype::Float32, false, false);
                let Loaded::Affine {
                    weight,
                    scales,
                    biases,
                    bits,
                } = load(ggml_type, &shape, &bytes, Requantize::default(), rounded).unwrap()
                else {
                    panic!("{ggml_type} is not affine");
                };
                let found = ops::dequantize(&weight, widened(&scales), &widened(&biases), 32, bits)
                    .unwrap();
                let error = relative_error(&to_vec(&found), &expected);
                assert!(error < 3e-4, "{ggml_type} with f16 scales: {error}");
            }
            (
                Route::Requantized,
                Loaded::Affine {
                    weight,
                    scales,
                    biases,
                    bits,
                },
            ) => {
                let found = ops::dequantize(&weight, widened(&scales), &widened(&biases), 32, bits)
                    .unwrap();
                let error = relative_error(&to_vec(&found), &expected);
                assert!(error < 0.01, "{ggml_type}: {error}");
            }
            (Route::Mxfp4, Loaded::Mxfp4 { .. }) => {}
            (route, _) => panic!("{ggml_type} took an unexpected form for {route:?}"),
        }
        seen.push(ggml_type);
    }
    assert_eq!(seen.len(), 13, "{seen:?}");
}
