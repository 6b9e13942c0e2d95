//! Client keys at the door: a request's key admits it or refuses it (`model_not_allowed`,
//! `key_rate_limited`, `budget_exceeded`) before any provider is called, and what its answer
//! used is charged to the key as it ends. `/admin/keys` shows each key's usage and budget.

use std::sync::Arc;

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::json;
use switchyard::chat::Dialect;

use super::auth::admin_unauthorized;
use super::errors::ApiError;
use super::finished::Ending;
use super::request::RequestContext;
use super::state::{AppState, Live};
use crate::keys::{ClientKey, Limit, Refusal, Shared};

/// The fleet's Redis as keys count through it, when there is one.
pub(crate) fn shared<'a>(state: &'a AppState, live: &'a Live) -> Shared<'a> {
    Shared { store: live.gateway.shared_state.as_ref(), spend: state.spend.as_ref() }
}

impl RequestContext {
    /// Admits the request for `model` by its key (none configured: every request), holding
    /// its place among the key's requests in flight until it ends.
    pub(crate) async fn admit(&mut self, state: &AppState, model: &str) -> Result<(), ApiError> {
        let Some(key) = self.key.clone() else { return Ok(()) };
        // A token count costs nothing and providers limit it apart from generation: Claude Code
        // counts dozens of times a session, which would spend a developer's requests per
        // minute. It is held to the key's models and requests in flight.
        let admitted = match self.endpoint {
            "count_tokens" => key.admit_count(model, &self.live.router, shared(state, &self.live)),
            _ => key.admit(model, &self.live.router, shared(state, &self.live)).await,
        };
        match admitted {
            Ok(pass) => {
                *self.progress.pass.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = Some(pass);
                Ok(())
            }
            Err(refusal) => Err(refused(&key, model, refusal)),
        }
    }

    /// Charges what the request's answer used to its key: tokens to its rate, the cost to
    /// its budget. A refused or failed request used nothing; one its client left is charged
    /// what its providers bill at the least (what a stream delivered, a call's prompt).
    pub(crate) fn charge(&self, state: &AppState, ending: &Ending<'_>) {
        // Taken: its place among the key's requests in flight is given back as it is logged.
        let pass = self.progress.pass.lock().unwrap_or_else(std::sync::PoisonError::into_inner).take();
        let (Some(pass), Some(settled)) = (pass, &ending.settled) else { return };
        let tokens = settled.usage.map_or(0, |u| u64::from(u.prompt_tokens) + u64::from(u.completion_tokens));
        pass.charge(tokens, settled.cost, shared(state, &self.live));
    }
}

/// Dollars as a budget's refusal says them: to the cent from a dollar on, else to the
/// micro-dollar, without trailing zeros (`30.00`, `0.00054`).
fn dollars(usd: f64) -> String {
    if usd >= 1.0 {
        return format!("{usd:.2}");
    }
    let fine = format!("{usd:.6}");
    let trimmed = fine.trim_end_matches('0');
    trimmed.strip_suffix('.').unwrap_or(trimmed).to_owned()
}

/// The answer to a request its key refused.
fn refused(key: &ClientKey, model: &str, refusal: Refusal) -> ApiError {
    let name = &key.label;
    match refusal {
        Refusal::NotAllowed { routes } => ApiError::new(
            StatusCode::FORBIDDEN,
            "model_not_allowed",
            format!(
                "the key `{name}` may not use `{}`: it may use {}",
                switchyard::said_back(model),
                routes.join(", ")
            ),
        ),
        Refusal::RateLimited { retry_after, limit } => {
            let wait = retry_after.as_secs_f64().ceil().max(1.0);
            let value = key.rules.limits.of(limit).unwrap_or_default();
            let over = match limit {
                Limit::MaxConcurrent => format!("has its max_concurrent of {value} requests in flight"),
                Limit::RequestsPerMinute | Limit::TokensPerMinute => {
                    format!("is over its {} of {value}", limit.key())
                }
            };
            let mut error = ApiError::new(
                StatusCode::TOO_MANY_REQUESTS,
                "key_rate_limited",
                format!("the key `{name}` {over}: retry after {wait}s"),
            );
            error.retry_after = Some(retry_after);
            error
        }
        Refusal::Budget { spent, usd, per, resets } => {
            // No Retry-After: a client that honours it would sleep until the period resets
            // (Codex did, for hours); the reset is in the message.
            let mut error = ApiError::new(
                StatusCode::TOO_MANY_REQUESTS,
                "budget_exceeded",
                format!(
                    "the key `{name}` spent ${} of its ${usd} budget for the {}: it resets at {}",
                    dollars(spent),
                    per.as_str(),
                    crate::logging::rfc3339(resets)
                ),
            );
            error.spent = true;
            error
        }
    }
}

/// One gauge of `/metrics`: its family, help, labels and value.
type Gauge = (&'static str, &'static str, crate::metrics::Labels, f64);

/// Reads the fleet's spend of every key with a budget, when a read is due, before it is shown.
pub(crate) async fn read_spends(state: &AppState, live: &Live) {
    let shared = shared(state, live);
    futures_util::future::join_all(live.gateway.keys.iter().map(|key| key.read_spend(shared))).await;
}

/// The spend and budget of each key with a budget, for `/metrics`.
pub(crate) fn gauges(state: &AppState, live: &Live) -> Vec<Gauge> {
    let shared = shared(state, live);
    let mut gauges = Vec::new();
    for key in live.gateway.keys.iter() {
        let (Some(budget), Some(spent)) = (key.rules.budget, key.spent(shared)) else { continue };
        let label =
            || crate::metrics::labels([("key", crate::metrics::LabelValue::Shared(key.label.clone()))]);
        gauges.push((
            "switchyard_key_spend_usd",
            "What each client key spent in its budget's period (the fleet's, with shared state), in US dollars.",
            label(),
            spent,
        ));
        gauges.push((
            "switchyard_key_budget_usd",
            "Each client key's budget per period, in US dollars.",
            label(),
            budget.usd,
        ));
    }
    gauges
}

/// `GET /admin/keys`: each key's name, rules, usage this minute, requests in flight, spend,
/// remaining budget and its reset. Never a key.
pub async fn list(State(state): State<Arc<AppState>>, headers: HeaderMap) -> Response {
    if !super::admin::admin_allowed(&state, &headers) {
        return admin_unauthorized(&headers).into_response(Dialect::OpenAi, "");
    }
    let live = state.live();
    read_spends(&state, &live).await;
    let shared = shared(&state, &live);
    let keys: Vec<_> = live.gateway.keys.iter().map(|key| key.view(shared)).collect();
    let fleet = shared.store.is_some();
    axum::Json(json!({ "keys": keys, "shared": fleet })).into_response()
}
