//! Which token ids end a generation, and the sampling defaults a model ships with.
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

/// The sampling settings of `generation_config.json`, for requests that leave them out.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct GenerationDefaults {
    pub temperature: Option<f32>,
    pub top_p: Option<f32>,
    /// 0 (off) where the file says 0 or a negative number.
    pub top_k: Option<usize>,
    pub repetition_penalty: Option<f32>,
    /// `false` means the model's authors intend greedy decoding.
    pub do_sample: Option<bool>,
}

#[derive(Debug, Deserialize)]
struct RawDefaults {
    temperature: Option<f32>,
    top_p: Option<f32>,
    top_k: Option<i64>,
    repetition_penalty: Option<f32>,
    do_sample: Option<bool>,
}

/// Reads the defaults; a model without `generation_config.json` simply has none.
pub fn generation_defaults(model_dir: &Path) -> Result<GenerationDefaults, JsonFileError> {
    let Some(raw) = read_optional::<RawDefaults>(&model_dir.join(GENERATION_CONFIG))? else {
        return Ok(GenerationDefaults::default());
    };
    Ok(GenerationDefaults {
        temperature: raw.temperature,
        top_p: raw.top_p,
        top_k: raw.top_k.map(|k| usize::try_from(k).unwrap_or(0)),
        repetition_penalty: raw.repetition_penalty,
        do_sample: raw.do_sample,
    })
}

#[cfg(test)]
mod tests;
