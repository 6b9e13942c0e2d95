//! The Chat Completions dialect on the server side: what the gateway's `/v1/chat/completions`
//! endpoint uses to read a client's request into the canonical types and to write the answer
//! and its stream back. The canonical types are this dialect's shapes, so reading is serde
//! and writing fills in what a translated answer lacks (an id, a time, the `object`); a
//! request keeps its bytes, and an OpenAI-dialect provider's answer and events pass back as
//! the provider wrote them.
//!
//! ```
//! use switchyard::chat::{ChatResponse, Dialect};
//! use switchyard_providers::openai::codec;
//!
//! let body = br#"{"model": "default", "messages": [{"role": "user", "content": "Hi"}], "seed": 7}"#;
//! let request = codec::request_from_bytes(&bytes::Bytes::from_static(body)).unwrap();
//! assert_eq!((request.origin, request.seed), (Dialect::OpenAi, Some(7)));
//!
//! let mut answer = ChatResponse::from_text("gpt-4o-mini", "Hello.");
//! let json: serde_json::Value = serde_json::from_slice(&codec::response_body(&mut answer, "req_1", 1_700_000_000)).unwrap();
//! assert_eq!((json["id"].as_str(), json["object"].as_str()), (Some("chatcmpl-req_1"), Some("chat.completion")));
//! ```

use bytes::Bytes;
use serde_json::Value;
use switchyard::chat::{ChatChunk, ChatRequest, ChatResponse, Dialect, Usage, Verbatim};

use crate::codec::{CodecError, StreamWriter, write_data};

/// Reads a Chat Completions request; its bytes ride along, so that an OpenAI-dialect provider
/// receives the body as written, not a translation of it.
pub fn request_from_bytes(bytes: &Bytes) -> Result<ChatRequest, serde_json::Error> {
    let mut request = switchyard::serde_extra::from_slice::<ChatRequest>(bytes)?;
    request.verbatim = Some(Verbatim::new(Dialect::OpenAi, bytes.clone()));
    request.origin = Dialect::OpenAi;
    Ok(request)
}

/// Refuses a request with no messages (every provider would).
pub fn check(request: &ChatRequest) -> Result<(), CodecError> {
    if request.messages.is_empty() {
        return Err(CodecError::new("messages", "is empty: send at least one message"));
    }
    Ok(())
}

/// The answer's body: the provider's own when it spoke this dialect (as it wrote it, or as it
/// would have written the stream it sent whole), else the canonical answer with an id
/// (`chatcmpl-` and the request's id), a time and its `object` where it had none.
pub fn response_body(response: &mut ChatResponse, request_id: &str, now: u64) -> Bytes {
    if let Some(body) = response.verbatim.take().and_then(|v| v.in_dialect(Dialect::OpenAi).cloned()) {
        return body;
    }
    let frames: Vec<Bytes> =
        response.frames.iter().filter_map(|v| v.in_dialect(Dialect::OpenAi).cloned()).collect();
    if !frames.is_empty()
        && let Some(body) = super::assemble::answer_of_frames(&frames, response.usage.as_ref())
    {
        return body;
    }
    if response.id.is_empty() {
        response.id = ["chatcmpl-", request_id].concat();
    }
    if response.created == 0 {
        response.created = now;
    }
    response.extra.entry("object").or_insert_with(|| Value::from("chat.completion"));
    // OpenAI writes both on every message, `null` when empty (a call without words): clients
    // test them against null.
    for message in response.choices.iter_mut().map(|choice| &mut choice.message) {
        if message.content.is_none() {
            message.extra.insert("content".to_owned(), Value::Null);
        }
        message.extra.entry("refusal").or_insert(Value::Null);
    }
    // Serializing the canonical types cannot fail.
    Bytes::from(serde_json::to_vec(response).unwrap_or_default())
}

/// Whether the client asked for the usage chunk (`stream_options.include_usage`).
pub fn wants_usage(request: &ChatRequest) -> bool {
    request
        .extra
        .get("stream_options")
        .and_then(|o| o.get("include_usage"))
        .and_then(Value::as_bool)
        .unwrap_or(false)
}

/// OpenAI's `chat.completion.chunk` events, ending with `data: [DONE]`. Usage goes in a chunk
/// of its own with `choices: []`, last, as OpenAI writes it (only when the client asked):
/// translated streams (Anthropic's, Gemini's) tell it on their finish chunk.
pub struct ChatStreamWriter {
    id: String,
    created: u64,
    include_usage: bool,
    /// The usage seen so far and the model that answered, for the usage chunk.
    usage: Option<(Usage, String)>,
}

impl ChatStreamWriter {
    /// A writer for the stream of request `request_id`, begun at `now` (Unix seconds), with
    /// the usage chunk when `include_usage`.
    pub fn new(request_id: &str, now: u64, include_usage: bool) -> Self {
        Self { id: ["chatcmpl-", request_id].concat(), created: now, include_usage, usage: None }
    }
}

impl StreamWriter for ChatStreamWriter {
    fn frame(&mut self, chunk: &ChatChunk) -> Option<Bytes> {
        // The provider's own event (its adapter leaves the frame off a usage chunk the client
        // did not ask for).
        chunk.verbatim.as_ref().and_then(|v| v.in_dialect(Dialect::OpenAi)).cloned()
    }

    fn chunk(&mut self, mut chunk: ChatChunk, out: &mut Vec<u8>) {
        if let Some(usage) = chunk.usage.take() {
            self.usage = Some((usage, chunk.model.clone()));
        }
        if chunk.choices.is_empty() {
            return;
        }
        if chunk.id.is_empty() {
            chunk.id.clone_from(&self.id);
        }
        if chunk.created == 0 {
            chunk.created = self.created;
        }
        // The usage chunk, written at the end, carries the id and time of the others.
        self.id.clone_from(&chunk.id);
        self.created = chunk.created;
        chunk.extra.entry("object").or_insert_with(|| "chat.completion.chunk".into());
        write_data(out, &chunk);
    }

    fn end(&mut self, out: &mut Vec<u8>) {
        if self.include_usage
            && let Some((usage, model)) = self.usage.take()
        {
            let mut chunk =
                ChatChunk { id: self.id.clone(), model, created: self.created, ..ChatChunk::default() };
            chunk.usage = Some(usage);
            chunk.extra.insert("object".to_owned(), "chat.completion.chunk".into());
            write_data(out, &chunk);
        }
        out.extend_from_slice(b"data: [DONE]\n\n");
    }
}
