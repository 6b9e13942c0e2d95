//! The gateway key: read from `Authorization: Bearer` or `x-api-key`, compared in constant time.

use std::sync::Arc;

use axum::http::{HeaderMap, StatusCode, header};
use switchyard::credential::Secret;

use crate::keys::{ClientKey, ClientKeys, constant_time_eq};

use super::errors::ApiError;
use super::options::names;

/// Whether the request carries one of the client keys, when keys are configured.
pub(crate) fn admitted(keys: &ClientKeys, headers: &HeaderMap) -> bool {
    client_key(keys, headers).is_ok()
}

/// The client key the request carries: `None` when no key is configured, an error when the
/// request carries none of them.
pub(crate) fn client_key(keys: &ClientKeys, headers: &HeaderMap) -> Result<Option<Arc<ClientKey>>, ()> {
    if keys.is_empty() {
        return Ok(None);
    }
    let presented = presented_key(headers).ok_or(())?;
    keys.find(presented).cloned().map(Some).ok_or(())
}

/// Checks a key (Bearer or x-api-key) against `keys` (the admin key), when there are any.
pub(crate) fn authorized(keys: &[Secret], headers: &HeaderMap) -> bool {
    if keys.is_empty() {
        return true;
    }
    let Some(presented) = presented_key(headers) else { return false };
    keys.iter().any(|key| constant_time_eq(key.expose().as_bytes(), presented.as_bytes()))
}

/// The gateway key the client sent (`Authorization: Bearer`, `x-api-key`, or Azure's
/// `api-key`), trimmed.
pub(crate) fn presented_key(headers: &HeaderMap) -> Option<&str> {
    headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(bearer)
        .or_else(|| headers.get(names::API_KEY).and_then(|v| v.to_str().ok()))
        .or_else(|| headers.get("api-key").and_then(|v| v.to_str().ok()))
        .map(str::trim)
}

/// The credentials of an `Authorization` value of the `Bearer` scheme, whose name is
/// case-insensitive (RFC 9110) and followed by spaces or tabs.
fn bearer(authorization: &str) -> Option<&str> {
    let (scheme, credentials) = authorization.split_once([' ', '\t'])?;
    scheme.eq_ignore_ascii_case("bearer").then_some(credentials)
}

/// Whether an `Authorization` header is sent that is not of the `Bearer` scheme (`Basic`, or
/// a bare key).
fn other_scheme(headers: &HeaderMap) -> bool {
    headers.get(header::AUTHORIZATION).is_some_and(|v| v.to_str().ok().and_then(bearer).is_none())
}

/// The refusal of a request without a valid gateway key, saying how to send one.
pub(crate) fn unauthorized(headers: &HeaderMap) -> ApiError {
    refusal(headers, ("the gateway key is not valid", "a gateway key is required"))
}

/// The refusal of an `/admin` request without the admin key (`gateway.admin_key`), saying so:
/// a client key is not it.
pub(crate) fn admin_unauthorized(headers: &HeaderMap) -> ApiError {
    refusal(
        headers,
        (
            "the admin key is not valid (`gateway.admin_key`; a client key opens /admin only when none is set)",
            "the admin key (`gateway.admin_key`) is required",
        ),
    )
}

/// A 401 saying `invalid` when a key was sent, else `required` and how to send one.
fn refusal(headers: &HeaderMap, (invalid, required): (&str, &str)) -> ApiError {
    let presented = headers.contains_key(header::AUTHORIZATION)
        || headers.contains_key(names::API_KEY)
        || headers.contains_key("api-key");
    let message = match presented {
        // What was sent is never quoted: a bare key would be.
        true if other_scheme(headers) => {
            format!(
                "{invalid}: `Authorization` is not of the `Bearer` scheme; send `Authorization: Bearer <key>`"
            )
        }
        true => invalid.to_owned(),
        false => format!(
            "{required}: send it as `Authorization: Bearer <key>`, `x-api-key: <key>` or (Azure's clients) `api-key: <key>`"
        ),
    };
    ApiError::new(StatusCode::UNAUTHORIZED, "unauthorized", message)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(authorization: &str) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert(header::AUTHORIZATION, authorization.parse().unwrap());
        headers
    }

    #[test]
    fn the_bearer_scheme_is_read_whatever_its_case_and_the_blanks_after_it() {
        for sent in ["Bearer sk-1", "bearer sk-1", "BEARER sk-1", "Bearer\tsk-1", "Bearer   sk-1 "] {
            assert_eq!(presented_key(&headers(sent)), Some("sk-1"), "{sent}");
        }
        for sent in ["Basic sk-1", "Bearersk-1", "sk-1"] {
            assert_eq!(presented_key(&headers(sent)), None, "{sent}");
        }
    }

    #[test]
    fn a_refusal_of_another_scheme_says_so_without_quoting_what_was_sent() {
        for sent in ["Basic c2stc2VjcmV0", "sk-secret-1"] {
            let refusal = unauthorized(&headers(sent));
            let text = format!("{refusal:?}");
            assert!(text.contains("is not of the `Bearer` scheme"), "{text}");
            assert!(!text.contains("c2stc2VjcmV0") && !text.contains("sk-secret-1"), "{text}");
        }
        let text = format!("{:?}", unauthorized(&headers("Bearer sk-wrong")));
        assert!(!text.contains("scheme") && !text.contains("sk-wrong"), "{text}");
    }
}
