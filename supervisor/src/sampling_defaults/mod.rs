//! Per-model sampling defaults: what a request leaves out is taken, field by field, from the
//! first source that states it: the model's `[models.ID]` configuration, its Ollama params
//! layer, its GGUF `general.sampling.*` metadata, its `generation_config.json`, and last
//! corral's own defaults (OpenAI's: temperature 1, every filter and penalty off).
//!
//! Agent CLIs and curl send no sampling parameters, and model authors publish the settings their
//! model needs; a blanket temperature 1 makes small models ramble. The defaults are applied in
//! one place, where dispatch knows the model, so every API gets them alike; each field keeps its
//! source so `GET /v1/models/status` can say where a value came from.

mod tool_choice;

use corral_ipc::{GenerateRequest, SamplingValues};
use serde::Serialize;

use crate::config::ModelSettings;
use crate::registry::ModelEntry;

pub use tool_choice::apply_tool_choice;

/// Used when neither the client nor any source of the model sets `max_tokens`.
pub const DEFAULT_MAX_TOKENS: u32 = 512;

/// Where a default came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum Source {
    /// `[models.ID]` in corral's configuration.
    #[serde(rename = "config")]
    Config,
    /// The params layer of the model's Ollama manifest.
    #[serde(rename = "ollama")]
    Ollama,
    /// The GGUF's `general.sampling.*` metadata.
    #[serde(rename = "gguf")]
    Gguf,
    #[serde(rename = "generation_config.json")]
    GenerationConfig,
    /// corral's own.
    #[serde(rename = "default")]
    Default,
}

/// A value and where it came from.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Sourced<T> {
    pub value: T,
    pub source: Source,
}

/// A model's effective defaults, every field resolved.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SamplingDefaults {
    pub temperature: Sourced<f32>,
    pub top_p: Sourced<f32>,
    pub top_k: Sourced<u32>,
    pub min_p: Sourced<f32>,
    pub repetition_penalty: Sourced<f32>,
    pub presence_penalty: Sourced<f32>,
    pub frequency_penalty: Sourced<f32>,
    pub max_tokens: Sourced<u32>,
    pub stop: Sourced<Vec<String>>,
}

impl SamplingDefaults {
    /// The defaults of `entry`, whose `[models.ID]` settings are `settings`.
    pub fn for_model(settings: Option<&ModelSettings>, entry: &ModelEntry) -> Self {
        let config = settings.map(ModelSettings::sampling).unwrap_or_default();
        let none = SamplingValues::default();
        let description = entry.description.as_ref();
        Self::resolve(&[
            (Source::Config, &config),
            (Source::Ollama, &entry.ollama_params),
            (
                Source::Gguf,
                description.map_or(&none, |d| &d.gguf_sampling),
            ),
            (
                Source::GenerationConfig,
                description.map_or(&none, |d| &d.generation_config),
            ),
        ])
    }

    /// Each field from the first of `layers` that states it, else corral's default.
    pub fn resolve(layers: &[(Source, &SamplingValues)]) -> Self {
        let pick =
            |field: fn(&SamplingValues) -> Option<f32>, default: f32| first(layers, field, default);
        Self {
            temperature: pick(|v| v.temperature, 1.0),
            top_p: pick(|v| v.top_p, 1.0),
            top_k: first(layers, |v| v.top_k, 0),
            min_p: pick(|v| v.min_p, 0.0),
            repetition_penalty: pick(|v| v.repetition_penalty, 1.0),
            presence_penalty: pick(|v| v.presence_penalty, 0.0),
            frequency_penalty: pick(|v| v.frequency_penalty, 0.0),
            max_tokens: first(layers, |v| v.max_tokens, DEFAULT_MAX_TOKENS),
            stop: first(layers, |v| v.stop.clone(), Vec::new()),
        }
    }

    /// Fills in every sampling field `request` leaves out; the request's own values win.
    pub fn apply(&self, request: &mut GenerateRequest) {
        fill(&mut request.temperature, &self.temperature);
        fill(&mut request.top_p, &self.top_p);
        fill(&mut request.top_k, &self.top_k);
        fill(&mut request.min_p, &self.min_p);
        fill(&mut request.repetition_penalty, &self.repetition_penalty);
        fill(&mut request.presence_penalty, &self.presence_penalty);
        fill(&mut request.frequency_penalty, &self.frequency_penalty);
        fill(&mut request.max_tokens, &self.max_tokens);
        fill(&mut request.stop, &self.stop);
    }
}

fn first<T>(
    layers: &[(Source, &SamplingValues)],
    field: impl Fn(&SamplingValues) -> Option<T>,
    default: T,
) -> Sourced<T> {
    layers
        .iter()
        .find_map(|(source, values)| {
            field(values).map(|value| Sourced {
                value,
                source: *source,
            })
        })
        .unwrap_or(Sourced {
            value: default,
            source: Source::Default,
        })
}

fn fill<T: Clone>(field: &mut Option<T>, default: &Sourced<T>) {
    if field.is_none() {
        *field = Some(default.value.clone());
    }
}

#[cfg(test)]
mod tests;
