//! The OpenAI Responses API through `corral serve`, with the official `openai` SDK.
