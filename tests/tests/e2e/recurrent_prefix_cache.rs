//! The prefix cache of a hybrid model (gated DeltaNet and attention layers) end to end: a long
//! conversation re-sent with one more turn restores the recurrent layers from the states the
//! first turn's tail kept at its prompt's end (or, resending the answer as generated, at its own
//! end) and prefills only the new tokens; after the worker was killed, from the SSD's boundary
//! snapshot of the first prompt's last whole block; answering as a worker without a cache does.
//!
//! The model is transformers' tiny Qwen3.5 (`tests/data/toolchain/qwen3_5/hf`) with its
//! embedding and head grown to the fixture tokenizer's vocabulary, so the real binaries serve it
//! with a chat template.

use std::ffi::OsStr;
use std::path::Path;

use corral_fixture::{Arch, Dtype, FixtureOptions, Format, Size};
use corral_tests::server::{Dirs, Server, alive};
use corral_tests::wait_until;
use mlx_rs::Array;
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use serde_json::{Value, json};

const MODEL: &str = "hybrid";
const BLOCK_TOKENS: u64 = 128;
/// The tensors with a row per token: the embedding and the untied head.
const PER_TOKEN: [&str; 2] = ["model.language_model.embed_tokens.weight", "lm_head.weight"];

/// The tiny Qwen3.5 under `models/hybrid`, with the tiny Llama fixture's tokenizer and template.
fn hybrid_dirs() -> Dirs {
    let models = tempfile::tempdir().unwrap();
    let dir = models.path().join(MODEL);
    let options = FixtureOptions {
        size: Size::Tiny,
        arch: Arch::Llama,
        dtype: Dtype::F32,
        quantize: None,
        format: Format::Safetensors,
    };
    corral_fixture::generate(&options, &dir).unwrap();
    for entry in std::fs::read_dir(&dir).unwrap().flatten() {
        if entry
            .path()
            .extension()
            .is_some_and(|ext| ext == "safetensors")
        {
            std::fs::remove_file(entry.path()).unwrap();
        }
    }
    let vocab =
        serde_json::from_str::<Value>(&std::fs::read_to_string(dir.join("config.json")).unwrap())
            .unwrap()["vocab_size"]
            .as_i64()
            .unwrap() as i32;
    let checkpoint = Path::new(env!("CARGO_MANIFEST_DIR")).join("data/toolchain/qwen3_5/hf");
    let mut config: Value =
        serde_json::from_str(&std::fs::read_to_string(checkpoint.join("config.json")).unwrap())
            .unwrap();
    config["text_config"]["vocab_size"] = json!(vocab);
    std::fs::write(dir.join("config.json"), config.to_string()).unwrap();
    let mut weights = Array::load_safetensors(checkpoint.join("model.safetensors")).unwrap();
    for (seed, name) in PER_TOKEN.into_iter().enumerate() {
        let rows = &weights[name];
        let key = mlx_rs::random::key(7 + seed as u64).unwrap();
        let added = mlx_rs::random::normal::<f32>(
            &[vocab - rows.dim(0), rows.dim(1)],
            None,
            Some(0.02),
            Some(&key),
        )
        .unwrap();
        let grown = mlx_rs::ops::concatenate(&[rows, &added], 0).unwrap();
        weights.insert(name.to_owned(), grown);
    }
    Array::save_safetensors(weights, None, dir.join("model.safetensors")).unwrap();
    Dirs {
        models,
        state: tempfile::tempdir().unwrap(),
    }
}

fn server_with(dirs: &Dirs, config: &str) -> Server {
    let path = dirs.write_config(config);
    Server::start_with(dirs, &[OsStr::new("--config"), path.as_os_str()])
}

/// Blocks of 128 tokens; prefill chunks of 200, so boundaries fall inside chunks.
fn cached_server(dirs: &Dirs) -> Server {
    server_with(
        dirs,
        &format!(
            "[prefix_cache]\nblock_tokens = {BLOCK_TOKENS}\n[batching]\nprefill_chunk = 200\n"
        ),
    )
}

/// A first turn of about `tokens` tokens, and the same conversation one turn later.
fn conversations(tokens: usize) -> (Value, Value) {
    // About three tokens a word with the fixture tokenizer.
    let long: String = (0..tokens / 3)
        .map(|i| format!("item{} ", i % 97))
        .collect();
    let first = json!([{"role": "user", "content": long}]);
    let second = json!([
        {"role": "user", "content": long},
        {"role": "assistant", "content": "Noted."},
        {"role": "user", "content": "Now summarise it in one line."},
    ]);
    (first, second)
}

/// Asks greedily for `max_tokens`; a model in its crash backoff is asked again after it.
fn ask(server: &Server, messages: &Value, max_tokens: u32) -> (String, Value) {
    let request =
        json!({"model": MODEL, "messages": messages, "max_tokens": max_tokens, "temperature": 0});
    server.chat_past_backoff(&request)
}

fn prefix_stats(server: &Server) -> Value {
    server.prefix_cache_stats()
}

fn cached_tokens(usage: &Value) -> u64 {
    usage["prompt_tokens_details"]["cached_tokens"]
        .as_u64()
        .unwrap()
}

/// The second turn restored every whole block of the first turn's prompt: what it prefilled is
/// its new turn plus at most the first prompt's last partial block.
fn assert_only_new_tokens_prefilled(first: &Value, second: &Value) {
    let first_prompt = first["prompt_tokens"].as_u64().unwrap();
    let prompt = second["prompt_tokens"].as_u64().unwrap();
    let cached = cached_tokens(second);
    assert_eq!(cached % BLOCK_TOKENS, 0, "{second}");
    assert!(
        cached >= first_prompt / BLOCK_TOKENS * BLOCK_TOKENS,
        "{first} then {second}"
    );
    assert!(
        prompt - cached < prompt - first_prompt + BLOCK_TOKENS,
        "{first} then {second}"
    );
}

/// What a worker without any cache answers.
fn cold_answer(dirs: &Dirs, messages: &Value, max_tokens: u32) -> String {
    let cold = Dirs {
        models: tempfile::tempdir().unwrap(),
        state: tempfile::tempdir().unwrap(),
    };
    let (from, to) = (
        dirs.models.path().join(MODEL),
        cold.models.path().join(MODEL),
    );
    std::fs::create_dir_all(&to).unwrap();
    for entry in std::fs::read_dir(from).unwrap().flatten() {
        std::fs::copy(entry.path(), to.join(entry.file_name())).unwrap();
    }
    let server = server_with(&cold, "[prefix_cache]\nenabled = false\n");
    let (text, usage) = ask(&server, messages, max_tokens);
    assert_eq!(cached_tokens(&usage), 0);
    text
}

/// The seed's scenario: an 8k-token conversation, then one more turn, from RAM and after a
/// SIGKILL from SSD. The first turn decodes across a boundary too (its 160 tokens span more than
/// a block), so decode-time snapshots are taken beside the prompt's.
#[test]
fn a_long_hybrid_conversation_resent_with_one_more_turn_prefills_only_the_new_turn() {
    let dirs = hybrid_dirs();
    let server = cached_server(&dirs);
    let (first, second) = conversations(8400);
    let (_, first_usage) = ask(&server, &first, 160);
    let first_prompt = first_usage["prompt_tokens"].as_u64().unwrap();
    assert!(first_prompt >= 8192, "{first_usage}");
    assert_eq!(cached_tokens(&first_usage), 0);

    let (text, usage) = ask(&server, &second, 16);
    assert_eq!(cached_tokens(&usage), first_prompt, "{usage}");
    let stats = prefix_stats(&server);
    assert_eq!(
        stats["hit_blocks"].as_u64().unwrap(),
        first_prompt / BLOCK_TOKENS,
        "{stats}"
    );
    let cold = cold_answer(&dirs, &second, 16);
    assert_eq!(text, cold);

    wait_until("the writer to persist the blocks", || {
        prefix_stats(&server)["backlog"].as_u64().unwrap_or(0) == 0
            && prefix_stats(&server)["saves_persisted"].as_u64().unwrap()
                >= first_prompt / BLOCK_TOKENS
    });
    let victim = server.worker_pids()[0];
    kill(Pid::from_raw(victim as i32), Signal::SIGKILL).unwrap();
    wait_until("the worker to be reaped", || {
        !alive(victim) && server.worker_pids().is_empty()
    });
    // A new worker: RAM is empty, the blocks and the snapshot come from SSD.
    let (text, usage) = ask(&server, &second, 16);
    assert_only_new_tokens_prefilled(&first_usage, &usage);
    let stats = prefix_stats(&server);
    assert_eq!(stats["load_errors"], 0, "{stats}");
    assert!(
        stats["hit_blocks"].as_u64().unwrap() >= first_prompt / BLOCK_TOKENS,
        "{stats}"
    );
    assert_eq!(text, cold);
    assert_ne!(server.worker_pids(), [victim]);
}

/// Every boundary inside the prefill (chunks of 200 tokens straddle them) and none in the
/// decode (one token is sampled and never run): the prompt's snapshots alone serve the next
/// turn.
#[test]
fn with_every_boundary_inside_the_prefill_and_none_in_the_decode_the_next_turn_restores() {
    let dirs = hybrid_dirs();
    let server = cached_server(&dirs);
    let (first, second) = conversations(2000);
    let (_, first_usage) = ask(&server, &first, 1);
    assert_eq!(first_usage["completion_tokens"], 1);
    let (text, usage) = ask(&server, &second, 8);
    assert_eq!(
        cached_tokens(&usage),
        first_usage["prompt_tokens"],
        "{usage}"
    );
    assert_eq!(text, cold_answer(&dirs, &second, 8));
}

/// The next turn resends the first answer as it was generated: it reuses the first prompt and
/// every generated token the worker ran (all but the last sampled), from the states the tail
/// kept at the sequence's end.
#[test]
fn a_next_turn_that_resends_the_answer_as_generated_reuses_the_whole_last_turn() {
    let dirs = hybrid_dirs();
    let server = cached_server(&dirs);
    let (first, _) = conversations(2000);
    let (answer, first_usage) = ask(&server, &first, 12);
    let second = json!([
        first[0],
        {"role": "assistant", "content": answer},
        {"role": "user", "content": "Now summarise it in one line."},
    ]);
    let (text, usage) = ask(&server, &second, 8);
    let ran = first_usage["prompt_tokens"].as_u64().unwrap()
        + first_usage["completion_tokens"].as_u64().unwrap()
        - 1;
    assert_eq!(cached_tokens(&usage), ran, "{first_usage} then {usage}");
    assert_eq!(text, cold_answer(&dirs, &second, 8));
}
