//! Reading the JSON side files of a Hugging Face model directory.
//!
//! The chat template and the stop tokens each need a few fields of `tokenizer_config.json`,
//! `config.json` and `generation_config.json`. One reader gives them all the same rules: a
//! missing file is `None` (callers decide whether that is fine), an unreadable or malformed one
//! is an error naming the file. Only the fields the worker uses are typed; the rest is ignored.

use std::io;
use std::path::{Path, PathBuf};

use serde::Deserialize;
use serde::de::DeserializeOwned;

#[derive(Debug, thiserror::Error)]
pub enum JsonFileError {
    #[error("cannot read {path}")]
    Read {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("{path} is not valid JSON of the expected shape")]
    Parse {
        path: PathBuf,
        #[source]
        source: serde_json::Error,
    },
}

/// Parses `path` as `T`, or `None` when the file does not exist.
pub fn read_optional<T: DeserializeOwned>(path: &Path) -> Result<Option<T>, JsonFileError> {
    let text = match std::fs::read_to_string(path) {
        Ok(text) => text,
        Err(err) if err.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(source) => {
            return Err(JsonFileError::Read {
                path: path.to_owned(),
                source,
            });
        }
    };
    serde_json::from_str(&text)
        .map(Some)
        .map_err(|source| JsonFileError::Parse {
            path: path.to_owned(),
            source,
        })
}

/// The fields of `tokenizer_config.json` the worker uses.
#[derive(Debug, Default, Deserialize)]
pub struct TokenizerConfig {
    pub chat_template: Option<ChatTemplateField>,
    pub bos_token: Option<SpecialToken>,
    pub eos_token: Option<SpecialToken>,
}

impl TokenizerConfig {
    pub const FILE: &str = "tokenizer_config.json";
}

/// `chat_template` is one template, or (older multi-template models) a list of named ones.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub enum ChatTemplateField {
    Single(String),
    Named(Vec<NamedTemplate>),
}

#[derive(Debug, Deserialize)]
pub struct NamedTemplate {
    pub name: String,
    pub template: String,
}

/// A special token is written as its text, or as a serialized `AddedToken` object.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub enum SpecialToken {
    Text(String),
    Added { content: String },
}

impl SpecialToken {
    pub fn text(&self) -> &str {
        match self {
            SpecialToken::Text(text) | SpecialToken::Added { content: text } => text,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
        let path = dir.join(name);
        std::fs::write(&path, text).expect("temp dir is writable");
        path
    }

    #[test]
    fn a_missing_file_is_none() {
        let dir = tempfile::tempdir().unwrap();
        let got: Option<TokenizerConfig> = read_optional(&dir.path().join("absent.json")).unwrap();
        assert!(got.is_none());
    }

    #[test]
    fn malformed_json_is_an_error_naming_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = write(dir.path(), "tokenizer_config.json", "{ not json");
        let err = read_optional::<TokenizerConfig>(&path).unwrap_err();
        assert!(matches!(err, JsonFileError::Parse { .. }));
        assert!(err.to_string().contains("tokenizer_config.json"), "{err}");
    }

    #[test]
    fn special_tokens_are_read_in_both_shapes() {
        let dir = tempfile::tempdir().unwrap();
        let path = write(
            dir.path(),
            "tokenizer_config.json",
            r#"{"bos_token": "<s>", "eos_token": {"__type": "AddedToken", "content": "</s>",
                "lstrip": false}, "unk_token": null, "model_max_length": 4096}"#,
        );
        let config: TokenizerConfig = read_optional(&path).unwrap().unwrap();
        assert_eq!(
            config.bos_token.as_ref().map(SpecialToken::text),
            Some("<s>")
        );
        assert_eq!(
            config.eos_token.as_ref().map(SpecialToken::text),
            Some("</s>")
        );
        assert!(config.chat_template.is_none());
    }

    #[test]
    fn null_special_tokens_are_absent() {
        let dir = tempfile::tempdir().unwrap();
        let path = write(
            dir.path(),
            "t.json",
            r#"{"bos_token": null, "chat_template": null}"#,
        );
        let config: TokenizerConfig = read_optional(&path).unwrap().unwrap();
        assert!(config.bos_token.is_none() && config.chat_template.is_none());
    }
}
