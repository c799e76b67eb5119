//! The model's own multi-token-prediction layer over HTTP: `speculative = "mtp"` on Qwen3.5 as
//! transformers writes it with the release's `mtp.*` layer (tests/data/mtp), in the model's
//! configuration and in a request, against the same checkpoint decoding plainly. SmolLM2's
//! prompt lookup and draft model are `smollm2.rs`'s.

use corral_tests::server::{Dirs, Server};
use serde_json::{Value, json};

const MODEL: &str = "qwen3_5-mtp";

fn completion(speculative: Option<&str>) -> Value {
    let mut body = json!({
        "model": MODEL,
        "prompt": "the cat sat on the mat. the cat sat on",
        "max_tokens": 48,
        "temperature": 0,
    });
    if let Some(method) = speculative {
        body["speculative"] = json!(method);
    }
    body
}

fn drafted_tokens(server: &Server) -> u64 {
    let metrics = server.metrics();
    let prefix = format!("corral_speculative_draft_tokens_total{{model=\"{MODEL}\"}} ");
    metrics
        .lines()
        .find_map(|line| line.strip_prefix(&prefix))
        .and_then(|value| value.parse().ok())
        .unwrap_or(0)
}

#[test]
fn the_models_mtp_layer_guesses_over_http_without_changing_a_word() {
    let checkpoint = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("data/mtp/qwen3_5");
    let start = |config: &str| {
        let dirs = Dirs::generated([]);
        std::os::unix::fs::symlink(&checkpoint, dirs.models.path().join(MODEL)).unwrap();
        let config = dirs.write_config(config);
        let server = Server::start_with(&dirs, &["--config".as_ref(), config.as_os_str()]);
        (dirs, server)
    };
    let text = |server: &Server, speculative| {
        let body: Value = server
            .post("/v1/completions", &completion(speculative))
            .json()
            .unwrap();
        body["choices"][0]["text"].as_str().unwrap().to_owned()
    };

    // No method configured: plain decoding on this CPU, and a request may ask for the layer.
    let (_dirs, server) = start("");
    let listed = &server.get_json("/v1/models/status")["data"][0];
    assert_eq!(listed["mtp"], "kept", "{listed}");
    let plain = text(&server, None);
    assert_eq!(drafted_tokens(&server), 0);
    assert_eq!(text(&server, Some("mtp")), plain);
    assert!(drafted_tokens(&server) > 0, "{}", server.metrics());
    // A way the model cannot guess, or none corral knows, is the request's error.
    for (method, says) in [("draft", "no draft model"), ("eagle", "unknown variant")] {
        let response = server.post("/v1/completions", &completion(Some(method)));
        assert_eq!(response.status(), 400, "{method}");
        let body: Value = response.json().unwrap();
        let message = body["error"]["message"].as_str().unwrap();
        assert!(message.contains(says), "{method}: {body}");
    }
    drop(server);

    // Configured for the model.
    let (_dirs, server) = start(&format!("[models.\"{MODEL}\"]\nspeculative = \"mtp\"\n"));
    assert_eq!(text(&server, None), plain);
    assert!(drafted_tokens(&server) > 0, "{}", server.metrics());
}
