//! A model's chat template: OpenAI-style messages in, the prompt text the model expects out.
//!
//! Hugging Face models ship the template as Jinja, in `chat_template.jinja` (newer layout, wins)
//! or in `tokenizer_config.json`'s `chat_template` (one string, or a list of named templates of
//! which `default` is used). It is compiled once at load, so a broken template fails the model's
//! start-up with the file named, not its first request. Rendering happens in an environment
//! configured like transformers' (see `environment.rs`), with the variables transformers passes:
//! `messages`, `tools` (none when absent), `add_generation_prompt`, `bos_token`, `eos_token`;
//! and the tools once more as `xml_tools`, bare functions, which is where SmolLM3's template
//! reads them (its model card calls `apply_chat_template(messages, xml_tools=tools)`), and as
//! `custom_tools`, from which alone Llama 4's pythonic template writes its tool list (Llama 3's
//! templates read it as `tools` too).

mod environment;
mod pyjson;
mod strftime;

use std::error::Error as _;
use std::io;
use std::path::{Path, PathBuf};

use minijinja::{Environment, Value, context};

use crate::model_json::{
    ChatTemplateField, JsonFileError, SpecialToken, TokenizerConfig, read_optional,
};
use environment::{
    RaisedByTemplate, generation_blocks_as_plain, hugging_face_environment,
    string_line_continuations_joined,
};

const JINJA_FILE: &str = "chat_template.jinja";
/// The template's name inside the environment, which minijinja's messages cite with a line
/// number. Not the file's path: in `tokenizer_config.json` that line is not the file's line.
const TEMPLATE_NAME: &str = "chat_template";

#[derive(Debug, thiserror::Error)]
pub enum ChatTemplateError {
    #[error(transparent)]
    ConfigFile(#[from] JsonFileError),
    #[error("cannot read {path}")]
    Read {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("{path} has several chat templates and none is named \"default\"")]
    NoDefault { path: PathBuf },
    #[error("the chat template in {path} does not parse")]
    Parse {
        path: PathBuf,
        #[source]
        source: minijinja::Error,
    },
    /// The template rejected the conversation through `raise_exception`: the request's fault.
    #[error("chat template raised: {0}")]
    Raised(String),
    #[error("the chat template from {path} failed to render: {source}")]
    Render {
        path: PathBuf,
        #[source]
        source: minijinja::Error,
    },
}

pub struct ChatTemplate {
    env: Environment<'static>,
    /// Where the template came from, for errors.
    path: PathBuf,
    /// The Jinja text, read by the format detection (tool-call syntax, thinking).
    source: String,
    bos_token: Option<String>,
    eos_token: Option<String>,
    /// The template fails on an assistant turn whose `content` is null, as the OpenAI SDK sends
    /// a tool-calling turn (gpt-oss's tests `"…" in message.content`): such content is passed
    /// as `""`, as llama.cpp does for templates it finds need it.
    needs_string_content: bool,
}

impl std::fmt::Debug for ChatTemplate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChatTemplate")
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

impl ChatTemplate {
    /// The template of the model in `dir`, or `None` when it has none (a base model).
    pub fn from_model_dir(dir: &Path) -> Result<Option<Self>, ChatTemplateError> {
        let config_path = dir.join(TokenizerConfig::FILE);
        let config: TokenizerConfig = read_optional(&config_path)?.unwrap_or_default();
        let jinja_path = dir.join(JINJA_FILE);
        let (source, path) = match std::fs::read_to_string(&jinja_path) {
            Ok(source) => (source, jinja_path),
            Err(err) if err.kind() == io::ErrorKind::NotFound => {
                match pick_template(config.chat_template, &config_path)? {
                    Some(source) => (source, config_path),
                    None => return Ok(None),
                }
            }
            Err(source) => {
                return Err(ChatTemplateError::Read {
                    path: jinja_path,
                    source,
                });
            }
        };
        let token = |t: Option<SpecialToken>| t.map(|t| t.text().to_owned());
        Self::new(
            source,
            path,
            token(config.bos_token),
            token(config.eos_token),
        )
        .map(Some)
    }

    /// Compiles `source`; `path` names it in errors.
    pub fn new(
        source: String,
        path: PathBuf,
        bos_token: Option<String>,
        eos_token: Option<String>,
    ) -> Result<Self, ChatTemplateError> {
        let mut env = hugging_face_environment();
        env.add_template_owned(
            TEMPLATE_NAME,
            string_line_continuations_joined(&generation_blocks_as_plain(&source)).into_owned(),
        )
        .map_err(|source| ChatTemplateError::Parse {
            path: path.clone(),
            source,
        })?;
        let mut template = Self {
            env,
            path,
            source,
            bos_token,
            eos_token,
            needs_string_content: false,
        };
        template.needs_string_content = template.fails_on_null_content();
        Ok(template)
    }

    /// Whether a tool-calling assistant turn renders with `content: ""` but not with `null`.
    fn fails_on_null_content(&self) -> bool {
        let conversation = |content: serde_json::Value| {
            [
                serde_json::json!({"role": "user", "content": "Hi"}),
                serde_json::json!({"role": "assistant", "content": content, "tool_calls": [
                    {"id": "call_0", "type": "function",
                     "function": {"name": "probe", "arguments": {}}}]}),
                serde_json::json!({"role": "tool", "tool_call_id": "call_0", "content": "{}"}),
            ]
        };
        let renders = |messages: &[serde_json::Value]| {
            self.render_as_given(messages, None, true, None).is_ok()
        };
        !renders(&conversation(serde_json::Value::Null))
            && renders(&conversation(serde_json::Value::from("")))
    }

    /// The template's Jinja source.
    pub fn source(&self) -> &str {
        &self.source
    }

    /// Renders the conversation. `messages` are passed as given (content parts, tool calls and
    /// all); the template decides what it understands.
    pub fn render(
        &self,
        messages: &[serde_json::Value],
        tools: Option<&serde_json::Value>,
        add_generation_prompt: bool,
    ) -> Result<String, ChatTemplateError> {
        self.render_with(messages, tools, add_generation_prompt, None)
    }

    /// As `render`, with extra variables (`chat_template_kwargs`: `enable_thinking`,
    /// `reasoning_effort`...). The standard variables win over extras of the same name.
    pub fn render_with(
        &self,
        messages: &[serde_json::Value],
        tools: Option<&serde_json::Value>,
        add_generation_prompt: bool,
        extra: Option<&serde_json::Map<String, serde_json::Value>>,
    ) -> Result<String, ChatTemplateError> {
        if !self.needs_string_content {
            return self.render_as_given(messages, tools, add_generation_prompt, extra);
        }
        let messages: Vec<serde_json::Value> = messages
            .iter()
            .map(|message| match message.get("content") {
                Some(serde_json::Value::Null) => {
                    let mut message = message.clone();
                    message["content"] = serde_json::Value::from("");
                    message
                }
                _ => message.clone(),
            })
            .collect();
        self.render_as_given(&messages, tools, add_generation_prompt, extra)
    }

    fn render_as_given(
        &self,
        messages: &[serde_json::Value],
        tools: Option<&serde_json::Value>,
        add_generation_prompt: bool,
        extra: Option<&serde_json::Map<String, serde_json::Value>>,
    ) -> Result<String, ChatTemplateError> {
        // A token the tokenizer config lacks is left undefined (renders as ""), as in
        // transformers, where only the tokens that are set are passed.
        let token = |t: &Option<String>| t.as_deref().map_or(Value::UNDEFINED, Value::from);
        let ctx = context! {
            messages => Value::from_serialize(messages),
            tools => tools.map(Value::from_serialize),
            xml_tools => tools.map_or(Value::UNDEFINED, bare_functions),
            custom_tools => tools.map_or(Value::UNDEFINED, Value::from_serialize),
            add_generation_prompt,
            bos_token => token(&self.bos_token),
            eos_token => token(&self.eos_token),
            ..extra.map_or(Value::UNDEFINED, Value::from_serialize)
        };
        self.env
            .get_template(TEMPLATE_NAME)
            .and_then(|template| template.render(ctx))
            .map_err(|err| self.render_error(err))
    }

    fn render_error(&self, err: minijinja::Error) -> ChatTemplateError {
        let mut cause: Option<&(dyn std::error::Error + 'static)> = err.source();
        while let Some(inner) = cause {
            if let Some(RaisedByTemplate(message)) = inner.downcast_ref() {
                return ChatTemplateError::Raised(message.clone());
            }
            cause = inner.source();
        }
        ChatTemplateError::Render {
            path: self.path.clone(),
            source: err,
        }
    }
}

/// OpenAI's `{"type": "function", "function": {...}}` tools as the functions alone, as SmolLM3's
/// template lists them.
fn bare_functions(tools: &serde_json::Value) -> Value {
    let functions: Vec<&serde_json::Value> = tools
        .as_array()
        .into_iter()
        .flatten()
        .map(|tool| tool.get("function").unwrap_or(tool))
        .collect();
    Value::from_serialize(functions)
}

/// The template text from `tokenizer_config.json`'s `chat_template` field, if it has one.
fn pick_template(
    field: Option<ChatTemplateField>,
    path: &Path,
) -> Result<Option<String>, ChatTemplateError> {
    match field {
        None => Ok(None),
        Some(ChatTemplateField::Single(source)) => Ok(Some(source)),
        Some(ChatTemplateField::Named(named)) => named
            .into_iter()
            .find(|t| t.name == "default")
            .map(|t| Some(t.template))
            .ok_or_else(|| ChatTemplateError::NoDefault {
                path: path.to_owned(),
            }),
    }
}

#[cfg(test)]
mod tests;
