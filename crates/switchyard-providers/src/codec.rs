//! What the client codecs share. Each dialect's module holds its codec beside its adapter
//! (`openai::codec`, `anthropic::codec`, `responses`): it reads a client's request into the
//! canonical types and writes canonical answers and streams back in the client's shapes. Here
//! are the error of a request a codec cannot read ([`CodecError`]), and the writer of a stream
//! in a client's dialect ([`StreamWriter`]) with the server-sent-event framing they all use.

use std::fmt;

use bytes::Bytes;
use switchyard::ProviderError;
use switchyard::chat::ChatChunk;

/// A request (or answer) a codec cannot read or write, naming the field at fault by its JSON
/// path (`messages[2].content[0].type`, `input[0].call_id`; `body` for the body as a whole).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CodecError {
    /// The JSON path of the field at fault.
    pub field: String,
    /// What is wrong with it, phrased to follow the field (`is required`, `must be a string`).
    pub reason: String,
}

impl CodecError {
    /// An error about `field` (a JSON path) for `reason`.
    pub(crate) fn new(field: impl Into<String>, reason: impl Into<String>) -> Self {
        Self { field: field.into(), reason: reason.into() }
    }
}

impl fmt::Display for CodecError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "`{}` {}", self.field, self.reason)
    }
}

impl std::error::Error for CodecError {}

/// Writes one routed stream in a client's dialect: the events of each canonical chunk (or the
/// provider's own event, passed on as it is), the events that end it, and those of a failure
/// after it began. The gateway drives it and sends what it writes.
pub trait StreamWriter: Send + Unpin + 'static {
    /// The provider's own event for `chunk`, when this writer passes it on as it is (a client
    /// of the provider's dialect): sent whole, without a copy. `None` (the default) has
    /// [`chunk`](StreamWriter::chunk) write the chunk's events.
    fn frame(&mut self, chunk: &ChatChunk) -> Option<Bytes> {
        let _ = chunk;
        None
    }

    /// The events for one chunk (possibly none).
    fn chunk(&mut self, chunk: ChatChunk, out: &mut Vec<u8>);

    /// The events that end a successful stream.
    fn end(&mut self, out: &mut Vec<u8>);

    /// The events that end a stream failed after it began; `false` leaves them to the
    /// caller's error event for the dialect.
    fn fail(&mut self, error: &ProviderError, out: &mut Vec<u8>) -> bool {
        let _ = (error, out);
        false
    }
}

/// Writes `value` as one server-sent event's `data:` line and its blank line.
pub fn write_data(out: &mut Vec<u8>, value: &impl serde::Serialize) {
    out.extend_from_slice(b"data: ");
    // Serializing the canonical types cannot fail; an empty object keeps the stream well-formed.
    if serde_json::to_writer(&mut *out, value).is_err() {
        out.extend_from_slice(b"{}");
    }
    out.extend_from_slice(b"\n\n");
}

/// Writes `value` as one server-sent event named `name`.
pub fn write_event(out: &mut Vec<u8>, name: &str, value: &impl serde::Serialize) {
    out.extend_from_slice(b"event: ");
    out.extend_from_slice(name.as_bytes());
    out.push(b'\n');
    write_data(out, value);
}

/// A request body as a JSON object, each member given once (see
/// [`switchyard::serde_extra::unique_members`]); else the error that says what it is not.
pub fn body_object(body: &[u8]) -> Result<serde_json::Map<String, serde_json::Value>, CodecError> {
    switchyard::serde_extra::unique_members(body).map_err(|error| {
        let twice = error.to_string().starts_with("duplicate field");
        match error.classify() {
            serde_json::error::Category::Data if !twice => CodecError::new("body", "must be a JSON object"),
            _ => CodecError::new("body", format!("is not valid JSON: {error}")),
        }
    })
}

/// The signature the gateway gives a thinking block it writes for an Anthropic client from
/// another dialect's reasoning (an OpenAI-compatible server's `reasoning_content`, Gemini's
/// thoughts): `switchyard.reasoning.v1:` and the model that reasoned. Anthropic would refuse it,
/// so no Claude is sent it; sent back, it carries the reasoning to the model that wrote it,
/// which may need it (DeepSeek refuses a tool turn sent back without its `reasoning_content`).
pub const REASONING_SEAL: &str = "switchyard.reasoning.v1:";

/// The key of a canonical assistant message's `extra` holding the reasoning an Anthropic
/// client sent back under [`REASONING_SEAL`]: `{"model", "text"}` (`model` empty for a block
/// cut before it was signed, which no model reads back). Never sent as written.
pub const SEALED_REASONING: &str = "sealed_reasoning";

/// The signature of reasoning `model` wrote (see [`REASONING_SEAL`]).
pub(crate) fn reasoning_signature(model: &str) -> String {
    format!("{REASONING_SEAL}{model}")
}

/// Whether a thinking `block` carries reasoning the gateway signed (see [`REASONING_SEAL`]).
pub(crate) fn is_sealed_reasoning(block: &serde_json::Value) -> bool {
    block["signature"].as_str().is_some_and(|signature| signature.starts_with(REASONING_SEAL))
}

/// Whether a thinking `block` no Claude takes back: the gateway's (see [`REASONING_SEAL`]), or
/// one without a signature (cut before it was signed, as a stream that broke while Claude
/// thought leaves it).
pub(crate) fn is_unsendable_thinking(block: &serde_json::Value) -> bool {
    block["type"] == "thinking"
        && (is_sealed_reasoning(block) || block["signature"].as_str().is_none_or(str::is_empty))
}

/// The reasoning an assistant `message` sent back sealed, when `model` wrote it: what its
/// server is given back as the message's `reasoning_content`.
pub(crate) fn sealed_reasoning_of<'m>(
    message: &'m switchyard::chat::Message,
    model: &str,
) -> Option<&'m str> {
    let sealed = message.extra.get(SEALED_REASONING)?;
    let writer = sealed["model"].as_str()?;
    writer.eq_ignore_ascii_case(model).then(|| sealed["text"].as_str()).flatten()
}

/// Whether a tool call's `arguments` so far are whole JSON, so that no fragment of them can
/// follow: a writer that holds a call begun while another goes on asks it of the open call.
pub(crate) fn is_whole_json(arguments: &str) -> bool {
    serde_json::from_str::<serde::de::IgnoredAny>(arguments).is_ok()
}

/// A fresh id with `prefix` (`msg_`, `toolu_`, `call_`): unique within the process and across
/// restarts (the time in nanoseconds, then a counter), for what an answer must name and its
/// provider did not.
pub(crate) fn fresh_id(prefix: &str) -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::time::{SystemTime, UNIX_EPOCH};
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let nanos = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_nanos());
    format!("{prefix}{nanos:x}{:04x}", COUNTER.fetch_add(1, Ordering::Relaxed))
}

/// A tool call's id as Anthropic and Bedrock's Converse take one (`^[a-zA-Z0-9_-]+$`): every
/// other character `_`. Ids of other servers (`functions.get_weather:0` from Kimi on vLLM) would
/// be refused; the same id always gives the same one, so a call and its result still pair.
pub(crate) fn tool_id(id: &str) -> std::borrow::Cow<'_, str> {
    let allowed = |c: char| c.is_ascii_alphanumeric() || c == '_' || c == '-';
    if id.chars().all(allowed) {
        return std::borrow::Cow::Borrowed(id);
    }
    std::borrow::Cow::Owned(id.chars().map(|c| if allowed(c) { c } else { '_' }).collect())
}

/// The refusal (unsupported: the route goes on) of message `i`, a `function` message of
/// OpenAI's legacy function calling, toward `api`, which has no such thing.
pub(crate) fn legacy_function_message(i: usize, api: &str) -> switchyard::ProviderError {
    switchyard::ProviderError::unsupported(format!(
        "messages[{i}] is a `function` message (OpenAI's legacy function calling), which {api} cannot express: send `tools` and `tool` messages"
    ))
}

/// Whether `field` names a top-level member of a request (`frequency_penalty`), not a place
/// within one (`messages[1].content`): what a refusal names as its
/// [`param`](switchyard::ProviderError::param).
pub(crate) fn is_member_name(field: &str) -> bool {
    !field.is_empty() && field.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
}

/// Whether a field of another dialect's request changes nothing a provider without it answers,
/// so that its adapter leaves it out rather than refusing the request: OpenAI's `user`,
/// `metadata`, `stream_options`, `parallel_tool_calls`, `store`, `service_tier`,
/// `safety_identifier`, `prompt_cache_key`; Anthropic's `context_management` and an
/// `output_config` without a `format`; a null; defaults spelled out (`n: 1`, `logprobs:
/// false`). Claude Code and the OpenAI SDKs send some of these on every request.
pub(crate) fn is_harmless_foreign(key: &str, value: &serde_json::Value) -> bool {
    match key {
        _ if value.is_null() => true,
        "user"
        | "metadata"
        | "stream_options"
        | "parallel_tool_calls"
        | "store"
        | "service_tier"
        | "safety_identifier"
        | "prompt_cache_key"
        | "context_management" => true,
        "output_config" => value.get("format").is_none(),
        "logprobs" => value == &serde_json::Value::Bool(false),
        "n" => value.as_u64() == Some(1),
        _ => false,
    }
}

/// Refuses (as unsupported: the route goes on) a tool result of `messages[i]` holding more than
/// text, which `api`'s tool results cannot carry: sent without it, the model would answer
/// without the image or document a tool returned.
pub(crate) fn text_only_tool_result(
    message: &switchyard::chat::Message,
    i: usize,
    api: &str,
) -> Result<(), switchyard::ProviderError> {
    use switchyard::chat::{Content, ContentPart};
    let Some(Content::Parts(parts)) = &message.content else { return Ok(()) };
    match parts.iter().position(|part| !matches!(part, ContentPart::Text { .. })) {
        Some(j) => Err(switchyard::ProviderError::unsupported(format!(
            "messages[{i}].content[{j}] is a `{}` part in a tool result, which {api} cannot carry",
            parts[j].kind()
        ))),
        None => Ok(()),
    }
}

/// Whether tool message `message` reports a failed call: an Anthropic client's `tool_result`
/// with `is_error: true` (kept with the message's blocks as written), which Converse writes as
/// `status: "error"` and Gemini as an `error` response.
pub(crate) fn tool_failed(message: &switchyard::chat::Message) -> bool {
    let blocks = message.extra.get(crate::anthropic::VERBATIM_BLOCKS);
    blocks.and_then(|blocks| blocks.get(0)).is_some_and(|block| block["is_error"] == true)
}

/// Whether `schema` is one OpenAI's strict mode takes: each object closed
/// (`additionalProperties: false`) with every property required, all the way down.
pub(crate) fn strict_ready(schema: &serde_json::Value) -> bool {
    use serde_json::Value;
    match schema {
        Value::Object(node) => {
            if let Some(Value::Object(properties)) = node.get("properties") {
                let required = node.get("required").and_then(Value::as_array);
                let all_required = properties
                    .keys()
                    .all(|key| required.is_some_and(|required| required.iter().any(|r| r == key.as_str())));
                if !all_required || node.get("additionalProperties") != Some(&Value::Bool(false)) {
                    return false;
                }
            }
            node.values().all(strict_ready)
        }
        Value::Array(items) => items.iter().all(strict_ready),
        _ => true,
    }
}
