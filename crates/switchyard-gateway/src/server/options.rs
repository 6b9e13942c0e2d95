//! The client's per-request switches and the headers passed on to the provider, read from the
//! request's headers.

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
    RequestOptions { no_fallback, forward_headers, cache_scope, no_cache, ..RequestOptions::default() }
}
