//! The gated feed-forward block: `down(act(gate(x)) · up(x))`.

use mlx_rs::Array;
use mlx_rs::error::Exception;
use mlx_rs::ops;

use super::linear::Linear;
use crate::model::config::ModelConfig;
use crate::model::error::ModelError;
use crate::model::kernels;
use crate::model::weights::Weights;

#[derive(Clone, Copy)]
pub enum Activation {
    /// SwiGLU: `silu(gate) · up`.
    Silu,
}

impl Activation {
    pub fn gate(self, gate: &Array, up: &Array) -> Result<Array, Exception> {
        match self {
            Self::Silu => ops::multiply(&kernels::silu(gate)?, up),
        }
    }
}

pub struct Mlp {
    gate_proj: Linear,
    up_proj: Linear,
    down_proj: Linear,
    activation: Activation,
}

impl Mlp {
    /// `{prefix}.gate_proj`, `{prefix}.up_proj`, `{prefix}.down_proj` of width `inner`.
    pub fn load(
        weights: &mut Weights,
        config: &ModelConfig,
        prefix: &str,
        inner: i32,
        bias: bool,
    ) -> Result<Self, ModelError> {
        let (hidden, quant) = (config.hidden_size, config.quantization);
        let mut linear = |name: &str, out: i32, input: i32| {
            Linear::load(
                weights,
                &format!("{prefix}.{name}"),
                out,
                input,
                bias,
                quant,
            )
        };
        Ok(Self {
            gate_proj: linear("gate_proj", inner, hidden)?,
            up_proj: linear("up_proj", inner, hidden)?,
            down_proj: linear("down_proj", hidden, inner)?,
            activation: Activation::Silu,
        })
    }

    /// A fused `{prefix}.gate_up_proj` (gate rows first, Phi-3) as separate projections, and
    /// `{prefix}.down_proj`.
    pub fn load_fused(
        weights: &mut Weights,
        config: &ModelConfig,
        prefix: &str,
        inner: i32,
    ) -> Result<Self, ModelError> {
        let (hidden, quant) = (config.hidden_size, config.quantization);
        let fused = Linear::load(
            weights,
            &format!("{prefix}.gate_up_proj"),
            2 * inner,
            hidden,
            false,
            quant,
        )?;
        let [gate_proj, up_proj] = fused
            .split_rows([inner, inner])
            .map_err(|source| weights.mlx_error("splitting gate_up_proj", source))?;
        let down_proj = Linear::load(
            weights,
            &format!("{prefix}.down_proj"),
            hidden,
            inner,
            false,
            quant,
        )?;
        Ok(Self {
            gate_proj,
            up_proj,
            down_proj,
            activation: Activation::Silu,
        })
    }

    pub fn forward(&self, x: &Array) -> Result<Array, Exception> {
        let gate = self.gate_proj.forward(x)?;
        let up = self.up_proj.forward(x)?;
        self.down_proj.forward(&self.activation.gate(&gate, &up)?)
    }
}
