//! The model's own multi-token-prediction layer over HTTP: `speculative = "mtp"` on Qwen3.5 as
//! transformers writes it with the release's `mtp.*` layer (tests/data/mtp), against the same
//! checkpoint decoding plainly. SmolLM2's prompt lookup and draft model are `smollm2.rs`'s.

use corral_tests::server::{Dirs, Server};
use serde_json::{Value, json};

const MODEL: &str = "qwen3_5-mtp";

#[test]
fn the_models_mtp_layer_guesses_over_http_without_changing_a_word() {
    let checkpoint = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("data/mtp/qwen3_5");
    let answer = |config: &str| {
        let dirs = Dirs::generated([]);
        std::os::unix::fs::symlink(&checkpoint, dirs.models.path().join(MODEL)).unwrap();
        let config = dirs.write_config(config);
        let server = Server::start_with(&dirs, &["--config".as_ref(), config.as_os_str()]);
        let body: Value = server
            .post(
                "/v1/completions",
                &json!({
                    "model": MODEL,
                    "prompt": "the cat sat on the mat. the cat sat on",
                    "max_tokens": 48,
                    "temperature": 0,
                }),
            )
            .json()
            .unwrap();
        let text = body["choices"][0]["text"].as_str().unwrap().to_owned();
        (text, server.metrics(), server.get_json("/v1/models/status"))
    };
    let (plain, _, status) = answer("");
    let listed = &status["data"][0];
    assert_eq!(listed["mtp"], "kept", "{listed}");
    let (guessed, metrics, _) = answer(&format!("[models.\"{MODEL}\"]\nspeculative = \"mtp\"\n"));
    assert_eq!(guessed, plain);
    let drafted = metrics
        .lines()
        .find_map(|line| {
            line.strip_prefix(&format!(
                "corral_speculative_draft_tokens_total{{model=\"{MODEL}\"}} "
            ))
        })
        .and_then(|value| value.parse::<u64>().ok())
        .unwrap_or(0);
    assert!(drafted > 0, "{metrics}");
}
