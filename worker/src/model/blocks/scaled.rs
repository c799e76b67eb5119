//! Multiplying by a factor the way mlx-lm's Python does, shared by the blocks that scale an
//! embedding, a residual branch or a logit.

use mlx_rs::Array;
use mlx_rs::error::Exception;
use mlx_rs::ops;

/// `x · factor` in `x`'s own dtype, as mlx-lm's multiply by a Python float is.
pub fn scaled(x: Array, factor: Option<f32>) -> Result<Array, Exception> {
    match factor {
        Some(factor) => ops::multiply(&x, &Array::from_f32(factor).as_dtype(x.dtype())?),
        None => Ok(x),
    }
}
