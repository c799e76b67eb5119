//! One example of every message variant, so round-trip and fuzz tests cover the whole protocol.

use corral_ipc::*;
use serde_json::json;

pub fn generate_request(prompt: Prompt) -> GenerateRequest {
    GenerateRequest {
        prompt,
        max_tokens: Some(256),
        temperature: Some(0.7),
        top_p: Some(0.95),
        top_k: Some(40),
        min_p: Some(0.05),
        repetition_penalty: Some(1.1),
        presence_penalty: Some(0.5),
        frequency_penalty: Some(-0.25),
        seed: Some(u64::MAX),
        stop: Some(vec!["</s>".into(), "\n\nUser:".into()]),
        logprobs: Some(5),
        tool_choice: Some(ToolChoice::Function {
            name: "get_weather".into(),
        }),
        parallel_tool_calls: Some(false),
        output_format: Some(OutputFormat::JsonSchema {
            schema: json!({"type": "object", "properties": {"city": {"type": "string"}}}),
            strict: true,
        }),
        count_only: false,
        reasoning_budget: Some(1024),
        speculative: Some(SpeculativeMethod::Draft),
    }
}

pub fn chat_prompt() -> Prompt {
    Prompt::Chat {
        messages: vec![
            json!({"role": "system", "content": "You are terse."}),
            json!({"role": "user", "content": [
                {"type": "text", "text": "héllo ✓ 🦀"},
                {"type": "text", "text": "", "extra": null},
                {"type": "image"}
            ]}),
            json!({"zeta": 1, "alpha": -2, "mid": 1.5, "big": u64::MAX, "neg": i64::MIN,
                   "flag": true, "none": null, "nested": {"a": [[], {}, [1, [2, [3]]]]}}),
        ],
        tools: Some(vec![json!({
            "type": "function",
            "function": {"name": "get_weather", "parameters": {"type": "object", "required": ["city"]}}
        })]),
        template_kwargs: json!({"enable_thinking": false}).as_object().cloned(),
        images: vec![PromptImage {
            bytes: b"\x89PNG\r\n\x1a\n\0\xff".to_vec(),
            location: "messages[1].content[2]".into(),
        }],
    }
}

pub fn to_worker() -> Vec<ToWorker> {
    vec![
        ToWorker::Welcome,
        ToWorker::Refused {
            message: "protocol version mismatch".into(),
        },
        ToWorker::Generate {
            id: 1,
            request: Box::new(generate_request(Prompt::Text("Once upon a time".into()))),
        },
        ToWorker::Generate {
            id: 2,
            request: Box::new(generate_request(chat_prompt())),
        },
        ToWorker::Generate {
            id: u64::MAX,
            request: Box::new(GenerateRequest {
                seed: None,
                logprobs: None,
                stop: None,
                tool_choice: None,
                parallel_tool_calls: None,
                count_only: true,
                output_format: Some(OutputFormat::Lark {
                    grammar: "start: \"yes\" | \"no\"".into(),
                }),
                ..generate_request(Prompt::Tokens(vec![0, 1, 128_000, u32::MAX]))
            }),
        },
        ToWorker::Generate {
            id: 3,
            request: Box::new(generate_request(Prompt::Chat {
                messages: vec![],
                tools: None,
                template_kwargs: None,
                images: Vec::new(),
            })),
        },
        ToWorker::Embed {
            id: 10,
            request: EmbedRequest {
                inputs: vec![
                    EmbedInput::Text("a sentence to embed".into()),
                    EmbedInput::Tokens(vec![101, 7592, 102]),
                ],
                truncate: true,
                dimensions: Some(256),
                prompt_name: Some("query".into()),
            },
        },
        ToWorker::Rerank {
            id: 11,
            request: RerankRequest {
                query: "which one is a fruit?".into(),
                documents: vec!["an apple".into(), "a hammer".into()],
                truncate: false,
            },
        },
        ToWorker::Cancel { id: 7 },
        ToWorker::GetStats,
        ToWorker::Shutdown,
    ]
}

pub fn from_worker() -> Vec<FromWorker> {
    let top = |token_id, token: &str, logprob| TopLogprob {
        token_id,
        token: token.into(),
        logprob,
    };
    vec![
        FromWorker::Hello {
            protocol_version: PROTOCOL_VERSION,
            pid: 4242,
            token: "0123456789abcdef".into(),
        },
        FromWorker::Ready {
            load_time_ms: 1234,
            weight_bytes: 4_500_000_000,
            context_length: 32_768,
            model_dir: "/models/Qwen2.5-7B-Instruct-4bit".into(),
        },
        FromWorker::LoadFailed {
            message: "config.json: missing field `hidden_size`".into(),
            permanent: true,
        },
        FromWorker::Accepted {
            id: 1,
            prompt_tokens: 17,
            cached_tokens: Some(16),
        },
        FromWorker::Rejected {
            id: 2,
            kind: RejectKind::PromptTooLong,
            message: "prompt is 40000 tokens, context is 32768".into(),
            param: None,
            overflow: Some(ContextOverflow {
                prompt_tokens: 40000,
                context_tokens: 32768,
            }),
        },
        FromWorker::Rejected {
            id: 3,
            kind: RejectKind::InvalidRequest,
            message: String::new(),
            param: Some("tools[0].function.name".into()),
            overflow: None,
        },
        FromWorker::Rejected {
            id: 4,
            kind: RejectKind::PrefillMemory,
            message: "needs 3 GiB".into(),
            param: None,
            overflow: None,
        },
        FromWorker::Rejected {
            id: 5,
            kind: RejectKind::Overloaded,
            message: "queue full".into(),
            param: None,
            overflow: None,
        },
        FromWorker::Rejected {
            id: 6,
            kind: RejectKind::ShuttingDown,
            message: "shutting down".into(),
            param: None,
            overflow: None,
        },
        FromWorker::Delta {
            id: 1,
            text: " there".into(),
            reasoning: String::new(),
            tool_calls: Vec::new(),
            token_count: 1,
            logprobs: None,
        },
        FromWorker::Delta {
            id: 1,
            text: "🦀".into(),
            reasoning: "thinking…".into(),
            tool_calls: vec![ToolCall {
                index: 0,
                name: "get_weather".into(),
                arguments: r#"{"city":"Paris"}"#.into(),
            }],
            token_count: 3,
            logprobs: Some(vec![TokenLogprob {
                token_id: 9,
                token: "\u{fffd}".into(),
                logprob: -0.25,
                top_logprobs: vec![top(9, "\u{fffd}", -0.25), top(10, "x", f32::NEG_INFINITY)],
            }]),
        },
        FromWorker::Done {
            id: 1,
            finish_reason: FinishReason::Stop,
            stop_sequence: Some("\n\nUser:".into()),
            usage: Usage {
                prompt_tokens: 17,
                completion_tokens: 4,
                cached_tokens: 0,
                drafted_tokens: 12,
                accepted_tokens: 7,
                diverged_at: Some(9),
            },
            timings: Timings {
                prefill_ms: 12,
                decode_ms: 80,
                images_encoded: 2,
                image_encode_ms: 340,
            },
        },
        FromWorker::Done {
            id: 2,
            finish_reason: FinishReason::Length,
            stop_sequence: None,
            usage: Usage {
                prompt_tokens: 0,
                completion_tokens: u32::MAX,
                cached_tokens: 0,
                drafted_tokens: 0,
                accepted_tokens: 0,
                diverged_at: None,
            },
            timings: Timings {
                prefill_ms: 0,
                decode_ms: u64::MAX,
                images_encoded: 0,
                image_encode_ms: 0,
            },
        },
        FromWorker::Done {
            id: 3,
            finish_reason: FinishReason::Cancelled,
            stop_sequence: None,
            usage: Usage {
                prompt_tokens: 1,
                completion_tokens: 0,
                cached_tokens: 0,
                drafted_tokens: 0,
                accepted_tokens: 0,
                diverged_at: None,
            },
            timings: Timings {
                prefill_ms: 1,
                decode_ms: 0,
                images_encoded: 0,
                image_encode_ms: 0,
            },
        },
        FromWorker::Done {
            id: 4,
            finish_reason: FinishReason::ToolCalls,
            stop_sequence: None,
            usage: Usage {
                prompt_tokens: 1,
                completion_tokens: 0,
                cached_tokens: 0,
                drafted_tokens: 0,
                accepted_tokens: 0,
                diverged_at: None,
            },
            timings: Timings {
                prefill_ms: 1,
                decode_ms: 0,
                images_encoded: 0,
                image_encode_ms: 0,
            },
        },
        FromWorker::Embeddings {
            id: 10,
            vectors: vec![vec![0.6, -0.8], vec![1.0, 0.0]],
            prompt_tokens: 9,
        },
        FromWorker::Scores {
            id: 11,
            scores: vec![3.25, -7.5],
            prompt_tokens: 14,
        },
        FromWorker::Rejected {
            id: 12,
            kind: RejectKind::Unsupported,
            message: "dimensions: this model was not trained for shortened vectors".into(),
            param: Some("dimensions".into()),
            overflow: None,
        },
        FromWorker::Error {
            id: 9,
            message: "Metal command buffer failed".into(),
        },
        FromWorker::Stats(WorkerStats {
            pid: 4242,
            active_sequences: 2,
            queued_requests: 1,
            completed: 100,
            cancelled: 3,
            mlx_active_bytes: 5 << 30,
            mlx_cache_bytes: 1 << 30,
            mlx_peak_bytes: 6 << 30,
            resident_bytes: 7 << 30,
            prefix_cache: None,
        }),
    ]
}
