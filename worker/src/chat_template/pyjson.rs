//! The `tojson` filter as Hugging Face defines it: Python's `json.dumps`, not Jinja's.
//!
//! Chat templates put tool schemas and tool-call arguments into the prompt with `tojson`, and
//! models were trained on what transformers produces there: `json.dumps(x, ensure_ascii=False,
//! indent=indent, separators=separators, sort_keys=sort_keys)`, so `{"a": 1, "b": [1, 2]}` with
//! spaces after `:` and `,`, no HTML escaping, and keys in insertion order. minijinja's built-in
//! filter writes compact JSON and escapes `<>&'`, which would put text in front of the model it
//! never saw in training; hence this replacement. Insertion order needs minijinja's and
//! serde_json's `preserve_order` features.

use minijinja::value::{Kwargs, Value};
use minijinja::{Error, ErrorKind};
use serde_json::Value as Json;

/// `value | tojson(ensure_ascii=False, indent=None, separators=None, sort_keys=False)`.
pub fn tojson(value: &Value, kwargs: Kwargs) -> Result<Value, Error> {
    let indent: Option<usize> = kwargs.get("indent")?;
    let separators: Option<Vec<String>> = kwargs.get("separators")?;
    let style = Style {
        ensure_ascii: kwargs.get::<Option<bool>>("ensure_ascii")?.unwrap_or(false),
        sort_keys: kwargs.get::<Option<bool>>("sort_keys")?.unwrap_or(false),
        indent: indent.map(|n| " ".repeat(n)),
        // Python's defaults: no trailing space after "," when indenting, since a newline follows.
        separators: match separators.as_deref() {
            Some([item, key]) => (item.clone(), key.clone()),
            Some(_) => {
                return Err(Error::new(
                    ErrorKind::InvalidOperation,
                    "tojson: separators must be a pair (item_separator, key_separator)",
                ));
            }
            None if indent.is_some() => (",".into(), ": ".into()),
            None => (", ".into(), ": ".into()),
        },
    };
    kwargs.assert_all_used()?;
    let json = serde_json::to_value(value).map_err(|err| {
        Error::new(ErrorKind::InvalidOperation, "tojson: value is not JSON").with_source(err)
    })?;
    let mut out = String::new();
    style.write(&mut out, &json, 0);
    Ok(Value::from(out))
}

struct Style {
    ensure_ascii: bool,
    sort_keys: bool,
    indent: Option<String>,
    /// (between items, between a key and its value)
    separators: (String, String),
}

impl Style {
    fn write(&self, out: &mut String, value: &Json, depth: usize) {
        match value {
            Json::Null => out.push_str("null"),
            Json::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
            Json::Number(n) => out.push_str(&n.to_string()),
            Json::String(s) => self.write_str(out, s),
            Json::Array(items) if items.is_empty() => out.push_str("[]"),
            Json::Array(items) => {
                out.push('[');
                for (i, item) in items.iter().enumerate() {
                    self.write_separator(out, i, depth + 1);
                    self.write(out, item, depth + 1);
                }
                self.write_newline(out, depth);
                out.push(']');
            }
            Json::Object(map) if map.is_empty() => out.push_str("{}"),
            Json::Object(map) => {
                let mut entries: Vec<(&String, &Json)> = map.iter().collect();
                if self.sort_keys {
                    entries.sort_by(|a, b| a.0.cmp(b.0));
                }
                out.push('{');
                for (i, (key, item)) in entries.into_iter().enumerate() {
                    self.write_separator(out, i, depth + 1);
                    self.write_str(out, key);
                    out.push_str(&self.separators.1);
                    self.write(out, item, depth + 1);
                }
                self.write_newline(out, depth);
                out.push('}');
            }
        }
    }

    fn write_separator(&self, out: &mut String, index: usize, depth: usize) {
        if index > 0 {
            out.push_str(&self.separators.0);
        }
        self.write_newline(out, depth);
    }

    fn write_newline(&self, out: &mut String, depth: usize) {
        if let Some(indent) = &self.indent {
            out.push('\n');
            for _ in 0..depth {
                out.push_str(indent);
            }
        }
    }

    /// Python's string escaping: the two-character escapes, `\u00XX` for other control
    /// characters, and with `ensure_ascii` every non-ASCII character as UTF-16 `\uXXXX`.
    fn write_str(&self, out: &mut String, s: &str) {
        out.push('"');
        for c in s.chars() {
            match c {
                '"' => out.push_str("\\\""),
                '\\' => out.push_str("\\\\"),
                '\n' => out.push_str("\\n"),
                '\r' => out.push_str("\\r"),
                '\t' => out.push_str("\\t"),
                '\u{8}' => out.push_str("\\b"),
                '\u{c}' => out.push_str("\\f"),
                c if c < ' ' || (self.ensure_ascii && !c.is_ascii()) => {
                    let mut units = [0u16; 2];
                    for unit in c.encode_utf16(&mut units) {
                        out.push_str(&format!("\\u{unit:04x}"));
                    }
                }
                c => out.push(c),
            }
        }
        out.push('"');
    }
}

#[cfg(test)]
mod tests {
    use minijinja::{Environment, context};

    use super::*;

    fn render(template: &str, value: serde_json::Value) -> String {
        let mut env = Environment::new();
        env.add_filter("tojson", tojson);
        env.render_str(template, context! { v => Value::from_serialize(&value) })
            .expect("renders")
    }

    #[test]
    fn default_output_matches_python_json_dumps() {
        let v = serde_json::json!({"name": "get_weather", "args": [1, 2.5, true, null], "o": {}});
        assert_eq!(
            render("{{ v | tojson }}", v),
            r#"{"name": "get_weather", "args": [1, 2.5, true, null], "o": {}}"#
        );
    }

    #[test]
    fn keys_keep_their_insertion_order() {
        let v: serde_json::Value =
            serde_json::from_str(r#"{"type": "function", "function": {}}"#).expect("valid JSON");
        assert_eq!(
            render("{{ v | tojson }}", v),
            r#"{"type": "function", "function": {}}"#
        );
    }

    #[test]
    fn indent_matches_python_json_dumps() {
        let v = serde_json::json!({"a": [1, {"b": null}], "c": [], "d": "x"});
        let want = "{\n    \"a\": [\n        1,\n        {\n            \"b\": null\n        }\n    ],\n    \"c\": [],\n    \"d\": \"x\"\n}";
        assert_eq!(render("{{ v | tojson(indent=4) }}", v), want);
    }

    #[test]
    fn html_characters_and_unicode_are_left_alone() {
        let v = serde_json::json!("<tool> & 'quote' 日本 🦀");
        assert_eq!(
            render("{{ v | tojson }}", v),
            r#""<tool> & 'quote' 日本 🦀""#
        );
    }

    #[test]
    fn ensure_ascii_escapes_like_python() {
        let v = serde_json::json!("é🦀");
        assert_eq!(
            render("{{ v | tojson(ensure_ascii=true) }}", v),
            r#""\u00e9\ud83e\udd80""#
        );
    }

    #[test]
    fn control_characters_are_escaped() {
        let v = serde_json::json!("a\"b\\c\nd\te\u{1}");
        assert_eq!(render("{{ v | tojson }}", v), r#""a\"b\\c\nd\te\u0001""#);
    }

    #[test]
    fn separators_and_sort_keys_are_honoured() {
        let v = serde_json::json!({"b": 1, "a": [1, 2]});
        assert_eq!(
            render("{{ v | tojson(separators=(',', ':'), sort_keys=true) }}", v),
            r#"{"a":[1,2],"b":1}"#
        );
    }

    #[test]
    fn unknown_arguments_are_an_error() {
        let mut env = Environment::new();
        env.add_filter("tojson", tojson);
        let err = env.render_str("{{ 1 | tojson(colour=1) }}", context! {});
        assert!(err.is_err());
    }
}
