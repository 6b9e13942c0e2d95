//! What the adapter tests share: one fake upstream on 127.0.0.1 that keeps every request it
//! receives and answers each from a closure, the replies it answers with, and the caller's side
//! (the `Call` the router would make, readers of chunk streams, a rate-limit recorder).

// Every integration test file is a crate of its own and uses only part of this module: what one
// of them leaves unused is used by another.
#![allow(dead_code)]
// The fake and its helpers are test code too; `allow-unwrap-in-tests` only covers `#[test]` fns.
#![allow(clippy::unwrap_used)]

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};

use axum::Router;
use axum::body::Body;
use axum::extract::Request;
use axum::http::{HeaderMap, Method, Version};
use axum::response::Response;
use axum::serve::ListenerExt;
use futures_util::{StreamExt, stream};
use serde_json::Value;
use switchyard::ProviderError;
use switchyard::chat::{ChatChunk, ChatRequest, ChatResponse, FinishReason, Message, Role, ToolCall};
use switchyard::credential::{Credential, Secret};
use switchyard::provider::{Call, ChunkStream, Provider, RateLimitSink};
use switchyard::ratelimit::RateLimits;
use switchyard::route::Timeouts;
use switchyard::trace::TraceContext;
use tokio::sync::Notify;

// ---------------------------------------------------------------------------------------------
// The fake upstream
// ---------------------------------------------------------------------------------------------

/// One request the fake received.
#[derive(Debug, Clone)]
pub struct Seen {
    pub method: Method,
    /// Path and query.
    pub uri: String,
    pub headers: HeaderMap,
    /// The JSON body; `Null` when there was none, a string when it was not JSON.
    pub body: Value,
    pub version: Version,
}

impl Seen {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|value| value.to_str().ok())
    }

    /// The path, without the query.
    pub fn path(&self) -> &str {
        self.uri.split('?').next().unwrap_or_default()
    }
}

/// An HTTP/1.1 and HTTP/2 server on 127.0.0.1 that records every request and answers each with
/// `reply(&request)`. Like a real API it takes JSON bodies only (a body of another type, or one
/// that does not parse, is refused with 415 or 400 before `reply` sees it), and like a real
/// server it writes without Nagle's delay.
pub struct Fake {
    addr: SocketAddr,
    seen: Arc<Mutex<Vec<Seen>>>,
    connections: Arc<AtomicUsize>,
}

impl Fake {
    pub async fn start(reply: impl Fn(&Seen) -> Response + Send + Sync + 'static) -> Fake {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let reply = Arc::new(reply);
        let record = seen.clone();
        let app = Router::new().fallback(move |request: Request| {
            let (record, reply) = (record.clone(), reply.clone());
            async move {
                let (parts, body) = request.into_parts();
                let bytes = axum::body::to_bytes(body, usize::MAX).await.unwrap();
                let refused = refusal(&parts.headers, &bytes);
                let body = serde_json::from_slice(&bytes).unwrap_or_else(|_| {
                    let text = String::from_utf8_lossy(&bytes);
                    if text.is_empty() { Value::Null } else { Value::String(text.into_owned()) }
                });
                let seen = Seen {
                    method: parts.method,
                    uri: parts.uri.to_string(),
                    headers: parts.headers,
                    body,
                    version: parts.version,
                };
                record.lock().unwrap().push(seen.clone());
                match refused {
                    Some((status, why)) => respond(status, &[], "text/plain", Body::from(why)),
                    None => reply(&seen),
                }
            }
        });
        let connections = Arc::new(AtomicUsize::new(0));
        let count = connections.clone();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let listener = listener.tap_io(move |tcp| {
            count.fetch_add(1, Ordering::SeqCst);
            tcp.set_nodelay(true).unwrap();
        });
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        Fake { addr, seen, connections }
    }

    /// A fake answering every request with `status` and the JSON `body`.
    pub async fn json(status: u16, body: Value) -> Fake {
        Fake::start(move |_| json_reply(status, &[], &body)).await
    }

    /// `http://127.0.0.1:port`.
    pub fn origin(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The origin followed by `path` (`/v1`, `/v1beta`, ...): a base URL.
    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    pub fn requests(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }

    pub fn only_request(&self) -> Seen {
        let requests = self.requests();
        assert_eq!(requests.len(), 1, "expected exactly one request, got {requests:#?}");
        requests.into_iter().next().unwrap()
    }

    pub fn last_request(&self) -> Seen {
        self.requests().pop().expect("the fake received no request")
    }

    /// How many connections the fake accepted.
    pub fn connections(&self) -> usize {
        self.connections.load(Ordering::SeqCst)
    }
}

/// What a JSON API answers a request whose body it cannot take, if anything: 415 to a body of
/// another type, 400 to one that does not parse.
fn refusal(headers: &HeaderMap, bytes: &[u8]) -> Option<(u16, &'static str)> {
    if bytes.is_empty() {
        return None;
    }
    let content_type = headers.get("content-type").and_then(|v| v.to_str().ok()).unwrap_or_default();
    let essence = content_type.split(';').next().unwrap_or_default().trim();
    if essence != "application/json" && !essence.ends_with("+json") {
        return Some((415, "expected a request with content-type: application/json"));
    }
    serde_json::from_slice::<Value>(bytes).is_err().then_some((400, "the request body is not JSON"))
}

/// `reply` to a POST to one of `paths`, 404 to any other request (as a real API answers a URL
/// it does not serve).
pub fn only_posts_to(
    paths: &'static [&'static str],
    reply: impl Fn(&Seen) -> Response + Send + Sync + 'static,
) -> impl Fn(&Seen) -> Response + Send + Sync + 'static {
    move |seen: &Seen| {
        if seen.method == Method::POST && paths.contains(&seen.uri.as_str()) {
            reply(seen)
        } else {
            respond(404, &[], "text/plain", Body::from(format!("no route for {} {}", seen.method, seen.uri)))
        }
    }
}

/// An address nothing listens on: connecting to it is refused.
pub async fn refused_origin() -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    drop(listener);
    format!("http://{addr}")
}

// ---------------------------------------------------------------------------------------------
// Replies
// ---------------------------------------------------------------------------------------------

pub fn respond(status: u16, headers: &[(&str, &str)], content_type: &str, body: Body) -> Response {
    let mut builder = Response::builder().status(status).header("content-type", content_type);
    for (name, value) in headers {
        builder = builder.header(*name, *value);
    }
    builder.body(body).unwrap()
}

pub fn json_reply(status: u16, headers: &[(&str, &str)], body: &Value) -> Response {
    respond(status, headers, "application/json", Body::from(body.to_string()))
}

/// A 200 event stream with all of `text` in one body.
pub fn sse_reply(headers: &[(&str, &str)], text: &str) -> Response {
    respond(200, headers, "text/event-stream; charset=utf-8", Body::from(text.to_owned()))
}

/// A 200 event stream delivered in the given pieces, each its own write.
pub fn pieces_reply(pieces: Vec<Vec<u8>>) -> Response {
    respond(200, &[], "text/event-stream", piecewise(pieces, None))
}

/// A 200 event stream delivered in the given pieces, after which the connection breaks: at
/// once, or when given `cut`, once `cut` is notified.
pub fn broken_reply(pieces: Vec<Vec<u8>>, cut: Option<Arc<Notify>>) -> Response {
    respond(200, &[], "text/event-stream", piecewise(pieces, Some(cut)))
}

/// The pieces as a body; the server yields before each, so that each is flushed as its own
/// write. With `broken`, an error follows them (once notified), which breaks the connection.
fn piecewise(pieces: Vec<Vec<u8>>, broken: Option<Option<Arc<Notify>>>) -> Body {
    let pieces = stream::iter(pieces).then(|piece| async move {
        tokio::task::yield_now().await;
        Ok::<_, std::io::Error>(piece)
    });
    let end = stream::iter(broken).then(|cut| async move {
        if let Some(cut) = cut {
            cut.notified().await;
        }
        tokio::task::yield_now().await;
        Err(std::io::Error::other("connection cut by the fake"))
    });
    Body::from_stream(pieces.chain(end))
}

/// `text` cut after every `\r` (so a `\r\n` is split in two), inside every multi-byte UTF-8
/// character, and every `every` bytes besides.
pub fn awkward_pieces(text: &str, every: usize) -> Vec<Vec<u8>> {
    let bytes = text.as_bytes();
    let mut cuts: Vec<usize> = (every..bytes.len()).step_by(every).collect();
    cuts.extend(bytes.iter().enumerate().filter(|(_, b)| **b == b'\r').map(|(i, _)| i + 1));
    cuts.extend(text.char_indices().filter(|(_, c)| c.len_utf8() > 1).map(|(i, _)| i + 1));
    cuts.sort_unstable();
    cuts.dedup();
    let mut pieces = Vec::new();
    let mut start = 0;
    for cut in cuts.into_iter().chain([bytes.len()]) {
        if cut > start {
            pieces.push(bytes[start..cut].to_vec());
            start = cut;
        }
    }
    pieces
}

// ---------------------------------------------------------------------------------------------
// Calling an adapter
// ---------------------------------------------------------------------------------------------

/// What the router hands an adapter with each call: the key's credential, the route's timeouts,
/// the client's headers to pass on and the attempt's span. The one place a `Call` is made.
pub struct Caller {
    credential: Credential,
    timeouts: Timeouts,
    forward: Vec<(String, String)>,
    trace: Option<TraceContext>,
}

impl Caller {
    /// For `provider`, with `key` (none for a keyless server); default timeouts, no headers to
    /// pass on, untraced.
    pub fn new<P: Provider + ?Sized>(provider: &P, key: Option<&str>) -> Caller {
        let credential = Credential::new(provider.kind(), provider.base_url(), key.map(Secret::new));
        Caller { credential, timeouts: Timeouts::default(), forward: Vec::new(), trace: None }
    }

    /// Passes the client's `headers` on.
    pub fn forward(mut self, headers: &[(String, String)]) -> Caller {
        self.forward = headers.to_vec();
        self
    }

    /// Traces the calls with `trace` as the attempt's span.
    pub fn trace(mut self, trace: Option<TraceContext>) -> Caller {
        self.trace = trace;
        self
    }

    /// A call to the upstream `model`, reporting rate limits to `sink`.
    pub fn call<'a>(&'a self, model: &'a str, sink: Option<&'a dyn RateLimitSink>) -> Call<'a> {
        Call {
            model,
            credential: &self.credential,
            timeouts: &self.timeouts,
            rate_limits: sink,
            forward: &self.forward,
            trace: self.trace,
            ends: None,
        }
    }
}

/// An adapter and its caller, with the upstream model plain calls use.
pub struct Harness<P> {
    pub provider: P,
    pub caller: Caller,
    pub model: &'static str,
}

impl<P: Provider> Harness<P> {
    pub fn new(provider: P, key: Option<&str>, model: &'static str) -> Harness<P> {
        let caller = Caller::new(&provider, key);
        Harness { provider, caller, model }
    }

    pub fn call<'a>(&'a self, model: &'a str, sink: Option<&'a dyn RateLimitSink>) -> Call<'a> {
        self.caller.call(model, sink)
    }

    pub async fn chat(&self, request: &ChatRequest) -> Result<ChatResponse, ProviderError> {
        self.provider.chat(self.call(self.model, None), request).await
    }

    pub async fn stream(&self, request: &ChatRequest) -> Result<ChunkStream, ProviderError> {
        self.provider.chat_stream(self.call(self.model, None), request).await
    }
}

/// Keeps every report of rate-limit headers.
#[derive(Default)]
pub struct Recorder(pub Mutex<Vec<RateLimits>>);

impl RateLimitSink for Recorder {
    fn observe(&self, limits: &RateLimits) {
        self.0.lock().unwrap().push(*limits);
    }
}

// ---------------------------------------------------------------------------------------------
// Reading streams
// ---------------------------------------------------------------------------------------------

/// Reads a stream to its end: the chunks, and the error that ended it (if any). Asserts that
/// nothing follows an error.
pub async fn drain(mut stream: ChunkStream) -> (Vec<ChatChunk>, Option<ProviderError>) {
    let mut chunks = Vec::new();
    while let Some(item) = stream.next().await {
        match item {
            Ok(chunk) => chunks.push(chunk),
            Err(error) => {
                assert!(stream.next().await.is_none(), "the stream went on after an error");
                return (chunks, Some(error));
            }
        }
    }
    (chunks, None)
}

/// Every item of a stream, errors included.
pub async fn items(stream: ChunkStream) -> Vec<Result<ChatChunk, ProviderError>> {
    stream.collect().await
}

/// The chunks of a stream that must not have failed.
pub fn ok_chunks(items: Vec<Result<ChatChunk, ProviderError>>) -> Vec<ChatChunk> {
    items.into_iter().map(|item| item.expect("no error in this stream")).collect()
}

/// The text of all chunks, joined.
pub fn text_of(chunks: &[ChatChunk]) -> String {
    chunks.iter().flat_map(|c| &c.choices).filter_map(|c| c.delta.content.as_deref()).collect()
}

pub fn finish_of(chunks: &[ChatChunk]) -> Vec<FinishReason> {
    chunks.iter().flat_map(|c| &c.choices).filter_map(|c| c.finish_reason.clone()).collect()
}

/// Tool calls reassembled from deltas: (id, name, arguments) by index.
pub fn tool_calls_of(chunks: &[ChatChunk]) -> Vec<(String, String, String)> {
    let mut calls: Vec<(String, String, String)> = Vec::new();
    for delta in chunks.iter().flat_map(|c| &c.choices).flat_map(|c| &c.delta.tool_calls) {
        let index = delta.index as usize;
        if calls.len() <= index {
            calls.resize(index + 1, Default::default());
        }
        let call = &mut calls[index];
        if let Some(id) = &delta.id {
            call.0.push_str(id);
        }
        if let Some(function) = &delta.function {
            call.1.push_str(function.name.as_deref().unwrap_or(""));
            call.2.push_str(function.arguments.as_deref().unwrap_or(""));
        }
    }
    calls
}

// ---------------------------------------------------------------------------------------------
// Canonical messages
// ---------------------------------------------------------------------------------------------

pub fn tool_call(id: &str, name: &str, arguments: &str) -> ToolCall {
    ToolCall::function(id, name, arguments)
}

pub fn tool_result(id: &str, text: &str) -> Message {
    Message { tool_call_id: Some(id.into()), ..Message::text(Role::Tool, text) }
}

// ---------------------------------------------------------------------------------------------
// Dates for headers
// ---------------------------------------------------------------------------------------------

/// (days since 1970-01-01, year, month, day, hour, minute, second) of `at`.
fn split_time(at: SystemTime) -> (i64, i64, u32, u32, u64, u64, u64) {
    let secs = at.duration_since(UNIX_EPOCH).unwrap().as_secs();
    let days = (secs / 86_400) as i64;
    let (year, month, day) = switchyard::time::civil_from_days(days);
    let rest = secs % 86_400;
    (days, year, month, day, rest / 3600, rest % 3600 / 60, rest % 60)
}

/// `at` as an RFC 3339 UTC timestamp, as Anthropic writes its resets.
pub fn rfc3339(at: SystemTime) -> String {
    let (_, year, month, day, hour, minute, second) = split_time(at);
    format!("{year:04}-{month:02}-{day:02}T{hour:02}:{minute:02}:{second:02}Z")
}

/// IMF-fixdate of `at`, as servers write HTTP dates.
pub fn http_date(at: SystemTime) -> String {
    const WEEKDAYS: [&str; 7] = ["Thu", "Fri", "Sat", "Sun", "Mon", "Tue", "Wed"]; // 1970-01-01 was a Thursday
    const MONTHS: [&str; 12] =
        ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"];
    let (days, year, month, day, hour, minute, second) = split_time(at);
    format!(
        "{}, {day:02} {} {year} {hour:02}:{minute:02}:{second:02} GMT",
        WEEKDAYS[days.rem_euclid(7) as usize],
        MONTHS[month as usize - 1]
    )
}
