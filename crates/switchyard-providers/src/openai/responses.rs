//! OpenAI's Responses API spoken natively: a Responses client's body goes to `/responses` as
//! the gateway rebuilt it (the whole conversation, `store: false`), and the answer and every
//! event come back as OpenAI wrote them. What routing observes (text, tool calls, the finish,
//! usage) is read from them into the canonical types.

use std::collections::HashMap;
use std::task::{Context, Poll, ready};

use futures_util::StreamExt;
use serde_json::Value;
use switchyard::chat::{
    ChatChunk, ChatResponse, Choice, ChunkChoice, CompletionTokensDetails, Content, Delta, Dialect, Extra,
    FinishReason, FunctionCallDelta, Message, PromptTokensDetails, ToolCall, ToolCallDelta, Usage, Verbatim,
};
use switchyard::credential::Secret;
use switchyard::provider::ChunkStream;
use switchyard::{ErrorKind, ProviderError};

use super::errors;
use crate::sse::{ReadChunks, Skips, SseEvent, SseStream};

/// A whole Responses answer: canonical for routing, with its bytes for the client.
pub(super) fn parse_answer(bytes: bytes::Bytes, key: Option<&Secret>) -> Result<ChatResponse, ProviderError> {
    let value: Value = serde_json::from_slice(&bytes).map_err(|error| {
        let text = String::from_utf8_lossy(&bytes);
        let detail =
            format!("the answer is not a Responses object ({error}): {}", crate::http::excerpt(&text));
        ProviderError::new(ErrorKind::MalformedResponse, errors::scrub(&detail, key))
    })?;
    if value.get("status").and_then(Value::as_str) == Some("failed") {
        return Err(failed(&value, key));
    }
    let mut answer = canonical(&value);
    answer.verbatim = Some(Verbatim::new(Dialect::Responses, bytes));
    Ok(answer)
}

/// The error a failed response states.
fn failed(response: &Value, key: Option<&Secret>) -> ProviderError {
    let error = &response["error"];
    let code = error["code"].as_str().unwrap_or("server_error");
    let message = error["message"].as_str().unwrap_or("the response failed");
    let kind = errors::code_kind(code).unwrap_or(ErrorKind::Unavailable);
    ProviderError::new(kind, errors::scrub(message, key)).with_code(code)
}

/// The canonical answer of a response object: its text, refusal and function calls as one
/// assistant message; its status as the finish; its usage.
fn canonical(response: &Value) -> ChatResponse {
    let (mut text, mut refusal, mut calls) = (String::new(), String::new(), Vec::new());
    for item in response["output"].as_array().into_iter().flatten() {
        match item["type"].as_str() {
            Some("message") => {
                for part in item["content"].as_array().into_iter().flatten() {
                    match part["type"].as_str() {
                        Some("output_text") => text.push_str(part["text"].as_str().unwrap_or_default()),
                        Some("refusal") => refusal.push_str(part["refusal"].as_str().unwrap_or_default()),
                        _ => {}
                    }
                }
            }
            Some("function_call") => calls.push(ToolCall::function(
                item["call_id"].as_str().unwrap_or_default().to_owned(),
                item["name"].as_str().unwrap_or_default().to_owned(),
                item["arguments"].as_str().unwrap_or_default().to_owned(),
            )),
            // A custom tool's call, as the Chat Completions reader gives one.
            Some("custom_tool_call") => {
                let mut call =
                    ToolCall::function(item["call_id"].as_str().unwrap_or_default().to_owned(), "", "");
                call.kind = "custom".to_owned();
                call.extra.insert(
                    "custom".to_owned(),
                    serde_json::json!({"name": item["name"], "input": item["input"]}),
                );
                calls.push(call);
            }
            _ => {}
        }
    }
    let finish = finish(response, !calls.is_empty());
    let mut message = Message {
        content: (!text.is_empty()).then(|| Content::Text(text)),
        tool_calls: calls,
        ..Message::assistant("")
    };
    if !refusal.is_empty() {
        message.extra.insert("refusal".to_owned(), Value::String(refusal));
    }
    ChatResponse {
        id: response["id"].as_str().unwrap_or_default().to_owned(),
        model: response["model"].as_str().unwrap_or_default().to_owned(),
        created: response["created_at"].as_f64().map_or(0, |t| t as u64),
        choices: vec![Choice { index: 0, message, finish_reason: Some(finish), extra: Default::default() }],
        usage: usage(&response["usage"]),
        ..ChatResponse::default()
    }
}

/// The canonical finish of a response's status.
fn finish(response: &Value, calls: bool) -> FinishReason {
    match (response["status"].as_str(), response["incomplete_details"]["reason"].as_str()) {
        (Some("incomplete"), Some("content_filter")) => FinishReason::ContentFilter,
        (Some("incomplete"), _) => FinishReason::Length,
        _ if calls => FinishReason::ToolCalls,
        _ => FinishReason::Stop,
    }
}

/// Responses usage as canonical usage.
fn usage(usage: &Value) -> Option<Usage> {
    let count = |value: &Value| value.as_u64().and_then(|n| u32::try_from(n).ok());
    let prompt = count(&usage["input_tokens"])?;
    let completion = count(&usage["output_tokens"]).unwrap_or(0);
    let mut canonical = Usage::new(prompt, completion);
    if let Some(total) = count(&usage["total_tokens"]) {
        canonical.total_tokens = total;
    }
    canonical.prompt_tokens_details = count(&usage["input_tokens_details"]["cached_tokens"])
        .map(|cached| PromptTokensDetails { cached_tokens: Some(cached), cache_write_tokens: None });
    canonical.completion_tokens_details = count(&usage["output_tokens_details"]["reasoning_tokens"])
        .map(|reasoning| CompletionTokensDetails { reasoning_tokens: Some(reasoning) });
    Some(canonical)
}

/// The chunks of a Responses stream: one per event, each with its frame. An event that is not
/// JSON is skipped with a notice while few are ([`crate::sse::MAX_SKIPPED`]); one more fails
/// the stream. Once it ended, the rest of the body is read so that its connection is kept.
///
/// Only the response's own end (`response.completed`, `response.incomplete`, `response.failed`)
/// ends it: no item says the answer is over, since an agent's turn is a message and then its
/// calls (a preamble, "I'll check that file.", then the call), each item done in its turn. A
/// body that ends without it, every item begun done or not, is broken off, as Codex reads it.
pub(super) fn chunks(response: crate::http::Response, key: Option<Secret>) -> ChunkStream {
    let events = SseStream::new(crate::http::body_stream(response));
    crate::sse::read_chunks(Reader {
        events,
        key,
        calls: HashMap::new(),
        ended: false,
        skips: Skips::default(),
    })
}

impl ReadChunks for Reader {
    type Events = SseStream<crate::http::BodyStream>;

    fn poll_chunk(&mut self, cx: &mut Context<'_>) -> Poll<Option<Result<ChatChunk, ProviderError>>> {
        if self.ended {
            return Poll::Ready(None);
        }
        let item = match ready!(self.events.poll_next_unpin(cx)) {
            // An event that is not JSON is skipped while few are; its frame is not passed on.
            Some(Ok(event)) => match self.read(&event) {
                Err(error) if error.kind() == ErrorKind::MalformedResponse => {
                    self.skips.skip(error, &event.data)
                }
                read => read,
            },
            Some(Err(error)) => Err(error),
            None => Err(ProviderError::new(ErrorKind::Transport, "stream ended before response.completed")),
        };
        // `read` ends the stream at `response.completed`; an error ends it too.
        self.ended |= item.is_err();
        Poll::Ready(Some(item))
    }

    fn into_events(self) -> Self::Events {
        self.events
    }
}

struct Reader {
    events: SseStream<crate::http::BodyStream>,
    key: Option<Secret>,
    /// Function-call item ids, numbered as canonical tool calls.
    calls: HashMap<String, u32>,
    ended: bool,
    /// Events skipped as unreadable so far.
    skips: Skips,
}

impl Reader {
    /// The canonical fragment of a call an event of `kind` carries: a function call or a
    /// custom tool's call (Codex's `apply_patch` on GPT-5) beginning, or more of its arguments
    /// (input). Calls are numbered in the order they begin; so that routing sees a call (a
    /// break inside one is not continued as text), a custom call is one too, as the Chat
    /// Completions reader gives it.
    fn call(&mut self, kind: &str, data: &Value) -> Option<ToolCallDelta> {
        let custom = |value: Value| [("custom".to_owned(), value)].into_iter().collect();
        let item = &data["item"];
        if kind == "response.output_item.added" {
            let is_custom = match item["type"].as_str() {
                Some("function_call") => false,
                Some("custom_tool_call") => true,
                _ => return None,
            };
            let index = u32::try_from(self.calls.len()).unwrap_or(u32::MAX);
            self.calls.insert(item["id"].as_str().unwrap_or_default().to_owned(), index);
            let name = item["name"].as_str().map(str::to_owned);
            let (function, extra) = match is_custom {
                true => (None, custom(serde_json::json!({ "name": name }))),
                false => (Some(FunctionCallDelta { name, arguments: Some(String::new()) }), Extra::default()),
            };
            let kind = Some(if is_custom { "custom" } else { "function" }.to_owned());
            return Some(ToolCallDelta {
                index,
                id: item["call_id"].as_str().map(str::to_owned),
                kind,
                function,
                extra,
            });
        }
        let index = *self.calls.get(data["item_id"].as_str().unwrap_or_default())?;
        let piece = data["delta"].as_str().map(str::to_owned);
        let (function, extra) = match kind {
            "response.custom_tool_call_input.delta" => (None, custom(serde_json::json!({ "input": piece }))),
            _ => (Some(FunctionCallDelta { name: None, arguments: piece }), Extra::default()),
        };
        Some(ToolCallDelta { index, id: None, kind: None, function, extra })
    }

    fn read(&mut self, event: &SseEvent) -> Result<ChatChunk, ProviderError> {
        let data: Value = serde_json::from_str(&event.data).map_err(|error| {
            let detail =
                format!("a stream event is not JSON ({error}): {}", crate::http::excerpt(&event.data));
            ProviderError::new(ErrorKind::MalformedResponse, errors::scrub(&detail, self.key.as_ref()))
        })?;
        let kind = data["type"].as_str().or(event.event.as_deref()).unwrap_or_default();
        let mut delta = Delta::default();
        let mut chunk = ChatChunk::default();
        match kind {
            "response.output_text.delta" => delta.content = data["delta"].as_str().map(str::to_owned),
            "response.refusal.delta" => delta.refusal = data["delta"].as_str().map(str::to_owned),
            "response.output_item.added"
            | "response.function_call_arguments.delta"
            | "response.custom_tool_call_input.delta" => delta.tool_calls.extend(self.call(kind, &data)),
            "response.completed" | "response.incomplete" => {
                self.ended = true;
                let response = &data["response"];
                let finish = finish(response, !self.calls.is_empty());
                chunk.usage = usage(&response["usage"]);
                chunk.choices.push(ChunkChoice {
                    index: 0,
                    delta: Delta::default(),
                    finish_reason: Some(finish),
                });
            }
            "response.failed" => return Err(failed(&data["response"], self.key.as_ref())),
            "error" => {
                let message = data["message"].as_str().unwrap_or("the stream reported an error");
                let code = data["code"].as_str();
                let kind = code.and_then(errors::code_kind).unwrap_or(ErrorKind::Unavailable);
                let error = ProviderError::new(kind, errors::scrub(message, self.key.as_ref()));
                return Err(match code {
                    Some(code) => error.with_code(code),
                    None => error,
                });
            }
            "response.created" => {
                chunk.id = data["response"]["id"].as_str().unwrap_or_default().to_owned();
                chunk.model = data["response"]["model"].as_str().unwrap_or_default().to_owned();
            }
            _ => {}
        }
        if delta != Delta::default() {
            chunk.choices.push(ChunkChoice { index: 0, delta, finish_reason: None });
        }
        let frame = Verbatim::new(Dialect::Responses, event.to_frame());
        chunk.verbatim = Some(if tells_progress(kind, &data) { frame.telling_progress() } else { frame });
        Ok(chunk)
    }
}

/// Whether an event of `kind` with `data` tells of progress: every one does (a hosted tool at
/// work, reasoning) but a keep-alive and a delta that adds nothing (a stalled server's
/// keep-alive), which the idle limit sees through.
fn tells_progress(kind: &str, data: &Value) -> bool {
    let empty_delta = kind.ends_with(".delta") && data["delta"].as_str().is_some_and(str::is_empty);
    kind != "keepalive" && !empty_delta
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn a_response_object_reads_as_one_canonical_choice_with_its_bytes_kept() {
        let object = json!({"id": "resp_1", "object": "response", "created_at": 5, "model": "gpt-5", "status": "completed",
            "output": [
                {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "gAAA"},
                {"type": "message", "id": "msg_1", "role": "assistant", "status": "completed",
                 "content": [{"type": "output_text", "text": "Let me check.", "annotations": []}]},
                {"type": "function_call", "id": "fc_1", "call_id": "call_1", "name": "weather", "arguments": "{}", "status": "completed"},
                {"type": "custom_tool_call", "id": "ctc_1", "call_id": "call_2", "name": "apply_patch", "input": "*** Begin Patch", "status": "completed"}],
            "usage": {"input_tokens": 20, "input_tokens_details": {"cached_tokens": 8}, "output_tokens": 30,
                      "output_tokens_details": {"reasoning_tokens": 12}, "total_tokens": 50}});
        let bytes = bytes::Bytes::from(object.to_string());
        let answer = parse_answer(bytes.clone(), None).unwrap();
        let choice = &answer.choices[0];
        assert_eq!(choice.message.text_content().as_deref(), Some("Let me check."));
        assert_eq!(choice.message.tool_calls[0].id, "call_1");
        let custom = &choice.message.tool_calls[1];
        assert_eq!((custom.kind.as_str(), custom.id.as_str()), ("custom", "call_2"));
        assert_eq!(
            custom.extra["custom"],
            serde_json::json!({"name": "apply_patch", "input": "*** Begin Patch"})
        );
        assert_eq!(choice.finish_reason, Some(FinishReason::ToolCalls));
        let usage = answer.usage.unwrap();
        assert_eq!((usage.total_tokens, usage.cached_tokens()), (50, Some(8)));
        assert_eq!(usage.completion_tokens_details.unwrap().reasoning_tokens, Some(12));
        assert_eq!(answer.verbatim.unwrap().in_dialect(Dialect::Responses), Some(&bytes));
    }

    #[test]
    fn a_keep_alive_or_an_empty_delta_tells_of_no_progress() {
        let delta = |text: &str| json!({"type": "response.output_text.delta", "delta": text});
        assert!(tells_progress("response.output_text.delta", &delta("Hi")));
        assert!(!tells_progress("response.output_text.delta", &delta("")));
        assert!(!tells_progress("response.reasoning_summary_text.delta", &delta("")));
        assert!(tells_progress("response.reasoning_summary_text.delta", &delta("Hmm")));
        assert!(!tells_progress("keepalive", &json!({"type": "keepalive"})));
        assert!(tells_progress("response.web_search_call.in_progress", &json!({})));
    }

    #[test]
    fn a_cut_or_failed_response_says_so() {
        let cut = json!({"status": "incomplete", "incomplete_details": {"reason": "max_output_tokens"}, "output": []});
        assert_eq!(canonical(&cut).choices[0].finish_reason, Some(FinishReason::Length));
        let filtered =
            json!({"status": "incomplete", "incomplete_details": {"reason": "content_filter"}, "output": []});
        assert!(canonical(&filtered).is_content_filtered());
        let failed =
            json!({"status": "failed", "error": {"code": "rate_limit_exceeded", "message": "slow down"}});
        let error = parse_answer(bytes::Bytes::from(failed.to_string()), None).unwrap_err();
        assert_eq!((error.kind(), error.code()), (ErrorKind::RateLimited, Some("rate_limit_exceeded")));
        // Its code decides, as for a Chat Completions error: a prompt too long takes the
        // route's context_window chain, not a retry.
        let long =
            json!({"status": "failed", "error": {"code": "context_length_exceeded", "message": "too long"}});
        let error = parse_answer(bytes::Bytes::from(long.to_string()), None).unwrap_err();
        assert_eq!(error.kind(), ErrorKind::ContextLength);
    }
}
