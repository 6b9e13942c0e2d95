//! One request's identity, clock and what it carried, from arrival to its end: made by the
//! lifecycle layer ([`super::lifecycle`]), handed to the dialect's handler, and finished once.

use std::sync::Arc;
use std::time::{Instant, SystemTime};

use axum::http::{HeaderMap, HeaderValue};
use axum::response::Response;
use serde_json::Value;
use switchyard::chat::Dialect;
use switchyard::route::is_template;
use switchyard::trace::TraceContext;
use switchyard::trail::{CutShort, Timing, Trail, Via};
use switchyard::{RequestOptions, Router};

use super::errors::ApiError;
use super::finished::{self, Ending, FinishedRequest, Settled};
use super::options::{names, options};
use super::state::{AppState, Live};

/// One request's identity and clock, from arrival to the log line.
#[derive(Debug, Clone)]
pub struct RequestContext {
    /// `x-request-id`: the client's when it sent a usable one, else the gateway's own.
    pub id: String,
    /// The dialect the client speaks: its errors and stream events are written in it.
    pub dialect: Dialect,
    /// When it arrived.
    pub started: Instant,
    /// When it arrived, by the wall clock.
    pub wall: SystemTime,
    /// The endpoint's name in the metrics and the logs (`chat_completions`, `messages`).
    pub endpoint: &'static str,
    /// The error kind that ended the request after its status was sent (a stream cut
    /// mid-way): the log line keeps the status the client received and names the error.
    pub late_error: Option<&'static str>,
    /// The request's span and the client's span it continues, when traces are exported.
    pub trace: Option<(TraceContext, Option<u64>)>,
    /// The `model` the client named, kept only for a traced request.
    pub model: String,

    /// Notes for the trail's attempts, each on the attempts it concerns: what the request
    /// carried that only some providers read, on those sent to the others.
    pub(crate) unsent: Vec<(NoteOn, String)>,
    /// The configuration in force when it arrived: the request runs on it to its end, even
    /// when a reload swaps another in meanwhile.
    pub(crate) live: Arc<Live>,
    /// The client key it came with, when keys are configured.
    pub(crate) key: Option<Arc<crate::keys::ClientKey>>,
    /// What its clones share: whether it was logged, and when the router took it.
    pub(crate) progress: Arc<Progress>,
}

/// The attempts a trail note goes on, by what their target is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum NoteOn {
    /// Those to a provider not spoken to in the Responses API, which reads what they were not
    /// sent: reasoning items, hosted tools, parameters and items Switchyard does not model.
    NotResponsesNative,
    /// Those to anything but Claude spoken to in its Messages API, which reads what they were
    /// not sent: Claude's signed thinking of earlier turns, an Anthropic client's fields that no
    /// other dialect has.
    NotClaude,
    /// Those to Claude: what concerns Claude alone (its thinking, switched off).
    Claude,
}

/// What the clones of a request's context share (the handler's, and the one that logs the
/// request should its client go away first).
#[derive(Debug, Default)]
pub(crate) struct Progress {
    /// Whether it was logged ([`RequestContext::finish`]): one that was not when its client
    /// went away is logged then, as 499.
    pub(crate) logged: std::sync::atomic::AtomicBool,
    /// When the router took the request: its trail's offsets count from here, and what
    /// follows is the providers' time, not the gateway's.
    pub(crate) routed: std::sync::OnceLock<Instant>,
    /// Where the router leaves the route and trail of a request its client left unanswered.
    pub(crate) unfinished: switchyard::trail::Unfinished,
    /// Its key's admission: its place among the key's requests in flight, held until it is
    /// logged (by whichever clone logs it: a request its client left is charged too).
    pub(crate) pass: std::sync::Mutex<Option<crate::keys::Pass>>,
}

impl RequestContext {
    /// A request to `endpoint` in `dialect`, arrived now, under the client's usable
    /// `x-request-id` or a fresh one.
    pub(crate) fn start(
        state: &AppState,
        headers: &HeaderMap,
        dialect: Dialect,
        endpoint: &'static str,
    ) -> Self {
        let id = headers
            .get(names::REQUEST_ID)
            .and_then(|v| v.to_str().ok())
            .filter(|v| {
                !v.is_empty()
                    && v.len() <= 64
                    && v.bytes().all(|b| b.is_ascii_alphanumeric() || b"-_.:".contains(&b))
                    // The gateway's own form is its to give: a client that sent another
                    // request's id would hide that request's trail from the admin.
                    && !v.starts_with("req_")
            })
            .map_or_else(|| state.ids.next(), str::to_owned);
        state.begun.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Self {
            id,
            dialect,
            started: Instant::now(),
            wall: SystemTime::now(),
            endpoint,
            late_error: None,
            trace: None,
            model: String::new(),
            unsent: Vec::new(),
            live: state.live(),
            key: None,
            progress: Arc::default(),
        }
    }

    /// The parsed request, when it parsed, names a `model` and its key admits it; else the
    /// request answered (boxed: a response is large, and a refusal the rare case) and logged
    /// as refused.
    pub(crate) async fn accept<T>(
        mut self,
        state: &AppState,
        parsed: Result<T, ApiError>,
        model: impl Fn(&T) -> &str,
    ) -> Result<(Self, T), Box<Response>> {
        match parsed {
            Ok(request) if model(&request).trim().is_empty() => {
                let error = self.missing_model();
                Err(Box::new(self.fail(state, error)))
            }
            Ok(request) => {
                if let Some(error) = self.routes_only(model(&request)) {
                    return Err(Box::new(self.fail(state, error)));
                }
                if let Err(error) = self.admit(state, model(&request)).await {
                    // Refused at the door, it is logged under the route it asked for.
                    let route: Arc<str> =
                        self.live.router.governing_route(model(&request)).unwrap_or_default().into();
                    return Err(Box::new(self.fail_under(state, error, route)));
                }
                if self.trace.is_some() {
                    self.model = model(&request).to_owned();
                }
                Ok((self, request))
            }
            Err(error) => Err(Box::new(self.fail(state, error))),
        }
    }

    /// The router's options for this request: the client's switches, and its span. Called as
    /// the request is handed to the router.
    pub(crate) fn options(&self, headers: &HeaderMap) -> RequestOptions {
        self.progress.routed.get_or_init(Instant::now);
        let mut options = options(headers);
        // The client's timeout runs from when it sent the request, not from now.
        let waited = self.started.elapsed();
        options.caller_timeout = options.caller_timeout.map(|patience| patience.saturating_sub(waited));
        options.unfinished = Some(self.progress.unfinished.clone());
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
    pub(crate) fn fail(&self, state: &AppState, error: ApiError) -> Response {
        self.fail_under(state, error, "".into())
    }

    /// Renders `error` and logs the request under `route` (empty: none).
    fn fail_under(&self, state: &AppState, error: ApiError, route: Arc<str>) -> Response {
        let attempts = error.attempts.as_deref().and_then(Value::as_array).map_or(0, Vec::len);
        let status = error.status_in(self.dialect).as_u16();
        self.finish(state, Ending { route, served_by: None, status, attempts, settled: None });
        let mut response = error.into_response(self.dialect, &self.id);
        self.stamp(&mut response, None, attempts);
        response
    }

    /// Logs a routing failure and keeps its trail; `cut` is what the calls it cut short cost
    /// (a request its client left), charged to its key.
    pub(crate) fn finish_failure(
        &self,
        state: &AppState,
        (route, trail): (Arc<str>, Trail),
        status: u16,
        cut: Option<CutShort>,
    ) {
        let timing = Timing { total: self.started.elapsed(), ..Timing::default() };
        let attempts = trail.len();
        let (usage, cost) = match &cut {
            Some(cut) => {
                for call in &cut.calls {
                    let via = Via::Target(call.target.clone());
                    finished::metrics::usage(state, &self.live, (&via, &route), Some(call.usage), call.cost);
                }
                (Some(cut.usage()), cut.cost())
            }
            None => (None, None),
        };
        let settled = Some(Settled { trail, timing, usage, cost });
        self.finish(state, Ending { route, served_by: None, status, attempts, settled });
    }

    /// The headers every answer carries.
    pub(crate) fn stamp(&self, response: &mut Response, served_by: Option<&Via>, attempts: usize) {
        let headers = response.headers_mut();
        if let Ok(id) = HeaderValue::from_str(&self.id) {
            headers.insert(names::REQUEST_ID, id);
        }
        if let Some(Ok(value)) = served_by.map(|via| HeaderValue::from_str(&via.text())) {
            headers.insert(names::TARGET, value);
        }
        headers.insert(names::ATTEMPTS, HeaderValue::from(attempts as u64));
    }

    /// The request as it ended, once: its metrics, its trace, its access-log line, then its
    /// record in the history and on the event feed.
    pub(crate) fn finish(&self, state: &AppState, ending: Ending<'_>) {
        if self.progress.logged.swap(true, std::sync::atomic::Ordering::AcqRel) {
            return;
        }
        state.ended.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        self.charge(state, &ending);
        let done = self.finished(ending);
        finished::metrics::record(state, &done);
        finished::telemetry::record(state, &done);
        finished::access::record(state, &done);
        finished::history::keep(state, done);
    }

    /// The [`FinishedRequest`] of `ending`, with what the request was not sent noted on the
    /// attempts it concerns.
    fn finished<'a>(&'a self, ending: Ending<'a>) -> FinishedRequest<'a> {
        let Ending { route, served_by, status, attempts, mut settled } = ending;
        if let Some(settled) = settled.as_mut() {
            let gateway = &self.live.gateway;
            for (on, note) in &self.unsent {
                let trail = &mut settled.trail;
                match on {
                    NoteOn::NotResponsesNative => note_on(trail, note, |target, _| {
                        !gateway.responses_native.iter().any(|id| id == target.provider())
                    }),
                    NoteOn::NotClaude => {
                        note_on(trail, note, |target, model| !claude(gateway, target, model))
                    }
                    NoteOn::Claude => note_on(trail, note, |target, model| claude(gateway, target, model)),
                }
            }
        }
        FinishedRequest {
            id: &self.id,
            endpoint: self.endpoint,
            wall: self.wall,
            elapsed: self.started.elapsed(),
            routed: self
                .progress
                .routed
                .get()
                .map_or(std::time::Duration::ZERO, |at| at.saturating_duration_since(self.started)),
            route,
            served_by,
            status,
            attempts,
            late_error: self.late_error,
            trace: self.trace,
            model: &self.model,
            settled,
            live: &self.live,
            key: self.key.as_ref().map(|key| key.label.clone()),
        }
    }

    /// The refusal of a request that names no `model`, naming those its key may use.
    fn missing_model(&self) -> ApiError {
        let routes_only = !self.live.gateway.direct_targets;
        missing_model(&self.names_for_key(routes_only).join(", "), routes_only)
    }

    /// The names its key may send as `model` (every one, without keys): the routes, and their
    /// targets unless `routes_only`.
    fn names_for_key(&self, routes_only: bool) -> Vec<String> {
        let router = &self.live.router;
        let mut names = model_names(router, routes_only);
        if let Some(key) = &self.key {
            names.retain(|name| key.rules.allows(name, router));
        }
        names
    }

    /// With `gateway.direct_targets: false`, the refusal of a `model` that is no route (a
    /// `provider:model`, or nothing at all), naming the routes its key may use alone: the
    /// router's own refusal of an unknown model would list the targets this setting keeps from
    /// clients.
    fn routes_only(&self, model: &str) -> Option<ApiError> {
        let router = &self.live.router;
        if self.live.gateway.direct_targets {
            return None;
        }
        let direct = names_a_target(router, model);
        if !direct && router.governing_route(model).is_some() {
            return None;
        }
        let what = match direct {
            true => {
                "names a provider's model directly, which this gateway does not serve (`gateway.direct_targets: false`)"
            }
            false => "is no model here",
        };
        let routes = self.names_for_key(true).join(", ");
        let message = format!("`{}` {what}: name a route ({routes})", switchyard::said_back(model));
        Some(ApiError::new(axum::http::StatusCode::NOT_FOUND, "model_not_found", message))
    }

    /// Notes, on Claude's attempts, that a client of another dialect asked for reasoning
    /// (`reasoning_effort`) in a tool turn it sent back without Claude's signed thinking
    /// (`thinking_blocks`, which most clients of OpenAI's API do not keep): Claude goes on with
    /// it without thinking, as Anthropic wants, and the trail says why.
    pub(crate) fn note_thinking_off(&mut self, request: &switchyard::chat::ChatRequest) {
        let asked =
            request.extra.get("reasoning_effort").and_then(Value::as_str).is_some_and(|e| e != "none");
        if asked && switchyard_providers::anthropic::tool_turn_without_its_thinking(request) {
            self.unsent.push((
                NoteOn::Claude,
                "asked without thinking: the tool turn sent back carries no signed thinking (`thinking_blocks`), which Claude must be given to think on".to_owned(),
            ));
        }
    }

    /// Notes Claude's signed thinking of earlier turns in `request` (as an OpenAI-dialect
    /// client sends it back, a Responses client's encoded reasoning items, or an Anthropic
    /// client's own blocks), which a provider of another kind is not sent: the trail says so
    /// on its attempts rather than dropping it unsaid.
    pub(crate) fn note_claude_thinking(&mut self, request: &switchyard::chat::ChatRequest) {
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
            self.unsent.push((
                NoteOn::NotClaude,
                format!("Claude's thinking of {turns} earlier turn(s) was not sent: only an Anthropic provider reads it"),
            ));
        }
    }

    /// Notes the fields of an Anthropic client's request that only a provider spoken to in
    /// the Messages API reads ([`switchyard_providers::anthropic::codec::read_only_by_anthropic`]):
    /// a provider of OpenAI's dialect goes on without them, and its attempts say so.
    pub(crate) fn note_anthropic_fields(&mut self, request: &switchyard::chat::ChatRequest) {
        let fields = switchyard_providers::anthropic::codec::read_only_by_anthropic(request);
        if !fields.is_empty() {
            self.unsent.push((
                NoteOn::NotClaude,
                format!(
                    "the parameter(s) {} were not sent: only a provider spoken to in Anthropic's Messages API reads them",
                    fields.join(", ")
                ),
            ));
        }
    }
}

/// Whether `target`, called as `model`, is Claude, spoken to in the Messages API.
fn claude(gateway: &crate::config::GatewaySettings, target: &switchyard::Target, model: &str) -> bool {
    gateway
        .anthropic_providers
        .iter()
        .any(|(id, kind)| id == target.provider() && kind.speaks_messages(model))
}

/// Adds `note` to every attempt sent to a target it `concerns`, given the target and the model
/// it was called as (the provider's own id of it, under `models:`).
fn note_on(trail: &mut Trail, note: &str, concerns: impl Fn(&switchyard::Target, &str) -> bool) {
    for attempt in trail.attempts_mut() {
        let concerned = attempt.target().is_some_and(|target| {
            let called = attempt.provider_model.as_deref().unwrap_or(target.model());
            concerns(target, called)
        });
        if concerned && !attempt.outcome.is_skip() {
            attempt.note = Some(match attempt.note.take() {
                Some(earlier) => format!("{earlier}; {note}"),
                None => note.to_owned(),
            });
        }
    }
}

/// Whether `model` names a `provider:model` target of a configured provider, and no route
/// (a route's name wins: see the router's resolution).
pub(crate) fn names_a_target(router: &Router, model: &str) -> bool {
    router.route(model).is_none()
        && model
            .parse::<switchyard::Target>()
            .is_ok_and(|target| router.provider_kind(target.provider()).is_some())
}

/// The names a client may send as `model`: the routes, and their targets unless `routes_only`
/// (`gateway.direct_targets: false`).
pub(crate) fn model_names(router: &Router, routes_only: bool) -> Vec<String> {
    let mut names: Vec<String> = router.routes().map(|r| r.name().to_owned()).collect();
    for route in router.routes().filter(|_| !routes_only) {
        // A target filled in per request (`anthropic:{model}`) is no name a client can send.
        for target in route.all_targets().into_iter().filter(|t| !is_template(t)) {
            let name = target.to_string();
            if !names.contains(&name) {
                names.push(name);
            }
        }
    }
    names
}

/// The refusal of a request that names no `model`: one of `names`.
fn missing_model(names: &str, routes_only: bool) -> ApiError {
    let what = if routes_only { "a route" } else { "a route or a target" };
    ApiError::new(
        axum::http::StatusCode::BAD_REQUEST,
        "missing_model",
        format!("the request has no `model`: name {what} ({names})"),
    )
}
