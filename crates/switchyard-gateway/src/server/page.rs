//! `GET /admin/`: the operator page, one HTML file embedded in the binary with its styles and
//! script inline, nothing fetched from elsewhere. The page itself holds no data: it asks for
//! the admin key when the gateway has one, then reads `/admin/health` and `/admin/requests`
//! once and follows `/admin/events` from there.

use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Redirect, Response};

const PAGE: &str = include_str!("operator.html");

pub async fn page() -> Response {
    let mut response = PAGE.into_response();
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("text/html; charset=utf-8"));
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    // Inline script and style only; it talks to this gateway and nothing else.
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(
            "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; connect-src 'self'; img-src data:; base-uri 'none'; frame-ancestors 'none'",
        ),
    );
    headers.insert(header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    response
}

pub async fn redirect() -> Redirect {
    Redirect::permanent("/admin/")
}
