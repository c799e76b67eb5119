//! Gemma 4's calls: `<|tool_call>call:NAME{key:VALUE,...}<tool_call|>`, with the arguments in
//! the template's own notation (its `format_argument` macro): strings between `<|"|>` quote
//! tokens, numbers and `true`/`false` bare, objects `{key:VALUE,...}` with bare keys and arrays
//! `[VALUE,...]`. JSON strings and quoted keys are read too, since a model may write them.

use std::ops::{Deref, DerefMut};

use serde_json::{Map, Number, Value};

use super::cursor::Cursor;
use super::fragment::ToolCall;
use super::markers::GEMMA4_QUOTE;

/// The body of a `<|tool_call>` block, between the markers.
pub(super) fn parse_call(body: &str) -> Result<ToolCall, String> {
    let rest = body
        .trim()
        .strip_prefix("call:")
        .ok_or("the call does not start with `call:`")?;
    let open = rest.find('{').ok_or("the call has no arguments object")?;
    let name = rest[..open].trim();
    if name.is_empty() || name.contains(|c: char| c.is_whitespace() || "<>{}:,".contains(c)) {
        return Err(format!("{name:?} is not a function name"));
    }
    let mut reader = Reader(Cursor::new(&rest[open..]));
    let arguments = reader.object()?;
    if !reader.rest().trim().is_empty() {
        return Err(format!("text after the arguments: {:?}", reader.rest()));
    }
    Ok(ToolCall {
        name: name.to_owned(),
        arguments: arguments.to_string(),
    })
}

/// The cursor, with the notation's values on top.
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

impl Reader<'_> {
    fn object(&mut self) -> Result<Value, String> {
        self.expect("{", "to open an object")?;
        let mut object = Map::new();
        if self.eat("}") {
            return Ok(Value::Object(object));
        }
        loop {
            let key = self.key()?;
            self.expect(":", "after a key")?;
            let value = self.value()?;
            object.insert(key, value);
            if self.eat("}") {
                return Ok(Value::Object(object));
            }
            self.expect(",", "between an object's entries")?;
        }
    }

    fn array(&mut self) -> Result<Value, String> {
        self.expect("[", "to open an array")?;
        let mut items = Vec::new();
        if self.eat("]") {
            return Ok(Value::Array(items));
        }
        loop {
            items.push(self.value()?);
            if self.eat("]") {
                return Ok(Value::Array(items));
            }
            self.expect(",", "between an array's items")?;
        }
    }

    fn key(&mut self) -> Result<String, String> {
        self.skip_space();
        if let Some(quoted) = self.quoted()? {
            return Ok(quoted);
        }
        let rest = self.rest();
        let end = rest.find(':').ok_or("a key without a value")?;
        let key = rest[..end].trim();
        if key.is_empty() || key.contains(['{', '}', '[', ']', ',']) {
            return Err(format!("{key:?} is not a key"));
        }
        self.at += end;
        Ok(key.to_owned())
    }

    /// A `<|"|>` string or a JSON string, if one is next.
    fn quoted(&mut self) -> Result<Option<String>, String> {
        let rest = self.rest();
        if let Some(after) = rest.strip_prefix(GEMMA4_QUOTE) {
            let end = after.find(GEMMA4_QUOTE).ok_or("a string is not closed")?;
            self.at += GEMMA4_QUOTE.len() * 2 + end;
            return Ok(Some(after[..end].to_owned()));
        }
        if rest.starts_with('"') {
            let mut stream = serde_json::Deserializer::from_str(rest).into_iter::<String>();
            let text = stream
                .next()
                .ok_or("a string is not closed")?
                .map_err(|error| format!("a JSON string: {error}"))?;
            self.at += stream.byte_offset();
            return Ok(Some(text));
        }
        Ok(None)
    }

    fn value(&mut self) -> Result<Value, String> {
        self.skip_space();
        if let Some(text) = self.quoted()? {
            return Ok(Value::String(text));
        }
        match self.rest().chars().next() {
            Some('{') => self.object(),
            Some('[') => self.array(),
            Some(_) => Ok(self.scalar()),
            None => Err("a key without a value".into()),
        }
    }

    /// A bare value, up to the next `,`, `}` or `]`: a number, a boolean, null, or else text.
    fn scalar(&mut self) -> Value {
        let rest = self.rest();
        let end = rest.find([',', '}', ']']).unwrap_or(rest.len());
        self.at += end;
        let text = rest[..end].trim();
        match text {
            "true" => Value::Bool(true),
            "false" => Value::Bool(false),
            "null" | "None" | "none" => Value::Null,
            _ => match serde_json::from_str::<Number>(text) {
                Ok(number) => Value::Number(number),
                Err(_) => Value::String(text.to_owned()),
            },
        }
    }
}
