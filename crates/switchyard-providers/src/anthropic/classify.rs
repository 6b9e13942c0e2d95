//! Anthropic failures into the error catalog: from the error `type` and the HTTP status, and
//! from message text only where Anthropic gives no code (prompt too long, out of credit).
//!
//! A `rate_limit_error` is the model's: Anthropic limits per model class (its message says
//! "your organization's rate limit" but names the model), so the key rests for that model only;
//! a spend limit or an empty credit balance is the account's, a quota error.

use std::time::Duration;

use serde_json::Value;
use switchyard::credential::Secret;
use switchyard::{ErrorKind, ProviderError};

use super::wire::{ErrorBody, ErrorResponse};
use crate::http;

/// The catalog kind of an Anthropic error. `status` is `None` for an `error` event inside a
/// stream (the HTTP status was already 200).
pub(crate) fn kind_of(error: &ErrorBody, status: Option<u16>) -> ErrorKind {
    match error.kind.as_str() {
        "rate_limit_error" if is_spend_limit(error.details.as_ref()) => ErrorKind::QuotaExceeded,
        "rate_limit_error" => ErrorKind::RateLimited,
        "overloaded_error" | "api_error" | "timeout_error" => ErrorKind::Unavailable,
        "authentication_error" | "permission_error" => ErrorKind::Auth,
        "not_found_error" => ErrorKind::ModelNotFound,
        "billing_error" => ErrorKind::QuotaExceeded,
        "request_too_large" => ErrorKind::InvalidRequest,
        "invalid_request_error" if is_context_length(&error.message) => ErrorKind::ContextLength,
        "invalid_request_error" if is_credit_balance(&error.message) => ErrorKind::QuotaExceeded,
        "invalid_request_error" if is_disabled_organization(&error.message) => ErrorKind::Auth,
        "invalid_request_error" => ErrorKind::InvalidRequest,
        // A type this code does not know: the status is the next best signal.
        _ => status.map_or(ErrorKind::Unavailable, http::status_kind),
    }
}

/// A monthly spend cap is a 429 `rate_limit_error` too, but waiting minutes does not lift it.
fn is_spend_limit(details: Option<&Value>) -> bool {
    details.and_then(|d| d.get("error_code")).and_then(Value::as_str) == Some("enforced_spend_limit_reached")
}

/// Anthropic reports an over-long prompt as a plain `invalid_request_error`; these two
/// sentence openings are the documented wordings (`prompt is too long: 200251 tokens > 200000
/// maximum`; `input length and `max_tokens` exceed context limit: 188240 + 21333 > 200000`).
fn is_context_length(message: &str) -> bool {
    let message = message.trim_start().to_ascii_lowercase();
    message.starts_with("prompt is too long")
        || message.replace('`', "").starts_with("input length and max_tokens exceed context limit")
}

/// "Your credit balance is too low to access the Anthropic API. ..." arrives as a 400
/// `invalid_request_error` with nothing else to tell it apart, so the phrase is matched whole.
fn is_credit_balance(message: &str) -> bool {
    message.to_ascii_lowercase().contains("your credit balance is too low")
}

/// "This organization has been disabled." arrives as a 400 `invalid_request_error`: the key's
/// account is shut, which no request fixes; the key is benched as a refused one, and another
/// key or target is asked.
fn is_disabled_organization(message: &str) -> bool {
    let message = message.to_ascii_lowercase();
    message.contains("organization has been disabled") || message.contains("organization is disabled")
}

/// A 400 refusing two sampling parameters together ("`temperature` and `top_p` cannot both be
/// specified for this model. Please use only one."): the model's lack, which another target
/// may not have; skipped for the request (unsupported), health untouched.
fn is_one_sampler_refusal(message: &str) -> bool {
    message.contains("cannot both be specified")
}

/// A 400 refusing a beta flag: "invalid beta flag" (Bedrock, Vertex), or Anthropic's
/// "Unexpected value(s) `...` for the `anthropic-beta` header". The target is skipped for the
/// request (unsupported), its health untouched.
fn is_beta_refusal(message: &str) -> bool {
    let message = message.to_ascii_lowercase();
    message.contains("invalid beta flag")
        || (message.contains("unexpected value") && message.contains("anthropic-beta"))
}

/// A classified error from a non-2xx response and its (possibly empty, possibly non-JSON) body.
/// The key, should a body ever echo it, is cut out of the detail.
pub(crate) fn http_error(
    status: u16,
    body: &str,
    retry_after: Option<Duration>,
    key: Option<&Secret>,
) -> ProviderError {
    messages_error(status, body, retry_after, key).unwrap_or_else(|| {
        let detail = if body.trim().is_empty() {
            format!("HTTP {status} with an empty body")
        } else {
            http::excerpt(body)
        };
        let error = http::bare_error(status, body, redact(detail, key));
        match retry_after {
            Some(wait) => error.with_retry_after(wait),
            None => error,
        }
    })
}

/// [`http_error`] of a body that is an Anthropic error (`{"type": "error", "error": {...}}`);
/// `None` for any other body (a cloud in front of Claude may answer in its own shape).
pub(crate) fn messages_error(
    status: u16,
    body: &str,
    retry_after: Option<Duration>,
    key: Option<&Secret>,
) -> Option<ProviderError> {
    let parsed = serde_json::from_str::<ErrorResponse>(body).ok()?;
    let kind = kind_of(&parsed.error, Some(status));
    let detail = if parsed.error.message.is_empty() {
        format!("HTTP {status} with no message")
    } else {
        http::excerpt(&parsed.error.message)
    };
    let error = if status == 400 && is_beta_refusal(&parsed.error.message) {
        ProviderError::unsupported(format!("the provider refused a beta flag: {}", redact(detail, key)))
    } else if status == 400 && is_one_sampler_refusal(&parsed.error.message) {
        ProviderError::unsupported(redact(detail, key))
    } else {
        ProviderError::new(kind, redact(detail, key))
    };
    let error = error.with_code(parsed.error.kind).with_status(status);
    Some(match retry_after {
        Some(wait) => error.with_retry_after(wait),
        None => error,
    })
}

/// The error a 200's body is, when it is an Anthropic error (`{"type": "error", "error":
/// {...}}`): classified by its type, as an `error` event in a stream is.
pub(crate) fn stream_error_body(body: &str, key: Option<&Secret>) -> Option<ProviderError> {
    let parsed = serde_json::from_str::<ErrorResponse>(body).ok()?;
    let detail = format!("an error answered with a 200: {}", http::excerpt(&parsed.error.message));
    Some(
        ProviderError::new(kind_of(&parsed.error, None), redact(detail, key))
            .with_code(parsed.error.kind)
            .with_status(200),
    )
}

/// An `error` event inside a 200 stream.
pub(crate) fn stream_error(error: &ErrorBody, key: Option<&Secret>) -> ProviderError {
    let detail = format!("error event in the stream: {}", http::excerpt(&error.message));
    ProviderError::new(kind_of(error, None), redact(detail, key)).with_code(error.kind.clone())
}

/// `text` with every occurrence of the key replaced, for details built from provider text.
pub(crate) fn redact(text: String, key: Option<&Secret>) -> String {
    match key.map(|key| key.redact(&text)) {
        Some(std::borrow::Cow::Owned(clean)) => clean,
        _ => text,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn body(kind: &str, message: &str) -> ErrorBody {
        ErrorBody { kind: kind.to_owned(), message: message.to_owned(), details: None }
    }

    #[test]
    fn context_length_is_recognised_in_both_documented_wordings_only() {
        let kind = |m| kind_of(&body("invalid_request_error", m), Some(400));
        assert_eq!(kind("prompt is too long: 200251 tokens > 200000 maximum"), ErrorKind::ContextLength);
        assert_eq!(
            kind("input length and `max_tokens` exceed context limit: 188240 + 21333 > 200000"),
            ErrorKind::ContextLength
        );
        assert_eq!(kind("messages: the prompt is too long for my taste"), ErrorKind::InvalidRequest);
    }

    #[test]
    fn credit_balance_needs_the_whole_phrase() {
        let kind = |m| kind_of(&body("invalid_request_error", m), Some(400));
        assert_eq!(
            kind("Your credit balance is too low to access the Anthropic API. Please go to Plans & Billing."),
            ErrorKind::QuotaExceeded
        );
        assert_eq!(kind("credit: field required"), ErrorKind::InvalidRequest);
        assert_eq!(kind("balance is too low"), ErrorKind::InvalidRequest);
    }

    #[test]
    fn a_disabled_organization_benches_the_key_and_a_sampler_pair_is_the_models_lack() {
        let kind = |m| kind_of(&body("invalid_request_error", m), Some(400));
        assert_eq!(kind("This organization has been disabled."), ErrorKind::Auth);
        let refusal = |m: &str| {
            let body = serde_json::json!({"type": "error", "error": {"type": "invalid_request_error", "message": m}});
            http_error(400, &body.to_string(), None, None)
        };
        let pair = refusal(
            "`temperature` and `top_p` cannot both be specified for this model. Please use only one.",
        );
        assert!(pair.is_unsupported(), "another target may take both: {pair:?}");
        assert!(!refusal("max_tokens: field required").is_unsupported());
    }

    #[test]
    fn spend_limit_429_is_quota_not_rate_limit() {
        let mut error = body("rate_limit_error", "spend limit reached");
        error.details = Some(serde_json::json!({"error_code": "enforced_spend_limit_reached"}));
        assert_eq!(kind_of(&error, Some(429)), ErrorKind::QuotaExceeded);
        assert_eq!(kind_of(&body("rate_limit_error", "slow down"), Some(429)), ErrorKind::RateLimited);
    }

    #[test]
    fn unknown_types_fall_back_to_the_status() {
        assert_eq!(kind_of(&body("brand_new_error", ""), Some(503)), ErrorKind::Unavailable);
        assert_eq!(kind_of(&body("brand_new_error", ""), Some(401)), ErrorKind::Auth);
        assert_eq!(kind_of(&body("brand_new_error", ""), None), ErrorKind::Unavailable);
    }

    #[test]
    fn a_refused_beta_flag_is_unsupported_and_other_bad_requests_are_not() {
        let refusal =
            r#"{"type":"error","error":{"type":"invalid_request_error","message":"invalid beta flag"}}"#;
        assert!(http_error(400, refusal, None, None).is_unsupported());
        let unexpected = r#"{"type":"error","error":{"type":"invalid_request_error","message":"Unexpected value(s) `x-2099` for the `anthropic-beta` header."}}"#;
        assert!(http_error(400, unexpected, None, None).is_unsupported());
        let plain = r#"{"type":"error","error":{"type":"invalid_request_error","message":"max_tokens: field required"}}"#;
        assert!(!http_error(400, plain, None, None).is_unsupported());
    }

    #[test]
    fn redact_removes_the_key() {
        let key = Secret::new("sk-ant-secret-123456");
        assert_eq!(redact("bad key sk-ant-secret-123456!".into(), Some(&key)), "bad key [redacted]!");
    }
}
