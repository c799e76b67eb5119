//! Each layer's shape as loaded: what the memory a prefill takes depends on (the prefill guard),
//! read from the layers themselves so it holds for every architecture.

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LayerShape {
    /// A sliding-window layer's window: its cache lets go of older positions.
    pub sliding_window: Option<i32>,
    /// A recurrent layer's state, which replaces its key/value cache and does not grow with
    /// the sequence.
    pub recurrent: Option<StateShape>,
    pub feed_forward: FeedForwardShape,
}

/// Elements of a recurrent layer's state (also the size of its boundary snapshot).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StateShape {
    /// In the activations' dtype (a gated DeltaNet's convolution inputs).
    pub activation_elements: u64,
    /// In float32 (a gated DeltaNet's memory).
    pub f32_elements: u64,
}

impl StateShape {
    pub fn bytes(&self, element_bytes: u64) -> u64 {
        self.activation_elements * element_bytes + self.f32_elements * 4
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FeedForwardShape {
    /// An MLP `inner` wide.
    Dense { inner: i32 },
    /// `top_k` of `experts` experts per position, each `inner` wide, beside shared experts
    /// `shared_inner` wide (0 without).
    Experts {
        experts: i32,
        top_k: i32,
        inner: i32,
        shared_inner: i32,
    },
}
