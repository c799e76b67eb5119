//! DeepSeek's conversation before rendering. Its templates write past calls and results in its
//! own markers but never the `tools`: DeepSeek's model card has the caller describe them in the
//! system prompt, under `## Tools`, with the call notation spelled out. So corral writes that
//! description itself (where the template has no `tools` of its own), rather than teaching the
//! Hermes notation a DeepSeek model was not trained on. Its templates also join each call's
//! `arguments` to text, so they go back to the JSON text OpenAI sends them as.

use serde_json::{Value, json};

use super::format::ToolFormat;
use super::markers::{
    DEEPSEEK_CALL_BEGIN, DEEPSEEK_CALL_END, DEEPSEEK_CALLS_BEGIN, DEEPSEEK_CALLS_END, DEEPSEEK_SEP,
};

/// `messages` with `tools` (when there are any and `describe`) described in a system message
/// after the leading ones, and every call's arguments as JSON text.
pub fn deepseek_messages(
    messages: &[Value],
    tools: &[Value],
    format: ToolFormat,
    describe: bool,
) -> Vec<Value> {
    let mut out: Vec<Value> = messages.iter().map(arguments_as_text).collect();
    if describe && !tools.is_empty() {
        let at = out
            .iter()
            .position(|message| message.get("role").and_then(Value::as_str) != Some("system"))
            .unwrap_or(out.len());
        let content = description(tools, format);
        out.insert(at, json!({"role": "system", "content": content}));
    }
    out
}

fn arguments_as_text(message: &Value) -> Value {
    let mut message = message.clone();
    if let Some(Value::Array(calls)) = message.get_mut("tool_calls") {
        for call in calls {
            if let Some(arguments) = call.pointer_mut("/function/arguments")
                && !arguments.is_string()
            {
                *arguments = Value::String(arguments.to_string());
            }
        }
    }
    message
}

/// The `## Tools` section: each tool's name, description and parameters' schema, then the
/// notation to call them in.
fn description(tools: &[Value], format: ToolFormat) -> String {
    let mut text = String::from("## Tools\nYou have access to the following tools:\n");
    for tool in tools {
        let function = tool.get("function").unwrap_or(tool);
        let field = |key: &str| function.get(key).and_then(Value::as_str).unwrap_or("");
        let parameters = function
            .get("parameters")
            .cloned()
            .unwrap_or_else(|| json!({"type": "object"}));
        text += &format!(
            "\n### {}\nDescription: {}\n\nParameters: {parameters}\n",
            field("name"),
            field("description")
        );
    }
    let call = if format == ToolFormat::DeepSeekV3 {
        format!(
            "{DEEPSEEK_CALL_BEGIN}function{DEEPSEEK_SEP}tool_call_name\n```json\ntool_call_arguments\n```{DEEPSEEK_CALL_END}"
        )
    } else {
        format!(
            "{DEEPSEEK_CALL_BEGIN}tool_call_name{DEEPSEEK_SEP}tool_call_arguments{DEEPSEEK_CALL_END}"
        )
    };
    text += &format!(
        "\nIMPORTANT: ALWAYS adhere to this exact format for tool use:\n\
         {DEEPSEEK_CALLS_BEGIN}{call}{{{{additional_tool_calls}}}}{DEEPSEEK_CALLS_END}\n\n\
         Where:\n\
         - `tool_call_name` must be an exact match to one of the available tools\n\
         - `tool_call_arguments` must be valid JSON that strictly follows the tool's Parameters \
         Schema\n\
         - For multiple tool calls, chain them directly without separators or spaces\n"
    );
    text
}
