use std::path::Path;

use corral_ipc::{ModelDescription, ModelFormat, ModelKind, Prompt, ToolChoice};
use serde_json::{Value, json};

use super::*;
use crate::registry::Source as Found;

fn values(adjust: impl FnOnce(&mut SamplingValues)) -> SamplingValues {
    let mut values = SamplingValues::default();
    adjust(&mut values);
    values
}

fn sourced<T>(value: T, source: Source) -> Sourced<T> {
    Sourced { value, source }
}

/// A GGUF model found in Ollama's library, with every source stating something.
fn entry() -> ModelEntry {
    let mut entry = ModelEntry::new("m".into(), Path::new("/m/blob"), Found::Ollama);
    entry.ollama_params = values(|v| {
        v.temperature = Some(0.8);
        v.top_k = Some(40);
        v.stop = Some(vec!["<|im_end|>".into()]);
    });
    entry.description = Some(ModelDescription {
        path: entry.path.clone(),
        format: ModelFormat::Gguf,
        architecture: None,
        quantization: None,
        size_bytes: 0,
        parameters: None,
        active_parameters: None,
        gguf_loaded_bytes: Default::default(),
        cache: None,
        unservable: None,
        kind: ModelKind::Chat,
        vision: false,
        vision_reserve_bytes: 0,
        gguf_sampling: values(|v| {
            v.temperature = Some(0.7);
            v.top_k = Some(30);
            v.top_p = Some(0.9);
        }),
        generation_config: values(|v| {
            v.temperature = Some(0.6);
            v.top_p = Some(0.95);
            v.min_p = Some(0.05);
        }),
        warnings: Vec::new(),
        mtp: corral_ipc::MtpLayers::None,
    });
    entry
}

#[test]
fn each_field_comes_from_the_first_source_that_states_it() {
    let settings = ModelSettings {
        temperature: Some(0.2),
        max_tokens: Some(3),
        ..ModelSettings::default()
    };
    let defaults = SamplingDefaults::for_model(Some(&settings), &entry());
    assert_eq!(defaults.temperature, sourced(0.2, Source::Config));
    assert_eq!(defaults.max_tokens, sourced(3, Source::Config));
    assert_eq!(defaults.top_k, sourced(40, Source::Ollama));
    assert_eq!(
        defaults.stop,
        sourced(vec!["<|im_end|>".to_owned()], Source::Ollama)
    );
    assert_eq!(defaults.top_p, sourced(0.9, Source::Gguf));
    assert_eq!(defaults.min_p, sourced(0.05, Source::GenerationConfig));
    assert_eq!(defaults.repetition_penalty, sourced(1.0, Source::Default));
    assert_eq!(defaults.presence_penalty, sourced(0.0, Source::Default));
}

#[test]
fn without_configuration_the_models_own_files_decide() {
    let defaults = SamplingDefaults::for_model(None, &entry());
    assert_eq!(defaults.temperature, sourced(0.8, Source::Ollama));
    let mut bare = entry();
    bare.ollama_params = SamplingValues::default();
    let defaults = SamplingDefaults::for_model(None, &bare);
    assert_eq!(defaults.temperature, sourced(0.7, Source::Gguf));
    assert_eq!(defaults.top_k, sourced(30, Source::Gguf));
    bare.description = None;
    let defaults = SamplingDefaults::for_model(None, &bare);
    assert_eq!(defaults.temperature, sourced(1.0, Source::Default));
    assert_eq!(
        defaults.max_tokens,
        sourced(DEFAULT_MAX_TOKENS, Source::Default)
    );
}

#[test]
fn a_requests_own_values_win_and_zero_temperature_stays_greedy() {
    let defaults = SamplingDefaults::for_model(None, &entry());
    let mut request = GenerateRequest::greedy(Prompt::Text("hi".into()), 9);
    request.stop = Some(Vec::new());
    defaults.apply(&mut request);
    assert_eq!(request.temperature, Some(0.0));
    assert_eq!(request.max_tokens, Some(9));
    assert_eq!(request.stop, Some(Vec::new()));
    assert_eq!(request.top_k, Some(40));
    assert_eq!(request.top_p, Some(0.9));
    assert_eq!(request.repetition_penalty, Some(1.0));
}

#[test]
fn the_sources_are_named_in_the_status_json() {
    let defaults = SamplingDefaults::for_model(None, &entry());
    let json = serde_json::to_value(&defaults).unwrap();
    assert_eq!(
        json["min_p"],
        json!({"value": 0.05f32, "source": "generation_config.json"})
    );
    assert_eq!(json["top_k"], json!({"value": 40, "source": "ollama"}));
    assert_eq!(
        json["max_tokens"],
        json!({"value": 512, "source": "default"})
    );
}

fn chat(messages: Value, tools: bool) -> GenerateRequest {
    let tool = json!({"type": "function", "function": {"name": "get_time", "parameters": {}}});
    let mut request = GenerateRequest::greedy(
        Prompt::Chat {
            messages: serde_json::from_value(messages).unwrap(),
            tools: tools.then(|| vec![tool]),
            template_kwargs: None,
            images: Vec::new(),
        },
        8,
    );
    request.tool_choice = None;
    request
}

fn defaulted(configured: &str, mut request: GenerateRequest) -> Option<ToolChoice> {
    apply_tool_choice(configured, &mut request);
    request.tool_choice
}

#[test]
fn the_default_tool_choice_applies_to_a_fresh_user_turn_with_tools() {
    let user = json!([{"role": "user", "content": "what time is it?"}]);
    assert_eq!(
        defaulted("required", chat(user.clone(), true)),
        Some(ToolChoice::Required)
    );
    assert_eq!(
        defaulted("get_time", chat(user.clone(), true)),
        Some(ToolChoice::Function {
            name: "get_time".into()
        })
    );
    assert_eq!(
        defaulted("none", chat(user.clone(), true)),
        Some(ToolChoice::None)
    );
    // Claude Code ends its requests with a system message after the user's turn.
    let reminded = json!([{"role": "user", "content": "what time is it?"},
        {"role": "system", "content": "Today is Tuesday."}]);
    assert_eq!(
        defaulted("required", chat(reminded, true)),
        Some(ToolChoice::Required)
    );
    // A tool the request does not offer, or no tools at all: nothing to choose.
    assert_eq!(defaulted("other_tool", chat(user.clone(), true)), None);
    assert_eq!(defaulted("required", chat(user, false)), None);
}

#[test]
fn the_default_tool_choice_leaves_a_stated_choice_and_a_tool_result_alone() {
    let user = json!([{"role": "user", "content": "what time is it?"}]);
    let mut stated = chat(user.clone(), true);
    stated.tool_choice = Some(ToolChoice::None);
    assert_eq!(defaulted("required", stated), Some(ToolChoice::None));
    // `auto` is the API's default, which clients send without choosing anything.
    let mut auto = chat(user.clone(), true);
    auto.tool_choice = Some(ToolChoice::Auto);
    assert_eq!(defaulted("required", auto), Some(ToolChoice::Required));
    // An output format shapes the answer itself.
    let mut shaped = chat(user, true);
    shaped.output_format = Some(corral_ipc::OutputFormat::JsonObject);
    assert_eq!(defaulted("required", shaped), None);
    let after_tool = json!([
        {"role": "user", "content": "what time is it?"},
        {"role": "assistant", "tool_calls": [{"id": "1", "type": "function",
            "function": {"name": "get_time", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "1", "content": "noon"},
    ]);
    assert_eq!(defaulted("required", chat(after_tool.clone(), true)), None);
    // A tool result followed by more user text in the same turn (as Anthropic clients send).
    let mut with_text = after_tool;
    with_text
        .as_array_mut()
        .unwrap()
        .push(json!({"role": "user", "content": "thanks"}));
    assert_eq!(defaulted("required", chat(with_text.clone(), true)), None);
    with_text
        .as_array_mut()
        .unwrap()
        .push(json!({"role": "system", "content": "reminder"}));
    assert_eq!(defaulted("required", chat(with_text, true)), None);
}
