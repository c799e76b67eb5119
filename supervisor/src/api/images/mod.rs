//! The images of chat prompts, as the three APIs take them: each API's translation puts a
//! `{"type": "image"}` content part where the client put an image (what Hugging Face chat
//! templates render as the model's image placeholder) and collects a [`Pending`] image with its
//! place in the client's terms (`source.rs`); once the whole request is checked, [`ImageFetch`]
//! turns them into the bytes the worker gets (`fetch.rs`). The supervisor never decodes an image:
//! the worker decodes and preprocesses it for its model.

mod fetch;
mod source;

#[cfg(test)]
pub(crate) mod tests;

use corral_ipc::{GenerateRequest, Prompt};

pub use fetch::ImageFetch;
pub use source::{ImageError, Pending, placeholder};

/// Fetches `pending` and puts the images into `request`'s chat prompt, in order.
pub async fn attach(
    fetch: &ImageFetch,
    request: &mut GenerateRequest,
    pending: Vec<Pending>,
) -> Result<(), ImageError> {
    let resolved = fetch.resolve(pending).await?;
    if let Prompt::Chat { images, .. } = &mut request.prompt {
        *images = resolved;
    }
    Ok(())
}
