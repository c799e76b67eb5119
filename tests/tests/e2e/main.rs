//! corral's end-to-end tests, in one binary so that MLX is linked once instead of once per file:
//! the real `corral` and `corral-worker` binaries on generated models, the engine in this
//! process, and its agreement with mlx-lm's logits. What the modules share (the binaries, the
//! generated models, a running `corral serve`) is the `corral-tests` library in `tests/src/`.

mod agent_turns;
mod agents;
mod anthropic;
mod batching;
mod clients;
mod dashboard;
mod discovery;
mod embeddings;
mod engine;
mod families;
mod gguf_agreement;
mod gguf_forms;
mod images;
mod lifecycle;
mod logit_checks;
mod mamba2;
mod operations;
mod prefix_cache;
mod pull;
mod quant_modes;
mod recurrent_prefix_cache;
mod reference_logits;
mod rerank;
mod responses;
mod retrieval_race;
mod sampling_defaults;
mod serve;
mod serve_auth;
mod serve_memory;
mod serve_metrics;
mod serve_workers;
mod service;
mod service_logs;
mod smollm2;
mod smollm2_requantized;
mod speculation;
mod toolchain;
mod worker_generate;
mod worker_group;
mod worker_group_hosts;
mod worker_serve;
