//! The Anthropic dialect on the server side: what the gateway's `/v1/messages` endpoint uses to
//! read a Messages API request into the canonical types and to write canonical answers, streams
//! and errors back in Anthropic's shapes. Pure functions, no HTTP.
//!
//! ```
//! use serde_json::json;
//! use switchyard::chat::{ChatResponse, Dialect};
//! use switchyard_providers::anthropic::codec;
//!
//! let request = codec::request_from_json(json!({
//!     "model": "default",
//!     "max_tokens": 256,
//!     "system": "Be terse.",
//!     "messages": [{"role": "user", "content": "Hello!"}],
//!     "top_k": 40,
//! }))
//! .unwrap();
//! assert_eq!(request.origin, Dialect::Anthropic);
//! assert_eq!(request.messages.len(), 2); // the system prompt is the first canonical message
//! assert_eq!(request.extra["top_k"], 40); // unknown fields ride along for an Anthropic upstream
//!
//! let answer = ChatResponse::from_text("claude-sonnet-4-5", "Hi.");
//! let body = codec::response_to_json(&answer).unwrap();
//! assert_eq!(body["content"][0], json!({"type": "text", "text": "Hi."}));
//! assert_eq!(body["stop_reason"], "end_turn");
//! ```
//!
//! What the canonical types cannot hold is kept, not lost, when the request is also served by
//! Anthropic: blocks with `cache_control`, thinking blocks, `is_error` tool results and the like
//! are kept verbatim in the message's `extra` (under `anthropic_blocks`) and sent as they came.
//! Served by another provider, those details are dropped: they are hints or past reasoning,
//! never the question itself. User content the canonical types cannot carry (documents, search
//! results) is refused with a [`CodecError`] naming the field, since dropping it would change
//! the question.

mod decode;
mod encode;

use serde_json::Value;
use switchyard::ErrorKind;
use switchyard::chat::ChatRequest;

pub use decode::{request_from_json, request_from_slice};
pub use encode::{StreamEncoder, response_to_json};

use super::wire::{ErrorBody, ErrorResponse};

/// One server-sent event: its `event:` name and its `data:` JSON.
pub type Event = (&'static str, Value);

pub use crate::codec::CodecError;

/// The fields of an Anthropic client's `request` that only a provider spoken to in the
/// Messages API reads (`container`, `mcp_servers`, fields Switchyard does not know): a
/// provider of OpenAI's dialect is not sent them. Left out of the list: what
/// every dialect ignores ([`crate::codec::is_harmless_foreign`]), and what the others
/// translate or refuse (`thinking`, `output_config`, `top_k`). In the order of their names.
pub fn read_only_by_anthropic(request: &ChatRequest) -> Vec<&str> {
    let translated = ["thinking", "output_config", "top_k"];
    let mut fields: Vec<&str> = request
        .extra
        .iter()
        .filter(|(key, value)| {
            !crate::codec::is_harmless_foreign(key, value) && !translated.contains(&key.as_str())
        })
        .map(|(key, _)| key.as_str())
        .collect();
    fields.sort_unstable();
    fields
}

/// The Anthropic error type and HTTP status that tell an Anthropic client what a failure of
/// `kind` means (and whether its SDK should retry: it retries 429 and 5xx).
///
/// | kind | type | status |
/// |---|---|---|
/// | rate_limited | `rate_limit_error` | 429 |
/// | quota_exceeded | `billing_error` | 402 |
/// | timeout | `timeout_error` | 504 |
/// | transport, malformed_response | `api_error` | 502 |
/// | unavailable | `overloaded_error` | 529 |
/// | auth | `authentication_error` | 401 |
/// | model_not_found | `not_found_error` | 404 |
/// | context_length, content_filtered, invalid_request | `invalid_request_error` | 400 |
/// | schema_violation | `api_error` | 500 |
/// | cancelled | `api_error` | 499 (the client is gone; nobody reads it) |
pub fn error_mapping(kind: ErrorKind) -> (&'static str, u16) {
    match kind {
        ErrorKind::RateLimited => ("rate_limit_error", 429),
        ErrorKind::QuotaExceeded => ("billing_error", 402),
        ErrorKind::Timeout => ("timeout_error", 504),
        ErrorKind::Transport | ErrorKind::MalformedResponse => ("api_error", 502),
        ErrorKind::Unavailable => ("overloaded_error", 529),
        ErrorKind::Auth => ("authentication_error", 401),
        ErrorKind::ModelNotFound => ("not_found_error", 404),
        ErrorKind::ContextLength | ErrorKind::ContentFiltered | ErrorKind::InvalidRequest => {
            ("invalid_request_error", 400)
        }
        ErrorKind::SchemaViolation => ("api_error", 500),
        ErrorKind::Cancelled => ("api_error", 499),
    }
}

/// The Anthropic error type for `kind` (see [`error_mapping`]).
pub fn error_type(kind: ErrorKind) -> &'static str {
    error_mapping(kind).0
}

/// The HTTP status for `kind` (see [`error_mapping`]).
pub fn error_status(kind: ErrorKind) -> u16 {
    error_mapping(kind).1
}

/// An error in Anthropic's shape: `{"type": "error", "error": {"type": ..., "message": ...}}`.
///
/// ```
/// use switchyard::ErrorKind;
/// use switchyard_providers::anthropic::codec;
///
/// let body = codec::error_body(ErrorKind::Unavailable, "every target is overloaded");
/// assert_eq!(body["error"]["type"], "overloaded_error");
/// assert_eq!(codec::error_status(ErrorKind::Unavailable), 529);
/// ```
pub fn error_body(kind: ErrorKind, message: &str) -> Value {
    encode::to_json(&ErrorResponse {
        kind: "error".to_owned(),
        error: ErrorBody { kind: error_type(kind).to_owned(), message: message.to_owned(), details: None },
        request_id: None,
    })
}

/// The `error` event that ends a stream which failed after it started.
pub fn error_event(kind: ErrorKind, message: &str) -> Event {
    ("error", error_body(kind, message))
}

/// The answer's body: the provider's own when an Anthropic provider answered (as it wrote it,
/// or as it would have written the stream it sent whole), else the canonical answer written in
/// the Messages API's shape; `Err` when it cannot be (a tool call of a kind the Messages API
/// has no form for).
pub fn response_body(
    response: &mut switchyard::chat::ChatResponse,
    asked: &str,
) -> Result<bytes::Bytes, CodecError> {
    use switchyard::chat::Dialect;
    let named = |body: &[u8]| {
        let edits = [("model", crate::verbatim::Edit::Text(asked))];
        crate::verbatim::rewrite(body, &edits)
            .map(bytes::Bytes::from)
            .map_err(|error| CodecError::new("model", error.detail().to_owned()))
    };
    if let Some(verbatim) = response.verbatim.take()
        && verbatim.dialect() == Dialect::Anthropic
    {
        return named(verbatim.bytes());
    }
    let frames: Vec<bytes::Bytes> =
        response.frames.iter().filter_map(|v| v.in_dialect(Dialect::Anthropic).cloned()).collect();
    if !frames.is_empty()
        && let Some(body) = super::assemble::answer_of_frames(&frames)
    {
        return named(&body);
    }
    let answered_by = std::mem::replace(&mut response.model, asked.to_owned());
    Ok(bytes::Bytes::from(encode::answer_json(response, &answered_by)?.to_string()))
}

/// Anthropic's stream events from canonical chunks, or the provider's own events passed on
/// (the provider's `message_stop` then ends the stream, and nothing is added).
#[derive(Debug, Default)]
pub struct MessagesStreamWriter {
    encoder: StreamEncoder,
    /// A provider's own event was passed on.
    native: bool,
    /// The content blocks the provider's own events started, and the one still open (with
    /// whether it is text): where canonical chunks take over, when they follow (a stream
    /// continued by another target).
    blocks: NativeBlocks,
    /// Canonical chunks took over from the provider's own events.
    resumed: bool,
    /// The model the answer names: the one the client asked for.
    model: Option<String>,
}

/// What the provider's own events said of the message, read from their first line.
#[derive(Debug, Default)]
struct NativeBlocks {
    /// Content blocks started.
    started: u32,
    /// The block not yet stopped, with whether it is text.
    open: Option<(u32, bool)>,
    /// `message_delta` came: the provider said why the answer stopped.
    stopped: bool,
    /// `message_stop` came.
    ended: bool,
}

impl NativeBlocks {
    /// Takes note of one of the provider's events, as it was framed.
    fn saw(&mut self, frame: &[u8]) {
        if frame.starts_with(b"event: content_block_start") {
            let has = |needle: &[u8]| frame.windows(needle.len()).any(|w| w == needle);
            let text = has(br#""type":"text""#) || has(br#""type": "text""#);
            self.open = Some((self.started, text));
            self.started += 1;
        } else if frame.starts_with(b"event: content_block_stop") {
            self.open = None;
        } else if frame.starts_with(b"event: message_delta") {
            self.stopped = true;
        } else if frame.starts_with(b"event: message_stop") {
            self.ended = true;
        }
    }
}

impl MessagesStreamWriter {
    /// A writer for one stream, before its first chunk.
    pub fn new() -> Self {
        Self::default()
    }

    /// A writer whose `message_start` names `model`, the one the client asked for, whatever
    /// model answered (the provider's own event is edited to say it). Claude Code sends back a
    /// past turn's thinking only when that turn's `model` is the one it asks for now: named
    /// after the model that answered, a route's thinking was dropped from every later turn.
    pub fn answering(model: &str) -> Self {
        Self { encoder: StreamEncoder::answering(model), model: Some(model.to_owned()), ..Self::default() }
    }

    /// The same, signing the reasoning it writes as `model`'s (see [`StreamEncoder::reasoned_by`]).
    pub fn reasoned_by(mut self, model: Option<&str>) -> Self {
        if let Some(model) = model {
            self.encoder.reasoned_by(model);
        }
        self
    }
}

/// A provider's `message_start` event (`frame`, as framed) naming `model` instead of the one
/// that answered; `None` when it cannot be read as one.
fn start_naming(frame: &[u8], model: &str) -> Option<bytes::Bytes> {
    let text = std::str::from_utf8(frame).ok()?;
    let data: String =
        text.lines().filter_map(|line| line.strip_prefix("data:")).map(str::trim_start).collect();
    let mut event: serde_json::Value = serde_json::from_str(&data).ok()?;
    *event.get_mut("message")?.get_mut("model")? = serde_json::Value::from(model);
    let mut out = Vec::with_capacity(frame.len() + model.len());
    crate::codec::write_event(&mut out, "message_start", &event);
    Some(bytes::Bytes::from(out))
}

impl crate::codec::StreamWriter for MessagesStreamWriter {
    fn frame(&mut self, chunk: &switchyard::chat::ChatChunk) -> Option<bytes::Bytes> {
        let frame =
            chunk.verbatim.as_ref().and_then(|v| v.in_dialect(switchyard::chat::Dialect::Anthropic))?;
        self.native = true;
        self.blocks.saw(frame);
        if let Some(model) = self.model.as_deref()
            && frame.starts_with(b"event: message_start")
        {
            return Some(start_naming(frame, model).unwrap_or_else(|| frame.clone()));
        }
        Some(frame.clone())
    }

    fn chunk(&mut self, chunk: switchyard::chat::ChatChunk, out: &mut Vec<u8>) {
        if self.native {
            if self.blocks.stopped {
                // The provider's events said all but `message_stop`, which `end` adds.
                return;
            }
            if !self.resumed {
                self.resumed = true;
                self.encoder.resume(self.blocks.started, self.blocks.open);
            }
        }
        for (name, data) in self.encoder.push(&chunk) {
            crate::codec::write_event(out, name, &data);
        }
    }

    fn end(&mut self, out: &mut Vec<u8>) {
        if self.native && !self.resumed {
            // A stream that ended after its `message_delta` without `message_stop` (passed as
            // whole) is given the missing event.
            if self.blocks.stopped && !self.blocks.ended {
                crate::codec::write_event(out, "message_stop", &serde_json::json!({"type": "message_stop"}));
            }
            return;
        }
        for (name, data) in self.encoder.finish() {
            crate::codec::write_event(out, name, &data);
        }
    }
}
