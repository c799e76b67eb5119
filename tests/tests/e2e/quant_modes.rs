//! Every quantization mlx-lm writes loads and computes what mlx-lm computes: checkpoints made by
//! `mlx_lm.convert` itself in each mode (affine at every bit count and group size, mxfp4, mxfp8,
//! nvfp4) and each mixed recipe, over linear layers, experts, embeddings and tied heads
//! (`tests/data/quant_modes/`, from `cargo xtask reference`, each from a toolchain fixture's
//! Hugging Face layout). Both sides run the same quantized weights through MLX's same kernels, so the
//! logits agree as closely as two float computations do. What MLX cannot compute (nvfp4 experts
//! with a global scale each, which mlx-lm itself fails on) is refused when the model is
//! discovered, by the layer or tensor and the mode, and a request for it is a 400 without a
//! worker.

use std::path::{Path, PathBuf};

use corral_fixture::Arch;
use corral_tests::server::{Dirs, Server, chat};
use corral_worker::describe::describe;
use corral_worker::model::Model;
use serde_json::Value;

use crate::logit_checks::{read_reference, rows_alone};

/// Measured worst: 1.9e-5 (qwen3, 8-bit affine in groups of 64, logits reaching 70), Mixtral's
/// within 6e-7 of logits reaching 2: both sides run MLX's same kernels on the same packed
/// weights, so only the order of float sums differs, which a machine's BLAS may change more.
/// Far below what a layer read in the wrong format moves: quantizing at all moves these logits
/// from their float checkpoint's by 0.09 (Mixtral, mxfp8) to 19.6 (Qwen3, mixed_2_6).
const TOLERANCE: f32 = 1e-4;

fn data() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("data/quant_modes")
}

/// A fixture's name and its index.json entry.
type Fixture = (String, Value);

/// index.json's fixtures: those mlx-lm runs (with a reference) and those it fails on.
fn fixtures() -> (Vec<Fixture>, Vec<Fixture>) {
    let index: Value =
        serde_json::from_str(&std::fs::read_to_string(data().join("index.json")).unwrap()).unwrap();
    let all = index["fixtures"].as_object().unwrap().clone();
    all.into_iter()
        .partition(|(_, entry)| entry.get("mlx_lm_fails").is_none())
}

#[test]
fn every_mode_mlx_lm_writes_loads_and_agrees_with_mlx_lms_logits() {
    let (runnable, _) = fixtures();
    assert!(runnable.len() >= 13, "{runnable:?}");
    for (name, entry) in &runnable {
        let dir = data().join(name);
        let described = describe(&dir);
        assert_eq!(described.unservable, None, "{name}");
        let quantization = &entry["quantization"];
        let label = match quantization["mode"].as_str().unwrap() {
            "affine" => format!("{}-bit", quantization["bits"]),
            mode => mode.to_owned(),
        };
        assert_eq!(described.quantization, Some(label), "{name}");

        let model = Model::load(&dir).unwrap_or_else(|error| panic!("{name}: {error}"));
        let reference = read_reference(&dir);
        let rows = rows_alone(&model, &reference);
        assert_eq!(rows.len(), reference.rows.len(), "{name}");
        let worst = rows
            .iter()
            .flatten()
            .zip(reference.rows.iter().flatten())
            .map(|(got, want)| (got - want).abs())
            .fold(0.0f32, f32::max);
        eprintln!("{name}: max |logits - mlx-lm's| = {worst:e}");
        assert!(
            worst <= TOLERANCE,
            "{name}: differs from mlx-lm by {worst} (tolerance {TOLERANCE})"
        );
    }
}

/// What mlx-lm fails on is refused by describe (so the supervisor never starts a worker for it)
/// and by the load, naming the layer and the mode; also when only its tensors say so (mlx-lm
/// reads a global scale from the `{layer}.global_scale` tensor alone).
#[test]
fn a_mode_mlx_cannot_compute_is_refused_at_discovery_by_layer_and_mode() {
    let (_, refused) = fixtures();
    assert!(!refused.is_empty());
    for (name, entry) in &refused {
        let dir = data().join(name);
        assert!(
            entry["mlx_lm_fails"]
                .as_str()
                .unwrap()
                .contains("global_scale"),
            "{entry}"
        );
        let reason = describe(&dir).unservable.unwrap_or_default();
        assert!(
            reason.contains("nvfp4") && reason.contains(".switch_mlp."),
            "{name}: {reason}"
        );
        let error = Model::load(&dir).err().map(|error| error.to_string());
        assert!(
            error.is_some_and(|error| error.contains("nvfp4") && error.contains(".switch_mlp.")),
            "{name}"
        );

        let scratch = tempfile::tempdir().unwrap();
        let tensors_only = copy_dir(&dir, scratch.path(), name);
        let config_path = tensors_only.join("config.json");
        let mut config: Value =
            serde_json::from_str(&std::fs::read_to_string(&config_path).unwrap()).unwrap();
        for key in ["quantization", "quantization_config"] {
            for layer in config[key].as_object_mut().unwrap().values_mut() {
                if let Some(layer) = layer.as_object_mut() {
                    layer.remove("global_scale");
                }
            }
        }
        std::fs::write(&config_path, config.to_string()).unwrap();
        let reason = describe(&tensors_only).unservable.unwrap_or_default();
        assert!(
            reason.contains("nvfp4")
                && reason.contains(".switch_mlp.")
                && reason.contains(".global_scale"),
            "{name} without config entries: {reason}"
        );
        let error = Model::load(&tensors_only)
            .err()
            .map(|error| error.to_string());
        assert!(
            error.is_some_and(|error| error.contains(".global_scale")),
            "{name} without config entries"
        );
    }
}

/// Through a real `corral serve`: Qwen3 quantized to mxfp4 throughout (embedding included) is
/// listed as servable, and the global-scale checkpoint as unservable with the reason, a request
/// for it a 400 `model_not_servable` without a worker.
#[test]
fn the_server_lists_float_modes_and_refuses_what_mlx_cannot_compute_with_a_400() {
    let (_, refused) = fixtures();
    let (refused_name, _) = &refused[0];
    let dirs = Dirs::with_models(&[Arch::Llama]);
    copy_dir(
        &data().join("qwen3_mxfp4"),
        dirs.models.path(),
        "qwen3-mxfp4",
    );
    copy_dir(
        &data().join(refused_name),
        dirs.models.path(),
        "nvfp4-global",
    );
    let server = Server::start(&dirs);
    let listed = server.get_json("/v1/models/status");
    let models = listed["data"].as_array().unwrap();
    let find = |id: &str| {
        models
            .iter()
            .find(|model| model["id"] == id)
            .unwrap_or_else(|| panic!("no {id} in {listed:#}"))
    };
    let mxfp4 = find("qwen3-mxfp4");
    assert!(mxfp4["unservable"].is_null(), "{mxfp4:#}");
    assert_eq!(mxfp4["quantization"], "mxfp4", "{mxfp4:#}");
    let reason = find("nvfp4-global")["unservable"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(reason.contains("nvfp4"), "{reason}");

    let response = server.post("/v1/chat/completions", &chat("nvfp4-global", 4, false));
    assert_eq!(response.status(), 400);
    let error: Value = response.json().unwrap();
    assert_eq!(error["error"]["code"], "model_not_servable", "{error}");
    assert!(
        error["error"]["message"]
            .as_str()
            .unwrap()
            .contains(&reason),
        "{error}"
    );
    assert!(server.worker_pids().is_empty());
}

fn copy_dir(from: &Path, parent: &Path, name: &str) -> PathBuf {
    let to = parent.join(name);
    std::fs::create_dir_all(&to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        std::fs::copy(entry.path(), to.join(entry.file_name())).unwrap();
    }
    to
}
