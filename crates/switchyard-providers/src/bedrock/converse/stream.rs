//! A `converse-stream` event stream into canonical chunks.
//!
//! Converse numbers content blocks in one sequence (text, tool use, reasoning); canonical tool
//! calls are numbered among themselves. The answer is whole once `messageStop` said why it
//! stopped, and its finish goes out then (so that a stream held open after it is whole too);
//! the `metadata` event after it brings the usage, in a chunk of its own, and ends the stream.
//! A stream that ends after `messageStop` without `metadata` is whole without usage; one that
//! ends before `messageStop` broke off. An exception frame ends the stream with its error.
//! After the last chunk the rest of the body is read, so that its connection is kept.

use std::collections::HashMap;
use std::task::{Context, Poll, ready};

use futures_core::Stream;
use futures_util::StreamExt;
use serde_json::Value;
use switchyard::chat::{
    ChatChunk, ChunkChoice, Delta, Extra, FunctionCallDelta, Role, StreamNotice, ToolCallDelta,
};
use switchyard::provider::ChunkStream;
use switchyard::{ErrorKind, ProviderError};

use super::{TokenUsage, finish_reason};
use crate::bedrock::Redactor;
use crate::bedrock::classify;
use crate::bedrock::eventstream::Frame;
use crate::sse::ReadChunks;

/// The chunks of a Converse stream's `frames`, for `model`, its id the request's. Once the
/// answer ended, the rest of the body is read so that its connection is kept.
pub(crate) fn chunk_stream<S>(frames: S, model: String, id: String, redactor: Redactor) -> ChunkStream
where
    S: Stream<Item = Result<Frame, ProviderError>> + Send + Unpin + 'static,
{
    let decoder = Decoder { model, id, redactor, created: crate::bedrock::now_unix(), ..Decoder::default() };
    crate::sse::read_chunks(Reader { frames, decoder })
}

/// The frames of one stream and what they said so far.
struct Reader<S> {
    frames: S,
    decoder: Decoder,
}

impl<S> ReadChunks for Reader<S>
where
    S: Stream<Item = Result<Frame, ProviderError>> + Send + Unpin + 'static,
{
    type Events = S;

    fn poll_chunk(&mut self, cx: &mut Context<'_>) -> Poll<Option<Result<ChatChunk, ProviderError>>> {
        let decoder = &mut self.decoder;
        while !decoder.done {
            let item = match ready!(self.frames.poll_next_unpin(cx)) {
                None if decoder.stop_reason.is_some() => {
                    decoder.done = true;
                    Ok(ChatChunk::notice(StreamNotice::Unterminated))
                }
                None => Err(ProviderError::new(ErrorKind::Transport, "stream ended before messageStop")),
                Some(Err(error)) => Err(error),
                Some(Ok(frame)) => match decoder.decode(frame) {
                    Ok(None) => continue,
                    Ok(Some(chunk)) => Ok(chunk),
                    Err(error) => Err(error),
                },
            };
            // An error ends the stream.
            decoder.done |= item.is_err();
            return Poll::Ready(Some(item));
        }
        Poll::Ready(None)
    }

    fn into_events(self) -> S {
        self.frames
    }
}

/// The state of one streamed answer.
#[derive(Debug, Default)]
struct Decoder {
    model: String,
    id: String,
    created: u64,
    redactor: Redactor,
    /// Canonical tool-call index of each open tool-use block, by content block index.
    tools: HashMap<u64, u32>,
    next_tool: u32,
    stop_reason: Option<String>,
    done: bool,
}

impl Decoder {
    /// The chunk of one frame, if it makes one.
    fn decode(&mut self, frame: Frame) -> Result<Option<ChatChunk>, ProviderError> {
        let (kind, payload) = match frame {
            Frame::Event { kind, payload } => (kind, payload),
            Frame::Exception { kind, payload } => {
                return Err(classify::stream_exception(&kind, &payload, &self.redactor));
            }
            Frame::Error { code, message } => {
                return Err(classify::stream_error(&code, &message, &self.redactor));
            }
        };
        let event: Value = serde_json::from_slice(&payload).map_err(|error| {
            ProviderError::new(ErrorKind::MalformedResponse, format!("a `{kind}` event is not JSON: {error}"))
        })?;
        let index = event.get("contentBlockIndex").and_then(Value::as_u64).unwrap_or(0);
        Ok(match kind.as_str() {
            "messageStart" => Some(self.chunk(Delta { role: Some(Role::Assistant), ..Delta::default() })),
            "contentBlockStart" => event.pointer("/start/toolUse").map(|tool| self.open_tool(index, tool)),
            "contentBlockDelta" => self.delta(index, event.get("delta").unwrap_or(&Value::Null)),
            "contentBlockStop" => {
                self.tools.remove(&index);
                None
            }
            "messageStop" => {
                self.stop_reason =
                    Some(event.get("stopReason").and_then(Value::as_str).unwrap_or("end_turn").to_owned());
                Some(self.finish())
            }
            "metadata" => {
                let usage =
                    event.get("usage").and_then(|u| serde_json::from_value::<TokenUsage>(u.clone()).ok());
                self.done = true;
                usage.map(|usage| ChatChunk {
                    id: self.id.clone(),
                    model: self.model.clone(),
                    created: self.created,
                    usage: Some(usage.canonical()),
                    ..ChatChunk::default()
                })
            }
            _ => None,
        })
    }

    fn open_tool(&mut self, index: u64, tool: &Value) -> ChatChunk {
        let ordinal = self.next_tool;
        self.next_tool += 1;
        self.tools.insert(index, ordinal);
        let field = |name: &str| tool.get(name).and_then(Value::as_str).map(str::to_owned);
        self.chunk(Delta {
            tool_calls: vec![ToolCallDelta {
                index: ordinal,
                id: field("toolUseId"),
                kind: Some("function".to_owned()),
                function: Some(FunctionCallDelta { name: field("name"), arguments: Some(String::new()) }),
                extra: Extra::new(),
            }],
            ..Delta::default()
        })
    }

    fn delta(&mut self, index: u64, delta: &Value) -> Option<ChatChunk> {
        if let Some(text) = delta.get("text").and_then(Value::as_str) {
            return Some(self.chunk(Delta { content: Some(text.to_owned()), ..Delta::default() }));
        }
        if let Some(input) = delta.pointer("/toolUse/input").and_then(Value::as_str) {
            let ordinal = *self.tools.get(&index)?;
            return Some(self.chunk(Delta {
                tool_calls: vec![ToolCallDelta {
                    index: ordinal,
                    function: Some(FunctionCallDelta { name: None, arguments: Some(input.to_owned()) }),
                    ..ToolCallDelta::default()
                }],
                ..Delta::default()
            }));
        }
        if let Some(text) = delta.pointer("/reasoningContent/text").and_then(Value::as_str) {
            return Some(self.chunk(Delta { reasoning_content: Some(text.to_owned()), ..Delta::default() }));
        }
        None
    }

    fn chunk(&self, delta: Delta) -> ChatChunk {
        ChatChunk {
            id: self.id.clone(),
            model: self.model.clone(),
            created: self.created,
            choices: vec![ChunkChoice { index: 0, delta, finish_reason: None }],
            ..ChatChunk::default()
        }
    }

    /// The finish: why the answer ended.
    fn finish(&self) -> ChatChunk {
        let mut chunk = self.chunk(Delta::default());
        chunk.choices[0].finish_reason =
            Some(finish_reason(self.stop_reason.as_deref().unwrap_or("end_turn")));
        chunk
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;
    use switchyard::chat::FinishReason;

    fn event(kind: &str, payload: &str) -> Result<Frame, ProviderError> {
        Ok(Frame::Event { kind: kind.to_owned(), payload: Bytes::copy_from_slice(payload.as_bytes()) })
    }

    async fn collect(frames: Vec<Result<Frame, ProviderError>>) -> Vec<Result<ChatChunk, ProviderError>> {
        chunk_stream(futures_util::stream::iter(frames), "m".into(), "id".into(), Redactor::default())
            .collect()
            .await
    }

    #[tokio::test]
    async fn text_and_tool_calls_stream_then_the_finish_at_message_stop_then_the_usage() {
        let chunks = collect(vec![
            event("messageStart", r#"{"role":"assistant"}"#),
            event("contentBlockDelta", r#"{"contentBlockIndex":0,"delta":{"text":"Hi"}}"#),
            event("contentBlockStop", r#"{"contentBlockIndex":0}"#),
            event(
                "contentBlockStart",
                r#"{"contentBlockIndex":1,"start":{"toolUse":{"toolUseId":"t1","name":"f"}}}"#,
            ),
            event(
                "contentBlockDelta",
                r#"{"contentBlockIndex":1,"delta":{"toolUse":{"input":"{\"a\":1}"}}}"#,
            ),
            event("contentBlockStop", r#"{"contentBlockIndex":1}"#),
            event("messageStop", r#"{"stopReason":"tool_use"}"#),
            event(
                "metadata",
                r#"{"usage":{"inputTokens":3,"outputTokens":2,"totalTokens":5},"metrics":{"latencyMs":1}}"#,
            ),
        ])
        .await;
        let chunks: Vec<ChatChunk> = chunks.into_iter().map(Result::unwrap).collect();
        assert_eq!(chunks[1].choices[0].delta.content.as_deref(), Some("Hi"));
        assert_eq!(chunks[2].choices[0].delta.tool_calls[0].id.as_deref(), Some("t1"));
        assert_eq!(
            chunks[3].choices[0].delta.tool_calls[0].function.as_ref().unwrap().arguments.as_deref(),
            Some(r#"{"a":1}"#)
        );
        let [.., finish, usage] = chunks.as_slice() else { panic!("{chunks:?}") };
        assert_eq!(finish.choices[0].finish_reason, Some(FinishReason::ToolCalls));
        assert!(usage.choices.is_empty());
        assert_eq!(usage.usage.unwrap().total_tokens, 5);
        assert_eq!((usage.id.as_str(), usage.model.as_str()), ("id", "m"));
    }

    #[tokio::test]
    async fn a_stream_that_ends_after_message_stop_without_metadata_is_whole_and_says_so() {
        let chunks = collect(vec![
            event("contentBlockDelta", r#"{"contentBlockIndex":0,"delta":{"text":"Hi"}}"#),
            event("messageStop", r#"{"stopReason":"end_turn"}"#),
        ])
        .await;
        let chunks: Vec<ChatChunk> = chunks.into_iter().map(Result::unwrap).collect();
        assert_eq!(chunks[1].choices[0].finish_reason, Some(FinishReason::Stop));
        assert_eq!(chunks[2].notice, Some(StreamNotice::Unterminated));
        assert_eq!(chunks.len(), 3);
    }

    #[tokio::test]
    async fn an_exception_frame_ends_the_stream_with_its_classified_error() {
        let chunks = collect(vec![
            event("messageStart", r#"{"role":"assistant"}"#),
            Ok(Frame::Exception {
                kind: "throttlingException".into(),
                payload: Bytes::from_static(br#"{"message":"slow"}"#),
            }),
            event("contentBlockDelta", r#"{"contentBlockIndex":0,"delta":{"text":"never"}}"#),
        ])
        .await;
        assert_eq!(chunks.len(), 2);
        assert_eq!(chunks[1].as_ref().unwrap_err().kind(), ErrorKind::RateLimited);
    }

    #[tokio::test]
    async fn a_stream_cut_before_message_stop_is_a_transport_error() {
        let chunks =
            collect(vec![event("contentBlockDelta", r#"{"contentBlockIndex":0,"delta":{"text":"Hi"}}"#)])
                .await;
        assert_eq!(chunks.last().unwrap().as_ref().unwrap_err().kind(), ErrorKind::Transport);
    }
}
