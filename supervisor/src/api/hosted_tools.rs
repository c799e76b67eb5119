//! Tools the API provider defines and runs itself (OpenAI's web search, file search, code
//! interpreter, MCP, and the shell and patch tools with call items of their own; Anthropic's
//! typed tools: web search, web fetch, code execution...). corral cannot run them, and agent
//! CLIs send some by default, so they are left out of the prompt instead of refused. An operator sees what was left out: each kind once in the log, and every answer
//! that left some out names them in the `x-corral-dropped-tools` header.

use std::collections::BTreeSet;
use std::sync::{Mutex, OnceLock};

use axum::http::HeaderValue;
use axum::response::Response;

pub const HEADER: &str = "x-corral-dropped-tools";

/// OpenAI's hosted tool types, dated variants (`web_search_preview_2025_03_11`) included.
const RESPONSES_HOSTED: [&str; 11] = [
    "web_search",
    "file_search",
    "code_interpreter",
    "image_generation",
    "computer_use",
    "mcp",
    "local_shell",
    "shell",
    "apply_patch",
    "tool_search",
    "computer",
];

pub fn is_hosted_responses_tool(kind: &str) -> bool {
    RESPONSES_HOSTED
        .iter()
        .any(|hosted| kind == *hosted || kind.starts_with(&format!("{hosted}_")))
}

/// The tool kinds one request left out, in a stable order.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Dropped(BTreeSet<String>);

impl Dropped {
    pub fn add(&mut self, kind: &str) {
        self.0.insert(kind.to_owned());
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Logs each kind the first time this process leaves it out: agents send the same hosted
    /// tools with every request, and one line per request would bury the log.
    pub fn log_new(&self, route: &str) {
        static SEEN: OnceLock<Mutex<BTreeSet<String>>> = OnceLock::new();
        let mut seen = SEEN
            .get_or_init(Default::default)
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        for kind in &self.0 {
            if seen.insert(kind.clone()) {
                tracing::info!(
                    tool = %kind,
                    route,
                    "left a hosted tool out of the prompt: corral cannot run it (listed in the \
                     {HEADER} header of each answer that leaves it out)"
                );
            }
        }
    }

    /// Names the left-out kinds in `response`'s header, when there are any.
    pub fn attach(&self, mut response: Response) -> Response {
        if self.is_empty() {
            return response;
        }
        let names: Vec<&str> = self.0.iter().map(String::as_str).collect();
        if let Ok(value) = HeaderValue::from_str(&names.join(", ")) {
            response.headers_mut().insert(HEADER, value);
        }
        response
    }
}
