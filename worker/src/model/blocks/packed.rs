//! A packed pass holds several sequences' new positions one after the other
//! (`[1, positions, ..]`); a layer whose state is per sequence runs each through its own cache.

use mlx_rs::Array;
use mlx_rs::error::Exception;
use mlx_rs::ops;
use mlx_rs::ops::indexing::IndexOp;

use crate::model::kv_cache::KvCache;

/// Runs `each` on every sequence (`lengths[i]` positions of the `total`, with `caches[i]`),
/// handing it a cut from arrays over all positions to that sequence's, and joins the outputs in
/// order along the positions.
pub fn per_sequence(
    total: i32,
    lengths: &[i32],
    caches: &mut [&mut KvCache],
    mut each: impl FnMut(&dyn Fn(&Array) -> Array, &mut KvCache) -> Result<Array, Exception>,
) -> Result<Array, Exception> {
    let mut outputs = Vec::with_capacity(lengths.len());
    let mut start = 0;
    for (&length, cache) in lengths.iter().zip(caches.iter_mut()) {
        let cut = |array: &Array| {
            if length == total {
                array.clone()
            } else {
                array.index((.., start..start + length))
            }
        };
        outputs.push(each(&cut, cache)?);
        start += length;
    }
    match outputs.as_slice() {
        [only] => Ok(only.clone()),
        _ => ops::concatenate(&outputs, 1),
    }
}
