//! The sentence-transformers files read from directories written here, and the role each
//! layout gives a model.

use super::*;

fn write(dir: &Path, name: &str, text: &str) {
    let path = dir.join(name);
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent).unwrap();
    }
    std::fs::write(path, text).unwrap();
}

const MODULES: &str = r#"[
    {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
    {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
    {"idx": 2, "name": "2", "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"}
]"#;

#[test]
fn sentence_transformers_layout_gives_pooling_normalization_and_length() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "modules.json", MODULES);
    write(
        dir.path(),
        "1_Pooling/config.json",
        r#"{"pooling_mode_mean_tokens": true}"#,
    );
    write(
        dir.path(),
        "sentence_bert_config.json",
        r#"{"max_seq_length": 256}"#,
    );
    let layout = Layout::read(dir.path(), Pooling::Cls).unwrap();
    assert_eq!(layout.pooling, Pooling::Mean);
    assert!(layout.normalize);
    assert_eq!(layout.max_seq_length, Some(256));
    assert!(!layout.matryoshka);
}

#[test]
fn last_token_pooling_prompts_and_matryoshka_are_read() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "modules.json", MODULES);
    write(
        dir.path(),
        "1_Pooling/config.json",
        r#"{"pooling_mode_lasttoken": true}"#,
    );
    write(
        dir.path(),
        "config_sentence_transformers.json",
        r#"{"prompts": {"query": "Instruct: find\nQuery:", "document": ""}, "matryoshka_dimensions": [64, 128]}"#,
    );
    let layout = Layout::read(dir.path(), Pooling::Mean).unwrap();
    assert_eq!(layout.pooling, Pooling::LastToken);
    assert_eq!(layout.prompt(Some("query")), Ok("Instruct: find\nQuery:"));
    assert_eq!(layout.prompt(Some("document")), Ok(""));
    assert_eq!(layout.prompt(None), Ok(""));
    let unknown = layout.prompt(Some("passage")).unwrap_err();
    assert!(unknown.contains("document, query"), "{unknown}");
    assert!(layout.matryoshka);
}

#[test]
fn model_card_tag_marks_matryoshka_training() {
    let dir = tempfile::tempdir().unwrap();
    write(
        dir.path(),
        "README.md",
        "---\ntags:\n- sentence-transformers\n- loss:MatryoshkaLoss\n---\n# A model\n",
    );
    assert!(Layout::read(dir.path(), Pooling::Mean).unwrap().matryoshka);
}

#[test]
fn max_pooling_is_refused_with_its_path() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "modules.json", MODULES);
    write(
        dir.path(),
        "1_Pooling/config.json",
        r#"{"pooling_mode_max_tokens": true}"#,
    );
    let error = Layout::read(dir.path(), Pooling::Mean).unwrap_err();
    assert!(error.to_string().contains("1_Pooling"), "{error}");
}

#[test]
fn roles_follow_architecture_model_type_and_name() {
    let dir = tempfile::tempdir().unwrap();
    let head = |model_type: &str, architecture: &str| ConfigHead {
        model_type: Some(model_type.into()),
        architectures: vec![architecture.into()],
    };
    let path = dir.path();
    assert_eq!(
        role(path, &head("bert", "BertModel"), false),
        Role::EncoderEmbedding
    );
    assert_eq!(
        role(
            path,
            &head("xlm-roberta", "XLMRobertaForSequenceClassification"),
            false
        ),
        Role::CrossEncoder
    );
    assert_eq!(
        role(path, &head("qwen3", "Qwen3ForCausalLM"), true),
        Role::Chat
    );
    let reranker = path.join("Qwen3-Reranker-0.6B");
    std::fs::create_dir(&reranker).unwrap();
    assert_eq!(
        role(&reranker, &head("qwen3", "Qwen3ForCausalLM"), true),
        Role::DecoderReranker
    );
    write(path, "modules.json", MODULES);
    assert_eq!(
        role(path, &head("qwen3", "Qwen3ForCausalLM"), true),
        Role::DecoderEmbedding
    );
}
