//! SmolLM2-135M-Instruct as llama.cpp's own quantizer writes the recipes people download
//! (`Q4_K_M`: Q4_K, Q6_K, Q5_0 and Q8_0 tensors; `Q5_K_M`: Q5_K, Q6_K, Q5_1 and Q8_0; `Q6_K`:
//! Q6_K and Q8_0), which `cargo xtask setup` makes from the Q4_1 model, against llama.cpp's greedy
//! answers on the same files (`tests/data/smollm2_requantized.json`, written by
//! `cargo xtask reference`).
//!
//! The answers are compared step by step over llama.cpp's own sequence (prompt and answer in one
//! pass), not as free-running text: llama.cpp's CPU kernels quantize activations to 8 bits before
//! each quantized product and MLX does not, so where llama.cpp's top two tokens are nearly tied
//! the two engines may pick differently, and a free-running answer then goes its own way. That
//! happens at the very first token of the France chat on all three files (llama.cpp's lead: 0.15,
//! 0.25 and 0.01), as on the Q4_1 file (`smollm2.rs`). The rule is `smollm2.rs`'s: the same greedy
//! token wherever llama.cpp's lead is above 1.0. Measured: the same token at 286 of 307 steps over
//! the three files' five chats each, every other one where llama.cpp led by less than 1.0; the
//! test runs all five on Q4_K_M and the two longest answers on the others.

use corral_worker::gguf::GgufModel;
use serde_json::Value;

const REFERENCE: &str = include_str!("../../data/smollm2_requantized.json");
const PROMPTS: &str = include_str!("../../data/smollm2_reference.json");
const GREEDY_GAP: f32 = 1.0;
const FIRST_FILE: &str = "SmolLM2-135M-Instruct.Q4_K_M.gguf";
const LONGEST_ANSWERS: [&str; 2] = ["non_ascii", "code"];

fn ids(value: &Value) -> Vec<u32> {
    value
        .as_array()
        .unwrap()
        .iter()
        .map(|id| id.as_u64().unwrap() as u32)
        .collect()
}

#[test]
fn greedy_tokens_on_llama_cpp_s_k_quant_files_agree_with_llama_cpp_s_wherever_it_leads_clearly() {
    let reference: Value = serde_json::from_str(REFERENCE).unwrap();
    let prompts: Value = serde_json::from_str(PROMPTS).unwrap();
    let (mut steps, mut same) = (0, 0);
    for model in reference["models"].as_array().unwrap() {
        let file = model["file"].as_str().unwrap();
        let recipe = file
            .strip_prefix("SmolLM2-135M-Instruct.")
            .and_then(|rest| rest.strip_suffix(".gguf"))
            .unwrap();
        let loaded = GgufModel::load(&corral_tests::smollm2_requantized(recipe)).unwrap();
        for answer in model["answers"].as_array().unwrap() {
            let name = answer["name"].as_str().unwrap();
            // Every chat on the first file; on the others, whose tensor kinds any one chat runs
            // through, the two longest answers: MLX's CPU prefill takes about 0.1 s a token.
            if file != FIRST_FILE && !LONGEST_ANSWERS.contains(&name) {
                continue;
            }
            let chat = prompts["chats"]
                .as_array()
                .unwrap()
                .iter()
                .find(|chat| chat["name"] == name)
                .unwrap();
            let prompt = ids(&chat["prompt_token_ids"]);
            let greedy = ids(&answer["greedy_ids"]);
            let leads: Vec<f32> = answer["leads"]
                .as_array()
                .unwrap()
                .iter()
                .map(|lead| lead.as_f64().unwrap() as f32)
                .collect();
            let mut expected = greedy.clone();
            if answer["stopped_at_eos"].as_bool().unwrap() {
                expected.push(reference["eos_id"].as_u64().unwrap() as u32);
            }
            let tokens: Vec<u32> = prompt.iter().chain(&greedy).copied().collect();
            let mut cache = loaded.model.new_cache();
            let hidden = loaded.model.hidden_states(&tokens, &mut cache).unwrap();
            let logits = loaded
                .model
                .logits(&hidden)
                .unwrap()
                .as_dtype(mlx_rs::Dtype::Float32)
                .unwrap();
            logits.eval().unwrap();
            let vocab = *logits.shape().last().unwrap() as usize;
            let rows: Vec<&[f32]> = logits.as_slice::<f32>().chunks(vocab).collect();
            for (step, (&token, &lead)) in expected.iter().zip(&leads).enumerate() {
                let row = rows[prompt.len() - 1 + step];
                let ours = row
                    .iter()
                    .enumerate()
                    .max_by(|a, b| a.1.total_cmp(b.1))
                    .map(|(id, _)| id as u32)
                    .unwrap();
                steps += 1;
                if ours == token {
                    same += 1;
                } else {
                    assert!(
                        lead < GREEDY_GAP,
                        "{file}, {name}, step {step}: token {ours}, llama.cpp's {token} leads by {lead}"
                    );
                }
            }
        }
    }
    eprintln!("the same greedy token as llama.cpp at {same} of {steps} steps");
    assert!(steps >= 100, "{steps} steps compared");
}

/// The three files served by `corral serve`: before each worker starts, admission's estimate
/// (`estimate_bytes`: the weights as `corral-worker describe` sizes them, plus 5%, plus the
/// process base) is within 10% of the worker's footprint once it has answered a chat; and the
/// Q4_K_M file's weights take at most 1.3 times the file once loaded.
#[test]
fn served_k_quant_files_footprints_are_within_ten_percent_of_their_estimates() {
    use corral_tests::server::{Dirs, Server, chat};
    let dirs = Dirs::generated([]);
    let recipes = ["Q4_K_M", "Q5_K_M", "Q6_K"];
    for recipe in recipes {
        let gguf = corral_tests::smollm2_requantized(recipe);
        std::os::unix::fs::symlink(&gguf, dirs.models.path().join(gguf.file_name().unwrap()))
            .unwrap();
    }
    let server = Server::start(&dirs);
    let mib = |bytes: u64| bytes as f64 / f64::from(1 << 20);
    for recipe in recipes {
        let gguf = corral_tests::smollm2_requantized(recipe);
        let id = format!("SmolLM2-135M-Instruct.{recipe}");
        let estimate = server.worker_row(&id)["estimate_bytes"].as_u64().unwrap();
        let response = server.post("/v1/chat/completions", &chat(&id, 8, false));
        assert_eq!(response.status(), 200, "{id}");
        let footprint = server.worker_row(&id)["footprint_bytes"].as_u64().unwrap();
        let output = std::process::Command::new(corral_tests::binary("corral-worker"))
            .arg("describe")
            .arg(&gguf)
            .output()
            .unwrap();
        let description: Value = serde_json::from_slice(&output.stdout).unwrap();
        let weights = description["gguf_loaded_bytes"]["8bit"].as_u64().unwrap();
        let file = std::fs::metadata(&gguf).unwrap().len();
        let ratio = footprint as f64 / estimate as f64;
        eprintln!(
            "{recipe}: file {:.1} MiB, weights loaded {:.1} MiB ({:.3}x the file), estimate \
             {:.1} MiB, footprint {:.1} MiB ({ratio:.3}x the estimate, {:.3}x the file)",
            mib(file),
            mib(weights),
            weights as f64 / file as f64,
            mib(estimate),
            mib(footprint),
            footprint as f64 / file as f64,
        );
        assert!((0.9..=1.1).contains(&ratio), "{recipe}: {ratio}");
        if recipe == "Q4_K_M" {
            assert!(weights as f64 <= 1.3 * file as f64, "{weights} for {file}");
        }
    }
}
