//! Messages API stream events into canonical chunks.
//!
//! Anthropic numbers content blocks (text, tool use, thinking) in one sequence; canonical tool
//! calls are numbered among themselves, so a `tool_use` block at index 3 may be tool call 0.
//! Thinking streams as `reasoning_content`; for an OpenAI-dialect client each thinking block
//! also comes whole, with its signature, as `thinking_blocks` once the signature arrives (and
//! a redacted one as it starts). Citations and server-tool blocks are not part of the
//! canonical stream and are skipped.

use std::collections::HashMap;
use std::task::{Context, Poll, ready};

use futures_core::Stream;
use futures_util::StreamExt;
use serde_json::{Value, json};
use switchyard::chat::{
    ChatChunk, ChunkChoice, Delta, Dialect, Extra, FunctionCallDelta, ReasoningShown, Role, StreamNotice,
    ToolCallDelta, Verbatim,
};
use switchyard::credential::Secret;
use switchyard::provider::ChunkStream;
use switchyard::{ErrorKind, ProviderError};

use super::classify;
use super::request::JSON_TOOL;
use super::response::{finish_reason, now_unix};
use super::wire::{Block, BlockDelta, MessageDeltaBody, StreamEvent, Usage};
use crate::sse::{ReadChunks, Skips, SseEvent};

/// Turns SSE events into canonical chunks. The stream ends after `message_stop`; a body that
/// ends before it is a transport error, never a clean end, unless a `message_delta` said why
/// the answer stopped (then it is whole, and a notice says `message_stop` was missing).
pub(crate) fn chunk_stream<S>(events: S, decoder: Decoder) -> ChunkStream
where
    S: Stream<Item = Result<SseEvent, ProviderError>> + Send + Unpin + 'static,
{
    crate::sse::read_chunks(Reader { events, decoder, failed: false })
}

/// The events of one stream and what they said so far.
struct Reader<S> {
    events: S,
    decoder: Decoder,
    /// An error ended the stream: nothing more is read.
    failed: bool,
}

impl<S> ReadChunks for Reader<S>
where
    S: Stream<Item = Result<SseEvent, ProviderError>> + Send + Unpin + 'static,
{
    type Events = S;

    fn poll_chunk(&mut self, cx: &mut Context<'_>) -> Poll<Option<Result<ChatChunk, ProviderError>>> {
        let decoder = &mut self.decoder;
        while !decoder.finished && !self.failed {
            let failure = match ready!(self.events.poll_next_unpin(cx)) {
                // The answer said why it stopped (and its finish went out then); only its
                // `message_stop` is missing.
                None if decoder.told => {
                    decoder.finished = true;
                    return Poll::Ready(Some(Ok(ChatChunk::notice(StreamNotice::Unterminated))));
                }
                None => ProviderError::new(ErrorKind::Transport, "stream ended before message_stop"),
                Some(Err(error)) => error,
                Some(Ok(event)) => {
                    // A request sent verbatim is answered verbatim: every event, with its
                    // frame, canonical or not.
                    let name = event.event.as_deref();
                    let (ping, delta) = (name == Some("ping"), name == Some("content_block_delta"));
                    let tool_running = decoder.tool_running;
                    let frame = decoder.pass_on.then(|| Verbatim::new(Dialect::Anthropic, event.to_frame()));
                    let decoded = decoder.decode(event);
                    // Every event tells of progress but a ping and a delta that adds nothing (a
                    // stalled server's keep-alive), unless a server tool runs: then the ping is
                    // the tool at work, not a stall.
                    let adds = |c: &Option<ChatChunk>| {
                        c.as_ref().is_some_and(|c| c.shows_content(ReasoningShown::Any))
                    };
                    let empty_delta = delta && !decoded.as_ref().is_ok_and(adds);
                    let progress = (!ping && !empty_delta) || tool_running;
                    let frame = frame.map(|frame| if progress { frame.telling_progress() } else { frame });
                    match (decoded, frame) {
                        (Ok(None), None) => continue,
                        // A skipped event's frame is not passed on.
                        (Ok(Some(chunk)), _) if chunk.notice.is_some() => {
                            return Poll::Ready(Some(Ok(chunk)));
                        }
                        (Ok(chunk), frame @ Some(_)) => {
                            return Poll::Ready(Some(Ok(ChatChunk {
                                verbatim: frame,
                                ..chunk.unwrap_or_default()
                            })));
                        }
                        (Ok(Some(chunk)), None) => return Poll::Ready(Some(Ok(chunk))),
                        (Err(error), _) => error,
                    }
                }
            };
            self.failed = true;
            return Poll::Ready(Some(Err(failure)));
        }
        Poll::Ready(None)
    }

    fn into_events(self) -> S {
        self.events
    }
}

/// The most content blocks one streamed message may open: a block's index is below it (a
/// provider naming block 4,000,000,000 would otherwise have the answer assembled for an
/// Anthropic client fill gigabytes with empty blocks).
pub(crate) const MAX_BLOCKS: u32 = 4096;

/// A tool-use block being streamed.
#[derive(Debug)]
struct OpenTool {
    /// The canonical tool call index of the block (its place among the answer's tool calls).
    ordinal: u32,
    /// Whether any argument text was emitted: a call without any gets `{}`, so that the
    /// concatenated arguments always parse.
    has_arguments: bool,
}

/// The state of one streamed answer.
#[derive(Debug)]
pub(crate) struct Decoder {
    /// The dialect the request arrived in; Anthropic clients also get `stop_reason` and
    /// `stop_sequence` in the last chunk's `extra`.
    origin: Dialect,
    /// Cut out of any error text the stream carries.
    key: Option<Secret>,
    /// The message id (`msg_...`) from `message_start`, on every chunk; empty before it.
    id: String,
    /// The model from `message_start`, on every chunk; empty before it.
    model: String,
    /// Unix seconds when the decoder was made: Anthropic sends no creation time.
    created: u64,
    /// Tool-use blocks started and not yet stopped, by Anthropic content block index.
    tools: HashMap<u32, OpenTool>,
    /// The canonical index the next tool-use block gets.
    next_ordinal: u32,
    /// Blocks of tools the provider runs itself (`server_tool_use` for web search, web fetch
    /// and code execution; `mcp_tool_use`), by content block index: their input streams as a
    /// tool's does, and is no call of the answer's (their frames pass to an Anthropic client).
    server_tools: Vec<u32>,
    /// A server tool's input is whole and its result has not begun: the provider runs it.
    tool_running: bool,
    /// The text so far of each thinking block started and not yet signed, by content block
    /// index; kept only for an OpenAI-dialect client (Responses clients included), which gets
    /// the block whole.
    thinking: HashMap<u32, String>,
    /// The latest token counts: `message_start`'s, each field replaced by the cumulative
    /// counts of every `message_delta`.
    usage: super::wire::Usage,
    /// Anthropic `stop_reason` from the last `message_delta` that had one (`end_turn`,
    /// `max_tokens`, `tool_use`, ...); `None` until then.
    stop_reason: Option<String>,
    /// The custom stop sequence that matched, when `stop_reason` is `stop_sequence`.
    stop_sequence: Option<String>,
    /// `message_stop` was seen: the stream ends after the last chunk.
    finished: bool,
    /// The finish (why the answer stopped, and its usage) went out: at the `message_delta` that
    /// said why, or at `message_stop` when none did.
    told: bool,
    /// Whether each chunk carries its event's frame (the request went out verbatim).
    pub(crate) pass_on: bool,
    /// Whether the request is in JSON mode: a [`JSON_TOOL`] call's input is the answer's text.
    pub(crate) json_answer: bool,
    /// The [`JSON_TOOL`] block being streamed, and whether any of its input came.
    json_block: Option<(u32, bool)>,
    /// Whether the answer was given through [`JSON_TOOL`]: its `tool_use` stop is a plain stop.
    json_answered: bool,
    /// Events skipped as unreadable so far.
    skips: Skips,
}

impl Decoder {
    /// A decoder for a request of `origin` (which decides whether Anthropic-only details are
    /// kept in chunk `extra`); `key` is cut out of any error text.
    pub(crate) fn new(origin: Dialect, key: Option<Secret>) -> Self {
        Self {
            origin,
            key,
            id: String::new(),
            model: String::new(),
            created: now_unix(),
            tools: HashMap::new(),
            next_ordinal: 0,
            server_tools: Vec::new(),
            tool_running: false,
            thinking: HashMap::new(),
            usage: super::wire::Usage::default(),
            stop_reason: None,
            stop_sequence: None,
            finished: false,
            told: false,
            pass_on: false,
            json_answer: false,
            json_block: None,
            json_answered: false,
            skips: Skips::default(),
        }
    }

    /// The chunk an event produces, if any. An event that does not read is skipped with a
    /// notice while few are ([`crate::sse::MAX_SKIPPED`]); one more fails the stream.
    pub(crate) fn decode(&mut self, event: SseEvent) -> Result<Option<ChatChunk>, ProviderError> {
        let event = match parse(event, self.key.as_ref()) {
            Ok(event) => event,
            Err((error, data)) => return self.skips.skip(error, &data).map(Some),
        };
        Ok(match event {
            StreamEvent::MessageStart { message } => {
                self.id = message.id;
                self.model = message.model;
                self.usage = message.usage;
                Some(self.chunk(Delta { role: Some(Role::Assistant), ..Delta::default() }))
            }
            StreamEvent::ContentBlockStart { index, .. } if index >= MAX_BLOCKS => {
                let detail =
                    format!("a content block index of {index}: a stream opens fewer than {MAX_BLOCKS}");
                return Err(ProviderError::new(ErrorKind::MalformedResponse, detail));
            }
            StreamEvent::ContentBlockStart { index, content_block } => {
                self.tool_running = false;
                self.block_start(index, content_block)
            }
            StreamEvent::ContentBlockDelta { index, delta } => self.block_delta(index, delta)?,
            // A JSON answer without input is the empty object.
            StreamEvent::ContentBlockStop { index } if self.json_block.is_some_and(|(at, _)| at == index) => {
                let written = self.json_block.take().is_some_and(|(_, written)| written);
                (!written).then(|| self.text("{}".to_owned()))
            }
            StreamEvent::ContentBlockStop { index } => match self.tools.remove(&index) {
                // Its input is whole: the provider runs it until its result block starts.
                None if self.server_tools.contains(&index) => {
                    self.tool_running = true;
                    None
                }
                Some(OpenTool { ordinal, has_arguments: false }) => {
                    Some(self.arguments(ordinal, "{}".to_owned()))
                }
                _ => None,
            },
            StreamEvent::MessageDelta { delta, usage } => {
                self.message_delta(delta, usage);
                match (self.told, self.stop_reason.is_some()) {
                    // A later count than the finish carried.
                    (true, _) => Some(self.usage_chunk()),
                    // The answer is whole once it says why it stopped: the finish goes out now,
                    // so that a stream held open before its `message_stop` is whole too.
                    (false, true) => {
                        self.told = true;
                        Some(self.finish())
                    }
                    (false, false) => None,
                }
            }
            StreamEvent::MessageStop => {
                self.finished = true;
                (!std::mem::replace(&mut self.told, true)).then(|| self.finish())
            }
            StreamEvent::Error { error } => return Err(classify::stream_error(&error, self.key.as_ref())),
            StreamEvent::Ping | StreamEvent::Unknown(_) => None,
        })
    }

    /// The chunk a `content_block_start` gives: text, a tool call opening, or thinking.
    fn block_start(&mut self, index: u32, content_block: Block) -> Option<ChatChunk> {
        match content_block {
            Block::Text { text } if !text.is_empty() => Some(self.text(text)),
            Block::ToolUse { name, .. } if self.json_answer && name == JSON_TOOL => {
                self.json_block = Some((index, false));
                self.json_answered = true;
                None
            }
            Block::ToolUse { id, name, .. } => {
                // `input` is always `{}` here; the arguments follow as `input_json_delta`s.
                let ordinal = self.next_ordinal;
                self.next_ordinal += 1;
                self.tools.insert(index, OpenTool { ordinal, has_arguments: false });
                Some(self.tool_delta(ToolCallDelta {
                    index: ordinal,
                    id: Some(id),
                    kind: Some("function".to_owned()),
                    function: Some(FunctionCallDelta { name: Some(name), arguments: Some(String::new()) }),
                    extra: Default::default(),
                }))
            }
            Block::Raw(block)
                if matches!(block["type"].as_str(), Some("server_tool_use" | "mcp_tool_use")) =>
            {
                self.server_tools.push(index);
                None
            }
            Block::Raw(block) => self.start_thinking(index, block),
            _ => None,
        }
    }

    /// The chunk a `content_block_delta` gives: text, thinking, a signed thinking block, or
    /// tool-call arguments (nothing for a server tool's block; refused for a block that is no
    /// tool's).
    fn block_delta(&mut self, index: u32, delta: BlockDelta) -> Result<Option<ChatChunk>, ProviderError> {
        Ok(match delta {
            BlockDelta::TextDelta { text } if !text.is_empty() => Some(self.text(text)),
            BlockDelta::ThinkingDelta { thinking } if !thinking.is_empty() => {
                if let Some(so_far) = self.thinking.get_mut(&index) {
                    so_far.push_str(&thinking);
                }
                Some(self.chunk(Delta { reasoning_content: Some(thinking), ..Delta::default() }))
            }
            BlockDelta::Other(delta) if delta["type"] == "signature_delta" => {
                self.thinking.remove(&index).map(|thinking| {
                    let signature = delta["signature"].clone();
                    let block = json!({"type": "thinking", "thinking": thinking, "signature": signature});
                    self.chunk(Delta { thinking_blocks: vec![block], ..Delta::default() })
                })
            }
            BlockDelta::InputJsonDelta { partial_json }
                if !partial_json.is_empty() && self.json_block.is_some_and(|(at, _)| at == index) =>
            {
                self.json_block = Some((index, true));
                Some(self.text(partial_json))
            }
            BlockDelta::InputJsonDelta { partial_json } if !partial_json.is_empty() => {
                match self.tools.get_mut(&index) {
                    Some(tool) => {
                        tool.has_arguments = true;
                        let ordinal = tool.ordinal;
                        Some(self.arguments(ordinal, partial_json))
                    }
                    None if self.server_tools.contains(&index) => None,
                    None => {
                        return Err(ProviderError::new(
                            ErrorKind::MalformedResponse,
                            format!(
                                "input_json_delta for content block {index}, which is not a tool_use block"
                            ),
                        ));
                    }
                }
            }
            _ => None,
        })
    }

    /// Takes a `message_delta`'s stop reason, stop sequence and token counts.
    fn message_delta(&mut self, delta: MessageDeltaBody, usage: Usage) {
        let stop_reason = match delta.stop_reason {
            Some(reason) if self.json_answered && reason == "tool_use" => Some("end_turn".to_owned()),
            other => other,
        };
        self.stop_reason = stop_reason.or(self.stop_reason.take());
        self.stop_sequence = delta.stop_sequence.or(self.stop_sequence.take());
        // Counts in message_delta are cumulative: they replace, never add.
        let current = &mut self.usage;
        current.output_tokens = usage.output_tokens.or(current.output_tokens);
        current.input_tokens = usage.input_tokens.or(current.input_tokens);
        current.cache_creation_input_tokens =
            usage.cache_creation_input_tokens.or(current.cache_creation_input_tokens);
        current.cache_read_input_tokens = usage.cache_read_input_tokens.or(current.cache_read_input_tokens);
    }

    /// What the start of a block the canonical types do not model gives an OpenAI-dialect
    /// client: a redacted thinking block whole; a thinking block is kept until it is signed.
    fn start_thinking(&mut self, index: u32, block: Value) -> Option<ChatChunk> {
        // (A Responses client's request comes with origin `OpenAi`.)
        if self.origin != Dialect::OpenAi {
            return None;
        }
        match block["type"].as_str() {
            Some("thinking") => {
                let text = block["thinking"].as_str().unwrap_or_default().to_owned();
                self.thinking.insert(index, text);
                None
            }
            Some("redacted_thinking") => {
                Some(self.chunk(Delta { thinking_blocks: vec![block], ..Delta::default() }))
            }
            _ => None,
        }
    }

    /// A chunk of this answer with one choice (index 0) carrying `delta`.
    fn chunk(&self, delta: Delta) -> ChatChunk {
        ChatChunk {
            id: self.id.clone(),
            model: self.model.clone(),
            created: self.created,
            choices: vec![ChunkChoice { index: 0, delta, finish_reason: None }],
            usage: None,
            extra: Extra::new(),
            verbatim: None,
            notice: None,
        }
    }

    /// A chunk adding `text` to the answer.
    fn text(&self, text: String) -> ChatChunk {
        self.chunk(Delta { content: Some(text), ..Delta::default() })
    }

    /// A chunk carrying one tool call fragment.
    fn tool_delta(&self, delta: ToolCallDelta) -> ChatChunk {
        self.chunk(Delta { tool_calls: vec![delta], ..Delta::default() })
    }

    /// A chunk adding `fragment` to the arguments of tool call `ordinal`.
    fn arguments(&self, ordinal: u32, fragment: String) -> ChatChunk {
        self.tool_delta(ToolCallDelta {
            index: ordinal,
            id: None,
            kind: None,
            function: Some(FunctionCallDelta { name: None, arguments: Some(fragment) }),
            extra: Default::default(),
        })
    }

    /// A chunk with only the latest usage.
    fn usage_chunk(&self) -> ChatChunk {
        let mut chunk = self.chunk(Delta::default());
        chunk.choices.clear();
        chunk.usage = Some(self.usage.canonical());
        chunk
    }

    /// The last chunk: why the answer ended, and the usage.
    fn finish(&self) -> ChatChunk {
        let mut chunk = self.chunk(Delta::default());
        chunk.choices[0].finish_reason = self.stop_reason.as_deref().map(finish_reason);
        chunk.usage = Some(self.usage.canonical());
        if self.origin == Dialect::Anthropic {
            for (key, value) in [("stop_reason", &self.stop_reason), ("stop_sequence", &self.stop_sequence)] {
                if let Some(value) = value {
                    chunk.extra.insert(key.to_owned(), Value::String(value.clone()));
                }
            }
        }
        chunk
    }
}

/// An SSE event's data as a stream event. The SDKs take the type from the `event:` name when
/// the data lacks one, and so does this.
/// The event, or why it does not read with what it held (for [`crate::sse::Skips::skip`] to
/// see whether it carried part of the answer).
fn parse(event: SseEvent, key: Option<&Secret>) -> Result<StreamEvent, (ProviderError, String)> {
    let malformed =
        |what: String| ProviderError::new(ErrorKind::MalformedResponse, classify::redact(what, key));
    let mut data: Value = match serde_json::from_str(&event.data) {
        Ok(data) => data,
        Err(error) => {
            let what = format!("stream event is not JSON ({error}): {}", crate::http::excerpt(&event.data));
            return Err((malformed(what), event.data));
        }
    };
    let malformed = |what: String| (malformed(what), String::new());
    if let (Value::Object(object), Some(name)) = (&mut data, event.event) {
        object.entry("type").or_insert(Value::String(name));
    }
    let parsed = serde_json::from_value(data)
        .map_err(|error| malformed(format!("stream event has an unexpected shape: {error}")))?;
    // Unknown event types are skipped, but a known one that did not parse is a broken stream.
    if let StreamEvent::Unknown(value) = &parsed {
        let kind = value.get("type").and_then(Value::as_str).unwrap_or_default();
        if KNOWN_EVENTS.contains(&kind) {
            return Err(malformed(format!(
                "`{kind}` event has an unexpected shape: {}",
                crate::http::excerpt(&value.to_string())
            )));
        }
    }
    Ok(parsed)
}

/// The event types [`StreamEvent`] models: one of these that fails to parse is a broken
/// stream, not a new event type to skip.
const KNOWN_EVENTS: [&str; 8] = [
    "message_start",
    "content_block_start",
    "content_block_delta",
    "content_block_stop",
    "message_delta",
    "message_stop",
    "ping",
    "error",
];

#[cfg(test)]
mod tests {
    use futures_util::StreamExt;
    use switchyard::chat::FinishReason;

    use super::*;

    fn event(name: &str, data: &str) -> Result<SseEvent, ProviderError> {
        Ok(SseEvent { event: Some(name.to_owned()), data: data.to_owned() })
    }

    async fn chunks(events: Vec<Result<SseEvent, ProviderError>>, pass_on: bool) -> Vec<ChatChunk> {
        let mut decoder = Decoder::new(Dialect::Anthropic, None);
        decoder.pass_on = pass_on;
        chunk_stream(futures_util::stream::iter(events), decoder).map(Result::unwrap).collect().await
    }

    fn answer(deltas: &[&str]) -> Vec<Result<SseEvent, ProviderError>> {
        let mut events = vec![
            event(
                "message_start",
                r#"{"type":"message_start","message":{"id":"msg_1","type":"message","role":"assistant","model":"c","content":[],"stop_reason":null,"usage":{"input_tokens":3,"output_tokens":1}}}"#,
            ),
            event(
                "content_block_start",
                r#"{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}"#,
            ),
            event(
                "content_block_delta",
                r#"{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Hi"}}"#,
            ),
            event("content_block_stop", r#"{"type":"content_block_stop","index":0}"#),
        ];
        events.extend(deltas.iter().map(|data| event("message_delta", data)));
        events.push(event("message_stop", r#"{"type":"message_stop"}"#));
        events
    }

    #[tokio::test]
    async fn a_server_tools_input_and_result_pass_and_the_answer_goes_on() {
        let mut events = answer(&[STOPPED]);
        let tail = events.split_off(4);
        events.extend([
            event(
                "content_block_start",
                r#"{"type":"content_block_start","index":1,"content_block":{"type":"server_tool_use","id":"srvtoolu_1","name":"web_search","input":{}}}"#,
            ),
            event(
                "content_block_delta",
                r#"{"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"{\"query\": \"weather\"}"}}"#,
            ),
            event("content_block_stop", r#"{"type":"content_block_stop","index":1}"#),
            event(
                "content_block_start",
                r#"{"type":"content_block_start","index":2,"content_block":{"type":"web_search_tool_result","tool_use_id":"srvtoolu_1","content":[{"type":"web_search_result","title":"Weather","url":"https://example.com/weather","encrypted_content":"EqgfCioIARgBIiQ3"}]}}"#,
            ),
            event("content_block_stop", r#"{"type":"content_block_stop","index":2}"#),
            event(
                "content_block_start",
                r#"{"type":"content_block_start","index":3,"content_block":{"type":"text","text":""}}"#,
            ),
            event(
                "content_block_delta",
                r#"{"type":"content_block_delta","index":3,"delta":{"type":"text_delta","text":" Sunny."}}"#,
            ),
            event("content_block_stop", r#"{"type":"content_block_stop","index":3}"#),
        ]);
        events.extend(tail);
        let total = events.len();

        for pass_on in [true, false] {
            let mut decoder = Decoder::new(Dialect::Anthropic, None);
            decoder.pass_on = pass_on;
            let items: Vec<_> =
                chunk_stream(futures_util::stream::iter(events.clone()), decoder).collect().await;
            let chunks: Vec<ChatChunk> =
                items.into_iter().map(|item| item.expect("no event is refused")).collect();
            let text: String = chunks
                .iter()
                .flat_map(|c| c.choices.iter().filter_map(|c| c.delta.content.clone()))
                .collect();
            assert_eq!(text, "Hi Sunny.");
            assert!(
                chunks.iter().all(|c| c.choices.iter().all(|c| c.delta.tool_calls.is_empty())),
                "no call of the answer's"
            );
            if pass_on {
                assert_eq!(
                    chunks.iter().filter(|c| c.verbatim.is_some()).count(),
                    total,
                    "every frame passes"
                );
            }
        }
    }

    #[tokio::test]
    async fn a_ping_while_a_server_tool_runs_tells_of_progress_and_one_of_a_stalled_stream_does_not() {
        let ping = || event("ping", r#"{"type": "ping"}"#);
        let mut events = answer(&[STOPPED]);
        let tail = events.split_off(4);
        events.push(ping());
        events.extend([
            event(
                "content_block_start",
                r#"{"type":"content_block_start","index":1,"content_block":{"type":"server_tool_use","id":"srvtoolu_1","name":"code_execution","input":{}}}"#,
            ),
            event("content_block_stop", r#"{"type":"content_block_stop","index":1}"#),
            ping(),
            ping(),
            event(
                "content_block_start",
                r#"{"type":"content_block_start","index":2,"content_block":{"type":"code_execution_tool_result","tool_use_id":"srvtoolu_1","content":{}}}"#,
            ),
            event("content_block_stop", r#"{"type":"content_block_stop","index":2}"#),
            ping(),
        ]);
        events.extend(tail);
        let chunks = chunks(events, true).await;
        let pings: Vec<bool> = chunks
            .iter()
            .filter_map(|c| c.verbatim.as_ref())
            .filter(|v| v.bytes().starts_with(b"event: ping"))
            .map(Verbatim::tells_progress)
            .collect();
        assert_eq!(pings, [false, true, true, false], "only the pings while the tool ran");
        assert!(
            chunks
                .iter()
                .filter(|c| c.verbatim.as_ref().is_some_and(|v| v.bytes().starts_with(b"event: ping")))
                .all(|c| !c.answers())
        );
    }

    #[tokio::test]
    async fn an_empty_delta_passed_on_tells_of_no_progress() {
        // A stalled server that keeps its connection up with empty text deltas.
        let empty = || {
            event(
                "content_block_delta",
                r#"{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":""}}"#,
            )
        };
        let mut events = answer(&[STOPPED]);
        let tail = events.split_off(3);
        events.extend([empty(), empty()]);
        events.extend(tail);
        let chunks = chunks(events, true).await;
        let deltas: Vec<bool> = chunks
            .iter()
            .filter_map(|c| c.verbatim.as_ref())
            .filter(|v| v.bytes().starts_with(b"event: content_block_delta"))
            .map(Verbatim::tells_progress)
            .collect();
        assert_eq!(deltas, [true, false, false], "only the delta with text");
    }

    const STOPPED: &str = r#"{"type":"message_delta","delta":{"stop_reason":"end_turn","stop_sequence":null},"usage":{"output_tokens":2}}"#;

    #[tokio::test]
    async fn the_finish_goes_out_once_at_the_message_delta_that_says_why_and_message_stop_frame_follows() {
        let chunks = chunks(answer(&[STOPPED]), true).await;
        let finishes: Vec<usize> = (0..chunks.len())
            .filter(|&i| chunks[i].choices.iter().any(|c| c.finish_reason.is_some()))
            .collect();
        assert_eq!(finishes.len(), 1, "{chunks:#?}");
        let finish = &chunks[finishes[0]];
        assert_eq!(finish.choices[0].finish_reason, Some(FinishReason::Stop));
        assert_eq!(finish.usage.map(|u| u.completion_tokens), Some(2));
        let frame = |chunk: &ChatChunk| {
            let bytes = chunk.verbatim.as_ref().and_then(|v| v.in_dialect(Dialect::Anthropic)).unwrap();
            String::from_utf8(bytes.to_vec()).unwrap()
        };
        assert!(frame(finish).starts_with("event: message_delta\n"), "{}", frame(finish));
        let last = chunks.last().unwrap();
        assert!(
            frame(last).starts_with("event: message_stop\n"),
            "the message_stop frame follows the finish"
        );
        assert!(last.choices.is_empty() && last.usage.is_none());
    }

    #[tokio::test]
    async fn a_body_that_ends_after_the_finish_without_message_stop_is_whole_and_says_so() {
        let mut events = answer(&[STOPPED]);
        events.pop();
        let chunks = chunks(events, false).await;
        let finishes = chunks.iter().filter(|c| c.choices.iter().any(|c| c.finish_reason.is_some())).count();
        assert_eq!(finishes, 1, "the finish went out once, at its message_delta");
        assert_eq!(chunks.last().unwrap().notice, Some(StreamNotice::Unterminated));
        // Without any message_delta, the same body is a cut answer.
        let mut events = answer(&[]);
        events.pop();
        let mut decoder = Decoder::new(Dialect::Anthropic, None);
        decoder.pass_on = false;
        let items: Vec<_> = chunk_stream(futures_util::stream::iter(events), decoder).collect().await;
        let error = items.last().unwrap().as_ref().unwrap_err();
        assert_eq!(error.kind(), ErrorKind::Transport);
    }

    #[tokio::test]
    async fn a_later_message_delta_passes_its_count_on() {
        let later = r#"{"type":"message_delta","delta":{},"usage":{"output_tokens":9}}"#;
        let chunks = chunks(answer(&[STOPPED, later]), false).await;
        let finishes = chunks.iter().filter(|c| c.choices.iter().any(|c| c.finish_reason.is_some())).count();
        assert_eq!(finishes, 1);
        let last = chunks.last().unwrap();
        assert!(last.choices.is_empty(), "{last:?}");
        assert_eq!(last.usage.map(|u| u.completion_tokens), Some(9));
    }
}
