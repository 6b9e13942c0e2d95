//! Streamed answers as server-sent events, forwarded chunk by chunk.

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use axum::body::{Body, Bytes};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::Response;
use futures_util::Stream;
use switchyard::RoutedStream;
use switchyard::chat::{ChatChunk, Dialect as ChatDialect};

use super::errors::stream_error_event;
use super::{AppState, Dialect, RequestContext, add_usage_metrics, unix_now};

/// Turns one routed stream into wire events of a dialect.
pub trait Encoder: Send + Unpin + 'static {
    /// The events for one chunk (possibly none).
    fn chunk(&mut self, chunk: ChatChunk, out: &mut Vec<u8>);
    /// The events that end a successful stream.
    fn end(&mut self, out: &mut Vec<u8>);

    /// The events that end a stream failed after it began; `false` leaves them to the
    /// dialect's error event.
    fn fail(&mut self, error: &switchyard::ProviderError, out: &mut Vec<u8>) -> bool {
        let _ = (error, out);
        false
    }

    /// What the events just written must wait for before the client reads them (the Responses
    /// API's stored response reaching the fleet, before the client learns it completed and can
    /// continue it on another replica).
    fn hold(&mut self) -> Option<Held> {
        None
    }
}

/// A wait the events of a stream are held back for.
pub type Held = Pin<Box<dyn std::future::Future<Output = ()> + Send>>;

/// OpenAI's `chat.completion.chunk` events, ending with `data: [DONE]`. Usage goes in a chunk
/// of its own with `choices: []`, last, as OpenAI writes it (only when the client asked):
/// translated streams (Anthropic's, Gemini's) tell it on their finish chunk.
pub struct OpenAiEncoder {
    id: String,
    created: u64,
    include_usage: bool,
    /// The usage seen so far and the model that answered, for the usage chunk.
    usage: Option<(switchyard::chat::Usage, String)>,
}

impl Encoder for OpenAiEncoder {
    fn chunk(&mut self, mut chunk: ChatChunk, out: &mut Vec<u8>) {
        if let Some(frame) = chunk.verbatim.as_ref().and_then(|v| v.in_dialect(ChatDialect::OpenAi)) {
            // The provider's own event (its adapter leaves the frame off a usage chunk the
            // client did not ask for).
            out.extend_from_slice(frame);
            return;
        }
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

pub fn write_data(out: &mut Vec<u8>, value: &impl serde::Serialize) {
    out.extend_from_slice(b"data: ");
    // Serializing our own types cannot fail; an empty object keeps the stream well-formed.
    if serde_json::to_writer(&mut *out, value).is_err() {
        out.extend_from_slice(b"{}");
    }
    out.extend_from_slice(b"\n\n");
}

pub fn write_event(out: &mut Vec<u8>, name: &str, value: &impl serde::Serialize) {
    out.extend_from_slice(b"event: ");
    out.extend_from_slice(name.as_bytes());
    out.push(b'\n');
    write_data(out, value);
}

/// An OpenAI-dialect streaming response.
pub fn openai_stream(
    state: Arc<AppState>,
    exchange: RequestContext,
    stream: RoutedStream,
    include_usage: bool,
) -> Response {
    let encoder = OpenAiEncoder {
        id: format!("chatcmpl-{}", exchange.id),
        created: unix_now(),
        include_usage,
        usage: None,
    };
    respond(state, exchange, stream, encoder)
}

/// A streaming response: headers now (with the serving target), events as chunks arrive.
pub fn respond<E: Encoder>(
    state: Arc<AppState>,
    exchange: RequestContext,
    stream: RoutedStream,
    encoder: E,
) -> Response {
    let served_by = stream.served_by().clone();
    let attempts = stream.trail().len();
    let queued = stream.timing().queued;
    let route: Arc<str> = stream.route().into();
    let mut response = Response::new(Body::empty());
    *response.status_mut() = StatusCode::OK;
    exchange.stamp(&mut response, Some(&served_by), attempts);
    let hedged = stream.trail().attempts().iter().any(|a| a.hedge);
    super::stale_headers(&mut response, stream.trail());
    let headers = response.headers_mut();
    if hedged {
        headers.insert("x-switchyard-hedged", HeaderValue::from_static("1"));
    }
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("text/event-stream"));
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    if !queued.is_zero() {
        headers.insert("x-switchyard-queued-ms", HeaderValue::from(queued.as_millis() as u64));
    }
    let body = SseBody { state, exchange: Some(exchange), route, stream, encoder, done: false, held: None };
    *response.body_mut() = Body::from_stream(body);
    response
}

struct SseBody<E> {
    state: Arc<AppState>,
    /// Present until the request is logged (at the end, or when the client goes away).
    exchange: Option<RequestContext>,
    route: Arc<str>,
    stream: RoutedStream,
    encoder: E,
    done: bool,
    /// Events written, held back until the encoder's wait is over.
    held: Option<(Held, Bytes)>,
}

impl<E> SseBody<E> {
    fn finish(&mut self, status: u16) {
        if let Some(exchange) = self.exchange.take() {
            let served_by = self.stream.served_by().clone();
            let usage = self.stream.usage();
            add_usage_metrics(&self.state, &served_by, usage, self.stream.cost());
            let trail = self.stream.trail().clone();
            let timing = *self.stream.timing();
            let attempts = trail.len();
            exchange.finish(
                &self.state,
                self.route.clone(),
                Some(&served_by),
                status,
                attempts,
                Some(super::Settled { trail, timing, usage }),
            );
        }
    }
}

impl<E: Encoder> Stream for SseBody<E> {
    type Item = Result<Bytes, std::convert::Infallible>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = &mut *self;
        if let Some((wait, _)) = this.held.as_mut()
            && wait.as_mut().poll(cx).is_pending()
        {
            return Poll::Pending;
        }
        if let Some((_, events)) = this.held.take() {
            return Poll::Ready(Some(Ok(events)));
        }
        let mut out = Vec::new();
        while !this.done {
            match Pin::new(&mut this.stream).poll_next(cx) {
                Poll::Ready(Some(Ok(chunk))) => {
                    this.encoder.chunk(chunk, &mut out);
                    if !out.is_empty() {
                        return this.emit(out, cx);
                    }
                }
                Poll::Ready(Some(Err(failure))) => {
                    this.done = true;
                    if let Some(exchange) = this.exchange.as_mut() {
                        exchange.late_error = Some(failure.error.kind().as_str());
                    }
                    if this.encoder.fail(&failure.error, &mut out) {
                        this.finish(200);
                        return Poll::Ready(Some(Ok(Bytes::from(out))));
                    }
                    let id = this.exchange.as_ref().map(|e| e.id.clone()).unwrap_or_default();
                    let dialect = this.exchange.as_ref().map_or(Dialect::OpenAi, |e| e.dialect);
                    let attempts = serde_json::to_value(&failure.trail).unwrap_or_default();
                    let event = stream_error_event(dialect, &failure.error, &id, attempts);
                    match dialect {
                        Dialect::OpenAi => write_data(&mut out, &event),
                        Dialect::Anthropic => write_event(&mut out, "error", &event),
                    }
                    this.finish(200);
                    return Poll::Ready(Some(Ok(Bytes::from(out))));
                }
                Poll::Ready(None) => {
                    this.done = true;
                    this.encoder.end(&mut out);
                    this.finish(200);
                    return this.emit(out, cx);
                }
                Poll::Pending => return Poll::Pending,
            }
        }
        Poll::Ready(None)
    }
}

impl<E: Encoder> SseBody<E> {
    /// Events to send: at once, or once the encoder's wait is over.
    fn emit(
        &mut self,
        out: Vec<u8>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Bytes, std::convert::Infallible>>> {
        let events = Bytes::from(out);
        match self.encoder.hold() {
            None => Poll::Ready(Some(Ok(events))),
            Some(mut wait) => {
                if wait.as_mut().poll(cx).is_ready() {
                    return Poll::Ready(Some(Ok(events)));
                }
                self.held = Some((wait, events));
                Poll::Pending
            }
        }
    }
}

impl<E> Drop for SseBody<E> {
    fn drop(&mut self) {
        // The client went away before the end: 499, as nginx logs it.
        self.finish(499);
    }
}
