//! What a request constrains its output to, and its translation into an llguidance grammar.
//!
//! Every JSON value corral constrains is written without free whitespace: items are separated by
//! `", "`, keys from values by `": "` (what Python's `json.dumps` and the chat templates' `tojson`
//! write, so the model sees its own habits), and nowhere else may a space or newline go, so a
//! weak model cannot loop on whitespace. Object keys come in schema order. The options travel in
//! the schema's `x-guidance` key, replacing any the client sent.

use llguidance::TokenParser;
use llguidance::api::TopLevelGrammar;
use serde_json::{Value, json};

use super::tool_grammar;
use super::{ConstraintError, ConstraintFactory};
use crate::tools::ToolFormat;

/// What a request asks its output to be.
#[derive(Debug, Clone, PartialEq)]
pub enum GrammarSpec {
    /// Any JSON object.
    JsonObject,
    /// A value of this JSON schema. `strict`: a keyword llguidance cannot enforce is an error;
    /// otherwise it is ignored.
    JsonSchema { schema: Value, strict: bool },
    /// A grammar in llguidance's Lark dialect.
    Lark(String),
    /// Tool calls in the model's syntax. `tools` are OpenAI function tools
    /// (`{"type": "function", "function": {"name", "description", "parameters", "strict"}}`).
    ToolCalls {
        format: ToolFormat,
        tools: Vec<Value>,
        choice: ToolCallChoice,
        parallel: bool,
    },
}

/// Which tools a constrained tool call may name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ToolCallChoice {
    /// Any of the request's tools.
    Required,
    /// Only this one.
    Named(String),
}

/// Compiles `spec` into a parser for one request.
pub(super) fn compile(
    factory: &ConstraintFactory,
    spec: &GrammarSpec,
) -> Result<TokenParser, ConstraintError> {
    match spec {
        GrammarSpec::JsonObject => json_parser(factory, &json!({"type": "object"}), false)
            .map_err(|error| ConstraintError::Invalid(format!("json_object: {error}"))),
        GrammarSpec::JsonSchema { schema, strict } => {
            if !schema.is_object() {
                return Err(ConstraintError::Invalid(
                    "JSON schema refused: the schema is not a JSON object".into(),
                ));
            }
            json_parser(factory, schema, *strict)
                .map_err(|error| ConstraintError::Invalid(format!("JSON schema refused: {error}")))
        }
        GrammarSpec::Lark(grammar) => factory
            .parsers()
            .create_parser(TopLevelGrammar::from_lark(grammar.clone()))
            .map_err(|error| ConstraintError::Invalid(format!("Lark grammar refused: {error:#}"))),
        GrammarSpec::ToolCalls {
            format,
            tools,
            choice,
            parallel,
        } => {
            let tools = tool_grammar::chosen(tools, choice)?;
            let lark = tool_grammar::lark(factory, *format, &tools, *parallel)?;
            factory
                .parsers()
                .create_parser(TopLevelGrammar::from_lark(lark))
                .map_err(|error| {
                    // One grammar holds every tool: find the tool whose parameters were refused.
                    let culprit = tools.iter().find_map(|tool| {
                        json_parser(factory, &tool.parameters, tool.strict)
                            .err()
                            .map(|error| {
                                format!("tool {:?}: parameters refused: {error}", tool.name)
                            })
                    });
                    ConstraintError::Invalid(
                        culprit.unwrap_or_else(|| format!("tool-call grammar refused: {error:#}")),
                    )
                })
        }
    }
}

fn json_parser(
    factory: &ConstraintFactory,
    schema: &Value,
    strict: bool,
) -> Result<TokenParser, String> {
    let schema = with_options(schema, strict)?;
    factory
        .parsers()
        .create_parser(TopLevelGrammar::from_json_schema(schema))
        .map_err(|error| format!("{error:#}"))
}

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

/// `text` as a Lark string literal. Lark reads JSON string syntax, except that it also wants
/// DEL escaped.
pub(super) fn literal(text: &str) -> String {
    Value::String(text.into())
        .to_string()
        .replace('\u{7f}', "\\u007f")
}
