//! Tensor parallelism: every rank of a group runs every layer on its own slice of each
//! projection, as mlx-lm's `shard` methods split them. A block's input projections are split by
//! their output rows (whole heads, whole experts' inner channels), its output projection by its
//! input columns, so each rank computes a partial sum of the block's output and one `all_sum`
//! over the group completes it. The embedding, the head, the norms and the routers are every
//! rank's.

use std::sync::Arc;

use mlx_rs::Array;
use mlx_rs::error::Exception;

use crate::distributed::Group;

/// This rank's place in a tensor-parallel group.
#[derive(Clone)]
pub struct TensorShard {
    group: Arc<Group>,
}

impl TensorShard {
    pub fn new(group: Arc<Group>) -> Self {
        Self { group }
    }

    pub fn group(&self) -> &Arc<Group> {
        &self.group
    }

    pub fn ranks(&self) -> i32 {
        self.group.size() as i32
    }

    /// This rank's share of `count` things (heads, channels); `None` when they do not divide
    /// evenly between the ranks.
    pub fn share_of(&self, count: i32) -> Option<i32> {
        (count % self.ranks() == 0).then(|| count / self.ranks())
    }

    /// The indices along an axis laid out as consecutive `segments` (a fused projection's parts)
    /// that this rank keeps: its contiguous share of each segment, in order. `None` when a
    /// segment does not divide evenly.
    pub fn indices(&self, segments: &[i32]) -> Option<Vec<i32>> {
        let rank = self.group.rank() as i32;
        let mut kept = Vec::new();
        let mut offset = 0;
        for &width in segments {
            let share = self.share_of(width)?;
            let start = offset + rank * share;
            kept.extend(start..start + share);
            offset += width;
        }
        Some(kept)
    }

    /// Whether this rank keeps an output projection's bias: one rank adds it, so that the sum
    /// over the group holds it once.
    pub fn keeps_output_bias(&self) -> bool {
        self.group.rank() == 0
    }

    /// The sum over the group of each rank's partial block output.
    pub fn reduce(&self, partial: &Array) -> Result<Array, Exception> {
        self.group.all_sum(partial)
    }
}

/// Completes a block's output where its projections are split between ranks.
pub fn reduced(shard: Option<&TensorShard>, output: Array) -> Result<Array, Exception> {
    match shard {
        Some(shard) => shard.reduce(&output),
        None => Ok(output),
    }
}
