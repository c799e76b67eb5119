//! How corral writes every JSON value it constrains, for the request's own schemas
//! (`grammar.rs`) and for tool-call arguments (`tool_grammar.rs`) alike.
//!
//! No free whitespace: items are separated by `", "`, keys from values by `": "` (what Python's
//! `json.dumps` and the chat templates' `tojson` write, so the model sees its own habits), and
//! nowhere else may a space or newline go, so a weak model cannot loop on whitespace. Object keys
//! come in schema order. The options travel in the schema's `x-guidance` key, replacing any the
//! client sent.

use serde_json::{Value, json};

/// `schema` with corral's JSON options in its `x-guidance` key (see the file comment); `true`
/// is the empty schema. `strict: false` makes llguidance ignore what it cannot enforce.
pub(super) fn with_options(schema: &Value, strict: bool) -> Result<Value, String> {
    let options = json!({
        "whitespace_flexible": false,
        "item_separator": ", ",
        "key_separator": ": ",
        "lenient": !strict,
    });
    let mut object = match schema {
        Value::Object(object) => object.clone(),
        Value::Bool(true) => serde_json::Map::new(),
        other => return Err(format!("a schema must be a JSON object, not {other}")),
    };
    object.insert("x-guidance".into(), options);
    Ok(Value::Object(object))
}
