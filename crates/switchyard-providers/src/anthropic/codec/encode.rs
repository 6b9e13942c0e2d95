//! Canonical answers and chunk streams into Messages API answers and stream events.

use std::collections::HashSet;

use serde_json::{Value, json};
use switchyard::chat::{ChatChunk, ChatResponse, Extra, FinishReason, Usage};

use super::{CodecError, Event};
use crate::anthropic::request::VERBATIM_BLOCKS;
use crate::anthropic::response::{self, VERBATIM_USAGE};
use crate::anthropic::wire::{self, Block, BlockDelta, MessageDeltaBody, MessageResponse, StreamEvent};

/// Serializes a wire type. These are plain structs with string keys, which cannot fail to
/// serialize; `null` stands in should that ever change.
pub(super) fn to_json<T: serde::Serialize>(value: &T) -> Value {
    serde_json::to_value(value).unwrap_or(Value::Null)
}

/// The string value of `key` in `extra`, if it is one.
fn extra_str<'a>(extra: &'a Extra, key: &str) -> Option<&'a str> {
    extra.get(key).and_then(Value::as_str)
}

/// Writes a canonical answer as a Messages API response: `{id, type: "message", role,
/// content, model, stop_reason, stop_sequence, usage}`.
///
/// Only the first choice is written (Anthropic answers once per request). Text becomes one
/// text block and tool calls `tool_use` blocks; their arguments must be JSON objects, else the
/// error names `choices[0].message.tool_calls[k].function.arguments`. An answer from Anthropic
/// to an Anthropic-dialect request comes back exactly as Anthropic sent it (its blocks, stop
/// reason and usage were kept in `extra`). Another dialect's reasoning (`reasoning_content`)
/// comes first, as a thinking block the gateway signed (see [`crate::codec::REASONING_SEAL`]).
/// `usage.input_tokens` is the canonical `prompt_tokens`, cached tokens included.
pub fn response_to_json(response: &ChatResponse) -> Result<Value, CodecError> {
    answer_json(response, &response.model)
}

/// [`response_to_json`], another dialect's reasoning (`reasoning_content`) written as a
/// thinking block first, signed as the gateway's for `reasoned_by`, the model that wrote it
/// (see [`crate::codec::REASONING_SEAL`]).
pub(crate) fn answer_json(response: &ChatResponse, reasoned_by: &str) -> Result<Value, CodecError> {
    let choice = response.choices.first();
    let content = match choice.map(|c| &c.message) {
        None => Vec::new(),
        Some(answer) => match answer.extra.get(VERBATIM_BLOCKS).and_then(Value::as_array) {
            Some(blocks) => blocks.clone(),
            None => response::answer_blocks(
                answer,
                choice.is_some_and(|c| c.finish_reason == Some(FinishReason::Length)),
            )
            .map_err(|(path, reason)| CodecError::new(format!("choices[0].message.{path}"), reason))?
            .into_iter()
            .map(|block| to_json(&with_tool_id(block)))
            .collect(),
        },
    };
    let mut content = content;
    // A model's refusal (OpenAI's `message.refusal`) reaches an Anthropic client as what the
    // model said: Anthropic writes a refusal in words as text.
    if let Some(refusal) =
        choice.and_then(|c| extra_str(&c.message.extra, "refusal")).filter(|r| !r.is_empty())
        && content.is_empty()
    {
        content.push(to_json(&Block::Text { text: refusal.to_owned() }));
    }
    let verbatim = choice.is_some_and(|c| c.message.extra.contains_key(VERBATIM_BLOCKS));
    if let Some(reasoning) = choice
        .and_then(|c| extra_str(&c.message.extra, "reasoning_content"))
        .filter(|r| !r.is_empty() && !verbatim)
    {
        let signature = crate::codec::reasoning_signature(reasoned_by);
        content.insert(0, json!({ "type": "thinking", "thinking": reasoning, "signature": signature }));
    }
    let choice_extra = choice.map(|c| &c.extra);
    let stop_sequence = choice_extra.and_then(|e| extra_str(e, "stop_sequence")).map(str::to_owned);
    let stop_reason = match (choice_extra.and_then(|e| extra_str(e, "stop_reason")), choice) {
        (Some(raw), _) => raw.to_owned(),
        (None, Some(choice)) => choice
            .finish_reason
            .as_ref()
            .map_or("end_turn", |reason| response::stop_reason(reason, stop_sequence.as_deref()))
            .to_owned(),
        (None, None) => "end_turn".to_owned(),
    };
    let usage = match response.extra.get(VERBATIM_USAGE).map(|u| serde_json::from_value(u.clone())) {
        Some(Ok(usage)) => usage,
        _ => usage_of(response.usage.unwrap_or_default()),
    };
    let message = MessageResponse {
        id: if response.id.is_empty() { crate::codec::fresh_id("msg_") } else { response.id.clone() },
        kind: "message".to_owned(),
        role: "assistant".to_owned(),
        model: response.model.clone(),
        content,
        stop_reason: Some(stop_reason),
        stop_sequence,
        usage,
    };
    Ok(to_json(&message))
}

/// A tool-use block with an id: answers from providers that do not name calls get one, since
/// Anthropic clients echo it back in their `tool_result`.
fn with_tool_id(block: Block) -> Block {
    match block {
        Block::ToolUse { id, name, input } if id.is_empty() => {
            Block::ToolUse { id: crate::codec::fresh_id("toolu_"), name, input }
        }
        Block::ToolUse { id, name, input } => {
            Block::ToolUse { id: crate::codec::tool_id(&id).into_owned(), name, input }
        }
        other => other,
    }
}

/// Anthropic usage for canonical counts: `input_tokens` is `prompt_tokens` (cached tokens
/// included, since the canonical count does not split them), `output_tokens` is
/// `completion_tokens`.
fn usage_of(usage: Usage) -> wire::Usage {
    wire::Usage::of(&usage)
}

/// The content block being written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum OpenBlock {
    /// A text block.
    Text {
        /// The block's Anthropic content block index.
        index: u32,
    },
    /// A `tool_use` block; `call` is the canonical tool-call index.
    Tool {
        /// The block's Anthropic content block index.
        index: u32,
        /// The canonical tool call (`tool_calls[].index`) it writes.
        call: u32,
    },
    /// A `thinking` block of another dialect's reasoning (`reasoning_content`), signed as the
    /// gateway's when it closes (see [`crate::codec::REASONING_SEAL`]).
    Thinking {
        /// The block's Anthropic content block index.
        index: u32,
    },
    /// A block of another kind the provider's own events opened (see [`StreamEncoder::resume`]):
    /// closed before anything else is written.
    Other {
        /// The block's Anthropic content block index.
        index: u32,
    },
}

impl OpenBlock {
    /// The block's Anthropic content block index.
    fn index(self) -> u32 {
        match self {
            OpenBlock::Text { index }
            | OpenBlock::Tool { index, .. }
            | OpenBlock::Thinking { index }
            | OpenBlock::Other { index } => index,
        }
    }
}

/// Writes a canonical chunk stream as Anthropic stream events.
///
/// Feed every chunk to [`push`](Self::push), then call [`finish`](Self::finish) when the stream
/// ended well, or send [`error_event`](super::error_event) when it failed. The events follow Anthropic's order:
/// `message_start`; per block `content_block_start`, `content_block_delta`s,
/// `content_block_stop`; then `message_delta` (stop reason, usage) and `message_stop`.
///
/// ```
/// use switchyard::chat::{ChatChunk, FinishReason};
/// use switchyard_providers::anthropic::codec::StreamEncoder;
///
/// let mut encoder = StreamEncoder::new();
/// let mut events = encoder.push(&ChatChunk::text("Hi"));
/// events.extend(encoder.push(&ChatChunk::finish(FinishReason::Stop)));
/// events.extend(encoder.finish());
/// let names: Vec<_> = events.iter().map(|(name, _)| *name).collect();
/// assert_eq!(
///     names,
///     ["message_start", "content_block_start", "content_block_delta", "content_block_stop", "message_delta", "message_stop"]
/// );
/// ```
///
/// Only the first choice is written. A tool call streams in its block while its fragments
/// come together, as providers stream them; a call that begins while the open one's arguments
/// are not yet whole JSON (a server that interleaves parallel calls' fragments) is held and
/// written whole once the open block ends, since Anthropic's stream has one block open at a
/// time. `message_start` reports the
/// usage of the first chunk, which only some upstreams tell (Gemini does; OpenAI-dialect
/// servers count at the end), else 0; the final `message_delta` carries both counts. Reasoning
/// (`reasoning_content`) of another dialect's model streams as a thinking block, signed when it
/// ends as the gateway's for the model that wrote it (see [`crate::codec::REASONING_SEAL`]):
/// sent back, it reaches that model again and no Claude, which would refuse the signature.
#[derive(Debug, Default)]
pub struct StreamEncoder {
    /// `message_start` was written.
    started: bool,
    /// `message_stop` was written: later calls write nothing.
    finished: bool,
    /// The content block index the next block gets.
    next_block: u32,
    /// The block started and not yet stopped, if any (Anthropic has one open at a time).
    open: Option<OpenBlock>,
    /// Canonical tool calls whose block was stopped: later fragments of them are dropped.
    closed_calls: HashSet<u32>,
    /// The open tool block's arguments so far: whole JSON says no fragment of it can follow.
    open_arguments: String,
    /// Calls begun while the open call could still go on, written whole when it ends.
    held: Vec<HeldCall>,
    /// The canonical finish reason of choice 0, once a chunk gave it.
    finish_reason: Option<FinishReason>,
    /// An Anthropic upstream's own `stop_reason`, from a chunk's `extra`; preferred over the
    /// one derived from `finish_reason`.
    stop_reason: Option<String>,
    /// An Anthropic upstream's matched stop sequence, from a chunk's `extra`.
    stop_sequence: Option<String>,
    /// The latest usage a chunk carried, written in the final `message_delta`.
    usage: Option<Usage>,
    /// The model `message_start` names, when not the chunks' (the one the client asked for).
    model: Option<String>,
    /// The model the chunks name (the one that answered): whose reasoning a thinking block
    /// holds, unless the caller said as what model it was called ([`Self::reasoned_by`]).
    answered_by: String,
    /// The model the answering target was called as, which signs its reasoning.
    called: Option<String>,
}

impl StreamEncoder {
    /// An encoder for one stream, before its first chunk.
    pub fn new() -> Self {
        Self::default()
    }

    /// An encoder whose `message_start` names `model` (the one the client asked for), whatever
    /// model answered.
    pub fn answering(model: &str) -> Self {
        Self { model: Some(model.to_owned()), ..Self::default() }
    }

    /// Signs the reasoning it writes as `model`'s, the model the answering target was called
    /// as: what its adapter compares the reasoning sent back with (a server may name itself
    /// otherwise in its chunks).
    pub fn reasoned_by(&mut self, model: &str) {
        self.called = Some(model.to_owned());
    }

    /// The events for one chunk.
    pub fn push(&mut self, chunk: &ChatChunk) -> Vec<Event> {
        let mut events = Vec::new();
        if self.finished {
            return events;
        }
        if !self.started {
            self.start(chunk, &mut events);
        }
        for choice in chunk.choices.iter().filter(|choice| choice.index == 0) {
            if let Some(reasoning) = choice.delta.reasoning_content.as_deref().filter(|r| !r.is_empty()) {
                self.reasoning(reasoning, &mut events);
            }
            // A model's refusal in words is text to an Anthropic client (see `response_to_json`).
            let text = choice.delta.content.as_deref().or(choice.delta.refusal.as_deref());
            if let Some(text) = text.filter(|text| !text.is_empty()) {
                if !matches!(self.open, Some(OpenBlock::Text { .. })) {
                    self.settle(&mut events);
                    let index = self.open_block(|index| OpenBlock::Text { index });
                    events.push(event(StreamEvent::ContentBlockStart {
                        index,
                        content_block: Block::Text { text: String::new() },
                    }));
                }
                self.delta(BlockDelta::TextDelta { text: text.to_owned() }, &mut events);
            }
            for call in &choice.delta.tool_calls {
                self.tool_fragment(call, &mut events);
            }
            if let Some(reason) = &choice.finish_reason {
                self.finish_reason = Some(reason.clone());
                self.settle(&mut events);
            }
        }
        if let Some(usage) = chunk.usage {
            self.usage = Some(usage);
        }
        if let Some(reason) = extra_str(&chunk.extra, "stop_reason") {
            self.stop_reason = Some(reason.to_owned());
        }
        if let Some(sequence) = extra_str(&chunk.extra, "stop_sequence") {
            self.stop_sequence = Some(sequence.to_owned());
        }
        events
    }

    /// Takes over a stream whose events so far were the provider's own (passed on as they
    /// came): `message_start` was sent, `blocks` content blocks were started, and `open` is the
    /// one not yet stopped, with whether it is text. Text then continues in an open text block.
    pub fn resume(&mut self, blocks: u32, open: Option<(u32, bool)>) {
        self.started = true;
        self.next_block = blocks;
        self.open = open
            .map(|(index, text)| if text { OpenBlock::Text { index } } else { OpenBlock::Other { index } });
    }

    /// The closing events, once the canonical stream ended without error: the open block's
    /// `content_block_stop`, `message_delta` and `message_stop`.
    pub fn finish(&mut self) -> Vec<Event> {
        let mut events = Vec::new();
        if self.finished {
            return events;
        }
        if !self.started {
            self.start(&ChatChunk::default(), &mut events);
        }
        self.settle(&mut events);
        self.finished = true;
        let stop_reason = match (&self.stop_reason, &self.finish_reason) {
            (Some(raw), _) => raw.clone(),
            (None, Some(reason)) => response::stop_reason(reason, self.stop_sequence.as_deref()).to_owned(),
            (None, None) => "end_turn".to_owned(),
        };
        // The counts of the whole answer, the cache's part of the prompt told apart.
        let usage = match &self.usage {
            Some(usage) => wire::Usage::of(usage),
            None => wire::Usage { output_tokens: Some(0), ..wire::Usage::default() },
        };
        events.push(event(StreamEvent::MessageDelta {
            delta: MessageDeltaBody {
                stop_reason: Some(stop_reason),
                stop_sequence: self.stop_sequence.clone(),
            },
            usage,
        }));
        events.push(event(StreamEvent::MessageStop));
        events
    }

    /// Writes `message_start` for the stream's first `chunk`: its id (a fresh `msg_` one when
    /// it has none), model, and the usage it tells (Gemini counts the prompt from the start),
    /// else zero.
    fn start(&mut self, chunk: &ChatChunk, events: &mut Vec<Event>) {
        self.started = true;
        self.answered_by.clone_from(&chunk.model);
        let id = &chunk.id;
        let usage = chunk.usage.map_or(
            wire::Usage { input_tokens: Some(0), output_tokens: Some(0), ..wire::Usage::default() },
            usage_of,
        );
        events.push(event(StreamEvent::MessageStart {
            message: MessageResponse {
                id: if id.is_empty() { crate::codec::fresh_id("msg_") } else { id.to_owned() },
                kind: "message".to_owned(),
                role: "assistant".to_owned(),
                model: self.model.clone().unwrap_or_else(|| chunk.model.clone()),
                content: Vec::new(),
                stop_reason: None,
                stop_sequence: None,
                usage,
            },
        }));
    }

    /// Makes `block` (given its index) the open block, taking the next index, and returns it.
    fn open_block(&mut self, block: impl FnOnce(u32) -> OpenBlock) -> u32 {
        let index = self.next_block;
        self.next_block += 1;
        self.open = Some(block(index));
        index
    }

    /// Writes `delta` as a `content_block_delta` of the open block; nothing when none is open.
    fn delta(&self, delta: BlockDelta, events: &mut Vec<Event>) {
        if let Some(open) = self.open {
            events.push(event(StreamEvent::ContentBlockDelta { index: open.index(), delta }));
        }
    }

    /// More of another dialect's reasoning: into the open thinking block, or a new one.
    fn reasoning(&mut self, reasoning: &str, events: &mut Vec<Event>) {
        if !matches!(self.open, Some(OpenBlock::Thinking { .. })) {
            self.settle(events);
            let index = self.open_block(|index| OpenBlock::Thinking { index });
            let block = json!({ "type": "thinking", "thinking": "", "signature": "" });
            events.push(event(StreamEvent::ContentBlockStart { index, content_block: Block::Raw(block) }));
        }
        self.delta(BlockDelta::ThinkingDelta { thinking: reasoning.to_owned() }, events);
    }

    /// One fragment of a tool call: into the open call's block, or a held call, or a new block
    /// (held while the open call could still go on).
    fn tool_fragment(&mut self, call: &switchyard::chat::ToolCallDelta, events: &mut Vec<Event>) {
        let function = call.function.as_ref();
        let arguments = function.and_then(|f| f.arguments.as_deref()).unwrap_or_default();
        if matches!(self.open, Some(OpenBlock::Tool { call: open, .. }) if open == call.index) {
            self.open_arguments.push_str(arguments);
            if !arguments.is_empty() {
                self.delta(BlockDelta::InputJsonDelta { partial_json: arguments.to_owned() }, events);
            }
            return;
        }
        if let Some(held) = self.held.iter_mut().find(|held| held.call == call.index) {
            held.arguments.push_str(arguments);
            return;
        }
        if self.closed_calls.contains(&call.index) {
            tracing::warn!(call = call.index, "a fragment after a tool call's whole arguments dropped");
            return;
        }
        let name = function.and_then(|f| f.name.clone()).unwrap_or_default();
        let id = call
            .id
            .as_deref()
            .filter(|id| !id.is_empty())
            .map_or_else(|| crate::codec::fresh_id("toolu_"), |id| crate::codec::tool_id(id).into_owned());
        let open_call_goes_on = matches!(self.open, Some(OpenBlock::Tool { .. }))
            && !crate::codec::is_whole_json(&self.open_arguments);
        if open_call_goes_on || !self.held.is_empty() {
            self.held.push(HeldCall { call: call.index, id, name, arguments: arguments.to_owned() });
            return;
        }
        self.close(events);
        self.write_call(HeldCall { call: call.index, id, name, arguments: arguments.to_owned() }, events);
    }

    /// Opens a tool block for `call` with its arguments so far (the block stays open).
    fn write_call(&mut self, call: HeldCall, events: &mut Vec<Event>) {
        let HeldCall { call, id, name, arguments } = call;
        let index = self.open_block(|index| OpenBlock::Tool { index, call });
        events.push(event(StreamEvent::ContentBlockStart {
            index,
            content_block: Block::ToolUse { id, name, input: json!({}) },
        }));
        if !arguments.is_empty() {
            self.delta(BlockDelta::InputJsonDelta { partial_json: arguments.clone() }, events);
        }
        self.open_arguments = arguments;
    }

    /// Closes the open block for good (text, the finish or the end follows), then writes each
    /// held call whole.
    fn settle(&mut self, events: &mut Vec<Event>) {
        self.close(events);
        for call in std::mem::take(&mut self.held) {
            self.write_call(call, events);
            self.close(events);
        }
    }

    /// Writes `content_block_stop` for the open block, if any, and remembers a closed tool call.
    fn close(&mut self, events: &mut Vec<Event>) {
        if let Some(open) = self.open.take() {
            if let OpenBlock::Tool { call, .. } = open {
                self.closed_calls.insert(call);
            }
            if let OpenBlock::Thinking { index } = open {
                let signature =
                    crate::codec::reasoning_signature(self.called.as_deref().unwrap_or(&self.answered_by));
                let delta = BlockDelta::Other(json!({ "type": "signature_delta", "signature": signature }));
                events.push(event(StreamEvent::ContentBlockDelta { index, delta }));
            }
            self.open_arguments.clear();
            events.push(event(StreamEvent::ContentBlockStop { index: open.index() }));
        }
    }
}

/// A tool call held until the open block ends.
#[derive(Debug)]
struct HeldCall {
    call: u32,
    id: String,
    name: String,
    arguments: String,
}

/// `event` as its SSE name and JSON data.
fn event(event: StreamEvent) -> Event {
    (event.name(), to_json(&event))
}
