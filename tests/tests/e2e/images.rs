//! Images through all three APIs to the real `corral` and a text-only model's worker: a data URL
//! and an image fetched from a server on 127.0.0.1 reach the worker, whose refusal names each
//! image where the client put it (so the bytes and their location crossed the IPC); malformed
//! images and too many of them are refused by the supervisor in the called API's shape.

use axum::Router;
use axum::http::header;
use axum::routing::get;
use corral_fixture::Arch;
use corral_tests::loopback::Loopback;
use corral_tests::server::{Dirs, Server};
use serde_json::{Value, json};

/// A PNG signature and header start: enough for the supervisor, which never decodes an image.
const PNG_BASE64: &str = "iVBORw0KGgoAAAANSUhEUg==";

fn data_url() -> String {
    format!("data:image/png;base64,{PNG_BASE64}")
}

/// `status` and the error's message, from the OpenAI shape or Anthropic's.
fn refusal(server: &Server, path: &str, body: Value) -> (u16, String) {
    let response = server.post(path, &body);
    let status = response.status().as_u16();
    let answer: Value = response.json().expect("a JSON error");
    if path.starts_with("/v1/messages") {
        assert_eq!(answer["type"], "error", "{answer}");
        assert_eq!(answer["error"]["type"], "invalid_request_error", "{answer}");
    } else {
        assert_eq!(answer["error"]["type"], "invalid_request_error", "{answer}");
    }
    let message = answer["error"]["message"].as_str().expect("a message");
    (status, message.to_owned())
}

#[test]
fn images_reach_a_text_only_models_worker_through_every_api_and_are_refused_by_location() {
    let images = Loopback::serve(Router::new().route(
        "/cat.png",
        get(|| async {
            let png = [0x89, b'P', b'N', b'G', b'\r', b'\n', 0x1a, b'\n'];
            ([(header::CONTENT_TYPE, "image/png")], png.to_vec())
        }),
    ));
    let fetched = format!("http://{}/cat.png", images.address);
    let dirs = Dirs::with_models(&[Arch::Qwen3]);
    let config = dirs.write_config("[models.qwen3]\nmax_images = 2\n");
    let server = Server::start_with(&dirs, &["--config".as_ref(), config.as_os_str()]);
    let takes_none =
        |location: &str| format!("model `qwen3` takes no images (image at {location})");

    let chat = json!({"model": "qwen3", "max_tokens": 4, "messages": [
        {"role": "user", "content": "Hi"},
        {"role": "user", "content": [
            {"type": "text", "text": "What is this?"},
            {"type": "image_url", "image_url": {"url": fetched}},
            {"type": "image_url", "image_url": {"url": data_url()}},
        ]},
    ]});
    let (status, message) = refusal(&server, "/v1/chat/completions", chat);
    assert_eq!(
        (status, message.as_str()),
        (400, &*takes_none("messages[1].content[1]"))
    );

    let anthropic = json!({"model": "qwen3", "max_tokens": 4, "messages": [
        {"role": "user", "content": [
            {"type": "image", "source": {"type": "base64", "media_type": "image/png",
                                          "data": PNG_BASE64}},
        ]},
    ]});
    let (status, message) = refusal(&server, "/v1/messages", anthropic.clone());
    assert_eq!(
        (status, message.as_str()),
        (400, &*takes_none("messages[0].content[0]"))
    );
    let (status, message) = refusal(&server, "/v1/messages/count_tokens", anthropic);
    assert_eq!(
        (status, message.as_str()),
        (400, &*takes_none("messages[0].content[0]"))
    );

    let responses = json!({"model": "qwen3", "input": [
        {"role": "user", "content": [
            {"type": "input_text", "text": "What is this?"},
            {"type": "input_image", "image_url": data_url()},
        ]},
    ]});
    let (status, message) = refusal(&server, "/v1/responses", responses);
    assert_eq!(
        (status, message.as_str()),
        (400, &*takes_none("input[0].content[1]"))
    );

    // Malformed and too many: the supervisor's answers, in each API's shape.
    let bad = json!({"model": "qwen3", "messages": [{"role": "user", "content": [
        {"type": "image_url", "image_url": {"url": "data:image/png;base64,%%%"}}]}]});
    let (status, message) = refusal(&server, "/v1/chat/completions", bad);
    assert_eq!(status, 400);
    assert!(
        message.starts_with("messages[0].content[0]: the image's base64 is invalid"),
        "{message}"
    );
    let not_image = json!({"model": "qwen3", "max_tokens": 4, "messages": [{"role": "user",
        "content": [{"type": "image", "source": {"type": "base64",
                     "media_type": "text/plain", "data": "aGk="}}]}]});
    let (status, message) = refusal(&server, "/v1/messages", not_image);
    assert_eq!(status, 400);
    assert!(
        message.contains("media type `text/plain` is not an image type"),
        "{message}"
    );
    let by_file = json!({"model": "qwen3", "input": [{"role": "user", "content": [
        {"type": "input_image", "file_id": "file-1"}]}]});
    let (status, message) = refusal(&server, "/v1/responses", by_file);
    assert_eq!(status, 400);
    assert!(
        message.starts_with("input[0].content[0]: images by file_id"),
        "{message}"
    );
    let three = json!({"type": "input_image", "image_url": data_url()});
    let too_many = json!({"model": "qwen3", "input": [{"role": "user",
        "content": [three.clone(), three.clone(), three]}]});
    let (status, message) = refusal(&server, "/v1/responses", too_many);
    assert_eq!(status, 400);
    assert!(
        message.ends_with("max_images of 2 (the first one too many at input[0].content[2])"),
        "{message}"
    );

    // The same server still answers text.
    let text = json!({"model": "qwen3", "max_tokens": 2,
        "messages": [{"role": "user", "content": "Hi"}]});
    assert_eq!(server.post("/v1/chat/completions", &text).status(), 200);
}

fn vision_data() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("data/vision")
}

/// The vision checkpoint transformers made (tests/data/vision/qwen3_5/hf), served as `name`.
pub(crate) fn vision_model(dirs: &Dirs, name: &str) {
    vision_model_from(dirs, name, "qwen3_5/hf");
}

/// The checkpoint in tests/data/vision/`fixture`, served as `name`.
pub(crate) fn vision_model_from(dirs: &Dirs, name: &str, fixture: &str) {
    let from = vision_data().join(fixture);
    let to = dirs.models.path().join(name);
    std::fs::create_dir_all(&to).unwrap();
    for file in std::fs::read_dir(&from).unwrap() {
        let file = file.unwrap();
        std::fs::copy(file.path(), to.join(file.file_name())).unwrap();
    }
}

fn image_base64(file: &str) -> String {
    use base64::Engine;
    let bytes = std::fs::read(vision_data().join("images").join(file)).unwrap();
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

/// transformers' log-probability of each greedy token of reference case `case`.
fn reference_logprobs(case: &str) -> Vec<f32> {
    fixture_logprobs("qwen3_5/hf", case)
}

/// The log-probability of each greedy token of case `case` in the reference of `fixture`.
fn fixture_logprobs(fixture: &str, case: &str) -> Vec<f32> {
    fixture_top_logprobs(fixture, case, 1)
        .into_iter()
        .map(|top| top[0])
        .collect()
}

/// The `count` highest log-probabilities at each greedy step of case `case` in the reference of
/// `fixture`, highest first.
fn fixture_top_logprobs(fixture: &str, case: &str, count: usize) -> Vec<Vec<f32>> {
    let reference =
        mlx_rs::Array::load_safetensors(vision_data().join(fixture).join("reference.safetensors"))
            .unwrap();
    let rows =
        |name: &str| crate::reference_logits::host_rows(&reference[&format!("{case}.{name}")]);
    let steps = reference[&format!("{case}.decoded")].size();
    let mut rows_at_steps = vec![rows("logits").last().unwrap().clone()];
    rows_at_steps.extend(rows("decode_logits"));
    rows_at_steps
        .into_iter()
        .take(steps)
        .map(|row| {
            let top = row.iter().copied().fold(f32::NEG_INFINITY, f32::max);
            let total: f32 = row.iter().map(|logit| (logit - top).exp()).sum();
            let mut logprobs: Vec<f32> = row.iter().map(|logit| logit - top - total.ln()).collect();
            logprobs.sort_by(|a, b| b.total_cmp(a));
            logprobs.truncate(count);
            logprobs
        })
        .collect()
}

/// `answer`'s log-probabilities are `expected`'s, step by step, within 1e-3.
fn assert_logprobs(answer: &Value, expected: &[f32]) {
    let got = logprobs_of(answer);
    assert_eq!(got.len(), expected.len(), "{answer}");
    for (step, (got, expected)) in got.iter().zip(expected).enumerate() {
        assert!(
            (got - expected).abs() < 1e-3,
            "step {step}: {got} against {expected}"
        );
    }
}

fn logprobs_of(answer: &Value) -> Vec<f32> {
    answer["choices"][0]["logprobs"]["content"]
        .as_array()
        .expect("logprobs")
        .iter()
        .map(|token| token["logprob"].as_f64().unwrap() as f32)
        .collect()
}

#[test]
fn a_vision_model_reads_images_from_every_api_as_transformers_and_caches_them_by_their_pixels() {
    let dirs = Dirs::with_models(&[]);
    vision_model(&dirs, "qwen3_5-vl");
    // Blocks of 16 tokens, so that the 73-token prompt leaves whole blocks in the cache.
    let config = dirs.write_config("[prefix_cache]\nblock_tokens = 16\n");
    let server = Server::start_with(&dirs, &["--config".as_ref(), config.as_os_str()]);
    let listed = server.get_json("/v1/models/qwen3_5-vl");
    assert_eq!(listed["vision"], true, "{listed}");
    let wide = format!("data:image/png;base64,{}", image_base64("wide.png"));
    // Reference case (a): text, then `wide.png`.
    let chat = |image: &str| {
        json!({"model": "qwen3_5-vl", "max_tokens": 8, "temperature": 0, "logprobs": true,
            "messages": [{"role": "user", "content": [
                {"type": "text", "text": "What is in this picture?"},
                {"type": "image_url", "image_url": {"url": image}}]}]})
    };
    let first: Value = server
        .post("/v1/chat/completions", &chat(&wide))
        .json()
        .unwrap();
    assert_eq!(first["usage"]["prompt_tokens"], 73, "{first}");
    let expected = reference_logprobs("a");
    assert_logprobs(&first, &expected);

    // Sent again, the image's tokens come from the prefix cache: the whole blocks of the prompt.
    let again: Value = server
        .post("/v1/chat/completions", &chat(&wide))
        .json()
        .unwrap();
    let cached = again["usage"]["prompt_tokens_details"]["cached_tokens"]
        .as_u64()
        .unwrap();
    assert!(cached >= 64, "{again}");
    assert_eq!(logprobs_of(&again).len(), expected.len());

    // Another picture of the same size gives the same tokens but not the same cache: only the
    // text before the image is reused.
    let alpha = format!("data:image/png;base64,{}", image_base64("alpha.png"));
    let gif = format!("data:image/gif;base64,{}", image_base64("animated.gif"));
    let ask = |image: &str| -> Value {
        let body = json!({"model": "qwen3_5-vl", "max_tokens": 2, "temperature": 0, "messages": [
            {"role": "user", "content": [{"type": "image_url", "image_url": {"url": image}}]}]});
        server.post("/v1/chat/completions", &body).json().unwrap()
    };
    let (first_alpha, gif_answer) = (ask(&alpha), ask(&gif));
    assert_eq!(
        first_alpha["usage"]["prompt_tokens"],
        gif_answer["usage"]["prompt_tokens"]
    );
    assert_eq!(
        gif_answer["usage"]["prompt_tokens_details"]["cached_tokens"], 0,
        "{gif_answer}"
    );

    // The same request through Anthropic's and OpenAI's Responses shapes answers alike.
    let answer_text = first["choices"][0]["message"]["reasoning_content"].clone();
    let anthropic = json!({"model": "qwen3_5-vl", "max_tokens": 8, "temperature": 0,
        "messages": [{"role": "user", "content": [
            {"type": "text", "text": "What is in this picture?"},
            {"type": "image", "source": {"type": "base64", "media_type": "image/png",
                                         "data": image_base64("wide.png")}}]}]});
    let answer: Value = server.post("/v1/messages", &anthropic).json().unwrap();
    // Anthropic counts the cached tokens apart.
    let usage = &answer["usage"];
    let read = |key: &str| usage[key].as_u64().unwrap();
    assert_eq!(
        read("input_tokens") + read("cache_read_input_tokens"),
        73,
        "{answer}"
    );
    let thinking = answer["content"][0]["thinking"].clone();
    assert_eq!(thinking, answer_text, "{answer}");
    let responses = json!({"model": "qwen3_5-vl", "max_output_tokens": 8, "temperature": 0,
        "input": [{"role": "user", "content": [
            {"type": "input_text", "text": "What is in this picture?"},
            {"type": "input_image", "image_url": wide}]}]});
    let answer: Value = server.post("/v1/responses", &responses).json().unwrap();
    assert_eq!(answer["usage"]["input_tokens"], 73, "{answer}");

    // The tower encoded `wide.png` once, whichever API sent it, and each other picture once.
    let metrics = server.metrics();
    let encoded = "corral_images_encoded_total{model=\"qwen3_5-vl\"} 3";
    assert!(metrics.contains(encoded), "{encoded} not in {metrics}");
    assert!(
        metrics.contains("corral_image_encode_seconds_count{model=\"qwen3_5-vl\"} 3"),
        "{metrics}"
    );

    // An undecodable image is refused in the API's shape, naming where it was.
    let (status, message) = refusal(&server, "/v1/chat/completions", chat(&data_url()));
    assert_eq!(status, 400);
    assert!(
        message.starts_with("image at messages[0].content[1]: cannot decode"),
        "{message}"
    );
    // With a text request beside it in the batch, the image's answer is the same.
    let fresh = format!("data:image/webp;base64,{}", image_base64("square.webp"));
    let text = json!({"model": "qwen3_5-vl", "max_tokens": 24, "temperature": 0,
        "messages": [{"role": "user", "content": "Say a long sentence."}]});
    let (alone, beside) = std::thread::scope(|scope| {
        let text = scope.spawn(|| server.post("/v1/chat/completions", &text).status());
        let imaged: Value = server
            .post("/v1/chat/completions", &chat(&fresh))
            .json()
            .unwrap();
        assert_eq!(text.join().unwrap(), 200);
        let alone: Value = server
            .post("/v1/chat/completions", &chat(&fresh))
            .json()
            .unwrap();
        (alone, imaged)
    });
    for (a, b) in logprobs_of(&alone).iter().zip(logprobs_of(&beside)) {
        assert!((a - b).abs() < 1e-4, "{alone} against {beside}");
    }

    // Claude Code returns a screenshot it read inside a tool result: the image's tokens reach
    // the model there too.
    let tool_round = json!({"model": "qwen3_5-vl", "max_tokens": 2, "messages": [
        {"role": "user", "content": "Read shot.png"},
        {"role": "assistant", "content": [
            {"type": "tool_use", "id": "toolu_1", "name": "Read", "input": {"file_path": "shot.png"}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": [
            {"type": "image", "source": {"type": "base64", "media_type": "image/png",
                                         "data": image_base64("wide.png")}}]}]}],
        "tools": [{"name": "Read", "description": "Reads a file",
                   "input_schema": {"type": "object", "properties": {"file_path": {"type": "string"}}}}]});
    let answer: Value = server
        .post("/v1/messages/count_tokens", &tool_round)
        .json()
        .unwrap();
    let with_image = answer["input_tokens"].as_u64().expect("a count");
    let mut without = tool_round.clone();
    without["messages"][2]["content"][0]["content"] = json!("");
    let answer: Value = server
        .post("/v1/messages/count_tokens", &without)
        .json()
        .unwrap();
    // `wide.png` is 40 tokens between the vision markers.
    assert!(
        with_image >= answer["input_tokens"].as_u64().unwrap() + 40,
        "{with_image} {answer}"
    );
    assert_eq!(server.post("/v1/messages", &tool_round).status(), 200);
}

/// A prompt restored from the prefix cache partway through an image (its last tokens in a block
/// the new prompt does not share) answers as one computed whole by a worker without the cache.
#[test]
fn a_restore_that_ends_inside_an_image_answers_as_a_cold_prefill() {
    let ask = |server: &Server, question: &str| -> Value {
        let image = format!("data:image/jpeg;base64,{}", image_base64("tall.jpg"));
        let body = json!({"model": "qwen3_5-vl", "max_tokens": 6, "temperature": 0,
            "logprobs": true, "messages": [{"role": "user", "content": [
                {"type": "image_url", "image_url": {"url": image}},
                {"type": "text", "text": question}]}]});
        server.post("/v1/chat/completions", &body).json().unwrap()
    };
    let cold_dirs = Dirs::with_models(&[]);
    vision_model(&cold_dirs, "qwen3_5-vl");
    let config = cold_dirs.write_config("[prefix_cache]\nenabled = false\n");
    let cold = Server::start_with(&cold_dirs, &["--config".as_ref(), config.as_os_str()]);
    let expected = ask(&cold, "And how tall?");
    drop(cold);

    // `tall.jpg`'s 40 tokens are positions 5 to 44; blocks of 16 end at 16, 32 and 48, and the
    // block from 32 holds the image's last 13 tokens and the question's first, so the second
    // question restores 32 positions (with the recurrent layers' state at each boundary).
    let dirs = Dirs::with_models(&[]);
    vision_model(&dirs, "qwen3_5-vl");
    let config = dirs.write_config("[prefix_cache]\nblock_tokens = 16\nsnapshot_every = 1\n");
    let server = Server::start_with(&dirs, &["--config".as_ref(), config.as_os_str()]);
    ask(&server, "What is in it?");
    let restored = ask(&server, "And how tall?");
    let cached = &restored["usage"]["prompt_tokens_details"]["cached_tokens"];
    assert_eq!(cached, 32, "{restored}");
    let (got, want) = (logprobs_of(&restored), logprobs_of(&expected));
    assert_eq!(got.len(), want.len());
    for (a, b) in got.iter().zip(&want) {
        assert!((a - b).abs() < 1e-4, "{restored} against {expected}");
    }
}

/// Gemma 3's and Gemma 4's image tokens see each other both ways in the prompt (Gemma 4's on
/// its sliding layers only): a prompt restored from the prefix cache partway through an image
/// (from another prompt with the same picture) and one restored whole read as transformers
/// reads the prompt cold.
#[test]
fn gemmas_read_an_image_as_transformers_also_when_restored_partway_through_it() {
    let dirs = Dirs::with_models(&[]);
    vision_model_from(&dirs, "gemma3-vl", "gemma3/hf");
    vision_model_from(&dirs, "gemma4-vl", "gemma4/hf");
    let config = dirs.write_config("[prefix_cache]\nblock_tokens = 16\n");
    let server = Server::start_with(&dirs, &["--config".as_ref(), config.as_os_str()]);
    let wide = format!("data:image/png;base64,{}", image_base64("wide.png"));
    // Reference case (a) of each: its length, and the tokens restored when it follows another
    // question after the same picture, which shares the prompt up to the image's end: the
    // blocks of 16 before the shared prefix's end, which is inside the image (Gemma 3's 16
    // tokens are positions 24 to 39 of 51, Gemma 4's 65 are 27 to 91 of 113); asked again, all
    // but its last token.
    for (model, fixture, length, restores) in [
        ("gemma3-vl", "gemma3/hf", 51, [32, 50]),
        ("gemma4-vl", "gemma4/hf", 113, [80, 112]),
    ] {
        assert_eq!(
            server.get_json(&format!("/v1/models/{model}"))["vision"],
            true
        );
        let ask = |after_image: Option<&str>| -> Value {
            let mut content = vec![
                json!({"type": "text", "text": "What is in this picture?"}),
                json!({"type": "image_url", "image_url": {"url": wide}}),
            ];
            content.extend(after_image.map(|text| json!({"type": "text", "text": text})));
            let body = json!({"model": model, "max_tokens": 8, "temperature": 0,
                "logprobs": true, "top_logprobs": 3,
                "messages": [{"role": "user", "content": content}]});
            server.post("/v1/chat/completions", &body).json().unwrap()
        };
        ask(Some("Describe it."));
        // The greedy token is all but certain; the runners-up tell the readings apart.
        let expected = fixture_top_logprobs(fixture, "a", 3);
        for cached in restores {
            let answer = ask(None);
            assert_eq!(answer["usage"]["prompt_tokens"], length, "{answer}");
            let restored = &answer["usage"]["prompt_tokens_details"]["cached_tokens"];
            assert_eq!(restored, cached, "{answer}");
            let steps = answer["choices"][0]["logprobs"]["content"]
                .as_array()
                .unwrap();
            assert_eq!(steps.len(), expected.len(), "{answer}");
            for (step, (got, expected)) in steps.iter().zip(&expected).enumerate() {
                let got: Vec<f32> = got["top_logprobs"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|top| top["logprob"].as_f64().unwrap() as f32)
                    .collect();
                assert_eq!(got.len(), expected.len(), "{answer}");
                for (got, expected) in got.iter().zip(expected) {
                    assert!(
                        (got - expected).abs() < 1e-2,
                        "{model}, {cached} cached, step {step}: {got} against {expected}"
                    );
                }
            }
        }
        // The tower encoded the picture once.
        let metrics = server.metrics();
        let encoded = format!("corral_images_encoded_total{{model=\"{model}\"}} 1");
        assert!(metrics.contains(&encoded), "{encoded} not in {metrics}");
    }
}

/// Mistral 3 (Pixtral's tower) reads an image through chat completions as transformers does,
/// each row of the image's tokens broken at its line's end.
#[test]
fn mistral3_reads_an_image_as_transformers() {
    let dirs = Dirs::with_models(&[]);
    vision_model_from(&dirs, "mistral3-vl", "mistral3/hf");
    let server = Server::start(&dirs);
    assert_eq!(server.get_json("/v1/models/mistral3-vl")["vision"], true);
    // Reference case (a), with the system message the fixture's cases open with.
    let body = json!({"model": "mistral3-vl", "max_tokens": 8, "temperature": 0,
        "logprobs": true, "messages": [
            {"role": "system", "content": "Answer in one word."},
            {"role": "user", "content": [
                {"type": "text", "text": "What is in this picture?"},
                {"type": "image_url", "image_url": {
                    "url": format!("data:image/png;base64,{}", image_base64("wide.png"))}}]}]});
    let answer: Value = server.post("/v1/chat/completions", &body).json().unwrap();
    assert_eq!(answer["usage"]["prompt_tokens"], 48, "{answer}");
    assert_logprobs(&answer, &fixture_logprobs("mistral3/hf", "a"));
}

/// A GGUF with llama.cpp's vision projector beside it (the converter's files, in one folder as
/// LM Studio and the GGUF repositories keep them) is one vision model: its worker loads both,
/// and case (b), whose pictures llama.cpp's pixel limits leave at the checkpoint processor's
/// sizes, answers as transformers does on the same weights.
#[test]
fn a_gguf_and_its_projector_in_one_folder_read_images_as_transformers() {
    let dirs = Dirs::with_models(&[]);
    gguf_pair_in_a_folder(&dirs, "qwen3_5");
    let server = Server::start(&dirs);
    let listed = server.get_json("/v1/models/qwen3_5-vl-gguf");
    assert_eq!(listed["vision"], true, "{listed}");
    let image = |file: &str, kind: &str| {
        json!({"type": "image_url", "image_url": {
            "url": format!("data:image/{kind};base64,{}", image_base64(file))}})
    };
    // Reference case (b).
    let body = json!({"model": "qwen3_5-vl-gguf", "max_tokens": 8, "temperature": 0,
        "logprobs": true, "messages": [{"role": "user", "content": [
            image("tall.jpg", "jpeg"),
            {"type": "text", "text": "and then"},
            image("square.webp", "webp"),
            {"type": "text", "text": "which is taller?"}]}]});
    let answer: Value = server.post("/v1/chat/completions", &body).json().unwrap();
    assert_eq!(answer["usage"]["prompt_tokens"], 111, "{answer}");
    assert_logprobs(&answer, &reference_logprobs("b"));
}

/// llama.cpp's converter's GGUF and projector of fixture `name`, in a folder of their own in the
/// models directory, as LM Studio keeps them: the model `<name>-vl-gguf`.
fn gguf_pair_in_a_folder(dirs: &Dirs, name: &str) {
    let folder = dirs.models.path().join(format!("{name}-vl-gguf"));
    std::fs::create_dir_all(&folder).unwrap();
    for file in [
        format!("{name}-vl-F32.gguf"),
        format!("mmproj-{name}-vl-F32.gguf"),
    ] {
        std::fs::copy(
            vision_data().join(name).join("gguf").join(&file),
            folder.join(&file),
        )
        .unwrap();
    }
}

/// Gemma 3's, Gemma 4's and Mistral 3's GGUFs with llama.cpp's projectors take an image as its
/// tokens, sized as llama.cpp sizes them: reference case (a)'s prompt, whose picture (wide.png,
/// 61x23) is Gemma 3's 16 tokens, Gemma 4's 84 (llama.cpp's 14x6 squares; transformers' 65) and
/// Mistral 3's 3 lines of 8 merged patches, each ended by its break (27; transformers' 12).
#[test]
fn gemma_and_mistral_ggufs_with_their_projectors_take_images_as_llama_cpp_sizes_them() {
    let dirs = Dirs::with_models(&[]);
    for name in ["gemma3", "gemma4", "mistral3"] {
        gguf_pair_in_a_folder(&dirs, name);
    }
    let server = Server::start(&dirs);
    let wide = format!("data:image/png;base64,{}", image_base64("wide.png"));
    for (name, prompt_tokens) in [("gemma3", 51), ("gemma4", 132), ("mistral3", 63)] {
        let model = format!("{name}-vl-gguf");
        let listed = server.get_json(&format!("/v1/models/{model}"));
        assert_eq!(listed["vision"], true, "{listed}");
        let mut messages = vec![json!({"role": "user", "content": [
            {"type": "text", "text": "What is in this picture?"},
            {"type": "image_url", "image_url": {"url": wide}}]})];
        if name == "mistral3" {
            // The fixture's cases open with the system message its template needs.
            messages.insert(
                0,
                json!({"role": "system", "content": "Answer in one word."}),
            );
        }
        let body = json!({"model": model, "max_tokens": 2, "temperature": 0,
            "messages": messages});
        let answer: Value = server.post("/v1/chat/completions", &body).json().unwrap();
        assert_eq!(answer["usage"]["prompt_tokens"], prompt_tokens, "{answer}");
        let metrics = server.metrics();
        let encoded = format!("corral_images_encoded_total{{model=\"{model}\"}} 1");
        assert!(metrics.contains(&encoded), "{encoded} not in {metrics}");
    }
}
