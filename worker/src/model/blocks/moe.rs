//! Mixture of experts: a router picks `top_k` experts per position and only those are computed,
//! through MLX's `gather_mm` / `gather_qmm` over the experts' stacked weights (mlx-lm's
//! `SwitchGLU`), so a step costs the chosen experts whatever their number. Some architectures
//! add shared experts, an MLP every position goes through beside the routed ones; Gemma 4
//! normalizes the router's input and scales each expert's weight.

use mlx_rs::error::Exception;
use mlx_rs::ops::indexing::{IndexOp, take_along_axis, topk_axis};
use mlx_rs::ops::{self, argpartition_axis, gather_mm};
use mlx_rs::{Array, Dtype};

use super::linear::{Linear, QuantizedWeight};
use super::mlp::{Activation, Mlp};
use super::norm::Norm;
use crate::model::config::ModelConfig;
use crate::model::error::ModelError;
use crate::model::quantized_ops;
use crate::model::shape::FeedForwardShape;
use crate::model::tensor_parallel::{TensorShard, reduced};
use crate::model::weights::Weights;

/// How the router's logits become the chosen experts and their weights.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Routing {
    /// Softmax over all experts, then the top k; their weights renormalized to sum to one when
    /// `normalize` (Qwen3-MoE's `norm_topk_prob`).
    SoftmaxTopK { normalize: bool },
    /// The top k logits, then a softmax over those (Mixtral).
    TopKSoftmax,
    /// Sigmoid scores (GLM-4.5's `noaux_tc`): experts are chosen by score plus the router's
    /// `e_score_correction_bias`, only among the `top_groups` of `groups` equal groups whose two
    /// best biased scores sum highest (the other groups' biased scores set to 0, as mlx-lm does,
    /// not to −inf); each chosen expert weighs its unbiased score, the k renormalized to sum to
    /// one when `normalize`, all times `scaling`.
    GroupedSigmoid {
        groups: i32,
        top_groups: i32,
        normalize: bool,
        scaling: f32,
    },
    /// As `GroupedSigmoid`, on softmax probabilities, the groups left out masked with −inf and
    /// the weights renormalized even for one expert, as llama.cpp routes a `deepseek2` whose
    /// `expert_gating_func` is softmax (DeepSeek V2's `scoring_func`).
    GroupedSoftmax {
        groups: i32,
        top_groups: i32,
        normalize: bool,
        scaling: f32,
    },
    /// Sigmoid scores in the router's dtype (LFM2-MoE): experts chosen by score, plus the
    /// router's `e_score_correction_bias` when `biased`; each chosen expert weighs its unbiased
    /// score, the k renormalized to sum to one (plus 1e-6) when `normalize`, all times `scaling`.
    SigmoidTopK {
        biased: bool,
        normalize: bool,
        scaling: f32,
    },
    /// The top logit's expert only, its sigmoid scaling the expert's input rather than its output
    /// (Llama 4).
    TopOneSigmoidInput,
    /// Softmax over all experts in f32, experts chosen by probability plus the router's
    /// `e_score_correction_bias` where the file has one; each chosen expert weighs its unbiased probability, the k
    /// renormalized by their sum, at least `min_total` (ERNIE 4.5's `moe_norm_min`).
    SoftmaxBiasedTopK { min_total: f32 },
}

/// Tensor names of one expert projection, in both layouts users have.
pub struct ExpertNames {
    /// The stacked `[experts, out, in]` tensor's prefix, as mlx-community writes it
    /// (`model.layers.0.mlp.switch_mlp.gate_proj`).
    pub stacked: String,
    /// Expert `e`'s own tensor's prefix, where the original checkpoint has one per expert
    /// (`model.layers.0.mlp.experts.{e}.gate_proj`).
    pub per_expert: Option<Box<dyn Fn(i32) -> String>>,
}

impl ExpertNames {
    /// The gate, up and down projections of the experts under `mlp` as Qwen's and GLM's
    /// checkpoints name them: `{mlp}.switch_mlp.gate_proj` stacked, `{mlp}.experts.{e}.gate_proj`
    /// in the original layout.
    pub fn swiglu_under(mlp: &str) -> [Self; 3] {
        ["gate_proj", "up_proj", "down_proj"].map(|name| {
            let experts = format!("{mlp}.experts");
            Self {
                stacked: format!("{mlp}.switch_mlp.{name}"),
                per_expert: Some(Box::new(move |expert| format!("{experts}.{expert}.{name}"))),
            }
        })
    }
}

/// transformers 5's own layout of a layer's experts, `{mlp}.experts.gate_up_proj`
/// (`[experts, 2 × inner, hidden]`, gate rows first) and `{mlp}.experts.down_proj`, split and
/// renamed to the stacked `{mlp}.switch_mlp.*` names; nothing when the layer has neither.
pub fn unfuse_experts(weights: &mut Weights, mlp: &str) -> Result<(), ModelError> {
    let stacked = |name: &str| format!("{mlp}.switch_mlp.{name}.weight");
    weights.convert_into(
        &format!("{mlp}.experts.gate_up_proj"),
        [&stacked("gate_proj"), &stacked("up_proj")],
        "splitting the experts' gate_up_proj",
        |fused| {
            let halves = fused.split_equal(2, -2)?;
            Ok([halves[0].contiguous()?, halves[1].contiguous()?])
        },
    )?;
    weights.rename(&format!("{mlp}.experts.down_proj"), &stacked("down_proj"));
    Ok(())
}

pub struct Moe {
    router: Linear,
    routing: Routing,
    /// Added to the scores to choose experts, not to weigh them (sigmoid routings).
    score_bias: Option<Array>,
    shared_experts: Option<Mlp>,
    /// Normalizes what the router sees (Gemma 4).
    router_norm: Option<Norm>,
    /// Multiplies each chosen expert's weight by the expert's own factor (Gemma 4's
    /// `per_expert_scale`, `[experts]`).
    expert_scales: Option<Array>,
    /// Scales the shared experts' output by the sigmoid of this one-output projection
    /// (Qwen3-Next's `shared_expert_gate`).
    shared_expert_gate: Option<Linear>,
    experts: i32,
    top_k: i32,
    /// Width of each expert's MLP.
    inner: i32,
    /// `None` for an ungated activation (Nemotron-H's squared ReLU).
    gate_proj: Option<SwitchLinear>,
    up_proj: SwitchLinear,
    down_proj: SwitchLinear,
    activation: Activation,
    /// The group each expert's inner channels are split between, whose partial outputs the
    /// block sums once, the shared experts' with the routed ones'.
    shard: Option<TensorShard>,
}

#[derive(Clone, Debug, PartialEq)]
pub struct MoeSpec {
    pub experts: i32,
    pub top_k: i32,
    /// Width of each expert's MLP.
    pub inner: i32,
    pub routing: Routing,
    pub activation: Activation,
    /// Biases on the router and on every expert projection (gpt-oss).
    pub biases: bool,
}

impl MoeSpec {
    /// SwiGLU experts without biases, as most architectures have them.
    pub fn new(experts: i32, top_k: i32, inner: i32, routing: Routing) -> Self {
        Self {
            experts,
            top_k,
            inner,
            routing,
            activation: Activation::Silu,
            biases: false,
        }
    }
}

impl Moe {
    /// The router `{router}` (with its `e_score_correction_bias` for grouped sigmoid routing) and
    /// the gate, up and down projections of every expert.
    pub fn load(
        weights: &mut Weights,
        config: &ModelConfig,
        router: &str,
        [gate, up, down]: [ExpertNames; 3],
        spec: MoeSpec,
    ) -> Result<Self, ModelError> {
        let hidden = config.hidden_size;
        let quant = config.quantization;
        let shard = weights.tensor_shard().cloned();
        let mut switch = |names: ExpertNames, out: i32, input: i32, cut: Cut| {
            SwitchLinear::load(
                weights,
                config,
                names,
                [spec.experts, out, input],
                spec.biases,
                cut,
            )
        };
        let gate_proj = if spec.activation.is_gated() {
            Some(switch(gate, spec.inner, hidden, Cut::Rows)?)
        } else {
            None
        };
        let up_proj = switch(up, spec.inner, hidden, Cut::Rows)?;
        let down_proj = switch(down, hidden, spec.inner, Cut::Columns)?;
        let inner = match &shard {
            Some(shard) => shard.share_of(spec.inner).unwrap_or(spec.inner),
            None => spec.inner,
        };
        let bias = format!("{router}.e_score_correction_bias");
        let score_bias = match spec.routing {
            Routing::GroupedSigmoid { .. } | Routing::SigmoidTopK { biased: true, .. } => {
                Some(weights.take_float(&bias, &[spec.experts])?)
            }
            // DeepSeek V2 has no correction bias; llama.cpp adds one where the file has it.
            // mlx-lm drops ERNIE 4.5's, so mlx-community's files route by probability alone.
            Routing::GroupedSoftmax { .. } | Routing::SoftmaxBiasedTopK { .. }
                if weights.contains(&bias) =>
            {
                Some(weights.take_float(&bias, &[spec.experts])?)
            }
            _ => None,
        };
        Ok(Self {
            router: Linear::load(weights, router, spec.experts, hidden, spec.biases, quant)?,
            routing: spec.routing,
            score_bias,
            shared_experts: None,
            router_norm: None,
            expert_scales: None,
            shared_expert_gate: None,
            experts: spec.experts,
            top_k: spec.top_k,
            inner,
            gate_proj,
            up_proj,
            down_proj,
            activation: spec.activation,
            shard,
        })
    }

    /// Adds an MLP that every position goes through beside its routed experts.
    pub fn shape(&self) -> FeedForwardShape {
        FeedForwardShape::Experts {
            experts: self.experts,
            top_k: self.top_k,
            inner: self.inner,
            shared_inner: self.shared_experts.as_ref().map_or(0, Mlp::inner),
        }
    }

    pub fn with_shared_experts(self, shared_experts: Mlp) -> Self {
        Self {
            shared_experts: Some(shared_experts.partial()),
            ..self
        }
    }

    /// Normalizes the router's input with `norm` and multiplies each chosen expert's weight by
    /// its entry of `scales` (`[experts]`).
    pub fn with_scaled_routing(self, norm: Norm, scales: Array) -> Self {
        Self {
            router_norm: Some(norm),
            expert_scales: Some(scales),
            ..self
        }
    }

    /// Adds an MLP that every position goes through beside its routed experts, its output
    /// scaled by `sigmoid(gate(x))`.
    pub fn with_gated_shared_expert(self, shared_expert: Mlp, gate: Linear) -> Self {
        Self {
            shared_experts: Some(shared_expert.partial()),
            shared_expert_gate: Some(gate),
            ..self
        }
    }

    /// `x` is `[1, positions, hidden]`; each position's output is the weighted sum of its chosen
    /// experts' outputs, plus the shared experts' output.
    pub fn forward(&self, x: &Array) -> Result<Array, Exception> {
        self.forward_routed_by(x, x)
    }

    /// As [`Moe::forward`], the experts chosen from `router_input` rather than from `x`.
    pub fn forward_routed_by(&self, x: &Array, router_input: &Array) -> Result<Array, Exception> {
        let logits = match &self.router_norm {
            Some(norm) => self.router.forward(&norm.forward(router_input)?)?,
            None => self.router.forward(router_input)?,
        };
        let (indices, scores) = self.route(&logits)?;
        let scores = match &self.expert_scales {
            Some(scales) => ops::multiply(&scores, &scales.take_axis(&indices, 0)?)?,
            None => scores,
        };
        let routed = if let Routing::TopOneSigmoidInput = self.routing {
            let scaled = ops::multiply(x, &scores)?;
            self.experts(&scaled, &indices)?.squeeze_axes(&[-2])?
        } else {
            let expert_outputs = self.experts(x, &indices)?;
            let weighted = ops::multiply(&expert_outputs, &scores.expand_dims(-1)?)?;
            weighted
                .sum_axis(-2, false)?
                .as_dtype(expert_outputs.dtype())?
        };
        let Some(shared) = &self.shared_experts else {
            return reduced(self.shard.as_ref(), routed);
        };
        let shared = match &self.shared_expert_gate {
            Some(gate) => ops::multiply(&ops::sigmoid(&gate.forward(x)?)?, &shared.forward(x)?)?,
            None => shared.forward(x)?,
        };
        reduced(self.shard.as_ref(), ops::add(&routed, &shared)?)
    }

    /// The chosen experts `[.., top_k]` and their weights.
    fn route(&self, logits: &Array) -> Result<(Array, Array), Exception> {
        let k = self.top_k;
        match self.routing {
            Routing::SoftmaxTopK { normalize } => {
                let probabilities = ops::softmax_axis(logits, -1, true)?;
                let indices = top_k(&probabilities, k)?;
                let mut scores = take_along_axis(&probabilities, &indices, -1)?;
                if normalize {
                    scores = ops::divide(&scores, &scores.sum_axis(-1, true)?)?;
                }
                Ok((indices, scores))
            }
            Routing::TopKSoftmax => {
                let indices = top_k(logits, k)?;
                let scores = take_along_axis(logits, &indices, -1)?;
                Ok((indices, ops::softmax_axis(&scores, -1, true)?))
            }
            Routing::GroupedSigmoid {
                groups,
                top_groups,
                normalize,
                scaling,
            } => {
                let scores = ops::sigmoid(&logits.as_dtype(Dtype::Float32)?)?;
                let normalize = k > 1 && normalize;
                self.grouped_top_k(&scores, [groups, top_groups], 0.0, normalize, scaling)
            }
            Routing::GroupedSoftmax {
                groups,
                top_groups,
                normalize,
                scaling,
            } => {
                let scores = ops::softmax_axis(&logits.as_dtype(Dtype::Float32)?, -1, true)?;
                let masked = f32::NEG_INFINITY;
                self.grouped_top_k(&scores, [groups, top_groups], masked, normalize, scaling)
            }
            Routing::SigmoidTopK {
                normalize, scaling, ..
            } => {
                let scores = ops::sigmoid(logits)?;
                let choosing = match &self.score_bias {
                    Some(bias) => ops::add(&scores.as_dtype(Dtype::Float32)?, bias)?,
                    None => scores.clone(),
                };
                let indices = top_k(&choosing, k)?;
                let mut weights = take_along_axis(&scores, &indices, -1)?;
                let dtype = scores.dtype();
                let constant = |value: f32| Array::from_f32(value).as_dtype(dtype);
                if normalize {
                    let total = ops::add(&weights.sum_axis(-1, true)?, &constant(1e-6)?)?;
                    weights = ops::divide(&weights, &total)?;
                }
                let weights = ops::multiply(&weights, &constant(scaling)?)?;
                Ok((indices, weights.as_dtype(logits.dtype())?))
            }
            Routing::SoftmaxBiasedTopK { min_total } => {
                let probabilities = ops::softmax_axis(&logits.as_dtype(Dtype::Float32)?, -1, true)?;
                let choosing = match &self.score_bias {
                    Some(bias) => ops::add(&probabilities, bias)?,
                    None => probabilities.clone(),
                };
                let indices = top_k(&choosing, k)?;
                let weights = take_along_axis(&probabilities, &indices, -1)?;
                let total = ops::maximum(&weights.sum_axis(-1, true)?, Array::from_f32(min_total))?;
                let weights = ops::divide(&weights, &total)?;
                Ok((indices, weights.as_dtype(logits.dtype())?))
            }
            Routing::TopOneSigmoidInput => {
                let indices = top_k(logits, 1)?;
                let scores = take_along_axis(logits, &indices, -1)?;
                let scores = ops::sigmoid(&scores.as_dtype(Dtype::Float32)?)?;
                Ok((indices, scores.as_dtype(logits.dtype())?))
            }
        }
    }

    /// The grouped choice of [`Routing::GroupedSigmoid`] on `scores` (f32, `[.., experts]`),
    /// the biased scores of the groups left out set to `masked` (mlx-lm's 0, llama.cpp's −inf).
    fn grouped_top_k(
        &self,
        scores: &Array,
        [groups, top_groups]: [i32; 2],
        masked: f32,
        normalize: bool,
        scaling: f32,
    ) -> Result<(Array, Array), Exception> {
        let k = self.top_k;
        let mut biased = match &self.score_bias {
            Some(bias) => ops::add(scores, bias)?,
            None => scores.clone(),
        };
        let dropped = groups - top_groups;
        if groups > 1 && dropped > 0 {
            let grouped = ops::unflatten(&biased, -1, &[groups, -1])?;
            let group_scores = topk_axis(&grouped, 2, -1)?.sum_axis(-1, true)?;
            let lowest =
                argpartition_axis(&group_scores, dropped - 1, -2)?.index((.., .., ..dropped, ..));
            biased = grouped
                .put_along_axis(&lowest, Array::from_f32(masked), -2)?
                .flatten(-2, -1)?;
        }
        let indices = top_k(&biased, k)?;
        let mut weights = take_along_axis(scores, &indices, -1)?;
        if normalize {
            weights = ops::divide(&weights, &weights.sum_axis(-1, true)?)?;
        }
        let weights = ops::multiply(&weights, Array::from_f32(scaling))?;
        Ok((indices, weights))
    }

    /// Every position through each of its chosen experts: `[.., top_k, hidden]`. With many
    /// positions the rows are sorted by expert first, so each expert's weights are read once.
    fn experts(&self, x: &Array, indices: &Array) -> Result<Array, Exception> {
        let x = x.expand_dims_axes(&[-2, -3])?;
        let sort = indices.size() >= 64;
        let (x, expert_of_row, unsort) = if sort {
            let k = indices.dim(-1);
            let flat = indices.flatten(None, None)?;
            let order = ops::argsort_axis(&flat, 0)?;
            let unsort = ops::argsort_axis(&order, 0)?;
            let rows = x.flatten(0, -3)?;
            let source_rows = ops::floor_divide(&order, Array::from_int(k))?;
            (
                rows.take_axis(&source_rows, 0)?,
                flat.take_axis(&order, 0)?,
                Some(unsort),
            )
        } else {
            (x, indices.clone(), None)
        };
        let gate = match &self.gate_proj {
            Some(gate_proj) => Some(gate_proj.forward(&x, &expert_of_row, sort)?),
            None => None,
        };
        let up = self.up_proj.forward(&x, &expert_of_row, sort)?;
        let activated = self.activation.apply(gate.as_ref(), &up)?;
        let out = self.down_proj.forward(&activated, &expert_of_row, sort)?;
        let out = match unsort {
            Some(unsort) => {
                let mut shape = indices.shape().to_vec();
                shape.extend_from_slice(&out.shape()[1..]);
                out.take_axis(&unsort, 0)?.reshape(&shape)?
            }
            None => out,
        };
        out.squeeze_axes(&[-2])
    }
}

/// Indices of the `k` largest entries of the last axis, in no particular order.
fn top_k(values: &Array, k: i32) -> Result<Array, Exception> {
    Ok(argpartition_axis(&ops::negative(values)?, k - 1, -1)?.index((.., .., ..k)))
}

/// One projection of every expert, `[experts, out, in]`, applied to each row with the expert
/// its index names, plus that expert's bias if the projections have them.
struct SwitchLinear {
    weight: SwitchWeight,
    bias: Option<Array>,
}

enum SwitchWeight {
    Dense(Array),
    Quantized(QuantizedWeight),
}

/// Which part of each expert's projection a tensor-parallel rank keeps.
#[derive(Clone, Copy)]
enum Cut {
    /// Its share of the output rows (gate and up: the inner channels).
    Rows,
    /// Its share of the input columns (down: the same inner channels).
    Columns,
}

impl SwitchLinear {
    fn load(
        weights: &mut Weights,
        config: &ModelConfig,
        names: ExpertNames,
        shape: [i32; 3],
        has_bias: bool,
        cut: Cut,
    ) -> Result<Self, ModelError> {
        let prefix = names.stacked;
        for part in ["weight", "scales", "biases", "bias"] {
            let stacked = format!("{prefix}.{part}");
            let Some(expert_prefix) = &names.per_expert else {
                break;
            };
            let per_expert: Vec<String> = (0..shape[0])
                .map(|expert| format!("{}.{part}", expert_prefix(expert)))
                .collect();
            if !weights.contains(&stacked) && weights.contains(&per_expert[0]) {
                weights.stack(&per_expert, &stacked)?;
            }
        }
        let shape = match weights.tensor_shard().cloned() {
            Some(shard) => {
                let [experts, out, input] = shape;
                let share = |count: i32| shard.share_of(count).unwrap_or(count);
                match cut {
                    Cut::Rows => {
                        weights.shard_rows(&prefix, &[out])?;
                        [experts, share(out), input]
                    }
                    Cut::Columns => {
                        weights.shard_columns(&prefix)?;
                        [experts, out, share(input)]
                    }
                }
            }
            None => shape,
        };
        let bias = if has_bias {
            Some(weights.take_float(&format!("{prefix}.bias"), &shape[..2])?)
        } else {
            None
        };
        let weight = if weights.contains(&format!("{prefix}.scales")) {
            SwitchWeight::Quantized(QuantizedWeight::load(
                weights,
                &prefix,
                &shape,
                config.quantization,
            )?)
        } else {
            SwitchWeight::Dense(weights.take_float(&format!("{prefix}.weight"), &shape)?)
        };
        Ok(Self { weight, bias })
    }

    /// `x` is `[.., 1, in]` and `indices` names each row's expert; returns `[.., 1, out]`.
    fn forward(&self, x: &Array, indices: &Array, sorted: bool) -> Result<Array, Exception> {
        let out = match &self.weight {
            SwitchWeight::Dense(weight) => {
                gather_mm(x, weight.swap_axes(-1, -2)?, None, indices, sorted)?
            }
            SwitchWeight::Quantized(quantized) => quantized_ops::gather_matmul_transposed(
                x,
                &quantized.weight,
                &quantized.scales,
                quantized.biases.as_ref(),
                indices,
                sorted,
                quantized.format,
            )?,
        };
        match &self.bias {
            Some(bias) => ops::add(&out, &bias.take_axis(indices, 0)?.expand_dims(-2)?),
            None => Ok(out),
        }
    }
}
