//! The HTTP surface: OpenAI and Anthropic dialects over one router, plus health, metrics and
//! admin endpoints. The gateway knows nothing of retry rules: it translates dialects and renders
//! what the router decided.

mod admin;
mod anthropic;
mod body;
mod errors;
mod events;
mod openai;
mod page;
mod responses;
mod sse;

use std::collections::HashSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use axum::Router as HttpRouter;
use axum::body::{Body, Bytes};
use axum::extract::Request;
use axum::http::{HeaderMap, HeaderName, HeaderValue, StatusCode, header};
use axum::response::Response;
use axum::routing::{get, post};
use serde_json::Value;
use switchyard::credential::Secret;
use switchyard::trace::TraceContext;
use switchyard::trail::{Timing, Trail, Via};
use switchyard::{RequestOptions, Router, Target};

use crate::config::{Exposure, GatewaySettings};
use crate::logging::{AccessEntry, AccessLog};
use crate::metrics::{LabelValue, Metrics, labels};
use crate::recent::{Recent, RequestRecord};
use crate::responses::ResponseStore;
use crate::telemetry::{RequestSpan, Telemetry};
use switchyard_state::responses::{KeptBounds, SharedResponses};

pub use errors::ApiError;

/// The dialect of a client.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dialect {
    OpenAi,
    Anthropic,
}

/// Everything handlers share.
pub struct AppState {
    pub router: Router,
    pub gateway: GatewaySettings,
    pub recent: Recent,
    pub metrics: Metrics,
    /// The Responses API's conversations.
    pub responses: ResponseStore,
    /// Finished requests and the router's recent events, for `/admin/events` subscribers.
    pub feed: events::RequestFeed,
    /// The trace exporter, when traces are exported.
    pub telemetry: Option<Arc<Telemetry>>,
    /// Turns `true` when the gateway begins to shut down: endless streams (`/admin/events`) end.
    stopping: tokio::sync::watch::Sender<bool>,
    access: AccessLog,
    ids: IdSource,
    /// The targets the configuration names; others (named by clients) share one metric label.
    /// Keys from the configuration only (a client's target is looked up, never inserted).
    listed: HashSet<Target, crate::metrics::FxBuild>,
    /// Whether `/metrics` asks for the admin key (beyond loopback, unless `metrics_open`).
    guard_metrics: bool,
}

impl AppState {
    /// The state of a gateway without an access log; see [`AppState::with_access_log`].
    pub fn new(router: Router, gateway: GatewaySettings) -> Arc<Self> {
        Self::with_access_log(router, gateway, AccessLog::off())
    }

    /// The state of a gateway on loopback, logging to `access`.
    pub fn with_access_log(router: Router, gateway: GatewaySettings, access: AccessLog) -> Arc<Self> {
        Self::exposed(router, gateway, access, &Exposure::Loopback)
    }

    /// The state of a gateway reachable as `exposure` says: beyond loopback, `/metrics` asks
    /// for the admin key unless `gateway.metrics_open`.
    pub fn exposed(
        router: Router,
        gateway: GatewaySettings,
        access: AccessLog,
        exposure: &Exposure,
    ) -> Arc<Self> {
        let guard_metrics = exposure.guards_metrics(&gateway);
        let metrics = Metrics::new();
        describe(&metrics);
        let listed = router.routes().flat_map(|route| route.all_targets()).cloned().collect();
        if let Some(store) = &gateway.shared_state {
            share_answers(&router, store);
        }
        let telemetry = gateway.telemetry.as_ref().and_then(|settings| start_telemetry(settings, &router));
        let feed = events::RequestFeed::new(&router);
        Arc::new(Self {
            telemetry,
            recent: Recent::new(gateway.recent_requests),
            responses: match &gateway.shared_state {
                Some(store) => {
                    let kept = |bounds: crate::config::ResponsesBounds| KeptBounds {
                        max_entries: bounds.max_entries,
                        max_age: bounds.max_age,
                        max_bytes: bounds.max_bytes,
                    };
                    let index = crate::responses::index_bounds(gateway.responses);
                    ResponseStore::shared(
                        gateway.responses,
                        SharedResponses::new(store, kept(gateway.responses)),
                        SharedResponses::named(store, "response_item", kept(index)),
                    )
                }
                None => ResponseStore::new(gateway.responses),
            },
            router,
            gateway,
            metrics,
            feed,
            stopping: tokio::sync::watch::Sender::new(false),
            access,
            ids: IdSource::new(),
            listed,
            guard_metrics,
        })
    }

    /// A receiver that turns `true` once [`AppState::stop`] is called.
    pub fn stop_signal(&self) -> tokio::sync::watch::Receiver<bool> {
        self.stopping.subscribe()
    }

    /// Begins shutting down: the workers stop accepting and the admin event streams end, so
    /// they do not hold the drain of requests.
    pub fn stop(&self) {
        self.stopping.send_replace(true);
    }

    /// Whether the configuration names `target`.
    pub fn is_listed(&self, target: &Target) -> bool {
        self.listed.contains(target)
    }

    fn target_label(&self, via: &Via) -> LabelValue {
        match via {
            Via::Target(target) if self.is_listed(target) => LabelValue::Shared(target.shared()),
            Via::Target(_) => LabelValue::Static("(unlisted)"),
            Via::Candidate(_) => LabelValue::from(via.to_string()),
        }
    }
}
/// Starts the trace exporter; a gateway that cannot export serves on, untraced, and says why.
fn start_telemetry(
    settings: &crate::telemetry::TelemetrySettings,
    router: &Router,
) -> Option<Arc<Telemetry>> {
    let runtime = match tokio::runtime::Handle::try_current() {
        Ok(runtime) => runtime,
        Err(_) => {
            tracing::error!("traces are not exported: the gateway was built outside a Tokio runtime");
            return None;
        }
    };
    let kinds = router
        .provider_ids()
        .into_iter()
        .map(|id| (id.to_owned(), router.provider_kind(id).unwrap_or_default().to_owned()));
    match Telemetry::start(settings, runtime, kinds) {
        Ok(telemetry) => Some(Arc::new(telemetry)),
        Err(error) => {
            tracing::error!(%error, "traces are not exported");
            None
        }
    }
}

/// Request ids: a process prefix (start time) and a counter; cheap and unique enough to find a
/// request in logs and in `/admin/requests/{id}`.
struct IdSource {
    prefix: String,
    next: AtomicU64,
}

impl IdSource {
    fn new() -> Self {
        let start = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default().as_millis() as u64;
        Self { prefix: format!("req_{:x}", start & 0xffff_ffff), next: AtomicU64::new(1) }
    }

    /// The prefix and the counter in at least six hex digits, written digit by digit: this
    /// runs for every request, where `format!` showed in the profile (about 900 instructions).
    fn next(&self) -> String {
        let n = self.next.fetch_add(1, Ordering::Relaxed);
        let digits = n.checked_ilog2().map_or(1, |log| log / 4 + 1).max(6);
        let mut id = String::with_capacity(self.prefix.len() + digits as usize);
        id.push_str(&self.prefix);
        for at in (0..digits).rev() {
            id.push(char::from(b"0123456789abcdef"[((n >> (at * 4)) & 0xf) as usize]));
        }
        id
    }
}

/// The whole HTTP application.
pub fn app(state: Arc<AppState>) -> HttpRouter {
    HttpRouter::new()
        .route("/v1/chat/completions", post(openai::chat_completions))
        .route("/v1/embeddings", post(openai::embeddings))
        .route("/v1/models", get(openai::models))
        .route("/v1/models/{*id}", get(openai::model))
        .route("/v1/messages", post(anthropic::messages))
        .route("/v1/responses", post(responses::create))
        .route("/v1/responses/{id}", get(responses::retrieve).delete(responses::delete))
        .route("/v1/messages/count_tokens", post(anthropic::count_tokens))
        .route("/healthz", get(|| async { (StatusCode::OK, "ok\n") }))
        .route("/readyz", get(admin::ready))
        .route("/metrics", get(admin::metrics))
        .route("/admin/health", get(admin::health))
        .route("/admin/health/reset", post(admin::reset))
        .route("/admin/requests", get(admin::requests))
        .route("/admin/requests/{id}", get(admin::request))
        .route("/admin/events", get(events::stream))
        .route("/admin/simulated/{provider}", post(admin::drill))
        .route("/admin", get(page::redirect))
        .route("/admin/", get(page::page))
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .with_state(state)
}

async fn not_found(request: Request) -> Response {
    let message = format!(
        "no such endpoint: {} {}. Endpoints: POST /v1/chat/completions, POST /v1/messages, POST /v1/embeddings, GET /v1/models, GET /v1/models/{{id}}, GET /healthz, GET /readyz, GET /metrics, GET /admin/, GET /admin/health, POST /admin/health/reset, GET /admin/requests, GET /admin/requests/{{id}}, GET /admin/events, POST /admin/simulated/{{provider}}",
        request.method(),
        request.uri().path()
    );
    ApiError::new(StatusCode::NOT_FOUND, "unknown_endpoint", message)
        .into_response(dialect_of(request.uri().path()), "")
}

async fn method_not_allowed(request: Request) -> Response {
    let message = format!("{} is not allowed on {}", request.method(), request.uri().path());
    ApiError::new(StatusCode::METHOD_NOT_ALLOWED, "method_not_allowed", message)
        .into_response(dialect_of(request.uri().path()), "")
}

fn dialect_of(path: &str) -> Dialect {
    if path.starts_with("/v1/messages") { Dialect::Anthropic } else { Dialect::OpenAi }
}

/// One request's identity and clock, from arrival to the log line.
pub struct RequestContext {
    pub id: String,
    pub dialect: Dialect,
    pub started: Instant,
    /// When it arrived, by the wall clock.
    pub wall: SystemTime,
    pub endpoint: &'static str,
    /// The error kind that ended the request after its status was sent (a stream cut
    /// mid-way): the log line keeps the status the client received and names the error.
    pub late_error: Option<&'static str>,
    /// The request's span and the client's span it continues, when traces are exported.
    pub trace: Option<(TraceContext, Option<u64>)>,
    /// The `model` the client named, kept only for a traced request.
    pub model: String,
    /// When the router took the request: its trail's offsets count from here.
    routed: std::sync::OnceLock<Instant>,
    /// What the request carried that only some providers read, noted on the attempts sent
    /// to the others.
    pub(crate) unsent: Vec<(Readers, String)>,
}

impl RequestContext {
    fn start(state: &AppState, headers: &HeaderMap, dialect: Dialect, endpoint: &'static str) -> Self {
        let id = headers
            .get(names::REQUEST_ID)
            .and_then(|v| v.to_str().ok())
            .filter(|v| {
                !v.is_empty()
                    && v.len() <= 64
                    && v.bytes().all(|b| b.is_ascii_alphanumeric() || b"-_.:".contains(&b))
            })
            .map_or_else(|| state.ids.next(), str::to_owned);
        Self {
            id,
            dialect,
            started: Instant::now(),
            wall: SystemTime::now(),
            endpoint,
            late_error: None,
            trace: None,
            model: String::new(),
            routed: std::sync::OnceLock::new(),
            unsent: Vec::new(),
        }
    }

    /// The router's options for this request: the client's switches, and its span. Called as
    /// the request is handed to the router.
    fn options(&self, headers: &HeaderMap) -> RequestOptions {
        self.routed.get_or_init(Instant::now);
        let mut options = options(headers);
        if let Some((context, parent)) = self.trace {
            options.trace = Some(context);
            // The trace continued carries the client's vendor state on with it.
            if parent.is_some() {
                for state in headers.get_all("tracestate").iter().filter_map(|v| v.to_str().ok()) {
                    options.forward_headers.push(("tracestate".to_owned(), state.to_owned()));
                }
            }
        }
        options
    }

    /// Renders `error` and logs the request.
    fn fail(&self, state: &AppState, error: ApiError) -> Response {
        let trail_len = error.attempts.as_deref().and_then(Value::as_array).map_or(0, Vec::len);
        self.finish(state, "".into(), None, error.status.as_u16(), trail_len, None);
        let mut response = error.into_response(self.dialect, &self.id);
        self.stamp(&mut response, None, trail_len);
        response
    }

    /// Logs a routing failure and keeps its trail.
    fn finish_failure(&self, state: &AppState, route: Arc<str>, status: u16, trail: Trail) {
        let timing = Timing { total: self.started.elapsed(), ..Timing::default() };
        let attempts = trail.len();
        self.finish(state, route, None, status, attempts, Some(Settled { trail, timing, usage: None }));
    }

    /// The headers every answer carries.
    fn stamp(&self, response: &mut Response, served_by: Option<&Via>, attempts: usize) {
        let headers = response.headers_mut();
        if let Ok(id) = HeaderValue::from_str(&self.id) {
            headers.insert(names::REQUEST_ID, id);
        }
        if let Some(Ok(value)) = served_by.map(|via| HeaderValue::from_str(&via.text())) {
            headers.insert(names::TARGET, value);
        }
        headers.insert(names::ATTEMPTS, HeaderValue::from(attempts as u64));
    }

    /// Logs the request and records its metrics and trail.
    fn finish(
        &self,
        state: &AppState,
        route: Arc<str>,
        served_by: Option<&Via>,
        status: u16,
        attempts: usize,
        outcome: Option<Settled>,
    ) {
        let elapsed = self.started.elapsed();
        let metrics = &state.metrics;
        let route_label =
            if route.is_empty() { LabelValue::Static("(none)") } else { LabelValue::Shared(route.clone()) };
        metrics.increment(
            "switchyard_requests_total",
            labels([
                ("endpoint", self.endpoint.into()),
                ("route", route_label.clone()),
                ("status", status_label(status)),
            ]),
            1,
        );
        metrics.observe(
            "switchyard_request_duration_seconds",
            labels([("route", route_label.clone())]),
            elapsed.as_secs_f64(),
        );
        let mut upstream = Duration::ZERO;
        let mut overhead = elapsed;
        let usage = outcome.as_ref().and_then(|settled| settled.usage);
        let kept = outcome.map(|Settled { mut trail, timing, .. }| {
            for (readers, note) in &self.unsent {
                let readers = match readers {
                    Readers::ResponsesNative => &state.gateway.responses_native,
                    Readers::Anthropic => &state.gateway.anthropic_providers,
                };
                note_unread(&mut trail, note, readers);
            }
            for attempt in &trail {
                metrics.increment(
                    "switchyard_attempts_total",
                    labels([
                        ("target", state.target_label(&attempt.via)),
                        ("outcome", attempt.outcome.as_str().into()),
                        ("error_kind", attempt.error_kind().map_or("", |k| k.as_str()).into()),
                    ]),
                    1,
                );
                upstream += attempt.duration.saturating_sub(attempt.queued);
            }
            if let Some(first_token) = timing.first_token {
                metrics.observe(
                    "switchyard_time_to_first_token_seconds",
                    labels([("route", route_label.clone())]),
                    first_token.as_secs_f64(),
                );
            }
            if trail.fell_back_to(served_by) {
                metrics.increment("switchyard_fallbacks_total", labels([("route", route_label.clone())]), 1);
            }
            if trail
                .attempts()
                .last()
                .is_some_and(|a| a.outcome == switchyard::trail::Outcome::Candidate && a.age.is_some())
            {
                metrics.increment(
                    "switchyard_stale_answers_total",
                    labels([("route", route_label.clone())]),
                    1,
                );
            }
            if trail.attempts().iter().any(|a| a.hedge) {
                metrics.increment(
                    "switchyard_hedges_total",
                    labels([("route", route_label.clone()), ("result", "started".into())]),
                    1,
                );
                if trail.attempts().iter().any(|a| a.hedge && a.outcome == switchyard::trail::Outcome::Ok) {
                    metrics.increment(
                        "switchyard_hedges_total",
                        labels([("route", route_label.clone()), ("result", "won".into())]),
                        1,
                    );
                }
            }
            let retries =
                trail.attempts().iter().filter(|a| a.outcome == switchyard::trail::Outcome::Retried).count();
            if retries > 0 {
                metrics.increment(
                    "switchyard_retries_total",
                    labels([("route", route_label.clone())]),
                    retries as u64,
                );
            }
            if !timing.queued.is_zero() {
                metrics.observe(
                    "switchyard_queued_seconds",
                    labels([("route", route_label)]),
                    timing.queued.as_secs_f64(),
                );
            }
            // A stream's time after its first chunk belongs to the upstream: its overhead is
            // measured up to that first chunk.
            let until = if timing.first_token.is_some() { timing.total } else { elapsed };
            overhead = until.saturating_sub(upstream).saturating_sub(timing.queued);
            metrics.observe("switchyard_overhead_seconds", labels([]), overhead.as_secs_f64());
            RequestRecord {
                id: self.id.clone(),
                at: self.wall,
                endpoint: self.endpoint,
                route: route.clone(),
                served_by: served_by.cloned(),
                status,
                duration: elapsed,
                queued: timing.queued,
                first_token: timing.first_token,
                trail,
            }
        });
        if let (Some(telemetry), Some((context, parent))) = (&state.telemetry, self.trace) {
            telemetry.record(&RequestSpan {
                context,
                parent,
                wall: self.wall,
                routed: self
                    .routed
                    .get()
                    .map_or(Duration::ZERO, |at| at.saturating_duration_since(self.started)),
                duration: elapsed,
                endpoint: self.endpoint,
                request_id: &self.id,
                model: &self.model,
                route: &route,
                served_by,
                status,
                late_error: self.late_error,
                queued: kept.as_ref().map_or(Duration::ZERO, |record| record.queued),
                usage,
                trail: kept.as_ref().map(|record| &record.trail),
            });
        }
        if let Some(record) = kept {
            // Kept before it is announced: a subscriber may open its trail at once.
            let line = state.feed.render(&record);
            state.recent.insert(record);
            state.feed.send(line);
        }
        state.access.record(&AccessEntry {
            request_id: &self.id,
            endpoint: self.endpoint,
            route: &route,
            served_by,
            attempts,
            status,
            error: self.late_error,
            latency: elapsed,
            overhead,
        });
    }
}

/// The label of a status code: common ones are static strings.
fn status_label(status: u16) -> LabelValue {
    LabelValue::Static(match status {
        200 => "200",
        400 => "400",
        401 => "401",
        404 => "404",
        408 => "408",
        413 => "413",
        415 => "415",
        429 => "429",
        499 => "499",
        500 => "500",
        502 => "502",
        503 => "503",
        504 => "504",
        other => return LabelValue::from(other.to_string()),
    })
}

fn describe(metrics: &Metrics) {
    metrics.describe("switchyard_requests_total", "Requests answered, by endpoint, route and HTTP status.");
    metrics.describe("switchyard_attempts_total", "Attempts, by target, outcome and error kind.");
    metrics.describe(
        "switchyard_fallbacks_total",
        "Requests served by another target than the first one called.",
    );
    metrics.describe("switchyard_retries_total", "Retries of the same target.");
    metrics.describe(
        "switchyard_stale_answers_total",
        "Requests answered with a remembered answer (a cache candidate) when every target failed, by route.",
    );
    metrics.describe(
        "switchyard_hedges_total",
        "Hedged requests, by route: started (a second attempt beside a slow first) and won (the hedge answered).",
    );
    metrics.describe(
        "switchyard_request_duration_seconds",
        "Time from request to answer; for streams, to the end of the stream.",
    );
    metrics.describe(
        "switchyard_overhead_seconds",
        "Time the gateway added on top of upstream calls and pacing.",
    );
    metrics.describe("switchyard_time_to_first_token_seconds", "Time to the first streamed content chunk.");
    metrics.describe(
        "switchyard_queued_seconds",
        "Time requests waited for client-side pacing, when they waited.",
    );
    metrics.describe("switchyard_tokens_total", "Tokens, by target and type (prompt, completion).");
    metrics.describe("switchyard_cost_total", "Cost at the configured prices, by target.");
}

/// Checks the gateway key (Bearer or x-api-key) when keys are configured.
fn authorized(keys: &[Secret], headers: &HeaderMap) -> bool {
    if keys.is_empty() {
        return true;
    }
    let Some(presented) = presented_key(headers) else { return false };
    keys.iter().any(|key| constant_time_eq(key.expose().as_bytes(), presented.as_bytes()))
}

/// The gateway key the client sent (`Authorization: Bearer` or `x-api-key`), trimmed.
fn presented_key(headers: &HeaderMap) -> Option<&str> {
    headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer ").or_else(|| v.strip_prefix("bearer ")))
        .or_else(|| headers.get(names::API_KEY).and_then(|v| v.to_str().ok()))
        .map(str::trim)
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

fn unauthorized(headers: &HeaderMap) -> ApiError {
    let presented = headers.contains_key(header::AUTHORIZATION) || headers.contains_key(names::API_KEY);
    let message = if presented {
        "the gateway key is not valid"
    } else {
        "a gateway key is required: send it as `Authorization: Bearer <key>` or `x-api-key: <key>`"
    };
    ApiError::new(StatusCode::UNAUTHORIZED, "unauthorized", message)
}

/// The steps every model endpoint takes first: identify the request, check the gateway key,
/// read the JSON body, parse it in the endpoint's dialect, and require a `model`. A failure is
/// already rendered and logged.
async fn accept<T>(
    state: &AppState,
    headers: &HeaderMap,
    body: Body,
    (dialect, endpoint): (Dialect, &'static str),
    parse: impl FnOnce(&Bytes) -> Result<T, ApiError>,
    model: impl Fn(&T) -> &str,
) -> Result<(RequestContext, T), Response> {
    let mut exchange = RequestContext::start(state, headers, dialect, endpoint);
    if !authorized(&state.gateway.keys, headers) {
        return Err(exchange.fail(state, unauthorized(headers)));
    }
    // Only a client with a key chooses a trace to continue.
    exchange.trace = state.telemetry.as_ref().map(|telemetry| telemetry.begin(headers));
    let parsed = match json_body(headers, body, &state.gateway).await {
        Ok(bytes) => parse(&bytes),
        Err(error) => Err(error),
    };
    match parsed {
        Ok(request) if model(&request).trim().is_empty() => {
            Err(exchange.fail(state, missing_model(&state.router)))
        }
        Ok(request) => {
            if exchange.trace.is_some() {
                exchange.model = model(&request).to_owned();
            }
            Ok((exchange, request))
        }
        Err(error) => Err(exchange.fail(state, error)),
    }
}

/// Reads a JSON request body, refusing a wrong content type, a body over `gateway.max_body`
/// and one that stops arriving for `gateway.body_timeout` (answered `408`, and the connection
/// closed: the rest of the body may still come, and nothing could tell it from a next request).
async fn json_body(headers: &HeaderMap, body: Body, gateway: &GatewaySettings) -> Result<Bytes, ApiError> {
    if let Some(content_type) = headers.get(header::CONTENT_TYPE) {
        let text = content_type.to_str().unwrap_or_default().to_ascii_lowercase();
        let essence = text.split(';').next().unwrap_or_default().trim();
        if essence != "application/json" && !essence.ends_with("+json") {
            return Err(ApiError::new(
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                "unsupported_media_type",
                format!("content type `{essence}` is not JSON: send `Content-Type: application/json`"),
            ));
        }
    }
    body::read(body, gateway.max_body, gateway.connections.body_timeout).await.map_err(|error| match error {
        body::BodyError::TooLarge { .. } => ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "body_too_large",
            format!("{error} (gateway.max_body)"),
        ),
        body::BodyError::Stalled { .. } => stalled(&error),
        body::BodyError::Unreadable(_) => {
            ApiError::new(StatusCode::BAD_REQUEST, "invalid_body", error.to_string())
        }
    })
}

/// The answer to a body that stopped arriving: `408`, and the connection closes after it.
fn stalled(error: &body::BodyError) -> ApiError {
    ApiError::new(StatusCode::REQUEST_TIMEOUT, "request_timeout", format!("{error} (gateway.body_timeout)"))
        .closing()
}

/// A JSON parse error, with the line and column.
fn invalid_json(error: &serde_json::Error) -> ApiError {
    ApiError::new(
        StatusCode::BAD_REQUEST,
        "invalid_json",
        format!("the body is not a valid request: {error}"),
    )
}

/// The per-request switches from headers.
/// The client's headers that reach the provider: its beta opt-ins, its API version and its
/// idempotency key. Never its `authorization` or `x-api-key` (the gateway key), nor
/// `openai-organization` / `openai-project` (the account billed is the provider's
/// configuration), nor anything else.
const FORWARDED: [HeaderName; 4] = [
    HeaderName::from_static("anthropic-beta"),
    HeaderName::from_static("anthropic-version"),
    HeaderName::from_static("openai-beta"),
    HeaderName::from_static("idempotency-key"),
];

/// Header names read or written on every request, made once: a name given as `&str` is parsed
/// again at each use.
mod names {
    use axum::http::HeaderName;

    pub const REQUEST_ID: HeaderName = HeaderName::from_static("x-request-id");
    pub const TARGET: HeaderName = HeaderName::from_static("x-switchyard-target");
    pub const ATTEMPTS: HeaderName = HeaderName::from_static("x-switchyard-attempts");
    pub const FALLBACK: HeaderName = HeaderName::from_static("x-switchyard-fallback");
    pub const CACHE: HeaderName = HeaderName::from_static("x-switchyard-cache");
    pub const API_KEY: HeaderName = HeaderName::from_static("x-api-key");
}

fn options(headers: &HeaderMap) -> RequestOptions {
    let no_fallback = headers
        .get(names::FALLBACK)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| matches!(v.trim().to_ascii_lowercase().as_str(), "off" | "false" | "0" | "no"));
    let mut forward_headers = Vec::new();
    for name in &FORWARDED {
        for value in headers.get_all(name) {
            if let Ok(value) = value.to_str() {
                forward_headers.push((name.as_str().to_owned(), value.to_owned()));
            }
        }
    }
    // Remembered answers are kept per gateway key (hashed), and a client may opt out.
    let cache_scope = crate::responses::owner_of(presented_key(headers));
    let no_cache =
        headers.get_all(header::CACHE_CONTROL).iter().any(|v| {
            v.to_str().is_ok_and(|v| v.split(',').any(|d| d.trim().eq_ignore_ascii_case("no-store")))
        }) || headers
            .get(names::CACHE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.trim().eq_ignore_ascii_case("off"));
    RequestOptions { no_fallback, forward_headers, cache_scope, no_cache, ..RequestOptions::default() }
}

/// The names a client may send as `model`.
fn model_names(router: &Router) -> Vec<String> {
    let mut names: Vec<String> = router.routes().map(|r| r.name().to_owned()).collect();
    for route in router.routes() {
        for target in route.all_targets() {
            let name = target.to_string();
            if !names.contains(&name) {
                names.push(name);
            }
        }
    }
    names
}

fn missing_model(router: &Router) -> ApiError {
    ApiError::new(
        StatusCode::BAD_REQUEST,
        "missing_model",
        format!("the request has no `model`: name a route or a target ({})", model_names(router).join(", ")),
    )
}

fn unix_now() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default().as_secs()
}

fn add_usage_metrics(
    state: &AppState,
    served_by: &Via,
    usage: Option<switchyard::chat::Usage>,
    cost: Option<f64>,
) {
    if !matches!(served_by, Via::Target(_)) {
        return;
    }
    let target = state.target_label(served_by);
    if let Some(usage) = usage {
        state.metrics.increment(
            "switchyard_tokens_total",
            labels([("target", target.clone()), ("type", "prompt".into())]),
            u64::from(usage.prompt_tokens),
        );
        state.metrics.increment(
            "switchyard_tokens_total",
            labels([("target", target.clone()), ("type", "completion".into())]),
            u64::from(usage.completion_tokens),
        );
    }
    if let Some(cost) = cost {
        state.metrics.add("switchyard_cost_total", labels([("target", target)]), cost);
    }
}

/// The providers that read a part of a request only some can.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Readers {
    /// Those spoken to in the Responses API: reasoning items.
    ResponsesNative,
    /// Anthropic's: Claude's signed thinking of earlier turns.
    Anthropic,
}

/// Notes Claude's signed thinking of earlier turns in `request` (as an OpenAI-dialect client
/// sends it back, a Responses client's encoded reasoning items, or an Anthropic client's own
/// blocks), which a provider of another kind is not sent: the trail says so on its attempts
/// rather than dropping it unsaid.
fn note_claude_thinking(exchange: &mut RequestContext, request: &switchyard::chat::ChatRequest) {
    // Only what the Anthropic writer would send: an unsigned block goes to no provider.
    let signed = |blocks: &[Value]| {
        blocks.iter().any(|b| switchyard_providers::anthropic::sendable_thinking(b).is_some())
    };
    let thinking = |m: &&switchyard::chat::Message| {
        let anthropic =
            m.extra.get(switchyard_providers::anthropic::VERBATIM_BLOCKS).and_then(Value::as_array);
        signed(m.thinking_blocks()) || anthropic.is_some_and(|blocks| signed(blocks))
    };
    let turns = request.messages.iter().filter(thinking).count();
    if turns > 0 {
        exchange.unsent.push((
            Readers::Anthropic,
            format!("Claude's thinking of {turns} earlier turn(s) was not sent: only an Anthropic provider reads it"),
        ));
    }
}

/// Adds `note` to every attempt sent to a provider not among `readers`.
fn note_unread(trail: &mut Trail, note: &str, readers: &[String]) {
    for attempt in trail.attempts_mut() {
        let translated = attempt.target().is_some_and(|t| !readers.iter().any(|id| id == t.provider()));
        if translated && !attempt.outcome.is_skip() {
            attempt.note = Some(match attempt.note.take() {
                Some(earlier) => format!("{earlier}; {note}"),
                None => note.to_owned(),
            });
        }
    }
}

/// How a routed request ended: its trail, where its time went, and the tokens it used.
pub(crate) struct Settled {
    pub trail: Trail,
    pub timing: Timing,
    pub usage: Option<switchyard::chat::Usage>,
}

/// What a successful exchange hands the gateway: who answered and how.
pub(crate) struct Delivered {
    pub route: Arc<str>,
    pub served_by: Via,
    pub trail: Trail,
    pub timing: Timing,
    pub usage: Option<switchyard::chat::Usage>,
}

impl From<&mut switchyard::Answer> for Delivered {
    fn from(answer: &mut switchyard::Answer) -> Self {
        Delivered {
            route: answer.route.clone(),
            served_by: answer.served_by.clone(),
            trail: std::mem::take(&mut answer.trail),
            timing: answer.timing,
            usage: answer.usage,
        }
    }
}

/// A 200 with a JSON body already serialized, the switchyard headers, the log line, the
/// metrics and the trail.
fn answered(
    state: &AppState,
    exchange: &RequestContext,
    body: impl Into<Bytes>,
    served: Delivered,
) -> Response {
    let mut response = Response::new(Body::from(body.into()));
    response.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    let attempts = served.trail.len();
    exchange.stamp(&mut response, Some(&served.served_by), attempts);
    if served.trail.attempts().iter().any(|a| a.hedge) {
        response.headers_mut().insert("x-switchyard-hedged", HeaderValue::from_static("1"));
    }
    stale_headers(&mut response, &served.trail);
    let queued = served.timing.queued;
    if !queued.is_zero() {
        response.headers_mut().insert("x-switchyard-queued-ms", HeaderValue::from(queued.as_millis() as u64));
    }
    exchange.finish(
        state,
        served.route,
        Some(&served.served_by),
        200,
        attempts,
        Some(Settled { trail: served.trail, timing: served.timing, usage: served.usage }),
    );
    response
}

/// Keeps every `cache` candidate's answers in the fleet's Redis too, with the candidate's
/// bounds for the fleet: `P:answer:<route>:<candidate>:<scope>:<key>`.
fn share_answers(router: &Router, store: &switchyard_state::RedisStore) {
    for route in router.routes() {
        for candidate in route.candidates() {
            let Some(cache) = candidate.answer_cache() else { continue };
            let settings = cache.settings();
            let bounds = KeptBounds {
                max_entries: settings.max_entries,
                max_age: settings.max_age,
                max_bytes: settings.max_bytes,
            };
            let kind = format!("answer:{}:{}", route.name(), candidate.name());
            cache.share(Arc::new(RedisAnswers(SharedResponses::named(store, &kind, bounds))));
        }
    }
}

/// A `cache` candidate's answers in Redis.
#[derive(Debug)]
struct RedisAnswers(SharedResponses);

impl switchyard::answer_cache::SharedAnswers for RedisAnswers {
    fn put(&self, key: String, value: Vec<u8>) -> switchyard::provider::BoxFuture<'_, Result<(), String>> {
        Box::pin(async move { self.0.put(&key, &value).await })
    }

    fn get(&self, key: String) -> switchyard::provider::BoxFuture<'_, Result<Option<Vec<u8>>, String>> {
        Box::pin(async move { self.0.get(&key).await })
    }
}

/// `x-switchyard-cache: stale` and `age` on an answer a `cache` candidate served.
pub(crate) fn stale_headers(response: &mut Response, trail: &Trail) {
    let age = trail
        .attempts()
        .last()
        .filter(|a| a.outcome == switchyard::trail::Outcome::Candidate)
        .and_then(|a| a.age);
    if let Some(age) = age {
        let headers = response.headers_mut();
        headers.insert("x-switchyard-cache", HeaderValue::from_static("stale"));
        headers.insert(header::AGE, HeaderValue::from(age.as_secs()));
    }
}

/// The response to a routing failure, in the exchange's dialect, with the trail.
fn route_failed(state: &AppState, exchange: &RequestContext, error: switchyard::RouteError) -> Response {
    // A model that named nothing is logged under the default route, which would have governed.
    let route: Arc<str> = error.route().unwrap_or_else(|| state.router.default_route().name()).into();
    let api = ApiError::from_route(&error);
    let status = api.status.as_u16();
    let attempts = error.trail().len();
    let mut response = api.into_response(exchange.dialect, &exchange.id);
    exchange.stamp(&mut response, None, attempts);
    exchange.finish_failure(state, route, status, error.into_trail());
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_ids_are_the_prefix_and_at_least_six_hex_digits_of_the_counter() {
        for n in [0, 1, 0xabcdef, 0x100_0000, 0x1234_5678_9abc, u64::MAX] {
            let ids = IdSource { prefix: "req_1f".to_owned(), next: AtomicU64::new(n) };
            assert_eq!(ids.next(), format!("req_1f{n:06x}"));
        }
    }
}
