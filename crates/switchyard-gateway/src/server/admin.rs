//! Health, readiness, metrics and admin endpoints.

use std::sync::Arc;

use axum::body::{Body, Bytes};
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};
use switchyard::Target;

use crate::drills::DrillError;
use crate::metrics::{Labels, labels};

use super::body::{BodyError, read};
use switchyard::chat::Dialect;

use super::auth::{admin_unauthorized, authorized, client_key};
use super::errors::ApiError;
use super::state::{AppState, Live};

/// Whether the request may use `/admin/*`: see [`admin_reader`].
pub(crate) fn admin_allowed(state: &AppState, headers: &HeaderMap) -> bool {
    admin_reader(state, headers).is_ok()
}

/// Who the request reads `/admin/*` as: the admin key (`Ok(None)`), or, without one
/// (`gateway.admin_key` unset), the client key it carries, by its label (`Ok(Some)`; `Ok(None)`
/// when no key is configured at all); `Err` when it may not.
pub(crate) fn admin_reader(state: &AppState, headers: &HeaderMap) -> Result<Option<Arc<str>>, ()> {
    let live = state.live();
    match &live.gateway.admin_key {
        Some(admin) => authorized(std::slice::from_ref(admin), headers).then_some(None).ok_or(()),
        None => client_key(&live.gateway.keys, headers).map(|key| key.map(|key| key.label.clone())),
    }
}

pub async fn ready(State(state): State<Arc<AppState>>) -> Response {
    let live = state.live();
    let routes: Vec<&str> = live.router.routes().map(|r| r.name()).collect();
    axum::Json(json!({ "status": "ready", "routes": routes })).into_response()
}

pub async fn metrics(State(state): State<Arc<AppState>>, headers: HeaderMap) -> Response {
    // Prometheus sends the admin key as `authorization: Bearer` (its scrape config's
    // `authorization` or `bearer_token_file`).
    let live = state.live();
    if live.guard_metrics && !admin_allowed(&state, &headers) {
        return admin_unauthorized(&headers).into_response(Dialect::OpenAi, "");
    }
    let snapshot = live.router.health();
    // Only targets of the configuration: names clients invent must not grow /metrics.
    let targets: Vec<_> = snapshot.targets.iter().filter(|t| live.is_listed(&t.target)).collect();
    let mut gauges = Vec::new();
    for target in &targets {
        for status in
            ["unknown", "available", "rate_limited", "exhausted", "temporarily_unavailable", "unauthorized"]
        {
            let value = if target.status.as_str() == status { 1.0 } else { 0.0 };
            gauges.push((
                "switchyard_target_health",
                "Health status of each target (1 for its current status).",
                labels([("target", target.target.shared().into()), ("status", status.into())]),
                value,
            ));
        }
    }
    for target in &targets {
        let value = match target.breaker {
            "open" => 2.0,
            "half_open" => 1.0,
            _ => 0.0,
        };
        gauges.push((
            "switchyard_breaker_state",
            "Circuit breaker of each target: 0 closed, 1 half-open, 2 open.",
            labels([("target", target.target.shared().into())]),
            value,
        ));
    }
    for (target, latency) in live.router.latencies() {
        if !live.is_listed(&target) {
            continue;
        }
        for (quantile, value) in [("0.5", latency.p50), ("0.95", latency.p95), ("0.99", latency.p99)] {
            gauges.push((
                "switchyard_target_latency_seconds",
                "Recent latency of each target (time to first content for streams, to the whole answer otherwise), by quantile.",
                labels([("target", target.shared().into()), ("quantile", quantile.into())]),
                value.as_secs_f64(),
            ));
        }
    }
    let (backend, up) = match &live.gateway.shared_state {
        Some(store) => ("redis", store.status().status == "ok"),
        None => ("memory", true),
    };
    gauges.push((
        "switchyard_shared_state_up",
        "Whether the shared state answers (1) or this replica runs on its own memory (0).",
        labels([("backend", backend.into())]),
        if up { 1.0 } else { 0.0 },
    ));
    if let Some(trails) = state.trails.get() {
        gauges.push((
            "switchyard_fleet_trails_lost",
            "Finished requests' trails not written to the fleet's Redis since start (its queue full, or Redis away longer than the 4,096 its backlog holds).",
            labels([]),
            trails.lost.load(std::sync::atomic::Ordering::Relaxed) as f64,
        ));
    }
    super::keys::read_spends(&state, &live).await;
    gauges.extend(super::keys::gauges(&state, &live));
    gauges.extend(process_gauges(&state));
    let text = state.metrics.render(&gauges);
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], text).into_response()
}

/// What dashboards expect of any server: the build, the requests in flight, and the process's
/// start, resident memory and open descriptors (the last two from `/proc`, where there is one).
fn process_gauges(state: &AppState) -> Vec<(&'static str, &'static str, Labels, f64)> {
    let started = state.started.duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    let mut gauges = vec![
        (
            "switchyard_build_info",
            "The running build, its version as a label (always 1).",
            labels([("version", env!("CARGO_PKG_VERSION").into())]),
            1.0,
        ),
        (
            "switchyard_requests_in_flight",
            "Requests begun and not yet answered in full (a stream until it ends).",
            labels([]),
            state.in_flight() as f64,
        ),
        (
            "process_start_time_seconds",
            "Start time of the process since the Unix epoch, in seconds.",
            labels([]),
            started.as_secs_f64(),
        ),
    ];
    let resident = std::fs::read_to_string("/proc/self/status").ok().and_then(|status| {
        let line = status.lines().find_map(|line| line.strip_prefix("VmRSS:"))?;
        line.trim().strip_suffix("kB")?.trim().parse::<f64>().ok()
    });
    if let Some(kib) = resident {
        gauges.push((
            "process_resident_memory_bytes",
            "Resident memory size in bytes.",
            labels([]),
            kib * 1024.0,
        ));
    }
    if let Ok(open) = std::fs::read_dir("/proc/self/fd") {
        gauges.push((
            "process_open_fds",
            "Number of open file descriptors.",
            labels([]),
            open.count() as f64,
        ));
    }
    gauges
}

pub async fn health(State(state): State<Arc<AppState>>, headers: HeaderMap) -> Response {
    if !admin_allowed(&state, &headers) {
        return admin_unauthorized(&headers).into_response(Dialect::OpenAi, "");
    }
    let live = state.live();
    let router = &live.router;
    let snapshot = router.health();
    let providers: Vec<Value> = router
        .provider_ids()
        .into_iter()
        .map(|id| {
            let credentials: Vec<Value> = router
                .credentials(id)
                .unwrap_or_default()
                .iter()
                .map(|c| json!({ "credential_id": c.id(), "key": c.masked() }))
                .collect();
            let mut provider = json!({ "id": id, "credentials": credentials });
            if let Some(drill) = live.gateway.drills.describe(id) {
                provider["kind"] = "simulated".into();
                provider["drill"] = drill;
            }
            provider
        })
        .collect();
    let latencies: std::collections::HashMap<_, _> = router.latencies().into_iter().collect();
    let (listed, omitted) = listed_targets(router, &snapshot.targets);
    let targets: Vec<Value> = listed
        .into_iter()
        .map(|target| {
            let mut value = serde_json::to_value(target).unwrap_or_default();
            if let Value::Object(object) = &mut value {
                object.insert("latency".to_owned(), json!(latencies.get(&target.target)));
            }
            value
        })
        .collect();
    let routes: Vec<Value> = router
        .routes()
        .map(|route| {
            let candidates: Vec<&str> = route.candidates().iter().map(|c| c.name().as_ref()).collect();
            json!({ "name": route.name(), "targets": route.all_targets(), "candidates": candidates })
        })
        .collect();
    axum::Json(json!({
        "routes": routes,
        "targets": targets,
        "targets_omitted": omitted,
        "credentials": snapshot.credentials,
        "providers": providers,
        "pacing": router.pacing(),
        "shared_state": shared_state(&live),
        "answer_caches": answer_caches(&live),
        "config": state.config().map(|life| life.to_json(&live)),
    }))
    .into_response()
}

/// The most targets outside the configuration `/admin/health` lists (named directly as
/// `provider:model`, or by a pattern route: what clients chose), the latest to change first.
const UNCONFIGURED_LISTED: usize = 100;

/// The targets `/admin/health` lists: every one a route names, then those clients named, at
/// most [`UNCONFIGURED_LISTED`] of them (the health store keeps up to 10,000: a client naming
/// made-up models made the answer megabytes long); and how many of those were left out.
fn listed_targets<'a>(
    router: &switchyard::Router,
    targets: &'a [switchyard::health::TargetHealth],
) -> (Vec<&'a switchyard::health::TargetHealth>, usize) {
    let configured: std::collections::HashSet<&switchyard::Target> =
        router.routes().flat_map(|route| route.all_targets()).collect();
    let (mut listed, mut others): (Vec<_>, Vec<_>) =
        targets.iter().partition(|health| configured.contains(&health.target));
    // The latest change first: a status held for less time is newer.
    others.sort_by_key(|health| health.since.unwrap_or(std::time::Duration::MAX));
    let omitted = others.len().saturating_sub(UNCONFIGURED_LISTED);
    listed.extend(others.into_iter().take(UNCONFIGURED_LISTED));
    (listed, omitted)
}

/// `POST /admin/config/reload`: reads the configuration file again and puts it in force when
/// it is good. Answers what changed (200), or every problem found (422) with the running
/// configuration left as it was.
pub async fn reload(State(state): State<Arc<AppState>>, headers: HeaderMap) -> Response {
    if !admin_allowed(&state, &headers) {
        return admin_unauthorized(&headers).into_response(Dialect::OpenAi, "");
    }
    let Some(life) = state.config().cloned() else {
        return ApiError::new(
            StatusCode::CONFLICT,
            "not_reloadable",
            "this gateway was not started by `switchyard serve`: it has no configuration to read again",
        )
        .into_response(Dialect::OpenAi, "");
    };
    // Reading and building blocks: off the serving thread.
    let reloading = state.clone();
    let outcome =
        tokio::task::spawn_blocking(move || life.reload(&reloading, crate::reload::Trigger::Admin)).await;
    match outcome {
        Ok(outcome) => {
            let status = match outcome {
                crate::reload::Outcome::Rejected { .. } => StatusCode::UNPROCESSABLE_ENTITY,
                _ => StatusCode::OK,
            };
            (status, axum::Json(outcome.to_json())).into_response()
        }
        Err(_) => ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "internal", "the reload did not finish")
            .into_response(Dialect::OpenAi, ""),
    }
}

pub async fn reset(State(state): State<Arc<AppState>>, headers: HeaderMap, body: Body) -> Response {
    if !admin_allowed(&state, &headers) {
        return admin_unauthorized(&headers).into_response(Dialect::OpenAi, "");
    }
    // Read only after the key is checked: an unauthorized client must not hold a connection
    // by trickling a body in.
    let body = match small_body(&state, body, "the body must be a small JSON object or empty").await {
        Ok(body) => body,
        Err(refused) => return refused,
    };
    let target = if body.iter().all(u8::is_ascii_whitespace) {
        None
    } else {
        match serde_json::from_slice::<Value>(&body) {
            Ok(Value::Object(map)) if map.is_empty() => None,
            Ok(Value::Object(map)) => match map.get("target").and_then(Value::as_str) {
                Some(text) => match text.parse::<Target>() {
                    Ok(target) => Some(target),
                    Err(error) => return bad_request(error.to_string()),
                },
                None => {
                    return bad_request(
                        "give `{\"target\": \"provider:model\"}`, or an empty body to reset everything"
                            .to_owned(),
                    );
                }
            },
            _ => return bad_request("the body must be a JSON object or empty".to_owned()),
        }
    };
    let live = state.live();
    match target {
        Some(target) => match live.router.reset(&target) {
            Ok(()) => axum::Json(json!({ "reset": target.to_string(), "applies_to": fleet_reach(&live) }))
                .into_response(),
            Err(_) => {
                let known = live.router.provider_ids().join(", ");
                let message = format!(
                    "unknown target `{target}`: no provider `{}` is configured (configured: {known})",
                    target.provider()
                );
                ApiError::new(StatusCode::NOT_FOUND, "unknown_target", message)
                    .into_response(Dialect::OpenAi, "")
            }
        },
        None => {
            live.router.reset_all();
            axum::Json(json!({ "reset": "all", "applies_to": fleet_reach(&live) })).into_response()
        }
    }
}

/// `shared_state` of `/admin/health`: the backend, whether it answers, and the fleet.
fn shared_state(live: &Live) -> Value {
    match &live.gateway.shared_state {
        Some(store) => serde_json::to_value(store.status()).unwrap_or(Value::Null),
        None => json!({ "backend": "memory", "status": "ok" }),
    }
}

/// What a reset tells the operator about the rest of the fleet.
fn fleet_reach(live: &Live) -> &'static str {
    match &live.gateway.shared_state {
        None => "this replica",
        Some(store) if store.status().status == "ok" => "every replica",
        Some(_) => "this replica now; every replica once Redis answers",
    }
}

pub(super) fn bad_request(message: String) -> Response {
    ApiError::new(StatusCode::BAD_REQUEST, "invalid_request", message).into_response(Dialect::OpenAi, "")
}

/// An admin request's body (64 KiB at most), held to `gateway.body_timeout` as every body is;
/// any other failure is answered `refusal`.
async fn small_body(state: &AppState, body: Body, refusal: &str) -> Result<Bytes, Response> {
    match read(body, 64 * 1024, state.live().gateway.connections.body_timeout).await {
        Ok(bytes) => Ok(bytes),
        Err(error @ BodyError::Stalled { .. }) => {
            Err(super::lifecycle::stalled(&error).into_response(Dialect::OpenAi, ""))
        }
        Err(_) => Err(bad_request(refusal.to_owned())),
    }
}

/// `POST /admin/simulated/{provider}`: a fault drill on a simulated provider.
pub async fn drill(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    Path(provider): Path<String>,
    body: Body,
) -> Response {
    if !admin_allowed(&state, &headers) {
        return admin_unauthorized(&headers).into_response(Dialect::OpenAi, "");
    }
    let body = match small_body(&state, body, "the body must be a small JSON object").await {
        Ok(body) => body,
        Err(refused) => return refused,
    };
    match state.live().gateway.drills.apply(&provider, &body) {
        Ok(drill) => {
            tracing::info!(provider = %provider, drill = %drill, "fault drill");
            axum::Json(json!({ "provider": provider, "drill": drill })).into_response()
        }
        Err(error @ DrillError::Unknown(_)) => {
            ApiError::new(StatusCode::NOT_FOUND, "unknown_provider", error.to_string())
                .into_response(Dialect::OpenAi, "")
        }
        Err(error @ DrillError::NotSimulated { .. }) => {
            ApiError::new(StatusCode::CONFLICT, "not_simulated", error.to_string())
                .into_response(Dialect::OpenAi, "")
        }
        Err(DrillError::Invalid(message)) => bad_request(message),
    }
}

/// What each route's `cache` candidates keep: entries and bytes.
fn answer_caches(live: &Live) -> Vec<Value> {
    live.router
        .routes()
        .flat_map(|route| {
            route.candidates().iter().filter_map(move |candidate| {
                let (entries, bytes) = candidate.answer_cache()?.usage();
                Some(json!({ "route": route.name(), "candidate": candidate.name().as_ref(), "entries": entries, "bytes": bytes }))
            })
        })
        .collect()
}
