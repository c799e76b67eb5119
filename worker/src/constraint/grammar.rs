//! What a request constrains its output to, and its translation into an llguidance grammar:
//! JSON as `json_options.rs` writes it, Lark as the client wrote it, and tool calls through
//! `tool_grammar.rs`.

use llguidance::TokenParser;
use llguidance::api::TopLevelGrammar;
use serde_json::{Value, json};

use super::json_options::with_options;
use super::tool_grammar::{self, ToolCallChoice};
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
