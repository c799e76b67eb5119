use serde_json::{Value, json};

use super::*;

/// Qwen2.5-Instruct's template: ChatML with a tools branch.
const QWEN25: &str = r##"{%- if tools %}
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
{%- else %}
    {%- if messages[0]['role'] == 'system' %}
        {{- '<|im_start|>system\n' + messages[0]['content'] + '<|im_end|>\n' }}
    {%- else %}
        {{- '<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n' }}
    {%- endif %}
{%- endif %}
{%- for message in messages %}
    {%- if (message.role == "user") or (message.role == "system" and not loop.first) or (message.role == "assistant" and not message.tool_calls) %}
        {{- '<|im_start|>' + message.role + '\n' + message.content + '<|im_end|>' + '\n' }}
    {%- elif message.role == "assistant" %}
        {{- '<|im_start|>' + message.role }}
        {%- if message.content %}
            {{- '\n' + message.content }}
        {%- endif %}
        {%- for tool_call in message.tool_calls %}
            {%- if tool_call.function is defined %}
                {%- set tool_call = tool_call.function %}
            {%- endif %}
            {{- '\n<tool_call>\n{"name": "' }}
            {{- tool_call.name }}
            {{- '", "arguments": ' }}
            {{- tool_call.arguments | tojson }}
            {{- '}\n</tool_call>' }}
        {%- endfor %}
        {{- '<|im_end|>\n' }}
    {%- elif message.role == "tool" %}
        {%- if (loop.index0 == 0) or (messages[loop.index0 - 1].role != "tool") %}
            {{- '<|im_start|>user' }}
        {%- endif %}
        {{- '\n<tool_response>\n' }}
        {{- message.content }}
        {{- '\n</tool_response>' }}
        {%- if loop.last or (messages[loop.index0 + 1].role != "tool") %}
            {{- '<|im_end|>\n' }}
        {%- endif %}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\n' }}
{%- endif %}
"##;

/// Llama 3.1 Instruct's template (its branch for built-in tool calls left out): `bos_token`,
/// `|trim`, `tojson(indent=4)`, `raise_exception`.
const LLAMA31: &str = r##"{{- bos_token }}
{%- if custom_tools is defined %}
    {%- set tools = custom_tools %}
{%- endif %}
{%- if not tools_in_user_message is defined %}
    {%- set tools_in_user_message = true %}
{%- endif %}
{%- if not date_string is defined %}
    {%- set date_string = "26 Jul 2024" %}
{%- endif %}
{%- if not tools is defined %}
    {%- set tools = none %}
{%- endif %}

{#- This block extracts the system message, so we can slot it into the right place. #}
{%- if messages[0]['role'] == 'system' %}
    {%- set system_message = messages[0]['content']|trim %}
    {%- set messages = messages[1:] %}
{%- else %}
    {%- set system_message = "" %}
{%- endif %}

{#- System message + builtin tools #}
{{- "<|start_header_id|>system<|end_header_id|>\n\n" }}
{%- if builtin_tools is defined or tools is not none %}
    {{- "Environment: ipython\n" }}
{%- endif %}
{%- if builtin_tools is defined %}
    {{- "Tools: " + builtin_tools | reject('equalto', 'code_interpreter') | join(", ") + "\n\n"}}
{%- endif %}
{{- "Cutting Knowledge Date: December 2023\n" }}
{{- "Today Date: " + date_string + "\n\n" }}
{%- if tools is not none and not tools_in_user_message %}
    {{- "You have access to the following functions. To call a function, please respond with JSON for a function call." }}
    {{- 'Respond in the format {"name": function name, "parameters": dictionary of argument name and its value}.' }}
    {{- "Do not use variables.\n\n" }}
    {%- for t in tools %}
        {{- t | tojson(indent=4) }}
        {{- "\n\n" }}
    {%- endfor %}
{%- endif %}
{{- system_message }}
{{- "<|eot_id|>" }}

{#- Custom tools are passed in a user message with some extra guidance #}
{%- if tools_in_user_message and not tools is none %}
    {#- Extract the first user message so we can plug it in here #}
    {%- if messages | length != 0 %}
        {%- set first_user_message = messages[0]['content']|trim %}
        {%- set messages = messages[1:] %}
    {%- else %}
        {{- raise_exception("Cannot put tools in the first user message when there's no first user message!") }}
{%- endif %}
    {{- '<|start_header_id|>user<|end_header_id|>\n\n' -}}
    {{- "Given the following functions, please respond with a JSON for a function call " }}
    {{- "with its proper arguments that best answers the given prompt.\n\n" }}
    {{- 'Respond in the format {"name": function name, "parameters": dictionary of argument name and its value}.' }}
    {{- "Do not use variables.\n\n" }}
    {%- for t in tools %}
        {{- t | tojson(indent=4) }}
        {{- "\n\n" }}
    {%- endfor %}
    {{- first_user_message + "<|eot_id|>"}}
{%- endif %}

{%- for message in messages %}
    {%- if not (message.role == 'ipython' or message.role == 'tool' or 'tool_calls' in message) %}
        {{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'+ message['content'] | trim + '<|eot_id|>' }}
    {%- elif 'tool_calls' in message %}
        {%- if not message.tool_calls|length == 1 %}
            {{- raise_exception("This model only supports single tool-calls at once!") }}
        {%- endif %}
        {%- set tool_call = message.tool_calls[0].function %}
        {{- '<|start_header_id|>assistant<|end_header_id|>\n\n' -}}
        {{- '{"name": "' + tool_call.name + '", ' }}
        {{- '"parameters": ' }}
        {{- tool_call.arguments | tojson }}
        {{- "}" }}
        {{- "<|eot_id|>" }}
    {%- elif message.role == "tool" or message.role == "ipython" %}
        {{- "<|start_header_id|>ipython<|end_header_id|>\n\n" }}
        {%- if message.content is mapping or message.content is iterable %}
            {{- message.content | tojson }}
        {%- else %}
            {{- message.content }}
        {%- endif %}
        {{- "<|eot_id|>" }}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|start_header_id|>assistant<|end_header_id|>\n\n' }}
{%- endif %}
"##;

/// Mistral Instruct v0.1's template, which raises unless roles alternate.
const MISTRAL: &str = r##"{{ bos_token }}{% for message in messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}{% if message['role'] == 'user' %}{{ '[INST] ' + message['content'] + ' [/INST]' }}{% elif message['role'] == 'assistant' %}{{ message['content'] + eos_token}}{% else %}{{ raise_exception('Only user and assistant roles are supported!') }}{% endif %}{% endfor %}"##;

fn template(source: &str, bos: Option<&str>, eos: Option<&str>) -> ChatTemplate {
    ChatTemplate::new(
        source.to_owned(),
        PathBuf::from("test.jinja"),
        bos.map(str::to_owned),
        eos.map(str::to_owned),
    )
    .expect("template parses")
}

fn weather_tool() -> Value {
    json!([{"type": "function", "function": {
        "name": "get_weather",
        "description": "Get the weather <now>",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                       "required": ["city"]}}}])
}

fn weather_call() -> Value {
    json!({"role": "assistant", "content": null, "tool_calls": [{"id": "call_1",
        "type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}]})
}

fn raised(result: Result<String, ChatTemplateError>) -> String {
    match result {
        Err(ChatTemplateError::Raised(message)) => message,
        other => panic!("expected raise_exception, got {other:?}"),
    }
}

// Expected prompts below were rendered by Python's Jinja2 configured as transformers does.

#[test]
fn qwen_renders_chatml_with_its_default_system_prompt() {
    let got = template(QWEN25, None, Some("<|im_end|>"))
        .render(&[json!({"role": "user", "content": "Hi"})], None, true)
        .unwrap();
    assert_eq!(
        got,
        "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
    );
}

#[test]
fn qwen_renders_tools_calls_and_responses_like_transformers() {
    let messages = [
        json!({"role": "system", "content": "You are terse."}),
        json!({"role": "user", "content": "Weather in Paris?"}),
        weather_call(),
        json!({"role": "tool", "tool_call_id": "call_1", "content": "{\"temp\": 21}"}),
    ];
    let got = template(QWEN25, None, None)
        .render(&messages, Some(&weather_tool()), true)
        .unwrap();
    assert_eq!(
        got,
        "<|im_start|>system\nYou are terse.\n\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are provided with function signatures within <tools></tools> XML tags:\n<tools>\n{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"description\": \"Get the weather <now>\", \"parameters\": {\"type\": \"object\", \"properties\": {\"city\": {\"type\": \"string\"}}, \"required\": [\"city\"]}}}\n</tools>\n\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n<|im_start|>user\nWeather in Paris?<|im_end|>\n<|im_start|>assistant\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call><|im_end|>\n<|im_start|>user\n<tool_response>\n{\"temp\": 21}\n</tool_response><|im_end|>\n<|im_start|>assistant\n"
    );
}

#[test]
fn generation_prompt_is_only_added_on_request() {
    let got = template(QWEN25, None, None)
        .render(&[json!({"role": "user", "content": "Hi"})], None, false)
        .unwrap();
    assert!(got.ends_with("<|im_start|>user\nHi<|im_end|>\n"), "{got:?}");
}

#[test]
fn llama_renders_bos_trimmed_system_and_indented_tools() {
    let messages = [
        json!({"role": "system", "content": "  Be brief.  \n"}),
        json!({"role": "user", "content": " Weather in Paris? "}),
        weather_call(),
        json!({"role": "tool", "content": "21C"}),
    ];
    let got = template(LLAMA31, Some("<|begin_of_text|>"), Some("<|eot_id|>"))
        .render(&messages, Some(&weather_tool()), true)
        .unwrap();
    assert_eq!(
        got,
        "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nEnvironment: ipython\nCutting Knowledge Date: December 2023\nToday Date: 26 Jul 2024\n\nBe brief.<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nGiven the following functions, please respond with a JSON for a function call with its proper arguments that best answers the given prompt.\n\nRespond in the format {\"name\": function name, \"parameters\": dictionary of argument name and its value}.Do not use variables.\n\n{\n    \"type\": \"function\",\n    \"function\": {\n        \"name\": \"get_weather\",\n        \"description\": \"Get the weather <now>\",\n        \"parameters\": {\n            \"type\": \"object\",\n            \"properties\": {\n                \"city\": {\n                    \"type\": \"string\"\n                }\n            },\n            \"required\": [\n                \"city\"\n            ]\n        }\n    }\n}\n\nWeather in Paris?<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\"}}<|eot_id|><|start_header_id|>ipython<|end_header_id|>\n\n\"21C\"<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n"
    );
}

#[test]
fn llama_renders_a_plain_conversation() {
    let messages = [
        json!({"role": "user", "content": "Hi"}),
        json!({"role": "assistant", "content": "Hello!"}),
        json!({"role": "user", "content": "Bye"}),
    ];
    let got = template(LLAMA31, Some("<|begin_of_text|>"), None)
        .render(&messages, None, true)
        .unwrap();
    assert_eq!(
        got,
        "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nCutting Knowledge Date: December 2023\nToday Date: 26 Jul 2024\n\n<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\nHello!<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nBye<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n"
    );
}

#[test]
fn llama_raise_exception_becomes_our_error() {
    let llama = template(LLAMA31, Some("<|begin_of_text|>"), None);
    let mut two_calls = weather_call();
    let call = two_calls["tool_calls"][0].clone();
    two_calls["tool_calls"] = json!([call.clone(), call]);
    let messages = [json!({"role": "user", "content": "x"}), two_calls];
    assert_eq!(
        raised(llama.render(&messages, None, true)),
        "This model only supports single tool-calls at once!"
    );
    let only_system = [json!({"role": "system", "content": "s"})];
    assert_eq!(
        raised(llama.render(&only_system, Some(&weather_tool()), true)),
        "Cannot put tools in the first user message when there's no first user message!"
    );
    let err = llama.render(&messages, None, true).unwrap_err();
    assert_eq!(
        err.to_string(),
        "chat template raised: This model only supports single tool-calls at once!"
    );
}

#[test]
fn mistral_renders_alternating_turns_with_bos_and_eos() {
    let messages = [
        json!({"role": "user", "content": "Hi"}),
        json!({"role": "assistant", "content": "Hello"}),
        json!({"role": "user", "content": "Bye"}),
    ];
    let got = template(MISTRAL, Some("<s>"), Some("</s>"))
        .render(&messages, None, true)
        .unwrap();
    assert_eq!(got, "<s>[INST] Hi [/INST]Hello</s>[INST] Bye [/INST]");
}

#[test]
fn mistral_rejects_roles_that_do_not_alternate() {
    let mistral = template(MISTRAL, Some("<s>"), Some("</s>"));
    let twice = [
        json!({"role": "user", "content": "Hi"}),
        json!({"role": "user", "content": "Again"}),
    ];
    assert_eq!(
        raised(mistral.render(&twice, None, true)),
        "Conversation roles must alternate user/assistant/user/assistant/..."
    );
    let tool = [
        json!({"role": "user", "content": "Hi"}),
        json!({"role": "tool", "content": "x"}),
    ];
    assert_eq!(
        raised(mistral.render(&tool, None, true)),
        "Only user and assistant roles are supported!"
    );
}

#[test]
fn blocks_are_trimmed_and_the_trailing_newline_dropped() {
    let source = "{% for m in messages %}\n    {% if m.role %}\n{{ m.content }}\n    {% endif %}\n{% endfor %}\n";
    let messages = [
        json!({"role": "user", "content": "a"}),
        json!({"role": "user", "content": "b"}),
    ];
    assert_eq!(
        template(source, None, None)
            .render(&messages, None, false)
            .unwrap(),
        "a\nb\n"
    );
    let trailing = template("x\n", None, None);
    assert_eq!(trailing.render(&[], None, false).unwrap(), "x");
}

#[test]
fn loop_controls_work() {
    let source = "{% for m in messages %}{% if loop.index0 == 1 %}{% continue %}{% endif %}{% if loop.index0 == 3 %}{% break %}{% endif %}{{ m.content }}{% endfor %}";
    let messages: Vec<Value> = ["a", "b", "c", "d", "e"]
        .iter()
        .map(|c| json!({"role": "user", "content": c}))
        .collect();
    assert_eq!(
        template(source, None, None)
            .render(&messages, None, false)
            .unwrap(),
        "ac"
    );
}

#[test]
fn python_string_and_dict_methods_work() {
    let source = "{{ messages[0].content.strip().split(',') | join('|') }} {{ messages[0].content.startswith('  a') }} {% for k, v in messages[0].meta.items() %}{{ k }}={{ v }}{% endfor %} {{ messages[0].meta.get('missing', 'dflt') }} {{ messages[0].content.upper() | trim }}";
    let messages = [json!({"content": "  a,b ", "meta": {"x": 1}})];
    assert_eq!(
        template(source, None, None)
            .render(&messages, None, false)
            .unwrap(),
        "a|b True x=1 dflt A,B"
    );
}

#[test]
fn tools_are_none_when_absent_and_special_tokens_undefined_when_unset() {
    let source = "{{ tools is none }} {{ tools is defined }} [{{ bos_token }}] {{ eos_token is defined }} {{ add_generation_prompt }}";
    let got = template(source, None, None)
        .render(&[], None, true)
        .unwrap();
    assert_eq!(got, "True True [] False True");
}

#[test]
fn strftime_now_is_available() {
    let got = template("{{ strftime_now('%Y') }}", None, None)
        .render(&[], None, false)
        .unwrap();
    assert!(got.parse::<u32>().is_ok_and(|year| year >= 2024), "{got}");
}

#[test]
fn a_template_that_does_not_parse_names_its_file() {
    let err = ChatTemplate::new(
        "{% if %}".into(),
        PathBuf::from("/m/chat_template.jinja"),
        None,
        None,
    )
    .unwrap_err();
    assert!(matches!(err, ChatTemplateError::Parse { .. }));
    assert!(err.to_string().contains("/m/chat_template.jinja"), "{err}");
}

#[test]
fn a_render_failure_names_the_file_and_keeps_the_cause() {
    let broken = template("{{ messages[0].content + 1 }}", None, None);
    let err = broken
        .render(&[json!({"content": "x"})], None, false)
        .unwrap_err();
    assert!(matches!(err, ChatTemplateError::Render { .. }), "{err:?}");
    assert!(err.to_string().contains("test.jinja"), "{err}");
    assert!(std::error::Error::source(&err).is_some());
}

fn model_dir(files: &[(&str, &str)]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("temp dir");
    for (name, text) in files {
        std::fs::write(dir.path().join(name), text).expect("temp dir is writable");
    }
    dir
}

fn load(files: &[(&str, &str)]) -> Result<Option<ChatTemplate>, ChatTemplateError> {
    ChatTemplate::from_model_dir(model_dir(files).path())
}

fn render_empty(template: Option<ChatTemplate>) -> String {
    template
        .expect("has a template")
        .render(&[], None, false)
        .expect("renders")
}

#[test]
fn the_template_string_in_tokenizer_config_is_used() {
    let config = r#"{"chat_template": "{{ bos_token }}|{{ eos_token }}", "bos_token": "<s>",
        "eos_token": {"__type": "AddedToken", "content": "</s>", "special": true}}"#;
    assert_eq!(
        render_empty(load(&[("tokenizer_config.json", config)]).unwrap()),
        "<s>|</s>"
    );
}

#[test]
fn the_default_of_named_templates_is_used() {
    let config = r#"{"chat_template": [{"name": "tool_use", "template": "tools"},
        {"name": "default", "template": "plain"}]}"#;
    assert_eq!(
        render_empty(load(&[("tokenizer_config.json", config)]).unwrap()),
        "plain"
    );
}

#[test]
fn named_templates_without_a_default_are_an_error() {
    let config = r#"{"chat_template": [{"name": "tool_use", "template": "tools"}]}"#;
    let err = load(&[("tokenizer_config.json", config)]).unwrap_err();
    assert!(
        matches!(err, ChatTemplateError::NoDefault { .. }),
        "{err:?}"
    );
}

#[test]
fn chat_template_jinja_wins_over_tokenizer_config() {
    let files = [
        (
            "tokenizer_config.json",
            r#"{"chat_template": "old", "bos_token": "<s>"}"#,
        ),
        ("chat_template.jinja", "new {{ bos_token }}\n"),
    ];
    assert_eq!(render_empty(load(&files).unwrap()), "new <s>");
    assert_eq!(render_empty(load(&files[1..]).unwrap()), "new ");
}

#[test]
fn a_model_without_a_template_has_none() {
    assert!(load(&[]).unwrap().is_none());
    assert!(
        load(&[("tokenizer_config.json", r#"{"bos_token": "<s>"}"#)])
            .unwrap()
            .is_none()
    );
}

#[test]
fn a_broken_template_file_fails_loading_with_its_name() {
    let err = load(&[("chat_template.jinja", "{% for %}")]).unwrap_err();
    assert!(err.to_string().contains("chat_template.jinja"), "{err}");
    let err = load(&[("tokenizer_config.json", r#"{"chat_template": "{{ x"}"#)]).unwrap_err();
    assert!(err.to_string().contains("tokenizer_config.json"), "{err}");
}

#[test]
fn a_malformed_tokenizer_config_is_an_error_naming_it() {
    let err = load(&[("tokenizer_config.json", r#"{"chat_template": 3}"#)]).unwrap_err();
    assert!(matches!(err, ChatTemplateError::ConfigFile(_)), "{err:?}");
    assert!(err.to_string().contains("tokenizer_config.json"), "{err}");
}

#[test]
fn template_kwargs_reach_the_template_and_never_replace_its_variables() {
    // Qwen3's switch, reduced to the part that reads the variable.
    let source = "{{ messages[0].content }}{% if add_generation_prompt %}<|im_start|>assistant\n\
                  {% if enable_thinking is defined and enable_thinking is false %}\
                  <think>\n\n</think>\n\n{% endif %}{% endif %}";
    let template = template(source, None, None);
    let messages = [json!({"role": "user", "content": "Hi"})];
    let off = json!({"enable_thinking": false, "messages": [], "add_generation_prompt": false});
    let rendered = template
        .render_with(&messages, None, true, off.as_object())
        .unwrap();
    assert_eq!(rendered, "Hi<|im_start|>assistant\n<think>\n\n</think>\n\n");
    let plain = template.render_with(&messages, None, true, None).unwrap();
    assert_eq!(plain, "Hi<|im_start|>assistant\n");
}

#[test]
fn generation_blocks_render_their_body_with_the_same_whitespace() {
    let marked = "{%- for m in messages %}\n    {% generation %}\n{{ m.content }}\n    \
                  {%- endgeneration -%}\n{% endfor %}";
    let plain = "{%- for m in messages %}\n    {% if true %}\n{{ m.content }}\n    \
                 {%- endif -%}\n{% endfor %}";
    assert_eq!(environment::generation_blocks_as_plain(marked), plain);
    let messages = [
        json!({"role": "user", "content": "a"}),
        json!({"content": "b"}),
    ];
    let render = |source| template(source, None, None).render(&messages, None, false);
    assert_eq!(render(marked).unwrap(), render(plain).unwrap());
    for untouched in [
        "{%}",
        "{% if x %}{% endif %}",
        "{{ 'generation' }} {%",
        "{%-%}",
    ] {
        assert_eq!(
            environment::generation_blocks_as_plain(untouched),
            untouched
        );
    }
}

/// SmolLM3-3B's template as it ships (see `tests/data/chat_templates/README.md`).
fn smollm3() -> ChatTemplate {
    let path =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/data/chat_templates/smollm3.jinja");
    let source = std::fs::read_to_string(&path).unwrap();
    ChatTemplate::new(source, path, None, Some("<|im_end|>".into())).unwrap()
}

#[test]
fn smollm3_lists_the_tools_it_reads_as_xml_tools() {
    let template = smollm3();
    let ask = [json!({"role": "user", "content": "Weather in Paris?"})];
    let plain = template.render(&ask, None, true).unwrap();
    assert!(!plain.contains("### Tools"), "{plain}");
    assert!(
        plain.ends_with("<|im_start|>user\nWeather in Paris?<|im_end|>\n<|im_start|>assistant\n")
    );
    let with_tools = template.render(&ask, Some(&weather_tool()), true).unwrap();
    assert!(
        with_tools.contains(
            "<tools>\n{\"name\": \"get_weather\", \"description\": \"Get the weather <now>\""
        ),
        "{with_tools}"
    );
    assert!(with_tools.contains("within <tool_call></tool_call> XML tags"));
}

/// A template the families' real models ship (`tests/data/chat_templates/`).
fn shipped(file: &str) -> ChatTemplate {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/data/chat_templates")
        .join(file);
    let source = std::fs::read_to_string(&path).unwrap();
    ChatTemplate::new(source, path, None, None).unwrap()
}

/// A conversation with a call and its result; the call's content is `""`, since gpt-oss's
/// template looks for its channel tags in it.
fn conversation_with_a_call() -> Vec<Value> {
    let mut call = weather_call();
    call["content"] = json!("");
    vec![
        json!({"role": "system", "content": "You are terse."}),
        json!({"role": "user", "content": "Weather in Paris?"}),
        call,
        json!({"role": "tool", "tool_call_id": "call_1", "content": "{\"temp\": 21}"}),
    ]
}

#[test]
fn gpt_oss_renders_its_tools_namespace_and_harmony_messages_like_transformers() {
    let got = shipped("gpt-oss.jinja")
        .render(&conversation_with_a_call(), Some(&weather_tool()), true)
        .unwrap();
    let today = super::strftime::strftime_now("%Y-%m-%d");
    assert_eq!(
        got.replace(&format!("Current date: {today}"), "Current date: DATE"),
        "<|start|>system<|message|>You are ChatGPT, a large language model trained by OpenAI.\nKnowledge cutoff: 2024-06\nCurrent date: DATE\n\nReasoning: medium\n\n# Valid channels: analysis, commentary, final. Channel must be included for every message.\nCalls to these tools must go to the commentary channel: 'functions'.<|end|><|start|>developer<|message|># Instructions\n\nYou are terse.\n\n# Tools\n\n## functions\n\nnamespace functions {\n\n// Get the weather <now>\ntype get_weather = (_: {\ncity: string,\n}) => any;\n\n} // namespace functions<|end|><|start|>user<|message|>Weather in Paris?<|end|><|start|>assistant to=functions.get_weather<|channel|>commentary json<|message|>{\"city\": \"Paris\"}<|call|><|start|>functions.get_weather to=assistant<|channel|>commentary<|message|>\"{\\\"temp\\\": 21}\"<|end|><|start|>assistant"
    );
}

#[test]
fn a_tool_calling_turn_with_null_content_renders_as_with_empty_content_where_the_template_needs_it()
{
    let with_null: Vec<Value> = conversation_with_a_call()
        .into_iter()
        .map(|mut message| {
            if message.get("tool_calls").is_some() {
                message["content"] = Value::Null;
            }
            message
        })
        .collect();
    for file in [
        "gpt-oss.jinja",
        "qwen3.jinja",
        "llama3.1.jinja",
        "glm4.6.jinja",
    ] {
        let template = shipped(file);
        let tools = Some(weather_tool());
        let with_empty = template.render(&conversation_with_a_call(), tools.as_ref(), true);
        let got = template.render(&with_null, tools.as_ref(), true);
        assert!(got.is_ok(), "{file}: {got:?}");
        if file == "gpt-oss.jinja" {
            assert_eq!(got.unwrap(), with_empty.unwrap());
        }
    }
}

#[test]
fn glm_renders_its_arg_key_calls_like_transformers() {
    let got = shipped("glm4.6.jinja")
        .render(&conversation_with_a_call(), Some(&weather_tool()), true)
        .unwrap();
    assert_eq!(
        got,
        "[gMASK]<sop><|system|>\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are provided with function signatures within <tools></tools> XML tags:\n<tools>\n{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"description\": \"Get the weather <now>\", \"parameters\": {\"type\": \"object\", \"properties\": {\"city\": {\"type\": \"string\"}}, \"required\": [\"city\"]}}}\n</tools>\n\nFor each function call, output the function name and arguments within the following XML format:\n<tool_call>{function-name}\n<arg_key>{arg-key-1}</arg_key>\n<arg_value>{arg-value-1}</arg_value>\n<arg_key>{arg-key-2}</arg_key>\n<arg_value>{arg-value-2}</arg_value>\n...\n</tool_call><|system|>\nYou are terse.<|user|>\nWeather in Paris?<|assistant|>\n<think></think>\n<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Paris</arg_value>\n</tool_call><|observation|>\n<tool_response>\n{\"temp\": 21}\n</tool_response><|assistant|>"
    );
}

/// Gemma 4's calls in its own notation, and the results folded into the calling turn as its
/// template reads them (`tools::gemma4_tool_responses`); thinking off by default, so the prompt
/// ends with an empty thought channel.
#[test]
fn gemma4_renders_its_calls_and_their_results_in_one_model_turn_like_transformers() {
    let conversation = crate::tools::gemma4_tool_responses(&conversation_with_a_call());
    let got = shipped("gemma4.jinja")
        .render(&conversation, Some(&weather_tool()), true)
        .unwrap();
    assert_eq!(
        got,
        "<|turn>system\nYou are terse.<|tool>declaration:get_weather{description:<|\"|>Get the weather <now><|\"|>,parameters:{properties:{city:{type:<|\"|>STRING<|\"|>}},required:[<|\"|>city<|\"|>],type:<|\"|>OBJECT<|\"|>}}<tool|><turn|>\n<|turn>user\nWeather in Paris?<turn|>\n<|turn>model\n<|tool_call>call:get_weather{city:<|\"|>Paris<|\"|>}<tool_call|><|tool_response>response:get_weather{temp:21}<tool_response|><|channel>thought\n<channel|>"
    );
}

/// DeepSeek V3.1's template writes the calls and results but no tools: corral's description
/// (`tools::deepseek_messages`) joins the system prompt, and the arguments go in as JSON text,
/// which the template joins to its markers.
#[test]
fn deepseek_renders_its_described_tools_calls_and_results() {
    use crate::tools::{ToolFormat, deepseek_messages};
    let tools = weather_tool().as_array().unwrap().clone();
    let conversation = deepseek_messages(
        &conversation_with_a_call(),
        &tools,
        ToolFormat::DeepSeekV31,
        true,
    );
    let got = shipped("deepseek-v3.1.jinja")
        .render(&conversation, None, true)
        .unwrap();
    assert!(
        got.starts_with("You are terse.\n\n## Tools\nYou have access to the following tools:\n\n### get_weather\nDescription: Get the weather <now>\n"),
        "{got}"
    );
    assert!(
        got.ends_with("<｜User｜>Weather in Paris?<｜Assistant｜></think><｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>{\"city\":\"Paris\"}<｜tool▁call▁end｜><｜tool▁calls▁end｜><｜end▁of▁sentence｜><｜tool▁output▁begin｜>{\"temp\": 21}<｜tool▁output▁end｜>"),
        "{got}"
    );
}

/// Kimi K2-Thinking's template writes each call's id and the same id before its result: the
/// ids Kimi was trained on (`tools::kimi_call_ids`). The first K2 template writes neither, and
/// takes a call whose content is null.
#[test]
fn kimi_renders_its_own_call_ids_before_calls_and_results() {
    let conversation = crate::tools::kimi_call_ids(&conversation_with_a_call());
    let got = shipped("kimi-k2-thinking.jinja")
        .render(&conversation, Some(&weather_tool()), true)
        .unwrap();
    assert!(
        got.contains("<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0<|tool_call_argument_begin|>"),
        "{got}"
    );
    assert!(
        got.ends_with("<|im_system|>tool<|im_middle|>## Return of functions.get_weather:0\n{\"temp\": 21}<|im_end|><|im_assistant|>assistant<|im_middle|>"),
        "{got}"
    );
    let mut with_null = conversation_with_a_call();
    with_null[2] = weather_call();
    let first = shipped("kimi-k2.jinja").render(
        &crate::tools::kimi_call_ids(&with_null),
        Some(&weather_tool()),
        true,
    );
    assert!(first.is_ok(), "{first:?}");
}

/// Llama 4's pythonic template writes its tool list only from `custom_tools`, which corral
/// passes beside `tools` (as transformers does when a caller passes both), and past calls as
/// Python calls. Rendered by transformers with `custom_tools=tools`.
#[test]
fn llama4_renders_its_tool_list_and_python_calls_like_transformers() {
    let got = shipped("llama4.jinja")
        .render(&conversation_with_a_call(), Some(&weather_tool()), true)
        .unwrap();
    assert_eq!(
        got,
        "<|header_start|>system<|header_end|>\n\nYou are terse.\nHere is a list of functions in JSON format that you can invoke. Use exact format: [func_name1(param1=value1, param2=value2), func_name2(...)]\n[\n    {\n        \"type\": \"function\",\n        \"function\": {\n            \"name\": \"get_weather\",\n            \"description\": \"Get the weather <now>\",\n            \"parameters\": {\n                \"type\": \"object\",\n                \"properties\": {\n                    \"city\": {\n                        \"type\": \"string\"\n                    }\n                },\n                \"required\": [\n                    \"city\"\n                ]\n            }\n        }\n    }\n]\n<|eot|><|header_start|>user<|header_end|>\n\nWeather in Paris?<|eot|><|header_start|>assistant<|header_end|>\n\n[get_weather(city=\"Paris\")]<|eot|><|header_start|>ipython<|header_end|>\n\n\"{\\\"temp\\\": 21}\"<|eot|><|header_start|>assistant<|header_end|>\n\n"
    );
}

/// Mistral Small 3.1's system prompt, tools before the last user turn and past calls with
/// their ids, rendered by transformers.
#[test]
fn mistral_small_renders_its_system_prompt_tools_and_calls_like_transformers() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/data/chat_templates/mistral-small-3.1.jinja");
    let source = std::fs::read_to_string(&path).unwrap();
    let template =
        ChatTemplate::new(source, path, Some("<s>".into()), Some("</s>".into())).unwrap();
    let mut conversation = conversation_with_a_call();
    conversation[2]["tool_calls"][0]["id"] = json!("abcDEF123");
    conversation[3]["tool_call_id"] = json!("abcDEF123");
    let got = template
        .render(&conversation, Some(&weather_tool()), true)
        .unwrap();
    assert_eq!(
        got,
        "<s>[SYSTEM_PROMPT]You are a helpful assistant that can call tools. If you call one or more tools, format them in a single JSON array or objects, where each object is a tool call, not as separate objects outside of an array or multiple arrays. Use the format [{\"name\": tool call name, \"arguments\": tool call arguments}, additional tool calls] if you call more than one tool. If you call tools, do not attempt to interpret them or otherwise provide a response until you receive a tool call result that you can interpret for the user.You are terse.[/SYSTEM_PROMPT][AVAILABLE_TOOLS] [{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"description\": \"Get the weather <now>\", \"parameters\": {\"type\": \"object\", \"properties\": {\"city\": {\"type\": \"string\"}}, \"required\": [\"city\"]}}}][/AVAILABLE_TOOLS][INST]Weather in Paris?[/INST][TOOL_CALLS] [{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}, \"id\": \"abcDEF123\"}]</s>[TOOL_RESULTS] {\"content\": {\"temp\": 21}, \"call_id\": \"abcDEF123\"}[/TOOL_RESULTS]"
    );
}

/// A backslash-newline continues a string literal's line, as in Jinja2; in the text outside
/// tags it is text.
#[test]
fn a_backslash_newline_in_a_string_literal_continues_the_line() {
    let got = template(
        "a\\\nb{{ 'c\\\nd\\'e' }}{% set f = \"g\\\nh\" %}{{ f }}",
        None,
        None,
    )
    .render(&[], None, false)
    .unwrap();
    assert_eq!(got, "a\\\nbcd'egh");
}

/// Phi-4-mini's released template writes the functions from the system message's `tools`
/// string (`tools::phi4_messages` puts them there, as `json.dumps` writes them), a past call as
/// the model's `functools[` text, and a result as a `<|tool|>` turn.
#[test]
fn phi4_mini_renders_its_system_tools_string_and_calls_as_text() {
    let tools = weather_tool().as_array().unwrap().clone();
    let conversation = crate::tools::phi4_messages(&conversation_with_a_call(), &tools);
    let got = shipped("phi4-mini.jinja")
        .render(&conversation, Some(&weather_tool()), true)
        .unwrap();
    assert_eq!(
        got,
        r#"<|system|>You are terse.<|tool|>[{"name": "get_weather", "description": "Get the weather <now>", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}]<|/tool|><|end|><|user|>Weather in Paris?<|end|><|assistant|>functools[{"name": "get_weather", "arguments": {"city": "Paris"}}]<|end|><|tool|>{"temp": 21}<|end|><|assistant|>"#
    );
}

/// Gemma 4's template reads a tool parameter's `type` (its first, where a list), which a schema
/// of `anyOf` alternatives (Claude Code's) lacks: transformers refuses to render it; corral
/// renders the parameter with what it has.
#[test]
fn a_lookup_into_a_missing_key_renders_nothing_instead_of_failing() {
    let source = std::fs::read_to_string(
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/data/chat_templates/gemma4.jinja"),
    )
    .unwrap();
    let gemma4 = template(&source, Some("<bos>"), Some("<eos>"));
    let tools = json!([{"type": "function", "function": {"name": "update", "description": "d",
        "parameters": {"type": "object", "properties": {
            "status": {"description": "the new status",
                "anyOf": [{"type": "string"}, {"type": "null"}]}}}}}]);
    let prompt = gemma4
        .render(
            &[json!({"role": "user", "content": "hi"})],
            Some(&tools),
            true,
        )
        .unwrap();
    assert!(
        prompt.contains("status:{description:<|\"|>the new status<|\"|>"),
        "{prompt}"
    );
}
