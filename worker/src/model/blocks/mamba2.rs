//! The Mamba-2 mixer of Nemotron-H and Granite 4 (mlx-lm's `NemotronHMamba2Mixer`,
//! `GraniteMoeHybridMamba2Mixer` and `ssm.py`): `in_proj` gives a gate `z`, the convolution's
//! input (the values `x`, then `B` and `C` for each group of heads) and a time step per head;
//! `x, B, C` go through a short causal depthwise convolution and SiLU; then the selective state
//! space scan updates a `[head_dim, state_size]` state per head at each position,
//! `h = exp(dt · A) · h + dt · x ⊗ B`, reads it with `C` and adds the skip `D · x`. The output is
//! gated by `silu(z)` and RMS-normalized per group of heads (`MambaRMSNormGated`), then `out_proj`.
//!
//! The scan runs in chunks, as the references' prefill does (the state space duality): within a
//! chunk the readouts are a causal decay-masked product of `C` and `B` against the inputs plus the
//! decayed entering state, and the state leaves the chunk once; chunks end at every prefix-cache
//! block boundary and at most every `SCAN_CHUNK` positions. Each sequence of a packed pass runs through its
//! own convolution and state ([`RecurrentState`]: `conv` and, in the `delta` slot, the scan's
//! state): sequences are packed without padding, so nothing of another ever reaches a state. At
//! each prefix-cache block boundary the input crosses the layer records its whole state there,
//! as the gated DeltaNet does, and after every position of an input holding guesses, each then
//! a chunk of one, as decoding runs it.

use mlx_rs::error::Exception;
use mlx_rs::ops::indexing::IndexOp;
use mlx_rs::ops::{self, zeros_dtype};
use mlx_rs::{Array, Dtype, fast};

use super::gated_delta::softplus;
use super::linear::Linear;
use super::packed::per_sequence;
use crate::model::config::ModelConfig;
use crate::model::error::ModelError;
use crate::model::kernels;
use crate::model::kv_cache::{KvCache, RecurrentState};
use crate::model::shape::StateShape;
use crate::model::weights::Weights;

/// The mixer's sizes, each architecture reading them from its own config keys.
#[derive(Clone, Copy)]
pub struct Mamba2Spec {
    pub heads: i32,
    pub head_dim: i32,
    pub state_size: i32,
    /// Groups of heads sharing one `B` and `C` (and one norm).
    pub groups: i32,
    pub conv_kernel: i32,
    pub conv_bias: bool,
    pub proj_bias: bool,
    /// The time step after softplus is clipped to `[min, max]`.
    pub time_step_limit: (f32, f32),
    pub eps: f32,
}

impl Mamba2Spec {
    /// Refuses sizes the mixer cannot run, naming `config`'s file.
    pub fn checked(self, config: &ModelConfig) -> Result<Self, ModelError> {
        let positive = [self.heads, self.head_dim, self.state_size, self.groups];
        if positive.iter().any(|&size| size <= 0)
            || self.heads % self.groups != 0
            || self.conv_kernel < 2
        {
            return Err(ModelError::Config {
                path: config.path.clone(),
                message: format!(
                    "Mamba-2 heads {} must be a multiple of its groups {}, head size {} and \
                     state size {} positive, conv kernel {} at least 2",
                    self.heads, self.groups, self.head_dim, self.state_size, self.conv_kernel
                ),
            });
        }
        Ok(self)
    }

    fn inner(&self) -> i32 {
        self.heads * self.head_dim
    }

    /// Elements of the state a sequence carries: the convolution's last `kernel - 1` inputs
    /// and the float32 scan state, `[heads, head_dim, state_size]`.
    pub fn state_shape(&self) -> StateShape {
        let count = |value: i32| u64::try_from(value).unwrap_or(0);
        StateShape {
            activation_elements: count(self.conv_kernel - 1) * count(self.conv_channels()),
            f32_elements: count(self.heads) * count(self.head_dim) * count(self.state_size),
        }
    }

    /// Channels of the convolution: `x`, then `B` and `C` of every group.
    fn conv_channels(&self) -> i32 {
        self.inner() + 2 * self.groups * self.state_size
    }
}

/// The time-step limit config.json writes as `[min, max]`; transformers 5 spells an infinite
/// bound `{"__float__": "Infinity"}`, some checkpoints `"Infinity"`. Absent, `default`.
pub fn time_step_limit(
    config: &ModelConfig,
    default: (f32, f32),
) -> Result<(f32, f32), ModelError> {
    let infinite = |spelling: &str| match spelling {
        "Infinity" | "inf" => Some(f32::INFINITY),
        "-Infinity" | "-inf" => Some(f32::NEG_INFINITY),
        _ => None,
    };
    let bound = |value: &serde_json::Value| match value {
        serde_json::Value::Number(number) => number.as_f64().map(|bound| bound as f32),
        serde_json::Value::String(spelling) => infinite(spelling),
        serde_json::Value::Object(object) => infinite(object.get("__float__")?.as_str()?),
        _ => None,
    };
    match config.key::<Vec<serde_json::Value>>("time_step_limit")? {
        None => Ok(default),
        Some(values) => match values.as_slice() {
            [min, max] => bound(min).zip(bound(max)).ok_or(()),
            _ => Err(()),
        }
        .map_err(|()| ModelError::Config {
            path: config.path.clone(),
            message: format!("time_step_limit {values:?} is not two numbers"),
        }),
    }
}

pub struct Mamba2 {
    in_proj: Linear,
    /// The depthwise convolution's weight as MLX's `conv1d` takes it, `[channels, kernel, 1]`.
    conv_weight: Array,
    conv_bias: Option<Array>,
    /// `-exp(A_log)` in float32: the decay rate per head.
    decay_rate: Array,
    /// The skip per head, float32.
    skip: Array,
    dt_bias: Array,
    norm_weight: Array,
    out_proj: Linear,
    spec: Mamba2Spec,
}

impl Mamba2 {
    /// `{prefix}.in_proj`, `conv1d`, `A_log`, `D`, `dt_bias`, `norm` and `out_proj`. The Hugging
    /// Face layout's conv1d weight (`[channels, 1, kernel]`) is moved to MLX's; a GGUF's shapes
    /// (conv1d `[channels, kernel]`, `D` `[heads, 1]`, the norm `[groups, width]`) are reshaped,
    /// and its `A` is already `-exp(A_log)`.
    pub fn load(
        weights: &mut Weights,
        config: &ModelConfig,
        prefix: &str,
        spec: Mamba2Spec,
    ) -> Result<Self, ModelError> {
        let (hidden, quant) = (config.hidden_size, config.quantization);
        let (inner, heads, channels) = (spec.inner(), spec.heads, spec.conv_channels());
        let linear = |weights: &mut Weights, name: &str, out: i32, input: i32| {
            Linear::load(
                weights,
                &format!("{prefix}.{name}"),
                out,
                input,
                spec.proj_bias,
                quant,
            )
        };
        let conv_name = format!("{prefix}.conv1d.weight");
        weights.convert(&conv_name, &conv_name, "moving conv1d's kernel axis", |w| {
            if w.shape() == [channels, 1, spec.conv_kernel] {
                w.swap_axes(1, 2)?.contiguous()
            } else if w.shape() == [channels, spec.conv_kernel] {
                w.reshape(&[channels, spec.conv_kernel, 1])
            } else {
                Ok(w.clone())
            }
        })?;
        let norm_name = format!("{prefix}.norm.weight");
        for (name, size) in [
            (format!("{prefix}.A"), heads),
            (format!("{prefix}.D"), heads),
            (norm_name.clone(), inner),
        ] {
            flatten(weights, &name, size)?;
        }
        let conv_bias = if spec.conv_bias {
            Some(weights.take_float(&format!("{prefix}.conv1d.bias"), &[channels])?)
        } else {
            None
        };
        let float32 = |weights: &mut Weights, name: &str| {
            let array = weights.take_float(&format!("{prefix}.{name}"), &[heads])?;
            array
                .as_dtype(Dtype::Float32)
                .map_err(|source| weights.mlx_error("widening a Mamba-2 parameter", source))
        };
        let decay_rate = if weights.contains(&format!("{prefix}.A_log")) {
            let a_log = float32(weights, "A_log")?;
            ops::exp(&a_log)
                .and_then(|a| ops::negative(&a))
                .map_err(|source| weights.mlx_error("computing the decay rate", source))?
        } else {
            float32(weights, "A")?
        };
        Ok(Self {
            in_proj: linear(weights, "in_proj", inner + channels + heads, hidden)?,
            conv_weight: weights.take_float(&conv_name, &[channels, spec.conv_kernel, 1])?,
            conv_bias,
            decay_rate,
            skip: float32(weights, "D")?,
            dt_bias: float32(weights, "dt_bias")?,
            norm_weight: weights.take_float(&norm_name, &[inner])?,
            out_proj: linear(weights, "out_proj", hidden, inner)?,
            spec,
        })
    }

    /// Elements of the layer's state ([`Mamba2Spec::state_shape`]).
    pub fn state_shape(&self) -> StateShape {
        self.spec.state_shape()
    }

    /// An empty cache of this layer's kind.
    pub fn new_cache(&self) -> KvCache {
        KvCache::recurrent()
    }

    /// `x` is `[1, positions, hidden]`: the new positions of several sequences one after the
    /// other, `lengths[i]` of them extending `caches[i]`. The projections run on all positions
    /// at once; the convolution and the scan on each sequence with its own state.
    pub fn forward(
        &self,
        x: &Array,
        lengths: &[i32],
        caches: &mut [&mut KvCache],
    ) -> Result<Array, Exception> {
        let inner = self.spec.inner();
        let parts = self
            .in_proj
            .forward(x)?
            .split_at_indices(&[inner, inner + self.spec.conv_channels()], -1)?;
        let (gate, conv_input, time_step) = (&parts[0], &parts[1], &parts[2]);
        let scanned = per_sequence(x.dim(1), lengths, caches, |cut, cache| {
            self.sequence(cut(conv_input), cut(time_step), cache)
        })?;
        self.out_proj.forward(&self.gated_norm(&scanned, gate)?)
    }

    /// One sequence's positions through its convolution and scan; returns
    /// `[1, positions, heads * head_dim]` before the gated norm.
    fn sequence(
        &self,
        input: Array,
        time_step: Array,
        cache: &mut KvCache,
    ) -> Result<Array, Exception> {
        let spec = &self.spec;
        let positions = input.dim(1);
        let dtype = input.dtype();
        let held = cache
            .recurrent_state()
            .ok_or_else(|| Exception::from("a Mamba-2 layer needs a recurrent cache"))?
            .clone();
        let keep = spec.conv_kernel - 1;
        let conv_state = match held.conv {
            Some(conv) => conv,
            None => zeros_dtype(&[1, keep, spec.conv_channels()], dtype)?,
        };
        let conv_input = ops::concatenate(&[conv_state, input], 1)?;
        let next_conv = conv_input
            .index((.., positions..positions + keep))
            .contiguous()?;
        let conv_out = ops::conv1d(
            &conv_input,
            &self.conv_weight,
            None,
            None,
            None,
            spec.conv_channels(),
        )?;
        let conv_out = match &self.conv_bias {
            Some(bias) => ops::add(&conv_out, bias)?,
            None => conv_out,
        };
        let conv_out = kernels::silu(&conv_out)?;
        let groups_width = spec.groups * spec.state_size;
        let parts = conv_out.split_at_indices(&[spec.inner(), spec.inner() + groups_width], -1)?;
        let values = parts[0].reshape(&[1, positions, spec.heads, spec.head_dim])?;
        // Each group's `B` and `C` serve its `heads / groups` consecutive heads.
        let per_head = |part: &Array| -> Result<Array, Exception> {
            let grouped = part
                .reshape(&[1, positions, spec.groups, spec.state_size])?
                .as_dtype(Dtype::Float32)?;
            ops::repeat_axis::<f32>(grouped, spec.heads / spec.groups, 2)
        };
        let (input_mix, output_mix) = (per_head(&parts[1])?, per_head(&parts[2])?);
        let limits = (
            Array::from_f32(spec.time_step_limit.0),
            Array::from_f32(spec.time_step_limit.1),
        );
        let step = ops::clip(
            &softplus(&ops::add(
                &time_step.as_dtype(Dtype::Float32)?,
                &self.dt_bias,
            )?)?,
            (&limits.0, &limits.1),
        )?;
        let log_decay = ops::multiply(&step, &self.decay_rate)?;
        let stepped = ops::multiply(&values.as_dtype(Dtype::Float32)?, &step.expand_dims(-1)?)?;
        let state = match held.delta {
            Some(state) => state,
            None => zeros_dtype(
                &[1, spec.heads, spec.head_dim, spec.state_size],
                Dtype::Float32,
            )?,
        };
        let recorded_at = cache.states_to_record(positions);
        let scan = Scan {
            log_decay: &log_decay,
            stepped: &stepped,
            input_mix: &input_mix,
            output_mix: &output_mix,
        };
        let (output, state, recorded) = scan.run(state, &recorded_at)?;
        for (&within, ssm) in recorded_at.iter().zip(recorded) {
            // `conv_input` starts with the `keep` inputs before this chunk.
            let conv = conv_input.index((.., within..within + keep)).contiguous()?;
            cache.record_state(
                within,
                RecurrentState {
                    conv: Some(conv),
                    delta: Some(ssm),
                },
            );
        }
        cache.advance_recurrent(
            RecurrentState {
                conv: Some(next_conv),
                delta: Some(state),
            },
            positions,
        )?;
        let skipped = ops::multiply(
            &values.as_dtype(Dtype::Float32)?,
            &self.skip.reshape(&[1, 1, -1, 1])?,
        )?;
        ops::add(&output, &skipped)?
            .as_dtype(dtype)?
            .reshape(&[1, positions, -1])
    }

    /// `y · silu(z)` RMS-normalized over each group's heads, times the norm's weight, in float32
    /// as transformers computes it.
    fn gated_norm(&self, y: &Array, gate: &Array) -> Result<Array, Exception> {
        let spec = &self.spec;
        let gated = ops::multiply(
            &y.as_dtype(Dtype::Float32)?,
            &kernels::silu(&gate.as_dtype(Dtype::Float32)?)?,
        )?;
        let shape = gated.shape().to_vec();
        let grouped = gated.reshape(&[shape[0], shape[1], spec.groups, -1])?;
        let normed = fast::rms_norm(&grouped, None, spec.eps)?.reshape(&shape)?;
        ops::multiply(&normed.as_dtype(y.dtype())?, &self.norm_weight)
    }
}

/// `name`, if present with `size` elements in another shape, as a vector.
fn flatten(weights: &mut Weights, name: &str, size: i32) -> Result<(), ModelError> {
    if !weights.contains(name) {
        return Ok(());
    }
    weights.convert(name, name, "flattening a GGUF's Mamba-2 tensor", |w| {
        if w.ndim() > 1 && w.size() == usize::try_from(size).unwrap_or(0) {
            w.reshape(&[size])
        } else {
            Ok(w.clone())
        }
    })
}

/// The most positions one chunk of the scan spans: its masks are `[heads, chunk, chunk]`.
const SCAN_CHUNK: i32 = 64;

/// One sequence's scan inputs, float32: `log_decay` (`dt · A`) `[1, positions, heads]`,
/// `stepped` (`dt · x`) `[1, positions, heads, head_dim]`, `input_mix` (`B`) and `output_mix`
/// (`C`) `[1, positions, heads, state_size]`.
struct Scan<'a> {
    log_decay: &'a Array,
    stepped: &'a Array,
    input_mix: &'a Array,
    output_mix: &'a Array,
}

impl Scan<'_> {
    /// The scan from `state` (`[1, heads, head_dim, state_size]`): returns the readouts
    /// `[1, positions, heads, head_dim]`, the final state, and the state after each count of
    /// positions in `record` (ascending, in `1..=positions`), where a chunk ends.
    fn run(
        &self,
        mut state: Array,
        record: &[i32],
    ) -> Result<(Array, Array, Vec<Array>), Exception> {
        let positions = self.stepped.dim(1);
        let ends: Vec<i32> = (1..=positions)
            .filter(|&end| end % SCAN_CHUNK == 0 || end == positions || record.contains(&end))
            .collect();
        let mut outputs = Vec::with_capacity(ends.len());
        let mut recorded = Vec::with_capacity(record.len());
        let mut start = 0;
        for end in ends {
            let (output, next) = self.chunk(&state, start, end)?;
            outputs.push(output);
            state = next;
            if record.contains(&end) {
                recorded.push(state.clone());
            }
            start = end;
        }
        let output = match outputs.as_slice() {
            [only] => only.clone(),
            _ => ops::concatenate(&outputs, 1)?,
        };
        Ok((output, state, recorded))
    }

    /// Positions `start..end` from `state`: `y_t = C_t · (e^{a_t} h) + Σ_{s≤t} e^{a_t − a_s}
    /// (C_t · B_s) dt_s x_s`, `a` the cumulative log decay, and the state after `end`,
    /// `e^{a_end} h + Σ_s e^{a_end − a_s} dt_s x_s ⊗ B_s`.
    fn chunk(&self, state: &Array, start: i32, end: i32) -> Result<(Array, Array), Exception> {
        let length = end - start;
        // Heads first: `[1, heads, length, ..]`.
        let cut = |array: &Array| array.index((.., start..end)).swap_axes(1, 2);
        let (stepped, input_mix, output_mix) = (
            cut(self.stepped)?,
            cut(self.input_mix)?,
            cut(self.output_mix)?,
        );
        let cumulative = ops::cumsum(cut(self.log_decay)?, -1, None, None)?;
        let gaps = ops::subtract(&cumulative.expand_dims(-1)?, &cumulative.expand_dims(-2)?)?;
        // Only `s ≤ t` decays; the rest would overflow before the mask.
        let causal = Array::tri::<bool>(length, None, None)?;
        let decays = ops::exp(&ops::select(
            &causal,
            &gaps,
            Array::from_f32(f32::NEG_INFINITY),
        )?)?;
        let mixed = ops::multiply(
            &ops::matmul(&output_mix, &input_mix.swap_axes(-1, -2)?)?,
            &decays,
        )?;
        let within = ops::matmul(&mixed, &stepped)?;
        let entering = ops::multiply(
            &ops::matmul(&output_mix, &state.swap_axes(-1, -2)?)?,
            &ops::exp(&cumulative)?.expand_dims(-1)?,
        )?;
        let output = ops::add(&within, &entering)?.swap_axes(1, 2)?;
        let last = cumulative.index((.., .., length - 1..length));
        let to_end = ops::exp(&ops::subtract(&last, &cumulative)?)?.expand_dims(-1)?;
        let written = ops::matmul(
            &ops::multiply(&stepped, &to_end)?.swap_axes(-1, -2)?,
            &input_mix,
        )?;
        let kept = ops::multiply(state, &ops::exp(&last)?.expand_dims(-1)?)?;
        Ok((output, ops::add(&kept, &written)?))
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use serde_json::json;

    use super::*;

    fn config(extra: serde_json::Value) -> ModelConfig {
        let mut value = json!({
            "model_type": "granitemoehybrid", "hidden_size": 64, "num_hidden_layers": 1,
            "num_attention_heads": 4, "vocab_size": 128, "rms_norm_eps": 1e-5,
        });
        for (key, entry) in extra.as_object().unwrap() {
            value[key] = entry.clone();
        }
        ModelConfig::from_json(value, Path::new("config.json")).unwrap()
    }

    #[test]
    fn time_step_limit_reads_transformers_5_infinity_and_defaults_when_absent() {
        let infinite = config(json!({"time_step_limit": [0.0, {"__float__": "Infinity"}]}));
        assert_eq!(
            time_step_limit(&infinite, (1.0, 2.0)).unwrap(),
            (0.0, f32::INFINITY)
        );
        let spelled = config(json!({"time_step_limit": [0.0, "Infinity"]}));
        assert_eq!(
            time_step_limit(&spelled, (1.0, 2.0)).unwrap(),
            (0.0, f32::INFINITY)
        );
        let finite = config(json!({"time_step_limit": [0.001, 100.0]}));
        assert_eq!(
            time_step_limit(&finite, (1.0, 2.0)).unwrap(),
            (0.001, 100.0)
        );
        assert_eq!(
            time_step_limit(&config(json!({})), (1.0, 2.0)).unwrap(),
            (1.0, 2.0)
        );
        let wrong = config(json!({"time_step_limit": [0.0]}));
        assert!(time_step_limit(&wrong, (1.0, 2.0)).is_err());
    }
}
