//! The Anthropic Messages API through `corral serve`, with the official `anthropic` SDK.
