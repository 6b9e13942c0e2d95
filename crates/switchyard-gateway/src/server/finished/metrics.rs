//! The metrics of a finished request: requests, durations, attempts, fallbacks, hedges,
//! retries, stale answers, pacing's queue and the gateway's overhead; and the families' help.

use switchyard::trail::{Outcome, Trail, Via};

use crate::metrics::{LabelValue, Metrics, labels};
use crate::server::AppState;
use crate::server::state::Live;

use super::{FinishedRequest, Settled};

/// Counts `done` in every family it belongs to.
pub(crate) fn record(state: &AppState, done: &FinishedRequest<'_>) {
    let metrics = &state.metrics;
    let route = if done.route.is_empty() {
        LabelValue::Static("(none)")
    } else {
        LabelValue::Shared(done.route.clone())
    };
    metrics.increment(
        "switchyard_requests_total",
        labels([
            ("endpoint", done.endpoint.into()),
            ("route", route.clone()),
            ("status", status_label(done.status)),
        ]),
        1,
    );
    // A request refused at the door (its key's limit, budget or models) is counted under the
    // route it asked for, but its instant answer is no time of that route's.
    if done.settled.is_some() || done.route.is_empty() {
        metrics.observe(
            "switchyard_request_duration_seconds",
            labels([("route", route.clone())]),
            done.elapsed.as_secs_f64(),
        );
    }
    if let Some(key) = &done.key {
        metrics.increment(
            "switchyard_key_requests_total",
            labels([("key", LabelValue::Shared(key.clone()))]),
            1,
        );
    }
    let Some(Settled { trail, timing, cost, .. }) = &done.settled else { return };
    if let (Some(key), Some(cost)) = (&done.key, cost) {
        // Every key's, a budget or none: what each team spends, where the operator looks.
        metrics.add("switchyard_key_cost_total", labels([("key", LabelValue::Shared(key.clone()))]), *cost);
    }
    attempts(state, done.live, trail, &done.route);
    if let Some(first_token) = timing.first_token {
        metrics.observe(
            "switchyard_time_to_first_token_seconds",
            labels([("route", route.clone())]),
            first_token.as_secs_f64(),
        );
    }
    routing(metrics, &route, trail, done.served_by);
    if !timing.queued.is_zero() {
        metrics.observe("switchyard_queued_seconds", labels([("route", route)]), timing.queued.as_secs_f64());
    }
    metrics.observe("switchyard_overhead_seconds", labels([]), done.overhead().as_secs_f64());
}

/// Each attempt, by target, outcome and error kind; the unreadable events its stream skipped.
fn attempts(state: &AppState, live: &Live, trail: &Trail, route: &str) {
    for attempt in trail {
        if attempt.skipped_events > 0 {
            state.metrics.increment(
                "switchyard_stream_events_skipped_total",
                labels([("target", live.target_label(&attempt.via, route))]),
                u64::from(attempt.skipped_events),
            );
        }
        state.metrics.increment(
            "switchyard_attempts_total",
            labels([
                ("target", live.target_label(&attempt.via, route)),
                ("outcome", attempt.outcome.as_str().into()),
                ("error_kind", attempt.error_kind().map_or("", |k| k.as_str()).into()),
            ]),
            1,
        );
    }
}

/// The per-route counters an operator alerts on, born at 0 for each route of `router`, so that
/// `increase()` sees a route's first fallback, retry or stale answer (a series that appears at
/// 1 loses it); at start, and for the routes a reload adds.
pub(crate) fn born_at_zero(metrics: &Metrics, router: &switchyard::Router) {
    for route in router.routes() {
        let by_route = || labels([("route", LabelValue::from(route.name().to_owned()))]);
        for family in
            ["switchyard_fallbacks_total", "switchyard_retries_total", "switchyard_stale_answers_total"]
        {
            metrics.increment(family, by_route(), 0);
        }
        if route.hedge().is_some() {
            for result in ["started", "won"] {
                let labels =
                    labels([("route", LabelValue::from(route.name().to_owned())), ("result", result.into())]);
                metrics.increment("switchyard_hedges_total", labels, 0);
            }
        }
    }
}

/// What the router did for the request: a fallback, a stale answer, a hedge, retries.
fn routing(metrics: &Metrics, route: &LabelValue, trail: &Trail, served_by: Option<&Via>) {
    let by_route = || labels([("route", route.clone())]);
    if trail.fell_back_to(served_by) {
        metrics.increment("switchyard_fallbacks_total", by_route(), 1);
    }
    if trail.attempts().last().is_some_and(|a| a.outcome == Outcome::Candidate && a.age.is_some()) {
        metrics.increment("switchyard_stale_answers_total", by_route(), 1);
    }
    if trail.attempts().iter().any(|a| a.hedge) {
        metrics.increment(
            "switchyard_hedges_total",
            labels([("route", route.clone()), ("result", "started".into())]),
            1,
        );
        if trail.attempts().iter().any(|a| a.hedge && a.outcome == Outcome::Ok) {
            metrics.increment(
                "switchyard_hedges_total",
                labels([("route", route.clone()), ("result", "won".into())]),
                1,
            );
        }
    }
    let retries = trail.retries();
    if retries > 0 {
        metrics.increment("switchyard_retries_total", by_route(), retries as u64);
    }
}

/// Counts the tokens and the cost of an answer a target gave.
pub(crate) fn usage(
    state: &AppState,
    live: &Live,
    (served_by, route): (&Via, &str),
    usage: Option<switchyard::chat::Usage>,
    cost: Option<f64>,
) {
    if !matches!(served_by, Via::Target(_)) {
        return;
    }
    let target = live.target_label(served_by, route);
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

/// The help of every family the gateway counts.
pub(crate) fn describe(metrics: &Metrics) {
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
    metrics.describe(
        "switchyard_stream_events_skipped_total",
        "Unreadable events of a provider's stream skipped (the stream went on), by target.",
    );
    metrics.describe("switchyard_cost_total", "Cost at the configured prices, by target.");
    metrics.describe(
        "switchyard_key_cost_total",
        "Cost at the configured prices by client key (its name, or a label of its hash), a budget or none.",
    );
    metrics.describe(
        "switchyard_key_requests_total",
        "Requests by client key (its name, or a label of its hash), refused ones included.",
    );
    metrics.describe(
        "switchyard_config_reloads_total",
        "Configuration reloads, by result: reloaded, unchanged (the same file), rejected (the running one stays).",
    );
    // Born at 0, so that `increase()` sees the first reload (the first rejected one above all).
    for result in ["reloaded", "unchanged", "rejected"] {
        metrics.increment("switchyard_config_reloads_total", labels([("result", result.into())]), 0);
    }
}
