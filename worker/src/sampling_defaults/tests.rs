use std::collections::HashMap;
use std::path::PathBuf;

use super::*;
use crate::gguf::Value;

fn header(metadata: &[(&str, Value)]) -> GgufHeader {
    GgufHeader {
        path: PathBuf::from("/m/model.gguf"),
        metadata: metadata
            .iter()
            .map(|(key, value)| (key.to_string(), value.clone()))
            .collect::<HashMap<_, _>>(),
        tensors: Vec::new(),
        file_bytes: 0,
    }
}

fn generation_config(text: &str) -> (SamplingValues, Vec<String>) {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("generation_config.json"), text).unwrap();
    from_generation_config(dir.path())
}

#[test]
fn llama_cpp_sampling_keys_are_read_from_gguf_metadata() {
    let (values, warnings) = from_gguf(&header(&[
        ("general.sampling.temp", Value::Float(0.6)),
        ("general.sampling.top_p", Value::Float(0.95)),
        ("general.sampling.top_k", Value::Int(20)),
        ("general.sampling.min_p", Value::Float(0.0)),
        ("general.sampling.penalty_repeat", Value::Float(1.05)),
        ("general.sampling.mirostat", Value::Uint(0)),
    ]));
    assert_eq!(
        values,
        SamplingValues {
            temperature: Some(0.6),
            top_p: Some(0.95),
            top_k: Some(20),
            min_p: Some(0.0),
            repetition_penalty: Some(1.05),
            ..SamplingValues::default()
        }
    );
    assert!(warnings.is_empty(), "{warnings:?}");
}

#[test]
fn a_gguf_without_sampling_keys_states_nothing() {
    let (values, warnings) = from_gguf(&header(&[(
        "general.architecture",
        Value::String("llama".into()),
    )]));
    assert!(values.is_empty() && warnings.is_empty());
}

#[test]
fn an_impossible_gguf_value_is_dropped_with_a_warning_naming_the_file() {
    let (values, warnings) = from_gguf(&header(&[
        ("general.sampling.top_p", Value::Float(3.0)),
        ("general.sampling.temp", Value::Float(0.7)),
    ]));
    assert_eq!((values.top_p, values.temperature), (None, Some(0.7)));
    assert!(warnings[0].contains("/m/model.gguf"), "{warnings:?}");
}

#[test]
fn generation_config_sampling_fields_are_read() {
    let (values, warnings) = generation_config(
        r#"{"do_sample": true, "temperature": 0.6, "top_p": 0.95, "top_k": 20, "min_p": 0.05,
            "repetition_penalty": 1.05, "eos_token_id": [1, 2]}"#,
    );
    assert_eq!(
        values,
        SamplingValues {
            temperature: Some(0.6),
            top_p: Some(0.95),
            top_k: Some(20),
            min_p: Some(0.05),
            repetition_penalty: Some(1.05),
            ..SamplingValues::default()
        }
    );
    assert!(warnings.is_empty(), "{warnings:?}");
}

#[test]
fn do_sample_false_means_greedy() {
    let (values, _) = generation_config(
        r#"{"do_sample": false, "temperature": 0.6, "top_p": 0.9, "repetition_penalty": 1.1}"#,
    );
    assert_eq!(
        values,
        SamplingValues {
            temperature: Some(0.0),
            repetition_penalty: Some(1.1),
            ..SamplingValues::default()
        }
    );
}

#[test]
fn a_negative_top_k_is_off() {
    let (values, _) = generation_config(r#"{"top_k": -1}"#);
    assert_eq!(values.top_k, Some(0));
}

#[test]
fn no_generation_config_states_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let (values, warnings) = from_generation_config(dir.path());
    assert!(values.is_empty() && warnings.is_empty());
}

#[test]
fn a_malformed_generation_config_is_a_warning_naming_it() {
    let (values, warnings) = generation_config("{ \"temperature\": ");
    assert!(values.is_empty());
    assert_eq!(warnings.len(), 1);
    assert!(
        warnings[0].contains("generation_config.json"),
        "{warnings:?}"
    );
}
