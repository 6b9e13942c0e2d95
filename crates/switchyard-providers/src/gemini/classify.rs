//! Gemini failures into the error catalog, from the `google.rpc.Status` body (its `status`
//! string and detail payloads) and the HTTP status; the rules are the table in the `gemini`
//! module docs. Also the [`Redactor`] that keeps the call's key out of every error text.

use std::time::Duration;

use serde_json::Value;
use switchyard::credential::Secret;
use switchyard::provider::Call;
use switchyard::time::parse_duration;
use switchyard::{ErrorKind, ProviderError};

use super::wire::GoogleError;
use crate::http;

/// What the `details` of an error say, by payload type.
#[derive(Debug, Default)]
struct ErrorDetails {
    /// `google.rpc.RetryInfo.retryDelay`.
    retry_delay: Option<Duration>,
    /// `google.rpc.ErrorInfo.reason`s.
    reasons: Vec<String>,
    /// `google.rpc.QuotaFailure` violations' `quotaId`s.
    quota_ids: Vec<String>,
    /// Whether each violation is of a quota per model (a `model` dimension, or `PerModel` in
    /// its id).
    per_model: Vec<bool>,
}

impl ErrorDetails {
    /// Reads the `RetryInfo`, `ErrorInfo` and `QuotaFailure` payloads of `details`; others are
    /// skipped.
    fn read(details: &[Value]) -> Self {
        let mut read = ErrorDetails::default();
        for detail in details {
            let kind = detail.get("@type").and_then(Value::as_str).unwrap_or_default();
            match kind.rsplit('/').next().unwrap_or_default() {
                "google.rpc.RetryInfo" => {
                    read.retry_delay =
                        detail.get("retryDelay").and_then(Value::as_str).and_then(parse_duration);
                }
                "google.rpc.ErrorInfo" => {
                    if let Some(reason) = detail.get("reason").and_then(Value::as_str) {
                        read.reasons.push(reason.to_owned());
                    }
                }
                "google.rpc.QuotaFailure" => {
                    let violations = detail.get("violations").and_then(Value::as_array);
                    for violation in violations.into_iter().flatten() {
                        let id = violation.get("quotaId").and_then(Value::as_str);
                        let model = violation.get("quotaDimensions").and_then(|d| d.get("model"));
                        read.per_model.push(model.is_some() || id.is_some_and(|id| id.contains("PerModel")));
                        if let Some(id) = id {
                            read.quota_ids.push(id.to_owned());
                        }
                    }
                }
                _ => {}
            }
        }
        read
    }

    /// A daily quota is spent: it refills at the day's reset, not in seconds, so waiting on the
    /// same target is pointless. Per-minute quotas (and 429s without details) are rate limits.
    fn daily_quota_spent(&self) -> bool {
        self.quota_ids.iter().any(|id| id.contains("PerDay"))
    }

    /// The quotas spent are the project's, across models: the key rests for every model. Gemini
    /// limits most quotas per model (`...PerProjectPerModel`, a `model` dimension); without a
    /// `QuotaFailure` the limit is taken as the model's.
    fn project_wide(&self) -> bool {
        !self.per_model.is_empty() && self.per_model.iter().all(|per_model| !per_model)
    }
}

/// `{"error": {...}}`, or the one-element array form some Google front ends send.
pub(super) fn parse_google_error(body: &str) -> Option<GoogleError> {
    let value: Value = serde_json::from_str(body.trim()).ok()?;
    let value = match value {
        Value::Array(mut items) if items.len() == 1 => items.pop()?,
        other => other,
    };
    let error = value.as_object()?.get("error")?;
    serde_json::from_value(error.clone()).ok()
}

/// Whether an `INVALID_ARGUMENT` is the prompt-too-long one. Gemini gives it no code, so this
/// matches the documented messages narrowly: the Gemini API's ("The input token count (N)
/// exceeds the maximum number of tokens allowed (M)") and Vertex AI's ("Unable to submit
/// request because the input token count is N but model only supports up to M").
fn is_token_limit(message: &str) -> bool {
    message.contains("input token count")
        && (message.contains("exceeds the maximum number of tokens")
            || message.contains("only supports up to"))
}

/// Classifies an error answer with HTTP `status` and `body`.
pub(crate) fn classify_http_error(
    status: u16,
    body: &str,
    retry_after: Option<Duration>,
    redactor: &Redactor,
) -> ProviderError {
    if let Some(error) = parse_google_error(body) {
        return classify_google_error(status, &error, retry_after, redactor);
    }
    let detail = if body.trim().is_empty() {
        format!("HTTP {status} with an empty body")
    } else {
        redactor.clean(&http::excerpt(body))
    };
    let error = http::bare_error(status, body, detail);
    match retry_after {
        Some(wait) => error.with_retry_after(wait),
        None => error,
    }
}

/// Classifies a `google.rpc.Status` error (see the table in the `gemini` module docs):
/// `API_KEY_INVALID` is `auth` whatever the status string, an unknown status string falls back
/// to the HTTP `status`. The wait is `retry_after` (from headers), else the `RetryInfo` delay.
pub(super) fn classify_google_error(
    status: u16,
    error: &GoogleError,
    retry_after: Option<Duration>,
    redactor: &Redactor,
) -> ProviderError {
    let details = ErrorDetails::read(&error.details);
    let code = error.status.as_deref().unwrap_or_default();
    let kind = if details.reasons.iter().any(|reason| reason == "API_KEY_INVALID") {
        ErrorKind::Auth
    } else {
        match code {
            // A project's daily quota benches the key; a model's rests the key for that model
            // alone, until the day's reset: the key's other models still answer.
            "RESOURCE_EXHAUSTED" if details.daily_quota_spent() && details.project_wide() => {
                ErrorKind::QuotaExceeded
            }
            "RESOURCE_EXHAUSTED" => ErrorKind::RateLimited,
            "UNAVAILABLE" | "INTERNAL" | "UNKNOWN" | "DATA_LOSS" | "ABORTED" | "CANCELLED" => {
                ErrorKind::Unavailable
            }
            "DEADLINE_EXCEEDED" => ErrorKind::Timeout,
            "UNAUTHENTICATED" | "PERMISSION_DENIED" => ErrorKind::Auth,
            "NOT_FOUND" => ErrorKind::ModelNotFound,
            "FAILED_PRECONDITION" => ErrorKind::QuotaExceeded,
            "INVALID_ARGUMENT" | "OUT_OF_RANGE" if is_token_limit(&error.message) => ErrorKind::ContextLength,
            "INVALID_ARGUMENT" | "OUT_OF_RANGE" => ErrorKind::InvalidRequest,
            _ => http::status_kind(status),
        }
    };
    let mut detail = http::excerpt(&error.message);
    if !details.reasons.is_empty() {
        detail.push_str(&format!(" (reason {})", details.reasons.join(", ")));
    }
    if !details.quota_ids.is_empty() {
        detail.push_str(&format!(" (quota {})", details.quota_ids.join(", ")));
    }
    let mut classified = ProviderError::new(kind, redactor.clean(&detail)).with_status(status);
    if !code.is_empty() {
        classified = classified.with_code(code);
    }
    if kind == ErrorKind::RateLimited && details.project_wide() {
        classified = classified.account_wide();
    }
    let mut wait = retry_after.or(details.retry_delay);
    if code == "RESOURCE_EXHAUSTED" && details.daily_quota_spent() {
        // A daily quota refills at midnight Pacific time, not in the seconds a RetryInfo says.
        let reset = until_pacific_midnight(std::time::SystemTime::now());
        wait = Some(wait.map_or(reset, |given| given.max(reset)));
    }
    match wait {
        Some(wait) => classified.with_retry_after(wait),
        None => classified,
    }
}

/// How long from `now` until the next midnight in Los Angeles, where Google resets daily
/// quotas: UTC−7 from the second Sunday of March to the first Sunday of November (US daylight
/// saving time, changing at 02:00 local), UTC−8 otherwise.
fn until_pacific_midnight(now: std::time::SystemTime) -> Duration {
    let unix = now.duration_since(std::time::UNIX_EPOCH).unwrap_or_default().as_secs() as i64;
    let offset = if pacific_daylight(unix) { 7 * 3600 } else { 8 * 3600 };
    switchyard::time::until_midnight(unix, offset)
}

/// Whether US Pacific daylight time is in force at `unix` (seconds since the epoch, UTC).
fn pacific_daylight(unix: i64) -> bool {
    let (year, _, _) = switchyard::time::civil_from_days((unix - 8 * 3600).div_euclid(86_400));
    // The n-th Sunday of a month, as days since the epoch (1970-01-01 was a Thursday).
    let sunday = |month: u32, nth: i64| {
        let first = switchyard::time::days_from_civil(year, month, 1).unwrap_or_default();
        let weekday = (first + 4).rem_euclid(7); // 0 = Sunday
        first + (7 - weekday) % 7 + 7 * (nth - 1)
    };
    // 02:00 PST on the second Sunday of March is 10:00 UTC; 02:00 PDT on the first Sunday of
    // November is 09:00 UTC.
    let starts = sunday(3, 2) * 86_400 + 10 * 3600;
    let ends = sunday(11, 1) * 86_400 + 9 * 3600;
    (starts..ends).contains(&unix)
}

/// Removes the call's key from provider text before it enters an error, in case an upstream
/// or proxy ever echoes it.
pub(crate) struct Redactor(Option<Secret>);

impl Redactor {
    /// A redactor for `secret` (nothing to cut when `None`).
    pub(crate) fn new(secret: Option<Secret>) -> Self {
        Redactor(secret)
    }

    /// A redactor for the key of `call`'s credential (none when it has no key).
    pub(super) fn of(call: Call<'_>) -> Self {
        Redactor(call.credential.key().cloned())
    }

    /// `text` with every occurrence of the key replaced.
    pub(crate) fn clean(&self, text: &str) -> String {
        self.0.as_ref().map_or_else(|| text.to_owned(), |key| key.redact(text).into_owned())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn an_over_long_input_is_context_length_in_either_api_s_words() {
        let none = Redactor::new(None);
        let said = |message: &str| {
            let body = json!({ "error": { "code": 400, "message": message, "status": "INVALID_ARGUMENT" } });
            classify_http_error(400, &body.to_string(), None, &none).kind()
        };
        let gemini_api =
            "The input token count (1251952) exceeds the maximum number of tokens allowed (1048576).";
        let vertex = "Unable to submit request because the input token count is 1251952 but model only supports up to 1048576. Reduce the input token count and try again.";
        assert_eq!(said(gemini_api), ErrorKind::ContextLength);
        assert_eq!(said(vertex), ErrorKind::ContextLength);
        assert_eq!(
            said("Unable to submit request because it has an empty text parameter."),
            ErrorKind::InvalidRequest
        );
    }

    #[test]
    fn a_daily_quota_waits_until_midnight_in_los_angeles() {
        // `YYYY-MM-DDTHH:MM`, UTC.
        let at = |text: &str| switchyard::time::parse_rfc3339(&format!("{text}:00Z")).unwrap();
        let unix = |text: &str| at(text).duration_since(std::time::UNIX_EPOCH).unwrap().as_secs() as i64;
        // Winter, PST (UTC−8): midnight is 08:00 UTC.
        assert_eq!(until_pacific_midnight(at("2026-12-04T07:00")), Duration::from_secs(3600));
        assert_eq!(until_pacific_midnight(at("2026-12-04T08:00")), Duration::from_secs(86_400));
        // Summer, PDT (UTC−7): midnight is 07:00 UTC.
        assert_eq!(until_pacific_midnight(at("2026-07-01T06:30")), Duration::from_secs(1800));
        // 2026's changes: 8 March at 10:00 UTC, 1 November at 09:00 UTC.
        assert!(!pacific_daylight(unix("2026-03-08T09:59")));
        assert!(pacific_daylight(unix("2026-03-08T10:00")));
        assert!(pacific_daylight(unix("2026-11-01T08:59")));
        assert!(!pacific_daylight(unix("2026-11-01T09:00")));
    }

    #[test]
    fn a_model_s_daily_quota_rests_that_model_and_a_project_s_benches_the_key() {
        let body = |quota_id: &str| {
            json!({"error": {"code": 429, "message": "quota", "status": "RESOURCE_EXHAUSTED", "details": [
                {"@type": "type.googleapis.com/google.rpc.QuotaFailure", "violations": [{"quotaId": quota_id}]},
                {"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "1.5s"}
            ]}})
            .to_string()
        };
        let none = Redactor(None);
        let daily =
            classify_http_error(429, &body("GenerateRequestsPerDayPerProjectPerModel-FreeTier"), None, &none);
        assert_eq!(daily.kind(), ErrorKind::RateLimited, "the model's quota: its other models answer");
        assert!(!daily.is_account_wide());
        let rest = daily.retry_after().unwrap();
        assert!(rest > Duration::from_millis(1500) && rest <= Duration::from_secs(86_400), "{rest:?}");
        let project = classify_http_error(429, &body("GenerateRequestsPerDayPerProject"), None, &none);
        assert_eq!(project.kind(), ErrorKind::QuotaExceeded, "the project's quota benches the key");
        assert!(project.retry_after().unwrap() > Duration::from_millis(1500));
        let minute =
            classify_http_error(429, &body("GenerateRequestsPerMinutePerProjectPerModel"), None, &none);
        assert_eq!(minute.kind(), ErrorKind::RateLimited);
        assert_eq!(minute.retry_after(), Some(Duration::from_millis(1500)));
        assert_eq!(minute.code(), Some("RESOURCE_EXHAUSTED"));
    }

    #[test]
    fn a_rate_limit_is_the_model_s_unless_every_quota_spent_is_the_project_s() {
        let body = |violations: Value| {
            json!({"error": {"code": 429, "message": "quota", "status": "RESOURCE_EXHAUSTED", "details": [
                {"@type": "type.googleapis.com/google.rpc.QuotaFailure", "violations": violations}
            ]}})
            .to_string()
        };
        let none = Redactor(None);
        let wide = |violations| classify_http_error(429, &body(violations), None, &none).is_account_wide();
        // The shape Gemini sends for a per-model limit: the model as a dimension, and in the id.
        let per_model = json!([
            {"quotaMetric": "generativelanguage.googleapis.com/generate_content_free_tier_input_token_count",
             "quotaId": "GenerateContentInputTokensPerModelPerMinute-FreeTier",
             "quotaDimensions": {"location": "global", "model": "gemini-2.5-flash"}},
            {"quotaMetric": "generativelanguage.googleapis.com/generate_content_free_tier_requests",
             "quotaId": "GenerateRequestsPerMinutePerProjectPerModel-FreeTier",
             "quotaDimensions": {"location": "global", "model": "gemini-2.5-flash"}}
        ]);
        assert!(!wide(per_model));
        assert!(!wide(json!([{"quotaId": "GenerateRequestsPerMinutePerProjectPerModel"}])));
        assert!(wide(
            json!([{"quotaId": "GenerateRequestsPerMinutePerProject", "quotaDimensions": {"location": "global"}}])
        ));
        let bare = json!({"error": {"code": 429, "message": "Resource has been exhausted (e.g. check quota).", "status": "RESOURCE_EXHAUSTED"}});
        let bare = classify_http_error(429, &bare.to_string(), None, &none);
        assert_eq!(
            (bare.kind(), bare.is_account_wide()),
            (ErrorKind::RateLimited, false),
            "no details: the model's"
        );
    }

    #[test]
    fn google_errors_are_read_from_objects_and_one_element_arrays() {
        let error = json!({ "error": { "code": 503, "message": "busy", "status": "UNAVAILABLE" } });
        for body in [error.to_string(), json!([error]).to_string()] {
            let parsed = parse_google_error(&body).unwrap();
            assert_eq!(parsed.http_status(), Some(503));
            assert_eq!(parsed.status.as_deref(), Some("UNAVAILABLE"));
        }
        assert!(parse_google_error("{\"candidates\": []}").is_none());
        assert!(parse_google_error("not json").is_none());
    }
}
