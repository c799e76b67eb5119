//! Pipeline parallelism: each rank of a group runs a contiguous share of the layers and passes
//! its activations on with MLX's send and receive, as mlx-lm's `PipelineMixin` does. The last
//! layers are rank 0's, and every rank gathers rank 0's final hidden states, so that all of them
//! compute the same logits and sample the same tokens.

use std::ops::Range;
use std::sync::Arc;

use mlx_rs::Array;
use mlx_rs::error::Exception;
use mlx_rs::ops::indexing::IndexOp;

use crate::distributed::Group;

pub struct Pipeline {
    group: Arc<Group>,
    share: LayerShare,
}

/// The layers one rank runs of a model's.
#[derive(Clone)]
pub struct LayerShare {
    layers: Range<usize>,
    layer_count: usize,
}

impl Pipeline {
    /// This rank's share of `layer_count` layers; refused when the group has more ranks than
    /// there are layers.
    pub fn new(group: Arc<Group>, layer_count: usize) -> Result<Self, String> {
        let layers = stage_layers(layer_count, group.size(), stage(&group)).ok_or_else(|| {
            format!(
                "a pipeline of {} ranks cannot share {layer_count} layers: at most one rank per layer",
                group.size()
            )
        })?;
        Ok(Self {
            group,
            share: LayerShare {
                layers,
                layer_count,
            },
        })
    }

    /// The layers this rank runs.
    pub fn layers(&self) -> Range<usize> {
        self.share.layers.clone()
    }

    pub fn share(&self) -> LayerShare {
        self.share.clone()
    }

    pub fn group(&self) -> &Arc<Group> {
        &self.group
    }

    /// The hidden states this rank's layers start from: the embedded tokens `embedded` on the
    /// first stage, else what the stage before sends.
    pub(super) fn receive(&self, embedded: Array) -> Result<Array, Exception> {
        let before = self.group.rank() + 1;
        if before == self.group.size() {
            return Ok(embedded);
        }
        self.group.recv(embedded.shape(), embedded.dtype(), before)
    }

    /// Passes this rank's output to the next stage and returns the last stage's output, the
    /// same on every rank.
    pub(super) fn pass_on(&self, hidden: Array) -> Result<Array, Exception> {
        let rank = self.group.rank();
        let hidden = match rank {
            0 => hidden,
            _ => self.group.send(&hidden, rank - 1)?,
        };
        // The gather keeps the send in the graph; rank 0's rows come first.
        let rows = hidden.dim(0);
        Ok(self.group.all_gather(&hidden)?.index(..rows))
    }
}

impl LayerShare {
    /// Whether this rank keeps the checkpoint tensor `name` in memory: everything but the
    /// decoder layers another rank runs (a vision tower's layers and a multi-token-prediction
    /// layer are every rank's).
    pub fn holds_tensor(&self, name: &str) -> bool {
        match decoder_layer_of(name) {
            Some(layer) if layer < self.layer_count => self.layers.contains(&layer),
            _ => true,
        }
    }
}

/// The stage a rank runs: the first layers are the last rank's.
fn stage(group: &Group) -> usize {
    group.size() - 1 - group.rank()
}

/// The layers of `stage` of `stages` over `layer_count` layers, the earlier stages taking one
/// more where they do not divide evenly (rank 0, the last stage, also computes the logits).
fn stage_layers(layer_count: usize, stages: usize, stage: usize) -> Option<Range<usize>> {
    if stages == 0 || stages > layer_count || stage >= stages {
        return None;
    }
    let (per_stage, extra) = (layer_count / stages, layer_count % stages);
    let start = stage * per_stage + stage.min(extra);
    let len = per_stage + usize::from(stage < extra);
    Some(start..start + len)
}

/// The decoder layer a checkpoint tensor belongs to (`model.layers.3.…`, a wrapper's
/// `model.language_model.layers.3.…`, Nemotron-H's `backbone.layers.3.…`); `None` for the
/// embedding, the head, a vision tower's and a prediction layer's own tensors.
fn decoder_layer_of(name: &str) -> Option<usize> {
    if ["vision", "visual", "mtp.", "audio"]
        .iter()
        .any(|tower| name.contains(tower))
    {
        return None;
    }
    let (_, rest) = name.split_once("layers.")?;
    let (index, _) = rest.split_once('.')?;
    index.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stages_cover_every_layer_once_in_order_earlier_ones_taking_the_rest() {
        let shares: Vec<_> = (0..3).map(|s| stage_layers(8, 3, s).unwrap()).collect();
        assert_eq!(shares, [0..3, 3..6, 6..8]);
        assert_eq!(stage_layers(4, 4, 3), Some(3..4));
        assert_eq!(stage_layers(3, 4, 0), None, "more ranks than layers");
    }

    #[test]
    fn only_decoder_layers_are_shared_out() {
        assert_eq!(
            decoder_layer_of("model.layers.12.mlp.up_proj.weight"),
            Some(12)
        );
        assert_eq!(
            decoder_layer_of("model.language_model.layers.2.self_attn.q_proj.weight"),
            Some(2)
        );
        assert_eq!(decoder_layer_of("backbone.layers.0.mixer.A_log"), Some(0));
        assert_eq!(decoder_layer_of("model.embed_tokens.weight"), None);
        assert_eq!(
            decoder_layer_of("model.visual.blocks.0.attn.qkv.weight"),
            None
        );
        assert_eq!(
            decoder_layer_of("vision_tower.encoder.layers.1.mlp.fc1.weight"),
            None
        );
        assert_eq!(decoder_layer_of("mtp.layers.0.mlp.up_proj.weight"), None);
    }
}
