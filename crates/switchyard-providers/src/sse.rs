//! Server-sent events: an incremental parser that accepts bytes split anywhere (inside a line,
//! inside a UTF-8 character, between `\r` and `\n`) and a stream adapter over a response body.

use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use futures_core::Stream;
use switchyard::{ErrorKind, ProviderError};

/// One event: its `event:` name (if any) and its `data:` lines joined with `\n`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SseEvent {
    pub event: Option<String>,
    pub data: String,
}

/// An incremental SSE parser (the WHATWG event-stream rules, minus `id`/`retry`, which no LLM
/// provider relies on).
#[derive(Debug, Default)]
pub struct SseParser {
    buffer: Vec<u8>,
    event: Option<String>,
    data: Option<String>,
    /// The last byte fed was `\r`: a following `\n` belongs to the same line end.
    after_cr: bool,
    /// Lines that are not `field: value` (some providers send raw JSON error bodies mid-stream).
    stray: Vec<String>,
}

impl SseParser {
    pub fn new() -> Self {
        Self::default()
    }

    /// Feeds bytes; returns the events they complete.
    pub fn feed(&mut self, bytes: &[u8]) -> Vec<SseEvent> {
        let mut events = Vec::new();
        for &byte in bytes {
            if self.after_cr {
                self.after_cr = false;
                if byte == b'\n' {
                    continue;
                }
            }
            match byte {
                b'\n' => self.end_line(&mut events),
                b'\r' => {
                    self.after_cr = true;
                    self.end_line(&mut events);
                }
                _ => self.buffer.push(byte),
            }
        }
        events
    }

    /// Ends the input: a final event without its blank line is still delivered.
    pub fn finish(&mut self) -> Option<SseEvent> {
        let mut events = Vec::new();
        if !self.buffer.is_empty() {
            self.end_line(&mut events);
        }
        self.dispatch(&mut events);
        events.pop()
    }

    /// Takes the non-SSE lines seen so far.
    pub fn take_stray(&mut self) -> Vec<String> {
        std::mem::take(&mut self.stray)
    }

    /// Whether a partial line or event is pending.
    pub fn has_partial(&self) -> bool {
        !self.buffer.is_empty() || self.data.is_some()
    }

    fn end_line(&mut self, events: &mut Vec<SseEvent>) {
        let line = String::from_utf8_lossy(&self.buffer).into_owned();
        self.buffer.clear();
        if line.is_empty() {
            self.dispatch(events);
            return;
        }
        if line.starts_with(':') {
            return; // a comment (keep-alive)
        }
        let (field, value) = match line.split_once(':') {
            Some((field, value)) => (field, value.strip_prefix(' ').unwrap_or(value)),
            None => (line.as_str(), ""),
        };
        match field {
            "data" => match &mut self.data {
                Some(data) => {
                    data.push('\n');
                    data.push_str(value);
                }
                None => self.data = Some(value.to_owned()),
            },
            "event" => self.event = Some(value.to_owned()),
            "id" | "retry" => {}
            _ => self.stray.push(line),
        }
    }

    fn dispatch(&mut self, events: &mut Vec<SseEvent>) {
        let event = self.event.take();
        if let Some(data) = self.data.take() {
            events.push(SseEvent { event, data });
        }
    }
}

/// Turns a byte stream (a response body) into SSE events. A body error ends the stream with a
/// transport error.
pub struct SseStream<S> {
    body: S,
    parser: SseParser,
    ready: std::collections::VecDeque<SseEvent>,
    done: bool,
}

impl<S> SseStream<S> {
    pub fn new(body: S) -> Self {
        Self { body, parser: SseParser::new(), ready: Default::default(), done: false }
    }

    /// Non-SSE lines seen so far (for providers that put raw JSON errors in the stream).
    pub fn take_stray(&mut self) -> Vec<String> {
        self.parser.take_stray()
    }
}

impl<S, E> Stream for SseStream<S>
where
    S: Stream<Item = Result<Bytes, E>> + Unpin,
    E: std::fmt::Display,
{
    type Item = Result<SseEvent, ProviderError>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = &mut *self;
        loop {
            if let Some(event) = this.ready.pop_front() {
                return Poll::Ready(Some(Ok(event)));
            }
            if this.done {
                return Poll::Ready(None);
            }
            match Pin::new(&mut this.body).poll_next(cx) {
                Poll::Ready(Some(Ok(bytes))) => this.ready.extend(this.parser.feed(&bytes)),
                Poll::Ready(Some(Err(error))) => {
                    this.done = true;
                    return Poll::Ready(Some(Err(ProviderError::new(
                        ErrorKind::Transport,
                        format!("the stream broke: {error}"),
                    ))));
                }
                Poll::Ready(None) => {
                    this.done = true;
                    this.ready.extend(this.parser.finish());
                }
                Poll::Pending => return Poll::Pending,
            }
        }
    }
}
