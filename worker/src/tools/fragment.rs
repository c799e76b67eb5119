//! What the output parser hands out: pieces of the answer, of the reasoning, and whole calls.

/// One decided piece of a model's output, in output order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fragment {
    /// Answer text for the client.
    Content(String),
    /// Text inside the model's `<think>` block, without the markers.
    Reasoning(String),
    /// A complete, valid tool call.
    ToolCall(ToolCall),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolCall {
    pub name: String,
    /// A JSON object in compact form.
    pub arguments: String,
}

/// Collects one step's fragments, merging adjacent text of the same kind so that a push
/// returns one `Content` for one run of text however the text was chunked.
#[derive(Debug, Default)]
pub(super) struct Fragments(Vec<Fragment>);

impl Fragments {
    pub(super) fn content(&mut self, text: &str) {
        if text.is_empty() {
            return;
        }
        match self.0.last_mut() {
            Some(Fragment::Content(last)) => last.push_str(text),
            _ => self.0.push(Fragment::Content(text.to_owned())),
        }
    }

    pub(super) fn reasoning(&mut self, text: &str) {
        if text.is_empty() {
            return;
        }
        match self.0.last_mut() {
            Some(Fragment::Reasoning(last)) => last.push_str(text),
            _ => self.0.push(Fragment::Reasoning(text.to_owned())),
        }
    }

    pub(super) fn call(&mut self, call: ToolCall) {
        self.0.push(Fragment::ToolCall(call));
    }

    pub(super) fn into_vec(self) -> Vec<Fragment> {
        self.0
    }
}
