//! The streaming output parser: generated text in, in arbitrary chunks; content, reasoning and
//! whole tool calls out, in order.
//!
//! A marker can be split across chunks anywhere, so the parser holds back a tail of text that
//! could still become one and releases it once it cannot (as `stop_strings` does). A tool call
//! is buffered from its opening marker until it is decided: a valid call comes out whole, and a
//! malformed one comes out as content with its exact text, never half-parsed. Every decision
//! depends only on the text, never on how it was chunked, so a stream and a single push agree.
//!
//! Text is kept in one buffer with a read offset, compacted once per push, and each scan starts
//! where the previous one stopped, so the work is linear in the output whatever the chunking.

use serde_json::Value;

use super::calls;
use super::deepseek_call;
use super::format::ToolFormat;
use super::fragment::{Fragment, Fragments, ToolCall};
use super::gemma4_call;
use super::glm_call;
use super::harmony::HarmonyParser;
use super::kimi_call;
use super::markers::{
    DEEPSEEK_CALLS_BEGIN, DEEPSEEK_CALLS_END, FUNCTOOLS, KIMI_SECTION_BEGIN, KIMI_SECTION_END,
};
use super::markers::{
    FUNCTION_CLOSE, FUNCTION_OPEN, GEMMA4_CALL_CLOSE, GEMMA4_CALL_OPEN, GRANITE_TOOL_CALL,
    PYTHON_START, PYTHON_TAG, PYTHONIC_CALL_CLOSE, PYTHONIC_CALL_OPEN, RESPONSE_CLOSE,
    RESPONSE_OPEN, TOOL_CALL_CLOSE, TOOL_CALL_OPEN, TOOL_CALLS, held_tail,
};
use super::pythonic_call;
use super::reasoning::ReasoningStart;
use super::xml_call::{self, ParamTypes};

#[derive(Debug, Clone, Copy)]
pub struct ParserConfig<'a> {
    pub format: ToolFormat,
    /// Whether the request offered tools; without, tool syntax is plain content.
    pub parse_tools: bool,
    pub reasoning: ReasoningStart,
    /// The request's OpenAI tool objects, for parameter types.
    pub tools: &'a [Value],
}

/// A call that runs to a closing marker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Block {
    /// `<tool_call>` ... `</tool_call>`.
    ToolCall,
    /// Qwen3-Coder's `<function=...>` ... `</function>` without the wrapper.
    Function,
    /// Gemma 4's `<|tool_call>` ... `<tool_call|>`.
    Gemma4,
    /// LFM2's `<|tool_call_start|>[...]<|tool_call_end|>`, several calls in one block.
    Pythonic,
    /// DeepSeek's `<｜tool▁calls▁begin｜>` ... `<｜tool▁calls▁end｜>`, several calls.
    DeepSeek,
    /// Kimi K2's `<|tool_calls_section_begin|>` ... `<|tool_calls_section_end|>`, several calls.
    Kimi,
}

impl Block {
    fn open(self) -> &'static str {
        match self {
            Self::ToolCall => TOOL_CALL_OPEN,
            Self::Function => FUNCTION_OPEN,
            Self::Gemma4 => GEMMA4_CALL_OPEN,
            Self::Pythonic => PYTHONIC_CALL_OPEN,
            Self::DeepSeek => DEEPSEEK_CALLS_BEGIN,
            Self::Kimi => KIMI_SECTION_BEGIN,
        }
    }

    fn close(self) -> &'static str {
        match self {
            Self::ToolCall => TOOL_CALL_CLOSE,
            Self::Function => FUNCTION_CLOSE,
            Self::Gemma4 => GEMMA4_CALL_CLOSE,
            Self::Pythonic => PYTHONIC_CALL_CLOSE,
            Self::DeepSeek => DEEPSEEK_CALLS_END,
            Self::Kimi => KIMI_SECTION_END,
        }
    }
}

/// Calls that run to the end of the output.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Tail {
    Llama,
    /// Llama 4's list of Python calls, bare or between `<|python_start|>` and `<|python_end|>`.
    Llama4,
    Mistral,
    Granite,
    /// Phi-4-mini's `functools[...]` lists and `<|tool_call|>` blocks.
    Phi4,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// Output start, when it may open with whitespace and `<think>`.
    MaybeThink,
    Thinking,
    /// Whitespace is dropped, then the parser goes on in `Next`.
    SkipSpace(Next),
    /// Start of the answer: Llama's bare `{` call and Llama 4's bare `[` list of calls are
    /// only recognized here.
    ContentStart,
    Text,
    Block(Block),
    Tail(Tail),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Next {
    Thinking,
    ContentStart,
    Text,
}

impl From<Next> for Mode {
    fn from(next: Next) -> Self {
        match next {
            Next::Thinking => Mode::Thinking,
            Next::ContentStart => Mode::ContentStart,
            Next::Text => Mode::Text,
        }
    }
}

/// One sequence's parser.
#[derive(Debug)]
pub struct OutputParser {
    format: ToolFormat,
    parse_tools: bool,
    /// What opens and closes the family's thinking.
    thinking: (&'static str, &'static str),
    /// The markers that open a call in content; none when tools are not parsed.
    openers: &'static [&'static str],
    types: ParamTypes,
    mode: Mode,
    /// `buf[start..]` is received and undecided; the rest is dropped at the end of each push.
    buf: String,
    start: usize,
    /// How far past `start` the current mode has already looked, so no byte is scanned twice.
    scanned: usize,
    malformed: Option<String>,
    /// A Granite answer opened with `<response>`, whose `</response>` is dropped too.
    in_response: bool,
    /// gpt-oss's output, which is messages on channels rather than text with markers in it, has
    /// a parser of its own that does the whole job.
    harmony: Option<HarmonyParser>,
}

impl OutputParser {
    pub fn new(config: ParserConfig<'_>) -> Self {
        let mode = match config.reasoning {
            ReasoningStart::Off => Mode::ContentStart,
            ReasoningStart::Maybe => Mode::MaybeThink,
            ReasoningStart::Inside => Mode::SkipSpace(Next::Thinking),
        };
        let openers = if config.parse_tools {
            openers(config.format)
        } else {
            &[]
        };
        // Every format's `<tool_call>` block may hold XML, so the types are read for all.
        let types = if config.parse_tools {
            ParamTypes::from_tools(config.tools)
        } else {
            ParamTypes::default()
        };
        Self {
            format: config.format,
            parse_tools: config.parse_tools,
            thinking: config.format.thinking_markers(),
            openers,
            types,
            mode,
            buf: String::new(),
            start: 0,
            scanned: 0,
            malformed: None,
            in_response: false,
            harmony: (config.format == ToolFormat::Harmony)
                .then(|| HarmonyParser::new(config.parse_tools)),
        }
    }

    /// Adds generated text; returns what it decides, possibly nothing.
    pub fn push(&mut self, text: &str) -> Vec<Fragment> {
        let mut out = Fragments::default();
        if let Some(harmony) = &mut self.harmony {
            harmony.push(text, &mut out);
            return out.into_vec();
        }
        self.buf.push_str(text);
        while self.step(&mut out) {}
        if self.start > 0 {
            self.buf.drain(..self.start);
            self.start = 0;
        }
        out.into_vec()
    }

    /// Decides what is still held, at the end of generation: an unterminated reasoning block
    /// stays reasoning, an unterminated call is parsed as it stands.
    pub fn finish(&mut self) -> Vec<Fragment> {
        let mut out = Fragments::default();
        if let Some(harmony) = &mut self.harmony {
            harmony.finish(&mut out);
            return out.into_vec();
        }
        let rest = std::mem::take(&mut self.buf);
        let rest = rest.get(self.start..).unwrap_or("");
        match self.mode {
            Mode::Thinking => out.reasoning(rest),
            Mode::Block(block) => {
                let parsed = self.parse_block(block, rest);
                accept(&mut out, &mut self.malformed, rest, parsed);
            }
            Mode::Tail(tail) => self.decide_tail(&mut out, tail, rest),
            Mode::MaybeThink | Mode::SkipSpace(_) | Mode::ContentStart | Mode::Text => {
                out.content(rest);
            }
        }
        self.start = 0;
        self.set_mode(Mode::Text);
        out.into_vec()
    }

    /// Whether the output is inside the model's reasoning block now.
    pub fn is_reasoning(&self) -> bool {
        if let Some(harmony) = &self.harmony {
            return harmony.is_reasoning();
        }
        matches!(self.mode, Mode::Thinking | Mode::SkipSpace(Next::Thinking))
    }

    /// Why the last candidate call that was returned as text did not parse, for a log line.
    pub fn malformed(&self) -> Option<&str> {
        if let Some(harmony) = &self.harmony {
            return harmony.malformed();
        }
        self.malformed.as_deref()
    }

    fn pending(&self) -> &str {
        self.buf.get(self.start..).unwrap_or("")
    }

    fn set_mode(&mut self, mode: Mode) {
        self.mode = mode;
        self.scanned = 0;
    }

    /// Takes one decision on the pending text; false when the next one needs more text.
    fn step(&mut self, out: &mut Fragments) -> bool {
        match self.mode {
            Mode::MaybeThink => self.maybe_think(),
            Mode::Thinking => self.thinking(out),
            Mode::SkipSpace(next) => {
                let pending = self.pending();
                let space = pending.len() - pending.trim_start().len();
                self.start += space;
                if self.pending().is_empty() {
                    return false;
                }
                self.set_mode(next.into());
                true
            }
            Mode::ContentStart => self.content_start(),
            Mode::Text => self.text(out),
            Mode::Block(block) => self.block(out, block),
            Mode::Tail(_) => false,
        }
    }

    /// Leading whitespace then `<think>` (or the family's opening marker) opens reasoning;
    /// anything else is the answer, its whitespace included.
    fn maybe_think(&mut self) -> bool {
        let open = self.thinking.0;
        let space = self.leading_space();
        let text = &self.pending()[space..];
        if text.starts_with(open) {
            self.start += space + open.len();
            self.set_mode(Mode::SkipSpace(Next::Thinking));
        } else if text.is_empty() || open.starts_with(text) {
            return false;
        } else {
            self.set_mode(Mode::ContentStart);
        }
        true
    }

    /// Reasoning streams as it comes, less a tail that may be the start of `</think>` (or the
    /// family's closing marker). Kimi K2 may end its thinking by opening its calls without
    /// `</think>`: the section then ends the reasoning and is read as calls.
    fn thinking(&mut self, out: &mut Fragments) -> bool {
        let close = self.thinking.1;
        let section = if self.format == ToolFormat::Kimi && self.parse_tools {
            KIMI_SECTION_BEGIN
        } else {
            close
        };
        let pending = self.pending();
        let ends = [close, section].map(|end| pending.find(end).map(|at| (at, end)));
        if let Some((at, end)) = ends.into_iter().flatten().min() {
            out.reasoning(&pending[..at]);
            if end == close {
                self.start += at + close.len();
                self.set_mode(Mode::SkipSpace(Next::ContentStart));
            } else {
                self.start += at;
                self.set_mode(Mode::Text);
            }
            return true;
        }
        let release = pending.len() - held_tail(pending, &[close, section]);
        out.reasoning(&pending[..release]);
        self.start += release;
        false
    }

    /// Llama writes a call as the whole answer, a bare object or one after `<|python_tag|>`;
    /// Llama 4 a bare list of calls or one after `<|python_start|>`.
    /// Granite 3.3 wraps the answer that follows its thinking in `<response>`.
    fn content_start(&mut self) -> bool {
        if self.format == ToolFormat::Granite && !self.in_response {
            let text = self.pending();
            if text.starts_with(RESPONSE_OPEN) {
                self.start += RESPONSE_OPEN.len();
                self.in_response = true;
            } else if RESPONSE_OPEN.starts_with(text) {
                return false;
            }
        }
        let bare_call = match self.format {
            ToolFormat::Llama3Json => Some(('{', PYTHON_TAG, Tail::Llama)),
            ToolFormat::Llama4Pythonic => Some(('[', PYTHON_START, Tail::Llama4)),
            _ => None,
        };
        if let Some((open, marker, tail)) = bare_call.filter(|_| self.parse_tools) {
            let space = self.leading_space();
            let text = &self.pending()[space..];
            if text.starts_with(open) || text.starts_with(marker) {
                self.set_mode(Mode::Tail(tail));
                return true;
            }
            if text.is_empty() || marker.starts_with(text) {
                return false;
            }
        }
        self.set_mode(Mode::Text);
        true
    }

    fn text(&mut self, out: &mut Fragments) -> bool {
        let pending = self.pending();
        let closer: &[&str] = if self.in_response {
            &[RESPONSE_CLOSE]
        } else {
            &[]
        };
        let opener = self
            .openers
            .iter()
            .chain(closer)
            .filter_map(|&marker| Some((pending.find(marker)?, marker)))
            .min();
        let Some((at, marker)) = opener else {
            let held = held_tail(pending, self.openers).max(held_tail(pending, closer));
            let release = pending.len() - held;
            out.content(&pending[..release]);
            self.start += release;
            return false;
        };
        out.content(&pending[..at]);
        self.start += at;
        if marker == RESPONSE_CLOSE {
            self.start += RESPONSE_CLOSE.len();
            self.in_response = false;
            self.set_mode(Mode::Text);
            return true;
        }
        self.set_mode(match marker {
            TOOL_CALL_OPEN => Mode::Block(Block::ToolCall),
            FUNCTION_OPEN => Mode::Block(Block::Function),
            GEMMA4_CALL_OPEN => Mode::Block(Block::Gemma4),
            PYTHONIC_CALL_OPEN => Mode::Block(Block::Pythonic),
            DEEPSEEK_CALLS_BEGIN => Mode::Block(Block::DeepSeek),
            KIMI_SECTION_BEGIN => Mode::Block(Block::Kimi),
            PYTHON_TAG => Mode::Tail(Tail::Llama),
            FUNCTOOLS => Mode::Tail(Tail::Phi4),
            GRANITE_TOOL_CALL if self.format == ToolFormat::Phi4Mini => Mode::Tail(Tail::Phi4),
            GRANITE_TOOL_CALL => Mode::Tail(Tail::Granite),
            _ => Mode::Tail(Tail::Mistral),
        });
        true
    }

    /// Buffers a block until its closing marker, then decides it.
    fn block(&mut self, out: &mut Fragments, block: Block) -> bool {
        let close = block.close();
        let pending = self.pending();
        let from = floor_char_boundary(pending, self.scanned.max(block.open().len()));
        let Some(at) = pending[from..].find(close).map(|at| from + at) else {
            // The next search starts where a closing marker split here could begin.
            self.scanned = pending.len().saturating_sub(close.len() - 1);
            return false;
        };
        let end = at + close.len();
        let candidate = &self.buf[self.start..self.start + end];
        let parsed = self.parse_block(block, candidate);
        let accepted = accept(out, &mut self.malformed, candidate, parsed);
        self.start += end;
        // Whitespace between calls is dropped; after a rejected one it is content as written.
        self.set_mode(if accepted {
            Mode::SkipSpace(Next::Text)
        } else {
            Mode::Text
        });
        true
    }

    /// A block's candidate text, from its opening marker to its closing one (or to the end of
    /// the output, at finish), as the calls it holds: one, or LFM2's list.
    fn parse_block(&self, block: Block, candidate: &str) -> Result<Vec<ToolCall>, String> {
        let one = |call: Result<ToolCall, String>| call.map(|call| vec![call]);
        match block {
            Block::ToolCall => {
                let body = block_body(candidate, block);
                one(if self.format == ToolFormat::Glm {
                    glm_call::parse_call(body, &self.types)
                } else {
                    calls::parse_block(body, &self.types)
                })
            }
            Block::Function => one(xml_call::parse_function(candidate, &self.types)),
            Block::Gemma4 => one(gemma4_call::parse_call(block_body(candidate, block))),
            Block::Pythonic => pythonic_call::parse_calls(block_body(candidate, block)),
            Block::DeepSeek => deepseek_call::parse_calls(block_body(candidate, block)),
            Block::Kimi => kimi_call::parse_calls(block_body(candidate, block)),
        }
    }

    fn decide_tail(&mut self, out: &mut Fragments, tail: Tail, text: &str) {
        match tail {
            Tail::Llama | Tail::Llama4 => {
                let parsed = if tail == Tail::Llama {
                    calls::parse_llama(text)
                } else {
                    pythonic_call::parse_llama4(text)
                };
                accept(out, &mut self.malformed, text, parsed);
            }
            Tail::Mistral | Tail::Granite | Tail::Phi4 => {
                let (calls, rejected) = match tail {
                    Tail::Mistral => calls::parse_mistral(text),
                    Tail::Granite => calls::parse_granite(text),
                    _ => calls::parse_phi4(text),
                };
                calls.into_iter().for_each(|call| out.call(call));
                if let Some((offset, why)) = rejected {
                    out.content(text.get(offset..).unwrap_or(""));
                    self.malformed = Some(why);
                }
            }
        }
    }

    /// The length of the pending text's leading whitespace, scanning only what is new.
    fn leading_space(&mut self) -> usize {
        let pending = self.pending();
        let from = floor_char_boundary(pending, self.scanned);
        let rest = &pending[from..];
        self.scanned = from + rest.len() - rest.trim_start().len();
        self.scanned
    }
}

/// The markers that open a call in each format's content.
fn openers(format: ToolFormat) -> &'static [&'static str] {
    match format {
        ToolFormat::Hermes | ToolFormat::Glm => &[TOOL_CALL_OPEN],
        // Harmony's calls are messages, which its own parser reads.
        ToolFormat::Harmony => &[],
        ToolFormat::QwenXml => &[TOOL_CALL_OPEN, FUNCTION_OPEN],
        ToolFormat::Llama3Json => &[PYTHON_TAG],
        ToolFormat::Mistral | ToolFormat::MistralArgs | ToolFormat::MistralThink => &[TOOL_CALLS],
        ToolFormat::Granite => &[GRANITE_TOOL_CALL],
        ToolFormat::Phi4Mini => &[FUNCTOOLS, GRANITE_TOOL_CALL],
        ToolFormat::Gemma4 => &[GEMMA4_CALL_OPEN],
        ToolFormat::Pythonic => &[PYTHONIC_CALL_OPEN],
        ToolFormat::DeepSeekV31 | ToolFormat::DeepSeekV3 => &[DEEPSEEK_CALLS_BEGIN],
        ToolFormat::Kimi => &[KIMI_SECTION_BEGIN],
        // Llama 4's calls are the whole answer, read from its start.
        ToolFormat::Llama4Pythonic => &[],
    }
}

/// A block's text between its markers; at finish the model may have stopped partway through
/// the closing one.
fn block_body(candidate: &str, block: Block) -> &str {
    let (open, close) = (block.open(), block.close());
    let body = candidate.strip_prefix(open).unwrap_or(candidate);
    body.strip_suffix(close)
        .unwrap_or_else(|| &body[..body.len() - held_tail(body, &[close])])
}

/// Emits the parsed calls, or the candidate's text with the reason kept; says which.
fn accept(
    out: &mut Fragments,
    malformed: &mut Option<String>,
    candidate: &str,
    parsed: Result<Vec<ToolCall>, String>,
) -> bool {
    match parsed {
        Ok(calls) => {
            calls.into_iter().for_each(|call| out.call(call));
            true
        }
        Err(why) => {
            out.content(candidate);
            *malformed = Some(why);
            false
        }
    }
}

/// `index`, moved back to the start of the character it falls in (and into `text`).
fn floor_char_boundary(text: &str, index: usize) -> usize {
    (0..=index.min(text.len()))
        .rev()
        .find(|&i| text.is_char_boundary(i))
        .unwrap_or(0)
}
