//! Streamed Chat Completions: `data: <chunk>` events ended by `data: [DONE]`.
//!
//! Each chunk becomes one canonical [`ChatChunk`]; the final usage chunk (empty `choices`)
//! becomes a chunk that carries only `usage`. An `error` object inside the stream ends it with
//! that error, classified; a body that ends before `[DONE]` ends it with a transport error, so
//! that a cut-off answer never passes for a complete one, unless every choice it had finished
//! (then it is whole, and a notice says the terminator was missing). An event that is no
//! chunk is skipped with a notice, up to [`crate::sse::MAX_SKIPPED`] of them; one more fails
//! the stream.

use std::sync::LazyLock;
use std::task::{Context, Poll, ready};

use futures_util::{StreamExt, stream};
use memchr::memmem;
use serde::Deserialize;
use serde_json::Value;
use switchyard::assembly::Finishes;
use switchyard::chat::{
    ChatChunk, ChatResponse, ChunkChoice, Delta, Dialect, Extra, FinishReason, FunctionCallDelta, Role,
    StreamNotice, ToolCallDelta, Verbatim,
};
use switchyard::credential::Secret;
use switchyard::deserialize_with_extra;
use switchyard::provider::ChunkStream;
use switchyard::{ErrorKind, ProviderError};

use super::errors;
use super::wire::{UsageIn, arguments_text, nullable};
use crate::sse::{ReadChunks, Skips, SseEvent, SseStream};

/// The chunks of a streaming response. The body is read as it arrives, never buffered whole.
pub(super) fn chunks(
    response: crate::http::Response,
    key: Option<Secret>,
    pass_on: Option<PassOn>,
) -> ChunkStream {
    // Body errors name no URL, so nothing in a query string reaches an error text.
    let body = crate::http::body_stream(response);
    let reader = Reader {
        events: SseStream::new(body),
        key,
        ended: false,
        pass_on,
        choices: Finishes::default(),
        skips: Skips::default(),
    };
    crate::sse::read_chunks(reader)
}

/// A whole answer as a stream, for servers that answer a streaming request with plain JSON.
pub(super) fn from_response(answer: ChatResponse) -> ChunkStream {
    Box::pin(stream::iter(answer.into_chunks().into_iter().map(Ok)))
}

/// How the events of a request sent verbatim are passed on: each chunk carries its event's
/// frame, so that a client of this dialect receives what the provider wrote.
#[derive(Debug, Clone, Copy)]
pub(super) struct PassOn {
    /// Whether the client asked for the usage chunk; when only the gateway did, that chunk
    /// carries no frame, and a client encoder leaves it out.
    pub(super) usage_chunk: bool,
}

/// The response body the stream reads.
type Body = crate::http::BodyStream;

/// The state of one streaming response between chunks.
struct Reader {
    /// The SSE events of the body.
    events: SseStream<Body>,
    /// Scrubbed from any error text the provider sends.
    key: Option<Secret>,
    /// `[DONE]` or an error was seen: the stream yields nothing more.
    ended: bool,
    /// Set when the request went out verbatim: chunks carry their frames.
    pass_on: Option<PassOn>,
    /// The choices begun and those finished: a body that ends without `[DONE]` once every
    /// choice begun has finished is whole.
    choices: Finishes,
    /// Events skipped as unreadable so far.
    skips: Skips,
}

/// What one event amounts to.
// Boxing the chunk would cost an allocation per chunk; a step lives for one event.
#[allow(clippy::large_enum_variant)]
enum Step {
    /// A chunk to yield.
    Chunk(ChatChunk),
    /// Nothing to yield (an empty event, a chunk that says nothing): read the next event.
    Skip,
    /// `data: [DONE]`: the answer is complete.
    Done,
    /// The stream ends with this error.
    Fail(ProviderError),
    /// An event that is no chunk: skipped (the notice that says so) while few are and it
    /// carried no part of the answer, else the error that ends the stream.
    Unreadable(Result<ChatChunk, ProviderError>),
}

impl ReadChunks for Reader {
    type Events = SseStream<Body>;

    /// The next chunk, or the error that ends the stream; `None` after `[DONE]` or an error.
    fn poll_chunk(&mut self, cx: &mut Context<'_>) -> Poll<Option<Result<ChatChunk, ProviderError>>> {
        while !self.ended {
            let step = match ready!(self.events.poll_next_unpin(cx)) {
                Some(Ok(event)) => match (self.translate(&event), self.pass_on) {
                    (Step::Chunk(chunk), Some(pass_on)) => Step::Chunk(Self::framed(chunk, &event, pass_on)),
                    // A chunk that says nothing canonical still reaches a client of this
                    // dialect (Azure's prompt-filter results).
                    (Step::Skip, Some(pass_on)) if !event.data.trim().is_empty() => {
                        Step::Chunk(Self::framed(ChatChunk::default(), &event, pass_on))
                    }
                    (step, _) => step,
                },
                Some(Err(error)) => Step::Fail(error),
                None if self.choices.is_whole() => {
                    // The answer finished; only its terminator is missing.
                    self.ended = true;
                    return Poll::Ready(Some(Ok(ChatChunk::notice(StreamNotice::Unterminated))));
                }
                None => Step::Fail(self.cut_off()),
            };
            match step {
                Step::Chunk(chunk) => {
                    self.choices.see(&chunk);
                    return Poll::Ready(Some(Ok(chunk)));
                }
                Step::Skip => {}
                Step::Done => {
                    self.ended = true;
                    if self.choices.is_unfinished() {
                        return Poll::Ready(Some(Ok(ChatChunk::notice(StreamNotice::TerminatedUnfinished))));
                    }
                }
                Step::Unreadable(skipped) => match skipped {
                    Ok(notice) => return Poll::Ready(Some(Ok(notice))),
                    Err(error) => {
                        self.ended = true;
                        return Poll::Ready(Some(Err(error)));
                    }
                },
                Step::Fail(error) => {
                    self.ended = true;
                    return Poll::Ready(Some(Err(error)));
                }
            }
        }
        Poll::Ready(None)
    }

    fn into_events(self) -> SseStream<Body> {
        self.events
    }
}

impl Reader {
    /// `chunk` carrying its event's frame, but for the usage chunk the client did not ask for.
    fn framed(mut chunk: ChatChunk, event: &SseEvent, pass_on: PassOn) -> ChatChunk {
        let usage_only = chunk.choices.is_empty() && chunk.usage.is_some();
        if pass_on.usage_chunk || !usage_only {
            chunk.verbatim = Some(Verbatim::new(Dialect::OpenAi, event.to_frame()));
        }
        chunk
    }

    /// What `event` amounts to: `[DONE]`, a chunk, or an error (an `error` object, an
    /// `event: error`, or data that is not a chunk).
    fn translate(&mut self, event: &SseEvent) -> Step {
        let data = event.data.trim();
        if data == "[DONE]" {
            return Step::Done;
        }
        if data.is_empty() {
            return Step::Skip;
        }
        // The common case first, straight from the text: a chunk that is no error. Only an
        // event that is not one is read as a JSON tree, to find an error object or say what
        // is wrong (a tree costs half of a chunk's handling).
        let lean = self.pass_on.is_some() && !mentions_error(data);
        if event.event.as_deref() != Some("error")
            && let Ok(chunk) = read_chunk(data, lean)
            && !errors::may_be_error(&chunk.extra)
        {
            return self.canonical(chunk).map_or(Step::Skip, failed_or_chunk);
        }
        let value: Value = match serde_json::from_str(data) {
            Ok(value) => value,
            Err(error) => return Step::Unreadable(self.skips.skip(self.malformed(&error, data), data)),
        };
        if let Some(error) = errors::from_value(None, &value, self.key.as_ref()) {
            return Step::Fail(error);
        }
        if event.event.as_deref() == Some("error") {
            let detail = errors::scrub(
                &format!("the stream reported an error: {}", crate::http::excerpt(data)),
                self.key.as_ref(),
            );
            return Step::Fail(ProviderError::new(ErrorKind::Unavailable, detail));
        }
        match ChunkIn::deserialize(value) {
            Ok(chunk) => self.canonical(chunk).map_or(Step::Skip, failed_or_chunk),
            Err(error) => Step::Unreadable(self.skips.skip(self.malformed(&error, data), data)),
        }
    }

    /// The canonical chunk, or `None` for a chunk that says nothing (Azure's first chunk holds
    /// only prompt-filter results).
    fn canonical(&mut self, chunk: ChunkIn) -> Option<ChatChunk> {
        let extra = chunk.extra;
        // Groq reported usage under `x_groq` before it supported `include_usage`.
        // (A pass over the few unmodelled members, cheaper per chunk than hashing the key.)
        let usage = chunk.usage.or_else(|| {
            let (_, groq) = extra.iter().find(|(key, _)| *key == "x_groq")?;
            let groq = groq.get("usage")?.clone();
            UsageIn::deserialize(groq).ok()
        });
        if chunk.choices.is_empty() && usage.is_none() {
            return None;
        }
        let choices = (0u32..)
            .zip(chunk.choices)
            .map(|(position, choice)| {
                let index = choice.index.unwrap_or(position);
                let delta = choice.delta;
                // A refusal is the model's answer, passed on as it is: only the provider's
                // own filter (`finish_reason: content_filter`) is a content-filter stop.
                let finish_reason = choice.finish_reason;
                let tool_calls = (0u32..)
                    .zip(delta.tool_calls)
                    .map(|(position, call)| ToolCallDelta {
                        // Some servers (Gemini's compatibility layer) leave out the index.
                        index: call.index.unwrap_or(position),
                        id: call.id.filter(|id| !id.is_empty()),
                        kind: call.kind,
                        function: call.function.map(|function| FunctionCallDelta {
                            name: function.name,
                            arguments: function.arguments.map(|arguments| arguments_text(Some(arguments))),
                        }),
                        extra: call
                            .custom
                            .map(|custom| Extra::from_iter([("custom".to_owned(), custom)]))
                            .unwrap_or_default(),
                    })
                    .collect();
                ChunkChoice {
                    index,
                    delta: Delta {
                        role: delta.role,
                        content: delta.content,
                        tool_calls,
                        refusal: delta.refusal.and_then(|r| r.as_str().map(str::to_owned)),
                        reasoning_content: delta.reasoning_content.or(delta.reasoning),
                        thinking_blocks: Vec::new(),
                    },
                    finish_reason,
                }
            })
            .collect();
        Some(ChatChunk {
            id: chunk.id,
            model: chunk.model,
            created: chunk.created,
            choices,
            usage: usage.map(UsageIn::into_canonical),
            extra,
            verbatim: None,
            notice: None,
        })
    }

    /// The body ended without `[DONE]`. A raw JSON error body outside the SSE framing says
    /// why; otherwise the connection was cut.
    fn cut_off(&mut self) -> ProviderError {
        let stray = self.events.take_stray().join("\n");
        errors::from_body(None, &stray, self.key.as_ref())
            .unwrap_or_else(|| ProviderError::new(ErrorKind::Transport, "stream ended before [DONE]"))
    }

    /// A `malformed_response` error quoting an excerpt of `data`, with the key scrubbed.
    fn malformed(&self, error: &serde_json::Error, data: &str) -> ProviderError {
        let detail = format!(
            "a stream event is not a chat completion chunk ({error}): {}",
            crate::http::excerpt(data)
        );
        ProviderError::new(ErrorKind::MalformedResponse, errors::scrub(&detail, self.key.as_ref()))
    }
}

/// `chunk`, unless a choice of it ended with `finish_reason: "error"`: then the stream failed
/// (see [`errors::finished_in_error`]).
fn failed_or_chunk(chunk: ChatChunk) -> Step {
    let finishes = chunk.choices.iter().map(|choice| choice.finish_reason.as_ref());
    match errors::finished_in_error(finishes, None, None) {
        Some(error) => Step::Fail(error),
        None => Step::Chunk(chunk),
    }
}

/// Whether `data` holds the JSON string `"error"`: as a member's name (an `error` object) or
/// its value (the flat envelope's `"object": "error"`). Every error shape `errors::from_value`
/// reads holds it, and so do a few chunks that are no error (a piece of text, a finish reason
/// or an argument that is exactly `error`), which are then read in full; text that quotes the
/// word holds it escaped (`\"error\"`) and is not found. Assumed: no server spells that name
/// or value with escapes (`"\u0065rror"`), which would read as `error` and not be found.
fn mentions_error(data: &str) -> bool {
    static FINDER: LazyLock<memmem::Finder<'static>> = LazyLock::new(|| memmem::Finder::new(b"\"error\""));
    FINDER.find(data.as_bytes()).is_some()
}

/// Reads one chunk. A chunk whose frame is passed on and that holds no error
/// ([`mentions_error`]) is read leanly (`lean`): of the unmodelled members only Groq's usage
/// is kept. The client reads the rest in the frame, and building them into a tree cost a
/// chunk more than the rest of its reading.
fn read_chunk(data: &str, lean: bool) -> serde_json::Result<ChunkIn> {
    let mut reader = serde_json::Deserializer::from_str(data);
    let chunk = if lean {
        ChunkIn::deserialize_keeping(&mut reader, |name| name == "x_groq")?
    } else {
        ChunkIn::deserialize(&mut reader)?
    };
    reader.end()?;
    Ok(chunk)
}

/// One `chat.completion.chunk`, read tolerantly.
struct ChunkIn {
    /// The completion's id, the same on every chunk; empty when missing or null (Azure's first
    /// chunk).
    id: String,
    /// The model that answers; empty when missing or null.
    model: String,
    /// `created`, Unix seconds, the same on every chunk; 0 when missing or null.
    created: u64,
    /// `choices[]`; empty on the final usage chunk and on Azure's prompt-filter chunk.
    choices: Vec<ChunkChoiceIn>,
    /// `usage`: set on the final chunk with `include_usage`, null on the others.
    usage: Option<UsageIn>,
    /// Unmodelled fields (`system_fingerprint`, `x_groq`, Azure's `prompt_filter_results`,
    /// ...); also where a top-level `error` lands.
    extra: Extra,
}

deserialize_with_extra!(ChunkIn {
    "id" => id: NullAsDefault,
    "model" => model: NullAsDefault,
    "created" => created: NullAsDefault,
    "choices" => choices: NullAsDefault,
    "usage" => usage: OrDefault,
});

/// One entry of a chunk's `choices[]`.
#[derive(Deserialize)]
struct ChunkChoiceIn {
    /// `index` of the choice; `None` when missing, read as its position in `choices`.
    #[serde(default)]
    index: Option<u32>,
    /// `delta`, what this chunk adds to the choice; empty when missing or null.
    #[serde(default, deserialize_with = "nullable")]
    delta: DeltaIn,
    /// OpenAI `finish_reason`: `None` until the choice's last chunk.
    #[serde(default)]
    finish_reason: Option<FinishReason>,
}

/// `choices[].delta` of a chunk.
#[derive(Deserialize, Default)]
struct DeltaIn {
    /// `role`, usually on the first chunk only.
    #[serde(default)]
    role: Option<Role>,
    /// The next piece of text; `None` when the chunk adds none.
    #[serde(default)]
    content: Option<String>,
    /// `refusal` text, if the model declines (an answer, not a content-filter stop).
    #[serde(default)]
    refusal: Option<Value>,
    /// The next piece of a reasoning server's thinking: `reasoning_content` (DeepSeek, vLLM,
    /// Qwen) or `reasoning` (OpenRouter, Ollama, newer vLLM). Anything but text is ignored.
    #[serde(default, deserialize_with = "text_or_none")]
    reasoning_content: Option<String>,
    /// The same under the other name.
    #[serde(default, deserialize_with = "text_or_none")]
    reasoning: Option<String>,
    /// Tool call fragments; empty when missing or null.
    #[serde(default, deserialize_with = "nullable")]
    tool_calls: Vec<ToolCallDeltaIn>,
}

/// One fragment of `delta.tool_calls[]`; fragments of one call share its `index`.
#[derive(Deserialize)]
struct ToolCallDeltaIn {
    /// Which tool call the fragment belongs to; `None` when missing, read as its position in
    /// this chunk's list.
    #[serde(default)]
    index: Option<u32>,
    /// The call's `id`, on its first fragment only; an empty one is dropped.
    #[serde(default)]
    id: Option<String>,
    /// `type` (`function`), on the first fragment only.
    #[serde(rename = "type", default)]
    kind: Option<String>,
    /// The fragment of the called function.
    #[serde(default)]
    function: Option<FunctionDeltaIn>,
    /// The fragment of a `custom` call (GPT-5's free-form tools): `{name}` first, then
    /// `{input}` pieces, kept as written.
    #[serde(default)]
    custom: Option<Value>,
}

/// `tool_calls[].function` of a fragment.
#[derive(Deserialize)]
struct FunctionDeltaIn {
    /// The function's `name`, on the first fragment only.
    #[serde(default)]
    name: Option<String>,
    /// The next piece of the `arguments` string, concatenated by the client; an object sent
    /// instead is serialised to text.
    #[serde(default)]
    arguments: Option<Value>,
}

/// A string, or `None` for anything else (null, or an object some server put there).
fn text_or_none<'de, D: serde::Deserializer<'de>>(deserializer: D) -> Result<Option<String>, D::Error> {
    Ok(match Value::deserialize(deserializer)? {
        Value::String(text) => Some(text),
        _ => None,
    })
}
