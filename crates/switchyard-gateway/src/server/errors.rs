//! Errors as clients see them: in their own dialect, with the trail.

use std::time::Duration;

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};
use switchyard::health::HealthSettings;
use switchyard::trail::{Attempt, Outcome};
use switchyard::{ErrorKind, ProviderError, RouteError};

use switchyard::chat::Dialect;

/// An error response: status, a machine code, a message for people, and the trail when one
/// exists.
#[derive(Debug)]
pub struct ApiError {
    /// The HTTP status.
    pub status: StatusCode,
    /// `invalid_json`, `all_targets_failed`, `rate_limited`, ...
    pub code: String,
    /// What happened, for people.
    pub message: String,
    /// The trail, when the request was routed.
    pub attempts: Option<Box<Value>>,
    /// The `Retry-After` to send.
    pub retry_after: Option<Duration>,
    /// The connection closes after this answer (`connection: close`): what remains of the
    /// request on it cannot be told from a next one.
    pub close: bool,
    /// A limit that no wait of a client's lifts (a spent budget): said as OpenAI says a spent
    /// quota (`type: insufficient_quota`), and `x-should-retry: false`, which the OpenAI SDKs
    /// read, so that a client stops rather than retries or sleeps until the period resets.
    pub spent: bool,
    /// Asking again at once would meet the same end (the route's deadline passed):
    /// `x-should-retry: false`, which the OpenAI and Anthropic SDKs read.
    pub final_answer: bool,
}

impl ApiError {
    /// An error of `status`, machine code `code` and `message`.
    pub fn new(status: StatusCode, code: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            status,
            code: code.into(),
            message: message.into(),
            attempts: None,
            retry_after: None,
            close: false,
            spent: false,
            final_answer: false,
        }
    }

    /// The same error, answered with `connection: close`.
    pub fn closing(self) -> Self {
        Self { close: true, ..self }
    }

    /// The response for a routing failure: 429 when every attempt was rate limited or
    /// exhausted (with the Retry-After of the soonest key's rest, as `health` rests it; a spent
    /// quota when none was merely rate limited), 504 when every attempt timed out, 502
    /// otherwise; an error the route does not fall back on keeps its own status.
    pub fn from_route(error: &RouteError, health: &HealthSettings) -> Self {
        let attempts = serde_json::to_value(error.trail()).ok().map(Box::new);
        match error {
            RouteError::UnknownModel { .. } => {
                Self::new(StatusCode::NOT_FOUND, "model_not_found", error.to_string())
            }
            RouteError::Upstream { error: upstream, .. } => Self {
                attempts,
                // A provider's wait, no longer than the gateway rests a key for a rate limit:
                // a provider's day is not a wait to pass on to a client.
                retry_after: match upstream.kind() {
                    ErrorKind::QuotaExceeded => None,
                    _ => upstream.retry_after().map(|wait| wait.min(health.longest_rate_limit_rest())),
                },
                ..Self::passed_on(upstream, error.to_string())
            },
            RouteError::AllTargetsFailed { trail, .. } => {
                let (status, retry_after) = all_failed_status(trail.attempts(), health);
                Self {
                    status,
                    code: "all_targets_failed".to_owned(),
                    message: error.to_string(),
                    attempts,
                    retry_after,
                    close: false,
                    // Every key spent: a client that asked again, or slept on a Retry-After,
                    // would meet the same until an operator or the quota's reset acts.
                    spent: status == StatusCode::TOO_MANY_REQUESTS && retry_after.is_none(),
                    // The route's deadline passed: an SDK asking again would wait it out again.
                    final_answer: trail.out_of_time(),
                }
            }
        }
    }

    /// A provider's failure passed on as it is: its status, OpenAI's code for it, and a spent
    /// quota said as one (before the answer began, or in a stream's error event after).
    fn passed_on(error: &ProviderError, message: String) -> Self {
        Self {
            spent: error.kind() == ErrorKind::QuotaExceeded,
            ..Self::new(upstream_status(error), openai_code(error.kind()), message)
        }
    }

    /// The error in a dialect's JSON shape.
    pub fn body(&self, dialect: Dialect, request_id: &str) -> Value {
        let mut switchyard = serde_json::Map::new();
        // An answer given before the request had an id (an unknown path, an admin refusal)
        // names none, rather than an empty one.
        if !request_id.is_empty() {
            switchyard.insert("request_id".into(), request_id.into());
        }
        switchyard.insert("attempts".into(), self.attempts.as_deref().cloned().unwrap_or_else(|| json!([])));
        match dialect {
            Dialect::Anthropic => json!({
                "type": "error",
                "error": { "type": anthropic_type(self.status), "message": self.message },
                "switchyard": switchyard,
            }),
            // The Responses API writes its errors as Chat Completions does; no client speaks
            // Gemini's dialect to the gateway.
            Dialect::OpenAi | Dialect::Responses | Dialect::Gemini => json!({
                "error": {
                    "message": self.message,
                    "type": if self.spent { "insufficient_quota" } else { openai_type(self.status) },
                    "code": self.code,
                    "param": null,
                },
                "switchyard": switchyard,
            }),
        }
    }

    /// The status a client of `dialect` is answered with: 529 (overloaded) is Anthropic's,
    /// and clients of other dialects know 503.
    pub fn status_in(&self, dialect: Dialect) -> StatusCode {
        match self.status.as_u16() == 529 && dialect != Dialect::Anthropic {
            true => StatusCode::SERVICE_UNAVAILABLE,
            false => self.status,
        }
    }

    /// The error as a response in `dialect`, for request `request_id`.
    pub fn into_response(self, dialect: Dialect, request_id: &str) -> Response {
        let body = self.body(dialect, request_id);
        let mut response = (self.status_in(dialect), axum::Json(body)).into_response();
        if let Some(retry_after) = self.retry_after {
            let seconds = retry_after.as_secs_f64().ceil().max(1.0) as u64;
            if let Ok(value) = HeaderValue::from_str(&seconds.to_string()) {
                response.headers_mut().insert("retry-after", value);
            }
        }
        if self.close {
            response.headers_mut().insert(header::CONNECTION, HeaderValue::from_static("close"));
        }
        if self.spent || self.final_answer {
            response.headers_mut().insert("x-should-retry", HeaderValue::from_static("false"));
        }
        response
    }
}

fn upstream_status(error: &ProviderError) -> StatusCode {
    if let Some(status) = error.status().filter(|s| *s >= 400).and_then(|s| StatusCode::from_u16(s).ok()) {
        // A 529 stays one: an Anthropic client's SDK reads it as overloaded (`into_response`
        // tells other dialects' clients 503).
        return status;
    }
    if overloaded(error) {
        return overloaded_status();
    }
    match error.kind() {
        ErrorKind::RateLimited | ErrorKind::QuotaExceeded => StatusCode::TOO_MANY_REQUESTS,
        ErrorKind::Timeout => StatusCode::GATEWAY_TIMEOUT,
        ErrorKind::Auth => StatusCode::UNAUTHORIZED,
        ErrorKind::ModelNotFound => StatusCode::NOT_FOUND,
        ErrorKind::ContextLength | ErrorKind::InvalidRequest | ErrorKind::ContentFiltered => {
            StatusCode::BAD_REQUEST
        }
        ErrorKind::SchemaViolation => StatusCode::UNPROCESSABLE_ENTITY,
        ErrorKind::Cancelled => StatusCode::from_u16(499).unwrap_or(StatusCode::BAD_REQUEST),
        ErrorKind::Transport | ErrorKind::Unavailable | ErrorKind::MalformedResponse => {
            StatusCode::BAD_GATEWAY
        }
    }
}

/// The code an OpenAI-dialect client reads for a provider's failure of `kind` passed on as it
/// is: OpenAI's own where it has one (Codex compacts its conversation on
/// `context_length_exceeded`, and stops on `insufficient_quota`), else the kind's name (never
/// `invalid_api_key` for a provider's key refused: the client would take its own key for it).
fn openai_code(kind: ErrorKind) -> &'static str {
    match kind {
        ErrorKind::ContextLength => "context_length_exceeded",
        ErrorKind::RateLimited => "rate_limit_exceeded",
        ErrorKind::QuotaExceeded => "insufficient_quota",
        ErrorKind::ContentFiltered => "content_policy_violation",
        other => other.as_str(),
    }
}

/// The status of an all-targets-failed error, from the attempts that say something: calls
/// that failed, and targets skipped as exhausted. Skips for health say nothing new. When every
/// one was rate limited or spent, a 429: its Retry-After the soonest any key that was only
/// rate limited rests (`health`'s rest after a rate limit), none when every one is spent.
fn all_failed_status(attempts: &[Attempt], health: &HealthSettings) -> (StatusCode, Option<Duration>) {
    // A target that could not take the request (an image its API cannot carry) says nothing
    // of why the others failed: rate-limited elsewhere, the request is still a 429.
    let telling: Vec<&Attempt> = attempts
        .iter()
        .filter(|a| a.target().is_some() && !a.unsupported())
        .filter(|a| a.error.is_some() || a.outcome == Outcome::SkippedExhausted)
        .collect();
    if telling.is_empty() {
        return (StatusCode::BAD_GATEWAY, None);
    }
    let limited = telling.iter().all(|a| {
        a.outcome == Outcome::SkippedExhausted
            || matches!(a.error_kind(), Some(ErrorKind::RateLimited | ErrorKind::QuotaExceeded))
    });
    if limited {
        let rests = telling.iter().filter(|a| a.error_kind() == Some(ErrorKind::RateLimited));
        let soonest = rests
            .map(|a| health.rest_after_rate_limit(a.error.as_ref().and_then(ProviderError::retry_after)))
            .min();
        return (StatusCode::TOO_MANY_REQUESTS, soonest);
    }
    if telling.iter().all(|a| a.error_kind() == Some(ErrorKind::Timeout)) {
        return (StatusCode::GATEWAY_TIMEOUT, None);
    }
    // Every target overloaded (Anthropic's 529 `overloaded_error`): said so, for the clients
    // that act on it (Claude Code's `--fallback-model`).
    if telling.iter().all(|a| a.error.as_ref().is_some_and(overloaded)) {
        return (overloaded_status(), None);
    }
    (StatusCode::BAD_GATEWAY, None)
}

/// Whether `error` is a provider's overload: Anthropic's 529, or its `overloaded_error` in a
/// stream.
fn overloaded(error: &ProviderError) -> bool {
    error.status() == Some(529) || error.code() == Some("overloaded_error")
}

/// 529, Anthropic's status of an overload.
fn overloaded_status() -> StatusCode {
    StatusCode::from_u16(529).unwrap_or(StatusCode::SERVICE_UNAVAILABLE)
}

fn openai_type(status: StatusCode) -> &'static str {
    match status.as_u16() {
        401 => "authentication_error",
        403 => "permission_error",
        404 => "invalid_request_error",
        429 => "rate_limit_error",
        400..=499 => "invalid_request_error",
        504 => "timeout_error",
        _ => "server_error",
    }
}

fn anthropic_type(status: StatusCode) -> &'static str {
    match status.as_u16() {
        401 => "authentication_error",
        403 => "permission_error",
        404 => "not_found_error",
        413 => "request_too_large",
        429 => "rate_limit_error",
        400..=499 => "invalid_request_error",
        503 | 529 => "overloaded_error",
        504 => "timeout_error",
        _ => "api_error",
    }
}

/// The error event a stream ends with, in a dialect's shape.
pub fn stream_error_event(
    dialect: Dialect,
    error: &ProviderError,
    request_id: &str,
    attempts: Value,
) -> Value {
    let message = format!("the stream failed after content was sent: {error}");
    let api = ApiError { attempts: Some(Box::new(attempts)), ..ApiError::passed_on(error, message) };
    api.body(dialect, request_id)
}

#[cfg(test)]
mod tests {
    use super::*;
    use switchyard::Target;
    use switchyard::credential::CredentialId;

    fn failed(target: &str, error: ProviderError, outcome: Outcome) -> Attempt {
        let target: Target = target.parse().unwrap();
        let id = CredentialId::derive("openai", "http://127.0.0.1", None);
        let mut attempt =
            Attempt::called(&target, &id, Duration::ZERO, Duration::ZERO, Duration::ZERO).failed(error);
        attempt.outcome = outcome;
        attempt
    }

    #[test]
    fn every_target_overloaded_is_a_529_to_an_anthropic_client_and_a_503_to_others() {
        let overloaded = ProviderError::new(ErrorKind::Unavailable, "Overloaded")
            .with_status(529)
            .with_code("overloaded_error");
        let in_stream =
            ProviderError::new(ErrorKind::Unavailable, "Overloaded").with_code("overloaded_error");
        let attempts =
            [failed("a:m", overloaded, Outcome::Failed), failed("b:m", in_stream.clone(), Outcome::Failed)];
        let (status, _) = all_failed_status(&attempts, &HealthSettings::default());
        assert_eq!(status.as_u16(), 529);
        let error = ApiError::new(status, "all_targets_failed", "every target is overloaded");
        assert_eq!(error.status_in(Dialect::Anthropic).as_u16(), 529);
        assert_eq!(error.body(Dialect::Anthropic, "req")["error"]["type"], "overloaded_error");
        assert_eq!(error.status_in(Dialect::OpenAi).as_u16(), 503);
        // An overload in a stream's error event keeps its type too.
        let event = stream_error_event(Dialect::Anthropic, &in_stream, "req", json!([]));
        assert_eq!(event["error"]["type"], "overloaded_error");
        // One target down otherwise is a plain 502.
        let down = ProviderError::new(ErrorKind::Unavailable, "down").with_status(500);
        let mixed = [attempts[0].clone(), failed("c:m", down, Outcome::Failed)];
        assert_eq!(all_failed_status(&mixed, &HealthSettings::default()).0, StatusCode::BAD_GATEWAY);
    }

    #[test]
    fn a_request_whose_deadline_passed_is_not_asked_again_by_the_sdks() {
        let timeout = ProviderError::new(ErrorKind::Timeout, "request deadline passed after 3s of waiting");
        let mut attempt = failed("a:m", timeout, Outcome::Failed);
        attempt.note = Some(switchyard::trail::DEADLINE_PASSED.to_owned());
        let error = RouteError::AllTargetsFailed {
            trail: std::iter::once(attempt).collect(),
            last: None,
            route: "default".into(),
        };
        let api = ApiError::from_route(&error, &HealthSettings::default());
        assert_eq!(api.status, StatusCode::GATEWAY_TIMEOUT);
        assert_eq!(api.body(Dialect::OpenAi, "req")["error"]["type"], "timeout_error", "not a spent quota");
        let response = api.into_response(Dialect::OpenAi, "req");
        assert_eq!(response.headers()["x-should-retry"], "false");
    }

    #[test]
    fn a_target_that_could_not_take_the_request_leaves_a_rate_limit_a_429() {
        let limited = ProviderError::new(ErrorKind::RateLimited, "slow down")
            .with_status(429)
            .with_retry_after(Duration::from_secs(30));
        let attempts = [
            failed("ant:claude", limited, Outcome::Failed),
            failed(
                "oai:gpt",
                ProviderError::unsupported("does not count tokens"),
                Outcome::SkippedUnsupported,
            ),
        ];
        assert_eq!(
            all_failed_status(&attempts, &HealthSettings::default()),
            (StatusCode::TOO_MANY_REQUESTS, Some(Duration::from_secs(30)))
        );
        let outage = ProviderError::new(ErrorKind::Unavailable, "down").with_status(503);
        let attempts = [attempts[0].clone(), failed("b:m", outage, Outcome::Failed)];
        assert_eq!(all_failed_status(&attempts, &HealthSettings::default()).0, StatusCode::BAD_GATEWAY);
    }

    fn all_failed(attempts: Vec<Attempt>) -> ApiError {
        let error = RouteError::AllTargetsFailed {
            trail: attempts.into_iter().collect(),
            last: None,
            route: "default".into(),
        };
        let health =
            HealthSettings { cooldown_on_rate_limit: Duration::from_secs(7), ..HealthSettings::default() };
        ApiError::from_route(&error, &health)
    }

    #[test]
    fn a_rate_limit_without_a_wait_is_told_the_keys_rest_not_a_second() {
        // The gateway rests the key 7 s (`cooldown_on_rate_limit`): a client told 1 s asks again
        // into the rest, and its retries stack on the gateway's.
        let bare = ProviderError::new(ErrorKind::RateLimited, "slow down").with_status(429);
        let api = all_failed(vec![failed("a:m", bare.clone(), Outcome::Failed)]);
        assert_eq!(
            (api.status, api.retry_after),
            (StatusCode::TOO_MANY_REQUESTS, Some(Duration::from_secs(7)))
        );
        assert!(!api.spent);
        // The soonest of two keys' rests, a provider's longer wait counted as it asked.
        let waits = bare.clone().with_retry_after(Duration::from_secs(20));
        let api =
            all_failed(vec![failed("a:m", waits, Outcome::Failed), failed("b:m", bare, Outcome::Failed)]);
        assert_eq!(api.retry_after, Some(Duration::from_secs(7)));
    }

    #[test]
    fn every_key_spent_is_a_spent_quota_with_no_wait_to_sleep_on() {
        let spent = ProviderError::new(ErrorKind::QuotaExceeded, "You exceeded your current quota")
            .with_status(429)
            .with_retry_after(Duration::from_secs(1));
        let skipped = failed(
            "b:m",
            ProviderError::new(ErrorKind::QuotaExceeded, "exhausted"),
            Outcome::SkippedExhausted,
        );
        let api = all_failed(vec![failed("a:m", spent, Outcome::Failed), skipped]);
        assert_eq!((api.status, api.retry_after, api.spent), (StatusCode::TOO_MANY_REQUESTS, None, true));
        assert_eq!(api.body(Dialect::OpenAi, "req")["error"]["type"], "insufficient_quota");
        let response = api.into_response(Dialect::OpenAi, "req");
        assert_eq!(response.headers()["x-should-retry"], "false");
        assert!(response.headers().get("retry-after").is_none());
    }

    #[test]
    fn a_providers_failure_passed_on_carries_openais_code_to_an_openai_client() {
        let passed = |kind: ErrorKind| {
            let error = RouteError::Upstream {
                error: ProviderError::new(kind, "said").with_status(400),
                trail: Default::default(),
                route: "default".into(),
            };
            ApiError::from_route(&error, &HealthSettings::default()).body(Dialect::OpenAi, "req")["error"]["code"].clone()
        };
        assert_eq!(passed(ErrorKind::ContextLength), "context_length_exceeded");
        assert_eq!(passed(ErrorKind::ContentFiltered), "content_policy_violation");
        assert_eq!(passed(ErrorKind::InvalidRequest), "invalid_request");
        assert_eq!(passed(ErrorKind::Auth), "auth", "the provider's key, not the client's");
        // A stream's error event after content says the same.
        let spent = ProviderError::new(ErrorKind::QuotaExceeded, "spent");
        let event = stream_error_event(Dialect::OpenAi, &spent, "req", json!([]));
        assert_eq!(
            (&event["error"]["code"], &event["error"]["type"]),
            (&json!("insufficient_quota"), &json!("insufficient_quota"))
        );
        let long = ProviderError::new(ErrorKind::ContextLength, "too long");
        assert_eq!(
            stream_error_event(Dialect::OpenAi, &long, "req", json!([]))["error"]["code"],
            "context_length_exceeded"
        );
    }

    #[test]
    fn a_providers_wait_passed_on_is_held_to_the_keys_rest() {
        // Bedrock's daily quota names a wait until midnight: a client is told the rest.
        let daily = ProviderError::new(ErrorKind::RateLimited, "Too many tokens per day")
            .with_status(429)
            .with_retry_after(Duration::from_secs(80_000));
        let error = RouteError::Upstream { error: daily, trail: Default::default(), route: "default".into() };
        let api = ApiError::from_route(&error, &HealthSettings::default());
        assert_eq!(api.retry_after, Some(Duration::from_secs(300)));
        // A shorter wait (a pacer's, a provider's second) is passed on as it is.
        let paced =
            ProviderError::new(ErrorKind::RateLimited, "paced").with_retry_after(Duration::from_millis(300));
        let error = RouteError::Upstream { error: paced, trail: Default::default(), route: "default".into() };
        let api = ApiError::from_route(&error, &HealthSettings::default());
        assert_eq!(api.retry_after, Some(Duration::from_millis(300)));
    }
}
