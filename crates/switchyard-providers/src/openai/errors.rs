//! Classification of OpenAI-dialect error bodies into the error catalog.
//!
//! The shapes seen in the wild (docs/wire-formats.md §1.5, §4, §5):
//! - OpenAI: `{"error": {"message", "type", "param", "code"}}`, `code` a string or null;
//! - Azure: the same, `code` sometimes a numeric string (`"429"`), `innererror` on content
//!   filter rejections;
//! - vLLM, Mistral: flat `{"object": "error", "message", "type", "param", "code"}`;
//! - llama.cpp, OpenRouter: `code` a number (the HTTP status);
//! - some servers: `{"error": "text"}`.
//!
//! The provider's code decides first, then the HTTP status, then the type. Message text is
//! read only after, for every HTTP adapter alike, where compatible servers say in words what
//! their code does not (a context overflow, a request too large: `crate::wording`).
//!
//! Rate limits are the model's: OpenAI's and Azure's limits are per model (or deployment), and
//! their 429s name it ("Rate limit reached for gpt-4o in organization ... on tokens per min");
//! what is the account's is a quota (`insufficient_quota`), benched as such.

use serde_json::{Map, Value};
use switchyard::chat::FinishReason;
use switchyard::credential::Secret;
use switchyard::{ErrorKind, ProviderError};

use crate::http;

/// What an error body says, whatever its envelope.
#[derive(Debug, Default, PartialEq)]
struct Fields {
    /// `message`, the provider's human-readable text (or the whole `{"error": "text"}`).
    message: Option<String>,
    /// `code` as text (numbers included).
    code: Option<String>,
    /// `code` when it is a number or a numeric string (an HTTP status, by convention).
    numeric_code: Option<u16>,
    /// `type` (`invalid_request_error`, `tokens`, `insufficient_quota`, ...).
    kind: Option<String>,
    /// Azure's `innererror.code` (`ResponsibleAIPolicyViolation` on a content-filter rejection).
    inner_code: Option<String>,
}

/// The classified error in `body`, when it holds an error object. `status` is the HTTP status,
/// `None` for an error that arrived inside a stream.
pub(super) fn from_body(status: Option<u16>, body: &str, key: Option<&Secret>) -> Option<ProviderError> {
    let value: Value = serde_json::from_str(body.trim()).ok()?;
    from_value(status, &value, key)
}

/// The classified error in a parsed body, when it holds an error object.
pub(super) fn from_value(status: Option<u16>, value: &Value, key: Option<&Secret>) -> Option<ProviderError> {
    let fields = fields(value)?;
    let kind = classify(status, &fields);
    let code = fields.code.clone().or_else(|| fields.kind.clone());
    // Scrub before shortening: a key cut in half by the excerpt would no longer match.
    let detail = match (&fields.message, status) {
        (Some(message), _) if !message.trim().is_empty() => http::excerpt(&scrub(message, key)),
        (_, Some(status)) => {
            format!("HTTP {status} without a message: {}", http::excerpt(&scrub(&value.to_string(), key)))
        }
        (_, None) => format!(
            "the stream reported an error without a message: {}",
            http::excerpt(&scrub(&value.to_string(), key))
        ),
    };
    let mut error = ProviderError::new(kind, detail);
    if let Some(status) = status {
        error = error.with_status(status);
    }
    if let Some(code) = code {
        error = error.with_code(scrub(&code, key));
    }
    Some(error)
}

/// An error response whose body is not a recognisable error object (HTML from a proxy, plain
/// text, nothing): the status alone decides.
pub(super) fn bare(status: u16, body: &str, key: Option<&Secret>) -> ProviderError {
    let detail = if body.trim().is_empty() {
        format!("HTTP {status} with an empty body")
    } else {
        http::excerpt(&scrub(body, key))
    };
    http::bare_error(status, body, detail)
}

/// A success whose body is not what the operation returns.
pub(super) fn malformed(
    what: &str,
    error: &serde_json::Error,
    body: &[u8],
    key: Option<&Secret>,
) -> ProviderError {
    let body = String::from_utf8_lossy(body);
    let detail = format!("the response is not {what} ({error}): {}", http::excerpt(&scrub(&body, key)));
    ProviderError::new(ErrorKind::MalformedResponse, detail).with_status(200)
}

/// Removes the key from text a provider sent back: a compatible server may echo it whole.
pub(super) fn scrub(text: &str, key: Option<&Secret>) -> String {
    key.map_or_else(|| text.to_owned(), |key| key.redact(text).into_owned())
}

/// Whether an object may hold an error that [`from_value`] would find: an `error` member, or
/// the flat envelope of vLLM and Mistral (`"object": "error"`). What is neither can be read
/// straight into its type, without a JSON tree. Asked of every stream chunk's unmodelled
/// members, a handful: one pass over them costs less than hashing two keys.
pub(super) fn may_be_error(object: &Map<String, Value>) -> bool {
    object.iter().any(|(key, value)| key == "error" || (key == "object" && is_flat_envelope(Some(value))))
}

/// Whether an `object` member says `"error"`: the flat envelope of vLLM and Mistral.
fn is_flat_envelope(object: Option<&Value>) -> bool {
    object.and_then(Value::as_str) == Some("error")
}

/// The fields of the error object in `value`: its `error` member (an object or a bare string)
/// or the flat envelope itself; `None` when `value` holds no error.
fn fields(value: &Value) -> Option<Fields> {
    let object = match value.get("error") {
        Some(Value::Object(object)) => object,
        Some(Value::String(message)) => {
            return Some(Fields { message: Some(message.clone()), ..Fields::default() });
        }
        _ if is_flat_envelope(value.get("object")) => value.as_object()?,
        _ => return None,
    };
    let text = |object: &Map<String, Value>, name: &str| match object.get(name) {
        Some(Value::String(text)) => Some(text.clone()),
        Some(Value::Number(number)) => Some(number.to_string()),
        _ => None,
    };
    let code = text(object, "code");
    let numeric_code = code.as_deref().and_then(|code| code.parse::<u16>().ok());
    Some(Fields {
        message: text(object, "message"),
        code,
        numeric_code,
        kind: text(object, "type"),
        inner_code: object
            .get("innererror")
            .and_then(|inner| inner.as_object())
            .and_then(|inner| text(inner, "code")),
    })
}

/// The catalog kind of an error: a known `code`, then a specific `type`, then Azure's
/// content-filter inner code, then the HTTP status (or a numeric code in 400..=599), then the
/// generic `type`; anything left is `unavailable`.
fn classify(status: Option<u16>, fields: &Fields) -> ErrorKind {
    if let Some(kind) = fields.code.as_deref().and_then(code_kind) {
        return kind;
    }
    if let Some(kind) = fields.kind.as_deref().and_then(specific_type_kind) {
        return kind;
    }
    if fields.inner_code.as_deref() == Some("ResponsibleAIPolicyViolation") {
        return ErrorKind::ContentFiltered;
    }
    // Some servers put a failure in a 200 body; their status says nothing then.
    let status = status.filter(|status| *status >= 400);
    let numeric = fields.numeric_code.filter(|code| (400..=599).contains(code));
    if let Some(status) = status.or(numeric) {
        return http::status_kind(status);
    }
    match fields.kind.as_deref() {
        Some("invalid_request_error") => ErrorKind::InvalidRequest,
        Some("authentication_error" | "permission_error") => ErrorKind::Auth,
        // The types of OpenAI's rate-limit errors name the spent dimension.
        Some("tokens" | "requests" | "rate_limit_error") => ErrorKind::RateLimited,
        // What is left (server_error, or nothing known) failed on the provider's side while it
        // answered: retrying may help.
        _ => ErrorKind::Unavailable,
    }
}

/// Provider codes that say more than a status (also a Responses API stream's `error` event's
/// and a failed response's).
pub(super) fn code_kind(code: &str) -> Option<ErrorKind> {
    Some(match code {
        "rate_limit_exceeded" => ErrorKind::RateLimited,
        "insufficient_quota" => ErrorKind::QuotaExceeded,
        "context_length_exceeded" => ErrorKind::ContextLength,
        "invalid_api_key" => ErrorKind::Auth,
        "model_not_found" | "DeploymentNotFound" => ErrorKind::ModelNotFound,
        // Azure's filter on the prompt, and OpenAI's safety system refusing the request.
        "content_filter" | "content_policy_violation" => ErrorKind::ContentFiltered,
        "server_is_overloaded" => ErrorKind::Unavailable,
        _ => return None,
    })
}

/// Error types specific enough to beat the status: OpenAI's older quota errors carry a null
/// code, and llama.cpp names context overflow only in the type.
fn specific_type_kind(kind: &str) -> Option<ErrorKind> {
    Some(match kind {
        "insufficient_quota" => ErrorKind::QuotaExceeded,
        "exceed_context_size_error" => ErrorKind::ContextLength,
        _ => return None,
    })
}

/// The failure of an answer a choice of which ended with `finish_reason: "error"` (OpenRouter,
/// and servers like it, end that way an answer their upstream broke off, with an `error` object
/// in the choice or none): it is not whole, and is asked again or of the next target. `said`
/// is what the choice's `error` says, when it has one.
pub(super) fn finished_in_error<'a>(
    choices: impl IntoIterator<Item = Option<&'a FinishReason>>,
    said: Option<&Value>,
    key: Option<&Secret>,
) -> Option<ProviderError> {
    let errored =
        |reason: Option<&FinishReason>| matches!(reason, Some(FinishReason::Other(r)) if r == "error");
    if !choices.into_iter().any(errored) {
        return None;
    }
    let mut detail = "the provider ended the answer with finish_reason `error`".to_owned();
    if let Some(said) = said {
        detail = format!("{detail}: {}", http::excerpt(&scrub(&said.to_string(), key)));
    }
    Some(ProviderError::new(ErrorKind::Unavailable, detail))
}

/// Whether `error` refused a conversation for an assistant turn sent back without its
/// `reasoning_content` (DeepSeek's thinking mode: "The `reasoning_content` in the thinking mode
/// must be passed back to the API.", "Missing `reasoning_content` field in the assistant
/// message at message index 2").
pub(super) fn wants_reasoning_back(error: &ProviderError) -> bool {
    let detail = error.detail().to_ascii_lowercase();
    error.kind() == ErrorKind::InvalidRequest
        && detail.contains("reasoning_content")
        && (detail.contains("passed back") || detail.contains("missing"))
}

/// Whether `error` refused a request for its `stream_options` ("Unrecognized request argument
/// supplied: stream_options", an older Azure API version's 400; a server that forbids unknown
/// fields, FastAPI's 422 `extra_forbidden` at `["body", "stream_options"]`).
pub(super) fn refuses_stream_options(error: &ProviderError) -> bool {
    error.kind() == ErrorKind::InvalidRequest
        && error.status().is_none_or(|status| status == 400 || status == 422)
        && error.detail().contains("stream_options")
}

/// The most output tokens the model takes, when `error` refused a request's limit as larger
/// ("max_tokens is too large: 32000. This model supports at most 16384 completion tokens,
/// whereas you provided 32000.", OpenAI's and the servers that copy it).
pub(super) fn output_limit(error: &ProviderError) -> Option<u32> {
    if error.kind() != ErrorKind::InvalidRequest || !error.detail().contains("is too large") {
        return None;
    }
    let (_, rest) = error.detail().split_once("supports at most ")?;
    let digits = rest.split(|c: char| !c.is_ascii_digit()).next()?;
    digits.parse().ok().filter(|most| *most > 0)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn kind_of(status: Option<u16>, body: Value) -> ErrorKind {
        from_value(status, &body, None).map(|error| error.kind()).unwrap_or(ErrorKind::Cancelled)
    }

    #[test]
    fn codes_beat_statuses() {
        let quota =
            json!({"error": {"message": "m", "type": "insufficient_quota", "code": "insufficient_quota"}});
        assert_eq!(kind_of(Some(429), quota), ErrorKind::QuotaExceeded);
        let legacy_quota = json!({"error": {"message": "m", "type": "insufficient_quota", "code": null}});
        assert_eq!(kind_of(Some(429), legacy_quota), ErrorKind::QuotaExceeded);
        let context = json!({"error": {"message": "m", "type": "invalid_request_error", "code": "context_length_exceeded"}});
        assert_eq!(kind_of(Some(400), context), ErrorKind::ContextLength);
    }

    #[test]
    fn content_policy_rejections_are_content_filtered_not_invalid_requests() {
        let openai = json!({"error": {"code": "content_policy_violation", "message": "Your request was rejected as a result of our safety system.", "param": null, "type": "invalid_request_error"}});
        let error = from_value(Some(400), &openai, None).unwrap();
        assert_eq!(
            (error.kind(), error.code()),
            (ErrorKind::ContentFiltered, Some("content_policy_violation"))
        );
        let azure = json!({"error": {"message": "The response was filtered due to the prompt triggering Azure OpenAI's content management policy.", "type": null, "param": "prompt", "code": "content_filter", "status": 400, "innererror": {"code": "ResponsibleAIPolicyViolation", "content_filter_result": {"hate": {"filtered": false, "severity": "safe"}, "jailbreak": {"filtered": true, "detected": true}}}}});
        assert_eq!(kind_of(Some(400), azure), ErrorKind::ContentFiltered);
        let inner_only = json!({"error": {"message": "filtered", "code": "400", "innererror": {"code": "ResponsibleAIPolicyViolation"}}});
        assert_eq!(kind_of(Some(400), inner_only), ErrorKind::ContentFiltered);
        let plain = json!({"error": {"message": "bad", "type": "invalid_request_error", "code": null}});
        assert_eq!(kind_of(Some(400), plain), ErrorKind::InvalidRequest);
    }

    #[test]
    fn llama_cpp_context_overflow_is_context_length() {
        let body = json!({"error": {"code": 400, "message": "request (36146 tokens) exceeds the available context size (32768 tokens), try increasing it", "type": "exceed_context_size_error", "n_prompt_tokens": 36146, "n_ctx": 32768}});
        assert_eq!(kind_of(Some(400), body), ErrorKind::ContextLength);
    }

    #[test]
    fn numeric_codes_stand_in_for_a_missing_status() {
        let openrouter = json!({"error": {"code": 429, "message": "Rate limited"}});
        assert_eq!(kind_of(None, openrouter), ErrorKind::RateLimited);
        let azure = json!({"error": {"code": "429", "message": "retry after 6 seconds"}});
        let error = from_value(Some(429), &azure, None).map(|e| (e.kind(), e.code().map(str::to_owned)));
        assert_eq!(error, Some((ErrorKind::RateLimited, Some("429".to_owned()))));
    }

    #[test]
    fn stream_errors_without_code_classify_by_type() {
        let server =
            json!({"error": {"message": "boom", "type": "server_error", "param": null, "code": null}});
        assert_eq!(kind_of(None, server), ErrorKind::Unavailable);
        let invalid = json!({"error": {"message": "bad", "type": "invalid_request_error", "code": null}});
        assert_eq!(kind_of(None, invalid), ErrorKind::InvalidRequest);
    }

    #[test]
    fn bodies_without_an_error_object_are_not_errors() {
        assert_eq!(from_value(Some(500), &json!({"choices": []}), None), None);
        assert_eq!(from_body(Some(502), "<html>Bad gateway</html>", None), None);
    }

    #[test]
    fn scrub_masks_an_echoed_key() {
        let key = Secret::new("sk-test-secret-123");
        assert_eq!(scrub("bad key sk-test-secret-123 given", Some(&key)), "bad key [redacted] given");
    }
}
