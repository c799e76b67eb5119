//! What the towers share: the patch convolution as a projection, attention among all of an
//! image's patches, and the sizes the batch and the memory guard weigh a block by.

use mlx_rs::error::Exception;
use mlx_rs::{Array, fast};

use crate::model::error::ModelError;
use crate::model::weights::Weights;

/// A patch convolution's weight `name` as the projection of a flattened patch (channels, then
/// rows and columns): `[hidden, channels · patch · patch]`. mlx-vlm stores it channels last,
/// which its shape tells.
pub(super) fn patch_projection(
    weights: &mut Weights,
    name: &str,
    [hidden, channels, patch]: [i32; 3],
) -> Result<Array, ModelError> {
    let channels_last = weights
        .shape_of(name)
        .is_some_and(|shape| shape == [hidden, patch, patch, channels]);
    if channels_last {
        weights
            .take_float(name, &[hidden, patch, patch, channels])?
            .transpose_axes(&[0, 3, 1, 2])
    } else {
        Ok(weights.take_float(name, &[hidden, channels, patch, patch])?)
    }
    .and_then(|weight| weight.reshape(&[hidden, channels * patch * patch]))
    .map_err(|source| weights.mlx_error("flattening the patch projection", source))
}

/// One block's peak over `patches` for a tower of `[heads, hidden, intermediate]`: its
/// attention scores and probabilities over all the patches (MLX's fused attention does not
/// take every head size, so they may be written out), and its hidden states, projections and
/// MLP activations.
pub(super) fn peak_bytes(
    patches: u64,
    [heads, hidden, intermediate]: [i32; 3],
    element_bytes: u64,
) -> u64 {
    let width = |value: i32| u64::try_from(value).unwrap_or(0);
    let scores = width(heads) * patches * patches * 2;
    let activations = patches * (5 * width(hidden) + width(intermediate));
    (scores + activations).saturating_mul(element_bytes)
}

/// The patches of `patch` pixels a side in an image of `pixels`.
pub(super) fn patches_in(pixels: u64, patch: i32) -> u64 {
    let patch = u64::try_from(patch).unwrap_or(1).max(1);
    pixels / (patch * patch)
}

/// One block's multiply-adds over `patches`: its projections and MLP on every patch, and
/// attention among all of them.
pub(super) fn block_multiply_adds(patches: i32, hidden: i32, intermediate: i32) -> f64 {
    let (patches, hidden, intermediate) = (
        f64::from(patches),
        f64::from(hidden),
        f64::from(intermediate),
    );
    let weights = 4.0 * hidden * hidden + 2.0 * hidden * intermediate;
    patches * weights + 2.0 * patches * patches * hidden
}

/// A projection's output over an image's patches (`[patches, heads · head_dim]`) as heads,
/// `[1, heads, patches, head_dim]`.
pub(super) fn heads_of(projected: Array, heads: i32) -> Result<Array, Exception> {
    let patches = projected.dim(0);
    projected
        .reshape(&[1, patches, heads, -1])?
        .transpose_axes(&[0, 2, 1, 3])
}

/// Every patch attending to every patch of its image, the scores scaled by the head size's
/// root: `[1, heads, patches, head_dim]` each in, `[patches, heads · head_dim]` out.
pub(super) fn attend_all(
    queries: &Array,
    keys: &Array,
    values: &Array,
) -> Result<Array, Exception> {
    let scale = (queries.dim(-1) as f32).powf(-0.5);
    attend_all_scaled(queries, keys, values, scale)
}

/// [`attend_all`] with the scores scaled by `scale` (Gemma 4's tower leaves them unscaled).
pub(super) fn attend_all_scaled(
    queries: &Array,
    keys: &Array,
    values: &Array,
    scale: f32,
) -> Result<Array, Exception> {
    let patches = queries.dim(2);
    fast::scaled_dot_product_attention(queries, keys, values, scale, None, None)?
        .transpose_axes(&[0, 2, 1, 3])?
        .reshape(&[patches, -1])
}
