//! Detection on excerpts of the real templates, with small tokenizers standing in for each
//! family's vocabulary.

use std::collections::HashMap;

use tokenizers::models::wordlevel::WordLevel;
use tokenizers::{AddedToken, Tokenizer};

use super::*;

/// A word-level vocabulary with `added` tokens, each `(content, special)`.
pub(super) fn tokenizer(added: &[(&str, bool)]) -> Tokenizer {
    let vocab: HashMap<String, u32> = [("<unk>".to_string(), 0), ("hello".to_string(), 1)].into();
    let model = WordLevel::builder()
        .vocab(vocab.into_iter().collect())
        .unk_token("<unk>".into())
        .build()
        .expect("valid WordLevel");
    let mut tokenizer = Tokenizer::new(model);
    for &(content, special) in added {
        let token = AddedToken::from(content, special);
        if special {
            tokenizer.add_special_tokens(&[token]);
        } else {
            tokenizer.add_tokens(&[token]);
        }
    }
    tokenizer
}

pub(super) fn id(tokenizer: &Tokenizer, token: &str) -> u32 {
    tokenizer.token_to_id(token).expect("in the vocabulary")
}

const QWEN25: &str = r#"{%- if tools %}
    {{- '<|im_start|>system\n' }}
    {%- if messages[0]['role'] == 'system' %}
        {{- messages[0]['content'] }}
    {%- else %}
        {{- 'You are Qwen, created by Alibaba Cloud. You are a helpful assistant.' }}
    {%- endif %}
    {{- "\n\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are provided with function signatures within <tools></tools> XML tags:\n<tools>" }}
    {%- for tool in tools %}
        {{- "\n" }}
        {{- tool | tojson }}
    {%- endfor %}
    {{- "\n</tools>\n\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n" }}
{%- endif %}"#;

const QWEN3: &str = r#"{%- if tools %}
    {{- "<tools>" }}
    {%- for tool in tools %}{{- "\n" }}{{- tool | tojson }}{%- endfor %}
    {{- "\n</tools>\n\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n" }}
{%- endif %}
{%- for message in messages %}
    {%- if message.role == "assistant" %}
        {%- set content = message.content %}
        {%- if '</think>' in content %}
            {%- set reasoning_content = content.split('</think>')[0].rstrip('\n').split('<think>')[-1].lstrip('\n') %}
        {%- endif %}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\n' }}
    {%- if enable_thinking is defined and enable_thinking is false %}
        {{- '<think>\n\n</think>\n\n' }}
    {%- endif %}
{%- endif %}"#;

const QWEN3_CODER: &str = r#"{%- if tools is iterable and tools | length > 0 %}
    {{- "\n\n# Tools\n\nYou have access to the following functions:\n\n" }}
    {{- "<tools>" }}
    {%- for tool in tools %}
        {{- "\n<function>\n<name>" ~ tool.name ~ "</name>" }}
    {%- endfor %}
    {{- "\n</tools>" }}
    {{- '\n\nIf you choose to call a function ONLY reply in the following format with NO suffix:\n\n<tool_call>\n<function=example_function_name>\n<parameter=example_parameter_1>\nvalue_1\n</parameter>\n</function>\n</tool_call>' }}
{%- endif %}"#;

const LLAMA31: &str = r#"{{- bos_token }}
{%- if custom_tools is defined %}
    {%- set tools = custom_tools %}
{%- endif %}
{%- if not tools_in_user_message is defined %}
    {%- set tools_in_user_message = true %}
{%- endif %}
{%- if not tools is defined %}
    {%- set tools = none %}
{%- endif %}
{%- if builtin_tools is defined or tools is not none %}
    {{- "Environment: ipython\n" }}
{%- endif %}
    {{- 'Respond in the format {"name": function name, "parameters": dictionary of argument name and its value}.' }}
{%- for message in messages %}
    {%- if 'tool_calls' in message %}
        {%- if builtin_tools is defined and tool_call.name in builtin_tools %}
            {{- "<|python_tag|>" + tool_call.name + ".call(" }}
        {%- endif %}
    {%- endif %}
{%- endfor %}
{{- "<|eot_id|>" }}"#;

const LLAMA32: &str = r#"{%- if tools is not none %}
    {{- "Environment: ipython\n" }}
{%- endif %}
{{- 'Given the following functions, please respond with a JSON for a function call with its proper arguments that best answers the given prompt.\n\n' }}
{{- 'Respond in the format {"name": function name, "parameters": dictionary of argument name and its value}.' }}
{{- "<|eot_id|>" }}"#;

const MISTRAL_V3: &str = r#"{%- for message in loop_messages %}
    {%- if message["role"] == "user" %}
        {%- if tools is not none and (message == user_messages[-1]) %}
            {{- "[AVAILABLE_TOOLS] [" }}
            {%- for tool in tools %}{{- tool|tojson }}{%- endfor %}
            {{- "[/AVAILABLE_TOOLS]" }}
        {%- endif %}
        {{- "[INST] " + message["content"] + "[/INST]" }}
    {%- elif message.tool_calls is defined and message.tool_calls is not none %}
        {{- "[TOOL_CALLS] [" }}
    {%- endif %}
{%- endfor %}"#;

const SMOLLM2: &str = r#"{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}{{ '<|im_start|>system
You are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>
' }}{% endif %}{{'<|im_start|>' + message['role'] + '
' + message['content'] + '<|im_end|>' + '
'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant
' }}{% endif %}"#;

const DEEPSEEK_R1_DISTILL: &str = r#"{% for message in messages %}{%- if message['role'] == 'assistant' and message['content'] is not none %}{% set content = message['content'] %}{% if '</think>' in content %}{% set content = content.split('</think>')[-1] %}{% endif %}{{'<｜Assistant｜>' + content + '<｜end▁of▁sentence｜>'}}{%- endif %}{%- endfor %}{% if add_generation_prompt %}{{'<｜Assistant｜><think>\n'}}{% endif %}"#;

#[test]
fn qwen25_is_hermes_with_native_tools() {
    let vocab = tokenizer(&[("<tool_call>", false), ("</tool_call>", false)]);
    let formats = ModelFormats::detect(Some(QWEN25), &vocab);
    assert_eq!(
        formats,
        ModelFormats {
            tool_format: ToolFormat::Hermes,
            native_tools: true,
            reasoning: false,
            kept_tokens: vec![],
        }
    );
    assert!(formats.tool_format.supports_parallel());
}

#[test]
fn qwen3_is_hermes_and_reasons() {
    let vocab = tokenizer(&[("<think>", false), ("</think>", false)]);
    let formats = ModelFormats::detect(Some(QWEN3), &vocab);
    assert_eq!(formats.tool_format, ToolFormat::Hermes);
    assert!(formats.native_tools && formats.reasoning);
    assert_eq!(formats.kept_tokens, Vec::<u32>::new(), "not special");
}

#[test]
fn qwen3_coder_is_xml_though_it_also_writes_tool_call() {
    let formats = ModelFormats::detect(Some(QWEN3_CODER), &tokenizer(&[]));
    assert_eq!(formats.tool_format, ToolFormat::QwenXml);
    assert!(formats.native_tools);
}

#[test]
fn llama31_is_llama_json_and_keeps_its_python_tag() {
    let vocab = tokenizer(&[("<|python_tag|>", true), ("<|eot_id|>", true)]);
    let formats = ModelFormats::detect(Some(LLAMA31), &vocab);
    assert_eq!(formats.tool_format, ToolFormat::Llama3Json);
    assert!(formats.native_tools && !formats.reasoning);
    assert_eq!(formats.kept_tokens, [id(&vocab, "<|python_tag|>")]);
    assert!(!formats.tool_format.supports_parallel());
}

#[test]
fn llama32_template_without_python_tag_is_llama_json() {
    let formats = ModelFormats::detect(Some(LLAMA32), &tokenizer(&[]));
    assert_eq!(formats.tool_format, ToolFormat::Llama3Json);
}

#[test]
fn mistral_keeps_its_control_tokens() {
    let vocab = tokenizer(&[
        ("[TOOL_CALLS]", true),
        ("[ARGS]", true),
        ("[CALL_ID]", true),
        ("[INST]", true),
    ]);
    let formats = ModelFormats::detect(Some(MISTRAL_V3), &vocab);
    assert_eq!(formats.tool_format, ToolFormat::Mistral);
    assert!(formats.native_tools && formats.tool_format.supports_parallel());
    let mut expected = ["[TOOL_CALLS]", "[ARGS]", "[CALL_ID]"].map(|t| id(&vocab, t));
    expected.sort_unstable();
    assert_eq!(formats.kept_tokens, expected);
}

#[test]
fn mistral_is_recognized_by_its_vocabulary_alone() {
    let vocab = tokenizer(&[("[TOOL_CALLS]", true)]);
    let formats = ModelFormats::detect(None, &vocab);
    assert_eq!(formats.tool_format, ToolFormat::Mistral);
    assert!(!formats.native_tools);
}

#[test]
fn plain_chatml_defaults_to_hermes_without_native_tools() {
    let formats = ModelFormats::detect(Some(SMOLLM2), &tokenizer(&[("<|im_end|>", true)]));
    assert_eq!(
        formats,
        ModelFormats {
            tool_format: ToolFormat::Hermes,
            native_tools: false,
            reasoning: false,
            kept_tokens: vec![],
        }
    );
}

#[test]
fn deepseek_r1_reasons_and_keeps_special_think_tokens() {
    let vocab = tokenizer(&[("<think>", true), ("</think>", true)]);
    let formats = ModelFormats::detect(Some(DEEPSEEK_R1_DISTILL), &vocab);
    assert!(formats.reasoning && !formats.native_tools);
    assert_eq!(
        formats.kept_tokens,
        [id(&vocab, "<think>"), id(&vocab, "</think>")]
    );
}

#[test]
fn reasoning_is_seen_in_the_vocabulary_too() {
    let formats = ModelFormats::detect(None, &tokenizer(&[("</think>", false)]));
    assert!(formats.reasoning);
}

#[test]
fn tools_counts_only_as_a_variable_in_a_tag() {
    let detect =
        |template: &str| ModelFormats::detect(Some(template), &tokenizer(&[])).native_tools;
    assert!(detect("{% if tools %}x{% endif %}"));
    assert!(detect("{{ tools|tojson }}"));
    assert!(detect("{%- for t in tools -%}{%- endfor -%}"));
    assert!(
        detect("{%- for t in xml_tools[:] -%}{%- endfor -%}"),
        "SmolLM3's name"
    );
    assert!(
        !detect("You have tools. {{ messages }}"),
        "prose outside tags"
    );
    assert!(!detect("{{ 'use the tools wisely' }}"), "inside a string");
    assert!(!detect("{# tools #}"), "a comment");
    assert!(!detect("{% if tools_in_user_message %}{% endif %}"));
    assert!(!detect("{{ message.tools }}"), "an attribute");
}

/// The chat templates the families' real models ship, as the end-to-end tests serve them
/// (`tests/data/chat_templates/`, whose README names each one's source).
pub(super) fn shipped_template(file: &str) -> String {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/data/chat_templates")
        .join(file);
    std::fs::read_to_string(&path).unwrap_or_else(|error| panic!("{}: {error}", path.display()))
}

#[test]
fn each_familys_shipped_template_is_its_format() {
    use ToolFormat::{
        Gemma4, Glm, Granite, Harmony, Hermes, Llama3Json, Llama4Pythonic, Mistral, MistralThink,
        Phi4Mini, Pythonic, QwenXml,
    };
    // (file, format, renders tools, thinks)
    let families = [
        ("qwen2.5.jinja", Hermes, true, false),
        ("qwen3.jinja", Hermes, true, true),
        ("llama3.1.jinja", Llama3Json, true, false),
        // Llama 4 asks for a list of Python calls.
        ("llama4.jinja", Llama4Pythonic, true, false),
        ("mistral-nemo.jinja", Mistral, true, false),
        ("mistral-small-3.1.jinja", Mistral, true, false),
        // Ministral 3 Reasoning thinks in `[THINK]` and calls with `[ARGS]`.
        ("ministral3-reasoning.jinja", MistralThink, true, true),
        ("mixtral-8x22b.jinja", Mistral, true, false),
        // Granite 3.3 thinks in `<think>` when its `thinking` switch is on.
        ("granite3.3.jinja", Granite, true, true),
        ("smollm3.jinja", Hermes, true, true),
        // GLM-4.6 writes `<tool_call>` too, with `<arg_key>` inside.
        ("glm4.6.jinja", Glm, true, true),
        // gpt-oss reasons on its `analysis` channel, which its format's parser reads.
        ("gpt-oss.jinja", Harmony, true, false),
        // Gemma 3's template renders no tools: corral teaches it Hermes.
        ("gemma3.jinja", Hermes, false, false),
        // Gemma 4 thinks on its thought channel when `enable_thinking` is on.
        ("gemma4.jinja", Gemma4, true, true),
        // LFM2 writes a list of Python calls.
        ("lfm2.5.jinja", Pythonic, true, true),
        // Qwen3.5 and 3.6 write Qwen3-Coder's calls.
        ("qwen3.6.jinja", QwenXml, true, true),
        // Phi-4-mini's takes tools only as a system message's `tools` string, which corral
        // fills (`phi4_messages`).
        ("phi4-mini.jinja", Phi4Mini, false, false),
    ];
    for (file, format, native_tools, reasoning) in families {
        let formats = ModelFormats::detect(Some(&shipped_template(file)), &tokenizer(&[]));
        assert_eq!(
            (formats.tool_format, formats.native_tools, formats.reasoning),
            (format, native_tools, reasoning),
            "{file}"
        );
    }
}

#[test]
fn llama4_keeps_its_python_tokens() {
    let vocab = tokenizer(&[
        ("<|python_start|>", true),
        ("<|python_end|>", true),
        ("<|eot|>", true),
    ]);
    let formats = ModelFormats::detect(Some(&shipped_template("llama4.jinja")), &vocab);
    assert_eq!(
        formats.kept_tokens,
        [id(&vocab, "<|python_start|>"), id(&vocab, "<|python_end|>")]
    );
}

/// transformers' first Llama 4 template asked for Llama 3's JSON calls, in the same turns.
#[test]
fn a_llama4_template_asking_for_json_is_llama3s_format() {
    let template = r#"{{- '<|header_start|>ipython<|header_end|>\n\n' }}{{- 'Respond in the format {"name": function name, "parameters": dictionary of argument name and its value}.' }}{%- for t in tools %}{%- endfor %}"#;
    let formats = ModelFormats::detect(Some(template), &tokenizer(&[]));
    assert_eq!(formats.tool_format, ToolFormat::Llama3Json);
}

/// Mistral Small 3.2's, Magistral's, Devstral's and Ministral 3's templates write past calls as
/// `[TOOL_CALLS]name[ARGS]{...}`, the notation forced calls then take.
#[test]
fn a_mistral_template_writing_args_is_the_named_notation() {
    let template = "{%- for tool in message['tool_calls'] %}{{- '[TOOL_CALLS]' + tool['function']['name'] + '[ARGS]' + arguments }}{%- endfor %}{{- '[AVAILABLE_TOOLS]' + (tools| tojson) }}";
    let formats = ModelFormats::detect(Some(template), &tokenizer(&[]));
    assert_eq!(formats.tool_format, ToolFormat::MistralArgs);
}

#[test]
fn granite_keeps_its_special_tool_call_token() {
    let vocab = tokenizer(&[("<|tool_call|>", true), ("<|end_of_text|>", true)]);
    let formats = ModelFormats::detect(Some(&shipped_template("granite3.3.jinja")), &vocab);
    assert_eq!(formats.kept_tokens, [id(&vocab, "<|tool_call|>")]);
}

#[test]
fn gemma4_keeps_its_call_quote_and_channel_tokens() {
    let markers = [
        "<|tool_call>",
        "<tool_call|>",
        "<|\"|>",
        "<|channel>",
        "<channel|>",
    ];
    let vocab = tokenizer(&markers.map(|marker| (marker, true)));
    let formats = ModelFormats::detect(Some(&shipped_template("gemma4.jinja")), &vocab);
    let mut expected = markers.map(|marker| id(&vocab, marker));
    expected.sort_unstable();
    assert_eq!(formats.kept_tokens, expected);
}
