//! The model families corral serves, each made servable from its architecture's tiny checkpoint
//! as the real tools write it (`tests/data/toolchain/<arch>/mlx`, `mlx_lm.convert`'s float
//! layout, else transformers' `hf`; vocabulary 128): the checkpoint's config and weights, a
//! tokenizer of one token per printable ASCII character (and tab and newline) plus the special
//! tokens the family's templates write, and the chat template its real models ship
//! (`tests/data/chat_templates/`) with their end-of-turn settings. Any text and any JSON can be
//! written in such a vocabulary, so a grammar can force a tool call in any format, and the worker
//! meets each family's template and markers as it would on the real model.

use std::path::{Path, PathBuf};

use serde_json::{Map, Value, json};

/// How a family's real models write a tool call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CallSyntax {
    /// `<tool_call>\n{"name": ..., "arguments": ...}\n</tool_call>`.
    Hermes,
    /// `<|python_tag|>{"name": ..., "parameters": ...}`.
    Llama3,
    /// `[TOOL_CALLS][{"name": ..., "arguments": ...}]`.
    Mistral,
    /// `<|tool_call|>[{"name": ..., "arguments": ...}]`.
    Granite,
    /// Qwen3-Coder's, Qwen3.5's and Qwen3.6's `<tool_call>\n<function=NAME>\n<parameter=KEY>\n
    /// VALUE\n</parameter>\n</function>\n</tool_call>`.
    QwenXml,
    /// `<tool_call>NAME\n<arg_key>KEY</arg_key>\n<arg_value>VALUE</arg_value>\n</tool_call>`.
    Glm,
    /// gpt-oss's harmony: `<|channel|>commentary to=functions.NAME <|constrain|>json<|message|>
    /// {...}<|call|>`.
    Harmony,
    /// `<|tool_call>call:NAME{key:<|"|>text<|"|>}<tool_call|>`.
    Gemma4,
    /// LFM2's `<|tool_call_start|>[NAME(key='text')]<|tool_call_end|>`.
    Pythonic,
    /// DeepSeek V3.1's `<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>NAME<｜tool▁sep｜>{...}
    /// <｜tool▁call▁end｜><｜tool▁calls▁end｜>`.
    DeepSeek,
    /// Kimi K2's `<|tool_calls_section_begin|><|tool_call_begin|>functions.NAME:0
    /// <|tool_call_argument_begin|>{...}<|tool_call_end|><|tool_calls_section_end|>`.
    Kimi,
    /// Llama 4's bare `[NAME(key="text")]`, the whole answer.
    Llama4,
    /// Phi-4-mini's `functools[{"name": ..., "arguments": ...}]`.
    Phi4Mini,
    /// Ministral 3's and Magistral's `[TOOL_CALLS]NAME[ARGS]{...}`, thinking in
    /// `[THINK]...[/THINK]`.
    MistralThink,
}

/// One family: which checkpoint, which template, which special tokens, and what its real
/// models write.
pub struct Family {
    /// The family's architecture; also the model's id.
    pub arch: &'static str,
    /// The architecture's directory under `tests/data/toolchain/`.
    pub checkpoint: &'static str,
    /// Its real models' template, a file of `tests/data/chat_templates/`.
    pub template: &'static str,
    /// The tokens after the characters, in id order: text and whether it is special.
    pub added: &'static [(&'static str, bool)],
    pub bos: Option<&'static str>,
    /// `tokenizer_config.json`'s `eos_token`.
    pub eos: &'static str,
    /// `generation_config.json`'s `eos_token_id`: every token that ends a turn.
    pub stop: &'static [&'static str],
    pub calls: CallSyntax,
    /// Whether its models think first (in a `<think>` block, gpt-oss's `analysis` channel or
    /// Gemma 4's thought channel).
    pub thinks: bool,
    /// The template variables that turn its thinking on, where it is off by default.
    pub thinking_kwargs: &'static str,
}

const CHATML: &[(&str, bool)] = &[
    ("<|endoftext|>", true),
    ("<|im_start|>", true),
    ("<|im_end|>", true),
    ("<tool_call>", false),
    ("</tool_call>", false),
];

const QWEN3: &[(&str, bool)] = &[
    ("<|endoftext|>", true),
    ("<|im_start|>", true),
    ("<|im_end|>", true),
    ("<tool_call>", false),
    ("</tool_call>", false),
    ("<tool_response>", false),
    ("</tool_response>", false),
    ("<think>", false),
    ("</think>", false),
];

/// Mistral's v3 control tokens, which Nemo's tokenizer has too.
const MISTRAL: &[(&str, bool)] = &[
    ("<unk>", true),
    ("<s>", true),
    ("</s>", true),
    ("[INST]", true),
    ("[/INST]", true),
    ("[TOOL_CALLS]", true),
    ("[AVAILABLE_TOOLS]", true),
    ("[/AVAILABLE_TOOLS]", true),
    ("[TOOL_RESULTS]", true),
    ("[/TOOL_RESULTS]", true),
];

/// Tekken's control tokens that Ministral 3 Reasoning's template writes, all special; Mistral
/// Small 3.1's template writes the first `MISTRAL_SMALL_TOKENS`.
const TEKKEN: &[(&str, bool)] = &[
    ("<unk>", true),
    ("<s>", true),
    ("</s>", true),
    ("[INST]", true),
    ("[/INST]", true),
    ("[AVAILABLE_TOOLS]", true),
    ("[/AVAILABLE_TOOLS]", true),
    ("[TOOL_RESULTS]", true),
    ("[/TOOL_RESULTS]", true),
    ("[TOOL_CALLS]", true),
    ("[IMG]", true),
    ("[SYSTEM_PROMPT]", true),
    ("[/SYSTEM_PROMPT]", true),
    ("[ARGS]", true),
    ("[THINK]", true),
    ("[/THINK]", true),
];
const MISTRAL_SMALL_TOKENS: usize = 13;

/// Every family corral serves today, by architecture.
pub const FAMILIES: &[Family] = &[
    Family {
        arch: "deepseek_v3",
        // Kimi K2.5's DeepSeek V3 text model: on deepseek_v3's own tiny weights a forced call
        // writes `<｜tool▁call▁end｜>` inside its string argument, where the call parser cuts it
        // (an open bug: the call's grammar should keep the markers out of its strings).
        checkpoint: "kimi_k25",
        template: "deepseek-v3.1.jinja",
        // DeepSeek V3.1's tokenizer marks only the sentence tokens special.
        added: &[
            ("<｜begin▁of▁sentence｜>", true),
            ("<｜end▁of▁sentence｜>", true),
            ("<｜User｜>", false),
            ("<｜Assistant｜>", false),
            ("<think>", false),
            ("</think>", false),
            ("<｜tool▁calls▁begin｜>", false),
            ("<｜tool▁calls▁end｜>", false),
            ("<｜tool▁call▁begin｜>", false),
            ("<｜tool▁call▁end｜>", false),
            ("<｜tool▁sep｜>", false),
            ("<｜tool▁output▁begin｜>", false),
            ("<｜tool▁output▁end｜>", false),
        ],
        bos: Some("<｜begin▁of▁sentence｜>"),
        eos: "<｜end▁of▁sentence｜>",
        stop: &["<｜end▁of▁sentence｜>"],
        calls: CallSyntax::DeepSeek,
        thinks: true,
        thinking_kwargs: r#"{"thinking": true}"#,
    },
    Family {
        arch: "gemma3_text",
        checkpoint: "gemma3_text",
        template: "gemma3.jinja",
        added: &[
            ("<pad>", true),
            ("<eos>", true),
            ("<bos>", true),
            ("<start_of_turn>", true),
            ("<end_of_turn>", true),
        ],
        bos: Some("<bos>"),
        eos: "<eos>",
        stop: &["<eos>", "<end_of_turn>"],
        // Gemma 3's template renders no tools: corral teaches it Hermes calls.
        calls: CallSyntax::Hermes,
        thinks: false,
        thinking_kwargs: "{}",
    },
    Family {
        arch: "gemma4_text",
        checkpoint: "gemma4_text",
        template: "gemma4.jinja",
        added: &[
            ("<pad>", true),
            ("<eos>", true),
            ("<bos>", true),
            ("<|turn>", true),
            ("<turn|>", true),
            ("<|think|>", true),
            ("<|channel>", true),
            ("<channel|>", true),
            ("<|tool>", true),
            ("<tool|>", true),
            ("<|tool_call>", true),
            ("<tool_call|>", true),
            ("<|tool_response>", true),
            ("<tool_response|>", true),
            ("<|\"|>", true),
        ],
        bos: Some("<bos>"),
        eos: "<eos>",
        // A call's turn ends where the result would start.
        stop: &["<eos>", "<turn|>", "<|tool_response>"],
        calls: CallSyntax::Gemma4,
        thinks: true,
        thinking_kwargs: r#"{"enable_thinking": true}"#,
    },
    Family {
        arch: "glm4_moe",
        checkpoint: "glm4_moe",
        template: "glm4.6.jinja",
        added: &[
            ("<|endoftext|>", true),
            ("[gMASK]", true),
            ("<sop>", true),
            ("<|system|>", true),
            ("<|user|>", true),
            ("<|assistant|>", true),
            ("<|observation|>", true),
            ("<think>", false),
            ("</think>", false),
            ("<tool_call>", false),
            ("</tool_call>", false),
            ("<tool_response>", false),
            ("</tool_response>", false),
            ("<arg_key>", false),
            ("</arg_key>", false),
            ("<arg_value>", false),
            ("</arg_value>", false),
        ],
        bos: None,
        eos: "<|endoftext|>",
        stop: &["<|endoftext|>", "<|user|>", "<|observation|>"],
        calls: CallSyntax::Glm,
        thinks: true,
        thinking_kwargs: "{}",
    },
    Family {
        arch: "gpt_oss",
        checkpoint: "gpt_oss",
        template: "gpt-oss.jinja",
        added: &[
            ("<|startoftext|>", true),
            ("<|endoftext|>", true),
            ("<|return|>", true),
            ("<|constrain|>", true),
            ("<|channel|>", true),
            ("<|start|>", true),
            ("<|end|>", true),
            ("<|message|>", true),
            ("<|call|>", true),
        ],
        bos: Some("<|startoftext|>"),
        eos: "<|return|>",
        stop: &["<|return|>", "<|endoftext|>", "<|call|>"],
        calls: CallSyntax::Harmony,
        thinks: true,
        thinking_kwargs: "{}",
    },
    Family {
        arch: "granite",
        checkpoint: "granite",
        template: "granite3.3.jinja",
        added: &[
            ("<|end_of_text|>", true),
            ("<|start_of_role|>", true),
            ("<|end_of_role|>", true),
            ("<|tool_call|>", true),
        ],
        bos: Some("<|end_of_text|>"),
        eos: "<|end_of_text|>",
        stop: &["<|end_of_text|>"],
        calls: CallSyntax::Granite,
        thinks: true,
        thinking_kwargs: "{}",
    },
    Family {
        arch: "kimi_k2",
        checkpoint: "kimi_k2",
        template: "kimi-k2.jinja",
        added: &[
            ("[BOS]", true),
            ("[EOS]", true),
            ("<|im_end|>", true),
            ("<|im_user|>", true),
            ("<|im_assistant|>", true),
            ("<|im_system|>", true),
            ("<|im_middle|>", true),
            ("<|tool_calls_section_begin|>", true),
            ("<|tool_calls_section_end|>", true),
            ("<|tool_call_begin|>", true),
            ("<|tool_call_argument_begin|>", true),
            ("<|tool_call_end|>", true),
        ],
        bos: Some("[BOS]"),
        eos: "[EOS]",
        stop: &["<|im_end|>", "[EOS]"],
        calls: CallSyntax::Kimi,
        thinks: false,
        thinking_kwargs: "{}",
    },
    Family {
        arch: "lfm2",
        checkpoint: "lfm2",
        template: "lfm2.5.jinja",
        added: &[
            ("<|pad|>", true),
            ("<|startoftext|>", true),
            ("<|endoftext|>", true),
            ("<|im_start|>", true),
            ("<|im_end|>", true),
            ("<|tool_call_start|>", true),
            ("<|tool_call_end|>", true),
            ("<think>", false),
            ("</think>", false),
        ],
        bos: Some("<|startoftext|>"),
        eos: "<|im_end|>",
        stop: &["<|im_end|>"],
        calls: CallSyntax::Pythonic,
        thinks: true,
        thinking_kwargs: "{}",
    },
    Family {
        arch: "llama",
        checkpoint: "llama",
        template: "llama3.1.jinja",
        added: &[
            ("<|begin_of_text|>", true),
            ("<|end_of_text|>", true),
            ("<|start_header_id|>", true),
            ("<|end_header_id|>", true),
            ("<|eom_id|>", true),
            ("<|eot_id|>", true),
            ("<|python_tag|>", true),
        ],
        bos: Some("<|begin_of_text|>"),
        eos: "<|eot_id|>",
        stop: &["<|end_of_text|>", "<|eom_id|>", "<|eot_id|>"],
        calls: CallSyntax::Llama3,
        thinks: false,
        thinking_kwargs: "{}",
    },
    Family {
        arch: "llama4",
        checkpoint: "llama4",
        template: "llama4.jinja",
        added: &[
            ("<|begin_of_text|>", true),
            ("<|end_of_text|>", true),
            ("<|header_start|>", true),
            ("<|header_end|>", true),
            ("<|eom|>", true),
            ("<|eot|>", true),
            ("<|python_start|>", true),
            ("<|python_end|>", true),
            ("<|image|>", true),
        ],
        bos: Some("<|begin_of_text|>"),
        eos: "<|eot|>",
        stop: &["<|end_of_text|>", "<|eom|>", "<|eot|>"],
        calls: CallSyntax::Llama4,
        thinks: false,
        thinking_kwargs: "{}",
    },
    Family {
        arch: "mistral",
        checkpoint: "mistral",
        template: "mistral-nemo.jinja",
        added: MISTRAL,
        bos: Some("<s>"),
        eos: "</s>",
        stop: &["</s>"],
        calls: CallSyntax::Mistral,
        thinks: false,
        thinking_kwargs: "{}",
    },
    Family {
        arch: "mistral3",
        checkpoint: "ministral3",
        template: "mistral-small-3.1.jinja",
        added: TEKKEN.split_at(MISTRAL_SMALL_TOKENS).0,
        bos: Some("<s>"),
        eos: "</s>",
        stop: &["</s>"],
        calls: CallSyntax::Mistral,
        thinks: false,
        thinking_kwargs: "{}",
    },
    Family {
        arch: "ministral3",
        checkpoint: "ministral3_text",
        template: "ministral3-reasoning.jinja",
        added: TEKKEN,
        bos: Some("<s>"),
        eos: "</s>",
        stop: &["</s>"],
        calls: CallSyntax::MistralThink,
        // Always: its default system prompt asks for `[THINK]`.
        thinks: true,
        thinking_kwargs: "{}",
    },
    Family {
        arch: "mixtral",
        checkpoint: "mixtral",
        template: "mixtral-8x22b.jinja",
        added: MISTRAL,
        bos: Some("<s>"),
        eos: "</s>",
        stop: &["</s>"],
        calls: CallSyntax::Mistral,
        thinks: false,
        thinking_kwargs: "{}",
    },
    Family {
        arch: "phi3",
        checkpoint: "phi3",
        template: "phi4-mini.jinja",
        added: &[
            ("<|endoftext|>", true),
            ("<|system|>", true),
            ("<|user|>", true),
            ("<|assistant|>", true),
            ("<|end|>", true),
            ("<|tool|>", true),
            ("<|/tool|>", true),
            ("<|tool_call|>", true),
            ("<|/tool_call|>", true),
            ("<|tool_response|>", true),
        ],
        bos: Some("<|endoftext|>"),
        eos: "<|endoftext|>",
        stop: &["<|endoftext|>", "<|end|>"],
        // Its template takes the tools as the system message's `tools` string, which corral
        // fills; the model writes `functools[...]`.
        calls: CallSyntax::Phi4Mini,
        thinks: false,
        thinking_kwargs: "{}",
    },
    Family {
        arch: "qwen2",
        checkpoint: "qwen2",
        template: "qwen2.5.jinja",
        added: CHATML,
        bos: None,
        eos: "<|im_end|>",
        stop: &["<|im_end|>", "<|endoftext|>"],
        calls: CallSyntax::Hermes,
        thinks: false,
        thinking_kwargs: "{}",
    },
    Family {
        arch: "qwen3",
        checkpoint: "qwen3",
        template: "qwen3.jinja",
        added: QWEN3,
        bos: None,
        eos: "<|im_end|>",
        stop: &["<|im_end|>", "<|endoftext|>"],
        calls: CallSyntax::Hermes,
        thinks: true,
        thinking_kwargs: "{}",
    },
    Family {
        arch: "qwen3_moe",
        checkpoint: "qwen3_moe",
        template: "qwen3.jinja",
        added: QWEN3,
        bos: None,
        eos: "<|im_end|>",
        stop: &["<|im_end|>", "<|endoftext|>"],
        calls: CallSyntax::Hermes,
        thinks: true,
        thinking_kwargs: "{}",
    },
    Family {
        arch: "qwen3_5_moe",
        checkpoint: "qwen3_5_moe",
        template: "qwen3.6.jinja",
        added: QWEN3,
        bos: None,
        eos: "<|im_end|>",
        stop: &["<|im_end|>", "<|endoftext|>"],
        calls: CallSyntax::QwenXml,
        thinks: true,
        thinking_kwargs: "{}",
    },
    Family {
        arch: "smollm3",
        checkpoint: "smollm3",
        template: "smollm3.jinja",
        added: &[
            ("<|begin_of_text|>", true),
            ("<|end_of_text|>", true),
            ("<|im_start|>", true),
            ("<|im_end|>", true),
            ("<think>", false),
            ("</think>", false),
            ("<tool_call>", false),
            ("</tool_call>", false),
        ],
        bos: None,
        eos: "<|im_end|>",
        stop: &["<|im_end|>", "<|end_of_text|>"],
        calls: CallSyntax::Hermes,
        thinks: true,
        thinking_kwargs: "{}",
    },
];

/// The checkpoints' vocabulary size.
const VOCAB: usize = 128;

fn data(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("data")
        .join(path)
}

/// The characters, in id order: tab, newline, then space to `~`.
fn characters() -> impl Iterator<Item = u8> {
    [b'\t', b'\n'].into_iter().chain(b' '..=b'~')
}

/// GPT-2's byte-level spelling of an ASCII byte: printable ones are themselves, space and the
/// control bytes before it are shifted to U+0100 onwards.
fn byte_level(byte: u8) -> char {
    if byte > b' ' {
        char::from(byte)
    } else {
        char::from_u32(0x100 + u32::from(byte)).unwrap_or(char::REPLACEMENT_CHARACTER)
    }
}

impl Family {
    /// Writes the servable model into `dir` (created).
    pub fn write_model(&self, dir: &Path) {
        std::fs::create_dir_all(dir).unwrap();
        let architecture = data("toolchain").join(self.checkpoint);
        let checkpoint = ["mlx", "hf"]
            .iter()
            .map(|layout| architecture.join(layout))
            .find(|dir| dir.join("config.json").exists())
            .unwrap_or_else(|| panic!("{}: no mlx or hf layout", architecture.display()));
        // The checkpoint's special token ids are its own tokenizer's; here they would be
        // characters, so only the family's `generation_config.json` names the ends.
        let mut config: Value =
            serde_json::from_str(&std::fs::read_to_string(checkpoint.join("config.json")).unwrap())
                .unwrap();
        forget_special_ids(&mut config);
        write_json(&dir.join("config.json"), &config);
        // transformers writes one file and no index; mlx_lm.convert writes both.
        for file in ["model.safetensors", "model.safetensors.index.json"] {
            let source = checkpoint.join(file);
            if source.exists() {
                std::fs::copy(&source, dir.join(file))
                    .unwrap_or_else(|error| panic!("{}: {error}", source.display()));
            }
        }
        let template = std::fs::read_to_string(data("chat_templates").join(self.template)).unwrap();
        write_json(&dir.join("tokenizer.json"), &self.tokenizer());
        write_json(
            &dir.join("tokenizer_config.json"),
            &json!({
                "bos_token": self.bos,
                "eos_token": self.eos,
                "chat_template": template,
                "clean_up_tokenization_spaces": false,
                "tokenizer_class": "PreTrainedTokenizerFast",
            }),
        );
        let stop: Vec<u32> = self.stop.iter().map(|token| self.id(token)).collect();
        write_json(
            &dir.join("generation_config.json"),
            &json!({"eos_token_id": stop}),
        );
    }

    /// A Lark grammar (corral's `grammar` field) that makes the model write one call of `name`
    /// with `arguments` (JSON) as the family's real models write it, special tokens by id.
    pub fn call_grammar(&self, name: &str, arguments: &str) -> String {
        let literal = |text: &str| Value::String(text.into()).to_string();
        let token = |text: &str| format!("<[{}]>", self.id(text));
        let call = |key: &str| format!(r#"{{"name": "{name}", "{key}": {arguments}}}"#);
        let rule = match self.calls {
            CallSyntax::Hermes => {
                literal(&format!("<tool_call>\n{}\n</tool_call>", call("arguments")))
            }
            CallSyntax::Llama3 => {
                format!(
                    "{} {}",
                    token("<|python_tag|>"),
                    literal(&call("parameters"))
                )
            }
            CallSyntax::Mistral => format!(
                "{} {}",
                token("[TOOL_CALLS]"),
                literal(&format!("[{}]", call("arguments")))
            ),
            CallSyntax::Granite => format!(
                "{} {}",
                token("<|tool_call|>"),
                literal(&format!("[{}]", call("arguments")))
            ),
            CallSyntax::Phi4Mini => literal(&format!("functools[{}]", call("arguments"))),
            CallSyntax::MistralThink => format!(
                "{} {}",
                token("[TOOL_CALLS]"),
                literal(&format!("{name}[ARGS]{arguments}"))
            ),
            CallSyntax::QwenXml => {
                let arguments: Map<String, Value> = serde_json::from_str(arguments).unwrap();
                // Its template opens the thinking block, which the model closes first.
                let mut text = format!("</think>\n\n<tool_call>\n<function={name}>\n");
                for (key, value) in arguments {
                    let value = value
                        .as_str()
                        .map_or_else(|| value.to_string(), str::to_owned);
                    text += &format!("<parameter={key}>\n{value}\n</parameter>\n");
                }
                literal(&(text + "</function>\n</tool_call>"))
            }
            CallSyntax::Glm => {
                let arguments: Map<String, Value> = serde_json::from_str(arguments).unwrap();
                let mut text = format!("<tool_call>{name}\n");
                for (key, value) in arguments {
                    let value = value
                        .as_str()
                        .map_or_else(|| value.to_string(), str::to_owned);
                    text += &format!("<arg_key>{key}</arg_key>\n<arg_value>{value}</arg_value>\n");
                }
                literal(&(text + "</tool_call>"))
            }
            CallSyntax::Gemma4 => {
                let arguments: Map<String, Value> = serde_json::from_str(arguments).unwrap();
                let mut items = vec![token("<|tool_call>"), literal(&format!("call:{name}{{"))];
                for (position, (key, value)) in arguments.into_iter().enumerate() {
                    let comma = if position == 0 { "" } else { "," };
                    items.push(literal(&format!("{comma}{key}:")));
                    match value.as_str() {
                        Some(text) => {
                            items.extend([token("<|\"|>"), literal(text), token("<|\"|>")])
                        }
                        None => items.push(literal(&value.to_string())),
                    }
                }
                items.extend([literal("}"), token("<tool_call|>")]);
                items.join(" ")
            }
            CallSyntax::Pythonic => {
                let arguments: Map<String, Value> = serde_json::from_str(arguments).unwrap();
                let arguments: Vec<String> = arguments
                    .into_iter()
                    .map(|(key, value)| match value.as_str() {
                        Some(text) => format!("{key}='{text}'"),
                        None => format!("{key}={value}"),
                    })
                    .collect();
                format!(
                    "{} {} {}",
                    token("<|tool_call_start|>"),
                    literal(&format!("[{name}({})]", arguments.join(", "))),
                    token("<|tool_call_end|>")
                )
            }
            CallSyntax::DeepSeek => format!(
                "{} {} {} {} {} {} {}",
                token("<｜tool▁calls▁begin｜>"),
                token("<｜tool▁call▁begin｜>"),
                literal(name),
                token("<｜tool▁sep｜>"),
                literal(arguments),
                token("<｜tool▁call▁end｜>"),
                token("<｜tool▁calls▁end｜>"),
            ),
            CallSyntax::Kimi => format!(
                "{} {} {} {} {} {} {}",
                token("<|tool_calls_section_begin|>"),
                token("<|tool_call_begin|>"),
                literal(&format!("functions.{name}:0")),
                token("<|tool_call_argument_begin|>"),
                literal(arguments),
                token("<|tool_call_end|>"),
                token("<|tool_calls_section_end|>"),
            ),
            CallSyntax::Llama4 => {
                let arguments: Map<String, Value> = serde_json::from_str(arguments).unwrap();
                let arguments: Vec<String> = arguments
                    .into_iter()
                    .map(|(key, value)| format!("{key}={value}"))
                    .collect();
                literal(&format!("[{name}({})]", arguments.join(", ")))
            }
            CallSyntax::Harmony => format!(
                "{} {} {} {} {} {} {}",
                token("<|channel|>"),
                literal(&format!("commentary to=functions.{name} ")),
                token("<|constrain|>"),
                literal("json"),
                token("<|message|>"),
                literal(arguments),
                token("<|call|>"),
            ),
        };
        format!("start: {rule}")
    }

    /// What the family's real models write when they think first, around the thought `hmm\n`
    /// and the answer `fine`: Granite 3.3 wraps its answer in `<response>` tags, GLM opens its
    /// turn with a newline, and gpt-oss writes an `analysis` message, then a `final` one.
    pub fn thinking_output(&self) -> &'static str {
        match self.calls {
            CallSyntax::Granite => "<think>hmm\n</think><response>fine</response>",
            CallSyntax::Glm => "\n<think>hmm\n</think>\nfine",
            CallSyntax::Gemma4 => "<|channel>thought\nhmm\n<channel|>fine",
            // Its template opens the thinking block itself.
            CallSyntax::QwenXml => "hmm\n</think>\n\nfine",
            CallSyntax::DeepSeek => "hmm\n</think>fine",
            CallSyntax::MistralThink => "[THINK]hmm\n[/THINK]fine",
            CallSyntax::Harmony => {
                "<|channel|>analysis<|message|>hmm\n<|end|><|start|>assistant<|channel|>final<|message|>fine"
            }
            _ => "<think>\nhmm\n</think>\n\nfine",
        }
    }

    /// A Lark grammar that makes the model write `thinking_output`, its special tokens by id as
    /// the real models write them (gpt-oss's markers, spelled out, would not fit the answer's
    /// token budget).
    pub fn thinking_grammar(&self) -> String {
        let mut items = Vec::new();
        let mut text = String::new();
        let mut rest = self.thinking_output();
        while let Some(c) = rest.chars().next() {
            let special = self
                .added
                .iter()
                .find(|&&(token, special)| special && rest.starts_with(token));
            if let Some(&(token, _)) = special {
                if !text.is_empty() {
                    items.push(Value::String(std::mem::take(&mut text)).to_string());
                }
                items.push(format!("<[{}]>", self.id(token)));
                rest = &rest[token.len()..];
            } else {
                text.push(c);
                rest = &rest[c.len_utf8()..];
            }
        }
        if !text.is_empty() {
            items.push(Value::String(text).to_string());
        }
        format!("start: {}", items.join(" "))
    }

    /// The id of one of the family's added tokens.
    fn id(&self, token: &str) -> u32 {
        let index = self.added.iter().position(|&(text, _)| text == token);
        let index = index.unwrap_or_else(|| panic!("{} has no {token}", self.arch));
        (characters().count() + index) as u32
    }

    /// `tokenizer.json`: byte-level BPE without merges, so each character is one token.
    fn tokenizer(&self) -> Value {
        let vocab: Map<String, Value> = characters()
            .zip(0u32..)
            .map(|(byte, id)| (byte_level(byte).to_string(), json!(id)))
            .collect();
        let first_added = vocab.len();
        assert!(first_added + self.added.len() <= VOCAB, "{}", self.arch);
        let added: Vec<Value> = self
            .added
            .iter()
            .zip(first_added..)
            .map(|(&(content, special), id)| {
                json!({"id": id, "content": content, "single_word": false, "lstrip": false,
                       "rstrip": false, "normalized": false, "special": special})
            })
            .collect();
        let byte_level = json!({"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": false,
                   "use_regex": true});
        json!({
            "version": "1.0",
            "truncation": null,
            "padding": null,
            "added_tokens": added,
            "normalizer": null,
            "pre_tokenizer": byte_level,
            "post_processor": null,
            "decoder": byte_level,
            "model": {"type": "BPE", "dropout": null, "unk_token": null,
                      "continuing_subword_prefix": null, "end_of_word_suffix": null,
                      "fuse_unk": false, "byte_fallback": false, "ignore_merges": false,
                      "vocab": vocab, "merges": []},
        })
    }
}

/// Removes a config's special token ids, its text model's too.
fn forget_special_ids(config: &mut Value) {
    let Some(config) = config.as_object_mut() else {
        return;
    };
    for key in ["bos_token_id", "eos_token_id", "pad_token_id"] {
        config.remove(key);
    }
    if let Some(text) = config.get_mut("text_config") {
        forget_special_ids(text);
    }
}

fn write_json(path: &Path, value: &Value) {
    std::fs::write(path, serde_json::to_string_pretty(value).unwrap()).unwrap();
}
