//! LFM2's calls: `<|tool_call_start|>[name(key='text', n=3, flags=["a"]), other()]<|tool_call_end|>`,
//! and Llama 4's, the same list as a whole answer (bare, or between `<|python_start|>` and
//! `<|python_end|>`): a Python list of calls with keyword arguments, each a Python literal as its template writes
//! them: strings quoted `'` or `"` with backslash escapes, numbers, `True`/`False`/`None`, lists
//! and dicts (which its template writes as JSON, so `true`/`false`/`null` are read too).

use std::ops::{Deref, DerefMut};

use serde_json::{Map, Number, Value};

use super::cursor::Cursor;
use super::fragment::ToolCall;
use super::markers::{PYTHON_END, PYTHON_START};

/// Llama 4's answer that opens with a call: its list, bare or wrapped in `<|python_start|>`
/// and `<|python_end|>`, and nothing else.
pub(super) fn parse_llama4(answer: &str) -> Result<Vec<ToolCall>, String> {
    let text = answer.trim();
    let text = match text.strip_prefix(PYTHON_START) {
        Some(wrapped) => wrapped
            .trim_end()
            .strip_suffix(PYTHON_END)
            .unwrap_or(wrapped),
        None => text,
    };
    parse_calls(text.trim_start())
}

/// The body of a block, between the markers: the list of calls.
pub(super) fn parse_calls(body: &str) -> Result<Vec<ToolCall>, String> {
    let mut reader = Reader(Cursor::new(body));
    reader.expect("[", "to open the list of calls")?;
    let mut calls = Vec::new();
    if !reader.eat("]") {
        loop {
            calls.push(reader.call()?);
            if reader.eat("]") {
                break;
            }
            reader.expect(",", "between calls")?;
        }
    }
    reader.skip_space();
    if !reader.rest().is_empty() {
        return Err(format!("text after the calls: {:?}", reader.rest()));
    }
    if calls.is_empty() {
        return Err("an empty list of calls".into());
    }
    Ok(calls)
}

/// The cursor, with Python's literals on top.
struct Reader<'a>(Cursor<'a>);

impl<'a> Deref for Reader<'a> {
    type Target = Cursor<'a>;

    fn deref(&self) -> &Cursor<'a> {
        &self.0
    }
}

impl DerefMut for Reader<'_> {
    fn deref_mut(&mut self) -> &mut Self::Target {
        &mut self.0
    }
}

impl<'a> Reader<'a> {
    fn peek(&mut self) -> Option<char> {
        self.skip_space();
        self.rest().chars().next()
    }

    fn identifier(&mut self) -> Result<&'a str, String> {
        self.skip_space();
        let rest = self.rest();
        let end = rest
            .find(|c: char| !(c.is_alphanumeric() || "_.-".contains(c)))
            .unwrap_or(rest.len());
        if end == 0 {
            return Err(format!("expected a name, found {:?}", self.preview()));
        }
        self.at += end;
        Ok(&rest[..end])
    }

    fn call(&mut self) -> Result<ToolCall, String> {
        let name = self.identifier()?;
        self.expect("(", "after the function's name")?;
        let mut arguments = Map::new();
        if !self.eat(")") {
            loop {
                let key = self.identifier()?;
                self.expect("=", "after an argument's name")?;
                arguments.insert(key.to_owned(), self.value()?);
                if self.eat(")") {
                    break;
                }
                self.expect(",", "between arguments")?;
            }
        }
        Ok(ToolCall {
            name: name.to_owned(),
            arguments: Value::Object(arguments).to_string(),
        })
    }

    fn value(&mut self) -> Result<Value, String> {
        match self.peek() {
            Some(quote @ ('\'' | '"')) => self.string(quote).map(Value::String),
            Some('[') => {
                self.at += 1;
                let mut items = Vec::new();
                while !self.eat("]") {
                    if !items.is_empty() {
                        self.expect(",", "between a list's items")?;
                    }
                    // Python allows a trailing comma.
                    if self.eat("]") {
                        break;
                    }
                    items.push(self.value()?);
                }
                Ok(Value::Array(items))
            }
            Some('{') => {
                self.at += 1;
                let mut object = Map::new();
                while !self.eat("}") {
                    if !object.is_empty() {
                        self.expect(",", "between a dict's entries")?;
                    }
                    if self.eat("}") {
                        break;
                    }
                    let key = match self.peek() {
                        Some(quote @ ('\'' | '"')) => self.string(quote)?,
                        _ => return Err("a dict key that is not a string".into()),
                    };
                    self.expect(":", "after a dict key")?;
                    object.insert(key, self.value()?);
                }
                Ok(Value::Object(object))
            }
            Some(_) => self.scalar(),
            None => Err("an argument without a value".into()),
        }
    }

    /// A quoted string, its escapes decoded as Python's.
    fn string(&mut self, quote: char) -> Result<String, String> {
        self.at += quote.len_utf8();
        let mut text = String::new();
        let mut chars = self.rest().char_indices();
        while let Some((index, c)) = chars.next() {
            match c {
                c if c == quote => {
                    self.at += index + c.len_utf8();
                    return Ok(text);
                }
                '\\' => {
                    let Some((_, escaped)) = chars.next() else {
                        break;
                    };
                    match escaped {
                        'n' => text.push('\n'),
                        't' => text.push('\t'),
                        'r' => text.push('\r'),
                        'u' => {
                            let hex: String = chars.by_ref().take(4).map(|(_, c)| c).collect();
                            let code = u32::from_str_radix(&hex, 16)
                                .ok()
                                .and_then(char::from_u32)
                                .ok_or_else(|| format!("a bad escape \\u{hex}"))?;
                            text.push(code);
                        }
                        other => text.push(other),
                    }
                }
                c => text.push(c),
            }
        }
        Err("a string is not closed".into())
    }

    /// A bare literal up to the next `,`, `)`, `]` or `}`.
    fn scalar(&mut self) -> Result<Value, String> {
        let rest = self.rest();
        let end = rest.find([',', ')', ']', '}']).unwrap_or(rest.len());
        let text = rest[..end].trim();
        self.at += end;
        match text {
            "True" | "true" => Ok(Value::Bool(true)),
            "False" | "false" => Ok(Value::Bool(false)),
            "None" | "null" => Ok(Value::Null),
            _ => serde_json::from_str::<Number>(text)
                .map(Value::Number)
                .map_err(|_| format!("{text:?} is not a Python literal")),
        }
    }
}
