use std::collections::HashMap;

use tokenizers::models::wordlevel::WordLevel;

use super::*;

/// Ids: `<unk>` 0, `<|end_of_text|>` 1, `<|eot_id|>` 2, `<|im_end|>` 3, `hello` 4.
fn tokenizer() -> Tokenizer {
    let vocab: HashMap<String, u32> = [
        "<unk>",
        "<|end_of_text|>",
        "<|eot_id|>",
        "<|im_end|>",
        "hello",
    ]
    .iter()
    .enumerate()
    .map(|(id, t)| (t.to_string(), id as u32))
    .collect();
    let model = WordLevel::builder()
        .vocab(vocab.into_iter().collect())
        .unk_token("<unk>".into())
        .build()
        .expect("valid WordLevel");
    Tokenizer::new(model)
}

fn model_dir(files: &[(&str, &str)]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("temp dir");
    for (name, text) in files {
        std::fs::write(dir.path().join(name), text).expect("temp dir is writable");
    }
    dir
}

fn ids(files: &[(&str, &str)]) -> Vec<u32> {
    let dir = model_dir(files);
    eos_token_ids(dir.path(), &tokenizer())
        .expect("readable model dir")
        .into_iter()
        .collect()
}

#[test]
fn eos_ids_are_the_union_of_all_three_files() {
    let got = ids(&[
        ("config.json", r#"{"eos_token_id": 1, "hidden_size": 8}"#),
        ("generation_config.json", r#"{"eos_token_id": [1, 2]}"#),
        ("tokenizer_config.json", r#"{"eos_token": "<|im_end|>"}"#),
    ]);
    assert_eq!(got, [1, 2, 3]);
}

#[test]
fn eos_token_may_be_an_added_token_object() {
    let got = ids(&[(
        "tokenizer_config.json",
        r#"{"eos_token": {"__type": "AddedToken", "content": "<|eot_id|>"}}"#,
    )]);
    assert_eq!(got, [2]);
}

#[test]
fn missing_files_and_null_ids_are_fine() {
    assert!(ids(&[]).is_empty());
    assert_eq!(
        ids(&[("config.json", r#"{"eos_token_id": null}"#)]),
        Vec::<u32>::new()
    );
    assert_eq!(
        ids(&[("config.json", r#"{"eos_token_id": [7, 9]}"#)]),
        [7, 9]
    );
}

#[test]
fn a_vision_model_text_config_counts() {
    let got = ids(&[(
        "config.json",
        r#"{"text_config": {"eos_token_id": [1, 3]}}"#,
    )]);
    assert_eq!(got, [1, 3]);
}

#[test]
fn an_eos_token_outside_the_vocabulary_is_ignored() {
    assert!(ids(&[("tokenizer_config.json", r#"{"eos_token": "</nope>"}"#)]).is_empty());
}

#[test]
fn a_malformed_file_is_an_error_naming_it() {
    let dir = model_dir(&[("generation_config.json", r#"{"eos_token_id": "two"}"#)]);
    let err = eos_token_ids(dir.path(), &tokenizer()).unwrap_err();
    assert!(err.to_string().contains("generation_config.json"), "{err}");
}
