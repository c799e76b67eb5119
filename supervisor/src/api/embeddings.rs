//! `POST /v1/embeddings`, in OpenAI's shape: `input` as a string, an array of strings, an array
//! of token ids or an array of such arrays; `encoding_format` `float` or `base64`;
//! `dimensions`; `user` (accepted, unused). Two extensions, named as Hugging Face TEI names them:
//! `truncate: true` cuts an input longer than the model's maximum instead of refusing the
//! request, and `prompt_name` picks the model's prompt to put before each text (`"query"`).
//!
//! The input is checked here, where the error can name the index of the input at fault; the
//! worker checks what only the model knows (lengths, token ids, `dimensions`).

use std::sync::Arc;

use axum::Json;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use base64::Engine;
use base64::engine::general_purpose::STANDARD as BASE64;
use corral_ipc::{EmbedInput, EmbedRequest, ModelKind};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::backend::Backend;
use super::error::ApiError;
use super::extract::ApiJson;
use super::generation::resolve_kind;
use super::served_model;

#[derive(Debug, Deserialize)]
pub struct EmbeddingsRequest {
    model: String,
    /// Kept as JSON until checked, so a bad element is reported by its index.
    input: Value,
    #[serde(default)]
    encoding_format: Option<String>,
    #[serde(default)]
    dimensions: Option<i64>,
    #[serde(default)]
    truncate: bool,
    /// Which of the model's prompts goes before each text (TEI's field: `"query"` for
    /// Qwen3-Embedding's instruction); the model's default prompt when absent.
    #[serde(default)]
    prompt_name: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Encoding {
    Float,
    Base64,
}

#[derive(Debug, Serialize)]
struct EmbeddingList {
    object: &'static str,
    data: Vec<EmbeddingObject>,
    model: String,
    usage: EmbeddingUsage,
}

#[derive(Debug, Serialize)]
struct EmbeddingObject {
    object: &'static str,
    index: usize,
    embedding: Embedding,
}

/// Floats as a JSON array, or their little-endian `f32` bytes in base64 (what the `openai`
/// SDKs ask for by default and decode with `numpy.frombuffer(..., dtype="float32")`).
#[derive(Debug, Serialize)]
#[serde(untagged)]
enum Embedding {
    Float(Vec<f32>),
    Base64(String),
}

#[derive(Debug, Serialize)]
struct EmbeddingUsage {
    prompt_tokens: u32,
    total_tokens: u32,
}

/// Answers like `respond`, tagged with the requested model for the metrics.
pub async fn handler<B: Backend>(
    State(backend): State<Arc<B>>,
    ApiJson(body): ApiJson<EmbeddingsRequest>,
) -> Response {
    let served = served_model::resolve(backend.as_ref(), &body.model);
    served.attach(respond(backend, body).await)
}

async fn respond<B: Backend>(
    backend: Arc<B>,
    body: EmbeddingsRequest,
) -> Result<Response, ApiError> {
    let inputs = parse_input(&body.input)?;
    let encoding = parse_encoding(body.encoding_format.as_deref())?;
    let dimensions = parse_dimensions(body.dimensions)?;
    let model = resolve_kind(backend.as_ref(), &body.model, ModelKind::Embedding)?;
    let count = inputs.len();
    let request = EmbedRequest {
        inputs,
        truncate: body.truncate,
        dimensions,
        prompt_name: body.prompt_name,
    };
    let embedded = backend
        .embed(&model, request)
        .await
        .map_err(|error| ApiError::input_too_long(error, "input"))?;
    if embedded.vectors.len() != count {
        return Err(ApiError::Backend(super::BackendError::Internal {
            message: format!(
                "the worker for {model} answered {} vectors for {count} inputs",
                embedded.vectors.len()
            ),
        }));
    }
    let data = embedded
        .vectors
        .into_iter()
        .enumerate()
        .map(|(index, vector)| EmbeddingObject {
            object: "embedding",
            index,
            embedding: encode(vector, encoding),
        })
        .collect();
    let list = EmbeddingList {
        object: "list",
        data,
        model,
        usage: EmbeddingUsage {
            prompt_tokens: embedded.prompt_tokens,
            total_tokens: embedded.prompt_tokens,
        },
    };
    Ok(Json(list).into_response())
}

fn encode(vector: Vec<f32>, encoding: Encoding) -> Embedding {
    match encoding {
        Encoding::Float => Embedding::Float(vector),
        Encoding::Base64 => {
            let bytes: Vec<u8> = vector
                .iter()
                .flat_map(|value| value.to_le_bytes())
                .collect();
            Embedding::Base64(BASE64.encode(bytes))
        }
    }
}

fn parse_encoding(format: Option<&str>) -> Result<Encoding, ApiError> {
    match format {
        None | Some("float") => Ok(Encoding::Float),
        Some("base64") => Ok(Encoding::Base64),
        Some(other) => Err(ApiError::invalid(
            format!("encoding_format must be `float` or `base64`, not `{other}`"),
            "encoding_format",
        )),
    }
}

fn parse_dimensions(dimensions: Option<i64>) -> Result<Option<u32>, ApiError> {
    match dimensions {
        None => Ok(None),
        Some(value) => u32::try_from(value)
            .ok()
            .filter(|&value| value > 0)
            .map(Some)
            .ok_or_else(|| {
                ApiError::invalid(
                    format!("dimensions must be a positive integer, not {value}"),
                    "dimensions",
                )
            }),
    }
}

/// The inputs of a request, each checked: OpenAI's four shapes, none of them empty.
fn parse_input(input: &Value) -> Result<Vec<EmbedInput>, ApiError> {
    match input {
        Value::String(text) => Ok(vec![text_input(text, "input")?]),
        Value::Array(items) if items.is_empty() => Err(ApiError::invalid(
            "input must not be an empty array",
            "input",
        )),
        // An array of integers is one tokenized input; of strings or arrays, one input each.
        Value::Array(items) if items[0].is_number() => Ok(vec![tokens_input(items, "input")?]),
        Value::Array(items) => items
            .iter()
            .enumerate()
            .map(|(index, item)| {
                let param = format!("input[{index}]");
                match item {
                    Value::String(text) => text_input(text, &param),
                    Value::Array(tokens) => tokens_input(tokens, &param),
                    _ => Err(ApiError::invalid(
                        format!("{param} must be a string or an array of token ids"),
                        param,
                    )),
                }
            })
            .collect(),
        _ => Err(ApiError::invalid(
            "input must be a string, an array of strings, an array of token ids or an array of \
             arrays of token ids",
            "input",
        )),
    }
}

fn text_input(text: &str, param: &str) -> Result<EmbedInput, ApiError> {
    if text.is_empty() {
        return Err(ApiError::invalid(
            format!("{param} must not be an empty string"),
            param.to_owned(),
        ));
    }
    Ok(EmbedInput::Text(text.to_owned()))
}

fn tokens_input(tokens: &[Value], param: &str) -> Result<EmbedInput, ApiError> {
    if tokens.is_empty() {
        return Err(ApiError::invalid(
            format!("{param} must not be an empty array of token ids"),
            param.to_owned(),
        ));
    }
    tokens
        .iter()
        .enumerate()
        .map(|(position, token)| {
            token
                .as_u64()
                .and_then(|id| u32::try_from(id).ok())
                .ok_or_else(|| {
                    ApiError::invalid(
                        format!("{param}[{position}] is not a token id (a non-negative integer): {token}"),
                        param.to_owned(),
                    )
                })
        })
        .collect::<Result<Vec<u32>, ApiError>>()
        .map(EmbedInput::Tokens)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn param(error: ApiError) -> String {
        error.body().error.param.unwrap_or_default()
    }

    #[test]
    fn the_four_input_shapes_become_one_input_each() {
        assert_eq!(
            parse_input(&json!("hi")).unwrap(),
            vec![EmbedInput::Text("hi".into())]
        );
        assert_eq!(
            parse_input(&json!(["a", "b"])).unwrap(),
            vec![EmbedInput::Text("a".into()), EmbedInput::Text("b".into())]
        );
        assert_eq!(
            parse_input(&json!([1, 2, 3])).unwrap(),
            vec![EmbedInput::Tokens(vec![1, 2, 3])]
        );
        assert_eq!(
            parse_input(&json!([[1], [2, 3]])).unwrap(),
            vec![EmbedInput::Tokens(vec![1]), EmbedInput::Tokens(vec![2, 3])]
        );
    }

    #[test]
    fn empty_and_malformed_inputs_name_their_index() {
        assert_eq!(param(parse_input(&json!("")).unwrap_err()), "input");
        assert_eq!(param(parse_input(&json!([])).unwrap_err()), "input");
        assert_eq!(
            param(parse_input(&json!(["a", ""])).unwrap_err()),
            "input[1]"
        );
        assert_eq!(
            param(parse_input(&json!([[1], []])).unwrap_err()),
            "input[1]"
        );
        assert_eq!(
            param(parse_input(&json!([[1], [-2]])).unwrap_err()),
            "input[1]"
        );
        assert_eq!(
            param(parse_input(&json!(["a", 3])).unwrap_err()),
            "input[1]"
        );
        assert_eq!(param(parse_input(&json!([1, "a"])).unwrap_err()), "input");
        assert_eq!(param(parse_input(&json!(3)).unwrap_err()), "input");
        assert_eq!(param(parse_input(&json!(null)).unwrap_err()), "input");
    }

    #[test]
    fn base64_is_the_little_endian_f32_bytes() {
        let Embedding::Base64(text) = encode(vec![1.0, -2.5], Encoding::Base64) else {
            panic!("not base64");
        };
        let bytes = BASE64.decode(text).unwrap();
        assert_eq!(
            bytes,
            [1.0f32.to_le_bytes(), (-2.5f32).to_le_bytes()].concat()
        );
    }
}
