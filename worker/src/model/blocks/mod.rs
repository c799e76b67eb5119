//! The blocks architectures compose, each as mlx-lm computes it.

pub mod attention;
pub mod decoder_layer;
pub mod gated_delta;
pub mod latent_attention;
pub mod linear;
pub mod mamba2;
pub mod mlp;
pub mod moe;
pub mod mtp;
pub mod multi_linear;
pub mod norm;
pub mod packed;
pub mod per_layer_input;
pub mod query_scale;
pub mod rope;
pub mod scaled;
pub mod short_conv;
