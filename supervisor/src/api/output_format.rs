//! `response_format` (OpenAI's JSON mode and structured outputs) and corral's `grammar`
//! extension, checked into the [`OutputFormat`] the worker enforces by constrained decoding.
//!
//! Only the shape is checked here; whether llguidance can compile a schema or grammar is the
//! worker's answer (a 400 naming the refused part, before any compute).

use corral_ipc::OutputFormat;
use serde_json::Value;

use super::error::ApiError;

const PARAM: &str = "response_format";

/// The output constraint of a request, from `response_format` or `grammar` (not both).
pub fn parse(
    response_format: Option<&Value>,
    grammar: Option<&str>,
) -> Result<Option<OutputFormat>, ApiError> {
    let format = response_format
        .map(parse_response_format)
        .transpose()?
        .flatten();
    match (format, grammar) {
        (Some(_), Some(_)) => Err(ApiError::invalid(
            "send either response_format or grammar, not both",
            "grammar",
        )),
        (None, Some("")) => Err(ApiError::invalid("grammar must not be empty", "grammar")),
        (None, Some(grammar)) => Ok(Some(OutputFormat::Lark {
            grammar: grammar.to_owned(),
        })),
        (format, None) => Ok(format),
    }
}

fn parse_response_format(value: &Value) -> Result<Option<OutputFormat>, ApiError> {
    let kind = value.get("type").and_then(Value::as_str).ok_or_else(|| {
        ApiError::invalid(
            "response_format must be an object with a `type`: text, json_object or json_schema",
            PARAM,
        )
    })?;
    match kind {
        "text" => Ok(None),
        "json_object" => Ok(Some(OutputFormat::JsonObject)),
        "json_schema" => json_schema(value.get("json_schema")).map(Some),
        other => Err(ApiError::invalid(
            format!("unknown response_format type `{other}`; use text, json_object or json_schema"),
            "response_format.type",
        )),
    }
}

/// `{"name", "schema", "strict"}`; the schema must be a JSON object (a boolean schema says
/// nothing a client would want constrained).
fn json_schema(value: Option<&Value>) -> Result<OutputFormat, ApiError> {
    let Some(Value::Object(spec)) = value else {
        return Err(ApiError::invalid(
            "response_format of type json_schema needs a json_schema object \
             ({\"name\": ..., \"schema\": {...}})",
            "response_format.json_schema",
        ));
    };
    let schema = match spec.get("schema") {
        Some(schema @ Value::Object(_)) => schema.clone(),
        Some(_) => {
            return Err(ApiError::invalid(
                "response_format.json_schema.schema must be a JSON schema object",
                "response_format.json_schema.schema",
            ));
        }
        None => {
            return Err(ApiError::invalid(
                "response_format.json_schema has no schema",
                "response_format.json_schema.schema",
            ));
        }
    };
    let strict = match spec.get("strict") {
        None | Some(Value::Null) => false,
        Some(Value::Bool(strict)) => *strict,
        Some(_) => {
            return Err(ApiError::invalid(
                "response_format.json_schema.strict must be a boolean",
                "response_format.json_schema.strict",
            ));
        }
    };
    Ok(OutputFormat::JsonSchema { schema, strict })
}
