//! A system message in the middle of a conversation (agent CLIs send them between turns) for a
//! template that refuses one anywhere but first (Qwen3's raises). Moving it into the leading
//! system prompt would rewrite the start of every later prompt and lose the prefix cache's
//! reuse of the whole history, so it stays where it was sent, as a user turn marked as a
//! system reminder: everything rendered before it is unchanged.

use serde_json::{Value, json};

/// `messages` with every system message after the first message as a marked user turn; `None`
/// when there is none to rewrite.
pub fn as_user_turns(messages: &[Value]) -> Option<Vec<Value>> {
    let is_system = |message: &Value| message.get("role").and_then(Value::as_str) == Some("system");
    if !messages.iter().skip(1).any(is_system) {
        return None;
    }
    let rewritten = messages
        .iter()
        .enumerate()
        .map(|(index, message)| match message.get("content") {
            Some(content) if index > 0 && is_system(message) => json!({
                "role": "user",
                "content": format!("<system-reminder>\n{}\n</system-reminder>", text_of(content)),
            }),
            _ => message.clone(),
        })
        .collect();
    Some(rewritten)
}

/// `messages` with each `developer` message as a `system` one; `None` when there is none.
pub fn developer_as_system(messages: &[Value]) -> Option<Vec<Value>> {
    let is_developer =
        |message: &Value| message.get("role").and_then(Value::as_str) == Some("developer");
    if !messages.iter().any(is_developer) {
        return None;
    }
    let rewritten = messages
        .iter()
        .map(|message| {
            let mut message = message.clone();
            if is_developer(&message) {
                message["role"] = json!("system");
            }
            message
        })
        .collect();
    Some(rewritten)
}

/// A string, or the text of OpenAI-style content parts.
fn text_of(content: &Value) -> String {
    match content {
        Value::String(text) => text.clone(),
        Value::Array(parts) => parts
            .iter()
            .filter_map(|part| part.get("text").and_then(Value::as_str))
            .collect::<Vec<_>>()
            .join("\n"),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_later_system_message_becomes_a_marked_user_turn() {
        let messages = vec![
            json!({"role": "system", "content": "be brief"}),
            json!({"role": "user", "content": "hi"}),
            json!({"role": "system", "content": [{"type": "text", "text": "now in plan mode"}]}),
            json!({"role": "user", "content": "go"}),
        ];
        let rewritten = as_user_turns(&messages).unwrap();
        assert_eq!(rewritten[..2], messages[..2]);
        assert_eq!(
            rewritten[2],
            json!({"role": "user", "content": "<system-reminder>\nnow in plan mode\n</system-reminder>"})
        );
        assert_eq!(rewritten[3], messages[3]);
        assert!(as_user_turns(&messages[..2]).is_none());
    }

    #[test]
    fn a_developer_message_is_a_system_one() {
        let messages = vec![
            json!({"role": "developer", "content": [{"type": "input_text", "text": "rules"}]}),
            json!({"role": "user", "content": "hi"}),
        ];
        let rewritten = developer_as_system(&messages).unwrap();
        assert_eq!(rewritten[0]["role"], "system");
        assert_eq!(rewritten[0]["content"], messages[0]["content"]);
        assert_eq!(rewritten[1], messages[1]);
        assert!(developer_as_system(&messages[1..]).is_none());
    }
}
