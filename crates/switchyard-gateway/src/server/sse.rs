//! Streamed answers as server-sent events, forwarded chunk by chunk.

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use axum::body::{Body, Bytes};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::Response;
use futures_util::Stream;
use switchyard::RoutedStream;
use switchyard::chat::Dialect;
use switchyard::trail::Via;
use switchyard_providers::anthropic::codec::MessagesStreamWriter;
use switchyard_providers::codec::{StreamWriter, write_data, write_event};
use switchyard_providers::openai::codec::ChatStreamWriter;
use tokio::time::{Instant, Sleep};

use super::deliver::routing_headers;
use super::errors::stream_error_event;
use super::finished::{Ending, Settled, metrics::usage};
use super::request::RequestContext;
use super::state::AppState;

/// How long a stream may stay quiet before the client is sent a keep-alive: an Anthropic
/// `ping` event (as Anthropic's API sends them), a Responses `keepalive` event (as OpenAI's
/// sends them), a comment line to Chat Completions clients (which every server-sent-events
/// reader skips). A model that thinks for minutes without a word for the
/// client (reasoning it is not shown, or no stream of reasoning at all) is not taken for a
/// dead connection by a proxy in between.
pub const KEEP_ALIVE: std::time::Duration = std::time::Duration::from_secs(15);

/// A stream writer of a dialect's codec, as the gateway drives it: what it writes may have to
/// wait (see [`Encoder::hold`]).
pub trait Encoder: StreamWriter {
    /// What the events just written must wait for before the client reads them (the Responses
    /// API's stored response reaching the fleet, before the client learns it completed and can
    /// continue it on another replica).
    fn hold(&mut self) -> Option<Held> {
        None
    }

    /// A keep-alive, after [`KEEP_ALIVE`] of quiet: a comment line, which every reader skips.
    fn keep_alive(&mut self, out: &mut Vec<u8>) {
        out.extend_from_slice(b": keep-alive\n\n");
    }
}

impl Encoder for ChatStreamWriter {}

impl Encoder for MessagesStreamWriter {
    /// Anthropic's own `ping` event.
    fn keep_alive(&mut self, out: &mut Vec<u8>) {
        out.extend_from_slice(b"event: ping\ndata: {\"type\": \"ping\"}\n\n");
    }
}

/// A wait the events of a stream are held back for.
pub type Held = Pin<Box<dyn std::future::Future<Output = ()> + Send>>;

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
    routing_headers(&mut response, stream.trail(), queued);
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("text/event-stream"));
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    let keep_alive = Box::pin(tokio::time::sleep(KEEP_ALIVE));
    let last_sent = Instant::now();
    let body = SseBody {
        cut: None,
        state,
        exchange: Some(exchange),
        route,
        stream,
        encoder,
        done: false,
        held: None,
        last_sent,
        keep_alive,
        sent_any: false,
    };
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
    /// When bytes last went to the client, and the timer that sends a keep-alive after
    /// [`KEEP_ALIVE`] of quiet (moved on when it fires, not with every event).
    last_sent: Instant,
    keep_alive: Pin<Box<Sleep>>,
    sent_any: bool,
    /// Ready when the shutdown's grace period is over: the stream ends with an error event.
    /// Made once the shutdown began (until then a stream costs nothing for it); a stream polled
    /// in the grace period (its chunks, or a keep-alive every 15 s) waits on it from then.
    cut: Option<Pin<Box<dyn std::future::Future<Output = ()> + Send>>>,
}

impl<E> SseBody<E> {
    fn finish(&mut self, status: u16) {
        if let Some(exchange) = self.exchange.take() {
            let served_by = self.stream.served_by().clone();
            // A stream whose usage did not come (its client left first, or the provider never
            // says it) is charged what it delivered, estimated: else leaving each stream before
            // its last chunk would spend no budget.
            let (mut used, mut cost) = (self.stream.usage_so_far(), self.stream.cost_so_far());
            usage(&self.state, &exchange.live, (&served_by, self.stream.route()), used, cost);
            // Another target continued a broken answer: what the broken call delivered is the
            // client's answer too, and its provider billed it.
            if let Some(broken) = self.stream.broken_call() {
                let via = Via::Target(broken.target.clone());
                usage(
                    &self.state,
                    &exchange.live,
                    (&via, self.stream.route()),
                    Some(broken.usage),
                    broken.cost,
                );
                used = Some(used.map_or(broken.usage, |used| used.plus(&broken.usage)));
                cost = match (cost, broken.cost) {
                    (Some(a), Some(b)) => Some(a + b),
                    (a, b) => a.or(b),
                };
            }
            let trail = self.stream.trail().clone();
            let timing = *self.stream.timing();
            let attempts = trail.len();
            let settled = Some(Settled { trail, timing, usage: used, cost });
            let route = self.route.clone();
            exchange.finish(
                &self.state,
                Ending { route, served_by: Some(&served_by), status, attempts, settled },
            );
        }
    }
}

impl<E: Encoder> Stream for SseBody<E> {
    type Item = Result<Bytes, std::convert::Infallible>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = &mut *self;
        match this.poll_events(cx) {
            // Only after the stream's first events: an Anthropic client reads `message_start`
            // before anything else.
            // Not while events wait to go (the Responses API's completion, held for Redis): a
            // keep-alive would take a place after them in the stream's sequence but arrive first.
            Poll::Pending if !this.done && this.sent_any && this.held.is_none() => {
                match this.keep_alive(cx) {
                    Some(bytes) => Poll::Ready(Some(Ok(bytes))),
                    None => Poll::Pending,
                }
            }
            ready @ Poll::Ready(Some(_)) => {
                this.last_sent = Instant::now();
                this.sent_any = true;
                ready
            }
            other => other,
        }
    }
}

impl<E: Encoder> SseBody<E> {
    /// A keep-alive, when the stream has been quiet for [`KEEP_ALIVE`]; else `None`, with the
    /// timer set for when it will have been.
    fn keep_alive(&mut self, cx: &mut Context<'_>) -> Option<Bytes> {
        while self.keep_alive.as_mut().poll(cx).is_ready() {
            let due = self.last_sent + KEEP_ALIVE;
            let now = Instant::now();
            if now < due {
                self.keep_alive.as_mut().reset(due);
                continue;
            }
            self.last_sent = now;
            self.keep_alive.as_mut().reset(now + KEEP_ALIVE);
            let mut out = Vec::new();
            self.encoder.keep_alive(&mut out);
            return Some(Bytes::from(out));
        }
        None
    }

    /// The next events of the routed stream.
    fn poll_events(&mut self, cx: &mut Context<'_>) -> Poll<Option<Result<Bytes, std::convert::Infallible>>> {
        let this = self;
        if let Some((wait, _)) = this.held.as_mut()
            && wait.as_mut().poll(cx).is_pending()
        {
            return Poll::Pending;
        }
        if let Some((_, events)) = this.held.take() {
            return Poll::Ready(Some(Ok(events)));
        }
        let mut out = Vec::new();
        if !this.done && this.state.is_stopping() && this.cut_due(cx) {
            let detail = "the gateway shut down: the answer was cut at the end of its grace period";
            let error = switchyard::ProviderError::new(switchyard::ErrorKind::Unavailable, detail)
                .with_code("gateway_shutdown");
            let trail = this.stream.trail().clone();
            return this.failed(&error, &trail);
        }
        while !this.done {
            match Pin::new(&mut this.stream).poll_next(cx) {
                Poll::Ready(Some(Ok(chunk))) => {
                    // `out` is empty here: a chunk that writes events returns them at once.
                    if let Some(frame) = this.encoder.frame(&chunk) {
                        return this.emit(frame, cx);
                    }
                    this.encoder.chunk(chunk, &mut out);
                    if !out.is_empty() {
                        return this.emit(Bytes::from(out), cx);
                    }
                }
                Poll::Ready(Some(Err(failure))) => return this.failed(&failure.error, &failure.trail),
                Poll::Ready(None) => {
                    this.done = true;
                    this.encoder.end(&mut out);
                    this.finish(200);
                    return this.emit(Bytes::from(out), cx);
                }
                Poll::Pending => return Poll::Pending,
            }
        }
        Poll::Ready(None)
    }
}

impl<E: Encoder> SseBody<E> {
    /// Whether the shutdown's grace period is over (the stream then waits on it, once asked).
    fn cut_due(&mut self, cx: &mut Context<'_>) -> bool {
        let state = &self.state;
        let cut = self.cut.get_or_insert_with(|| Box::pin(state.cut_signal()));
        cut.as_mut().poll(cx).is_ready()
    }

    /// Ends the stream with `error` (its trail `trail`): the dialect's error event (or the
    /// encoder's own ending of a failed stream), and the request's record.
    fn failed(
        &mut self,
        error: &switchyard::ProviderError,
        trail: &switchyard::trail::Trail,
    ) -> Poll<Option<Result<Bytes, std::convert::Infallible>>> {
        self.done = true;
        let mut out = Vec::new();
        if let Some(exchange) = self.exchange.as_mut() {
            exchange.late_error = Some(error.kind().as_str());
        }
        if !self.encoder.fail(error, &mut out) {
            let id = self.exchange.as_ref().map(|e| e.id.clone()).unwrap_or_default();
            let dialect = self.exchange.as_ref().map_or(Dialect::OpenAi, |e| e.dialect);
            let attempts = serde_json::to_value(trail).unwrap_or_default();
            let event = stream_error_event(dialect, error, &id, attempts);
            match dialect {
                Dialect::Anthropic => write_event(&mut out, "error", &event),
                Dialect::OpenAi | Dialect::Responses | Dialect::Gemini => write_data(&mut out, &event),
            }
        }
        self.finish(200);
        Poll::Ready(Some(Ok(Bytes::from(out))))
    }

    /// Events to send: at once, or once the encoder's wait is over.
    fn emit(
        &mut self,
        events: Bytes,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Bytes, std::convert::Infallible>>> {
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
        // The client went away before the end: 499, as nginx logs it; but a client that leaves
        // once the answer is whole (a Responses client at `response.completed`, before the
        // provider's connection closes) was answered.
        let status = if self.stream.is_whole() { 200 } else { 499 };
        self.finish(status);
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::time::Instant;

    use super::KEEP_ALIVE;
    use crate::config::{self, ConnectionLimits};

    /// What a client of `path` reads, with when it read it, until the stream's end: a stream
    /// from a model whose content chunks come `gap` apart, in paused time.
    async fn quiet_stream(path: &str, body: &str, chunks: usize, gap: &str) -> Vec<(Duration, String)> {
        let yaml = format!(
            "providers:\n  sim: {{ kind: simulated, stream: {{ chunks: {chunks}, gap: {gap} }} }}\nroutes:\n  default: {{ targets: [sim:m], timeouts: {{ idle: 60s }} }}\n"
        );
        let yaml = yaml.as_str();
        let file = config::parse(yaml, false, "sse.yaml").unwrap();
        let loaded = config::build(file, config::Source::File("sse.yaml".into()), &|_: &str| None).unwrap();
        let app = super::super::app(super::super::AppState::new(loaded.router, loaded.gateway));
        let (mut client, server) = tokio::io::duplex(64 * 1024);
        let (_stop, stopped) = tokio::sync::watch::channel(false);
        let limits = ConnectionLimits {
            header_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(600),
            max_connections: 1,
            ..ConnectionLimits::defaults()
        };
        tokio::spawn(crate::connection::serve(server, app, limits, stopped));
        let request = format!(
            "POST {path} HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\nanthropic-version: 2023-06-01\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
            body.len()
        );
        client.write_all(request.as_bytes()).await.unwrap();
        let started = Instant::now();
        let mut read = Vec::new();
        let mut buf = [0u8; 8192];
        loop {
            let n = client.read(&mut buf).await.unwrap();
            if n == 0 {
                return read;
            }
            read.push((started.elapsed(), String::from_utf8_lossy(&buf[..n]).into_owned()));
        }
    }

    fn when(read: &[(Duration, String)], text: &str) -> Vec<Duration> {
        read.iter().filter(|(_, piece)| piece.contains(text)).map(|(at, _)| *at).collect()
    }

    #[tokio::test(start_paused = true)]
    async fn a_quiet_stream_is_kept_alive_in_each_dialect_and_a_busy_one_is_not() {
        let chat = r#"{"model":"default","stream":true,"messages":[{"role":"user","content":"hi"}]}"#;
        let read = quiet_stream("/v1/chat/completions", chat, 2, "40s").await;
        // 40 s of quiet between the chunks: a comment at 15 s and at 30 s, none after the
        // second chunk (the stream then ends at once).
        assert_eq!(when(&read, ": keep-alive"), [KEEP_ALIVE, KEEP_ALIVE * 2], "{read:?}");
        assert!(when(&read, "[DONE]").iter().all(|at| *at >= Duration::from_secs(40)), "{read:?}");

        let messages = r#"{"model":"default","max_tokens":16,"stream":true,"messages":[{"role":"user","content":"hi"}]}"#;
        let read = quiet_stream("/v1/messages", messages, 2, "40s").await;
        let pings = when(&read, "event: ping");
        assert_eq!(pings, [KEEP_ALIVE, KEEP_ALIVE * 2], "Anthropic's own ping event: {read:?}");
        let started = when(&read, "message_start");
        assert!(started.first().is_some_and(|at| *at < KEEP_ALIVE), "message_start comes first: {read:?}");

        // A Responses client's own reader (Codex's) skips comments without counting them as
        // life: it is sent OpenAI's `keepalive` event, numbered in the stream's sequence.
        let responses = r#"{"model":"default","stream":true,"store":false,"input":"hi"}"#;
        let read = quiet_stream("/v1/responses", responses, 2, "40s").await;
        assert_eq!(when(&read, "event: keepalive"), [KEEP_ALIVE, KEEP_ALIVE * 2], "{read:?}");
        let text: String = read.iter().map(|(_, piece)| piece.as_str()).collect();
        let sequence: Vec<u64> = text
            .lines()
            .filter_map(|line| line.strip_prefix("data: "))
            .filter_map(|data| serde_json::from_str::<serde_json::Value>(data).ok())
            .filter_map(|event| event["sequence_number"].as_u64())
            .collect();
        assert!(sequence.len() > 4, "{text}");
        assert_eq!(sequence, (0..sequence.len() as u64).collect::<Vec<_>>(), "{text}");
        assert!(!text.contains(": keep-alive"), "{text}");

        // Chunks 10 s apart: never quiet for long enough.
        let read = quiet_stream("/v1/chat/completions", chat, 5, "10s").await;
        assert!(when(&read, ": keep-alive").is_empty(), "{read:?}");
        assert_eq!(when(&read, "[DONE]"), [Duration::from_secs(20)], "{read:?}");
    }
}
