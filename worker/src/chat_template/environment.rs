//! A minijinja environment that behaves like the one transformers renders chat templates in.
//!
//! Templates are written against Jinja2 as transformers configures it: `trim_blocks` and
//! `lstrip_blocks` on, trailing newline dropped, the loop-controls extension, Python string and
//! dict methods (`.strip()`, `.items()`, ...), and three helpers of its own: `raise_exception`,
//! `strftime_now` and a `tojson` that is Python's `json.dumps`. Matching those is what makes the
//! prompt byte-identical to the one the model was trained on.

use std::fmt;

use minijinja::{AutoEscape, Environment, Error, ErrorKind};

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
