//! The HTTP side: accepting connections, routing by path, and turning a scenario's action into a
//! response in the request's dialect.

use std::borrow::Cow;
use std::io;
use std::sync::Arc;
use std::time::Duration;

use http_body_util::{BodyExt, Limited};
use hyper::body::Incoming;
use hyper::header::{AUTHORIZATION, HeaderValue};
use hyper::service::service_fn;
use hyper::{HeaderMap, Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;

use crate::body::MockBody;
use crate::probe::Probe;
use crate::registry::{Endpoint, Registry};
use crate::reply::{self, Answer, Content, Ending, Fault, Shape, StreamFault};
use crate::scenario::Step;
use crate::text::Said;
use crate::{anthropic, embeddings, openai, responses};

/// Largest request body read; larger ones get 413. Generous, since benchmarks send 1 MB bodies.
const MAX_BODY: usize = 64 * 1024 * 1024;

/// Accepts connections forever, each served on its own task; behind TLS when `tls` is given.
pub(crate) async fn serve(listener: TcpListener, tls: Option<TlsAcceptor>) -> io::Result<()> {
    let registry = Arc::new(Registry::default());
    let mut http = hyper::server::conn::http1::Builder::new();
    // No timer is configured, so hyper applies no header-read timeout: an idle keep-alive
    // connection stays open for as long as the client's pool wants it. Closing it from this side
    // would race with the client's next request and show up as spurious gateway errors.
    http.keep_alive(true);
    loop {
        let stream = match listener.accept().await {
            Ok((stream, _)) => stream,
            Err(error) => {
                // Almost always transient (file descriptors exhausted under load, or a peer that
                // gave up during the handshake): back off briefly instead of ending the server.
                eprintln!("switchyard-mock: accept failed: {error}");
                tokio::time::sleep(Duration::from_millis(10)).await;
                continue;
            }
        };
        // Streams must reach the client chunk by chunk; Nagle would merge them.
        let _ = stream.set_nodelay(true);
        let registry = Arc::clone(&registry);
        let http = http.clone();
        let tls = tls.clone();
        tokio::spawn(async move {
            let service = {
                let registry = Arc::clone(&registry);
                service_fn(move |request| {
                    let registry = Arc::clone(&registry);
                    async move { handle(request, &registry).await }
                })
            };
            // Errors here are the client going away (a failed handshake among them), or
            // `reset`/`cut` doing their job.
            match tls {
                None => {
                    registry.connected();
                    let _ = http.serve_connection(TokioIo::new(stream), service).await;
                }
                Some(tls) => {
                    let Ok(stream) = tls.accept(stream).await else { return };
                    registry.connected();
                    let _ = http.serve_connection(TokioIo::new(stream), service).await;
                }
            }
        });
    }
}

/// Where a path leads.
enum Route<'a> {
    Api {
        scenario: &'a str,
        endpoint: Endpoint,
    },
    Reset,
    Stats,
    Health,
    /// `POST /_otlp/v1/traces`: an OTLP/HTTP collector that reads each export and keeps
    /// nothing, so that a benchmark of trace export has a receiver that costs next to nothing.
    Traces,
    NotFound,
}

/// `/{scenario}/v1/{endpoint}` or `/v1/{endpoint}` (scenario `ok`); empty segments are ignored
/// so a base URL with a trailing slash still works.
fn route(path: &str) -> Route<'_> {
    let mut segments = path.split('/').filter(|s| !s.is_empty());
    let first = segments.next();
    let (scenario, v1) = match first {
        Some("_reset") => return if segments.next().is_none() { Route::Reset } else { Route::NotFound },
        Some("_stats") => return if segments.next().is_none() { Route::Stats } else { Route::NotFound },
        Some("_health") => return if segments.next().is_none() { Route::Health } else { Route::NotFound },
        Some("_otlp") => {
            let rest = (segments.next(), segments.next(), segments.next());
            return if rest == (Some("v1"), Some("traces"), None) { Route::Traces } else { Route::NotFound };
        }
        Some("v1") => ("ok", first),
        Some(scenario) => (scenario, segments.next()),
        None => return Route::NotFound,
    };
    if v1 != Some("v1") {
        return Route::NotFound;
    }
    let endpoint = match (segments.next(), segments.next(), segments.next()) {
        (Some("chat"), Some("completions"), None) => Endpoint::ChatCompletions,
        (Some("messages"), None, None) => Endpoint::Messages,
        (Some("messages"), Some("count_tokens"), None) => Endpoint::CountTokens,
        (Some("responses"), None, None) => Endpoint::Responses,
        (Some("embeddings"), None, None) => Endpoint::Embeddings,
        _ => return Route::NotFound,
    };
    Route::Api { scenario, endpoint }
}

async fn handle(request: Request<Incoming>, registry: &Registry) -> Result<Response<MockBody>, io::Error> {
    let (parts, body) = request.into_parts();
    match route(parts.uri.path()) {
        Route::Api { scenario, endpoint } => {
            api(scenario, endpoint, parts.method, parts.headers, body, registry).await
        }
        Route::Reset if parts.method == hyper::Method::POST => {
            registry.reset();
            Ok(reply::json(StatusCode::OK, r#"{"reset":true}"#.to_owned()))
        }
        Route::Stats => Ok(reply::json(StatusCode::OK, registry.stats().to_string())),
        Route::Health => Ok(reply::json(StatusCode::OK, r#"{"ok":true}"#.to_owned())),
        Route::Traces if parts.method == hyper::Method::POST => {
            // Read to the end (a collector does), then the empty ExportTraceServiceResponse.
            let _ = Limited::new(body, 64 << 20).collect().await.map_err(io::Error::other)?;
            let mut response = reply::json(StatusCode::OK, String::new());
            response.headers_mut().insert(
                hyper::header::CONTENT_TYPE,
                hyper::header::HeaderValue::from_static("application/x-protobuf"),
            );
            Ok(response)
        }
        Route::Reset | Route::Traces | Route::NotFound => {
            let message = format!(
                "switchyard-mock: no route for {} {}; use POST /{{scenario}}/v1/chat/completions, \
                 /{{scenario}}/v1/messages(/count_tokens), /{{scenario}}/v1/responses or /{{scenario}}/v1/embeddings, POST /_reset or GET /_stats",
                parts.method,
                parts.uri.path()
            );
            Ok(openai::fault(&Fault::Invalid { status: 404, message }))
        }
    }
}

/// Serves one API request: read the body, take the scenario's next step, play it.
async fn api(
    scenario: &str,
    endpoint: Endpoint,
    method: Method,
    headers: HeaderMap,
    body: Incoming,
    registry: &Registry,
) -> Result<Response<MockBody>, io::Error> {
    let dialect = Dialect::of(endpoint);
    let body = match Limited::new(body, MAX_BODY).collect().await {
        Ok(collected) => collected.to_bytes(),
        Err(error) => {
            if error.downcast_ref::<http_body_util::LengthLimitError>().is_some() {
                let message = format!("switchyard-mock: request body larger than {MAX_BODY} bytes");
                return Ok(dialect.fault(&Fault::Invalid { status: 413, message }));
            }
            // The client went away mid-body; nobody is left to answer.
            return Err(io::Error::other(error));
        }
    };

    let scenario = percent_decode(scenario);
    let presented = presented_key(&headers);
    let (action, since_first) = match registry.record(&scenario, endpoint, method, headers, body.clone()) {
        Ok(taken) => taken,
        Err(error) => {
            let message = format!("switchyard-mock: {error}");
            return Ok(dialect.fault(&Fault::Invalid { status: 400, message }));
        }
    };

    let wait = action.latency + jitter(action.jitter);
    if !wait.is_zero() {
        tokio::time::sleep(wait).await;
    }

    let (content, fault) = match play(&action.step, presented.as_ref(), since_first) {
        // `cut=2~tools`: the fault over a tool call's arguments.
        Play::Answer(Content::Text, Some(fault)) if action.tools => (Content::Tools, Some(fault)),
        Play::Answer(content, fault) => (content, fault),
        Play::Fault(fault) => return Ok(dialect.fault(&fault)),
        Play::Hang => {
            let _guard = registry.hang();
            // hyper notices the client closing the connection and drops this future then.
            return std::future::pending().await;
        }
        Play::Reset => {
            // A service error makes hyper close the connection without writing a response.
            return Err(io::Error::new(io::ErrorKind::ConnectionReset, "switchyard-mock: reset"));
        }
    };

    if endpoint == Endpoint::CountTokens {
        return Ok(count_tokens(&body));
    }
    let parsed = if endpoint == Endpoint::Responses { Probe::parse_head(&body) } else { Probe::parse(&body) };
    let probe = match parsed {
        Ok(probe) => probe,
        Err(error) => {
            let message = format!("switchyard-mock: request body is not the JSON expected: {error}");
            return Ok(dialect.fault(&Fault::Invalid { status: 400, message }));
        }
    };
    let prefill = probe.prefill();
    match &action.step {
        Step::Model429(model) if **model == *probe.model => {
            return Ok(dialect.fault(&Fault::ModelRateLimit(model)));
        }
        Step::NoPrefill if prefill.is_some() => return Ok(dialect.fault(&Fault::NoPrefill)),
        _ => {}
    }
    let said = Said::new(&probe.model, action.words, action.pieces(), prefill.as_deref());
    let shape = Shape { pieces: action.pieces(), gap: action.gap, fault };
    let answer = Answer { content, model: &probe.model, said, shape };
    let mut response = respond(dialect, &answer, &probe);
    if holds_open(fault, probe.streaming()) {
        response.body_mut().hold(registry.hang());
    }
    Ok(response)
}

/// Whether the answer's body is held open, which counts as a hanging request: a stall's
/// (streamed or not), and a `noend` stream's.
fn holds_open(fault: Option<StreamFault>, streaming: bool) -> bool {
    match fault {
        Some(StreamFault::Stall(_) | StreamFault::KeepAlive(_)) => true,
        Some(StreamFault::Held) => streaming,
        _ => false,
    }
}

/// What a step comes to before the request is read: an answer (perhaps a faulty stream), a
/// failure, or no answer at all.
enum Play<'a> {
    Answer(Content, Option<StreamFault>),
    Fault(Fault<'a>),
    Hang,
    Reset,
}

/// What `step` plays for a request that presented `presented` as its key, `since_first`
/// after its scenario's first request. Steps that depend on the request's body (`model429`,
/// `noprefill`) answer here, and are checked against it once it is read.
fn play<'a>(step: &'a Step, presented: Option<&HeaderValue>, since_first: Duration) -> Play<'a> {
    let text = |fault| Play::Answer(Content::Text, Some(fault));
    match step {
        Step::Ok | Step::Model429(_) | Step::NoPrefill => Play::Answer(Content::Text, None),
        Step::Tools => Play::Answer(Content::Tools, None),
        Step::Custom => Play::Answer(Content::Custom, None),
        Step::Filter => Play::Answer(Content::Filter, None),
        Step::Refuse => Play::Answer(Content::Refuse, None),
        Step::Think => Play::Answer(Content::Think, None),
        Step::Cut(n) => text(StreamFault::Cut(*n)),
        Step::Stall(n) => text(StreamFault::Stall(*n)),
        Step::KeepAlive(n) => text(StreamFault::KeepAlive(*n)),
        Step::ErrEvent(n) => text(StreamFault::ErrorEvent(*n)),
        Step::NoTerm => text(StreamFault::Unterminated),
        Step::NoEnd => text(StreamFault::Held),
        Step::BadEvent(n) => text(StreamFault::BadEvent(*n)),
        Step::Down(outage) if since_first < *outage => Play::Fault(Fault::Status(503)),
        Step::Down(_) => Play::Answer(Content::Text, None),
        Step::AuthKey(key) if presented.is_some_and(|p| p.as_bytes() == key.as_bytes()) => {
            Play::Fault(Fault::Auth)
        }
        Step::AuthKey(_) => Play::Answer(Content::Text, None),
        Step::Status(code) => Play::Fault(Fault::Status(*code)),
        Step::RateLimit(seconds) => Play::Fault(Fault::RateLimit(seconds)),
        Step::Quota => Play::Fault(Fault::Quota),
        Step::Auth => Play::Fault(Fault::Auth),
        Step::Context => Play::Fault(Fault::Context),
        Step::Hang => Play::Hang,
        Step::Reset => Play::Reset,
    }
}

/// A token count: a quarter of the characters of every string under `system` and
/// `messages`, rounded up, so that a test can say what to expect.
fn count_tokens(body: &[u8]) -> Response<MockBody> {
    fn chars(value: &serde_json::Value) -> usize {
        match value {
            serde_json::Value::String(text) => text.chars().count(),
            serde_json::Value::Array(items) => items.iter().map(chars).sum(),
            serde_json::Value::Object(members) => members.values().map(chars).sum(),
            _ => 0,
        }
    }
    let Ok(value) = serde_json::from_slice::<serde_json::Value>(body) else {
        let message = "switchyard-mock: the count_tokens body is not JSON".to_owned();
        return Dialect::Anthropic.fault(&Fault::Invalid { status: 400, message });
    };
    if value.get("max_tokens").is_some() {
        // As Anthropic does: counting takes no output limit.
        let message = "max_tokens: Extra inputs are not permitted".to_owned();
        return Dialect::Anthropic.fault(&Fault::Invalid { status: 400, message });
    }
    let total = ["system", "messages"].iter().filter_map(|key| value.get(key)).map(chars).sum::<usize>();
    reply::json(StatusCode::OK, format!(r#"{{"input_tokens":{}}}"#, total.div_ceil(4)))
}

/// `answer` in `dialect`, streamed when the request asks. A stream's fault is scripted into
/// it; an answer sent whole stands in for the fault as its non-streamed form: a body cut or
/// stalled halfway, or for an error event the error as the status it would have had.
fn respond(dialect: Dialect, answer: &Answer<'_>, probe: &Probe<'_>) -> Response<MockBody> {
    let stream = probe.streaming() && dialect != Dialect::Embeddings;
    if !stream && let Some(StreamFault::ErrorEvent(_)) = answer.shape.fault {
        let status = if dialect == Dialect::Anthropic { 529 } else { 500 };
        return dialect.fault(&Fault::Status(status));
    }
    let response = match dialect {
        Dialect::OpenAi => openai::answer(answer, stream, probe.include_usage()),
        Dialect::Anthropic => anthropic::answer(answer, stream),
        Dialect::Embeddings => embeddings::answer(probe),
        Dialect::Responses => responses::answer(answer, stream),
    };
    match answer.shape.fault {
        Some(StreamFault::Cut(_)) if !stream => reply::truncate(response, Ending::Cut),
        // A whole answer cannot keep itself alive: it stalls as `stall`'s.
        Some(StreamFault::Stall(_) | StreamFault::KeepAlive(_)) if !stream => {
            reply::truncate(response, Ending::Stall)
        }
        _ => response,
    }
}

/// The wire dialect of an endpoint, which decides the shape of answers and errors.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Dialect {
    OpenAi,
    Anthropic,
    Embeddings,
    Responses,
}

impl Dialect {
    fn of(endpoint: Endpoint) -> Dialect {
        match endpoint {
            Endpoint::ChatCompletions => Dialect::OpenAi,
            Endpoint::Messages | Endpoint::CountTokens => Dialect::Anthropic,
            Endpoint::Embeddings => Dialect::Embeddings,
            Endpoint::Responses => Dialect::Responses,
        }
    }

    fn fault(self, fault: &Fault<'_>) -> Response<MockBody> {
        match self {
            Dialect::OpenAi | Dialect::Embeddings | Dialect::Responses => openai::fault(fault),
            Dialect::Anthropic => anthropic::fault(fault),
        }
    }
}

/// The API key the client presented: `Authorization: Bearer K`, `x-api-key: K` or `api-key: K`.
/// Cloning a `HeaderValue` shares its bytes, so this costs no copy.
fn presented_key(headers: &HeaderMap) -> Option<HeaderValue> {
    if let Some(value) = headers.get(AUTHORIZATION) {
        let bytes = value.as_bytes();
        let key = bytes.strip_prefix(b"Bearer ").unwrap_or(bytes);
        return HeaderValue::from_bytes(key).ok();
    }
    headers.get("x-api-key").or_else(|| headers.get("api-key")).cloned()
}

/// Decodes `%XX` escapes, in case a client escaped the scenario's `=`, `,` or `~`.
fn percent_decode(text: &str) -> Cow<'_, str> {
    if !text.contains('%') {
        return Cow::Borrowed(text);
    }
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |b: u8| (b as char).to_digit(16);
        match (bytes[i], bytes.get(i + 1).copied().and_then(hex), bytes.get(i + 2).copied().and_then(hex)) {
            (b'%', Some(hi), Some(lo)) => {
                out.push((hi * 16 + lo) as u8);
                i += 3;
            }
            (byte, _, _) => {
                out.push(byte);
                i += 1;
            }
        }
    }
    Cow::Owned(String::from_utf8_lossy(&out).into_owned())
}

/// A uniformly random duration in `[0, max)`, from a per-thread xorshift generator: latency
/// jitter needs spread, not cryptographic quality, and must not contend across threads.
fn jitter(max: Duration) -> Duration {
    use std::cell::Cell;
    thread_local! {
        static STATE: Cell<u64> = Cell::new(
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0x9e37_79b9_7f4a_7c15, |d| d.as_nanos() as u64)
                | 1,
        );
    }
    if max.is_zero() {
        return Duration::ZERO;
    }
    let random = STATE.with(|state| {
        let mut x = state.get();
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        state.set(x);
        x
    });
    let nanos = u64::try_from(max.as_nanos()).unwrap_or(u64::MAX);
    Duration::from_nanos(random % nanos)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_route_to_scenarios_and_endpoints() {
        let api = |path| match route(path) {
            Route::Api { scenario, endpoint } => Some((scenario, endpoint)),
            _ => None,
        };
        assert_eq!(api("/v1/chat/completions"), Some(("ok", Endpoint::ChatCompletions)));
        assert_eq!(api("/fail500,ok/v1/chat/completions"), Some(("fail500,ok", Endpoint::ChatCompletions)));
        assert_eq!(api("/ok//v1/messages"), Some(("ok", Endpoint::Messages)));
        assert_eq!(api("/x/v1/embeddings"), Some(("x", Endpoint::Embeddings)));
        assert_eq!(api("/x/v2/messages"), None);
        assert_eq!(api("/x/v1/messages/extra"), None);
        assert!(matches!(route("/_reset"), Route::Reset));
        assert!(matches!(route("/_stats"), Route::Stats));
        assert!(matches!(route("/_otlp/v1/traces"), Route::Traces));
        assert!(matches!(route("/_otlp/v1/logs"), Route::NotFound));
    }

    #[test]
    fn escaped_scenarios_are_decoded() {
        assert_eq!(percent_decode("status%3D500%2Cok"), "status=500,ok");
        assert_eq!(percent_decode("ok"), "ok");
    }
}
