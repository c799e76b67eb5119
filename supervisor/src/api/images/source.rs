//! Where an image of a request comes from (`data:` URL, `http(s)` URL or base64 with its media
//! type), checked as far as the supervisor can without decoding it: the media type is an image's
//! and the base64 decodes.

use base64::Engine;
use base64::alphabet;
use base64::engine::{DecodePaddingMode, GeneralPurpose, GeneralPurposeConfig};
use serde_json::{Value, json};

use crate::api::error::ApiError;

/// Clients pad or not; both are the same bytes.
const BASE64: GeneralPurpose = GeneralPurpose::new(
    &alphabet::STANDARD,
    GeneralPurposeConfig::new().with_decode_padding_mode(DecodePaddingMode::Indifferent),
);

/// A malformed or unreachable image, named by its place in the request.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{location}: {problem}")]
pub struct ImageError {
    pub location: String,
    pub problem: String,
}

impl ImageError {
    pub fn new(location: &str, problem: impl Into<String>) -> Self {
        Self {
            location: location.to_owned(),
            problem: problem.into(),
        }
    }
}

impl From<ImageError> for ApiError {
    fn from(error: ImageError) -> Self {
        let param = error.location.clone();
        ApiError::invalid(error.to_string(), param)
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    /// The image itself, from a `data:` URL or base64.
    Bytes(Vec<u8>),
    /// An `http(s)` URL, fetched once the request is checked.
    Url(String),
}

/// An image of the request, not yet fetched.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pending {
    pub source: Source,
    /// `messages[1].content[0]`, `input[2].content[1]`...
    pub location: String,
}

impl Pending {
    /// An image given by URL: a base64 `data:` URL of an `image/*` type, or an `http(s)` URL.
    pub fn from_url(url: &str, location: String) -> Result<Self, ImageError> {
        let source = if let Some(data) = strip_prefix_ignore_case(url, "data:") {
            Source::Bytes(data_url(data, &location)?)
        } else if ["http://", "https://"]
            .iter()
            .any(|scheme| strip_prefix_ignore_case(url, scheme).is_some())
        {
            Source::Url(url.to_owned())
        } else {
            return Err(ImageError::new(
                &location,
                "an image URL must be a data: URL (data:image/png;base64,...) or an http(s) URL",
            ));
        };
        Ok(Self { source, location })
    }

    /// Base64 data with its media type given apart (Anthropic's `base64` source).
    pub fn from_base64(media_type: &str, data: &str, location: String) -> Result<Self, ImageError> {
        check_media_type(media_type, &location)?;
        let bytes = decode(data, &location)?;
        Ok(Self {
            source: Source::Bytes(bytes),
            location,
        })
    }
}

/// The content part a chat template renders as the model's image placeholder.
pub fn placeholder() -> Value {
    json!({"type": "image"})
}

/// `data:` URL after the scheme: `image/png;base64,<data>`.
fn data_url(rest: &str, location: &str) -> Result<Vec<u8>, ImageError> {
    let (header, data) = rest
        .split_once(',')
        .ok_or_else(|| ImageError::new(location, "a data: URL needs a comma before its data"))?;
    let mut params = header.split(';');
    let media_type = params.next().unwrap_or_default();
    check_media_type(media_type, location)?;
    if !params.any(|param| param.eq_ignore_ascii_case("base64")) {
        return Err(ImageError::new(
            location,
            "an image's data: URL must be base64 (data:image/png;base64,...)",
        ));
    }
    decode(data, location)
}

fn check_media_type(media_type: &str, location: &str) -> Result<(), ImageError> {
    match strip_prefix_ignore_case(media_type.trim(), "image/") {
        Some(subtype) if !subtype.is_empty() => Ok(()),
        _ => Err(ImageError::new(
            location,
            format!("media type `{media_type}` is not an image type (image/png, image/jpeg...)"),
        )),
    }
}

/// Base64 with any whitespace (line breaks some encoders add) left out.
fn decode(data: &str, location: &str) -> Result<Vec<u8>, ImageError> {
    let compact: String = data.chars().filter(|c| !c.is_ascii_whitespace()).collect();
    let bytes = BASE64.decode(compact).map_err(|error| {
        ImageError::new(location, format!("the image's base64 is invalid: {error}"))
    })?;
    if bytes.is_empty() {
        return Err(ImageError::new(location, "the image holds no bytes"));
    }
    Ok(bytes)
}

fn strip_prefix_ignore_case<'a>(text: &'a str, prefix: &str) -> Option<&'a str> {
    let head = text.get(..prefix.len())?;
    head.eq_ignore_ascii_case(prefix)
        .then(|| &text[prefix.len()..])
}
