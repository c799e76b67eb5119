//! Which token ids end a generation.
//!
//! Models declare their end-of-sequence tokens in up to three places that often disagree:
//! Llama 3 Instruct names `<|end_of_text|>` in `config.json` but ends its turns with `<|eot_id|>`,
//! listed only in `generation_config.json`; ChatML models name `<|im_end|>` as `eos_token` in
//! `tokenizer_config.json`. Generation must stop at any of them, so the answer is the union.
//! Vision-language models keep the text model's settings under `text_config`, which counts too.

use std::collections::BTreeSet;
use std::path::Path;

use serde::Deserialize;
use tokenizers::Tokenizer;

use crate::model_json::{JsonFileError, TokenizerConfig, read_optional};

const CONFIG: &str = "config.json";
const GENERATION_CONFIG: &str = "generation_config.json";

/// `eos_token_id` is one id or a list of them (or null).
#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum TokenIds {
    One(u32),
    Many(Vec<u32>),
}

#[derive(Debug, Default, Deserialize)]
struct DeclaresEos {
    eos_token_id: Option<TokenIds>,
    text_config: Option<Box<DeclaresEos>>,
}

impl DeclaresEos {
    fn add_to(&self, ids: &mut BTreeSet<u32>) {
        match &self.eos_token_id {
            None => {}
            Some(TokenIds::One(id)) => {
                ids.insert(*id);
            }
            Some(TokenIds::Many(many)) => ids.extend(many),
        }
        if let Some(text) = &self.text_config {
            text.add_to(ids);
        }
    }
}

/// Every id that ends generation for the model in `model_dir`. Any of the three files may be
/// missing; an empty set means the model declares none and only `max_tokens` will stop it.
pub fn eos_token_ids(
    model_dir: &Path,
    tokenizer: &Tokenizer,
) -> Result<BTreeSet<u32>, JsonFileError> {
    let mut ids = BTreeSet::new();
    for file in [CONFIG, GENERATION_CONFIG] {
        if let Some(declared) = read_optional::<DeclaresEos>(&model_dir.join(file))? {
            declared.add_to(&mut ids);
        }
    }
    let config: Option<TokenizerConfig> = read_optional(&model_dir.join(TokenizerConfig::FILE))?;
    // A token text the vocabulary lacks cannot be generated, so there is nothing to stop on.
    if let Some(id) = config
        .as_ref()
        .and_then(|c| c.eos_token.as_ref())
        .and_then(|token| tokenizer.token_to_id(token.text()))
    {
        ids.insert(id);
    }
    Ok(ids)
}

#[cfg(test)]
mod tests;
