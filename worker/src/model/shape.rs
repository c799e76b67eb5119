//! Each layer's shape as loaded: what the memory a prefill takes depends on (the prefill guard),
//! read from the layers themselves so it holds for every architecture.

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LayerShape {
    /// A sliding-window layer's window: its cache lets go of older positions.
    pub sliding_window: Option<i32>,
    pub feed_forward: FeedForwardShape,
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
