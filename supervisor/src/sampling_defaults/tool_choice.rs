//! `[models.ID] tool_choice`: a default tool choice, so an operator can make a model that never
//! calls tools on its own start its turn with one (and the e2e tests can make a real agent CLI's
//! model call a harmless tool).
//!
//! It applies only to a request that has tools, leaves the choice to the model (no
//! `tool_choice`, or `auto`, the API's default, which Codex and opencode send with every
//! request), asks for no output format, and whose conversation ends with a user turn that
//! answers no tool call: once a tool's result is in, the model answers freely, so an agent loop
//! still ends.

use corral_ipc::{GenerateRequest, Prompt, ToolChoice};
use serde_json::Value;

/// Sets `request`'s tool choice to `configured` (`auto`, `required`, `none` or a tool's name)
/// where the rules above allow it. A tool name the request does not offer is left alone.
pub fn apply_tool_choice(configured: &str, request: &mut GenerateRequest) {
    let open = matches!(request.tool_choice, None | Some(ToolChoice::Auto));
    if !open || request.output_format.is_some() {
        return;
    }
    let Prompt::Chat {
        messages,
        tools: Some(tools),
        ..
    } = &request.prompt
    else {
        return;
    };
    if tools.is_empty() || !ends_with_a_fresh_user_turn(messages) {
        return;
    }
    request.tool_choice = match configured {
        "auto" => Some(ToolChoice::Auto),
        "required" => Some(ToolChoice::Required),
        "none" => Some(ToolChoice::None),
        name if tools.iter().any(|tool| tool_name(tool) == Some(name)) => {
            Some(ToolChoice::Function {
                name: name.to_owned(),
            })
        }
        name => {
            tracing::debug!(
                tool = name,
                "the default tool choice names a tool this request does not offer"
            );
            return;
        }
    };
}

/// The last message is the user's, and no tool result came in since the model's last turn
/// (Anthropic clients send a tool's result and more user text in one turn, which the Messages
/// route splits into a `tool` message and a `user` one). System messages after it do not count:
/// Claude Code ends its requests with one, after the user's turn.
fn ends_with_a_fresh_user_turn(messages: &[Value]) -> bool {
    let roles: Vec<&str> = messages
        .iter()
        .rev()
        .map(|message| message.get("role").and_then(Value::as_str).unwrap_or(""))
        .filter(|role| !matches!(*role, "system" | "developer"))
        .collect();
    roles.first() == Some(&"user")
        && roles
            .iter()
            .take_while(|role| **role != "assistant")
            .all(|role| *role != "tool")
}

/// The name of a chat-shaped tool: `{"type": "function", "function": {"name": ...}}`.
fn tool_name(tool: &Value) -> Option<&str> {
    tool.get("function")?.get("name")?.as_str()
}
