//! The client's per-request switches and the headers passed on to the provider, read from the
//! request's headers.

use std::time::Duration;

use axum::http::{HeaderMap, HeaderName, header};
use switchyard::RequestOptions;

use super::auth::presented_key;

/// The client's headers that reach the provider: its beta opt-ins, its API version and its
/// idempotency key. Never its `authorization` or `x-api-key` (the gateway key), nor
/// `openai-organization` / `openai-project` (the account billed is the provider's
/// configuration), nor anything else.
const FORWARDED: [HeaderName; 4] = [
    HeaderName::from_static("anthropic-beta"),
    HeaderName::from_static("anthropic-version"),
    HeaderName::from_static("openai-beta"),
    HeaderName::from_static("idempotency-key"),
];

/// Header names read or written on every request, made once: a name given as `&str` is parsed
/// again at each use.
pub(crate) mod names {
    use axum::http::HeaderName;

    pub const REQUEST_ID: HeaderName = HeaderName::from_static("x-request-id");
    pub const TARGET: HeaderName = HeaderName::from_static("x-switchyard-target");
    pub const ATTEMPTS: HeaderName = HeaderName::from_static("x-switchyard-attempts");
    pub const FALLBACK: HeaderName = HeaderName::from_static("x-switchyard-fallback");
    pub const CACHE: HeaderName = HeaderName::from_static("x-switchyard-cache");
    pub const API_KEY: HeaderName = HeaderName::from_static("x-api-key");
    pub const SESSION: HeaderName = HeaderName::from_static("x-switchyard-session");
    /// The OpenAI and Anthropic SDKs' timeout, in seconds: TypeScript's (and Anthropic
    /// Python's) `x-stainless-timeout`, Python's read timeout `x-stainless-read-timeout`.
    pub const SDK_TIMEOUTS: [HeaderName; 2] =
        [HeaderName::from_static("x-stainless-timeout"), HeaderName::from_static("x-stainless-read-timeout")];
}

/// The conversation a request belongs to, for session affinity: the `x-switchyard-session`
/// header, else the request's own identifier where its dialect has one (OpenAI's
/// `prompt_cache_key`, then `user`; Anthropic's `metadata.user_id`).
pub(crate) fn session_of(headers: &HeaderMap, request: &switchyard::chat::ChatRequest) -> Option<String> {
    use serde_json::Value;
    let header = headers.get(names::SESSION).and_then(|v| v.to_str().ok()).map(str::trim);
    if let Some(session) = header.filter(|s| !s.is_empty()) {
        return Some(session.to_owned());
    }
    let extra = &request.extra;
    let named = match request.origin {
        switchyard::chat::Dialect::Anthropic => extra.get("metadata").and_then(|m| m.get("user_id")),
        _ => extra.get("prompt_cache_key").or_else(|| extra.get("user")),
    };
    named.and_then(Value::as_str).filter(|s| !s.is_empty()).map(str::to_owned)
}

/// The router's options a request's headers ask for: fallback off, cache off, the headers
/// passed on, and whose remembered answers it may be served.
pub(crate) fn options(headers: &HeaderMap) -> RequestOptions {
    let no_fallback = headers
        .get(names::FALLBACK)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| matches!(v.trim().to_ascii_lowercase().as_str(), "off" | "false" | "0" | "no"));
    let mut forward_headers = Vec::new();
    for name in &FORWARDED {
        for value in headers.get_all(name) {
            if let Ok(value) = value.to_str() {
                forward_headers.push((name.as_str().to_owned(), value.to_owned()));
            }
        }
    }
    // Remembered answers are kept per gateway key (hashed), and a client may opt out.
    let cache_scope = crate::responses::owner_of(presented_key(headers));
    let no_cache =
        headers.get_all(header::CACHE_CONTROL).iter().any(|v| {
            v.to_str().is_ok_and(|v| v.split(',').any(|d| d.trim().eq_ignore_ascii_case("no-store")))
        }) || headers
            .get(names::CACHE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.trim().eq_ignore_ascii_case("off"));
    let caller_timeout = caller_timeout(headers);
    RequestOptions {
        no_fallback,
        forward_headers,
        cache_scope,
        no_cache,
        caller_timeout,
        ..RequestOptions::default()
    }
}

/// How long the client waits before it gives up on an answer given whole, as its SDK says
/// ([`names::SDK_TIMEOUTS`]; the sooner of two), less a margin for the answer to reach it (a
/// tenth, at most a second). A value that is no number of seconds, or over a day, says
/// nothing.
fn caller_timeout(headers: &HeaderMap) -> Option<Duration> {
    let said = names::SDK_TIMEOUTS
        .iter()
        .filter_map(|name| headers.get(name)?.to_str().ok()?.trim().parse::<f64>().ok())
        .filter(|seconds| seconds.is_finite() && *seconds > 0.0 && *seconds <= 86_400.0)
        .reduce(f64::min)?;
    let patience = Duration::from_secs_f64(said);
    Some(patience - (patience / 10).min(Duration::from_secs(1)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn said(pairs: &[(&'static str, &'static str)]) -> Option<Duration> {
        let mut headers = HeaderMap::new();
        for (name, value) in pairs {
            headers.insert(*name, value.parse().unwrap());
        }
        caller_timeout(&headers)
    }

    #[test]
    fn an_sdks_timeout_is_the_clients_patience_less_a_margin() {
        let secs = Duration::from_secs_f64;
        // Python's read timeout (OpenAI's default), TypeScript's whole seconds.
        assert_eq!(said(&[("x-stainless-read-timeout", "600.0")]), Some(secs(599.0)));
        assert_eq!(said(&[("x-stainless-timeout", "3")]), Some(secs(2.7)));
        // Anthropic's Python SDK sends both: the sooner counts.
        assert_eq!(
            said(&[("x-stainless-timeout", "600"), ("x-stainless-read-timeout", "20")]),
            Some(secs(19.0))
        );
        assert_eq!(said(&[]), None);
    }

    #[test]
    fn a_timeout_that_is_no_number_of_seconds_says_nothing() {
        for nonsense in ["", "soon", "-1", "0", "NaN", "inf", "1e12"] {
            assert_eq!(said(&[("x-stainless-read-timeout", nonsense)]), None, "{nonsense:?}");
        }
        // One unreadable header leaves the other.
        assert_eq!(
            said(&[("x-stainless-timeout", "10"), ("x-stainless-read-timeout", "soon")]),
            Some(Duration::from_secs(9))
        );
    }
}
