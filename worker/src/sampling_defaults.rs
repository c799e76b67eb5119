//! The sampling a model's own files recommend, for `describe` to report: llama.cpp's
//! `general.sampling.*` GGUF metadata and Hugging Face's `generation_config.json`. The
//! supervisor layers them under its own configuration and applies them to what a request leaves
//! out; nothing here is applied in the worker.
//!
//! A value the worker could not sample with is dropped with a warning, and an unreadable
//! `generation_config.json` is a warning naming it: a model is never unservable for either.

use std::path::Path;

use corral_ipc::SamplingValues;
use serde::Deserialize;

use crate::gguf::GgufHeader;
use crate::model_json::read_optional;

const GENERATION_CONFIG: &str = "generation_config.json";

/// llama.cpp's keys (gguf-py's `Keys.General.SAMPLING_*`); the others it defines (mirostat,
/// XTC, the sampler sequence) have no counterpart in corral's sampler.
const GGUF_TEMPERATURE: &str = "general.sampling.temp";
const GGUF_TOP_P: &str = "general.sampling.top_p";
const GGUF_TOP_K: &str = "general.sampling.top_k";
const GGUF_MIN_P: &str = "general.sampling.min_p";
const GGUF_REPETITION_PENALTY: &str = "general.sampling.penalty_repeat";

/// The defaults a GGUF's metadata states, and a warning per value dropped.
pub fn from_gguf(header: &GgufHeader) -> (SamplingValues, Vec<String>) {
    let float = |key| {
        header
            .get(key)
            .and_then(|value| value.as_f64())
            .map(|v| v as f32)
    };
    let values = SamplingValues {
        temperature: float(GGUF_TEMPERATURE),
        top_p: float(GGUF_TOP_P),
        top_k: header
            .get(GGUF_TOP_K)
            .and_then(|value| value.as_u64())
            .map(|k| u32::try_from(k).unwrap_or(u32::MAX)),
        min_p: float(GGUF_MIN_P),
        repetition_penalty: float(GGUF_REPETITION_PENALTY),
        ..SamplingValues::default()
    };
    let (values, problems) = values.without_invalid();
    let warnings = problems
        .into_iter()
        .map(|problem| {
            format!(
                "{}: general.sampling: {problem}; ignored",
                header.path.display()
            )
        })
        .collect();
    (values, warnings)
}

#[derive(Debug, Deserialize)]
struct GenerationConfig {
    do_sample: Option<bool>,
    temperature: Option<f32>,
    top_p: Option<f32>,
    top_k: Option<i64>,
    min_p: Option<f32>,
    repetition_penalty: Option<f32>,
}

/// The defaults `generation_config.json` in `dir` states (none without the file), and the
/// warnings about it.
pub fn from_generation_config(dir: &Path) -> (SamplingValues, Vec<String>) {
    let path = dir.join(GENERATION_CONFIG);
    let config = match read_optional::<GenerationConfig>(&path) {
        Ok(Some(config)) => config,
        Ok(None) => return (SamplingValues::default(), Vec::new()),
        Err(error) => {
            return (
                SamplingValues::default(),
                vec![format!("{error}; its sampling defaults are ignored")],
            );
        }
    };
    let values = if config.do_sample == Some(false) {
        // Transformers decodes greedily then, whatever the filters say.
        SamplingValues {
            temperature: Some(0.0),
            repetition_penalty: config.repetition_penalty,
            ..SamplingValues::default()
        }
    } else {
        SamplingValues {
            temperature: config.temperature,
            top_p: config.top_p,
            // Transformers reads 0 as off, as corral does; a negative one means off as well.
            top_k: config.top_k.map(|k| u32::try_from(k).unwrap_or(0)),
            min_p: config.min_p,
            repetition_penalty: config.repetition_penalty,
            ..SamplingValues::default()
        }
    };
    let (values, problems) = values.without_invalid();
    let warnings = problems
        .into_iter()
        .map(|problem| format!("{}: {problem}; ignored", path.display()))
        .collect();
    (values, warnings)
}

#[cfg(test)]
mod tests;
