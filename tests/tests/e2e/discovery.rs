//! Models where other tools keep them: a fake LM Studio folder and a fake Ollama library under the
//! server's HOME, built from fixture models, found by a real `corral serve` under the ids those
//! tools use, listed by `corral models --json`, and each answering a chat request from a real
//! worker; the models that cannot be served are listed with the reason and refused with it.

use std::path::Path;
use std::process::Command;

use corral_fixture::{Arch, Dtype, FixtureOptions, Format, GgufType, Size};
use corral_tests::binary;
use corral_tests::server::{Dirs, Server, chat};
use serde_json::{Value, json};

fn tiny(format: Format) -> FixtureOptions {
    FixtureOptions {
        size: Size::Tiny,
        arch: Arch::Llama,
        dtype: Dtype::F32,
        quantize: None,
        format,
    }
}

/// A 64-digit hex digest of one repeated digit. corral checks a digest's shape, not the blob's
/// contents (Ollama checked those when it pulled).
fn digest(digit: char) -> String {
    std::iter::repeat_n(digit, 64).collect()
}

/// Ollama's manifest `registry.ollama.ai/library/<name>/<tag>` with `layers` (media type,
/// digest digit).
fn ollama_manifest(root: &Path, name: &str, tag: &str, layers: &[(&str, char)]) {
    let layers: Vec<Value> = layers
        .iter()
        .map(|&(media_type, digit)| {
            json!({"mediaType": media_type, "digest": format!("sha256:{}", digest(digit)), "size": 1})
        })
        .collect();
    let manifest = json!({"schemaVersion": 2, "layers": layers});
    let dir = root.join("manifests/registry.ollama.ai/library").join(name);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join(tag), manifest.to_string()).unwrap();
}

const MODEL: &str = "application/vnd.ollama.image.model";
const TEMPLATE: &str = "application/vnd.ollama.image.template";
const PROJECTOR: &str = "application/vnd.ollama.image.projector";

/// An LM Studio folder: an MLX directory and a GGUF.
fn fake_lmstudio(home: &Path) {
    let lmstudio = home.join(".lmstudio/models");
    corral_fixture::generate(
        &tiny(Format::Safetensors),
        &lmstudio.join("mlx-community/tiny-llama-mlx"),
    )
    .unwrap();
    corral_fixture::generate(
        &tiny(Format::Gguf(GgufType::Q8_0)),
        &lmstudio.join("lmstudio-community/tiny-llama-GGUF/tiny-llama-Q8_0.gguf"),
    )
    .unwrap();
}

/// An Ollama library: a GGUF blob with a template layer, a vision model, and a manifest whose
/// blob is missing.
fn fake_ollama(home: &Path) {
    let ollama = home.join(".ollama/models");
    let blob = |digit| {
        ollama
            .join("blobs")
            .join(format!("sha256-{}", digest(digit)))
    };
    corral_fixture::generate(&tiny(Format::Gguf(GgufType::Q4_0)), &blob('1')).unwrap();
    std::fs::write(blob('2'), "{{ .Prompt }}").unwrap();
    ollama_manifest(&ollama, "tiny", "q4_0", &[(MODEL, '1'), (TEMPLATE, '2')]);
    ollama_manifest(&ollama, "llava", "7b", &[(MODEL, '1'), (PROJECTOR, '3')]);
    ollama_manifest(&ollama, "gone", "latest", &[(MODEL, '4')]);
}

/// The ids of `GET /v1/models`, sorted.
fn served_ids(server: &Server) -> Vec<String> {
    let listed = server.get_json("/v1/models");
    let mut ids: Vec<String> = listed["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|model| model["id"].as_str().unwrap().to_owned())
        .collect();
    ids.sort_unstable();
    ids
}

/// Every model of `corral models --json`, by id.
fn models_json(server: &Server) -> Vec<Value> {
    let output = Command::new(binary("corral"))
        .args(["models", "--json", "--url", &server.url("")])
        .output()
        .unwrap();
    assert!(output.status.success(), "{output:?}");
    let status: Value = serde_json::from_slice(&output.stdout).unwrap();
    status["data"].as_array().unwrap().clone()
}

fn model<'a>(models: &'a [Value], id: &str) -> &'a Value {
    models
        .iter()
        .find(|model| model["id"] == id)
        .unwrap_or_else(|| panic!("no {id} in {models:#?}"))
}

/// `id` is listed as found in `source`, described by the worker as servable, and answers a chat.
fn check_served(server: &Server, models: &[Value], id: &str, expected: [&str; 3]) {
    let [source, format, quantization] = expected;
    let model = model(models, id);
    assert_eq!(model["source"], source, "{model:#}");
    assert_eq!(model["format"], format, "{model:#}");
    assert!(
        model["quantization"]
            .as_str()
            .is_some_and(|quant| quant.contains(quantization)),
        "{model:#}"
    );
    assert!(model["size_bytes"].as_u64().unwrap() > 0, "{model:#}");
    assert!(model["unservable"].is_null(), "{model:#}");

    let response = server.post("/v1/chat/completions", &chat(id, 4, false));
    assert_eq!(response.status(), 200, "{id}");
    let body: Value = response.json().unwrap();
    assert_eq!(body["model"], id);
    assert!(
        body["usage"]["completion_tokens"].as_u64().unwrap() > 0,
        "{body}"
    );
}

#[test]
fn lm_studio_models_are_found_listed_and_served() {
    let dirs = Dirs::generated([]);
    fake_lmstudio(&dirs.home());
    let server = Server::start(&dirs);
    let gguf = "lmstudio-community/tiny-llama-GGUF";
    let mlx = "mlx-community/tiny-llama-mlx";
    assert_eq!(served_ids(&server), [gguf, mlx]);
    let models = models_json(&server);
    check_served(&server, &models, gguf, ["lmstudio", "gguf", "Q8_0"]);
    check_served(&server, &models, mlx, ["lmstudio", "safetensors", "f32"]);
}

#[test]
fn ollama_models_are_found_listed_and_served_and_the_unservable_refused_with_the_reason() {
    let dirs = Dirs::generated([]);
    fake_ollama(&dirs.home());
    let server = Server::start(&dirs);
    assert_eq!(served_ids(&server), ["tiny:q4_0"]);
    let models = models_json(&server);
    let llava = model(&models, "llava:7b");
    assert!(
        llava["unservable"].as_str().unwrap().contains("vision"),
        "{llava:#}"
    );
    let gone = model(&models, "gone:latest");
    assert!(
        gone["unservable"].as_str().unwrap().contains("missing"),
        "{gone:#}"
    );

    let refused = server.post("/v1/chat/completions", &chat("llava:7b", 4, false));
    assert_eq!(refused.status(), 400);
    let error: Value = refused.json().unwrap();
    assert_eq!(error["error"]["code"], "model_not_servable", "{error}");
    assert!(
        error["error"]["message"]
            .as_str()
            .unwrap()
            .contains("vision")
    );
    assert_eq!(server.worker_row("llava:7b")["state"], "not_running");
    assert!(server.worker_pids().is_empty());

    check_served(&server, &models, "tiny:q4_0", ["ollama", "gguf", "Q4_0"]);
}

#[test]
fn a_model_the_worker_cannot_serve_is_listed_with_the_reason_and_refused_without_a_worker() {
    let dirs = Dirs::with_models(&[Arch::Llama]);
    let mamba = dirs.models.path().join("mamba");
    std::fs::create_dir_all(&mamba).unwrap();
    std::fs::write(mamba.join("config.json"), r#"{"model_type": "mamba"}"#).unwrap();
    let server = Server::start(&dirs);
    assert_eq!(served_ids(&server), ["llama"]);
    let models = models_json(&server);
    let listed = model(&models, "mamba");
    assert_eq!(listed["source"], "models-dir", "{listed:#}");
    let reason = listed["unservable"].as_str().unwrap();
    assert!(reason.contains("mamba"), "{listed:#}");

    let table = Command::new(binary("corral"))
        .args(["models", "--url", &server.url("")])
        .output()
        .unwrap();
    let table = String::from_utf8(table.stdout).unwrap();
    let row = table
        .lines()
        .find(|line| line.starts_with("mamba"))
        .unwrap();
    assert!(row.ends_with(&format!("unservable: {reason}")), "{table}");

    let refused = server.post("/v1/chat/completions", &chat("mamba", 4, false));
    assert_eq!(refused.status(), 400);
    let error: Value = refused.json().unwrap();
    assert_eq!(error["error"]["code"], "model_not_servable", "{error}");
    assert!(error["error"]["message"].as_str().unwrap().contains(reason));
    let load = server.post("/v1/models/mamba/load", &json!({}));
    assert_eq!(load.status(), 400);
    assert!(server.worker_pids().is_empty());
    check_served(
        &server,
        &models,
        "llama",
        ["models-dir", "safetensors", "f32"],
    );
}
