//! Canonical answers as Responses objects, and canonical streams as Responses events.
//!
//! An answer's first choice becomes the output: a `reasoning` item with its reasoning as a
//! `summary_text` when the model reasoned (Anthropic's thinking, a reasoning server's
//! `reasoning_content`), and Claude's signed thinking blocks sealed as its `encrypted_content`
//! (see [`super::is_claude_thinking`]), a `message` item
//! with its text (`output_text`) or refusal (`refusal`) part, then a `function_call` item per
//! tool call.
//! `finish_reason: length` is status `incomplete` with `max_output_tokens` as the reason,
//! `content_filter` is `incomplete` with `content_filter`; anything else is `completed`.
//!
//! A stream is `response.created`, `response.in_progress`, then per output item
//! `response.output_item.added`, its parts and deltas (`response.reasoning_summary_part.added`,
//! `response.reasoning_summary_text.delta`, ... `.done`; `response.content_part.added`,
//! `response.output_text.delta`, `response.refusal.delta`, ... `.done`;
//! `response.function_call_arguments.delta` / `.done`), `response.output_item.done`, and at the
//! end `response.completed` (or `response.incomplete`) with the whole response; a failure after
//! it began is `response.failed` then `error`, the item the break cut listed in the failed
//! response as `incomplete` and never `.done` (a client would act on a call cut short). A call
//! that begins while the open function call's arguments are not yet whole JSON (a server that
//! interleaves parallel calls) is held and written whole once the open item ends. Every event
//! carries its `sequence_number`.

use serde_json::{Value, json};
use switchyard::chat::{
    ChatChunk, ChatResponse, Content, FinishReason, Message, Role, ToolCall, ToolCallDelta, Usage,
};

use super::decode::Echo;

/// What a response object says beyond the answer: its id and time, and the request's settings.
#[derive(Debug, Clone)]
pub struct Meta {
    /// `resp_...`.
    pub id: String,
    /// Unix seconds.
    pub created_at: u64,
    /// The request's settings, repeated.
    pub echo: Echo,
    /// The response this one continues.
    pub previous_response_id: Option<String>,
    /// Whether the gateway keeps it.
    pub store: bool,
    /// The model the answering target was called as, which signs another dialect's reasoning
    /// (see [`super::seal_reasoning`]); else the model the answer names.
    pub reasoned_by: Option<String>,
}

/// The response object of a whole answer, and the assistant turn it adds to the conversation.
pub fn response_object(meta: &Meta, answer: &ChatResponse) -> (Value, Message) {
    let choice = answer.choices.first();
    let message =
        choice.map_or_else(|| Message { content: None, ..Message::assistant("") }, |c| c.message.clone());
    let refusal = message.extra.get("refusal").and_then(Value::as_str).unwrap_or_default();
    let text = message.text_content().unwrap_or_default();
    let mut output = Vec::new();
    let reasoning = message.extra.get("reasoning_content").and_then(Value::as_str).unwrap_or_default();
    let blocks = message.thinking_blocks();
    let thinking = (!blocks.is_empty()).then(|| super::seal_thinking(blocks));
    if !reasoning.is_empty() || thinking.is_some() {
        let mut item = reasoning_item(&reasoning_item_id(&meta.id, 0), "completed", reasoning);
        let by = meta.reasoned_by.as_deref().unwrap_or(&answer.model);
        let sealed = thinking.unwrap_or_else(|| super::seal_reasoning(by, reasoning));
        item["encrypted_content"] = Value::String(sealed);
        output.push(item);
    }
    if !text.is_empty() || !refusal.is_empty() {
        let part = if refusal.is_empty() { text_part(&text) } else { refusal_part(refusal) };
        output.push(message_item(&format!("msg_{}", meta.id), "completed", vec![part]));
    }
    for (i, call) in message.tool_calls.iter().enumerate() {
        let (custom, name, arguments) = call_parts(call);
        let item = CallItem { id: &call_item_id(&meta.id, i), call_id: &call.id, name: &name, custom };
        output.push(item.write(&meta.echo.tools, &arguments, "completed"));
    }
    let finish = choice.and_then(|c| c.finish_reason.as_ref());
    let turn = Message {
        content: if text.is_empty() { None } else { Some(Content::Text(text)) },
        tool_calls: message.tool_calls.clone(),
        ..Message::assistant("")
    };
    (object(meta, Status::of(finish), output, answer.usage.as_ref(), &answer.model, Value::Null), turn)
}

/// How a response ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Status {
    InProgress,
    Completed,
    /// Cut: `max_output_tokens` or `content_filter`.
    Incomplete(&'static str),
    Failed,
}

impl Status {
    fn of(finish: Option<&FinishReason>) -> Self {
        match finish {
            Some(FinishReason::Length) => Status::Incomplete("max_output_tokens"),
            Some(FinishReason::ContentFilter) => Status::Incomplete("content_filter"),
            _ => Status::Completed,
        }
    }

    fn as_str(self) -> &'static str {
        match self {
            Status::InProgress => "in_progress",
            Status::Completed => "completed",
            Status::Incomplete(_) => "incomplete",
            Status::Failed => "failed",
        }
    }
}

/// The response object.
fn object(
    meta: &Meta,
    status: Status,
    output: Vec<Value>,
    usage: Option<&Usage>,
    model: &str,
    error: Value,
) -> Value {
    let echo = &meta.echo;
    let incomplete = match status {
        Status::Incomplete(reason) => json!({ "reason": reason }),
        _ => Value::Null,
    };
    json!({
        "id": meta.id,
        "object": "response",
        "created_at": meta.created_at,
        "status": status.as_str(),
        "error": error,
        "incomplete_details": incomplete,
        "instructions": echo.instructions,
        "max_output_tokens": echo.max_output_tokens,
        "metadata": echo.metadata,
        "model": model,
        "output": output,
        "parallel_tool_calls": echo.parallel_tool_calls,
        "previous_response_id": meta.previous_response_id,
        "reasoning": echo.reasoning,
        "store": meta.store,
        "temperature": echo.temperature,
        "text": echo.text,
        "tool_choice": echo.tool_choice,
        "tools": echo.tools,
        "top_p": echo.top_p,
        "truncation": echo.truncation,
        "usage": usage.map(usage_object),
        "user": echo.user,
    })
}

/// `usage` as the Responses API reports it.
fn usage_object(usage: &Usage) -> Value {
    json!({
        "input_tokens": usage.prompt_tokens,
        "input_tokens_details": {
            "cached_tokens": usage.cached_tokens().unwrap_or(0),
            "cache_write_tokens": usage.cache_write_tokens().unwrap_or(0),
        },
        "output_tokens": usage.completion_tokens,
        "output_tokens_details": {
            "reasoning_tokens": usage.completion_tokens_details.and_then(|d| d.reasoning_tokens).unwrap_or(0),
        },
        "total_tokens": usage.total_tokens,
    })
}

fn text_part(text: &str) -> Value {
    json!({ "type": "output_text", "text": text, "annotations": [], "logprobs": [] })
}

fn refusal_part(refusal: &str) -> Value {
    json!({ "type": "refusal", "refusal": refusal })
}

fn message_item(id: &str, status: &str, content: Vec<Value>) -> Value {
    json!({ "type": "message", "id": id, "status": status, "role": "assistant", "content": content })
}

/// A tool call's output item before its arguments: a `function_call`, or a
/// `custom_tool_call` for a call of a `custom` tool.
struct CallItem<'a> {
    id: &'a str,
    call_id: &'a str,
    /// The name the model called: for a function of a `namespace` tool, the joined name the
    /// translation gave it ([`super::decode::namespaced_name`]).
    name: &'a str,
    custom: bool,
}

impl CallItem<'_> {
    /// The item with `arguments` (a custom call's `input`): a function of a `namespace` tool
    /// among the request's `tools` (as echoed) is named within its namespace again.
    fn write(&self, tools: &Value, arguments: &str, status: &str) -> Value {
        if self.custom {
            return json!({ "type": "custom_tool_call", "id": self.id, "call_id": self.call_id, "name": self.name, "input": arguments, "status": status });
        }
        let mut item = json!({ "type": "function_call", "id": self.id, "call_id": self.call_id, "name": self.name, "arguments": arguments, "status": status });
        if let Some((namespace, name)) = super::decode::namespaced(tools, self.name) {
            item["name"] = json!(name);
            item["namespace"] = json!(namespace);
        }
        item
    }
}

/// Whether `call` is a `custom` call, its name, and its arguments (a custom call's input).
fn call_parts(call: &ToolCall) -> (bool, String, String) {
    if call.kind == "custom" {
        let custom = call.extra.get("custom");
        let text = |key: &str| custom.and_then(|c| c[key].as_str()).unwrap_or_default().to_owned();
        return (true, text("name"), text("input"));
    }
    (false, call.function.name.clone(), call.function.arguments.clone())
}

/// A `reasoning` item whose summary is `text` (none while it is empty).
fn reasoning_item(id: &str, status: &str, text: &str) -> Value {
    let summary = if text.is_empty() { json!([]) } else { json!([summary_part(text)]) };
    json!({ "type": "reasoning", "id": id, "summary": summary, "status": status })
}

fn summary_part(text: &str) -> Value {
    json!({ "type": "summary_text", "text": text })
}

fn reasoning_item_id(response_id: &str, index: usize) -> String {
    format!("rs_{}_{index}", response_id.trim_start_matches("resp_"))
}

fn call_item_id(response_id: &str, i: usize) -> String {
    format!("fc_{}_{i}", response_id.trim_start_matches("resp_"))
}

/// A part of a message as the encoder wrote it: its content index and its text, when written.
type Written = Option<(usize, String)>;

/// The output item being written.
#[derive(Debug)]
enum Open {
    /// A message: its parts so far (a text part, then perhaps a refusal part), and the parts a
    /// provider's own events finished before the gateway took the stream over.
    Message {
        index: usize,
        text: Option<(usize, String)>,
        refusal: Option<(usize, String)>,
        parts: usize,
        earlier: Vec<(usize, Value)>,
    },
    /// A function call (or a custom tool's call).
    Call(OpenCall),
    /// The model's reasoning: one summary part, its text so far.
    Reasoning { index: usize, text: String },
}

/// A call item being written: canonical tool call `call`, its arguments so far.
#[derive(Debug)]
struct OpenCall {
    index: usize,
    call: u32,
    call_id: String,
    name: String,
    arguments: String,
    custom: bool,
}

/// Canonical chunks into Responses events.
#[derive(Debug)]
pub struct StreamEncoder {
    meta: Meta,
    sequence: u64,
    started: bool,
    model: String,
    /// The finished output items.
    output: Vec<Value>,
    open: Option<Open>,
    /// The calls closed so far: a fragment of one of them cannot be expressed.
    closed_calls: Vec<u32>,
    /// Calls begun while the open function call's arguments were not yet whole JSON (a server
    /// that interleaves parallel calls' fragments), written whole once it ends.
    held: Vec<(ToolCallDelta, String)>,
    finish: Option<FinishReason>,
    usage: Option<Usage>,
    /// The assistant turn, for the conversation.
    turn_text: String,
    turn_calls: Vec<ToolCall>,
    /// Claude's signed thinking blocks of the open reasoning item, sealed into it as it closes.
    thinking: Vec<Value>,
    /// The output index and id of a message a provider's own events opened, which this encoder
    /// took over ([`adopt`](Self::adopt)).
    adopted: Option<(usize, String)>,
}

/// One event: its type and its data.
pub type Event = (&'static str, Value);

impl StreamEncoder {
    /// An encoder for the response `meta` describes.
    pub fn new(meta: Meta) -> Self {
        Self {
            meta,
            sequence: 0,
            started: false,
            model: String::new(),
            output: Vec::new(),
            open: None,
            closed_calls: Vec::new(),
            held: Vec::new(),
            finish: None,
            usage: None,
            turn_text: String::new(),
            turn_calls: Vec::new(),
            thinking: Vec::new(),
            adopted: None,
        }
    }

    /// Takes over a stream whose events so far were a provider's own (one that speaks the
    /// Responses API), as [`Native`] saw them: its events numbered on from the last, its
    /// finished items kept, an item of another kind it left unfinished listed `incomplete`,
    /// the message it was writing written on (another target continuing the answer) or, when
    /// the stream fails, listed `incomplete`.
    pub fn adopt(&mut self, native: Native) {
        self.sequence = native.sequence + 1;
        self.started = true;
        if self.model.is_empty() {
            self.model = native.model;
        }
        for item in native.output.iter().filter(|item| item["type"] == "message") {
            let parts = item["content"].as_array().into_iter().flatten();
            for part in parts.filter(|part| part["type"] == "output_text") {
                self.turn_text.push_str(part["text"].as_str().unwrap_or_default());
            }
        }
        self.output = native.output;
        // An item of another kind the break left unfinished is listed as such; what follows
        // takes the places after it.
        if let Some((_, mut item)) = native.other {
            item["status"] = Value::from("incomplete");
            self.output.push(item);
        }
        if let Some(open) = native.open {
            let earlier = open.done.iter().filter(|(_, part)| part["type"] == "output_text");
            for (_, part) in earlier {
                self.turn_text.push_str(part["text"].as_str().unwrap_or_default());
            }
            if let Some((_, text)) = &open.text {
                self.turn_text.push_str(text);
            }
            self.adopted = Some((open.index, open.id));
            self.open = Some(Open::Message {
                index: open.index,
                text: open.text,
                refusal: None,
                parts: open.parts,
                earlier: open.done,
            });
        }
    }

    /// The next `sequence_number`, taken for an event written beside this encoder's (a
    /// keep-alive); `None` before the response began.
    pub fn take_sequence(&mut self) -> Option<u64> {
        if !self.started {
            return None;
        }
        self.sequence += 1;
        Some(self.sequence - 1)
    }

    fn event(&mut self, kind: &'static str, mut data: Value, events: &mut Vec<Event>) {
        if let Value::Object(object) = &mut data {
            object.insert("type".to_owned(), Value::from(kind));
            object.insert("sequence_number".to_owned(), Value::from(self.sequence));
        }
        self.sequence += 1;
        events.push((kind, data));
    }

    fn start(&mut self, events: &mut Vec<Event>) {
        if self.started {
            return;
        }
        self.started = true;
        let response = object(&self.meta, Status::InProgress, Vec::new(), None, &self.model, Value::Null);
        self.event("response.created", json!({ "response": response }), events);
        let response = object(&self.meta, Status::InProgress, Vec::new(), None, &self.model, Value::Null);
        self.event("response.in_progress", json!({ "response": response }), events);
    }

    /// The events for one chunk (the first also opens the response).
    pub fn push(&mut self, chunk: &ChatChunk) -> Vec<Event> {
        let mut events = Vec::new();
        if self.model.is_empty() && !chunk.model.is_empty() {
            self.model.clone_from(&chunk.model);
        }
        self.start(&mut events);
        if let Some(usage) = chunk.usage {
            self.usage = Some(usage);
        }
        let Some(choice) = chunk.choices.iter().find(|c| c.index == 0) else { return events };
        if let Some(reasoning) = choice.delta.reasoning_content.as_deref().filter(|t| !t.is_empty()) {
            self.reasoning(reasoning, &mut events);
        }
        if !choice.delta.thinking_blocks.is_empty() {
            // A block comes whole once signed, after its text: it belongs to the reasoning item
            // that text is in (one is opened for a redacted block, which has none).
            self.open_reasoning(&mut events);
            self.thinking.extend(choice.delta.thinking_blocks.iter().cloned());
        }
        if let Some(text) = choice.delta.content.as_deref().filter(|t| !t.is_empty()) {
            self.text(text, false, &mut events);
        }
        if let Some(refusal) = choice.delta.refusal.as_deref().filter(|t| !t.is_empty()) {
            self.text(refusal, true, &mut events);
        }
        for call in &choice.delta.tool_calls {
            self.tool_call(call, &mut events);
        }
        if choice.finish_reason.is_some() {
            self.finish.clone_from(&choice.finish_reason);
        }
        events
    }

    /// A tool call fragment into its call item, opening the item (and closing the one before)
    /// when the fragment starts a call; a fragment of a call already closed is dropped.
    fn tool_call(&mut self, call: &ToolCallDelta, events: &mut Vec<Event>) {
        let custom = call.extra.get("custom");
        let name = match custom {
            Some(custom) => custom["name"].as_str(),
            None => call.function.as_ref().and_then(|f| f.name.as_deref()),
        };
        let arguments = match custom {
            Some(custom) => custom["input"].as_str().unwrap_or_default(),
            None => call.function.as_ref().and_then(|f| f.arguments.as_deref()).unwrap_or_default(),
        };
        let same = matches!(&self.open, Some(Open::Call(open)) if open.call == call.index);
        if !same {
            if let Some((_, so_far)) = self.held.iter_mut().find(|(held, _)| held.index == call.index) {
                so_far.push_str(arguments);
                return;
            }
            if self.closed_calls.contains(&call.index) {
                tracing::warn!(
                    call = call.index,
                    "a fragment after a tool call's whole arguments cannot be expressed in the Responses stream; dropped"
                );
                return;
            }
            let goes_on = matches!(&self.open, Some(Open::Call(open))
                if !open.custom && !crate::codec::is_whole_json(&open.arguments));
            if goes_on || !self.held.is_empty() {
                self.held.push((call.clone(), arguments.to_owned()));
                return;
            }
            let custom = call.kind.as_deref() == Some("custom") || custom.is_some();
            self.open_call(call, name, custom, events);
        }
        self.call_arguments(name, arguments, events);
    }

    /// Closes the open item for good (other output, the finish or the end follows), then
    /// writes each held call whole.
    fn settle(&mut self, events: &mut Vec<Event>) {
        self.close(events);
        for (mut call, arguments) in std::mem::take(&mut self.held) {
            if let Some(function) = call.function.as_mut() {
                function.arguments = Some(arguments);
            } else if let Some(custom) = call.extra.get_mut("custom") {
                custom["input"] = Value::String(arguments);
            }
            self.tool_call(&call, events);
            self.close(events);
        }
    }

    /// Closes the open item and opens a call item for `call`, named `name` so far.
    fn open_call(&mut self, call: &ToolCallDelta, name: Option<&str>, custom: bool, events: &mut Vec<Event>) {
        self.close(events);
        let index = self.output.len();
        let item_id = call_item_id(&self.meta.id, index);
        let call_id = call.id.clone().unwrap_or_else(|| item_id.clone());
        let name = name.unwrap_or_default().to_owned();
        let item = CallItem { id: &item_id, call_id: &call_id, name: &name, custom }.write(
            &self.meta.echo.tools,
            "",
            "in_progress",
        );
        self.event("response.output_item.added", json!({ "output_index": index, "item": item }), events);
        self.open = Some(Open::Call(OpenCall {
            index,
            call: call.index,
            call_id,
            name,
            arguments: String::new(),
            custom,
        }));
    }

    /// A call's name (when it has none yet) and more of its arguments, into the open call item.
    fn call_arguments(&mut self, name: Option<&str>, arguments: &str, events: &mut Vec<Event>) {
        let Some(Open::Call(open)) = &mut self.open else { return };
        if open.name.is_empty()
            && let Some(name) = name
        {
            name.clone_into(&mut open.name);
        }
        if !arguments.is_empty() {
            open.arguments.push_str(arguments);
            let (index, item_id) = (open.index, call_item_id(&self.meta.id, open.index));
            let data = json!({ "item_id": item_id, "output_index": index, "delta": arguments });
            let kind = if open.custom {
                "response.custom_tool_call_input.delta"
            } else {
                "response.function_call_arguments.delta"
            };
            self.event(kind, data, events);
        }
    }

    /// Opens a reasoning item, unless one is open. Its summary part comes with its first text:
    /// an item of a redacted block alone has none.
    fn open_reasoning(&mut self, events: &mut Vec<Event>) {
        if matches!(self.open, Some(Open::Reasoning { .. })) {
            return;
        }
        self.settle(events);
        let index = self.output.len();
        let item_id = reasoning_item_id(&self.meta.id, index);
        let item = reasoning_item(&item_id, "in_progress", "");
        self.event("response.output_item.added", json!({ "output_index": index, "item": item }), events);
        self.open = Some(Open::Reasoning { index, text: String::new() });
    }

    /// Reasoning into the open reasoning item, opening one when needed.
    fn reasoning(&mut self, text: &str, events: &mut Vec<Event>) {
        self.open_reasoning(events);
        let Some(Open::Reasoning { index, text: so_far }) = &mut self.open else { return };
        let first = so_far.is_empty();
        so_far.push_str(text);
        let index = *index;
        let item_id = reasoning_item_id(&self.meta.id, index);
        if first {
            let data = json!({ "item_id": item_id, "output_index": index, "summary_index": 0, "part": summary_part("") });
            self.event("response.reasoning_summary_part.added", data, events);
        }
        let data = json!({ "item_id": item_id, "output_index": index, "summary_index": 0, "delta": text });
        self.event("response.reasoning_summary_text.delta", data, events);
    }

    /// Text (or refusal) into the open message, opening one (and the part) when needed.
    fn text(&mut self, text: &str, refusal: bool, events: &mut Vec<Event>) {
        if !matches!(self.open, Some(Open::Message { .. })) {
            self.settle(events);
            let index = self.output.len();
            let item = message_item(&self.item_id(index), "in_progress", Vec::new());
            self.event("response.output_item.added", json!({ "output_index": index, "item": item }), events);
            self.open =
                Some(Open::Message { index, text: None, refusal: None, parts: 0, earlier: Vec::new() });
        }
        let Some(Open::Message { index, text: open_text, refusal: open_refusal, parts, .. }) = &mut self.open
        else {
            return;
        };
        let index = *index;
        let slot = if refusal { open_refusal } else { open_text };
        let (new_part, content_index) = match slot {
            Some((content_index, so_far)) => {
                so_far.push_str(text);
                (None, *content_index)
            }
            None => {
                let content_index = *parts;
                *parts += 1;
                *slot = Some((content_index, text.to_owned()));
                (Some(if refusal { refusal_part("") } else { text_part("") }), content_index)
            }
        };
        if !refusal {
            self.turn_text.push_str(text);
        }
        let item_id = self.item_id(index);
        if let Some(part) = new_part {
            let data = json!({ "item_id": item_id, "output_index": index, "content_index": content_index, "part": part });
            self.event("response.content_part.added", data, events);
        }
        let (kind, data) = if refusal {
            (
                "response.refusal.delta",
                json!({ "item_id": item_id, "output_index": index, "content_index": content_index, "delta": text }),
            )
        } else {
            (
                "response.output_text.delta",
                json!({ "item_id": item_id, "output_index": index, "content_index": content_index, "delta": text, "logprobs": [] }),
            )
        };
        self.event(kind, data, events);
    }

    /// The id of the message item at `index`.
    fn item_id(&self, index: usize) -> String {
        match &self.adopted {
            Some((at, id)) if *at == index => id.clone(),
            _ => format!("msg_{}_{index}", self.meta.id.trim_start_matches("resp_")),
        }
    }

    /// Closes the open item: its parts' and its own `.done` events.
    fn close(&mut self, events: &mut Vec<Event>) {
        match self.open.take() {
            None => {}
            Some(Open::Message { index, text, refusal, earlier, .. }) => {
                self.close_message(index, (text, refusal), earlier, events)
            }
            Some(Open::Reasoning { index, text }) => self.close_reasoning(index, &text, events),
            Some(Open::Call(open)) => self.close_call(open, events),
        }
    }

    /// Ends the open item where the stream broke: no `.done` event says it is whole (a client
    /// acts on a finished call), and the failed response lists it as `incomplete`.
    fn cut(&mut self) {
        let item = match self.open.take() {
            None => None,
            Some(Open::Message { index, text, refusal, earlier, .. }) => {
                let mut parts = earlier;
                parts.extend(text.map(|(at, text)| (at, text_part(&text))));
                parts.extend(refusal.map(|(at, refusal)| (at, refusal_part(&refusal))));
                parts.sort_by_key(|(content_index, _)| *content_index);
                let parts = parts.into_iter().map(|(_, part)| part).collect();
                Some(message_item(&self.item_id(index), "incomplete", parts))
            }
            Some(Open::Reasoning { index, text }) => {
                Some(reasoning_item(&reasoning_item_id(&self.meta.id, index), "incomplete", &text))
            }
            Some(Open::Call(open)) => {
                let item_id = call_item_id(&self.meta.id, open.index);
                let item =
                    CallItem { id: &item_id, call_id: &open.call_id, name: &open.name, custom: open.custom };
                Some(item.write(&self.meta.echo.tools, &open.arguments, "incomplete"))
            }
        };
        self.output.extend(item);
        // Calls held behind it, never begun on the stream.
        for (call, arguments) in std::mem::take(&mut self.held) {
            let item_id = call_item_id(&self.meta.id, self.output.len());
            let call_id = call.id.clone().unwrap_or_else(|| item_id.clone());
            let custom = call.extra.get("custom");
            let name = match custom {
                Some(custom) => custom["name"].as_str(),
                None => call.function.as_ref().and_then(|f| f.name.as_deref()),
            };
            let item = CallItem {
                id: &item_id,
                call_id: &call_id,
                name: name.unwrap_or_default(),
                custom: custom.is_some(),
            };
            self.output.push(item.write(&self.meta.echo.tools, &arguments, "incomplete"));
        }
    }

    /// Closes the message item at `index`: its text and refusal parts, in their order, then
    /// the item, with the parts finished `earlier` (by a provider's own events) in their places.
    fn close_message(
        &mut self,
        index: usize,
        (text, refusal): (Written, Written),
        earlier: Vec<(usize, Value)>,
        events: &mut Vec<Event>,
    ) {
        let item_id = self.item_id(index);
        let mut parts: Vec<(usize, Value)> = Vec::new();
        if let Some((content_index, text)) = text {
            let data = json!({ "item_id": item_id, "output_index": index, "content_index": content_index, "text": text, "logprobs": [] });
            self.event("response.output_text.done", data, events);
            parts.push((content_index, text_part(&text)));
        }
        if let Some((content_index, refusal)) = refusal {
            let data = json!({ "item_id": item_id, "output_index": index, "content_index": content_index, "refusal": refusal });
            self.event("response.refusal.done", data, events);
            parts.push((content_index, refusal_part(&refusal)));
        }
        parts.sort_by_key(|(content_index, _)| *content_index);
        for (content_index, part) in &parts {
            let data = json!({ "item_id": item_id, "output_index": index, "content_index": content_index, "part": part });
            self.event("response.content_part.done", data, events);
        }
        parts.extend(earlier);
        parts.sort_by_key(|(content_index, _)| *content_index);
        let item = message_item(&item_id, "completed", parts.into_iter().map(|(_, part)| part).collect());
        self.output.push(item.clone());
        self.event("response.output_item.done", json!({ "output_index": index, "item": item }), events);
    }

    /// Closes the reasoning item at `index`: its summary, when it has one, then the item with
    /// Claude's thinking sealed into it.
    fn close_reasoning(&mut self, index: usize, text: &str, events: &mut Vec<Event>) {
        let item_id = reasoning_item_id(&self.meta.id, index);
        let at = json!({ "item_id": item_id, "output_index": index, "summary_index": 0 });
        let with = |key: &str, value: Value| {
            let mut data = at.clone();
            data[key] = value;
            data
        };
        if !text.is_empty() {
            self.event("response.reasoning_summary_text.done", with("text", json!(text)), events);
            self.event("response.reasoning_summary_part.done", with("part", summary_part(text)), events);
        }
        let mut item = reasoning_item(&item_id, "completed", text);
        let sealed = match self.thinking.is_empty() {
            false => super::seal_thinking(&std::mem::take(&mut self.thinking)),
            true => super::seal_reasoning(self.meta.reasoned_by.as_deref().unwrap_or(&self.model), text),
        };
        item["encrypted_content"] = Value::String(sealed);
        self.output.push(item.clone());
        self.event("response.output_item.done", json!({ "output_index": index, "item": item }), events);
    }

    /// Closes a call item: its arguments (or input) whole, then the item; the call joins the
    /// turn.
    fn close_call(&mut self, open: OpenCall, events: &mut Vec<Event>) {
        let OpenCall { index, call, call_id, name, arguments, custom } = open;
        let item_id = call_item_id(&self.meta.id, index);
        let item = CallItem { id: &item_id, call_id: &call_id, name: &name, custom }.write(
            &self.meta.echo.tools,
            &arguments,
            "completed",
        );
        if custom {
            let data = json!({ "item_id": item_id, "output_index": index, "input": arguments });
            self.event("response.custom_tool_call_input.done", data, events);
        } else {
            let data = json!({ "item_id": item_id, "output_index": index, "name": item["name"], "arguments": arguments });
            self.event("response.function_call_arguments.done", data, events);
        }
        self.output.push(item.clone());
        self.event("response.output_item.done", json!({ "output_index": index, "item": item }), events);
        self.closed_calls.push(call);
        self.turn_calls.push(if custom {
            let mut turn = ToolCall::function(call_id, "", "");
            turn.kind = "custom".to_owned();
            turn.extra.insert("custom".to_owned(), json!({ "name": name, "input": arguments }));
            turn
        } else {
            ToolCall::function(call_id, name, arguments)
        });
    }

    /// The events that end a stream that ran to its end: `response.completed`, or
    /// `response.incomplete` when the answer was cut.
    pub fn finish(&mut self) -> Vec<Event> {
        let mut events = Vec::new();
        self.start(&mut events);
        self.settle(&mut events);
        let status = Status::of(self.finish.as_ref());
        let kind = if status == Status::Completed { "response.completed" } else { "response.incomplete" };
        let response = self.response();
        self.event(kind, json!({ "response": response }), &mut events);
        events
    }

    /// The events that end a stream that failed after it began: `response.failed`, then
    /// `error`. `code` is a Responses error code (`server_error`, `rate_limit_exceeded`).
    pub fn fail(&mut self, code: &str, message: &str) -> Vec<Event> {
        let mut events = Vec::new();
        self.start(&mut events);
        self.cut();
        let error = json!({ "code": code, "message": message });
        let response =
            object(&self.meta, Status::Failed, self.output.clone(), self.usage.as_ref(), &self.model, error);
        self.event("response.failed", json!({ "response": response }), &mut events);
        self.event("error", json!({ "code": code, "message": message, "param": null }), &mut events);
        events
    }

    /// The response as it stands (whole, after [`finish`](Self::finish)).
    pub fn response(&self) -> Value {
        object(
            &self.meta,
            Status::of(self.finish.as_ref()),
            self.output.clone(),
            self.usage.as_ref(),
            &self.model,
            Value::Null,
        )
    }

    /// The assistant turn the stream added, for the conversation.
    pub fn turn(&self) -> Message {
        Message {
            role: Role::Assistant,
            content: (!self.turn_text.is_empty()).then(|| Content::Text(self.turn_text.clone())),
            tool_calls: self.turn_calls.clone(),
            ..Message::assistant("")
        }
    }
}

/// What a provider's own Responses events showed the client, as they pass: enough for the
/// gateway to take the stream over ([`StreamEncoder::adopt`]) when it goes on in canonical
/// chunks (another target continuing the answer) or fails.
#[derive(Debug, Default)]
pub struct Native {
    /// The last `sequence_number` passed on.
    sequence: u64,
    model: String,
    /// The items finished, as the provider wrote them.
    output: Vec<Value>,
    /// The message being written.
    open: Option<NativeMessage>,
    /// An item of another kind being written (reasoning, a hosted tool's call), as added.
    other: Option<(usize, Value)>,
}

/// A message a provider's events opened and have not finished.
#[derive(Debug)]
struct NativeMessage {
    index: usize,
    id: String,
    /// Its text part being written: content index, the text so far.
    text: Option<(usize, String)>,
    /// Its parts so far.
    parts: usize,
    /// Its parts finished: content index, the part as written.
    done: Vec<(usize, Value)>,
}

impl Native {
    /// Takes note of one event passed on.
    pub fn see(&mut self, event: &Value) {
        if let Some(sequence) = event["sequence_number"].as_u64() {
            self.sequence = sequence;
        }
        let index = event["output_index"].as_u64().and_then(|index| usize::try_from(index).ok());
        let open = self.open.as_mut().filter(|open| Some(open.index) == index);
        match (event["type"].as_str().unwrap_or_default(), open) {
            ("response.created" | "response.in_progress", _) => {
                let model = event["response"]["model"].as_str().unwrap_or_default();
                model.clone_into(&mut self.model);
            }
            ("response.output_item.added", _) if event["item"]["type"] == "message" => {
                let id = event["item"]["id"].as_str().unwrap_or_default().to_owned();
                self.open =
                    index.map(|index| NativeMessage { index, id, text: None, parts: 0, done: Vec::new() });
            }
            ("response.output_item.added", _) => {
                self.other = index.map(|index| (index, event["item"].clone()));
            }
            ("response.content_part.added", Some(open)) => {
                if event["part"]["type"] == "output_text" {
                    open.text = Some((open.parts, String::new()));
                }
                open.parts += 1;
            }
            ("response.output_text.delta", Some(open)) => {
                if let Some((_, text)) = &mut open.text {
                    text.push_str(event["delta"].as_str().unwrap_or_default());
                }
            }
            ("response.content_part.done", Some(open)) => {
                let at = event["content_index"].as_u64().and_then(|at| usize::try_from(at).ok());
                let Some(at) = at else { return };
                if open.text.as_ref().is_some_and(|(text_at, _)| *text_at == at) {
                    open.text = None;
                }
                open.done.push((at, event["part"].clone()));
            }
            ("response.output_item.done", open) => {
                if open.is_some() {
                    self.open = None;
                }
                if self.other.as_ref().is_some_and(|(at, _)| Some(*at) == index) {
                    self.other = None;
                }
                self.output.push(event["item"].clone());
            }
            _ => {}
        }
    }
}

/// A routed stream as a Responses client reads it: the canonical chunks as numbered events,
/// or a provider's own events passed on under the gateway's id. The whole response, once the
/// stream has it, is handed to whoever keeps it ([`ResponsesStreamWriter::take_completed`]).
pub struct ResponsesStreamWriter {
    meta: Meta,
    encoder: StreamEncoder,
    /// What a provider's own events showed, while they are passed on; the encoder takes it
    /// over at the first canonical chunk after them (a continuation) or at a failure.
    native: Option<Native>,
    /// The whole response, once the stream completed, until taken.
    completed: Option<Value>,
    /// Keep-alive events written among a provider's own, each taking a `sequence_number`:
    /// the provider's events after them are numbered on past them.
    inserted: u64,
}

impl ResponsesStreamWriter {
    /// A writer for the stream of the response `meta` describes.
    pub fn new(meta: Meta) -> Self {
        Self { encoder: StreamEncoder::new(meta.clone()), meta, native: None, completed: None, inserted: 0 }
    }

    /// A `keepalive` event, as OpenAI's Responses API sends one in a long quiet (its readers
    /// skip it; a comment line would not reset a reader's own idle timer, as Codex's, since
    /// its SSE parser never yields one); a comment line before the response began.
    pub fn keep_alive(&mut self, out: &mut Vec<u8>) {
        let sequence = match self.native.as_mut() {
            Some(native) => {
                self.inserted += 1;
                native.sequence += 1;
                native.sequence
            }
            None => match self.encoder.take_sequence() {
                Some(sequence) => sequence,
                None => return out.extend_from_slice(b": keep-alive\n\n"),
            },
        };
        let event = json!({"type": "keepalive", "sequence_number": sequence});
        crate::codec::write_event(out, "keepalive", &event);
    }

    /// The whole response, once (when the stream has completed since the last call): what the
    /// gateway keeps for `previous_response_id`.
    pub fn take_completed(&mut self) -> Option<Value> {
        self.completed.take()
    }

    fn write(events: Vec<Event>, out: &mut Vec<u8>) {
        for (name, data) in events {
            crate::codec::write_event(out, name, &data);
        }
    }

    /// A provider's event, passed on; a response object in it is restamped.
    fn pass(&mut self, frame: &bytes::Bytes, out: &mut Vec<u8>) {
        let data = crate::pieces::data_of(frame).unwrap_or_default();
        let native = self.native.get_or_insert_default();
        let Ok(mut event) = serde_json::from_str::<Value>(&data) else {
            out.extend_from_slice(frame);
            return;
        };
        // Numbered on past the keep-alives written among them.
        let shifted = self.inserted > 0 && event["sequence_number"].is_u64();
        if shifted {
            let sequence = event["sequence_number"].as_u64().unwrap_or_default();
            event["sequence_number"] = Value::from(sequence + self.inserted);
        }
        native.see(&event);
        let Some(response) = event.get_mut("response") else {
            match shifted {
                true => crate::codec::write_event(out, event["type"].as_str().unwrap_or_default(), &event),
                false => out.extend_from_slice(frame),
            }
            return;
        };
        super::native::restamp(response, &self.meta);
        let kind = event["type"].as_str().unwrap_or_default().to_owned();
        if matches!(kind.as_str(), "response.completed" | "response.incomplete") {
            self.completed = Some(event["response"].clone());
        }
        crate::codec::write_event(out, &kind, &event);
    }
}

impl crate::codec::StreamWriter for ResponsesStreamWriter {
    fn chunk(&mut self, chunk: ChatChunk, out: &mut Vec<u8>) {
        if let Some(frame) =
            chunk.verbatim.as_ref().and_then(|v| v.in_dialect(switchyard::chat::Dialect::Responses))
        {
            return self.pass(frame, out);
        }
        if let Some(native) = self.native.take() {
            self.encoder.adopt(native);
        }
        Self::write(self.encoder.push(&chunk), out);
    }

    fn end(&mut self, out: &mut Vec<u8>) {
        // A provider's own `response.completed` was taken as it passed.
        if self.native.is_none() {
            Self::write(self.encoder.finish(), out);
            self.completed = Some(self.encoder.response());
        }
    }

    fn fail(&mut self, error: &switchyard::ProviderError, out: &mut Vec<u8>) -> bool {
        let code = match error.kind() {
            switchyard::ErrorKind::RateLimited | switchyard::ErrorKind::QuotaExceeded => {
                "rate_limit_exceeded"
            }
            _ => "server_error",
        };
        if let Some(native) = self.native.take() {
            self.encoder.adopt(native);
        }
        let message = format!("the stream failed after content was sent: {error}");
        Self::write(self.encoder.fail(code, &message), out);
        true
    }
}

#[cfg(test)]
mod tests {
    use switchyard::chat::{ChunkChoice, Delta, FunctionCallDelta, ToolCallDelta};

    use super::*;
    use crate::responses::decode::request_from_json;

    fn meta() -> Meta {
        meta_of(json!({"model": "m", "input": "x"}))
    }

    /// The meta of a response to the request `body`.
    fn meta_of(body: Value) -> Meta {
        let echo = request_from_json(body).unwrap().echo;
        Meta {
            id: "resp_1".into(),
            created_at: 7,
            echo,
            previous_response_id: None,
            store: true,
            reasoned_by: None,
        }
    }

    fn chunk(delta: Delta, finish: Option<FinishReason>) -> ChatChunk {
        ChatChunk {
            model: "m-1".into(),
            choices: vec![ChunkChoice { index: 0, delta, finish_reason: finish }],
            ..ChatChunk::default()
        }
    }

    #[test]
    fn an_answer_is_a_message_then_its_function_calls_with_usage() {
        let mut answer = ChatResponse::from_text("m-1", "Checking.");
        answer.choices[0].message.tool_calls = vec![ToolCall::function("call_1", "weather", "{}")];
        answer.choices[0].finish_reason = Some(FinishReason::ToolCalls);
        answer.usage = Some(Usage::new(10, 5));
        let (object, turn) = response_object(&meta(), &answer);
        assert_eq!(object["status"], "completed");
        assert_eq!(
            object["output"][0]["content"][0],
            json!({"type": "output_text", "text": "Checking.", "annotations": [], "logprobs": []})
        );
        assert_eq!(object["output"][1]["call_id"], "call_1");
        assert_eq!(object["usage"]["total_tokens"], 15);
        assert_eq!(object["usage"]["input_tokens_details"]["cached_tokens"], 0);
        assert_eq!(turn.tool_calls.len(), 1);
        assert_eq!(turn.text_content().as_deref(), Some("Checking."));
    }

    /// A meta whose request held a `namespace` tool `agents` with the function `spawn`.
    fn namespaced_meta() -> Meta {
        let tools = json!([{"type": "namespace", "name": "agents",
            "tools": [{"type": "function", "name": "spawn", "parameters": {"type": "object"}}]}]);
        meta_of(json!({"model": "m", "input": "x", "tools": tools}))
    }

    fn custom_call(input: &str) -> ToolCall {
        let mut call = ToolCall::function("call_2", "", "");
        call.kind = "custom".into();
        call.extra.insert("custom".into(), json!({"name": "code_exec", "input": input}));
        call
    }

    #[test]
    fn a_namespaced_function_is_named_within_its_namespace_and_a_custom_call_is_its_own_item() {
        let mut answer = ChatResponse::from_text("m-1", "");
        answer.choices[0].message.content = None;
        answer.choices[0].message.tool_calls =
            vec![ToolCall::function("call_1", "agents__spawn", "{}"), custom_call("print(1)")];
        let (object, _) = response_object(&namespaced_meta(), &answer);
        let (spawn, code) = (&object["output"][0], &object["output"][1]);
        assert_eq!(
            (&spawn["type"], &spawn["namespace"], &spawn["name"]),
            (&json!("function_call"), &json!("agents"), &json!("spawn"))
        );
        assert_eq!(
            (&code["type"], &code["name"], &code["input"], &code["call_id"]),
            (&json!("custom_tool_call"), &json!("code_exec"), &json!("print(1)"), &json!("call_2"))
        );
    }

    #[test]
    fn a_streamed_custom_call_is_a_custom_tool_call_item_with_its_input_deltas() {
        let mut encoder = StreamEncoder::new(namespaced_meta());
        let fragment = |value: Value| Delta {
            tool_calls: vec![serde_json::from_value(value).unwrap()],
            ..Delta::default()
        };
        let mut events = encoder.push(&chunk(
            fragment(json!({"index": 0, "id": "call_2", "type": "custom", "custom": {"name": "code_exec", "input": ""}})),
            None,
        ));
        events
            .extend(encoder.push(&chunk(fragment(json!({"index": 0, "custom": {"input": "print("}})), None)));
        events.extend(encoder.push(&chunk(fragment(json!({"index": 0, "custom": {"input": "1)"}})), None)));
        events.extend(encoder.finish());
        let deltas: Vec<&Value> = events
            .iter()
            .filter(|(kind, _)| *kind == "response.custom_tool_call_input.delta")
            .map(|(_, d)| &d["delta"])
            .collect();
        assert_eq!(deltas, [&json!("print("), &json!("1)")]);
        let item = &events.last().unwrap().1["response"]["output"][0];
        assert_eq!((&item["type"], &item["input"]), (&json!("custom_tool_call"), &json!("print(1)")));
    }

    #[test]
    fn claudes_blocks_are_encoded_into_the_reasoning_item_they_belong_to() {
        let signed = json!({"type": "thinking", "thinking": "Hmm.", "signature": "EqQB"});
        let redacted = json!({"type": "redacted_thinking", "data": "EmwK"});
        let mut encoder = StreamEncoder::new(meta());
        let mut events =
            encoder.push(&chunk(Delta { reasoning_content: Some("Hmm.".into()), ..Delta::default() }, None));
        events.extend(
            encoder.push(&chunk(Delta { thinking_blocks: vec![signed.clone()], ..Delta::default() }, None)),
        );
        events.extend(encoder.push(&chunk(Delta { content: Some("Yes.".into()), ..Delta::default() }, None)));
        // A redacted block after the text: an item of its own, with no summary to announce.
        let before = events.len();
        events.extend(
            encoder.push(&chunk(Delta { thinking_blocks: vec![redacted.clone()], ..Delta::default() }, None)),
        );
        events.extend(encoder.finish());
        let output = &events.last().unwrap().1["response"]["output"];
        let kinds: Vec<_> = output.as_array().unwrap().iter().map(|item| item["type"].clone()).collect();
        assert_eq!(kinds, [json!("reasoning"), json!("message"), json!("reasoning")]);
        let unsealed = |item: &Value| super::super::unseal_thinking(item).unwrap();
        assert_eq!(unsealed(&output[0]), [signed]);
        assert_eq!(output[0]["summary"][0]["text"], "Hmm.");
        assert_eq!(unsealed(&output[2]), [redacted]);
        assert_eq!(output[2]["summary"], json!([]));
        let late: Vec<&str> = events[before..].iter().map(|(kind, _)| *kind).collect();
        assert!(!late.iter().any(|kind| kind.contains("summary")), "{late:?}");
    }

    #[test]
    fn reasoning_is_a_reasoning_item_before_the_message_whole_and_streamed() {
        let mut answer = ChatResponse::from_text("m-1", "42.");
        answer.choices[0].message.extra.insert("reasoning_content".into(), json!("Six times seven."));
        let (object, _) = response_object(&meta(), &answer);
        // Sealed for the model that wrote it, which may need it back (see `REASONING_SEAL`).
        let sealed = super::super::seal_reasoning("m-1", "Six times seven.");
        assert_eq!(
            object["output"][0],
            json!({"type": "reasoning", "id": "rs_1_0", "status": "completed",
                   "summary": [{"type": "summary_text", "text": "Six times seven."}],
                   "encrypted_content": sealed})
        );
        assert_eq!(
            super::super::unseal_reasoning(&object["output"][0]),
            Some(json!({"model": "m-1", "text": "Six times seven."}))
        );
        assert_eq!(object["output"][1]["type"], "message");

        let mut encoder = StreamEncoder::new(meta());
        let reasoning = |text: &str| Delta { reasoning_content: Some(text.into()), ..Delta::default() };
        let mut events = encoder.push(&chunk(reasoning("Six times "), None));
        events.extend(encoder.push(&chunk(reasoning("seven."), None)));
        events.extend(encoder.push(&chunk(Delta { content: Some("42.".into()), ..Delta::default() }, None)));
        events.extend(encoder.finish());
        let kinds: Vec<&str> = events.iter().map(|(kind, _)| *kind).collect();
        assert_eq!(
            kinds[2..9],
            [
                "response.output_item.added",
                "response.reasoning_summary_part.added",
                "response.reasoning_summary_text.delta",
                "response.reasoning_summary_text.delta",
                "response.reasoning_summary_text.done",
                "response.reasoning_summary_part.done",
                "response.output_item.done",
            ]
        );
        assert_eq!(events[6].1["text"], "Six times seven.");
        assert_eq!(events[8].1["item"], object["output"][0]);
        let completed = &events.last().unwrap().1["response"];
        assert_eq!(completed["output"][0]["summary"][0]["text"], "Six times seven.");
        assert_eq!(completed["output"][1]["content"][0]["text"], "42.");
        let numbers: Vec<u64> =
            events.iter().map(|(_, data)| data["sequence_number"].as_u64().unwrap()).collect();
        assert_eq!(numbers, (0..events.len() as u64).collect::<Vec<_>>());
    }

    #[test]
    fn a_cut_answer_is_incomplete_with_its_reason() {
        let mut answer = ChatResponse::from_text("m", "Once upon");
        answer.choices[0].finish_reason = Some(FinishReason::Length);
        let (object, _) = response_object(&meta(), &answer);
        assert_eq!(
            (object["status"].as_str(), &object["incomplete_details"]),
            (Some("incomplete"), &json!({"reason": "max_output_tokens"}))
        );
    }

    #[test]
    fn a_stream_is_numbered_events_in_the_documented_order() {
        let mut encoder = StreamEncoder::new(meta());
        let mut events =
            encoder.push(&chunk(Delta { role: Some(Role::Assistant), ..Delta::default() }, None));
        events.extend(encoder.push(&chunk(Delta { content: Some("Hel".into()), ..Delta::default() }, None)));
        events.extend(encoder.push(&chunk(Delta { content: Some("lo".into()), ..Delta::default() }, None)));
        let call = |id: Option<&str>, name: Option<&str>, arguments: &str| Delta {
            tool_calls: vec![ToolCallDelta {
                index: 0,
                id: id.map(str::to_owned),
                kind: None,
                function: Some(FunctionCallDelta {
                    name: name.map(str::to_owned),
                    arguments: Some(arguments.to_owned()),
                }),
                extra: Default::default(),
            }],
            ..Delta::default()
        };
        events.extend(encoder.push(&chunk(call(Some("call_1"), Some("weather"), ""), None)));
        events.extend(encoder.push(&chunk(call(None, None, "{\"city\":"), None)));
        events.extend(encoder.push(&chunk(call(None, None, "\"Paris\"}"), Some(FinishReason::ToolCalls))));
        events.extend(encoder.push(&ChatChunk { usage: Some(Usage::new(3, 4)), ..ChatChunk::default() }));
        events.extend(encoder.finish());
        let kinds: Vec<_> = events.iter().map(|(kind, _)| *kind).collect();
        assert_eq!(
            kinds,
            [
                "response.created",
                "response.in_progress",
                "response.output_item.added",
                "response.content_part.added",
                "response.output_text.delta",
                "response.output_text.delta",
                "response.output_text.done",
                "response.content_part.done",
                "response.output_item.done",
                "response.output_item.added",
                "response.function_call_arguments.delta",
                "response.function_call_arguments.delta",
                "response.function_call_arguments.done",
                "response.output_item.done",
                "response.completed",
            ]
        );
        for (n, (kind, data)) in events.iter().enumerate() {
            assert_eq!(
                (data["type"].as_str(), data["sequence_number"].as_u64()),
                (Some(*kind), Some(n as u64))
            );
        }
        let done = &events.last().unwrap().1["response"];
        assert_eq!(done["output"][0]["content"][0]["text"], "Hello");
        assert_eq!(done["output"][1]["arguments"], "{\"city\":\"Paris\"}");
        assert_eq!(done["usage"]["output_tokens"], 4);
        assert_eq!(done["model"], "m-1");
        let turn = encoder.turn();
        assert_eq!(turn.text_content().as_deref(), Some("Hello"));
        assert_eq!(turn.tool_calls[0].function.arguments, "{\"city\":\"Paris\"}");
    }

    #[test]
    fn a_stream_that_fails_ends_with_response_failed_then_error_and_the_cut_item_is_never_done() {
        let mut encoder = StreamEncoder::new(meta());
        encoder.push(&chunk(Delta { content: Some("Hel".into()), ..Delta::default() }, None));
        let events = encoder.fail("server_error", "the upstream went away");
        let kinds: Vec<_> = events.iter().map(|(kind, _)| *kind).collect();
        assert_eq!(kinds, ["response.failed", "error"]);
        let response = &events[0].1["response"];
        assert_eq!(response["status"], "failed");
        assert_eq!(response["error"]["code"], "server_error");
        assert_eq!(response["output"][0]["status"], "incomplete");
        assert_eq!(response["output"][0]["content"][0]["text"], "Hel");
        assert_eq!(events[1].1["message"], "the upstream went away");
    }

    #[test]
    fn a_call_cut_by_a_break_is_incomplete_and_items_finished_before_it_stay_done() {
        let mut encoder = StreamEncoder::new(meta());
        encoder.push(&chunk(Delta { content: Some("Checking.".into()), ..Delta::default() }, None));
        let call = ToolCallDelta {
            index: 0,
            id: Some("call_1".into()),
            kind: Some("function".into()),
            function: Some(FunctionCallDelta {
                name: Some("weather".into()),
                arguments: Some("{\"ci".into()),
            }),
            extra: Default::default(),
        };
        let opened = encoder.push(&chunk(Delta { tool_calls: vec![call], ..Delta::default() }, None));
        assert!(opened.iter().any(|(kind, _)| *kind == "response.output_item.done"), "the message closed");
        let events = encoder.fail("server_error", "cut");
        assert!(
            !events.iter().any(|(kind, _)| kind.ends_with(".done")),
            "a call cut short is never done: {events:?}"
        );
        let output = &events[0].1["response"]["output"];
        assert_eq!(output[0]["status"], "completed");
        assert_eq!(
            (output[1]["status"].as_str(), output[1]["arguments"].as_str()),
            (Some("incomplete"), Some("{\"ci"))
        );
        assert!(encoder.turn().tool_calls.is_empty(), "a cut call is no call of the turn");
    }

    /// A provider's own events as they reach the writer: each a chunk carrying its frame.
    fn native_chunk(event: Value) -> ChatChunk {
        let kind = event["type"].as_str().unwrap().to_owned();
        let frame = format!("event: {kind}\ndata: {event}\n\n");
        ChatChunk {
            verbatim: Some(switchyard::chat::Verbatim::new(
                switchyard::chat::Dialect::Responses,
                bytes::Bytes::from(frame),
            )),
            ..ChatChunk::default()
        }
    }

    /// The events `out` holds, as (type, data).
    fn written(out: &[u8]) -> Vec<(String, Value)> {
        let text = std::str::from_utf8(out).unwrap();
        text.split("\n\n")
            .filter_map(|frame| frame.lines().find_map(|line| line.strip_prefix("data: ")))
            .map(|data| {
                let event: Value = serde_json::from_str(data).unwrap();
                (event["type"].as_str().unwrap().to_owned(), event)
            })
            .collect()
    }

    /// A provider's stream that began a message and said "Hel" of it, after a reasoning item.
    fn native_begun(writer: &mut ResponsesStreamWriter, out: &mut Vec<u8>) {
        let events = [
            json!({"type": "response.created", "sequence_number": 0, "response": {"id": "resp_up", "model": "gpt-5", "status": "in_progress", "output": []}}),
            json!({"type": "response.output_item.added", "sequence_number": 1, "output_index": 0, "item": {"type": "reasoning", "id": "rs_up", "summary": []}}),
            json!({"type": "response.output_item.done", "sequence_number": 2, "output_index": 0, "item": {"type": "reasoning", "id": "rs_up", "summary": [], "encrypted_content": "gAAA"}}),
            json!({"type": "response.output_item.added", "sequence_number": 3, "output_index": 1, "item": {"type": "message", "id": "msg_up", "role": "assistant", "status": "in_progress", "content": []}}),
            json!({"type": "response.content_part.added", "sequence_number": 4, "item_id": "msg_up", "output_index": 1, "content_index": 0, "part": {"type": "output_text", "text": "", "annotations": []}}),
            json!({"type": "response.output_text.delta", "sequence_number": 5, "item_id": "msg_up", "output_index": 1, "content_index": 0, "delta": "Hel"}),
        ];
        for event in events {
            crate::codec::StreamWriter::chunk(writer, native_chunk(event), out);
        }
    }

    #[test]
    fn a_continuation_after_a_providers_own_events_writes_on_in_its_message() {
        use crate::codec::StreamWriter;
        let mut writer = ResponsesStreamWriter::new(meta());
        let mut out = Vec::new();
        native_begun(&mut writer, &mut out);
        let passed = written(&out).len();
        // Another target's chunks, continuing the answer.
        writer.chunk(chunk(Delta { content: Some("lo".into()), ..Delta::default() }, None), &mut out);
        let mut last = chunk(Delta::default(), Some(FinishReason::Stop));
        last.usage = Some(Usage::new(12, 1));
        writer.chunk(last, &mut out);
        writer.end(&mut out);

        let events = written(&out);
        let sequence: Vec<u64> = events.iter().map(|(_, e)| e["sequence_number"].as_u64().unwrap()).collect();
        assert_eq!(sequence, (0..events.len() as u64).collect::<Vec<_>>(), "numbered on without a gap");
        let kinds: Vec<&str> = events[passed..].iter().map(|(kind, _)| kind.as_str()).collect();
        assert_eq!(
            kinds,
            [
                "response.output_text.delta",
                "response.output_text.done",
                "response.content_part.done",
                "response.output_item.done",
                "response.completed"
            ],
            "no second response.created, no second message"
        );
        let delta = &events[passed].1;
        assert_eq!(
            (&delta["item_id"], &delta["output_index"], &delta["delta"]),
            (&json!("msg_up"), &json!(1), &json!("lo"))
        );
        assert_eq!(events[passed + 1].1["text"], "Hello");
        let response = &events.last().unwrap().1["response"];
        assert_eq!(response["id"], "resp_1");
        assert_eq!(response["output"][0]["encrypted_content"], "gAAA", "the provider's items kept");
        assert_eq!(response["output"][1]["id"], "msg_up");
        assert_eq!(response["output"][1]["content"][0]["text"], "Hello");
        assert_eq!(writer.take_completed().unwrap()["output"][1]["content"][0]["text"], "Hello");
        assert_eq!(writer.encoder.turn().text_content().as_deref(), Some("Hello"));
    }

    #[test]
    fn keep_alives_among_a_providers_events_take_their_numbers_and_the_events_after_them_follow_on() {
        use crate::codec::StreamWriter;
        let mut writer = ResponsesStreamWriter::new(meta());
        let mut out = Vec::new();
        native_begun(&mut writer, &mut out);
        writer.keep_alive(&mut out);
        writer.keep_alive(&mut out);
        let event = json!({"type": "response.output_text.delta", "sequence_number": 6, "item_id": "msg_up", "output_index": 1, "content_index": 0, "delta": "l"});
        writer.chunk(native_chunk(event), &mut out);
        // And another target's chunks after them, continuing the answer.
        writer.chunk(chunk(Delta { content: Some("o".into()), ..Delta::default() }, None), &mut out);
        writer.chunk(chunk(Delta::default(), Some(FinishReason::Stop)), &mut out);
        writer.end(&mut out);

        let events = written(&out);
        let sequence: Vec<u64> = events.iter().map(|(_, e)| e["sequence_number"].as_u64().unwrap()).collect();
        assert_eq!(
            sequence,
            (0..events.len() as u64).collect::<Vec<_>>(),
            "numbered on without a gap or a repeat"
        );
        let kinds: Vec<&str> = events[6..9].iter().map(|(kind, _)| kind.as_str()).collect();
        assert_eq!(kinds, ["keepalive", "keepalive", "response.output_text.delta"]);
        assert_eq!(events[8].1["delta"], "l", "the provider's event as it wrote it, but its number");
        assert_eq!(writer.take_completed().unwrap()["output"][1]["content"][0]["text"], "Hello");
    }

    #[test]
    fn a_keep_alive_before_the_response_began_is_a_comment_and_after_it_an_event_in_sequence() {
        use crate::codec::StreamWriter;
        let mut writer = ResponsesStreamWriter::new(meta());
        let mut out = Vec::new();
        writer.keep_alive(&mut out);
        assert_eq!(out, b": keep-alive\n\n", "no event before response.created");
        out.clear();
        writer.chunk(chunk(Delta { content: Some("Hi".into()), ..Delta::default() }, None), &mut out);
        writer.keep_alive(&mut out);
        writer.chunk(chunk(Delta::default(), Some(FinishReason::Stop)), &mut out);
        writer.end(&mut out);
        let events = written(&out);
        let sequence: Vec<u64> = events.iter().map(|(_, e)| e["sequence_number"].as_u64().unwrap()).collect();
        assert_eq!(sequence, (0..events.len() as u64).collect::<Vec<_>>());
        assert!(events.iter().any(|(kind, _)| kind == "keepalive"), "{events:?}");
    }

    #[test]
    fn a_native_messages_finished_part_is_kept_when_another_target_writes_on_in_a_part_after_it() {
        use crate::codec::StreamWriter;
        let mut writer = ResponsesStreamWriter::new(meta());
        let mut out = Vec::new();
        native_begun(&mut writer, &mut out);
        let events = [
            json!({"type": "response.output_text.done", "sequence_number": 6, "item_id": "msg_up", "output_index": 1, "content_index": 0, "text": "Hel"}),
            json!({"type": "response.content_part.done", "sequence_number": 7, "item_id": "msg_up", "output_index": 1, "content_index": 0, "part": {"type": "output_text", "text": "Hel", "annotations": [{"type": "url_citation", "url": "https://example.com"}]}}),
            json!({"type": "response.content_part.added", "sequence_number": 8, "item_id": "msg_up", "output_index": 1, "content_index": 1, "part": {"type": "output_text", "text": "", "annotations": []}}),
            json!({"type": "response.output_text.delta", "sequence_number": 9, "item_id": "msg_up", "output_index": 1, "content_index": 1, "delta": "lo "}),
        ];
        for event in events {
            writer.chunk(native_chunk(event), &mut out);
        }
        let passed = written(&out).len();
        writer.chunk(chunk(Delta { content: Some("there".into()), ..Delta::default() }, None), &mut out);
        writer.chunk(chunk(Delta::default(), Some(FinishReason::Stop)), &mut out);
        writer.end(&mut out);

        let events = written(&out);
        let delta = &events[passed].1;
        assert_eq!((&delta["content_index"], &delta["delta"]), (&json!(1), &json!("there")));
        let parts_done: Vec<&Value> = events[passed..]
            .iter()
            .filter(|(kind, _)| kind == "response.content_part.done")
            .map(|(_, event)| &event["content_index"])
            .collect();
        assert_eq!(parts_done, [&json!(1)], "the finished part is not finished twice");
        let content = &events.last().unwrap().1["response"]["output"][1]["content"];
        assert_eq!((&content[0]["text"], &content[1]["text"]), (&json!("Hel"), &json!("lo there")));
        assert_eq!(
            content[0]["annotations"][0]["url"], "https://example.com",
            "kept as the provider wrote it"
        );
        assert_eq!(writer.encoder.turn().text_content().as_deref(), Some("Hello there"));
    }

    #[test]
    fn a_providers_own_stream_that_breaks_lists_its_message_incomplete() {
        use crate::codec::StreamWriter;
        let mut writer = ResponsesStreamWriter::new(meta());
        let mut out = Vec::new();
        native_begun(&mut writer, &mut out);
        let passed = written(&out).len();
        assert!(
            writer.fail(&switchyard::ProviderError::new(switchyard::ErrorKind::Transport, "cut"), &mut out)
        );
        let events = written(&out);
        let kinds: Vec<&str> = events[passed..].iter().map(|(kind, _)| kind.as_str()).collect();
        assert_eq!(kinds, ["response.failed", "error"]);
        assert_eq!(events[passed].1["sequence_number"], 6);
        let output = &events[passed].1["response"]["output"];
        assert_eq!((&output[1]["id"], &output[1]["status"]), (&json!("msg_up"), &json!("incomplete")));
        assert_eq!(output[1]["content"][0]["text"], "Hel");
    }

    #[test]
    fn a_call_begun_while_the_open_one_goes_on_is_held_and_no_fragment_is_lost() {
        let fragment = |index: u32, head: Option<(&str, &str)>, arguments: &str| {
            let delta = Delta {
                tool_calls: vec![ToolCallDelta {
                    index,
                    id: head.map(|(id, _)| id.to_owned()),
                    kind: head.map(|_| "function".to_owned()),
                    function: Some(FunctionCallDelta {
                        name: head.map(|(_, name)| name.to_owned()),
                        arguments: Some(arguments.to_owned()),
                    }),
                    extra: Default::default(),
                }],
                ..Delta::default()
            };
            chunk(delta, None)
        };
        let mut encoder = StreamEncoder::new(meta());
        let mut events = Vec::new();
        for chunk in [
            fragment(0, Some(("call_1", "weather")), "{\"city\":"),
            fragment(1, Some(("call_2", "time")), "{\"zone\":"),
            fragment(0, None, " \"Paris\"}"),
            fragment(1, None, " \"CET\"}"),
            chunk(Delta::default(), Some(FinishReason::ToolCalls)),
        ] {
            events.extend(encoder.push(&chunk));
        }
        events.extend(encoder.finish());
        let done: Vec<(&str, &str)> = events
            .iter()
            .filter(|(kind, _)| *kind == "response.function_call_arguments.done")
            .map(|(_, data)| (data["name"].as_str().unwrap(), data["arguments"].as_str().unwrap()))
            .collect();
        assert_eq!(done, [("weather", "{\"city\": \"Paris\"}"), ("time", "{\"zone\": \"CET\"}")]);
        let added = events.iter().filter(|(kind, _)| *kind == "response.output_item.added").count();
        assert_eq!(added, 2);
        let output = &events.last().unwrap().1["response"]["output"];
        assert_eq!(
            (output[0]["call_id"].as_str(), output[1]["call_id"].as_str()),
            (Some("call_1"), Some("call_2"))
        );
    }

    #[test]
    fn an_item_of_another_kind_the_break_left_open_keeps_its_place_and_is_incomplete() {
        use crate::codec::StreamWriter;
        let mut writer = ResponsesStreamWriter::new(meta());
        let mut out = Vec::new();
        native_begun(&mut writer, &mut out);
        for event in [
            json!({"type": "response.output_text.delta", "sequence_number": 6, "item_id": "msg_up", "output_index": 1, "content_index": 0, "delta": "lo"}),
            json!({"type": "response.output_item.done", "sequence_number": 7, "output_index": 1, "item": {"type": "message", "id": "msg_up", "role": "assistant", "status": "completed", "content": [{"type": "output_text", "text": "Hello", "annotations": []}]}}),
            json!({"type": "response.output_item.added", "sequence_number": 8, "output_index": 2, "item": {"type": "reasoning", "id": "rs_up2", "summary": []}}),
        ] {
            writer.chunk(native_chunk(event), &mut out);
        }
        writer.chunk(
            chunk(Delta { content: Some(" More.".into()), ..Delta::default() }, Some(FinishReason::Stop)),
            &mut out,
        );
        writer.end(&mut out);

        let events = written(&out);
        let added = events.iter().rev().find(|(kind, _)| kind == "response.output_item.added").unwrap();
        assert_eq!(added.1["output_index"], 3, "the new message after the unfinished reasoning");
        let output = &events.last().unwrap().1["response"]["output"];
        let kinds: Vec<(&str, &str)> = output
            .as_array()
            .unwrap()
            .iter()
            .map(|item| (item["type"].as_str().unwrap(), item["status"].as_str().unwrap_or("-")))
            .collect();
        assert_eq!(
            kinds,
            [
                ("reasoning", "-"),
                ("message", "completed"),
                ("reasoning", "incomplete"),
                ("message", "completed")
            ]
        );
        assert_eq!(writer.encoder.turn().text_content().as_deref(), Some("Hello More."));
    }
}
