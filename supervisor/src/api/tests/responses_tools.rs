//! Responses tools as Codex sends them: hosted tools left out, namespaces flattened and called
//! back with their namespace, custom tools taking text (and a forced one held to its grammar),
//! tools added by `additional_tools` items, and past custom calls replayed.

use corral_ipc::{OutputFormat, Prompt, ToolChoice};
use serde_json::json;

use super::*;
use crate::api::hosted_tools;

fn apply_patch(format: Value) -> Value {
    json!({"type": "custom", "name": "apply_patch", "description": "Edit files", "format": format})
}

/// The prompt's tool names and its messages, as the worker got them.
fn prompt(backend: &FakeBackend) -> (Vec<String>, Vec<Value>, GenerateRequest) {
    let (_, request) = backend.last_request();
    let Prompt::Chat {
        messages, tools, ..
    } = &request.prompt
    else {
        panic!("a chat prompt");
    };
    let names = tools
        .as_ref()
        .map(|tools| {
            tools
                .iter()
                .map(|tool| tool["function"]["name"].as_str().unwrap().to_owned())
                .collect()
        })
        .unwrap_or_default();
    (names, messages.clone(), request.clone())
}

#[tokio::test]
async fn hosted_tools_are_left_out_and_named_in_a_header() {
    let backend = FakeBackend::replying(hello_world());
    let body = json!({"model": "tiny", "input": "Hi", "tools": [
        {"type": "web_search", "external_web_access": false},
        {"type": "function", "name": "get_weather", "parameters": {"type": "object"}},
        {"type": "image_generation"},
        {"type": "web_search_preview_2025_03_11"},
    ]});
    for stream in [false, true] {
        let mut body = body.clone();
        body["stream"] = json!(stream);
        let reply = post(&backend, "/v1/responses", body).await;
        assert_eq!(reply.status, StatusCode::OK);
        assert_eq!(
            reply.headers[hosted_tools::HEADER],
            "image_generation, web_search, web_search_preview_2025_03_11"
        );
        let (names, _, _) = prompt(&backend);
        assert_eq!(names, ["get_weather"]);
    }
    let plain = post(
        &backend,
        "/v1/responses",
        json!({"model": "tiny", "input": "Hi"}),
    )
    .await;
    assert!(plain.headers.get(hosted_tools::HEADER).is_none());
}

#[tokio::test]
async fn namespace_tools_are_offered_flat_and_called_back_with_their_namespace() {
    let backend = FakeBackend::replying(called("mcp__files__read", r#"{"path":"a.txt"}"#));
    let body = json!({"model": "tiny", "tool_choice": {"type": "function", "name": "read", "namespace": "mcp__files__"},
        "input": [
            {"type": "message", "role": "user", "content": "Read b.txt"},
            {"type": "function_call", "call_id": "call_1", "name": "read",
             "namespace": "mcp__files__", "arguments": "{\"path\":\"b.txt\"}"},
            {"type": "function_call_output", "call_id": "call_1", "output": "bee"},
            {"type": "message", "role": "user", "content": "Now a.txt"},
        ],
        "tools": [{"type": "namespace", "name": "mcp__files__", "description": "Files",
            "tools": [{"type": "function", "name": "read", "strict": false,
                "parameters": {"type": "object", "properties": {"path": {"type": "string"}}}}]}]});
    let reply = post(&backend, "/v1/responses", body).await;
    assert_eq!(reply.status, StatusCode::OK, "{:?}", reply.body);
    let (names, messages, request) = prompt(&backend);
    assert_eq!(names, ["mcp__files__read"]);
    assert_eq!(
        request.tool_choice,
        Some(ToolChoice::Function {
            name: "mcp__files__read".to_owned()
        })
    );
    assert_eq!(
        messages[1]["tool_calls"][0]["function"]["name"],
        "mcp__files__read"
    );
    let output = reply.json()["output"].clone();
    assert_eq!(output[0]["type"], "function_call");
    assert_eq!(output[0]["name"], "read");
    assert_eq!(output[0]["namespace"], "mcp__files__");
    assert_eq!(output[0]["arguments"], r#"{"path":"a.txt"}"#);
}

#[tokio::test]
async fn a_custom_tool_takes_text_and_comes_back_as_a_custom_tool_call() {
    let backend = FakeBackend::replying(called(
        "apply_patch",
        r#"{"input":"*** Begin Patch\n*** End Patch"}"#,
    ));
    let body = json!({"model": "tiny", "input": "Fix it",
        "tools": [apply_patch(json!({"type": "grammar", "syntax": "lark", "definition": "start: /.+/"}))]});
    let reply = post(&backend, "/v1/responses", body.clone()).await;
    assert_eq!(reply.status, StatusCode::OK);
    let (_, _, request) = prompt(&backend);
    let Prompt::Chat { tools, .. } = &request.prompt else {
        panic!("a chat prompt");
    };
    let parameters = &tools.as_ref().unwrap()[0]["function"]["parameters"];
    assert_eq!(parameters["properties"]["input"]["type"], "string");
    assert_eq!(parameters["required"], json!(["input"]));
    let output = reply.json()["output"].clone();
    assert_eq!(output.as_array().unwrap().len(), 1, "{output}");
    assert_eq!(output[0]["type"], "custom_tool_call");
    assert!(output[0]["id"].as_str().unwrap().starts_with("ctc_"));
    assert!(output[0]["call_id"].as_str().unwrap().starts_with("call_"));
    assert_eq!(output[0]["name"], "apply_patch");
    assert_eq!(output[0]["input"], "*** Begin Patch\n*** End Patch");

    let mut streamed = body;
    streamed["stream"] = json!(true);
    let reply = post(&backend, "/v1/responses", streamed).await;
    let events = reply.sse_json();
    let types: Vec<&str> = events
        .iter()
        .map(|event| event["type"].as_str().unwrap())
        .collect();
    assert_eq!(
        types,
        [
            "response.created",
            "response.in_progress",
            "response.output_item.added",
            "response.custom_tool_call_input.delta",
            "response.custom_tool_call_input.done",
            "response.output_item.done",
            "response.completed",
        ]
    );
    assert_eq!(events[2]["item"]["type"], "custom_tool_call");
    assert_eq!(events[2]["item"]["input"], "");
    assert_eq!(events[4]["input"], "*** Begin Patch\n*** End Patch");
    assert_eq!(
        events[6]["response"]["output"][0]["input"],
        events[4]["input"]
    );
}

/// Forcing a custom tool makes the whole answer its input, held to the tool's grammar.
#[tokio::test]
async fn a_forced_custom_tool_holds_the_whole_answer_to_its_grammar() {
    let backend = FakeBackend::replying(hello_world());
    for (format, grammar) in [
        (
            json!({"type": "grammar", "syntax": "lark", "definition": "start: \"Hello\" \" world\""}),
            Some("start: \"Hello\" \" world\"".to_owned()),
        ),
        (
            json!({"type": "grammar", "syntax": "regex", "definition": "Hello w/o+rld"}),
            Some("start: /Hello w\\/o+rld/".to_owned()),
        ),
        (json!({"type": "text"}), None),
    ] {
        let body = json!({"model": "tiny", "input": "Say it",
            "tools": [apply_patch(format)],
            "tool_choice": {"type": "custom", "name": "apply_patch"}});
        let reply = post(&backend, "/v1/responses", body.clone()).await;
        assert_eq!(reply.status, StatusCode::OK);
        let (names, _, request) = prompt(&backend);
        if grammar.is_some() {
            assert_eq!(
                names,
                ["apply_patch"],
                "the tool stays described to the model"
            );
            assert_eq!(request.tool_choice, Some(ToolChoice::Auto));
        } else {
            assert_eq!(request.tool_choice, Some(ToolChoice::None));
        }
        assert_eq!(
            request.output_format,
            grammar.map(|grammar| OutputFormat::Lark { grammar })
        );
        let output = reply.json()["output"].clone();
        assert_eq!(output.as_array().unwrap().len(), 1, "{output}");
        assert_eq!(output[0]["type"], "custom_tool_call");
        assert_eq!(output[0]["input"], "Hello world");

        let mut streamed = body;
        streamed["stream"] = json!(true);
        let events = post(&backend, "/v1/responses", streamed).await.sse_json();
        let deltas: Vec<&str> = events
            .iter()
            .filter(|event| event["type"] == "response.custom_tool_call_input.delta")
            .map(|event| event["delta"].as_str().unwrap())
            .collect();
        assert_eq!(deltas, ["Hello", " world"]);
        let last = events.last().unwrap();
        assert_eq!(last["type"], "response.completed");
        assert_eq!(last["response"]["output"][0]["input"], "Hello world");
    }
}

#[tokio::test]
async fn additional_tools_items_add_their_tools_and_past_custom_calls_replay() {
    let backend = FakeBackend::replying(called("functions__exec", r#"{"input":"ls"}"#));
    let body = json!({"model": "tiny", "input": [
        {"type": "additional_tools", "role": "developer", "tools": [
            {"type": "namespace", "name": "functions", "description": "Code mode",
             "tools": [{"type": "custom", "name": "exec", "format": {"type": "text"}}]}]},
        {"role": "user", "content": [{"type": "input_text", "text": "List files"}]},
        {"type": "custom_tool_call", "call_id": "call_1", "name": "exec", "namespace": "functions",
         "input": "pwd", "status": "completed"},
        {"type": "custom_tool_call_output", "call_id": "call_1",
         "output": [{"type": "input_text", "text": "/tmp"}]},
        {"type": "reasoning", "summary": [], "encrypted_content": "opaque"},
        {"type": "web_search_call", "status": "completed", "action": {"type": "search"}},
    ], "text": {"verbosity": "low"}, "reasoning": {"effort": "medium", "summary": "auto", "context": "all"},
       "include": ["reasoning.encrypted_content"], "prompt_cache_key": "abc", "store": false});
    let reply = post(&backend, "/v1/responses", body).await;
    assert_eq!(reply.status, StatusCode::OK, "{:?}", reply.body);
    let (names, messages, _) = prompt(&backend);
    assert_eq!(names, ["functions__exec"]);
    assert_eq!(messages.len(), 3, "{messages:?}");
    assert_eq!(messages[0]["content"], "List files");
    let call = &messages[1]["tool_calls"][0]["function"];
    assert_eq!(call["name"], "functions__exec");
    assert_eq!(call["arguments"], json!({"input": "pwd"}));
    assert_eq!(messages[2]["role"], "tool");
    assert_eq!(messages[2]["content"], "/tmp");
    let output = reply.json()["output"].clone();
    assert_eq!(output[0]["type"], "custom_tool_call");
    assert_eq!(output[0]["name"], "exec");
    assert_eq!(output[0]["namespace"], "functions");
    assert_eq!(output[0]["input"], "ls");
}

#[tokio::test]
async fn bad_tool_shapes_are_still_a_400_naming_the_field() {
    let backend = FakeBackend::replying(hello_world());
    let cases = [
        (json!({"tools": [{"type": "custom"}]}), "tools[0].name"),
        (
            json!({"tools": [{"type": "namespace", "name": "ns"}]}),
            "tools[0].tools",
        ),
        (
            json!({"tools": [apply_patch(json!({"type": "grammar", "syntax": "ebnf", "definition": "x"}))]}),
            "tools[0].format",
        ),
        (
            json!({"input": [{"type": "additional_tools", "tools": [{"type": "teleport", "name": "x"}]}]}),
            "input[0].tools[0].type",
        ),
        (
            json!({"tool_choice": {"type": "custom", "name": "missing"}}),
            "tool_choice",
        ),
    ];
    for (mut body, param) in cases {
        body["model"] = json!("tiny");
        if body.get("input").is_none() {
            body["input"] = json!("x");
        }
        let reply = post(&backend, "/v1/responses", body.clone()).await;
        assert_eq!(reply.status, StatusCode::BAD_REQUEST, "{body}");
        assert_eq!(reply.error()["param"], param, "{body}");
    }
    assert_eq!(backend.request_count(), 0);
}
