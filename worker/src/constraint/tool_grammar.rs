//! Tool calls as Lark grammars, one shape per `ToolFormat`. Each tool is one rule (`tool_N`), a
//! call is any of them (`call`), and `start` is one call or, with parallel calls, several:
//!
//! - Hermes: `<tool_call>\n{"name": "NAME", "arguments": ARGS}\n</tool_call>`, calls separated
//!   by `\n`;
//! - Llama3Json: `{"name": "NAME", "parameters": ARGS}`, one call;
//! - Mistral: the `[TOOL_CALLS]` token (by id), then `[CALL, CALL]` with each call
//!   `{"name": "NAME", "arguments": ARGS}`;
//! - MistralArgs and MistralThink: per call the `[TOOL_CALLS]` token (by id), `NAME`, `[ARGS]`
//!   (by id where the vocabulary has it), ARGS; calls written one after another;
//! - Phi4Mini: `functools[CALL, CALL]`, each call as Mistral's, in text;
//! - Granite: `<|tool_call|>` (the token by id where the vocabulary has it, as Granite's does),
//!   then the same list as Mistral's;
//! - QwenXml: `<tool_call>\n<function=NAME>\n`, one `<parameter=KEY>\nVALUE\n</parameter>\n` per
//!   parameter in schema order (optional ones may be left out), `</function>\n</tool_call>`,
//!   calls separated by `\n`. A string parameter's VALUE is raw text without `</parameter>`
//!   (its `minLength`, `maxLength` and string `enum` apply; `pattern` and `format` do not);
//!   any other's is JSON of its schema. Only declared properties can be written.
//! - Glm: `<tool_call>NAME\n`, one `<arg_key>KEY</arg_key>\n<arg_value>VALUE</arg_value>\n` per
//!   parameter, as QwenXml's, then `</tool_call>`, calls separated by `\n`;
//! - Gemma4: `<|tool_call>call:NAME{KEY:VALUE,...}<tool_call|>` with the markers by id where
//!   the vocabulary has them, one `KEY:VALUE` per parameter in schema order (optional ones may
//!   be left out), calls written one after another. A string VALUE is raw text between `<|"|>`
//!   quotes (its `minLength`, `maxLength` and string `enum` apply), any other JSON of its schema;
//! - Pythonic: `<|tool_call_start|>[NAME(KEY=VALUE, ...), ...]<|tool_call_end|>` (LFM2), the
//!   markers by id where the vocabulary has them, arguments as Gemma4's with a string VALUE a
//!   single-quoted Python string (without quotes or backslashes inside);
//! - Llama4Pythonic: `[NAME(KEY=VALUE, ...), ...]`, the whole answer, bare, as Pythonic's but
//!   with a string VALUE double-quoted, as its template writes past calls;
//! - Harmony: ` to=functions.NAME<|channel|>commentary json<|message|>ARGS`, the header the
//!   template writes past calls with (the prompt ends with `<|start|>assistant`), its tokens by
//!   id where the vocabulary has them; one call, which the model's `<|call|>` then ends.
//!
//! - DeepSeekV31: `<｜tool▁calls▁begin｜>`, then per call `<｜tool▁call▁begin｜>NAME<｜tool▁sep｜>ARGS
//!   <｜tool▁call▁end｜>`, then `<｜tool▁calls▁end｜>`, the markers by id where the vocabulary has
//!   them; DeepSeekV3 the same with each call `<｜tool▁call▁begin｜>function<｜tool▁sep｜>NAME\n
//!   ```json\nARGS\n```<｜tool▁call▁end｜>`;
//! - Kimi: `<|tool_calls_section_begin|>`, then per call `<|tool_call_begin|>functions.NAME:INDEX
//!   <|tool_call_argument_begin|>ARGS<|tool_call_end|>`, then `<|tool_calls_section_end|>`, the
//!   markers by id where the vocabulary has them and INDEX the model's own count of the
//!   conversation's calls (up to three digits).
//!
//! ARGS is JSON of the tool's `parameters` (`{"type": "object"}` when absent), written as
//! `json_options.rs` describes.

use std::fmt::Write;

use serde_json::{Map, Value, json};

use super::json_options::with_options;
use super::{ConstraintError, ConstraintFactory};
use crate::tools::ToolFormat;

/// The token Mistral's models open their tool calls with.
const MISTRAL_TOOL_CALLS: &str = "[TOOL_CALLS]";
/// What Mistral's newer notation puts between a call's name and its arguments.
const MISTRAL_ARGS: &str = "[ARGS]";
/// What Phi-4-mini writes before its list of calls, the list's `[` included.
const FUNCTOOLS: &str = "functools[";
/// What Granite's models open their list of calls with.
const GRANITE_TOOL_CALL: &str = "<|tool_call|>";
/// Gemma 4's call markers and string quote.
const GEMMA4_CALL_OPEN: &str = "<|tool_call>";
const GEMMA4_CALL_CLOSE: &str = "<tool_call|>";
const GEMMA4_QUOTE: &str = "<|\"|>";
/// LFM2's markers around its list of calls.
const PYTHONIC_CALL_OPEN: &str = "<|tool_call_start|>";
const PYTHONIC_CALL_CLOSE: &str = "<|tool_call_end|>";
/// DeepSeek's call markers.
const DEEPSEEK_CALLS_BEGIN: &str = "<｜tool▁calls▁begin｜>";
const DEEPSEEK_CALLS_END: &str = "<｜tool▁calls▁end｜>";
const DEEPSEEK_CALL_BEGIN: &str = "<｜tool▁call▁begin｜>";
const DEEPSEEK_CALL_END: &str = "<｜tool▁call▁end｜>";
const DEEPSEEK_SEP: &str = "<｜tool▁sep｜>";
/// Kimi K2's call markers.
const KIMI_SECTION_BEGIN: &str = "<|tool_calls_section_begin|>";
const KIMI_SECTION_END: &str = "<|tool_calls_section_end|>";
const KIMI_CALL_BEGIN: &str = "<|tool_call_begin|>";
const KIMI_ARGUMENT_BEGIN: &str = "<|tool_call_argument_begin|>";
const KIMI_CALL_END: &str = "<|tool_call_end|>";
/// Harmony's header tokens.
const HARMONY_CHANNEL: &str = "<|channel|>";
const HARMONY_MESSAGE: &str = "<|message|>";

/// Which tools a constrained tool call may name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ToolCallChoice {
    /// Any of the request's tools.
    Required,
    /// Only this one.
    Named(String),
}

/// One function tool, as the grammar needs it.
pub(super) struct Tool {
    pub name: String,
    pub parameters: Value,
    /// The function's `strict`: unenforceable schema keywords are errors, not ignored.
    pub strict: bool,
}

/// The tools `choice` allows, from the request's `tools`.
pub(super) fn chosen(
    tools: &[Value],
    choice: &ToolCallChoice,
) -> Result<Vec<Tool>, ConstraintError> {
    let tools = tools
        .iter()
        .enumerate()
        .map(|(index, tool)| parse(index, tool))
        .collect::<Result<Vec<_>, _>>()?;
    match choice {
        ToolCallChoice::Required if tools.is_empty() => Err(ConstraintError::Invalid(
            "tool_choice requires a tool call, but the request has no tools".into(),
        )),
        ToolCallChoice::Required => Ok(tools),
        ToolCallChoice::Named(name) => tools
            .into_iter()
            .find(|tool| tool.name == *name)
            .map(|tool| vec![tool])
            .ok_or_else(|| {
                ConstraintError::Invalid(format!(
                    "tool_choice names {name:?}, which is not among the request's tools"
                ))
            }),
    }
}

fn parse(index: usize, tool: &Value) -> Result<Tool, ConstraintError> {
    let function = tool.get("function");
    let name = function
        .and_then(|function| function.get("name"))
        .and_then(Value::as_str)
        .filter(|name| !name.is_empty())
        .ok_or_else(|| ConstraintError::Invalid(format!("tools[{index}] has no function name")))?;
    let parameters = match function.and_then(|function| function.get("parameters")) {
        None | Some(Value::Null) => json!({"type": "object"}),
        Some(schema @ (Value::Object(_) | Value::Bool(true))) => schema.clone(),
        Some(other) => {
            return Err(ConstraintError::Invalid(format!(
                "tool {name:?}: parameters must be a JSON schema object, not {other}"
            )));
        }
    };
    let strict = function
        .and_then(|function| function.get("strict"))
        .and_then(Value::as_bool)
        .unwrap_or(false);
    Ok(Tool {
        name: name.to_owned(),
        parameters,
        strict,
    })
}

/// The Lark grammar for calls of `tools` in `format`; see the file comment.
pub(super) fn lark(
    factory: &ConstraintFactory,
    format: ToolFormat,
    tools: &[Tool],
    parallel: bool,
) -> Result<String, ConstraintError> {
    let token = |text: &str| {
        factory
            .token_id(text)
            .map_or_else(|| literal(text), |id| format!("<[{id}]>"))
    };
    let start = match format {
        ToolFormat::Hermes | ToolFormat::QwenXml | ToolFormat::Glm => repeated("\n", parallel),
        ToolFormat::Llama3Json | ToolFormat::Harmony => "call".to_owned(),
        ToolFormat::Gemma4 | ToolFormat::MistralArgs | ToolFormat::MistralThink => {
            repeated("", parallel)
        }
        ToolFormat::Phi4Mini => {
            format!("{} {} \"]\"", literal(FUNCTOOLS), repeated(", ", parallel))
        }
        ToolFormat::Pythonic => format!(
            "{} \"[\" {} \"]\" {}",
            token(PYTHONIC_CALL_OPEN),
            repeated(", ", parallel),
            token(PYTHONIC_CALL_CLOSE)
        ),
        ToolFormat::DeepSeekV31 | ToolFormat::DeepSeekV3 => format!(
            "{} {} {}",
            token(DEEPSEEK_CALLS_BEGIN),
            repeated("", parallel),
            token(DEEPSEEK_CALLS_END)
        ),
        ToolFormat::Kimi => format!(
            "{} {} {}",
            token(KIMI_SECTION_BEGIN),
            repeated("", parallel),
            token(KIMI_SECTION_END)
        ),
        ToolFormat::Llama4Pythonic => format!("\"[\" {} \"]\"", repeated(", ", parallel)),
        ToolFormat::Mistral => {
            let id = factory.token_id(MISTRAL_TOOL_CALLS).ok_or_else(|| {
                ConstraintError::Invalid(format!(
                    "the Mistral tool-call format needs the {MISTRAL_TOOL_CALLS} token, which \
                     this model's vocabulary lacks"
                ))
            })?;
            format!("<[{id}]> \"[\" {} \"]\"", repeated(", ", parallel))
        }
        ToolFormat::Granite => {
            let marker = factory
                .token_id(GRANITE_TOOL_CALL)
                .map_or_else(|| literal(GRANITE_TOOL_CALL), |id| format!("<[{id}]>"));
            format!("{marker} \"[\" {} \"]\"", repeated(", ", parallel))
        }
    };
    let calls: Vec<String> = (0..tools.len())
        .map(|index| format!("tool_{index}"))
        .collect();
    let mut lark = format!("start: {start}\ncall: {}\n", calls.join(" | "));
    if format == ToolFormat::Kimi {
        lark.push_str("CALL_INDEX: /[0-9]{1,3}/\n");
    }
    for (index, tool) in tools.iter().enumerate() {
        let name = Value::String(tool.name.clone()).to_string();
        let rule = match format {
            ToolFormat::Hermes => json_call(
                &format!("<tool_call>\n{{\"name\": {name}, \"arguments\": "),
                tool,
                "}\n</tool_call>",
            )?,
            ToolFormat::Llama3Json => {
                json_call(&format!("{{\"name\": {name}, \"parameters\": "), tool, "}")?
            }
            ToolFormat::Mistral | ToolFormat::Granite | ToolFormat::Phi4Mini => {
                json_call(&format!("{{\"name\": {name}, \"arguments\": "), tool, "}")?
            }
            ToolFormat::MistralArgs | ToolFormat::MistralThink => {
                let opener = factory.token_id(MISTRAL_TOOL_CALLS).ok_or_else(|| {
                    ConstraintError::Invalid(format!(
                        "the Mistral tool-call format needs the {MISTRAL_TOOL_CALLS} token, \
                         which this model's vocabulary lacks"
                    ))
                })?;
                let schema = json_schema(tool, &tool.parameters)?;
                format!(
                    "<[{opener}]> {} {} %json {schema}",
                    literal(&tool.name),
                    token(MISTRAL_ARGS)
                )
            }
            ToolFormat::QwenXml => xml_call(&mut lark, index, tool, &QWEN_XML)?,
            ToolFormat::Glm => xml_call(&mut lark, index, tool, &GLM_XML)?,
            ToolFormat::Gemma4 => {
                let quote = factory.token_id(GEMMA4_QUOTE);
                let arguments = gemma4_arguments(&mut lark, index, tool, quote)?;
                format!(
                    "{} {} {arguments} {} {}",
                    token(GEMMA4_CALL_OPEN),
                    literal(&format!("call:{}{{", tool.name)),
                    literal("}"),
                    token(GEMMA4_CALL_CLOSE),
                )
            }
            ToolFormat::Pythonic | ToolFormat::Llama4Pythonic => {
                let syntax = KeywordSyntax {
                    assign: "=",
                    separator: ", ",
                };
                // Each writes strings as its template writes past calls' arguments.
                let quote = if format == ToolFormat::Pythonic {
                    '\''
                } else {
                    '"'
                };
                let arguments = keyword_arguments(
                    &mut lark,
                    index,
                    tool,
                    &syntax,
                    &mut |lark, terminal, schema| python_string(lark, terminal, schema, quote),
                )?;
                format!(
                    "{} {arguments} {}",
                    literal(&format!("{}(", tool.name)),
                    literal(")")
                )
            }
            ToolFormat::DeepSeekV31 => format!(
                "{} {} {} %json {} {}",
                token(DEEPSEEK_CALL_BEGIN),
                literal(&tool.name),
                token(DEEPSEEK_SEP),
                json_schema(tool, &tool.parameters)?,
                token(DEEPSEEK_CALL_END),
            ),
            ToolFormat::DeepSeekV3 => format!(
                "{} {} {} {} %json {} {} {}",
                token(DEEPSEEK_CALL_BEGIN),
                literal("function"),
                token(DEEPSEEK_SEP),
                literal(&format!("{}\n```json\n", tool.name)),
                json_schema(tool, &tool.parameters)?,
                literal("\n```"),
                token(DEEPSEEK_CALL_END),
            ),
            ToolFormat::Kimi => format!(
                "{} {} CALL_INDEX {} %json {} {}",
                token(KIMI_CALL_BEGIN),
                literal(&format!("functions.{}:", tool.name)),
                token(KIMI_ARGUMENT_BEGIN),
                json_schema(tool, &tool.parameters)?,
                token(KIMI_CALL_END),
            ),
            ToolFormat::Harmony => {
                let schema = json_schema(tool, &tool.parameters)?;
                format!(
                    "{} {} {} {} %json {schema}",
                    literal(&format!(" to=functions.{}", tool.name)),
                    token(HARMONY_CHANNEL),
                    literal("commentary json"),
                    token(HARMONY_MESSAGE),
                )
            }
        };
        // Writing to a String cannot fail.
        let _ = writeln!(lark, "tool_{index}: {rule}");
    }
    Ok(lark)
}

/// `call`, or with parallel calls `call` then more, each after `separator`.
fn repeated(separator: &str, parallel: bool) -> String {
    if parallel && separator.is_empty() {
        "call+".to_owned()
    } else if parallel {
        format!("call ({} call)*", literal(separator))
    } else {
        "call".to_owned()
    }
}

/// `before`, the tool's arguments as JSON, `after`.
fn json_call(before: &str, tool: &Tool, after: &str) -> Result<String, ConstraintError> {
    let schema = json_schema(tool, &tool.parameters)?;
    Ok(format!(
        "{} %json {schema} {}",
        literal(before),
        literal(after)
    ))
}

fn json_schema(tool: &Tool, schema: &Value) -> Result<String, ConstraintError> {
    with_options(schema, tool.strict)
        .map(|schema| schema.to_string())
        .map_err(|error| {
            ConstraintError::Invalid(format!("tool {:?}: parameters refused: {error}", tool.name))
        })
}

/// How an XML-like format spells a call: the text around its name (`open`) and around each
/// parameter's key (`param`), what closes a value (`close`, and as a regex with `/` written
/// `\x2F`, alone and as the bare tag), and the call's end.
struct XmlSyntax {
    open: (&'static str, &'static str),
    param: (&'static str, &'static str),
    close: &'static str,
    close_regex: &'static str,
    close_tag_regex: &'static str,
    /// What follows a value's closing text (and its tag).
    after_close: &'static str,
    end: &'static str,
}

const QWEN_XML: XmlSyntax = XmlSyntax {
    open: ("<tool_call>\n<function=", ">\n"),
    param: ("<parameter=", ">\n"),
    close: "\n</parameter>",
    close_regex: r"\n<\x2Fparameter>",
    close_tag_regex: r"<\x2Fparameter>",
    after_close: "\n",
    end: "</function>\n</tool_call>",
};

const GLM_XML: XmlSyntax = XmlSyntax {
    open: ("<tool_call>", "\n"),
    param: ("<arg_key>", "</arg_key>\n<arg_value>"),
    close: "</arg_value>",
    close_regex: r"<\x2Farg_value>",
    close_tag_regex: r"<\x2Farg_value>",
    after_close: "\n",
    end: "</tool_call>",
};

/// The XML rule for `tool` in `syntax`; each parameter gets a rule (and a string one a
/// terminal) of its own, appended to `lark`.
fn xml_call(
    lark: &mut String,
    index: usize,
    tool: &Tool,
    syntax: &XmlSyntax,
) -> Result<String, ConstraintError> {
    let empty = Map::new();
    let (properties, required) = properties(tool, &empty);
    let mut rule = literal(&format!("{}{}{}", syntax.open.0, tool.name, syntax.open.1));
    for (position, (key, schema)) in properties.iter().enumerate() {
        let name = format!("tool_{index}_{position}");
        let open = literal(&format!("{}{key}{}", syntax.param.0, syntax.param.1));
        let value = if is_string(schema) {
            string_value(lark, &name.to_uppercase(), schema, syntax)
        } else {
            let schema = json_schema(tool, &with_definitions(schema, &tool.parameters))?;
            let close = format!("{}{}", syntax.close, syntax.after_close);
            format!("%json {schema} {}", literal(&close))
        };
        let _ = writeln!(lark, "{name}: {open} {value}");
        let optional = if required.contains(&key.as_str()) {
            ""
        } else {
            "?"
        };
        let _ = write!(rule, " {name}{optional}");
    }
    let _ = write!(rule, " {}", literal(syntax.end));
    Ok(rule)
}

fn is_string(schema: &Value) -> bool {
    schema.get("type").and_then(Value::as_str) == Some("string")
}

/// A string parameter's raw text and its closing tag: its enum's values, or a terminal
/// (`terminal`, appended to `lark`) of text within its length bounds that holds no closing tag.
/// The closing tag is part of the terminal: a terminal for the text alone would swallow the
/// `\n</parameter` that starts the tag, since the lexer takes the longest match.
fn string_value(lark: &mut String, terminal: &str, schema: &Value, syntax: &XmlSyntax) -> String {
    let close = format!("{}{}", syntax.close, syntax.after_close);
    if let Some(values) = schema.get("enum").and_then(Value::as_array) {
        let values: Vec<String> = values
            .iter()
            .filter_map(Value::as_str)
            .map(|value| literal(&format!("{value}{close}")))
            .collect();
        if !values.is_empty() {
            return format!("({})", values.join(" | "));
        }
    }
    let bound = |key| schema.get(key).and_then(Value::as_u64);
    let repeat = match (bound("minLength"), bound("maxLength")) {
        (None, None) => "*".to_owned(),
        (min, Some(max)) => format!("{{{},{max}}}", min.unwrap_or(0).min(max)),
        (Some(min), None) => format!("{{{min},}}"),
    };
    // `\x2F` is `/`, which would end the Lark regex literal.
    let (close, tag) = (syntax.close_regex, syntax.close_tag_regex);
    let _ = writeln!(
        lark,
        r"{terminal}: /(?s:.{repeat}){close}/ & ~/(?s:.*{tag}.*{close})/"
    );
    format!("{terminal} {}", literal(syntax.after_close))
}

/// The tool's declared properties (`empty` when it has none) and the names it requires.
fn properties<'t>(
    tool: &'t Tool,
    empty: &'t Map<String, Value>,
) -> (&'t Map<String, Value>, Vec<&'t str>) {
    let properties = tool
        .parameters
        .get("properties")
        .and_then(Value::as_object)
        .unwrap_or(empty);
    let required = tool
        .parameters
        .get("required")
        .and_then(Value::as_array)
        .map(|names| names.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    (properties, required)
}

/// Gemma 4's `KEY:VALUE,...` for `tool`: a rule per parameter (`tool_N_P`, with a terminal of
/// its own for a string's text) appended to `lark`, and the expression that writes them in
/// schema order, commas between, optional ones left out or not. `quote` is the id of the `<|"|>`
/// token, when the vocabulary has it.
fn gemma4_arguments(
    lark: &mut String,
    index: usize,
    tool: &Tool,
    quote: Option<u32>,
) -> Result<String, ConstraintError> {
    let syntax = KeywordSyntax {
        assign: ":",
        separator: ",",
    };
    keyword_arguments(lark, index, tool, &syntax, &mut |lark, terminal, schema| {
        gemma4_string(lark, terminal, schema, quote)
    })
}

/// How a format writes a call's arguments by name: `KEY{assign}VALUE`, `separator` between.
struct KeywordSyntax {
    assign: &'static str,
    separator: &'static str,
}

/// The arguments of `tool` by name, in schema order, `separator` between, optional ones left
/// out or not: a rule per parameter (`tool_N_P`, and for a string one the terminal
/// `TOOL_N_P` that `string` may write) appended to `lark`, and the expression that writes them.
/// A string's value is `string`'s; any other's JSON of its schema.
fn keyword_arguments(
    lark: &mut String,
    index: usize,
    tool: &Tool,
    syntax: &KeywordSyntax,
    string: &mut dyn FnMut(&mut String, &str, &Value) -> String,
) -> Result<String, ConstraintError> {
    let empty = Map::new();
    let (properties, required) = properties(tool, &empty);
    let mut parameters = Vec::new();
    for (position, (key, schema)) in properties.iter().enumerate() {
        let name = format!("tool_{index}_{position}");
        let value = if is_string(schema) {
            string(lark, &name.to_uppercase(), schema)
        } else {
            let schema = json_schema(tool, &with_definitions(schema, &tool.parameters))?;
            format!("%json {schema}")
        };
        let assign = literal(&format!("{key}{}", syntax.assign));
        let _ = writeln!(lark, "{name}: {assign} {value}");
        parameters.push((name, required.contains(&key.as_str())));
    }
    // After a written parameter, each later one follows a separator, or is left out if optional.
    let separator = literal(syntax.separator);
    let after = |from: usize| -> String {
        parameters[from..]
            .iter()
            .map(|(name, required)| {
                if *required {
                    format!("{separator} {name}")
                } else {
                    format!("({separator} {name})?")
                }
            })
            .collect::<Vec<_>>()
            .join(" ")
    };
    // The first parameter written is any up to the first required one.
    let mut firsts = Vec::new();
    for (position, (name, required)) in parameters.iter().enumerate() {
        firsts.push(format!("{name} {}", after(position + 1)));
        if *required {
            break;
        }
    }
    if firsts.is_empty() {
        return Ok(String::new());
    }
    let all_optional = parameters.iter().all(|(_, required)| !required);
    let list = format!("({})", firsts.join(" | "));
    Ok(if all_optional {
        format!("{list}?")
    } else {
        list
    })
}

/// A string parameter's value: its enum's values or text within its length bounds, between
/// `<|"|>` quotes. With the quote a token, the text is any text (no text spells the token);
/// spelled out, the closing quote is part of the text's terminal, as in `string_value`.
fn gemma4_string(lark: &mut String, terminal: &str, schema: &Value, quote: Option<u32>) -> String {
    let open = quote.map_or_else(|| literal(GEMMA4_QUOTE), |id| format!("<[{id}]>"));
    let close = open.clone();
    if let Some(values) = schema.get("enum").and_then(Value::as_array) {
        let values: Vec<String> = values
            .iter()
            .filter_map(Value::as_str)
            .map(literal)
            .collect();
        if !values.is_empty() {
            return format!("{open} ({}) {close}", values.join(" | "));
        }
    }
    let bound = |key| schema.get(key).and_then(Value::as_u64);
    let (min, max) = (bound("minLength").unwrap_or(0), bound("maxLength"));
    if max == Some(0) {
        return format!("{open} {close}");
    }
    let max = max.map_or(String::new(), |max| max.max(min).to_string());
    if quote.is_some() {
        // A terminal must match something: an empty string is the text left out.
        let _ = writeln!(lark, r"{terminal}: /(?s:.{{{},{max}}})/", min.max(1));
        let text = if min == 0 {
            format!("{terminal}?")
        } else {
            terminal.to_owned()
        };
        return format!("{open} {text} {close}");
    }
    let quote_regex = r#"<\|"\|>"#;
    let _ = writeln!(
        lark,
        r"{terminal}: /(?s:.{{{min},{max}}}){quote_regex}/ & ~/(?s:.*{quote_regex}.*{quote_regex})/"
    );
    format!("{open} {terminal}")
}

/// A string parameter's value as a Python string in `quote`s: its enum's values (those a
/// quote or backslash would break are left out), or text within its length bounds without
/// quotes, backslashes or line breaks, in the terminal `terminal` appended to `lark`.
fn python_string(lark: &mut String, terminal: &str, schema: &Value, quote: char) -> String {
    let plain = |value: &&str| !value.contains([quote, '\\', '\n']);
    if let Some(values) = schema.get("enum").and_then(Value::as_array) {
        let values: Vec<String> = values
            .iter()
            .filter_map(Value::as_str)
            .filter(plain)
            .map(|value| literal(&format!("{quote}{value}{quote}")))
            .collect();
        if !values.is_empty() {
            return format!("({})", values.join(" | "));
        }
    }
    let bound = |key| schema.get(key).and_then(Value::as_u64);
    let (min, max) = (bound("minLength").unwrap_or(0), bound("maxLength"));
    let max = max.map_or(String::new(), |max| max.max(min).to_string());
    let _ = writeln!(
        lark,
        r"{terminal}: /{quote}[^{quote}\\\n]{{{min},{max}}}{quote}/"
    );
    terminal.to_owned()
}

/// A property's schema standing alone: the root's `$defs` and `definitions` come along, so its
/// `$ref`s still resolve.
fn with_definitions(schema: &Value, root: &Value) -> Value {
    let mut schema = schema.clone();
    if let Value::Object(object) = &mut schema {
        for key in ["$defs", "definitions"] {
            if let (Some(definitions), false) = (root.get(key), object.contains_key(key)) {
                object.insert(key.to_owned(), definitions.clone());
            }
        }
    }
    schema
}

/// `text` as a Lark string literal. Lark reads JSON string syntax, except that it also wants
/// DEL escaped.
fn literal(text: &str) -> String {
    Value::String(text.into())
        .to_string()
        .replace('\u{7f}', "\\u007f")
}
