//! The fixture's tokenizer files as a loader sees them: `tokenizer.json` through the `tokenizers`
//! crate, `tokenizer_config.json` and its ChatML template through a Jinja engine, and the stop
//! tokens in `generation_config.json`.

use std::fs;
use std::path::Path;

use corral::fixture::{self, Arch, Dtype, FixtureOptions, Size};
use minijinja::{Environment, context};
use serde_json::{Value, json};
use tokenizers::Tokenizer;

const ENDOFTEXT: u32 = 1021;
const IM_START: u32 = 1022;
const IM_END: u32 = 1023;

fn generate() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let options = FixtureOptions {
        size: Size::Tiny,
        arch: Arch::Qwen3,
        dtype: Dtype::F32,
        quantize: None,
    };
    fixture::generate(&options, dir.path()).unwrap();
    dir
}

fn json_file(dir: &Path, file: &str) -> Value {
    serde_json::from_slice(&fs::read(dir.join(file)).unwrap()).unwrap()
}

fn render(template: &str, ctx: minijinja::Value) -> String {
    let mut env = Environment::new();
    env.add_template("chat", template).unwrap();
    env.get_template("chat").unwrap().render(ctx).unwrap()
}

#[test]
fn tokenizer_json_loads_and_round_trips_any_text() {
    let dir = generate();
    let tokenizer = Tokenizer::from_file(dir.path().join("tokenizer.json")).unwrap();
    assert_eq!(tokenizer.get_vocab_size(true), 1024);
    for text in [
        "Hello, world! The market was already busy.",
        "é café 日本 日本語 😀 🚀 👍🏽 Ωμέγα",
        "def f(x):\n\treturn {\"a\": [1, 2]}\n",
    ] {
        let ids = tokenizer.encode(text, false).unwrap().get_ids().to_vec();
        assert!(ids.iter().all(|&id| id < ENDOFTEXT), "{ids:?}");
        assert_eq!(tokenizer.decode(&ids, false).unwrap(), text);
    }
}

#[test]
fn special_tokens_are_single_ids() {
    let dir = generate();
    let tokenizer = Tokenizer::from_file(dir.path().join("tokenizer.json")).unwrap();
    for (token, id) in [
        ("<|endoftext|>", ENDOFTEXT),
        ("<|im_start|>", IM_START),
        ("<|im_end|>", IM_END),
    ] {
        assert_eq!(tokenizer.encode(token, false).unwrap().get_ids(), [id]);
    }
    let ids = tokenizer
        .encode("<|im_start|>user\nhi<|im_end|>", false)
        .unwrap();
    assert_eq!(ids.get_ids().first(), Some(&IM_START));
    assert_eq!(ids.get_ids().last(), Some(&IM_END));
}

#[test]
fn tokenizer_config_names_the_special_tokens_by_role() {
    let dir = generate();
    let config = json_file(dir.path(), "tokenizer_config.json");
    assert_eq!(config["tokenizer_class"], "PreTrainedTokenizerFast");
    assert_eq!(config["eos_token"], "<|im_end|>");
    assert_eq!(config["pad_token"], "<|endoftext|>");
    assert_eq!(config["bos_token"], Value::Null);
    assert_eq!(config["model_max_length"], 8192);
    let decoder = &config["added_tokens_decoder"];
    assert_eq!(decoder["1021"]["content"], "<|endoftext|>");
    assert_eq!(decoder["1022"]["content"], "<|im_start|>");
    assert_eq!(decoder["1023"]["content"], "<|im_end|>");
    assert_eq!(decoder["1023"]["special"], true);
}

#[test]
fn generation_config_stops_on_end_of_turn_and_end_of_text() {
    let dir = generate();
    let config = json_file(dir.path(), "generation_config.json");
    assert_eq!(
        config,
        json!({
            "bos_token_id": ENDOFTEXT,
            "eos_token_id": [IM_END, ENDOFTEXT],
            "do_sample": true,
            "temperature": 0.7,
            "top_p": 0.8,
            "top_k": 20,
            "repetition_penalty": 1.05,
        })
    );
}

#[test]
fn chat_template_renders_chatml_turns() {
    let dir = generate();
    let config = json_file(dir.path(), "tokenizer_config.json");
    let template = config["chat_template"].as_str().unwrap();
    let messages = json!([
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "Hello."},
        {"role": "user", "content": "Bye"},
    ]);
    let prompt = render(
        template,
        context! { messages => messages, add_generation_prompt => true },
    );
    assert_eq!(
        prompt,
        "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n\
         <|im_start|>assistant\nHello.<|im_end|>\n<|im_start|>user\nBye<|im_end|>\n\
         <|im_start|>assistant\n"
    );
    let without_system = render(
        template,
        context! { messages => json!([{"role": "user", "content": "Hi"}]) },
    );
    assert_eq!(
        without_system,
        "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n\
         <|im_start|>user\nHi<|im_end|>\n"
    );
}

#[test]
fn chat_template_renders_tools_calls_and_results() {
    let dir = generate();
    let config = json_file(dir.path(), "tokenizer_config.json");
    let template = config["chat_template"].as_str().unwrap();
    let tools = json!([{"type": "function", "function": {"name": "get_weather"}}]);
    let messages = json!([
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": "", "tool_calls": [
            {"type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}
        ]},
        {"role": "tool", "content": "sunny"},
    ]);
    let prompt = render(
        template,
        context! { messages => messages, tools => tools, add_generation_prompt => true },
    );
    assert!(prompt.starts_with("<|im_start|>system\nYou are a helpful assistant.\n\n# Tools"));
    assert!(prompt.contains("<tools>\n{") && prompt.contains("get_weather"));
    assert!(prompt.contains("<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {"));
    assert!(
        prompt.contains("<|im_start|>user\n<tool_response>\nsunny\n</tool_response><|im_end|>\n")
    );
    assert!(prompt.ends_with("<|im_start|>assistant\n"));
}
