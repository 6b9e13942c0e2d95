//! Gemini's `streamGenerateContent?alt=sse` events into canonical chunks. Each event is a
//! whole `GenerateContentResponse`; Gemini sends no `[DONE]`, so the stream is complete only
//! once a finish reason (or a prompt block) has arrived. It ends there, once every candidate
//! finished and the answer's token count came (Gemini's last event carries both; early events
//! count the prompt only), without waiting on the body's end, which is then read in the
//! background so that the connection is kept; a body that ends after the finish ends it too.

use std::collections::VecDeque;
use std::fmt;
use std::task::{Context, Poll};

use bytes::Bytes;
use futures_core::Stream;
use futures_util::StreamExt;
use switchyard::assembly::Finishes;
use switchyard::chat::{
    ChatChunk, ChunkChoice, Delta, Extra, FinishReason, FunctionCallDelta, Role, ToolCallDelta, Usage,
};
use switchyard::{ErrorKind, ProviderError};

use super::classify::{Redactor, classify_google_error, parse_google_error};
use super::response::{Read, failed_generation, finish_reason, read_parts, unix_now};
use super::wire::{Candidate, GenerateContentResponse, UsageMetadata};
use crate::http;
use crate::sse::{ReadChunks, Skips, SseEvent, SseStream};

/// Turns Gemini's SSE events (each a whole `GenerateContentResponse`) into canonical chunks:
/// a role chunk first, then text and complete tool calls, then a finish chunk with usage.
/// Gemini sends no `[DONE]`: a body that ends before any finish reason is a broken stream.
pub(super) struct GeminiChunks<S> {
    /// The SSE events of the body.
    events: SseStream<S>,
    /// The model on every chunk: the upstream model asked for, replaced by the answer's
    /// `modelVersion` once one arrives.
    model: String,
    /// Cuts the key out of error texts.
    redactor: Redactor,
    /// Chunks (or the final error) made and not yet yielded: one event can make several.
    ready: VecDeque<Result<ChatChunk, ProviderError>>,
    /// Non-SSE lines so far: some Gemini failures arrive as raw (pretty-printed) error JSON.
    stray: String,
    /// The first `responseId` seen, on every later chunk; empty before it.
    id: String,
    /// The role chunk was made.
    started: bool,
    /// A finish reason (or a prompt block) was seen: the answer is complete, and the body may
    /// end.
    finished: bool,
    /// The candidates begun and those finished.
    candidates: Finishes,
    /// An event with a finish reason, or one after it, carried the answer's token count.
    counted: bool,
    /// Nothing more is read: the body ended or the stream failed.
    done: bool,
    /// Tool calls seen per candidate index, for `ToolCallDelta::index`.
    tool_calls_per_choice: Vec<(u32, u32)>,
    /// The candidates that gave text or a call (an empty `STOP` is no answer).
    said: Vec<u32>,
    /// Events skipped as unreadable so far.
    skips: Skips,
}

impl<S> GeminiChunks<S> {
    /// The chunks of `events`, an answer of the upstream `model`.
    pub(super) fn new(events: SseStream<S>, model: &str, redactor: Redactor) -> Self {
        Self {
            events,
            model: model.to_owned(),
            redactor,
            ready: VecDeque::new(),
            stray: String::new(),
            id: String::new(),
            started: false,
            finished: false,
            candidates: Finishes::default(),
            counted: false,
            done: false,
            tool_calls_per_choice: Vec::new(),
            said: Vec::new(),
            skips: Skips::default(),
        }
    }

    /// Ends the stream with `error`, after the chunks already made.
    fn fail(&mut self, error: ProviderError) {
        self.ready.push_back(Err(error));
        self.done = true;
    }

    /// A chunk of this answer with `choices` and `usage`, stamped with the current time.
    fn chunk(&self, choices: Vec<ChunkChoice>, usage: Option<Usage>) -> ChatChunk {
        ChatChunk {
            id: self.id.clone(),
            model: self.model.clone(),
            created: unix_now(),
            choices,
            usage,
            extra: Extra::new(),
            verbatim: None,
            notice: None,
        }
    }

    /// Makes the chunks of one event: the role chunk (first event only), then one with each
    /// candidate's new text and tool calls, then one with the finish reasons and usage. An
    /// event that is an error, or not JSON, fails the stream.
    fn on_event(&mut self, event: &SseEvent) {
        let answer = match self.decode(event) {
            Ok(answer) => answer,
            // An event that does not read (not an error Google wrote) is skipped while few are.
            Err(failure) if failure.kind() == ErrorKind::MalformedResponse => {
                return match self.skips.skip(failure, &event.data) {
                    Ok(notice) => self.ready.push_back(Ok(notice)),
                    Err(failure) => self.fail(failure),
                };
            }
            Err(failure) => return self.fail(failure),
        };
        if self.id.is_empty() {
            self.id = answer.response_id.clone().unwrap_or_default();
        }
        if let Some(version) = answer.model_version.as_ref().filter(|v| !v.is_empty()) {
            self.model.clone_from(version);
        }
        let usage = answer.usage_metadata.as_ref().map(UsageMetadata::to_usage);
        // Early events count the prompt only; the answer's own count comes with its end.
        let final_count = answer.usage_metadata.as_ref().is_some_and(UsageMetadata::counts_the_answer);
        if !self.started {
            self.started = true;
            self.push_role_chunk(&answer.candidates, usage);
        }
        if answer.prompt_block().is_some() {
            self.finished = true;
            // The prompt was refused: nothing more comes.
            self.done = true;
            let finish =
                ChunkChoice { finish_reason: Some(FinishReason::ContentFilter), ..ChunkChoice::default() };
            let chunk = self.chunk(vec![finish], usage);
            self.ready.push_back(Ok(chunk));
            return;
        }
        let failed =
            answer.candidates.iter().find_map(|c| c.finish_reason.as_deref().and_then(failed_generation));
        if let Some(error) = failed {
            return self.fail(error);
        }
        let mut content = Vec::new();
        let mut finishes = Vec::new();
        for candidate in &answer.candidates {
            let (delta, finish) = self.on_candidate(candidate);
            content.extend(delta);
            finishes.extend(finish);
        }
        if let Some(error) = self.empty_stop(&answer.candidates) {
            return self.fail(error);
        }
        if !content.is_empty() {
            let chunk = self.chunk(content, None);
            self.candidates.see(&chunk);
            self.ready.push_back(Ok(chunk));
        }
        if !finishes.is_empty() {
            self.finished = true;
            self.counted |= final_count;
            let chunk = self.chunk(finishes, usage);
            self.candidates.see(&chunk);
            self.ready.push_back(Ok(chunk));
        } else if answer.candidates.is_empty() && self.finished && usage.is_some() {
            // A usage-only event after the finish: pass the final count on.
            self.counted |= final_count;
            let chunk = self.chunk(Vec::new(), usage);
            self.ready.push_back(Ok(chunk));
        }
        // Every candidate finished and the answer was counted: the answer is whole.
        self.done |= self.counted && self.candidates.is_whole();
    }

    /// The answer one event holds. An event that is not the JSON expected, or that carries an
    /// error, is the error the stream fails with.
    fn decode(&self, event: &SseEvent) -> Result<GenerateContentResponse, ProviderError> {
        let answer: GenerateContentResponse = match serde_json::from_str(&event.data) {
            Ok(answer) => answer,
            Err(error) => {
                return Err(match parse_google_error(&event.data) {
                    Some(google) => classify_google_error(
                        google.http_status().unwrap_or(500),
                        &google,
                        None,
                        &self.redactor,
                    ),
                    None => {
                        let detail = format!(
                            "a stream event is not the JSON expected ({error}): {}",
                            http::excerpt(&event.data)
                        );
                        ProviderError::new(ErrorKind::MalformedResponse, self.redactor.clean(&detail))
                    }
                });
            }
        };
        if let Some(error) = &answer.error {
            let status = error.http_status().unwrap_or(500);
            return Err(classify_google_error(status, error, None, &self.redactor));
        }
        Ok(answer)
    }

    /// Queues the role chunk: one choice per candidate of the first event (choice 0 when it
    /// has none), with the event's usage: Gemini counts the prompt from its first event on, so
    /// a client told the input tokens at the start (Anthropic's `message_start`) hears them.
    /// Later counts replace it.
    fn push_role_chunk(&mut self, candidates: &[Candidate], usage: Option<Usage>) {
        let mut indexes: Vec<u32> = candidates.iter().map(|c| c.index.unwrap_or(0)).collect();
        if indexes.is_empty() {
            indexes.push(0);
        }
        let choices = indexes
            .into_iter()
            .map(|index| ChunkChoice {
                index,
                delta: Delta { role: Some(Role::Assistant), ..Delta::default() },
                finish_reason: None,
            })
            .collect();
        let role = self.chunk(choices, usage);
        self.candidates.see(&role);
        self.ready.push_back(Ok(role));
    }

    /// The error of a candidate of this event that finished (`STOP`) having given no text or
    /// call, in this event or before ([`empty_stop`](super::response::empty_stop));
    /// [`on_candidate`](Self::on_candidate) notes those that gave some.
    fn empty_stop(&self, candidates: &[Candidate]) -> Option<ProviderError> {
        candidates.iter().find_map(|candidate| {
            let said = self.said.contains(&candidate.index.unwrap_or(0));
            candidate.finish_reason.as_deref().and_then(|reason| super::response::empty_stop(reason, said))
        })
    }

    /// The chunk choices of one candidate in an event: its new text and tool calls (`None`
    /// when it has neither), and its finish reason (`None` before its last event).
    fn on_candidate(&mut self, candidate: &Candidate) -> (Option<ChunkChoice>, Option<ChunkChoice>) {
        let index = candidate.index.unwrap_or(0);
        let parts = candidate.content.as_ref().map_or(&[][..], |content| &content.parts[..]);
        let Read { text, thoughts, calls } = read_parts(parts);
        if (!text.is_empty() || !calls.is_empty()) && !self.said.contains(&index) {
            self.said.push(index);
        }
        let seen = self.tool_calls_seen(index);
        let deltas: Vec<ToolCallDelta> = calls
            .into_iter()
            .zip(*seen..)
            .map(|(call, position)| ToolCallDelta {
                index: position,
                id: Some(call.id),
                kind: Some(call.kind),
                function: Some(FunctionCallDelta {
                    name: Some(call.function.name),
                    arguments: Some(call.function.arguments),
                }),
                extra: Default::default(),
            })
            .collect();
        *seen += u32::try_from(deltas.len()).unwrap_or(u32::MAX);
        let had_tool_calls = *seen > 0;
        let mut delta = None;
        if !text.is_empty() || !thoughts.is_empty() || !deltas.is_empty() {
            let text = (!text.is_empty()).then_some(text);
            let reasoning_content = (!thoughts.is_empty()).then_some(thoughts);
            delta = Some(ChunkChoice {
                index,
                delta: Delta { content: text, tool_calls: deltas, reasoning_content, ..Delta::default() },
                finish_reason: None,
            });
        }
        let finish = candidate.finish_reason.as_ref().map(|reason| ChunkChoice {
            index,
            delta: Delta::default(),
            finish_reason: Some(finish_reason(reason, had_tool_calls)),
        });
        (delta, finish)
    }

    /// The count of tool calls candidate `index` has streamed so far (the next call's
    /// `ToolCallDelta::index`), starting at 0.
    fn tool_calls_seen(&mut self, index: u32) -> &mut u32 {
        let position = match self.tool_calls_per_choice.iter().position(|(i, _)| *i == index) {
            Some(position) => position,
            None => {
                self.tool_calls_per_choice.push((index, 0));
                self.tool_calls_per_choice.len() - 1
            }
        };
        &mut self.tool_calls_per_choice[position].1
    }

    /// Collects non-SSE lines; once they form a Google error object, the stream fails with it.
    fn take_stray(&mut self) {
        for line in self.events.take_stray() {
            self.stray.push_str(&line);
            self.stray.push('\n');
        }
        if self.stray.is_empty() || self.done {
            return;
        }
        if let Some(error) = parse_google_error(&self.stray) {
            let status = error.http_status().unwrap_or(500);
            let error = classify_google_error(status, &error, None, &self.redactor);
            self.fail(error);
        } else if self.stray.len() > http::ERROR_BODY_LIMIT {
            let detail = format!("the stream holds text that is not SSE: {}", http::excerpt(&self.stray));
            let error = ProviderError::new(ErrorKind::MalformedResponse, self.redactor.clean(&detail));
            self.fail(error);
        }
    }

    /// The body ended: a clean end after a finish reason; otherwise leftover non-SSE text is a
    /// malformed response, and a missing finish reason a transport error (a cut stream).
    fn on_end(&mut self) {
        if self.done {
            return;
        }
        if !self.stray.is_empty() {
            let detail = format!("the stream holds text that is not SSE: {}", http::excerpt(&self.stray));
            let error = ProviderError::new(ErrorKind::MalformedResponse, self.redactor.clean(&detail));
            return self.fail(error);
        }
        if !self.finished {
            return self
                .fail(ProviderError::new(ErrorKind::Transport, "stream ended before a finish reason"));
        }
        self.done = true;
    }
}

impl<S, E> ReadChunks for GeminiChunks<S>
where
    S: Stream<Item = Result<Bytes, E>> + Send + Unpin + 'static,
    E: fmt::Display,
{
    type Events = SseStream<S>;

    fn poll_chunk(&mut self, cx: &mut Context<'_>) -> Poll<Option<Result<ChatChunk, ProviderError>>> {
        loop {
            if let Some(item) = self.ready.pop_front() {
                return Poll::Ready(Some(item));
            }
            if self.done {
                return Poll::Ready(None);
            }
            match self.events.poll_next_unpin(cx) {
                Poll::Ready(Some(Ok(event))) => {
                    self.on_event(&event);
                    self.take_stray();
                }
                Poll::Ready(Some(Err(error))) if self.finished => {
                    // The answer is complete; a connection that breaks while closing costs nothing.
                    tracing::debug!(%error, "gemini stream broke after its finish reason");
                    self.done = true;
                }
                Poll::Ready(Some(Err(error))) => {
                    let detail = self.redactor.clean(error.detail());
                    self.fail(ProviderError::new(error.kind(), detail));
                }
                Poll::Ready(None) => {
                    self.take_stray();
                    self.on_end();
                }
                Poll::Pending => {
                    self.take_stray();
                    if self.ready.is_empty() {
                        return Poll::Pending;
                    }
                }
            }
        }
    }

    fn into_events(self) -> SseStream<S> {
        self.events
    }
}
