//! Ollama's library (`$OLLAMA_MODELS`, else `~/.ollama/models`).
//!
//! Each `manifests/<registry>/<namespace>/<name>/<tag>` file is a JSON manifest; its layer of
//! type `application/vnd.ollama.image.model` names the model's blob by digest (`sha256:<hex>`,
//! stored as `blobs/sha256-<hex>`), a GGUF file without the extension. The id is `name:tag` for
//! Ollama's own `library` (`llama3.2:latest`), `namespace/name:tag` for other namespaces and
//! other registries (`hf.co/org/repo:Q4_K_M` is served as `org/repo:Q4_K_M`, the id the same file
//! gets in the Hugging Face cache; ids hold at most one `/`, which the admin routes rely on).
//!
//! The blob's digest is checked to be 64 hex digits before it becomes a file name. A manifest
//! that is not JSON, has no model layer, names a missing blob or one that is not a GGUF, or
//! carries a LoRA adapter, is listed as unservable with the reason. A projector layer is the
//! model's vision projector (a GGUF the worker loads beside the model's, `--mmproj`). The
//! params layer gives the model's sampling defaults (`ollama_params.rs`); the template and
//! system prompt layers are ignored: the GGUF's own chat template is used.

use std::io::Read;
use std::path::{Path, PathBuf};

use serde::Deserialize;

use super::{Kind, ModelEntry, Source, children, kind_of, name_of, ollama_params};

const OLLAMA_REGISTRY: &str = "registry.ollama.ai";
const LIBRARY: &str = "library";
const MODEL_LAYER: &str = "application/vnd.ollama.image.model";
const PROJECTOR_LAYER: &str = "application/vnd.ollama.image.projector";
const ADAPTER_LAYER: &str = "application/vnd.ollama.image.adapter";
const PARAMS_LAYER: &str = "application/vnd.ollama.image.params";
/// Real manifests are a few hundred bytes; anything far larger is not one.
const MAX_MANIFEST_BYTES: u64 = 1 << 20;

/// `~/.ollama/models`, where Ollama keeps its library unless `OLLAMA_MODELS` says otherwise.
pub(super) fn default_dir(home: &Path) -> PathBuf {
    home.join(".ollama/models")
}

#[derive(Debug, Deserialize)]
struct Manifest {
    layers: Vec<Layer>,
}

#[derive(Debug, Deserialize)]
struct Layer {
    #[serde(rename = "mediaType")]
    media_type: String,
    digest: String,
}

pub(super) fn scan(root: &Path) -> Vec<ModelEntry> {
    let manifests = root.join("manifests");
    if !matches!(kind_of(&manifests), Kind::Dir) {
        tracing::debug!(dir = %manifests.display(), "no Ollama manifests");
        return Vec::new();
    }
    let mut found = Vec::new();
    for registry in subdirs(&manifests) {
        for namespace in subdirs(&registry) {
            for name in subdirs(&namespace) {
                for tag in children(&name, "an Ollama model's manifests") {
                    let names = [&registry, &namespace, &name, &tag].map(|path| name_of(path));
                    let [Some(registry), Some(namespace), Some(name), Some(tag_name)] = names
                    else {
                        continue;
                    };
                    if matches!(kind_of(&tag), Kind::Dir) {
                        continue;
                    }
                    let id = model_id(&registry, &namespace, &name, &tag_name);
                    found.push(model(root, &tag, id));
                }
            }
        }
    }
    found
}

/// `name:tag` in Ollama's library, else `namespace/name:tag` (see the module doc).
fn model_id(registry: &str, namespace: &str, name: &str, tag: &str) -> String {
    if registry == OLLAMA_REGISTRY && namespace == LIBRARY {
        format!("{name}:{tag}")
    } else {
        format!("{namespace}/{name}:{tag}")
    }
}

/// The entry for the manifest at `manifest`: its blob when it can be served, else the reason.
fn model(root: &Path, manifest: &Path, id: String) -> ModelEntry {
    let source = Source::Ollama;
    match blob(root, manifest) {
        Ok(Blobs {
            model,
            params,
            projector,
        }) => ModelEntry {
            ollama_params: params
                .map_or_else(Default::default, |params| ollama_params::read(&params, &id)),
            projector,
            ..ModelEntry::new(id, &model, source)
        },
        Err((path, problem)) => {
            tracing::warn!(model = %id, manifest = %manifest.display(), %problem, "an Ollama model cannot be served");
            ModelEntry::unservable(id, &path, source, problem)
        }
    }
}

/// The blobs of a manifest's layers that corral reads.
struct Blobs {
    /// The model's GGUF.
    model: PathBuf,
    params: Option<PathBuf>,
    /// The vision projector's GGUF.
    projector: Option<PathBuf>,
}

/// The GGUF blob the manifest names, its params blob and vision projector if it has them, or
/// the path at fault and why it cannot be served.
fn blob(root: &Path, manifest_path: &Path) -> Result<Blobs, (PathBuf, String)> {
    let at_manifest = |problem: String| (manifest_path.to_path_buf(), problem);
    let manifest = read_manifest(manifest_path).map_err(|problem| {
        at_manifest(format!(
            "{} is not an Ollama manifest: {problem}",
            manifest_path.display()
        ))
    })?;
    let has = |media_type: &str| {
        manifest
            .layers
            .iter()
            .any(|layer| layer.media_type == media_type)
    };
    if has(ADAPTER_LAYER) {
        return Err(at_manifest(
            "its manifest adds a LoRA adapter layer, which corral does not apply".to_owned(),
        ));
    }
    let layer = manifest
        .layers
        .iter()
        .find(|layer| layer.media_type == MODEL_LAYER)
        .ok_or_else(|| {
            at_manifest(format!(
                "{} has no model layer ({MODEL_LAYER})",
                manifest_path.display()
            ))
        })?;
    let hex = sha256_hex(&layer.digest).ok_or_else(|| {
        at_manifest(format!(
            "{} names the blob `{}`, which is not a sha256 digest",
            manifest_path.display(),
            layer.digest.escape_debug()
        ))
    })?;
    let blob = blob_path(root, hex);
    check_gguf(&blob).map_err(|problem| (blob.clone(), problem))?;
    // A params layer naming no proper blob is only a lost default, not a reason to refuse.
    let layer_blob = |media_type: &str| {
        manifest
            .layers
            .iter()
            .find(|layer| layer.media_type == media_type)
            .and_then(|layer| sha256_hex(&layer.digest))
            .map(|hex| blob_path(root, hex))
    };
    let projector = layer_blob(PROJECTOR_LAYER);
    if let Some(projector) = &projector {
        check_gguf(projector).map_err(|problem| {
            (
                projector.clone(),
                format!("its vision projector: {problem}"),
            )
        })?;
    }
    Ok(Blobs {
        model: blob,
        params: layer_blob(PARAMS_LAYER),
        projector,
    })
}

fn blob_path(root: &Path, hex: &str) -> PathBuf {
    root.join("blobs").join(format!("sha256-{hex}"))
}

fn read_manifest(path: &Path) -> Result<Manifest, String> {
    let file = std::fs::File::open(path).map_err(|error| error.to_string())?;
    let mut text = Vec::new();
    file.take(MAX_MANIFEST_BYTES + 1)
        .read_to_end(&mut text)
        .map_err(|error| error.to_string())?;
    if text.len() as u64 > MAX_MANIFEST_BYTES {
        return Err(format!("larger than {MAX_MANIFEST_BYTES} bytes"));
    }
    serde_json::from_slice(&text).map_err(|error| error.to_string())
}

/// The 64 lowercase hex digits of `sha256:<hex>`, or `None` for anything else.
fn sha256_hex(digest: &str) -> Option<&str> {
    let hex = digest.strip_prefix("sha256:")?;
    (hex.len() == 64 && hex.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))).then_some(hex)
}

/// The blob exists and starts with the GGUF magic.
fn check_gguf(blob: &Path) -> Result<(), String> {
    let mut file = std::fs::File::open(blob).map_err(|error| {
        if error.kind() == std::io::ErrorKind::NotFound {
            format!("its model blob {} is missing", blob.display())
        } else {
            format!("cannot read its model blob {}: {error}", blob.display())
        }
    })?;
    let mut magic = [0u8; 4];
    match file.read_exact(&mut magic) {
        Ok(()) if &magic == b"GGUF" => Ok(()),
        Ok(()) => Err(format!(
            "its model blob {} is not a GGUF file (it starts with {:02x?})",
            blob.display(),
            magic
        )),
        Err(error) => Err(format!(
            "its model blob {} is not a GGUF file ({error})",
            blob.display()
        )),
    }
}

/// The subdirectories of `dir` with usable names.
fn subdirs(dir: &Path) -> Vec<PathBuf> {
    children(dir, "an Ollama manifests folder")
        .into_iter()
        .filter(|path| name_of(path).is_some() && matches!(kind_of(path), Kind::Dir))
        .collect()
}
