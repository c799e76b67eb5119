//! A response streamed as OpenAI's semantic events, each an SSE `event: <type>` with a
//! `sequence_number`: `response.created`, `response.in_progress`, then per output item
//! `output_item.added`, its content (`content_part.added`, text or reasoning deltas and their
//! `.done`, `content_part.done`; or a call's `function_call_arguments.delta`/`.done`),
//! `output_item.done`; and last `response.completed` (`response.incomplete` at the token limit,
//! `response.failed` when the worker fails mid-stream). A custom tool's call carries its text
//! in `custom_tool_call_input.delta`/`.done` instead of arguments.
//!
//! Text and reasoning items stay open across deltas, and so does a forced custom tool's call,
//! whose input is the answer's text; any other call arrives whole from the worker, so its item
//! opens and closes at once. The final object carries the same items, with the same
//! ids, as the events did. Dropping the stream (the client left) cancels the generation.

use std::collections::VecDeque;

use axum::response::sse::{Event, Sse};
use corral_ipc::{FinishReason, ToolCall, Usage};
use futures_util::stream::Stream;
use serde_json::{Value, json};

use super::object::{OutputItem, ResponseObject, Status, item_id, message_status, output_text};
use super::store::Recorder;
use super::tools::ResponseTools;
use crate::api::backend::{GenerationStream, StreamEvent};
use crate::api::sse::{Relay, SseEvent, relay};

#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Reasoning,
    Message,
    /// The input of the custom tool the request forces.
    CustomInput,
}

/// The text or reasoning item being written.
struct Open {
    kind: Kind,
    id: String,
    text: String,
}

/// The response being streamed.
struct Streamed {
    response: ResponseObject,
    /// Taken when the response ends, so it is stored once.
    recorder: Option<Recorder>,
    sequence: u64,
    output: Vec<OutputItem>,
    open: Option<Open>,
    pending: VecDeque<SseEvent>,
    finished: bool,
    tools: ResponseTools,
}

pub fn response(
    events: GenerationStream,
    response: ResponseObject,
    recorder: Recorder,
    tools: ResponseTools,
) -> Sse<impl Stream<Item = SseEvent> + Send + 'static> {
    let mut streamed = Streamed {
        response,
        recorder: Some(recorder),
        sequence: 0,
        output: Vec::new(),
        open: None,
        pending: VecDeque::new(),
        finished: false,
        tools,
    };
    streamed.lifecycle("response.created");
    streamed.lifecycle("response.in_progress");
    relay(events, streamed)
}

impl Relay for Streamed {
    fn ready(&mut self) -> Option<SseEvent> {
        self.pending.pop_front()
    }

    fn finished(&self) -> bool {
        self.finished
    }

    fn handle(&mut self, event: Option<StreamEvent>) {
        match event {
            Some(StreamEvent::Delta {
                text,
                reasoning,
                tool_calls,
                ..
            }) => {
                if !reasoning.is_empty() {
                    self.write(Kind::Reasoning, &reasoning);
                }
                if !text.is_empty() {
                    self.write(self.text_kind(), &text);
                }
                for call in tool_calls {
                    self.call(call);
                }
            }
            Some(StreamEvent::Done {
                finish_reason,
                usage,
                ..
            }) => self.done(finish_reason, usage),
            Some(StreamEvent::Failed { message }) => self.fail(message),
            None => self.fail("the worker ended the request without finishing it".to_owned()),
        }
    }
}

impl Streamed {
    /// What the answer's text is: a message, or a forced custom tool's input.
    fn text_kind(&self) -> Kind {
        if self.tools.forced.is_some() {
            Kind::CustomInput
        } else {
            Kind::Message
        }
    }

    fn emit(&mut self, kind: &'static str, mut payload: Value) {
        payload["type"] = json!(kind);
        payload["sequence_number"] = json!(self.sequence);
        self.sequence += 1;
        self.pending
            .push_back(Event::default().event(kind).json_data(payload));
    }

    fn lifecycle(&mut self, kind: &'static str) {
        let response = serde_json::to_value(&self.response).unwrap_or(Value::Null);
        self.emit(kind, json!({"response": response}));
    }

    fn write(&mut self, kind: Kind, delta: &str) {
        if self.open.as_ref().is_some_and(|open| open.kind != kind) {
            self.close("completed");
        }
        if self.open.is_none() {
            self.open_item(kind);
        }
        let index = self.output.len();
        let Some(open) = self.open.as_mut() else {
            return;
        };
        open.text.push_str(delta);
        let mut payload = json!({
            "item_id": open.id, "output_index": index, "content_index": 0, "delta": delta,
        });
        let event = match kind {
            Kind::Message => {
                payload["logprobs"] = json!([]);
                "response.output_text.delta"
            }
            Kind::Reasoning => "response.reasoning_text.delta",
            Kind::CustomInput => {
                let payload = json!({"item_id": open.id, "output_index": index, "delta": delta});
                return self.emit("response.custom_tool_call_input.delta", payload);
            }
        };
        self.emit(event, payload);
    }

    fn open_item(&mut self, kind: Kind) {
        let (id, item, part) = match kind {
            Kind::Message => {
                let id = item_id("msg");
                let item = json!({
                    "type": "message", "id": id, "role": "assistant",
                    "status": "in_progress", "content": [],
                });
                (id, item, json!(output_text(String::new())))
            }
            Kind::Reasoning => {
                let id = item_id("rs");
                let item = json!({
                    "type": "reasoning", "id": id, "summary": [], "content": [],
                    "status": "in_progress",
                });
                (id, item, json!({"type": "reasoning_text", "text": ""}))
            }
            Kind::CustomInput => return self.open_custom_input(),
        };
        let index = self.output.len();
        self.emit(
            "response.output_item.added",
            json!({"output_index": index, "item": item}),
        );
        self.emit(
            "response.content_part.added",
            json!({"item_id": id, "output_index": index, "content_index": 0, "part": part}),
        );
        self.open = Some(Open {
            kind,
            id,
            text: String::new(),
        });
    }

    /// The forced custom tool's call, open for its input; it has no content parts.
    fn open_custom_input(&mut self) {
        let Some(forced) = &self.tools.forced else {
            return;
        };
        let id = item_id("ctc");
        let mut item = json!(OutputItem::forced_call(id.clone(), forced, String::new()));
        item["status"] = json!("in_progress");
        let index = self.output.len();
        self.emit(
            "response.output_item.added",
            json!({"output_index": index, "item": item}),
        );
        self.open = Some(Open {
            kind: Kind::CustomInput,
            id,
            text: String::new(),
        });
    }

    fn close_custom_input(&mut self, id: String, input: String) {
        let Some(forced) = &self.tools.forced else {
            return;
        };
        let item = OutputItem::forced_call(id.clone(), forced, input.clone());
        let index = self.output.len();
        self.emit(
            "response.custom_tool_call_input.done",
            json!({"item_id": id, "output_index": index, "input": input}),
        );
        self.item_done(item);
    }

    /// Ends the open item, if any, with its whole text.
    fn close(&mut self, status: &'static str) {
        let Some(Open { kind, id, text }) = self.open.take() else {
            return;
        };
        let index = self.output.len();
        let (done, part, item) = match kind {
            Kind::Message => (
                "response.output_text.done",
                json!(output_text(text.clone())),
                OutputItem::message(id.clone(), text.clone(), status),
            ),
            Kind::Reasoning => (
                "response.reasoning_text.done",
                json!({"type": "reasoning_text", "text": text}),
                OutputItem::reasoning(id.clone(), text.clone()),
            ),
            Kind::CustomInput => return self.close_custom_input(id, text),
        };
        let mut payload = json!({
            "item_id": id, "output_index": index, "content_index": 0, "text": text,
        });
        if kind == Kind::Message {
            payload["logprobs"] = json!([]);
        }
        self.emit(done, payload);
        self.emit(
            "response.content_part.done",
            json!({"item_id": id, "output_index": index, "content_index": 0, "part": part}),
        );
        self.item_done(item);
    }

    fn item_done(&mut self, item: OutputItem) {
        let index = self.output.len();
        self.emit(
            "response.output_item.done",
            json!({"output_index": index, "item": item}),
        );
        self.output.push(item);
    }

    fn call(&mut self, call: ToolCall) {
        self.close("completed");
        let item = OutputItem::call(call, &self.tools);
        // A function's call carries `arguments`, a custom tool's its `input`.
        let (id, field, text, [delta, done]) = match &item {
            OutputItem::FunctionCall { id, arguments, .. } => (
                id,
                "arguments",
                arguments,
                [
                    "response.function_call_arguments.delta",
                    "response.function_call_arguments.done",
                ],
            ),
            OutputItem::CustomToolCall { id, input, .. } => (
                id,
                "input",
                input,
                [
                    "response.custom_tool_call_input.delta",
                    "response.custom_tool_call_input.done",
                ],
            ),
            OutputItem::Message { .. } | OutputItem::Reasoning { .. } => return,
        };
        let (id, text) = (id.clone(), text.clone());
        let index = self.output.len();
        let mut added = json!(item);
        added[field] = json!("");
        added["status"] = json!("in_progress");
        self.emit(
            "response.output_item.added",
            json!({"output_index": index, "item": added}),
        );
        self.emit(
            delta,
            json!({"item_id": id, "output_index": index, "delta": text}),
        );
        self.emit(
            done,
            json!({"item_id": id, "output_index": index, field: text}),
        );
        self.item_done(item);
    }

    fn done(&mut self, reason: FinishReason, usage: Usage) {
        self.close(message_status(reason));
        // OpenAI answers with a message unless the model called tools.
        let answered = self
            .output
            .iter()
            .any(|item| !matches!(item, OutputItem::Reasoning { .. }));
        if !answered {
            self.open_item(self.text_kind());
            self.close(message_status(reason));
        }
        let output = std::mem::take(&mut self.output);
        self.response.finish(output, reason, usage);
        let kind = if self.response.status == Status::Incomplete {
            "response.incomplete"
        } else {
            "response.completed"
        };
        self.end(kind);
    }

    fn fail(&mut self, message: String) {
        tracing::warn!(%message, "response failed mid-stream");
        self.close("incomplete");
        let output = std::mem::take(&mut self.output);
        self.response.fail(output, message);
        self.end("response.failed");
    }

    /// Stores the ended response, then sends it in its last event.
    fn end(&mut self, kind: &'static str) {
        if let Some(recorder) = self.recorder.take() {
            recorder.record(&self.response);
        }
        self.lifecycle(kind);
        self.finished = true;
    }
}
