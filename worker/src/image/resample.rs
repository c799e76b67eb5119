//! Pillow's `BICUBIC` and `BILINEAR` resizes of 8-bit RGB (libImaging's `Resample.c`), to the
//! bit: what the processors resize with (`image.resize` in transformers' PIL backend and
//! mlx-vlm). A separable convolution, horizontal pass first, whose kernel (cubic with a = -0.5,
//! or the triangle) widens by the scale when shrinking; coefficients are fixed point with 22
//! fractional bits and each pass rounds and clamps to 8 bits. Rust's resizers round otherwise
//! (`fast_image_resize` keeps 16-bit coefficients) and differ by a level or two.

/// Fractional bits of the fixed-point coefficients (`PRECISION_BITS`: 32 - 8 - 2).
const PRECISION_BITS: u32 = 22;

/// Pillow's filters the processors name, by their `resample` number.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Filter {
    Bilinear,
    Bicubic,
}

impl Filter {
    /// The filter PIL numbers `resample` (`PIL.Image.Resampling`), where corral has it.
    pub fn from_pil(resample: u8) -> Option<Self> {
        match resample {
            2 => Some(Self::Bilinear),
            3 => Some(Self::Bicubic),
            _ => None,
        }
    }

    /// The kernel's support at scale 1.
    fn support(self) -> f64 {
        match self {
            Self::Bilinear => 1.0,
            Self::Bicubic => 2.0,
        }
    }

    fn weight(self, x: f64) -> f64 {
        match self {
            Self::Bilinear => (1.0 - x.abs()).max(0.0),
            Self::Bicubic => cubic(x),
        }
    }
}

/// `pixels` (`width × height`, RGB, row-major) resized to `new_width × new_height`.
pub fn resize(
    pixels: &[u8],
    (width, height): (usize, usize),
    (new_width, new_height): (usize, usize),
    filter: Filter,
) -> Vec<u8> {
    let rows = Coefficients::new(height, new_height, filter);
    // Only the rows the vertical pass reads are resized across.
    let first_row = rows.bounds.first().map_or(0, |&(start, _)| start);
    let last_row = rows
        .bounds
        .last()
        .map_or(height, |&(start, count)| start + count);
    let across = if new_width != width {
        let columns = Coefficients::new(width, new_width, filter);
        let mut across = vec![0; new_width * (last_row - first_row) * 3];
        for row in first_row..last_row {
            let source = &pixels[row * width * 3..(row + 1) * width * 3];
            let target = &mut across[(row - first_row) * new_width * 3..][..new_width * 3];
            for (column, out) in target.chunks_exact_mut(3).enumerate() {
                let (start, weights) = columns.of(column);
                for (channel, value) in out.iter_mut().enumerate() {
                    let taps = weights.iter().enumerate().map(|(tap, &weight)| {
                        (i32::from(source[(start + tap) * 3 + channel]), weight)
                    });
                    *value = convolve(taps);
                }
            }
        }
        across
    } else {
        pixels[first_row * width * 3..last_row * width * 3].to_vec()
    };
    if new_height == height {
        return across;
    }
    let mut resized = vec![0; new_width * new_height * 3];
    for (row, out) in resized.chunks_exact_mut(new_width * 3).enumerate() {
        let (start, weights) = rows.of(row);
        for (index, value) in out.iter_mut().enumerate() {
            let taps = weights.iter().enumerate().map(|(tap, &weight)| {
                let source_row = start - first_row + tap;
                (
                    i32::from(across[source_row * new_width * 3 + index]),
                    weight,
                )
            });
            *value = convolve(taps);
        }
    }
    resized
}

/// One output value: the weighted sum, rounded, shifted back and clamped as `clip8`.
fn convolve(taps: impl Iterator<Item = (i32, i32)>) -> u8 {
    let sum = taps.fold(1 << (PRECISION_BITS - 1), |sum, (value, weight)| {
        sum + value * weight
    });
    (sum >> PRECISION_BITS).clamp(0, 255) as u8
}

/// Per output position along one axis, the first input position it reads, and the fixed-point
/// weights of the positions from there (`precompute_coeffs`, `normalize_coeffs_8bpc`).
struct Coefficients {
    bounds: Vec<(usize, usize)>,
    weights: Vec<i32>,
    width: usize,
}

impl Coefficients {
    fn new(input: usize, output: usize, filter: Filter) -> Self {
        let scale = input as f64 / output as f64;
        let filter_scale = scale.max(1.0);
        let support = filter.support() * filter_scale;
        // Pillow multiplies by the reciprocal, which rounds differently from dividing.
        let inverse_scale = 1.0 / filter_scale;
        let width = support.ceil() as usize * 2 + 1;
        let mut bounds = Vec::with_capacity(output);
        let mut weights = vec![0; output * width];
        for position in 0..output {
            let center = (position as f64 + 0.5) * scale;
            // C's casts truncate toward zero.
            let start = ((center - support + 0.5) as i64).max(0) as usize;
            let end = ((center + support + 0.5) as i64).min(input as i64) as usize;
            let count = end - start;
            let raw: Vec<f64> = (0..count)
                .map(|tap| filter.weight(((tap + start) as f64 - center + 0.5) * inverse_scale))
                .collect();
            let total: f64 = raw.iter().sum();
            for (tap, weight) in raw.into_iter().enumerate() {
                let weight = if total == 0.0 { weight } else { weight / total };
                let fixed = weight * f64::from(1u32 << PRECISION_BITS);
                weights[position * width + tap] = if fixed < 0.0 {
                    (fixed - 0.5) as i32
                } else {
                    (fixed + 0.5) as i32
                };
            }
            bounds.push((start, count));
        }
        Self {
            bounds,
            weights,
            width,
        }
    }

    fn of(&self, position: usize) -> (usize, &[i32]) {
        let (start, count) = self.bounds[position];
        (start, &self.weights[position * self.width..][..count])
    }
}

/// Pillow's `bicubic_filter`, a = -0.5.
fn cubic(x: f64) -> f64 {
    const A: f64 = -0.5;
    let x = x.abs();
    if x < 1.0 {
        ((A + 2.0) * x - (A + 3.0)) * x * x + 1.0
    } else if x < 2.0 {
        (((x - 5.0) * x + 8.0) * x - 4.0) * A
    } else {
        0.0
    }
}
