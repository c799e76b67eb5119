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

/// An Ollama library: a GGUF blob with a template layer, a vision model whose projector's blob
/// is missing, one with its projector (the vision fixture's GGUF and mmproj), and a manifest
/// whose blob is missing.
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
    let vision = Path::new(env!("CARGO_MANIFEST_DIR")).join("data/vision/qwen3_5/gguf");
    std::fs::copy(vision.join("qwen3_5-vl-F32.gguf"), blob('5')).unwrap();
    std::fs::copy(vision.join("mmproj-qwen3_5-vl-F32.gguf"), blob('6')).unwrap();
    ollama_manifest(
        &ollama,
        "qwen3.5-vl",
        "tiny",
        &[(MODEL, '5'), (PROJECTOR, '6')],
    );
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
    assert_eq!(served_ids(&server), ["qwen3.5-vl:tiny", "tiny:q4_0"]);
    let paired = server.get_json("/v1/models/qwen3.5-vl:tiny");
    assert_eq!(paired["vision"], true, "{paired}");
    let models = models_json(&server);
    let llava = model(&models, "llava:7b");
    let reason = llava["unservable"].as_str().unwrap();
    assert!(
        reason.contains("vision projector") && reason.contains("missing"),
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
            .contains("vision projector")
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

/// Damaged files are listed with the file and the reason, and the models beside them still
/// answer: a GGUF cut in half (a truncated download), a GGUF whose tensor data is declared past
/// its end, one with a tensor type the worker does not serve, a link to a model that is gone, and
/// an Ollama manifest whose model layer is no GGUF.
#[test]
fn damaged_models_are_listed_with_the_file_and_the_reason_and_the_others_still_answer() {
    let dirs = Dirs::with_models(&[Arch::Llama]);
    let whole = dirs.state.path().join("whole.gguf");
    corral_fixture::generate(&tiny(Format::Gguf(GgufType::Q8_0)), &whole).unwrap();
    let bytes = std::fs::read(&whole).unwrap();
    let truncated = dirs.models.path().join("truncated.gguf");
    std::fs::write(&truncated, &bytes[..bytes.len() / 2]).unwrap();
    // The last tensor info's data offset, pointed far past the end of the file.
    let mut past_the_end = bytes.clone();
    let header = gguf_header_end(&bytes);
    past_the_end[header - 8..header].copy_from_slice(&(1u64 << 40).to_le_bytes());
    std::fs::write(dirs.models.path().join("offsets.gguf"), &past_the_end).unwrap();
    // The last tensor of an f32 fixture made I32: the same size, a type not served.
    let f32_file = dirs.state.path().join("f32.gguf");
    corral_fixture::generate(&tiny(Format::Gguf(GgufType::F32)), &f32_file).unwrap();
    let mut wrong_type = std::fs::read(&f32_file).unwrap();
    let f32_header = gguf_header_end(&wrong_type);
    let type_field = f32_header - 12..f32_header - 8;
    assert_eq!(
        wrong_type[type_field.clone()],
        0u32.to_le_bytes(),
        "an F32 tensor"
    );
    wrong_type[type_field].copy_from_slice(&26u32.to_le_bytes());
    std::fs::write(dirs.models.path().join("int.gguf"), &wrong_type).unwrap();
    std::os::unix::fs::symlink(
        "/nonexistent/corral-model",
        dirs.models.path().join("gone.gguf"),
    )
    .unwrap();
    let ollama = dirs.home().join(".ollama/models");
    std::fs::create_dir_all(ollama.join("blobs")).unwrap();
    std::fs::write(
        ollama.join("blobs").join(format!("sha256-{}", digest('5'))),
        "not a model at all",
    )
    .unwrap();
    ollama_manifest(&ollama, "text", "latest", &[(MODEL, '5')]);

    let server = Server::start(&dirs);
    assert_eq!(served_ids(&server), ["llama"]);
    let models = models_json(&server);
    let reason = |id: &str| {
        model(&models, id)["unservable"]
            .as_str()
            .unwrap()
            .to_owned()
    };
    let truncated_reason = reason("truncated");
    assert!(
        truncated_reason.contains("truncated.gguf") && truncated_reason.contains("truncated"),
        "{truncated_reason}"
    );
    let offsets_reason = reason("offsets");
    assert!(
        offsets_reason.contains("offsets.gguf") && offsets_reason.contains("past the end"),
        "{offsets_reason}"
    );
    let int_reason = reason("int");
    assert!(
        int_reason.contains("int.gguf") && int_reason.contains("is I32"),
        "{int_reason}"
    );
    assert!(!reason("gone").is_empty());
    assert!(
        reason("text:latest").contains("GGUF"),
        "{}",
        reason("text:latest")
    );
    for id in ["truncated", "offsets", "int", "gone", "text:latest"] {
        let refused = server.post("/v1/chat/completions", &chat(id, 4, false));
        assert_eq!(refused.status(), 400, "{id}");
    }
    assert!(server.worker_pids().is_empty());
    let answered = server.post("/v1/chat/completions", &chat("llama", 4, false));
    assert_eq!(answered.status(), 200);
}

/// The end of a GGUF's tensor infos, walked field by field: the 8 bytes before it are the last
/// tensor's data offset.
fn gguf_header_end(bytes: &[u8]) -> usize {
    let u64_at = |at: usize| u64::from_le_bytes(bytes[at..at + 8].try_into().unwrap());
    let u32_at = |at: usize| u32::from_le_bytes(bytes[at..at + 4].try_into().unwrap());
    let tensors = u64_at(8);
    let kv = u64_at(16);
    let mut at = 24;
    let skip_string = |at: &mut usize| *at += 8 + u64_at(*at) as usize;
    fn value_len(bytes: &[u8], kind: u32, at: usize) -> usize {
        let u64_at = |at: usize| u64::from_le_bytes(bytes[at..at + 8].try_into().unwrap());
        match kind {
            0 | 1 | 7 => 1,
            2 | 3 => 2,
            4..=6 => 4,
            10..=12 => 8,
            8 => 8 + u64_at(at) as usize,
            9 => {
                let element = u32::from_le_bytes(bytes[at..at + 4].try_into().unwrap());
                let count = u64_at(at + 4);
                let mut len = 12;
                for _ in 0..count {
                    len += value_len(bytes, element, at + len);
                }
                len
            }
            other => panic!("value type {other}"),
        }
    }
    for _ in 0..kv {
        skip_string(&mut at);
        let kind = u32_at(at);
        at += 4;
        at += value_len(bytes, kind, at);
    }
    for _ in 0..tensors {
        skip_string(&mut at);
        let dims = u32_at(at) as usize;
        at += 4 + 8 * dims + 4 + 8;
    }
    at
}
