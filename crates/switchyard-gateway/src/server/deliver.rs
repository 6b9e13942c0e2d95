//! An answer delivered: the headers every answer carries (target, attempts, hedged, queued,
//! stale), and a routing failure rendered in the client's dialect; each logged once.

use std::sync::Arc;

use axum::body::{Body, Bytes};
use axum::http::{HeaderValue, header};
use axum::response::Response;
use switchyard::trail::{Outcome, Timing, Trail, Via};

use super::errors::ApiError;
use super::finished::{Ending, Settled};
use super::request::RequestContext;
use super::state::AppState;

/// What a successful exchange hands the gateway: who answered and how.
pub(crate) struct Delivered {
    pub route: Arc<str>,
    pub served_by: Via,
    pub trail: Trail,
    pub timing: Timing,
    pub usage: Option<switchyard::chat::Usage>,
    /// What the answer cost at the configured prices.
    pub cost: Option<f64>,
}

impl From<&mut switchyard::Answer> for Delivered {
    fn from(answer: &mut switchyard::Answer) -> Self {
        Delivered {
            route: answer.route.clone(),
            served_by: answer.served_by.clone(),
            trail: std::mem::take(&mut answer.trail),
            timing: answer.timing,
            usage: answer.usage,
            cost: answer.cost,
        }
    }
}

/// A 200 with a JSON body already serialized, the switchyard headers, the log line, the
/// metrics and the trail.
pub(crate) fn answered(
    state: &AppState,
    exchange: &RequestContext,
    body: impl Into<Bytes>,
    served: Delivered,
) -> Response {
    let mut response = Response::new(Body::from(body.into()));
    response.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    routing_headers(&mut response, &served.trail, served.timing.queued);
    settle(state, exchange, response, served)
}

/// A 502 for an answer that came but cannot be written in the client's dialect: logged under
/// its route, with its trail and its usage (the provider was paid for it), as an answer is.
pub(crate) fn unwritable(
    state: &AppState,
    exchange: &RequestContext,
    why: String,
    served: Delivered,
) -> Response {
    let mut error = ApiError::new(axum::http::StatusCode::BAD_GATEWAY, "untranslatable_answer", why);
    error.attempts = serde_json::to_value(&served.trail).ok().map(Box::new);
    settle(state, exchange, error.into_response(exchange.dialect, &exchange.id), served)
}

/// `response` to a request a target served, stamped, and the request logged with its trail,
/// usage and cost under its status.
fn settle(
    state: &AppState,
    exchange: &RequestContext,
    mut response: Response,
    served: Delivered,
) -> Response {
    let attempts = served.trail.len();
    exchange.stamp(&mut response, Some(&served.served_by), attempts);
    let status = response.status().as_u16();
    let settled =
        Some(Settled { trail: served.trail, timing: served.timing, usage: served.usage, cost: served.cost });
    let ending =
        Ending { route: served.route, served_by: Some(&served.served_by), status, attempts, settled };
    exchange.finish(state, ending);
    response
}

/// `x-switchyard-hedged` on a hedged answer, the stale headers of a remembered one, and
/// `x-switchyard-queued-ms` when pacing held it.
pub(crate) fn routing_headers(response: &mut Response, trail: &Trail, queued: std::time::Duration) {
    if trail.attempts().iter().any(|a| a.hedge) {
        response.headers_mut().insert("x-switchyard-hedged", HeaderValue::from_static("1"));
    }
    stale_headers(response, trail);
    if !queued.is_zero() {
        response.headers_mut().insert("x-switchyard-queued-ms", HeaderValue::from(queued.as_millis() as u64));
    }
}

/// `x-switchyard-cache: stale` and `age` on an answer a `cache` candidate served.
fn stale_headers(response: &mut Response, trail: &Trail) {
    let age = trail.attempts().last().filter(|a| a.outcome == Outcome::Candidate).and_then(|a| a.age);
    if let Some(age) = age {
        let headers = response.headers_mut();
        headers.insert("x-switchyard-cache", HeaderValue::from_static("stale"));
        headers.insert(header::AGE, HeaderValue::from(age.as_secs()));
    }
}

/// The response to a routing failure, in the exchange's dialect, with the trail.
pub(crate) fn route_failed(
    state: &AppState,
    exchange: &RequestContext,
    error: switchyard::RouteError,
) -> Response {
    // A model no route or target is named under no route (`(none)`, as a refused key's request
    // is); any other failure without one under the default route, which would have governed.
    let route: Arc<str> = match &error {
        switchyard::RouteError::UnknownModel { .. } => "".into(),
        _ => error.route().unwrap_or_else(|| exchange.live.router.default_route().name()).into(),
    };
    let api = ApiError::from_route(&error, exchange.live.router.health_settings());
    let status = api.status_in(exchange.dialect).as_u16();
    let attempts = error.trail().len();
    let mut response = api.into_response(exchange.dialect, &exchange.id);
    exchange.stamp(&mut response, None, attempts);
    exchange.finish_failure(state, (route, error.into_trail()), status, None);
    response
}
