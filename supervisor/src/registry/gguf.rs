//! The models in a folder's `.gguf` files, and their ids.
//!
//! One model file in a folder is served under the folder's id (`org/name`); several are
//! `org/name:QUANT`, the quantization tag that ends each file name (`…-Q4_K_M.gguf` → `Q4_K_M`,
//! the scheme llama.cpp's `-hf org/name:Q4_K_M` and Ollama's `hf.co/...:Q4_K_M` use), or
//! `org/name:<file stem>` when the names do not end in distinct tags. Files of a split GGUF
//! (`…-00001-of-00003.gguf`) are one model, listed by its first part, from which the worker reads
//! the others; an `mmproj*.gguf` beside the models is their vision projector, which their
//! workers load with them.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use super::{Kind, ModelEntry, Source, broken_link, children, kind_of};

/// One model among a folder's `.gguf` files.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct GgufFile {
    /// The file name without `.gguf` and without a split suffix.
    pub stem: String,
    /// The file, or the first part of a split model.
    pub path: PathBuf,
    /// The link target, when the file is a broken symbolic link.
    pub broken: Option<PathBuf>,
}

/// The GGUF models directly in `folder` (not in subfolders), and the projector file if any.
#[derive(Debug, Default)]
pub(super) struct GgufFolder {
    pub models: Vec<GgufFile>,
    pub projector: Option<PathBuf>,
}

impl GgufFolder {
    pub fn read(folder: &Path) -> Self {
        let mut found = GgufFolder::default();
        for path in children(folder, "a model folder") {
            let Some(stem) = gguf_stem(&path) else {
                continue;
            };
            let broken = match kind_of(&path) {
                Kind::File => None,
                Kind::BrokenLink(target) => Some(target),
                Kind::Dir | Kind::Other => continue,
            };
            if stem.to_ascii_lowercase().starts_with("mmproj") {
                found.projector = Some(path);
                continue;
            }
            let stem = match split_part(&stem) {
                // Later parts are covered by the first.
                Some((_, part, _)) if part != 1 => continue,
                Some((base, _, _)) => base.to_owned(),
                None => stem,
            };
            found.models.push(GgufFile { stem, path, broken });
        }
        found
    }

    /// One entry per model, named `base` when there is one, else `base:TAG` (see the module doc).
    pub fn entries(&self, base: &str, source: Source) -> Vec<ModelEntry> {
        if let [only] = self.models.as_slice() {
            return vec![self.entry(only, base.to_owned(), source)];
        }
        let tags = distinct_tags(&self.models);
        self.models
            .iter()
            .zip(tags)
            .map(|(file, tag)| self.entry(file, format!("{base}:{tag}"), source))
            .collect()
    }

    /// The entry for `file` under `id` with the folder's projector, unservable when discovery
    /// can already tell.
    pub fn entry(&self, file: &GgufFile, id: String, source: Source) -> ModelEntry {
        if let Some(target) = &file.broken {
            return broken_link(id, &file.path, target, source);
        }
        ModelEntry {
            projector: self.projector.clone(),
            ..ModelEntry::new(id, &file.path, source)
        }
    }
}

/// Each file's quantization tag when every file has one and they differ, else each file's stem.
fn distinct_tags(files: &[GgufFile]) -> Vec<String> {
    let tags: Option<Vec<String>> = files.iter().map(|file| quant_tag(&file.stem)).collect();
    if let Some(tags) = tags
        && tags.iter().collect::<BTreeSet<_>>().len() == tags.len()
    {
        return tags;
    }
    files.iter().map(|file| file.stem.clone()).collect()
}

/// The file's stem if its name ends in `.gguf` (any case) and is not hidden.
pub(super) fn gguf_stem(path: &Path) -> Option<String> {
    let name = super::name_of(path)?;
    let dot = name.len().checked_sub(".gguf".len())?;
    (name.is_char_boundary(dot) && name[dot..].eq_ignore_ascii_case(".gguf") && dot > 0)
        .then(|| name[..dot].to_owned())
}

/// `(base, part, parts)` of a split GGUF's stem: `model-00002-of-00003` → `("model", 2, 3)`.
fn split_part(stem: &str) -> Option<(&str, u32, u32)> {
    let (rest, parts) = stem.rsplit_once("-of-")?;
    let (base, part) = rest.rsplit_once('-')?;
    let number = |digits: &str| {
        (digits.len() == 5 && digits.bytes().all(|b| b.is_ascii_digit()))
            .then(|| digits.parse::<u32>().ok())
            .flatten()
    };
    Some((base, number(part)?, number(parts)?))
}

/// The quantization tag that ends a GGUF file's stem, upper-cased: `Q4_K_M`, `IQ3_XXS`, `Q8_0`,
/// `F16`, `BF16`.
pub(super) fn quant_tag(stem: &str) -> Option<String> {
    let last = stem.rsplit(['.', '-']).next()?.to_ascii_uppercase();
    let quantized = ["Q", "IQ", "TQ"].iter().any(|prefix| {
        last.strip_prefix(prefix).is_some_and(|rest| {
            rest.starts_with(|c: char| c.is_ascii_digit())
                && rest.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
        })
    });
    let float = ["F16", "F32", "BF16", "FP16", "FP32"].contains(&last.as_str());
    (quantized || float).then_some(last)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantization_tags_are_read_from_the_end_of_the_file_name() {
        assert_eq!(
            quant_tag("Llama-3.2-1B-Instruct-Q4_K_M").as_deref(),
            Some("Q4_K_M")
        );
        assert_eq!(
            quant_tag("SmolLM2-135M-Instruct.Q4_1").as_deref(),
            Some("Q4_1")
        );
        assert_eq!(
            quant_tag("qwen2.5-0.5b-instruct-fp16").as_deref(),
            Some("FP16")
        );
        assert_eq!(quant_tag("model.IQ3_XXS").as_deref(), Some("IQ3_XXS"));
        assert_eq!(quant_tag("Qwen3-0.6B"), None);
        assert_eq!(quant_tag("model-Quantized"), None);
    }

    #[test]
    fn split_parts_are_recognized_by_their_five_digit_suffix() {
        assert_eq!(split_part("big-00002-of-00003"), Some(("big", 2, 3)));
        assert_eq!(split_part("big-2-of-3"), None);
        assert_eq!(split_part("plain"), None);
    }

    #[test]
    fn several_files_are_named_by_tag_or_else_by_stem() {
        let file = |stem: &str| GgufFile {
            stem: stem.to_owned(),
            path: PathBuf::from(format!("/m/{stem}.gguf")),
            broken: None,
        };
        let folder = GgufFolder {
            models: vec![file("m-Q4_K_M"), file("m-Q8_0")],
            projector: None,
        };
        let ids: Vec<String> = folder
            .entries("org/m", Source::HuggingFace)
            .into_iter()
            .map(|entry| entry.id)
            .collect();
        assert_eq!(ids, ["org/m:Q4_K_M", "org/m:Q8_0"]);

        let folder = GgufFolder {
            models: vec![file("m-Q4_0"), file("other-q4_0"), file("untagged")],
            projector: None,
        };
        let ids: Vec<String> = folder
            .entries("org/m", Source::HuggingFace)
            .into_iter()
            .map(|entry| entry.id)
            .collect();
        assert_eq!(ids, ["org/m:m-Q4_0", "org/m:other-q4_0", "org/m:untagged"]);
    }
}
