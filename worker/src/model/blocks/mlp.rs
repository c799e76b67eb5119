//! The feed-forward block: gated, `down(act(gate(x)) · up(x))`, or without a gate,
//! `down(act(up(x)))` (Nemotron-H's squared ReLU).

use mlx_rs::Array;
use mlx_rs::error::Exception;
use mlx_rs::ops;

use super::linear::Linear;
use crate::model::config::ModelConfig;
use crate::model::error::ModelError;
use crate::model::kernels;
use crate::model::tensor_parallel::{TensorShard, reduced};
use crate::model::weights::Weights;

#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Activation {
    /// SwiGLU: `silu(gate) · up`.
    Silu,
    /// GeGLU with the tanh approximation of GELU (Gemma).
    GeluTanh,
    /// gpt-oss's SwiGLU: the gate clipped from above at `limit`, the linear part clipped to
    /// `±limit` and shifted by one: `(up + 1) · gate · sigmoid(alpha · gate)`.
    ClampedSwiglu { limit: f32, alpha: f32 },
    /// Nemotron-H's `relu(up)²`, without a gate projection.
    SquaredRelu,
}

impl Activation {
    /// Whether the block has a gate projection.
    pub fn is_gated(self) -> bool {
        !matches!(self, Self::SquaredRelu)
    }

    /// The activation of `up`, gated by `gate` where the block has one.
    pub fn apply(self, gate: Option<&Array>, up: &Array) -> Result<Array, Exception> {
        match (self, gate) {
            (Self::SquaredRelu, _) => {
                let relu = ops::maximum(up, &Array::from_f32(0.0).as_dtype(up.dtype())?)?;
                ops::square(&relu)
            }
            (gated, Some(gate)) => gated.gate(gate, up),
            (_, None) => Err(Exception::from("a gated activation without its gate")),
        }
    }

    fn gate(self, gate: &Array, up: &Array) -> Result<Array, Exception> {
        match self {
            Self::Silu => ops::multiply(&kernels::silu(gate)?, up),
            Self::GeluTanh => ops::multiply(&gelu_tanh(gate)?, up),
            Self::ClampedSwiglu { limit, alpha } => {
                let constant = |value: f32| Array::from_f32(value).as_dtype(gate.dtype());
                let gate = ops::minimum(gate, &constant(limit)?)?;
                let up = ops::clip(up, (&constant(-limit)?, &constant(limit)?))?;
                let gated = ops::multiply(
                    &gate,
                    &ops::sigmoid(&ops::multiply(&constant(alpha)?, &gate)?)?,
                )?;
                ops::multiply(&ops::add(&up, &constant(1.0)?)?, &gated)
            }
            Self::SquaredRelu => self.apply(None, up),
        }
    }
}

pub struct Mlp {
    /// `None` for an ungated activation.
    gate_proj: Option<Linear>,
    up_proj: Linear,
    down_proj: Linear,
    activation: Activation,
    /// Width of the gate and up projections.
    inner: i32,
    /// The group this MLP's inner channels are split between, whose partial outputs it sums.
    shard: Option<TensorShard>,
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
        Self::load_with(weights, config, prefix, inner, bias, Some(Activation::Silu))
    }

    /// Nemotron-H's MLP: `{prefix}.up_proj` of width `inner`, squared ReLU, `{prefix}.down_proj`.
    pub fn load_squared_relu(
        weights: &mut Weights,
        config: &ModelConfig,
        prefix: &str,
        inner: i32,
        bias: bool,
    ) -> Result<Self, ModelError> {
        Self::load_with(weights, config, prefix, inner, bias, None)
    }

    /// Gated by `gate_proj` through `gated`, else ungated with squared ReLU.
    fn load_with(
        weights: &mut Weights,
        config: &ModelConfig,
        prefix: &str,
        inner: i32,
        bias: bool,
        gated: Option<Activation>,
    ) -> Result<Self, ModelError> {
        let (hidden, quant) = (config.hidden_size, config.quantization);
        let shard = weights.tensor_shard().cloned();
        let inner = match &shard {
            Some(shard) => {
                for name in ["gate_proj", "up_proj"] {
                    weights.shard_rows(&format!("{prefix}.{name}"), &[inner])?;
                }
                weights.shard_columns(&format!("{prefix}.down_proj"))?;
                shard.share_of(inner).unwrap_or(inner)
            }
            None => inner,
        };
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
        let gate_proj = match gated {
            Some(_) => Some(linear("gate_proj", inner, hidden)?),
            None => None,
        };
        Ok(Self {
            gate_proj,
            up_proj: linear("up_proj", inner, hidden)?,
            down_proj: linear("down_proj", hidden, inner)?,
            activation: gated.unwrap_or(Activation::SquaredRelu),
            inner,
            shard,
        })
    }

    pub fn with_activation(self, activation: Activation) -> Self {
        Self { activation, ..self }
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
            gate_proj: Some(gate_proj),
            up_proj,
            down_proj,
            activation: Activation::Silu,
            inner,
            shard: None,
        })
    }

    /// Width of the gate and up projections (this rank's share of them, tensor parallel).
    pub fn inner(&self) -> i32 {
        self.inner
    }

    /// The MLP leaving its partial output for the block around it to sum (a mixture of
    /// experts' shared expert, summed with the routed ones).
    pub fn partial(self) -> Self {
        Self {
            shard: None,
            ..self
        }
    }

    pub fn forward(&self, x: &Array) -> Result<Array, Exception> {
        let gate = match &self.gate_proj {
            Some(gate_proj) => Some(gate_proj.forward(x)?),
            None => None,
        };
        let up = self.up_proj.forward(x)?;
        let output = self
            .down_proj
            .forward(&self.activation.apply(gate.as_ref(), &up)?)?;
        reduced(self.shard.as_ref(), output)
    }
}

/// `x/2 · (1 + tanh(√(2/π) · (x + 0.044715·x³)))`, MLX's `gelu_approx`, in mlx-lm's op order.
pub(crate) fn gelu_tanh(x: &Array) -> Result<Array, Exception> {
    let constant = |value: f32| Array::from_f32(value).as_dtype(x.dtype());
    let cubed = ops::multiply(&constant(0.044_715)?, &ops::power(x, &constant(3.0)?)?)?;
    let inner = ops::multiply(
        &constant((2.0 / std::f64::consts::PI).sqrt() as f32)?,
        &ops::add(x, &cubed)?,
    )?;
    let half_x = ops::multiply(&constant(0.5)?, x)?;
    ops::multiply(&half_x, &ops::add(&constant(1.0)?, &ops::tanh(&inner)?)?)
}
