//! Fetching `http(s)` image URLs: on by default only for a server on loopback (`[images]
//! fetch_urls`), each download capped in bytes as it streams and in time, and only an `image/*`
//! answer taken. All of a request's images together stay under what one worker frame carries.

use std::time::Duration;

use corral_ipc::{MAX_FRAME_BYTES, PromptImage};

use super::source::{ImageError, Pending, Source};
use crate::api::MAX_BODY_BYTES;

/// The images' share of the `Generate` frame: the rest holds the prompt's text and tools.
const MAX_TOTAL_BYTES: u64 = (MAX_FRAME_BYTES - MAX_BODY_BYTES) as u64;

#[derive(Debug, Clone)]
pub struct ImageFetch {
    enabled: bool,
    max_bytes: u64,
    timeout: Duration,
    client: reqwest::Client,
}

impl ImageFetch {
    /// `enabled` false refuses every `http(s)` image URL (data URLs still pass).
    pub fn new(enabled: bool, max_bytes: u64, timeout: Duration) -> Result<Self, reqwest::Error> {
        let client = reqwest::Client::builder().timeout(timeout).build()?;
        Ok(Self {
            enabled,
            max_bytes,
            timeout,
            client,
        })
    }

    /// The images' bytes in order, each `http(s)` URL fetched.
    pub async fn resolve(&self, pending: Vec<Pending>) -> Result<Vec<PromptImage>, ImageError> {
        let mut images = Vec::with_capacity(pending.len());
        let mut total = 0u64;
        for Pending { source, location } in pending {
            let left = MAX_TOTAL_BYTES.saturating_sub(total);
            let bytes = match source {
                Source::Bytes(bytes) => bytes,
                Source::Url(url) => self.fetch(&url, &location, left).await?,
            };
            total += bytes.len() as u64;
            if total > MAX_TOTAL_BYTES {
                return Err(ImageError::new(
                    &location,
                    format!("the request's images take more than {MAX_TOTAL_BYTES} bytes together"),
                ));
            }
            images.push(PromptImage { bytes, location });
        }
        Ok(images)
    }

    async fn fetch(&self, url: &str, location: &str, left: u64) -> Result<Vec<u8>, ImageError> {
        if !self.enabled {
            return Err(ImageError::new(
                location,
                "this server does not fetch image URLs (`[images] fetch_urls`); send the image \
                 as a data: URL",
            ));
        }
        let failed = |error: reqwest::Error| {
            let why = if error.is_timeout() {
                format!("took longer than {} s", self.timeout.as_secs_f32())
            } else {
                error.without_url().to_string()
            };
            ImageError::new(location, format!("fetching {url} failed: {why}"))
        };
        let mut response = self.client.get(url).send().await.map_err(failed)?;
        let status = response.status();
        if !status.is_success() {
            return Err(ImageError::new(
                location,
                format!("fetching {url} failed: the server answered {status}"),
            ));
        }
        let content_type = response
            .headers()
            .get(reqwest::header::CONTENT_TYPE)
            .and_then(|value| value.to_str().ok())
            .unwrap_or("none");
        if !content_type
            .trim()
            .to_ascii_lowercase()
            .starts_with("image/")
        {
            return Err(ImageError::new(
                location,
                format!("{url} is not an image: its content type is {content_type}"),
            ));
        }
        let cap = self.max_bytes.min(left);
        let too_big = || {
            ImageError::new(
                location,
                format!("the image at {url} is larger than {cap} bytes"),
            )
        };
        if response.content_length().is_some_and(|length| length > cap) {
            return Err(too_big());
        }
        let mut bytes = Vec::new();
        while let Some(chunk) = response.chunk().await.map_err(failed)? {
            if (bytes.len() + chunk.len()) as u64 > cap {
                return Err(too_big());
            }
            bytes.extend_from_slice(&chunk);
        }
        if bytes.is_empty() {
            return Err(ImageError::new(
                location,
                format!("{url} answered no bytes"),
            ));
        }
        Ok(bytes)
    }
}
