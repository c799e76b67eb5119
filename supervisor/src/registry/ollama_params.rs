//! An Ollama model's params layer: a small JSON object of the llama.cpp options its Modelfile
//! sets (`PARAMETER temperature 0.6`), for corral's sampling defaults. Options corral has no
//! counterpart for (`num_ctx`, `mirostat`, ...) are skipped; a blob that cannot be read or is
//! not such an object is a warning naming it, and the model keeps no defaults from it.

use std::path::Path;

use corral_ipc::SamplingValues;
use serde::Deserialize;

/// Params blobs are a few hundred bytes; a larger file is not one.
const MAX_PARAMS_BYTES: u64 = 1 << 20;

#[derive(Debug, Deserialize)]
struct Params {
    temperature: Option<f32>,
    top_p: Option<f32>,
    top_k: Option<i64>,
    min_p: Option<f32>,
    repeat_penalty: Option<f32>,
    presence_penalty: Option<f32>,
    frequency_penalty: Option<f32>,
    /// Negative means "until the context is full" in Ollama: no default length then.
    num_predict: Option<i64>,
    stop: Option<Stop>,
}

/// Ollama writes a list; a hand-made blob may hold one string.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum Stop {
    One(String),
    Many(Vec<String>),
}

/// The sampling defaults in the params blob at `path`, for the model `model`.
pub(super) fn read(path: &Path, model: &str) -> SamplingValues {
    let params = match load(path) {
        Ok(params) => params,
        Err(problem) => {
            tracing::warn!(model, path = %path.display(), %problem, "cannot read an Ollama params layer; its sampling defaults are ignored");
            return SamplingValues::default();
        }
    };
    let (values, problems) = values(params).without_invalid();
    for problem in problems {
        tracing::warn!(model, path = %path.display(), %problem, "an Ollama params value is ignored");
    }
    values
}

fn load(path: &Path) -> Result<Params, String> {
    let size = std::fs::metadata(path)
        .map_err(|error| error.to_string())?
        .len();
    if size > MAX_PARAMS_BYTES {
        return Err(format!("larger than {MAX_PARAMS_BYTES} bytes"));
    }
    let text = std::fs::read(path).map_err(|error| error.to_string())?;
    serde_json::from_slice(&text).map_err(|error| error.to_string())
}

fn values(params: Params) -> SamplingValues {
    SamplingValues {
        temperature: params.temperature,
        top_p: params.top_p,
        // llama.cpp reads 0 or less as off, as corral reads 0.
        top_k: params.top_k.map(|k| u32::try_from(k).unwrap_or(0)),
        min_p: params.min_p,
        repetition_penalty: params.repeat_penalty,
        presence_penalty: params.presence_penalty,
        frequency_penalty: params.frequency_penalty,
        max_tokens: params
            .num_predict
            .and_then(|n| u32::try_from(n).ok())
            .filter(|&n| n > 0),
        stop: params.stop.map(|stop| match stop {
            Stop::One(one) => vec![one],
            Stop::Many(many) => many,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> SamplingValues {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sha256-params");
        std::fs::write(&path, text).unwrap();
        read(&path, "m:latest")
    }

    #[test]
    fn ollamas_option_names_become_corrals_fields() {
        let values = parse(
            r#"{"temperature": 0.6, "top_p": 0.95, "top_k": 20, "min_p": 0, "repeat_penalty": 1.1,
                "presence_penalty": 1.5, "frequency_penalty": 0.2, "num_predict": 128,
                "num_ctx": 8192, "stop": ["<|im_start|>", "<|im_end|>"]}"#,
        );
        assert_eq!(
            values,
            SamplingValues {
                temperature: Some(0.6),
                top_p: Some(0.95),
                top_k: Some(20),
                min_p: Some(0.0),
                repetition_penalty: Some(1.1),
                presence_penalty: Some(1.5),
                frequency_penalty: Some(0.2),
                max_tokens: Some(128),
                stop: Some(vec!["<|im_start|>".into(), "<|im_end|>".into()]),
            }
        );
    }

    #[test]
    fn a_negative_num_predict_sets_no_length_and_a_lone_stop_string_is_a_list() {
        let values = parse(r#"{"num_predict": -1, "stop": "</s>", "top_k": -1}"#);
        assert_eq!(values.max_tokens, None);
        assert_eq!(values.stop, Some(vec!["</s>".to_owned()]));
        assert_eq!(values.top_k, Some(0));
    }

    #[test]
    fn a_malformed_blob_or_a_bad_value_loses_only_what_is_wrong() {
        assert!(parse("not json").is_empty());
        assert!(parse(r#"{"temperature": "hot"}"#).is_empty());
        let values = parse(r#"{"top_p": 7, "temperature": 0.2}"#);
        assert_eq!((values.top_p, values.temperature), (None, Some(0.2)));
    }

    #[test]
    fn a_missing_blob_gives_no_defaults() {
        assert!(read(Path::new("/nonexistent/sha256-params"), "m:latest").is_empty());
    }
}
