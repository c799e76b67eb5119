//! Each layer's shape as loaded: what the memory a prefill takes depends on (the prefill guard),
//! read from the layers themselves so it holds for every architecture.

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LayerShape {
    /// A sliding-window layer's window: its cache lets go of older positions.
    pub sliding_window: Option<i32>,
    /// What the layer caches per position.
    pub cache: CacheShape,
    /// A recurrent layer's state, which replaces its key/value cache and does not grow with
    /// the sequence.
    pub recurrent: Option<StateShape>,
    pub feed_forward: FeedForwardShape,
}

/// The keys and values a layer caches per position: `kv_heads` heads of `key_dim` keys and
/// `value_dim` values. A latent attention layer caches one head: its latent as the keys, its
/// shared rotary key as the values; a recurrent layer caches no positions (all zero).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CacheShape {
    pub kv_heads: i32,
    pub key_dim: i32,
    pub value_dim: i32,
}

impl CacheShape {
    /// A grouped-query attention layer's: keys and values equally wide.
    pub const fn heads(kv_heads: i32, head_dim: i32) -> Self {
        Self {
            kv_heads,
            key_dim: head_dim,
            value_dim: head_dim,
        }
    }

    /// Elements of keys and values together, per position.
    pub fn elements(self) -> i64 {
        i64::from(self.kv_heads) * i64::from(self.key_dim + self.value_dim)
    }
}

/// What one layer keeps for a sequence, the memory estimate's unit: known from a built model's
/// layers ([`crate::model::Model::layer_caches`]) and, before any weight is read, from its
/// config alone (`arch::caches`), and the two agree for every architecture (the `toolchain`
/// and `architectures` tests).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LayerCache {
    /// Keys and values for every position, or a sliding window's last `window` ones.
    Positions {
        shape: CacheShape,
        window: Option<i32>,
    },
    /// A recurrent state, the same size at any length.
    State(StateShape),
    /// An earlier layer's keys and values, read, not kept (Gemma 4's KV-shared layers).
    Shared,
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
