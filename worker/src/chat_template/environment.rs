//! A minijinja environment that behaves like the one transformers renders chat templates in.
//!
//! Templates are written against Jinja2 as transformers configures it: `trim_blocks` and
//! `lstrip_blocks` on, trailing newline dropped, the loop-controls extension, Python string and
//! dict methods (`.strip()`, `.items()`, ...), three helpers of its own: `raise_exception`,
//! `strftime_now` and a `tojson` that is Python's `json.dumps`, its `{% generation %}` block, and
//! Python's line continuation (backslash-newline) inside string literals. One departure: a
//! lookup into an undefined value is undefined, not an error (`UndefinedBehavior::Chainable`).
//! Matching those is what makes the prompt byte-identical to the one the model was trained on.

use std::borrow::Cow;
use std::fmt;

use minijinja::{AutoEscape, Environment, Error, ErrorKind, UndefinedBehavior};

use super::pyjson::tojson;
use super::strftime::strftime_now;

/// Marks an error as the template's own `raise_exception(message)`, so that rendering can tell
/// it (the request's fault, e.g. roles that do not alternate) from a broken template.
#[derive(Debug)]
pub struct RaisedByTemplate(pub String);

impl fmt::Display for RaisedByTemplate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for RaisedByTemplate {}

pub fn hugging_face_environment() -> Environment<'static> {
    let mut env = Environment::new();
    env.set_trim_blocks(true);
    env.set_lstrip_blocks(true);
    env.set_keep_trailing_newline(false);
    // A lookup into a missing key or index yields nothing rather than failing the request:
    // Gemma 4's template reads a tool parameter's `type[0]` where the schema gives `anyOf`
    // instead (Claude Code's tools), which transformers refuses to render.
    env.set_undefined_behavior(UndefinedBehavior::Chainable);
    // minijinja picks escaping from the template's name (`.json` means JSON-escaping); a
    // prompt is never escaped, as in transformers.
    env.set_auto_escape_callback(|_name| AutoEscape::None);
    env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
    env.add_function("raise_exception", raise_exception);
    env.add_function("strftime_now", |format: &str| strftime_now(format));
    env.add_filter("tojson", tojson);
    env
}

fn raise_exception(message: String) -> Result<String, Error> {
    Err(Error::new(ErrorKind::InvalidOperation, message.clone())
        .with_source(RaisedByTemplate(message)))
}

/// `source` with transformers' `{% generation %}` ... `{% endgeneration %}` (which SmolLM3's
/// template wraps its assistant turns in) as `{% if true %}` ... `{% endif %}`: transformers
/// only records where the block's output falls, for training masks, and renders its body as is.
/// The tags keep their whitespace control (`{%-`, `-%}`), so the prompt is the same.
pub fn generation_blocks_as_plain(source: &str) -> Cow<'_, str> {
    if !source.contains("generation") {
        return Cow::Borrowed(source);
    }
    let mut out = String::with_capacity(source.len());
    let mut rest = source;
    while let Some(open) = rest.find("{%") {
        out.push_str(&rest[..open]);
        let tag = &rest[open..];
        let Some(close) = tag[2..].find("%}").map(|at| at + 2) else {
            rest = tag;
            break;
        };
        let inner = &tag[2..close];
        // The markers are ASCII, so splitting next to them stays on character boundaries.
        let (left, body) = match inner.as_bytes().first() {
            Some(b'-' | b'+') => inner.split_at(1),
            _ => ("", inner),
        };
        let (body, right) = match body.as_bytes().last() {
            Some(b'-' | b'+') => body.split_at(body.len() - 1),
            _ => (body, ""),
        };
        match body.trim() {
            "generation" => out.push_str(&format!("{{%{left} if true {right}%}}")),
            "endgeneration" => out.push_str(&format!("{{%{left} endif {right}%}}")),
            _ => out.push_str(&tag[..close + 2]),
        }
        rest = &tag[close + 2..];
    }
    out.push_str(rest);
    Cow::Owned(out)
}

/// `source` with each backslash-newline inside a tag's string literal removed: Jinja2 reads a
/// string literal with Python's escapes, where that pair continues the line (Mistral Small
/// 3.1's template breaks its system prompts so), and minijinja would keep both characters.
pub fn string_line_continuations_joined(source: &str) -> Cow<'_, str> {
    if !source.contains("\\\n") {
        return Cow::Borrowed(source);
    }
    let mut out = String::with_capacity(source.len());
    let mut chars = source.chars().peekable();
    // The character before the closing `}` of the tag the scan is in (`}` or `%`), and the
    // quote of the string literal it is in.
    let mut tag_close: Option<char> = None;
    let mut quote: Option<char> = None;
    while let Some(c) = chars.next() {
        match (tag_close, quote) {
            (None, _) => {
                out.push(c);
                if let ('{', Some(&next @ ('{' | '%'))) = (c, chars.peek()) {
                    out.push(next);
                    chars.next();
                    tag_close = Some(if next == '{' { '}' } else { '%' });
                }
            }
            (Some(close), None) => {
                out.push(c);
                if c == '\'' || c == '"' {
                    quote = Some(c);
                } else if c == close && chars.peek() == Some(&'}') {
                    out.push('}');
                    chars.next();
                    tag_close = None;
                }
            }
            (Some(_), Some(open)) => match (c, chars.peek()) {
                ('\\', Some('\n')) => {
                    chars.next();
                }
                ('\\', Some(&escaped)) => {
                    out.push(c);
                    out.push(escaped);
                    chars.next();
                }
                _ => {
                    out.push(c);
                    if c == open {
                        quote = None;
                    }
                }
            },
        }
    }
    Cow::Owned(out)
}
