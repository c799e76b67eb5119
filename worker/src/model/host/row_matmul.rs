//! `x · Wᵀ` for a few rows of f32 activations on an x86 CPU, computed on the host.
//!
//! A decode step multiplies every weight by one row per running sequence. BLAS sgemm packs the
//! whole weight into cache-sized blocks before it multiplies, so at a few rows it reads each weight
//! from memory, writes the packed copy and only then computes: on the `small` f32 fixture's MLP
//! weight (2,816 x 1,024) MLX took 1.5 ms at one row and 2.6 ms at eight, where streaming each
//! weight row once and multiplying it into every activation row as it passes took 0.70 and
//! 1.12 ms. Larger inputs (prefill chunks) keep sgemm, which is compute-bound there and faster.
//! Metal and CUDA, and CPUs without AVX2 and FMA, keep MLX's matmul.

use std::arch::x86_64::{
    __m256, _mm_add_ps, _mm_cvtss_f32, _mm_hadd_ps, _mm256_castps256_ps128, _mm256_extractf128_ps,
    _mm256_fmadd_ps, _mm256_loadu_ps, _mm256_setzero_ps,
};
use std::sync::OnceLock;

use mlx_rs::error::Exception;
use mlx_rs::{Array, Dtype};
use rayon::prelude::*;

/// Rows up to which streaming the weight beats sgemm. Measured on the 2,816 x 1,024 weight:
/// 1.83 against 2.09 ms at 16 rows, 2.6 against 2.4 ms at 24.
const MAX_ROWS: usize = 16;

/// Activation rows that share one pass over a pair of weight rows: four rows and two columns
/// keep eight accumulators, two weight and four activation vectors in the sixteen AVX registers.
const ROW_BLOCK: usize = 4;

/// Weight rows per parallel task. Small enough that a core slowed by another process hands the
/// rest of the weight to the other core instead of holding up the product.
const COLUMNS_PER_TASK: usize = 64;

/// `x · weightᵀ (+ bias)` when the host kernel applies: f32 `x` of at most [`MAX_ROWS`] rows, a
/// row-major f32 `[out, in]` weight, on the CPU of an x86 machine with AVX2 and FMA. `None`
/// leaves the product to MLX.
pub(crate) fn matmul_transposed(
    x: &Array,
    weight: &Array,
    bias: Option<&Array>,
) -> Result<Option<Array>, Exception> {
    let shape = x.shape();
    let (Some(&inputs), [outputs, weight_inputs]) = (shape.last(), weight.shape()) else {
        return Ok(None);
    };
    if !available()
        || x.dtype() != Dtype::Float32
        || weight.dtype() != Dtype::Float32
        || inputs != *weight_inputs
        || inputs == 0
    {
        return Ok(None);
    }
    let rows = x.size() / inputs as usize;
    if rows == 0 || rows > MAX_ROWS {
        return Ok(None);
    }
    x.eval()?;
    weight.eval()?;
    let (Ok(activations), Ok(weight_data)) = (x.try_as_slice::<f32>(), weight.try_as_slice())
    else {
        return Ok(None);
    };
    let bias_data = match bias {
        Some(bias) => {
            bias.eval()?;
            match bias.try_as_slice::<f32>() {
                Ok(data) if data.len() == *outputs as usize => Some(data),
                _ => return Ok(None),
            }
        }
        None => None,
    };
    let product = multiply(activations, rows, weight_data, *outputs as usize, bias_data);
    let mut out_shape = shape.to_vec();
    if let Some(last) = out_shape.last_mut() {
        *last = *outputs;
    }
    Ok(Some(Array::from_slice(&product, &out_shape)))
}

/// Whether this CPU has AVX2 and FMA, which the kernel is compiled for.
fn available() -> bool {
    static AVAILABLE: OnceLock<bool> = OnceLock::new();
    *AVAILABLE.get_or_init(|| {
        std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma")
    })
}

/// `activations [rows, inputs] · weightᵀ + bias` with `weight [outputs, inputs]`, row-major.
fn multiply(
    activations: &[f32],
    rows: usize,
    weight: &[f32],
    outputs: usize,
    bias: Option<&[f32]>,
) -> Vec<f32> {
    let inputs = activations.len() / rows;
    // Tasks write whole weight rows' outputs, so they fill the product transposed.
    let mut transposed = vec![0f32; outputs * rows];
    transposed
        .par_chunks_mut(COLUMNS_PER_TASK * rows)
        .enumerate()
        .for_each(|(task, out)| {
            let first = task * COLUMNS_PER_TASK;
            let columns = out.len() / rows;
            let weight_rows = &weight[first * inputs..(first + columns) * inputs];
            // SAFETY: `available()` found AVX2 and FMA on this CPU before any call here.
            unsafe { columns_times_rows(activations, rows, inputs, weight_rows, out) };
        });
    let mut product = vec![0f32; rows * outputs];
    for (column, values) in transposed.chunks_exact(rows).enumerate() {
        let offset = bias.map_or(0.0, |bias| bias[column]);
        for (row, value) in values.iter().enumerate() {
            product[row * outputs + column] = value + offset;
        }
    }
    product
}

/// For each weight row `c` of `weight_rows` and activation row `r`, `out[c * rows + r]` = their
/// dot product. Weight rows go two at a time, each pair read once for all activation rows.
#[target_feature(enable = "avx2,fma")]
fn columns_times_rows(
    activations: &[f32],
    rows: usize,
    inputs: usize,
    weight_rows: &[f32],
    out: &mut [f32],
) {
    for (pair, out) in weight_rows.chunks(2 * inputs).zip(out.chunks_mut(2 * rows)) {
        let (first, second) = pair.split_at(inputs);
        // An odd last weight row pairs with itself; its second results are dropped.
        let second = if second.is_empty() { first } else { second };
        let mut row = 0;
        while row < rows {
            let block = &activations[row * inputs..];
            match rows - row {
                1 => store(dot_block::<1>(block, inputs, first, second), row, rows, out),
                2 => store(dot_block::<2>(block, inputs, first, second), row, rows, out),
                3 => store(dot_block::<3>(block, inputs, first, second), row, rows, out),
                _ => store(
                    dot_block::<ROW_BLOCK>(block, inputs, first, second),
                    row,
                    rows,
                    out,
                ),
            }
            row += ROW_BLOCK;
        }
    }
}

/// Writes the sums of activation rows `row..` with a pair of weight rows into the pair's outputs
/// (`rows` values per weight row; one weight row's worth when the pair is an odd last row).
fn store<const R: usize>(sums: [[f32; 2]; R], row: usize, rows: usize, out: &mut [f32]) {
    let (first, second) = out.split_at_mut(rows);
    for (offset, [a, b]) in sums.into_iter().enumerate() {
        first[row + offset] = a;
        if let Some(slot) = second.get_mut(row + offset) {
            *slot = b;
        }
    }
}

/// The dot products of `R` activation rows (each `inputs` long, back to back in `block`) with
/// two weight rows.
#[target_feature(enable = "avx2,fma")]
fn dot_block<const R: usize>(
    block: &[f32],
    inputs: usize,
    first: &[f32],
    second: &[f32],
) -> [[f32; 2]; R] {
    const LANES: usize = 8;
    let vectorized = inputs - inputs % LANES;
    let block = &block[..R * inputs];
    let (first, second) = (&first[..inputs], &second[..inputs]);
    let mut first_sums = [_mm256_setzero_ps(); R];
    let mut second_sums = [_mm256_setzero_ps(); R];
    let mut index = 0;
    while index < vectorized {
        // SAFETY: `index + LANES <= vectorized <= inputs`, and each row `row < R` of `block` is
        // `inputs` long, so every load reads inside its slice.
        unsafe {
            let a = _mm256_loadu_ps(first.as_ptr().add(index));
            let b = _mm256_loadu_ps(second.as_ptr().add(index));
            for row in 0..R {
                let x = _mm256_loadu_ps(block.as_ptr().add(row * inputs + index));
                first_sums[row] = _mm256_fmadd_ps(x, a, first_sums[row]);
                second_sums[row] = _mm256_fmadd_ps(x, b, second_sums[row]);
            }
        }
        index += LANES;
    }
    let mut sums = [[0f32; 2]; R];
    for row in 0..R {
        let x = &block[row * inputs..(row + 1) * inputs];
        let mut pair = [
            horizontal_sum(first_sums[row]),
            horizontal_sum(second_sums[row]),
        ];
        for index in vectorized..inputs {
            pair[0] += x[index] * first[index];
            pair[1] += x[index] * second[index];
        }
        sums[row] = pair;
    }
    sums
}

#[target_feature(enable = "avx2,fma")]
fn horizontal_sum(vector: __m256) -> f32 {
    let halves = _mm_add_ps(
        _mm256_castps256_ps128(vector),
        _mm256_extractf128_ps::<1>(vector),
    );
    let pairs = _mm_hadd_ps(halves, halves);
    _mm_cvtss_f32(_mm_hadd_ps(pairs, pairs))
}

#[cfg(test)]
mod tests {
    use mlx_rs::ops;

    use super::*;
    use crate::model::spread_values as values;

    #[test]
    fn matches_mlx_for_every_row_count_and_ragged_shapes() {
        assert!(
            available(),
            "the test machine is an x86 CPU with AVX2 and FMA"
        );
        // 131 weight rows: an odd pair at the end and a short last task; 77 inputs: a scalar tail.
        for (outputs, inputs) in [(131, 77), (256, 64)] {
            let weight = Array::from_slice(
                &values(outputs * inputs, 7),
                &[outputs as i32, inputs as i32],
            );
            let bias = Array::from_slice(&values(outputs, 3), &[outputs as i32]);
            for rows in 1..=MAX_ROWS {
                let x = Array::from_slice(
                    &values(rows * inputs, rows as u32),
                    &[1, rows as i32, inputs as i32],
                );
                let expected = ops::addmm(&bias, &x, weight.t(), None, None).unwrap();
                let host = matmul_transposed(&x, &weight, Some(&bias))
                    .unwrap()
                    .unwrap();
                assert_eq!(host.shape(), expected.shape());
                let difference = ops::abs(ops::subtract(&host, &expected).unwrap())
                    .unwrap()
                    .max(None)
                    .unwrap()
                    .item_exact::<f32>();
                assert!(
                    difference < 1e-4,
                    "{rows} rows, {outputs}x{inputs}: {difference}"
                );
            }
        }
    }

    #[test]
    fn leaves_larger_inputs_and_other_dtypes_to_mlx() {
        let weight = Array::from_slice(&values(64 * 32, 1), &[64, 32]);
        let many_rows =
            Array::from_slice(&values((MAX_ROWS + 1) * 32, 2), &[MAX_ROWS as i32 + 1, 32]);
        assert!(
            matmul_transposed(&many_rows, &weight, None)
                .unwrap()
                .is_none()
        );
        let half = Array::from_slice(&values(32, 3), &[1, 32])
            .as_dtype(Dtype::Float16)
            .unwrap();
        assert!(matmul_transposed(&half, &weight, None).unwrap().is_none());
    }
}
