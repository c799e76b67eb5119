//! gpt-oss's harmony format. The output is a run of messages, each a header (`<|channel|>NAME`,
//! perhaps ` to=RECIPIENT` and `<|constrain|>json`), `<|message|>`, a body, and an end marker
//! (`<|end|>`, `<|return|>`, `<|call|>`); each message after the first opens with
//! `<|start|>assistant`. The prompt ends with `<|start|>assistant`, so the output opens with the
//! first message's header. A message to `functions.NAME` is a call whose body is its JSON
//! arguments, the `analysis` channel is reasoning, and every other message (`final`, a
//! `commentary` preamble) is the answer. Output that does not open with a header (one held to a
//! JSON schema, say) is the answer as written.
//!
//! As in `parser`, a tail that could still become a marker is held back, and every decision
//! depends only on the text, never on its chunking.

use serde_json::Value;

use super::fragment::{Fragments, ToolCall};
use super::markers::{
    HARMONY_CALL, HARMONY_CHANNEL, HARMONY_END, HARMONY_MESSAGE, HARMONY_RETURN, HARMONY_START,
    held_tail,
};

/// What a message's body is, from its header.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Body {
    Reasoning,
    Content,
    /// A call of `name`; `header` is its text from the message's start, returned as content
    /// with the body if the arguments do not parse.
    Call {
        name: String,
        header: String,
    },
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum State {
    /// The output's first bytes: a header, or plain text.
    Start,
    /// A header, up to `<|message|>`.
    Header,
    Body(Body),
}

/// What may open the output's first header: the prompt ends with `<|start|>assistant`, after
/// which come the channel or the recipient.
const HEADER_OPENERS: [&str; 4] = [HARMONY_CHANNEL, HARMONY_START, " to=", "to="];

/// What ends a body: the three end markers, and a next message's start where the model left
/// out the end.
const BODY_ENDS: [&str; 4] = [HARMONY_END, HARMONY_RETURN, HARMONY_CALL, HARMONY_START];

#[derive(Debug)]
pub(super) struct HarmonyParser {
    parse_tools: bool,
    state: State,
    /// The undecided text.
    pending: String,
    /// How much of a call's body was searched for its end already (a call is held whole).
    scanned: usize,
    malformed: Option<String>,
}

impl HarmonyParser {
    pub(super) fn new(parse_tools: bool) -> Self {
        Self {
            parse_tools,
            state: State::Start,
            pending: String::new(),
            scanned: 0,
            malformed: None,
        }
    }

    pub(super) fn push(&mut self, text: &str, out: &mut Fragments) {
        self.pending.push_str(text);
        while self.step(out) {}
    }

    pub(super) fn finish(&mut self, out: &mut Fragments) {
        let rest = std::mem::take(&mut self.pending);
        match std::mem::replace(&mut self.state, State::Body(Body::Content)) {
            State::Body(Body::Reasoning) => out.reasoning(&rest),
            // The model stops at `<|call|>`, a stop token, so a call usually ends here.
            State::Body(Body::Call { name, header }) => self.decide_call(out, name, &header, &rest),
            State::Start | State::Header | State::Body(Body::Content) => out.content(&rest),
        }
        self.scanned = 0;
    }

    pub(super) fn is_reasoning(&self) -> bool {
        self.state == State::Body(Body::Reasoning)
    }

    pub(super) fn malformed(&self) -> Option<&str> {
        self.malformed.as_deref()
    }

    /// Takes one decision on the pending text; false when the next one needs more text.
    fn step(&mut self, out: &mut Fragments) -> bool {
        match &self.state {
            State::Start => {
                let text = self.pending.as_str();
                if HEADER_OPENERS.iter().any(|opener| text.starts_with(opener)) {
                    self.state = State::Header;
                } else if HEADER_OPENERS.iter().any(|opener| opener.starts_with(text)) {
                    return false;
                } else {
                    self.state = State::Body(Body::Content);
                }
                true
            }
            State::Header => {
                let Some(at) = self.pending.find(HARMONY_MESSAGE) else {
                    return false;
                };
                let header: String = self.pending.drain(..at + HARMONY_MESSAGE.len()).collect();
                self.state = State::Body(self.body_of(header));
                true
            }
            State::Body(Body::Call { .. }) => self.call_body(out),
            State::Body(body) => {
                let reasoning = *body == Body::Reasoning;
                let end = BODY_ENDS
                    .iter()
                    .filter_map(|marker| Some((self.pending.find(marker)?, *marker)))
                    .min();
                let (release, next) = match end {
                    Some((at, marker)) => (at, Some((at, marker))),
                    None => (
                        self.pending.len() - held_tail(&self.pending, &BODY_ENDS),
                        None,
                    ),
                };
                let text: String = self.pending.drain(..release).collect();
                if reasoning {
                    out.reasoning(&text);
                } else {
                    out.content(&text);
                }
                let Some((_, marker)) = next else {
                    return false;
                };
                self.end_message(marker);
                true
            }
        }
    }

    /// Buffers a call's body to its end marker, then decides it.
    fn call_body(&mut self, out: &mut Fragments) -> bool {
        let from = self.scanned.min(self.pending.len());
        let from = (0..=from)
            .rev()
            .find(|&i| self.pending.is_char_boundary(i))
            .unwrap_or(0);
        let end = BODY_ENDS
            .iter()
            .filter_map(|marker| Some((from + self.pending[from..].find(marker)?, *marker)))
            .min();
        let Some((at, marker)) = end else {
            // A marker split here may start this far back.
            self.scanned = self.pending.len().saturating_sub(HARMONY_RETURN.len());
            return false;
        };
        let body: String = self.pending.drain(..at).collect();
        if let State::Body(Body::Call { name, header }) =
            std::mem::replace(&mut self.state, State::Header)
        {
            self.decide_call(out, name, &header, &body);
        }
        self.scanned = 0;
        self.end_message(marker);
        true
    }

    /// Drops the end marker (a next message's `<|start|>` stays, for its header).
    fn end_message(&mut self, marker: &str) {
        if marker != HARMONY_START {
            self.pending.drain(..marker.len());
        }
        self.state = State::Header;
    }

    fn decide_call(&mut self, out: &mut Fragments, name: String, header: &str, body: &str) {
        match arguments(body) {
            Ok(arguments) => out.call(ToolCall { name, arguments }),
            Err(why) => {
                out.content(header);
                out.content(body);
                self.malformed = Some(why);
            }
        }
    }

    /// The body a header announces: `<|start|>assistant<|channel|>commentary to=functions.NAME
    /// <|constrain|>json<|message|>`, or with ` to=...` before the channel, as the template
    /// writes past calls.
    fn body_of(&self, header: String) -> Body {
        let recipient = header
            .find("to=")
            .map(|at| word(&header[at + "to=".len()..]));
        let channel = header
            .find(HARMONY_CHANNEL)
            .map(|at| word(&header[at + HARMONY_CHANNEL.len()..]));
        match (
            recipient.and_then(|to| to.strip_prefix("functions.")),
            channel,
        ) {
            (Some(name), _) if self.parse_tools && !name.is_empty() => Body::Call {
                name: name.to_owned(),
                header,
            },
            (_, Some("analysis")) => Body::Reasoning,
            _ => Body::Content,
        }
    }
}

/// The text up to the next whitespace or token.
fn word(text: &str) -> &str {
    let end = text
        .find(|c: char| c.is_whitespace() || c == '<')
        .unwrap_or(text.len());
    &text[..end]
}

/// A call's body: a JSON object, as compact JSON.
fn arguments(body: &str) -> Result<String, String> {
    match serde_json::from_str::<Value>(body.trim()) {
        Ok(value @ Value::Object(_)) => Ok(value.to_string()),
        Ok(_) => Err("the call's arguments are not a JSON object".into()),
        Err(error) => Err(format!("the call's arguments are not JSON: {error}")),
    }
}
