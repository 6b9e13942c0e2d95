//! The gateway key: read from `Authorization: Bearer` or `x-api-key`, compared in constant time.

use axum::http::{HeaderMap, StatusCode, header};
use switchyard::credential::Secret;

use super::errors::ApiError;
use super::options::names;

/// Checks the gateway key (Bearer or x-api-key) when keys are configured.
pub(crate) fn authorized(keys: &[Secret], headers: &HeaderMap) -> bool {
    if keys.is_empty() {
        return true;
    }
    let Some(presented) = presented_key(headers) else { return false };
    keys.iter().any(|key| constant_time_eq(key.expose().as_bytes(), presented.as_bytes()))
}

/// The gateway key the client sent (`Authorization: Bearer` or `x-api-key`), trimmed.
pub(crate) fn presented_key(headers: &HeaderMap) -> Option<&str> {
    headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer ").or_else(|| v.strip_prefix("bearer ")))
        .or_else(|| headers.get(names::API_KEY).and_then(|v| v.to_str().ok()))
        .map(str::trim)
}

/// Whether `a` and `b` are equal, in a time that does not tell where they differ.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// The refusal of a request without a valid gateway key, saying how to send one.
pub(crate) fn unauthorized(headers: &HeaderMap) -> ApiError {
    let presented = headers.contains_key(header::AUTHORIZATION) || headers.contains_key(names::API_KEY);
    let message = if presented {
        "the gateway key is not valid"
    } else {
        "a gateway key is required: send it as `Authorization: Bearer <key>` or `x-api-key: <key>`"
    };
    ApiError::new(StatusCode::UNAUTHORIZED, "unauthorized", message)
}
