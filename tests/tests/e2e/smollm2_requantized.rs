//! SmolLM2-135M-Instruct as llama.cpp's own quantizer writes the recipes people download
//! (`Q4_K_M`: Q4_K, Q6_K, Q5_0 and Q8_0 tensors; `Q5_K_M`: Q5_K, Q6_K, Q5_1 and Q8_0; `Q6_K`:
//! Q6_K and Q8_0), which `cargo xtask setup` makes from the Q4_1 model, served by `corral serve`
//! as a user would: the greedy answers equal llama.cpp's on the same files
//! (`tests/data/smollm2_requantized.json`, written by `cargo xtask reference`).

use std::path::Path;
use std::process::Command;

use corral_tests::binary;
use corral_tests::server::{Dirs, Server};
use serde_json::{Value, json};

const REFERENCE: &str = include_str!("../../data/smollm2_requantized.json");

fn serve(recipe: &str) -> (Dirs, Server, String) {
    let dirs = Dirs::generated([]);
    let gguf = corral_tests::smollm2_requantized(recipe);
    let server = Server::start_with_env(&dirs, &[], &[("CORRAL_DEFAULT_MODEL", gguf.as_os_str())]);
    let models = server.get_json("/v1/models");
    let id = models["data"][0]["id"].as_str().unwrap().to_owned();
    (dirs, server, id)
}

#[test]
fn greedy_answers_on_llama_cpp_s_k_quant_files_equal_llama_cpp_s() {
    let reference: Value = serde_json::from_str(REFERENCE).unwrap();
    let max_tokens = reference["max_tokens"].as_u64().unwrap();
    let mut differing = Vec::new();
    let mut compared = 0;
    let mut memory = Vec::new();
    for model in reference["models"].as_array().unwrap() {
        let file = model["file"].as_str().unwrap();
        let recipe = file
            .strip_prefix("SmolLM2-135M-Instruct.")
            .and_then(|rest| rest.strip_suffix(".gguf"))
            .unwrap();
        let (_dirs, server, id) = serve(recipe);
        let gguf = corral_tests::smollm2_requantized(recipe);
        for answer in model["answers"].as_array().unwrap() {
            let body: Value = server
                .post(
                    "/v1/chat/completions",
                    &json!({
                        "model": id,
                        "messages": answer["messages"],
                        "max_tokens": max_tokens,
                        "temperature": 0,
                    }),
                )
                .json()
                .unwrap();
            let text = body["choices"][0]["message"]["content"].as_str().unwrap();
            let tokens = body["usage"]["completion_tokens"].as_u64().unwrap();
            let expected = answer["greedy_text"].as_str().unwrap();
            let expected_tokens = answer["greedy_ids"].as_array().unwrap().len() as u64;
            let finish = if answer["stopped_at_eos"].as_bool().unwrap() {
                "stop"
            } else {
                "length"
            };
            compared += 1;
            if text != expected
                || tokens != expected_tokens
                || body["choices"][0]["finish_reason"] != finish
            {
                differing.push(format!(
                    "{file}, {}: {text:?} ({tokens} tokens) against llama.cpp's {expected:?} \
                     ({expected_tokens} tokens; its leads {})",
                    answer["name"], answer["leads"]
                ));
            }
        }
        memory.push(footprint(&server, &id, &gguf));
    }
    for line in &memory {
        eprintln!("{line}");
    }
    assert!(compared >= 15, "{compared} answers compared");
    assert!(differing.is_empty(), "{}", differing.join("\n"));
}

/// The supervisor's estimate before the start (the weights as `corral-worker describe` sizes them
/// for the default `gguf_requantize`, plus 5%) beside the worker's footprint once it has answered.
fn footprint(server: &Server, id: &str, gguf: &Path) -> String {
    let output = Command::new(binary("corral-worker"))
        .arg("describe")
        .arg(gguf)
        .output()
        .unwrap();
    let description: Value = serde_json::from_slice(&output.stdout).unwrap();
    let weights = description["gguf_loaded_bytes"]["8bit"].as_u64().unwrap();
    let estimate = weights * 105 / 100;
    let footprint = server.worker_row(id)["footprint_bytes"].as_u64().unwrap();
    let file = std::fs::metadata(gguf).unwrap().len();
    let mib = |bytes: u64| bytes as f64 / f64::from(1 << 20);
    format!(
        "{}: file {:.1} MiB, weights loaded {:.1} MiB ({:.2}x the file), estimate {:.1} MiB, \
         footprint {:.1} MiB ({:.2}x the estimate, {:.2}x the file)",
        gguf.display(),
        mib(file),
        mib(weights),
        weights as f64 / file as f64,
        mib(estimate),
        mib(footprint),
        footprint as f64 / estimate as f64,
        footprint as f64 / file as f64,
    )
}
