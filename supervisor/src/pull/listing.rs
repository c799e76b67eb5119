//! The hub's listing of a repository at a revision (`GET /api/models/{repo}/revision/{rev}
//! ?blobs=true`) and the choice of the files a model needs from it.
//!
//! The listing is the hub's word, not ours: every name and hash in it is checked before it
//! becomes part of a path. Only top-level files are taken (a model loads nothing from
//! subfolders), and the weights are chosen as mlx-lm's own download chooses them: every
//! `*.safetensors` of the repository beside its configuration and tokenizer files; or, for a
//! GGUF repository, one `.gguf` file.

use serde::Deserialize;

use super::PullError;
use super::name::RepoId;

/// The files besides the weights that a safetensors model uses, taken when the repository has
/// them. `config.json` is required.
const COMPANIONS: &[&str] = &[
    "config.json",
    "model.safetensors.index.json",
    "tokenizer.json",
    "tokenizer_config.json",
    "generation_config.json",
    "special_tokens_map.json",
    "chat_template.jinja",
    "chat_template.json",
];

#[derive(Debug, Deserialize)]
pub struct RepoListing {
    /// The commit the revision resolves to.
    pub sha: String,
    pub siblings: Vec<Sibling>,
}

#[derive(Debug, Clone, Deserialize)]
pub struct Sibling {
    pub rfilename: String,
    pub size: Option<u64>,
    #[serde(rename = "blobId")]
    pub blob_id: Option<String>,
    pub lfs: Option<Lfs>,
}

#[derive(Debug, Clone, Deserialize)]
pub struct Lfs {
    pub sha256: String,
    pub size: u64,
}

/// One file to fetch: its name in the repository and the blob it is stored as in the cache.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RemoteFile {
    pub name: String,
    pub size: u64,
    /// The cache's blob name: the sha256 of an LFS file, the git blob id of any other (what the
    /// hub sends as the file's ETag, so other tools find the same blob).
    pub blob: String,
    /// The content's sha256, which the download must match (LFS files only).
    pub sha256: Option<String>,
}

/// Checks the commit and picks the files to fetch, `config.json` last so that a snapshot only
/// looks like a model once its weights are in place.
pub fn select(
    repo: &RepoId,
    listing: &RepoListing,
    file: Option<&str>,
) -> Result<Vec<RemoteFile>, PullError> {
    if !is_hex(&listing.sha, 40..=64) {
        return Err(PullError::MalformedListing {
            repo: repo.to_string(),
            reason: format!("the commit `{}` is not a hex hash", listing.sha),
        });
    }
    let names: Vec<&str> = listing
        .siblings
        .iter()
        .map(|sibling| sibling.rfilename.as_str())
        .filter(|name| top_level(name))
        .collect();
    let ggufs: Vec<&str> = names
        .iter()
        .copied()
        .filter(|name| name.ends_with(".gguf"))
        .collect();
    let chosen: Vec<&str> = match file {
        Some(file) if !file.ends_with(".gguf") || !top_level(file) => {
            return Err(PullError::NotAGgufFile(file.to_owned()));
        }
        Some(file) if !ggufs.contains(&file) => {
            return Err(PullError::FileNotInRepo {
                repo: repo.to_string(),
                file: file.to_owned(),
                ggufs: ggufs.join(", "),
            });
        }
        Some(file) => vec![file],
        None => choose(repo, &names, &ggufs)?,
    };
    let mut files = listing
        .siblings
        .iter()
        .filter(|sibling| chosen.contains(&sibling.rfilename.as_str()))
        .map(|sibling| remote_file(repo, sibling))
        .collect::<Result<Vec<_>, _>>()?;
    files.sort_by_key(|file| file.name == "config.json");
    Ok(files)
}

/// Safetensors when the repository has any, else its only GGUF.
fn choose<'a>(
    repo: &RepoId,
    names: &[&'a str],
    ggufs: &[&'a str],
) -> Result<Vec<&'a str>, PullError> {
    let has_safetensors = names.iter().any(|name| name.ends_with(".safetensors"));
    if has_safetensors && names.contains(&"config.json") {
        return Ok(names
            .iter()
            .copied()
            .filter(|name| name.ends_with(".safetensors") || COMPANIONS.contains(name))
            .collect());
    }
    match ggufs {
        [one] => Ok(vec![one]),
        [] => Err(PullError::NoUsableWeights {
            repo: repo.to_string(),
            holds: holdings(names, has_safetensors),
        }),
        several => Err(PullError::SeveralGgufs {
            repo: repo.to_string(),
            ggufs: several.join(", "),
        }),
    }
}

/// What a repository without usable weights holds, for its error: the first files by name.
fn holdings(names: &[&str], has_safetensors: bool) -> String {
    const SHOWN: usize = 12;
    let mut listed = names
        .iter()
        .take(SHOWN)
        .copied()
        .collect::<Vec<_>>()
        .join(", ");
    if names.is_empty() {
        listed = "no files".to_owned();
    } else if names.len() > SHOWN {
        listed.push_str(&format!(" and {} more", names.len() - SHOWN));
    }
    if has_safetensors {
        listed.push_str("; safetensors without a config.json");
    }
    listed
}

fn remote_file(repo: &RepoId, sibling: &Sibling) -> Result<RemoteFile, PullError> {
    let malformed = |reason: String| PullError::MalformedListing {
        repo: repo.to_string(),
        reason,
    };
    let name = &sibling.rfilename;
    let (blob, size, sha256) = match &sibling.lfs {
        Some(lfs) => (
            lfs.sha256.to_ascii_lowercase(),
            Some(lfs.size),
            Some(lfs.sha256.to_ascii_lowercase()),
        ),
        None => (
            sibling.blob_id.clone().unwrap_or_default(),
            sibling.size,
            None,
        ),
    };
    if !is_hex(&blob, 40..=64) {
        return Err(malformed(format!(
            "{name} has no usable blob id or sha256 (`{blob}`)"
        )));
    }
    let size = size.ok_or_else(|| malformed(format!("{name} has no size")))?;
    Ok(RemoteFile {
        name: name.clone(),
        size,
        blob,
        sha256,
    })
}

/// A plain file name at the top of the repository, safe as one path component.
fn top_level(name: &str) -> bool {
    !name.is_empty()
        && !name.starts_with('.')
        && !name.contains(['/', '\\', '\0'])
        && name.len() <= 255
}

fn is_hex(text: &str, lengths: std::ops::RangeInclusive<usize>) -> bool {
    lengths.contains(&text.len()) && text.chars().all(|c| c.is_ascii_hexdigit())
}

#[cfg(test)]
mod tests;
