//! `corral-worker generate`, the one-shot mode, run as a process: it prints text and figures,
//! and a malformed model directory ends with one clear error line naming the file and the
//! problem, never a panic or an MLX abort.

use std::path::Path;
use std::process::{Command, Output};

use corral_fixture::{Arch, Bits, Dtype, FixtureOptions, Format, Size};
use corral_tests::{binary, tiny_model};
use safetensors::SafeTensors;

fn generate(model: &Path, extra: &[&str]) -> Output {
    Command::new(binary("corral-worker"))
        .args(["generate", "--model"])
        .arg(model)
        .args(["--prompt", "Hello there", "--max-tokens", "12"])
        .args(extra)
        .output()
        .expect("running corral-worker")
}

/// Asserts a clean failure: exit status 1, a single stderr line holding every `needles` entry.
fn assert_one_line_error(output: &Output, needles: &[&str]) {
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "status; stderr: {stderr}");
    assert_eq!(stderr.trim_end().lines().count(), 1, "one line: {stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
    for needle in needles {
        assert!(stderr.contains(needle), "{needle:?} missing from: {stderr}");
    }
}

fn edit_config(dir: &Path, edit: impl FnOnce(&mut serde_json::Value)) {
    let path = dir.join("config.json");
    let mut config: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    edit(&mut config);
    std::fs::write(&path, serde_json::to_string_pretty(&config).unwrap()).unwrap();
}

/// Rewrites model.safetensors without the named tensor.
fn drop_tensor(dir: &Path, name: &str) {
    let path = dir.join("model.safetensors");
    let bytes = std::fs::read(&path).unwrap();
    let tensors = SafeTensors::deserialize(&bytes).unwrap();
    let kept: Vec<_> = tensors
        .tensors()
        .into_iter()
        .filter(|(tensor_name, _)| tensor_name != name)
        .collect();
    assert_eq!(kept.len() + 1, tensors.len(), "{name} was in the file");
    let out = safetensors::serialize(kept, None).unwrap();
    std::fs::write(&path, out).unwrap();
}

#[test]
fn generate_prints_text_and_speed_for_each_architecture() {
    for arch in [Arch::Llama, Arch::Qwen2, Arch::Qwen3] {
        let model = tiny_model(arch);
        let output = generate(model.path(), &["--chat"]);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(output.status.success(), "{arch:?}: {stderr}");
        assert!(!output.stdout.is_empty(), "{arch:?} printed no text");
        for figure in ["prompt:", "tokens/s", "decode:", "peak memory:"] {
            assert!(
                stderr.contains(figure),
                "{arch:?}: {figure} missing: {stderr}"
            );
        }
    }
}

#[test]
fn greedy_generation_is_reproducible_and_seeded_sampling_too() {
    let model = tiny_model(Arch::Llama);
    let greedy = || generate(model.path(), &[]).stdout;
    assert_eq!(greedy(), greedy());
    let sampled =
        |seed: &str| generate(model.path(), &["--temperature", "0.9", "--seed", seed]).stdout;
    assert_eq!(sampled("7"), sampled("7"));
}

#[test]
fn missing_tensor_is_named() {
    let model = tiny_model(Arch::Llama);
    drop_tensor(model.path(), "model.layers.2.mlp.up_proj.weight");
    let output = generate(model.path(), &[]);
    assert_one_line_error(&output, &["model.layers.2.mlp.up_proj.weight", "missing"]);
}

#[test]
fn wrong_shape_names_tensor_file_and_shapes() {
    let model = tiny_model(Arch::Qwen3);
    edit_config(model.path(), |config| {
        config["intermediate_size"] = 640.into()
    });
    let output = generate(model.path(), &[]);
    assert_one_line_error(
        &output,
        &[
            "model.safetensors",
            "mlp.gate_proj.weight",
            "[512, 256]",
            "[640, 256]",
        ],
    );
}

#[test]
fn unknown_architecture_is_refused() {
    let model = tiny_model(Arch::Llama);
    edit_config(model.path(), |config| config["model_type"] = "mamba".into());
    let output = generate(model.path(), &[]);
    assert_one_line_error(
        &output,
        &["config.json", "unsupported model_type \"mamba\""],
    );
}

#[test]
fn bad_quantization_configs_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let options = FixtureOptions {
        size: Size::Tiny,
        arch: Arch::Llama,
        dtype: Dtype::F32,
        quantize: Some(Bits::Four),
        format: Format::Safetensors,
    };
    corral_fixture::generate(&options, dir.path()).unwrap();

    // A model-wide entry that disagrees with the tensors: mlx-lm 0.32.2 reads each layer the
    // config does not name from its tensors (`infer_quant_config`), and so does corral.
    edit_config(dir.path(), |config| {
        config["quantization"]["bits"] = 8.into()
    });
    let output = generate(dir.path(), &[]);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(0), "{stderr}");

    // A layer's own entry is believed: one its tensors contradict is refused.
    edit_config(dir.path(), |config| {
        config["quantization"]["model.layers.0.self_attn.q_proj"] =
            serde_json::json!({"group_size": 64, "bits": 8});
    });
    let output = generate(dir.path(), &[]);
    assert_one_line_error(
        &output,
        &["model.safetensors", "bad quantization", "uint32"],
    );
    edit_config(dir.path(), |config| {
        config["quantization"]
            .as_object_mut()
            .unwrap()
            .remove("model.layers.0.self_attn.q_proj");
    });

    edit_config(dir.path(), |config| {
        config["quantization"]["group_size"] = 100.into()
    });
    let output = generate(dir.path(), &[]);
    assert_one_line_error(&output, &["config.json", "group_size 100"]);

    edit_config(dir.path(), |config| {
        config.as_object_mut().unwrap().remove("quantization");
    });
    let output = generate(dir.path(), &[]);
    assert_one_line_error(&output, &["config.json has no quantization"]);
}

#[test]
fn truncated_safetensors_is_reported_not_aborted() {
    let model = tiny_model(Arch::Llama);
    let path = model.path().join("model.safetensors");
    let bytes = std::fs::read(&path).unwrap();
    std::fs::write(&path, &bytes[..bytes.len() - 4096]).unwrap();
    let output = generate(model.path(), &[]);
    assert_one_line_error(&output, &["model.safetensors", "truncated"]);
}

#[test]
fn garbage_safetensors_header_is_reported() {
    let model = tiny_model(Arch::Llama);
    let path = model.path().join("model.safetensors");
    let mut bytes = std::fs::read(&path).unwrap();
    bytes[8..40].copy_from_slice(&[b'#'; 32]);
    std::fs::write(&path, &bytes).unwrap();
    let output = generate(model.path(), &[]);
    assert_one_line_error(&output, &["model.safetensors", "corrupt safetensors"]);

    std::fs::write(&path, b"tiny").unwrap();
    let output = generate(model.path(), &[]);
    assert_one_line_error(&output, &["model.safetensors", "too short"]);
}

#[test]
fn missing_or_invalid_config_is_reported() {
    let model = tiny_model(Arch::Llama);
    let config = model.path().join("config.json");
    std::fs::write(&config, "{ not json").unwrap();
    let output = generate(model.path(), &[]);
    assert_one_line_error(&output, &["config.json"]);

    std::fs::remove_file(&config).unwrap();
    let output = generate(model.path(), &[]);
    assert_one_line_error(&output, &["config.json", "No such file"]);
}

#[test]
fn missing_model_directory_is_reported() {
    let output = generate(Path::new("/nonexistent/corral-model"), &[]);
    assert_one_line_error(
        &output,
        &[
            "/nonexistent/corral-model",
            "neither a model directory nor a GGUF file",
        ],
    );
}
