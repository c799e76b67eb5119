//! All sources together: where they are, which wins a collision, the worker's descriptions, and
//! scanning again.

use std::collections::{BTreeMap, HashMap};
use std::ffi::OsString;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use corral_ipc::{ModelDescription, ModelFormat};

use super::super::{Catalog, Fallback, SharedRegistry, Source, Sources};
use super::{gguf_at, model_at};
use crate::config::{Config, DiscoveryConfig};

fn env(vars: &[(&str, &Path)]) -> impl Fn(&str) -> Option<OsString> + use<> {
    let vars: HashMap<String, OsString> = vars
        .iter()
        .map(|(name, value)| ((*name).to_owned(), value.as_os_str().to_owned()))
        .collect();
    move |name| vars.get(name).cloned()
}

/// A `corral-worker` that describes nothing, so every model found stays servable.
fn silent_worker(dir: &Path) -> PathBuf {
    let script = dir.join("corral-worker");
    std::fs::write(&script, "#!/bin/sh\nexit 0\n").unwrap();
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    script
}

#[test]
fn sources_default_to_the_home_directory_and_follow_the_environment() {
    let home = Path::new("/home/ada");
    let config = Config::default();
    let sources = Sources::locate(&config, None, &env(&[("HOME", home)])).unwrap();
    assert_eq!(
        sources.huggingface.as_deref(),
        Some(Path::new("/home/ada/.cache/huggingface/hub"))
    );
    assert_eq!(
        sources.lmstudio.as_deref(),
        Some(Path::new("/home/ada/.lmstudio/models"))
    );
    assert_eq!(
        sources.ollama.as_deref(),
        Some(Path::new("/home/ada/.ollama/models"))
    );

    let moved = env(&[
        ("HOME", home),
        ("OLLAMA_MODELS", Path::new("/data/ollama")),
        ("HF_HUB_CACHE", Path::new("/data/hub")),
    ]);
    let sources = Sources::locate(&config, None, &moved).unwrap();
    assert_eq!(sources.ollama.as_deref(), Some(Path::new("/data/ollama")));
    assert_eq!(sources.huggingface.as_deref(), Some(Path::new("/data/hub")));

    let off = Config {
        discovery: DiscoveryConfig {
            huggingface: false,
            ollama: false,
            lmstudio: false,
        },
        ..Config::default()
    };
    let sources = Sources::locate(&off, None, &moved).unwrap();
    assert_eq!(sources, Sources::default());
}

#[test]
fn the_model_flag_takes_a_gguf_file_or_a_directory() {
    let config = Config::default();
    let none = env(&[]);
    let flagged = |path: &str| {
        Sources::locate(&config, Some(PathBuf::from(path)), &none)
            .unwrap()
            .scan()
    };
    assert_eq!(flagged("/m/SmolLM2.Q4_1.gguf")[0].id, "SmolLM2.Q4_1");
    assert_eq!(flagged("/m/llama")[0].id, "llama");
    assert_eq!(flagged("/m/llama")[0].source, Source::ModelFlag);
    assert!(Sources::locate(&config, Some(PathBuf::from("/")), &none).is_err());
}

/// One temporary home with a model under the same id in a models directory, the Hugging Face
/// cache and LM Studio, and one only Ollama has.
struct Home {
    dir: tempfile::TempDir,
}

impl Home {
    fn new() -> Self {
        let home = Home {
            dir: tempfile::tempdir().unwrap(),
        };
        model_at(&home.models_dir().join("models--org--shared/snapshots/r1"));
        model_at(&home.hub().join("models--org--shared/snapshots/r2"));
        model_at(&home.path().join(".lmstudio/models/org/shared"));
        model_at(&home.path().join(".lmstudio/models/org/mlx"));
        let blob = home
            .path()
            .join(".ollama/models/blobs")
            .join(format!("sha256-{}", "a".repeat(64)));
        gguf_at(&blob);
        let manifest = home
            .path()
            .join(".ollama/models/manifests/registry.ollama.ai/library/tiny/latest");
        std::fs::create_dir_all(manifest.parent().unwrap()).unwrap();
        let layer = format!("sha256:{}", "a".repeat(64));
        std::fs::write(
            &manifest,
            serde_json::json!({"layers": [{"mediaType": "application/vnd.ollama.image.model", "digest": layer}]}).to_string(),
        )
        .unwrap();
        home
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }

    fn models_dir(&self) -> PathBuf {
        self.path().join("models")
    }

    fn hub(&self) -> PathBuf {
        self.path().join(".cache/huggingface/hub")
    }

    fn sources(&self) -> Sources {
        let config = Config {
            models_dirs: vec![self.models_dir()],
            ..Config::default()
        };
        Sources::locate(&config, None, &env(&[("HOME", self.path())])).unwrap()
    }

    /// A catalog over this home whose worker is `worker`, a shell script's body.
    fn catalog(&self, worker: &str, fallback: Option<Fallback>) -> Catalog {
        let script = self.path().join("corral-worker");
        std::fs::write(&script, format!("#!/bin/sh\n{worker}\n")).unwrap();
        std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
        Catalog {
            sources: self.sources(),
            aliases: BTreeMap::from([("fast".to_owned(), "tiny:latest".to_owned())]),
            worker: script,
            fallback,
        }
    }
}

#[test]
fn every_source_is_scanned_and_the_first_wins_a_collision() {
    let home = Home::new();
    let found = home.sources().scan();
    let sources: Vec<(&str, Source)> = found
        .iter()
        .map(|entry| (entry.id.as_str(), entry.source))
        .collect();
    assert_eq!(
        sources,
        [
            ("org/shared", Source::ModelsDir),
            ("org/shared", Source::HuggingFace),
            ("org/mlx", Source::LmStudio),
            ("org/shared", Source::LmStudio),
            ("tiny:latest", Source::Ollama),
        ]
    );
}

#[tokio::test]
async fn the_workers_descriptions_decide_what_is_servable() {
    let home = Home::new();
    // Describes each path as the worker would; says org/mlx is a model it cannot serve.
    let worker = r#"shift
for path in "$@"; do
  case "$path" in
    */org/mlx) reason='"unknown architecture `mamba`"' ;;
    *) reason=null ;;
  esac
  printf '{"path":"%s","format":"gguf","architecture":"llama","quantization":"Q8_0","size_bytes":8,"unservable":%s}\n' "$path" "$reason"
done"#;
    let registry = home.catalog(worker, None).scan().await.unwrap();
    let ids: Vec<&str> = registry.entries().map(|entry| entry.id.as_str()).collect();
    assert_eq!(ids, ["org/mlx", "org/shared", "tiny:latest"]);
    let shared = registry.get("org/shared").unwrap();
    assert_eq!(shared.source, Source::ModelsDir);
    assert_eq!(
        shared.description,
        Some(ModelDescription {
            path: shared.path.clone(),
            format: ModelFormat::Gguf,
            architecture: Some("llama".to_owned()),
            quantization: Some("Q8_0".to_owned()),
            size_bytes: 8,
            parameters: None,
            active_parameters: None,
            gguf_loaded_bytes: Default::default(),
            cache: None,
            unservable: None,
            kind: corral_ipc::ModelKind::Chat,
            vision: false,
            vision_reserve_bytes: 0,
            gguf_sampling: Default::default(),
            generation_config: Default::default(),
            warnings: Vec::new(),
            mtp: corral_ipc::MtpLayers::None,
        })
    );
    assert_eq!(
        registry.get("org/mlx").unwrap().unservable_reason(),
        Some("unknown architecture `mamba`")
    );
    assert_eq!(
        registry.servable_path("org/mlx"),
        Err("unknown architecture `mamba`".to_owned())
    );
    assert_eq!(registry.resolve("fast"), Some("tiny:latest"));
    // As `ollama run tiny` reads it.
    assert_eq!(registry.resolve("tiny"), Some("tiny:latest"));
}

#[tokio::test]
async fn a_worker_that_cannot_describe_leaves_every_model_servable() {
    let home = Home::new();
    let registry = home.catalog("exit 2", None).scan().await.unwrap();
    assert_eq!(registry.entries().count(), 3);
    assert!(registry.entries().all(|entry| entry.description.is_none()));
    assert!(registry.entries().all(|entry| entry.is_servable()));
}

#[tokio::test]
async fn the_fallback_is_served_when_nothing_is_found_and_a_rescan_adds_new_models_beside_it() {
    let home = tempfile::tempdir().unwrap();
    let fallback_dir = home.path().join("fallback");
    let fallback: Fallback = {
        let dir = fallback_dir.clone();
        Arc::new(move || Ok(("corral-small".to_owned(), dir.clone())))
    };
    let script = silent_worker(home.path());
    let models = home.path().join("models");
    let catalog = Catalog {
        sources: Sources {
            models_dirs: vec![models.clone()],
            ..Sources::default()
        },
        aliases: BTreeMap::new(),
        worker: script,
        fallback: Some(fallback),
    };
    let shared = SharedRegistry::new(catalog).await.unwrap();
    let before = shared.current();
    let default = before.get("corral-small").unwrap();
    assert_eq!(
        (default.source, &default.path),
        (Source::Default, &fallback_dir)
    );

    // What a pull does: files appear, then the registry is scanned again.
    gguf_at(&models.join("pulled.gguf"));
    shared.rescan().await.unwrap();
    let after = shared.current();
    let ids: Vec<&str> = after.entries().map(|entry| entry.id.as_str()).collect();
    assert_eq!(ids, ["corral-small", "pulled"]);
    // A snapshot taken before the rescan stays as it was for whoever holds it.
    assert!(before.get("pulled").is_none());
}

#[test]
fn sources_are_named_as_the_tools_name_themselves() {
    let names = [
        Source::ModelFlag,
        Source::ModelsDir,
        Source::HuggingFace,
        Source::LmStudio,
        Source::Ollama,
        Source::Default,
    ]
    .map(|source| serde_json::to_value(source).unwrap());
    assert_eq!(
        names,
        [
            "model-flag",
            "models-dir",
            "huggingface",
            "lmstudio",
            "ollama",
            "default"
        ]
    );
}

#[tokio::test]
async fn a_model_whose_files_cannot_load_stays_unservable_across_rescans_until_they_change() {
    let home = tempfile::tempdir().unwrap();
    let script = silent_worker(home.path());
    let models = home.path().join("models");
    let broken = models.join("broken");
    model_at(&broken);
    let catalog = Catalog {
        sources: Sources {
            models_dirs: vec![models.clone()],
            ..Sources::default()
        },
        aliases: BTreeMap::new(),
        worker: script,
        fallback: None,
    };
    let shared = SharedRegistry::new(catalog).await.unwrap();
    let reason = format!("{}: tensor model.norm.weight is missing", broken.display());
    // A report about other files than those now listed under the id changes nothing.
    shared.mark_unloadable("broken", &models.join("elsewhere"), &reason);
    assert!(shared.current().get("broken").unwrap().is_servable());

    shared.mark_unloadable("broken", &broken, &reason);
    let marked = shared.current();
    assert_eq!(marked.servable_path("broken"), Err(reason.clone()));
    shared.rescan().await.unwrap();
    assert_eq!(
        shared.current().get("broken").unwrap().unservable_reason(),
        Some(reason.as_str())
    );

    std::fs::write(broken.join("config.json"), r#"{"fixed": true}"#).unwrap();
    shared.rescan().await.unwrap();
    assert_eq!(
        shared.current().servable_path("broken"),
        Ok(broken.as_path())
    );
}
