//! The prefix KV cache end to end: a repeated long prompt is restored instead of prefilled, from
//! RAM and, after the worker was killed, from SSD; killing workers during heavy writes never
//! leaves a bad block to serve.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};

use corral_fixture::{Arch, Dtype, FixtureOptions, Format, Size};
use corral_tests::server::{Dirs, Server, alive};
use corral_tests::wait_until;
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use serde_json::{Value, json};

const BLOCK_TOKENS: u64 = 64;

fn server_with(dirs: &Dirs, config: &str) -> Server {
    let path = dirs.write_config(config);
    Server::start_with(dirs, &[OsStr::new("--config"), path.as_os_str()])
}

fn cached_server(dirs: &Dirs) -> Server {
    server_with(
        dirs,
        &format!("[prefix_cache]\nblock_tokens = {BLOCK_TOKENS}\n"),
    )
}

/// A long first turn of `words` words (700 make about 2,000 tokens), and the same conversation
/// one turn later.
fn conversations(words: usize) -> (Value, Value) {
    let long: String = (0..words).map(|i| format!("item{} ", i % 97)).collect();
    let first = json!([{"role": "user", "content": long}]);
    let second = json!([
        {"role": "user", "content": long},
        {"role": "assistant", "content": "Noted."},
        {"role": "user", "content": "Now summarise it in one line."},
    ]);
    (first, second)
}

/// Asks greedily; a model in its crash backoff (after the test killed its worker) is asked again
/// once the backoff has passed.
fn ask(server: &Server, messages: &Value) -> (String, Value) {
    let request =
        json!({"model": "llama", "messages": messages, "max_tokens": 16, "temperature": 0});
    server.chat_past_backoff(&request)
}

fn prefix_stats(server: &Server) -> Value {
    server.prefix_cache_stats()
}

/// What a worker without any cache answers.
fn cold_answer(dirs: &Dirs, messages: &Value) -> String {
    let cold = Dirs {
        models: tempfile::tempdir().unwrap(),
        state: tempfile::tempdir().unwrap(),
    };
    copy_dir(
        &dirs.models.path().join("llama"),
        &cold.models.path().join("llama"),
    );
    let server = server_with(&cold, "[prefix_cache]\nenabled = false\n");
    let (text, usage) = ask(&server, messages);
    assert_eq!(usage["prompt_tokens_details"]["cached_tokens"], 0);
    text
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap().flatten() {
        std::fs::copy(entry.path(), to.join(entry.file_name())).unwrap();
    }
}

fn assert_only_new_tokens_prefilled(first: &Value, second: &Value) {
    let first_prompt = first["prompt_tokens"].as_u64().unwrap();
    let prompt = second["prompt_tokens"].as_u64().unwrap();
    let cached = second["prompt_tokens_details"]["cached_tokens"]
        .as_u64()
        .unwrap();
    // Whole blocks of the first turn come from the cache; what is prefilled is the new turn plus
    // at most the first turn's last partial block.
    assert!(
        cached >= first_prompt - BLOCK_TOKENS,
        "{first} then {second}"
    );
    assert!(
        prompt - cached <= prompt - first_prompt + BLOCK_TOKENS,
        "{first} then {second}"
    );
}

/// Asks `second` of a new worker, whose RAM tier is empty: the first turn's `blocks` come from
/// SSD, none fails to load, and the answer is a cold worker's.
fn assert_second_turn_restored_from_ssd(
    server: &Server,
    dirs: &Dirs,
    first_usage: &Value,
    second: &Value,
    blocks: u64,
) {
    let (text, usage) = ask(server, second);
    assert_only_new_tokens_prefilled(first_usage, &usage);
    let stats = prefix_stats(server);
    assert!(
        stats["hit_blocks"].as_u64().unwrap() >= blocks - 1,
        "{stats}"
    );
    assert_eq!(stats["load_errors"], 0, "{stats}");
    assert_eq!(text, cold_answer(dirs, second));
}

#[test]
fn a_repeated_prefix_prefills_only_the_new_turn_and_answers_as_a_cold_worker_does() {
    let dirs = Dirs::with_models(&[Arch::Llama]);
    let server = cached_server(&dirs);
    let (first, second) = conversations(700);
    let (_, first_usage) = ask(&server, &first);
    assert!(first_usage["prompt_tokens"].as_u64().unwrap() >= 2000);
    assert_eq!(first_usage["prompt_tokens_details"]["cached_tokens"], 0);
    let (text, usage) = ask(&server, &second);
    assert_only_new_tokens_prefilled(&first_usage, &usage);
    let stats = prefix_stats(&server);
    assert!(stats["hit_blocks"].as_u64().unwrap() >= 30, "{stats}");
    let metrics = server.metrics();
    let hits = format!(
        "corral_prefix_cache_hit_blocks_total{{model=\"llama\"}} {}",
        stats["hit_blocks"]
    );
    assert!(metrics.contains(&hits), "{hits} not in {metrics}");
    assert_eq!(text, cold_answer(&dirs, &second));
}

#[test]
fn after_a_sigkill_the_new_worker_restores_the_prefix_from_ssd() {
    let dirs = Dirs::with_models(&[Arch::Llama]);
    let server = cached_server(&dirs);
    let (first, second) = conversations(700);
    let (_, first_usage) = ask(&server, &first);
    assert!(first_usage["prompt_tokens"].as_u64().unwrap() >= 2000);
    let blocks = first_usage["prompt_tokens"].as_u64().unwrap() / BLOCK_TOKENS;
    wait_until("the writer to persist the blocks", || {
        prefix_stats(&server)["saves_persisted"].as_u64().unwrap() >= blocks
    });
    let victim = server.worker_pids()[0];
    kill(Pid::from_raw(victim as i32), Signal::SIGKILL).unwrap();
    wait_until("the worker to be reaped", || {
        !alive(victim) && server.worker_pids().is_empty()
    });

    assert_second_turn_restored_from_ssd(&server, &dirs, &first_usage, &second, blocks);
    assert_ne!(server.worker_pids(), [victim]);
}

#[test]
fn a_bf16_models_blocks_take_half_the_f32_bytes_and_restore_from_ssd_after_a_sigkill() {
    let dirs = Dirs::generated([FixtureOptions {
        size: Size::Tiny,
        arch: Arch::Llama,
        dtype: Dtype::Bf16,
        quantize: None,
        format: Format::Safetensors,
    }]);
    let server = cached_server(&dirs);
    // Shorter than the f32 tests' prompt: MLX's CPU backend prefills bf16 far more slowly.
    let (first, second) = conversations(250);
    let (_, first_usage) = ask(&server, &first);
    let blocks = first_usage["prompt_tokens"].as_u64().unwrap() / BLOCK_TOKENS;
    assert!(blocks >= 8, "{first_usage}");
    wait_until("the writer to persist the blocks", || {
        prefix_stats(&server)["saves_persisted"].as_u64().unwrap() >= blocks
    });
    // 4 layers x (keys + values) x 4 kv heads x 64 tokens x 32 dims x 2 bytes: 128 KiB, where an
    // f32 block is 256 KiB; then one byte saying the block carries no recurrent snapshot.
    let dir = block_dir(&server.state_dir).expect("a block directory");
    for entry in std::fs::read_dir(&dir).unwrap().flatten() {
        if entry.path().extension().is_some_and(|ext| ext == "kvb") {
            let header = corral_worker::prefix_cache::disk::inspect(&entry.path()).unwrap();
            assert_eq!(
                header.payload_len,
                (128 << 10) + 1,
                "{}",
                entry.path().display()
            );
        }
    }
    let victim = server.worker_pids()[0];
    let killed = server.post("/admin/workers/llama/kill?signal=SIGKILL", &json!({}));
    assert_eq!(killed.status(), 200);
    assert!(!alive(victim));

    assert_second_turn_restored_from_ssd(&server, &dirs, &first_usage, &second, blocks);
}

/// The one model directory under the cache root.
fn block_dir(state: &Path) -> Option<PathBuf> {
    std::fs::read_dir(state.join("kv-cache"))
        .ok()?
        .flatten()
        .map(|entry| entry.path())
        .find(|path| path.is_dir())
}

#[test]
fn sigkills_during_heavy_writes_never_leave_a_bad_block_or_an_overfull_directory() {
    let dirs = Dirs::with_models(&[Arch::Llama]);
    // Blocks of 64 tokens of the tiny model are 256 KiB on disk; 2 MiB holds eight.
    let limit: u64 = 2 << 20;
    let block_bytes: u64 = 256 << 10;
    let server = server_with(
        &dirs,
        &format!("[prefix_cache]\nblock_tokens = {BLOCK_TOKENS}\ndisk = {limit}\n"),
    );
    let prompts: Vec<Value> = (0..8)
        .map(|round| {
            let text: String = (0..400).map(|i| format!("r{round}w{} ", i % 89)).collect();
            json!([{"role": "user", "content": text}])
        })
        .collect();
    for (round, prompt) in prompts.iter().enumerate() {
        let (_, usage) = ask(&server, prompt);
        assert!(usage["prompt_tokens"].as_u64().unwrap() > 10 * BLOCK_TOKENS);
        // SIGKILL while the writer still has blocks queued or half written; through the admin
        // API, which waits for the reap and sets no crash backoff for the next round.
        let killed = server.post("/admin/workers/llama/kill?signal=SIGKILL", &json!({}));
        assert_eq!(killed.status(), 200);
        assert!(server.worker_pids().is_empty());
        let dir = block_dir(&server.state_dir).expect("a block directory");
        let mut total = 0;
        for entry in std::fs::read_dir(&dir).unwrap().flatten() {
            let path = entry.path();
            if path.extension().is_some_and(|ext| ext == "kvb") {
                corral_worker::prefix_cache::disk::inspect(&path)
                    .unwrap_or_else(|error| panic!("round {round}: {}: {error}", path.display()));
                total += entry.metadata().unwrap().len();
            }
        }
        assert!(
            total <= limit + block_bytes + 4096,
            "round {round}: {total} bytes on disk, limit {limit}"
        );
    }
    // What is on disk now is served, and served right.
    let last = prompts.last().unwrap();
    let (text, usage) = ask(&server, last);
    let stats = prefix_stats(&server);
    assert_eq!(stats["load_errors"], 0, "{stats}");
    assert!(
        usage["prompt_tokens_details"]["cached_tokens"]
            .as_u64()
            .is_some()
    );
    assert_eq!(text, cold_answer(&dirs, last));
}
