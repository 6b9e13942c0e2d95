//! Bedrock failures into the error catalog.
//!
//! Bedrock names its errors by exception type: in the `x-amzn-ErrorType` header of an error
//! answer (`ThrottlingException:http://internal.amazon.com/coral/...`, the part before the
//! colon), else the body's `__type` or `code`; in a stream, an exception frame's
//! `:exception-type` (`throttlingException`, lower camel case). The message is read only where
//! the type is ambiguous: a `ValidationException` about an over-long input is context_length,
//! one refusing a beta flag is unsupported (the target is skipped for the request). Bedrock
//! sends no rate-limit headers: configured `limits` pace it.

use std::time::Duration;

use switchyard::{ErrorKind, ProviderError};

use super::Redactor;
use crate::http;

/// The catalog kind of Bedrock exception `kind` (either case of its first letter, any
/// `:namespace` suffix cut), with its `message` for the ambiguous ones; `status` is the answer's,
/// `None` in a stream.
pub(crate) fn kind_of(kind: &str, message: &str, status: Option<u16>) -> ErrorKind {
    match normalized(kind).as_str() {
        "ThrottlingException" | "TooManyRequestsException" => ErrorKind::RateLimited,
        // The model's own error, passed through: its over-long prompt is still one.
        "ModelStreamErrorException" | "ModelErrorException" if is_context_length(message) => {
            ErrorKind::ContextLength
        }
        "ServiceUnavailableException"
        | "ModelNotReadyException"
        | "InternalServerException"
        | "InternalFailure"
        | "ModelStreamErrorException"
        | "ModelErrorException" => ErrorKind::Unavailable,
        "ModelTimeoutException" | "RequestTimeout" | "RequestTimeoutException" => ErrorKind::Timeout,
        "ValidationException" if is_context_length(message) => ErrorKind::ContextLength,
        // The target names a model Bedrock cannot call so (an invalid id, a model that needs an
        // inference profile): the target's configuration, which the route's others do not share.
        "ValidationException" if is_wrong_model(message) => ErrorKind::ModelNotFound,
        "ValidationException" | "SerializationException" => ErrorKind::InvalidRequest,
        // One model's access not granted (or an IAM policy naming models): the target, not the
        // credential, which the provider's other models still take.
        "AccessDeniedException" if is_model_access(message) => ErrorKind::ModelNotFound,
        // Temporary credentials past their end: the adapter loads them again and sends the call
        // once more (`BedrockProvider::send`), and only then calls them the credential's.
        "ExpiredTokenException" | "ExpiredToken" => ErrorKind::Unavailable,
        "AccessDeniedException"
        | "UnrecognizedClientException"
        | "InvalidSignatureException"
        | "SignatureDoesNotMatch"
        | "IncompleteSignature"
        | "InvalidClientTokenId"
        | "MissingAuthenticationToken"
        | "MissingAuthenticationTokenException" => ErrorKind::Auth,
        "ResourceNotFoundException" => ErrorKind::ModelNotFound,
        // A per-model quota of the account ("You can resubmit your request later"): a rate
        // limit of the (credential, model), not the account's credit.
        "ServiceQuotaExceededException" => ErrorKind::RateLimited,
        _ => status.map_or(ErrorKind::Unavailable, http::status_kind),
    }
}

/// `ThrottlingException` of `throttlingException` or `ThrottlingException:http://...`.
fn normalized(kind: &str) -> String {
    let kind = kind.split(':').next().unwrap_or_default().trim();
    let mut chars = kind.chars();
    match chars.next() {
        Some(first) => first.to_ascii_uppercase().to_string() + chars.as_str(),
        None => String::new(),
    }
}

/// Bedrock's and its models' wordings of an input past the model's context: Bedrock's own
/// ("Input is too long for requested model", "Too many input tokens. Max input tokens: ..."),
/// and Claude's, passed through ("prompt is too long: ...", "input length and `max_tokens`
/// exceed context limit: ...").
pub(crate) fn is_context_length(message: &str) -> bool {
    let message = message.to_ascii_lowercase().replace('`', "");
    [
        "input is too long",
        "too many input tokens",
        "prompt is too long",
        "input length and max_tokens exceed context limit",
        "maximum context length",
    ]
    .iter()
    .any(|phrase| message.contains(phrase))
}

/// Whether an `AccessDeniedException` is about one model: its access not granted ("You don't
/// have access to the model with the specified model ID.", "Model access is denied due to ...
/// AWS Marketplace actions ... to enable access to this model"), or a legacy model no longer
/// offered to the account ("This Model is marked by provider as Legacy ..."). An IAM refusal
/// names the model's resource whether the policy leaves out that model or all of Bedrock, so
/// it stays the credential's (`auth`).
fn is_model_access(message: &str) -> bool {
    let message = message.to_ascii_lowercase();
    ["access to the model", "model access is denied", "access to this model", "marked by provider as legacy"]
        .iter()
        .any(|phrase| message.contains(phrase))
}

/// Whether a `ValidationException` says the target's model cannot be called as named ("The
/// provided model identifier is invalid.", "Invocation of model ID ... with on-demand
/// throughput isn't supported. Retry your request with the ID or ARN of an inference profile").
fn is_wrong_model(message: &str) -> bool {
    let message = message.to_ascii_lowercase();
    message.contains("model identifier is invalid") || message.contains("on-demand throughput")
}

/// Whether a 400 refuses a beta flag (`invalid beta flag`, as Bedrock and Vertex answer the
/// flags Claude Code sends that they do not know).
pub(crate) fn is_beta_refusal(status: u16, message: &str) -> bool {
    status == 400 && message.to_ascii_lowercase().contains("invalid beta flag")
}

/// Whether a validation error says the model lacks what the request uses (images, tools, a
/// document), not that the request is malformed.
fn lacks_a_capability(message: &str) -> bool {
    let message = message.to_ascii_lowercase();
    message.contains("doesn't support") || message.contains("does not support")
}

/// The error of a non-2xx answer: its type from the `x-amzn-errortype` header or the body,
/// its message from the body (`message` or `Message`), both cut of every secret.
pub(crate) fn http_error(
    status: u16,
    header: Option<&str>,
    body: &str,
    retry_after: Option<Duration>,
    redactor: &Redactor,
) -> ProviderError {
    let parsed: Option<serde_json::Value> = serde_json::from_str(body).ok();
    let field = |name: &str| parsed.as_ref().and_then(|v| v.get(name)).and_then(|v| v.as_str());
    let kind = header
        .map(str::to_owned)
        .or_else(|| field("__type").map(|t| t.rsplit('#').next().unwrap_or(t).to_owned()))
        .or_else(|| field("code").map(str::to_owned))
        .map(|kind| normalized(&kind))
        .unwrap_or_default();
    let message = field("message").or_else(|| field("Message")).map(str::to_owned).unwrap_or_else(|| {
        if body.trim().is_empty() { format!("HTTP {status} with an empty body") } else { body.to_owned() }
    });
    let detail = redactor.clean(&http::excerpt(&message));
    let mut error = if is_beta_refusal(status, &message) {
        ProviderError::unsupported(format!("the provider refused a beta flag: {detail}"))
    } else if kind == "ValidationException" && lacks_a_capability(&message) {
        // "This model doesn't support the image field for user messages", tool use, a
        // document: this model cannot take the request, another may.
        ProviderError::unsupported(format!("the model cannot take this request: {detail}"))
    } else {
        ProviderError::new(kind_of(&kind, &message, Some(status)), detail)
    };
    error = error.with_status(status);
    if !kind.is_empty() {
        error = error.with_code(kind);
    }
    match retry_after.or_else(|| daily_wait(&error, &message)) {
        Some(wait) => error.with_retry_after(wait),
        None => error,
    }
}

/// The wait of a rate limit that names a day ("Too many tokens per day, please wait before
/// trying again."): a daily quota, which seconds do not refill, so neither a retry of the same
/// target nor a short rest helps. Until the next midnight UTC (Bedrock says nothing of its
/// reset), which the health's `max_cooldown_on_rate_limit` bounds as it bounds every rate
/// limit's rest: the request moves on at once, the key rests for that model.
fn daily_wait(error: &ProviderError, message: &str) -> Option<Duration> {
    let daily = message.to_ascii_lowercase().contains("per day");
    (error.kind() == ErrorKind::RateLimited && daily)
        .then(|| until_utc_midnight(std::time::SystemTime::now()))
}

/// How long from `now` until the next midnight UTC.
fn until_utc_midnight(now: std::time::SystemTime) -> Duration {
    let unix = now.duration_since(std::time::UNIX_EPOCH).unwrap_or_default().as_secs();
    switchyard::time::until_midnight(i64::try_from(unix).unwrap_or(i64::MAX), 0)
}

/// An exception frame of a stream (`:message-type: exception`), its payload `{"message"}`.
/// A `modelStreamErrorException` carries the model's own failure (`originalStatusCode`,
/// `originalMessage`), which says what it was better than the frame's type: a 429 is a rate
/// limit, a prompt too long is one, a 400 the request's.
pub(crate) fn stream_exception(kind: &str, payload: &[u8], redactor: &Redactor) -> ProviderError {
    let parsed = serde_json::from_slice::<serde_json::Value>(payload).ok();
    let text = |name: &str| parsed.as_ref()?.get(name)?.as_str().map(str::to_owned);
    let message = text("message")
        .or_else(|| text("Message"))
        .unwrap_or_else(|| String::from_utf8_lossy(payload).into_owned());
    let original = parsed.as_ref().and_then(|v| v.get("originalStatusCode")?.as_u64());
    let original = original.and_then(|status| u16::try_from(status).ok()).filter(|s| (400..=599).contains(s));
    let said = text("originalMessage").filter(|m| !m.is_empty());
    let mut kind_said = kind_of(kind, &message, None);
    if let Some(status) = original.filter(|_| normalized(kind) == "ModelStreamErrorException") {
        // Only what the model's own status says plainly: its 401 or 403 is the model
        // endpoint's, not the AWS credential's, and any other the frame's type says well.
        kind_said = match (said.as_deref(), status) {
            (Some(said), _) if is_context_length(said) => ErrorKind::ContextLength,
            _ if kind_said == ErrorKind::ContextLength => kind_said,
            (_, 429) => ErrorKind::RateLimited,
            (_, 408) => ErrorKind::Timeout,
            (_, 400 | 422) => ErrorKind::InvalidRequest,
            _ => kind_said,
        };
    }
    let mut detail = format!("exception in the stream: {}", http::excerpt(&message));
    if let Some(said) = &said {
        detail = format!("{detail} (the model's own: {})", http::excerpt(said));
    }
    let mut error = ProviderError::new(kind_said, redactor.clean(&detail)).with_code(normalized(kind));
    if let Some(status) = original {
        error = error.with_status(status);
    }
    match daily_wait(&error, &message) {
        Some(wait) => error.with_retry_after(wait),
        None => error,
    }
}

/// An error frame of a stream (`:message-type: error`, its `:error-code` and `:error-message`).
pub(crate) fn stream_error(code: &str, message: &str, redactor: &Redactor) -> ProviderError {
    let detail = redactor.clean(&format!("error in the stream: {}", http::excerpt(message)));
    ProviderError::new(kind_of(code, message, None), detail).with_code(normalized(code))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_documented_exception_has_its_kind() {
        let cases = [
            ("ThrottlingException", ErrorKind::RateLimited),
            ("ServiceUnavailableException", ErrorKind::Unavailable),
            ("ModelNotReadyException", ErrorKind::Unavailable),
            ("InternalServerException", ErrorKind::Unavailable),
            ("ModelTimeoutException", ErrorKind::Timeout),
            ("ValidationException", ErrorKind::InvalidRequest),
            ("AccessDeniedException", ErrorKind::Auth),
            ("UnrecognizedClientException", ErrorKind::Auth),
            ("ExpiredTokenException", ErrorKind::Unavailable),
            ("ResourceNotFoundException", ErrorKind::ModelNotFound),
            ("ServiceQuotaExceededException", ErrorKind::RateLimited),
        ];
        for (kind, expected) in cases {
            assert_eq!(kind_of(kind, "", Some(400)), expected, "{kind}");
            let header = format!("{kind}:http://internal.amazon.com/coral/com.amazon.bedrock/");
            assert_eq!(kind_of(&header, "", Some(400)), expected, "{header}");
        }
        // Stream exceptions are named in lower camel case.
        assert_eq!(kind_of("throttlingException", "", None), ErrorKind::RateLimited);
        assert_eq!(kind_of("modelStreamErrorException", "", None), ErrorKind::Unavailable);
    }

    #[test]
    fn an_over_long_input_is_context_length_and_other_validation_is_invalid_request() {
        for message in [
            "Input is too long for requested model.",
            "Too many input tokens. Max input tokens: 8192, request input token count: 9279",
            "prompt is too long: 210000 tokens > 200000 maximum",
            "input length and `max_tokens` exceed context limit: 188240 + 21333 > 200000",
        ] {
            assert_eq!(
                kind_of("ValidationException", message, Some(400)),
                ErrorKind::ContextLength,
                "{message}"
            );
        }
        assert_eq!(
            kind_of("ValidationException", "temperature: must be <= 1", Some(400)),
            ErrorKind::InvalidRequest
        );
    }

    #[test]
    fn a_model_whose_access_is_denied_is_that_targets_not_the_credentials() {
        let model = "You don't have access to the model with the specified model ID.";
        assert_eq!(kind_of("AccessDeniedException", model, Some(403)), ErrorKind::ModelNotFound);
        // IAM names the model's resource whether it denies that model or all of Bedrock.
        let iam = "User: arn:aws:iam::123456789012:user/app is not authorized to perform: bedrock:InvokeModel on resource: arn:aws:bedrock:us-east-1::foundation-model/anthropic.claude-opus-4-1-20250805-v1:0 because no identity-based policy allows the bedrock:InvokeModel action";
        assert_eq!(kind_of("AccessDeniedException", iam, Some(403)), ErrorKind::Auth);
    }

    #[test]
    fn a_model_stream_error_is_what_the_model_said_it_was() {
        let none = Redactor::default();
        let frame = |status: u16, said: &str| {
            let payload = serde_json::json!({
                "message": "An error occurred while streaming the response. Retry your request.",
                "originalStatusCode": status,
                "originalMessage": said,
            });
            stream_exception("modelStreamErrorException", payload.to_string().as_bytes(), &none)
        };
        let long = frame(400, "prompt is too long: 210000 tokens > 200000 maximum");
        assert_eq!((long.kind(), long.status()), (ErrorKind::ContextLength, Some(400)));
        assert!(long.detail().contains("prompt is too long"), "{long:?}");
        assert_eq!(frame(429, "Too many requests").kind(), ErrorKind::RateLimited);
        assert_eq!(frame(400, "messages: roles must alternate").kind(), ErrorKind::InvalidRequest);
        assert_eq!(frame(500, "").kind(), ErrorKind::Unavailable);
        // The model endpoint's own refusal is not the AWS credential's.
        assert_eq!(frame(403, "Forbidden").kind(), ErrorKind::Unavailable);
        // Without the model's own status, the type says it: the model failed, ask again.
        let bare = stream_exception("modelStreamErrorException", br#"{"message":"boom"}"#, &none);
        assert_eq!((bare.kind(), bare.status()), (ErrorKind::Unavailable, None));
    }

    #[test]
    fn a_daily_quota_rests_the_key_until_midnight_not_for_seconds() {
        let none = Redactor::default();
        let body = r#"{"message":"Too many tokens per day, please wait before trying again."}"#;
        let daily = http_error(429, Some("ThrottlingException"), body, None, &none);
        assert_eq!(daily.kind(), ErrorKind::RateLimited);
        let wait = daily.retry_after().expect("a daily quota names a wait");
        assert!(wait > Duration::ZERO && wait <= Duration::from_secs(86_400), "{wait:?}");
        let minute = r#"{"message":"Too many requests, please wait before trying again."}"#;
        assert_eq!(http_error(429, Some("ThrottlingException"), minute, None, &none).retry_after(), None);
        let midnight = std::time::UNIX_EPOCH + Duration::from_secs(20_000 * 86_400 - 60);
        assert_eq!(until_utc_midnight(midnight), Duration::from_secs(60));
    }

    #[test]
    fn an_unknown_type_falls_back_to_the_status() {
        assert_eq!(kind_of("BrandNewException", "", Some(503)), ErrorKind::Unavailable);
        assert_eq!(kind_of("", "", Some(403)), ErrorKind::Auth);
        assert_eq!(kind_of("", "", Some(429)), ErrorKind::RateLimited);
    }

    #[test]
    fn the_type_comes_from_the_header_else_the_body() {
        let redactor = Redactor::default();
        let error = http_error(
            429,
            Some("ThrottlingException:http://x/"),
            r#"{"message":"Too many requests, please wait before trying again."}"#,
            None,
            &redactor,
        );
        assert_eq!(
            (error.kind(), error.code(), error.status()),
            (ErrorKind::RateLimited, Some("ThrottlingException"), Some(429))
        );
        assert_eq!(error.detail(), "Too many requests, please wait before trying again.");
        let error = http_error(
            400,
            None,
            r#"{"__type":"com.amazon.coral.service#UnrecognizedClientException","Message":"The security token included in the request is invalid."}"#,
            None,
            &redactor,
        );
        assert_eq!((error.kind(), error.code()), (ErrorKind::Auth, Some("UnrecognizedClientException")));
        let error = http_error(502, None, "<html>bad gateway</html>", None, &redactor);
        assert_eq!((error.kind(), error.code()), (ErrorKind::Unavailable, None));
    }

    #[test]
    fn a_model_the_account_cannot_call_as_named_is_the_targets_not_the_credentials() {
        let cases = [
            (
                "AccessDeniedException",
                "Access denied. This Model is marked by provider as Legacy and you have not been actively using the model in the last 30 days. Please upgrade to an active model on Amazon Bedrock",
            ),
            (
                "AccessDeniedException",
                "Model access is denied due to IAM user or service role is not authorized to perform the required AWS Marketplace actions (aws-marketplace:ViewSubscriptions, aws-marketplace:Subscribe) to enable access to this model.",
            ),
            ("ValidationException", "The provided model identifier is invalid."),
            (
                "ValidationException",
                "Invocation of model ID anthropic.claude-sonnet-4-5-20250929-v1:0 with on-demand throughput isn\u{2019}t supported. Retry your request with the ID or ARN of an inference profile that contains this model.",
            ),
        ];
        for (kind, message) in cases {
            assert_eq!(kind_of(kind, message, Some(400)), ErrorKind::ModelNotFound, "{message}");
        }
        let iam = "User: arn:aws:iam::123:user/x is not authorized to perform: bedrock:InvokeModel on resource: arn:aws:bedrock:us-east-1::foundation-model/m";
        assert_eq!(kind_of("AccessDeniedException", iam, Some(403)), ErrorKind::Auth);
    }

    #[test]
    fn a_model_without_a_capability_the_request_uses_is_unsupported() {
        let body = r#"{"message":"This model doesn't support the image field for user messages."}"#;
        let error = http_error(400, Some("ValidationException"), body, None, &Redactor::default());
        assert!(error.is_unsupported(), "{error:?}");
        let malformed = r#"{"message":"1 validation error detected: Value at 'messages.1.member.content.2.member.image.format' failed to satisfy constraint"}"#;
        let error = http_error(400, Some("ValidationException"), malformed, None, &Redactor::default());
        assert!(!error.is_unsupported() && error.kind() == ErrorKind::InvalidRequest, "{error:?}");
    }

    #[test]
    fn a_refused_beta_flag_is_unsupported() {
        let error = http_error(
            400,
            Some("ValidationException"),
            r#"{"message":"invalid beta flag"}"#,
            None,
            &Redactor::default(),
        );
        assert!(error.is_unsupported(), "{error:?}");
        assert_eq!(error.status(), Some(400));
    }

    #[test]
    fn a_stream_exception_is_classified_by_its_type() {
        let error =
            stream_exception("throttlingException", br#"{"message":"slow down"}"#, &Redactor::default());
        assert_eq!((error.kind(), error.code()), (ErrorKind::RateLimited, Some("ThrottlingException")));
        assert!(error.detail().contains("slow down"));
        let error = stream_exception(
            "validationException",
            br#"{"message":"Input is too long for requested model."}"#,
            &Redactor::default(),
        );
        assert_eq!(error.kind(), ErrorKind::ContextLength);
    }
}
